#!/usr/bin/env bash
# Issue 37's figures of onednn-cpu in one run, on whatever CPU this is (an AMX Xeon is the one the issue
# wants): what the CPU has, the model side by side with PyTorch (compare.py: CosmoFlow and DeepCAM, fp32
# and bf16), the per-layer and per-block table in bf16 against the units' measured peaks, conv1 padded or
# not (backend.pad_input_channels: its taps folded, docs/performance.md) with peak memory, and which
# oneDNN kernels conv1's passes get. Every command's output is kept in OUT_DIR; summary.txt has the lines
# that answer the issue.
#   tools/bench/cpu-figures.sh [BUILD_DIR] [OUT_DIR]       (defaults: build, out/cpu-figures)
# Environment: THREADS (2), EDGE (128), BATCH (4), DEEPCAM_SIZE (384x576: PyTorch's fp32 step at 768x1152
# takes minutes on 2 cores), STEPS (2). About 12 minutes on 2 cores of the AMD build machine.
set -euo pipefail
build=${1:-build}
out=${2:-out/cpu-figures}
threads=${THREADS:-2} edge=${EDGE:-128} batch=${BATCH:-4} steps=${STEPS:-2}
size=${DEEPCAM_SIZE:-384x576}
height=${size%x*} width=${size#*x}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's, with PyTorch
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
export OMP_NUM_THREADS=$threads

note() { printf '%s\n' "$*" | tee -a "$summary"; }
bench() { "$build/bin/mlperf-bench" --backend onednn-cpu --set "data.edge=$edge" --set "train.batch_size=$batch" \
            --set "backend.threads=$threads" --steps "$steps" --warmup 1 "$@"; }

note "== $(date -u +%F) $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), $threads threads"
note "cpu: $(lscpu | sed -n 's/^Model name: *//p'); $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
note "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# Side by side with PyTorch: our samples/s, PyTorch's faster memory format, the ratio.
for precision in fp32 bf16; do
  $python "$here/compare.py" --build "$build" --backends onednn-cpu --threads "$threads" --steps "$steps" \
    --warmup 1 --no-layers --edge "$edge" --batch "$batch" --precision "$precision" > "$out/cosmoflow-$precision.txt" 2>&1
  note "cosmoflow ${edge}^3 b$batch $precision: $(grep -E '^\| onednn-cpu' "$out/cosmoflow-$precision.txt" | head -1)"
  $python "$here/compare.py" --build "$build" --workload deepcam --height "$height" --width "$width" --backends onednn-cpu \
    --threads "$threads" --steps "$steps" --warmup 1 --no-layers --precision "$precision" > "$out/deepcam-$precision.txt" 2>&1
  note "deepcam ${height}x${width} b1 $precision: $(grep -E '^\| onednn-cpu' "$out/deepcam-$precision.txt" | head -1)"
done

# Per layer and per block in bf16, against the peak of the units each runs on.
bench --set backend.precision=bf16 --layers > "$out/layers-bf16.txt" 2>&1
note "$(grep -E '^per layer' "$out/layers-bf16.txt")"
note "$(grep -E '^(layer|conv1|conv1\.act|conv1\.pool|block|conv1 block) ' "$out/layers-bf16.txt")"

# conv1 padded (its taps folded, then 16 channels) or not; auto pads where oneDNN sees AMX.
for pad in 0 16 auto; do
  bench --set backend.precision=bf16 --set "backend.pad_input_channels=$pad" > "$out/pad-$pad.txt" 2>&1
  note "bf16 pad_input_channels=$pad: $(grep -E '^train step' "$out/pad-$pad.txt"); $(grep -E '^peak memory' "$out/pad-$pad.txt")"
done
bench --set backend.precision=fp32 > "$out/fp32.txt" 2>&1
note "fp32: $(grep -E '^train step' "$out/fp32.txt"); $(grep -E '^peak memory' "$out/fp32.txt")"

# Which kernels conv1's passes get (its input channels: 4, or 16 padded), with their times, bf16, auto.
ONEDNN_VERBOSE=1 bench --set backend.precision=bf16 > "$out/verbose-bf16.txt" 2>&1 || true
note "conv1's oneDNN primitives (bf16, pad auto): kernel, pass, shape, the last run's ms"
grep '^onednn_verbose,exec' "$out/verbose-bf16.txt" | grep -E ',convolution,.*mb[0-9]+_ic(4|16)oc32' |
  awk -F, '{last[$5 " " $6 " " $(NF-1)] = $NF} END {for (k in last) print k, last[k]}' | sort | tee -a "$summary"
note "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
