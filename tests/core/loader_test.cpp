#include <gtest/gtest.h>

#include <string>

#include "mlph/core/plugin_loader.hpp"

using namespace mlph::core;

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
  // The five broken libraries, plus four loadable test backends: the conformance suite's faulty
  // one, the tracing one and its ABI 1.3 build, and one built against ABI 1.1 (an older minor
  // loads); and the two linear-regression test workloads, one of them built as ABI 1.2.
  const auto entries = loader.scan();
  ASSERT_EQ(entries.size(), 11u);
  for (const ScanEntry& e : entries) {
    const std::string file = e.file.filename().string();
    const bool loadable = file == "libmlph-backend-faulty.so" || file == "libmlph-backend-tracing.so" ||
                          file == "libmlph-backend-tracing-abi13.so" || file == "libmlph-backend-abi11.so" ||
                          file == "libmlph-workload-linreg.so" || file == "libmlph-workload-linreg-abi12.so";
    EXPECT_EQ(e.ok, loadable) << e.file;
    EXPECT_EQ(e.error.empty(), loadable) << e.file;
  }
}
