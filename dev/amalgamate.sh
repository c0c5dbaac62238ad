#!/usr/bin/env bash
# One file when wanted: writes a root program as a single standalone source, the lib/
# headers it includes pasted in place (each once, with a banner naming it), as SQLite ships
# its amalgamation. The result compiles alone, with the same flags as the program:
#     bash dev/amalgamate.sh infer.c build/amalgamated/infer.c
#     cc -O3 -march=native -fopenmp build/amalgamated/infer.c -lm -o infer_one_file
#     bash dev/amalgamate.sh train_gpt2.cu -          (to standard output)
# make amalgamated writes every program's into build/amalgamated/; make test builds each of
# those and runs it once (dev/test/test_amalgamation.sh).
set -eu
if [ $# != 2 ]; then
    echo "usage: bash dev/amalgamate.sh PROGRAM.c|PROGRAM.cu OUT (- for standard output)" >&2
    exit 2
fi
src=$1
out=$2
if [ ! -f "$src" ]; then
    echo "Error: dev/amalgamate.sh: $src: no such file" >&2
    exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
if [ "$out" = - ]; then
    awk -v src="$src" -v banners=1 -f "$here/paste_includes.awk"
    exit 0
fi
mkdir -p "$(dirname "$out")"
# written beside, then renamed: an old amalgamation is never left half-overwritten
awk -v src="$src" -v banners=1 -f "$here/paste_includes.awk" > "$out.tmp" || { rm -f "$out.tmp"; exit 1; }
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -l < "$out") lines, from $src and $(grep -c '^// ==== .* (pasted in by dev/amalgamate.sh)' "$out") headers)"
