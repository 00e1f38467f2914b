// `spattnctl index ...`: command-line access to the index service (models, versions, head
// configs incl. MInference's per-head JSON, centroids / classifier weights as .npy, publish,
// watch, backups). Run with no arguments (or `help`) for the usage text.
#ifndef SPATTN_CLIENT_INDEX_COMMANDS_H_
#define SPATTN_CLIENT_INDEX_COMMANDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spattn/v1/index_service.pb.h"

namespace spattn {

// argv holds the words after `spattnctl index` (argv[0] is the first of them). Prints results to
// stdout and errors to stderr. Returns 0 on success, 1 when the service refused or failed, 2 on
// a usage error. Thread-compatible (uses stdout).
int RunIndexCommand(int argc, char** argv);

// Parses MInference's per-head pattern config (a JSON list with one object per layer,
// {"<head>": [pattern, vertical_size, slash_size, score]}) into head configs:
// vertical_and_slash -> VERTICAL_SLASH(vertical_size, slash_size), stream_llm -> A_SHAPE
// (sink_tokens = vertical_size, local_tokens = slash_size), block_sparse -> BLOCK_SPARSE
// (top_k = vertical_size), dense -> DENSE; the score becomes search_score.
absl::StatusOr<v1::PutHeadConfigsRequest> ParseMInferenceConfig(absl::string_view json);

// Our own format: the JSON mapping of GetHeadConfigsResponse (what `configs export` writes);
// only `configs` is read.
absl::StatusOr<v1::PutHeadConfigsRequest> ParseSpattnConfig(absl::string_view json);

}  // namespace spattn

#endif  // SPATTN_CLIENT_INDEX_COMMANDS_H_
