// Runs mlperf-run as a user would and captures what it printed.
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace mlph::test {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline CliResult run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  CliResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) result.output += buffer.data();
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline CliResult run_cli(const std::string& args) { return run_command(std::string(MLPH_BINARY_DIR "/bin/mlperf-run ") + args); }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the shadow memory of a sanitized program takes terabytes of address space
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

struct BoundedResult : CliResult {
  double seconds = 0;       // wall time
  long max_rss_mib = 0;     // the child's peak resident memory
  bool signaled = false;    // ended by a signal (a crash, or a limit below)
};

// mlperf-run `args` in a child held to `memory_mib` of address space (not under a sanitizer) and
// `cpu_seconds` of CPU, so that a regression that hangs or grows ends the test instead of the machine;
// its peak memory and time come back for the test to bound.
inline BoundedResult run_cli_bounded(const std::string& args, long memory_mib = 2048, long cpu_seconds = 30) {
  BoundedResult result;
  int out[2];
  if (pipe(out) != 0) return result;
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    close(out[1]);
    const rlimit memory{static_cast<rlim_t>(memory_mib) << 20, static_cast<rlim_t>(memory_mib) << 20};
    const rlimit cpu{static_cast<rlim_t>(cpu_seconds), static_cast<rlim_t>(cpu_seconds)};
    if (!kSanitized) setrlimit(RLIMIT_AS, &memory);
    setrlimit(RLIMIT_CPU, &cpu);
    const std::string command = std::string("exec " MLPH_BINARY_DIR "/bin/mlperf-run ") + args;
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = read(out[0], buffer.data(), buffer.size())) > 0;) result.output.append(buffer.data(), static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.max_rss_mib = usage.ru_maxrss / 1024;
  result.signaled = WIFSIGNALED(status);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::vector<std::string> read_lines(const std::filesystem::path& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The value of "key" in an MLLOG line ("" when absent).
inline std::string mllog_key(const std::string& line) {
  const std::string tag = "\"key\": \"";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  const size_t start = at + tag.size();
  return line.substr(start, line.find('"', start) - start);
}

// The value of an MLLOG line as JSON text up to the next comma ("" when absent): numbers, null, short strings.
inline std::string mllog_value(const std::string& line) {
  const std::string tag = "\"value\": ";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  const size_t start = at + tag.size();
  return line.substr(start, line.find(',', start) - start);
}

// Key -> value (as mllog_value) of every line of an MLLOG file; a repeated key keeps its last value.
inline std::map<std::string, std::string> mllog_values(const std::filesystem::path& log) {
  std::map<std::string, std::string> values;
  for (const std::string& line : read_lines(log))
    if (line.find("\"value\": ") != std::string::npos) values[mllog_key(line)] = mllog_value(line);
  return values;
}

// A copy of `log` beside it (patched.txt) whose every `key` line has `value`.
inline std::filesystem::path with_value(const std::filesystem::path& log, const std::string& key,
                                        const std::string& value) {
  const std::filesystem::path patched = log.parent_path() / "patched.txt";
  std::ofstream to(patched);
  for (std::string line : read_lines(log)) {
    if (mllog_key(line) == key) {
      const size_t start = line.find("\"value\": ") + 9;
      line.replace(start, line.find(',', start) - start, value);
    }
    to << line << "\n";
  }
  return patched;
}

// eval_error 0.1, under CosmoFlow's target: the official checker then judges everything else of a run
// too short to converge.
inline std::filesystem::path with_eval_error_under_target(const std::filesystem::path& log) {
  return with_value(log, "eval_error", "0.1");
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("mlph-test-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The official checker beside the checkout (../shared), or "" on a fresh clone without it.
inline std::string official_checker() {
  const auto tool = std::filesystem::path(MLPH_SOURCE_DIR) / ".." / "shared" / "tools" / "mllog-check";
  return std::filesystem::exists(tool) ? tool.lexically_normal().string() : "";
}

}  // namespace mlph::test
