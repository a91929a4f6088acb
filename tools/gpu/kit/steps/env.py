"""Step 0 env: the GPU, driver, runtime, OS and glibc; the Python with PyTorch and its wheels' cuDNN,
cuBLAS, NCCL (first on LD_LIBRARY_PATH) with their versions; the bundle's libraries resolved; which
libstdc++ to use. Always runs."""
import glob
import json
import os
import shutil
import sys

from ..common import (find_tool, last_json, ldd, os_release, runtime_of, system_glibcxx, system_libraries,
                      tail_hint, version_tuple)


NAME = "env"
LIMIT_S = 60

# What each library says its version is (run by the Python that loads PyTorch's wheels).
VERSIONS_PROBE = r"""
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


def run(kit, record, deadline):
    e = kit.summary["environment"]
    e["bundle"] = {k: kit.manifest.get(k) for k in ("commit", "branch", "uncommitted_changes", "made", "native",
                                                      "cuda_code", "plugins", "tests", "size_bytes")}
    kit.say(f"bundle: commit {str(kit.manifest.get('commit'))[:12]} ({kit.manifest.get('branch')}), "
             f"plug-ins {', '.join(kit.manifest.get('plugins', []))}, tests {len(kit.manifest.get('tests', []))}")
    if kit.manifest.get("native"):
        kit.say("WARNING: the bundle was built with MLPH_NATIVE=ON (the build machine's CPU): it may not run here")
    e["host"] = dict(kernel=os.uname().release, machine=os.uname().machine, cpus=os.cpu_count(),
                     glibc=os.confstr("CS_GNU_LIBC_VERSION"), os=os_release(),
                     runtime=runtime_of(os.uname().release))
    kit.say(f"host: {e['host']['os']}, {e['host']['glibc']}, kernel {e['host']['kernel']} "
             f"({e['host']['runtime']}), {e['host']['cpus']} CPUs")
    smi_rc, smi = kit.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,"
                            "clocks.max.sm,power.limit,pstate", "--format=csv,noheader"], "env/nvidia-smi.txt", 20) \
        if shutil.which("nvidia-smi") else (127, "nvidia-smi not found")
    gpu_ok = smi_rc == 0 and smi.strip().count("\n") >= 1
    if gpu_ok:
        fields = [f.strip() for f in smi.strip().split("\n")[-1].split(",")]
        keys = ["name", "driver", "memory", "compute_capability", "max_sm_clock", "power_limit", "pstate"]
        e["gpu"] = dict(zip(keys, fields))
        kit.gpu_name = e["gpu"]["name"]
        kit.say(f"GPU: {smi.strip().split(chr(10))[-1]}")
        kit.run(["nvidia-smi", "-q"], "env/nvidia-smi-q.txt", 20, quiet=True)
    find_python(kit, e, deadline)
    libs_ok, why = library_path(kit, e)
    cxx_ok, cxx_why = choose_cxx(kit, e)
    kit.env["MLPERF_PLUGIN_TRUST"] = "all"  # the bundle's files, copied by the device tool: ours
    e["LD_LIBRARY_PATH"] = kit.env.get("LD_LIBRARY_PATH", "")
    kit.say(f"LD_LIBRARY_PATH={e['LD_LIBRARY_PATH']}")
    if gpu_ok and libs_ok:
        probe_versions(kit, e, deadline)
    elif kit.args.rehearse:
        kit.say(f"rehearsal: no GPU needed; the backend under test is {kit.backend}")
    sanitizer = find_tool("compute-sanitizer")
    e["compute_sanitizer"] = sanitizer or ""
    rc, text = kit.run([kit.program("mlperf-run"), "--version"], "env/mlperf-run-version.txt", 20)
    runs = rc == 0
    unresolved = unresolved_here(kit)
    problems = []
    if not gpu_ok and not kit.args.rehearse:
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
        return "PASS", f"rehearsal on {kit.backend}, no GPU; {cxx_why}"
    return "PASS", (f"{kit.gpu_name}, driver {e['gpu']['driver']}, cuDNN {versions.get('cudnn', '?')}, "
                    f"cuBLASLt {versions.get('cublasLt', '?')}, NCCL {versions.get('nccl', '?')}, "
                    f"PyTorch {e.get('pytorch', {}).get('torch', 'none')}; {cxx_why}")


def find_python(kit, e, deadline):
    """The Python with PyTorch (the device's venv), its site-packages and its torch's view of the GPU."""
    probe = ("import json, sysconfig; d = dict(purelib=sysconfig.get_paths()['purelib'])\n"
             "try:\n import torch; d.update(torch=torch.__version__, cuda=torch.version.cuda,\n"
             "  cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,\n"
             "  gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)\n"
             "except Exception as x: d['error'] = repr(x)\nprint(json.dumps(d))")
    for candidate in ["/opt/torch/.venv/bin/python3", shutil.which("python3"), "/usr/bin/python3"]:
        if not candidate or not os.path.exists(candidate):
            continue
        rc, text = kit.run([candidate, "-c", probe], "env/python.txt", min(60, kit.remaining(deadline)),
                            quiet=True)
        found = last_json(text) if rc == 0 else None
        if found and "torch" in found:
            kit.python = candidate
            e["pytorch"] = dict(python=candidate, **found)
            kit.say(f"PyTorch {found['torch']} (CUDA {found.get('cuda')}, cuDNN {found.get('cudnn')}, "
                     f"GPU {found.get('gpu')}) in {candidate}")
            return
        if found and not e.get("pytorch"):
            e["pytorch"] = dict(python=candidate, **found)
    kit.say("no Python with PyTorch found: the PyTorch peers will be skipped")


def library_path(kit, e):
    """LD_LIBRARY_PATH: the wheels' folders holding what the bundle takes from the device, first, then
    the bundle's lib/. Returns (ok, why not)."""
    needed = [lib for lib in kit.manifest.get("device_libraries", []) if not lib.startswith("libcuda.so")]
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
    kit.env["LD_LIBRARY_PATH"] = ":".join(dirs + [os.path.join(kit.bundle, "lib")] +
                                           ([kit.env["LD_LIBRARY_PATH"]] if kit.env.get("LD_LIBRARY_PATH")
                                            else []))
    for lib, d in sorted(where.items()):
        kit.say(f"{lib}: {d}")
    if missing:
        return False, (f"not in {purelib or 'any Python site-packages'}/nvidia/*/lib nor the system's: "
                       f"{', '.join(missing)}")
    return True, ""


def choose_cxx(kit, e):
    """The carried libstdc++ where this glibc is new enough for it, else the system's if it has the
    GLIBCXX version the programs need. Returns (ok, what was chosen)."""
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    need_ours = kit.manifest.get("glibc_needed_with_carried_cxx", "99")
    need = kit.manifest.get("glibc_needed", "0")
    if version_tuple(glibc) < version_tuple(need):
        return False, f"glibc {glibc} here, the programs need {need}"
    cxx = os.path.join(kit.bundle, "lib", "cxx")
    if version_tuple(glibc) >= version_tuple(need_ours):
        kit.env["LD_LIBRARY_PATH"] += ":" + cxx
        e["libstdcxx"] = "carried"
        return True, f"the carried libstdc++ (needs glibc {need_ours}; here {glibc})"
    system = system_glibcxx()
    need_cxx = kit.manifest.get("glibcxx_needed", "")
    if system and version_tuple(system) >= version_tuple(need_cxx):
        e["libstdcxx"] = "system"
        return True, f"the system's libstdc++ (GLIBCXX {system}; the carried one needs glibc {need_ours})"
    return False, (f"glibc {glibc} is too old for the carried libstdc++ (needs {need_ours}) and the system's "
                   f"has GLIBCXX {system or 'none'} < {need_cxx}")


def probe_versions(kit, e, deadline):
    """cuDNN, cuBLAS(Lt), NCCL, the driver: each library's own version call, from the files that
    LD_LIBRARY_PATH resolves (the files are named too)."""
    code = VERSIONS_PROBE
    python = kit.python or sys.executable
    rc, text = kit.run([python, "-c", code], "env/versions.txt", min(60, kit.remaining(deadline)), quiet=True)
    found = last_json(text) or {}
    e["versions"] = found
    kit.say("versions: " + json.dumps({k: v for k, v in found.items() if k != "files"}))
    for f in found.get("files", []):
        kit.say(f"  loaded {f}")


def unresolved_here(kit):
    """Libraries that ldd finds nowhere for the bundle's files, with this step's LD_LIBRARY_PATH."""
    problems = []
    for elf in kit.bundle_elves():
        for name, path in ldd(elf, kit.env.get("LD_LIBRARY_PATH", "")):
            if path is None:
                problems.append(f"{os.path.relpath(elf, kit.bundle)} needs {name}")
    return problems
