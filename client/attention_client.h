// C++ client of the spattn worker (AttentionService): connect, metadata, health, shared-memory
// regions (created and filled on the client side, registered with the worker), and attention
// requests (unary, or one stream per prompt with one message per layer). Request helpers build
// TensorRefs for inline bytes and region slices; decoders turn inline outputs into floats.
#ifndef SPATTN_CLIENT_ATTENTION_CLIENT_H_
#define SPATTN_CLIENT_ATTENTION_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/dtype.h"
#include "kernels/method_config.h"
#include "proto/grpc_security.h"
#include "spattn/v1/attention_service.grpc.pb.h"

namespace spattn {

struct ClientOptions {
  // host:port of the worker, or unix:/path of its Unix socket (needed to register shared
  // memory: the worker checks that the calling user owns the segment). Required.
  std::string address;
  // TLS / mTLS and the bearer token sent on every call. Default: plaintext, no token.
  ClientSecurityOptions security;
  // Largest message sent or received. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Deadline of each call (a stream's deadline covers the whole stream). Default: 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // How long Connect waits for the channel to become ready. Default: 10 s.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Attempts of ComputeAttention when the worker answers UNAVAILABLE (draining, restarting,
  // unreachable: nothing ran); 1 = no retries. Back-off doubles from retry_initial_backoff up
  // to retry_max_backoff, with jitter, within the call's deadline. Streams are not retried.
  // Default: 1 (no retries), 100 ms, 2 s.
  int max_attempts = 1;
  absl::Duration retry_initial_backoff = absl::Milliseconds(100);
  absl::Duration retry_max_backoff = absl::Seconds(2);
};

// A POSIX shared-memory object mapped into this process: created (and unlinked on destruction)
// or opened. Not thread-safe for concurrent writes to the same bytes; otherwise plain memory.
class SharedMemoryRegion {
 public:
  // Creates `key` ("/name") of `bytes` bytes, failing with ALREADY_EXISTS if it exists.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> Create(const std::string& key,
                                                                    size_t bytes);
  // Maps an existing object (not unlinked on destruction).
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> Open(const std::string& key);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& key() const { return key_; }
  // Bounds-checked copies.
  absl::Status Write(size_t offset, const void* src, size_t bytes);
  absl::Status Read(size_t offset, void* dst, size_t bytes) const;

 private:
  SharedMemoryRegion(std::string key, uint8_t* data, size_t size, bool owner)
      : key_(std::move(key)), data_(data), size_(size), owner_(owner) {}
  std::string key_;
  uint8_t* data_;
  size_t size_;
  bool owner_;
};

class AttentionStream;

// Thread-safe: gRPC stubs may be used from several threads.
class AttentionClient {
 public:
  static absl::StatusOr<std::unique_ptr<AttentionClient>> Connect(const ClientOptions& options);

  absl::StatusOr<v1::ServerMetadataResponse> Metadata();
  // grpc.health.v1 Check of `service` ("" = the whole worker): "SERVING", "NOT_SERVING", ...
  absl::StatusOr<std::string> Health(const std::string& service = "");

  absl::Status RegisterSystemRegion(const std::string& name, const std::string& shm_key,
                                    uint64_t offset, uint64_t byte_size);
  // The whole region.
  absl::Status RegisterSystemRegion(const std::string& name, const SharedMemoryRegion& region);
  absl::Status RegisterCudaRegion(const std::string& name, const std::string& raw_handle,
                                  int device_id, uint64_t byte_size,
                                  const std::string& device_uuid = "");
  // "" unregisters every region; returns how many.
  absl::StatusOr<int> UnregisterRegion(const std::string& name);
  absl::StatusOr<std::vector<v1::RegionInfo>> ListRegions();

  // `timeout` 0 = options.timeout.
  absl::StatusOr<v1::AttentionResponse> ComputeAttention(
      const v1::AttentionRequest& request, absl::Duration timeout = absl::ZeroDuration());
  std::unique_ptr<AttentionStream> OpenStream(absl::Duration timeout = absl::ZeroDuration());

  v1::AttentionService::Stub* stub() { return stub_.get(); }

 private:
  AttentionClient(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel);
  void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) const;

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

// One prompt: Send each layer's request, Receive the answers in the same order, then Finish.
// Not thread-safe except that one thread may Send while another Receives.
class AttentionStream {
 public:
  AttentionStream(
      std::unique_ptr<grpc::ClientContext> ctx,
      std::unique_ptr<grpc::ClientReaderWriter<v1::AttentionRequest, v1::AttentionResponse>>
          stream);
  ~AttentionStream();
  // Fails when the stream has ended (the final status comes from Finish).
  absl::Status Send(const v1::AttentionRequest& request);
  // The next answer, or the stream's final status when it ended early.
  absl::StatusOr<v1::AttentionResponse> Receive();
  // Half-closes, drains unread answers, and returns the stream's status.
  absl::Status Finish();
  void Cancel();

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AttentionRequest, v1::AttentionResponse>> stream_;
  bool writes_done_ = false;
  bool finished_ = false;
  absl::Status final_;
};

// Request building.
v1::TensorRef InlineTensor(DType dtype, const std::vector<int64_t>& shape, const void* data,
                           size_t bytes);
v1::TensorRef RegionTensor(DType dtype, const std::vector<int64_t>& shape,
                           const std::string& region_name, uint64_t offset, uint64_t byte_size);
v1::DataType ToProtoDType(DType dtype);
v1::Method ToProtoMethod(Method method);

// The inline output of `response` as floats [total_q, num_q_heads, head_dim].
absl::StatusOr<std::vector<float>> DecodeInlineOutput(const v1::AttentionResponse& response);
// The inline LSE as floats [num_q_heads, total_q].
absl::StatusOr<std::vector<float>> DecodeInlineLse(const v1::AttentionResponse& response);

}  // namespace spattn

#endif  // SPATTN_CLIENT_ATTENTION_CLIENT_H_
