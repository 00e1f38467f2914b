// BuildIndexOnGpu: the GPU twin of BuildSparseIndex (kernels/builders/build_index.h). One entry
// for every method with a GPU builder, one file per method behind it (builders/<method>.cu, named
// like the CPU builder in kernels/builders/), and the index it returns stays in device memory:
// plan (build the index) and run (CudaAttentionEngine::RunSparseDeviceIndex) are separate calls,
// as FlashInfer's plan/run, and nothing goes through the host in between. No CUDA types here.
//
//   GpuBuildOptions o;  o.block_m = 64;
//   auto index = BuildIndexOnGpu(engine, problem, config, heads, o);        // plan
//   engine.RunSparseDeviceIndex(problem, index->view);                      // run
//   ... more groups ...
//   engine.ReleaseIndexes();                                                // request done
//
// Thread-safe as the engine is (its calls are serialized).
#ifndef SPATTN_KERNELS_CUDA_BUILDERS_BUILD_INDEX_GPU_H_
#define SPATTN_KERNELS_CUDA_BUILDERS_BUILD_INDEX_GPU_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/method_config.h"
#include "kernels/problem.h"
#include "kernels/sparse_index.h"

namespace spattn {

// BuildOptions (kernels/builders/build_index.h) for the GPU.
struct GpuBuildOptions {
  // Query rows per index block for methods without a block size of their own (dense, a_shape,
  // vertical_slash, saap); block_sparse, flex_prefill, sample_attention and anchor index by their
  // block_size, as their CPU twins do. The sparse kernel takes 64 and 128. Default: 64.
  int block_m = 64;
  // Saap's layer assets on the engine's device (CudaAttentionEngine::UploadLayerAssets; Saap
  // fails with FAILED_PRECONDITION without them). Default: none.
  const CudaLayerAssets* maybe_assets = nullptr;
  // index_seconds = the device build time (CUDA events); upload_seconds = sequence offsets.
  // Default: not measured.
  CudaStageTimes* maybe_times = nullptr;
  // sampled_lines: per entry of `heads`, that head's gamma instead of the config's (as
  // BuildOptions::sampled_lines_gammas of the CPU twin, kernels/builders/build_index.h). Empty =
  // the config's for every head; other methods ignore it. Default: empty.
  std::vector<float> sampled_lines_gammas;
};

// A SparseIndex in the engine's device memory (the resident part of its workspace), as
// BuildIndexOnGpu made it. Valid until the engine's ReleaseIndexes(); only that engine's calls
// may read it.
struct GpuSparseIndex {
  SparseIndexView view;        // device pointers, block_m, num_heads, num_blocks
  std::vector<int32_t> heads;  // host copy: the q head of each slot
  int64_t num_ranges = 0;
  int64_t num_cols = 0;
  int batch = 0;      // sequences of the problem it was built for
  int64_t bytes = 0;  // of the resident arrays
};

// Whether `method` has a GPU index builder (every method of kAllMethods in this build with CUDA;
// none without).
bool GpuBuilderAvailable(Method method);

// Builds the index of q heads `heads` under `config` (validated first) on the engine's device.
// problem.space must be kCuda with Q/K in that device's memory for the builders that read them
// (all but dense and a_shape, which read only the sizes). Any block size builds, as on the CPU
// (the sparse kernel then takes 64 and 128). Errors: INVALID_ARGUMENT (config, heads, shapes the
// GPU builder does not take; Q/K not device memory for vertical_slash, block_sparse,
// flex_prefill), FAILED_PRECONDITION (Q/K not device memory for sample_attention, anchor, saap;
// Saap without assets), UNIMPLEMENTED (past a GPU builder's limits; the message says
// which), RESOURCE_EXHAUSTED (the workspace is full: the message names the buffer).
absl::StatusOr<GpuSparseIndex> BuildIndexOnGpu(CudaAttentionEngine& engine,
                                               const AttentionProblem& problem,
                                               const MethodConfig& config,
                                               const std::vector<int>& heads,
                                               const GpuBuildOptions& options);

// Copies `index` to the host (tests, recall estimates, the bench's fidelity metrics).
absl::Status DownloadIndex(CudaAttentionEngine& engine, const GpuSparseIndex& index,
                           SparseIndex* out);

// Per head slot, the (query, key) pairs the sparse kernel computes under `index`
// (ComputedPairs of kernels/sparse_index.h), counted on the device: only these numbers come to
// the host.
absl::StatusOr<std::vector<int64_t>> ComputedPairsOnGpu(CudaAttentionEngine& engine,
                                                        const AttentionProblem& problem,
                                                        const GpuSparseIndex& index);

// Per head slot of an index, the attention-mass recall (AttentionMassRecall of kernels/fidelity.h:
// the softmax mass of the keys the index selects, averaged over the probe rows) on the query rows
// `rows` ((sequence, row within it), e.g. SampleQueryRows), computed on the device from the
// problem's device Q/K (problem.space kCuda) and the device index: only per-chunk sums come to the
// host (the recall guard and `estimate_recall` of the worker). `index` on the host gives heads,
// block_m and block_offsets; `maybe_device` is its device copy (a GpuSparseIndex's view), or null
// to upload `index` (then complete on the host). Issue 11.
absl::StatusOr<std::vector<double>> MassRecallOnGpu(CudaAttentionEngine& engine,
                                                    const AttentionProblem& problem,
                                                    const SparseIndex& index,
                                                    const SparseIndexView* maybe_device,
                                                    const std::vector<std::pair<int, int>>& rows);

}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_BUILDERS_BUILD_INDEX_GPU_H_
