#include "models/generation_config.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "io/json_config.h"

namespace vt {

SamplingParams GenerationConfig::sampling_over(SamplingParams base) const {
  if (temperature) base.temperature = *temperature;
  if (top_k) base.top_k = *top_k;
  if (top_p) base.top_p = *top_p;
  if (min_p) base.min_p = *min_p;
  return base;
}

std::string GenerationConfig::sampling_summary() const {
  std::ostringstream out;
  const char* gap = "";
  if (temperature) out << gap << "temperature=" << *temperature, gap = " ";
  if (top_k) out << gap << "top_k=" << *top_k, gap = " ";
  if (top_p) out << gap << "top_p=" << *top_p, gap = " ";
  if (min_p) out << gap << "min_p=" << *min_p, gap = " ";
  if (repetition_penalty) out << gap << "repetition_penalty=" << *repetition_penalty;
  return out.str();
}

GenerationConfig load_generation_config(const std::filesystem::path& dir) {
  GenerationConfig config;
  const std::filesystem::path path = dir / "generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return config;
  const nlohmann::json json = read_json_file(path.string());
  const JsonObject object(json, path.filename().string());
  if (object.has("eos_token_id")) {
    const nlohmann::json& eos = json.at("eos_token_id");
    const std::vector<int64_t> ids = eos.is_array() ? object.get_ints("eos_token_id")
                                                    : std::vector<int64_t>{object.get_int("eos_token_id")};
    for (int64_t id : ids) {
      VT_CHECK(id >= 0 && id <= INT32_MAX, path.string(), ": eos_token_id ", id, " is not a token id");
      config.eos_token_ids.push_back(int32_t(id));
    }
  }
  if (object.has("temperature")) {
    const double value = object.get_number("temperature");
    VT_CHECK(std::isfinite(value) && value >= 0, path.string(), ": temperature ", value, " must be >= 0");
    config.temperature = float(value);
  }
  if (object.has("top_k")) {
    const int64_t value = object.get_int("top_k");
    VT_CHECK(value >= -1, path.string(), ": top_k ", value, " must be -1 or 0 (no limit) or positive");
    config.top_k = value < 0 ? 0 : value;
  }
  if (object.has("top_p")) {
    const double value = object.get_number("top_p");
    VT_CHECK(value > 0 && value <= 1, path.string(), ": top_p ", value, " must be in (0, 1]");
    config.top_p = float(value);
  }
  if (object.has("min_p")) {
    const double value = object.get_number("min_p");
    VT_CHECK(value >= 0 && value <= 1, path.string(), ": min_p ", value, " must be in [0, 1]");
    config.min_p = float(value);
  }
  if (object.has("repetition_penalty")) {
    const double value = object.get_number("repetition_penalty");
    VT_CHECK(std::isfinite(value) && value > 0, path.string(), ": repetition_penalty ", value, " must be > 0");
    config.repetition_penalty = float(value);
  }
  return config;
}

}  // namespace vt
