"""
An independent numpy MLP, used as the "truth" that the tests of train_mlp.c compare against.

What it does
    Builds the Fashion-MNIST MLP of train_mlp.c in plain numpy: the forward pass, the
    softmax cross-entropy and every gradient written out by hand, all in float64. Then it
    checks itself: the same model is built a second time from torch ops (no nn.Module) and
    its gradients come from torch autograd, also in float64; the two must agree to 1e-10
    (max |numpy - torch| <= 1e-10 * max |torch|, per tensor), or nothing is written. The
    three short training runs are done the same way twice: by our numpy optimizers (what
    is stored) and by torch.optim with float64 tensors and two parameter groups (the check).

    It writes two fixtures, identical but for the activation:
        fixtures/mlp_state.bin        ReLU
        fixtures/mlp_state_tanh.bin   tanh

How to run
    python dev/reference/mlp_reference.py           # (re)writes the two fixtures (~3 s)
    python dev/reference/mlp_reference.py --check   # recomputes, compares with the files
    Needs numpy and torch (dev/reference/requirements.txt) and the Fashion-MNIST training
    files from Debian's dataset-fashion-mnist package (-d to point elsewhere). The output
    is deterministic: running it twice gives identical bytes.

Model (must match train_mlp.c exactly)
    Layer sizes (784, 64, 32, 10). Layer i has W_i (out, in), row-major, and b_i (out):
        h_{i+1} = act(h_i @ W_i^T + b_i)   for the two hidden layers, act = ReLU or tanh
        logits  = h_2 @ W_2^T + b_2        (no activation)
        loss    = mean over the batch of -log softmax(logits)[label],
                  with log-sum-exp computed after subtracting the row's max
    ReLU's derivative is taken as 0 at 0 (as torch does); no pre-activation of this batch
    is exactly 0, which we assert, so the choice does not matter here.

Data
    The first B = 32 images of train-images-idx3-ubyte.gz and their labels, read with gzip
    + numpy (idx magic 2051 for images, 2049 for labels, big-endian counts). The input is
    x = pixel / 255 rounded once to float32; no mean is subtracted. (float32 division and
    float64 division then rounding give the same 256 values, asserted below, so a C
    `p / 255.0f` reproduces x bit for bit.)

Weights
    np.random.default_rng(1234), drawn in the order W_0, b_0, W_1, b_1, W_2, b_2:
        W_i ~ N(0, std = sqrt(2 / in))  (He init),  b_i ~ N(0, std = 0.1)
    Biases are nonzero on purpose, so a missing bias or bias gradient shows. The draws are
    rounded to float32 and stored in the fixture (the C side reads them, it does not
    regenerate them); all math here then runs in float64 from those float32 values.

Training runs (each from the same initial weights, on the same batch, 5 steps)
    Each step: forward + backward, record the loss (before the update), update.
    (a) SGD with momentum, torch.optim.SGD semantics (dampening 0, not Nesterov):
            g += wd * p  (W only, wd 1e-3);  buf = g at step 1, else buf = mu * buf + g;
            p -= lr * buf                                          lr 0.05, mu 0.9
    (b) AdamW, torch.optim.AdamW semantics (betas (0.9, 0.999), eps 1e-8, lr 1e-3):
            p *= 1 - lr * wd  (W only, wd 0.01);  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
            p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)      (t = 1, 2, ...)
    (c) plain SGD: p -= lr * g, lr 0.1, no weight decay.
    So the first loss of every run is the loss of the fixture's forward pass.

State file format (fixtures/mlp_state.bin, mlp_state_tanh.bin), little-endian
    int32[256] header: [0] 20261201 magic, [1] 1 version, [2] K = number of layer sizes (4),
        [3..3+K-1] the sizes 784 64 32 10, [10] B, [11] activation (0 ReLU, 1 tanh),
        [12] steps per optimizer (5); the rest 0
    float32 x[B*784], int32 labels[B]
    float32 parameters: W_0, b_0, W_1, b_1, W_2, b_2 (the initial weights)
    float32 logits[B*10], float32 loss
    float32 gradients of the mean loss (no weight decay), in the parameter order
    float32 losses_sgd_momentum[5], losses_adamw[5], losses_sgd[5]
    read_state() below is a reader; every run reads its output back and checks it.
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist package

STATE_MAGIC, STATE_VERSION = 20261201, 1
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 2051, 2049
ACT_RELU, ACT_TANH = 0, 1
ACT_NAMES = {ACT_RELU: "relu", ACT_TANH: "tanh"}
FIXTURE_NAMES = {ACT_RELU: "mlp_state.bin", ACT_TANH: "mlp_state_tanh.bin"}

SIZES = (784, 64, 32, 10)
B = 32
SEED = 1234
BIAS_STD = 0.1
STEPS = 5
# (name, torch.optim class, its keyword arguments, weight decay for the W group)
OPTIMIZERS = [
    ("sgd_momentum", "SGD", dict(lr=0.05, momentum=0.9), 1e-3),
    ("adamw", "AdamW", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8), 0.01),
    ("sgd", "SGD", dict(lr=0.1), 0.0),
]

# numpy vs torch, both float64: their own rounding is ~1e-16, so 1e-10 leaves room for
# the different summation orders while any real formula mistake (a missing 1/B, a wrong
# transpose, a bias term) is off by far more
SELF_CHECK_RTOL = 1e-10
# --check against files written on another machine: a different BLAS can change the
# float64 rounding and so flip the last float32 bit of a few values (~6e-8 relative);
# a real change to the model or the data is orders of magnitude bigger
DISK_CHECK_RTOL = 1e-6

# -----------------------------------------------------------------------------
# data


def read_idx_head(path, magic, count):
    """Reads the first `count` items of a gzipped idx file: (items as uint8, total, dims)."""
    with gzip.open(path, "rb") as f:
        head = np.frombuffer(f.read(8), dtype=">i4")
        if head[0] != magic:
            sys.exit(f"{path}: expected idx magic {magic}, found {head[0]}\n"
                     f"HINT: apt-get install dataset-fashion-mnist gives the original files")
        ndims = magic & 0xff  # idx: the magic's low byte is the number of dimensions
        dims = np.frombuffer(f.read(4 * (ndims - 1)), dtype=">i4") if ndims > 1 else np.array([], ">i4")
        total = int(head[1])
        assert total >= count, f"{path}: holds {total} items, we need {count}"
        per_item = int(np.prod(dims)) if ndims > 1 else 1
        raw = f.read(count * per_item)
        assert len(raw) == count * per_item, f"{path}: truncated"
    return np.frombuffer(raw, dtype=np.uint8).reshape(count, per_item), total, tuple(int(d) for d in dims)


def load_batch(data_dir):
    images, n_img, dims = read_idx_head(os.path.join(data_dir, "train-images-idx3-ubyte.gz"),
                                        IDX_IMAGES_MAGIC, B)
    labels, n_lab, _ = read_idx_head(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"),
                                     IDX_LABELS_MAGIC, B)
    assert dims == (28, 28) and n_img == n_lab == 60000, (dims, n_img, n_lab)
    # one rounding to float32, done as float32 division; the same values as rounding the
    # float64 quotient, for every possible pixel (no double-rounding case among the 256)
    every = np.arange(256)
    assert np.array_equal(every.astype(np.float32) / np.float32(255.0),
                          (every / 255.0).astype(np.float32))
    x = images.astype(np.float32) / np.float32(255.0)
    y = labels.reshape(B).astype(np.int32)
    assert 0 <= y.min() and y.max() < SIZES[-1]
    return x, y

# -----------------------------------------------------------------------------
# weights


def init_weights(seed=SEED):
    """He-normal weights and N(0, 0.1) biases, float32, in the order W_0, b_0, W_1, ..."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_out, fan_in)).astype(np.float32))
        params.append(rng.normal(0.0, BIAS_STD, size=fan_out).astype(np.float32))
    return params

# -----------------------------------------------------------------------------
# the numpy model: forward and backward written out, float64


def act_forward(z, act):
    return np.maximum(z, 0.0) if act == ACT_RELU else np.tanh(z)


def act_backward(dh, z, h, act):
    # ReLU: 1 where z > 0 (0 at z == 0, as torch); tanh: 1 - tanh(z)^2, from the output
    return dh * (z > 0.0) if act == ACT_RELU else dh * (1.0 - h * h)


def mlp_forward(params, x, act):
    """Returns logits and the per-layer inputs and pre-activations the backward needs."""
    hs, zs = [x], []
    n_layers = len(SIZES) - 1
    for i in range(n_layers):
        W, b = params[2 * i], params[2 * i + 1]
        z = hs[-1] @ W.T + b
        zs.append(z)
        if i < n_layers - 1:
            hs.append(act_forward(z, act))
    return zs[-1], hs, zs


def crossentropy_forward_backward(logits, labels):
    """Mean cross-entropy of softmax(logits) and its gradient with respect to the logits."""
    n = logits.shape[0]
    shifted = logits - logits.max(axis=1, keepdims=True)  # exp can't overflow after this
    lse = np.log(np.exp(shifted).sum(axis=1))
    loss = float(np.mean(lse - shifted[np.arange(n), labels]))
    # d(mean loss)/d logits = (softmax - onehot) / B
    dlogits = np.exp(shifted - lse[:, None])
    dlogits[np.arange(n), labels] -= 1.0
    return loss, dlogits / n


def mlp_backward(params, hs, zs, dlogits, act):
    """Gradients of the mean loss for every parameter, in parameter order."""
    grads = [None] * len(params)
    dz = dlogits
    for i in reversed(range(len(SIZES) - 1)):
        W = params[2 * i]
        grads[2 * i] = dz.T @ hs[i]        # (out, in)
        grads[2 * i + 1] = dz.sum(axis=0)  # (out)
        if i > 0:  # the input needs no gradient
            dz = act_backward(dz @ W, zs[i - 1], hs[i], act)
    return grads


def mlp_loss_and_grads(params, x, labels, act):
    logits, hs, zs = mlp_forward(params, x, act)
    loss, dlogits = crossentropy_forward_backward(logits, labels)
    return logits, loss, mlp_backward(params, hs, zs, dlogits, act), zs

# -----------------------------------------------------------------------------
# the numpy optimizers (what the fixture stores)


def train_numpy(params0, x, labels, act, opt_name, hyper, wd):
    """STEPS updates from params0; returns the loss before each update."""
    params = [p.copy() for p in params0]
    state = [dict() for _ in params]
    losses = []
    for t in range(1, STEPS + 1):
        _, loss, grads, _ = mlp_loss_and_grads(params, x, labels, act)
        losses.append(loss)
        for j, (p, g, s) in enumerate(zip(params, grads, state)):
            decay = wd if j % 2 == 0 else 0.0  # even indices are the W's; biases never decay
            if opt_name == "adamw":
                b1, b2 = hyper["betas"]
                lr, eps = hyper["lr"], hyper["eps"]
                p *= 1.0 - lr * decay  # decoupled decay (Loshchilov & Hutter), before the step
                s["m"] = b1 * s.get("m", 0.0) + (1.0 - b1) * g
                s["v"] = b2 * s.get("v", 0.0) + (1.0 - b2) * g * g
                denom = np.sqrt(s["v"]) / np.sqrt(1.0 - b2 ** t) + eps
                p -= lr / (1.0 - b1 ** t) * s["m"] / denom
            else:
                g = g + decay * p  # torch's SGD weight decay: L2 added to the gradient
                if "momentum" in hyper:
                    # torch.optim.SGD: the first buffer is g itself, not (1 - dampening) g
                    s["buf"] = g.copy() if t == 1 else hyper["momentum"] * s["buf"] + g
                    g = s["buf"]
                p -= hyper["lr"] * g
    return np.array(losses)

# -----------------------------------------------------------------------------
# the torch check: autograd for the gradients, torch.optim for the training runs


def torch_loss(params, x, labels, act):
    h = x
    n_layers = len(SIZES) - 1
    for i in range(n_layers):
        h = h @ params[2 * i].T + params[2 * i + 1]
        if i < n_layers - 1:
            h = torch.relu(h) if act == ACT_RELU else torch.tanh(h)
    return h, F.cross_entropy(h, labels)  # mean reduction by default


def torch_leaves(params0):
    return [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params0]


def torch_loss_and_grads(params0, x, labels, act):
    params = torch_leaves(params0)
    logits, loss = torch_loss(params, torch.from_numpy(x), torch.from_numpy(labels), act)
    loss.backward()
    return logits.detach().numpy(), loss.item(), [p.grad.numpy() for p in params]


def train_torch(params0, x, labels, act, opt_name, hyper, wd):
    params = torch_leaves(params0)
    groups = [dict(params=params[0::2], weight_decay=wd), dict(params=params[1::2], weight_decay=0.0)]
    opt = getattr(torch.optim, "AdamW" if opt_name == "adamw" else "SGD")(groups, **hyper)
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        _, loss = torch_loss(params, xt, yt, act)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return np.array(losses)


def self_check(name, ours, ref):
    """Asserts numpy (ours) and torch (ref) agree to SELF_CHECK_RTOL; returns the ratio."""
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
    scale = np.abs(ref).max()
    err = np.abs(ours - ref).max()
    rel = err / scale if scale > 0 else err
    if not rel <= SELF_CHECK_RTOL:
        sys.exit(f"{name}: numpy and torch disagree: max abs err {err:.3e}, max |torch| {scale:.3e}, "
                 f"relative {rel:.3e} > {SELF_CHECK_RTOL:g}; nothing written")
    return rel

# -----------------------------------------------------------------------------
# the reference run


def run_reference(act, x, labels, params32):
    """Everything the fixture holds, computed by numpy, each piece checked against torch."""
    params = [p.astype(np.float64) for p in params32]
    x64 = x.astype(np.float64)
    logits, loss, grads, zs = mlp_loss_and_grads(params, x64, labels, act)
    t_logits, t_loss, t_grads = torch_loss_and_grads(params, x64, labels.astype(np.int64), act)

    rels = {"logits": self_check("logits", logits, t_logits), "loss": self_check("loss", loss, t_loss)}
    names = [f"{k}{i}" for i in range(len(SIZES) - 1) for k in ("dW", "db")]
    for name, g, tg in zip(names, grads, t_grads):
        rels[name] = self_check(name, g, tg)

    hidden = np.concatenate([z.ravel() for z in zs[:-1]])
    assert (hidden != 0.0).all(), "a pre-activation is exactly 0: ReLU's derivative is ambiguous"

    out = dict(logits=logits, loss=loss, grads=grads, rels=rels, min_abs_z=np.abs(hidden).min(),
               n_small_z=int((np.abs(hidden) < 1e-4).sum()), n_z=hidden.size, losses={})
    for opt_name, _, hyper, wd in OPTIMIZERS:
        ours = train_numpy(params, x64, labels, act, opt_name, hyper, wd)
        ref = train_torch(params, x64, labels.astype(np.int64), act, opt_name, hyper, wd)
        rels["losses_" + opt_name] = self_check("losses_" + opt_name, ours, ref)
        out["losses"][opt_name] = ours
    assert all(l[0] == loss for l in out["losses"].values())  # every run starts where we did
    return out

# -----------------------------------------------------------------------------
# file writing and reading


def write_atomic(path, data):
    """Write name.tmp, fsync, rename: a crash never leaves a half-written fixture."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def state_bytes(act, x, labels, params32, out):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [STATE_MAGIC, STATE_VERSION, len(SIZES)]
    header[3:3 + len(SIZES)] = SIZES
    header[10:13] = [B, act, STEPS]
    f32 = lambda a: np.asarray(a, dtype="<f4").tobytes()
    parts = [header.tobytes(), f32(x), labels.astype("<i4").tobytes()]
    parts += [f32(p) for p in params32]
    parts += [f32(out["logits"]), f32([out["loss"]])]
    parts += [f32(g) for g in out["grads"]]
    parts += [f32(out["losses"][name]) for name, _, _, _ in OPTIMIZERS]
    return b"".join(parts)


def param_shapes(sizes):
    shapes = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        shapes += [(fan_out, fan_in), (fan_out,)]
    return shapes


def read_state(path):
    """Parses a state file into a dict; written from the format in the header above, so
    that writing then reading checks the format itself."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(dtype, shape):
        nonlocal pos
        count = int(np.prod(shape))
        assert pos + 4 * count <= len(data), f"{path}: truncated"
        a = np.frombuffer(data, dtype=dtype, count=count, offset=pos).reshape(shape)
        pos += a.nbytes
        return a

    h = take("<i4", (256,))
    if h[0] != STATE_MAGIC or h[1] != STATE_VERSION:
        sys.exit(f"{path}: expected magic {STATE_MAGIC} version {STATE_VERSION}, found {h[0]} {h[1]}\n"
                 f"HINT: python dev/reference/mlp_reference.py regenerates it")
    K = int(h[2])
    assert 2 <= K <= 7, f"{path}: {K} layer sizes do not fit header slots 3..9"
    s = dict(sizes=tuple(int(v) for v in h[3:3 + K]), B=int(h[10]), act=int(h[11]), steps=int(h[12]))
    assert not h[3 + K:10].any() and not h[13:].any(), f"{path}: header slots that must be 0 are not"
    n_in, n_out = s["sizes"][0], s["sizes"][-1]
    s["x"], s["labels"] = take("<f4", (s["B"], n_in)), take("<i4", (s["B"],))
    shapes = param_shapes(s["sizes"])
    s["params"] = [take("<f4", shape) for shape in shapes]
    s["logits"], s["loss"] = take("<f4", (s["B"], n_out)), take("<f4", (1,))[0]
    s["grads"] = [take("<f4", shape) for shape in shapes]
    s["losses"] = {name: take("<f4", (s["steps"],)) for name, _, _, _ in OPTIMIZERS}
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return s


def check_roundtrip(path, act, x, labels, params32, out):
    """Reads the file back and asserts every field equals what we computed."""
    s = read_state(path)
    assert s["sizes"] == SIZES and s["B"] == B and s["act"] == act and s["steps"] == STEPS
    assert np.array_equal(s["x"], x) and np.array_equal(s["labels"], labels)
    assert all(np.array_equal(a, b) for a, b in zip(s["params"], params32))
    assert np.array_equal(s["logits"], out["logits"].astype(np.float32))
    assert s["loss"] == np.float32(out["loss"])
    assert all(np.array_equal(a, b.astype(np.float32)) for a, b in zip(s["grads"], out["grads"]))
    for name, _, _, _ in OPTIMIZERS:
        assert np.array_equal(s["losses"][name], out["losses"][name].astype(np.float32))
        assert s["losses"][name][0] == s["loss"]


def compare_with_disk(path, fresh_bytes):
    """--check: identical bytes, or else every float within DISK_CHECK_RTOL (see there)."""
    with open(path, "rb") as f:
        if f.read() == fresh_bytes:
            return "identical bytes"
    tmp = path + ".fresh.tmp"
    with open(tmp, "wb") as f:
        f.write(fresh_bytes)
    try:
        new, old = read_state(tmp), read_state(path)
    finally:
        os.remove(tmp)
    for k in ("sizes", "B", "act", "steps"):
        assert new[k] == old[k], f"{path}: header field {k} is {old[k]}, a fresh run gives {new[k]}"
    # the data and the weights involve no arithmetic beyond one division: bits must match
    assert np.array_equal(new["x"], old["x"]) and np.array_equal(new["labels"], old["labels"]), "batch differs"
    assert all(np.array_equal(a, b) for a, b in zip(new["params"], old["params"])), "weights differ"
    worst = 0.0
    pairs = [(new["logits"], old["logits"]), (new["loss"], old["loss"])]
    pairs += list(zip(new["grads"], old["grads"])) + [(new["losses"][n], old["losses"][n]) for n in new["losses"]]
    for a, b in pairs:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    assert worst <= DISK_CHECK_RTOL, f"{path}: differs from a fresh run, worst relative error {worst:.2e}"
    return f"last-bit differences only (worst relative {worst:.1e})"

# -----------------------------------------------------------------------------
# main


def build(act, x, labels, params32, check_only):
    t0 = time.time()
    path = os.path.join(FIXTURES, FIXTURE_NAMES[act])
    out = run_reference(act, x, labels, params32)
    data = state_bytes(act, x, labels, params32, out)
    if check_only:
        verdict = compare_with_disk(path, data)
    else:
        write_atomic(path, data)
        check_roundtrip(path, act, x, labels, params32, out)
    print(f"[{ACT_NAMES[act]}] loss {out['loss']:.9f}")
    for name, losses in out["losses"].items():
        print(f"  losses {name:13s}" + " ".join(f"{v:.9f}" for v in losses))
    print("  numpy vs torch autograd / torch.optim (float64), max|diff| / max|torch|:")
    print("    " + "  ".join(f"{k} {v:.1e}" for k, v in out["rels"].items()))
    print(f"  hidden pre-activations: min |z| {out['min_abs_z']:.2e}, "
          f"{out['n_small_z']} of {out['n_z']} below 1e-4")
    verb = f"matches ({verdict})" if check_only else "wrote"
    print(f"  {verb} {os.path.relpath(path)} ({os.path.getsize(path)} bytes) in {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser(description="Writes the MLP fixtures for the tests of train_mlp.c.")
    ap.add_argument("--check", action="store_true",
                    help="recompute and compare with the fixtures on disk instead of writing (default: write)")
    ap.add_argument("-d", "--data-dir", default=DATA_DIR,
                    help=f"folder with the Fashion-MNIST .gz idx files (default: {DATA_DIR})")
    args = ap.parse_args()
    # float64 CPU kernels are deterministic run to run; we also ask torch to refuse any
    # op that is not, so a future torch cannot quietly break the identical-bytes promise
    torch.use_deterministic_algorithms(True)
    os.makedirs(FIXTURES, exist_ok=True)
    x, labels = load_batch(args.data_dir)
    params32 = init_weights()
    print(f"MLP sizes {SIZES}, B={B}, seed {SEED}, labels {' '.join(map(str, labels))}")
    for act in (ACT_RELU, ACT_TANH):
        build(act, x, labels, params32, args.check)


if __name__ == "__main__":
    main()
