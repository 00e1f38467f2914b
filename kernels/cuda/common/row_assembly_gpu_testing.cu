// row_assembly_gpu_testing.h: the bitmap assembler (row_assembly.cuh) on rows given as bitmaps.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common/row_assembly.cuh"
#include "kernels/cuda/common/row_assembly_gpu_testing.h"

namespace spattn {
namespace row_assembly {
namespace {

// Rows from their bitmaps: each thread copies whole array words (nobody else writes them).
struct BitmapSrc {
  const int* key_end;
  const int64_t* word_off;
  const uint32_t* range_words;
  const uint32_t* col_words;
  int num_slots;
  struct Shared {
    int64_t off;
    int64_t num_words;
  };
  __device__ void Begin(int unit, Shared& sh, RowCtx& ctx) const {
    ctx.key_end = key_end[unit];
    ctx.block = unit;
    ctx.num_slots = num_slots;
    for (int s = 0; s < num_slots; ++s) ctx.slots[s] = s;
    sh.off = word_off[unit];
    sh.num_words = word_off[unit + 1] - word_off[unit];
  }
  __device__ void SetBits(const RowCtx&, const Shared& sh, uint32_t* ranges, uint32_t* cols,
                          int64_t wbase) const {
    for (int i = threadIdx.x; i < kAsmArrayWords; i += blockDim.x) {
      const int64_t w = wbase + i;
      if (w >= 0 && w < sh.num_words) {
        ranges[i] = range_words[sh.off + w];
        cols[i] = col_words[sh.off + w];
      }
    }
  }
};

// The same rows through the assembler's row records.
struct BitmapRecSrc : BitmapSrc {
  static constexpr bool kAsmRecords = true;
};

// Rows from spans: SetBits ORs them (OrSpan clips to the segment's array), the span kernel reads
// them as they are (it clips to [0, key_end)).
struct SpanSrc {
  const int* key_end;
  const int64_t* span_off;
  const int64_t* starts;
  const int64_t* ends;
  int num_slots;
  static constexpr bool kAsmRecords = true;
  static constexpr bool kAsmSpans = true;
  struct Shared {
    int64_t off;
    int n;
  };
  __device__ void Begin(int unit, Shared& sh, RowCtx& ctx) const {
    ctx.key_end = key_end[unit];
    ctx.block = unit;
    ctx.num_slots = num_slots;
    for (int s = 0; s < num_slots; ++s) ctx.slots[s] = s;
    sh.off = span_off[unit];
    sh.n = static_cast<int>(span_off[unit + 1] - span_off[unit]);
  }
  __device__ int NumSpans(const RowCtx&, const Shared& sh) const { return sh.n; }
  __device__ void SpanAt(const RowCtx&, const Shared& sh, int i, int64_t* s, int64_t* e) const {
    *s = starts[sh.off + i];
    *e = ends[sh.off + i];
  }
  __device__ void SetBits(const RowCtx&, const Shared& sh, uint32_t* ranges, uint32_t* /*cols*/,
                          int64_t wbase) const {
    for (int t = threadIdx.x; t < sh.n; t += blockDim.x) {
      OrSpan(ranges, wbase, starts[sh.off + t], ends[sh.off + t]);
    }
  }
};

template <typename T>
cudaError_t Download(const T* d, size_t n, std::vector<T>* v) {
  v->assign(n, T{});
  if (n == 0) return cudaSuccess;
  return cudaMemcpy(v->data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
}

// A test driver's device memory and its first error: every array is freed with it, and each
// step after an error does nothing.
class TestScratch {
 public:
  TestScratch() = default;
  TestScratch(const TestScratch&) = delete;
  TestScratch& operator=(const TestScratch&) = delete;
  ~TestScratch() {
    for (void* p : owned_) cudaFree(p);
  }
  // Keeps e if it is the first error; true while there is none.
  bool Step(cudaError_t e) {
    if (err_ == cudaSuccess) err_ = e;
    return err_ == cudaSuccess;
  }
  bool ok() const { return err_ == cudaSuccess; }
  cudaError_t error() const { return err_; }
  // n elements (at least one), uninitialized; nullptr after an error.
  template <typename T>
  T* Alloc(size_t n) {
    T* p = nullptr;
    if (ok() && Step(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)))) owned_.push_back(p);
    return p;
  }
  // A copy of v (at least one element allocated); nullptr after an error.
  template <typename T>
  T* Upload(const std::vector<T>& v) {
    T* p = Alloc<T>(v.size());
    if (p != nullptr && !v.empty()) {
      Step(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    return p;
  }

 private:
  std::vector<void*> owned_;
  cudaError_t err_ = cudaSuccess;
};

// The assembler's output for `units` blocks of `rows` rows, with its count and offset arrays.
AsmOut CountingOut(TestScratch& s, int units, int64_t rows) {
  AsmOut o;
  o.num_blocks = units;
  o.count_ranges = s.Alloc<int64_t>(rows);
  o.count_cols = s.Alloc<int64_t>(rows);
  o.off_ranges = s.Alloc<int64_t>(rows + 1);
  o.off_cols = s.Alloc<int64_t>(rows + 1);
  return o;
}

// The count pass, the offsets' prefix sums on the host, the output arrays, the fill pass and the
// download, as the builders run them (launch(fill) launches one pass with o). Returns the first
// error.
template <typename Launch>
cudaError_t CountThenFill(TestScratch& s, int64_t rows, AsmOut& o, const Launch& launch,
                          AssembledForTest* out) {
  std::vector<int64_t> cr, cc;
  if (!(s.ok() && s.Step(launch(/*fill=*/false)) && s.Step(cudaDeviceSynchronize()) &&
        s.Step(Download(o.count_ranges, rows, &cr)) && s.Step(Download(o.count_cols, rows, &cc)))) {
    return s.error();
  }
  out->off_ranges.assign(rows + 1, 0);
  out->off_cols.assign(rows + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    out->off_ranges[r + 1] = out->off_ranges[r] + cr[r];
    out->off_cols[r + 1] = out->off_cols[r] + cc[r];
  }
  const int64_t nr = out->off_ranges[rows], nc = out->off_cols[rows];
  s.Step(cudaMemcpy(const_cast<int64_t*>(o.off_ranges), out->off_ranges.data(),
                    (rows + 1) * sizeof(int64_t), cudaMemcpyHostToDevice));
  s.Step(cudaMemcpy(const_cast<int64_t*>(o.off_cols), out->off_cols.data(),
                    (rows + 1) * sizeof(int64_t), cudaMemcpyHostToDevice));
  o.range_start = s.Alloc<int32_t>(nr);
  o.range_len = s.Alloc<int32_t>(nr);
  o.col_idx = s.Alloc<int32_t>(nc);
  if (s.ok() && s.Step(launch(/*fill=*/true)) && s.Step(cudaDeviceSynchronize())) {
    s.Step(Download(o.range_start, nr, &out->range_start));
    s.Step(Download(o.range_len, nr, &out->range_len));
    s.Step(Download(o.col_idx, nc, &out->col_idx));
  }
  return s.error();
}

}  // namespace

cudaError_t AssembleBitmapRowsForTest(const std::vector<int>& key_end,
                                      const std::vector<int64_t>& word_off,
                                      const std::vector<uint32_t>& range_words,
                                      const std::vector<uint32_t>& col_words, int num_slots,
                                      AssembledForTest* out, bool records, bool keep) {
  const int units = static_cast<int>(key_end.size());
  if (num_slots < 1 || num_slots > kAsmMaxSlots || word_off.size() != key_end.size() + 1 ||
      range_words.size() != col_words.size()) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = static_cast<int64_t>(num_slots) * units;
  TestScratch s;
  const BitmapSrc src{s.Upload(key_end), s.Upload(word_off), s.Upload(range_words),
                      s.Upload(col_words), num_slots};
  AsmOut o = CountingOut(s, units, rows);
  if (records) o.rec = s.Alloc<uint32_t>(static_cast<size_t>(units) * kAsmRecWords);
  if (keep && units > 0) {
    std::vector<int> sorted = key_end;
    std::sort(sorted.begin(), sorted.end());
    // The second longest row's stride: the longest row (and any as long) takes the bitmaps.
    o.keep_stride = AsmKeepStride(sorted[sorted.size() >= 2 ? sorted.size() - 2 : 0]);
    o.keep_units = (static_cast<int64_t>(units) * 2) / 3;
    o.keep = s.Alloc<uint32_t>(static_cast<size_t>(o.keep_units * AsmKeepUnitWords(o.keep_stride)));
  }
  const BitmapRecSrc rec_src{src};
  return CountThenFill(
      s, rows, o,
      [&](bool fill) {
        return records ? LaunchAssemble(rec_src, units, o, fill, 0)
                       : LaunchAssemble(src, units, o, fill, 0);
      },
      out);
}

cudaError_t AssembleSpanRowsForTest(const std::vector<int>& key_end,
                                    const std::vector<int64_t>& span_off,
                                    const std::vector<int64_t>& starts,
                                    const std::vector<int64_t>& ends, int num_slots, int span_cap,
                                    bool rest_word, AssembledForTest* out) {
  const int units = static_cast<int>(key_end.size());
  if (num_slots < 1 || num_slots > kAsmMaxSlots || span_off.size() != key_end.size() + 1 ||
      starts.size() != ends.size()) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = static_cast<int64_t>(num_slots) * units;
  TestScratch s;
  const SpanSrc src{s.Upload(key_end), s.Upload(span_off), s.Upload(starts), s.Upload(ends),
                    num_slots};
  AsmOut o = CountingOut(s, units, rows);
  o.rec = s.Alloc<uint32_t>(static_cast<size_t>(units) * kAsmRecWords);
  o.span_cap = span_cap;
  if (rest_word) o.span_rest = s.Alloc<uint32_t>(1);
  return CountThenFill(
      s, rows, o, [&](bool fill) { return LaunchAssemble(src, units, o, fill, 0); }, out);
}

}  // namespace row_assembly
}  // namespace spattn
