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

from peer_timing import report, timed, to_format

PARAMETERS = 56_454_720  # REFERENCE.md §2.10
CLASS_WEIGHTS = [1.00172996521, 2.61461114883, 1.71641969681]  # f^-0.125 as float32 (§2.10)


class Unit(nn.Sequential):
    """One layer as `mlperf-bench --layers` cuts the graph: a conv (or transposed conv) with the BN and
    ReLU that follow it, or a pooling op. `layer_name` is the node name workloads/deepcam/model.cpp gives."""

    def __init__(self, name, op, bn=False, relu=False):
        mods = [op] + ([nn.BatchNorm2d(op.out_channels)] if bn else []) + ([nn.ReLU(inplace=True)] if relu else [])
        super().__init__(*mods)
        self.layer_name = name


def conv(name, cin, cout, k, stride=1, dilation=1, padding=0, groups=1, bias=False, bn=False, relu=False):
    return Unit(name, nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias), bn, relu)


def separable(name, cin, cout, stride=1, dilation=1, bn=False, relu=False):
    """SeparableConv2d_same: depthwise 3x3 (padding = dilation) then pointwise 1x1; the BN and ReLU that
    follow it in the network belong to the pointwise layer (no BN inside)."""
    return nn.Sequential(conv(name + ".conv1", cin, cin, 3, stride, dilation, dilation, groups=cin),
                         conv(name + ".pointwise", cin, cout, 1, bn=bn, relu=relu))


class Block(nn.Module):
    """Xception block: rep = [Sep, BN, ReLU] x reps without the last ReLU, then a stride-2 (or is_last)
    separable conv without BN; plus the skip (1x1 conv + BN when the shape changes, else identity)."""

    def __init__(self, name, cin, cout, reps, stride=1, dilation=1, end_with_relu=True, grow_first=True,
                 is_last=False):
        super().__init__()
        self.skip = conv(name + ".skip", cin, cout, 1, stride, bn=True) if cout != cin or stride != 1 else nn.Identity()
        rep, c = [], cin
        for i in range(reps):
            grows = i == 0 if grow_first else i == reps - 1
            rep.append(separable(f"{name}.rep{i}", c, cout if grows else c, 1, dilation, bn=True, relu=i + 1 < reps))
            c = cout if grows else c
        if stride != 1:
            rep.append(separable(name + ".down", cout, cout, stride))
        elif is_last:
            rep.append(separable(name + ".last", cout, cout))
        self.rep = nn.Sequential(*rep)
        self.end_with_relu = end_with_relu

    def forward(self, inp):
        skip = self.skip(inp)  # first, as in the graph (the layer order of mlperf-bench --layers)
        x = self.rep(inp) + skip
        return F.relu(x, inplace=True) if self.end_with_relu else x


class Xception(nn.Module):
    """The modified aligned Xception at output stride 16 (16 input channels, exit flow dilation 2)."""

    def __init__(self, channels=16):
        super().__init__()
        self.entry = nn.Sequential(conv("xception.conv1", channels, 32, 3, 2, padding=1, bn=True, relu=True),
                                   conv("xception.conv2", 32, 64, 3, padding=1, bn=True, relu=True),
                                   Block("xception.block1", 64, 128, 2, 2, end_with_relu=False))
        blocks = [Block("xception.block2", 128, 256, 2, 2), Block("xception.block3", 256, 728, 2, 2, is_last=True)]
        blocks += [Block(f"xception.block{i}", 728, 728, 3) for i in range(4, 20)]
        blocks.append(Block("xception.block20", 728, 1024, 2, end_with_relu=False, grow_first=False, is_last=True))
        widths = [1024, 1536, 1536, 2048]
        blocks += [separable(f"xception.conv{i + 3}", widths[i], widths[i + 1], dilation=2, bn=True, relu=True)
                   for i in range(3)]
        self.middle_exit = nn.Sequential(*blocks)

    def forward(self, x):
        # The reference's in-place ReLU after block1 also rewrites the low-level features: they are post-ReLU.
        low_level = F.relu(self.entry(x), inplace=True)
        return self.middle_exit(low_level), low_level


class ASPP(nn.Module):
    """Rates 1, 6, 12, 18 and the global-pool branch (1x1 conv, trainable per-channel affine, ReLU,
    broadcast to H/16 x W/16), concatenated and projected to 256 channels."""

    def __init__(self, cin=2048, cout=256):
        super().__init__()
        self.branches = nn.ModuleList([conv("aspp1", cin, cout, 1, bn=True, relu=True)] + [
            conv(f"aspp{i + 2}", cin, cout, 3, dilation=r, padding=r, bn=True, relu=True)
            for i, r in enumerate((6, 12, 18))])
        self.pool = Unit("global_pool", nn.AdaptiveAvgPool2d(1))
        self.pool_conv = conv("global_pool.conv", cin, cout, 1)
        self.affine_weights = nn.Parameter(torch.ones(cout, 1, 1))
        self.affine_bias = nn.Parameter(torch.zeros(cout, 1, 1))
        self.project = conv("aspp.project", 5 * cout, cout, 1, bn=True, relu=True)

    def forward(self, x):
        branches = [b(x) for b in self.branches]
        pooled = F.relu(self.pool_conv(self.pool(x)) * self.affine_weights + self.affine_bias)
        branches.append(pooled.expand(-1, -1, x.shape[2], x.shape[3]))
        return self.project(torch.cat(branches, 1))


def upsample(name, cin, cout, bn=True, relu=True):
    """ConvTranspose2d(k3, s2, p1, output_padding 1, no bias): doubles H and W."""
    return Unit(name, nn.ConvTranspose2d(cin, cout, 3, 2, 1, output_padding=1, bias=False), bn, relu)


class DeepLabV3Plus(nn.Module):
    def __init__(self, channels=16, classes=3):
        super().__init__()
        self.encoder = Xception(channels)
        self.aspp = ASPP()
        self.low_level = conv("decoder.low_level", 128, 48, 1, bn=True, relu=True)
        self.deconv1 = nn.Sequential(upsample("decoder.deconv1a", 256, 256), upsample("decoder.deconv1b", 256, 256))
        self.convs = nn.Sequential(conv("decoder.conv1", 304, 256, 3, padding=1, bn=True, relu=True),
                                   conv("decoder.conv2", 256, 256, 3, padding=1, bn=True, relu=True),
                                   conv("decoder.conv3", 256, 256, 1, bias=True),
                                   upsample("decoder.deconv2", 256, 256),
                                   upsample("decoder.last_deconv", 256, classes, bn=False, relu=False))
        # The reference overwrites the encoder and ASPP convs with kaiming_normal_; the rest keep the defaults.
        for m in list(self.encoder.modules()) + list(self.aspp.branches.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x):
        features, low_level = self.encoder(x)
        x = self.aspp(features)
        low = self.low_level(low_level)
        return self.convs(torch.cat([self.deconv1(x), low], 1))

    def layers(self, x):
        """(name, module, input shape, forward flops, needs input gradient) for every layer, in the order
        of mlperf-bench --layers, found by running one forward pass with hooks."""
        out = []

        def record(unit, inputs, output):
            op, inp = unit[0], inputs[0]
            if isinstance(op, nn.ConvTranspose2d):  # every input element feeds k*k*Co multiply-adds
                flops = 2.0 * op.weight.numel() / op.in_channels * inp.numel()
            elif isinstance(op, nn.Conv2d):  # every output element takes k*k*Ci/groups
                flops = 2.0 * op.weight.numel() / op.out_channels * output.numel()
            else:
                flops = 0.0
            # The first layer's input is the data: no data gradient, as in the whole model.
            out.append((unit.layer_name, unit, tuple(inp.shape), flops, unit.layer_name != "xception.conv1"))

        hooks = [m.register_forward_hook(record) for m in self.modules() if isinstance(m, Unit)]
        was_training = self.training
        self.eval()
        with torch.no_grad():
            self(x)
        self.train(was_training)
        for h in hooks:
            h.remove()
        return out


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
        F.cross_entropy(model(x), labels, weight=weights, reduction="none").mean().backward()
        opt.step()

    def evaluate():
        model.eval()
        with torch.no_grad():
            iou(model(x), labels).sum().item()

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
