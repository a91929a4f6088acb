// mlph-export: a checkpoint's trained weights in the reference implementation's PyTorch names and
// layouts (.npz), through the workload plug-in that wrote it; no configuration or data needed.
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "mlph/core/checkpoint_file.hpp"
#include "mlph/core/export.hpp"
#include "mlph/core/plugin_loader.hpp"

namespace po = boost::program_options;
using namespace mlph::core;

namespace {

int convert(const std::string& checkpoint_path, const std::string& out, const std::vector<std::filesystem::path>& dirs) {
  AtomicFile out_file(out);  // a path that cannot be written fails before the checkpoint is read
  const CheckpointReader checkpoint(checkpoint_path);
  const Manifest& m = checkpoint.manifest();
  const LoadedPlugin workload = PluginLoader(default_search_path(dirs)).load(MLPH_KIND_WORKLOAD, m.identity.workload);
  const auto layout = reference_layout_of(workload);
  if (!layout)
    throw LoadError(fmt::format("workload {} ({}) does not say how the reference names its parameters (ABI 1.4 "
                                "reference_layout)",
                                m.identity.workload, workload.file.string()));
  std::vector<ParameterValues> params;
  for (const TensorRecord& t : m.tensors) {
    if (!t.slot.empty() || t.dtype != MLPH_DTYPE_F32) continue;  // optimizer state stays behind
    const std::vector<std::byte> bytes = checkpoint.read(t);
    ParameterValues p{t.name, t.shape, std::vector<float>(bytes.size() / sizeof(float))};
    std::memcpy(p.data.data(), bytes.data(), bytes.size());
    params.push_back(std::move(p));
  }
  const size_t arrays = export_weights(layout, params, m.state.micro_batches, std::move(out_file));
  std::printf("%s: %zu arrays of %s after epoch %u, in the reference's names\n", out.c_str(), arrays,
              m.identity.benchmark.c_str(), m.state.epochs_done);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint, out;
  std::vector<std::string> plugin_dirs;
  po::options_description cli(
      "mlph-export: write a checkpoint's trained weights in the reference implementation's PyTorch names and "
      "layouts, as an .npz that PyTorch loads as a state_dict:\n"
      "  state = {k: torch.from_numpy(v) for k, v in numpy.load(OUT).items()}; model.load_state_dict(state)\n\n"
      "usage: mlph-export CHECKPOINT OUT.npz   (CHECKPOINT: DIR/epoch-NNNNNN, or DIR for its latest)\n\noptions");
  cli.add_options()("help,h", "show this help")(
      "plugin-dir", po::value(&plugin_dirs)->composing(), "search this directory for the workload plug-in first (repeatable)");
  po::options_description hidden;
  hidden.add_options()("checkpoint", po::value(&checkpoint))("out", po::value(&out));
  po::options_description all;
  all.add(cli).add(hidden);
  po::positional_options_description positional;
  positional.add("checkpoint", 1).add("out", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "mlph-export: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << cli << "\n";
    return 0;
  }
  if (checkpoint.empty() || out.empty()) {
    std::fprintf(stderr, "mlph-export: error: give a CHECKPOINT and an OUT file (see --help)\n");
    return 2;
  }
  try {
    return convert(checkpoint, out, {plugin_dirs.begin(), plugin_dirs.end()});
  } catch (const CheckpointError& e) {
    std::fprintf(stderr, "mlph-export: error: %s\n", e.what());
    return 2;
  } catch (const LoadError& e) {
    std::fprintf(stderr, "mlph-export: error: %s\n", e.what());
    return 2;
  } catch (const OutputError& e) {
    std::fprintf(stderr, "mlph-export: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlph-export: error: %s\n", e.what());
    return 1;
  }
}
