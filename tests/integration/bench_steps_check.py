#!/usr/bin/python3
"""mlperf-bench takes a model's steps as mlperf-run does, so that a GPU backend is timed as it runs:
a backend that can defer the loss (ABI 1.6; here the tracing backend, which logs every train_step's
defer_loss and every read_loss) is asked to defer it at every step and waited for once per timed loop,
not after each step; and with --data the training batches come from the dataset's files through the
run's pipeline, with the wait for them reported beside the step time.

  bench_steps_check.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

build = sys.argv[1]
samples, batch, steps, warmup, step_seconds = 8, 2, 3, 1, 0.05
failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: {got!r}, expected {want!r}")


with tempfile.TemporaryDirectory() as tmp:
    data, losses, out = (os.path.join(tmp, name) for name in ("data", "losses.txt", "bench.json"))
    subprocess.run([os.path.join(build, "bin", "mlperf-run"), "--workload", "cosmoflow", "--generate-data", data,
                    "--set", "data.edge=32", "--set", f"data.synthetic.train={samples}", "--set",
                    "data.synthetic.valid=2"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([os.path.join(build, "bin", "mlperf-bench"), "--backend", "tracing", "--plugin-dir",
                    os.path.join(build, "test-plugins"), "--set", f"backend.trace={os.path.join(tmp, 'trace.txt')}",
                    "--set", f"backend.losses={losses}", "--set", f"backend.step_seconds={step_seconds}",
                    "--set", "backend.threads=1", "--set", "data.edge=32", "--set", f"train.batch_size={batch}",
                    "--steps", str(steps), "--warmup", str(warmup), "--data", data, "--json", out],
                   check=True, stdout=subprocess.DEVNULL)
    train_bytes = sum(os.path.getsize(os.path.join(data, "train", name)) for name in os.listdir(os.path.join(data, "train")))
    with open(losses) as f:
        calls = f.read().split("\n")[:-1]
    with open(out) as f:
        result = json.load(f)

# The synthetic loop, then the one fed from files: warm-up steps and a wait, timed steps and a wait.
loop = ["step 1"] * warmup + ["read"] + ["step 1"] * steps + ["read"]
expect("train_step (defer_loss) and read_loss calls", calls, loop + loop)
files = result.get("files", {})
expect("training samples in the files", files.get("samples"), samples)
for name, timing in (("synthetic", result["model"]), ("from files", files)):
    if not timing.get("train_s", 0) >= step_seconds:
        failures.append(f"{name}: train_s {timing.get('train_s')} is shorter than the backend's step ({step_seconds} s)")
# The pread ceiling beside the readers' rate: the split's bytes per sample, a rate measured.
expect("bytes per sample (the split's files)", files.get("bytes_per_sample"), train_bytes / samples)
if not files.get("ceiling_samples_s", 0) > 0 or not files.get("batch_memory_bytes", 0) > 0:
    failures.append(f"from files: no pread ceiling or batch memory measured: {files}")
if not 0 <= files.get("wait_s", -1) <= files.get("train_s", 0):
    failures.append(f"from files: wait_s {files.get('wait_s')} is not within [0, train_s {files.get('train_s')}]")
print("\n".join(failures) or f"{len(calls)} calls as a run makes them; from files {files['train_s']:.3f} s per step, "
      f"{files['wait_s'] * 1e3:.2f} ms of it waiting for the batch")
sys.exit(1 if failures else 0)
