// The cache's memory on the device, for any model that describes it (model/cuda_forward.h's
// CacheSpec): a pool of paged KV blocks of the attention layers that every sequence draws from,
// conv and recurrent state slots of the linear-attention layers, their rollback windows
// (speculative verification), and the MTP head's KV rows. Allocated once. Which blocks and slot a
// sequence holds is the HybridCache's (cache/hybrid_cache.h); the device block table
// [state_slots, max_blocks] mirrors it, row `slot` for the sequence in that slot. Rollback is
// written here, once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuda/device_buffer.h"
#include "model/cuda_forward.h"
#include "ops/gdn/gdn.h"

namespace vt {

struct DeviceCacheOptions {
  int64_t sequences = 1;    // sequence slots; one more scratch slot is kept for graph warm-ups
  int64_t num_blocks = 0;   // KV blocks in the pool the sequences share; one more scratch block
  int64_t max_blocks = 0;   // KV blocks one sequence holds at most (a block-table row)
  int64_t block_size = 32;  // tokens per KV block
  int64_t window_entries = 0;  // rollback window entries per sequence slot (0: no rollback)
};

class DeviceCache {
 public:
  DeviceCache(const CacheSpec& spec, const DeviceCacheOptions& options);
  ~DeviceCache();
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;

  int64_t sequences() const { return options_.sequences; }
  int64_t state_slots() const { return options_.sequences + 1; }
  int64_t scratch_slot() const { return options_.sequences; }
  int64_t num_blocks() const { return options_.num_blocks; }
  int64_t max_blocks() const { return options_.max_blocks; }
  int64_t block_size() const { return options_.block_size; }
  int64_t window_entries() const { return options_.window_entries; }
  const int32_t* block_tables() const { return block_tables_.as<int32_t>(); }  // [state_slots, max_blocks]
  std::span<const LayerCache> layers() const { return layers_; }
  // The MTP head's KV rows keep a layout of their own: head sequence s owns blocks
  // [s * max_blocks, (s + 1) * max_blocks) of mtp(), through the identity table
  // mtp_block_tables() [sequences, max_blocks].
  const LayerCache& mtp() const { return mtp_; }
  const int32_t* mtp_block_tables() const { return mtp_block_tables_.as<int32_t>(); }

  // Points `slot`'s block-table row at `blocks` (<= max_blocks; the entries past them keep what
  // they hold, which no position below the sequence's length reads). Only the entries that
  // differ from what the device holds are copied, from a pinned mirror, queued on `stream`: the
  // caller makes sure no earlier such copy is still pending (the runner's upload waits for its
  // last one before it writes a row).
  void set_block_row(int64_t slot, std::span<const int32_t> blocks, cudaStream_t stream);
  // A new sequence in `slot` starts from zero recurrent and conv state (KV rows are written before
  // any position reads them).
  void reset_slot(int64_t slot, cudaStream_t stream) const;
  // Copies every linear-attention layer's state of `slot` into its window entry `entry`
  // (into_window) or back from it (a rollback), in one launch.
  void copy_window_entry(int64_t slot, int64_t entry, bool into_window, cudaStream_t stream);
  // Prefix caching: a snapshot holds a slot's conv and recurrent states (the floats
  // snapshot_floats() of them), saved from `slot` or restored into it by one launch; the KV rows
  // stay in their blocks, which a prefix shares by reference. copy_block copies the KV rows of
  // block `from` into block `to`, every attention layer (a shared prefix's last, partly filled
  // block, which its new owner writes into), by one launch. block_bytes: one block's KV, every
  // attention layer.
  int64_t snapshot_floats() const;
  void copy_snapshot(int64_t slot, float* snapshot, bool save, cudaStream_t stream) const;
  void copy_block(int32_t from, int32_t to, cudaStream_t stream) const;
  int64_t block_bytes() const;
  // Random KV rows and states (benchmarks at a context length: the values do not change the work).
  void randomize(uint64_t seed, cudaStream_t stream);

 private:
  std::vector<cuda::CopySpan> snapshot_spans(int64_t slot, float* snapshot, bool save, int64_t* floats) const;
  struct Layer {
    cuda::DeviceBuffer k, v, conv, recurrent, conv_window, recurrent_window;
  };
  DeviceCacheOptions options_;
  std::vector<Layer> buffers_;
  std::vector<LayerCache> layers_;
  cuda::DeviceBuffer mtp_k_, mtp_v_, mtp_block_tables_;
  LayerCache mtp_;
  cuda::DeviceBuffer block_tables_;
  int32_t* host_tables_ = nullptr;  // pinned: what block_tables_ holds, [state_slots, max_blocks]
};

}  // namespace vt
