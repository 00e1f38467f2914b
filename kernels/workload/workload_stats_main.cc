// Prints the attention statistics of a generated workload (attention_stats.h) per head kind:
// same-prompt and cross-prompt top-k recall (MInference Fig. 2b/2c) and, with oracle_blocks > 0,
// the oracle densities at `target`.
//   workload_stats [workload] [seq_len] [q_heads] [kv_heads] [top_k] [rows] [oracle_blocks]
//                  [target] [seed] [other_seed] [model_seed]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "kernels/workload/attention_stats.h"
#include "kernels/workload/workload.h"

int main(int argc, char** argv) {
  using namespace spattn;
  auto arg = [&](int i, const char* def) { return argc > i ? argv[i] : def; };
  WorkloadOptions o;
  o.workload = arg(1, "llm_mix");
  const int s = std::atoi(arg(2, "16384"));
  o.shape.q_lens = {s};
  o.shape.num_q_heads = std::atoi(arg(3, "8"));
  o.shape.num_kv_heads = std::atoi(arg(4, "2"));
  const int top_k = std::atoi(arg(5, "4096"));
  const int rows = std::atoi(arg(6, "64"));
  const int blocks = std::atoi(arg(7, "0"));
  const double target = std::atof(arg(8, "0.95"));
  o.seed = std::strtoull(arg(9, "0"), nullptr, 10);
  const uint64_t other = std::strtoull(arg(10, "1"), nullptr, 10);
  o.model_seed = std::strtoull(arg(11, "0"), nullptr, 10);
  auto a = GenerateWorkload(o);
  WorkloadOptions ob = o;
  ob.seed = other;
  auto b = a.ok() ? GenerateWorkload(ob) : a.status();
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", std::string(b.status().message()).c_str());
    return 1;
  }
  TopKRecallOptions to;
  to.top_k = top_k;
  to.sample_rows = rows;
  auto r = TopKRecall(a->problem(), b->problem(), to);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::vector<HeadOracle> orc;
  if (blocks > 0) {
    OracleOptions oo;
    oo.target = target;
    oo.sample_blocks = blocks;
    auto x = OracleDensities(a->problem(), oo);
    if (!x.ok()) {
      std::fprintf(stderr, "%s\n", std::string(x.status().message()).c_str());
      return 1;
    }
    orc = *x;
  }
  std::printf(
      "S=%d top_k=%d rows=%d\n| head | kind | same | cross | oracle row | column | 64x64 |\n", s,
      top_k, rows);
  double ss = 0, sc = 0, o1 = 0, o2 = 0, o3 = 0;
  for (size_t i = 0; i < r->size(); ++i) {
    const auto& x = (*r)[i];
    ss += x.same;
    sc += x.cross;
    std::printf("| %d | %s | %.3f | %.3f |", x.head, HeadKindName(a->heads[x.head].kind), x.same,
                x.cross);
    if (!orc.empty()) {
      std::printf(" %.3f | %.3f | %.3f |", orc[i].row, orc[i].column, orc[i].block);
      o1 += orc[i].row;
      o2 += orc[i].column;
      o3 += orc[i].block;
    }
    std::printf("\n");
  }
  const double n = static_cast<double>(r->size());
  std::printf("| all | | %.3f | %.3f | %.3f | %.3f | %.3f |\n", ss / n, sc / n, o1 / n, o2 / n,
              o3 / n);
  return 0;
}
