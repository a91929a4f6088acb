#include "types.hpp"

#include "mlph/sdk/util/error.hpp"

namespace mlph::cuda::plan {
namespace {

struct TypeInfo {
  DType type;
  const char* name;
  size_t bytes;
};
constexpr TypeInfo kTypes[] = {
    {DType::f32, "float32", 4}, {DType::f16, "float16", 2}, {DType::bf16, "bfloat16", 2},
    {DType::i16, "int16", 2},   {DType::i32, "int32", 4},
};

struct PrecisionInfo {
  Precision precision;
  const char* name;
  DType compute;
  MathMode math;
};
constexpr PrecisionInfo kPrecisions[] = {
    {Precision::fp32, "fp32", DType::f32, MathMode::fma},
    {Precision::tf32, "tf32", DType::f32, MathMode::tf32},
    {Precision::bf16, "bf16", DType::bf16, MathMode::tensor_op},
    {Precision::fp16, "fp16", DType::f16, MathMode::tensor_op},
};

const TypeInfo& info(DType type) { return kTypes[static_cast<size_t>(type)]; }
const PrecisionInfo& info(Precision precision) { return kPrecisions[static_cast<size_t>(precision)]; }

}  // namespace

size_t bytes_of(DType type) { return info(type).bytes; }
const char* name_of(DType type) { return info(type).name; }

DType dtype_of(MLPH_DType type) {
  switch (type) {
    case MLPH_DTYPE_I16:
      return DType::i16;
    case MLPH_DTYPE_I32:
      return DType::i32;
    default:  // the validator admits float32, int16 and int32 only
      return DType::f32;
  }
}

const char* name_of(Precision precision) { return info(precision).name; }
DType compute_dtype(Precision precision) { return info(precision).compute; }
MathMode math_of(Precision precision) { return info(precision).math; }

std::string_view op_name(OpKind kind) {
  for (const auto& op : sdk::program::detail::kOps)
    if (op.kind == kind) return op.name;
  return "?";
}

void fail_node(const Node& node, const std::string& what) {
  sdk::fail(MLPH_UNIMPLEMENTED,
            "cuda backend: node '" + node.name + "' (" + std::string(op_name(node.kind)) + "): " + what);
}

}  // namespace mlph::cuda::plan
