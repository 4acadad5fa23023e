// A CPU model's prefix-cache snapshot (model.h's StateSnapshot): copies of its state's tensors,
// the KV rows [0, length) and whole recurrent states, in the order the model saved them.
#pragma once

#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/model.h"

namespace vt {

class HostSnapshot final : public StateSnapshot {
 public:
  explicit HostSnapshot(int64_t length) { length_ = length; }
  // Appends a copy of `count` floats from `data`.
  void save(const float* data, int64_t count) {
    parts_.emplace_back(data, data + count);
    bytes_ += count * int64_t(sizeof(float));
  }
  // Copies the next part back into `data` (restore in the order of save).
  void restore_next(float* data, size_t* next) const {
    VT_CHECK(*next < parts_.size(), "prefix cache: the snapshot holds ", parts_.size(), " parts");
    const std::vector<float>& part = parts_[(*next)++];
    std::memcpy(data, part.data(), part.size() * sizeof(float));
  }

 private:
  std::vector<std::vector<float>> parts_;
};

}  // namespace vt
