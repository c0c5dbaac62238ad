#!/usr/bin/env bash
# train_gpt2.cu across ranks (NCCL, started by mpirun), without a GPU: its emulated builds
# (dev/emu, with include/nccl.h's collectives moving data between the processes over
# TCP) on 2 ranks train what train_gpt2_mpi trains on 2 ranks, to fp32's rounding; one rank
# of the NCCL build is the plain build bit for bit; ZeRO-1 (-Z 1: each rank the master
# weights and AdamW moments of its shard) and ZeRO-2 (-Z 2: the layers' gradients too) are
# -Z 0 bit for bit, in fp32 and bf16, with and without master weights, on 2 ranks and on 3
# (whose shards do not divide the tensors), and ZeRO-2 accumulating micro-batches is
# train_gpt2_mpi's run to rounding; its checkpoints hold the whole state and resume on 2 ranks bit
# for bit and on one process to rounding; more ranks than GPUs is an error.
#
#     make train_gpt2_mpi dev/emu/train_gpt2cu_fp32_cpu dev/emu/train_gpt2cu_mpi_fp32_cpu dev/emu/train_gpt2cu_mpi_bf16_cpu
#     bash dev/test/test_train_gpt2cu_mpi.sh ./dev/emu/train_gpt2cu_mpi_fp32_cpu ./dev/emu/train_gpt2cu_mpi_bf16_cpu \
#         ./dev/emu/train_gpt2cu_fp32_cpu ./train_gpt2_mpi
#
# Needs MPI (Debian: apt-get install openmpi-bin libopenmpi-dev); without it, says so and
# checks nothing. Each emulated process is one GPU (EMU_DEVICES=2: the machine has two).
# A d1 model, 3 steps of 4 x 32 tokens: about three minutes on 2 cores.
set -u
. "$(dirname "$0")/lib.sh"
FP32_BIN=${1:-./dev/emu/train_gpt2cu_mpi_fp32_cpu}
BF16_BIN=${2:-./dev/emu/train_gpt2cu_mpi_bf16_cpu}
PLAIN_BIN=${3:-./dev/emu/train_gpt2cu_fp32_cpu}
CPU_BIN=${4:-./train_gpt2_mpi}
need_mpi "train_gpt2.cu's ranks"
need_built "see this script's header" "$FP32_BIN" "$BF16_BIN" "$PLAIN_BIN" "$CPU_BIN" ./data/tokenizer
TMP=$(mktemp -d /tmp/test_train_gpt2cu_mpi.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1 EMU_DEVICES=2
mpi() { # mpi N BINARY ARGS...: N ranks, bounded in time (a hang fails, it does not stall the tests)
    local n=$1
    shift
    timeout 300 "${MPIRUN[@]}" -np "$n" "$@"
}

small_shard "$TMP"
# 3 steps of 4 x 32 tokens (-d 128), validation at 0, 2, 3 (1 batch), checkpoints at 2, 3; no
# clipping (-z 0): -Z 1 sums the norm in another order, and with clipping its rounding
# would reach the weights
RUN=(-e d1 -t 32 -d 128 -x 3 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 2 -m 1 -s 0
     -n 2 -z 0)

# --- 1. one rank: the NCCL build started alone is the plain build, bit for bit; with -Z 2
# too (one rank's shard is everything, but the sharded path runs: its collectives, its norm)
"$PLAIN_BIN" "${RUN[@]}" -b 4 -o "$TMP/plain" > "$TMP/plain.out" 2>&1 &
for z in 0 2; do
    timeout 300 "$FP32_BIN" "${RUN[@]}" -b 4 -Z $z -o "$TMP/alone$z" > "$TMP/alone$z.out" 2>&1
    status=$?
    wait
    report "fp32, the NCCL build on one rank, -Z $z (its collectives on one GPU): the plain build's run, bit for bit" \
        $([ $status = 0 ] && same_log "$TMP/plain/main.log" "$TMP/alone$z/main.log" && cmp -s "$TMP/plain/model_00000003.bin" "$TMP/alone$z/model_00000003.bin" &&
          cmp -s "$TMP/plain/state_00000003.bin" "$TMP/alone$z/state_00000003.bin" && echo 1 || echo 0) "exit $status; $(tail -2 "$TMP/alone$z.out" | tr '\n' ' ')"
done

# --- 2. two ranks against train_gpt2.c's two ranks, and ZeRO-1 against -Z 0
mpi 2 "$CPU_BIN" "${RUN[@]}" -b 2 -o "$TMP/cpu2" > "$TMP/cpu2.out" 2>&1 || report "train_gpt2_mpi on 2 ranks" 0 "$(tail -2 "$TMP/cpu2.out")"
for z in 0 1 2; do
    mpi 2 "$FP32_BIN" "${RUN[@]}" -b 2 -Z $z -o "$TMP/fp32z$z" > "$TMP/fp32z$z.out" 2>&1
    status=$?
    read -r count worst bad <<< "$(compare_logs "$TMP/cpu2/main.log" "$TMP/fp32z$z/main.log")"
    report "fp32, 2 ranks -Z $z: every loss, norm and validation loss within 1e-5 of train_gpt2_mpi's 2 ranks" \
        $([ $status = 0 ] && [ "$count" -ge 10 ] && [ "$bad" = 0 ] && within "$worst" 1e-5 && echo 1 || echo 0) \
        "exit $status, $count numbers, worst $worst; $(tail -2 "$TMP/fp32z$z.out" | tr '\n' ' ')"
done
# (AdamW moves a weight whose gradient is near zero on the sums' rounding, by up to about
# lr a step: 3 steps bound the difference by 9e-3; a wrong gradient moves whole tensors)
read -r count worst <<< "$(compare_models "$TMP/cpu2/model_00000003.bin" "$TMP/fp32z0/model_00000003.bin")"
report "... the final weights within 3e-3 (one lr) of train_gpt2_mpi's ($count, worst $worst)" \
    $([ "$count" -gt 1000 ] && within "$worst" 3e-3 && echo 1 || echo 0)
for z in 1 2; do
    report "fp32, 2 ranks: -Z $z's weights and whole AdamW state those of -Z 0, bit for bit" \
        $(cmp -s "$TMP/fp32z0/model_00000003.bin" "$TMP/fp32z$z/model_00000003.bin" && cmp -s "$TMP/fp32z0/state_00000003.bin" "$TMP/fp32z$z/state_00000003.bin" &&
          same_log "$TMP/fp32z0/main.log" "$TMP/fp32z$z/main.log" && echo 1 || echo 0)
done
# ZeRO-2 sums each micro-batch's gradients as they are made, the layers' in two one-layer
# tables taken in turn: a d2 model (both tables), 2 passes a step (-b 1), 2 steps:
# train_gpt2_mpi's run to fp32's rounding
ACC=(-e d2 -x 2 -b 1)
mpi 2 "$CPU_BIN" "${RUN[@]}" "${ACC[@]}" -o "$TMP/cpu2acc" > "$TMP/cpu2acc.out" 2>&1 || report "train_gpt2_mpi on 2 ranks, -b 1" 0 "$(tail -2 "$TMP/cpu2acc.out")"
mpi 2 "$FP32_BIN" "${RUN[@]}" "${ACC[@]}" -Z 2 -o "$TMP/fp32z2acc" > "$TMP/fp32z2acc.out" 2>&1
status=$?
read -r count worst bad <<< "$(compare_logs "$TMP/cpu2acc/main.log" "$TMP/fp32z2acc/main.log")"
report "fp32, 2 ranks -Z 2, a d2 model accumulating 2 passes a step: every number within 1e-5 of train_gpt2_mpi's" \
    $([ $status = 0 ] && [ "$count" -ge 8 ] && [ "$bad" = 0 ] && within "$worst" 1e-5 && echo 1 || echo 0) \
    "exit $status, $count numbers, worst $worst; $(tail -2 "$TMP/fp32z2acc.out" | tr '\n' ' ')"
out="$TMP/fp32z1.out"
report "2 ranks: one set of output lines, the ranks and ZeRO-1 on the hardware line" \
    $([ "$(grep -c '^batch:' "$out")" = 1 ] && [ "$(grep -c '^step    3/3' "$out")" = 1 ] &&
      grep -q '^batch: B 2 x T 32 x 2 ranks x 1 accumulation steps = 128 tokens' "$out" &&
      grep -q '^hardware: 2 ranks (NCCL, started by mpirun, ZeRO-1), rank 0 on GPU 0: ' "$out" && echo 1 || echo 0) "$(grep -E '^(batch|hardware)' "$out" | tr '\n' ' ')"
moments() { grep -m1 'AdamW moments' "$1" | awk '{ print $(NF - 1) }'; }
report "-Z 2 on 2 ranks: the ledger equals the table (one-layer tables, the shard of the layers' gradients)" \
    $(grep -q '^GPU memory after the first step: .*(equal)' "$TMP/fp32z2.out" && grep -q '^GPU memory after the first step: .*(equal)' "$TMP/fp32z2acc.out" &&
      echo 1 || echo 0) "$(grep -h '^GPU memory after' "$TMP/fp32z2.out" "$TMP/fp32z2acc.out" | tr '\n' ' ')"
report "-Z 1: each rank allocates half the moments, and the ledger equals the table" \
    $(awk -v a="$(moments "$TMP/fp32z0.out")" -v b="$(moments "$TMP/fp32z1.out")" 'BEGIN { d = a - 2 * b; exit !(a > 0 && d < 0.15 && d > -0.15) }' &&
      grep -q 'ZeRO-1: each rank.s shard of the master weights and moments' "$out" && grep -q '^GPU memory after the first step: .*(equal)' "$out" &&
      echo 1 || echo 0) "moments $(moments "$TMP/fp32z0.out") MiB and $(moments "$TMP/fp32z1.out") MiB; $(grep '^GPU memory after' "$out")"

# On 3 ranks no chunk of d1 (64 channels) divides: every chunk has a rest that every rank
# updates alike (and rank 0 alone counts in the norm); 3 steps of 6 x 16 tokens, 2 sequences
# a rank; then the -Z 2 run's checkpoint of step 2 resumed on 2 ranks (3 sequences each:
# other shards)
THREE=(-t 16 -d 96 -b 2)
for z in 0 2; do
    EMU_DEVICES=3 mpi 3 "$FP32_BIN" "${RUN[@]}" "${THREE[@]}" -Z $z -o "$TMP/three$z" > "$TMP/three$z.out" 2>&1
    status=$?
    [ $status = 0 ] || report "fp32, 3 ranks -Z $z" 0 "exit $status; $(tail -2 "$TMP/three$z.out" | tr '\n' ' ')"
done
for z in 2; do
    read -r count worst bad <<< "$(compare_logs "$TMP/three0/main.log" "$TMP/three$z/main.log")"
    report "fp32, 3 ranks (pieces and rests): -Z $z's weights and state -Z 0's bit for bit, its norms within 1e-6" \
        $(cmp -s "$TMP/three0/model_00000003.bin" "$TMP/three$z/model_00000003.bin" && cmp -s "$TMP/three0/state_00000003.bin" "$TMP/three$z/state_00000003.bin" &&
          [ "$count" -ge 8 ] && [ "$bad" = 0 ] && within "$worst" 1e-6 && echo 1 || echo 0) "$count numbers, worst $worst"
done
part="$TMP/resume_three"
mkdir -p "$part"
cp "$TMP/three2/model_00000002.bin" "$TMP/three2/state_00000002.bin" "$part/"
grep -E '^s:[0-2] ' "$TMP/three2/main.log" > "$part/main.log"
mpi 2 "$FP32_BIN" "${RUN[@]}" -t 16 -d 96 -b 3 -Z 1 -o "$part" -y 1 > "$part.out" 2>&1
status=$?
read -r count worst bad <<< "$(compare_logs "$TMP/three2/main.log" "$part/main.log")"
report "fp32 -Z 2 on 3 ranks, resumed at step 2 on 2 ranks with -Z 1: the run's numbers within 1e-5" \
    $([ $status = 0 ] && [ "$count" -ge 8 ] && [ "$bad" = 0 ] && within "$worst" 1e-5 && echo 1 || echo 0) \
    "exit $status, $count numbers, worst $worst; $(tail -2 "$part.out" | tr '\n' ' ')"

# --- 3. bf16: the gradients travel in bf16; the master weights sharded too, or none
# (stochastic rounding, whose random bits each shard must draw as the whole tensor would)
for w in 1 0; do
    for z in 0 $([ $w = 1 ] && echo 2 || echo 1); do
        mpi 2 "$BF16_BIN" "${RUN[@]}" -b 2 -w $w -Z $z -o "$TMP/bf16w${w}z$z" > "$TMP/bf16w${w}z$z.out" 2>&1
        status=$?
        [ $status = 0 ] || report "bf16, 2 ranks -w $w -Z $z" 0 "exit $status; $(tail -2 "$TMP/bf16w${w}z$z.out" | tr '\n' ' ')"
        [ $z = 0 ] && continue
        report "bf16 -w $w, 2 ranks: -Z $z's weights and whole state (master weights too) those of -Z 0, bit for bit" \
            $(cmp -s "$TMP/bf16w${w}z0/model_00000003.bin" "$TMP/bf16w${w}z$z/model_00000003.bin" &&
              cmp -s "$TMP/bf16w${w}z0/state_00000003.bin" "$TMP/bf16w${w}z$z/state_00000003.bin" && echo 1 || echo 0)
    done
done
out="$TMP/bf16w1z2.out"
report "bf16 -Z 2: the ledger equals the table (a shard of the master weights)" \
    $(grep -q '^GPU memory after the first step: .*(equal)' "$out" && echo 1 || echo 0) "$(grep '^GPU memory after' "$out")"
# against one process (the plain fp32 build's -b 4): the same data, the sums in bf16
read -r count worst bad <<< "$(compare_logs "$TMP/plain/main.log" "$TMP/bf16w1z2/main.log")"
report "bf16 -Z 2, 2 ranks: the losses within 1e-2 of fp32's one process (bf16's rounding)" \
    $([ "$count" -ge 10 ] && [ "$bad" = 0 ] && within "$worst" 1e-2 && echo 1 || echo 0) "$count numbers, worst $worst"

# --- 4. resume: sharded checkpoints hold the whole state
part="$TMP/resume_bf16"
mkdir -p "$part"
cp "$TMP/bf16w1z2/model_00000002.bin" "$TMP/bf16w1z2/state_00000002.bin" "$part/"
grep -E '^s:[0-2] ' "$TMP/bf16w1z2/main.log" > "$part/main.log" # (the log as it stood at step 2)
mpi 2 "$BF16_BIN" "${RUN[@]}" -b 2 -Z 2 -o "$part" -y 1 > "$part.out" 2>&1
status=$?
report "bf16 -Z 2 resumed at step 2 on 2 ranks: the uninterrupted run's log, weights and state, bit for bit" \
    $([ $status = 0 ] && same_log "$TMP/bf16w1z2/main.log" "$part/main.log" && cmp -s "$TMP/bf16w1z2/model_00000003.bin" "$part/model_00000003.bin" &&
      cmp -s "$TMP/bf16w1z2/state_00000003.bin" "$part/state_00000003.bin" && echo 1 || echo 0) "exit $status; $(tail -2 "$part.out" | tr '\n' ' ')"
part="$TMP/resume_one"
mkdir -p "$part"
cp "$TMP/fp32z1/model_00000002.bin" "$TMP/fp32z1/state_00000002.bin" "$part/"
grep -E '^s:[0-2] ' "$TMP/fp32z1/main.log" > "$part/main.log"
"$PLAIN_BIN" "${RUN[@]}" -b 4 -o "$part" -y 1 > "$part.out" 2>&1
status=$?
read -r count worst bad <<< "$(compare_logs "$TMP/fp32z1/main.log" "$part/main.log")"
report "fp32 -Z 1 on 2 ranks, resumed at step 2 on one GPU: the uninterrupted run's numbers within 1e-5" \
    $([ $status = 0 ] && [ "$count" -ge 10 ] && [ "$bad" = 0 ] && within "$worst" 1e-5 && echo 1 || echo 0) \
    "exit $status, $count numbers, worst $worst; $(tail -2 "$part.out" | tr '\n' ' ')"

# --- 5. more ranks on a machine than it has GPUs: a clear error, no run (one GPU each is
# taken as the launcher's binding, CUDA_VISIBLE_DEVICES: not an error)
EMU_DEVICES=2 mpi 3 "$FP32_BIN" "${RUN[@]}" -t 16 -d 96 -b 2 -o "$TMP/crowded" > "$TMP/crowded.out" 2>&1
status=$?
report "3 ranks on a machine of 2 GPUs: exit non-zero, the reason, no output files" \
    $([ $status != 0 ] && [ $status != 124 ] && grep -q 'Error: rank 2 is rank 2 of its machine, which has 2 GPUs: one rank a GPU' "$TMP/crowded.out" &&
      [ ! -e "$TMP/crowded/main.log" ] && echo 1 || echo 0) "exit $status: $(grep -m1 Error "$TMP/crowded.out")"
# -M 1 (the memory plan, no GPU needed) under mpirun: each rank's shard, and a clean exit; a
# 12-layer model's gradients take less with -Z 2 (the layers' a rank's shard, and two
# one-layer tables) than with -Z 1 (all of them)
for z in 1 2; do
    mpi 2 "$BF16_BIN" -e d12 -t 64 -b 2 -Z $z -M 1 > "$TMP/plan$z.out" 2>&1
    status=$?
    report "-M 1 -Z $z on 2 ranks: the plan of one rank's shard, exit 0" \
        $([ $status = 0 ] && grep -q "ZeRO-$z: each rank.s shard of the master weights" "$TMP/plan$z.out" && ! grep -q 'exiting improperly' "$TMP/plan$z.out" &&
          echo 1 || echo 0) "exit $status; $(tail -2 "$TMP/plan$z.out" | tr '\n' ' ')"
done
grads() { grep -m1 '^  gradients ' "$1" | awk '{ print $2 }'; }
report "-Z 2 on 2 ranks: a d12 model's gradients take less than with -Z 1 ($(grads "$TMP/plan2.out") MiB against $(grads "$TMP/plan1.out"))" \
    $(awk -v a="$(grads "$TMP/plan2.out")" -v b="$(grads "$TMP/plan1.out")" 'BEGIN { exit !(a > 0 && a < b) }' && echo 1 || echo 0)

finish
