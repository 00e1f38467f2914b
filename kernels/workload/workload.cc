#include "kernels/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/parallel.h"

namespace spattn {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Key-side amplitudes of the planted parts (logit units); the query side carries logit / amp.
constexpr double kSinkAmp = 8.0;      // massive sink key, as in real models
constexpr double kVerticalAmp = 4.0;  // heavy hitters
constexpr double kTopicAmp = 3.0;
constexpr double kRetrievalAmp = 3.0;
constexpr double kKeyNoise = 0.1;     // isotropic noise on every key dim
constexpr double kQueryNoise = 0.05;  // and on every query dim

// Planted logits of the content-dependent structures (tuned so that llm_mix reproduces
// MInference's Fig. 2c cross-prompt top-4096 recall at 128K; README).
constexpr double kVerticalHeadLogit = 9.5;
constexpr double kVerticalSlashHeadLogit = 9.0;
constexpr double kRetrievalHeadLogit = 11.0;

// Length scaling: beyond kScaleFreeKeys keys, every planted logit but the heavy hitters' gains
// log(pos + 1) - log(kScaleFreeKeys) for a query at position pos, so that the mass the ~pos
// unstructured keys take stays the same share at any length (heavy-hitter columns need none:
// their number grows with the context like the background's). Real long-context models keep
// their attention this sharp at 128K (MInference Fig. 2b); log-n logit scaling is also what
// Qwen's logn attention and YaRN's temperature do for long contexts.
constexpr double kScaleFreeKeys = 4096.0;
double LengthBoost(int pos) { return std::max(0.0, std::log((pos + 1.0) / kScaleFreeKeys)); }

// ---- Counter-based randomness: every value is a hash of what it belongs to, so generation is
// order-free (parallel, chunk-consistent) and identical on every platform.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum Purpose : uint64_t {
  kLayoutRng = 1,
  kHeadRng,
  kMixRng,
  kKeyNoiseRng,
  kQueryNoiseRng,
  kFillKeyRng,
  kFillQueryRng,
  kValueRng,
  kTopicVecRng,
  kRetrievalVecRng,
};

uint64_t Key(uint64_t seed, uint64_t purpose, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0,
             uint64_t d = 0) {
  uint64_t h = Mix(seed ^ 0x5851f42d4c957f2dull);
  h = Mix(h ^ purpose);
  h = Mix(h ^ a);
  h = Mix(h ^ b);
  h = Mix(h ^ c);
  return Mix(h ^ d);
}

double Uniform01(uint64_t k) { return (static_cast<double>(k >> 11) + 0.5) * 0x1.0p-53; }

double NormalAt(uint64_t k) {
  const double u1 = Uniform01(Mix(k ^ 0x1234567ull));
  const double u2 = Uniform01(Mix(k ^ 0x89abcdefull));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

// A sequential stream for plans and layouts, seeded by a key.
class Stream {
 public:
  explicit Stream(uint64_t key) : state_(key) {}
  uint64_t Next() { return Mix(state_++); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform01(Next()); }
  int Int(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Normal() { return NormalAt(Next()); }

 private:
  uint64_t state_;
};

// Which rotary pairs carry what (pair i = dims i and i + n; pair 0 rotates fastest).
struct PairGroups {
  int n = 0;                           // pairs
  int pos_begin = 0, pos_end = 0;      // RoPE kernels: local windows and slash lines
  int fill_begin = 0, fill_end = 0;    // unstructured content: background logits
  int topic_begin = 0, topic_end = 0;  // topic vectors
  int retr_begin = 0, retr_end = 0;    // retrieval vectors
  int vertical = 0;                    // heavy-hitter direction
  int sink = 0;                        // sink direction (slowest pair)
  int fill_dims() const { return 2 * (fill_end - fill_begin); }
  int topic_dims() const { return 2 * (topic_end - topic_begin); }
  int retr_dims() const { return 2 * (retr_end - retr_begin); }
};

PairGroups MakePairGroups(int head_dim) {
  PairGroups g;
  g.n = head_dim / 2;
  g.pos_begin = 0;
  g.pos_end = g.n / 2;
  g.fill_begin = g.pos_end;
  g.fill_end = g.fill_begin + std::max(1, g.n / 8);
  g.topic_begin = g.fill_end;
  g.topic_end = g.topic_begin + std::max(1, static_cast<int>(std::lround(0.16 * g.n)));
  g.retr_begin = g.topic_end;
  g.retr_end = g.n - 2;
  g.vertical = g.n - 2;
  g.sink = g.n - 1;
  return g;
}

// Dim index of the real / imaginary part of pair i.
inline int Re(const PairGroups&, int i) { return i; }
inline int Im(const PairGroups& g, int i) { return i + g.n; }

// A unit vector over the dims of pairs [begin, end) from a key.
std::vector<double> UnitVector(const PairGroups& g, int begin, int end, uint64_t key) {
  std::vector<double> v(2 * g.n, 0.0);
  double norm = 0;
  for (int i = begin; i < end; ++i) {
    for (int part = 0; part < 2; ++part) {
      const double x = NormalAt(Mix(key + 2 * i + part));
      v[part ? Im(g, i) : Re(g, i)] = x;
      norm += x * x;
    }
  }
  for (double& x : v) x /= std::sqrt(norm);
  return v;
}

// Topic vectors of one kv head: orthonormal in blocks of topic_dims (so segments of different
// topics do not attend to each other while there are few topics), random across blocks.
std::vector<std::vector<double>> TopicVectors(const PairGroups& g, int num_topics, uint64_t key) {
  const int dims = g.topic_dims();
  std::vector<std::vector<double>> out;
  for (int t = 0; t < num_topics; ++t) {
    std::vector<double> v = UnitVector(g, g.topic_begin, g.topic_end, Mix(key + t));
    const int block_start = t / dims * dims;
    for (int u = block_start; u < t; ++u) {  // Gram-Schmidt within the block
      double dot = 0;
      for (size_t c = 0; c < v.size(); ++c) dot += v[c] * out[u][c];
      for (size_t c = 0; c < v.size(); ++c) v[c] -= dot * out[u][c];
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    for (double& x : v) x /= std::sqrt(norm);
    out.push_back(std::move(v));
  }
  return out;
}

SequenceLayout MakeLayout(const WorkloadOptions& opt, int seq, int k_len) {
  SequenceLayout L;
  L.k_len = k_len;
  L.sink_tokens = std::min(opt.sink_tokens, k_len);
  Stream rng(Key(opt.seed, kLayoutRng, static_cast<uint64_t>(seq), static_cast<uint64_t>(k_len)));
  // Heavy-hitter columns, distinct, after the sink.
  const int free_keys = k_len - L.sink_tokens;
  const int columns = std::min(free_keys, std::max(8, k_len / opt.vertical_every));
  std::vector<int> cols;
  for (int tries = 0; static_cast<int>(cols.size()) < columns && tries < 20 * columns + 100;
       ++tries) {
    const int c = L.sink_tokens + static_cast<int>(rng.Next() % static_cast<uint64_t>(free_keys));
    if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
  }
  std::sort(cols.begin(), cols.end());
  L.heavy_columns = cols;
  for (size_t i = 0; i < cols.size(); ++i) L.heavy_strength.push_back(rng.Uniform(0.4, 1.0));
  // Topic segments: lengths in [k_len/32, k_len/6] (at least 32) up to 16K keys, then in
  // [512, 2730] whatever the length (documents and paragraphs do not grow with the prompt);
  // topics recur.
  const int lo = std::max(32, std::min(k_len, 16384) / 32);
  const int hi = std::max(lo + 1, std::min(k_len, 16384) / 6);
  int next_topic = 0;
  for (int start = 0; start < k_len;) {
    int len = rng.Int(lo, hi);
    if (k_len - (start + len) < lo / 2) len = k_len - start;  // No tiny tail segment.
    // Later segments sometimes return to an earlier topic (not the one just before).
    int topic = -1;
    const int nseg = static_cast<int>(L.segment_start.size());
    if (nseg >= 2 && rng.Uniform(0, 1) < 0.35) {
      for (int tries = 0; tries < 8 && topic < 0; ++tries) {
        const int t = L.segment_topic[rng.Int(0, nseg - 1)];
        if (t != L.segment_topic.back()) topic = t;
      }
    }
    if (topic < 0) topic = next_topic++;
    L.segment_start.push_back(start);
    L.segment_topic.push_back(topic);
    start += len;
  }
  // Retrieval groups of 32..256 query positions; those starting late enough get 1-3 target spans
  // of 1-4 keys somewhere in [sink, begin - 64).
  for (int begin = 0; begin < k_len;) {
    SequenceLayout::RetrievalGroup grp;
    grp.begin = begin;
    grp.end = std::min(k_len, begin + rng.Int(32, 256));
    if (begin >= L.sink_tokens + 128) {
      const int spans = rng.Int(1, 3);
      for (int s = 0; s < spans; ++s) {
        const int span = rng.Int(1, 4);
        const int range = begin - 64 - span - L.sink_tokens;
        const int at = L.sink_tokens + static_cast<int>(rng.Next() % static_cast<uint64_t>(range));
        for (int k = 0; k < span; ++k) grp.targets.push_back(at + k);
      }
      std::sort(grp.targets.begin(), grp.targets.end());
      grp.targets.erase(std::unique(grp.targets.begin(), grp.targets.end()), grp.targets.end());
    }
    L.groups.push_back(std::move(grp));
    begin = L.groups.back().end;
  }
  return L;
}

// Per-pair weights of a RoPE kernel: w_i ~ omega_i^-alpha over the positional pairs, summing to
// `logit`: the kernel sum_i w_i cos(delta * omega_i) peaks at delta = 0 with value `logit`.
std::vector<double> KernelWeights(const PairGroups& g, const std::vector<double>& omega,
                                  double alpha, double logit) {
  std::vector<double> w(g.n, 0.0);
  double sum = 0;
  for (int i = g.pos_begin; i < g.pos_end; ++i) {
    w[i] = std::pow(omega[i], -alpha);
    sum += w[i];
  }
  for (double& x : w) x *= logit / sum;
  return w;
}

// Sum over distances of exp(local kernel - peak): how many keys the local window holds, in
// units of its peak key.
double LocalWindowKeys(const PairGroups& g, const std::vector<double>& omega, double alpha,
                       double logit, int max_k_len) {
  const std::vector<double> w = KernelWeights(g, omega, alpha, logit);
  double keys = 0;
  for (int delta = 0; delta < std::min(max_k_len, 4096); ++delta) {
    double k = 0;
    for (int i = g.pos_begin; i < g.pos_end; ++i) k += w[i] * std::cos(delta * omega[i]);
    keys += std::exp(k - logit);
  }
  return std::max(keys, 1.0);
}

HeadPlan MakePlan(HeadKind kind, const WorkloadOptions& opt, int head, int max_k_len,
                  const PairGroups& g, const std::vector<double>& omega) {
  Stream rng(Key(opt.model_seed.value_or(opt.seed), kHeadRng, static_cast<uint64_t>(head)));
  HeadPlan p;
  p.kind = kind;
  p.background_std = rng.Uniform(0.8, 1.2);
  auto offsets = [&](int count) {
    // Induction-like copy distances, log-uniform in [64, max(128, max_k_len / 2)].
    const double hi = std::max(128.0, max_k_len / 2.0);
    for (int i = 0; i < count; ++i) {
      p.slash_offsets.push_back(
          static_cast<int>(std::exp(rng.Uniform(std::log(64.0), std::log(hi)))));
    }
    std::sort(p.slash_offsets.begin(), p.slash_offsets.end());
  };
  switch (kind) {
    case HeadKind::kSinkLocal:
      p.sink_share = rng.Uniform(0.15, 0.5);
      p.local_logit = 10;
      p.local_alpha = rng.Uniform(0.25, 1.0);
      break;
    case HeadKind::kVertical:
      p.sink_share = 0.5;
      p.vertical_logit = kVerticalHeadLogit;
      p.local_logit = 8;
      break;
    case HeadKind::kSlash:
      p.sink_share = 0.1;
      p.local_logit = 6;
      p.slash_logit = 11;
      offsets(rng.Int(1, 3));
      break;
    case HeadKind::kVerticalSlash:
      p.sink_share = 0.25;
      p.vertical_logit = kVerticalSlashHeadLogit;
      p.slash_logit = 9.5;
      p.local_logit = 7;
      offsets(rng.Int(1, 2));
      break;
    case HeadKind::kTopicBlocks:
      p.sink_share = 0.1;
      p.topic_logit = 10;
      p.local_logit = 3;
      break;
    case HeadKind::kRetrieval:
      p.sink_share = 0.2;
      p.retrieval_logit = kRetrievalHeadLogit;
      p.local_logit = 7;
      break;
    case HeadKind::kDiffuse:
      p.sink_logit = 4;
      p.background_std = rng.Uniform(1.3, 1.7);
      break;
  }
  if (p.local_logit > 0) {
    // The sink takes `sink_share` of the sink + local mass whatever the window's width.
    const double keys = LocalWindowKeys(g, omega, p.local_alpha, p.local_logit, max_k_len);
    p.sink_logit = p.local_logit + std::log(keys) + std::log(p.sink_share / (1.0 - p.sink_share));
  }
  return p;
}

absl::Status CheckOptions(const WorkloadOptions& o) {
  const ProblemShape& s = o.shape;
  if (s.q_lens.empty()) return absl::InvalidArgumentError("shape.q_lens: need one sequence");
  if (!s.k_lens.empty() && s.k_lens.size() != s.q_lens.size()) {
    return absl::InvalidArgumentError("shape.k_lens: must be empty or match q_lens");
  }
  for (size_t b = 0; b < s.q_lens.size(); ++b) {
    const int ql = s.q_lens[b], kl = s.k_lens.empty() ? ql : s.k_lens[b];
    if (ql < 0 || kl < ql) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape: sequence ", b, " needs 0 <= q_len <= k_len, got ", ql, " and ", kl));
    }
  }
  if (s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.num_q_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape: num_q_heads (", s.num_q_heads,
                     ") must be a positive multiple of num_kv_heads (", s.num_kv_heads, ")"));
  }
  if (s.head_dim < 32 || s.head_dim > 256 || s.head_dim % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.head_dim: the generator needs a multiple of 8 in [32, 256], got ", s.head_dim));
  }
  if (!(o.rope_theta > 1.0) || !std::isfinite(o.rope_theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_theta must be finite and > 1, got ", o.rope_theta));
  }
  if (!(o.concentration > 0.0) || !std::isfinite(o.concentration)) {
    return absl::InvalidArgumentError(
        absl::StrCat("concentration must be finite and > 0, got ", o.concentration));
  }
  if (o.sink_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sink_tokens must be >= 0, got ", o.sink_tokens));
  }
  if (o.vertical_every <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vertical_every must be > 0, got ", o.vertical_every));
  }
  if (!(s.softmax_scale >= 0.f) || !std::isfinite(s.softmax_scale)) {
    return absl::InvalidArgumentError("shape.softmax_scale must be >= 0 (0: 1/sqrt(head_dim))");
  }
  return absl::OkStatus();
}

double SinkStrength(int j) { return j == 0 ? 1.0 : 0.5 * std::pow(0.85, j - 1); }

}  // namespace

const char* HeadKindName(HeadKind kind) {
  switch (kind) {
    case HeadKind::kSinkLocal:
      return "sink_local";
    case HeadKind::kVertical:
      return "vertical";
    case HeadKind::kSlash:
      return "slash";
    case HeadKind::kVerticalSlash:
      return "vertical_slash";
    case HeadKind::kTopicBlocks:
      return "topic_blocks";
    case HeadKind::kRetrieval:
      return "retrieval";
    case HeadKind::kDiffuse:
      return "diffuse";
  }
  return "unknown";
}

absl::StatusOr<HeadKind> ParseHeadKind(absl::string_view name) {
  for (HeadKind k : kAllHeadKinds) {
    if (name == HeadKindName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "workload: unknown head kind '", name,
      "' (expected llm_mix, sink_local, vertical, slash, vertical_slash, topic_blocks, "
      "retrieval or diffuse)"));
}

int SequenceLayout::SegmentOf(int pos) const {
  return static_cast<int>(std::upper_bound(segment_start.begin(), segment_start.end(), pos) -
                          segment_start.begin()) -
         1;
}

int SequenceLayout::GroupOf(int pos) const {
  int lo = 0, hi = static_cast<int>(groups.size()) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (groups[mid].begin <= pos) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

std::vector<std::pair<HeadKind, std::vector<int>>> Workload::HeadsByKind() const {
  std::vector<std::pair<HeadKind, std::vector<int>>> out;
  for (HeadKind k : kAllHeadKinds) {
    std::vector<int> hs;
    for (size_t h = 0; h < heads.size(); ++h) {
      if (heads[h].kind == k) hs.push_back(static_cast<int>(h));
    }
    if (!hs.empty()) out.emplace_back(k, std::move(hs));
  }
  return out;
}

std::vector<HeadKind> LlmMixKinds(int num_q_heads, uint64_t seed) {
  // Shares seen across layers of real long-context models (MInference §2 and Fig. 3: most heads
  // local/A-shape or vertical-slash, few block/retrieval-like).
  const std::vector<std::pair<HeadKind, double>> weights = {
      {HeadKind::kSinkLocal, 0.40}, {HeadKind::kVerticalSlash, 0.25}, {HeadKind::kVertical, 0.10},
      {HeadKind::kSlash, 0.10},     {HeadKind::kTopicBlocks, 0.075},  {HeadKind::kRetrieval, 0.075},
  };
  std::vector<int> count(weights.size(), 0);
  int remaining = num_q_heads;
  if (num_q_heads >= static_cast<int>(weights.size())) {
    for (int& c : count) c = 1;
    remaining -= static_cast<int>(weights.size());
  }
  // Largest remainder over the rest.
  std::vector<double> rem(weights.size());
  int given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double share = weights[i].second * remaining;
    count[i] += static_cast<int>(share);
    given += static_cast<int>(share);
    rem[i] = share - static_cast<int>(share);
  }
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rem[a] > rem[b]; });
  for (int i = 0; given < remaining; ++i, ++given) count[order[i % order.size()]]++;
  std::vector<HeadKind> kinds;
  for (size_t i = 0; i < weights.size(); ++i) kinds.insert(kinds.end(), count[i], weights[i].first);
  // Seeded shuffle (Fisher-Yates on our own stream).
  Stream rng(Key(seed, kMixRng, static_cast<uint64_t>(num_q_heads)));
  for (int i = static_cast<int>(kinds.size()) - 1; i > 0; --i) {
    std::swap(kinds[i], kinds[rng.Next() % static_cast<uint64_t>(i + 1)]);
  }
  return kinds;
}

absl::StatusOr<Workload> GenerateWorkload(const WorkloadOptions& options) {
  absl::Status st = CheckOptions(options);
  if (!st.ok()) return st;
  std::vector<HeadKind> kinds;
  if (options.workload == "llm_mix") {
    kinds = LlmMixKinds(options.shape.num_q_heads, options.model_seed.value_or(options.seed));
  } else {
    auto kind = ParseHeadKind(options.workload);
    if (!kind.ok()) return kind.status();
    kinds.assign(options.shape.num_q_heads, *kind);
  }
  Workload w;
  w.options = options;
  w.host = std::make_unique<HostProblem>(options.shape);
  AttentionProblem& p = w.host->problem();
  int max_k_len = 0;
  for (int b = 0; b < p.batch(); ++b) max_k_len = std::max(max_k_len, p.k_len(b));
  const int d = p.head_dim;
  const PairGroups g = MakePairGroups(d);
  std::vector<double> omega(g.n);
  for (int i = 0; i < g.n; ++i) omega[i] = std::pow(options.rope_theta, -2.0 * i / d);
  for (int h = 0; h < p.num_q_heads; ++h) {
    w.heads.push_back(MakePlan(kinds[h], options, h, max_k_len, g, omega));
  }
  for (int b = 0; b < p.batch(); ++b) w.sequences.push_back(MakeLayout(options, b, p.k_len(b)));
  // Pre-RoPE vectors are in logit units; scaling both sides by 1/sqrt(softmax_scale) makes
  // softmax_scale * q.k equal the planted logits.
  const double unit = 1.0 / std::sqrt(static_cast<double>(p.softmax_scale));
  const double c = options.concentration;
  const int nkv = p.num_kv_heads;

  // Per kv head and sequence: topic vectors, retrieval vectors per group.
  struct KvSeq {
    std::vector<std::vector<double>> topics;
    std::vector<std::vector<double>> retrieval;   // per group (empty when no target)
    std::map<int, std::vector<int>> targeted_by;  // key position -> groups
  };
  std::vector<std::vector<KvSeq>> kvs(nkv, std::vector<KvSeq>(p.batch()));
  for (int kv = 0; kv < nkv; ++kv) {
    for (int b = 0; b < p.batch(); ++b) {
      const SequenceLayout& L = w.sequences[b];
      KvSeq& ks = kvs[kv][b];
      if (L.k_len == 0) continue;
      const int topics = 1 + *std::max_element(L.segment_topic.begin(), L.segment_topic.end());
      ks.topics = TopicVectors(g, topics, Key(options.seed, kTopicVecRng, kv, b));
      ks.retrieval.resize(L.groups.size());
      for (size_t gi = 0; gi < L.groups.size(); ++gi) {
        if (L.groups[gi].targets.empty()) continue;
        ks.retrieval[gi] =
            UnitVector(g, g.retr_begin, g.retr_end, Key(options.seed, kRetrievalVecRng, kv, b, gi));
        for (int t : L.groups[gi].targets) ks.targeted_by[t].push_back(static_cast<int>(gi));
      }
    }
  }
  // Per q head: the POS-pair query vectors (local kernel, slash lines; complex, per slash offset)
  // are position-independent up to the length boost, which scales each kernel's peak.
  std::vector<std::vector<double>> q_local(p.num_q_heads, std::vector<double>(d, 0.0));
  std::vector<std::vector<double>> q_slash(p.num_q_heads, std::vector<double>(d, 0.0));
  for (int h = 0; h < p.num_q_heads; ++h) {
    const HeadPlan& plan = w.heads[h];
    if (plan.local_logit > 0) {
      const auto wts = KernelWeights(g, omega, plan.local_alpha, c * plan.local_logit);
      for (int i = g.pos_begin; i < g.pos_end; ++i) q_local[h][Re(g, i)] += wts[i];
    }
    if (plan.slash_logit > 0) {
      const auto wts = KernelWeights(g, omega, 0.0, c * plan.slash_logit);
      for (int off : plan.slash_offsets) {
        for (int i = g.pos_begin; i < g.pos_end; ++i) {
          q_slash[h][Re(g, i)] += wts[i] * std::cos(off * omega[i]);
          q_slash[h][Im(g, i)] -= wts[i] * std::sin(off * omega[i]);
        }
      }
    }
  }

  const DType dt = p.dtype;
  const int es = DTypeSize(dt);
  uint8_t* qbuf = w.host->q_bytes().data();
  uint8_t* kbuf = w.host->k_bytes().data();
  uint8_t* vbuf = w.host->v_bytes().data();
  // One task per (sequence, block of 64 key positions).
  struct Task {
    int seq, begin, end;
  };
  std::vector<Task> tasks;
  for (int b = 0; b < p.batch(); ++b) {
    for (int s = 0; s < p.k_len(b); s += 64) tasks.push_back({b, s, std::min(p.k_len(b), s + 64)});
  }
  ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t ti) {
    const Task task = tasks[ti];
    const SequenceLayout& L = w.sequences[task.seq];
    const int kl = p.k_len(task.seq), ql = p.q_len(task.seq);
    std::vector<double> cs(g.n), sn(g.n), x(d);
    std::vector<float> out(d);
    auto rope_store = [&](uint8_t* base, int64_t elem_offset) {
      for (int i = 0; i < g.n; ++i) {
        const double re = x[Re(g, i)] * unit, im = x[Im(g, i)] * unit;
        out[Re(g, i)] = static_cast<float>(re * cs[i] - im * sn[i]);
        out[Im(g, i)] = static_cast<float>(re * sn[i] + im * cs[i]);
      }
      FromFloat(out.data(), dt, d, base + elem_offset * es);
    };
    for (int pos = task.begin; pos < task.end; ++pos) {
      for (int i = 0; i < g.n; ++i) {
        cs[i] = std::cos(pos * omega[i]);
        sn[i] = std::sin(pos * omega[i]);
      }
      const int seg = L.SegmentOf(pos);
      const int topic = L.segment_topic[seg];
      const int64_t ktok = p.cu_seqlens_k[task.seq] + pos;
      const auto hv = std::lower_bound(L.heavy_columns.begin(), L.heavy_columns.end(), pos);
      const bool heavy = hv != L.heavy_columns.end() && *hv == pos;
      for (int kv = 0; kv < nkv; ++kv) {
        const KvSeq& ks = kvs[kv][task.seq];
        for (int j = 0; j < d; ++j) {
          x[j] = kKeyNoise * NormalAt(Key(options.seed, kKeyNoiseRng, kv, task.seq, pos, j));
        }
        // Positional part (constant before RoPE); sink tokens lack it, so their logit does not
        // follow the local kernel's dips at long distance.
        if (pos >= L.sink_tokens) {
          for (int i = g.pos_begin; i < g.pos_end; ++i) x[Re(g, i)] += 1.0;
        }
        for (int i = g.fill_begin; i < g.fill_end; ++i) {
          x[Re(g, i)] += NormalAt(Key(options.seed, kFillKeyRng, kv, task.seq, pos, 2 * i));
          x[Im(g, i)] += NormalAt(Key(options.seed, kFillKeyRng, kv, task.seq, pos, 2 * i + 1));
        }
        for (int j = 0; j < d; ++j) x[j] += kTopicAmp * ks.topics[topic][j];
        const auto tb = ks.targeted_by.find(pos);
        if (tb != ks.targeted_by.end()) {
          for (int gi : tb->second) {
            for (int j = 0; j < d; ++j) x[j] += kRetrievalAmp * ks.retrieval[gi][j];
          }
        }
        if (heavy)
          x[Re(g, g.vertical)] += kVerticalAmp * L.heavy_strength[hv - L.heavy_columns.begin()];
        if (pos < L.sink_tokens) x[Re(g, g.sink)] += kSinkAmp * SinkStrength(pos);
        rope_store(kbuf, ktok * p.k.token_stride + int64_t{kv} * p.k.head_stride);
        // Values: plain content.
        for (int j = 0; j < d; ++j) {
          out[j] = static_cast<float>(NormalAt(Key(options.seed, kValueRng, kv, task.seq, pos, j)));
        }
        FromFloat(out.data(), dt, d,
                  vbuf + (ktok * p.v.token_stride + int64_t{kv} * p.v.head_stride) * es);
      }
      // Queries exist for the last q_len positions.
      const int row = pos - (kl - ql);
      if (row < 0) continue;
      const int64_t qtok = p.cu_seqlens_q[task.seq] + row;
      const int grp = L.GroupOf(pos);
      for (int h = 0; h < p.num_q_heads; ++h) {
        const HeadPlan& plan = w.heads[h];
        const int kv = p.kv_head_of(h);
        const KvSeq& ks = kvs[kv][task.seq];
        const double boost = plan.kind == HeadKind::kDiffuse ? 0.0 : LengthBoost(pos);
        const double local_scale = plan.local_logit > 0 ? 1.0 + boost / plan.local_logit : 0.0;
        const double slash_scale = plan.slash_logit > 0 ? 1.0 + boost / plan.slash_logit : 0.0;
        for (int j = 0; j < d; ++j) {
          x[j] = local_scale * q_local[h][j] + slash_scale * q_slash[h][j] +
                 kQueryNoise * NormalAt(Key(options.seed, kQueryNoiseRng, h, task.seq, pos, j));
        }
        x[Re(g, g.sink)] += c * (plan.sink_logit + boost) / kSinkAmp;
        x[Re(g, g.vertical)] += c * plan.vertical_logit / kVerticalAmp;
        const double fill_std = plan.background_std / std::sqrt(static_cast<double>(g.fill_dims()));
        for (int i = g.fill_begin; i < g.fill_end; ++i) {
          x[Re(g, i)] +=
              fill_std * NormalAt(Key(options.seed, kFillQueryRng, h, task.seq, pos, 2 * i));
          x[Im(g, i)] +=
              fill_std * NormalAt(Key(options.seed, kFillQueryRng, h, task.seq, pos, 2 * i + 1));
        }
        if (plan.topic_logit > 0) {
          const double a = c * (plan.topic_logit + boost) / kTopicAmp;
          for (int j = 0; j < d; ++j) x[j] += a * ks.topics[topic][j];
        }
        if (plan.retrieval_logit > 0 && !ks.retrieval[grp].empty()) {
          const double a = c * (plan.retrieval_logit + boost) / kRetrievalAmp;
          for (int j = 0; j < d; ++j) x[j] += a * ks.retrieval[grp][j];
        }
        rope_store(qbuf, qtok * p.q.token_stride + int64_t{h} * p.q.head_stride);
      }
    }
  });
  return w;
}

PlantedMass MeasurePlantedMass(const HeadPlan& plan, const SequenceLayout& layout, int pos,
                               const float* probs, int count, int window, int band) {
  PlantedMass m;
  if (plan.kind == HeadKind::kDiffuse) {
    m.planted = 1.0;
    for (int j = 0; j < count; ++j) m.sink += j < layout.sink_tokens ? probs[j] : 0.0;
    return m;
  }
  std::vector<uint8_t> in(count, 0);
  auto mark = [&](int lo, int hi, double* acc) {  // keys [lo, hi)
    lo = std::max(lo, 0);
    hi = std::min(hi, count);
    for (int j = lo; j < hi; ++j) {
      *acc += probs[j];
      in[j] = 1;
    }
  };
  if (plan.sink_logit > 0) mark(0, layout.sink_tokens, &m.sink);
  if (plan.local_logit > 0) mark(pos - window + 1, pos + 1, &m.local);
  if (plan.vertical_logit > 0) {
    for (int col : layout.heavy_columns) mark(col, col + 1, &m.vertical);
  }
  if (plan.slash_logit > 0) {
    for (int off : plan.slash_offsets) mark(pos - off - band, pos - off + band + 1, &m.slash);
  }
  if (plan.topic_logit > 0) {
    const int topic = layout.segment_topic[layout.SegmentOf(pos)];
    for (size_t s = 0; s < layout.segment_start.size(); ++s) {
      if (layout.segment_topic[s] != topic) continue;
      const int end =
          s + 1 < layout.segment_start.size() ? layout.segment_start[s + 1] : layout.k_len;
      mark(layout.segment_start[s], end, &m.topic);
    }
  }
  if (plan.retrieval_logit > 0) {
    for (int t : layout.groups[layout.GroupOf(pos)].targets) mark(t, t + 1, &m.retrieval);
  }
  for (int j = 0; j < count; ++j) {
    if (in[j]) m.planted += probs[j];
  }
  return m;
}

}  // namespace spattn
