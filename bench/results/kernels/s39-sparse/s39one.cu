// One-instance ptxas check of the patch (~10 s): nvcc -cubin -arch=sm_90a -std=c++17 -O3
// --expt-relaxed-constexpr -I. -DTWOWG=true -Xptxas -v s39one.cu (copy it to the repo root).
#include "kernels/cuda/attention/hopper/persistent_fa3.cuh"
namespace spattn { namespace cuda { namespace hopper {
void* S39Take() {
  return (void*)&PersistentFa3Kernel<
      PersistTraits<__nv_bfloat16, 128, 2, 2, 4, 64, 2, 0, true, TWOWG>, true>;
}
}}}
