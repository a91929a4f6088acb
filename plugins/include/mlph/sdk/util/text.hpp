// Text that came from a file (a header, a key, a string attribute) on its way into a message: it
// may hold terminal escapes, newlines or any byte, so it is quoted before anyone sees it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mlph::sdk {

// `text` between double quotes, printable ASCII kept, a quote and backslash escaped, every other
// byte written as \n, \t, \r or \xNN: one line, no control byte, whatever the input. Past
// `max_shown` bytes the rest is dropped with "..." after the closing quote.
inline std::string quoted(std::string_view text, size_t max_shown = 120) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : text.substr(0, max_shown)) {
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte > 0x7e) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
  if (text.size() > max_shown) out += "...";
  return out;
}

}  // namespace mlph::sdk
