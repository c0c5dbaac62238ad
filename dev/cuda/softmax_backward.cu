/*
softmax_backward.cu: the kernel ladder for the backward pass of attention's causal
softmax as train_gpt2.cu computes it, three ways.

att and datt are (rows, T) with rows = B*NH*T; row r is query position t = r % T, and
att holds the probabilities of the forward pass (causal_softmax.cu), nonzero only in
columns 0..t. In place, datt (the gradient at the probabilities) becomes the gradient at
the scores, through the softmax and the scale s = 1/sqrt(HS) the scores were multiplied by:
    datt[i] = s att[i] (datt[i] - sum_{j<=t} att[j] datt[j])   for i <= t,   0 above,
(the softmax's Jacobian is diag(p) - p p^T). The zeros above the diagonal must be written:
the matmuls after this read the whole (T, T) matrix. floatX is bf16 by default, fp32 with
-DENABLE_FP32, the arithmetic fp32. Per row: t+1 entries of each input read, T written.

    1: the trainer's kernel: a warp per row, two passes over the row     — ./dev/cuda/softmax_backward 1
    2: the row in registers (T/32 entries of each a lane): read once     — ./dev/cuda/softmax_backward 2
    3: as 2, with 16-byte loads and stores (8 bf16 or 4 fp32 at a time)  — ./dev/cuda/softmax_backward 3

Variants 2 and 3 keep a row in registers, so they take T <= 1024 (GPT-2's longest
sequence). 3 moves whole packs where T % PACK == 0 (every row then starts 16-byte
aligned) and goes entry by entry otherwise. All are deterministic: a row is one warp,
reduced by shuffles in a fixed order.

main checks every variant at 32, 64, 128, 256 and 512 threads per block (a warp per
row) against the formula in double on the CPU, from the same floatX inputs, on fresh
random inputs: att a softmax of random scores on each row (rounded to floatX) and 7s
above the diagonal (not the forward pass's zeros: a kernel must not take them into its
sums), datt uniform in [-1, 1) everywhere, at T = 67, 129, 136 and 1024 with B*NH = 2 or
3. Entries on and below the diagonal must be within a tolerance (see the table below);
entries above it exactly 0. Then it times each variant at every block size at B*NH = 96
(8 x 12 heads) and T = 1024 (warm-up, CUDA events, median of 20 calls) and prints ms,
GB/s and % of the H200's 4.8 TB/s. It ends with "N passed, M failed" (a check is one
variant at one T, all block sizes) and exits non-zero if one failed.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/softmax_backward.cu -o dev/cuda/softmax_backward
    ./dev/cuda/softmax_backward        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/softmax_backward.cu dev/emu/softmax_backward_cpu -DENABLE_BF16
    ./dev/emu/softmax_backward_cpu -c

Left out: skipping the writes of the zeros (the next matmuls could be told the matrix is
triangular), and the real fix: flash attention's backward pass, which never stores att
or datt (cuDNN's).
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_uniform, ceil_div, warp_sum, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference

// ref gets the new datt of the entries on and below the diagonal, in double from the
// same floatX inputs the GPU reads, and dot the row's sum att . datt (for the
// tolerance, with dot_abs the sum of |att datt|); entries above the diagonal are left
// alone (they must be exactly 0, which check_variant tests on its own).
static void softmax_backward_cpu(double *ref, double *dot, double *dot_abs, const floatX *datt, const floatX *att,
                                 size_t rows, int T, float scale) {
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % T);
        const floatX *a = att + r * T, *d = datt + r * T;
        dot[r] = dot_abs[r] = 0.0;
        for (int i = 0; i <= t; i++) {
            dot[r] += (double)to_float(a[i]) * to_float(d[i]);
            dot_abs[r] += fabs((double)to_float(a[i]) * to_float(d[i]));
        }
        for (int i = 0; i <= t; i++) { ref[r * T + i] = (double)scale * to_float(a[i]) * (to_float(d[i]) - dot[r]); }
    }
}

// ----------------------------------------------------------------------------
// the kernels. All three: a warp per row, blockDim.x / 32 rows per block, the row's
// sum by train_gpt2.cu's warp_sum (in common.h).

// 1: train_gpt2.cu's causal_softmax_backward_kernel, verbatim but for the name (its comment:)
// Through the softmax, in place: datt becomes the gradient of the scores,
// att (datt - sum(att datt)) times the scale the scores were multiplied by.
// Two lane-strided passes: the first reads att and datt up to t, the second reads them
// again (mostly from L1) and writes the whole row. A lane has a 2-byte load or two in
// flight at a time, and the second pass waits for the first's warp sum.
// --- shared-copy of train_gpt2.cu: causal_softmax_backward_kernel (as causal_softmax_backward_kernel1) ---
__global__ void causal_softmax_backward_kernel1(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    const floatX *a = att + (size_t)row * T;
    floatX *d = datt + (size_t)row * T;
    float dot = 0.0f;
    for (int i = lane; i <= t; i += 32) { dot += to_float(a[i]) * to_float(d[i]); }
    dot = warp_sum(dot);
    for (int i = lane; i < T; i += 32) { d[i] = from_float(i <= t ? to_float(a[i]) * (to_float(d[i]) - dot) * scale : 0.0f); }
}

// 2: the row in registers. Lane l holds the entries l, l + 32, ... of att and datt (up
// to the diagonal), all its loads issued at once: 64 in flight a lane where 1 has a few.
// Then the sum, and the write from registers: each input is read once. The loops unroll
// completely (MAX_T is a compile-time constant), so that av and dv are registers, not
// local memory; the tests against t and T are predicates. A chunk of 32 columns wholly
// above the diagonal is skipped by the whole warp at once, loads and all.
#define MAX_T 1024
__global__ void causal_softmax_backward_kernel2(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    const floatX *a = att + (size_t)row * T;
    floatX *d = datt + (size_t)row * T;
    float av[MAX_T / 32], dv[MAX_T / 32], dot = 0.0f;
#pragma unroll
    for (int k = 0; k < MAX_T / 32; k++) {
        int i = lane + 32 * k;
        av[k] = dv[k] = 0.0f;
        if (32 * k > t) { continue; } // the warp's chunk k is above the diagonal: nothing to read
        if (i <= t) { av[k] = to_float(a[i]); dv[k] = to_float(d[i]); }
        dot += av[k] * dv[k];
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int k = 0; k < MAX_T / 32; k++) {
        int i = lane + 32 * k;
        if (i < T) { d[i] = from_float(i <= t ? av[k] * (dv[k] - dot) * scale : 0.0f); }
    }
}

// 3: variant 2 with 16-byte accesses. Lane l holds the packs l, l + 32, ... of each row
// (a Pack of precision.h: 8 bf16 or 4 fp32, one ld.global.v4 / st.global.v4): 4 loads of
// each input a lane for a 1024-entry bf16 row where 2 issues 32, and a warp moves 512
// contiguous bytes at once. The packs stay packed in registers (16 bytes each, not 8
// floats), converted to fp32 as they are used: half the registers of 2 in bf16. A pack
// that straddles the diagonal is loaded whole and its entries past t are masked. Packs
// need T % PACK == 0, so that every row starts aligned; for other T the same code goes
// entry by entry (on the GPU that branch is taken by the whole grid alike).
__global__ void causal_softmax_backward_kernel3(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) { return; }
    int t = row % T;
    const floatX *a = att + (size_t)row * T;
    floatX *d = datt + (size_t)row * T;
    const bool aligned = T % PACK == 0;
    const int packs = MAX_T / PACK / 32; // per lane: 4 in bf16, 8 in fp32
    Pack ap[packs], dp[packs];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < packs; k++) {
        int i0 = (lane + 32 * k) * PACK; // this pack's first column
        for (int e = 0; e < PACK; e++) { ap[k].v[e] = dp[k].v[e] = from_float(0.0f); }
        if (i0 > t) { continue; } // wholly above the diagonal: not read, written as zeros
        if (aligned) {
            ap[k] = *(const Pack *)(a + i0);
            dp[k] = *(const Pack *)(d + i0);
        } else {
            for (int e = 0; e < PACK && i0 + e <= t; e++) { ap[k].v[e] = a[i0 + e]; dp[k].v[e] = d[i0 + e]; }
        }
        for (int e = 0; e < PACK; e++) {
            if (i0 + e <= t) { dot += to_float(ap[k].v[e]) * to_float(dp[k].v[e]); }
        }
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int k = 0; k < packs; k++) {
        int i0 = (lane + 32 * k) * PACK;
        if (i0 >= T) { continue; }
        Pack o;
        for (int e = 0; e < PACK; e++) {
            o.v[e] = from_float(i0 + e <= t ? to_float(ap[k].v[e]) * (to_float(dp[k].v[e]) - dot) * scale : 0.0f);
        }
        if (aligned) {
            *(Pack *)(d + i0) = o;
        } else {
            for (int e = 0; e < PACK && i0 + e < T; e++) { d[i0 + e] = o.v[e]; }
        }
    }
}

// ----------------------------------------------------------------------------
// the launcher

static const char *variant_names[4] = {"", "1 trainer (2 passes)", "2 registers", "3 registers+128b"};

// datt (rows, T) in place, with variant 1-3 and `block` threads (a multiple of 32) per
// block, a warp per row; the trainer's launch is variant 1 with block = 256
static void softmax_backward(int variant, int block, floatX *datt, const floatX *att, size_t rows, int T, float scale) {
    if (variant >= 2 && T > MAX_T) {
        fprintf(stderr, "Error: variant %d keeps a row in registers and takes T <= %d, got T = %d\n", variant, MAX_T, T);
        exit(EXIT_FAILURE);
    }
    unsigned grid = ceil_div(rows, block / 32);
    switch (variant) {
    case 1: causal_softmax_backward_kernel1<<<grid, block>>>(datt, att, (int)rows, T, scale); break;
    case 2: causal_softmax_backward_kernel2<<<grid, block>>>(datt, att, (int)rows, T, scale); break;
    case 3: causal_softmax_backward_kernel3<<<grid, block>>>(datt, att, (int)rows, T, scale); break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the checks and the timing

static const int block_sizes[] = {32, 64, 128, 256, 512}; // threads, = warps (rows) per block x 32
static int num_passed = 0, num_failed = 0;

// Fresh random inputs, never zeros: on each row att is the softmax of scores uniform in
// [-4, 4) over columns 0..t (in double, rounded to floatX: from near-uniform to peaked
// rows), and 7 above the diagonal; datt uniform in [-1, 1) everywhere.
static void make_inputs(std::vector<floatX> &att, std::vector<floatX> &datt, size_t rows, int T) {
    att.resize(rows * T);
    datt.resize(rows * T);
    std::vector<double> e(T);
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % T);
        double sum = 0.0;
        for (int i = 0; i <= t; i++) { sum += e[i] = exp(4.0 * rng_uniform()); }
        for (int i = 0; i < T; i++) {
            att[r * T + i] = from_float(i <= t ? (float)(e[i] / sum) : 7.0f);
            datt[r * T + i] = from_float(rng_uniform());
        }
    }
}

// Tolerances, in one table, per entry. In fp32 a sum of n terms is within (longest
// chain of additions) u sum|x_i| of the exact one, u = 2^-24 (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., chapter 4), and here the chain is a lane's
// t/32 + 1 terms (2 and 3: the same count) and 5 shuffle levels, each product one
// rounding more: with U = FLT_EPSILON = 2^-23, twice u, and K = T/32 + 16,
//     err_dot = K U sum|att datt|,
//     tol32   = s |att| (err_dot + 2 U (|datt| + |dot|)) + 2 U |ref|
// (datt - dot may cancel, so of the terms, not of the difference); then OUT_ROUND of
// the value for the rounding to floatX: bf16 keeps 8 significant bits, so rounding to
// nearest moves a value by at most 2^-8 of itself; we allow twice that, so that
// rounding alone reads as at most ~0.5 of the tolerance. A bug (an entry missed in
// the sum, a 7 from above the diagonal taken in, the scale lost) is off by far more.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif

// Runs `variant` at every block size, each time on a fresh copy of datt, and compares all
// entries: on and below the diagonal with the reference, above it with exactly 0. One
// line: the largest error and the worst as a fraction of its tolerance (<= 1 passes, NaN
// fails), OK or NOT OK; on failure a second line with the worst entry.
static void check_variant(int variant, floatX *d_datt, const floatX *d_att, const std::vector<floatX> &att,
                          const std::vector<floatX> &datt, const double *ref, const double *dot, const double *dot_abs,
                          int T, float scale) {
    size_t rows = att.size() / T;
    printf("T %4d rows %5zu  %-20s ", T, rows, variant_names[variant]);
    std::vector<floatX> out(datt.size());
    double max_err = 0.0, worst = 0.0, U = FLT_EPSILON, K = T / 32.0 + 16;
    size_t nonzero_above = 0;
    char where[200] = "";
    for (int block : block_sizes) {
        cudaCheck(cudaMemcpy(d_datt, datt.data(), datt.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        softmax_backward(variant, block, d_datt, d_att, rows, T, scale);
        cudaCheck(cudaMemcpy(out.data(), d_datt, out.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t r = 0; r < rows; r++) {
            int t = (int)(r % T);
            double err_dot = K * U * dot_abs[r];
            for (int i = 0; i < T; i++) {
                size_t j = r * T + i;
                double y = to_float(out[j]);
                if (i > t) { // above the diagonal: exactly 0, nothing else
                    if (y != 0.0 && nonzero_above++ == 0) {
                        snprintf(where, sizeof(where), "block %d: row %zu column %d above the diagonal = %.7g, not 0",
                                 block, r, i, y);
                    }
                    continue;
                }
                double av = to_float(att[j]), dv = to_float(datt[j]);
                double tol32 = scale * fabs(av) * (err_dot + 2 * U * (fabs(dv) + fabs(dot[r]))) + 2 * U * fabs(ref[j]);
                double tol = (1 + OUT_ROUND) * tol32 + OUT_ROUND * fabs(ref[j]), err = fabs(y - ref[j]);
                double ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol;
                max_err = std::isnan(err) ? INFINITY : fmax(max_err, err);
                if (ratio > worst) {
                    worst = ratio;
                    if (nonzero_above == 0) {
                        snprintf(where, sizeof(where), "block %d: row %zu column %d = %.7g, expected %.7g, tolerance %.2g",
                                 block, r, i, y, ref[j], tol);
                    }
                }
            }
        }
    }
    int ok = worst <= 1.0 && nonzero_above == 0;
    printf("threads 32-512  max err %.1e, worst %.2f of tol, %zu nonzero above  %s\n", max_err, worst, nonzero_above,
           ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: softmax_backward [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 two passes (the trainer's), 2 row in registers, 3 registers + 128-bit\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
    const float scale = 0.125f; // 1/sqrt(HS) at GPT-2's head size 64
    // the checks' sizes, {B*NH, T}: rows = B*NH*T; ragged T, one of them a multiple of
    // 8 (variant 3's 128-bit path) but not of 32, and GPT-2's T = 1024
#ifdef CUDA_EMU_H
    // every thread a fiber on the CPU: small sizes, and nothing to time
    const int sizes[][2] = {{2, 67}, {2, 130}, {1, 136}, {1, 1024}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int sizes[][2] = {{3, 67}, {3, 129}, {3, 136}, {2, 1024}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/softmax_backward.cu /tmp/smb_cpu && /tmp/smb_cpu -c",
                PRECISION_NAME, args.seed);
#endif

    // 1. correctness: every variant, every block size, every size, before any timing
    for (const int *s : sizes) {
        int T = s[1];
        size_t rows = (size_t)s[0] * T;
        std::vector<floatX> att, datt;
        make_inputs(att, datt, rows, T);
        std::vector<double> ref(rows * T), dot(rows), dot_abs(rows);
        softmax_backward_cpu(ref.data(), dot.data(), dot_abs.data(), datt.data(), att.data(), rows, T, scale);
        floatX *d_att, *d_datt;
        cudaCheck(cudaMalloc(&d_att, att.size() * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_datt, datt.size() * sizeof(floatX)));
        cudaCheck(cudaMemcpy(d_att, att.data(), att.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        for (int v = first; v <= last; v++) {
            check_variant(v, d_datt, d_att, att, datt, ref.data(), dot.data(), dot_abs.data(), T, scale);
        }
        cudaCheck(cudaFree(d_att));
        cudaCheck(cudaFree(d_datt));
    }

#ifndef CUDA_EMU_H
    // 2. timing at B*NH = 8 * 12, T = 1024. Bytes counted: the least any kernel must
    // move, the t+1 entries of att and datt of each row read once and all T entries
    // written once; so GB/s is comparable across variants (variant 1 reads more, mostly
    // from cache). In place: after the first call datt holds gradients of the scores,
    // which changes no byte moved.
    if (!args.check_only) {
        const int BNH = 8 * 12, T = 1024;
        size_t rows = (size_t)BNH * T;
        std::vector<floatX> att, datt;
        make_inputs(att, datt, rows, T);
        floatX *d_att, *d_datt;
        cudaCheck(cudaMalloc(&d_att, att.size() * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_datt, datt.size() * sizeof(floatX)));
        cudaCheck(cudaMemcpy(d_att, att.data(), att.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_datt, datt.data(), datt.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        double bytes = (double)BNH * ((double)T * (T + 1) + (double)T * T) * sizeof(floatX);
        const double peak_gbs = 4800.0; // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
        printf("\nB*NH %d, T %d, %s, %.1f MB a call; ms by threads per block: median of 20 calls after a warm-up;\n"
               "GB/s and %% of the H200's 4.8 TB/s at the best block size\n", BNH, T, PRECISION_NAME, bytes / 1e6);
        printf("%-20s %8s %8s %8s %8s %8s %8s %8s\n", "variant", "32", "64", "128", "256", "512", "GB/s", "% peak");
        for (int v = first; v <= last; v++) {
            printf("%-20s ", variant_names[v]);
            float best = INFINITY;
            for (int block : block_sizes) {
                float ms = time_median_ms([&] { softmax_backward(v, block, d_datt, d_att, rows, T, scale); });
                best = std::min(best, ms);
                printf("%8.4f ", ms);
            }
            double gbs = bytes / (best * 1e-3) / 1e9;
            printf("%8.0f %7.1f%%\n", gbs, 100.0 * gbs / peak_gbs);
        }
        cudaCheck(cudaFree(d_att));
        cudaCheck(cudaFree(d_datt));
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
