// The engine's prefix caching: a request starts from the longest saved state its tokens extend,
// over the saved tokens' KV blocks (shared, read-only; the last, partly filled block copied into
// one of its own), and a running request's state is saved with references to its blocks. Blocks
// only saved states hold go back to the pool (least recently used first) whenever admission or
// growth is short of them.
#include <cstdio>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_sequence.h"

namespace vt {

PrefixCache::Hit Engine::find_prefix(const Sequence& sequence) {
  // An MTP drafter reads the target's hidden states of every position, which no snapshot keeps.
  if (!prefix_ || sequence.keep_hidden) return {};
  // At least the last token is computed: its logits make the next token.
  return prefix_->find(sequence.tokens, int64_t(sequence.tokens.size()) - 1);
}

void Engine::restore_prefix(Sequence& sequence, const PrefixCache::Hit& hit) {
  const int64_t shared = hit.length / cache_.block_size();
  // The sequence writes its next tokens into the saved prefix's last block: it gets a copy.
  if (shared < int64_t(hit.blocks.size()))
    model_.copy_kv_block(hit.blocks.back(), cache_.block_table(sequence.id)[size_t(shared)]);
  model_.restore_state(*hit.snapshot, *sequence.state);
  sequence.fed = hit.length;
  if (sequence.preemptions > 0) return;
  sequence.cached = std::min(hit.length, sequence.prompt_size);
  totals_.prefix.hits += sequence.cached;
}

void Engine::save_prefix(Sequence& sequence) {
  if (sequence.keep_hidden || sequence.state->length() != sequence.fed) return;  // mid-verify
  std::lock_guard<std::mutex> lock(mutex_);  // the pool's counts are read by stats()
  const std::span<const int32_t> tokens(sequence.tokens.data(), size_t(sequence.fed));
  if (prefix_->touch(tokens)) return;
  const int64_t length = sequence.fed, full = length / cache_.block_size();
  const std::vector<int32_t>& table = cache_.block_table(sequence.id);
  // The entry's references: the full blocks as they are (the sequence writes only after them).
  std::vector<int32_t> blocks(table.begin(), table.begin() + full);
  cache_.retain_blocks(blocks);
  try {
    if (full < cache_.blocks_for(length)) {
      if (sequence.finished) {
        // It writes no more: its last block is shared as it is.
        blocks.push_back(table[size_t(full)]);
        cache_.retain_blocks(std::span<const int32_t>(&blocks.back(), 1));
      } else {
        // It goes on writing after `length` in its last block: the entry keeps a copy.
        std::optional<std::vector<int32_t>> copy;
        if (make_room(1)) copy = cache_.allocate_blocks(1);
        if (!copy) {
          cache_.release_blocks(blocks);
          return;
        }
        blocks.push_back(copy->front());  // released with the rest if the copy throws
        model_.copy_kv_block(table[size_t(full)], blocks.back());
      }
    }
    // A finished speculating sequence may end inside its verify window: its state is at `fed`
    // tokens (checked above), so the window goes.
    if (sequence.drafter) model_.commit(*sequence.state);
    std::unique_ptr<StateSnapshot> snapshot = model_.save_state(*sequence.state);
    // No room on the model's device: the least recently used states make room.
    while (!snapshot && prefix_->evict_one()) snapshot = model_.save_state(*sequence.state);
    if (!snapshot) {
      cache_.release_blocks(blocks);
      return;
    }
    prefix_->insert(tokens, std::move(snapshot), std::move(blocks));
  } catch (const std::exception& error) {
    // Saving is an optimisation: the request goes on, and so does the server, without this state.
    cache_.release_blocks(blocks);
    std::fprintf(stderr, "vt engine: prefix cache: a state of %zu tokens not saved: %s\n", tokens.size(), error.what());
  }
}

bool Engine::make_room(int64_t blocks) {
  if (cache_.free_blocks() >= blocks) return true;
  return prefix_ && prefix_->make_room(blocks);
}

bool Engine::reserve(Sequence& sequence, int64_t tokens) {
  if (cache_.reserve(sequence.id, tokens)) return true;
  const int64_t missing = cache_.blocks_for(tokens) - int64_t(cache_.block_table(sequence.id).size());
  return make_room(missing) && cache_.reserve(sequence.id, tokens);
}

void Engine::update_prefix_stats() {
  prefix_->trim();
  EngineStats::Prefix& stats = totals_.prefix;
  stats.snapshots = prefix_->entries();
  stats.snapshot_bytes = prefix_->snapshot_bytes();
  stats.blocks = prefix_->cached_blocks();
  stats.bytes = prefix_->bytes();
  stats.evictions = prefix_->evictions();
}

}  // namespace vt
