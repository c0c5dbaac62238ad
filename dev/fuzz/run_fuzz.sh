#!/usr/bin/env bash
# Runs each libFuzzer target of dev/fuzz for a bounded time, seeded with the project's
# own files of that kind, and fails if any target found a crash. (make fuzz)
#     bash dev/fuzz/run_fuzz.sh SECONDS target...
set -u
cd "$(dirname "$0")/../.." || exit 1
seconds=$1
shift
mkdir -p dev/fuzz/crashes
failed=0
for target in "$@"; do
    corpus=dev/fuzz/corpus/$target
    mkdir -p "$corpus"
    case $target in # seeds: real files of the kind, so mutations start from valid input
        safetensors) cp dev/reference/fixtures/hf_tiny_*/model.safetensors "$corpus/" 2>/dev/null
                     for f in "$corpus"/model.safetensors; do [ -f "$f" ] && mv "$f" "$corpus/seed_$(basename "$(dirname "$f")")_$RANDOM"; done ;;
        config|json) for f in dev/reference/fixtures/hf_tiny_fp32/config.json dev/reference/fixtures/gpt2_hf_configs/*.json \
                              dev/reference/fixtures/{llama_gqa3,qwen2_gqa4,llama_mha3}/config.json; do
                         cp "$f" "$corpus/seed_$(basename "$(dirname "$f")")_$(basename "$f")"; done ;;
        gguf) for f in dev/reference/fixtures/*.gguf; do cp "$f" "$corpus/seed_$(basename "$f")"; done ;;
    esac
    echo "==== fuzz_$target for ${seconds}s"
    if ! ./dev/fuzz/fuzz_$target -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
            -artifact_prefix=dev/fuzz/crashes/"$target"- "$corpus" 2>&1 | tail -15; then
        echo "NOT OK  fuzz_$target found a crash: dev/fuzz/crashes/$target-*"
        failed=$((failed + 1))
    else
        echo "OK      fuzz_$target: no crash in ${seconds}s"
    fi
done
echo "$(( $# - failed )) passed, $failed failed"
[ $failed = 0 ]
