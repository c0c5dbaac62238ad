#!/usr/bin/env bash
# Variant 1 of every kernel ladder must be train_gpt2.cu's kernel as it is now
# (../shared/STYLE.md section 8), or the ladder measures a kernel the trainer no
# longer runs.
#
# A ladder declares each of its copies with a marker on the line right above the
# definition, naming the trainer's function (or #define):
#     // trainer's copy: adamw_kernel
#     __global__ void adamw_kernel1(...) {
# For each marker this script takes the definition from the ladder and the one of
# that name from train_gpt2.cu (a function through its closing brace, a #define its
# line), renames the ladder's back to the trainer's name and compares the two with
# runs of whitespace and line breaks made one space: the rename re-aligns the
# continuation lines of a signature, and nothing else may differ. The markers are
# read in every dev/cuda/*.cu that includes precision.h (the ladders of the
# trainer's kernels: each must have one at least) and in precision.h itself (the
# trainer's precision helpers). The reductions in common.h are checked by
# check_shared_copies.sh instead. Run from anywhere:
#     bash dev/test/check_ladder_copies.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
trainer=train_gpt2.cu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# the definition that starts at line $2 of file $1: a #define's one line without its
# comment (which may say why here, where the trainer's says nothing), or a function
# through the brace that balances its first (braces in // comments ignored)
extract_at() {
    awk -v start="$2" '
        NR < start { next }
        NR == start && /^#define/ { sub(/[ \t]*\/\/.*/, ""); print; exit }
        { print }
        {
            line = $0; sub(/\/\/.*/, "", line)
            o = gsub(/\{/, "", line); c = gsub(/\}/, "", line)
            opened += o; depth += o - c
            if (opened > 0 && depth <= 0) exit
        }' "$1"
}

# the line where train_gpt2.cu defines $1: the first line at column 0 that starts a
# definition (not a call, not a launch: those are indented) and has "$1(" or "#define $1"
trainer_line() {
    awk -v name="$1" '
        /^(__global__|__device__|__host__|static|inline|#define)/ &&
        ($0 ~ ("^#define " name "([^A-Za-z0-9_]|$)") || $0 ~ ("[^A-Za-z0-9_]" name "[ \t]*\\(")) { print NR; exit }
    ' "$trainer"
}

# the name a definition's first line (stdin) gives: after #define, or before the first
# "(" that is not __launch_bounds__'s; none for a blank or comment line
defined_name() {
    awk 'NR == 1 {
        if ($0 ~ /^[ \t]*(\/\/|\/\*|$)/) exit
        if ($1 == "#define") { print $2; exit }
        line = $0; gsub(/__launch_bounds__[ \t]*\([^)]*\)/, "", line)
        if (match(line, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
            name = substr(line, RSTART, RLENGTH - 1); sub(/[ \t]+$/, "", name); print name
        }
        exit }'
}

# stdin with every whole word $1 replaced by $2 (awk, no GNU sed \b needed)
rename() {
    awk -v from="$1" -v to="$2" '{
        out = ""; rest = $0
        while ((k = index(rest, from)) > 0) {
            before = k > 1 ? substr(rest, k - 1, 1) : ""; after = substr(rest, k + length(from), 1)
            if (before !~ /[A-Za-z0-9_]/ && after !~ /[A-Za-z0-9_]/) { out = out substr(rest, 1, k - 1) to }
            else { out = out substr(rest, 1, k - 1 + length(from)) }
            rest = substr(rest, k + length(from))
        }
        print out rest }'
}

# one line: whitespace runs, line breaks included, made one space, and none just
# inside parentheses (where a rewrapped signature may break a line)
normalise() { tr '\t\n' '  ' | tr -s ' ' | sed 's/( /(/g; s/ )/)/g; s/^ //; s/ $//'; }

ladders=$(grep -l '^#include "precision.h"' dev/cuda/*.cu)
for f in $ladders dev/cuda/precision.h; do
    # "LINE NAME" for each marker: the definition starts on the next line
    markers=$(awk '/^\/\/ trainer.s copy: / { print NR + 1, $4 }' "$f")
    if [ -z "$markers" ] && [ "$f" != dev/cuda/precision.h ]; then
        echo "NOT OK  $f has no \"// trainer's copy: NAME\" marker: which of its kernels is the trainer's?"
        failed=$((failed + 1))
        continue
    fi
    while read -r line name; do
        [ -n "$line" ] || continue
        what="$f: $name"
        extract_at "$f" "$line" > "$tmp/ladder"
        lname=$(defined_name < "$tmp/ladder")
        if [ -z "$lname" ]; then
            echo "NOT OK  $what: the marker is not right above a definition"
            failed=$((failed + 1))
            continue
        fi
        [ "$lname" = "$name" ] || what="$f: $lname = $name"
        tline=$(trainer_line "$name")
        if [ -z "$tline" ]; then
            echo "NOT OK  $what: $trainer has no $name (renamed or removed there? update the ladder)"
            failed=$((failed + 1))
            continue
        fi
        extract_at "$trainer" "$tline" > "$tmp/trainer"
        rename "$lname" "$name" < "$tmp/ladder" > "$tmp/renamed"
        if [ "$(normalise < "$tmp/trainer")" = "$(normalise < "$tmp/renamed")" ]; then
            echo "OK      $what, as in $trainer"
            passed=$((passed + 1))
        else
            echo "NOT OK  $what differs from $trainer's (< $trainer:$tline, > the ladder, renamed):"
            diff "$tmp/trainer" "$tmp/renamed" | head -10
            failed=$((failed + 1))
        fi
    done <<< "$markers"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
