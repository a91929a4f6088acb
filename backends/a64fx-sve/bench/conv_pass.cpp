// Runs one convolution pass once on one thread, for instruction counting under QEMU
// (tools/cross/a64fx_model.py --check): an input of DEPTH x HEIGHT x WIDTH x CI channels, CO filters of
// KERNEL^3, stride 1 and 'same' padding, as CosmoFlow's layers.
//   a64fx-conv-pass forward|backward-data|backward-weights DEPTH HEIGHT WIDTH CI CO [KERNEL]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels.hpp"

int main(int argc, char** argv) {
  using namespace mlph::a64fx;
  if (argc < 7 || argc > 8) {
    std::fprintf(stderr, "usage: %s forward|backward-data|backward-weights DEPTH HEIGHT WIDTH CI CO [KERNEL]\n", argv[0]);
    return 2;
  }
  const std::string pass = argv[1];
  const int64_t ci = std::atoll(argv[5]), co = std::atoll(argv[6]), kernel = argc == 8 ? std::atoll(argv[7]) : 3;
  Window g;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = g.out[d] = std::atoll(argv[2 + d]);
    g.kernel[d] = kernel;
    g.pad_before[d] = (kernel - 1) / 2, g.pad_after[d] = kernel - 1 - (kernel - 1) / 2;
  }
  g.in_channels = ci, g.out_channels = co;
  std::vector<float> x(static_cast<size_t>(g.in_positions() * ci), 0.5f), dx(x.size());
  std::vector<float> w(static_cast<size_t>(g.taps() * ci * co), 0.25f), dw(w.size()), b(static_cast<size_t>(co));
  std::vector<float> y(static_cast<size_t>(g.out_positions() * co), 1.0f);
  Scratch scratch;
  const Threads one{1};
  if (pass == "forward") conv_forward(one, scratch, g, x.data(), w.data(), b.data(), y.data());
  else if (pass == "backward-data") conv_backward_data(one, scratch, g, w.data(), y.data(), dx.data());
  else if (pass == "backward-weights") conv_backward_weights(one, scratch, g, x.data(), y.data(), dw.data(), nullptr);
  else {
    std::fprintf(stderr, "unknown pass '%s'\n", pass.c_str());
    return 2;
  }
  return 0;
}
