#include "manifest.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace mlph::stage {
namespace fs = std::filesystem;

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(bytes, std::numeric_limits<uInt>::max()));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

std::string part_name(uint32_t part) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%05u.tar.zst", part);
  return name;
}

Manifest read_manifest(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot open");
  Manifest m;
  std::string line, magic;
  int version = 0;
  std::string parts_word;
  if (!std::getline(in, line) || !(std::istringstream(line) >> magic >> version >> parts_word >> m.parts) ||
      magic != "mlph-manifest" || version != 1 || parts_word != "parts")
    throw std::runtime_error(file.string() + ":1: not an mlph-manifest 1 header");
  for (size_t number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    ManifestEntry e;
    std::string crc;
    if (!(fields >> e.size >> crc) || !(fields >> std::ws) || !std::getline(fields, e.name) || e.name.empty() ||
        e.name.find('/') != std::string::npos)
      throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": expected 'size crc32 name'");
    e.crc32 = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    if (!m.entries.empty() && m.entries.back().name >= e.name)
      throw std::runtime_error(file.string() + ":" + std::to_string(number) + ": names are not sorted and unique");
    m.entries.push_back(std::move(e));
  }
  return m;
}

void write_manifest(const fs::path& file, const Manifest& m) {
  std::ofstream out(file);
  out << "mlph-manifest 1 parts " << m.parts << "\n";
  char crc[16];
  for (const ManifestEntry& e : m.entries) {
    std::snprintf(crc, sizeof crc, "%08x", e.crc32);
    out << e.size << " " << crc << " " << e.name << "\n";
  }
  if (!out.flush()) throw std::runtime_error(file.string() + ": cannot write");
}

namespace {

using ArchivePtr = std::unique_ptr<archive, int (*)(archive*)>;

void check(archive* a, int status, const std::string& what) {
  if (status != ARCHIVE_OK) throw std::runtime_error(what + ": " + archive_error_string(a));
}

// Adds one file to the archive and returns its manifest entry.
ManifestEntry add_file(archive* a, const fs::path& file, std::vector<char>& buffer) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file.string() + ": cannot open");
  ManifestEntry e{file.filename().string(), fs::file_size(file), 0};
  std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(), archive_entry_free);
  archive_entry_set_pathname(entry.get(), e.name.c_str());
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(e.size));
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  check(a, archive_write_header(a, entry.get()), file.string());
  uint64_t copied = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    e.crc32 = crc32_update(e.crc32, buffer.data(), got);
    if (archive_write_data(a, buffer.data(), got) != static_cast<la_ssize_t>(got))
      throw std::runtime_error(file.string() + ": " + archive_error_string(a));
    copied += got;
  }
  if (copied != e.size) throw std::runtime_error(file.string() + ": changed size while being packed");
  return e;
}

uint32_t file_crc32(const fs::path& file, std::vector<char>& buffer) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file.string() + ": cannot open");
  uint32_t crc = 0;
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0)
    crc = crc32_update(crc, buffer.data(), static_cast<size_t>(in.gcount()));
  return crc;
}

}  // namespace

size_t pack_split(const fs::path& split_dir, const fs::path& out_dir, uint32_t parts, int level) {
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(split_dir))
    if (item.is_regular_file() && item.path().filename() != kManifestName) files.push_back(item.path());
  std::sort(files.begin(), files.end());
  fs::create_directories(out_dir);

  Manifest manifest{parts, std::vector<ManifestEntry>(files.size())};
  std::vector<char> buffer(1 << 20);
  if (parts == 0) {  // plain copies with a manifest
    for (size_t i = 0; i < files.size(); ++i) {
      manifest.entries[i] = {files[i].filename().string(), fs::file_size(files[i]), file_crc32(files[i], buffer)};
      fs::copy_file(files[i], out_dir / files[i].filename(), fs::copy_options::overwrite_existing);
    }
  }
  for (uint32_t part = 0; part < parts; ++part) {
    const fs::path path = out_dir / part_name(part);
    ArchivePtr a(archive_write_new(), archive_write_free);
    check(a.get(), archive_write_set_format_pax_restricted(a.get()), path.string());
    check(a.get(), archive_write_add_filter_zstd(a.get()), path.string());
    check(a.get(), archive_write_set_filter_option(a.get(), "zstd", "compression-level", std::to_string(level).c_str()),
          path.string());
    check(a.get(), archive_write_open_filename(a.get(), path.c_str()), path.string());
    for (size_t i = part; i < files.size(); i += parts) manifest.entries[i] = add_file(a.get(), files[i], buffer);
    check(a.get(), archive_write_close(a.get()), path.string());
  }
  write_manifest(out_dir / kManifestName, manifest);
  return files.size();
}

}  // namespace mlph::stage
