// The method parameter table (kernels/method_config.h) drives validation, the proto converter and
// the planner's grouping. Walks every row: the proto has the field (and no field lacks a row), a
// non-default value survives config -> proto -> config, and two heads that differ only in a
// grouping parameter land in different planner groups.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/method_config.h"
#include "proto/method_config_convert.h"
#include "server/planner.h"
#include "spattn/v1/common.pb.h"

namespace spattn {
namespace {

using google::protobuf::FieldDescriptor;

// A valid value of `p` that differs from the default.
double OtherValue(const MethodParam& p) {
  MethodConfig defaults;
  defaults.method = p.method;
  const double d = p.Get(defaults);
  switch (p.range) {
    case ParamRange::kAny:
      return p.type == ParamType::kBool ? 1 - d : d + 1;
    case ParamRange::kBlockSize:
      return d == 64 ? 32 : 64;
    case ParamRange::kUnitInterval:
      return d / 2;
    case ParamRange::kPositive:
    case ParamRange::kNonNegative:
      return p.type == ParamType::kFloat ? d + 0.5 : d + 3;
  }
  return d + 1;
}

MethodConfig WithOther(const MethodParam& p) {
  MethodConfig c;
  c.method = p.method;
  p.Set(OtherValue(p), &c);
  // flex_prefill.max_budget must stay 0 or >= min_budget.
  if (p.method == Method::kFlexPrefill && std::string(p.name) == "max_budget") {
    c.flex_prefill.max_budget = c.flex_prefill.min_budget + 1;
  }
  return c;
}

std::string Where(const MethodParam& p) { return absl::StrCat(MethodName(p.method), ".", p.name); }

TEST(MethodParamsTest, EveryRowHasItsProtoFieldAndEveryFieldARow) {
  std::set<std::string> rows;
  for (const MethodParam& p : MethodParams()) {
    rows.insert(Where(p));
    const FieldDescriptor* params =
        v1::MethodConfig::descriptor()->FindFieldByName(MethodName(p.method));
    ASSERT_NE(params, nullptr) << "v1.MethodConfig has no field " << MethodName(p.method);
    const FieldDescriptor* f = params->message_type()->FindFieldByName(p.name);
    ASSERT_NE(f, nullptr) << "no proto field for " << Where(p);
    const FieldDescriptor::CppType want = p.type == ParamType::kInt ? FieldDescriptor::CPPTYPE_INT32
                                          : p.type == ParamType::kFloat
                                              ? FieldDescriptor::CPPTYPE_FLOAT
                                              : FieldDescriptor::CPPTYPE_BOOL;
    EXPECT_EQ(f->cpp_type(), want) << Where(p);
    EXPECT_EQ(FindParam(p.method, p.name), &p);
  }
  for (Method m : kAllMethods) {
    const FieldDescriptor* params = v1::MethodConfig::descriptor()->FindFieldByName(MethodName(m));
    if (m == Method::kDense) {
      EXPECT_EQ(params, nullptr);
      EXPECT_TRUE(ParamsOf(m).empty());
      continue;
    }
    ASSERT_NE(params, nullptr) << MethodName(m);
    for (int i = 0; i < params->message_type()->field_count(); ++i) {
      const std::string name =
          absl::StrCat(MethodName(m), ".", params->message_type()->field(i)->name());
      EXPECT_EQ(rows.count(name), 1u) << "proto field without a table row: " << name;
    }
  }
}

TEST(MethodParamsTest, EveryParameterRoundTripsThroughTheProto) {
  for (const MethodParam& p : MethodParams()) {
    const MethodConfig c = WithOther(p);
    ASSERT_TRUE(c.Validate().ok()) << Where(p) << ": " << c.Validate();
    v1::MethodConfig proto;
    MethodConfigToProto(c, &proto);
    absl::StatusOr<MethodConfig> back = ParseMethodConfig(proto, "m");
    ASSERT_TRUE(back.ok()) << Where(p) << ": " << back.status();
    MethodConfig defaults;
    defaults.method = p.method;
    EXPECT_NE(p.Get(c), p.Get(defaults)) << Where(p);
    EXPECT_EQ(p.Get(*back), p.Get(c)) << Where(p);
    EXPECT_EQ(back->DebugString(), c.DebugString()) << Where(p);
    for (const MethodParam* q : ParamsOf(p.method))
      EXPECT_EQ(q->Get(*back), q->Get(c)) << Where(*q);

    // The defaults: zeros (and unset optionals) in the proto take the struct's initializers.
    v1::MethodConfig empty;
    empty.set_method(MethodToProto(p.method));
    absl::StatusOr<MethodConfig> from_zeros = ParseMethodConfig(empty, "m");
    ASSERT_TRUE(from_zeros.ok()) << from_zeros.status();
    EXPECT_EQ(p.Get(*from_zeros), p.Get(defaults)) << Where(p);
  }
}

TEST(MethodParamsTest, OutOfRangeValuesAreRefusedWithTheirName) {
  for (const MethodParam& p : MethodParams()) {
    if (p.range == ParamRange::kAny) continue;
    MethodConfig c;
    c.method = p.method;
    p.Set(-1, &c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Where(p);
    EXPECT_NE(s.message().find(Where(p)), std::string::npos) << s;
  }
}

TEST(MethodParamsTest, PlannerSplitsGroupsOnEveryGroupingParameter) {
  for (const MethodParam& p : MethodParams()) {
    MethodConfig base;
    base.method = p.method;
    const std::vector<std::pair<int, MethodConfig>> overrides = {
        {0, base}, {1, WithOther(p)}, {2, base}};
    PlanInput in;
    in.num_q_heads = 3;
    in.maybe_head_overrides = &overrides;
    absl::StatusOr<Plan> plan = MakePlan(
        in, [](Method) { return true; }, "cpu");
    ASSERT_TRUE(plan.ok()) << plan.status();
    // sampled_lines' gamma is a per-head parameter of one build (issue 11 item 5): heads that
    // differ in it share a group, each keeping its value in head_configs.
    const bool per_head = std::string(Where(p)) == "sampled_lines.gamma";
    EXPECT_EQ(plan->groups.size(), p.splits_groups && !per_head ? 2u : 1u) << Where(p);
    EXPECT_EQ(plan->group_of_head[0], plan->group_of_head[2]) << Where(p);
    if (per_head) {
      ASSERT_EQ(plan->groups[0].head_configs.size(), 3u);
      EXPECT_EQ(plan->groups[0].head_configs[1].sampled_lines.gamma,
                WithOther(p).sampled_lines.gamma);
      EXPECT_EQ(plan->groups[0].head_configs[0].sampled_lines.gamma, base.sampled_lines.gamma);
    }
  }
}

TEST(MethodParamsTest, SetMethodParamParsesByTypeAndListsKnownNames) {
  MethodConfig c;
  ASSERT_TRUE(SetMethodParam("vertical_slash.last_q", "32", &c).ok());
  EXPECT_EQ(c.vertical_slash.last_q, 32);
  ASSERT_TRUE(SetMethodParam("flex_prefill.flatten", "false", &c).ok());
  EXPECT_FALSE(c.flex_prefill.flatten);
  EXPECT_NE(
      SetMethodParam("vertical_slash.nope", "1", &c).message().find("known: last_q, vertical_size"),
      std::string::npos);
  EXPECT_NE(SetMethodParam("anchor.theta", "x", &c).message().find("anchor.theta: not a number"),
            std::string::npos);
}

}  // namespace
}  // namespace spattn
