#include "engine/step_record.h"

#include <cstdio>

#include "core/error.h"

namespace vt {

void StepStats::add(const StepRecord& record) {
  size_t bucket = 0;
  while (bucket < kBounds.size() && record.wall_seconds > kBounds[bucket]) ++bucket;
  ++buckets[bucket];
  ++count;
  wall_seconds += record.wall_seconds;
  forward_seconds += record.forward_seconds;
  prefill_tokens += record.prefill_tokens;
  decode_tokens += record.decode_tokens;
  verify_tokens += record.verify_tokens;
}

StepTrace::StepTrace(const std::string& path) : out_(path) {
  VT_CHECK(out_.good(), "step trace: cannot write ", path);
}

void StepTrace::write(const StepRecord& record) {
  char line[320];
  std::snprintf(line, sizeof line,
                "{\"start_s\":%.6f,\"wall_ms\":%.3f,\"forward_ms\":%.3f,\"host_ms\":%.3f,\"sequences\":%lld,"
                "\"forwards\":%lld,\"prefill_tokens\":%lld,\"decode_tokens\":%lld,\"verify_tokens\":%lld,\"cost\":%.1f}\n",
                record.start_seconds, record.wall_seconds * 1e3, record.forward_seconds * 1e3,
                (record.wall_seconds - record.forward_seconds) * 1e3, (long long)record.sequences,
                (long long)record.forwards, (long long)record.prefill_tokens, (long long)record.decode_tokens,
                (long long)record.verify_tokens, record.cost);
  out_ << line;
  out_.flush();
}

}  // namespace vt
