#include "mlph/core/npz.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <limits>
#include <stdexcept>

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

// The zip format's fields are little-endian; so is every machine this runs on (static_assert below).
static_assert(std::endian::native == std::endian::little, "the .npz writer assumes a little-endian host");

void put16(std::string& b, uint16_t v) { b.append(reinterpret_cast<const char*>(&v), 2); }
void put32(std::string& b, uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); }

const char* numpy_type(MLPH_DType t) {
  switch (t) {
    case MLPH_DTYPE_F32: return "<f4";
    case MLPH_DTYPE_F64: return "<f8";
    case MLPH_DTYPE_F16: return "<f2";
    case MLPH_DTYPE_I8: return "|i1";
    case MLPH_DTYPE_I16: return "<i2";
    case MLPH_DTYPE_I32: return "<i4";
    case MLPH_DTYPE_I64: return "<i8";
    case MLPH_DTYPE_U8: return "|u1";
    case MLPH_DTYPE_BF16: break;
  }
  throw std::invalid_argument("numpy has no bfloat16");
}

// The .npy header (format 1.0): magic, version, the dict padded so the data starts 64-byte aligned.
std::string npy_header(MLPH_DType dtype, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3,) for one dim, (2, 3) for two, () for none
  if (shape.size() == 1) dims.pop_back();
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", numpy_type(dtype), dims);
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  put16(header, static_cast<uint16_t>(dict.size()));
  return header + dict;
}

}  // namespace

NpzWriter::NpzWriter(fs::path file) : file_(std::move(file)), temp_(file_.string() + ".tmp") {
  out_.open(temp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot write it", temp_.string()));
}

NpzWriter::~NpzWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ignored;
  fs::remove(temp_, ignored);
}

void NpzWriter::add(const std::string& name, MLPH_DType dtype, const std::vector<int64_t>& shape, const void* data) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  const std::string header = npy_header(dtype, shape);
  const uint64_t bytes = count * mlph_dtype_size(dtype), size = header.size() + bytes;
  const std::string member = name + ".npy";
  if (offset_ + 30 + member.size() + size > std::numeric_limits<uint32_t>::max())
    throw std::runtime_error(fmt::format("{}: more than 4 GiB, which needs zip64 (not written here)", file_.string()));
  uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(header.data()), static_cast<uInt>(header.size()));
  for (uint64_t done = 0; done < bytes;) {
    const auto chunk = static_cast<uInt>(std::min<uint64_t>(bytes - done, 1u << 30));
    crc = ::crc32(crc, static_cast<const Bytef*>(data) + done, chunk);
    done += chunk;
  }
  const Entry e{member, static_cast<uint32_t>(crc), static_cast<uint32_t>(size), static_cast<uint32_t>(offset_)};
  std::string local;  // local file header: stored (method 0), no data descriptor
  put32(local, 0x04034b50), put16(local, 20), put16(local, 0), put16(local, 0), put16(local, 0), put16(local, 0x21);
  put32(local, e.crc32), put32(local, e.size), put32(local, e.size), put16(local, static_cast<uint16_t>(member.size()));
  put16(local, 0);
  out_.write(local.data(), static_cast<std::streamsize>(local.size()));
  out_.write(member.data(), static_cast<std::streamsize>(member.size()));
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot write it", temp_.string()));
  offset_ += local.size() + member.size() + size;
  entries_.push_back(e);
}

void NpzWriter::finish() {
  std::string directory;
  for (const Entry& e : entries_) {
    put32(directory, 0x02014b50), put16(directory, 20), put16(directory, 20), put16(directory, 0);
    put16(directory, 0), put16(directory, 0), put16(directory, 0x21), put32(directory, e.crc32);
    put32(directory, e.size), put32(directory, e.size), put16(directory, static_cast<uint16_t>(e.name.size()));
    put16(directory, 0), put16(directory, 0), put16(directory, 0), put16(directory, 0), put32(directory, 0);
    put32(directory, e.offset);
    directory += e.name;
  }
  std::string end;
  put32(end, 0x06054b50), put16(end, 0), put16(end, 0), put16(end, static_cast<uint16_t>(entries_.size()));
  put16(end, static_cast<uint16_t>(entries_.size())), put32(end, static_cast<uint32_t>(directory.size()));
  put32(end, static_cast<uint32_t>(offset_)), put16(end, 0);
  out_.write(directory.data(), static_cast<std::streamsize>(directory.size()));
  out_.write(end.data(), static_cast<std::streamsize>(end.size()));
  out_.close();
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot write it", temp_.string()));
  fs::rename(temp_, file_);
  finished_ = true;
}

}  // namespace mlph::core
