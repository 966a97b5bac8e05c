// Model JSON: `--model path.json` (PresetRegistry::resolve_model -> load_model_file,
// planner/io/presets.h), which reads an llmplan preset (models/*.json) or, detected by its
// keys, a Hugging Face config.json (model_from_hf_config, planner/spec/spec_json.h).
// Built twice: fuzz_model_json (seeded with presets) and fuzz_hf_config (seeded with HF
// configs), so each format's branch gets the fuzzer's full attention.
#include "fuzz/fuzz_util.h"
#include "planner/io/presets.h"
#include "planner/spec/recipe.h"
#include "planner/spec/spec_json.h"

using namespace llmplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "model.json");
  Result<ModelSpec> m = load_model_file(path);
  if (!m) {
    fuzz::expect_clear_error(m.status(), path);
    return 0;
  }
  // What `--params` matching and every cost start from (presets.cpp nearest_model).
  fuzz::expect_finite(count_params(*m, 1, 1, 1, 0, 0).total, "count_params.total");
  fuzz::expect_finite(model_flops_per_token(*m, m->max_positions), "model_flops_per_token");
  // A plan file holds the model as a preset: what is written must read back.
  Result<ModelSpec> again = model_from_json(to_json(*m), "written model");
  if (!again) fuzz::violated("a written model does not read back: " + again.status().message());
  return 0;
}
