// The build without nvcc (--config=nocuda): no engine can be created, and it says why.
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/builders/build_index_gpu.h"

namespace spattn {
namespace {
absl::Status NoCuda() {
  return absl::FailedPreconditionError("built without CUDA (--config=nocuda)");
}
}  // namespace

class CudaAttentionEngine::Impl {};

absl::StatusOr<std::unique_ptr<CudaDeviceBuffer>> CudaDeviceBuffer::Allocate(int, int64_t) {
  return NoCuda();
}
CudaDeviceBuffer::~CudaDeviceBuffer() = default;
absl::Status CudaDeviceBuffer::CopyFromHost(const void*, int64_t, int64_t) { return NoCuda(); }
absl::Status CudaDeviceBuffer::CopyToHost(void*, int64_t, int64_t) const { return NoCuda(); }
absl::Status CudaDeviceBuffer::Fill(uint8_t) { return NoCuda(); }

absl::StatusOr<SparseIndexView> UploadSparseIndex(const AttentionProblem&, const SparseIndex&, int,
                                                  std::unique_ptr<CudaDeviceBuffer>*) {
  return NoCuda();
}

absl::StatusOr<std::unique_ptr<CudaAttentionEngine>> CudaAttentionEngine::Create(
    int, int64_t, const CudaEngineOptions&) {
  return NoCuda();
}
CudaAttentionEngine::CudaAttentionEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaAttentionEngine::~CudaAttentionEngine() = default;
int CudaAttentionEngine::device() const { return -1; }
int64_t CudaAttentionEngine::workspace_bytes() const { return 0; }
bool CudaAttentionEngine::GpuBuilderAvailable(Method) { return false; }
void CudaAttentionEngine::ReleaseIndexes() {}
int64_t CudaAttentionEngine::resident_index_bytes() const { return 0; }

bool GpuBuilderAvailable(Method) { return false; }
absl::StatusOr<GpuSparseIndex> BuildIndexOnGpu(CudaAttentionEngine&, const AttentionProblem&,
                                               const MethodConfig&, const std::vector<int>&,
                                               const GpuBuildOptions&) {
  return NoCuda();
}
absl::Status DownloadIndex(CudaAttentionEngine&, const GpuSparseIndex&, SparseIndex*) {
  return NoCuda();
}
absl::StatusOr<std::vector<int64_t>> ComputedPairsOnGpu(CudaAttentionEngine&,
                                                        const AttentionProblem&,
                                                        const GpuSparseIndex&) {
  return NoCuda();
}
absl::StatusOr<std::vector<double>> MassRecallOnGpu(CudaAttentionEngine&, const AttentionProblem&,
                                                    const SparseIndex&, const SparseIndexView*,
                                                    const std::vector<std::pair<int, int>>&) {
  return NoCuda();
}
void ReloadCudaKernelKnobs() {}
absl::Status CudaAttentionEngine::RunDense(const AttentionProblem&, CudaStageTimes*) {
  return NoCuda();
}
absl::Status CudaAttentionEngine::RunSparse(const AttentionProblem&, const SparseIndex&,
                                            CudaStageTimes*) {
  return NoCuda();
}
absl::Status CudaAttentionEngine::RunSparseDeviceIndex(const AttentionProblem&,
                                                       const SparseIndexView&, CudaStageTimes*) {
  return NoCuda();
}
absl::Status CudaAttentionEngine::RunHost(const AttentionProblem&, const SparseIndex*,
                                          CudaStageTimes*) {
  return NoCuda();
}
absl::StatusOr<std::unique_ptr<CudaLayerAssets>> CudaAttentionEngine::UploadLayerAssets(
    const LayerAssets&, int) {
  return NoCuda();
}

struct CudaLayerAssets::Rep {};
CudaLayerAssets::CudaLayerAssets(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
CudaLayerAssets::~CudaLayerAssets() = default;
int CudaLayerAssets::device() const { return -1; }
int CudaLayerAssets::head_dim() const { return 0; }
int CudaLayerAssets::num_centroids() const { return 0; }
int64_t CudaLayerAssets::bytes() const { return 0; }
const CudaLayerAssets::Rep& CudaLayerAssets::rep() const { return *rep_; }

}  // namespace spattn
