// WeightStore: the tensors of an HF checkpoint folder (one safetensors file or an index of
// shards), mmap'd. Models take() each tensor with the shape and dtype they expect; finish()
// fails on any tensor nobody took, so a silent mis-load becomes a loud error.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace vt {

class WeightStore {
 public:
  // Opens model.safetensors.index.json (and its shards) or model.safetensors in `dir`.
  static WeightStore open(const std::string& dir);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Shape and dtype as stored; throws naming the tensor when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;

  // Returns the tensor after checking its shape and that its dtype is one of `dtypes`, and
  // marks it consumed. The view points into the mapped file (read-only memory).
  TensorView take(const std::string& name, const Shape& shape, std::initializer_list<DType> dtypes);

  // Tensors whose names start with `prefix` are allowed to stay unconsumed (e.g. the vision
  // tower, "model.visual."), with the reason shown by `vt inspect`.
  void ignore_prefix(const std::string& prefix, const std::string& reason);

  // Throws listing (up to 10) tensors that were neither taken nor ignored.
  void finish() const;

  std::vector<std::string> names() const;
  size_t total_bytes() const;
  const std::map<std::string, std::string>& ignored() const { return ignored_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;
  std::set<std::string> taken_;
  std::map<std::string, std::string> ignored_;  // prefix -> reason
};

}  // namespace vt
