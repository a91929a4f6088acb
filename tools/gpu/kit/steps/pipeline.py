"""Step 6 pipeline: CosmoFlow 128^3 and DeepCAM 768x1152 fed from files on cuda: how long the step waits
for its batch, and how fast the readers go alone."""
import os

from ..common import read_json, tail_hint


NAME = "pipeline"
LIMIT_S = 110


def run(kit, record, deadline):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    plan = kit.sizes["pipeline"]
    results = []
    for workload, fmt, sets, runs in plan["datasets"]:
        kind = f"{workload}-{fmt}" if fmt else workload
        sets = sets + ["data.synthetic.valid=2"] + ([f"data.synthetic.format={fmt}"] if fmt else [])
        data, why = kit.dataset(f"pipeline-{kind}", None, deadline, sets, workload=workload)
        if data is None:
            kit.part(record, kind, "FAIL", why)
            continue
        for batch, steps in runs:
            name = f"{kind} b{batch}"
            if kit.remaining(deadline) < 10:
                kit.part(record, name, "SKIP", "out of time")
                continue
            out = os.path.join(kit.logs, "pipeline", f"{kind}-b{batch}.json")
            cmd = [kit.program("mlperf-bench"), "--workload", workload, "--backend", kit.backend, "--set",
                   f"train.batch_size={batch}", "--data", data, "--steps", str(steps), "--warmup",
                   str(plan["warmup"]), "--json", out] + kit.backend_sets("bf16")
            for s in sets:
                cmd += ["--set", s]
            rc, text = kit.run(cmd, f"pipeline/{kind}-b{batch}.txt", kit.remaining(deadline) - 3)
            result = read_json(out) if rc == 0 else None
            if not result or "files" not in result:
                kit.part(record, name, "FAIL", ("timed out" if rc is None else f"exit {rc}") + tail_hint(text))
                continue
            files, synthetic = result["files"], result["model"]
            share = files["wait_s"] / files["train_s"]
            figures = dict(train_s=files["train_s"], wait_s=files["wait_s"], read_s=files.get("read_s"),
                           readers=files.get("readers"), synthetic_train_s=synthetic["train_s"],
                           samples_per_s=batch / files["train_s"], wait_share=share)
            results.append(dict(workload=workload, format=fmt, batch=batch, **figures))
            readers = files.get("readers", 1)
            alone = f"; {readers} reader{'' if readers == 1 else 's'} alone {batch / files['read_s']:.1f} " \
                "samples/s" if files.get("read_s") else ""
            kit.part(record, name, "PASS",
                      f"{batch / files['train_s']:.1f} samples/s from files ({batch / synthetic['train_s']:.1f} "
                      f"synthetic){alone}; the step waited {files['wait_s'] * 1e3:.2f} ms for its batch "
                      f"({100 * share:.1f}%)" + (" - the pipeline does not keep up" if share > 0.05 else ""),
                      **figures)
    if kit.bench is not None:
        kit.bench["pipeline"] = dict(data=plan["about"], runs=results)
    return kit.verdict(record, "measured")

