#!/usr/bin/python3
"""mlperf-bench --layers on CosmoFlow at 32^3 (reference backend): every layer timed, each conv's work
as the model's arithmetic gives it (2 x outputs x 27 taps x Ci x Co; twice that in training for conv1,
whose input is data and gets no gradient, three times for the others), the peak named and every
unit's peak in the JSON; each activation a row of its own (kind "activation", no FLOPs counted), never
folded into its conv's. Each conv -> leaky ReLU -> max-pool also timed as one block, beside the sum of
its three rows.

  bench_layers_check.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

build = sys.argv[1]
batch, edge = 2, 32
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "bench.json")
    subprocess.run([os.path.join(build, "bin", "mlperf-bench"), "--backend", "reference", "--set", f"data.edge={edge}",
                    "--set", f"train.batch_size={batch}", "--set", "backend.threads=1", "--steps", "1", "--warmup", "0",
                    "--layers", "--json", out], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        result = json.load(f)

failures = []
def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: {got!r}, expected {want!r}")

expect("peak precision", result["peak_precision"], "FP32")
if not result["peak_gflops"] > 0:
    failures.append(f"peak_gflops {result['peak_gflops']}")
# Every unit's peak is in the JSON: fp32's is the one an fp32 run is measured against; the bf16 units'
# are measured only for a bf16 run.
expect("peaks.fp32", result["peaks"]["fp32"], result["peak_gflops"])
expect("bf16 peaks of an fp32 run", (result["peaks"]["bf16_avx512"], result["peaks"]["bf16_amx"]), (0, 0))
layers = {layer["name"]: layer for layer in result["layers"]}
expect("layers", sorted(layers), sorted([f"conv{i}{part}" for i in range(1, 6) for part in ("", ".act", ".pool")] +
                                        ["dense1", "dense1.act", "dense2", "dense2.act", "output", "output.tanh"]))
for name, layer in layers.items():
    kind = "activation" if name.endswith((".act", ".tanh")) else "pool" if name.endswith(".pool") else \
        "conv" if name.startswith("conv") else "dense"
    expect(f"{name} kind", layer.get("kind"), kind)
    if kind in ("activation", "pool"):
        expect(f"{name} train_flops", layer.get("train_flops"), 0.0)
channels, e = 4, edge
for i in range(1, 6):
    conv = layers.get(f"conv{i}", {})
    co = 32 << (i - 1)
    flops = 2.0 * batch * e ** 3 * 27 * channels * co
    expect(f"conv{i} forward_flops", conv.get("forward_flops"), flops)
    expect(f"conv{i} train_flops", conv.get("train_flops"), flops * (2 if i == 1 else 3))
    channels, e = co, e // 2
for name, layer in layers.items():
    if not (layer["train_s"] > 0 and layer["eval_s"] > 0):
        failures.append(f"{name}: not timed ({layer['train_s']}, {layer['eval_s']})")
blocks = {block["name"]: block for block in result["blocks"]}
expect("blocks", sorted(blocks), [f"conv{i} block" for i in range(1, 6)])
for i in range(1, 6):
    block = blocks.get(f"conv{i} block", {})
    parts = [f"conv{i}", f"conv{i}.act", f"conv{i}.pool"]
    expect(f"conv{i} block nodes", block.get("nodes"), parts)
    if not (block.get("train_s", 0) > 0 and block.get("eval_s", 0) > 0):
        failures.append(f"conv{i} block: not timed")
    rows = sum(layers[p]["train_s"] for p in parts if p in layers)
    if abs(block.get("rows_train_s", -1) - rows) > 1e-9 * rows:
        failures.append(f"conv{i} block rows_train_s {block.get('rows_train_s')}, its rows sum to {rows}")
print("\n".join(failures) or f"{len(layers)} layers and {len(blocks)} blocks, peak {result['peak_gflops']:.0f} GFLOP/s: as expected")
sys.exit(1 if failures else 0)
