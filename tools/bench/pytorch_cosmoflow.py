#!/usr/bin/python3
"""The PyTorch peer of `mlperf-bench` for CosmoFlow: the same model (v1.0+ reference, kernel 3),
float32, the same batch and thread count, timed the same way (whole training step with SGD
momentum, evaluation forward, and each layer on its own with an mse loss), written as the same
JSON so tools/bench/compare.py can print them side by side.

  /usr/bin/python3 tools/bench/pytorch_cosmoflow.py --edge 128 --batch 4 --threads 2 --layers --json torch.json
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_timing import add_bf16_argument, mixed_precision, report, timed, to_format


class Conv3DActMP(nn.Module):
    """One conv block of the PyTorch port: Conv3d (k3, Keras 'same' = padding 1), LeakyReLU(0.3), MaxPool3d(2)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 3, padding=1)
        self.act = nn.LeakyReLU(0.3)
        self.mp = nn.MaxPool3d(2)

    def forward(self, x):
        return self.mp(self.act(self.conv(x)))


class CosmoFlow(nn.Module):
    """Layer for layer the graph workloads/cosmoflow/model.cpp builds, with the parameter names of the
    PyTorch port (NVIDIA's model/cosmoflow.py, REFERENCE.md §1.8: conv_seq.<i>.conv, dense1, dense2,
    output), which is what `mlperf-run --export-weights` writes. log1p is the first op, as in our graph
    (the port applies it in its trainer)."""

    def __init__(self, edge, dropout=0.5):
        super().__init__()
        self.conv_seq = nn.ModuleList(Conv3DActMP(4 if i == 0 else 32 << (i - 1), 32 << i) for i in range(5))
        flat = (32 << 4) * (edge // 32) ** 3
        self.dense1 = nn.Linear(flat, 128)
        self.dense2 = nn.Linear(128, 64)
        self.output = nn.Linear(64, 4)
        self.dropout = dropout

    def forward(self, x):
        x = torch.log1p(x)
        for block in self.conv_seq:
            x = block(x)
        x = torch.flatten(x.permute(0, 2, 3, 4, 1), 1)  # channels-last flatten, as Keras
        x = F.dropout(F.leaky_relu(self.dense1(x), 0.3), self.dropout, self.training)
        x = F.dropout(F.leaky_relu(self.dense2(x), 0.3), self.dropout, self.training)
        return 1.2 * torch.tanh(self.output(x))

    def layers(self, batch, edge):
        """(name, module, input shape, forward flops, needs input gradient), as mlperf-bench --layers cuts
        the graph: each activation a row of its own."""
        out = []
        channels, e = 4, edge
        for i, block in enumerate(self.conv_seq):
            cout = 32 << i
            flops = 2.0 * batch * e ** 3 * 27 * channels * cout
            out.append((f"conv{i + 1}", block.conv, (batch, channels, e, e, e), flops, i > 0))
            out.append((f"conv{i + 1}.act", block.act, (batch, cout, e, e, e), 0.0, True))
            out.append((f"conv{i + 1}.pool", block.mp, (batch, cout, e, e, e), 0.0, True))
            channels, e = cout, e // 2
        flat = channels * e ** 3
        out.append(("dense1", self.dense1, (batch, flat), 2.0 * batch * flat * 128, True))
        out.append(("dense1.act", nn.LeakyReLU(0.3), (batch, 128), 0.0, True))
        out.append(("dense2", self.dense2, (batch, 128), 2.0 * batch * 128 * 64, True))
        out.append(("dense2.act", nn.LeakyReLU(0.3), (batch, 64), 0.0, True))
        out.append(("output", self.output, (batch, 64), 2.0 * batch * 64 * 4, True))
        out.append(("output.tanh", nn.Tanh(), (batch, 4), 0.0, True))
        return out


def time_model(model, args):
    x = to_format(torch.randint(0, 40, (args.batch, 4, args.edge, args.edge, args.edge)).float(), args.channels_last)
    y = torch.rand(args.batch, 4) * 2 - 1
    opt = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9)

    def train():
        model.train()
        opt.zero_grad()
        with mixed_precision(args):
            loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()

    def evaluate():
        model.eval()
        with torch.no_grad(), mixed_precision(args):
            (model(x).float() - y).abs().sum().item()

    return timed(train, args.steps, args.warmup), timed(evaluate, args.steps, args.warmup)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edge", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--layers", action="store_true", help="also time each layer on its own")
    p.add_argument("--channels-last", action="store_true", help="channels_last_3d memory format")
    add_bf16_argument(p)
    p.add_argument("--json", help="write the figures to FILE")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = CosmoFlow(args.edge)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    forward = sum(f for _, _, _, f, _ in model.layers(args.batch, args.edge))
    train_s, eval_s = time_model(model, args)
    fmt = "channels_last_3d" if args.channels_last else "contiguous"
    print(f"PyTorch {torch.__version__} ({fmt}, {torch.get_num_threads()} threads)  batch {args.batch}  edge {args.edge}")
    report(args, "cosmoflow", fmt, forward, train_s, eval_s, model.layers(args.batch, args.edge), 14)

if __name__ == "__main__":
    main()
