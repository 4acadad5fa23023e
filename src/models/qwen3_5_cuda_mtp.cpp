// The Qwen3.5 / Qwen3-Next multi-token-prediction head on CUDA, top to bottom as the CPU
// reference's (qwen3_5_mtp.cpp), which it is tested against:
//   x = fc([norm_e(embed(token)) | norm_h(hidden)])     hidden: the target's lm_head input at p
//   x += attention(norm(x));  x += ffn(norm(x))           the decoder layer's kernels, its own KV cache
//   out = norm(x);  logits = lm_head(out)                 predicts the token at p + 2
// Hidden states never leave the device: the target's are kept by forward() (the last one's) or per
// target sequence (keep_hidden forwards, in a ring per slot), the head's own output of each
// sequence's last pair lives in the workspace's mtp_output row of its slot.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/check.h"
#include "core/error.h"
#include "models/qwen3_5_cuda.h"
#include "models/qwen3_5_cuda_workspace.h"
#include "profile/intent.h"

namespace vt {

using profile::OpGroup;

namespace {

// One head sequence: the KV entries [0, length) of its slot's blocks in the head's cache.
class CudaMtpSequence final : public SequenceState {
 public:
  CudaMtpSequence(int64_t slot, int64_t capacity, std::vector<bool>* used) : slot_(slot), used_(used) {
    capacity_ = capacity;
  }
  ~CudaMtpSequence() override { (*used_)[slot_] = false; }
  int64_t slot() const { return slot_; }
  // A KV cache only shortens: the floor follows the length.
  void set_length(int64_t length) { length_ = rollback_floor_ = length; }
  bool has_output = false;  // the slot's mtp_output row is the output of the pair at length - 1

 private:
  int64_t slot_;
  std::vector<bool>* used_;
};

}  // namespace

size_t CudaMtp::bytes() const {
  size_t total = fc.bytes() + layer.qkv.bytes() + layer.o_proj.bytes() + layer.mlp.gate_up.bytes() +
                 layer.mlp.down.bytes() + layer.moe.router.bytes() +
                 layer.moe.expert_bytes() * size_t(layer.moe.experts) + layer.moe.shared.gate_up.bytes() +
                 layer.moe.shared.down.bytes() + layer.moe.shared_gate.bytes();
  for (const cuda::DeviceBuffer* vector : {&pre_fc_norm_embedding, &pre_fc_norm_hidden, &norm, &layer.input_norm,
                                           &layer.post_attention_norm, &layer.q_norm, &layer.k_norm})
    total += vector->bytes();
  return total;
}

void Qwen35CudaModel::set_keep_hidden_states(bool keep) {
  auto& w = *workspace_;
  // Made once, when a drafter first asks: every position a sequence can hold.
  if (keep && !w.kept_hidden.data())
    w.kept_hidden = cuda::DeviceBuffer(options_.activations, {info_.max_positions, config_.hidden_size});
  keep_hidden_states_ = keep;
  kept_positions_ = {};
}

std::vector<float> Qwen35CudaModel::download(const void* data, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  if (count == 0) return host;
  if (options_.activations == DType::kF32) {
    VT_CUDA_CHECK(cudaMemcpyAsync(host.data(), data, size_t(count) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }
  std::vector<uint16_t> bf16(static_cast<size_t>(count));
  VT_CUDA_CHECK(cudaMemcpyAsync(bf16.data(), data, size_t(count) * 2, cudaMemcpyDeviceToHost, stream_));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < host.size(); ++i) host[i] = bf16_to_f32(bf16[i]);
  return host;
}

std::vector<float> Qwen35CudaModel::kept_hidden_states() {
  return download(workspace_->kept_hidden.data(), kept_positions_.count * config_.hidden_size);
}

std::vector<float> Qwen35CudaModel::mtp_last_output(const SequenceState& base_state) {
  const auto& state = dynamic_cast<const CudaMtpSequence&>(base_state);
  VT_CHECK(state.has_output, "MTP: the sequence has no output since its last rollback");
  const int64_t H = config_.hidden_size;
  return download(static_cast<const char*>(workspace_->mtp_output.data()) +
                      size_t(state.slot() * H) * dtype_size(options_.activations),
                  H);
}

std::unique_ptr<SequenceState> Qwen35CudaModel::new_mtp_sequence(int64_t capacity) const {
  VT_CHECK(has_mtp(), "MTP: ", config_.architecture, " was loaded without its MTP head (load_mtp)");
  VT_CHECK(capacity > 0 && capacity <= info_.max_positions, "MTP sequence capacity ", capacity, " must be in [1, ",
           info_.max_positions, "]");
  auto free_slot = std::find(mtp_slot_used_.begin(), mtp_slot_used_.end(), false);
  VT_CHECK(free_slot != mtp_slot_used_.end(), "all ", mtp_slot_used_.size(), " CUDA MTP sequence slots are in use");
  *free_slot = true;
  // Nothing to clear: attention reads only the entries [0, length) a sequence wrote.
  return std::make_unique<CudaMtpSequence>(free_slot - mtp_slot_used_.begin(), capacity, &mtp_slot_used_);
}

void Qwen35CudaModel::mtp_rollback(SequenceState& base_state, int64_t length) const {
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  VT_CHECK(length >= 0 && length <= state.length(), "MTP rollback: length ", length, " is outside [0, ",
           state.length(), "]");
  state.has_output = state.has_output && length == state.length();
  state.set_length(length);
}

void Qwen35CudaModel::mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position,
                                              SequenceState& state, const TensorView& logits) {
  const int64_t num_tokens = int64_t(tokens.size());
  VT_CHECK(num_tokens > 0 && kept_positions_.contains(first_position, num_tokens),
           "MTP: the target's last forward kept the hidden states of positions [", kept_positions_.start, ", ",
           kept_positions_.end(), "), not [", first_position, ", ", first_position + num_tokens, ")");
  const size_t row_bytes = size_t(config_.hidden_size) * dtype_size(options_.activations);
  const DeviceRows hidden{static_cast<const char*>(workspace_->kept_hidden.data()) +
                              size_t(first_position - kept_positions_.start) * row_bytes,
                          num_tokens};
  mtp_forward_device(tokens, std::span<const DeviceRows>(&hidden, 1), state, logits);
}

void Qwen35CudaModel::mtp_forward_chained(int32_t token, SequenceState& base_state, const TensorView& logits) {
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  VT_CHECK(state.has_output, "MTP: chaining needs the output of a pair run since the last rollback");
  // The slot's output row is read (by the fc input's norm) before the step rewrites it.
  const size_t row_bytes = size_t(config_.hidden_size) * dtype_size(options_.activations);
  const DeviceRows hidden{static_cast<const char*>(workspace_->mtp_output.data()) + size_t(state.slot()) * row_bytes, 1};
  mtp_forward_device(std::span<const int32_t>(&token, 1), std::span<const DeviceRows>(&hidden, 1), state, logits);
}

// ---- Hidden states kept per target sequence (BatchItem / ForwardOptions keep_hidden) ----
// Each sequence slot owns a ring of sequence_hidden_rows rows: position p lies in row p % rows, so
// dropping the rows the head has read moves nothing, and a run of positions is at most two pieces
// of the ring. The semantics are the CPU reference's (Qwen35Model::State::keep_rows).

namespace {

// The rows a forward from the sequence's length leaves kept before it: those below the length if
// they reach it (a rollback dropped the rest), none after a gap.
int64_t rows_kept_before(const CudaSequence& state) {
  const int64_t below = std::clamp<int64_t>(state.length() - state.kept_start, 0, state.kept_count);
  return state.kept_start + below == state.length() ? below : 0;
}

}  // namespace

char* Qwen35CudaModel::sequence_hidden_row(int64_t slot, int64_t position) const {
  const auto& w = *workspace_;
  const size_t row_bytes = size_t(config_.hidden_size) * dtype_size(options_.activations);
  return static_cast<char*>(w.sequence_hidden.data()) +
         size_t(slot * w.sequence_hidden_rows + position % w.sequence_hidden_rows) * row_bytes;
}

void Qwen35CudaModel::check_sequence_hidden(const SequenceState& base_state, int64_t tokens) {
  const auto& state = dynamic_cast<const CudaSequence&>(base_state);
  auto& w = *workspace_;
  const int64_t rows = std::min(w.max_tokens, info_.max_positions);
  const int64_t kept = rows_kept_before(state);
  VT_CHECK(kept + tokens <= rows, "keep_hidden: sequence at length ", state.length(), " keeps ", kept,
           " hidden states the MTP head has not read; ", tokens, " more exceed the ", rows,
           " rows a sequence holds (min(max_step_tokens, positions)): the drafter reads them before every step");
  if (w.sequence_hidden.data()) return;
  // Made once, when the first sequence keeps some (serving without MTP drafters pays nothing).
  const int64_t H = config_.hidden_size;
  VT_CHECK(H * int64_t(dtype_size(options_.activations)) % 4 == 0, "keep_hidden: rows of ", H,
           " values are copied as whole 4-byte words");
  w.sequence_hidden = cuda::DeviceBuffer(options_.activations, {w.max_seqs, rows, H});
  w.sequence_hidden_rows = rows;
}

void Qwen35CudaModel::keep_sequence_hidden(SequenceState& base_state, int64_t normed_row, int64_t count,
                                           std::vector<cuda::CopySpan>& spans) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  auto& w = *workspace_;
  const int64_t kept = rows_kept_before(state);
  VT_CHECK(w.sequence_hidden.data() && kept + count <= w.sequence_hidden_rows,
           "keep_hidden: a step kept hidden states it did not check");
  if (kept == 0) state.kept_start = state.length();
  state.kept_count = kept + count;
  const int64_t H = config_.hidden_size;
  const int64_t words_per_row = H * int64_t(dtype_size(options_.activations)) / 4;
  const auto* normed = static_cast<const float*>(w.normed.data());
  // Positions [length, length + count): up to the ring's end, then from its start.
  const int64_t first = state.length() % w.sequence_hidden_rows;
  const int64_t head = std::min(count, w.sequence_hidden_rows - first);
  spans.push_back({reinterpret_cast<float*>(sequence_hidden_row(state.slot(), state.length())),
                   normed + normed_row * words_per_row, head * words_per_row});
  if (head < count)
    spans.push_back({reinterpret_cast<float*>(sequence_hidden_row(state.slot(), state.length() + head)),
                     normed + (normed_row + head) * words_per_row, (count - head) * words_per_row});
}

PositionRange Qwen35CudaModel::sequence_hidden_positions(const SequenceState& base_target) const {
  const auto& target = dynamic_cast<const CudaSequence&>(base_target);
  return {target.kept_start, std::clamp<int64_t>(target.length() - target.kept_start, 0, target.kept_count)};
}

std::vector<float> Qwen35CudaModel::sequence_hidden_states(const SequenceState& target) {
  const PositionRange kept = sequence_hidden_positions(target);
  const int64_t H = config_.hidden_size, slot = dynamic_cast<const CudaSequence&>(target).slot();
  std::vector<float> rows;
  for (int64_t p = kept.start; p < kept.end(); ++p) {
    const std::vector<float> row = download(sequence_hidden_row(slot, p), H);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

void Qwen35CudaModel::mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position,
                                                SequenceState& base_target, SequenceState& state,
                                                const TensorView& logits) {
  auto& target = dynamic_cast<CudaSequence&>(base_target);
  const int64_t num_tokens = int64_t(tokens.size());
  const PositionRange kept = sequence_hidden_positions(target);
  VT_CHECK(num_tokens > 0 && kept.contains(first_position, num_tokens),
           "MTP: the target sequence keeps the hidden states of positions [", kept.start, ", ", kept.end(), "), not [",
           first_position, ", ", first_position + num_tokens, ")");
  // The positions' rows: to the ring's end, then from its start.
  const int64_t rows = workspace_->sequence_hidden_rows;
  const int64_t head = std::min(num_tokens, rows - first_position % rows);
  const DeviceRows pieces[] = {{sequence_hidden_row(target.slot(), first_position), head},
                               {sequence_hidden_row(target.slot(), first_position + head), num_tokens - head}};
  mtp_forward_device(tokens, std::span<const DeviceRows>(pieces, head < num_tokens ? 2 : 1), state, logits);
  // The next pairs start after these: the rows before them go.
  const int64_t drop = first_position + num_tokens - target.kept_start;
  target.kept_start += drop;
  target.kept_count -= drop;
}

void Qwen35CudaModel::mtp_forward_device(std::span<const int32_t> tokens, std::span<const DeviceRows> pieces,
                                         SequenceState& base_state, const TensorView& logits) {
  VT_CHECK(has_mtp(), "MTP: ", config_.architecture, " was loaded without its MTP head (load_mtp)");
  VT_CHECK(!all_reduce_, "MTP: the head does not run on a tensor-parallel rank");
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  auto& w = *workspace_;
  const int64_t total = int64_t(tokens.size()), vocab = config_.vocab_size;
  int64_t piece_rows = 0;
  for (const DeviceRows& piece : pieces) piece_rows += piece.rows;
  VT_CHECK(piece_rows == total, "MTP: hidden states of ", piece_rows, " pairs for ", total, " tokens");
  VT_CHECK(state.length() + total <= state.capacity(), "MTP: ", state.length(), " + ", total,
           " pairs exceed the sequence capacity ", state.capacity());
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({1, vocab}),
           "MTP: logits must be host f32 [1, ", vocab, "]");
  for (int32_t id : tokens)
    VT_CHECK(id >= 0 && id < vocab, "MTP: token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  const size_t row_bytes = size_t(config_.hidden_size) * dtype_size(options_.activations);
  int64_t done = 0;  // pairs run, over the pieces
  for (const DeviceRows& piece : pieces) {
    for (int64_t begin = 0; begin < piece.rows; begin += w.max_tokens) {
      const int64_t count = std::min(w.max_tokens, piece.rows - begin);
      std::vector<int32_t> ids(tokens.begin() + done, tokens.begin() + done + count);
      std::vector<int32_t> token_seq(count, 0), positions(count), seq_start = {0, int32_t(count)};
      for (int64_t t = 0; t < count; ++t) positions[t] = int32_t(state.length() + t);
      upload_layout(ids, token_seq, positions, seq_start, {int32_t(state.slot())}, {int32_t(count - 1)});
      run_mtp_step(count, static_cast<const char*>(piece.data) + size_t(begin) * row_bytes, state.slot());
      state.set_length(state.length() + count);
      done += count;
    }
  }
  state.has_output = true;
  copy_logits_to_host(logits.f32(), 1);
}

void Qwen35CudaModel::run_mtp_step(int64_t T, const void* hidden, int64_t mtp_slot) {
  auto& w = *workspace_;
  const CudaMtp& mtp = *weights_.mtp;
  const DType act = options_.activations;
  const int64_t H = config_.hidden_size;
  const float eps = config_.rms_norm_eps;
  {
    profile::OpScope op("mtp.embed", OpGroup::kEmbed);
    cuda::embedding(w.x.data(), act, w.token_ids, T, weights_.embed_tokens.data(), weights_.embed_tokens.view().dtype,
                    H, stream_);
  }
  {
    // fc input per row: [norm_e(embed(token)) | norm_h(hidden)], [T, 2H].
    profile::OpScope op("mtp.pre_fc_norm", OpGroup::kNorm);
    cuda::rms_norm_concat(w.projected.data(), w.x.data(), mtp.pre_fc_norm_embedding.as<float>(), hidden,
                          mtp.pre_fc_norm_hidden.as<float>(), T, H, eps, 1.0f, act, stream_);
  }
  {
    profile::OpScope op("mtp.fc", OpGroup::kGemmOther);
    linear(mtp.fc, w.x.data(), w.projected.data(), T);
  }
  const Fp8Rows mixer_in = input_norm(mtp.layer, T, nullptr);
  attention(mtp.layer, w.mtp_k_cache.data(), w.mtp_v_cache.data(), T, 1, mixer_in);
  ffn(mtp.layer, T);
  {
    profile::OpScope op("mtp.norm", OpGroup::kNorm);
    cuda::add_rms_norm(w.normed.data(), w.x.data(), branch_input(), mtp.norm.as<float>(), T, H, eps, 1.0f, act,
                       stream_);
  }
  // The last pair's output: the logits' input (at the start of last_hidden, aligned as the GEMMs
  // want) and the slot's row, which chains the next draft.
  cuda::gather_rows(w.last_hidden.data(), w.normed.data(), w.last_index, 1, H, act, stream_);
  const size_t row_bytes = size_t(H) * dtype_size(act);
  VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(w.mtp_output.data()) + size_t(mtp_slot) * row_bytes,
                                w.last_hidden.data(), row_bytes, cudaMemcpyDeviceToDevice, stream_));
  profile::OpScope op("mtp.lm_head", OpGroup::kGemmLmHead);
  linear(weights_.lm_head, w.logits.data(), w.last_hidden.data(), 1);
}

}  // namespace vt
