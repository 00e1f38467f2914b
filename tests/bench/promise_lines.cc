#include "tests/bench/promise_lines.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/calibration/pattern_search.h"
#include "kernels/fidelity.h"
#include "kernels/status_macros.h"
#include "server/recall_guard.h"

namespace spattn {
namespace {

double MillisSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

absl::Status EmitPromiseLines(const WorkloadOptions& model, AttentionBackend* backend,
                              const PromiseOptions& o, std::ostream& out, std::ostream& err) {
  const uint64_t model_seed = model.model_seed.value_or(model.seed);
  auto prompt = [&](int len, uint64_t seed) {
    WorkloadOptions w = model;
    w.shape.q_lens = {len};
    w.shape.k_lens = {len};
    w.seed = seed;
    w.model_seed = model_seed;
    return GenerateWorkload(w);
  };
  // The held-out lengths, and the search each is served from: one search unless "auto", whose
  // choice follows the length (key: the choice's label).
  std::vector<int> lengths;
  std::vector<double> factors;
  std::vector<std::string> search_of_length;
  std::map<std::string, std::pair<std::vector<MethodConfig>, double>> searches;  // candidates, margin
  std::string given_label;  // not auto: the one search's label, "all" or the given methods
  if (!o.auto_candidates) {
    CandidateChoice given;
    given.all = o.candidates.empty();
    for (const MethodConfig& c : o.candidates) {
      if (std::find(given.methods.begin(), given.methods.end(), c.method) == given.methods.end())
        given.methods.push_back(c.method);
    }
    given.sampled_lines_margin = o.sampled_lines_margin;
    given_label = CandidateChoiceLabel(given);
  }
  for (double factor : o.factors) {
    const int len = std::max(128, static_cast<int>(std::lround(o.calib_len * factor)));
    if (len > o.max_len || len < o.min_len) continue;
    lengths.push_back(len);
    factors.push_back(factor);
    if (!o.auto_candidates) {
      search_of_length.push_back(given_label);
      if (searches.empty()) {
        searches[given_label] = {o.candidates.empty() ? DefaultCandidates() : o.candidates,
                                 o.sampled_lines_margin};
      }
      continue;
    }
    SPATTN_ASSIGN_OR_RETURN(const CandidateChoice choice,
                            AutoCandidatesForLength(len, o.auto_max_len));
    search_of_length.push_back(CandidateChoiceLabel(choice));
    if (searches.count(search_of_length.back()) == 0) {
      SPATTN_ASSIGN_OR_RETURN(std::vector<MethodConfig> candidates,
                              CandidatesForMethods(choice.methods, nullptr));
      searches[search_of_length.back()] = {std::move(candidates), choice.sampled_lines_margin};
    }
  }
  // The searches per target on the calibration prompt.
  SPATTN_ASSIGN_OR_RETURN(Workload calib, prompt(o.calib_len, model.seed + 1000));
  const int hq = calib.problem().num_q_heads;
  // [target][search label] -> config per head
  std::vector<std::map<std::string, std::vector<MethodConfig>>> searched(o.targets.size());
  for (size_t t = 0; t < o.targets.size(); ++t) {
    for (const auto& [label, search] : searches) {
      PatternSearchOptions so;
      so.target_recall = o.targets[t];
      so.sample_rows = o.search_rows;
      so.block_m = o.build.block_m;
      so.sampled_lines_block_m = o.build.sampled_lines_block_m;
      so.seed = model.seed;
      so.sampled_lines_margin = search.second;
      const auto start = std::chrono::steady_clock::now();
      SPATTN_ASSIGN_OR_RETURN(PatternSearchResult r,
                              SearchHeadPatterns({&calib.problem()}, search.first, so));
      std::vector<MethodConfig>& configs = searched[t][label];
      configs.assign(hq, MethodConfig());
      for (const HeadSearchResult& h : r.heads) configs[h.head] = h.chosen.config;
      err << "spattn-bench: promise: searched target " << o.targets[t] << " on " << o.calib_len
          << " tokens in " << static_cast<int64_t>(MillisSince(start)) << " ms"
          << (o.auto_candidates ? " (auto: " + label + ")" : std::string()) << "\n";
    }
  }
  struct Tally {
    double recall_sum = 0;
    int heads = 0, within = 0, lengths = 0, kept = 0;
  };
  std::vector<Tally> tally(o.targets.size());
  for (size_t li = 0; li < lengths.size(); ++li) {
    const int len = lengths[li];
    const double factor = factors[li];
    SPATTN_ASSIGN_OR_RETURN(Workload held, prompt(len, model.seed + 2000 + len));
    AttentionProblem& p = held.problem();
    SPATTN_RETURN_IF_ERROR(backend->Prepare(&p));
    for (size_t t = 0; t < o.targets.size(); ++t) {
      const double target = o.targets[t];
      // As a worker: every head starts from its config scaled to this length.
      std::vector<MethodConfig> start_of_head = searched[t][search_of_length[li]];
      for (MethodConfig& c : start_of_head)
        c = ScaleConfigToLength(c, o.calib_len, len, o.length_exponent);
      std::vector<MethodConfig> served = start_of_head;
      int rebuilds = 0;  // the guard's tries (widenings, adaptive, dense) over all heads
      std::string where = "host";
      double guard_ms = -1;
      const int device_rows = o.probe_rows >= 0 ? o.probe_rows : 64;
      auto device =
          backend->GuardOnDevice(start_of_head, target, device_rows, o.build, /*again=*/false);
      if (device.ok()) {
        served = device->configs;
        for (int w : device->widened) rebuilds += w;
        where = backend->name();
        guard_ms = device->recall_ms;
      } else if (device.status().code() == absl::StatusCode::kUnimplemented) {
        RecallGuardOptions go;
        go.target = target;
        go.fine_step = o.fine_step;
        go.adaptive = o.adaptive;
        go.adaptive_also = o.adaptive_also;
        go.adaptive_auto = o.adaptive_auto;
        if (o.probe_rows >= 0) go.probe_rows = o.probe_rows;
        auto build = [&](const MethodConfig& c, const std::vector<int>& hs, SparseIndex* out) {
          return BuildSparseIndex(p, c, hs, o.build, out);
        };
        const auto start = std::chrono::steady_clock::now();
        for (int h = 0; h < hq; ++h) {
          SparseIndex index;
          SPATTN_RETURN_IF_ERROR(build(start_of_head[h], {h}, &index));
          SPATTN_ASSIGN_OR_RETURN(GuardedHead g, GuardHead(p, index, 0, start_of_head[h],
                                                           /*widen=*/true, build, go));
          served[h] = g.config;
          rebuilds += g.widened;
        }
        guard_ms = MillisSince(start);
      } else {
        return device.status();
      }
      // The served configs' recall on other rows than the guard's probes, on the indexes the
      // backend builds for them, one build per build group as the worker's planner groups heads
      // (on the GPU with --device=cuda: what the worker serves, and fast at 128K where the host
      // builders took minutes; on the CPU the host builders, each head's rows those of its own
      // build).
      std::vector<double> recall(hq), density(hq);
      std::map<std::string, std::vector<int>> groups;  // BuildGroupKey -> heads, ascending
      for (int h = 0; h < hq; ++h) groups[BuildGroupKey(served[h])].push_back(h);
      for (const auto& [key, heads] : groups) {
        std::vector<MethodConfig> head_configs;
        for (int h : heads) head_configs.push_back(served[h]);
        SparseIndex index;
        SPATTN_RETURN_IF_ERROR(backend
                                   ->BuildIndex(served[heads[0]], heads,
                                                BuildOptionsForHeads(o.build, head_configs), &index)
                                   .status());
        for (size_t slot = 0; slot < heads.size(); ++slot) {
          SPATTN_ASSIGN_OR_RETURN(
              recall[heads[slot]],
              AttentionMassRecall(p, index, static_cast<int>(slot), o.recall_rows, 777));
          density[heads[slot]] = Density(p, index, static_cast<int>(slot));
        }
      }
      double mean = 0, mn = 1, dens = 0;
      int within = 0;
      for (int h = 0; h < hq; ++h) {
        mean += recall[h] / hq;
        mn = std::min(mn, recall[h]);
        dens += density[h] / hq;
        within += recall[h] >= target - 0.02;
      }
      const bool kept = mean >= target && within >= 0.95 * hq;
      Tally& ty = tally[t];
      ty.recall_sum += mean * hq;
      ty.heads += hq;
      ty.within += within;
      ++ty.lengths;
      ty.kept += kept;
      out << absl::StrFormat(
          "{\"method\":\"promise\",\"workload\":\"%s\",\"target\":%.2f,\"calib_len\":%d,"
          "\"seq_len\":%d,\"factor\":%g,\"num_heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
          "\"recall_mean\":%.4f,\"recall_min\":%.4f,\"heads_within_0_02\":%d,\"density\":%.4f,"
          "\"guard\":\"%s\",\"guard_recall_ms\":%.2f,\"guard_rebuilds\":%d,"
          "\"length_exponent\":%g,\"fine_step\":%g,\"candidates\":\"%s\",\"kept\":%s}\n",
          model.workload, target, o.calib_len, len, factor, hq, p.num_kv_heads, p.head_dim, mean,
          mn, within, dens, where, guard_ms, rebuilds, o.length_exponent, o.fine_step,
          o.auto_candidates ? "auto: " + search_of_length[li] : search_of_length[li],
          kept ? "true" : "false");
      out.flush();
    }
  }
  for (size_t t = 0; t < o.targets.size(); ++t) {
    const Tally& ty = tally[t];
    out << absl::StrFormat(
        "{\"method\":\"promise\",\"summary\":true,\"target\":%.2f,\"calib_len\":%d,"
        "\"lengths\":%d,\"lengths_kept\":%d,\"recall_mean\":%.4f,\"heads\":%d,"
        "\"heads_within_0_02\":%d,\"kept\":%s}\n",
        o.targets[t], o.calib_len, ty.lengths, ty.kept, ty.heads ? ty.recall_sum / ty.heads : 0.0,
        ty.heads, ty.within, ty.kept == ty.lengths && ty.lengths > 0 ? "true" : "false");
  }
  return absl::OkStatus();
}

}  // namespace spattn
