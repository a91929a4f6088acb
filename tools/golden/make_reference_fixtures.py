#!/usr/bin/python3
"""Writes the golden fixtures of the reference backend with an independent implementation: PyTorch
(Debian's python3-torch on the CPU, in float64 so the expected values carry no float32 rounding).

    /usr/bin/python3 tools/golden/make_reference_fixtures.py [tests/fixtures/golden]

Every case is  loss = mean((f(params, inputs) - target)^2)  and its file holds, in OUR layouts
(activations channels-last, conv weights [K..., Cin/groups, Cout], dense weights [in, out]):
the parameters (an activation under test is a parameter too, so its gradient is checked), the data
inputs, the target, the forward output, the loss, the gradient of every parameter, and the
parameters after two Keras-SGD steps (v = m*v - lr*g; w += v) with lr changing between the steps.
Torch computes in its own layouts (N C spatial..., O I k...); the conversions are below.
The file format is described in tests/fixtures/golden/README.md.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

DT = torch.float64
LEARNING_RATES = (0.05, 0.02)  # step 1, step 2
MOMENTUM = 0.9


def rand(*shape, scale=1.0):
    """Uniform in [-scale, scale), rounded to float32 so C++ reads exactly the values torch used."""
    return (scale * (2 * torch.rand(*shape, dtype=torch.float64) - 1)).float().to(DT)


# ---- layouts: torch -> ours ------------------------------------------------------------------

def channels_last(x):  # N C spatial... -> N spatial... C
    return x.permute(0, *range(2, x.dim()), 1)


def conv_weight(w):  # O I k... -> k... I O
    return w.permute(*range(2, w.dim()), 1, 0)


def same(t):
    return t


# ---- writing -------------------------------------------------------------------------------

def write(path, tensors):
    """Two lines per tensor: 'tensor <name> <ndim> <dims...>', then the row-major values."""
    with open(path, "w") as f:
        for name, t in tensors:
            t = t.detach().to(DT).contiguous()
            f.write(f"tensor {name} {t.dim()} {' '.join(str(d) for d in t.shape)}\n")
            f.write(" ".join(f"{v:.9g}" for v in t.flatten().tolist()) + "\n")


def run_case(path, params, layouts, forward, inputs=None, target_scale=0.5):
    """params: name -> tensor in torch layout; layouts: name -> converter to ours;
    forward(params, inputs) -> output in OUR layout; inputs: name -> (torch tensor, ours)."""
    inputs = inputs or {}
    torch_inputs = {k: v[0] for k, v in inputs.items()}
    names = list(params)

    def loss_and_grads(values):
        leaves = [v.clone().requires_grad_(True) for v in values]
        out = forward(dict(zip(names, leaves)), torch_inputs)
        loss = ((out - target) ** 2).mean()
        return out, loss, torch.autograd.grad(loss, leaves)

    with torch.no_grad():
        out_shape = forward(params, torch_inputs).shape
    target = rand(*out_shape, scale=target_scale)
    out, loss, grads = loss_and_grads([params[n] for n in names])

    values, velocity = [params[n].clone() for n in names], [torch.zeros_like(params[n]) for n in names]
    for lr in LEARNING_RATES:  # Keras SGD
        _, _, g = loss_and_grads(values)
        velocity = [MOMENTUM * v - lr * gi for v, gi in zip(velocity, g)]
        values = [w + v for w, v in zip(values, velocity)]

    tensors = [(f"param:{n}", layouts[n](params[n])) for n in names]
    tensors += [(f"input:{k}", ours) for k, (_, ours) in inputs.items()]
    tensors += [("target", target), ("output", out), ("loss", loss.reshape(1))]
    tensors += [(f"grad:{n}", layouts[n](g)) for n, g in zip(names, grads)]
    tensors += [(f"after2:{n}", layouts[n](w)) for n, w in zip(names, values)]
    tensors += [("sgd", torch.tensor([*LEARNING_RATES, MOMENTUM], dtype=DT))]
    write(path, tensors)


# ---- the cases -------------------------------------------------------------------------------

def conv3d(out):
    params = {"x": rand(2, 3, 5, 4, 6), "w": rand(4, 3, 3, 3, 3, scale=0.5), "b": rand(4)}
    run_case(out / "conv3d.txt", params, {"x": channels_last, "w": conv_weight, "b": same},
             lambda p, i: channels_last(F.conv3d(p["x"], p["w"], p["b"], padding=1)))


def conv3d_strided(out):
    # kernel (2,3,2), stride (2,1,2), dilation (1,2,1), padding before (0,1,1) after (1,1,0)
    params = {"x": rand(1, 2, 7, 6, 5), "w": rand(5, 2, 2, 3, 2, scale=0.5)}

    def fwd(p, i):
        padded = F.pad(p["x"], (1, 0, 1, 1, 0, 1))  # (W before, W after, H..., D...)
        return channels_last(F.conv3d(padded, p["w"], stride=(2, 1, 2), dilation=(1, 2, 1)))

    run_case(out / "conv3d_strided.txt", params, {"x": channels_last, "w": conv_weight}, fwd)


def conv2d_grouped(out):
    params = {"x": rand(2, 4, 9, 8), "w": rand(6, 2, 3, 3, scale=0.5), "b": rand(6)}
    run_case(out / "conv2d_grouped.txt", params, {"x": channels_last, "w": conv_weight, "b": same},
             lambda p, i: channels_last(F.conv2d(p["x"], p["w"], p["b"], stride=(3, 2), padding=1, dilation=2,
                                                 groups=2)))


def max_pool3d(out):
    params = {"x": rand(2, 3, 6, 4, 5)}  # 5 is not a multiple of 2: the last plane is dropped
    run_case(out / "max_pool3d.txt", params, {"x": channels_last},
             lambda p, i: channels_last(F.max_pool3d(p["x"], 2, 2)))


def max_pool2d_overlapping(out):
    params = {"x": rand(2, 3, 7, 6)}
    run_case(out / "max_pool2d_overlapping.txt", params, {"x": channels_last},
             lambda p, i: channels_last(F.max_pool2d(p["x"], (3, 2), (2, 1))))


def dense(out):
    params = {"x": rand(3, 7), "w": rand(7, 5, scale=0.5), "b": rand(5)}  # w stored [in, out] already
    run_case(out / "dense.txt", params, {"x": same, "w": same, "b": same},
             lambda p, i: p["x"] @ p["w"] + p["b"])


def leaky_relu(out):
    run_case(out / "leaky_relu.txt", {"x": rand(4, 9)}, {"x": same}, lambda p, i: F.leaky_relu(p["x"], 0.3))


def tanh(out):
    run_case(out / "tanh.txt", {"x": rand(4, 9, scale=2.0)}, {"x": same}, lambda p, i: torch.tanh(p["x"]))


def mse(out):
    run_case(out / "mse.txt", {"x": rand(3, 5)}, {"x": same}, lambda p, i: p["x"])


def cosmo_net(out):
    """int16 counts -> log1p -> 2 x (conv k3 'same' + bias, leaky 0.3, max-pool 2) -> flatten
    (channels-last, as Keras) -> dense + leaky -> dense -> tanh -> x1.2, on [2, 16^3, 4]."""
    counts = torch.randint(0, 60, (2, 4, 16, 16, 16)).to(DT)
    params = {
        "c1w": rand(8, 4, 3, 3, 3, scale=0.3), "c1b": rand(8, scale=0.1),
        "c2w": rand(16, 8, 3, 3, 3, scale=0.2), "c2b": rand(16, scale=0.1),
        "d1w": rand(1024, 16, scale=0.05), "d1b": rand(16, scale=0.1),
        "d2w": rand(16, 4, scale=0.3), "d2b": rand(4, scale=0.1),
    }

    def fwd(p, i):
        h = torch.log1p(i["counts"])
        h = F.max_pool3d(F.leaky_relu(F.conv3d(h, p["c1w"], p["c1b"], padding=1), 0.3), 2)
        h = F.max_pool3d(F.leaky_relu(F.conv3d(h, p["c2w"], p["c2b"], padding=1), 0.3), 2)
        h = channels_last(h).flatten(1)
        h = F.leaky_relu(h @ p["d1w"] + p["d1b"], 0.3)
        return 1.2 * torch.tanh(h @ p["d2w"] + p["d2b"])

    layouts = {n: conv_weight if n.endswith("w") and n.startswith("c") else same for n in params}
    run_case(out / "cosmo_net.txt", params, layouts, fwd, {"counts": (counts, channels_last(counts))},
             target_scale=1.0)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/golden")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(20261123)
    for case in (conv3d, conv3d_strided, conv2d_grouped, max_pool3d, max_pool2d_overlapping, dense, leaky_relu,
                 tanh, mse, cosmo_net):
        case(out)
    files = sorted(out.glob("*.txt"))
    print(f"wrote {len(files)} files, {sum(f.stat().st_size for f in files)} bytes:", ", ".join(f.name for f in files))


if __name__ == "__main__":
    main()
