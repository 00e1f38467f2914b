#include "kernels/cuda/attention/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/builders/build_index_gpu.h"
#include "kernels/parallel.h"
#include "kernels/reference/reference_attention.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace cuda_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

float RoundTo(DType t, float x) {
  switch (t) {
    case DType::kBF16:
      return Bf16ToFloat(FloatToBf16(x));
    case DType::kF16:
      return Fp16ToFloat(FloatToFp16(x));
    case DType::kF32:
      return x;
  }
  return x;
}

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return std::ldexp(1.0, -24);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
  }
  return 1;
}

int SeqOfToken(const AttentionProblem& p, int token) {
  int b = 0;
  while (b + 1 < p.batch() && p.cu_seqlens_q[b + 1] <= token) ++b;
  return b;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceProblem>> DeviceProblem::Create(int device, HostProblem& hp) {
  auto dp = std::make_unique<DeviceProblem>();
  const AttentionProblem& h = hp.problem();
  const int64_t lse_bytes = static_cast<int64_t>(h.num_q_heads) * h.total_q() * 4;
  SPATTN_ASSIGN_OR_RETURN(dp->q_, CudaDeviceBuffer::Allocate(device, hp.q_bytes().size()));
  SPATTN_ASSIGN_OR_RETURN(dp->k_, CudaDeviceBuffer::Allocate(device, hp.k_bytes().size()));
  SPATTN_ASSIGN_OR_RETURN(dp->v_, CudaDeviceBuffer::Allocate(device, hp.v_bytes().size()));
  SPATTN_ASSIGN_OR_RETURN(dp->o_, CudaDeviceBuffer::Allocate(device, hp.q_bytes().size()));
  SPATTN_ASSIGN_OR_RETURN(dp->lse_, CudaDeviceBuffer::Allocate(device, lse_bytes));
  dp->problem_ = h;
  dp->problem_.space = MemorySpace::kCuda;
  dp->problem_.q.data = dp->q_->data();
  dp->problem_.k.data = dp->k_->data();
  dp->problem_.v.data = dp->v_->data();
  dp->problem_.o = dp->o_->data();
  dp->problem_.maybe_lse = static_cast<float*>(dp->lse_->data());
  SPATTN_RETURN_IF_ERROR(dp->Upload(hp));
  return dp;
}

absl::Status DeviceProblem::Upload(HostProblem& hp) {
  SPATTN_RETURN_IF_ERROR(q_->CopyFromHost(hp.q_bytes().data(), hp.q_bytes().size()));
  SPATTN_RETURN_IF_ERROR(k_->CopyFromHost(hp.k_bytes().data(), hp.k_bytes().size()));
  return v_->CopyFromHost(hp.v_bytes().data(), hp.v_bytes().size());
}

absl::Status DeviceProblem::Poison() {
  SPATTN_RETURN_IF_ERROR(o_->Fill(0xff));
  return lse_->Fill(0xff);
}

absl::Status DeviceProblem::Download(std::vector<float>* o, std::vector<float>* lse) const {
  std::vector<uint8_t> raw(o_->bytes());
  SPATTN_RETURN_IF_ERROR(o_->CopyToHost(raw.data(), o_->bytes()));
  const int es = DTypeSize(problem_.dtype);
  o->resize(raw.size() / es);
  ToFloat(raw.data(), problem_.dtype, static_cast<int64_t>(o->size()), o->data());
  lse->resize(lse_->bytes() / 4);
  return lse_->CopyToHost(lse->data(), lse_->bytes());
}

std::vector<SampledRow> SampleRows(const AttentionProblem& p, const std::vector<int>& heads,
                                   int max_rows_per_head) {
  std::vector<SampledRow> rows;
  const int tq = p.total_q();
  for (int h : heads) {
    if (tq <= max_rows_per_head) {
      for (int t = 0; t < tq; ++t) rows.push_back({h, t});
      continue;
    }
    std::vector<int> tokens;
    for (int b = 0; b < p.batch(); ++b) {
      if (p.q_len(b) == 0) continue;
      tokens.push_back(p.cu_seqlens_q[b]);
      tokens.push_back(p.cu_seqlens_q[b + 1] - 1);
    }
    const int spread = std::max(1, max_rows_per_head - static_cast<int>(tokens.size()));
    for (int i = 0; i < spread; ++i) {
      // A stride coprime with block sizes visits every row position within a block.
      tokens.push_back(static_cast<int>((static_cast<int64_t>(i) * 7919 + h * 131) % tq));
    }
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    for (int t : tokens) rows.push_back({h, t});
  }
  return rows;
}

std::vector<int32_t> AllowedKeys(const AttentionProblem& p, const SparseIndex* idx,
                                 const SampledRow& row) {
  const int b = SeqOfToken(p, row.token);
  const int i = row.token - p.cu_seqlens_q[b];
  const int pos = p.k_len(b) - p.q_len(b) + i;
  const int limit = p.causal ? pos + 1 : p.k_len(b);
  std::vector<int32_t> keys;
  if (idx == nullptr) {
    for (int k = 0; k < limit; ++k) keys.push_back(k);
    return keys;
  }
  int slot = -1;
  for (int s = 0; s < idx->num_heads(); ++s) {
    if (idx->heads[s] == row.head) slot = s;
  }
  if (slot < 0) return keys;
  // Blocks of sequence b start at block_offsets[b]; recount them from q_len and block_m.
  int block = 0;
  for (int s = 0; s < b; ++s) block += (p.q_len(s) + idx->block_m - 1) / idx->block_m;
  block += i / idx->block_m;
  const int64_t r = static_cast<int64_t>(slot) * idx->num_blocks() + block;
  for (int e = idx->range_indptr[r]; e < idx->range_indptr[r + 1]; ++e) {
    for (int k = idx->range_start[e]; k < idx->range_start[e] + idx->range_len[e]; ++k) {
      if (k < limit) keys.push_back(k);
    }
  }
  for (int e = idx->col_indptr[r]; e < idx->col_indptr[r + 1]; ++e) {
    if (idx->col_idx[e] < limit) keys.push_back(idx->col_idx[e]);
  }
  return keys;
}

RowReference ComputeRowReference(const AttentionProblem& p, const SampledRow& row,
                                 const std::vector<int32_t>& keys) {
  const int d = p.head_dim;
  const int b = SeqOfToken(p, row.token);
  const int64_t k0 = p.cu_seqlens_k[b];
  const int kvh = row.head / p.group_size();
  RowReference ref;
  ref.exact.assign(d, 0.0);
  ref.emulated.assign(d, 0.0);
  ref.exact_lse = -kInf;
  ref.emulated_lse = -kInf;
  if (keys.empty()) return ref;
  std::vector<float> q(d);
  for (int c = 0; c < d; ++c) q[c] = ReadElement(p.q, p.dtype, row.token, row.head, c);
  const size_t n = keys.size();
  std::vector<double> s_exact(n);
  std::vector<float> s_emul(n);
  std::vector<float> kv(d);
  for (size_t j = 0; j < n; ++j) {
    double dot = 0;
    float dotf = 0;
    for (int c = 0; c < d; ++c) {
      const float kc = ReadElement(p.k, p.dtype, k0 + keys[j], kvh, c);
      dot += static_cast<double>(q[c]) * kc;
      dotf += q[c] * kc;
    }
    s_exact[j] = dot * p.softmax_scale;
    s_emul[j] = RoundTo(p.dtype, RoundTo(p.dtype, dotf) * p.softmax_scale);
  }
  const double mx = *std::max_element(s_exact.begin(), s_exact.end());
  const float mxf = *std::max_element(s_emul.begin(), s_emul.end());
  double sum = 0;
  float sumf = 0;
  std::vector<double> w(n);
  std::vector<float> wf(n);
  for (size_t j = 0; j < n; ++j) {
    w[j] = std::exp(s_exact[j] - mx);
    sum += w[j];
    wf[j] = std::exp(s_emul[j] - mxf);
    sumf += wf[j];
  }
  std::vector<float> accf(d, 0.f);
  for (size_t j = 0; j < n; ++j) {
    const float pj = RoundTo(p.dtype, wf[j] / sumf);
    for (int c = 0; c < d; ++c) {
      const float vc = ReadElement(p.v, p.dtype, k0 + keys[j], kvh, c);
      ref.exact[c] += w[j] * vc;
      accf[c] += pj * vc;
    }
  }
  for (int c = 0; c < d; ++c) {
    ref.exact[c] /= sum;
    ref.emulated[c] = RoundTo(p.dtype, accf[c]);
  }
  ref.exact_lse = mx + std::log(sum);
  ref.emulated_lse = mxf + std::log(static_cast<double>(sumf));
  return ref;
}

std::string CheckRows(const AttentionProblem& p, const SparseIndex* idx,
                      const std::vector<SampledRow>& rows, const std::vector<float>& o,
                      const std::vector<float>& lse) {
  std::vector<RowReference> refs(rows.size());
  ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
    refs[i] = ComputeRowReference(p, rows[i], AllowedKeys(p, idx, rows[i]));
  });
  const int d = p.head_dim;
  double err = 0, err_emul = 0, max_ref = 0, lse_err = 0, lse_err_emul = 0, max_lse = 0;
  std::string worst, worst_lse;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowReference& ref = refs[i];
    const int64_t base = (static_cast<int64_t>(rows[i].token) * p.num_q_heads + rows[i].head) * d;
    for (int c = 0; c < d; ++c) {
      const double e = std::fabs(o[base + c] - ref.exact[c]);
      max_ref = std::max(max_ref, std::fabs(ref.exact[c]));
      err_emul = std::max(err_emul, std::fabs(ref.emulated[c] - ref.exact[c]));
      if (!(e <= err)) {
        err = std::isnan(e) ? kInf : e;
        worst = absl::StrCat("head ", rows[i].head, " token ", rows[i].token, " dim ", c, ": got ",
                             o[base + c], " want ", ref.exact[c]);
      }
    }
    const float got_lse = lse[static_cast<int64_t>(rows[i].head) * p.total_q() + rows[i].token];
    if (std::isinf(ref.exact_lse)) {
      if (!(std::isinf(got_lse) && got_lse < 0)) {
        lse_err = kInf;
        worst_lse = absl::StrCat("head ", rows[i].head, " token ", rows[i].token, ": lse got ",
                                 got_lse, " want -inf");
      }
      continue;
    }
    max_lse = std::max(max_lse, std::fabs(ref.exact_lse));
    lse_err_emul = std::max(lse_err_emul, std::fabs(ref.emulated_lse - ref.exact_lse));
    const double e = std::fabs(got_lse - ref.exact_lse);
    if (!(e <= lse_err)) {
      lse_err = std::isnan(e) ? kInf : e;
      worst_lse = absl::StrCat("head ", rows[i].head, " token ", rows[i].token, ": lse got ",
                               got_lse, " want ", ref.exact_lse);
    }
  }
  const double bound = 2 * err_emul + UnitRoundoff(p.dtype) * max_ref;
  const double lse_bound = 2 * lse_err_emul + UnitRoundoff(DType::kF32) * (max_lse + 1);
  std::string out;
  if (!(err <= bound)) {
    absl::StrAppend(&out, "O error ", err, " > bound ", bound, " (2 x dtype-math error ", err_emul,
                    " + rounding); worst ", worst, ". ");
  }
  if (!(lse_err <= lse_bound)) {
    absl::StrAppend(&out, "LSE error ", lse_err, " > bound ", lse_bound, "; worst ", worst_lse);
  }
  return out;
}

std::string CheckAllWritten(const AttentionProblem& p, const std::vector<int>& heads,
                            const std::vector<float>& o, const std::vector<float>& lse) {
  const int d = p.head_dim;
  for (int h : heads) {
    for (int t = 0; t < p.total_q(); ++t) {
      if (std::isnan(lse[static_cast<int64_t>(h) * p.total_q() + t])) {
        return absl::StrCat("LSE of head ", h, " token ", t, " not written");
      }
      for (int c = 0; c < d; ++c) {
        if (std::isnan(o[(static_cast<int64_t>(t) * p.num_q_heads + h) * d + c])) {
          return absl::StrCat("O of head ", h, " token ", t, " dim ", c, " not written");
        }
      }
    }
  }
  return "";
}

absl::Status BuildAndDownloadIndex(CudaAttentionEngine& engine, const AttentionProblem& problem,
                                   const MethodConfig& config, const std::vector<int>& heads,
                                   int block_m, SparseIndex* out,
                                   const CudaLayerAssets* maybe_assets,
                                   CudaStageTimes* maybe_times) {
  GpuBuildOptions o;
  o.block_m = block_m;
  o.maybe_assets = maybe_assets;
  o.maybe_times = maybe_times;
  absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(engine, problem, config, heads, o);
  absl::Status s = built.status();
  if (s.ok()) s = DownloadIndex(engine, *built, out);
  engine.ReleaseIndexes();
  return s;
}

absl::Status BuildAndRunIndex(CudaAttentionEngine& engine, const AttentionProblem& problem,
                              const MethodConfig& config, const std::vector<int>& heads,
                              int block_m, CudaStageTimes* maybe_times,
                              const CudaLayerAssets* maybe_assets) {
  CudaStageTimes build_times, run_times;
  GpuBuildOptions o;
  o.block_m = block_m;
  o.maybe_assets = maybe_assets;
  o.maybe_times = &build_times;
  absl::StatusOr<GpuSparseIndex> built = BuildIndexOnGpu(engine, problem, config, heads, o);
  absl::Status s = built.status();
  if (s.ok()) s = engine.RunSparseDeviceIndex(problem, built->view, &run_times);
  engine.ReleaseIndexes();
  if (maybe_times != nullptr) {
    *maybe_times = run_times;
    maybe_times->index_seconds = build_times.index_seconds;
    maybe_times->upload_seconds += build_times.upload_seconds;
  }
  return s;
}

}  // namespace cuda_test
}  // namespace spattn
