// The command line of every spattn binary (spattnctl and its subcommands, spattn-bench, the
// servers): one parser, so that flags read the same everywhere.
//
// Syntax: `--name=value`; `--name value` for a flag that takes a value; a bare `--name` (or
// `--name=true|false`) for a boolean flag; `--` ends the flags. Words that are not flags are
// positional (subcommands, files). Values are converted with Abseil's flag marshalling
// (`absl::ParseFlag`), so numbers, booleans and lists are spelt alike in every binary.
//
// Why not `ABSL_FLAG` globals with `absl::ParseCommandLine`: spattnctl's subcommands give one name
// different meanings (`--layer`, `--out`, `--model`), `spattnctl index` has `--version=V`
// (Abseil's built-in `--version` takes no value), spattn-bench takes names generated from the
// method parameter table (`--vertical_slash.last_q=64`), and tests run the commands in-process
// many times, where `ParseCommandLine` exits the process on a bad flag. Here a command reads the
// flags it knows and `CheckAllUsed()` turns every other one into "unknown flag --name".
//
// Not thread-safe; one instance per command run.
#ifndef SPATTN_CLIENT_FLAGS_H_
#define SPATTN_CLIENT_FLAGS_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace spattn {

class CommandLine {
 public:
  struct Options {
    // Flags that take no value (`--name` alone means true). Default: none (besides `help`).
    std::set<std::string> boolean;
    // Whether words that are not flags are accepted. Default: true.
    bool positional = true;
  };

  // Parses `words` (without the program name).
  static absl::StatusOr<CommandLine> Parse(absl::Span<const std::string> words,
                                           const Options& options);
  static absl::StatusOr<CommandLine> Parse(int argc, char** argv, const Options& options);

  // Whether --name was given (does not count as reading it).
  bool Has(const std::string& name) const {
    return values_.count(name) > 0 || missing_.count(name) > 0;
  }

  // The last value of --name, or `fallback`.
  std::string Get(const std::string& name, const std::string& fallback = "");
  // Every value of a repeated --name, in order.
  std::vector<std::string> GetAll(const std::string& name);

  // --name converted to T (absl::ParseFlag), or `fallback` when absent. Errors name the flag:
  // "--seq_len: not an integer: 'abc'".
  template <typename T>
  absl::StatusOr<T> Value(const std::string& name, T fallback) {
    used_.insert(name);
    if (missing_.count(name) > 0) return NeedsValue(name);
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    T v;
    std::string error;
    if (!absl::ParseFlag(it->second.back(), &v, &error))
      return BadValue<T>(name, it->second.back());
    return v;
  }
  // Stores --name into *out when given (leaves it alone otherwise).
  template <typename T>
  absl::Status Read(const std::string& name, T* out) {
    absl::StatusOr<T> v = Value<T>(name, *out);
    if (!v.ok()) return v.status();
    *out = *std::move(v);
    return absl::OkStatus();
  }
  // A boolean flag: false when absent; "--name", "--name=true|1|yes" are true.
  absl::StatusOr<bool> Bool(const std::string& name) { return Value<bool>(name, false); }

  const std::vector<std::string>& positional() const { return positional_; }
  // Names given, in first-seen order (e.g. for flags whose names are generated).
  const std::vector<std::string>& names() const { return order_; }
  // Marks --name as read by the command.
  void MarkUsed(const std::string& name) { used_.insert(name); }

  // INVALID_ARGUMENT "unknown flag --name" for the first flag given but never read, or
  // "--name: needs a value" for one read but given without its value.
  absl::Status CheckAllUsed() const;

 private:
  template <typename T>
  static absl::Status BadValue(const std::string& name, const std::string& value) {
    const char* what = std::is_same_v<T, bool>       ? "expected true or false"
                       : std::is_integral_v<T>       ? "not an integer"
                       : std::is_floating_point_v<T> ? "not a number"
                                                     : "bad value";
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", what, ": '", value, "'"));
  }

  static absl::Status NeedsValue(const std::string& name);

  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> missing_;  // non-boolean flags given without a value
  std::vector<std::string> order_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
};

// A binary's main() flag handling, one way for every server and benchmark binary: parse argv
// (flags only, no positional words), answer --help (also -h and Abseil's --helpfull) with the
// usage and --version (when `version` is set) with "<program> <version>", then let `read` take
// the flags (it should end with CheckAllUsed). A parse or `read` error prints
// "<program>: <message>" and the usage to stderr.
struct MainFlags {
  const char* program = "";       // e.g. "spattn-index"
  std::function<void()> usage;    // prints the usage (to stderr)
  const char* version = nullptr;  // Default: null (no --version flag).
  std::set<std::string> boolean;  // boolean flags besides help / version. Default: none.
  std::function<absl::Status(CommandLine& line)> read;  // reads the flags
};

// -1 when main() should go on (the flags were read), else its exit status: 0 after --help or
// --version, 2 after a usage error.
int HandleMainFlags(int argc, char** argv, const MainFlags& flags);

}  // namespace spattn

#endif  // SPATTN_CLIENT_FLAGS_H_
