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
cudaError_t Upload(const std::vector<T>& v, T** d) {
  cudaError_t err = cudaMalloc(d, std::max<size_t>(v.size(), 1) * sizeof(T));
  if (err != cudaSuccess || v.empty()) return err;
  return cudaMemcpy(*d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
}

template <typename T>
cudaError_t Download(const T* d, size_t n, std::vector<T>* v) {
  v->assign(n, T{});
  if (n == 0) return cudaSuccess;
  return cudaMemcpy(v->data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
}

// The count pass, the offsets' prefix sums on the host, the output arrays, the fill pass and the
// download, as the builders run them (launch(fill) launches one pass). `step` keeps the first
// error; `alloc` allocates into the caller's owned list.
template <typename Launch, typename Step, typename Alloc>
void CountThenFill(int64_t rows, AsmOut& o, const Launch& launch, const Step& step,
                   const Alloc& alloc, AssembledForTest* out) {
  std::vector<int64_t> cr, cc;
  if (!(step(launch(/*fill=*/false)) && step(cudaDeviceSynchronize()) &&
        step(Download(o.count_ranges, rows, &cr)) && step(Download(o.count_cols, rows, &cc)))) {
    return;
  }
  out->off_ranges.assign(rows + 1, 0);
  out->off_cols.assign(rows + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    out->off_ranges[r + 1] = out->off_ranges[r] + cr[r];
    out->off_cols[r + 1] = out->off_cols[r] + cc[r];
  }
  const int64_t nr = out->off_ranges[rows], nc = out->off_cols[rows];
  step(cudaMemcpy(const_cast<int64_t*>(o.off_ranges), out->off_ranges.data(), (rows + 1) * sizeof(int64_t),
                  cudaMemcpyHostToDevice));
  step(cudaMemcpy(const_cast<int64_t*>(o.off_cols), out->off_cols.data(), (rows + 1) * sizeof(int64_t),
                  cudaMemcpyHostToDevice));
  int32_t *d_start = nullptr, *d_len = nullptr, *d_cols = nullptr;
  alloc(&d_start, nr);
  alloc(&d_len, nr);
  alloc(&d_cols, nc);
  o.range_start = d_start;
  o.range_len = d_len;
  o.col_idx = d_cols;
  // step(cudaSuccess): no error so far (an output array may have failed to allocate).
  if (step(cudaSuccess) && step(launch(/*fill=*/true)) && step(cudaDeviceSynchronize())) {
    step(Download(d_start, nr, &out->range_start));
    step(Download(d_len, nr, &out->range_len));
    step(Download(d_cols, nc, &out->col_idx));
  }
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
  std::vector<void*> owned;
  int* d_key_end = nullptr;
  int64_t *d_word_off = nullptr, *d_count_r = nullptr, *d_count_c = nullptr, *d_off_r = nullptr,
          *d_off_c = nullptr;
  uint32_t *d_rw = nullptr, *d_cw = nullptr;
  cudaError_t err = cudaSuccess;
  auto step = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
    return err == cudaSuccess;
  };
  auto alloc = [&](auto** p, size_t n) {
    if (step(cudaMalloc(p, std::max<size_t>(n, 1) * sizeof(**p)))) owned.push_back(*p);
  };
  if (step(Upload(key_end, &d_key_end))) owned.push_back(d_key_end);
  if (step(Upload(word_off, &d_word_off))) owned.push_back(d_word_off);
  if (step(Upload(range_words, &d_rw))) owned.push_back(d_rw);
  if (step(Upload(col_words, &d_cw))) owned.push_back(d_cw);
  alloc(&d_count_r, rows);
  alloc(&d_count_c, rows);
  alloc(&d_off_r, rows + 1);
  alloc(&d_off_c, rows + 1);
  uint32_t* o_keep = nullptr;
  int64_t o_keep_units = 0, o_keep_stride = 0;
  uint32_t* d_rec = nullptr;
  if (records) alloc(&d_rec, static_cast<size_t>(units) * kAsmRecWords);
  if (keep && units > 0) {
    std::vector<int> sorted = key_end;
    std::sort(sorted.begin(), sorted.end());
    // The second longest row's stride: the longest row (and any as long) takes the bitmaps.
    const int64_t stride = AsmKeepStride(sorted[sorted.size() >= 2 ? sorted.size() - 2 : 0]);
    const int64_t keep_units = (static_cast<int64_t>(units) * 2) / 3;
    uint32_t* d_keep = nullptr;
    alloc(&d_keep, static_cast<size_t>(keep_units * AsmKeepUnitWords(stride)));
    o_keep = d_keep;
    o_keep_units = keep_units;
    o_keep_stride = stride;
  }
  const BitmapSrc src{d_key_end, d_word_off, d_rw, d_cw, num_slots};
  AsmOut o;
  o.num_blocks = units;
  o.count_ranges = d_count_r;
  o.count_cols = d_count_c;
  o.off_ranges = d_off_r;
  o.off_cols = d_off_c;
  o.rec = d_rec;
  o.keep = o_keep;
  o.keep_units = o_keep_units;
  o.keep_stride = o_keep_stride;
  const BitmapRecSrc rec_src{src};
  auto launch = [&](bool fill) {
    return records ? LaunchAssemble(rec_src, units, o, fill, 0)
                   : LaunchAssemble(src, units, o, fill, 0);
  };
  if (err == cudaSuccess) CountThenFill(rows, o, launch, step, alloc, out);
  for (void* p : owned) cudaFree(p);
  return err;
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
  std::vector<void*> owned;
  int* d_key_end = nullptr;
  int64_t *d_span_off = nullptr, *d_starts = nullptr, *d_ends = nullptr, *d_count_r = nullptr,
          *d_count_c = nullptr, *d_off_r = nullptr, *d_off_c = nullptr;
  uint32_t *d_rec = nullptr, *d_rest = nullptr;
  cudaError_t err = cudaSuccess;
  auto step = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
    return err == cudaSuccess;
  };
  auto alloc = [&](auto** p, size_t n) {
    if (step(cudaMalloc(p, std::max<size_t>(n, 1) * sizeof(**p)))) owned.push_back(*p);
  };
  if (step(Upload(key_end, &d_key_end))) owned.push_back(d_key_end);
  if (step(Upload(span_off, &d_span_off))) owned.push_back(d_span_off);
  if (step(Upload(starts, &d_starts))) owned.push_back(d_starts);
  if (step(Upload(ends, &d_ends))) owned.push_back(d_ends);
  alloc(&d_count_r, rows);
  alloc(&d_count_c, rows);
  alloc(&d_off_r, rows + 1);
  alloc(&d_off_c, rows + 1);
  alloc(&d_rec, static_cast<size_t>(units) * kAsmRecWords);
  if (rest_word) alloc(&d_rest, 1);
  const SpanSrc src{d_key_end, d_span_off, d_starts, d_ends, num_slots};
  AsmOut o;
  o.num_blocks = units;
  o.count_ranges = d_count_r;
  o.count_cols = d_count_c;
  o.off_ranges = d_off_r;
  o.off_cols = d_off_c;
  o.rec = d_rec;
  o.span_cap = span_cap;
  o.span_rest = d_rest;
  auto launch = [&](bool fill) { return LaunchAssemble(src, units, o, fill, 0); };
  if (err == cudaSuccess) CountThenFill(rows, o, launch, step, alloc, out);
  for (void* p : owned) cudaFree(p);
  return err;
}

}  // namespace row_assembly
}  // namespace spattn
