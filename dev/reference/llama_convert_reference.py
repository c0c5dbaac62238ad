"""
llama_convert_reference.py: the Llama family's files for convert.c, made and checked by
transformers (and llama.cpp's `gguf` package), and what convert must make of them.

Three tiny random models, chosen to catch mistakes (dev/reference/fixtures/):
  llama_gqa3/   LlamaForCausalLM, 6 query heads sharing 2 key/value heads (3 each), an
                untied output head, V=128 L=2 C=96 HS=16 H=64; saved in BF16
  qwen2_gqa4/   Qwen2ForCausalLM, 4 query heads on 1 key/value head, q/k/v biases, tied
                head, V=128 L=1 C=64 HS=16 H=64; F32
  llama_mha3/   LlamaForCausalLM, 3 heads (odd, no sharing) of 24 channels (3 x 24 = 72, not
                C = 48: head_dim set apart), Llama 3 RoPE scaling, an untied head, V=128 L=1
                C=48 H=64; F32
and GGUF copies of them, written the way llama.cpp's convert_hf_to_gguf.py lays
them out (metadata under the architecture's name; llama's q and k rows reordered per head
so that RoPE pairs neighbours): llama_gqa3.gguf with Q8_0 matrices and F32 norms,
qwen2_gqa4.gguf in F16 (F32 norms and biases). Every GGUF is loaded back by transformers'
own GGUF reader and must give the HF model's weights (Q8_0: its dequantized values; F16:
the weights rounded to fp16), which checks our writer's layout against theirs.

Then ./convert (built first: make convert) turns each source into our Llama model file and
that file back into a Hugging Face folder, which transformers loads: its weights must be
bit for bit the source's (as transformers reads the source) and so its logits. The hashes
of our files go into llama_convert.fnv1a64; test_convert.c holds convert to them.

    python dev/reference/llama_convert_reference.py     # (make reference runs it; ~10 s)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import gguf
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures")
CONVERT = os.path.join(ROOT, "convert")


def fnv1a64(path):
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def make_models():
    torch.manual_seed(20241201)
    specs = {
        "llama_gqa3": (LlamaForCausalLM, LlamaConfig(vocab_size=128, hidden_size=96, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2), torch.bfloat16),
        "qwen2_gqa4": (Qwen2ForCausalLM, Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=True), torch.float32),
        "llama_mha3": (LlamaForCausalLM, LlamaConfig(vocab_size=128, hidden_size=48, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=3, num_key_value_heads=3, head_dim=24, max_position_embeddings=256, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, rope_scaling={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                       "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}), torch.float32),
    }
    models = {}
    for name, (cls, config, dtype) in specs.items():
        model = cls(config).eval()
        with torch.no_grad():  # weights well away from 0 everywhere, norms not all 1
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 0.2) + (1.0 if p.dim() == 1 else 0.0))
        model = model.to(dtype)
        path = os.path.join(OUT, name)
        shutil.rmtree(path, ignore_errors=True)
        model.save_pretrained(path)
        models[name] = model
    return models


def permute(w, heads):
    """llama.cpp's reordering of a llama q or k weight: within each head, row h*HS/2 + i
    (half h of the head, channel i) moves to row 2i + h"""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(name, model, arch, qtype, rope_freqs=None):
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    path = os.path.join(OUT, name + ".gguf")
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_vocab_size(c.vocab_size)
    if c.bos_token_id is not None:
        w.add_bos_token_id(c.bos_token_id)
    if c.eos_token_id is not None:
        w.add_eos_token_id(c.eos_token_id)
    # a tokenizer of single-byte-ish tokens: transformers' GGUF reader wants one
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(c.vocab_size)])
    w.add_token_types([1] * c.vocab_size)
    w.add_token_merges(["t 1"])
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
                 "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
                 "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
                 "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
                 "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
                 "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for key, value in sd.items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if key.startswith("model.layers."):
            layer, rest = key[len("model.layers."):].split(".", 1)
            gname = f"blk.{layer}.{per_layer[rest]}"
            if arch == "llama" and rest == "self_attn.q_proj.weight":
                value = permute(value, c.num_attention_heads)
            if arch == "llama" and rest == "self_attn.k_proj.weight":
                value = permute(value, c.num_key_value_heads)
        else:
            gname = names[key]
        if value.ndim == 1:
            w.add_tensor(gname, value.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gname, value.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(gname, value.astype(np.float16))
        else:
            w.add_tensor(gname, gguf.quants.quantize(value.astype(np.float32), qtype), raw_dtype=qtype)
    if rope_freqs is not None:  # Llama 3's RoPE scaling as llama.cpp's converter writes it
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def same_weights(a, b, what):
    sa, sb = a.state_dict(), b.state_dict()
    if sorted(sa) != sorted(sb):
        sys.exit(f"{what}: tensor names differ: {sorted(set(sa) ^ set(sb))[:4]}")
    for k in sa:
        if not torch.equal(sa[k].float(), sb[k].float()):
            sys.exit(f"{what}: {k} differs (max {(sa[k].float() - sb[k].float()).abs().max().item():.3g})")


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits


LOGITS_MAGIC, LOGITS_VERSION, G = 20261130, 1, 24  # infer_reference.py's logits fixture format


@torch.no_grad()
def infer_fixture(name, model):
    """float64 logits at every position of 3 prompts followed by 24 greedy tokens (a manual
    loop over the whole sequence, cross-checked with generate()), in infer_reference.py's
    format, for test_infer.c and test_infer.cu; returns the smallest top-2 gap"""
    m = model.double().eval()
    rng = np.random.default_rng(sum(map(ord, name)))
    V = m.config.vocab_size
    records, gaps = [], []
    for length in (5, 9, 14):
        tokens = [int(t) for t in rng.integers(0, V, size=length)]
        for _ in range(G):
            row = m(torch.tensor([tokens])).logits[0, -1]
            top = torch.topk(row, 2).values
            gaps.append(float(top[0] - top[1]))
            tokens.append(int(torch.argmax(row)))
        m.generation_config.eos_token_id = None  # (no stopping, and no eos suppressed either)
        prompt = torch.tensor([tokens[:length]])  # (an explicit mask: a prompt may hold the pad id)
        via_generate = m.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=G, do_sample=False,
                                  pad_token_id=0)[0].tolist()
        assert via_generate == tokens, f"{name}: generate() differs from the manual loop"
        logits = m(torch.tensor([tokens])).logits[0].numpy()
        assert np.array_equal(np.argmax(logits[length - 1:-1], axis=1), tokens[length:])
        records.append((np.array(tokens, dtype=np.int32), logits))
    head = np.zeros(256, dtype="<i4")
    head[:5] = [LOGITS_MAGIC, LOGITS_VERSION, len(records), V, G]
    for i, (tokens, _) in enumerate(records):
        head[16 + i] = len(tokens) - G
    with open(os.path.join(OUT, f"llama_infer_{name}.bin"), "wb") as f:
        f.write(head.tobytes())
        for tokens, logits in records:
            f.write(tokens.astype("<i4").tobytes())
            f.write(logits.astype("<f4").tobytes())
    return min(gaps)


def main():
    if not os.path.exists(CONVERT):
        sys.exit("build ./convert first (make convert)")
    models = make_models()
    # llama_mha3 in F32 with its Llama 3 RoPE scaling as llama.cpp writes it: rope_freqs.weight,
    # the divisors of the frequencies, here taken from transformers' own scaled inv_freq
    mha3 = models["llama_mha3"]
    theta, hd = mha3.config.rope_parameters["rope_theta"], mha3.config.head_dim
    plain = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    divisors = (plain / mha3.model.rotary_emb.inv_freq.float()).numpy()
    assert divisors.max() > 1.5 and ((divisors > 1.001) & (divisors < divisors.max() * 0.999)).any(), "no blended frequency"
    ggufs = {"llama_gqa3": write_gguf("llama_gqa3", models["llama_gqa3"], "llama", gguf.GGMLQuantizationType.Q8_0),
             "qwen2_gqa4": write_gguf("qwen2_gqa4", models["qwen2_gqa4"], "qwen2", gguf.GGMLQuantizationType.F16),
             "llama_mha3": write_gguf("llama_mha3", mha3, "llama", gguf.GGMLQuantizationType.F32, rope_freqs=divisors)}
    tokens = [1, 7, 100, 3, 55, 127, 0, 64, 9, 31]
    hashes = []
    with tempfile.TemporaryDirectory() as tmp:
        sources = [(n, os.path.join(OUT, n)) for n in models] + [(n + ".gguf", p) for n, p in ggufs.items()]
        for label, source in sources:
            if label == "llama_mha3.gguf":  # F32 and rope_freqs: it must be the model it was written from
                ref = models["llama_mha3"].float()
            elif source.endswith(".gguf"):  # what transformers makes of it
                ref = AutoModelForCausalLM.from_pretrained(OUT, gguf_file=os.path.basename(source), dtype=torch.float32).eval()
                hf = models[label[:-5]].float()
                expect = ref.state_dict()
                if "q8_0" not in label and "gqa3" not in label:  # F16: the weights rounded to fp16 (norms, biases F32)
                    for k, v in hf.state_dict().items():
                        want = v if v.dim() == 1 else v.half().float()
                        if not torch.equal(expect[k], want):
                            sys.exit(f"{label}: transformers reads {k} other than written")
                else:  # Q8_0: within a quantization step of the weights
                    for k, v in hf.state_dict().items():
                        if (expect[k] - v).abs().max() > 0.02:
                            sys.exit(f"{label}: transformers reads {k} far from what was written")
            else:
                ref = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
            ours_bin = os.path.join(tmp, label + ".bin")
            ours_hf = os.path.join(tmp, label + "_hf")
            subprocess.run([CONVERT, "-i", source, "-o", ours_bin, "-d", "fp32"], check=True, capture_output=True)
            subprocess.run([CONVERT, "-i", ours_bin, "-o", ours_hf], check=True, capture_output=True)
            back = AutoModelForCausalLM.from_pretrained(ours_hf, dtype=torch.float32).eval()
            same_weights(ref, back, label)
            diff = (logits(ref, tokens) - logits(back, tokens)).abs().max().item()
            if diff != 0.0:
                sys.exit(f"{label}: logits differ by {diff}")
            hashes.append(f"{label} {fnv1a64(ours_bin)}")
            print(f"OK      {label}: ./convert -> our file -> HF folder: the weights transformers reads from the source, bit for bit; logits equal")
    with open(os.path.join(OUT, "llama_convert.fnv1a64"), "w") as f:
        f.write("\n".join(hashes) + "\n")
    print("wrote the models, the GGUF files and llama_convert.fnv1a64")
    for name in models:  # what infer must compute on them (the weights as saved: BF16 ones exactly)
        source = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, name), dtype=torch.float32)
        gap = infer_fixture(name, source)
        print(f"wrote llama_infer_{name}.bin: 3 prompts, {G} greedy tokens, smallest top-2 gap {gap:.3g}")


if __name__ == "__main__":
    main()
