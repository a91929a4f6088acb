"""Step 9 profile (only with --only; docs/cuda.md, "Reading profile.json"): every speed question in one call.

Four parts in this order, each under its own limit and all within the step's budget (--budget, 300 s by
default with --only profile), so that a call cut short still returns the first, most useful ones:
  nodes    the cuda backend with backend.profile=DIR (find.json: every cudnnFind row; nodes.json: every
           node's forward and backward and the calls inside, timed with CUDA events in two eager steps;
           then graph-replayed steps, one between cudaProfilerStart/Stop); on a CPU backend (a
           rehearsal) mlperf-bench --layers instead
  probe    mlph-cuda-probe: the ceilings, then each decision's variants timed with their error
  pytorch  pytorch_gpu.py --layers --unique (each distinct layer alone, fp16 and bf16) and
           --profile-top 40 (torch.profiler over one fp16 step)
  ncu      Nsight Compute over the profiled step (the graph replay between cudaProfilerStart/Stop):
           time, DRAM bytes, SM throughput and tensor-pipe activity; a top-20 summary. Firecracker only.
Results go under logs/profile/ and into profile.json ($OUT and logs/profile/), rewritten after each part.
"""
import csv
import io
import math
import os
import re

from ..common import ROOT, find_tool, read_json, tail_hint, write_json
from ..sizes import PROFILE_SIZES


NAME = "profile"
LIMIT_S = 300
BUDGET_S = 300  # the whole check's default budget with --only profile
# Each part's own limit (seconds before --timeout-scale); together more than the budget, which cuts the last.
PART_LIMITS_S = dict(nodes=100, probe=60, pytorch=80, ncu=70)
PARTS = list(PART_LIMITS_S)
MIN_PART_S = 5  # a part with less time left is not started (SKIP, "out of time")
# ncu's metrics: time, DRAM bytes read and written, SM throughput, tensor-pipe activity.
NCU_METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
# Steps of ncu's run: backend.profile's profiled replay is the 5th training step (2 eager, a capture, 2
# replays; mlperf-bench's one warm-up step counts), which ncu --profile-from-start off measures alone.
NCU_STEPS = 5
# The decisions profile.json answers, and which layer kinds stand for each where the probe did not run.
DECISIONS = dict(batch_norm=["batch_norm"], depthwise=["depthwise"], **{"1x1": ["1x1"]}, padding=[])
# A variant whose error against fp32 is above this cannot win (bf16's conformance tolerance per op).
MAX_ERROR = 3e-2


def run(kit, record, deadline):
    sizes = PROFILE_SIZES["rehearsal" if kit.args.rehearse else "gpu"]
    root = os.path.join(kit.logs, "profile")
    os.makedirs(root, exist_ok=True)
    doc = dict(backend=kit.backend, gpu=kit.gpu_name, parts={}, cases={}, probe=None, pytorch={}, ncu=None)
    for part in PARTS:
        limit = min(PART_LIMITS_S[part] * kit.args.timeout_scale, kit.remaining(deadline))
        if limit < MIN_PART_S:
            status, reason = "SKIP", f"out of time: {max(0.0, limit):.0f} s left of the step's budget"
        else:
            try:
                status, reason = PART_RUNNERS[part](kit, doc, sizes, root, limit)
            except Exception as e:  # one part's bug must not cost the others
                status, reason = "FAIL", f"{type(e).__name__}: {e}"
        doc["parts"][part] = dict(status=status, reason=reason)
        kit.part(record, part, status, reason)
        save(kit, doc, root)
    for line in decision_lines(doc["decisions"]):
        kit.say(line)
    return kit.verdict(record, "profile.json written")


def save(kit, doc, root):
    """profile.json with the decisions as the figures stand now (after each part: a cut call has it)."""
    doc["decisions"] = decide(doc.get("probe"), doc.get("cases", {}), doc.get("pytorch", {}))
    write_json(os.path.join(root, "profile.json"), doc)
    write_json(os.path.join(kit.out, "profile.json"), doc)


# -- part 1: our step, node by node (cuda) or layer by layer (a CPU backend) ----------------------------------
def part_nodes(kit, doc, sizes, root, limit):
    missing = kit.need_cuda_backend()
    if missing:
        return "SKIP", missing
    deadline = kit.deadline_in(limit)
    done = []
    for workload, batch, sets, steps in sizes["cases"]:
        case = f"{workload}-b{batch}"
        folder = os.path.join(root, case)
        os.makedirs(folder, exist_ok=True)
        if kit.remaining(deadline) < MIN_PART_S:
            doc["cases"][case] = dict(status="SKIP", reason="out of time")
            continue
        out = os.path.join(folder, "bench.json")
        cmd = bench_command(kit, workload, batch, sets, steps, out, folder, sizes["layers"])
        rc, text = kit.run(cmd, f"profile/{case}/bench.txt", kit.remaining(deadline) - 2)
        bench = read_json(out) if rc == 0 else None
        if not bench:
            doc["cases"][case] = dict(status="SKIP", reason="out of time: stopped at the part's limit") if rc is None \
                else dict(status="FAIL", reason=f"exit {rc}" + tail_hint(text))
            continue
        summary = case_summary(bench, read_json(os.path.join(folder, "nodes.json")),
                               read_json(os.path.join(folder, "find.json")))
        doc["cases"][case] = dict(status="PASS", **summary)
        done.append(f"{case} {summary['step_ms']:.1f} ms/step")
    failed = [f"{c} ({r['reason']})" for c, r in doc["cases"].items() if r["status"] == "FAIL"]
    cut = [c for c, r in doc["cases"].items() if r["status"] == "SKIP"]
    left_out = [f"out of time for {', '.join(cut)}"] if cut else []
    if failed:
        return "FAIL", "; ".join(failed + left_out)
    return ("PASS", "; ".join([", ".join(done)] + left_out)) if done else ("SKIP", left_out[0])


def bench_command(kit, workload, batch, sets, steps, out, folder, layers):
    cmd = [kit.program("mlperf-bench"), "--workload", workload, "--backend", kit.backend, "--set",
           f"train.batch_size={batch}", "--steps", str(steps), "--warmup", "1", "--json", out]
    cmd += kit.backend_sets("bf16")
    if not kit.args.rehearse:
        cmd += ["--set", f"backend.profile={folder}"]
    if layers:
        cmd += ["--layers"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def case_summary(bench, nodes, find):
    """One profiled case: the step's time, then where it goes by kind, from the backend's nodes.json where
    there is one, else from mlperf-bench's layer rows (each timed alone); the cudnnFind rows counted."""
    summary = dict(step_ms=1e3 * bench["model"]["train_s"], by_kind=layer_kinds(bench.get("layers", [])),
                   source="layers")
    if nodes:
        summary.update(by_kind=node_kinds(nodes), source="nodes", top_calls=top_calls(nodes, 15),
                       eager_step_ms=nodes.get("eager_step_ms"), graph_step_ms=nodes.get("graph_step_ms"))
    if find:
        rows = find.get("rows", [])
        summary["find"] = dict(rows=len(rows), chosen=sum(1 for r in rows if r.get("chosen")),
                               refused_by_rule=sum(1 for r in rows if r.get("status") == "success" and
                                                   not r.get("allowed")))
    return summary


def layer_kinds(layers):
    """Train-step ms per layer kind from mlperf-bench --layers rows (kind as layers.cpp names it)."""
    kinds = {}
    for layer in layers:
        kind = layer.get("kind", "other")
        kinds[kind] = kinds.get(kind, 0.0) + 1e3 * layer["train_s"] * layer.get("count", 1)
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def last_step(nodes):
    """The rows of the last profiled eager step (the first one initializes the libraries)."""
    calls = nodes.get("calls", [])
    step = max((r["step"] for r in calls), default=0)
    return [r for r in calls if r["step"] == step]


def node_kinds(nodes):
    """ms per node kind (forward, backward and the update together) in the last profiled step, from the
    whole nodes' rows (call "node") of the backend's nodes.json."""
    kinds = {}
    for row in last_step(nodes):
        if row["call"] == "node" and finite(row.get("ms")):
            kinds[row["kind"]] = kinds.get(row["kind"], 0.0) + row["ms"]
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def top_calls(nodes, n):
    """The `n` slowest library calls and kernels of the last profiled step."""
    rows = sorted((r for r in last_step(nodes) if r["call"] != "node" and finite(r.get("ms"))), key=lambda r: -r["ms"])
    return [{k: r.get(k) for k in ("node", "pass", "call", "ms", "share")} for r in rows[:n]]


# -- part 2: mlph-cuda-probe ----------------------------------------------------------------------------------
def part_probe(kit, doc, sizes, root, limit):
    probe = kit.program("mlph-cuda-probe")
    if not os.path.exists(probe):
        return "SKIP", "no mlph-cuda-probe in the bundle (the cuda backend was not built in its tree)"
    out = os.path.join(root, "probe.json")
    rc, text = kit.run([probe, "--json", out], "profile/probe.txt", limit)
    if rc == 3 and "no CUDA device" in text:
        return "SKIP", "no CUDA device (mlph-cuda-probe)"
    doc["probe"] = read_json(out)
    if rc != 0 or not doc["probe"]:
        return "FAIL", ("timed out" if rc is None else f"exit {rc}") + tail_hint(text)
    c = doc["probe"].get("ceilings", {})
    return "PASS", (f"copy {c.get('d2d_gb_s', 0):.0f} GB/s, pinned H2D {c.get('h2d_pinned_gb_s', 0):.1f} GB/s, "
                    f"bf16 GEMM {c.get('bf16_gemm_tflop_s', 0):.0f} TFLOP/s")


# -- part 3: PyTorch layer by layer, and its kernels --------------------------------------------------------
def part_pytorch(kit, doc, sizes, root, limit):
    if not kit.python:
        return "SKIP", "no Python with PyTorch here"
    deadline = kit.deadline_in(limit)
    script = os.path.join(ROOT, "tools", "bench", "pytorch_gpu.py")
    done, failed, cut = [], [], []
    # Most useful first: each workload's layers and kernels in the first precision (DeepCAM's batch norm,
    # depthwise and 1x1 decide the most), then the other precisions' layers.
    first, *others = sizes["torch_precisions"]
    runs = [run for w in ("deepcam", "cosmoflow")
            for run in ((w, first, ["--layers", "--unique"]), (w, first, ["--profile-top", "40"]))] + \
        [(w, p, ["--layers", "--unique"]) for p in others for w in ("deepcam", "cosmoflow")]
    batches = {w: b for w, b, _, _ in sizes["cases"]}
    for workload, precision, mode in runs:
        what = "kernels" if "--profile-top" in mode else "layers"
        name = f"{workload}-{what}-{precision}"
        if kit.remaining(deadline) < MIN_PART_S:
            cut.append(name)
            continue
        out = os.path.join(root, f"pytorch-{name}.json")
        cmd = [kit.python, script, "--workload", workload, "--batch", str(batches[workload]), "--variants", "eager",
               "--precision", precision, "--json", out] + mode + \
            sizes["torch_sizes"][workload] + sizes["torch_timing"] + sizes["torch_device"]
        rc, text = kit.run(cmd, f"profile/pytorch-{name}.txt", kit.remaining(deadline) - 2)
        result = read_json(out)
        if rc is None:  # stopped at the part's limit: cut by the budget, as the runs after it
            cut.append(name)
            continue
        if rc != 0 or not result:
            failed.append(f"{name} (exit {rc}{tail_hint(text, 1)})")
            continue
        if what == "layers":
            doc["pytorch"].setdefault(workload, {})[precision] = dict(
                by_kind=layer_kinds(result.get("layers", [])), layers=len(result.get("layers", [])))
        else:
            doc["pytorch"].setdefault(workload, {})["kernels"] = result.get("kernels", [])[:40]
        done.append(name)
    left_out = [f"out of time for {', '.join(cut)}"] if cut else []  # a cut is no failure
    if failed:
        return "FAIL", "; ".join(failed + left_out)
    if not done:
        return "SKIP", left_out[0]
    return "PASS", "; ".join([", ".join(done)] + left_out)


# -- part 4: ncu over the profiled step ---------------------------------------------------------------------
def ncu_refusal(runtime, ncu):
    """Why ncu cannot run here, or None: it needs the GPU counters that only the Firecracker runtime gives."""
    if not ncu:
        return "ncu not found"
    if runtime != "Firecracker":
        return f"ncu runs on the GPU machines' Firecracker runtime only; this one is {runtime or 'unknown'}"
    return None


def part_ncu(kit, doc, sizes, root, limit):
    runtime = kit.summary["environment"].get("host", {}).get("runtime", "")
    why = ncu_refusal(runtime, find_tool("ncu"))
    if why:
        return "SKIP", why
    if kit.args.rehearse:
        return "SKIP", "a rehearsal has no GPU to profile"
    deadline = kit.deadline_in(limit)
    summaries = {}
    for workload, batch, sets, steps in sizes["cases"]:
        if kit.remaining(deadline) < 15:
            break
        case = f"{workload}-b{batch}"
        folder = os.path.join(root, case, "ncu")
        os.makedirs(folder, exist_ok=True)
        launches = sizes["ncu_launches"][workload]
        cmd = [find_tool("ncu"), "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS), "--csv",
               "--print-units", "base", "--page", "raw", "--log-file", os.path.join(folder, "ncu.csv")] + \
            (["--launch-count", str(launches)] if launches else []) + \
            bench_command(kit, workload, batch, sets, NCU_STEPS, os.path.join(folder, "bench.json"), folder, False)
        rc, text = kit.run(cmd, f"profile/{case}/ncu.txt", kit.remaining(deadline) - 2)
        try:
            with open(os.path.join(folder, "ncu.csv"), errors="replace") as f:
                rows = ncu_rows(f.read())
        except OSError:
            rows = []
        if rows:
            summaries[case] = ncu_summary(rows, 20)
    doc["ncu"] = summaries
    if not summaries:
        return "FAIL", "ncu measured no kernel (see logs/profile/*/ncu.txt)"
    return "PASS", ", ".join(f"{c}: {s['kernels']} kernels, {s['total_ms']:.1f} ms" for c, s in summaries.items())


def ncu_rows(text):
    """ncu --csv --page raw: one row per kernel launch (name, metrics), the units' row dropped."""
    lines = [l for l in text.split("\n") if l.startswith('"')]  # ncu's own messages start with ==PROF==
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [r for r in rows if r.get("Kernel Name") and r.get("ID", "").strip().isdigit()]


def ncu_summary(rows, n):
    """The top `n` kernels by time (launches of one name together): ms, achieved TB/s of DRAM, SM
    throughput and tensor-pipe share (time-weighted)."""
    def number(row, key):
        try:
            return float(str(row.get(key, "")).replace(",", ""))
        except ValueError:
            return 0.0
    kernels = {}
    for r in rows:
        k = kernels.setdefault(r["Kernel Name"], dict(ns=0.0, bytes=0.0, sm=0.0, tensor=0.0, launches=0))
        ns = number(r, "gpu__time_duration.sum")
        k["ns"] += ns
        k["bytes"] += number(r, "dram__bytes_read.sum") + number(r, "dram__bytes_write.sum")
        k["sm"] += ns * number(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
        k["tensor"] += ns * number(r, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
        k["launches"] += 1
    total = sum(k["ns"] for k in kernels.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])[:n]
    return dict(kernels=len(kernels), total_ms=total / 1e6, top=[
        dict(name=name[:160], ms=k["ns"] / 1e6, share=k["ns"] / total if total else 0.0, launches=k["launches"],
             dram_tb_s=k["bytes"] / k["ns"] / 1e3 if k["ns"] else 0.0,
             sm_pct=k["sm"] / k["ns"] if k["ns"] else 0.0, tensor_pct=k["tensor"] / k["ns"] if k["ns"] else 0.0)
        for name, k in top])


# -- the decisions ------------------------------------------------------------------------------------------
def decide(probe, cases, pytorch):
    """Per decision: the winner, by how much (the runner-up's time over the winner's) and its error. From the
    probe's variants where it ran (a variant with an error above MAX_ERROR or none measured cannot win);
    else ours against PyTorch's layers of that kind, summed over the cases (error unknown)."""
    out = {}
    for decision, kinds in DECISIONS.items():
        variants = (probe or {}).get("decisions", {}).get(decision)
        if variants:
            out[decision] = from_probe(variants)
        elif kinds:
            out[decision] = from_layers(kinds, cases, pytorch)
        else:
            out[decision] = dict(source="none", winner=None, reason="only mlph-cuda-probe measures it")
    return out


def family(variant):
    """A variant's family: cuDNN's algorithms of a pass are one choice ("cudnn algo 6 bf16" -> "cudnn bf16")."""
    return re.sub(r" algo \d+", "", variant)


def from_probe(variants):
    """The probe's rows (case, variant, status, ms, error). Per case, each family's fastest variant within
    MAX_ERROR (a failed or unwired one, or one with no error measured, cannot win); the decision's winner is
    the family fastest in total over the cases every eligible family ran, by the runner-up's total over its
    own, with its worst error there. Each case's own winner is kept under "cases"."""
    best = {}  # case -> family -> (ms, error, variant)
    for v in variants:
        if v.get("status") != "ok" or not finite(v.get("ms")) or not finite(v.get("error")) or v["error"] > MAX_ERROR:
            continue
        entry = best.setdefault(v["case"], {})
        f = family(v["variant"])
        if f not in entry or v["ms"] < entry[f][0]:
            entry[f] = (v["ms"], v["error"], v["variant"])
    cases = {}
    for case, families in sorted(best.items()):
        ranked = sorted(families.items(), key=lambda kv: kv[1][0])
        (winner, (ms, error, variant)), runner_up = ranked[0], ranked[1] if len(ranked) > 1 else None
        cases[case] = dict(winner=variant, ms=ms, error=error, runner_up=runner_up[1][2] if runner_up else None,
                           by=runner_up[1][0] / ms if runner_up and ms > 0 else None)
    everywhere = [f for f in {f for families in best.values() for f in families}
                  if all(f in families for families in best.values())]
    totals = sorted((sum(best[c][f][0] for c in best), f) for f in everywhere)
    result = dict(source="probe", cases=cases, families={f: dict(ms=t, error=max(best[c][f][1] for c in best))
                                                         for t, f in totals})
    if not totals:
        return dict(result, winner=None, reason="no variant measured within the error bound on every case")
    (ms, winner), runner_up = totals[0], totals[1] if len(totals) > 1 else None
    return dict(result, winner=winner, ms=ms, error=result["families"][winner]["error"],
                runner_up=runner_up[1] if runner_up else None,
                by=runner_up[0] / ms if runner_up and ms > 0 else None)


def from_layers(kinds, cases, pytorch):
    """Ours (the cases' layer or node times of these kinds) against PyTorch's (fp16 where it ran, else
    bf16), summed over the workloads both have."""
    ours, theirs = 0.0, 0.0
    both = []
    for case, summary in cases.items():
        workload = case.split("-b")[0]
        peer = pytorch.get(workload, {})
        peer = peer.get("fp16") or peer.get("bf16") or peer.get("fp32")  # fp32: a rehearsal on the CPU
        if summary.get("status") != "PASS" or not peer:
            continue
        mine = sum(summary["by_kind"].get(k, 0.0) for k in kinds)
        other = sum(peer["by_kind"].get(k, 0.0) for k in kinds)
        if mine > 0 and other > 0:
            ours, theirs = ours + mine, theirs + other
            both.append(workload)
    if not both:
        return dict(source="layers", winner=None, reason="no case timed by both ours and PyTorch")
    winner, by = ("ours", theirs / ours) if ours <= theirs else ("pytorch", ours / theirs)
    return dict(source="layers", workloads=both, winner=winner, by=by, error=None,
                variants=dict(ours=dict(ms=ours), pytorch=dict(ms=theirs)))


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def decision_lines(decisions):
    lines = []
    for name, d in decisions.items():
        if not d.get("winner"):
            lines.append(f"{name}: no winner ({d.get('reason')})")
            continue
        by = f" by {d['by']:.2f}x" + (f" over {d['runner_up']}" if d.get("runner_up") else "") if d.get("by") else ""
        error = f", error {d['error']:.2g} against fp32" if finite(d.get("error")) else ", error unknown"
        lines.append(f"{name}: {d['winner']}{by}{error} ({d['source']})")
        for case, c in d.get("cases", {}).items():
            if c.get("by"):
                lines.append(f"  {case}: {c['winner']} by {c['by']:.2f}x over {c['runner_up']}, error {c['error']:.2g}")
    return lines


PART_RUNNERS = dict(nodes=part_nodes, probe=part_probe, pytorch=part_pytorch, ncu=part_ncu)
