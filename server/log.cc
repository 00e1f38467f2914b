#include "server/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace spattn {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void AppendValue(std::string* line, absl::string_view v) {
  const bool plain = !v.empty() && v.find_first_of(" \"=\n\t\\") == absl::string_view::npos;
  if (plain) {
    line->append(v.data(), v.size());
    return;
  }
  line->push_back('"');
  for (char c : v) {
    if (c == '"' || c == '\\') {
      line->push_back('\\');
      line->push_back(c);
    } else if (c == '\n') {
      line->append("\\n");
    } else {
      line->push_back(c);
    }
  }
  line->push_back('"');
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool ParseLogLevel(absl::string_view name, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (name == LevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      " level=", LevelName(level), " event=");
  AppendValue(&line, event);
  for (const LogField& f : fields) {
    absl::StrAppend(&line, " ", f.first, "=");
    AppendValue(&line, f.second);
  }
  line.push_back('\n');
  // One write per line keeps concurrent lines whole.
  const ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace spattn
