/*
adamw.cu: the kernel ladder for the AdamW update as train_gpt2.cu makes it (Loshchilov
and Hutter 2019, "Decoupled Weight Decay Regularization", algorithm 2; PyTorch's
torch.optim.AdamW). For every parameter, with g = grad * grad_scale (the clipping):
    m = beta1 m + (1 - beta1) g,    v = beta2 v + (1 - beta2) g^2,
    p = p decay - step_size m / (sqrt(v) / sqrt_bc2 + eps),
where step_size = lr / (1 - beta1^t), sqrt_bc2 = sqrt(1 - beta2^t) and decay = 1 - lr wd
(1 for the tensors without weight decay: biases, LayerNorm, as gpt2_update decides).
param and grad are floatX (bf16 by default, fp32 with -DENABLE_FP32), m and v fp32.
With fp32 master weights (master not NULL: the trainer's bf16 build, by default) the
update is made to the fp32 master copy and param is its rounding to nearest. Without
(master NULL) it is made to param itself: in the trainer's bf16 build with -w 0, and in
its fp32 build. In bf16 that param is then rounded stochastically (from_float_stochastic
in precision.h: up or down to a bf16 neighbour, up with probability the fraction of the
step, so that updates below half a bf16 step survive on average), with the random bits
hash_u32(seed, i): i the element's index within its tensor, seed = hash_u32(t, k) for
tensor k at step t, as gpt2_update makes it. In fp32 there is nothing to round. The
trainer calls the kernel once per parameter tensor, 16 for GPT-2, all slices of one
allocation. A pure stream: in bf16 with master weights 28 bytes an element (grad and
param 2 each, m, v and master 8 each, read and written) and ~20 flops; without, 22 bytes
and a hash of ~10 integer instructions more.

    1: the trainer's kernel, a thread per element, a launch per tensor     — ./dev/cuda/adamw 1
    2: a thread per 16-byte pack (8 bf16; m, v, master as 2 x 16 bytes)   — ./dev/cuda/adamw 2
    3: as 2, all tensors in one launch, each pack's tensor (its decay and
       seed) found in a table passed by value (the trainer's 16 -> 1)      — ./dev/cuda/adamw 3
(In fp32 the pack holds 4 values.) 2 and 3 need every tensor but the last to be a whole
number of packs, so that every tensor starts 16-byte aligned (GPT-2's sizes are all
multiples of C); the last may end anywhere. Why 3: at GPT-2 small's 124M parameters an
update streams ~3.5 GB, ~0.7 ms at 4.8 TB/s, and 16 launches (several a few thousand
elements: the LayerNorm tensors, the biases) add a launch gap and a tail each. Every
variant is elementwise and its random bits a function of (step, tensor, index) alone:
the same bits every run, at every block size, in every variant. 3 must therefore index
each element within its own tensor, with its own tensor's seed, as 1 and 2 do.

main checks every variant at 5 block sizes (64 to 1024 threads), with master weights and
without, against a CPU reference in double, on fresh random inputs, for two problems: one
tensor of a ragged size (1000003), and the 16 tensors of a small GPT-2 (C = 256, L = 2,
Vp = 1024, maxT = 256: 2.1M parameters) with the trainer's weight-decay flags. m, v and
master must be within a tolerance of the reference, and so must param, but for bf16
without master weights: there it must be one of the two bf16 neighbours of the exact
update, and, over all elements, be rounded up as often as stochastic rounding should
(two z-scores: a biased rounding fails one, rounding to nearest the other). And every
variant, at every block size, must give variant 1's bits exactly (at the trainer's 256
threads): the same arithmetic in the same order, and the same random bits. Then it
times each variant and block size on GPT-2 small's 16 tensors (124M parameters), with
master weights and without (warm-up, CUDA events, median of 20 updates) and prints ms,
GB/s and % of the H200's 4.8 TB/s. It ends with "N passed, M failed" and exits non-zero
if a check failed. That variant 1 is still the trainer's kernel, and precision.h's
hash_u32 and from_float_stochastic still the trainer's, dev/test/check_copies.sh
checks (the "shared-copy of train_gpt2.cu" markers).
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/adamw.cu -o dev/cuda/adamw
    ./dev/cuda/adamw        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/adamw.cu dev/emu/adamw_cpu -DENABLE_BF16
    ./dev/emu/adamw_cpu -c

Left out, for later: fusing the gradient norm's partial sums into the update's read of
grad (the trainer reads every gradient twice: once for the norm, once here), moments
kept in bf16 (less memory traffic, a different optimizer), and fp16 (precision.h has no
fp16 build yet; the trainer's fp16 build always keeps master weights anyway).
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float(_stochastic), hash_u32, Pack

// ----------------------------------------------------------------------------
// the hyper-parameters, as gpt2_update turns them into the kernel's arguments (in fp32)

struct Hyper {
    float beta1, beta2, step_size, sqrt_bc2, eps, grad_scale, decay_on; // decay_on: decay of a decayed tensor
    uint32_t t;                                                        // the step: seeds the stochastic rounding
};
static Hyper hyper_make(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    float bias_correction1 = 1.0f - powf(beta1, (float)t);
    Hyper h = {beta1, beta2, lr / bias_correction1, sqrtf(1.0f - powf(beta2, (float)t)), eps, grad_scale,
               1.0f - lr * weight_decay, (uint32_t)t};
    return h;
}
// tensor k's seed at step t, as gpt2_update makes it: each (step, tensor) its own bits
static uint32_t tensor_seed(const Hyper &h, size_t k) { return hash_u32(h.t, (uint32_t)k); }

// ----------------------------------------------------------------------------
// the CPU reference, in double from the same inputs and fp32 hyper-parameters: the new
// p, m and v of one element, and for the tolerances the magnitude of the terms of m and
// of the step

struct RefOut {
    double p, m, v, m_terms, step;
};
static RefOut adamw_cpu(double p0, double g0, double m0, double v0, double decay, const Hyper &h) {
    RefOut r;
    double g = g0 * h.grad_scale, b1 = h.beta1, b2 = h.beta2;
    r.m = b1 * m0 + (1.0 - b1) * g;
    r.v = b2 * v0 + (1.0 - b2) * g * g;
    r.m_terms = fabs(b1 * m0) + fabs((1.0 - b1) * g);
    r.step = (double)h.step_size * r.m / (sqrt(r.v) / h.sqrt_bc2 + h.eps);
    r.p = p0 * decay - r.step;
    return r;
}

// ----------------------------------------------------------------------------
// the kernels, slowest first

// 1: train_gpt2.cu's adamw_kernel, verbatim but for the name (its comment:)
// AdamW on one tensor, as gpt2_update in train_gpt2.c. With master weights (bf16)
// the update is made to the fp32 copy and the parameter is its rounding; without,
// a bf16 parameter is rounded stochastically (seed: random bits for this call; first:
// param[0]'s index in its tensor, which the random bits are drawn for).
// A warp's accesses are 64 bytes of grad and param and 128 of each fp32 array: 4 to 5
// small requests an element, for ~20 flops.
// --- shared-copy of train_gpt2.cu: adamw_kernel (as adamw_kernel1) ---
__global__ void adamw_kernel1(floatX *param, float *master, const floatX *grad, float *m, float *v, size_t n, float beta1,
                              float beta2, float step_size, float sqrt_bc2, float eps, float decay, float grad_scale,
                              uint32_t seed, size_t first) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float p = master != NULL ? master[i] : to_float(param[i]);
    float g = to_float(grad[i]) * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    p = p * decay - step_size * m[i] / (sqrtf(v[i]) / sqrt_bc2 + eps);
    param[i] = master != NULL ? from_float(p) : from_float_stochastic(p, hash_u32(seed, (uint32_t)(first + i)));
    if (master != NULL) { master[i] = p; }
}

// PACK fp32 values moved 16 bytes at a time: a pack of floatX has PACK / 4 of these
struct alignas(16) Float4 {
    float v[4];
};
__device__ inline void load_floats(float *dst, const float *src) {
    for (int h = 0; h < PACK / 4; h++) {
        Float4 f = ((const Float4 *)src)[h];
        for (int j = 0; j < 4; j++) { dst[4 * h + j] = f.v[j]; }
    }
}
__device__ inline void store_floats(float *dst, const float *src) {
    for (int h = 0; h < PACK / 4; h++) {
        Float4 f;
        for (int j = 0; j < 4; j++) { f.v[j] = src[4 * h + j]; }
        ((Float4 *)dst)[h] = f;
    }
}

// 2 and 3: the update of the pack of elements i0 .. i0 + PACK - 1 of one tensor, n
// elements long, the pointers at its start: i is an element's index within its tensor,
// as in 1, which makes its random bits hash_u32(seed, i) the same as 1's. All loads
// first (1 or 2 of 16 bytes from each array), then the arithmetic of kernel 1 in the same
// order, then the stores: per element, the same bits as 1. A pack that would run past n
// (the last of a ragged tensor) goes element by element.
__device__ inline void adamw_pack(floatX *param, float *master, const floatX *grad, float *m, float *v, size_t i0, size_t n,
                                  float beta1, float beta2, float step_size, float sqrt_bc2, float eps, float decay,
                                  float grad_scale, uint32_t seed) {
    if (i0 + PACK > n) {
        for (size_t i = i0; i < n; i++) {
            float p = master != NULL ? master[i] : to_float(param[i]), g = to_float(grad[i]) * grad_scale;
            m[i] = beta1 * m[i] + (1.0f - beta1) * g;
            v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
            p = p * decay - step_size * m[i] / (sqrtf(v[i]) / sqrt_bc2 + eps);
            param[i] = master != NULL ? from_float(p) : from_float_stochastic(p, hash_u32(seed, (uint32_t)i));
            if (master != NULL) { master[i] = p; }
        }
        return;
    }
    Pack pp, gp = *(const Pack *)(grad + i0);
    float mv[PACK], vv[PACK], p[PACK];
    load_floats(mv, m + i0);
    load_floats(vv, v + i0);
    if (master != NULL) { // then the old param is not needed: 2 bytes an element not read
        load_floats(p, master + i0);
    } else {
        pp = *(const Pack *)(param + i0);
        for (int j = 0; j < PACK; j++) { p[j] = to_float(pp.v[j]); }
    }
    for (int j = 0; j < PACK; j++) {
        float g = to_float(gp.v[j]) * grad_scale;
        mv[j] = beta1 * mv[j] + (1.0f - beta1) * g;
        vv[j] = beta2 * vv[j] + (1.0f - beta2) * g * g;
        p[j] = p[j] * decay - step_size * mv[j] / (sqrtf(vv[j]) / sqrt_bc2 + eps);
        // (the hash is integer work, ~10 instructions an element, only without master weights)
        pp.v[j] = master != NULL ? from_float(p[j]) : from_float_stochastic(p[j], hash_u32(seed, (uint32_t)(i0 + j)));
    }
    store_floats(m + i0, mv);
    store_floats(v + i0, vv);
    *(Pack *)(param + i0) = pp;
    if (master != NULL) { store_floats(master + i0, p); }
}

// 2: a thread per 16-byte pack, a launch per tensor as in 1, with 1's arguments: a
// drop-in replacement. Per element 8x fewer load and store instructions in bf16 (4x for
// the fp32 arrays), and each thread has 5 to 8 loads of 16 bytes in flight at once.
__global__ void adamw_kernel2(floatX *param, float *master, const floatX *grad, float *m, float *v, size_t n, float beta1,
                              float beta2, float step_size, float sqrt_bc2, float eps, float decay, float grad_scale,
                              uint32_t seed) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK;
    if (i0 >= n) { return; }
    adamw_pack(param, master, grad, m, v, i0, n, beta1, beta2, step_size, sqrt_bc2, eps, decay, grad_scale, seed);
}

// 3: every tensor in one launch. The tensors are slices of one allocation (as the
// trainer's parameters, gradients and moments are), so the whole update is one stream
// over [0, start[count]); a thread's pack belongs to the tensor k with start[k] <= i0 <
// start[k + 1], found by binary search in the table (4 steps for 16 tensors, the same
// for the whole warp but at a boundary), and takes that tensor's decay and seed. The
// pack is then updated as 2 would: the pointers moved to the tensor's start and i0 made
// an index within it, so that the random bits are 1's and not a function of where the
// tensor sits in the allocation. (A tensor but the last is whole packs, so i0 - start
// is a whole number of packs too.) The table is a kernel argument (by value: 272 bytes
// of the 4 KB allowed), so it sits in the constant bank, with no copy to make before
// the launch.
#define MAX_TENSORS 16
struct TensorTable {
    int count;
    size_t start[MAX_TENSORS + 1]; // start[k]: tensor k's first element; start[count]: the end
    float decay[MAX_TENSORS];
    uint32_t seed[MAX_TENSORS];    // tensor k's seed, as the trainer's launch for k has it
};
__global__ void adamw_kernel3(floatX *param, float *master, const floatX *grad, float *m, float *v, TensorTable table,
                              float beta1, float beta2, float step_size, float sqrt_bc2, float eps, float grad_scale) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK;
    if (i0 >= table.start[table.count]) { return; }
    int lo = 0, hi = table.count - 1; // the last tensor that starts at or before i0
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table.start[mid] <= i0) { lo = mid; } else { hi = mid - 1; }
    }
    size_t s = table.start[lo];
    adamw_pack(param + s, master != NULL ? master + s : NULL, grad + s, m + s, v + s, i0 - s, table.start[lo + 1] - s,
               beta1, beta2, step_size, sqrt_bc2, eps, table.decay[lo], grad_scale, table.seed[lo]);
}

// ----------------------------------------------------------------------------
// the launcher: variant and block size first, then what gpt2_update has: the tensors
// (sizes and weight-decay flags, contiguous in every array), master or NULL, and the
// hyper-parameters (with the step, from which each tensor's seed)

static const char *variant_names[4] = {"", "1 trainer (thread/elem)", "2 thread/16-byte pack", "3 packs, one launch"};

// Why variant v cannot take these tensors, or NULL if it can
static const char *unsupported(int variant, const std::vector<size_t> &sizes) {
    if (variant == 3 && sizes.size() > MAX_TENSORS) { return "more than 16 tensors"; }
    for (size_t k = 0; variant >= 2 && k + 1 < sizes.size(); k++) {
        if (sizes[k] % PACK != 0) { return "a tensor but the last is not a whole number of 16-byte packs"; }
    }
    return NULL;
}

static void adamw_update(int variant, int block, floatX *param, float *master, const floatX *grad, float *m, float *v,
                         const std::vector<size_t> &sizes, const std::vector<int> &decayed, const Hyper &h) {
    if (variant == 3) { // one launch for all
        TensorTable table = {};
        table.count = (int)sizes.size();
        for (int k = 0; k < table.count; k++) {
            table.start[k + 1] = table.start[k] + sizes[k];
            table.decay[k] = decayed[k] ? h.decay_on : 1.0f;
            table.seed[k] = tensor_seed(h, k);
        }
        size_t n = table.start[table.count];
        adamw_kernel3<<<ceil_div(n, (size_t)PACK * block), block>>>(param, master, grad, m, v, table, h.beta1, h.beta2,
                                                                    h.step_size, h.sqrt_bc2, h.eps, h.grad_scale);
        cudaCheck(cudaGetLastError());
        return;
    }
    size_t offset = 0;
    for (size_t k = 0; k < sizes.size(); k++) { // as gpt2_update: a launch per tensor
        size_t n = sizes[k];
        float decay = decayed[k] ? h.decay_on : 1.0f, *mk = master != NULL ? master + offset : NULL;
        uint32_t seed = tensor_seed(h, k);
        switch (variant) {
        case 1:
            adamw_kernel1<<<ceil_div(n, block), block>>>(param + offset, mk, grad + offset, m + offset, v + offset, n,
                                                         h.beta1, h.beta2, h.step_size, h.sqrt_bc2, h.eps, decay,
                                                         h.grad_scale, seed, 0);
            break;
        case 2:
            adamw_kernel2<<<ceil_div(n, (size_t)PACK * block), block>>>(param + offset, mk, grad + offset, m + offset,
                                                                        v + offset, n, h.beta1, h.beta2, h.step_size,
                                                                        h.sqrt_bc2, h.eps, decay, h.grad_scale, seed);
            break;
        default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
        }
        cudaCheck(cudaGetLastError());
        offset += n;
    }
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};

// GPT-2's 16 parameter tensors and which of them decay, as train_gpt2.cu has them
// (fill_in_parameter_sizes and WEIGHT_DECAYED): wte, wpe, ln1w, ln1b, qkvw, qkvb,
// attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb
static void gpt2_tensors(std::vector<size_t> &sizes, std::vector<int> &decayed, size_t Vp, size_t C, size_t maxT,
                         size_t L) {
    sizes = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
             L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    decayed = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
}

struct Problem {
    std::vector<size_t> sizes;
    std::vector<int> decayed;
    std::vector<floatX> param, grad; // the values before the update
    std::vector<float> master, m, v;
};
static floatX *d_param, *d_grad;
static float *d_master, *d_m, *d_v;

// Fresh random inputs, never zeros: master uniform in [-0.1, 0.1) (weights' scale) and
// param its rounding; grad in [-1, 1); m in [-0.01, 0.01) and v in [0, 1e-4) (moments of
// earlier steps: v never negative). Then |step| ~ lr, 1-3% of a weight: more than bf16's
// rounding, so the rounded param shows a wrong update too.
static void problem_make(Problem &pb) {
    size_t n = 0;
    for (size_t s : pb.sizes) { n += s; }
    pb.param.resize(n);
    pb.grad.resize(n);
    pb.master.resize(n);
    pb.m.resize(n);
    pb.v.resize(n);
    for (size_t i = 0; i < n; i++) {
        pb.master[i] = 0.1f * rng_uniform();
        pb.param[i] = from_float(pb.master[i]);
        pb.grad[i] = from_float(rng_uniform());
        pb.m[i] = 0.01f * rng_uniform();
        pb.v[i] = 1e-4f * 0.5f * (rng_uniform() + 1.0f);
    }
    cudaCheck(cudaMalloc(&d_param, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_grad, n * sizeof(floatX)));
    for (float **p : {&d_master, &d_m, &d_v}) { cudaCheck(cudaMalloc(p, n * sizeof(float))); }
    cudaCheck(cudaMemcpy(d_grad, pb.grad.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
}

// the state before the update, again (the kernels update in place)
static void state_reset(const Problem &pb) {
    size_t n = pb.param.size();
    cudaCheck(cudaMemcpy(d_param, pb.param.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_master, pb.master.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_m, pb.m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_v, pb.v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_param, (void *)d_grad, (void *)d_master, (void *)d_m, (void *)d_v}) {
        cudaCheck(cudaFree(p));
    }
}

// Tolerances, all in one place, per element, in U = FLT_EPSILON = 2^-23 (twice fp32's
// unit roundoff), from the roundings the fp32 arithmetic makes:
//   m: the scaled gradient and two products and a sum: 3 U of |beta1 m| + |(1-beta1) g|
//      (the two terms may cancel, so of the terms, not of m);
//   v: all terms positive, 5 roundings: 5 U v;
//   p: the decay's product 2 U |p decay|; the step, step_size m / (sqrt(v) / sqrt_bc2 +
//      eps), inherits m's error (step_size err_m / denominator) and adds ~6 roundings of
//      its own (sqrt is correctly rounded in CUDA without fast-math): 10 U |step|; and
//      the final subtraction U |p|.
// master (fp32) is held to p's tolerance; param, rounded to nearest floatX (with master
// weights, or in fp32 where OUT_ROUND is 0), to (1 + OUT_ROUND) that plus OUT_ROUND |p|:
// bf16 keeps 8 significant bits, so rounding to nearest moves a value by at most 2^-8 of
// itself; we allow twice that, so that rounding alone reads as at most ~0.5 of the
// tolerance. A bug (a missed decay, a wrong bias correction, an element skipped) moves p
// by ~1e-3 of itself or more, m and v by far more.
// Without master weights in bf16 (STOCHASTIC) param may be either bf16 neighbour of the
// kernel's fp32 p, itself within p's tolerance of the exact update: so it must lie
// between the bf16 value at or below (exact - tol) and the one at or above (exact + tol),
// two admissible values (three where that interval holds a bf16 value). A round to
// nearest passes this too; rounding_tally tells the two apart.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#define STOCHASTIC 0 // fp32: from_float_stochastic has nothing to round
#else
#define OUT_ROUND 0x1p-7
#define STOCHASTIC 1
#endif
#define MAX_Z 5.0 // the rounding's z-score passes within +-5: ~6e-7 odds of a false alarm
static int num_passed = 0, num_failed = 0;

// bf16 is a float's top 16 bits; cutting the low 16 rounds toward zero
static double bits_to_double(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}
static uint32_t float_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof(b));
    return b;
}
// the bf16 value at or below x (the float at or below first, so that nothing rounds up)
static double bf16_down(double x) {
    float f = (float)x;
    if ((double)f > x) { f = nextafterf(f, -INFINITY); }
    uint32_t b = float_bits(f), cut = b & 0xffff0000u;
    if (cut != b && (b >> 31) != 0) { cut += 0x10000u; } // negative: one step further from 0
    return bits_to_double(cut);
}
static double bf16_up(double x) { return -bf16_down(-x); }

// Stochastic rounding's odds. The exact update x lies between bf16 values d (toward 0)
// and u (away from 0), a fraction f of the step past d; param must be u with probability
// f. Two sums of each element's (up - f), both 0 on average with variance sum f (1 - f):
// sum[0] plain, which a biased rounding moves (too few random bits, say: f ~ -n/4);
// sum[1] weighed +1 where f < 1/2 and -1 above, which rounding to nearest (u exactly
// when f > 1/2) moves to -sum min(f, 1 - f), ~ -n/4, where it leaves sum[0] at ~0. So
// a z-score ~ -0.6 sqrt(n) (-68 at 12345 elements) for a wrong rounding. (The kernel
// rounds its fp32 p, not x: that moves f by ~2^-15, nothing next to the noise.)
static void rounding_tally(double x, double got, double sum[2], double *var) {
    uint32_t b = float_bits((float)x), cut = b & 0xffff0000u;
    if (cut == b) { return; } // x is a bf16 value (to fp32's precision): nothing to round
    double d = bits_to_double(cut), u = bits_to_double(cut + 0x10000u);
    double f = fmin(fmax((fabs(x) - fabs(d)) / (fabs(u) - fabs(d)), 0.0), 1.0);
    if (got != d && got != u) { return; } // the third admissible value, near a bf16 value: not counted
    double e = (got == u ? 1.0 : 0.0) - f;
    sum[0] += e;
    sum[1] += f < 0.5 ? e : -e;
    *var += f * (1.0 - f);
}

// The device state after an update, copied back
struct State {
    std::vector<floatX> param;
    std::vector<float> master, m, v;
};
static void state_fetch(State &st, size_t n) {
    st.param.resize(n);
    st.master.resize(n);
    st.m.resize(n);
    st.v.resize(n);
    cudaCheck(cudaMemcpy(st.param.data(), d_param, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(st.master.data(), d_master, n * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(st.m.data(), d_m, n * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(st.v.data(), d_v, n * sizeof(float), cudaMemcpyDeviceToHost));
}
// the first element whose param, master, m or v differs in any bit, or SIZE_MAX
static size_t first_difference(const State &a, const State &b) {
    for (size_t i = 0; i < a.param.size(); i++) {
        if (memcmp(&a.param[i], &b.param[i], sizeof(floatX)) != 0 || memcmp(&a.master[i], &b.master[i], 4) != 0
            || memcmp(&a.m[i], &b.m[i], 4) != 0 || memcmp(&a.v[i], &b.v[i], 4) != 0) {
            return i;
        }
    }
    return SIZE_MAX;
}

// Runs variant v at every block size, with master weights or without, the state reset
// before each run, and compares param, m, v and (with) master for every element with the
// reference, and all of them bit for bit with ref1, variant 1's result. One line: the
// largest errors, the worst as a fraction of its tolerance (<= 1 passes; NaN fails;
// without master weights in bf16 param is not in it, but must be a neighbour), the
// rounding's two z-scores (bf16 without master weights; see rounding_tally), whether
// the bits are 1's, OK or NOT OK.
static void check_variant(int v, const Problem &pb, const Hyper &h, int with_master, const char *what, const State &ref1) {
    printf("%-17s %-6s  %-23s ", what, with_master ? "master" : "none", variant_names[v]);
    if (unsupported(v, pb.sizes)) { printf("skipped: %s\n", unsupported(v, pb.sizes)); return; }
    size_t n = pb.param.size(), differ = SIZE_MAX;
    int stochastic = STOCHASTIC && !with_master, differ_block = 0;
    State st;
    double max_err[3] = {0.0, 0.0, 0.0}, worst = 0.0, U = FLT_EPSILON, z_worst[2] = {0.0, 0.0};
    char where[240] = "";
    for (int block : block_sizes) {
        state_reset(pb);
        adamw_update(v, block, d_param, with_master ? d_master : NULL, d_grad, d_m, d_v, pb.sizes, pb.decayed, h);
        state_fetch(st, n);
        if (differ == SIZE_MAX) {
            differ = first_difference(st, ref1);
            differ_block = block;
        }
        auto look = [&](const char *name, size_t i, double got, double want, double tol, int which) {
            double err = fabs(got - want), ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol;
            max_err[which] = std::isnan(err) ? INFINITY : fmax(max_err[which], err);
            if (ratio > worst) {
                worst = ratio;
                snprintf(where, sizeof(where), "block %d: %s[%zu] = %.9g, expected %.9g, tolerance %.2g", block, name, i,
                         got, want, tol);
            }
        };
        double z_sum[2] = {0.0, 0.0}, z_var = 0.0;
        size_t i = 0;
        for (size_t k = 0; k < pb.sizes.size(); k++) {
            double decay = pb.decayed[k] ? h.decay_on : 1.0f;
            for (size_t end = i + pb.sizes[k]; i < end; i++) {
                double p0 = with_master ? (double)pb.master[i] : (double)to_float(pb.param[i]);
                RefOut r = adamw_cpu(p0, to_float(pb.grad[i]), pb.m[i], pb.v[i], decay, h);
                double tol_m = 3 * U * r.m_terms;
                double tol_p = 2 * U * fabs(p0 * decay) + h.step_size * tol_m / (sqrt(r.v) / h.sqrt_bc2 + h.eps)
                             + 10 * U * fabs(r.step) + U * fabs(r.p);
                look("m", i, st.m[i], r.m, tol_m, 1);
                look("v", i, st.v[i], r.v, 5 * U * r.v, 2);
                if (with_master) { look("master", i, st.master[i], r.p, tol_p, 0); }
                if (!stochastic) {
                    look("param", i, to_float(st.param[i]), r.p, (1 + OUT_ROUND) * tol_p + OUT_ROUND * fabs(r.p), 0);
                    continue;
                }
                double got = to_float(st.param[i]), lo = bf16_down(r.p - tol_p), hi = bf16_up(r.p + tol_p);
                max_err[0] = std::isnan(got) ? INFINITY : fmax(max_err[0], fabs(got - r.p));
                if (!(got >= lo && got <= hi) && worst < INFINITY) { // (NaN fails here too)
                    worst = INFINITY;
                    snprintf(where, sizeof(where), "block %d: param[%zu] = %.9g, not a bf16 neighbour of %.9g (%.9g or %.9g)",
                             block, i, got, r.p, lo, hi);
                }
                rounding_tally(r.p, got, z_sum, &z_var);
            }
        }
        for (int j = 0; j < 2 && stochastic && z_var > 0.0; j++) {
            if (fabs(z_sum[j] / sqrt(z_var)) >= fabs(z_worst[j])) { z_worst[j] = z_sum[j] / sqrt(z_var); }
        }
    }
    int z_ok = fabs(z_worst[0]) <= MAX_Z && fabs(z_worst[1]) <= MAX_Z;
    int ok = worst <= 1.0 && z_ok && differ == SIZE_MAX;
    printf("blocks 64-1024  max err p %.1e m %.1e v %.1e, worst %.2f of tol", max_err[0], max_err[1], max_err[2], worst);
    if (stochastic) { printf(", rounding z %+.1f %+.1f", z_worst[0], z_worst[1]); }
    printf(", %s  %s\n", differ == SIZE_MAX ? "1's bits" : "NOT 1's bits", ok ? "OK" : "NOT OK");
    if (worst > 1.0) { printf("    worst at %s\n", where); }
    if (!z_ok) {
        printf("    param is not rounded up with the odds of stochastic rounding: z %+.1f (bias), %+.1f (to nearest\n"
               "    gives ~%.0f), where |z| <= %.0f passes\n", z_worst[0], z_worst[1], -0.6 * sqrt((double)n), MAX_Z);
    }
    if (differ != SIZE_MAX) {
        printf("    block %d: element %zu differs from variant 1's (param %.9g vs %.9g, m %.9g vs %.9g, v %.9g vs %.9g)\n",
               differ_block, differ, to_float(st.param[differ]), to_float(ref1.param[differ]), st.m[differ],
               ref1.m[differ], st.v[differ], ref1.v[differ]);
    }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: adamw [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 trainer's kernel, 2 16-byte packs, 3 packs and all tensors in one launch\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
    // the trainer's defaults (beta2 0.95, weight decay 0.1), a larger lr so the step shows
    // through bf16's rounding, step t = 3 (bias corrections far from 1) and clipping on
    Hyper h = hyper_make(3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    Problem problems[2];
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    problems[0].sizes = {12345};
    gpt2_tensors(problems[1].sizes, problems[1].decayed, 128, 64, 32, 2); // Vp, C, maxT, L: 110K parameters
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    problems[0].sizes = {1000003};
    gpt2_tensors(problems[1].sizes, problems[1].decayed, 1024, 256, 256, 2); // 2.1M parameters
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/adamw.cu /tmp/adamw_cpu && /tmp/adamw_cpu -c",
                PRECISION_NAME, args.seed);
#endif
    problems[0].decayed = {1};
    const char *what[2] = {"1 ragged tensor", "16 GPT-2 tensors"};

    // 1. correctness, every variant at every block size, with and without master weights;
    // first variant 1 at the trainer's block size, whose bits every run must give
    for (int k = 0; k < 2; k++) {
        problem_make(problems[k]);
        State ref1[2];
        for (int with_master = 0; with_master <= 1; with_master++) {
            state_reset(problems[k]);
            adamw_update(1, 256, d_param, with_master ? d_master : NULL, d_grad, d_m, d_v, problems[k].sizes,
                         problems[k].decayed, h);
            state_fetch(ref1[with_master], problems[k].param.size());
        }
        for (int v = first; v <= last; v++) {
            for (int with_master = 1; with_master >= 0; with_master--) {
                check_variant(v, problems[k], h, with_master, what[k], ref1[with_master]);
            }
        }
        problem_free();
        problems[k] = Problem();
    }

#ifndef CUDA_EMU_H
    // 2. timing on GPT-2 small's tensors. The bytes that must move, per element: grad
    // read, m and v read and written; with master weights master read and written and
    // param written; without, param read and written. The update changes the state at
    // every call; that changes no byte moved.
    if (!args.check_only) {
        Problem pb;
        gpt2_tensors(pb.sizes, pb.decayed, 50304, 768, 1024, 12);
        problem_make(pb);
        state_reset(pb);
        size_t n = pb.param.size();
        printf("\nGPT-2 small, %zu parameters in 16 tensors; ms at each block size: median of 20 updates after a\n"
               "warm-up; GB/s and %% of the H200's 4.8 TB/s at the best block size\n", n);
        printf("%-6s  %-23s %8s %8s %8s %8s %8s %8s %8s\n", "master", "variant", "64", "128", "256", "512", "1024", "GB/s",
               "% peak");
        for (int with_master = 1; with_master >= 0; with_master--) {
            double bytes = (double)n * (with_master ? 24.0 + 2.0 * sizeof(floatX) : 16.0 + 3.0 * sizeof(floatX));
            for (int v = first; v <= last; v++) {
                printf("%-6s  %-23s ", with_master ? "yes" : "no", variant_names[v]);
                float best = INFINITY;
                for (int block : block_sizes) {
                    float ms = time_median_ms([&] {
                        adamw_update(v, block, d_param, with_master ? d_master : NULL, d_grad, d_m, d_v, pb.sizes,
                                     pb.decayed, h);
                    });
                    best = std::min(best, ms);
                    printf("%8.4f ", ms);
                }
                double gbs = bytes / (best * 1e-3) / 1e9;
                printf("%8.0f %7.1f%%\n", gbs, 100.0 * gbs / PEAK_GBS);
            }
        }
        problem_free();
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
