// comms/mpi's transport, also comms/nccl's host side: see mpi_transport.hpp.
#include "mpi_transport.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using mlph::sdk::fail;
using Clock = std::chrono::steady_clock;

// ---- 16-bit floats: MPI has no such types, so they reduce through user ops over MPI_UINT16_T.

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? sign | 0x7F800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | (abs > 0x7F800000u ? 0x7E00 : 0x7C00);  // NaN, Inf
  if (abs >= 0x477FF000u) return sign | 0x7C00;                                 // rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half, exact in float arithmetic
    float a;
    std::memcpy(&a, &abs, sizeof a);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  return sign | static_cast<uint16_t>((abs + 0xFFFu + ((abs >> 13) & 1u) - 0x38000000u) >> 13);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_bf16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), bool Max>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Widen(a[i]), y = Widen(b[i]);
    b[i] = Narrow(Max ? (x > y ? x : y) : x + y);
  }
}

bool is_float(MLPH_DType t) {
  return t == MLPH_DTYPE_F32 || t == MLPH_DTYPE_F64 || t == MLPH_DTYPE_F16 || t == MLPH_DTYPE_BF16;
}

const char* dtype_name(MLPH_DType t) {
  static const char* names[] = {"f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8"};
  return static_cast<unsigned>(t) < 9 ? names[t] : "unknown";
}

// Divides `count` elements by `ranks` in place: AVERAGE is SUM then this.
void divide(void* data, size_t count, MLPH_DType t, int ranks) {
  const auto each16 = [&](float (*widen)(uint16_t), uint16_t (*narrow)(float)) {
    auto* p = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < count; ++i) p[i] = narrow(widen(p[i]) / static_cast<float>(ranks));
  };
  switch (t) {
    case MLPH_DTYPE_F32:
      for (size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] /= static_cast<float>(ranks);
      break;
    case MLPH_DTYPE_F64:
      for (size_t i = 0; i < count; ++i) static_cast<double*>(data)[i] /= ranks;
      break;
    case MLPH_DTYPE_F16: each16(half_to_float, float_to_half); break;
    case MLPH_DTYPE_BF16: each16(bf16_to_float, float_to_bf16); break;
    default: break;
  }
}

// The largest count one MPI call takes (its counts are int).
constexpr size_t kMaxCount = size_t{1} << 30;

MPI_Datatype mpi_type(MLPH_DType t, const std::string& name) {
  switch (t) {
    case MLPH_DTYPE_F32: return MPI_FLOAT;
    case MLPH_DTYPE_F64: return MPI_DOUBLE;
    case MLPH_DTYPE_F16:
    case MLPH_DTYPE_BF16: return MPI_UINT16_T;
    case MLPH_DTYPE_I8: return MPI_INT8_T;
    case MLPH_DTYPE_I16: return MPI_INT16_T;
    case MLPH_DTYPE_I32: return MPI_INT32_T;
    case MLPH_DTYPE_I64: return MPI_INT64_T;
    case MLPH_DTYPE_U8: return MPI_UINT8_T;
  }
  fail(MLPH_INVALID_ARGUMENT, name + ": allreduce: unknown dtype " + std::to_string(t));
}

std::string format_seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

// Tags on the notices communicator.
constexpr int kStuckTag = 1;            // a rank that timed out says which call it is stuck in
constexpr int kProgressQuestion = 2;    // a watchdog asks how far the others got
constexpr int kProgressAnswer = 3;

}  // namespace

namespace mlph::comms {

MpiComm::MpiComm(const MLPH_HostApi* host, const mlph::sdk::Options& options)
    : MpiComm(host, "comms/mpi", [&] {
        options.allow_only({"timeout_s"}, "comms/mpi");
        return static_cast<double>(options.get_int("timeout_s", 300));
      }()) {}

MpiComm::MpiComm(const MLPH_HostApi* host, std::string name, double timeout_s)
    : host_(host), name_(std::move(name)), timeout_s_(timeout_s) {
  if (timeout_s_ <= 0) fail(MLPH_INVALID_ARGUMENT, name_ + ": option 'timeout_s' must be positive");
  initialize_mpi();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_dup(MPI_COMM_WORLD, &notices_), "MPI_Comm_dup");
  set_up();
  find_node_names();
}

// A communicator split from `parent` (see split): its options; MPI stays up for the parent.
MpiComm::MpiComm(Split, const MpiComm& parent, MPI_Comm comm, MPI_Comm notices)
    : host_(parent.host_), name_(parent.name_), timeout_s_(parent.timeout_s_), comm_(comm), notices_(notices),
      split_(true), node_names_(parent.node_names_) {
  set_up();
}

void MpiComm::set_up() {
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_set_errhandler(notices_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  find_world_ranks();
  check(MPI_Op_create(reduce16<half_to_float, float_to_half, false>, 1, &f16_sum_), "MPI_Op_create");
  check(MPI_Op_create(reduce16<half_to_float, float_to_half, true>, 1, &f16_max_), "MPI_Op_create");
  check(MPI_Op_create(reduce16<bf16_to_float, float_to_bf16, false>, 1, &bf16_sum_), "MPI_Op_create");
  check(MPI_Op_create(reduce16<bf16_to_float, float_to_bf16, true>, 1, &bf16_max_), "MPI_Op_create");
  find_node();
}

MpiComm::~MpiComm() {
  if (!broken_.empty()) {
    host_->log(MLPH_LOG_ERROR, name_.c_str(),
               ("rank " + std::to_string(rank_) + ": aborting every rank after: " + broken_).c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (MPI_Op* op : {&f16_sum_, &f16_max_, &bf16_sum_, &bf16_max_})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (notices_ != MPI_COMM_NULL) MPI_Comm_free(&notices_);
  if (owns_mpi_) MPI_Finalize();
}

MLPH_Topology MpiComm::topology() {
  return {sizeof(MLPH_Topology), nullptr, rank_, size_, local_rank_, local_size_, nodes_};
}

void MpiComm::allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) {
  if (op != MLPH_REDUCE_SUM && op != MLPH_REDUCE_AVERAGE && op != MLPH_REDUCE_MAX)
    fail(MLPH_INVALID_ARGUMENT, name_ + ": allreduce: unknown reduce op " + std::to_string(op));
  if (op == MLPH_REDUCE_AVERAGE && !is_float(dtype))
    fail(MLPH_INVALID_ARGUMENT,
         name_ + ": allreduce: AVERAGE of " + dtype_name(dtype) + " (integers) is not defined; use SUM");
  const MPI_Datatype type = mpi_type(dtype, name_);
  const MPI_Op mpi_op = reduce_op(dtype, op);
  const size_t element = mlph_dtype_size(dtype);
  std::vector<MPI_Request> requests;
  begin("allreduce", count * element);
  for (size_t first = 0; first < count; first += kMaxCount) {
    const int n = static_cast<int>(std::min(kMaxCount, count - first));
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<std::byte*>(data) + first * element, n, type, mpi_op, comm_,
                         &requests.back()),
          "MPI_Iallreduce");
  }
  wait(requests);
  if (op == MLPH_REDUCE_AVERAGE) divide(data, count, dtype, size_);
}

void MpiComm::broadcast(void* data, size_t bytes, int32_t root) {
  check_rank(root, "broadcast root");
  std::vector<MPI_Request> requests;
  begin("broadcast", bytes);
  for (size_t first = 0; first < bytes; first += kMaxCount) {
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Ibcast(static_cast<std::byte*>(data) + first, static_cast<int>(std::min(kMaxCount, bytes - first)),
                     MPI_BYTE, root, comm_, &requests.back()),
          "MPI_Ibcast");
  }
  wait(requests);
}

void MpiComm::allgather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank > kMaxCount)
    fail(MLPH_INVALID_ARGUMENT,
         name_ + ": allgather of " + std::to_string(bytes_per_rank) + " bytes per rank: at most 1 GiB per call");
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  begin("allgather", bytes_per_rank);
  check(MPI_Iallgather(send, static_cast<int>(bytes_per_rank), MPI_BYTE, recv, static_cast<int>(bytes_per_rank),
                       MPI_BYTE, comm_, requests.data()),
        "MPI_Iallgather");
  wait(requests);
}

void MpiComm::barrier() {
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  begin("barrier", 0);
  check(MPI_Ibarrier(comm_, requests.data()), "MPI_Ibarrier");
  wait(requests);
}

std::unique_ptr<MpiComm> MpiComm::split_mpi(int32_t color, int32_t key) {
  barrier();  // bounded: a dead or hung rank fails here rather than in MPI_Comm_split, which has no deadline
  MPI_Comm comm = MPI_COMM_NULL, notices = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
  check(MPI_Comm_split(notices_, color, key, &notices), "MPI_Comm_split");
  return std::unique_ptr<MpiComm>(new MpiComm(Split{}, *this, comm, notices));
}

void MpiComm::halo_exchange(void* data, const MLPH_HaloSpec& spec) {
  begin("halo exchange", halo_bytes(spec));
  mlph::sdk::halo::exchange(data, spec, rank_, size_, name_, [&](int32_t d, auto& t) { move_faces(d, t); });
}

void MpiComm::halo_accumulate(void* data, const MLPH_HaloSpec& spec) {
  begin("halo accumulate", halo_bytes(spec));
  mlph::sdk::halo::accumulate(data, spec, rank_, size_, name_, [&](int32_t d, auto& t) { move_faces(d, t); });
}

std::string MpiComm::where() const {
  const std::string node = nodes_ > 1 ? " on " + node_of(rank_) : "";
  if (!split_) return name_ + ": rank " + std::to_string(rank_) + " of " + std::to_string(size_) + node;
  return name_ + ": rank " + std::to_string(world_rank(rank_)) + " (" + std::to_string(rank_) + " of " +
         std::to_string(size_) + " in a split communicator)" + node;
}

// The node rank `r` of this communicator runs on, as MPI names it ("" before the names are known).
std::string MpiComm::node_of(int r) const {
  const auto world = static_cast<size_t>(world_rank(r));
  return world < node_names_.size() ? node_names_[world] : "";
}

void MpiComm::break_with(const std::string& reason) {
  if (broken_.empty()) broken_ = reason;
}

bool MpiComm::answers_progress() const {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

void MpiComm::answer_progress(int64_t progress) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kProgressQuestion, notices_, &flag, &status) != MPI_SUCCESS || !flag) return;
    long long question = 0;
    MPI_Recv(&question, 1, MPI_LONG_LONG, status.MPI_SOURCE, kProgressQuestion, notices_, MPI_STATUS_IGNORE);
    const long long answer = progress;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&answer, 1, MPI_LONG_LONG, status.MPI_SOURCE, kProgressAnswer, notices_, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);  // never waited for: the asker may be gone
  }
}

std::vector<std::optional<int64_t>> MpiComm::ask_progress(int64_t mine, double grace_s) {
  std::vector<std::optional<int64_t>> answers(static_cast<size_t>(size_));
  answers[static_cast<size_t>(rank_)] = mine;
  const long long question = mine;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&question, 1, MPI_LONG_LONG, r, kProgressQuestion, notices_, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);  // never waited for: the peer may be dead
  }
  const auto until = Clock::now() + std::chrono::duration<double>(grace_s);
  auto pending = size_ - 1;
  while (pending > 0 && Clock::now() < until) {
    answer_progress(mine);  // a peer asking at the same time waits for this rank's answer too
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kProgressAnswer, notices_, &flag, &status) != MPI_SUCCESS) break;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    long long answer = -1;
    MPI_Recv(&answer, 1, MPI_LONG_LONG, status.MPI_SOURCE, kProgressAnswer, notices_, MPI_STATUS_IGNORE);
    auto& slot = answers[static_cast<size_t>(status.MPI_SOURCE)];
    if (!slot) --pending;
    slot = answer;
  }
  return answers;
}

// Open MPI loads its components with dlopen and needs libmpi's symbols global; this plug-in was
// loaded RTLD_LOCAL, so promote the libmpi it links to before initializing.
void MpiComm::initialize_mpi() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;  // the program manages MPI itself
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    fail(MLPH_UNAVAILABLE, name_ + ": MPI_Init_thread failed");
  owns_mpi_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // Backends overlap gradient allreduces with backward from a second thread, one call at a time.
  if (provided < MPI_THREAD_SERIALIZED)
    host_->log(MLPH_LOG_WARNING, name_.c_str(),
               "this MPI supports only MPI_THREAD_FUNNELED or less: a backend calling comms from a second "
               "thread (overlapped gradient allreduce) is not safe");
}

// Messages name ranks as the job knows them (MPI_COMM_WORLD), also in a split communicator.
void MpiComm::find_world_ranks() {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  check(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
  check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  std::vector<int> mine(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) mine[static_cast<size_t>(r)] = r;
  world_ranks_.resize(mine.size());
  const int result = MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  check(result, "MPI_Group_translate_ranks");
}

// Ranks sharing memory are one node; counting the nodes' first ranks gives the node count.
void MpiComm::find_node() {
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  int32_t leaders = local_rank_ == 0 ? 1 : 0;
  allreduce(&leaders, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM);
  nodes_ = leaders;
}

// Every world rank's node name, so that a rank that times out can name the node of the ranks it
// lost. Outside the bounded calls (a plain MPI_Allgather, like the MPI_Comm_split_type before it),
// so that the calls' sequence numbers stay those of the collectives the caller made.
void MpiComm::find_node_names() {
  std::array<char, MPI_MAX_PROCESSOR_NAME> mine{};
  int length = 0;
  check(MPI_Get_processor_name(mine.data(), &length), "MPI_Get_processor_name");
  std::vector<char> all(mine.size() * static_cast<size_t>(size_));
  check(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
        "MPI_Allgather");
  node_names_.resize(static_cast<size_t>(size_));
  for (size_t r = 0; r < node_names_.size(); ++r) {
    const char* name = all.data() + r * mine.size();
    node_names_[r].assign(name, strnlen(name, mine.size()));
  }
}

// The bytes this rank sends (for the timeout message); 0 for a spec that halo::validate will refuse.
size_t MpiComm::halo_bytes(const MLPH_HaloSpec& spec) const {
  try {
    mlph::sdk::halo::validate(spec, size_, name_);
  } catch (const mlph::sdk::Error&) {
    return 0;
  }
  return mlph::sdk::halo::bytes_sent(spec, rank_);
}

// One dim of a halo exchange or accumulate: the faces to both neighbours and back, bounded by the deadline.
void MpiComm::move_faces(int32_t dim, mlph::sdk::halo::Transfer& t) {
  if (t.to_low.size() > kMaxCount) fail(MLPH_INVALID_ARGUMENT, name_ + ": " + operation_ + ": a face of more than 1 GiB");
  const int bytes = static_cast<int>(t.to_low.size());
  const int up = 2 * dim, down = 2 * dim + 1;  // tags: data moving to the higher / lower neighbour
  std::vector<MPI_Request> requests;
  if (t.low >= 0) {
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Irecv(t.from_low.data(), bytes, MPI_BYTE, t.low, up, comm_, &requests.back()), "MPI_Irecv");
  }
  if (t.high >= 0) {
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Irecv(t.from_high.data(), bytes, MPI_BYTE, t.high, down, comm_, &requests.back()), "MPI_Irecv");
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(t.to_high.data(), bytes, MPI_BYTE, t.high, up, comm_, &requests.back()), "MPI_Isend");
  }
  if (t.low >= 0) {
    requests.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(t.to_low.data(), bytes, MPI_BYTE, t.low, down, comm_, &requests.back()), "MPI_Isend");
  }
  wait(requests);
}

void MpiComm::check(int result, const char* call) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(result, text, &length);
  broken_ = where() + ": " + call + " failed: " + std::string(text, static_cast<size_t>(length));
  fail(MLPH_UNAVAILABLE, broken_);
}

void MpiComm::check_rank(int32_t r, const char* what) const {
  if (r < 0 || r >= size_)
    fail(MLPH_INVALID_ARGUMENT, where() + ": " + what + " " + std::to_string(r) + " is not a rank");
}

// Every collective starts here: refuses on a broken communicator, numbers the call for the notices.
void MpiComm::begin(const char* operation, size_t bytes) {
  if (!broken_.empty()) fail(MLPH_UNAVAILABLE, name_ + ": unusable after an earlier failure: " + broken_);
  ++sequence_;
  operation_ = operation;
  bytes_ = bytes;
}

// Polls `requests` until all complete or the deadline passes: spinning first (short collectives),
// then yielding the core with short sleeps (ranks may share cores).
void MpiComm::wait(std::vector<MPI_Request>& requests) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s_);
  std::vector<MPI_Status> statuses(requests.size());
  for (;;) {
    int done = 0;
    const int result = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, statuses.data());
    if (result == MPI_ERR_IN_STATUS)  // the request's own error says what went wrong
      for (const MPI_Status& status : statuses)
        if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING)
          check(status.MPI_ERROR, operation_.c_str());
    check(result, operation_.c_str());
    if (done) return;
    const auto now = Clock::now();
    if (now > deadline) time_out();
    if (now - start > std::chrono::microseconds(200)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Tells every other rank which call this rank is stuck in, listens for their notices for a short
// grace period, and fails naming the ranks not stuck in the same call (dead, hung or elsewhere).
void MpiComm::time_out() {
  const long long mine = static_cast<long long>(sequence_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&mine, 1, MPI_LONG_LONG, r, kStuckTag, notices_, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);  // never waited for: the peer may be dead
  }
  std::vector<bool> arrived(static_cast<size_t>(size_), false);
  arrived[static_cast<size_t>(rank_)] = true;
  const auto until = Clock::now() + std::chrono::duration<double>(std::min(2.0, timeout_s_));
  while (Clock::now() < until) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kStuckTag, notices_, &flag, &status) != MPI_SUCCESS) break;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    long long theirs = -1;
    MPI_Recv(&theirs, 1, MPI_LONG_LONG, status.MPI_SOURCE, kStuckTag, notices_, MPI_STATUS_IGNORE);
    if (theirs == mine) arrived[static_cast<size_t>(status.MPI_SOURCE)] = true;
  }
  // "1, 2" on one node; "2, 3 on node2" across nodes: the node lost with them.
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    if (arrived[static_cast<size_t>(r)]) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(world_rank(r));
    const bool node_ends = r + 1 == size_ || arrived[static_cast<size_t>(r + 1)] || node_of(r + 1) != node_of(r);
    if (nodes_ > 1 && node_ends) missing += " on " + node_of(r);
  }
  broken_ = where() + ": " + operation_ + " #" + std::to_string(sequence_) + " (" + std::to_string(bytes_) +
            " bytes) did not complete within " + format_seconds(timeout_s_) + " (comms.timeout_s): " +
            (missing.empty() ? "every rank reached it; the network or MPI is stuck"
                             : "rank(s) " + missing + " did not reach it (dead, hung, or in another call)");
  fail(MLPH_DEADLINE_EXCEEDED, broken_);
}

MPI_Op MpiComm::reduce_op(MLPH_DType t, MLPH_ReduceOp op) const {
  const bool max = op == MLPH_REDUCE_MAX;
  if (t == MLPH_DTYPE_F16) return max ? f16_max_ : f16_sum_;
  if (t == MLPH_DTYPE_BF16) return max ? bf16_max_ : bf16_sum_;
  return max ? MPI_MAX : MPI_SUM;
}

}  // namespace mlph::comms
