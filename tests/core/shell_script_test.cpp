// Issue 36, the classes: every file written for a shell or a scheduler goes through ShellScript, which
// quotes every word and refuses control characters; every name that becomes a path is a plain name.
// Property tests over seeded random text: what bash reads back is the word written, whatever it
// holds; a name is plain exactly when it is one path component that needs no quoting.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "mlph/core/shell_script.hpp"

using namespace mlph::core;
namespace fs = std::filesystem;

namespace {

// Random text from bytes bash and Slurm treat specially, letters, and (when `controls`) the controls.
std::string random_text(std::mt19937& rng, bool controls) {
  static const std::string special = " \t'\"\\$`!*?[]{}()<>|&;#~=%@,:./-_+\n\r\x01\x1b\x7f";
  static const std::string letters = "abcXYZ019";
  std::uniform_int_distribution<size_t> length(0, 12), pick(0, 99);
  std::string text;
  for (size_t n = length(rng); n-- > 0;) {
    const size_t p = pick(rng);
    const std::string& from = p < 50 ? special : letters;
    char c = from[pick(rng) % from.size()];
    if (!controls && control_character(std::string_view(&c, 1)) != std::string::npos) c = 'q';
    text += c;
  }
  if (pick(rng) < 10) text += "\xc3\xa9";  // UTF-8 passes through
  return text;
}

std::string run_bash(const fs::path& script) {
  std::string out;
  FILE* pipe = popen(("bash " + script.string() + " 2>&1").c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  return out;
}

}  // namespace

// 400 random words as arguments of printf in one script: bash prints each back exactly, one per
// line (the words hold no newline), and the script holds no control character.
TEST(ShellScript, EveryWordReadsBackAsWrittenWhateverItHolds) {
  std::mt19937 rng(36);
  std::vector<std::string> words;
  ShellScript script;
  script.code("set -u");
  for (int i = 0; i < 400; ++i) {
    words.push_back(random_text(rng, false));
    script.command({ShellScript::value("printf"), ShellScript::value("%s\\n"), ShellScript::value(words.back())});
    script.comment(words.back());  // a comment is one line, whatever it says
  }
  EXPECT_EQ(script.text().find_first_of("\t\r\x01\x1b\x7f"), std::string::npos) << "only the lines' newlines";
  const fs::path file = fs::path(testing::TempDir()) / "shell-script-words.sh";
  script.write(file);
  EXPECT_NE(fs::status(file).permissions() & fs::perms::owner_exec, fs::perms::none);
  std::string expected;
  for (const std::string& w : words) expected += w + "\n";
  EXPECT_EQ(run_bash(file), expected);
}

// A control character anywhere (a newline in a system name would start a command) is refused, in a
// word, a comment, a directive and the script's own code; so is a directive's blank or quote.
TEST(ShellScript, ControlCharactersAreRefusedEverywhere) {
  std::mt19937 rng(7);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_text(rng, true);
    const bool control = text.find_first_of(std::string("\n\r\t\x01\x1b\x7f")) != std::string::npos;
    ShellScript script;
    EXPECT_EQ(control, control_character(text) != std::string::npos) << text;
    if (control) {
      ++refused;
      EXPECT_THROW(shell_word(text), UnsafeText);
      EXPECT_THROW(script.comment(text), UnsafeText);
      EXPECT_THROW(script.command({ShellScript::value(text)}), UnsafeText);
      EXPECT_THROW(script.code(text), UnsafeText);
      EXPECT_THROW(script.directive("SBATCH", "--output", text), UnsafeText);
      EXPECT_EQ(script.text(), "#!/bin/bash\n") << "nothing written";
    } else {
      EXPECT_NO_THROW(script.comment(text));
    }
  }
  EXPECT_GT(refused, 100);
  ShellScript s;
  EXPECT_THROW(s.directive("SBATCH", "--output", "/a b/out"), UnsafeText);
  EXPECT_THROW(s.directive("SBATCH", "--output", "x\"y"), UnsafeText);
  s.directive("SBATCH", "--output", "/a/b-%A_%a.out");
  EXPECT_EQ(s.text(), "#!/bin/bash\n#SBATCH --output=/a/b-%A_%a.out\n");
}

// Plain exactly when: one path component of its own (not ".", "..", no '/'), no option, and the
// shell leaves it as it is. Random text, then the boundary cases by hand.
TEST(PlainName, IsOnePathComponentThatNeedsNoQuoting) {
  std::mt19937 rng(1);
  int plain = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string name = random_text(rng, true);
    const bool expected = !name.empty() && name[0] != '.' && name[0] != '-' &&
                          name.find_first_not_of("abcXYZ019._-+") == std::string::npos;
    EXPECT_EQ(is_plain_name(name), expected) << name;
    if (!is_plain_name(name)) {
      EXPECT_THROW(require_plain_name(name, "the system name"), UnsafeText) << name;
      continue;
    }
    ++plain;
    EXPECT_EQ(fs::path(name).filename(), fs::path(name));
    EXPECT_EQ(shell_word(name), name);
  }
  EXPECT_GT(plain, 50);
  for (const char* bad : {"", ".", "..", "../x", "a/b", "/abs", ".hidden", "-rf", "a b", "a\nb", "sys$(id)", "~"})
    EXPECT_FALSE(is_plain_name(bad)) << bad;
  for (const char* good : {"box1", "DGX-A100_n8", "fugaku.2", "a+b", "x"}) EXPECT_TRUE(is_plain_name(good)) << good;
  EXPECT_FALSE(is_plain_name(std::string(129, 'a')));
  EXPECT_TRUE(is_plain_name(std::string(128, 'a')));
  try {
    require_plain_name("box\n1", "the system name (--system)");
    ADD_FAILURE();
  } catch (const UnsafeText& e) {
    EXPECT_NE(std::string(e.what()).find("the system name (--system) 'box\\n1' is not a plain name"), std::string::npos)
        << e.what();
  }
}
