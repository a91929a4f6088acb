"""Timing shared by the PyTorch peers (pytorch_cosmoflow.py, pytorch_deepcam.py): the same
warm-up/step loop and per-layer method as mlperf-bench, so the two sides are measured alike."""
import json
import time

import torch
import torch.nn.functional as F


def add_bf16_argument(parser):
    """--bf16: PyTorch's mixed precision on CPUs for the whole model (mixed_precision below)."""
    parser.add_argument("--bf16", action="store_true", help="torch.autocast('cpu', torch.bfloat16) for the whole "
                        "model (the --layers timings stay float32)")


def mixed_precision(args):
    """The context a step's forward runs in: with --bf16, convs and linears in bf16, fp32 weights and
    optimizer; without it, nothing changes."""
    return torch.autocast("cpu", torch.bfloat16, enabled=args.bf16)


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
    """One layer alone, as `mlperf-bench --layers`: an mse loss against a zero target on the
    output's mean over its spatial dims (the evaluation output too); the input gets a gradient
    unless it comes from the data. Returns (train seconds, eval seconds)."""
    x = to_format(torch.rand(shape) * 2 - 1, args.channels_last).requires_grad_(needs_grad)

    def summary(y):
        return y.mean(dim=tuple(range(2, y.dim()))) if y.dim() >= 3 else y

    with torch.no_grad():
        target = torch.zeros_like(summary(module(x)))

    def train():
        module.train()
        module.zero_grad()
        x.grad = None
        F.mse_loss(summary(module(x)), target).backward()

    def evaluate():
        module.eval()
        with torch.no_grad():
            summary(module(x))

    return timed(train, args.steps, args.warmup), timed(evaluate, args.steps, args.warmup)


def report(args, workload, fmt, forward, train_s, eval_s, layers, name_width):
    """Prints the whole model's figures, then (--layers) each layer timed alone, and (--json) writes
    them all in mlperf-bench's JSON layout. `layers`: (name, module, input shape, forward flops,
    whether the input needs a gradient) for each layer, as the models' layers() give them."""
    print(f"train step: {train_s:.3f} s  {args.batch / train_s:.3f} samples/s  {3 * forward / train_s / 1e9:.1f} GFLOP/s")
    print(f"eval step:  {eval_s:.3f} s  {args.batch / eval_s:.3f} samples/s  {forward / eval_s / 1e9:.1f} GFLOP/s",
          flush=True)
    timings = []
    if args.layers:
        for name, module, shape, flops, needs_grad in layers:
            lt, le = time_layer(module, shape, needs_grad, args)
            train_flops = flops * (3 if needs_grad else 2)
            timings.append(dict(name=name, forward_flops=flops, train_flops=train_flops, eval_s=le, train_s=lt))
            print(f"{name:<{name_width}} fwd {le * 1e3:9.1f} ms {flops / le / 1e9 if le else 0:7.1f} GF/s   "
                  f"train {lt * 1e3:9.1f} ms {train_flops / lt / 1e9 if lt else 0:7.1f} GF/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(workload=workload, backend=f"pytorch-{torch.__version__}-{fmt}", batch=args.batch,
                           forward_flops=forward, model=dict(train_s=train_s, eval_s=eval_s), layers=timings), f)
