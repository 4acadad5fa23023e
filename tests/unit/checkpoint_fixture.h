// A scratch copy of a golden checkpoint that tests corrupt in specific ways.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "safetensors_writer.h"

namespace vt::testing {

class ScratchCheckpoint {
 public:
  explicit ScratchCheckpoint(const std::string& golden_case) {
    namespace fs = std::filesystem;
    dir_ = (fs::temp_directory_path() / ("vt_test_" + golden_case + "_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter()++)))
               .string();
    fs::remove_all(dir_);
    fs::copy(std::string(VT_SOURCE_DIR) + "/tests/golden/" + golden_case, dir_);
  }
  ~ScratchCheckpoint() { std::filesystem::remove_all(dir_); }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }

  std::string read(const std::string& file) const {
    std::ifstream in(path(file), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }
  void write(const std::string& file, const std::string& bytes) const { write_file(path(file), bytes); }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) const {
    auto config = nlohmann::json::parse(read("config.json"));
    edit(config);
    write("config.json", config.dump(2));
  }

  // Rewrites a safetensors file's header through `edit`; `extra_data` is appended to the data.
  void edit_header(const std::string& file, const std::function<void(nlohmann::json&)>& edit,
                   const std::string& extra_data = "") const {
    std::string image = read(file);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | uint8_t(image[i]);
    auto header = nlohmann::json::parse(image.substr(8, length));
    edit(header);
    write(file, safetensors_image(header.dump(), image.substr(8 + length) + extra_data));
  }

 private:
  static int& counter() {
    static int value = 0;
    return value;
  }
  std::string dir_;
};

}  // namespace vt::testing
