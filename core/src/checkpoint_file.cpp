#include "mlph/core/checkpoint_file.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "mlph/core/json.hpp"
#include "mlph/core/tensor_bytes.hpp"
#include "mlph/core/text_input.hpp"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/util/numbers.hpp"

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "mlph-checkpoint";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kTensors = "tensors.bin";
constexpr const char* kLatest = "latest";
constexpr uint64_t kAlignment = 64;
constexpr uint64_t kMaxLatestBytes = 4096;
constexpr size_t kCrcChunk = size_t{4} << 20;  // the tensors are checked through a buffer of this size

uint32_t crc32_of(const void* data, uint64_t n, uint32_t crc = 0) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  for (uint64_t done = 0; done < n;) {  // zlib takes 32-bit lengths
    const auto chunk = static_cast<uInt>(std::min<uint64_t>(n - done, 1u << 30));
    c = ::crc32(c, p + done, chunk);
    done += chunk;
  }
  return static_cast<uint32_t>(c);
}

std::string manifest_json(const CheckpointIdentity& id, const RunnerState& state,
                          const std::vector<TensorRecord>& tensors, uint64_t tensors_bytes) {
  std::string hparams;
  for (const auto& [key, value] : id.hyperparameters)
    hparams += fmt::format("{}\n    {}: {}", hparams.empty() ? "" : ",", json(key).text, json(value).text);
  std::vector<std::string> metrics;
  for (double m : state.metrics) metrics.push_back(json(m).text);
  std::string records;
  for (const TensorRecord& t : tensors)
    records += fmt::format("{}\n    {{\"name\": {}, \"slot\": {}, \"dtype\": {}, \"shape\": [{}], \"offset\": {}, "
                           "\"bytes\": {}, \"crc32\": {}}}",
                           records.empty() ? "" : ",", json(t.name).text, json(t.slot).text,
                           json(sdk::schema::dtype_name(t.dtype)).text, fmt::join(t.shape, ", "), t.offset, t.bytes,
                           t.crc32);
  const int version = state.steps_done > 0 ? 2 : 1;  // see kCheckpointVersion
  return fmt::format(
      "{{\n  \"format\": {}, \"version\": {},\n  \"benchmark\": {}, \"workload\": {}, \"backend\": {},\n"
      "  \"graph_fingerprint\": {}, \"seed\": {}, \"ranks\": {}, \"gradient_accumulation\": {},\n"
      "  \"config_hash\": {},\n  \"hyperparameters\": {{{}\n  }},\n"
      "  \"state\": {{\"epochs_done\": {}, {}\"micro_batches\": {}, \"optimizer_steps\": {}, \"metrics\": [{}]}},\n"
      "  \"tensors_file\": {}, \"tensors_bytes\": {},\n  \"tensors\": [{}\n  ]\n}}\n",
      json(kFormat).text, version, json(id.benchmark).text, json(id.workload).text, json(id.backend).text,
      json(id.graph_fingerprint).text, id.seed, id.ranks, id.accumulation, json(id.config_hash).text, hparams,
      state.epochs_done, version > 1 ? fmt::format("\"steps_done\": {}, ", state.steps_done) : "",
      state.micro_batches, state.optimizer_steps, fmt::join(metrics, ", "), json(kTensors).text,
      tensors_bytes, records);
}

// Parsing, within the bounds of text_input.hpp: every field named in the error, so a hand-edited or
// foreign manifest gets one line naming the file; what it says is quoted escaped.
class ManifestParser {
 public:
  explicit ManifestParser(fs::path file) : file_(std::move(file)) {
    try {
      root_ = load_yaml(read_text_file(file_, kMaxManifestBytes, "checkpoint manifest"), kMaxManifestNodes);
    } catch (const InputError& e) {
      throw CheckpointError(e.what());
    } catch (const YamlError& e) {
      throw CheckpointError(
          fmt::format("{}: not a readable checkpoint manifest (line {}: {})", file_.string(), e.line, e.reason));
    }
    if (!root_.IsMap()) throw CheckpointError(fmt::format("{}: not a checkpoint manifest (no JSON object)", file_.string()));
  }

  Manifest parse() {
    if (const std::string format = text(root_, "format"); format != kFormat)
      throw CheckpointError(fmt::format("{}: not an mlperf-hpc checkpoint (format '{}', expected '{}')", file_.string(),
                                        escaped(format, 80), kFormat));
    const auto version = number<int>(root_, "version");
    if (version < 1 || version > kCheckpointVersion)
      throw CheckpointError(fmt::format("{}: checkpoint format version {}; this build reads versions 1 to {}",
                                        file_.string(), version, kCheckpointVersion));
    Manifest m;
    CheckpointIdentity& id = m.identity;
    id.benchmark = name(root_, "benchmark"), id.workload = name(root_, "workload"), id.backend = name(root_, "backend");
    id.graph_fingerprint = text(root_, "graph_fingerprint"), id.config_hash = text(root_, "config_hash");
    id.seed = number<uint64_t>(root_, "seed"), id.ranks = number<int32_t>(root_, "ranks");
    id.accumulation = number<uint32_t>(root_, "gradient_accumulation");
    for (const auto& kv : field(root_, "hyperparameters", YAML::NodeType::Map)) {
      if (!kv.first.IsScalar() || !kv.second.IsScalar())
        throw CheckpointError(fmt::format("{}: the manifest's \"hyperparameters\" holds more than key: value", file_.string()));
      id.hyperparameters[kv.first.Scalar()] = kv.second.Scalar();
    }
    const YAML::Node state = field(root_, "state", YAML::NodeType::Map);
    m.state.epochs_done = number<uint32_t>(state, "epochs_done");
    if (version > 1) m.state.steps_done = number<uint64_t>(state, "steps_done");
    m.state.micro_batches = number<uint64_t>(state, "micro_batches");
    m.state.optimizer_steps = number<uint64_t>(state, "optimizer_steps");
    for (const YAML::Node& v : field(state, "metrics", YAML::NodeType::Sequence)) m.state.metrics.push_back(metric(v));
    m.tensors_bytes = number<uint64_t>(root_, "tensors_bytes");
    for (const YAML::Node& t : field(root_, "tensors", YAML::NodeType::Sequence)) m.tensors.push_back(tensor(t));
    return m;
  }

 private:
  YAML::Node field(const YAML::Node& node, const char* key, YAML::NodeType::value type = YAML::NodeType::Scalar) const {
    const YAML::Node v = node[key];
    if (!v) throw CheckpointError(fmt::format("{}: the manifest has no \"{}\"", file_.string(), key));
    if (v.Type() != type) throw CheckpointError(fmt::format("{}: the manifest's \"{}\" is not a {}", file_.string(), key,
                                                           type == YAML::NodeType::Map        ? "JSON object"
                                                           : type == YAML::NodeType::Sequence ? "list"
                                                                                              : "number or string"));
    return v;
  }
  std::string text(const YAML::Node& node, const char* key) const { return field(node, key).Scalar(); }
  // A plug-in's or benchmark's name: mlph-export loads the workload it names.
  std::string name(const YAML::Node& node, const char* key) const {
    const std::string value = text(node, key);
    const bool plain = !value.empty() && value[0] != '.' && std::all_of(value.begin(), value.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!plain)
      throw CheckpointError(fmt::format("{}: the manifest's \"{}\" \"{}\" is no plug-in name", file_.string(), key,
                                        escaped(value, 80)));
    return value;
  }
  template <class T>
  T number(const YAML::Node& node, const char* key) const {
    const auto value = sdk::integer_value<T>(text(node, key));
    if (!value)
      throw CheckpointError(fmt::format("{}: the manifest's \"{}\" = {} is not an integer of its range", file_.string(),
                                        key, escaped(node[key].Scalar(), 80)));
    return *value;
  }
  double metric(const YAML::Node& v) const {  // written as Python repr: NaN and Infinity included
    const auto value = v.IsScalar() ? sdk::json_number_value(v.Scalar()) : std::nullopt;
    if (!value)
      throw CheckpointError(fmt::format("{}: a metric '{}' is not a number", file_.string(),
                                        escaped(v.IsScalar() ? v.Scalar() : "(not a number)", 80)));
    return *value;
  }
  // A tensor's name or slot: quoted in messages and looked up, never a control character.
  std::string label(const YAML::Node& node, const char* key) const {
    std::string value = text(node, key);
    if (std::any_of(value.begin(), value.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)); }))
      throw CheckpointError(fmt::format("{}: a tensor's \"{}\" \"{}\" holds a control character", file_.string(), key,
                                        escaped(value, 80)));
    return value;
  }
  TensorRecord tensor(const YAML::Node& node) const {
    if (!node.IsMap()) throw CheckpointError(fmt::format("{}: the manifest's \"tensors\" holds a non-object", file_.string()));
    TensorRecord t;
    t.name = label(node, "name"), t.slot = label(node, "slot");
    const std::string dtype = text(node, "dtype");
    bool known = false;
    for (int d = 0; d <= MLPH_DTYPE_U8 && !known; ++d)
      if (sdk::schema::dtype_name(static_cast<MLPH_DType>(d)) == dtype) t.dtype = static_cast<MLPH_DType>(d), known = true;
    if (!known)
      throw CheckpointError(
          fmt::format("{}: tensor '{}' has an unknown dtype '{}'", file_.string(), t.name, escaped(dtype, 80)));
    const YAML::Node shape = field(node, "shape", YAML::NodeType::Sequence);
    if (shape.size() > MLPH_MAX_DIMS)
      throw CheckpointError(fmt::format("{}: tensor '{}' has {} dims, more than the {} of a tensor", file_.string(),
                                        t.name, shape.size(), MLPH_MAX_DIMS));
    for (const YAML::Node& d : shape) {
      const auto dim = d.IsScalar() ? sdk::integer_value<int64_t>(d.Scalar()) : std::nullopt;
      if (!dim || *dim < 0)
        throw CheckpointError(fmt::format("{}: tensor '{}' has a dim that is no size", file_.string(), t.name));
      t.shape.push_back(*dim);
    }
    t.offset = number<uint64_t>(node, "offset"), t.bytes = number<uint64_t>(node, "bytes");
    t.crc32 = number<uint32_t>(node, "crc32");
    if (tensor_bytes(t.shape, t.dtype) != t.bytes)
      throw CheckpointError(fmt::format("{}: tensor '{}' of shape {} is not the {} bytes the manifest says", file_.string(),
                                        t.name, sdk::shape_string(t.shape.data(), static_cast<int32_t>(t.shape.size())),
                                        t.bytes));
    return t;
  }

  fs::path file_;
  YAML::Node root_;
};

// The checkpoint `path` names: itself when it holds a manifest, else what its `latest` names, else
// (a run killed between a checkpoint's rename and latest's) its newest whole checkpoint.
fs::path resolve(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path / kManifest, ec)) return path;
  if (!fs::exists(fs::symlink_status(path / kLatest, ec))) {
    if (const std::vector<fs::path> whole = list_checkpoints(path); !whole.empty()) return whole.back();
  } else {
    const fs::path target = latest_checkpoint(path);
    if (!fs::exists(target / kManifest, ec))
      throw CheckpointError(fmt::format("{}: names '{}', which holds no {}", (path / kLatest).string(),
                                        target.filename().string(), kManifest));
    return target;
  }
  if (!fs::exists(path, ec)) throw CheckpointError(fmt::format("{}: no such checkpoint or checkpoint directory", path.string()));
  throw CheckpointError(fmt::format("{}: holds neither a checkpoint ({}) nor a '{}' naming one", path.string(), kManifest,
                                    kLatest));
}

void remove_quietly(const fs::path& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// Reads `t` from the open tensors file through `chunk` (a bounded buffer, or one of the tensor's
// size) and returns its CRC32.
uint32_t crc_of_tensor(const sdk::detail::Fd& fd, const fs::path& file, const TensorRecord& t, std::vector<std::byte>& chunk) {
  uint32_t crc = 0;
  for (uint64_t done = 0; done < t.bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(t.bytes - done, chunk.size()));
    sdk::detail::read_exactly(fd, file.string(), t.offset + done, n, reinterpret_cast<char*>(chunk.data()));
    crc = crc32_of(chunk.data(), n, crc);
    done += n;
  }
  return crc;
}

// The tensors file, opened as a regular file (a FIFO or device would block or never end).
sdk::detail::Fd open_tensors(const fs::path& file, uint64_t& size) {
  try {
    return sdk::detail::open_regular_file(file.string(), size);
  } catch (const sdk::Error& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace

std::string checkpoint_name(uint32_t epochs_done, uint64_t steps_done) {
  return steps_done == 0 ? fmt::format("epoch-{:06}", epochs_done)
                         : fmt::format("epoch-{:06}-step-{:06}", epochs_done, steps_done);
}

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("epoch-") && fs::exists(e.path() / kManifest, ec)) found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found;
}

fs::path latest_checkpoint(const fs::path& dir) {
  const fs::path file = dir / kLatest;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return {};
  std::string name;
  try {
    name = read_text_file(file, kMaxLatestBytes, "file");
  } catch (const InputError& e) {
    throw CheckpointError(e.what());
  }
  if (name.ends_with('\n')) name.pop_back();
  // Only a checkpoint of this directory: not a path elsewhere, not the directory itself.
  static const std::regex checkpoint_name_pattern("epoch-[0-9]+(-step-[0-9]+)?");
  if (!std::regex_match(name, checkpoint_name_pattern))
    throw CheckpointError(fmt::format("{}: names \"{}\", not a checkpoint of this directory (epoch-NNNNNN[-step-NNNNNN])",
                                      file.string(), escaped(name, 80)));
  return dir / name;
}

CheckpointWriter::CheckpointWriter(fs::path dir, uint32_t epochs_done, uint64_t steps_done)
    : dir_(std::move(dir)),
      temp_(dir_ / fmt::format(".{}.tmp", checkpoint_name(epochs_done, steps_done))),
      final_(dir_ / checkpoint_name(epochs_done, steps_done)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create the checkpoint directory: {}", dir_.string(), ec.message()));
  remove_quietly(temp_);  // left by a writer that died
  fs::create_directory(temp_, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create it: {}", temp_.string(), ec.message()));
  tensors_file_.emplace(temp_ / kTensors);
}

CheckpointWriter::~CheckpointWriter() {
  tensors_file_.reset();
  if (!temp_.empty()) remove_quietly(temp_);
}

void CheckpointWriter::add(const std::string& name, const std::string& slot, MLPH_DType dtype,
                           const std::vector<int64_t>& shape, const void* data) {
  const std::optional<uint64_t> bytes = tensor_bytes(shape, dtype);
  if (!bytes) throw CheckpointError(fmt::format("checkpoint: tensor '{}' has no size (shape {})", name, shape.size()));
  TensorRecord t{name, slot, dtype, shape, (offset_ + kAlignment - 1) / kAlignment * kAlignment, *bytes, 0};
  t.crc32 = crc32_of(data, t.bytes);
  const std::vector<char> padding(t.offset - offset_, 0);
  tensors_file_->write(padding.data(), padding.size());
  tensors_file_->write(data, t.bytes);
  offset_ = t.offset + t.bytes;
  tensors_.push_back(std::move(t));
}

fs::path CheckpointWriter::commit(const CheckpointIdentity& identity, const RunnerState& state, uint32_t keep) {
  fs::path latest;
  try {
    latest = latest_checkpoint(dir_);
  } catch (const CheckpointError&) {  // names nothing of ours: replaced below
  }
  if (latest == final_)
    throw CheckpointError(fmt::format("{}: is the latest checkpoint; it is not replaced", final_.string()));
  tensors_file_->commit();
  tensors_file_.reset();
  AtomicFile manifest(temp_ / kManifest);
  manifest.write(manifest_json(identity, state, tensors_, offset_));
  manifest.commit();  // fsyncs temp_ too
  // A checkpoint of this epoch from an earlier attempt (not `latest`'s) gives way.
  const fs::path displaced = temp_.string() + ".old";
  remove_quietly(displaced);
  if (fs::exists(final_)) fs::rename(final_, displaced);
  fs::rename(temp_, final_);
  temp_.clear();
  sync_directory(dir_);
  remove_quietly(displaced);
  AtomicFile latest_file(dir_ / kLatest);
  latest_file.write(final_.filename().string() + "\n");
  latest_file.commit();
  // Pruned only now that the new one is complete; hidden leftovers of dead writers go too.
  std::vector<fs::path> all = list_checkpoints(dir_);
  all.erase(std::remove(all.begin(), all.end(), final_), all.end());
  const size_t keep_others = keep > 0 ? keep - 1 : 0;
  for (size_t i = 0; i + keep_others < all.size(); ++i) remove_quietly(all[i]);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (const std::string n = e.path().filename().string(); n.starts_with(".epoch-") && e.is_directory())
      remove_quietly(e.path());
  return final_;
}

CheckpointReader::CheckpointReader(const fs::path& path) : dir_(resolve(path)) {
  const fs::path manifest = dir_ / kManifest, tensors = dir_ / kTensors;
  manifest_ = ManifestParser(manifest).parse();
  uint64_t size = 0;
  const sdk::detail::Fd fd = open_tensors(tensors, size);
  if (size != manifest_.tensors_bytes)
    throw CheckpointError(fmt::format("{}: {} bytes, but its manifest says {}: the checkpoint is {}", tensors.string(),
                                      size, manifest_.tensors_bytes, size < manifest_.tensors_bytes ? "truncated" : "damaged"));
  if (const uint64_t memory = sdk::physical_memory_bytes(); size > memory)
    throw CheckpointError(fmt::format("{}: {} bytes, more than the {} bytes of this machine's memory", tensors.string(),
                                      size, memory));
  std::vector<std::byte> chunk(static_cast<size_t>(std::min<uint64_t>(size, kCrcChunk)));
  try {
    for (const TensorRecord& t : manifest_.tensors) {
      if (t.offset > size || t.bytes > size - t.offset)
        throw CheckpointError(fmt::format("{}: tensor '{}' ({} bytes at offset {}) lies past the end of the file",
                                          tensors.string(), t.name, t.bytes, t.offset));
      check_crc(t, crc_of_tensor(fd, tensors, t, chunk));
    }
  } catch (const sdk::Error& e) {  // a read that failed or came short: the file changed under us
    throw CheckpointError(e.what());
  }
}

void CheckpointReader::check_crc(const TensorRecord& t, uint32_t crc) const {
  if (crc != t.crc32)
    throw CheckpointError(fmt::format("{}: tensor '{}{}{}' fails its CRC32 check (stored {:08x}, computed {:08x}): the "
                                      "file is corrupt",
                                      (dir_ / kTensors).string(), t.name, t.slot.empty() ? "" : "/", t.slot, t.crc32, crc));
}

const TensorRecord* CheckpointReader::find(const std::string& name, const std::string& slot) const {
  for (const TensorRecord& t : manifest_.tensors)
    if (t.name == name && t.slot == slot) return &t;
  return nullptr;
}

std::vector<std::byte> CheckpointReader::read(const TensorRecord& t) const {
  const fs::path file = dir_ / kTensors;
  try {
    uint64_t size = 0;
    const sdk::detail::Fd fd = open_tensors(file, size);
    if (t.offset > size || t.bytes > size - t.offset)
      throw CheckpointError(fmt::format("{}: ends inside tensor '{}': the checkpoint is truncated", file.string(), t.name));
    std::vector<std::byte> data(static_cast<size_t>(t.bytes));  // at most the file, at most the machine's memory
    check_crc(t, crc_of_tensor(fd, file, t, data));
    return data;
  } catch (const sdk::Error& e) {
    throw CheckpointError(e.what());
  } catch (const std::bad_alloc&) {
    throw CheckpointError(fmt::format("{}: no memory for the {} bytes of tensor '{}'", file.string(), t.bytes, t.name));
  }
}

}  // namespace mlph::core
