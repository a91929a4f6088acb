"""The kit's shared runner (tools/gpu/check.py): one Kit per check, handed to every step."""
import glob
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

from .common import checker_messages, dataset_size_failures, du, python_with, tail_hint, write_json
from .sizes import SIZES

# The backend's options for a conformance row or a run of each precision.
PRECISION_SETS = {p: [f"backend.precision={p}"] for p in ("fp32", "tf32", "bf16", "fp16")}
DETERMINISTIC_SET = ["backend.deterministic=true"]


class Kit:
    """The shared runner: output, programs under a time limit, steps and their parts, the budget, and what
    several steps use (the bundle's programs, the backend's options, generated datasets, the checker)."""
    def __init__(self, args):
        self.args = args
        self.start = time.monotonic()
        self.bundle = os.path.abspath(args.bundle)
        self.out = os.path.abspath(args.out)
        self.work = os.path.abspath(args.work)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.out, exist_ok=True)
        shutil.rmtree(self.logs, ignore_errors=True)  # a rerun's logs only; generated data is kept
        os.makedirs(self.logs)
        self.console = open(os.path.join(self.out, "check.log"), "w")
        self.summary = dict(started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), dry_run=args.dry_run,
                            argv=sys.argv[1:], steps={}, environment={})
        self.manifest = {}
        self.env = dict(os.environ)
        self.python = None  # the Python that holds PyTorch
        self.gpu_name = ""
        self.bench = {}
        # --rehearse BACKEND: the GPU steps' own code run on a CPU backend, without a GPU (the kit's test).
        self.backend = args.rehearse or "cuda"
        self.sizes = SIZES["rehearsal" if args.rehearse else "gpu"]

    # -- output ------------------------------------------------------------------------------------------
    def elapsed(self):
        return time.monotonic() - self.start

    def say(self, text):
        stamp = "[+{:02d}:{:02d}]".format(*divmod(int(self.elapsed()), 60))
        for line in str(text).rstrip("\n").split("\n"):
            print(f"{stamp} {line}", flush=True)
            self.console.write(f"{stamp} {line}\n")
        self.console.flush()

    def save(self):
        """summary.json, bench.json and logs.tar.gz in $OUT, rewritten after every step."""
        self.summary["elapsed_s"] = round(self.elapsed(), 1)
        write_json(os.path.join(self.out, "summary.json"), self.summary)
        if self.bench:
            write_json(os.path.join(self.out, "bench.json"), self.bench)
        with tarfile.open(os.path.join(self.out, "logs.tar.gz.part"), "w:gz") as tar:
            for path in sorted(glob.glob(os.path.join(self.logs, "**"), recursive=True)):
                if os.path.isfile(path) and os.path.getsize(path) <= 4 << 20:  # $OUT takes 16 MiB a file
                    tar.add(path, arcname=os.path.relpath(path, self.work))
        os.replace(os.path.join(self.out, "logs.tar.gz.part"), os.path.join(self.out, "logs.tar.gz"))

    # -- running programs ----------------------------------------------------------------------------------
    def run(self, cmd, log, timeout, env=None, cwd=None, quiet=False):
        """Runs `cmd` (output to logs/`log`) within `timeout` seconds (its whole process group is
        killed after). Returns (exit status or None on timeout, output text)."""
        path = os.path.join(self.logs, log)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not quiet:
            self.say("$ " + " ".join(shlex.quote(c) for c in cmd))
        with open(path, "ab") as f:
            f.write(("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n").encode())
            f.flush()
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or self.env,
                                    cwd=cwd or self.work, start_new_session=True)
            try:
                rc = proc.wait(timeout=max(1.0, timeout))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
                f.write(f"\n*** killed after {timeout:.0f} s\n".encode())
        with open(path, errors="replace") as f:
            text = f.read()
        return rc, text

    def left(self):
        return self.args.budget * self.args.timeout_scale - self.elapsed()

    # -- steps -----------------------------------------------------------------------------------------------
    def step(self, number, name, limit_s, fn):
        """Runs step `fn(kit, record, deadline)` within `limit_s` seconds times --timeout-scale, and within
        what is left of the budget; its record goes into summary.json, which is saved after it."""
        limit = min(limit_s * self.args.timeout_scale, self.left())
        self.say(f"== step {number} {name} (limit {limit:.0f} s)")
        began = time.monotonic()
        record = dict(status="SKIP", reason="", seconds=0.0, parts=[])
        self.summary["steps"][name] = record
        if limit < 5 and name != "env":
            record.update(reason=f"out of time: the check's {self.args.budget * self.args.timeout_scale:.0f} s are "
                                 "spent")
        else:
            deadline = began + limit
            try:
                status, reason = fn(self, record, deadline)
            except Exception as e:  # a bug of this script must not cost the other steps
                status, reason = "FAIL", f"check.py: {type(e).__name__}: {e}"
            record.update(status=status, reason=reason)
        record["seconds"] = round(time.monotonic() - began, 1)
        self.say(f"{record['status']} {name}: {record['reason']} ({record['seconds']:.0f} s)")
        self.save()
        return record["status"]

    @staticmethod
    def remaining(deadline):
        return deadline - time.monotonic()

    @staticmethod
    def deadline_in(seconds):
        return time.monotonic() + seconds

    def part(self, record, name, status, reason, **figures):
        """One sub-check of a step (a precision, a program): shown, and kept in summary.json."""
        record["parts"].append(dict(name=name, status=status, reason=reason, **figures))
        self.say(f"  {status} {name}: {reason}")
        return status

    @staticmethod
    def verdict(record, passed_text):
        statuses = [p["status"] for p in record["parts"]]
        failed = [f"{p['name']} ({p['reason']})" for p in record["parts"] if p["status"] == "FAIL"]
        if failed:
            return "FAIL", "; ".join(failed)
        if "PASS" in statuses:
            skipped = [f"{p['name']} skipped ({p['reason']})" for p in record["parts"] if p["status"] == "SKIP"]
            return "PASS", "; ".join([passed_text] + skipped)
        return "SKIP", "; ".join(p["reason"] for p in record["parts"]) or "nothing to run"

    def has_plugin(self, name):
        return os.path.isfile(os.path.join(self.bundle, "lib/mlperf-hpc-1", f"libmlph-{name}.so"))

    def need_cuda_backend(self):
        if self.has_plugin(f"backend-{self.backend}"):
            return None
        return f"no {self.backend} backend in the bundle (libmlph-backend-{self.backend}.so was not built in its tree)"

    def backend_sets(self, precision, deterministic=False):
        """--set arguments of the backend's options for `precision` (none in a rehearsal: another backend)."""
        if self.args.rehearse:
            return []
        sets = PRECISION_SETS[precision] + (DETERMINISTIC_SET if deterministic else [])
        return [arg for s in sets for arg in ("--set", s)]

    def option_sets(self, settings):
        """--set arguments of backend options (kit/options.py; none in a rehearsal: another backend refuses
        them, so a rehearsal runs each variant's code with the backend's defaults)."""
        if self.args.rehearse:
            return []
        return [arg for s in settings for arg in ("--set", s)]

    def program(self, name):
        return os.path.join(self.bundle, "bin", name)

    def bundle_elves(self):
        files = glob.glob(os.path.join(self.bundle, "bin", "*")) + \
            glob.glob(os.path.join(self.bundle, "lib", "mlperf-hpc-1", "*.so")) + \
            glob.glob(os.path.join(self.bundle, "tests", "*"))
        return sorted(f for f in files if os.path.isfile(f))

    # -- what several steps use -------------------------------------------------------------------------------
    def dataset(self, name, config, deadline, sets=(), workload="cosmoflow"):
        """The dataset `name`, generated here by mlperf-run (a few seconds) once per check."""
        path = os.path.join(self.work, "data", name)
        if os.path.isdir(os.path.join(path, "train")):
            return path, ""
        shutil.rmtree(path, ignore_errors=True)
        cmd = [self.program("mlperf-run"), "--generate-data", path] + (["--config", config] if config else
                                                                       ["--workload", workload])
        for s in sets:
            cmd += ["--set", s]
        began = time.monotonic()
        rc, text = self.run(cmd, f"data/{name}.txt", self.remaining(deadline))
        if rc != 0:
            return None, "generating the data: " + ("timed out" if rc is None else f"exit {rc}") + tail_hint(text)
        self.say(f"generated {name} in {time.monotonic() - began:.1f} s ({du(path) / 2**20:.0f} MiB)")
        return path, ""

    def official_checker(self, log, name, mini_dataset=False):
        """(accepted, verdict) of the official checker on `log`. With `mini_dataset`, a log whose only
        failures are the ruleset's full-dataset sizes (DeepCAM's) is accepted, the verdict saying so."""
        checker = os.path.join(self.bundle, "tools", "mllog-check")
        if not os.path.exists(checker):
            return False, "no official checker in the bundle (../shared was not beside the checkout it was made in)"
        env = dict(self.env)
        python = python_with("yaml", [self.python])  # the checker's Python needs PyYAML
        if python:
            env["PATH"] = os.path.dirname(python) + ":" + env.get("PATH", "")
        rc, text = self.run([checker, log], f"checker/{name}.txt", 60, env=env)
        sizes = dataset_size_failures(text) if rc not in (0, None) and mini_dataset else None
        if sizes:
            return True, "SUCCESS but for the full dataset's sizes, which a mini cannot log: " + ", ".join(sizes)
        why = [m.split("\n", 1)[0] for m in checker_messages(text)] or \
            [l.split(" - ", 1)[-1].strip() for l in text.split("\n") if "Failed" in l or "ERROR" in l]
        return rc == 0, ("SUCCESS" if rc == 0 else "FAILED: " + ("; ".join(why[:3]) if why else f"exit {rc}"))

