#include "index/tensor_client.h"

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "index/crc32c.h"
#include "proto/grpc_status.h"

namespace spattn {

absl::StatusOr<v1::PutTensorsResponse> UploadTensors(v1::IndexService::StubInterface& stub,
                                                     absl::string_view model_id, uint64_t version,
                                                     const std::vector<TensorUpload>& tensors,
                                                     int chunk_bytes) {
  if (chunk_bytes <= 0) return absl::InvalidArgumentError("chunk_bytes: must be > 0");
  grpc::ClientContext ctx;
  v1::PutTensorsResponse response;
  std::unique_ptr<grpc::ClientWriterInterface<v1::TensorChunk>> writer =
      stub.PutTensors(&ctx, &response);
  bool ok = true;
  for (const TensorUpload& t : tensors) {
    v1::TensorChunk chunk;
    v1::TensorHeader* h = chunk.mutable_header();
    h->set_model_id(std::string(model_id));
    h->set_version(version);
    *h->mutable_key() = t.key;
    h->mutable_desc()->set_dtype(v1::DATA_TYPE_FP32);
    for (int64_t d : t.shape) h->mutable_desc()->add_shape(d);
    h->set_total_bytes(t.bytes.size());
    h->set_crc32c(Crc32c(t.bytes));
    if (!(ok = writer->Write(chunk))) break;
    for (size_t off = 0; off < t.bytes.size() && ok; off += chunk_bytes) {
      v1::TensorChunk data;
      data.set_data(t.bytes.substr(off, chunk_bytes));
      ok = writer->Write(data);
    }
    if (!ok) break;
  }
  // A failed Write means the server ended the stream; Finish says why.
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::vector<DownloadedTensor>> DownloadTensors(
    v1::IndexService::StubInterface& stub, const v1::GetTensorsRequest& request) {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderInterface<v1::TensorChunk>> reader =
      stub.GetTensors(&ctx, request);
  std::vector<DownloadedTensor> out;
  v1::TensorChunk chunk;
  absl::Status problem;
  auto check_complete = [&]() -> absl::Status {
    if (out.empty()) return absl::OkStatus();
    const DownloadedTensor& t = out.back();
    if (t.bytes.size() != t.header.total_bytes()) {
      return absl::DataLossError(absl::StrCat("tensor stream: got ", t.bytes.size(), " of ",
                                              t.header.total_bytes(), " bytes"));
    }
    if (Crc32c(t.bytes) != t.header.crc32c()) {
      return absl::DataLossError("tensor stream: crc32c mismatch");
    }
    return absl::OkStatus();
  };
  while (problem.ok() && reader->Read(&chunk)) {
    if (chunk.has_header()) {
      problem = check_complete();
      out.push_back({chunk.header(), {}});
      out.back().bytes.reserve(chunk.header().total_bytes());
    } else if (out.empty()) {
      problem = absl::DataLossError("tensor stream: data before any header");
    } else {
      out.back().bytes.append(chunk.data());
    }
  }
  if (!problem.ok()) {
    ctx.TryCancel();
    reader->Finish().ok();
    return problem;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  absl::Status last = check_complete();
  if (!last.ok()) return last;
  return out;
}

absl::StatusOr<int> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service, absl::Duration timeout) {
  // grpc.health.v1.HealthCheckRequest { string service = 1; } encoded by hand: the health proto
  // is not installed with Debian's gRPC.
  if (service.size() > 127) return absl::InvalidArgumentError("service: name too long");
  std::string request_bytes;
  request_bytes.push_back(0x0A);
  request_bytes.push_back(static_cast<char>(service.size()));
  request_bytes.append(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(absl::ToInt64Microseconds(timeout)));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return FromGrpcStatus(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("health: unreadable response");
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse { ServingStatus status = 1; }: absent field = 0 (UNKNOWN).
  if (bytes.empty()) return 0;
  if (bytes.size() < 2 || bytes[0] != 0x08) {
    return absl::InternalError("health: unexpected response encoding");
  }
  return static_cast<int>(static_cast<unsigned char>(bytes[1]));
}

std::string FloatsToBytes(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<float> BytesToFloats(absl::string_view bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace spattn
