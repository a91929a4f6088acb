"""Step 7 bench: mlperf-bench on cuda (CosmoFlow 128^3 b1, b4; DeepCAM 768x1152 b8, bf16), then each of the
backend's implementation choices off its default alone (kit/options.py: backend.batch_norm, depthwise,
pointwise = cudnn on DeepCAM, pool_chain = off and small_channels = pad on CosmoFlow) on the cases whose graphs have those ops, beside the same models in the
machine's PyTorch (eager AMP bf16 and fp16, torch.compile), channels-last; last of the default steps, so
that torch.compile takes the time left."""
import os

from .. import options
from ..common import ROOT, read_json, tail_hint


NAME = "bench"
LIMIT_S = 300
# Dense bf16/fp16 tensor-core peaks (TFLOP/s, no sparsity) by the name nvidia-smi gives.
BF16_PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.4), ("H200", 989.4), ("H100", 989.4),
                    ("H800", 989.4), ("A100", 312.0), ("L40S", 362.0), ("B200", 2250.0)]
# Issue 26's targets on an H100 (samples/s, 1.5x the best PyTorch measured there) and that PyTorch.
TARGETS = {("cosmoflow", 1): 375, ("cosmoflow", 4): 550, ("deepcam", 8): 130}
PYTORCH_H100 = {("cosmoflow", 1): 249, ("cosmoflow", 4): 369, ("deepcam", 8): 87}


def run(kit, record, deadline):
    cases = kit.sizes["bench"]
    peak = bf16_peak(kit.gpu_name)
    kit.bench = dict(gpu=kit.gpu_name, bf16_peak_tflops=peak, precision="bf16", rows=[],
                      note="training step on synthetic input, samples/s: mlperf-bench's inputs are copied to the "
                           "GPU every step from the backend's pinned memory (as in a run), PyTorch's stay on the "
                           "GPU; share = 3 x forward FLOP x samples/s over the dense bf16 tensor peak")
    ours = {}
    missing = kit.need_cuda_backend()
    for workload, batch, sets, warmup, steps in cases:
        name = f"{kit.backend} {workload} b{batch}"
        result = bench_case(kit, record, deadline, name, missing, 10, (workload, batch, sets, warmup, steps),
                            f"{kit.backend}-{workload}-b{batch}", [])
        if result:
            ours[(workload, batch)] = result
            rate = batch / result["model"]["train_s"]
            kit.part(record, name, "PASS", f"{rate:.1f} samples/s", samples_per_s=rate)
    kit.bench["options"] = option_runs(kit, record, deadline, ours, missing)
    torch_runs = pytorch_peers(kit, record, deadline)
    kit.bench["rows"] = bench_rows(ours, torch_runs, peak)
    for row in kit.bench["rows"]:
        kit.say(bench_line(row))
    for row in kit.bench["options"]:
        kit.say(option_line(row))
    return kit.verdict(record, f"{len(kit.bench['rows'])} cases measured")


def bench_case(kit, record, deadline, name, missing, reserve, case, tag, option_settings):
    """One case's mlperf-bench run (case: workload, batch, sets, warmup, steps), leaving `reserve` seconds
    of the deadline to what follows: its JSON, or None once a SKIP (the backend missing, under reserve + 10
    seconds left) or a FAIL is recorded under `name`."""
    if missing:
        kit.part(record, name, "SKIP", missing)
        return None
    if kit.remaining(deadline) < reserve + 10:
        kit.part(record, name, "SKIP", "out of time")
        return None
    workload, batch, sets, warmup, steps = case
    rc, text, result = mlperf_bench(kit, workload, batch, sets, warmup, steps, tag, option_settings,
                                    min(90, kit.remaining(deadline) - reserve))
    if not result:
        kit.part(record, name, "FAIL", ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
    return result


def mlperf_bench(kit, workload, batch, sets, warmup, steps, tag, option_settings, limit):
    """One mlperf-bench run in bf16 under `limit` seconds (logs/bench/TAG.txt, .json): (exit status or None,
    its output, its JSON or None)."""
    out = os.path.join(kit.logs, "bench", f"{tag}.json")
    cmd = [kit.program("mlperf-bench"), "--workload", workload, "--backend", kit.backend, "--set",
           f"train.batch_size={batch}", "--steps", str(steps), "--warmup", str(warmup), "--json", out] + \
        kit.backend_sets("bf16") + kit.option_sets(option_settings)
    for s in sets:
        cmd += ["--set", s]
    rc, text = kit.run(cmd, f"bench/{tag}.txt", limit)
    return rc, text, read_json(out) if rc == 0 else None


def option_runs(kit, record, deadline, ours, missing):
    """Each non-default option value alone (options.bench_variants()) on sizes' `options` cases, fewer steps
    than the defaults' runs (the choices differ by 2x or more where they matter): one row each, with the
    defaults' rate of the same case where it was measured."""
    rows = []
    for workload, batch, sets, warmup, steps in kit.sizes["options"]:
        for label, settings in options.bench_variants(workload=workload):
            name = f"{kit.backend} {workload} b{batch} {label}"
            result = bench_case(kit, record, deadline, name, missing, 20, (workload, batch, sets, warmup, steps),
                                f"{kit.backend}-{workload}-b{batch}-{label.replace('=', '-')}", settings)
            if not result:
                continue
            default = ours.get((workload, batch))
            row = option_row(workload, batch, label, settings, batch / result["model"]["train_s"],
                             batch / default["model"]["train_s"] if default else None)
            rows.append(row)
            kit.part(record, name, "PASS", f"{row['samples_per_s']:.1f} samples/s", samples_per_s=row["samples_per_s"])
    return rows


def option_row(workload, batch, label, settings, rate, default_rate):
    """A variant's row: its rate, and the defaults' rate and its ratio to it where they were measured."""
    row = dict(workload=workload, batch=batch, option=label, settings=settings, samples_per_s=rate,
               default_samples_per_s=default_rate)
    if default_rate:
        row["vs_default"] = rate / default_rate
    return row


def option_line(row):
    ratio = f" ({row['vs_default']:.2f}x the defaults' {row['default_samples_per_s']:.1f})" if "vs_default" in row else ""
    return f"{row['workload']} b{row['batch']} backend.{row['option']}: {row['samples_per_s']:.1f} samples/s{ratio}"


def pytorch_peers(kit, record, deadline):
    """The PyTorch peers of PROFILES' torch list, in its order (a time limit leaves what ran)."""
    runs = {}
    if not kit.python:
        kit.part(record, "pytorch", "SKIP", "no Python with PyTorch here")
        return runs
    script = os.path.join(ROOT, "tools", "bench", "pytorch_gpu.py")
    for variant, precision, workload, batches, sizes, timing in kit.sizes["torch"]:
        kind = f"{variant}-{precision}"
        name = f"pytorch {workload} b{batches} {kind}"
        if kit.remaining(deadline) < 15:
            kit.part(record, name, "SKIP", "out of time")
            continue
        out = os.path.join(kit.logs, "bench", f"pytorch-{workload}-b{batches.replace(',', '-')}-{kind}.json")
        cmd = [kit.python, script, "--workload", workload, "--batch", batches, "--variants", variant,
               "--precision", precision, "--json", out] + sizes + timing + kit.sizes["torch_device"]
        rc, text = kit.run(cmd, os.path.splitext(os.path.relpath(out, kit.logs))[0] + ".txt",
                            kit.remaining(deadline) - 5)
        result = read_json(out) or {}
        done = [r for r in result.get("runs", []) if "train_s" in r]
        errors = [r["error"] for r in result.get("runs", []) if "error" in r]
        for r in done:
            runs.setdefault((workload, r["batch"]), {})[kind] = r
        if done and not errors and rc == 0:
            rates = ", ".join(f"b{r['batch']} {r['samples_per_s']:.1f}" for r in done)
            kit.part(record, name, "PASS", f"samples/s {rates}")
        else:
            why = "timed out" if rc is None else (errors[0] if errors else f"exit {rc}")
            kit.part(record, name, "FAIL", why + ("" if errors else tail_hint(text)))
    kit.bench["pytorch"] = kit.summary["environment"].get("pytorch", {})
    return runs


def bf16_peak(gpu_name):
    return next((peak for key, peak in BF16_PEAK_TFLOPS if key in (gpu_name or "")), None)


def bench_rows(ours, torch_runs, peak):
    rows = []
    for key in sorted(set(ours) | set(torch_runs)):
        workload, batch = key
        row = dict(workload=workload, batch=batch, target_h100=TARGETS.get(key), pytorch_h100=PYTORCH_H100.get(key))
        flops = None
        if key in ours:
            r = ours[key]
            rate = batch / r["model"]["train_s"]
            flops = r["forward_flops"] / batch
            row["cuda"] = dict(samples_per_s=rate, train_s=r["model"]["train_s"], device=r.get("device"),
                               precision=r.get("precision"))
        peers = {}
        for kind, r in sorted(torch_runs.get(key, {}).items()):
            peers[kind] = dict(samples_per_s=r["samples_per_s"], train_s=r["train_s"], spread_s=r["spread"],
                               first_step_s=r["first_step_s"])
            flops = flops or r["forward_flops"] / batch
        row["pytorch"] = peers
        best = max(peers, key=lambda k: peers[k]["samples_per_s"], default=None)
        if best:
            row["best_pytorch"] = dict(variant=best, samples_per_s=peers[best]["samples_per_s"])
        if "cuda" in row and best:
            row["ratio_vs_best_pytorch"] = row["cuda"]["samples_per_s"] / peers[best]["samples_per_s"]
        if flops and peak:
            row["train_flops_per_sample"] = 3 * flops
            for r in [row.get("cuda")] + list(peers.values()):
                if r:
                    r["share_of_bf16_peak"] = 3 * flops * r["samples_per_s"] / (peak * 1e12)
        rows.append(row)
    return rows


def bench_line(row):
    def cell(name, r):
        share = f" ({100 * r['share_of_bf16_peak']:.1f}% of peak)" if "share_of_bf16_peak" in r else ""
        return f"{name} {r['samples_per_s']:.1f}{share}"
    cells = ([cell("cuda", row["cuda"])] if "cuda" in row else ["cuda -"]) + \
        [cell(f"pytorch {k}", r) for k, r in row["pytorch"].items()]
    ratio = f"; cuda / best PyTorch {row['ratio_vs_best_pytorch']:.2f}x" if "ratio_vs_best_pytorch" in row else ""
    target = f" (H100 target {row['target_h100']})" if row.get("target_h100") else ""
    return f"{row['workload']} b{row['batch']} samples/s: " + ", ".join(cells) + ratio + target


