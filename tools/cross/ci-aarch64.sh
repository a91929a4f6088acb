#!/usr/bin/env bash
# CI for the aarch64 cross build (.ci/run calls it after the native suite): installs the cross tool
# chain, cross-builds what the checks need (core, the CosmoFlow workload, the reference and a64fx-sve
# backends, mlperf-conformance, the SVE kernel tests), then under QEMU user-mode emulation:
#   1. the SVE kernel tests at 512 (A64FX), 256 and 128 bits;
#   2. mlperf-conformance --backend a64fx-sve, every op, optimizer, the layer chains and gradient
#      accumulation, at each of the three vector lengths;
#   3. with --with-model only: the whole-CosmoFlow-model check once, on the emulated A64FX (one
#      training step, which the reference runs twice: 8 minutes under emulation on 2 busy cores, so
#      CI leaves it out; the per-op rows and the training run below cover the same kernels);
#   4. CosmoFlow mini training on a64fx-sve, two epochs of 16 synthetic samples (open division with 8
#      first filters and no warm-up, so that emulation takes about a minute): the mean training loss of
#      the second epoch, over the same samples, must be below the first's.
# Environment: BUILD_DIR (default build-aarch64), JOBS (default: all cores). Exit status 0 when all pass.
#   tools/cross/ci-aarch64.sh [--with-model]
set -euo pipefail
with_model=0
case ${1:-} in
  --with-model) with_model=1 ;;
  "") ;;
  *) echo "usage: tools/cross/ci-aarch64.sh [--with-model]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-aarch64}
jobs=${JOBS:-$(nproc)}
qemu=tools/cross/qemu-aarch64.sh
export OMP_WAIT_POLICY=passive  # spinning OpenMP waiters under emulation only steal the other threads' cores
start=$SECONDS
stage() { echo "== [$((SECONDS - start))s] $*"; }

stage "cross tool chain"
tools/cross/setup-aarch64.sh

stage "configuring $build (aarch64, warnings as errors)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLPH_WERROR=ON \
  --toolchain cmake/toolchains/aarch64-linux-gnu.cmake >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
sed -n '/plug-ins built/,/^-- $/p' "$build.configure.log"
grep -q "backend/a64fx-sve" "$build.configure.log" || { echo "a64fx-sve is not configured"; exit 1; }

stage "building"
cmake --build "$build" -j "$jobs" --target mlperf-run mlperf-conformance mlph-backend-reference mlph-backend-a64fx-sve \
  mlph-workload-cosmoflow mlph-comms-local mlph-storage-posix a64fx_kernel_test

stage "SVE kernel tests at 512, 256 and 128 bits"
ctest --test-dir "$build" --output-on-failure -R '^SveKernels\.AtVl'

# Prints the table's header, any row that did not pass and the summary; fails the script (pipefail)
# when conformance does.
conformance() {
  MLPH_QEMU_CPU=$1 $qemu "$build/bin/mlperf-conformance" --backend a64fx-sve --set backend.threads="$jobs" "${@:2}" |
    grep -vE ' PASS$|^(err =|tolerance|mlperf-conformance:)'
}
for cpu in a64fx max,sve256=on max,sve128=on; do
  stage "mlperf-conformance --backend a64fx-sve, every op, on $cpu"
  conformance "$cpu" --model-steps 0
done
if [ "$with_model" = 1 ]; then
  stage "mlperf-conformance --backend a64fx-sve, the whole CosmoFlow model, on a64fx"
  conformance a64fx --ops cosmoflow --model-steps 1
fi

stage "CosmoFlow mini training on a64fx-sve (emulated A64FX)"
data=$build/cosmoflow-ci
out=$build/cosmoflow-ci-run
[ -d "$data/train" ] || MLPH_QEMU_CPU=a64fx $qemu "$build/bin/mlperf-run" --config configs/cosmoflow/mini.yaml \
  --set data.synthetic.train=16 --set data.synthetic.valid=8 --generate-data "$data" >/dev/null
rm -rf "$out"
set +e
MLPH_QEMU_CPU=a64fx $qemu "$build/bin/mlperf-run" --config configs/cosmoflow/mini.yaml --data "$data" --output "$out" \
  --backend a64fx-sve --division open --set model.conv_size=8 --set optimizer.warmup_epochs=0 --set train.epochs=2 \
  --seed 1 --set backend.threads="$jobs" 2>&1 | tee "$out.log"
status=${PIPESTATUS[0]}
set -e
# Two epochs do not reach the target: exit status 1 with run_stop "aborted" is the expected end; 2 or
# anything else is a failure.
[ "$status" -le 1 ] || { echo "mlperf-run failed with exit status $status"; exit 1; }
python3 - "$out.log" <<'PY'
import re, sys
steps = re.findall(r"epoch (\d+)/\d+ +step \d+/\d+ .* loss ([0-9.eE+-]+)", open(sys.argv[1]).read())
epochs = sorted({e for e, _ in steps})
if epochs != ["1", "2"]:
    sys.exit(f"expected the training losses of epochs 1 and 2 in the progress output, got epochs {epochs}")
mean = {e: sum(float(l) for x, l in steps if x == e) / sum(1 for x, _ in steps if x == e) for e in epochs}
print(f"mean training loss over the same 16 samples: epoch 1 {mean['1']:.4f}, epoch 2 {mean['2']:.4f}")
sys.exit(0 if mean["2"] < mean["1"] else "the training loss did not fall")
PY
stage "aarch64 checks passed"
