// libFuzzer target for the safetensors header parser: any input must either parse into a header
// whose every tensor lies inside the buffer, or throw vt::Error. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vt::SafetensorsHeader header = vt::parse_safetensors(data, size, "fuzz");
    for (const auto& entry : header.tensors) {
      if (header.data_offset + entry.end > size) std::abort();
      // Touch the first and last byte of every tensor: ASan catches an out-of-bounds span.
      if (entry.end > entry.begin) {
        volatile uint8_t first = data[header.data_offset + entry.begin];
        volatile uint8_t last = data[header.data_offset + entry.end - 1];
        (void)first;
        (void)last;
      }
    }
  } catch (const vt::Error&) {
  }
  return 0;
}
