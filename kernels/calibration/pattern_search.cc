#include "kernels/calibration/pattern_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/builders/build_index.h"
#include "kernels/builders/sampled_lines.h"
#include "kernels/fidelity.h"
#include "kernels/parallel.h"
#include "kernels/sparse_index.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

MethodConfig AShape(int sink, int local) {
  MethodConfig c;
  c.method = Method::kAShape;
  c.a_shape.sink_tokens = sink;
  c.a_shape.local_tokens = local;
  return c;
}

MethodConfig VerticalSlash(int vertical, int slash) {
  MethodConfig c;
  c.method = Method::kVerticalSlash;
  c.vertical_slash.vertical_size = vertical;
  c.vertical_slash.slash_size = slash;
  return c;
}

// Multiply-adds per query of a Saap classifier (0 when there is none).
double ClassifierMacs(const LayerAssets* assets) {
  if (assets == nullptr) return 0;
  for (const std::vector<DenseLayerWeights>& mlp : assets->classifiers) {
    if (mlp.empty()) continue;
    double macs = 0;
    for (const DenseLayerWeights& l : mlp) macs += static_cast<double>(l.in) * l.out;
    return macs;
  }
  return 0;
}

// Ranking of one head's scores: those reaching the target by cost (dense first on ties, then
// list order), then the others by recall (then cost, then list order).
// Same method and every parameter equal (not only those that split planner groups).
bool SameParams(const MethodConfig& a, const MethodConfig& b) {
  if (a.method != b.method) return false;
  for (const MethodParam* p : ParamsOf(a.method)) {
    if (p->Get(a) != p->Get(b)) return false;
  }
  return true;
}

bool Better(const CandidateScore& a, const CandidateScore& b) {
  if (a.meets_target != b.meets_target) return a.meets_target;
  if (a.meets_target) {
    if (a.cost != b.cost) return a.cost < b.cost;
    const bool a_dense = a.candidate == kDenseFallback, b_dense = b.candidate == kDenseFallback;
    if (a_dense != b_dense) return a_dense;
    return a.candidate < b.candidate;
  }
  if (a.recall != b.recall) return a.recall > b.recall;
  if (a.cost != b.cost) return a.cost < b.cost;
  return a.candidate < b.candidate;
}

absl::Status CheckProblems(const std::vector<const AttentionProblem*>& problems) {
  if (problems.empty()) return absl::InvalidArgumentError("problems: at least one is needed");
  for (size_t i = 0; i < problems.size(); ++i) {
    const AttentionProblem* p = problems[i];
    if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat("problems[", i, "] is null"));
    absl::Status s = p->Validate();
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("problems[", i, "]: ", s.message()));
    }
    if (p->space != MemorySpace::kHost) {
      return absl::InvalidArgumentError(
          absl::StrCat("problems[", i, "]: the search reads Q/K/V from host memory"));
    }
    const AttentionProblem& p0 = *problems[0];
    if (p->num_q_heads != p0.num_q_heads || p->num_kv_heads != p0.num_kv_heads ||
        p->head_dim != p0.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("problems[", i, "]: heads/head_dim (", p->num_q_heads, "/", p->num_kv_heads,
                       "/", p->head_dim, ") differ from problems[0] (", p0.num_q_heads, "/",
                       p0.num_kv_heads, "/", p0.head_dim, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCandidates(const std::vector<MethodConfig>& candidates,
                             const LayerAssets* maybe_assets) {
  if (candidates.empty()) {
    return absl::InvalidArgumentError("candidates: the list is empty (dense needs no search)");
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    absl::Status s = candidates[i].Validate();
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("candidates[", i, "]: ", s.message()));
    }
    if (candidates[i].method == Method::kSaap && maybe_assets == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "candidates[", i, "]: saap needs the layer's assets (options.maybe_assets)"));
    }
    if (!CpuBuilderAvailable(candidates[i].method)) {
      return absl::FailedPreconditionError(absl::StrCat("candidates[", i,
                                                        "]: ", MethodName(candidates[i].method),
                                                        " has no CPU builder in this build"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ResolveHeads(const std::vector<int>& requested, int num_q_heads) {
  std::vector<int> heads = requested;
  if (heads.empty()) {
    heads.resize(num_q_heads);
    std::iota(heads.begin(), heads.end(), 0);
  }
  std::set<int> seen;
  for (int h : heads) {
    if (h < 0 || h >= num_q_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads: ", h, " is not a q head (num_q_heads = ", num_q_heads, ")"));
    }
    if (!seen.insert(h).second) {
      return absl::InvalidArgumentError(absl::StrCat("heads: ", h, " is listed twice"));
    }
  }
  return heads;
}

// Sums of one (head, candidate) over the problems.
struct Accum {
  double recall = 0;
  double recall_min = std::numeric_limits<double>::infinity();
  double density = 0;
  double kernel_pairs = 0;
  double build_pairs = 0;
};

}  // namespace

namespace {

// The weight of `config`'s modeled build in the cost.
double BuildWeight(const PatternSearchOptions& options, const MethodConfig& config) {
  return config.method == Method::kSampledLines
             ? options.build_cost_weight * options.sampled_lines_build_weight
             : options.build_cost_weight;
}

}  // namespace

std::vector<MethodConfig> DefaultCandidates() {
  std::vector<MethodConfig> out;
  for (int local : {128, 256, 512, 1024, 2048, 4096}) out.push_back(AShape(64, local));
  for (auto [v, s] : std::vector<std::pair<int, int>>{
           {64, 256}, {256, 512}, {500, 1000}, {1000, 2048}, {1000, 4096}}) {
    out.push_back(VerticalSlash(v, s));
  }
  for (int k : {8, 16, 32, 64}) {
    MethodConfig c;
    c.method = Method::kBlockSparse;
    c.block_sparse.top_k = k;
    out.push_back(c);
  }
  for (float gamma : {0.9f, 0.95f}) {
    MethodConfig c;
    c.method = Method::kFlexPrefill;
    c.flex_prefill.gamma = gamma;
    out.push_back(c);
  }
  for (float alpha : {0.9f, 0.95f}) {
    MethodConfig c;
    c.method = Method::kSampleAttention;
    c.sample_attention.alpha_c = alpha;
    c.sample_attention.alpha_s = alpha;
    out.push_back(c);
  }
  for (float theta : {6.f, 9.f, 12.f}) {
    MethodConfig c;
    c.method = Method::kAnchor;
    c.anchor.theta = theta;
    out.push_back(c);
  }
  for (float gamma : {0.85f, 0.9f, 0.95f, 0.975f, static_cast<float>(SampledLinesGammaFor(0.98))}) {
    MethodConfig c;
    c.method = Method::kSampledLines;
    c.sampled_lines.gamma = gamma;
    out.push_back(c);
  }
  return out;
}

std::vector<MethodConfig> SaapCandidates(int num_centroids) {
  std::vector<MethodConfig> out;
  for (int top_l : {8, 16, 32}) {
    MethodConfig c;
    c.method = Method::kSaap;
    c.saap.num_centroids = num_centroids;
    c.saap.top_l = std::min(top_l, std::max(1, num_centroids));
    out.push_back(c);
    if (top_l >= num_centroids) break;
  }
  return out;
}

bool HasClassifier(const LayerAssets* maybe_assets, int head) {
  return maybe_assets != nullptr && head >= 0 &&
         head < static_cast<int>(maybe_assets->classifiers.size()) &&
         !maybe_assets->classifiers[head].empty();
}

absl::StatusOr<std::vector<MethodConfig>> CandidatesForMethods(const std::vector<Method>& methods,
                                                               const LayerAssets* maybe_assets) {
  const std::set<Method> wanted(methods.begin(), methods.end());
  std::vector<MethodConfig> out;
  for (const MethodConfig& c : DefaultCandidates()) {
    if (wanted.count(c.method)) out.push_back(c);
  }
  if (wanted.count(Method::kSaap)) {
    if (maybe_assets == nullptr || maybe_assets->num_centroids <= 0) {
      return absl::FailedPreconditionError(
          "saap: candidates need the layer's calibrated assets (centroids and classifiers)");
    }
    for (const MethodConfig& c : SaapCandidates(maybe_assets->num_centroids)) out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::vector<Method>> ParseCandidateMethods(absl::string_view spec) {
  std::vector<Method> out;
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(spec));
  if (s == "all") {
    for (Method m : kAllMethods) {
      if (m != Method::kDense && m != Method::kSaap) out.push_back(m);
    }
    return out;
  }
  for (absl::string_view word : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    absl::StatusOr<Method> m = ParseMethod(absl::StripAsciiWhitespace(word));
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "candidates: unknown method '", absl::StripAsciiWhitespace(word),
          "' (expected all, or a list of a_shape, vertical_slash, block_sparse, flex_prefill, "
          "sample_attention, anchor, saap, sampled_lines)"));
    }
    if (std::find(out.begin(), out.end(), *m) == out.end()) out.push_back(*m);
  }
  if (out.empty()) return absl::InvalidArgumentError("candidates: no method given");
  return out;
}

bool IsAutoCandidates(absl::string_view spec) {
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(spec)) == kAutoCandidates;
}

absl::StatusOr<CandidateChoice> AutoCandidatesForLength(int64_t length, int64_t auto_max_len) {
  if (auto_max_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("auto_max_len: must be >= 1 token, got ", auto_max_len));
  }
  if (length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("length: candidates auto need a length >= 1 token, got ", length));
  }
  CandidateChoice c;
  c.automatic = true;
  if (length <= auto_max_len) {
    c.methods = {Method::kSampledLines};
    c.sampled_lines_margin = kAutoSampledLinesMargin;
  } else {
    SPATTN_ASSIGN_OR_RETURN(c.methods, ParseCandidateMethods("all"));
    c.all = true;
  }
  return c;
}

absl::StatusOr<CandidateChoice> ResolveCandidates(absl::string_view spec, int64_t length,
                                                  double margin, int64_t auto_max_len) {
  if (!(margin >= 0) || std::isinf(margin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampled_lines_margin: must be finite and >= 0, got ", margin));
  }
  if (IsAutoCandidates(spec)) {
    if (margin != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampled_lines_margin: not with candidates auto, which sets it per length (",
          kAutoSampledLinesMargin, " up to ", auto_max_len, " tokens, 0 above), got ", margin));
    }
    return AutoCandidatesForLength(length, auto_max_len);
  }
  CandidateChoice c;
  SPATTN_ASSIGN_OR_RETURN(c.methods, ParseCandidateMethods(spec));
  c.all = absl::AsciiStrToLower(absl::StripAsciiWhitespace(spec)) == "all";
  c.sampled_lines_margin = margin;
  return c;
}

std::string CandidateChoiceLabel(const CandidateChoice& choice) {
  std::string s;
  if (choice.all) {
    s = "all";
  } else {
    for (Method m : choice.methods) absl::StrAppend(&s, s.empty() ? "" : ",", MethodName(m));
  }
  if (choice.sampled_lines_margin > 0) {
    absl::StrAppend(&s, " (sampled_lines_margin ", choice.sampled_lines_margin, ")");
  }
  return s;
}

bool KeepsTargetServed(const MethodConfig& config, double target, double margin) {
  if (config.method != Method::kSampledLines) return true;
  // gamma is a float: 0.95f is 0.95 - 1.2e-9.
  return config.sampled_lines.gamma >= SampledLinesGammaFor(target, margin) - 1e-6;
}

std::string ConfigLabel(const MethodConfig& c) {
  switch (c.method) {
    case Method::kDense:
      return "dense";
    case Method::kAShape:
      return absl::StrCat("a_shape(", c.a_shape.sink_tokens, ",", c.a_shape.local_tokens, ")");
    case Method::kVerticalSlash:
      return absl::StrCat("vertical_slash(", c.vertical_slash.vertical_size, ",",
                          c.vertical_slash.slash_size, ")");
    case Method::kBlockSparse:
      return absl::StrCat("block_sparse(k=", c.block_sparse.top_k, ")");
    case Method::kFlexPrefill:
      return absl::StrCat("flex_prefill(gamma=", c.flex_prefill.gamma, ")");
    case Method::kSampleAttention:
      if (c.sample_attention.alpha_c == c.sample_attention.alpha_s) {
        return absl::StrCat("sample_attention(alpha=", c.sample_attention.alpha_c, ")");
      }
      return absl::StrCat("sample_attention(alpha_c=", c.sample_attention.alpha_c,
                          ",alpha_s=", c.sample_attention.alpha_s, ")");
    case Method::kAnchor:
      return absl::StrCat("anchor(theta=", c.anchor.theta, ")");
    case Method::kSaap:
      return absl::StrCat("saap(l=", c.saap.top_l, ")");
    case Method::kSampledLines:
      return absl::StrCat("sampled_lines(gamma=", c.sampled_lines.gamma, ")");
  }
  return "unknown";
}

double ModeledBuildPairs(const AttentionProblem& p, const MethodConfig& config,
                         const LayerAssets* maybe_assets, int sampled_lines_block_m) {
  double work = 0;  // length-head_dim products
  for (int b = 0; b < p.batch(); ++b) {
    const double q = p.q_len(b), k = p.k_len(b);
    auto pooled_map = [&](int block) {
      return CeilDiv(p.q_len(b), block) * static_cast<double>(CeilDiv(p.k_len(b), block)) / 2;
    };
    switch (config.method) {
      case Method::kDense:
      case Method::kAShape:
        break;
      case Method::kVerticalSlash:
        work += std::min<double>(config.vertical_slash.last_q, q) * k;
        break;
      case Method::kBlockSparse:
        work += q + k + pooled_map(config.block_sparse.block_size);
        break;
      case Method::kFlexPrefill: {
        const int B = config.flex_prefill.block_size;
        work += std::min<double>(B, q) * k + q + k + pooled_map(B);
        break;
      }
      case Method::kSampleAttention: {
        const SampleAttentionParams& sa = config.sample_attention;
        const double chunks =
            std::min<double>(sa.chunk_n, static_cast<double>(CeilDiv(p.q_len(b), sa.block_size)));
        work += chunks * std::min<double>(sa.block_size, q) * k;
        break;
      }
      case Method::kAnchor: {
        const AnchorParams& a = config.anchor;
        const double local = std::min<double>(static_cast<double>(a.step) * a.block_size / 2, k);
        work += q * (std::min<double>(a.init_tokens, k) + local) +
                static_cast<double>(CeilDiv(p.q_len(b), a.block_size)) * k;
        break;
      }
      case Method::kSaap: {
        // Classified rows: every row, or classify_rows per block of 64 (as sampled_lines). The
        // key assignment of the head's kv head is charged to the head alone (the search builds
        // and scores each Saap head as its group's only Saap head), and the whole build at the
        // measured cost of its GPU stages per product (kSaapBuildCost).
        const double centroids = config.saap.num_centroids;
        const double rows =
            config.saap.classify_rows < 64
                ? std::min<double>(config.saap.classify_rows * CeilDiv(p.q_len(b), 64), q)
                : q;
        work += kSaapBuildCost * (k * centroids + rows * ClassifierMacs(maybe_assets) /
                                                      std::max(1, p.head_dim));
        break;
      }
      case Method::kSampledLines: {
        // Three passes over the sampled rows (row statistics, histograms, kept entries), each
        // row seeing half of the keys on average under the causal mask, plus the last rows;
        // each entry at the measured cost of its passes (kSampledLinesEntryCost).
        const int block = std::max(1, sampled_lines_block_m);
        const double rows = std::min(config.sampled_lines.rows_per_block, block) *
                            static_cast<double>(CeilDiv(p.q_len(b), block));
        work += kSampledLinesEntryCost *
                (1.5 * rows * k + std::min<double>(config.sampled_lines.last_q, q) * k);
        break;
      }
    }
  }
  return 0.5 * work;
}

absl::StatusOr<PatternSearchResult> SearchHeadPatterns(
    const std::vector<const AttentionProblem*>& problems,
    const std::vector<MethodConfig>& given_candidates, const PatternSearchOptions& options) {
  const auto t_start = std::chrono::steady_clock::now();
  if (!(options.target_recall > 0 && options.target_recall <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("target_recall must be in (0, 1], got ", options.target_recall));
  }
  if (!(options.build_cost_weight >= 0) || std::isinf(options.build_cost_weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("build_cost_weight must be finite and >= 0, got ", options.build_cost_weight));
  }
  if (!(options.sampled_lines_build_weight >= 0) || std::isinf(options.sampled_lines_build_weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampled_lines_build_weight must be finite and >= 0, got ",
                     options.sampled_lines_build_weight));
  }
  if (!(options.sampled_lines_margin >= 0) || std::isinf(options.sampled_lines_margin)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampled_lines_margin must be finite and >= 0, got ", options.sampled_lines_margin));
  }
  if (options.block_m <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_m must be > 0, got ", options.block_m));
  }
  if (options.sampled_lines_block_m < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampled_lines_block_m must be >= 0 (0: block_m), got ", options.sampled_lines_block_m));
  }
  SPATTN_RETURN_IF_ERROR(CheckProblems(problems));
  SPATTN_RETURN_IF_ERROR(CheckCandidates(given_candidates, options.maybe_assets));
  SPATTN_ASSIGN_OR_RETURN(const std::vector<int> heads,
                          ResolveHeads(options.heads, problems[0]->num_q_heads));

  // sampled_lines at the guard's gamma: with a margin, every sampled_lines candidate is searched
  // at gamma >= SampledLinesGammaFor(target, margin) (the guard's AdaptiveConfig rule); one that
  // becomes equal to an earlier candidate is that one's duplicate_of and is not built.
  std::vector<MethodConfig> candidates = given_candidates;
  std::vector<int> duplicate_of(candidates.size(), -1);
  if (options.sampled_lines_margin > 0) {
    const float floor = static_cast<float>(
        SampledLinesGammaFor(options.target_recall, options.sampled_lines_margin));
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (candidates[c].method != Method::kSampledLines) continue;
      candidates[c].sampled_lines.gamma = std::max(candidates[c].sampled_lines.gamma, floor);
      for (size_t e = 0; e < c; ++e) {
        if (SameParams(candidates[e], candidates[c])) {
          duplicate_of[c] = static_cast<int>(e);
          break;
        }
      }
    }
  }

  const size_t nc = candidates.size();
  const size_t nh = heads.size();
  const double n = static_cast<double>(problems.size());
  const double threshold = options.target_recall - kRecallTolerance;
  PatternSearchResult result;
  result.build_seconds.assign(nc, 0);
  result.skipped_heads.assign(nc, 0);
  BuildOptions build;
  build.block_m = options.block_m;
  build.sampled_lines_block_m = options.sampled_lines_block_m;
  build.maybe_assets = options.maybe_assets;
  const int sl_block = build.BlockRowsFor(Method::kSampledLines);

  // Per-problem modeled build work, and the dense cost, per head (the same for every head).
  std::vector<double> build_mean(nc, 0);
  double dense_mean = 0;
  for (const AttentionProblem* p : problems) {
    dense_mean += static_cast<double>(AllowedPairs(*p)) / n;
    for (size_t c = 0; c < nc; ++c) {
      build_mean[c] += ModeledBuildPairs(*p, candidates[c], options.maybe_assets, sl_block) / n;
    }
  }
  // Candidates in order of increasing build cost (stable): the cheap ones set the bound that
  // lets the search skip builders that cannot win (see below).
  std::vector<size_t> order(nc);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return build_mean[a] < build_mean[b]; });

  // scores[i][c]: head position i, candidate c (nc = dense); `scored` marks the ones computed.
  std::vector<std::vector<CandidateScore>> scores(nh, std::vector<CandidateScore>(nc + 1));
  std::vector<std::vector<bool>> scored(nh, std::vector<bool>(nc + 1, false));
  for (size_t i = 0; i < nh; ++i) {
    CandidateScore& dense = scores[i][nc];
    dense.candidate = kDenseFallback;
    dense.config.method = Method::kDense;
    dense.recall = dense.recall_min = 1.0;
    dense.density = 1.0;
    dense.kernel_pairs = dense.cost = dense_mean;
    dense.meets_target = true;
    scored[i][nc] = true;
  }
  // The second-lowest cost among the scored candidates of head i that reach the target: a
  // candidate whose build work alone costs more can be neither chosen nor runner-up.
  auto second_best_cost = [&](size_t i) {
    double best = std::numeric_limits<double>::infinity(), second = best;
    for (size_t c = 0; c <= nc; ++c) {
      if (!scored[i][c] || !scores[i][c].meets_target) continue;
      const double cost = scores[i][c].cost;
      if (cost < best) {
        second = best;
        best = cost;
      } else if (cost < second) {
        second = cost;
      }
    }
    return second;
  };

  const int num_kv_heads = problems[0]->num_kv_heads;
  for (int kv = 0; kv < num_kv_heads; ++kv) {
    std::vector<size_t> group;  // positions in `heads`
    for (size_t i = 0; i < nh; ++i) {
      if (problems[0]->kv_head_of(heads[i]) == kv) group.push_back(i);
    }
    if (group.empty()) continue;
    std::vector<int> group_heads;
    for (size_t i : group) group_heads.push_back(heads[i]);
    // The exact rows of the group's heads, per problem (sample * keys floats per head and
    // problem), kept while every candidate is built and scored on them.
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<ExactRowSample>> exact(problems.size());
    ExactRowSample::Options sample_options;
    sample_options.sample_rows = options.sample_rows;
    sample_options.seed = options.seed;
    for (size_t pi = 0; pi < problems.size(); ++pi) {
      SPATTN_ASSIGN_OR_RETURN(exact[pi],
                              ExactRowSample::Compute(*problems[pi], group_heads, sample_options));
    }
    result.exact_seconds += SecondsSince(t0);

    for (size_t c : order) {
      if (duplicate_of[c] >= 0) {  // scored as its earlier equal
        result.skipped_heads[c] += static_cast<int>(group.size());
        continue;
      }
      const double bound = BuildWeight(options, candidates[c]) * build_mean[c];
      std::vector<int> live_heads;  // the group's heads on which candidate c can still win
      for (size_t i : group) {
        if (candidates[c].method == Method::kSaap &&
            !HasClassifier(options.maybe_assets, heads[i])) {
          continue;  // assets published for other heads only: Saap is no candidate here
        }
        if (options.keep_all_scores || !(bound > second_best_cost(i))) {
          live_heads.push_back(heads[i]);
        } else {
          ++result.skipped_heads[c];
        }
      }
      if (live_heads.empty()) continue;
      std::vector<Accum> acc(group.size());
      // Saap shares one selection among the heads of a GQA group that are built together;
      // each head is searched alone, as if it were the only Saap head of its group.
      std::vector<std::vector<int>> builds;
      if (candidates[c].method == Method::kSaap) {
        for (int h : live_heads) builds.push_back({h});
      } else {
        builds.push_back(live_heads);
      }
      for (size_t pi = 0; pi < problems.size(); ++pi) {
        const AttentionProblem& p = *problems[pi];
        const double build_pairs =
            ModeledBuildPairs(p, candidates[c], options.maybe_assets, sl_block);
        for (const std::vector<int>& build_heads : builds) {
          SparseIndex index;
          t0 = std::chrono::steady_clock::now();
          absl::Status s = BuildSparseIndex(p, candidates[c], build_heads, build, &index);
          result.build_seconds[c] += SecondsSince(t0);
          if (!s.ok()) {
            return absl::Status(
                s.code(), absl::StrCat("candidates[", c, "] ", candidates[c].DebugString(), ": ",
                                       s.message()));
          }
          t0 = std::chrono::steady_clock::now();
          const int slots = index.num_heads();
          std::vector<SlotFidelity> fid(slots);
          std::vector<absl::Status> errors(slots);
          std::vector<int64_t> pairs(slots);
          ParallelFor(slots, [&](int64_t slot) {
            absl::StatusOr<SlotFidelity> f = exact[pi]->Score(p, index, static_cast<int>(slot));
            if (!f.ok()) {
              errors[slot] = f.status();
              return;
            }
            fid[slot] = *f;
            pairs[slot] = ComputedPairs(p, index, static_cast<int>(slot));
          });
          result.score_seconds += SecondsSince(t0);
          for (int slot = 0; slot < slots; ++slot) {
            if (!errors[slot].ok()) return errors[slot];
            const size_t g = static_cast<size_t>(
                std::find(group_heads.begin(), group_heads.end(), index.heads[slot]) -
                group_heads.begin());
            Accum& a = acc[g];
            a.recall += fid[slot].recall_mean;
            a.recall_min = std::min(a.recall_min, fid[slot].recall_mean);
            a.density += fid[slot].density;
            a.kernel_pairs += static_cast<double>(pairs[slot]);
            a.build_pairs += build_pairs;
          }
        }
      }
      for (size_t g = 0; g < group.size(); ++g) {
        if (std::find(live_heads.begin(), live_heads.end(), group_heads[g]) == live_heads.end()) {
          continue;
        }
        const Accum& a = acc[g];
        CandidateScore& s = scores[group[g]][c];
        s.candidate = static_cast<int>(c);
        s.config = candidates[c];
        s.recall = a.recall / n;
        s.recall_min = a.recall_min;
        s.density = a.density / n;
        s.kernel_pairs = a.kernel_pairs / n;
        s.build_pairs = a.build_pairs / n;
        s.cost = s.kernel_pairs + BuildWeight(options, s.config) * s.build_pairs;
        s.meets_target = s.recall_min >= threshold &&
                         KeepsTargetServed(s.config, options.target_recall,
                                           options.sampled_lines_margin);
        scored[group[g]][c] = true;
      }
    }
  }

  result.heads.resize(nh);
  for (size_t i = 0; i < nh; ++i) {
    std::vector<size_t> ranked;
    for (size_t c = 0; c <= nc; ++c) {
      if (scored[i][c]) ranked.push_back(c);
    }
    std::sort(ranked.begin(), ranked.end(),
              [&](size_t a, size_t b) { return Better(scores[i][a], scores[i][b]); });
    HeadSearchResult& r = result.heads[i];
    r.head = heads[i];
    r.chosen = scores[i][ranked[0]];
    r.has_runner_up = ranked.size() > 1;
    if (r.has_runner_up) r.runner_up = scores[i][ranked[1]];
    if (options.keep_all_scores) {
      // A duplicate is not ranked (its earlier equal is), but listed with that one's score.
      for (size_t c = 0; c < nc; ++c) {
        if (duplicate_of[c] < 0) continue;
        scores[i][c] = scores[i][duplicate_of[c]];
        scores[i][c].candidate = static_cast<int>(c);
      }
      r.all = std::move(scores[i]);
    }
  }
  result.total_seconds = SecondsSince(t_start);
  return result;
}

absl::StatusOr<std::vector<HeadEvaluation>> EvaluateHeadConfigs(
    const AttentionProblem& problem, const std::vector<int>& heads,
    const std::vector<MethodConfig>& configs, int sample_rows, uint64_t seed, int block_m,
    const LayerAssets* maybe_assets, int sampled_lines_block_m) {
  if (heads.size() != configs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("configs: ", configs.size(), " configs for ", heads.size(), " heads"));
  }
  SPATTN_RETURN_IF_ERROR(CheckProblems({&problem}));
  std::vector<HeadEvaluation> out;
  BuildOptions build;
  build.block_m = block_m;
  build.sampled_lines_block_m = sampled_lines_block_m;
  build.maybe_assets = maybe_assets;
  for (size_t i = 0; i < heads.size(); ++i) {
    if (heads[i] < 0 || heads[i] >= problem.num_q_heads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "heads: ", heads[i], " is not a q head (num_q_heads = ", problem.num_q_heads, ")"));
    }
    SparseIndex index;
    absl::Status s = BuildSparseIndex(problem, configs[i], {heads[i]}, build, &index);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("head ", heads[i], " ", configs[i].DebugString(),
                                                 ": ", s.message()));
    }
    SPATTN_ASSIGN_OR_RETURN(double recall,
                            AttentionMassRecall(problem, index, 0, sample_rows, seed));
    out.push_back({heads[i], recall, Density(problem, index, 0)});
  }
  return out;
}

}  // namespace spattn
