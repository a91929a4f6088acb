"""Step 5 resume: the CosmoFlow mini on cuda (fp32, deterministic): 2 epochs straight, and 1 epoch with a
checkpoint resumed for the 2nd: the exported weights are equal bytes; the checkpoint also resumed on the
reference backend (--switch-backend): the validation error within 1%."""
import os
import shutil

from ..common import read_mllog, tail_hint


NAME = "resume"
LIMIT_S = 60


def run(kit, record, deadline):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    config = os.path.join(kit.bundle, "configs", "cosmoflow", "mini.yaml")
    data, why = kit.dataset("cosmoflow-mini", config, deadline, kit.sizes["mini_sets"])
    if data is None:
        return "FAIL", why
    base = os.path.join(kit.logs, "resume")
    checkpoints = os.path.join(kit.work, "resume-checkpoints")
    shutil.rmtree(checkpoints, ignore_errors=True)
    common = [kit.program("mlperf-run"), "--config", config, "--backend", kit.backend, "--data", data, "--seed",
              "1"] + kit.backend_sets("fp32", deterministic=True)
    for s in kit.sizes["mini_sets"]:
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
        rc, text = kit.run(cmd, f"resume/{name.replace(' ', '-')}.txt", kit.remaining(deadline))
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
        return "FAIL", f"resumed on the reference backend, the validation error is {b} against {kit.backend}'s {a}"
    return "PASS", ("2 epochs straight and 1 + 1 resumed from a checkpoint: the exported weights are equal bytes; "
                    f"resumed on the reference backend (--switch-backend): validation error {b:.5g} against "
                    f"{kit.backend}'s {a:.5g}")

