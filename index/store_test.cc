// IndexStore without gRPC: the key layout, the record framing, checksum corruption (bytes flipped
// through raw RocksDB read back as DATA_LOSS), version numbering and the publish listener.
#include "index/store.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index/index_server.h"
#include "index/record_codec.h"
#include "index/storage.pb.h"
#include "index/tensor_client.h"
#include "index/test_util.h"

namespace spattn {
namespace {

using testing_util::MakeCentroids;
using testing_util::MakeClassifier;
using testing_util::MakeHeadConfigs;
using testing_util::MakeModel;

std::string TmpDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<IndexStore> OpenStore(const std::string& dir, int keep = 0) {
  IndexStoreOptions options;
  options.path = dir;
  options.keep_versions = keep;
  absl::StatusOr<std::unique_ptr<IndexStore>> store = IndexStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

void PutAll(IndexStore& store, const std::vector<TensorUpload>& tensors, uint64_t version,
            const std::string& model) {
  for (const TensorUpload& t : tensors) {
    v1::TensorDesc desc;
    desc.set_dtype(v1::DATA_TYPE_FP32);
    for (int64_t d : t.shape) desc.add_shape(d);
    absl::StatusOr<uint32_t> crc = store.PutTensor(model, version, t.key, desc, t.bytes);
    ASSERT_TRUE(crc.ok()) << crc.status();
  }
}

// The model "km": 3 layers, 4 q heads, 2 kv heads, head_dim 8; v1 with configs, centroids and
// one classifier.
void Populate(IndexStore& store) {
  const v1::Model m = MakeModel("km", 3, 4, 2, 8);
  ASSERT_TRUE(store.PutModel(m).ok());
  ASSERT_TRUE(store.CreateVersion("km", 0, "first").ok());
  google::protobuf::RepeatedPtrField<v1::HeadConfig> configs;
  for (const auto& c : MakeHeadConfigs(m, 1)) *configs.Add() = c;
  ASSERT_TRUE(store.PutHeadConfigs("km", 1, configs).ok());
  PutAll(store, MakeCentroids(m, 4, 1), 1, "km");
  PutAll(store, MakeClassifier(m, 2, 3, 4, 4, 1), 1, "km");
  ASSERT_TRUE(store.Sync().ok());
}

// Raw RocksDB access with the store's column families.
class RawDb {
 public:
  explicit RawDb(const std::string& dir) {
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (const char* name :
         {"default", "models", "head_configs", "centroids", "classifiers", "publish"}) {
      cfs.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(), dir, cfs, &handles_, &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
    db_.reset(db);
  }
  ~RawDb() {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
  }
  rocksdb::ColumnFamilyHandle* cf(const std::string& name) {
    for (auto* h : handles_) {
      if (h->GetName() == name) return h;
    }
    return nullptr;
  }
  std::map<std::string, std::string> Rows(const std::string& name) {
    std::map<std::string, std::string> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(name)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      out[it->key().ToString()] = it->value().ToString();
    }
    return out;
  }
  void Put(const std::string& name, const std::string& key, const std::string& value) {
    rocksdb::Status s = db_->Put(rocksdb::WriteOptions(), cf(name), key, value);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

 private:
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::unique_ptr<rocksdb::DB> db_;
};

TEST(RecordCodecTest, EveryFlippedByteIsDetected) {
  index::TensorRecordHeader header;
  header.set_schema_version(1);
  header.mutable_key()->set_kind(v1::TENSOR_KIND_CENTROIDS);
  header.set_byte_size(16);
  const std::string payload = FloatsToBytes({1.f, 2.f, 3.f, 4.f});
  const std::string record = EncodeRecord(header, payload);
  index::TensorRecordHeader decoded;
  absl::string_view got;
  ASSERT_TRUE(DecodeRecord(record, "test", &decoded, &got).ok());
  EXPECT_EQ(got, payload);
  EXPECT_EQ(decoded.byte_size(), 16u);
  for (size_t i = 0; i < record.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = record;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::Status s = DecodeRecord(bad, "test", &decoded, &got);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i << " bit " << bit;
    }
  }
  for (size_t n = 0; n < record.size(); ++n) {
    EXPECT_EQ(DecodeRecord(record.substr(0, n), "test", &decoded, &got).code(),
              absl::StatusCode::kDataLoss)
        << "truncated to " << n;
  }
}

TEST(IndexStoreTest, KeysFollowTheDesignLayout) {
  const std::string dir = TmpDir("layout_db");
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    Populate(*store);
    ASSERT_TRUE(store->SealVersion("km", 1).ok());
    ASSERT_TRUE(store->PublishVersion("km", 1, 0).ok());
  }
  RawDb raw(dir);
  auto models = raw.Rows("models");
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models.begin()->first, "m/km");
  auto configs = raw.Rows("head_configs");
  EXPECT_EQ(configs.size(), 12u);
  EXPECT_TRUE(configs.count("m/km/v/0000000000000001/l/0002/h/0003"));
  auto centroids = raw.Rows("centroids");
  EXPECT_EQ(centroids.size(), 6u);
  EXPECT_TRUE(centroids.count("m/km/v/0000000000000001/l/0001/h/0001"));
  auto classifiers = raw.Rows("classifiers");
  EXPECT_EQ(classifiers.size(), 4u);
  EXPECT_TRUE(classifiers.count("m/km/v/0000000000000001/l/0002/h/0003/p/w0"));
  EXPECT_TRUE(classifiers.count("m/km/v/0000000000000001/l/0002/h/0003/p/b1"));
  auto publish = raw.Rows("publish");
  EXPECT_EQ(publish.size(), 2u);
  EXPECT_TRUE(publish.count("m/km/current"));
  EXPECT_TRUE(publish.count("m/km/v/0000000000000001"));
  // Values are framed records carrying schema_version 1.
  index::VersionRecord manifest;
  ASSERT_TRUE(
      DecodeRecord(publish["m/km/v/0000000000000001"], "manifest", &manifest, nullptr).ok());
  EXPECT_EQ(manifest.schema_version(), 1u);
  EXPECT_EQ(manifest.info().state(), v1::VERSION_STATE_PUBLISHED);
  EXPECT_EQ(manifest.info().num_head_configs(), 12u);
  EXPECT_EQ(manifest.info().num_tensors(), 10u);
}

// Issue 11: length buckets are their own rows ("/t/<min_tokens>" after the head's key; the
// default bucket keeps the old key), carried into versions based on this one, read back with
// their min_tokens.
TEST(IndexStoreTest, LengthBucketsAreRowsOfTheirOwn) {
  const std::string dir = TmpDir("bucket_db");
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    Populate(*store);
    google::protobuf::RepeatedPtrField<v1::HeadConfig> more;
    v1::HeadConfig* c = more.Add();
    c->set_layer(2);
    c->set_head(3);
    c->set_min_tokens(23170);
    c->set_calibrated_tokens(32768);
    c->mutable_method()->set_method(v1::METHOD_FLEX_PREFILL);
    ASSERT_TRUE(store->PutHeadConfigs("km", 1, more).ok());
    ASSERT_TRUE(store->SealVersion("km", 1).ok());
    ASSERT_TRUE(store->CreateVersion("km", 1, "based on 1").ok());
    auto got = store->GetHeadConfigs("km", 2, 2u);
    ASSERT_TRUE(got.ok()) << got.status();
    int bucketed = 0, plain = 0;
    for (const v1::HeadConfig& h : got->configs()) {
      if (h.head() != 3) continue;
      if (h.min_tokens() == 23170) {
        ++bucketed;
        EXPECT_EQ(h.method().method(), v1::METHOD_FLEX_PREFILL);
        EXPECT_EQ(h.calibrated_tokens(), 32768u);  // kept in the row, carried to version 2
      } else {
        ++plain;
        EXPECT_EQ(h.min_tokens(), 0u);
        EXPECT_EQ(h.calibrated_tokens(), 0u);  // a row written without it
      }
    }
    EXPECT_EQ(bucketed, 1);
    EXPECT_EQ(plain, 1);
  }
  RawDb raw(dir);
  auto configs = raw.Rows("head_configs");
  EXPECT_TRUE(configs.count("m/km/v/0000000000000001/l/0002/h/0003"));
  EXPECT_TRUE(configs.count("m/km/v/0000000000000001/l/0002/h/0003/t/0000023170"));
  EXPECT_TRUE(configs.count("m/km/v/0000000000000002/l/0002/h/0003/t/0000023170"));
}

// Flips one byte of a stored value (at `offset` from the end, default: inside the payload).
void FlipByte(const std::string& dir, const std::string& cf, const std::string& key,
              size_t offset_from_end = 9) {
  RawDb raw(dir);
  auto rows = raw.Rows(cf);
  ASSERT_TRUE(rows.count(key)) << key;
  std::string value = rows[key];
  value[value.size() - offset_from_end] ^= 0x20;
  raw.Put(cf, key, value);
}

TEST(IndexStoreTest, FlippedBytesReadBackAsDataLoss) {
  const std::string dir = TmpDir("corrupt_db");
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    Populate(*store);
  }
  FlipByte(dir, "centroids", "m/km/v/0000000000000001/l/0001/h/0000");
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    // Reading layer 0 is fine; layer 1 hits the bad row.
    auto reader = store->ReadTensors("km", 1, v1::TENSOR_KIND_CENTROIDS, 0);
    ASSERT_TRUE(reader.ok());
    StoredTensor t;
    int n = 0;
    while (true) {
      absl::StatusOr<bool> next = (*reader)->Next(&t);
      ASSERT_TRUE(next.ok()) << next.status();
      if (!*next) break;
      ++n;
    }
    EXPECT_EQ(n, 2);
    reader = store->ReadTensors("km", 1, v1::TENSOR_KIND_CENTROIDS, 1);
    ASSERT_TRUE(reader.ok());
    absl::StatusOr<bool> next = (*reader)->Next(&t);
    EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss) << next.status();
    // A sealed version must be intact, and a corrupt version is no base for a new one.
    EXPECT_EQ(store->SealVersion("km", 1).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(store->CreateVersion("km", 1, "").status().code(), absl::StatusCode::kDataLoss);
  }
  FlipByte(dir, "head_configs", "m/km/v/0000000000000001/l/0000/h/0002", 6);
  FlipByte(dir, "publish", "m/km/v/0000000000000001", 5);
  FlipByte(dir, "models", "m/km", 5);
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->GetModel("km").status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(store->ListModels().status().code(), absl::StatusCode::kDataLoss);
  }
  // Through the service: the same rows answer DATA_LOSS over gRPC.
  {
    RawDb raw(dir);  // Repair the model row so requests get as far as the data.
    index::ModelRecord rec;
    rec.set_schema_version(1);
    *rec.mutable_model() = MakeModel("km", 3, 4, 2, 8);
    rec.set_next_version(2);
    raw.Put("models", "m/km", EncodeRecord(rec));
  }
  IndexServerOptions options;
  options.data_dir = dir;
  auto server = IndexServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::IndexService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  v1::GetTensorsRequest get;
  get.set_model_id("km");
  get.set_version(1);
  get.set_kind(v1::TENSOR_KIND_CENTROIDS);
  EXPECT_EQ(DownloadTensors(*stub, get).status().code(), absl::StatusCode::kDataLoss);
  grpc::ClientContext ctx;
  v1::ListVersionsRequest lv;
  lv.set_model_id("km");
  v1::ListVersionsResponse lr;
  EXPECT_EQ(stub->ListVersions(&ctx, lv, &lr).error_code(), grpc::StatusCode::DATA_LOSS);
}

TEST(IndexStoreTest, VersionNumbersAreNeverReused) {
  auto store = OpenStore(TmpDir("numbers_db"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutModel(MakeModel("n", 1, 1, 1, 4)).ok());
  EXPECT_EQ(store->CreateVersion("n", 0, "")->version(), 1u);
  EXPECT_EQ(store->CreateVersion("n", 0, "")->version(), 2u);
  ASSERT_TRUE(store->DeleteVersion("n", 2).ok());
  EXPECT_EQ(store->DeleteVersion("n", 2).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->CreateVersion("n", 0, "")->version(), 3u);
  absl::StatusOr<v1::ListVersionsResponse> list = store->ListVersions("n");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->versions_size(), 2);
  EXPECT_EQ(list->versions(0).version(), 1u);
  EXPECT_EQ(list->versions(1).version(), 3u);
  // Deleting the whole model starts its numbering over.
  EXPECT_EQ(store->DeleteModel("n", false).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->DeleteModel("n", true).ok());
  EXPECT_EQ(store->ListVersions("n").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->PutModel(MakeModel("n", 1, 1, 1, 4)).ok());
  EXPECT_EQ(store->CreateVersion("n", 0, "")->version(), 1u);
  EXPECT_TRUE(store->ListVersions("n")->versions_size() == 1);
}

TEST(IndexStoreTest, PublishListenerSeesCommitsInOrder) {
  auto store = OpenStore(TmpDir("listener_db"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutModel(MakeModel("p", 1, 1, 1, 4)).ok());
  std::vector<uint64_t> seen;
  store->SetPublishListener(
      [&](const std::string& model, uint64_t version, int64_t) { seen.push_back(version); });
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(store->CreateVersion("p", 0, "").ok());
    ASSERT_TRUE(store->SealVersion("p", i).ok());
  }
  ASSERT_TRUE(store->PublishVersion("p", 2, 0).ok());
  ASSERT_TRUE(store->PublishVersion("p", 2, 2).ok());  // No change, no event.
  EXPECT_EQ(store->PublishVersion("p", 3, 0).status().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(store->PublishVersion("p", 1, 2).ok());
  ASSERT_TRUE(store->PublishVersion("p", 3, 1).ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{2, 1, 3}));
  absl::StatusOr<v1::ListVersionsResponse> list = store->ListVersions("p");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->versions(0).state(), v1::VERSION_STATE_RETIRED);
  EXPECT_EQ(list->versions(1).state(), v1::VERSION_STATE_RETIRED);
  EXPECT_EQ(list->versions(2).state(), v1::VERSION_STATE_PUBLISHED);
  EXPECT_EQ(list->published_version(), 3u);
}

TEST(IndexStoreTest, OpenVersionSizesTrackOverwrites) {
  auto store = OpenStore(TmpDir("sizes_db"));
  ASSERT_NE(store, nullptr);
  const v1::Model m = MakeModel("s", 2, 2, 1, 4);
  ASSERT_TRUE(store->PutModel(m).ok());
  ASSERT_TRUE(store->CreateVersion("s", 0, "").ok());
  std::vector<TensorUpload> c = MakeCentroids(m, 3, 1);
  PutAll(*store, c, 1, "s");
  PutAll(*store, c, 1, "s");  // Same keys again.
  std::vector<TensorUpload> bigger = MakeCentroids(m, 5, 2);
  PutAll(*store, {bigger[0]}, 1, "s");
  absl::StatusOr<v1::ListVersionsResponse> list = store->ListVersions("s");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->versions(0).num_tensors(), 2u);
  EXPECT_EQ(list->versions(0).tensor_bytes(), (5 + 3) * 4 * 4u);
  absl::StatusOr<v1::VersionInfo> sealed = store->SealVersion("s", 1);
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->tensor_bytes(), (5 + 3) * 4 * 4u);
}

}  // namespace
}  // namespace spattn
