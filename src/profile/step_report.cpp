#include "profile/step_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"

namespace vt::profile {
namespace {

std::string grid_text(const uint32_t grid[3]) {
  return std::to_string(grid[0]) + "x" + std::to_string(grid[1]) + "x" + std::to_string(grid[2]);
}

// Where each span's own time begins: the later of its start and the end of every span that
// started before it. Overlap (a kernel launched early under programmatic dependent launch waits
// for its predecessor) is counted once, for the span that started first.
std::vector<uint64_t> exclusive_starts(const std::vector<StepSpan>& spans) {
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return spans[a].start_ns != spans[b].start_ns ? spans[a].start_ns < spans[b].start_ns : a < b;
  });
  std::vector<uint64_t> starts(spans.size());
  uint64_t covered_until = 0;
  for (size_t i : order) {
    starts[i] = std::min(std::max(spans[i].start_ns, covered_until), spans[i].end_ns);
    covered_until = std::max(covered_until, spans[i].end_ns);
  }
  return starts;
}

struct Totals {
  int64_t calls = 0;
  uint64_t ns = 0, raw_ns = 0;
  double bytes = 0, flops = 0;
  std::set<std::string> ops, backends;
};

std::string join(const std::set<std::string>& items) {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += ", ";
    text += item;
  }
  return text;
}

ReportRow make_row(const Totals& totals, const StepReport& report) {
  const double steps = double(report.options.steps), wall_us = report.options.wall_us;
  ReportRow row;
  row.calls_per_step = double(totals.calls) / steps;
  row.us_per_step = double(totals.ns) * 1e-3 / steps;
  row.raw_us_per_step = double(totals.raw_ns) * 1e-3 / steps;
  row.share = wall_us > 0 ? double(totals.ns) * 1e-3 / wall_us : 0;
  row.bytes_per_step = totals.bytes / steps;
  row.flops_per_step = totals.flops / steps;
  row.gbps = row.us_per_step > 0 ? row.bytes_per_step / row.us_per_step * 1e-3 : 0;
  const double bandwidth = report.options.bandwidth_gbps;
  row.floor_fraction = bandwidth > 0 && row.us_per_step > 0
                           ? row.bytes_per_step / bandwidth * 1e-3 / row.us_per_step
                           : 0;
  row.ops = join(totals.ops);
  row.backend = join(totals.backends);
  return row;
}

void add(Totals& totals, const StepSpan& span, uint64_t exclusive_start) {
  totals.calls += 1;
  totals.ns += span.end_ns - exclusive_start;
  totals.raw_ns += span.end_ns - span.start_ns;
  totals.bytes += span.bytes;
  totals.flops += span.flops;
  totals.ops.insert(span.op);
  totals.backends.insert(span.backend);
}

nlohmann::json row_json(const ReportRow& row, bool kernel_row) {
  nlohmann::json out;
  if (kernel_row)
    out = {{"kernel", row.name},
           {"name", row.kernel},
           {"where", row.where},
           {"op", row.ops},
           {"group", row.group}};
  else
    out = {{"group", row.group}, {"ops", row.ops}};
  out.update({{"backend", row.backend},
              {"calls_per_step", row.calls_per_step},
              {"us_per_step", row.us_per_step},
              {"raw_us_per_step", row.raw_us_per_step},
              {"share", row.share},
              {"bytes_per_step", row.bytes_per_step},
              {"flops_per_step", row.flops_per_step},
              {"gbps", row.gbps},
              {"floor_fraction", row.floor_fraction}});
  return out;
}

std::string format(const char* pattern, auto... values) {
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), pattern, values...);
  return buffer;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
  std::string text = name;
  for (size_t at; (at = text.find("(anonymous namespace)::")) != std::string::npos;)
    text.erase(at, 23);
  text = text.substr(0, text.find('('));
  if (text.rfind("void ", 0) == 0) text = text.substr(5);
  const size_t angle = text.find('<');
  if (angle != std::string::npos) text = text.substr(0, angle);
  const size_t colon = text.rfind("::");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

std::string match_intended_kernel(const std::string& kernel,
                                  const std::map<std::string, int64_t>& intended) {
  if (intended.count(kernel)) return kernel;
  for (const auto& [name, count] : intended)
    if (!name.empty() && name.back() == '*' &&
        kernel.compare(0, name.size() - 1, name, 0, name.size() - 1) == 0)
      return name;
  return kernel;
}

std::vector<StepSpan> spans_from_kernels(const std::vector<KernelRecord>& records,
                                         const std::vector<Intent>& intents) {
  std::map<std::string, std::vector<const Intent*>> by_kernel;
  std::map<std::string, int64_t> intended;
  for (const Intent& intent : intents) {
    by_kernel[intent.kernel].push_back(&intent);
    ++intended[intent.kernel];
  }
  std::map<std::string, size_t> seen;
  std::vector<StepSpan> spans;
  spans.reserve(records.size());
  for (const KernelRecord& record : records) {
    StepSpan span;
    span.kernel = short_kernel_name(record.name);
    span.where = grid_text(record.grid);
    span.start_ns = record.start_ns;
    span.end_ns = std::max(record.end_ns, record.start_ns);
    span.from_graph = record.graph_node != 0;
    const std::string key = match_intended_kernel(span.kernel, intended);
    const auto found = by_kernel.find(key);
    if (found == by_kernel.end()) {
      span.op = "(not intended)";
      span.backend = "?";
    } else if (found->second.front()->optional && !spans.empty()) {
      // A helper a library runs for some calls only (cuBLASLt's split-K reduction): it belongs
      // to the launch just before it, whose op, backend and shape it takes.
      const StepSpan& owner = spans.back();
      span.intended = true;
      span.op = owner.op;
      span.backend = owner.backend;
      span.group = owner.group;
      span.where = owner.where;
    } else {
      const Intent& intent = *found->second[seen[key]++ % found->second.size()];
      span.intended = true;
      span.op = intent.op;
      span.backend = intent.backend;
      span.group = intent.group;
      span.bytes = intent.bytes;
      span.flops = intent.flops;
      // The launcher's shape ("1x5120x10240") says more than the grid: one row per GEMM shape.
      if (!intent.shape.empty()) span.where = intent.shape;
    }
    spans.push_back(std::move(span));
  }
  return spans;
}

std::vector<StepSpan> spans_from_ops(const std::vector<TimedOp>& ops) {
  std::vector<StepSpan> spans;
  spans.reserve(ops.size());
  for (const TimedOp& op : ops) {
    StepSpan span;
    span.kernel = op.op;
    span.where = shape_text(op.shape);
    span.op = op.op;
    span.backend = "cpu";
    span.group = op.group;
    span.intended = true;
    span.start_ns = op.start_ns;
    span.end_ns = std::max(op.end_ns, op.start_ns);
    span.bytes = op.bytes;
    span.flops = op.flops;
    spans.push_back(std::move(span));
  }
  return spans;
}

bool StepReport::shares_consistent(double tolerance) const {
  return std::abs(share_sum - 1.0) <= tolerance;
}

StepReport build_step_report(const std::vector<StepSpan>& spans, const ReportOptions& options) {
  VT_CHECK(options.steps > 0, "step report: steps must be positive, got ", options.steps);
  VT_CHECK(options.wall_us > 0, "step report: wall time must be positive, got ", options.wall_us);
  StepReport report;
  report.options = options;
  const double steps = double(options.steps);
  report.step_us = options.wall_us / steps;

  // Each span's own time (overlap counted once); their sum is the union of the intervals.
  const std::vector<uint64_t> starts = exclusive_starts(spans);
  uint64_t busy_ns = 0, span_ns = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    busy_ns += spans[i].end_ns - starts[i];
    span_ns += spans[i].end_ns - spans[i].start_ns;
  }
  report.span_us = double(span_ns) * 1e-3 / steps;
  report.busy_us = double(busy_ns) * 1e-3 / steps;
  report.idle_share = std::max(0.0, 1.0 - double(busy_ns) * 1e-3 / options.wall_us);
  report.spans_per_step = double(spans.size()) / steps;

  std::map<std::tuple<std::string, std::string, OpGroup>, Totals> by_kernel;
  std::map<OpGroup, Totals> by_group;
  int64_t from_graph = 0;
  double bytes = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const StepSpan& span = spans[i];
    add(by_kernel[{span.kernel, span.where, span.group}], span, starts[i]);
    add(by_group[span.group], span, starts[i]);
    from_graph += span.from_graph;
    bytes += span.bytes;
  }
  report.graph_fraction = spans.empty() ? 0 : double(from_graph) / double(spans.size());
  report.bytes_per_step = bytes / steps;
  report.floor_us =
      options.bandwidth_gbps > 0 ? report.bytes_per_step / options.bandwidth_gbps * 1e-3 : 0;

  double share_sum = report.idle_share;
  for (const auto& [key, totals] : by_kernel) {
    ReportRow row = make_row(totals, report);
    row.kernel = std::get<0>(key);
    row.where = std::get<1>(key);
    row.group = op_group_name(std::get<2>(key));
    row.name = row.where.empty() ? row.kernel : row.kernel + " [" + row.where + "]";
    share_sum += row.share;
    report.rows.push_back(std::move(row));
  }
  for (const auto& [group, totals] : by_group) {
    ReportRow row = make_row(totals, report);
    row.group = row.name = op_group_name(group);
    report.groups.push_back(std::move(row));
  }
  report.share_sum = share_sum;
  const auto slowest_first = [](const ReportRow& a, const ReportRow& b) {
    return a.us_per_step != b.us_per_step ? a.us_per_step > b.us_per_step : a.name < b.name;
  };
  std::sort(report.rows.begin(), report.rows.end(), slowest_first);
  std::sort(report.groups.begin(), report.groups.end(), slowest_first);
  return report;
}

std::vector<PartUtilisation> part_utilisation(const StepReport& report, double gemm_peak_tflops,
                                              double bf16_peak_tflops) {
  std::vector<PartUtilisation> parts = {{"gemm"}, {"attention"}, {"gdn"}, {"other"}};
  parts[0].peak_tflops = gemm_peak_tflops;
  parts[1].peak_tflops = parts[2].peak_tflops = bf16_peak_tflops;
  for (const ReportRow& group : report.groups) {
    const size_t index = group.group.rfind("gemm.", 0) == 0 ? 0
                         : group.group == "attention"        ? 1
                         : group.group == "gdn"              ? 2
                                                             : 3;
    parts[index].us_per_step += group.us_per_step;
    parts[index].flops_per_step += group.flops_per_step;
  }
  PartUtilisation total{"total"};
  total.us_per_step = report.step_us;
  total.peak_tflops = gemm_peak_tflops;
  for (PartUtilisation& part : parts) total.flops_per_step += part.flops_per_step;
  parts.push_back(total);
  for (PartUtilisation& part : parts) {
    part.tflops_per_s = part.us_per_step > 0 ? part.flops_per_step / (part.us_per_step * 1e-6) / 1e12 : 0;
    part.mfu = part.peak_tflops > 0 ? part.tflops_per_s / part.peak_tflops : 0;
  }
  return parts;
}

nlohmann::json report_json(const StepReport& report) {
  nlohmann::json out = {{"step_us", report.step_us},
                        {"kernel_us_per_step", report.span_us},
                        {"busy_us_per_step", report.busy_us},
                        {"overlap_us_per_step", report.span_us - report.busy_us},
                        {"kernels_per_step", report.spans_per_step},
                        {"idle_fraction", report.idle_share},
                        {"share_sum", report.share_sum},
                        {"shares_consistent", report.shares_consistent()},
                        {"graph_launched_fraction", report.graph_fraction},
                        {"bandwidth_gbps", report.options.bandwidth_gbps},
                        {"bytes_per_step", report.bytes_per_step},
                        {"floor_us", report.floor_us},
                        {"kernels", nlohmann::json::array()},
                        {"groups", nlohmann::json::array()}};
  for (const ReportRow& row : report.rows) out["kernels"].push_back(row_json(row, true));
  for (const ReportRow& row : report.groups) out["groups"].push_back(row_json(row, false));
  return out;
}

std::string report_text(const StepReport& report) {
  const auto& options = report.options;
  std::string text = format(
      "%.1f us/step wall, %.1f us/step busy in %.0f %ss (%.0f%% from graphs); %.3f MB/step, floor "
      "%.1f us at %.0f GB/s "
      "(%.0f%% of the step)\n",
      report.step_us, report.busy_us, report.spans_per_step, options.unit.c_str(),
      100.0 * report.graph_fraction, report.bytes_per_step * 1e-6, report.floor_us,
      options.bandwidth_gbps, report.step_us > 0 ? 100.0 * report.floor_us / report.step_us : 0.0);
  if (report.span_us > report.busy_us * 1.001)
    text += format(
        "%ss overlap by %.1f us/step (launched early, e.g. PDL, or concurrent): us/step counts "
        "only the "
        "time no earlier %s was running; raw durations are in --json\n",
        options.unit.c_str(), report.span_us - report.busy_us, options.unit.c_str());
  text += "\n";
  text += "| " + options.unit + " [" + (options.unit == "kernel" ? "shape, else grid" : "shape") +
          "] | op | group | backend | calls/step | us/step | share | MB/step | GB/s | of floor |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ReportRow& row : report.rows)
    text += format("| %s | %s | %s | %s | %.1f | %.1f | %.1f%% | %.3f | %.1f | %.0f%% |\n",
                   row.name.c_str(), row.ops.c_str(), row.group.c_str(), row.backend.c_str(),
                   row.calls_per_step, row.us_per_step, 100.0 * row.share,
                   row.bytes_per_step * 1e-6, row.gbps, 100.0 * row.floor_fraction);
  text +=
      "\n| group | calls/step | us/step | share | MB/step | GB/s | of floor "
      "|\n|---|---|---|---|---|---|---|\n";
  for (const ReportRow& row : report.groups)
    text += format("| %s | %.1f | %.1f | %.1f%% | %.3f | %.1f | %.0f%% |\n", row.name.c_str(),
                   row.calls_per_step, row.us_per_step, 100.0 * row.share,
                   row.bytes_per_step * 1e-6, row.gbps, 100.0 * row.floor_fraction);
  text += format("| %s | | %.1f | %.1f%% | | | |\n", options.idle_label.c_str(),
                 report.idle_share * report.step_us, 100.0 * report.idle_share);
  text += format(
      "\nshares sum to %.1f%% of the step (%s)\n", 100.0 * report.share_sum,
      report.shares_consistent() ? "within 2%" : "NOT within 2%: records outside the timed window");
  return text;
}

nlohmann::json chrome_trace(const std::vector<StepSpan>& spans, const std::string& process_name) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", process_name}}}});
  // Track 1: each span's own time; track 2: the part of a span spent before its predecessor
  // ended (launched early), so slices on one track never overlap.
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", "running"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 2},
                    {"args", {{"name", "launched early"}}}});
  uint64_t origin = UINT64_MAX;
  for (const StepSpan& span : spans) origin = std::min(origin, span.start_ns);
  const std::vector<uint64_t> starts = exclusive_starts(spans);
  for (size_t i = 0; i < spans.size(); ++i) {
    const StepSpan& span = spans[i];
    const nlohmann::json args = {{"op", span.op},
                                 {"backend", span.backend},
                                 {"where", span.where},
                                 {"bytes", span.bytes},
                                 {"flops", span.flops},
                                 {"from_graph", span.from_graph},
                                 {"raw_dur", double(span.end_ns - span.start_ns) * 1e-3}};
    events.push_back({{"name", span.kernel},
                      {"cat", op_group_name(span.group)},
                      {"ph", "X"},
                      {"ts", double(starts[i] - origin) * 1e-3},
                      {"dur", double(span.end_ns - starts[i]) * 1e-3},
                      {"pid", 1},
                      {"tid", 1},
                      {"args", args}});
    if (starts[i] > span.start_ns)
      events.push_back({{"name", span.kernel},
                        {"cat", "launched early"},
                        {"ph", "X"},
                        {"ts", double(span.start_ns - origin) * 1e-3},
                        {"dur", double(starts[i] - span.start_ns) * 1e-3},
                        {"pid", 1},
                        {"tid", 2},
                        {"args", args}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
}

}  // namespace vt::profile
