#!/usr/bin/env bash
# "One standalone file" stays literally true: every root program, amalgamated by
# dev/amalgamate.sh (its lib/ headers pasted in), must compile alone, with no #include of
# ours left in it, and run one real command. The .c programs build with gcc (warnings as
# errors); the .cu programs through the emulator (dev/emu/emu_build.sh), which is how CI
# runs CUDA code (check_cuda_builds.sh compiles the originals with nvcc).
#     make data convert build/hf_tiny_fp32.bin build/llama_gqa3.bin && bash dev/test/test_amalgamation.sh
# Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }
CFLAGS="-O1 -march=native -fno-trapping-math -Wall -Wextra -Werror -fopenmp"
echo "hello world, hello amalgamation" > "$TMP/text.txt"
# a small fake Fashion-MNIST for train_mlp.cu (no gradient check there: --check compares with the CPU)
source dev/test/fake_fashion_mnist.sh
mkdir -p "$TMP/fmnist" && make_split "$TMP/fmnist" train 600 1 && make_split "$TMP/fmnist" t10k 100 800001
# program | extra build flags | smoke command (PROG is the amalgamated binary) | a line its output must have
SMOKE=(
"train_mlp.c|-lz|PROG --gradcheck|18 passed, 0 failed"
"train_gpt2.c||PROG -e d1 -b 2 -t 16 -x 2 -v 0 -s 0 -o ''|step    2/2 | loss"
"infer.c||PROG -m build/hf_tiny_fp32.bin -z 1 -i 1,2,3 -n 4 -t 0|1,2,3"
"convert.c||PROG -i dev/reference/fixtures/hf_tiny_fp32 -o $TMP/tiny.bin|tiny.bin"
"finetune_lora.c||PROG -B 1 -m build/llama_gqa3.bin -n 1 -k 1 -b 1 -t 16|step   1/1 | loss"
"data/tokenizer.c||PROG -e -i $TMP/text.txt -o $TMP/text.bin -t ''|wrote $TMP/text.bin"
"data/instructions.c||PROG -d ${ISO_CODES:-/usr/share/iso-codes/json} -o $TMP/iso|train.jsonl"
"train_mlp.cu|-lz|PROG --check -d $TMP/fmnist -l 784,32,10 -b 8|passed, 0 failed"
"train_gpt2.cu|-DENABLE_BF16|PROG -e d1 -b 2 -t 16 -x 2 -v 0 -s 0 -o ''|step    2/2 | loss"
"infer.cu|-DENABLE_BF16|PROG -m build/hf_tiny_fp32.bin -z 1 -i 1,2,3 -n 4 -t 0|1,2,3"
"finetune_lora.cu|-DENABLE_BF16|PROG -B 1 -m build/llama_gqa3.bin -n 1 -k 1 -b 1 -t 16|step   1/1 | loss"
)
for row in "${SMOKE[@]}"; do
    IFS='|' read -r src flags cmd want <<< "$row"
    name=$(basename "$src")
    one="$TMP/${name%.*}_amalgamated.${name##*.}"
    bin="$TMP/${name%.*}_${name##*.}_one"
    if ! bash dev/amalgamate.sh "$src" "$one" > /dev/null 2> "$TMP/err"; then
        not_ok "$src: dev/amalgamate.sh failed: $(head -1 "$TMP/err")"; continue
    fi
    # none of our files is still included: every "..." include left names a file that is not ours
    left=$(grep -nE '^[ \t]*#[ \t]*include[ \t]*"' "$one" | head -1)
    if [ -n "$left" ]; then not_ok "$src: the amalgamation still includes a file: $left"; continue; fi
    case $src in
    # shellcheck disable=SC2086
    *.cu) build=(bash dev/emu/emu_build.sh "$one" "$bin" $flags) ;;
    # shellcheck disable=SC2086
    *) build=(gcc $CFLAGS "$one" -lm $flags -o "$bin") ;;
    esac
    if ! "${build[@]}" > "$TMP/err" 2>&1; then
        not_ok "$src: the amalgamated file does not compile alone: $(grep -m1 -E 'error|Error' "$TMP/err")"; continue
    fi
    run=${cmd//PROG/$bin}
    if ! timeout 300 bash -c "$run" > "$TMP/out" 2>&1; then # (124: it hung)
        not_ok "$src: '$run' failed (exit $?): $(tail -1 "$TMP/out")"; continue
    fi
    if ! grep -qF -- "$want" "$TMP/out"; then
        not_ok "$src: '$run' printed no line with '$want'; its last: $(tail -1 "$TMP/out")"; continue
    fi
    ok "$src: one file of $(wc -l < "$one") lines compiles alone and runs ($(grep -m1 -F -- "$want" "$TMP/out" | cut -c 1-70))"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
