#include "mlph/core/benchmark.hpp"

#include "mlph/core/config.hpp"
#include "mlph/core/shell_script.hpp"
#include "mlph/core/text_input.hpp"

namespace mlph::core {

std::string workload_name(const RunOptions& options, const std::string& context) {
  std::string name = options.workload;
  if (name.empty()) name = Config::peek_workload(options.config_file).value_or("");
  if (name.empty())
    throw ConfigError((context.empty() ? "" : context + ": ") +
                      "no workload: give --workload NAME or a `workload:` key in the config file");
  return name;
}

LoadedPlugin load_workload(const RunOptions& options, const std::string& context) {
  return PluginLoader(default_search_path(options.plugin_dirs)).load(MLPH_KIND_WORKLOAD, workload_name(options, context));
}

BenchmarkFacts benchmark_facts(const LoadedPlugin& workload) {
  const auto* api = workload.api<MLPH_WorkloadApi>();
  BenchmarkFacts facts;
  facts.name = workload.descriptor->name;
  if (api->struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadApi, borrow_hparams)) facts.borrow = api->borrow_hparams;
  const MLPH_BenchmarkInfo* info =
      api->struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadApi, benchmark_info) && api->benchmark_info
          ? api->benchmark_info()
          : nullptr;
  if (!info || info->struct_size < MLPH_STRUCT_SIZE(MLPH_BenchmarkInfo, n_hparam_log_keys)) return facts;
  facts.stated = true;
  if (info->benchmark && *info->benchmark) facts.name = info->benchmark;
  // The name becomes a directory of the submission tree.
  if (!is_plain_name(facts.name))
    throw LoadError(workload.file.string() + ": benchmark name '" + escaped(facts.name, 80) + "' is not a plain name");
  facts.submission_runs = static_cast<int>(info->submission_runs);
  for (size_t i = 0; i < info->n_hparam_log_keys; ++i)
    if (info->hparam_log_keys && info->hparam_log_keys[i]) facts.hparam_log_keys.emplace_back(info->hparam_log_keys[i]);
  return facts;
}

}  // namespace mlph::core
