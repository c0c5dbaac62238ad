#!/usr/bin/env bash
# Variant 1 of every kernel ladder must be the kernel its program runs as it is now
# (../shared/STYLE.md section 8), or the ladder measures a kernel the program no
# longer runs: train_gpt2.cu's for most ladders, infer.cu's for gemv.cu.
#
# A ladder declares each of its copies with a marker on the line right above the
# definition, naming whose it is and the program's function (or #define, struct,
# enumerator):
#     // trainer's copy: adamw_kernel          (compared with train_gpt2.cu)
#     __global__ void adamw_kernel1(...) {
#     // infer's copy: gemv_kernel              (compared with infer.cu)
#     template <int N>
#     __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel1(...) {
# For each marker this script takes the definition from the ladder and the one of
# that name from the program (a function through its closing brace, with the
# template <...> line in front of it if it has one; a #define its line; a typedef
# struct through "} NAME;"; an anonymous enum, named by one of its enumerators, its
# braces), renames the ladder's back to the program's name and compares the two with
# runs of whitespace and line breaks made one space: the rename re-aligns the
# continuation lines of a signature, and nothing else may differ. The markers are
# read in every dev/cuda/*.cu that includes precision.h (the ladders of the
# programs' kernels: each must have one at least) and in precision.h itself (the
# trainer's precision helpers). The reductions in common.h are checked by
# check_shared_copies.sh instead. Run from anywhere:
#     bash dev/test/check_ladder_copies.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
# whose copy a marker names, and the file that has the original
program_of() { case $1 in trainer) echo train_gpt2.cu ;; infer) echo infer.cu ;; esac; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# the definition that starts at line $2 of file $1: a #define's one line without its
# comment (which may say why here, where the program's says nothing), or a function,
# struct or enum through the brace that balances its first (braces in // comments
# ignored; for a struct that is its "} NAME;" line)
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

# the line where program $2 defines $1: the first line at column 0 that starts a
# definition (not a call, not a launch: those are indented) and has "$1(" or "#define $1"
# (or the template <...> line right above it); the typedef line of a struct whose
# closing line is "} $1;"; or an enum line that has the word $1
source_line() {
    awk -v name="$1" '
        /^typedef/ { typedef_at = NR }
        /^}[ \t]*/ && $0 ~ ("^}[ \t]*" name "[ \t]*;") && typedef_at { print typedef_at; exit }
        /^enum/ && $0 ~ ("[^A-Za-z0-9_]" name "([^A-Za-z0-9_]|$)") { print NR; exit }
        /^(__global__|__device__|__host__|static|inline|#define)/ &&
        ($0 ~ ("^#define " name "([^A-Za-z0-9_]|$)") || $0 ~ ("[^A-Za-z0-9_]" name "[ \t]*\\(")) {
            print (prev ~ /^template[ \t]*</ ? NR - 1 : NR); exit
        }
        { prev = $0 }
    ' "$2"
}

# the name a definition (stdin) gives: after #define; the last word of a typedef's
# "} NAME;"; an enum's first enumerator; else the word before the first "(" that is not
# __launch_bounds__'s, after a template <...> line if one comes first; none for a blank
# or comment line
defined_name() {
    awk 'NR == 1 && /^template[ \t]*</ { next }
        first == "" {
            first = $0
            if ($0 ~ /^[ \t]*(\/\/|\/\*|$)/) exit
            if ($1 == "#define") { print $2; exit }
            if ($0 ~ /^enum/) { line = $0; sub(/^[^{]*\{[ \t]*/, "", line); match(line, /^[A-Za-z_][A-Za-z0-9_]*/); print substr(line, 1, RLENGTH); exit }
            if ($0 ~ /^typedef/) { typedef = 1; next }
            line = $0; gsub(/__launch_bounds__[ \t]*\([^)]*\)/, "", line)
            if (match(line, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
                name = substr(line, RSTART, RLENGTH - 1); sub(/[ \t]+$/, "", name); print name
            }
            exit
        }
        { last = $0 }
        END { if (typedef && match(last, /[A-Za-z_][A-Za-z0-9_]*[ \t]*;/)) { name = substr(last, RSTART, RLENGTH - 1); sub(/[ \t;]+$/, "", name); print name } }'
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
    # "LINE WHOSE NAME" for each marker: the definition starts on the next line
    markers=$(awk '/^\/\/ (trainer|infer).s copy: / { who = $2; sub(/.s$/, "", who); print NR + 1, who, $4 }' "$f")
    if [ -z "$markers" ] && [ "$f" != dev/cuda/precision.h ]; then
        echo "NOT OK  $f has no \"// trainer's copy: NAME\" (or infer's) marker: which of its kernels is the program's?"
        failed=$((failed + 1))
        continue
    fi
    while read -r line who name; do
        [ -n "$line" ] || continue
        program=$(program_of "$who")
        what="$f: $name"
        extract_at "$f" "$line" > "$tmp/ladder"
        lname=$(defined_name < "$tmp/ladder")
        if [ -z "$lname" ]; then
            echo "NOT OK  $what: the marker is not right above a definition"
            failed=$((failed + 1))
            continue
        fi
        [ "$lname" = "$name" ] || what="$f: $lname = $name"
        pline=$(source_line "$name" "$program")
        if [ -z "$pline" ]; then
            echo "NOT OK  $what: $program has no $name (renamed or removed there? update the ladder)"
            failed=$((failed + 1))
            continue
        fi
        extract_at "$program" "$pline" > "$tmp/program"
        rename "$lname" "$name" < "$tmp/ladder" > "$tmp/renamed"
        if [ "$(normalise < "$tmp/program")" = "$(normalise < "$tmp/renamed")" ]; then
            echo "OK      $what, as in $program"
            passed=$((passed + 1))
        else
            echo "NOT OK  $what differs from $program's (< $program:$pline, > the ladder, renamed):"
            diff "$tmp/program" "$tmp/renamed" | head -10
            failed=$((failed + 1))
        fi
    done <<< "$markers"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
