// Text printers for memory and time reports (stdout tables, units on every number).
#pragma once

#include "planner/search/explain.h"
#include "planner/cost/memory_model.h"
#include "planner/io/plan_file.h"
#include "planner/cost/time_model.h"

namespace llmplan::cli {

void print_setup(const PlanFile& f);
void print_memory(const MemoryReport& r, double headroom_bytes);
void print_time(const StepTime& t, int gpus);
void print_explanation(const Explanation& e, const PlanFile& f);

}  // namespace llmplan::cli
