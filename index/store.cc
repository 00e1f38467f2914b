#include "index/store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/utilities/backup_engine.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "index/crc32c.h"
#include "index/record_codec.h"
#include "index/validate.h"
#include "kernels/status_macros.h"

namespace spattn {
namespace {

using index::CurrentRecord;
using index::HeadConfigRecord;
using index::ModelRecord;
using index::TensorRecordHeader;
using index::VersionRecord;

constexpr uint32_t kSchemaVersion = 1;

constexpr char kModelsCf[] = "models";
constexpr char kHeadConfigsCf[] = "head_configs";
constexpr char kCentroidsCf[] = "centroids";
constexpr char kClassifiersCf[] = "classifiers";
constexpr char kPublishCf[] = "publish";

// ---- Keys (DESIGN §5). Model ids never contain '/', so "m/{model}/" prefixes are unambiguous.

std::string ModelKey(absl::string_view model) { return absl::StrCat("m/", model); }
std::string ModelPrefix(absl::string_view model) { return absl::StrCat("m/", model, "/"); }
std::string CurrentKey(absl::string_view model) { return absl::StrCat("m/", model, "/current"); }
std::string VersionsPrefix(absl::string_view model) { return absl::StrCat("m/", model, "/v/"); }
std::string VersionKey(absl::string_view model, uint64_t version) {
  return absl::StrFormat("m/%s/v/%016x", model, version);
}
std::string VersionPrefix(absl::string_view model, uint64_t version) {
  return absl::StrCat(VersionKey(model, version), "/");
}
std::string LayerPrefix(absl::string_view model, uint64_t version, uint32_t layer) {
  return absl::StrCat(VersionPrefix(model, version), absl::StrFormat("l/%04d/", layer));
}
std::string RowKey(absl::string_view model, uint64_t version, uint32_t layer, uint32_t head) {
  return absl::StrCat(VersionPrefix(model, version), absl::StrFormat("l/%04d/h/%04d", layer, head));
}
// A head config's row: RowKey, plus "/t/<min_tokens>" for a length bucket (min_tokens > 0).
std::string ConfigRowKey(absl::string_view model, uint64_t version, const v1::HeadConfig& c) {
  std::string k = RowKey(model, version, c.layer(), c.head());
  if (c.min_tokens() > 0) absl::StrAppend(&k, absl::StrFormat("/t/%010u", c.min_tokens()));
  return k;
}
std::string TensorRowKey(absl::string_view model, uint64_t version, const v1::TensorKey& key) {
  std::string k = RowKey(model, version, key.layer(), key.head());
  if (key.kind() == v1::TENSOR_KIND_CLASSIFIER) absl::StrAppend(&k, "/p/", key.name());
  return k;
}
// The first key after every key starting with `prefix` (prefixes here end in '/').
std::string PrefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

absl::string_view ResultLabel(const rocksdb::Status& s) {
  if (s.ok()) return "ok";
  if (s.IsNotFound()) return "not_found";
  if (s.IsCorruption()) return "corruption";
  return "error";
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": rocksdb: ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain() || s.IsIncomplete()) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

absl::Status CheckWriteVersion(uint64_t version) {
  if (version == 0) {
    return absl::InvalidArgumentError("version: must be > 0 (0 means 'published' only in reads)");
  }
  return absl::OkStatus();
}

std::string VersionName(absl::string_view model, uint64_t version) {
  return absl::StrCat("model '", model, "' version ", version);
}

absl::Status RequireOpen(const VersionRecord& rec) {
  if (rec.info().state() == v1::VERSION_STATE_OPEN) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      VersionName(rec.info().model_id(), rec.info().version()), " is ",
      v1::VersionState_Name(rec.info().state()),
      "; only OPEN versions accept writes (create a new version, optionally based on this one)"));
}

bool SameShape(const v1::Model& a, const v1::Model& b) {
  return a.num_layers() == b.num_layers() && a.num_q_heads() == b.num_q_heads() &&
         a.num_kv_heads() == b.num_kv_heads() && a.head_dim() == b.head_dim();
}

}  // namespace

struct IndexStore::Cfs {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // Index 0 is RocksDB's "default".
  rocksdb::ColumnFamilyHandle* models = nullptr;
  rocksdb::ColumnFamilyHandle* head_configs = nullptr;
  rocksdb::ColumnFamilyHandle* centroids = nullptr;
  rocksdb::ColumnFamilyHandle* classifiers = nullptr;
  rocksdb::ColumnFamilyHandle* publish = nullptr;

  rocksdb::ColumnFamilyHandle* ForKind(v1::TensorKind kind) const {
    return kind == v1::TENSOR_KIND_CENTROIDS ? centroids : classifiers;
  }
  static const char* NameForKind(v1::TensorKind kind) {
    return kind == v1::TENSOR_KIND_CENTROIDS ? kCentroidsCf : kClassifiersCf;
  }
};

// ---------------------------------------------------------------------------------------------
// TensorReader

TensorReader::~TensorReader() {
  it_.reset();
  if (snapshot_ != nullptr) db_->ReleaseSnapshot(snapshot_);
}

absl::StatusOr<bool> TensorReader::Next(StoredTensor* out) {
  while (true) {
    if (it_ == nullptr) {
      if (cfs_.empty()) return false;
      rocksdb::ReadOptions ro;
      ro.snapshot = snapshot_;
      ro.verify_checksums = true;
      ro.iterate_upper_bound = upper_slice_.get();
      it_.reset(db_->NewIterator(ro, cfs_.front().first));
      it_->Seek(prefix_);
      advance_ = false;
    } else if (advance_) {
      it_->Next();
      advance_ = false;
    }
    if (!it_->Valid() || !it_->key().starts_with(prefix_)) {
      rocksdb::Status s = it_->status();
      if (observer_) observer_("scan", cfs_.front().second, ResultLabel(s));
      if (!s.ok()) return FromRocks(s, what_);
      it_.reset();
      cfs_.erase(cfs_.begin());
      continue;
    }
    advance_ = true;
    TensorRecordHeader header;
    absl::string_view payload;
    const rocksdb::Slice value = it_->value();
    SPATTN_RETURN_IF_ERROR(DecodeRecord(absl::string_view(value.data(), value.size()),
                                        absl::StrCat(what_, " (", cfs_.front().second, " row)"),
                                        &header, &payload));
    if (payload.size() != header.byte_size() || Crc32c(payload) != header.data_crc32c()) {
      return absl::DataLossError(absl::StrCat(what_, ": ", TensorKeyName(header.key()),
                                              " payload does not match its header"));
    }
    out->key = header.key();
    out->desc = header.desc();
    out->crc32c = header.data_crc32c();
    out->data.assign(payload.data(), payload.size());
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Open / close / backup

IndexStore::IndexStore(const IndexStoreOptions& options)
    : options_(options), cfs_(std::make_unique<Cfs>()) {}

IndexStore::~IndexStore() {
  if (db_ != nullptr) {
    for (rocksdb::ColumnFamilyHandle* h : cfs_->handles) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
  }
}

absl::StatusOr<std::unique_ptr<IndexStore>> IndexStore::Open(const IndexStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("data_dir: is empty");
  if (options.keep_versions < 0) {
    return absl::InvalidArgumentError("keep_versions: must be >= 0");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir: cannot create '", options.path, "': ", ec.message()));
  }
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  db_options.IncreaseParallelism(2);
  rocksdb::ColumnFamilyOptions cf_options;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const char* name : {rocksdb::kDefaultColumnFamilyName.c_str(), kModelsCf, kHeadConfigsCf,
                           kCentroidsCf, kClassifiersCf, kPublishCf}) {
    descriptors.emplace_back(name, cf_options);
  }
  std::unique_ptr<IndexStore> store(new IndexStore(options));
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, options.path, descriptors, &store->cfs_->handles, &db);
  store->Observe("open", "all", ResultLabel(s));
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening the index database in ", options.path));
  store->db_.reset(db);
  Cfs& c = *store->cfs_;
  c.models = c.handles[1];
  c.head_configs = c.handles[2];
  c.centroids = c.handles[3];
  c.classifiers = c.handles[4];
  c.publish = c.handles[5];
  return store;
}

bool IndexStore::DatabaseExists(const std::string& data_dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(data_dir) / "CURRENT", ec);
}

absl::Status IndexStore::RestoreLatestBackup(const std::string& backup_dir,
                                             const std::string& data_dir) {
  if (backup_dir.empty()) return absl::InvalidArgumentError("restore_from: is empty");
  if (DatabaseExists(data_dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data_dir '", data_dir, "' already holds a database; restore only into an empty one"));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(backup_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("restore_from: '", backup_dir, "' is not a directory"));
  }
  rocksdb::BackupEngineReadOnly* raw = nullptr;
  rocksdb::IOStatus s = rocksdb::BackupEngineReadOnly::Open(
      rocksdb::BackupEngineOptions(backup_dir), rocksdb::Env::Default(), &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening backups in ", backup_dir));
  std::unique_ptr<rocksdb::BackupEngineReadOnly> engine(raw);
  std::vector<rocksdb::BackupInfo> infos;
  engine->GetBackupInfo(&infos);
  if (infos.empty()) {
    return absl::NotFoundError(absl::StrCat("restore_from: no backups in '", backup_dir, "'"));
  }
  const rocksdb::BackupID latest = infos.back().backup_id;
  rocksdb::Status v = engine->VerifyBackup(latest, /*verify_with_checksum=*/true);
  if (!v.ok()) return FromRocks(v, absl::StrCat("verifying backup ", latest));
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir: cannot create '", data_dir, "': ", ec.message()));
  }
  s = engine->RestoreDBFromLatestBackup(data_dir, data_dir);
  return FromRocks(s, absl::StrCat("restoring backup ", latest, " into ", data_dir));
}

absl::StatusOr<std::vector<BackupEntry>> IndexStore::ListBackups(const std::string& backup_dir) {
  if (backup_dir.empty()) return absl::InvalidArgumentError("backup_dir: is empty");
  std::error_code ec;
  if (!std::filesystem::is_directory(backup_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("backup_dir: '", backup_dir, "' is not a directory"));
  }
  rocksdb::BackupEngineReadOnly* raw = nullptr;
  rocksdb::IOStatus s = rocksdb::BackupEngineReadOnly::Open(
      rocksdb::BackupEngineOptions(backup_dir), rocksdb::Env::Default(), &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening backups in ", backup_dir));
  std::unique_ptr<rocksdb::BackupEngineReadOnly> engine(raw);
  std::vector<rocksdb::BackupInfo> infos;
  engine->GetBackupInfo(&infos);
  std::vector<BackupEntry> out;
  for (const rocksdb::BackupInfo& i : infos) {
    out.push_back({i.backup_id, i.size, i.timestamp});
  }
  return out;
}

absl::StatusOr<BackupEntry> IndexStore::Backup(const std::string& backup_dir) {
  if (backup_dir.empty()) return absl::InvalidArgumentError("backup_dir: is empty");
  absl::MutexLock lock(&backup_mu_);
  std::error_code ec;
  std::filesystem::create_directories(backup_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("backup_dir: cannot create '", backup_dir, "': ", ec.message()));
  }
  rocksdb::BackupEngineOptions engine_options(backup_dir);
  engine_options.sync = true;
  rocksdb::BackupEngine* raw = nullptr;
  rocksdb::IOStatus s = rocksdb::BackupEngine::Open(engine_options, rocksdb::Env::Default(), &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening backups in ", backup_dir));
  std::unique_ptr<rocksdb::BackupEngine> engine(raw);
  rocksdb::CreateBackupOptions create;
  create.flush_before_backup = true;
  rocksdb::BackupID id = 0;
  s = engine->CreateNewBackup(create, db_.get(), &id);
  Observe("backup", "all", ResultLabel(s));
  if (!s.ok()) return FromRocks(s, absl::StrCat("backing up into ", backup_dir));
  rocksdb::BackupInfo info;
  rocksdb::Status st = engine->GetBackupInfo(id, &info);
  if (!st.ok()) return FromRocks(st, "reading the new backup's info");
  return BackupEntry{info.backup_id, info.size, info.timestamp};
}

void IndexStore::SetPublishListener(PublishListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

// ---------------------------------------------------------------------------------------------
// Helpers

void IndexStore::Observe(absl::string_view op, absl::string_view cf,
                         absl::string_view result) const {
  if (options_.op_observer) options_.op_observer(op, cf, result);
}

absl::Status IndexStore::Write(const char* cf, rocksdb::WriteBatch* batch, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, batch);
  Observe("write", cf, ResultLabel(s));
  return FromRocks(s, absl::StrCat("writing ", cf));
}

absl::Status IndexStore::ReadRecord(rocksdb::ColumnFamilyHandle* cf, const char* cf_name,
                                    const std::string& key, const rocksdb::Snapshot* snapshot,
                                    absl::string_view what,
                                    google::protobuf::MessageLite* record) const {
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.verify_checksums = true;
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(ro, cf, key, &value);
  Observe("get", cf_name, ResultLabel(s));
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, " not found"));
  if (!s.ok()) return FromRocks(s, what);
  return DecodeRecord(absl::string_view(value.data(), value.size()), what, record, nullptr);
}

absl::StatusOr<ModelRecord> IndexStore::LoadModel(absl::string_view model_id,
                                                  const rocksdb::Snapshot* snapshot) const {
  ModelRecord rec;
  SPATTN_RETURN_IF_ERROR(ReadRecord(cfs_->models, kModelsCf, ModelKey(model_id), snapshot,
                                    absl::StrCat("model '", model_id, "'"), &rec));
  return rec;
}

absl::StatusOr<VersionRecord> IndexStore::LoadVersion(absl::string_view model_id, uint64_t version,
                                                      const rocksdb::Snapshot* snapshot) const {
  VersionRecord rec;
  SPATTN_RETURN_IF_ERROR(ReadRecord(cfs_->publish, kPublishCf, VersionKey(model_id, version),
                                    snapshot, VersionName(model_id, version), &rec));
  return rec;
}

absl::StatusOr<CurrentVersion> IndexStore::LoadCurrent(absl::string_view model_id,
                                                       const rocksdb::Snapshot* snapshot) const {
  CurrentRecord rec;
  absl::Status s = ReadRecord(cfs_->publish, kPublishCf, CurrentKey(model_id), snapshot,
                              absl::StrCat("published pointer of model '", model_id, "'"), &rec);
  if (absl::IsNotFound(s)) return CurrentVersion{};
  if (!s.ok()) return s;
  return CurrentVersion{rec.version(), rec.published_unix_ms()};
}

absl::StatusOr<uint64_t> IndexStore::ResolveVersion(absl::string_view model_id, uint64_t version,
                                                    const rocksdb::Snapshot* snapshot) const {
  if (version != 0) return version;
  SPATTN_ASSIGN_OR_RETURN(CurrentVersion current, LoadCurrent(model_id, snapshot));
  if (current.version == 0) {
    return absl::NotFoundError(
        absl::StrCat("model '", model_id, "' has no published version (version 0 = published)"));
  }
  return current.version;
}

absl::StatusOr<bool> IndexStore::HasVersions(absl::string_view model_id) const {
  const std::string prefix = VersionsPrefix(model_id);
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_->publish));
  it->Seek(prefix);
  const bool found = it->Valid() && it->key().starts_with(prefix);
  Observe("scan", kPublishCf, ResultLabel(it->status()));
  SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), "listing versions"));
  return found;
}

// ---------------------------------------------------------------------------------------------
// Models

absl::StatusOr<PutModelResult> IndexStore::PutModel(const v1::Model& model) {
  SPATTN_RETURN_IF_ERROR(ValidateModel(model));
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ModelRecord> existing = LoadModel(model.model_id(), nullptr);
  if (!existing.ok() && !absl::IsNotFound(existing.status())) return existing.status();
  ModelRecord rec;
  rec.set_schema_version(kSchemaVersion);
  *rec.mutable_model() = model;
  PutModelResult result;
  if (existing.ok()) {
    const v1::Model& old = existing->model();
    if (!SameShape(old, model)) {
      SPATTN_ASSIGN_OR_RETURN(bool has_versions, HasVersions(model.model_id()));
      if (has_versions) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model: layers/heads/head_dim of model '", model.model_id(),
            "' cannot change while it has versions (delete them or use a new model_id)"));
      }
    }
    rec.mutable_model()->set_created_unix_ms(old.created_unix_ms());
    rec.set_next_version(existing->next_version());
  } else {
    rec.mutable_model()->set_created_unix_ms(NowMs());
    rec.set_next_version(1);
    result.created = true;
  }
  rocksdb::WriteBatch batch;
  batch.Put(cfs_->models, ModelKey(model.model_id()), EncodeRecord(rec));
  SPATTN_RETURN_IF_ERROR(Write(kModelsCf, &batch, options_.sync_writes));
  result.model = rec.model();
  return result;
}

absl::StatusOr<v1::Model> IndexStore::GetModel(absl::string_view model_id) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_ASSIGN_OR_RETURN(ModelRecord rec, LoadModel(model_id, nullptr));
  return rec.model();
}

absl::StatusOr<std::vector<v1::Model>> IndexStore::ListModels() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_->models));
  std::vector<v1::Model> out;
  for (it->Seek("m/"); it->Valid() && it->key().starts_with("m/"); it->Next()) {
    ModelRecord rec;
    const rocksdb::Slice v = it->value();
    SPATTN_RETURN_IF_ERROR(
        DecodeRecord(absl::string_view(v.data(), v.size()), "model record", &rec, nullptr));
    out.push_back(rec.model());
  }
  Observe("scan", kModelsCf, ResultLabel(it->status()));
  SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), "listing models"));
  return out;
}

absl::Status IndexStore::DeleteModel(absl::string_view model_id, bool force) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  absl::MutexLock lock(&mu_);
  SPATTN_RETURN_IF_ERROR(LoadModel(model_id, nullptr).status());
  SPATTN_ASSIGN_OR_RETURN(bool has_versions, HasVersions(model_id));
  if (has_versions && !force) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model_id, "' has versions; delete them first or set force"));
  }
  const std::string begin = ModelPrefix(model_id);
  const std::string end = PrefixEnd(begin);
  rocksdb::WriteBatch batch;
  batch.Delete(cfs_->models, ModelKey(model_id));
  for (rocksdb::ColumnFamilyHandle* cf :
       {cfs_->publish, cfs_->head_configs, cfs_->centroids, cfs_->classifiers}) {
    batch.DeleteRange(cf, begin, end);
  }
  return Write(kModelsCf, &batch, /*sync=*/true);
}

// ---------------------------------------------------------------------------------------------
// Versions

absl::StatusOr<v1::VersionInfo> IndexStore::CreateVersion(absl::string_view model_id,
                                                          uint64_t base_version,
                                                          absl::string_view description) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  if (description.size() > kMaxDescriptionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("description: longer than ", kMaxDescriptionBytes, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, nullptr));
  const uint64_t version = model.next_version();
  model.set_next_version(version + 1);

  VersionRecord rec;
  rec.set_schema_version(kSchemaVersion);
  rec.set_base_version(base_version);
  v1::VersionInfo* info = rec.mutable_info();
  info->set_model_id(std::string(model_id));
  info->set_version(version);
  info->set_state(v1::VERSION_STATE_OPEN);
  info->set_description(std::string(description));
  info->set_created_unix_ms(NowMs());

  rocksdb::WriteBatch batch;
  if (base_version != 0) {
    absl::StatusOr<VersionRecord> base = LoadVersion(model_id, base_version, nullptr);
    if (absl::IsNotFound(base.status())) {
      return absl::NotFoundError(
          absl::StrCat("base_version: ", VersionName(model_id, base_version), " not found"));
    }
    SPATTN_RETURN_IF_ERROR(base.status());
    // Copy every row under the new version's prefix, verifying each (a corrupt base is refused
    // rather than propagated).
    const std::string from = VersionPrefix(model_id, base_version);
    const std::string to = VersionPrefix(model_id, version);
    const std::string upper = PrefixEnd(from);
    const rocksdb::Slice upper_slice(upper);
    for (auto [cf, name] :
         {std::pair{cfs_->head_configs, kHeadConfigsCf}, std::pair{cfs_->centroids, kCentroidsCf},
          std::pair{cfs_->classifiers, kClassifiersCf}}) {
      rocksdb::ReadOptions ro;
      ro.verify_checksums = true;
      ro.iterate_upper_bound = &upper_slice;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf));
      for (it->Seek(from); it->Valid() && it->key().starts_with(from); it->Next()) {
        const rocksdb::Slice v = it->value();
        const absl::string_view value(v.data(), v.size());
        const std::string what = absl::StrCat("base ", VersionName(model_id, base_version));
        if (cf == cfs_->head_configs) {
          HeadConfigRecord hc;
          SPATTN_RETURN_IF_ERROR(DecodeRecord(value, what, &hc, nullptr));
          info->set_num_head_configs(info->num_head_configs() + 1);
        } else {
          TensorRecordHeader th;
          SPATTN_RETURN_IF_ERROR(DecodeRecord(value, what, &th, nullptr));
          info->set_num_tensors(info->num_tensors() + 1);
          info->set_tensor_bytes(info->tensor_bytes() + th.byte_size());
        }
        const rocksdb::Slice k = it->key();
        std::string key = to;
        key.append(k.data() + from.size(), k.size() - from.size());
        batch.Put(cf, key, v);
      }
      Observe("scan", name, ResultLabel(it->status()));
      SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), "copying the base version"));
    }
  }
  batch.Put(cfs_->models, ModelKey(model_id), EncodeRecord(model));
  batch.Put(cfs_->publish, VersionKey(model_id, version), EncodeRecord(rec));
  SPATTN_RETURN_IF_ERROR(Write(kPublishCf, &batch, options_.sync_writes));
  return rec.info();
}

absl::StatusOr<uint64_t> IndexStore::PutHeadConfigs(
    absl::string_view model_id, uint64_t version,
    const google::protobuf::RepeatedPtrField<v1::HeadConfig>& configs) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  absl::MutexLock lock(&mu_);
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, nullptr));
  SPATTN_ASSIGN_OR_RETURN(VersionRecord rec, LoadVersion(model_id, version, nullptr));
  SPATTN_RETURN_IF_ERROR(RequireOpen(rec));
  std::map<std::string, const v1::HeadConfig*> rows;  // Later duplicates win.
  for (int i = 0; i < configs.size(); ++i) {
    SPATTN_RETURN_IF_ERROR(
        ValidateHeadConfig(model.model(), configs[i], absl::StrCat("configs[", i, "]")));
    rows[ConfigRowKey(model_id, version, configs[i])] = &configs[i];
  }
  rocksdb::WriteBatch batch;
  uint64_t added = 0;
  for (const auto& [key, config] : rows) {
    rocksdb::PinnableSlice old;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cfs_->head_configs, key, &old);
    Observe("get", kHeadConfigsCf, ResultLabel(s));
    if (s.IsNotFound()) {
      ++added;
    } else if (!s.ok()) {
      return FromRocks(s, "reading a head config");
    }
    HeadConfigRecord hc;
    hc.set_schema_version(kSchemaVersion);
    *hc.mutable_config() = *config;
    batch.Put(cfs_->head_configs, key, EncodeRecord(hc));
  }
  rec.mutable_info()->set_num_head_configs(rec.info().num_head_configs() + added);
  batch.Put(cfs_->publish, VersionKey(model_id, version), EncodeRecord(rec));
  SPATTN_RETURN_IF_ERROR(Write(kHeadConfigsCf, &batch, options_.sync_writes));
  return static_cast<uint64_t>(rows.size());
}

absl::Status IndexStore::CheckTensorHeader(absl::string_view model_id, uint64_t version,
                                           const v1::TensorKey& key, const v1::TensorDesc& desc,
                                           uint64_t total_bytes) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, nullptr));
  SPATTN_ASSIGN_OR_RETURN(VersionRecord rec, LoadVersion(model_id, version, nullptr));
  SPATTN_RETURN_IF_ERROR(RequireOpen(rec));
  return ValidateTensorHeader(model.model(), key, desc, total_bytes);
}

absl::StatusOr<uint32_t> IndexStore::PutTensor(absl::string_view model_id, uint64_t version,
                                               const v1::TensorKey& key, const v1::TensorDesc& desc,
                                               absl::string_view data) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  // The expensive checks (NaN scan, crc, encoding) run before taking the write lock.
  SPATTN_ASSIGN_OR_RETURN(ModelRecord checked, LoadModel(model_id, nullptr));
  SPATTN_RETURN_IF_ERROR(ValidateTensorHeader(checked.model(), key, desc, data.size()));
  SPATTN_RETURN_IF_ERROR(CheckFiniteFp32(data, TensorKeyName(key)));
  TensorRecordHeader header;
  header.set_schema_version(kSchemaVersion);
  *header.mutable_key() = key;
  header.mutable_desc()->set_dtype(desc.dtype());
  *header.mutable_desc()->mutable_shape() = desc.shape();
  header.set_byte_size(data.size());
  header.set_data_crc32c(Crc32c(data));
  const std::string value = EncodeRecord(header, data);
  const std::string row_key = TensorRowKey(model_id, version, key);
  rocksdb::ColumnFamilyHandle* cf = cfs_->ForKind(key.kind());
  const char* cf_name = Cfs::NameForKind(key.kind());

  absl::MutexLock lock(&mu_);
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, nullptr));
  if (!SameShape(model.model(), checked.model())) {
    return absl::AbortedError(absl::StrCat("model '", model_id, "' changed during the upload"));
  }
  SPATTN_ASSIGN_OR_RETURN(VersionRecord rec, LoadVersion(model_id, version, nullptr));
  SPATTN_RETURN_IF_ERROR(RequireOpen(rec));
  v1::VersionInfo* info = rec.mutable_info();
  rocksdb::PinnableSlice old;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf, row_key, &old);
  Observe("get", cf_name, ResultLabel(s));
  if (s.IsNotFound()) {
    info->set_num_tensors(info->num_tensors() + 1);
  } else if (s.ok()) {
    TensorRecordHeader old_header;
    // A corrupt old row is being replaced anyway; its size only feeds the OPEN-version estimate
    // (SealVersion recounts).
    if (DecodeRecord(absl::string_view(old.data(), old.size()), "old tensor", &old_header, nullptr)
            .ok()) {
      info->set_tensor_bytes(info->tensor_bytes() -
                             std::min(info->tensor_bytes(), old_header.byte_size()));
    }
  } else {
    return FromRocks(s, "reading a tensor");
  }
  info->set_tensor_bytes(info->tensor_bytes() + data.size());
  rocksdb::WriteBatch batch;
  batch.Put(cf, row_key, value);
  batch.Put(cfs_->publish, VersionKey(model_id, version), EncodeRecord(rec));
  SPATTN_RETURN_IF_ERROR(Write(cf_name, &batch, /*sync=*/false));
  return header.data_crc32c();
}

absl::Status IndexStore::Sync() {
  if (!options_.sync_writes) return absl::OkStatus();
  rocksdb::Status s = db_->SyncWAL();
  Observe("sync", "all", ResultLabel(s));
  return FromRocks(s, "syncing the WAL");
}

absl::StatusOr<v1::VersionInfo> IndexStore::SealVersion(absl::string_view model_id,
                                                        uint64_t version) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  absl::MutexLock lock(&mu_);
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model_rec, LoadModel(model_id, nullptr));
  SPATTN_ASSIGN_OR_RETURN(VersionRecord rec, LoadVersion(model_id, version, nullptr));
  // Sealing is idempotent: a sealed version stays as it is.
  if (rec.info().state() != v1::VERSION_STATE_OPEN) return rec.info();
  const v1::Model& model = model_rec.model();

  // Recount and verify every row, so a sealed version is known intact and its sizes exact.
  const std::string what = VersionName(model_id, version);
  const std::string prefix = VersionPrefix(model_id, version);
  const std::string upper = PrefixEnd(prefix);
  const rocksdb::Slice upper_slice(upper);
  std::map<std::pair<uint32_t, uint32_t>, v1::MethodConfig> methods;  // (layer, q head)
  std::map<std::pair<uint32_t, uint32_t>, int64_t> centroids;         // (layer, kv head) -> C
  std::set<std::pair<uint32_t, uint32_t>> classifiers;                // (layer, q head)
  uint64_t num_configs = 0, num_tensors = 0, tensor_bytes = 0;
  for (auto [cf, name] :
       {std::pair{cfs_->head_configs, kHeadConfigsCf}, std::pair{cfs_->centroids, kCentroidsCf},
        std::pair{cfs_->classifiers, kClassifiersCf}}) {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const rocksdb::Slice v = it->value();
      const absl::string_view value(v.data(), v.size());
      if (cf == cfs_->head_configs) {
        HeadConfigRecord hc;
        SPATTN_RETURN_IF_ERROR(DecodeRecord(value, what, &hc, nullptr));
        methods[{hc.config().layer(), hc.config().head()}] = hc.config().method();
        ++num_configs;
      } else {
        TensorRecordHeader th;
        absl::string_view payload;
        SPATTN_RETURN_IF_ERROR(DecodeRecord(value, what, &th, &payload));
        if (payload.size() != th.byte_size() || Crc32c(payload) != th.data_crc32c()) {
          return absl::DataLossError(absl::StrCat(what, ": ", TensorKeyName(th.key()),
                                                  " payload does not match its header"));
        }
        if (cf == cfs_->centroids) {
          centroids[{th.key().layer(), th.key().head()}] = th.desc().shape(0);
        } else {
          classifiers.insert({th.key().layer(), th.key().head()});
        }
        ++num_tensors;
        tensor_bytes += th.byte_size();
      }
    }
    Observe("scan", name, ResultLabel(it->status()));
    SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("verifying ", what)));
  }

  // Saap heads are only servable with their centroids and classifier: refuse to seal without.
  const uint32_t group = model.num_q_heads() / model.num_kv_heads();
  const bool default_saap = model.default_method().method() == v1::METHOD_SAAP;
  for (uint32_t layer = 0; layer < model.num_layers(); ++layer) {
    for (uint32_t head = 0; head < model.num_q_heads(); ++head) {
      auto m = methods.find({layer, head});
      const v1::MethodConfig* method = nullptr;
      if (m != methods.end()) {
        method = &m->second;
      } else if (default_saap) {
        method = &model.default_method();
      }
      if (method == nullptr || method->method() != v1::METHOD_SAAP) continue;
      SPATTN_ASSIGN_OR_RETURN(MethodConfig parsed, MethodConfigFromProto(*method, "method"));
      auto c = centroids.find({layer, head / group});
      if (c == centroids.end() || c->second != parsed.saap.num_centroids) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot seal ", what, ": layer ", layer, " head ", head, " uses saap with ",
            parsed.saap.num_centroids, " centroids but centroids(layer=", layer,
            ", kv_head=", head / group, ") ",
            c == centroids.end() ? "are missing" : absl::StrCat("have ", c->second, " rows")));
      }
      if (classifiers.count({layer, head}) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot seal ", what, ": layer ", layer, " head ", head,
                         " uses saap but has no classifier parameters"));
      }
    }
  }

  v1::VersionInfo* info = rec.mutable_info();
  info->set_state(v1::VERSION_STATE_STAGED);
  info->set_num_head_configs(num_configs);
  info->set_num_tensors(num_tensors);
  info->set_tensor_bytes(tensor_bytes);
  rec.set_sealed_unix_ms(NowMs());
  rocksdb::WriteBatch batch;
  batch.Put(cfs_->publish, VersionKey(model_id, version), EncodeRecord(rec));
  SPATTN_RETURN_IF_ERROR(Write(kPublishCf, &batch, /*sync=*/true));
  SPATTN_RETURN_IF_ERROR(ApplyRetention(std::string(model_id)));
  return rec.info();
}

absl::StatusOr<PublishResult> IndexStore::PublishVersion(absl::string_view model_id,
                                                         uint64_t version,
                                                         uint64_t expected_current_version) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  absl::MutexLock lock(&mu_);
  SPATTN_RETURN_IF_ERROR(LoadModel(model_id, nullptr).status());
  SPATTN_ASSIGN_OR_RETURN(VersionRecord rec, LoadVersion(model_id, version, nullptr));
  SPATTN_ASSIGN_OR_RETURN(CurrentVersion current, LoadCurrent(model_id, nullptr));
  if (current.version != expected_current_version) {
    return absl::AbortedError(absl::StrCat(
        "publish of ", VersionName(model_id, version), " lost: expected_current_version is ",
        expected_current_version, " but the current version is ", current.version));
  }
  PublishResult result;
  result.previous_version = current.version;
  if (current.version == version) {  // Already published: nothing changes, no event.
    result.published = rec.info();
    return result;
  }
  if (rec.info().state() == v1::VERSION_STATE_OPEN) {
    return absl::FailedPreconditionError(
        absl::StrCat(VersionName(model_id, version), " is OPEN; seal it before publishing"));
  }
  const int64_t now = NowMs();
  rocksdb::WriteBatch batch;
  rec.mutable_info()->set_state(v1::VERSION_STATE_PUBLISHED);
  rec.mutable_info()->set_published_unix_ms(now);
  batch.Put(cfs_->publish, VersionKey(model_id, version), EncodeRecord(rec));
  if (current.version != 0) {
    absl::StatusOr<VersionRecord> old = LoadVersion(model_id, current.version, nullptr);
    if (old.ok()) {
      old->mutable_info()->set_state(v1::VERSION_STATE_RETIRED);
      batch.Put(cfs_->publish, VersionKey(model_id, current.version), EncodeRecord(*old));
    } else if (!absl::IsNotFound(old.status())) {
      return old.status();
    }
  }
  CurrentRecord cur;
  cur.set_schema_version(kSchemaVersion);
  cur.set_version(version);
  cur.set_published_unix_ms(now);
  batch.Put(cfs_->publish, CurrentKey(model_id), EncodeRecord(cur));
  // Manifest states and the current pointer land together and durably, or not at all.
  SPATTN_RETURN_IF_ERROR(Write(kPublishCf, &batch, /*sync=*/true));
  if (listener_) listener_(std::string(model_id), version, now);
  // Retention failing does not undo the publish; the next publish or seal retries it.
  ApplyRetention(std::string(model_id)).IgnoreError();
  result.published = rec.info();
  return result;
}

absl::Status IndexStore::ApplyRetention(const std::string& model_id) {
  if (options_.keep_versions <= 0) return absl::OkStatus();
  SPATTN_ASSIGN_OR_RETURN(CurrentVersion current, LoadCurrent(model_id, nullptr));
  const std::string prefix = VersionsPrefix(model_id);
  std::vector<std::pair<uint64_t, v1::VersionState>> versions;
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_->publish));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    VersionRecord rec;
    const rocksdb::Slice v = it->value();
    SPATTN_RETURN_IF_ERROR(
        DecodeRecord(absl::string_view(v.data(), v.size()), "version manifest", &rec, nullptr));
    // OPEN versions are never deleted and do not count against keep_versions.
    if (rec.info().state() != v1::VERSION_STATE_OPEN) {
      versions.emplace_back(rec.info().version(), rec.info().state());
    }
  }
  Observe("scan", kPublishCf, ResultLabel(it->status()));
  SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), "listing versions"));
  if (versions.size() <= static_cast<size_t>(options_.keep_versions)) return absl::OkStatus();
  std::sort(versions.begin(), versions.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  rocksdb::WriteBatch batch;
  bool any = false;
  for (size_t i = options_.keep_versions; i < versions.size(); ++i) {
    const uint64_t version = versions[i].first;
    if (version == current.version) continue;
    const std::string begin = VersionPrefix(model_id, version);
    const std::string end = PrefixEnd(begin);
    batch.Delete(cfs_->publish, VersionKey(model_id, version));
    for (rocksdb::ColumnFamilyHandle* cf :
         {cfs_->head_configs, cfs_->centroids, cfs_->classifiers}) {
      batch.DeleteRange(cf, begin, end);
    }
    any = true;
  }
  if (!any) return absl::OkStatus();
  return Write(kPublishCf, &batch, options_.sync_writes);
}

absl::StatusOr<v1::ListVersionsResponse> IndexStore::ListVersions(absl::string_view model_id) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~Release() { db->ReleaseSnapshot(s); }
  } release{db_.get(), snapshot};
  SPATTN_RETURN_IF_ERROR(LoadModel(model_id, snapshot).status());
  SPATTN_ASSIGN_OR_RETURN(CurrentVersion current, LoadCurrent(model_id, snapshot));
  v1::ListVersionsResponse out;
  out.set_published_version(current.version);
  const std::string prefix = VersionsPrefix(model_id);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_->publish));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    VersionRecord rec;
    const rocksdb::Slice v = it->value();
    SPATTN_RETURN_IF_ERROR(
        DecodeRecord(absl::string_view(v.data(), v.size()),
                     absl::StrCat("a version manifest of model '", model_id, "'"), &rec, nullptr));
    *out.add_versions() = rec.info();
  }
  Observe("scan", kPublishCf, ResultLabel(it->status()));
  SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), "listing versions"));
  return out;
}

absl::Status IndexStore::DeleteVersion(absl::string_view model_id, uint64_t version) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(CheckWriteVersion(version));
  absl::MutexLock lock(&mu_);
  SPATTN_RETURN_IF_ERROR(LoadModel(model_id, nullptr).status());
  SPATTN_RETURN_IF_ERROR(LoadVersion(model_id, version, nullptr).status());
  SPATTN_ASSIGN_OR_RETURN(CurrentVersion current, LoadCurrent(model_id, nullptr));
  if (current.version == version) {
    return absl::FailedPreconditionError(absl::StrCat(
        VersionName(model_id, version), " is published; publish another version first"));
  }
  const std::string begin = VersionPrefix(model_id, version);
  const std::string end = PrefixEnd(begin);
  rocksdb::WriteBatch batch;
  batch.Delete(cfs_->publish, VersionKey(model_id, version));
  for (rocksdb::ColumnFamilyHandle* cf : {cfs_->head_configs, cfs_->centroids, cfs_->classifiers}) {
    batch.DeleteRange(cf, begin, end);
  }
  return Write(kPublishCf, &batch, /*sync=*/true);
}

// ---------------------------------------------------------------------------------------------
// Reads

absl::StatusOr<v1::GetHeadConfigsResponse> IndexStore::GetHeadConfigs(
    absl::string_view model_id, uint64_t version, std::optional<uint32_t> layer) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~Release() { db->ReleaseSnapshot(s); }
  } release{db_.get(), snapshot};
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, snapshot));
  if (layer.has_value() && *layer >= model.model().num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer: ", *layer, " is out of range [0, ", model.model().num_layers(), ")"));
  }
  SPATTN_ASSIGN_OR_RETURN(uint64_t resolved, ResolveVersion(model_id, version, snapshot));
  SPATTN_RETURN_IF_ERROR(LoadVersion(model_id, resolved, snapshot).status());
  v1::GetHeadConfigsResponse out;
  out.set_version(resolved);
  *out.mutable_model() = model.model();
  const std::string prefix = layer.has_value() ? LayerPrefix(model_id, resolved, *layer)
                                               : VersionPrefix(model_id, resolved);
  const std::string upper = PrefixEnd(prefix);
  const rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.verify_checksums = true;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_->head_configs));
  const std::string what = absl::StrCat("head configs of ", VersionName(model_id, resolved));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    HeadConfigRecord rec;
    const rocksdb::Slice v = it->value();
    SPATTN_RETURN_IF_ERROR(
        DecodeRecord(absl::string_view(v.data(), v.size()), what, &rec, nullptr));
    *out.add_configs() = std::move(*rec.mutable_config());
  }
  Observe("scan", kHeadConfigsCf, ResultLabel(it->status()));
  SPATTN_RETURN_IF_ERROR(FromRocks(it->status(), what));
  return out;
}

absl::StatusOr<std::unique_ptr<TensorReader>> IndexStore::ReadTensors(
    absl::string_view model_id, uint64_t version, v1::TensorKind kind,
    std::optional<uint32_t> layer) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  if (kind != v1::TENSOR_KIND_UNSPECIFIED && kind != v1::TENSOR_KIND_CENTROIDS &&
      kind != v1::TENSOR_KIND_CLASSIFIER) {
    return absl::InvalidArgumentError(absl::StrCat("kind: unknown value ", static_cast<int>(kind)));
  }
  std::unique_ptr<TensorReader> reader(new TensorReader());
  reader->db_ = db_.get();
  reader->snapshot_ = db_->GetSnapshot();
  reader->observer_ = options_.op_observer;
  SPATTN_ASSIGN_OR_RETURN(ModelRecord model, LoadModel(model_id, reader->snapshot_));
  if (layer.has_value() && *layer >= model.model().num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer: ", *layer, " is out of range [0, ", model.model().num_layers(), ")"));
  }
  SPATTN_ASSIGN_OR_RETURN(uint64_t resolved, ResolveVersion(model_id, version, reader->snapshot_));
  SPATTN_RETURN_IF_ERROR(LoadVersion(model_id, resolved, reader->snapshot_).status());
  reader->version_ = resolved;
  reader->what_ = absl::StrCat("tensors of ", VersionName(model_id, resolved));
  reader->prefix_ = layer.has_value() ? LayerPrefix(model_id, resolved, *layer)
                                      : VersionPrefix(model_id, resolved);
  reader->upper_ = PrefixEnd(reader->prefix_);
  reader->upper_slice_ = std::make_unique<rocksdb::Slice>(reader->upper_);
  if (kind != v1::TENSOR_KIND_CLASSIFIER) reader->cfs_.emplace_back(cfs_->centroids, kCentroidsCf);
  if (kind != v1::TENSOR_KIND_CENTROIDS) {
    reader->cfs_.emplace_back(cfs_->classifiers, kClassifiersCf);
  }
  return reader;
}

absl::StatusOr<CurrentVersion> IndexStore::GetCurrent(absl::string_view model_id) {
  SPATTN_RETURN_IF_ERROR(ValidateModelId(model_id));
  SPATTN_RETURN_IF_ERROR(LoadModel(model_id, nullptr).status());
  return LoadCurrent(model_id, nullptr);
}

}  // namespace spattn
