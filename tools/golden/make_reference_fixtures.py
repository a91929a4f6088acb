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
ADAM_LEARNING_RATES = (0.05, 0.02, 0.03)  # three steps
DEEPCAM_CLASS_WEIGHTS = torch.tensor([1.00172996521, 2.61461114883, 1.71641969681], dtype=torch.float32).to(DT)


def rand(*shape, scale=1.0):
    """Uniform in [-scale, scale), rounded to float32 so C++ reads exactly the values torch used."""
    return (scale * (2 * torch.rand(*shape, dtype=torch.float64) - 1)).float().to(DT)


# ---- layouts: torch -> ours ------------------------------------------------------------------

def channels_last(x):  # N C spatial... -> N spatial... C
    return x.permute(0, *range(2, x.dim()), 1)


def conv_weight(w):  # O I k... -> k... I O
    return w.permute(*range(2, w.dim()), 1, 0)


def conv_transpose_weight(w):  # I O k... -> k... O I (docs/ops.md: [K..., Co, Ci])
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


def run_case(path, params, layouts, forward, inputs=None, target_scale=0.5, states=None, optimizer="sgd",
             loss="mse", decay=None):
    """params: name -> tensor in torch layout; layouts: name -> converter to ours (states included);
    forward(params, inputs) -> output in OUR layout; inputs: name -> (torch tensor, ours).
    states: name -> initial running statistics (torch layout); forward is then forward(params, inputs, states,
    training) and updates them in place when training, as BatchNorm does.
    optimizer: "sgd" (Keras, two steps) or ("adam" | "adamw", {beta1, beta2, eps, weight_decay}), three steps with
    torch.optim, parameter p's decay being weight_decay * decay[p] (default 1).
    loss: "mse" against a random target, or "output" when forward returns the loss itself."""
    inputs = inputs or {}
    torch_inputs = {k: v[0] for k, v in inputs.items()}
    names = list(params)
    stateful = states is not None
    states = states or {}
    call = forward if stateful else (lambda p, i, s, training: forward(p, i))

    def fresh_states():
        return {k: v.clone() for k, v in states.items()}

    def loss_and_grads(values, running):
        leaves = [v.clone().requires_grad_(True) for v in values]
        out = call(dict(zip(names, leaves)), torch_inputs, running, True)
        value = out if loss == "output" else ((out - target) ** 2).mean()
        return out, value, torch.autograd.grad(value, leaves)

    with torch.no_grad():
        eval_out = call(params, torch_inputs, fresh_states(), False)
    target = rand(*eval_out.shape, scale=target_scale) if loss == "mse" else None
    running = fresh_states()
    out, value, grads = loss_and_grads([params[n] for n in names], running)
    after_first = {k: v.clone() for k, v in running.items()}

    running = fresh_states()
    if optimizer == "sgd":
        learning_rates = LEARNING_RATES
        values, velocity = [params[n].clone() for n in names], [torch.zeros_like(params[n]) for n in names]
        for lr in learning_rates:  # Keras SGD
            _, _, g = loss_and_grads(values, running)
            velocity = [MOMENTUM * v - lr * gi for v, gi in zip(velocity, g)]
            values = [w + v for w, v in zip(values, velocity)]
    else:
        kind, hyper = optimizer
        learning_rates = ADAM_LEARNING_RATES
        decay = decay or {}
        leaves = [params[n].clone().requires_grad_(True) for n in names]
        groups = {}
        for n, leaf in zip(names, leaves):
            groups.setdefault(decay.get(n, 1.0), []).append(leaf)
        make = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        opt = make([{"params": ps, "weight_decay": hyper["weight_decay"] * m} for m, ps in groups.items()],
                   betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])
        for lr in learning_rates:
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            o = call(dict(zip(names, leaves)), torch_inputs, running, True)
            (o if loss == "output" else ((o - target) ** 2).mean()).backward()
            opt.step()
        values = [leaf.detach() for leaf in leaves]

    steps = len(learning_rates)
    tensors = [(f"param:{n}", layouts[n](params[n])) for n in names]
    tensors += [(f"state:{k}", layouts[k](v)) for k, v in states.items()]
    tensors += [(f"input:{k}", ours) for k, (_, ours) in inputs.items()]
    if target is not None:
        tensors += [("target", target)]
    tensors += [("output", out), ("loss", value.reshape(1))]
    if stateful:
        tensors += [("eval_output", eval_out)]
        tensors += [(f"state1:{k}", layouts[k](v)) for k, v in after_first.items()]
    tensors += [(f"grad:{n}", layouts[n](g)) for n, g in zip(names, grads)]
    tensors += [(f"after{steps}:{n}", layouts[n](w)) for n, w in zip(names, values)]
    if optimizer == "sgd":
        tensors += [("sgd", torch.tensor([*LEARNING_RATES, MOMENTUM], dtype=DT))]
    else:
        tensors += [(kind, torch.tensor([hyper[k] for k in ("beta1", "beta2", "eps", "weight_decay")], dtype=DT)),
                    ("lrs", torch.tensor(learning_rates, dtype=DT))]
        tensors += [(f"decay:{n}", torch.tensor([decay.get(n, 1.0)], dtype=DT)) for n in names]
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


# ---- DeepCAM ops (appended after the CosmoFlow cases, so those keep their random draws) -------------

def conv_transpose2d_upsample(out):
    """DeepCAM's upsampler: ConvTranspose2d(k3, s2, p1, output_padding=1), output 2x the input."""
    params = {"x": rand(2, 4, 3, 5), "w": rand(4, 6, 3, 3, scale=0.5), "b": rand(6)}
    run_case(out / "conv_transpose2d_upsample.txt", params, {"x": channels_last, "w": conv_transpose_weight, "b": same},
             lambda p, i: channels_last(F.conv_transpose2d(p["x"], p["w"], p["b"], stride=2, padding=1,
                                                           output_padding=1)))


def conv_transpose2d_odd(out):
    """kernel (2,3), stride (3,1), padding (0,1), dilation (1,2), output_padding (2,1), no bias."""
    params = {"x": rand(1, 3, 3, 4), "w": rand(3, 2, 2, 3, scale=0.5)}
    run_case(out / "conv_transpose2d_odd.txt", params, {"x": channels_last, "w": conv_transpose_weight},
             lambda p, i: channels_last(F.conv_transpose2d(p["x"], p["w"], stride=(3, 1), padding=(0, 1),
                                                           output_padding=(2, 1), dilation=(1, 2))))


def depthwise_dilated(out):
    """DeepCAM's depthwise conv: groups = channels = 6, k3, dilation 2, padding 2, bias."""
    params = {"x": rand(2, 6, 7, 9), "w": rand(6, 1, 3, 3, scale=0.5), "b": rand(6)}
    run_case(out / "depthwise_dilated.txt", params, {"x": channels_last, "w": conv_weight, "b": same},
             lambda p, i: channels_last(F.conv2d(p["x"], p["w"], p["b"], padding=2, dilation=2, groups=6)))


def batch_norm2d(out):
    """BatchNorm2d(3) in training (output, gradients, running statistics) and evaluation (random statistics)."""
    params = {"x": rand(4, 3, 5, 6, scale=2.0) + 0.5, "gamma": rand(3) + 1.0, "beta": rand(3)}
    states = {"mean": rand(3, scale=0.3), "var": rand(3, scale=0.5) + 1.0}

    def fwd(p, i, s, training):
        return channels_last(F.batch_norm(p["x"], s["mean"], s["var"], p["gamma"], p["beta"], training=training,
                                          momentum=0.1, eps=1e-5))

    run_case(out / "batch_norm2d.txt", params, {"x": channels_last, "gamma": same, "beta": same, "mean": same,
                                                "var": same}, fwd, states=states)


def weighted_cross_entropy(out):
    """DeepCAM's loss: CrossEntropyLoss(weight=w, reduction='none') then a plain mean, on logits [2,3,4,3]."""
    logits = rand(2, 3, 3, 4, scale=2.0)  # N C H W
    labels = torch.randint(0, 3, (2, 3, 4))
    run_case(out / "weighted_cross_entropy.txt", {"x": logits}, {"x": channels_last},
             lambda p, i: F.cross_entropy(p["x"], i["labels"], weight=DEEPCAM_CLASS_WEIGHTS, reduction="none").mean(),
             {"labels": (labels, labels)}, loss="output")


ADAM_HYPER = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.1}


def adam_case(out, kind):
    """y = x w + b on data x [3,5]; three torch.optim steps; b's decay masked (multiplier 0)."""
    x = rand(3, 5)
    params = {"w": rand(5, 4, scale=0.5), "b": rand(4)}
    run_case(out / f"{kind}.txt", params, {"w": same, "b": same}, lambda p, i: i["x"] @ p["w"] + p["b"],
             {"x": (x, x)}, optimizer=(kind, ADAM_HYPER), decay={"b": 0.0})


def adam(out):
    adam_case(out, "adam")


def adamw(out):
    adam_case(out, "adamw")


def deepcam_block(out):
    """An Xception block and the ASPP pooling branch in miniature, on x [2,4,6,8] (N C H W):
    h = relu(bn1(pointwise(depthwise_dil2(x)))) + bn2(skip1x1(x));
    pooled = relu(affine(conv1x1(avgpool(h)) + bias)), broadcast to 6x8; out = concat(h, pooled)."""
    params = {
        "x": rand(2, 4, 6, 8), "dw": rand(4, 1, 3, 3, scale=0.5), "pw": rand(8, 4, 1, 1, scale=0.5),
        "g1": rand(8) + 1.0, "b1": rand(8), "skip": rand(8, 4, 1, 1, scale=0.5), "g2": rand(8) + 1.0, "b2": rand(8),
        "pool_w": rand(4, 8, 1, 1, scale=0.5), "pool_b": rand(4), "aff_w": rand(4) + 1.0, "aff_b": rand(4, scale=0.2),
    }
    states = {"m1": rand(8, scale=0.3), "v1": rand(8, scale=0.5) + 1.0, "m2": rand(8, scale=0.3),
              "v2": rand(8, scale=0.5) + 1.0}

    def fwd(p, i, s, training):
        def bn(h, k):
            return F.batch_norm(h, s["m" + k], s["v" + k], p["g" + k], p["b" + k], training=training)

        a = F.relu(bn(F.conv2d(F.conv2d(p["x"], p["dw"], padding=2, dilation=2, groups=4), p["pw"]), "1"))
        h = a + bn(F.conv2d(p["x"], p["skip"]), "2")
        pooled = F.conv2d(F.adaptive_avg_pool2d(h, 1), p["pool_w"], p["pool_b"])
        pooled = F.relu(pooled * p["aff_w"].view(1, -1, 1, 1) + p["aff_b"].view(1, -1, 1, 1))
        return channels_last(torch.cat([h, pooled.expand(-1, -1, 6, 8)], 1))

    layouts = {n: conv_weight if n in ("dw", "pw", "skip", "pool_w") else channels_last if n == "x" else same
               for n in [*params, *states]}
    run_case(out / "deepcam_block.txt", params, layouts, fwd, states=states)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/golden")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(20261123)
    for case in (conv3d, conv3d_strided, conv2d_grouped, max_pool3d, max_pool2d_overlapping, dense, leaky_relu,
                 tanh, mse, cosmo_net, conv_transpose2d_upsample, conv_transpose2d_odd, depthwise_dilated, batch_norm2d,
                 weighted_cross_entropy, adam, adamw, deepcam_block):
        case(out)
    files = sorted(out.glob("*.txt"))
    print(f"wrote {len(files)} files, {sum(f.stat().st_size for f in files)} bytes:", ", ".join(f.name for f in files))


if __name__ == "__main__":
    main()
