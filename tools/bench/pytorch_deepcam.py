#!/usr/bin/python3
"""The PyTorch peer of `mlperf-bench` for DeepCAM: the same model (DeepLabv3+ with the modified aligned
Xception of the v1.0+ reference, REFERENCE.md §2.1 and §2.10), float32, the same batch, size and thread
count, timed the same way (whole training step, evaluation forward with IoU, and each layer on its own
with an mse loss, named as `mlperf-bench --layers` names them), written as the same JSON so
tools/bench/compare.py can print them side by side.

The reference trains with apex FusedLAMB, which is not part of PyTorch; this uses torch.optim.AdamW
(same moments; LAMB adds a global norm and a per-tensor trust ratio, negligible next to the convs).

  /usr/bin/python3 tools/bench/pytorch_deepcam.py --height 96 --width 144 --batch 2 --threads 2 --layers --json torch.json
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_timing import add_bf16_argument, mixed_precision, report, timed, to_format

PARAMETERS = 56_454_720  # REFERENCE.md §2.10
CLASS_WEIGHTS = [1.00172996521, 2.61461114883, 1.71641969681]  # f^-0.125 as float32 (§2.10)


class GBN(nn.Module):
    """The reference's batch-norm wrapper: its parameters are named `….bn.weight`, `….bn.running_mean`, ..."""

    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(x)


class SeparableConv2dSame(nn.Module):
    """SeparableConv2d_same: depthwise 3x3 (padding = dilation), then pointwise 1x1; no BN or ReLU inside."""

    def __init__(self, cin, cout, stride=1, dilation=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cin, 3, stride, dilation, dilation, groups=cin, bias=False)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.pointwise(self.conv1(x))


class Block(nn.Module):
    """Xception block: rep = [Sep, BN, ReLU] x reps without the last ReLU (nn.Sequential indices count the
    ReLUs, as the reference's state_dict keys do), then a stride-2 (or is_last) separable conv without BN;
    plus the skip (1x1 conv + BN when the shape changes, else identity)."""

    def __init__(self, cin, cout, reps, stride=1, dilation=1, end_with_relu=True, grow_first=True, is_last=False):
        super().__init__()
        if cout != cin or stride != 1:
            self.skip = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.skipbn = GBN(cout)
        else:
            self.skip = None
        self.relu = nn.ReLU(inplace=True)
        rep, c = [], cin
        for i in range(reps):
            grows = i == 0 if grow_first else i == reps - 1
            rep += [SeparableConv2dSame(c, cout if grows else c, 1, dilation), GBN(cout if grows else c), self.relu]
            c = cout if grows else c
        rep = rep[:-1]
        if stride != 1:
            rep.append(SeparableConv2dSame(cout, cout, 2))
        elif is_last:
            rep.append(SeparableConv2dSame(cout, cout, 1))
        self.rep = nn.Sequential(*rep)
        self.end_with_relu = end_with_relu

    def forward(self, inp):
        skip = self.skipbn(self.skip(inp)) if self.skip is not None else inp  # first, as in the graph
        x = self.rep(inp) + skip
        return self.relu(x) if self.end_with_relu else x


class Xception(nn.Module):
    """The modified aligned Xception at output stride 16 (16 input channels, exit flow dilation 2)."""

    def __init__(self, channels=16):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(channels, 32, 3, stride=2, padding=1, bias=False)
        self.bn1 = GBN(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = GBN(64)
        self.block1 = Block(64, 128, 2, 2, end_with_relu=False)
        self.block2 = Block(128, 256, 2, 2)
        self.block3 = Block(256, 728, 2, 2, is_last=True)
        for i in range(4, 20):
            setattr(self, f"block{i}", Block(728, 728, 3))
        self.block20 = Block(728, 1024, 2, end_with_relu=False, grow_first=False, is_last=True)
        widths = [1024, 1536, 1536, 2048]
        for i in range(3):
            setattr(self, f"conv{i + 3}", SeparableConv2dSame(widths[i], widths[i + 1], dilation=2))
            setattr(self, f"bn{i + 3}", GBN(widths[i + 1]))

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        # The reference's in-place ReLU after block1 also rewrites the low-level features: they are post-ReLU.
        low_level = x = self.relu(self.block1(x))
        for i in range(2, 21):
            x = getattr(self, f"block{i}")(x)
        for i in range(3, 6):
            x = self.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))
        return x, low_level


class ASPPModule(nn.Module):
    def __init__(self, cin, cout, rate):
        super().__init__()
        k, pad = (1, 0) if rate == 1 else (3, rate)
        self.atrous_convolution = nn.Conv2d(cin, cout, k, padding=pad, dilation=rate, bias=False)
        self.bn = GBN(cout)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.atrous_convolution(x)))


class TrainableAffine(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weights = nn.Parameter(torch.ones(channels, 1, 1))
        self.bias = nn.Parameter(torch.zeros(channels, 1, 1))

    def forward(self, x):
        return self.weights * x + self.bias


class GlobalAveragePool(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.global_average_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False),
                                                 TrainableAffine(cout), nn.ReLU())

    def forward(self, x):
        return self.global_average_pool(x)


class Bottleneck(nn.Module):
    """ASPP with rates 1, 6, 12, 18 and the global-pool branch (1x1 conv, trainable per-channel affine,
    ReLU, broadcast to H/16 x W/16: the reference tiles to a hard-coded 48x72, equal at full size),
    concatenated and projected to 256 channels."""

    def __init__(self, cin=2048, cout=256):
        super().__init__()
        for i, rate in enumerate((1, 6, 12, 18)):
            setattr(self, f"aspp{i + 1}", ASPPModule(cin, cout, rate))
        self.global_avg_pool = GlobalAveragePool(cin, cout)
        self.conv = nn.Conv2d(5 * cout, cout, 1, bias=False)
        self.bn = GBN(cout)
        self.relu = nn.ReLU()

    def forward(self, x):
        branches = [getattr(self, f"aspp{i}")(x) for i in range(1, 5)]
        branches.append(self.global_avg_pool(x).expand(-1, -1, x.shape[2], x.shape[3]))
        return self.relu(self.bn(self.conv(torch.cat(branches, 1))))


def transposed(cin, cout):
    """ConvTranspose2d(k3, s2, p1, output_padding 1, no bias): doubles H and W."""
    return nn.ConvTranspose2d(cin, cout, 3, 2, 1, output_padding=1, bias=False)


class DeconvUpsampler(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.deconv1 = nn.Sequential(transposed(256, 256), GBN(256), nn.ReLU(), transposed(256, 256), GBN(256), nn.ReLU())
        self.conv1 = nn.Sequential(nn.Conv2d(304, 256, 3, padding=1, bias=False), GBN(256), nn.ReLU(),
                                   nn.Conv2d(256, 256, 3, padding=1, bias=False), GBN(256), nn.ReLU(),
                                   nn.Conv2d(256, 256, 1))
        self.deconv2 = nn.Sequential(transposed(256, 256), GBN(256), nn.ReLU())
        self.last_deconv = nn.Sequential(transposed(256, classes))

    def forward(self, x, low_level):
        return self.last_deconv(self.deconv2(self.conv1(torch.cat([self.deconv1(x), low_level], 1))))


class DeepLabV3Plus(nn.Module):
    """The reference's DeepLabv3_plus (deeplab_xception.py): the same modules under the same names, so its
    state_dict keys are the reference's (REFERENCE.md §2.10), which is what `mlperf-run --export-weights`
    writes; the input is normalized already (the reference normalizes in its data loader)."""

    def __init__(self, channels=16, classes=3):
        super().__init__()
        self.xception_features = Xception(channels)
        self.bottleneck = Bottleneck()
        self.conv2 = nn.Conv2d(128, 48, 1, bias=False)
        self.bn2 = GBN(48)
        self.relu = nn.ReLU()
        self.upsample = DeconvUpsampler(classes)
        # The reference overwrites the encoder and ASPP convs with kaiming_normal_; the rest keep the defaults.
        aspp = [getattr(self.bottleneck, f"aspp{i}") for i in range(1, 5)]
        for m in list(self.xception_features.modules()) + [a.atrous_convolution for a in aspp]:
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x):
        features, low_level = self.xception_features(x)
        x = self.bottleneck(features)
        return self.upsample(x, self.relu(self.bn2(self.conv2(low_level))))

    def units(self):
        """Every layer as `mlperf-bench --layers` cuts the graph, in its order: (node name in
        workloads/deepcam/model.cpp, the modules of the layer: a conv with the BN and ReLU after it, or a pool)."""
        xf, bottleneck, up = self.xception_features, self.bottleneck, self.upsample
        out = [("xception.conv1", [xf.conv1, xf.bn1, xf.relu]), ("xception.conv2", [xf.conv2, xf.bn2, xf.relu])]
        for b in range(1, 21):
            block, name = getattr(xf, f"block{b}"), f"xception.block{b}"
            if block.skip is not None:
                out.append((name + ".skip", [block.skip, block.skipbn]))
            rep = list(block.rep)
            for i in range(0, len(rep) - 1, 3):  # Sep, BN[, ReLU] per repetition
                out.append((f"{name}.rep{i // 3}.conv1", [rep[i].conv1]))
                out.append((f"{name}.rep{i // 3}.pointwise", [rep[i].pointwise] + rep[i + 1:i + 3]))
            if isinstance(rep[-1], SeparableConv2dSame):
                tail = name + (".down" if rep[-1].conv1.stride[0] == 2 else ".last")
                out += [(tail + ".conv1", [rep[-1].conv1]), (tail + ".pointwise", [rep[-1].pointwise])]
        for i in range(3, 6):
            sep = getattr(xf, f"conv{i}")
            out += [(f"xception.conv{i}.conv1", [sep.conv1]),
                    (f"xception.conv{i}.pointwise", [sep.pointwise, getattr(xf, f"bn{i}"), xf.relu])]
        for i in range(1, 5):
            a = getattr(bottleneck, f"aspp{i}")
            out.append((f"aspp{i}", [a.atrous_convolution, a.bn, a.relu]))
        pool = bottleneck.global_avg_pool.global_average_pool
        out += [("global_pool", [pool[0]]), ("global_pool.conv", [pool[1]]),
                ("aspp.project", [bottleneck.conv, bottleneck.bn, bottleneck.relu]),
                ("decoder.low_level", [self.conv2, self.bn2, self.relu]),
                ("decoder.deconv1a", list(up.deconv1[0:3])), ("decoder.deconv1b", list(up.deconv1[3:6])),
                ("decoder.conv1", list(up.conv1[0:3])), ("decoder.conv2", list(up.conv1[3:6])),
                ("decoder.conv3", [up.conv1[6]]), ("decoder.deconv2", list(up.deconv2)),
                ("decoder.last_deconv", [up.last_deconv[0]])]
        return out

    def layers(self, x):
        """(name, module, input shape, forward flops, needs input gradient) for every layer, in the order
        of mlperf-bench --layers; the input shapes found by running one forward pass with hooks."""
        units = self.units()
        shapes = {}

        def record(name):
            def hook(module, inputs, output):
                op, inp = module, inputs[0]
                if isinstance(op, nn.ConvTranspose2d):  # every input element feeds k*k*Co multiply-adds
                    flops = 2.0 * op.weight.numel() / op.in_channels * inp.numel()
                elif isinstance(op, nn.Conv2d):  # every output element takes k*k*Ci/groups
                    flops = 2.0 * op.weight.numel() / op.out_channels * output.numel()
                else:
                    flops = 0.0
                shapes[name] = (tuple(inp.shape), flops)
            return hook

        hooks = [modules[0].register_forward_hook(record(name)) for name, modules in units]
        was_training = self.training
        self.eval()
        with torch.no_grad():
            self(x)
        self.train(was_training)
        for h in hooks:
            h.remove()
        # The first layer's input is the data: no data gradient, as in the whole model.
        return [(name, nn.Sequential(*modules), shapes[name][0], shapes[name][1], name != "xception.conv1")
                for name, modules in units]


def iou(logits, labels, classes=3):
    """Per-sample mean IoU over the classes (the eval output of the workload)."""
    pred = logits.argmax(1)
    score = torch.zeros(labels.shape[0])
    for c in range(classes):
        p, t = pred == c, labels == c
        tp = (p & t).sum((1, 2)).float()
        union = (p | t).sum((1, 2)).float()
        score += torch.where(union > 0, tp / union.clamp(min=1), torch.ones_like(tp)) / classes
    return score


def time_model(model, x, args):
    labels = torch.randint(0, 3, (args.batch, args.height, args.width))
    weights = torch.tensor(CLASS_WEIGHTS, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)

    def train():
        model.train()
        opt.zero_grad()
        # The reference's loss: weighted per-pixel CE, then a plain mean (not weight-normalized).
        with mixed_precision(args):
            logits = model(x)
        F.cross_entropy(logits.float(), labels, weight=weights, reduction="none").mean().backward()
        opt.step()

    def evaluate():
        model.eval()
        with torch.no_grad(), mixed_precision(args):
            iou(model(x).float(), labels).sum().item()

    return timed(train, args.steps, args.warmup), timed(evaluate, args.steps, args.warmup)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--height", type=int, default=768, help="a multiple of 16")
    p.add_argument("--width", type=int, default=1152, help="a multiple of 16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--layers", action="store_true", help="also time each layer on its own")
    p.add_argument("--channels-last", action="store_true", help="channels_last memory format")
    add_bf16_argument(p)
    p.add_argument("--json", help="write the figures to FILE")
    args = p.parse_args()
    if args.height % 16 or args.width % 16:
        p.error("--height and --width must be multiples of 16 (output stride 16)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = DeepLabV3Plus()
    count = sum(t.numel() for t in model.parameters() if t.requires_grad)
    assert count == PARAMETERS, f"{count} trainable parameters, the reference has {PARAMETERS}"
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    x = to_format(torch.rand(args.batch, 16, args.height, args.width) * 2 - 1, args.channels_last)
    layers_found = model.layers(x)
    forward = sum(f for _, _, _, f, _ in layers_found)
    fmt = "channels_last" if args.channels_last else "contiguous"
    print(f"PyTorch {torch.__version__} ({fmt}, {torch.get_num_threads()} threads)  batch {args.batch}  "
          f"input 16x{args.height}x{args.width}  forward {forward / args.batch / 1e9:.2f} GFLOP/sample", flush=True)
    train_s, eval_s = time_model(model, x, args)
    report(args, "deepcam", fmt, forward, train_s, eval_s, layers_found, 32)

if __name__ == "__main__":
    main()
