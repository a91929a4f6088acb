"""Step 2 conformance: mlperf-conformance --backend cuda in fp32 (TF32 off), bf16, fp16, deterministic, with
the backend's defaults and again with every implementation choice off its default (kit/options.py:
backend.batch_norm, depthwise, pointwise = cudnn); compute-sanitizer memcheck over a few ops."""
import os
import re

from .. import options
from ..common import conformance_rows, find_tool, tail_hint


NAME = "conformance"
LIMIT_S = 170
# Ops compute-sanitizer runs (each case a few launches; memcheck slows every kernel 10-100x).
SANITIZER_OPS = ["conv", "conv_transpose", "batch_norm", "max_pool", "dense", "dropout", "softmax_cross_entropy",
                 "iou", "lamb"]


def run(kit, record, deadline):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    conformance = kit.program("mlperf-conformance")
    for run_ in runs(kit.sizes["precisions"]):
        name, precision, tolerance, note = run_["name"], run_["precision"], run_["tolerance"], run_["note"]
        if kit.remaining(deadline) < 10:
            kit.part(record, name, "SKIP", "out of time")
            continue
        markdown = os.path.join(kit.logs, "conformance", f"{run_['tag']}.md")
        cmd = [conformance, "--backend", kit.backend, "--precision", tolerance, "--markdown", markdown] + \
            kit.backend_sets(precision, deterministic=True) + kit.option_sets(run_["settings"]) + \
            kit.sizes["conformance"]
        rc, text = kit.run(cmd, f"conformance/{run_['tag']}.txt", kit.remaining(deadline) - 5)
        rows = conformance_rows(text)
        figures = dict(rows=rows, tolerance=tolerance)
        summary = f"{rows['PASS']} PASS, {rows['FAIL']} FAIL, {rows['NOT IMPLEMENTED']} NOT IMPLEMENTED"
        if note:
            summary += "; " + note
        if rc == 0:
            kit.part(record, name, "PASS", summary, **figures)
        else:
            why = "timed out" if rc is None else f"exit {rc}"
            failed = ", ".join(rows["failed_names"][:8])
            kit.part(record, name, "FAIL", f"{why}: {summary}" + (f" ({failed})" if failed else "") +
                      tail_hint(text), **figures)
    sanitize(kit, record, deadline)
    return kit.verdict(record, "every precision conforms, with every option value")


def runs(precisions):
    """Each conformance run, in order: every precision of `precisions` with the backend's defaults, then
    each again per options.conformance_variants() (every option off its default). A run: name, precision,
    tolerance, note, tag (its log's name) and settings (backend options besides the precision's)."""
    # fp16 starts from a loss scale of 1024: at the default 65536 a case's first step may overflow in
    # half precision and be skipped (as PyTorch's GradScaler skips it), which the reference never does.
    base = [("fp32", "", []), ("bf16", "", []), ("fp16", "from loss scale 1024", ["backend.loss_scale=1024"])]
    chosen = [b for b in base if b[0] in precisions]
    out = [dict(name=p, precision=p, tolerance=p, note=note, tag=p, settings=settings) for p, note, settings in chosen]
    for i, (label, option_settings) in enumerate(options.conformance_variants(), 1):
        out += [dict(name=f"{p} {label}", precision=p, tolerance=p, note=note,
                     tag=f"{p}-options{i}", settings=settings + option_settings) for p, note, settings in chosen]
    return out


def sanitize(kit, record, deadline):
    tool = kit.summary["environment"].get("compute_sanitizer") or find_tool("compute-sanitizer")
    if not tool:
        return kit.part(record, "memcheck", "SKIP", "compute-sanitizer not found")
    if kit.remaining(deadline) < 15:
        return kit.part(record, "memcheck", "SKIP", "out of time")
    conformance = kit.program("mlperf-conformance")
    _, listed = kit.run([conformance, "--list"], "conformance/list.txt", 20, quiet=True)
    ops = [op for op in SANITIZER_OPS if op in listed.split()]
    cmd = [tool, "--tool", "memcheck", "--error-exitcode", "86", "--print-limit", "20", conformance, "--backend",
           kit.backend, "--ops", ",".join(ops), "--cases", "2", "--model-steps", "0"] + kit.backend_sets("fp32")
    rc, text = kit.run(cmd, "conformance/memcheck.txt", kit.remaining(deadline) - 2)
    errors = re.search(r"ERROR SUMMARY: (\d+) error", text)
    count = int(errors.group(1)) if errors else None
    runtime = kit.summary["environment"].get("host", {}).get("runtime", "")
    figures = dict(errors=count, ops=ops, runtime=runtime)
    if rc is None:
        return kit.part(record, "memcheck", "FAIL", f"timed out over {','.join(ops)}", **figures)
    if count == 0 and rc == 0:
        return kit.part(record, "memcheck", "PASS", f"0 errors over {','.join(ops)} ({runtime})", **figures)
    if count is None:
        return kit.part(record, "memcheck", "FAIL", f"exit {rc}, no error summary (the sanitizer did not "
                         f"run the program? {runtime})" + tail_hint(text), **figures)
    return kit.part(record, "memcheck", "FAIL", f"{count} errors (exit {rc}): see logs/conformance/memcheck.txt"
                     + tail_hint(text), **figures)

