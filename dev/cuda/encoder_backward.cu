/*
encoder_backward.cu: the kernel ladder for the backward pass of GPT-2's embedding as
train_gpt2.cu computes it. out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] in the forward pass,
so from dout (B, T, C):
    dwte[v,:] += the sum of dout[b,t,:] over the positions (b, t) whose token is v,
    dwpe[t,:] += the sum of dout[b,t,:] over the batch b,
floatX (bf16 by default, fp32 with -DENABLE_FP32), the sums in fp32. The dwte sum is a
scatter: many positions, one row. Atomics would do it in any order, and give different
bits each run; the trainer instead sorts the positions by token on the host (a stable
counting sort into one bucket per token) and gives each bucket to one block, which adds
its rows in position order. The host part is the same in every variant but 3, which
also cuts the largest buckets into chunks.

    1: the trainer's kernels: a block per token, a thread per channel;
       dwpe a thread per element, looping over the batch                      — ./dev/cuda/encoder_backward 1
    2: both with 16-byte packs (8 bf16 per load), 4 rows in flight a thread  — ./dev/cuda/encoder_backward 2
    3: as 2, a token's bucket cut into chunks of 64 positions, a block per
       chunk; the chunks' fp32 sums then added in order by one more kernel   — ./dev/cuda/encoder_backward 3
(In fp32 the pack holds 4 values.) 2 and 3 need C % PACK == 0, true of GPT-2's C. Why 3:
in text a few tokens are very common (",", " the", "\n"); with Zipf-distributed tokens
(as here) the most common token takes ~9% of the 65536 positions of a B = 64, T = 1024
batch (1 / H(50257), H the harmonic number), and one block walking its ~5700 rows alone
is the tail of the whole kernel in 1 and 2.
Every variant is deterministic: the order of every sum is fixed by the sort and the
chunk size alone, never by the block size or the scheduling.

main checks every variant at 5 block sizes (64 to 1024 threads) against a CPU reference
in double, on fresh random inputs: dout uniform in [-1, 1), dwte and dwpe already holding
random values (the kernels add to them; the rows of absent tokens must not change),
tokens drawn from a Zipf distribution over V, so that buckets range from 1 position to
several chunks, at (B, T, C, V) = (8, 1024, 768, 50257), (4, 1000, 1600, 50257),
(3, 37, 67, 1000) and (2, 5, 256, 7). Then it times each variant and block size at B = 64,
T = 1024, V = 50257 for C = 768 and 1600 (warm-up, CUDA events, median of 20 calls: the
kernels alone, the buckets made once; the host's part is timed on its own) and prints
ms, GB/s and % of the H200's 4.8 TB/s. It ends with "N passed, M failed" and exits
non-zero if a check failed.
TODO: the H200 timings. Written on a machine without a GPU; so far only the emulator has
run its checks.

    nvcc -O3 -DENABLE_BF16 -gencode arch=compute_90,code=sm_90 dev/cuda/encoder_backward.cu -o dev/cuda/encoder_backward
    ./dev/cuda/encoder_backward        (N: one variant, -c checks only, -s SEED, -h all flags)
Without a GPU, the CPU emulator runs the checks of all three variants at small sizes
(-DENABLE_FP32 instead for fp32):
    bash dev/emu/emu_build.sh dev/cuda/encoder_backward.cu dev/emu/encoder_backward_cpu -DENABLE_BF16
    ./dev/emu/encoder_backward_cpu -c

Left out, for later: sorting on the GPU (the host's sort and copy of the buckets, timed
apart below, stall the step: the GPU waits for them), and one launch for dwte and dwpe.
*/
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "common.h"    // cudaCheck, rng_next, rng_uniform, ceil_div, parse_args, require_gpu, time_median_ms
#include "precision.h" // floatX (bf16 unless -DENABLE_FP32), to_float, from_float, Pack of PACK floatX

// ----------------------------------------------------------------------------
// the CPU reference, in double: the sums to add to dwte (V, C) and dwpe (T, C), and
// for the tolerances the number of terms and the sum of their magnitudes per element

static void encoder_backward_cpu(double *dwte, double *dwpe, double *wte_abs, double *wpe_abs, int *wte_terms,
                                 const floatX *dout, const int *inp, int B, int T, int C) {
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        size_t tok = (size_t)inp[bt], t = bt % T;
        wte_terms[tok]++;
        for (int c = 0; c < C; c++) {
            double x = to_float(dout[bt * C + c]);
            dwte[tok * C + c] += x;
            wte_abs[tok * C + c] += fabs(x);
            dwpe[t * C + c] += x;
            wpe_abs[t * C + c] += fabs(x);
        }
    }
}

// ----------------------------------------------------------------------------
// the host's part: the positions sorted into buckets, one per token, as the trainer's
// encoder_backward does it (a stable counting sort: the positions of a token stay in
// order). Variant 3 then cuts a bucket of more than max_rows positions into chunks.

struct Buckets {
    std::vector<int> order; // (N) the positions, grouped by token
    std::vector<int> start; // (pieces + 1) where each piece (a bucket, or a chunk of one) starts in order
    std::vector<int> token; // (pieces) its token, or -1 for a chunk of a bucket that was cut
    std::vector<int> cut;   // (3 x cuts) for each bucket that was cut: its token, first chunk, end chunk
};

static void buckets_make(Buckets &bk, const int *inp, size_t N, int max_rows) {
    int max_token = 0;
    for (size_t i = 0; i < N; i++) { max_token = inp[i] > max_token ? inp[i] : max_token; }
    std::vector<int> count((size_t)max_token + 2, 0);
    for (size_t i = 0; i < N; i++) { count[inp[i] + 1]++; }
    std::vector<int> seg_start, seg_token;
    for (int tok = 0; tok <= max_token; tok++) {
        if (count[tok + 1] > 0) {
            seg_token.push_back(tok);
            seg_start.push_back(count[tok]);
        }
        count[tok + 1] += count[tok]; // count[tok] is now where token tok's positions start
    }
    seg_start.push_back((int)N);
    bk.order.assign(N, 0);
    for (size_t i = 0; i < N; i++) { bk.order[count[inp[i]]++] = (int)i; }
    // the pieces: a bucket of at most max_rows positions is one piece, a longer one is
    // cut into chunks of max_rows (the last shorter), whose sums go to scratch first
    bk.start.clear();
    bk.token.clear();
    bk.cut.clear();
    for (size_t s = 0; s + 1 < seg_start.size(); s++) {
        int a = seg_start[s], n = seg_start[s + 1] - a;
        if (n <= max_rows) {
            bk.start.push_back(a);
            bk.token.push_back(seg_token[s]);
            continue;
        }
        bk.cut.push_back(seg_token[s]);
        bk.cut.push_back((int)bk.token.size());
        for (int r = 0; r < n; r += max_rows) {
            bk.start.push_back(a + r);
            bk.token.push_back(-1);
        }
        bk.cut.push_back((int)bk.token.size());
    }
    bk.start.push_back((int)N);
}

// ----------------------------------------------------------------------------
// the kernels, slowest first

// 1: train_gpt2.cu's encoder_backward_wte_kernel and encoder_backward_wpe_kernel,
// verbatim but for the names (their comments:)
// dwte: the positions of one token were sorted together on the host (order,
// seg_start); a block per distinct token, a thread per channel, adds them up in
// position order: no two threads write the same element, and the sums' order is
// fixed. (Atomics would be simpler and not reproducible.)
// The loop over the bucket has a trip count known only at run time and a load that
// depends on order[i]: a thread has one or two 2-byte loads in flight at a time.
// --- shared-copy of train_gpt2.cu: encoder_backward_wte_kernel (as encoder_backward_wte_kernel1) ---
__global__ void encoder_backward_wte_kernel1(floatX *dwte, const floatX *dout, const int *order, const int *seg_start,
                                             const int *seg_token, int C) {
    int s = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int i = seg_start[s]; i < seg_start[s + 1]; i++) { sum += to_float(dout[(size_t)order[i] * C + c]); }
        floatX *d = dwte + (size_t)seg_token[s] * C + c;
        *d = from_float(to_float(*d) + sum);
    }
}

// dwpe[t, c] += sum over the batch of dout[b, t, c]
// --- shared-copy of train_gpt2.cu: encoder_backward_wpe_kernel (as encoder_backward_wpe_kernel1) ---
__global__ void encoder_backward_wpe_kernel1(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) { return; }
    float sum = 0.0f;
    for (int b = 0; b < B; b++) { sum += to_float(dout[(size_t)b * T * C + i]); }
    dwpe[i] = from_float(to_float(dwpe[i]) + sum);
}

// Sums of PACK floats, stored 16 bytes at a time (partial rows are 16-byte aligned: C % PACK == 0)
struct alignas(16) Float4 {
    float v[4];
};

// 2 (and 3's first kernel): a block per piece, a thread per 16-byte pack of channels,
// adding the piece's rows in order in PACK fp32 sums. One load brings 8 channels (bf16)
// where 1 brings one, and the loop over rows is unrolled 4 times: the loads of 4 rows
// (their addresses need only order[i]) are issued before the first add waits. The order
// of the additions per channel is still the rows' order. A piece whose token is known
// (a whole bucket) is added to its dwte row; a chunk of a cut bucket (token -1) writes
// its sums to partial (pieces, C), for encoder_backward_wte_kernel3 to add in order.
// At C = 768 a row is 96 packs in bf16: blocks over 96 threads leave threads idle.
__global__ void encoder_backward_wte_kernel2(floatX *dwte, float *partial, const floatX *dout, const int *order,
                                             const int *start, const int *token, int C) {
    int k = blockIdx.x, P = C / PACK, tok = token[k], end = start[k + 1];
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float sum[PACK] = {};
#pragma unroll 4
        for (int i = start[k]; i < end; i++) {
            Pack x = ((const Pack *)(dout + (size_t)order[i] * C))[p];
            for (int j = 0; j < PACK; j++) { sum[j] += to_float(x.v[j]); }
        }
        if (tok >= 0) {
            Pack *d = (Pack *)(dwte + (size_t)tok * C) + p;
            Pack dv = *d;
            for (int j = 0; j < PACK; j++) { dv.v[j] = from_float(to_float(dv.v[j]) + sum[j]); }
            *d = dv;
        } else {
            Float4 *q = (Float4 *)(partial + (size_t)k * C + (size_t)p * PACK);
            for (int h = 0; h < PACK / 4; h++) {
                Float4 f;
                for (int j = 0; j < 4; j++) { f.v[j] = sum[4 * h + j]; }
                q[h] = f;
            }
        }
    }
}

// dwpe with 16-byte packs: a thread per pack of (T, C), the batch's rows added in
// order, 4 of them loaded at once. i indexes packs; the batch's stride is T*C / PACK.
__global__ void encoder_backward_wpe_kernel2(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    size_t TP = (size_t)T * (C / PACK), i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= TP) { return; }
    float sum[PACK] = {};
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        Pack x = ((const Pack *)dout)[(size_t)b * TP + i];
        for (int j = 0; j < PACK; j++) { sum[j] += to_float(x.v[j]); }
    }
    Pack d = ((Pack *)dwpe)[i];
    for (int j = 0; j < PACK; j++) { d.v[j] = from_float(to_float(d.v[j]) + sum[j]); }
    ((Pack *)dwpe)[i] = d;
}

// 3: a cut bucket's chunks were summed by encoder_backward_wte_kernel2, each by its own
// block, in parallel; here a block per cut bucket (cut: token, first chunk, end chunk),
// a thread per channel, adds the chunks' sums in chunk order, then into dwte. The
// chunks' sums are fp32, so the result is as exact as 2's: one long chain of additions
// became a chain per chunk plus a short one. A few blocks only (the common tokens).
#define CHUNK_ROWS 64 // positions per chunk: ~96 KB of dout per block at C = 768 in bf16
__global__ void encoder_backward_wte_kernel3(floatX *dwte, const float *partial, const int *cut, int C) {
    int tok = cut[3 * blockIdx.x], first = cut[3 * blockIdx.x + 1], end = cut[3 * blockIdx.x + 2];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int k = first; k < end; k++) { sum += partial[(size_t)k * C + c]; }
        floatX *d = dwte + (size_t)tok * C + c;
        *d = from_float(to_float(*d) + sum);
    }
}

// ----------------------------------------------------------------------------
// the launcher: the buckets go to the device first (as the trainer's encoder_backward
// copies them every call), then the kernels run, all with `block` threads

static const char *variant_names[4] = {"", "1 trainer (thread/chan)", "2 16-byte packs", "3 packs, cut buckets"};

// Why variant v cannot take rows of C channels, or NULL if it can
static const char *unsupported(int variant, int C) {
    if (variant >= 2 && C % PACK != 0) { return PACK == 8 ? "needs C % 8 == 0" : "needs C % 4 == 0"; }
    return NULL;
}

// the buckets on the device, and the scratch for cut buckets' chunk sums
static int *d_order, *d_start, *d_token, *d_cut; // (N), (pieces + 1), (pieces), (3 x cuts)
static float *d_partial;                          // (pieces, C)
static int pieces, cuts;

// variant v's buckets, made on the host and copied to the device (device buffers
// sized for N positions, the most pieces there can be)
static void buckets_upload(Buckets &bk, int variant, const int *inp, size_t N) {
    buckets_make(bk, inp, N, variant == 3 ? CHUNK_ROWS : INT_MAX);
    pieces = (int)bk.token.size();
    cuts = (int)bk.cut.size() / 3;
    cudaCheck(cudaMemcpy(d_order, bk.order.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_start, bk.start.data(), (pieces + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_token, bk.token.data(), pieces * sizeof(int), cudaMemcpyHostToDevice));
    if (cuts > 0) { cudaCheck(cudaMemcpy(d_cut, bk.cut.data(), bk.cut.size() * sizeof(int), cudaMemcpyHostToDevice)); }
}

static void encoder_backward(int variant, int block, floatX *dwte, floatX *dwpe, const floatX *dout, int B, int T, int C) {
    size_t TC = (size_t)T * C;
    switch (variant) {
    case 1:
        encoder_backward_wte_kernel1<<<pieces, block>>>(dwte, dout, d_order, d_start, d_token, C);
        cudaCheck(cudaGetLastError());
        encoder_backward_wpe_kernel1<<<ceil_div(TC, block), block>>>(dwpe, dout, B, T, C);
        break;
    case 2:
    case 3:
        encoder_backward_wte_kernel2<<<pieces, block>>>(dwte, d_partial, dout, d_order, d_start, d_token, C);
        cudaCheck(cudaGetLastError());
        if (cuts > 0) { // (variant 2's buckets are never cut)
            encoder_backward_wte_kernel3<<<cuts, block>>>(dwte, d_partial, d_cut, C);
            cudaCheck(cudaGetLastError());
        }
        encoder_backward_wpe_kernel2<<<ceil_div(TC / PACK, block), block>>>(dwpe, dout, B, T, C);
        break;
    default: fprintf(stderr, "Error: no variant %d\n", variant); exit(EXIT_FAILURE);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// one problem on the device, the checks, the timing

static const int block_sizes[5] = {64, 128, 256, 512, 1024};
static floatX *d_dout, *d_dwte, *d_dwpe; // (B, T, C), (V, C), (T, C)

// Tokens from a Zipf distribution over [0, V): P(v) proportional to 1 / (v + 1), the
// shape of word frequencies in text, by inverting its cumulative sum (a binary search).
static void zipf_tokens(std::vector<int> &inp, int V) {
    std::vector<double> cdf(V);
    double total = 0.0;
    for (int v = 0; v < V; v++) { cdf[v] = (total += 1.0 / (v + 1)); }
    for (int &tok : inp) {
        double u = (double)(rng_next() >> 11) * 0x1p-53 * total;
        tok = (int)(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
        tok = tok < V ? tok : V - 1; // (u is below total, but for rounding)
    }
}

// Fresh random inputs, never zeros: dout uniform in [-1, 1); dwte and dwpe hold earlier
// gradients, uniform in [-2, 2), since the kernels add to them.
static void problem_make(std::vector<floatX> &dout, std::vector<floatX> &dwte, std::vector<floatX> &dwpe,
                         std::vector<int> &inp, int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    dout.resize(N * C);
    dwte.resize((size_t)V * C);
    dwpe.resize((size_t)T * C);
    inp.resize(N);
    for (floatX &x : dout) { x = from_float(rng_uniform()); }
    for (floatX &x : dwte) { x = from_float(2.0f * rng_uniform()); }
    for (floatX &x : dwpe) { x = from_float(2.0f * rng_uniform()); }
    zipf_tokens(inp, V);
    cudaCheck(cudaMalloc(&d_dout, dout.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dwte, dwte.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dwpe, dwpe.size() * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_order, N * sizeof(int)));
    cudaCheck(cudaMalloc(&d_start, (N + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&d_token, N * sizeof(int)));
    cudaCheck(cudaMalloc(&d_cut, 3 * N * sizeof(int)));
    cudaCheck(cudaMalloc(&d_partial, N * C * sizeof(float)));
    cudaCheck(cudaMemcpy(d_dout, dout.data(), dout.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

static void problem_free(void) {
    for (void *p : {(void *)d_dout, (void *)d_dwte, (void *)d_dwpe, (void *)d_order, (void *)d_start, (void *)d_token,
                    (void *)d_cut, (void *)d_partial}) {
        cudaCheck(cudaFree(p));
    }
}

// Tolerances, all in one place. An element of dwte or dwpe is old + (x_1 + ... + x_n):
// n terms added in fp32 one after another (in 3 a chain per chunk, then the chunks:
// no longer), then added to old and rounded to floatX. A sum in fp32 is within (longest
// chain of additions) u sum|x_i| of the exact one, u = 2^-24 (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., chapter 4). We take the chain as n + 2
// (the add to old included) and U = FLT_EPSILON = 2^-23, twice u:
//     tol32 = (n + 2) U (sum|x_i| + |old|);
// then OUT_ROUND of the value for the rounding to floatX: bf16 keeps 8 significant bits,
// so rounding to nearest moves a value by at most 2^-8 of itself; we allow twice that,
// so that rounding alone reads as at most ~0.5 of the tolerance. An element that should
// not change (a token not in the batch) may not move by more than its own rounding. A
// bug (a row missed, added twice, or sent to the wrong token) is off by ~1.
#ifdef ENABLE_FP32
#define OUT_ROUND 0.0
#else
#define OUT_ROUND 0x1p-7
#endif
static int num_passed = 0, num_failed = 0;

// The worst of got vs ref over one table (rows, C), as a fraction of the tolerance.
// terms(r) is the number of terms added to row r, abs the sum of their magnitudes.
template <typename Terms>
static void compare(const char *name, int block, const floatX *got, const floatX *old, const double *ref,
                    const double *abs, Terms terms, size_t rows, int C, double &max_err, double &worst, char *where,
                    size_t where_size) {
    for (size_t i = 0; i < rows * C; i++) {
        double o = to_float(old[i]), full = ref[i] + o; // ref: the sum alone
        double tol32 = (terms(i / C) + 2) * FLT_EPSILON * (abs[i] + fabs(o));
        double tol = (1 + OUT_ROUND) * tol32 + OUT_ROUND * fabs(full);
        double err = fabs((double)to_float(got[i]) - full);
        double ratio = std::isnan(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol;
        max_err = std::isnan(err) ? INFINITY : fmax(max_err, err);
        if (ratio > worst) {
            worst = ratio;
            snprintf(where, where_size, "block %d: %s[%zu][%zu] = %.7g, expected %.7g (old %.7g, %d terms)", block,
                     name, i / C, i % C, to_float(got[i]), full, o, terms(i / C));
        }
    }
}

// Runs variant v at every block size, dwte and dwpe reset to their old values before
// each run, the buckets made and copied each time as in the trainer, and compares both
// tables whole. One line: the largest error, the worst as a fraction of its tolerance
// (<= 1 passes), the pieces and cut buckets, OK or NOT OK.
static void check_variant(int v, const std::vector<floatX> &dwte_old, const std::vector<floatX> &dwpe_old,
                          const std::vector<int> &inp, const double *ref_wte, const double *ref_wpe, const double *wte_abs,
                          const double *wpe_abs, const int *wte_terms, int B, int T, int C, int V) {
    printf("%d x %4d x %4d V %5d  %-23s ", B, T, C, V, variant_names[v]);
    if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); return; }
    std::vector<floatX> dwte(dwte_old.size()), dwpe(dwpe_old.size());
    double max_err = 0.0, worst = 0.0;
    char where[200] = "";
    Buckets bk;
    for (int block : block_sizes) {
        cudaCheck(cudaMemcpy(d_dwte, dwte_old.data(), dwte.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_dwpe, dwpe_old.data(), dwpe.size() * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(d_partial, 0xFF, inp.size() * C * sizeof(float))); // all NaN: a chunk sum never written shows
        buckets_upload(bk, v, inp.data(), inp.size());
        encoder_backward(v, block, d_dwte, d_dwpe, d_dout, B, T, C);
        cudaCheck(cudaMemcpy(dwte.data(), d_dwte, dwte.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(dwpe.data(), d_dwpe, dwpe.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        compare("dwte", block, dwte.data(), dwte_old.data(), ref_wte, wte_abs, [&](size_t r) { return wte_terms[r]; },
                (size_t)V, C, max_err, worst, where, sizeof(where));
        compare("dwpe", block, dwpe.data(), dwpe_old.data(), ref_wpe, wpe_abs, [&](size_t) { return B; }, (size_t)T, C,
                max_err, worst, where, sizeof(where));
    }
    int ok = worst <= 1.0;
    printf("%5d pieces, %2d cut  max err %.1e, worst %.2f of tol  %s\n", pieces, cuts, max_err, worst,
           ok ? "OK" : "NOT OK");
    if (!ok) { printf("    worst at %s\n", where); }
    if (ok) { num_passed++; } else { num_failed++; }
}

#ifndef CUDA_EMU_H
#define PEAK_GBS 4800.0 // H200 (HBM3e), NVIDIA's figure; on another GPU the % is still of this
#endif

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: encoder_backward [N] [-v N] [-c] [-s SEED] [-h]\n"
           "  N, -v N  only variant N, checked and then timed (default: all of 1-3)\n"
           "           1 trainer's kernels, 2 16-byte packs, 3 packs and long buckets cut into chunks\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 3, 1, usage); // variants 1-3, also as a plain N
    rng_state = args.seed;
    int first = args.only ? args.only : 1, last = args.only ? args.only : 3;
    // {B, T, C, V}: GPT-2 small's and XL's widths, a ragged C, a vocabulary of 7 (every
    // token frequent). With these Zipf tokens some buckets exceed CHUNK_ROWS = 64 positions.
#ifdef CUDA_EMU_H
    // On the CPU every thread of a block is a fiber: small sizes only, and no timing
    const int shapes[][4] = {{4, 256, 768, 50}, {2, 256, 1600, 300}, {3, 37, 67, 100}, {2, 5, 256, 7}};
    printf("CPU emulation (dev/emu), %s: checks at small sizes, no timing; seed %llu\n", PRECISION_NAME, args.seed);
#else
    const int shapes[][4] = {{8, 1024, 768, 50257}, {4, 1000, 1600, 50257}, {3, 37, 67, 1000}, {2, 5, 256, 7}};
    require_gpu("runs the checks: bash dev/emu/emu_build.sh dev/cuda/encoder_backward.cu /tmp/encb_cpu && "
                "/tmp/encb_cpu -c", PRECISION_NAME, args.seed);
#endif

    // 1. correctness, every variant at every shape and block size, before any timing
    for (const int *s : shapes) {
        int B = s[0], T = s[1], C = s[2], V = s[3];
        std::vector<floatX> dout, dwte, dwpe;
        std::vector<int> inp;
        problem_make(dout, dwte, dwpe, inp, B, T, C, V);
        std::vector<double> ref_wte((size_t)V * C), ref_wpe((size_t)T * C), wte_abs((size_t)V * C), wpe_abs((size_t)T * C);
        std::vector<int> wte_terms(V);
        encoder_backward_cpu(ref_wte.data(), ref_wpe.data(), wte_abs.data(), wpe_abs.data(), wte_terms.data(), dout.data(),
                             inp.data(), B, T, C);
        for (int v = first; v <= last; v++) {
            check_variant(v, dwte, dwpe, inp, ref_wte.data(), ref_wpe.data(), wte_abs.data(), wpe_abs.data(),
                          wte_terms.data(), B, T, C, V);
        }
        problem_free();
    }

#ifndef CUDA_EMU_H
    // 2. timing, the kernels alone (the buckets made and copied once, before). The bytes
    // that must move: dout read twice (once per table), the rows of dwte that the batch
    // touches and all of dwpe read and written, and the sorted positions; variant 3's
    // scratch is extra traffic, not counted. The host's share (sort and copy) is timed
    // apart, by the wall clock, and is the same for every variant but for 3's cutting.
    if (!args.check_only) {
        const int B = 64, T = 1024, V = 50257;
        printf("\nB = %d, T = %d, V = %d, Zipf tokens; kernel ms at each block size: median of 20 calls after a\n"
               "warm-up; GB/s and %% of the H200's 4.8 TB/s at the best block size; host: sort + copy, ms\n", B, T, V);
        printf("%4s  %-23s %8s %8s %8s %8s %8s %8s %8s %8s\n", "C", "variant", "64", "128", "256", "512", "1024", "GB/s",
               "% peak", "host");
        for (int C : {768, 1600}) {
            std::vector<floatX> dout, dwte, dwpe;
            std::vector<int> inp;
            problem_make(dout, dwte, dwpe, inp, B, T, C, V);
            cudaCheck(cudaMemcpy(d_dwte, dwte.data(), dwte.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d_dwpe, dwpe.data(), dwpe.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            Buckets bk;
            for (int v = first; v <= last; v++) {
                printf("%4d  %-23s ", C, variant_names[v]);
                if (unsupported(v, C)) { printf("skipped: %s\n", unsupported(v, C)); continue; }
                auto t0 = std::chrono::steady_clock::now();
                buckets_upload(bk, v, inp.data(), inp.size());
                double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                size_t segments = 0;
                for (int tok : bk.token) { segments += tok >= 0; }
                segments += cuts;
                double bytes = (2.0 * B * T * C + 2.0 * segments * C + 2.0 * T * C) * sizeof(floatX)
                             + (double)B * T * sizeof(int);
                float best = INFINITY;
                for (int block : block_sizes) {
                    float ms = time_median_ms([&] { encoder_backward(v, block, d_dwte, d_dwpe, d_dout, B, T, C); });
                    best = std::min(best, ms);
                    printf("%8.4f ", ms);
                }
                double gbs = bytes / (best * 1e-3) / 1e9;
                printf("%8.0f %7.1f%% %8.3f\n", gbs, 100.0 * gbs / PEAK_GBS, host_ms);
            }
            problem_free();
        }
    }
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
