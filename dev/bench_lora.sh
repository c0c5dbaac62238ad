#!/usr/bin/env bash
# LoRA training speed, ours beside PyTorch + PEFT, in one run on this machine: the same
# random model shape, adapter, batch, sequence length and steps (dev/bench_lora_peft.py is
# the peer; both train on random tokens). A table of tokens/s and peak memory.
#
#     bash dev/bench_lora.sh cpu [MODEL] [B] [T] [R]     # finetune_lora (fp32) vs PEFT fp32, OMP_NUM_THREADS threads (default 2);
#                                                          # then QLoRA: -Q nf4 vs PEFT + bitsandbytes' Linear4bit (NF4)
#     bash dev/bench_lora.sh gpu [MODEL] [B] [T] [R]     # finetune_loracu (bf16 base) vs PEFT bf16; then both with recomputation
#     bash dev/bench_lora.sh gpu-qlora [MODEL] [B] [T] [R] # finetune_loracu -Q nf4 vs PEFT + bitsandbytes (NF4, bf16 compute), both with recomputation
# MODEL: llama:smollm2-135m (the default on the CPU), llama:llama3.2-1b (on the GPU), llama:qwen2.5-0.5b.
# Needs python3 with torch, transformers, peft and bitsandbytes (dev/reference/requirements.txt).
set -u
cd "$(dirname "$0")/.." || exit 1
where=${1:-cpu}
case $where in
    cpu) MODEL=${2:-llama:smollm2-135m} B=${3:-4} T=${4:-104} R=${5:-8} ;;
    gpu | gpu-qlora) MODEL=${2:-llama:llama3.2-1b} B=${3:-4} T=${4:-512} R=${5:-16} ;;
    *) echo "usage: bash dev/bench_lora.sh cpu|gpu|gpu-qlora [MODEL] [B] [T] [R]"; exit 1 ;;
esac
STEPS=${STEPS:-6}
THREADS=${OMP_NUM_THREADS:-2}
TMP=$(mktemp -d /tmp/bench_lora.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
row() { # NAME LOG
    local tps mem
    tps=$(sed -n 's/^tokens\/s: \([0-9]*\).*/\1/p' "$2")
    mem=$(sed -n 's/^peak memory: \([0-9.]*\) MiB.*/\1/p' "$2")
    printf '| %s | %s | %s |\n' "$1" "${tps:-failed}" "${mem:--}"
}
echo "LoRA on $MODEL: r=$R, alpha $((2 * R)), all linear layers, dropout 0; $STEPS steps of $B sequences of $T tokens (random); $(date -u '+%Y-%m-%d')"
if [ "$where" = cpu ]; then
    make -s finetune_lora > /dev/null || exit 1
    echo "machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $THREADS threads"
    OMP_NUM_THREADS=$THREADS ./finetune_lora -B 1 -m "$MODEL" -b "$B" -k 1 -t "$T" -n "$STEPS" -r "$R" -a $((2 * R)) -D 0 > "$TMP/ours.log" 2>&1
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cpu --threads "$THREADS" -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) > "$TMP/peft.log" 2>&1
    OMP_NUM_THREADS=$THREADS ./finetune_lora -B 1 -m "$MODEL" -b "$B" -k 1 -t "$T" -n "$STEPS" -r "$R" -a $((2 * R)) -D 0 -Q nf4 > "$TMP/ours_nf4.log" 2>&1
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cpu --threads "$THREADS" -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) --quant nf4 > "$TMP/peft_nf4.log" 2>&1
    versions=$(python3 -c 'import torch, bitsandbytes; print(torch.__version__, bitsandbytes.__version__)' 2> /dev/null)
    echo
    echo "| run | tokens/s (steps 2-$STEPS) | peak resident memory (MiB) |"
    echo "|---|---:|---:|"
    row "finetune_lora (fp32)" "$TMP/ours.log"
    row "PyTorch ${versions%% *} + PEFT (fp32)" "$TMP/peft.log"
    row "finetune_lora -Q nf4 (QLoRA: NF4 base, fp32 compute)" "$TMP/ours_nf4.log"
    row "PyTorch + PEFT + bitsandbytes ${versions##* } (NF4 base, fp32 compute)" "$TMP/peft_nf4.log"
elif [ "$where" = gpu-qlora ]; then
    make -s finetune_loracu > /dev/null || exit 1
    echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    for re in 0 1; do
        ./finetune_loracu -B 1 -m "$MODEL" -b "$B" -k 1 -t "$T" -n "$STEPS" -r "$R" -a $((2 * R)) -D 0 -Q nf4 -A $re > "$TMP/ours_nf4_$re.log" 2>&1
    done
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cuda --dtype bf16 -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) --quant nf4 > "$TMP/peft_nf4_0.log" 2>&1
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cuda --dtype bf16 -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) --quant nf4 --checkpointing > "$TMP/peft_nf4_1.log" 2>&1
    echo
    echo "| run | tokens/s (steps 2-$STEPS) | peak GPU memory allocated (MiB) |"
    echo "|---|---:|---:|"
    row "finetune_loracu -Q nf4 (bf16 compute)" "$TMP/ours_nf4_0.log"
    row "finetune_loracu -Q nf4 -A 1 (recomputation)" "$TMP/ours_nf4_1.log"
    row "PyTorch + PEFT + bitsandbytes (NF4, bf16 compute)" "$TMP/peft_nf4_0.log"
    row "PyTorch + PEFT + bitsandbytes, gradient checkpointing" "$TMP/peft_nf4_1.log"
else
    make -s finetune_loracu > /dev/null || exit 1
    echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    ./finetune_loracu -B 1 -m "$MODEL" -b "$B" -k 1 -t "$T" -n "$STEPS" -r "$R" -a $((2 * R)) -D 0 > "$TMP/ours.log" 2>&1
    ./finetune_loracu -B 1 -m "$MODEL" -b "$B" -k 1 -t "$T" -n "$STEPS" -r "$R" -a $((2 * R)) -D 0 -A 1 > "$TMP/ours_re.log" 2>&1
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cuda --dtype bf16 -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) > "$TMP/peft.log" 2>&1
    python3 dev/bench_lora_peft.py --model "$MODEL" --device cuda --dtype bf16 -b "$B" -t "$T" -n "$STEPS" -r "$R" \
        --alpha $((2 * R)) --checkpointing > "$TMP/peft_re.log" 2>&1
    echo
    echo "| run | tokens/s (steps 2-$STEPS) | peak GPU memory allocated (MiB) |"
    echo "|---|---:|---:|"
    row "finetune_loracu (bf16 base)" "$TMP/ours.log"
    row "finetune_loracu -A 1 (recomputation)" "$TMP/ours_re.log"
    row "PyTorch + PEFT (bf16 base)" "$TMP/peft.log"
    row "PyTorch + PEFT, gradient checkpointing" "$TMP/peft_re.log"
fi
echo
for f in "$TMP"/*.log; do echo "--- $(basename "$f")"; grep -E '^(benchmark|PyTorch|bitsandbytes|model|memory|tokens/s|peak|Error)' "$f"; done
