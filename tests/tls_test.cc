// TLS / mTLS and authorization on both servers and their clients, with certificates made in the
// test by the openssl CLI: a CA, a server certificate for localhost/127.0.0.1, client certificates
// (worker-1: read role by identity, ops: write role), and a rogue CA's client certificate.
//  * index service: mTLS required; plaintext and rogue-CA clients cannot connect; certificate
//    identities map to roles (read: fetch/watch, write: the rest); tokens work over TLS too;
//  * worker: TLS with optional client certificates, bearer tokens; its link to the index
//    service over mTLS fetches a model's configs;
//  * health stays readable without credentials.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/attention_client.h"
#include "index/index_server.h"
#include "index/test_util.h"
#include "proto/grpc_security.h"
#include "proto/grpc_status.h"
#include "server/worker_server.h"
#include "spattn/v1/index_service.grpc.pb.h"

namespace spattn {
namespace {

constexpr char kOpsToken[] = "ops-token-0123456789abcdef";

std::string Dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TEST_TMPDIR");
    std::random_device rd;
    std::string d = absl::StrCat(t != nullptr ? t : "/tmp", "/pki_", rd());
    mkdir(d.c_str(), 0700);
    return d;
  }();
  return dir;
}

int Sh(const std::string& cmd) {
  return std::system(absl::StrCat("cd '", Dir(), "' && (", cmd, ") >openssl.log 2>&1").c_str());
}

// name.key + name.crt signed by ca (or self-signed when ca is "").
bool MakeCert(const std::string& name, const std::string& cn, const std::string& ca,
              const std::string& san) {
  std::string cmd = absl::StrCat("openssl req -new -newkey rsa:2048 -nodes -keyout ", name,
                                 ".key -subj /CN=", cn, " -out ", name, ".csr");
  if (ca.empty()) {
    return Sh(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ", name,
                           ".key -out ", name, ".crt -subj /CN=", cn,
                           " -addext basicConstraints=critical,CA:TRUE")) == 0;
  }
  std::ofstream(absl::StrCat(Dir(), "/", name, ".ext"))
      << "basicConstraints=CA:FALSE\n"
      << (san.empty() ? "" : absl::StrCat("subjectAltName=", san, "\n"));
  return Sh(cmd) == 0 && Sh(absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca,
                                         ".crt -CAkey ", ca, ".key -CAcreateserial -days 2 -out ",
                                         name, ".crt -extfile ", name, ".ext")) == 0;
}

std::string P(const std::string& file) { return absl::StrCat(Dir(), "/", file); }

ClientSecurityOptions Client(const std::string& cert, const std::string& token = "") {
  ClientSecurityOptions o;
  o.ca_file = P("ca.crt");
  if (!cert.empty()) {
    o.cert_file = P(cert + ".crt");
    o.key_file = P(cert + ".key");
  }
  o.bearer_token = token;
  return o;
}

std::unique_ptr<v1::IndexService::Stub> IndexStub(const std::string& address,
                                                  const ClientSecurityOptions& o) {
  auto channel = MakeChannel(address, o);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return v1::IndexService::NewStub(*channel);
}

absl::Status GetModel(v1::IndexService::Stub* stub, const std::string& model) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetModelRequest req;
  req.set_model_id(model);
  v1::Model out;
  return FromGrpcStatus(stub->GetModel(&ctx, req, &out));
}

absl::Status PutModel(v1::IndexService::Stub* stub, const v1::Model& m) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::PutModelRequest req;
  *req.mutable_model() = m;
  v1::PutModelResponse out;
  return FromGrpcStatus(stub->PutModel(&ctx, req, &out));
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system("openssl version >/dev/null 2>&1"), 0) << "openssl CLI missing";
    ASSERT_TRUE(MakeCert("ca", "spattn-test-ca", "", ""));
    ASSERT_TRUE(MakeCert("server", "localhost", "ca", "DNS:localhost,IP:127.0.0.1"));
    ASSERT_TRUE(MakeCert("worker", "worker-1", "ca", "DNS:worker-1"));
    ASSERT_TRUE(MakeCert("ops", "ops", "ca", ""));
    ASSERT_TRUE(MakeCert("rogue_ca", "rogue-ca", "", ""));
    ASSERT_TRUE(MakeCert("rogue", "worker-1", "rogue_ca", "DNS:worker-1"));

    IndexServerOptions io;
    io.data_dir = P("index_db");
    io.tls = {P("server.crt"), P("server.key"), P("ca.crt"), /*require_client_cert=*/true};
    auto auth = ParseAuthConfig(
        absl::StrCat("cert worker-1 read\ncert ops write\ntoken ", kOpsToken, " write ops\n"));
    ASSERT_TRUE(auth.ok()) << auth.status();
    io.auth = *auth;
    auto index = IndexServer::Start(io);
    ASSERT_TRUE(index.ok()) << index.status();
    index_ = index->release();
    // The model the worker will fetch, written by the ops identity.
    auto ops = IndexStub(index_address(), Client("ops"));
    ASSERT_TRUE(PutModel(ops.get(), testing_util::MakeModel("tls-model", 2, 2, 1, 64)).ok());
  }
  static void TearDownTestSuite() { delete index_; }
  static std::string index_address() { return absl::StrCat("localhost:", index_->port()); }
  static IndexServer* index_;
};

IndexServer* TlsTest::index_ = nullptr;

TEST_F(TlsTest, IndexServiceRequiresAClientCertificateFromItsCa) {
  auto plaintext = v1::IndexService::NewStub(
      grpc::CreateChannel(index_address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(GetModel(plaintext.get(), "tls-model").code(), absl::StatusCode::kUnavailable);
  auto no_cert = IndexStub(index_address(), Client(""));
  EXPECT_EQ(GetModel(no_cert.get(), "tls-model").code(), absl::StatusCode::kUnavailable);
  auto rogue = IndexStub(index_address(), Client("rogue"));
  EXPECT_EQ(GetModel(rogue.get(), "tls-model").code(), absl::StatusCode::kUnavailable);
  // A client that does not trust the server's CA refuses the server.
  ClientSecurityOptions wrong_ca = Client("worker");
  wrong_ca.ca_file = P("rogue_ca.crt");
  auto distrust = IndexStub(index_address(), wrong_ca);
  EXPECT_EQ(GetModel(distrust.get(), "tls-model").code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, CertificateIdentitiesAndTokensCarryRoles) {
  auto reader = IndexStub(index_address(), Client("worker"));  // worker-1: read.
  EXPECT_TRUE(GetModel(reader.get(), "tls-model").ok());
  const absl::Status denied = PutModel(reader.get(), testing_util::MakeModel("x", 1, 1, 1, 64));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  // A bearer token with the write role over an mTLS connection whose identity only reads.
  auto token = IndexStub(index_address(), Client("worker", kOpsToken));
  EXPECT_TRUE(PutModel(token.get(), testing_util::MakeModel("by-token", 1, 1, 1, 64)).ok());
  auto forged = IndexStub(index_address(), Client("worker", "forged-token-0123456789"));
  EXPECT_EQ(GetModel(forged.get(), "tls-model").code(), absl::StatusCode::kUnauthenticated);
  // Watch is a read.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::WatchPublishedRequest w;
  w.set_model_id("tls-model");
  auto stream = reader->WatchPublished(&ctx, w);
  v1::PublishedEvent e;
  stream->Read(&e);  // Nothing published: the deadline ends it.
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(TlsTest, WorkerServesTlsWithTokensAndReachesTheIndexOverMtls) {
  WorkerOptions o;
  o.devices = "cpu";
  o.tls = {P("server.crt"), P("server.key"), P("ca.crt"), /*require_client_cert=*/false};
  auto auth =
      ParseAuthConfig(absl::StrCat("token ", kOpsToken, " write ops\ncert worker-1 read\n"));
  ASSERT_TRUE(auth.ok());
  o.auth = *auth;
  o.index_address = index_address();
  o.index_security = Client("worker");
  auto worker = WorkerServer::Start(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string address = absl::StrCat("localhost:", (*worker)->port());

  ClientOptions plain;
  plain.address = address;
  plain.connect_timeout = absl::Seconds(2);
  EXPECT_FALSE(AttentionClient::Connect(plain).ok());

  ClientOptions anonymous;
  anonymous.address = address;
  anonymous.security = Client("");
  auto anon = AttentionClient::Connect(anonymous);
  ASSERT_TRUE(anon.ok()) << anon.status();
  EXPECT_EQ(*(*anon)->Health(), "SERVING");  // Health needs no credentials.
  EXPECT_EQ((*anon)->ListRegions().status().code(), absl::StatusCode::kUnauthenticated);

  ClientOptions by_token = anonymous;
  by_token.security.bearer_token = kOpsToken;
  auto ops = AttentionClient::Connect(by_token);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_TRUE((*ops)->ListRegions().ok());

  // The worker fetched the model over mTLS (as worker-1, read role): a request naming it runs.
  v1::AttentionRequest req;
  req.set_model_id("tls-model");
  req.set_layer(1);
  req.set_num_q_heads(2);
  req.set_num_kv_heads(1);
  req.set_head_dim(64);
  req.set_causal(true);
  req.add_cu_seqlens_q(0);
  req.add_cu_seqlens_q(4);
  const std::string q(4 * 2 * 64 * 2, '\0'), kv(4 * 64 * 2, '\0');
  *req.mutable_q() = InlineTensor(DType::kBF16, {4, 2, 64}, q.data(), q.size());
  *req.mutable_k() = InlineTensor(DType::kBF16, {4, 1, 64}, kv.data(), kv.size());
  *req.mutable_v() = InlineTensor(DType::kBF16, {4, 1, 64}, kv.data(), kv.size());
  auto r = (*ops)->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << r.status();

  // mTLS identity with the read role (worker-1) may compute, not register regions.
  ClientOptions by_cert = anonymous;
  by_cert.security = Client("worker");
  auto reader = AttentionClient::Connect(by_cert);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->ComputeAttention(req).ok());
  EXPECT_EQ((*reader)->UnregisterRegion("").status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(TlsConfigTest, BadCombinationsAreRefused) {
  ServerTlsOptions half;
  half.cert_file = "/nonexistent.crt";
  EXPECT_FALSE(MakeServerCredentials(half).ok());
  ServerTlsOptions ca_only;
  ca_only.ca_file = "/x";
  EXPECT_FALSE(MakeServerCredentials(ca_only).ok());
  ClientSecurityOptions cert_without_tls;
  cert_without_tls.cert_file = "/x";
  cert_without_tls.key_file = "/y";
  EXPECT_FALSE(MakeChannelCredentials(cert_without_tls).ok());
  WorkerOptions o;
  o.devices = "cpu";
  o.tls.cert_file = "/nonexistent.crt";
  o.tls.key_file = "/nonexistent.key";
  EXPECT_FALSE(WorkerServer::Start(o).ok());
}

}  // namespace
}  // namespace spattn
