#!/usr/bin/env bash
# Where the memory and the time go as a GPT-2 grows: the sweep of docs/performance.md.
# GPT-2 124M and 350M (gpt2-124M, gpt2-350M: new random models) over batch size B x
# sequence length T x precision (train_gpt2cu_fp32, train_gpt2cu = bf16, train_gpt2cu_fp16)
# x recomputation (-r 0, 1, 2) x gradient accumulation, against a 16 GB card (-G 16).
#
#     bash dev/sweep_gpt2.sh gpu [quick|full] [OUT]   # on a machine with a GPU (make gpu-check runs quick)
#     bash dev/sweep_gpt2.sh cpu [quick|full] [OUT]   # without one
#
# Every cell's memory comes first from the GPU trainer's start-up table (-M 1 prints it
# and exits, no GPU needed; the emulator's test holds that table to the trainer's
# allocations, to the byte). Then:
#   gpu: each cell trains STEPS steps under -G 16, so what a 16 GiB card cannot hold
#        is refused as it would be there; the run prints what it allocated (its ledger,
#        which must equal the table) and what the device has in use (cudaMemGetInfo:
#        the CUDA context and cuBLASLt's own memory too); tokens/s is the median of
#        the steps after the first. A few CPU cells (train_gpt2, the same models) run
#        too, for the CPU trainer's tokens/s next to the GPU's.
#   cpu: the memory of every cell from the tables, and the CPU trainer's tokens/s and
#        peak memory (its resident set) on the CPU cells; the GPU columns stay empty
#        until a GPU run fills them.
# quick: a grid that fits make gpu-check's few minutes; full: the whole grid (the
# GPU part: half an hour on an H200, estimated); tiny: d1 models, seconds (the test's).
# Writes OUT/sweep.tsv (one row a cell), OUT/sweep.md (the tables) and, with
# matplotlib, OUT/sweep.png (python3 dev/plot_sweep.py); each run's output in OUT/cells/.
# OUT defaults to sweep-logs. SWEEP_FP32, SWEEP_BF16, SWEEP_FP16, SWEEP_CUDNN and SWEEP_CPU
# name other trainers (the test runs the GPU mode on the emulator's). In sweep.tsv the CPU
# trainer's rows (device cpu-trainer) hold its own memory table in predicted_bytes and its
# peak resident set in allocated_bytes. Needs make data (tinyshakespeare) and the trainers:
#     gpu: make train_gpt2 train_gpt2cu train_gpt2cu_fp32 train_gpt2cu_fp16
#     cpu: make train_gpt2, and the same three (nvcc builds them without a GPU) or the
#          emulator's dev/emu/train_gpt2cu_{fp32,bf16,fp16}_cpu
set -u
MODE=${1:-}
GRID=${2:-quick}
OUT=${3:-sweep-logs}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac # (relative to where it was called from)
cd "$(dirname "$0")/.." || exit 1
case "$MODE" in gpu | cpu) ;; *) echo "Error: the first argument is gpu or cpu, got '$MODE'"; echo "HINT: bash dev/sweep_gpt2.sh cpu quick"; exit 1 ;; esac
case "$GRID" in quick | full | tiny) ;; *) echo "Error: the grid is quick, full or tiny, got '$GRID'"; exit 1 ;; esac
BUDGET_GIB=16
GPU_STEPS=${GPU_STEPS:-6}
CPU_STEPS=${CPU_STEPS:-3}
DATA=(-i data/tinyshakespeare/tiny_shakespeare_train.bin)
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "Error: no data/tinyshakespeare/tiny_shakespeare_train.bin"; echo "HINT: make data"; exit 1; }

# the trainer of each precision: the nvcc builds, or (for -M only) the emulator's
binary() { # PRECISION
    local given=
    case "$1" in
    fp32) given=${SWEEP_FP32:-} ;; bf16) given=${SWEEP_BF16:-} ;; fp16) given=${SWEEP_FP16:-} ;; bf16+cudnn) given=${SWEEP_CUDNN:-} ;;
    esac
    if [ -n "$given" ]; then echo "$given"; return; fi
    local name=train_gpt2cu
    case "$1" in fp32) name=train_gpt2cu_fp32 ;; fp16) name=train_gpt2cu_fp16 ;; bf16+cudnn) name=train_gpt2cu_cudnn ;; esac
    if [ -x "./$name" ]; then echo "./$name"; return; fi
    if [ "$MODE" = cpu ] && [ -x "./dev/emu/train_gpt2cu_$1_cpu" ]; then echo "./dev/emu/train_gpt2cu_$1_cpu"; return; fi
    echo "Error: no ./$name$([ "$MODE" = cpu ] && echo " nor ./dev/emu/train_gpt2cu_$1_cpu")" >&2
    echo "HINT: make $name$([ "$MODE" = cpu ] && echo " (nvcc, no GPU needed) or make dev/emu/train_gpt2cu_$1_cpu")" >&2
    exit 1
}
for p in fp32 bf16 fp16; do binary $p > /dev/null || exit 1; done
# cuDNN's attention (bf16), which keeps no T x T matrices, where it was built (make USE_CUDNN=1 train_gpt2cu_cudnn)
CUDNN=$([ -x "${SWEEP_CUDNN:-./train_gpt2cu_cudnn}" ] && echo 1 || echo 0)
CPU_TRAINER=${SWEEP_CPU:-./train_gpt2}
[ -x "$CPU_TRAINER" ] || { echo "Error: no $CPU_TRAINER"; echo "HINT: make train_gpt2"; exit 1; }

# The cells: model precision B T recompute accumulation, one a line.
grid() {
    local m p b t r
    if [ "$GRID" = tiny ]; then
        echo "d1 bf16 2 8 1 1"; echo "d1 fp32 3 7 0 1"; echo "d1 fp16 3 7 2 2"
        echo "d1 bf16 256 1024 1 1" # (its logits alone are 25 GiB: refused before anything is allocated)
    elif [ "$GRID" = full ]; then
        for m in gpt2-124M gpt2-350M; do for p in fp32 bf16 fp16; do for t in 256 512 1024; do for r in 0 1 2; do
            for b in 1 2 4 8 16 32 64; do echo "$m $p $b $t $r 1"; done
        done; done; done; done
        for m in gpt2-124M gpt2-350M; do for a in 2 4 8; do echo "$m bf16 4 1024 1 $a"; done; done
        if [ $CUDNN = 1 ]; then for m in gpt2-124M gpt2-350M; do for t in 256 512 1024; do for r in 0 1 2; do
            for b in 1 2 4 8 16 32 64; do echo "$m bf16+cudnn $b $t $r 1"; done
        done; done; done; fi
    else
        # memory and tokens/s against B at T = 1024, bf16, all three recomputation levels
        for r in 0 1 2; do for b in 4 8 16 32; do echo "gpt2-124M bf16 $b 1024 $r 1"; done; done
        # the precisions side by side
        for b in 4 8; do echo "gpt2-124M fp32 $b 1024 1 1"; done
        echo "gpt2-124M fp16 8 1024 1 1"
        # gradient accumulation: B=8 twice is B=16's batch in B=8's memory (B=32 does not fit)
        echo "gpt2-124M bf16 8 1024 1 2"
        # GPT-2 medium: what fits 16 GB at T = 1024
        for r in 0 2; do for b in 2 4 8 16; do echo "gpt2-350M bf16 $b 1024 $r 1"; done; done
        echo "gpt2-350M fp32 2 1024 1 1"
        # cuDNN's attention: without the T x T matrices, how much further B goes
        if [ $CUDNN = 1 ]; then
            for b in 16 32 64; do echo "gpt2-124M bf16+cudnn $b 1024 1 1"; done
            for b in 8 16; do echo "gpt2-350M bf16+cudnn $b 1024 1 1"; done
        fi
    fi
}
# the CPU trainer's cells: fp32, keeps every activation
cpu_grid() {
    if [ "$GRID" = tiny ]; then echo "d1 fp32 2 8 0 1"; return; fi
    echo "gpt2-124M fp32 1 1024 0 1"
    [ "$GRID" = full ] && echo "gpt2-124M fp32 4 1024 0 1"
    if [ "$MODE" = cpu ] || [ "$GRID" = full ]; then echo "gpt2-350M fp32 1 1024 0 1"; fi # (gpu quick: make gpu-check's minutes)
}

mkdir -p "$OUT/cells"
TSV=$OUT/sweep.tsv
printf 'device\tmodel\tprecision\tB\tT\trecompute\taccum\tpredicted_bytes\tallocated_bytes\tdevice_mib\tfits_16gib\tms_step\ttok_s\n' > "$TSV"
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
budget_bytes=$((BUDGET_GIB << 30))
refused_models=" " # (gpu: the models whose refusal by -G was seen once; their other cells over the table's line are not run)

cells=0 failed=0
while read -r m p b t r a; do
    cells=$((cells + 1))
    name="${m}_${p/+/-}_B${b}_T${t}_r${r}_a${a}"
    bin=$(binary "$p")
    # the table's prediction (needs no GPU)
    predicted=""
    "$bin" -M 1 -e "$m" -b "$b" -t "$t" -r "$r" > "$OUT/cells/$name.plan" 2>&1 < /dev/null &&
        predicted=$(sed -n 's/^  total .* = \([0-9]*\) bytes.*/\1/p' "$OUT/cells/$name.plan")
    if [ -z "$predicted" ]; then
        echo "cell $name: -M 1 printed no table: $(tail -n 1 "$OUT/cells/$name.plan")"; failed=$((failed + 1)); continue
    fi
    allocated="" device_mib="" ms="" toks=""
    fits=$([ "$predicted" -le "$budget_bytes" ] && echo "yes (table)" || echo "no (table)")
    # over the line by the table alone: the GPU's time goes to one such run per model, which
    # shows the refusal; the others stay "no (table)"
    run_it=0
    if [ "$MODE" = gpu ]; then
        run_it=1
        if [ "$predicted" -gt "$budget_bytes" ]; then
            case "$refused_models" in *" $m "*) run_it=0 ;; esac
        fi
    fi
    if [ $run_it = 1 ]; then
        "$bin" -e "$m" -b "$b" -t "$t" -r "$r" -d $((b * t * a)) -x "$GPU_STEPS" -v 0 -s 0 -n 0 -o "" -G "$BUDGET_GIB" \
            "${DATA[@]}" > "$OUT/cells/$name.out" 2>&1 < /dev/null
        rc=$?
        if [ $rc = 0 ]; then
            fits=yes
            line=$(grep '^GPU memory after the first step' "$OUT/cells/$name.out")
            allocated=$(sed -n 's/.*allocated \([0-9]*\) bytes.*/\1/p' <<< "$line")
            device_mib=$(sed -n 's/.*the device has \([0-9.]*\) MiB.*/\1/p' <<< "$line")
            ms=$(grep -E '^step +[0-9]+/' "$OUT/cells/$name.out" | tail -n +2 | sed -n 's/.* | \([0-9.]*\) ms | .*/\1/p' | median)
            [ -n "$ms" ] && toks=$(awk -v n=$((b * t * a)) -v ms="$ms" 'BEGIN { printf "%.0f", n / (ms / 1000) }')
            # (the run's own check: its ledger against the table, cuDNN's workspace added)
            grep -q '(equal);' <<< "$line" || { echo "cell $name: $line"; failed=$((failed + 1)); }
        elif grep -q "out of GPU memory (the -G budget)" "$OUT/cells/$name.out"; then
            fits=no
            [ "$predicted" -gt "$budget_bytes" ] && refused_models="$refused_models$m "
        else
            fits=failed; failed=$((failed + 1))
            echo "cell $name: the run failed (exit $rc): $(tail -n 1 "$OUT/cells/$name.out")"
        fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$MODE" "$m" "$p" "$b" "$t" "$r" "$a" "$predicted" \
        "$allocated" "$device_mib" "$fits" "$ms" "$toks" >> "$TSV"
    printf '%-44s %10.1f MiB predicted  %-12s %s\n' "$name" "$(awk -v x="$predicted" 'BEGIN { print x / 1048576 }')" "$fits" \
        "${toks:+$toks tok/s}"
done < <(grid)

# The CPU trainer: the same models, fp32, every activation kept. Its memory is its own
# table's (train_gpt2.c prints it), and the peak resident set when GNU time is there.
while read -r m p b t r a; do
    cells=$((cells + 1))
    name="cpu_${m}_B${b}_T${t}"
    timer=()
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "peak resident set: %M KiB")
    ${timer[@]+"${timer[@]}"} "$CPU_TRAINER" -e "$m" -b "$b" -t "$t" -x "$CPU_STEPS" -v 0 -s 0 -n 0 -o "" "${DATA[@]}" \
        > "$OUT/cells/$name.out" 2>&1 < /dev/null ||
        { echo "cell $name: the CPU run failed: $(tail -n 1 "$OUT/cells/$name.out")"; failed=$((failed + 1)); continue; }
    # memory: parameters X MiB (n) | gradients X MiB | AdamW moments X MiB | activations X MiB + gradients X MiB
    table_mib=$(grep '^memory: parameters' "$OUT/cells/$name.out" | grep -o '[0-9.]* MiB' | awk '{ s += $1 } END { printf "%.1f", s }')
    rss_kib=$(sed -n 's/^peak resident set: \([0-9]*\) KiB/\1/p' "$OUT/cells/$name.out")
    ms=$(grep -E '^step +[0-9]+/' "$OUT/cells/$name.out" | tail -n +2 | sed -n 's/.* | \([0-9.]*\) ms | .*/\1/p' | median)
    toks=$([ -n "$ms" ] && awk -v n=$((b * t)) -v ms="$ms" 'BEGIN { printf "%.1f", n / (ms / 1000) }')
    predicted=$(awk -v x="$table_mib" 'BEGIN { printf "%.0f", x * 1048576 }')
    printf 'cpu-trainer\t%s\tfp32\t%s\t%s\t-\t1\t%s\t%s\t%s\t-\t%s\t%s\n' "$m" "$b" "$t" "$predicted" \
        "$([ -n "$rss_kib" ] && echo $((rss_kib * 1024)))" "" "$ms" "$toks" >> "$TSV"
    echo "$name: $toks tok/s (median of steps 2-$CPU_STEPS, $ms ms), table $table_mib MiB, peak resident ${rss_kib:-?} KiB"
done < <(cpu_grid)

# The largest batch each setting fits into 16 GiB, by the table (-M: no GPU time), found by
# bisection over B, so that settings the grid's powers of two lump together come apart.
# (A real card also holds the CUDA context and the libraries' memory: the GPU cells above say
# how much; a B within that of the line may not fit.)
largest_b() { # BINARY MODEL T R: the largest B whose table fits the budget (0: none)
    local lo=0 hi=1024 mid bytes
    while [ $((hi - lo)) -gt 1 ]; do
        mid=$(((lo + hi) / 2))
        bytes=$("$1" -M 1 -e "$2" -b "$mid" -t "$3" -r "$4" 2> /dev/null < /dev/null | sed -n 's/^  total .* = \([0-9]*\) bytes.*/\1/p')
        if [ -n "$bytes" ] && [ "$bytes" -le "$budget_bytes" ]; then lo=$mid; else hi=$mid; fi
    done
    [ $lo = 1023 ] && echo "1023+" || echo $lo
}
LARGEST=$OUT/largest_batch.md
{
    echo "| model | precision | T | -r 0 | -r 1 | -r 2 |"
    echo "|---|---|---|---|---|---|"
    # (not in gpu quick: the same on any machine, and make gpu-check's minutes are few)
    if [ "$GRID" = full ] || { [ "$GRID" = quick ] && [ "$MODE" = cpu ]; }; then
        precisions="fp32 bf16 fp16"; [ $CUDNN = 1 ] && precisions="$precisions bf16+cudnn"
        lengths="256 512 1024"; [ "$GRID" = quick ] && lengths=1024
        for m in gpt2-124M gpt2-350M; do for p in $precisions; do for t in $lengths; do
            printf '| %s | %s | %s |' "$m" "$p" "$t"
            for r in 0 1 2; do printf ' %s |' "$(largest_b "$(binary "$p")" "$m" "$t" "$r")"; done
            echo
        done; done; done
    fi
} > "$LARGEST"

# the tables, as markdown
{
    echo "Sweep: $MODE, grid $GRID, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2> /dev/null)"
    echo
    echo "| model | precision | B | T | -r | accum | predicted (table) | allocated (ledger) | device in use | fits 16 GiB | ms/step | tokens/s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' 'NR > 1 && $1 != "cpu-trainer" {
        printf "| %s | %s | %d | %d | %s | %d | %.1f MiB | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8 / 1048576,
            $9 == "" ? "-" : ($9 == $8 ? "= table" : sprintf("%.1f MiB", $9 / 1048576)), $10 == "" ? "-" : $10 " MiB",
            $11, $12 == "" ? "-" : $12, $13 == "" ? "-" : $13 }' "$TSV"
    echo
    if [ "$(wc -l < "$LARGEST")" -gt 2 ]; then
        echo "The largest batch B whose start-up table fits 16 GiB (bisection with -M 1):"
        echo
        cat "$LARGEST"
        echo
    fi
    echo "The CPU trainer (train_gpt2, fp32, all activations kept; $(nproc) cores):"
    echo
    echo "| model | B | T | memory (its table) | peak resident set | ms/step | tokens/s |"
    echo "|---|---|---|---|---|---|---|"
    awk -F'\t' 'NR > 1 && $1 == "cpu-trainer" {
        printf "| %s | %d | %d | %.1f MiB | %s | %s | %s |\n", $2, $4, $5, $8 / 1048576, $9 == "" ? "-" : sprintf("%.1f MiB", $9 / 1048576), $12, $13 }' "$TSV"
} > "$OUT/sweep.md"
if python3 -c 'import matplotlib' 2> /dev/null; then
    python3 dev/plot_sweep.py "$TSV" "$OUT/sweep.png" || failed=$((failed + 1))
else
    echo "(no matplotlib: no plot; pip install matplotlib, then python3 dev/plot_sweep.py $TSV $OUT/sweep.png)"
fi
echo "sweep: $cells cells; $TSV, $OUT/sweep.md"
echo "$((cells - failed)) passed, $failed failed"
[ $failed = 0 ]
