#!/usr/bin/python3
"""Plots for `mlperf-score report`: reads runs.csv and epochs.csv from DIR, writes PNGs there.

  time_breakdown.png   time to solution per run split into staging / training / evaluation / other
                       (like Fig. 1 of the MLPerf HPC paper), init shown apart (it is not timed)
  batch_size.png       epochs to converge and training throughput against the global batch size (Fig. 2)
  metric_per_epoch.png the quality metric per epoch for every run, with the target

Exit status 3 when matplotlib is missing (the report is still complete without the plots).
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot_report.py: matplotlib is not installed; no plots", file=sys.stderr)
    sys.exit(3)

TARGETS = {"eval_error": 0.124, "eval_accuracy": 0.82}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def time_breakdown(runs, out):
    parts = [("staging_s", "staging"), ("training_s", "training"), ("evaluation_s", "evaluation"), ("other_s", "other")]
    labels = [f"{r['system']} {r['scaling']} {r['benchmark']} {r['run'][7:-4]}" for r in runs]
    x = list(range(len(runs)))  # positions: labels may repeat across systems
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(runs) + 2), 4.5))
    bottom = [0.0] * len(runs)
    for key, name in parts:
        values = [float(r[key]) / 60 for r in runs]
        ax.bar(x, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.plot(x, [float(r["init_s"]) / 60 for r in runs], "k_", markersize=12, label="init (untimed)")
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel("minutes")
    ax.set_title("Time to solution per run")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "time_breakdown.png", dpi=120)


def batch_size(runs, out):
    by_gbs = defaultdict(list)
    for r in runs:
        by_gbs[int(r["global_batch_size"])].append(r)
    sizes = sorted(by_gbs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for gbs in sizes:
        converged = [int(r["epochs_to_converge"]) for r in by_gbs[gbs] if int(r["epochs_to_converge"]) > 0]
        left.scatter([gbs] * len(converged), converged, color="C0", alpha=0.5)
        right.scatter([gbs] * len(by_gbs[gbs]), [float(r["throughput_samples_per_s"]) for r in by_gbs[gbs]], color="C1", alpha=0.5)
    left.set(xscale="log", xlabel="global batch size", ylabel="epochs to converge", title="Convergence")
    right.set(xscale="log", xlabel="global batch size", ylabel="training samples / s", title="Throughput")
    fig.tight_layout()
    fig.savefig(out / "batch_size.png", dpi=120)


def metric_per_epoch(epochs, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    curves = defaultdict(list)
    for e in epochs:
        curves[(e["set"], e["run"], e["metric_key"])].append((int(e["epoch"]), float(e["metric"])))
    keys = set()
    for (set_name, run, key), points in sorted(curves.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1, alpha=0.7)
        keys.add(key)
    for key in keys:
        if key in TARGETS:
            ax.axhline(TARGETS[key], color="k", linestyle="--", linewidth=1, label=f"target {key} {TARGETS[key]}")
    ax.set(xlabel="epoch", ylabel=" / ".join(sorted(keys)) or "metric", title="Quality per epoch, all runs")
    if keys:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "metric_per_epoch.png", dpi=120)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    runs, epochs = read(out / "runs.csv"), read(out / "epochs.csv")
    time_breakdown(runs, out)
    batch_size(runs, out)
    metric_per_epoch(epochs, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
