#include "profile/kernel_gate.h"

#include <map>
#include <set>

#include "core/error.h"
#include "profile/step_report.h"

namespace vt::profile {

std::string kernel_gate_failure(const std::vector<Intent>& step_intents,
                                const std::vector<KernelRecord>& records, int64_t steps) {
  if (step_intents.empty())
    return "kernel-ran gate: the step recorded no intents (no launcher reported a kernel)";
  struct Intended {
    int64_t per_step = 0;
    bool optional = true;  // every intent of the kernel optional: it may not run at all
    std::set<std::string> ops, backends;
  };
  std::map<std::string, Intended> intended;
  for (const Intent& intent : step_intents) {
    Intended& entry = intended[intent.kernel];
    entry.per_step += 1;
    entry.optional = entry.optional && intent.optional;
    entry.ops.insert(intent.op);
    entry.backends.insert(intent.backend);
  }
  std::map<std::string, int64_t> per_step;
  for (const auto& [kernel, entry] : intended) per_step[kernel] = entry.per_step;
  std::map<std::string, int64_t> ran;  // by intended name where one matches ("nvjet*")
  for (const KernelRecord& record : records)
    ++ran[match_intended_kernel(short_kernel_name(record.name), per_step)];

  // What ran that nobody intended, or more often than intended: the candidates for "instead".
  std::string instead;
  for (const auto& [kernel, count] : ran) {
    const auto found = intended.find(kernel);
    const int64_t expected = found == intended.end() ? 0 : found->second.per_step * steps;
    if (count > expected && !(found != intended.end() && found->second.optional))
      instead += " " + kernel + " x" + std::to_string(count) +
                 (expected ? " (intended " + std::to_string(expected) + ")" : "") + ";";
  }
  if (instead.empty()) instead = " nothing unintended;";
  std::string failures;
  const auto list = [](const std::set<std::string>& items) {
    std::string text;
    for (const auto& item : items) {
      if (!text.empty()) text += '|';
      text += item;
    }
    return text;
  };
  for (const auto& [kernel, entry] : intended) {
    const int64_t seen = ran.count(kernel) ? ran.at(kernel) : 0;
    if (seen == entry.per_step * steps || (entry.optional && seen <= entry.per_step * steps)) continue;
    failures += "kernel-ran gate: op " + list(entry.ops) + " on backend " + list(entry.backends) +
                " intended kernel " + kernel + " " + std::to_string(entry.per_step) +
                " times per step, but it ran " + std::to_string(seen) + " times in " +
                std::to_string(steps) + " steps (expected " +
                std::to_string(entry.per_step * steps) + "). Ran instead:" + instead + "\n";
  }
  if (!failures.empty()) failures.pop_back();
  return failures;
}

void check_kernels_ran(const std::vector<Intent>& step_intents,
                       const std::vector<KernelRecord>& records, int64_t steps) {
  const std::string failure = kernel_gate_failure(step_intents, records, steps);
  VT_CHECK(failure.empty(), failure);
}

}  // namespace vt::profile
