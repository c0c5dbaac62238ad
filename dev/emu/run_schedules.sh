#!/usr/bin/env bash
# Run an emulated test under two or more schedules (dev/emu/cuda_emu.h: EMU_SCHEDULE), each
# run perhaps with another build of the same program (plain, race, asan), and compare: each
# run must pass on its own, and every byte the emulated programs copied from the device to
# the host must be the same in all of them (the emulator hashes those bytes into
# EMU_DIGEST_FILE, a line per process). Our kernels are deterministic by design (no atomics
# whose order changes a sum; ../shared/STYLE.md section 6), so the tolerance is zero: a
# kernel whose result depends on the order its threads or blocks run in has a race.
#     bash dev/emu/run_schedules.sh SCHEDULE "COMMAND" [SCHEDULE "COMMAND" ...]
#     bash dev/emu/run_schedules.sh ascending ./dev/emu/test_gpt2cu_fp32_cpu descending ./dev/emu/test_gpt2cu_fp32_race
# It prints each run's output and ends with one line "N passed, M failed": the runs'
# counts added up, plus one check for the comparison.
set -u
runs=()
cmds=()
while [ $# -ge 2 ]; do
    runs+=("$1")
    cmds+=("$2")
    shift 2
done
if [ $# != 0 ] || [ ${#runs[@]} -lt 2 ]; then
    echo "usage: run_schedules.sh SCHEDULE COMMAND SCHEDULE COMMAND [...] (two runs at least)"
    echo "0 passed, 1 failed"
    exit 1
fi
tmp=$(mktemp -d /tmp/run_schedules.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The runs go side by side (each emulated program uses one core; EMU_PARALLEL=0 runs them
# one after another): their outputs are printed in order once all have ended. OpenMP's
# threads sleep when they wait (OMP_WAIT_POLICY=passive): spinning, they would slow the
# other runs' programs, and the CPU twins in the scripts, by 10x.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for i in "${!runs[@]}"; do
    (EMU_SCHEDULE=${runs[$i]} EMU_DIGEST_FILE="$tmp/digest.$i" bash -c "${cmds[$i]}" > "$tmp/out.$i" 2>&1; echo $? > "$tmp/rc.$i") &
    [ "${EMU_PARALLEL:-1}" = 0 ] && wait
done
wait
passed=0
failed=0
for i in "${!runs[@]}"; do
    echo "---- EMU_SCHEDULE=${runs[$i]} ${cmds[$i]}"
    cat "$tmp/out.$i"
    rc=$(cat "$tmp/rc.$i" 2> /dev/null || echo 1)
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out.$i" | tail -1)
    p=0
    f=0
    if [ -n "$line" ]; then
        p=${line%% passed*}
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    fi
    [ "$rc" != 0 ] && [ "$f" = 0 ] && f=1 # (a crash, or no summary line)
    passed=$((passed + p))
    failed=$((failed + f))
    touch "$tmp/digest.$i"
    cut -d' ' -f2- "$tmp/digest.$i" > "$tmp/results.$i" # (hash and bytes: the program's name differs between builds)
done
same=1
for i in "${!runs[@]}"; do
    [ "$i" = 0 ] && continue
    if ! cmp -s "$tmp/results.0" "$tmp/results.$i"; then
        same=0
        echo "NOT OK  the device's results differ between run 1 (EMU_SCHEDULE=${runs[0]}) and run $((i + 1)) (EMU_SCHEDULE=${runs[$i]}); program, hash, bytes:"
        diff "$tmp/digest.0" "$tmp/digest.$i" | head -10
    fi
done
if [ ! -s "$tmp/results.0" ]; then
    same=0
    echo "NOT OK  no emulated program reported its results (EMU_DIGEST_FILE): is this an emulated test?"
fi
if [ $same = 1 ]; then
    echo "OK      every result copied from the device is bit-identical under ${runs[*]} ($(wc -l < "$tmp/results.0") processes)"
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ $failed = 0 ]
