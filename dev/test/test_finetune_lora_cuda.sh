#!/usr/bin/env bash
# finetune_lora.cu against finetune_lora.c, as users run them: the same flags, data and seed
# must train the same adapter. FP32 (an fp32 base): each step's loss, gradient norm and
# validation loss and every adapter weight agree with the CPU's to fp32's rounding (the
# sums run in other orders); with LoRA dropout too (the GPU draws the CPU's masks); a run
# checkpointed on one resumes on the other; flash attention (-F 1) on both. Activation
# recomputation (-A 1) changes no bit.
# BF16 (a bf16 base): it trains, its losses near the CPU's, its files PEFT's. A random GPT-2
# of two layers (so that -A 1 recomputes one) and GPT-2's tokenizer (CI has no SmolLM2 run to
# spare under emulation: the Llama family's layers are checked in process, test_finetune_lora.cu).
#
#     bash dev/test/test_finetune_lora_cuda.sh ./finetune_lora ./finetune_loracu_fp32 ./finetune_loracu        (on a GPU)
#     bash dev/test/test_finetune_lora_cuda.sh ./finetune_lora ./dev/emu/finetune_loracu_fp32_cpu ./dev/emu/finetune_loracu_bf16_cpu
set -u
CPU=$(realpath "${1:-./finetune_lora}")
FP32=$(realpath "${2:-./finetune_loracu_fp32}")
BF16=$(realpath "${3:-./finetune_loracu}")
for b in "$CPU" "$FP32" "$BF16"; do
    [ -x "$b" ] || { echo "Error: $b is not built"; echo "0 passed, 1 failed"; exit 1; }
done
CONVERT=${CONVERT:-./convert}
TMP=$(mktemp -d /tmp/test_finetune_lora_cuda.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
report() {  # report NAME OK(0/1) [detail]
    if [ "$2" = 1 ]; then
        printf '%-78s OK\n' "$1"; passed=$((passed + 1))
    else
        printf '%-78s NOT OK\n' "$1"; failed=$((failed + 1))
        [ -n "${3:-}" ] && printf '  %s\n' "$3"
    fi
}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# the floats of an adapter_model.safetensors (F32 data after the 8-byte length and the header)
floats() {
    local n
    n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    od -An -v -tf4 -j $((8 + n)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}
# max |a - b| over two adapters' weights, and max |a|
compare_adapters() {
    paste <(floats "$1") <(floats "$2") | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > r) r = a; n++ }
        END { printf "%d %.3e %.3e\n", n, m, r }'
}
# the largest relative difference of columns 3..5 (loss, grad_norm, val_loss) of two metrics.tsv
compare_metrics() {
    paste <(cut -f3-5 "$1") <(cut -f3-5 "$2") | awk -F'\t' 'NR > 1 { for (i = 1; i <= 3; i++) { if ($i == "" && $(i + 3) == "") continue;
        if ($i == "" || $(i + 3) == "") { bad = 1; continue } d = $i - $(i + 3); if (d < 0) d = -d; r = d / ($i < 0 ? -$i : $i); if (r > m) m = r } n++ }
        END { printf "%d %.3e %d\n", n, m, bad }'
}

"$CONVERT" -i d2 -o "$TMP/d2.bin" > /dev/null 2>&1 || { echo "Error: $CONVERT -i d2 failed"; echo "0 passed, 1 failed"; exit 1; }
D="$TMP/data.jsonl"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    printf '{"instruction": "What is %d plus %d?", "input": "", "output": "%d plus %d is %d."}\n' $i $i $i $i $((2 * i))
done > "$D"
R="-m $TMP/d2.bin -d $D -n 4 -b 2 -k 1 -v 2 -V 0.2 -r 4 -l 1e-2" # (accumulation: test_finetune_lora.cu, 2 micro-batches a step)
# The weights after 4 AdamW steps at lr 1e-2: AdamW divides each gradient by its own running
# size, so a weight whose gradient is near zero moves on the sums' rounding noise by up to
# lr a step (test_finetune_lora.c measures the same against PEFT). Measured here: at most
# 5.6e-6, 5.6e-4 lr; allowed 0.05 lr (5e-4). A wrong gradient moves whole tensors by ~lr.

# FP32: the same training, step by step and weight by weight (the weights: see above)
for case in "QLoRA, the base in NF4 (-Q nf4)|-D 0 -Q nf4" "QLoRA, FP4, blocksize 128, no double quantization (-Q fp4:128:0)|-D 0 -Q fp4:128:0" \
            "no dropout|-D 0" "LoRA dropout 0.2 (the CPU's masks)|-D 0.2" "flash attention (-F 1), dropout 0.1|-D 0.1 -F 1"; do
    name=${case%%|*} flags=${case#*|}
    "$CPU" $R $flags -o "$TMP/cpu" > "$TMP/cpu.log" 2>&1
    "$FP32" $R $flags -o "$TMP/gpu" > "$TMP/gpu.log" 2>&1
    status=$?
    read -r lines worst bad <<< "$(compare_metrics "$TMP/cpu/metrics.tsv" "$TMP/gpu/metrics.tsv")"
    report "FP32, $name: loss, norm, val loss of 4 steps within 1e-5 (relative)" \
        $([ $status = 0 ] && [ "$lines" = 5 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && echo 1 || echo 0) \
        "exit $status, $lines lines, worst $worst; $(tail -2 "$TMP/gpu.log" | tr '\n' ' ')"
    read -r n err max <<< "$(compare_adapters "$TMP/cpu/adapter_model.safetensors" "$TMP/gpu/adapter_model.safetensors")"
    report "... every adapter weight within 0.05 lr of the CPU's ($n, worst $err)" \
        $([ "$n" -gt 1000 ] && awk -v e="$err" 'BEGIN { exit !(e <= 5e-4) }' && echo 1 || echo 0)
    rm -rf "$TMP/cpu" "$TMP/gpu"
done
"$FP32" $R -D 0 -Q nf4 -n 1 -o "$TMP/q" > "$TMP/q.log" 2>&1
report "... -Q nf4: the GPU's memory table counts the 4-bit weights" \
    $(grep -q '^memory on the GPU (MiB): base weights .* (the linear layers 4-bit, one layer.s dequantized, the rest fp32' "$TMP/q.log" && echo 1 || echo 0) "$(grep '^memory' "$TMP/q.log")"
report "... the GPU's report: the memory table and tokens/s" \
    $(grep -q '^memory on the GPU (MiB): base weights .* (fp32, no gradients), .*activations .* every block' "$TMP/gpu.log" && grep -q 'tokens/s' "$TMP/gpu.log" && echo 1 || echo 0)

# --plan: the GPU's allocations predicted to the byte (gpu_alloc's peak in a -B 1 run), with
# and without -Q and recomputation, fp32 and bf16 bases
# (d2's 50,257-token vocabulary at B T = 48: one row of dlogits is more than the cast scratch
# held before it was sized for one)
for case in "$FP32|-D 0" "$FP32|-Q fp4:128:0 -A 1 -D 0.1" "$BF16|-D 0" "$BF16|-Q nf4" "$FP32|-D 0 -F 1" "$BF16|-Q nf4 -A 1 -F 1"; do
    bin=${case%%|*} q=${case#*|} F="-m $TMP/d2.bin -b 2 -t 24 -r 4 ${case#*|}"
    peak=$("$bin" $F -B 1 -n 1 2>&1 | sed -n 's/^peak memory: .* at most (\([0-9]*\) bytes.*/\1/p')
    plan=$("$bin" $F --plan 2>&1 | sed -n 's/^(\([0-9]*\) bytes)$/\1/p')
    report "--plan $q ($(basename "$bin")): the total is -B 1's peak allocation, to the byte ($plan)" \
        $([ -n "$peak" ] && [ "$peak" = "$plan" ] && echo 1 || echo 0) "plan $plan, peak $peak"
done

# flash attention in the plan: Llama 3.1 8B's shape in NF4, B=1, -A 1 in 16 GiB: without the
# (B, heads, T, T) probabilities and their gradient's scratch, a longer T fits
longest() { "$BF16" --plan -m llama:llama3.1-8b -Q nf4 -b 1 -t 2048 -A 1 "$@" 2>&1 | sed -n 's/.*the longest T at B=1 is \([0-9]*\).*/\1/p'; }
t0=$(longest -F 0)
t1=$(longest -F 1)
report "--plan, Llama 3.1 8B in NF4, B=1, -A 1, 16 GiB: the longest T $t0 with -F 0, $t1 with -F 1" \
    $([ -n "$t0" ] && [ -n "$t1" ] && [ "$t1" -gt $((t0 * 3 / 2)) ] && echo 1 || echo 0)

# activation recomputation: the same arithmetic, bit for bit
"$FP32" $R -D 0.2 -o "$TMP/keep" > /dev/null 2>&1
"$FP32" $R -D 0.2 -A 1 -o "$TMP/recompute" > "$TMP/re.log" 2>&1
report "-A 1 (recomputation): the same adapter and losses as -A 0, bit for bit" \
    $(cmp -s "$TMP/keep/adapter_model.safetensors" "$TMP/recompute/adapter_model.safetensors" &&
      diff <(cut -f1-5 "$TMP/keep/metrics.tsv") <(cut -f1-5 "$TMP/recompute/metrics.tsv") > /dev/null && echo 1 || echo 0)
report "... and says it keeps one block's activations" $(grep -q 'recomputed: one block' "$TMP/re.log" && echo 1 || echo 0) "$(grep '^memory' "$TMP/re.log")"
# ... with flash attention too (the block's log-sum-exps and output made again before its backward)
"$FP32" $R -D 0.2 -F 1 -o "$TMP/keep_flash" > /dev/null 2>&1
"$FP32" $R -D 0.2 -F 1 -A 1 -o "$TMP/recompute_flash" > /dev/null 2>&1
report "-F 1 -A 1: the same adapter and losses as -F 1 -A 0, bit for bit" \
    $([ -f "$TMP/keep_flash/adapter_model.safetensors" ] && cmp -s "$TMP/keep_flash/adapter_model.safetensors" "$TMP/recompute_flash/adapter_model.safetensors" &&
      diff <(cut -f1-5 "$TMP/keep_flash/metrics.tsv") <(cut -f1-5 "$TMP/recompute_flash/metrics.tsv") > /dev/null && echo 1 || echo 0)
"$FP32" $R -D 0.2 -P 2 -o "$TMP/again" > "$TMP/again.log" 2>&1
report "two runs: the same adapter, bit for bit (the second timing its phases: -P 2)" $(cmp -s "$TMP/keep/adapter_model.safetensors" "$TMP/again/adapter_model.safetensors" && echo 1 || echo 0)
source "$(dirname "$0")/phases_check.sh"
read -r lines worst zero <<< "$(phase_lines "$TMP/again.log")"
report "-P 2: steps 2 and 4 timed by the GPU's events, adding up to the step's time (within $worst ms), the host's clock once" \
    $([ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.11) }' &&
      [ "$(grep -c "those are the GPU's times, from events" "$TMP/again.log")" = 1 ] &&
      [ "$(awk -F'\t' 'NR > 1 && NF == 11 && $7 != ""' "$TMP/again/metrics.tsv" | wc -l)" = 2 ] && echo 1 || echo 0) "$(grep '^step' "$TMP/again.log" | head -2)"

# a checkpoint written on one, resumed on the other (both ways): the whole run's adapter
S="$R -D 0 -S 2"
"$CPU" $S -o "$TMP/whole" > /dev/null 2>&1
for pair in "CPU:GPU" "GPU:CPU"; do
    first=${pair%%:*} second=${pair#*:}
    [ "$first" = CPU ] && a="$CPU" b="$FP32" || { a="$FP32"; b="$CPU"; }
    out="$TMP/from_$first"
    "$a" $S -o "$out" > /dev/null 2>&1
    rm -rf "$out/step_000004" "$out/state_000004.bin" "$out/adapter_model.safetensors"
    "$b" $S -o "$out" -y 1 > "$TMP/resume.log" 2>&1
    read -r n err max <<< "$(compare_adapters "$TMP/whole/adapter_model.safetensors" "$out/adapter_model.safetensors")"
    report "checkpointed at step 2 by the $first, resumed by the $second: the run's adapter (worst $err)" \
        $(grep -q 'resuming at step 2 of 4' "$TMP/resume.log" && [ "$n" -gt 1000 ] && awk -v e="$err" 'BEGIN { exit !(e <= 5e-4) }' && echo 1 || echo 0) \
        "$(grep -i 'error\|resum' "$TMP/resume.log" | head -2)"
done

# BF16: a bf16 base trains, near the CPU's losses (its matmuls read bf16: ~1e-2)
"$CPU" $R -D 0 -o "$TMP/cpu" > /dev/null 2>&1
"$BF16" $R -D 0 -o "$TMP/bf16" > "$TMP/bf16.log" 2>&1
status=$?
read -r lines worst bad <<< "$(compare_metrics "$TMP/cpu/metrics.tsv" "$TMP/bf16/metrics.tsv")"
report "BF16: 4 steps, losses and norms within 1e-2 of the CPU's (measured 2.3e-3), bf16 base" \
    $([ $status = 0 ] && [ "$lines" = 5 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-2) }' && grep -q '(bf16, no gradients)' "$TMP/bf16.log" && echo 1 || echo 0) \
    "exit $status, worst $worst; $(tail -2 "$TMP/bf16.log" | tr '\n' ' ')"
report "... and writes PEFT's files" $([ -s "$TMP/bf16/adapter_config.json" ] && [ -s "$TMP/bf16/adapter_model.safetensors" ] && echo 1 || echo 0)

# errors: as the CPU's (the shared main), and what only the GPU has
"$FP32" -m "$TMP/d2.bin" -d "$TMP/none.jsonl" -o "$TMP/x" 2> "$TMP/err"
report "a missing data file: exit 1, the file" $([ $? = 1 ] && grep -q "$TMP/none.jsonl: cannot read it" "$TMP/err" && echo 1 || echo 0) "$(head -1 "$TMP/err")"
"$FP32" -Z 1 2> "$TMP/err"
report "an unknown flag: exit 1" $([ $? = 1 ] && grep -q "unknown flag -Z" "$TMP/err" && echo 1 || echo 0)
EMU_DEVICE_MIB=2048 "$FP32" $R -D 0 -G 0.001 -o "$TMP/budget" > /dev/null 2> "$TMP/err"
report "-G 0.001 (1 MiB): refused as an out-of-memory of the budget, exit 1" \
    $([ $? = 1 ] && grep -q "^Error: out of GPU memory (the -G budget) for " "$TMP/err" && echo 1 || echo 0) "$(head -2 "$TMP/err" | tr '\n' ' ')"
"$CPU" $R -G 16 -o "$TMP/x" 2> "$TMP/err"
report "-G on the CPU: exit 1, the flag is finetune_loracu's" $([ $? = 1 ] && grep -q "flag -G is finetune_loracu's" "$TMP/err" && echo 1 || echo 0)

echo
echo "$passed passed, $failed failed"
[ $failed = 0 ]
