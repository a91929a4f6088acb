#!/usr/bin/python3
"""Writes the golden fixtures of the reference backend with an independent implementation: PyTorch
(Debian's python3-torch, CPU, float64 for the expected values so the fixture itself adds no error).

    /usr/bin/python3 tools/golden/make_reference_fixtures.py tests/fixtures/golden

Each case file holds tensors in our layouts (activations channels-last, conv weights
[K..., Cin/groups, Cout], dense weights [in, out]); torch runs in its own (NC..., OI...) and the
script converts. Format, one tensor per two lines:
    tensor <name> <ndim> <dims...>
    <values, space-separated>
Cases: loss = mean((f(inputs) - target)^2); the fixture gives the inputs, the target, the loss,
the gradient of every parameter, and the parameters after two Keras-SGD steps.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

torch.manual_seed(20261123)
DT = torch.float64


def rand(*shape, scale=1.0):
    # float32-representable values, so C++ reads exactly what torch used
    return (scale * (2 * torch.rand(*shape, dtype=torch.float32) - 1)).to(DT)


def write(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors:
            t = t.detach().to(torch.float64).contiguous()
            dims = " ".join(str(d) for d in t.shape)
            f.write(f"tensor {name} {t.dim()} {dims}\n")
            f.write(" ".join(f"{v:.9g}" for v in t.flatten().tolist()) + "\n")


def cl(x):  # N C D H W -> N D H W C (or N C H W -> N H W C)
    return x.permute(0, *range(2, x.dim()), 1)


def conv_w_ours(w):  # O I k... -> k... I O
    return w.permute(*range(2, w.dim()), 1, 0)


def keras_sgd(params, grads_fn, lr, momentum, steps):
    """Keras semantics: v = m*v - lr*g; w += v."""
    vel = [torch.zeros_like(p) for p in params]
    for _ in range(steps):
        grads = grads_fn(params)
        for i, (p, g) in enumerate(zip(params, grads)):
            vel[i] = momentum * vel[i] - lr * g
            params[i] = (p + vel[i]).detach()
    return params


def run_case(path, params, forward, inputs, target, to_ours, lr=0.05, momentum=0.9):
    """params: dict name->torch tensor (torch layout); to_ours: name -> converter."""
    names = list(params)
    leaves = [params[n].clone().requires_grad_(True) for n in names]
    out = forward(dict(zip(names, leaves)), inputs)
    loss = ((out - target) ** 2).mean()
    loss.backward()
    tensors = [(f"param:{n}", to_ours[n](params[n])) for n in names]
    tensors += [(f"input:{k}", v) for k, v in inputs.items()]
    tensors += [("target", target), ("loss", loss.reshape(1))]
    tensors += [(f"grad:{n}", to_ours[n](leaf.grad)) for n, leaf in zip(names, leaves)]

    def grads_fn(ps):
        ls = [p.clone().requires_grad_(True) for p in ps]
        l = ((forward(dict(zip(names, ls)), inputs) - target) ** 2).mean()
        return torch.autograd.grad(l, ls)

    stepped = keras_sgd([params[n].clone() for n in names], grads_fn, lr, momentum, 2)
    tensors += [(f"after2:{n}", to_ours[n](p)) for n, p in zip(names, stepped)]
    tensors += [("sgd", torch.tensor([lr, momentum], dtype=DT))]
    write(path, tensors)


def conv3d_case(out):
    x = rand(2, 3, 5, 4, 6)
    params = {"w": rand(4, 3, 3, 3, 3, scale=0.5), "b": rand(4)}
    fwd = lambda p, i: cl(F.conv3d(i["x_torch"], p["w"], p["b"], padding=1))
    inputs = {"x_torch": x}
    target = rand(2, 5, 4, 6, 4, scale=0.5)
    # the input is data here: fixtures carry it channels-last
    run_case(out / "conv3d.txt", params, fwd, inputs, target, {"w": conv_w_ours, "b": lambda t: t})
    fix_input(out / "conv3d.txt", "input:x_torch", cl(x), "input:x")


def conv2d_grouped_case(out):
    x = rand(2, 4, 9, 8)
    params = {"w": rand(6, 2, 3, 3, scale=0.5)}
    fwd = lambda p, i: cl(F.conv2d(i["x_torch"], p["w"], stride=(3, 2), padding=1, dilation=2, groups=2))
    target = rand(2, 3, 3, 6, scale=0.5)
    run_case(out / "conv2d_grouped.txt", params, fwd, {"x_torch": x}, target, {"w": conv_w_ours})
    fix_input(out / "conv2d_grouped.txt", "input:x_torch", cl(x), "input:x")


def cosmo_net_case(out):
    counts = torch.randint(0, 60, (2, 4, 16, 16, 16)).to(DT)
    params = {
        "c1w": rand(8, 4, 3, 3, 3, scale=0.3), "c1b": rand(8, scale=0.1),
        "c2w": rand(16, 8, 3, 3, 3, scale=0.2), "c2b": rand(16, scale=0.1),
        "d1w": rand(1024, 16, scale=0.05), "d1b": rand(16, scale=0.1),  # stored [in, out] already
        "d2w": rand(16, 4, scale=0.3), "d2b": rand(4, scale=0.1),
    }

    def fwd(p, i):
        h = torch.log1p(i["counts_torch"])
        h = F.max_pool3d(F.leaky_relu(F.conv3d(h, p["c1w"], p["c1b"], padding=1), 0.3), 2)
        h = F.max_pool3d(F.leaky_relu(F.conv3d(h, p["c2w"], p["c2b"], padding=1), 0.3), 2)
        h = cl(h).flatten(1)  # channels-last flatten, as Keras
        h = F.leaky_relu(h @ p["d1w"] + p["d1b"], 0.3)
        return 1.2 * torch.tanh(h @ p["d2w"] + p["d2b"])

    target = rand(2, 4)
    ident = lambda t: t
    conv = conv_w_ours
    run_case(out / "cosmo_net.txt", params, fwd, {"counts_torch": counts}, target,
             {"c1w": conv, "c1b": ident, "c2w": conv, "c2b": ident, "d1w": ident, "d1b": ident,
              "d2w": ident, "d2b": ident}, lr=0.02)
    fix_input(out / "cosmo_net.txt", "input:counts_torch", cl(counts), "input:counts")


def fix_input(path, old_name, ours, new_name):
    """Replaces a torch-layout input tensor in a written fixture by its channels-last form."""
    lines = Path(path).read_text().splitlines()
    for k in range(0, len(lines), 2):
        if lines[k].split()[1] == old_name:
            dims = " ".join(str(d) for d in ours.shape)
            lines[k] = f"tensor {new_name} {ours.dim()} {dims}"
            lines[k + 1] = " ".join(f"{v:.9g}" for v in ours.contiguous().flatten().tolist())
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/golden")
    out.mkdir(parents=True, exist_ok=True)
    conv3d_case(out)
    conv2d_grouped_case(out)
    cosmo_net_case(out)
    print("wrote", ", ".join(sorted(p.name for p in out.glob("*.txt"))))
