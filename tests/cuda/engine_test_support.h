// The serving engine over a model in the CUDA tests: requests submitted at once, each one's
// tokens and final event collected.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace vt::testing {

// One request's tokens and its final event.
struct Outcome {
  std::vector<int32_t> ids;
  TokenEvent last;
};

// Runs the requests at once on one engine (waiting up to 300 s: compute-sanitizer runs these too);
// returns each one's outcome and the engine's stats.
inline std::vector<Outcome> run_all(Model& model, const EngineOptions& options,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const std::vector<RequestParams>& params, EngineStats* stats = nullptr) {
  std::mutex mutex;
  std::condition_variable done;
  size_t finished = 0;
  std::vector<Outcome> outcomes(prompts.size());
  {
    Engine engine(model, nullptr, options);
    for (size_t i = 0; i < prompts.size(); ++i)
      engine.submit(prompts[i], params[i], [&, i](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) outcomes[i].ids.push_back(event.token_id);
        if (event.finished) {
          outcomes[i].last = event;
          ++finished;
          done.notify_all();
        }
      });
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(300), [&] { return finished == prompts.size(); }));
    lock.unlock();
    if (stats) *stats = engine.stats();
  }
  return outcomes;
}

}  // namespace vt::testing
