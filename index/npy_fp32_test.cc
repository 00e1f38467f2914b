#include "index/npy_fp32.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

std::string Floats(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// What numpy (>= 1.9, 64-byte alignment) writes for np.arange(6, dtype='<f4').reshape(2, 3).
std::string NumpyStyle() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size()));
  out.push_back(0);
  return out + header + Floats({0, 1, 2, 3, 4, 5});
}

TEST(NpyFp32Test, EncodesLikeNumpy) {
  EXPECT_EQ(EncodeNpyFp32({2, 3}, Floats({0, 1, 2, 3, 4, 5})), NumpyStyle());
}

TEST(NpyFp32Test, RoundTripsShapes) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{5}, {2, 3}, {2, 1, 3, 4}, {}, {0, 4}}) {
    size_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = 0.5f * i - 3;
    const std::string file = EncodeNpyFp32(shape, Floats(values));
    EXPECT_EQ((file.size() - Floats(values).size()) % 64, 0u);
    absl::StatusOr<NpyFp32> parsed = ParseNpyFp32(file);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " rank " << shape.size();
    EXPECT_EQ(parsed->shape, shape);
    EXPECT_EQ(parsed->bytes, Floats(values));
  }
}

TEST(NpyFp32Test, ReadsOlderAlignmentAndVersion2) {
  // 16-byte aligned header (old numpy), double-quoted keys, no trailing comma.
  std::string header = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,)}";
  header.append((16 - (10 + header.size() + 1) % 16) % 16, ' ');
  header.push_back('\n');
  std::string v1("\x93NUMPY\x01\x00", 8);
  v1.push_back(static_cast<char>(header.size()));
  v1.push_back(0);
  absl::StatusOr<NpyFp32> a = ParseNpyFp32(v1 + header + Floats({1, 2, 3}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, std::vector<int64_t>{3});
  std::string v2("\x93NUMPY\x02\x00", 8);
  const uint32_t len = header.size();
  v2.append(reinterpret_cast<const char*>(&len), 4);
  absl::StatusOr<NpyFp32> b = ParseNpyFp32(v2 + header + Floats({1, 2, 3}));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->bytes, Floats({1, 2, 3}));
}

TEST(NpyFp32Test, RefusesWhatItCannotRead) {
  std::string good = NumpyStyle();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_EQ(ParseNpyFp32("hello").status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status f8 = ParseNpyFp32(with("<f4", "<f8")).status();
  EXPECT_EQ(f8.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f8.message().find("float32"), std::string::npos) << f8;
  EXPECT_EQ(ParseNpyFp32(with("<f4", ">f4")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpyFp32(with("False", "True ")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpyFp32(good.substr(0, good.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNpyFp32(with("(2, 3)", "(2, x)")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadNpyFp32("/nonexistent/file.npy").status().code(), absl::StatusCode::kNotFound);
}

TEST(NpyFp32Test, WritesFiles) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/x.npy");
  ASSERT_TRUE(WriteNpyFp32(path, {2, 2}, Floats({1, 2, 3, 4})).ok());
  absl::StatusOr<NpyFp32> back = ReadNpyFp32(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(back->bytes, Floats({1, 2, 3, 4}));
}

}  // namespace
}  // namespace spattn
