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

}  // namespace
}  // namespace spattn
