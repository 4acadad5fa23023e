#include "profile/prediction.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace vt::profile {
namespace {

void add_prediction(std::map<int64_t, double>& out, const std::string& path,
                    const std::string& batch_text, double ms) {
  size_t used = 0;
  int64_t batch = 0;
  try {
    batch = std::stoll(batch_text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VT_CHECK(used == batch_text.size() && batch > 0, path, ": batch '", batch_text,
           "' is not a positive integer");
  VT_CHECK(ms > 0, path, ": batch ", batch, " has a non-positive prediction ", ms, " ms/step");
  VT_CHECK(out.emplace(batch, ms).second, path, ": batch ", batch, " is predicted twice");
}

}  // namespace

std::map<int64_t, double> read_predictions(const std::string& path) {
  std::ifstream in(path);
  VT_CHECK(in, path, ": cannot open prediction file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::map<int64_t, double> predictions;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(text);
    } catch (const std::exception& error) {
      VT_FAIL(path, ": not valid JSON: ", error.what());
    }
    const nlohmann::json& table = json.contains("ms_per_step") ? json["ms_per_step"] : json;
    VT_CHECK(table.is_object(), path, ": expected an object of batch -> ms/step");
    for (const auto& [batch, ms] : table.items()) {
      VT_CHECK(ms.is_number(), path, ": batch ", batch, ": ms/step must be a number");
      add_prediction(predictions, path, batch, ms.get<double>());
    }
  } else {
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      line = line.substr(0, line.find('#'));
      std::istringstream fields(line);
      std::string batch, extra;
      double ms = 0;
      if (!(fields >> batch)) continue;
      VT_CHECK(fields >> ms && !(fields >> extra), path, ":", number,
               ": expected '<batch> <ms_per_step>', got '", line, "'");
      add_prediction(predictions, path, batch, ms);
    }
  }
  VT_CHECK(!predictions.empty(), path, ": no predictions");
  return predictions;
}

}  // namespace vt::profile
