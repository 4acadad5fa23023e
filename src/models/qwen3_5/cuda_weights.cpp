// Device weights for the CUDA forward: from a checkpoint folder (merged projections, Qwen3-Next
// row order, FP8 blocks kept as stored) or synthetic at the real shapes.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/device.h"
#include "models/qwen3_5/cuda_model.h"
#include "models/qwen3_5/tensor_parallel_plan.h"

namespace vt {
namespace {

constexpr int64_t kFp8Block = 128;

// One checkpoint tensor read into host memory in its device format.
struct HostPart {
  WeightFormat format = WeightFormat::kDense;
  int64_t rows = 0, k = 0;
  std::vector<float> dense;     // [rows, k] f32 (dense)
  std::vector<uint8_t> codes;   // [rows, k] e4m3 (fp8)
  std::vector<float> scales;    // [ceil(rows/128), ceil(k/128)] (fp8)
};

struct Reader {
  WeightStore& store;
  const Qwen35Config& config;
  DType activations;

  HostPart read(const std::string& name, int64_t rows, int64_t k) {
    HostPart part;
    part.rows = rows;
    part.k = k;
    const std::string weight = name + ".weight";
    if (store.entry(weight).dtype == DType::kF8E4M3) {
      VT_CHECK(config.fp8 && config.fp8->block_n == kFp8Block && config.fp8->block_k == kFp8Block,
               store.file_of(weight), ": '", weight, "' is FP8: the CUDA path needs 128x128 block scales");
      TensorView codes = store.take(weight, {rows, k}, {DType::kF8E4M3});
      const Shape scale_shape{(rows + kFp8Block - 1) / kFp8Block, (k + kFp8Block - 1) / kFp8Block};
      TensorView scales = store.take(name + ".weight_scale_inv", scale_shape, {DType::kF32, DType::kBF16, DType::kF16});
      part.format = WeightFormat::kFp8Block;
      part.codes.assign(codes.as<uint8_t>(), codes.as<uint8_t>() + codes.numel());
      part.scales.resize(scales.numel());
      cpu::to_f32(part.scales.data(), scales.data, scales.dtype, scales.numel());
    } else {
      TensorView view = store.take(weight, {rows, k}, {DType::kF32, DType::kBF16, DType::kF16});
      part.dense.resize(view.numel());
      cpu::to_f32(part.dense.data(), view.data, view.dtype, view.numel());
    }
    return part;
  }

  Buffer host_vector(const std::string& name, const Shape& shape) {
    TensorView view = store.take(name, shape, {DType::kF32, DType::kBF16, DType::kF16});
    Buffer host(DType::kF32, shape);
    cpu::to_f32(host.f32(), view.data, view.dtype, view.numel());
    return host;
  }

  cuda::DeviceBuffer vector(const std::string& name, const Shape& shape) {
    return cuda::to_device(host_vector(name, shape));
  }
};

// ---- tensor-parallel slices (parallel/tensor_parallel_plan.h) ----

// Rows [begin, end) of a part. FP8 rows go in whole 128-row scale blocks (the plan checks that
// every rank's widths are multiples of the block).
HostPart slice_rows(const HostPart& part, int64_t begin, int64_t end) {
  HostPart out;
  out.format = part.format;
  out.rows = end - begin;
  out.k = part.k;
  const int64_t k = part.k;
  if (part.format == WeightFormat::kDense) {
    out.dense.assign(part.dense.begin() + begin * k, part.dense.begin() + end * k);
    return out;
  }
  VT_CHECK(begin % kFp8Block == 0 && (end % kFp8Block == 0 || end == part.rows), "FP8 rows [", begin, ", ", end,
           ") of a tensor-parallel slice do not cover whole 128-row scale blocks");
  const int64_t scale_cols = (k + kFp8Block - 1) / kFp8Block;
  out.codes.assign(part.codes.begin() + begin * k, part.codes.begin() + end * k);
  out.scales.assign(part.scales.begin() + (begin / kFp8Block) * scale_cols,
                    part.scales.begin() + ((end + kFp8Block - 1) / kFp8Block) * scale_cols);
  return out;
}

// Columns (input features) [begin, end) of every row: a row-parallel projection's slice.
HostPart slice_columns(const HostPart& part, IndexRange columns) {
  HostPart out;
  out.format = part.format;
  out.rows = part.rows;
  out.k = columns.size();
  const int64_t k = part.k, width = columns.size();
  if (part.format == WeightFormat::kDense) {
    out.dense.resize(size_t(part.rows * width));
    for (int64_t r = 0; r < part.rows; ++r)
      std::memcpy(&out.dense[r * width], &part.dense[r * k + columns.begin], width * sizeof(float));
    return out;
  }
  VT_CHECK(columns.begin % kFp8Block == 0 && (columns.end % kFp8Block == 0 || columns.end == k), "FP8 columns [",
           columns.begin, ", ", columns.end, ") of a tensor-parallel slice do not cover whole 128-column scale blocks");
  out.codes.resize(size_t(part.rows * width));
  for (int64_t r = 0; r < part.rows; ++r)
    std::memcpy(&out.codes[r * width], &part.codes[r * k + columns.begin], width);
  const int64_t scale_cols = (k + kFp8Block - 1) / kFp8Block, first = columns.begin / kFp8Block,
                kept = (width + kFp8Block - 1) / kFp8Block;
  for (int64_t rb = 0; rb < (part.rows + kFp8Block - 1) / kFp8Block; ++rb)
    out.scales.insert(out.scales.end(), part.scales.begin() + rb * scale_cols + first,
                      part.scales.begin() + rb * scale_cols + first + kept);
  return out;
}

// The rows `ranges` name in the parts stacked along N (as upload() merges them), in the ranges'
// order: one part per piece of a range that falls in one source part.
std::vector<HostPart> select_rows(const std::vector<HostPart>& parts, const std::vector<IndexRange>& ranges) {
  std::vector<HostPart> out;
  for (const IndexRange& range : ranges) {
    int64_t offset = 0;
    for (const HostPart& part : parts) {
      const int64_t begin = std::max(range.begin, offset), end = std::min(range.end, offset + part.rows);
      if (begin < end) out.push_back(slice_rows(part, begin - offset, end - offset));
      offset += part.rows;
    }
  }
  return out;
}

// Rows of an f32 host tensor [rows, ...] kept by `ranges`, on the device.
cuda::DeviceBuffer vector_rows(const Buffer& host, const std::vector<IndexRange>& ranges) {
  const int64_t rows = host.shape()[0], width = host.numel() / rows;
  int64_t kept = 0;
  for (const IndexRange& range : ranges) kept += range.size();
  Shape shape = host.shape();
  shape[0] = kept;
  Buffer out(DType::kF32, shape);
  int64_t offset = 0;
  for (const IndexRange& range : ranges) {
    std::memcpy(out.f32() + offset * width, host.f32() + range.begin * width, size_t(range.size() * width) * sizeof(float));
    offset += range.size();
  }
  return cuda::to_device(out);
}

// What one rank keeps (everything when there is no plan).
struct Slicer {
  const TensorParallelPlan* plan = nullptr;
  int rank = 0;
  std::vector<HostPart> rows(std::vector<HostPart> parts, const std::vector<IndexRange>& ranges) const {
    return plan ? select_rows(parts, ranges) : parts;
  }
  HostPart columns(HostPart part, IndexRange range) const { return plan ? slice_columns(part, range) : part; }
  cuda::DeviceBuffer vector(const Buffer& host, const std::vector<IndexRange>& ranges) const {
    return plan ? vector_rows(host, ranges) : cuda::to_device(host);
  }
  const RankShard& shard() const { return plan->shard(rank); }
};

// Rows reordered: destination row r is source row source_row[r]. FP8 rows move in whole blocks.
HostPart permute_rows(const HostPart& part, const std::vector<int64_t>& source_row) {
  HostPart out = part;
  const int64_t k = part.k;
  if (part.format == WeightFormat::kDense) {
    for (size_t r = 0; r < source_row.size(); ++r)
      std::memcpy(&out.dense[r * k], &part.dense[source_row[r] * k], k * sizeof(float));
    return out;
  }
  const int64_t scale_cols = (k + kFp8Block - 1) / kFp8Block;
  for (size_t r = 0; r < source_row.size(); ++r) {
    VT_CHECK(source_row[r] % kFp8Block == int64_t(r % kFp8Block) && source_row[r - r % kFp8Block] % kFp8Block == 0,
             "FP8 Qwen3-Next in_proj rows do not move in whole 128-row blocks");
    std::memcpy(&out.codes[r * k], &part.codes[source_row[r] * k], k);
    if (r % kFp8Block == 0)
      std::memcpy(&out.scales[(r / kFp8Block) * scale_cols], &part.scales[(source_row[r] / kFp8Block) * scale_cols],
                  scale_cols * sizeof(float));
  }
  return out;
}

// Uploads parts as one CudaLinear, merging neighbours into one launch where block scales allow.
CudaLinear upload(std::vector<HostPart> parts, DType activations) {
  CudaLinear linear;
  linear.k = parts.front().k;
  linear.format = parts.front().format;
  size_t first = 0;
  while (first < parts.size()) {
    // Merge [first, last): dense always; FP8 while every part but the last is whole blocks.
    size_t last = first + 1;
    while (last < parts.size() && (linear.format == WeightFormat::kDense || parts[last - 1].rows % kFp8Block == 0))
      ++last;
    int64_t rows = 0;
    for (size_t i = first; i < last; ++i) {
      VT_CHECK(parts[i].format == linear.format && parts[i].k == linear.k, "merged linear parts differ in format");
      rows += parts[i].rows;
    }
    CudaLinear::Part part;
    part.n = rows;
    part.column = linear.n;
    if (linear.format == WeightFormat::kDense) {
      Buffer host(activations, {rows, linear.k});
      int64_t offset = 0;
      for (size_t i = first; i < last; ++i)
        for (float value : parts[i].dense) {
          if (activations == DType::kF32) host.view().as<float>()[offset++] = value;
          else host.view().as<uint16_t>()[offset++] = f32_to_bf16(value);
        }
      part.weight = cuda::to_device(host);
    } else {
      Buffer codes(DType::kU8, {rows, linear.k});
      const int64_t scale_cols = (linear.k + kFp8Block - 1) / kFp8Block;
      Buffer scales(DType::kF32, {(rows + kFp8Block - 1) / kFp8Block, scale_cols});
      int64_t code_offset = 0, scale_offset = 0;
      for (size_t i = first; i < last; ++i) {
        std::memcpy(codes.view().as<uint8_t>() + code_offset, parts[i].codes.data(), parts[i].codes.size());
        std::memcpy(scales.f32() + scale_offset, parts[i].scales.data(), parts[i].scales.size() * sizeof(float));
        code_offset += int64_t(parts[i].codes.size());
        scale_offset += int64_t(parts[i].scales.size());
      }
      part.weight = cuda::to_device(codes);
      part.scales = cuda::to_device(scales);
    }
    linear.n += rows;
    linear.parts.push_back(std::move(part));
    first = last;
  }
  return linear;
}

std::vector<int64_t> next_qkvz_order(const Qwen35Config& c) {
  const int64_t hk = c.linear_num_key_heads, dk = c.linear_key_head_dim;
  const int64_t r = c.linear_num_value_heads / hk, dv = c.linear_value_head_dim, group = 2 * dk + 2 * r * dv;
  const int64_t offsets[4] = {0, dk, 2 * dk, 2 * dk + r * dv}, sizes[4] = {dk, dk, r * dv, r * dv};
  std::vector<int64_t> order;
  for (int part = 0; part < 4; ++part)
    for (int64_t g = 0; g < hk; ++g)
      for (int64_t i = 0; i < sizes[part]; ++i) order.push_back(g * group + offsets[part] + i);
  return order;
}

std::vector<int64_t> next_ba_order(const Qwen35Config& c) {
  const int64_t hk = c.linear_num_key_heads, r = c.linear_num_value_heads / hk;
  std::vector<int64_t> order;
  for (int part = 0; part < 2; ++part)
    for (int64_t g = 0; g < hk; ++g)
      for (int64_t i = 0; i < r; ++i) order.push_back(g * 2 * r + part * r + i);
  return order;
}

// Stacks experts' parts into one device tensor [E, rows, k] (+ scales [E, rows/128, k/128]).
// Each expert's parts are concatenated along rows first (gate then up).
void stack_experts(const std::vector<std::vector<HostPart>>& experts, DType activations, cuda::DeviceBuffer* weights,
                   cuda::DeviceBuffer* scales) {
  const HostPart& first = experts.front().front();
  int64_t rows = 0;
  for (const auto& part : experts.front()) rows += part.rows;
  const int64_t count = int64_t(experts.size()), k = first.k;
  if (first.format == WeightFormat::kDense) {
    Buffer host(activations, {count, rows, k});
    int64_t offset = 0;
    for (const auto& expert : experts)
      for (const auto& part : expert)
        for (float value : part.dense) {
          if (activations == DType::kF32) host.view().as<float>()[offset++] = value;
          else host.view().as<uint16_t>()[offset++] = f32_to_bf16(value);
        }
    *weights = cuda::to_device(host);
    return;
  }
  for (const auto& expert : experts)
    for (size_t i = 0; i + 1 < expert.size(); ++i)
      VT_CHECK(expert[i].format == WeightFormat::kFp8Block && expert[i].rows % kFp8Block == 0,
               "FP8 experts: stacked parts need whole 128-row blocks (rows ", expert[i].rows, ")");
  const int64_t scale_rows = (rows + kFp8Block - 1) / kFp8Block, scale_cols = (k + kFp8Block - 1) / kFp8Block;
  Buffer codes(DType::kU8, {count, rows, k}), block_scales(DType::kF32, {count, scale_rows, scale_cols});
  int64_t code_offset = 0, scale_offset = 0;
  for (const auto& expert : experts)
    for (const auto& part : expert) {
      VT_CHECK(part.format == WeightFormat::kFp8Block, "MoE experts mix FP8 and unquantised weights");
      std::memcpy(codes.view().as<uint8_t>() + code_offset, part.codes.data(), part.codes.size());
      std::memcpy(block_scales.f32() + scale_offset, part.scales.data(), part.scales.size() * sizeof(float));
      code_offset += int64_t(part.codes.size());
      scale_offset += int64_t(part.scales.size());
    }
  *weights = cuda::to_device(codes);
  *scales = cuda::to_device(block_scales);
}

// Routed experts and the shared expert split like the dense MLP (a slice of each expert's
// intermediate); the router and the shared expert's gate are replicated. A shared expert as wide
// as a routed one on this rank, in the same format, with a dense gate, is stacked as expert E and
// its gate as router row E (CudaMoe::shared_folded); otherwise it stays its own MLP.
CudaMoe load_moe(Reader& read, const std::string& p, const Qwen35Config& config, DType activations,
                 const Slicer& slice) {
  const int64_t hidden = config.hidden_size, experts = config.num_experts, inter = config.moe_intermediate_size;
  CudaMoe moe;
  moe.experts = experts;
  moe.intermediate = slice.plan ? slice.shard().moe_intermediate.size() : inter;
  HostPart router = read.read(p + "gate", experts, hidden);
  std::vector<std::vector<HostPart>> gate_up(experts), down(experts);
  if (read.store.contains(p + "experts.gate_up_proj")) {
    // Fused 3-D layout: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
    for (auto [name, rows, k, target] : {std::tuple{"gate_up_proj", 2 * inter, hidden, &gate_up},
                                         std::tuple{"down_proj", hidden, inter, &down}}) {
      TensorView view = read.store.take(p + "experts." + name, {experts, rows, k}, {DType::kF32, DType::kBF16, DType::kF16});
      for (int64_t e = 0; e < experts; ++e) {
        HostPart part;
        part.rows = rows;
        part.k = k;
        part.dense.resize(size_t(rows * k));
        cpu::to_f32(part.dense.data(), static_cast<const char*>(view.data) + e * rows * k * dtype_size(view.dtype),
                    view.dtype, rows * k);
        (*target)[e].push_back(std::move(part));
      }
    }
  } else {
    for (int64_t e = 0; e < experts; ++e) {
      const std::string expert = p + "experts." + std::to_string(e) + ".";
      gate_up[e].push_back(read.read(expert + "gate_proj", inter, hidden));
      gate_up[e].push_back(read.read(expert + "up_proj", inter, hidden));
      down[e].push_back(read.read(expert + "down_proj", hidden, inter));
    }
  }
  moe.format = gate_up.front().front().format;
  if (slice.plan) {
    const IndexRange own = slice.shard().moe_intermediate;
    for (int64_t e = 0; e < experts; ++e) {
      gate_up[e] = slice.rows(std::move(gate_up[e]), TensorParallelPlan::gate_up_rows(own, inter));
      down[e] = {slice.columns(std::move(down[e].front()), own)};
    }
  }
  std::vector<HostPart> router_rows{std::move(router)};
  if (config.shared_expert_intermediate_size > 0) {
    const int64_t shared = config.shared_expert_intermediate_size;
    moe.has_shared = true;
    const IndexRange own = slice.plan ? slice.shard().shared_expert_intermediate : IndexRange{0, shared};
    std::vector<HostPart> shared_gate_up = slice.rows({read.read(p + "shared_expert.gate_proj", shared, hidden),
                                                       read.read(p + "shared_expert.up_proj", shared, hidden)},
                                                      TensorParallelPlan::gate_up_rows(own, shared));
    HostPart shared_down = slice.columns(read.read(p + "shared_expert.down_proj", hidden, shared), own);
    HostPart gate = read.read(p + "shared_expert_gate", 1, hidden);
    bool fold = own.size() == moe.intermediate && shared_down.format == moe.format &&
                gate.format == WeightFormat::kDense && router_rows.front().format == WeightFormat::kDense;
    for (const HostPart& part : shared_gate_up) fold = fold && part.format == moe.format;
    if (fold) {
      moe.shared_folded = true;
      gate_up.push_back(std::move(shared_gate_up));
      down.push_back({std::move(shared_down)});
      router_rows.push_back(std::move(gate));
    } else {
      moe.shared.gate_up = upload(std::move(shared_gate_up), activations);
      moe.shared.down = upload({std::move(shared_down)}, activations);
      moe.shared_gate = upload({std::move(gate)}, activations);
    }
  }
  if (const int64_t pad = moe.router_rows() - moe.stacked(); pad > 0) {
    HostPart zeros;
    zeros.rows = pad;
    zeros.k = hidden;
    zeros.dense.assign(size_t(pad * hidden), 0.0f);
    router_rows.push_back(std::move(zeros));
  }
  moe.router = upload(std::move(router_rows), activations);  // dense: one part, [router_rows(), H]
  stack_experts(gate_up, activations, &moe.gate_up, &moe.gate_up_scales);
  stack_experts(down, activations, &moe.down, &moe.down_scales);
  return moe;
}

}  // namespace

size_t CudaMoe::expert_bytes() const {
  size_t total = gate_up.bytes() + down.bytes();
  if (gate_up_scales.data()) total += gate_up_scales.bytes() + down_scales.bytes();
  return experts ? total / size_t(stacked()) : 0;
}

size_t CudaLinear::bytes() const {
  size_t total = 0;
  for (const auto& part : parts) total += part.weight.bytes() + (part.scales.data() ? part.scales.bytes() : 0);
  if (exact_count > 0) total += exact_weight.bytes() + exact_columns.bytes();
  return total;
}

size_t CudaWeights::bytes() const {
  size_t total = lm_head.bytes() + final_norm.bytes();
  for (const auto& layer : layers)
    total += layer.in_proj.bytes() + layer.in_proj_ba.bytes() + layer.out_proj.bytes() + layer.qkv.bytes() +
             layer.o_proj.bytes() + layer.mlp.gate_up.bytes() + layer.mlp.down.bytes() + layer.moe.router.bytes() +
             layer.moe.expert_bytes() * size_t(layer.moe.stacked()) + layer.moe.shared.gate_up.bytes() +
             layer.moe.shared.down.bytes() + layer.moe.shared_gate.bytes();
  return total;
}

CudaWeights load_cuda_weights(WeightStore& store, const Qwen35Config& config, DType activations,
                              const TensorParallelPlan* plan, int rank, bool load_mtp) {
  VT_CHECK(!load_mtp || !plan, "the MTP head is not loaded on tensor-parallel ranks");
  // Checked before any upload: a checkpoint without the head fails at once, not after its weights.
  VT_CHECK(!load_mtp || store.contains("mtp.fc.weight"), store.dir(),
           ": the checkpoint has no MTP head (no mtp.fc.weight), needed by MTP drafting");
  VT_CHECK(!load_mtp || (config.mtp_num_layers <= 1 && !store.contains("mtp.layers.1.input_layernorm.weight")),
           store.dir(), ": an MTP head of ", std::max<int64_t>(config.mtp_num_layers, 2), " layers; vt runs one");
  Reader read{store, config, activations};
  const Slicer slice{plan, rank};
  const std::string& prefix = config.weight_prefix;
  const int64_t hidden = config.hidden_size, hv = config.linear_num_value_heads, d = config.head_dim;
  CudaWeights weights;
  TensorView embed = store.take(prefix + "embed_tokens.weight", {config.vocab_size, hidden},
                                {DType::kF32, DType::kBF16, DType::kF16});
  weights.embed_tokens = cuda::to_device(embed);
  // One decoder layer under `p` (the MTP head's too): its kind, and a dense or MoE FFN.
  const auto load_layer = [&](const std::string& p, LayerKind kind, bool is_moe) {
    CudaLayer layer;
    layer.kind = kind;
    layer.input_norm = read.vector(p + "input_layernorm.weight", {hidden});
    layer.post_attention_norm = read.vector(p + "post_attention_layernorm.weight", {hidden});
    if (layer.kind == LayerKind::kLinearAttention) {
      const std::string a = p + "linear_attn.";
      const int64_t conv_dim = config.conv_dim(), value_dim = config.linear_value_dim();
      std::vector<HostPart> in_proj, in_proj_ba;
      if (config.variant == Qwen35Variant::kQwen3Next) {
        in_proj = {permute_rows(read.read(a + "in_proj_qkvz", conv_dim + value_dim, hidden), next_qkvz_order(config))};
        in_proj_ba = {permute_rows(read.read(a + "in_proj_ba", 2 * hv, hidden), next_ba_order(config))};
      } else {
        in_proj = {read.read(a + "in_proj_qkv", conv_dim, hidden), read.read(a + "in_proj_z", value_dim, hidden)};
        in_proj_ba = {read.read(a + "in_proj_b", hv, hidden), read.read(a + "in_proj_a", hv, hidden)};
      }
      const IndexRange value_heads = plan ? slice.shard().linear_value_heads : IndexRange{0, hv};
      layer.in_proj = upload(slice.rows(std::move(in_proj), plan ? plan->gdn_in_proj_rows(rank) : std::vector<IndexRange>{}),
                             activations);
      layer.in_proj_ba =
          upload(slice.rows(std::move(in_proj_ba), plan ? plan->gdn_ba_rows(rank) : std::vector<IndexRange>{}), activations);
      layer.conv_weight = slice.vector(read.host_vector(a + "conv1d.weight", {conv_dim, 1, config.linear_conv_kernel}),
                                       plan ? plan->gdn_conv_channels(rank) : std::vector<IndexRange>{});
      layer.a_log = slice.vector(read.host_vector(a + "A_log", {hv}), {value_heads});
      layer.dt_bias = slice.vector(read.host_vector(a + "dt_bias", {hv}), {value_heads});
      layer.gdn_norm = read.vector(a + "norm.weight", {config.linear_value_head_dim});
      layer.out_proj = upload({slice.columns(read.read(a + "out_proj", hidden, value_dim),
                                             plan ? plan->gdn_out_proj_columns(rank) : IndexRange{0, value_dim})},
                              activations);
    } else {
      const std::string a = p + "self_attn.";
      layer.qkv = upload(slice.rows({read.read(a + "q_proj", config.num_heads * d * 2, hidden),
                                     read.read(a + "k_proj", config.num_kv_heads * d, hidden),
                                     read.read(a + "v_proj", config.num_kv_heads * d, hidden)},
                                    plan ? plan->attention_qkv_rows(rank) : std::vector<IndexRange>{}),
                         activations);
      layer.q_norm = read.vector(a + "q_norm.weight", {d});
      layer.k_norm = read.vector(a + "k_norm.weight", {d});
      layer.o_proj = upload({slice.columns(read.read(a + "o_proj", hidden, config.num_heads * d),
                                           plan ? plan->attention_o_proj_columns(rank) : IndexRange{0, config.num_heads * d})},
                            activations);
    }
    layer.is_moe = is_moe;
    if (layer.is_moe) {
      layer.moe = load_moe(read, p + "mlp.", config, activations, slice);
    } else {
      const int64_t inter = config.intermediate_size;
      const IndexRange own = plan ? slice.shard().intermediate : IndexRange{0, inter};
      layer.mlp.gate_up = upload(slice.rows({read.read(p + "mlp.gate_proj", inter, hidden),
                                             read.read(p + "mlp.up_proj", inter, hidden)},
                                            TensorParallelPlan::gate_up_rows(own, inter)),
                                 activations);
      layer.mlp.down = upload({slice.columns(read.read(p + "mlp.down_proj", hidden, inter), own)}, activations);
    }
    return layer;
  };
  for (int64_t i = 0; i < config.num_layers; ++i)
    weights.layers.push_back(load_layer(prefix + "layers." + std::to_string(i) + ".", config.layer_types[i],
                                        config.layer_is_moe(i)));
  weights.final_norm = read.vector(prefix + "norm.weight", {hidden});
  if (config.tie_word_embeddings) {
    HostPart tied;
    tied.rows = config.vocab_size;
    tied.k = hidden;
    tied.dense.resize(embed.numel());
    cpu::to_f32(tied.dense.data(), embed.data, embed.dtype, embed.numel());
    weights.lm_head = upload({std::move(tied)}, activations);
  } else {
    weights.lm_head = upload({read.read("lm_head", config.vocab_size, hidden)}, activations);
  }
  if (config.has_vision_tower) store.ignore_prefix("model.visual.", "vision tower (text-only inference)");
  if (load_mtp) {
    // The head under `mtp.` (top level in every layout), as the CPU loader reads it: one
    // full-attention decoder layer whose FFN is the family's layer-0 kind.
    CudaMtp mtp;
    mtp.pre_fc_norm_embedding = read.vector("mtp.pre_fc_norm_embedding.weight", {hidden});
    mtp.pre_fc_norm_hidden = read.vector("mtp.pre_fc_norm_hidden.weight", {hidden});
    mtp.fc = upload({read.read("mtp.fc", hidden, 2 * hidden)}, activations);
    mtp.layer = load_layer("mtp.layers.0.", LayerKind::kFullAttention, config.layer_is_moe(0));
    mtp.norm = read.vector("mtp.norm.weight", {hidden});
    weights.mtp = std::move(mtp);
  } else {
    store.ignore_prefix("mtp.", "multi-token-prediction head (loaded for --speculative mtp)");
  }
  store.finish();
  return weights;
}

// ---- synthetic weights ----

Qwen35Config synthetic_config(const std::string& name) {
  Qwen35Config c;
  c.architecture = "synthetic " + name;
  c.vocab_size = 248320;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 262144;
  c.head_dim = 256;
  c.rotary_dim = 64;
  c.rope.theta = 1e7f;
  c.linear_key_head_dim = c.linear_value_head_dim = 128;
  c.linear_conv_kernel = 4;
  if (name == "qwen3.5-27b") {
    c.hidden_size = 5120, c.num_layers = 64, c.num_heads = 24, c.num_kv_heads = 4;
    c.linear_num_key_heads = 16, c.linear_num_value_heads = 48, c.intermediate_size = 17408;
  } else if (name == "qwen3.5-35b-a3b" || name == "qwen3-next-80b") {
    const bool next = name == "qwen3-next-80b";
    c.variant = next ? Qwen35Variant::kQwen3Next : Qwen35Variant::kQwen35Moe;
    c.hidden_size = 2048, c.num_layers = next ? 48 : 40, c.num_heads = 16, c.num_kv_heads = 2;
    c.linear_num_key_heads = 16, c.linear_num_value_heads = 32;
    c.num_experts = next ? 512 : 256, c.num_experts_per_tok = next ? 10 : 8;
    c.moe_intermediate_size = 512, c.shared_expert_intermediate_size = 512;
    if (next) c.vocab_size = 151936;
  } else {
    VT_FAIL("unknown synthetic model '", name, "' (qwen3.5-27b, qwen3.5-35b-a3b, qwen3-next-80b)");
  }
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention);
  return c;
}

namespace {

struct Synthesizer {
  bool fp8;
  uint64_t seed;

  uint64_t next() { return ++seed; }
  CudaLinear linear(int64_t n, int64_t k, bool quantize) {
    CudaLinear out;
    out.n = n, out.k = k;
    CudaLinear::Part part;
    part.n = n;
    if (fp8 && quantize) {
      out.format = WeightFormat::kFp8Block;
      part.weight = cuda::DeviceBuffer(DType::kU8, {n, k});
      cuda::fill_random_fp8(part.weight.as<uint8_t>(), n * k, next(), nullptr);
      part.scales = cuda::DeviceBuffer(DType::kF32, {(n + 127) / 128, (k + 127) / 128});
      cuda::fill_random(part.scales.data(), DType::kF32, part.scales.shape().numel(), next(), 2e-5f, 6e-5f, nullptr);
    } else {
      part.weight = cuda::DeviceBuffer(DType::kBF16, {n, k});
      cuda::fill_random(part.weight.data(), DType::kBF16, n * k, next(), 0.02f, 0.0f, nullptr);
    }
    out.parts.push_back(std::move(part));
    return out;
  }
  // Stacked experts at the real shapes; the router and shared-expert gate stay BF16. A shared
  // expert of the routed width is folded in (expert E, router row E), as load_moe folds it.
  CudaMoe moe(const Qwen35Config& c) {
    CudaMoe out;
    const int64_t inter = c.moe_intermediate_size, hidden = c.hidden_size;
    out.experts = c.num_experts;
    out.intermediate = inter;
    out.has_shared = c.shared_expert_intermediate_size > 0;
    out.shared_folded = out.has_shared && c.shared_expert_intermediate_size == inter;
    const int64_t e = out.stacked();
    out.router = linear(out.router_rows(), hidden, false);
    out.format = fp8 ? WeightFormat::kFp8Block : WeightFormat::kDense;
    for (auto [weights, scales, rows, k] : {std::tuple{&out.gate_up, &out.gate_up_scales, 2 * inter, hidden},
                                            std::tuple{&out.down, &out.down_scales, hidden, inter}}) {
      if (fp8) {
        *weights = cuda::DeviceBuffer(DType::kU8, {e, rows, k});
        cuda::fill_random_fp8(weights->as<uint8_t>(), e * rows * k, next(), nullptr);
        *scales = cuda::DeviceBuffer(DType::kF32, {e, (rows + 127) / 128, (k + 127) / 128});
        cuda::fill_random(scales->data(), DType::kF32, scales->shape().numel(), next(), 2e-5f, 6e-5f, nullptr);
      } else {
        *weights = cuda::DeviceBuffer(DType::kBF16, {e, rows, k});
        cuda::fill_random(weights->data(), DType::kBF16, e * rows * k, next(), 0.02f, 0.0f, nullptr);
      }
    }
    if (out.has_shared && !out.shared_folded) {
      out.shared.gate_up = linear(2 * c.shared_expert_intermediate_size, hidden, true);
      out.shared.down = linear(hidden, c.shared_expert_intermediate_size, true);
      out.shared_gate = linear(1, hidden, false);
    }
    return out;
  }
  cuda::DeviceBuffer vector(int64_t n, float scale, float offset) {
    cuda::DeviceBuffer buffer(DType::kF32, {n});
    cuda::fill_random(buffer.data(), DType::kF32, n, next(), scale, offset, nullptr);
    return buffer;
  }
};

}  // namespace

CudaWeights synthetic_cuda_weights(const Qwen35Config& c, bool fp8, uint64_t seed) {
  Synthesizer make{fp8, seed};
  const int64_t hidden = c.hidden_size, hv = c.linear_num_value_heads, d = c.head_dim;
  CudaWeights weights;
  weights.embed_tokens = cuda::DeviceBuffer(DType::kBF16, {c.vocab_size, hidden});
  cuda::fill_random(weights.embed_tokens.data(), DType::kBF16, c.vocab_size * hidden, make.next(), 0.5f, 0.0f, nullptr);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    CudaLayer layer;
    layer.kind = c.layer_types[i];
    layer.input_norm = make.vector(hidden, 0.1f, 0.0f);
    layer.post_attention_norm = make.vector(hidden, 0.1f, 0.0f);
    if (layer.kind == LayerKind::kLinearAttention) {
      // BF16 in FP8 checkpoints too: in_proj_a/b and conv1d (QWEN35.md, "FP8 checkpoints").
      layer.in_proj = make.linear(c.conv_dim() + c.linear_value_dim(), hidden, true);
      layer.in_proj_ba = make.linear(2 * hv, hidden, false);
      layer.conv_weight = make.vector(c.conv_dim() * c.linear_conv_kernel, 0.3f, 0.0f);
      layer.a_log = make.vector(hv, 1.0f, 0.0f);
      layer.dt_bias = make.vector(hv, 0.5f, 0.0f);
      layer.gdn_norm = make.vector(c.linear_value_head_dim, 0.1f, 1.0f);
      layer.out_proj = make.linear(hidden, c.linear_value_dim(), true);
    } else {
      layer.qkv = make.linear(c.num_heads * d * 2 + 2 * c.num_kv_heads * d, hidden, true);
      layer.q_norm = make.vector(d, 0.1f, 0.0f);
      layer.k_norm = make.vector(d, 0.1f, 0.0f);
      layer.o_proj = make.linear(hidden, c.num_heads * d, true);
    }
    layer.is_moe = c.layer_is_moe(i);
    if (layer.is_moe) {
      layer.moe = make.moe(c);
    } else {
      layer.mlp.gate_up = make.linear(2 * c.intermediate_size, hidden, true);
      layer.mlp.down = make.linear(hidden, c.intermediate_size, true);
    }
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = make.vector(hidden, 0.1f, 0.0f);
  weights.lm_head = make.linear(c.vocab_size, hidden, false);  // BF16 lm_head, as checkpoints ship it
  cuda::synchronize();
  return weights;
}

}  // namespace vt
