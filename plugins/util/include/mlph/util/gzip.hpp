// GZIP inflation for the plug-ins that read GZIP data (storage/stage's inflate=1, CosmoFlow's GZIP
// TFRecords): one implementation of the engines, the size estimate and the size bound.
//   inflate(): a whole file in memory, with libdeflate (2-3x zlib's speed) or zlib (the same
//   contract; kept to measure one against the other, and for the messages of a file libdeflate refuses).
//   Inflater: bytes that come in pieces (a file too large to hold, a member of an archive), zlib.
// Both inflate every member of a multi-member file, as `gzip -d` does.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlph::gzip {

// Bad data, in one line: what() is "<name>: <problem>"; name and problem are kept apart for callers
// that rethrow in their own error type.
class Error : public std::runtime_error {
 public:
  Error(const std::string& name, const std::string& problem, bool too_large = false)
      : std::runtime_error(name + ": " + problem), name_(name), problem_(problem), too_large_(too_large) {}
  const std::string& name() const { return name_; }
  const std::string& problem() const { return problem_; }
  // The data may be good: it inflates to more than the caller's bound.
  bool too_large() const { return too_large_; }

 private:
  std::string name_, problem_;
  bool too_large_;
};

// Whether `data` starts with gzip's magic number, 1f 8b.
bool is_gzip(std::span<const std::byte> data);

// What a gzip file's trailer says it inflates to (ISIZE, the last member's size mod 2^32), from its
// last 4 bytes: exact for the usual one-member file under 4 GiB, an estimate otherwise.
uint64_t trailer_size(std::span<const std::byte, 4> last_bytes);

// The output buffer to start from for `data`: the trailer's size, no less than the input, capped
// by what deflate can expand to (1032x) and by `max_bytes`, so a forged trailer cannot demand a
// huge allocation.
size_t first_guess(std::span<const std::byte> data, size_t max_bytes);

enum class Engine { libdeflate, zlib };

// Inflates a whole gzip file (every member). Throws Error naming `name` for a corrupt or truncated
// stream, for trailing bytes that are no gzip member, and for a file that inflates to more than
// `max_bytes` (found before more than max_bytes + 1 bytes are allocated). std::bad_alloc escapes.
// libdeflate refuses a bad stream without saying why: the file is then inflated by zlib for the
// message, so both engines name the same problem.
std::vector<std::byte> inflate(std::span<const std::byte> data, const std::string& name,
                               size_t max_bytes = std::numeric_limits<size_t>::max(), Engine engine = Engine::libdeflate);

// Streaming inflation (zlib) through one fixed buffer: constant memory whatever the size.
class Inflater {
 public:
  explicit Inflater(std::string name);  // `name` names the file in errors
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Inflates the next `bytes` of the stream, handing the output to `emit` in pieces of at most
  // 1 MiB. Corrupt data throws Error ("cannot inflate: <zlib's message>").
  void feed(const std::byte* data, size_t bytes, const std::function<void(const std::byte*, size_t)>& emit);
  // The stream must have ended where a member ends (CRC-32 and length checked by zlib), else Error
  // "cannot inflate: truncated (the gzip stream ends early)".
  void finish() const;

 private:
  std::string name_;
  z_stream z_{};
  std::vector<std::byte> out_;
  bool member_ended_ = false;  // the last byte fed ended a member (a further one may follow)
};

}  // namespace mlph::gzip
