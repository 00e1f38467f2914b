// Every Prometheus family the index service exports (DESIGN §7), declared in this one file. The
// registry is created by the caller (IndexServer) and injected, so tests can scrape their own.
//
//   spattn_index_rpc_requests_total{rpc,code}        counter
//   spattn_index_rpc_duration_seconds{rpc}           histogram (seconds)
//   spattn_index_rocksdb_ops_total{op,cf,result}     counter
//   spattn_index_published_version{model}            gauge
//   spattn_index_watchers                            gauge
//   spattn_build_info{component,version,grpc,rocksdb} gauge (always 1)
//
// Label values are bounded: rpc names, status code names, RocksDB op/cf/result names, model ids.
//
// Thread-safety: all methods are thread-safe (prometheus-cpp metrics are).
#ifndef SPATTN_INDEX_METRICS_H_
#define SPATTN_INDEX_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace spattn {

inline constexpr char kSpattnVersion[] = "0.1.0";

class IndexMetrics {
 public:
  explicit IndexMetrics(prometheus::Registry& registry);
  IndexMetrics(const IndexMetrics&) = delete;
  IndexMetrics& operator=(const IndexMetrics&) = delete;

  void RecordRpc(absl::string_view rpc, absl::StatusCode code, double seconds);
  void RecordRocksDbOp(absl::string_view op, absl::string_view cf, absl::string_view result);
  void SetPublishedVersion(const std::string& model_id, uint64_t version);
  void RemoveModel(const std::string& model_id);
  void WatcherAdded();
  void WatcherRemoved();

 private:
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Family<prometheus::Counter>& rocksdb_ops_;
  prometheus::Family<prometheus::Gauge>& published_version_;
  prometheus::Gauge& watchers_;
};

}  // namespace spattn

#endif  // SPATTN_INDEX_METRICS_H_
