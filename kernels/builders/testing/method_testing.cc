#include "kernels/builders/testing/method_testing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/builders/saap_math.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "kernels/parallel.h"
#include "kernels/reference/reference_attention.h"

namespace spattn {
namespace method_testing {
namespace {

std::vector<uint8_t>& Bytes(HostProblem* hp, Tensor which) {
  switch (which) {
    case Tensor::kQ:
      return hp->q_bytes();
    case Tensor::kK:
      return hp->k_bytes();
    case Tensor::kV:
      break;
  }
  return hp->v_bytes();
}

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF32:
      return 1.0 / (1 << 24);
    case DType::kF16:
      return 1.0 / (1 << 11);
    case DType::kBF16:
      return 1.0 / (1 << 8);
  }
  return 1;
}

std::string FirstMismatch(const std::vector<float>& got, const std::vector<float>& want, DType t,
                          const std::vector<uint8_t>& check, const char* what) {
  const double u = UnitRoundoff(t);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!check[i]) continue;
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    const double tol = 2 * u * std::fabs(want[i]) + 1e-5;
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= tol)) {
      return absl::StrCat(what, " element ", i, ": got ", got[i], ", want ", want[i]);
    }
  }
  return "";
}

}  // namespace

ProblemShape MakeShape(std::vector<int32_t> q_lens, std::vector<int32_t> k_lens, int hq, int hkv,
                       int head_dim, DType dtype, bool causal) {
  ProblemShape s;
  s.q_lens = std::move(q_lens);
  s.k_lens = std::move(k_lens);
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.causal = causal;
  return s;
}

std::unique_ptr<HostProblem> RandomProblem(const ProblemShape& shape, uint64_t seed, float stddev) {
  auto hp = std::make_unique<HostProblem>(shape);
  hp->FillRandom(seed, stddev);
  return hp;
}

std::string Describe(const ProblemShape& s) {
  std::string out = "q_lens=";
  for (int x : s.q_lens) absl::StrAppend(&out, x, ",");
  absl::StrAppend(&out, " k_lens=");
  for (int x : s.k_lens) absl::StrAppend(&out, x, ",");
  absl::StrAppend(&out, " hq=", s.num_q_heads, " hkv=", s.num_kv_heads, " d=", s.head_dim,
                  " dtype=", DTypeName(s.dtype), " causal=", s.causal);
  return out;
}

std::vector<int> AllHeads(const AttentionProblem& p) {
  std::vector<int> h(p.num_q_heads);
  for (int i = 0; i < p.num_q_heads; ++i) h[i] = i;
  return h;
}

std::vector<ProblemShape> AwkwardShapes() {
  struct Row {
    std::vector<int32_t> q, k;
    int hq, hkv;
    bool causal;
  };
  const Row rows[] = {
      {{1}, {}, 1, 1, true},           {{63}, {}, 4, 1, true},     {{64}, {}, 8, 1, true},
      {{65}, {}, 8, 8, true},          {{127}, {}, 4, 4, true},    {{131, 1, 64}, {}, 8, 2, true},
      {{40, 3}, {300, 3}, 4, 1, true}, {{33}, {100}, 2, 1, false},
  };
  std::vector<ProblemShape> shapes;
  for (const Row& r : rows) {
    ProblemShape s;
    s.q_lens = r.q;
    s.k_lens = r.k;
    s.num_q_heads = r.hq;
    s.num_kv_heads = r.hkv;
    s.head_dim = 64;
    s.causal = r.causal;
    shapes.push_back(s);
  }
  return shapes;
}

std::vector<ProblemShape> KernelCheckShapes() {
  struct Row {
    std::vector<int32_t> q, k;
    int hq, hkv;
    DType dtype;
    bool causal;
  };
  const Row rows[] = {
      {{131}, {}, 4, 1, DType::kBF16, true},
      {{65, 20}, {65, 90}, 2, 2, DType::kF32, true},
      {{50}, {80}, 2, 1, DType::kF16, false},
  };
  std::vector<ProblemShape> shapes;
  for (const Row& r : rows) {
    ProblemShape s;
    s.q_lens = r.q;
    s.k_lens = r.k;
    s.num_q_heads = r.hq;
    s.num_kv_heads = r.hkv;
    s.head_dim = 64;
    s.dtype = r.dtype;
    s.causal = r.causal;
    shapes.push_back(s);
  }
  return shapes;
}

std::string CheckIndexesAcrossShapes(const std::vector<ProblemShape>& shapes, uint64_t seed,
                                     const IndexBuild& build, const IndexCheck& maybe_check) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ProblemShape& s = shapes[i];
    auto hp = RandomProblem(s, seed + i);
    SparseIndex idx;
    absl::Status built = build(*hp, seed + i, &idx);
    if (!built.ok()) return absl::StrCat(Describe(s), ": build: ", built.ToString());
    absl::Status valid = ValidateSparseIndex(hp->problem(), idx);
    if (!valid.ok()) return absl::StrCat(Describe(s), ": ", valid.ToString());
    if (maybe_check != nullptr) {
      const std::string bad = maybe_check(hp.get(), idx);
      if (!bad.empty()) return absl::StrCat(Describe(s), ": ", bad);
    }
  }
  return "";
}

IndexCheck KernelMatchesMaskedReference(double max_density, bool needs_columns) {
  return [max_density, needs_columns](HostProblem* hp, const SparseIndex& idx) -> std::string {
    if (needs_columns && idx.col_idx.empty()) return "no gathered columns";
    const double density = Density(hp->problem(), idx);
    if (!(density < max_density)) {
      return absl::StrCat("density ", density, " is not below ", max_density);
    }
    return CompareKernelWithMaskedReference(hp, idx);
  };
}

std::vector<float> ReadTensor(const HostProblem& hp, Tensor which) {
  const std::vector<uint8_t>& b = Bytes(const_cast<HostProblem*>(&hp), which);
  const DType t = hp.problem().dtype;
  std::vector<float> out(b.size() / DTypeSize(t));
  ToFloat(b.data(), t, static_cast<int64_t>(out.size()), out.data());
  return out;
}

void WriteTensor(HostProblem* hp, Tensor which, const std::vector<float>& values) {
  std::vector<uint8_t>& b = Bytes(hp, which);
  FromFloat(values.data(), hp->problem().dtype, static_cast<int64_t>(values.size()), b.data());
}

double MassRecall(const AttentionProblem& p, const SparseIndex& index, int row_stride) {
  struct Task {
    int slot, seq, row;
  };
  std::vector<Task> tasks;
  for (int s = 0; s < index.num_heads(); ++s) {
    for (int b = 0; b < p.batch(); ++b) {
      const int ql = p.q_len(b);
      for (int i = 0; i < ql; i += row_stride) tasks.push_back({s, b, i});
      if (ql > 0 && (ql - 1) % row_stride != 0) tasks.push_back({s, b, ql - 1});
    }
  }
  std::vector<double> recall(tasks.size(), 0.0);
  ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const Task& task = tasks[t];
    const int h = index.heads[task.slot], kvh = p.kv_head_of(h), d = p.head_dim;
    const int kl = p.k_len(task.seq);
    const int pos = p.query_pos(task.seq, task.row);
    const int limit = p.causal ? pos + 1 : kl;
    const int64_t qtok = p.cu_seqlens_q[task.seq] + task.row, ktok0 = p.cu_seqlens_k[task.seq];
    std::vector<double> q(d), s(limit);
    for (int c = 0; c < d; ++c) q[c] = ReadElement(p.q, p.dtype, qtok, h, c);
    double mx = -INFINITY;
    for (int j = 0; j < limit; ++j) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += q[c] * ReadElement(p.k, p.dtype, ktok0 + j, kvh, c);
      s[j] = dot * p.softmax_scale;
      mx = std::max(mx, s[j]);
    }
    std::vector<uint8_t> sel(limit, 0);
    const int block = index.block_offsets[task.seq] + task.row / index.block_m;
    const int64_t r = index.row(task.slot, block);
    for (int32_t e = index.range_indptr[r]; e < index.range_indptr[r + 1]; ++e) {
      const int en = std::min(limit, index.range_start[e] + index.range_len[e]);
      for (int j = index.range_start[e]; j < en; ++j) sel[j] = 1;
    }
    for (int32_t e = index.col_indptr[r]; e < index.col_indptr[r + 1]; ++e) {
      if (index.col_idx[e] < limit) sel[index.col_idx[e]] = 1;
    }
    double total = 0, kept = 0;
    for (int j = 0; j < limit; ++j) {
      const double w = std::exp(s[j] - mx);
      total += w;
      if (sel[j]) kept += w;
    }
    recall[t] = kept / total;
  });
  double sum = 0;
  for (double v : recall) sum += v;
  return tasks.empty() ? 1.0 : sum / tasks.size();
}

double Density(const AttentionProblem& p, const SparseIndex& index) {
  int64_t computed = 0;
  for (int s = 0; s < index.num_heads(); ++s) computed += ComputedPairs(p, index, s);
  const int64_t allowed = AllowedPairs(p) * index.num_heads();
  return allowed == 0 ? 0.0 : static_cast<double>(computed) / allowed;
}

std::string CheckRecallAndDensity(const AttentionProblem& p, const SparseIndex& index,
                                  int row_stride, double min_recall, double max_density,
                                  const std::string& label) {
  absl::Status valid = ValidateSparseIndex(p, index);
  if (!valid.ok()) return absl::StrCat(label, ": invalid index: ", valid.ToString());
  const double recall = MassRecall(p, index, row_stride);
  const double density = Density(p, index);
  printf("%s: recall %.4f density %.4f\n", label.c_str(), recall, density);
  if (recall >= min_recall && density <= max_density) return "";
  return absl::StrCat(label, ": recall ", recall, " (want >= ", min_recall, "), density ", density,
                      " (want <= ", max_density, ")");
}

std::string CompareKernelWithMaskedReference(HostProblem* hp, const SparseIndex& index) {
  const AttentionProblem& p = hp->problem();
  absl::Status s = SparseAttentionCpu(p, index);
  if (!s.ok()) return absl::StrCat("SparseAttentionCpu: ", s.ToString());
  ReferenceMasks masks(static_cast<size_t>(p.num_q_heads) * p.batch());
  for (int h = 0; h < p.num_q_heads; ++h) {
    for (int b = 0; b < p.batch(); ++b) {
      masks[static_cast<size_t>(h) * p.batch() + b].assign(
          static_cast<size_t>(p.q_len(b)) * p.k_len(b), 0);
    }
  }
  std::vector<int> heads;
  for (int slot = 0; slot < index.num_heads(); ++slot) {
    const int h = index.heads[slot];
    if (std::find(heads.begin(), heads.end(), h) != heads.end()) continue;
    heads.push_back(h);
    for (int b = 0; b < p.batch(); ++b) {
      masks[static_cast<size_t>(h) * p.batch() + b] = DensifyMask(p, index, slot, b);
    }
  }
  std::vector<float> ref, ref_lse;
  s = ReferenceAttention(p, heads, masks, &ref, &ref_lse);
  if (!s.ok()) return absl::StrCat("ReferenceAttention: ", s.ToString());
  std::vector<uint8_t> check_o(ref.size(), 0), check_lse(ref_lse.size(), 0);
  for (int h : heads) {
    for (int tok = 0; tok < p.total_q(); ++tok) {
      for (int c = 0; c < p.head_dim; ++c) {
        check_o[(static_cast<size_t>(tok) * p.num_q_heads + h) * p.head_dim + c] = 1;
      }
      check_lse[static_cast<size_t>(h) * p.total_q() + tok] = 1;
    }
  }
  std::string m = FirstMismatch(hp->OutputAsFloat(), ref, p.dtype, check_o, "O");
  if (!m.empty()) return m;
  return FirstMismatch(hp->lse(), ref_lse, DType::kF32, check_lse, "LSE");
}

void PlantStructure(HostProblem* hp, const std::vector<PlantedHead>& heads, uint64_t seed) {
  const AttentionProblem& p = hp->problem();
  const int d = p.head_dim;
  constexpr int kPairs = 24;
  constexpr int kSinkDim = 2 * kPairs, kColDim = 2 * kPairs + 1, kNoiseDim = 2 * kPairs + 2;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_real_distribution<double> freq_dist(0.4, 3.0);
  std::vector<float> q(static_cast<size_t>(p.total_q()) * p.num_q_heads * d, 0.f);
  std::vector<float> k(static_cast<size_t>(p.total_k()) * p.num_kv_heads * d, 0.f);
  const double inv_scale = 1.0 / p.softmax_scale;
  for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
    const PlantedHead& spec = heads[kvh % heads.size()];
    std::vector<double> w(kPairs);
    for (double& x : w) x = freq_dist(rng);
    for (int b = 0; b < p.batch(); ++b) {
      const int kl = p.k_len(b);
      for (int j = 0; j < kl; ++j) {
        float* kv = &k[((static_cast<size_t>(p.cu_seqlens_k[b]) + j) * p.num_kv_heads + kvh) * d];
        for (int pr = 0; pr < kPairs; ++pr) {
          kv[2 * pr] = static_cast<float>(std::cos(j * w[pr]));
          kv[2 * pr + 1] = static_cast<float>(std::sin(j * w[pr]));
        }
        kv[kSinkDim] = j < spec.sink_keys ? 1.f : 0.f;
        kv[kColDim] = std::find(spec.columns.begin(), spec.columns.end(), j) != spec.columns.end()
                          ? 1.f
                          : 0.f;
        for (int c = kNoiseDim; c < d; ++c) kv[c] = spec.noise * gauss(rng);
      }
      for (int h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h) {
        for (int i = 0; i < p.q_len(b); ++i) {
          const int pos = p.query_pos(b, i);
          float* qv = &q[((static_cast<size_t>(p.cu_seqlens_q[b]) + i) * p.num_q_heads + h) * d];
          for (int o : spec.slash_offsets) {
            const double a = spec.slash_logit * inv_scale / kPairs;
            for (int pr = 0; pr < kPairs; ++pr) {
              qv[2 * pr] += static_cast<float>(a * std::cos((pos - o) * w[pr]));
              qv[2 * pr + 1] += static_cast<float>(a * std::sin((pos - o) * w[pr]));
            }
          }
          qv[kSinkDim] = static_cast<float>(spec.sink_logit * inv_scale);
          qv[kColDim] = static_cast<float>(spec.column_logit * inv_scale);
          for (int c = kNoiseDim; c < d; ++c) qv[c] = spec.noise * gauss(rng);
        }
      }
    }
  }
  WriteTensor(hp, Tensor::kQ, q);
  WriteTensor(hp, Tensor::kK, k);
}

ProblemShape PlantingShape() { return MakeShape({2048, 700}, {2048, 1500}, 4, 2); }

std::unique_ptr<HostProblem> PlantedColumnsAndSlashes() {
  auto hp = RandomProblem(PlantingShape(), 5);
  PlantedHead columns;
  columns.columns = {100, 101, 555, 900, 1300};
  columns.column_logit = 11.f;
  columns.sink_logit = 9.f;
  columns.slash_offsets = {0};
  PlantedHead slashes;
  slashes.sink_logit = 6.f;
  slashes.column_logit = 0.f;
  slashes.slash_offsets = {0, 1, 257, 700};
  slashes.slash_logit = 11.f;
  PlantStructure(hp.get(), {columns, slashes}, 11);
  return hp;
}

std::unique_ptr<HostProblem> OneKeyPerRow(int n, int offset) {
  ProblemShape shape;
  shape.q_lens = {n};
  shape.num_q_heads = shape.num_kv_heads = 1;
  shape.head_dim = n;
  shape.dtype = DType::kF32;
  auto hp = RandomProblem(shape, 1);
  const float peak = 50.f * std::sqrt(static_cast<float>(n));
  std::vector<float> q(static_cast<size_t>(n) * n, 0.f), k(static_cast<size_t>(n) * n, 0.f);
  for (int i = offset; i < n; ++i) q[static_cast<size_t>(i) * n + (i - offset)] = peak;
  for (int j = 0; j < n; ++j) k[static_cast<size_t>(j) * n + j] = 1.f;
  WriteTensor(hp.get(), Tensor::kQ, q);
  WriteTensor(hp.get(), Tensor::kK, k);
  return hp;
}

std::string CheckBadSettingsNamed(const AttentionProblem& problem, const MethodConfig& base,
                                  const std::vector<BadSetting>& bad, const BuildOptions& options) {
  for (const BadSetting& b : bad) {
    MethodConfig cfg = base;
    b.set(&cfg);
    SparseIndex idx;
    const absl::Status st = BuildSparseIndex(problem, cfg, {0}, options, &idx);
    if (st.code() != absl::StatusCode::kInvalidArgument ||
        std::string(st.message()).find(b.name) == std::string::npos) {
      return absl::StrCat(b.name, ": expected INVALID_ARGUMENT naming it, got ", st.ToString());
    }
  }
  return "";
}

void PlantClusters(HostProblem* hp, const ClusterSpec& spec, uint64_t seed) {
  const AttentionProblem& p = hp->problem();
  const int d = p.head_dim, half = d / 2;
  const int content_pairs = std::min(8, half);
  // Content dims: the lowest-frequency pairs (rotate-half layout), barely turned by RoPE.
  std::vector<int> content;
  for (int i = half - content_pairs; i < half; ++i) {
    content.push_back(i);
    content.push_back(i + half);
  }
  std::vector<uint8_t> is_content(d, 0);
  for (int c : content) is_content[c] = 1;
  std::mt19937_64 model(spec.model_seed), rng(seed);
  std::normal_distribution<float> gauss(0.f, 1.f);
  auto unit = [&](std::mt19937_64* g, bool in_content) {
    std::vector<float> v(d, 0.f);
    double ss = 0;
    for (int c = 0; c < d; ++c) {
      if (static_cast<bool>(is_content[c]) != in_content) continue;
      v[c] = gauss(*g);
      ss += double{v[c]} * v[c];
    }
    for (float& x : v) x = static_cast<float>(x / std::sqrt(ss));
    return v;
  };
  // Per kv head: cluster directions; per q head: the query offset (queries live elsewhere).
  std::vector<std::vector<std::vector<float>>> dirs(p.num_kv_heads);
  for (auto& dh : dirs) {
    for (int c = 0; c < spec.clusters; ++c) dh.push_back(unit(&model, true));
  }
  std::vector<std::vector<float>> offset(p.num_q_heads);
  for (auto& off : offset) {
    off = unit(&model, false);
    for (float& x : off) x *= 2.f;
  }
  std::uniform_int_distribution<int> pick(0, spec.clusters - 1);
  const float amp = static_cast<float>(spec.logit / p.softmax_scale);
  LayerAssets rope;
  rope.rope_theta = spec.rope_theta;
  const std::vector<double> freq = RopeInvFreq(rope, d).value();
  std::vector<float> q(static_cast<size_t>(p.total_q()) * p.num_q_heads * d);
  std::vector<float> k(static_cast<size_t>(p.total_k()) * p.num_kv_heads * d);
  std::vector<float> row(d);
  for (int b = 0; b < p.batch(); ++b) {
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      for (int j = 0; j < p.k_len(b); ++j) {
        const std::vector<float>& dir = dirs[kvh][pick(rng)];
        for (int c = 0; c < d; ++c) row[c] = dir[c] + spec.noise * gauss(rng);
        RotateRope(row.data(), 1, d, j, freq, false, +1);
        std::copy(row.begin(), row.end(),
                  &k[((static_cast<size_t>(p.cu_seqlens_k[b]) + j) * p.num_kv_heads + kvh) * d]);
      }
    }
    // Targets per (kv head, segment of rows), or per (q head, row) when segment is 1.
    const int segment = std::max(1, spec.segment);
    const int segments = (p.q_len(b) + segment - 1) / segment;
    std::vector<int> topic(static_cast<size_t>(p.num_kv_heads) * segments);
    for (int& t : topic) t = pick(rng);
    for (int h = 0; h < p.num_q_heads; ++h) {
      const int kvh = p.kv_head_of(h);
      for (int i = 0; i < p.q_len(b); ++i) {
        const int target =
            segment == 1 ? pick(rng) : topic[static_cast<size_t>(kvh) * segments + i / segment];
        const std::vector<float>& dir = dirs[kvh][target];
        for (int c = 0; c < d; ++c) row[c] = amp * dir[c] + offset[h][c] + spec.noise * gauss(rng);
        RotateRope(row.data(), 1, d, p.query_pos(b, i), freq, false, +1);
        std::copy(row.begin(), row.end(),
                  &q[((static_cast<size_t>(p.cu_seqlens_q[b]) + i) * p.num_q_heads + h) * d]);
      }
    }
  }
  WriteTensor(hp, Tensor::kQ, q);
  WriteTensor(hp, Tensor::kK, k);
}

LayerAssets RandomSaapAssets(int num_q_heads, int num_kv_heads, int head_dim, int num_centroids,
                             int hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.f, 1.f);
  LayerAssets a;
  a.num_centroids = num_centroids;
  a.centroids.resize(num_kv_heads);
  for (auto& c : a.centroids) {
    c.resize(static_cast<size_t>(num_centroids) * head_dim);
    for (int r = 0; r < num_centroids; ++r) {
      double ss = 0;
      for (int j = 0; j < head_dim; ++j) {
        c[r * head_dim + j] = gauss(rng);
        ss += double{c[r * head_dim + j]} * c[r * head_dim + j];
      }
      for (int j = 0; j < head_dim; ++j) c[r * head_dim + j] /= static_cast<float>(std::sqrt(ss));
    }
  }
  a.classifiers.resize(num_q_heads);
  for (auto& layers : a.classifiers) {
    for (int l = 0; l < 2; ++l) {
      DenseLayerWeights w;
      w.in = l == 0 ? head_dim : hidden;
      w.out = l == 0 ? hidden : num_centroids;
      w.relu = l == 0;
      w.weight.resize(static_cast<size_t>(w.in) * w.out);
      const float sd = 1.f / std::sqrt(static_cast<float>(w.in));
      for (float& x : w.weight) x = sd * gauss(rng);
      w.bias.resize(w.out);
      for (float& x : w.bias) x = 0.1f * gauss(rng);
      layers.push_back(std::move(w));
    }
  }
  return a;
}

// A workload from the shared generator (kernels/workload), S = 4096, GQA 2, d = 128, bf16.
Workload GeneratorWorkload(const char* kind) {
  WorkloadOptions o;
  o.workload = kind;
  o.shape.q_lens = {4096};
  o.shape.num_q_heads = 4;
  o.shape.num_kv_heads = 2;
  o.shape.head_dim = 128;
  o.shape.dtype = DType::kBF16;
  return GenerateWorkload(o).value();
}

std::string RowString(const SparseIndex& idx, int slot, int block) {
  const int64_t r = idx.row(slot, block);
  std::string s;
  for (int32_t e = idx.range_indptr[r]; e < idx.range_indptr[r + 1]; ++e) {
    absl::StrAppend(&s, "[", idx.range_start[e], ",", idx.range_start[e] + idx.range_len[e], ")");
  }
  for (int32_t e = idx.col_indptr[r]; e < idx.col_indptr[r + 1]; ++e) {
    absl::StrAppend(&s, " c", idx.col_idx[e]);
  }
  return s;
}

}  // namespace method_testing
}  // namespace spattn
