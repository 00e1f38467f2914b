// Deterministic synthetic prefill workloads with LLM-like attention heads (DESIGN §8).
//
// Q and K are built before RoPE from content-like parts in disjoint groups of rotary pairs, then
// rotated (rotate-half convention, as Llama/HF: dims i and i + head_dim/2 form pair i with
// frequency theta^(-2i/head_dim)). The planted structures therefore have to survive RoPE, as in a
// real model: sinks, heavy-hitter columns, topics and retrieval keys sit in the slowest pairs;
// local windows and slash lines come from RoPE phase alignment of the fast pairs. Every head kind
// and the layout are described in kernels/workload/README.md.
//
// Everything is a pure function of (options, sequence, position, head): a chunked-prefill problem
// (q_len < k_len) has exactly the K/V of the full one and the last q_len of its Q rows.
#ifndef SPATTN_KERNELS_WORKLOAD_WORKLOAD_H_
#define SPATTN_KERNELS_WORKLOAD_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/host_problem.h"

namespace spattn {

enum class HeadKind {
  kSinkLocal,      // attention sink + local window (A-shape)
  kVertical,       // heavy-hitter key columns every query attends to
  kSlash,          // diagonal lines at fixed offsets (induction-like copies)
  kVerticalSlash,  // both (MInference's most common pattern)
  kTopicBlocks,    // block-diagonal clusters: queries attend to keys of their own topic
  kRetrieval,      // query groups each with their own few target keys far back
  kDiffuse,        // no structure beyond a weak sink: broad attention (a hard case)
};

inline constexpr HeadKind kAllHeadKinds[] = {
    HeadKind::kSinkLocal,   HeadKind::kVertical,  HeadKind::kSlash,   HeadKind::kVerticalSlash,
    HeadKind::kTopicBlocks, HeadKind::kRetrieval, HeadKind::kDiffuse,
};

const char* HeadKindName(HeadKind kind);  // "sink_local", "vertical", ...
absl::StatusOr<HeadKind> ParseHeadKind(absl::string_view name);

struct WorkloadOptions {
  // A head kind name (every head of that kind) or "llm_mix" (kinds assigned across heads the
  // way real models look). Default: "llm_mix".
  std::string workload = "llm_mix";
  // Sizes, dtype and causality of the problem. Default: ProblemShape's defaults.
  ProblemShape shape;
  // Seed of the "prompt": the sequence layout and every token's content. Default: 0.
  uint64_t seed = 0;
  // Seed of the "model": llm_mix's head kinds and each head's plan (window widths, slash
  // offsets, ...). Two workloads with the same model_seed and different seeds are two prompts
  // through the same layer (what a held-out check of offline calibration needs).
  // Default: unset = seed.
  std::optional<uint64_t> model_seed;
  // RoPE base. Default: 500000 (Llama-3; with 10000, far structures fade beyond ~4K tokens as
  // they do in Llama-2).
  double rope_theta = 500000.0;
  // Multiplies every planted logit: > 1 makes attention more peaked, < 1 flatter. Default: 1.
  double concentration = 1.0;
  // Sink tokens at the start of every sequence. Default: 4.
  int sink_tokens = 4;
  // One heavy-hitter column per this many keys (at least 8 per sequence). Default: 256.
  int vertical_every = 256;
};

// What one q head was built to do (logits are before `concentration`).
struct HeadPlan {
  HeadKind kind = HeadKind::kSinkLocal;
  double background_std = 1.0;     // std of the unstructured logits
  double sink_logit = 0;           // logit of the first sink token
  double sink_share = 0;           // target sink mass / (sink + local mass); sets sink_logit
  double local_logit = 0;          // peak logit of the local (RoPE decay) kernel; 0 = none
  double local_alpha = 0.5;        // pair weights ~ omega^-alpha: larger = wider window
  double vertical_logit = 0;       // logit of a heavy-hitter column of strength 1; 0 = none
  double slash_logit = 0;          // peak logit of each slash line; 0 = none
  std::vector<int> slash_offsets;  // query position - key position of each line
  double topic_logit = 0;          // logit of a key of the query's own topic; 0 = none
  double retrieval_logit = 0;      // logit of a target key of the query's group; 0 = none
};

// The planted structure of one sequence, over key positions 0 .. k_len-1 (a query at row i sits
// at position k_len - q_len + i). Shared by all heads: it is the "text".
struct SequenceLayout {
  int k_len = 0;
  int sink_tokens = 0;                // keys [0, sink_tokens)
  std::vector<int> heavy_columns;     // sorted key positions
  std::vector<float> heavy_strength;  // in (0, 1], per column
  std::vector<int> segment_start;     // topic segments: [start[s], start[s+1]) (last: k_len)
  std::vector<int> segment_topic;     // topic id of each segment (topics recur)
  struct RetrievalGroup {
    int begin = 0, end = 0;    // query positions [begin, end)
    std::vector<int> targets;  // sorted key positions this group retrieves
  };
  std::vector<RetrievalGroup> groups;  // cover [0, k_len); groups starting early have no target

  int SegmentOf(int pos) const;  // index into segment_start
  int GroupOf(int pos) const;    // index into groups
};

// A generated problem with its plan. Not thread-safe to mutate; const access is.
struct Workload {
  WorkloadOptions options;
  std::unique_ptr<HostProblem> host;
  std::vector<HeadPlan> heads;            // per q head
  std::vector<SequenceLayout> sequences;  // per sequence

  AttentionProblem& problem() { return host->problem(); }
  const AttentionProblem& problem() const { return host->problem(); }
  // q heads of each kind present, in kind order: {kind, heads}.
  std::vector<std::pair<HeadKind, std::vector<int>>> HeadsByKind() const;
};

// Builds Q/K/V (options.shape.dtype) for the requested workload. INVALID_ARGUMENT names the bad
// option (unknown workload, head_dim < 32, bad sizes, theta <= 1, concentration <= 0, ...).
// Multi-threaded (ParallelFor); the bytes depend only on the options.
absl::StatusOr<Workload> GenerateWorkload(const WorkloadOptions& options);

// The kinds llm_mix gives `num_q_heads` heads for `seed`: every kind once when there are at
// least 6 heads (diffuse excepted), the rest mostly sink_local and vertical_slash.
std::vector<HeadKind> LlmMixKinds(int num_q_heads, uint64_t seed);

// Probability mass of one query row (probs over keys [0, count) of its sequence, query at key
// position `pos`) on each planted structure of its head; for tests and reports. Components
// overlap (a heavy column may sit in the local window); `planted` is the mass of their union
// over the components the head's plan has.
struct PlantedMass {
  double sink = 0;       // keys [0, sink_tokens)
  double local = 0;      // the `window` keys ending at pos
  double vertical = 0;   // heavy-hitter columns
  double slash = 0;      // keys within `band` of pos - offset, for each slash offset
  double topic = 0;      // keys whose segment has the query's topic
  double retrieval = 0;  // targets of the query's retrieval group
  double planted = 0;    // union of the components the plan uses (1 for diffuse heads)
};
PlantedMass MeasurePlantedMass(const HeadPlan& plan, const SequenceLayout& layout, int pos,
                               const float* probs, int count, int window = 256, int band = 8);

}  // namespace spattn

#endif  // SPATTN_KERNELS_WORKLOAD_WORKLOAD_H_
