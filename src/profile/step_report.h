// Where a step went: joins what ran (CUPTI kernel records, or the CPU backend's timed ops) with
// what was meant to run (intents: op, group, backend, bytes, FLOPs) into per-kernel and per-group
// tables with GB/s and the share of the bandwidth floor, the idle share of the step, and a check
// that the shares add up. Pure C++: tested without a GPU.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profile/kernel_recorder.h"
#include "trace/intent.h"
#include "trace/op_timer.h"

namespace vt::profile {

// The launch intents and timed ops this layer reports on (trace/).
using namespace ::vt::trace;

// One timed kernel (or CPU op) and what it was for.
struct StepSpan {
  std::string kernel;  // short kernel name, or the CPU op
  std::string where;   // grid "132x1x1", or the op's shape
  std::string op, backend;
  OpGroup group = OpGroup::kOther;
  bool intended = false;  // an intent names this kernel
  bool from_graph = false;
  uint64_t start_ns = 0, end_ns = 0;
  double bytes = 0, flops = 0;
};

// Kernel name without parameters, namespaces or template arguments ("sm90_fp8_gemm_mma_splitk").
std::string short_kernel_name(const std::string& name);

// The intended kernel name a run kernel counts for: `kernel` itself, or an intent's name ending
// in '*' whose prefix it starts with (libraries choose their kernels: cuBLASLt's "nvjet*").
// `kernel` unchanged when none matches.
std::string match_intended_kernel(const std::string& kernel,
                                  const std::map<std::string, int64_t>& intended);

// Attributes records (any number of steps, in start order) to one step's intents: the j-th run
// of kernel K takes the (j mod n)-th of K's n intents, so same-named kernels serving different
// ops keep their own bytes. A kernel no intent names is kept with intended = false.
std::vector<StepSpan> spans_from_kernels(const std::vector<KernelRecord>& records,
                                         const std::vector<Intent>& intents);
// The CPU backend's timed ops as spans (backend "cpu", where = shape).
std::vector<StepSpan> spans_from_ops(const std::vector<TimedOp>& ops);

struct ReportOptions {
  int64_t steps = 1;            // steps the spans cover
  double wall_us = 0;           // wall time of those steps
  double bandwidth_gbps = 0;    // memory bandwidth the floor assumes
  std::string unit = "kernel";  // "kernel" or "op", for the table header
  std::string idle_label = "GPU idle (waiting on the CPU)";
};

struct ReportRow {
  std::string name;  // "kernel [where]" or the group
  std::string kernel, where, ops, group, backend;
  double calls_per_step = 0;
  double us_per_step = 0;      // own time: overlap with an earlier-started span is not counted
  double raw_us_per_step = 0;  // start to end, overlap included
  double share = 0;            // us_per_step / step
  double bytes_per_step = 0, flops_per_step = 0, gbps = 0, floor_fraction = 0;
};

struct StepReport {
  ReportOptions options;
  double step_us = 0;     // wall / steps
  double span_us = 0;     // sum of raw span durations per step
  double busy_us = 0;     // union of span intervals per step (sum of own times)
  double idle_share = 0;  // (wall - union) / wall
  double share_sum = 0;   // rows' shares + idle share
  double spans_per_step = 0, graph_fraction = 0;
  double bytes_per_step = 0, floor_us = 0;  // floor: bytes / bandwidth
  std::vector<ReportRow> rows;              // per kernel [where] (and group), slowest first
  std::vector<ReportRow> groups;            // per op group, slowest first
  // The shares add up to the step within `tolerance` (records outside the timed window, or a
  // wall time that does not cover the spans, break this).
  bool shares_consistent(double tolerance = 0.02) const;
};

StepReport build_step_report(const std::vector<StepSpan>& spans, const ReportOptions& options);

// A prefill's parts from a report's groups: "gemm" (every gemm.* group), "attention", "gdn" and
// "other", with their time, FLOPs (the launches' intents) and MFU: the FLOP rate over the peak of
// the precision the part runs at (its GEMMs' `gemm_peak_tflops`, FP8 or bf16; attention and the
// delta rule on bf16 tensor cores: `bf16_peak_tflops`; none for "other"), then "total" (all FLOPs
// over the wall time, against the GEMM peak).
struct PartUtilisation {
  std::string part;
  double us_per_step = 0, flops_per_step = 0, tflops_per_s = 0, peak_tflops = 0, mfu = 0;
};
std::vector<PartUtilisation> part_utilisation(const StepReport& report, double gemm_peak_tflops,
                                              double bf16_peak_tflops);

// {"step_us", "kernel_us_per_step", "busy_us_per_step", "overlap_us_per_step", "kernels_per_step",
// "idle_fraction",
//  "share_sum", "shares_consistent", "graph_launched_fraction", "bandwidth_gbps",
//  "bytes_per_step", "floor_us", "kernels": [...], "groups": [...]}
nlohmann::json report_json(const StepReport& report);
// Markdown tables: per kernel, per group, idle, and the share sum.
std::string report_text(const StepReport& report);
// Chrome trace (chrome://tracing, Perfetto): one "X" event per span's own time on track 1, and
// its early-launched part (before its predecessor ended) on track 2; microseconds from the
// first span.
nlohmann::json chrome_trace(const std::vector<StepSpan>& spans, const std::string& process_name);

}  // namespace vt::profile
