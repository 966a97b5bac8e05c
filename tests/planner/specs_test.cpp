#include "planner/specs.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace llmplan
