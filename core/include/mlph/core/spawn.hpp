// Starting and waiting for child processes (the runs of a campaign).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace mlph::core {

// Starts `args` (args[0] looked up on PATH); its stdout and stderr go to `console` when given,
// else to ours. Returns the pid; throws std::runtime_error naming args[0] when it cannot start.
pid_t launch(const std::vector<std::string>& args, const std::filesystem::path& console);

// The exit status of `pid`; 128 + the signal for a process a signal ended.
int wait_for(pid_t pid);

}  // namespace mlph::core
