// Region registry: POSIX shared memory registered once and reused, bounds checks,
// unregistering while a request still holds a slice, and CUDA handles without a GPU.
#include "server/regions.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_runtime.h"
#include "server/test_util.h"

namespace spattn {
namespace {

const RegionCaller kMe{"me"};

// A shared-memory object for one test, unlinked at the end.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t bytes)
      : key_(testing_util::UniqueShmKey(absl::StrCat("rt_", tag))) {
    shm_unlink(key_.c_str());
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << key_;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    data_ = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    size_ = bytes;
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, size_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  uint8_t* data() { return data_; }

 private:
  std::string key_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

TEST(RegionManagerTest, RegisterResolveReuseAndList) {
  ShmObject shm("a", 3 * 4096);
  for (int i = 0; i < 3 * 4096; ++i) shm.data()[i] = static_cast<uint8_t>(i % 251);
  RegionManager rm;
  // A slice starting mid-page: the mapping must honour the offset.
  ASSERT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 5000, 6000).ok());
  auto s = rm.Resolve(kMe, "q.region", "r", 100, 200);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size, 200u);
  EXPECT_EQ(s->space, MemorySpace::kHost);
  EXPECT_EQ(s->kind, HandleKind::kSystemRegion);
  EXPECT_TRUE(s->writable);
  EXPECT_EQ(std::memcmp(s->data, shm.data() + 5100, 200), 0);
  // Writes through the worker's mapping reach the client's.
  s->data[0] = 0xAB;
  EXPECT_EQ(shm.data()[5100], 0xAB);
  // Reuse: the same region serves many requests; the mapping is shared.
  auto s2 = rm.Resolve(kMe, "k.region", "r", 0, 6000);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->data + 100, s->data);

  auto rows = rm.List(kMe);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "r");
  EXPECT_EQ(rows[0].kind, "system");
  EXPECT_EQ(rows[0].shm_key, shm.key());
  EXPECT_EQ(rows[0].offset, 5000u);
  EXPECT_EQ(rows[0].byte_size, 6000u);
}

TEST(RegionManagerTest, BoundsAreCheckedOnEveryUse) {
  ShmObject shm("b", 4096);
  RegionManager rm;
  ASSERT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 0, 4096).ok());
  auto past_end = rm.Resolve(kMe, "q.region", "r", 4000, 97);
  EXPECT_EQ(past_end.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past_end.status().message().find("q.region"), std::string::npos);
  auto wraps = rm.Resolve(kMe, "q.region", "r", UINT64_MAX - 10, 20);
  EXPECT_EQ(wraps.status().code(), absl::StatusCode::kInvalidArgument);
  auto offset_past = rm.Resolve(kMe, "q.region", "r", 5000, 0);
  EXPECT_EQ(offset_past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rm.Resolve(kMe, "q.region", "r", 4000, 96).ok());
  auto unknown = rm.Resolve(kMe, "k.region", "nope", 0, 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("k.region.region_name"), std::string::npos);
}

TEST(RegionManagerTest, RegistrationErrors) {
  ShmObject shm("c", 4096);
  RegionManager rm;
  EXPECT_EQ(rm.RegisterSystem(kMe, "", shm.key(), 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", "no_slash", 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", "/a/b", 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", shm.key(), 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status missing = rm.RegisterSystem(kMe, "r", "/spattn-rt-does-not-exist", 0, 1);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  // Error messages name the region, never the shm key.
  EXPECT_EQ(missing.message().find("spattn_rt_does_not_exist"), std::string::npos) << missing;
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", shm.key(), 4000, 97).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", shm.key(), UINT64_MAX, 2).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 0, 4096).ok());
  EXPECT_EQ(rm.RegisterSystem(kMe, "r", shm.key(), 0, 4096).code(),
            absl::StatusCode::kAlreadyExists);
  // Two names may share one object.
  EXPECT_TRUE(rm.RegisterSystem(kMe, "r2", shm.key(), 1024, 1024).ok());
}

TEST(RegionManagerTest, UnregisterKeepsInFlightSlicesAlive) {
  ShmObject shm("d", 8192);
  RegionManager rm;
  ASSERT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 0, 8192).ok());
  ASSERT_TRUE(rm.RegisterSystem(kMe, "s", shm.key(), 0, 4096).ok());
  auto slice = rm.Resolve(kMe, "q.region", "r", 0, 8192);
  ASSERT_TRUE(slice.ok());
  auto n = rm.Unregister(kMe, "r");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(rm.Resolve(kMe, "q.region", "r", 0, 1).status().code(), absl::StatusCode::kNotFound);
  // The request that resolved before still reads valid memory.
  shm.data()[8191] = 42;
  EXPECT_EQ(slice->data[8191], 42);
  EXPECT_EQ(rm.Unregister(kMe, "r").status().code(), absl::StatusCode::kNotFound);
  // Re-registering the name works once it is free.
  EXPECT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 0, 100).ok());
  n = rm.Unregister(kMe, "");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  EXPECT_TRUE(rm.List(kMe).empty());
}

TEST(RegionManagerTest, UnusableCudaHandlesAreFailedPrecondition) {
  // Without a GPU the worker says so; with one, a made-up handle fails to open. Both are
  // FAILED_PRECONDITION: the handle is unusable here.
  const bool gpu = !ListCudaDevices().empty();
  RegionManager rm;
  const std::string handle(64, '\x01');
  const absl::Status reg = rm.RegisterCuda(kMe, "g", handle, 0, "", 1024);
  EXPECT_EQ(reg.code(), absl::StatusCode::kFailedPrecondition) << reg;
  if (!gpu) {
    EXPECT_NE(reg.message().find("GPU"), std::string::npos) << reg;
  }
  auto ipc = rm.ResolveIpc(kMe, "q.cuda_ipc", handle, 0, "", 0, 1024);
  EXPECT_EQ(ipc.status().code(), absl::StatusCode::kFailedPrecondition) << ipc.status();
  EXPECT_NE(ipc.status().message().find("q.cuda_ipc"), std::string::npos);
  // Shape errors come first, GPU or not.
  EXPECT_EQ(rm.RegisterCuda(kMe, "g", "short", 0, "", 1024).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegionManagerTest, KeysOutsideThePrefixArePermissionDenied) {
  ShmObject shm("prefix", 4096);
  RegionManager rm;  // Default prefix "/spattn-".
  const absl::Status s = rm.RegisterSystem(kMe, "r", "/victim-secrets", 0, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(s.message().find("victim"), std::string::npos) << "the key is not echoed: " << s;
  EXPECT_TRUE(rm.RegisterSystem(kMe, "r", shm.key(), 0, 16).ok());
  RegionManagerOptions o;
  o.shm_prefix = "/spattn-other-";
  RegionManager strict(o);
  EXPECT_EQ(strict.RegisterSystem(kMe, "r", shm.key(), 0, 16).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(RegionManagerTest, PeerUidMustOwnTheObject) {
  ShmObject shm("uid", 4096);
  RegionManager rm;
  const int64_t me = static_cast<int64_t>(geteuid());
  EXPECT_TRUE(rm.RegisterSystem(RegionCaller{"a", me}, "mine", shm.key(), 0, 4096).ok());
  const absl::Status other = rm.RegisterSystem(RegionCaller{"b", me + 1}, "x", shm.key(), 0, 4096);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied) << other;
}

TEST(RegionManagerTest, RegionsAreScopedToTheirOwner) {
  ShmObject shm("scope", 8192);
  RegionManager rm;
  const RegionCaller alice{"token:alice"}, bob{"token:bob"};
  ASSERT_TRUE(rm.RegisterSystem(alice, "r", shm.key(), 0, 8192).ok());
  // Bob neither sees, resolves nor unregisters Alice's region; his own "r" is another region.
  EXPECT_TRUE(rm.List(bob).empty());
  EXPECT_EQ(rm.Resolve(bob, "v.region", "r", 0, 16).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(rm.Unregister(bob, "r").status().code(), absl::StatusCode::kNotFound);
  auto none = rm.Unregister(bob, "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  ASSERT_TRUE(rm.RegisterSystem(bob, "r", shm.key(), 0, 4096).ok());
  EXPECT_EQ(rm.List(alice).size(), 1u);
  EXPECT_EQ(rm.List(alice)[0].byte_size, 8192u);
  EXPECT_EQ(rm.List(bob)[0].byte_size, 4096u);
  EXPECT_TRUE(rm.Resolve(alice, "v.region", "r", 0, 8192).ok());
  auto n = rm.Unregister(alice, "");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_TRUE(rm.Resolve(bob, "v.region", "r", 0, 4096).ok());
}

}  // namespace
}  // namespace spattn
