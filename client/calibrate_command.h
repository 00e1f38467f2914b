// `spattnctl calibrate ...`: the offline step run once per model before serving. Runs the
// kernel-aware per-head pattern search (kernels/calibration/pattern_search.h) on calibration
// prompts of each layer (synthetic, or Q/K/V captured from the model), prints a per-head table,
// and writes the choices as spattn JSON (`--out`, what `spattnctl index configs import` reads)
// and/or publishes them as a new version of the model in the index service (`--publish`), Saap
// centroids and classifiers included where Saap was chosen. Run `spattnctl calibrate help`.
#ifndef SPATTN_CLIENT_CALIBRATE_COMMAND_H_
#define SPATTN_CLIENT_CALIBRATE_COMMAND_H_

namespace spattn {

// argv holds the words after `spattnctl calibrate` (argv[0] is the first of them). Prints the
// table and progress to stdout, errors to stderr. Returns 0 on success, 1 when the search or the
// index service failed, 2 on a usage error. Thread-compatible (uses stdout and CpuThreads()).
int RunCalibrateCommand(int argc, char** argv);

}  // namespace spattn

#endif  // SPATTN_CLIENT_CALIBRATE_COMMAND_H_
