// spattnctl-index: `spattnctl index` as its own binary (until the main spattnctl hooks it in).
#include "client/index_commands.h"

int main(int argc, char** argv) { return spattn::RunIndexCommand(argc - 1, argv + 1); }
