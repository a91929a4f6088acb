// Deliberately broken plug-ins: one source, one defect per library, chosen by BROKEN_KIND.
// The loader must turn each into one clear line and never crash.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mlph/plugin.h"

namespace {
MLPH_Error* create(const MLPH_HostApi*, const MLPH_KeyValue*, size_t, MLPH_Backend**) { return nullptr; }
void destroy(MLPH_Backend*) {}

MLPH_BackendApi full_table() {
  MLPH_BackendApi api;
  std::memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  api.create = create;
  api.destroy = destroy;
  api.compile = [](MLPH_Backend*, const MLPH_Graph*, const MLPH_CommsHandle*, MLPH_Model**) -> MLPH_Error* {
    return nullptr;
  };
  api.model_destroy = [](MLPH_Model*) {};
  api.train_step = [](MLPH_Model*, const MLPH_Tensor*, size_t, const MLPH_StepArgs*, MLPH_StepResult*) -> MLPH_Error* {
    return nullptr;
  };
  api.eval_step = [](MLPH_Model*, const MLPH_Tensor*, size_t, MLPH_Tensor*, size_t) -> MLPH_Error* { return nullptr; };
  api.read_parameter = [](MLPH_Model*, size_t, MLPH_Tensor*) -> MLPH_Error* { return nullptr; };
  api.write_parameter = [](MLPH_Model*, size_t, const MLPH_Tensor*) -> MLPH_Error* { return nullptr; };
  api.read_gradient = [](MLPH_Model*, size_t, MLPH_Tensor*) -> MLPH_Error* { return nullptr; };
  return api;
}

MLPH_BackendApi table() {
  MLPH_BackendApi api = full_table();
#if BROKEN_KIND == 4  // table too small: a plug-in claiming an older, shorter table than ABI 1.0 has
  api.struct_size = offsetof(MLPH_BackendApi, compile);
#elif BROKEN_KIND == 5  // a required function left NULL
  api.train_step = nullptr;
#endif
  return api;
}

const MLPH_BackendApi kTable = table();

#if BROKEN_KIND == 2
constexpr uint32_t kMajor = MLPH_ABI_MAJOR + 1;  // built against a future ABI
#else
constexpr uint32_t kMajor = MLPH_ABI_MAJOR;
#endif
#if BROKEN_KIND == 3
constexpr MLPH_PluginKind kKind = MLPH_KIND_COMMS;  // says comms, file name says backend
#else
constexpr MLPH_PluginKind kKind = MLPH_KIND_BACKEND;
#endif

#if BROKEN_KIND == 6  // a sound plug-in built against ABI 1.1: no gradient accumulation
constexpr uint32_t kMinor = 1;
#else
constexpr uint32_t kMinor = MLPH_ABI_MINOR;
#endif

const MLPH_Plugin kDescriptor = {sizeof(MLPH_Plugin), nullptr, kMajor, kMinor, kKind, BROKEN_NAME, "0.0",
                                 "deliberately broken", &kTable};
}  // namespace

#if BROKEN_KIND == 1  // exports something, but not the entry symbol
// Its initializer leaves a mark (creates the file MLPH_TEST_INITIALIZER_MARK names), as any library's
// initializers may do anything: the loader tests prove that an untrusted file runs none of its code.
__attribute__((constructor)) static void leave_a_mark() {
  if (const char* mark = std::getenv("MLPH_TEST_INITIALIZER_MARK"))
    if (std::FILE* file = std::fopen(mark, "w")) std::fclose(file);
}
extern "C" MLPH_EXPORT const MLPH_Plugin* mlph_plugin_misspelled(void) { return &kDescriptor; }
#else
extern "C" MLPH_EXPORT const MLPH_Plugin* mlph_plugin(void) { return &kDescriptor; }
#endif
