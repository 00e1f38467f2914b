// spattn-index-bench: index service latency/throughput through the real gRPC server on loopback.
// Prints one JSON object per line:
//   config fetch latency (GetHeadConfigs of a 32-layer x 32-head model, whole model and one layer),
//   centroid upload/fetch throughput (32 layers x 8 kv heads x [1024, 128] fp32 = 128 MiB),
//   seal latency (verifies every byte), publish latency (synced compare-and-set).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "index/index_server.h"
#include "index/tensor_client.h"
#include "index/test_util.h"

namespace spattn {
namespace {

using Clock = std::chrono::steady_clock;

// The command line (--help lists it).
struct BenchFlags {
  std::string data_dir;         // RocksDB directory (default: a fresh temp dir, removed after)
  int config_iterations = 500;  // GetHeadConfigs calls per measurement
  int fetch_iterations = 5;     // full centroid-set downloads
  int publish_iterations = 50;  // publishes measured
};
BenchFlags flags;

constexpr char kUsage[] =
    "usage: spattn-index-bench [--name=value ...]\n"
    "  --data_dir: RocksDB directory (default: a fresh temp dir, removed after)\n"
    "  --config_iterations: GetHeadConfigs calls per measurement (default 500)\n"
    "  --fetch_iterations: full centroid-set downloads (default 5)\n"
    "  --publish_iterations: publishes measured (default 50)\n";

absl::Status ReadFlags(CommandLine& line) {
  for (auto [name, out] :
       {std::pair<const char*, int*>{"config_iterations", &flags.config_iterations},
        {"fetch_iterations", &flags.fetch_iterations},
        {"publish_iterations", &flags.publish_iterations}}) {
    absl::Status s = line.Read(name, out);
    if (!s.ok()) return s;
    if (*out <= 0) return absl::InvalidArgumentError(absl::StrCat("--", name, ": must be > 0"));
  }
  absl::Status s = line.Read("data_dir", &flags.data_dir);
  if (!s.ok()) return s;
  return line.CheckAllUsed();
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

template <typename T>
T Check(absl::StatusOr<T> s, const char* what) {
  Check(s.status(), what);
  return *std::move(s);
}

template <typename Req, typename Resp>
absl::StatusOr<Resp> Call(v1::IndexService::Stub& stub,
                          grpc::Status (v1::IndexService::Stub::*method)(grpc::ClientContext*,
                                                                         const Req&, Resp*),
                          const Req& request) {
  grpc::ClientContext ctx;
  Resp response;
  grpc::Status s = (stub.*method)(&ctx, request, &response);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return response;
}

int Main() {
  std::string dir = flags.data_dir;
  const bool temp = dir.empty();
  if (temp) {
    char tmpl[] = "/tmp/spattn-index-bench.XXXXXX";
    dir = mkdtemp(tmpl);
  }
  IndexServerOptions options;
  options.data_dir = dir + "/db";
  auto server = Check(IndexServer::Start(options), "start");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = v1::IndexService::NewStub(
      grpc::CreateCustomChannel(server->address(), grpc::InsecureChannelCredentials(), args));

  const v1::Model model = testing_util::MakeModel("bench-llama-8b", 32, 32, 8, 128);
  v1::PutModelRequest pm;
  *pm.mutable_model() = model;
  Check(Call(*stub, &v1::IndexService::Stub::PutModel, pm), "put model");
  v1::CreateVersionRequest cv;
  cv.set_model_id(model.model_id());
  const uint64_t version =
      Check(Call(*stub, &v1::IndexService::Stub::CreateVersion, cv), "create").version();
  v1::PutHeadConfigsRequest pc;
  pc.set_model_id(model.model_id());
  pc.set_version(version);
  for (const auto& c : testing_util::MakeHeadConfigs(model, 1)) *pc.add_configs() = c;
  Check(Call(*stub, &v1::IndexService::Stub::PutHeadConfigs, pc), "configs");

  std::vector<TensorUpload> centroids = testing_util::MakeCentroids(model, 1024, 1);
  uint64_t total = 0;
  for (const auto& t : centroids) total += t.bytes.size();
  const double mib = total / 1048576.0;
  auto t0 = Clock::now();
  Check(UploadTensors(*stub, model.model_id(), version, centroids), "upload");
  const double upload_ms = Ms(Clock::now() - t0);
  centroids.clear();
  std::printf(
      "{\"bench\":\"centroid_upload\",\"mib\":%.1f,\"tensors\":%d,\"ms\":%.1f,"
      "\"mib_per_s\":%.1f}\n",
      mib, 32 * 8, upload_ms, mib / (upload_ms / 1000));

  v1::SealVersionRequest sv;
  sv.set_model_id(model.model_id());
  sv.set_version(version);
  t0 = Clock::now();
  Check(Call(*stub, &v1::IndexService::Stub::SealVersion, sv), "seal");
  std::printf("{\"bench\":\"seal\",\"mib_verified\":%.1f,\"ms\":%.1f}\n", mib,
              Ms(Clock::now() - t0));
  v1::PublishVersionRequest pv;
  pv.set_model_id(model.model_id());
  pv.set_version(version);
  Check(Call(*stub, &v1::IndexService::Stub::PublishVersion, pv), "publish");

  // Config fetch latency: whole model (1024 heads) and one layer (32 heads), published version.
  for (bool one_layer : {false, true}) {
    v1::GetHeadConfigsRequest gc;
    gc.set_model_id(model.model_id());
    if (one_layer) gc.set_layer(17);
    std::vector<double> lat;
    int configs = 0;
    for (int i = 0; i < flags.config_iterations + 20; ++i) {
      t0 = Clock::now();
      auto r = Check(Call(*stub, &v1::IndexService::Stub::GetHeadConfigs, gc), "get configs");
      if (i >= 20) lat.push_back(Ms(Clock::now() - t0));  // First 20: warm-up.
      configs = r.configs_size();
    }
    std::printf(
        "{\"bench\":\"config_fetch\",\"scope\":\"%s\",\"configs\":%d,\"n\":%zu,"
        "\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n",
        one_layer ? "layer" : "model", configs, lat.size(), Percentile(lat, 0.5),
        Percentile(lat, 0.99));
  }

  // Centroid fetch throughput: the whole 128 MiB set, streamed in 1 MiB chunks.
  {
    v1::GetTensorsRequest gt;
    gt.set_model_id(model.model_id());
    gt.set_kind(v1::TENSOR_KIND_CENTROIDS);
    std::vector<double> ms;
    for (int i = 0; i < flags.fetch_iterations; ++i) {
      t0 = Clock::now();
      auto got = Check(DownloadTensors(*stub, gt), "download");
      ms.push_back(Ms(Clock::now() - t0));
      if (got.size() != 256) Check(absl::InternalError("wrong tensor count"), "download");
    }
    const double med = Percentile(ms, 0.5), best = *std::min_element(ms.begin(), ms.end());
    std::printf(
        "{\"bench\":\"centroid_fetch\",\"mib\":%.1f,\"n\":%zu,\"median_ms\":%.1f,"
        "\"median_mib_per_s\":%.1f,\"best_mib_per_s\":%.1f}\n",
        mib, ms.size(), med, mib / (med / 1000), mib / (best / 1000));
    // One layer (8 kv heads, 4 MiB): what a worker loading lazily per layer sees.
    gt.set_layer(5);
    std::vector<double> layer_ms;
    for (int i = 0; i < 50; ++i) {
      t0 = Clock::now();
      Check(DownloadTensors(*stub, gt), "download layer");
      layer_ms.push_back(Ms(Clock::now() - t0));
    }
    std::printf(
        "{\"bench\":\"centroid_fetch_layer\",\"mib\":%.1f,\"n\":%zu,\"p50_ms\":%.2f,"
        "\"p99_ms\":%.2f}\n",
        mib / 32, layer_ms.size(), Percentile(layer_ms, 0.5), Percentile(layer_ms, 0.99));
  }

  // Publish latency: staged config-only versions, published one after another (synced write).
  {
    const int n = flags.publish_iterations;
    std::vector<uint64_t> staged;
    for (int i = 0; i < n; ++i) {
      cv.set_base_version(0);
      const uint64_t v =
          Check(Call(*stub, &v1::IndexService::Stub::CreateVersion, cv), "create").version();
      pc.set_version(v);
      Check(Call(*stub, &v1::IndexService::Stub::PutHeadConfigs, pc), "configs");
      sv.set_version(v);
      Check(Call(*stub, &v1::IndexService::Stub::SealVersion, sv), "seal");
      staged.push_back(v);
    }
    std::vector<double> lat;
    uint64_t current = version;
    for (uint64_t v : staged) {
      pv.set_version(v);
      pv.set_expected_current_version(current);
      t0 = Clock::now();
      Check(Call(*stub, &v1::IndexService::Stub::PublishVersion, pv), "publish");
      lat.push_back(Ms(Clock::now() - t0));
      current = v;
    }
    std::printf("{\"bench\":\"publish\",\"n\":%zu,\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n", lat.size(),
                Percentile(lat, 0.5), Percentile(lat, 0.99));
  }
  server->Shutdown();
  if (temp) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) {
  spattn::MainFlags flags;
  flags.program = "spattn-index-bench";
  flags.usage = [] { std::fputs(spattn::kUsage, stderr); };
  flags.read = [](spattn::CommandLine& line) { return spattn::ReadFlags(line); };
  const int rc = spattn::HandleMainFlags(argc, argv, flags);
  if (rc >= 0) return rc;
  return spattn::Main();
}
