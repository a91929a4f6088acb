#!/usr/bin/python3
"""Loads weights exported by `mlperf-run --export-weights` (or mlph-export) into an independent PyTorch
model of the reference architecture (tools/bench/pytorch_<workload>.py), strictly (every key the
reference has, no other, each of its shape), runs it in evaluation mode on the input the C++ test fed
our model, and compares the outputs.

  export_check.py WORKLOAD WEIGHTS.npz CASE.npz
CASE.npz holds `x` (our channels-last input), `ours` (our model's output on it) and, for DeepCAM, the
normalization `shift` and `scale` (the reference applies it in its data loader, our graph as its first op).
Prints the largest difference; exit status 1 when it is beyond the tolerance, 3 when torch is missing.
"""
import os
import sys

import numpy

try:
    import torch
except ImportError:
    print("torch is not installed (Debian: python3-torch)")
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench"))

# Of the output's largest magnitude. Both sides compute in float32 but sum in different orders (our
# reference backend's loops against PyTorch's kernels): CosmoFlow's output is 1.2*tanh after 5 convs and
# 3 dense layers, DeepCAM's logits come through 110 convolutions and 76 batch norms, so last-bit
# differences grow layer by layer. Measured: 1.0e-6 (CosmoFlow) and 2.2e-6 (DeepCAM) of the output's
# scale; one 3x3 kernel exported with its two spatial dims swapped gives 0.9 of it. 1e-4 leaves room
# for other machines' kernels and flags any wrong name, layout or permutation.
TOLERANCE = {"cosmoflow": 1e-4, "deepcam": 1e-4}


def main():
    workload, weights, case = sys.argv[1:4]
    state = {k: torch.from_numpy(v) for k, v in numpy.load(weights).items()}
    data = numpy.load(case)
    if workload == "cosmoflow":
        from pytorch_cosmoflow import CosmoFlow
        x = torch.from_numpy(data["x"].astype(numpy.float32)).permute(0, 4, 1, 2, 3)  # NDHWC -> NCDHW
        model = CosmoFlow(x.shape[2])
        ours = torch.from_numpy(data["ours"])
    else:
        from pytorch_deepcam import DeepLabV3Plus
        x = (torch.from_numpy(data["x"]) - torch.from_numpy(data["shift"])) * torch.from_numpy(data["scale"])
        x = x.permute(0, 3, 1, 2)  # NHWC -> NCHW
        model = DeepLabV3Plus(channels=x.shape[1])
        ours = torch.from_numpy(data["ours"]).permute(0, 3, 1, 2)
    model.load_state_dict(state)  # strict: the reference's keys and shapes, all of them
    model.eval()
    with torch.no_grad():
        theirs = model(x.contiguous())
    scale = float(theirs.abs().max())
    difference = float((theirs - ours).abs().max())
    print(f"{workload}: {len(state)} tensors loaded; output {tuple(theirs.shape)}, max |PyTorch| {scale:.4g}, "
          f"max |PyTorch - ours| {difference:.3g} ({difference / scale:.3g} of it; tolerance {TOLERANCE[workload]})")
    sys.exit(0 if difference <= TOLERANCE[workload] * scale else 1)


if __name__ == "__main__":
    main()
