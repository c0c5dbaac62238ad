#!/usr/bin/env bash
# dev/test/check_copies.sh can fail: on a small tree of made-up files (three files sharing
# a block nested in another, a program and a ladder that holds two of its definitions) we
# plant one fault at a time and check that the checker exits non-zero and says what is
# wrong, and that the unchanged tree passes. Ends with "N passed, M failed".
#     bash dev/test/test_check_copies.sh
set -u
checker="$(cd "$(dirname "$0")" && pwd)/check_copies.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# the tree every case starts from: 'outer' in a.c and b.c, 'inner' inside it there and
# alone in c.c; prog.cu's scale_kernel and WIDTH copied into the ladder dev/cuda/scale.cu,
# the kernel renamed and its signature rewrapped (which the comparison must forgive)
make_tree() {
    mkdir -p "$1/dev/cuda"
    cat > "$1/a.c" <<'EOF'
int a_only;
// --- begin shared-copy: outer ---
int x;
// --- begin shared-copy: inner ---
int y;
// --- end shared-copy: inner ---
int z;
// --- end shared-copy: outer ---
EOF
    { echo "int b_only, more;"; echo; sed 1d "$1/a.c"; echo "int b_after;"; } > "$1/b.c"
    printf '%s\n' "int c_only;" "// --- begin shared-copy: inner ---" "int y;" "// --- end shared-copy: inner ---" > "$1/c.c"
    cat > "$1/prog.cu" <<'EOF'
#define WIDTH 8
__global__ void scale_kernel(float *out, const float *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = 2.0f * inp[i]; } // {braces in a comment}
}
EOF
    cat > "$1/dev/cuda/scale.cu" <<'EOF'
#include "precision.h"
// --- shared-copy of prog.cu: WIDTH ---
#define WIDTH 8 // a comment the program's line does not have
// --- shared-copy of prog.cu: scale_kernel (as scale_kernel1) ---
__global__ void scale_kernel1(float *out, const float *inp,
                              int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = 2.0f * inp[i]; } // {braces in a comment}
}
EOF
}

# case DESCRIPTION EXPECTED_EXIT PATTERN COMMAND: COMMAND changes a fresh tree (run inside
# it), then the checker must exit with EXPECTED_EXIT and print a line holding PATTERN
n=0
case_() {
    local what=$1 want=$2 pattern=$3 change=$4 dir
    n=$((n + 1)); dir="$tmp/$n"
    make_tree "$dir"
    (cd "$dir" && eval "$change") || { echo "NOT OK  $what: the change failed"; failed=$((failed + 1)); return; }
    bash "$checker" --root "$dir" > "$dir.out" 2>&1
    local rc=$?
    if [ "$rc" = "$want" ] && grep -qF -- "$pattern" "$dir.out"; then
        echo "OK      $what"
        passed=$((passed + 1))
    else
        echo "NOT OK  $what: exit $rc (want $want), want a line with \"$pattern\"; the checker said:"
        sed 's/^/    /' "$dir.out"
        failed=$((failed + 1))
    fi
}

case_ "the unchanged tree passes" 0 "4 passed, 0 failed" ":"
case_ "a nested block is counted in every file" 0 "shared-copy 'inner': 3 identical copies (home a.c)" ":"
case_ "a rewrapped, renamed ladder copy passes" 0 "OK      shared-copy of prog.cu: scale_kernel (as scale_kernel1) in dev/cuda/scale.cu:4" ":"
case_ "a difference in a nested block" 1 "NOT OK  shared-copy 'inner': c.c differs from the home copy in a.c (3 copies)" \
    "sed -i 's/^int y;/int y = 1;/' c.c"
case_ "a difference in the outer block only" 1 "NOT OK  shared-copy 'outer': b.c differs from the home copy in a.c (2 copies)" \
    "sed -i 's/^int z;/int z = 2;/' b.c"
case_ "the home copy changed, the others not yet" 1 "NOT OK  shared-copy 'inner': b.c, c.c differ from the home copy in a.c" \
    "sed -i 's/^int y;/int y = 3;/' a.c"
case_ "a nested block's markers belong to the outer block" 1 "NOT OK  shared-copy 'outer': b.c differs" \
    "sed -i '/shared-copy: inner/d' b.c"
case_ "crossing markers" 1 "a.c:6: end of outer crosses block inner" \
    "sed -i -e 's/end shared-copy: inner/END_INNER/' -e 's/end shared-copy: outer/end shared-copy: inner/' -e 's/END_INNER/end shared-copy: outer/' a.c"
case_ "a begin without its end" 1 "b.c:3: begin of outer has no end" \
    "sed -i '/end shared-copy: outer/d' b.c"
case_ "a broken block does not stop the others from being compared" 1 "OK      shared-copy 'inner': 3 identical copies" \
    "sed -i '/end shared-copy: outer/d' b.c"
case_ "an end without its begin" 1 "c.c:5: end of stray without its begin" \
    "echo '// --- end shared-copy: stray ---' >> c.c"
case_ "a block in one file only" 1 "NOT OK  shared-copy 'solo' is only in c.c" \
    "printf '%s\n' '// --- begin shared-copy: solo ---' '// --- end shared-copy: solo ---' >> c.c"
case_ "a block twice in one file" 1 "c.c:5: a second block inner in this file" \
    "printf '%s\n' '// --- begin shared-copy: inner ---' 'int y;' '// --- end shared-copy: inner ---' >> c.c"
case_ "a block inside itself" 1 "c.c:3: begin of inner inside inner" \
    "sed -i '2a // --- begin shared-copy: inner ---' c.c"
case_ "a malformed marker" 1 "c.c:5: not a marker this checker knows" \
    "echo '// --- begin shared-copy: solo' >> c.c"
case_ "an old-style ladder marker" 1 "scale.cu:2: not a marker this checker knows" \
    "sed -i \"s|^// --- shared-copy of prog.cu: WIDTH ---|// trainer's copy: WIDTH|\" dev/cuda/scale.cu"
case_ "a ladder copy that drifted" 1 "NOT OK  shared-copy of prog.cu: scale_kernel (as scale_kernel1) in dev/cuda/scale.cu:4 differs from prog.cu:2" \
    "sed -i 's/2.0f/3.0f/' dev/cuda/scale.cu"
case_ "a ladder #define that drifted" 1 "NOT OK  shared-copy of prog.cu: WIDTH in dev/cuda/scale.cu:2 differs" \
    "sed -i 's/^#define WIDTH 8/#define WIDTH 16/' prog.cu"
case_ "a ladder marker above another definition" 1 "the line below defines scale_kernel1, not scale_kernel2" \
    "sed -i 's/(as scale_kernel1)/(as scale_kernel2)/' dev/cuda/scale.cu"
case_ "a program that no longer has the definition" 1 "prog.cu has no scale_kernel" \
    "sed -i 's/scale_kernel(/scale_kernel_v2(/' prog.cu"
case_ "a ladder without a marker" 1 "dev/cuda/other.cu includes precision.h but has no" \
    "echo '#include \"precision.h\"' > dev/cuda/other.cu"
# dev/README.md's table: made from --table it passes; a new block makes it stale
readme="{ echo '<!-- the copies table -->'; bash '$checker' --table --root .; echo '<!-- end of the copies table -->'; } > dev/README.md"
case_ "dev/README.md's table made by --table" 0 "OK      dev/README.md's table of copies is up to date" "$readme"
case_ "a block missing from dev/README.md's table" 1 "NOT OK  dev/README.md's table of copies is out of date" \
    "$readme; printf '%s\n' '// --- begin shared-copy: new ---' '// --- end shared-copy: new ---' | tee -a a.c >> c.c"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
