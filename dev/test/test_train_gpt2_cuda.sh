#!/usr/bin/env bash
# train_gpt2.cu's kernels on the CPU, through the emulator (dev/emu), against
# train_gpt2.c: how CI checks the GPU trainer without a GPU.
#
#     make train_gpt2 dev/emu/train_gpt2cu_fp32_cpu dev/emu/train_gpt2cu_bf16_cpu dev/emu/train_gpt2cu_fp16_cpu
#     bash dev/test/test_train_gpt2_cuda.sh ./train_gpt2 ./dev/emu/train_gpt2cu_{fp32,bf16,fp16}_cpu
#
# Both programs train the same new d1 model (1 layer, C 64, GPT-2's vocabulary)
# on tinyshakespeare for 4 steps of B=2 x T=8, with validation, then compare:
#   1. FP32: every logged number (train loss, gradient norm, validation loss)
#      and the step-4 checkpoint (weights, AdamW m and v) with train_gpt2.c's;
#   2. the same with gradient accumulation (two micro-batches per step);
#   3. BF16 and FP16: losses and norms within their precision;
#   4. resume: a GPU run resumed from its step-2 checkpoint ends bit-identical to
#      an uninterrupted one (FP32, BF16 and FP16: master weights and the loss
#      scale are saved);
#      and the GPU resumes train_gpt2.c's checkpoint (one file format);
#   5. the GPU trainer's own flags: recomputation levels (-r) and BF16 without
#      master weights (-w 0), and bad values of both;
#   6. uneven shapes: a d2 model (C 128, 2 heads of 64 channels) on batches of
#      B=3 x T=7, compared as in 1 and 3 (FP32 also with -r 0 and gradient
#      accumulation), where the d1 runs above hide whole classes of bugs: there
#      every size B*T*C is a multiple of the 256-thread block (no thread past N)
#      and every column sum fits one block of 256 (C, 3C, 4C <= 256); and the
#      fixture of test_gpt2.cu has T equal to the head size. And a d1 model on
#      B=3 x T=45 (row sums over two chunks, rows longer than a warp), and a
#      model no d<N> makes (C=72, 3 heads of 24), written by this script;
#   7. -P: the phases, timed by the GPU's events, add up to the step's time;
#   8. -G: a memory budget refuses exactly what exceeds it; the start-up memory table
#      (also printed by -M 1, without a GPU) is what the run allocates, to the byte;
#   9. dev/sweep_gpt2.sh end to end (its tiny grid), in its GPU mode on these binaries.
# Run it from the repository root, after make data. SECTIONS="1 6" runs only those.
set -u
CPU=${1:-./train_gpt2}
FP32=${2:-./dev/emu/train_gpt2cu_fp32_cpu}
BF16=${3:-./dev/emu/train_gpt2cu_bf16_cpu}
FP16=${4:-./dev/emu/train_gpt2cu_fp16_cpu}
for b in "$CPU" "$FP32" "$BF16" "$FP16"; do
    [ -x "$b" ] || { echo "Error: $b is not built (make train_gpt2 dev/emu/train_gpt2cu_{fp32,bf16,fp16}_cpu)"; echo "0 passed, 1 failed"; exit 1; }
done
TMP=$(mktemp -d /tmp/test_train_gpt2_cuda.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
P=0 # the parameter count, from section 1's checkpoint (0 if that run failed: the size checks then fail too)
# SECTIONS="1 6" (or 1,6): only those sections (2 to 5 need 1; 6 stands alone); all by default
want() { local s=${SECTIONS:-}; [ -z "$s" ] || [[ " ${s//,/ } " == *" $1 "* ]]; }
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }

RUN=(-e d1 -b 2 -t 8 -x 4 -u 2 -v 2 -m 1 -s 0 -n 2)
run() { # BINARY DIR ARGS...: a run into DIR; its output in DIR.out
    local bin=$1 dir=$2
    shift 2
    rm -rf "$dir"
    "$bin" "${RUN[@]}" -o "$dir" "$@" > "$dir.out" 2>&1 || { echo "run failed: $bin $*"; tail -n 3 "$dir.out"; return 1; }
} # (flags given to run come after RUN's: they win)
# every number in two main.logs within a relative tolerance (the ms: fields excluded)
logs_close() { # LOG1 LOG2 TOL
    paste -d' ' <(sed -E 's/ ms:[0-9.]+//; s/[a-z]+://g' "$1") <(sed -E 's/ ms:[0-9.]+//; s/[a-z]+://g' "$2") |
        awk -v tol="$3" '{ h = NF / 2; if (NF % 2) bad = 1; for (i = 1; i <= h; i++) { d = $i - $(i + h); if (d < 0) d = -d;
               a = $i < 0 ? -$i : $i; if (d > tol * a + 1e-12) { bad = 1; print "  differs: " $i " vs " $(i + h) } } }
             END { exit bad }'
}
# the largest difference of two float32 arrays (file, byte offset, count) relative to the first one's largest value
rel_diff() { # FILE1 FILE2 OFFSET COUNT
    paste <(od -An -v -f -w4 -j"$3" -N$(($4 * 4)) "$1") <(od -An -v -f -w4 -j"$3" -N$(($4 * 4)) "$2") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > s) s = a }
             END { printf "%.3g\n", (s > 0 ? m / s : 0) }'
}
# how many of the floats differ by more than TOL times the first file's largest value
count_off() { # FILE1 FILE2 OFFSET COUNT TOL
    local max
    max=$(od -An -v -f -w4 -j"$3" -N$(($4 * 4)) "$1" | awk '{ a = $1 < 0 ? -$1 : $1; if (a > s) s = a } END { print s + 0 }')
    paste <(od -An -v -f -w4 -j"$3" -N$(($4 * 4)) "$1") <(od -An -v -f -w4 -j"$3" -N$(($4 * 4)) "$2") |
        awk -v lim="$(awk -v m="$max" -v t="$5" 'BEGIN { print m * t }')" '{ d = $1 - $2; if (d < 0) d = -d; if (d > lim) n++ } END { print n + 0 }'
}
under() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r != "" && r + 0 <= t + 0) }'; } # (empty: fails)

# --- 1. FP32 against train_gpt2.c. fp32 on both sides; only the order of sums
# differs (cuBLAS stand-in in double, warp reductions, chunked column sums), so
# losses and norms agree to ~1e-7 relative (measured: 1e-7); tolerance 1e-5.
# The weights after 4 AdamW steps: measured 4e-6 of the largest weight, 2e-6 for
# m and 8e-7 for v; tolerance 1e-4. But AdamW turns the rounding of a gradient
# that is nearly zero into a whole step of lr, either way: one such weight can
# differ by ~1e-2 of the largest on a GPU whose sums round differently from the
# CPU's (the emulator's double sums happen not to). So the weights pass if at
# most 1 in 10,000 is further off than 1e-4; the largest difference is printed.
checkpoints_close() { # CPU-DIR GPU-DIR NAME STEP [SKIP]: the checkpoints of two FP32 runs at STEP, as above
    # (weights, m and v from parameter SKIP on: the comparisons take seconds per million)
    local model state all p w m v off skip=$((${5:-0} * 4))
    printf -v model "model_%08d.bin" "$4"
    printf -v state "state_%08d.bin" "$4"
    all=$((($(stat -c %s "$1/$model") - 1024) / 4))
    p=$((all - ${5:-0}))
    if cmp -s <(head -c 1024 "$1/$model") <(head -c 1024 "$2/$model"); then
        w=$(rel_diff "$1/$model" "$2/$model" $((1024 + skip)) "$p")
        m=$(rel_diff "$1/$state" "$2/$state" $((1024 + skip)) "$p")
        v=$(rel_diff "$1/$state" "$2/$state" $((1024 + 4 * all + skip)) "$p")
        off=$(count_off "$1/$model" "$2/$model" $((1024 + skip)) "$p" 1e-4)
        [ "$off" -le $((p / 10000)) ] && under "$m" 1e-4 && under "$v" 1e-4 &&
            ok "$3: step-$4 checkpoint (llm.c fp32 format) matches: weights $w ($off of $p beyond 1e-4), AdamW m $m, v $v of their scale" ||
            not_ok "$3: step-$4 checkpoint differs: weights $w ($off of $p beyond 1e-4), m $m, v $v"
    else
        not_ok "$3: the model file headers differ"
    fi
}
if want 1; then
if run "$CPU" "$TMP/cpu" && run "$FP32" "$TMP/fp32"; then
    logs_close "$TMP/cpu/main.log" "$TMP/fp32/main.log" 1e-5 &&
        ok "FP32: train loss, gradient norm and validation loss of 4 steps within 1e-5 of train_gpt2.c" ||
        not_ok "FP32: logs differ from train_gpt2.c"
    P=$((($(stat -c %s "$TMP/cpu/model_00000004.bin") - 1024) / 4))
    checkpoints_close "$TMP/cpu" "$TMP/fp32" "FP32" 4
    grep -q "val loss" "$TMP/fp32.out" && grep -q "^hardware: GPU 0: " "$TMP/fp32.out" &&
        ok "FP32: validation ran, hardware line printed" || not_ok "FP32: output incomplete"
else
    not_ok "FP32: a run failed (see above)"
fi
fi # (section 1)

# --- 2. gradient accumulation: two micro-batches of 16 tokens per step
if want 2; then
if run "$CPU" "$TMP/cpu_acc" -d 32 && run "$FP32" "$TMP/fp32_acc" -d 32; then
    logs_close "$TMP/cpu_acc/main.log" "$TMP/fp32_acc/main.log" 1e-5 &&
        ok "FP32 with gradient accumulation (-d 32 = 2 x 16 tokens): logs within 1e-5 of train_gpt2.c" ||
        not_ok "FP32 with gradient accumulation: logs differ"
else
    not_ok "FP32 with gradient accumulation: a run failed (see above)"
fi
fi # (section 2)

# --- 3. BF16: every stored value is rounded to 8 bits of mantissa (relative
# error up to 2^-9 = 2e-3 each); the loss, an average over many, moved by 2e-5
# and the norm by 7e-5 (measured). Tolerances: 1e-3 (losses), 1e-2 (norms).
# (FP16 keeps 3 more mantissa bits: the same tolerances hold with room to spare.)
half_logs_close() { # LOG [CPU-LOG]: losses within 1e-3 and norms within 1e-2 of train_gpt2.c's log (section 1's)
    paste -d' ' <(sed -E 's/ ms:[0-9.]+//; s/[a-z]+://g' "${2:-$TMP/cpu/main.log}") <(sed -E 's/ ms:[0-9.]+//; s/[a-z]+://g' "$1") |
        awk 'NF == 4 { d = $2 - $4; if (d < 0) d = -d; if (d > 1e-3 * $2) bad = 1 }
             NF == 8 { for (i = 2; i <= 4; i += 2) { d = $i - $(i + 4); if (d < 0) d = -d; if (d > (i == 2 ? 1e-3 : 1e-2) * $i) bad = 1 } }
             NF != 4 && NF != 8 { bad = 1 } END { exit bad }'
}
if want 3; then
if run "$FP16" "$TMP/fp16"; then
    half_logs_close "$TMP/fp16/main.log" && grep -q "loss scale 65536" "$TMP/fp16.out" &&
        ok "FP16 (loss scale 65536): losses within 1e-3 and gradient norms within 1e-2 of train_gpt2.c's fp32" ||
        { not_ok "FP16: logs too far from train_gpt2.c"; paste "$TMP/cpu/main.log" "$TMP/fp16/main.log"; }
    [ "$(od -An -t d4 -j4 -N4 "$TMP/fp16/model_00000004.bin" | tr -d ' ')" = 3 ] &&
        ok "FP16: writes fp32 model files (version 3: llm.c has no fp16 format)" || not_ok "FP16: model file is not version 3"
else
    not_ok "FP16: the run failed (see above)"
fi
if run "$BF16" "$TMP/bf16"; then
    half_logs_close "$TMP/bf16/main.log" &&
        ok "BF16: losses within 1e-3 and gradient norms within 1e-2 of train_gpt2.c's fp32" ||
        { not_ok "BF16: logs too far from train_gpt2.c"; paste "$TMP/cpu/main.log" "$TMP/bf16/main.log"; }
    [ "$(od -An -t d4 -j4 -N4 "$TMP/bf16/model_00000004.bin" | tr -d ' ')" = 5 ] &&
        [ "$(stat -c %s "$TMP/bf16/model_00000004.bin")" = $((1024 + 2 * P)) ] &&
        ok "BF16: writes llm.c's bf16 model file (version 5, 2 bytes a parameter)" || not_ok "BF16: model file is not version 5"
else
    not_ok "BF16: the run failed (see above)"
fi
fi # (section 3)

# --- 4. resume: from the GPU's own step-2 checkpoint, bit for bit; and from the CPU's
if want 4; then
for prec in fp32 bf16 fp16; do
    bin=$FP32 && [ $prec = bf16 ] && bin=$BF16
    [ $prec = fp16 ] && bin=$FP16
    dir=$TMP/$prec
    [ -f "$dir/state_00000002.bin" ] || { not_ok "$prec: no step-2 checkpoint to resume"; continue; }
    rm -rf "$TMP/resume" && mkdir -p "$TMP/resume" && cp "$dir/model_00000002.bin" "$dir/state_00000002.bin" "$dir/main.log" "$TMP/resume/"
    "$bin" "${RUN[@]}" -o "$TMP/resume" -y 1 > "$TMP/resume.out" 2>&1
    rc=$?
    if [ $rc = 0 ] && cmp -s "$dir/model_00000004.bin" "$TMP/resume/model_00000004.bin" &&
       cmp -s "$dir/state_00000004.bin" "$TMP/resume/state_00000004.bin" &&
       diff <(sed -E 's/ ms:[0-9.]+//' "$dir/main.log") <(sed -E 's/ ms:[0-9.]+//' "$TMP/resume/main.log") > /dev/null; then
        ok "$prec: resumed from its step-2 checkpoint, identical model, optimizer state$([ $prec != fp32 ] && echo ' (with master weights)') and log at step 4"
    else
        not_ok "$prec: the resumed run differs (exit $rc)"; tail -n 3 "$TMP/resume.out"
    fi
done
if [ -f "$TMP/cpu/state_00000002.bin" ]; then
    rm -rf "$TMP/cross" && mkdir -p "$TMP/cross" && cp "$TMP/cpu/model_00000002.bin" "$TMP/cpu/state_00000002.bin" "$TMP/cpu/main.log" "$TMP/cross/"
    if "$FP32" "${RUN[@]}" -o "$TMP/cross" -y 1 > "$TMP/cross.out" 2>&1; then
        w=$(rel_diff "$TMP/cpu/model_00000004.bin" "$TMP/cross/model_00000004.bin" 1024 "$P")
        under "$w" 1e-4 && ok "FP32 GPU resumed train_gpt2.c's step-2 checkpoint; its step-4 weights match the CPU's within $w" ||
            not_ok "FP32 GPU resumed the CPU checkpoint but ends $w away"
    else
        not_ok "FP32 GPU could not resume train_gpt2.c's checkpoint"; tail -n 3 "$TMP/cross.out"
    fi
fi
fi # (section 4)

# --- 5. the GPU trainer's own flags. Recomputation (-r) replays the forward
# kernels: -r 1 (the default, run above) and -r 2 must give identical files;
# -r 0 applies GELU in cuBLASLt's epilogue instead, so in FP32 it is held to
# train_gpt2.c like the default. BF16 without master weights (-w 0, stochastic
# rounding): within the BF16 tolerances of section 3, no master weights in the
# state file, and resumable bit for bit. Bad values are refused.
if want 5; then
for prec in fp32 bf16; do
    bin=$FP32 && [ $prec = bf16 ] && bin=$BF16
    if run "$bin" "$TMP/${prec}_r2" -r 2; then
        cmp -s "$TMP/$prec/model_00000004.bin" "$TMP/${prec}_r2/model_00000004.bin" &&
            cmp -s "$TMP/$prec/state_00000004.bin" "$TMP/${prec}_r2/state_00000004.bin" &&
            ok "$prec: -r 2 (LayerNorm and GELU recomputed) ends bit-identical to -r 1" ||
            not_ok "$prec: -r 2 and -r 1 differ"
    else
        not_ok "$prec: the -r 2 run failed"
    fi
done
if run "$FP32" "$TMP/fp32_r0" -r 0; then
    logs_close "$TMP/cpu/main.log" "$TMP/fp32_r0/main.log" 1e-5 &&
        ok "FP32 -r 0 (GELU in the matmul epilogue): logs within 1e-5 of train_gpt2.c" || not_ok "FP32 -r 0: logs differ"
else
    not_ok "FP32: the -r 0 run failed"
fi
if run "$BF16" "$TMP/bf16_w0" -w 0; then
    half_logs_close "$TMP/bf16_w0/main.log" &&
        [ "$(stat -c %s "$TMP/bf16_w0/state_00000004.bin")" = $((1024 + 8 * P)) ] &&
        grep -q "without master weights" "$TMP/bf16_w0.out" &&
        ok "BF16 -w 0 (stochastic rounding): losses within 1e-3, norms within 1e-2 of train_gpt2.c; no master weights saved" ||
        not_ok "BF16 -w 0: logs too far from train_gpt2.c, or master weights in the state file"
    rm -rf "$TMP/resume" && mkdir -p "$TMP/resume" && cp "$TMP/bf16_w0/model_00000002.bin" "$TMP/bf16_w0/state_00000002.bin" "$TMP/bf16_w0/main.log" "$TMP/resume/"
    "$BF16" "${RUN[@]}" -o "$TMP/resume" -y 1 -w 0 > "$TMP/resume.out" 2>&1 &&
        cmp -s "$TMP/bf16_w0/model_00000004.bin" "$TMP/resume/model_00000004.bin" &&
        cmp -s "$TMP/bf16_w0/state_00000004.bin" "$TMP/resume/state_00000004.bin" &&
        ok "BF16 -w 0: resumed from step 2, bit-identical at step 4" || not_ok "BF16 -w 0: the resumed run differs"
else
    not_ok "BF16: the -w 0 run failed"
fi
# sampling (every forward of a fixed length, the undrawn tokens padded): in FP32
# the same text as train_gpt2.c's from the same seed; in BF16 and FP16 a sample
SAMPLE=(-e d1 -b 2 -t 16 -x 2 -u 1 -v 0 -s 2 -g 12 -o "")
sample_of() { awk '/^generating:$/ { g = 1; n = 0; next } g && /^---$/ { if (++n == 2) g = 0; next } g'; } # the text between the ---s
"$CPU" "${SAMPLE[@]}" > "$TMP/sample_cpu.out" 2>&1 && "$FP32" "${SAMPLE[@]}" > "$TMP/sample_fp32.out" 2>&1 &&
    [ "$(grep -c '^generating:' "$TMP/sample_cpu.out")" = 2 ] &&
    [ "$(sample_of < "$TMP/sample_cpu.out")" = "$(sample_of < "$TMP/sample_fp32.out")" ] &&
    ok "FP32 samples (steps 0 and 2, 12 tokens) identical to train_gpt2.c's" ||
    { not_ok "FP32 samples differ from train_gpt2.c's (or a run failed)"; tail -n 4 "$TMP/sample_cpu.out" "$TMP/sample_fp32.out"; }
for prec in bf16 fp16; do
    bin=$BF16 && [ $prec = fp16 ] && bin=$FP16
    "$bin" "${SAMPLE[@]}" > "$TMP/sample_$prec.out" 2>&1 && [ "$(grep -c '^generating:' "$TMP/sample_$prec.out")" = 2 ] &&
        ok "$prec: samples at steps 0 and 2" || { not_ok "$prec: sampling failed"; tail -n 3 "$TMP/sample_$prec.out"; }
done
# FP16's loss scale in a real run: with one token a batch the gradient of the
# logits is the scale times (p - 1) at the target, which overflows fp16 at 2^16
# (and, here, at 2^15 too, in the backward pass): the first steps are skipped,
# each halving the scale, then training goes on at 2^16 / 2^skips; resumed from
# the checkpoint after step 2, the run ends bit-identical.
ONE=(-e d1 -b 1 -t 1 -x 4 -u 1 -v 0 -s 0 -n 1)
skips=0
"$FP16" "${ONE[@]}" -o "$TMP/fp16_skip" > "$TMP/fp16_skip.out" 2>&1 && skips=$(grep -c 'update skipped' "$TMP/fp16_skip.out")
if [ "$skips" -ge 1 ] && [ "$skips" -le 3 ] && grep -q "^step    4/4 .*loss scale $((65536 >> skips))\$" "$TMP/fp16_skip.out"; then
    ok "FP16: overflowing gradients skip $skips updates (scale 65536 -> $((65536 >> skips))), then training goes on"
    rm -rf "$TMP/resume" && mkdir -p "$TMP/resume" &&
        cp "$TMP/fp16_skip/model_00000002.bin" "$TMP/fp16_skip/state_00000002.bin" "$TMP/fp16_skip/main.log" "$TMP/resume/"
    "$FP16" "${ONE[@]}" -o "$TMP/resume" -y 1 > "$TMP/resume.out" 2>&1 &&
        cmp -s "$TMP/fp16_skip/model_00000004.bin" "$TMP/resume/model_00000004.bin" &&
        cmp -s "$TMP/fp16_skip/state_00000004.bin" "$TMP/resume/state_00000004.bin" &&
        ok "FP16: resumed after the skipped steps (scale and AdamW's count restored), bit-identical at step 4" ||
        not_ok "FP16: the run resumed after skipped steps differs"
else
    not_ok "FP16: expected 1 to 3 skipped updates, then a loss scale halved as often"; grep '^step' "$TMP/fp16_skip.out"
fi
# Where cuBLASLt cannot fuse an epilogue, our kernels do its work: with every
# epilogue refused (emulated binaries only), FP32 at -r 0 (bias, GELU and its
# derivative all fall back) still matches train_gpt2.c
case "$FP32" in *_cpu)
    if EMU_CUBLASLT_NO_EPILOGUES=1 "$FP32" "${RUN[@]}" -r 0 -o "$TMP/fp32_noepi" > "$TMP/fp32_noepi.out" 2>&1; then
        grep -q "^note: cuBLASLt cannot fuse epilogue" "$TMP/fp32_noepi.out" && logs_close "$TMP/cpu/main.log" "$TMP/fp32_noepi/main.log" 1e-5 &&
            ok "FP32 -r 0 without cuBLASLt epilogues (our kernels instead): logs within 1e-5 of train_gpt2.c" ||
            not_ok "FP32 without cuBLASLt epilogues: logs differ, or no note"
    else
        not_ok "FP32 without cuBLASLt epilogues: the run failed"; tail -n 3 "$TMP/fp32_noepi.out"
    fi ;;
esac
bad_flag() { # EXPECTED-MESSAGE BINARY ARGS...: must exit non-zero with the message
    local msg=$1 bin=$2
    shift 2
    out=$("$bin" "$@" 2>&1) && { not_ok "$bin $* was accepted"; return; }
    grep -q -- "$msg" <<< "$out" && ok "refused: $bin $* ($msg)" || { not_ok "$bin $*: wrong message"; echo "$out" | tail -n 2; }
}
bad_flag "flag -r takes 0, 1 or 2" "$FP32" -r 3
bad_flag "flag -w takes 0 or 1" "$BF16" -w 2
bad_flag "an fp16 build always keeps master weights" "$FP16" -w 0
bad_flag "flag -r is train_gpt2cu's" "$CPU" -r 1
bad_flag "flag -M is train_gpt2cu's" "$CPU" -M 1
bad_flag "flag -M takes 0 or 1" "$FP32" -M 2
bad_flag "Error: -M plans a new run; -y 1 resumes one" "$FP32" -M 1 -y 1 -o "$TMP"
bad_flag "neither an existing file nor a descriptor" "$FP32" -M 1 -e gpt2-125M
# out of memory, on an emulated device of 100 MiB: the d1 model fits, its
# activations at B=64, T=256 (the logits alone 1.6 GB) do not
# (emulated binaries only: a real GPU has its own size)
case "$BF16" in *_cpu) bad_flag "out of GPU memory: the activations need" env EMU_DEVICE_MIB=100 "$BF16" -e d1 -b 64 -t 256 -x 1 -v 0 -s 0 -o "" ;; esac
fi # (section 5)

# --- 6. uneven shapes. d2: C=128 in 2 heads of HS=64, so the bias gradients of
# 3C=384 and 4C=512 columns take two blocks of 256 threads in y in the column
# sums (LayerNorm's C=128 columns still fit one); B=3 x T=7: 21 rows (odd),
# B*T*C=2688 is not a multiple of 256 (a thread with i == N exists), T is
# neither the head size nor a power of two.
# The same tolerances as sections 1 and 3, over 2 steps (a d2 step takes 3 s
# under the emulator, most of it in the tied output layer); the checkpoints
# compared without wte (6.4 of 7 million parameters, seconds to compare; it feeds
# every logged loss). One more FP32 run goes through -r 0 and gradient
# accumulation at once. (4C*B*T is still a multiple of 256: every d<N> model has
# 4C = 256N.)
if want 6; then
UNEVEN=(-e d2 -b 3 -t 7 -x 2 -u 1 -n 2)
if run "$CPU" "$TMP/cpu_d2" "${UNEVEN[@]}" && run "$FP32" "$TMP/fp32_d2" "${UNEVEN[@]}"; then
    logs_close "$TMP/cpu_d2/main.log" "$TMP/fp32_d2/main.log" 1e-5 &&
        ok "FP32 d2, B=3 x T=7: train loss, gradient norm and validation loss within 1e-5 of train_gpt2.c" ||
        { not_ok "FP32 d2, B=3 x T=7: logs differ from train_gpt2.c"; paste "$TMP/cpu_d2/main.log" "$TMP/fp32_d2/main.log"; }
    checkpoints_close "$TMP/cpu_d2" "$TMP/fp32_d2" "FP32 d2, B=3 x T=7 (all but wte)" 2 $((50304 * 128))
    if run "$BF16" "$TMP/bf16_d2" "${UNEVEN[@]}"; then
        half_logs_close "$TMP/bf16_d2/main.log" "$TMP/cpu_d2/main.log" &&
            ok "BF16 d2, B=3 x T=7: losses within 1e-3 and gradient norms within 1e-2 of train_gpt2.c's fp32" ||
            { not_ok "BF16 d2, B=3 x T=7: logs too far from train_gpt2.c"; paste "$TMP/cpu_d2/main.log" "$TMP/bf16_d2/main.log"; }
    else
        not_ok "BF16 d2, B=3 x T=7: the run failed (see above)"
    fi
else
    not_ok "FP32 d2, B=3 x T=7: a run failed (see above)"
fi
if run "$CPU" "$TMP/cpu_d2_acc" "${UNEVEN[@]}" -d 42 -v 0 && run "$FP32" "$TMP/fp32_d2_acc" "${UNEVEN[@]}" -d 42 -v 0 -r 0; then
    logs_close "$TMP/cpu_d2_acc/main.log" "$TMP/fp32_d2_acc/main.log" 1e-5 &&
        ok "FP32 d2, -r 0 with gradient accumulation (-d 42 = 2 x 21 tokens): logs within 1e-5 of train_gpt2.c" ||
        { not_ok "FP32 d2, -r 0 with gradient accumulation: logs differ"; paste "$TMP/cpu_d2_acc/main.log" "$TMP/fp32_d2_acc/main.log"; }
else
    not_ok "FP32 d2, -r 0 with gradient accumulation: a run failed (see above)"
fi
# Longer rows: d1 on B=3 x T=45, 1 step. 135 rows: the row sums of the bias and
# LayerNorm gradients take two chunks of 128 rows (every run above fits in one),
# and 45 scores a row: a warp's lanes go round twice in the softmax.
LONG=(-e d1 -b 3 -t 45 -x 1 -u 1 -v 0 -n 0)
if run "$CPU" "$TMP/cpu_long" "${LONG[@]}" && run "$FP32" "$TMP/fp32_long" "${LONG[@]}"; then
    logs_close "$TMP/cpu_long/main.log" "$TMP/fp32_long/main.log" 1e-5 &&
        ok "FP32 d1, B=3 x T=45 (two chunks of rows, rows longer than a warp): logs within 1e-5 of train_gpt2.c" ||
        { not_ok "FP32 d1, B=3 x T=45: logs differ"; paste "$TMP/cpu_long/main.log" "$TMP/fp32_long/main.log"; }
else
    not_ok "FP32 d1, B=3 x T=45: a run failed (see above)"
fi
# Flash attention (-F 1) on both sides: at T = 45 a head's queries are 3 blocks of 16 and its
# keys 2 tiles of 32, so the online softmax rescales; held as the default attention is
if run "$CPU" "$TMP/cpu_flash" "${LONG[@]}" -x 2 -F 1 && run "$FP32" "$TMP/fp32_flash" "${LONG[@]}" -x 2 -F 1 &&
   run "$BF16" "$TMP/bf16_flash" "${LONG[@]}" -x 2 -F 1; then
    logs_close "$TMP/cpu_flash/main.log" "$TMP/fp32_flash/main.log" 1e-5 &&
        ok "FP32 -F 1 (flash attention), d1, B=3 x T=45, 2 steps: logs within 1e-5 of train_gpt2.c -F 1" ||
        { not_ok "FP32 -F 1: logs differ"; paste "$TMP/cpu_flash/main.log" "$TMP/fp32_flash/main.log"; }
    half_logs_close "$TMP/bf16_flash/main.log" "$TMP/cpu_flash/main.log" &&
        ok "BF16 -F 1: losses within 1e-3 and gradient norms within 1e-2 of train_gpt2.c -F 1" ||
        { not_ok "BF16 -F 1: logs too far from train_gpt2.c"; paste "$TMP/cpu_flash/main.log" "$TMP/bf16_flash/main.log"; }
    grep -q "^attention: ours, flash attention" "$TMP/fp32_flash.out" && ok "-F 1: the start-up says which attention" ||
        not_ok "-F 1: no attention line"
    # recomputation replays the forward kernels: -r 2 with flash attention, bit for bit
    if run "$FP32" "$TMP/fp32_flash_r2" "${LONG[@]}" -x 2 -F 1 -r 2 -n 2; then
        run "$FP32" "$TMP/fp32_flash_r1" "${LONG[@]}" -x 2 -F 1 -n 2 &&
            cmp -s "$TMP/fp32_flash_r1/model_00000002.bin" "$TMP/fp32_flash_r2/model_00000002.bin" &&
            cmp -s "$TMP/fp32_flash_r1/state_00000002.bin" "$TMP/fp32_flash_r2/state_00000002.bin" &&
            ok "FP32 -F 1 -r 2 (LayerNorm and GELU recomputed): the step-2 checkpoint bit-identical to -F 1 -r 1's" ||
            not_ok "FP32 -F 1: -r 2 and -r 1 differ"
    else
        not_ok "FP32 -F 1 -r 2: the run failed"
    fi
else
    not_ok "-F 1 (flash attention): a run failed (see above)"
fi
# A model no d<N> makes: C=72 in 3 heads of 24 (1 layer, maxT 64). C is not a
# multiple of 32 (LayerNorm's warps end on a partial pass), its 4C=288 columns take
# two blocks, and B*T*4C=6048 is not a multiple of 256 (with every d<N> it is: GELU's
# launches have no thread past N there). Written here in llm.c's format: the
# matrices' numbers borrowed from the d2 checkpoint's wte (trained N(0, 0.02)-like
# weights), LayerNorm weights 1, biases 0; both trainers start from this file.
le32() { local b; for b in 0 8 16 24; do printf "\\$(printf %03o $(($1 >> b & 255)))"; done; } # an int32, little-endian
ones() { local i; for ((i = 0; i < $1; i++)); do printf '\000\000\200\077'; done; } # N floats 1.0
zeros() { head -c $(($1 * 4)) /dev/zero; }
borrow() { tail -c +$((1025 + 4 * taken)) "$TMP/cpu_d2/model_00000002.bin" | head -c $(($1 * 4)); taken=$((taken + $1)); }
if [ -f "$TMP/cpu_d2/model_00000002.bin" ]; then
    c=72 taken=0
    { for h in 20240326 3 64 50257 1 3 $c 50304; do le32 $h; done; zeros 248 # magic, version, maxT, V, L, NH, C, Vp
      borrow $((50304 * c)); borrow $((64 * c))                                # wte, wpe
      ones $c; zeros $c                                                        # ln1
      borrow $((3 * c * c)); zeros $((3 * c)); borrow $((c * c)); zeros $c     # qkv, attproj
      ones $c; zeros $c                                                        # ln2
      borrow $((4 * c * c)); zeros $((4 * c)); borrow $((4 * c * c)); zeros $c # fc, fcproj
      ones $c; zeros $c; } > "$TMP/c72.bin"                                    # lnf
fi
C72=(-e "$TMP/c72.bin" -b 3 -t 7 -x 2 -u 1 -n 0)
if run "$CPU" "$TMP/cpu_c72" "${C72[@]}" && run "$FP32" "$TMP/fp32_c72" "${C72[@]}"; then
    logs_close "$TMP/cpu_c72/main.log" "$TMP/fp32_c72/main.log" 1e-5 &&
        ok "FP32 C=72 (3 heads of 24), B=3 x T=7: logs within 1e-5 of train_gpt2.c" ||
        { not_ok "FP32 C=72, B=3 x T=7: logs differ"; paste "$TMP/cpu_c72/main.log" "$TMP/fp32_c72/main.log"; }
else
    not_ok "FP32 C=72, B=3 x T=7: a run failed (see above)"
fi
fi # (section 6)

# --- 7. -P: the phases by the GPU's events (two micro-batches a step), adding up to the step's time;
# the host's clock shown beside them once; both in main.log
if want 7; then
source "$(dirname "$0")/phases_check.sh"
if run "$FP32" "$TMP/phases" -d 32 -P 2 -v 0; then
    read -r lines worst zero <<< "$(phase_lines "$TMP/phases.out")"
    read -r log_lines log_worst <<< "$(phase_log_lines "$TMP/phases/main.log")"
    if [ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.11) }' && [ "$log_lines" = 2 ] &&
       awk -v w="$log_worst" 'BEGIN { exit !(w <= 0.08) }' && [ "$(grep -c "those are the GPU's times, from events" "$TMP/phases.out")" = 1 ] &&
       grep -q "^s:4 .* host_ms_update:" "$TMP/phases/main.log"; then
        ok "-P 2: steps 2 and 4 timed by the GPU's events, adding up to the step's time (within $worst ms; $log_worst in main.log), the host's clock beside them once"
    else
        not_ok "-P 2: $lines lines with phases (worst $worst ms, $zero empty passes), $log_lines in main.log (worst $log_worst)"
        grep -E "^step|those are" "$TMP/phases.out" | head -4
    fi
else
    not_ok "-P 2: the run failed (see above)"
fi
fi # (section 7)

# --- 8. -G: a memory budget, on the emulator's device of 4 GiB (EMU_DEVICE_MIB). Start from a
# budget of 1 MiB and raise it each time by exactly the bytes the refusal says were missing,
# until the run goes through: that budget is what the run needs, and one byte less is refused
if want 8; then
gib() { awk -v b="$1" 'BEGIN { printf "%.30f", b / 1073741824 }'; } # (exact: b / 2^30 is a double, printed in full)
budget=$((1 << 20)) tries=0 fits=0
while [ $tries -lt 40 ]; do
    tries=$((tries + 1))
    if EMU_DEVICE_MIB=4096 "$FP32" "${RUN[@]}" -x 1 -v 0 -n 0 -o "" -G "$(gib $budget)" > "$TMP/budget.out" 2>&1; then fits=1; break; fi
    short=$(sed -n 's/.*MiB short (\([0-9]*\) bytes;.*/\1/p' "$TMP/budget.out" | head -1)
    [ -n "$short" ] && [ "$short" -gt 0 ] || break
    budget=$((budget + short))
done
EMU_DEVICE_MIB=4096 "$FP32" "${RUN[@]}" -x 1 -v 0 -n 0 -o "" -G "$(gib $((budget - 1)))" > "$TMP/budget_less.out" 2>&1
rc=$?
if [ $fits = 1 ] && [ $rc = 1 ] && grep -q "^Error: out of GPU memory (the -G budget): .* (1 bytes; " "$TMP/budget_less.out" &&
   grep -q "^HINT: lower the batch size" "$TMP/budget_less.out"; then
    ok "-G: the run fits a budget of exactly $budget bytes (found in $tries tries), and one byte less is refused with the out-of-memory advice"
else
    not_ok "-G: fits $fits after $tries tries at $budget bytes; one byte less: exit $rc"; tail -n 3 "$TMP/budget.out" "$TMP/budget_less.out"
fi
# the budget that fits is, to the byte, the total of the start-up table (the emulator's device
# has nothing else in use), and -M prints that table without running
# (emulated binaries only: a real GPU has the CUDA context in use too)
plan=$(EMU_DEVICE_MIB=4096 "$FP32" "${RUN[@]}" -M 1 -n 0 -o "" | sed -n 's/^  total .* = \([0-9]*\) bytes.*/\1/p')
case "$FP32" in *_cpu)
    [ "$plan" = "$budget" ] && ok "-G: that budget is the start-up memory table's total, $plan bytes (-M 1)" ||
        not_ok "-G: the run needs $budget bytes, the table (-M 1) says '$plan'" ;;
esac
# The table against the allocations (the ledger) after the first step, run by run: the three
# precisions, the three recomputation levels, master weights off, gradient accumulation, shapes
# that divide no block (B=3, T=7 and 45), validation and samples (other batch shapes), a model
# file and the named GPT-2 shapes (their tables only: -M needs no device)
plan_check() { # BINARY ARGS...: -M's table is the run's start-up table, and the run allocates exactly its total
    local bin=$1
    shift
    "$bin" "$@" -M 1 > "$TMP/plan.out" 2>&1 || { not_ok "-M 1 $*: failed"; tail -n 2 "$TMP/plan.out"; return; }
    EMU_DEVICE_MIB=4096 "$bin" "$@" > "$TMP/plan_run.out" 2>&1 || { not_ok "run $*: failed"; tail -n 2 "$TMP/plan_run.out"; return; }
    local total allocated
    total=$(sed -n 's/^  total .* = \([0-9]*\) bytes.*/\1/p' "$TMP/plan.out")
    allocated=$(sed -n 's/^GPU memory after the first step: allocated \([0-9]*\) bytes.*, peak \([0-9]*\) bytes, predicted \([0-9]*\) .*/\1 \2 \3/p' "$TMP/plan_run.out")
    if [ -n "$total" ] && [ "$allocated" = "$total $total $total" ] && grep -q "(equal)" "$TMP/plan_run.out" &&
       diff <(grep -A9 '^GPU memory (' "$TMP/plan.out") <(grep -A9 '^GPU memory (' "$TMP/plan_run.out") > /dev/null; then
        ok "memory plan = allocation, $total bytes: ${bin##*/} $*"
    else
        not_ok "memory plan $total, allocated/peak/predicted '$allocated': ${bin##*/} $*"; grep -A9 '^GPU memory' "$TMP/plan.out" "$TMP/plan_run.out"
    fi
}
ONE=(-x 1 -v 0 -s 0 -n 0 -o "")
plan_check "$FP32" -e d1 -b 3 -t 7 -r 0 "${ONE[@]}"
plan_check "$FP32" -e d1 -b 3 -t 45 -r 2 -d 270 "${ONE[@]}"
plan_check "$FP32" -e d2 -b 3 -t 7 -r 1 -x 1 -v 1 -m 1 -s 1 -g 3 -n 0 -o ""
plan_check "$BF16" -e d1 -b 3 -t 7 -r 2 -w 0 "${ONE[@]}"
plan_check "$FP16" -e d1 -b 2 -t 20 -r 1 "${ONE[@]}"
plan_check "$FP32" -e d1 -b 3 -t 45 -r 2 -F 1 "${ONE[@]}"
plan_check "$BF16" -e d2 -b 2 -t 40 -r 0 -F 1 "${ONE[@]}"
rm -rf "$TMP/planned"
if EMU_DEVICE_MIB=4096 "$BF16" -e d1 -b 2 -t 8 -x 1 -v 0 -s 0 -n 1 -o "$TMP/planned" > "$TMP/planned.out" 2>&1; then
    plan_check "$FP16" -e "$TMP/planned/model_00000001.bin" -b 3 -t 9 -r 2 "${ONE[@]}"
    # resumed, the moments come from the state file (load_state), not the first update: checked all the same
    EMU_DEVICE_MIB=4096 "$BF16" -e d1 -b 2 -t 8 -x 2 -v 0 -s 0 -n 1 -o "$TMP/planned" -y 1 > "$TMP/planned_resumed.out" 2>&1 &&
        grep -q "^GPU memory after the first step: allocated .* (equal);" "$TMP/planned_resumed.out" &&
        ok "memory plan = allocation in a resumed run" || { not_ok "a resumed run: no ledger check, or unequal"; tail -n 3 "$TMP/planned_resumed.out"; }
else
    not_ok "a d1 checkpoint for the model-file plan: the run failed"
fi
# the named shapes: GPT-2 124M is d12 (the same table); 350M has 354,871,296 parameters
# (transformers' GPT2LMHeadModel gpt2-medium: 354,823,168, and our tied head's padding
# to 50304 rows adds 47 x 1024)
a=$("$BF16" -M 1 -e gpt2-124M -b 4 -t 64 | grep -A9 '^GPU memory'); b=$("$BF16" -M 1 -e d12 -b 4 -t 64 | grep -A9 '^GPU memory')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "-M: gpt2-124M plans as d12" || not_ok "-M: gpt2-124M and d12 differ"
"$BF16" -M 1 -e gpt2-350M -b 4 -t 64 | grep -q "^model: gpt2-350M | maxT 1024 | V 50257 (padded 50304) | L 24 | NH 16 | C 1024 | 354871296 parameters" &&
    ok "-M: gpt2-350M is L 24, NH 16, C 1024, 354,871,296 parameters" || not_ok "-M: gpt2-350M's shape"
out=$("$FP32" -G lots 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "flag -G needs a number of GiB >= 0, got 'lots'" && ok "-G lots: exit 1, one clear error" || not_ok "-G lots: exit $rc: $out"
fi # (section 8)

# --- 9. the sweep (dev/sweep_gpt2.sh, docs/performance.md) on its tiny grid, in its GPU mode:
# every cell that fits must allocate what its table says (the run's own check) and report
# tokens/s; the one whose logits alone exceed 16 GiB must be refused by -G 16; the CPU
# trainer's cell reports its tokens/s and its table; the tables and the TSV are written
if want 9; then
if EMU_DEVICE_MIB=4096 SWEEP_FP32=$FP32 SWEEP_BF16=$BF16 SWEEP_FP16=$FP16 SWEEP_CPU=$CPU bash dev/sweep_gpt2.sh gpu tiny "$TMP/sweep" > "$TMP/sweep.out" 2>&1 &&
   tail -n 1 "$TMP/sweep.out" | grep -q "^5 passed, 0 failed"; then
    ok "dev/sweep_gpt2.sh gpu tiny: 5 cells, none failed"
else
    not_ok "dev/sweep_gpt2.sh gpu tiny failed"; tail -n 5 "$TMP/sweep.out"
fi
# (device in use: on the emulator's device, what the program allocated, printed in MiB to 0.1;
# on a real GPU more, the CUDA context and the libraries' memory)
emulated=$(case "$BF16" in *_cpu) echo 1 ;; *) echo 0 ;; esac)
bad=$(awk -F'\t' -v emu="$emulated" 'NR > 1 && $1 == "gpu" && $11 == "yes" {
    mib = $8 / 1048576; in_use_ok = emu ? ($10 - mib) ^ 2 < 0.0025 : $10 >= mib - 0.05
    if (!($9 == $8 && $13 > 0 && in_use_ok)) print $2, $3, $4, $5 }' "$TMP/sweep/sweep.tsv")
fit=$(awk -F'\t' 'NR > 1 && $1 == "gpu" && $11 == "yes"' "$TMP/sweep/sweep.tsv" | wc -l)
[ "$fit" = 3 ] && [ -z "$bad" ] && ok "sweep: the 3 cells that fit allocated their tables' bytes (device in use alike) and have tokens/s" ||
    not_ok "sweep: $fit cells fit; wrong: $bad"
awk -F'\t' 'NR > 1 && $4 == 256 && $11 == "no" && $8 > 17179869184' "$TMP/sweep/sweep.tsv" | grep -q . &&
    grep -q "out of GPU memory (the -G budget): the activations need" "$TMP/sweep/cells/d1_bf16_B256_T1024_r1_a1.out" &&
    ok "sweep: B=256 x T=1024 (table > 16 GiB) refused by -G 16" || not_ok "sweep: the cell over 16 GiB was not refused as such"
awk -F'\t' 'NR > 1 && $1 == "cpu-trainer" && $2 == "d1" && $8 > 0 && $13 > 0' "$TMP/sweep/sweep.tsv" | grep -q . &&
    grep -q '^| d1 | 2 | 8 | ' "$TMP/sweep/sweep.md" && grep -q '^| d1 | fp16 | 3 | 7 | 2 | 2 | ' "$TMP/sweep/sweep.md" &&
    ok "sweep: the CPU trainer's cell, and sweep.md's two tables" || not_ok "sweep: the CPU cell or sweep.md"
fi # (section 9)

echo "$passed passed, $failed failed"
[ $failed = 0 ]
