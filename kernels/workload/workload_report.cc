// Prints, per head of a generated workload, how the exact attention mass of sampled query rows
// splits over the planted structures (a markdown table; the numbers in README.md come from it).
//   workload_report [workload] [seq_len] [q_heads] [kv_heads] [head_dim] [theta] [concentration]
//                   [rows] [seed]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/fidelity.h"
#include "kernels/workload/workload.h"

int main(int argc, char** argv) {
  using namespace spattn;
  WorkloadOptions o;
  o.workload = argc > 1 ? argv[1] : "llm_mix";
  const int s = argc > 2 ? std::atoi(argv[2]) : 4096;
  o.shape.q_lens = {s};
  o.shape.num_q_heads = argc > 3 ? std::atoi(argv[3]) : 8;
  o.shape.num_kv_heads = argc > 4 ? std::atoi(argv[4]) : 2;
  o.shape.head_dim = argc > 5 ? std::atoi(argv[5]) : 128;
  o.rope_theta = argc > 6 ? std::atof(argv[6]) : 500000.0;
  o.concentration = argc > 7 ? std::atof(argv[7]) : 1.0;
  const int rows = argc > 8 ? std::atoi(argv[8]) : 64;
  o.seed = argc > 9 ? std::strtoull(argv[9], nullptr, 10) : 0;
  auto w = GenerateWorkload(o);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
    return 1;
  }
  ExactRowSample::Options so;
  so.sample_rows = rows;
  auto sample = ExactRowSample::Compute(w->problem(), {}, so);
  if (!sample.ok()) {
    std::fprintf(stderr, "%s\n", std::string(sample.status().message()).c_str());
    return 1;
  }
  std::printf("workload=%s S=%d theta=%g concentration=%g rows=%d\n", o.workload.c_str(), s,
              o.rope_theta, o.concentration, rows);
  std::printf(
      "| head | kind | sink | local256 | vertical | slash | topic | retrieval | planted |"
      " max key |\n|---|---|---|---|---|---|---|---|---|---|\n");
  const AttentionProblem& p = w->problem();
  for (int h = 0; h < p.num_q_heads; ++h) {
    PlantedMass sum;
    double max_key = 0;
    const auto& sr = (*sample)->rows();
    for (size_t i = 0; i < sr.size(); ++i) {
      int count = 0;
      const float* probs = (*sample)->Probabilities(h, static_cast<int>(i), &count);
      const int pos = p.query_pos(sr[i].seq, sr[i].row);
      const PlantedMass m =
          MeasurePlantedMass(w->heads[h], w->sequences[sr[i].seq], pos, probs, count);
      sum.sink += m.sink;
      sum.local += m.local;
      sum.vertical += m.vertical;
      sum.slash += m.slash;
      sum.topic += m.topic;
      sum.retrieval += m.retrieval;
      sum.planted += m.planted;
      float mx = 0;
      for (int j = 0; j < count; ++j) mx = std::max(mx, probs[j]);
      max_key += mx;
    }
    const double n = static_cast<double>(sr.size());
    std::printf("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", h,
                HeadKindName(w->heads[h].kind), sum.sink / n, sum.local / n, sum.vertical / n,
                sum.slash / n, sum.topic / n, sum.retrieval / n, sum.planted / n, max_key / n);
  }
  return 0;
}
