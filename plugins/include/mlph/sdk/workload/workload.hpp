// Write a workload as C++ classes; `workload_api<Impl>()` generates the C table. Impl provides
//   static const MLPH_ParamSpec* params(size_t* n);
//   Impl(const MLPH_HostApi* host, const mlph::sdk::Options& config);
// and overrides the virtual members of Workload. Optionally it also has
//   std::vector<uint64_t> sample_order(uint32_t epoch, uint64_t n);   // ABI 1.2, MLPH_WorkloadApi.sample_order
//   static sdk::Benchmark benchmark();  // ABI 1.3: MLPH_WorkloadApi.benchmark_info and borrow_hparams
//   static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param);  // ABI 1.4 (sdk/workload/export.hpp)
#pragma once

#include <algorithm>
#include <concepts>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/util/plugin.hpp"
#include "mlph/sdk/workload/export.hpp"
#include "mlph/sdk/workload/hparams.hpp"
#include "mlph/workload.h"

namespace mlph::sdk {

// The directory of a split under a dataset root, as the references lay data out: <root>/train and
// <root>/validation. An empty root is an error saying how to give one.
inline std::string split_directory(const std::string& root, MLPH_Split split) {
  if (root.empty())
    fail(MLPH_INVALID_ARGUMENT, "no dataset: set data.dir (or --data DIR), or write one with --generate-data DIR");
  return root + (split == MLPH_SPLIT_TRAIN ? "/train" : "/validation");
}

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual uint64_t size() = 0;
  virtual void read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) = 0;
  // ABI 1.5, MLPH_WorkloadApi.dataset_read_part: only `part` of each sample (spatial parallelism).
  virtual void read_part(const uint64_t*, size_t, MLPH_Tensor*, size_t, const MLPH_SamplePart&) {
    fail(MLPH_UNIMPLEMENTED, "this workload reads whole samples only (no spatial parallelism)");
  }
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual MLPH_WorkloadInfo describe() = 0;
  virtual const MLPH_Graph* build_graph(uint32_t batch, uint64_t seed) = 0;
  virtual std::unique_ptr<Dataset> open(MLPH_Split split, const MLPH_StorageHandle& storage) = 0;
  virtual double learning_rate(uint32_t epoch, uint64_t step) = 0;
  virtual double metric(const double* sums, size_t n_sums, uint64_t samples) = 0;
  virtual void generate_data(const char* dir) = 0;
};

namespace detail {
using WorkloadBox = Boxed<Workload>;
using DatasetBox = Boxed<Dataset>;
inline WorkloadBox* unbox(MLPH_Workload* w) { return reinterpret_cast<WorkloadBox*>(w); }
inline DatasetBox* unbox(MLPH_Dataset* d) { return reinterpret_cast<DatasetBox*>(d); }
}  // namespace detail

// Fills no more of `out` than the caller has room for (its struct_size; 0 from callers of ABI 1.1).
inline void copy_info(MLPH_WorkloadInfo info, MLPH_WorkloadInfo& out) {
  const size_t room = out.struct_size ? out.struct_size : MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, n_log_entries);
  info.struct_size = std::min(room, sizeof info);
  std::memcpy(&out, &info, info.struct_size);
}

template <class Impl>
concept HasSampleOrder = requires(Impl& w, uint32_t epoch, uint64_t n) {
  { w.sample_order(epoch, n) } -> std::same_as<std::vector<uint64_t>>;
};

// The table's sample_order: the Impl's when it has one, else NULL (the runner shuffles).
template <class Impl>
constexpr auto sample_order_entry() -> MLPH_Error* (*)(MLPH_Workload*, uint32_t, uint64_t, uint64_t*) {
  if constexpr (HasSampleOrder<Impl>) {
    return [](MLPH_Workload* w, uint32_t epoch, uint64_t n, uint64_t* order) {
      return guard(detail::unbox(w)->host, [&] {
        const std::vector<uint64_t> o = static_cast<Impl&>(*detail::unbox(w)->impl).sample_order(epoch, n);
        if (o.size() != n)
          fail(MLPH_INTERNAL, "sample_order gave " + std::to_string(o.size()) + " indices for " + std::to_string(n));
        std::copy(o.begin(), o.end(), order);
      });
    };
  } else {
    return nullptr;
  }
}

// What a workload says about its benchmark before any instance exists (MLPH_BenchmarkInfo).
struct Benchmark {
  const char* name;                     // submission_benchmark
  uint32_t submission_runs;             // result files a submission needs (the rules)
  std::span<const HparamRule> hparams;  // the borrowing table (sdk/workload/hparams.hpp); empty: none
};

template <class Impl>
concept DescribesBenchmark = requires {
  { Impl::benchmark() } -> std::same_as<Benchmark>;
};

// The table's benchmark_info: the Impl's facts as static C data, else NULL.
template <class Impl>
constexpr auto benchmark_info_entry() -> const MLPH_BenchmarkInfo* (*)(void) {
  if constexpr (DescribesBenchmark<Impl>) {
    return [] {
      static const Benchmark b = Impl::benchmark();
      static const std::vector<const char*> keys = log_keys(b.hparams);
      static const MLPH_BenchmarkInfo info = {sizeof(MLPH_BenchmarkInfo), nullptr, b.name, b.submission_runs,
                                              keys.data(), keys.size()};
      return &info;
    };
  } else {
    return nullptr;
  }
}

// The table's borrow_hparams: the Impl's borrowing table applied by sdk::borrow, else NULL.
template <class Impl>
auto borrow_entry() -> MLPH_Error* (*)(const MLPH_HostApi*, const MLPH_KeyValue*, size_t, int64_t, MLPH_AssignFn,
                                       void*) {
  if constexpr (DescribesBenchmark<Impl>) {
    if (Impl::benchmark().hparams.empty()) return nullptr;
    return [](const MLPH_HostApi* host, const MLPH_KeyValue* logged, size_t n, int64_t world_size,
              MLPH_AssignFn assign, void* ctx) {
      return guard(host, [&] {
        if (world_size < 1) fail(MLPH_INVALID_ARGUMENT, "borrow_hparams: world_size must be >= 1");
        borrow(Impl::benchmark().hparams, LoggedHparams(logged, n, world_size),
               [&](const char* log_key, const char* config_key, const std::string& value) {
                 assign(ctx, log_key, config_key, value.c_str());
               });
      });
    };
  } else {
    return nullptr;
  }
}

template <class Impl>
concept HasReferenceLayout = requires(const MLPH_Value& param) {
  { Impl::reference_layout(param) } -> std::same_as<std::vector<ExportEntry>>;
};

// The table's reference_layout: the Impl's entries handed to `emit` one by one, else NULL.
template <class Impl>
constexpr auto reference_layout_entry() -> MLPH_Error* (*)(const MLPH_HostApi*, const MLPH_Value*, MLPH_ExportFn,
                                                           void*) {
  if constexpr (HasReferenceLayout<Impl>) {
    return [](const MLPH_HostApi* host, const MLPH_Value* param, MLPH_ExportFn emit, void* ctx) {
      return guard(host, [&] {
        for (const ExportEntry& e : Impl::reference_layout(*param)) {
          const MLPH_ExportEntry c = e.to_c();
          emit(ctx, &c);
        }
      });
    };
  } else {
    return nullptr;
  }
}

template <class Impl>
const MLPH_WorkloadApi* workload_api() {
  using namespace detail;
  static const MLPH_WorkloadApi api = {
      sizeof(MLPH_WorkloadApi),
      nullptr,
      [](size_t* n) { return Impl::params(n); },
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Workload** out) {
        return guard(host, [&] {
          auto box = std::make_unique<WorkloadBox>(WorkloadBox{host, std::make_unique<Impl>(host, Options(kv, n))});
          *out = reinterpret_cast<MLPH_Workload*>(box.release());
        });
      },
      [](MLPH_Workload* w) { delete unbox(w); },
      [](MLPH_Workload* w, MLPH_WorkloadInfo* out) {
        return guard(unbox(w)->host, [&] { copy_info(unbox(w)->impl->describe(), *out); });
      },
      [](MLPH_Workload* w, uint32_t batch, uint64_t seed, const MLPH_Graph** out) {
        return guard(unbox(w)->host, [&] { *out = unbox(w)->impl->build_graph(batch, seed); });
      },
      [](MLPH_Workload* w, MLPH_Split split, const MLPH_StorageHandle* storage, MLPH_Dataset** out) {
        return guard(unbox(w)->host, [&] {
          auto box = std::make_unique<DatasetBox>(DatasetBox{unbox(w)->host, unbox(w)->impl->open(split, *storage)});
          *out = reinterpret_cast<MLPH_Dataset*>(box.release());
        });
      },
      [](MLPH_Dataset* d) { delete unbox(d); },
      [](MLPH_Dataset* d, uint64_t* out) { return guard(unbox(d)->host, [&] { *out = unbox(d)->impl->size(); }); },
      [](MLPH_Dataset* d, const uint64_t* idx, size_t n, MLPH_Tensor* inputs, size_t n_inputs) {
        return guard(unbox(d)->host, [&] { unbox(d)->impl->read(idx, n, inputs, n_inputs); });
      },
      [](MLPH_Workload* w, uint32_t epoch, uint64_t step, double* out) {
        return guard(unbox(w)->host, [&] { *out = unbox(w)->impl->learning_rate(epoch, step); });
      },
      [](MLPH_Workload* w, const double* sums, size_t n, uint64_t samples, double* out) {
        return guard(unbox(w)->host, [&] { *out = unbox(w)->impl->metric(sums, n, samples); });
      },
      [](MLPH_Workload* w, const char* dir) {
        return guard(unbox(w)->host, [&] { unbox(w)->impl->generate_data(dir); });
      },
      sample_order_entry<Impl>(),
      benchmark_info_entry<Impl>(),
      borrow_entry<Impl>(),
      reference_layout_entry<Impl>(),
      [](MLPH_Dataset* d, const uint64_t* idx, size_t n, MLPH_Tensor* inputs, size_t n_inputs,
         const MLPH_SamplePart* part) {
        return guard(unbox(d)->host, [&] {
          if (!part || part->struct_size < MLPH_STRUCT_SIZE(MLPH_SamplePart, n_inputs) || !part->offsets ||
              part->n_inputs != n_inputs)
            fail(MLPH_INVALID_ARGUMENT, "dataset_read_part: the MLPH_SamplePart does not describe the " +
                                            std::to_string(n_inputs) + " inputs");
          unbox(d)->impl->read_part(idx, n, inputs, n_inputs, *part);
        });
      },
  };
  return &api;
}

}  // namespace mlph::sdk
