// libmlph-backend-onednn-cpu.so: the op catalogue on oneDNN primitives, for CPU-only machines.
#include <cstdlib>

#include "mlph/sdk/util/plugin.hpp"

#include "onednn_backend.hpp"

namespace {

// OpenMP threads that wait for work by spinning (libgomp's default: ~300k spins at every barrier)
// steal the cores their team mates need as soon as the machine is shared: a training step then
// takes 3-5x longer (measured at 32^3 under load 7 on 2 cores). Sleeping waiters cost a futex
// wake per parallel region, negligible next to oneDNN's primitives. libgomp reads its settings
// once, in its own initializer; this plug-in is linked with -z initfirst so that this runs
// before it. A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
__attribute__((constructor)) void default_to_passive_openmp_waits() {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) setenv("OMP_WAIT_POLICY", "passive", 0);
}

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "onednn-cpu", "0.1.0",
                   "oneDNN primitives in blocked layouts with fused conv+activation, for CPUs",
                   mlph::sdk::backend_api<mlph::onednn::OnednnBackend>())
