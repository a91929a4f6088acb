"""Timing shared by the PyTorch peers (pytorch_cosmoflow.py, pytorch_deepcam.py): the same
warm-up/step loop and per-layer method as mlperf-bench, so the two sides are measured alike."""
import time

import torch
import torch.nn.functional as F


def timed(fn, steps, warmup):
    """Mean seconds of `fn` over `steps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def to_format(t, channels_last):
    """PyTorch's channels-last memory format for 2D (4-dim) and 3D (5-dim) activations."""
    if not channels_last or t.dim() not in (4, 5):
        return t
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


def time_layer(module, shape, needs_grad, args):
    """One layer alone, as `mlperf-bench --layers`: an mse loss against a zero target; the input
    gets a gradient unless it comes from the data. Returns (train seconds, eval seconds)."""
    x = to_format(torch.rand(shape) * 2 - 1, args.channels_last).requires_grad_(needs_grad)
    with torch.no_grad():
        target = torch.zeros_like(module(x))

    def train():
        module.train()
        module.zero_grad()
        x.grad = None
        F.mse_loss(module(x), target).backward()

    def evaluate():
        module.eval()
        with torch.no_grad():
            module(x)

    return timed(train, args.steps, args.warmup), timed(evaluate, args.steps, args.warmup)
