#!/usr/bin/env bash
# train_gpt2.cu's ranks started without mpirun (-pi fs, -pi tcp: any launcher starts the
# processes and tells each its rank; they find rank 0 through a shared folder or a TCP
# port), without a GPU: the emulated build without MPI (-DUSE_NCCL alone), 2 ranks started
# by this script, trains bit for bit what the MPI build's 2 ranks train under mpirun; an id
# and marks a crashed run left do not confuse it; a rank that dies or hangs stops the other
# with a message in bounded time (-pt); a rank whose peers never come, and bad -p flags,
# get one clear error.
#
#     make dev/emu/train_gpt2cu_nccl_fp32_cpu dev/emu/train_gpt2cu_mpi_fp32_cpu dev/emu/train_gpt2cu_fp32_cpu
#     bash dev/test/test_train_gpt2cu_launch.sh ./dev/emu/train_gpt2cu_nccl_fp32_cpu ./dev/emu/train_gpt2cu_mpi_fp32_cpu \
#         ./dev/emu/train_gpt2cu_fp32_cpu
#
# Needs MPI for its reference (mpirun's run); without it, says so and checks nothing. About
# a minute on 2 cores.
set -u
. "$(dirname "$0")/lib.sh"
BIN=${1:-./dev/emu/train_gpt2cu_nccl_fp32_cpu}
MPI_BIN=${2:-./dev/emu/train_gpt2cu_mpi_fp32_cpu}
PLAIN_BIN=${3:-./dev/emu/train_gpt2cu_fp32_cpu}
need_mpi "train_gpt2.cu's launches"
need_built "see this script's header" "$BIN" "$MPI_BIN" "$PLAIN_BIN" ./data/tokenizer
TMP=$(mktemp -d /tmp/test_train_gpt2cu_launch.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done; rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1 EMU_DEVICES=2
# a free TCP port, and the one after it (this script has not used them yet, nothing listens
# on them; below 32768, where the system's own ephemeral ports start)
next_port=$((20000 + RANDOM % 10000))
listening() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
port() {
    while listening $next_port || listening $((next_port + 1)); do next_port=$((next_port + 1)); done
    echo $next_port
    next_port=$((next_port + 2))
}
# two ranks, each its own process: ranks2 NAME ARGS... (rank r's output in NAME.r.out,
# their exit statuses in NAME.status, "a b"); rank 1 starts first (rank 0 need not be first)
ranks2() {
    local name=$1 r
    shift
    local p=()
    for r in 1 0; do
        timeout 300 "$BIN" "$@" -pn 2 -pr $r > "$TMP/$name.$r.out" 2>&1 &
        p[$r]=$!
        pids+=($!)
        [ $r = 1 ] && sleep 0.5
    done
    local s0 s1
    wait "${p[0]}"; s0=$?
    wait "${p[1]}"; s1=$?
    echo "$s0 $s1" > "$TMP/$name.status"
}

small_shard "$TMP"
# 3 steps of 2 ranks x 2 x 32 tokens, validation at 0 and 3, a checkpoint at 3, ZeRO-1
RUN=(-e d1 -t 32 -d 128 -b 2 -x 3 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 3 -m 1 -s 0
     -n 3 -z 0 -Z 1)

# --- 1. the same run three ways: mpirun, a shared folder, TCP (its address and the ranks
# from torchrun's environment variables)
timeout 300 "${MPIRUN[@]}" -np 2 "$MPI_BIN" "${RUN[@]}" -o "$TMP/mpi" > "$TMP/mpi.out" 2>&1 ||
    report "mpirun's 2 ranks (the reference)" 0 "$(tail -2 "$TMP/mpi.out" | tr '\n' ' ')"
mkdir -p "$TMP/meet"
ranks2 fs "${RUN[@]}" -o "$TMP/fs" -pi fs -pf "$TMP/meet"
report "-pi fs, 2 ranks: mpirun's log, weights and AdamW state, bit for bit; the folder left empty" \
    $([ "$(cat "$TMP/fs.status")" = "0 0" ] && same_log "$TMP/mpi/main.log" "$TMP/fs/main.log" &&
      cmp -s "$TMP/mpi/model_00000003.bin" "$TMP/fs/model_00000003.bin" && cmp -s "$TMP/mpi/state_00000003.bin" "$TMP/fs/state_00000003.bin" &&
      [ -z "$(ls -A "$TMP/meet")" ] && echo 1 || echo 0) "exit $(cat "$TMP/fs.status"); $(tail -2 "$TMP/fs.0.out" | tr '\n' ' ')"
report "-pi fs: rank 0 says how the ranks met; rank 1 prints nothing to stdout" \
    $(grep -q '^hardware: 2 ranks (NCCL, met in a shared folder, ZeRO-1), rank 0 on GPU 0' "$TMP/fs.0.out" && [ ! -s "$TMP/fs.1.out" ] &&
      echo 1 || echo 0) "$(grep '^hardware' "$TMP/fs.0.out")"
P=$(port) # (torchrun's store's: ours listens on the next)
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$P timeout 300 "$BIN" "${RUN[@]}" -o "$TMP/tcp" -pi tcp \
        > "$TMP/tcp.$r.out" 2>&1 &
    pids[$r]=$!
    # (before rank 1: rank 0 listening, and a stranger connected who says nothing; rank 0
    # must drop it, not wait for it until -pt)
    if [ $r = 0 ]; then
        for i in $(seq 1 300); do listening $((P + 1)) && break; sleep 0.1; done
        (exec 3<> "/dev/tcp/127.0.0.1/$((P + 1))" && exec sleep 60) 2> /dev/null &
        stranger=$!
        pids+=($stranger)
    fi
done
wait "${pids[0]}"; s0=$?
wait "${pids[1]}"; s1=$?
kill "$stranger" 2> /dev/null
report "-pi tcp, 2 ranks from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT + 1, a silent stranger: mpirun's run" \
    $([ "$s0 $s1" = "0 0" ] && same_log "$TMP/mpi/main.log" "$TMP/tcp/main.log" &&
      cmp -s "$TMP/mpi/model_00000003.bin" "$TMP/tcp/model_00000003.bin" && cmp -s "$TMP/mpi/state_00000003.bin" "$TMP/tcp/state_00000003.bin" &&
      grep -q '^hardware: 2 ranks (NCCL, met over TCP, ZeRO-1)' "$TMP/tcp.0.out" && echo 1 || echo 0) "exit $s0 $s1; $(tail -2 "$TMP/tcp.0.out" | tr '\n' ' ')"

# --- 2. a crashed run's leftovers in the folder (an id, a mark), rank 1 up long before rank 0
# (the id file as rank 0 writes it, the world size right: 2 ranks' numbers and an id, all
# another run's; rank 1 must see the number is not its own)
{ printf '\002\000\000\000'; head -c $((2 * 8 + 128)) /dev/urandom; } > "$TMP/meet/nccl_id"
printf 'old mark' > "$TMP/meet/rank_1"
timeout 300 "$BIN" "${RUN[@]}" -o "$TMP/stale" -pi fs -pf "$TMP/meet" -pn 2 -pr 1 > "$TMP/stale.1.out" 2>&1 &
p1=$!
pids+=($p1)
sleep 2
timeout 300 "$BIN" "${RUN[@]}" -o "$TMP/stale" -pi fs -pf "$TMP/meet" -pn 2 -pr 0 > "$TMP/stale.0.out" 2>&1
s0=$?
wait $p1; s1=$?
report "-pi fs over an earlier run's id and mark: neither taken, the run as mpirun's" \
    $([ "$s0 $s1" = "0 0" ] && same_log "$TMP/mpi/main.log" "$TMP/stale/main.log" && echo 1 || echo 0) \
    "exit $s0 $s1; $(tail -n 2 "$TMP/stale.0.out" "$TMP/stale.1.out" | tr '\n' ' ')"

# --- 3. a rank that dies (kill -9) or hangs (SIGSTOP) mid-run: the other stops, non-zero,
# with a message, well within the time-out
LONG=(-e d1 -t 32 -d 128 -b 2 -x 40 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 0 -s 0 -z 0)
for how in KILL STOP; do
    P=$(port)
    for r in 0 1; do
        "$BIN" "${LONG[@]}" -o "$TMP/$how" -pi tcp -ps 127.0.0.1:$P -pn 2 -pr $r -pt 5 > "$TMP/$how.$r.out" 2>&1 &
        pids[$r]=$!
    done
    for i in $(seq 1 600); do grep -q '^s:2 ' "$TMP/$how/main.log" 2> /dev/null && break; sleep 0.1; done # (main.log: flushed each step)
    alive=$(grep -q '^s:2 ' "$TMP/$how/main.log" 2> /dev/null && kill -0 "${pids[0]}" 2> /dev/null && echo 1 || echo 0)
    kill -$how "${pids[1]}"
    [ $how = KILL ] && { wait "${pids[1]}"; } 2> /dev/null # (reaped here, where bash's "Killed" goes nowhere)
    start=$(date +%s)
    for i in $(seq 1 600); do kill -0 "${pids[0]}" 2> /dev/null || break; sleep 0.1; done
    kill -9 "${pids[0]}" 2> /dev/null # (still there after 60 s: a hang, which fails below)
    wait "${pids[0]}"; s0=$?
    took=$(($(date +%s) - start))
    kill -9 "${pids[1]}" 2> /dev/null
    if [ $how = KILL ]; then
        want='rank 1 is gone|another rank gone|waited 5 s for the other ranks'
        what="rank 1 killed (-9)"
        least=0
    else # (the watchdog: not before -pt has passed)
        want='waited 5 s for the other ranks \(-pt\): one died or hangs; stopping'
        what="rank 1 stopped (SIGSTOP), -pt 5"
        least=4
    fi
    wait "${pids[1]}" 2> /dev/null
    report "$what at step 2 (rank 0 running): rank 0 exits non-zero in ${took} s ($least to 30), saying why" \
        $([ "$alive" = 1 ] && [ $s0 != 0 ] && [ $s0 != 137 ] && [ "$took" -ge $least ] && [ "$took" -lt 30 ] && grep -Eq "$want" "$TMP/$how.0.out" &&
          echo 1 || echo 0) \
        "exit $s0 after $took s: $(grep -m1 Error "$TMP/$how.0.out")"
done

# --- 4. peers that never come: each side alone stops after -pt with the reason
P=$(port)
mkdir -p "$TMP/alone"
for spec in "fs 0:rank 1 did not come in 2 s" "fs 1:no id for it from rank 0 in" "tcp 0:1 of 2 ranks came to port" \
            "tcp 1:cannot reach rank 0 at 127.0.0.1:$P in 2 s"; do
    how=${spec%% *}
    rest=${spec#* }
    r=${rest%%:*}
    want=${rest#*:}
    meet=(-pf "$TMP/alone")
    [ $how = tcp ] && meet=(-ps 127.0.0.1:$P)
    timeout 60 "$BIN" "${RUN[@]}" -o "$TMP/alone_out" -pi $how "${meet[@]}" -pn 2 -pr $r -pt 2 > "$TMP/alone.out" 2>&1
    status=$?
    report "-pi $how, rank $r alone, -pt 2: exits non-zero, \"$want\"" \
        $([ $status != 0 ] && [ $status != 124 ] && grep -qF -- "$want" "$TMP/alone.out" && echo 1 || echo 0) "exit $status: $(grep -m1 Error "$TMP/alone.out")"
done

# --- 5. bad flags: one line each, non-zero, before any work
bad() { # bad WHAT EXPECTED BINARY ARGS...
    local what=$1 want=$2 bin=$3
    shift 3
    timeout 60 "$bin" "${RUN[@]}" -o "$TMP/bad" "$@" > "$TMP/bad.out" 2>&1
    local status=$?
    report "$what: exit non-zero, \"$want\"" \
        $([ $status != 0 ] && [ $status != 124 ] && grep -qF -- "$want" "$TMP/bad.out" && [ ! -e "$TMP/bad/main.log" ] && echo 1 || echo 0) \
        "exit $status: $(head -1 "$TMP/bad.out")"
}
bad "-pi ssh" "-pi ssh: the ranks start by mpi (mpirun), fs (a shared folder, -pf) or tcp (-ps)" "$BIN" -pi ssh
bad "-pr 2 of -pn 2" "-pr 2: ranks count from 0 to -pn - 1" "$BIN" -pi fs -pf "$TMP" -pn 2 -pr 2
bad "-pi fs without the ranks" "say how many ranks there are and which this is" "$BIN" -pi fs -pf "$TMP"
bad "-pi fs without -pf" "-pi fs needs -pf" "$BIN" -pi fs -pn 2 -pr 0
bad "-pi fs, -pf a file" "-pf $TMP/small.txt: not a folder" "$BIN" -pi fs -pf "$TMP/small.txt" -pn 2 -pr 0
bad "-pn under mpirun's start" "-pn: for -pi fs or tcp (under mpirun, MPI says)" "$MPI_BIN" -pn 2
bad "-pi mpi in the build without MPI" "-pi mpi: this build has no MPI" "$BIN" -pi mpi
export WORLD_SIZE=2
bad "torchrun's WORLD_SIZE=2 without -pi" "WORLD_SIZE=2 says a launcher (torchrun) started 2 ranks, not mpirun" "$BIN"
unset WORLD_SIZE
bad "-ps with a bad port" "flag -ps's port needs an integer" "$BIN" -pi tcp -ps 127.0.0.1:x -pn 2 -pr 1
bad "-pi fs in the plain build" "-pi: ranks are train_gpt2cu_mpi's (make train_gpt2cu_mpi)" "$PLAIN_BIN" -pi fs

finish
