"""The device kit's check (run through tools/gpu/check.sh; docs/cuda.md, "Checking on a GPU").

Runs from the repository root on a lent GPU machine with the bundle carried (tools/gpu/bundle.sh's
gpu-bundle.tar.xz, unpacked into the scratch folder, or its gpu-bundle/ folder),
in at most 7 minutes, each step under its own time limit, and writes what it finds into $OUT as it
goes (a call cut short still returns what was done): check.log (this output), summary.json (every
step's verdict, the versions, the figures), bench.json (step bench), logs.tar.gz (every program's
output, the MLPerf logs, conformance tables, gtest reports).

Steps (--only takes names or numbers):
  0 env          the GPU, driver, runtime, OS and glibc; the Python with PyTorch and its wheels'
                 cuDNN, cuBLAS, NCCL (first on LD_LIBRARY_PATH) with their versions; the bundle's
                 libraries resolved; which libstdc++ to use. Always runs.
  1 tests        the bundle's GPU test programs (tests/backends/cuda, tests/comms/nccl)
  2 conformance  mlperf-conformance --backend cuda: fp32 (TF32 off), bf16, fp16, deterministic, with the
                 defaults and again with every other option value (kit/options.py: batch_norm = cudnn
                 or one_pass, depthwise, pointwise = cudnn, pool_chain = off, small_channels = pad);
                 compute-sanitizer memcheck over a few ops
  3 cosmoflow    the CosmoFlow mini to its target on cuda in fp32 and bf16; the official checker
  4 deepcam      the DeepCAM mini to its target on cuda in fp32 and bf16; the official checker (its only
                 failures may be the full dataset's sizes, which a mini cannot log)
  5 resume       the CosmoFlow mini on cuda (fp32, deterministic): 2 epochs straight, and 1 epoch with a
                 checkpoint resumed for the 2nd: the exported weights are equal bytes; the checkpoint also
                 resumed on the reference backend (--switch-backend): the validation error within 1%
  6 pipeline     CosmoFlow 128^3 and DeepCAM 768x1152 fed from files on cuda: how long the step waits for
                 its batch, and how fast the readers go alone
  7 bench        mlperf-bench on cuda (CosmoFlow 128^3 b1, b4; DeepCAM 768x1152 b8, bf16), DeepCAM b8 with
                 each other option value alone (batch_norm = cudnn, one_pass; depthwise, pointwise =
                 cudnn), CosmoFlow b4 with pool_chain = off and small_channels = pad, beside the
                 same models in the machine's PyTorch (eager AMP bf16 and fp16, torch.compile),
                 channels-last; last, so that torch.compile takes the time left
  8 layers       (only with --only) mlperf-bench --layers on cuda: per-layer times
  9 profile      (only with --only; --budget 300 s by default) every speed question in one call, in this
                 order, each part under its own limit: the cuda backend's backend.profile=DIR (find.json,
                 nodes.json), mlph-cuda-probe (ceilings and decision micro-benchmarks), PyTorch layer by
                 layer (pytorch_gpu.py --layers --unique, torch.profiler's top kernels), ncu on the
                 profiled step; results under logs/profile/ and profile.json (per decision: the winner, by
                 how much, its error)
--dry-run (no GPU: here and in CI) checks the bundle instead: every library resolved inside it but
those the device provides, plug-ins loading from it, reference conformance from it, the official
checker from it, mlph-cuda-probe from it (no CUDA device), the PyTorch peer on the CPU; then "no GPU: GPU
steps skipped". --rehearse BACKEND runs the GPU steps' own code on a CPU backend at small sizes.
"""
import argparse
import math
import os
import shutil
import sys
import tarfile
import time

from .common import ROOT, read_json
from .runner import Kit
from .steps import BY_NAME, DEFAULT_STEPS, STEPS
from .steps import dry, env, profile

# Seconds the whole check may take (--budget) before --timeout-scale: each step ends by it.
BUDGET_S = 420


def positive_seconds(text):
    """A time limit or a scale: a finite number above 0 (NaN and inf would make every limit meaningless)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the bundle itself")
    p.add_argument("--only", help="comma-separated steps (names or numbers); env always runs")
    p.add_argument("--timeout-scale", type=positive_seconds, default=1.0, help="multiply every time limit (default 1)")
    p.add_argument("--budget", type=positive_seconds,
                   help=f"seconds the whole check may take (default {BUDGET_S}; {profile.BUDGET_S} for --only profile): "
                        "a rerun in less device time")
    p.add_argument("--bundle", help="the bundle: a folder, or a .tar.xz unpacked into the scratch folder "
                                    "(default gpu-bundle, else gpu-bundle.tar.xz)")
    p.add_argument("--out", help="where the results go (default $OUT, else out/gpu-check)")
    p.add_argument("--work", help="scratch for data and logs (default /tmp/mlph-gpu-check)")
    p.add_argument("--with-torch", action="store_true", help="--dry-run: also run the PyTorch peer on the CPU")
    p.add_argument("--rehearse", metavar="BACKEND",
                   help="no GPU: run the GPU steps' code on a CPU backend at small sizes (a test of this kit)")
    args = p.parse_args()
    if args.rehearse and args.dry_run:
        p.error("--rehearse or --dry-run, not both")
    args.out = args.out or os.environ.get("OUT") or os.path.join(ROOT, "out", "gpu-check")
    args.work = args.work or "/tmp/mlph-gpu-check"
    only = []
    for item in (args.only.split(",") if args.only else DEFAULT_STEPS):
        item = item.strip()
        name = STEPS[int(item)] if item.isdigit() and int(item) < len(STEPS) else item
        if name not in STEPS:
            p.error(f"--only {item}: the steps are {', '.join(f'{i} {s}' for i, s in enumerate(STEPS))}")
        only.append(name)
    args.only = ["env"] + [s for s in STEPS[1:] if s in only]
    if args.budget is None:
        args.budget = profile.BUDGET_S if args.only == ["env", "profile"] else BUDGET_S
    return args


def unpack(archive, work):
    """The bundle packed by bundle.sh (what the device tool carries), unpacked into `work`."""
    target = os.path.join(work, "bundle")
    shutil.rmtree(target, ignore_errors=True)
    with tarfile.open(archive, "r:xz") as tar:
        top = {m.name.split("/")[0] for m in tar.getmembers()}
        if len(top) != 1 or any(m.name.startswith("/") or ".." in m.name.split("/") for m in tar.getmembers()):
            sys.exit(f"check.py: {archive} is not a bundle made by tools/gpu/bundle.sh")
        try:
            tar.extractall(target, filter="data")  # Python >= 3.11.4: plain files and folders only
        except TypeError:
            tar.extractall(target)
    return os.path.join(target, top.pop())


def main():
    args = parse_args()
    began = time.monotonic()
    if args.bundle is None:
        folder, archive = os.path.join(ROOT, "gpu-bundle"), os.path.join(ROOT, "gpu-bundle.tar.xz")
        args.bundle = folder if os.path.exists(os.path.join(folder, "bundle.json")) or not os.path.exists(archive) \
            else archive
    unpacked = ""
    if args.bundle.endswith(".tar.xz") and os.path.isfile(args.bundle):
        unpacked = args.bundle
        args.bundle = unpack(args.bundle, args.work)
    check = Kit(args)
    check.start = began
    if unpacked:
        check.say(f"unpacked {unpacked} into {check.bundle} in {time.monotonic() - began:.1f} s")
    manifest = os.path.join(check.bundle, "bundle.json")
    check.manifest = read_json(manifest) or {}
    if not check.manifest:
        check.say(f"FAIL: no bundle at {check.bundle} (bundle.json missing): run tools/gpu/bundle.sh first")
        return 2
    check.say(f"mlperf-hpc GPU check: steps {', '.join(args.only)}; results in {check.out}")
    if args.dry_run:
        dry.dry_run(check)
    else:
        env_status = check.step(0, "env", env.LIMIT_S, env.run)
        for name in args.only[1:]:
            if env_status == "FAIL":
                check.summary["steps"][name] = dict(status="SKIP", seconds=0.0, parts=[],
                                                    reason="the environment step failed: " +
                                                    check.summary["steps"]["env"]["reason"])
                continue
            check.step(STEPS.index(name), name, BY_NAME[name].LIMIT_S, BY_NAME[name].run)
    check.save()
    check.say("== summary")
    for name, record in check.summary["steps"].items():
        check.say(f"{record['status']:4} {STEPS.index(name)} {name}: {record['reason']}")
    failed = any(r["status"] == "FAIL" for r in check.summary["steps"].values())
    check.say(f"{'FAILED' if failed else 'done'} in {check.elapsed():.0f} s; summary.json, bench.json, logs.tar.gz "
              f"in {check.out}")
    return 1 if failed else 0
