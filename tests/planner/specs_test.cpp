#include "planner/spec/specs.h"

#include <string>

#include <gtest/gtest.h>

#include "planner/spec/spec_json.h"

namespace llmplan {
namespace {

TEST(Specs, EnumNamesRoundTrip) {
  Recompute r = Recompute::none;
  ASSERT_TRUE(parse_enum("selective", &r));
  EXPECT_EQ(r, Recompute::selective);
  EXPECT_STREQ(to_string(r), "selective");
  EXPECT_FALSE(parse_enum("bogus", &r));
  EXPECT_EQ(r, Recompute::selective);
}

// The plan's CP exchange: written only when not the default ring, read back as written,
// old files without it read as ring, and an unknown value is bad input naming the field.
TEST(PlanJson, CpExchangeRoundTripsAndRejectsUnknownValues) {
  ParallelPlan p;
  p.cp = 2;
  nlohmann::json j = to_json(p);
  EXPECT_FALSE(j.contains("cp_exchange"));
  Result<ParallelPlan> back = plan_from_json(j, "test");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->cp_exchange, CpExchange::ring);

  p.cp_exchange = CpExchange::all_gather;
  j = to_json(p);
  EXPECT_EQ(j.at("cp_exchange"), "all_gather");
  back = plan_from_json(j, "test");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->cp_exchange, CpExchange::all_gather);
  EXPECT_EQ(to_json(*back), j);

  j["cp_exchange"] = "allgather";
  back = plan_from_json(j, "test");
  ASSERT_FALSE(back);
  EXPECT_NE(back.status().message().find("cp_exchange"), std::string::npos) << back.status().message();
  EXPECT_NE(back.status().message().find("ring, all_gather"), std::string::npos) << back.status().message();
}

}  // namespace
}  // namespace llmplan
