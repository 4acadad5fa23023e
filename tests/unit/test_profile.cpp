// Profiling without a GPU: the step report (shares, idle, GB/s, floor, groups, Chrome trace), the
// kernel-ran gate on synthetic records, intent records, backend-override checks, predictions, and
// the CPU backend's timed ops on the golden tiny models (op counts per step from the config).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/qwen3_5/config.h"
#include "models/registry.h"
#include "ops/ops.h"
#include "ops/sampling/sampler.h"
#include "profile/kernel_gate.h"
#include "profile/prediction.h"
#include "profile/step_report.h"
#include "trace/intent.h"
#include "trace/op_timer.h"

namespace vt::profile {
namespace {

KernelRecord record(const std::string& name, uint64_t start_ns, uint64_t end_ns,
                    uint32_t grid_x = 1) {
  KernelRecord out;
  out.name = name;
  out.start_ns = start_ns;
  out.end_ns = end_ns;
  out.grid[0] = grid_x, out.grid[1] = 1, out.grid[2] = 1;
  out.graph_node = 7;
  return out;
}

Intent intent(const std::string& kernel, const std::string& op, OpGroup group,
              const std::string& backend, double bytes) {
  return {kernel, op, backend, "1x1024x1024", group, bytes, 2.0 * 1024 * 1024};
}

std::string failure_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// A launcher states its cost; the model's OpScope says what the launch is for, innermost first,
// restored when a scope ends; outside any scope the kernel names itself with the fallback group.
TEST(Intents, LaunchCostTakesOpAndGroupFromTheInnermostScope) {
  begin_intents();
  {
    OpScope layer("gdn", OpGroup::kGdn);
    {
      OpScope gemm("gdn.in_proj", OpGroup::kGemmGdnIn);
      intend("sm90_fp8_gemv", LaunchCost{"gemv", {1, 16384, 5120, 0}, 84e6, 1.6e8, OpGroup::kGemmOther});
    }
    intend("sm90_gdn_recurrent", LaunchCost{"cuda", {1, 48, 128, 128}, 6.3e6, 0, OpGroup::kOther});
  }
  intend("sm90_add_rms_norm_quant", LaunchCost{"cuda", {1, 5120, 0, 0}, 4e4, 0, OpGroup::kNorm});
  const std::vector<Intent> records = end_intent_records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].op, "gdn.in_proj");
  EXPECT_EQ(records[0].group, OpGroup::kGemmGdnIn);
  EXPECT_EQ(records[0].backend, "gemv");
  EXPECT_EQ(records[0].shape, "1x16384x5120");
  EXPECT_DOUBLE_EQ(records[0].bytes, 84e6);
  EXPECT_EQ(records[1].op, "gdn");
  EXPECT_EQ(records[1].group, OpGroup::kGdn);
  EXPECT_EQ(records[2].op, "sm90_add_rms_norm_quant");
  EXPECT_EQ(records[2].group, OpGroup::kNorm);
  EXPECT_EQ(current_op().op, nullptr);
}

TEST(ShortKernelName, StripsSignatureNamespacesAndTemplates) {
  EXPECT_EQ(short_kernel_name("void vt::cuda::(anonymous "
                              "namespace)::sm90_fp8_gemm_mma_splitk<__nv_bfloat16, 1>(T1 *, long)"),
            "sm90_fp8_gemm_mma_splitk");
  EXPECT_EQ(short_kernel_name("nvjet_hsh_64x8_64x16_2x1_v_bz_TNT"),
            "nvjet_hsh_64x8_64x16_2x1_v_bz_TNT");
}

TEST(StepReport, SharesIdleBandwidthAndGroups) {
  // Two steps of 100 us wall: a GEMM 40 us (1 MB), a norm 10 us, then 50 us idle.
  std::vector<KernelRecord> records;
  for (uint64_t step = 0; step < 2; ++step) {
    const uint64_t t = step * 100'000;
    records.push_back(record("void gemm_kernel<float>(float*)", t + 0, t + 40'000, 64));
    records.push_back(record("norm_kernel", t + 40'000, t + 50'000));
  }
  std::vector<Intent> intents = {
      intent("gemm_kernel", "mlp.down", OpGroup::kGemmMlp, "fp8_mma", 1e6),
      intent("norm_kernel", "rms_norm", OpGroup::kNorm, "cuda", 1e4)};
  intents[1].shape = "";  // a launcher that states no shape: its row is named by the grid
  const auto spans = spans_from_kernels(records, intents);
  const StepReport report = build_step_report(spans, {2, 200.0, 100.0});
  EXPECT_DOUBLE_EQ(report.step_us, 100.0);
  EXPECT_NEAR(report.idle_share, 0.5, 1e-12);
  EXPECT_NEAR(report.share_sum, 1.0, 1e-12);
  EXPECT_TRUE(report.shares_consistent());
  EXPECT_DOUBLE_EQ(report.graph_fraction, 1.0);
  ASSERT_EQ(report.rows.size(), 2u);
  const ReportRow& gemm = report.rows[0];
  EXPECT_EQ(gemm.name, "gemm_kernel [1x1024x1024]");  // the launcher's shape, not the grid
  EXPECT_EQ(report.rows[1].name, "norm_kernel [1x1x1]");
  EXPECT_EQ(gemm.ops, "mlp.down");
  EXPECT_EQ(gemm.group, "gemm.mlp");
  EXPECT_EQ(gemm.backend, "fp8_mma");
  EXPECT_DOUBLE_EQ(gemm.calls_per_step, 1.0);
  EXPECT_NEAR(gemm.us_per_step, 40.0, 1e-9);
  EXPECT_NEAR(gemm.share, 0.4, 1e-12);
  EXPECT_NEAR(gemm.gbps, 25.0, 1e-9);            // 1 MB in 40 us
  EXPECT_NEAR(gemm.floor_fraction, 0.25, 1e-9);  // 10 us at 100 GB/s of 40 us
  ASSERT_EQ(report.groups.size(), 2u);
  EXPECT_EQ(report.groups[0].name, "gemm.mlp");
  EXPECT_EQ(report.groups[1].name, "norm");
  EXPECT_NEAR(report.floor_us, (1e6 + 1e4) / 100e9 * 1e6, 1e-9);

  const nlohmann::json json = report_json(report);
  EXPECT_EQ(json["kernels"].size(), 2u);
  EXPECT_EQ(json["groups"][0]["group"], "gemm.mlp");
  EXPECT_TRUE(json["shares_consistent"].get<bool>());
  const std::string text = report_text(report);
  EXPECT_NE(
      text.find("| gemm_kernel [1x1024x1024] | mlp.down | gemm.mlp | fp8_mma | 1.0 | 40.0 | 40.0% |"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("within 2%"), std::string::npos);
}

// MFU per part: two GEMM groups add into "gemm" against the GEMM peak, attention and the delta
// rule against bf16's, norms into "other" with no peak, and the total over the wall time.
TEST(StepReport, PartUtilisationAddsGroupsIntoPartsAgainstTheirPeaks) {
  // One step of 100 us: GEMMs 20 + 10 us (4e9 and 2e9 FLOPs), attention 30 us (3e9), the delta
  // rule 10 us (0.5e9), a norm 5 us (no FLOPs), 25 us idle.
  std::vector<KernelRecord> records = {record("gemm_a", 0, 20'000), record("gemm_b", 20'000, 30'000),
                                       record("attn", 30'000, 60'000), record("gdn", 60'000, 70'000),
                                       record("norm", 70'000, 75'000)};
  auto with_flops = [](Intent in, double flops) {
    in.flops = flops;
    return in;
  };
  std::vector<Intent> intents = {with_flops(intent("gemm_a", "mlp", OpGroup::kGemmMlp, "cublaslt", 0), 4e9),
                                 with_flops(intent("gemm_b", "qkv", OpGroup::kGemmAttnQkv, "wgmma", 0), 2e9),
                                 with_flops(intent("attn", "attention", OpGroup::kAttention, "flashinfer", 0), 3e9),
                                 with_flops(intent("gdn", "delta", OpGroup::kGdn, "cuda", 0), 0.5e9),
                                 with_flops(intent("norm", "rms_norm", OpGroup::kNorm, "cuda", 0), 0)};
  const StepReport report = build_step_report(spans_from_kernels(records, intents), {1, 100.0, 100.0});
  const auto parts = part_utilisation(report, /*gemm_peak_tflops=*/1000, /*bf16_peak_tflops=*/500);
  ASSERT_EQ(parts.size(), 5u);
  EXPECT_EQ(parts[0].part, "gemm");
  EXPECT_NEAR(parts[0].us_per_step, 30.0, 1e-9);
  EXPECT_NEAR(parts[0].tflops_per_s, 200.0, 1e-6);  // 6e9 FLOPs in 30 us
  EXPECT_NEAR(parts[0].mfu, 0.2, 1e-9);
  EXPECT_EQ(parts[1].part, "attention");
  EXPECT_NEAR(parts[1].mfu, 0.2, 1e-9);  // 100 TFLOP/s of 500
  EXPECT_EQ(parts[2].part, "gdn");
  EXPECT_NEAR(parts[2].tflops_per_s, 50.0, 1e-6);
  EXPECT_NEAR(parts[2].mfu, 0.1, 1e-9);
  EXPECT_EQ(parts[3].part, "other");
  EXPECT_NEAR(parts[3].us_per_step, 5.0, 1e-9);
  EXPECT_DOUBLE_EQ(parts[3].mfu, 0.0);
  EXPECT_EQ(parts[4].part, "total");
  EXPECT_NEAR(parts[4].flops_per_step, 9.5e9, 1);
  EXPECT_NEAR(parts[4].tflops_per_s, 95.0, 1e-6);  // over the 100 us wall, idle included
  EXPECT_NEAR(parts[4].mfu, 0.095, 1e-9);
}

TEST(StepReport, OverlapIsCountedOnceForTheKernelThatStartedFirst) {
  // b is launched early (PDL) and waits 30 us for a: a keeps 60 us, b owns 40 of its 70 us.
  const std::vector<KernelRecord> records = {record("a", 0, 60'000), record("b", 30'000, 100'000)};
  const auto report = build_step_report(spans_from_kernels(records, {}), {1, 100.0, 0});
  EXPECT_DOUBLE_EQ(report.idle_share, 0.0);
  EXPECT_NEAR(report.share_sum, 1.0, 1e-12);
  EXPECT_TRUE(report.shares_consistent());
  EXPECT_NEAR(report.span_us - report.busy_us, 30.0, 1e-9);
  ASSERT_EQ(report.rows.size(), 2u);
  EXPECT_EQ(report.rows[0].kernel, "a");
  EXPECT_NEAR(report.rows[0].us_per_step, 60.0, 1e-9);
  EXPECT_NEAR(report.rows[1].us_per_step, 40.0, 1e-9);
  EXPECT_NEAR(report.rows[1].raw_us_per_step, 70.0, 1e-9);
  EXPECT_NE(report_text(report).find("kernels overlap by 30.0 us/step"), std::string::npos)
      << report_text(report);
  // A kernel wholly inside another's interval owns no time.
  const auto nested = build_step_report(
      spans_from_kernels({record("a", 0, 100'000), record("b", 10'000, 20'000)}, {}),
      {1, 100.0, 0});
  EXPECT_NEAR(nested.rows[1].us_per_step, 0.0, 1e-9);
  EXPECT_NEAR(nested.share_sum, 1.0, 1e-12);
}

TEST(StepReport, RecordsOutsideTheTimedWindowBreakTheShareSum) {
  // 150 us of kernels in a 100 us window: something was recorded that the wall time did not see.
  const std::vector<KernelRecord> records = {record("a", 0, 100'000),
                                             record("b", 100'000, 150'000)};
  const auto report = build_step_report(spans_from_kernels(records, {}), {1, 100.0, 0});
  EXPECT_NEAR(report.share_sum, 1.5, 1e-12);
  EXPECT_FALSE(report.shares_consistent());
  EXPECT_NE(report_text(report).find("NOT within 2%"), std::string::npos);
  EXPECT_TRUE(
      build_step_report(spans_from_kernels(records, {}), {1, 151.0, 0}).shares_consistent());
}

TEST(StepReport, SameKernelForTwoOpsKeepsEachOpsBytes) {
  // One GEMM kernel serves in_proj (8 MB) then out_proj (2 MB) each step; a cuBLAS kernel nobody
  // intended also ran.
  std::vector<KernelRecord> records;
  for (uint64_t step = 0; step < 3; ++step) {
    const uint64_t t = step * 1'000'000;
    records.push_back(record("gemm", t, t + 100'000, 8));
    records.push_back(record("gemm", t + 100'000, t + 150'000, 2));
    records.push_back(record("nvjet_tst", t + 150'000, t + 160'000));
  }
  const std::vector<Intent> intents = {
      intent("gemm", "gdn.in_proj", OpGroup::kGemmGdnIn, "fp8_mma", 8e6),
      intent("gemm", "gdn.out_proj", OpGroup::kGemmOut, "fp8_mma", 2e6)};
  const auto spans = spans_from_kernels(records, intents);
  ASSERT_EQ(spans.size(), 9u);
  EXPECT_EQ(spans[3].op, "gdn.in_proj");
  EXPECT_DOUBLE_EQ(spans[4].bytes, 2e6);
  EXPECT_FALSE(spans[5].intended);
  EXPECT_EQ(spans[5].op, "(not intended)");
  const auto report = build_step_report(spans, {3, 3000.0, 1000.0});
  std::map<std::string, double> bytes;
  for (const auto& group : report.groups) bytes[group.name] = group.bytes_per_step;
  EXPECT_DOUBLE_EQ(bytes["gemm.gdn_in"], 8e6);
  EXPECT_DOUBLE_EQ(bytes["gemm.out"], 2e6);
  EXPECT_DOUBLE_EQ(bytes["other"], 0);
}

TEST(ChromeTrace, CompleteEventsInMicroseconds) {
  // b starts 1 us before a ends (launched early): its own time on track 1, the early part on 2.
  const std::vector<KernelRecord> records = {record("a", 5'000, 7'000), record("b", 6'000, 10'500)};
  const auto spans =
      spans_from_kernels(records, {intent("a", "rms_norm", OpGroup::kNorm, "cuda", 64)});
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace(spans, "test").dump());
  std::vector<nlohmann::json> running, early;
  for (const auto& event : trace.at("traceEvents")) {
    if (event["ph"] != "X") continue;
    (event["tid"] == 1 ? running : early).push_back(event);
  }
  ASSERT_EQ(running.size(), 2u);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_EQ(running[0]["name"], "a");
  EXPECT_EQ(running[0]["cat"], "norm");
  EXPECT_EQ(running[0]["args"]["op"], "rms_norm");
  EXPECT_DOUBLE_EQ(running[0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(running[0]["dur"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(running[1]["ts"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(running[1]["dur"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(running[1]["args"]["raw_dur"].get<double>(), 4.5);
  EXPECT_EQ(early[0]["name"], "b");
  EXPECT_DOUBLE_EQ(early[0]["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(early[0]["dur"].get<double>(), 1.0);
}

TEST(KernelGate, PassesWhenEveryIntendedKernelRanAsOften) {
  const std::vector<Intent> intents = {
      intent("gemm", "mlp.down", OpGroup::kGemmMlp, "fp8_mma", 1),
      intent("gemm", "mlp.gate_up", OpGroup::kGemmMlp, "fp8_mma", 1),
      intent("norm", "rms_norm", OpGroup::kNorm, "cuda", 1)};
  std::vector<KernelRecord> records;
  for (int step = 0; step < 2; ++step)
    for (const char* name : {"void gemm<float>(float*)", "gemm", "norm", "nvjet_unintended"})
      records.push_back(record(name, 0, 1));
  EXPECT_EQ(kernel_gate_failure(intents, records, 2), "");
  EXPECT_NO_THROW(check_kernels_ran(intents, records, 2));
}

TEST(KernelGate, IntendedKernelThatNeverRanNamesOpBackendAndWhatRanInstead) {
  const std::vector<Intent> intents = {
      intent("sm90_fp8_gemm_mma_splitk", "mlp.gate_up", OpGroup::kGemmMlp, "fp8_mma", 1),
      intent("norm", "rms_norm", OpGroup::kNorm, "cuda", 1)};
  std::vector<KernelRecord> records;
  for (int step = 0; step < 3; ++step) {
    records.push_back(record("void sm90_fp8_gemv<float>(float*)", 0, 1));
    records.push_back(record("norm", 0, 1));
  }
  const std::string message = failure_of([&] { check_kernels_ran(intents, records, 3); });
  EXPECT_NE(message.find("op mlp.gate_up"), std::string::npos) << message;
  EXPECT_NE(message.find("backend fp8_mma"), std::string::npos) << message;
  EXPECT_NE(
      message.find("sm90_fp8_gemm_mma_splitk 1 times per step, but it ran 0 times in 3 steps"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("Ran instead: sm90_fp8_gemv x3"), std::string::npos) << message;
  EXPECT_EQ(message.find("rms_norm"), std::string::npos) << "the norm ran as intended: " << message;
}

TEST(KernelGate, CountMismatchFails) {
  // A fused kernel was meant to run twice per step; once per step ran, plus its unfused fallback.
  const std::vector<Intent> intents = {
      intent("fused_norm_quant", "norm+quant", OpGroup::kNorm, "fused", 1),
      intent("fused_norm_quant", "norm+quant", OpGroup::kNorm, "fused", 1)};
  std::vector<KernelRecord> records;
  for (int step = 0; step < 2; ++step)
    for (const char* name : {"fused_norm_quant", "rms_norm_kernel", "quantize_kernel"})
      records.push_back(record(name, 0, 1));
  const std::string message = kernel_gate_failure(intents, records, 2);
  EXPECT_NE(
      message.find("fused_norm_quant 2 times per step, but it ran 2 times in 2 steps (expected 4)"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("quantize_kernel x2;"), std::string::npos) << message;
  EXPECT_NE(message.find("rms_norm_kernel x2;"), std::string::npos) << message;
  // Ran more often than intended fails too.
  const std::vector<KernelRecord> twice = records;
  records.insert(records.end(), twice.begin(), twice.end());
  EXPECT_NE(kernel_gate_failure(intents, records, 1).find("(expected 2)"), std::string::npos);
}

TEST(KernelGate, LibraryKernelsMatchByPrefix) {
  // cuBLASLt picks its kernel: the launcher intends "nvjet*" once per step for the lm_head.
  const std::vector<Intent> intents = {
      intent("nvjet*", "lm_head", OpGroup::kGemmLmHead, "cublaslt", 5e6),
      intent("norm", "rms_norm", OpGroup::kNorm, "cuda", 1)};
  std::vector<KernelRecord> records;
  for (int step = 0; step < 2; ++step)
    for (const char* name : {"norm", "nvjet_sm90_qqtst_128x128_128x6_4x1_v_bz_TNN"})
      records.push_back(record(name, 0, 1));
  EXPECT_EQ(kernel_gate_failure(intents, records, 2), "");
  const auto spans = spans_from_kernels(records, intents);
  EXPECT_EQ(spans[1].op, "lm_head");
  EXPECT_EQ(spans[1].kernel, "nvjet_sm90_qqtst_128x128_128x6_4x1_v_bz_TNN");
  EXPECT_DOUBLE_EQ(spans[1].bytes, 5e6);
  // The library fell back to a kernel outside the family: the gate says so.
  records[1].name = records[3].name = "cutlass_80_tensorop_gemm";
  const std::string message = kernel_gate_failure(intents, records, 2);
  EXPECT_NE(message.find("op lm_head on backend cublaslt intended kernel nvjet* 1 times per step, "
                         "but it ran 0 times"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("cutlass_80_tensorop_gemm x2"), std::string::npos) << message;
}

TEST(KernelGate, OptionalHelperMayRunOrNotAndBelongsToTheLaunchBeforeIt) {
  // cuBLASLt's split-K reduction runs for some shapes only: intended as optional with each GEMM.
  std::vector<Intent> intents = {
      intent("nvjet*", "mlp.down", OpGroup::kGemmMlp, "cublaslt", 5e6),
      intent("splitKreduce_kernel", "mlp.down", OpGroup::kGemmMlp, "cublaslt", 0),
      intent("nvjet*", "lm_head", OpGroup::kGemmLmHead, "cublaslt", 9e6),
      intent("splitKreduce_kernel", "lm_head", OpGroup::kGemmLmHead, "cublaslt", 0)};
  intents[1].optional = intents[3].optional = true;
  intents[2].shape = "1x248320x5120";
  // mlp.down ran without a reduction, lm_head with one.
  std::vector<KernelRecord> records = {record("nvjet_sm90_tst_64x8_TNT", 0, 10),
                                       record("nvjet_sm90_tst_512x8_splitK_TNT", 10, 20),
                                       record("splitKreduce_kernel", 20, 25)};
  EXPECT_EQ(kernel_gate_failure(intents, records, 1), "");
  const auto spans = spans_from_kernels(records, intents);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[2].op, "lm_head");
  EXPECT_EQ(spans[2].group, OpGroup::kGemmLmHead);
  EXPECT_EQ(spans[2].where, "1x248320x5120");
  EXPECT_DOUBLE_EQ(spans[2].bytes, 0);
  // Without the reduction at all: still fine; more reductions than GEMMs: not.
  records.pop_back();
  EXPECT_EQ(kernel_gate_failure(intents, records, 1), "");
  for (int i = 0; i < 3; ++i) records.push_back(record("splitKreduce_kernel", 30, 31));
  EXPECT_NE(kernel_gate_failure(intents, records, 1).find("splitKreduce_kernel"), std::string::npos);
}

TEST(KernelGate, NoIntentsFails) {
  EXPECT_NE(kernel_gate_failure({}, {record("a", 0, 1)}, 1).find("no intents"), std::string::npos);
}

TEST(Intents, RecordOpGroupBackendShapeBytesAndFlops) {
  intend("ignored");  // not recording
  EXPECT_FALSE(intents_active());
  begin_intents();
  EXPECT_TRUE(intents_active());
  intend("sm90_rms_norm");
  intend(
      "sm90_fp8_gemm_mma_splitk",
      IntentInfo{
          "gdn.in_proj", OpGroup::kGemmGdnIn, "fp8_mma", {1, 10240, 5120}, 52.4e6, 1.05e8});
  const auto records = end_intent_records();
  EXPECT_FALSE(intents_active());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].kernel, "sm90_rms_norm");
  EXPECT_EQ(records[0].op, "sm90_rms_norm");
  EXPECT_EQ(records[0].group, OpGroup::kOther);
  EXPECT_EQ(records[1].op, "gdn.in_proj");
  EXPECT_EQ(records[1].backend, "fp8_mma");
  EXPECT_EQ(records[1].shape, "1x10240x5120");
  EXPECT_EQ(records[1].group, OpGroup::kGemmGdnIn);
  EXPECT_DOUBLE_EQ(records[1].bytes, 52.4e6);
  begin_intents();
  intend("k");
  intend("k");
  EXPECT_EQ(end_intents(), (std::map<std::string, int64_t>{{"k", 2}}));
}

TEST(Intents, GemmGroupOfWeightNames) {
  EXPECT_EQ(gemm_group_of_weight("model.layers.0.linear_attn.in_proj_qkv"), OpGroup::kGemmGdnIn);
  EXPECT_EQ(gemm_group_of_weight("model.language_model.layers.0.linear_attn.in_proj_ba"),
            OpGroup::kGemmGdnIn);
  EXPECT_EQ(gemm_group_of_weight("model.layers.0.linear_attn.out_proj"), OpGroup::kGemmOut);
  EXPECT_EQ(gemm_group_of_weight("model.layers.3.self_attn.q_proj"), OpGroup::kGemmAttnQkv);
  EXPECT_EQ(gemm_group_of_weight("model.layers.3.self_attn.o_proj"), OpGroup::kGemmOut);
  EXPECT_EQ(gemm_group_of_weight("model.layers.1.mlp.gate_proj"), OpGroup::kGemmMlp);
  EXPECT_EQ(gemm_group_of_weight("model.layers.1.mlp.experts.3.down_proj"), OpGroup::kGemmMlp);
  EXPECT_EQ(gemm_group_of_weight("model.layers.1.mlp.gate"), OpGroup::kGemmRouter);
  EXPECT_EQ(gemm_group_of_weight("model.layers.1.mlp.shared_expert_gate"), OpGroup::kGemmRouter);
  EXPECT_EQ(gemm_group_of_weight("lm_head"), OpGroup::kGemmLmHead);
  EXPECT_EQ(gemm_group_of_weight("blk.0.attn_output"), OpGroup::kGemmOut);
  EXPECT_EQ(gemm_group_of_weight("something.else"), OpGroup::kGemmOther);
  for (int group = 0; group < kNumOpGroups; ++group)
    EXPECT_STRNE(op_group_name(OpGroup(group)), "");
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Predictions, JsonAndTextFiles) {
  EXPECT_EQ(read_predictions(write_temp("p1.json", R"({"1": 11.5, "16": 13})")),
            (std::map<int64_t, double>{{1, 11.5}, {16, 13.0}}));
  EXPECT_EQ(read_predictions(write_temp("p2.json", R"({"ms_per_step": {"64": 20.25}})")),
            (std::map<int64_t, double>{{64, 20.25}}));
  EXPECT_EQ(read_predictions(
                write_temp("p3.txt", "# from the roofline\n1 11.5  # weights only\n\n16 13\n")),
            (std::map<int64_t, double>{{1, 11.5}, {16, 13.0}}));
  EXPECT_NE(
      failure_of([] { read_predictions(write_temp("p4.txt", "1 fast\n")); }).find(":1: expected"),
      std::string::npos);
  EXPECT_NE(failure_of([] {
              read_predictions(write_temp("p5.json", R"({"x": 1})"));
            }).find("not a positive integer"),
            std::string::npos);
  EXPECT_NE(failure_of([] { read_predictions(write_temp("p6.txt", "1 2\n1 3\n")); }).find("twice"),
            std::string::npos);
  EXPECT_NE(
      failure_of([] { read_predictions(write_temp("p7.txt", "1 -2\n")); }).find("non-positive"),
      std::string::npos);
  EXPECT_NE(failure_of([] { read_predictions("/nonexistent/prediction"); }).find("cannot open"),
            std::string::npos);
}

// The CPU backend's timed ops over decode steps of a golden tiny model.
struct CpuProfile {
  Qwen35Config config;
  std::vector<TimedOp> ops;
  double wall_us = 0;
};

CpuProfile profile_golden(const std::string& name, int64_t steps) {
  const std::string dir = std::string(VT_SOURCE_DIR) + "/tests/golden/" + name;
  CpuProfile out{parse_qwen35_config(dir + "/config.json"), {}, 0};
  auto model = load_model(dir, LoadOptions{});
  auto sequence = model->new_sequence(32);
  Buffer logits(DType::kF32, {1, model->info().vocab_size});
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  model->forward(prompt, *sequence, logits, ForwardOptions{});  // prefill, not recorded
  OpRecorder recorder;
  recorder.start();
  const uint64_t start = steady_now_ns();
  for (int64_t step = 0; step < steps; ++step) {
    const int32_t token = argmax(logits.f32(), model->info().vocab_size);
    model->forward({&token, 1}, *sequence, logits, ForwardOptions{});
  }
  out.wall_us = double(steady_now_ns() - start) * 1e-3;
  out.ops = recorder.stop();
  return out;
}

std::map<std::string, int64_t> calls(const std::vector<TimedOp>& ops) {
  std::map<std::string, int64_t> counts;
  for (const auto& op : ops) ++counts[op.op];
  return counts;
}

TEST(CpuOpProfile, DenseGoldenOpCountsMatchTheConfig) {
  constexpr int64_t kSteps = 3;
  const CpuProfile profile = profile_golden("qwen3_5_dense", kSteps);
  const Qwen35Config& c = profile.config;
  int64_t gdn = 0, attention = 0;
  for (LayerKind kind : c.layer_types) (kind == LayerKind::kFullAttention ? attention : gdn) += 1;
  ASSERT_GT(gdn, 0);
  ASSERT_GT(attention, 0);
  const int64_t layers = c.num_layers;
  const auto counts = calls(profile.ops);
  // GDN: in_proj (qkv+z), in_proj (b+a), out_proj; attention: qkv, o_proj; MLP: gate_up, down;
  // lm_head.
  EXPECT_EQ(counts.at("matmul_nt"), kSteps * (3 * gdn + 2 * attention + 2 * layers + 1));
  // input + post-attention norms per layer, q/k norms per attention layer, the final norm.
  EXPECT_EQ(counts.at("rms_norm"), kSteps * (2 * layers + 2 * attention + 1));
  EXPECT_EQ(counts.at("gated_delta_rule"), kSteps * gdn);
  EXPECT_EQ(counts.at("causal_conv1d_silu"), kSteps * gdn);
  EXPECT_EQ(counts.at("l2_normalize"), kSteps * 2 * gdn);
  EXPECT_EQ(counts.at("gated_rms_norm"), kSteps * gdn);
  EXPECT_EQ(counts.at("attention_causal"), kSteps * attention);
  EXPECT_EQ(counts.at("rope_neox"), kSteps * 2 * attention);
  EXPECT_EQ(counts.at("silu_mul"), kSteps * layers);
  EXPECT_EQ(counts.at("add_in_place"), kSteps * 2 * layers);
  EXPECT_EQ(counts.at("embedding"), kSteps);
  EXPECT_EQ(counts.count("fp8_quant_dequant"), 0u);

  // Every GEMM knows its role; bytes are at least the weights.
  std::map<OpGroup, int64_t> gemms;
  double matmul_bytes = 0;
  for (const auto& op : profile.ops)
    if (std::string(op.op) == "matmul_nt") {
      ++gemms[op.group];
      matmul_bytes += op.bytes;
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * double(op.shape[0] * op.shape[1] * op.shape[2]));
    }
  EXPECT_EQ(gemms[OpGroup::kGemmGdnIn], kSteps * 2 * gdn);
  EXPECT_EQ(gemms[OpGroup::kGemmAttnQkv], kSteps * attention);
  EXPECT_EQ(gemms[OpGroup::kGemmOut], kSteps * layers);
  EXPECT_EQ(gemms[OpGroup::kGemmMlp], kSteps * 2 * layers);
  EXPECT_EQ(gemms[OpGroup::kGemmLmHead], kSteps);
  EXPECT_EQ(gemms[OpGroup::kGemmOther], 0);
  const double mlp_weights =
      3.0 * double(c.hidden_size * c.intermediate_size) * 4.0 * double(layers);
  EXPECT_GT(matmul_bytes / kSteps, mlp_weights);

  const auto report =
      build_step_report(spans_from_ops(profile.ops), {kSteps, profile.wall_us, 10.0, "op"});
  EXPECT_TRUE(report.shares_consistent()) << report_text(report);
  double share = report.idle_share;
  for (const auto& group : report.groups) share += group.share;
  EXPECT_NEAR(share, 1.0, 0.02);
  EXPECT_NEAR(report.spans_per_step, double(profile.ops.size()) / kSteps, 1e-9);
}

TEST(CpuOpProfile, Fp8GoldenQuantisesEveryFp8GemmInput) {
  constexpr int64_t kSteps = 2;
  const CpuProfile profile = profile_golden("qwen3_5_fp8", kSteps);
  int64_t gdn = 0;
  for (LayerKind kind : profile.config.layer_types) gdn += kind == LayerKind::kLinearAttention;
  const auto counts = calls(profile.ops);
  // W8A8: each FP8 linear quantises its input; the checkpoint keeps lm_head and the GDN b/a
  // projection in BF16, and those do not.
  EXPECT_EQ(counts.at("fp8_quant_dequant"), counts.at("matmul_nt") - kSteps * (1 + gdn));
  for (const auto& op : profile.ops) {
    if (std::string(op.op) == "fp8_quant_dequant") {
      EXPECT_EQ(op.group, OpGroup::kQuantize);
    }
  }
}

TEST(CpuOpProfile, OnlyOpsInsideTheWindowAreRecorded) {
  Buffer x(DType::kF32, {4}), y(DType::kF32, {4});
  ops::add_in_place(x, y);  // no recorder: not timed
  OpRecorder recorder;
  recorder.start();
  EXPECT_THROW(OpRecorder().start(), Error);  // one recorder at a time
  ops::add_in_place(x, y);
  const auto ops = recorder.stop();
  ops::add_in_place(x, y);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_STREQ(ops[0].op, "add_in_place");
  EXPECT_EQ(ops[0].group, OpGroup::kElementwise);
  EXPECT_DOUBLE_EQ(ops[0].bytes, 3 * 4 * 4.0);
  EXPECT_LE(ops[0].start_ns, ops[0].end_ns);
}

TEST(CpuOpProfile, MemcpyBandwidthIsPositive) {
  EXPECT_GT(measure_memcpy_bandwidth(size_t(8) << 20), 0.1);
}

}  // namespace
}  // namespace vt::profile
