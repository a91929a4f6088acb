"""--dry-run (no GPU: here and in CI): the bundle itself is checked instead of the GPU steps."""
import glob
import os
import re

from ..common import ROOT, conformance_rows, ldd, python_with, read_json, tail_hint


LIMIT_S = 240
# What the device provides: the driver and the CUDA libraries of PyTorch's wheels (too large to carry).
DEVICE_LIBS = re.compile(r"^(libcuda|libcudnn[a-z_]*|libcublas|libcublasLt|libnccl)\.so")
GLIBC_LIBS = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|"
                        r"libmvec|libBrokenLocale|libthread_db|libc_malloc_debug)\.so")


def dry_run(kit):
    kit.say(f"== dry run (no GPU): the bundle {kit.bundle}")
    kit.step(0, "env", LIMIT_S, step_bundle)
    for name in kit.args.only:
        if name != "env":
            kit.summary["steps"][name] = dict(status="SKIP", reason="no GPU (--dry-run)", seconds=0.0, parts=[])
    kit.say("no GPU: GPU steps skipped")


def step_bundle(kit, record, deadline):
    m = kit.manifest
    kit.say(f"bundle: {m.get('size_bytes', 0) / 2**20:.1f} MiB in {m.get('files')} files, commit "
             f"{str(m.get('commit'))[:12]}, plug-ins {', '.join(m.get('plugins', []))}, "
             f"tests {', '.join(m.get('tests', [])) or 'none'}")
    # 1. Every library resolved inside the bundle (its lib/ and lib/cxx/) or glibc's, but those the
    #    device provides, with nothing of this machine's environment.
    path = os.path.join(kit.bundle, "lib") + ":" + os.path.join(kit.bundle, "lib", "cxx")
    outside, expected = [], set()
    elves = kit.bundle_elves() + sorted(glob.glob(os.path.join(kit.bundle, "lib", "*.so*")) +
                                         glob.glob(os.path.join(kit.bundle, "lib", "cxx", "*")))
    for elf in elves:
        for name, resolved in ldd(elf, path, clean=True):
            if DEVICE_LIBS.match(name):
                expected.add(name)
            elif GLIBC_LIBS.match(name):
                continue
            elif resolved is None or not os.path.realpath(resolved).startswith(kit.bundle + os.sep):
                outside.append(f"{os.path.relpath(elf, kit.bundle)}: {name} => {resolved or 'not found'}")
    if outside:
        kit.part(record, "libraries", "FAIL", "outside the bundle: " + "; ".join(outside[:10]))
    else:
        kit.part(record, "libraries", "PASS",
                  f"{len(elves)} files resolve inside the bundle; from the device: "
                  f"{', '.join(sorted(expected)) or 'none'} (the driver and PyTorch's wheels there)")
    env = dict(PATH="/usr/bin:/bin", LD_LIBRARY_PATH=path, HOME=kit.work)
    # 2. The plug-ins load from the bundle (dlopen: what ldd cannot show).
    rc, text = kit.run([kit.program("mlperf-run"), "--list-plugins"], "dry/list-plugins.txt", 60, env=env)
    loaded = [p for p in m.get("plugins", []) if p.split("-", 1)[-1] in text]
    # The driver-less machine may refuse to list a GPU plug-in's details, never to load it.
    kit.part(record, "plug-ins", "PASS" if rc == 0 and len(loaded) == len(m.get("plugins", [])) else "FAIL",
              f"mlperf-run --list-plugins from the bundle: {len(loaded)} of {len(m.get('plugins', []))} listed"
              + ("" if rc == 0 else f" (exit {rc})" + tail_hint(text)))
    # 3. Reference conformance from the bundle (the reference against itself: errors exactly 0).
    cmd = [kit.program("mlperf-conformance"), "--backend", "reference", "--ops",
           "conv,batch_norm,dense,max_pool,softmax_cross_entropy,sgd_keras,lamb,state,cosmoflow",
           "--cases", "2", "--model-steps", "1"]
    rc, text = kit.run(cmd, "dry/conformance-reference.txt", kit.remaining(deadline) - 30, env=env)
    rows = conformance_rows(text)
    kit.part(record, "conformance", "PASS" if rc == 0 else "FAIL",
              f"reference against itself from the bundle: {rows['PASS']} PASS, {rows['FAIL']} FAIL"
              + ("" if rc == 0 else tail_hint(text)))
    # 4. The official checker from the bundle, on a submitted log where ../shared has one.
    fixture = os.path.join(ROOT, "..", "shared", "fixtures", "mllog", "nvidia_v3.0_cosmoflow_strong_result_0.txt")
    if not os.path.exists(os.path.join(kit.bundle, "tools", "mllog-check")):
        kit.part(record, "checker", "SKIP", "no official checker in the bundle (no ../shared where it was made)")
    elif os.path.exists(fixture):
        ok, checker = kit.official_checker(fixture, "fixture")
        kit.part(record, "checker", "PASS" if ok else "FAIL", f"on NVIDIA's v3.0 CosmoFlow log: {checker}")
    else:
        kit.part(record, "checker", "SKIP", f"no {fixture} to check")
    # 5. The profile step's probe from the bundle: it starts (its libraries found) and says there is no GPU.
    probe = kit.program("mlph-cuda-probe")
    if os.path.exists(probe):
        rc, text = kit.run([probe, "--only", "none"], "dry/probe.txt", 30, env=env)
        said = [l for l in text.split("\n") if l.startswith("mlph-cuda-probe: no CUDA device")]
        kit.part(record, "probe", "PASS" if rc == 3 and said else "FAIL",
                 f"mlph-cuda-probe from the bundle: {said[0]}" if rc == 3 and said else f"exit {rc}" + tail_hint(text))
    else:
        kit.part(record, "probe", "SKIP", "no mlph-cuda-probe in the bundle (no cuda backend in its tree)")
    # 6. The PyTorch peer on the CPU, tiny (the GPU's figures come from the same code).
    python = python_with("torch") if kit.args.with_torch else None
    if python:
        for workload, size in (("cosmoflow", ["--edge", "32"]), ("deepcam", ["--height", "32", "--width", "48"])):
            out = os.path.join(kit.logs, "dry", f"pytorch-{workload}.json")
            rc, text = kit.run([python, os.path.join(ROOT, "tools", "bench", "pytorch_gpu.py"), "--device", "cpu",
                                 "--workload", workload, "--batch", "1", "--variants", "eager", "--precision",
                                 "fp32", "--steps", "1", "--repeats", "1", "--warmup", "0", "--json", out] + size,
                                f"dry/pytorch-{workload}.txt", max(10, kit.remaining(deadline) - 5))
            runs = (read_json(out) or {}).get("runs", [])
            ok = rc == 0 and runs and "train_s" in runs[0]
            kit.part(record, f"pytorch {workload}", "PASS" if ok else "FAIL",
                      "pytorch_gpu.py on the CPU: a step timed" if ok else
                      ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
    else:
        kit.part(record, "pytorch", "SKIP", "without --with-torch" if not kit.args.with_torch else
                  "no Python with PyTorch")
    return kit.verdict(record, "the bundle is self-contained")


