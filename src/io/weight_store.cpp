#include "io/weight_store.h"

#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "io/json_config.h"

namespace vt {
namespace fs = std::filesystem;

WeightStore WeightStore::open(const std::string& dir) {
  WeightStore store;
  store.dir_ = dir;
  const fs::path root(dir);
  if (!fs::is_directory(root)) VT_FAIL(dir, ": not a directory");
  const fs::path index_path = root / "model.safetensors.index.json";
  const fs::path single_path = root / "model.safetensors";

  std::map<std::string, std::string> expected_file;  // tensor -> shard, from the index
  std::vector<std::string> shard_names;
  if (fs::exists(index_path)) {
    nlohmann::json index = read_json_file(index_path.string());
    JsonObject object(index, index_path.string());
    JsonObject weight_map = object.child("weight_map");
    std::set<std::string> shards;
    for (auto it = weight_map.raw().begin(); it != weight_map.raw().end(); ++it) {
      VT_CHECK(it.value().is_string(), index_path.string(), ": weight_map['", it.key(),
               "'] must be a file name");
      std::string shard = it.value().get<std::string>();
      VT_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(),
               index_path.string(), ": weight_map['", it.key(), "'] names '", shard,
               "', not a file in the model folder");
      expected_file[it.key()] = shard;
      shards.insert(shard);
    }
    shard_names.assign(shards.begin(), shards.end());
  } else if (fs::exists(single_path)) {
    shard_names.push_back("model.safetensors");
  } else {
    VT_FAIL(dir, ": no model.safetensors or model.safetensors.index.json");
  }

  for (const auto& shard : shard_names) {
    const std::string path = (root / shard).string();
    if (!fs::exists(path)) VT_FAIL(path, ": shard listed in the index does not exist");
    store.files_.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile* file = store.files_.back().get();
    for (const auto& entry : file->header().tensors) {
      if (store.tensors_.count(entry.name))
        VT_FAIL(path, ": tensor '", entry.name, "' also appears in ",
                store.tensors_.at(entry.name).file->path());
      if (!expected_file.empty()) {
        auto it = expected_file.find(entry.name);
        if (it == expected_file.end())
          VT_FAIL(path, ": tensor '", entry.name, "' is not listed in model.safetensors.index.json");
        if (it->second != shard)
          VT_FAIL(path, ": tensor '", entry.name, "' is listed under ", it->second, " in the index");
      }
      store.tensors_[entry.name] = Located{file, &entry};
    }
  }
  for (const auto& [name, shard] : expected_file)
    if (!store.tensors_.count(name))
      VT_FAIL(index_path.string(), ": tensor '", name, "' is listed in ", shard, " but not found there");
  return store;
}

const SafetensorsEntry& WeightStore::entry(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) VT_FAIL(dir_, ": missing tensor '", name, "'");
  return *it->second.entry;
}

const std::string& WeightStore::file_of(const std::string& name) const {
  entry(name);
  return tensors_.at(name).file->path();
}

TensorView WeightStore::take(const std::string& name, const Shape& shape,
                             std::initializer_list<DType> dtypes) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) VT_FAIL(dir_, ": missing tensor '", name, "' (expected shape ", shape.str(), ")");
  const auto& [file, entry] = it->second;
  if (entry->shape != shape)
    VT_FAIL(file->path(), ": tensor '", name, "' has shape ", entry->shape.str(),
            " but the config implies ", shape.str());
  bool dtype_ok = false;
  std::string allowed;
  for (DType dtype : dtypes) {
    dtype_ok |= dtype == entry->dtype;
    allowed += (allowed.empty() ? "" : "|") + std::string(dtype_name(dtype));
  }
  if (!dtype_ok)
    VT_FAIL(file->path(), ": tensor '", name, "' has dtype ", dtype_name(entry->dtype),
            ", expected ", allowed);
  taken_.insert(name);
  return TensorView{const_cast<void*>(file->data(*entry)), entry->dtype, Device::kCpu, entry->shape};
}

void WeightStore::ignore_prefix(const std::string& prefix, const std::string& reason) {
  ignored_[prefix] = reason;
}

void WeightStore::finish() const {
  std::vector<std::string> left;
  for (const auto& [name, located] : tensors_) {
    if (taken_.count(name)) continue;
    bool ignored = false;
    for (const auto& [prefix, reason] : ignored_) ignored |= name.rfind(prefix, 0) == 0;
    if (!ignored) left.push_back(name);
  }
  if (left.empty()) return;
  std::ostringstream message;
  message << dir_ << ": " << left.size() << " checkpoint tensor(s) not consumed by the model: ";
  for (size_t i = 0; i < left.size() && i < 10; ++i)
    message << (i ? ", " : "") << "'" << left[i] << "' (" << file_of(left[i]) << ")";
  if (left.size() > 10) message << ", ...";
  VT_FAIL(message.str());
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, located] : tensors_) out.push_back(name);
  return out;
}

size_t WeightStore::total_bytes() const {
  size_t bytes = 0;
  for (const auto& [name, located] : tensors_) bytes += located.entry->end - located.entry->begin;
  return bytes;
}

}  // namespace vt
