// The runner's side of multi-token prediction: the target's hidden states kept on the device (by
// forward(), or per target sequence in a ring of rows), and the head's sequences, whose steps the
// model runs (CudaForward::run_mtp_step). Hidden states never leave the device.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/check.h"
#include "runtime/cuda_runner.h"
#include "runtime/cuda_sequence.h"

namespace vt {

void CudaRunner::set_keep_hidden_states(bool keep) {
  // Made once, when a drafter first asks: every position a sequence can hold.
  if (keep && !kept_hidden_.data())
    kept_hidden_ = cuda::DeviceBuffer(model_->activations(), {info().max_positions, model_->hidden_size()});
  keep_hidden_states_ = keep;
  kept_positions_ = {};
}

std::vector<float> CudaRunner::download(const void* data, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  if (count == 0) return host;
  if (model_->activations() == DType::kF32) {
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

std::vector<float> CudaRunner::kept_hidden_states() {
  return download(kept_hidden_.data(), kept_positions_.count * model_->hidden_size());
}

std::vector<float> CudaRunner::mtp_last_output(const SequenceState& base_state) {
  const auto& state = dynamic_cast<const CudaMtpSequence&>(base_state);
  VT_CHECK(state.has_output, "MTP: the sequence has no output since its last rollback");
  return download(static_cast<const char*>(mtp_output_.data()) + size_t(state.slot()) * row_bytes(),
                  model_->hidden_size());
}

std::unique_ptr<SequenceState> CudaRunner::new_mtp_sequence(int64_t capacity) const {
  VT_CHECK(has_mtp(), "MTP: ", info().architecture, " was loaded without its MTP head (load_mtp)");
  VT_CHECK(capacity > 0 && capacity <= info().max_positions, "MTP sequence capacity ", capacity, " must be in [1, ",
           info().max_positions, "]");
  auto free_slot = std::find(mtp_slot_used_.begin(), mtp_slot_used_.end(), false);
  VT_CHECK(free_slot != mtp_slot_used_.end(), "all ", mtp_slot_used_.size(), " CUDA MTP sequence slots are in use");
  *free_slot = true;
  // Nothing to clear: attention reads only the entries [0, length) a sequence wrote.
  return std::make_unique<CudaMtpSequence>(free_slot - mtp_slot_used_.begin(), capacity, &mtp_slot_used_);
}

void CudaRunner::mtp_rollback(SequenceState& base_state, int64_t length) const {
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  VT_CHECK(length >= 0 && length <= state.length(), "MTP rollback: length ", length, " is outside [0, ",
           state.length(), "]");
  state.has_output = state.has_output && length == state.length();
  state.set_length(length);
}

void CudaRunner::mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position,
                                         SequenceState& state, const TensorView& logits) {
  const int64_t num_tokens = int64_t(tokens.size());
  VT_CHECK(num_tokens > 0 && kept_positions_.contains(first_position, num_tokens),
           "MTP: the target's last forward kept the hidden states of positions [", kept_positions_.start, ", ",
           kept_positions_.end(), "), not [", first_position, ", ", first_position + num_tokens, ")");
  const DeviceRows hidden{static_cast<const char*>(kept_hidden_.data()) +
                              size_t(first_position - kept_positions_.start) * row_bytes(),
                          num_tokens};
  mtp_forward_device(tokens, std::span<const DeviceRows>(&hidden, 1), state, logits);
}

void CudaRunner::mtp_forward_chained(int32_t token, SequenceState& base_state, const TensorView& logits) {
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  VT_CHECK(state.has_output, "MTP: chaining needs the output of a pair run since the last rollback");
  // The slot's output row is read (by the fc input's norm) before the step rewrites it.
  const DeviceRows hidden{static_cast<const char*>(mtp_output_.data()) + size_t(state.slot()) * row_bytes(), 1};
  mtp_forward_device(std::span<const int32_t>(&token, 1), std::span<const DeviceRows>(&hidden, 1), state, logits);
}

// ---- Hidden states kept per target sequence (BatchItem / ForwardOptions keep_hidden) ----
// Each sequence slot owns a ring of sequence_hidden_rows_ rows: position p lies in row p % rows,
// so dropping the rows the head has read moves nothing, and a run of positions is at most two
// pieces of the ring. The semantics are the CPU reference's (Qwen35Model::State::keep_rows).

namespace {

// The rows a forward from the sequence's length leaves kept before it: those below the length if
// they reach it (a rollback dropped the rest), none after a gap.
int64_t rows_kept_before(const CudaSequence& state) {
  const int64_t below = std::clamp<int64_t>(state.length() - state.kept_start, 0, state.kept_count);
  return state.kept_start + below == state.length() ? below : 0;
}

}  // namespace

char* CudaRunner::sequence_hidden_row(int64_t slot, int64_t position) const {
  return static_cast<char*>(sequence_hidden_.data()) +
         size_t(slot * sequence_hidden_rows_ + position % sequence_hidden_rows_) * row_bytes();
}

void CudaRunner::check_sequence_hidden(const SequenceState& base_state, int64_t tokens) {
  const auto& state = dynamic_cast<const CudaSequence&>(base_state);
  const int64_t rows = std::min(max_tokens_, info().max_positions);
  const int64_t kept = rows_kept_before(state);
  VT_CHECK(kept + tokens <= rows, "keep_hidden: sequence at length ", state.length(), " keeps ", kept,
           " hidden states the MTP head has not read; ", tokens, " more exceed the ", rows,
           " rows a sequence holds (min(max_step_tokens, positions)): the drafter reads them before every step");
  if (sequence_hidden_.data()) return;
  // Made once, when the first sequence keeps some (serving without MTP drafters pays nothing).
  VT_CHECK(row_bytes() % 4 == 0, "keep_hidden: rows of ", model_->hidden_size(),
           " values are copied as whole 4-byte words");
  sequence_hidden_ = cuda::DeviceBuffer(model_->activations(), {max_seqs_, rows, model_->hidden_size()});
  sequence_hidden_rows_ = rows;
}

void CudaRunner::keep_sequence_hidden(SequenceState& base_state, int64_t hidden_row, int64_t count,
                                      std::vector<cuda::CopySpan>& spans) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  const int64_t kept = rows_kept_before(state);
  VT_CHECK(sequence_hidden_.data() && kept + count <= sequence_hidden_rows_,
           "keep_hidden: a step kept hidden states it did not check");
  if (kept == 0) state.kept_start = state.length();
  state.kept_count = kept + count;
  const int64_t words_per_row = int64_t(row_bytes() / 4);
  const auto* hidden = static_cast<const float*>(model_->hidden());
  // Positions [length, length + count): up to the ring's end, then from its start.
  const int64_t first = state.length() % sequence_hidden_rows_;
  const int64_t head = std::min(count, sequence_hidden_rows_ - first);
  spans.push_back({reinterpret_cast<float*>(sequence_hidden_row(state.slot(), state.length())),
                   hidden + hidden_row * words_per_row, head * words_per_row});
  if (head < count)
    spans.push_back({reinterpret_cast<float*>(sequence_hidden_row(state.slot(), state.length() + head)),
                     hidden + (hidden_row + head) * words_per_row, (count - head) * words_per_row});
}

PositionRange CudaRunner::sequence_hidden_positions(const SequenceState& base_target) const {
  const auto& target = dynamic_cast<const CudaSequence&>(base_target);
  return {target.kept_start, std::clamp<int64_t>(target.length() - target.kept_start, 0, target.kept_count)};
}

std::vector<float> CudaRunner::sequence_hidden_states(const SequenceState& target) {
  const PositionRange kept = sequence_hidden_positions(target);
  const int64_t slot = dynamic_cast<const CudaSequence&>(target).slot();
  std::vector<float> rows;
  for (int64_t p = kept.start; p < kept.end(); ++p) {
    const std::vector<float> row = download(sequence_hidden_row(slot, p), model_->hidden_size());
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

void CudaRunner::mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position,
                                           SequenceState& base_target, SequenceState& state,
                                           const TensorView& logits) {
  auto& target = dynamic_cast<CudaSequence&>(base_target);
  const int64_t num_tokens = int64_t(tokens.size());
  const PositionRange kept = sequence_hidden_positions(target);
  VT_CHECK(num_tokens > 0 && kept.contains(first_position, num_tokens),
           "MTP: the target sequence keeps the hidden states of positions [", kept.start, ", ", kept.end(), "), not [",
           first_position, ", ", first_position + num_tokens, ")");
  // The positions' rows: to the ring's end, then from its start.
  const int64_t rows = sequence_hidden_rows_;
  const int64_t head = std::min(num_tokens, rows - first_position % rows);
  const DeviceRows pieces[] = {{sequence_hidden_row(target.slot(), first_position), head},
                               {sequence_hidden_row(target.slot(), first_position + head), num_tokens - head}};
  mtp_forward_device(tokens, std::span<const DeviceRows>(pieces, head < num_tokens ? 2 : 1), state, logits);
  // The next pairs start after these: the rows before them go.
  const int64_t drop = first_position + num_tokens - target.kept_start;
  target.kept_start += drop;
  target.kept_count -= drop;
}

void CudaRunner::mtp_forward_device(std::span<const int32_t> tokens, std::span<const DeviceRows> pieces,
                                    SequenceState& base_state, const TensorView& logits) {
  VT_CHECK(has_mtp(), "MTP: ", info().architecture, " was loaded without its MTP head (load_mtp)");
  VT_CHECK(!model_->tensor_parallel(), "MTP: the head does not run on a tensor-parallel rank");
  auto& state = dynamic_cast<CudaMtpSequence&>(base_state);
  const int64_t total = int64_t(tokens.size()), vocab = info().vocab_size;
  int64_t piece_rows = 0;
  for (const DeviceRows& piece : pieces) piece_rows += piece.rows;
  VT_CHECK(piece_rows == total, "MTP: hidden states of ", piece_rows, " pairs for ", total, " tokens");
  VT_CHECK(state.length() + total <= state.capacity(), "MTP: ", state.length(), " + ", total,
           " pairs exceed the sequence capacity ", state.capacity());
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({1, vocab}),
           "MTP: logits must be host f32 [1, ", vocab, "]");
  for (int32_t id : tokens)
    VT_CHECK(id >= 0 && id < vocab, "MTP: token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  void* output_row = static_cast<char*>(mtp_output_.data()) + size_t(state.slot()) * row_bytes();
  int64_t done = 0;  // pairs run, over the pieces
  for (const DeviceRows& piece : pieces) {
    for (int64_t begin = 0; begin < piece.rows; begin += max_tokens_) {
      const int64_t count = std::min(max_tokens_, piece.rows - begin);
      Layout& layout = scratch_layout_;
      layout.clear();
      layout.add_sequence(tokens.subspan(size_t(done), size_t(count)), state.slot(), state.length(), false, -1, {});
      upload(layout);
      CudaStep head_step = step(count, 1, 1);
      head_step.layout.block_tables = cache_.mtp_block_tables();  // the head's own rows of blocks
      model_->run_mtp_step(head_step, static_cast<const char*>(piece.data) + size_t(begin) * row_bytes(), cache_.mtp(),
                           output_row);
      state.set_length(state.length() + count);
      done += count;
    }
  }
  state.has_output = true;
  copy_logits_to_host(logits.f32(), 1);
}

}  // namespace vt
