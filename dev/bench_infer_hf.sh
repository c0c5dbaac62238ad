#!/usr/bin/env bash
# infer.c next to transformers (PyTorch) on the CPU, in one run, on the same threads: prefill
# and decode tokens/s at batch 1, for GPT-2 124M's shapes (random weights: -m d12 and a
# GPT2LMHeadModel) and SmolLM2-135M-Instruct (make smollm2: our file, and transformers reading
# the same GGUF). Each in fp32 (./infer; transformers in float32) and with bf16 weights
# (./infer_bf16, whose arithmetic stays fp32; transformers in bfloat16, weights and
# arithmetic). A benchmark, not a test: it prints tables. Needs torch and transformers (pip
# install -r dev/reference/requirements.txt).
#     bash dev/bench_infer_hf.sh [THREADS] [PROMPT_LENGTHS] [GENERATED]    # default: all cores, 16,128,512, 32
set -eu
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
lengths=${2:-16,128,512}
generated=${3:-32}
make -s infer infer_bf16 > /dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; $threads threads; $(date -u +%F)"
for model in gpt2 smollm2; do
    ours=d12
    [ $model = smollm2 ] && { [ -f data/smollm2/SmolLM2-135M-Instruct.bin ] || make -s smollm2; ours=data/smollm2/SmolLM2-135M-Instruct.bin; }
    for dtype in fp32 bf16; do
        program=./infer
        [ $dtype = bf16 ] && program=./infer_bf16
        echo
        echo "== $model, $dtype: infer.c ($program -m $ours)"
        OMP_NUM_THREADS=$threads $program -m $ours -B 1 -b 1 -l $lengths -N $generated 2>&1 | grep '^|'
        echo "== $model, $dtype: transformers"
        python3 dev/bench_infer_hf.py $model $threads $lengths $generated $dtype 2>&1 | grep '^|\|^transformers'
    done
done
