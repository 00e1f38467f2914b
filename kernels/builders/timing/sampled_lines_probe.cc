// Where sampled_lines' density goes (issue 11 item 4), per head of an llm_mix problem: the
// query-block-column oracle at the target, the index's density and recall (exact, on sampled
// rows that are not the builder's), and the index's pairs split into the always-kept sink/local
// ranges, other ranges of >= 48 keys (diagonals), shorter ranges (runs of columns) and columns.
//   sampled_lines_probe SEQ_LEN HEADS KV_HEADS RECALL_ROWS ORACLE_BLOCKS TARGET SEED
//                       [block_m=B] [heads=H,H,...] VARIANT...
// VARIANT: comma-separated sampled_lines params, e.g. gamma=0.95,rows_per_block=2 ("-": defaults).
// block_m=: query rows per index block of the index and the oracle (default 64).
// heads=: probe only these q heads (e.g. a kind's heads at 128K, where all heads cost minutes).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "kernels/builders/sampled_lines.h"
#include "kernels/fidelity.h"
#include "kernels/method_config.h"
#include "kernels/workload/attention_stats.h"
#include "kernels/workload/workload.h"

namespace spattn {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "sampled_lines_probe: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Pairs of slot `slot` by part: 0 sink/local ranges, 1 ranges >= 48 keys, 2 shorter ranges,
// 3 columns (per-row causal mask applied; a range touching the sink or local span is part 0).
std::vector<double> PairParts(const AttentionProblem& p, const SparseIndex& x, int slot,
                              int local_tokens) {
  std::vector<double> part(4, 0.0);
  for (int b = 0; b < x.num_blocks(); ++b) {
    const BlockGeometry g = GetBlockGeometry(p, x, b);
    const int64_t r = x.row(slot, b);
    auto pairs = [&](int64_t key) {  // rows of the block that see `key`
      if (!p.causal) return static_cast<double>(g.q_end - g.q_begin);
      return static_cast<double>(
          std::max<int64_t>(0, g.last_pos - std::max<int64_t>(key, g.first_pos) + 1));
    };
    for (int i = x.range_indptr[r]; i < x.range_indptr[r + 1]; ++i) {
      const int64_t s = x.range_start[i], e = s + x.range_len[i];
      const bool fixed = s == 0 || e > g.first_pos - local_tokens + 1;
      const int which = fixed ? 0 : (x.range_len[i] >= 48 ? 1 : 2);
      for (int64_t k = s; k < e; ++k) part[which] += pairs(k);
    }
    for (int i = x.col_indptr[r]; i < x.col_indptr[r + 1]; ++i) part[3] += pairs(x.col_idx[i]);
  }
  return part;
}

int Main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr,
                 "usage: sampled_lines_probe SEQ_LEN HEADS KV_HEADS RECALL_ROWS ORACLE_BLOCKS "
                 "TARGET SEED VARIANT...\n");
    return 2;
  }
  WorkloadOptions wo;
  wo.shape.q_lens = {std::atoi(argv[1])};
  wo.shape.num_q_heads = std::atoi(argv[2]);
  wo.shape.num_kv_heads = std::atoi(argv[3]);
  wo.shape.head_dim = 128;
  wo.shape.dtype = DType::kBF16;
  const int recall_rows = std::atoi(argv[4]);
  const int oracle_blocks = std::atoi(argv[5]);
  const double target = std::atof(argv[6]);
  wo.seed = std::strtoull(argv[7], nullptr, 10);
  wo.model_seed = 0;
  auto w = GenerateWorkload(wo);
  if (!w.ok()) return Fail(w.status());
  const AttentionProblem& p = w->problem();
  int first_variant = 8;
  int block_m = 64;
  std::vector<int> heads;
  for (; first_variant < argc; ++first_variant) {
    const std::string a = argv[first_variant];
    if (a.rfind("block_m=", 0) == 0) {
      block_m = std::atoi(a.c_str() + 8);
      if (block_m <= 0 || block_m % 16 != 0) return Fail(absl::InvalidArgumentError(a));
    } else if (a.rfind("heads=", 0) == 0) {
      for (absl::string_view h : absl::StrSplit(a.substr(6), ',')) {
        heads.push_back(std::atoi(std::string(h).c_str()));
        if (heads.back() < 0 || heads.back() >= p.num_q_heads) {
          return Fail(absl::InvalidArgumentError(a));
        }
      }
    } else {
      break;
    }
  }
  if (heads.empty()) {
    for (int h = 0; h < p.num_q_heads; ++h) heads.push_back(h);
  }
  const int nh = static_cast<int>(heads.size());
  std::vector<HeadOracle> orc(nh);
  if (oracle_blocks > 0) {
    OracleOptions oo;
    oo.heads = heads;
    oo.target = target;
    oo.sample_blocks = oracle_blocks;
    oo.block = block_m;
    auto o = OracleDensities(p, oo);
    if (!o.ok()) return Fail(o.status());
    orc = *o;
  }
  ExactRowSample::Options so;
  so.sample_rows = recall_rows;
  so.seed = 7;
  auto sample = ExactRowSample::Compute(p, heads, so);
  if (!sample.ok()) return Fail(sample.status());
  for (int v = first_variant; v < argc; ++v) {
    MethodConfig c;
    c.method = Method::kSampledLines;
    if (std::string(argv[v]) != "-") {
      for (absl::string_view kv : absl::StrSplit(argv[v], ',')) {
        std::vector<std::string> f = absl::StrSplit(kv, '=');
        if (f.size() != 2) return Fail(absl::InvalidArgumentError(std::string(kv)));
        absl::Status s = SetMethodParam("sampled_lines." + f[0], f[1], &c);
        if (!s.ok()) return Fail(s);
      }
    }
    SparseIndex index;
    absl::Status s = BuildSampledLinesIndex(p, c.sampled_lines, heads, block_m, &index);
    if (!s.ok()) return Fail(s);
    struct Acc {
      int n = 0, near = 0;
      double orc = 0, dens = 0, rec = 0, rmin = 1;
      std::vector<double> part = std::vector<double>(4, 0.0);
    };
    std::map<std::string, Acc> kinds;
    std::printf(
        "variant %s\n| head | kind | oracle col | density | recall | sink+local | diag | "
        "runs | cols |\n",
        argv[v]);
    for (int slot = 0; slot < nh; ++slot) {
      const int h = heads[slot];
      auto f = (*sample)->Score(p, index, slot);
      if (!f.ok()) return Fail(f.status());
      const std::vector<double> part = PairParts(p, index, slot, c.sampled_lines.local_tokens);
      double pairs = 0;
      for (double x : part) pairs += x;
      const double allowed = f->density > 0 ? pairs / f->density : 1;
      const std::string kind = HeadKindName(w->heads[h].kind);
      std::printf("| %d | %s | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", h, kind.c_str(),
                  orc[slot].column, f->density, f->recall_mean, part[0] / allowed,
                  part[1] / allowed, part[2] / allowed, part[3] / allowed);
      for (const std::string& k : {kind, std::string("all")}) {
        Acc& a = kinds[k];
        ++a.n;
        a.near += f->recall_mean >= target - 0.02;
        a.orc += orc[slot].column;
        a.dens += f->density;
        a.rec += f->recall_mean;
        a.rmin = std::min(a.rmin, f->recall_mean);
        for (int i = 0; i < 4; ++i) a.part[i] += part[i] / allowed;
      }
    }
    std::printf(
        "| kind | heads | oracle col | density | x oracle | recall | min head | near | "
        "sink+local | diag | runs | cols |\n");
    for (const auto& [k, a] : kinds) {
      std::printf(
          "| %s | %d | %.4f | %.4f | %.2f | %.4f | %.4f | %d/%d | %.4f | %.4f | %.4f | "
          "%.4f |\n",
          k.c_str(), a.n, a.orc / a.n, a.dens / a.n, a.orc > 0 ? a.dens / a.orc : 0, a.rec / a.n,
          a.rmin, a.near, a.n, a.part[0] / a.n, a.part[1] / a.n, a.part[2] / a.n, a.part[3] / a.n);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) { return spattn::Main(argc, argv); }
