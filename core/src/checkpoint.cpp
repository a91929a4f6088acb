#include "mlph/core/checkpoint.hpp"

#include <fmt/format.h>

#include "mlph/core/fnv1a.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/text_input.hpp"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::core {
namespace {

std::string graph_fingerprint(const MLPH_Graph& graph) {
  Fnv1a f;
  for (size_t i = 0; i < graph.n_values; ++i) {
    const MLPH_Value& v = graph.values[i];
    f.add(v.name ? v.name : "");
    f.add(&v.dtype, sizeof v.dtype);
    f.add(&v.ndim, sizeof v.ndim);
    f.add(v.shape, sizeof(int64_t) * static_cast<size_t>(std::max(v.ndim, 0)));
  }
  return f.hex();
}

// The state slots of the graph's optimizer (the op catalogue's names).
std::vector<std::string> optimizer_slots(const MLPH_Graph& graph) {
  const sdk::schema::Optimizer* o = sdk::schema::find_optimizer(graph.optimizer.name ? graph.optimizer.name : "");
  return o ? std::vector<std::string>(o->state.begin(), o->state.end()) : std::vector<std::string>{};
}

bool trainable(const MLPH_Parameter& p) { return (p.flags & MLPH_PARAM_TRAINABLE) != 0; }

std::string slot_name(const std::string& name, const std::string& slot) { return slot.empty() ? name : name + "/" + slot; }

std::string rank_slot(int32_t rank) { return fmt::format("rank-{}", rank); }

}  // namespace

std::string missing_state_support(const Session& session) {
  const MLPH_Plugin& plugin = *session.backend_plugin().descriptor;
  const MLPH_BackendApi* api = session.backend_api();
  if (plugin.abi_minor >= 4 && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_BackendApi, write_state) && api->read_state &&
      api->write_state)
    return "";
  return fmt::format("backend {} (ABI {}.{}) cannot save or restore its optimizer state, which checkpoints need "
                     "(ABI 1.4: read_state, write_state); rebuild it against a newer SDK",
                     session.backend_name(), plugin.abi_major, plugin.abi_minor);
}

void check_state_readable(const Session& session, MLPH_Model* model, const MLPH_Graph& graph) {
  const std::vector<std::string> slots = optimizer_slots(graph);
  for (size_t i = 0; i < graph.n_params && !slots.empty(); ++i) {
    if (!trainable(graph.params[i])) continue;
    const MLPH_Value& v = graph.values[graph.params[i].value];
    std::vector<float> buffer(static_cast<size_t>(sdk::numel(v)));
    MLPH_Tensor view = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, buffer.data());
    check(session.backend_api()->read_state(model, i, slots[0].c_str(), &view),
          fmt::format("backend {}: checkpoints need its optimizer state", session.backend_name()));
    return;
  }
}

CheckpointIdentity run_identity(const Session& session, const MLPH_Graph* graph) {
  CheckpointIdentity id;
  id.benchmark = session.info().benchmark ? session.info().benchmark : "";
  id.workload = session.workload_plugin().descriptor->name;
  id.backend = session.backend_name();
  if (graph) id.graph_fingerprint = graph_fingerprint(*graph);
  id.seed = session.seed();
  id.ranks = session.topology().size;
  id.accumulation = session.gradient_accumulation();
  Fnv1a hash;
  for (const MLPH_ParamSpec& spec : session.schema()) {
    if (spec.closed == MLPH_CLOSED_FREE) continue;  // paths, logging, run length: may change on resume
    const std::string& value = session.config().get(spec.key);
    id.hyperparameters[spec.key] = value;
  }
  for (const auto& [key, value] : id.hyperparameters) hash.add(key), hash.add(value);
  id.config_hash = hash.hex();
  return id;
}

void check_same_run(const CheckpointReader& checkpoint, const CheckpointIdentity& run, bool switch_backend) {
  const CheckpointIdentity& saved = checkpoint.manifest().identity;
  const std::string where = "checkpoint " + checkpoint.dir().string();
  const auto differs = [&](const char* what, const std::string& there, const std::string& here) {
    if (there != here)
      throw CheckpointError(
          fmt::format("{}: {} '{}' there, '{}' in this run", where, what, escaped(there, 120), escaped(here, 120)));
  };
  differs("benchmark", saved.benchmark, run.benchmark);
  differs("workload", saved.workload, run.workload);
  if (!switch_backend && saved.backend != run.backend)
    throw CheckpointError(fmt::format("{}: backend '{}' there, '{}' in this run (--switch-backend goes on from it on "
                                      "this backend: training continues, not bitwise)",
                                      where, escaped(saved.backend, 120), escaped(run.backend, 120)));
  differs("ranks", std::to_string(saved.ranks), std::to_string(run.ranks));
  if (saved.config_hash != run.config_hash) {
    for (const auto& [key, value] : run.hyperparameters) {
      const auto found = saved.hyperparameters.find(key);
      differs(("'" + key + "' =").c_str(), found == saved.hyperparameters.end() ? "(absent)" : found->second, value);
    }
    for (const auto& [key, value] : saved.hyperparameters)
      if (!run.hyperparameters.count(key)) differs(("'" + key + "' =").c_str(), value, "(absent)");
  }
  if (!run.graph_fingerprint.empty() && saved.graph_fingerprint != run.graph_fingerprint)
    throw CheckpointError(fmt::format("{}: its graph (fingerprint {}) is not this run's ({}): another model shape or "
                                      "batch size",
                                      where, escaped(saved.graph_fingerprint, 40), run.graph_fingerprint));
}

RankCopies gather_rank_copies(const Session& session, MLPH_Model* model, const MLPH_Graph& graph) {
  RankCopies copies;
  const auto ranks = static_cast<size_t>(session.topology().size);
  if (ranks == 1) return copies;
  for (size_t i = 0; i < graph.n_params; ++i) {
    if (trainable(graph.params[i])) continue;
    MLPH_Tensor view{};
    const std::vector<float> mine = read_parameter(session.backend_api(), model, graph, i, view);
    std::vector<float> all(mine.size() * ranks);
    check(session.comms_api()->allgather(session.comm(), mine.data(), all.data(), mine.size() * sizeof(float)),
          "comms: gathering every rank's running statistics for the checkpoint");
    copies[i].assign(all.begin() + static_cast<std::ptrdiff_t>(mine.size()), all.end());
  }
  return copies;
}

SavedCheckpoint save_checkpoint(const CheckpointOptions& options, const Session& session, MLPH_Model* model,
                                const MLPH_Graph& graph, const RunnerState& state, bool pending,
                                const RankCopies& copies) {
  const double started = host_api()->now_seconds();
  const MLPH_BackendApi* api = session.backend_api();
  std::vector<std::string> slots = optimizer_slots(graph);
  if (pending) slots.emplace_back(sdk::kPendingGradientSlot);
  CheckpointWriter writer(options.dir, state.epochs_done, state.steps_done);
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Parameter& p = graph.params[i];
    const MLPH_Value& v = graph.values[p.value];
    const std::string name = v.name ? v.name : "";
    const std::vector<int64_t> shape(v.shape, v.shape + v.ndim);
    MLPH_Tensor view{};
    std::vector<float> buffer = read_parameter(api, model, graph, i, view);  // `view` then takes each state slot
    writer.add(name, "", MLPH_DTYPE_F32, shape, buffer.data());
    if (const auto found = copies.find(i); found != copies.end() && !buffer.empty())
      for (size_t r = 1; r <= found->second.size() / buffer.size(); ++r)
        writer.add(name, rank_slot(static_cast<int32_t>(r)), MLPH_DTYPE_F32, shape,
                   found->second.data() + (r - 1) * buffer.size());
    if (!trainable(p)) continue;
    for (const std::string& slot : slots) {
      check(api->read_state(model, i, slot.c_str(), &view),
            fmt::format("backend {}: saving state '{}'", session.backend_name(), slot_name(name, slot)));
      writer.add(name, slot, MLPH_DTYPE_F32, shape, buffer.data());
    }
  }
  SavedCheckpoint saved;
  saved.bytes = writer.bytes();
  saved.path = writer.commit(run_identity(session, &graph), state, options.keep);
  saved.seconds = host_api()->now_seconds() - started;
  return saved;
}

void check_restorable(const CheckpointReader& checkpoint, const MLPH_Graph& graph) {
  const std::vector<std::string> slots = optimizer_slots(graph);
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Value& v = graph.values[graph.params[i].value];
    const std::string name = v.name ? v.name : "";
    const auto check_slot = [&](const std::string& slot, bool required) {
      const TensorRecord* record = checkpoint.find(name, slot);
      if (!record && required)
        throw CheckpointError(fmt::format("checkpoint {}: has no '{}'", checkpoint.dir().string(), slot_name(name, slot)));
      if (record && (record->dtype != MLPH_DTYPE_F32 || record->shape != std::vector<int64_t>(v.shape, v.shape + v.ndim)))
        throw CheckpointError(fmt::format("checkpoint {}: '{}' is {} {}, this run's graph has {} {}",
                                          checkpoint.dir().string(), slot_name(name, slot),
                                          sdk::schema::dtype_name(record->dtype),
                                          sdk::shape_string(record->shape.data(), static_cast<int32_t>(record->shape.size())),
                                          sdk::schema::dtype_name(MLPH_DTYPE_F32), sdk::shape_string(v.shape, v.ndim)));
    };
    check_slot("", true);
    if (!trainable(graph.params[i])) {
      for (int32_t r = 1; r < checkpoint.manifest().identity.ranks; ++r) check_slot(rank_slot(r), false);  // inside an epoch
      continue;
    }
    for (const std::string& slot : slots) check_slot(slot, true);
    check_slot(sdk::kPendingGradientSlot, false);  // present when a window was open at the epoch's end
  }
}

void restore_checkpoint(const CheckpointReader& checkpoint, const Session& session, MLPH_Model* model,
                        const MLPH_Graph& graph) {
  check_restorable(checkpoint, graph);
  const MLPH_BackendApi* api = session.backend_api();
  const std::vector<std::string> slots = optimizer_slots(graph);
  // The parameter's values: its own slot "", or this rank's ("rank-<r>"); any other slot is optimizer state.
  const auto load = [&](size_t i, const std::string& slot) {
    const bool values = slot.empty() || slot == rank_slot(session.topology().rank);
    const MLPH_Value& v = graph.values[graph.params[i].value];
    const std::string name = v.name ? v.name : "";
    const TensorRecord* record = checkpoint.find(name, slot);  // as check_restorable found it
    if (!record) return;
    std::vector<std::byte> data = checkpoint.read(*record);
    const MLPH_Tensor view = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, data.data());
    check(values ? api->write_parameter(model, i, &view) : api->write_state(model, i, slot.c_str(), &view),
          fmt::format("backend {}: restoring '{}'", session.backend_name(), slot_name(name, slot)));
  };
  for (size_t i = 0; i < graph.n_params; ++i) {
    load(i, "");
    if (!trainable(graph.params[i])) {
      if (const int32_t rank = session.topology().rank; rank > 0) load(i, rank_slot(rank));  // a checkpoint inside an epoch
      continue;
    }
    for (const std::string& slot : slots) load(i, slot);
    load(i, sdk::kPendingGradientSlot);
  }
}

}  // namespace mlph::core
