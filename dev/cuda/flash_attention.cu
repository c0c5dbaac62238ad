/*
flash_attention.cu: causal self-attention, forward and backward, from the kernels that
keep the (T,T) probabilities to kernels that keep none (flash attention: Dao et al.,
"FlashAttention", 2022; "FlashAttention-2", 2023). train_gpt2.c's flash_attention_forward
and flash_attention_backward are the same algorithm on the CPU, with comments on the maths.

The heads: query head h of position t in sequence b is the HS numbers at
    q[(b*T + t) * q_row + h*HS],   key and value: k, v [(b*T + t) * kv_row + (h / G)*HS]
where G = NH / NKV query heads share a key/value head (grouped-query attention, Llama's;
G = 1 is GPT-2's). So one set of kernels reads GPT-2's fused qkv (B,T,3C: q_row = kv_row =
3C, k = q + C, v = q + 2C) and Llama's separate q (B,T,NH*HS), k, v (B,T,NKV*HS) in place,
with no permute and no repeated K/V. out (B,T,NH*HS) as q without the stride; lse
(B,NH,T) is each row's log-sum-exp of the scaled scores, all the backward pass needs of
the softmax. The gradients dq, dk, dv are written (not accumulated) in q's, k's, v's layout.

    forward
    1: materialised: the scores (B,NH,T,T) in fp32, a causal softmax, P.V; a thread an
       element, a warp a row (today's trainers keep this matrix)     — ./dev/cuda/flash_attention -v 1
    2: tiles: a block per (64 queries, head), a thread per query, 32 keys
       and values at a time in shared memory, the online softmax      — ./dev/cuda/flash_attention -v 2
    3: warp tiles: a warp per query (4 queries a warp, 4 warps), its
       32 lanes score 32 keys at once, then each lane owns HS/32 of
       the output; barriers only around the shared K/V tiles         — ./dev/cuda/flash_attention -v 3
    4: tensor cores: a warp per 16 queries (4 warps), K/V tiles of 32
       in bf16; S = Q K^T and O += P V as 16x16x16 bf16 products
       with fp32 sums (wmma), the online softmax on the CUDA cores,
       the output rows in shared memory between tiles                — ./dev/cuda/flash_attention -v 4
    backward (the same numbers: variant N runs forward N, then backward N)
    1: materialised: dP = dO.V^T and the softmax's backward on the (T,T)
       matrix, then dq, dk, dv a thread an element
    2: tiles: D = rowsum(dO * O); a block per (32 keys, key/value head)
       walks the query tiles after it for dk, dv (over the G query heads
       of its group: no atomics, no repeated K/V); a block per (64
       queries, head) walks the key tiles for dq. Each recomputes
       P = exp(q.k*scale - lse): twice the exponentials, no T x T
    3: warp tiles: as 2, a warp per key (dk, dv) or per query (dq), the
       lanes across 32 queries or keys and then across the head
    4: tensor cores: as 3 with a warp per 16 keys (dk, dv) or 16
       queries (dq): S, dP, and the sums dV += P^T dO, dK += dS^T Q,
       dQ += dS K as bf16 products (P and dS rounded to bf16), the
       sums kept in fragments from the first tile to the last

Every variant is deterministic: each output element is summed by one thread in a fixed
order (no atomics anywhere; on the tensor cores, a fixed order too). floatX (bf16 by
default, fp32 with -DENABLE_FP32) in and out, fp32 arithmetic (variant 4: bf16 products,
fp32 sums), lse fp32. Head sizes 1 to 128: the tiles in shared memory and each
lane's slice of a row are sized at compile time by HSP, HS rounded up to a multiple of 32,
and a row's numbers past HS are zeros there, which add nothing to its dot products.

main checks every variant, forward (out, lse) and backward (dq, dk, dv), against attention
in double on the CPU from the same floatX inputs, on fresh random inputs, on shapes whose T
divides no tile (1, 33, 37, 40, 45, 50, 70, 77, 130 tokens; on a GPU also 1,000 and 1,537), head
sizes 16 to 128 (16, 40 and 80: not multiples of 32; 40 not of 16), in both layouts (GPT-2's fused qkv; Llama's q, k, v apart, with G = 2 and 4). Then (GPU only) it times each variant at T = 1,024 / 4,096 / 16,384 and
HS = 64 / 128 with NH*HS = 2,048 and 16 K tokens a batch (B = 16,384 / T), forward and
backward, and prints ms and TFLOP/s (causal: half of 4*B*NH*T*T*HS for the forward pass,
2.5x that for the backward). Variant 1 is timed where its (B,NH,T,T) scratch fits in 8 GiB.
cuDNN's flash attention on the same shapes: ./dev/cuda/attention_cudnn (make USE_CUDNN=1), whose rows
make gpu-check prints under this table.
It ends with "N passed, M failed" (a check is one variant on one shape) and exits non-zero
if one failed.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has run
its checks, variant 4 through its stand-in for the tensor cores (dev/emu/include/mma.h:
each lane computes the whole 16x16 tile, stores split across the lanes; so it checks the
algorithm, the tiles' addressing and alignment, and the barriers, not how a GPU spreads a
fragment over the lanes, which no code here relies on). Variant 4 needs 81 KiB (forward)
and 70 KiB (backward) of shared memory a block at HS = 128, under the 99 KiB of an RTX
50xx; a GPU that gives less skips it with a message.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/flash_attention.cu -o dev/cuda/flash_attention
    ./dev/cuda/flash_attention         (-v N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of every variant at small sizes:
    make dev/emu/flash_attention_cpu && ./dev/emu/flash_attention_cpu -c
*/
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, warp_sum, warp_max, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float
#include <mma.h>        // the tensor cores' warp matrix functions (variant 4)

// floatA: the type of q, k, v, out and their gradients in the kernels the programs share
// (variant 3 and rowdot_kernel). It is floatX here and in train_gpt2.cu, float in
// finetune_lora.cu (its fp32 activations), so those kernels convert with casts.
typedef floatX floatA;

// Where the heads are (see the header). Passed by value to every kernel.
// --- shared-copy of train_gpt2.cu: Heads ---
typedef struct {
    int B, T, NH, NKV, HS;
    int q_row, kv_row, o_row; // elements between positions t and t+1 of q (and dq), k and v, out (and dout)
} Heads;

// ----------------------------------------------------------------------------
// the CPU reference, in double, from the same floatX inputs the GPU reads

static void attention_cpu(double *out, double *lse, double *dq, double *dk, double *dv, const floatX *q,
                          const floatX *k, const floatX *v, const floatX *dout, Heads s) {
    int T = s.T, HS = s.HS, G = s.NH / s.NKV;
    double scale = 1.0 / sqrt((double)HS);
    std::vector<double> p(T), dp(T);
    for (int b = 0; b < s.B; b++) {
        for (int h = 0; h < s.NH; h++) {
            int kvh = h / G;
            for (int t = 0; t < T; t++) {
                const floatX *q_t = q + ((size_t)b * T + t) * s.q_row + h * HS;
                const floatX *dout_t = dout + ((size_t)b * T + t) * s.o_row + h * HS;
                double m = -INFINITY, sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const floatX *k_t2 = k + ((size_t)b * T + t2) * s.kv_row + kvh * HS;
                    double dot = 0.0;
                    for (int i = 0; i < HS; i++) { dot += (double)to_float(q_t[i]) * to_float(k_t2[i]); }
                    p[t2] = dot * scale;
                    m = fmax(m, p[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) { sum += exp(p[t2] - m); }
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = exp(p[t2] - m) / sum; }
                lse[((size_t)b * s.NH + h) * T + t] = m + log(sum);
                double *out_t = out + ((size_t)b * T + t) * s.o_row + h * HS;
                for (int i = 0; i < HS; i++) {
                    double o = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) { o += p[t2] * to_float(v[((size_t)b * T + t2) * s.kv_row + kvh * HS + i]); }
                    out_t[i] = o;
                }
                // backward: dP = dout . v, dS = P (dP - sum P dP), then the two matmuls
                double row = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const floatX *v_t2 = v + ((size_t)b * T + t2) * s.kv_row + kvh * HS;
                    double dot = 0.0;
                    for (int i = 0; i < HS; i++) { dot += (double)to_float(dout_t[i]) * to_float(v_t2[i]); }
                    dp[t2] = dot;
                    row += p[t2] * dot;
                }
                double *dq_t = dq + ((size_t)b * T + t) * s.q_row + h * HS;
                for (int t2 = 0; t2 <= t; t2++) {
                    double ds = p[t2] * (dp[t2] - row) * scale;
                    size_t kv = ((size_t)b * T + t2) * s.kv_row + kvh * HS;
                    for (int i = 0; i < HS; i++) {
                        dq_t[i] += ds * to_float(k[kv + i]);
                        dk[kv + i] += ds * to_float(q_t[i]);
                        dv[kv + i] += p[t2] * to_float(dout_t[i]);
                    }
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 1: materialised. The scores of every (query, key) pair in an fp32 (B,NH,T,T) scratch,
// softmaxed in place: what train_gpt2.cu keeps today (there in floatX, through cuBLAS).

__global__ void scores_kernel1(float *att, const floatX *q, const floatX *k, Heads s, float scale) {
    // one thread per (b, h, t, t2); entries above the diagonal are left alone
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, T = s.T;
    if (idx >= (size_t)s.B * s.NH * T * T) { return; }
    int t2 = (int)(idx % T), t = (int)(idx / T % T), h = (int)(idx / T / T % s.NH), b = (int)(idx / T / T / s.NH);
    if (t2 > t) { return; }
    const floatX *q_t = q + ((size_t)b * T + t) * s.q_row + h * s.HS;
    const floatX *k_t2 = k + ((size_t)b * T + t2) * s.kv_row + h / (s.NH / s.NKV) * s.HS;
    float dot = 0.0f;
    for (int i = 0; i < s.HS; i++) { dot += to_float(q_t[i]) * to_float(k_t2[i]); }
    att[idx] = dot * scale;
}

__global__ void softmax_kernel1(float *att, float *lse, Heads s) {
    // a warp per row (b, h, t): entries 0..t become probabilities, the row's lse is kept
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, T = s.T;
    if (row >= (size_t)s.B * s.NH * T) { return; }
    int t = (int)(row % T);
    float *a = att + row * T;
    float m = -INFINITY, sum = 0.0f;
    for (int i = lane; i <= t; i += 32) { m = fmaxf(m, a[i]); }
    m = warp_max(m);
    for (int i = lane; i <= t; i += 32) { sum += expf(a[i] - m); }
    sum = warp_sum(sum);
    for (int i = lane; i <= t; i += 32) { a[i] = expf(a[i] - m) / sum; }
    if (lane == 0) { lse[row] = m + logf(sum); }
}

__global__ void pv_kernel1(floatX *out, const float *att, const floatX *v, Heads s) {
    // one thread per output element (b, t, h, i)
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, T = s.T;
    if (idx >= (size_t)s.B * T * s.NH * s.HS) { return; }
    int i = (int)(idx % s.HS), h = (int)(idx / s.HS % s.NH), t = (int)(idx / s.HS / s.NH % T), b = (int)(idx / s.HS / s.NH / T);
    const float *p = att + (((size_t)b * s.NH + h) * T + t) * T;
    const floatX *v_h = v + (size_t)b * T * s.kv_row + h / (s.NH / s.NKV) * s.HS + i;
    float o = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) { o += p[t2] * to_float(v_h[(size_t)t2 * s.kv_row]); }
    out[((size_t)b * T + t) * s.o_row + h * s.HS + i] = from_float(o);
}

__global__ void softmax_backward_kernel1(float *datt, const float *att, const floatX *dout, const floatX *v, Heads s,
                                         float scale) {
    // a warp per row (b, h, t): datt = dout . v, then through the softmax and the scale
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, T = s.T;
    if (row >= (size_t)s.B * s.NH * T) { return; }
    int t = (int)(row % T), h = (int)(row / T % s.NH), b = (int)(row / T / s.NH);
    const floatX *dout_t = dout + ((size_t)b * T + t) * s.o_row + h * s.HS;
    const float *p = att + row * T;
    float *dp = datt + row * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        const floatX *v_t2 = v + ((size_t)b * T + t2) * s.kv_row + h / (s.NH / s.NKV) * s.HS;
        float d = 0.0f;
        for (int i = 0; i < s.HS; i++) { d += to_float(dout_t[i]) * to_float(v_t2[i]); }
        dp[t2] = d;
        dot += p[t2] * d;
    }
    dot = warp_sum(dot);
    for (int t2 = lane; t2 <= t; t2 += 32) { dp[t2] = p[t2] * (dp[t2] - dot) * scale; }
}

__global__ void dq_kernel1(floatX *dq, const float *dscore, const floatX *k, Heads s) {
    // one thread per (b, t, h, i): dq = dS . K
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, T = s.T;
    if (idx >= (size_t)s.B * T * s.NH * s.HS) { return; }
    int i = (int)(idx % s.HS), h = (int)(idx / s.HS % s.NH), t = (int)(idx / s.HS / s.NH % T), b = (int)(idx / s.HS / s.NH / T);
    const float *ds = dscore + (((size_t)b * s.NH + h) * T + t) * T;
    const floatX *k_h = k + (size_t)b * T * s.kv_row + h / (s.NH / s.NKV) * s.HS + i;
    float acc = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) { acc += ds[t2] * to_float(k_h[(size_t)t2 * s.kv_row]); }
    dq[((size_t)b * T + t) * s.q_row + h * s.HS + i] = from_float(acc);
}

__global__ void dkdv_kernel1(floatX *dk, floatX *dv, const float *att, const float *dscore, const floatX *q,
                             const floatX *dout, Heads s) {
    // one thread per (b, t2, kv head, i): dk = dS^T . Q and dv = P^T . dO, over the G query heads
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, T = s.T;
    if (idx >= (size_t)s.B * T * s.NKV * s.HS) { return; }
    int i = (int)(idx % s.HS), kvh = (int)(idx / s.HS % s.NKV), t2 = (int)(idx / s.HS / s.NKV % T);
    int b = (int)(idx / s.HS / s.NKV / T), G = s.NH / s.NKV;
    float dk_acc = 0.0f, dv_acc = 0.0f;
    for (int h = kvh * G; h < kvh * G + G; h++) {
        for (int t = t2; t < s.T; t++) {
            size_t a = (((size_t)b * s.NH + h) * T + t) * T + t2;
            dk_acc += dscore[a] * to_float(q[((size_t)b * T + t) * s.q_row + h * s.HS + i]);
            dv_acc += att[a] * to_float(dout[((size_t)b * T + t) * s.o_row + h * s.HS + i]);
        }
    }
    size_t o = ((size_t)b * T + t2) * s.kv_row + kvh * s.HS + i;
    dk[o] = from_float(dk_acc);
    dv[o] = from_float(dv_acc);
}

// ----------------------------------------------------------------------------
// 2: tiles. A block per (64 queries, head), a thread per query. The block's keys and
// values pass through shared memory 32 at a time, each read from memory once per block
// rather than once per query; each thread keeps a running maximum m and sum l for its
// query, and rescales its output when a tile raises m (the online softmax). A thread's
// query and output rows (HS floats each) would not fit in registers at HS = 128 (the build
// refuses kernels that spill), so they live in shared memory too, stored [i][thread]: at
// each step the 32 threads of a warp read 32 consecutive words, one per bank. The 32
// scores of a tile stay in registers (the loops over them are unrolled).

#define FWD2_BR 64 // queries (threads) per block
#define FWD2_BC 32 // keys and values per shared tile

// the dynamic shared memory of the forward kernel 2: K and V tiles, then two rows a thread
template <int HSP>
static size_t forward2_smem(void) {
    return (2 * FWD2_BC * HSP + 2 * HSP * FWD2_BR) * sizeof(float);
}

// (__launch_bounds__'s 1: at least one block an SM is all we ask, so that ptxas may give each
// thread the registers the 32 scores need; for sm_120 it otherwise stops at 80 and spills)
template <int HSP>
__global__ void __launch_bounds__(FWD2_BR, 1) flash_forward_kernel2(floatX *out, float *lse, const floatX *q,
                                                                  const floatX *k, const floatX *v, Heads s, float scale) {
    extern __shared__ float smem[];
    float(*k_tile)[HSP] = (float(*)[HSP])smem, (*v_tile)[HSP] = k_tile + FWD2_BC;
    float(*qs)[FWD2_BR] = (float(*)[FWD2_BR])(v_tile + FWD2_BC), (*acc)[FWD2_BR] = qs + HSP;
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T, me = threadIdx.x;
    // the last query tiles see the most keys: the first blocks to start take them
    int tile = gridDim.x - 1 - blockIdx.x, t = tile * FWD2_BR + me;
    int last = min(tile * FWD2_BR + FWD2_BR, T) - 1; // the block's last query: no key after it matters
    for (int i = 0; i < HSP; i++) {
        qs[i][me] = t < T && i < s.HS ? to_float(q[((size_t)b * T + t) * s.q_row + h * s.HS + i]) * scale : 0.0f; // scores come scaled
        acc[i][me] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 <= last; k0 += FWD2_BC) {
        __syncthreads(); // the previous tile is read by every thread
        for (int e = me; e < FWD2_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? to_float(k[kv]) : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? to_float(v[kv]) : 0.0f;
        }
        __syncthreads();
        if (t >= T || k0 > t) { continue; } // this query sees no key of the tile
        float sc[FWD2_BC];
#pragma unroll
        for (int j = 0; j < FWD2_BC; j++) { sc[j] = 0.0f; }
        for (int i = 0; i < HSP; i++) {
            float qi = qs[i][me];
#pragma unroll
            for (int j = 0; j < FWD2_BC; j++) { sc[j] += qi * k_tile[j][i]; }
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < FWD2_BC; j++) { tile_max = k0 + j <= t ? fmaxf(tile_max, sc[j]) : tile_max; }
        float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new); // 0 on the first tile
        l *= rescale;
#pragma unroll
        for (int j = 0; j < FWD2_BC; j++) {
            sc[j] = k0 + j <= t ? expf(sc[j] - m_new) : 0.0f; // (keys after t: causal)
            l += sc[j];
        }
        m = m_new;
        for (int i = 0; i < HSP; i++) {
            float a = acc[i][me] * rescale;
#pragma unroll
            for (int j = 0; j < FWD2_BC; j++) { a += sc[j] * v_tile[j][i]; }
            acc[i][me] = a;
        }
    }
    if (t < T) {
        for (int i = 0; i < s.HS; i++) { out[((size_t)b * T + t) * s.o_row + h * s.HS + i] = from_float(acc[i][me] / l); }
        lse[((size_t)b * s.NH + h) * T + t] = m + logf(l);
    }
}

// D_t = dO_t . O_t, the softmax backward's row term (sum_t2 P dP = dO . O: train_gpt2.c's
// flash_attention_backward derives it). A warp per row (b, h, t). Variants 2 and 3.
// --- shared-copy of train_gpt2.cu: rowdot_kernel ---
__global__ void rowdot_kernel(float *D, const floatA *dout, const floatA *out, Heads s) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, T = s.T;
    if (row >= (size_t)s.B * s.NH * T) { return; }
    int t = (int)(row % T), h = (int)(row / T % s.NH), b = (int)(row / T / s.NH);
    size_t o = ((size_t)b * T + t) * s.o_row + h * s.HS;
    float d = 0.0f;
    for (int i = lane; i < s.HS; i += 32) { d += (float)dout[o + i] * (float)out[o + i]; }
    d = warp_sum(d);
    if (lane == 0) { D[row] = d; }
}

#define BWD2_BK 32 // keys per block (threads) of the dk, dv kernel
#define BWD2_BQ 16 // queries per shared tile there
#define DQ2_BR 32  // queries per block (threads) of the dq kernel (three rows a thread in shared memory)

// the dynamic shared memory of the two backward kernels 2
template <int HSP>
static size_t dkdv2_smem(void) {
    return (4 * HSP * BWD2_BK + 2 * BWD2_BQ * HSP + 2 * BWD2_BQ) * sizeof(float);
}
template <int HSP>
static size_t dq2_smem(void) {
    return (2 * FWD2_BC * HSP + 3 * HSP * DQ2_BR) * sizeof(float);
}

// dk, dv: a block per (32 keys, b * NKV + key/value head), a thread per key. For each query
// head of the group, the query tiles from the one holding the block's first key to the end
// pass through shared memory with their dO, lse and D; each thread sums its key's dk, dv
// (its k, v, dk and dv rows in shared memory, [i][thread], as in the forward kernel).
template <int HSP>
__global__ void __launch_bounds__(BWD2_BK) flash_dkdv_kernel2(floatX *dk, floatX *dv, const floatX *q,
                                                               const floatX *k, const floatX *v, const floatX *dout,
                                                               const float *lse, const float *D, Heads s, float scale) {
    extern __shared__ float smem[];
    float(*kr)[BWD2_BK] = (float(*)[BWD2_BK])smem, (*vr)[BWD2_BK] = kr + HSP, (*dk_acc)[BWD2_BK] = vr + HSP;
    float(*dv_acc)[BWD2_BK] = dk_acc + HSP;
    float(*q_tile)[HSP] = (float(*)[HSP])(dv_acc + HSP), (*do_tile)[HSP] = q_tile + BWD2_BQ;
    float *lse_tile = (float *)(do_tile + BWD2_BQ), *d_tile = lse_tile + BWD2_BQ;
    int b = blockIdx.y / s.NKV, kvh = blockIdx.y % s.NKV, G = s.NH / s.NKV, T = s.T, me = threadIdx.x;
    int k0 = blockIdx.x * BWD2_BK, t2 = k0 + me;
    size_t kv = ((size_t)b * T + t2) * s.kv_row + kvh * s.HS;
    for (int i = 0; i < HSP; i++) {
        kr[i][me] = t2 < T && i < s.HS ? to_float(k[kv + i]) * scale : 0.0f; // q . (k * scale): scores come scaled
        vr[i][me] = t2 < T && i < s.HS ? to_float(v[kv + i]) : 0.0f;
        dk_acc[i][me] = dv_acc[i][me] = 0.0f;
    }
    for (int h = kvh * G; h < kvh * G + G; h++) {
        for (int q0 = k0 / BWD2_BQ * BWD2_BQ; q0 < T; q0 += BWD2_BQ) {
            __syncthreads();
            for (int e = me; e < BWD2_BQ * HSP; e += blockDim.x) {
                int j = e / HSP, i = e % HSP, t = q0 + j;
                q_tile[j][i] = t < T && i < s.HS ? to_float(q[((size_t)b * T + t) * s.q_row + h * s.HS + i]) : 0.0f;
                do_tile[j][i] = t < T && i < s.HS ? to_float(dout[((size_t)b * T + t) * s.o_row + h * s.HS + i]) : 0.0f;
            }
            for (int j = me; j < BWD2_BQ; j += blockDim.x) {
                size_t row = ((size_t)b * s.NH + h) * T + q0 + j;
                lse_tile[j] = q0 + j < T ? lse[row] : 0.0f;
                d_tile[j] = q0 + j < T ? D[row] : 0.0f;
            }
            __syncthreads();
            if (t2 >= T || q0 + BWD2_BQ <= t2) { continue; } // no query of this tile sees key t2
            float sc[BWD2_BQ], dp[BWD2_BQ];
#pragma unroll
            for (int j = 0; j < BWD2_BQ; j++) { sc[j] = dp[j] = 0.0f; }
            for (int i = 0; i < HSP; i++) {
                float ki = kr[i][me], vi = vr[i][me];
#pragma unroll
                for (int j = 0; j < BWD2_BQ; j++) {
                    sc[j] += q_tile[j][i] * ki;
                    dp[j] += do_tile[j][i] * vi;
                }
            }
            // sc becomes P, dp becomes dS = P (dP - D); both 0 for queries before t2 or past T
#pragma unroll
            for (int j = 0; j < BWD2_BQ; j++) {
                bool seen = q0 + j >= t2 && q0 + j < T;
                sc[j] = seen ? expf(sc[j] - lse_tile[j]) : 0.0f;
                dp[j] = sc[j] * (dp[j] - d_tile[j]);
            }
            for (int i = 0; i < HSP; i++) {
                float dvi = dv_acc[i][me], dki = dk_acc[i][me];
#pragma unroll
                for (int j = 0; j < BWD2_BQ; j++) {
                    dvi += sc[j] * do_tile[j][i];
                    dki += dp[j] * q_tile[j][i];
                }
                dv_acc[i][me] = dvi;
                dk_acc[i][me] = dki;
            }
        }
    }
    if (t2 < T) {
        for (int i = 0; i < s.HS; i++) {
            dk[kv + i] = from_float(dk_acc[i][me] * scale);
            dv[kv + i] = from_float(dv_acc[i][me]);
        }
    }
}

// dq: a block per (32 queries, head), a thread per query, the key and value tiles up to the
// block's last query through shared memory, as in the forward kernel 2.
template <int HSP>
__global__ void __launch_bounds__(DQ2_BR) flash_dq_kernel2(floatX *dq, const floatX *q, const floatX *k,
                                                            const floatX *v, const floatX *dout, const float *lse,
                                                            const float *D, Heads s, float scale) {
    extern __shared__ float smem[];
    float(*k_tile)[HSP] = (float(*)[HSP])smem, (*v_tile)[HSP] = k_tile + FWD2_BC;
    float(*qs)[DQ2_BR] = (float(*)[DQ2_BR])(v_tile + FWD2_BC), (*dor)[DQ2_BR] = qs + HSP, (*dq_acc)[DQ2_BR] = dor + HSP;
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T, me = threadIdx.x;
    int tile = gridDim.x - 1 - blockIdx.x, t = tile * DQ2_BR + me;
    int last = min(tile * DQ2_BR + DQ2_BR, T) - 1;
    for (int i = 0; i < HSP; i++) {
        qs[i][me] = t < T && i < s.HS ? to_float(q[((size_t)b * T + t) * s.q_row + h * s.HS + i]) * scale : 0.0f;
        dor[i][me] = t < T && i < s.HS ? to_float(dout[((size_t)b * T + t) * s.o_row + h * s.HS + i]) : 0.0f;
        dq_acc[i][me] = 0.0f;
    }
    float lse_t = t < T ? lse[((size_t)b * s.NH + h) * T + t] : 0.0f, d_t = t < T ? D[((size_t)b * s.NH + h) * T + t] : 0.0f;
    for (int k0 = 0; k0 <= last; k0 += FWD2_BC) {
        __syncthreads();
        for (int e = me; e < FWD2_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? to_float(k[kv]) : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? to_float(v[kv]) : 0.0f;
        }
        __syncthreads();
        if (t >= T || k0 > t) { continue; }
        float sc[FWD2_BC], dp[FWD2_BC];
#pragma unroll
        for (int j = 0; j < FWD2_BC; j++) { sc[j] = dp[j] = 0.0f; }
        for (int i = 0; i < HSP; i++) {
            float qi = qs[i][me], doi = dor[i][me];
#pragma unroll
            for (int j = 0; j < FWD2_BC; j++) {
                sc[j] += qi * k_tile[j][i];
                dp[j] += doi * v_tile[j][i];
            }
        }
#pragma unroll
        for (int j = 0; j < FWD2_BC; j++) { sc[j] = k0 + j <= t ? expf(sc[j] - lse_t) * (dp[j] - d_t) : 0.0f; } // dS
        for (int i = 0; i < HSP; i++) {
            float a = dq_acc[i][me];
#pragma unroll
            for (int j = 0; j < FWD2_BC; j++) { a += sc[j] * k_tile[j][i]; }
            dq_acc[i][me] = a;
        }
    }
    if (t < T) {
        for (int i = 0; i < s.HS; i++) { dq[((size_t)b * T + t) * s.q_row + h * s.HS + i] = from_float(dq_acc[i][me] * scale); }
    }
}

// ----------------------------------------------------------------------------
// 3: warp tiles. Kernel 2's thread walks its query's keys one by one, each a dot product of
// HS; here a warp takes a query and its 32 lanes score 32 keys at once (lane j: key k0 + j),
// the tile's maximum and sum are two shuffle reductions, and then each lane owns HSP/32 of the
// output (dimensions lane, lane + 32, ...) and adds the 32 keys' values, the probabilities
// passed lane to lane by shuffles. A warp takes 4 queries in turn; 4 warps share each K/V
// tile, so a block is 16 queries. The key rows in shared memory are padded to HSP + 1 floats:
// lane j reads row j, and rows HSP + 1 apart fall in different banks.

// --- shared-copy of train_gpt2.cu: FLASH_WARPS ---
#define FLASH_WARPS 4 // warps per block
// --- shared-copy of train_gpt2.cu: FLASH_ROWS ---
#define FLASH_ROWS 4 // queries (or keys) per warp
// --- shared-copy of train_gpt2.cu: FLASH_BR ---
#define FLASH_BR (FLASH_WARPS * FLASH_ROWS) // queries (or keys) per block
// --- shared-copy of train_gpt2.cu: FLASH_BC ---
#define FLASH_BC 32 // keys (or queries) per shared tile: one a lane

// --- shared-copy of train_gpt2.cu: flash_forward_kernel3 ---
template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_forward_kernel3(floatA *out, float *lse, const floatA *q,
                                                                        const floatA *k, const floatA *v, Heads s,
                                                                        float scale) {
    __shared__ float k_tile[FLASH_BC][HSP + 1], v_tile[FLASH_BC][HSP], q_rows[FLASH_BR][HSP];
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * FLASH_BR, last = min(t0 + FLASH_BR, T) - 1;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP;
        q_rows[r][i] = t0 + r < T && i < s.HS ? (float)q[((size_t)b * T + t0 + r) * s.q_row + h * s.HS + i] * scale : 0.0f;
    }
    float m[FLASH_ROWS], l[FLASH_ROWS], acc[FLASH_ROWS][HSP / 32];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { acc[r][c] = 0.0f; }
    }
    for (int k0 = 0; k0 <= last; k0 += FLASH_BC) {
        __syncthreads(); // (the first time: q_rows written)
        for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? (float)k[kv] : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? (float)v[kv] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FLASH_ROWS; r++) {
            int row = warp * FLASH_ROWS + r, t = t0 + row;
            if (t >= T || k0 > t) { continue; } // the same for the whole warp
            int key = k0 + lane;
            float sc = -INFINITY;
            if (key <= t) {
                sc = 0.0f;
                for (int i = 0; i < HSP; i++) { sc += q_rows[row][i] * k_tile[lane][i]; }
            }
            float m_new = fmaxf(m[r], warp_max(sc)), p = key <= t ? expf(sc - m_new) : 0.0f;
            float rescale = expf(m[r] - m_new);
            l[r] = l[r] * rescale + warp_sum(p);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < HSP / 32; c++) { acc[r][c] *= rescale; }
            for (int j = 0; j < FLASH_BC; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int c = 0; c < HSP / 32; c++) { acc[r][c] += pj * v_tile[j][lane + 32 * c]; }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        if (t >= T) { continue; }
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c < s.HS) { out[((size_t)b * T + t) * s.o_row + h * s.HS + lane + 32 * c] = (floatA)(acc[r][c] / l[r]); }
        }
        if (lane == 0) { lse[((size_t)b * s.NH + h) * T + t] = m[r] + logf(l[r]); }
    }
}

// dk, dv: a warp per key (4 keys a warp, 16 a block); per query tile of 32 (lane j: query
// q0 + j) the lanes compute P and dS of their query against the warp's key, then each lane
// owns HSP/32 of dk and dv and adds the 32 queries' terms, passed by shuffles.
// --- shared-copy of train_gpt2.cu: flash_dkdv_kernel3 ---
template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_dkdv_kernel3(floatA *dk, floatA *dv, const floatA *q,
                                                                     const floatA *k, const floatA *v,
                                                                     const floatA *dout, const float *lse,
                                                                     const float *D, Heads s, float scale) {
    // (dynamic shared memory: 49 KiB at HSP = 128, past the 48 KiB a block gets by default)
    extern __shared__ float smem[];
    float(*q_tile)[HSP + 1] = (float(*)[HSP + 1])smem, (*do_tile)[HSP + 1] = q_tile + FLASH_BC;
    float(*k_rows)[HSP] = (float(*)[HSP])(do_tile + FLASH_BC), (*v_rows)[HSP] = k_rows + FLASH_BR;
    int b = blockIdx.y / s.NKV, kvh = blockIdx.y % s.NKV, G = s.NH / s.NKV, T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, k0 = blockIdx.x * FLASH_BR;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP;
        size_t kv = ((size_t)b * T + k0 + r) * s.kv_row + kvh * s.HS + i;
        k_rows[r][i] = k0 + r < T && i < s.HS ? (float)k[kv] * scale : 0.0f;
        v_rows[r][i] = k0 + r < T && i < s.HS ? (float)v[kv] : 0.0f;
    }
    float dk_acc[FLASH_ROWS][HSP / 32], dv_acc[FLASH_ROWS][HSP / 32];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { dk_acc[r][c] = dv_acc[r][c] = 0.0f; }
    }
    for (int h = kvh * G; h < kvh * G + G; h++) {
        for (int q0 = k0 / FLASH_BC * FLASH_BC; q0 < T; q0 += FLASH_BC) {
            __syncthreads();
            for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
                int j = e / HSP, i = e % HSP, t = q0 + j;
                q_tile[j][i] = t < T && i < s.HS ? (float)q[((size_t)b * T + t) * s.q_row + h * s.HS + i] : 0.0f;
                do_tile[j][i] = t < T && i < s.HS ? (float)dout[((size_t)b * T + t) * s.o_row + h * s.HS + i] : 0.0f;
            }
            __syncthreads();
            int t = q0 + lane; // this lane's query
            size_t row = ((size_t)b * s.NH + h) * T + t;
            float lse_t = t < T ? lse[row] : 0.0f, d_t = t < T ? D[row] : 0.0f;
#pragma unroll
            for (int r = 0; r < FLASH_ROWS; r++) {
                int key = k0 + warp * FLASH_ROWS + r;
                if (key >= T || q0 + FLASH_BC <= key) { continue; } // no query of this tile sees it (whole warp)
                float p = 0.0f, ds = 0.0f;
                if (t < T && t >= key) {
                    float sc = 0.0f, dp = 0.0f;
                    for (int i = 0; i < HSP; i++) {
                        sc += q_tile[lane][i] * k_rows[warp * FLASH_ROWS + r][i];
                        dp += do_tile[lane][i] * v_rows[warp * FLASH_ROWS + r][i];
                    }
                    p = expf(sc - lse_t);
                    ds = p * (dp - d_t);
                }
                for (int j = 0; j < FLASH_BC; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                    for (int c = 0; c < HSP / 32; c++) {
                        dv_acc[r][c] += pj * do_tile[j][lane + 32 * c];
                        dk_acc[r][c] += dsj * q_tile[j][lane + 32 * c];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int key = k0 + warp * FLASH_ROWS + r;
        if (key >= T) { continue; }
        size_t kv = ((size_t)b * T + key) * s.kv_row + kvh * s.HS;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c >= s.HS) { continue; }
            dk[kv + lane + 32 * c] = (floatA)(dk_acc[r][c] * scale);
            dv[kv + lane + 32 * c] = (floatA)dv_acc[r][c];
        }
    }
}

// dq: as the forward kernel 3, a warp per query, the lanes across 32 keys for dS, then
// across the head for dq = dS . K.
// --- shared-copy of train_gpt2.cu: flash_dq_kernel3 ---
template <int HSP>
__global__ void __launch_bounds__(FLASH_WARPS * 32) flash_dq_kernel3(floatA *dq, const floatA *q, const floatA *k,
                                                                   const floatA *v, const floatA *dout,
                                                                   const float *lse, const float *D, Heads s,
                                                                   float scale) {
    extern __shared__ float smem[]; // (the same 49 KiB at HSP = 128 as flash_dkdv_kernel3's)
    float(*k_tile)[HSP + 1] = (float(*)[HSP + 1])smem, (*v_tile)[HSP + 1] = k_tile + FLASH_BC;
    float(*q_rows)[HSP] = (float(*)[HSP])(v_tile + FLASH_BC), (*do_rows)[HSP] = q_rows + FLASH_BR;
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * FLASH_BR, last = min(t0 + FLASH_BR, T) - 1;
    for (int e = threadIdx.x; e < FLASH_BR * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP, t = t0 + r;
        q_rows[r][i] = t < T && i < s.HS ? (float)q[((size_t)b * T + t) * s.q_row + h * s.HS + i] * scale : 0.0f;
        do_rows[r][i] = t < T && i < s.HS ? (float)dout[((size_t)b * T + t) * s.o_row + h * s.HS + i] : 0.0f;
    }
    float dq_acc[FLASH_ROWS][HSP / 32], lse_r[FLASH_ROWS], d_r[FLASH_ROWS];
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        lse_r[r] = t < T ? lse[((size_t)b * s.NH + h) * T + t] : 0.0f;
        d_r[r] = t < T ? D[((size_t)b * s.NH + h) * T + t] : 0.0f;
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) { dq_acc[r][c] = 0.0f; }
    }
    for (int k0 = 0; k0 <= last; k0 += FLASH_BC) {
        __syncthreads();
        for (int e = threadIdx.x; e < FLASH_BC * HSP; e += blockDim.x) {
            int j = e / HSP, i = e % HSP;
            size_t kv = ((size_t)b * T + k0 + j) * s.kv_row + kvh * s.HS + i;
            k_tile[j][i] = k0 + j < T && i < s.HS ? (float)k[kv] : 0.0f;
            v_tile[j][i] = k0 + j < T && i < s.HS ? (float)v[kv] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FLASH_ROWS; r++) {
            int row = warp * FLASH_ROWS + r, t = t0 + row, key = k0 + lane;
            if (t >= T || k0 > t) { continue; }
            float ds = 0.0f;
            if (key <= t) {
                float sc = 0.0f, dp = 0.0f;
                for (int i = 0; i < HSP; i++) {
                    sc += q_rows[row][i] * k_tile[lane][i];
                    dp += do_rows[row][i] * v_tile[lane][i];
                }
                ds = expf(sc - lse_r[r]) * (dp - d_r[r]);
            }
            for (int j = 0; j < FLASH_BC; j++) {
                float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
                for (int c = 0; c < HSP / 32; c++) { dq_acc[r][c] += dsj * k_tile[j][lane + 32 * c]; }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FLASH_ROWS; r++) {
        int t = t0 + warp * FLASH_ROWS + r;
        if (t >= T) { continue; }
#pragma unroll
        for (int c = 0; c < HSP / 32; c++) {
            if (lane + 32 * c < s.HS) { dq[((size_t)b * T + t) * s.q_row + h * s.HS + lane + 32 * c] = (floatA)(dq_acc[r][c] * scale); }
        }
    }
}

// the dynamic shared memory of both backward kernels 3: two padded tiles of 32 rows, two of 16
// --- shared-copy of train_gpt2.cu: flash_backward_smem (as backward3_smem) ---
template <int HSP>
static size_t backward3_smem(void) {
    return (2 * FLASH_BC * (HSP + 1) + 2 * FLASH_BR * HSP) * sizeof(float);
}

// ----------------------------------------------------------------------------
// Variant 4: tensor cores. The same tiles as variant 3, but every product of two tiles
// (S = Q K^T, O += P V, and in the backward pass S, dP = dO V^T, dV += P^T dO, dK += dS^T Q,
// dQ += dS K) is done by a warp on the tensor cores through CUDA's warp matrix functions
// (nvcuda::wmma): 16 x 16 x 16 tiles of bf16 in, fp32 sums out. Each warp owns 16 rows
// (queries, or keys in the dk/dv kernel), a block 4 warps, and the other side comes 32 at a
// time; the tiles live in shared memory in bf16 (rows padded by 16 bytes, so that successive
// rows start in different banks). What is not a product stays on the CUDA cores in fp32:
// the online softmax (two lanes a row, each half of the row's 32 scores), the rescaling of
// the output rows, P and dS. A fragment's layout across the lanes is not documented, so a
// row of one cannot be rescaled: the forward pass keeps each warp's 16 output rows in shared
// memory in fp32, loads them into accumulator fragments, adds P V and stores them back, each
// key tile. The backward pass only adds, so dK, dV (or dQ) stay in fragments throughout.
// All of it fits the 99 KiB of shared memory every target gives a block (81 KiB forward,
// 70 KiB backward at HSP = 128).
//
// bf16 in: P and dS are rounded to bf16 before their products (as FlashAttention does in
// bf16), and so are q, k, v, dout in the fp32 build: this rung is a bf16 rung in both.
// Under the emulator, include/mma.h stands in for the tensor cores (each lane computes the
// whole tile; its sums in another order than a GPU's: the same to fp32 rounding).
typedef __nv_bfloat16 bf16;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Acc;
#define TC_WARPS 4                       // warps per block
#define TC_BR (16 * TC_WARPS)            // queries (or keys) per block: 16 a warp
#define TC_BC 32                         // keys (or queries) per shared tile
#define TC_LD(n) ((n) + 8)               // the row length of a bf16 tile of n columns in shared memory
#define TC_LDF(n) ((n) + 4)              // the same for an fp32 tile (16 bytes of padding either way)

// n rows of a head from position t0, into a bf16 tile of TC_LD(HSP) numbers a row: zeros
// past T and HS
template <int HSP>
__device__ void load_rows_bf16(bf16 *tile, const floatA *x, int b, int t0, int n, int row, int off, const Heads &s) {
    for (int e = threadIdx.x; e < n * HSP; e += blockDim.x) {
        int r = e / HSP, i = e % HSP;
        tile[r * TC_LD(HSP) + i] = (bf16)(t0 + r < s.T && i < s.HS ? (float)x[((size_t)b * s.T + t0 + r) * row + off + i] : 0.0f);
    }
}

// c (16 x 16 nb, fp32, ldc) = a (16 x K, bf16 row-major, lda) times the transpose of b (16 nb
// rows of K, bf16, ldb): a warp's scores against 16 nb keys (or queries). Only the first nb
// column blocks: the caller stops where the causal mask or T hides all the rest.
template <int K>
__device__ void warp_mma_abt(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb, int nb) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, bf16, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, bf16, nvcuda::wmma::col_major> fb; // (b's rows, read as columns)
    Acc acc;
    for (int n = 0; n < nb; n++) {
        nvcuda::wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < K; kk += 16) {
            nvcuda::wmma::load_matrix_sync(fa, a + kk, lda);
            nvcuda::wmma::load_matrix_sync(fb, b + (size_t)16 * n * ldb + kk, ldb);
            nvcuda::wmma::mma_sync(acc, fa, fb, acc);
        }
        nvcuda::wmma::store_matrix_sync(c + 16 * n, acc, ldc, nvcuda::wmma::mem_row_major);
    }
}

// acc[n] (16 x 16, columns 16n..) += a (16 x 16 kb, bf16 row-major, lda) b (16 kb x N, bf16
// row-major, ldb), for the N / 16 column blocks: a warp's rows of a gradient (or output) plus
// probabilities times values. Only the first kb blocks of a's columns (the rest are masked).
template <int N>
__device__ void warp_mma_ab_add(Acc (&acc)[N / 16], const bf16 *a, int lda, const bf16 *b, int ldb, int kb) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, bf16, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, bf16, nvcuda::wmma::row_major> fb;
    for (int kk = 0; kk < kb; kk++) {
        nvcuda::wmma::load_matrix_sync(fa, a + 16 * kk, lda);
#pragma unroll
        for (int n = 0; n < N / 16; n++) {
            nvcuda::wmma::load_matrix_sync(fb, b + (size_t)16 * kk * ldb + 16 * n, ldb);
            nvcuda::wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

// the shared memory of the forward kernel: Q (64 rows), K, V (32) tiles in bf16, and per warp
// its scores (fp32), probabilities (bf16) and output rows (fp32)
template <int HSP>
static size_t forward4_smem(void) {
    return (size_t)(TC_BR + 2 * TC_BC) * TC_LD(HSP) * sizeof(bf16) +
           TC_WARPS * 16 * (TC_LDF(TC_BC) * sizeof(float) + TC_LD(TC_BC) * sizeof(bf16) + TC_LDF(HSP) * sizeof(float));
}

template <int HSP>
__global__ void __launch_bounds__(TC_WARPS * 32) flash_forward_kernel4(floatA *out, float *lse, const floatA *q,
                                                                     const floatA *k, const floatA *v, Heads s,
                                                                     float scale) {
    extern __shared__ __align__(128) char smem4[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16 *qs = (bf16 *)smem4, *ks = qs + TC_BR * TC_LD(HSP), *vs = ks + TC_BC * TC_LD(HSP);
    float *S = (float *)(vs + TC_BC * TC_LD(HSP)) + warp * 16 * TC_LDF(TC_BC); // this warp's 16 x 32 scores,
    bf16 *P = (bf16 *)((float *)(vs + TC_BC * TC_LD(HSP)) + TC_WARPS * 16 * TC_LDF(TC_BC)) + warp * 16 * TC_LD(TC_BC);
    float *O = (float *)((bf16 *)((float *)(vs + TC_BC * TC_LD(HSP)) + TC_WARPS * 16 * TC_LDF(TC_BC)) +
                         TC_WARPS * 16 * TC_LD(TC_BC)) + warp * 16 * TC_LDF(HSP); // probabilities, 16 output rows
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * TC_BR, last = min(t0 + TC_BR, T) - 1;
    int w0 = t0 + 16 * warp, w_last = min(w0 + 15, T - 1); // this warp's queries
    int r = lane / 2, half = lane % 2, t = w0 + r;         // two lanes a row, each half of its columns
    load_rows_bf16<HSP>(qs, q, b, t0, TC_BR, s.q_row, h * s.HS, s);
    for (int i = half; i < HSP; i += 2) { O[r * TC_LDF(HSP) + i] = 0.0f; }
    float m = -INFINITY, l = 0.0f; // the row's running maximum and sum (the same in both lanes)
    Acc acc[HSP / 16];
    for (int k0 = 0; k0 <= last; k0 += TC_BC) {
        __syncthreads(); // (the previous tile's products are done with ks and vs; the first time: qs written)
        load_rows_bf16<HSP>(ks, k, b, k0, TC_BC, s.kv_row, kvh * s.HS, s);
        load_rows_bf16<HSP>(vs, v, b, k0, TC_BC, s.kv_row, kvh * s.HS, s);
        __syncthreads();
        if (w0 > w_last || k0 > w_last) { continue; } // no query of this warp sees a key of this tile (whole warp)
        int kb = (min(k0 + TC_BC - 1, w_last) - k0) / 16 + 1; // the 16-key blocks with a key some row sees
        warp_mma_abt<HSP>(S, TC_LDF(TC_BC), qs + 16 * warp * TC_LD(HSP), TC_LD(HSP), ks, TC_LD(HSP), kb);
        __syncwarp();
        // the online softmax of row r over this tile's keys k0 + j, j < 16 kb
        float mx = -INFINITY;
        for (int j = half; j < 16 * kb; j += 2) {
            if (t < T && k0 + j <= t) { mx = fmaxf(mx, S[r * TC_LDF(TC_BC) + j] * scale); }
        }
        float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        float rescale = m_new == -INFINITY ? 1.0f : expf(m - m_new), sum = 0.0f; // (-INFINITY: a row past T)
        for (int j = half; j < 16 * kb; j += 2) {
            float p = t < T && k0 + j <= t ? expf(S[r * TC_LDF(TC_BC) + j] * scale - m_new) : 0.0f;
            P[r * TC_LD(TC_BC) + j] = (bf16)p;
            sum += p; // (in fp32, as FlashAttention does: lse exact to fp32)
        }
        l = l * rescale + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
        m = m_new;
        for (int i = half; i < HSP; i += 2) { O[r * TC_LDF(HSP) + i] *= rescale; }
        __syncwarp();
        // O += P V: the output rows into fragments, the product added, and back
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) { nvcuda::wmma::load_matrix_sync(acc[n], O + 16 * n, TC_LDF(HSP), nvcuda::wmma::mem_row_major); }
        warp_mma_ab_add<HSP>(acc, P, TC_LD(TC_BC), vs, TC_LD(HSP), kb);
#pragma unroll
        for (int n = 0; n < HSP / 16; n++) { nvcuda::wmma::store_matrix_sync(O + 16 * n, acc[n], TC_LDF(HSP), nvcuda::wmma::mem_row_major); }
    }
    __syncwarp();
    if (t < T) {
        for (int i = half; i < s.HS; i += 2) { out[((size_t)b * T + t) * s.o_row + h * s.HS + i] = (floatA)(O[r * TC_LDF(HSP) + i] / l); }
        if (half == 0) { lse[((size_t)b * s.NH + h) * T + t] = m + logf(l); }
    }
}

// the shared memory of both backward kernels: the block's 64 rows of two tensors and a walked
// tile of 32 rows of two others (bf16), the walked rows' lse and D, and per warp an fp32
// 16 x 32 tile (scores, then dP) and two bf16 ones (P, dS)
template <int HSP>
static size_t backward4_smem(void) {
    return (size_t)2 * (TC_BR + TC_BC) * TC_LD(HSP) * sizeof(bf16) + 2 * TC_BC * sizeof(float) +
           TC_WARPS * 16 * (TC_LDF(TC_BC) * sizeof(float) + 2 * TC_LD(TC_BC) * sizeof(bf16));
}
template <int HSP> struct Backward4Smem {
    bf16 *a, *b, *c, *d, *ph, *dsh; // a, b: the block's rows; c, d: the walked tile; this warp's P and dS
    float *lse, *D, *x;             // the walked rows' lse and D; this warp's scores, then dP
    __device__ Backward4Smem(char *smem, int warp) {
        a = (bf16 *)smem;
        b = a + TC_BR * TC_LD(HSP);
        c = b + TC_BR * TC_LD(HSP);
        d = c + TC_BC * TC_LD(HSP);
        lse = (float *)(d + TC_BC * TC_LD(HSP));
        D = lse + TC_BC;
        x = D + TC_BC + warp * 16 * TC_LDF(TC_BC);
        ph = (bf16 *)(D + TC_BC + TC_WARPS * 16 * TC_LDF(TC_BC)) + warp * 16 * TC_LD(TC_BC);
        dsh = (bf16 *)(D + TC_BC + TC_WARPS * 16 * TC_LDF(TC_BC)) + (TC_WARPS + warp) * 16 * TC_LD(TC_BC);
    }
};

// a warp's 16 rows of a gradient, from fragments to dx (scaled), through its fp32 tile x: one
// 16 x 16 block at a time (x holds 16 x 32); rows past T and columns past HS not written
template <int HSP>
__device__ void store_rows(floatA *dx, const Acc (&acc)[HSP / 16], float *x, float scale, int b, int t0, int row, int off,
                           const Heads &s) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) {
        __syncwarp(); // (the lanes are done reading x)
        nvcuda::wmma::store_matrix_sync(x, acc[n], TC_LDF(TC_BC), nvcuda::wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int r = e / 16, i = 16 * n + e % 16;
            if (t0 + r < s.T && i < s.HS) { dx[((size_t)b * s.T + t0 + r) * row + off + i] = (floatA)(x[r * TC_LDF(TC_BC) + e % 16] * scale); }
        }
    }
}

// dk, dv: a block per 64 keys of a key/value head (16 a warp), walking the query tiles of 32
// from the first that sees them, for each query head of the group. Per tile, a warp:
// S^T = K Q^T, P^T = exp(S^T scale - lse), then dP^T = V dO^T and dS^T = P^T (dP^T - D) (the
// elementwise parts two lanes a key), then dV += P^T dO and dK += dS^T Q.
template <int HSP>
__global__ void __launch_bounds__(TC_WARPS * 32, 1) flash_dkdv_kernel4(floatA *dk, floatA *dv, const floatA *q,
                                                                  const floatA *k, const floatA *v,
                                                                  const floatA *dout, const float *lse,
                                                                  const float *D, Heads s, float scale) {
    extern __shared__ __align__(128) char smem4[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    Backward4Smem<HSP> sm(smem4, warp); // a, b: K, V; c, d: Q, dO
    int b = blockIdx.y / s.NKV, kvh = blockIdx.y % s.NKV, G = s.NH / s.NKV, T = s.T;
    int k0 = blockIdx.x * TC_BR, w0 = k0 + 16 * warp, w_last = min(w0 + 15, T - 1); // this warp's keys
    int r = lane / 2, half = lane % 2, key = w0 + r;
    load_rows_bf16<HSP>(sm.a, k, b, k0, TC_BR, s.kv_row, kvh * s.HS, s);
    load_rows_bf16<HSP>(sm.b, v, b, k0, TC_BR, s.kv_row, kvh * s.HS, s);
    Acc dk_acc[HSP / 16], dv_acc[HSP / 16];
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) {
        nvcuda::wmma::fill_fragment(dk_acc[n], 0.0f);
        nvcuda::wmma::fill_fragment(dv_acc[n], 0.0f);
    }
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        for (int q0 = k0; q0 < T; q0 += TC_BC) {
            __syncthreads(); // (the previous tile's products are done with c, d; the first time: a, b written)
            load_rows_bf16<HSP>(sm.c, q, b, q0, TC_BC, s.q_row, h * s.HS, s);
            load_rows_bf16<HSP>(sm.d, dout, b, q0, TC_BC, s.o_row, h * s.HS, s);
            for (int j = threadIdx.x; j < TC_BC; j += blockDim.x) {
                size_t row = ((size_t)b * s.NH + h) * T + q0 + j;
                sm.lse[j] = q0 + j < T ? lse[row] : 0.0f;
                sm.D[j] = q0 + j < T ? D[row] : 0.0f;
            }
            __syncthreads();
            if (w0 > w_last || q0 + TC_BC <= w0) { continue; } // no query of the tile sees a key of this warp
            int nb = (min(T, q0 + TC_BC) - q0 + 15) / 16;      // the 16-query blocks that exist
            warp_mma_abt<HSP>(sm.x, TC_LDF(TC_BC), sm.a + 16 * warp * TC_LD(HSP), TC_LD(HSP), sm.c, TC_LD(HSP), nb);
            __syncwarp();
            float p[TC_BC / 2]; // (this lane's columns j = 2 c + half; unrolled, so p stays in registers)
#pragma unroll
            for (int c = 0; c < TC_BC / 2; c++) { // key `key` against query q0 + j
                int j = 2 * c + half;
                bool seen = j < 16 * nb && key < T && key <= q0 + j && q0 + j < T;
                p[c] = seen ? expf(sm.x[r * TC_LDF(TC_BC) + j] * scale - sm.lse[j]) : 0.0f;
                if (j < 16 * nb) { sm.ph[r * TC_LD(TC_BC) + j] = (bf16)p[c]; }
            }
            __syncwarp();
            warp_mma_abt<HSP>(sm.x, TC_LDF(TC_BC), sm.b + 16 * warp * TC_LD(HSP), TC_LD(HSP), sm.d, TC_LD(HSP), nb); // dP^T
            __syncwarp();
#pragma unroll
            for (int c = 0; c < TC_BC / 2; c++) {
                int j = 2 * c + half;
                if (j < 16 * nb) { sm.dsh[r * TC_LD(TC_BC) + j] = (bf16)(p[c] * (sm.x[r * TC_LDF(TC_BC) + j] - sm.D[j])); } // (0 where unseen)
            }
            __syncwarp();
            warp_mma_ab_add<HSP>(dv_acc, sm.ph, TC_LD(TC_BC), sm.d, TC_LD(HSP), nb);  // dV += P^T dO
            warp_mma_ab_add<HSP>(dk_acc, sm.dsh, TC_LD(TC_BC), sm.c, TC_LD(HSP), nb); // dK += dS^T Q
        }
    }
    store_rows<HSP>(dk, dk_acc, sm.x, scale, b, w0, s.kv_row, kvh * s.HS, s);
    store_rows<HSP>(dv, dv_acc, sm.x, 1.0f, b, w0, s.kv_row, kvh * s.HS, s);
}

// dq: a block per 64 queries of a head (16 a warp), walking the key tiles of 32 before them.
// Per tile, a warp: S = Q K^T and P, dP = dO V^T and dS = P (dP - D) (the elementwise parts
// two lanes a query), then dQ += dS K.
template <int HSP>
__global__ void __launch_bounds__(TC_WARPS * 32) flash_dq_kernel4(floatA *dq, const floatA *q, const floatA *k,
                                                                const floatA *v, const floatA *dout, const float *lse,
                                                                const float *D, Heads s, float scale) {
    extern __shared__ __align__(128) char smem4[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    Backward4Smem<HSP> sm(smem4, warp); // a, b: Q, dO; c, d: K, V
    int b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, kvh = h / (s.NH / s.NKV), T = s.T;
    int tile = gridDim.x - 1 - blockIdx.x, t0 = tile * TC_BR, last = min(t0 + TC_BR, T) - 1;
    int w0 = t0 + 16 * warp, w_last = min(w0 + 15, T - 1); // this warp's queries
    int r = lane / 2, half = lane % 2, t = w0 + r;
    load_rows_bf16<HSP>(sm.a, q, b, t0, TC_BR, s.q_row, h * s.HS, s);
    load_rows_bf16<HSP>(sm.b, dout, b, t0, TC_BR, s.o_row, h * s.HS, s);
    size_t row = ((size_t)b * s.NH + h) * T + t;
    float lse_t = t < T ? lse[row] : 0.0f, D_t = t < T ? D[row] : 0.0f;
    Acc dq_acc[HSP / 16];
#pragma unroll
    for (int n = 0; n < HSP / 16; n++) { nvcuda::wmma::fill_fragment(dq_acc[n], 0.0f); }
    for (int k0 = 0; k0 <= last; k0 += TC_BC) {
        __syncthreads(); // (the previous tile's products are done with c, d; the first time: a, b written)
        load_rows_bf16<HSP>(sm.c, k, b, k0, TC_BC, s.kv_row, kvh * s.HS, s);
        load_rows_bf16<HSP>(sm.d, v, b, k0, TC_BC, s.kv_row, kvh * s.HS, s);
        __syncthreads();
        if (w0 > w_last || k0 > w_last) { continue; } // no query of this warp sees a key of this tile
        int kb = (min(k0 + TC_BC - 1, w_last) - k0) / 16 + 1;
        warp_mma_abt<HSP>(sm.x, TC_LDF(TC_BC), sm.a + 16 * warp * TC_LD(HSP), TC_LD(HSP), sm.c, TC_LD(HSP), kb);
        __syncwarp();
        float p[TC_BC / 2]; // (this lane's columns j = 2 c + half; unrolled, so p stays in registers)
#pragma unroll
        for (int c = 0; c < TC_BC / 2; c++) { // query t against key k0 + j
            int j = 2 * c + half;
            p[c] = j < 16 * kb && t < T && k0 + j <= t ? expf(sm.x[r * TC_LDF(TC_BC) + j] * scale - lse_t) : 0.0f;
        }
        __syncwarp();
        warp_mma_abt<HSP>(sm.x, TC_LDF(TC_BC), sm.b + 16 * warp * TC_LD(HSP), TC_LD(HSP), sm.d, TC_LD(HSP), kb); // dP
        __syncwarp();
#pragma unroll
        for (int c = 0; c < TC_BC / 2; c++) {
            int j = 2 * c + half;
            if (j < 16 * kb) { sm.dsh[r * TC_LD(TC_BC) + j] = (bf16)(p[c] * (sm.x[r * TC_LDF(TC_BC) + j] - D_t)); }
        }
        __syncwarp();
        warp_mma_ab_add<HSP>(dq_acc, sm.dsh, TC_LD(TC_BC), sm.c, TC_LD(HSP), kb); // dQ += dS K
    }
    store_rows<HSP>(dq, dq_acc, sm.x, scale, b, w0, s.q_row, h * s.HS, s);
}

// ----------------------------------------------------------------------------
// launchers: variant N's forward and backward. scratch: variant 1's (B,NH,T,T) probabilities
// and their gradient (2 B NH T T floats), or variants 2-3's D (B NH T floats).

#define VARIANTS 4
static const char *variant_names[VARIANTS + 1] = {"", "1 materialised", "2 tiles", "3 warp tiles", "4 tensor cores"};

// Variant 4's shared memory (81 KiB forward, 70 KiB backward at HS = 128) is more than some
// GPUs give a block (an RTX 50xx: 99 KiB): 0 where it fits, else the KiB it needs
template <int HSP>
static int variant4_misfit(void) {
    int device;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    size_t need = forward4_smem<HSP>() > backward4_smem<HSP>() ? forward4_smem<HSP>() : backward4_smem<HSP>();
    return need <= prop.sharedMemPerBlockOptin ? 0 : (int)((need + 1023) / 1024);
}

// HSP: the head size rounded up to a multiple of 32, what variants 2 and 3 size their tiles and
// per-lane slices by (the rows' numbers past HS are zeros in shared memory: they add nothing)
template <int HSP>
static void forward_hs(int variant, floatX *out, float *lse, const floatX *q, const floatX *k, const floatX *v, Heads s,
                       float *scratch) {
    float scale = 1.0f / sqrtf((float)s.HS);
    size_t rows = (size_t)s.B * s.NH * s.T;
    if (variant == 1) {
        scores_kernel1<<<ceil_div(rows * s.T, 256), 256>>>(scratch, q, k, s, scale);
        softmax_kernel1<<<ceil_div(rows, 8), 256>>>(scratch, lse, s);
        pv_kernel1<<<ceil_div((size_t)s.B * s.T * s.NH * s.HS, 256), 256>>>(out, scratch, v, s);
    } else if (variant == 2) {
        size_t smem = forward2_smem<HSP>();
        cudaCheck(cudaFuncSetAttribute(flash_forward_kernel2<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        flash_forward_kernel2<HSP><<<dim3(ceil_div(s.T, FWD2_BR), s.B * s.NH), FWD2_BR, smem>>>(out, lse, q, k, v, s, scale);
    } else if (variant == 3) {
        flash_forward_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32>>>(out, lse, q, k, v, s, scale);
    } else {
        size_t smem = forward4_smem<HSP>();
        cudaCheck(cudaFuncSetAttribute(flash_forward_kernel4<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        flash_forward_kernel4<HSP><<<dim3(ceil_div(s.T, TC_BR), s.B * s.NH), TC_WARPS * 32, smem>>>(out, lse, q, k, v, s, scale);
    }
    cudaCheck(cudaGetLastError());
}

template <int HSP>
static void backward_hs(int variant, floatX *dq, floatX *dk, floatX *dv, const floatX *q, const floatX *k,
                        const floatX *v, const floatX *out, const floatX *dout, const float *lse, Heads s, float *scratch) {
    float scale = 1.0f / sqrtf((float)s.HS);
    size_t rows = (size_t)s.B * s.NH * s.T;
    if (variant == 1) {
        float *att = scratch, *datt = scratch + rows * s.T;
        softmax_backward_kernel1<<<ceil_div(rows, 8), 256>>>(datt, att, dout, v, s, scale);
        dq_kernel1<<<ceil_div((size_t)s.B * s.T * s.NH * s.HS, 256), 256>>>(dq, datt, k, s);
        dkdv_kernel1<<<ceil_div((size_t)s.B * s.T * s.NKV * s.HS, 256), 256>>>(dk, dv, att, datt, q, dout, s);
    } else {
        float *D = scratch;
        rowdot_kernel<<<ceil_div(rows, 8), 256>>>(D, dout, out, s);
        if (variant == 2) {
            size_t smem_kv = dkdv2_smem<HSP>(), smem_q = dq2_smem<HSP>();
            cudaCheck(cudaFuncSetAttribute(flash_dkdv_kernel2<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
            cudaCheck(cudaFuncSetAttribute(flash_dq_kernel2<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
            flash_dkdv_kernel2<HSP><<<dim3(ceil_div(s.T, BWD2_BK), s.B * s.NKV), BWD2_BK, smem_kv>>>(dk, dv, q, k, v, dout, lse,
                                                                                                  D, s, scale);
            flash_dq_kernel2<HSP><<<dim3(ceil_div(s.T, DQ2_BR), s.B * s.NH), DQ2_BR, smem_q>>>(dq, q, k, v, dout, lse, D, s,
                                                                                            scale);
        } else if (variant == 3) {
            size_t smem = backward3_smem<HSP>();
            cudaCheck(cudaFuncSetAttribute(flash_dkdv_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            cudaCheck(cudaFuncSetAttribute(flash_dq_kernel3<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            flash_dkdv_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NKV), FLASH_WARPS * 32, smem>>>(dk, dv, q, k, v, dout, lse,
                                                                                                   D, s, scale);
            flash_dq_kernel3<HSP><<<dim3(ceil_div(s.T, FLASH_BR), s.B * s.NH), FLASH_WARPS * 32, smem>>>(dq, q, k, v, dout, lse, D,
                                                                                                s, scale);
        } else {
            size_t smem = backward4_smem<HSP>();
            cudaCheck(cudaFuncSetAttribute(flash_dkdv_kernel4<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            cudaCheck(cudaFuncSetAttribute(flash_dq_kernel4<HSP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            flash_dkdv_kernel4<HSP><<<dim3(ceil_div(s.T, TC_BR), s.B * s.NKV), TC_WARPS * 32, smem>>>(dk, dv, q, k, v, dout, lse, D,
                                                                                               s, scale);
            flash_dq_kernel4<HSP><<<dim3(ceil_div(s.T, TC_BR), s.B * s.NH), TC_WARPS * 32, smem>>>(dq, q, k, v, dout, lse, D, s,
                                                                                            scale);
        }
    }
    cudaCheck(cudaGetLastError());
}

static void attention_forward(int variant, floatX *out, float *lse, const floatX *q, const floatX *k, const floatX *v,
                              Heads s, float *scratch) {
    switch ((s.HS + 31) / 32) {
    case 1: forward_hs<32>(variant, out, lse, q, k, v, s, scratch); break;
    case 2: forward_hs<64>(variant, out, lse, q, k, v, s, scratch); break;
    case 3: forward_hs<96>(variant, out, lse, q, k, v, s, scratch); break;
    case 4: forward_hs<128>(variant, out, lse, q, k, v, s, scratch); break;
    default: fprintf(stderr, "Error: head size %d: these kernels take 1 to 128\n", s.HS); exit(EXIT_FAILURE);
    }
}

static void attention_backward(int variant, floatX *dq, floatX *dk, floatX *dv, const floatX *q, const floatX *k,
                               const floatX *v, const floatX *out, const floatX *dout, const float *lse, Heads s,
                               float *scratch) {
    switch ((s.HS + 31) / 32) {
    case 1: backward_hs<32>(variant, dq, dk, dv, q, k, v, out, dout, lse, s, scratch); break;
    case 2: backward_hs<64>(variant, dq, dk, dv, q, k, v, out, dout, lse, s, scratch); break;
    case 3: backward_hs<96>(variant, dq, dk, dv, q, k, v, out, dout, lse, s, scratch); break;
    case 4: backward_hs<128>(variant, dq, dk, dv, q, k, v, out, dout, lse, s, scratch); break;
    default: fprintf(stderr, "Error: head size %d: these kernels take 1 to 128\n", s.HS); exit(EXIT_FAILURE);
    }
}

// 0 where the variant runs on this GPU at head size HS; else the KiB of shared memory it needs
static int variant_misfit(int variant, int HS) {
    if (variant != 4) { return 0; }
    switch ((HS + 31) / 32) {
    case 1: return variant4_misfit<32>();
    case 2: return variant4_misfit<64>();
    case 3: return variant4_misfit<96>();
    default: return variant4_misfit<128>();
    }
}

static size_t scratch_floats(int variant, Heads s) {
    size_t rows = (size_t)s.B * s.NH * s.T;
    return variant == 1 ? 2 * rows * s.T : rows;
}

// ----------------------------------------------------------------------------
// the checks

static int num_passed = 0, num_failed = 0;

// A shape and its layout: fused = GPT-2's qkv (B,T,3C) in one array, else Llama's q, k, v apart.
struct Case {
    int B, T, NH, NKV, HS, fused;
};

// Tolerances, |ours - ref| <= atol * max|ref| + rtol * |ref|, max|ref| over out, or over
// each of dq, dk, dv apart. The reference works in double from the same floatX inputs, so
// the differences are the kernels' fp32 sums (fp32 build, seeds 1-10 and 1337 under the
// emulator: at most 1.7e-6 of max|ref|, so 2e-5 and 1e-4 leave a margin of 10) and, in
// bf16, the rounding of each output to 8 bits (2^-9 relative; out's worst was 2.1e-3 of
// max|ref|). The gradients in bf16 carry one more error: variants 2 and 3 compute the
// softmax's row term D = dO . O from out as stored, rounded to bf16 (as FlashAttention
// does), and a key's dk sums that error over every query after it: one entry 1/40 of the
// largest was 7% off, the worst 4.6e-3 of its gradient's max|ref|. Hence the gradients'
// looser bf16 bound. (It lets through a 1% error in dk; the fp32 build, also in make test,
// does not: a dk scaled by 1.01 fails it.)
#if defined(ENABLE_FP32)
static const double RTOL = 1e-4, ATOL = 2e-5, RTOL_GRAD = 1e-4, ATOL_GRAD = 2e-5;
#else
static const double RTOL = 3.9e-3, ATOL = 1e-3, RTOL_GRAD = 1.6e-2, ATOL_GRAD = 8e-3;
#endif
// Variant 4 multiplies bf16 tiles: P and dS are rounded to bf16 before their products, an
// error of up to 2^-9 of each term, so an output is off by up to 2^-9 of the largest |v| it
// averages, however small it is itself. So a bound on the scale of the whole, no relative
// part: seeds 1-10 and 1337 under the emulator, worst out 3.0e-3 and gradients 5.6e-3 of
// max|ref| in bf16, 1.6e-3 and 3.5e-3 in fp32 (there its inputs are made bf16 numbers
// first, as it reads them: see check_case). 6e-3 and 8e-3 in both builds, under the 1% a dk
// scaled by 1.01 is off at its largest entries (which fails 7 of the 8 shapes; 0.5% passes).
static const double ATOL_TC = 6e-3, ATOL_TC_GRAD = 8e-3;

// ours (floatX on the device, count n at stride 1) against ref; prints the worst errors
// (scale: max|ref| where it is at least 1e-3 of `whole`, else `whole`: a gradient that is all
// zeros but for rounding, dq and dk at T = 1, is judged on the scale of the others)
static bool check(const char *what, const std::vector<floatX> &ours, const double *ref, size_t n, double rtol,
                  double atol, double *worst, double whole = 0.0) {
    double max_ref = 0.0;
    for (size_t i = 0; i < n; i++) { max_ref = fmax(max_ref, fabs(ref[i])); }
    if (max_ref < 1e-3 * whole) { max_ref = whole; }
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)to_float(ours[i]) - ref[i]);
        if (!(err <= atol * max_ref + rtol * fabs(ref[i]))) {
            if (ok) { printf("    %s[%zu]: %.6g, expected %.6g\n", what, i, (double)to_float(ours[i]), ref[i]); }
            ok = false;
        }
        *worst = fmax(*worst, err / fmax(max_ref, 1e-30));
    }
    return ok;
}

static void check_case(Case c, int first, int last) {
    Heads s = {c.B, c.T, c.NH, c.NKV, c.HS, 0, 0, c.NH * c.HS};
    size_t BT = (size_t)c.B * c.T, qn = BT * c.NH * c.HS, kvn = BT * c.NKV * c.HS;
    // the inputs, in one array: fused (B,T, q | k | v), or q, then k, then v
    size_t q_off = 0, k_off, v_off;
    if (c.fused) {
        s.q_row = s.kv_row = 3 * c.NH * c.HS;
        k_off = (size_t)c.NH * c.HS;
        v_off = 2 * k_off;
    } else {
        s.q_row = c.NH * c.HS;
        s.kv_row = c.NKV * c.HS;
        k_off = qn;
        v_off = qn + kvn;
    }
    size_t all = qn + 2 * kvn;
    // where dq's, dk's and dv's elements are in the one array
    std::vector<size_t> parts[3];
    for (size_t p = 0; p < BT; p++) {
        for (int i = 0; i < c.NH * c.HS; i++) { parts[0].push_back(q_off + p * s.q_row + i); }
        for (int i = 0; i < c.NKV * c.HS; i++) {
            parts[1].push_back(k_off + p * s.kv_row + i);
            parts[2].push_back(v_off + p * s.kv_row + i);
        }
    }
    std::vector<floatX> qkv(all), dout(qn);
    // scores spread over a few units (inputs in [-2, 2) at HS = 64: a score's standard
    // deviation is 4/3), so later key tiles often raise a row's maximum
    for (size_t i = 0; i < all; i++) { qkv[i] = from_float(2.0f * rng_uniform()); }
    for (size_t i = 0; i < qn; i++) { dout[i] = from_float(rng_uniform()); }
    std::vector<double> out(qn), lse((size_t)c.B * c.NH * c.T), dqkv(all, 0.0);
    attention_cpu(out.data(), lse.data(), dqkv.data() + q_off, dqkv.data() + k_off, dqkv.data() + v_off, qkv.data() + q_off,
                  qkv.data() + k_off, qkv.data() + v_off, dout.data(), s);
    floatX *d_qkv, *d_dqkv, *d_out, *d_dout;
    float *d_lse, *d_scratch;
    cudaCheck(cudaMalloc(&d_qkv, all * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dqkv, all * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, qn * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dout, qn * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_lse, lse.size() * sizeof(float)));
    cudaCheck(cudaMalloc(&d_scratch, scratch_floats(1, s) * sizeof(float)));
    cudaCheck(cudaMemcpy(d_qkv, qkv.data(), all * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_dout, dout.data(), qn * sizeof(floatX), cudaMemcpyHostToDevice));
    for (int variant = first; variant <= last; variant++) {
        int misfit = variant_misfit(variant, c.HS);
        if (misfit > 0) {
            printf("%-16s B %d T %4d NH %2d NKV %2d HS %3d: needs %d KiB of shared memory a block, more than this GPU"
                   " gives: not run\n", variant_names[variant], c.B, c.T, c.NH, c.NKV, c.HS, misfit);
            continue;
        }
#if defined(ENABLE_FP32)
        if (variant == 4) { // bf16 numbers in (the reference's inputs too): what variant 4 reads
            for (size_t i = 0; i < all; i++) { qkv[i] = (float)__nv_bfloat16(qkv[i]); }
            for (size_t i = 0; i < qn; i++) { dout[i] = (float)__nv_bfloat16(dout[i]); }
            std::fill(dqkv.begin(), dqkv.end(), 0.0); // (attention_cpu adds to the gradients)
            attention_cpu(out.data(), lse.data(), dqkv.data() + q_off, dqkv.data() + k_off, dqkv.data() + v_off,
                          qkv.data() + q_off, qkv.data() + k_off, qkv.data() + v_off, dout.data(), s);
            cudaCheck(cudaMemcpy(d_qkv, qkv.data(), all * sizeof(floatX), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d_dout, dout.data(), qn * sizeof(floatX), cudaMemcpyHostToDevice));
        }
#endif
        bool tc = variant == 4;
        // poison the outputs (NaN in both floatX), so that anything not written shows
        cudaCheck(cudaMemset(d_out, 0xFF, qn * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dqkv, 0xFF, all * sizeof(floatX)));
        cudaCheck(cudaMemset(d_lse, 0xFF, lse.size() * sizeof(float)));
        attention_forward(variant, d_out, d_lse, d_qkv + q_off, d_qkv + k_off, d_qkv + v_off, s, d_scratch);
        attention_backward(variant, d_dqkv + q_off, d_dqkv + k_off, d_dqkv + v_off, d_qkv + q_off, d_qkv + k_off,
                           d_qkv + v_off, d_out, d_dout, d_lse, s, d_scratch);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> h_out(qn), h_dqkv(all);
        std::vector<float> h_lse(lse.size());
        cudaCheck(cudaMemcpy(h_out.data(), d_out, qn * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h_dqkv.data(), d_dqkv, all * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h_lse.data(), d_lse, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double w_out = 0.0, w_grad = 0.0, w_lse = 0.0;
        bool ok = check("out", h_out, out.data(), qn, tc ? 0.0 : RTOL, tc ? ATOL_TC : ATOL, &w_out);
        // dq, dk and dv each judged on its own scale (dk's entries can be much smaller than dq's)
        const char *part_names[3] = {"dq", "dk", "dv"};
        double whole = 0.0;
        for (size_t i = 0; i < all; i++) { whole = fmax(whole, fabs(dqkv[i])); }
        for (int part = 0; part < 3; part++) {
            std::vector<floatX> ours_p(parts[part].size());
            std::vector<double> ref_p(parts[part].size());
            for (size_t i = 0; i < parts[part].size(); i++) {
                ours_p[i] = h_dqkv[parts[part][i]];
                ref_p[i] = dqkv[parts[part][i]];
            }
            ok &= check(part_names[part], ours_p, ref_p.data(), ref_p.size(), tc ? 0.0 : RTOL_GRAD,
                        tc ? ATOL_TC_GRAD : ATOL_GRAD, &w_grad, whole);
        }
        for (size_t i = 0; i < lse.size(); i++) {
            double err = fabs(h_lse[i] - lse[i]);
            w_lse = fmax(w_lse, err);
            if (!(err <= 1e-4 * fmax(1.0, fabs(lse[i])))) { ok = false; }
        }
        printf("%-16s B %d T %4d NH %2d NKV %2d HS %3d %-6s  max err/max|ref|: out %.1e, dq dk dv %.1e; lse %.1e  %s\n",
               variant_names[variant], c.B, c.T, c.NH, c.NKV, c.HS, c.fused ? "qkv" : "q,k,v", w_out, w_grad, w_lse,
               ok ? "OK" : "NOT OK");
        if (ok) { num_passed++; } else { num_failed++; }
    }
    cudaCheck(cudaFree(d_qkv));
    cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_scratch));
}

static void usage(void) {
    printf("Usage: ./dev/cuda/flash_attention [-v N] [-c] [-s SEED]\n"
           "Causal attention forward and backward, %s: checks every variant against a double-precision\n"
           "CPU reference, then times them. Variants:\n", PRECISION_NAME);
    for (int v = 1; v <= VARIANTS; v++) { printf("  %s\n", variant_names[v]); }
    printf("Flags:\n  -v N     only variant N\n" LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, VARIANTS, 0, usage);
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : VARIANTS;
    // T that divides no tile (64, 32, 16), a single token, both layouts, G = 1, 2 and 4
    const Case cases[] = {
        {1, 1, 2, 2, 64, 1}, {2, 33, 2, 2, 64, 1}, {1, 77, 4, 2, 64, 0}, {1, 130, 4, 1, 32, 0},
        {1, 70, 2, 1, 128, 0}, {1, 45, 3, 3, 96, 1}, {1, 50, 4, 2, 16, 0}, {2, 40, 2, 2, 80, 1}, {1, 37, 4, 2, 40, 0},
#ifndef CUDA_EMU_H
        {1, 1000, 12, 12, 64, 1}, {1, 1537, 8, 2, 128, 0}, // (the reference takes seconds on the CPU)
#endif
    };
#ifdef CUDA_EMU_H
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    require_gpu("runs the checks: make dev/emu/flash_attention_cpu && ./dev/emu/flash_attention_cpu -c", PRECISION_NAME,
                args.seed);
#endif
    for (const Case &c : cases) { check_case(c, first, last); }

#ifndef CUDA_EMU_H
    // timing: 16 K tokens a batch, NH * HS = 2,048 (Llama-3.2-1B-like), GPT-2-like fused
    // layout for HS 64 and separate q, k, v with G = 4 for HS 128, forward then backward
    if (!args.check_only) {
        printf("\nms (median of 5 to 20 calls after a warm-up) and TFLOP/s; causal forward flops 2*B*NH*T*T*HS,"
               " backward 2.5x that\n%-16s %6s %4s %4s %4s %10s %8s %10s %8s\n", "variant", "T", "B", "NH", "HS", "fwd ms",
               "TFLOP/s", "bwd ms", "TFLOP/s");
        const int Ts[] = {1024, 4096, 16384}, HSs[] = {64, 128};
        for (int HS : HSs) {
            for (int T : Ts) {
                int NH = 2048 / HS, NKV = HS == 64 ? NH : NH / 4, B = 16384 / T;
                Heads s = {B, T, NH, NKV, HS, NH * HS + 2 * NKV * HS, NH * HS + 2 * NKV * HS, NH * HS};
                size_t BT = (size_t)B * T, all = BT * (NH + 2 * NKV) * HS, qn = BT * NH * HS;
                floatX *d_qkv, *d_dqkv, *d_out, *d_dout;
                float *d_lse, *d_scratch = nullptr;
                cudaCheck(cudaMalloc(&d_qkv, all * sizeof(floatX)));
                cudaCheck(cudaMalloc(&d_dqkv, all * sizeof(floatX)));
                cudaCheck(cudaMalloc(&d_out, qn * sizeof(floatX)));
                cudaCheck(cudaMalloc(&d_dout, qn * sizeof(floatX)));
                cudaCheck(cudaMalloc(&d_lse, (size_t)B * NH * T * sizeof(float)));
                std::vector<floatX> h(all);
                for (size_t i = 0; i < all; i++) { h[i] = from_float(rng_uniform()); }
                cudaCheck(cudaMemcpy(d_qkv, h.data(), all * sizeof(floatX), cudaMemcpyHostToDevice));
                cudaCheck(cudaMemcpy(d_dout, h.data(), qn * sizeof(floatX), cudaMemcpyHostToDevice));
                floatX *q = d_qkv, *k = d_qkv + NH * HS, *v = k + NKV * HS;
                floatX *dq = d_dqkv, *dk = d_dqkv + NH * HS, *dv = dk + NKV * HS;
                double flops = 2.0 * B * NH * (double)T * T * HS; // 4 B NH T^2 HS, halved by the mask
                for (int variant = first; variant <= last; variant++) {
                    if (variant_misfit(variant, HS) > 0) {
                        printf("%-16s %6d %4d %4d %4d  (needs %d KiB of shared memory a block: not timed)\n",
                               variant_names[variant], T, B, NH, HS, variant_misfit(variant, HS));
                        continue;
                    }
                    size_t scratch = scratch_floats(variant, s) * sizeof(float);
                    if (scratch > (8ull << 30)) {
                        printf("%-16s %6d %4d %4d %4d  (its %.0f GiB scratch: not timed)\n", variant_names[variant], T,
                               B, NH, HS, scratch / 1073741824.0);
                        continue;
                    }
                    cudaCheck(cudaMalloc(&d_scratch, scratch));
                    // (at least 5 calls, 20 where they take under half a second together)
                    float fwd = time_median_ms([&] { attention_forward(variant, d_out, d_lse, q, k, v, s, d_scratch); },
                                               [] {}, 5, 500.0f);
                    float bwd = time_median_ms([&] {
                        attention_backward(variant, dq, dk, dv, q, k, v, d_out, d_dout, d_lse, s, d_scratch);
                    }, [] {}, 5, 500.0f);
                    printf("%-16s %6d %4d %4d %4d %10.3f %8.1f %10.3f %8.1f\n", variant_names[variant], T, B, NH, HS,
                           fwd, flops / (fwd * 1e-3) / 1e12, bwd, 2.5 * flops / (bwd * 1e-3) / 1e12);
                    cudaCheck(cudaFree(d_scratch));
                }
                cudaCheck(cudaFree(d_qkv));
                cudaCheck(cudaFree(d_dqkv));
                cudaCheck(cudaFree(d_out));
                cudaCheck(cudaFree(d_dout));
                cudaCheck(cudaFree(d_lse));
            }
        }
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
