#include "client/attention_client.h"

#include <errno.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/grpc_status.h"

namespace spattn {
namespace {

absl::Status Errno(const std::string& what) {
  const int err = errno;
  const std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == EEXIST) return absl::AlreadyExistsError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<DType> FromProtoDType(int t) {
  switch (t) {
    case v1::DATA_TYPE_FP32:
      return DType::kF32;
    case v1::DATA_TYPE_FP16:
      return DType::kF16;
    case v1::DATA_TYPE_BF16:
      return DType::kBF16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("not an attention dtype: ", t));
  }
}

// The grpc.health.v1 messages, encoded by hand (one string field out, one enum field back) so
// the client needs no generated health stubs.
std::string EncodeHealthRequest(const std::string& service) {
  std::string out;
  out.push_back(0x0a);  // field 1, length-delimited
  size_t n = service.size();
  do {
    uint8_t b = n & 0x7f;
    n >>= 7;
    if (n) b |= 0x80;
    out.push_back(static_cast<char>(b));
  } while (n);
  out += service;
  return out;
}

const char* HealthStatusName(int s) {
  switch (s) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

// ---- SharedMemoryRegion ----

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::Create(
    const std::string& key, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("shared memory: size must be > 0");
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open(", key, ")"));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    absl::Status s = Errno("ftruncate");
    close(fd);
    shm_unlink(key.c_str());
    return s;
  }
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  absl::Status map_error = addr == MAP_FAILED ? Errno("mmap") : absl::OkStatus();
  close(fd);
  if (!map_error.ok()) {
    shm_unlink(key.c_str());
    return map_error;
  }
  return std::unique_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(key, static_cast<uint8_t*>(addr), bytes, true));
}

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::Open(
    const std::string& key) {
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(absl::StrCat("shm_open(", key, ")"));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(key, ": empty shared-memory object"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  absl::Status map_error = addr == MAP_FAILED ? Errno("mmap") : absl::OkStatus();
  close(fd);
  if (!map_error.ok()) return map_error;
  return std::unique_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(key, static_cast<uint8_t*>(addr), bytes, false));
}

SharedMemoryRegion::~SharedMemoryRegion() {
  munmap(data_, size_);
  if (owner_) shm_unlink(key_.c_str());
}

absl::Status SharedMemoryRegion::Write(size_t offset, const void* src, size_t bytes) {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("write of ", bytes, " bytes at ", offset,
                                              " exceeds the region's ", size_, " bytes"));
  }
  std::memcpy(data_ + offset, src, bytes);
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Read(size_t offset, void* dst, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("read of ", bytes, " bytes at ", offset,
                                              " exceeds the region's ", size_, " bytes"));
  }
  std::memcpy(dst, data_ + offset, bytes);
  return absl::OkStatus();
}

// ---- AttentionClient ----

AttentionClient::AttentionClient(const ClientOptions& options,
                                 std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::AttentionService::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<AttentionClient>> AttentionClient::Connect(
    const ClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("address: empty");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.max_attempts > 1) {
    // Reconnect at the retry pace, so that a worker back on its port is found within the
    // retries' back-off.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.retry_initial_backoff)));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.retry_initial_backoff)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.retry_max_backoff)));
  }
  auto made = MakeChannel(options.address, options.security, args);
  if (!made.ok()) return made.status();
  std::shared_ptr<grpc::Channel> channel = *std::move(made);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the worker at ", options.address));
  }
  return std::unique_ptr<AttentionClient>(new AttentionClient(options, std::move(channel)));
}

void AttentionClient::SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) const {
  const absl::Duration t = timeout > absl::ZeroDuration() ? timeout : options_.timeout;
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + t));
}

absl::StatusOr<v1::ServerMetadataResponse> AttentionClient::Metadata() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  v1::ServerMetadataResponse r;
  const grpc::Status s = stub_->ServerMetadata(&ctx, v1::ServerMetadataRequest(), &r);
  if (!s.ok()) return FromGrpcStatus(s);
  return r;
}

absl::StatusOr<std::string> AttentionClient::Health(const std::string& service) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  const std::string encoded = EncodeHealthRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      done = true;
                      cv.notify_all();
                    });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (!status.ok()) return FromGrpcStatus(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("health: unreadable response");
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // Field 1 (varint): 0x08 <status>. An empty message means UNKNOWN (0).
  int value = 0;
  if (bytes.size() >= 2 && bytes[0] == 0x08) value = static_cast<uint8_t>(bytes[1]);
  return std::string(HealthStatusName(value));
}

absl::Status AttentionClient::RegisterSystemRegion(const std::string& name,
                                                   const std::string& shm_key, uint64_t offset,
                                                   uint64_t byte_size) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  v1::RegisterSystemRegionRequest req;
  req.set_name(name);
  req.set_shm_key(shm_key);
  req.set_offset(offset);
  req.set_byte_size(byte_size);
  v1::RegisterSystemRegionResponse resp;
  return FromGrpcStatus(stub_->RegisterSystemRegion(&ctx, req, &resp));
}

absl::Status AttentionClient::RegisterSystemRegion(const std::string& name,
                                                   const SharedMemoryRegion& region) {
  return RegisterSystemRegion(name, region.key(), 0, region.size());
}

absl::Status AttentionClient::RegisterCudaRegion(const std::string& name,
                                                 const std::string& raw_handle, int device_id,
                                                 uint64_t byte_size,
                                                 const std::string& device_uuid) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  v1::RegisterCudaRegionRequest req;
  req.set_name(name);
  req.set_raw_handle(raw_handle);
  req.set_device_id(device_id);
  req.set_device_uuid(device_uuid);
  req.set_byte_size(byte_size);
  v1::RegisterCudaRegionResponse resp;
  return FromGrpcStatus(stub_->RegisterCudaRegion(&ctx, req, &resp));
}

absl::StatusOr<int> AttentionClient::UnregisterRegion(const std::string& name) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  v1::UnregisterRegionRequest req;
  req.set_name(name);
  v1::UnregisterRegionResponse resp;
  const grpc::Status s = stub_->UnregisterRegion(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return static_cast<int>(resp.unregistered());
}

absl::StatusOr<std::vector<v1::RegionInfo>> AttentionClient::ListRegions() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::ZeroDuration());
  v1::ListRegionsResponse resp;
  const grpc::Status s = stub_->ListRegions(&ctx, v1::ListRegionsRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return std::vector<v1::RegionInfo>(resp.regions().begin(), resp.regions().end());
}

absl::StatusOr<v1::AttentionResponse> AttentionClient::ComputeAttention(
    const v1::AttentionRequest& request, absl::Duration timeout) {
  const absl::Duration t = timeout > absl::ZeroDuration() ? timeout : options_.timeout;
  const absl::Time deadline = absl::Now() + t;
  absl::Duration backoff = options_.retry_initial_backoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::AttentionResponse resp;
    const grpc::Status s = stub_->ComputeAttention(&ctx, request, &resp);
    if (s.ok()) return resp;
    // UNAVAILABLE: the worker is draining, restarting or unreachable; nothing ran. Retry with
    // jittered exponential back-off within the call's deadline.
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= options_.max_attempts) {
      return FromGrpcStatus(s);
    }
    const absl::Duration sleep = backoff * (0.5 + 0.5 * (std::rand() / (RAND_MAX + 1.0)));
    if (absl::Now() + sleep >= deadline) return FromGrpcStatus(s);
    absl::SleepFor(sleep);
    backoff = std::min(backoff * 2, options_.retry_max_backoff);
  }
}

std::unique_ptr<AttentionStream> AttentionClient::OpenStream(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  SetDeadline(ctx.get(), timeout);
  auto stream = stub_->ComputeAttentionStream(ctx.get());
  return std::make_unique<AttentionStream>(std::move(ctx), std::move(stream));
}

// ---- AttentionStream ----

AttentionStream::AttentionStream(
    std::unique_ptr<grpc::ClientContext> ctx,
    std::unique_ptr<grpc::ClientReaderWriter<v1::AttentionRequest, v1::AttentionResponse>> stream)
    : ctx_(std::move(ctx)), stream_(std::move(stream)) {}

AttentionStream::~AttentionStream() {
  if (!finished_) {
    ctx_->TryCancel();
    stream_->Finish();
  }
}

absl::Status AttentionStream::Send(const v1::AttentionRequest& request) {
  if (finished_ || writes_done_) return absl::FailedPreconditionError("stream already closed");
  if (!stream_->Write(request)) {
    return absl::UnavailableError("stream ended; call Finish() for its status");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::AttentionResponse> AttentionStream::Receive() {
  if (finished_) return final_.ok() ? absl::OutOfRangeError("stream finished") : final_;
  v1::AttentionResponse r;
  if (stream_->Read(&r)) return r;
  finished_ = true;
  final_ = FromGrpcStatus(stream_->Finish());
  return final_.ok() ? absl::OutOfRangeError("stream finished") : final_;
}

absl::Status AttentionStream::Finish() {
  if (finished_) return final_;
  if (!writes_done_) {
    stream_->WritesDone();
    writes_done_ = true;
  }
  v1::AttentionResponse unread;
  while (stream_->Read(&unread)) {
  }
  finished_ = true;
  final_ = FromGrpcStatus(stream_->Finish());
  return final_;
}

void AttentionStream::Cancel() { ctx_->TryCancel(); }

// ---- helpers ----

v1::DataType ToProtoDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v1::DATA_TYPE_FP32;
    case DType::kF16:
      return v1::DATA_TYPE_FP16;
    case DType::kBF16:
      return v1::DATA_TYPE_BF16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

v1::Method ToProtoMethod(Method method) {
  switch (method) {
    case Method::kDense:
      return v1::METHOD_DENSE;
    case Method::kAShape:
      return v1::METHOD_A_SHAPE;
    case Method::kVerticalSlash:
      return v1::METHOD_VERTICAL_SLASH;
    case Method::kBlockSparse:
      return v1::METHOD_BLOCK_SPARSE;
    case Method::kFlexPrefill:
      return v1::METHOD_FLEX_PREFILL;
    case Method::kSampleAttention:
      return v1::METHOD_SAMPLE_ATTENTION;
    case Method::kAnchor:
      return v1::METHOD_ANCHOR;
    case Method::kSaap:
      return v1::METHOD_SAAP;
    case Method::kSampledLines:
      return v1::METHOD_SAMPLED_LINES;
  }
  return v1::METHOD_UNSPECIFIED;
}

v1::TensorRef InlineTensor(DType dtype, const std::vector<int64_t>& shape, const void* data,
                           size_t bytes) {
  v1::TensorRef t;
  t.mutable_desc()->set_dtype(ToProtoDType(dtype));
  for (int64_t d : shape) t.mutable_desc()->add_shape(d);
  t.mutable_inline_data()->set_data(static_cast<const char*>(data), bytes);
  return t;
}

v1::TensorRef RegionTensor(DType dtype, const std::vector<int64_t>& shape,
                           const std::string& region_name, uint64_t offset, uint64_t byte_size) {
  v1::TensorRef t;
  t.mutable_desc()->set_dtype(ToProtoDType(dtype));
  for (int64_t d : shape) t.mutable_desc()->add_shape(d);
  v1::RegionRef* r = t.mutable_region();
  r->set_region_name(region_name);
  r->set_offset(offset);
  r->set_byte_size(byte_size);
  return t;
}

absl::StatusOr<std::vector<float>> DecodeInlineOutput(const v1::AttentionResponse& response) {
  const v1::TensorRef& o = response.output();
  if (o.location_case() != v1::TensorRef::kInlineData) {
    return absl::FailedPreconditionError("the output was written to a region, not inline");
  }
  auto dtype = FromProtoDType(o.desc().dtype());
  if (!dtype.ok()) return dtype.status();
  const std::string& bytes = o.inline_data().data();
  const size_t n = bytes.size() / DTypeSize(*dtype);
  std::vector<float> out(n);
  ToFloat(bytes.data(), *dtype, static_cast<int64_t>(n), out.data());
  return out;
}

absl::StatusOr<std::vector<float>> DecodeInlineLse(const v1::AttentionResponse& response) {
  const v1::TensorRef& l = response.lse();
  if (l.location_case() != v1::TensorRef::kInlineData) {
    return absl::FailedPreconditionError("no LSE in the response (set return_lse)");
  }
  const std::string& bytes = l.inline_data().data();
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace spattn
