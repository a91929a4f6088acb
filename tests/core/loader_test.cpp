#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../integration/cli.hpp"
#include "mlph/core/plugin_loader.hpp"

using namespace mlph::core;
namespace fs = std::filesystem;

namespace {

std::string load_error(const std::string& name, MLPH_PluginKind kind = MLPH_KIND_BACKEND) {
  PluginLoader loader({MLPH_TEST_PLUGIN_DIR});
  try {
    loader.load(kind, name);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST(PluginLoader, LoadsTheBuiltPlugins) {
  PluginLoader loader({MLPH_PLUGIN_DIR});
  LoadedPlugin comms = loader.load(MLPH_KIND_COMMS, "local");
  EXPECT_STREQ(comms.descriptor->name, "local");
  EXPECT_EQ(comms.descriptor->abi_major, static_cast<uint32_t>(MLPH_ABI_MAJOR));
  EXPECT_EQ(comms.file_hash.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(comms.file_hash.size(), std::string("fnv1a64:").size() + 16);
  LoadedPlugin storage = loader.load(MLPH_KIND_STORAGE, "posix");
  EXPECT_NE(storage.api<MLPH_StorageApi>()->read, nullptr);
}

TEST(PluginLoader, MissingPluginNamesFileAndSearchPath) {
  const std::string error = load_error("nosuch");
  EXPECT_NE(error.find("backend plug-in 'nosuch' not found"), std::string::npos) << error;
  EXPECT_NE(error.find("libmlph-backend-nosuch.so"), std::string::npos) << error;
  EXPECT_NE(error.find("test-plugins"), std::string::npos) << error;
}

TEST(PluginLoader, NoEntrySymbol) {
  const std::string error = load_error("noentry");
  EXPECT_NE(error.find("libmlph-backend-noentry.so: not an mlperf-hpc plug-in: it exports no 'mlph_plugin' symbol"),
            std::string::npos)
      << error;
}

TEST(PluginLoader, WrongAbiMajor) {
  const std::string error = load_error("wrongabi");
  const std::string speaks = "speaks ABI 1." + std::to_string(MLPH_ABI_MINOR);
  EXPECT_NE(error.find("built for plug-in ABI 2." + std::to_string(MLPH_ABI_MINOR) + ", but this mlperf-run " + speaks),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("rebuild the plug-in against ABI 1"), std::string::npos) << error;
}

TEST(PluginLoader, WrongKind) {
  const std::string error = load_error("wrongkind");
  EXPECT_NE(error.find("is a comms plug-in, expected a backend plug-in"), std::string::npos) << error;
}

TEST(PluginLoader, TableTooSmall) {
  const std::string error = load_error("smalltable");
  EXPECT_NE(error.find("backend function table is 32 bytes, ABI 1.0 requires at least 88"), std::string::npos)
      << error;
}

TEST(PluginLoader, RequiredFunctionMissing) {
  const std::string error = load_error("nullfn");
  EXPECT_NE(error.find("backend table lacks the required function 'train_step'"), std::string::npos) << error;
}

TEST(PluginLoader, ErrorsAreOneLine) {
  for (const char* name : {"noentry", "wrongabi", "wrongkind", "smalltable", "nullfn", "nosuch"})
    EXPECT_EQ(load_error(name).find('\n'), std::string::npos) << name;
}

TEST(PluginLoader, ScanReportsBrokenLibrariesWithoutThrowing) {
  PluginLoader loader({MLPH_TEST_PLUGIN_DIR});
  // The five broken libraries, plus five loadable test backends: the conformance suite's faulty
  // one, the tracing one and its ABI 1.3 build, one built against ABI 1.1 (an older minor loads)
  // and the crashing one; the two linear-regression test workloads, one of them built as ABI 1.2;
  // and the stalling storage; the emulated device's backend and (built with MPI) its comms.
  const auto entries = loader.scan();
  const bool emulated_comms = fs::exists(fs::path(MLPH_TEST_PLUGIN_DIR) / "libmlph-comms-emulated.so");
  ASSERT_EQ(entries.size(), emulated_comms ? 15u : 14u);
  for (const ScanEntry& e : entries) {
    const std::string file = e.file.filename().string();
    const bool loadable = file == "libmlph-backend-faulty.so" || file == "libmlph-backend-tracing.so" ||
                          file == "libmlph-backend-tracing-abi13.so" || file == "libmlph-backend-abi11.so" ||
                          file == "libmlph-backend-crashing.so" || file == "libmlph-workload-linreg.so" ||
                          file == "libmlph-workload-linreg-abi12.so" || file == "libmlph-storage-stalling.so" ||
                          file == "libmlph-backend-emulated.so" || file == "libmlph-comms-emulated.so";
    EXPECT_EQ(e.ok, loadable) << e.file;
    EXPECT_EQ(e.error.empty(), loadable) << e.file;
  }
}

// ---- which files the loader trusts: nobody but their owner (this user or root) can change them ----

namespace {

const fs::path kNoEntry = fs::path(MLPH_TEST_PLUGIN_DIR) / "libmlph-backend-noentry.so";

// A directory of this test's own under $TMPDIR, with `mode`, holding a copy of the noentry library
// (whose initializer leaves a mark) as libmlph-backend-noentry.so.
class TrustDir {
 public:
  explicit TrustDir(const std::string& name, mode_t mode = 0755)
      : root_(fresh_dir("trust-" + name + "-" + std::to_string(::getpid()))), dir_(root_ / "plugins") {
    fs::create_directories(dir_);
    fs::copy_file(kNoEntry, library());
    ::chmod(library().c_str(), 0644);
    ::chmod(dir_.c_str(), mode);
    ::setenv("MLPH_TEST_INITIALIZER_MARK", mark().c_str(), 1);
  }
  ~TrustDir() {
    ::unsetenv("MLPH_TEST_INITIALIZER_MARK");
    ::unsetenv("MLPERF_PLUGIN_TRUST");
    fs::remove_all(root_);
  }
  const fs::path& root() const { return root_; }
  const fs::path& dir() const { return dir_; }
  fs::path library() const { return dir_ / "libmlph-backend-noentry.so"; }
  fs::path mark() const { return root_ / "initializer-ran"; }
  bool initializer_ran() const { return fs::exists(mark()); }

  // The loader's error for the library (through load(), as mlperf-run finds it).
  std::string load_error() const {
    try {
      PluginLoader({dir_}).load(MLPH_KIND_BACKEND, "noentry");
    } catch (const LoadError& e) {
      return e.what();
    }
    return "(loaded)";
  }

 private:
  static fs::path fresh_dir(const std::string& name) { return mlph::test::fresh_dir(name); }
  fs::path root_, dir_;
};

constexpr const char* kNoEntryError = "not an mlperf-hpc plug-in: it exports no 'mlph_plugin' symbol";

}  // namespace

TEST(PluginTrust, AWorldWritableDirectoryIsRefusedBeforeAnyOfItsCodeRuns) {
  TrustDir t("world", 0777);
  const std::string error = t.load_error();
  EXPECT_NE(error.find(t.library().string() + ": not loaded: " + t.dir().string() +
                       " is writable by every user (mode 0777)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("MLPERF_PLUGIN_TRUST=all"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_FALSE(t.initializer_ran()) << "the library was loaded before it was refused";

  // The same library from a directory only its owner can write: loaded (its initializer runs), then
  // refused by the validation that needs its code.
  ::chmod(t.dir().c_str(), 0755);
  EXPECT_NE(t.load_error().find(kNoEntryError), std::string::npos);
  EXPECT_TRUE(t.initializer_ran());
}

TEST(PluginTrust, AFileWritableByOthersIsRefused) {
  TrustDir t("file");
  ::chmod(t.library().c_str(), 0666);
  const std::string error = t.load_error();
  EXPECT_NE(error.find(t.library().string() + " is writable by every user (mode 0666)"), std::string::npos) << error;
  EXPECT_FALSE(t.initializer_ran());
}

TEST(PluginTrust, ADirectoryAboveWritableByOthersIsRefusedUnlessSticky) {
  TrustDir t("above");
  ::chmod(t.root().c_str(), 0777);  // anyone could rename plugins/ and put another in its place
  const std::string error = t.load_error();
  EXPECT_NE(error.find(t.root().string() + " is writable by every user (mode 0777)"), std::string::npos) << error;
  EXPECT_FALSE(t.initializer_ran());

  ::chmod(t.root().c_str(), 01777);  // sticky, as /tmp: only plugins/' owner may rename or remove it
  EXPECT_NE(t.load_error().find(kNoEntryError), std::string::npos);
  EXPECT_TRUE(t.initializer_ran());
}

TEST(PluginTrust, AStickyPluginDirectoryIsStillRefused) {
  TrustDir t("sticky", 01777);  // anyone may add a library of their own to it
  EXPECT_NE(t.load_error().find("is writable by every user (mode 1777)"), std::string::npos);
  EXPECT_FALSE(t.initializer_ran());
}

TEST(PluginTrust, FilesOfAnotherUserOrWritableByAForeignGroupAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files away";
  TrustDir t("owner");
  ASSERT_EQ(::chown(t.dir().c_str(), 12345, 12345), 0);
  EXPECT_NE(t.load_error().find(t.dir().string() + " is owned by another user (uid 12345)"), std::string::npos);
  ASSERT_EQ(::chown(t.dir().c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(t.library().c_str(), 0, 12345), 0);
  ::chmod(t.library().c_str(), 0664);
  EXPECT_NE(t.load_error().find(t.library().string() + " is writable by its group (gid 12345, mode 0664)"),
            std::string::npos);
  EXPECT_FALSE(t.initializer_ran());
}

TEST(PluginTrust, ALinkIsJudgedByWhatItPointsTo) {
  TrustDir untrusted("link-target", 0777), trusted("link");
  fs::remove(trusted.library());
  fs::create_symlink(untrusted.library(), trusted.library());
  const std::string error = trusted.load_error();
  EXPECT_NE(error.find(untrusted.library().string() + ": not loaded: " + untrusted.dir().string()), std::string::npos)
      << error;
  EXPECT_FALSE(untrusted.initializer_ran());
}

TEST(PluginTrust, MlperfPluginTrustAllLoadsAnyway) {
  TrustDir t("all", 0777);
  ::setenv("MLPERF_PLUGIN_TRUST", "all", 1);
  EXPECT_NE(t.load_error().find(kNoEntryError), std::string::npos);
  EXPECT_TRUE(t.initializer_ran());
  ::setenv("MLPERF_PLUGIN_TRUST", "yes", 1);
  EXPECT_NE(t.load_error().find("MLPERF_PLUGIN_TRUST=yes: the only setting is 'all'"), std::string::npos);
}

TEST(PluginTrust, ScanAndListPluginsRefuseTheUntrustedDirectoryToo) {
  TrustDir t("scan", 0777);
  const auto entries = PluginLoader({t.dir()}).scan();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_FALSE(entries[0].ok);
  EXPECT_NE(entries[0].error.find("is writable by every user"), std::string::npos) << entries[0].error;
  // mlperf-run --list-plugins with MLPERF_PLUGIN_PATH=. in that directory
  const mlph::test::CliResult r = mlph::test::run_command("cd " + t.dir().string() + " && MLPERF_PLUGIN_PATH=. " +
                                                          MLPH_BINARY_DIR "/bin/mlperf-run --list-plugins");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ignored: " + t.library().string() + ": not loaded"), std::string::npos) << r.output;
  EXPECT_FALSE(t.initializer_ran());
}

// ---- the dynamic loader's own reason for a file it cannot load ----

TEST(PluginLoader, AnEmptyOrCorruptLibraryGetsTheLoadersReason) {
  TrustDir t("corrupt");
  std::ofstream(t.library(), std::ios::trunc).flush();  // empty
  std::string error = t.load_error();
  EXPECT_EQ(error, t.library().string() + ": cannot load: file too short") << error;
  std::ofstream(t.library(), std::ios::trunc) << std::string(4096, 'x');
  error = t.load_error();
  EXPECT_EQ(error, t.library().string() + ": cannot load: invalid ELF header") << error;
}

TEST(PluginLoader, AFifoInPlaceOfALibraryIsRefusedWithoutWaiting) {
  TrustDir t("fifo");
  fs::remove(t.library());
  ASSERT_EQ(::mkfifo(t.library().c_str(), 0644), 0);
  ::setenv("MLPERF_PLUGIN_TRUST", "all", 1);  // the check stands whatever the trust
  EXPECT_EQ(t.load_error(), t.library().string() + ": cannot load: not a regular file");
}
