#!/usr/bin/env bash
# lib/'s rules (lib/README.md, ../shared/STYLE.md section 1), checked:
#  - each header compiles alone, as C (the .c programs) and as C++ (the .cu programs, which
#    nvcc and the emulator compile as C++), warnings as errors: it includes what it uses;
#  - every function in it is static inline (a program that uses part of it still builds
#    with warnings as errors; and nothing in lib/ can clash at link time);
#  - no kernels: no __global__, __device__ or __shared__, no <<< >>> launches (kernels are the
#    .cu chapters' lesson, and the emulator must see them in the programs' own text);
#  - leaf libraries: a header includes only system headers and other lib/ headers.
#     bash dev/test/check_lib.sh          (ends with "N passed, M failed")
set -u
cd "$(dirname "$0")/../.." || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }
# the CUDA headers cuda_utils.h needs: the emulator's stand-ins (no toolkit needed)
EMU_INC=dev/emu/include
for h in lib/*.h; do
    name=$(basename "$h")
    printf '#define _XOPEN_SOURCE 700\n#define PROGRAM "./check_lib"\n#include "%s/%s"\nint main(void) { return 0; }\n' "$(pwd)/lib" "$name" > "$TMP/one.c"
    cp "$TMP/one.c" "$TMP/one.cpp"
    if [ "$name" = cuda_utils.h ]; then
        # CUDA host code: C++ only, with the emulator's runtime, cuBLAS and NVTX stand-ins
        if g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -fopenmp -I "$EMU_INC" "$TMP/one.cpp" 2> "$TMP/err"; then
            ok "$h compiles alone as C++ (with the emulator's CUDA headers)"
        else not_ok "$h does not compile alone as C++: $(grep -m1 error "$TMP/err")"; fi
    elif [ "$name" = gemm.h ]; then
        # the CPU programs' GEMM: C only (C11's _Thread_local buffers); no .cu includes it
        if gcc -std=c11 -fsyntax-only -Wall -Wextra -Werror -fopenmp "$TMP/one.c" 2> "$TMP/err"; then ok "$h compiles alone as C11 (a C-only header)"
        else not_ok "$h does not compile alone as C11: $(grep -m1 error "$TMP/err")"; fi
        if grep -lE '#include "(\.\./)*lib/gemm\.h"' ./*.cu > /dev/null 2>&1; then not_ok "$h is C only, but a .cu includes it"; else ok "$h: no .cu includes it"; fi
    else
        if gcc -std=c11 -fsyntax-only -Wall -Wextra -Werror -fopenmp "$TMP/one.c" 2> "$TMP/err"; then ok "$h compiles alone as C11"
        else not_ok "$h does not compile alone as C11: $(grep -m1 error "$TMP/err")"; fi
        if g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -fopenmp "$TMP/one.cpp" 2> "$TMP/err"; then ok "$h compiles alone as C++17"
        else not_ok "$h does not compile alone as C++17: $(grep -m1 error "$TMP/err")"; fi
    fi
    # function definitions and prototypes at the top level that are not static inline
    bad=$(grep -nE '^(__attribute__\(\([a-z_, ]+\)\) )?[A-Za-z_][A-Za-z0-9_ *]*[ *][A-Za-z_][A-Za-z0-9_]*\(' "$h" |
          grep -vE ':(__attribute__\(\([a-z_, ]+\)\) )?static inline |:#|:typedef |:return ' | head -3)
    if [ -z "$bad" ]; then ok "$h: every function static inline"; else not_ok "$h: not static inline: $bad"; fi
    kernels=$(grep -nE '__global__|__device__|__shared__|<<<' "$h" | grep -vE ':[0-9]+:[ \t]*//' | head -3)
    if [ -z "$kernels" ]; then ok "$h: no kernels, no device code"; else not_ok "$h holds device code: $kernels"; fi
    ours=$(grep -nE '^[ \t]*#[ \t]*include[ \t]*"' "$h" | grep -vE '"(utils|rand|phases|gemm|json|safetensors|tokenizer|unicode_tables|cuda_utils)\.h"' | head -3)
    if [ -z "$ours" ]; then ok "$h: includes system headers and lib/'s only"; else not_ok "$h includes a file outside lib/: $ours"; fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
