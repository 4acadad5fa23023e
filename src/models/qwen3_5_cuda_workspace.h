// The CUDA model's step workspace: buffers for the widest step, KV caches, GDN state slots and
// rollback windows, allocated once at construction (qwen3_5_cuda.cpp), and the target sequences'
// host-side state. Internal to the model's source files (qwen3_5_cuda*.cpp).
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_buffer.h"
#include "models/qwen3_5_cuda.h"

namespace vt {

// A target sequence: its slot's KV blocks and GDN states, its rollback window's bounds, and the
// positions whose hidden states it keeps (keep_hidden; qwen3_5_cuda_mtp.cpp).
class CudaSequence final : public SequenceState {
 public:
  CudaSequence(int64_t slot, int64_t capacity, std::vector<bool>* used) : slot_(slot), used_(used) {
    capacity_ = capacity;
  }
  ~CudaSequence() override { (*used_)[slot_] = false; }
  int64_t slot() const { return slot_; }
  // As the CPU reference's state: outside a window the floor follows the length.
  void advance(int64_t tokens) {
    length_ += tokens;
    if (!window_open_) rollback_floor_ = length_;
  }
  bool window_open() const { return window_open_; }
  void open_window() {
    window_open_ = true;
    rollback_floor_ = length_;
  }
  void close_window() {
    window_open_ = false;
    rollback_floor_ = length_;
  }
  void set_length(int64_t length) { length_ = length; }
  // Kept hidden states: positions [kept_start, kept_start + kept_count), those below the length
  // valid (a rollback leaves the rest until the next forward replaces them); position p lies in
  // row p % Workspace::sequence_hidden_rows of the slot's ring.
  int64_t kept_start = 0, kept_count = 0;

 private:
  int64_t slot_;
  std::vector<bool>* used_;
  bool window_open_ = false;
};

struct Qwen35CudaModel::Workspace {
  int64_t max_tokens = 0, max_seqs = 0, max_blocks = 0;
  // State slots: one per sequence plus a scratch slot (the last) that graph warm-ups run on, so
  // capturing a decode graph never advances a live sequence's state.
  int64_t state_slots = 0;
  cuda::DeviceBuffer x, normed, branch;   // [T, H] act: residual stream, norm output, block output
  // The block output as an FP8 GEMM's partials instead of in `branch` (project_branch), when set.
  std::optional<cuda::GemmPartials> branch_partials;
  cuda::DeviceBuffer projected;           // [T, widest projection] act
  cuda::DeviceBuffer ba;                  // [T, 2*Hv] act
  cuda::DeviceBuffer conv_out;            // [T, conv_dim] f32
  cuda::DeviceBuffer mixer_out;           // [T, widest mixer/MLP inner width] act
  cuda::DeviceBuffer q, gate;             // [T, Hq*D] f32 / act
  cuda::DeviceBuffer attention_partials;  // split-key attention partials, f32
  // MoE: router logits [T, E], routes [T*k] (ids i32, weights f32), per-pair expert activations
  // [T*k, 2I] / [T*k, I] / [T*k, H], shared expert output [T, H] and gate [T, 1].
  cuda::DeviceBuffer router_logits, route_ids, route_weights, expert_hidden, expert_act, expert_out;
  cuda::DeviceBuffer shared_out, shared_gate;
  // FP8 activations [rows, widest K] e4m3 and [rows, K/128] scales: `quantized` holds a norm's
  // output (fused into the norm; read by every linear of the block), `inner` a mixer's or
  // SwiGLU's output (fused into gdn_recurrent / attention combine / silu_mul), `scratch` what a
  // linear quantises itself when nothing upstream did.
  cuda::DeviceBuffer quantized, scales, inner, inner_scales, scratch, scratch_scales;
  cuda::DeviceBuffer last_hidden, logits; // [rows, H], [rows, V] act
  cuda::DeviceBuffer next_tokens;         // [S] i32
  cuda::DeviceBuffer metadata;            // i32: see upload_layout
  cuda::DeviceBuffer block_tables;        // [slots, max_blocks] i32 (static: slot s owns its own blocks)
  int32_t* host_metadata = nullptr;       // pinned staging for one step's metadata
  uint16_t* host_logits = nullptr;        // pinned staging for bf16 logits [rows, V] on their way to f32
  int64_t kv_tokens = 0;                  // keys this step's tokens attend to (sum of position + 1)
  size_t metadata_ints = 0;
  cuda::StepLayout layout;
  const int32_t* token_ids = nullptr;
  const int32_t* last_index = nullptr;
  std::vector<cuda::DeviceBuffer> k_cache, v_cache;       // per layer (attention layers only)
  std::vector<cuda::DeviceBuffer> conv_state, recurrent;  // per layer (GDN layers only)
  // Rollback windows (max_rollback_tokens > 0), per GDN layer: [S, entries, <state>] f32 for the
  // sequence slots (the scratch slot never keeps one). window_entry: metadata [S] (upload_layout);
  // writes_window: the uploaded step has a sequence that keeps its window.
  std::vector<cuda::DeviceBuffer> conv_window, recurrent_window;
  int64_t window_entries = 0;
  const int32_t* window_entry = nullptr;
  bool writes_window = false;
  // Chunked GDN prefill (cuda::gdn_chunked; none for head dims it does not take): scratch for the widest
  // step, the uploaded step's longest and shortest sequence (host), and the delta rule the
  // running forward() asked for (kAuto: chunks for sequences of >= kGdnChunkedMinTokens tokens).
  cuda::DeviceBuffer gdn_chunk_scratch;
  int64_t longest_seq = 0, shortest_seq = 0;
  DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto;
  // The MTP head (models loaded with it; qwen3_5_cuda_mtp.cpp): its attention layer's paged KV
  // cache for max_sequences head sequences (block-table rows 0..S-1), and per head sequence the
  // output (lm_head input) of the last pair it ran, [S, H] act, which chains the next draft.
  cuda::DeviceBuffer mtp_k_cache, mtp_v_cache, mtp_output;
  // The target's hidden states (after the final norm) of the last forward(), [max_positions, H]
  // act, made when the MTP drafter asks to keep them (set_keep_hidden_states).
  cuda::DeviceBuffer kept_hidden;
  // The hidden states target sequences keep (keep_hidden forwards, for the serving engine's MTP
  // drafters): per sequence slot a ring of sequence_hidden_rows rows, [S, rows, H] act, made at
  // the first such forward. rows = min(max_tokens, max_positions): the engine's drafters read all
  // a sequence keeps before every step, so it holds at most one step's tokens; a forward that
  // would keep more unread rows than that is refused.
  cuda::DeviceBuffer sequence_hidden;
  int64_t sequence_hidden_rows = 0;
  // Set after each upload of the step metadata: the next upload waits for it before rewriting the
  // pinned staging (the copy reads it when the stream reaches it, not when enqueued).
  cudaEvent_t metadata_uploaded = nullptr;
  ~Workspace() {
    if (metadata_uploaded) cudaEventDestroy(metadata_uploaded);
    if (host_metadata) cudaFreeHost(host_metadata);
    if (host_logits) cudaFreeHost(host_logits);
  }
};

}  // namespace vt
