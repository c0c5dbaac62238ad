#!/usr/bin/env bash
# Run an emulated test under two or more schedules (dev/emu/cuda_emu.h: EMU_SCHEDULE) and
# compare: each run must pass on its own, and every byte the emulated programs copied from
# the device to the host must be the same in all of them (the emulator hashes those bytes
# into EMU_DIGEST_FILE, one line per process). Our kernels are deterministic by design (no
# atomics whose order changes a sum; ../shared/STYLE.md section 6), so the tolerance is zero:
# a kernel whose result depends on the order in which its threads or blocks run has a race.
#     bash dev/emu/run_schedules.sh "COMMAND" [SCHEDULE ...]     (default: ascending descending)
#     bash dev/emu/run_schedules.sh "./dev/emu/test_gpt2cu_fp32_cpu" ascending random:7
# It prints each run's output and ends with one line "N passed, M failed": the runs'
# counts added up, plus one check for the comparison.
set -u
cmd=$1
shift
schedules=("$@")
[ ${#schedules[@]} -gt 0 ] || schedules=(ascending descending)
tmp=$(mktemp -d /tmp/run_schedules.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
for s in "${schedules[@]}"; do
    echo "---- EMU_SCHEDULE=$s: $cmd"
    EMU_SCHEDULE=$s EMU_DIGEST_FILE="$tmp/digest.$s" bash -c "$cmd" 2>&1 | tee "$tmp/out.$s"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out.$s" | tail -1)
    p=0
    f=0
    if [ -n "$line" ]; then
        p=${line%% passed*}
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    fi
    [ "$rc" != 0 ] && [ "$f" = 0 ] && f=1 # (a crash, or no summary line)
    passed=$((passed + p))
    failed=$((failed + f))
done
first=${schedules[0]}
same=1
for s in "${schedules[@]:1}"; do
    if ! cmp -s "$tmp/digest.$first" "$tmp/digest.$s"; then
        same=0
        echo "NOT OK  the device's results differ between EMU_SCHEDULE=$first and EMU_SCHEDULE=$s (program, hash, bytes):"
        diff "$tmp/digest.$first" "$tmp/digest.$s" | head -10
    fi
done
if [ ! -s "$tmp/digest.$first" ]; then
    same=0
    echo "NOT OK  no emulated program reported its results (EMU_DIGEST_FILE): is this an emulated test?"
fi
if [ $same = 1 ]; then
    echo "OK      every result copied from the device is bit-identical under ${schedules[*]} ($(wc -l < "$tmp/digest.$first") processes)"
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ $failed = 0 ]
