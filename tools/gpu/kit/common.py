"""Helpers of the kit's steps: JSON files, program output, the host, libraries, MLPerf logs."""
import glob
import json
import os
import re
import shutil
import subprocess


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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


# The official checker prints every failed check in one WARNING block, the messages separated by this.
CHECKER_SEPARATOR = "\n" + "-" * 30 + "\n"
# The DeepCAM ruleset checks the full dataset's sizes (closed_deepcam.yaml: train_samples == 121266,
# eval_samples == 15158), which a mini's log, logging its own, cannot pass.
DATASET_SIZE_KEYS = ("train_samples", "eval_samples")


def checker_messages(text):
    """The official checker's failure messages, from its output (empty when it printed none)."""
    start = text.find("WARNING - ")
    if start < 0:
        return []
    end = text.find("\nERROR - ", start)
    block = text[start + len("WARNING - "):end if end >= 0 else len(text)].strip("\n ")
    return [m.strip("\n ") for m in block.split(CHECKER_SEPARATOR)]


def dataset_size_failures(text):
    """What the checker failed, as "key value (the ruleset's N)", when that is only the dataset-size
    checks of DATASET_SIZE_KEYS; None when it failed anything else, or printed no failure."""
    sizes = []
    for message in checker_messages(text):
        check = re.match(r"CHECK for '(\w+)' failed in line \d+:", message)
        wanted = re.search(r"^failed test:\s*v\['value'\] == (\d+)\s*$", message, re.M)
        logged = re.search(r'"key": "(\w+)", "value": (\d+)', message)
        if not (check and wanted and logged and check.group(1) in DATASET_SIZE_KEYS and
                logged.group(1) == check.group(1)):
            return None
        sizes.append(f"{check.group(1)} {logged.group(2)} (the ruleset's {wanted.group(1)})")
    return sizes or None
