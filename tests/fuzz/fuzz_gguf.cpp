// libFuzzer target for the GGUF parser and dequantisers: any input must either parse into a
// header whose every tensor lies inside the buffer (and dequantises without reading past it), or
// throw vt::Error. Anything else (a crash, an ASan/UBSan report, a huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vt::GgufHeader header = vt::parse_gguf(data, size, "fuzz");
    for (const auto& tensor : header.tensors) {
      if (header.data_offset + tensor.offset + tensor.bytes > size) std::abort();
      const vt::GgmlTypeInfo& info = vt::ggml_type_info(tensor.type);
      const int64_t count = tensor.shape.numel();
      if (!info.dequantizable || count > (1 << 16)) continue;
      std::vector<float> out(static_cast<size_t>(count));
      vt::dequantize_to_f32(out.data(), data + header.data_offset + tensor.offset, tensor.type, count);
    }
  } catch (const vt::Error&) {
  }
  return 0;
}
