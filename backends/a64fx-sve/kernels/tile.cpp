#include "tile.hpp"

#include <array>
#include <utility>

namespace mlph::a64fx {
namespace {

using TileFn = void (*)(const TileArgs&);

// table[V - 1][P - 1]: every shape run_tile may pick, for one address pattern.
template <bool kRowsContiguous, int V, int... P>
constexpr std::array<TileFn, 12> row_table(std::integer_sequence<int, P...>) {
  std::array<TileFn, 12> fns{};
  ((fns[P] = &gemm_tile<P + 1, V, kRowsContiguous>), ...);
  return fns;
}
template <bool kRowsContiguous>
constexpr std::array<std::array<TileFn, 12>, kMaxVectors> kTiles = {
    row_table<kRowsContiguous, 1>(std::make_integer_sequence<int, max_rows(1)>()),
    row_table<kRowsContiguous, 2>(std::make_integer_sequence<int, max_rows(2)>()),
    row_table<kRowsContiguous, 3>(std::make_integer_sequence<int, max_rows(3)>()),
    row_table<kRowsContiguous, 4>(std::make_integer_sequence<int, max_rows(4)>())};

}  // namespace

void run_tile(int vectors, const TileArgs& t) {
  const auto& table = t.a_row == 1 && t.a_step != 1 ? kTiles<true> : kTiles<false>;
  table[static_cast<size_t>(vectors - 1)][static_cast<size_t>(t.rows - 1)](t);
}

int64_t vector_lanes() { return static_cast<int64_t>(svcntw()); }

}  // namespace mlph::a64fx
