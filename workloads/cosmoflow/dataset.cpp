#include "dataset.hpp"

#include <algorithm>
#include <cstring>

#include "data/bytes.hpp"
#include "data/npy.hpp"
#include "data/tfrecord.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/storage/storage.hpp"

namespace mlph::cosmoflow {
using sdk::fail;
using sdk::spatial::Dims;

namespace {
std::string box_text(const VolumeBox& b) {
  std::string out = "[";
  for (size_t d = 0; d < 3; ++d) {
    if (d) out += ", ";
    out += std::to_string(b.at[d]);
    out += ":";
    out += std::to_string(b.at[d] + b.size[d]);
  }
  return out + "]";
}
}  // namespace

std::shared_ptr<const DecodedSample> SampleCache::find(uint64_t index, const VolumeBox& box) {
  std::lock_guard lock(mutex_);
  if (box != box_) return nullptr;
  const auto it = samples_.find(index);
  return it == samples_.end() ? nullptr : it->second;
}

void SampleCache::keep(uint64_t index, const VolumeBox& box, std::shared_ptr<const DecodedSample> sample) {
  std::lock_guard lock(mutex_);
  if (box != box_) {
    samples_.clear();
    box_ = box;
  }
  samples_.emplace(index, std::move(sample));
}

CosmoDataset::CosmoDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
                           const MLPH_StorageHandle& storage, std::shared_ptr<SampleCache> cache)
    : host_(host), settings_(settings), storage_(storage),
      cache_(cache ? std::move(cache) : std::make_shared<SampleCache>()) {
  box_.size.fill(settings_.edge);
  const std::string dir = sdk::split_directory(settings_.dir, split);
  const bool npy = settings_.format == "npy";
  files_ = sdk::list_files(host_, storage_, dir, npy ? "_data.npy" : ".tfrecord", "CosmoFlow data");
  if (files_.empty())
    fail(MLPH_NOT_FOUND, dir + ": no " + (npy ? "*_data.npy" : "*.tfrecord") + " files (data.format is " +
                             settings_.format + ")");
  const uint64_t limit = split == MLPH_SPLIT_TRAIN ? settings_.train_samples : settings_.valid_samples;
  const uint64_t per_file = npy ? 1 : static_cast<uint64_t>(settings_.records_per_file);
  samples_ = files_.size() * per_file;
  if (limit > 0 && limit < samples_) samples_ = limit;  // the reference takes sorted(files)[:n]
}

std::vector<std::byte> CosmoDataset::read_file(const std::string& path, size_t max_bytes) const {
  return sdk::read_file(host_, storage_, path, "CosmoFlow data", max_bytes);
}

// The volume's box_ of a whole [edge^3, 4] volume.
std::vector<int16_t> CosmoDataset::cut(std::vector<int16_t> volume) const {
  const int64_t e = settings_.edge;
  if (box_.size == std::array<int64_t, 3>{e, e, e}) return volume;
  const Dims extent{box_.size[0], box_.size[1], box_.size[2], 4};
  std::vector<int16_t> part(static_cast<size_t>(sdk::spatial::volume(extent)));
  sdk::spatial::copy_box(volume.data(), {{e, e, e, 4}, {box_.at[0], box_.at[1], box_.at[2], 0}}, part.data(),
                         {extent, {0, 0, 0, 0}}, extent);
  return part;
}

// A whole read refuses a file whose size is not what its header's shape needs; read by ranges, the
// same check is that no byte lies at `end`.
void CosmoDataset::refuse_bytes_past(const std::string& path, uint64_t end) const {
  std::byte beyond{};
  MLPH_Error* past_the_end = storage_.api->read_range(storage_.storage, path.c_str(), end, 1, &beyond);
  if (!past_the_end)
    fail(MLPH_DATA_LOSS, path + ": holds bytes past the " + std::to_string(end) +
                             " that its header's shape accounts for (a whole read refuses it too)");
  host_->error_free(past_the_end);
}

// An npy sample's box_ read alone: whole (D) planes in one range, else per plane the rows of the box
// with whole W rows (a W split cuts them here).
DecodedSample CosmoDataset::read_npy_box(const std::string& path) const {
  const auto range = [&](uint64_t offset, std::vector<std::byte>& into) {
    sdk::read_range(host_, storage_, path, offset, into.size(), into.data(), "CosmoFlow data");
  };
  std::vector<std::byte> head(64);  // numpy ends its header on a multiple of 64 bytes
  range(0, head);
  const uint64_t data = npy_data_offset(head, path);
  if (data > head.size()) head.resize(data), range(0, head);
  check_npy_volume(parse_npy_header(head, path), path, settings_.edge);
  refuse_bytes_past(path, data + volume_bytes(settings_.edge));

  const int64_t e = settings_.edge;
  const bool whole_planes = box_.size[1] == e && box_.size[2] == e;
  const int64_t planes = whole_planes ? box_.size[0] : 1, rows = whole_planes ? e : box_.size[1];
  const Dims read_shape{planes, rows, e, 4}, extent{planes, rows, box_.size[2], 4};
  const Dims box_shape{box_.size[0], box_.size[1], box_.size[2], 4};
  DecodedSample out{std::vector<int16_t>(static_cast<size_t>(sdk::spatial::volume(box_shape))), {}};
  std::vector<std::byte> bytes(static_cast<size_t>(sdk::spatial::volume(read_shape)) * sizeof(int16_t));
  std::vector<int16_t> values(bytes.size() / sizeof(int16_t));
  for (int64_t first = 0; first < box_.size[0]; first += planes) {
    const int64_t row = (box_.at[0] + first) * e + (whole_planes ? 0 : box_.at[1]);
    range(data + static_cast<uint64_t>(row * e * 4) * sizeof(int16_t), bytes);
    from_le_bytes(std::span<const std::byte>(bytes), values.data());
    sdk::spatial::copy_box(values.data(), {read_shape, {0, 0, box_.at[2], 0}}, out.x.data(),
                           {box_shape, {first, 0, 0, 0}}, extent);
  }
  check_counts(out.x, box_.at, box_.size, path);
  const std::string label = npy_label_path(path);
  out.y = read_npy_label(read_file(label, max_npy_bytes(kTargets * sizeof(float))), label);
  return out;
}

std::vector<DecodedSample> CosmoDataset::decode_file(size_t file_index) {
  const std::string& path = files_[file_index];
  std::vector<DecodedSample> out;
  try {
    const int64_t e = settings_.edge;
    if (settings_.format == "npy" && box_.size != std::array<int64_t, 3>{e, e, e} && sdk::has_read_range(storage_.api)) {
      out.push_back(read_npy_box(path));
    } else if (settings_.format == "npy") {
      Sample s;
      s.x.resize(volume_elements(settings_.edge));
      decode_into(file_index, {s.x, s.y});
      out.push_back({cut(std::move(s.x)), s.y});
    } else {
      const std::vector<std::byte> file =
          read_file(path, max_tfrecord_file_bytes(settings_.edge, settings_.records_per_file));
      for (Sample& s : read_tfrecord_samples(file, path, settings_.edge, settings_.records_per_file, engine()))
        out.push_back({cut(std::move(s.x)), s.y});
      if (out.size() != static_cast<size_t>(settings_.records_per_file))
        fail(MLPH_INVALID_ARGUMENT, path + ": holds " + std::to_string(out.size()) + " records, but data.records_per_file is " +
                                        std::to_string(settings_.records_per_file));
    }
  } catch (const DataError& e) {
    fail(MLPH_DATA_LOSS, e.what());
  }
  return out;
}

// Whole samples, one per file, not kept: decoded straight into the batch's row: an npy volume or a
// plain TFRecord's 'x' bytes read from the page cache into the row itself where the storage reads
// ranges (one copy), else (GZIP, or what the in-place paths do not take) through
// one file buffer that keeps its memory (no fresh pages per sample): the pipeline's fast path.
// decode_into reads the one sample of file `index` (sample `index`, one per file) whole into `out`.
bool CosmoDataset::decodes_in_place() const {
  const int64_t e = settings_.edge;
  return !settings_.cache && box_.size == std::array<int64_t, 3>{e, e, e} &&
         (settings_.format == "npy" || settings_.records_per_file == 1);
}

void CosmoDataset::decode_into(uint64_t index, const SampleView& out) {
  const std::string& path = files_[static_cast<size_t>(index)];
  try {
    if (settings_.format == "npy" && sdk::has_read_range(storage_.api) &&
        read_npy_volume_in_place(range_reader(path), path, settings_.edge, out.x)) {
      const std::string label = npy_label_path(path);
      const std::array<float, kTargets> y = read_npy_label(read_file(label, max_npy_bytes(kTargets * sizeof(float))), label);
      std::copy(y.begin(), y.end(), out.y.begin());
    } else if (settings_.format == "npy") {
      sdk::read_file(host_, storage_, path, "CosmoFlow data", max_npy_bytes(volume_bytes(settings_.edge)), file_bytes_);
      const std::vector<std::byte> label = read_file(npy_label_path(path), max_npy_bytes(kTargets * sizeof(float)));
      read_npy_sample(file_bytes_, label, path, settings_.edge, out);
    } else if (!(sdk::has_read_range(storage_.api) &&
                 read_tfrecord_sample_in_place(range_reader(path), path, settings_.edge, out, file_bytes_))) {
      sdk::read_file(host_, storage_, path, "CosmoFlow data", max_tfrecord_file_bytes(settings_.edge, 1), file_bytes_);
      read_tfrecord_sample(file_bytes_, path, settings_.edge, out, engine());
    }
  } catch (const DataError& e) {
    fail(MLPH_DATA_LOSS, e.what());
  }
}

gzip::Engine CosmoDataset::engine() const {
  return settings_.inflate == "zlib" ? gzip::Engine::zlib : gzip::Engine::libdeflate;
}

// Ranges of the file at `path` through the storage's read_range; any failure reads as "the file ends
// sooner": the caller then decodes the whole file, whose read says what went wrong.
RangeReader CosmoDataset::range_reader(const std::string& path) const {
  return [this, &path](uint64_t offset, std::span<std::byte> into) {
    MLPH_Error* error = storage_.api->read_range(storage_.storage, path.c_str(), offset, into.size(), into.data());
    if (!error) return true;
    host_->error_free(error);
    return false;
  };
}

// Sample `index` (box_ of it) copied to x and y: kept, or decoded (with the rest of its file, kept
// for the next sample) and kept when data.cache says so.
void CosmoDataset::copy_sample(uint64_t index, int16_t* x, float* y) {
  std::shared_ptr<const DecodedSample> kept = settings_.cache ? cache_->find(index, box_) : nullptr;
  const DecodedSample* s = kept.get();
  if (!s) {
    const uint64_t per_file = settings_.format == "npy" ? 1 : static_cast<uint64_t>(settings_.records_per_file);
    const size_t file = static_cast<size_t>(index / per_file);
    if (last_file_.first != file) last_file_ = {file, decode_file(file)};
    s = &last_file_.second[index % per_file];
    if (settings_.cache) cache_->keep(index, box_, std::make_shared<const DecodedSample>(*s));
  }
  std::memcpy(x, s->x.data(), s->x.size() * sizeof(int16_t));
  std::memcpy(y, s->y.data(), s->y.size() * sizeof(float));
}

void CosmoDataset::read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) {
  VolumeBox whole;
  whole.size.fill(settings_.edge);
  read_box(indices, n, inputs, n_inputs, whole);
}

void CosmoDataset::read_part(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs,
                             const MLPH_SamplePart& part) {
  if (n_inputs != 2) fail(MLPH_INVALID_ARGUMENT, "CosmoFlow reads two inputs (x, y), got " + std::to_string(n_inputs));
  if (inputs[0].ndim != 5)
    fail(MLPH_INVALID_ARGUMENT, "CosmoFlow read: x must be [batch, D, H, W, 4], got " +
                                    sdk::shape_string(inputs[0].shape, inputs[0].ndim));
  const int64_t* x = part.offsets;
  const int64_t* y = part.offsets + MLPH_MAX_DIMS;
  if (x[0] != 0 || x[4] != 0 || y[0] != 0 || y[1] != 0)
    fail(MLPH_INVALID_ARGUMENT, "CosmoFlow read: only x's D, H and W split over ranks; every rank reads all of y");
  VolumeBox box;
  for (size_t d = 0; d < 3; ++d) box.at[d] = x[d + 1], box.size[d] = inputs[0].shape[d + 1];
  read_box(indices, n, inputs, n_inputs, box);
}

void CosmoDataset::read_box(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs,
                            const VolumeBox& box) {
  if (n_inputs != 2) fail(MLPH_INVALID_ARGUMENT, "CosmoFlow reads two inputs (x, y), got " + std::to_string(n_inputs));
  for (size_t d = 0; d < 3; ++d)
    if (box.at[d] < 0 || box.size[d] < 1 || box.at[d] + box.size[d] > settings_.edge)
      fail(MLPH_INVALID_ARGUMENT, "CosmoFlow read: the part " + box_text(box) + " lies outside the " +
                                      volume_name(settings_.edge) + " volume");
  if (box != box_) {  // decoded samples hold the old box (the cache knows its box)
    box_ = box;
    last_file_ = {SIZE_MAX, {}};
  }
  const size_t volume = static_cast<size_t>(box.size[0] * box.size[1] * box.size[2] * 4);
  if (inputs[0].dtype != MLPH_DTYPE_I16 || static_cast<size_t>(sdk::numel(inputs[0])) != n * volume ||
      inputs[1].dtype != MLPH_DTYPE_F32 || sdk::numel(inputs[1]) != static_cast<int64_t>(n * 4))
    fail(MLPH_INVALID_ARGUMENT, "CosmoFlow read: input tensors do not match the batch of " + std::to_string(n));
  auto* x = static_cast<int16_t*>(inputs[0].data);
  auto* y = static_cast<float*>(inputs[1].data);
  for (size_t i = 0; i < n; ++i) {
    if (indices[i] >= samples_)
      fail(MLPH_OUT_OF_RANGE, "sample " + std::to_string(indices[i]) + " of a dataset of " + std::to_string(samples_));
    if (decodes_in_place()) {
      decode_into(indices[i], {{x + i * volume, volume}, std::span<float, kTargets>(y + i * kTargets, kTargets)});
      continue;
    }
    copy_sample(indices[i], x + i * volume, y + i * kTargets);
  }
}

}  // namespace mlph::cosmoflow
