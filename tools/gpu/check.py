#!/usr/bin/env python3
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
  2 conformance  mlperf-conformance --backend cuda: fp32 (TF32 off), bf16, fp16, deterministic;
                 compute-sanitizer memcheck over a few ops
  3 cosmoflow    the CosmoFlow mini to its target on cuda in fp32 and bf16; the official checker
  4 deepcam      one DeepCAM mini epoch on cuda
  5 resume       the CosmoFlow mini on cuda (fp32, deterministic): 2 epochs straight, and 1 epoch with a
                 checkpoint resumed for the 2nd: the exported weights are equal bytes; the checkpoint also
                 resumed on the reference backend (--switch-backend): the validation error within 1%
  6 pipeline     CosmoFlow 128^3 and DeepCAM 768x1152 fed from files on cuda: how long the step waits for
                 its batch, and how fast the readers go alone
  7 bench        mlperf-bench on cuda (CosmoFlow 128^3 b1, b4; DeepCAM 768x1152 b8, bf16) beside the
                 same models in the machine's PyTorch (eager AMP bf16 and fp16, torch.compile),
                 channels-last; last, so that torch.compile takes the time left
  8 layers       (only with --only) mlperf-bench --layers on cuda: per-layer times
--dry-run (no GPU: here and in CI) checks the bundle instead: every library resolved inside it but
those the device provides, plug-ins loading from it, reference conformance from it, the official
checker from it, the PyTorch peer on the CPU; then "no GPU: GPU steps skipped".
"""
import argparse
import glob
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bench runs last of the default steps: its torch.compile runs take whatever time is left.
STEPS = ["env", "tests", "conformance", "cosmoflow", "deepcam", "resume", "pipeline", "bench", "layers"]
DEFAULT_STEPS = STEPS[:-1]
# Seconds per step before --timeout-scale; each step ends by the whole check's budget (--budget, default
# BUDGET_S, times --timeout-scale), so that the check ends within it.
STEP_TIMEOUT_S = dict(dry=240, env=60, tests=60, conformance=170, cosmoflow=80, deepcam=50, resume=60, bench=300, pipeline=110,
                      layers=240)
BUDGET_S = 420
# What the device provides: the driver and the CUDA libraries of PyTorch's wheels (too large to carry).
DEVICE_LIBS = re.compile(r"^(libcuda|libcudnn[a-z_]*|libcublas|libcublasLt|libnccl)\.so")
GLIBC_LIBS = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|"
                        r"libmvec|libBrokenLocale|libthread_db|libc_malloc_debug)\.so")
# The backend's options for a conformance row or a run of each precision.
PRECISION_SETS = {p: [f"backend.precision={p}"] for p in ("fp32", "tf32", "bf16", "fp16")}
DETERMINISTIC_SET = ["backend.deterministic=true"]
# Dense bf16/fp16 tensor-core peaks (TFLOP/s, no sparsity) by the name nvidia-smi gives.
BF16_PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.4), ("H200", 989.4), ("H100", 989.4),
                    ("H800", 989.4), ("A100", 312.0), ("L40S", 362.0), ("B200", 2250.0)]
# Issue 26's targets on an H100 (samples/s, 1.5x the best PyTorch measured there) and that PyTorch.
TARGETS = {("cosmoflow", 1): 375, ("cosmoflow", 4): 550, ("deepcam", 8): 130}
PYTORCH_H100 = {("cosmoflow", 1): 249, ("cosmoflow", 4): 369, ("deepcam", 8): 87}
# Ops compute-sanitizer runs (each case a few launches; memcheck slows every kernel 10-100x).
SANITIZER_OPS = ["conv", "conv_transpose", "batch_norm", "max_pool", "dense", "dropout", "softmax_cross_entropy",
                 "iou", "lamb"]
# What the steps run: on the GPU, and in a rehearsal of the kit on a CPU backend (--rehearse) at sizes
# a 2-core machine runs in minutes. bench: (workload, batch, settings, warm-up steps, timed steps);
# torch: the PyTorch peers in the order they run (each a process: variant, precision, workload, batches,
# sizes, timing): eager first, then torch.compile, slow to compile, so that a time limit leaves the
# eager figures; the best PyTorch of issue 26 was eager fp16 at DeepCAM b8 and CosmoFlow b4, eager bf16
# at CosmoFlow b1, compile bf16 at CosmoFlow b4. pipeline: the dataset's settings and (batch, timed
# steps) per run.
PROFILES = dict(
    gpu=dict(
        conformance=[], precisions=["fp32", "bf16", "fp16"], mini_sets=[], torch_device=[],
        bench=[("cosmoflow", 1, ["data.edge=128"], 20, 100), ("cosmoflow", 4, ["data.edge=128"], 10, 50),
               ("deepcam", 8, ["data.height=768", "data.width=1152"], 5, 20)],
        torch=[(variant, precision, workload, batches, sizes, timing)
               for variant, precision, workload, batches in (
                   ("eager", "bf16", "cosmoflow", "1,4"), ("eager", "bf16", "deepcam", "8"),
                   ("eager", "fp16", "cosmoflow", "4"), ("eager", "fp16", "deepcam", "8"),
                   ("compile", "bf16", "cosmoflow", "4"), ("compile", "bf16", "deepcam", "8"),
                   ("compile", "bf16", "cosmoflow", "1"))
               for sizes, timing in [(["--edge", "128"], ["--steps", "20", "--repeats", "5", "--warmup", "5"])
                                     if workload == "cosmoflow" else
                                     (["--height", "768", "--width", "1152"],
                                      ["--steps", "10", "--repeats", "3", "--warmup", "3"])]],
        pipeline=dict(
            datasets=[("cosmoflow", "tfrecord_gzip", ["data.edge=128", "data.synthetic.train=64"], [(4, 48), (1, 96)]),
                      ("cosmoflow", "tfrecord", ["data.edge=128", "data.synthetic.train=64"], [(4, 48), (1, 96)]),
                      ("deepcam", None, ["data.height=768", "data.width=1152", "data.synthetic.train=32"], [(8, 8)])],
            warmup=4,
            about="read every epoch (data.readers auto): CosmoFlow 128^3, 64 files, tfrecord_gzip as shipped and "
                  "tfrecord as storage.inflate=1 stages it; DeepCAM 768x1152, 32 HDF5 files")),
    rehearsal=dict(
        conformance=["--ops", "conv,dense,cosmoflow", "--cases", "1", "--model-steps", "1"], precisions=["fp32"],
        mini_sets=["train.epochs=1", "data.synthetic.train=16", "data.synthetic.valid=8"],
        torch_device=["--device", "cpu"],
        bench=[("cosmoflow", 1, ["data.edge=32"], 1, 2), ("deepcam", 1, ["data.height=32", "data.width=48"], 0, 1)],
        torch=[("eager", "fp32", "cosmoflow", "1", ["--edge", "32"], ["--steps", "1", "--repeats", "1", "--warmup", "0"])],
        pipeline=dict(
            datasets=[("cosmoflow", "tfrecord_gzip", ["data.edge=32", "data.synthetic.train=16"], [(4, 6)]),
                      ("cosmoflow", "tfrecord", ["data.edge=32", "data.synthetic.train=16"], [(4, 6)]),
                      ("deepcam", None, ["data.height=32", "data.width=48", "data.synthetic.train=8"], [(2, 3)])],
            warmup=1, about="CosmoFlow 32^3 tfrecord_gzip and tfrecord, DeepCAM 32x48 (rehearsal)")),
)


class Check:
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
        self.profile = PROFILES["rehearsal" if args.rehearse else "gpu"]

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
    def step(self, name, fn, limit_key=None):
        number = STEPS.index(name)
        limit = min(STEP_TIMEOUT_S[limit_key or name] * self.args.timeout_scale, self.left())
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
                status, reason = fn(record, deadline)
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

    def program(self, name):
        return os.path.join(self.bundle, "bin", name)

    # -- 0: environment --------------------------------------------------------------------------------------
    def step_env(self, record, deadline):
        e = self.summary["environment"]
        e["bundle"] = {k: self.manifest.get(k) for k in ("commit", "branch", "uncommitted_changes", "made", "native",
                                                          "cuda_code", "plugins", "tests", "size_bytes")}
        self.say(f"bundle: commit {str(self.manifest.get('commit'))[:12]} ({self.manifest.get('branch')}), "
                 f"plug-ins {', '.join(self.manifest.get('plugins', []))}, tests {len(self.manifest.get('tests', []))}")
        if self.manifest.get("native"):
            self.say("WARNING: the bundle was built with MLPH_NATIVE=ON (the build machine's CPU): it may not run here")
        e["host"] = dict(kernel=os.uname().release, machine=os.uname().machine, cpus=os.cpu_count(),
                         glibc=os.confstr("CS_GNU_LIBC_VERSION"), os=os_release(),
                         runtime=runtime_of(os.uname().release))
        self.say(f"host: {e['host']['os']}, {e['host']['glibc']}, kernel {e['host']['kernel']} "
                 f"({e['host']['runtime']}), {e['host']['cpus']} CPUs")
        smi_rc, smi = self.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,"
                                "clocks.max.sm,power.limit,pstate", "--format=csv,noheader"], "env/nvidia-smi.txt", 20) \
            if shutil.which("nvidia-smi") else (127, "nvidia-smi not found")
        gpu_ok = smi_rc == 0 and smi.strip().count("\n") >= 1
        if gpu_ok:
            fields = [f.strip() for f in smi.strip().split("\n")[-1].split(",")]
            keys = ["name", "driver", "memory", "compute_capability", "max_sm_clock", "power_limit", "pstate"]
            e["gpu"] = dict(zip(keys, fields))
            self.gpu_name = e["gpu"]["name"]
            self.say(f"GPU: {smi.strip().split(chr(10))[-1]}")
            self.run(["nvidia-smi", "-q"], "env/nvidia-smi-q.txt", 20, quiet=True)
        self.find_python(e, deadline)
        libs_ok, why = self.library_path(e)
        cxx_ok, cxx_why = self.choose_cxx(e)
        self.env["MLPERF_PLUGIN_TRUST"] = "all"  # the bundle's files, copied by the device tool: ours
        e["LD_LIBRARY_PATH"] = self.env.get("LD_LIBRARY_PATH", "")
        self.say(f"LD_LIBRARY_PATH={e['LD_LIBRARY_PATH']}")
        if gpu_ok and libs_ok:
            self.probe_versions(e, deadline)
        elif self.args.rehearse:
            self.say(f"rehearsal: no GPU needed; the backend under test is {self.backend}")
        sanitizer = find_tool("compute-sanitizer")
        e["compute_sanitizer"] = sanitizer or ""
        rc, text = self.run([self.program("mlperf-run"), "--version"], "env/mlperf-run-version.txt", 20)
        runs = rc == 0
        unresolved = self.unresolved_here()
        problems = []
        if not gpu_ok and not self.args.rehearse:
            problems.append("no GPU: nvidia-smi " + ("not found" if smi_rc == 127 else "failed" + tail_hint(smi)))
        if not libs_ok:
            problems.append(why)
        if not cxx_ok:
            problems.append(cxx_why)
        if not runs:
            problems.append("mlperf-run from the bundle does not start: " + text.strip().split("\n")[-1])
        if unresolved:
            problems.append("libraries not found: " + "; ".join(unresolved))
        if problems:
            return "FAIL", "; ".join(problems)
        versions = e.get("versions", {})
        if not gpu_ok:
            return "PASS", f"rehearsal on {self.backend}, no GPU; {cxx_why}"
        return "PASS", (f"{self.gpu_name}, driver {e['gpu']['driver']}, cuDNN {versions.get('cudnn', '?')}, "
                        f"cuBLASLt {versions.get('cublasLt', '?')}, NCCL {versions.get('nccl', '?')}, "
                        f"PyTorch {e.get('pytorch', {}).get('torch', 'none')}; {cxx_why}")

    def find_python(self, e, deadline):
        """The Python with PyTorch (the device's venv), its site-packages and its torch's view of the GPU."""
        probe = ("import json, sysconfig; d = dict(purelib=sysconfig.get_paths()['purelib'])\n"
                 "try:\n import torch; d.update(torch=torch.__version__, cuda=torch.version.cuda,\n"
                 "  cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,\n"
                 "  gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)\n"
                 "except Exception as x: d['error'] = repr(x)\nprint(json.dumps(d))")
        for candidate in ["/opt/torch/.venv/bin/python3", shutil.which("python3"), "/usr/bin/python3"]:
            if not candidate or not os.path.exists(candidate):
                continue
            rc, text = self.run([candidate, "-c", probe], "env/python.txt", min(60, self.remaining(deadline)),
                                quiet=True)
            found = last_json(text) if rc == 0 else None
            if found and "torch" in found:
                self.python = candidate
                e["pytorch"] = dict(python=candidate, **found)
                self.say(f"PyTorch {found['torch']} (CUDA {found.get('cuda')}, cuDNN {found.get('cudnn')}, "
                         f"GPU {found.get('gpu')}) in {candidate}")
                return
            if found and not e.get("pytorch"):
                e["pytorch"] = dict(python=candidate, **found)
        self.say("no Python with PyTorch found: the PyTorch peers will be skipped")

    def library_path(self, e):
        """LD_LIBRARY_PATH: the wheels' folders holding what the bundle takes from the device, first, then
        the bundle's lib/. Returns (ok, why not)."""
        needed = [lib for lib in self.manifest.get("device_libraries", []) if not lib.startswith("libcuda.so")]
        purelib = e.get("pytorch", {}).get("purelib", "")
        preferred = [os.path.join(purelib, "nvidia", d, "lib") for d in ("cudnn", "cu13", "nccl")] if purelib else []
        others = sorted(glob.glob(os.path.join(purelib, "nvidia", "*", "lib"))) if purelib else []
        dirs = [d for d in preferred if os.path.isdir(d)]
        where, missing = {}, []
        cached = system_libraries()
        for lib in needed:  # the driver's libcuda is in the system's paths
            hit = next((d for d in dirs + others if os.path.exists(os.path.join(d, lib))), None)
            if hit is None and lib in cached:
                where[lib] = f"the system's {cached[lib]} (not in the wheels)"
                continue
            if hit is None:
                missing.append(lib)
                continue
            where[lib] = hit
            if hit not in dirs:
                dirs.append(hit)
        e["device_libraries"] = where
        self.env["LD_LIBRARY_PATH"] = ":".join(dirs + [os.path.join(self.bundle, "lib")] +
                                               ([self.env["LD_LIBRARY_PATH"]] if self.env.get("LD_LIBRARY_PATH")
                                                else []))
        for lib, d in sorted(where.items()):
            self.say(f"{lib}: {d}")
        if missing:
            return False, (f"not in {purelib or 'any Python site-packages'}/nvidia/*/lib nor the system's: "
                           f"{', '.join(missing)}")
        return True, ""

    def choose_cxx(self, e):
        """The carried libstdc++ where this glibc is new enough for it, else the system's if it has the
        GLIBCXX version the programs need. Returns (ok, what was chosen)."""
        glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
        need_ours = self.manifest.get("glibc_needed_with_carried_cxx", "99")
        need = self.manifest.get("glibc_needed", "0")
        if version_tuple(glibc) < version_tuple(need):
            return False, f"glibc {glibc} here, the programs need {need}"
        cxx = os.path.join(self.bundle, "lib", "cxx")
        if version_tuple(glibc) >= version_tuple(need_ours):
            self.env["LD_LIBRARY_PATH"] += ":" + cxx
            e["libstdcxx"] = "carried"
            return True, f"the carried libstdc++ (needs glibc {need_ours}; here {glibc})"
        system = system_glibcxx()
        need_cxx = self.manifest.get("glibcxx_needed", "")
        if system and version_tuple(system) >= version_tuple(need_cxx):
            e["libstdcxx"] = "system"
            return True, f"the system's libstdc++ (GLIBCXX {system}; the carried one needs glibc {need_ours})"
        return False, (f"glibc {glibc} is too old for the carried libstdc++ (needs {need_ours}) and the system's "
                       f"has GLIBCXX {system or 'none'} < {need_cxx}")

    def probe_versions(self, e, deadline):
        """cuDNN, cuBLAS(Lt), NCCL, the driver: each library's own version call, from the files that
        LD_LIBRARY_PATH resolves (the files are named too)."""
        code = r"""
import ctypes, json
out = {}
def load(name):
    try:
        return ctypes.CDLL(name)
    except OSError as x:
        out.setdefault("errors", []).append(str(x))
def ver(lib, fn):
    v = ctypes.c_int(0)
    return v.value if lib is not None and getattr(lib, fn)(ctypes.byref(v)) == 0 else None
cuda = load("libcuda.so.1"); out["driver_api"] = ver(cuda, "cuDriverGetVersion")
cudnn = load("libcudnn.so.9")
if cudnn is not None:
    cudnn.cudnnGetVersion.restype = ctypes.c_size_t
    out["cudnn"] = cudnn.cudnnGetVersion()
lt = load("libcublasLt.so.13")
if lt is not None:
    lt.cublasLtGetVersion.restype = ctypes.c_size_t
    out["cublasLt"] = lt.cublasLtGetVersion()
blas = load("libcublas.so.13")
if blas is not None:
    parts = []
    for kind in range(3):
        v = ctypes.c_int(0); blas.cublasGetProperty(kind, ctypes.byref(v)); parts.append(v.value)
    out["cublas"] = ".".join(map(str, parts))
nccl = load("libnccl.so.2"); out["nccl"] = ver(nccl, "ncclGetVersion")
out["files"] = sorted({l.split()[-1] for l in open("/proc/self/maps") if any(
    k in l for k in ("libcudnn.so", "libcublas", "libnccl", "libcuda.so"))})
print(json.dumps(out))
"""
        python = self.python or sys.executable
        rc, text = self.run([python, "-c", code], "env/versions.txt", min(60, self.remaining(deadline)), quiet=True)
        found = last_json(text) or {}
        e["versions"] = found
        self.say("versions: " + json.dumps({k: v for k, v in found.items() if k != "files"}))
        for f in found.get("files", []):
            self.say(f"  loaded {f}")

    def unresolved_here(self):
        """Libraries that ldd finds nowhere for the bundle's files, with this step's LD_LIBRARY_PATH."""
        problems = []
        for elf in self.bundle_elves():
            for name, path in ldd(elf, self.env.get("LD_LIBRARY_PATH", "")):
                if path is None:
                    problems.append(f"{os.path.relpath(elf, self.bundle)} needs {name}")
        return problems

    def bundle_elves(self):
        files = glob.glob(os.path.join(self.bundle, "bin", "*")) + \
            glob.glob(os.path.join(self.bundle, "lib", "mlperf-hpc-1", "*.so")) + \
            glob.glob(os.path.join(self.bundle, "tests", "*"))
        return sorted(f for f in files if os.path.isfile(f))

    # -- 1: GPU unit tests -----------------------------------------------------------------------------------
    def step_tests(self, record, deadline):
        tests = self.manifest.get("tests", [])
        if not tests:
            left = "; ".join(self.manifest.get("tests_left_behind", [])) or "none defined in its tree"
            return "SKIP", f"the bundle has no GPU test programs (left behind: {left})"
        self.link_build_paths(record)
        for name in tests:
            report = os.path.join(self.logs, "tests", f"{name}.json")
            rc, text = self.run([os.path.join(self.bundle, "tests", name), f"--gtest_output=json:{report}"],
                                f"tests/{name}.txt", self.remaining(deadline))
            counts = gtest_counts(report)
            figures = dict(counts=counts)
            if rc is None:
                self.part(record, name, "FAIL", "timed out", **figures)
            elif rc != 0:
                self.part(record, name, "FAIL", f"exit {rc}: {counts['failed']} failed "
                          f"({', '.join(counts['failed_names'][:5])})" + tail_hint(text), **figures)
            else:
                skipped = f", {counts['skipped']} skipped ({', '.join(counts['skipped_names'][:5])})" \
                    if counts["skipped"] else ""
                self.part(record, name, "PASS", f"{counts['passed']} passed{skipped}", **figures)
        return self.verdict(record, f"{len(tests)} programs")

    def link_build_paths(self, record):
        """The tests name the source and build trees they were built in (MLPH_SOURCE_DIR, MLPH_BINARY_DIR):
        where those paths do not exist here, they are made links to this checkout and the bundle, whose
        bin/ and lib/mlperf-hpc-1/ are laid out as a build tree's."""
        for key, target in (("source_dir", ROOT), ("build_dir", self.bundle)):
            path = self.manifest.get(key)
            if path and not os.path.lexists(path):
                try:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    os.symlink(target, path)
                    self.say(f"linked {path} -> {target} (the tests' compiled-in {key})")
                except OSError as x:
                    self.say(f"could not link {path} -> {target}: {x}")

    # -- 2: conformance --------------------------------------------------------------------------------------
    def step_conformance(self, record, deadline):
        missing = self.need_cuda_backend()
        if missing:
            return "SKIP", missing
        conformance = self.program("mlperf-conformance")
        # fp16 starts from a loss scale of 1024: at the default 65536 a case's first step may overflow in
        # half precision and be skipped (as PyTorch's GradScaler skips it), which the reference never does.
        runs = [("fp32", "fp32", "", []), ("bf16", "bf16", "", []),
                ("fp16", "fp16", "from loss scale 1024", [] if self.args.rehearse else ["--set", "backend.loss_scale=1024"])]
        for precision, tolerance, note, extra in [r for r in runs if r[0] in self.profile["precisions"]]:
            if self.remaining(deadline) < 10:
                self.part(record, precision, "SKIP", "out of time")
                continue
            markdown = os.path.join(self.logs, "conformance", f"{precision}.md")
            cmd = [conformance, "--backend", self.backend, "--precision", tolerance, "--markdown", markdown] + \
                self.backend_sets(precision, deterministic=True) + extra + self.profile["conformance"]
            rc, text = self.run(cmd, f"conformance/{precision}.txt", self.remaining(deadline) - 5)
            rows = conformance_rows(text)
            figures = dict(rows=rows, tolerance=tolerance)
            summary = f"{rows['PASS']} PASS, {rows['FAIL']} FAIL, {rows['NOT IMPLEMENTED']} NOT IMPLEMENTED"
            if note:
                summary += "; " + note
            if rc == 0:
                self.part(record, precision, "PASS", summary, **figures)
            else:
                why = "timed out" if rc is None else f"exit {rc}"
                failed = ", ".join(rows["failed_names"][:8])
                self.part(record, precision, "FAIL", f"{why}: {summary}" + (f" ({failed})" if failed else "") +
                          tail_hint(text), **figures)
        self.sanitize(record, deadline)
        return self.verdict(record, "every precision conforms")

    def sanitize(self, record, deadline):
        tool = self.summary["environment"].get("compute_sanitizer") or find_tool("compute-sanitizer")
        if not tool:
            return self.part(record, "memcheck", "SKIP", "compute-sanitizer not found")
        if self.remaining(deadline) < 15:
            return self.part(record, "memcheck", "SKIP", "out of time")
        conformance = self.program("mlperf-conformance")
        _, listed = self.run([conformance, "--list"], "conformance/list.txt", 20, quiet=True)
        ops = [op for op in SANITIZER_OPS if op in listed.split()]
        cmd = [tool, "--tool", "memcheck", "--error-exitcode", "86", "--print-limit", "20", conformance, "--backend",
               self.backend, "--ops", ",".join(ops), "--cases", "2", "--model-steps", "0"] + self.backend_sets("fp32")
        rc, text = self.run(cmd, "conformance/memcheck.txt", self.remaining(deadline) - 2)
        errors = re.search(r"ERROR SUMMARY: (\d+) error", text)
        count = int(errors.group(1)) if errors else None
        runtime = self.summary["environment"].get("host", {}).get("runtime", "")
        figures = dict(errors=count, ops=ops, runtime=runtime)
        if rc is None:
            return self.part(record, "memcheck", "FAIL", f"timed out over {','.join(ops)}", **figures)
        if count == 0 and rc == 0:
            return self.part(record, "memcheck", "PASS", f"0 errors over {','.join(ops)} ({runtime})", **figures)
        if count is None:
            return self.part(record, "memcheck", "FAIL", f"exit {rc}, no error summary (the sanitizer did not "
                             f"run the program? {runtime})" + tail_hint(text), **figures)
        return self.part(record, "memcheck", "FAIL", f"{count} errors (exit {rc}): see logs/conformance/memcheck.txt"
                         + tail_hint(text), **figures)

    # -- 3, 4: the minis --------------------------------------------------------------------------------------
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

    def mini_run(self, record, deadline, workload, precision, extra=()):
        """One mlperf-run of a mini on cuda; returns (exit status, parsed log, output text)."""
        config = os.path.join(self.bundle, "configs", workload, "mini.yaml")
        data, why = self.dataset(f"{workload}-mini", config, deadline, self.profile["mini_sets"])
        if data is None:
            return None, None, why
        output = os.path.join(self.logs, f"{workload}-{precision}")
        cmd = [self.program("mlperf-run"), "--config", config, "--backend", self.backend, "--data", data, "--output",
               output, "--seed", "1"] + self.backend_sets(precision)
        for s in list(extra) + self.profile["mini_sets"]:
            cmd += ["--set", s]
        rc, text = self.run(cmd, f"{workload}-{precision}/mlperf-run.txt", self.remaining(deadline))
        return rc, read_mllog(os.path.join(output, "result_0.txt")), text

    def step_cosmoflow(self, record, deadline):
        missing = self.need_cuda_backend()
        if missing:
            return "SKIP", missing
        for precision in ("fp32", "bf16"):
            if self.remaining(deadline) < 10:
                self.part(record, precision, "SKIP", "out of time")
                continue
            rc, log, text = self.mini_run(record, deadline, "cosmoflow", precision)
            if log is None:
                self.part(record, precision, "FAIL", ("timed out" if rc is None else f"exit {rc}") + ": no log; " +
                          tail_hint(text))
                continue
            checker_ok, checker = self.official_checker(log["path"], f"cosmoflow-{precision}")
            figures = dict(run_stop=log["status"], time_to_train_s=log["time_to_train_s"], epochs=log["epochs"],
                           metric=log["last_metric"], checker=checker)
            summary = (f"run_stop {log['status']} after {log['epochs']} epochs, time to train "
                       f"{fmt_s(log['time_to_train_s'])}, last eval MAE {log['last_metric']}; checker: {checker}")
            # A rehearsal trains one epoch: its run stops short of the target (exit 1, "aborted"), which
            # the checker refuses too.
            expected = (1, "aborted") if self.args.rehearse else (0, "success")
            ok = (rc, log["status"]) == expected and (checker_ok or self.args.rehearse)
            if rc != expected[0]:
                summary += (" (timed out)" if rc is None else f" (exit {rc})") + tail_hint(text)
            self.part(record, precision, "PASS" if ok else "FAIL", summary, **figures)
        return self.verdict(record, "to target in fp32 and bf16, logs accepted")

    def official_checker(self, log, name):
        checker = os.path.join(self.bundle, "tools", "mllog-check")
        if not os.path.exists(checker):
            return False, "no official checker in the bundle (../shared was not beside the checkout it was made in)"
        env = dict(self.env)
        python = python_with("yaml", [self.python])  # the checker's Python needs PyYAML
        if python:
            env["PATH"] = os.path.dirname(python) + ":" + env.get("PATH", "")
        rc, text = self.run([checker, log], f"checker/{name}.txt", 60, env=env)
        why = [l.split(" - ", 1)[-1].strip() for l in text.split("\n") if "Failed" in l or "ERROR" in l]
        return rc == 0, ("SUCCESS" if rc == 0 else "FAILED: " + ("; ".join(why[:3]) if why else f"exit {rc}"))

    def step_deepcam(self, record, deadline):
        missing = self.need_cuda_backend() or (None if self.has_plugin("workload-deepcam") else
                                               "no deepcam workload in the bundle (HDF5 was not found for its tree)")
        if missing:
            return "SKIP", missing
        precision = "fp32" if self.args.rehearse else "bf16"
        rc, log, text = self.mini_run(record, deadline, "deepcam", precision, ["train.epochs=1"])
        if log is None:
            return "FAIL", ("timed out" if rc is None else f"exit {rc}") + ": no log" + tail_hint(text)
        errors = [l for l in text.split("\n") if "error:" in l]
        finite = log["last_metric"] is not None and math.isfinite(log["last_metric"])
        summary = (f"1 epoch in {fmt_s(log['time_to_train_s'])} ({precision}), IoU {log['last_metric']}, "
                   f"run_stop {log['status']}")
        record.update(epoch_s=log["time_to_train_s"], iou=log["last_metric"], run_stop=log["status"])
        if rc is None or errors or not finite or log["epochs"] < 1:
            why = "timed out" if rc is None else (errors[0].strip() if errors else "no finite IoU after the epoch")
            return "FAIL", f"{summary}: {why}"
        return "PASS", summary

    # -- 7: speed beside PyTorch ------------------------------------------------------------------------------
    def step_bench(self, record, deadline):
        cases = self.profile["bench"]
        peak = bf16_peak(self.gpu_name)
        self.bench = dict(gpu=self.gpu_name, bf16_peak_tflops=peak, precision="bf16", rows=[],
                          note="training step on synthetic input, samples/s: mlperf-bench's inputs are copied to the "
                               "GPU every step from the backend's pinned memory (as in a run), PyTorch's stay on the "
                               "GPU; share = 3 x forward FLOP x samples/s over the dense bf16 tensor peak")
        ours = {}
        missing = self.need_cuda_backend()
        for workload, batch, sets, warmup, steps in cases:
            name = f"{self.backend} {workload} b{batch}"
            if missing:
                self.part(record, name, "SKIP", missing)
                continue
            if self.remaining(deadline) < 20:
                self.part(record, name, "SKIP", "out of time")
                continue
            out = os.path.join(self.logs, "bench", f"{self.backend}-{workload}-b{batch}.json")
            cmd = [self.program("mlperf-bench"), "--workload", workload, "--backend", self.backend, "--set",
                   f"train.batch_size={batch}", "--steps", str(steps), "--warmup", str(warmup), "--json", out] + \
                self.backend_sets("bf16")
            for s in sets:
                cmd += ["--set", s]
            rc, text = self.run(cmd, f"bench/{self.backend}-{workload}-b{batch}.txt",
                                min(90, self.remaining(deadline) - 10))
            result = read_json(out) if rc == 0 else None
            if result:
                ours[(workload, batch)] = result
                rate = batch / result["model"]["train_s"]
                self.part(record, name, "PASS", f"{rate:.1f} samples/s", samples_per_s=rate)
            else:
                self.part(record, name, "FAIL", ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
        torch_runs = self.pytorch_peers(record, deadline)
        self.bench["rows"] = bench_rows(ours, torch_runs, peak)
        for row in self.bench["rows"]:
            self.say(bench_line(row))
        return self.verdict(record, f"{len(self.bench['rows'])} cases measured")

    def pytorch_peers(self, record, deadline):
        """The PyTorch peers of PROFILES' torch list, in its order (a time limit leaves what ran)."""
        runs = {}
        if not self.python:
            self.part(record, "pytorch", "SKIP", "no Python with PyTorch here")
            return runs
        script = os.path.join(ROOT, "tools", "bench", "pytorch_gpu.py")
        for variant, precision, workload, batches, sizes, timing in self.profile["torch"]:
            kind = f"{variant}-{precision}"
            name = f"pytorch {workload} b{batches} {kind}"
            if self.remaining(deadline) < 15:
                self.part(record, name, "SKIP", "out of time")
                continue
            out = os.path.join(self.logs, "bench", f"pytorch-{workload}-b{batches.replace(',', '-')}-{kind}.json")
            cmd = [self.python, script, "--workload", workload, "--batch", batches, "--variants", variant,
                   "--precision", precision, "--json", out] + sizes + timing + self.profile["torch_device"]
            rc, text = self.run(cmd, os.path.splitext(os.path.relpath(out, self.logs))[0] + ".txt",
                                self.remaining(deadline) - 5)
            result = read_json(out) or {}
            done = [r for r in result.get("runs", []) if "train_s" in r]
            errors = [r["error"] for r in result.get("runs", []) if "error" in r]
            for r in done:
                runs.setdefault((workload, r["batch"]), {})[kind] = r
            if done and not errors and rc == 0:
                rates = ", ".join(f"b{r['batch']} {r['samples_per_s']:.1f}" for r in done)
                self.part(record, name, "PASS", f"samples/s {rates}")
            else:
                why = "timed out" if rc is None else (errors[0] if errors else f"exit {rc}")
                self.part(record, name, "FAIL", why + ("" if errors else tail_hint(text)))
        self.bench["pytorch"] = self.summary["environment"].get("pytorch", {})
        return runs

    # -- 5: checkpoint and resume, bitwise ----------------------------------------------------------------------
    def step_resume(self, record, deadline):
        missing = self.need_cuda_backend()
        if missing:
            return "SKIP", missing
        config = os.path.join(self.bundle, "configs", "cosmoflow", "mini.yaml")
        data, why = self.dataset("cosmoflow-mini", config, deadline, self.profile["mini_sets"])
        if data is None:
            return "FAIL", why
        base = os.path.join(self.logs, "resume")
        checkpoints = os.path.join(self.work, "resume-checkpoints")
        shutil.rmtree(checkpoints, ignore_errors=True)
        common = [self.program("mlperf-run"), "--config", config, "--backend", self.backend, "--data", data, "--seed",
                  "1"] + self.backend_sets("fp32", deterministic=True)
        for s in self.profile["mini_sets"]:
            common += ["--set", s]
        # The cuda checkpoint also goes on on the reference backend (--switch-backend, before the cuda
        # resume adds its own checkpoint to the directory): it trains on, not bitwise.
        on_cpu = ["--backend", "reference", "--switch-backend", "--set", "train.epochs=2", "--resume", checkpoints]
        runs = [("straight", ["--set", "train.epochs=2", "--export-weights", f"{base}/straight.npz"]),
                ("first epoch", ["--set", "train.epochs=1", "--checkpoint-dir", checkpoints]),
                ("resumed on reference", on_cpu),
                ("resumed", ["--set", "train.epochs=2", "--checkpoint-dir", checkpoints, "--resume", checkpoints,
                             "--export-weights", f"{base}/resumed.npz"])]
        for name, flags in runs:
            out = os.path.join(base, name.replace(" ", "-"))
            cmd = common + ["--output", out] + flags
            if flags[0] == "--backend":  # another backend: the common one's pair goes
                at = cmd.index("--backend")
                del cmd[at:at + 2]
            rc, text = self.run(cmd, f"resume/{name.replace(' ', '-')}.txt", self.remaining(deadline))
            errors = [l.strip() for l in text.split("\n") if "error:" in l]
            if rc not in (0, 1) or errors:  # 1: stopped short of the target, as planned
                return "FAIL", f"{name} run: " + ("timed out" if rc is None else f"exit {rc}") + \
                    (f": {errors[0]}" if errors else tail_hint(text))
            if name.startswith("resumed") and "resumed after epoch 1" not in text:
                return "FAIL", f"the {name} run does not say it resumed after epoch 1" + tail_hint(text)
        with open(f"{base}/straight.npz", "rb") as a, open(f"{base}/resumed.npz", "rb") as b:
            same = a.read() == b.read()
        if not same:
            return "FAIL", "the resumed run's exported weights differ from the straight run's (not bitwise)"
        straight = read_mllog(os.path.join(base, "straight", "result_0.txt")) or {}
        switched = read_mllog(os.path.join(base, "resumed-on-reference", "result_0.txt")) or {}
        a, b = straight.get("last_metric"), switched.get("last_metric")
        if a is None or b is None or abs(a - b) > 1e-2 * abs(a):
            return "FAIL", f"resumed on the reference backend, the validation error is {b} against {self.backend}'s {a}"
        return "PASS", ("2 epochs straight and 1 + 1 resumed from a checkpoint: the exported weights are equal bytes; "
                        f"resumed on the reference backend (--switch-backend): validation error {b:.5g} against "
                        f"{self.backend}'s {a:.5g}")

    # -- 6: input pipeline --------------------------------------------------------------------------------------
    def step_pipeline(self, record, deadline):
        missing = self.need_cuda_backend()
        if missing:
            return "SKIP", missing
        plan = self.profile["pipeline"]
        results = []
        for workload, fmt, sets, runs in plan["datasets"]:
            kind = f"{workload}-{fmt}" if fmt else workload
            sets = sets + ["data.synthetic.valid=2"] + ([f"data.synthetic.format={fmt}"] if fmt else [])
            data, why = self.dataset(f"pipeline-{kind}", None, deadline, sets, workload=workload)
            if data is None:
                self.part(record, kind, "FAIL", why)
                continue
            for batch, steps in runs:
                name = f"{kind} b{batch}"
                if self.remaining(deadline) < 10:
                    self.part(record, name, "SKIP", "out of time")
                    continue
                out = os.path.join(self.logs, "pipeline", f"{kind}-b{batch}.json")
                cmd = [self.program("mlperf-bench"), "--workload", workload, "--backend", self.backend, "--set",
                       f"train.batch_size={batch}", "--data", data, "--steps", str(steps), "--warmup",
                       str(plan["warmup"]), "--json", out] + self.backend_sets("bf16")
                for s in sets:
                    cmd += ["--set", s]
                rc, text = self.run(cmd, f"pipeline/{kind}-b{batch}.txt", self.remaining(deadline) - 3)
                result = read_json(out) if rc == 0 else None
                if not result or "files" not in result:
                    self.part(record, name, "FAIL", ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
                    continue
                files, synthetic = result["files"], result["model"]
                share = files["wait_s"] / files["train_s"]
                figures = dict(train_s=files["train_s"], wait_s=files["wait_s"], read_s=files.get("read_s"),
                               readers=files.get("readers"), synthetic_train_s=synthetic["train_s"],
                               samples_per_s=batch / files["train_s"], wait_share=share)
                results.append(dict(workload=workload, format=fmt, batch=batch, **figures))
                readers = files.get("readers", 1)
                alone = f"; {readers} reader{'' if readers == 1 else 's'} alone {batch / files['read_s']:.1f} " \
                    "samples/s" if files.get("read_s") else ""
                self.part(record, name, "PASS",
                          f"{batch / files['train_s']:.1f} samples/s from files ({batch / synthetic['train_s']:.1f} "
                          f"synthetic){alone}; the step waited {files['wait_s'] * 1e3:.2f} ms for its batch "
                          f"({100 * share:.1f}%)" + (" - the pipeline does not keep up" if share > 0.05 else ""),
                          **figures)
        if self.bench is not None:
            self.bench["pipeline"] = dict(data=plan["about"], runs=results)
        return self.verdict(record, "measured")

    # -- 7: per-layer times (only on request) -------------------------------------------------------------------
    def step_layers(self, record, deadline):
        missing = self.need_cuda_backend()
        if missing:
            return "SKIP", missing
        for workload, batch, sets in (("cosmoflow", 4, ["data.edge=128"]),
                                      ("deepcam", 8, ["data.height=768", "data.width=1152"])):
            out = os.path.join(self.logs, "layers", f"{workload}-b{batch}.json")
            cmd = [self.program("mlperf-bench"), "--workload", workload, "--backend", self.backend, "--set",
                   f"train.batch_size={batch}", "--steps", "10", "--warmup", "3", "--layers", "--json", out] + \
                self.backend_sets("bf16")
            for s in sets:
                cmd += ["--set", s]
            rc, text = self.run(cmd, f"layers/{workload}-b{batch}.txt", self.remaining(deadline) - 3)
            self.part(record, f"{workload} b{batch}", "PASS" if rc == 0 else "FAIL",
                      "per-layer table in logs/layers/" if rc == 0 else
                      ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
        return self.verdict(record, "per-layer times written")

    # -- --dry-run --------------------------------------------------------------------------------------------
    def dry_run(self):
        self.say(f"== dry run (no GPU): the bundle {self.bundle}")
        self.step("env", self.step_bundle, limit_key="dry")
        for name in self.args.only:
            if name != "env":
                self.summary["steps"][name] = dict(status="SKIP", reason="no GPU (--dry-run)", seconds=0.0, parts=[])
        self.say("no GPU: GPU steps skipped")

    def step_bundle(self, record, deadline):
        m = self.manifest
        self.say(f"bundle: {m.get('size_bytes', 0) / 2**20:.1f} MiB in {m.get('files')} files, commit "
                 f"{str(m.get('commit'))[:12]}, plug-ins {', '.join(m.get('plugins', []))}, "
                 f"tests {', '.join(m.get('tests', [])) or 'none'}")
        # 1. Every library resolved inside the bundle (its lib/ and lib/cxx/) or glibc's, but those the
        #    device provides, with nothing of this machine's environment.
        path = os.path.join(self.bundle, "lib") + ":" + os.path.join(self.bundle, "lib", "cxx")
        outside, expected = [], set()
        elves = self.bundle_elves() + sorted(glob.glob(os.path.join(self.bundle, "lib", "*.so*")) +
                                             glob.glob(os.path.join(self.bundle, "lib", "cxx", "*")))
        for elf in elves:
            for name, resolved in ldd(elf, path, clean=True):
                if DEVICE_LIBS.match(name):
                    expected.add(name)
                elif GLIBC_LIBS.match(name):
                    continue
                elif resolved is None or not os.path.realpath(resolved).startswith(self.bundle + os.sep):
                    outside.append(f"{os.path.relpath(elf, self.bundle)}: {name} => {resolved or 'not found'}")
        if outside:
            self.part(record, "libraries", "FAIL", "outside the bundle: " + "; ".join(outside[:10]))
        else:
            self.part(record, "libraries", "PASS",
                      f"{len(elves)} files resolve inside the bundle; from the device: "
                      f"{', '.join(sorted(expected)) or 'none'} (the driver and PyTorch's wheels there)")
        env = dict(PATH="/usr/bin:/bin", LD_LIBRARY_PATH=path, HOME=self.work)
        # 2. The plug-ins load from the bundle (dlopen: what ldd cannot show).
        rc, text = self.run([self.program("mlperf-run"), "--list-plugins"], "dry/list-plugins.txt", 60, env=env)
        loaded = [p for p in m.get("plugins", []) if p.split("-", 1)[-1] in text]
        # The driver-less machine may refuse to list a GPU plug-in's details, never to load it.
        self.part(record, "plug-ins", "PASS" if rc == 0 and len(loaded) == len(m.get("plugins", [])) else "FAIL",
                  f"mlperf-run --list-plugins from the bundle: {len(loaded)} of {len(m.get('plugins', []))} listed"
                  + ("" if rc == 0 else f" (exit {rc})" + tail_hint(text)))
        # 3. Reference conformance from the bundle (the reference against itself: errors exactly 0).
        cmd = [self.program("mlperf-conformance"), "--backend", "reference", "--ops",
               "conv,batch_norm,dense,max_pool,softmax_cross_entropy,sgd_keras,lamb,state,cosmoflow",
               "--cases", "2", "--model-steps", "1"]
        rc, text = self.run(cmd, "dry/conformance-reference.txt", self.remaining(deadline) - 30, env=env)
        rows = conformance_rows(text)
        self.part(record, "conformance", "PASS" if rc == 0 else "FAIL",
                  f"reference against itself from the bundle: {rows['PASS']} PASS, {rows['FAIL']} FAIL"
                  + ("" if rc == 0 else tail_hint(text)))
        # 4. The official checker from the bundle, on a submitted log where ../shared has one.
        fixture = os.path.join(ROOT, "..", "shared", "fixtures", "mllog", "nvidia_v3.0_cosmoflow_strong_result_0.txt")
        if not os.path.exists(os.path.join(self.bundle, "tools", "mllog-check")):
            self.part(record, "checker", "SKIP", "no official checker in the bundle (no ../shared where it was made)")
        elif os.path.exists(fixture):
            ok, checker = self.official_checker(fixture, "fixture")
            self.part(record, "checker", "PASS" if ok else "FAIL", f"on NVIDIA's v3.0 CosmoFlow log: {checker}")
        else:
            self.part(record, "checker", "SKIP", f"no {fixture} to check")
        # 5. The PyTorch peer on the CPU, tiny (the GPU's figures come from the same code).
        python = python_with("torch") if self.args.with_torch else None
        if python:
            for workload, size in (("cosmoflow", ["--edge", "32"]), ("deepcam", ["--height", "32", "--width", "48"])):
                out = os.path.join(self.logs, "dry", f"pytorch-{workload}.json")
                rc, text = self.run([python, os.path.join(ROOT, "tools", "bench", "pytorch_gpu.py"), "--device", "cpu",
                                     "--workload", workload, "--batch", "1", "--variants", "eager", "--precision",
                                     "fp32", "--steps", "1", "--repeats", "1", "--warmup", "0", "--json", out] + size,
                                    f"dry/pytorch-{workload}.txt", max(10, self.remaining(deadline) - 5))
                runs = (read_json(out) or {}).get("runs", [])
                ok = rc == 0 and runs and "train_s" in runs[0]
                self.part(record, f"pytorch {workload}", "PASS" if ok else "FAIL",
                          "pytorch_gpu.py on the CPU: a step timed" if ok else
                          ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
        else:
            self.part(record, "pytorch", "SKIP", "without --with-torch" if not self.args.with_torch else
                      "no Python with PyTorch")
        return self.verdict(record, "the bundle is self-contained")


# -- helpers ----------------------------------------------------------------------------------------------
def write_json(path, doc):
    with open(path + ".part", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".part", path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json(text):
    for line in reversed(text.strip().split("\n")):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def tail_hint(text, lines=3):
    kept = [l.strip() for l in text.strip().split("\n") if l.strip() and not l.startswith("$ ")][-lines:]
    return (" | " + " | ".join(kept)) if kept else ""


def fmt_s(seconds):
    return "?" if seconds is None else f"{seconds:.1f} s"


def version_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text or "0"))


def os_release():
    try:
        with open("/etc/os-release") as f:
            return dict(l.strip().split("=", 1) for l in f if "=" in l).get("PRETTY_NAME", "?").strip('"')
    except OSError:
        return "?"


def runtime_of(kernel):
    if "-fc-" in kernel:
        return "Firecracker"
    if kernel.startswith("4.4.0"):
        return "gVisor"
    return "unknown"


def find_tool(name):
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/local/cuda*/bin/{name}") +
                                                  glob.glob(f"/opt/nvidia/*/{name}"))), None)


def python_with(module, first=()):
    """A Python that imports `module`: the given ones first, then the device's venv, python3, /usr/bin's."""
    for python in list(first) + ["/opt/torch/.venv/bin/python3", shutil.which("python3"), "/usr/bin/python3"]:
        if python and os.path.exists(python) and \
                subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0:
            return python
    return None


def system_libraries():
    """soname -> path of the 64-bit libraries in the ldconfig cache."""
    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return {}
    found = {}
    for line in out.split("\n"):
        if "=>" in line and "x86-64" in line:
            found.setdefault(line.split()[0], line.split("=>")[-1].strip())
    return found


def system_glibcxx():
    """The highest GLIBCXX version of the system's libstdc++ (from the ldconfig cache)."""
    paths = [p for name, p in system_libraries().items() if name == "libstdc++.so.6"]
    for p in paths:
        with open(p, "rb") as f:
            versions = re.findall(rb"GLIBCXX_(\d+\.\d+(?:\.\d+)?)", f.read())
        if versions:
            return max((v.decode() for v in versions), key=version_tuple)
    return None


def ldd(elf, library_path, clean=False):
    """(name, resolved path or None) for each library ldd lists."""
    env = dict(PATH="/usr/bin:/bin", LD_LIBRARY_PATH=library_path) if clean else \
        dict(os.environ, LD_LIBRARY_PATH=library_path)
    out = subprocess.run(["ldd", elf], capture_output=True, text=True, env=env).stdout
    found = []
    for line in out.split("\n"):
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            found.append((parts[0], None if parts[2] == "not" else parts[2]))
    return found


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def gtest_counts(report):
    counts = dict(passed=0, failed=0, skipped=0, failed_names=[], skipped_names=[])
    doc = read_json(report) or {}
    for suite in doc.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = f"{suite['name']}.{case['name']}"
            if case.get("failures"):
                counts["failed"] += 1
                counts["failed_names"].append(name)
            elif case.get("result") == "SKIPPED":
                counts["skipped"] += 1
                counts["skipped_names"].append(name)
            elif case.get("status", "RUN") == "RUN":
                counts["passed"] += 1
    return counts


def conformance_rows(text):
    """The verdicts of mlperf-conformance's table: its closing count ("19 checks: 19 PASS, 0 FAIL, 0 NOT
    IMPLEMENTED ...") and the first word of each row that failed."""
    rows = {"PASS": 0, "FAIL": 0, "NOT IMPLEMENTED": 0, "failed_names": []}
    total = re.search(r"(\d+) PASS, (\d+) FAIL, (\d+) NOT IMPLEMENTED", text)
    if total:
        rows.update({"PASS": int(total.group(1)), "FAIL": int(total.group(2)), "NOT IMPLEMENTED": int(total.group(3))})
    rows["failed_names"] = [line.split()[0] for line in text.split("\n") if line.rstrip().endswith(" FAIL")]
    return rows


def read_mllog(path):
    """run_stop's status, time to train (run_start to run_stop), epochs and the last eval metric."""
    if not os.path.exists(path):
        return None
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            if ":::MLLOG" in line:
                try:
                    events.append(json.loads(line.split(":::MLLOG", 1)[1]))
                except ValueError:
                    pass
    times = {e["key"]: e.get("time_ms") for e in events if e.get("key") in ("run_start", "run_stop")}
    stop = next((e for e in events if e.get("key") == "run_stop"), {})
    metrics = [e.get("value") for e in events if e.get("key") in ("eval_accuracy", "eval_error")]
    ttt = (times["run_stop"] - times["run_start"]) / 1e3 if len(times) == 2 else None
    return dict(path=path, status=(stop.get("metadata") or {}).get("status", "none"), time_to_train_s=ttt,
                epochs=sum(1 for e in events if e.get("key") == "epoch_stop"),
                last_metric=metrics[-1] if metrics else None)


def bf16_peak(gpu_name):
    return next((peak for key, peak in BF16_PEAK_TFLOPS if key in (gpu_name or "")), None)


def bench_rows(ours, torch_runs, peak):
    rows = []
    for key in sorted(set(ours) | set(torch_runs)):
        workload, batch = key
        row = dict(workload=workload, batch=batch, target_h100=TARGETS.get(key), pytorch_h100=PYTORCH_H100.get(key))
        flops = None
        if key in ours:
            r = ours[key]
            rate = batch / r["model"]["train_s"]
            flops = r["forward_flops"] / batch
            row["cuda"] = dict(samples_per_s=rate, train_s=r["model"]["train_s"], device=r.get("device"),
                               precision=r.get("precision"))
        peers = {}
        for kind, r in sorted(torch_runs.get(key, {}).items()):
            peers[kind] = dict(samples_per_s=r["samples_per_s"], train_s=r["train_s"], spread_s=r["spread"],
                               first_step_s=r["first_step_s"])
            flops = flops or r["forward_flops"] / batch
        row["pytorch"] = peers
        best = max(peers, key=lambda k: peers[k]["samples_per_s"], default=None)
        if best:
            row["best_pytorch"] = dict(variant=best, samples_per_s=peers[best]["samples_per_s"])
        if "cuda" in row and best:
            row["ratio_vs_best_pytorch"] = row["cuda"]["samples_per_s"] / peers[best]["samples_per_s"]
        if flops and peak:
            row["train_flops_per_sample"] = 3 * flops
            for r in [row.get("cuda")] + list(peers.values()):
                if r:
                    r["share_of_bf16_peak"] = 3 * flops * r["samples_per_s"] / (peak * 1e12)
        rows.append(row)
    return rows


def bench_line(row):
    def cell(name, r):
        share = f" ({100 * r['share_of_bf16_peak']:.1f}% of peak)" if "share_of_bf16_peak" in r else ""
        return f"{name} {r['samples_per_s']:.1f}{share}"
    cells = ([cell("cuda", row["cuda"])] if "cuda" in row else ["cuda -"]) + \
        [cell(f"pytorch {k}", r) for k, r in row["pytorch"].items()]
    ratio = f"; cuda / best PyTorch {row['ratio_vs_best_pytorch']:.2f}x" if "ratio_vs_best_pytorch" in row else ""
    target = f" (H100 target {row['target_h100']})" if row.get("target_h100") else ""
    return f"{row['workload']} b{row['batch']} samples/s: " + ", ".join(cells) + ratio + target


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the bundle itself")
    p.add_argument("--only", help="comma-separated steps (names or numbers); env always runs")
    p.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every time limit (default 1)")
    p.add_argument("--budget", type=float, default=BUDGET_S,
                   help=f"seconds the whole check may take (default {BUDGET_S}): a rerun in less device time")
    p.add_argument("--bundle", help="the bundle: a folder, or a .tar.xz unpacked into the scratch folder "
                                    "(default gpu-bundle, else gpu-bundle.tar.xz)")
    p.add_argument("--out", help="where the results go (default $OUT, else out/gpu-check)")
    p.add_argument("--work", help="scratch for data and logs (default /tmp/mlph-gpu-check)")
    p.add_argument("--with-torch", action="store_true", help="--dry-run: also run the PyTorch peer on the CPU")
    p.add_argument("--rehearse", metavar="BACKEND",
                   help="no GPU: run the GPU steps' code on a CPU backend at small sizes (a test of this kit)")
    args = p.parse_args()
    if args.timeout_scale <= 0 or args.budget <= 0:
        p.error("--timeout-scale and --budget must be positive")
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
    check = Check(args)
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
        check.dry_run()
    else:
        env_status = check.step("env", check.step_env)
        for name in args.only[1:]:
            if env_status == "FAIL":
                check.summary["steps"][name] = dict(status="SKIP", seconds=0.0, parts=[],
                                                    reason="the environment step failed: " +
                                                    check.summary["steps"]["env"]["reason"])
                continue
            check.step(name, getattr(check, f"step_{name}"))
    check.save()
    check.say("== summary")
    for name, record in check.summary["steps"].items():
        check.say(f"{record['status']:4} {STEPS.index(name)} {name}: {record['reason']}")
    failed = any(r["status"] == "FAIL" for r in check.summary["steps"].values())
    check.say(f"{'FAILED' if failed else 'done'} in {check.elapsed():.0f} s; summary.json, bench.json, logs.tar.gz "
              f"in {check.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
