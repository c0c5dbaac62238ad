#!/usr/bin/env bash
# kill -9 in the middle of a checkpoint write, for every trainer: the previous checkpoint
# stays loadable and the resumed run ends where the uninterrupted one does, bit for bit.
# The kill comes exactly mid-write: with TEST_KILL_WRITING=TEXT set, lib/utils.h's
# write_file_atomic sends its own process SIGKILL (what kill -9 sends) after writing half the
# bytes of a file whose path contains TEXT. A checkpoint is written to NAME.tmp, flushed to
# disk and renamed (and a GPT-2 checkpoint's state file, which marks it complete, last), so
# the half-written file must be a .tmp that no resume reads.
#
#     bash dev/test/test_checkpoint_kill.sh    (after make test's builds: the trainers, their emulated GPU twins)
#
# Each trainer: the uninterrupted run; the same run killed while writing its last
# checkpoint (GPT-2 on the CPU: its model file, and its state file, in turn); the killed
# run resumed (-y 1); the two runs' final checkpoints and logs compared. About a minute.
set -u
. "$(dirname "$0")/lib.sh"
TMP=$(mktemp -d /tmp/test_checkpoint_kill.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
cases=0
export OMP_NUM_THREADS=1
need_built "make test builds it" ./train_gpt2 ./finetune_lora ./train_mlp ./convert ./data/tokenizer ./dev/emu/train_gpt2cu_fp32_cpu \
    ./dev/emu/finetune_loracu_fp32_cpu ./dev/emu/train_mlpcu_cpu

# kill_case NAME KILL_TEXT "FILES TO COMPARE" "LOGS TO COMPARE" COMMAND...: the command runs
# with -o DIR appended (and -y 1 to resume)
kill_case() {
    local name=$1 text=$2 files=$3 logs=$4
    shift 4
    cases=$((cases + 1))
    local dir="$TMP/case$cases" # (a path without TEXT in it: only the checkpoint's file may match)
    mkdir -p "$dir"
    "$@" -o "$dir/full" > "$dir/full.out" 2>&1 || { report "$name: the uninterrupted run" 0 "$(tail -2 "$dir/full.out")"; return; }
    { TEST_KILL_WRITING="$text" "$@" -o "$dir/cut" > "$dir/cut.out" 2>&1; } 2> /dev/null # (not the shell's "Killed")
    local status=$?
    local half; half=$(ls "$dir"/cut/*"$text"*.tmp "$dir"/cut/*/*"$text"*.tmp 2> /dev/null | head -1)
    report "$name: killed (-9) halfway through writing $text: the kill's exit, a half-written .tmp only" \
        $([ $status = 137 ] && [ -n "$half" ] && [ ! -e "${half%.tmp}" ] && echo 1 || echo 0) "exit $status, ${half:-no .tmp}"
    "$@" -o "$dir/cut" -y 1 > "$dir/resumed.out" 2>&1
    status=$?
    local same=1 f
    for f in $files; do cmp -s "$dir/full/$f" "$dir/cut/$f" || same=0; done
    for f in $logs; do # (without the times)
        cmp -s <(sed -E 's/ ms[a-z_]*:[0-9.]+//g; s/ s:[0-9.]+//' "$dir/full/$f") <(sed -E 's/ ms[a-z_]*:[0-9.]+//g; s/ s:[0-9.]+//' "$dir/cut/$f") || same=0
    done
    report "... resumed from the checkpoint before: $files${logs:+ and $logs} the uninterrupted run's, bit for bit" \
        $([ $status = 0 ] && [ $same = 1 ] && echo 1 || echo 0) "exit $status; $(grep -m1 -i 'resum' "$dir/resumed.out"); $(tail -1 "$dir/resumed.out")"
}

# GPT-2: 4 steps, checkpoints after 2 and 4 (model_N.bin, then state_N.bin)
small_shard "$TMP"
GPT2=(-e d1 -t 32 -b 2 -d 64 -x 4 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 0 -s 0 -n 2)
for text in model_00000004 state_00000004; do
    kill_case "train_gpt2" $text "model_00000004.bin state_00000004.bin" "main.log" ./train_gpt2 "${GPT2[@]}"
done
kill_case "train_gpt2.cu (emulated)" state_00000004 "model_00000004.bin state_00000004.bin" "main.log" ./dev/emu/train_gpt2cu_fp32_cpu "${GPT2[@]}"
# ... on 2 ranks with ZeRO-1 (where MPI is): rank 0 gathers the shards and writes; the other
# rank then loses it and stops too
if command -v mpirun > /dev/null 2>&1 && [ -x ./dev/emu/train_gpt2cu_mpi_fp32_cpu ]; then
    kill_case "train_gpt2.cu on 2 ranks, -Z 1 (emulated)" state_00000004 "model_00000004.bin state_00000004.bin" "main.log" \
        env EMU_DEVICES=2 timeout 120 "${MPIRUN[@]}" -np 2 ./dev/emu/train_gpt2cu_mpi_fp32_cpu "${GPT2[@]}" -d 128 -Z 1
fi

# LoRA: 4 steps of a d2 model, a checkpoint after 2 and 4 (OUT/step_N/ and OUT/state_N.bin)
./convert -i d2 -o "$TMP/d2.bin" > /dev/null 2>&1 || { report "the d2 model" 0; exit 1; }
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    printf '{"instruction": "What is %d plus %d?", "input": "", "output": "%d plus %d is %d."}\n' $i $i $i $i $((2 * i))
done > "$TMP/data.jsonl"
LORA=(-m "$TMP/d2.bin" -d "$TMP/data.jsonl" -n 4 -b 2 -k 1 -v 2 -V 0.2 -r 4 -l 1e-2 -D 0 -S 2)
kill_case "finetune_lora" state_000004 "adapter_model.safetensors state_000004.bin" "" ./finetune_lora "${LORA[@]}"
kill_case "finetune_lora.cu (emulated)" state_000004 "adapter_model.safetensors state_000004.bin" "" ./dev/emu/finetune_loracu_fp32_cpu "${LORA[@]}"

# the MLP: 3 epochs of a small fake Fashion-MNIST, a checkpoint after each (mlp_N.bin)
source "$(dirname "$0")/fake_fashion_mnist.sh"
mkdir -p "$TMP/data"
make_split "$TMP/data" train 400 1 && make_split "$TMP/data" t10k 100 800001
MLP=(-d "$TMP/data" -l 784,32,10 -b 32 -v 80 -e 3 -r 3e-3 -u 4 -p 0.2 -w 0.01)
kill_case "train_mlp" mlp_3 "mlp_3.bin" "metrics.log" ./train_mlp "${MLP[@]}"
kill_case "train_mlp.cu (emulated)" mlp_3 "mlp_3.bin" "metrics.log" ./dev/emu/train_mlpcu_cpu "${MLP[@]}"

finish
