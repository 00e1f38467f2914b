// The one conversion of CUDA runtime errors into absl::Status, for every host file that calls the
// CUDA runtime (kernels/cuda, the worker's CUDA code). Kernels and launchers return
// cudaError_t; this is where a code is chosen:
//   cudaErrorMemoryAllocation                                  -> RESOURCE_EXHAUSTED
//   cudaErrorNoDevice, cudaErrorInsufficientDriver,
//   cudaErrorInvalidDevice                                     -> FAILED_PRECONDITION
//   anything else                                              -> INTERNAL
// The message is "<what>: <CUDA's error string>". Thread-safe.
#ifndef SPATTN_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
#define SPATTN_KERNELS_CUDA_COMMON_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/status_macros.h"

namespace spattn {

// OK for cudaSuccess. Otherwise clears the thread's last (non-sticky) error, so that the next
// call starts clean, and returns the mapped status.
absl::Status CudaStatus(cudaError_t err, const char* what);

}  // namespace spattn

// Returns from the enclosing function (absl::Status or StatusOr) when `expr` is not cudaSuccess.
#define SPATTN_CUDA_RETURN_IF_ERROR(expr, what) \
  SPATTN_RETURN_IF_ERROR(::spattn::CudaStatus((expr), (what)))

#endif  // SPATTN_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
