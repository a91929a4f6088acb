// Streaming gzip inflation for storage/stage's `inflate` option: the compressed bytes go in as
// they are read and come out inflated through one fixed buffer, so a file of any size inflates in
// constant memory. Every member of a multi-member stream is inflated, as `gzip -d` does.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlph::stage {

// Whether `head` (a file's first two bytes) is gzip's magic number, 1f 8b.
inline bool is_gzip_magic(const unsigned char* head) { return head[0] == 0x1f && head[1] == 0x8b; }

class Gunzip {
 public:
  explicit Gunzip(std::string source);  // `source` names the file in errors
  ~Gunzip();
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  // Inflates the next `bytes` of the stream, handing what they inflate to to `emit` (in pieces of
  // at most the buffer's size). Corrupt data fails (MLPH_DATA_LOSS) naming the source and zlib's
  // message.
  void feed(const char* data, size_t bytes, const std::function<void(const char*, size_t)>& emit);
  // The stream must have ended where a member ends (CRC-32 and length checked by zlib), else it
  // fails naming the source: "truncated".
  void finish() const;

 private:
  std::string source_;
  z_stream z_{};
  std::vector<char> out_;
  bool member_ended_ = false;  // the last byte fed ended a member (a further one may follow)
};

}  // namespace mlph::stage
