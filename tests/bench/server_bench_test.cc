// spattn-server-bench on a small problem through the CPU worker (what CI can run): every line
// parses, carries the timings, and the shared-memory output equals the inline one. GPU lines
// (CUDA IPC, copy times) are covered by the GPU-machine runs recorded in README.md.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/bench/server_bench_lib.h"

namespace spattn {
namespace {

TEST(ServerBenchTest, FlagsAreChecked) {
  EXPECT_TRUE(ParseServerBenchFlags({"--seq_lens=128,256", "--methods", "dense"}).ok());
  EXPECT_FALSE(ParseServerBenchFlags({"--seq_lens=0"}).ok());
  EXPECT_FALSE(ParseServerBenchFlags({"--transports=pigeon"}).ok());
  EXPECT_FALSE(ParseServerBenchFlags({"--methods=nope"}).ok());
  EXPECT_FALSE(ParseServerBenchFlags({"--heads=3", "--kv_heads=2"}).ok());
  EXPECT_FALSE(ParseServerBenchFlags({"--bogus=1"}).ok());
  std::ostringstream out, err;
  EXPECT_EQ(RunServerBench({"--repeat=0"}, out, err), 2);
}

TEST(ServerBenchTest, InlineAndSharedMemoryOnTheCpuWorker) {
  std::ostringstream out, err;
  const int rc =
      RunServerBench({"--devices=cpu", "--seq_lens=192", "--heads=2", "--kv_heads=1",
                      "--head_dim=64", "--methods=dense,a_shape", "--warmup=1", "--repeat=3"},
                     out, err);
  ASSERT_EQ(rc, 0) << err.str();
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  for (const std::string& line : lines) {
    EXPECT_EQ(line.front(), '{') << line;
    EXPECT_EQ(line.back(), '}') << line;
    EXPECT_EQ(line.find("\"error\""), std::string::npos) << line;
    EXPECT_EQ(line.find("\"skipped\""), std::string::npos) << line;
    EXPECT_NE(line.find("\"device\":\"cpu\""), std::string::npos) << line;
    for (const char* field :
         {"\"call_p50_ms\":", "\"call_p99_ms\":", "\"kernel_p50_ms\":", "\"overhead_p50_ms\":",
          "\"overhead_pct_of_kernel\":", "\"calls\":3"}) {
      EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
    }
  }
  EXPECT_NE(lines[0].find("\"transport\":\"inline\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"transport\":\"shm\""), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"output_matches_inline\":true"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("\"output_matches_inline\":true"), std::string::npos) << lines[3];
  EXPECT_NE(lines[2].find("\"method\":\"a_shape\""), std::string::npos) << lines[2];
}

}  // namespace
}  // namespace spattn
