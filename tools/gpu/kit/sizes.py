"""What each step runs on the GPU, and in a rehearsal of the kit on a CPU backend (--rehearse)."""
# What the steps run: on the GPU, and in a rehearsal of the kit on a CPU backend (--rehearse) at sizes
# a 2-core machine runs in minutes. bench: (workload, batch, settings, warm-up steps, timed steps);
# torch: the PyTorch peers in the order they run (each a process: variant, precision, workload, batches,
# sizes, timing): eager first, then torch.compile, slow to compile, so that a time limit leaves the
# eager figures; the best PyTorch of issue 26 was eager fp16 at DeepCAM b8 and CosmoFlow b4, eager bf16
# at CosmoFlow b1, compile bf16 at CosmoFlow b4. options: the bench cases on which each cuda option value
# off its default runs (kit/options.py), with fewer steps: batch norm, depthwise and 1x1 convs are
# DeepCAM's (CosmoFlow has none of them), the pool chain CosmoFlow's. pipeline: the dataset's settings and (batch, timed steps) per run.
SIZES = dict(
    gpu=dict(
        conformance=[], precisions=["fp32", "bf16", "fp16"], mini_sets=[], torch_device=[],
        bench=[("cosmoflow", 1, ["data.edge=128"], 20, 100), ("cosmoflow", 4, ["data.edge=128"], 10, 50),
               ("deepcam", 8, ["data.height=768", "data.width=1152"], 5, 20)],
        options=[("deepcam", 8, ["data.height=768", "data.width=1152"], 2, 5), ("cosmoflow", 4, ["data.edge=128"], 5, 20)],
        torch=[(variant, precision, workload, batches, sizes, timing)
               for variant, precision, workload, batches in (
                   ("eager", "bf16", "cosmoflow", "1,4"), ("eager", "bf16", "deepcam", "8"),
                   ("eager", "fp16", "cosmoflow", "4"), ("eager", "fp16", "deepcam", "8"),
                   ("compile", "bf16", "cosmoflow", "4"), ("compile", "bf16", "deepcam", "8"),
                   ("compile", "bf16", "cosmoflow", "1"))
               for sizes, timing in [(["--edge", "128"], ["--steps", "20", "--repeats", "5", "--warmup", "5"])
                                     if workload == "cosmoflow" else
                                     (["--height", "768", "--width", "1152"],
                                      ["--steps", "10", "--repeats", "3", "--warmup", "3"])]],
        pipeline=dict(
            datasets=[("cosmoflow", "tfrecord_gzip", ["data.edge=128", "data.synthetic.train=64"], [(4, 48), (1, 96)]),
                      ("cosmoflow", "tfrecord", ["data.edge=128", "data.synthetic.train=64"], [(4, 48), (1, 96)]),
                      ("deepcam", None, ["data.height=768", "data.width=1152", "data.synthetic.train=32"], [(8, 8)])],
            warmup=4,
            about="read every epoch (data.readers auto): CosmoFlow 128^3, 64 files, tfrecord_gzip as shipped and "
                  "tfrecord as storage.inflate=1 stages it; DeepCAM 768x1152, 32 HDF5 files")),
    rehearsal=dict(
        conformance=["--ops", "conv,dense,cosmoflow", "--cases", "1", "--model-steps", "1"], precisions=["fp32"],
        mini_sets=["train.epochs=1", "data.synthetic.train=16", "data.synthetic.valid=8"],
        torch_device=["--device", "cpu"],
        bench=[("cosmoflow", 1, ["data.edge=32"], 1, 2), ("deepcam", 1, ["data.height=32", "data.width=48"], 0, 1)],
        options=[("deepcam", 1, ["data.height=32", "data.width=48"], 0, 1), ("cosmoflow", 1, ["data.edge=32"], 0, 1)],
        torch=[("eager", "fp32", "cosmoflow", "1", ["--edge", "32"], ["--steps", "1", "--repeats", "1", "--warmup", "0"])],
        pipeline=dict(
            datasets=[("cosmoflow", "tfrecord_gzip", ["data.edge=32", "data.synthetic.train=16"], [(4, 6)]),
                      ("cosmoflow", "tfrecord", ["data.edge=32", "data.synthetic.train=16"], [(4, 6)]),
                      ("deepcam", None, ["data.height=32", "data.width=48", "data.synthetic.train=8"], [(2, 3)])],
            warmup=1, about="CosmoFlow 32^3 tfrecord_gzip and tfrecord, DeepCAM 32x48 (rehearsal)")),
)

# The profile step (steps/profile.py): the profiled cases (workload, batch, settings, timed steps), whether
# ours is cut into layers by mlperf-bench --layers (on a CPU backend, which has no backend.profile; on the
# GPU the backend's nodes.json has every node's time, and DeepCAM's 70-odd layers would take minutes to
# compile one by one), the PyTorch layers' sizes and device, and ncu's launch limit per case.
PROFILE_SIZES = dict(
    gpu=dict(cases=[("cosmoflow", 4, ["data.edge=128"], 6), ("deepcam", 8, ["data.height=768", "data.width=1152"], 4)],
             layers=False, torch_sizes=dict(cosmoflow=["--edge", "128"], deepcam=["--height", "768", "--width", "1152"]),
             torch_device=[], torch_timing=["--steps", "5", "--warmup", "2"], torch_precisions=["fp16", "bf16"],
             ncu_launches=dict(cosmoflow=0, deepcam=400)),
    rehearsal=dict(cases=[("cosmoflow", 1, ["data.edge=32"], 1), ("deepcam", 1, ["data.height=32", "data.width=48"], 1)],
                   layers=True, torch_sizes=dict(cosmoflow=["--edge", "32"], deepcam=["--height", "32", "--width", "48"]),
                   torch_device=["--device", "cpu"], torch_timing=["--steps", "1", "--warmup", "0"],
                   torch_precisions=["fp32"], ncu_launches=dict(cosmoflow=0, deepcam=50)),
)
