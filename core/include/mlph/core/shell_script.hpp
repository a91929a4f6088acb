// What the project writes for a shell or a scheduler (a campaign's Slurm job array), and the names
// that become paths (a submission tree's org and system). One writer quotes every word it is given,
// so that no value (a system name, a path, a --set) can end a comment, an #SBATCH line or a command;
// and it refuses control characters outright, for a newline ends a line wherever it stands.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mlph::core {

// A name or word that cannot be written where it was to go: one line naming it.
class UnsafeText : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A plain name: 1 to 128 of [A-Za-z0-9._+-], not starting with '.' or '-'. It is one path component
// (never "." or "..", never a directory), needs no quoting in a shell, and reads as no option.
bool is_plain_name(std::string_view name);
// `name` itself, or UnsafeText: "<what> '<name, escaped>' is not a plain name (...)".
const std::string& require_plain_name(const std::string& name, std::string_view what);

// The first control character (0x00-0x1f, 0x7f) in `text`, or npos.
size_t control_character(std::string_view text);

// A word for bash: as it is when it needs no quotes, else in single quotes. UnsafeText for a control
// character.
std::string shell_word(std::string_view word);

// A bash script, line by line. Words are quoted (shell_word); `own` words are the program's own shell text
// (variables, expansions) and is written as it is, after the same refusal of control characters.
class ShellScript {
 public:
  // A command line's piece: a value to quote, or the script's own code.
  struct Word {
    std::string text;
    bool code = false;
  };
  static Word value(std::string text) { return {std::move(text), false}; }
  static Word own(std::string text) { return {std::move(text), true}; }

  ShellScript& comment(std::string_view text);  // "# text"
  // "#<scheduler> <option>=<value>" (#SBATCH --output=...): the value must hold no blank, quote or
  // backslash, for the scheduler reads these lines with its own rules, not bash's.
  ShellScript& directive(std::string_view scheduler, std::string_view option, std::string_view value);
  ShellScript& command(const std::vector<Word>& words);
  ShellScript& code(std::string_view line);

  const std::string& text() const { return text_; }
  // Written aside and renamed into place, executable by its owner and group.
  void write(const std::filesystem::path& file) const;

 private:
  std::string text_ = "#!/bin/bash\n";
};

}  // namespace mlph::core
