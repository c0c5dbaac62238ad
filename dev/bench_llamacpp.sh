#!/usr/bin/env bash
# infer.c next to llama.cpp on the CPU, on the same SmolLM2-135M-Instruct GGUF and threads:
# prefill and decode tokens/s at batch 1. A benchmark, not a test: it prints tables.
#
# llama.cpp comes from PyPI (llama-cpp-python's source distribution carries it in
# vendor/llama.cpp): downloaded, unpacked and built (its llama-bench, with cmake, native CPU
# flags) in a scratch folder, never in this repository. The first run takes several minutes.
#
# What each reads per generated token: llama.cpp computes on the GGUF's Q4_1 / Q8_0 blocks
# as they are (about 98 MB for the whole model), infer.c on the fp32 values ./convert made of
# them (513 MiB), infer_bf16 on those rounded to bf16 (257 MiB), and with -Q on 4 or 8 bits
# (81 and 136 MiB): decode is bound by reading the weights, and then by widening them.
#     bash dev/bench_llamacpp.sh [THREADS] [PROMPT_LENGTHS] [GENERATED]   # default: all cores, 16,128,512, 32
#     SCRATCH=/somewhere/else bash dev/bench_llamacpp.sh                   # where llama.cpp is built [/tmp/llamacpp_bench]
set -eu
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
lengths=${2:-16,128,512}
generated=${3:-32}
scratch=${SCRATCH:-/tmp/llamacpp_bench}
version=0.3.36 # llama-cpp-python's; its vendor/llama.cpp is what we build
[ -f data/smollm2/SmolLM2-135M-Instruct.bin ] || make -s smollm2
make -s infer infer_bf16 > /dev/null
bench=$scratch/llama_cpp_python-$version/vendor/llama.cpp/build/bin/llama-bench
if [ ! -x "$bench" ]; then
    command -v cmake > /dev/null || { echo "Error: cmake is needed to build llama.cpp (apt-get install cmake)"; exit 1; }
    mkdir -p "$scratch"
    [ -f "$scratch/llama_cpp_python-$version.tar.gz" ] ||
        python3 -m pip download --no-deps --no-binary :all: --quiet "llama-cpp-python==$version" -d "$scratch"
    tar xzf "$scratch/llama_cpp_python-$version.tar.gz" -C "$scratch"
    src=$scratch/llama_cpp_python-$version/vendor/llama.cpp
    echo "building llama.cpp's llama-bench in $src (a few minutes)"
    # AMX (Intel's matrix tiles) off: a VM may list it in cpuid without letting programs use it
    # (ours does: llama-bench died of an illegal instruction in ggml_backend_amx_mul_mat)
    noamx=""
    grep -q amx_tile /proc/cpuinfo && noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" > "$scratch/cmake.log" 2>&1 || { echo "Error: cmake failed: see $scratch/cmake.log"; exit 1; }
    cmake --build "$src/build" --target llama-bench -j "$(nproc)" > "$scratch/build.log" 2>&1 || { echo "Error: the build failed: see $scratch/build.log"; exit 1; }
fi
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; $threads threads; $(date -u +%F)"
echo
echo "== infer.c, fp32 (513 MiB of weights per token)"
OMP_NUM_THREADS=$threads ./infer -m data/smollm2/SmolLM2-135M-Instruct.bin -B 1 -b 1 -l "$lengths" -N "$generated" 2>&1 | grep '^|'
echo
echo "== infer_bf16, the linear layers' weights in bf16 (257 MiB of weights per token)"
OMP_NUM_THREADS=$threads ./infer_bf16 -m data/smollm2/SmolLM2-135M-Instruct.bin -B 1 -b 1 -l "$lengths" -N "$generated" 2>&1 | grep '^|'
echo
echo "== infer_bf16 -Q nf4,q8_0: the linear layers in NF4 (bitsandbytes' bytes), the head in q8_0 (81 MiB per token)"
OMP_NUM_THREADS=$threads ./infer_bf16 -m data/smollm2/SmolLM2-135M-Instruct.bin -Q nf4,q8_0 -B 1 -b 1 -l "$lengths" -N "$generated" 2>&1 | grep '^|'
echo
echo "== infer_bf16 -Q q8_0,q8_0: everything in llama.cpp's Q8_0 (136 MiB per token)"
OMP_NUM_THREADS=$threads ./infer_bf16 -m data/smollm2/SmolLM2-135M-Instruct.bin -Q q8_0,q8_0 -B 1 -b 1 -l "$lengths" -N "$generated" 2>&1 | grep '^|'
echo
echo "== llama.cpp (the one llama-cpp-python $version vendors), the GGUF as it is: Q4_1 matrices, Q8_0 embedding (98 MB)"
"$bench" -m data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf -t "$threads" -p "$lengths" -n "$generated" -r 3 2>/dev/null
