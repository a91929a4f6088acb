#include "mlph/core/checkpoint_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "mlph/core/mllog.hpp"
#include "mlph/sdk/json.hpp"
#include "mlph/sdk/op_schema.hpp"

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "mlph-checkpoint";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kTensors = "tensors.bin";
constexpr const char* kLatest = "latest";
constexpr uint64_t kAlignment = 64;

[[noreturn]] void system_error(const fs::path& file, const std::string& what) {
  throw CheckpointError(fmt::format("{}: {}: {}", file.string(), what, std::strerror(errno)));
}

void write_all(int fd, const fs::path& file, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) system_error(file, "cannot write");
    p += done, n -= static_cast<size_t>(done);
  }
}

// A file descriptor, closed on scope exit.
class Fd {
 public:
  Fd(const fs::path& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) system_error(path, "cannot open");
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void write_all(const void* data, size_t n) { core::write_all(fd_, path_, data, n); }
  void sync() {
    if (::fsync(fd_) != 0) system_error(path_, "cannot fsync");
  }

 private:
  fs::path path_;
  int fd_;
};

// Directory entries (a rename, a new file) are durable only once the directory is synced.
void sync_directory(const fs::path& dir) { Fd(dir, O_RDONLY | O_DIRECTORY).sync(); }

void write_file_durably(const fs::path& path, const std::string& text) {
  Fd f(path, O_WRONLY | O_CREAT | O_TRUNC);
  f.write_all(text.data(), text.size());
  f.sync();
}

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

// Parsing: every field named in the error, so a hand-edited or foreign manifest gets one clear line.
class ManifestParser {
 public:
  explicit ManifestParser(fs::path file) : file_(std::move(file)) {
    try {
      root_ = YAML::LoadFile(file_.string());
    } catch (const YAML::Exception& e) {
      throw CheckpointError(fmt::format("{}: not a readable checkpoint manifest ({})", file_.string(), e.msg));
    }
    if (!root_.IsMap()) throw CheckpointError(fmt::format("{}: not a checkpoint manifest (no JSON object)", file_.string()));
  }

  Manifest parse() {
    if (text(root_, "format") != kFormat)
      throw CheckpointError(fmt::format("{}: not an mlperf-hpc checkpoint (format '{}', expected '{}')", file_.string(),
                                        text(root_, "format"), kFormat));
    const auto version = number<int>(root_, "version");
    if (version < 1 || version > kCheckpointVersion)
      throw CheckpointError(fmt::format("{}: checkpoint format version {}; this build reads versions 1 to {}",
                                        file_.string(), version, kCheckpointVersion));
    Manifest m;
    CheckpointIdentity& id = m.identity;
    id.benchmark = text(root_, "benchmark"), id.workload = text(root_, "workload"), id.backend = text(root_, "backend");
    id.graph_fingerprint = text(root_, "graph_fingerprint"), id.config_hash = text(root_, "config_hash");
    id.seed = number<uint64_t>(root_, "seed"), id.ranks = number<int32_t>(root_, "ranks");
    id.accumulation = number<uint32_t>(root_, "gradient_accumulation");
    for (const auto& kv : field(root_, "hyperparameters")) id.hyperparameters[kv.first.as<std::string>()] = kv.second.as<std::string>();
    const YAML::Node state = field(root_, "state");
    m.state.epochs_done = number<uint32_t>(state, "epochs_done");
    if (version > 1) m.state.steps_done = number<uint64_t>(state, "steps_done");
    m.state.micro_batches = number<uint64_t>(state, "micro_batches");
    m.state.optimizer_steps = number<uint64_t>(state, "optimizer_steps");
    for (const YAML::Node& v : field(state, "metrics")) m.state.metrics.push_back(metric(v));
    m.tensors_bytes = number<uint64_t>(root_, "tensors_bytes");
    for (const YAML::Node& t : field(root_, "tensors")) m.tensors.push_back(tensor(t));
    return m;
  }

 private:
  YAML::Node field(const YAML::Node& node, const char* key) const {
    const YAML::Node v = node[key];
    if (!v) throw CheckpointError(fmt::format("{}: the manifest has no \"{}\"", file_.string(), key));
    return v;
  }
  std::string text(const YAML::Node& node, const char* key) const { return convert<std::string>(node, key); }
  template <class T>
  T number(const YAML::Node& node, const char* key) const {
    return convert<T>(node, key);
  }
  template <class T>
  T convert(const YAML::Node& node, const char* key) const {
    try {
      return field(node, key).as<T>();
    } catch (const YAML::Exception&) {
      throw CheckpointError(fmt::format("{}: the manifest's \"{}\" is not what it should be", file_.string(), key));
    }
  }
  double metric(const YAML::Node& v) const {  // written as Python repr: NaN and Infinity included
    const auto value = sdk::json_number_value(v.Scalar());
    if (!value) throw CheckpointError(fmt::format("{}: a metric '{}' is not a number", file_.string(), v.Scalar()));
    return *value;
  }
  TensorRecord tensor(const YAML::Node& node) const {
    TensorRecord t;
    t.name = text(node, "name"), t.slot = text(node, "slot");
    const std::string dtype = text(node, "dtype");
    bool known = false;
    for (int d = 0; d <= MLPH_DTYPE_U8 && !known; ++d)
      if (sdk::schema::dtype_name(static_cast<MLPH_DType>(d)) == dtype) t.dtype = static_cast<MLPH_DType>(d), known = true;
    if (!known) throw CheckpointError(fmt::format("{}: tensor '{}' has an unknown dtype '{}'", file_.string(), t.name, dtype));
    for (const YAML::Node& d : field(node, "shape")) t.shape.push_back(d.as<int64_t>());
    t.offset = number<uint64_t>(node, "offset"), t.bytes = number<uint64_t>(node, "bytes");
    t.crc32 = number<uint32_t>(node, "crc32");
    return t;
  }

  fs::path file_;
  YAML::Node root_;
};

// The checkpoint `path` names: itself when it holds a manifest, else what its `latest` names.
fs::path resolve(const fs::path& path) {
  if (fs::exists(path / kManifest)) return path;
  if (fs::exists(path / kLatest)) {
    const fs::path target = latest_checkpoint(path);
    if (!fs::exists(target / kManifest))
      throw CheckpointError(fmt::format("{}: names '{}', which holds no {}", (path / kLatest).string(),
                                        target.filename().string(), kManifest));
    return target;
  }
  if (!fs::exists(path)) throw CheckpointError(fmt::format("{}: no such checkpoint or checkpoint directory", path.string()));
  throw CheckpointError(fmt::format("{}: holds neither a checkpoint ({}) nor a '{}' naming one", path.string(), kManifest,
                                    kLatest));
}

void remove_quietly(const fs::path& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
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
    if (e.path().filename().string().starts_with("epoch-") && fs::exists(e.path() / kManifest)) found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found;
}

fs::path latest_checkpoint(const fs::path& dir) {
  std::ifstream in(dir / kLatest);
  std::string name;
  std::getline(in, name);
  return name.empty() ? fs::path() : dir / name;
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
  fd_ = ::open((temp_ / kTensors).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) system_error(temp_ / kTensors, "cannot create");
}

CheckpointWriter::~CheckpointWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) remove_quietly(temp_);
}

void CheckpointWriter::add(const std::string& name, const std::string& slot, MLPH_DType dtype,
                           const std::vector<int64_t>& shape, const void* data) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  TensorRecord t{name, slot, dtype, shape, (offset_ + kAlignment - 1) / kAlignment * kAlignment,
                 count * mlph_dtype_size(dtype), 0};
  t.crc32 = crc32_of(data, t.bytes);
  const std::vector<char> padding(t.offset - offset_, 0);
  write_all(fd_, temp_ / kTensors, padding.data(), padding.size());
  write_all(fd_, temp_ / kTensors, data, t.bytes);
  offset_ = t.offset + t.bytes;
  tensors_.push_back(std::move(t));
}

fs::path CheckpointWriter::commit(const CheckpointIdentity& identity, const RunnerState& state, uint32_t keep) {
  if (latest_checkpoint(dir_) == final_)
    throw CheckpointError(fmt::format("{}: is the latest checkpoint; it is not replaced", final_.string()));
  if (::fsync(fd_) != 0) system_error(temp_ / kTensors, "cannot fsync");
  ::close(fd_);
  fd_ = -1;
  write_file_durably(temp_ / kManifest, manifest_json(identity, state, tensors_, offset_));
  sync_directory(temp_);
  // A checkpoint of this epoch from an earlier attempt (not `latest`'s) gives way.
  const fs::path displaced = temp_.string() + ".old";
  remove_quietly(displaced);
  if (fs::exists(final_)) fs::rename(final_, displaced);
  fs::rename(temp_, final_);
  temp_.clear();
  sync_directory(dir_);
  remove_quietly(displaced);
  const fs::path latest_temp = dir_ / ".latest.tmp";
  write_file_durably(latest_temp, final_.filename().string() + "\n");
  fs::rename(latest_temp, dir_ / kLatest);
  sync_directory(dir_);
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
  std::error_code ec;
  const uint64_t size = fs::file_size(tensors, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot read it: {}", tensors.string(), ec.message()));
  if (size != manifest_.tensors_bytes)
    throw CheckpointError(fmt::format("{}: {} bytes, but its manifest says {}: the checkpoint is {}", tensors.string(),
                                      size, manifest_.tensors_bytes, size < manifest_.tensors_bytes ? "truncated" : "damaged"));
  for (const TensorRecord& t : manifest_.tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    if (t.bytes != count * mlph_dtype_size(t.dtype) || t.offset + t.bytes > size)
      throw CheckpointError(fmt::format("{}: tensor '{}' does not fit its shape or the file", manifest.string(), t.name));
    const std::vector<std::byte> data = read(t);
    if (const uint32_t crc = crc32_of(data.data(), data.size()); crc != t.crc32)
      throw CheckpointError(fmt::format("{}: tensor '{}{}{}' fails its CRC32 check (stored {:08x}, computed {:08x}): the "
                                        "file is corrupt",
                                        tensors.string(), t.name, t.slot.empty() ? "" : "/", t.slot, t.crc32, crc));
  }
}

const TensorRecord* CheckpointReader::find(const std::string& name, const std::string& slot) const {
  for (const TensorRecord& t : manifest_.tensors)
    if (t.name == name && t.slot == slot) return &t;
  return nullptr;
}

std::vector<std::byte> CheckpointReader::read(const TensorRecord& t) const {
  const fs::path file = dir_ / kTensors;
  Fd f(file, O_RDONLY);
  std::vector<std::byte> data(t.bytes);
  for (uint64_t done = 0; done < t.bytes;) {
    const ssize_t r = ::pread(f.get(), data.data() + done, t.bytes - done, static_cast<off_t>(t.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) system_error(file, "cannot read");
    if (r == 0) throw CheckpointError(fmt::format("{}: ends inside tensor '{}': the checkpoint is truncated", file.string(), t.name));
    done += static_cast<uint64_t>(r);
  }
  return data;
}

}  // namespace mlph::core
