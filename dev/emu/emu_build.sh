#!/usr/bin/env bash
# Build a .cu file as a CPU program with the emulator (dev/emu/cuda_emu.h):
#     bash dev/emu/emu_build.sh [-m plain|asan|race] dev/emu/test_emu.cu /tmp/test_emu_cpu [more g++ arguments, e.g. -lz]
# The builds (cuda_emu.h's header says what each checks):
#   plain  the kernels as they are (the default)
#   asan   AddressSanitizer and UBSan over everything; each cudaMalloc exactly its size
#   race   the emulator's race detector: GCC's ThreadSanitizer instrumentation calls
#          cuda_emu.h's own checks on every load and store (libtsan is not linked)
# The source is rewritten first (C++ has no <<< >>>):
#   k<<<grid, block[, shared, stream]>>>(args)  ->  emu::Launch{grid, block[, ...]}.named("k").run(k, args)
#   (also for a template's kernel: k<8><<<...>>>(args));
#   __launch_bounds__(N[, M])  ->  a check at the top of the kernel's body;
#   extern __shared__ T name[];  ->  T *name = (T *)emu::dynamic_shared();
#   __shared__ T a[...], b;  ->  static T (&a)[...] = a block of its own, made when it first runs; the same for b
#   (emu::shared_alloc: poisoned at each block's start, and checked by the asan and race builds).
set -euo pipefail # (a failed paste, early in the pipeline below, must fail the build)
mode=plain
if [ "${1:-}" = -m ]; then
    mode=$2
    shift 2
fi
case $mode in plain | asan | race) ;; *) echo "Error: emu_build.sh: -m $mode is none of plain, asan, race" >&2; exit 1 ;; esac
src=$1
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
# the C++ goes in a folder of its own: #include "x.h" looks next to the including file
# first, so in /tmp itself a stray /tmp/common.h or precision.h would shadow the source's
tmpdir=$(mktemp -d /tmp/emu_XXXXXX)
tmp=$tmpdir/$(basename "$src" .cu).cpp
trap 'rm -rf "$tmpdir"' EXIT
# Every #include "..." of a file of ours (a test's program.cu, the programs' lib/*.h, the
# ladders' common.h) is pasted in first, recursively and each file once, so that the
# launches and __shared__ declarations in it are rewritten too and none escapes the race
# detector and the poisoned shared memory (dev/paste_includes.awk says how)
awk -v src="$src" -v lines=1 -f "$here/../paste_includes.awk" |
    awk '
    # __launch_bounds__(N[, M]): gone from the declaration, checked where the body opens
    function insert_check(s, from,    i) {
        i = index(substr(s, from), "{")
        if (i == 0) return s
        i += from - 1
        done = 1
        return substr(s, 1, i) " emu::check_launch_bounds(" bound ", __func__);" substr(s, i + 1)
    }
    {
        line = $0
        done = 0
        if (bound != "") {
            line = insert_check(line, 1)
            if (done) bound = ""
            else if (index(line, ";") > 0) bound = "" # (a prototype: its body is elsewhere)
        }
        j = index(line, "__launch_bounds__(")
        c = index(line, "//")
        if (j > 0 && (c == 0 || c > j) && line !~ /^[ \t]*#/) {
            k = j + length("__launch_bounds__(")
            depth = 1; arg = ""; first = ""
            while (k <= length(line)) {
                ch = substr(line, k, 1)
                if (ch == "(") depth++
                if (ch == ")") { depth--; if (depth == 0) break }
                if (ch == "," && depth == 1 && first == "") first = arg
                arg = arg ch
                k++
            }
            bound = first != "" ? first : arg
            line = substr(line, 1, j - 1) substr(line, k + 1)
            line = insert_check(line, j)
            if (done) bound = ""
        }
        print line
    }' |
    sed -E -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/emu::Launch{\3}.named("\1").run(\1, /' \
        -e 's/\.run\(([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?), \)/.run(\1)/' \
        -e 's/^([ \t]*)extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_: ]*[A-Za-z0-9_]) ([A-Za-z_][A-Za-z0-9_]*)\[\];/\1\3 *\4 = (\3 *)emu::dynamic_shared();/' \
        -e ':split' -e 's/__shared__ ((__align__\([0-9]+\) )?[^,;=\[(){}]*[^ ,;=\[(){}]) +([A-Za-z_][A-Za-z0-9_]*(\[[^];]*\])*), *([A-Za-z_])/__shared__ \1 \3; __shared__ \1 \5/' -e 'tsplit' \
        -e 's/__shared__ (__align__\([0-9]+\) )?([^,;=\[(){}]*[^ ,;=\[(){}]) +([A-Za-z_][A-Za-z0-9_]*)((\[[^];]*\])+);/static \2 (\&\3)\4 = *reinterpret_cast<\2 (*)\4>(emu::shared_alloc(sizeof(\2\4), "\3"));/g' \
        -e 's/__shared__ (__align__\([0-9]+\) )?([^,;=\[(){}]*[^ ,;=\[(){}]) +([A-Za-z_][A-Za-z0-9_]*);/static \2 \&\3 = *reinterpret_cast<\2 *>(emu::shared_alloc(sizeof(\2), "\3"));/g' > "$tmp"
# a __shared__ declaration the rewrite did not understand would stay a plain static (shared by
# every block, never poisoned or checked): refuse it, with its line
if left=$(grep -nE '(^|[;{])[ \t]*__shared__[ \t]' "$tmp" | head -3) && [ -n "$left" ]; then
    echo "Error: emu_build.sh: $src: a __shared__ declaration it cannot rewrite (one declaration a statement, on one line, please):" >&2
    echo "$left" >&2
    exit 1
fi
# ... and so would a kernel launch it did not turn into emu::Launch (C++ would not compile
# it, but say why): a <<< outside comments, strings and character literals
if left=$(awk '{
        line = $0; code = ""
        if (!in_comment) { gsub(/"([^"\\]|\\.)*"/, "\"\"", line); gsub(/\047([^\047\\]|\\.)*\047/, "0", line) } # (strings and characters)
        while (line != "") {
            if (in_comment) { i = index(line, "*/"); if (i == 0) { line = "" } else { line = substr(line, i + 2); in_comment = 0 } continue }
            i = index(line, "/*"); j = index(line, "//")
            if (j > 0 && (i == 0 || j < i)) { code = code substr(line, 1, j - 1); line = "" }
            else if (i > 0) { code = code substr(line, 1, i - 1); line = substr(line, i + 2); in_comment = 1 }
            else { code = code line; line = "" }
        }
        if (index(code, "<<<") > 0) print NR ": " $0
    }' "$tmp" | head -3) && [ -n "$left" ]; then
    echo "Error: emu_build.sh: $src: a kernel launch it cannot rewrite (name<<<grid, block[, shared, stream]>>>(args), on one line, please):" >&2
    echo "$left" >&2
    exit 1
fi
common=(-std=c++17 -fopenmp -fcf-protection=none -Wall -Wextra -Wno-unknown-pragmas -I "$here/include" -I "$(dirname "$src")")
case $mode in
plain) g++ "${common[@]}" -O2 -x c++ "$tmp" -o "$out" -lm "$@" ;;
asan)
    # (-fno-sanitize=vptr: the stand-ins' handles are plain structs; float-cast-overflow
    # is UBSan's default off already)
    g++ "${common[@]}" -O2 -gdwarf-4 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -fno-sanitize=vptr -x c++ "$tmp" -o "$out" -lm "$@" ;;
race)
    # compiled with the instrumentation, linked without ThreadSanitizer's runtime: its
    # callbacks are cuda_emu.h's (-g: the reports name the kernel's source line)
    compile_args=()
    for a in "$@"; do case $a in -l* | -L* | -Wl,*) ;; *) compile_args+=("$a") ;; esac; done
    g++ "${common[@]}" -O2 -gdwarf-4 -DEMU_RACECHECK -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 \
        -c -x c++ "$tmp" -o "$tmpdir/program.o" "${compile_args[@]+"${compile_args[@]}"}"
    g++ -fopenmp "$tmpdir/program.o" -o "$out" -lm -ldl "$@" ;;
esac
