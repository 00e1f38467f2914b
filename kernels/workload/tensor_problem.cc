#include "kernels/workload/tensor_problem.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

// A tensor seen as [batch, heads, tokens, dim] with element strides, whatever its layout.
struct View {
  int64_t batch = 1, heads = 0, tokens = 0, dim = 0;
  int64_t sb = 0, sh = 0, st = 0;  // strides of batch, head, token (dim is contiguous)
};

absl::StatusOr<View> MakeView(const HostTensor& t, TensorLayout layout, const char* name) {
  const auto& s = t.shape;
  if (layout == TensorLayout::kAuto) {
    if (s.size() == 3) {
      layout = TensorLayout::kTHD;
    } else if (s.size() == 4) {
      layout = TensorLayout::kBHSD;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": expected rank 3 [tokens, heads, dim] or 4 [batch, heads, tokens, dim], got ",
          t.DebugString()));
    }
  }
  const size_t want_rank = layout == TensorLayout::kBHSD ? 4 : 3;
  if (s.size() != want_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": layout needs rank ", want_rank, ", got ", t.DebugString()));
  }
  View v;
  switch (layout) {
    case TensorLayout::kTHD:
      v.tokens = s[0], v.heads = s[1], v.dim = s[2];
      v.st = s[1] * s[2], v.sh = s[2], v.sb = 0;
      break;
    case TensorLayout::kHSD:
      v.heads = s[0], v.tokens = s[1], v.dim = s[2];
      v.sh = s[1] * s[2], v.st = s[2], v.sb = 0;
      break;
    case TensorLayout::kBHSD:
      v.batch = s[0], v.heads = s[1], v.tokens = s[2], v.dim = s[3];
      v.sb = s[1] * s[2] * s[3], v.sh = s[2] * s[3], v.st = s[3];
      break;
    case TensorLayout::kAuto:
      break;
  }
  if (v.batch <= 0 || v.heads <= 0 || v.dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": batch, heads and head_dim must be > 0, got ", t.DebugString()));
  }
  if (v.tokens > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": too many tokens"));
  }
  return v;
}

// Copies a tensor into the problem buffer [total_tokens, heads, dim] (sequence b owns tokens
// [b * tokens, (b + 1) * tokens)), converting to `dt`.
void Fill(const HostTensor& t, const View& v, DType dt, std::vector<uint8_t>* dst) {
  std::vector<float> src = t.ToFloats();
  std::vector<float> row(v.dim);
  const int es = DTypeSize(dt);
  for (int64_t b = 0; b < v.batch; ++b) {
    for (int64_t tok = 0; tok < v.tokens; ++tok) {
      for (int64_t h = 0; h < v.heads; ++h) {
        const float* s = src.data() + b * v.sb + h * v.sh + tok * v.st;
        const int64_t out_tok = b * v.tokens + tok;
        FromFloat(s, dt, v.dim, dst->data() + ((out_tok * v.heads + h) * v.dim) * es);
      }
    }
  }
}

}  // namespace

absl::StatusOr<TensorLayout> ParseTensorLayout(absl::string_view name) {
  if (name == "auto") return TensorLayout::kAuto;
  if (name == "thd") return TensorLayout::kTHD;
  if (name == "hsd") return TensorLayout::kHSD;
  if (name == "bhsd") return TensorLayout::kBHSD;
  return absl::InvalidArgumentError(
      absl::StrCat("layout: unknown '", name, "' (expected auto, thd, hsd or bhsd)"));
}

absl::StatusOr<std::unique_ptr<HostProblem>> ProblemFromTensors(
    const HostTensor& q, const HostTensor& k, const HostTensor& v,
    const TensorProblemOptions& options) {
  auto qv = MakeView(q, options.layout, "q");
  if (!qv.ok()) return qv.status();
  auto kv = MakeView(k, options.layout, "k");
  if (!kv.ok()) return kv.status();
  auto vv = MakeView(v, options.layout, "v");
  if (!vv.ok()) return vv.status();
  if (kv->batch != vv->batch || kv->heads != vv->heads || kv->tokens != vv->tokens ||
      kv->dim != vv->dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("v: shape ", v.DebugString(), " does not match k ", k.DebugString()));
  }
  if (qv->batch != kv->batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("q: batch ", qv->batch, " differs from k's ", kv->batch));
  }
  if (qv->dim != kv->dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("q: head_dim ", qv->dim, " differs from k's ", kv->dim));
  }
  if (qv->heads % kv->heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("q: ", qv->heads, " heads are not a multiple of k's ", kv->heads, " (GQA)"));
  }
  if (qv->tokens > kv->tokens) {
    return absl::InvalidArgumentError(absl::StrCat("q: ", qv->tokens, " tokens but k has only ",
                                                   kv->tokens,
                                                   " (queries must be a suffix of the keys)"));
  }
  ProblemShape shape;
  shape.q_lens.assign(qv->batch, static_cast<int32_t>(qv->tokens));
  shape.k_lens.assign(kv->batch, static_cast<int32_t>(kv->tokens));
  shape.num_q_heads = static_cast<int>(qv->heads);
  shape.num_kv_heads = static_cast<int>(kv->heads);
  shape.head_dim = static_cast<int>(qv->dim);
  shape.causal = options.causal;
  shape.dtype = options.dtype.value_or(q.dtype);
  shape.softmax_scale = options.softmax_scale;
  auto host = std::make_unique<HostProblem>(shape);
  absl::Status s = host->problem().Validate();
  if (!s.ok()) return s;
  Fill(q, *qv, shape.dtype, &host->q_bytes());
  Fill(k, *kv, shape.dtype, &host->k_bytes());
  Fill(v, *vv, shape.dtype, &host->v_bytes());
  return host;
}

absl::StatusOr<NamedTensors> ProblemToTensors(const AttentionProblem& p, TensorLayout layout) {
  if (layout != TensorLayout::kTHD && layout != TensorLayout::kBHSD) {
    return absl::InvalidArgumentError("layout: ProblemToTensors writes thd or bhsd");
  }
  if (layout == TensorLayout::kTHD && p.batch() != 1) {
    return absl::InvalidArgumentError("layout thd holds one sequence; use bhsd for a batch");
  }
  for (int b = 1; b < p.batch(); ++b) {
    if (p.q_len(b) != p.q_len(0) || p.k_len(b) != p.k_len(0)) {
      return absl::InvalidArgumentError("problem: ragged batches cannot be written as tensors");
    }
  }
  NamedTensors out;
  const int es = DTypeSize(p.dtype);
  const int d = p.head_dim;
  auto one = [&](const TokenTensor& src, int heads, int len, const std::vector<int32_t>& cu) {
    HostTensor t;
    t.dtype = p.dtype;
    const int64_t batch = p.batch();
    if (layout == TensorLayout::kTHD) {
      t.shape = {len, heads, d};
    } else {
      t.shape = {batch, heads, len, d};
    }
    t.bytes.resize(static_cast<size_t>(batch) * heads * len * d * es);
    for (int64_t b = 0; b < batch; ++b) {
      for (int tok = 0; tok < len; ++tok) {
        for (int h = 0; h < heads; ++h) {
          const char* s = static_cast<const char*>(src.data) +
                          ((cu[b] + tok) * src.token_stride + int64_t{h} * src.head_stride) * es;
          const int64_t at = layout == TensorLayout::kTHD ? (int64_t{tok} * heads + h) * d
                                                          : ((b * heads + h) * len + tok) * d;
          std::memcpy(t.bytes.data() + at * es, s, static_cast<size_t>(d) * es);
        }
      }
    }
    return t;
  };
  out["q"] = one(p.q, p.num_q_heads, p.q_len(0), p.cu_seqlens_q);
  out["k"] = one(p.k, p.num_kv_heads, p.k_len(0), p.cu_seqlens_k);
  out["v"] = one(p.v, p.num_kv_heads, p.k_len(0), p.cu_seqlens_k);
  return out;
}

}  // namespace spattn
