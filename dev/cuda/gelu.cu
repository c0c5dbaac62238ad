/*
gelu.cu: the kernel ladder for GELU, forward and backward, as train_gpt2.cu computes it:
GPT-2's tanh approximation (Hendrycks and Gimpel 2016, "Gaussian Error Linear Units",
section 2; PyTorch's nn.GELU(approximate='tanh')),
    gelu(x)  = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3),
    gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx,
elementwise over N values: out = gelu(inp) and dinp = dout * gelu'(inp), in floatX (bf16
by default, fp32 with -DENABLE_FP32), the arithmetic fp32.

The trainer no longer has a GELU backward kernel. Since commit 4572d5b its MLP backward
multiplies by gelu' in cuBLASLt's DGELU epilogue, inside the matmul that makes the
gradient (matmul_backward_gelu in train_gpt2.cu): the values never make a round trip
through memory. Its forward kernel is still used, at recomputation levels 1 and 2
(-r, recompute_level in train_gpt2.cu: the GELU output is recomputed from its input in
the backward pass); at level 0 the GELU epilogue does the forward too. So the forward
rungs below are the trainer's kernel and faster ones; the backward rungs are a study of
what the epilogue replaced: their "trainer's kernel" is the former gelu_backward_kernel,
as train_gpt2.cu had it last at commit 46e22d5, which ran in place (dinp and dout the
same buffer), so the checks do too. (The trainer keeps an in-place form of it,
gelu_backward_inplace_kernel, only for a cuBLASLt that cannot fuse the epilogue.)

In bf16 the forward moves 4 bytes an element and the backward 6, while the trainer's
forward kernel is 50 PTX instructions an element (for sm_90), most of them tanhf's: an
H200 streams 4.8 TB/s but issues ~33 T fp32 instructions a second, ~28 an element at
full bandwidth in the forward. So these kernels are as much about instructions as bytes.

    1: the trainer's kernels (the backward: the former one, of 46e22d5):
       a thread per element, tanhf                                         — ./dev/cuda/gelu 1
    2: a thread per 16-byte pack (8 bf16), the same arithmetic             — ./dev/cuda/gelu 2
    3: as 2, tanh as a sigmoid: 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)),
       one exp2f and a division in place of tanhf: half 2's instructions  — ./dev/cuda/gelu 3
(In fp32 the pack holds 4 values.) 2 and 3 take any N (the thread past the last whole
pack does the rest one by one) and need the pointers 16-byte aligned, as cudaMalloc's
are. 3's form is exact algebra (tanh(u) = 2 sigmoid(2u) - 1), and better conditioned for
x << 0, where 1 + tanh(u) cancels: 1 loses up to all of its relative accuracy there
(its error stays below ~1e-7 |x| absolute), 3 keeps it. The derivative becomes
s + 2 x s (1 - s) du/dx, s = 1 / (1 + exp(-2u)).

main checks every variant at 5 block sizes (64 to 1024 threads), forward and backward
each, against a CPU reference in double, on fresh random inputs (x mostly in [-3, 3),
every 8th in [-12, 12) and every 64th in [-100, 100), where exp overflows and tanh is
+-1; dout in [-1, 1)), at N = 8 x 1024 x 3072 (GPT-2 small's MLP at B = 8), 1000003 (a
ragged tail) and 5 (only a tail). Then it times each variant and block size at N =
16 x 1024 x 3072 (warm-up, CUDA events, median of 20 calls) and prints ms, GB/s and % of
the H200's 4.8 TB/s. It ends with "N passed, M failed" and exits non-zero if a check
failed. Elementwise, no sums: every run gives the same bits.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/gelu.cu -o dev/cuda/gelu
    ./dev/cuda/gelu        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/gelu.cu dev/emu/gelu_cpu -DENABLE_BF16
    ./dev/emu/gelu_cpu -c

Left out, for later: the tanh.approx.f32 instruction (inline PTX, which the emulator
cannot run; 2^-11 relative error, fine for bf16 but not fp32), and a rung that times the
epilogue the trainer now uses (cuBLASLt's CUBLASLT_EPILOGUE_GELU_AUX_BIAS / _DGELU) against
a matmul followed by these kernels: the real measure of what the fusion saves.
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
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference, in double: gelu(x) and gelu'(x)

static void gelu_cpu(double *y, double *dy, double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), th = tanh(u);
    double du = sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
    *y = 0.5 * x * (1.0 + th);
    *dy = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
}

// ----------------------------------------------------------------------------
// the kernels, slowest first

// 1: train_gpt2.cu's gelu_forward_kernel, verbatim but for the name, and its former
// gelu_backward_kernel, as of commit 46e22d5 (the trainer now has the DGELU epilogue
// instead, so the backward has no marker: dev/test/check_copies.sh has nothing
// to compare it with). Their comment:
// GELU, tanh approximation, as train_gpt2.c
// A warp moves 64 bytes per load in bf16, and tanhf (no fast-math) is the bulk of the
// instructions.
// --- shared-copy of train_gpt2.cu: GELU_SCALE ---
#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)
// --- shared-copy of train_gpt2.cu: gelu_forward_kernel (as gelu_forward_kernel1) ---
__global__ void gelu_forward_kernel1(floatX *out, const floatX *inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    out[i] = from_float(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))));
}

// (train_gpt2.cu's gelu_backward_kernel until 46e22d5; it has no copy to check against now)
__global__ void gelu_backward_kernel1(floatX *dinp, const floatX *inp, const floatX *dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_float(to_float(dout[i]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
}

// gelu and gelu' of one fp32 value, two ways: as the trainer's kernels (tanhf), and as a
// sigmoid (3). In the sigmoid, exp(-2u) = exp2(-2 log2(e) u): one FMUL and the MUFU.EX2
// unit, where expf adds a range reduction. For x << 0, exp overflows to inf and s = 0;
// for x >> 0, it is 0 and s = 1: both limits come out exact, with no NaN (1 - s, not
// e s, in the derivative: inf * 0 would be NaN).
#define LOG2E 1.4426950408889634f
__device__ inline float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))); }
__device__ inline float dgelu_tanh(float x) {
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}
__device__ inline float sigmoid_2u(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 1.0f / (1.0f + exp2f(-2.0f * LOG2E * u));
}
__device__ inline float gelu_sigmoid(float x) { return x * sigmoid_2u(x); }
__device__ inline float dgelu_sigmoid(float x) {
    float s = sigmoid_2u(x), du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du;
}

// 2 and 3: a thread per 16-byte pack: one 128-bit load (two in the backward) and one
// 128-bit store where 1 issues 8 of each in bf16, and a warp covers 512 contiguous bytes.
// The thread whose pack would run past N does the last N % PACK values one at a time.
// SIGMOID picks the arithmetic at compile time: 0 for 2 (tanhf), 1 for 3. In the PTX for
// sm_90 (bf16), the forward kernel is 404 instructions for 2 and 188 for 3, the backward
// 525 and 312 (a pack of 8 and the tail loop each).
template <int SIGMOID>
__global__ void gelu_forward_kernel23(floatX *out, const floatX *inp, size_t N) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK; // this thread's first value
    if (i0 >= N) { return; }
    if (i0 + PACK > N) { // the ragged tail
        for (size_t i = i0; i < N; i++) {
            float x = to_float(inp[i]);
            out[i] = from_float(SIGMOID ? gelu_sigmoid(x) : gelu_tanh(x));
        }
        return;
    }
    Pack p = *(const Pack *)(inp + i0);
    for (int k = 0; k < PACK; k++) {
        float x = to_float(p.v[k]);
        p.v[k] = from_float(SIGMOID ? gelu_sigmoid(x) : gelu_tanh(x));
    }
    *(Pack *)(out + i0) = p;
}

// (dinp may be dout: each thread reads its values before it writes them)
template <int SIGMOID>
__global__ void gelu_backward_kernel23(floatX *dinp, const floatX *inp, const floatX *dout, size_t N) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK;
    if (i0 >= N) { return; }
    if (i0 + PACK > N) {
        for (size_t i = i0; i < N; i++) {
            float x = to_float(inp[i]);
            dinp[i] = from_float(to_float(dout[i]) * (SIGMOID ? dgelu_sigmoid(x) : dgelu_tanh(x)));
        }
        return;
    }
    Pack xp = *(const Pack *)(inp + i0), dp = *(const Pack *)(dout + i0);
    for (int k = 0; k < PACK; k++) {
        float x = to_float(xp.v[k]);
        dp.v[k] = from_float(to_float(dp.v[k]) * (SIGMOID ? dgelu_sigmoid(x) : dgelu_tanh(x)));
    }
    *(Pack *)(dinp + i0) = dp;
}

// ----------------------------------------------------------------------------
// the launchers: variant and block size first, then gelu_forward's and gelu_backward's
// own arguments. Kernels are picked as pointers, so that one launch line serves all of
// a variant's template instances.

static const char *variant_names[4] = {"", "1 trainer (thread/elem)", "2 thread/16-byte pack", "3 packs, sigmoid form"};
typedef void (*forward_kernel)(floatX *, const floatX *, size_t);
typedef void (*backward_kernel)(floatX *, const floatX *, const floatX *, size_t);

static void require_aligned(const void *p) {
    if ((uintptr_t)p % 16 != 0) {
        fprintf(stderr, "Error: variants 2 and 3 need 16-byte aligned pointers, got %p\n", p);
        exit(EXIT_FAILURE);
    }
}

static void gelu_forward(int variant, int block, floatX *out, const floatX *inp, size_t N) {
    forward_kernel k23 = variant == 3 ? gelu_forward_kernel23<1> : gelu_forward_kernel23<0>;
    switch (variant) {
    case 1: gelu_forward_kernel1<<<ceil_div(N, block), block>>>(out, inp, N); break;
    case 2:
    case 3:
        require_aligned(out);
        require_aligned(inp);
        k23<<<ceil_div(N, (size_t)PACK * block), block>>>(out, inp, N);
        break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

static void gelu_backward(int variant, int block, floatX *dinp, const floatX *inp, const floatX *dout, size_t N) {
    backward_kernel k23 = variant == 3 ? gelu_backward_kernel23<1> : gelu_backward_kernel23<0>;
    switch (variant) {
    case 1: gelu_backward_kernel1<<<ceil_div(N, block), block>>>(dinp, inp, dout, N); break;
    case 2:
    case 3:
        require_aligned(dinp);
        require_aligned(inp);
        require_aligned(dout);
        k23<<<ceil_div(N, (size_t)PACK * block), block>>>(dinp, inp, dout, N);
        break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};
static floatX *d_x, *d_out, *d_grad; // (N) each: the input, gelu's output, dout in and dinp out (in place)

// Fresh random inputs: x uniform in [-3, 3) (where GELU bends), every 8th value in
// [-12, 12) (tanh saturated, 1 + tanh cancelling for x < 0) and every 64th in
// [-100, 100) (x^3 ~ 1e6: exp overflows in 3); dout uniform in [-1, 1).
static void problem_make(std::vector<floatX> &x, std::vector<floatX> &dout, size_t N) {
    x.resize(N);
    dout.resize(N);
    for (size_t i = 0; i < N; i++) {
        float range = i % 64 == 63 ? 100.0f : i % 8 == 7 ? 12.0f : 3.0f;
        x[i] = from_float(range * rng_uniform());
        dout[i] = from_float(rng_uniform());
    }
    cudaCheck(cudaMalloc(&d_x, N * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, N * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_grad, N * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d_x, x.data(), N * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_x, (void *)d_out, (void *)d_grad}) { cudaCheck(cudaFree(p)); }
}

// Tolerances, all in one place, per element, in U = FLT_EPSILON = 2^-23 (twice fp32's
// unit roundoff). tanhf is within 2 ulp (CUDA's math documentation, as are expf and
// exp2f), and the rest is a handful of roundings; the worst case is the cancellation
// in 1 + tanh(u) (and 1 - tanh(u)^2) where tanh is near -1 (or +-1): an error of a few U
// in tanh becomes a few U of 0.5 |x| absolute (of 0.5 |x| |du| in the derivative). So:
//   forward:  tol32 = 4 U (|x| + |gelu|),
//   backward: tol32 = 8 U |dout| (1 + |x| |du|) + 2 U |dinp|,  du = sqrt(2/pi) (1 + 0.134 x^2),
// generous by 2-4x; then OUT_ROUND of the value for the rounding to floatX: bf16 keeps
// 8 significant bits, so rounding to nearest moves a value by at most 2^-8 of itself;
// we allow twice that, so that rounding alone reads as at most ~0.5 of the tolerance.
// A bug (a wrong constant, a lost factor 0.5, a value skipped in the tail) is off by
// 1e-3 or more of the value.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif
static int num_passed = 0, num_failed = 0;

// Runs variant v at every block size, forward (out all NaN first) and backward (in
// place, on a fresh copy of dout), and compares every value. Two lines, forward and
// backward: the largest error, the worst as a fraction of its tolerance (<= 1 passes;
// NaN, e.g. a value never written, fails), OK or NOT OK.
static void check_variant(int v, const std::vector<floatX> &x, const std::vector<floatX> &dout) {
    size_t N = x.size();
    std::vector<floatX> got(N);
    for (int backward = 0; backward <= 1; backward++) {
        printf("N %8zu  %-8s %-23s ", N, backward ? "backward" : "forward", variant_names[v]);
        double max_err = 0.0, worst = 0.0;
        char where[160] = "";
        for (int block : block_sizes) {
            if (backward) {
                cudaCheck(cudaMemcpy(d_grad, dout.data(), N * sizeof(floatX), cudaMemcpyHostToDevice));
                gelu_backward(v, block, d_grad, d_x, d_grad, N); // in place, as train_gpt2.cu called it
                cudaCheck(cudaMemcpy(got.data(), d_grad, N * sizeof(floatX), cudaMemcpyDeviceToHost));
            } else {
                cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(floatX)));
                gelu_forward(v, block, d_out, d_x, N);
                cudaCheck(cudaMemcpy(got.data(), d_out, N * sizeof(floatX), cudaMemcpyDeviceToHost));
            }
            for (size_t i = 0; i < N; i++) {
                double xi = to_float(x[i]), y, dy, ref, tol32, U = FLT_EPSILON;
                gelu_cpu(&y, &dy, xi);
                if (backward) {
                    double du = sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * xi * xi), g = to_float(dout[i]);
                    ref = g * dy;
                    tol32 = 8 * U * fabs(g) * (1.0 + fabs(xi) * du) + 2 * U * fabs(ref);
                } else {
                    ref = y;
                    tol32 = 4 * U * (fabs(xi) + fabs(y));
                }
                double tol = (1 + OUT_ROUND) * tol32 + OUT_ROUND * fabs(ref), err = fabs(to_float(got[i]) - ref);
                double ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol;
                max_err = std::isnan(err) ? INFINITY : fmax(max_err, err);
                if (ratio > worst) {
                    worst = ratio;
                    snprintf(where, sizeof(where), "block %d: [%zu] = %.7g, expected %.7g (x = %.7g)", block, i,
                             to_float(got[i]), ref, xi);
                }
            }
        }
        int ok = worst <= 1.0;
        printf("blocks 64-1024  max err %.1e, worst %.2f of tol  %s\n", max_err, worst, ok ? "OK" : "NOT OK");
        if (!ok) { printf("    worst at %s\n", where); }
        if (ok) { num_passed++; } else { num_failed++; }
    }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: gelu [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 trainer's kernels, 2 16-byte packs, 3 packs with tanh as a sigmoid\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    const size_t sizes[] = {8 * 3072 + 3, 100, 5};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const size_t sizes[] = {(size_t)8 * 1024 * 3072, 1000003, 5};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/gelu.cu /tmp/gelu_cpu && /tmp/gelu_cpu -c",
                PRECISION_NAME, args.seed);
#endif

    // 1. correctness, every variant at every size and block size, before any timing
    for (size_t N : sizes) {
        std::vector<floatX> x, dout;
        problem_make(x, dout, N);
        for (int v = first; v <= last; v++) { check_variant(v, x, dout); }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing. The bytes that must move: the forward reads x and writes out, the
    // backward reads x and dout and writes dinp (over dout, as the former kernel did; the
    // repeated calls keep multiplying it by gelu', which changes no byte moved).
    if (!args.check_only) {
        const size_t N = (size_t)16 * 1024 * 3072;
        std::vector<floatX> x, dout;
        problem_make(x, dout, N);
        cudaCheck(cudaMemcpy(d_grad, dout.data(), N * sizeof(floatX), cudaMemcpyHostToDevice));
        printf("\nN = %zu; ms at each block size: median of 20 calls after a warm-up;\n"
               "GB/s and %% of the H200's 4.8 TB/s at the best block size\n", N);
        printf("%-8s  %-23s %8s %8s %8s %8s %8s %8s %8s\n", "pass", "variant", "64", "128", "256", "512", "1024", "GB/s",
               "% peak");
        for (int backward = 0; backward <= 1; backward++) {
            double bytes = (backward ? 3.0 : 2.0) * N * sizeof(floatX);
            for (int v = first; v <= last; v++) {
                printf("%-8s  %-23s ", backward ? "backward" : "forward", variant_names[v]);
                float best = INFINITY;
                for (int block : block_sizes) {
                    float ms = backward ? time_median_ms([&] { gelu_backward(v, block, d_grad, d_x, d_grad, N); })
                                        : time_median_ms([&] { gelu_forward(v, block, d_out, d_x, N); });
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
