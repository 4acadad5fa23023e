// Tensor-parallel sharding of the Qwen3.5 family: which heads, channels and rows/columns of each
// weight every rank of a world of W ranks owns, and the cutting of loaded weights into one rank's.
//
// Megatron layout: each block is a column-parallel projection (rank keeps some output rows), a
// local per-head core, and a row-parallel projection (rank keeps the matching input columns) whose
// partial outputs are summed by one all-reduce. So two all-reduces per layer, [T, hidden] each:
//   gated attention  qkv (column: a rank's query heads with their gates, and their KV heads)
//                    -> q/k norm, RoPE, GQA, gate -> o_proj (row)
//   Gated DeltaNet   in_proj (column: the rank's key heads' q and k channels, its value heads' v
//   and
//                    z channels) -> conv1d over those same channels, delta rule per value head with
//                    its recurrent state, gated norm (weight shared, per dv) -> out_proj (row)
//                    in_proj_b/a, A_log, dt_bias: the rank's value heads
//   dense MLP        gate_up (column: an intermediate slice of gate and of up) -> down (row)
//   MoE              router and shared-expert gate replicated (every rank routes the same way);
//                    each routed expert and the shared expert split like the dense MLP; the
//                    weighted combine of partials is summed once, after the shared expert
// Embeddings, norms and lm_head are replicated.
//
// KV and GDN key heads: when W exceeds their count, each head is replicated on W / count ranks
// (as vLLM does for KV heads); a rank's query (value) heads then all belong to its one KV (key)
// head. So W must divide the head count or be a multiple of it. Replication keeps every rank's
// attention / delta rule local and costs only the replicated rows (27B at TP=8: KV heads 4).
//
// MoE is split by tensor parallelism inside each expert rather than by expert parallelism: at the
// decode batches vt targets (1..64 tokens, top-8 of 256) every rank then reads exactly 1/W of each
// active expert, while expert parallelism leaves the step as slow as the rank that drew the most
// active experts and needs the routing to be balanced to pay off. Its limit: the expert width per
// rank shrinks (35B-A3B: 512 / W), and FP8 needs 128-wide slices, so TP <= 4 there; expert
// parallelism for larger worlds is future work.
//
// FP8 block-scaled checkpoints: every rank's slice of a quantised weight must cover whole 128x128
// scale blocks (and W8A8's 1x128 activation groups of a row-parallel input), so per-rank widths
// must be multiples of the block size; the plan checks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/qwen3_5/model.h"

namespace vt {

// Half-open [begin, end) of heads, channels, rows or columns, in the unsharded layout.
struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

// The heads and intermediate channels one rank owns.
struct RankShard {
  IndexRange attention_heads;   // query heads, each with its gate
  IndexRange kv_heads;          // shared by kv_head_replicas() ranks when W > num_kv_heads
  IndexRange linear_key_heads;  // GDN; shared by linear_key_head_replicas() ranks when W > Hk
  IndexRange
      linear_value_heads;       // GDN value heads (their state, conv channels, b/a, A_log, dt_bias)
  IndexRange intermediate;      // dense MLP
  IndexRange moe_intermediate;  // each routed expert's
  IndexRange shared_expert_intermediate;
};

class TensorParallelPlan {
 public:
  // Throws naming the dimension when `world_size` does not split it (see the header comment).
  TensorParallelPlan(const Qwen35Config& config, int world_size);

  int world_size() const { return world_size_; }
  const RankShard& shard(int rank) const;
  int kv_head_replicas() const { return kv_head_replicas_; }
  int linear_key_head_replicas() const { return linear_key_head_replicas_; }
  // The config rank `rank` runs: its own head counts and intermediate widths.
  Qwen35Config rank_config(int rank) const;
  // One line per rank: its head and channel ranges.
  std::string describe() const;

  // Rows (output features) of vt's merged weights that `rank` keeps, stacked in this order.
  // Attention qkv [Hq*2D + 2*Hkv*D, H]: its heads' [q | gate], then its KV heads' k, then v.
  std::vector<IndexRange> attention_qkv_rows(int rank) const;
  // GDN conv channels [conv_dim] (= rows of in_proj_qkv, channels of conv1d): q, k, v.
  std::vector<IndexRange> gdn_conv_channels(int rank) const;
  // GDN in_proj [conv_dim + Hv*dv, H]: the conv channels, then z of its value heads.
  std::vector<IndexRange> gdn_in_proj_rows(int rank) const;
  // GDN in_proj_ba [2*Hv, H]: b, then a, of its value heads.
  std::vector<IndexRange> gdn_ba_rows(int rank) const;
  // MLP gate_up [2*I, H] for a full width I: its gate rows, then its up rows.
  static std::vector<IndexRange> gate_up_rows(IndexRange slice, int64_t full_width);

  // Columns (input features) of the row-parallel weights that `rank` keeps.
  IndexRange attention_o_proj_columns(int rank) const;  // o_proj [H, Hq*D]
  IndexRange gdn_out_proj_columns(int rank) const;      // out_proj [H, Hv*dv]
                                                        // down [H, I]: the slice itself.

 private:
  Qwen35Config config_;
  int world_size_ = 1;
  int kv_head_replicas_ = 1, linear_key_head_replicas_ = 1;
  std::vector<RankShard> shards_;
};

// Rank `rank`'s weights cut from the full ones (as load_qwen35_weights returns them): split
// weights copied by the plan's ranges, replicated ones copied whole; embeddings stay a view
// into the checkpoint, which must outlive the result.
Qwen35Weights shard_qwen35_weights(const Qwen35Weights& full, const TensorParallelPlan& plan,
                                   int rank);

}  // namespace vt
