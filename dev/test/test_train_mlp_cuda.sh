#!/usr/bin/env bash
# train_mlp.cu's kernels on the CPU, through the emulator (dev/emu), against
# train_mlp.c: how CI checks the GPU program without a GPU.
#
#     make dev/emu/train_mlpcu_cpu train_mlp
#     bash dev/test/test_train_mlp_cuda.sh ./dev/emu/train_mlpcu_cpu ./train_mlp
#
# 1. --check, for each matmul path (naive, tiled, cuBLAS's stand-in) and each
#    optimizer: every tensor of 3 steps against the double-precision reference.
# 2. The twin run: train_mlp.c and the emulated train_mlp.cu train the same small
#    network for 2 epochs on a fake dataset; the logged losses and accuracies,
#    the checkpoint (header, weights and AdamW state) and the test report must
#    agree within fp32 rounding (tolerances below).
# 3. Same checkpoint format: the GPU program resumes the CPU's epoch-1 checkpoint
#    and reaches the CPU's epoch 2.
# 4. Uneven shapes: hidden widths 37 and 19 and batches of 45 (and a last one of
#    5) divide none of the kernels' sizes (the 16 x 16 tiles, 256-thread blocks),
#    so every matmul has partial tiles in M, N and K and every elementwise launch
#    has threads past its end: --check and the twin run, through each matmul path;
#    and --check on a layer of 300, wider than a block.
# Run it from the repository root. The emulated program runs each block's
# threads as OS threads, so it is slow: the networks and data here are tiny.
set -u
GPU=${1:-./dev/emu/train_mlpcu_cpu}
CPU=${2:-./train_mlp}
for b in "$GPU" "$CPU"; do
    [ -x "$b" ] || { echo "Error: $b is not built (make dev/emu/train_mlpcu_cpu train_mlp)"; echo "0 passed, 1 failed"; exit 1; }
done


TMP=$(mktemp -d /tmp/test_train_mlp_cuda.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }

source "$(dirname "$0")/fake_fashion_mnist.sh"
mkdir -p "$TMP/data"
make_split "$TMP/data" train 400 1 && make_split "$TMP/data" t10k 100 800001

# --- 1. --check: each kernel path and optimizer, 3 steps, tensor by tensor. No
# warm-up and a large learning rate (-u 0 -r 1e-2), so that every term of the
# update (weight decay too) is well above fp32 rounding.
check() { # NAME ARGS...
    local name=$1
    shift
    if "$GPU" --check -d "$TMP/data" -u 0 "$@" > "$TMP/check.out" 2>&1 && grep -q "^[0-9]* passed, 0 failed" "$TMP/check.out"; then
        ok "--check $name: $(tail -n 1 "$TMP/check.out"), worst relative difference $(awk '/relative/ { if ($(NF-1) > m) m = $(NF-1) } END { print m }' "$TMP/check.out")"
    else
        not_ok "--check $name:"; grep -v " OK$" "$TMP/check.out" | head -n 8
    fi
}
check "naive matmul, relu, adamw, dropout, weight decay" -M naive -l 784,32,16,10 -b 16 -p 0.2 -w 0.1 -r 1e-2
check "tiled matmul, relu, adamw, dropout, weight decay" -M tiled -l 784,32,16,10 -b 16 -p 0.2 -w 0.1 -r 1e-2
check "cublas (stand-in), relu, adamw, dropout, weight decay" -M cublas -l 784,32,16,10 -b 16 -p 0.2 -w 0.1 -r 1e-2
check "tiled matmul, tanh, momentum, weight decay" -M tiled -l 784,24,10 -b 12 -a tanh -O momentum -w 0.01 -r 0.05
check "naive matmul, relu, sgd, weight decay, ragged widths" -M naive -l 784,19,13,10 -b 7 -O sgd -r 0.1 -w 0.01
UNEVEN=(-l 784,37,19,10 -b 45) # (section 4)
for M in naive tiled cublas; do
    check "$M matmul, relu, adamw, dropout, weight decay, uneven: widths 37 and 19, batch 45" -M $M "${UNEVEN[@]}" -p 0.2 -w 0.1 -r 1e-2
done
# (every width above fits one block of 256 threads in the bias gradient's column sums)
check "tiled matmul, relu, adamw, a layer of 300: its bias gradient takes two blocks" -M tiled -l 784,300,10 -b 45 -w 0.1 -r 1e-2

# --- 2. the twin run: the same 2 epochs on the CPU and (emulated) GPU
# Both draw the same weights, batches and dropout masks and log the same numbers;
# only the order of fp32 sums differs (~1e-7 relative per operation). AdamW
# divides by sqrt(v), so for weights whose gradients are tiny that rounding
# becomes up to ~1e-3 of a step (lr): after these 26 steps we measured 4e-6 of
# the largest weight (1e-7 at most for the optimizer state) and metrics equal
# to all 9 printed digits. (Weights, m and v are each compared on their own
# scale.) Tolerances: 1e-4 for the checkpoint, 1e-5 for the
# metrics. A real difference (another dropout mask, a skipped step, a wrong
# term) moves weights by about lr = 1e-2 of their scale.
TWIN=(-d "$TMP/data" -l 784,32,10 -b 32 -v 80 -e 2 -r 3e-3 -u 4 -p 0.2 -w 0.01)
max_rel_diff() { # FILE1 FILE2: of an AdamW checkpoint (1 KiB header, then weights, m and v, P floats
    # each), the largest of max |a-b| / max |a| over the three parts, each part on its own scale
    local P=$((($(stat -c %s "$1") - 1024) / 12)) worst=0 part rel
    for part in 0 1 2; do
        rel=$(paste <(od -An -v -f -w4 -j$((1024 + part * P * 4)) -N$((P * 4)) "$1") <(od -An -v -f -w4 -j$((1024 + part * P * 4)) -N$((P * 4)) "$2") |
            awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > s) s = a; n++ }
                 END { if (n == 0 || s == 0) print "nan"; else printf "%.3g\n", m / s }')
        worst=$(awk -v a="$worst" -v b="$rel" 'BEGIN { print (b == "nan" || b + 0 > a + 0) ? b : a }')
    done
    echo "$worst"
}
metrics_close() { # FILE1 FILE2: every logged number within 1e-5 relative (times excluded)
    paste -d' ' <(sed -E 's/ s:[0-9.]+//; s/[a-z_]+://g' "$1") <(sed -E 's/ s:[0-9.]+//; s/[a-z_]+://g' "$2") |
        awk '{ h = NF / 2; if (h != 5) bad = 1; for (i = 1; i <= h; i++) { d = $i - $(i + h); if (d < 0) d = -d;
               if (d > 1e-5 * ($i < 0 ? -$i : $i) + 1e-7) bad = 1 } } END { exit bad }'
}
twin() { # NAME M ARGS...: train_mlp.c and, with -M M, train_mlp.cu make the same run (into $TMP/cpu, $TMP/gpu)
    local name="$1 (-M $2)" M=$2 rel
    shift 2
    rm -rf "$TMP/cpu" "$TMP/gpu"
    "$CPU" "$@" -o "$TMP/cpu" > "$TMP/cpu.out" 2>&1 || { not_ok "$name: train_mlp failed"; tail -n 3 "$TMP/cpu.out"; return; }
    "$GPU" "$@" -M "$M" -o "$TMP/gpu" > "$TMP/gpu.out" 2>&1 || { not_ok "$name: emulated train_mlp.cu failed"; tail -n 3 "$TMP/gpu.out"; return; }
    rel=$(max_rel_diff "$TMP/cpu/mlp_2.bin" "$TMP/gpu/mlp_2.bin")
    if cmp -s <(head -c 1024 "$TMP/cpu/mlp_2.bin") <(head -c 1024 "$TMP/gpu/mlp_2.bin") &&
       [ "$(stat -c %s "$TMP/cpu/mlp_2.bin")" = "$(stat -c %s "$TMP/gpu/mlp_2.bin")" ] &&
       awk -v r="$rel" 'BEGIN { exit !(r <= 1e-4) }'; then
        ok "$name: epoch-2 checkpoints agree: same header and size, weights and AdamW state within $rel of their scale"
    else
        not_ok "$name: checkpoints differ (relative $rel)"
    fi
    metrics_close "$TMP/cpu/metrics.log" "$TMP/gpu/metrics.log" &&
        ok "$name: per-epoch train/validation loss and accuracy agree within 1e-5" ||
        { not_ok "$name: metrics differ"; paste "$TMP/cpu/metrics.log" "$TMP/gpu/metrics.log"; }
    # the test report: accuracy and confusion matrix identical (argmax of nearly equal logits)
    diff <(sed -n '/^test:/,$p' "$TMP/cpu.out" | sed -E 's/loss [0-9.]+ //') <(sed -n '/^test:/,$p' "$TMP/gpu.out" | sed -E 's/loss [0-9.]+ //') > /dev/null &&
        ok "$name: identical test accuracy, confusion matrix and most-confused pairs" ||
        not_ok "$name: test reports differ"
}
for M in tiled cublas; do twin "twin run" $M "${TWIN[@]}"; done

# --- 3. one checkpoint format: the GPU program resumes the CPU's checkpoint
# (the CPU's run of section 2, still in $TMP/cpu)
rm -rf "$TMP/resume" && mkdir -p "$TMP/resume" && cp "$TMP/cpu/mlp_1.bin" "$TMP/cpu/metrics.log" "$TMP/resume/"
if "$GPU" "${TWIN[@]}" -M tiled -o "$TMP/resume" -y 1 > "$TMP/resume.out" 2>&1 && grep -q "resuming from .*mlp_1.bin" "$TMP/resume.out"; then
    rel=$(max_rel_diff "$TMP/cpu/mlp_2.bin" "$TMP/resume/mlp_2.bin")
    awk -v r="$rel" 'BEGIN { exit !(r <= 1e-4) }' &&
        ok "the GPU program resumed train_mlp.c's epoch-1 checkpoint; its epoch 2 matches the CPU's within $rel" ||
        not_ok "resumed from the CPU checkpoint, but epoch 2 differs ($rel)"
else
    not_ok "the GPU program could not resume train_mlp.c's checkpoint"; tail -n 3 "$TMP/resume.out"
fi

# --- 4. uneven shapes (their --check runs are in section 1): the twin run with
# widths 37 and 19 and batches of 45 (7 of them and one of 5 an epoch), each path
for M in naive tiled cublas; do twin "uneven twin run (784-37-19-10, batch 45)" $M "${TWIN[@]}" "${UNEVEN[@]}"; done

# --- 5. -P: every 3rd step timed by the GPU's events; each epoch's mean adds up to the same
# steps timed whole, and the host's clock is shown beside the events' once
source "$(dirname "$0")/phases_check.sh"
"$GPU" -d "$TMP/data" -l 784,32,10 -b 64 -v 100 -e 2 -P 3 > "$TMP/phases.out" 2>&1
read -r lines worst zero <<< "$(phase_lines "$TMP/phases.out")"
if [ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.011) }' &&
   [ "$(grep -c "those are the GPU's times, from events" "$TMP/phases.out")" = 1 ]; then
    ok "-P 3: each epoch's timed steps by phase, their mean adding up to the step's (within $worst ms), the host's clock once"
else
    not_ok "-P 3: $lines lines with phases (worst $worst ms, $zero empty passes)"; grep -E "phases|those are" "$TMP/phases.out" | head -4
fi

# --- 6. -G: a budget too small for the network is refused as an out-of-memory, one large enough runs
# (the emulator's device: EMU_DEVICE_MIB)
out=$(EMU_DEVICE_MIB=1024 "$GPU" -d "$TMP/data" -l 784,32,10 -b 64 -v 100 -e 1 -G 0.0001 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "^Error: out of GPU memory (the -G budget) allocating" && ok "-G 0.0001 (100 KiB): refused, exit 1, the budget named" ||
    not_ok "-G 0.0001: exit $rc: $(echo "$out" | tail -n 2)"
EMU_DEVICE_MIB=1024 "$GPU" -d "$TMP/data" -l 784,32,10 -b 64 -v 100 -e 1 -G 0.5 > "$TMP/g.out" 2>&1 && ok "-G 0.5: the same run fits" || { not_ok "-G 0.5 failed"; tail -n 3 "$TMP/g.out"; }

# --- 7. bad flags of its own
out=$("$GPU" -M fast 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "^Error: -M is naive, tiled or cublas, not 'fast'" && ok "-M with an unknown matmul: exit $rc, one clear error" || not_ok "-M fast: exit $rc: $out"

echo "$passed passed, $failed failed"
[ $failed = 0 ]
