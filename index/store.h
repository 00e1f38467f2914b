// IndexStore: the index service's RocksDB storage (DESIGN §5), without gRPC.
//
// Column families `models`, `head_configs`, `centroids`, `classifiers`, `publish`; fixed-width
// keys that sort (m/{model}/v/{version:016x}/l/{layer:04d}/h/{head:04d}[/p/{name}]); every value
// framed and checksummed by record_codec.h and verified on every read (DATA_LOSS when wrong).
//
// Life of a version: CreateVersion (OPEN) -> PutHeadConfigs / PutTensor -> SealVersion (STAGED,
// rows verified and counted, immutable from now on) -> PublishVersion (one synced WriteBatch: the
// version's manifest, the previous one's RETIRED manifest and the model's current pointer). A
// reader therefore sees either the old or the new published version, never a half one.
//
// Thread-safety: all methods are thread-safe. Mutations are serialized by one mutex (so publish
// compare-and-set and the publish listener run in commit order); reads run concurrently on RocksDB
// snapshots.
#ifndef SPATTN_INDEX_STORE_H_
#define SPATTN_INDEX_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "index/storage.pb.h"
#include "spattn/v1/index_service.pb.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Iterator;
class Slice;
class Snapshot;
class WriteBatch;
}  // namespace rocksdb

namespace spattn {

// Called for every RocksDB operation: op is get|write|scan|backup|restore, cf a column family name
// (or "all"), result ok|not_found|corruption|error. Used for metrics; must be cheap.
using StoreOpObserver =
    std::function<void(absl::string_view op, absl::string_view cf, absl::string_view result)>;

// Called after each publish commits, under the store's write lock, in commit order. Must not
// block and must not call back into the store's mutating methods.
using PublishListener =
    std::function<void(const std::string& model_id, uint64_t version, int64_t published_unix_ms)>;

struct IndexStoreOptions {
  // The RocksDB directory; created when missing. Default: none (required).
  std::string path;
  // Keep this many sealed (STAGED/RETIRED/PUBLISHED) versions per model, the newest; older ones
  // are range-deleted after each seal and publish. OPEN versions and the published one are never
  // deleted. Default: 0 (keep all).
  int keep_versions = 0;
  // fsync the WAL on every write that ends a client request (publish always syncs). Default: true.
  bool sync_writes = true;
  // Default: none.
  StoreOpObserver op_observer;
};

struct PutModelResult {
  v1::Model model;
  bool created = false;
};

struct PublishResult {
  v1::VersionInfo published;
  uint64_t previous_version = 0;
};

struct CurrentVersion {
  uint64_t version = 0;  // 0: nothing published.
  int64_t published_unix_ms = 0;
};

struct StoredTensor {
  v1::TensorKey key;
  v1::TensorDesc desc;
  uint32_t crc32c = 0;  // Of `data`.
  std::string data;     // Raw little-endian fp32, row-major.
};

struct BackupEntry {
  uint32_t backup_id = 0;
  uint64_t size_bytes = 0;
  int64_t timestamp_unix = 0;
};

// Iterates the tensors of one version (centroids before classifiers, each in key order) on one
// RocksDB snapshot. Not thread-safe; must not outlive the IndexStore that made it.
class TensorReader {
 public:
  ~TensorReader();
  TensorReader(const TensorReader&) = delete;
  TensorReader& operator=(const TensorReader&) = delete;

  // Fills `out` with the next tensor, verified; false at the end. DATA_LOSS on a corrupt row.
  absl::StatusOr<bool> Next(StoredTensor* out);
  uint64_t version() const { return version_; }

 private:
  friend class IndexStore;
  TensorReader() = default;

  rocksdb::DB* db_ = nullptr;
  const rocksdb::Snapshot* snapshot_ = nullptr;
  StoreOpObserver observer_;
  std::string what_;
  std::string prefix_;
  uint64_t version_ = 0;
  std::vector<std::pair<rocksdb::ColumnFamilyHandle*, const char*>> cfs_;  // Still to read.
  std::string upper_;  // Iteration bound: the end of prefix_.
  std::unique_ptr<rocksdb::Slice> upper_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
  bool advance_ = false;  // The iterator sits on a row already returned.
};

class IndexStore {
 public:
  static absl::StatusOr<std::unique_ptr<IndexStore>> Open(const IndexStoreOptions& options);
  // Restores the latest backup in `backup_dir` into `data_dir` (after verifying its checksums).
  // FAILED_PRECONDITION when data_dir already holds a database.
  static absl::Status RestoreLatestBackup(const std::string& backup_dir,
                                          const std::string& data_dir);
  static absl::StatusOr<std::vector<BackupEntry>> ListBackups(const std::string& backup_dir);
  // True when `data_dir` holds a RocksDB database.
  static bool DatabaseExists(const std::string& data_dir);

  ~IndexStore();
  IndexStore(const IndexStore&) = delete;
  IndexStore& operator=(const IndexStore&) = delete;

  // Models. PutModel creates or updates; shape fields (layers, heads, head_dim) cannot change
  // while the model has versions (FAILED_PRECONDITION). DeleteModel refuses a model with versions
  // unless `force`.
  absl::StatusOr<PutModelResult> PutModel(const v1::Model& model);
  absl::StatusOr<v1::Model> GetModel(absl::string_view model_id);
  absl::StatusOr<std::vector<v1::Model>> ListModels();
  absl::Status DeleteModel(absl::string_view model_id, bool force);

  // Versions. Version numbers grow per model from 1 and are never reused.
  absl::StatusOr<v1::VersionInfo> CreateVersion(absl::string_view model_id, uint64_t base_version,
                                                absl::string_view description);
  // Returns the number of configs written. All or none are written.
  absl::StatusOr<uint64_t> PutHeadConfigs(
      absl::string_view model_id, uint64_t version,
      const google::protobuf::RepeatedPtrField<v1::HeadConfig>& configs);
  // The checks PutTensor makes before it has the bytes (to fail a stream early): model, version
  // OPEN, key and desc against the model, byte count.
  absl::Status CheckTensorHeader(absl::string_view model_id, uint64_t version,
                                 const v1::TensorKey& key, const v1::TensorDesc& desc,
                                 uint64_t total_bytes);
  // Validates and writes one tensor (replacing one with the same key). Unsynced: call Sync()
  // before acknowledging. Returns the crc32c of `data`.
  absl::StatusOr<uint32_t> PutTensor(absl::string_view model_id, uint64_t version,
                                     const v1::TensorKey& key, const v1::TensorDesc& desc,
                                     absl::string_view data);
  // fsyncs the WAL (when sync_writes).
  absl::Status Sync();
  absl::StatusOr<v1::VersionInfo> SealVersion(absl::string_view model_id, uint64_t version);
  // Compare-and-set: ABORTED when the current version is not `expected_current_version`.
  absl::StatusOr<PublishResult> PublishVersion(absl::string_view model_id, uint64_t version,
                                               uint64_t expected_current_version);
  absl::StatusOr<v1::ListVersionsResponse> ListVersions(absl::string_view model_id);
  absl::Status DeleteVersion(absl::string_view model_id, uint64_t version);

  // Reads. version 0 = the published version (NOT_FOUND when none).
  absl::StatusOr<v1::GetHeadConfigsResponse> GetHeadConfigs(absl::string_view model_id,
                                                            uint64_t version,
                                                            std::optional<uint32_t> layer);
  // kind TENSOR_KIND_UNSPECIFIED reads both kinds.
  absl::StatusOr<std::unique_ptr<TensorReader>> ReadTensors(absl::string_view model_id,
                                                            uint64_t version, v1::TensorKind kind,
                                                            std::optional<uint32_t> layer);
  // NOT_FOUND when the model does not exist.
  absl::StatusOr<CurrentVersion> GetCurrent(absl::string_view model_id);

  // Online backup (RocksDB BackupEngine, flushing memtables first) into `backup_dir`.
  absl::StatusOr<BackupEntry> Backup(const std::string& backup_dir);

  void SetPublishListener(PublishListener listener);
  const std::string& path() const { return options_.path; }

 private:
  struct Cfs;
  explicit IndexStore(const IndexStoreOptions& options);

  void Observe(absl::string_view op, absl::string_view cf, absl::string_view result) const;
  absl::Status Write(const char* cf, rocksdb::WriteBatch* batch, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads and decodes one row; NOT_FOUND (with `what`) when absent.
  absl::Status ReadRecord(rocksdb::ColumnFamilyHandle* cf, const char* cf_name,
                          const std::string& key, const rocksdb::Snapshot* snapshot,
                          absl::string_view what, google::protobuf::MessageLite* record) const;
  absl::StatusOr<index::ModelRecord> LoadModel(absl::string_view model_id,
                                               const rocksdb::Snapshot* snapshot) const;
  absl::StatusOr<index::VersionRecord> LoadVersion(absl::string_view model_id, uint64_t version,
                                                   const rocksdb::Snapshot* snapshot) const;
  absl::StatusOr<CurrentVersion> LoadCurrent(absl::string_view model_id,
                                             const rocksdb::Snapshot* snapshot) const;
  // version 0 -> the published one.
  absl::StatusOr<uint64_t> ResolveVersion(absl::string_view model_id, uint64_t version,
                                          const rocksdb::Snapshot* snapshot) const;
  absl::StatusOr<bool> HasVersions(absl::string_view model_id) const;
  absl::Status ApplyRetention(const std::string& model_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  IndexStoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<Cfs> cfs_;
  absl::Mutex mu_;  // Serializes mutations.
  PublishListener listener_ ABSL_GUARDED_BY(mu_);
  absl::Mutex backup_mu_;  // One BackupEngine at a time.
};

}  // namespace spattn

#endif  // SPATTN_INDEX_STORE_H_
