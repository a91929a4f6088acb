#!/usr/bin/env python3
"""The a64fx-sve backend on A64FX, on paper: an analytic model of CosmoFlow (k=3, 128^3) training
that predicts the fraction of the node's fp32 peak, and its check against QEMU.

    tools/cross/a64fx_model.py --build build-aarch64            # the model's table (Markdown)
    tools/cross/a64fx_model.py --build build-aarch64 --check    # only the instruction-count check

For every convolution pass of every layer, the script runs the backend's own pass once under
`qemu-aarch64 -cpu a64fx` with a TCG plug-in (tools/cross/insn-count) that counts the instructions
executed in the tile kernels by class. The model's count of FMA, LD1RW and LD1W instructions, derived
below from the blocking rules of backends/a64fx-sve/kernels/conv.cpp and tile.hpp, must equal QEMU's
exactly (--check fails otherwise); the measured instructions per FMA then enter the timing model.
The run uses 3 x 3 output rows of the layer's full width and full channel counts (the instruction mix
depends on the width and the channels, not on the number of rows). Assumptions: docs/performance.md.
"""
import argparse
import os
import re
import subprocess
import sys

# ---- A64FX (one Fugaku node), fp32 ----------------------------------------------------------------
CORES = 48            # 4 core-memory groups (CMG) of 12
GHZ = 2.0             # Fugaku's normal mode (2.2 GHz boost not assumed)
LANES = 16            # 512-bit SVE, float32
FMA_PER_CYCLE = 2     # two FMA pipes
ISSUE_PER_CYCLE = 4   # decode and commit width
LOADS_PER_CYCLE = 2   # two load pipes (64 B each)
L2_BYTES_PER_CYCLE = 32   # sustained L2 -> core read bandwidth assumed per core (CMG aggregate ~0.77 TB/s)
HBM_BYTES_PER_S = 800e9   # sustained of the 1024 GB/s HBM2 peak (STREAM-like)
PEAK = CORES * GHZ * 1e9 * FMA_PER_CYCLE * LANES * 2   # 6.144 TFLOP/s
# What the bounds above leave out (load-to-use latency, the out-of-order window, TLB misses, OpenMP
# barriers) is taken as a ceiling: the best published A64FX SGEMM sustains about 90% of peak, so a
# compute-bound pass is assumed to reach at most 85% of its bound.
CEILING = 0.85

# ---- the blocking rules of conv.cpp / tile.hpp ----------------------------------------------------
L1_WEIGHT_BYTES = 32 << 10
REDUCTION_BLOCK_BYTES = 2 << 20


def vectors_for(cols, lanes):
    return max(1, min(4, -(-cols // lanes)))


def max_rows(vectors):
    return {1: 12, 2: 12, 3: 8, 4: 6}[vectors]


def chunk_depth(vectors, lanes):
    return max(1, L1_WEIGHT_BYTES // (vectors * lanes * 4))


def tiles(n, rows):
    """Tile row counts covering n positions, at most `rows` each."""
    return [min(rows, n - first) for first in range(0, n, rows)]


def chunks_of(kernel, channels, max_depth):
    """(kd, kh, kw, depth) patterns cut into chunks of at most max_depth steps, as chunks_of in conv.cpp."""
    chunks, depth = [[]], 0
    for kd in range(kernel):
        for kh in range(kernel):
            for kw in range(kernel):
                for c0 in range(0, channels, max_depth):
                    d = min(max_depth, channels - c0)
                    if depth + d > max_depth and chunks[-1]:
                        chunks.append([])
                        depth = 0
                    chunks[-1].append((kd, kh, kw, d))
                    depth += d
    return chunks


def counts(pass_name, shape, lanes=LANES):
    """FMA, LD1RW and LD1W instructions the tiles execute for one pass, and the work items it spreads
    over threads. shape = (depth, height, width, ci, co, kernel): stride 1, 'same' padding, one group."""
    d, h, w, ci, co, k = shape
    pad = (k - 1) // 2
    fma = ld1rw = ld1w = 0
    if pass_name in ("forward", "backward-data"):
        # forward: tiles of positions x output channels, reduction over taps x input channels (W padded,
        # so every kw counts); backward data (stride 1: one residue class) is the same with ci and co
        # exchanged and the kernel flipped, which has the same valid-tap counts.
        red, cols = (ci, co) if pass_name == "forward" else (co, ci)
        v = vectors_for(cols, lanes)
        p, col_tiles = max_rows(v), -(-cols // (v * lanes))
        for chunk_index, chunk in enumerate(chunks_of(k, red, chunk_depth(v, lanes))):
            for od in range(d):
                for oh in range(h):
                    depth = sum(dd for kd, kh, kw, dd in chunk if 0 <= od - pad + kd < d and 0 <= oh - pad + kh < h)
                    if pass_name == "backward-data" and depth == 0:
                        continue  # accumulate-only: nothing to add
                    if pass_name == "forward" and depth == 0 and chunk_index > 0:
                        continue
                    for rows in tiles(w, p):
                        fma += rows * v * depth * col_tiles
                        ld1rw += rows * depth * col_tiles
                        ld1w += v * depth * col_tiles  # B
                        # C: the bias (loaded once per vector) in the forward's first chunk, else C itself
                        first_bias = pass_name == "forward" and chunk_index == 0
                        ld1w += (v if first_bias else rows * v) * col_tiles
        items = d * h * col_tiles  # rows x column tiles (rows grouped into blocks of whole rows)
    else:  # backward weights: tiles of (kw, ci) x output channels of one (kd, kh), reduction over positions
        v = vectors_for(co, lanes)
        p, col_tiles = max_rows(v), -(-co // (v * lanes))
        run = k * ci  # the taps kw of one (kd, kh) merged (one group, no dilation)
        rows_all = d * h
        block = max(1, REDUCTION_BLOCK_BYTES // (w * co * 4))
        sub = max(1, L1_WEIGHT_BYTES // (w * 4 * v * lanes))
        for first in range(0, rows_all, block):
            last = min(rows_all, first + block)
            for s0 in range(first, last, sub):
                for kd in range(k):
                    for kh in range(k):
                        segments = sum(1 for r in range(s0, min(last, s0 + sub))
                                       if 0 <= r // h - pad + kd < d and 0 <= r % h - pad + kh < h)
                        if segments == 0:
                            continue
                        for rows in tiles(run, p):
                            fma += rows * v * segments * w * col_tiles
                            ld1rw += rows * segments * w * col_tiles
                            ld1w += (v * segments * w + rows * v) * col_tiles
        items = col_tiles * k * k * len(tiles(run, p))
    return {"fma": fma, "ld1rw": ld1rw, "ld1w": ld1w, "items": items}


# ---- CosmoFlow -----------------------------------------------------------------------------------
EDGE, KERNEL = 128, 3
LAYERS = [(EDGE >> i, 4 if i == 0 else 32 << (i - 1), 32 << i) for i in range(5)]  # (edge, ci, co)
PASSES = ("forward", "backward-data", "backward-weights")


MEASURED = {}


def measure(build, pass_name, shape):
    """QEMU's counts for one pass of the backend on a64fx: fma, ld1rw, ld1w, total."""
    if (pass_name, shape) not in MEASURED:
        MEASURED[(pass_name, shape)] = run_counted(build, pass_name, shape)
    return MEASURED[(pass_name, shape)]


def run_counted(build, pass_name, shape):
    binary = os.path.join(build, "bin", "a64fx-conv-pass")
    plugin = os.path.join(build, "insn-count", "libinsn_count.so")
    if not os.path.exists(plugin) or os.path.getmtime(plugin) < os.path.getmtime(SOURCE):
        os.makedirs(os.path.dirname(plugin), exist_ok=True)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", plugin, SOURCE], check=True)
    symbols = subprocess.run(["aarch64-linux-gnu-nm", "-S", "--defined-only", binary], check=True,
                             capture_output=True, text=True).stdout
    spans = [(int(a, 16), int(a, 16) + int(s, 16)) for a, s, _, name in
             (line.split(maxsplit=3) for line in symbols.splitlines() if len(line.split()) == 4) if "gemm_tile" in name]
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    d, h, w, ci, co, k = shape
    run = subprocess.run(["qemu-aarch64", "-cpu", "a64fx", "-d", "plugin", "-plugin", f"{plugin},lo={lo:#x},hi={hi:#x}",
                          binary, pass_name, str(d), str(h), str(w), str(ci), str(co), str(k)],
                         check=True, capture_output=True, text=True)
    found = dict(re.findall(r"(total|fma|ld1rw|ld1w)=(\d+)", run.stderr))
    if len(found) != 4:
        sys.exit(f"no instruction counts from the QEMU plug-in: {run.stderr.strip()}")
    return {key: int(value) for key, value in found.items()}


SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "insn-count", "insn_count.c")


def check(build):
    """The model's counts against QEMU's for every pass of every layer (3 x 3 output rows)."""
    rows, ok = [], True
    for layer, (edge, ci, co) in enumerate(LAYERS, 1):
        for pass_name in PASSES:
            if layer == 1 and pass_name == "backward-data":
                continue  # the data has no gradient
            shape = (3, 3, edge, ci, co, KERNEL)
            model, qemu = counts(pass_name, shape), measure(build, pass_name, shape)
            same = all(model[key] == qemu[key] for key in ("fma", "ld1rw", "ld1w"))
            ok = ok and same
            rows.append((layer, pass_name, shape, model, qemu, same))
    return rows, ok


def slice_count(threads, items, rows):
    """conv.cpp's slice_count: of ceil(2T/items) .. twice that, the slice count with the least idle share."""
    least = -(-2 * threads // items)
    idle = lambda s: (-(-s * items // threads) * threads - s * items) / (s * items)
    return min(min(range(least, 2 * least + 1), key=lambda s: (idle(s), s)), rows)


def thread_share(units, threads=CORES):
    """The static split of parallel_chunks: thread i takes units [units*i/T, units*(i+1)/T)."""
    parts = max(1, min(threads, units))
    return [(units * i // parts, units * (i + 1) // parts) for i in range(parts)]


def pass_time(pass_name, edge, ci, co, per_fma, threads=CORES):
    """Seconds per sample for one pass at full size on a node, the bound, and the threads' busy share."""
    c = counts(pass_name, (edge, edge, edge, ci, co, KERNEL))
    x_bytes, y_bytes, w_bytes = edge ** 3 * ci * 4, edge ** 3 * co * 4, KERNEL ** 3 * ci * co * 4
    padded_x = (edge + 2) * edge * edge * ci * 4
    cols = co if pass_name != "backward-data" else ci
    v = vectors_for(cols, LANES)
    col_tiles = -(-cols // (v * LANES))
    rows = edge * edge
    if pass_name == "backward-weights":
        # conv.cpp: items per column tile; rows cut into slices when there are fewer items than 2 threads
        items = c["items"]
        slices = 1 if items >= 2 * threads else slice_count(threads, items, rows)
        units = slices * items
        per_tile = items // col_tiles
        # Each thread streams, from L2, dy's rows of the slices and column tiles its units cover, and x's
        # rows once per (kd, kh): its share of dy plus 9 times its share of x.
        share = [((hi - 1) // items - lo // items + 1) / slices *
                 ((((hi - 1) % items) // per_tile - (lo % items) // per_tile + 1) / col_tiles if hi - lo < items else 1)
                 for lo, hi in thread_share(units, threads)]
        l2_per_core = max(share) * (y_bytes + 9 * padded_x)
        hbm = 3 * x_bytes + y_bytes  # x's padded copy (read, write), dy once; the rest from L2
    else:
        tiles_per_row = -(-edge // max_rows(v))
        block = max(1, -(-16 // tiles_per_row))  # rows_per_item in conv.cpp
        while block > 1 and -(-rows // block) * col_tiles < 2 * threads:
            block = (block + 1) // 2
        units = -(-rows // block) * col_tiles
        source = x_bytes if pass_name == "forward" else y_bytes
        # every item streams all of its column tile's weights once; every output row reads its 9 input rows
        l2_per_core = (-(-rows // block) * w_bytes + col_tiles * 9 * source) / threads
        # the input's padded copy (read, write, read), the output written (backward data: read and written)
        hbm = 3 * source + (y_bytes if pass_name == "forward" else 2 * x_bytes)
    busy = units / (threads * -(-units // threads))
    per_core = {"FMA pipes": c["fma"] / FMA_PER_CYCLE / (threads * busy),
                "issue": c["fma"] * per_fma / ISSUE_PER_CYCLE / (threads * busy),
                "L1 loads": (c["ld1rw"] + c["ld1w"]) / LOADS_PER_CYCLE / (threads * busy),
                "L2": l2_per_core / L2_BYTES_PER_CYCLE}
    bound = max(per_core, key=per_core.get)
    seconds = per_core[bound] / (GHZ * 1e9) / CEILING
    if hbm / HBM_BYTES_PER_S > seconds:
        bound, seconds = "HBM", hbm / HBM_BYTES_PER_S
    lanes_used = cols / (v * LANES * col_tiles)
    executed = 2.0 * c["fma"] * LANES * lanes_used  # FLOP the FMAs do, padding's skipped taps excluded
    return seconds, bound, busy, lanes_used, executed


def other_ops():
    """Seconds per sample of what is not a convolution: memory-bound streams at the HBM rate, and log1p,
    an SVE series of about 25 instructions and 2 divisions per vector (FDIV assumed 16 cycles each)."""
    rows = []
    vectors = EDGE ** 3 * 4 / LANES
    rows.append(("log1p (SVE series)", max(vectors * (25 / ISSUE_PER_CYCLE + 2 * 16) / CORES / (GHZ * 1e9),
                                           EDGE ** 3 * 4 * 6 / HBM_BYTES_PER_S)))
    act = sum((edge ** 3) * co * 4 for edge, _, co in LAYERS)  # conv outputs, bytes
    pooled = sum((edge // 2) ** 3 * co * 4 for edge, _, co in LAYERS)
    # leaky_relu: forward reads y writes y'; backward reads x, dy, reads and writes dx
    rows.append(("leaky_relu fwd + bwd", 6 * act / HBM_BYTES_PER_S))
    # max_pool: forward reads x writes y/8; backward reads x, dy/8, reads and writes dx
    rows.append(("max_pool fwd + bwd", (act + pooled + 3 * act + pooled) / HBM_BYTES_PER_S))
    # gradients of the activations zeroed each step (conv and pool outputs, the inputs of each layer)
    rows.append(("zeroing gradients", (act + pooled) / HBM_BYTES_PER_S))
    params = sum(KERNEL ** 3 * ci * co + co for _, ci, co in LAYERS) + 32768 * 128 + 128 * 64 + 64 * 4
    rows.append(("dense layers, SGD update", (3 * 32768 * 128 * 4 + 5 * params * 4) / HBM_BYTES_PER_S))
    return rows


def model_table(build):
    lines = ["| layer | pass | GFLOP | lanes used | threads busy | instr/FMA (QEMU) | bound | ms | % of peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    # GFLOP: 2 x positions x taps x ci x co, as CosmoFlow's FLOP count (and mlperf-bench) has it; % of
    # peak: the FLOP the FMAs execute (taps that fall in the padding are skipped) over the time.
    total_s, total_flop = 0.0, 0.0
    for layer, (edge, ci, co) in enumerate(LAYERS, 1):
        for pass_name in PASSES:
            if layer == 1 and pass_name == "backward-data":
                continue
            q = measure(build, pass_name, (3, 3, edge, ci, co, KERNEL))
            per_fma = q["total"] / q["fma"]
            seconds, bound, busy, lanes_used, executed = pass_time(pass_name, edge, ci, co, per_fma)
            flop = 2.0 * edge ** 3 * KERNEL ** 3 * ci * co  # as counted for CosmoFlow (padding included)
            total_s += seconds
            total_flop += flop
            lines.append(f"| conv{layer} {ci}->{co} @{edge}^3 | {pass_name} | {flop / 1e9:.1f} | {lanes_used:.0%} | "
                         f"{busy:.0%} | {per_fma:.2f} | {bound} | {seconds * 1e3:.2f} | {executed / seconds / PEAK:.0%} |")
    return lines, total_s, total_flop


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="the aarch64 build tree (with bin/a64fx-conv-pass)")
    parser.add_argument("--check", action="store_true", help="only compare the model's counts with QEMU's")
    parser.add_argument("--ceiling", type=float, default=CEILING,
                        help=f"share of a compute-bound pass's bound it sustains (default {CEILING})")
    args = parser.parse_args()
    globals()["CEILING"] = args.ceiling
    rows, ok = check(args.build)
    print("| layer | pass | rows x width x ci -> co | FMA model / QEMU | LD1RW model / QEMU | LD1W model / QEMU | instr/FMA |")
    print("|---|---|---|---|---|---|---|")
    for layer, pass_name, (d, h, w, ci, co, _), model, qemu, same in rows:
        print(f"| conv{layer} | {pass_name} | {d}x{h}x{w}x{ci} -> {co} | {model['fma']} / {qemu['fma']} | "
              f"{model['ld1rw']} / {qemu['ld1rw']} | {model['ld1w']} / {qemu['ld1w']} | "
              f"{qemu['total'] / qemu['fma']:.2f}{'' if same else ' MISMATCH'} |")
    if not ok:
        sys.exit("the model's instruction counts differ from QEMU's")
    if args.check:
        return
    lines, conv_s, conv_flop = model_table(args.build)
    print()
    print("\n".join(lines))
    print(f"\nconvolutions (ceiling {CEILING}): {conv_flop / 1e9:.0f} GFLOP (CosmoFlow's count) in {conv_s * 1e3:.1f} ms "
          f"per sample: {conv_flop / conv_s / PEAK:.1%} of peak")
    print("\n| other work per sample | ms |\n|---|---|")
    other = 0.0
    for name, seconds in other_ops():
        other += seconds
        print(f"| {name} | {seconds * 1e3:.2f} |")
    step = conv_s + other
    print(f"\ntraining step: {step * 1e3:.1f} ms per sample, {1 / step:.1f} samples/s per node, "
          f"{conv_flop / step / PEAK:.1%} of the fp32 peak ({PEAK / 1e12:.3f} TFLOP/s) counting the convolutions' FLOP")


if __name__ == "__main__":
    main()
