// Client-side pieces that need no worker: shared-memory regions, request helpers, decoders.
#include "client/attention_client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

TEST(SharedMemoryRegionTest, CreateWriteReadOpenAndUnlink) {
  std::random_device rd;
  const std::string key = absl::StrCat("/spattn_ct_", getpid(), "_", absl::Hex(rd()));
  {
    auto r = SharedMemoryRegion::Create(key, 10000);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->size(), 10000u);
    const char msg[] = "hello";
    ASSERT_TRUE((*r)->Write(9990, msg, 6).ok());
    EXPECT_EQ((*r)->Write(9995, msg, 6).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ((*r)->Write(SIZE_MAX, msg, 6).code(), absl::StatusCode::kOutOfRange);
    // Creating the same key again fails; opening it sees the same bytes.
    EXPECT_EQ(SharedMemoryRegion::Create(key, 10).status().code(),
              absl::StatusCode::kAlreadyExists);
    auto other = SharedMemoryRegion::Open(key);
    ASSERT_TRUE(other.ok()) << other.status();
    char back[6];
    ASSERT_TRUE((*other)->Read(9990, back, 6).ok());
    EXPECT_STREQ(back, "hello");
    EXPECT_EQ((*other)->Read(9999, back, 2).code(), absl::StatusCode::kOutOfRange);
  }
  // The creator unlinked the object.
  EXPECT_EQ(SharedMemoryRegion::Open(key).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SharedMemoryRegion::Create(key, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestHelpersTest, TensorsAndDecoders) {
  const std::vector<float> values = {1.5f, -2.f, 0.25f, 3.f};
  std::vector<uint16_t> bf16(values.size());
  FromFloat(values.data(), DType::kBF16, 4, bf16.data());
  v1::TensorRef t = InlineTensor(DType::kBF16, {1, 2, 2}, bf16.data(), 8);
  EXPECT_EQ(t.desc().dtype(), v1::DATA_TYPE_BF16);
  EXPECT_EQ(t.desc().shape_size(), 3);
  EXPECT_EQ(t.inline_data().data().size(), 8u);
  v1::TensorRef r = RegionTensor(DType::kF16, {4, 1, 8}, "q", 64, 64);
  EXPECT_EQ(r.region().region_name(), "q");
  EXPECT_EQ(r.region().offset(), 64u);

  v1::AttentionResponse resp;
  *resp.mutable_output() = t;
  auto out = DecodeInlineOutput(resp);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, values);
  EXPECT_EQ(DecodeInlineLse(resp).status().code(), absl::StatusCode::kFailedPrecondition);
  *resp.mutable_output() = r;
  EXPECT_EQ(DecodeInlineOutput(resp).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ToProtoMethod(Method::kSaap), v1::METHOD_SAAP);
  EXPECT_EQ(ToProtoMethod(Method::kDense), v1::METHOD_DENSE);
}

TEST(AttentionClientTest, ConnectFailsFastWithoutWorker) {
  ClientOptions o;
  o.address = "127.0.0.1:1";  // Nothing listens on port 1.
  o.connect_timeout = absl::Milliseconds(300);
  auto c = AttentionClient::Connect(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
  o.address = "";
  EXPECT_EQ(AttentionClient::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spattn
