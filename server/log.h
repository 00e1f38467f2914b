// Structured logs: one logfmt line per event on stderr, e.g.
//   ts=2024-05-01T10:00:00.123Z level=info event=request_done request_id=r1 rpc=ComputeAttention
//   code=OK seconds=0.0123
// Values with spaces or quotes are quoted. Thread-safe (each line is one write).
#ifndef SPATTN_SERVER_LOG_H_
#define SPATTN_SERVER_LOG_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace spattn {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Default: kInfo.
void SetLogLevel(LogLevel level);
// "debug", "info", "warning", "error"; false when the name is unknown.
bool ParseLogLevel(absl::string_view name, LogLevel* level);

using LogField = std::pair<absl::string_view, std::string>;
void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields = {});

}  // namespace spattn

#endif  // SPATTN_SERVER_LOG_H_
