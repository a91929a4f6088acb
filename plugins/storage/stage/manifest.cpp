#include "manifest.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>

#include "mlph/sdk/util/error.hpp"

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

namespace {

// A manifest line's fields, split at runs of spaces; the name is the rest of the line after them.
std::vector<std::string_view> words(std::string_view line, size_t count) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < count) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    line.remove_prefix(start);
    const size_t end = std::min(line.find(' '), line.size());
    out.push_back(line.substr(0, end));
    line.remove_prefix(end);
  }
  const size_t start = line.find_first_not_of(' ');
  if (start != std::string_view::npos) out.push_back(line.substr(start));
  return out;
}

bool has_control_characters(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// Untrusted text, quoted when it prints as itself.
std::string shown(std::string_view text) {
  if (has_control_characters(text)) return "an entry whose name holds control characters";
  std::string quoted(1, '\'');  // built up, not by operator+: GCC 12 warns falsely (-Wrestrict) on that
  quoted.append(text).push_back('\'');
  return quoted;
}

// A file name that stays inside the directory it is written to, and prints as itself.
bool plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         !has_control_characters(name);
}

}  // namespace

Manifest parse_manifest(std::string_view text, const std::string& where) {
  size_t number = 0;
  const auto error = [&](const std::string& what) {
    sdk::fail(MLPH_DATA_LOSS, where + ":" + std::to_string(std::max<size_t>(number, 1)) + ": " + what);
  };
  const auto next_line = [&](std::string_view& line) {
    if (text.empty()) return false;
    const size_t end = std::min(text.find('\n'), text.size());
    line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++number;
    return true;
  };
  std::string_view line;
  Manifest m;
  const std::vector<std::string_view> header = next_line(line) ? words(line, 5) : std::vector<std::string_view>{};
  if (header.size() != 4 || header[0] != "mlph-manifest" || header[1] != "1" || header[2] != "parts")
    error("not an mlph-manifest 1 header ('mlph-manifest 1 parts K')");
  const auto parts = parse_integer<uint32_t>(header[3]);
  if (!parts) error("the part count is not a number from 0 to 4294967295");
  m.parts = *parts;
  while (next_line(line)) {
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = words(line, 3);
    if (fields.size() != 3) error("expected 'size crc32 name'");
    const auto size = parse_integer<uint64_t>(fields[0]);
    if (!size) error("the size is not a number from 0 to 18446744073709551615");
    const auto crc = parse_integer<uint32_t>(fields[1], 16);
    if (!crc || fields[1].size() > 8) error("the crc32 is not 1 to 8 hex digits");
    if (!plain_file_name(fields[2])) error("the name is not a plain file name (empty, '.', '..', a path, or control characters)");
    if (!m.entries.empty() && m.entries.back().name >= fields[2]) error("names are not sorted and unique");
    m.entries.push_back({std::string(fields[2]), *size, *crc});
  }
  return m;
}

Manifest read_manifest(const fs::path& file) {
  const Fd fd = open_regular(file);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) sdk::fail(MLPH_UNAVAILABLE, file.string() + ": cannot stat: " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes)
    sdk::fail(MLPH_DATA_LOSS, file.string() + ": " + std::to_string(st.st_size) + " bytes, more than a manifest may hold (" +
                                  std::to_string(kMaxManifestBytes) + ")");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {  // a file that shrank meanwhile ends early; one that grew is read as it was
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) sdk::fail(MLPH_DATA_LOSS, file.string() + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return parse_manifest(text, file.string());
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

void verify(const std::string& where, const ManifestEntry& entry, uint64_t bytes, uint32_t crc, bool check_crc) {
  if (bytes != entry.size)
    sdk::fail(MLPH_DATA_LOSS, where + ": " + std::to_string(bytes) + " bytes, expected " + std::to_string(entry.size));
  if (check_crc && crc != entry.crc32) {
    char text[96];
    std::snprintf(text, sizeof text, ": checksum mismatch (crc32 %08x, the manifest says %08x)", crc, entry.crc32);
    sdk::fail(MLPH_DATA_LOSS, where + text);
  }
}

uint64_t unpack_part(archive* a, const std::string& where, const std::vector<ManifestEntry>& entries, uint32_t parts,
                     uint32_t part, const std::function<bool(size_t)>& keep,
                     const std::function<std::unique_ptr<Sink>(size_t)>& create, const std::function<void(uint64_t)>& progress,
                     std::vector<char>& found) {
  const auto fail = [&](const std::string& what) { sdk::fail(MLPH_DATA_LOSS, where + ": " + what); };
  uint64_t largest = 1;
  for (const ManifestEntry& e : entries) largest = std::max(largest, e.size);
  std::vector<char> seen(entries.size()), buffer(static_cast<size_t>(std::min<uint64_t>(largest, 4 << 20)));
  archive_entry* entry = nullptr;
  int status;
  while ((status = archive_read_next_header(a, &entry)) == ARCHIVE_OK) {
    const char* path = archive_entry_pathname(entry);
    const std::string name = path ? path : "";
    const auto it = std::lower_bound(entries.begin(), entries.end(), name,
                                     [](const ManifestEntry& e, const std::string& n) { return e.name < n; });
    if (it == entries.end() || it->name != name) fail(shown(name) + " is not in the manifest");
    const auto i = static_cast<size_t>(it - entries.begin());  // from here on, `name` is a plain file name
    if (i % parts != part) fail(name + " belongs in another part");
    if (seen[i]++) fail(name + " is in the archive twice");
    if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry))
      fail(name + " is not a regular file in the archive");
    if (!archive_entry_size_is_set(entry)) fail(name + ": no size in the archive");
    if (archive_entry_size(entry) < 0 || static_cast<uint64_t>(archive_entry_size(entry)) != it->size)
      fail(name + ": " + std::to_string(archive_entry_size(entry)) + " bytes in the archive, the manifest says " +
           std::to_string(it->size));
    if (!keep(i)) continue;  // libarchive skips the data at the next header
    const std::unique_ptr<Sink> out = create(i);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    for (la_ssize_t n; (n = archive_read_data(a, buffer.data(), buffer.size())) != 0;) {
      if (n < 0) fail(name + ": " + archive_error_string(a));
      if (static_cast<uint64_t>(n) > it->size - bytes) fail(name + ": more data than the manifest's " + std::to_string(it->size) + " bytes");
      crc = crc32_update(crc, buffer.data(), static_cast<size_t>(n));
      out->write(buffer.data(), static_cast<size_t>(n));
      bytes += static_cast<uint64_t>(n);
      progress(static_cast<uint64_t>(n));
    }
    out->close();
    verify(where + ": " + name, *it, bytes, crc, true);
    found[i] = 1;
  }
  if (status != ARCHIVE_EOF) {
    const char* error = archive_error_string(a);
    fail(error ? error : "unreadable archive");
  }
  return static_cast<uint64_t>(archive_filter_bytes(a, -1));
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

Packed pack_split(const fs::path& split_dir, const fs::path& out_dir, uint32_t parts, int level) {
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(split_dir))
    if (item.is_regular_file() && item.path().filename() != kManifestName) files.push_back(item.path());
  std::sort(files.begin(), files.end());
  fs::create_directories(out_dir);
  parts = static_cast<uint32_t>(std::min<size_t>(parts, files.size()));  // no empty parts

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
  return {files.size(), parts};
}

}  // namespace mlph::stage
