#!/usr/bin/env bash
# make mutants: plant realistic GPU bugs, one at a time, into a scratch copy of the tree,
# and check that the emulated test meant to catch each one fails. Each bug class the
# emulator must catch (dev/emu/cuda_emu.h) has a mutant in train_gpt2.cu, infer.cu or
# train_mlp.cu: races between blocks, missing barriers in either direction, writes past a
# tensor or an allocation, a lost blockIdx.y, a stride that is only right when T equals
# the head size, grids rounded down, scalar tails, shared memory read before it is
# written, wrong shuffle masks, launch bounds, copies in the wrong direction, stale CUDA
# graphs; and the classes the old emulator already caught (shuffle offsets, the causal
# mask, a bf16 conversion that truncates); and in finetune_lora.cu, QLoRA's dequantizing
# kernel and the chunked classifier. A mutant that no longer applies (its code
# changed) counts as a failure too: update it.
#     make mutants                        (all; about 30 minutes on 2 cores)
#     bash dev/test/mutants.sh -l          (list them)
#     bash dev/test/mutants.sh NAME ...    (only these)
# First every test runs on the unchanged tree and must pass. Then a mutant passes when its
# test fails for the right reason: the race builds' tests with the race detector's report,
# the others with a check's NOT OK or an error line (not a time-out, not a silent crash).
# It ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
only=("$@")
list=0
[ "${1:-}" = -l ] && list=1 && only=()

# --- the tests, by name: what to build, and the command (run in the scratch tree)
test_targets() {
    case $1 in
    gpt2) echo dev/emu/test_gpt2cu_fp32_cpu ;;
    gpt2_race) echo dev/emu/test_gpt2cu_fp32_race ;;
    gpt2_bf16) echo dev/emu/test_gpt2cu_bf16_cpu ;;
    gpt2_uneven) echo train_gpt2 dev/emu/train_gpt2cu_fp32_cpu ;;
    infer) echo dev/emu/test_infercu_fp32_cpu ;;
    lora) echo dev/emu/test_finetune_loracu_fp32_cpu ;;
    infer_race) echo dev/emu/test_infercu_fp32_race ;;
    mlp) echo train_mlp dev/emu/train_mlpcu_cpu ;;
    mlp_race) echo train_mlp dev/emu/train_mlpcu_race ;;
    esac
}
test_command() {
    case $1 in
    gpt2) echo "./dev/emu/test_gpt2cu_fp32_cpu" ;;
    gpt2_race) echo "EMU_SCHEDULE=descending ./dev/emu/test_gpt2cu_fp32_race" ;;
    gpt2_bf16) echo "./dev/emu/test_gpt2cu_bf16_cpu" ;;
    # (section 6 of the twin test: the uneven shapes, FP32; the FP32 binary stands in for
    # the BF16 and FP16 ones, whose checks it passes: their tolerances are wider)
    gpt2_uneven) echo "SECTIONS=6 bash dev/test/test_train_gpt2_cuda.sh ./train_gpt2 ./dev/emu/train_gpt2cu_fp32_cpu ./dev/emu/train_gpt2cu_fp32_cpu ./dev/emu/train_gpt2cu_fp32_cpu" ;;
    infer) echo "./dev/emu/test_infercu_fp32_cpu" ;;
    lora) echo "./dev/emu/test_finetune_loracu_fp32_cpu" ;;
    infer_race) echo "EMU_SCHEDULE=descending ./dev/emu/test_infercu_fp32_race" ;;
    mlp) echo "bash dev/test/test_train_mlp_cuda.sh ./dev/emu/train_mlpcu_cpu ./train_mlp" ;;
    mlp_race) echo "bash dev/test/test_train_mlp_cuda.sh ./dev/emu/train_mlpcu_race ./train_mlp" ;;
    esac
}

# what a catch must print (grep -E), by test
test_expects() {
    case $1 in
    *_race) echo 'a race on|past its end|device memory that was freed|no thread of its block has written' ;;
    *) echo 'NOT OK|^Error|runtime error|ERROR: AddressSanitizer| [1-9][0-9]* failed$' ;;
    esac
}

# --- the mutants: NAME CLASS FILE TEST OLD NEW (OLD must occur exactly once in FILE)
names=()
classes=()
files=()
tests=()
olds=()
news=()
mutant() {
    names+=("$1")
    classes+=("$2")
    files+=("$3")
    tests+=("$4")
    olds+=("$5")
    news+=("$6")
}

# train_gpt2.cu
mutant wte-grad-blocks "a += from threads of different blocks (updates lost on a GPU)" train_gpt2.cu gpt2_race \
'    seg_start[segments] = (int)N;
    for (size_t i = 0; i < N; i++) { order[count[inp[i]]++] = (int)i; }' \
'    for (size_t i = 0; i < N; i++) { order[count[inp[i]]++] = (int)i; }
    segments = (int)N; // a bucket per position: the blocks of a repeated token add into one row
    for (int s = 0; s < segments; s++) { seg_start[s] = s; seg_token[s] = inp[order[s]]; }
    seg_start[segments] = (int)N;'
mutant block-max-barrier "a missing barrier: warps read slots other warps have yet to write" train_gpt2.cu gpt2_race \
'    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { partial[warp] = v; }
    __syncthreads();
    return warp_max(' \
'    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { partial[warp] = v; }
    return warp_max('
mutant classifier-barrier "a missing barrier: one thread overwrites what the others have yet to read" train_gpt2.cu gpt2_race \
'    __syncthreads(); // everyone has read z[target] before it is overwritten' \
''
mutant residual-bound "an elementwise bound <= instead of <: a write into the next tensor" train_gpt2.cu gpt2_uneven \
'    if (i < N) { out[i] = from_float(to_float(inp1[i]) + to_float(inp2[i])); }' \
'    if (i <= N) { out[i] = from_float(to_float(inp1[i]) + to_float(inp2[i])); }'
mutant gelu-no-bound "a missing bounds guard" train_gpt2.cu gpt2_uneven \
'    if (i >= N) { return; }
    float x = to_float(inp[i]);
    out[i] = from_float(0.5f' \
'    float x = to_float(inp[i]);
    out[i] = from_float(0.5f'
mutant column-sums-blockidx-y "threadIdx.x where blockIdx.y * blockDim.x + threadIdx.x belongs" train_gpt2.cu gpt2_uneven \
'__global__ void column_partials_kernel(float *partial, const floatX *x, int rows, int cols) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;' \
'__global__ void column_partials_kernel(float *partial, const floatX *x, int rows, int cols) {
    int c = threadIdx.x, chunk = blockIdx.x;'
mutant qkv-stride-head-size "a stride that is right only when T equals the head size" train_gpt2.cu gpt2_uneven \
'    size_t r = (((which * B + b) * NH + h) * T + t) * HS + d;' \
'    size_t r = (((which * B + b) * NH + h) * HS + t) * HS + d;'
mutant reduce-first-chunk "a reduction over blocks that stops after the first (every test fit one)" train_gpt2.cu gpt2_uneven \
'    for (int k = 0; k < chunks; k++) { sum += partial[(size_t)k * stride + c]; }' \
'    for (int k = 0; k < 1; k++) { sum += partial[(size_t)k * stride + c]; }'
mutant layernorm-whole-warps "a loop that assumes C is a multiple of 32" train_gpt2.cu gpt2_uneven \
'    for (int i = lane; i < C; i += 32) { m += to_float(x[i]); }' \
'    for (int i = lane; i < C / 32 * 32; i += 32) { m += to_float(x[i]); }'
mutant block-sum-unwritten "shared memory read where no thread of the block wrote (the last block's values)" train_gpt2.cu gpt2 \
'    return warp_sum(lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f);' \
'    return warp_sum(partial[lane]);'
mutant warp-sum-mask "a shuffle mask that leaves out lanes that call it" train_gpt2.cu gpt2 \
'    for (int offset = 16; offset > 0; offset /= 2) { v += __shfl_xor_sync(0xffffffffu, v, offset); }' \
'    for (int offset = 16; offset > 0; offset /= 2) { v += __shfl_xor_sync(0x0000ffffu, v, offset); }'
mutant losses-copy-direction "a cudaMemcpy whose kind says the wrong direction" train_gpt2.cu gpt2 \
'cudaMemcpy(model->losses_host, a.losses, B * T * sizeof(float), cudaMemcpyDeviceToHost)' \
'cudaMemcpy(model->losses_host, a.losses, B * T * sizeof(float), cudaMemcpyHostToDevice)'
mutant causal-mask "the causal mask off by one (caught before, kept caught)" train_gpt2.cu gpt2 \
'    for (int i = lane; i < T; i += 32) { a[i] = from_float(i <= t ? expf(to_float(a[i]) - m) * inv : 0.0f); }' \
'    for (int i = lane; i < T; i += 32) { a[i] = from_float(i < t ? expf(to_float(a[i]) - m) * inv : 0.0f); }'
mutant warp-max-offsets "wrong shuffle offsets (caught before, kept caught)" train_gpt2.cu gpt2 \
'    for (int offset = 16; offset > 0; offset /= 2) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }' \
'    for (int offset = 8; offset > 0; offset /= 2) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }'
mutant bf16-truncation "a bf16 conversion that truncates instead of rounding (caught before, kept caught)" train_gpt2.cu gpt2_bf16 \
'__device__ __host__ inline floatX from_float(float x) { return (floatX)x; }' \
'__device__ __host__ inline floatX from_float(float x) { return (floatX)__uint_as_float(__float_as_uint(x) & (sizeof(floatX) == 2 ? 0xffff0000u : 0xffffffffu)); }'
# infer.cu
mutant gemv-grid-rounded-down "a grid rounded down (the last outputs never computed)" infer.cu infer \
'    unsigned blocks = ceil_div(OC, GEMV_WARPS), threads = GEMV_WARPS * 32;' \
'    unsigned blocks = OC / GEMV_WARPS, threads = GEMV_WARPS * 32;'
mutant gemv-scalar-tail "a bug in the scalar branch only rows of C % 8 != 0 take" infer.cu infer \
'        for (int i = lane; i < C; i += 32) {
            float wi' \
'        for (int i = lane; i < C; i += 31) {
            float wi'
mutant attention-barrier "a missing barrier: lower threads read what higher ones write" infer.cu infer_race \
'    partial[threadIdx.x] = o;
    __syncthreads();' \
'    partial[threadIdx.x] = o;'
mutant argmax-tree-barrier "a missing barrier inside a tree reduction" infer.cu infer_race \
'            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) { out[blockIdx.x] = ids[0] == 0x7fffffff ? 0 : ids[0]; }' \
'            }
        }
    }
    if (threadIdx.x == 0) { out[blockIdx.x] = ids[0] == 0x7fffffff ? 0 : ids[0]; }'
mutant kv-cache-past-end "a write one position past a layer's cache" infer.cu infer \
'        size_t at = ((size_t)e.seq[n] * e.S + e.pos[n]) * KV + (value ? c - KV : c);' \
'        size_t at = ((size_t)e.seq[n] * e.S + e.pos[n] + 1) * KV + (value ? c - KV : c);'
mutant attention-launch-bounds "a launch larger than the kernel's __launch_bounds__" infer.cu infer \
'attention_forward_kernel<<<dim3(N, NH), ATT_BLOCK, 0, main_stream>>>' \
'attention_forward_kernel<<<dim3(N, NH), 2 * ATT_BLOCK, 0, main_stream>>>'
mutant graph-argmax-flag "a captured graph replayed after the argmax flag changed" infer.cu infer \
'model->graphs[N] == NULL || model->graph_argmax[N] != greedy' \
'model->graphs[N] == NULL'
mutant graph-stale-buffers "captured graphs kept after the buffers they point into are reallocated" infer.cu infer \
'    gpt2_drop_graphs(model); // they hold pointers into the old buffers
    gpt2_free_rows(model);' \
'    gpt2_free_rows(model);'
mutant argmax-last-stride "a loop that drops the last partial stride" infer.cu infer \
'    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        if (row[i] > best)' \
'    for (int i = threadIdx.x; i < V / ARGMAX_BLOCK * ARGMAX_BLOCK; i += blockDim.x) {
        if (row[i] > best)'
mutant gqa-head-mapping "grouped-query attention reading key/value head h % NKV instead of h / (NH / NKV)" infer.cu infer \
'    size_t Q = (size_t)NH * HS, KV = (size_t)NKV * HS, kv_head = (size_t)(h / (NH / NKV)) * HS;' \
'    size_t Q = (size_t)NH * HS, KV = (size_t)NKV * HS, kv_head = (size_t)(h % NKV) * HS;'
mutant rope-key-position "RoPE rotating the keys by the angle of the wrong position (one thread per pair, a stale index)" infer.cu infer \
'    float c = table[(size_t)pos[n] * HS + i], s = table[(size_t)pos[n] * HS + half + i];' \
'    float c = table[(size_t)n * HS + i], s = table[(size_t)n * HS + half + i];'
mutant swiglu-halves "SwiGLU reading gate and up from each other's half" infer.cu infer \
'    float gate = inp[n * 2 * H + j], up = inp[n * 2 * H + H + j];' \
'    float up = inp[n * 2 * H + j], gate = inp[n * 2 * H + H + j];'
mutant rmsnorm-mean "RMSNorm taking the mean out as LayerNorm does" infer.cu infer \
'    for (int i = lane; i < C && !rms; i += 32) { m += x[i]; }' \
'    for (int i = lane; i < C; i += 32) { m += x[i]; }'
# train_mlp.cu
mutant mlp-tile-barrier "a missing barrier: a tile overwritten while others still read it" train_mlp.cu mlp_race \
'        __syncthreads(); // and everyone is done with them before they are overwritten' \
''
mutant mlp-tile-bounds "a tile loaded without its bounds check" train_mlp.cu mlp \
'            As[ty][tx] = r < M && k < K ? A[(size_t)r * K + k] : 0.0f;' \
'            As[ty][tx] = A[(size_t)r * K + k];'
mutant mlp-relu-bound "an elementwise bound <= instead of <" train_mlp.cu mlp \
'    if (i < N) { out[i] = act == ACT_RELU ? (inp[i] > 0.0f ? inp[i] : 0.0f) : tanhf(inp[i]); }' \
'    if (i <= N) { out[i] = act == ACT_RELU ? (inp[i] > 0.0f ? inp[i] : 0.0f) : tanhf(inp[i]); }'
mutant mlp-loss-bound "one thread too many: writes past a cudaMalloc'd buffer" train_mlp.cu mlp_race \
'    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) { return; }' \
'    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b > B) { return; }'
mutant mlp-bias-blockidx "threadIdx.x where blockIdx.x * blockDim.x + threadIdx.x belongs" train_mlp.cu mlp \
'__global__ void bias_backward_kernel(float *dbias, const float *dout, size_t B, size_t OUT) {
    size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x;' \
'__global__ void bias_backward_kernel(float *dbias, const float *dout, size_t B, size_t OUT) {
    size_t o = threadIdx.x;'
# finetune_lora.cu (QLoRA's dequantizing kernel, the chunked classifier)
mutant dequant-nibble-order "the two codes of a byte swapped (the first element is the high nibble)" finetune_lora.cu lora \
'    int index = i % 2 == 0 ? byte >> 4 : byte & 15;' \
'    int index = i % 2 == 0 ? byte & 15 : byte >> 4;'
mutant dequant-grid-rounded-down "a grid rounded down (the last values of a band never dequantized)" finetune_lora.cu lora \
'    dequantize4_kernel<<<ceil_div(q->n, BLOCK), BLOCK, 0, main_stream>>>(W, *q);' \
'    dequantize4_kernel<<<q->n / BLOCK, BLOCK, 0, main_stream>>>(W, *q);'
mutant dequant-nested-block "the nested absmax of the wrong block of 256" finetune_lora.cu lora \
'q.nested_absmax[block / 256]' \
'q.nested_absmax[block % 256]'
mutant classifier-chunk-offset "every chunk of the classifier reads the first chunk's rows" finetune_lora.cu lora \
'        linear_forward(a->logits, a->nf + (size_t)first * C, device_base.lm_head, NULL, rows, C, b->Vp);' \
'        linear_forward(a->logits, a->nf, device_base.lm_head, NULL, rows, C, b->Vp);'
mutant classifier-unlabelled-rows "rows without a label left with a gradient into nf" finetune_lora.cu lora \
'        zero_unlabelled_kernel<<<ceil_div((size_t)rows * C, BLOCK), BLOCK, 0, main_stream>>>(dnf, a->labels + first, rows, C);' \
'        (void)0;'


if [ $list = 1 ]; then
    for i in "${!names[@]}"; do printf '%-24s %-12s %-11s %s\n' "${names[$i]}" "${files[$i]}" "${tests[$i]}" "${classes[$i]}"; done
    exit 0
fi

# --- the scratch tree: the working tree's files (tracked, and new ones not ignored)
scratch=$(mktemp -d /tmp/mutants.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$scratch"
for f in data/tinyshakespeare/tiny_shakespeare_train.bin data/tinyshakespeare/tiny_shakespeare_val.bin data/gpt2_tokenizer.bin; do
    [ -f "$f" ] && cp "$f" "$scratch/$f"
done
passed=0
failed=0
selected() { [ ${#only[@]} = 0 ] || [[ " ${only[*]} " == *" $1 "* ]]; }
# the tests on the unchanged tree: each must pass, or a failure below would mean nothing
declare -A baseline=()
for i in "${!names[@]}"; do
    t=${tests[$i]}
    selected "${names[$i]}" || continue
    [ -n "${baseline[$t]:-}" ] && continue
    baseline[$t]=1
    # shellcheck disable=SC2046
    if make -C "$scratch" -s $(test_targets "$t") > "$scratch/baseline.log" 2>&1 &&
        (cd "$scratch" && timeout 900 bash -c "$(test_command "$t")") >> "$scratch/baseline.log" 2>&1; then
        echo "OK      test $t passes on the unchanged tree"
        passed=$((passed + 1))
    else
        echo "NOT OK  test $t fails on the unchanged tree: no mutant it catches counts"
        tail -n 5 "$scratch/baseline.log"
        failed=$((failed + 1))
        baseline[$t]=broken
    fi
done
for i in "${!names[@]}"; do
    name=${names[$i]} file=${files[$i]} t=${tests[$i]}
    selected "$name" || continue
    [ "${baseline[$t]}" = broken ] && { echo "NOT OK  $name: not tried (its test fails unchanged)"; failed=$((failed + 1)); continue; }
    log="$scratch/$name.log"
    cp "$scratch/$file" "$scratch/$file.orig"
    if ! OLD=${olds[$i]} NEW=${news[$i]} perl -0777 -i -pe \
        'BEGIN { $o = $ENV{OLD}; $n = $ENV{NEW} } $c = () = /\Q$o\E/g; die "found $c times\n" if $c != 1; s/\Q$o\E/$n/' \
        "$scratch/$file" 2> "$log"; then
        echo "NOT OK  $name: the code it changes is not in $file any more ($(cat "$log")): update the mutant"
        failed=$((failed + 1))
        cp "$scratch/$file.orig" "$scratch/$file"
        continue
    fi
    start=$(date +%s)
    # shellcheck disable=SC2046
    if ! make -C "$scratch" -s $(test_targets "$t") >> "$log" 2>&1; then
        echo "NOT OK  $name: the mutant does not build (a bug a compiler catches is not the point): $(grep -m1 error "$log")"
        failed=$((failed + 1))
        cp "$scratch/$file.orig" "$scratch/$file"
        touch "$scratch/$file"
        continue
    else
        (cd "$scratch" && timeout 900 bash -c "$(test_command "$t")") >> "$log" 2>&1
        rc=$?
        line=$(grep -m1 -E "$(test_expects "$t")" "$log" | cut -c 1-160)
        caught=$([ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ -n "$line" ] && echo 1 || echo 0)
        verdict="exit $rc: $line"
    fi
    secs=$(($(date +%s) - start))
    if [ "$caught" = 1 ]; then
        echo "OK      $name ($file): ${classes[$i]}: caught by $t (${secs} s; $verdict)"
        passed=$((passed + 1))
    else
        echo "NOT OK  $name ($file): ${classes[$i]}: SURVIVED $t (${secs} s; exit $rc$([ -z "$line" ] && echo ", no report of the expected kind"))"
        failed=$((failed + 1))
    fi
    cp "$scratch/$file.orig" "$scratch/$file"
    touch "$scratch/$file"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
