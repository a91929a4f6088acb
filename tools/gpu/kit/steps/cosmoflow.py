"""Step 3 cosmoflow: the CosmoFlow mini to its target on cuda in fp32 and bf16; the official checker.
Step 4 (deepcam) runs its mini through the same to_target."""
import os

from ..common import fmt_s, read_mllog, tail_hint


NAME = "cosmoflow"
LIMIT_S = 80


def mini_run(kit, record, deadline, workload, precision):
    """One mlperf-run of a mini on cuda; returns (exit status, parsed log, output text)."""
    config = os.path.join(kit.bundle, "configs", workload, "mini.yaml")
    data, why = kit.dataset(f"{workload}-mini", config, deadline, kit.sizes["mini_sets"])
    if data is None:
        return None, None, why
    output = os.path.join(kit.logs, f"{workload}-{precision}")
    cmd = [kit.program("mlperf-run"), "--config", config, "--backend", kit.backend, "--data", data, "--output",
           output, "--seed", "1"] + kit.backend_sets(precision)
    for s in kit.sizes["mini_sets"]:
        cmd += ["--set", s]
    rc, text = kit.run(cmd, f"{workload}-{precision}/mlperf-run.txt", kit.remaining(deadline))
    return rc, read_mllog(os.path.join(output, "result_0.txt")), text


def to_target(kit, record, deadline, workload, metric, mini_dataset=False):
    """A workload's mini to its target on cuda in fp32 and bf16, each log through the official checker
    (`mini_dataset`: see Kit.official_checker); one part per precision."""
    for precision in ("fp32", "bf16"):
        if kit.remaining(deadline) < 10:
            kit.part(record, precision, "SKIP", "out of time")
            continue
        rc, log, text = mini_run(kit, record, deadline, workload, precision)
        if log is None:
            kit.part(record, precision, "FAIL", ("timed out" if rc is None else f"exit {rc}") + ": no log; " +
                      tail_hint(text))
            continue
        checker_ok, checker = kit.official_checker(log["path"], f"{workload}-{precision}", mini_dataset)
        figures = dict(run_stop=log["status"], time_to_train_s=log["time_to_train_s"], epochs=log["epochs"],
                       metric=log["last_metric"], checker=checker)
        summary = (f"run_stop {log['status']} after {log['epochs']} epochs, time to train "
                   f"{fmt_s(log['time_to_train_s'])}, last eval {metric} {log['last_metric']}; checker: {checker}")
        # A rehearsal trains one epoch: its run stops short of the target (exit 1, "aborted"), which
        # the checker refuses too.
        expected = (1, "aborted") if kit.args.rehearse else (0, "success")
        ok = (rc, log["status"]) == expected and (checker_ok or kit.args.rehearse)
        if rc != expected[0]:
            summary += (" (timed out)" if rc is None else f" (exit {rc})") + tail_hint(text)
        kit.part(record, precision, "PASS" if ok else "FAIL", summary, **figures)
    return kit.verdict(record, "to target in fp32 and bf16, logs accepted")


def run(kit, record, deadline):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    return to_target(kit, record, deadline, "cosmoflow", "MAE")
