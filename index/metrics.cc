#include "index/metrics.h"

#include <grpcpp/grpcpp.h>
#include <rocksdb/version.h>

#include "absl/strings/str_cat.h"

namespace spattn {
namespace {

// 100 us .. 10 s: config fetches are sub-millisecond, backups take seconds.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
  return *buckets;
}

}  // namespace

IndexMetrics::IndexMetrics(prometheus::Registry& registry)
    : rpc_requests_(prometheus::BuildCounter()
                        .Name("spattn_index_rpc_requests_total")
                        .Help("IndexService RPCs finished, by method and status code.")
                        .Register(registry)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("spattn_index_rpc_duration_seconds")
                        .Help("IndexService RPC latency in seconds (streams: whole stream).")
                        .Register(registry)),
      rocksdb_ops_(prometheus::BuildCounter()
                       .Name("spattn_index_rocksdb_ops_total")
                       .Help("RocksDB operations by op, column family and result.")
                       .Register(registry)),
      published_version_(prometheus::BuildGauge()
                             .Name("spattn_index_published_version")
                             .Help("The published version of each model (0: none).")
                             .Register(registry)),
      watchers_(prometheus::BuildGauge()
                    .Name("spattn_index_watchers")
                    .Help("Open WatchPublished streams.")
                    .Register(registry)
                    .Add({})) {
  prometheus::BuildGauge()
      .Name("spattn_build_info")
      .Help("Build information; always 1.")
      .Register(registry)
      .Add({{"component", "index"},
            {"version", kSpattnVersion},
            {"grpc", grpc::Version()},
            {"rocksdb", absl::StrCat(ROCKSDB_MAJOR, ".", ROCKSDB_MINOR, ".", ROCKSDB_PATCH)}})
      .Set(1);
}

void IndexMetrics::RecordRpc(absl::string_view rpc, absl::StatusCode code, double seconds) {
  rpc_requests_.Add({{"rpc", std::string(rpc)}, {"code", absl::StatusCodeToString(code)}})
      .Increment();
  rpc_duration_.Add({{"rpc", std::string(rpc)}}, DurationBuckets()).Observe(seconds);
}

void IndexMetrics::RecordRocksDbOp(absl::string_view op, absl::string_view cf,
                                   absl::string_view result) {
  rocksdb_ops_
      .Add({{"op", std::string(op)}, {"cf", std::string(cf)}, {"result", std::string(result)}})
      .Increment();
}

void IndexMetrics::SetPublishedVersion(const std::string& model_id, uint64_t version) {
  published_version_.Add({{"model", model_id}}).Set(static_cast<double>(version));
}

void IndexMetrics::RemoveModel(const std::string& model_id) {
  published_version_.Remove(&published_version_.Add({{"model", model_id}}));
}

void IndexMetrics::WatcherAdded() { watchers_.Increment(); }
void IndexMetrics::WatcherRemoved() { watchers_.Decrement(); }

}  // namespace spattn
