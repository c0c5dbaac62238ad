"""
The independent reference for finetune_lora.c: LoRA fine-tuning steps on our tiny test
models, computed by transformers + PEFT in float64.

For each base model, a Hugging Face folder already among the fixtures (the same ones
./convert turns into our model files for test_infer):
    gpt2    fixtures/hf_tiny_fp32   GPT-2, L=2 C=64; LoRA on c_attn, c_proj (both: attention's
                                    and the MLP's) and c_fc, Conv1D layers (fan_in_fan_out)
    llama   fixtures/llama_gqa3     Llama, 6 query heads on 2 key/value heads; all-linear
                                    (q/k/v/o, gate/up/down), rsLoRA
    qwen2   fixtures/qwen2_gqa4     Qwen2, q/k/v biases, tied head; q/k/v/o only
we do, with the model loaded in float64 (eval mode: no dropout anywhere; LoRA dropout 0):
    1. PEFT's LoraConfig (r, alpha, targets above) and get_peft_model. PEFT initialises A
       Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))) and B to zero, which makes
       the first gradient of every A zero; so that a test sees every gradient, B is then set
       to 0.05 * N(0, 1) (torch.Generator seeded with SEED). Both are rounded to float32
       values (the model is float32 while PEFT saves it). This adapter is the start,
       written by PEFT's own save_pretrained: fixtures/lora_<name>/ (adapter_config.json, its
       target_modules sorted; adapter_model.safetensors, the keys
       base_model.model.<module>.lora_A.weight [r, in], .lora_B.weight [out, r]).
    2. A batch of 4 sequences of T=20 token ids (numpy's default_rng(SEED)): each a prompt of
       3 to 9 tokens, a response of 4 to 9, then padding to T. Labels: -100 (no loss) on the
       prompt and the padding, the next token on the response: the loss is the cross-entropy
       of predicting each response token (and the one after the last, here a padding id, is
       not predicted). Causal attention needs no padding mask: padding only follows.
    3. Five optimizer steps, each over the 4 sequences as 2 micro-batches of 2 (gradient
       accumulation). The loss of a step is the mean over all its response tokens (sum of
       the micro-batches' token losses / their total count, not the mean of the
       micro-batches' means), its gradient accumulated over both micro-batches; then
       clip_grad_norm_(1.0) over the LoRA parameters and torch.optim.AdamW(lr 1e-2, betas
       (0.9, 0.999), eps 1e-8, weight_decay 0.01) on them. The base model never changes.

fixtures/lora_<name>.safetensors holds (float32 unless said; read with any safetensors
reader, ours in convert.c):
    tokens (4, T) int32, labels (4, T) int32
    logits0 (2, T, V)    the start adapter's logits on micro-batch 0
    losses (5,)          each step's loss, before its update
    grad_norms (5,)      each step's gradient norm, before clipping
    grad.<key>           the first step's gradient of every LoRA tensor (PEFT's key), before clipping
    final.<key>          every LoRA tensor after the five steps
    merged.<param>       ... and, for the first LoRA module, the merged base weight
                         (merge_and_unload: W + scale B A, in the model's own layout)
    adamw.p0, adamw.grads (3, 64), adamw.p3   (gpt2's only) torch's AdamW alone: 64 numbers,
                         3 steps of lr 0.05, betas (0.8, 0.9), eps 1e-3, weight decay 0.5
and, in its metadata, the settings (JSON under "settings"). The values are float64
results rounded to float32 once.

Run from the repository root (pinned: torch 2.9.1, transformers 5.24.0, peft 0.21.2):
    python dev/reference/lora_reference.py
    python dev/reference/lora_reference.py --check-ours   # PEFT loads ./finetune_lora's adapter (make finetune_lora smollm2)
"""

import json
import os
import sys

if "--quant" in sys.argv:  # nf4_reference.py says why: the last bit of the double quantization's mean
    os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
    os.environ["TORCHDYNAMO_DISABLE"] = "1"

import numpy as np
import torch
from safetensors.torch import save_file

FIXTURES = os.path.join("dev", "reference", "fixtures")
SEED = 20261201
T = 20
STEPS = 5
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.999), 1e-8, 0.01, 1.0
MODELS = {
    "gpt2": dict(folder="hf_tiny_fp32", r=4, alpha=8, targets=["c_attn", "c_proj", "c_fc"], rslora=False,
                 fan_in_fan_out=True),
    "llama": dict(folder="llama_gqa3", r=4, alpha=16, targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"], rslora=True, fan_in_fan_out=False),
    "qwen2": dict(folder="qwen2_gqa4", r=3, alpha=6, targets=["q_proj", "k_proj", "v_proj", "o_proj"], rslora=False,
                  fan_in_fan_out=False),
}


def batch(vocab, rng):
    tokens = np.zeros((4, T), dtype=np.int32)
    labels = np.full((4, T), -100, dtype=np.int32)
    for b in range(4):
        prompt, response = int(rng.integers(3, 10)), int(rng.integers(4, 10))
        n = prompt + response
        tokens[b, :n] = rng.integers(0, vocab, n)
        tokens[b, n:] = 0  # padding: never attended to by a real token, never a label
        # position t predicts token t + 1: a label for each response token
        labels[b, prompt - 1:n - 1] = tokens[b, prompt:n]
    return tokens, labels


def loss_sum(model, tokens, labels):
    logits = model(input_ids=torch.from_numpy(tokens).long()).logits
    targets = torch.from_numpy(labels).long()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=-100, reduction="sum"), logits


def quantize_base(base, name):
    """QLoRA's base: every linear layer of the blocks (not the embeddings, not the head: what
    transformers' BitsAndBytesConfig(load_in_4bit=True) quantizes) replaced by its float32
    weight quantized with bitsandbytes (NF4, blocksize 64, double quantization) and
    dequantized again. GPT-2's Conv1D weights are (in, out): quantized as (out, in), as
    transformers does. Returns how many were."""
    import bitsandbytes.functional as F
    from nf4_reference import dequantize
    torch.set_num_threads(1)
    count = 0
    with torch.no_grad():
        for module_name, module in base.named_modules():
            is_conv1d = type(module).__name__ == "Conv1D"
            if not (isinstance(module, torch.nn.Linear) or is_conv1d) or "lm_head" in module_name:
                continue
            w = module.weight.detach().float()
            w = w.t().contiguous() if is_conv1d else w
            packed, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
            deq = dequantize(packed, state).reshape(w.shape)  # (bitsandbytes' portable dequantizer: nf4_reference.py)
            module.weight.copy_((deq.t() if is_conv1d else deq).double())
            count += 1
    torch.set_num_threads(os.cpu_count() or 1)
    return count


def main(quant=None):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(SEED)
    for name, m in MODELS.items():
        base = AutoModelForCausalLM.from_pretrained(os.path.join(FIXTURES, m["folder"]), dtype=torch.float64)
        base.eval()
        if quant is not None:
            print(f"{name}: {quantize_base(base, name)} linear layers in {quant}, dequantized")
        config = LoraConfig(r=m["r"], lora_alpha=m["alpha"], lora_dropout=0.0, target_modules=m["targets"], bias="none",
                            use_rslora=m["rslora"], fan_in_fan_out=m["fan_in_fan_out"], task_type="CAUSAL_LM")
        model = get_peft_model(base, config)
        model.eval()
        generator = torch.Generator().manual_seed(SEED)
        lora = {n: p for n, p in model.named_parameters() if p.requires_grad}
        assert lora and all(".lora_A." in n or ".lora_B." in n for n in lora), name
        with torch.no_grad():
            for n, p in lora.items():
                if ".lora_B." in n:
                    assert torch.all(p == 0), n  # PEFT's init
                    p.copy_(0.05 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
                else:  # Kaiming-uniform with a = sqrt(5): |A| <= 1/sqrt(in)
                    assert p.abs().max() <= 1 / np.sqrt(p.shape[1]) + 1e-12, n
                p.copy_(p.float().double())  # float32 values, so that the float32 file holds them exactly
        folder = os.path.join(FIXTURES, f"lora_{name}")
        if quant is not None:  # the same start adapter as the plain run's (the same seeds): checked, not written again
            from safetensors.torch import load_file
            start = load_file(os.path.join(folder, "adapter_model.safetensors"))
            assert all(torch.equal(start[n.replace(".default", "")].double(), p.detach()) for n, p in lora.items()), name
        else:
            model.to(torch.float32)
            model.save_pretrained(folder)  # the start adapter, PEFT's files (F32, as adapters usually are)
            model.to(torch.float64)
        # PEFT also writes a model card (README.md), which we drop, and target_modules from a
        # Python set, whose order changes from run to run: sorted, the file is reproducible
        if quant is None:
            os.remove(os.path.join(folder, "README.md"))
            with open(os.path.join(folder, "adapter_config.json")) as f:
                adapter_config = json.load(f)
            adapter_config["target_modules"] = sorted(adapter_config["target_modules"])
            with open(os.path.join(folder, "adapter_config.json"), "w") as f:
                json.dump(adapter_config, f, indent=2, sort_keys=True)
                f.write("\n")
        key = {n: n.replace(".default", "") for n in lora}  # the names in PEFT's files
        vocab = base.config.vocab_size
        tokens, labels = batch(vocab, np.random.default_rng(SEED))
        count = int((labels != -100).sum())
        optimizer = torch.optim.AdamW(list(lora.values()), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
        out, losses, norms = {}, [], []
        for step in range(STEPS):
            optimizer.zero_grad()
            total = 0.0
            for micro in range(2):
                rows = slice(2 * micro, 2 * micro + 2)
                s, logits = loss_sum(model, tokens[rows], labels[rows])
                (s / count).backward()
                total += s.item()
                if step == 0 and micro == 0:
                    out["logits0"] = logits.detach()
            losses.append(total / count)
            if step == 0:  # (before clipping)
                for n, p in lora.items():
                    out["grad." + key[n]] = p.grad.detach().clone()
            norms.append(torch.nn.utils.clip_grad_norm_(list(lora.values()), CLIP).item())
            optimizer.step()
        for n, p in lora.items():
            out["final." + key[n]] = p.detach().clone()
        # merging: W + scale B A into the first target module's weight, in its own layout
        first = next(n for n in lora if ".lora_A." in n).split(".lora_A.")[0]
        merged = model.merge_and_unload()
        merged_name = first.replace("base_model.model.", "") + ".weight"
        out["merged." + merged_name] = dict(merged.named_parameters())[merged_name].detach()
        tensors = {k: v.to(torch.float32).contiguous() for k, v in out.items()}
        if name == "gpt2" and quant is None:  # torch's AdamW alone, 3 steps with a strong weight decay (its effect is tiny above)
            generator = torch.Generator().manual_seed(SEED + 1)
            p = torch.randn(64, generator=generator, dtype=torch.float64).float().double().requires_grad_(True)
            grads = torch.randn(3, 64, generator=generator, dtype=torch.float64).float().double()
            tensors["adamw.p0"] = p.detach().float()
            tensors["adamw.grads"] = grads.float()
            adamw = torch.optim.AdamW([p], lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.5)
            for k in range(3):
                p.grad = grads[k].clone()
                adamw.step()
            tensors["adamw.p3"] = p.detach().float()
        tensors["tokens"] = torch.from_numpy(tokens)
        tensors["labels"] = torch.from_numpy(labels)
        tensors["losses"] = torch.tensor(losses, dtype=torch.float32)
        tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float32)
        settings = dict(base=m["folder"], r=m["r"], alpha=m["alpha"], targets=m["targets"], rslora=m["rslora"],
                        steps=STEPS, micro_batches=2, micro_batch=2, T=T, lr=LR, betas=list(BETAS), eps=EPS,
                        weight_decay=WEIGHT_DECAY, clip=CLIP, seed=SEED, response_tokens=count,
                        **({} if quant is None else {"quant": quant + ", blocksize 64, double quantization"}))
        suffix = "" if quant is None else "_" + quant
        save_file(tensors, os.path.join(FIXTURES, f"lora_{name}{suffix}.safetensors"), metadata={"settings": json.dumps(settings)})
        print(f"{name}: {len(lora)} LoRA tensors, {sum(p.numel() for p in lora.values())} parameters; "
              f"{count} response tokens; losses " + " ".join(f"{x:.4f}" for x in losses) +
              "; grad norms " + " ".join(f"{x:.3f}" for x in norms))


def check_ours():
    """--check-ours: ./finetune_lora trains an adapter on SmolLM2-135M-Instruct (make smollm2)
    for one step on a few records; PEFT's PeftModel.from_pretrained must load it onto
    transformers' SmolLM2 (from the same GGUF) with every LoRA tensor equal to the file's,
    and PEFT's config must read back our rank, alpha, modules and scale."""
    import subprocess
    import tempfile
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.jsonl")
        with open(data, "w") as f:
            for i in range(8):
                f.write(json.dumps({"instruction": f"What is {i} plus {i}?", "input": "", "output": f"{2 * i}."}) + "\n")
        out = os.path.join(tmp, "adapter")
        subprocess.run(["./finetune_lora", "-d", data, "-o", out, "-n", "1", "-b", "2", "-k", "1", "-r", "4", "-a", "8",
                        "-T", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "-V", "0.25"], check=True,
                       capture_output=True)
        base = AutoModelForCausalLM.from_pretrained("data/smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                                    dtype=torch.float32)
        model = PeftModel.from_pretrained(base, out)
        stored = load_file(os.path.join(out, "adapter_model.safetensors"))
        n = 0
        for name, p in model.named_parameters():
            if "lora_" in name:
                assert torch.equal(p.detach(), stored[name.replace(".default", "")]), name
                n += 1
        assert n == len(stored) == 30 * 7 * 2, (n, len(stored))
        config = model.peft_config["default"]
        assert config.r == 4 and config.lora_alpha == 8 and not config.use_rslora, config
        assert sorted(config.target_modules) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                        "down_proj"]), config.target_modules
        assert model.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"] == 2.0
        print(f"--check-ours: PEFT loads finetune_lora's adapter: {n} LoRA tensors equal to the file, r 4, alpha 8, scale 2")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check-ours"]:
        check_ours()
    elif sys.argv[1:] == ["--quant", "nf4"]:
        main("nf4")
    else:
        main()
