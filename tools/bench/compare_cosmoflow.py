#!/usr/bin/python3
"""CosmoFlow throughput of our backends next to PyTorch on the same cores, in one run.

Runs `mlperf-bench --layers --json` for each backend and tools/bench/pytorch_cosmoflow.py (plain
and channels_last_3d memory formats; the faster of the two, per column, is the peer), then prints the whole-model
samples/s with the ratio to PyTorch and the per-layer GFLOP/s against the measured FP32 peak.

  /usr/bin/python3 tools/bench/compare_cosmoflow.py --backends onednn-cpu,reference --batch 4 --edge 128
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_json(cmd, env):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        print("$", " ".join(cmd + ["--json", out.name]), flush=True)
        subprocess.run(cmd + ["--json", out.name], check=True, env=env)
        with open(out.name) as f:
            return json.load(f)


def measure(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    results = []
    for backend in args.backends.split(","):
        cmd = [os.path.join(args.build, "bin", "mlperf-bench"), "--workload", "cosmoflow", "--backend", backend,
               "--set", f"data.edge={args.edge}", "--set", f"train.batch_size={args.batch}",
               "--set", f"backend.threads={args.threads}", "--steps", str(args.steps), "--layers"]
        results.append(run_json(cmd, env))
    torch_runs = []
    for layout in ([], ["--channels-last"]):
        cmd = [sys.executable, os.path.join(HERE, "pytorch_cosmoflow.py"), "--edge", str(args.edge), "--batch",
               str(args.batch), "--threads", str(args.threads), "--steps", str(args.steps), "--layers"] + layout
        torch_runs.append(run_json(cmd, env))
    return results, torch_runs


def tables(results, torch_runs, args):
    peer = min(torch_runs, key=lambda r: r["model"]["train_s"])  # for the per-layer table
    best_train = min(r["model"]["train_s"] for r in torch_runs)
    best_eval = min(r["model"]["eval_s"] for r in torch_runs)
    peak = results[0]["fp32_peak_gflops"]
    batch = args.batch
    lines = [f"CosmoFlow {args.edge}^3, batch {batch}, float32, {args.threads} threads; "
             f"FP32 peak measured {peak:.0f} GFLOP/s; ratios against the faster PyTorch memory format", "",
             "| implementation | train samples/s | vs PyTorch | eval samples/s | vs PyTorch |",
             "|---|---|---|---|---|"]
    for r in results + torch_runs:
        t, e = r["model"]["train_s"], r["model"]["eval_s"]
        lines.append(f"| {r['backend']} | {batch / t:.3f} | {best_train / t:.2f}x | "
                     f"{batch / e:.3f} | {best_eval / e:.2f}x |")
    names = [r["backend"] for r in results] + [peer["backend"]]
    lines += ["", "Per layer, training step (forward + backward) GFLOP/s and % of the FP32 peak; "
              "forward-only in brackets:", "",
              "| layer | GFLOP fwd | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for i, layer in enumerate(results[0]["layers"]):
        if layer["forward_flops"] == 0:
            continue
        cells = []
        for r in results + [peer]:
            l = r["layers"][i]
            train = l["train_flops"] / l["train_s"] / 1e9
            fwd = l["forward_flops"] / l["eval_s"] / 1e9
            cells.append(f"{train:.0f} ({100 * train / peak:.0f}%) [{fwd:.0f}]")
        lines.append(f"| {layer['name']} | {layer['forward_flops'] / 1e9:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="onednn-cpu,reference")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--edge", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--markdown", help="also write the tables to FILE")
    args = p.parse_args()
    text = tables(*measure(args), args)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
