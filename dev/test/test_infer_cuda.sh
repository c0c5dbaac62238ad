#!/usr/bin/env bash
# infer.cu against infer.c, as users run them: the same flags must give the same text.
# FP32: greedy and sampled tokens identical to infer.c's (the logits agree to ~1e-6, far
# inside every margin these runs meet); BF16: runs, stops and reports the same way (its
# logits move by ~1e-2, so tokens may differ; test_infer.cu checks its logits). Besides
# the fixtures and GPT-2's shapes: models of uneven shapes (C=36 and C=42, V=301), which
# this script writes itself, so that partial blocks and the kernels' scalar paths run.
#
#     bash dev/test/test_infer_cuda.sh ./infer ./infercu_fp32 ./infercu      (on a GPU)
#     bash dev/test/test_infer_cuda.sh ./infer ./dev/emu/infercu_fp32_cpu ./dev/emu/infercu_bf16_cpu   (make test)
set -u
CPU=$(realpath "${1:-./infer}")
FP32=$(realpath "${2:-./infercu_fp32}")
BF16=$(realpath "${3:-./infercu}")
for b in "$CPU" "$FP32" "$BF16"; do
    [ -x "$b" ] || { echo "Error: $b is not built"; echo "0 passed, 1 failed"; exit 1; }
done
TMP=$(mktemp -d /tmp/test_infer_cuda.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
F=dev/reference/fixtures
H=build # the reference's Hugging Face folders as checkpoints (make converts them)
CONVERT=${CONVERT:-./convert}
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }
# same NAME ARGS...: infer.c and infer.cu (FP32) print the same text
same() {
    local name=$1
    shift
    "$CPU" "$@" > "$TMP/cpu" 2> "$TMP/cpu.err"
    local rc_cpu=$?
    "$FP32" "$@" > "$TMP/gpu" 2> "$TMP/gpu.err"
    local rc_gpu=$?
    if [ $rc_cpu = 0 ] && [ $rc_gpu = 0 ] && cmp -s "$TMP/cpu" "$TMP/gpu"; then ok "$name: $(wc -c < "$TMP/cpu") identical bytes"
    else not_ok "$name (exit $rc_cpu / $rc_gpu):"; diff "$TMP/cpu" "$TMP/gpu" | head -5; tail -2 "$TMP/gpu.err"; fi
}

printf '1,2,3\n{"prompt": "7"}\n5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20\n42\n' > "$TMP/prompts"
same "greedy, one prompt, 64 tokens" -m $H/hf_tiny_fp32.bin -z 1 -t 0 -n 64 -i "1,2,3"
same "greedy, a batch of 4 (different lengths)" -m $H/hf_tiny_fp32.bin -z 1 -t 0 -n 64 -f "$TMP/prompts"
same "sampled: -t 0.9 -k 40 -p 0.95 -s 5, a batch of 4" -m $H/hf_tiny_fp32.bin -z 1 -t 0.9 -k 40 -p 0.95 -s 5 -n 48 -f "$TMP/prompts"
same "sampled from the bf16 checkpoint's weights" -m $H/hf_tiny_bf16.bin -z 1 -s 9 -n 32 -i "3,1,4,1,5"
same "text: GPT-2's vocabulary (a random d1), greedy" -m d1 -t 0 -n 24 -i "The meaning of life is"
same "text: a stop string" -m d1 -t 0 -n 24 -i "The meaning of life is" -x "$(cut -c 30-32 "$TMP/cpu" | head -1)"
same "text: instruction mode, sampled" -m d1 -a 1 -i "Name three colors." -n 16 -s 2
same "sampled with a repetition penalty and min-p: -t 0.9 -r 1.3 -M 0.05, a batch of 4" -m $H/hf_tiny_fp32.bin -z 1 -t 0.9 -r 1.3 -M 0.05 -s 6 -n 48 -f "$TMP/prompts"
# a conversation on standard input (the cache kept between turns: each turn prefills what
# is new, from a position past 0), greedy with the chat's repetition penalty (the logits
# come back to the host); then one that outgrows the context and drops its oldest turn
same_in() { # same_in INPUT NAME ARGS...: as same, each program reading INPUT on standard input
    local input=$1 name=$2
    shift 2
    "$CPU" "$@" < "$input" > "$TMP/cpu" 2> "$TMP/cpu.err"
    local rc_cpu=$?
    "$FP32" "$@" < "$input" > "$TMP/gpu" 2> "$TMP/gpu.err"
    local rc_gpu=$?
    if [ $rc_cpu = 0 ] && [ $rc_gpu = 0 ] && cmp -s "$TMP/cpu" "$TMP/gpu" && cmp -s <(grep '^\[turn' "$TMP/cpu.err" | sed 's/, [0-9.]* tokens\/s//') <(grep '^\[turn' "$TMP/gpu.err" | sed 's/, [0-9.]* tokens\/s//'); then
        ok "$name: $(wc -c < "$TMP/cpu") identical bytes, $(grep -c '^\[turn' "$TMP/cpu.err") turns reported alike"
    else not_ok "$name (exit $rc_cpu / $rc_gpu):"; diff "$TMP/cpu" "$TMP/gpu" | head -5 | cut -c1-200; grep '^\[turn' "$TMP/cpu.err" "$TMP/gpu.err"; fi
}
printf 'Name three colors.\nAnd three animals.\n/new\nCount to five.\n' > "$TMP/chat"
same_in "$TMP/chat" "a conversation of 3 turns on standard input (greedy, -r 1.1)" -m d1 -a 1 -n 8 -e 1
printf 'Tell me a story.\nAnother one.\n' > "$TMP/chat_full"
same_in "$TMP/chat_full" "a conversation past a context of 48 (-C 48): its oldest turn dropped" -m d1 -C 48 -a 1 -n 10 -e 1 -t 0 -r 1
grep -q "^the context is full: the oldest turn goes" "$TMP/gpu.err" && ok "... which infer.cu says as infer.c does" || not_ok "no drop said by infer.cu"
# the Llama family (GQA, RMSNorm, RoPE, SwiGLU; Qwen2's biases and tied head; Llama 3's RoPE scaling)
same "Llama, 3 query heads per key/value head: greedy, a batch of 4" -m $H/llama_gqa3.bin -z 1 -t 0 -n 40 -f "$TMP/prompts"
same "Qwen2, biases, tied head: sampled, a batch of 4" -m $H/qwen2_gqa4.bin -z 1 -t 0.8 -s 3 -n 40 -f "$TMP/prompts"
same "Llama 3 RoPE scaling: greedy past the original context" -m $H/llama_mha3.bin -z 1 -t 0 -n 60 -i "1,2,3"
# a LoRA adapter applied unmerged (-L; lora_reference.py's fixtures, their B not zero), and -E
same "LoRA (-L) on GPT-2: greedy, a batch of 4" -m $H/hf_tiny_fp32.bin -L $F/lora_gpt2 -z 1 -t 0 -n 48 -f "$TMP/prompts"
same "LoRA (-L) on the Llama GQA model: sampled, a batch of 4" -m $H/llama_gqa3.bin -L $F/lora_llama -z 1 -t 0.9 -s 4 -n 40 -f "$TMP/prompts"
same "LoRA (-L) on Qwen2: greedy, one prompt" -m $H/qwen2_gqa4.bin -L $F/lora_qwen2 -z 1 -t 0 -n 40 -i "5,6,7"
# -Q: the linear layers quantized at load (the same bytes on both: infer.cu quantizes on the
# host with infer.c's code), decode through the quantized matrix-vector kernel, prefill
# through cuBLAS on the layer dequantized; a QLoRA adapter served on its NF4 base
same "-Q nf4 -L: QLoRA on the Llama GQA model, greedy, a batch of 4" -m $H/llama_gqa3.bin -Q nf4 -L $F/lora_llama -z 1 -t 0 -n 40 -f "$TMP/prompts"
same "-Q q8_0,q8_0 on GPT-2 (the tied head in q8_0): sampled, a batch of 4" -m $H/hf_tiny_fp32.bin -Q q8_0,q8_0 -z 1 -t 0.9 -s 7 -n 48 -f "$TMP/prompts"
same "-Q fp4:32:0 on Qwen2: greedy, one prompt" -m $H/qwen2_gqa4.bin -Q fp4:32:0 -z 1 -t 0 -n 40 -i "5,6,7"
same "a *-bnb-4bit folder's bytes (./convert's version 7): greedy, a batch of 4" -m $H/bnb4_llama.bin -z 1 -t 0 -n 40 -f "$TMP/prompts"
printf '{"instruction": "Name a color.", "answer": "Red"}\n{"instruction": "Two plus two?", "input": "", "answer": "4", "partial": ["four"]}\n' > "$TMP/eval.jsonl"
same "-E: an evaluation's table (GPT-2's vocabulary, a random d1)" -m d1 -E "$TMP/eval.jsonl" -n 12
# heads of other widths: a d4 model (C=256) with its header's head count set to 2 and 1,
# so one head is 128 or 256 channels, as wide as the attention kernel's block and wider
"$CONVERT" -i d4 -o "$TMP/d4.bin" 2> /dev/null
for nh in 2 1; do
    cp "$TMP/d4.bin" "$TMP/d4_nh$nh.bin"
    printf "\\x0$nh\\x00\\x00\\x00" | dd of="$TMP/d4_nh$nh.bin" bs=1 seek=20 conv=notrunc status=none # header[5] = NH
    same "heads of $((256 / nh)) channels (d4 with NH=$nh)" -m "$TMP/d4_nh$nh.bin" -z 1 -t 0 -n 6 -i "1,2,3"
done
# uneven shapes: models whose sizes divide none of the kernels' blocks and tiles. C=36: the
# outputs 3C=108 and C=36 are not whole blocks of the gemv kernel's 8, and a row of 36 bf16
# is not whole 16-byte loads (its scalar branch); C=42 with 3 heads of 14: scalar in fp32
# too; V=301: the argmax kernel's last stride is partial. Batches of 3 and 5 prompts of
# different lengths, and of 11 (past GEMV_MAX_ROWS: cuBLAS inside the decode graph) whose
# longest prompts reach the context first, so that decode goes on with 10, 9, 8 and 7 rows.
# The models: random fp32 checkpoints in llm.c's format (256 x int32 header, then the 16
# tensors), L=2, Vp=384, maxT=64, written by perl (CI has no python): embeddings uniform in
# +-1 (so that the tokens, not the biases, decide the logits: with +-0.2 greedy repeated one
# token from the start), the other weights +-0.2 (std 0.12, six times GPT-2's), biases +-0.1,
# LayerNorm weights 1 +- 0.2, wte's padding rows 0; a 32-bit xorshift: the same bytes anywhere.
uneven_model() { # FILE C NH
    perl -e '
        my ($file, $C, $NH) = @ARGV;
        my ($L, $V, $Vp, $T) = (2, 301, 384, 64);
        my $x = 2463534242;
        sub u { $x ^= ($x << 13) & 0xffffffff; $x ^= $x >> 17; $x ^= ($x << 5) & 0xffffffff; return 2 * $x / 4294967296 - 1; }
        open(my $f, ">:raw", $file) or die "$file: $!";
        print $f pack("l<*", 20240326, 3, $T, $V, $L, $NH, $C, $Vp, (0) x 248);
        # (count, mean, spread): wte (then its padding), wpe, ln1w, ln1b, qkvw, qkvb, attprojw,
        # attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb
        for my $t ([$V * $C, 0, 1], [($Vp - $V) * $C, 0, 0], [$T * $C, 0, 1], [$L * $C, 1, 0.2], [$L * $C, 0, 0.1],
                   [$L * 3 * $C * $C, 0, 0.2], [$L * 3 * $C, 0, 0.1], [$L * $C * $C, 0, 0.2], [$L * $C, 0, 0.1],
                   [$L * $C, 1, 0.2], [$L * $C, 0, 0.1], [$L * 4 * $C * $C, 0, 0.2], [$L * 4 * $C, 0, 0.1],
                   [$L * 4 * $C * $C, 0, 0.2], [$L * $C, 0, 0.1], [$C, 1, 0.2], [$C, 0, 0.1]) {
            my ($n, $mean, $spread) = @$t;
            print $f pack("f<*", map { $mean + $spread * u() } 1 .. $n);
        }
        close($f) or die "$file: $!";
    ' "$@"
}
# prompt k of n: 5 + 3k token ids
uneven_prompts() { awk -v n=$1 'BEGIN { for (k = 0; k < n; k++) { s = ""; for (t = 0; t < 5 + 3 * k; t++) s = s (t ? "," : "") (7 * k + 13 * t) % 301; print s } }'; }
uneven_prompts 3 > "$TMP/uneven3"
uneven_prompts 5 > "$TMP/uneven5"
uneven_prompts 11 > "$TMP/uneven11"
for shape in 36,4 42,3; do
    C=${shape%,*} NH=${shape#*,}
    m="$TMP/c$C.bin"
    uneven_model "$m" $C $NH
    same "C=$C NH=$NH V=301: greedy, a batch of 3" -m "$m" -z 1 -t 0 -n 20 -f "$TMP/uneven3"
    same "C=$C NH=$NH V=301: sampled, a batch of 5" -m "$m" -z 1 -t 0.9 -k 40 -p 0.95 -s 5 -n 12 -f "$TMP/uneven5"
    same "C=$C NH=$NH V=301: greedy, 11 at once (cuBLAS, then gemv as the context fills)" -m "$m" -z 1 -t 0 -n 40 -f "$TMP/uneven11"
    same "C=$C NH=$NH V=301 -Q nf4:32,q8_0: greedy, 11 at once (rows of straddling blocks)" -m "$m" -Q nf4:32,q8_0 -z 1 -t 0 -n 40 -f "$TMP/uneven11"
    "$BF16" -m "$m" -z 1 -t 0 -n 40 -f "$TMP/uneven11" > "$TMP/bf16" 2> "$TMP/bf16.err"
    full=$(grep -c -- "generated, stopped at the end of the model's context" "$TMP/bf16")
    limit=$(grep -c -- "40 generated, stopped at the length limit" "$TMP/bf16")
    [ "$full" = 4 ] && [ "$limit" = 7 ] && grep -q "time to first token" "$TMP/bf16.err" && ok "BF16, C=$C NH=$NH V=301: 11 at once, 4 stopped by the context, 7 by the length" ||
        { not_ok "BF16, C=$C NH=$NH: $full and $limit sequences stopped as expected"; tail -3 "$TMP/bf16.err"; }
done
"$FP32" -m no/such -i 1 2> "$TMP/err"; [ $? = 1 ] && grep -q "no/such: no such file or folder" "$TMP/err" && ok "a missing model: the same error" || not_ok "missing model"
"$FP32" -m $F/hf_tiny_fp32 -i 1 2> "$TMP/err"; [ $? = 1 ] && grep -q -- "./convert -i $F/hf_tiny_fp32 -o" "$TMP/err" && ok "a Hugging Face folder: the ./convert command" || not_ok "a folder"

# BF16: it runs to the end, 64 tokens each, and its reports are there
"$BF16" -m $H/hf_tiny_bf16.bin -z 1 -t 0 -n 64 -f "$TMP/prompts" > "$TMP/bf16" 2> "$TMP/bf16.err"
n=$(grep -c -- "64 generated, stopped at the length limit" "$TMP/bf16")
[ "$n" = 4 ] && grep -q "time to first token" "$TMP/bf16.err" && grep -q "in bf16" "$TMP/bf16.err" && ok "BF16: 4 sequences of 64 tokens, bf16 weights, reports" || { not_ok "BF16 run"; tail -3 "$TMP/bf16.err"; }
"$CPU" -m $H/hf_tiny_bf16.bin -z 1 -t 0 -n 64 -f "$TMP/prompts" > "$TMP/bf16_cpu" 2> /dev/null
agree=$(paste -d'\n' <(grep -v -- '^---' "$TMP/bf16_cpu") <(grep -v -- '^---' "$TMP/bf16") | awk 'NR % 2 { a = $0; next } { n = split(a, x, " "); split($0, y, " "); k = 0; while (k < n && x[k + 1] == y[k + 1]) k++; s += k } END { print s }')
echo "        (BF16 greedy vs infer.c on the same weights: $agree leading tokens agree in total, not checked)"
# the benchmark table
"$FP32" -m $H/hf_tiny_fp32.bin -B 1 -b 1,2 -l 4 -N 3 > "$TMP/bench" 2> /dev/null
[ "$(grep -c '^| *[0-9]' "$TMP/bench")" = 2 ] && ok "-B 1: the benchmark table" || { not_ok "bench"; cat "$TMP/bench"; }

echo "$passed passed, $failed failed"
[ $failed = 0 ]
