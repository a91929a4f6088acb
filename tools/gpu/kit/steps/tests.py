"""Step 1 tests: the bundle's GPU test programs (the gpu tier: ctest -L gpu), run directly."""
import os

from ..common import ROOT, read_json, tail_hint


NAME = "tests"
LIMIT_S = 60


def run(kit, record, deadline):
    tests = kit.manifest.get("tests", [])
    if not tests:
        left = "; ".join(kit.manifest.get("tests_left_behind", [])) or "none defined in its tree"
        return "SKIP", f"the bundle has no GPU test programs (left behind: {left})"
    link_build_paths(kit, record)
    for name in tests:
        report = os.path.join(kit.logs, "tests", f"{name}.json")
        rc, text = kit.run([os.path.join(kit.bundle, "tests", name), f"--gtest_output=json:{report}"],
                            f"tests/{name}.txt", kit.remaining(deadline))
        counts = gtest_counts(report)
        figures = dict(counts=counts)
        if rc is None:
            kit.part(record, name, "FAIL", "timed out", **figures)
        elif rc != 0:
            kit.part(record, name, "FAIL", f"exit {rc}: {counts['failed']} failed "
                      f"({', '.join(counts['failed_names'][:5])})" + tail_hint(text), **figures)
        else:
            skipped = f", {counts['skipped']} skipped ({', '.join(counts['skipped_names'][:5])})" \
                if counts["skipped"] else ""
            kit.part(record, name, "PASS", f"{counts['passed']} passed{skipped}", **figures)
    return kit.verdict(record, f"{len(tests)} programs")


def link_build_paths(kit, record):
    """The tests name the source and build trees they were built in (MLPH_SOURCE_DIR, MLPH_BINARY_DIR):
    where those paths do not exist here, they are made links to this checkout and the bundle, whose
    bin/ and lib/mlperf-hpc-1/ are laid out as a build tree's."""
    for key, target in (("source_dir", ROOT), ("build_dir", kit.bundle)):
        path = kit.manifest.get(key)
        if path and not os.path.lexists(path):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(target, path)
                kit.say(f"linked {path} -> {target} (the tests' compiled-in {key})")
            except OSError as x:
                kit.say(f"could not link {path} -> {target}: {x}")


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


