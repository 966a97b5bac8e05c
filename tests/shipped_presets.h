// The presets, stacks and reference data shipped under data/, loaded once per test binary
// (the tests that check the shipped files themselves and the behaviour they describe).
#pragma once

#include <gtest/gtest.h>

#include "planner/io/presets.h"

namespace llmplan::testing {

inline const PresetRegistry& shipped_presets() {
  static const PresetRegistry r = [] {
    Result<PresetRegistry> reg = PresetRegistry::load(default_data_root());
    EXPECT_TRUE(reg.ok()) << reg.status().message();
    return std::move(*reg);
  }();
  return r;
}

}  // namespace llmplan::testing
