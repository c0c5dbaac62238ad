#!/usr/bin/env bash
# Shared copies must not drift apart (../shared/STYLE.md section 1).
#
# Code that several standalone programs need (the check macros, the tokenizer,
# the checkpoint reader) is copied verbatim between marker lines
#     // --- begin shared-copy: NAME ---
#     // --- end shared-copy: NAME ---
# This script finds every such block in the project's C and CUDA sources and
# checks that all copies of a block are byte-identical. It also fails on an
# unbalanced marker and on a block found in one file only (a mistyped name). Run from the repository root: bash dev/test/check_shared_copies.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
files=$(ls *.c *.cu data/*.c data/*.h dev/cuda/*.h dev/cuda/*.cu 2>/dev/null) # (dev/cuda: the ladders' copies of the trainer's reductions, its cuDNN attention)
# extract each block of each file into $tmp/NAME/<file-with-slashes-replaced>
for f in $files; do
    awk -v out="$tmp" -v src="$f" '
        /\/\/ --- begin shared-copy: / {
            if (name != "") { print "unbalanced: " src ": begin of " $5 " inside " name > "/dev/stderr"; bad = 1 }
            name = $5; gsub(/[^A-Za-z0-9_-]/, "", name)
            key = src; sub(/^\.\//, "", key); gsub(/\//, "%", key)
            system("mkdir -p " out "/" name); file = out "/" name "/" key; printf "" > file; next
        }
        /\/\/ --- end shared-copy: / { close(file); name = ""; next }
        name != "" { print >> file }
        END { if (name != "") { print "unbalanced: " src ": no end for " name > "/dev/stderr"; exit 1 } if (bad) exit 1 }
    ' "$f" || { echo "NOT OK  $f has unbalanced shared-copy markers"; failed=$((failed + 1)); }
done
for dir in "$tmp"/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    copies=$(ls "$dir" | wc -l)
    first=$(ls "$dir" | head -1)
    ok=1
    for c in $(ls "$dir"); do
        if ! cmp -s "$dir/$first" "$dir/$c"; then
            ok=0
            echo "NOT OK  shared-copy '$name': $(echo "$c" | tr '%' '/') differs from $(echo "$first" | tr '%' '/'):"
            diff "$dir/$first" "$dir/$c" | head -10
        fi
    done
    if [ "$copies" -lt 2 ]; then
        # one copy means a marker name was mistyped somewhere, or a copy was lost
        ok=0
        echo "NOT OK  shared-copy '$name' appears only in $(echo "$first" | tr '%' '/'): a shared copy needs two or more"
    fi
    if [ $ok = 1 ]; then
        echo "OK      shared-copy '$name': $copies identical copies"
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
