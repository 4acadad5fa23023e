// UTF-8 decoding and U+FFFD replacement following the Unicode "maximal subpart" practice.
#include "tokenizer/utf8.h"

namespace vt::utf8 {
namespace {

// Sequence length announced by a lead byte, or 0 for bytes that cannot start a sequence
// (continuation bytes, the overlong leads C0/C1, and F5..FF beyond U+10FFFF).
int lead_length(unsigned char byte) {
  if (byte < 0x80) return 1;
  if (byte >= 0xC2 && byte <= 0xDF) return 2;
  if (byte >= 0xE0 && byte <= 0xEF) return 3;
  if (byte >= 0xF0 && byte <= 0xF4) return 4;
  return 0;
}

// The second byte's range depends on the lead: it rules out overlongs (E0, F0), surrogates (ED)
// and code points past U+10FFFF (F4).
bool valid_second(unsigned char lead, unsigned char byte) {
  switch (lead) {
    case 0xE0:
      return byte >= 0xA0 && byte <= 0xBF;
    case 0xED:
      return byte >= 0x80 && byte <= 0x9F;
    case 0xF0:
      return byte >= 0x90 && byte <= 0xBF;
    case 0xF4:
      return byte >= 0x80 && byte <= 0x8F;
    default:
      return byte >= 0x80 && byte <= 0xBF;
  }
}

bool valid_continuation(unsigned char lead, int index, unsigned char byte) {
  return index == 1 ? valid_second(lead, byte) : (byte >= 0x80 && byte <= 0xBF);
}

}  // namespace

int decode(const unsigned char* data, size_t size, uint32_t* code_point) {
  const unsigned char lead = data[0];
  const int length = lead_length(lead);
  if (length == 0 || size_t(length) > size) return 0;
  if (length == 1) {
    *code_point = lead;
    return 1;
  }
  uint32_t value = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    if (!valid_continuation(lead, i, data[i])) return 0;
    value = (value << 6) | (data[i] & 0x3F);
  }
  *code_point = value;
  return length;
}

size_t maximal_invalid_length(const unsigned char* data, size_t size) {
  const unsigned char lead = data[0];
  const int length = lead_length(lead);
  if (length <= 1) return 1;
  size_t used = 1;
  while (used < size_t(length) && used < size && valid_continuation(lead, int(used), data[used]))
    ++used;
  return used;
}

bool is_valid(std::string_view text) {
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  size_t position = 0;
  const size_t size = text.size();
  while (position < size) {
    if (data[position] < 0x80) {
      ++position;
      continue;
    }
    uint32_t code_point = 0;
    const int length = decode(data + position, size - position, &code_point);
    if (length == 0) return false;
    position += size_t(length);
  }
  return true;
}

std::string replace_invalid(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  size_t position = 0;
  const size_t size = text.size();
  while (position < size) {
    uint32_t code_point = 0;
    const int length = decode(data + position, size - position, &code_point);
    if (length > 0) {
      out.append(text.data() + position, size_t(length));
      position += size_t(length);
    } else {
      out += kReplacement;
      position += maximal_invalid_length(data + position, size - position);
    }
  }
  return out;
}

void append(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out += char(code_point);
  } else if (code_point < 0x800) {
    out += char(0xC0 | (code_point >> 6));
    out += char(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += char(0xE0 | (code_point >> 12));
    out += char(0x80 | ((code_point >> 6) & 0x3F));
    out += char(0x80 | (code_point & 0x3F));
  } else {
    out += char(0xF0 | (code_point >> 18));
    out += char(0x80 | ((code_point >> 12) & 0x3F));
    out += char(0x80 | ((code_point >> 6) & 0x3F));
    out += char(0x80 | (code_point & 0x3F));
  }
}

void IncrementalDecoder::push(std::string_view bytes, std::string& out) {
  for (char byte : bytes) push_byte(static_cast<unsigned char>(byte), out);
}

void IncrementalDecoder::push_byte(unsigned char byte, std::string& out) {
  if (pending_size_ > 0) {
    if (valid_continuation(pending_[0], pending_size_, byte)) {
      pending_[pending_size_++] = byte;
      if (pending_size_ == expected_size_) {
        out.append(reinterpret_cast<const char*>(pending_), size_t(pending_size_));
        pending_size_ = 0;
      }
      return;
    }
    // The pending bytes were a maximal invalid subpart; the new byte starts afresh.
    out += kReplacement;
    pending_size_ = 0;
  }
  const int length = lead_length(byte);
  if (length == 1) {
    out += char(byte);
  } else if (length == 0) {
    out += kReplacement;
  } else {
    pending_[0] = byte;
    pending_size_ = 1;
    expected_size_ = length;
  }
}

void IncrementalDecoder::finish(std::string& out) {
  if (pending_size_ > 0) out += kReplacement;
  pending_size_ = 0;
}

}  // namespace vt::utf8
