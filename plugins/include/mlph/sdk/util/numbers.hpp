// Numbers from text that people and other programs wrote (a config, --set, plug-in options, another
// run's log): an integer goes straight into its final type and is refused, naming the key and the
// range, when it does not fit; a floating-point number must be finite. The core, the workloads'
// settings and every plug-in's options read numbers this way, so no value is narrowed on its way
// to a setting (a 32-bit cast once turned a batch of 4294967300 into 4).
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/text.hpp"

namespace mlph::sdk {
namespace detail {

enum class IntegerText { ok, not_integer, out_of_range };

// Decimal digits with an optional sign, and nothing else (no spaces, no exponent, no 0x).
template <std::integral T>
IntegerText read_integer(std::string_view text, T& out) {
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return IntegerText::not_integer;
  // The magnitude as the widest unsigned type, then the range of T with the sign (cmp_* compare
  // across signedness exactly).
  unsigned long long magnitude = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), magnitude).ec != std::errc()) return IntegerText::out_of_range;
  if (!negative) {
    if (std::cmp_greater(magnitude, std::numeric_limits<T>::max())) return IntegerText::out_of_range;
    out = static_cast<T>(magnitude);
    return IntegerText::ok;
  }
  if constexpr (std::is_unsigned_v<T>) {
    if (magnitude != 0) return IntegerText::out_of_range;
    out = 0;
    return IntegerText::ok;
  } else {
    // -magnitude >= min(T)  <=>  magnitude - 1 <= max(T)
    if (std::cmp_greater(magnitude - 1, std::numeric_limits<T>::max())) return IntegerText::out_of_range;
    out = static_cast<T>(-static_cast<T>(magnitude - 1) - 1);
    return IntegerText::ok;
  }
}

// "'key' = "text"" for a message: the text is someone's input, shown quoted (sdk::quoted).
inline std::string key_and_text(const std::string& key, std::string_view text) { return "'" + key + "' = " + quoted(text); }

}  // namespace detail

// The integer `text` states, if it is one and fits T.
template <std::integral T>
std::optional<T> integer_value(std::string_view text) {
  T v{};
  if (detail::read_integer(text, v) != detail::IntegerText::ok) return std::nullopt;
  return v;
}

// The integer `text` states, within [min, max] (by default all of T). Otherwise throws
// MLPH_INVALID_ARGUMENT: "'key' = "text" is not an integer" or "'key' = "text" is out of range:
// must be an integer from min to max".
template <std::integral T>
T parse_integer(std::string_view text, const std::string& key, T min = std::numeric_limits<T>::min(),
                T max = std::numeric_limits<T>::max()) {
  T v{};
  const detail::IntegerText read = detail::read_integer(text, v);
  if (read == detail::IntegerText::not_integer) fail(MLPH_INVALID_ARGUMENT, detail::key_and_text(key, text) + " is not an integer");
  if (read == detail::IntegerText::out_of_range || v < min || v > max)
    fail(MLPH_INVALID_ARGUMENT, detail::key_and_text(key, text) + " is out of range: must be an integer from " +
                                    std::to_string(min) + " to " + std::to_string(max));
  return v;
}

// The boolean `text` states, if it states one: 1, true, True, yes or 0, false, False, no. The one list
// of spellings: the core's configuration booleans (MLPH_TYPE_BOOL) and plug-in options alike
// (Options::get_bool), so a value the configuration accepts means the same to the plug-in.
inline std::optional<bool> bool_value(std::string_view text) {
  if (text == "1" || text == "true" || text == "True" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "False" || text == "no") return false;
  return std::nullopt;
}

// The finite number `text` states (decimal or exponent notation, an optional sign), if it is one.
inline std::optional<double> finite_value(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
    if (text.starts_with('-')) return std::nullopt;  // "+-3"
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A finite number, or a throw: "'key' = "text" is not a finite number" (inf, nan and 1e400 are not).
inline double parse_finite(std::string_view text, const std::string& key) {
  const std::optional<double> v = finite_value(text);
  if (!v) fail(MLPH_INVALID_ARGUMENT, detail::key_and_text(key, text) + " is not a finite number");
  return *v;
}

}  // namespace mlph::sdk
