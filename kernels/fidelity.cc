#include "kernels/fidelity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Reads element [token, head, :] of a host tensor into floats (own indexing, not the kernels').
void ReadRow(const TokenTensor& t, DType dtype, int64_t token, int head, int d, float* dst) {
  const int64_t off = token * t.token_stride + static_cast<int64_t>(head) * t.head_stride;
  const char* base = static_cast<const char*>(t.data) + off * DTypeSize(dtype);
  ToFloat(base, dtype, d, dst);
}

// K and V of one kv head as contiguous floats [total_k, head_dim].
struct KvHead {
  std::vector<float> k, v;
};

KvHead LoadKvHead(const AttentionProblem& p, int kv_head, bool with_v) {
  KvHead kv;
  const int d = p.head_dim;
  const int64_t n = p.total_k();
  kv.k.resize(static_cast<size_t>(n) * d);
  if (with_v) kv.v.resize(static_cast<size_t>(n) * d);
  ParallelFor((n + 255) / 256, [&](int64_t chunk) {
    const int64_t end = std::min(n, (chunk + 1) * 256);
    for (int64_t t = chunk * 256; t < end; ++t) {
      ReadRow(p.k, p.dtype, t, kv_head, d, &kv.k[static_cast<size_t>(t) * d]);
      if (with_v) ReadRow(p.v, p.dtype, t, kv_head, d, &kv.v[static_cast<size_t>(t) * d]);
    }
  });
  return kv;
}

// Number of keys query row `row` of sequence `seq` may attend to: keys [0, limit).
int AllowedLimit(const AttentionProblem& p, int seq, int row) {
  return p.causal ? p.query_pos(seq, row) + 1 : p.k_len(seq);
}

// Exact softmax of one query row over keys [0, limit) of its sequence, in double: writes the
// probabilities to probs[0, limit) and, when `out` is set, the output row (head_dim doubles).
void ExactRow(const AttentionProblem& p, const KvHead& kv, int head, int seq, int row,
              std::vector<double>* probs, std::vector<double>* out) {
  const int d = p.head_dim;
  const int limit = AllowedLimit(p, seq, row);
  std::vector<float> qf(d);
  ReadRow(p.q, p.dtype, p.cu_seqlens_q[seq] + row, head, d, qf.data());
  std::vector<double> q(qf.begin(), qf.end());
  probs->resize(limit);
  const float* kbase = kv.k.data() + static_cast<size_t>(p.cu_seqlens_k[seq]) * d;
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < limit; ++j) {
    const float* kj = kbase + static_cast<size_t>(j) * d;
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += q[c] * static_cast<double>(kj[c]);
    const double s = dot * static_cast<double>(p.softmax_scale);
    (*probs)[j] = s;
    mx = std::max(mx, s);
  }
  double sum = 0;
  for (int j = 0; j < limit; ++j) {
    const double w = std::exp((*probs)[j] - mx);
    (*probs)[j] = w;
    sum += w;
  }
  const double inv = 1.0 / sum;
  for (int j = 0; j < limit; ++j) (*probs)[j] *= inv;
  if (out) {
    out->assign(d, 0.0);
    const float* vbase = kv.v.data() + static_cast<size_t>(p.cu_seqlens_k[seq]) * d;
    for (int j = 0; j < limit; ++j) {
      const double w = (*probs)[j];
      const float* vj = vbase + static_cast<size_t>(j) * d;
      for (int c = 0; c < d; ++c) (*out)[c] += w * static_cast<double>(vj[c]);
    }
  }
}

// Sum of probs[key] over the keys `index` selects for (slot, seq, row), clipped to [0, limit).
template <typename T>
double SelectedMass(const AttentionProblem& p, const SparseIndex& index, int slot, int seq, int row,
                    const T* probs) {
  const int limit = AllowedLimit(p, seq, row);
  const int block = index.block_offsets[seq] + row / index.block_m;
  const int64_t r = index.row(slot, block);
  double mass = 0;
  for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
    const int st = index.range_start[e];
    const int en = std::min(limit, st + index.range_len[e]);
    for (int key = st; key < en; ++key) mass += probs[key];
  }
  for (int32_t e = index.col_indptr[r]; e < index.col_indptr[r + 1]; ++e) {
    if (index.col_idx[e] < limit) mass += probs[index.col_idx[e]];
  }
  return mass;
}

absl::Status CheckHostProblem(const AttentionProblem& p) {
  absl::Status s = p.Validate();
  if (!s.ok()) return s;
  if (p.space != MemorySpace::kHost) {
    return absl::FailedPreconditionError("fidelity metrics read Q/K/V from host memory only");
  }
  return absl::OkStatus();
}

// The slot's rows only: a caller scoring every slot of a 32-head index in turn reads each entry
// once (validating the whole index per slot was O(slots x entries): minutes at 1M keys).
absl::Status CheckIndexAndSlot(const AttentionProblem& p, const SparseIndex& index, int slot) {
  return ValidateSparseIndexSlot(p, index, slot);
}

}  // namespace

std::vector<SampledRow> SampleQueryRows(const AttentionProblem& p, int sample_rows, uint64_t seed) {
  const int64_t total = p.total_q();
  std::vector<int64_t> tokens;
  if (sample_rows <= 0 || sample_rows >= total) {
    tokens.resize(total);
    for (int64_t t = 0; t < total; ++t) tokens[t] = t;
  } else {
    tokens.resize(sample_rows);
    for (int k = 0; k < sample_rows; ++k) {
      const int64_t lo = total * k / sample_rows, hi = total * (k + 1) / sample_rows;
      const uint64_t r = SplitMix64(seed * 0x632be59bd9b4e019ull + static_cast<uint64_t>(k));
      tokens[k] = lo + static_cast<int64_t>(r % static_cast<uint64_t>(hi - lo));
    }
  }
  std::vector<SampledRow> rows;
  rows.reserve(tokens.size());
  for (int64_t t : tokens) {
    const int seq =
        static_cast<int>(std::upper_bound(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end(), t) -
                         p.cu_seqlens_q.begin()) -
        1;
    rows.push_back({seq, static_cast<int>(t - p.cu_seqlens_q[seq])});
  }
  return rows;
}

absl::StatusOr<double> AttentionMassRecall(const AttentionProblem& problem,
                                           const SparseIndex& index, int slot, int sample_rows,
                                           uint64_t seed) {
  absl::Status s = CheckHostProblem(problem);
  if (!s.ok()) return s;
  s = CheckIndexAndSlot(problem, index, slot);
  if (!s.ok()) return s;
  const std::vector<SampledRow> rows = SampleQueryRows(problem, sample_rows, seed);
  if (rows.empty()) return 1.0;  // No query: nothing is missed.
  const int head = index.heads[slot];
  const KvHead kv = LoadKvHead(problem, problem.kv_head_of(head), /*with_v=*/false);
  std::vector<double> recall(rows.size());
  ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
    thread_local std::vector<double> probs;
    ExactRow(problem, kv, head, rows[i].seq, rows[i].row, &probs, nullptr);
    recall[i] = SelectedMass(problem, index, slot, rows[i].seq, rows[i].row, probs.data());
  });
  double sum = 0;
  for (double r : recall) sum += r;
  return sum / static_cast<double>(rows.size());
}

double RelativeL2Error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return std::numeric_limits<double>::quiet_NaN();
    const double diff = static_cast<double>(got[i]) - want[i];
    num += diff * diff;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num) / std::sqrt(den);
}

double Density(const AttentionProblem& problem, const SparseIndex& index, int slot) {
  const int64_t allowed = AllowedPairs(problem);
  if (allowed == 0) return 0.0;
  return static_cast<double>(ComputedPairs(problem, index, slot)) / static_cast<double>(allowed);
}

FidelitySummary Aggregate(const std::vector<SlotFidelity>& slots) {
  FidelitySummary out;
  out.slots = slots;
  if (slots.empty()) return out;
  out.recall_min = out.density_min = std::numeric_limits<double>::infinity();
  out.density_max = -std::numeric_limits<double>::infinity();
  for (const SlotFidelity& f : slots) {
    out.recall_mean += f.recall_mean;
    out.density_mean += f.density;
    out.recall_min = std::min(out.recall_min, f.recall_min);
    out.density_min = std::min(out.density_min, f.density);
    out.density_max = std::max(out.density_max, f.density);
  }
  out.recall_mean /= static_cast<double>(slots.size());
  out.density_mean /= static_cast<double>(slots.size());
  return out;
}

absl::StatusOr<FidelitySummary> SummarizeFidelity(const AttentionProblem& problem,
                                                  const SparseIndex& index, int sample_rows,
                                                  uint64_t seed) {
  absl::Status s = CheckHostProblem(problem);
  if (!s.ok()) return s;
  s = ValidateSparseIndex(problem, index);
  if (!s.ok()) return s;
  const std::vector<SampledRow> rows = SampleQueryRows(problem, sample_rows, seed);
  std::vector<SlotFidelity> slots;
  // Slots sharing a kv head share its converted keys.
  std::vector<int> order(index.num_heads());
  for (int i = 0; i < index.num_heads(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return problem.kv_head_of(index.heads[a]) < problem.kv_head_of(index.heads[b]);
  });
  slots.resize(index.num_heads());
  int loaded_kv = -1;
  KvHead kv;
  for (int slot : order) {
    const int head = index.heads[slot];
    if (problem.kv_head_of(head) != loaded_kv) {
      loaded_kv = problem.kv_head_of(head);
      kv = LoadKvHead(problem, loaded_kv, /*with_v=*/false);
    }
    std::vector<double> recall(rows.size(), 1.0);
    ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
      thread_local std::vector<double> probs;
      ExactRow(problem, kv, head, rows[i].seq, rows[i].row, &probs, nullptr);
      recall[i] = SelectedMass(problem, index, slot, rows[i].seq, rows[i].row, probs.data());
    });
    SlotFidelity& f = slots[slot];
    f.slot = slot;
    f.head = head;
    f.recall_mean = 0;
    f.recall_min = rows.empty() ? 1.0 : std::numeric_limits<double>::infinity();
    for (double r : recall) {
      f.recall_mean += r;
      f.recall_min = std::min(f.recall_min, r);
    }
    f.recall_mean = rows.empty() ? 1.0 : f.recall_mean / static_cast<double>(rows.size());
    f.density = Density(problem, index, slot);
  }
  return Aggregate(slots);
}

absl::StatusOr<std::unique_ptr<ExactRowSample>> ExactRowSample::Compute(
    const AttentionProblem& problem, const std::vector<int>& heads_in, const Options& options) {
  absl::Status s = CheckHostProblem(problem);
  if (!s.ok()) return s;
  std::unique_ptr<ExactRowSample> out(new ExactRowSample());
  out->head_dim_ = problem.head_dim;
  out->cu_seqlens_q_ = problem.cu_seqlens_q;
  out->cu_seqlens_k_ = problem.cu_seqlens_k;
  out->heads_ = heads_in;
  if (out->heads_.empty()) {
    for (int h = 0; h < problem.num_q_heads; ++h) out->heads_.push_back(h);
  }
  for (int h : out->heads_) {
    if (h < 0 || h >= problem.num_q_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads: ", h, " is not a q head (num_q_heads = ", problem.num_q_heads, ")"));
    }
  }
  out->rows_ = SampleQueryRows(problem, options.sample_rows, options.seed);
  const size_t n = out->rows_.size();
  out->prob_offset_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    out->prob_offset_[i + 1] =
        out->prob_offset_[i] + AllowedLimit(problem, out->rows_[i].seq, out->rows_[i].row);
  }
  const int d = problem.head_dim;
  const size_t nh = out->heads_.size();
  out->probs_.resize(nh);
  out->outputs_.resize(nh);
  // Heads in kv-head order so each kv head is converted once.
  std::vector<size_t> order(nh);
  for (size_t i = 0; i < nh; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return problem.kv_head_of(out->heads_[a]) < problem.kv_head_of(out->heads_[b]);
  });
  int loaded_kv = -1;
  KvHead kv;
  for (size_t hp : order) {
    const int head = out->heads_[hp];
    if (problem.kv_head_of(head) != loaded_kv) {
      loaded_kv = problem.kv_head_of(head);
      kv = LoadKvHead(problem, loaded_kv, /*with_v=*/true);
    }
    std::vector<float>& probs = out->probs_[hp];
    std::vector<float>& outputs = out->outputs_[hp];
    probs.resize(out->prob_offset_[n]);
    outputs.resize(n * d);
    ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
      thread_local std::vector<double> p, o;
      ExactRow(problem, kv, head, out->rows_[i].seq, out->rows_[i].row, &p, &o);
      std::copy(p.begin(), p.end(), probs.begin() + out->prob_offset_[i]);
      for (int c = 0; c < d; ++c) outputs[i * d + c] = static_cast<float>(o[c]);
    });
  }
  return out;
}

absl::Status ExactRowSample::CheckSameShape(const AttentionProblem& problem) const {
  if (problem.head_dim != head_dim_ || problem.cu_seqlens_q != cu_seqlens_q_ ||
      problem.cu_seqlens_k != cu_seqlens_k_) {
    return absl::InvalidArgumentError(
        "problem: sequences or head_dim differ from the problem the exact sample was taken of");
  }
  return absl::OkStatus();
}

int ExactRowSample::HeadPosition(int head) const {
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (heads_[i] == head) return static_cast<int>(i);
  }
  return -1;
}

const float* ExactRowSample::ExactOutput(int head, int i) const {
  const int hp = HeadPosition(head);
  if (hp < 0 || i < 0 || i >= static_cast<int>(rows_.size())) return nullptr;
  return outputs_[hp].data() + static_cast<size_t>(i) * head_dim_;
}

const float* ExactRowSample::Probabilities(int head, int i, int* count) const {
  const int hp = HeadPosition(head);
  if (hp < 0 || i < 0 || i >= static_cast<int>(rows_.size())) return nullptr;
  *count = static_cast<int>(prob_offset_[i + 1] - prob_offset_[i]);
  return probs_[hp].data() + prob_offset_[i];
}

absl::StatusOr<SlotFidelity> ExactRowSample::Score(const AttentionProblem& problem,
                                                   const SparseIndex& index, int slot) const {
  absl::Status s = CheckSameShape(problem);
  if (!s.ok()) return s;
  s = CheckIndexAndSlot(problem, index, slot);
  if (!s.ok()) return s;
  const int head = index.heads[slot];
  const int hp = HeadPosition(head);
  if (hp < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, ": q head ", head, " was not in the exact sample"));
  }
  SlotFidelity f;
  f.slot = slot;
  f.head = head;
  f.density = Density(problem, index, slot);
  if (rows_.empty()) {
    f.recall_mean = f.recall_min = 1.0;
    return f;
  }
  f.recall_min = std::numeric_limits<double>::infinity();
  const float* probs = probs_[hp].data();
  for (size_t i = 0; i < rows_.size(); ++i) {
    const double r =
        SelectedMass(problem, index, slot, rows_[i].seq, rows_[i].row, probs + prob_offset_[i]);
    f.recall_mean += r;
    f.recall_min = std::min(f.recall_min, r);
  }
  f.recall_mean /= static_cast<double>(rows_.size());
  return f;
}

absl::StatusOr<double> ExactRowSample::OutputError(const AttentionProblem& problem,
                                                   const std::vector<int>& heads_in) const {
  if (problem.space != MemorySpace::kHost || problem.o == nullptr) {
    return absl::FailedPreconditionError("OutputError reads the output from host memory");
  }
  absl::Status s = CheckSameShape(problem);
  if (!s.ok()) return s;
  const std::vector<int>& heads = heads_in.empty() ? heads_ : heads_in;
  std::vector<float> got, want;
  got.reserve(heads.size() * rows_.size() * head_dim_);
  want.reserve(got.capacity());
  std::vector<float> row(head_dim_);
  TokenTensor o{problem.o, problem.o_token_stride, problem.o_head_stride};
  for (int head : heads) {
    const int hp = HeadPosition(head);
    if (hp < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads: q head ", head, " was not in the exact sample"));
    }
    for (size_t i = 0; i < rows_.size(); ++i) {
      ReadRow(o, problem.dtype, problem.cu_seqlens_q[rows_[i].seq] + rows_[i].row, head, head_dim_,
              row.data());
      got.insert(got.end(), row.begin(), row.end());
      const float* w = outputs_[hp].data() + i * head_dim_;
      want.insert(want.end(), w, w + head_dim_);
    }
  }
  return RelativeL2Error(got, want);
}

}  // namespace spattn
