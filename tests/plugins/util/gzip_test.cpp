// plugins/util's gzip inflater, the one storage/stage and the CosmoFlow readers share: libdeflate and
// zlib give the same bytes and the same one-line errors, every member of a multi-member file is
// inflated, the bound holds, and the streaming inflater agrees with both.
#include "mlph/util/gzip.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/gzip.hpp"  // the CosmoFlow data layer's gzip writer, to make the test files

namespace mlph::gzip {
namespace {

using Bytes = std::vector<std::byte>;

Bytes pattern(size_t n, uint32_t seed) {
  Bytes out(n);
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<std::byte>((x >> 24) % 7);  // compressible, not trivially
  }
  return out;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string error_of(const Bytes& data, size_t max_bytes, Engine engine) {
  try {
    inflate(data, "f.gz", max_bytes, engine);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Bytes kFirst = pattern(1 << 20, 1), kSecond = pattern(300000, 2), kThird = pattern(5, 3);
const Bytes kFile = concat({cosmoflow::gzip(kFirst), cosmoflow::gzip(kSecond), cosmoflow::gzip(kThird)});
const Bytes kWhole = concat({kFirst, kSecond, kThird});

// Three members, the trailer naming the last one's 5 bytes: libdeflate outgrows its first guess
// twice over and still inflates all three, as zlib does.
TEST(Gzip, BothEnginesInflateEveryMember) {
  EXPECT_EQ(inflate(kFile, "f.gz", SIZE_MAX, Engine::libdeflate), kWhole);
  EXPECT_EQ(inflate(kFile, "f.gz", SIZE_MAX, Engine::zlib), kWhole);
  EXPECT_EQ(inflate(kFile, "f.gz", kWhole.size(), Engine::libdeflate), kWhole) << "exactly the bound";
}

TEST(Gzip, TheBoundStopsBothEngines) {
  for (const Engine engine : {Engine::libdeflate, Engine::zlib}) {
    try {
      inflate(kFile, "f.gz", kWhole.size() - 1, engine);
      ADD_FAILURE() << "inflated past the bound";
    } catch (const Error& e) {
      EXPECT_TRUE(e.too_large());
      EXPECT_EQ(std::string(e.what()), "f.gz: the gzip stream inflates to more than " + std::to_string(kWhole.size() - 1) +
                                           " bytes, the most this data can hold");
    }
  }
}

// libdeflate says only "bad data": the messages are zlib's, the same from both engines.
TEST(Gzip, BadFilesAreNamedAlikeByBothEngines) {
  Bytes corrupt = kFile;
  for (size_t i = 100; i < 164; ++i) corrupt[i] = ~corrupt[i];
  const Bytes truncated(kFile.begin(), kFile.begin() + static_cast<ptrdiff_t>(kFile.size() / 2));
  const Bytes trailing = concat({kFile, Bytes(3, std::byte{7})});
  const std::vector<std::pair<Bytes, std::string>> cases{{corrupt, "f.gz: gzip stream is corrupt (zlib: "},
                                                          {truncated, "f.gz: gzip stream is truncated"},
                                                          {Bytes(kFile.begin(), kFile.begin() + 10), "f.gz: gzip stream is truncated"},
                                                          {trailing, "f.gz: 3 bytes of trailing data after the gzip stream"}};
  for (const auto& [data, message] : cases) {
    const std::string fast = error_of(data, 4 * kWhole.size(), Engine::libdeflate);
    EXPECT_EQ(fast.rfind(message, 0), 0u) << fast;
    EXPECT_EQ(fast, error_of(data, 4 * kWhole.size(), Engine::zlib));
  }
}

// A forged trailer cannot ask for more than deflate can expand to, nor past the bound.
TEST(Gzip, TheFirstGuessIsTheTrailerCapped) {
  Bytes forged = cosmoflow::gzip(kThird);
  EXPECT_EQ(first_guess(forged, SIZE_MAX), forged.size()) << "5 bytes inflated: no less than the input";
  for (size_t i = forged.size() - 4; i < forged.size(); ++i) forged[i] = std::byte{0xff};
  EXPECT_EQ(trailer_size(std::span(forged).last<4>()), 0xffffffffu);
  EXPECT_EQ(first_guess(forged, SIZE_MAX), forged.size() * 1032);
  EXPECT_EQ(first_guess(forged, 100), 100u);
}

TEST(Gzip, TheStreamingInflaterAgreesPieceByPiece) {
  Bytes out;
  Inflater z("f.gz");
  for (size_t at = 0; at < kFile.size(); at += 4099)
    z.feed(kFile.data() + at, std::min<size_t>(4099, kFile.size() - at),
           [&](const std::byte* p, size_t n) { out.insert(out.end(), p, p + n); });
  z.finish();
  EXPECT_EQ(out, kWhole);
  Inflater cut("c.gz");
  cut.feed(kFile.data(), kFile.size() / 2, [](const std::byte*, size_t) {});
  try {
    cut.finish();
    ADD_FAILURE() << "a truncated stream finished";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "c.gz: cannot inflate: truncated (the gzip stream ends early)");
  }
}

}  // namespace
}  // namespace mlph::gzip
