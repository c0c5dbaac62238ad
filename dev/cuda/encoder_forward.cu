/*
encoder_forward.cu: the kernel ladder for GPT-2's embedding as train_gpt2.cu computes
it: for every position (b, t), out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], with wte (V, C),
wpe (maxT, C) and out (B, T, C) in floatX (bf16 by default, fp32 with -DENABLE_FP32),
the addition in fp32. One add per element and nothing to reuse but the rows of wpe:
the op is a gather and a copy, bound by memory alone, so every rung moves the same
bytes with fewer instructions, and keeps more of them in flight.

    1: the trainer's kernel: a thread per element, two 64-bit divisions each  — ./dev/cuda/encoder_forward 1
    2: a thread per 16-byte pack (8 bf16): 8x fewer loads, stores, divisions  — ./dev/cuda/encoder_forward 2
    3: a warp per position: its token read once, all its packs in flight     — ./dev/cuda/encoder_forward 3
(In fp32 the pack holds 4 values.) 2 and 3 need C % PACK == 0, so that every row starts
16-byte aligned; GPT-2's C (768 to 1600) is a multiple of 64.

main checks every variant at 5 block sizes (64 to 1024 threads) against a CPU reference
in double, on fresh random inputs (tables uniform in [-1, 1), tokens uniform in [0, V)):
(B, T, C) = (8, 1024, 768), (4, 1000, 1600), (3, 37, 67) and (1, 5, 256), with wpe two
rows longer than T, so that a wrong position reads wrong numbers rather than past the
end. Then it times each variant and block size at B = 64, T = 1024, V = 50257 for C =
768 and 1600 (warm-up, CUDA events, median of 20 calls) and prints ms, GB/s and % of the
H200's 4.8 TB/s. It ends with "N passed, M failed" and exits non-zero if a check failed.
No variant uses atomics: every run gives the same bits.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/encoder_forward.cu -o dev/cuda/encoder_forward
    ./dev/cuda/encoder_forward        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/encoder_forward.cu dev/emu/encoder_forward_cpu -DENABLE_BF16
    ./dev/emu/encoder_forward_cpu -c

Left out, for later: cache hints (__ldcs/__stcs; the emulator lacks them), and fusing the
embedding into the first LayerNorm, which reads out straight back.
*/
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_next, rng_uniform, ceil_div, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference: the sum in double, exact for two floatX

static void encoder_forward_cpu(double *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C) {
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        const floatX *e = wte + (size_t)inp[bt] * C, *w = wpe + (bt % T) * C;
        for (int c = 0; c < C; c++) { out[bt * C + c] = (double)to_float(e[c]) + (double)to_float(w[c]); }
    }
}

// ----------------------------------------------------------------------------
// the kernels, slowest first

// 1: train_gpt2.cu's encoder_forward_kernel, verbatim but for the name (its comment:)
// out[b,t,:] = wte[token] + wpe[t]; one thread per element
// A warp reads 64 contiguous bytes of a wte row in bf16 (two rows where it straddles a
// row's end): coalesced, but 2-byte requests, and i / C, i % C and bt % T are 64-bit
// divisions, several dozen instructions each, for one add.
// --- shared-copy of train_gpt2.cu: encoder_forward_kernel (as encoder_forward_kernel1) ---
__global__ void encoder_forward_kernel1(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                                        int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) { return; }
    size_t bt = i / C, c = i % C, t = bt % T;
    out[i] = from_float(to_float(wte[(size_t)inp[bt] * C + c]) + to_float(wpe[t * C + c]));
}

// 2: a thread per 16-byte pack of out: one 128-bit load from each table and one 128-bit
// store move what 1 does with 8 of each (in bf16), and the index arithmetic is paid once
// per 8 elements. A warp now covers 512 contiguous bytes of a row. P = C / PACK is the
// number of packs in a row; every row starts 16-byte aligned as C % PACK == 0.
__global__ void encoder_forward_kernel2(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                                        int C) {
    size_t P = (size_t)(C / PACK), i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // i: a pack of out
    if (i >= (size_t)B * T * P) { return; }
    size_t bt = i / P, p = i % P, t = bt % T;
    Pack e = ((const Pack *)(wte + (size_t)inp[bt] * C))[p], w = ((const Pack *)(wpe + t * C))[p], o;
    for (int k = 0; k < PACK; k++) { o.v[k] = from_float(to_float(e.v[k]) + to_float(w.v[k])); }
    ((Pack *)out)[i] = o;
}

// 3: a warp per position. The warp's number is its position, so there is no division
// but the one for t, and the token is read once (one broadcast load), not once per
// pack. Lane l takes the packs l, l + 32, ... of the row, UNROLL3 of them at a time: the
// inner loops unroll, so a lane issues 2 x UNROLL3 loads before the first add waits on
// one (at C = 768 in bf16, 96 packs a row, the whole row is in flight at once: 3 KB).
#define UNROLL3 4
__global__ void encoder_forward_kernel3(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                                        int C) {
    int bt = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, P = C / PACK;
    if (bt >= B * T) { return; } // a whole warp leaves together
    const Pack *e = (const Pack *)(wte + (size_t)inp[bt] * C), *w = (const Pack *)(wpe + (size_t)(bt % T) * C);
    Pack *o = (Pack *)(out + (size_t)bt * C);
    for (int base = lane; base < P; base += 32 * UNROLL3) {
        Pack ev[UNROLL3] = {}, wv[UNROLL3] = {};
#pragma unroll
        for (int k = 0; k < UNROLL3; k++) {
            if (base + 32 * k < P) { ev[k] = e[base + 32 * k]; wv[k] = w[base + 32 * k]; }
        }
#pragma unroll
        for (int k = 0; k < UNROLL3; k++) {
            if (base + 32 * k >= P) { continue; } // past the row: nothing loaded, nothing to store
            Pack r;
            for (int j = 0; j < PACK; j++) { r.v[j] = from_float(to_float(ev[k].v[j]) + to_float(wv[k].v[j])); }
            o[base + 32 * k] = r;
        }
    }
}

// ----------------------------------------------------------------------------
// the launcher: variant and block size first, then encoder_forward's own arguments

static const char *variant_names[4] = {"", "1 trainer (thread/elem)", "2 thread/16-byte pack", "3 warp/position"};

// Why variant v cannot take rows of C channels, or NULL if it can
static const char *unsupported(int variant, int C) {
    if (variant >= 2 && C % PACK != 0) { return PACK == 8 ? "needs C % 8 == 0" : "needs C % 4 == 0"; }
    return NULL;
}

static void encoder_forward(int variant, int block, floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                            int B, int T, int C) {
    size_t N = (size_t)B * T;
    switch (variant) {
    case 1: encoder_forward_kernel1<<<ceil_div(N * C, block), block>>>(out, inp, wte, wpe, B, T, C); break;
    case 2: encoder_forward_kernel2<<<ceil_div(N * (C / PACK), block), block>>>(out, inp, wte, wpe, B, T, C); break;
    case 3: encoder_forward_kernel3<<<ceil_div(N, block / 32), block>>>(out, inp, wte, wpe, B, T, C); break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};
static floatX *d_wte, *d_wpe, *d_out; // (V, C), (T + 2, C), (B, T, C)
static int *d_inp;                    // (B, T)

// Fresh random inputs: the tables uniform in [-1, 1) (never all zeros), the tokens
// uniform in [0, V). wpe has two rows more than T: a kernel that takes the position
// from the wrong index reads real, wrong numbers there.
static void problem_make(std::vector<int> &inp, std::vector<floatX> &wte, std::vector<floatX> &wpe, int B, int T, int C,
                         int V) {
    inp.resize((size_t)B * T);
    wte.resize((size_t)V * C);
    wpe.resize((size_t)(T + 2) * C);
    for (floatX &x : wte) { x = from_float(rng_uniform()); }
    for (floatX &x : wpe) { x = from_float(rng_uniform()); }
    for (int &tok : inp) { tok = (int)(rng_next() % (uint64_t)V); }
    cudaCheck(cudaMalloc(&d_inp, inp.size() * sizeof(int)));
    cudaCheck(cudaMalloc(&d_wte, wte.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_wpe, wpe.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, (size_t)B * T * C * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d_inp, inp.data(), inp.size() * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_wte, wte.data(), wte.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_wpe, wpe.data(), wpe.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_inp, (void *)d_wte, (void *)d_wpe, (void *)d_out}) { cudaCheck(cudaFree(p)); }
}

// The tolerance, relative to the exact sum s. The kernel rounds s once to fp32 (off by
// at most 2^-24 |s|; we allow U = FLT_EPSILON = 2^-23, twice that) and then to floatX:
// bf16 keeps 8 significant bits, so rounding to nearest moves a value by at most 2^-8
// of itself; OUT_ROUND allows twice that, so that the rounding alone reads as at most
// ~0.5 of the tolerance. A bug (a wrong row, token or position) is off by ~1.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif
static int num_passed = 0, num_failed = 0;

// Runs variant v at every block size, out all NaN before each run, and compares every
// element. One line: the largest error, the worst as a fraction of its tolerance (<= 1
// passes; NaN, e.g. an element never written, fails), OK or NOT OK.
static void check_variant(int v, const double *ref, int B, int T, int C) {
    printf("%d x %4d x %4d  %-24s ", B, T, C, variant_names[v]);
    if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); return; }
    size_t n = (size_t)B * T * C;
    std::vector<floatX> out(n);
    double max_err = 0.0, worst = 0.0;
    char where[160] = "";
    for (int block : block_sizes) {
        cudaCheck(cudaMemset(d_out, 0xFF, n * sizeof(floatX)));
        encoder_forward(v, block, d_out, d_inp, d_wte, d_wpe, B, T, C);
        cudaCheck(cudaMemcpy(out.data(), d_out, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            double err = fabs((double)to_float(out[i]) - ref[i]);
            double tol = (FLT_EPSILON + OUT_ROUND * (1 + FLT_EPSILON)) * fabs(ref[i]);
            double ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol; // a sum of exactly 0 must be 0
            max_err = std::isnan(err) ? INFINITY : fmax(max_err, err);
            if (ratio > worst) {
                worst = ratio;
                snprintf(where, sizeof(where), "block %d: out[%zu] (position %zu, channel %zu) = %.7g, expected %.7g",
                         block, i, i / C, i % C, to_float(out[i]), ref[i]);
            }
        }
    }
    int ok = worst <= 1.0;
    printf("blocks 64-1024  max err %.1e, worst %.2f of tol  %s\n", max_err, worst, ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: encoder_forward [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 trainer's kernel, 2 thread per 16-byte pack, 3 warp per position\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
    // {B, T, C, V}: GPT-2 small's and XL's widths, a ragged C, a position or two
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    const int shapes[][4] = {{4, 64, 768, 100}, {2, 16, 1600, 50}, {3, 37, 67, 50}, {1, 5, 256, 10}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int shapes[][4] = {{8, 1024, 768, 50257}, {4, 1000, 1600, 50257}, {3, 37, 67, 1000}, {1, 5, 256, 100}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/encoder_forward.cu /tmp/encf_cpu && "
                "/tmp/encf_cpu -c", PRECISION_NAME, args.seed);
#endif

    // 1. correctness, every variant at every shape and block size, before any timing
    for (const int *s : shapes) {
        int B = s[0], T = s[1], C = s[2], V = s[3];
        std::vector<int> inp;
        std::vector<floatX> wte, wpe;
        problem_make(inp, wte, wpe, B, T, C, V);
        std::vector<double> ref((size_t)B * T * C);
        encoder_forward_cpu(ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
        for (int v = first; v <= last; v++) { check_variant(v, ref.data(), B, T, C); }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing. The bytes that must move: a wte row read and an out row written per
    // position, wpe read once (its rows are reused across the batch, from L2), the tokens.
    if (!args.check_only) {
        const int B = 64, T = 1024, V = 50257;
        printf("\nB = %d, T = %d, V = %d; ms at each block size: median of 20 calls after a warm-up;\n"
               "GB/s and %% of the H200's 4.8 TB/s at the best block size\n", B, T, V);
        printf("%4s  %-24s %8s %8s %8s %8s %8s %8s %8s\n", "C", "variant", "64", "128", "256", "512", "1024", "GB/s", "% peak");
        for (int C : {768, 1600}) {
            std::vector<int> inp;
            std::vector<floatX> wte, wpe;
            problem_make(inp, wte, wpe, B, T, C, V);
            double bytes = (2.0 * B * T * C + (double)T * C) * sizeof(floatX) + (double)B * T * sizeof(int);
            for (int v = first; v <= last; v++) {
                printf("%4d  %-24s ", C, variant_names[v]);
                if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); continue; }
                float best = INFINITY;
                for (int block : block_sizes) {
                    float ms = time_median_ms([&] { encoder_forward(v, block, d_out, d_inp, d_wte, d_wpe, B, T, C); });
                    best = std::min(best, ms);
                    printf("%8.4f ", ms);
                }
                double gbs = bytes / (best * 1e-3) / 1e9;
                printf("%8.0f %7.1f%%\n", gbs, 100.0 * gbs / PEAK_GBS);
            }
            problem_free();
        }
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
