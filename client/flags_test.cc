#include "client/flags.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace spattn {
namespace {

CommandLine::Options Booleans(std::set<std::string> names) {
  CommandLine::Options o;
  o.boolean = std::move(names);
  return o;
}

CommandLine::Options NoPositional() {
  CommandLine::Options o;
  o.positional = false;
  return o;
}

CommandLine MustParse(const std::vector<std::string>& words,
                      const CommandLine::Options& options = {}) {
  absl::StatusOr<CommandLine> c = CommandLine::Parse(words, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : CommandLine();
}

TEST(CommandLineTest, FormsOfAFlag) {
  CommandLine c = MustParse({"models", "--a=1", "--b", "2", "--force", "list", "--", "--c=3"},
                            Booleans({"force"}));
  EXPECT_EQ(c.positional(), (std::vector<std::string>{"models", "list", "--c=3"}));
  EXPECT_EQ(*c.Value<int>("a", 0), 1);
  EXPECT_EQ(*c.Value<int64_t>("b", 0), 2);
  EXPECT_TRUE(*c.Bool("force"));
  EXPECT_FALSE(*c.Bool("absent"));
  EXPECT_EQ(*c.Value<double>("absent", 2.5), 2.5);
  EXPECT_TRUE(c.CheckAllUsed().ok());
}

TEST(CommandLineTest, ValuesAreParsedByTypeAndErrorsNameTheFlag) {
  CommandLine c = MustParse({"--n=abc", "--x=1e", "--flag=maybe", "--s=text", "--l=a,b"});
  EXPECT_TRUE(absl::StrContains(c.Value<int>("n", 0).status().message(), "--n: not an integer"));
  EXPECT_TRUE(absl::StrContains(c.Value<double>("x", 0).status().message(), "--x: not a number"));
  EXPECT_TRUE(absl::StrContains(c.Bool("flag").status().message(), "--flag: expected true"));
  EXPECT_EQ(c.Get("s"), "text");
  EXPECT_EQ(*c.Value<std::vector<std::string>>("l", {}), (std::vector<std::string>{"a", "b"}));
}

TEST(CommandLineTest, RepeatedFlagsKeepEveryValue) {
  CommandLine c = MustParse({"--param", "a.x=1", "--param=b.y=2"});
  EXPECT_EQ(c.GetAll("param"), (std::vector<std::string>{"a.x=1", "b.y=2"}));
  EXPECT_EQ(c.Get("param"), "b.y=2");
}

TEST(CommandLineTest, UnreadFlagsAreUnknown) {
  CommandLine c = MustParse({"--known=1", "--typo=2"});
  c.Get("known");
  EXPECT_EQ(c.CheckAllUsed().message(), "unknown flag --typo");
  c.MarkUsed("typo");
  EXPECT_TRUE(c.CheckAllUsed().ok());
}

TEST(CommandLineTest, UsageErrors) {
  CommandLine c = MustParse({"--seq_len", "--bogus"});
  EXPECT_EQ(c.Value<int>("seq_len", 0).status().message(), "--seq_len: needs a value");
  EXPECT_EQ(c.CheckAllUsed().message(), "unknown flag --bogus");
  c.MarkUsed("bogus");
  EXPECT_EQ(c.CheckAllUsed().message(), "--seq_len: needs a value");
  EXPECT_TRUE(absl::StrContains(CommandLine::Parse({"extra"}, NoPositional()).status().message(),
                                "unexpected argument 'extra'"));
  EXPECT_TRUE(*MustParse({"--help"}).Bool("help"));
}

// HandleMainFlags: what every binary's main() does with its command line (exit statuses 0 for
// --help / -h / --helpfull / --version, 2 for a usage error, -1 to go on with the flags read).
int RunMain(std::vector<std::string> args, const char* version, int* usage_calls, int* limit,
            std::string* stdout_text) {
  std::vector<char*> argv;
  std::string program = "prog";
  argv.push_back(program.data());
  for (std::string& a : args) argv.push_back(a.data());
  MainFlags flags;
  flags.program = "prog";
  flags.usage = [usage_calls] { ++*usage_calls; };
  flags.version = version;
  flags.read = [limit](CommandLine& line) -> absl::Status {
    absl::Status s = line.Read("limit", limit);
    if (!s.ok()) return s;
    return line.CheckAllUsed();
  };
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = HandleMainFlags(static_cast<int>(argv.size()), argv.data(), flags);
  *stdout_text = testing::internal::GetCapturedStdout();
  (void)testing::internal::GetCapturedStderr();
  return rc;
}

TEST(HandleMainFlagsTest, HelpVersionUsageErrorsAndFlags) {
  int usage = 0, limit = 7;
  std::string out;
  for (const char* help : {"--help", "-h", "--helpfull"}) {
    usage = 0;
    EXPECT_EQ(RunMain({help}, "1.2", &usage, &limit, &out), 0) << help;
    EXPECT_EQ(usage, 1) << help;
  }
  usage = 0;
  EXPECT_EQ(RunMain({"--version"}, "1.2", &usage, &limit, &out), 0);
  EXPECT_EQ(out, "prog 1.2\n");
  EXPECT_EQ(usage, 0);
  // Without a version, --version is an unknown flag: usage error.
  EXPECT_EQ(RunMain({"--version"}, nullptr, &usage, &limit, &out), 2);
  EXPECT_EQ(usage, 1);
  EXPECT_EQ(RunMain({"--limit=many"}, nullptr, &usage, &limit, &out), 2);
  EXPECT_EQ(RunMain({"--no_such=1"}, nullptr, &usage, &limit, &out), 2);
  EXPECT_EQ(RunMain({"positional"}, nullptr, &usage, &limit, &out), 2);
  EXPECT_EQ(usage, 4);
  EXPECT_EQ(limit, 7);
  EXPECT_EQ(RunMain({"--limit", "12"}, "1.2", &usage, &limit, &out), -1);
  EXPECT_EQ(limit, 12);
  EXPECT_EQ(usage, 4);
}

}  // namespace
}  // namespace spattn
