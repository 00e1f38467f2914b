// cuda_bench: times the CUDA dense kernel and the sparse kernel (dense index, ranges-only and
// columns-only synthetic indexes) and prints one JSON line per measurement:
//   {"kernel": ..., "seq_len": ..., "heads": ..., "kv_heads": ..., "head_dim": ...,
//    "density": ..., "ms": median, "ms_min": ..., "tflops": ..., ...}
// TFLOP/s count 4 * head_dim FLOPs per computed (query, key) pair (QK^T and PV), causal pairs
// only ("effective" for the sparse kernel: pairs its index selects).
//
// Flags (--name=value): seq_lens (comma list, default 8192,32768,131072), heads 32, kv_heads 8,
// head_dim 128, iters 10, warmup 2, variants 1,2,3 (dense kernel shapes), sparse_variants 2,3,
// range_densities, col_densities, device 0, block_ms 128 (sparse index block sizes),
// skip_sparse_above (seq len above which the sparse synthetic indexes are skipped; default
// 131072), causal 1 (0: full attention), dtype bf16 (or fp16). Q, K, V are N(0, 1) values of
// the dtype (as torch.randn in sdpa_reference.py).
// warmup_ms, target_ms, max_iters (dense lines; default 0, 0, 1000): warm-up launches continue
// past `warmup` until their kernel time (the first launch's aside, at least 2 launches) adds up to
// warmup_ms, and the timed launches are at least
// `iters` and as many as target_ms of kernel time takes at the last warm-up launch's time (at most
// max_iters), so that every length runs long enough to settle its clock / power state. Dense
// lines also carry "warmup_iters" and "t0" / "t1", the Unix time (s) of the timed launches'
// window (sdpa_reference.py prints the same fields; run_dense_matrix.sh reads them).
// serve=1: reads requests from stdin, one a line (flags as on the command line, over them: a
// cell's --seq_lens= --kv_heads= --head_dim= --causal= --dtype=), answers each with its lines and
// {"served": rc}; the engines stay (dense_pairs.py alternates SDPA and us per cell this way).
// tag: a label copied into every line (the knobs of the run, say).
// knob_sets (dense lines; sparse ones with sparse_knobs=1): "NAME:VAR=VALUE+VAR=VALUE;NAME2:..."
// runs each dense variant once per set with those environment variables set (and re-read through
// ReloadCudaKernelKnobs), a line per set tagged "<tag>/<NAME>"; a set with no variables
// ("NAME:") is the defaults. rounds (default 1): the sets run that many times, interleaved (set 1,
// set 2, ..., set 1, ...), so drifts of the clock show as a spread between rounds rather than
// between sets. sparse_knobs=1: each sparse index runs under the knob sets and rounds as well (A/B
// of the sparse kernel's knobs in one process, the index built once). Shape matrix: kv_heads,
// head_dim, causal and dtype also take comma lists (every combination is run, each over seq_lens).
// sdpa (a file of sdpa_reference.py's JSON lines, run on the same machine in the same device
// run): dense lines of a shape it has also carry "sdpa_kernel", "sdpa_ms", "sdpa_tflops" and
// "vs_sdpa" (our TFLOP/s over SDPA's; the cuDNN backend's line, else the flash one's).
// Sparse lines also carry "dense_tflops" (the best dense variant of this run at the same shape)
// and "vs_dense" (their effective rate over it: the per-pair ratio).
// sampled_lines (gamma, e.g. 0.95; default 0 = none): after the synthetic indexes of each length
// and block_m, Q/K/V become an llm_mix prompt (kernels/workload, seed 0, the bench's shape) and
// the sampled_lines GPU builder's index of it runs as "sparse_sampled_lines" (under the knob sets
// with sparse_knobs=1), after one "index_stats" line: per index row (head x query block) the
// ranges, their lengths, the columns, and the key tiles the kernel walks at block_m keys a tile
// (full / partial, the keys per tile). workspace_mb: each engine's workspace (default 1024; the
// 128K sampled_lines build needs more, 8192). index_stats=1: an "index_stats" line before every
// sparse index (the synthetic ones too).
// Timeline of the sparse kernel: a knob set with SPATTN_HOPPER_TRACE=<file> (and sparse_knobs=1)
// dumps one launch per index (dense_fa3.cu; labelled through SPATTN_HOPPER_TRACE_TAG, which
// run_sparse sets), summarized by bench/sparse_timeline.py.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/builders/simple_patterns.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "kernels/method_config.h"
#include "kernels/parallel.h"
#include "kernels/sparse_index.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    f[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "1" : a.substr(eq + 1);
  }
  return f;
}

std::vector<double> Doubles(const std::string& s) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    double v;
    if (absl::SimpleAtod(part, &v)) out.push_back(v);
  }
  return out;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Device Q/K/V/O/LSE filled with a random (not zero) pattern.
struct Buffers {
  std::unique_ptr<CudaDeviceBuffer> q, k, v, o, lse;
};

absl::Status FillPattern(CudaDeviceBuffer* b, DType dtype, uint64_t seed) {
  // 16 MiB of N(0, 1) values of the dtype, tiled over the buffer.
  static std::map<DType, std::vector<uint16_t>>* patterns =
      new std::map<DType, std::vector<uint16_t>>();
  std::vector<uint16_t>* pattern = &(*patterns)[dtype];
  if (pattern->empty()) {
    pattern->resize(8 << 20);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (uint16_t& x : *pattern) {
      x = dtype == DType::kF16 ? FloatToFp16(dist(rng)) : FloatToBf16(dist(rng));
    }
  }
  const int64_t chunk = static_cast<int64_t>(pattern->size()) * 2;
  for (int64_t off = 0, i = 0; off < b->bytes(); off += chunk, ++i) {
    const int64_t n = std::min(chunk, b->bytes() - off);
    // Rotate the pattern so that tiles differ.
    const int64_t shift = (i * 7919 * 2) % chunk;
    const int64_t first = std::min(n, chunk - shift);
    absl::Status s =
        b->CopyFromHost(reinterpret_cast<const char*>(pattern->data()) + shift, first, off);
    if (!s.ok()) return s;
    if (n > first) {
      s = b->CopyFromHost(pattern->data(), n - first, off + first);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

int64_t SumPairs(const AttentionProblem& p, const SparseIndex& idx) {
  std::vector<int64_t> per(idx.num_heads());
  ParallelFor(idx.num_heads(),
              [&](int64_t s) { per[s] = ComputedPairs(p, idx, static_cast<int>(s)); });
  int64_t total = 0;
  for (int64_t x : per) total += x;
  return total;
}

// Ranges-only: sink 64 + local window 1024 + random 256-key spans (unaligned) until about
// `density` of the block's causal keys are covered.
SparseIndex RangesIndex(const AttentionProblem& p, int block_m, double density, uint64_t seed) {
  SparseIndex idx;
  std::vector<int> heads(p.num_q_heads);
  for (int h = 0; h < p.num_q_heads; ++h) heads[h] = h;
  InitSparseIndex(p, heads, block_m, &idx);
  std::vector<RowKeys> rows(idx.num_rows());
  ParallelFor(idx.num_rows(), [&](int64_t r) {
    const int b = static_cast<int>(r % idx.num_blocks());
    const BlockGeometry g = GetBlockGeometry(p, idx, b);
    std::mt19937_64 rng(seed * 1000003 + r);
    RowKeys& row = rows[r];
    row.AddRange(0, 64);
    row.AddRange(g.first_pos - 1023, g.last_pos + 1);
    const int64_t target = static_cast<int64_t>(density * g.key_end);
    int64_t covered = std::min<int64_t>(g.key_end, 64 + 1024 + block_m);
    while (covered < target) {
      const int64_t st = rng() % g.key_end;
      row.AddRange(st, st + 256);
      covered += 256;
    }
    row.Normalize(g.key_end);
  });
  CompactRows(&rows, &idx);
  return idx;
}

// Columns-only: every causal key of the block independently with probability `density`.
SparseIndex ColumnsIndex(const AttentionProblem& p, int block_m, double density, uint64_t seed) {
  SparseIndex idx;
  std::vector<int> heads(p.num_q_heads);
  for (int h = 0; h < p.num_q_heads; ++h) heads[h] = h;
  InitSparseIndex(p, heads, block_m, &idx);
  std::vector<std::vector<int32_t>> cols(idx.num_rows());
  ParallelFor(idx.num_rows(), [&](int64_t r) {
    const int b = static_cast<int>(r % idx.num_blocks());
    const BlockGeometry g = GetBlockGeometry(p, idx, b);
    std::mt19937_64 rng(seed * 1000003 + r);
    std::geometric_distribution<int> skip(density);
    for (int64_t k = skip(rng); k < g.key_end; k += 1 + skip(rng)) {
      cols[r].push_back(static_cast<int32_t>(k));
    }
  });
  idx.range_indptr.assign(idx.num_rows() + 1, 0);
  idx.col_indptr.assign(idx.num_rows() + 1, 0);
  for (int64_t r = 0; r < idx.num_rows(); ++r) {
    idx.col_indptr[r + 1] = idx.col_indptr[r] + static_cast<int32_t>(cols[r].size());
  }
  idx.col_idx.resize(idx.col_indptr.back());
  ParallelFor(idx.num_rows(), [&](int64_t r) {
    std::copy(cols[r].begin(), cols[r].end(), idx.col_idx.begin() + idx.col_indptr[r]);
  });
  return idx;
}

// One JSON line on the shape of `idx` as the sparse kernel walks it: per row (head slot x query
// block) ranges, columns and key tiles of `tile_n` keys (each range cut into tiles, then the
// columns), tiles with fewer than tile_n keys ("partial"), and the keys per tile.
void PrintIndexStats(const std::string& name, int seq_len, int block_m, int tile_n, int group,
                     const SparseIndex& idx, const std::string& device) {
  const int64_t rows = idx.num_rows();
  int64_t ranges = 0, range_keys = 0, cols = 0, tiles = 0, partial = 0, range_tiles = 0,
          col_tiles = 0, short_ranges = 0, empty_rows = 0, max_ranges = 0, max_cols = 0;
  int64_t len_hist[6] = {0, 0, 0, 0, 0, 0};  // <= 8, <= 64, <= 128, <= 256, <= 1024, more
  int64_t tail_keys = 0;                     // keys in partial range tiles
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t nr = idx.range_indptr[r + 1] - idx.range_indptr[r];
    const int64_t nc = idx.col_indptr[r + 1] - idx.col_indptr[r];
    ranges += nr;
    cols += nc;
    max_ranges = std::max(max_ranges, nr);
    max_cols = std::max(max_cols, nc);
    if (nr == 0 && nc == 0) ++empty_rows;
    for (int64_t e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
      const int64_t len = idx.range_len[e];
      range_keys += len;
      const int64_t t = (len + tile_n - 1) / tile_n;
      range_tiles += t;
      if (len % tile_n != 0) ++partial, tail_keys += len % tile_n;
      if (len < tile_n) ++short_ranges;
      len_hist[len <= 8      ? 0
               : len <= 64   ? 1
               : len <= 128  ? 2
               : len <= 256  ? 3
               : len <= 1024 ? 4
                             : 5]++;
    }
    col_tiles += (nc + tile_n - 1) / tile_n;
    if (nc % tile_n != 0) ++partial;
  }
  tiles = range_tiles + col_tiles;
  const double keys = static_cast<double>(range_keys + cols);
  // block_m 64: query blocks 2i and 2i + 1 of a head as one 128-row item over the union of
  // their keys in 128-key tiles (tiles x 128 x 128 computed) against each alone in 64-key tiles
  // (tiles x 64 x 64); "pair_fill": keys x 64 of the rows over the computed size.
  double sep_work = 0, pair_work = 0, key_work = 0;
  // block_m 64, GQA: head slots 2j and 2j + 1 (one kv head when `group` >= 2 and the slots are
  // the heads in order) at the same query block as one 128-row item (64 rows of each head) over
  // the union of their keys in 128-key tiles: "gqa_pair_fill_128" as pair_fill_128 above;
  // "gqa_same": the share of such pairs whose key sets are equal (a 128-row item without waste).
  double gqa_work = 0, gqa_same = 0;
  // Pairs computed by one 128-row item over the union of index rows r0 and r1's keys in 128-key
  // tiles.
  const auto union_work_128 = [&idx](int64_t r0, int64_t r1) {
    RowKeys u;
    for (const int64_t r : {r0, r1}) {
      for (int64_t e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
        u.AddRange(idx.range_start[e], idx.range_start[e] + idx.range_len[e]);
      }
      for (int64_t c = idx.col_indptr[r]; c < idx.col_indptr[r + 1]; ++c) u.AddCol(idx.col_idx[c]);
    }
    u.Normalize(int64_t{1} << 30);
    int64_t t = (static_cast<int64_t>(u.cols.size()) + 127) / 128;
    for (const auto& [a, e] : u.ranges) t += (e - a + 127) / 128;
    return static_cast<double>(t) * 128 * 128;
  };
  if (block_m == 64 && group >= 2 && idx.num_heads() >= 2) {
    const int pairs_h = idx.num_heads() / 2;
    std::vector<double> gw(pairs_h, 0.0), gs(pairs_h, 0.0);
    ParallelFor(pairs_h, [&](int64_t j) {
      for (int b = 0; b < idx.num_blocks(); ++b) {
        const int64_t r0 = (2 * j) * idx.num_blocks() + b, r1 = r0 + idx.num_blocks();
        const auto span = [](const std::vector<int32_t>& v, int64_t a, int64_t e) {
          return std::vector<int32_t>(v.begin() + a, v.begin() + e);
        };
        if (span(idx.range_start, idx.range_indptr[r0], idx.range_indptr[r0 + 1]) ==
                span(idx.range_start, idx.range_indptr[r1], idx.range_indptr[r1 + 1]) &&
            span(idx.range_len, idx.range_indptr[r0], idx.range_indptr[r0 + 1]) ==
                span(idx.range_len, idx.range_indptr[r1], idx.range_indptr[r1 + 1]) &&
            span(idx.col_idx, idx.col_indptr[r0], idx.col_indptr[r0 + 1]) ==
                span(idx.col_idx, idx.col_indptr[r1], idx.col_indptr[r1 + 1])) {
          gs[j] += 1;
        }
        gw[j] += union_work_128(r0, r1);
      }
    });
    for (int j = 0; j < pairs_h; ++j) gqa_work += gw[j], gqa_same += gs[j];
    gqa_same /= static_cast<double>(pairs_h) * idx.num_blocks();
  }
  if (block_m == 64 && idx.num_blocks() >= 2) {
    std::vector<double> pw(idx.num_heads(), 0.0);
    ParallelFor(idx.num_heads(), [&](int64_t h) {
      for (int b = 0; b + 1 < idx.num_blocks(); b += 2) {
        const int64_t r = h * idx.num_blocks() + b;
        pw[h] += union_work_128(r, r + 1);
      }
    });
    for (double x : pw) pair_work += x;
    sep_work = static_cast<double>(tiles) * 64 * 64;
    key_work = keys * 64;
  }
  const double sep_fill = sep_work > 0 ? key_work / sep_work : 0;
  const double pair_fill = pair_work > 0 ? key_work / pair_work : 0;
  const double gqa_fill =
      gqa_work > 0 ? (2 * (idx.num_heads() / 2) == idx.num_heads() ? keys * 64 / gqa_work : 0) : 0;
  std::printf(
      "{\"kernel\": \"index_stats\", \"index\": \"%s\", \"seq_len\": %d, \"block_m\": %d, "
      "\"tile_n\": %d, \"rows\": %lld, \"empty_rows\": %lld, \"ranges_per_row\": %.2f, "
      "\"max_ranges\": %lld, \"range_keys_per_row\": %.1f, \"cols_per_row\": %.1f, "
      "\"max_cols\": %lld, \"range_len_hist\": [%lld, %lld, %lld, %lld, %lld, %lld], "
      "\"short_ranges_per_row\": %.2f, \"tiles_per_row\": %.2f, \"range_tiles_per_row\": %.2f, "
      "\"col_tiles_per_row\": %.2f, \"partial_tiles_per_row\": %.2f, "
      "\"keys_in_partial_range_tiles_per_row\": %.1f, \"fill\": %.3f, "
      "\"tiles_if_packed_per_row\": %.2f, \"fill_64\": %.3f, \"pair_fill_128\": %.3f, "
      "\"gqa_pair_fill_128\": %.3f, \"gqa_same\": %.3f, \"device\": \"%s\"}\n",
      name.c_str(), seq_len, block_m, tile_n, static_cast<long long>(rows),
      static_cast<long long>(empty_rows), static_cast<double>(ranges) / rows,
      static_cast<long long>(max_ranges), static_cast<double>(range_keys) / rows,
      static_cast<double>(cols) / rows, static_cast<long long>(max_cols),
      static_cast<long long>(len_hist[0]), static_cast<long long>(len_hist[1]),
      static_cast<long long>(len_hist[2]), static_cast<long long>(len_hist[3]),
      static_cast<long long>(len_hist[4]), static_cast<long long>(len_hist[5]),
      static_cast<double>(short_ranges) / rows, static_cast<double>(tiles) / rows,
      static_cast<double>(range_tiles) / rows, static_cast<double>(col_tiles) / rows,
      static_cast<double>(partial) / rows, static_cast<double>(tail_keys) / rows,
      tiles > 0 ? keys / (static_cast<double>(tiles) * tile_n) : 0.0, keys / tile_n / rows,
      sep_fill, pair_fill, gqa_fill, gqa_same, device.c_str());
  std::fflush(stdout);
}

// Q/K/V of an llm_mix prompt (seed 0) of the problem's shape into the bench's device buffers
// (contiguous token-major layout, as `p` has).
absl::Status FillLlmMix(const AttentionProblem& p, Buffers& b) {
  WorkloadOptions o;
  o.workload = "llm_mix";
  o.shape.q_lens = {p.cu_seqlens_q[1]};
  o.shape.num_q_heads = p.num_q_heads;
  o.shape.num_kv_heads = p.num_kv_heads;
  o.shape.head_dim = p.head_dim;
  o.shape.dtype = p.dtype;
  o.shape.causal = p.causal;
  absl::StatusOr<Workload> w = GenerateWorkload(o);
  if (!w.ok()) return w.status();
  const AttentionProblem& h = w->problem();
  const int d = p.head_dim;
  const int64_t n = p.cu_seqlens_q[1];
  std::vector<uint16_t> packed;
  auto pack = [&](const TokenTensor& t, int heads, CudaDeviceBuffer* dst) {
    packed.resize(static_cast<size_t>(n) * heads * d);
    ParallelFor(n, [&](int64_t tok) {
      for (int hh = 0; hh < heads; ++hh) {
        std::memcpy(
            packed.data() + (tok * heads + hh) * d,
            static_cast<const uint16_t*>(t.data) + tok * t.token_stride + hh * t.head_stride,
            sizeof(uint16_t) * d);
      }
    });
    return dst->CopyFromHost(packed.data(), static_cast<int64_t>(packed.size()) * 2);
  };
  absl::Status s = pack(h.q, p.num_q_heads, b.q.get());
  if (s.ok()) s = pack(h.k, p.num_kv_heads, b.k.get());
  if (s.ok()) s = pack(h.v, p.num_kv_heads, b.v.get());
  return s;
}

// SDPA lines of sdpa_reference.py by shape (seq_len, heads, kv_heads, head_dim, causal, dtype).
using ShapeKey = std::tuple<int, int, int, int, int, std::string>;
struct SdpaLine {
  std::string kernel;
  double ms = 0, tflops = 0;
};

// The value after "key": in one JSON line (numbers and strings; enough for sdpa_reference.py's
// flat lines).
std::string JsonField(const std::string& line, const std::string& key) {
  const std::string pat = "\"" + key + "\": ";
  const size_t at = line.find(pat);
  if (at == std::string::npos) return "";
  size_t b = at + pat.size();
  if (b < line.size() && line[b] == '"') {
    const size_t e = line.find('"', b + 1);
    return e == std::string::npos ? "" : line.substr(b + 1, e - b - 1);
  }
  size_t e = b;
  while (e < line.size() && line[e] != ',' && line[e] != '}') ++e;
  return line.substr(b, e - b);
}

std::map<ShapeKey, SdpaLine> ReadSdpa(const std::string& path) {
  std::map<ShapeKey, SdpaLine> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::string kernel = JsonField(line, "kernel");
    if (kernel.rfind("sdpa_", 0) != 0) continue;
    const ShapeKey key{std::atoi(JsonField(line, "seq_len").c_str()),
                       std::atoi(JsonField(line, "heads").c_str()),
                       std::atoi(JsonField(line, "kv_heads").c_str()),
                       std::atoi(JsonField(line, "head_dim").c_str()),
                       std::atoi(JsonField(line, "causal").c_str()),
                       JsonField(line, "dtype")};
    auto it = out.find(key);
    // cuDNN is the reference; flash only where cuDNN has no line.
    if (it != out.end() && it->second.kernel == "sdpa_cudnn") continue;
    out[key] = {kernel, std::atof(JsonField(line, "ms").c_str()),
                std::atof(JsonField(line, "tflops").c_str())};
  }
  if (out.empty()) std::fprintf(stderr, "cuda_bench: no SDPA lines in %s\n", path.c_str());
  return out;
}

// One set of benchmark knobs (environment variables) for the dense lines.
struct KnobSet {
  std::string name;
  std::vector<std::pair<std::string, std::string>> vars;
};

// "NAME:VAR=VALUE+VAR=VALUE;NAME2:..." -> sets; empty -> one unnamed set of the defaults.
std::vector<KnobSet> ParseKnobSets(const std::string& spec) {
  std::vector<KnobSet> out;
  for (absl::string_view item : absl::StrSplit(spec, ';', absl::SkipEmpty())) {
    KnobSet set;
    const size_t colon = item.find(':');
    set.name = std::string(item.substr(0, colon));
    if (colon != absl::string_view::npos) {
      for (absl::string_view kv : absl::StrSplit(item.substr(colon + 1), '+', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        if (eq == absl::string_view::npos) continue;
        set.vars.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
      }
    }
    out.push_back(std::move(set));
  }
  if (out.empty()) out.emplace_back();
  return out;
}

int RunShape(const std::map<std::string, std::string>& flags, int kv_heads, int d, bool causal,
             DType dtype, const std::map<ShapeKey, SdpaLine>& sdpa,
             std::map<int, std::unique_ptr<CudaAttentionEngine>>& engines);

// Every combination of the shape lists in `flags`, each over seq_lens.
int RunMatrix(const std::map<std::string, std::string>& flags,
              const std::map<ShapeKey, SdpaLine>& sdpa,
              std::map<int, std::unique_ptr<CudaAttentionEngine>>& engines) {
  auto get = [&](const char* k, const char* def) {
    auto it = flags.find(k);
    return it == flags.end() ? std::string(def) : it->second;
  };
  for (double kvh : Doubles(get("kv_heads", "8"))) {
    for (double d : Doubles(get("head_dim", "128"))) {
      for (double c : Doubles(get("causal", "1"))) {
        for (absl::string_view dt : absl::StrSplit(get("dtype", "bf16"), ',', absl::SkipEmpty())) {
          const int rc = RunShape(flags, static_cast<int>(kvh), static_cast<int>(d), c != 0,
                                  dt == "fp16" ? DType::kF16 : DType::kBF16, sdpa, engines);
          if (rc != 0) return rc;
        }
      }
    }
  }
  return 0;
}

int Run(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv);
  auto get = [&](const char* k, const char* def) {
    auto it = flags.find(k);
    return it == flags.end() ? std::string(def) : it->second;
  };
  const std::map<ShapeKey, SdpaLine> sdpa = ReadSdpa(get("sdpa", ""));
  std::map<int, std::unique_ptr<CudaAttentionEngine>> engines;
  if (get("serve", "0") != "1") return RunMatrix(flags, sdpa, engines);
  // serve=1: one request per stdin line ("--seq_lens=... --kv_heads=..."; flags over the command
  // line's), answered by its lines and then {"served": rc}; the engines live across requests.
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> args = {"cuda_bench"};
    for (absl::string_view a : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      args.emplace_back(a);
    }
    std::vector<char*> argv2;
    for (std::string& a : args) argv2.push_back(a.data());
    std::map<std::string, std::string> request = flags;
    for (const auto& [k, v] : ParseFlags(static_cast<int>(argv2.size()), argv2.data())) {
      request[k] = v;
    }
    const int rc = RunMatrix(request, sdpa, engines);
    std::printf("{\"served\": %d}\n", rc);
    std::fflush(stdout);
  }
  return 0;
}

int RunShape(const std::map<std::string, std::string>& flags, int kv_heads, int d, bool causal,
             DType dtype, const std::map<ShapeKey, SdpaLine>& sdpa,
             std::map<int, std::unique_ptr<CudaAttentionEngine>>& engines) {
  auto get = [&](const char* k, const char* def) {
    auto it = flags.find(k);
    return it == flags.end() ? std::string(def) : it->second;
  };
  const std::vector<double> seq_lens = Doubles(get("seq_lens", "8192,32768,131072"));
  const int heads = std::atoi(get("heads", "32").c_str());
  const int iters = std::atoi(get("iters", "10").c_str());
  const int warmup = std::atoi(get("warmup", "2").c_str());
  const double warmup_ms = std::atof(get("warmup_ms", "0").c_str());
  const double target_ms = std::atof(get("target_ms", "0").c_str());
  const int max_iters = std::max(1, std::atoi(get("max_iters", "1000").c_str()));
  const std::vector<double> variants = Doubles(get("variants", "1,2,3"));
  const std::vector<double> sparse_variants = Doubles(get("sparse_variants", "2,3"));
  const std::vector<double> block_ms = Doubles(get("block_ms", "128"));
  const std::vector<double> range_dens = Doubles(get("range_densities", "0.1,0.3"));
  const std::vector<double> col_dens = Doubles(get("col_densities", "0.05,0.2"));
  const int device = std::atoi(get("device", "0").c_str());
  const std::string base_tag = get("tag", "");
  std::string tag = base_tag;
  const std::vector<KnobSet> knob_sets = ParseKnobSets(get("knob_sets", ""));
  const int rounds = std::max(1, std::atoi(get("rounds", "1").c_str()));
  // sparse_knobs=1: the sparse lines run under the knob sets (and rounds) too.
  const bool sparse_knobs = get("sparse_knobs", "0") == "1";
  const std::vector<KnobSet> sparse_sets = sparse_knobs ? knob_sets : ParseKnobSets("");
  const int sparse_rounds = sparse_knobs ? rounds : 1;
  const double skip_sparse_above = std::atof(get("skip_sparse_above", "131072").c_str());
  const double sl_gamma = std::atof(get("sampled_lines", "0").c_str());
  const bool all_stats = get("index_stats", "0") == "1";
  const int64_t workspace = int64_t{std::atoi(get("workspace_mb", "1024").c_str())} << 20;

  std::string why;
  const auto devices = ListCudaDevices(&why);
  if (devices.empty()) {
    std::fprintf(stderr, "cuda_bench: no CUDA device: %s\n", why.c_str());
    return 2;
  }
  std::fprintf(stderr, "cuda_bench on %s (%d SMs)\n", devices[device].name.c_str(),
               devices[device].multiprocessors);
  std::vector<double> all_variants = variants;
  all_variants.insert(all_variants.end(), sparse_variants.begin(), sparse_variants.end());
  for (double v : all_variants) {
    if (engines.count(static_cast<int>(v)) > 0) continue;
    CudaEngineOptions o;
    o.kernel_variant = static_cast<int>(v);
    auto e = CudaAttentionEngine::Create(device, workspace, o);
    if (!e.ok()) {
      std::fprintf(stderr, "engine: %s\n", e.status().ToString().c_str());
      return 1;
    }
    engines[o.kernel_variant] = std::move(*e);
  }
  const char* kVariantName[] = {"auto",          "w8", "w4", "wgmma", "wgmma_deep", "hopper",
                                "hopper_persist"};
  std::map<int, double> best_dense;  // seq_len -> best dense TFLOP/s of this run

  for (double sl : seq_lens) {
    const int n = static_cast<int>(sl);
    AttentionProblem p;
    p.cu_seqlens_q = {0, n};
    p.cu_seqlens_k = {0, n};
    p.num_q_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = d;
    p.softmax_scale = 1.f / std::sqrt(static_cast<float>(d));
    p.causal = causal;
    p.dtype = dtype;
    p.space = MemorySpace::kCuda;
    SetContiguousStrides(&p);
    Buffers b;
    const int64_t qbytes = int64_t{n} * heads * d * 2, kbytes = int64_t{n} * kv_heads * d * 2;
    auto alloc = [&](std::unique_ptr<CudaDeviceBuffer>* out, int64_t bytes) {
      auto r = CudaDeviceBuffer::Allocate(device, bytes);
      if (!r.ok()) {
        std::fprintf(stderr, "alloc: %s\n", r.status().ToString().c_str());
        std::exit(1);
      }
      *out = std::move(*r);
    };
    alloc(&b.q, qbytes);
    alloc(&b.k, kbytes);
    alloc(&b.v, kbytes);
    alloc(&b.o, qbytes);
    alloc(&b.lse, int64_t{n} * heads * 4);
    if (!FillPattern(b.q.get(), dtype, 1).ok() || !FillPattern(b.k.get(), dtype, 2).ok() ||
        !FillPattern(b.v.get(), dtype, 3).ok()) {
      std::fprintf(stderr, "fill failed\n");
      return 1;
    }
    p.q.data = b.q->data();
    p.k.data = b.k->data();
    p.v.data = b.v->data();
    p.o = b.o->data();
    p.maybe_lse = static_cast<float*>(b.lse->data());
    const double dense_flops = 4.0 * d * static_cast<double>(AllowedPairs(p)) * heads;

    int block_m = 128;
    // Wall-clock window (Unix seconds) of a dense line's timed launches and its warm-up count:
    // run_dense_matrix.sh cuts its nvidia-smi samples by these.
    double win_t0 = 0, win_t1 = 0;
    int warm_iters = 0;
    auto emit = [&](const std::string& kernel, double density, double flops,
                    const std::vector<double>& kernel_s, const std::vector<double>& sched_s) {
      const double ms = Median(kernel_s) * 1e3;
      const double ms_min = *std::min_element(kernel_s.begin(), kernel_s.end()) * 1e3;
      const double tflops = flops / (ms * 1e-3) / 1e12;
      std::string per_pair;
      if (kernel.rfind("dense", 0) == 0) {
        best_dense[n] = std::max(best_dense[n], tflops);
        auto it = sdpa.find(ShapeKey{n, heads, kv_heads, d, causal ? 1 : 0, DTypeName(dtype)});
        if (it != sdpa.end() && it->second.tflops > 0) {
          char buf[160];
          std::snprintf(buf, sizeof(buf),
                        ", \"sdpa_kernel\": \"%s\", \"sdpa_ms\": %.4f, \"sdpa_tflops\": %.1f, "
                        "\"vs_sdpa\": %.3f",
                        it->second.kernel.c_str(), it->second.ms, it->second.tflops,
                        tflops / it->second.tflops);
          per_pair = buf;
        }
      } else if (best_dense.count(n) > 0) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), ", \"dense_tflops\": %.1f, \"vs_dense\": %.3f",
                      best_dense[n], tflops / best_dense[n]);
        per_pair = buf;
      }
      if (win_t1 > 0) {
        char buf[112];
        std::snprintf(buf, sizeof(buf), ", \"warmup_iters\": %d, \"t0\": %.3f, \"t1\": %.3f",
                      warm_iters, win_t0, win_t1);
        per_pair += buf;
      }
      std::printf(
          "{\"kernel\": \"%s\", \"seq_len\": %d, \"heads\": %d, \"kv_heads\": %d, "
          "\"head_dim\": %d, \"causal\": %d, \"dtype\": \"%s\", \"block_m\": %d, "
          "\"density\": %.4f, \"ms\": %.4f, \"ms_min\": %.4f, \"schedule_ms\": %.4f, "
          "\"iters\": %d, \"tflops\": %.1f%s, \"tag\": \"%s\", \"device\": \"%s\"}\n",
          kernel.c_str(), n, heads, kv_heads, d, causal ? 1 : 0, DTypeName(dtype), block_m, density,
          ms, ms_min, Median(sched_s) * 1e3, static_cast<int>(kernel_s.size()), tflops,
          per_pair.c_str(), tag.c_str(), devices[device].name.c_str());
      std::fflush(stdout);
    };

    for (int round = 0; round < rounds; ++round) {
      for (const KnobSet& set : knob_sets) {
        for (const auto& [var, value] : set.vars) setenv(var.c_str(), value.c_str(), 1);
        ReloadCudaKernelKnobs();
        for (double v : variants) {
          CudaAttentionEngine* engine = engines[static_cast<int>(v)].get();
          std::vector<double> ks, ss;
          double warm_s = 0, last_s = 0;
          auto once = [&](double* kernel_s) {
            CudaStageTimes t;
            const absl::Status s = engine->RunDense(p, &t);
            if (!s.ok()) {
              std::fprintf(stderr, "dense: %s\n", s.ToString().c_str());
              return false;
            }
            *kernel_s = t.kernel_seconds;
            return true;
          };
          // Warm-up: `warmup` launches, more until they add up to warmup_ms; the timed launches:
          // `iters`, more until they are expected to add up to target_ms (at the last warm-up
          // launch's time), at most max_iters.
          warm_iters = 0;
          // The first launch carries one-off work (the tail split's workspace, first use of a
          // shape): it counts for neither warmup_ms nor the estimate.
          while (warm_iters < warmup ||
                 (warmup_ms > 0 && (warm_iters < 2 || warm_s * 1e3 < warmup_ms) &&
                  warm_iters < max_iters)) {
            if (!once(&last_s)) return 1;
            if (warm_iters > 0) warm_s += last_s;
            ++warm_iters;
          }
          int timed = iters;
          if (target_ms > 0 && last_s > 0) {
            timed = std::max(
                iters, std::min(max_iters, static_cast<int>(std::ceil(target_ms / (last_s * 1e3)))));
          }
          win_t0 = WallSeconds();
          for (int i = 0; i < timed; ++i) {
            double k = 0;
            if (!once(&k)) return 1;
            ks.push_back(k), ss.push_back(0);
          }
          win_t1 = WallSeconds();
          tag = set.name.empty() ? base_tag : base_tag + "/" + set.name;
          emit(std::string("dense_") + kVariantName[static_cast<int>(v)], 1.0, dense_flops, ks, ss);
          win_t1 = 0;
        }
        for (const auto& [var, value] : set.vars) unsetenv(var.c_str());
        ReloadCudaKernelKnobs();
      }
    }
    tag = base_tag;

    auto run_sparse = [&](const std::string& name, const SparseIndex& idx) -> int {
      if (all_stats && name != "sparse_sampled_lines") {
        PrintIndexStats(name.substr(7), n, block_m, block_m, heads / kv_heads, idx,
                        devices[device].name);
      }
      std::unique_ptr<CudaDeviceBuffer> storage;
      auto view = UploadSparseIndex(p, idx, device, &storage);
      if (!view.ok()) {
        std::fprintf(stderr, "%s upload: %s\n", name.c_str(), view.status().ToString().c_str());
        return 1;
      }
      const double pairs = static_cast<double>(SumPairs(p, idx));
      for (int round = 0; round < sparse_rounds; ++round) {
        for (const KnobSet& set : sparse_sets) {
          for (const auto& [var, value] : set.vars) setenv(var.c_str(), value.c_str(), 1);
          ReloadCudaKernelKnobs();
          tag = set.name.empty() ? base_tag : base_tag + "/" + set.name;
          {
            // The label of a SPATTN_HOPPER_TRACE timeline dump (dense_fa3.cu) of this index.
            char label[192];
            std::snprintf(label, sizeof(label), "%s n=%d bm=%d density=%.4f set=%s round=%d",
                          name.c_str(), n, block_m,
                          pairs / (static_cast<double>(AllowedPairs(p)) * heads),
                          tag.c_str(), round);
            setenv("SPATTN_HOPPER_TRACE_TAG", label, 1);
          }
          for (double v : sparse_variants) {
            CudaAttentionEngine* engine = engines[static_cast<int>(v)].get();
            std::vector<double> ks, ss;
            for (int i = 0; i < warmup + iters; ++i) {
              CudaStageTimes t;
              const absl::Status s = engine->RunSparseDeviceIndex(p, *view, &t);
              if (!s.ok()) {
                std::fprintf(stderr, "%s: %s\n", name.c_str(), s.ToString().c_str());
                return 1;
              }
              if (i >= warmup) ks.push_back(t.kernel_seconds), ss.push_back(t.schedule_seconds);
            }
            emit(name + "_" + kVariantName[static_cast<int>(v)],
                 pairs / (static_cast<double>(AllowedPairs(p)) * heads), 4.0 * d * pairs, ks, ss);
          }
          for (const auto& [var, value] : set.vars) unsetenv(var.c_str());
          ReloadCudaKernelKnobs();
        }
      }
      tag = base_tag;
      return 0;
    };

    for (double bm : block_ms) {
      block_m = static_cast<int>(bm);
      SparseIndex dense_idx;
      std::vector<int> all(heads);
      for (int h = 0; h < heads; ++h) all[h] = h;
      if (!BuildDenseIndex(p, all, block_m, &dense_idx).ok()) return 1;
      if (run_sparse("sparse_dense_index", dense_idx) != 0) return 1;
      if (sl > skip_sparse_above) continue;
      for (double rd : range_dens) {
        if (run_sparse("sparse_ranges", RangesIndex(p, block_m, rd, 11)) != 0) return 1;
      }
      for (double cd : col_dens) {
        if (run_sparse("sparse_columns", ColumnsIndex(p, block_m, cd, 12)) != 0) return 1;
      }
    }
    if (sl_gamma > 0) {
      // The sampled_lines index of an llm_mix prompt (built on the GPU, downloaded, uploaded
      // again by run_sparse as the synthetic ones).
      const absl::Status fs = FillLlmMix(p, b);
      if (!fs.ok()) {
        std::fprintf(stderr, "llm_mix: %s\n", fs.ToString().c_str());
        return 1;
      }
      CudaAttentionEngine& engine = *engines[static_cast<int>(sparse_variants[0])];
      for (double bm : block_ms) {
        block_m = static_cast<int>(bm);
        MethodConfig config;
        config.method = Method::kSampledLines;
        config.sampled_lines.gamma = static_cast<float>(sl_gamma);
        std::vector<int> all(heads);
        for (int h = 0; h < heads; ++h) all[h] = h;
        GpuBuildOptions o;
        o.block_m = block_m;
        SparseIndex idx;
        absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(engine, p, config, all, o);
        absl::Status s = built.status();
        if (s.ok()) s = DownloadIndex(engine, *built, &idx);
        engine.ReleaseIndexes();
        if (!s.ok()) {
          std::fprintf(stderr, "sampled_lines: %s\n", s.ToString().c_str());
          return 1;
        }
        PrintIndexStats("sampled_lines", n, block_m, block_m, heads / kv_heads, idx,
                        devices[device].name);
        if (run_sparse("sparse_sampled_lines", idx) != 0) return 1;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) { return spattn::Run(argc, argv); }
