#include "profile/kernel_recorder.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/error.h"

#define VT_CUPTI_CHECK(call)                                                  \
  do {                                                                        \
    CUptiResult vt_status = (call);                                           \
    if (vt_status != CUPTI_SUCCESS) {                                         \
      const char* vt_message = nullptr;                                       \
      cuptiGetResultString(vt_status, &vt_message);                           \
      VT_FAIL(#call, ": ", vt_message ? vt_message : "CUPTI error");          \
    }                                                                         \
  } while (0)

namespace vt::profile {
namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlignment = 8;

std::mutex records_mutex;
std::vector<KernelRecord>* active_records = nullptr;

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> readable(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && readable ? readable.get() : name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(records_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (!active_records) continue;
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelRecord out;
    out.name = demangle(kernel->name);
    out.start_ns = kernel->start;
    out.end_ns = kernel->end;
    out.grid[0] = uint32_t(kernel->gridX), out.grid[1] = uint32_t(kernel->gridY), out.grid[2] = uint32_t(kernel->gridZ);
    out.block[0] = uint32_t(kernel->blockX), out.block[1] = uint32_t(kernel->blockY), out.block[2] = uint32_t(kernel->blockZ);
    out.graph_node = kernel->graphNodeId;
    out.graph = kernel->graphId;
    active_records->push_back(std::move(out));
  }
  std::free(buffer);
}

}  // namespace

KernelRecorder::KernelRecorder() {
  VT_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
}

KernelRecorder::~KernelRecorder() {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(1);
  std::lock_guard lock(records_mutex);
  delete active_records;
  active_records = nullptr;
}

void KernelRecorder::start() {
  {
    std::lock_guard lock(records_mutex);
    delete active_records;
    active_records = new std::vector<KernelRecord>();
  }
  VT_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

std::vector<KernelRecord> KernelRecorder::stop() {
  VT_CUPTI_CHECK(cuptiActivityFlushAll(1));
  VT_CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::lock_guard lock(records_mutex);
  std::vector<KernelRecord> records = std::move(*active_records);
  active_records->clear();
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return records;
}

}  // namespace vt::profile
