#!/usr/bin/env python3
"""PyTorch + PEFT doing what `finetune_lora -B 1` (or `finetune_loracu -B 1`) does: LoRA
training steps on random tokens, on a random model of a real model's shape, timed. The peer
of our benchmark (dev/bench_lora.sh runs both and prints one table).

    python3 dev/bench_lora_peft.py --model llama:smollm2-135m --device cpu --threads 2 -b 4 -t 104 -n 10 -r 8
    python3 dev/bench_lora_peft.py --model llama:llama3.2-1b --device cuda --dtype bf16 -b 4 -t 512 -n 10 -r 16
    python3 dev/bench_lora_peft.py --model llama:smollm2-135m --device cpu --threads 2 --quant nf4   # QLoRA

The same work as ours: the model in --dtype (fp32, or bf16 on a GPU: PEFT keeps the adapter
in fp32 over a bf16 base, as we do), LoRA (PEFT's LoraConfig) on all linear layers (or
--targets), rank r, alpha, dropout; each step -k micro-batches of -b sequences of -t random
tokens, the loss on every next token, backward, the gradient clipped to 1, AdamW (torch's,
lr 1e-3, no weight decay). transformers' default attention (SDPA). --checkpointing turns on
transformers' gradient checkpointing (our -A 1). --quant nf4 is QLoRA as people run it (our
-Q nf4): the random model written to a scratch folder and loaded back with transformers'
BitsAndBytesConfig (load_in_4bit, NF4, double quantization, compute dtype --dtype), every
linear layer of the blocks a bitsandbytes Linear4bit, the head and embeddings as they were,
then PEFT's prepare_model_for_kbit_training (without its gradient checkpointing, unless
--checkpointing) and LoRA on the 4-bit layers. (prepare_model_for_kbit_training casts the
parameters that are not 4-bit, the embeddings, norms and head, to fp32: with --dtype bf16
on a GPU they are fp32 there where ours stay bf16, which costs PEFT memory and some speed.) Prints each step, tokens/s over steps 2..n
and the peak memory: the process's resident set (CPU), or torch's peak allocation and the
device's memory in use (GPU).
"""
import argparse
import resource
import time

SHAPES = {  # as infer.c's LLAMA_SHAPES (finetune_lora's -m llama:NAME)
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, rope_theta=1e5, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         max_position_embeddings=8192),
    "llama3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=True,
                        max_position_embeddings=131072,
                        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=8192)),
    "llama3.2-3b": dict(vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                        num_key_value_heads=8, rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=True,
                        max_position_embeddings=131072, head_dim=128,
                        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=8192)),
    "llama3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        max_position_embeddings=131072,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=8192)),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       max_position_embeddings=32768),
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         max_position_embeddings=32768),
}


def main():
    p = argparse.ArgumentParser(description="PyTorch + PEFT LoRA steps on random tokens (the peer of finetune_lora -B 1)")
    p.add_argument("--model", default="llama:smollm2-135m", help="llama:NAME, one of " + ", ".join(SHAPES))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=0, help="torch's CPU threads [torch's default]")
    p.add_argument("-b", type=int, default=4, help="sequences per micro-batch")
    p.add_argument("-t", type=int, default=128, help="tokens per sequence")
    p.add_argument("-k", type=int, default=1, help="micro-batches per step")
    p.add_argument("-n", type=int, default=10, help="steps")
    p.add_argument("-r", type=int, default=8, help="LoRA rank")
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--targets", default="all-linear")
    p.add_argument("--checkpointing", action="store_true", help="gradient checkpointing (our -A 1)")
    p.add_argument("--quant", default="none", choices=["none", "nf4"], help="QLoRA: the base in bitsandbytes' 4 bits (our -Q nf4)")
    a = p.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    name = a.model.removeprefix("llama:")
    if name not in SHAPES:
        raise SystemExit(f"Error: --model {a.model}: one of " + ", ".join("llama:" + s for s in SHAPES))
    if a.dtype == "bf16" and a.device == "cpu":
        raise SystemExit("Error: --dtype bf16 is for --device cuda (ours runs fp32 on the CPU)")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.manual_seed(1337)
    qwen = name.startswith("qwen")
    config = (Qwen2Config if qwen else LlamaConfig)(**SHAPES[name])
    with torch.device(a.device):
        model = (Qwen2ForCausalLM if qwen else LlamaForCausalLM)(config).to(dtype)
    if a.quant == "nf4":
        import tempfile
        from peft import prepare_model_for_kbit_training
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            del model
            quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                       bnb_4bit_compute_dtype=dtype)
            model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=dtype, device_map=a.device)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=a.checkpointing)
        linear4 = sum(type(m).__name__ == "Linear4bit" for m in model.modules())
        print(f"bitsandbytes: {linear4} Linear4bit layers (NF4, double quantization, compute {a.dtype})")
    if a.checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    targets = "all-linear" if a.targets == "all-linear" else a.targets.split(",")
    model = get_peft_model(model, LoraConfig(r=a.r, lora_alpha=a.alpha, lora_dropout=a.dropout, target_modules=targets,
                                             task_type="CAUSAL_LM"))
    model.train()
    trainable = [q for q in model.parameters() if q.requires_grad]
    adapter_dtypes = sorted({str(q.dtype) for q in trainable})
    print(f"PyTorch {torch.__version__} + PEFT, {a.model}, {a.dtype} base, adapter {', '.join(adapter_dtypes)}: "
          f"{sum(q.numel() for q in trainable)} trainable parameters; {a.n} steps of {a.k} x {a.b} sequences of {a.t} tokens"
          f"{', gradient checkpointing' if a.checkpointing else ''}{', QLoRA: the base in NF4' if a.quant == 'nf4' else ''}; {a.device}"
          f"{f', {torch.get_num_threads()} threads' if a.device == 'cpu' else ''}")
    optimizer = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.0)
    generator = torch.Generator(device="cpu").manual_seed(1)
    timed = 0.0
    for step in range(a.n):
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(a.k):
            ids = torch.randint(0, config.vocab_size, (a.b, a.t), generator=generator).to(a.device)
            loss = model(input_ids=ids, labels=ids).loss / a.k  # (transformers shifts the labels: every next token)
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step > 0:
            timed += dt
        print(f"step {step + 1:3d}/{a.n} | loss {total:.4f} | norm {float(norm):.3f} | {dt * 1000:.1f} ms | "
              f"{a.k * a.b * a.t / dt:.0f} tokens/s", flush=True)
    if a.n > 1:
        print(f"tokens/s: {a.k * a.b * a.t * (a.n - 1) / timed:.0f} (steps 2-{a.n}, {a.k * a.b * a.t} tokens a step)")
    if a.device == "cuda":
        free, whole = torch.cuda.mem_get_info()
        print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB allocated by torch at most "
              f"({torch.cuda.max_memory_reserved() / 2**20:.1f} MiB reserved); {(whole - free) / 2**20:.1f} MiB of the GPU's "
              f"{whole / 2**20:.1f} MiB in use now (CUDA's context included)")
    else:
        print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB resident (the whole process)")


if __name__ == "__main__":
    main()
