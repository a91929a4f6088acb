// What one mlperf-run invocation asks for (its command line, main.cpp): the run (runner.hpp), the
// session it opens (session.hpp), the benchmarks and campaigns built on it take the same options.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mlph::core {

struct RunOptions {
  std::string workload;  // empty: from the config file's `workload:` key
  std::string backend, comms, storage;  // empty: the config's plugins.* keys
  std::string config_file;
  std::vector<std::string> sets;  // key=value
  std::string data_dir;           // shorthand for --set data.dir=...
  std::string division;           // shorthand for --set mlperf.division=...
  std::optional<uint64_t> seed;   // shorthand for --set run.seed=...
  std::filesystem::path output_dir = "out";
  std::string log_name = "result_0.txt";  // the MLPerf log in output_dir (result_<i>.txt in a submission)
  std::vector<std::filesystem::path> plugin_dirs;
  std::string generate_data_dir;  // non-empty: write the workload's synthetic dataset there and exit
  // Checkpoints (checkpoint.hpp): saved into checkpoint_dir after every checkpoint_every-th epoch,
  // and where a signal stops the run (signals.hpp), the newest checkpoint_keep kept; resume_from: a
  // checkpoint (or a directory's latest) to go on from; resume_auto: checkpoint_dir's latest if it
  // has one, else a fresh start (a requeued job); export_weights: an .npz of the trained weights in
  // the reference's names, written at the end.
  std::filesystem::path checkpoint_dir, resume_from, export_weights;
  bool resume_auto = false;
  // --switch-backend: a checkpoint of another backend goes on on this one (its fp32 weights and
  // optimizer state are the backends' common form): training continues, not bitwise.
  bool switch_backend = false;
  uint32_t checkpoint_every = 1, checkpoint_keep = 2;
  // --status-file: rank 0 writes there the status the run exits with, for a job script whose
  // launcher reports its own (mpirun, sent SIGTERM, exits 1 whatever its ranks did).
  std::filesystem::path status_file;
};

}  // namespace mlph::core
