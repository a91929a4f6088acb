"""The cuda backend's implementation choices (backends/cuda/README.md, Options; backends/cuda/settings.cpp),
each with its values, the default first. So that one GPU call compares them: the bench step times each
other value alone beside the defaults (bench_variants), and the conformance step runs each precision
again with every option off its default (conformance_variants)."""

CHOICES = [
    # our NHWC kernels (the reference's two passes for the statistics), cuDNN's persistent spatial batch
    # norm, or ours with the statistics in one pass over x
    ("batch_norm", ("own", "cudnn", "one_pass")),
    ("depthwise", ("own", "cudnn")),   # our NHWC depthwise kernel, or cuDNN's grouped convolution
    ("pointwise", ("gemm", "cudnn")),  # 1x1 stride-1 convs as cuBLASLt gemms, or cuDNN's convolutions
    ("pool_chain", ("own", "off")),    # CosmoFlow's bias + leaky ReLU + max-pool fused, or three nodes
    # CosmoFlow's conv1 in bf16/fp16: its 3 taps along w folded into its 4 channels (12, padded to 16,
    # a 3x3x1 conv), or its channels padded to 8
    ("small_channels", ("fold", "pad")),
]


# The workloads whose graphs have what each option changes: bench times its values there only (DeepCAM
# has no pool chain; CosmoFlow no batch norm, depthwise or 1x1 conv).
WORKLOADS = dict(batch_norm=("deepcam",), depthwise=("deepcam",), pointwise=("deepcam",), pool_chain=("cosmoflow",),
                 small_channels=("cosmoflow",))


def bench_variants(choices=CHOICES, workload=None):
    """(label, settings) of each value other than its option's default, alone (the others at theirs), of the
    options that matter to `workload` (None: all): ('batch_norm=cudnn', ['backend.batch_norm=cudnn']), ..."""
    return [(f"{name}={value}", [f"backend.{name}={value}"]) for name, values in choices
            if workload is None or workload in WORKLOADS.get(name, (workload,)) for value in values[1:]]


def conformance_variants(choices=CHOICES):
    """(label, settings) of as few runs as take every non-default value: the i-th run sets each option
    that has an i-th value to it ('batch_norm=cudnn depthwise=cudnn pointwise=cudnn' with two values each)."""
    runs = []
    for i in range(1, max((len(values) for _, values in choices), default=1)):
        picked = [(name, values[i]) for name, values in choices if i < len(values)]
        runs.append((" ".join(f"{n}={v}" for n, v in picked), [f"backend.{n}={v}" for n, v in picked]))
    return runs
