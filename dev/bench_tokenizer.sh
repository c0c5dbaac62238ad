#!/usr/bin/env bash
# Measures the encoding speed of the tokenizer program (data/tokenizer.c) on one core.
# Inputs: Tiny Shakespeare (1.1 MB of English) and the UTF-8 stress text of the tokenizer
# fixtures repeated to about 1 MB (many scripts, emoji, odd white space). The seconds are the
# program's own timing of encoding alone (not loading the vocabulary, not writing), best of
# 3 runs; each run starts with an empty piece cache, as a real run does.
#
# Run from the repository root, after building the program:
#   gcc -O3 -march=native -Wall -Wextra -Werror -std=c11 data/tokenizer.c -o data/tokenizer
#   bash dev/bench_tokenizer.sh ./data/tokenizer
set -eu

BIN=${1:-./data/tokenizer}
[ -x "$BIN" ] || { echo "Error: $BIN is not an executable; build it first (see the top of this script)"; exit 1; }
TMP=$(mktemp -d /tmp/bench_tokenizer.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# the stress text 512 times over: about 2 KB x 512 = about 1 MB
STRESS="$TMP/utf8_stress_x512.txt"
for _ in $(seq 512); do cat dev/reference/fixtures/utf8_stress.txt; done > "$STRESS"

# one core: pin to CPU 0 where taskset exists (the program is single-threaded anyway)
PIN=""
command -v taskset > /dev/null && PIN="taskset -c 0"

printf '%-34s %10s %10s %9s %8s\n' input bytes tokens seconds MB/s
for input in data/tinyshakespeare/input.txt "$STRESS"; do
    best=""
    for _ in 1 2 3; do
        # the program prints: encoded PATH: BYTES bytes -> TOKENS tokens in SECONDS s (... MB/s)
        line=$($PIN "$BIN" -e -i "$input" -o "$TMP/out.bin" -t "" | grep '^encoded ')
        bytes=$(echo "$line" | sed -E 's/.*: ([0-9]+) bytes.*/\1/')
        tokens=$(echo "$line" | sed -E 's/.*-> ([0-9]+) tokens.*/\1/')
        seconds=$(echo "$line" | sed -E 's/.* in ([0-9.]+) s.*/\1/')
        if [ -z "$best" ] || awk "BEGIN { exit !($seconds < $best) }"; then best=$seconds; fi
    done
    mbps=$(awk "BEGIN { printf \"%.1f\", $bytes / 1e6 / ($best > 0 ? $best : 1e-9) }")
    printf '%-34s %10d %10d %9.4f %8s\n' "$(basename "$input")" "$bytes" "$tokens" "$best" "$mbps"
done
