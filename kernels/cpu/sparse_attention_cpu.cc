#include "kernels/cpu/sparse_attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

constexpr int kTileN = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows are processed in groups of kRowGroup so that one load of keys (or values) feeds
// several rows' FMAs from registers; blocks are padded to a multiple with zero rows.
constexpr int kRowGroup = 4;

int PaddedRows(int rows) { return (rows + kRowGroup - 1) / kRowGroup * kRowGroup; }

// s[i][j] = sum_c q[i][c] * kt[c][j] for i < padded rows, j < kTileN. q is [rows, d], kt is
// [d, kTileN], s is [rows, kTileN]. 4 rows x 16 keys of accumulators live in registers.
void ScoreTile(const float* q, const float* kt, int rows, int d, float* s) {
  for (int i0 = 0; i0 < rows; i0 += kRowGroup) {
    const float* q0 = q + static_cast<size_t>(i0) * d;
    for (int j0 = 0; j0 < kTileN; j0 += 16) {
      __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
      __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
      __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps();
      __m256 a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
      for (int c = 0; c < d; ++c) {
        const __m256 k0 = _mm256_loadu_ps(kt + c * kTileN + j0);
        const __m256 k1 = _mm256_loadu_ps(kt + c * kTileN + j0 + 8);
        __m256 b = _mm256_broadcast_ss(q0 + c);
        a00 = _mm256_fmadd_ps(b, k0, a00);
        a01 = _mm256_fmadd_ps(b, k1, a01);
        b = _mm256_broadcast_ss(q0 + d + c);
        a10 = _mm256_fmadd_ps(b, k0, a10);
        a11 = _mm256_fmadd_ps(b, k1, a11);
        b = _mm256_broadcast_ss(q0 + 2 * d + c);
        a20 = _mm256_fmadd_ps(b, k0, a20);
        a21 = _mm256_fmadd_ps(b, k1, a21);
        b = _mm256_broadcast_ss(q0 + 3 * d + c);
        a30 = _mm256_fmadd_ps(b, k0, a30);
        a31 = _mm256_fmadd_ps(b, k1, a31);
      }
      float* s0 = s + static_cast<size_t>(i0) * kTileN + j0;
      _mm256_storeu_ps(s0, a00);
      _mm256_storeu_ps(s0 + 8, a01);
      _mm256_storeu_ps(s0 + kTileN, a10);
      _mm256_storeu_ps(s0 + kTileN + 8, a11);
      _mm256_storeu_ps(s0 + 2 * kTileN, a20);
      _mm256_storeu_ps(s0 + 2 * kTileN + 8, a21);
      _mm256_storeu_ps(s0 + 3 * kTileN, a30);
      _mm256_storeu_ps(s0 + 3 * kTileN + 8, a31);
    }
  }
}

// acc[i][c] += sum_j p[i][j] * v[j][c] for i < padded rows, j < n. p is [rows, kTileN], v is
// [n, d], acc is [rows, d]; d is a multiple of 8.
void AccumulateTile(const float* p, const float* v, int rows, int n, int d, float* acc) {
  for (int i0 = 0; i0 < rows; i0 += kRowGroup) {
    const float* p0 = p + static_cast<size_t>(i0) * kTileN;
    float* o0 = acc + static_cast<size_t>(i0) * d;
    int c0 = 0;
    for (; c0 + 16 <= d; c0 += 16) {
      __m256 a00 = _mm256_loadu_ps(o0 + c0), a01 = _mm256_loadu_ps(o0 + c0 + 8);
      __m256 a10 = _mm256_loadu_ps(o0 + d + c0), a11 = _mm256_loadu_ps(o0 + d + c0 + 8);
      __m256 a20 = _mm256_loadu_ps(o0 + 2 * d + c0), a21 = _mm256_loadu_ps(o0 + 2 * d + c0 + 8);
      __m256 a30 = _mm256_loadu_ps(o0 + 3 * d + c0), a31 = _mm256_loadu_ps(o0 + 3 * d + c0 + 8);
      for (int j = 0; j < n; ++j) {
        const __m256 v0 = _mm256_loadu_ps(v + static_cast<size_t>(j) * d + c0);
        const __m256 v1 = _mm256_loadu_ps(v + static_cast<size_t>(j) * d + c0 + 8);
        __m256 b = _mm256_broadcast_ss(p0 + j);
        a00 = _mm256_fmadd_ps(b, v0, a00);
        a01 = _mm256_fmadd_ps(b, v1, a01);
        b = _mm256_broadcast_ss(p0 + kTileN + j);
        a10 = _mm256_fmadd_ps(b, v0, a10);
        a11 = _mm256_fmadd_ps(b, v1, a11);
        b = _mm256_broadcast_ss(p0 + 2 * kTileN + j);
        a20 = _mm256_fmadd_ps(b, v0, a20);
        a21 = _mm256_fmadd_ps(b, v1, a21);
        b = _mm256_broadcast_ss(p0 + 3 * kTileN + j);
        a30 = _mm256_fmadd_ps(b, v0, a30);
        a31 = _mm256_fmadd_ps(b, v1, a31);
      }
      _mm256_storeu_ps(o0 + c0, a00);
      _mm256_storeu_ps(o0 + c0 + 8, a01);
      _mm256_storeu_ps(o0 + d + c0, a10);
      _mm256_storeu_ps(o0 + d + c0 + 8, a11);
      _mm256_storeu_ps(o0 + 2 * d + c0, a20);
      _mm256_storeu_ps(o0 + 2 * d + c0 + 8, a21);
      _mm256_storeu_ps(o0 + 3 * d + c0, a30);
      _mm256_storeu_ps(o0 + 3 * d + c0 + 8, a31);
    }
    for (; c0 < d; c0 += 8) {  // d % 16 == 8
      __m256 a0 = _mm256_loadu_ps(o0 + c0), a1 = _mm256_loadu_ps(o0 + d + c0);
      __m256 a2 = _mm256_loadu_ps(o0 + 2 * d + c0), a3 = _mm256_loadu_ps(o0 + 3 * d + c0);
      for (int j = 0; j < n; ++j) {
        const __m256 v0 = _mm256_loadu_ps(v + static_cast<size_t>(j) * d + c0);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), v0, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + kTileN + j), v0, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 2 * kTileN + j), v0, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 3 * kTileN + j), v0, a3);
      }
      _mm256_storeu_ps(o0 + c0, a0);
      _mm256_storeu_ps(o0 + d + c0, a1);
      _mm256_storeu_ps(o0 + 2 * d + c0, a2);
      _mm256_storeu_ps(o0 + 3 * d + c0, a3);
    }
  }
}

// Per-thread scratch for one (head slot, query block) row of the index.
struct Scratch {
  std::vector<float> q, acc, m, l, kt, v, s, row;
  std::vector<int32_t> keys;
  void Resize(int bm, int d) {
    const size_t rows = PaddedRows(bm);
    q.resize(rows * d);
    acc.resize(rows * d);
    m.resize(rows);
    l.resize(rows);
    kt.resize(static_cast<size_t>(d) * kTileN);
    v.resize(static_cast<size_t>(kTileN) * d);
    s.resize(rows * kTileN);
    row.resize(d);
    keys.resize(kTileN);
  }
};

class RowComputer {
 public:
  RowComputer(const AttentionProblem& p, Scratch* sc) : p_(p), sc_(*sc), d_(p.head_dim) {}

  // Loads the block's queries, pre-scaled so that scores are in log2 units.
  void Begin(int seq, int q_head, int q_begin, int q_end) {
    seq_ = seq;
    kv_head_ = p_.kv_head_of(q_head);
    rows_ = q_end - q_begin;
    first_pos_ = p_.query_pos(seq, q_begin);
    ktok0_ = p_.cu_seqlens_k[seq];
    const float scale = p_.softmax_scale * kLog2e;
    const char* qbase = static_cast<const char*>(p_.q.data);
    const int es = DTypeSize(p_.dtype);
    for (int i = 0; i < rows_; ++i) {
      const int64_t tok = p_.cu_seqlens_q[seq] + q_begin + i;
      const char* src = qbase + (tok * p_.q.token_stride + int64_t{q_head} * p_.q.head_stride) * es;
      float* dst = &sc_.q[static_cast<size_t>(i) * d_];
      ToFloat(src, p_.dtype, d_, dst);
      for (int c = 0; c < d_; ++c) dst[c] *= scale;
    }
    padded_ = PaddedRows(rows_);
    // Padding rows: zero queries, whose probabilities are forced to 0 below.
    std::fill(sc_.q.begin() + static_cast<size_t>(rows_) * d_,
              sc_.q.begin() + static_cast<size_t>(padded_) * d_, 0.f);
    std::fill(sc_.acc.begin(), sc_.acc.begin() + static_cast<size_t>(padded_) * d_, 0.f);
    std::fill(sc_.m.begin(), sc_.m.begin() + padded_, kNegInf);
    std::fill(sc_.l.begin(), sc_.l.begin() + padded_, 0.f);
  }

  // Adds keys [start, end), tile by tile.
  void AddRange(int start, int end) {
    for (int t = start; t < end; t += kTileN) {
      const int n = std::min(kTileN, end - t);
      for (int j = 0; j < n; ++j) sc_.keys[j] = t + j;
      Tile(n);
    }
  }

  // Adds the n gathered keys at cols.
  void AddColumns(const int32_t* cols, int n) {
    for (int t = 0; t < n; t += kTileN) {
      const int len = std::min(kTileN, n - t);
      std::copy(cols + t, cols + t + len, sc_.keys.begin());
      Tile(len);
    }
  }

  // Writes O rows [q_begin, q_end) of q_head and their LSE.
  void Finish(int q_head, int q_begin) {
    const int es = DTypeSize(p_.dtype);
    char* obase = static_cast<char*>(p_.o);
    for (int i = 0; i < rows_; ++i) {
      const int64_t tok = p_.cu_seqlens_q[seq_] + q_begin + i;
      float* acc = &sc_.acc[static_cast<size_t>(i) * d_];
      const float l = sc_.l[i];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      for (int c = 0; c < d_; ++c) sc_.row[c] = acc[c] * inv;
      char* dst = obase + (tok * p_.o_token_stride + int64_t{q_head} * p_.o_head_stride) * es;
      FromFloat(sc_.row.data(), p_.dtype, d_, dst);
      if (p_.maybe_lse) {
        p_.maybe_lse[int64_t{q_head} * p_.total_q() + tok] =
            l > 0.f ? (sc_.m[i] + std::log2(l)) * kLn2 : kNegInf;
      }
    }
  }

 private:
  // Scores, masks and accumulates the n keys in sc_.keys.
  void Tile(int n) {
    const int es = DTypeSize(p_.dtype);
    const char* kbase = static_cast<const char*>(p_.k.data);
    const char* vbase = static_cast<const char*>(p_.v.data);
    float* kt = sc_.kt.data();
    for (int j = 0; j < n; ++j) {
      const int64_t tok = ktok0_ + sc_.keys[j];
      ToFloat(kbase + (tok * p_.k.token_stride + int64_t{kv_head_} * p_.k.head_stride) * es,
              p_.dtype, d_, sc_.row.data());
      for (int c = 0; c < d_; ++c) kt[c * kTileN + j] = sc_.row[c];
      ToFloat(vbase + (tok * p_.v.token_stride + int64_t{kv_head_} * p_.v.head_stride) * es,
              p_.dtype, d_, &sc_.v[static_cast<size_t>(j) * d_]);
    }
    const bool needs_mask = p_.causal && sc_.keys[n - 1] > first_pos_;  // keys are sorted
    ScoreTile(sc_.q.data(), kt, padded_, d_, sc_.s.data());
    // Online softmax per row; s becomes the tile's probabilities (0 for masked keys, for keys
    // past n and for padding rows), and acc is rescaled to the new row maximum.
    for (int i = 0; i < padded_; ++i) {
      float* s = &sc_.s[static_cast<size_t>(i) * kTileN];
      if (i >= rows_) {
        std::fill(s, s + kTileN, 0.f);
        continue;
      }
      if (needs_mask) {
        const int pos = first_pos_ + i;
        for (int j = 0; j < n; ++j) {
          if (sc_.keys[j] > pos) s[j] = kNegInf;
        }
      }
      float mx = sc_.m[i];
      for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
      if (mx == kNegInf) {  // Every key of this tile is masked for this row.
        std::fill(s, s + kTileN, 0.f);
        continue;
      }
      const float corr = std::exp2(sc_.m[i] - mx);
      float sum = 0.f;
      for (int j = 0; j < n; ++j) {
        s[j] = std::exp2(s[j] - mx);
        sum += s[j];
      }
      std::fill(s + n, s + kTileN, 0.f);
      sc_.l[i] = sc_.l[i] * corr + sum;
      sc_.m[i] = mx;
      if (corr != 1.f) {
        float* acc = &sc_.acc[static_cast<size_t>(i) * d_];
        for (int c = 0; c < d_; ++c) acc[c] *= corr;
      }
    }
    AccumulateTile(sc_.s.data(), sc_.v.data(), padded_, n, d_, sc_.acc.data());
  }

  const AttentionProblem& p_;
  Scratch& sc_;
  const int d_;
  int seq_ = 0, kv_head_ = 0, rows_ = 0, padded_ = 0, first_pos_ = 0;
  int64_t ktok0_ = 0;
};

}  // namespace

absl::Status SparseAttentionCpu(const AttentionProblem& p, const SparseIndex& index) {
  absl::Status s = p.Validate();
  if (!s.ok()) return s;
  if (p.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("SparseAttentionCpu needs host memory");
  }
  if (index.block_m <= 0 || index.block_m > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("index.block_m must be in [1, 256], got ", index.block_m));
  }
  if (static_cast<int>(index.block_offsets.size()) != p.batch() + 1 ||
      static_cast<int64_t>(index.range_indptr.size()) != index.num_rows() + 1 ||
      static_cast<int64_t>(index.col_indptr.size()) != index.num_rows() + 1) {
    return absl::InvalidArgumentError("index: arrays do not match the problem's batch");
  }
  const int nblocks = index.num_blocks();
  // Sequence of each block, computed once.
  std::vector<int> block_seq(nblocks);
  for (int b = 0; b < p.batch(); ++b) {
    for (int blk = index.block_offsets[b]; blk < index.block_offsets[b + 1]; ++blk) {
      block_seq[blk] = b;
    }
  }
  const int bm = index.block_m;
  ParallelFor(index.num_rows(), [&](int64_t r) {
    thread_local Scratch scratch;
    scratch.Resize(bm, p.head_dim);
    const int slot = static_cast<int>(r / nblocks);
    const int blk = static_cast<int>(r % nblocks);
    const int seq = block_seq[blk];
    const int q_begin = (blk - index.block_offsets[seq]) * bm;
    const int q_end = std::min(q_begin + bm, p.q_len(seq));
    const int head = index.heads[slot];
    RowComputer rc(p, &scratch);
    rc.Begin(seq, head, q_begin, q_end);
    for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
      rc.AddRange(index.range_start[e], index.range_start[e] + index.range_len[e]);
    }
    const int32_t c0 = index.col_indptr[r], c1 = index.col_indptr[r + 1];
    if (c1 > c0) rc.AddColumns(index.col_idx.data() + c0, c1 - c0);
    rc.Finish(head, q_begin);
  });
  return absl::OkStatus();
}

}  // namespace spattn
