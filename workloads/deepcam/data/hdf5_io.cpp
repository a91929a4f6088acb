#include "hdf5_io.hpp"

#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <type_traits>

#include "mlph/sdk/util/text.hpp"

namespace mlph::deepcam {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "Hdf5Writer keeps hid_t as int64_t");

// ---- Nothing outside the file, nothing larger than the sample ----------------------------------
// HDF5 can reach outside a file in four ways: external links, external raw storage, virtual
// datasets and filter plug-ins loaded from disk. A sample read refuses the first three (checked per
// link and dataset below) and never loads a plug-in. It reads no compressed data either: HDF5
// inflates a deflate chunk to whatever size its stream has before it truncates it to the chunk (a
// few KiB could ask for gigabytes), and its built-in filters cannot be replaced by a bounded one.
void make_hdf5_self_contained() {
  static const bool done = H5PLset_loading_state(0) >= 0;
  (void)done;
}

// Debian's HDF5 is built without thread safety, and its error-printing switch is per thread: every
// use of HDF5 here holds this lock and silences the library's own stderr report.
std::mutex& hdf5_lock() {
  static std::mutex lock;
  return lock;
}

class Session {
 public:
  Session() : guard_(hdf5_lock()) {
    H5Eget_auto2(H5E_DEFAULT, &handler_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    make_hdf5_self_contained();
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

// The file image callbacks of an image read in place: HDF5's core driver asks for buffers and
// copies the image into them; these hand it the caller's bytes and never free them. (HDF5's own
// H5LTopen_file_image does the same, but leaks 72 bytes of its callback state for every file.)
struct InPlaceImage {
  const void* data;
  size_t size;
};
H5FD_file_image_callbacks_t in_place_callbacks(InPlaceImage* image) {
  return {[](size_t size, H5FD_file_image_op_t, void* udata) -> void* {
            const auto* in = static_cast<InPlaceImage*>(udata);
            return size == in->size ? const_cast<void*>(in->data) : nullptr;
          },
          [](void* dest, const void* src, size_t size, H5FD_file_image_op_t, void*) -> void* {
            if (dest != src) std::memcpy(dest, src, size);
            return dest;
          },
          [](void*, size_t, H5FD_file_image_op_t, void*) -> void* { return nullptr; },  // read-only: never grows
          [](void*, H5FD_file_image_op_t, void*) -> herr_t { return 0; },
          [](void* udata) -> void* { return udata; },
          [](void*) -> herr_t { return 0; },
          image};
}

// A file image opened read-only in place; `file` must outlive it.
class Image {
 public:
  Image(std::span<const std::byte> file, const std::string& name)
      : name_(name), image_{file.data(), file.size()}, file_(open(file, name, image_), H5Fclose) {}

  // Opens `path`, checks its element class and shape, where its data lives (in the file only) and
  // how it is stored (chunks no larger than the shape, known filters only), and returns it with
  // its dtype.
  struct Dataset {
    std::unique_ptr<Id> id;
    H5T_class_t type_class;
    size_t type_size;
  };
  Dataset dataset(const std::string& path, const std::vector<hsize_t>& expected) const {
    check_links(path);
    auto id = std::make_unique<Id>(H5Dopen2(file_.get(), path.c_str(), access_.get()), H5Dclose);
    if (!id->ok()) throw DataError(name_, "cannot open dataset '" + path + "'");
    const Id space(H5Dget_space(id->get()), H5Sclose);
    const Id type(H5Dget_type(id->get()), H5Tclose);
    const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0 || !type.ok()) throw DataError(name_, "cannot read the header of '" + path + "' (truncated file?)");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    if (dims != expected)
      throw DataError(name_, "'" + path + "' has shape " + dims_text(dims) + ", expected " + dims_text(expected));
    check_storage(id->get(), path, dims);
    return {std::move(id), H5Tget_class(type.get()), H5Tget_size(type.get())};
  }

  // The dataset's offset in the file when its `bytes` lie there contiguously in `file_type` (checked
  // by check_storage already to be inside the file, unfiltered where chunked).
  std::optional<uint64_t> contiguous(const Dataset& d, hid_t file_type, uint64_t bytes) const {
    const Id dcpl(H5Dget_create_plist(d.id->get()), H5Pclose);
    const Id type(H5Dget_type(d.id->get()), H5Tclose);
    if (!dcpl.ok() || !type.ok() || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Tequal(type.get(), file_type) <= 0 ||
        H5Dget_storage_size(d.id->get()) != bytes)
      return std::nullopt;
    const haddr_t offset = H5Dget_offset(d.id->get());
    if (offset == HADDR_UNDEF || offset > image_.size || bytes > image_.size - offset) return std::nullopt;
    return offset;
  }

  template <class T>
  std::vector<T> read(const Dataset& d, hid_t memory_type, size_t count, const std::string& path) const {
    std::vector<T> out(count);
    read_into(d, memory_type, out.data(), path);
    return out;
  }
  // The whole dataset into `out`, which holds as many elements as its (checked) shape.
  template <class T>
  void read_into(const Dataset& d, hid_t memory_type, T* out, const std::string& path) const {
    if (H5Dread(d.id->get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
      throw DataError(name_, "cannot read '" + path + "' (truncated or corrupt file?)");
  }

 private:
  static hid_t open(std::span<const std::byte> file, const std::string& name, InPlaceImage& image) {
    if (file.empty()) throw DataError(name, "empty file");
    const Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5FD_file_image_callbacks_t callbacks = in_place_callbacks(&image);
    // The core driver on the caller's bytes, no backing file: HDF5 reads the buffer in place.
    if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, false) < 0 ||
        H5Pset_file_image_callbacks(fapl.get(), &callbacks) < 0 ||
        H5Pset_file_image(fapl.get(), const_cast<std::byte*>(file.data()), file.size()) < 0)
      throw DataError(name, "cannot set up HDF5 to read the file from memory");
    const hid_t id = H5Fopen("in-memory image", H5F_ACC_RDONLY, fapl.get());
    if (id < 0) throw DataError(name, "not a readable HDF5 file (truncated or corrupt?), " + std::to_string(file.size()) + " bytes");
    return id;
  }

  // Every link on the way to `path` must be a hard link: an external link opens another file (a
  // FIFO there hangs the reader), a soft link may lead to one.
  void check_links(const std::string& path) const {
    for (size_t end = path.find('/'); ; end = path.find('/', end + 1)) {
      const std::string prefix = path.substr(0, end);
      if (H5Lexists(file_.get(), prefix.c_str(), access_.get()) <= 0) throw DataError(name_, "no dataset '" + path + "'");
      H5L_info_t info{};
      if (H5Lget_info(file_.get(), prefix.c_str(), &info, access_.get()) < 0)
        throw DataError(name_, "cannot read the link '" + prefix + "'");
      if (info.type != H5L_TYPE_HARD)
        throw DataError(name_, "'" + prefix + "' is " + (info.type == H5L_TYPE_SOFT ? "a soft link" : "an external link") +
                                   ": only data inside the file is read");
      if (end == std::string::npos) return;
    }
  }

  // Where and how the dataset's values are stored: in this file, in chunks no larger than the shape,
  // uncompressed (the shuffle and fletcher32 filters neither grow nor shrink the data).
  void check_storage(hid_t set, const std::string& path, const std::vector<hsize_t>& dims) const {
    const Id dcpl(H5Dget_create_plist(set), H5Pclose);
    if (!dcpl.ok()) throw DataError(name_, "cannot read the storage of '" + path + "'");
    const std::string outside = ": only data inside the file is read";
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout == H5D_VIRTUAL) throw DataError(name_, "'" + path + "' is a virtual dataset" + outside);
    if (const int external = H5Pget_external_count(dcpl.get()); external != 0)
      throw DataError(name_, "'" + path + "' is stored in " + std::to_string(external) + " external file" +
                                 (external == 1 ? "" : "s") + outside);
    if (layout != H5D_CHUNKED) return;
    std::vector<hsize_t> chunk(dims.size());
    if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(chunk.size()))
      throw DataError(name_, "cannot read the chunk shape of '" + path + "'");
    for (size_t i = 0; i < dims.size(); ++i)
      if (chunk[i] == 0 || chunk[i] > dims[i])
        throw DataError(name_, "'" + path + "' is stored in chunks of " + dims_text(chunk) + ", larger than its shape " +
                                   dims_text(dims));
    for (int i = 0, n = H5Pget_nfilters(dcpl.get()); i < n; ++i) {
      unsigned flags = 0, values[8];
      size_t n_values = 8;
      char filter_name[64] = "";
      const H5Z_filter_t filter = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &n_values, values,
                                                 sizeof filter_name, filter_name, nullptr);
      if (filter != H5Z_FILTER_SHUFFLE && filter != H5Z_FILTER_FLETCHER32)
        throw DataError(name_, "'" + path + "' is stored with filter " + std::to_string(filter) + " " +
                                   sdk::quoted(filter_name) +
                                   ": compressed data is not read, a chunk could inflate to any size (h5repack -f NONE "
                                   "writes an uncompressed copy)");
    }
  }

  // Link traversal that never follows an external link, even where a check above is bypassed.
  static hid_t link_access() {
    const hid_t access = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_elink_cb(
        access, [](const char*, const char*, const char*, const char*, unsigned*, hid_t, void*) -> herr_t { return -1; },
        nullptr);
    return access;
  }

  std::string name_;
  InPlaceImage image_;
  Id file_;
  Id access_{link_access(), H5Pclose};
};

std::string type_name(H5T_class_t type_class, size_t size) {
  const std::string bits = std::to_string(size * 8);
  if (type_class == H5T_FLOAT) return "float" + bits;
  if (type_class == H5T_INTEGER) return "int" + bits;
  return "a non-numeric type";
}

// NaN or infinity would reach the loss as NaN, naming nothing: refused here, where the file is known.
// Whether every value is finite: its exponent bits not all set, tested as integers (a loop the
// compiler vectorizes, unlike std::isfinite's), with no early exit.
bool all_finite(std::span<const float> data) {
  uint32_t infinite = 0;
  for (const float v : data) infinite |= (std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u;
  return infinite == 0;
}

void check_finite(std::span<const float> data, const std::string& name, int width, int channels) {
  if (all_finite(data)) return;
  const size_t at = static_cast<size_t>(std::find_if(data.begin(), data.end(), [](float v) { return !std::isfinite(v); }) -
                                        data.begin());
  const auto c = static_cast<size_t>(channels), w = static_cast<size_t>(width);
  throw DataError(name, "climate/data holds " + std::string(std::isnan(data[at]) ? "nan" : data[at] > 0 ? "inf" : "-inf") +
                            " at pixel (" + std::to_string(at / c / w) + ", " + std::to_string(at / c % w) + ") channel " +
                            std::to_string(at % c) + ": the data must be finite");
}

void check_labels(std::span<const double> values, const std::string& name, int width, std::span<int32_t> labels) {
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!(v == 0.0 || v == 1.0 || v == 2.0))
      throw DataError(name, "climate/labels_0 holds " + std::to_string(v) + " at pixel (" + std::to_string(i / width) +
                                ", " + std::to_string(i % width) + "): labels must be 0, 1 or 2");
    labels[i] = static_cast<int32_t>(v);
  }
}

}  // namespace

Sample decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels) {
  const auto pixels = static_cast<size_t>(height) * static_cast<size_t>(width);
  Sample s{std::vector<float>(pixels * static_cast<size_t>(channels)), std::vector<int32_t>(pixels)};
  decode_sample(file, name, height, width, channels, {s.data, s.labels});
  return s;
}

void decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels,
                   const SampleView& out) {
  std::optional<SampleLayout> ignored;
  decode_sample(file, name, height, width, channels, out, ignored);
}

size_t SampleLayout::label_bytes() const {
  switch (labels_type) {
    case LabelType::i8:
    case LabelType::u8: return 1;
    case LabelType::i16le: return 2;
    case LabelType::i32le:
    case LabelType::f32le: return 4;
    default: return 8;
  }
}

namespace {

// The label types read in place, as HDF5 names them.
std::optional<LabelType> label_type_of(const Image& image, const Image::Dataset& labels, uint64_t pixels,
                                       uint64_t& offset) {
  const std::pair<hid_t, LabelType> known[] = {{H5T_STD_I8LE, LabelType::i8},     {H5T_STD_U8LE, LabelType::u8},
                                               {H5T_STD_I16LE, LabelType::i16le}, {H5T_STD_I32LE, LabelType::i32le},
                                               {H5T_STD_I64LE, LabelType::i64le}, {H5T_IEEE_F32LE, LabelType::f32le},
                                               {H5T_IEEE_F64LE, LabelType::f64le}};
  for (const auto& [type, label] : known) {
    SampleLayout probe;
    probe.labels_type = label;
    if (const auto at = image.contiguous(labels, type, pixels * probe.label_bytes())) {
      offset = *at;
      return label;
    }
  }
  return std::nullopt;
}

// The i-th little-endian T of `bytes`.
template <class T>
T load_le(std::span<const std::byte> bytes, size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    auto* b = reinterpret_cast<unsigned char*>(&v);
    std::reverse(b, b + sizeof(T));
  }
  return v;
}

// Labels of type T (little-endian) into `labels`, each 0, 1 or 2; any other value is refused as
// check_labels refuses it (the values widened to double, as a whole decode reads them).
template <class T>
void take_labels(std::span<const std::byte> bytes, const std::string& name, int width, std::span<int32_t> labels) {
  bool valid = true;
  for (size_t i = 0; i < labels.size(); ++i) {
    const T v = load_le<T>(bytes, i);
    valid &= v == T(0) || v == T(1) || v == T(2);
    labels[i] = static_cast<int32_t>(v == T(1) ? 1 : v == T(2) ? 2 : 0);
  }
  if (valid) return;
  std::vector<double> values(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) values[i] = static_cast<double>(load_le<T>(bytes, i));
  check_labels(values, name, width, labels);
}

}  // namespace

bool read_sample_in_place(const RangeReader& read, const SampleLayout& layout, const std::string& name, int height,
                          int width, int channels, const SampleView& out, std::vector<std::byte>& scratch) {
  const auto pixels = static_cast<size_t>(height) * static_cast<size_t>(width);
  if (out.data.size() != pixels * static_cast<size_t>(channels) || out.labels.size() != pixels)
    throw std::invalid_argument("read_sample_in_place: the row does not hold a " + std::to_string(height) + "x" +
                                std::to_string(width) + "x" + std::to_string(channels) + " sample");
  std::byte edge{};
  if (!read(layout.file_bytes - 1, std::span(&edge, 1)) || read(layout.file_bytes, std::span(&edge, 1))) return false;
  constexpr size_t kPiece = 1 << 16;  // values checked while still in the core's L2 (256 KiB: 1 MiB did not stay)
  for (size_t done = 0; done < out.data.size(); done += kPiece) {
    const std::span<float> piece = out.data.subspan(done, std::min(kPiece, out.data.size() - done));
    if (!read(layout.data_offset + done * sizeof(float), std::as_writable_bytes(piece))) return false;
    if constexpr (std::endian::native == std::endian::big)
      for (float& v : piece) {
        auto* b = reinterpret_cast<unsigned char*>(&v);
        std::reverse(b, b + 4);
      }
    if (!all_finite(piece)) check_finite(out.data.first(done + piece.size()), name, width, channels);  // names the first
  }
  scratch.resize(pixels * layout.label_bytes());
  if (!read(layout.labels_offset, scratch)) return false;
  switch (layout.labels_type) {
    case LabelType::i8: take_labels<int8_t>(scratch, name, width, out.labels); break;
    case LabelType::u8: take_labels<uint8_t>(scratch, name, width, out.labels); break;
    case LabelType::i16le: take_labels<int16_t>(scratch, name, width, out.labels); break;
    case LabelType::i32le: take_labels<int32_t>(scratch, name, width, out.labels); break;
    case LabelType::i64le: take_labels<int64_t>(scratch, name, width, out.labels); break;
    case LabelType::f32le: take_labels<float>(scratch, name, width, out.labels); break;
    case LabelType::f64le: take_labels<double>(scratch, name, width, out.labels); break;
  }
  return true;
}

void decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels,
                   const SampleView& out, std::optional<SampleLayout>& layout) {
  layout.reset();
  SampleLayout found{file.size(), 0, 0, LabelType::i32le};
  bool contiguous = true;
  const Session session;
  const Image image(file, name);
  const auto h = static_cast<hsize_t>(height), w = static_cast<hsize_t>(width), c = static_cast<hsize_t>(channels);
  if (out.data.size() != h * w * c || out.labels.size() != h * w)
    throw std::invalid_argument("decode_sample: room for " + std::to_string(out.data.size()) + " values and " +
                                std::to_string(out.labels.size()) + " labels, not a " + std::to_string(height) + "x" +
                                std::to_string(width) + "x" + std::to_string(channels) + " sample");
  {
    const Image::Dataset data = image.dataset("climate/data", {h, w, c});
    if (data.type_class != H5T_FLOAT || data.type_size != 4)
      throw DataError(name, "climate/data is " + type_name(data.type_class, data.type_size) + ", expected float32");
    image.read_into(data, H5T_NATIVE_FLOAT, out.data.data(), "climate/data");
    check_finite(out.data, name, width, channels);
    const auto at = image.contiguous(data, H5T_IEEE_F32LE, h * w * c * 4);
    contiguous = at.has_value();
    found.data_offset = at.value_or(0);
  }
  const Image::Dataset labels = image.dataset("climate/labels_0", {h, w});
  if (labels.type_class != H5T_INTEGER && labels.type_class != H5T_FLOAT)
    throw DataError(name, "climate/labels_0 is " + type_name(labels.type_class, labels.type_size) +
                              ", expected integer or float class indices");
  // Read as double: exact for every integer label, and a fractional float label is caught.
  check_labels(image.read<double>(labels, H5T_NATIVE_DOUBLE, h * w, "climate/labels_0"), name, width, out.labels);
  if (!contiguous) return;
  if (const auto type = label_type_of(image, labels, h * w, found.labels_offset)) {
    found.labels_type = *type;
    layout = found;
  }
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
