// lib/gemm.h: the CPU programs' matrix multiply, a blocked GEMM with packed panels and a
// register tile (most of a CPU step's time goes here), with its helpers: exp_fast (expf
// to float precision, vectorisable) and dot8 (a dot product in eight partial sums).
// The chapters call gemm() the way their GPU twins call cuBLAS: it is infrastructure here,
// the algorithm is explained in place for whoever wants to read it.
#ifndef LIB_GEMM_H
#define LIB_GEMM_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "utils.h"

// e^x in a form the compiler can vectorise (libm's expf is a function call per
// element, and the softmaxes and GELUs call it ~50 million times a step).
// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r from its Taylor
// series to degree 6; 2^n built directly in the float's exponent bits. ln 2 is
// split in two (Cody & Waite) so that r = x - n ln2 stays exact. Max relative
// error 2.3e-7 (4 ulp) over the clamped range; below -87 the result is 1e-38
// rather than a denormal or 0, which no sum of probabilities can tell apart.
// (GCC vectorises the clamp's comparisons only with -fno-trapping-math, which
// the Makefile sets; without it this is still correct, just scalar.)
static inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; // round to nearest via 1.5 * 2^23
    float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f; // ln 2 = hi + lo
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t bits = ((int32_t)n + 127) << 23; // 2^n as a float: n in the exponent field
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return p * two_n;
}

// Dot product in 8 interleaved partial sums: the compiler may not reorder a
// single running sum, but it can turn 8 independent ones into one vector.
static inline float dot8(const float *a, const float *b, size_t n) {
    float lanes[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; j++) { lanes[j] += a[i + j] * b[i + j]; }
    }
    for (; i < n; i++) { lanes[0] += a[i] * b[i]; }
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// C(M,N) (+)= A(M,K) B(K,N), where every operand is addressed through a row
// and a column stride (element (i,j) of C is C[i*c_rs + j*c_cs]), so that the
// transposes a linear layer needs cost nothing. With accumulate = 0, C is
// overwritten instead of added to.
//
// This is the blocked GEMM of Goto & van de Geijn ("Anatomy of High-Performance
// Matrix Multiplication", 2008), cut down to what our shapes need. One of the two
// sizes N or K is always small here (B*T or C), so:
//   - a KC x NC block of B is copied ("packed") into panels of 16 columns, so the
//     micro-kernel reads it contiguously and it stays in the L2 cache;
//   - A is read in place, MR rows at a time; the callers arrange for A to be the
//     big operand (a weight matrix, or dlogits) so that it streams through once;
//   - the micro-kernel keeps an MR x 2V tile of C in 2 MR vector registers (V floats
//     each: 16 with AVX-512, 8 with AVX) and does 2 MR fused multiply-adds per step of
//     k: all the FLOPs happen there.
// Each element of C is summed in the same order whatever the number of threads,
// so results are deterministic and a run reproduces exactly.
#if defined(__AVX512F__)
#define GEMM_VEC 16 // floats in a vector register: AVX-512's 512 bits (and 32 registers)
#else
#define GEMM_VEC 8  // AVX's 256 bits (SSE and NEON do it as two halves)
#endif
#define GEMM_NR (2 * GEMM_VEC) // columns of the register tile: two vectors
// Rows of the register tile (MR) and depth of a packed block (KC). AVX has 16 registers:
// a 6 x 2 tile (12) + 2 of B + 1 of A. AVX-512 has 32: an 8 x 2 tile (16 FMAs per step
// of k for 10 loads, against 12 for 8), and a deeper block (a K of 576 or 768 in two
// blocks, not three): 10-30% faster on a 2-core Xeon (AVX-512) at inference's shapes.
#if defined(__AVX512F__)
#define GEMM_MR 8
#ifndef GEMM_KC
#define GEMM_KC 384
#endif
#else
#define GEMM_MR 6
#ifndef GEMM_KC
#define GEMM_KC 256
#endif
#endif
#ifndef GEMM_NC
#define GEMM_NC 256 // columns of a packed block: KC x NC x 4 bytes = 256 KiB (AVX-512: 384), within an L2
#endif

// GCC's auto-vectoriser keeps a plain float acc[6][2V] in memory and spills; a
// vector type (a GCC/Clang extension: no intrinsics, compiles to AVX-512, AVX, NEON
// or SSE) makes the register tile explicit. (infer.c uses it for decode too.)
typedef float vecf __attribute__((vector_size(GEMM_VEC * sizeof(float))));

// bp: the panel of B, its row k at bp + k b_ld (b_ld = GEMM_NR when packed)
static inline void gemm_micro_kernel(float *c, size_t c_rs, size_t c_cs, const float *a, size_t a_rs, size_t a_cs,
                              const float *bp, size_t b_ld, int kc, int mr, int nr, int accumulate) {
    // rows past the edge of A repeat row 0: computed, never stored
    const float *arow[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) { arow[i] = a + (size_t)(i < mr ? i : 0) * a_rs; }
    vecf acc[GEMM_MR][2];
    memset(acc, 0, sizeof(acc));
    if (nr <= GEMM_VEC) { // a narrow panel (a short prompt's 16 rows): its right half is padding
        for (int k = 0; k < kc; k++) {
            vecf b0;
            memcpy(&b0, bp + (size_t)k * b_ld, sizeof(vecf));
            for (int i = 0; i < GEMM_MR; i++) { acc[i][0] += arow[i][(size_t)k * a_cs] * b0; }
        }
    } else {
        for (int k = 0; k < kc; k++) { // most of the training time is spent in this loop
            vecf b0, b1;
            memcpy(&b0, bp + (size_t)k * b_ld, sizeof(vecf));
            memcpy(&b1, bp + (size_t)k * b_ld + GEMM_VEC, sizeof(vecf));
            size_t ak = (size_t)k * a_cs;
            // the panel comes in from the L2 cache: ask for its row 16 steps ahead, so that it
            // is in L1 by then (the hardware's own prefetcher falls behind: 6-8% of a LoRA step)
            __builtin_prefetch(bp + (size_t)(k + 16) * b_ld);
            __builtin_prefetch(bp + (size_t)(k + 16) * b_ld + GEMM_VEC);
            for (int i = 0; i < GEMM_MR; i++) {
                float ai = arow[i][ak];
                acc[i][0] += ai * b0;
                acc[i][1] += ai * b1;
            }
        }
    }
    if (c_cs == 1 && nr == GEMM_NR) {
        // rows of C are contiguous: two vector loads and stores per row
        for (int i = 0; i < mr; i++) {
            float *ci = c + i * c_rs;
            vecf c0 = acc[i][0], c1 = acc[i][1];
            if (accumulate) {
                vecf old0, old1;
                memcpy(&old0, ci, sizeof(vecf));
                memcpy(&old1, ci + GEMM_VEC, sizeof(vecf));
                c0 += old0;
                c1 += old1;
            }
            memcpy(ci, &c0, sizeof(vecf));
            memcpy(ci + GEMM_VEC, &c1, sizeof(vecf));
        }
        return;
    }
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) {
            float *cij = c + i * c_rs + j * c_cs;
            float v = acc[i][j / GEMM_VEC][j % GEMM_VEC];
            *cij = accumulate ? *cij + v : v;
        }
    }
}

static inline void gemm(float *C, size_t c_rs, size_t c_cs, const float *A, size_t a_rs, size_t a_cs,
                 const float *B, size_t b_rs, size_t b_cs, int M, int N, int K, int accumulate) {
    // The packed blocks, shared by the threads: two, used in turn, so that a thread
    // that is done with one block can pack the next while others still read the last
    // (one barrier per block instead of two: a barrier costs microseconds, and a time
    // slice when another program holds a core). They live as long as the program: a
    // fresh 256 KiB malloc per call is an mmap, and the kernel would zero its pages
    // again on every one of the ~100 calls per step (measured: 5% of a step). Each thread
    // that calls gemm has a pair of its own (_Thread_local), shared with the team it starts:
    // so threads may each run a gemm of their own at once (infer.c's attention does: inside
    // a parallel region, a gemm's own region runs on the calling thread alone).
    int strips = (M + GEMM_MR - 1) / GEMM_MR;
    if (M <= 4 * GEMM_MR && b_cs == 1) {
        // A few rows of C (an adapter's gradient, r rows) and a B whose rows are contiguous:
        // packing B would cost as much as the product (each number of it meets only M rows of
        // A), so the micro-kernel reads B where it lies, and the threads share its columns
        // (there are too few rows to share). Only the last panel, if narrower than GEMM_NR,
        // is copied with zero padding, so that no load reaches past the end of a row.
        int panels = (N + GEMM_NR - 1) / GEMM_NR;
        #pragma omp parallel for schedule(static) if ((double)M * N * K > 2e5 && !omp_in_parallel())
        for (int p = 0; p < panels; p++) {
            int j0 = p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
            float edge[GEMM_KC * GEMM_NR];
            for (int pc = 0; pc < K; pc += GEMM_KC) {
                int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
                const float *bp = B + (size_t)pc * b_rs + j0;
                size_t b_ld = b_rs;
                if (nr < GEMM_NR) {
                    for (int k = 0; k < kc; k++) {
                        for (int j = 0; j < GEMM_NR; j++) { edge[k * GEMM_NR + j] = j < nr ? bp[(size_t)k * b_rs + j] : 0.0f; }
                    }
                    bp = edge;
                    b_ld = GEMM_NR;
                }
                for (int s = 0; s < strips; s++) {
                    int i0 = s * GEMM_MR, mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                    gemm_micro_kernel(C + (size_t)i0 * c_rs + (size_t)j0 * c_cs, c_rs, c_cs, A + (size_t)i0 * a_rs + (size_t)pc * a_cs,
                                      a_rs, a_cs, bp, b_ld, kc, mr, nr, accumulate || pc > 0);
                }
            }
        }
        return;
    }
    static _Thread_local float *buffers[2] = {NULL, NULL};
    if (buffers[0] == NULL) {
        buffers[0] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
        buffers[1] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
    }
    float *packed[2] = {buffers[0], buffers[1]}; // (the calling thread's, read by the whole team)
    // threads only for products big enough to pay for waking them, and not from inside a
    // parallel region (there the caller's threads each run products of their own)
    #pragma omp parallel if ((double)M * N * K > 2e5 && !omp_in_parallel())
    for (int jc = 0, block = 0; jc < N; jc += GEMM_NC) {
        int panels = ((N - jc < GEMM_NC ? N - jc : GEMM_NC) + GEMM_NR - 1) / GEMM_NR;
        for (int pc = 0; pc < K; pc += GEMM_KC, block++) {
            int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
            float *bp = packed[block % 2];
            // pack B[pc:pc+kc, jc:jc+NC] as panels of NR columns, zero-padded. No thread
            // still reads this buffer: each passed the barrier after packing the block in
            // between, and so had finished its strips of the block before that.
            #pragma omp for schedule(static)
            for (int p = 0; p < panels; p++) {
                int j0 = jc + p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
                float *dst = bp + (size_t)p * kc * GEMM_NR;
                for (int k = 0; k < kc; k++) {
                    const float *src = B + (size_t)(pc + k) * b_rs + (size_t)j0 * b_cs;
                    for (int j = 0; j < GEMM_NR; j++) { dst[k * GEMM_NR + j] = j < nr ? src[j * b_cs] : 0.0f; }
                }
            }
            // (the implicit barrier: the block is packed) then MR-row strips of A against every
            // panel; no barrier after them (nowait): a thread gets the same strips, so the
            // same rows of C, in every block (OpenMP's static schedule promises it)
            #pragma omp for schedule(static) nowait
            for (int s = 0; s < strips; s++) {
                int i0 = s * GEMM_MR, mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                const float *a = A + (size_t)i0 * a_rs + (size_t)pc * a_cs;
                size_t strip_rs = a_rs, strip_cs = a_cs;
                float ap[GEMM_KC * GEMM_MR];
                if (a_cs != 1) {
                    // A is a transpose (dout^T for dweight): its MR rows at one k sit
                    // in one row of memory, and successive k are a whole row apart,
                    // a stride that lands every k in the same few L1 sets. Copying
                    // the strip to a contiguous buffer once is cheaper than the misses.
                    for (int k = 0; k < kc; k++) {
                        for (int i = 0; i < GEMM_MR; i++) { ap[k * GEMM_MR + i] = a[(size_t)(i < mr ? i : 0) * a_rs + (size_t)k * a_cs]; }
                    }
                    a = ap;
                    strip_rs = 1;
                    strip_cs = GEMM_MR;
                }
                for (int p = 0; p < panels; p++) {
                    int j0 = jc + p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
                    gemm_micro_kernel(C + (size_t)i0 * c_rs + (size_t)j0 * c_cs, c_rs, c_cs, a, strip_rs, strip_cs,
                                      bp + (size_t)p * kc * GEMM_NR, GEMM_NR, kc, mr, nr, accumulate || pc > 0);
                }
            }
        }
    }
}

#endif // LIB_GEMM_H
