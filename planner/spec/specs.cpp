#include "planner/spec/specs.h"

#include <array>
#include <string_view>

namespace llmplan {
namespace {

template <class E, size_t N>
bool parse_from(const std::array<std::string_view, N>& names, const std::string& s, E* out) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == s) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

constexpr std::array<std::string_view, 2> kFamily = {"gpt", "llama"};
constexpr std::array<std::string_view, 3> kAttentionBias = {"none", "qkv", "all"};
constexpr std::array<std::string_view, 5> kDtype = {"fp32", "tf32", "fp16", "bf16", "fp8"};
constexpr std::array<std::string_view, 3> kMode = {"pretrain", "finetune", "lora"};
constexpr std::array<std::string_view, 4> kJobMode = {"pretrain", "finetune", "lora", "qlora"};
constexpr std::array<std::string_view, 3> kPrecision = {"fp32", "fp16", "bf16"};
constexpr std::array<std::string_view, 4> kAmp = {"O0", "O1", "O2", "O3"};
constexpr std::array<std::string_view, 2> kOptimizer = {"adamw", "sgd"};
constexpr std::array<std::string_view, 2> kGrads = {"deepspeed", "megatron"};
constexpr std::array<std::string_view, 2> kMoments = {"fp32", "bf16"};
constexpr std::array<std::string_view, 5> kFp8Recipe = {"none", "tensorwise", "delayed", "blockwise", "mxfp8"};
constexpr std::array<std::string_view, 4> kRecompute = {"none", "selective", "full", "full_k"};
constexpr std::array<std::string_view, 7> kSchedule = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev", "dualpipe"};
constexpr std::array<std::string_view, 2> kCpExchange = {"ring", "all_gather"};
constexpr std::array<std::string_view, 3> kPipelineSplit = {"even", "account_embedding_loss", "custom"};

}  // namespace

const char* to_string(Family v) { return kFamily[static_cast<int>(v)].data(); }
const char* to_string(AttentionBias v) { return kAttentionBias[static_cast<int>(v)].data(); }
const char* to_string(Dtype v) { return kDtype[static_cast<int>(v)].data(); }
const char* to_string(TrainMode v) { return kMode[static_cast<int>(v)].data(); }
const char* to_string(JobMode v) { return kJobMode[static_cast<int>(v)].data(); }
const char* to_string(Precision v) { return kPrecision[static_cast<int>(v)].data(); }
const char* to_string(AmpLevel v) { return kAmp[static_cast<int>(v)].data(); }
const char* to_string(Optimizer v) { return kOptimizer[static_cast<int>(v)].data(); }
const char* to_string(GradConvention v) { return kGrads[static_cast<int>(v)].data(); }
const char* to_string(MomentsDtype v) { return kMoments[static_cast<int>(v)].data(); }
const char* to_string(Fp8Recipe v) { return kFp8Recipe[static_cast<int>(v)].data(); }
const char* to_string(Recompute v) { return kRecompute[static_cast<int>(v)].data(); }
std::string recompute_text(const ParallelPlan& p) {
  std::string s = to_string(p.recompute);
  if (p.recompute == Recompute::full_k) s += std::to_string(p.recompute_layers);
  return s;
}
const char* to_string(Schedule v) { return kSchedule[static_cast<int>(v)].data(); }
const char* to_string(CpExchange v) { return kCpExchange[static_cast<int>(v)].data(); }
const char* to_string(PipelineSplit v) { return kPipelineSplit[static_cast<int>(v)].data(); }

bool parse_enum(const std::string& s, Family* out) { return parse_from(kFamily, s, out); }
bool parse_enum(const std::string& s, AttentionBias* out) { return parse_from(kAttentionBias, s, out); }
bool parse_enum(const std::string& s, Dtype* out) { return parse_from(kDtype, s, out); }
bool parse_enum(const std::string& s, TrainMode* out) { return parse_from(kMode, s, out); }
bool parse_enum(const std::string& s, JobMode* out) { return parse_from(kJobMode, s, out); }
bool parse_enum(const std::string& s, Precision* out) { return parse_from(kPrecision, s, out); }
bool parse_enum(const std::string& s, AmpLevel* out) { return parse_from(kAmp, s, out); }
bool parse_enum(const std::string& s, Optimizer* out) { return parse_from(kOptimizer, s, out); }
bool parse_enum(const std::string& s, GradConvention* out) { return parse_from(kGrads, s, out); }
bool parse_enum(const std::string& s, MomentsDtype* out) { return parse_from(kMoments, s, out); }
bool parse_enum(const std::string& s, Fp8Recipe* out) { return parse_from(kFp8Recipe, s, out); }
bool parse_enum(const std::string& s, Recompute* out) { return parse_from(kRecompute, s, out); }
bool parse_enum(const std::string& s, Schedule* out) { return parse_from(kSchedule, s, out); }
bool parse_enum(const std::string& s, CpExchange* out) { return parse_from(kCpExchange, s, out); }
bool parse_enum(const std::string& s, PipelineSplit* out) { return parse_from(kPipelineSplit, s, out); }

}  // namespace llmplan
