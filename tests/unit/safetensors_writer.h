// Builds safetensors images (valid or deliberately broken) for tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace vt::testing {

inline std::string safetensors_image(const std::string& header, const std::string& data,
                                     uint64_t declared_length = UINT64_MAX) {
  uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[i] = char((length >> (8 * i)) & 0xFF);
  return image + header + data;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace vt::testing
