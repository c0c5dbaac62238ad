"""
An independent PyTorch GPT-2, used as the "truth" that test_gpt2.c compares against.

What it does
    Builds GPT-2 from plain tensors and torch ops (no nn.Module, no hand-written backward:
    every gradient comes from autograd), runs it on two fixed configurations, and writes
    the "debug state" of each: logits, loss, the gradient of every parameter tensor, and
    the losses and gradient norms of 10 AdamW steps on the same batch.

        tiny   V=300 (Vp=384), maxT=32, L=2, NH=4,  C=64,  B=4, T=13, lr 1e-3
               weights from torch.manual_seed(1337), written as an llm.c checkpoint
               (fixtures/gpt2_tiny_model.bin) that the C test loads: this also checks
               our checkpoint reader against an independent writer.
        small  V=50257 (Vp=50304), maxT=1024, L=2, NH=12, C=768, B=2, T=57, lr 3e-4
               GPT-2 small's layer shapes with 2 layers. (T is neither a head size, 16
               and 64, nor a power of two: a kernel whose stride is right only when T
               equals the head size, or whose grid assumes whole tiles, fails here.)
               Its weights are too big to
               commit, so both sides regenerate them with the counter-based generator
               in counter_init_tensor() below, which the C side mirrors exactly.

    All the math runs in float64, so this reference is a better truth than an fp32 run
    would be: its own rounding error is ~1e-16, far below the fp32 error of the C code
    under test. The weights are first made as float32 values and only then cast to
    float64, so the C side (fp32) starts from bit-identical weights. Everything stored
    is cast to float32.

How to run
    python dev/reference/gpt2_reference.py           # (re)writes dev/reference/fixtures/
    python dev/reference/gpt2_reference.py --check   # recomputes, compares with the files
    python dev/reference/gpt2_reference.py -c tiny   # one config only (tiny, small, all)
    Needs torch, numpy (dev/reference/requirements.txt). Under a minute on 2 cores, most
    of it in the small config's 10 steps; peak memory about 3.5 GB. The output is deterministic: running it twice
    gives identical bytes.

Model (must match train_gpt2.c exactly)
    Parameters, in this order (also the order of llm.c's checkpoint files):
        0 wte (Vp, C)  rows V..Vp-1 are padding and stay 0   1 wpe (maxT, C)
        2 ln1w (L, C)  3 ln1b (L, C)  4 qkvw (L, 3C, C)  5 qkvb (L, 3C)
        6 attprojw (L, C, C)  7 attprojb (L, C)  8 ln2w (L, C)  9 ln2b (L, C)
        10 fcw (L, 4C, C)  11 fcb (L, 4C)  12 fcprojw (L, C, 4C)  13 fcprojb (L, C)
        14 lnfw (C)  15 lnfb (C)
    x = wte[tokens] + wpe[:T]; per layer: x += attproj(attention(LN1(x))),
    x += fcproj(gelu_tanh(fc(LN2(x)))); logits = LNf(x) @ wte^T over all Vp rows, but the
    softmax / cross-entropy use only the first V columns. LayerNorm eps 1e-5.

Training steps (so the C side can mirror them)
    Each step: forward + backward, record the loss (before the update), the global L2
    gradient norm over all 16 tensors, clip with torch.nn.utils.clip_grad_norm_(max 1.0)
    (which scales by 1.0 / (norm + 1e-6) when norm > 1.0; note the 1e-6), then
    torch.optim.AdamW(betas (0.9, 0.95), eps 1e-8, constant lr) with weight decay 0.1 on
    wte, wpe, qkvw, attprojw, fcw, fcprojw and 0 on everything else. torch's AdamW does
        p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
        p -= lr * (m / (1-b1^t)) / (sqrt(v) / sqrt(1-b2^t) + eps)        (t = 1, 2, ...)
    The parameter gradients stored in the fixture are those of step 1, before clipping.

State file format (fixtures/gpt2_{tiny,small}_state.bin), little-endian
    int32[256] header: [0] 20261129 magic, [1] 1 version, [2] maxT, [3] V, [4] L, [5] NH,
        [6] C, [7] Vp, [8] B, [9] T, [10] init mode (0 = weights in gpt2_tiny_model.bin
        next to this file, 1 = counter-based noisy init), [11] seed, [12] steps; rest 0
    float32[16] hyper-parameters: [0] lr, [1] beta1, [2] beta2, [3] eps,
        [4] weight decay, [5] grad clip; rest 0
    int32 inputs[B*T], int32 targets[B*T]
    17 "sampled tensor" records: the logits (the (B,T,V) array, not Vp), then the
        gradient of each of the 16 parameters in the order above. A record is
        int64 numel, int64 stride, int64 count, float32 values[count], where
        values[j] = flat[j*stride] and count = ceil(numel/stride). stride is 1 (all of
        it) when numel <= 65536, else the smallest prime >= numel/8192 that does not
        divide the tensor's last dimension (so ~8192 samples that visit every column).
    float32 loss
    float32 losses[steps], float32 grad_norms[steps]

Model file format (fixtures/gpt2_tiny_model.bin): llm.c's checkpoint
    int32[256] header: [0] 20240326 magic, [1] 3 version (fp32), [2] maxT, [3] V, [4] L,
    [5] NH, [6] C, [7] Vp; rest 0; then the 16 tensors as float32, in order, contiguous.
"""

import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

STATE_MAGIC, STATE_VERSION = 20261129, 1
MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
INIT_FROM_FILE, INIT_COUNTER_NOISY = 0, 1
FULL_RECORD_MAX = 65536  # tensors up to this many elements are stored whole
SAMPLES_TARGET = 8192    # bigger ones are sampled down to about this many values

# -----------------------------------------------------------------------------
# configurations

CONFIGS = {
    "tiny": dict(maxT=32, V=300, L=2, NH=4, C=64, B=4, T=13, init=INIT_FROM_FILE,
                 seed=1337, steps=10, lr=1e-3),
    "small": dict(maxT=1024, V=50257, L=2, NH=12, C=768, B=2, T=57, init=INIT_COUNTER_NOISY,
                  seed=1337, steps=10, lr=3e-4),
}
BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY, GRAD_CLIP = 0.9, 0.95, 1e-8, 0.1, 1.0

PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# weight decay goes to the matrices only; our per-layer tensors are stacked over L,
# so we name them instead of asking .dim() == 2 as nanoGPT does
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def padded_vocab(V):
    # llm.c pads the vocabulary to a multiple of 128 so the lm-head matmul tiles nicely
    return (V + 127) // 128 * 128


def param_shapes(cfg):
    V, maxT, L, C = cfg["V"], cfg["maxT"], cfg["L"], cfg["C"]
    Vp = padded_vocab(V)
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C),
            (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C),
            (L, C, 4 * C), (L, C), (C,), (C,)]

# -----------------------------------------------------------------------------
# weight initialisation: the (mean, std) table and the counter-based generator
# (the C side mirrors init_table() and counter_init_tensor() exactly)


def init_table(L):
    """(mean, std) of each of the 16 tensors for the "noisy" test init. Every tensor is
    random, LayerNorm and biases included, so a mix-up between any two tensors shows."""
    w, proj = 0.02, 0.02 / math.sqrt(2 * L)  # GPT-2's scaled init of the residual projections
    ln_w, ln_b, bias = (1.0, 0.1), (0.0, 0.1), (0.0, 0.02)
    return [(0.0, w), (0.0, w), ln_w, ln_b, (0.0, w), bias, (0.0, proj), bias,
            ln_w, ln_b, (0.0, w), bias, (0.0, proj), bias, ln_w, ln_b]


M64 = 2**64 - 1


def splitmix64(z):
    """SplitMix64's output function (Steele, Lea, Flood 2014), on numpy uint64 arrays or
    plain Python ints; all arithmetic wraps modulo 2^64."""
    if isinstance(z, int):
        z = (z + 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def counter_uniform(key, idx):
    """uniform(i) = (splitmix64(key + i) >> 40) * 2^-24: 24 random bits, so the value is
    exact in float32 and float64 alike and lies in [0, 1)."""
    with np.errstate(over="ignore"):
        u = splitmix64(np.uint64(key) + idx)
    return (u >> np.uint64(40)).astype(np.float64) * 2.0**-24


def counter_normal(seed, stream, start, n):
    """normal(i) for i = start..start+n-1: Box-Muller on the uniforms 2i and 2i+1,
    in float64. 1 - u lies in (0, 1], so the log never sees 0."""
    key = splitmix64(((seed << 32) ^ stream) & M64)
    i = np.arange(start, start + n, dtype=np.uint64)
    u1 = counter_uniform(key, 2 * i)
    u2 = counter_uniform(key, 2 * i + np.uint64(1))
    return np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * math.pi * u2)


def counter_init_tensor(seed, stream, numel, mean, std):
    """value[i] = float32(mean + std * normal(seed, stream, i)): computed in float64,
    rounded to float32 once. We go in chunks to keep the uint64 temporaries small."""
    out = np.empty(numel, dtype=np.float32)
    chunk = 1 << 22
    for start in range(0, numel, chunk):
        n = min(chunk, numel - start)
        out[start:start + n] = (mean + std * counter_normal(seed, stream, start, n)).astype(np.float32)
    return out


def init_weights_counter(cfg):
    """The small config's weights: tensor k is stream k of the counter generator."""
    weights = []
    for k, (shape, (mean, std)) in enumerate(zip(param_shapes(cfg), init_table(cfg["L"]))):
        numel = math.prod(shape)
        weights.append(counter_init_tensor(cfg["seed"], k, numel, mean, std).reshape(shape))
    weights[0][cfg["V"]:] = 0.0  # the padding rows of wte
    return weights


def init_weights_torch(cfg):
    """The tiny config's weights: the same (mean, std) table, drawn with torch's own
    generator; they reach the C side through the checkpoint file, so any generator does."""
    torch.manual_seed(cfg["seed"])
    weights = []
    for shape, (mean, std) in zip(param_shapes(cfg), init_table(cfg["L"])):
        weights.append((torch.randn(shape, dtype=torch.float32) * std + mean).numpy())
    weights[0][cfg["V"]:] = 0.0
    return weights


def make_batch(cfg):
    """Random tokens; they are stored in the fixture, so the generator does not matter."""
    rng = np.random.default_rng(cfg["seed"])
    tokens = rng.integers(0, cfg["V"], size=(cfg["B"], cfg["T"] + 1)).astype(np.int32)
    return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])

# -----------------------------------------------------------------------------
# the model: forward only, autograd does the rest


def attention(qkv, NH):
    """Causal multi-head self-attention. qkv (B, T, 3C): q is the first C channels, then
    k, then v; head h owns channels h*HS .. (h+1)*HS-1 of each. Returns (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    HS = C // NH
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, HS)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))               # (B, NH, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~causal, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v                                                          # (B, NH, T, HS)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def gpt2_forward(params, inputs, targets, cfg):
    """Returns logits (B, T, Vp) and the mean cross-entropy loss over B*T positions."""
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
     ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) = params
    V, L, NH, C = cfg["V"], cfg["L"], cfg["NH"], cfg["C"]
    T = inputs.shape[1]
    x = wte[inputs] + wpe[:T]
    for l in range(L):
        # F.layer_norm uses the biased variance, as llm.c does
        h = F.layer_norm(x, (C,), ln1w[l], ln1b[l], eps=1e-5)
        y = attention(F.linear(h, qkvw[l], qkvb[l]), NH)
        x = x + F.linear(y, attprojw[l], attprojb[l])
        h = F.layer_norm(x, (C,), ln2w[l], ln2b[l], eps=1e-5)
        h = F.gelu(F.linear(h, fcw[l], fcb[l]), approximate="tanh")
        x = x + F.linear(h, fcprojw[l], fcprojb[l])
    x = F.layer_norm(x, (C,), lnfw, lnfb, eps=1e-5)
    logits = F.linear(x, wte)  # tied lm head, over all Vp rows (the padding gives 0s)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long())
    return logits, loss


def run_reference(cfg, weights, inputs, targets):
    """Step-1 logits, loss and gradients, then `steps` AdamW steps on the same batch."""
    params = [torch.from_numpy(w).to(torch.float64).requires_grad_(True) for w in weights]
    inputs_t = torch.from_numpy(inputs).long()
    targets_t = torch.from_numpy(targets).long()
    groups = [
        {"params": [p for n, p in zip(PARAM_NAMES, params) if n in DECAYED], "weight_decay": WEIGHT_DECAY},
        {"params": [p for n, p in zip(PARAM_NAMES, params) if n not in DECAYED], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(BETA1, BETA2), eps=ADAM_EPS,
                            foreach=False, fused=False)
    out = {"losses": [], "grad_norms": []}
    for step in range(cfg["steps"]):
        opt.zero_grad(set_to_none=True)
        logits, loss = gpt2_forward(params, inputs_t, targets_t, cfg)
        loss.backward()
        if step == 0:
            # keep the raw gradients: the clip below scales them in place
            out["logits"] = logits[..., :cfg["V"]].detach().to(torch.float32).numpy().copy()
            out["loss"] = np.float32(loss.item())
            out["grads"] = [p.grad.detach().to(torch.float32).numpy().copy() for p in params]
        norm = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        out["losses"].append(loss.item())
        out["grad_norms"].append(norm.item())
        opt.step()
    out["losses"] = np.array(out["losses"], dtype=np.float32)
    out["grad_norms"] = np.array(out["grad_norms"], dtype=np.float32)
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


def header_bytes(values):
    header = np.zeros(256, dtype="<i4")
    header[:len(values)] = values
    return header.tobytes()


def model_bytes(cfg, weights):
    c = cfg
    head = header_bytes([MODEL_MAGIC, MODEL_VERSION_FP32, c["maxT"], c["V"], c["L"], c["NH"],
                         c["C"], padded_vocab(c["V"])])
    return head + b"".join(np.ascontiguousarray(w, dtype="<f4").tobytes() for w in weights)


def read_model(path, cfg):
    """Reads an llm.c fp32 checkpoint back into 16 float32 arrays."""
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data, dtype="<i4", count=256)
    expect = [MODEL_MAGIC, MODEL_VERSION_FP32, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"],
              cfg["C"], padded_vocab(cfg["V"])]
    if list(header[:8]) != expect:
        sys.exit(f"{path}: expected header {expect}, found {list(header[:8])}\n"
                 f"HINT: python dev/reference/gpt2_reference.py regenerates it")
    weights, offset = [], 256 * 4
    for shape in param_shapes(cfg):
        n = math.prod(shape)
        weights.append(np.frombuffer(data, dtype="<f4", count=n, offset=offset).reshape(shape))
        offset += 4 * n
    assert offset == len(data), f"{path}: {len(data) - offset} trailing bytes"
    return weights


def is_prime(n):
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def sample_stride(shape):
    """1 for small tensors; else a prime near numel/8192 that does not divide the last
    dimension, so the samples walk over all rows and all columns."""
    numel = math.prod(shape)
    if numel <= FULL_RECORD_MAX:
        return 1
    stride = -(-numel // SAMPLES_TARGET)  # ceil, so count stays <= 8192
    while not is_prime(stride) or shape[-1] % stride == 0:
        stride += 1
    return stride


def record_bytes(tensor):
    stride = sample_stride(tensor.shape)
    values = np.ascontiguousarray(tensor, dtype="<f4").reshape(-1)[::stride]
    return struct.pack("<qqq", tensor.size, stride, values.size) + values.tobytes()


def state_bytes(cfg, inputs, targets, out):
    c = cfg
    head = header_bytes([STATE_MAGIC, STATE_VERSION, c["maxT"], c["V"], c["L"], c["NH"], c["C"],
                         padded_vocab(c["V"]), c["B"], c["T"], c["init"], c["seed"], c["steps"]])
    hyper = np.zeros(16, dtype="<f4")
    hyper[:6] = [c["lr"], BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY, GRAD_CLIP]
    parts = [head, hyper.tobytes(), inputs.astype("<i4").tobytes(), targets.astype("<i4").tobytes(),
             record_bytes(out["logits"])]
    parts += [record_bytes(g) for g in out["grads"]]
    parts += [np.float32(out["loss"]).astype("<f4").tobytes(),
              out["losses"].astype("<f4").tobytes(), out["grad_norms"].astype("<f4").tobytes()]
    return b"".join(parts)


def read_state(path):
    """Parses a state file into a dict; a reader written from the format above, so that
    writing then reading checks the format itself."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(dtype, count):
        nonlocal pos
        a = np.frombuffer(data, dtype=dtype, count=count, offset=pos)
        pos += a.nbytes
        return a

    h = take("<i4", 256)
    if h[0] != STATE_MAGIC or h[1] != STATE_VERSION:
        sys.exit(f"{path}: expected magic {STATE_MAGIC} version {STATE_VERSION}, found {h[0]} {h[1]}\n"
                 f"HINT: python dev/reference/gpt2_reference.py regenerates it")
    s = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), Vp=int(h[7]),
             B=int(h[8]), T=int(h[9]), init=int(h[10]), seed=int(h[11]), steps=int(h[12]))
    assert not h[13:].any(), "header tail must be zero"
    s["hyper"] = take("<f4", 16)
    BT = s["B"] * s["T"]
    s["inputs"], s["targets"] = take("<i4", BT), take("<i4", BT)
    records = []
    for _ in range(1 + 16):
        numel, stride, count = struct.unpack_from("<qqq", data, pos)
        pos += 24
        assert count == -(-numel // stride), "count must be ceil(numel/stride)"
        records.append((numel, stride, take("<f4", count)))
    s["logits"], s["grads"] = records[0], records[1:]
    s["loss"] = take("<f4", 1)[0]
    s["losses"], s["grad_norms"] = take("<f4", s["steps"]), take("<f4", s["steps"])
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return s


def check_roundtrip(path, cfg, inputs, targets, out):
    """Reads the state file back and asserts every field equals what we computed."""
    s = read_state(path)
    for k in ("maxT", "V", "L", "NH", "C", "B", "T", "init", "seed", "steps"):
        assert s[k] == cfg[k], k
    assert s["Vp"] == padded_vocab(cfg["V"])
    assert s["hyper"][0] == np.float32(cfg["lr"]) and s["hyper"][5] == np.float32(GRAD_CLIP)
    assert (s["inputs"] == inputs.reshape(-1)).all() and (s["targets"] == targets.reshape(-1)).all()
    for (numel, stride, vals), full in zip([s["logits"]] + s["grads"], [out["logits"]] + out["grads"]):
        assert numel == full.size and np.array_equal(vals, full.reshape(-1)[::stride])
    assert s["loss"] == out["loss"]
    assert np.array_equal(s["losses"], out["losses"]) and np.array_equal(s["grad_norms"], out["grad_norms"])
    assert s["losses"][0] == s["loss"]
    if all(stride == 1 for _, stride, _ in s["grads"]):
        # stored whole, the gradients must reproduce the recorded step-1 norm
        norm = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for _, _, v in s["grads"]))
        assert abs(norm - s["grad_norms"][0]) <= 1e-5 * norm, (norm, s["grad_norms"][0])

# -----------------------------------------------------------------------------
# main


def print_rng_crosscheck(weights):
    """Values for checking the C port of the counter generator."""
    wte, ln1w = weights[0].reshape(-1), weights[2].reshape(-1)
    print("  counter-init cross-check (seed 1337), float32 as %.9g and bit pattern:")
    for name, idx, arr in [("wte", range(4), wte), ("ln1w", range(4), ln1w), ("wte", [1000000], wte)]:
        for i in idx:
            v = arr[i]
            print(f"    {name}[{i}] = {v:.9g}  (0x{v.view(np.uint32):08x})")
    print("  per-tensor float64 sums of the float32 weights:")
    for name, w in zip(PARAM_NAMES, weights):
        print(f"    {name:9s} {w.astype(np.float64).sum():+.10e}")


def build(name, check_only):
    cfg = CONFIGS[name]
    t0 = time.time()
    print(f"[{name}] V={cfg['V']} Vp={padded_vocab(cfg['V'])} maxT={cfg['maxT']} L={cfg['L']} "
          f"NH={cfg['NH']} C={cfg['C']} B={cfg['B']} T={cfg['T']} seed={cfg['seed']}")
    model_path = os.path.join(FIXTURES, f"gpt2_{name}_model.bin")
    state_path = os.path.join(FIXTURES, f"gpt2_{name}_state.bin")
    if cfg["init"] == INIT_FROM_FILE:
        weights = init_weights_torch(cfg)
        mbytes = model_bytes(cfg, weights)
        if check_only:
            with open(model_path, "rb") as f:
                assert f.read() == mbytes, f"{model_path} differs from a fresh run"
        else:
            write_atomic(model_path, mbytes)
        # from here on, use what the C side will read, not what we hold in memory
        loaded = read_model(model_path, cfg)
        assert all(np.array_equal(a, b) for a, b in zip(weights, loaded))
        weights = [w.copy() for w in loaded]
    else:
        weights = init_weights_counter(cfg)
        print_rng_crosscheck(weights)
    inputs, targets = make_batch(cfg)
    out = run_reference(cfg, weights, inputs, targets)
    sbytes = state_bytes(cfg, inputs, targets, out)
    if check_only:
        with open(state_path, "rb") as f:
            assert f.read() == sbytes, f"{state_path} differs from a fresh run"
    else:
        write_atomic(state_path, sbytes)
    check_roundtrip(state_path, cfg, inputs, targets, out)
    print(f"  loss {out['loss']:.6f}")
    print("  losses     " + " ".join(f"{x:.6f}" for x in out["losses"]))
    print("  grad norms " + " ".join(f"{x:.6f}" for x in out["grad_norms"]))
    sizes = f"{os.path.getsize(state_path)} bytes"
    if cfg["init"] == INIT_FROM_FILE:
        sizes += f", model {os.path.getsize(model_path)} bytes"
    verb = "matches" if check_only else "wrote"
    print(f"  {verb} {os.path.relpath(state_path)} ({sizes}) in {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser(description="Writes the GPT-2 debug-state fixtures for test_gpt2.c.")
    ap.add_argument("--check", action="store_true",
                    help="recompute and compare with the fixtures on disk instead of writing (default: write)")
    ap.add_argument("-c", "--config", choices=["all"] + list(CONFIGS), default="all",
                    help="which configuration to build (default: all)")
    args = ap.parse_args()
    # float64 CPU kernels are deterministic run to run; we also ask torch to refuse any
    # op that is not, so a future torch cannot quietly break the identical-bytes promise
    torch.use_deterministic_algorithms(True)
    os.makedirs(FIXTURES, exist_ok=True)
    for name in (CONFIGS if args.config == "all" else [args.config]):
        build(name, args.check)


if __name__ == "__main__":
    main()
