// Text printers for memory and time reports (stdout tables, units on every number).
#pragma once

#include "planner/search/explain.h"
#include "planner/search/fit_advice.h"
#include "planner/cost/memory_model.h"
#include "planner/io/plan_file.h"
#include "planner/cost/time_model.h"

namespace llmplan::cli {

void print_setup(const PlanFile& f);
void print_memory(const MemoryReport& r, double headroom_bytes);
void print_time(const StepTime& t, int gpus);
void print_explanation(const Explanation& e, const PlanFile& f);
// "What would make a plan fit": each job change with its best plan, peak and throughput.
void print_fit_advice(const FitAdvice& a);
// advise_fit for a setup whose sweep found nothing (progress on stderr), then the above.
struct Setup;
void print_fit_advice_for(const Setup& s, const SweepSpace& space, const SweepOptions& opt);

}  // namespace llmplan::cli
