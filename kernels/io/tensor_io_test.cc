#include "kernels/io/tensor_io.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

std::string TmpPath(absl::string_view name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

std::string Hex(absl::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// An .npy file as numpy writes it: magic, version, header length, the dict padded with spaces so
// that the whole header is 128 bytes, then the data.
std::string NumpyFile(int major, absl::string_view dict, absl::string_view data) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t prefix = major == 1 ? 10 : 12;
  const size_t len = 128 - prefix;
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  if (major != 1) out.append(2, '\0');
  std::string header(dict);
  header.append(len - header.size() - 1, ' ');
  header.push_back('\n');
  return out + header + std::string(data);
}

HostTensor Make(DType t, std::vector<int64_t> shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  auto tensor = HostTensor::FromFloats(v, shape, t);
  EXPECT_TRUE(tensor.ok());
  return *tensor;
}

void ExpectSameTensor(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.bytes, b.bytes);
}

// Bytes np.save wrote (numpy 1.24) for np.arange(6, dtype='<f4').reshape(2, 3) * 0.5 - 1.
TEST(NpyTest, ReadsAndWritesExactlyWhatNumpyWrites) {
  const std::string file =
      NumpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                Hex("000080bf000000bf000000000000003f0000803f0000c03f"));
  auto t = ParseNpy(file, "arange.npy");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->ToFloats(), (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}));
  auto again = SerializeNpy(*t);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, file);
}

// numpy's version 2.0 header (np.lib.format.write_array(..., version=(2, 0))), fp16.
TEST(NpyTest, ReadsVersion2AndFp16) {
  const std::string file = NumpyFile(2, "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }",
                                     Hex("003e00c0ff7b"));
  auto t = ParseNpy(file, "half.npy");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kF16);
  EXPECT_EQ(t->ToFloats(), (std::vector<float>{1.5, -2, 65504}));
}

// bf16 bits under every accepted descr: '|V2' is what np.save writes for ml_dtypes.bfloat16.
TEST(NpyTest, AcceptsEveryBf16Convention) {
  for (const char* descr : {"|V2", "<V2", "bfloat16", "<u2", "<i2"}) {
    const std::string file = NumpyFile(
        1, absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (2,), }"),
        Hex("803f00c0"));
    auto t = ParseNpy(file, "bf16.npy");
    ASSERT_TRUE(t.ok()) << descr << ": " << t.status();
    EXPECT_EQ(t->dtype, DType::kBF16) << descr;
    EXPECT_EQ(t->ToFloats(), (std::vector<float>{1, -2})) << descr;
  }
}

TEST(NpyTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{4, 3, 8}, {7}, {}, {0, 5}, {1, 1, 1, 3}};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& shape : shapes) {
      const HostTensor in = Make(t, shape, 5);
      const std::string path = TmpPath(absl::StrCat("rt_", DTypeName(t), shape.size(), ".npy"));
      ASSERT_TRUE(WriteNpy(path, in).ok());
      auto out = ReadNpy(path);
      ASSERT_TRUE(out.ok()) << in.DebugString() << ": " << out.status();
      ExpectSameTensor(in, *out);
      auto spec = ReadTensorSpec(path);
      ASSERT_TRUE(spec.ok());
      ExpectSameTensor(in, *spec);
    }
  }
}

// Messages name the source and the problem.
void ExpectBad(absl::string_view data, absl::string_view needle) {
  auto t = ParseNpy(data, "bad.npy");
  ASSERT_FALSE(t.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "bad.npy: ")) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), needle)) << t.status();
}

TEST(NpyTest, MalformedFilesGiveClearErrors) {
  const std::string data = Hex("0000803f00000040");  // two floats
  auto dict = [](absl::string_view descr, absl::string_view fortran, absl::string_view shape) {
    return absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", fortran, ", 'shape': ", shape,
                        ", }");
  };
  ExpectBad("PK\x03\x04 not numpy", "bad magic");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(2,)"), data).replace(6, 1, "\x07"),
            "unsupported .npy format version 7.0");
  ExpectBad(NumpyFile(1, dict("<f4", "True", "(2,)"), data), "fortran_order True");
  ExpectBad(NumpyFile(1, dict(">f4", "False", "(2,)"), data), "'>f4' (big-endian)");
  ExpectBad(NumpyFile(1, dict("<f8", "False", "(1,)"), data), "unsupported dtype '<f8'");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(3,)"), data), "truncated: shape [3]");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(1,)"), data), "(4 extra)");
  ExpectBad(NumpyFile(1, "{'descr': '<f4', 'shape': (2,), }", data), "lacks 'fortran_order'");
  ExpectBad(NumpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data),
            "unexpected key 'x'");
  ExpectBad(NumpyFile(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", data),
            "structured dtypes");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(2, -1)"), data), "non-integer");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(99999999999999999999,)"), data), "too large");
  ExpectBad(NumpyFile(1, dict("<f4", "False", "(4294967296, 4294967296)"), data), "too large");
  // Header length fields: past the end, absurdly long, not newline-terminated.
  std::string past = NumpyFile(1, dict("<f4", "False", "(2,)"), "");
  past[8] = '\xff';
  ExpectBad(past, "runs past the end");
  std::string huge = NumpyFile(2, dict("<f4", "False", "(2,)"), data);
  huge[11] = '\x10';  // 268 MB header length
  ExpectBad(huge, "header too long");
  std::string unterminated = NumpyFile(1, dict("<f4", "False", "(2,)"), data);
  unterminated[127] = ' ';
  ExpectBad(unterminated, "not ending in a newline");
  std::string empty_header("\x93NUMPY\x01\x00\x00\x00", 10);
  ExpectBad(empty_header, "header too short");
}

TEST(NpyTest, MissingFileIsNotFound) {
  auto t = ReadNpy(TmpPath("does_not_exist.npy"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "does_not_exist.npy"));
}

TEST(NpyTest, SerializeRefusesInconsistentTensor) {
  HostTensor t = Make(DType::kF32, {2, 2}, 1);
  t.bytes.pop_back();
  EXPECT_EQ(SerializeNpy(t).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every truncation of a valid file is an error (never a crash, never a short tensor); random
// byte flips either parse to a consistent tensor or fail cleanly.
TEST(NpyTest, EveryTruncationAndByteFlipIsHandled) {
  const HostTensor t = Make(DType::kBF16, {3, 5}, 2);
  auto file = SerializeNpy(t);
  ASSERT_TRUE(file.ok());
  for (size_t n = 0; n < file->size(); ++n) {
    auto r = ParseNpy(absl::string_view(*file).substr(0, n), "cut.npy");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  std::mt19937 rng(17);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutated = *file;
    const size_t at = rng() % 128;  // within the header
    mutated[at] = static_cast<char>(rng() & 0xff);
    auto r = ParseNpy(mutated, "flip.npy");
    if (r.ok()) {
      EXPECT_EQ(static_cast<int64_t>(r->bytes.size()), r->num_elements() * DTypeSize(r->dtype));
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// A file laid out by hand the way the safetensors library writes one.
std::string SafetensorsFile(absl::string_view header, absl::string_view data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + std::string(header) + std::string(data);
}

TEST(SafetensorsTest, ParsesHandWrittenFile) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"k":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("q":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
      R"("v\u00e9":{"dtype":"F16","shape":[],"data_offsets":[12,14]}}  )";
  const std::string file =
      SafetensorsFile(header, Hex("0000803f00000040") + Hex("803f00c0") + Hex("003e"));
  std::map<std::string, std::string> meta;
  auto all = ParseSafetensors(file, "model.safetensors", &meta);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(meta["format"], "pt");
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(all->at("q").dtype, DType::kF32);
  EXPECT_EQ(all->at("q").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(all->at("q").ToFloats(), (std::vector<float>{1, 2}));
  EXPECT_EQ(all->at("k").ToFloats(), (std::vector<float>{1, -2}));
  EXPECT_EQ(all->at("v\xc3\xa9").ToFloats(), (std::vector<float>{1.5}));
  EXPECT_TRUE(all->at("v\xc3\xa9").shape.empty());
}

TEST(SafetensorsTest, RoundTripsAndSpecsPickTensors) {
  NamedTensors in;
  in["q"] = Make(DType::kBF16, {16, 4, 8}, 1);
  in["k"] = Make(DType::kF16, {16, 2, 8}, 2);
  in["v \"quoted\""] = Make(DType::kF32, {16, 2, 8}, 3);
  const std::string path = TmpPath("qkv.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, in, {{"model", "test"}}).ok());
  std::map<std::string, std::string> meta;
  auto out = ReadSafetensors(path, &meta);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(meta.at("model"), "test");
  ASSERT_EQ(out->size(), 3u);
  for (const auto& [name, t] : in) ExpectSameTensor(t, out->at(name));
  auto q = ReadTensorSpec(path + ":q");
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectSameTensor(in["q"], *q);
  EXPECT_EQ(ReadTensorSpec(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTensorSpec(path + ":nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadTensorSpec(TmpPath("x.bin")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTensorSpec(TmpPath("missing.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
  // Single-tensor file: no name needed.
  NamedTensors one;
  one["only"] = in["k"];
  ASSERT_TRUE(WriteSafetensors(TmpPath("one.safetensors"), one).ok());
  auto only = ReadTensorSpec(TmpPath("one.safetensors"));
  ASSERT_TRUE(only.ok()) << only.status();
  ExpectSameTensor(in["k"], *only);
}

void ExpectBadSt(absl::string_view file, absl::string_view needle) {
  auto t = ParseSafetensors(file, "bad.safetensors");
  ASSERT_FALSE(t.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "bad.safetensors: ")) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), needle)) << t.status();
}

TEST(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const std::string data = Hex("0000803f00000040");
  auto one = [&](absl::string_view info) {
    return SafetensorsFile(absl::StrCat(R"({"x":)", info, "}"), data);
  };
  ExpectBadSt("abc", "too short for the 8-byte header length");
  ExpectBadSt(SafetensorsFile("", data), "header too short");
  std::string huge = SafetensorsFile("{}", "");
  huge[6] = '\x01';
  ExpectBadSt(huge, "header too long");
  std::string past = SafetensorsFile("{}", "");
  past[0] = 100;
  ExpectBadSt(past, "runs past the end");
  ExpectBadSt(SafetensorsFile("[1, 2]", ""), "does not start with '{'");
  ExpectBadSt(SafetensorsFile("{\"a\": tru}", ""), "header JSON");
  ExpectBadSt(SafetensorsFile("{\"a\":1,\"a\":2}", ""), "duplicate key");
  ExpectBadSt(one(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})"),
              "tensor 'x': unsupported dtype 'I64'");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})"), "out of range");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "out of range");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
              "tensor 'x': truncated: shape [3]");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,8]})"), "4 extra");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "non-negative");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), "non-negative");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[2]})"), "data_offsets");
  ExpectBadSt(one(R"({"shape":[2],"data_offsets":[0,8]})"), "'dtype'");
  ExpectBadSt(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
              "too large");
  ExpectBadSt(SafetensorsFile(R"({"__metadata__":{"a":1}})", ""), "is not a string");
  ExpectBadSt(SafetensorsFile(std::string(100, '[').insert(0, "{\"a\":"), ""), "too deeply");
}

TEST(SafetensorsTest, EveryTruncationAndByteFlipIsHandled) {
  NamedTensors in;
  in["a"] = Make(DType::kF32, {3}, 1);
  in["b"] = Make(DType::kBF16, {2, 2}, 2);
  auto file = SerializeSafetensors(in, {{"k", "v"}});
  ASSERT_TRUE(file.ok());
  for (size_t n = 0; n < file->size(); ++n) {
    auto r = ParseSafetensors(absl::string_view(*file).substr(0, n), "cut.safetensors");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  std::mt19937 rng(23);
  const size_t header_end = 8 + static_cast<uint8_t>((*file)[0]) +
                            256 * static_cast<size_t>(static_cast<uint8_t>((*file)[1]));
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutated = *file;
    mutated[rng() % header_end] = static_cast<char>(rng() & 0xff);
    auto r = ParseSafetensors(mutated, "flip.safetensors");
    if (r.ok()) {
      for (const auto& [name, t] : *r) {
        EXPECT_EQ(static_cast<int64_t>(t.bytes.size()), t.num_elements() * DTypeSize(t.dtype));
      }
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace spattn
