#include "cache/device_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "cache/hybrid_cache.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "ops/gdn/gdn.h"
#include "trace/intent.h"

namespace vt {
namespace {

// The bytes the constructor allocates (its buffers, in its order).
size_t cache_bytes(const CacheSpec& spec, int64_t slots, int64_t sequences, int64_t kv_rows, int64_t tokens,
                   int64_t entries) {
  const size_t activation = dtype_size(spec.activations), f32 = sizeof(float);
  size_t bytes = 0;
  for (const CacheLayerSpec& layer : spec.layers) {
    if (layer.attention) {
      bytes += 2 * size_t(kv_rows * layer.kv_heads * layer.head_dim) * activation;
      continue;
    }
    const size_t conv = size_t(layer.conv_channels * layer.conv_history) * f32;
    const size_t state = size_t(layer.state_heads * layer.state_k * layer.state_v) * f32;
    bytes += size_t(slots) * (conv + state) + size_t(sequences * entries) * (conv + state);
  }
  if (spec.has_mtp) bytes += 2 * size_t(sequences * tokens * spec.mtp.kv_heads * spec.mtp.head_dim) * activation;
  return bytes;
}

}  // namespace

DeviceCache::DeviceCache(const CacheSpec& spec, const DeviceCacheOptions& options) : options_(options) {
  VT_CHECK(options.sequences >= 1 && options.num_blocks >= 1 && options.num_blocks < INT32_MAX &&
               options.max_blocks >= 1 && options.block_size >= 1 && options.window_entries >= 0,
           "device cache: ", options.sequences, " sequences, a pool of ", options.num_blocks, " blocks of ",
           options.block_size, " tokens (", options.max_blocks, " per sequence), ", options.window_entries,
           " window entries");
  const int64_t slots = state_slots(), S = options.sequences, entries = options.window_entries;
  // Block num_blocks is the scratch block: the scratch slot's row points there (graph warm-ups
  // write it; its contents are garbage by design).
  const int64_t kv_rows = (options.num_blocks + 1) * options.block_size;
  cuda::check_fits(cache_bytes(spec, slots, S, kv_rows, options.max_blocks * options.block_size, entries),
                   str("KV cache (", options.num_blocks, " blocks of ", options.block_size,
                       " tokens) and recurrent states for ", S, " sequences", entries > 0 ? " with rollback windows" : ""),
                   "lower --max-running, --max-context or --cache-tokens");
  for (const CacheLayerSpec& layer : spec.layers) {
    Layer buffers;
    if (layer.attention) {
      buffers.k = cuda::DeviceBuffer(spec.activations, {kv_rows, layer.kv_heads, layer.head_dim});
      buffers.v = cuda::DeviceBuffer(spec.activations, {kv_rows, layer.kv_heads, layer.head_dim});
    } else {
      buffers.conv = cuda::DeviceBuffer(DType::kF32, {slots, layer.conv_channels, layer.conv_history});
      buffers.recurrent = cuda::DeviceBuffer(DType::kF32, {slots, layer.state_heads, layer.state_k, layer.state_v});
      if (entries > 0) {
        buffers.conv_window = cuda::DeviceBuffer(DType::kF32, {S, entries, layer.conv_channels, layer.conv_history});
        buffers.recurrent_window =
            cuda::DeviceBuffer(DType::kF32, {S * entries, layer.state_heads, layer.state_k, layer.state_v});
      }
    }
    buffers_.push_back(std::move(buffers));
  }
  for (Layer& buffers : buffers_)
    layers_.push_back({buffers.k.data(), buffers.v.data(), buffers.conv.as<float>(), buffers.recurrent.as<float>(),
                       buffers.conv_window.as<float>(), buffers.recurrent_window.as<float>()});
  if (spec.has_mtp) {
    // The head's sequences keep whole rows of blocks of their own (a head sequence lives beside
    // its drafter, outside the target's admission).
    const int64_t rows = S * options.max_blocks * options.block_size;
    mtp_k_ = cuda::DeviceBuffer(spec.activations, {rows, spec.mtp.kv_heads, spec.mtp.head_dim});
    mtp_v_ = cuda::DeviceBuffer(spec.activations, {rows, spec.mtp.kv_heads, spec.mtp.head_dim});
    mtp_ = {mtp_k_.data(), mtp_v_.data()};
    Buffer identity(DType::kI32, {S, options.max_blocks});
    std::iota(identity.view().as<int32_t>(), identity.view().as<int32_t>() + identity.numel(), 0);
    mtp_block_tables_ = cuda::to_device(identity);
  }
  // Every entry starts at the scratch block: a row is in bounds before a sequence fills it.
  Buffer tables(DType::kI32, {slots, options.max_blocks});
  std::fill_n(tables.view().as<int32_t>(), tables.numel(), int32_t(options.num_blocks));
  block_tables_ = cuda::to_device(tables);
  VT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_tables_), tables.view().bytes()));
  std::copy_n(tables.view().as<int32_t>(), tables.numel(), host_tables_);
}

DeviceCache::~DeviceCache() {
  if (host_tables_) cudaFreeHost(host_tables_);
}

void DeviceCache::set_block_row(int64_t slot, std::span<const int32_t> blocks, cudaStream_t stream) {
  VT_CHECK(slot >= 0 && slot < state_slots() && int64_t(blocks.size()) <= options_.max_blocks, "block table: ",
           blocks.size(), " blocks for slot ", slot, " (", state_slots(), " slots of ", options_.max_blocks,
           " blocks)");
  int32_t* row = host_tables_ + slot * options_.max_blocks;
  size_t first = 0, end = blocks.size();
  while (first < end && row[first] == blocks[first]) ++first;
  if (first == end) return;
  while (row[end - 1] == blocks[end - 1]) --end;
  for (size_t i = first; i < end; ++i) {
    VT_CHECK(blocks[i] >= 0 && blocks[i] < options_.num_blocks, "block table: block ", blocks[i],
             " outside the pool of ", options_.num_blocks);
    row[i] = blocks[i];
  }
  VT_CUDA_CHECK(cudaMemcpyAsync(block_tables_.as<int32_t>() + slot * options_.max_blocks + first, row + first,
                                (end - first) * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
}

void DeviceCache::reset_slot(int64_t slot, cudaStream_t stream) const {
  VT_CHECK(slot >= 0 && slot < state_slots(), "device cache: slot ", slot, " of ", state_slots());
  for (const Layer& layer : buffers_) {
    if (!layer.recurrent.data()) continue;
    const size_t conv_bytes = layer.conv.bytes() / size_t(state_slots());
    const size_t state_bytes = layer.recurrent.bytes() / size_t(state_slots());
    VT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(layer.conv.data()) + slot * conv_bytes, 0, conv_bytes, stream));
    VT_CUDA_CHECK(
        cudaMemsetAsync(static_cast<char*>(layer.recurrent.data()) + slot * state_bytes, 0, state_bytes, stream));
  }
}

void DeviceCache::copy_window_entry(int64_t slot, int64_t entry, bool into_window, cudaStream_t stream) {
  const int64_t entries = options_.window_entries;
  VT_CHECK(slot >= 0 && slot < options_.sequences && entry >= 0 && entry < entries, "rollback window: slot ", slot,
           " entry ", entry, " outside ", options_.sequences, " x ", entries);
  std::vector<cuda::CopySpan> spans;
  for (Layer& layer : buffers_) {
    if (!layer.recurrent_window.data()) continue;
    for (auto [live, window] : {std::pair{&layer.recurrent, &layer.recurrent_window},
                                std::pair{&layer.conv, &layer.conv_window}}) {
      const int64_t count = live->shape().numel() / state_slots();
      float* state = live->as<float>() + slot * count;
      float* saved = window->as<float>() + (slot * entries + entry) * count;
      spans.push_back(into_window ? cuda::CopySpan{saved, state, count} : cuda::CopySpan{state, saved, count});
    }
  }
  trace::OpScope op(into_window ? "gdn.window_open" : "gdn.rollback", trace::OpGroup::kGdn);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream);
}

namespace {

// Floats of one KV row (a token's [kv_heads, head_dim] act), copied as whole floats.
int64_t row_floats(const cuda::DeviceBuffer& kv) {
  return int64_t(kv.bytes()) / kv.shape()[0] / int64_t(sizeof(float));
}

}  // namespace

// A snapshot holds, layer after layer, the conv and recurrent states of the linear-attention
// layers.
std::vector<cuda::CopySpan> DeviceCache::snapshot_spans(int64_t slot, float* snapshot, bool save,
                                                        int64_t* floats) const {
  VT_CHECK(slot >= 0 && slot < state_slots(), "prefix snapshot: slot ", slot, " of ", state_slots());
  std::vector<cuda::CopySpan> spans;
  int64_t offset = 0;
  for (const Layer& layer : buffers_) {
    if (!layer.recurrent.data()) continue;
    for (const cuda::DeviceBuffer* state : {&layer.conv, &layer.recurrent}) {
      const int64_t count = state->shape().numel() / state_slots();
      float* live = static_cast<float*>(state->data()) + slot * count;
      float* saved = snapshot ? snapshot + offset : nullptr;
      offset += count;
      spans.push_back(save ? cuda::CopySpan{saved, live, count} : cuda::CopySpan{live, saved, count});
    }
  }
  *floats = offset;
  return spans;
}

int64_t DeviceCache::snapshot_floats() const {
  int64_t floats = 0;
  snapshot_spans(0, nullptr, true, &floats);
  return floats;
}

void DeviceCache::copy_snapshot(int64_t slot, float* snapshot, bool save, cudaStream_t stream) const {
  int64_t floats = 0;
  const std::vector<cuda::CopySpan> spans = snapshot_spans(slot, snapshot, save, &floats);
  if (spans.empty()) return;
  trace::OpScope op(save ? "prefix.save" : "prefix.restore", trace::OpGroup::kOther);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream);
}

void DeviceCache::copy_block(int32_t from, int32_t to, cudaStream_t stream) const {
  VT_CHECK(from >= 0 && from < options_.num_blocks && to >= 0 && to < options_.num_blocks && from != to,
           "copy_block: block ", from, " to ", to, " in a pool of ", options_.num_blocks);
  std::vector<cuda::CopySpan> spans;
  for (const Layer& layer : buffers_) {
    if (!layer.k.data()) continue;
    const int64_t count = options_.block_size * row_floats(layer.k);
    for (const cuda::DeviceBuffer* kv : {&layer.k, &layer.v}) {
      float* rows = static_cast<float*>(kv->data());
      spans.push_back({rows + to * count, rows + from * count, count});
    }
  }
  if (spans.empty()) return;
  trace::OpScope op("prefix.copy_block", trace::OpGroup::kOther);
  cuda::copy_spans(spans.data(), int64_t(spans.size()), stream);
}

int64_t DeviceCache::block_bytes() const {
  int64_t bytes = 0;
  for (const Layer& layer : buffers_)
    if (layer.k.data()) bytes += 2 * options_.block_size * row_floats(layer.k) * int64_t(sizeof(float));
  return bytes;
}

void DeviceCache::randomize(uint64_t seed, cudaStream_t stream) {
  for (Layer& layer : buffers_) {
    for (cuda::DeviceBuffer* buffer : {&layer.k, &layer.v})
      if (buffer->data())
        cuda::fill_random(buffer->data(), buffer->view().dtype, buffer->shape().numel(), ++seed, 1.0f, 0.0f, stream);
    if (layer.recurrent.data()) {
      cuda::fill_random(layer.recurrent.data(), DType::kF32, layer.recurrent.shape().numel(), ++seed, 0.05f, 0.0f,
                        stream);
      cuda::fill_random(layer.conv.data(), DType::kF32, layer.conv.shape().numel(), ++seed, 1.0f, 0.0f, stream);
    }
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace vt
