#include "hdf5_io.hpp"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <type_traits>

namespace mlph::deepcam {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "Hdf5Writer keeps hid_t as int64_t");

// The high-level library (file images) is not thread-safe, and HDF5's error-printing switch is
// per thread: every use of HDF5 here holds this lock and silences the library's own stderr report.
std::mutex& hdf5_lock() {
  static std::mutex lock;
  return lock;
}

class Session {
 public:
  Session() : guard_(hdf5_lock()) {
    H5Eget_auto2(H5E_DEFAULT, &handler_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Session() { H5Eset_auto2(H5E_DEFAULT, handler_, data_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  std::lock_guard<std::mutex> guard_;
  H5E_auto2_t handler_ = nullptr;
  void* data_ = nullptr;
};

// An HDF5 identifier closed with its own function.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

// A file image opened read-only in place; `file` must outlive it.
class Image {
 public:
  Image(std::span<const std::byte> file, const std::string& name)
      : name_(name), file_(open(file, name), H5Fclose) {}

  // Opens `path`, checks its element class and shape, and returns it with its dtype.
  struct Dataset {
    std::unique_ptr<Id> id;
    H5T_class_t type_class;
    size_t type_size;
  };
  Dataset dataset(const std::string& path, const std::vector<hsize_t>& expected) const {
    if (H5Lexists(file_.get(), "climate", H5P_DEFAULT) <= 0 || H5Lexists(file_.get(), path.c_str(), H5P_DEFAULT) <= 0)
      throw DataError(name_, "no dataset '" + path + "'");
    auto id = std::make_unique<Id>(H5Dopen2(file_.get(), path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!id->ok()) throw DataError(name_, "cannot open dataset '" + path + "'");
    const Id space(H5Dget_space(id->get()), H5Sclose);
    const Id type(H5Dget_type(id->get()), H5Tclose);
    const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0 || !type.ok()) throw DataError(name_, "cannot read the header of '" + path + "' (truncated file?)");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    if (dims != expected)
      throw DataError(name_, "'" + path + "' has shape " + dims_text(dims) + ", expected " + dims_text(expected));
    return {std::move(id), H5Tget_class(type.get()), H5Tget_size(type.get())};
  }

  template <class T>
  std::vector<T> read(const Dataset& d, hid_t memory_type, size_t count, const std::string& path) const {
    std::vector<T> out(count);
    if (H5Dread(d.id->get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
      throw DataError(name_, "cannot read '" + path + "' (truncated or corrupt file?)");
    return out;
  }

 private:
  static hid_t open(std::span<const std::byte> file, const std::string& name) {
    if (file.empty()) throw DataError(name, "empty file");
    // Read-only, no copy, no release: HDF5 reads the caller's buffer in place.
    const hid_t id = H5LTopen_file_image(const_cast<std::byte*>(file.data()), file.size(),
                                         H5LT_FILE_IMAGE_DONT_COPY | H5LT_FILE_IMAGE_DONT_RELEASE);
    if (id < 0) throw DataError(name, "not a readable HDF5 file (truncated or corrupt?), " + std::to_string(file.size()) + " bytes");
    return id;
  }
  std::string name_;
  Id file_;
};

std::string type_name(H5T_class_t type_class, size_t size) {
  const std::string bits = std::to_string(size * 8);
  if (type_class == H5T_FLOAT) return "float" + bits;
  if (type_class == H5T_INTEGER) return "int" + bits;
  return "a non-numeric type";
}

std::vector<int32_t> checked_labels(const std::vector<double>& values, const std::string& name, int width) {
  std::vector<int32_t> labels(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!(v == 0.0 || v == 1.0 || v == 2.0))
      throw DataError(name, "climate/labels_0 holds " + std::to_string(v) + " at pixel (" + std::to_string(i / width) +
                                ", " + std::to_string(i % width) + "): labels must be 0, 1 or 2");
    labels[i] = static_cast<int32_t>(v);
  }
  return labels;
}

}  // namespace

Sample decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels) {
  const Session session;
  const Image image(file, name);
  const auto h = static_cast<hsize_t>(height), w = static_cast<hsize_t>(width), c = static_cast<hsize_t>(channels);
  Sample s;
  {
    const Image::Dataset data = image.dataset("climate/data", {h, w, c});
    if (data.type_class != H5T_FLOAT || data.type_size != 4)
      throw DataError(name, "climate/data is " + type_name(data.type_class, data.type_size) + ", expected float32");
    s.data = image.read<float>(data, H5T_NATIVE_FLOAT, h * w * c, "climate/data");
  }
  const Image::Dataset labels = image.dataset("climate/labels_0", {h, w});
  if (labels.type_class != H5T_INTEGER && labels.type_class != H5T_FLOAT)
    throw DataError(name, "climate/labels_0 is " + type_name(labels.type_class, labels.type_size) +
                              ", expected integer or float class indices");
  // Read as double: exact for every integer label, and a fractional float label is caught.
  s.labels = checked_labels(image.read<double>(labels, H5T_NATIVE_DOUBLE, h * w, "climate/labels_0"), name, width);
  return s;
}

Stats decode_stats(std::span<const std::byte> file, const std::string& name, int channels) {
  const Session session;
  const Image image(file, name);
  const auto c = static_cast<hsize_t>(channels);
  const Image::Dataset min_set = image.dataset("climate/minval", {c});
  const Image::Dataset max_set = image.dataset("climate/maxval", {c});
  for (const Image::Dataset* d : {&min_set, &max_set})
    if (d->type_class != H5T_FLOAT || (d->type_size != 4 && d->type_size != 8))
      throw DataError(name, "climate/minval and climate/maxval must be float32 or float64, found " +
                                type_name(d->type_class, d->type_size));
  const std::vector<double> lo = image.read<double>(min_set, H5T_NATIVE_DOUBLE, c, "climate/minval");
  const std::vector<double> hi = image.read<double>(max_set, H5T_NATIVE_DOUBLE, c, "climate/maxval");
  const bool single = min_set.type_size == 4 && max_set.type_size == 4;
  Stats stats;
  for (size_t i = 0; i < c; ++i) {
    if (!std::isfinite(lo[i]) || !std::isfinite(hi[i]) || !(hi[i] > lo[i]))
      throw DataError(name, "channel " + std::to_string(i) + " has min " + std::to_string(lo[i]) + " and max " +
                                std::to_string(hi[i]) + ": the normalization 1/(max-min) needs max > min");
    stats.shift.push_back(static_cast<float>(lo[i]));
    // The reference computes 1/(max-min) in the stats' own dtype, then uses it as float32.
    stats.scale.push_back(single ? 1.0f / (static_cast<float>(hi[i]) - static_cast<float>(lo[i]))
                                 : static_cast<float>(1.0 / (hi[i] - lo[i])));
  }
  return stats;
}

Hdf5Writer::Hdf5Writer(std::string path) : path_(std::move(path)) {
  const Session session;
  file_ = H5Fcreate((path_ + ".partial").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw DataError(path_ + ".partial", "cannot create the HDF5 file");
}

Hdf5Writer::~Hdf5Writer() {
  if (file_ < 0) return;
  {
    const Session session;
    H5Fclose(file_);
  }
  std::error_code ignored;
  std::filesystem::remove(path_ + ".partial", ignored);
}

void Hdf5Writer::write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const float> values) {
  write_raw(dataset, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values.data(), values.size());
}
void Hdf5Writer::write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const double> values) {
  write_raw(dataset, shape, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data(), values.size());
}
void Hdf5Writer::write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const int32_t> values) {
  write_raw(dataset, shape, H5T_STD_I32LE, H5T_NATIVE_INT32, values.data(), values.size());
}

void Hdf5Writer::write_raw(const std::string& dataset, const std::vector<size_t>& shape, int64_t file_type,
                           int64_t memory_type, const void* values, size_t count) {
  const Session session;
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  size_t expected = 1;
  for (size_t d : shape) expected *= d;
  if (expected != count) throw DataError(path_, "'" + dataset + "': " + std::to_string(count) + " values for shape " + dims_text(dims));
  const Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  const Id links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.get(), 1);
  const Id set(H5Dcreate2(file_, dataset.c_str(), file_type, space.get(), links.get(), H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!set.ok() || H5Dwrite(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0)
    throw DataError(path_, "cannot write '" + dataset + "' (disk full?)");
}

void Hdf5Writer::commit() {
  {
    const Session session;
    const herr_t closed = H5Fclose(file_);
    file_ = -1;
    if (closed < 0) throw DataError(path_ + ".partial", "cannot close the HDF5 file (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(path_ + ".partial", path_, ec);
  if (ec) throw DataError(path_, "cannot rename into place: " + ec.message());
}

}  // namespace mlph::deepcam
