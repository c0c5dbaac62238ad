#!/usr/bin/env bash
# Runs every test command given as an argument, shows its output, and ends with
# one summary line over all of them: "N passed, M failed", where N and M add up
# the "N passed, M failed" lines the tests themselves print. A command that exits
# non-zero, or prints no summary line, counts as one more failure.
#     bash dev/test/run_tests.sh ./test_gpt2 "bash dev/test/check_copies.sh"
set -u
total_passed=0
total_failed=0
failed_cmds=()
for cmd in "$@"; do
    echo "==== $cmd"
    start=$(date +%s)
    out=$(mktemp)
    bash -c "$cmd" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    rm -f "$out"
    echo "==== ($(($(date +%s) - start)) s)"
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
        total_passed=$((total_passed + p))
        total_failed=$((total_failed + f))
    fi
    if [ "$rc" != 0 ] || [ -z "$line" ]; then
        failed_cmds+=("$cmd (exit $rc${line:+, $line})")
        if [ -z "$line" ] || [ "$f" = 0 ]; then total_failed=$((total_failed + 1)); fi
    fi
done
echo
echo "==== summary"
for c in "${failed_cmds[@]+"${failed_cmds[@]}"}"; do echo "FAILED: $c"; done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" = 0 ]
