/*
common.h: what the kernel ladders in dev/cuda share (matmul.cu, layernorm_forward.cu,
causal_softmax.cu, fused_classifier.cu): the check macros, the random numbers, the
warp and block reductions of train_gpt2.cu, and the frame of every ladder's main: the
command line, the "no GPU here" message, the timing. The ladders of train_gpt2.cu's
kernels also include precision.h (floatX). With these out of the way, a ladder file
reads as its op alone: the CPU reference, the kernels, the launchers, the checks, main.

For the dev/cuda ladders only (../shared/STYLE.md, section 1: dev/ is the workshop). The
root programs (train_gpt2.cu, train_mlp.cu, ...) never include it: their helpers are
lib/cuda_utils.h's, and the reductions below are theirs, copied here verbatim. The
ladders keep these few check macros of their own rather than lib/'s, which want a
PROGRAM name, cuBLAS and NVTX that most ladders do without.

Every function here is inline or a template, so a ladder that leaves one unused gets
no warning for it (nvcc and g++ warn about unused plain static functions, and the
builds treat warnings as errors). Under the CPU emulator (dev/emu, whose cuda_runtime.h
defines CUDA_EMU_H) all of it works but cublasCheck, left out there as the ladders
leave out cuBLAS.
*/
#ifndef DEV_CUDA_COMMON_H
#define DEV_CUDA_COMMON_H
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#ifndef CUDA_EMU_H
#include <cublas_v2.h> // the header only: a ladder that calls cuBLAS links it (-lcublas)
#endif

// ----------------------------------------------------------------------------
// check macros: on any error, the library's own message, file and line, exit 1

static inline void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "Error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check(err, __FILE__, __LINE__)

#ifndef CUDA_EMU_H
static inline void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "Error: cuBLAS: %s [%s:%d]\n", cublasGetStatusString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check(status, __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------
// random numbers: splitmix64 (Steele, Lea and Flood, 2014), small, and every seed is a
// good one. main sets rng_state to the seed (-s); the inputs are drawn in a fixed order,
// so a seed always gives the same inputs.

static uint64_t rng_state;
static inline uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
// 24 random bits as a float in [-1, 1): exact, and never more than 1 - 2^-23
static inline float rng_uniform(void) { return (float)(rng_next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }

// blocks (or threads) needed to cover n items d at a time
static inline unsigned ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

// ----------------------------------------------------------------------------
// reductions, verbatim from train_gpt2.cu: the ladders' variant 1 is the trainer's
// kernel as it is, so it must call these exactly as the trainer has them

// --- begin shared-copy: gpu-reductions ---
// sums and maxima across the 32 threads of a warp, every thread gets the result
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}
// ... and across a block (a whole number of warps, at most 1024 threads)
__device__ inline float block_sum(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads(); // partial may still be read by an earlier call
    if (lane == 0) { partial[warp] = v; }
    __syncthreads();
    return warp_sum(lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f);
}
__device__ inline float block_max(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { partial[warp] = v; }
    __syncthreads();
    return warp_max(lane < (int)(blockDim.x / 32) ? partial[lane] : -INFINITY);
}
// --- end shared-copy: gpu-reductions ---

// ----------------------------------------------------------------------------
// the command line: the same flags in every ladder, and every default shown by -h
//   -v N     only variant N (1 to `variants`), checked and then timed; with
//            `bare_variant`, a plain N does the same (./dev/cuda/causal_softmax 3)
//   -c       check only, no timing
//   -s SEED  the seed of the random inputs (default 1337)
//   -h       the ladder's usage(), then exit 0
// Anything else: a message and exit 1. usage() stays in each ladder: it names the
// variants, then prints these lines, the same for every ladder.
#define LADDER_COMMON_FLAGS                                                  \
    "  -c       check only, no timing (default: check, then time)\n"        \
    "  -s SEED  seed of the random inputs (default: 1337)\n"                 \
    "  -h       this help\n"

struct LadderArgs {
    int only;                // the one variant to run, or 0 for all of them
    int check_only;          // -c
    unsigned long long seed; // -s
};

static inline LadderArgs parse_args(int argc, char **argv, int variants, int bare_variant, void (*usage)(void)) {
    LadderArgs a = {0, 0, 1337};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "-h") == 0) { usage(); exit(EXIT_SUCCESS); }
        if (strcmp(argv[i], "-c") == 0) { a.check_only = 1; continue; }
        int bare = bare_variant && argv[i][0] >= '0' && argv[i][0] <= '9';
        if ((strcmp(argv[i], "-v") == 0 && i + 1 < argc) || bare) {
            const char *arg = bare ? argv[i] : argv[++i];
            a.only = (int)strtol(arg, &end, 10);
            if (*end != '\0' || a.only < 1 || a.only > variants) {
                fprintf(stderr, "Error: %s from 1 to %d, got '%s'\n",
                        bare_variant ? "the variant is a number" : "-v takes a variant number", variants, arg);
                exit(EXIT_FAILURE);
            }
            continue;
        }
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
            a.seed = strtoull(argv[++i], &end, 10);
            if (*end != '\0' || argv[i][0] == '\0' || argv[i][0] == '-') {
                fprintf(stderr, "Error: -s takes a non-negative integer, got '%s'\n", argv[i]);
                exit(EXIT_FAILURE);
            }
            continue;
        }
        fprintf(stderr, "Error: unknown or incomplete argument '%s'\n", argv[i]);
        usage();
        exit(EXIT_FAILURE);
    }
    return a;
}

// ----------------------------------------------------------------------------
// the GPU: there must be one, or we say how to run the checks without it

// Exits 1 with a message where no GPU can be used: a machine with nvcc but no GPU
// builds these programs, and the emulator runs their checks there (emu_hint finishes
// the sentence "the CPU emulator ...": what it checks, and the command). Otherwise
// prints one line on device 0, ending with `what` (the precision, say; "" for none)
// and the seed.
static inline void require_gpu(const char *emu_hint, const char *what, unsigned long long seed) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fprintf(stderr, "Error: no usable CUDA GPU: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        fprintf(stderr, "HINT: this machine can compile CUDA code but not run it; the CPU emulator %s\n", emu_hint);
        exit(EXIT_FAILURE);
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s, compute capability %d.%d, %d SMs; %s%sseed %llu\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, what, what[0] != '\0' ? "; " : "", seed);
}

// ----------------------------------------------------------------------------
// timing

// The median GPU time of one run() in ms, by CUDA events. One warm-up call first, not
// timed (it pays for loading the kernel, and for cuBLAS picking its algorithm), then 20
// timed calls, or fewer, but at least min_calls, once they add up to enough_ms (matmul.cu
// stops at half a second that way, to keep its run short). prepare() runs before every
// call, outside the timed span: a kernel that works in place gets its inputs back there.
// The median, not the mean: a call delayed by something else on the machine does not move it.
template <typename Run, typename Prepare>
static float time_median_ms(Run run, Prepare prepare, int min_calls = 20, float enough_ms = 0.0f) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    prepare();
    run();
    std::vector<float> times;
    float total = 0.0f;
    while (times.size() < 20 && ((int)times.size() < min_calls || total < enough_ms)) {
        prepare();
        cudaCheck(cudaEventRecord(start));
        run();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
        total += ms;
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}
// the same with nothing to prepare, and 20 timed calls
template <typename Run>
static float time_median_ms(Run run) {
    return time_median_ms(run, [] {});
}

#endif // DEV_CUDA_COMMON_H
