// Data parallelism for host backends: averages the trainable parameters' gradients over the ranks
// in buckets, overlapped with the rest of backward. The gradients live in one host buffer in graph
// order; a bucket is a run of consecutive parameters (about kBucketBytes, last layers first, as
// backward finishes them). As soon as backward has run every node that reads a bucket's parameters,
// a comms thread allreduces it in place while backward goes on with the earlier layers.
// Every rank has the same graph, so the buckets and their order agree across ranks. The comms
// plug-in is called from that thread, one call at a time (comms/mpi asks for MPI_THREAD_MULTIPLE).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "mlph/comms.h"
#include "mlph/sdk/program/gradient_partition.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

class GradientBuckets {
 public:
  static constexpr size_t kBucketBytes = size_t{4} << 20;

  using Param = GradientParam;

  // `params` in graph order, tiling `grads`. The handle and the buffer outlive this object.
  GradientBuckets(const MLPH_HostApi* host, const MLPH_CommsHandle& comms, float* grads,
                  const std::vector<Param>& params, size_t bucket_bytes = kBucketBytes)
      : host_(host), comms_(comms), grads_(grads) {
    const size_t end = params.empty() ? 0 : params.back().offset + params.back().count;
    for (const GradientBucket& b : partition_gradients(params, end, bucket_bytes))
      buckets_.push_back({b.offset, b.count, b.ready_at});
    thread_ = std::thread([this] { serve(); });
  }
  ~GradientBuckets() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  size_t buckets() const { return buckets_.size(); }
  size_t launched() const { return next_; }

  // Before backward: waits out anything a failed step left in flight.
  void start() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return queue_.empty() && !busy_; });
    error_ = nullptr;
    next_ = 0;
  }

  // Backward has finished node `index` and every node after it: hands over the buckets now final.
  void node_done(int64_t index) {
    size_t end = next_;
    while (end < buckets_.size() && buckets_[end].ready_at >= index) ++end;
    launch(end);
  }

  // After backward: hands over the rest, waits for all, rethrows the first comms error.
  void finish() {
    launch(buckets_.size());
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Bucket {
    size_t offset, count;
    int64_t ready_at;  // the bucket is final once backward is done with this node
  };

  void launch(size_t end) {
    if (end <= next_) return;
    {
      std::lock_guard lock(mutex_);
      for (; next_ < end; ++next_) queue_.push_back(next_);
    }
    wake_.notify_all();
  }

  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      const Bucket b = buckets_[queue_.front()];
      queue_.pop_front();
      busy_ = true;
      const bool failed = error_ != nullptr;
      lock.unlock();
      std::exception_ptr error;
      if (!failed) {  // after a failure the communicator is unusable: skip the rest
        try {
          check(host_,
                comms_.api->allreduce(comms_.comm, grads_ + b.offset, b.count, MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE),
                "gradient allreduce");
        } catch (...) {
          error = std::current_exception();
        }
      }
      lock.lock();
      if (error && !error_) error_ = error;
      busy_ = false;
      done_.notify_all();
    }
  }

  const MLPH_HostApi* host_;
  MLPH_CommsHandle comms_;
  float* grads_;
  std::vector<Bucket> buckets_;  // in launch order
  size_t next_ = 0;              // the first bucket not yet handed over (the step's thread only)
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<size_t> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace mlph::sdk
