// The region registry (Triton's shared-memory convention): clients register a POSIX
// shared-memory object (or a CUDA IPC allocation) once under a name, then reference slices of it
// by name + offset + byte size in many requests. The worker maps each region once and keeps the
// mapping until the region is unregistered and the last request using it has finished. Every use
// is bounds-checked. Error messages name regions, never shm keys or handle bytes.
#ifndef SPATTN_SERVER_REGIONS_H_
#define SPATTN_SERVER_REGIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/problem.h"
#include "server/request.h"

namespace spattn {

// A resolved slice of a region: valid while `keepalive` is held.
struct RegionSlice {
  std::shared_ptr<void> keepalive;
  uint8_t* data = nullptr;  // Host pointer (system regions) or device pointer (CUDA).
  uint64_t size = 0;
  MemorySpace space = MemorySpace::kHost;
  int device = 0;  // CUDA ordinal when space == kCuda.
  HandleKind kind = HandleKind::kSystemRegion;
  bool writable = true;
};

struct RegionInfoRow {
  std::string name;
  std::string kind;  // "system" or "cuda"
  std::string shm_key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  int device_id = 0;
  bool pinned = false;  // System regions page-locked for the GPU.
};

// Who registers or uses a region. Regions live in their owner's namespace: another owner can
// neither see, use nor unregister them (the same name may be registered by both).
struct RegionCaller {
  std::string owner;  // e.g. "uid:1000", "token:prefill-a"; "" in single-tenant tests.
  // >= 0: shared-memory objects must be owned by this uid (the Unix socket peer's, SO_PEERCRED).
  int64_t peer_uid = -1;
};

struct RegionManagerOptions {
  // shm keys must start with this prefix (PERMISSION_DENIED otherwise); "" = any key.
  // Default: "/spattn-".
  std::string shm_prefix = "/spattn-";
  // Most regions registered at once. Default: 1024.
  int max_regions = 1024;
  // Most raw CUDA IPC handles kept open (least recently used closed first). Default: 64.
  int max_cached_ipc_handles = 64;
  // Page-lock system regions when they are registered (cudaHostRegister), so that a GPU backend
  // copies them at full DMA speed; regions that cannot be pinned stay pageable. Set when a CUDA
  // backend serves. Default: false.
  bool pin_system_regions = false;
};

// Thread-safe: every method may be called from any thread.
class RegionManager {
 public:
  explicit RegionManager(const RegionManagerOptions& options = {});
  ~RegionManager();
  RegionManager(const RegionManager&) = delete;
  RegionManager& operator=(const RegionManager&) = delete;

  // Maps [offset, offset + byte_size) of the shm_open object `shm_key` read/write (read-only
  // when the object does not allow writing). ALREADY_EXISTS when `name` is taken, NOT_FOUND when
  // the object does not exist, INVALID_ARGUMENT when the slice is outside the object,
  // PERMISSION_DENIED when the key is outside the configured prefix, the object is not a plain
  // shared-memory file, or it is not owned by caller.peer_uid (when set).
  absl::Status RegisterSystem(const RegionCaller& caller, const std::string& name,
                              const std::string& shm_key, uint64_t offset, uint64_t byte_size);
  // Opens a cudaIpcMemHandle_t (64 bytes) on `device_id` (or the device with `device_uuid`).
  // FAILED_PRECONDITION when this worker has no usable GPU.
  absl::Status RegisterCuda(const RegionCaller& caller, const std::string& name,
                            const std::string& raw_handle, int device_id,
                            const std::string& device_uuid, uint64_t byte_size);
  // Unregisters `name` (NOT_FOUND when unknown) or, for "", every region. Mappings stay alive
  // until requests using them finish. Returns how many were unregistered.
  absl::StatusOr<int> Unregister(const RegionCaller& caller, const std::string& name);
  std::vector<RegionInfoRow> List(const RegionCaller& caller) const;
  // The CUDA device of registered CUDA region `name`; -1 when it is unknown or not a CUDA region.
  int CudaDeviceOf(const RegionCaller& caller, const std::string& name) const;

  // The slice [offset, offset + byte_size) of region `name`; `field` (e.g. "q.region") prefixes
  // errors. NOT_FOUND for an unknown region, INVALID_ARGUMENT when out of bounds.
  absl::StatusOr<RegionSlice> Resolve(const RegionCaller& caller, const std::string& field,
                                      const std::string& name, uint64_t offset,
                                      uint64_t byte_size) const;
  // A raw CUDA IPC handle from a request, opened once and cached by handle bytes.
  absl::StatusOr<RegionSlice> ResolveIpc(const RegionCaller& caller, const std::string& field,
                                         const std::string& raw_handle, int device_id,
                                         const std::string& device_uuid, uint64_t offset,
                                         uint64_t byte_size);

 private:
  struct Region;
  struct IpcMapping;
  // Opens `raw_handle` on `device` once per process: a handle registered as a region and also
  // sent raw shares one mapping (CUDA maps a handle once per context).
  absl::StatusOr<std::shared_ptr<IpcMapping>> OpenIpc(const std::string& raw_handle, int device);

  const RegionManagerOptions options_;
  std::mutex ipc_mu_;  // Serializes opens so one handle is never opened twice at once.
  std::map<std::string, std::weak_ptr<IpcMapping>> ipc_open_;  // Guarded by ipc_mu_.
  mutable std::mutex mu_;
  // (owner, name) -> region. Guarded by mu_.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Region>> regions_;
  // Raw IPC handles from requests, most recently used last. Guarded by mu_.
  std::vector<std::pair<std::string, std::shared_ptr<Region>>> ipc_cache_;
};

}  // namespace spattn

#endif  // SPATTN_SERVER_REGIONS_H_
