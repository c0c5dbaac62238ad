#!/usr/bin/env bash
# train_gpt2_mpi across machines, on one machine: two "hosts" are two network namespaces
# (ip netns), each with its own network stack and address, joined by veth pairs on a bridge
# of their own subnet; mpirun starts one rank in each (its remote shell is `ip netns exec`)
# and MPI talks TCP between them over that subnet only (no shared memory, no loopback). The
# run must be one process's, to fp32's rounding, and a rank killed on one host must end the
# run on both. Given train_gpt2.cu's emulated build without MPI (third argument), its two
# ranks, one a host, meet over TCP (-pi tcp) and train what train_gpt2_mpi trains. The test
# makes the namespaces, the bridge and its links, and removes them.
# Where the machine refuses namespaces (no CAP_NET_ADMIN, no `ip`), it says so and runs the
# two ranks as processes of this machine over loopback TCP instead.
#
#     make train_gpt2 train_gpt2_mpi dev/emu/train_gpt2cu_nccl_fp32_cpu
#     bash dev/test/test_train_gpt2_netns.sh ./train_gpt2_mpi ./train_gpt2 ./dev/emu/train_gpt2cu_nccl_fp32_cpu
#
# Needs MPI (Debian: apt-get install openmpi-bin libopenmpi-dev); without it, says so and
# checks nothing. About 40 seconds.
set -u
. "$(dirname "$0")/lib.sh"
MPI_BIN=${1:-./train_gpt2_mpi}
CPU_BIN=${2:-./train_gpt2}
NCCL_BIN=${3:-} # (optional: train_gpt2.cu's emulated build without MPI, its ranks met over TCP)
need_mpi "train_gpt2_mpi across hosts"
need_built "make train_gpt2 train_gpt2_mpi data/tokenizer" "$MPI_BIN" "$CPU_BIN" ./data/tokenizer ${NCCL_BIN:+"$NCCL_BIN"}
MPI_BIN=$(realpath "$MPI_BIN")
TMP=$(mktemp -d /tmp/test_train_gpt2_netns.XXXXXX)
export OMP_NUM_THREADS=1
if [ "$(id -u)" = 0 ]; then # (mpirun as root, and the daemons it starts on the "hosts": their consent)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# --- the two hosts: namespaces A and B on a bridge, 10.213.N.0/24 (N from our process id)
id=$$
net=10.213.$((id % 250 + 1))
hosts=("dp${id}a" "dp${id}b")
bridge="dpbr$id"
cleanup() {
    for h in "${hosts[@]}"; do ip netns del "$h" 2> /dev/null; done
    ip link del "$bridge" 2> /dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
make_hosts() {
    command -v ip > /dev/null 2>&1 || { echo "no ip command (Debian: iproute2)"; return 1; }
    ip link add "$bridge" type bridge 2>&1 && ip addr add "$net.1/24" dev "$bridge" 2>&1 && ip link set "$bridge" up 2>&1 || return 1
    local i=2
    for h in "${hosts[@]}"; do
        ip netns add "$h" 2>&1 &&
            ip link add "dpv$id$i" type veth peer name eth0 netns "$h" 2>&1 &&
            ip link set "dpv$id$i" master "$bridge" 2>&1 && ip link set "dpv$id$i" up 2>&1 &&
            ip netns exec "$h" ip addr add "$net.$i/24" dev eth0 2>&1 &&
            ip netns exec "$h" ip link set eth0 up 2>&1 && ip netns exec "$h" ip link set lo up 2>&1 || return 1
        i=$((i + 1))
    done
}
# mpirun's remote shell: "ssh HOST COMMAND" becomes a shell in namespace HOST
cat > "$TMP/netns_rsh" << 'EOF'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
EOF
chmod +x "$TMP/netns_rsh"
if why=$(make_hosts); then
    mode=namespaces
    MPIRUN=(mpirun -np 2 --host "${hosts[0]},${hosts[1]}" --mca plm_rsh_agent "$TMP/netns_rsh"
            --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24")
    where="2 hosts (network namespaces, TCP over $net.0/24)"
else
    mode=loopback
    echo "network namespaces refused here ($(echo "$why" | head -1)): the 2 ranks run as processes of this machine over loopback TCP instead"
    MPIRUN=(mpirun -np 2 --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo)
    where="2 processes over loopback TCP"
fi
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

if [ $mode = namespaces ]; then
    # each rank in its own namespace: its own network stack, with its own address
    seen=$(timeout 60 "${MPIRUN[@]}" /bin/sh -c 'echo "$(readlink /proc/self/ns/net) $(ip -4 -o addr show eth0 | awk "{ print \$4 }")"' 2>&1)
    report "mpirun starts one rank in each namespace: two network stacks, addresses $net.2 and $net.3" \
        $([ "$(echo "$seen" | awk '{ print $1 }' | sort -u | wc -l)" = 2 ] && echo "$seen" | grep -q " $net.2/24" &&
          echo "$seen" | grep -q " $net.3/24" && ! echo "$seen" | grep -q "$(readlink /proc/self/ns/net)" && echo 1 || echo 0) "$(echo "$seen" | tr '\n' ' ')"
fi

small_shard "$TMP"
RUN=(-e d1 -t 32 -d 128 -x 6 -u 2 -l 3e-3 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -v 3 -m 2 -s 0 -n 3)

# --- the same training as one process (the tolerances: test_train_gpt2_mpi.sh says why)
"$CPU_BIN" "${RUN[@]}" -b 4 -o "$TMP/one" > "$TMP/one.out" 2>&1 || report "one process" 0 "$(tail -2 "$TMP/one.out")"
timeout 120 "${MPIRUN[@]}" "$MPI_BIN" "${RUN[@]}" -b 2 -o "$TMP/two" > "$TMP/two.out" 2>&1
status=$?
read -r count worst bad <<< "$(compare_logs "$TMP/one/main.log" "$TMP/two/main.log")"
report "$where, -b 2 each: every loss, norm and validation loss within 1e-5 of one process at -b 4" \
    $([ $status = 0 ] && [ "$count" -ge 15 ] && [ "$bad" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && echo 1 || echo 0) \
    "exit $status, $count numbers, worst $worst; $(tail -2 "$TMP/two.out" | tr '\n' ' ')"
read -r count worst <<< "$(compare_models "$TMP/one/model_00000006.bin" "$TMP/two/model_00000006.bin")"
report "... the final weights within 3e-3 (one lr) of one process's ($count, worst $worst)" \
    $([ "$count" -gt 1000 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 3e-3) }' && echo 1 || echo 0)

# --- train_gpt2.cu's ranks without MPI (its emulated build: NCCL's stand-in over TCP), one in
# each host, meeting over TCP at rank 0's address (-pi tcp): train_gpt2_mpi's 2 ranks, to
# rounding; the stand-in's id names rank 0's own address (its first one but loopback)
if [ -n "$NCCL_BIN" ]; then
    addr=127.0.0.1
    [ $mode = namespaces ] && addr=$net.2
    port=$((20000 + id % 20000))
    for r in 0 1; do
        on=()
        [ $mode = namespaces ] && on=(ip netns exec "${hosts[$r]}")
        EMU_DEVICES=1 timeout 300 "${on[@]}" "$NCCL_BIN" "${RUN[@]}" -b 2 -o "$TMP/nccl" -pi tcp -ps "$addr:$port" -pn 2 -pr $r \
            > "$TMP/nccl.$r.out" 2>&1 &
        ranks[$r]=$!
    done
    wait "${ranks[0]}"; s0=$?
    wait "${ranks[1]}"; s1=$?
    read -r count worst bad <<< "$(compare_logs "$TMP/two/main.log" "$TMP/nccl/main.log")"
    report "train_gpt2.cu (emulated), -pi tcp, $where: train_gpt2_mpi's numbers within 1e-5" \
        $([ "$s0 $s1" = "0 0" ] && [ "$count" -ge 15 ] && [ "$bad" = 0 ] && within "$worst" 1e-5 && echo 1 || echo 0) \
        "exit $s0 $s1, $count numbers, worst $worst; $(tail -n 2 "$TMP/nccl.0.out" "$TMP/nccl.1.out" | tr '\n' ' ')"
fi

# --- a rank killed on one host: the run ends on both, in bounded time
dead="$TMP/dead"
timeout 120 "${MPIRUN[@]}" "$MPI_BIN" "${RUN[@]}" -b 2 -x 200 -v 0 -n 3 -o "$dead" > "$dead.out" 2>&1 &
runner=$!
for i in $(seq 1 600); do [ -e "$dead/state_00000003.bin" ] && break; sleep 0.1; done
# (the ranks: processes with this run's -o, named after the binary or "exe" when it started
# itself over at start-up; the last one found)
victim=$(pgrep -f -- "-o $dead" | while read -r p; do
    case "$(cat /proc/"$p"/comm 2> /dev/null)" in "$(basename "$MPI_BIN" | cut -c1-15)" | exe) echo "$p" ;; esac
done | tail -1)
[ -n "$victim" ] || kill $runner 2> /dev/null
start=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
wait $runner
status=$?
seconds=$(($(date +%s) - start))
left=$(pgrep -f -- "-o $dead" | wc -l)
report "a rank killed (-9) on one host: the run ends non-zero within 60 s, no rank left on either" \
    $([ -n "$victim" ] && [ $status != 0 ] && [ $status != 124 ] && [ "$seconds" -le 60 ] && [ "$left" = 0 ] && echo 1 || echo 0) \
    "victim ${victim:-none}, exit $status after $seconds s, $left processes left"
last=$(ls "$dead"/state_*.bin 2> /dev/null | sort | tail -1)
last_step=$(basename "${last:-state_0.bin}" .bin | sed 's/state_0*//')
"$CPU_BIN" "${RUN[@]}" -b 4 -v 0 -x $((last_step + 1)) -o "$dead" -y 1 > "$dead.resumed" 2>&1
report "... its last checkpoint (step $last_step) resumes (one process, one more step)" \
    $([ $? = 0 ] && [ -n "$last" ] && grep -q "resuming from $last" "$dead.resumed" && echo 1 || echo 0) "$(tail -2 "$dead.resumed" | tr '\n' ' ')"

finish
