// The checkpoint on disk. A directory holds one subdirectory per checkpoint, `epoch-000012/` after
// 12 epochs or `epoch-000012-step-000034/` 34 steps into the 13th (a run stopped by a signal), with
//   manifest.json   what the run was (benchmark, backend, graph, seed, hyperparameters) and where it
//                   stood (RunnerState), and the index of the tensors with a CRC32 (zlib) each;
//   tensors.bin     the tensors' bytes, each at a 64-byte aligned offset;
// and `latest`, a one-line file naming the newest complete one. A checkpoint is written into a
// hidden temporary directory, its files and the directory fsync'ed, renamed into place, the parent
// fsync'ed, and only then is `latest` replaced (written aside, fsync'ed, renamed) and the oldest
// pruned: a crash at any point leaves the last good checkpoint, and `latest` naming it, intact.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/common.h"
#include "mlph/core/atomic_file.hpp"

namespace mlph::core {

// A checkpoint that cannot be used: one line naming the file and what is wrong or differs.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the run stood after an epoch (and its evaluation), or after a step inside one: with the
// tensors, all a run needs to go on bitwise as if it had never stopped. The schedule position follows
// from these (the learning rate is the workload's function of epoch and optimizer step), and so does
// the data order: the runner's shuffle is keyed by seed + epoch, a workload's sample_order by the
// epoch alone, and each rank's batches are its share of that order in turn, so the first
// `steps_done` of them are skipped. The counter of in-graph randomness (dropout) is the micro-batch
// counter.
struct RunnerState {
  uint32_t epochs_done = 0;      // the run goes on with epoch index `epochs_done` (0-based)
  uint64_t micro_batches = 0;    // micro-batches trained: the counter of dropout and of the accumulation window
  uint64_t optimizer_steps = 0;  // updates applied (micro_batches / accumulation; Adam's t)
  std::vector<double> metrics;   // the quality metric after each epoch so far
  uint64_t steps_done = 0;       // training steps of epoch `epochs_done` taken (0: at its start)
};

// What a run must share with a checkpoint to continue from it.
struct CheckpointIdentity {
  std::string benchmark, workload, backend;
  std::string graph_fingerprint;  // FNV-1a 64 of every graph value's name, dtype and shape
  uint64_t seed = 0;
  int32_t ranks = 1;
  uint32_t accumulation = 1;
  std::map<std::string, std::string> hyperparameters;  // the configuration the closed rules govern
  std::string config_hash;                             // FNV-1a 64 of those
};

struct TensorRecord {
  std::string name;  // the graph value's name
  std::string slot;  // "" for the parameter's values, else its state slot ("m", "pending_gradient", ...),
                     // or "rank-<r>": rank r's own values of a non-trainable one (checkpoint.hpp)
  MLPH_DType dtype = MLPH_DTYPE_F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  CheckpointIdentity identity;
  RunnerState state;
  std::vector<TensorRecord> tensors;
  uint64_t tensors_bytes = 0;
};

// The bounds of a manifest read back (text_input.hpp): the mini DeepCAM's, the largest here (LAMB,
// 1 057 tensors), is 169 KB of 18 302 YAML nodes: these leave 25 and 13 times that.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{4} << 20;
inline constexpr size_t kMaxManifestNodes = 250'000;
// Version 2 is written only for a checkpoint inside an epoch (state.steps_done > 0, and with several
// ranks each one's batch-norm statistics: TensorRecord.slot "rank-<r>"), which a version 1 reader
// would resume at the wrong place; an epoch's end is still written as version 1. Both are read.
inline constexpr int kCheckpointVersion = 2;

// The checkpoint directory's name for the state after `epochs_done` epochs and `steps_done` steps of
// the next: epoch-000012, epoch-000012-step-000034. Names sort as the states do.
std::string checkpoint_name(uint32_t epochs_done, uint64_t steps_done = 0);
// The complete checkpoints in `dir` (epoch-* with a manifest), oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);
// The checkpoint `dir`'s `latest` names, or an empty path when it has none. A `latest` that is not a
// regular file of one line naming a checkpoint of `dir` (epoch-NNNNNN[-step-NNNNNN]) is a CheckpointError.
std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

// One checkpoint being written; nothing is visible under its name until commit().
class CheckpointWriter {
 public:
  CheckpointWriter(std::filesystem::path dir, uint32_t epochs_done, uint64_t steps_done = 0);
  ~CheckpointWriter();  // an uncommitted checkpoint is removed
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void add(const std::string& name, const std::string& slot, MLPH_DType dtype, const std::vector<int64_t>& shape,
           const void* data);
  // Makes it durable and the newest (see above), then removes all but the `keep` newest. Returns its path.
  // A checkpoint of the same epoch from an earlier attempt gives way, unless `latest` names it.
  std::filesystem::path commit(const CheckpointIdentity& identity, const RunnerState& state, uint32_t keep);
  uint64_t bytes() const { return offset_; }

 private:
  std::filesystem::path dir_, temp_, final_;
  std::optional<AtomicFile> tensors_file_;
  uint64_t offset_ = 0;
  std::vector<TensorRecord> tensors_;
};

// A checkpoint opened for reading: `path` is one checkpoint (holding manifest.json) or a checkpoint
// directory (its `latest`). The manifest is parsed (bounded, text_input.hpp) and every tensor's shape,
// size, place in tensors.bin and CRC32 checked before the constructor returns, through a buffer of a
// few MiB; any fault is a CheckpointError naming the file.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& path);
  const std::filesystem::path& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  // The tensor's record, or null when the checkpoint has none of that name and slot.
  const TensorRecord* find(const std::string& name, const std::string& slot) const;
  // Its bytes, their CRC32 checked again.
  std::vector<std::byte> read(const TensorRecord& record) const;

 private:
  void check_crc(const TensorRecord& record, uint32_t crc) const;
  std::filesystem::path dir_;
  Manifest manifest_;
};

}  // namespace mlph::core
