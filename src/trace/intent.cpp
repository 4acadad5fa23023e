#include "trace/intent.h"

#include <atomic>
#include <mutex>

namespace vt::trace {
namespace {

// Tensor-parallel ranks launch from one thread each: recording is shared, appends are locked.
std::atomic<bool> recording = false;
std::mutex records_mutex;
std::vector<Intent>& records() {
  static std::vector<Intent> instance;
  return instance;
}

void append(Intent intent) {
  std::lock_guard<std::mutex> lock(records_mutex);
  records().push_back(std::move(intent));
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

const char* op_group_name(OpGroup group) {
  switch (group) {
    case OpGroup::kGemmGdnIn:
      return "gemm.gdn_in";
    case OpGroup::kGemmAttnQkv:
      return "gemm.attn_qkv";
    case OpGroup::kGemmOut:
      return "gemm.out";
    case OpGroup::kGemmMlp:
      return "gemm.mlp";
    case OpGroup::kGemmRouter:
      return "gemm.router";
    case OpGroup::kGemmLmHead:
      return "gemm.lm_head";
    case OpGroup::kGemmOther:
      return "gemm.other";
    case OpGroup::kGdn:
      return "gdn";
    case OpGroup::kAttention:
      return "attention";
    case OpGroup::kNorm:
      return "norm";
    case OpGroup::kElementwise:
      return "elementwise";
    case OpGroup::kQuantize:
      return "quantize";
    case OpGroup::kMoe:
      return "moe";
    case OpGroup::kSampling:
      return "sampling";
    case OpGroup::kEmbed:
      return "embed";
    case OpGroup::kCollective:
      return "collective";
    case OpGroup::kOther:
      return "other";
  }
  return "other";
}

OpGroup gemm_group_of_weight(std::string_view name) {
  // HF names (Qwen3.5 / Qwen3-Next) and GGUF names (Llama family).
  if (contains(name, "lm_head") || name == "output" || name == "output.weight")
    return OpGroup::kGemmLmHead;
  if (contains(name, "linear_attn.in_proj")) return OpGroup::kGemmGdnIn;
  if (contains(name, "linear_attn.out_proj") || contains(name, "self_attn.o_proj") ||
      contains(name, "attn_output"))
    return OpGroup::kGemmOut;
  if (contains(name, "self_attn.q_proj") || contains(name, "self_attn.k_proj") ||
      contains(name, "self_attn.v_proj") || contains(name, "attn_q") || contains(name, "attn_k") ||
      contains(name, "attn_v"))
    return OpGroup::kGemmAttnQkv;
  if (contains(name, "shared_expert_gate") ||
      (name.size() >= 8 && name.substr(name.size() - 8) == "mlp.gate"))
    return OpGroup::kGemmRouter;
  if (contains(name, "gate_proj") || contains(name, "up_proj") || contains(name, "down_proj") ||
      contains(name, "ffn_gate") || contains(name, "ffn_up") || contains(name, "ffn_down"))
    return OpGroup::kGemmMlp;
  return OpGroup::kGemmOther;
}

std::string shape_text(const std::array<int64_t, 4>& shape) {
  size_t rank = shape.size();
  while (rank > 0 && shape[rank - 1] == 0) --rank;
  std::string text;
  for (size_t i = 0; i < rank; ++i) {
    if (i) text += 'x';
    text += std::to_string(shape[i]);
  }
  return text;
}

void begin_intents() {
  std::lock_guard<std::mutex> lock(records_mutex);
  records().clear();
  recording = true;
}

std::vector<Intent> end_intent_records() {
  std::lock_guard<std::mutex> lock(records_mutex);
  recording = false;
  return std::move(records());
}

std::map<std::string, int64_t> end_intents() {
  std::map<std::string, int64_t> counts;
  for (const Intent& intent : end_intent_records()) ++counts[intent.kernel];
  return counts;
}

bool intents_active() {
  return recording;
}

void intend(const char* kernel) {
  if (recording) append({kernel, kernel, "cuda", "", OpGroup::kOther, 0, 0});
}

namespace {
thread_local OpContext current_context;
}  // namespace

OpContext current_op() { return current_context; }

OpScope::OpScope(const char* op, OpGroup group) : saved_(current_context) { current_context = {op, group}; }

OpScope::~OpScope() { current_context = saved_; }

void intend(const char* kernel, const LaunchCost& cost) {
  if (!recording) return;
  const OpContext context = current_context;
  intend(kernel, IntentInfo{context.op ? context.op : kernel, context.op ? context.group : cost.fallback, cost.backend,
                            cost.shape, cost.bytes, cost.flops});
}

void intend_optional(const char* kernel, const LaunchCost& cost) {
  if (!recording) return;
  const OpContext context = current_op();
  Intent intent{kernel, context.op ? context.op : kernel, cost.backend, shape_text(cost.shape),
                context.op ? context.group : cost.fallback, cost.bytes, cost.flops};
  intent.optional = true;
  append(std::move(intent));
}

void intend(const char* kernel, const IntentInfo& info) {
  if (recording)
    append({kernel, info.op, info.backend, shape_text(info.shape), info.group, info.bytes, info.flops});
}

}  // namespace vt::trace
