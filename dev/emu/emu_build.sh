#!/usr/bin/env bash
# Build a .cu file as a CPU program with the emulator (dev/emu/cuda_emu.h):
#     bash dev/emu/emu_build.sh dev/emu/test_emu.cu /tmp/test_emu_cpu [more g++ arguments, e.g. -lz]
# Kernel launches  k<<<grid, block>>>(args)  become  emu::Launch{grid, block}.run(k, args)
# (also for a template's kernel: k<8><<<...>>>(args)).
set -eu
src=$1
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
# the C++ goes in a folder of its own: #include "x.h" looks next to the including file
# first, so in /tmp itself a stray /tmp/common.h or precision.h would shadow the source's
tmpdir=$(mktemp -d /tmp/emu_XXXXXX)
tmp=$tmpdir/$(basename "$src" .cu).cpp
trap 'rm -rf "$tmpdir"' EXIT
# a test program's  #include "program.cu"  is pasted in first, so that its launches are rewritten too
awk -v dir="$(dirname "$src")" '/^#include "[^"]*\.cu"/ { f = $2; gsub(/"/, "", f); while ((getline line < (dir "/" f)) > 0) print line; next } { print }' "$src" |
    sed -E -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/emu::Launch{\3}.run(\1, /' -e 's/\.run\(([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?), \)/.run(\1)/' > "$tmp"
g++ -std=c++17 -O2 -fopenmp -fcf-protection=none -Wall -Wextra -Wno-unknown-pragmas -I "$here/include" -I "$(dirname "$src")" -x c++ "$tmp" -o "$out" -lm "$@"
