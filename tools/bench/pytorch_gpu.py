#!/usr/bin/env python3
"""The PyTorch peers of `mlperf-bench --backend cuda`: CosmoFlow and DeepCAM (the models of
pytorch_cosmoflow.py and pytorch_deepcam.py, imported), channels-last, on one GPU, timing the
compute-only training step (device-resident synthetic input; forward, loss, backward, optimizer) with
CUDA events after warm-up, in the variants the project compares with: eager with AMP (bf16 by default)
and the same under torch.compile. Prints one line per run and writes the figures as JSON.

  python3 tools/bench/pytorch_gpu.py --workload cosmoflow --batch 1,4 --json torch-cosmoflow.json
  python3 tools/bench/pytorch_gpu.py --workload deepcam --batch 8 --variants eager,compile --json torch-deepcam.json
  python3 tools/bench/pytorch_gpu.py --workload deepcam --batch 8 --precision fp16 --layers --unique --json l.json
  python3 tools/bench/pytorch_gpu.py --workload deepcam --batch 8 --precision fp16 --profile-top 40 --json k.json

--layers times each layer alone as `mlperf-bench --layers` times ours (an mse loss on the output's spatial
mean, the input given a gradient unless it is the data), cut as ours is: a conv (kind conv, 1x1, depthwise),
conv_transpose or dense, a batch norm, an activation, a pool each a row of its own; --unique times each
distinct layer (kind, module, input shape) once and counts how often the model has it. --profile-top N runs
torch.profiler over one whole training step after warm-up and lists the N kernels (ops on the CPU) with
the most time: which kernels PyTorch runs for batch norm, depthwise and 1x1.

Optimizers as the measured baselines (../shared/PERFORMANCE.md): SGD with momentum 0.9 for CosmoFlow,
AdamW for DeepCAM (the reference's LAMB is not in PyTorch), fused where PyTorch has the fused form.
cuDNN's autotuner is on (torch.backends.cudnn.benchmark), as a PyTorch user would run. `--device cpu`
runs the same code on the CPU at small sizes (a check of the script where there is no GPU; figures
meaningless).
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cosmoflow import CosmoFlow  # noqa: E402  (the CPU peers' models: one definition each)
from pytorch_deepcam import CLASS_WEIGHTS, DeepLabV3Plus  # noqa: E402

PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def forward_flops(model, x, workload, batch, edge):
    """2 x multiply-adds of one forward pass, as mlperf-bench counts them (its --layers cut)."""
    if workload == "cosmoflow":
        return sum(f for _, _, _, f, _ in model.layers(batch, edge))
    return sum(f for _, _, _, f, _ in model.layers(x))


def make_case(args, batch, device):
    """(model, input, loss function, optimizer, forward flops) on `device`, channels-last."""
    torch.manual_seed(0)
    if args.workload == "cosmoflow":
        model = CosmoFlow(args.edge)
        x = torch.randint(0, 40, (batch, 4, args.edge, args.edge, args.edge)).float()
        y = torch.rand(batch, 4) * 2 - 1
        fmt = torch.channels_last_3d

        def loss_fn(out):
            return F.mse_loss(out.float(), y_dev)
    else:
        model = DeepLabV3Plus()
        x = torch.rand(batch, 16, args.height, args.width) * 2 - 1
        y = torch.randint(0, 3, (batch, args.height, args.width))
        weights = torch.tensor(CLASS_WEIGHTS, dtype=torch.float32, device=device)
        fmt = torch.channels_last

        def loss_fn(out):
            # The reference's loss: weighted per-pixel CE, then a plain mean (not weight-normalized).
            return F.cross_entropy(out.float(), y_dev, weight=weights, reduction="none").mean()
    model = model.to(device=device, memory_format=fmt)
    x = x.to(device).contiguous(memory_format=fmt)
    y_dev = y.to(device)
    flops = forward_flops(model, x, args.workload, batch, args.edge)  # DeepCAM's runs a forward pass: on the device
    fused = {"fused": True} if device.type == "cuda" and supports_fused() else {}
    if args.workload == "cosmoflow":
        opt = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9, **fused)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, **fused)
    return model, x, loss_fn, opt, flops


def supports_fused():
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 1)  # fused SGD and AdamW on CUDA


def train_step_fn(model, x, loss_fn, opt, precision, device):
    """One training step; fp16 with PyTorch's dynamic loss scaling (GradScaler), as AMP trains in fp16."""
    dtype = PRECISIONS[precision]
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is None:
            loss = loss_fn(model(x))
        else:
            with torch.autocast(device_type=device.type, dtype=dtype):
                loss = loss_fn(model(x))
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return step


class Clock:
    """Seconds of `fn` run `n` times: CUDA events on a GPU (the host may run ahead), else the host clock."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn, n):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        begin = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - begin


def measure(args, variant, batch, device):
    """One variant at one batch: warm-up (the first step, which compiles, timed alone), then `repeats`
    timed loops of `steps` steps; the median loop gives the step time."""
    clock = Clock(device)
    model, x, loss_fn, opt, flops = make_case(args, batch, device)
    model.train()
    if variant == "compile":
        torch._dynamo.reset()
        model = torch.compile(model)
    step = train_step_fn(model, x, loss_fn, opt, args.precision, device)
    clock.sync()
    first = time.perf_counter()
    step()
    clock.sync()
    first = time.perf_counter() - first
    for _ in range(args.warmup):
        step()
    clock.sync()
    loops = [clock.time(step, args.steps) / args.steps for _ in range(args.repeats)]
    train_s = statistics.median(loops)
    memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del model, x, opt, step
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    return dict(variant=variant, batch=batch, precision=args.precision, layout="channels_last", train_s=train_s,
                samples_per_s=batch / train_s, spread=[min(loops), max(loops)], first_step_s=first,
                forward_flops=flops, train_tflops=3 * flops / train_s / 1e12, peak_memory_bytes=memory)


def kind_of(module):
    """A layer row's kind, as mlperf-bench's layers.cpp names it."""
    if isinstance(module, (nn.Conv2d, nn.Conv3d)):
        if module.groups > 1 and module.groups == module.in_channels:
            return "depthwise"
        return "1x1" if all(k == 1 for k in module.kernel_size) else "conv"
    if isinstance(module, (nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return "conv_transpose"
    if isinstance(module, nn.Linear):
        return "dense"
    if isinstance(module, (nn.BatchNorm2d, nn.BatchNorm3d)):
        return "batch_norm"
    if isinstance(module, (nn.ReLU, nn.LeakyReLU, nn.Tanh)):
        return "activation"
    if isinstance(module, (nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveAvgPool2d, nn.AvgPool2d)):
        return "pool"
    return type(module).__name__


def module_flops(module, x, y):
    if isinstance(module, (nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return 2.0 * module.weight.numel() / module.in_channels * x.numel()
    if isinstance(module, (nn.Conv2d, nn.Conv3d)):
        return 2.0 * module.weight.numel() / module.out_channels * y.numel()
    if isinstance(module, nn.Linear):
        return 2.0 * module.in_features * module.out_features * x.shape[0]
    return 0.0


def leaves(name, module):
    """The modules of a layer of the models' layers(), one row each (a GBN wrapper is its BatchNorm)."""
    parts = list(module) if isinstance(module, nn.Sequential) else [module]
    # A whole separable conv in a unit's slice of a block is the next repetition's, which has rows of its own.
    parts = [m for m in parts if not hasattr(m, "pointwise")]
    out = []
    for m in parts:
        m = m.bn if hasattr(m, "bn") and isinstance(m.bn, nn.Module) else m
        if getattr(m, "inplace", False):  # alone, its input is a leaf that gets a gradient
            m = copy.copy(m)
            m.inplace = False
        kind = kind_of(m)
        suffix = {"batch_norm": ".bn", "activation": ".act"}.get(kind, "") if out else ""
        out.append((name + suffix, m, kind))
    return out


def layer_rows(args, batch, device):
    """(name, kind, module, input shape, needs input gradient, forward flops) for every layer row, in the model's
    order: each unit of the models' layers() cut into its modules, their shapes found by running them."""
    model, x, _, _, _ = make_case(args, batch, device)
    units = model.layers(batch, args.edge) if args.workload == "cosmoflow" else model.layers(x)
    rows = []
    with torch.no_grad():
        for name, module, shape, _, needs_grad in units:
            h = torch.zeros(shape, device=device)
            for i, (row_name, m, kind) in enumerate(leaves(name, module)):
                y = m.eval()(h) if not isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)) else m.train()(h)
                rows.append((row_name, kind, m, tuple(h.shape), needs_grad or i > 0, module_flops(m, h, y)))
                h = y
    return rows


def time_layer_rows(args, batch, device):
    """Each row (each distinct one with --unique) trained alone in the run's precision, CUDA events on a GPU."""
    clock = Clock(device)
    dtype = PRECISIONS[args.precision]
    rows, seen = [], {}
    for name, kind, module, shape, needs_grad, flops in layer_rows(args, batch, device):
        key = (kind, repr(module), shape, needs_grad)
        if args.unique and key in seen:
            rows[seen[key]]["count"] += 1
            continue
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d if len(shape) == 5 else None
        x = torch.rand(shape, device=device) * 2 - 1
        x = (x.contiguous(memory_format=fmt) if fmt else x).requires_grad_(needs_grad)
        module = module.to(memory_format=fmt) if fmt else module
        module.train()

        def summary(y):
            return y.float().mean(dim=tuple(range(2, y.dim()))) if y.dim() >= 3 else y.float()

        def step():
            module.zero_grad(set_to_none=True)
            x.grad = None
            if dtype is None:
                out = summary(module(x))
            else:
                with torch.autocast(device_type=device.type, dtype=dtype):
                    out = summary(module(x))
            F.mse_loss(out, torch.zeros_like(out)).backward()

        for _ in range(max(1, args.warmup)):
            step()
        train_s = clock.time(step, args.steps) / args.steps
        seen[key] = len(rows)
        rows.append(dict(name=name, kind=kind, shape=list(shape), count=1, train_s=train_s, forward_flops=flops,
                         train_flops=flops * (3 if needs_grad else 2)))
    return rows


def profile_top(args, batch, device, n):
    """torch.profiler over one training step after warm-up: the `n` kernels (ops on the CPU) with the most
    self time, by name."""
    from torch.profiler import ProfilerActivity, profile
    model, x, loss_fn, opt, _ = make_case(args, batch, device)
    model.train()
    step = train_step_fn(model, x, loss_fn, opt, args.precision, device)
    for _ in range(max(1, args.warmup)):
        step()
    Clock(device).sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        Clock(device).sync()
    on_device = device.type == "cuda"
    rows = []
    for e in prof.key_averages():
        us = (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)) if on_device \
            else e.self_cpu_time_total
        if us > 0:
            rows.append(dict(name=e.key, ms=us / 1e3, calls=e.count))
    rows.sort(key=lambda r: -r["ms"])
    total = sum(r["ms"] for r in rows)
    for r in rows:
        r["share"] = r["ms"] / total if total else 0.0
    return rows[:n]


def environment(device):
    env = dict(torch=torch.__version__, device=str(device), cudnn_benchmark=torch.backends.cudnn.benchmark)
    if device.type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(),
                   capability=".".join(map(str, torch.cuda.get_device_capability(device))))
    return env


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=["cosmoflow", "deepcam"], default="cosmoflow")
    p.add_argument("--batch", default="4", help="comma-separated batch sizes, e.g. 1,4")
    p.add_argument("--edge", type=int, default=128, help="CosmoFlow cube edge (a multiple of 32)")
    p.add_argument("--height", type=int, default=768, help="DeepCAM height (a multiple of 16)")
    p.add_argument("--width", type=int, default=1152, help="DeepCAM width (a multiple of 16)")
    p.add_argument("--variants", default="eager,compile", help="comma-separated: eager, compile")
    p.add_argument("--precision", choices=sorted(PRECISIONS), default="bf16", help="autocast dtype (fp32: none)")
    p.add_argument("--steps", type=int, default=20, help="steps per timed loop")
    p.add_argument("--repeats", type=int, default=5, help="timed loops (the median is reported)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps after the first")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", help="write the figures to FILE (rewritten after every run)")
    p.add_argument("--layers", action="store_true", help="time each layer alone (the first batch, eager)")
    p.add_argument("--unique", action="store_true", help="--layers: each distinct layer once, with its count")
    p.add_argument("--profile-top", type=int, metavar="N", help="torch.profiler over one step: the top N kernels")
    args = p.parse_args()
    variants = args.variants.split(",")
    if set(variants) - {"eager", "compile"}:
        p.error("--variants: eager and/or compile")
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0:
        p.error("--steps and --repeats must be >= 1, --warmup >= 0")
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("pytorch_gpu.py: error: no CUDA device visible to PyTorch " + torch.__version__)
        torch.backends.cudnn.benchmark = True
    report = dict(workload=args.workload, input=dict(edge=args.edge) if args.workload == "cosmoflow" else
                  dict(height=args.height, width=args.width), environment=environment(device), runs=[])
    print(json.dumps(report["environment"]), flush=True)
    if args.layers or args.profile_top:
        return layers_or_kernels(args, report, device)
    for batch in (int(b) for b in args.batch.split(",")):
        for variant in variants:
            try:
                run = measure(args, variant, batch, device)
                print(f"{args.workload} b{batch} {variant} {args.precision}: {run['train_s'] * 1e3:.2f} ms/step  "
                      f"{run['samples_per_s']:.1f} samples/s  {run['train_tflops']:.1f} TFLOP/s  "
                      f"(first step {run['first_step_s']:.1f} s)", flush=True)
            except Exception as e:  # one variant failing (a compiler missing) leaves the others' figures
                run = dict(variant=variant, batch=batch, precision=args.precision, error=f"{type(e).__name__}: {e}")
                print(f"{args.workload} b{batch} {variant}: error: {run['error']}", flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            report["runs"].append(run)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(report, f, indent=1)
    return 1 if any("error" in r for r in report["runs"]) else 0


def layers_or_kernels(args, report, device):
    """--layers and --profile-top: the first batch size, eager."""
    batch = int(args.batch.split(",")[0])
    report.update(batch=batch, precision=args.precision, layout="channels_last")
    if args.layers:
        report["layers"] = time_layer_rows(args, batch, device)
        for r in report["layers"]:
            print(f"{r['name']:<36} {r['kind']:<14} x{r['count']:<3} train {r['train_s'] * 1e3:9.3f} ms", flush=True)
    if args.profile_top:
        report["kernels"] = profile_top(args, batch, device, args.profile_top)
        for r in report["kernels"]:
            print(f"{r['ms']:9.3f} ms {100 * r['share']:5.1f}% x{r['calls']:<5} {r['name'][:100]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
