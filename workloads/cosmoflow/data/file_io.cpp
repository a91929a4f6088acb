#include "file_io.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace mlph::cosmoflow {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  const std::streamoff size = in.tellg();
  if (size < 0) throw std::runtime_error(path + ": cannot determine the size (not a regular file?)");
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) throw std::runtime_error(path + ": read failed");
  return bytes;
}

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(temporary + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
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
