"""
The numpy side of the MLP throughput comparison: the same MLP as train_mlp.c (ReLU hidden
layers, softmax cross-entropy, AdamW), written in float32 numpy, trained for a fixed number
of steps on the Fashion-MNIST training set. It prints one Markdown table row on stdout,

    | numpy | 784,512,256,10 | 128 | 12345 |        (implementation, sizes, batch, samples/s)

and everything else (BLAS, threads, per-step times, the loss) on stderr, so the rows of
several runs can be collected with `>>`.

What it leaves out: no evaluation, no checkpoint, no learning-rate schedule; the step is
forward + backward + AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on the
weights, not the biases, as torch.optim.AdamW), batches taken in order from one shuffle of
the 60,000 training images. samples/s = B / median step time over the timed steps (after a
few warm-up steps); the median because this 2-core machine is shared and a mean is pulled
up by the odd slow step. The data is read and converted before the clock starts.

Correctness first: before timing, the same code runs the (784, 64, 32, 10) ReLU model of
dev/reference/fixtures/mlp_state.bin on that fixture's batch and weights and must reproduce
its loss, gradients and 5 AdamW losses to float32 accuracy (-V skips this).

BLAS. numpy's matmuls go to the BLAS numpy was built with; pip's numpy 2.x wheels bundle
OpenBLAS (scipy-openblas64, 0.3.31 for numpy 2.4.6, built DYNAMIC_ARCH: it picks a kernel
for the CPU at load time) and use one thread per core (2 here). The script prints the
library, version, thread count and chosen kernel ("architecture") from threadpoolctl when
it is installed (`pip install threadpoolctl`), else numpy.show_config()'s build line.
Most of the time goes into the six matmuls of each step.

A fair benchmark. On some of our machines the environment sets OPENBLAS_CORETYPE (and
OPENBLAS_L2_SIZE), because older OpenBLAS builds crash or compute wrong results on those
processors. They force a core type and cache size on the current OpenBLAS too, which can
make numpy much slower than it is. The script does not change them itself (tests and CI
keep them as set); it prints them. For a fair number, run it with both unset, in that
command alone, and check in the output which kernel OpenBLAS then chose:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python dev/bench_mlp_numpy.py

Run with -h for the options and their defaults.
"""

import argparse
import gzip
import os
import statistics
import sys
import time

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist package
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference", "fixtures", "mlp_state.bin")
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.01

# -----------------------------------------------------------------------------
# utilities


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def blas_description():
    """One line: which BLAS numpy calls, how many threads, which kernel it chose."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return (f"{config['name']} {config['version']} (threads and kernel unknown: "
                f"pip install threadpoolctl to see them)")
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    return "; ".join(f"{i['internal_api']} {i['version']}, {i['num_threads']} threads, "
                     f"kernel {i.get('architecture', '?')}, {os.path.basename(i['filepath'])}" for i in blas)


def load_images_labels(data_dir, split):
    """A whole gzipped idx pair as (float32 pixels / 255, int32 labels)."""
    def read(path, magic):
        with gzip.open(path, "rb") as f:
            data = f.read()
        head = np.frombuffer(data, dtype=">i4", count=2)
        if head[0] != magic:
            sys.exit(f"{path}: expected idx magic {magic}, found {head[0]}\n"
                     f"HINT: apt-get install dataset-fashion-mnist gives the original files")
        ndims = magic & 0xff
        dims = np.frombuffer(data, dtype=">i4", count=ndims, offset=4)
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)
    images = read(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051)
    labels = read(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049)
    assert images.shape[0] == labels.shape[0]
    return images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0), labels.astype(np.int32)

# -----------------------------------------------------------------------------
# the model, float32 throughout (numpy 2 keeps float32 * python float in float32)


def mlp_init(sizes, rng):
    """He-normal weights, N(0, 0.1) biases, as in dev/reference/mlp_reference.py."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_out, fan_in)).astype(np.float32))
        params.append(rng.normal(0.0, 0.1, size=fan_out).astype(np.float32))
    return params


def mlp_forward_backward(params, x, labels):
    """Mean cross-entropy loss and the gradient of every parameter (ReLU hidden layers)."""
    n_layers = len(params) // 2
    hs = [x]
    for i in range(n_layers):
        z = hs[-1] @ params[2 * i].T  # most of the time goes into these and the matmuls below
        z += params[2 * i + 1]
        if i < n_layers - 1:
            np.maximum(z, 0.0, out=z)  # ReLU in place: z > 0 is then also the backward mask
        hs.append(z)
    logits = hs.pop()
    n = len(labels)
    logits -= logits.max(axis=1, keepdims=True)  # softmax is shift-invariant; exp can't overflow
    probs = np.exp(logits)
    sums = probs.sum(axis=1)
    loss = float(np.mean(np.log(sums) - logits[np.arange(n), labels]))
    probs /= sums[:, None]
    probs[np.arange(n), labels] -= 1.0
    dz = probs / np.float32(n)  # d(mean loss) / d logits
    grads = [None] * len(params)
    for i in reversed(range(n_layers)):
        grads[2 * i] = dz.T @ hs[i]
        grads[2 * i + 1] = dz.sum(axis=0)
        if i > 0:
            dh = dz @ params[2 * i]
            dh *= hs[i] > 0.0
            dz = dh
    return loss, grads


def adamw_update(params, grads, state, t):
    """torch.optim.AdamW's step, in place; weight decay on the W's (even indices) only."""
    if not state:  # allocated lazily on the first update
        state.extend(dict(m=np.zeros_like(p), v=np.zeros_like(p), tmp=np.zeros_like(p)) for p in params)
    c1, c2 = 1.0 - BETA1 ** t, np.sqrt(1.0 - BETA2 ** t)
    for j, (p, g, s) in enumerate(zip(params, grads, state)):
        m, v, tmp = s["m"], s["v"], s["tmp"]
        if j % 2 == 0:
            p *= np.float32(1.0 - LR * WEIGHT_DECAY)
        m *= BETA1
        m += (1.0 - BETA1) * g
        v *= BETA2
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - BETA2
        v += tmp
        # p -= lr / c1 * m / (sqrt(v) / c2 + eps), with in-place temporaries: the update
        # streams over every parameter several times, so allocations would show
        np.sqrt(v, out=tmp)
        tmp *= np.float32(1.0 / c2)
        tmp += EPS
        np.divide(m, tmp, out=tmp)
        tmp *= np.float32(LR / c1)
        p -= tmp

# -----------------------------------------------------------------------------
# the correctness check against the reference fixture


def verify_against_fixture(path):
    """Our float32 step against mlp_reference.py's float64 truth; exits on a mismatch."""
    if not os.path.exists(path):
        sys.exit(f"{path}: not found\nHINT: python dev/reference/mlp_reference.py regenerates it "
                 f"(or run with -V to skip the check)")
    data = np.fromfile(path, dtype="<i4", count=256)
    if data[0] != 20261201 or data[1] != 1 or data[11] != 0:
        sys.exit(f"{path}: expected magic 20261201 version 1 activation 0 (ReLU), found "
                 f"{data[0]} {data[1]} {data[11]}\nHINT: python dev/reference/mlp_reference.py regenerates it")
    sizes, B, steps = [int(s) for s in data[3:3 + data[2]]], int(data[10]), int(data[12])
    pos = 1024

    def take(dtype, shape):
        nonlocal pos
        a = np.fromfile(path, dtype=dtype, count=int(np.prod(shape)), offset=pos).reshape(shape)
        pos += a.nbytes
        return a
    shapes = [s for fi, fo in zip(sizes[:-1], sizes[1:]) for s in ((fo, fi), (fo,))]
    x, labels = take("<f4", (B, sizes[0])), take("<i4", (B,))
    params = [take("<f4", s).copy() for s in shapes]
    take("<f4", (B, sizes[-1]))
    ref_loss, ref_grads = take("<f4", (1,))[0], [take("<f4", s) for s in shapes]
    take("<f4", (steps,))
    ref_adamw = take("<f4", (steps,))
    # float32 against float64 truth: errors of a few 1e-7 relative are float32 rounding;
    # 1e-5 of each tensor's largest value leaves room and still catches any real slip
    tol = 1e-5
    loss, grads = mlp_forward_backward(params, x, labels)
    worst = max(np.abs(g - r).max() / np.abs(r).max() for g, r in zip(grads, ref_grads))
    losses, state = [], []
    for t in range(1, steps + 1):
        loss_t, g = mlp_forward_backward(params, x, labels)
        losses.append(loss_t)
        adamw_update(params, g, state, t)
    loss_err = max(abs(loss - ref_loss), np.abs(np.array(losses) - ref_adamw).max()) / ref_loss
    ok = worst <= tol and loss_err <= tol
    log(f"# check vs {os.path.relpath(path)}: gradients max rel {worst:.1e}, losses (1 + {steps} AdamW steps) "
        f"max rel {loss_err:.1e}: {'OK' if ok else 'NOT OK'}")
    if not ok:
        sys.exit(1)

# -----------------------------------------------------------------------------
# main


def main():
    ap = argparse.ArgumentParser(description="Trains the MLP in float32 numpy and prints a samples/s table row.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("-s", "--sizes", default="784,512,256,10", help="layer sizes, input first")
    ap.add_argument("-b", "--batch", type=int, default=128, help="batch size B")
    ap.add_argument("-n", "--steps", type=int, default=200, help="timed training steps")
    ap.add_argument("-w", "--warmup", type=int, default=10, help="untimed steps before the timed ones")
    ap.add_argument("-r", "--seed", type=int, default=1234, help="seed of the weights and the shuffle")
    ap.add_argument("-d", "--data-dir", default=DATA_DIR, help="folder with the Fashion-MNIST .gz idx files")
    ap.add_argument("-V", "--no-verify", action="store_true", help="skip the check against the reference fixture")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if len(sizes) < 2 or sizes[0] != 784 or sizes[-1] != 10 or min(sizes) < 1:
        sys.exit(f"-s {args.sizes}: need at least two positive sizes, starting at 784 and ending at 10")
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("-b and -n must be at least 1, -w at least 0")

    log(f"# numpy {np.__version__}, BLAS: {blas_description()}")
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        log(f"#   {name}={os.environ[name]!r}" if name in os.environ else f"#   {name} unset")
    if "OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ:
        log("# NOTE: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set and may slow numpy; for a fair number run\n"
            "#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python dev/bench_mlp_numpy.py")
    if not args.no_verify:
        verify_against_fixture(FIXTURE)

    x_all, y_all = load_images_labels(args.data_dir, "train")
    rng = np.random.default_rng(args.seed)
    params = mlp_init(sizes, rng)
    order = rng.permutation(len(x_all))
    n_params = sum(p.size for p in params)
    log(f"# sizes {args.sizes}, B={args.batch}, {n_params:,} parameters, {args.warmup} warm-up + "
        f"{args.steps} timed steps, seed {args.seed}")

    state, step_times, losses = [], [], []
    batches_per_epoch = len(x_all) // args.batch
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        # the gather of one batch is part of a training step, so it is timed
        idx = order[(step % batches_per_epoch) * args.batch:][:args.batch]
        loss, grads = mlp_forward_backward(params, x_all[idx], y_all[idx])
        adamw_update(params, grads, state, step + 1)
        t1 = time.perf_counter()
        losses.append(loss)
        if step >= args.warmup:
            step_times.append(t1 - t0)
    median, mean = statistics.median(step_times), statistics.fmean(step_times)
    last = losses[-10:]  # one batch's loss is noisy; the mean of a few shows the trend
    log(f"# step time: median {median * 1e3:.3f} ms, mean {mean * 1e3:.3f} ms, fastest "
        f"{min(step_times) * 1e3:.3f} ms; loss {losses[0]:.4f} -> {statistics.fmean(last):.4f} "
        f"(mean of the last {len(last)})")
    print(f"| numpy | {args.sizes} | {args.batch} | {args.batch / median:.0f} |", flush=True)


if __name__ == "__main__":
    main()
