#include "tests/bench/stats_lines.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/workload/attention_stats.h"

namespace spattn {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", v);
  return buf;
}

}  // namespace

bool IsStatsMethod(const std::string& name) {
  return name == kOracleMethod || name == kTopKRecallMethod;
}

absl::Status EmitStatsLines(const std::string& method, const AttentionProblem& problem,
                            const Workload* maybe_workload,
                            const std::vector<std::pair<std::string, std::vector<int>>>& groups_in,
                            const StatsLineOptions& options, const std::string& prefix,
                            std::ostream& out) {
  std::vector<std::pair<std::string, std::vector<int>>> groups = groups_in;
  if (groups.size() > 1) {
    std::vector<int> all;
    for (const auto& g : groups) all.insert(all.end(), g.second.begin(), g.second.end());
    std::sort(all.begin(), all.end());
    groups.push_back({"all", all});
  }
  // Per-head values, computed once for every head any group names.
  std::vector<int> heads;
  for (const auto& g : groups) heads.insert(heads.end(), g.second.begin(), g.second.end());
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  std::map<int, std::vector<double>> value;  // head -> values of the line
  std::vector<std::string> names;
  std::string params;
  if (method == kOracleMethod) {
    OracleOptions o;
    o.target = options.target;
    o.sample_blocks = options.sample_blocks;
    o.block = options.block;
    o.seed = options.seed;
    o.heads = heads;
    auto r = OracleDensities(problem, o);
    if (!r.ok()) return r.status();
    for (const HeadOracle& h : *r) value[h.head] = {h.row, h.column, h.block};
    names = {"row_density", "column_density", "block_density"};
    params = absl::StrCat("\"target\":", options.target, ",\"block\":", options.block,
                          ",\"sample_blocks\":", options.sample_blocks);
  } else if (method == kTopKRecallMethod) {
    if (maybe_workload == nullptr) {
      return absl::FailedPreconditionError(
          "topk_recall: needs a synthetic workload (it compares two prompts of one model)");
    }
    WorkloadOptions wo = maybe_workload->options;
    wo.model_seed = wo.model_seed.value_or(wo.seed);
    wo.seed = wo.seed + 1;
    auto other = GenerateWorkload(wo);
    if (!other.ok()) return other.status();
    TopKRecallOptions o;
    int k_max = 0;
    for (int b = 0; b < problem.batch(); ++b) k_max = std::max(k_max, problem.k_len(b));
    o.top_k = options.top_k > 0 ? options.top_k : (k_max + 31) / 32;
    o.sample_rows = options.sample_rows;
    o.seed = options.seed;
    o.heads = heads;
    auto r = TopKRecall(problem, other->problem(), o);
    if (!r.ok()) return r.status();
    for (const HeadTopKRecall& h : *r) value[h.head] = {h.same, h.cross};
    names = {"same_prompt", "cross_prompt"};
    params = absl::StrCat("\"top_k\":", o.top_k, ",\"rows\":", o.sample_rows,
                          ",\"other_seed\":", wo.seed);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not a statistics line: ", method));
  }
  if (options.table) {
    out << "| " << method << " | group | " << absl::StrJoin(names, " | ") << " |\n";
  }
  for (const auto& [name, hs] : groups) {
    std::vector<double> mean(names.size(), 0.0);
    for (int h : hs) {
      for (size_t i = 0; i < names.size(); ++i) mean[i] += value[h][i] / hs.size();
    }
    if (options.table) {
      out << "| " << method << " | " << name;
      for (double v : mean) out << " | " << Num(v);
      out << " |\n";
      continue;
    }
    out << "{\"method\":\"" << method << "\"," << prefix << (prefix.empty() ? "" : ",") << params
        << ",\"group\":\"" << name << "\",\"heads\":[" << absl::StrJoin(hs, ",") << "]";
    for (size_t i = 0; i < names.size(); ++i) out << ",\"" << names[i] << "\":" << Num(mean[i]);
    out << "}\n";
  }
  out.flush();
  return absl::OkStatus();
}

}  // namespace spattn
