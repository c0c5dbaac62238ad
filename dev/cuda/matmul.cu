/*
matmul.cu: the first experiment of the GPU-performance chapter. One matmul,
C (M,N) = A (M,K) @ B (K,N), all row-major, written five times; each rung is
faster than the one before for a reason we can name, and all are timed against
cuBLAS. M and N are the rows and columns of C, K the dimension summed over.

    1: naive: one thread per output, threadIdx.x over rows (uncoalesced)  — ./dev/cuda/matmul -v 1
    2: coalesced: the same with threadIdx.x over columns                   — ./dev/cuda/matmul -v 2
    3: shared memory: 16x16 tiles, each value loaded is used 16 times      — ./dev/cuda/matmul -v 3
    4: registers: 128x128x8 block tiles, 8x8 outputs per thread            — ./dev/cuda/matmul -v 4
    5: tensor cores: bf16 in, fp32 accumulate, WMMA 16x16x16 fragments     — ./dev/cuda/matmul -v 5

Variants 1-4 are fp32 and are measured against cublasSgemm in its default math
mode, which is true fp32 (no TF32: that would use the tensor cores at lower
precision, a different race). Variant 5 reads bf16 copies of A and B, made once
before timing, and writes fp32; its yardstick is cublasGemmEx, bf16 in, fp32 out,
CUBLAS_COMPUTE_32F. main checks every variant (and both cuBLAS calls) against a
CPU matmul in double at three sizes, two of them ragged, then times each at 1024,
2048 and 4096 square (warm-up, CUDA events, median of up to 20 calls), and ends
with "N passed, M failed" over the checks, exiting non-zero if one failed.
On one H200 at 4096, in TFLOP/s: 1: 0.5, 2: 5.9, 3: 8.1, 4: 34, cuBLAS fp32 51;
5: 101, cuBLAS bf16 735. The whole run takes about 5 seconds.

    make dev/cuda/matmul && ./dev/cuda/matmul     (-c checks only, -v N one variant, -h all flags)
Without a GPU, the CPU emulator runs the checks of every variant at small sizes (variant 5
on its stand-in for the tensor cores, dev/emu/include/mma.h):
    bash dev/emu/emu_build.sh dev/cuda/matmul.cu /tmp/matmul_cpu && /tmp/matmul_cpu -c

Left out, for later: double buffering and asynchronous copies (cp.async, TMA),
Hopper's warpgroup MMA (wgmma: what cuBLAS uses on an H100/H200, and the main
reason variant 5 stays far behind it), 16-byte loads of fp32 (our shapes are
arbitrary, so rows need not be aligned), split-K, autotuning.
*/
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h" // cudaCheck, cublasCheck, rng_uniform, ceil_div, parse_args, require_gpu, time_median_ms
#include <cuda_bf16.h>
#include <mma.h>
#ifndef CUDA_EMU_H
// the CPU emulator's (dev/emu) cuBLAS stand-in is no yardstick: under it, cuBLAS and the
// timing are left out (each such place is marked with #ifndef CUDA_EMU_H; common.h leaves
// out cuBLAS there too). Its tensor cores are a stand-in too (dev/emu/include/mma.h), which
// runs variant 5's checks.
#include <cublas_v2.h>
#endif

// ----------------------------------------------------------------------------
// utilities: bf16 rounding on the CPU (the check macros and random numbers are in common.h)

// fp32 -> nearest bf16 (ties to even, as __float2bfloat16 rounds) -> fp32. A bf16 is
// the top 16 bits of a fp32: the same 8 exponent bits, 7 of the 23 mantissa bits.
// Finite inputs only, which is all we have.
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, sizeof(u));
    return x;
}

// ----------------------------------------------------------------------------
// precision: fp32 everywhere, except variant 5's inputs

typedef __nv_bfloat16 bf16;

// ----------------------------------------------------------------------------
// the CPU reference

// C = A @ B accumulated in double, and Cabs = |A| @ |B|, the sum of |a b| behind each
// output, which sets the tolerance (see check_matmul). The loops run i, k, j, so the
// inner one walks along rows of B and C, the order a CPU's cache likes.
static void matmul_cpu(double *C, double *Cabs, const float *A, const float *B, int M, int N, int K) {
    for (size_t i = 0; i < (size_t)M * N; i++) { C[i] = 0.0; Cabs[i] = 0.0; }
    for (size_t i = 0; i < (size_t)M; i++) {
        double *c_i = C + i * N, *cabs_i = Cabs + i * N;
        for (size_t k = 0; k < (size_t)K; k++) {
            double a = A[i * K + k];
            const float *b_k = B + k * N;
            for (size_t j = 0; j < (size_t)N; j++) { c_i[j] += a * b_k[j]; cabs_i[j] += fabs(a * b_k[j]); }
        }
    }
}

// ----------------------------------------------------------------------------
// the kernels, slowest first. Every one handles any M, N, K: threads past an edge
// of C write nothing, and tiles reaching past an edge of A or B load zeros.

// 1: one thread per output, a dot product of length K. A warp is 32 threads with
// consecutive threadIdx.x that issue each load together, and here they sit on 32
// consecutive rows: their A[row][k] lie K floats apart, 32 separate memory
// transactions that use 4 bytes each (L1 keeps some of those lines for the next k,
// but every load instruction still costs 32 requests), and so does the store to C.
// B[k][col] is one address for the whole warp, a broadcast.
__global__ void matmul_kernel1(float *C, const float *A, const float *B, int M, int N, int K) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) { return; }
    float sum = 0.0f;
    for (int k = 0; k < K; k++) { sum += A[(size_t)row * K + k] * B[(size_t)k * N + col]; }
    C[(size_t)row * N + col] = sum;
}

// 2: the same arithmetic with threadIdx.x over columns. Now a warp reads A[row][k]
// as one broadcast and B[k][col..col+31] as 128 contiguous bytes, one transaction,
// and its store to C is contiguous too: about 32x fewer requests for the same data.
__global__ void matmul_kernel2(float *C, const float *A, const float *B, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) { return; }
    float sum = 0.0f;
    for (int k = 0; k < K; k++) { sum += A[(size_t)row * K + k] * B[(size_t)k * N + col]; }
    C[(size_t)row * N + col] = sum;
}

// 3: in variant 2 each value of A is fetched by all N threads of its row, and each
// of B by all M of its column, which the caches only partly absorb. Here a block
// computes a TILE3 x TILE3 tile of C and walks along K in steps of TILE3: its
// threads copy one tile of A and one of B into shared memory (on-chip, ~30 cycles
// instead of ~500), then each thread reads TILE3 values of each from there. Every
// value fetched from global memory is used TILE3 times. On an H200 this gains less
// than one might hope over variant 2 (8 against 6 TFLOP/s): L1 was already catching
// much of that reuse, and the inner loop still does 2 loads (now from shared memory)
// per FMA, which is what limits this kernel. 32x32 tiles would not change that, and
// they need 1024 threads per block (the emulator allows 256). Variant 4 fixes it.
#define TILE3 16
__global__ void matmul_kernel3(float *C, const float *A, const float *B, int M, int N, int K) {
    __shared__ float As[TILE3][TILE3], Bs[TILE3][TILE3];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE3 + ty, col = blockIdx.x * TILE3 + tx;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE3) {
        // consecutive tx read consecutive addresses of A and of B: both loads coalesce.
        // Threads past an edge still load (zeros) and wait: all must reach the barrier.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads(); // the tiles are complete before anyone reads them
        for (int k = 0; k < TILE3; k++) { sum += As[ty][k] * Bs[k][tx]; }
        __syncthreads(); // and fully read before the next step overwrites them
    }
    if (row < M && col < N) { C[(size_t)row * N + col] = sum; }
}

// 4: register blocking. Each of 256 threads computes TM x TN = 8x8 outputs of a
// 128x128 block tile. For each k it loads 8 values of A's column and 8 of B's row
// from shared memory into registers and does all 64 products between them: 16
// shared loads per 64 FMAs, where variant 3 needed 128. The block too reuses more:
// it moves (128 + 128) x 8 floats from global memory per 128 x 128 x 8 FMAs, 64 FMAs
// per float, where variant 3 had 8. Most of the time goes to the inner 8x8 update.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
__global__ void __launch_bounds__(256) matmul_kernel4(float *C, const float *A, const float *B, int M, int N, int K) {
    // A's tile is stored transposed, As[k][m], so a thread's 8 values of A for one k sit
    // side by side like its 8 of B; the +4 pad makes the transposing stores below hit 32
    // different banks (row k starts 4 banks after row k-1) and keeps rows 16-byte aligned.
    alignas(16) __shared__ float As[BK][BM + 4];
    alignas(16) __shared__ float Bs[BK][BN];
    int tid = threadIdx.x;
    // The thread's outputs are rows {4 tr .. 4 tr + 3} and {64 + 4 tr ...} of the tile,
    // and likewise its columns: two groups of 4 rather than 8 in a row. Then the 16 threads
    // of a half-warp (tc = 0..15) read 16 consecutive float4s of Bs, which shared memory
    // serves without bank conflicts (8 apart they would collide), and all of them read the
    // same float4 of As, a broadcast.
    int tr = tid / 16, tc = tid % 16;
    int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // each tile is 1024 floats, 4 per thread, taken so that a warp's 32 loads cover
        // 4 whole rows of A's tile (8 floats each) or 32 consecutive floats of B's: coalesced
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int e = tid + 256 * i;
            int ar = e / BK, ac = e % BK;
            As[ac][ar] = (bm + ar < M && k0 + ac < K) ? A[(size_t)(bm + ar) * K + k0 + ac] : 0.0f;
            int br = e / BN, bc = e % BN;
            Bs[br][bc] = (k0 + br < K && bn + bc < N) ? B[(size_t)(k0 + br) * N + bn + bc] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; k++) {
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[k][4 * tr + i];
                a[4 + i] = As[k][64 + 4 * tr + i];
                b[i] = Bs[k][4 * tc + i];
                b[4 + i] = Bs[k][64 + 4 * tc + i];
            }
            #pragma unroll
            for (int i = 0; i < TM; i++) {
                #pragma unroll
                for (int j = 0; j < TN; j++) { acc[i][j] += a[i] * b[j]; }
            }
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; i++) {
        int row = bm + (i < 4 ? 4 * tr + i : 64 + 4 * tr + i - 4);
        #pragma unroll
        for (int j = 0; j < TN; j++) {
            int col = bn + (j < 4 ? 4 * tc + j : 64 + 4 * tc + j - 4);
            if (row < M && col < N) { C[(size_t)row * N + col] = acc[i][j]; }
        }
    }
}

// 5: tensor cores. One warp-wide operation multiplies two 16x16 bf16 tiles into fp32
// (4096 FMAs, 2 instructions), where the fp32 cores do one FMA per thread per
// instruction; on an H100/H200 that is ~15x the fp32 rate. WMMA (nvcuda::wmma) exposes it: load_matrix_sync
// spreads a 16x16 tile from shared memory over a warp's registers as a "fragment",
// mma_sync multiplies, store_matrix_sync writes the result back. A block of 8 warps
// computes a 128x128 tile of C, walking K in steps of 32; each warp owns a 64x32 part
// of it, 4x2 fragments, so each fragment of A it loads feeds 2 MMAs and each of B 4:
// the register blocking of variant 4, one level up. bf16 products are exact in fp32
// (8 x 8 significant bits), so the only rounding is in the fp32 accumulation.
#define BM5 128
#define BN5 128
#define BK5 32
#define PAD5 8 // bf16 of padding per row: shifts rows across banks, keeps 32-byte alignment
__device__ void load_chunk8(bf16 *dst, const bf16 *src, int row, int col, int rows, int cols) {
    // 8 consecutive bf16 of a row-major (rows, cols) matrix, zeros past its edges: one
    // 16-byte load when all 8 are inside and aligned (cols a multiple of 8), else one by one
    if (row < rows && col + 8 <= cols && cols % 8 == 0) {
        *(uint4 *)dst = *(const uint4 *)(src + (size_t)row * cols + col);
    } else {
        for (int e = 0; e < 8; e++) {
            dst[e] = (row < rows && col + e < cols) ? src[(size_t)row * cols + col + e] : __float2bfloat16(0.0f);
        }
    }
}
__global__ void __launch_bounds__(256) matmul_kernel5(float *C, const bf16 *A, const bf16 *B, int M, int N, int K) {
    using namespace nvcuda;
    // WMMA wants fragment pointers 32-byte aligned and row strides a multiple of 16 bytes
    alignas(32) __shared__ bf16 As[BM5][BK5 + PAD5];
    alignas(32) __shared__ bf16 Bs[BK5][BN5 + PAD5];
    alignas(32) __shared__ float Cs[8][16][16 + 4]; // one fragment per warp, on its way to C
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int wr = warp / 4, wc = warp % 4; // this warp's rows 64 wr.., columns 32 wc.. of the tile
    int bm = blockIdx.y * BM5, bn = blockIdx.x * BN5;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
    for (int f = 0; f < 8; f++) { wmma::fill_fragment(acc[f / 2][f % 2], 0.0f); }
    for (int k0 = 0; k0 < K; k0 += BK5) {
        // each tile is 4096 bf16 = 512 chunks of 8, 2 per thread; a warp reads 8 rows of A's
        // tile (64 contiguous bytes each) or 2 rows of B's (256 bytes each)
        for (int i = 0; i < 2; i++) {
            int q = tid + 256 * i;
            load_chunk8(&As[q / 4][(q % 4) * 8], A, bm + q / 4, k0 + (q % 4) * 8, M, K);
            load_chunk8(&Bs[q / 16][(q % 16) * 8], B, k0 + q / 16, bn + (q % 16) * 8, K, N);
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK5; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
            for (int i = 0; i < 4; i++) { wmma::load_matrix_sync(a[i], &As[64 * wr + 16 * i][kk], BK5 + PAD5); }
            for (int j = 0; j < 2; j++) { wmma::load_matrix_sync(b[j], &Bs[kk][32 * wc + 16 * j], BN5 + PAD5); }
            for (int f = 0; f < 8; f++) { wmma::mma_sync(acc[f / 2][f % 2], a[f / 2], b[f % 2], acc[f / 2][f % 2]); }
        }
        __syncthreads();
    }
    // A fragment's layout in registers is unspecified, so to write only the part of it
    // inside C we go through shared memory: store the fragment, then each lane copies 8
    // of its 256 values with a bounds check (a direct store_matrix_sync to C would also
    // need N a multiple of 4 and aligned rows).
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 2; j++) {
            wmma::store_matrix_sync(&Cs[warp][0][0], acc[i][j], 16 + 4, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int row = bm + 64 * wr + 16 * i + e / 16, col = bn + 32 * wc + 16 * j + e % 16;
                if (row < M && col < N) { C[(size_t)row * N + col] = Cs[warp][e / 16][e % 16]; }
            }
            __syncwarp(); // all lanes are done with Cs before the next fragment lands there
        }
    }
}

// variant 5's inputs: fp32 -> bf16 (round to nearest even), once, before timing
__global__ void float_to_bf16_kernel(bf16 *out, const float *in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = __float2bfloat16(in[i]); }
}

// ----------------------------------------------------------------------------
// launchers: the variants, then the two cuBLAS calls they are measured against

enum { CUBLAS_FP32 = 6, CUBLAS_BF16 = 7 };
static const char *variant_names[8] = {"", "1 naive", "2 coalesced", "3 smem tiles", "4 register tiles",
                                       "5 wmma bf16", "cuBLAS fp32", "cuBLAS bf16"};
#ifndef CUDA_EMU_H
static cublasHandle_t cublas_handle;
#endif

// C = A @ B with variant 1-5, or with cuBLAS (CUBLAS_FP32, CUBLAS_BF16). A16 and B16
// are A and B rounded to bf16, the inputs of variant 5 and of CUBLAS_BF16.
static void matmul_forward(int variant, float *C, const float *A, const float *B, const bf16 *A16, const bf16 *B16,
                           int M, int N, int K) {
    switch (variant) {
    case 1: matmul_kernel1<<<dim3(ceil_div(M, 32), ceil_div(N, 8)), dim3(32, 8)>>>(C, A, B, M, N, K); break;
    case 2: matmul_kernel2<<<dim3(ceil_div(N, 32), ceil_div(M, 8)), dim3(32, 8)>>>(C, A, B, M, N, K); break;
    case 3: matmul_kernel3<<<dim3(ceil_div(N, TILE3), ceil_div(M, TILE3)), dim3(TILE3, TILE3)>>>(C, A, B, M, N, K); break;
    case 4: matmul_kernel4<<<dim3(ceil_div(N, BN), ceil_div(M, BM)), dim3(256)>>>(C, A, B, M, N, K); break;
    case 5: matmul_kernel5<<<dim3(ceil_div(N, BN5), ceil_div(M, BM5)), dim3(256)>>>(C, A16, B16, M, N, K); break;
#ifndef CUDA_EMU_H
    // cuBLAS is column-major, and a row-major matrix read as column-major is its
    // transpose. So we ask it for C^T (N,M) = B^T (N,K) @ A^T (K,M): B goes first, and
    // no transposes are needed. The default math mode (set in main) keeps Sgemm in fp32.
    case CUBLAS_FP32: {
        const float alpha = 1.0f, beta = 0.0f;
        cublasCheck(cublasSgemm(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N, A, K, &beta, C, N));
        break;
    }
    case CUBLAS_BF16: {
        const float alpha = 1.0f, beta = 0.0f;
        cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B16, CUDA_R_16BF, N, A16,
                                 CUDA_R_16BF, K, &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        break;
    }
#endif
    default: fprintf(stderr, "Error: variant %d cannot run here\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static float *d_A, *d_B, *d_C; // (M,K), (K,N), (M,N)
static bf16 *d_A16, *d_B16;    // A and B rounded to bf16, variant 5's inputs

static void problem_upload(const float *A, const float *B, int M, int N, int K) {
    size_t a = (size_t)M * K, b = (size_t)K * N, c = (size_t)M * N;
    cudaCheck(cudaMalloc(&d_A, a * sizeof(float)));
    cudaCheck(cudaMalloc(&d_B, b * sizeof(float)));
    cudaCheck(cudaMalloc(&d_C, c * sizeof(float)));
    cudaCheck(cudaMemcpy(d_A, A, a * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_B, B, b * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&d_A16, a * sizeof(bf16)));
    cudaCheck(cudaMalloc(&d_B16, b * sizeof(bf16)));
    float_to_bf16_kernel<<<(unsigned)((a + 255) / 256), 256>>>(d_A16, d_A, a);
    float_to_bf16_kernel<<<(unsigned)((b + 255) / 256), 256>>>(d_B16, d_B, b);
    cudaCheck(cudaGetLastError());
}

static void problem_free(void) {
    cudaCheck(cudaFree(d_A));
    cudaCheck(cudaFree(d_B));
    cudaCheck(cudaFree(d_C));
    cudaCheck(cudaFree(d_A16));
    cudaCheck(cudaFree(d_B16));
}

// Compares the device's C with the reference. Tolerance: a K-term fp32 dot product,
// summed in any order, is within about K u sum_k |a_k b_k| of the exact value, u =
// 2^-24 the unit roundoff (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., section 3.1). We take u = FLT_EPSILON = 2^-23, twice that, as slack for
// tensor cores, whose adders need not round as an fp32 FMA does. Actual errors grow
// like sqrt(K), not K, and sit orders of magnitude below; a wrong index or a missed
// tile is off by ~0.1-1 and fails by far. For the bf16 runs the reference is computed
// from the bf16-rounded inputs, and the same bound holds: bf16 products are exact in
// fp32, so again only the accumulation rounds. (Against the fp32 inputs their error is
// ~2^-9 relative per input, which is the price of bf16, not a bug.)
static int num_passed = 0, num_failed = 0;
static void check_matmul(int variant, const double *ref, const double *ref_abs, int M, int N, int K) {
    size_t n = (size_t)M * N, worst = 0;
    std::vector<float> C(n);
    cudaCheck(cudaMemcpy(C.data(), d_C, n * sizeof(float), cudaMemcpyDeviceToHost));
    double max_err = 0.0, tol = 0.0;
    for (size_t i = 0; i < n; i++) { tol = fmax(tol, ref_abs[i]); }
    tol *= K * (double)FLT_EPSILON;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)C[i] - ref[i]);
        if (std::isnan(err)) { err = INFINITY; } // a NaN, e.g. an output never written, is wrong
        if (err > max_err) { max_err = err; worst = i; }
    }
    int ok = max_err <= tol;
    printf("%4d x %4d x %4d  %-17s max abs err %.2e (tolerance %.1e)  %s\n", M, N, K, variant_names[variant], max_err,
           tol, ok ? "OK" : "NOT OK");
    if (!ok) {
        printf("    worst at C[%zu][%zu]: %.6f, expected %.6f\n", worst / N, worst % N, C[worst], ref[worst]);
    }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
// Median GPU time of one call in ms: a warm-up call first (it pays for loading the
// kernel, and for cuBLAS picking its algorithm), then up to 20 timed calls, at least 5,
// stopping early once they add up to half a second, so that the run stays short.
static float time_matmul(int variant, int M, int N, int K) {
    return time_median_ms([&] { matmul_forward(variant, d_C, d_A, d_B, d_A16, d_B16, M, N, K); }, [] {}, 5, 500.0f);
}
#endif

static void fill_random(std::vector<float> &x) {
    for (float &v : x) { v = rng_uniform(); }
}

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: matmul [-v N] [-c] [-s SEED] [-h]\n"
           "  -v N     only variant N, checked and then timed (default: all of 1-5)\n"
           "           1 naive, 2 coalesced, 3 shared-memory tiles, 4 register tiles, 5 tensor cores (bf16)\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 5, 0, usage); // variants 1-5, with -v only
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 5;
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing (no
    // GPU to time); variant 5 on the emulator's stand-in for the tensor cores
    const int sizes[][3] = {{64, 48, 40}, {33, 65, 17}, {136, 140, 24}}; // the last one past a 128 x 128 tile
    printf("CPU emulation (dev/emu): checks at small sizes; no timing; seed %llu\n", args.seed);
#else
    const int sizes[][3] = {{128, 128, 128}, {257, 131, 199}, {1000, 1000, 64}};
    require_gpu("checks every variant: bash dev/emu/emu_build.sh dev/cuda/matmul.cu /tmp/matmul_cpu && "
                "/tmp/matmul_cpu -c", "", args.seed);
    cublasCheck(cublasCreate(&cublas_handle));
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_DEFAULT_MATH)); // fp32 Sgemm stays fp32: no TF32
#endif
    // which of the 7 runs (5 variants, 2 cuBLAS calls) take part: cuBLAS fp32 is the
    // yardstick of variants 1-4, cuBLAS bf16 that of variant 5
    int runs[8] = {0};
    for (int v = first; v <= last; v++) { runs[v] = 1; }
#ifndef CUDA_EMU_H
    runs[CUBLAS_FP32] = first <= 4;
    runs[CUBLAS_BF16] = last == 5;
#endif

    // 1. correctness, at every size, before any timing
    for (const int *s : sizes) {
        int M = s[0], N = s[1], K = s[2];
        std::vector<float> A((size_t)M * K), B((size_t)K * N);
        fill_random(A);
        fill_random(B);
        std::vector<double> ref((size_t)M * N), ref_abs((size_t)M * N);
        matmul_cpu(ref.data(), ref_abs.data(), A.data(), B.data(), M, N, K);
        problem_upload(A.data(), B.data(), M, N, K);
        int bf16_ref = 0;
        for (int v : {1, 2, 3, 4, (int)CUBLAS_FP32, 5, (int)CUBLAS_BF16}) { // the fp32 runs first
            if (!runs[v]) { continue; }
            if ((v == 5 || v == CUBLAS_BF16) && !bf16_ref) { // the bf16 runs: against the bf16-rounded inputs
                std::vector<float> A16(A), B16(B);
                for (float &x : A16) { x = bf16_round(x); }
                for (float &x : B16) { x = bf16_round(x); }
                matmul_cpu(ref.data(), ref_abs.data(), A16.data(), B16.data(), M, N, K);
                bf16_ref = 1;
            }
            cudaCheck(cudaMemset(d_C, 0xFF, (size_t)M * N * sizeof(float))); // all NaN: unwritten outputs fail
            matmul_forward(v, d_C, d_A, d_B, d_A16, d_B16, M, N, K);
            check_matmul(v, ref.data(), ref_abs.data(), M, N, K);
        }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing, square sizes; each size starts with the cuBLAS calls, so that every
    // variant's row can say how close it gets to its own yardstick
    if (!args.check_only) {
        const int order[7] = {CUBLAS_FP32, 1, 2, 3, 4, CUBLAS_BF16, 5};
        printf("\nmedian GPU time of up to 20 calls after a warm-up; cuBLAS fp32 is true fp32 (no TF32)\n");
        printf("%-17s %5s %10s %9s %12s\n", "variant", "size", "ms", "TFLOP/s", "% of cuBLAS");
        for (int S : {1024, 2048, 4096}) {
            std::vector<float> A((size_t)S * S), B((size_t)S * S);
            fill_random(A);
            fill_random(B);
            problem_upload(A.data(), B.data(), S, S, S);
            float base_ms[2] = {0.0f, 0.0f}; // cuBLAS fp32, cuBLAS bf16
            for (int v : order) {
                if (!runs[v]) { continue; }
                float ms = time_matmul(v, S, S, S);
                if (v == CUBLAS_FP32 || v == CUBLAS_BF16) { base_ms[v == CUBLAS_BF16] = ms; }
                float base = base_ms[v == 5 || v == CUBLAS_BF16];
                printf("%-17s %5d %10.3f %9.1f %11.1f%%\n", variant_names[v], S, ms, 2.0 * S * S * (double)S / (ms * 1e-3) / 1e12,
                       100.0 * base / ms);
            }
            problem_free();
        }
    }
    cublasCheck(cublasDestroy(cublas_handle));
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
