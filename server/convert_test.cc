// Validation and conversion of AttentionRequest: every bad field gets a precise code and a message
// naming the field; good requests convert to the AttentionProblem the kernels expect.
#include "server/convert.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <functional>

#include "kernels/host_problem.h"
#include "server/test_util.h"

namespace spattn {
namespace {

using testing_util::Describe;
using testing_util::InlineRequest;

class ConvertTest : public ::testing::Test {
 protected:
  ConvertTest() : hp_(Shape()) { hp_.FillRandom(7); }

  static ProblemShape Shape() {
    ProblemShape s;
    s.q_lens = {5, 11};
    s.k_lens = {9, 11};  // Sequence 0 is a chunk: 5 queries over 9 keys.
    s.num_q_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.dtype = DType::kBF16;
    return s;
  }

  v1::AttentionRequest Good() {
    v1::AttentionRequest r = InlineRequest(hp_);
    r.set_causal(true);
    return r;
  }

  // Applies `mutate` to a good request and expects `code` with `field` in the message.
  void ExpectBad(const std::string& what, const std::function<void(v1::AttentionRequest*)>& mutate,
                 absl::StatusCode code, const std::string& field) {
    v1::AttentionRequest r = Good();
    mutate(&r);
    ConvertLimits limits;
    limits.max_inline_bytes = 1 << 20;
    auto parsed = ParseAttentionRequest(r, limits);
    ASSERT_FALSE(parsed.ok()) << what << ": accepted";
    EXPECT_EQ(parsed.status().code(), code) << what << ": " << Describe(parsed.status());
    EXPECT_NE(parsed.status().message().find(field), std::string::npos)
        << what << ": message does not name '" << field << "': " << Describe(parsed.status());
  }

  HostProblem hp_;
};

TEST_F(ConvertTest, GoodRequestConverts) {
  v1::AttentionRequest r = Good();
  auto parsed = ParseAttentionRequest(r, ConvertLimits());
  ASSERT_TRUE(parsed.ok()) << Describe(parsed.status());
  const AttentionProblem& p = parsed->problem;
  EXPECT_EQ(p.cu_seqlens_q, (std::vector<int32_t>{0, 5, 16}));
  EXPECT_EQ(p.cu_seqlens_k, (std::vector<int32_t>{0, 9, 20}));
  EXPECT_EQ(p.num_q_heads, 4);
  EXPECT_EQ(p.num_kv_heads, 2);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(p.dtype, DType::kBF16);
  EXPECT_TRUE(p.causal);
  EXPECT_FLOAT_EQ(p.softmax_scale, hp_.problem().softmax_scale);
  EXPECT_EQ(p.q.token_stride, 4 * 64);
  EXPECT_EQ(p.k.token_stride, 2 * 64);
  EXPECT_EQ(parsed->q.kind, HandleKind::kInline);
  EXPECT_EQ(parsed->q.bytes, 16 * 4 * 64 * 2);
  EXPECT_EQ(parsed->q.inline_bytes, &r.q().inline_data().data());
  EXPECT_FALSE(parsed->output.has_value());
  EXPECT_FALSE(parsed->method_override.has_value());
}

TEST_F(ConvertTest, DefaultsAndOptionalFields) {
  v1::AttentionRequest r = Good();
  r.set_softmax_scale(0);
  r.clear_cu_seqlens_k();
  // K/V now follow cu_seqlens_q: 16 tokens.
  hp_.k_bytes().resize(16 * 2 * 64 * 2);
  hp_.v_bytes().resize(16 * 2 * 64 * 2);
  r.mutable_k()->mutable_desc()->set_shape(0, 16);
  r.mutable_k()->mutable_inline_data()->set_data(hp_.k_bytes().data(), hp_.k_bytes().size());
  r.mutable_v()->mutable_desc()->set_shape(0, 16);
  r.mutable_v()->mutable_inline_data()->set_data(hp_.v_bytes().data(), hp_.v_bytes().size());
  r.mutable_method_override()->set_method(v1::METHOD_VERTICAL_SLASH);
  r.mutable_method_override()->mutable_vertical_slash()->set_last_q(32);
  auto* o = r.add_head_overrides();
  o->set_head(3);
  o->mutable_method()->set_method(v1::METHOD_A_SHAPE);
  auto parsed = ParseAttentionRequest(r, ConvertLimits());
  ASSERT_TRUE(parsed.ok()) << Describe(parsed.status());
  EXPECT_FLOAT_EQ(parsed->problem.softmax_scale, 0.125f);
  EXPECT_EQ(parsed->problem.cu_seqlens_k, parsed->problem.cu_seqlens_q);
  ASSERT_TRUE(parsed->method_override.has_value());
  EXPECT_EQ(parsed->method_override->method, Method::kVerticalSlash);
  EXPECT_EQ(parsed->method_override->vertical_slash.last_q, 32);
  EXPECT_EQ(parsed->method_override->vertical_slash.vertical_size, 1000);  // paper default
  ASSERT_EQ(parsed->head_overrides.size(), 1u);
  EXPECT_EQ(parsed->head_overrides[0].first, 3);
  EXPECT_EQ(parsed->head_overrides[0].second.a_shape.local_tokens, 3968);
}

TEST_F(ConvertTest, RegionAndStridedTensors) {
  v1::AttentionRequest r = Good();
  // Q as a padded layout: token stride 300 (> 4 * 64), in a region.
  v1::TensorRef* q = r.mutable_q();
  q->mutable_desc()->add_strides(300);
  q->mutable_desc()->add_strides(64);
  q->mutable_desc()->add_strides(1);
  q->mutable_region()->set_region_name("shm");
  q->mutable_region()->set_offset(128);
  const int64_t span = (15 * 300 + 3 * 64 + 64) * 2;
  q->mutable_region()->set_byte_size(span);
  r.mutable_output()->mutable_region()->set_region_name("out");
  r.mutable_output()->mutable_region()->set_byte_size(16 * 4 * 64 * 2);
  auto parsed = ParseAttentionRequest(r, ConvertLimits());
  ASSERT_TRUE(parsed.ok()) << Describe(parsed.status());
  EXPECT_EQ(parsed->q.kind, HandleKind::kSystemRegion);
  EXPECT_EQ(parsed->q.region_name, "shm");
  EXPECT_EQ(parsed->q.offset, 128u);
  EXPECT_EQ(parsed->q.bytes, span);
  EXPECT_EQ(parsed->problem.q.token_stride, 300);
  ASSERT_TRUE(parsed->output.has_value());
  EXPECT_EQ(parsed->output->region_name, "out");
  EXPECT_EQ(parsed->problem.o_token_stride, 4 * 64);
}

TEST_F(ConvertTest, BadSizes) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectBad(
      "zero q heads", [](auto* r) { r->set_num_q_heads(0); }, kInvalid, "num_q_heads");
  ExpectBad(
      "huge q heads", [](auto* r) { r->set_num_q_heads(1u << 31); }, kInvalid, "num_q_heads");
  ExpectBad(
      "zero kv heads", [](auto* r) { r->set_num_kv_heads(0); }, kInvalid, "num_kv_heads");
  ExpectBad(
      "gqa not divisible", [](auto* r) { r->set_num_kv_heads(3); }, kInvalid, "num_q_heads");
  ExpectBad(
      "head_dim 0", [](auto* r) { r->set_head_dim(0); }, kInvalid, "head_dim");
  ExpectBad(
      "head_dim 100", [](auto* r) { r->set_head_dim(100); }, kInvalid, "head_dim");
  ExpectBad(
      "head_dim 512", [](auto* r) { r->set_head_dim(512); }, kInvalid, "head_dim");
  ExpectBad(
      "negative scale", [](auto* r) { r->set_softmax_scale(-1); }, kInvalid, "softmax_scale");
  ExpectBad(
      "nan scale", [](auto* r) { r->set_softmax_scale(NAN); }, kInvalid, "softmax_scale");
  ExpectBad(
      "long request id", [](auto* r) { r->set_request_id(std::string(300, 'x')); }, kInvalid,
      "request_id");
  ExpectBad(
      "bad model id", [](auto* r) { r->set_model_id("a b"); }, kInvalid, "model_id");
}

TEST_F(ConvertTest, BadCuSeqlens) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectBad(
      "one entry", [](auto* r) { r->mutable_cu_seqlens_q()->Truncate(1); }, kInvalid,
      "cu_seqlens_q");
  ExpectBad(
      "not starting at 0", [](auto* r) { r->set_cu_seqlens_q(0, 1); }, kInvalid, "cu_seqlens_q[0]");
  ExpectBad(
      "decreasing", [](auto* r) { r->set_cu_seqlens_q(1, 20); }, kInvalid, "cu_seqlens_q[2]");
  ExpectBad(
      "negative", [](auto* r) { r->set_cu_seqlens_q(1, -3); }, kInvalid, "cu_seqlens_q[1]");
  ExpectBad(
      "overflowing", [](auto* r) { r->set_cu_seqlens_k(2, int64_t{1} << 40); }, kInvalid,
      "cu_seqlens_k[2]");
  ExpectBad(
      "k count differs", [](auto* r) { r->add_cu_seqlens_k(30); }, kInvalid, "cu_seqlens_k");
  ExpectBad(
      "more queries than keys", [](auto* r) { r->set_cu_seqlens_k(1, 3); }, kInvalid,
      "cu_seqlens_q");
  // Tensors no longer match the offsets.
  ExpectBad(
      "q tokens vs cu_seqlens_q", [](auto* r) { r->set_cu_seqlens_q(2, 15); }, kInvalid,
      "q.desc.shape[0]");
  ExpectBad(
      "k tokens vs cu_seqlens_k", [](auto* r) { r->set_cu_seqlens_k(2, 21); }, kInvalid,
      "k.desc.shape[0]");
}

TEST_F(ConvertTest, BadTensors) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectBad(
      "missing q", [](auto* r) { r->clear_q(); }, kInvalid, "q: missing");
  ExpectBad(
      "missing v", [](auto* r) { r->clear_v(); }, kInvalid, "v: missing");
  ExpectBad(
      "no location", [](auto* r) { r->mutable_k()->clear_inline_data(); }, kInvalid, "k: no data");
  ExpectBad(
      "unspecified dtype",
      [](auto* r) { r->mutable_q()->mutable_desc()->set_dtype(v1::DATA_TYPE_UNSPECIFIED); },
      kInvalid, "q.desc.dtype");
  ExpectBad(
      "int32 dtype",
      [](auto* r) { r->mutable_q()->mutable_desc()->set_dtype(v1::DATA_TYPE_INT32); }, kInvalid,
      "q.desc.dtype");
  ExpectBad(
      "unknown dtype",
      [](auto* r) { r->mutable_v()->mutable_desc()->set_dtype(static_cast<v1::DataType>(42)); },
      kInvalid, "v.desc.dtype");
  ExpectBad(
      "mixed dtypes",
      [](auto* r) { r->mutable_k()->mutable_desc()->set_dtype(v1::DATA_TYPE_FP16); }, kInvalid,
      "k.desc.dtype");
  ExpectBad(
      "2-d shape", [](auto* r) { r->mutable_q()->mutable_desc()->mutable_shape()->Truncate(2); },
      kInvalid, "q.desc.shape");
  ExpectBad(
      "negative dim", [](auto* r) { r->mutable_q()->mutable_desc()->set_shape(1, -4); }, kInvalid,
      "q.desc.shape[1]");
  ExpectBad(
      "wrong heads", [](auto* r) { r->mutable_k()->mutable_desc()->set_shape(1, 4); }, kInvalid,
      "k.desc.shape[1]");
  ExpectBad(
      "wrong head_dim", [](auto* r) { r->mutable_v()->mutable_desc()->set_shape(2, 32); }, kInvalid,
      "v.desc.shape[2]");
  ExpectBad(
      "overflowing dim",
      [](auto* r) { r->mutable_q()->mutable_desc()->set_shape(0, int64_t{1} << 62); }, kInvalid,
      "q.desc.shape[0]");
  ExpectBad(
      "inline too short",
      [](auto* r) { r->mutable_q()->mutable_inline_data()->mutable_data()->resize(100); }, kInvalid,
      "q.inline_data");
  ExpectBad(
      "inline too large",
      [](auto* r) { r->mutable_q()->mutable_inline_data()->mutable_data()->resize(2 << 20); },
      kInvalid, "max_inline_bytes");
  ExpectBad(
      "3 strides needed", [](auto* r) { r->mutable_q()->mutable_desc()->add_strides(256); },
      kInvalid, "q.desc.strides");
  ExpectBad(
      "strided last dim",
      [](auto* r) {
        auto* d = r->mutable_q()->mutable_desc();
        d->add_strides(512);
        d->add_strides(128);
        d->add_strides(2);
      },
      kInvalid, "q.desc.strides[2]");
  ExpectBad(
      "overlapping heads",
      [](auto* r) {
        auto* d = r->mutable_q()->mutable_desc();
        d->add_strides(256);
        d->add_strides(32);
        d->add_strides(1);
      },
      kInvalid, "q.desc.strides[1]");
  ExpectBad(
      "negative stride",
      [](auto* r) {
        auto* d = r->mutable_q()->mutable_desc();
        d->add_strides(-256);
        d->add_strides(64);
        d->add_strides(1);
      },
      kInvalid, "q.desc.strides[0]");
}

TEST_F(ConvertTest, BadHandles) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  auto region = [](v1::TensorRef* t, const std::string& name, uint64_t offset, uint64_t size) {
    t->mutable_region()->set_region_name(name);
    t->mutable_region()->set_offset(offset);
    t->mutable_region()->set_byte_size(size);
  };
  ExpectBad(
      "empty region name", [&](auto* r) { region(r->mutable_q(), "", 0, 16 * 4 * 64 * 2); },
      kInvalid, "q.region.region_name");
  ExpectBad(
      "region size mismatch", [&](auto* r) { region(r->mutable_q(), "x", 0, 1000); }, kInvalid,
      "q.region.byte_size");
  ExpectBad(
      "misaligned offset", [&](auto* r) { region(r->mutable_k(), "x", 3, 20 * 2 * 64 * 2); },
      kInvalid, "k.region.offset");
  ExpectBad(
      "short ipc handle",
      [](auto* r) {
        auto* c = r->mutable_v()->mutable_cuda_ipc();
        c->set_ipc_handle("abc");
        c->set_byte_size(20 * 2 * 64 * 2);
      },
      kInvalid, "v.cuda_ipc.ipc_handle");
  ExpectBad(
      "ipc size mismatch",
      [](auto* r) {
        auto* c = r->mutable_v()->mutable_cuda_ipc();
        c->set_ipc_handle(std::string(64, 'h'));
        c->set_byte_size(7);
      },
      kInvalid, "v.cuda_ipc.byte_size");
  ExpectBad(
      "inline output", [](auto* r) { r->mutable_output()->mutable_inline_data()->set_data("x"); },
      kInvalid, "output.inline_data");
  ExpectBad(
      "output dtype",
      [&](auto* r) {
        region(r->mutable_output(), "o", 0, 16 * 4 * 64 * 2);
        r->mutable_output()->mutable_desc()->set_dtype(v1::DATA_TYPE_FP32);
      },
      kInvalid, "output.desc.dtype");
  ExpectBad(
      "output shape",
      [&](auto* r) {
        region(r->mutable_output(), "o", 0, 16 * 4 * 64 * 2);
        auto* d = r->mutable_output()->mutable_desc();
        d->add_shape(16);
        d->add_shape(2);
        d->add_shape(64);
      },
      kInvalid, "output.desc.shape[1]");
  ExpectBad(
      "output region size", [&](auto* r) { region(r->mutable_output(), "o", 0, 5); }, kInvalid,
      "output.region.byte_size");
}

TEST_F(ConvertTest, InlineOutputAndLseLimits) {
  v1::AttentionRequest r = Good();
  // Q in a region; K and V inline are smaller than the limit, the inline output is not.
  r.mutable_q()->mutable_region()->set_region_name("q");
  r.mutable_q()->mutable_region()->set_byte_size(16 * 4 * 64 * 2);
  ConvertLimits limits;
  limits.max_inline_bytes = 16 * 4 * 64 * 2 - 1;
  auto parsed = ParseAttentionRequest(r, limits);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message().rfind("output: unset", 0), 0u) << parsed.status();
  // An output region lifts the limit; the LSE (fp32 [4, 16]) fits, and is checked too.
  r.mutable_output()->mutable_region()->set_region_name("o");
  r.mutable_output()->mutable_region()->set_byte_size(16 * 4 * 64 * 2);
  r.set_return_lse(true);
  EXPECT_TRUE(ParseAttentionRequest(r, limits).ok());
  limits.max_inline_bytes = 255;
  r.mutable_k()->mutable_region()->set_region_name("k");
  r.mutable_k()->mutable_region()->set_byte_size(20 * 2 * 64 * 2);
  r.mutable_v()->mutable_region()->set_region_name("v");
  r.mutable_v()->mutable_region()->set_byte_size(20 * 2 * 64 * 2);
  parsed = ParseAttentionRequest(r, limits);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message().rfind("return_lse", 0), 0u) << parsed.status();
}

TEST_F(ConvertTest, BadMethods) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectBad(
      "unspecified override",
      [](auto* r) { r->mutable_method_override()->set_method(v1::METHOD_UNSPECIFIED); }, kInvalid,
      "method_override.method");
  ExpectBad(
      "unknown method",
      [](auto* r) { r->mutable_method_override()->set_method(static_cast<v1::Method>(99)); },
      kInvalid, "method_override.method");
  ExpectBad(
      "bad last_q",
      [](auto* r) {
        r->mutable_method_override()->set_method(v1::METHOD_VERTICAL_SLASH);
        r->mutable_method_override()->mutable_vertical_slash()->set_last_q(-1);
      },
      kInvalid, "method_override.vertical_slash.last_q");
  ExpectBad(
      "bad block size",
      [](auto* r) {
        r->mutable_method_override()->set_method(v1::METHOD_BLOCK_SPARSE);
        r->mutable_method_override()->mutable_block_sparse()->set_block_size(48);
      },
      kInvalid, "method_override.block_sparse.block_size");
  ExpectBad(
      "bad gamma",
      [](auto* r) {
        r->mutable_method_override()->set_method(v1::METHOD_FLEX_PREFILL);
        r->mutable_method_override()->mutable_flex_prefill()->set_gamma(1.5f);
      },
      kInvalid, "method_override.flex_prefill.gamma");
  ExpectBad(
      "params of another method",
      [](auto* r) {
        r->mutable_method_override()->set_method(v1::METHOD_A_SHAPE);
        r->mutable_method_override()->mutable_anchor()->set_theta(3);
      },
      kInvalid, "method_override.anchor");
  ExpectBad(
      "override head out of range",
      [](auto* r) {
        auto* o = r->add_head_overrides();
        o->set_head(4);
        o->mutable_method()->set_method(v1::METHOD_DENSE);
      },
      kInvalid, "head_overrides[0].head");
  ExpectBad(
      "head overridden twice",
      [](auto* r) {
        for (int i = 0; i < 2; ++i) {
          auto* o = r->add_head_overrides();
          o->set_head(1);
          o->mutable_method()->set_method(v1::METHOD_DENSE);
        }
      },
      kInvalid, "head_overrides[1].head");
  ExpectBad(
      "override without method", [](auto* r) { r->add_head_overrides()->set_head(0); }, kInvalid,
      "head_overrides[0].method");
  ExpectBad(
      "bad head override param",
      [](auto* r) {
        auto* o = r->add_head_overrides();
        o->set_head(2);
        o->mutable_method()->set_method(v1::METHOD_ANCHOR);
        o->mutable_method()->mutable_anchor()->set_step(-2);
      },
      kInvalid, "head_overrides[0].method.anchor.step");
}

TEST(MethodConfigProtoTest, RoundTripsEveryMethod) {
  for (Method m : kAllMethods) {
    MethodConfig c;
    c.method = m;
    c.a_shape.sink_tokens = 7;
    c.vertical_slash.slash_size = 99;
    c.block_sparse.top_k = 3;
    c.flex_prefill.gamma = 0.5f;
    c.flex_prefill.flatten = false;
    c.sample_attention.chunk_n = 1;
    c.anchor.theta = 4.5f;
    c.saap.top_l = 9;
    v1::MethodConfig proto;
    MethodConfigToProto(c, &proto);
    auto back = ParseMethodConfig(proto, "m");
    ASSERT_TRUE(back.ok()) << MethodName(m) << ": " << back.status();
    EXPECT_EQ(back->DebugString(), c.DebugString());
  }
}

TEST(MethodConfigProtoTest, UnsetFlattenKeepsThePaperDefault) {
  v1::MethodConfig proto;
  proto.set_method(v1::METHOD_FLEX_PREFILL);
  proto.mutable_flex_prefill()->set_gamma(0.95f);
  auto c = ParseMethodConfig(proto, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->flex_prefill.flatten);
  proto.mutable_flex_prefill()->set_flatten(false);
  EXPECT_FALSE(ParseMethodConfig(proto, "m")->flex_prefill.flatten);
}

// Issue 11: HeadConfig.calibrated_tokens survives the wire (binary and JSON, as `spattnctl configs
// export/import` writes it); a message without it reads 0.
TEST(ModelConfigProtoTest, CalibratedTokensRoundTrip) {
  v1::HeadConfig c;
  c.set_layer(3);
  c.set_head(7);
  c.set_min_tokens(23170);
  c.set_calibrated_tokens(32768);
  c.mutable_method()->set_method(v1::METHOD_VERTICAL_SLASH);
  v1::HeadConfig back;
  ASSERT_TRUE(back.ParseFromString(c.SerializeAsString()));
  EXPECT_EQ(back.calibrated_tokens(), 32768u);
  EXPECT_EQ(back.min_tokens(), 23170u);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(c, &json).ok());
  EXPECT_NE(json.find("calibratedTokens"), std::string::npos) << json;
  v1::HeadConfig from_json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &from_json).ok());
  EXPECT_EQ(from_json.calibrated_tokens(), 32768u);
  c.clear_calibrated_tokens();
  ASSERT_TRUE(back.ParseFromString(c.SerializeAsString()));
  EXPECT_EQ(back.calibrated_tokens(), 0u);
}

TEST(ModelConfigProtoTest, BuildsPerHeadTableAndRejectsBadConfigs) {
  v1::Model model;
  model.set_model_id("m");
  model.set_num_layers(2);
  model.set_num_q_heads(4);
  model.set_num_kv_heads(2);
  model.set_head_dim(64);
  model.mutable_default_method()->set_method(v1::METHOD_A_SHAPE);
  google::protobuf::RepeatedPtrField<v1::HeadConfig> configs;
  v1::HeadConfig* c = configs.Add();
  c->set_layer(1);
  c->set_head(2);
  c->mutable_method()->set_method(v1::METHOD_VERTICAL_SLASH);
  auto m = ModelConfigFromProto(model, 3, configs);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->version, 3u);
  EXPECT_EQ(m->For(1, 2).method, Method::kVerticalSlash);
  EXPECT_EQ(m->For(1, 1).method, Method::kAShape);
  EXPECT_EQ(m->For(0, 2).method, Method::kAShape);
  EXPECT_TRUE(m->LayerUses(1, Method::kVerticalSlash));
  EXPECT_FALSE(m->LayerUses(0, Method::kVerticalSlash));

  // Length buckets (issue 11): a config from min_tokens on serves prompts at least that long.
  v1::HeadConfig* b = configs.Add();
  b->set_layer(1);
  b->set_head(2);
  b->set_min_tokens(20000);
  b->mutable_method()->set_method(v1::METHOD_FLEX_PREFILL);
  v1::HeadConfig* b2 = configs.Add();
  *b2 = *b;
  b2->set_min_tokens(5000);
  b2->mutable_method()->set_method(v1::METHOD_BLOCK_SPARSE);
  v1::HeadConfig* other = configs.Add();  // a bucket for a head without a base config
  other->set_layer(0);
  other->set_head(1);
  other->set_min_tokens(100);
  other->mutable_method()->set_method(v1::METHOD_ANCHOR);
  auto bucketed = ModelConfigFromProto(model, 3, configs);
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  EXPECT_EQ(bucketed->For(1, 2).method, Method::kVerticalSlash);
  EXPECT_EQ(bucketed->For(1, 2, 4999).method, Method::kVerticalSlash);
  EXPECT_EQ(bucketed->For(1, 2, 5000).method, Method::kBlockSparse);
  EXPECT_EQ(bucketed->For(1, 2, 19999).method, Method::kBlockSparse);
  EXPECT_EQ(bucketed->For(1, 2, 131072).method, Method::kFlexPrefill);
  EXPECT_EQ(bucketed->For(1, 1, 131072).method, Method::kAShape);
  EXPECT_EQ(bucketed->For(0, 1, 99).method, Method::kAShape);
  EXPECT_EQ(bucketed->For(0, 1, 100).method, Method::kAnchor);
  EXPECT_TRUE(bucketed->LayerUses(1, Method::kFlexPrefill));
  EXPECT_TRUE(bucketed->LayerUses(0, Method::kAnchor));
  // No config records a calibration length: nothing is scaled.
  EXPECT_TRUE(bucketed->calibrated_tokens.empty());
  EXPECT_EQ(bucketed->CalibratedTokens(1, 2, 131072), 0);

  // Calibration lengths (issue 11), per head config and per bucket; the model default has none.
  c->set_calibrated_tokens(16384);
  b->set_calibrated_tokens(32768);
  auto calibrated = ModelConfigFromProto(model, 3, configs);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_EQ(calibrated->CalibratedTokens(1, 2, 4999), 16384);
  EXPECT_EQ(calibrated->CalibratedTokens(1, 2, 5000), 0);  // bucket b2 records none
  EXPECT_EQ(calibrated->CalibratedTokens(1, 2, 131072), 32768);
  EXPECT_EQ(calibrated->CalibratedTokens(1, 1, 131072), 0);  // model default
  EXPECT_EQ(calibrated->CalibratedTokens(0, 1, 100), 0);
  c->set_calibrated_tokens(0);
  configs.RemoveLast();
  configs.RemoveLast();
  configs.RemoveLast();

  c->set_head(9);
  auto bad = ModelConfigFromProto(model, 3, configs);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
}

}  // namespace
}  // namespace spattn
