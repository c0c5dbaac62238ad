/*
fused_classifier.cu: the ladder of train_gpt2.cu's last kernel. For each of N = B*T
rows of Vp logits z (only z[0..V) are real; V..Vp-1 pad the vocabulary to a multiple
of 128) it computes the loss, loss[row] = logsumexp(z[0..V)) - z[target], in fp32,
and writes the gradient (softmax(z) - onehot(target)) * dloss over the logits, in
place, with 0 in the padding. The logits are floatX: bf16 by default, -DENABLE_FP32
for fp32; the arithmetic is fp32 either way. Every variant is deterministic.

    1: the trainer's kernel as it is: 1024 threads per row, one pass of online
       softmax for the max and the sum, a second pass writes the gradient   — ./dev/cuda/fused_classifier -v 1
    2: fewer instructions per logit: 128-bit loads and stores (8 bf16 each),
       the online softmax per pack of 8, exp2f instead of expf              — ./dev/cuda/fused_classifier -v 2

main checks every variant at block sizes 128 to 1024, on fresh random logits
(seeded, -s), against a CPU reference in double computed from the same floatX
logits: at GPT-2's V = 50257, Vp = 50304 with 16 rows, and a ragged V = 300, Vp = 384.
Then it times each at N = 8*1024 rows (the trainer's B = 64, T = 1024 is 8 times
that): warm-up, CUDA events, median of 20, ms, GB/s and % of the H200's 4.8 TB/s.
It ends with "N passed, M failed" and exits non-zero if a check failed.

    make dev/cuda/fused_classifier && ./dev/cuda/fused_classifier   (-c checks only, -v N one variant, -h all flags)
    make dev/cuda/fused_classifier PRECISION=FP32                     (fp32 logits: nvcc -DENABLE_FP32)
Without a GPU, the CPU emulator runs the checks of both variants at small sizes:
    make dev/emu/fused_classifier_cpu && ./dev/emu/fused_classifier_cpu -c
    (or: bash dev/emu/emu_build.sh dev/cuda/fused_classifier.cu /tmp/fc_cpu && /tmp/fc_cpu -c)

Dropped: a variant 3 that kept each thread's part of the row in registers between the
passes (56 floatX a thread: the logits read once, not twice). At 1024 threads a block
leaves 64 registers a thread, and it spilled (24 bytes on sm_90, 190 on sm_120, 270 in
fp32); the build refuses kernels that spill (-Xptxas -warn-spills as an error), and it
never ran on a GPU. Left out, for later: cache hints (__ldcs/__stcs; the emulator lacks them), a row split
over a thread-block cluster (Hopper's distributed shared memory), fusing the
classifier into the matmul that writes the logits.
*/
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_next, rng_uniform, block_max/sum, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference

// In double, from the same floatX logits the GPU reads: losses (N), probs (N,Vp),
// softmax over z[0..V) with 0 in the padding. The gradient is (probs - onehot) * dloss.
static void fused_classifier_cpu(double *losses, double *probs, const floatX *logits, const int *targets, size_t N,
                                 size_t V, size_t Vp) {
    for (size_t bt = 0; bt < N; bt++) {
        const floatX *z = logits + bt * Vp;
        double *p = probs + bt * Vp, m = -INFINITY, s = 0.0;
        for (size_t i = 0; i < V; i++) { m = fmax(m, (double)to_float(z[i])); }
        for (size_t i = 0; i < V; i++) { s += exp((double)to_float(z[i]) - m); }
        double lse = m + log(s);
        for (size_t i = 0; i < Vp; i++) { p[i] = i < V ? exp((double)to_float(z[i]) - lse) : 0.0; }
        losses[bt] = lse - (double)to_float(z[targets[bt]]);
    }
}

// ----------------------------------------------------------------------------
// the kernels: one block per row, the row in blockIdx.x, reduced across the block by
// train_gpt2.cu's block_max and block_sum (in common.h)

// 1: train_gpt2.cu's fused_classifier_kernel, verbatim but for the name (its comment:)
// The fused classifier, a block per position. One pass over the V logits finds
// the max and the sum of exponentials together (the running sum is rescaled
// whenever the max grows: the "online softmax" of Milakov & Gimelshein 2018);
// the loss is logsumexp - logit[target]. With dloss > 0 a second pass writes the
// gradient (softmax - onehot) * dloss over the logits, in place; the padded
// columns V..Vp-1 get 0. The probabilities are never stored.
// --- shared-copy of train_gpt2.cu: fused_classifier_kernel (as fused_classifier_kernel1) ---
__global__ void fused_classifier_kernel1(floatX *logits, float *losses, const int *targets, float dloss, int V, int Vp) {
    size_t bt = blockIdx.x;
    floatX *z = logits + bt * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float x = to_float(z[i]);
        if (x > m) {
            s = s * expf(m - x) + 1.0f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    float block_m = block_max(m);
    s = block_sum(m == -INFINITY ? 0.0f : s * expf(m - block_m));
    float lse = block_m + logf(s);
    int target = targets[bt];
    float target_logit = to_float(z[target]);
    __syncthreads(); // everyone has read z[target] before it is overwritten
    if (threadIdx.x == 0) { losses[bt] = lse - target_logit; }
    if (dloss > 0.0f) {
        for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
            float g = i < V ? (expf(to_float(z[i]) - lse) - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
            z[i] = from_float(g);
        }
    }
}

// Variant 2 moves the logits in Packs (precision.h: 16 bytes of floatX, 8 bf16 or
// 4 fp32, one 128-bit load or store, LDG.E.128 in the SASS). They need Vp % PACK == 0
// (the trainer pads Vp to a multiple of 128), so that every row is 16-byte aligned.
#define LOG2E 1.4426950408889634f

// 2: fewer instructions per logit. Variant 1's loops are not unrolled: an iteration
// loads 2 bytes (bf16) and waits for them, so with 2048 threads per SM an SM has ~4 KB
// in flight, where HBM needs ~25 KB (4.8 TB/s x ~700 ns, over 132 SMs) to stay busy.
// Here a load brings 16 bytes, 8x as much. And the arithmetic: 2 exponentials per logit
// make this kernel about as much compute as memory (an H200 reads and writes 8192 x
// 50304 bf16 logits in ~0.34 ms; 16 FP32 instructions per logit take ~0.2 ms). So:
//  - the online softmax is done per pack: its max first (no exponentials), then one
//    rescale of the running sum per pack instead of a data-dependent branch per logit;
//  - exp(x - m) = exp2f(x log2e - m log2e): one FFMA and exp2f (the MUFU.EX2 unit,
//    2 ulp, and a guard for tiny results); expf adds a two-part range reduction, ~5
//    more instructions per call in the SASS for sm_90. The scaled argument's rounding
//    costs ~|x| 2^-24 relative in the result, far below bf16's 2^-8.
// The loss needs z[target], which the second pass overwrites; thread 0 reads it first
// thing, and the barriers in block_max and block_sum order that read before any write.
// (Variant 1 needs its own __syncthreads for this, whose absence the emulator could not
// catch: there thread 0 always runs first.)
__global__ void __launch_bounds__(1024) fused_classifier_kernel2(floatX *logits, float *losses, const int *targets,
                                                                 float dloss, int V, int Vp) {
    size_t bt = blockIdx.x;
    Pack *z = (Pack *)(logits + bt * Vp);
    int target = targets[bt], packs = Vp / PACK;
    float target_logit = threadIdx.x == 0 ? to_float(logits[bt * Vp + target]) : 0.0f;
    float m = -INFINITY, s = 0.0f; // m in natural units, as the loss wants it
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack in = z[p];
        float x[PACK], pack_m = -INFINITY;
        for (int k = 0; k < PACK; k++) {
            x[k] = p * PACK + k < V ? to_float(in.v[k]) : -INFINITY; // padding: exp2f(-inf) = 0
            pack_m = fmaxf(pack_m, x[k]);
        }
        if (pack_m == -INFINITY) { continue; } // padding only: m - m_new would be NaN below
        float m_new = fmaxf(m, pack_m), m2 = m_new * LOG2E;
        // rescale by exp(m - m_new) from the exact difference, not from m2's rounded
        // value: that rounding then biases only the terms added since, and does not add
        // up over the rescales (it did: 5e-6 in the loss at 128 threads). On the first
        // pack m = -inf, s = 0, and the factor is 0.
        s *= exp2f((m - m_new) * LOG2E);
        for (int k = 0; k < PACK; k++) { s += exp2f(fmaf(x[k], LOG2E, -m2)); }
        m = m_new;
    }
    float block_m = block_max(m);
    s = block_sum(m == -INFINITY ? 0.0f : s * exp2f((m - block_m) * LOG2E));
    float lse = block_m + logf(s), lse2 = lse * LOG2E;
    if (threadIdx.x == 0) { losses[bt] = lse - target_logit; }
    if (dloss <= 0.0f) { return; }
    // second pass: the row was read moments ago, so most of it comes from L2, not HBM
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack g = z[p];
        for (int k = 0; k < PACK; k++) {
            int i = p * PACK + k;
            float e = exp2f(fmaf(to_float(g.v[k]), LOG2E, -lse2));
            g.v[k] = from_float(i < V ? (e - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f);
        }
        z[p] = g;
    }
}

// ----------------------------------------------------------------------------
// the launcher, as train_gpt2.cu's fused_classifier with a variant and a block size

static const char *variant_names[3] = {"", "1 trainer", "2 vec128+exp2"};

// NULL if the variant runs with this many threads per block at this Vp, else why not
static const char *cannot_run(int variant, int block, size_t Vp) {
    if (block < 32 || block > 1024 || block % 32 != 0) { return "a block is 1 to 32 whole warps"; }
    if (variant >= 2 && Vp % PACK != 0) { return "Vp is not a whole number of 16-byte packs"; }
    return NULL;
}

// losses (N) and, with dloss > 0, the gradient of the logits (N,Vp) written over them
static void fused_classifier(int variant, int block, floatX *logits, float *losses, const int *targets, float dloss,
                             size_t N, size_t V, size_t Vp) {
    const char *why = cannot_run(variant, block, Vp);
    if (why != NULL) {
        fprintf(stderr, "Error: variant %d with %d threads at Vp = %zu: %s\n", variant, block, Vp, why);
        exit(EXIT_FAILURE);
    }
    unsigned threads = (unsigned)block;
    switch (variant) {
    case 1: fused_classifier_kernel1<<<(unsigned)N, threads>>>(logits, losses, targets, dloss, (int)V, (int)Vp); break;
    case 2: fused_classifier_kernel2<<<(unsigned)N, threads>>>(logits, losses, targets, dloss, (int)V, (int)Vp); break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the inputs, the checks, the timing

static floatX *d_logits, *d_pristine; // (N,Vp): worked on in place; the inputs, kept for the timing
static float *d_losses;               // (N)
static int *d_targets;                // (N)
static void device_alloc(size_t N, size_t Vp) {
    cudaCheck(cudaMalloc(&d_logits, N * Vp * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_pristine, N * Vp * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_losses, N * sizeof(float)));
    cudaCheck(cudaMalloc(&d_targets, N * sizeof(int)));
}
static void device_free(void) {
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_pristine));
    cudaCheck(cudaFree(d_losses));
    cudaCheck(cudaFree(d_targets));
}

// Random logits, never zeros: row r is uniform in [-a, a) with a = 1, 4 or 16 by turns
// (flat to peaked softmaxes), and every 4th row (from row 1) has its target raised 12
// above the row's max: a confident prediction (p = 0.88 to 0.99 at V = 50257) whose
// gradient p - 1 partly cancels. The padding holds 30, above every real logit: a kernel
// that lets it into the max or the sum gets a wrong loss. Targets are uniform in [0, V).
static void make_inputs(std::vector<floatX> &logits, std::vector<int> &targets, size_t N, size_t V, size_t Vp) {
    const float scales[3] = {1.0f, 4.0f, 16.0f};
    logits.resize(N * Vp);
    targets.resize(N);
    for (size_t bt = 0; bt < N; bt++) {
        floatX *z = logits.data() + bt * Vp;
        float m = -INFINITY;
        for (size_t i = 0; i < Vp; i++) {
            z[i] = from_float(i < V ? scales[bt % 3] * rng_uniform() : 30.0f);
            if (i < V) { m = fmaxf(m, to_float(z[i])); }
        }
        targets[bt] = (int)(rng_next() % V);
        if (bt % 4 == 1) { z[targets[bt]] = from_float(m + 12.0f); }
    }
}

// Tolerances, in one table. The reference is exact (double, from the same floatX
// logits), so what we allow for is the kernel's fp32 arithmetic and the rounding of its
// output. Measured under the emulator (seeds 1-5, with the GPU's sizes): loss errors up
// to 3e-6, relative errors of p up to 5e-6; the GPU's expf and exp2f are within 2 ulp.
// LOSS_TOL: absolute, on the loss. lse is below ~30 here, whose fp32 ulp is 2e-6, and
//   the sum of V exponentials and the log add a few ulps. Leaving one logit out moves
//   lse by ~3e-3 at V = 300, but only by ~2e-5 at V = 50257: the small case catches it.
// P_REL: relative error of a probability p = exp(z - lse): the argument is rounded
//   (|z - lse| < ~50: 50 x 6e-8 = 3e-6), and lse is slightly off. It is relative to p,
//   not to the gradient: at the target of a confident row p - 1 cancels, the error stays.
// F_REL: (p - 1) and the product with dloss are each rounded in fp32 (2^-24); 2x that.
// G_ROUND: the stored gradient is rounded to nearest, off by at most 2^-8 relative in
//   bf16 (8 significant bits), 2^-24 in fp32. We allow one ulp, twice that: rounding
//   alone takes a bf16 check to ~0.5 of its tolerance.
// Element i passes if |g - ref| <= (G_ROUND + F_REL) |ref| + 2 P_REL p dloss, the 2 as
// slack; the padding must hold exactly 0.
static const double LOSS_TOL = 2e-5, P_REL = 2e-5, F_REL = 4.0 / 16777216.0;
#if defined(ENABLE_FP32)
static const double G_ROUND = 2.0 / 16777216.0;
#else
static const double G_ROUND = 2.0 / 256.0;
#endif

static int num_passed = 0, num_failed = 0;
static void check(int variant, int block, const double *ref_losses, const double *probs, const int *targets,
                  float dloss, size_t N, size_t V, size_t Vp) {
    std::vector<floatX> g(N * Vp);
    std::vector<float> losses(N);
    cudaCheck(cudaMemcpy(g.data(), d_logits, N * Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(losses.data(), d_losses, N * sizeof(float), cudaMemcpyDeviceToHost));
    double loss_err = 0.0, grad_ratio = 0.0; // worst |err| of a loss; worst |err| / tolerance of a gradient
    size_t worst = 0, bad_padding = 0;
    for (size_t bt = 0; bt < N; bt++) {
        double e = fabs((double)losses[bt] - ref_losses[bt]);
        loss_err = std::isnan(e) ? INFINITY : fmax(loss_err, e); // a NaN (an unwritten loss) fails
        for (size_t i = 0; i < Vp; i++) {
            size_t at = bt * Vp + i;
            double x = (double)to_float(g[at]);
            if (i >= V) { bad_padding += x != 0.0; continue; }
            double ref = (probs[at] - (i == (size_t)targets[bt] ? 1.0 : 0.0)) * dloss;
            double r = fabs(x - ref) / ((G_ROUND + F_REL) * fabs(ref) + 2.0 * P_REL * probs[at] * dloss);
            if (std::isnan(r)) { r = INFINITY; }
            if (r > grad_ratio) { grad_ratio = r; worst = at; }
        }
    }
    int ok = loss_err <= LOSS_TOL && grad_ratio <= 1.0 && bad_padding == 0;
    printf("V %5zu Vp %5zu N %2zu  %-14s %4d threads  loss err %.1e (tol %.0e)  grad err %.2g of tol  padding %s  %s\n",
           V, Vp, N, variant_names[variant], block, loss_err, LOSS_TOL, grad_ratio, bad_padding ? "NOT 0" : "0",
           ok ? "OK" : "NOT OK");
    if (!ok) {
        size_t bt = worst / Vp;
        printf("    worst gradient at row %zu col %zu: %.6e, expected %.6e; loss %.6f, expected %.6f; %zu padding "
               "values not 0\n", bt, worst % Vp, (double)to_float(g[worst]),
               (probs[worst] - (worst % Vp == (size_t)targets[bt] ? 1.0 : 0.0)) * dloss, losses[bt], ref_losses[bt],
               bad_padding);
    }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
// Median GPU time of one call in ms, over 20 calls after a warm-up. The kernel works
// in place, so before each call (outside the timed span) the logits are copied back
// from a pristine copy; like the trainer's matmul that writes them, the copy leaves
// the tail of the logits in L2.
static float time_variant(int variant, int block, float dloss, size_t N, size_t V, size_t Vp) {
    size_t bytes = N * Vp * sizeof(floatX);
    return time_median_ms([&] { fused_classifier(variant, block, d_logits, d_losses, d_targets, dloss, N, V, Vp); },
                          [&] { cudaCheck(cudaMemcpy(d_logits, d_pristine, bytes, cudaMemcpyDeviceToDevice)); });
}
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: fused_classifier [-v N] [-c] [-s SEED] [-h]\n"
           "  -v N     only variant N, checked and then timed (default: both, 1-2)\n"
           "           1 the trainer's, 2 128-bit loads and exp2f\n"
           "  -c       check only, no timing (default: check, then time)\n"
           "  -s SEED  seed of the random logits and targets (default: 1337)\n"
           "  -h       this help\n");
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 2, 0, usage); // variants 1-2, with -v only
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 2;
#ifdef CUDA_EMU_H
    // on the CPU every thread of a block is a fiber: small rows, and nothing to time. At
    // V = 3000 a thread of a 128- or 256-thread block holds more than one pack, so the
    // online rescaling of variant 2 is exercised.
    const size_t sizes[][3] = {{300, 384, 6}, {3000, 3072, 3}}; // V, Vp, N
    printf("CPU emulation (dev/emu), %s: checks only, at small sizes; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const size_t sizes[][3] = {{50257, 50304, 16}, {300, 384, 64}}; // V, Vp, N
    require_gpu("checks all variants: bash dev/emu/emu_build.sh dev/cuda/fused_classifier.cu /tmp/fc_cpu && "
                "/tmp/fc_cpu -c", PRECISION_NAME " logits", args.seed);
#endif
    const int blocks[4] = {128, 256, 512, 1024};

    // 1. correctness, every variant at every block size it supports, before any timing
    for (const size_t *sz : sizes) {
        size_t V = sz[0], Vp = sz[1], N = sz[2];
        float dloss = 1.0f / (float)N; // the gradient of the mean loss, as in the trainer
        std::vector<floatX> logits;
        std::vector<int> targets;
        make_inputs(logits, targets, N, V, Vp);
        std::vector<double> ref_losses(N), probs(N * Vp);
        fused_classifier_cpu(ref_losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
        device_alloc(N, Vp);
        cudaCheck(cudaMemcpy(d_targets, targets.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        for (int v = first; v <= last; v++) {
            for (int block : blocks) {
                if (cannot_run(v, block, Vp) != NULL) {
                    printf("V %5zu Vp %5zu N %2zu  %-14s %4d threads  skipped: %s\n", V, Vp, N, variant_names[v], block,
                           cannot_run(v, block, Vp));
                    continue;
                }
                // fresh logits each time (the kernel overwrites them), losses all NaN
                cudaCheck(cudaMemcpy(d_logits, logits.data(), N * Vp * sizeof(floatX), cudaMemcpyHostToDevice));
                cudaCheck(cudaMemset(d_losses, 0xFF, N * sizeof(float)));
                fused_classifier(v, block, d_logits, d_losses, d_targets, dloss, N, V, Vp);
                check(v, block, ref_losses.data(), probs.data(), targets.data(), dloss, N, V, Vp);
            }
        }
        device_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing at GPT-2's vocabulary. We count 3 x N x Vp x sizeof(floatX) bytes for
    // every variant (the logits read twice, written once), so GB/s compares times; the
    // least DRAM traffic is 2 of those 3 (the second read mostly hits L2), so a kernel at
    // the DRAM floor shows 150% of 4.8 TB/s.
    if (!args.check_only) {
        const size_t V = 50257, Vp = 50304, N = 8 * 1024;
        const double peak_gbs = 4800.0; // H200 HBM3e, from the data sheet: other GPUs are still compared to it
        double bytes = 3.0 * N * Vp * sizeof(floatX);
        std::vector<floatX> logits;
        std::vector<int> targets;
        make_inputs(logits, targets, N, V, Vp);
        device_alloc(N, Vp);
        cudaCheck(cudaMemcpy(d_pristine, logits.data(), N * Vp * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_targets, targets.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        printf("\nN = %zu rows (the trainer's B = 64, T = 1024 is 8x that), V = %zu, Vp = %zu; median of 20 calls\n"
               "GB/s counts 3 x %.0f MB (read twice, written once); the DRAM floor, read once and written once at "
               "4.8 TB/s, is %.3f ms\n", N, V, Vp, bytes / 3e6, (2.0 * bytes / 3.0) / (peak_gbs * 1e6));
        printf("%-14s %7s %9s %9s %12s\n", "variant", "threads", "ms", "GB/s", "% of 4.8TB/s");
        for (int v = first; v <= last; v++) {
            for (int block : {256, 512, 1024}) {
                if (cannot_run(v, block, Vp) != NULL) { continue; }
                float ms = time_variant(v, block, 1.0f / N, N, V, Vp);
                double gbs = bytes / (ms * 1e-3) / 1e9;
                printf("%-14s %7d %9.3f %9.0f %11.0f%%\n", variant_names[v], block, ms, gbs, 100.0 * gbs / peak_gbs);
            }
        }
        device_free();
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
