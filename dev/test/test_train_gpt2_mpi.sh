#!/usr/bin/env bash
# train_gpt2_mpi (train_gpt2.c built with MPI) as a user runs it: N ranks at -b B/N train
# what one process trains at -b B, step by step and weight by weight, to fp32's rounding;
# rank 0 alone prints and writes; a run checkpointed on 2 ranks resumes on 2 bit for bit,
# and on 1 and 4 to rounding; a rank that dies ends the run, in bounded time, with its
# last checkpoint intact. The same with ZeRO-1 (-Z 1: the AdamW moments sharded over the
# ranks), whose checkpoints hold the whole state and resume with or without it.
#
#     make train_gpt2 train_gpt2_mpi && bash dev/test/test_train_gpt2_mpi.sh ./train_gpt2_mpi ./train_gpt2
#
# Needs MPI (Debian: apt-get install openmpi-bin libopenmpi-dev); without it, says so and
# checks nothing. The ranks run on one machine, one OpenMP thread each (4 ranks on 2 cores:
# --oversubscribe). A d1 model and a 20 KB shard: about half a minute.
set -u
. "$(dirname "$0")/lib.sh"
MPI_BIN=${1:-./train_gpt2_mpi}
CPU_BIN=${2:-./train_gpt2}
need_mpi train_gpt2_mpi
need_built "make train_gpt2 train_gpt2_mpi data/tokenizer" "$MPI_BIN" "$CPU_BIN" ./data/tokenizer
TMP=$(mktemp -d /tmp/test_train_gpt2_mpi.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
mpi() { # mpi N ARGS...: train_gpt2_mpi on N ranks, bounded in time (a hang fails, it does not stall the tests)
    local n=$1
    shift
    timeout 120 "${MPIRUN[@]}" -np "$n" "$MPI_BIN" "$@"
}

small_shard "$TMP"
# 8 steps of 4 x 32 tokens (-d 128), validation every 4 (2 batches), a checkpoint every 4
RUN=(-e d1 -t 32 -d 128 -x 8 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 4 -m 2 -s 0 -n 4)


# --- 1. the same training on 1, 2 and 4 ranks
"$CPU_BIN" "${RUN[@]}" -b 4 -o "$TMP/one" > "$TMP/one.out" 2>&1 || report "one process (train_gpt2 -b 4)" 0 "$(tail -2 "$TMP/one.out")"
# (train_gpt2_mpi without mpirun: one rank, train_gpt2's arithmetic, so its very bits)
timeout 120 "$MPI_BIN" "${RUN[@]}" -b 4 -o "$TMP/alone" > "$TMP/alone.out" 2>&1
report "train_gpt2_mpi started alone: train_gpt2's run, bit for bit (log and checkpoint)" \
    $(cmp -s <(sed -E 's/ ms:[0-9.]+//' "$TMP/one/main.log") <(sed -E 's/ ms:[0-9.]+//' "$TMP/alone/main.log") &&
      cmp -s "$TMP/one/model_00000008.bin" "$TMP/alone/model_00000008.bin" && echo 1 || echo 0) "$(tail -2 "$TMP/alone.out")"
# AdamW divides each gradient by its own running size: a weight whose gradient is near zero
# moves on the sums' rounding by up to about lr a step; 8 steps at 3e-3 bound a weight's
# difference by 2.4e-2, and a wrong gradient moves whole tensors by that much. The losses
# and norms are sums over every weight and token: 1e-5 relative is fp32's rounding.
for case in "2|-b 2 -s 4 -g 8" "4|-b 1" "2|-b 1 -m 4" "2|-b 2 -Z 1" "4|-b 1 -Z 1"; do # (the first samples too, on rank 0;
    # the third: 2 passes of -b 1 per rank and step, accumulated, validation's 4 batches of 1 x 2 ranks the 2
    # batches of 4 sequences one process reads; -Z 1: ZeRO-1, each rank the AdamW moments of its shard)
    n=${case%%|*} flags=${case#*|}
    dir="$TMP/ranks${n}_${flags// /}"
    mpi "$n" "${RUN[@]}" $flags -o "$dir" > "$dir.out" 2>&1
    status=$?
    read -r count worst bad <<< "$(compare_logs "$TMP/one/main.log" "$dir/main.log")"
    report "$n ranks at $flags: every loss, norm and validation loss of 8 steps within 1e-5 of one process's" \
        $([ $status = 0 ] && [ "$count" -ge 20 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && echo 1 || echo 0) \
        "exit $status, $count numbers, worst $worst; $(tail -2 "$dir.out" | tr '\n' ' ')"
    read -r count worst <<< "$(compare_models "$TMP/one/model_00000008.bin" "$dir/model_00000008.bin")"
    report "... the final weights within 3e-3 (one lr) of one process's ($count, worst $worst)" \
        $([ "$count" -gt 1000 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 3e-3) }' && echo 1 || echo 0)
done
out="$TMP/ranks2_-b2-s4-g8.out"
report "2 ranks: one set of output lines (the others' stdout is /dev/null), each step and sample once" \
    $([ "$(grep -c '^batch:' "$out")" = 1 ] && [ "$(grep -c '^step    8/8' "$out")" = 1 ] && [ "$(grep -c '^generating:' "$out")" = 3 ] &&
      grep -q '^batch: B 2 x T 32 x 2 ranks x 1 accumulation steps = 128 tokens' "$out" &&
      grep -q '^hardware: 2 ranks (MPI), each: CPU' "$out" && echo 1 || echo 0) "$(grep -E '^(batch|hardware)' "$out" | tr '\n' ' ')"
report "... and one set of files: main.log and the checkpoints of steps 4 and 8" \
    $([ "$(ls "$TMP/ranks2_-b2-s4-g8" | sort | tr '\n' ' ')" = "main.log model_00000004.bin model_00000008.bin state_00000004.bin state_00000008.bin " ] &&
      echo 1 || echo 0) "$(ls "$TMP/ranks2_-b2-s4-g8" | tr '\n' ' ')"

report "-Z 1: each rank keeps half the moments (the memory line: rank 0's shard)" \
    $(grep -q 'AdamW moments 12.7 MiB (ZeRO-1: rank 0.s shard)' "$TMP/ranks2_-b2-Z1.out" && grep -q 'AdamW moments 25.4 MiB |' "$TMP/ranks2_-b2-s4-g8.out" &&
      echo 1 || echo 0) "$(grep '^memory' "$TMP/ranks2_-b2-Z1.out" "$TMP/ranks2_-b2-s4-g8.out" | tr '\n' ' ')"
# On 2 ranks without clipping (-z 0) -Z 1 is -Z 0 bit for bit: each gradient is the same one
# addition, and every weight gets the same AdamW (a shard's bounds off by one would leave
# weights unchanged, which only this comparison sees: the tolerances above would not)
mpi 2 "${RUN[@]}" -b 2 -z 0 -o "$TMP/z0" > "$TMP/z0.out" 2>&1 && mpi 2 "${RUN[@]}" -b 2 -z 0 -Z 1 -o "$TMP/z1" > "$TMP/z1.out" 2>&1
status=$?
report "2 ranks, no clipping: -Z 1's weights and whole AdamW state those of -Z 0, bit for bit" \
    $([ $status = 0 ] && cmp -s "$TMP/z0/model_00000008.bin" "$TMP/z1/model_00000008.bin" && cmp -s "$TMP/z0/state_00000008.bin" "$TMP/z1/state_00000008.bin" &&
      echo 1 || echo 0) "exit $status; $(tail -1 "$TMP/z1.out")"
# a -Z 1 checkpoint holds the whole state: resumed with -Z 1 on 2 ranks, the uninterrupted run bit for
# bit; on 4 ranks with -Z 1 (other shards), with -Z 0, and on one process, that run's numbers to rounding
for how in "2|-Z 1" "4|-Z 1" "2|-Z 0" "1|"; do
    n=${how%%|*} flags=${how#*|}
    part="$TMP/zpart$n${flags// /}"
    mkdir -p "$part"
    cp "$TMP/ranks2_-b2-Z1/model_00000004.bin" "$TMP/ranks2_-b2-Z1/state_00000004.bin" "$part/"
    grep -E '^s:[0-4] ' "$TMP/ranks2_-b2-Z1/main.log" > "$part/main.log"
    if [ "$n" = 1 ]; then "$CPU_BIN" "${RUN[@]}" -b 4 -o "$part" -y 1 > "$part.out" 2>&1; else mpi "$n" "${RUN[@]}" -b $((4 / n)) $flags -o "$part" -y 1 > "$part.out" 2>&1; fi
    status=$?
    if [ "$n$flags" = "2-Z 1" ]; then
        report "-Z 1 resumed at step 4 on 2 ranks with -Z 1: the uninterrupted run, bit for bit" \
            $([ $status = 0 ] && cmp -s <(sed -E 's/ ms:[0-9.]+//' "$TMP/ranks2_-b2-Z1/main.log") <(sed -E 's/ ms:[0-9.]+//' "$part/main.log") &&
              cmp -s "$TMP/ranks2_-b2-Z1/model_00000008.bin" "$part/model_00000008.bin" &&
              cmp -s "$TMP/ranks2_-b2-Z1/state_00000008.bin" "$part/state_00000008.bin" && echo 1 || echo 0) "exit $status; $(tail -2 "$part.out" | tr '\n' ' ')"
    else
        read -r count worst bad <<< "$(compare_logs "$TMP/ranks2_-b2-Z1/main.log" "$part/main.log")"
        report "-Z 1 resumed at step 4 on $n rank(s)${flags:+ with $flags}: the uninterrupted run's numbers within 1e-5" \
            $([ $status = 0 ] && [ "$count" -ge 20 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && echo 1 || echo 0) \
            "exit $status, $count numbers, worst $worst; $(tail -2 "$part.out" | tr '\n' ' ')"
    fi
done

# --- 2. resume: a 2-rank run cut after its checkpoint of step 4, resumed on 2, 1 and 4 ranks
for n in 2 1 4; do
    b=$((4 / n))
    part="$TMP/part$n"
    mkdir -p "$part"
    cp "$TMP/ranks2_-b2-s4-g8/model_00000004.bin" "$TMP/ranks2_-b2-s4-g8/state_00000004.bin" "$part/"
    grep -E '^s:[0-4] ' "$TMP/ranks2_-b2-s4-g8/main.log" > "$part/main.log" # (the log as it stood at step 4)
    if [ "$n" = 1 ]; then "$CPU_BIN" "${RUN[@]}" -b $b -o "$part" -y 1 > "$part.out" 2>&1; else mpi "$n" "${RUN[@]}" -b $b -o "$part" -y 1 > "$part.out" 2>&1; fi
    status=$?
    if [ "$n" = 2 ]; then
        report "resumed at step 4 on the same 2 ranks: the uninterrupted run's log and weights, bit for bit" \
            $([ $status = 0 ] && cmp -s <(sed -E 's/ ms:[0-9.]+//' "$TMP/ranks2_-b2-s4-g8/main.log") <(sed -E 's/ ms:[0-9.]+//' "$part/main.log") &&
              cmp -s "$TMP/ranks2_-b2-s4-g8/model_00000008.bin" "$part/model_00000008.bin" &&
              cmp -s "$TMP/ranks2_-b2-s4-g8/state_00000008.bin" "$part/state_00000008.bin" && echo 1 || echo 0) "exit $status; $(tail -2 "$part.out" | tr '\n' ' ')"
    else
        read -r count worst bad <<< "$(compare_logs "$TMP/ranks2_-b2-s4-g8/main.log" "$part/main.log")"
        report "resumed at step 4 on $n rank(s) (-b $b): the uninterrupted 2-rank run's numbers within 1e-5" \
            $([ $status = 0 ] && [ "$count" -ge 20 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && echo 1 || echo 0) \
            "exit $status, $count numbers, worst $worst; $(tail -2 "$part.out" | tr '\n' ' ')"
    fi
done

# --- 3. flags that do not fit the ranks: one error, nothing run
mpi 4 "${RUN[@]}" -b 2 -o "$TMP/bad" > "$TMP/bad.out" 2>&1
status=$?
report "-d 128 on 4 ranks of -b 2 x -t 32 (256 tokens a pass): exit non-zero, the reason" \
    $([ $status != 0 ] && grep -q 'total batch size -d 128 is not a multiple of B\*T x 4 ranks = 256' "$TMP/bad.out" && [ ! -e "$TMP/bad/main.log" ] &&
      echo 1 || echo 0) "exit $status: $(grep -m1 Error "$TMP/bad.out")"

# --- 4. a rank that dies: every rank ends, in bounded time, and the last checkpoint loads
dead="$TMP/dead"
mpi 2 "${RUN[@]}" -b 2 -x 200 -v 0 -n 4 -o "$dead" > "$dead.out" 2>&1 &
runner=$!
for i in $(seq 1 600); do [ -e "$dead/state_00000004.bin" ] && break; sleep 0.1; done
# (a rank: a process with this run's flags named train_gpt2_mpi, or "exe": the program may
# start itself over at start-up, set_omp_wait_policy; not mpirun, nor timeout)
victim=$(pgrep -f -- "-o $dead" | while read -r p; do
    case "$(cat /proc/"$p"/comm 2> /dev/null)" in "$(basename "$MPI_BIN" | cut -c1-15)" | exe) echo "$p" ;; esac
done | tail -1)
[ -n "$victim" ] || kill $runner 2> /dev/null # (none found: the run ends now, and the check below fails)
start=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
wait $runner
status=$?
seconds=$(($(date +%s) - start))
left=$(pgrep -f -- "-o $dead" | wc -l)
report "a rank killed (-9) mid-run: the run ends non-zero within 60 s, no rank left behind" \
    $([ -n "$victim" ] && [ $status != 0 ] && [ $status != 124 ] && [ "$seconds" -le 60 ] && [ "$left" = 0 ] && echo 1 || echo 0) \
    "victim ${victim:-none}, exit $status after $seconds s, $left processes left"
last=$(ls "$dead"/state_*.bin 2> /dev/null | sort | tail -1)
last_step=$(basename "${last:-state_0.bin}" .bin | sed 's/state_0*//')
"$CPU_BIN" "${RUN[@]}" -b 4 -v 0 -x $((last_step + 1)) -o "$dead" -y 1 > "$dead.resumed" 2>&1
report "... its last checkpoint (step $last_step) resumes (one process, one more step)" \
    $([ $? = 0 ] && [ -n "$last" ] && grep -q "resuming from $last" "$dead.resumed" && echo 1 || echo 0) "$(tail -2 "$dead.resumed" | tr '\n' ' ')"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
