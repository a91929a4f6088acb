#include "profile_report.hpp"

#include <cmath>
#include <utility>

#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/util/text.hpp"

namespace mlph::cuda {
namespace {

// A number JSON can hold: NaN and infinities (an event never recorded) are written as null.
std::string number(double v) { return std::isfinite(v) ? sdk::json_number(v) : "null"; }
std::string text(const std::string& s) { return sdk::quoted(s, s.size()); }
const char* boolean(bool b) { return b ? "true" : "false"; }

std::string list(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + number(values[i]);
  return out + "]";
}

}  // namespace

double tensor_peak_tflop_s(const std::string& device_name) {
  // The most specific names first: "H100 PCIe" before "H100".
  static constexpr std::pair<const char*, double> kPeaks[] = {
      {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"GH200", 989.4}, {"H200", 989.4}, {"H100", 989.4},
      {"H800", 989.4},      {"A100", 312.0},     {"L40S", 362.0},  {"B200", 2250.0}};
  for (const auto& [name, peak] : kPeaks)
    if (device_name.find(name) != std::string::npos) return peak;
  return 0;
}

double achieved_share(const CallTime& call, const Ceilings& ceilings) {
  if (!(call.ms > 0)) return -1;
  const double seconds = call.ms * 1e-3;
  if (call.flops > 0 && ceilings.tensor_tflop_s > 0) return call.flops / seconds / (ceilings.tensor_tflop_s * 1e12);
  if (call.bytes > 0 && ceilings.copy_gb_s > 0) return call.bytes / seconds / (ceilings.copy_gb_s * 1e9);
  return -1;
}

std::string find_json(const std::vector<FindRow>& rows) {
  std::string out = "{\"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const FindRow& r = rows[i];
    out += std::string(i ? "," : "") + "\n {\"node\": " + text(r.node) + ", \"pass\": " + text(r.pass) +
           ", \"algo\": " + std::to_string(r.algo) + ", \"status\": \"" + (r.ok ? "success" : "failed") +
           "\", \"ms\": " + (r.ok ? number(r.time_ms) : "null") + ", \"workspace\": " + std::to_string(r.workspace) +
           ", \"math\": " + text(r.math) + ", \"deterministic\": " + boolean(r.deterministic) +
           ", \"allowed\": " + boolean(r.allowed) + ", \"chosen\": " + boolean(r.chosen) + "}";
  }
  return out + "]}\n";
}

std::string nodes_json(const std::vector<CallTime>& calls, const Ceilings& ceilings,
                       const std::vector<double>& eager_step_ms, const std::vector<double>& graph_step_ms) {
  std::string out = "{\"ceilings\": {\"copy_gb_s\": " + number(ceilings.copy_gb_s) +
                    ", \"tensor_tflop_s\": " + number(ceilings.tensor_tflop_s) +
                    "}, \"eager_steps_ms\": " + list(eager_step_ms) + ", \"graph_steps_ms\": " + list(graph_step_ms) +
                    ",\n \"eager_step_ms\": " + (eager_step_ms.empty() ? "null" : number(eager_step_ms.back())) +
                    ", \"graph_step_ms\": " + (graph_step_ms.empty() ? "null" : number(graph_step_ms.back())) +
                    ",\n \"calls\": [";
  for (size_t i = 0; i < calls.size(); ++i) {
    const CallTime& c = calls[i];
    const double share = achieved_share(c, ceilings);
    out += std::string(i ? "," : "") + "\n {\"node\": " + text(c.node) + ", \"kind\": " + text(c.kind) +
           ", \"pass\": " + text(c.pass) + ", \"call\": " + text(c.call) + ", \"step\": " + std::to_string(c.step) +
           ", \"ms\": " + number(c.ms) + ", \"bytes\": " + (c.bytes > 0 ? number(c.bytes) : "null") +
           ", \"flops\": " + (c.flops > 0 ? number(c.flops) : "null") +
           ", \"share\": " + (share >= 0 ? number(share) : "null") + "}";
  }
  return out + "]}\n";
}

}  // namespace mlph::cuda
