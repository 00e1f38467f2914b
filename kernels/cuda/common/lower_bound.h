// A binary search for host and device code whose positions are index offsets: CSR offsets of a
// SparseIndex run up to 2^31 - 1 (builder_steps refuses more), where the usual midpoint
// (lo + hi) / 2 overflows int once both ends pass 2^30. It did: the recall estimate of a 1M-key
// index with more than 2^30 columns (session 28's guarded sampled_lines line, last 64K queries of a
// 1M prompt) read outside col_idx and failed with an illegal memory access.
#ifndef SPATTN_KERNELS_CUDA_COMMON_LOWER_BOUND_H_
#define SPATTN_KERNELS_CUDA_COMMON_LOWER_BOUND_H_

#ifdef __CUDACC__
#define SPATTN_LOWER_BOUND_HD __host__ __device__ __forceinline__
#else
#define SPATTN_LOWER_BOUND_HD inline
#endif

namespace spattn {
namespace cuda {

// The first position in [lo, hi) for which below(position) is false (hi if none), for a
// predicate that is true on a prefix of the range; `below` sees only positions in [lo, hi).
template <class Below>
SPATTN_LOWER_BOUND_HD int LowerBoundBy(int lo, int hi, Below below) {
  while (lo < hi) {
    const int mid = lo + ((hi - lo) >> 1);
    if (below(mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace cuda
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_COMMON_LOWER_BOUND_H_
