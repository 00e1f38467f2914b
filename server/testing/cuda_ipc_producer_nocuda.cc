// The build without CUDA: the producer cannot allocate GPU memory and says so.
#include <iostream>

int main() {
  std::cerr << "cuda_ipc_producer: built without CUDA\n";
  return 1;
}
