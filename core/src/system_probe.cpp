#include "mlph/core/system_probe.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

std::string read_first_line(const fs::path& file, const std::string& prefix) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\"");
  const auto last = s.find_last_not_of(" \t\"");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

}  // namespace

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

std::map<std::string, std::string> detect_system() {
  std::map<std::string, std::string> info;
  std::set<std::string> sockets, cores;
  std::string socket;
  int vcpus = 0;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
      if (key == "processor") ++vcpus;
      if (key == "model name" && info["host_processor_model_name"].empty()) info["host_processor_model_name"] = value;
      if (key == "physical id") socket = value, sockets.insert(value);
      if (key == "core id") cores.insert(socket + ":" + value);
    }
  }
  const size_t n_sockets = std::max<size_t>(sockets.size(), 1);
  info["host_processors_per_node"] = std::to_string(n_sockets);
  info["host_processor_vcpu_count"] = std::to_string(vcpus);
  info["host_processor_core_count"] = std::to_string(cores.empty() ? vcpus : cores.size() / n_sockets);
  if (std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); f) {
    long khz = 0;
    f >> khz;
    if (khz > 0) info["host_processor_frequency"] = fmt::format("{} MHz", khz / 1000);
  }
  std::string caches;
  for (int i = 0; i < 8; ++i) {
    const fs::path dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}", i);
    if (!fs::exists(dir)) break;
    const std::string level = read_first_line(dir / "level", ""), type = read_first_line(dir / "type", ""),
                      size = read_first_line(dir / "size", "");
    caches += fmt::format("{}L{}{} {}", caches.empty() ? "" : ", ", level,
                          type == "Data" ? "d" : type == "Instruction" ? "i" : "", size);
  }
  info["host_processor_caches"] = caches;
  const std::string mem = trim(read_first_line("/proc/meminfo", "MemTotal:"));
  if (!mem.empty()) info["host_memory_capacity"] = fmt::format("{} GB", std::atoll(mem.c_str()) / (1024 * 1024));
  std::string networks;
  if (fs::exists("/sys/class/infiniband"))
    for (const auto& e : fs::directory_iterator("/sys/class/infiniband"))
      networks += (networks.empty() ? "InfiniBand: " : ", ") + e.path().filename().string();
  info["host_networking"] = networks;
  std::string os = trim(read_first_line("/etc/os-release", "PRETTY_NAME="));
  utsname u{};
  if (uname(&u) == 0) os += fmt::format("{}Linux {}", os.empty() ? "" : ", ", u.release);
  info["operating_system"] = trim(os);
  info["compiler"] = fmt::format("built with GCC {}", __VERSION__);
  return info;
}

}  // namespace mlph::core
