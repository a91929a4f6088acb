#include "mlph/core/shell_script.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/text_input.hpp"

namespace mlph::core {
namespace {

constexpr size_t kMaxNameLength = 128;

bool name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == '+';
}

void refuse_control_characters(std::string_view text, std::string_view what) {
  if (const size_t at = control_character(text); at != std::string_view::npos)
    throw UnsafeText(fmt::format("{} \"{}\" holds a control character (at byte {}): refused in a script", what,
                                 escaped(std::string(text), 80), at));
}

}  // namespace

bool is_plain_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameLength && name[0] != '.' && name[0] != '-' &&
         std::all_of(name.begin(), name.end(), name_character);
}

const std::string& require_plain_name(const std::string& name, std::string_view what) {
  if (!is_plain_name(name))
    throw UnsafeText(fmt::format("{} '{}' is not a plain name (1 to {} of letters, digits, '.', '_', '-', '+', not "
                                 "starting with '.' or '-'): it becomes a directory and a file name",
                                 what, escaped(name, 80), kMaxNameLength));
  return name;
}

size_t control_character(std::string_view text) {
  const auto at = std::find_if(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  return at == text.end() ? std::string_view::npos : static_cast<size_t>(at - text.begin());
}

std::string shell_word(std::string_view word) {
  refuse_control_characters(word, "the word");
  // No '=' among them: a first word "a=b" would be an assignment.
  constexpr std::string_view bare = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+/.,:@%";
  if (!word.empty() && word.find_first_not_of(bare) == std::string_view::npos) return std::string(word);
  std::string quoted = "'";
  for (char ch : word) quoted += ch == '\'' ? std::string_view("'\\''") : std::string_view(&ch, 1);
  return quoted + "'";
}

ShellScript& ShellScript::comment(std::string_view text) {
  refuse_control_characters(text, "a comment");
  text_ += fmt::format("# {}\n", text);
  return *this;
}

ShellScript& ShellScript::directive(std::string_view scheduler, std::string_view option, std::string_view value) {
  refuse_control_characters(value, fmt::format("#{} {}", scheduler, option));
  if (value.find_first_of(" \t'\"\\") != std::string_view::npos || value.empty())
    throw UnsafeText(fmt::format("#{} {}: \"{}\" is empty or holds a blank, quote or backslash, which the scheduler "
                                 "would read its own way",
                                 scheduler, option, escaped(std::string(value), 80)));
  text_ += fmt::format("#{} {}={}\n", scheduler, option, value);
  return *this;
}

ShellScript& ShellScript::command(const std::vector<Word>& words) {
  std::string line;
  for (const Word& w : words) {
    if (w.code) refuse_control_characters(w.text, "the script's code");
    line += (line.empty() ? "" : " ") + (w.code ? w.text : shell_word(w.text));
  }
  text_ += line + "\n";
  return *this;
}

ShellScript& ShellScript::code(std::string_view line) {
  refuse_control_characters(line, "the script's code");
  text_ += std::string(line) + "\n";
  return *this;
}

void ShellScript::write(const std::filesystem::path& file) const {
  write_whole_file(file, text_);
  std::filesystem::permissions(file, std::filesystem::perms::owner_exec | std::filesystem::perms::group_exec,
                               std::filesystem::perm_options::add);
}

}  // namespace mlph::core
