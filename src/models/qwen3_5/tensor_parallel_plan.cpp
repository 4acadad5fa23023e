// The tensor-parallel plan: head and channel ranges per rank, checked once, and weight cutting.
#include "models/qwen3_5/tensor_parallel_plan.h"

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace vt {
namespace {

// `count` heads over `world` ranks: world divides count (each rank a contiguous block), or count
// divides world (each head replicated on world / count consecutive ranks).
std::vector<IndexRange> split_or_replicate(const std::string& what, int64_t count, int world,
                                           int* replicas) {
  std::vector<IndexRange> ranges;
  if (count % world == 0) {
    *replicas = 1;
    for (int r = 0; r < world; ++r) ranges.push_back({r * count / world, (r + 1) * count / world});
    return ranges;
  }
  VT_CHECK(world % count == 0, "tensor parallel size ", world, ": ", what, " = ", count,
           " must be divisible by it, or divide it (each head then replicated)");
  *replicas = int(world / count);
  for (int r = 0; r < world; ++r) ranges.push_back({r / *replicas, r / *replicas + 1});
  return ranges;
}

std::vector<IndexRange> split_evenly(const std::string& what, int64_t count, int world) {
  VT_CHECK(count % world == 0, "tensor parallel size ", world, ": ", what, " = ", count,
           " is not divisible by it");
  std::vector<IndexRange> ranges;
  for (int r = 0; r < world; ++r) ranges.push_back({r * count / world, (r + 1) * count / world});
  return ranges;
}

IndexRange scaled(IndexRange heads, int64_t width) {
  return {heads.begin * width, heads.end * width};
}
IndexRange shifted(IndexRange range, int64_t offset) {
  return {range.begin + offset, range.end + offset};
}

// Rows `ranges` (first dimension) of `source`, stacked in order; other dimensions kept.
Buffer gather_rows(const Buffer& source, const std::vector<IndexRange>& ranges) {
  const int64_t row_elements = source.numel() / source.shape()[0];
  Shape shape = source.shape();
  shape[0] = 0;
  for (const IndexRange& range : ranges) shape[0] += range.size();
  Buffer out(DType::kF32, shape);
  float* destination = out.f32();
  for (const IndexRange& range : ranges) {
    VT_CHECK(range.begin >= 0 && range.end <= source.shape()[0], "shard: rows [", range.begin, ", ",
             range.end, ") outside ", source.shape().str());
    std::memcpy(destination, source.f32() + range.begin * row_elements,
                range.size() * row_elements * sizeof(float));
    destination += range.size() * row_elements;
  }
  return out;
}

Buffer copy_of(const Buffer& source) {
  return gather_rows(source, {{0, source.shape()[0]}});
}

// Columns `range` of a matrix [rows, cols].
Buffer gather_columns(const Buffer& source, IndexRange range) {
  const int64_t rows = source.shape()[0], cols = source.shape()[1];
  VT_CHECK(range.begin >= 0 && range.end <= cols, "shard: columns [", range.begin, ", ", range.end,
           ") outside ", source.shape().str());
  Buffer out(DType::kF32, {rows, range.size()});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.f32() + r * range.size(), source.f32() + r * cols + range.begin,
                range.size() * sizeof(float));
  return out;
}

Linear with_weight(const Linear& full, Buffer weight) {
  return Linear::from_f32(std::move(weight), full.format(), full.quantizes_activations(),
                          full.group());
}
Linear column_parallel(const Linear& full, const std::vector<IndexRange>& rows) {
  return with_weight(full, gather_rows(full.weight(), rows));
}
Linear row_parallel(const Linear& full, IndexRange columns) {
  return with_weight(full, gather_columns(full.weight(), columns));
}
Linear replicated(const Linear& full) {
  return with_weight(full, copy_of(full.weight()));
}

MlpWeights shard_mlp(const MlpWeights& full, IndexRange slice) {
  MlpWeights w;
  w.gate_up = column_parallel(full.gate_up,
                              TensorParallelPlan::gate_up_rows(slice, full.down.in_features()));
  w.down = row_parallel(full.down, slice);
  return w;
}

}  // namespace

TensorParallelPlan::TensorParallelPlan(const Qwen35Config& config, int world_size)
    : config_(config), world_size_(world_size) {
  VT_CHECK(world_size >= 1, "tensor parallel size ", world_size, " must be at least 1");
  const int world = world_size;
  bool any_dense = false, any_moe = false;
  for (int64_t i = 0; i < config.num_layers; ++i)
    (config.layer_is_moe(i) ? any_moe : any_dense) = true;

  auto heads = split_evenly("attention heads (num_attention_heads)", config.num_heads, world);
  auto kv = split_or_replicate("KV heads (num_key_value_heads)", config.num_kv_heads, world,
                               &kv_head_replicas_);
  auto key = split_or_replicate("GDN key heads (linear_num_key_heads)", config.linear_num_key_heads,
                                world, &linear_key_head_replicas_);
  auto value = split_evenly("GDN value heads (linear_num_value_heads)",
                            config.linear_num_value_heads, world);
  std::vector<IndexRange> none(world), dense = none, expert = none, shared = none;
  if (any_dense)
    dense = split_evenly("MLP width (intermediate_size)", config.intermediate_size, world);
  if (any_moe)
    expert =
        split_evenly("expert width (moe_intermediate_size)", config.moe_intermediate_size, world);
  if (any_moe && config.shared_expert_intermediate_size > 0)
    shared = split_evenly("shared expert width (shared_expert_intermediate_size)",
                          config.shared_expert_intermediate_size, world);
  for (int r = 0; r < world; ++r)
    shards_.push_back({heads[r], kv[r], key[r], value[r], dense[r], expert[r], shared[r]});

  if (config.fp8 && world > 1) {
    // Per-rank widths of the block-scaled weights, as rows (n) or columns (k) of the slice.
    const RankShard& s = shards_[0];
    const int64_t d = config.head_dim, dk = config.linear_key_head_dim,
                  dv = config.linear_value_head_dim;
    struct Width {
      const char* what;
      int64_t size, block;
    };
    const int64_t bn = config.fp8->block_n, bk = config.fp8->block_k;
    std::vector<Width> widths = {
        {"q_proj rows (query heads x 2 x head_dim)", s.attention_heads.size() * 2 * d, bn},
        {"k_proj/v_proj rows (KV heads x head_dim)", s.kv_heads.size() * d, bn},
        {"o_proj columns (query heads x head_dim)", s.attention_heads.size() * d, bk},
        {"GDN q/k rows (key heads x key head dim)", s.linear_key_heads.size() * dk, bn},
        {"GDN v/z rows (value heads x value head dim)", s.linear_value_heads.size() * dv, bn},
        {"GDN out_proj columns (value heads x value head dim)", s.linear_value_heads.size() * dv,
         bk}};
    for (const auto& [what, slice] :
         {std::pair{"MLP width", s.intermediate}, std::pair{"expert width", s.moe_intermediate},
          std::pair{"shared expert width", s.shared_expert_intermediate}}) {
      widths.push_back({what, slice.size(), bn});
      widths.push_back({what, slice.size(), bk});
    }
    for (const Width& width : widths)
      VT_CHECK(width.size % width.block == 0, "tensor parallel size ", world, ": FP8 block-scaled ",
               width.what, " per rank = ", width.size, " is not a multiple of the ", width.block,
               "-wide scale block (each rank must hold whole blocks)");
  }
}

const RankShard& TensorParallelPlan::shard(int rank) const {
  VT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " outside the world of ", world_size_);
  return shards_[rank];
}

Qwen35Config TensorParallelPlan::rank_config(int rank) const {
  const RankShard& s = shard(rank);
  Qwen35Config config = config_;
  config.num_heads = s.attention_heads.size();
  config.num_kv_heads = s.kv_heads.size();
  config.linear_num_key_heads = s.linear_key_heads.size();
  config.linear_num_value_heads = s.linear_value_heads.size();
  config.intermediate_size = s.intermediate.size();
  config.moe_intermediate_size = s.moe_intermediate.size();
  config.shared_expert_intermediate_size = s.shared_expert_intermediate.size();
  return config;
}

std::string TensorParallelPlan::describe() const {
  std::ostringstream text;
  auto range = [](IndexRange r) { return str("[", r.begin, ", ", r.end, ")"); };
  text << "tensor parallel: " << world_size_ << " ranks, KV heads x" << kv_head_replicas_
       << ", GDN key heads x" << linear_key_head_replicas_ << " replicated\n";
  for (int r = 0; r < world_size_; ++r) {
    const RankShard& s = shards_[r];
    text << "  rank " << r << ": heads " << range(s.attention_heads) << " kv " << range(s.kv_heads)
         << ", gdn key " << range(s.linear_key_heads) << " value " << range(s.linear_value_heads);
    if (s.intermediate.size()) text << ", mlp " << range(s.intermediate);
    if (s.moe_intermediate.size()) text << ", expert " << range(s.moe_intermediate);
    if (s.shared_expert_intermediate.size())
      text << ", shared " << range(s.shared_expert_intermediate);
    text << "\n";
  }
  return text.str();
}

std::vector<IndexRange> TensorParallelPlan::attention_qkv_rows(int rank) const {
  const RankShard& s = shard(rank);
  const int64_t d = config_.head_dim, q_rows = config_.num_heads * 2 * d,
                kv_rows = config_.num_kv_heads * d;
  return {scaled(s.attention_heads, 2 * d), shifted(scaled(s.kv_heads, d), q_rows),
          shifted(scaled(s.kv_heads, d), q_rows + kv_rows)};
}

std::vector<IndexRange> TensorParallelPlan::gdn_conv_channels(int rank) const {
  const RankShard& s = shard(rank);
  const int64_t dk = config_.linear_key_head_dim, dv = config_.linear_value_head_dim;
  const int64_t key_dim = config_.linear_num_key_heads * dk;
  return {scaled(s.linear_key_heads, dk), shifted(scaled(s.linear_key_heads, dk), key_dim),
          shifted(scaled(s.linear_value_heads, dv), 2 * key_dim)};
}

std::vector<IndexRange> TensorParallelPlan::gdn_in_proj_rows(int rank) const {
  std::vector<IndexRange> rows = gdn_conv_channels(rank);
  rows.push_back(shifted(scaled(shard(rank).linear_value_heads, config_.linear_value_head_dim),
                         config_.conv_dim()));
  return rows;
}

std::vector<IndexRange> TensorParallelPlan::gdn_ba_rows(int rank) const {
  const IndexRange heads = shard(rank).linear_value_heads;
  return {heads, shifted(heads, config_.linear_num_value_heads)};
}

std::vector<IndexRange> TensorParallelPlan::gate_up_rows(IndexRange slice, int64_t full_width) {
  return {slice, shifted(slice, full_width)};
}

IndexRange TensorParallelPlan::attention_o_proj_columns(int rank) const {
  return scaled(shard(rank).attention_heads, config_.head_dim);
}

IndexRange TensorParallelPlan::gdn_out_proj_columns(int rank) const {
  return scaled(shard(rank).linear_value_heads, config_.linear_value_head_dim);
}

Qwen35Weights shard_qwen35_weights(const Qwen35Weights& full, const TensorParallelPlan& plan,
                                   int rank) {
  const RankShard& s = plan.shard(rank);
  Qwen35Weights weights;
  weights.embed_tokens = full.embed_tokens;
  for (const LayerWeights& layer : full.layers) {
    LayerWeights w;
    w.kind = layer.kind;
    w.input_norm = copy_of(layer.input_norm);
    w.post_attention_norm = copy_of(layer.post_attention_norm);
    if (layer.kind == LayerKind::kLinearAttention) {
      const GatedDeltaNetWeights& gdn = layer.gdn;
      w.gdn.in_proj = column_parallel(gdn.in_proj, plan.gdn_in_proj_rows(rank));
      w.gdn.in_proj_ba = column_parallel(gdn.in_proj_ba, plan.gdn_ba_rows(rank));
      w.gdn.conv_weight = gather_rows(gdn.conv_weight, plan.gdn_conv_channels(rank));
      w.gdn.a_log = gather_rows(gdn.a_log, {s.linear_value_heads});
      w.gdn.dt_bias = gather_rows(gdn.dt_bias, {s.linear_value_heads});
      w.gdn.norm = copy_of(gdn.norm);
      w.gdn.out_proj = row_parallel(gdn.out_proj, plan.gdn_out_proj_columns(rank));
    } else {
      const AttentionWeights& attention = layer.attention;
      w.attention.qkv = column_parallel(attention.qkv, plan.attention_qkv_rows(rank));
      w.attention.q_norm = copy_of(attention.q_norm);
      w.attention.k_norm = copy_of(attention.k_norm);
      w.attention.o_proj = row_parallel(attention.o_proj, plan.attention_o_proj_columns(rank));
    }
    w.is_moe = layer.is_moe;
    if (layer.is_moe) {
      const MoeWeights& moe = layer.moe;
      w.moe.router = replicated(moe.router);
      for (const MlpWeights& expert : moe.experts)
        w.moe.experts.push_back(shard_mlp(expert, s.moe_intermediate));
      if (s.shared_expert_intermediate.size()) {
        w.moe.shared_expert = shard_mlp(moe.shared_expert, s.shared_expert_intermediate);
        w.moe.shared_expert_gate = replicated(moe.shared_expert_gate);
      }
    } else {
      w.mlp = shard_mlp(layer.mlp, s.intermediate);
    }
    weights.layers.push_back(std::move(w));
  }
  weights.final_norm = copy_of(full.final_norm);
  weights.lm_head = replicated(full.lm_head);
  return weights;
}

}  // namespace vt
