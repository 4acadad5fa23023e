// Tensor parallelism over NCCL: one thread per rank, each driving its GPU's Qwen35CudaModel.
#include "parallel/tensor_parallel_cuda_model.h"

#include <cuda_runtime.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "cuda/check.h"

namespace vt {

// Persistent rank threads (CUDA graphs and NCCL collectives of a rank are launched from its own
// thread, its device current); run() hands every thread the same body and waits for all.
class TensorParallelCudaModel::Workers {
 public:
  explicit Workers(int world) : errors_(size_t(world)) {
    for (int rank = 0; rank < world; ++rank) threads_.emplace_back([this, rank] { loop(rank); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  void run(const std::function<void(int)>& body) {
    std::unique_lock<std::mutex> lock(mutex_);
    body_ = &body;
    std::fill(errors_.begin(), errors_.end(), nullptr);
    pending_ = int(threads_.size());
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
    for (const auto& error : errors_)
      if (error) std::rethrow_exception(error);
  }

 private:
  void loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* body = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        body = body_;
      }
      std::exception_ptr error;
      try {
        VT_CUDA_CHECK(cudaSetDevice(rank));
        (*body)(rank);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[size_t(rank)] = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* body_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

// One sequence state per rank (each holds its KV heads and GDN value heads); they advance in
// lockstep and rank 0's speaks for them.
class TensorParallelCudaModel::State final : public SequenceState {
 public:
  explicit State(int64_t capacity) { capacity_ = capacity; }
  std::vector<std::unique_ptr<SequenceState>> ranks;
  void sync() { length_ = ranks[0]->length(); }
};

TensorParallelCudaModel::TensorParallelCudaModel(Qwen35Config config, int world)
    : config_(std::move(config)), plan_(config_, world) {
  int devices = 0;
  VT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  VT_CHECK(world >= 1 && world <= devices, "tensor parallel size ", world, ": this machine has ", devices,
           " CUDA device(s); one GPU per rank");
  workers_ = std::make_unique<Workers>(world);
}

TensorParallelCudaModel::~TensorParallelCudaModel() {
  // Each rank's graphs, buffers and communicator go on its own thread, models before communicators.
  if (!workers_) return;
  try {
    run([this](int rank) {
      if (size_t(rank) < ranks_.size()) ranks_[size_t(rank)].reset();
      if (size_t(rank) < communicators_.size()) communicators_[size_t(rank)].reset();
    });
  } catch (...) {
    // Destructors do not throw; a rank that failed to free leaks only.
  }
}

void TensorParallelCudaModel::run(const std::function<void(int rank)>& body) const { workers_->run(body); }

void TensorParallelCudaModel::build(const std::function<CudaWeights(int rank)>& weights,
                                    const CudaModelOptions& options) {
  const int world = plan_.world_size();
  const NcclCommunicator::UniqueId id = NcclCommunicator::make_unique_id();
  communicators_.resize(size_t(world));
  ranks_.resize(size_t(world));
  // Communicator construction blocks until every rank has joined: all threads at once.
  run([&](int rank) { communicators_[size_t(rank)] = std::make_unique<NcclCommunicator>(id, world, rank, rank); });
  run([&](int rank) {
    CudaModelOptions rank_options = options;
    rank_options.device = rank;
    auto model = std::make_unique<Qwen35CudaModel>(plan_.rank_config(rank), weights(rank), rank_options,
                                                   "rank " + std::to_string(rank));
    const NcclCommunicator* communicator = communicators_[size_t(rank)].get();
    model->set_all_reduce([communicator](void* data, int64_t count, DType dtype, cudaStream_t stream) {
      communicator->all_reduce_sum(TensorView{data, dtype, Device::kCuda, Shape{count}}, stream);
    });
    model->set_emit_logits(rank == 0);
    ranks_[size_t(rank)] = std::move(model);
  });
  info_ = ranks_[0]->info();
}

std::unique_ptr<TensorParallelCudaModel> TensorParallelCudaModel::load(const std::string& dir, int world,
                                                                       const CudaModelOptions& options) {
  Qwen35Config config = parse_qwen35_config(dir + "/config.json");
  std::unique_ptr<TensorParallelCudaModel> model(new TensorParallelCudaModel(config, world));
  const TensorParallelPlan& plan = model->plan_;
  model->build(
      [&](int rank) {
        WeightStore store = WeightStore::open(dir);  // each rank reads what it keeps
        return load_cuda_weights(store, config, options.activations, &plan, rank);
      },
      options);
  std::ostringstream description;
  description << "architecture: " << config.architecture << " on " << world << " CUDA GPUs (tensor parallel, NCCL)"
              << ", activations " << dtype_name(options.activations) << ", " << model->weight_bytes()
              << " weight bytes in all\n"
              << plan.describe();
  model->description_ = description.str();
  return model;
}

std::unique_ptr<TensorParallelCudaModel> TensorParallelCudaModel::synthetic(const Qwen35Config& config, bool fp8,
                                                                            int world, const CudaModelOptions& options,
                                                                            uint64_t seed,
                                                                            const std::string& description) {
  std::unique_ptr<TensorParallelCudaModel> model(new TensorParallelCudaModel(config, world));
  const TensorParallelPlan& plan = model->plan_;
  model->build([&](int rank) { return synthetic_cuda_weights(plan.rank_config(rank), fp8, seed); }, options);
  model->description_ = description + ", tensor parallel " + std::to_string(world);
  return model;
}

std::unique_ptr<SequenceState> TensorParallelCudaModel::new_sequence(int64_t capacity) const {
  auto state = std::make_unique<State>(capacity);
  state->ranks.resize(ranks_.size());
  run([&](int rank) { state->ranks[size_t(rank)] = ranks_[size_t(rank)]->new_sequence(capacity); });
  return state;
}

void TensorParallelCudaModel::forward(std::span<const int32_t> tokens, SequenceState& base_state,
                                      const TensorView& logits, const ForwardOptions& options) {
  State& state = dynamic_cast<State&>(base_state);
  check_forward(state, int64_t(tokens.size()), logits, config_.vocab_size, options.all_logits);
  VT_CHECK(!options.keep_hidden, "forward: a tensor-parallel model keeps no hidden states per sequence "
           "(keep_hidden; the MTP head does not run on tensor-parallel ranks)");
  // Rank 0 alone writes `logits` (the others keep theirs on the device).
  run([&](int rank) { ranks_[size_t(rank)]->forward(tokens, *state.ranks[size_t(rank)], logits, options); });
  state.sync();
}

void TensorParallelCudaModel::forward_batch(std::span<const BatchItem> items, const TensorView& logits) {
  forward_batch_ranks(items, [&](int rank, std::span<const BatchItem> rank_items) {
    ranks_[size_t(rank)]->forward_batch(rank_items, logits);
  });
}

void TensorParallelCudaModel::forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                                                   std::span<int32_t> tokens, const TensorView& logits) {
  forward_batch_ranks(items, [&](int rank, std::span<const BatchItem> rank_items) {
    if (rank == 0) {
      ranks_[0]->forward_batch_sample(rank_items, rows, tokens, logits);
    } else {
      ranks_[size_t(rank)]->forward_batch(rank_items, logits);  // emits nothing (set_emit_logits)
    }
  });
}

void TensorParallelCudaModel::forward_batch_ranks(
    std::span<const BatchItem> items, const std::function<void(int, std::span<const BatchItem>)>& step) {
  VT_CHECK(!items.empty(), "forward_batch: no sequences");
  for (size_t i = 0; i < items.size(); ++i) {
    const SequenceState& state = *items[i].state;
    VT_CHECK(!items[i].tokens.empty(), "forward_batch: sequence ", i, " has no tokens");
    VT_CHECK(!items[i].keep_hidden, "forward_batch: a tensor-parallel model keeps no hidden states per sequence "
             "(keep_hidden; the MTP head does not run on tensor-parallel ranks)");
    VT_CHECK(state.length() + int64_t(items[i].tokens.size()) <= state.capacity(), "forward_batch: sequence ", i,
             ": ", state.length(), " + ", items[i].tokens.size(), " tokens exceed its capacity ", state.capacity());
  }
  std::vector<std::vector<BatchItem>> rank_items(ranks_.size());
  for (size_t rank = 0; rank < ranks_.size(); ++rank)
    for (const BatchItem& item : items)
      rank_items[rank].push_back(
          {item.tokens, dynamic_cast<State&>(*item.state).ranks[rank].get(), item.keep_rollback, item.all_logits});
  run([&](int rank) { step(rank, rank_items[size_t(rank)]); });
  for (const BatchItem& item : items) dynamic_cast<State&>(*item.state).sync();
}

void TensorParallelCudaModel::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  run([&](int rank) { ranks_[size_t(rank)]->quantize_lm_head_fp8(quantization); });
}

void TensorParallelCudaModel::decode_step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                                          std::vector<int32_t>* next_tokens, bool use_graph) {
  run([&](int rank) {
    ranks_[size_t(rank)]->decode_step(tokens, positions, rank == 0 ? next_tokens : nullptr, use_graph);
  });
}

std::vector<float> TensorParallelCudaModel::last_logits(int64_t rows) {
  std::vector<float> logits;
  run([&](int rank) {
    if (rank == 0) logits = ranks_[0]->last_logits(rows);
  });
  return logits;
}

void TensorParallelCudaModel::randomize_state(uint64_t seed) {
  run([&](int rank) { ranks_[size_t(rank)]->randomize_state(seed + uint64_t(rank) * 7919); });
}

double TensorParallelCudaModel::decode_bytes(int64_t batch, int64_t context) const {
  double busiest = 0;
  for (const auto& rank : ranks_) busiest = std::max(busiest, rank->decode_bytes(batch, context));
  return busiest;
}

size_t TensorParallelCudaModel::weight_bytes() const {
  size_t total = 0;
  for (const auto& rank : ranks_) total += rank->weights().bytes();
  return total;
}

}  // namespace vt
