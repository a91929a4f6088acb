#include "mlph/core/npz.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <limits>
#include <optional>
#include <stdexcept>

#include "mlph/core/tensor_bytes.hpp"

namespace mlph::core {
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

NpzWriter::NpzWriter(AtomicFile file) : out_(std::move(file)) {}

void NpzWriter::add(const std::string& name, MLPH_DType dtype, const std::vector<int64_t>& shape, const void* data) {
  const std::string header = npy_header(dtype, shape);
  const std::string member = name + ".npy";
  constexpr uint64_t kZipLimit = std::numeric_limits<uint32_t>::max();
  const std::optional<uint64_t> bytes = tensor_bytes(shape, dtype);
  if (!bytes || *bytes > kZipLimit || offset_ + 30 + member.size() + header.size() + *bytes > kZipLimit)
    throw std::runtime_error(fmt::format("{}: array '{}' makes it more than 4 GiB, which needs zip64 (not written here)",
                                         out_.target().string(), name));
  const uint64_t size = header.size() + *bytes;
  uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(header.data()), static_cast<uInt>(header.size()));
  for (uint64_t done = 0; done < *bytes;) {
    const auto chunk = static_cast<uInt>(std::min<uint64_t>(*bytes - done, 1u << 30));
    crc = ::crc32(crc, static_cast<const Bytef*>(data) + done, chunk);
    done += chunk;
  }
  const Entry e{member, static_cast<uint32_t>(crc), static_cast<uint32_t>(size), static_cast<uint32_t>(offset_)};
  std::string local;  // local file header: stored (method 0), no data descriptor
  put32(local, 0x04034b50), put16(local, 20), put16(local, 0), put16(local, 0), put16(local, 0), put16(local, 0x21);
  put32(local, e.crc32), put32(local, e.size), put32(local, e.size), put16(local, static_cast<uint16_t>(member.size()));
  put16(local, 0);
  out_.write(local);
  out_.write(member);
  out_.write(header);
  out_.write(data, *bytes);
  offset_ += local.size() + member.size() + size;
  entries_.push_back(e);
}

void NpzWriter::finish() {
  if (entries_.size() > std::numeric_limits<uint16_t>::max())
    throw std::runtime_error(fmt::format("{}: {} arrays, more than zip's 65535 without zip64 (not written here)",
                                         out_.target().string(), entries_.size()));
  std::string directory;
  for (const Entry& e : entries_) {
    put32(directory, 0x02014b50), put16(directory, 20), put16(directory, 20), put16(directory, 0);
    put16(directory, 0), put16(directory, 0), put16(directory, 0x21), put32(directory, e.crc32);
    put32(directory, e.size), put32(directory, e.size), put16(directory, static_cast<uint16_t>(e.name.size()));
    put16(directory, 0), put16(directory, 0), put16(directory, 0), put16(directory, 0), put32(directory, 0);
    put32(directory, e.offset);
    directory += e.name;
  }
  if (offset_ + directory.size() > std::numeric_limits<uint32_t>::max())
    throw std::runtime_error(fmt::format("{}: more than 4 GiB, which needs zip64 (not written here)", out_.target().string()));
  std::string end;
  put32(end, 0x06054b50), put16(end, 0), put16(end, 0), put16(end, static_cast<uint16_t>(entries_.size()));
  put16(end, static_cast<uint16_t>(entries_.size())), put32(end, static_cast<uint32_t>(directory.size()));
  put32(end, static_cast<uint32_t>(offset_)), put16(end, 0);
  out_.write(directory);
  out_.write(end);
  out_.commit();
}

}  // namespace mlph::core
