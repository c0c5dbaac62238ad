#!/usr/bin/env bash
# Runs every test command given as an argument, shows its output, and ends with
# one summary line over all of them: "N passed, M failed", where N and M add up
# the "N passed, M failed" lines the tests themselves print. A command that exits
# non-zero, or prints no summary line, counts as one more failure.
#     bash dev/test/run_tests.sh ./test_gpt2 "bash dev/test/check_copies.sh"
#     bash dev/test/run_tests.sh -j 2 ...   # two commands at a time
# With -j N, N commands run at once, started in the order given (make test puts the
# longest first); each one's output is shown whole when it ends, in the order they
# finish (after a line when it starts). Each test writes only into a scratch folder of its
# own (mktemp) and reads what make built (check_cuda_builds.sh's `make -B` rebuilds only
# nvcc's binaries, which no other test runs), so they do not disturb each other. (Most of
# make test's time is emulated GPU programs, one thread each: two at a time keep a
# 2-core machine busy.)
set -u
at_once=1
if [ "${1:-}" = -j ]; then
    at_once=${2:-}
    shift
    [ $# -gt 0 ] && shift
fi
case $at_once in '' | *[!0-9]* | 0) echo "Error: run_tests.sh: -j takes a number of commands at a time, not '$at_once'" >&2; exit 2 ;; esac
total_passed=0
total_failed=0
failed_cmds=()
work=$(mktemp -d /tmp/run_tests.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Interrupted (Ctrl-C, or CI cancelling): the commands still running go too. They run in the
# background, where bash has them ignore SIGINT, so they are sent SIGTERM: the whole process
# group (ours: make's, when make test started us), which ends this script as well.
trap 'trap - INT TERM; echo "run_tests.sh: interrupted" >&2; kill -TERM 0' INT TERM

# one command into $work/K.out (its output), $work/K.rc (its exit status), $work/K.s (its seconds)
run_one() {
    local k=$1 cmd=$2 start
    start=$(date +%s)
    bash -c "$cmd" > "$work/$k.out" 2>&1
    echo $? > "$work/$k.rc.tmp"
    echo $(($(date +%s) - start)) > "$work/$k.s"
    mv "$work/$k.rc.tmp" "$work/$k.rc" # (last: its presence says the command ended)
}

# what one ended command showed and how it ended, added to the totals
report() {
    local k=$1 cmd=$2 rc line p f
    echo "==== $cmd"
    cat "$work/$k.out"
    echo "==== ($(cat "$work/$k.s") s)"
    rc=$(cat "$work/$k.rc")
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$work/$k.out" | tail -1)
    f=0
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
}

cmds=("$@")
declare -A running=() # k -> its background job's pid
next=0
while [ $next -lt ${#cmds[@]} ] || [ ${#running[@]} -gt 0 ]; do
    while [ $next -lt ${#cmds[@]} ] && [ ${#running[@]} -lt "$at_once" ]; do
        [ "$at_once" -gt 1 ] && echo "---- started: ${cmds[$next]}" # (which ones were running, should the log end early)
        run_one $next "${cmds[$next]}" &
        running[$next]=$!
        next=$((next + 1))
    done
    ended=0
    while [ $ended = 0 ]; do # (polled: wait -n can miss a job that ended before it was called)
        for k in "${!running[@]}"; do
            if [ ! -f "$work/$k.rc" ] && ! kill -0 "${running[$k]}" 2> /dev/null && [ ! -f "$work/$k.rc" ]; then
                echo 255 > "$work/$k.rc" # (its runner is gone without a word: killed from outside)
                [ -f "$work/$k.s" ] || echo 0 > "$work/$k.s"
            fi
            [ -f "$work/$k.rc" ] && ended=1
        done
        [ $ended = 1 ] || sleep 0.5
    done
    for k in "${!running[@]}"; do
        if [ -f "$work/$k.rc" ]; then
            wait "${running[$k]}" 2> /dev/null
            unset "running[$k]"
            report "$k" "${cmds[$k]}"
        fi
    done
done
echo
echo "==== summary"
for c in "${failed_cmds[@]+"${failed_cmds[@]}"}"; do echo "FAILED: $c"; done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" = 0 ]
