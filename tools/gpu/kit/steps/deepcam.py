"""Step 4 deepcam: one DeepCAM mini epoch on cuda."""
import math

from ..common import fmt_s, tail_hint
from .cosmoflow import mini_run


NAME = "deepcam"
LIMIT_S = 50


def run(kit, record, deadline):
    missing = kit.need_cuda_backend() or (None if kit.has_plugin("workload-deepcam") else
                                           "no deepcam workload in the bundle (HDF5 was not found for its tree)")
    if missing:
        return "SKIP", missing
    precision = "fp32" if kit.args.rehearse else "bf16"
    rc, log, text = mini_run(kit, record, deadline, "deepcam", precision, ["train.epochs=1"])
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

