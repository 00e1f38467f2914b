#include "server/regions.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"
#include "server/cuda_ipc.h"

namespace spattn {

struct RegionManager::IpcMapping {
  void* ptr = nullptr;
  int device = 0;
  ~IpcMapping() {
    if (ptr != nullptr) CudaIpcClose(ptr, device);
  }
};

struct RegionManager::Region {
  RegionInfoRow info;
  uint8_t* base = nullptr;  // First byte of the registered slice.
  uint64_t size = 0;        // 0 for raw IPC handles: their extent is not known here.
  MemorySpace space = MemorySpace::kHost;
  int device = 0;
  HandleKind kind = HandleKind::kSystemRegion;
  bool writable = true;
  std::string owner;
  void* map_addr = nullptr;  // What munmap gets.
  size_t map_len = 0;
  bool pinned = false;              // map_addr is registered with cudaHostRegister.
  std::shared_ptr<IpcMapping> ipc;  // CUDA regions: closed when the last user lets go.

  ~Region() {
    if (pinned) CudaHostUnregister(map_addr);
    if (map_addr != nullptr) munmap(map_addr, map_len);
  }
};

namespace {

absl::Status CheckName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("name: empty");
  if (name.size() > 256) return absl::InvalidArgumentError("name: longer than 256 bytes");
  return absl::OkStatus();
}

// offset + byte_size without wrapping around.
bool SliceFits(uint64_t offset, uint64_t byte_size, uint64_t size) {
  return offset <= size && byte_size <= size - offset;
}

}  // namespace

RegionManager::RegionManager(const RegionManagerOptions& options) : options_(options) {}

RegionManager::~RegionManager() = default;

absl::Status RegionManager::RegisterSystem(const RegionCaller& caller, const std::string& name,
                                           const std::string& shm_key, uint64_t offset,
                                           uint64_t byte_size) {
  SPATTN_RETURN_IF_ERROR(CheckName(name));
  if (shm_key.size() < 2 || shm_key[0] != '/' || shm_key.find('/', 1) != std::string::npos ||
      shm_key.size() > 255 || shm_key == "/." || shm_key == "/..") {
    return absl::InvalidArgumentError(
        absl::StrCat("shm_key of region '", name, "': must look like /name (one leading slash)"));
  }
  if (!absl::StartsWith(shm_key, options_.shm_prefix)) {
    // The key itself is not echoed (it may name someone else's object).
    return absl::PermissionDeniedError(absl::StrCat("shm_key of region '", name,
                                                    "': this worker only maps shared-memory "
                                                    "objects whose key starts with '",
                                                    options_.shm_prefix, "' (--shm_prefix)"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size of region '", name, "': must be > 0"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count({caller.owner, name}) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("region '", name, "' is already registered"));
    }
    if (static_cast<int>(regions_.size()) >= options_.max_regions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the worker holds its maximum of ", options_.max_regions, " regions"));
    }
  }
  bool writable = true;
  // O_NOFOLLOW: a symlink planted under /dev/shm does not lead elsewhere.
  int fd = shm_open(shm_key.c_str(), O_RDWR | O_NOFOLLOW, 0);
  if (fd < 0 && errno == EACCES) {
    writable = false;
    fd = shm_open(shm_key.c_str(), O_RDONLY | O_NOFOLLOW, 0);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("region '", name, "': no shared-memory object under its shm_key"));
    }
    if (err == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("region '", name, "': the worker may not open its shm_key"));
    }
    return absl::InternalError(absl::StrCat("region '", name, "': shm_open: ", strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("region '", name, "': fstat: ", strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("region '", name, "': its shm_key is not a shared-memory object"));
  }
  if (caller.peer_uid >= 0 && static_cast<int64_t>(st.st_uid) != caller.peer_uid) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("region '", name,
                     "': the shared-memory object is not owned by the calling "
                     "user (uid ",
                     caller.peer_uid, ")"));
  }
  // Writable only when the owner could write it itself.
  if (caller.peer_uid >= 0 && (st.st_mode & S_IWUSR) == 0) writable = false;
  const uint64_t object_size = static_cast<uint64_t>(st.st_size);
  if (!SliceFits(offset, byte_size, object_size)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("region '", name, "': offset ", offset, " + byte_size ", byte_size,
                     " is outside the shared-memory object of ", object_size, " bytes"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_offset = offset / page * page;
  const size_t map_len = static_cast<size_t>(offset - map_offset + byte_size);
  void* addr = mmap(nullptr, map_len, writable ? (PROT_READ | PROT_WRITE) : PROT_READ, MAP_SHARED,
                    fd, static_cast<off_t>(map_offset));
  const int map_err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("region '", name, "': mmap: ", strerror(map_err)));
  }
  auto region = std::make_shared<Region>();
  region->map_addr = addr;
  region->map_len = map_len;
  region->base = static_cast<uint8_t*>(addr) + (offset - map_offset);
  region->size = byte_size;
  region->writable = writable;
  region->kind = HandleKind::kSystemRegion;
  region->info = RegionInfoRow{name, "system", shm_key, offset, byte_size, 0};
  region->owner = caller.owner;
  if (options_.pin_system_regions) {
    region->pinned = CudaHostRegister(addr, map_len, !writable).ok();
    region->info.pinned = region->pinned;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!regions_.emplace(std::make_pair(caller.owner, name), region).second) {
    return absl::AlreadyExistsError(absl::StrCat("region '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

absl::Status RegionManager::RegisterCuda(const RegionCaller& caller, const std::string& name,
                                         const std::string& raw_handle, int device_id,
                                         const std::string& device_uuid, uint64_t byte_size) {
  SPATTN_RETURN_IF_ERROR(CheckName(name));
  if (raw_handle.size() != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_handle of region '", name, "': expected 64 bytes, got ", raw_handle.size()));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size of region '", name, "': must be > 0"));
  }
  if (device_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_id of region '", name, "': must be >= 0"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count({caller.owner, name}) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("region '", name, "' is already registered"));
    }
    if (static_cast<int>(regions_.size()) >= options_.max_regions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the worker holds its maximum of ", options_.max_regions, " regions"));
    }
  }
  SPATTN_RETURN_IF_ERROR(CudaIpcUsable());
  SPATTN_ASSIGN_OR_RETURN(const int device, ResolveCudaDevice(device_uuid, device_id));
  SPATTN_ASSIGN_OR_RETURN(std::shared_ptr<IpcMapping> mapping, OpenIpc(raw_handle, device));
  auto region = std::make_shared<Region>();
  region->base = static_cast<uint8_t*>(mapping->ptr);
  region->ipc = std::move(mapping);
  region->size = byte_size;
  region->space = MemorySpace::kCuda;
  region->device = device;
  region->kind = HandleKind::kCudaRegion;
  region->info = RegionInfoRow{name, "cuda", "", 0, byte_size, device};
  region->owner = caller.owner;
  std::lock_guard<std::mutex> lock(mu_);
  if (!regions_.emplace(std::make_pair(caller.owner, name), region).second) {
    return absl::AlreadyExistsError(absl::StrCat("region '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RegionManager::IpcMapping>> RegionManager::OpenIpc(
    const std::string& raw_handle, int device) {
  std::lock_guard<std::mutex> lock(ipc_mu_);
  const std::string key = absl::StrCat(device, "|", raw_handle);
  auto it = ipc_open_.find(key);
  if (it != ipc_open_.end()) {
    if (std::shared_ptr<IpcMapping> open = it->second.lock()) return open;
  }
  SPATTN_ASSIGN_OR_RETURN(void* ptr, CudaIpcOpen(raw_handle, device));
  auto mapping = std::make_shared<IpcMapping>();
  mapping->ptr = ptr;
  mapping->device = device;
  // Forget handles whose mappings are gone.
  for (auto e = ipc_open_.begin(); e != ipc_open_.end();) {
    e = e->second.expired() ? ipc_open_.erase(e) : std::next(e);
  }
  ipc_open_[key] = mapping;
  return mapping;
}

absl::StatusOr<int> RegionManager::Unregister(const RegionCaller& caller, const std::string& name) {
  // Mappings are released outside the lock, when the last request holding them lets go.
  std::vector<std::shared_ptr<Region>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty()) {
    int n = 0;
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->first.first != caller.owner) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(it->second));
      it = regions_.erase(it);
      ++n;
    }
    return n;
  }
  auto it = regions_.find({caller.owner, name});
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region '", name, "' is not registered"));
  }
  dropped.push_back(std::move(it->second));
  regions_.erase(it);
  return 1;
}

std::vector<RegionInfoRow> RegionManager::List(const RegionCaller& caller) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RegionInfoRow> out;
  for (const auto& entry : regions_) {
    if (entry.first.first == caller.owner) out.push_back(entry.second->info);
  }
  return out;
}

int RegionManager::CudaDeviceOf(const RegionCaller& caller, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find({caller.owner, name});
  if (it == regions_.end() || it->second->space != MemorySpace::kCuda) return -1;
  return it->second->device;
}

absl::StatusOr<RegionSlice> RegionManager::Resolve(const RegionCaller& caller,
                                                   const std::string& field,
                                                   const std::string& name, uint64_t offset,
                                                   uint64_t byte_size) const {
  std::shared_ptr<Region> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find({caller.owner, name});
    if (it == regions_.end()) {
      return absl::NotFoundError(
          absl::StrCat(field, ".region_name: region '", name, "' is not registered"));
    }
    region = it->second;
  }
  if (!SliceFits(offset, byte_size, region->size)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": offset ", offset, " + byte_size ",
                                                   byte_size, " is outside region '", name, "' of ",
                                                   region->size, " bytes"));
  }
  RegionSlice s;
  s.data = region->base + offset;
  s.size = byte_size;
  s.space = region->space;
  s.device = region->device;
  s.kind = region->kind;
  s.writable = region->writable;
  s.keepalive = std::move(region);
  return s;
}

absl::StatusOr<RegionSlice> RegionManager::ResolveIpc(const RegionCaller& caller,
                                                      const std::string& field,
                                                      const std::string& raw_handle, int device_id,
                                                      const std::string& device_uuid,
                                                      uint64_t offset, uint64_t byte_size) {
  if (offset > UINT64_MAX - byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": offset + byte_size overflows"));
  }
  // Per owner: a handle one client opened is not usable by another through the cache.
  const std::string cache_key =
      absl::StrCat(caller.owner, "|", raw_handle, "|", device_uuid, "|", device_id);
  std::shared_ptr<Region> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ipc_cache_.size(); ++i) {
      if (ipc_cache_[i].first == cache_key) {
        region = ipc_cache_[i].second;
        // Most recently used last.
        std::rotate(ipc_cache_.begin() + i, ipc_cache_.begin() + i + 1, ipc_cache_.end());
        break;
      }
    }
  }
  if (region == nullptr) {
    absl::Status usable = CudaIpcUsable();
    if (!usable.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(field, ": ", usable.message()));
    }
    auto device = ResolveCudaDevice(device_uuid, device_id);
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat(field, ".", device.status().message()));
    }
    auto mapping = OpenIpc(raw_handle, *device);
    if (!mapping.ok()) {
      return absl::Status(mapping.status().code(),
                          absl::StrCat(field, ": ", mapping.status().message()));
    }
    region = std::make_shared<Region>();
    region->base = static_cast<uint8_t*>((*mapping)->ptr);
    region->ipc = std::move(*mapping);
    region->space = MemorySpace::kCuda;
    region->device = *device;
    region->kind = HandleKind::kCudaIpc;
    std::vector<std::shared_ptr<Region>> evicted;
    std::lock_guard<std::mutex> lock(mu_);
    ipc_cache_.emplace_back(cache_key, region);
    while (static_cast<int>(ipc_cache_.size()) > options_.max_cached_ipc_handles) {
      evicted.push_back(std::move(ipc_cache_.front().second));
      ipc_cache_.erase(ipc_cache_.begin());
    }
  }
  RegionSlice s;
  s.data = region->base + offset;
  s.size = byte_size;
  s.space = MemorySpace::kCuda;
  s.device = region->device;
  s.kind = HandleKind::kCudaIpc;
  s.keepalive = std::move(region);
  return s;
}

}  // namespace spattn
