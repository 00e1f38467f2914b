// Regions and authorization of the worker, against the two attacks of issue 13:
//  * read another process's shared memory: register its segment as a region and send a request
//    whose V is that region with one token per sequence (then O = V comes back inline);
//  * write another process's memory: use its region as the output.
// Shared memory is registered only through the Unix socket, for segments the calling uid owns and
// whose key starts with --shm_prefix; over TCP it is PERMISSION_DENIED unless allow_tcp_shm.
// Regions belong to the client that registered them. With an auth config, region RPCs need the
// write role, attention the read role; health stays open.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/attention_client.h"
#include "kernels/dtype.h"
#include "proto/grpc_security.h"
#include "server/test_util.h"
#include "server/worker_server.h"

namespace spattn {
namespace {

constexpr int kTokens = 32;  // Sequences of one token each: O = V.
constexpr int kDim = 64;
constexpr size_t kBytes = kTokens * kDim * 2;  // bf16 [32, 1, 64] = 4096 bytes.
constexpr char kAliceToken[] = "alice-token-0123456789abcdef";
constexpr char kBobToken[] = "bob-token-0123456789abcdefgh";
constexpr char kReaderToken[] = "reader-token-0123456789abcdef";

std::string Rand() {
  std::random_device rd;
  return absl::StrCat(getpid(), "_", absl::Hex((uint64_t{rd()} << 32) | rd()));
}

// A segment created by this process, optionally handed to another uid (the "victim").
class Segment {
 public:
  Segment(const std::string& key, uint16_t fill) : key_(key) {
    shm_unlink(key_.c_str());
    const int fd = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << key_;
    EXPECT_EQ(ftruncate(fd, kBytes), 0);
    data_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    for (size_t i = 0; i < kBytes / 2; ++i) {
      // bf16 values fill, fill+1, ... (small positive numbers): the "secret".
      const uint16_t v = static_cast<uint16_t>(fill + i % 64);
      std::memcpy(data_ + 2 * i, &v, 2);
    }
    fd_ = fd;
  }
  ~Segment() {
    munmap(data_, kBytes);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  bool GiveTo(uid_t uid) { return fchown(fd_, uid, uid) == 0; }
  const std::string& key() const { return key_; }
  const uint8_t* data() const { return data_; }
  uint8_t* data() { return data_; }

 private:
  std::string key_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

v1::AttentionRequest OneTokenRequest() {
  v1::AttentionRequest r;
  r.set_num_q_heads(1);
  r.set_num_kv_heads(1);
  r.set_head_dim(kDim);
  r.set_causal(true);
  for (int i = 0; i <= kTokens; ++i) r.add_cu_seqlens_q(i);
  static const std::string zeros(kBytes, '\0');
  *r.mutable_q() = InlineTensor(DType::kBF16, {kTokens, 1, kDim}, zeros.data(), kBytes);
  *r.mutable_k() = InlineTensor(DType::kBF16, {kTokens, 1, kDim}, zeros.data(), kBytes);
  *r.mutable_v() = InlineTensor(DType::kBF16, {kTokens, 1, kDim}, zeros.data(), kBytes);
  r.mutable_method_override()->set_method(v1::METHOD_DENSE);
  return r;
}

std::unique_ptr<AttentionClient> Connect(const std::string& address,
                                         const std::string& token = "") {
  ClientOptions o;
  o.address = address;
  o.security.bearer_token = token;
  auto c = AttentionClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    socket_ = absl::StrCat("/tmp/spattn-sec-", Rand(), ".sock");
    WorkerOptions o;
    o.devices = "cpu";
    o.listen_address = absl::StrCat("127.0.0.1:0,unix:", socket_);
    auto w = WorkerServer::Start(o);
    ASSERT_TRUE(w.ok()) << w.status();
    strict_ = w->release();

    // Multi-tenant over TCP: tokens, and the operator's opt-in for shared memory over TCP.
    WorkerOptions m;
    m.devices = "cpu";
    m.allow_tcp_shm = true;
    auto auth =
        ParseAuthConfig(absl::StrCat("token ", kAliceToken, " write alice\n", "token ", kBobToken,
                                     " write bob\n", "token ", kReaderToken, " read dashboard\n"));
    ASSERT_TRUE(auth.ok()) << auth.status();
    m.auth = *auth;
    auto w2 = WorkerServer::Start(m);
    ASSERT_TRUE(w2.ok()) << w2.status();
    tenants_ = w2->release();
  }
  static void TearDownTestSuite() {
    delete strict_;
    delete tenants_;
  }
  static std::string socket_;
  static WorkerServer* strict_;
  static WorkerServer* tenants_;
};

std::string SecurityTest::socket_;
WorkerServer* SecurityTest::strict_ = nullptr;
WorkerServer* SecurityTest::tenants_ = nullptr;

TEST_F(SecurityTest, ReadingAnotherUsersSegmentThroughOEqualsVIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand a segment to another uid";
  Segment victim(absl::StrCat("/spattn-victim-", Rand()), 0x3f00);
  if (!victim.GiveTo(65534)) GTEST_SKIP() << "cannot hand a segment to uid 65534 here";
  auto tcp = Connect(strict_->address());
  auto uds = Connect(absl::StrCat("unix:", socket_));
  ASSERT_TRUE(tcp && uds);
  // Over TCP nothing proves who owns a segment: refused.
  absl::Status s = tcp->RegisterSystemRegion("stolen", victim.key(), 0, kBytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("allow_tcp_shm"), std::string::npos) << s;
  // Over the Unix socket the peer's uid (0) does not own it (65534): refused.
  s = uds->RegisterSystemRegion("stolen", victim.key(), 0, kBytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(s.message().find(victim.key()), std::string::npos) << "no keys in errors: " << s;
  // The attack's request then names a region that does not exist; no byte of V comes back.
  v1::AttentionRequest req = OneTokenRequest();
  *req.mutable_v() = RegionTensor(DType::kBF16, {kTokens, 1, kDim}, "stolen", 0, kBytes);
  for (AttentionClient* c : {tcp.get(), uds.get()}) {
    auto r = c->ComputeAttention(req);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  }
}

TEST_F(SecurityTest, OwnSegmentOverUnixSocketWorksAndOEqualsV) {
  // The attack's shape works on the caller's own memory: that is what the refusals above stop.
  Segment mine(absl::StrCat("/spattn-mine-", Rand()), 0x3f80);
  auto uds = Connect(absl::StrCat("unix:", socket_));
  ASSERT_TRUE(uds);
  ASSERT_TRUE(uds->RegisterSystemRegion("mine", mine.key(), 0, kBytes).ok());
  v1::AttentionRequest req = OneTokenRequest();
  *req.mutable_v() = RegionTensor(DType::kBF16, {kTokens, 1, kDim}, "mine", 0, kBytes);
  auto r = uds->ComputeAttention(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->output().inline_data().data().size(), kBytes);
  EXPECT_EQ(std::memcmp(r->output().inline_data().data().data(), mine.data(), kBytes), 0);
  auto listed = uds->ListRegions();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  // A TCP client is another principal: it does not see or use the region.
  auto tcp = Connect(strict_->address());
  EXPECT_TRUE(tcp->ListRegions()->empty());
  EXPECT_EQ(tcp->ComputeAttention(req).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tcp->UnregisterRegion("mine").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*uds->UnregisterRegion(""), 1);
}

TEST_F(SecurityTest, KeysOutsideThePrefixAreRefused) {
  Segment other(absl::StrCat("/other-app-", Rand()), 0x3f80);
  auto uds = Connect(absl::StrCat("unix:", socket_));
  ASSERT_TRUE(uds);
  const absl::Status s = uds->RegisterSystemRegion("x", other.key(), 0, kBytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("/spattn-"), std::string::npos) << s;
}

TEST_F(SecurityTest, CudaIpcNeedsUnixSocketOrAuthenticatedClient) {
  auto tcp = Connect(strict_->address());
  auto uds = Connect(absl::StrCat("unix:", socket_));
  const std::string handle(64, '\x01');
  EXPECT_EQ(tcp->RegisterCudaRegion("g", handle, 0, 1024).code(),
            absl::StatusCode::kPermissionDenied);
  v1::AttentionRequest req = OneTokenRequest();
  v1::CudaIpcRef* ipc = req.mutable_v()->mutable_cuda_ipc();
  ipc->set_ipc_handle(handle);
  ipc->set_byte_size(kBytes);
  EXPECT_EQ(tcp->ComputeAttention(req).status().code(), absl::StatusCode::kPermissionDenied);
  // Through the Unix socket the caller passes; the made-up handle then fails to open (or there
  // is no GPU): FAILED_PRECONDITION, not PERMISSION_DENIED.
  const absl::Status s = uds->RegisterCudaRegion("g", handle, 0, 1024);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST_F(SecurityTest, AnotherClientCannotReadWriteOrUnregisterMyRegions) {
  auto alice = Connect(tenants_->address(), kAliceToken);
  auto bob = Connect(tenants_->address(), kBobToken);
  ASSERT_TRUE(alice && bob);
  Segment kv(absl::StrCat("/spattn-alice-kv-", Rand()), 0x3f80);
  Segment out(absl::StrCat("/spattn-alice-out-", Rand()), 0x4000);
  ASSERT_TRUE(alice->RegisterSystemRegion("kv", kv.key(), 0, kBytes).ok());
  ASSERT_TRUE(alice->RegisterSystemRegion("out", out.key(), 0, kBytes).ok());
  const std::string out_before(reinterpret_cast<const char*>(out.data()), kBytes);

  // Bob reads Alice's region as V: NOT_FOUND (it does not exist in his namespace).
  v1::AttentionRequest read = OneTokenRequest();
  *read.mutable_v() = RegionTensor(DType::kBF16, {kTokens, 1, kDim}, "kv", 0, kBytes);
  EXPECT_EQ(bob->ComputeAttention(read).status().code(), absl::StatusCode::kNotFound);
  // Bob writes into Alice's output region: NOT_FOUND, her bytes unchanged.
  v1::AttentionRequest write = OneTokenRequest();
  *write.mutable_output() = RegionTensor(DType::kBF16, {kTokens, 1, kDim}, "out", 0, kBytes);
  EXPECT_EQ(bob->ComputeAttention(write).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::memcmp(out.data(), out_before.data(), kBytes), 0);
  // Nor list or unregister them.
  EXPECT_TRUE(bob->ListRegions()->empty());
  EXPECT_EQ(bob->UnregisterRegion("kv").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*bob->UnregisterRegion(""), 0);
  // Alice still can: O = V written into her output region.
  ASSERT_TRUE(alice->ComputeAttention(read).ok());
  *write.mutable_v() = RegionTensor(DType::kBF16, {kTokens, 1, kDim}, "kv", 0, kBytes);
  auto r = alice->ComputeAttention(write);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::memcmp(out.data(), kv.data(), kBytes), 0);
  EXPECT_EQ(alice->ListRegions()->size(), 2u);
  EXPECT_EQ(*alice->UnregisterRegion(""), 2);
}

TEST_F(SecurityTest, RegionRpcsNeedTheWriteRoleAndAttentionTheReadRole) {
  auto anonymous = Connect(tenants_->address());
  auto forged = Connect(tenants_->address(), "not-a-token-0123456789");
  auto reader = Connect(tenants_->address(), kReaderToken);
  Segment seg(absl::StrCat("/spattn-roles-", Rand()), 0x3f80);
  EXPECT_EQ(anonymous->RegisterSystemRegion("r", seg.key(), 0, kBytes).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(forged->RegisterSystemRegion("r", seg.key(), 0, kBytes).code(),
            absl::StatusCode::kUnauthenticated);
  const absl::Status denied = reader->RegisterSystemRegion("r", seg.key(), 0, kBytes);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_EQ(reader->UnregisterRegion("").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(anonymous->ComputeAttention(OneTokenRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(forged->ComputeAttention(OneTokenRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(reader->ComputeAttention(OneTokenRequest()).ok());
  // Health and metadata stay open.
  EXPECT_EQ(*anonymous->Health(), "SERVING");
  EXPECT_TRUE(anonymous->Metadata().ok());
}

TEST(AuthConfigTest, ParsesAndRejects) {
  auto ok = ParseAuthConfig(
      "# comment\ntoken abcdefghijklmnop write w\ncert worker-1.example read\ncert * read\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->tokens.size(), 1u);
  EXPECT_EQ(ok->certs.size(), 2u);
  EXPECT_FALSE(ParseAuthConfig("token short write w\n").ok());
  EXPECT_FALSE(ParseAuthConfig("token abcdefghijklmnop admin w\n").ok());
  EXPECT_FALSE(ParseAuthConfig("user x\n").ok());
  EXPECT_FALSE(
      ParseAuthConfig("token abcdefghijklmnop read a\ntoken abcdefghijklmnop read b\n").ok());
}

}  // namespace
}  // namespace spattn
