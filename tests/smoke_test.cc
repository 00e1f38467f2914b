// The wire contract compiles and round-trips; status codes convert both ways.
#include <gtest/gtest.h>

#include "proto/grpc_status.h"
#include "spattn/v1/attention_service.grpc.pb.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

TEST(ProtoTest, AttentionRequestRoundTrips) {
  v1::AttentionRequest r;
  r.set_layer(3);
  r.mutable_q()->mutable_region()->set_region_name("q");
  r.mutable_method_override()->mutable_vertical_slash()->set_last_q(32);
  v1::AttentionRequest back;
  ASSERT_TRUE(back.ParseFromString(r.SerializeAsString()));
  EXPECT_EQ(back.layer(), 3u);
  EXPECT_EQ(back.q().region().region_name(), "q");
  EXPECT_EQ(back.method_override().vertical_slash().last_q(), 32);
}

TEST(GrpcStatusTest, CodesMapBothWays) {
  const absl::Status s = absl::DataLossError("crc mismatch");
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(g.error_message(), "crc mismatch");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::ABORTED, "lost race")).code(),
            absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace spattn
