// The simulated tensor-parallel world: W rank models, one thread each per forward.
#include "parallel/tensor_parallel_model.h"

#include <exception>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace vt {

// One sequence state per rank (each holds its own KV heads and GDN value heads' states).
class TensorParallelQwen35Model::State final : public SequenceState {
 public:
  explicit State(int64_t capacity) { capacity_ = capacity; }
  std::vector<std::unique_ptr<SequenceState>> ranks;
  // The ranks advance in lockstep; rank 0 speaks for them.
  void sync() {
    length_ = ranks[0]->length();
    rollback_floor_ = ranks[0]->rollback_floor();
  }
};

TensorParallelQwen35Model::TensorParallelQwen35Model(const std::string& dir, int world_size,
                                                     const Qwen35LoadOptions& options)
    : config_(parse_qwen35_config(dir + "/config.json")),
      store_(WeightStore::open(dir)),
      plan_(config_, world_size),
      world_(world_size) {
  // The full weights live only until every rank has its copy of its slices.
  Qwen35Weights full = load_qwen35_weights(store_, config_, options);
  for (int rank = 0; rank < world_size; ++rank) {
    AllReduceHook hook = [this, rank](const TensorView& partial) {
      world_.all_reduce(rank, partial);
    };
    ranks_.push_back(std::make_unique<Qwen35Model>(
        plan_.rank_config(rank), shard_qwen35_weights(full, plan_, rank), std::move(hook)));
  }
  info_ = ranks_[0]->info();
}

std::unique_ptr<SequenceState> TensorParallelQwen35Model::new_sequence(int64_t capacity) const {
  auto state = std::make_unique<State>(capacity);
  for (const auto& rank : ranks_) state->ranks.push_back(rank->new_sequence(capacity));
  return state;
}

void TensorParallelQwen35Model::run_ranks(const std::function<void(int rank)>& body) {
  const int world = plan_.world_size();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  auto guarded = [&](int rank) {
    try {
      body(rank);
    } catch (const std::exception& error) {
      errors[size_t(rank)] = std::current_exception();
      world_.abort(str("rank ", rank, " failed: ", error.what()));
    } catch (...) {
      errors[size_t(rank)] = std::current_exception();
      world_.abort(str("rank ", rank, " failed"));
    }
  };
  std::vector<std::thread> threads;
  for (int rank = 1; rank < world; ++rank) threads.emplace_back(guarded, rank);
  guarded(0);
  for (auto& thread : threads) thread.join();
  world_.reset();
  // A rank that failed on its own comes before the ones its abort released.
  std::exception_ptr released;
  for (const auto& error : errors) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const WorldAborted&) {
      if (!released) released = error;
    }
  }
  if (released) std::rethrow_exception(released);
}

void TensorParallelQwen35Model::forward(std::span<const int32_t> tokens, SequenceState& base_state,
                                        const TensorView& logits, const ForwardOptions& options) {
  State& state = dynamic_cast<State&>(base_state);
  check_forward(state, int64_t(tokens.size()), logits, config_.vocab_size, options.all_logits);
  std::vector<Buffer> rank_logits;  // ranks 1.. write their identical copy here
  for (int rank = 1; rank < plan_.world_size(); ++rank)
    rank_logits.emplace_back(DType::kF32, logits.shape);
  run_ranks([&](int rank) {
    ranks_[size_t(rank)]->forward(tokens, *state.ranks[size_t(rank)],
                                  rank == 0 ? logits : rank_logits[size_t(rank - 1)].view(),
                                  options);
  });
  state.sync();
}

void TensorParallelQwen35Model::rollback(SequenceState& base_state, int64_t length) {
  State& state = dynamic_cast<State&>(base_state);
  check_rollback(state, length);
  run_ranks([&](int rank) { ranks_[size_t(rank)]->rollback(*state.ranks[size_t(rank)], length); });
  state.sync();
}

void TensorParallelQwen35Model::commit(SequenceState& base_state) {
  State& state = dynamic_cast<State&>(base_state);
  for (size_t rank = 0; rank < ranks_.size(); ++rank) ranks_[rank]->commit(*state.ranks[rank]);
  state.sync();
}

void TensorParallelQwen35Model::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  for (auto& rank : ranks_) rank->quantize_lm_head_fp8(quantization);
}

std::string TensorParallelQwen35Model::describe() const {
  std::ostringstream text;
  text << "architecture: " << config_.architecture
       << " (simulated on the CPU: one thread per rank)\n"
       << "weights: " << store_.names().size() << " tensors, " << store_.total_bytes() << " bytes\n"
       << plan_.describe();
  return text.str();
}

}  // namespace vt
