#include "index/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace spattn {
namespace {

// RFC 3720 (iSCSI) appendix B.4 test vectors and the classic check value.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
  std::string ascending(32, 0);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  std::string descending(32, 0);
  for (int i = 0; i < 32; ++i) descending[i] = static_cast<char>(31 - i);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, HardwareMatchesSoftwareAtEveryAlignmentAndLength) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4096 + 16);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      SCOPED_TRACE(testing::Message()
                   << "offset=" << offset << " n=" << n << " hardware=" << Crc32cHasHardware());
      EXPECT_EQ(Crc32cExtend(0, buf.data() + offset, n),
                Crc32cExtendSoftware(0, buf.data() + offset, n));
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string data = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t split = 0; split <= data.size(); ++split) {
    uint32_t c = Crc32cExtend(0, data.data(), split);
    c = Crc32cExtend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, Crc32c(data)) << "split=" << split;
  }
}

}  // namespace
}  // namespace spattn
