"""Step 8 layers (only with --only): mlperf-bench --layers on cuda, per-layer times."""
import os

from ..common import tail_hint


NAME = "layers"
LIMIT_S = 240


def run(kit, record, deadline):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    for workload, batch, sets in (("cosmoflow", 4, ["data.edge=128"]),
                                  ("deepcam", 8, ["data.height=768", "data.width=1152"])):
        out = os.path.join(kit.logs, "layers", f"{workload}-b{batch}.json")
        cmd = [kit.program("mlperf-bench"), "--workload", workload, "--backend", kit.backend, "--set",
               f"train.batch_size={batch}", "--steps", "10", "--warmup", "3", "--layers", "--json", out] + \
            kit.backend_sets("bf16")
        for s in sets:
            cmd += ["--set", s]
        rc, text = kit.run(cmd, f"layers/{workload}-b{batch}.txt", kit.remaining(deadline) - 3)
        kit.part(record, f"{workload} b{batch}", "PASS" if rc == 0 else "FAIL",
                  "per-layer table in logs/layers/" if rc == 0 else
                  ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
    return kit.verdict(record, "per-layer times written")

