#include "mlph/core/crash.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

namespace mlph::core {
namespace {

// ---- text without allocation (the signal handler's) --------------------------------------------

// Appends to a fixed buffer, cutting what does not fit.
template <size_t N>
struct FixedText {
  std::array<char, N> data{};
  size_t size = 0;

  void add(const char* text, size_t n) {
    n = std::min(n, N - 1 - size);
    std::memcpy(data.data() + size, text, n);
    size += n;
    data[size] = '\0';
  }
  void add(const char* text) { add(text, std::strlen(text)); }
  void add_number(unsigned long long v) {
    char digits[24];
    size_t n = 0;
    do digits[n++] = static_cast<char>('0' + v % 10); while ((v /= 10) > 0);
    while (n > 0) add(&digits[--n], 1);
  }
  // As a JSON string's content (the log's "error").
  void add_json(const char* text) {
    static const char hex[] = "0123456789abcdef";
    for (const char* c = text; *c; ++c) {
      const auto u = static_cast<unsigned char>(*c);
      if (u == '"' || u == '\\') {
        const char escaped[2] = {'\\', *c};
        add(escaped, 2);
      } else if (u < 0x20) {
        const char escaped[6] = {'\\', 'u', '0', '0', hex[u >> 4], hex[u & 15]};
        add(escaped, 6);
      } else {
        add(c, 1);
      }
    }
  }
  void clear() {
    size = 0;
    data[0] = '\0';
  }
};

void write_all(int fd, const char* text, size_t n) {
  while (n > 0) {
    const ssize_t written = ::write(fd, text, n);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    text += written;
    n -= static_cast<size_t>(written);
  }
}
template <size_t N>
void write_all(int fd, const FixedText<N>& text) {
  write_all(fd, text.data.data(), text.size);
}

// ---- activities ----------------------------------------------------------------------------------

// One publishing thread's activity, claimed by its thread id. A spin flag guards the text: the
// handler cannot lock, and never waits long for it (a writer holds it for one copy).
struct Slot {
  std::atomic<pid_t> thread{0};
  std::atomic_flag busy;  // clear (C++20)
  FixedText<1024> what;
  FixedText<4096> file;
  int depth = 0;                        // Activities alive on the thread (only it touches this)
  std::unique_ptr<char[]> alt_stack;    // kept for the next thread that claims the slot
  bool own_alt_stack = false;           // installed by the claim (else the thread had one)
};
constexpr size_t kSlots = 16;  // the main thread, readers, a few more: a thread beyond goes unnamed
constexpr size_t kAltStackBytes = 64 * 1024;
std::array<Slot, kSlots> g_slots;

// Copies under the flag; `patient` is false in the handler, which reads anyway after a while.
template <class Fn>
void with_slot_text(Slot& slot, Fn&& fn, bool patient = true) {
  bool held = false;
  for (long i = 0; !held && (patient || i < 10'000'000); ++i) held = !slot.busy.test_and_set(std::memory_order_acquire);
  fn();
  if (held) slot.busy.clear(std::memory_order_release);
}

Slot* slot_of(pid_t thread) {
  for (Slot& s : g_slots)
    if (thread != 0 && s.thread.load() == thread) return &s;
  return nullptr;
}

Slot* claim_slot(pid_t thread) {
  for (Slot& s : g_slots) {
    pid_t free = 0;
    if (!s.thread.compare_exchange_strong(free, thread)) continue;
    // The handler runs on this stack, so a stack overflow can still be reported. A stack the
    // thread already has (a sanitizer's) is kept.
    stack_t current{};
    s.own_alt_stack = sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE);
    if (s.own_alt_stack) {
      if (!s.alt_stack) s.alt_stack = std::make_unique<char[]>(kAltStackBytes);
      const stack_t ours{s.alt_stack.get(), 0, kAltStackBytes};
      s.own_alt_stack = sigaltstack(&ours, nullptr) == 0;
    }
    return &s;
  }
  return nullptr;
}

void release_slot(Slot& s) {
  if (s.own_alt_stack) {
    const stack_t off{nullptr, SS_DISABLE, 0};
    sigaltstack(&off, nullptr);
  }
  with_slot_text(s, [&] {
    s.what.clear();
    s.file.clear();
  });
  s.thread.store(0);
}

void publish(Slot& s, const std::string& what) {
  with_slot_text(s, [&] {
    s.what.clear();
    s.what.add(what.c_str());
    s.file.clear();
  });
}

// "what, last file opened: file" into `out`.
template <size_t N>
void describe(Slot& s, FixedText<N>& out, bool patient) {
  with_slot_text(s, [&] {
    out.add(s.what.data.data());
    if (s.file.size > 0) {
      out.add(", last file opened: ");
      out.add(s.file.data.data());
    }
  }, patient);
}

// ---- last words ------------------------------------------------------------------------------------

struct LastWords {
  FixedText<256> program{};            // "mlperf-run" or "mlperf-run: rank 1"
  pid_t main_thread = 0;               // whose activity a crash on an unnamed thread reports
  std::atomic<bool>* log_stopped = nullptr;
  int log_fd = -1;
  MlLogger::LineTemplate run_stop;     // prepared: the handler only fills in the time and reason
  std::string log_note;                // "MLPerf log: <path> (run_stop: aborted)\n"
  std::atomic<pid_t> dying{0};         // the thread saying them (once per process)
  FixedText<8192> reason, line;
};
LastWords g_last;

constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[std::size(kCrashSignals)];

// Only one thread says the last words; another thread arriving meanwhile waits for the exit, and
// the speaker crashing in them exits at once.
void claim_last_words() {
  pid_t none = 0;
  const pid_t me = ::gettid();
  if (g_last.dying.compare_exchange_strong(none, me)) return;
  if (none == me) ::_exit(1);
  for (;;) ::pause();
}

// Writes g_last.reason as the last words ("program: <lead>reason") and exits 1.
[[noreturn]] void say_last_words(const char* lead) {
  FixedText<8192>& line = g_last.line;
  line.clear();
  line.add(g_last.program.data.data());
  line.add(": ");
  line.add(lead);
  line.add(g_last.reason.data.data());
  line.add("\n");
  write_all(STDERR_FILENO, line);
  std::atomic<bool>* stopped = g_last.log_stopped;
  if (g_last.log_fd >= 0 && stopped && !stopped->exchange(true)) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    line.clear();
    line.add(g_last.run_stop.before_time.data(), g_last.run_stop.before_time.size());
    line.add_number(static_cast<unsigned long long>(now.tv_sec) * 1000ULL +
                    static_cast<unsigned long long>(now.tv_nsec / 1'000'000));
    line.add(g_last.run_stop.before_text.data(), g_last.run_stop.before_text.size());
    line.add_json(g_last.reason.data.data());
    line.add(g_last.run_stop.after_text.data(), g_last.run_stop.after_text.size());
    write_all(g_last.log_fd, line);
    write_all(STDERR_FILENO, g_last.log_note.data(), g_last.log_note.size());
  }
  ::_exit(1);
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a signal";
  }
}

extern "C" void on_crash(int signal) {
  claim_last_words();
  FixedText<8192>& reason = g_last.reason;
  reason.add("crashed (");
  reason.add(signal_name(signal));
  reason.add(")");
  Slot* slot = slot_of(::gettid());
  if (!slot || slot->what.size == 0) slot = slot_of(g_last.main_thread);
  if (slot && slot->what.size > 0) {
    reason.add(" while ");
    describe(*slot, reason, false);
    if (slot->file.size > 0) reason.add(" (a defect in a library reading that file?)");
  }
  say_last_words("");
}

}  // namespace

Activity::Activity(const std::string& what) {
  const pid_t me = ::gettid();
  Slot* slot = slot_of(me);
  if (!slot) slot = claim_slot(me);
  published_ = slot != nullptr;
  if (!slot) return;
  if (slot->depth++ > 0) with_slot_text(*slot, [&] { outer_ = slot->what.data.data(); });
  publish(*slot, what);
}

Activity::~Activity() {
  if (!published_) return;
  Slot* slot = slot_of(::gettid());
  if (--slot->depth == 0) release_slot(*slot);
  else publish(*slot, outer_);
}

pid_t current_thread() { return ::gettid(); }

std::string last_file_of(pid_t thread) {
  Slot* slot = slot_of(thread);
  std::string file;
  if (slot) with_slot_text(*slot, [&] { file = slot->file.data.data(); });
  return file;
}

CrashHandler::CrashHandler(const std::string& program) {
  g_last.program.clear();
  g_last.program.add(program.c_str());
  g_last.main_thread = ::gettid();
  struct sigaction action {};
  action.sa_handler = on_crash;
  action.sa_flags = SA_ONSTACK;
  sigfillset(&action.sa_mask);  // nothing else runs on this thread while it speaks
  for (size_t i = 0; i < std::size(kCrashSignals); ++i) sigaction(kCrashSignals[i], &action, &g_previous[i]);
}

CrashHandler::~CrashHandler() {
  for (size_t i = 0; i < std::size(kCrashSignals); ++i) sigaction(kCrashSignals[i], &g_previous[i], nullptr);
}

void CrashHandler::set_rank(int rank, int size) {
  if (size <= 1) return;
  const std::string program = fmt::format("{}: rank {}", g_last.program.data.data(), rank);
  g_last.program.clear();
  g_last.program.add(program.c_str());
}

LogWatch::LogWatch(const MlLogger& log, std::atomic<bool>& stopped) {
  if (log.fd() < 0) return;
  g_last.run_stop = log.line_template("INTERVAL_END", "run_stop", {{"status", json("aborted")}}, "error");
  g_last.log_note = fmt::format("MLPerf log: {} (run_stop: aborted)\n", log.path().string());
  g_last.log_stopped = &stopped;
  g_last.log_fd = log.fd();
}

LogWatch::~LogWatch() {
  g_last.log_fd = -1;
  g_last.log_stopped = nullptr;
}

void abandon_run(const std::string& reason) {
  std::fflush(nullptr);  // what was printed before comes first
  claim_last_words();
  g_last.reason.add(reason.c_str());
  say_last_words("error: ");
}

// ---- the storage reads behind the activities' files -------------------------------------------------

struct WatchedStorage::Forward {
  static const WatchedStorage& self(MLPH_Storage* s) { return *reinterpret_cast<const WatchedStorage*>(s); }
  static MLPH_Error* list(MLPH_Storage* s, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->list(inner.storage, dir, suffix, each, ctx);
  }
  static MLPH_Error* read(MLPH_Storage* s, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size) {
    note_file(path);
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->read(inner.storage, path, alloc, ctx, size);
  }
  static MLPH_Error* stats(MLPH_Storage* s, MLPH_IoStats* out) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->stats(inner.storage, out);
  }
  static MLPH_Error* stage(MLPH_Storage* s, const char* dir, const MLPH_CommsHandle* comms, MLPH_StageStats* out) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->stage(inner.storage, dir, comms, out);
  }
  static MLPH_Error* read_range(MLPH_Storage* s, const char* path, uint64_t offset, size_t bytes, void* dst) {
    note_file(path);
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->read_range(inner.storage, path, offset, bytes, dst);
  }
  static void note_file(const char* path) {
    if (Slot* slot = slot_of(::gettid()); slot && path)
      with_slot_text(*slot, [&] {
        slot->file.clear();
        slot->file.add(path);
      });
  }
};

WatchedStorage::WatchedStorage(const MLPH_StorageHandle& inner) : inner_(inner) {
  // Every member forwards or stays NULL: a member copied from the inner table would be called with
  // this object as the inner plug-in's instance. The object's lifetime functions and abandon stay
  // the session's to call.
  const MLPH_StorageApi& in = *inner.api;
  const auto has = [&](size_t end) { return in.struct_size >= end; };
  api_.struct_size = sizeof api_;
  api_.list = Forward::list;
  api_.read = Forward::read;
  api_.stats = Forward::stats;
  if (has(MLPH_STRUCT_SIZE(MLPH_StorageApi, stage)) && in.stage) api_.stage = Forward::stage;
  if (has(MLPH_STRUCT_SIZE(MLPH_StorageApi, read_range)) && in.read_range) api_.read_range = Forward::read_range;
  handle_ = {sizeof handle_, nullptr, &api_, reinterpret_cast<MLPH_Storage*>(this)};
}

}  // namespace mlph::core
