#include "client/flags.h"

#include <cstdio>

namespace spattn {

absl::StatusOr<CommandLine> CommandLine::Parse(absl::Span<const std::string> words,
                                               const Options& options) {
  CommandLine c;
  bool flags_ended = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (flags_ended || w.size() <= 2 || w.compare(0, 2, "--") != 0) {
      if (w == "--" && !flags_ended) {
        flags_ended = true;
        continue;
      }
      if (!options.positional) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", w, "'"));
      }
      c.positional_.push_back(w);
      continue;
    }
    std::string name = w.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name == "help" || options.boolean.count(name) > 0) {
      value = "true";
    } else if (i + 1 < words.size() && words[i + 1].compare(0, 2, "--") != 0) {
      value = words[++i];
    } else {
      // An error once the command reads it; "unknown flag" if it never does.
      if (c.values_.count(name) == 0 && c.missing_.insert(name).second) c.order_.push_back(name);
      continue;
    }
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("bad flag '", w, "'"));
    if (c.values_.count(name) == 0 && c.missing_.erase(name) == 0) c.order_.push_back(name);
    c.values_[name].push_back(std::move(value));
  }
  return c;
}

absl::Status CommandLine::NeedsValue(const std::string& name) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, ": needs a value"));
}

absl::StatusOr<CommandLine> CommandLine::Parse(int argc, char** argv, const Options& options) {
  std::vector<std::string> words(argv, argv + argc);
  return Parse(words, options);
}

std::string CommandLine::Get(const std::string& name, const std::string& fallback) {
  used_.insert(name);
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> CommandLine::GetAll(const std::string& name) {
  used_.insert(name);
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

absl::Status CommandLine::CheckAllUsed() const {
  for (const std::string& name : order_) {
    if (used_.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  for (const std::string& name : order_) {
    if (missing_.count(name) > 0) return NeedsValue(name);
  }
  return absl::OkStatus();
}

int HandleMainFlags(int argc, char** argv, const MainFlags& flags) {
  CommandLine::Options options;
  options.positional = false;
  options.boolean = flags.boolean;
  if (flags.version != nullptr) options.boolean.insert("version");
  std::vector<std::string> words(argv + 1, argv + argc);
  for (std::string& w : words) {
    if (w == "--helpfull" || w == "-h") w = "--help";
  }
  absl::StatusOr<CommandLine> line = CommandLine::Parse(words, options);
  if (line.ok() && line->Bool("help").value_or(true)) {
    flags.usage();
    return 0;
  }
  if (line.ok() && flags.version != nullptr && line->Bool("version").value_or(false)) {
    std::printf("%s %s\n", flags.program, flags.version);
    return 0;
  }
  absl::Status s = line.status();
  if (s.ok()) s = flags.read(*line);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", flags.program, std::string(s.message()).c_str());
    flags.usage();
    return 2;
  }
  return -1;
}

}  // namespace spattn
