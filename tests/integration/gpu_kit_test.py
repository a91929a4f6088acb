#!/usr/bin/python3
"""The GPU kit (tools/gpu/kit) without a GPU: its limits' parsing, its reading of the official checker's
output on a DeepCAM mini's log, the profile step's summaries (decisions, ncu's table, layer kinds) as pure functions, the cuda options' values that bench and conformance run, and
with BUILD_DIR the profile step rehearsed on the reference backend at small sizes, cut by its budget.

  gpu_kit_test.py [BUILD_DIR]      (unittest's arguments after it)
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
from kit import cli, common, options, runner  # noqa: E402
from kit.steps import bench, conformance, profile  # noqa: E402

BUILD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 and os.path.isdir(sys.argv[1]) else None


class Limits(unittest.TestCase):
    def test_nan_inf_zero_and_negative_are_refused(self):
        for text in ("nan", "NaN", "inf", "-inf", "0", "-1", "abc"):
            with self.assertRaises(argparse.ArgumentTypeError, msg=text):
                cli.positive_seconds(text)

    def test_finite_positive_limits_pass(self):
        self.assertEqual(cli.positive_seconds("2.5"), 2.5)
        self.assertEqual(cli.positive_seconds("300"), 300.0)

    def test_the_check_exits_2_naming_the_option(self):
        run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "check.py"), "--budget", "nan"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--budget: nan must be a finite number above 0", run.stderr)


SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CHECKER = os.path.join(SHARED, "tools", "mllog-check")
DEEPCAM_LOG = os.path.join(SHARED, "fixtures", "mllog", "nvidia_v3.0_deepcam_strong_result_0.txt")


def checked(text):
    """The official checker's output on a log of `text` (../shared's checker)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result_0.txt")
        with open(path, "w") as f:
            f.write(text)
        run = subprocess.run([CHECKER, path], capture_output=True, text=True, cwd=tmp,
                             env=dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", "")))
        return run.returncode, run.stdout + run.stderr


class MiniDatasetSizes(unittest.TestCase):
    """A DeepCAM mini's log fails the ruleset's full-dataset sizes: the kit accepts that, and only that,
    from the official checker's own output on a real submitted log with its sizes (and more) changed."""

    def setUp(self):
        if not os.path.exists(CHECKER) or not os.path.exists(DEEPCAM_LOG):
            self.skipTest("../shared (the official checker, the submitted DeepCAM log) is not beside this checkout")
        with open(DEEPCAM_LOG) as f:
            self.log = f.read()

    def mini(self, text):
        return text.replace('"key": "train_samples", "value": 121266', '"key": "train_samples", "value": 128') \
                   .replace('"key": "eval_samples", "value": 15158', '"key": "eval_samples", "value": 32')

    def test_the_submitted_log_passes_as_it_is(self):
        rc, text = checked(self.log)
        self.assertEqual(rc, 0, text)
        self.assertEqual(common.checker_messages(text), [])
        self.assertIsNone(common.dataset_size_failures(text))

    def test_a_minis_sizes_are_the_only_failures_named_with_their_values(self):
        rc, text = checked(self.mini(self.log))
        self.assertEqual(rc, 1, text)
        self.assertEqual(common.dataset_size_failures(text),
                         ["train_samples 128 (the ruleset's 121266)", "eval_samples 32 (the ruleset's 15158)"])

    def test_any_other_failure_beside_them_is_not_accepted(self):
        clipped = re.sub(r'("key": "opt_max_grad_norm", "value": )[0-9.]+', r"\g<1>2.0", self.mini(self.log))
        without_seed = "\n".join(l for l in self.mini(self.log).split("\n") if '"key": "seed"' not in l)
        for name, text in (("max_grad_norm 2", clipped), ("no seed", without_seed)):
            rc, out = checked(text)
            self.assertEqual(rc, 1, name)
            self.assertGreater(len(common.checker_messages(out)), 2, f"{name}: {out}")
            self.assertIsNone(common.dataset_size_failures(out), name)


def row(case, variant, ms, error, status="ok"):
    return dict(case=case, variant=variant, ms=ms, error=error, status=status)


class Decisions(unittest.TestCase):
    def test_the_fastest_within_the_error_bound_wins_by_the_runner_ups_ratio(self):
        d = profile.from_probe([row("a", "spatial", 2.0, 1e-3), row("b", "spatial", 2.0, 1e-3),
                                row("a", "ours", 1.0, 5e-3), row("b", "ours", 1.5, 4e-3),
                                row("a", "sloppy", 0.1, 0.5), row("b", "sloppy", 0.1, 0.5)])
        self.assertEqual(d["winner"], "ours")
        self.assertAlmostEqual(d["ms"], 2.5)
        self.assertAlmostEqual(d["by"], 4.0 / 2.5)
        self.assertEqual(d["runner_up"], "spatial")
        self.assertAlmostEqual(d["error"], 5e-3)  # the worst of its cases

    def test_a_variant_missing_a_case_or_failing_or_not_wired_cannot_win(self):
        d = profile.from_probe([row("a", "fast", 0.5, 0.0), row("a", "slow", 3.0, 0.0), row("b", "slow", 3.0, 0.0),
                                row("a", "nan", 0.1, math.nan), row("b", "nan", 0.1, math.nan),
                                row("a", "todo", None, None, "not wired"), row("b", "todo", None, None, "not wired")])
        self.assertEqual(d["winner"], "slow")
        self.assertIsNone(d["by"])

    def test_cudnns_algorithms_are_one_family_and_each_case_keeps_its_own_winner(self):
        d = profile.from_probe([row("fwd", "cudnn algo 1 bf16", 3.0, 1e-3), row("fwd", "cudnn algo 6 bf16", 2.0, 1e-3),
                                row("bwd", "cudnn algo 0 bf16", 4.0, 1e-3), row("fwd", "ours", 2.5, 1e-3),
                                row("bwd", "ours", 1.0, 2e-3), row("fwd", "cublasLt first split-K on", 1.5, 1e-3)])
        self.assertEqual(d["winner"], "ours")  # 3.5 ms against cudnn's 2 + 4; cuBLASLt ran forward only
        self.assertAlmostEqual(d["by"], 6.0 / 3.5)
        self.assertEqual(d["runner_up"], "cudnn bf16")
        self.assertEqual(d["cases"]["fwd"]["winner"], "cublasLt first split-K on")
        self.assertAlmostEqual(d["cases"]["fwd"]["by"], 2.0 / 1.5)  # over cudnn's algo 6
        self.assertEqual(d["cases"]["fwd"]["runner_up"], "cudnn algo 6 bf16")
        self.assertIn("  fwd: cublasLt first split-K on by 1.33x over cudnn algo 6 bf16, error 0.001",
                      profile.decision_lines({"1x1": d}))

    def test_without_the_probe_ours_and_pytorch_layers_of_a_kind_decide(self):
        cases = {"cosmoflow-b1": dict(status="PASS", by_kind={"batch_norm": 3.0, "conv": 10.0}),
                 "deepcam-b1": dict(status="PASS", by_kind={"batch_norm": 1.0, "depthwise": 2.0})}
        pytorch = {"cosmoflow": {"fp16": dict(by_kind={"batch_norm": 1.0})},
                   "deepcam": {"bf16": dict(by_kind={"batch_norm": 1.0, "depthwise": 4.0})}}
        d = profile.decide(None, cases, pytorch)
        self.assertEqual(d["batch_norm"]["winner"], "pytorch")
        self.assertAlmostEqual(d["batch_norm"]["by"], 4.0 / 2.0)
        self.assertEqual(d["depthwise"]["winner"], "ours")
        self.assertAlmostEqual(d["depthwise"]["by"], 2.0)
        self.assertIsNone(d["1x1"]["winner"])
        self.assertIsNone(d["padding"]["winner"])
        self.assertIn("probe", d["padding"]["reason"])
        lines = profile.decision_lines(d)
        self.assertIn("batch_norm: pytorch by 2.00x, error unknown (layers)", lines)

    def test_the_probe_wins_over_the_layers(self):
        d = profile.decide({"decisions": {"padding": [row("conv1", "pad8", 1.0, 0.0), row("conv1", "pad4", 1.5, 0.0)]}},
                           {}, {})
        self.assertEqual(d["padding"]["winner"], "pad8")
        self.assertEqual(d["padding"]["source"], "probe")


NCU_CSV = '''==PROF== Connected to process 1
"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
"","","nsecond","byte","byte","%","%"
"0","bn_fwd","1,000","2,000,000","1,000,000","50","0"
"1","gemm","3000","1000","1000","90","80"
"2","bn_fwd","1000","2000000","1000000","30","0"
'''


class Ncu(unittest.TestCase):
    def test_the_top_kernels_by_time_with_bandwidth_and_tensor_share(self):
        rows = profile.ncu_rows(NCU_CSV)
        self.assertEqual(len(rows), 3)  # the units' row and ncu's messages dropped
        s = profile.ncu_summary(rows, 20)
        self.assertEqual(s["kernels"], 2)
        self.assertAlmostEqual(s["total_ms"], 5e-3)
        gemm, bn = s["top"]
        self.assertEqual((gemm["name"], bn["name"]), ("gemm", "bn_fwd"))
        self.assertEqual(bn["launches"], 2)
        self.assertAlmostEqual(bn["dram_tb_s"], 6e6 / 2000 / 1e3)  # 6 MB in 2 us: 3 TB/s
        self.assertAlmostEqual(bn["sm_pct"], 40.0)  # time-weighted
        self.assertAlmostEqual(gemm["tensor_pct"], 80.0)
        self.assertEqual(len(profile.ncu_summary(rows, 1)["top"]), 1)

    def test_ncu_is_refused_off_firecracker_saying_so(self):
        self.assertIn("Firecracker runtime only; this one is gVisor", profile.ncu_refusal("gVisor", "/usr/bin/ncu"))
        self.assertEqual(profile.ncu_refusal("Firecracker", None), "ncu not found")
        self.assertIsNone(profile.ncu_refusal("Firecracker", "/usr/bin/ncu"))


def call(step, node, kind, name, ms, pass_="forward"):
    return dict(node=node, kind=kind, **{"pass": pass_}, call=name, step=step, ms=ms, bytes=None, flops=None, share=None)


class NodesJson(unittest.TestCase):
    """The backend's nodes.json (profile_report.cpp's layout) read by the profile step."""
    NODES = dict(eager_step_ms=9.0, graph_step_ms=5.0, calls=[
        call(1, "conv1", "conv", "cudnnConvolutionForward", 50.0), call(1, "conv1", "conv", "node", 60.0),
        call(2, "conv1", "conv", "cudnnConvolutionForward", 3.0), call(2, "conv1", "conv", "convert", 0.5),
        call(2, "conv1", "conv", "node", 3.5), call(2, "bn1", "batch_norm", "cudnnBatchNormalizationBackward", 4.0,
                                                    "backward"),
        call(2, "bn1", "batch_norm", "node", 4.5, "backward"), call(2, "bn1", "batch_norm", "node", 1.0)])

    def test_kinds_sum_the_whole_nodes_of_the_last_step(self):
        self.assertEqual(profile.node_kinds(self.NODES), {"batch_norm": 5.5, "conv": 3.5})

    def test_the_top_calls_are_the_last_steps_library_calls(self):
        top = profile.top_calls(self.NODES, 2)
        self.assertEqual([(c["node"], c["call"]) for c in top],
                         [("bn1", "cudnnBatchNormalizationBackward"), ("conv1", "cudnnConvolutionForward")])

    def test_a_case_takes_its_kinds_from_the_nodes_where_there_are_some(self):
        bench = dict(model=dict(train_s=0.01), layers=[])
        find = dict(rows=[dict(status="success", allowed=True, chosen=True), dict(status="success", allowed=False),
                          dict(status="failed", allowed=False)])
        summary = profile.case_summary(bench, self.NODES, find)
        self.assertEqual(summary["source"], "nodes")
        self.assertEqual(summary["step_ms"], 10.0)
        self.assertEqual(summary["graph_step_ms"], 5.0)
        self.assertEqual(summary["find"], dict(rows=3, chosen=1, refused_by_rule=1))


class LayerKinds(unittest.TestCase):
    def test_train_time_per_kind_times_the_count_of_identical_layers(self):
        kinds = profile.layer_kinds([dict(kind="batch_norm", train_s=1e-3, count=3), dict(kind="conv", train_s=2e-3),
                                     dict(kind="batch_norm", train_s=1e-3)])
        self.assertEqual(list(kinds), ["batch_norm", "conv"])
        self.assertAlmostEqual(kinds["batch_norm"], 4.0)


class RecordingKit(runner.Kit):
    """The kit's runner without its folders: commands recorded, mlperf-bench's JSON written with `train_s`
    per --set it was given (a variant's own rate), nothing printed."""
    def __init__(self, rehearse=None, train_s=None):
        self.args = argparse.Namespace(rehearse=rehearse)
        self.backend = rehearse or "cuda"
        self.bundle, self.logs = "/bundle", tempfile.mkdtemp(prefix="mlph-kit-logs-")
        self.sizes = dict(options=[("deepcam", 8, ["data.height=768"], 2, 5), ("cosmoflow", 4, ["data.edge=32"], 2, 5)])
        self.train_s = train_s or {}
        self.commands = []

    def run(self, cmd, log, timeout, env=None, cwd=None, quiet=False):
        self.commands.append(cmd)
        train_s = next((t for s, t in self.train_s.items() if s in cmd), 1.0)
        os.makedirs(os.path.join(self.logs, os.path.dirname(log)), exist_ok=True)  # as Kit.run makes it
        with open(cmd[cmd.index("--json") + 1], "w") as f:
            json.dump(dict(model=dict(train_s=train_s)), f)
        return 0, ""

    def say(self, text):
        pass


def sets_of(cmd):
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"]


class OptionValues(unittest.TestCase):
    """Every value of every cuda implementation choice runs in one GPU call: bench times each non-default
    value alone, conformance runs each precision again with them."""
    def test_the_choices_are_the_backends_own_and_the_default_comes_first(self):
        with open(os.path.join(ROOT, "backends", "cuda", "settings.cpp")) as f:
            settings = f.read()
        with open(os.path.join(ROOT, "backends", "cuda", "README.md")) as f:
            readme = f.read()
        found = {name: re.findall(r'"(\w+)"', listed)
                 for name, listed in re.findall(r'read_choice\(options, "(\w+)", \{([^}]*)\}\)', settings)}
        self.assertEqual({name: set(values) for name, values in found.items()},
                         {name: set(values) for name, values in options.CHOICES})
        for name, values in options.CHOICES:
            self.assertEqual(found[name][0], values[0], name)  # the backend's default is the kit's
            default = re.search(rf"^\| `{name}` \| `(\w+)` \|", readme, re.M)
            self.assertEqual(default.group(1) if default else None, values[0], name)

    def test_bench_runs_each_value_off_its_default_alone(self):
        variants = options.bench_variants()
        self.assertEqual(sorted(s for _, settings in variants for s in settings),
                         sorted(f"backend.{n}={v}" for n, values in options.CHOICES for v in values[1:]))
        self.assertTrue(all(len(settings) == 1 for _, settings in variants))

    def test_conformance_runs_every_value_in_every_precision(self):
        runs = conformance.runs(["fp32", "bf16", "fp16"])
        for precision in ("fp32", "bf16", "fp16"):
            mine = [r["settings"] for r in runs if r["precision"] == precision]
            if precision == "fp16":  # every fp16 run starts from its loss scale
                self.assertTrue(all("backend.loss_scale=1024" in s for s in mine))
            for name, values in options.CHOICES:
                for value in values:
                    runs_with = [s for s in mine if (f"backend.{name}={value}" in s if value != values[0] else
                                                     not any(x.startswith(f"backend.{name}=") for x in s))]
                    self.assertTrue(runs_with, f"{precision} {name}={value}")
        self.assertEqual(len({r["tag"] for r in runs}), len(runs))  # a log each
        self.assertEqual([r["name"] for r in conformance.runs(["fp32"])],
                         ["fp32", "fp32 batch_norm=cudnn depthwise=cudnn pointwise=cudnn pool_chain=off small_channels=pad",
                          "fp32 batch_norm=one_pass"])

    def test_a_choice_of_three_values_takes_two_conformance_runs(self):
        runs = options.conformance_variants([("a", ("x", "y", "z")), ("b", ("p", "q"))])
        self.assertEqual(runs, [("a=y b=q", ["backend.a=y", "backend.b=q"]), ("a=z", ["backend.a=z"])])

    def test_each_variant_is_timed_beside_the_defaults_and_a_rehearsal_drops_the_options(self):
        kit = RecordingKit(train_s={"backend.depthwise=cudnn": 4.0})
        rows = bench.option_runs(kit, dict(parts=[]), runner.time.monotonic() + 600,
                                 {("deepcam", 8): dict(model=dict(train_s=2.0))}, None)
        self.assertEqual([r["option"] for r in rows], [label for label, _ in options.bench_variants()])
        self.assertEqual([(r["workload"], r["option"]) for r in rows],  # each where its ops are
                         [("deepcam", "batch_norm=cudnn"), ("deepcam", "batch_norm=one_pass"), ("deepcam", "depthwise=cudnn"),
                          ("deepcam", "pointwise=cudnn"), ("cosmoflow", "pool_chain=off"), ("cosmoflow", "small_channels=pad")])
        for cmd, (_, settings), row in zip(kit.commands, options.bench_variants(), rows):
            size = ["train.batch_size=8"] if row["workload"] == "deepcam" else ["train.batch_size=4"]
            case = ["data.height=768"] if row["workload"] == "deepcam" else ["data.edge=32"]
            self.assertEqual(sets_of(cmd), size + ["backend.precision=bf16"] + settings + case)
        depthwise = rows[[r["option"] for r in rows].index("depthwise=cudnn")]
        self.assertEqual((depthwise["samples_per_s"], depthwise["default_samples_per_s"]), (2.0, 4.0))
        self.assertEqual(depthwise["vs_default"], 0.5)
        self.assertEqual(bench.option_line(depthwise),
                         "deepcam b8 backend.depthwise=cudnn: 2.0 samples/s (0.50x the defaults' 4.0)")
        rehearsal = RecordingKit(rehearse="reference")
        bench.option_runs(rehearsal, dict(parts=[]), runner.time.monotonic() + 600, {}, None)
        self.assertEqual([sets_of(c) for c in rehearsal.commands],
                         [["train.batch_size=8", "data.height=768"]] * len(options.bench_variants(workload="deepcam")) +
                         [["train.batch_size=4", "data.edge=32"]] * len(options.bench_variants(workload="cosmoflow")))


def fake_bundle(folder):
    """A bundle laid out from the build tree by links (what bundle.sh --from-build copies)."""
    os.makedirs(os.path.join(folder, "lib"))
    os.symlink(os.path.join(BUILD, "bin"), os.path.join(folder, "bin"))
    os.symlink(os.path.join(BUILD, "lib", "mlperf-hpc-1"), os.path.join(folder, "lib", "mlperf-hpc-1"))
    os.symlink(os.path.join(ROOT, "configs"), os.path.join(folder, "configs"))
    plugins = sorted(f[len("libmlph-"):-3] for f in os.listdir(os.path.join(BUILD, "lib", "mlperf-hpc-1")))
    with open(os.path.join(folder, "bundle.json"), "w") as f:
        json.dump(dict(commit="test", plugins=plugins, tests=[]), f)


def rehearse_steps(steps, budget):
    """check.py --rehearse reference --only STEPS on a fake bundle: (the run, summary.json, the temp folder)."""
    tmp = tempfile.mkdtemp(prefix="mlph-kit-")
    fake_bundle(os.path.join(tmp, "bundle"))
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "check.py"), "--rehearse", "reference",
                          "--only", steps, "--budget", str(budget), "--bundle", os.path.join(tmp, "bundle"),
                          "--out", os.path.join(tmp, "out"), "--work", os.path.join(tmp, "work")],
                         capture_output=True, text=True, timeout=budget + 60)
    with open(os.path.join(tmp, "out", "summary.json")) as f:
        return run, json.load(f), tmp


@unittest.skipUnless(BUILD, "no build tree given")
class MiniRehearsal(unittest.TestCase):
    def test_both_minis_train_in_each_precision_and_log(self):
        run, summary, _ = rehearse_steps("cosmoflow,deepcam", 120)
        for step in ("cosmoflow", "deepcam"):
            record = summary["steps"][step]
            self.assertEqual(record["status"], "PASS", run.stdout)
            self.assertEqual([p["name"] for p in record["parts"]], ["fp32", "bf16"])
            for part in record["parts"]:  # a rehearsal trains one epoch, short of the target
                self.assertEqual((part["run_stop"], part["epochs"]), ("aborted", 1), part)


@unittest.skipUnless(BUILD, "no build tree given")
class ProfileRehearsal(unittest.TestCase):
    def rehearse(self, budget):
        run, summary, tmp = rehearse_steps("profile", budget)
        path = os.path.join(tmp, "out", "profile.json")
        doc = json.load(open(path)) if os.path.exists(path) else None
        return run, summary, doc, tmp

    def test_the_cases_are_profiled_layer_by_layer_and_the_last_parts_cut_by_the_budget(self):
        run, summary, doc, tmp = self.rehearse(45)
        self.assertEqual(doc["parts"]["nodes"]["status"], "PASS", run.stdout)
        for case in ("cosmoflow-b1", "deepcam-b1"):
            kinds = doc["cases"][case]["by_kind"]
            self.assertGreater(doc["cases"][case]["step_ms"], 0)
            self.assertGreater(kinds.get("activation", 0), 0, kinds)  # rows of their own, not the conv's
        self.assertGreater(doc["cases"]["deepcam-b1"]["by_kind"].get("batch_norm", 0), 0)
        self.assertEqual(doc["parts"]["probe"]["status"], "SKIP")
        # The 45 s go to the nodes and PyTorch (where this machine has it): ncu is cut, or not here.
        self.assertEqual(doc["parts"]["ncu"]["status"], "SKIP")
        self.assertRegex(doc["parts"]["ncu"]["reason"], "out of time|ncu not found")
        self.assertEqual(set(doc["decisions"]), {"batch_norm", "depthwise", "1x1", "padding"})
        self.assertTrue(os.path.exists(os.path.join(tmp, "work", "logs", "profile", "profile.json")))
        self.assertIn("padding: no winner", run.stdout)
        self.assertEqual(summary["steps"]["profile"]["status"], "PASS")

    def test_a_budget_spent_before_the_parts_skips_them_saying_so(self):
        run, summary, doc, _ = self.rehearse(9)
        step = summary["steps"]["profile"]
        if doc is None:  # the environment step took the budget: the step itself did not start
            self.assertIn("out of time", step["reason"])
            return
        late = [p for p in ("probe", "pytorch", "ncu") if doc["parts"][p]["status"] == "SKIP" and
                "out of time" in doc["parts"][p]["reason"]]
        self.assertEqual(late, ["probe", "pytorch", "ncu"], doc["parts"])


if __name__ == "__main__":
    unittest.main()
