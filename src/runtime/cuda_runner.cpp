#include "runtime/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "cuda/check.h"
#include "ops/gdn/gdn.h"
#include "runtime/cuda_sequence.h"
#include "trace/intent.h"

namespace vt {

namespace {

DeviceCacheOptions cache_options(const CudaModelOptions& options) {
  VT_CHECK(options.max_rollback_tokens >= 0, "max_rollback_tokens must be >= 0, got ", options.max_rollback_tokens);
  VT_CHECK(options.block_size >= 1 && options.cache_blocks >= 0, "CUDA cache: ", options.cache_blocks, " blocks of ",
           options.block_size, " tokens");
  DeviceCacheOptions cache;
  cache.sequences = options.max_sequences;
  cache.block_size = options.block_size;
  cache.max_blocks = (options.max_context + options.block_size - 1) / options.block_size;
  cache.num_blocks = options.cache_blocks > 0 ? options.cache_blocks : options.max_sequences * cache.max_blocks;
  cache.window_entries = options.max_rollback_tokens > 0 ? options.max_rollback_tokens + 1 : 0;
  return cache;
}

}  // namespace

void CudaRunner::Layout::clear() {
  for (auto* list : {&tokens, &token_seq, &positions, &seq_start, &slots, &last_index, &window_entry}) list->clear();
  blocks.clear();
  seq_start.push_back(0);
}

// A sequence's tokens after its first `length`: a row of logits for each token (all_rows) or the
// last; entry: its first token's rollback window entry (-1: none); sequence_blocks: its KV blocks
// (empty: the MTP head's, whose table is fixed).
void CudaRunner::Layout::add_sequence(std::span<const int32_t> ids, int64_t slot, int64_t length, bool all_rows,
                                      int32_t entry, std::span<const int32_t> sequence_blocks) {
  const int32_t sequence = int32_t(slots.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    tokens.push_back(ids[t]);
    token_seq.push_back(sequence);
    positions.push_back(int32_t(length + int64_t(t)));
    if (all_rows) last_index.push_back(int32_t(tokens.size() - 1));
  }
  if (!all_rows) last_index.push_back(int32_t(tokens.size() - 1));
  seq_start.push_back(int32_t(tokens.size()));
  slots.push_back(int32_t(slot));
  window_entry.push_back(entry);
  blocks.push_back(sequence_blocks);
}

CudaRunner::CudaRunner(std::unique_ptr<CudaForward> model, const CudaModelOptions& options)
    : model_(std::move(model)), options_(options), stream_(model_->stream()),
      cache_(model_->cache_spec(), cache_options(options)),
      kv_cache_(cache_.num_blocks(), cache_.block_size(), cache_.sequences()) {
  max_seqs_ = options_.max_sequences;
  max_tokens_ = std::max(options_.max_step_tokens, options_.max_sequences);
  logit_rows_ = std::max(max_seqs_, options_.max_logit_rows);
  const int64_t T = max_tokens_, S = max_seqs_;
  slot_sequences_.assign(size_t(S), nullptr);
  if (model_->has_mtp()) {
    mtp_slot_used_.assign(size_t(S), false);
    mtp_output_ = cuda::DeviceBuffer(model_->activations(), {S, model_->hidden_size()});
  }
  metadata_ints_ = size_t(3 * T + 3 * S + 1 + logit_rows_);
  metadata_ = cuda::DeviceBuffer(DType::kI32, {int64_t(metadata_ints_)});
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_metadata_), metadata_ints_ * sizeof(int32_t)));
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&metadata_uploaded_, cudaEventDisableTiming));
  if (model_->activations() == DType::kBF16)
    VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_logits_),
                                 size_t(logit_rows_ * info().vocab_size) * sizeof(uint16_t)));
  int32_t* base = metadata_.as<int32_t>();
  token_ids_ = base;
  layout_.token_seq = base + T;
  layout_.positions = base + 2 * T;
  layout_.seq_start = base + 3 * T;
  layout_.slots = base + 3 * T + S + 1;
  last_index_ = base + 3 * T + 2 * S + 1;
  window_entry_ = base + 3 * T + 2 * S + 1 + logit_rows_;
  layout_.block_tables = cache_.block_tables();
  layout_.max_blocks = cache_.max_blocks();
  allocate_sampling(logit_rows_);
}

CudaRunner::~CudaRunner() {
  drop_graphs();
  if (stream_) cudaStreamSynchronize(stream_);
  if (metadata_uploaded_) cudaEventDestroy(metadata_uploaded_);
  if (host_metadata_) cudaFreeHost(host_metadata_);
  if (host_logits_) cudaFreeHost(host_logits_);
}

void CudaRunner::drop_graphs() {
  for (auto& [batch, graph] : graphs_) cudaGraphExecDestroy(graph);
  graphs_.clear();
}

void CudaRunner::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  model_->quantize_lm_head_fp8(quantization);
  drop_graphs();  // captured graphs launch the old output layer
}

void CudaRunner::set_all_reduce(DeviceAllReduce all_reduce) {
  model_->set_all_reduce(std::move(all_reduce));
  drop_graphs();  // graphs captured before it lack the collectives
}

std::unique_ptr<SequenceState> CudaRunner::new_sequence(int64_t capacity) const {
  VT_CHECK(capacity > 0 && capacity <= info().max_positions, "sequence capacity ", capacity, " must be in [1, ",
           info().max_positions, "]");
  const int64_t entry = next_own_entry_--;
  VT_CHECK(kv_cache_.admit(entry, capacity, 0), "CUDA cache: no room for a sequence of ", capacity, " tokens (",
           kv_cache_.free_slots(), " of ", kv_cache_.num_slots(), " slots and ", kv_cache_.free_blocks(), " of ",
           kv_cache_.num_blocks(), " blocks of ", kv_cache_.block_size(), " tokens free)");
  return make_sequence(entry, capacity, true, true);
}

std::unique_ptr<SequenceState> CudaRunner::new_sequence_in_cache(int64_t cache_id, int64_t capacity) const {
  VT_CHECK(capacity > 0 && capacity <= info().max_positions, "sequence capacity ", capacity, " must be in [1, ",
           info().max_positions, "]");
  VT_CHECK(kv_cache_.contains(cache_id), "new_sequence_in_cache: entry ", cache_id,
           " is not in the model's cache (admit it there first)");
  return make_sequence(cache_id, capacity, false, true);
}

std::unique_ptr<SequenceState> CudaRunner::make_sequence(int64_t entry, int64_t capacity, bool owned,
                                                         bool reset) const {
  const int64_t slot = kv_cache_.slot(entry);
  if (reset) cache_.reset_slot(slot, stream_);
  return std::make_unique<CudaSequence>(entry, slot, capacity, owned ? &kv_cache_ : nullptr, &slot_sequences_);
}

std::span<const int32_t> CudaRunner::blocks_holding(const CudaSequence& state, int64_t tokens,
                                                    bool writes_from_length) const {
  const std::vector<int32_t>& blocks = kv_cache_.block_table(state.entry());
  const int64_t held = int64_t(blocks.size()) * cache_.block_size();
  VT_CHECK(tokens <= held, "CUDA cache: the sequence in slot ", state.slot(), " (", state.length(),
           " tokens) needs blocks for ", tokens, " tokens, its entry holds ", held,
           " (reserve them in the model's cache first)");
  VT_CHECK(!writes_from_length || kv_cache_.exclusive(state.entry(), state.length(), tokens),
           "CUDA cache: the sequence in slot ", state.slot(), " would write tokens [", state.length(), ", ", tokens,
           ") into a KV block it shares (a saved prefix's blocks are read-only)");
  // A row holds what the longest sequence reads (capacity <= max_context); blocks past it go unread.
  return std::span<const int32_t>(blocks).first(size_t(std::min<int64_t>(int64_t(blocks.size()), cache_.max_blocks())));
}

void CudaRunner::upload(const Layout& layout) {
  const int64_t T = max_tokens_, S = max_seqs_;
  const int64_t tokens = int64_t(layout.tokens.size()), seqs = int64_t(layout.slots.size());
  VT_CHECK(tokens <= T && seqs <= S, "step of ", tokens, " tokens / ", seqs, " sequences exceeds the workspace (", T,
           " / ", S, ")");
  VT_CHECK(int64_t(layout.last_index.size()) <= logit_rows_, "a step of ", layout.last_index.size(),
           " logit rows exceeds the ", logit_rows_, " one step holds (CudaModelOptions::max_logit_rows)");
  // The previous upload's copy may still be queued behind kernels (a chunked prefill enqueues
  // chunk after chunk): wait for it before rewriting the staging it reads.
  VT_CUDA_CHECK(cudaEventSynchronize(metadata_uploaded_));
  int32_t* host = host_metadata_;
  int32_t* host_entries = host + 3 * T + 2 * S + 1 + logit_rows_;
  std::fill(host_entries, host_entries + S, -1);
  std::copy(layout.window_entry.begin(), layout.window_entry.end(), host_entries);
  writes_window_ = std::any_of(layout.window_entry.begin(), layout.window_entry.end(),
                               [](int32_t entry) { return entry >= 0; });
  VT_CHECK(!writes_window_ || cache_.window_entries() > 0, "a rollback window without max_rollback_tokens");
  longest_seq_ = 0;
  shortest_seq_ = seqs > 0 ? std::numeric_limits<int64_t>::max() : 0;
  for (size_t s = 0; s + 1 < layout.seq_start.size(); ++s) {
    longest_seq_ = std::max<int64_t>(longest_seq_, layout.seq_start[s + 1] - layout.seq_start[s]);
    shortest_seq_ = std::min<int64_t>(shortest_seq_, layout.seq_start[s + 1] - layout.seq_start[s]);
  }
  std::copy(layout.tokens.begin(), layout.tokens.end(), host);
  std::copy(layout.token_seq.begin(), layout.token_seq.end(), host + T);
  std::copy(layout.positions.begin(), layout.positions.end(), host + 2 * T);
  std::copy(layout.seq_start.begin(), layout.seq_start.end(), host + 3 * T);
  std::copy(layout.slots.begin(), layout.slots.end(), host + 3 * T + S + 1);
  std::copy(layout.last_index.begin(), layout.last_index.end(), host + 3 * T + 2 * S + 1);
  // The rows of blocks that changed since the step that last read them, queued before the step
  // (the wait above covers the previous rows' copies too).
  for (size_t s = 0; s < layout.slots.size(); ++s)
    if (!layout.blocks[s].empty()) cache_.set_block_row(layout.slots[s], layout.blocks[s], stream_);
  kv_tokens_ = 0;
  for (int32_t position : layout.positions) kv_tokens_ += int64_t(position) + 1;
  VT_CUDA_CHECK(cudaMemcpyAsync(metadata_.data(), host, metadata_ints_ * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_));
  VT_CUDA_CHECK(cudaEventRecord(metadata_uploaded_, stream_));
}

CudaStep CudaRunner::step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows) const {
  CudaStep step;
  step.num_tokens = num_tokens;
  step.num_seqs = num_seqs;
  step.logit_rows = logit_rows;
  step.token_ids = token_ids_;
  step.layout = layout_;
  step.layout.num_tokens = num_tokens;
  step.layout.num_seqs = num_seqs;
  const int64_t T = max_tokens_, S = max_seqs_;
  step.host_layout = {host_metadata_ + T, host_metadata_ + 2 * T, host_metadata_ + 3 * T, nullptr,
                      host_metadata_ + 3 * T + S + 1, num_tokens, num_seqs, layout_.max_blocks};
  step.last_index = last_index_;
  step.window_entry = window_entry_;
  step.window_entries = cache_.window_entries();
  step.writes_window = writes_window_;
  step.kv_tokens = kv_tokens_;
  step.longest_seq = longest_seq_;
  step.shortest_seq = shortest_seq_;
  step.delta_rule = delta_rule_;
  step.cache = cache_.layers();
  if (tapping_ && tap_sink()) step.tap = &tap_sink();
  return step;
}

void CudaRunner::run_step(int64_t num_tokens, int64_t num_seqs, int64_t logit_rows) {
  model_->run_step(step(num_tokens, num_seqs, logit_rows));
}

size_t CudaRunner::row_bytes() const { return size_t(model_->hidden_size()) * dtype_size(model_->activations()); }

void CudaRunner::forward(std::span<const int32_t> tokens, SequenceState& base_state, const TensorView& logits,
                         const ForwardOptions& options) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  const int64_t total = int64_t(tokens.size()), vocab = info().vocab_size;
  VT_CHECK(total > 0, "forward: no tokens");
  VT_CHECK(options.delta_rule != DeltaRuleChoice::kChunked || !options.keep_rollback,
           "CUDA forward: the chunked delta rule keeps no per-token states for a rollback window");
  VT_CHECK(options.delta_rule != DeltaRuleChoice::kChunked || model_->supports_chunked_delta_rule(),
           "CUDA forward: the chunked delta rule does not take this model's head dims");
  VT_CHECK(state.length() + total <= state.capacity(), "forward: ", state.length(), " + ", total,
           " tokens exceed the sequence capacity ", state.capacity());
  const int64_t logit_rows = options.all_logits ? total : 1;
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({logit_rows, vocab}),
           "forward: logits must be host f32 [", logit_rows, ", ", vocab, "]");
  check_window(state, total, options.keep_rollback);
  if (options.keep_hidden) check_sequence_hidden(state, total);
  const std::span<const int32_t> blocks = blocks_holding(state, state.length() + total, true);
  prepare_window(state, options.keep_rollback);
  // The delta rule asked for holds for this forward's steps only.
  struct DeltaRuleScope {
    DeltaRuleChoice& choice;
    bool& tapping;
    ~DeltaRuleScope() { choice = DeltaRuleChoice::kAuto, tapping = false; }
  } delta_rule_scope{delta_rule_, tapping_};
  delta_rule_ = options.delta_rule;
  tapping_ = true;
  // The MTP drafter's hidden states: every position's final-norm output, chunk after chunk, kept
  // in the sequence (keep_hidden) or else, with keeping on, for the model's last forward.
  const bool keep_hidden = keep_hidden_states_ && !options.keep_hidden;
  kept_positions_ = keep_hidden ? PositionRange{state.length(), total} : PositionRange{};
  std::vector<cuda::CopySpan> sequence_spans;
  // Chunks of at most max_step_tokens (and of the logit rows the runner holds).
  const int64_t chunk_limit = options.all_logits ? std::min(max_tokens_, logit_rows_) : max_tokens_;
  for (int64_t begin = 0; begin < total; begin += chunk_limit) {
    const int64_t count = std::min(chunk_limit, total - begin);
    const bool last_chunk = begin + count == total;
    Layout& layout = scratch_layout_;
    layout.clear();
    const int32_t entry = options.keep_rollback ? int32_t(state.length() - state.rollback_floor() + 1) : -1;
    layout.add_sequence(tokens.subspan(size_t(begin), size_t(count)), state.slot(), state.length(), options.all_logits,
                        entry, blocks);
    upload(layout);
    const int64_t rows = int64_t(layout.last_index.size());
    run_step(count, 1, rows);
    if (keep_hidden)
      VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(kept_hidden_.data()) + size_t(begin) * row_bytes(),
                                    model_->hidden(), size_t(count) * row_bytes(), cudaMemcpyDeviceToDevice, stream_));
    if (options.keep_hidden) {
      sequence_spans.clear();
      keep_sequence_hidden(state, 0, count, sequence_spans);
      trace::OpScope op("mtp.keep_hidden", trace::OpGroup::kOther);
      cuda::copy_spans(sequence_spans.data(), int64_t(sequence_spans.size()), stream_);
    }
    state.advance(count);
    if (!options.all_logits && !last_chunk) continue;
    copy_logits_to_host(logits.f32() + (options.all_logits ? begin * vocab : 0), rows);
  }
}

void CudaRunner::copy_logits_to_host(float* destination, int64_t rows) {
  const std::pair<int64_t, int64_t> all[] = {{0, rows}};
  copy_logit_rows_to_host(destination, all);
}

void CudaRunner::copy_logit_rows_to_host(float* destination, std::span<const std::pair<int64_t, int64_t>> ranges) {
  if (!emit_logits_) ranges = {};
  const int64_t vocab = info().vocab_size;
  const bool f32 = model_->activations() == DType::kF32;
  const void* logits = model_->logits();
  for (const auto& [first, count] : ranges) {
    if (count <= 0) continue;
    const size_t offset = size_t(first * vocab), elements = size_t(count * vocab);
    if (f32) {
      VT_CUDA_CHECK(cudaMemcpyAsync(destination + offset, static_cast<const float*>(logits) + offset,
                                    elements * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    } else {
      VT_CUDA_CHECK(cudaMemcpyAsync(host_logits_ + offset, static_cast<const uint16_t*>(logits) + offset,
                                    elements * 2, cudaMemcpyDeviceToHost, stream_));
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (f32) return;
  for (const auto& [first, count] : ranges)
    for (int64_t i = first * vocab; i < (first + count) * vocab; ++i) destination[i] = bf16_to_f32(host_logits_[i]);
}

void CudaRunner::launch_decode_graph(int64_t batch, const std::function<void()>& upload_step) {
  auto it = graphs_.find(batch);
  if (it == graphs_.end()) {
    // Warm-up outside capture (cuBLASLt plans, lazy module loads) with every sequence mapped to
    // the scratch slot: live states advance only in the graph launch below. The scratch slot's
    // contents are garbage by design (several sequences write it at once).
    upload_step();
    std::vector<int32_t> scratch(size_t(batch), int32_t(cache_.scratch_slot()));
    VT_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(layout_.slots), scratch.data(), scratch.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    run_step(batch, batch, batch);
    VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph;
    VT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    run_step(batch, batch, batch);
    VT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec;
    VT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = graphs_.emplace(batch, exec).first;
  }
  upload_step();
  VT_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

int64_t CudaRunner::decode_graph_batch(int64_t count) const {
  // Every size to 16, then steps of 4 to 64, 8 to 128 and 16 beyond: a padded batch costs at most
  // a few rows' weight-sharing work, and a server captures a few dozen graphs, not one per size.
  const int64_t step = count <= 16 ? 1 : count <= 64 ? 4 : count <= 128 ? 8 : 16;
  return std::min((count + step - 1) / step * step, max_seqs_);
}

void CudaRunner::warm_up() {
  // Each graph's capture runs its step twice and instantiates it: tens of milliseconds for a large
  // model, paid here instead of by the first steps of each batch size under load.
  std::vector<int32_t> tokens;
  for (int64_t batch = 1; batch <= max_seqs_; batch = decode_graph_batch(batch) + 1) {
    const int64_t size = decode_graph_batch(batch);
    if (graphs_.count(size)) continue;
    Layout& layout = scratch_layout_;
    layout.clear();
    tokens.assign(size_t(size), 0);
    for (int64_t i = 0; i < size; ++i)
      layout.add_sequence(std::span<const int32_t>(&tokens[size_t(i)], 1), cache_.scratch_slot(), 0, false, -1, {});
    launch_decode_graph(size, [&] { upload(layout); });
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaRunner::forward_batch(std::span<const BatchItem> items, const TensorView& logits) {
  const int64_t rows = batch_logit_rows(items), vocab = info().vocab_size;
  VT_CHECK(logits.dtype == DType::kF32 && logits.device == Device::kCpu && logits.shape == Shape({rows, vocab}),
           "forward_batch: logits must be host f32 [", rows, ", ", vocab, "]");
  copy_logits_to_host(logits.f32(), run_batch(items, false));
}

void CudaRunner::verify_greedy(std::span<const BatchItem> items, std::vector<int32_t>* next_tokens) {
  const int64_t rows = run_batch(items, true);
  next_tokens->resize(size_t(rows));
  VT_CUDA_CHECK(cudaMemcpyAsync(next_tokens->data(), model_->next_tokens(), size_t(rows) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int64_t CudaRunner::run_batch(std::span<const BatchItem> items, bool all_rows) {
  kept_positions_ = {};  // batched steps keep none for the last forward (forward() does), only per sequence
  const int64_t count = int64_t(items.size());
  VT_CHECK(count > 0 && count <= max_seqs_ && count <= logit_rows_, "forward_batch: ", count, " sequences (at most ",
           max_seqs_, ")");
  bool all_decode = true, keeps_rollback = false, keeps_hidden = false;
  int64_t total = 0, rows = 0;
  for (int64_t i = 0; i < count; ++i) {
    const BatchItem& item = items[size_t(i)];
    const auto& state = dynamic_cast<const CudaSequence&>(*item.state);
    const int64_t tokens = int64_t(item.tokens.size());
    VT_CHECK(tokens > 0, "forward_batch: sequence ", i, " has no tokens");
    VT_CHECK(state.length() + tokens <= state.capacity(), "forward_batch: sequence ", i, ": ", state.length(), " + ",
             tokens, " tokens exceed its capacity ", state.capacity());
    check_window(state, tokens, item.keep_rollback);
    if (item.keep_hidden) check_sequence_hidden(state, tokens);
    blocks_holding(state, state.length() + tokens, true);
    keeps_hidden = keeps_hidden || item.keep_hidden;
    all_decode = all_decode && tokens == 1;
    keeps_rollback = keeps_rollback || item.keep_rollback;
    total += tokens;
    rows += all_rows || item.all_logits ? tokens : 1;
  }
  VT_CHECK(total <= max_tokens_, "forward_batch: ", total, " tokens exceed the step's ", max_tokens_);
  VT_CHECK(rows <= logit_rows_, "verify: logits for ", rows, " tokens exceed the ", logit_rows_,
           " rows one step holds (CudaModelOptions::max_logit_rows)");
  // Every check passed: open or close the windows (entry 0 snapshots the live state).
  Layout& layout = scratch_layout_;
  layout.clear();
  for (const BatchItem& item : items) {
    auto& state = dynamic_cast<CudaSequence&>(*item.state);
    prepare_window(state, item.keep_rollback);
    const int32_t entry = item.keep_rollback ? int32_t(state.length() - state.rollback_floor() + 1) : -1;
    layout.add_sequence(item.tokens, state.slot(), state.length(), all_rows || item.all_logits, entry,
                        blocks_holding(state, state.length() + int64_t(item.tokens.size())));
  }
  const auto upload_step = [&] { upload(layout); };
  // Decode graphs are captured without windows and with one logit row per sequence (an
  // all_logits item of one token has one row too).
  if (all_decode && !keeps_rollback && !all_rows) {
    // The graph of the next captured size: the rows past `count` decode in the scratch slot and
    // their outputs are not read.
    const int64_t padded = decode_graph_batch(count);
    const int32_t pad_token = 0;
    for (int64_t i = count; i < padded; ++i)
      layout.add_sequence(std::span<const int32_t>(&pad_token, 1), cache_.scratch_slot(), 0, false, -1, {});
    launch_decode_graph(padded, upload_step);
  } else {
    upload_step();
    run_step(total, count, rows);
  }
  if (keeps_hidden) {
    // Each keep_hidden item's rows of the final norm's output into its sequence's ring: one
    // launch, queued after the step (or its graph).
    std::vector<cuda::CopySpan> spans;
    for (int64_t i = 0; i < count; ++i)
      if (items[size_t(i)].keep_hidden)
        keep_sequence_hidden(*items[size_t(i)].state, layout.seq_start[size_t(i)],
                             layout.seq_start[size_t(i) + 1] - layout.seq_start[size_t(i)], spans);
    trace::OpScope op("mtp.keep_hidden", trace::OpGroup::kOther);
    cuda::copy_spans(spans.data(), int64_t(spans.size()), stream_);
  }
  for (const auto& item : items) dynamic_cast<CudaSequence&>(*item.state).advance(int64_t(item.tokens.size()));
  return rows;
}

void CudaRunner::check_window(const SequenceState& base_state, int64_t tokens, bool keep_rollback) const {
  if (!keep_rollback) return;
  const auto& state = dynamic_cast<const CudaSequence&>(base_state);
  VT_CHECK(supports_rollback(), "keep_rollback: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  const int64_t floor = state.window_open() ? state.rollback_floor() : state.length();
  VT_CHECK(state.length() + tokens - floor <= options_.max_rollback_tokens, "keep_rollback: a rollback window of ",
           state.length() + tokens - floor, " tokens (from length ", floor, ") exceeds max_rollback_tokens ",
           options_.max_rollback_tokens);
}

void CudaRunner::prepare_window(SequenceState& base_state, bool keep_rollback) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  if (!keep_rollback) {
    if (state.window_open()) state.close_window();
    return;
  }
  if (state.window_open()) return;
  cache_.copy_window_entry(state.slot(), 0, true, stream_);
  state.open_window();
}

void CudaRunner::rollback(SequenceState& base_state, int64_t length) {
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  VT_CHECK(supports_rollback(), "rollback: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  check_rollback(state, length);
  if (length == state.length()) return;
  // Attention needs nothing: its KV rows past `length` are rewritten before any position reads them.
  cache_.copy_window_entry(state.slot(), length - state.rollback_floor(), false, stream_);
  state.set_length(length);
}

void CudaRunner::commit(SequenceState& base_state) {
  VT_CHECK(supports_rollback(), "commit: this CUDA model keeps no rollback window (build it with "
           "CudaModelOptions::max_rollback_tokens > 0)");
  dynamic_cast<CudaSequence&>(base_state).close_window();
}

namespace {

class DeviceSnapshot final : public StateSnapshot {
 public:
  DeviceSnapshot(int64_t length, int64_t floats, cudaStream_t stream) : stream_(stream) {
    length_ = length;
    bytes_ = floats * int64_t(sizeof(float));
    const cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&data_), size_t(std::max<int64_t>(bytes_, 4)), stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // no room: the caller frees older snapshots or goes without
      data_ = nullptr;
      return;
    }
    VT_CUDA_CHECK(status);
  }
  ~DeviceSnapshot() override {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<StateSnapshot> CudaRunner::save_state(const SequenceState& base_state) {
  const auto& state = dynamic_cast<const CudaSequence&>(base_state);
  if (state.window_open()) return nullptr;  // mid-verify: the length is not settled
  auto snapshot = std::make_unique<DeviceSnapshot>(state.length(), cache_.snapshot_floats(), stream_);
  if (!snapshot->data()) return nullptr;
  cache_.copy_snapshot(state.slot(), snapshot->data(), true, stream_);
  return snapshot;
}

void CudaRunner::restore_state(const StateSnapshot& base_snapshot, SequenceState& base_state) {
  const auto& snapshot = dynamic_cast<const DeviceSnapshot&>(base_snapshot);
  auto& state = dynamic_cast<CudaSequence&>(base_state);
  VT_CHECK(state.length() == 0 && snapshot.length() <= state.capacity(), "restore_state: a new sequence of capacity >= ",
           snapshot.length(), " (has ", state.length(), " tokens, capacity ", state.capacity(), ")");
  blocks_holding(state, snapshot.length());  // the caller put the prefix's KV blocks there
  cache_.copy_snapshot(state.slot(), snapshot.data(), false, stream_);
  state.set_length(snapshot.length());
  state.close_window();
  state.kept_start = snapshot.length();
  state.kept_count = 0;
}

void CudaRunner::copy_kv_block(int32_t from, int32_t to) { cache_.copy_block(from, to, stream_); }

void CudaRunner::decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                             std::vector<int32_t>* next_tokens, bool use_graph) {
  const int64_t batch = int64_t(tokens.size());
  VT_CHECK(batch > 0 && batch <= max_seqs_ && positions.size() == tokens.size(), "decode_step: batch ", batch,
           " (max ", max_seqs_, ")");
  for (int32_t position : positions)
    VT_CHECK(position >= 0 && position < options_.max_context, "decode_step: position ", position, " beyond ",
             options_.max_context);
  kept_positions_ = {};
  const std::vector<const CudaSequence*>& sequences = bench_sequences(batch);
  Layout& layout = scratch_layout_;
  layout.clear();
  for (int64_t i = 0; i < batch; ++i) {
    const CudaSequence& sequence = *sequences[size_t(i)];
    layout.add_sequence(std::span<const int32_t>(&tokens[size_t(i)], 1), sequence.slot(), positions[size_t(i)], false,
                        -1, blocks_holding(sequence, positions[size_t(i)] + 1));
  }
  const auto upload_step = [&] { upload(layout); };
  if (!use_graph) {
    upload_step();
    run_step(batch, batch, batch);
  } else {
    launch_decode_graph(batch, upload_step);
  }
  if (next_tokens) {
    next_tokens->resize(size_t(batch));
    VT_CUDA_CHECK(cudaMemcpyAsync(next_tokens->data(), model_->next_tokens(), size_t(batch) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

const std::vector<const CudaSequence*>& CudaRunner::bench_sequences(int64_t batch) {
  const auto live = [&] {
    step_sequences_.clear();
    for (const CudaSequence* sequence : slot_sequences_)
      if (sequence && int64_t(step_sequences_.size()) < batch) step_sequences_.push_back(sequence);
    return int64_t(step_sequences_.size());
  };
  for (int64_t have = live(); have < batch; ++have) {
    const int64_t entry = next_own_entry_--;
    VT_CHECK(kv_cache_.admit(entry, options_.max_context, 0), "decode_step: no room for bench sequence ", have,
             " of ", options_.max_context, " tokens (", kv_cache_.free_slots(), " slots and ",
             kv_cache_.free_blocks(), " blocks free)");
    own_bench_sequences_.push_back(make_sequence(entry, options_.max_context, true, false));
  }
  live();
  return step_sequences_;
}

std::vector<float> CudaRunner::last_logits(int64_t rows) {
  VT_CHECK(rows > 0 && rows <= logit_rows_, "last_logits: ", rows, " rows");
  std::vector<float> host(size_t(rows * info().vocab_size));
  copy_logits_to_host(host.data(), rows);
  return host;
}

void CudaRunner::randomize_state(uint64_t seed) { cache_.randomize(seed, stream_); }

}  // namespace vt
