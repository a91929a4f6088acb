#include "emulated_device.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace mlph::emulated {
namespace {

constexpr size_t kDeviceAlignment = 256, kPinnedAlignment = 64;
constexpr unsigned char kPoison = 0xff;  // every float of it is a NaN

size_t env_size(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  return text && *text ? static_cast<size_t>(std::strtoull(text, nullptr, 10)) : fallback;
}

// A caller's bug that a real device's runtime would crash on too (its free is called across the ABI,
// where no exception may go).
[[noreturn]] void misuse(const char* what) {
  std::fprintf(stderr, "emulated device: %s\n", what);
  std::abort();
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The arena and who may touch it. Accessible while `open_` > 0 (tasks running, or the allocator
// poisoning), PROT_NONE otherwise.
class Device {
 public:
  Device() : size_(round_up(env_size("MLPH_EMULATED_DEVICE_BYTES", size_t{8} << 30), 4096)) {
    void* base = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("emulated device: cannot reserve its memory");
    base_ = static_cast<std::byte*>(base);
    // Opening and closing the arena rewrites the protection of every page in use, at every stream
    // task and copy: in huge pages, a model of DeepCAM's size (1 GB with its optimizer state) takes
    // microseconds instead of tens of milliseconds. A kernel without transparent huge pages ignores it.
    madvise(base, size_, MADV_HUGEPAGE);
    free_[0] = size_;
  }
  ~Device() { munmap(base_, size_); }

  void open() {
    std::lock_guard lock(mutex_);
    if (open_++ == 0) protect(PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard lock(mutex_);
    if (--open_ == 0) protect(PROT_NONE);
  }

  void* allocate(size_t bytes) {
    const size_t size = round_up(std::max<size_t>(bytes, 1), kDeviceAlignment);
    std::byte* data = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto hole = free_.begin();
      while (hole != free_.end() && hole->second < size) ++hole;  // first fit
      if (hole == free_.end()) throw std::bad_alloc();
      const size_t offset = hole->first, left = hole->second - size;
      free_.erase(hole);
      if (left > 0) free_[offset + size] = left;
      used_[offset] = size;
      data = base_ + offset;
    }
    poison(data, size);
    return data;
  }

  void release(void* data) {
    if (!data) return;
    size_t offset = 0, size = 0;
    {
      std::lock_guard lock(mutex_);
      offset = static_cast<size_t>(static_cast<std::byte*>(data) - base_);
      const auto found = used_.find(offset);
      if (found == used_.end()) misuse("freeing device memory it did not allocate");
      size = found->second;
    }
    poison(data, size);
    std::lock_guard lock(mutex_);
    used_.erase(offset);
    auto next = free_.emplace(offset, size).first;
    if (auto after = std::next(next); after != free_.end() && next->first + next->second == after->first) {
      next->second += after->second;
      free_.erase(after);
    }
    if (next != free_.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == next->first) {
        before->second += next->second;
        free_.erase(next);
      }
    }
  }

  bool contains(const void* data, size_t bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    if (p < base_ || p >= base_ + size_) return false;
    const auto offset = static_cast<size_t>(p - base_);
    std::lock_guard lock(mutex_);
    auto found = used_.upper_bound(offset);
    if (found == used_.begin()) return false;
    --found;
    return offset + bytes <= found->first + found->second;
  }

  size_t size() const { return size_; }

 private:
  void protect(int mode) {
    if (mprotect(base_, size_, mode) != 0) throw std::runtime_error("emulated device: mprotect failed");
  }
  void poison(void* data, size_t size) {
    open();
    std::memset(data, kPoison, size);
    close();
  }

  const size_t size_;
  std::byte* base_ = nullptr;
  std::mutex mutex_;
  int open_ = 0;
  std::map<size_t, size_t> free_, used_;  // offset -> size
};

Device& device() {
  static Device d;
  return d;
}

struct PinnedBlocks {
  std::mutex mutex;
  std::map<const std::byte*, size_t> blocks;
};
PinnedBlocks& pinned() {
  static PinnedBlocks p;
  return p;
}

}  // namespace

struct Stream::State {
  std::mutex mutex;
  std::condition_variable wake, progress;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0, finished = 0;  // tickets: the last one handed out, the last one run or skipped
  int waiting = 0;                      // callers in wait or synchronize
  bool stop = false;
  std::exception_ptr error;
  std::chrono::microseconds delay{env_size("MLPH_EMULATED_DEVICE_DELAY_US", 200)};
  std::thread worker;

  void wait(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
    if (finished >= ticket) return;
    ++waiting;
    wake.notify_all();
    progress.wait(lock, [&] { return finished >= ticket; });
    --waiting;
  }

  void serve() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      // The work runs later than the call that enqueued it, unless someone waits for it (a copy the
      // caller needs now need not pay for the emulation).
      wake.wait_for(lock, delay, [&] { return stop || waiting > 0; });
      lock.unlock();
      device().open();
      lock.lock();
      for (bool last = false; !last;) {  // everything queued meanwhile, with the arena open once
        std::function<void()> task = std::move(queue.front());
        queue.pop_front();
        const bool failed = error != nullptr;
        lock.unlock();
        if (!failed) {
          try {
            task();
          } catch (...) {
            std::lock_guard keep(mutex);
            if (!error) error = std::current_exception();
          }
        }
        lock.lock();
        last = queue.empty();
        if (last) {  // closed before whoever waits for this task goes on
          lock.unlock();
          device().close();
          lock.lock();
        }
        ++finished;
        progress.notify_all();
      }
    }
  }
};

Stream::Stream() : state_(std::make_unique<State>()) {
  state_->worker = std::thread([s = state_.get()] { s->serve(); });
}

Stream::~Stream() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  state_->worker.join();
}

uint64_t Stream::enqueue(std::function<void()> task) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(state_->mutex);
    state_->queue.push_back(std::move(task));
    ticket = ++state_->enqueued;
  }
  state_->wake.notify_all();
  return ticket;
}

void Stream::wait(uint64_t ticket) {
  std::unique_lock lock(state_->mutex);
  state_->wait(lock, ticket);
}

void Stream::synchronize() {
  std::unique_lock lock(state_->mutex);
  state_->wait(lock, state_->enqueued);
  if (std::exception_ptr error = std::exchange(state_->error, nullptr)) std::rethrow_exception(error);
}

void* device_malloc(size_t bytes) { return device().allocate(bytes); }
void device_free(void* data) { device().release(data); }
size_t device_memory_bytes() { return device().size(); }
bool is_device(const void* data, size_t bytes) { return device().contains(data, bytes); }

void* pinned_malloc(size_t bytes) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), kPinnedAlignment);
  auto* data = static_cast<std::byte*>(::operator new(size, std::align_val_t(kPinnedAlignment)));
  std::lock_guard lock(pinned().mutex);
  pinned().blocks[data] = size;
  return data;
}

void pinned_free(void* data) {
  if (!data) return;
  size_t size = 0;
  {
    std::lock_guard lock(pinned().mutex);
    const auto found = pinned().blocks.find(static_cast<std::byte*>(data));
    if (found == pinned().blocks.end()) misuse("freeing pinned memory it did not allocate");
    size = found->second;
    pinned().blocks.erase(found);
  }
  std::memset(data, kPoison, size);  // a batch read after it was freed reads NaN
  ::operator delete(data, std::align_val_t(kPinnedAlignment));
}

bool is_pinned(const void* data, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  std::lock_guard lock(pinned().mutex);
  auto found = pinned().blocks.upper_bound(p);
  if (found == pinned().blocks.begin()) return false;
  --found;
  return p >= found->first && p + bytes <= found->first + found->second;
}

}  // namespace mlph::emulated
