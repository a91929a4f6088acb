#!/usr/bin/env python3
"""What a GPU bundle holds, read from a configured build tree (tools/gpu/bundle.sh uses it).

  targets.py BUILD_DIR targets   the CMake targets to build, one per line
  targets.py BUILD_DIR tests     after the build: the test programs to carry, as
                                 "NAME<TAB>PATH<TAB>CTEST_TESTS", and those left behind, "#NAME<TAB>why"

Targets come from CMake's file API (the codemodel reply of BUILD_DIR/.cmake/api/v1, which bundle.sh
asks for before configuring): the programs (mlph-cuda-probe too) and plug-ins below where the tree
defines them, and every test program of the tier `gpu` (ctest -L gpu: the tests that need a GPU). A test program is carried when ctest runs it directly; one that ctest runs only under
mpirun (two ranks) cannot run on the one-GPU machine, which has no MPI launcher.
"""
import glob
import json
import os
import subprocess
import sys

PROGRAMS = ["mlperf-run", "mlperf-conformance", "mlperf-bench"]
OPTIONAL_PROGRAMS = ["mlph-cuda-probe"]  # where the tree builds the cuda backend
# Plug-ins: required ones must exist in any tree; the others travel when this tree builds them.
REQUIRED_PLUGINS = ["mlph-backend-reference", "mlph-workload-cosmoflow", "mlph-comms-local", "mlph-storage-posix"]
OPTIONAL_PLUGINS = ["mlph-backend-cuda", "mlph-comms-nccl", "mlph-workload-deepcam"]
GPU_TIER = "gpu"


def codemodel(build):
    replies = sorted(glob.glob(os.path.join(build, ".cmake/api/v1/reply/index-*.json")))
    if not replies:
        sys.exit(f"targets.py: {build} has no CMake file-API reply (configure it after creating "
                 f"{build}/.cmake/api/v1/query/codemodel-v2)")
    reply_dir = os.path.dirname(replies[-1])
    with open(replies[-1]) as f:
        index = json.load(f)
    with open(os.path.join(reply_dir, index["reply"]["codemodel-v2"]["jsonFile"])) as f:
        model = json.load(f)
    config = model["configurations"][0]
    targets = {}
    for t in config["targets"]:
        with open(os.path.join(reply_dir, t["jsonFile"])) as f:
            detail = json.load(f)
        source_dir = config["directories"][t["directoryIndex"]]["source"]
        artifacts = [a["path"] for a in detail.get("artifacts", [])]
        targets[t["name"]] = dict(type=detail["type"], dir=source_dir, artifacts=artifacts)
    return targets


def gpu_tests(targets, build):
    """The test programs of the gpu tier, as tests/CMakeLists.txt's mlph_add_test recorded them at
    configure time (BUILD_DIR/tests/tiers.tsv: NAME<TAB>TIER)."""
    tiers = os.path.join(build, "tests", "tiers.tsv")
    if not os.path.isfile(tiers):
        return []  # a tree configured without its tests
    with open(tiers) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return sorted(name for name, tier in rows if tier == GPU_TIER and name in targets)


def wanted_targets(targets, build):
    missing = [name for name in PROGRAMS + REQUIRED_PLUGINS if name not in targets]
    if missing:
        sys.exit("targets.py: this build tree defines no " + ", ".join(missing))
    return PROGRAMS + [p for p in OPTIONAL_PROGRAMS if p in targets] + REQUIRED_PLUGINS + \
        [p for p in OPTIONAL_PLUGINS if p in targets] + gpu_tests(targets, build)


def ctest_commands(build):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True, capture_output=True,
                         text=True).stdout
    return [(t["name"], t.get("command", [])) for t in json.loads(out).get("tests", [])]


def carried_tests(build, targets):
    commands = ctest_commands(build)
    lines = []
    for name in gpu_tests(targets, build):
        paths = [os.path.join(build, a) for a in targets[name]["artifacts"]]
        exe = os.path.realpath(paths[0]) if paths else ""
        direct = [test for test, cmd in commands if cmd and os.path.realpath(cmd[0]) == exe]
        launched = [test for test, cmd in commands if any(os.path.realpath(c) == exe for c in cmd[1:])]
        if not os.path.isfile(exe):
            lines.append(f"#{name}\tnot built")
        elif direct:
            lines.append(f"{name}\t{exe}\t{len(direct)}")
        elif launched:
            lines.append(f"#{name}\truns only under a launcher (ctest: {launched[0]}): the GPU machine has no mpirun")
        else:
            lines.append(f"#{name}\tno ctest test runs it")
    return lines


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("targets", "tests"):
        sys.exit(__doc__.split("\n\n")[1])
    build, what = sys.argv[1], sys.argv[2]
    targets = codemodel(build)
    print("\n".join(wanted_targets(targets, build) if what == "targets" else carried_tests(build, targets)))


if __name__ == "__main__":
    main()
