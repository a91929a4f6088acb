#include "file_io.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "mlph/sdk/storage/storage.hpp"

namespace mlph::cosmoflow {

std::vector<std::byte> read_file(const std::string& path) {
  return sdk::read_regular_file(path, std::numeric_limits<uint64_t>::max());  // the machine's memory caps it
}

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  write_file_atomically(path, [&](const ByteSink& write) { write(bytes); });
}

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(temporary + ": cannot open for writing");
    produce([&](std::span<const std::byte> piece) {
      out.write(reinterpret_cast<const char*>(piece.data()), static_cast<std::streamsize>(piece.size()));
    });
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw std::runtime_error(temporary + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw std::runtime_error(path + ": cannot rename into place: " + ec.message());
}

}  // namespace mlph::cosmoflow
