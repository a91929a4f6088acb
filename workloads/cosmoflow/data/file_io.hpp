// Whole-file reads and writes for tools, tests and the dataset generator (the workload itself
// reads through its storage plug-in).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace mlph::cosmoflow {

// The bytes of the regular file at path (sdk::read_regular_file). Throws std::runtime_error naming
// the path, also for a FIFO, directory or device.
std::vector<std::byte> read_file(const std::string& path);

// Writes bytes to path.partial, then renames it to path, so that a reader never sees half a file.
// Throws std::runtime_error naming the path.
void write_file_atomically(const std::string& path, std::span<const std::byte> bytes);

// The same, for a file written in pieces: `produce` hands each piece to the sink it receives, so a
// large file (a 512^3 sample) needs no copy of itself in memory.
using ByteSink = std::function<void(std::span<const std::byte>)>;
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce);

}  // namespace mlph::cosmoflow
