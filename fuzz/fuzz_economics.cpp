// Reliability data (data/reliability/failures.json): the input is the failures file that
// `sweep --tokens`, `budget` and the GUI's budget panel read with the shipped price and
// power files (economics_from_json, planner/io/economics.h). An accepted file's derived
// rates must be finite and non-negative, and the goodput of a job under them a fraction.
#include <cmath>

#include "fuzz/fuzz_util.h"
#include "planner/cost/goodput.h"
#include "planner/io/economics.h"
#include "planner/io/presets.h"
#include "planner/spec/spec_json.h"

using namespace llmplan;

namespace {
struct Shipped {
  PresetRegistry presets;
  nlohmann::json prices, power;
};
const Shipped& shipped() {
  static const Shipped s = [] {
    const std::string root = default_data_root();
    return Shipped{std::move(PresetRegistry::load(root)).value(), read_json_file(root + "/data/economics/prices.json").value(),
                   read_json_file(root + "/data/economics/power.json").value()};
  }();
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Shipped& s = shipped();
  const std::string path = fuzz::write_input(data, size, "failures.json");
  Result<nlohmann::json> doc = read_json_file(path);
  if (!doc) {
    fuzz::expect_clear_error(doc.status(), path);
    return 0;
  }
  Result<EconomicsData> d = economics_from_json(*doc, path, s.prices, "prices.json", s.power, "power.json", s.presets);
  if (!d) {
    fuzz::expect_clear_error(d.status(), path);
    return 0;
  }
  for (const FailureSource& f : d->failure_sources) {
    for (double r : {f.rates.per_gpu_hour, f.rates.per_node_hour, f.rates.planned_per_node_hour}) {
      fuzz::expect_finite(r, "failure rate");
      if (r < 0) fuzz::violated("a negative failure rate from " + f.id);
    }
    const double m = job_mtbf_s(f.rates, 1024, 8);
    const double tau = std::isfinite(m) ? daly_interval_s(10, m) : 600;
    const double g = productive_fraction(tau, 10, 600, m);
    if (!(g >= 0 && g <= 1)) fuzz::violated("goodput outside [0, 1] under " + f.id);
  }
  return 0;
}
