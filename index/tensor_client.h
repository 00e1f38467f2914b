// Client side of the chunked tensor RPCs (PutTensors / GetTensors) and of grpc.health.v1, shared
// by tests, the benchmark and spattnctl. Tensors are fp32, row-major.
//
// Thread-safety: functions are thread-safe as far as the stub is (gRPC stubs are).
#ifndef SPATTN_INDEX_TENSOR_CLIENT_H_
#define SPATTN_INDEX_TENSOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {

struct TensorUpload {
  v1::TensorKey key;
  std::vector<int64_t> shape;
  std::string bytes;  // Raw little-endian fp32, row-major; size = product(shape) * 4.
};

// Streams `tensors` into an OPEN version, `chunk_bytes` of data per message.
absl::StatusOr<v1::PutTensorsResponse> UploadTensors(v1::IndexService::StubInterface& stub,
                                                     absl::string_view model_id, uint64_t version,
                                                     const std::vector<TensorUpload>& tensors,
                                                     int chunk_bytes = 1 << 20);

struct DownloadedTensor {
  v1::TensorHeader header;
  std::string bytes;
};

// Reads a GetTensors stream whole, checking each tensor's length and crc32c (DATA_LOSS if wrong).
absl::StatusOr<std::vector<DownloadedTensor>> DownloadTensors(v1::IndexService::StubInterface& stub,
                                                              const v1::GetTensorsRequest& request);

// grpc.health.v1.Health/Check: 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN (0 UNKNOWN).
absl::StatusOr<int> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service,
                                absl::Duration timeout = absl::Seconds(5));

// Float vector <-> raw bytes helpers.
std::string FloatsToBytes(const std::vector<float>& values);
std::vector<float> BytesToFloats(absl::string_view bytes);

}  // namespace spattn

#endif  // SPATTN_INDEX_TENSOR_CLIENT_H_
