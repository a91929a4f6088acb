#!/usr/bin/env python3
"""Fails when the build uses a Debian package that tools/setup.sh would not install on a fresh machine.

A fresh Debian (debootstrap minbase) has only the packages of priority 'required'; tools/setup.sh then
installs its list with --no-install-recommends, which brings that list's Depends and Pre-Depends and
nothing else. So every file the build reads from the system (CMake's package files as configure loads
them, the headers the compiler included, the libraries the linker was given) must belong to a package
of that closure. A package reached only as a Recommends (ocl-icd-opencl-dev for Debian's oneDNN CMake
config, found on a fresh machine) is exactly what this catches.

    tools/ci/check-setup-packages.py BUILD_DIR [--without PACKAGE]

--without drops a package from the list first: the check's own test (it must then fail naming it).

BUILD_DIR is a finished build (its Ninja dependency log lists the included headers). Configure is run
again, traced, in a temporary folder. /usr/local (the CUDA tool kit) is outside Debian and skipped.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

# Read only when present, so a fresh machine without them builds the same.
OPTIONAL = {
    "ccache": "CMakeLists.txt uses it as the compiler launcher when found",
    "libgmock-dev": "GTestConfig.cmake includes GMockTargets.cmake OPTIONAL; no test uses GoogleMock",
}

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def setup_packages():
    text = open(os.path.join(SOURCE, "tools", "setup.sh")).read()
    match = re.search(r"^packages=\((.*?)\)", text, re.S | re.M)
    if not match:
        sys.exit("tools/setup.sh: no packages=(...) list found")
    return match.group(1).split()


def dependency_closure(packages):
    """The packages apt installs for `packages` without recommends (alternatives all count)."""
    out = run("apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests",
              "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages)
    closure = {line.strip().split(":")[0] for line in out.splitlines() if line and not line.startswith(" ")}
    minbase = run("dpkg-query", "-W", "-f", "${Package} ${Priority}\n")
    closure |= {line.split()[0] for line in minbase.splitlines() if line.endswith(" required")}
    return closure


def traced_configure_files():
    """Every CMake file a fresh configure reads, and the paths it caches."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        run("cmake", "-S", SOURCE, "-B", os.path.join(tmp, "b"), "-G", "Ninja", "--trace-format=json-v1",
            f"--trace-redirect={trace}")
        files = set()
        for line in open(trace):
            entry = json.loads(line)
            if "file" in entry:
                files.add(entry["file"])
        for line in open(os.path.join(tmp, "b", "CMakeCache.txt")):
            value = line.partition("=")[2].strip()
            files.update(p for p in value.split(";") if p.startswith("/usr/"))
        return files


def build_files(build):
    """Headers the compiler included (Ninja's dependency log) and libraries given to the linker."""
    files = {line.strip() for line in run("ninja", "-C", build, "-t", "deps").splitlines()
             if line.startswith("    /usr/")}
    for line in open(os.path.join(build, "build.ninja")):
        if line.strip().startswith("LINK_LIBRARIES"):
            for token in line.split():
                if token.startswith("/usr/"):
                    files.add(token)
                elif token.startswith("-l") and len(token) > 2:
                    path = run("gcc", f"-print-file-name=lib{token[2:]}.so").strip()
                    if path.startswith("/usr/"):
                        files.add(os.path.normpath(path))
    return files


def file_index():
    """Every file dpkg installed, by path: one read of its lists instead of a `dpkg -S` per file."""
    index = {}
    info = "/var/lib/dpkg/info"
    for name in os.listdir(info):
        if name.endswith(".list"):
            package = name[:-len(".list")].split(":")[0]
            for line in open(os.path.join(info, name), errors="replace"):
                index.setdefault(line.rstrip("\n"), package)
    return index


def owners(paths):
    """Package owning each system path (dpkg knows a file by the path its package installed)."""
    index = file_index()
    found, unowned = {}, []
    for path in sorted(paths):
        if not path.startswith("/usr/") or path.startswith("/usr/local") or not os.path.isfile(path):
            continue
        candidates = [path, os.path.realpath(path)]
        candidates += [c[len("/usr"):] for c in candidates]  # merged /usr: dpkg may know it as /bin/..., /lib/...
        package = next((index[c] for c in candidates if c in index), None)
        if package:
            found[path] = package
        else:
            unowned.append(path)
    return found, unowned


def main():
    args = sys.argv[1:]
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--without"):
        sys.exit(__doc__)
    build = args[0]
    listed = [p for p in setup_packages() if args[2:] != [p]]
    allowed = dependency_closure(listed)
    used, unowned = owners(traced_configure_files() | build_files(build))
    packages = sorted(set(used.values()))
    missing = {pkg: [f for f, p in used.items() if p == pkg] for pkg in packages if pkg not in allowed and pkg not in OPTIONAL}
    print(f"check-setup-packages: the build reads {len(used)} system files of {len(packages)} packages; "
          f"tools/setup.sh's {len(listed)} packages bring {len(allowed)} with their dependencies")
    for path in unowned:
        print(f"  (no package owns {path}: not checked)")
    for pkg, files in missing.items():
        print(f"MISSING {pkg}: the build uses {files[0]}" + (f" and {len(files) - 1} more" if len(files) > 1 else "")
              + ", but tools/setup.sh neither installs it nor anything that depends on it")
    if missing:
        sys.exit(1)
    print("check-setup-packages: OK, a fresh machine gets every package the build uses")


if __name__ == "__main__":
    main()
