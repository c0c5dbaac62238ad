"""
The independent reference for infer.c: GPT-2 inference from Hugging Face model directories.

What it does
    infer.c loads Hugging Face GPT-2 directories (config.json + model.safetensors, float32,
    bfloat16 or float16 weights), runs prefill + KV-cache greedy decoding, and exports our
    llm.c checkpoints to that format. This script makes the "truth" its tests compare with,
    using Hugging Face `transformers` itself (not our own GPT-2), in float64:

    1. Three tiny HF model directories, written by transformers' own save_pretrained:
           GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=128, n_embd=64, n_layer=2,
                                      n_head=4, activation_function="gelu_new",
                                      bos_token_id=None, eos_token_id=None,
                                      initializer_range=0.2))
       after torch.manual_seed(1337) and HF's own init (normal(0, initializer_range); 0.2,
       not HF's 0.02, so that greedy decoding does not just repeat one token: with 0.02 the
       tied embedding dominates and each prompt decodes to 1 or 2 distinct tokens, with 0.2
       to 16-25), plus noise on every bias and every
       LayerNorm parameter (HF's init makes biases exactly 0 and LayerNorms exactly 1/0, so
       a bias or LayerNorm our loader put in the wrong place could not show):
           LayerNorm weights += 0.1 * randn,  every bias (LayerNorm's too) += 0.02 * randn
       (drawn from torch's generator right after the init, in named_parameters() order).
           fixtures/hf_tiny_fp32/  the weights as float32 (safetensors dtype F32)
           fixtures/hf_tiny_bf16/  the same model cast to bfloat16 (BF16)
           fixtures/hf_tiny_fp16/  the same model cast to float16 (F16)
       Each holds config.json and model.safetensors only. save_pretrained also writes a
       generation_config.json (it does for every model that can generate); we delete it:
       it holds nothing infer.c needs and from_pretrained/generate do not need it either.
       bos/eos are null: this random model has no end-of-text token, so nothing may stop a
       generation early (HF's defaults, 50256, do not even exist in a 300-token vocabulary).

    2. For each directory, fixtures/infer_tiny_{fp32,bf16,fp16}.bin: 4 prompts (token ids
       from np.random.default_rng(PROMPT_SEED), lengths 1, 7, 16, 33), each greedy-decoded
       for G=64 new tokens by a plain loop (whole sequence recomputed each step, argmax of
       the last row), then the teacher-forced logits at every position of prompt + 64
       tokens. The model is the saved directory loaded back with from_pretrained (eager
       attention, eval mode) and cast to float64, so it uses exactly the stored (rounded)
       weights; every parameter is checked against the safetensors file. model.generate()
       (KV cache, do_sample=False, min_new_tokens = max_new_tokens = 64, no eos) must give
       the same tokens. For fp32 the smallest gap between the top two logits over all
       greedy steps must be >= 1e-3 (we refuse to write otherwise), so an fp32 C
       implementation (logit error ~1e-5) must produce the same 64 tokens; bf16/fp16 just
       record their own greedy tokens (their gaps are printed, not required).

    3. Every GPT-2 size (gpt2, gpt2-medium, gpt2-large, gpt2-xl; n_positions 1024, vocab
       50257): fixtures/gpt2_hf_configs/<name>.json, the config.json save_pretrained writes
       for that size (checked byte for byte on the tiny model), and
       fixtures/gpt2_hf_layouts.txt, the tensors save_pretrained stores in model.safetensors
       for each size (model built on the meta device: no memory; the rule "state_dict()
       minus tied aliases" is checked against the real tiny file and against transformers'
       own remove_tied_weights_from_state_dict).

    4. --check-export (needs ./convert, `make convert`): runs
           ./convert -i dev/reference/fixtures/gpt2_tiny_model.bin -o <tmpdir>
       then checks (a) every tensor of tmpdir/model.safetensors against our own reading of
       gpt2_tiny_model.bin, bit for bit (Conv1D weights are the transposes of our (out, in)
       ones, wte loses the padding rows V..Vp-1), with an independent parser of the
       safetensors format, (b) GPT2LMHeadModel.from_pretrained(tmpdir) reports no missing,
       unexpected or mismatched key, has the right config and exactly our weights, and its
       float64 logits equal those of gpt2_reference.py's own GPT-2 on the same weights,
       (c) writes fixtures/infer_export.bin (the 4 prompts truncated to maxT=32: lengths 1,
       7, 16, 32; G=0) and fixtures/infer_export.fnv1a64 (FNV-1a 64 of the two exported
       files, so the C test can check without Python that it still writes the bytes
       transformers accepted). --check-export --check compares with those files instead.
       --fake-infer is a TEST AID ONLY: a Python exporter written from the safetensors spec
       stands in for ./convert, and everything is written to a temporary directory, never to
       fixtures/ (the export fixtures must come from the real binary).

How to run
    python dev/reference/infer_reference.py                  # writes items 1-3 (~10 s)
    python dev/reference/infer_reference.py --check          # recomputes 1-3, compares
    make convert && python dev/reference/infer_reference.py --check-export          # item 4
    python dev/reference/infer_reference.py --check-export --check   # compares item 4
    Pinned: transformers 5.24.0, safetensors 0.8.0, torch 2.9.1, numpy 2.4.6 (a warning if
    others are installed). Runs offline: HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1 are
    set before transformers is imported, and nothing is downloaded. CPU only.

Logits file format (fixtures/infer_tiny_*.bin, fixtures/infer_export.bin), little-endian
    int32[256] header: [0] 20261130 magic, [1] 1 version, [2] P prompts, [3] V, [4] G new
        tokens per prompt, [5..15] 0, [16 + p] length of prompt p (p < P); rest 0
    then for each prompt p in order:
        int32 tokens[len_p + G]             the prompt, then its G greedy tokens
        float32 logits[(len_p + G) * V]     row i = the logits after reading tokens[0..i]
    (float64 values rounded once to float32). read_logits() below is a reader.

safetensors (what transformers 5.24.0 writes, see the README for the full listing)
    u64 LE header length N, N bytes of JSON (padded with spaces to a multiple of 8),
    then the data. The JSON maps each key to {"dtype", "shape", "data_offsets": [begin,
    end)} (offsets relative to the data start) plus "__metadata__": {"format": "pt"};
    transformers' file lists the keys sorted, and stores the data in that order. Keys are
    "transformer.wte.weight", "transformer.h.<l>.attn.c_attn.weight", ...; the tied
    lm_head.weight is not stored. Conv1D weights are stored (in, out).
"""

import argparse
import copy
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch
import safetensors
from safetensors import safe_open
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, GenerationConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))

PINNED = {"transformers": "5.24.0", "safetensors": "0.8.0", "torch": "2.9.1", "numpy": "2.4.6"}

LOGITS_MAGIC, LOGITS_VERSION = 20261130, 1
MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3   # llm.c checkpoint

SEED = 1337                       # torch.manual_seed before building the tiny model
PROMPT_SEED = 1337                # np.random.default_rng(PROMPT_SEED) draws the prompts
PROMPT_LENS = (1, 7, 16, 33)
G = 64                            # greedy tokens per prompt
MIN_GAP_FP32 = 1e-3               # top-1 minus top-2 logit, at every fp32 greedy step
LN_WEIGHT_NOISE, BIAS_NOISE = 0.1, 0.02

# initializer_range 0.2 instead of HF's 0.02: with 0.02 the tied embedding dominates and
# greedy decoding just repeats one token (1-2 distinct tokens per prompt), a weak test of
# decoding; with 0.2 the 4 prompts decode to 16, 20, 25 and 23 distinct tokens
TINY = dict(vocab_size=300, n_positions=128, n_embd=64, n_layer=2, n_head=4,
            activation_function="gelu_new", bos_token_id=None, eos_token_id=None,
            initializer_range=0.2)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ST_DTYPE = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}

SIZES = {  # name: (n_layer, n_embd, n_head)
    "gpt2": (12, 768, 12),
    "gpt2-medium": (24, 1024, 16),
    "gpt2-large": (36, 1280, 20),
    "gpt2-xl": (48, 1600, 25),
}

# -----------------------------------------------------------------------------
# small helpers


def check_versions():
    found = {"transformers": transformers.__version__, "safetensors": safetensors.__version__,
             "torch": torch.__version__.split("+")[0], "numpy": np.__version__}
    for k, v in PINNED.items():
        if found[k] != v:
            print(f"WARNING: {k} {found[k]} installed, the fixtures were made with {v}"
                  f" (pip install -r dev/reference/requirements.txt)")


def write_atomic(path, data):
    """Write name.tmp, fsync, rename: a crash never leaves a half-written fixture."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def make_prompts():
    rng = np.random.default_rng(PROMPT_SEED)
    prompts = [rng.integers(0, TINY["vocab_size"], size=n).astype(np.int64) for n in PROMPT_LENS]
    assert all(int(p.max()) < TINY["vocab_size"] and int(p.min()) >= 0 for p in prompts)
    return prompts


def rel(p):
    return os.path.relpath(p)

# -----------------------------------------------------------------------------
# safetensors: an independent reader and writer, from the format's spec

ST_NP = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
         "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8")}


def st_parse(data):
    """Parses safetensors bytes: returns (metadata, {key: (dtype, shape, raw bytes)}, order
    of the keys in the JSON). Checks the spec's rules: the JSON starts with '{', data
    offsets are in range, the tensors tile the data area exactly (no gap, no overlap)."""
    assert len(data) >= 8, "file shorter than its 8-byte header length"
    (n,) = struct.unpack_from("<Q", data, 0)
    assert 8 + n <= len(data), f"header length {n} beyond the end of the file"
    raw = data[8:8 + n]
    assert raw[:1] == b"{", "the JSON header must start with '{'"
    header = json.loads(raw.decode("utf-8"))
    meta = header.pop("__metadata__", None)
    body = data[8 + n:]
    tensors, spans = {}, []
    for key, info in header.items():
        assert set(info) == {"dtype", "shape", "data_offsets"}, (key, info)
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        assert dt in ST_NP, f"{key}: dtype {dt}"
        assert 0 <= b <= e <= len(body), (key, b, e, len(body))
        assert e - b == math.prod(shape) * ST_NP[dt].itemsize, f"{key}: size does not match shape"
        tensors[key] = (dt, tuple(shape), body[b:e])
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, f"data offsets leave a gap or overlap at {pos}"
        pos = e
    assert pos == len(body), f"{len(body) - pos} bytes after the last tensor"
    return meta, tensors, list(header)


def st_array(dt, shape, raw):
    """raw safetensors bytes -> float64 numpy array (BF16 widened by its bit pattern)."""
    a = np.frombuffer(raw, dtype=ST_NP[dt])
    if dt == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64).reshape(shape)


def st_write(tensors, metadata=None):
    """tensors: list of (key, float32 numpy array), written in that order. Header padded
    with spaces to a multiple of 8 bytes, as the safetensors library does."""
    header, offset, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for key, arr in tensors:
        blob = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[key] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    js = json.dumps(header, separators=(",", ":")).encode("utf-8")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(blobs)

# -----------------------------------------------------------------------------
# 1. the tiny Hugging Face models


def build_tiny_model():
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(GPT2Config(**TINY))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name and name.endswith(".weight"):
                p.add_(LN_WEIGHT_NOISE * torch.randn(p.shape, dtype=p.dtype))
            elif name.endswith(".bias"):
                p.add_(BIAS_NOISE * torch.randn(p.shape, dtype=p.dtype))
    model.eval()
    # the noise really reached every bias and LayerNorm
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            assert (p != 0).all(), name
        if ".ln_" in name and name.endswith(".weight"):
            assert (p != 1).all(), name
    return model


def save_hf_dir(model, kind, out_dir):
    """save_pretrained into out_dir (created fresh); leaves config.json + model.safetensors."""
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    m = copy.deepcopy(model).to(DTYPES[kind])
    m.save_pretrained(out_dir)
    files = sorted(os.listdir(out_dir))
    assert files == ["config.json", "generation_config.json", "model.safetensors"], files
    os.remove(os.path.join(out_dir, "generation_config.json"))
    for f in ("config.json", "model.safetensors"):
        os.chmod(os.path.join(out_dir, f), 0o644)  # safetensors writes 0600
    return m


def check_saved_dir(model_dtype, kind, d):
    """The saved file holds exactly the expected keys, dtype, metadata and values."""
    data = read_bytes(os.path.join(d, "model.safetensors"))
    meta, tensors, order = st_parse(data)
    assert meta == {"format": "pt"}, meta
    assert order == sorted(order), "transformers writes the keys sorted"
    expect = saved_layout(model_dtype)
    assert set(tensors) == set(k for k, _ in expect), set(tensors) ^ set(k for k, _ in expect)
    sd = model_dtype.state_dict()
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert sorted(f.keys()) == sorted(tensors)
        for key, shape in expect:
            dt, sh, raw = tensors[key]
            assert dt == ST_DTYPE[kind] and sh == tuple(shape), (key, dt, sh)
            lib = f.get_tensor(key)
            assert lib.dtype == DTYPES[kind] and torch.equal(lib, sd[key]), key
            assert np.array_equal(st_array(dt, sh, raw), lib.to(torch.float64).numpy()), key
    cfg = json.loads(read_bytes(os.path.join(d, "config.json")))
    assert cfg["dtype"] == str(DTYPES[kind]).split(".")[1], cfg["dtype"]
    return tensors


def saved_layout(model):
    """What save_pretrained stores: state_dict() (which already leaves out non-persistent
    buffers) minus every key that aliases a parameter met earlier (the tied lm_head.weight),
    in state_dict order. Works on the meta device (identity of the Parameter objects)."""
    sd = model.state_dict(keep_vars=True)
    seen, out = set(), []
    for key, t in sd.items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append((key, list(t.shape)))
    try:  # transformers' own rule, where this version has it
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
        theirs = remove_tied_weights_from_state_dict(model.state_dict(), model)
        assert list(theirs) == [k for k, _ in out], (list(theirs), out)
    except ImportError:
        print("  note: transformers has no remove_tied_weights_from_state_dict to cross-check with")
    return out

# -----------------------------------------------------------------------------
# 2. logits


def load_f64(d, kind=None, expect_tensors=None):
    """from_pretrained(d) with eager attention, then cast to float64: the stored weights,
    upcast exactly. Checks nothing was missing, unexpected or re-initialised."""
    model, info = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager", output_loading_info=True)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info.get(k), f"{d}: {k} = {info.get(k)}"
    if kind is not None:
        assert model.dtype == DTYPES[kind], (model.dtype, kind)
    model = model.to(torch.float64).eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    assert model.lm_head.weight is model.transformer.wte.weight, "lm_head must be tied to wte"
    if expect_tensors is not None:
        sd = model.state_dict()
        for key, (dt, sh, raw) in expect_tensors.items():
            assert np.array_equal(sd[key].numpy(), st_array(dt, sh, raw)), f"{key} differs after loading"
    return model


@torch.no_grad()
def greedy_manual(model, prompt):
    """Plain greedy loop: the whole sequence recomputed each step. Returns the G new tokens,
    the last-row logits of each step and the top-1 minus top-2 gap of each step."""
    seq = [int(t) for t in prompt]
    rows, gaps = [], []
    for _ in range(G):
        logits = model(torch.tensor([seq])).logits[0, -1]
        top = torch.topk(logits, 2)
        gaps.append(float(top.values[0] - top.values[1]))
        nxt = int(torch.argmax(logits))
        assert nxt == int(top.indices[0])
        rows.append(logits.numpy().copy())
        seq.append(nxt)
    return np.array(seq[len(prompt):], dtype=np.int64), np.array(rows), np.array(gaps)


@torch.no_grad()
def greedy_generate(model, prompt):
    ids = torch.tensor([list(map(int, prompt))])
    gc = GenerationConfig(do_sample=False, max_new_tokens=G, min_new_tokens=G, num_beams=1,
                          eos_token_id=None, bos_token_id=None, pad_token_id=0, use_cache=True)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
    assert out.shape == (1, len(prompt) + G), out.shape
    assert torch.equal(out[0, :len(prompt)], ids[0])
    return out[0, len(prompt):].numpy().astype(np.int64)


@torch.no_grad()
def teacher_forced(model, tokens):
    return model(torch.tensor([list(map(int, tokens))])).logits[0].numpy()


def compute_logits(model, prompts, gen, need_gap=None):
    """For each prompt: greedy tokens (manual loop, cross-checked with generate()) when gen,
    then teacher-forced float64 logits of every position. Returns (records, min gap)."""
    records, all_gaps = [], []
    for p in prompts:
        if gen:
            new, rows, gaps = greedy_manual(model, p)
            via_generate = greedy_generate(model, p)
            assert np.array_equal(new, via_generate), f"generate() differs: {new} vs {via_generate}"
            all_gaps.append(gaps)
            tokens = np.concatenate([p, new])
        else:
            tokens = p
        logits = teacher_forced(model, tokens)
        assert logits.dtype == np.float64 and logits.shape == (len(tokens), model.config.vocab_size)
        if gen:
            n = len(p)
            # the teacher-forced rows are the rows the greedy loop saw, and pick its tokens
            tf = logits[n - 1:n - 1 + G]
            assert np.abs(tf - rows).max() <= 1e-12 * np.abs(rows).max(), np.abs(tf - rows).max()
            assert np.array_equal(np.argmax(tf, axis=1), new)
        records.append((tokens.astype(np.int32), logits))
    min_gap = float(np.concatenate(all_gaps).min()) if all_gaps else None
    return records, min_gap


def logits_bytes(records, V, G_):
    head = np.zeros(256, dtype="<i4")
    head[:5] = [LOGITS_MAGIC, LOGITS_VERSION, len(records), V, G_]
    for p, (tokens, _) in enumerate(records):
        head[16 + p] = len(tokens) - G_
    parts = [head.tobytes()]
    for tokens, logits in records:
        assert logits.shape == (len(tokens), V)
        parts.append(np.ascontiguousarray(tokens, dtype="<i4").tobytes())
        parts.append(np.ascontiguousarray(logits, dtype="<f4").tobytes())
    return b"".join(parts)


def read_logits(path):
    """Reader for the logits format: returns (V, G, [(tokens int32, logits float32 (T, V))])."""
    data = read_bytes(path)
    h = np.frombuffer(data, dtype="<i4", count=256)
    if h[0] != LOGITS_MAGIC or h[1] != LOGITS_VERSION:
        sys.exit(f"{path}: expected magic {LOGITS_MAGIC} version {LOGITS_VERSION}, found {h[0]} {h[1]}\n"
                 f"HINT: python dev/reference/infer_reference.py regenerates it")
    P, V, G_ = int(h[2]), int(h[3]), int(h[4])
    assert not h[5:16].any() and not h[16 + P:].any(), "header padding must be zero"
    pos, out = 1024, []
    for p in range(P):
        T = int(h[16 + p]) + G_
        tokens = np.frombuffer(data, dtype="<i4", count=T, offset=pos)
        pos += 4 * T
        logits = np.frombuffer(data, dtype="<f4", count=T * V, offset=pos).reshape(T, V)
        pos += 4 * T * V
        out.append((tokens, logits))
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return V, G_, out


def check_logits_roundtrip(path, records, V, G_):
    V2, G2, recs = read_logits(path)
    assert (V2, G2, len(recs)) == (V, G_, len(records))
    for (t, l), (t2, l2) in zip(records, recs):
        assert np.array_equal(t, t2) and np.array_equal(l.astype(np.float32), l2)
        assert (t2 >= 0).all() and (t2 < V).all()


def compare_logits(path, records, V, G_):
    """--check: tokens exact, logits equal up to float32 rounding (1e-6 relative)."""
    V2, G2, recs = read_logits(path)
    assert (V2, G2, len(recs)) == (V, G_, len(records)), f"{path}: shape differs"
    worst = 0.0
    for p, ((t, l), (t2, l2)) in enumerate(zip(records, recs)):
        assert np.array_equal(t, t2), f"{path}: prompt {p}: tokens differ"
        ref = l2.astype(np.float64)
        scale = np.maximum(np.abs(ref), np.abs(l)) + 1e-3 * np.abs(ref).max()
        r = float((np.abs(l - ref) / scale).max())
        worst = max(worst, r)
        assert r <= 1e-6, f"{path}: prompt {p}: logits differ by {r:.2e} relative"
    return worst

# -----------------------------------------------------------------------------
# 3. every GPT-2 size: config.json and tensor layout


def size_config(name):
    L, C, NH = SIZES[name]
    return GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=1024, vocab_size=50257)


def saved_config_json(config, dtype="float32"):
    """What save_pretrained writes as config.json: it sets config.dtype and
    config.architectures, then config.save_pretrained -> to_json_string(use_diff=True)."""
    config = copy.deepcopy(config)
    config.dtype = dtype
    config.architectures = ["GPT2LMHeadModel"]
    return config.to_json_string()


def layouts_text():
    lines = []
    for name in SIZES:
        with torch.device("meta"):
            model = GPT2LMHeadModel(size_config(name))
        lines.append(f"model {name}")
        for key, shape in saved_layout(model):
            lines.append(f"{key} {'x'.join(map(str, shape))}")
    return "\n".join(lines) + "\n"

# -----------------------------------------------------------------------------
# items 1-3: write or check


def build_all(check_only):
    t0 = time.time()
    prompts = make_prompts()
    print(f"prompts (seed {PROMPT_SEED}): lengths {[len(p) for p in prompts]}; first: {prompts[1].tolist()}")
    model = build_tiny_model()
    tmp_root = tempfile.mkdtemp(prefix="infer_reference_")
    try:
        # item 3's rule, checked against what save_pretrained really stores
        tiny_layout = saved_layout(model)
        assert [k for k, _ in tiny_layout] == [k for k in model.state_dict() if k != "lm_head.weight"]
        for kind in DTYPES:
            d_fix = os.path.join(FIXTURES, f"hf_tiny_{kind}")
            d_new = os.path.join(tmp_root, f"hf_tiny_{kind}")
            m_kind = save_hf_dir(model, kind, d_new)
            tensors = check_saved_dir(m_kind, kind, d_new)
            cfg_text = read_bytes(os.path.join(d_new, "config.json")).decode()
            assert cfg_text == saved_config_json(GPT2Config(**TINY), str(DTYPES[kind]).split(".")[1]), \
                "saved_config_json() does not reproduce save_pretrained's config.json"
            if check_only:
                for f in ("config.json", "model.safetensors"):
                    same = read_bytes(os.path.join(d_new, f)) == read_bytes(os.path.join(d_fix, f))
                    assert same, f"{rel(os.path.join(d_fix, f))} differs from a fresh run"
                assert sorted(os.listdir(d_fix)) == ["config.json", "model.safetensors"], os.listdir(d_fix)
            else:
                if os.path.exists(d_fix):
                    shutil.rmtree(d_fix)
                shutil.copytree(d_new, d_fix)
            # from here on, what is on disk in fixtures/
            tensors_fix = check_saved_dir(m_kind, kind, d_fix)
            assert all(tensors_fix[k] == tensors[k] for k in tensors)
            f64 = load_f64(d_fix, kind, tensors_fix)
            records, gap = compute_logits(f64, prompts, gen=True)
            print(f"  {kind}: smallest top-1 minus top-2 gap over {len(prompts) * G} greedy steps: {gap:.3e}")
            if kind == "fp32":
                assert gap >= MIN_GAP_FP32, (f"fp32 greedy gap {gap:.3e} < {MIN_GAP_FP32}: "
                                             f"change PROMPT_SEED and document it")
            path = os.path.join(FIXTURES, f"infer_tiny_{kind}.bin")
            data = logits_bytes(records, TINY["vocab_size"], G)
            if check_only:
                worst = compare_logits(path, records, TINY["vocab_size"], G)
                same = read_bytes(path) == data
                print(f"    {rel(path)}: matches ({'identical bytes' if same else f'max rel diff {worst:.1e}'})")
            else:
                write_atomic(path, data)
                check_logits_roundtrip(path, records, TINY["vocab_size"], G)
            for p, (tokens, _) in enumerate(records):
                print(f"    prompt {p} (len {PROMPT_LENS[p]}): greedy "
                      f"{' '.join(map(str, tokens[PROMPT_LENS[p]:][:16]))} ...")
        # item 3
        cfg_dir = os.path.join(FIXTURES, "gpt2_hf_configs")
        os.makedirs(cfg_dir, exist_ok=True)
        for name in SIZES:
            text = saved_config_json(size_config(name)).encode()
            path = os.path.join(cfg_dir, f"{name}.json")
            if check_only:
                assert read_bytes(path) == text, f"{rel(path)} differs from a fresh run"
            else:
                write_atomic(path, text)
            c = json.loads(read_bytes(path))
            assert (c["n_layer"], c["n_embd"], c["n_head"], c["n_positions"], c["vocab_size"]) == \
                SIZES[name] + (1024, 50257), c
        text = layouts_text().encode()
        path = os.path.join(FIXTURES, "gpt2_hf_layouts.txt")
        if check_only:
            assert read_bytes(path) == text, f"{rel(path)} differs from a fresh run"
        else:
            write_atomic(path, text)
        check_layouts(path)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    verb = "everything matches" if check_only else "wrote fixtures"
    print(f"{verb} in {time.time() - t0:.1f} s")
    for f in sorted(os.listdir(FIXTURES)):
        if f.startswith(("hf_tiny_", "infer_", "gpt2_hf_")):
            p = os.path.join(FIXTURES, f)
            size = sum(os.path.getsize(os.path.join(p, x)) for x in os.listdir(p)) if os.path.isdir(p) \
                else os.path.getsize(p)
            print(f"  {rel(p)}: {size} bytes")


def check_layouts(path):
    """Re-reads the layout file; the parameter count of each size must be GPT-2's."""
    models, cur = {}, None
    for line in read_bytes(path).decode().splitlines():
        a, b = line.split(" ")
        if a == "model":
            cur = models.setdefault(b, [])
        else:
            cur.append((a, tuple(int(x) for x in b.split("x"))))
    assert list(models) == list(SIZES)
    for name, tensors in models.items():
        L, C, NH = SIZES[name]
        n = sum(math.prod(s) for _, s in tensors)
        assert n == 50257 * C + 1024 * C + L * 12 * C * C + L * 13 * C + 2 * C, (name, n)
        assert len(tensors) == 2 + 12 * L + 2 and all(k.startswith("transformer.") for k, _ in tensors)
        print(f"  layout {name}: {len(tensors)} tensors, {n} parameters")

# -----------------------------------------------------------------------------
# 4. --check-export


LLMC_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
              "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# llm.c tensor -> (HF key pattern, transposed?) ; per-layer ones have {l}
HF_OF = {
    "wte": ("transformer.wte.weight", False), "wpe": ("transformer.wpe.weight", False),
    "ln1w": ("transformer.h.{l}.ln_1.weight", False), "ln1b": ("transformer.h.{l}.ln_1.bias", False),
    "qkvw": ("transformer.h.{l}.attn.c_attn.weight", True), "qkvb": ("transformer.h.{l}.attn.c_attn.bias", False),
    "attprojw": ("transformer.h.{l}.attn.c_proj.weight", True),
    "attprojb": ("transformer.h.{l}.attn.c_proj.bias", False),
    "ln2w": ("transformer.h.{l}.ln_2.weight", False), "ln2b": ("transformer.h.{l}.ln_2.bias", False),
    "fcw": ("transformer.h.{l}.mlp.c_fc.weight", True), "fcb": ("transformer.h.{l}.mlp.c_fc.bias", False),
    "fcprojw": ("transformer.h.{l}.mlp.c_proj.weight", True),
    "fcprojb": ("transformer.h.{l}.mlp.c_proj.bias", False),
    "lnfw": ("transformer.ln_f.weight", False), "lnfb": ("transformer.ln_f.bias", False),
}


def read_llmc(path):
    """llm.c fp32 checkpoint: int32[256] header [20240326, 3, maxT, V, L, NH, C, Vp], then
    the 16 tensors as float32. Returns (dims dict, {name: array})."""
    data = read_bytes(path)
    h = np.frombuffer(data, dtype="<i4", count=256)
    assert h[0] == MODEL_MAGIC and h[1] == MODEL_VERSION_FP32, f"{path}: header {h[:2]}"
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
              (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    ws, pos = {}, 1024
    for name, s in zip(LLMC_NAMES, shapes):
        n = math.prod(s)
        ws[name] = np.frombuffer(data, dtype="<f4", count=n, offset=pos).reshape(s)
        pos += 4 * n
    assert pos == len(data), f"{path}: {len(data) - pos} trailing bytes"
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), ws


def hf_tensors_from_llmc(dims, ws):
    """The HF tensors (float32, HF shapes) in the order of our table, padding rows dropped."""
    out = []
    for name in LLMC_NAMES:
        pattern, transpose = HF_OF[name]
        w = ws[name]
        if name == "wte":
            w = w[:dims["V"]]
        if "{l}" in pattern:
            for l in range(dims["L"]):
                out.append((pattern.format(l=l), w[l].T if transpose else w[l]))
        else:
            out.append((pattern, w))
    return [(k, np.ascontiguousarray(v)) for k, v in out]


def fake_infer_export(model_path, out_dir):
    """TEST AID ONLY (--fake-infer): stands in for `./convert -i model -o out_dir` until convert.c
    exists, so the checks below can be tested. Never used to write fixtures."""
    dims, ws = read_llmc(model_path)
    os.makedirs(out_dir, exist_ok=True)
    cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
           "bos_token_id": None, "eos_token_id": None, "layer_norm_epsilon": 1e-05,
           "model_type": "gpt2", "n_embd": dims["C"], "n_head": dims["NH"], "n_inner": None,
           "n_layer": dims["L"], "n_positions": dims["maxT"], "tie_word_embeddings": True,
           "vocab_size": dims["V"]}
    write_atomic(os.path.join(out_dir, "config.json"), (json.dumps(cfg, indent=2) + "\n").encode())
    write_atomic(os.path.join(out_dir, "model.safetensors"),
                 st_write(hf_tensors_from_llmc(dims, ws), {"format": "pt"}))


def check_export(check_only, fake, convert_path, keep):
    t0 = time.time()
    model_path = os.path.join(FIXTURES, "gpt2_tiny_model.bin")
    tmp = tempfile.mkdtemp(prefix="infer_export_")
    out_dir = os.path.join(tmp, "hf")
    # the fake path writes its results next to the export, never into fixtures/
    res_dir = tmp if fake else FIXTURES
    try:
        if fake:
            print("--fake-infer: TEST AID, a Python exporter stands in for ./convert; "
                  f"results go to {tmp}, not to fixtures/")
            fake_infer_export(model_path, out_dir)
        else:
            exe = os.path.normpath(os.path.join(REPO_ROOT, convert_path))
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                sys.exit(f"error: {exe} not found or not executable; build it first with `make convert`")
            os.makedirs(out_dir)
            cmd = [exe, "-i", os.path.relpath(model_path, REPO_ROOT), "-o", out_dir]
            print("running: " + " ".join(cmd))
            r = subprocess.run(cmd, cwd=REPO_ROOT)
            if r.returncode != 0:
                sys.exit(f"error: {' '.join(cmd)} exited with status {r.returncode}")
        files = sorted(os.listdir(out_dir))
        assert {"config.json", "model.safetensors"} <= set(files), f"export wrote {files}"
        cfg_bytes = read_bytes(os.path.join(out_dir, "config.json"))
        st_bytes = read_bytes(os.path.join(out_dir, "model.safetensors"))

        # (a) bit for bit against our own reading of the llm.c checkpoint
        dims, ws = read_llmc(model_path)
        meta, tensors, order = st_parse(st_bytes)
        expect = dict(hf_tensors_from_llmc(dims, ws))
        print(f"(a) {len(tensors)} tensors, metadata {meta}, first keys {order[:3]}")
        assert meta is None or isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
        if meta != {"format": "pt"}:
            print(f"    note: __metadata__ is {meta}, transformers writes {{'format': 'pt'}}")
        extra = set(tensors) - set(expect) - {"lm_head.weight"}
        missing = set(expect) - set(tensors)
        assert not extra and not missing, f"unexpected keys {sorted(extra)}, missing keys {sorted(missing)}"
        for key, want in expect.items():
            dt, shape, raw = tensors[key]
            assert dt == "F32", f"{key}: dtype {dt}, expected F32 (the checkpoint is fp32)"
            assert shape == want.shape, f"{key}: shape {shape}, expected {want.shape}"
            assert raw == want.astype("<f4").tobytes(), f"{key}: values differ from the checkpoint"
        if "lm_head.weight" in tensors:
            dt, shape, raw = tensors["lm_head.weight"]
            assert dt == "F32" and raw == expect["transformer.wte.weight"].tobytes(), "lm_head.weight != wte"
            print("    note: lm_head.weight is stored (transformers leaves the tied copy out)")
        with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:  # the library agrees
            assert sorted(f.keys()) == sorted(tensors)
            for key in tensors:
                assert np.array_equal(f.get_tensor(key).numpy(), np.frombuffer(tensors[key][2], "<f4")
                                      .reshape(tensors[key][1])), key
        print("    every tensor equals the checkpoint bit for bit")

        # (b) transformers loads it, with the right config and exactly our weights
        model, info = GPT2LMHeadModel.from_pretrained(out_dir, attn_implementation="eager",
                                                      output_loading_info=True)
        for k, v in info.items():
            assert not v, f"(b) from_pretrained: {k} = {v}"
        c = model.config
        want = dict(n_layer=dims["L"], n_head=dims["NH"], n_embd=dims["C"], n_positions=dims["maxT"],
                    vocab_size=dims["V"], layer_norm_epsilon=1e-5, model_type="gpt2",
                    tie_word_embeddings=True, scale_attn_weights=True,
                    scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False)
        for k, v in want.items():
            assert getattr(c, k) == v, f"(b) config.{k} = {getattr(c, k)!r}, expected {v!r}"
        assert c.activation_function in ("gelu_new", "gelu_pytorch_tanh"), c.activation_function
        assert c.n_inner in (None, 4 * dims["C"]), c.n_inner
        assert model.dtype == torch.float32, model.dtype
        sd = model.state_dict()
        for key, w in expect.items():
            assert np.array_equal(sd[key].numpy(), w), f"(b) {key} differs after from_pretrained"
        assert model.lm_head.weight is model.transformer.wte.weight
        print(f"(b) from_pretrained: no missing/unexpected/mismatched keys, config "
              f"L={c.n_layer} NH={c.n_head} C={c.n_embd} maxT={c.n_positions} V={c.vocab_size}, "
              f"{c.activation_function}, weights identical")

        # (c) float64 logits of the prompts truncated to maxT
        model = model.to(torch.float64).eval()
        prompts = [p[:dims["maxT"]] for p in make_prompts()]
        records, _ = compute_logits(model, prompts, gen=False)
        # cross-check with our own GPT-2 (gpt2_reference.py) on the llm.c weights
        sys.path.insert(0, HERE)
        import gpt2_reference as ref
        cfg = dict(V=dims["V"], L=dims["L"], NH=dims["NH"], C=dims["C"])
        params = [torch.from_numpy(ws[n].astype(np.float64)) for n in LLMC_NAMES]
        worst = 0.0
        for tokens, logits in records:
            x = torch.from_numpy(tokens.astype(np.int64))[None]
            ours, _ = ref.gpt2_forward(params, x, x, cfg)
            ours = ours[0, :, :dims["V"]].numpy()
            worst = max(worst, float(np.abs(ours - logits).max() / np.abs(logits).max()))
        assert worst <= 1e-12, f"(c) HF and gpt2_reference.py logits differ by {worst:.2e}"
        print(f"(c) float64 logits, prompt lengths {[len(p) for p in prompts]}; "
              f"gpt2_reference.py agrees to {worst:.1e} relative")
        data = logits_bytes(records, dims["V"], 0)
        hashes = (f"config.json {fnv1a64(cfg_bytes):016x}\n"
                  f"model.safetensors {fnv1a64(st_bytes):016x}\n").encode()
        bin_path = os.path.join(res_dir, "infer_export.bin")
        fnv_path = os.path.join(res_dir, "infer_export.fnv1a64")
        if check_only and not fake:
            compare_logits(bin_path, records, dims["V"], 0)
            old = read_bytes(fnv_path)
            assert old == hashes, f"{rel(fnv_path)}: the export's bytes changed:\n{old.decode()}now\n{hashes.decode()}"
            print(f"    {rel(bin_path)} and {rel(fnv_path)} match")
        else:
            write_atomic(bin_path, data)
            write_atomic(fnv_path, hashes)
            check_logits_roundtrip(bin_path, records, dims["V"], 0)
            print(f"    wrote {bin_path} ({len(data)} bytes) and {fnv_path}:")
        print("    " + hashes.decode().replace("\n", "\n    ").rstrip())
        print(f"export checks passed in {time.time() - t0:.1f} s")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="Writes the inference fixtures for infer.c.")
    ap.add_argument("--check", action="store_true",
                    help="recompute and compare with the fixtures on disk instead of writing")
    ap.add_argument("--check-export", action="store_true",
                    help="run ./convert on fixtures/gpt2_tiny_model.bin into a folder, check the export, "
                         "write fixtures/infer_export.{bin,fnv1a64} (compare with --check)")
    ap.add_argument("--convert", default="./convert", help="the convert binary (default ./convert, repo root)")
    ap.add_argument("--fake-infer", action="store_true",
                    help="TEST AID: a Python exporter instead of ./convert; writes nothing to fixtures/")
    ap.add_argument("--keep", action="store_true", help="keep the temporary export directory")
    args = ap.parse_args()
    check_versions()
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    if args.fake_infer and not args.check_export:
        ap.error("--fake-infer goes with --check-export")
    if args.check_export:
        check_export(args.check, args.fake_infer, args.convert, args.keep)
    else:
        os.makedirs(FIXTURES, exist_ok=True)
        build_all(args.check)


if __name__ == "__main__":
    main()
