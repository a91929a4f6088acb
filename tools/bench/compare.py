#!/usr/bin/python3
"""CosmoFlow or DeepCAM throughput of our backends next to PyTorch on the same cores, in one run.

Runs `mlperf-bench --layers --json` for each backend and the workload's PyTorch peer
(tools/bench/pytorch_<workload>.py, plain and channels-last memory formats; the faster of the two, per
column, is the peer), then prints the whole-model samples/s with the ratio to PyTorch and the per-layer
GFLOP/s against the measured FP32 peak (where both sides timed the layers).

  /usr/bin/python3 tools/bench/compare.py --backends onednn-cpu,reference --batch 4 --edge 128
  /usr/bin/python3 tools/bench/compare.py --workload deepcam --height 96 --width 144 --batch 2
  /usr/bin/python3 tools/bench/compare.py --backends onednn-cpu --precision bf16 --threads 2 --no-layers
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Per workload: the default batch, the input size as mlperf-bench settings and as the PyTorch script's
# arguments, and the table title.
WORKLOADS = {
    "cosmoflow": dict(
        batch=4,
        settings=lambda a: [f"data.edge={a.edge}"],
        torch_args=lambda a: ["--edge", str(a.edge)],
        title=lambda a: f"CosmoFlow {a.edge}^3"),
    "deepcam": dict(
        batch=1,
        settings=lambda a: [f"data.height={a.height}", f"data.width={a.width}"],
        torch_args=lambda a: ["--height", str(a.height), "--width", str(a.width)],
        title=lambda a: f"DeepCAM 16x{a.height}x{a.width}"),
}


def run_json(cmd, env):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        print("$", " ".join(cmd + ["--json", out.name]), flush=True)
        subprocess.run(cmd + ["--json", out.name], check=True, env=env)
        with open(out.name) as f:
            return json.load(f)


def measure(args):
    workload = WORKLOADS[args.workload]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    steps = ["--steps", str(args.steps), "--warmup", str(args.warmup)] + ([] if args.no_layers else ["--layers"])
    results = []
    for backend in args.backends.split(","):
        cmd = [os.path.join(args.build, "bin", "mlperf-bench"), "--workload", args.workload, "--backend", backend]
        precision = [f"backend.precision={args.precision}"] if args.precision != "fp32" else []
        for setting in workload["settings"](args) + [f"train.batch_size={args.batch}", f"backend.threads={args.threads}"
                                                     ] + precision:
            cmd += ["--set", setting]
        results.append(run_json(cmd + steps, env))
    torch_runs = []
    for layout in ([], ["--channels-last"]):
        cmd = [sys.executable, os.path.join(HERE, f"pytorch_{args.workload}.py")] + workload["torch_args"](args) + [
            "--batch", str(args.batch), "--threads", str(args.threads)] + (["--bf16"] if args.precision == "bf16" else [])
        torch_runs.append(run_json(cmd + steps + layout, env))
    return results, torch_runs


def model_table(results, torch_runs, args):
    best_train = min(r["model"]["train_s"] for r in torch_runs)
    best_eval = min(r["model"]["eval_s"] for r in torch_runs)
    peak = results[0]["peak_gflops"]
    measured = f"; {results[0]['peak_precision']} peak measured {peak:.0f} GFLOP/s" if peak else ""
    precision = "float32" if args.precision == "fp32" else "bf16 (PyTorch: torch.autocast)"
    lines = [f"{WORKLOADS[args.workload]['title'](args)}, batch {args.batch}, {precision}, {args.threads} threads"
             f"{measured}; ratios against the faster PyTorch memory format", "",
             "| implementation | train samples/s | vs PyTorch | eval samples/s | vs PyTorch |",
             "|---|---|---|---|---|"]
    for r in results + torch_runs:
        t, e = r["model"]["train_s"], r["model"]["eval_s"]
        lines.append(f"| {r['backend']} | {args.batch / t:.3f} | {best_train / t:.2f}x | "
                     f"{args.batch / e:.3f} | {best_eval / e:.2f}x |")
    return lines


def layer_table(results, peer, peak):
    """Per-layer GFLOP/s; the layers are matched by name, so both sides must have cut the model alike."""
    names = [r["backend"] for r in results] + [peer["backend"]]
    lines = ["", "Per layer, training step (forward + backward) GFLOP/s and % of the FP32 peak; "
             "forward-only in brackets:", "",
             "| layer | GFLOP fwd | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    by_name = [{l["name"]: l for l in r["layers"]} for r in results + [peer]]
    for layer in results[0]["layers"]:
        if layer["forward_flops"] == 0:
            continue
        cells = []
        for r in by_name:
            l = r.get(layer["name"])
            if l is None:
                cells.append("-")
                continue
            train = l["train_flops"] / l["train_s"] / 1e9
            fwd = l["forward_flops"] / l["eval_s"] / 1e9
            cells.append(f"{train:.0f} ({100 * train / peak:.0f}%) [{fwd:.0f}]")
        lines.append(f"| {layer['name']} | {layer['forward_flops'] / 1e9:.2f} | " + " | ".join(cells) + " |")
    return lines


def tables(results, torch_runs, args):
    lines = model_table(results, torch_runs, args)
    peer = min(torch_runs, key=lambda r: r["model"]["train_s"])  # for the per-layer table
    if all(r["layers"] for r in results + [peer]):
        lines += layer_table(results, peer, results[0]["peak_gflops"])
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="cosmoflow")
    p.add_argument("--backends", default="onednn-cpu,reference")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--edge", type=int, default=128, help="CosmoFlow cube edge")
    p.add_argument("--height", type=int, default=768, help="DeepCAM sample height (a multiple of 16)")
    p.add_argument("--width", type=int, default=1152, help="DeepCAM sample width (a multiple of 16)")
    p.add_argument("--batch", type=int, help="default: 4 for CosmoFlow, 1 for DeepCAM")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed ones")
    p.add_argument("--no-layers", action="store_true", help="time the whole model only")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: backend.precision=bf16 for our backends, torch.autocast for PyTorch")
    p.add_argument("--markdown", help="also write the tables to FILE")
    args = p.parse_args()
    if args.batch is None:
        args.batch = WORKLOADS[args.workload]["batch"]
    text = tables(*measure(args), args)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
