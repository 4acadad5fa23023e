// Intent records: each launcher states the kernel it meant to launch, for which op, on which
// backend, with the bytes it must move and the FLOPs it does. Joined with what CUPTI saw run
// (profile/kernel_recorder.h) they make "the selected kernel ran" a checked fact and give each
// kernel's bytes and GB/s without guessing. Plain C++17: CUDA translation units include it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vt::trace {

// Where a step's time goes, by what the work is for. GEMMs are split by the layer part they
// serve; everything else by op family.
enum class OpGroup : uint8_t {
  kGemmGdnIn,    // Gated DeltaNet in_proj (qkv+z, b+a)
  kGemmAttnQkv,  // full-attention q(+gate)/k/v projection
  kGemmOut,      // GDN out_proj and attention o_proj
  kGemmMlp,      // dense MLP, MoE experts and shared expert (gate_up, down)
  kGemmRouter,   // MoE router and shared-expert gate
  kGemmLmHead,   // output layer
  kGemmOther,    // a GEMM whose role the launcher did not state
  kGdn,          // causal conv, gated delta rule
  kAttention,    // RoPE, attention, KV-cache writes
  kNorm,         // RMSNorm, gated RMSNorm, L2 norm
  kElementwise,  // residual adds, SwiGLU, gates
  kQuantize,     // activation quantisation (FP8 per-token groups)
  kMoe,          // routing, gather/scatter of expert rows
  kSampling,     // argmax, top-k/top-p
  kEmbed,        // token embedding gather
  kCollective,   // tensor-parallel all-reduce (NCCL)
  kOther,
};
inline constexpr int kNumOpGroups = int(OpGroup::kOther) + 1;

// "gemm.gdn_in", "gemm.attn_qkv", ..., "other".
const char* op_group_name(OpGroup group);
// The GEMM group of a checkpoint weight name ("model.layers.3.linear_attn.in_proj_qkv" ->
// kGemmGdnIn); kGemmOther for a name that matches no known projection.
OpGroup gemm_group_of_weight(std::string_view name);

// What a launcher passes with its kernel name. Positional aggregate (CUDA code is C++17):
//   IntentInfo{op, group, backend, {m, n, k}, bytes, flops}
struct IntentInfo {
  const char* op = "";  // the model's op: "gdn.in_proj", "rms_norm"
  OpGroup group = OpGroup::kOther;
  const char* backend = "cuda";       // the path chosen: "fp8_mma", "cublaslt", "cuda"
  std::array<int64_t, 4> shape = {};  // e.g. {m, n, k}; trailing zeros are not shown
  double bytes = 0;                   // bytes the launch must move (reads + writes)
  double flops = 0;                   // floating-point operations (a multiply-add is 2)
};

// One recorded intent.
struct Intent {
  std::string kernel;  // the kernel's function name, as short_kernel_name() gives CUPTI's
  std::string op, backend, shape;  // shape as "1x5120x10240"
  OpGroup group = OpGroup::kOther;
  double bytes = 0, flops = 0;
  // A helper a library may or may not launch (cuBLASLt's split-K reduction): its time is
  // attributed to the op when it runs; the kernel-ran gate does not require it.
  bool optional = false;
};

// "1x5120x10240" (trailing zeros dropped; "" for none).
std::string shape_text(const std::array<int64_t, 4>& shape);

// Starts recording intents (clearing earlier ones); launchers call intend() while enabled.
void begin_intents();
// Stops recording and returns the intents since begin_intents(), in launch order.
std::vector<Intent> end_intent_records();
// Stops recording and returns kernel name -> launches intended since begin_intents().
std::map<std::string, int64_t> end_intents();
// True between begin_intents() and end_*(); launchers may skip building an IntentInfo otherwise.
bool intents_active();
// Called by every launcher with its kernel's name; free when not recording. A library that picks
// its own kernel is named by a prefix and '*' ("nvjet*" for cuBLASLt's Hopper GEMMs): any kernel
// starting with the prefix counts for it. The one-argument
// form records op = kernel, group kOther, backend "cuda", no bytes.
void intend(const char* kernel);
void intend(const char* kernel, const IntentInfo& info);

// The op a model is running, for the launches it makes meanwhile (per thread; an inner scope
// replaces an outer one until it ends). Launchers know their kernel, backend, bytes and FLOPs;
// the model knows what the launch is for ("gdn.in_proj", kGemmGdnIn).
struct OpContext {
  const char* op = nullptr;
  OpGroup group = OpGroup::kOther;
};
OpContext current_op();
class OpScope {
 public:
  OpScope(const char* op, OpGroup group);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpContext saved_;
};

// What a launch costs, stated by its launcher: intend(kernel, info) with op and group from the
// innermost OpScope (or the kernel's name and `fallback` outside any scope).
struct LaunchCost {
  const char* backend = "cuda";
  std::array<int64_t, 4> shape = {};
  double bytes = 0, flops = 0;
  OpGroup fallback = OpGroup::kOther;
};
void intend(const char* kernel, const LaunchCost& cost);
// As intend(kernel, cost) for a kernel that may not run (Intent::optional).
void intend_optional(const char* kernel, const LaunchCost& cost);

}  // namespace vt::trace
