/*
test_emu.cu: what the CPU emulator must get right, and what it must catch.

The same file builds with nvcc (and runs on a GPU in make gpu-check) and with
dev/emu/emu_build.sh in each of its builds (plain, asan, race: make test runs all
three), so the first part checks the emulator against the real thing as well as
against a CPU loop:
    thread and block indexing over 1-, 2- and 3-dimensional grids rounded up to whole blocks
    shared memory and __syncthreads (a tiled matmul with ragged edges)
    warp shuffles (a block-wide sum), shuffles in groups of 16, votes, __syncwarp
    partial warps with the mask of the lanes that exist
    atomics (a histogram with atomicAdd; one sum from every block)
    dynamic shared memory, above 48 KiB with cudaFuncSetAttribute's opt-in
    the tensor cores' warp matrix functions (wmma: bf16 tiles in both layouts, fp32
    accumulators loaded, scaled element by element, stored and read back by other lanes)
The second part, under the emulator only, runs bugs a GPU would suffer from, each in a
child process (this program with --case NAME), and checks that the build and schedule
meant to catch it fail it with the right message: a missing __syncthreads in either
direction, a race between blocks, writes past a cudaMalloc'd buffer or a __shared__
array, reads of shared memory no thread wrote, warp operations whose mask names a lane
that does not exist, has returned or is not the caller, divergent barriers, deadlocks,
__launch_bounds__ and dynamic shared memory limits, wmma calls on a misaligned tile, from
part of a warp or read by other lanes without a __syncwarp, a fragment's x[0] taken for its
tile's corner, cudaMemcpy in the wrong direction or
past the end, cudaFree twice, a kernel or a graph using freed memory.
*/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <unistd.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>

static void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "Error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check(err, __FILE__, __LINE__)

static int num_passed = 0, num_failed = 0;
static void report(const char *what, double max_err, double tol) {
    int ok = max_err <= tol;
    printf("%-60s max abs err %.3e (tolerance %.0e) %s\n", what, max_err, tol, ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
}
template <typename T> static T *to_device(const std::vector<T> &v) {
    T *d;
    cudaCheck(cudaMalloc(&d, v.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> v(n);
    cudaCheck(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

// ----------------------------------------------------------------------------
// kernels that are right: the emulator must run them as a GPU does

__global__ void saxpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = a * x[i] + y[i]; }
}

// out[z][y][x] = x + 100 y + 10000 z over a 3-D grid of 3-D blocks, rounded up
__global__ void index_3d(int *out, int X, int Y, int Z) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < X && y < Y && z < Z) { out[((size_t)z * Y + y) * X + x] = x + 100 * y + 10000 * z; }
}

#define TILE 8
__global__ void matmul_tiled(float *C, const float *A, const float *B, int M, int N, int K) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + (int)threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + (int)threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) { sum += As[threadIdx.y][k] * Bs[k][threadIdx.x]; }
        __syncthreads();
    }
    if (row < M && col < N) { C[row * N + col] = sum; }
}

// one block sums one row of x (n values): each thread a strided partial sum, then
// a warp-level tree with shuffles, then the warps' results through shared memory
__global__ void row_sum(float *out, const float *x, int n) {
    __shared__ float warp_sums[32];
    const float *row = x + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s += row[i]; }
    for (int offset = 16; offset > 0; offset /= 2) { s += __shfl_down_sync(0xffffffffu, s, offset); }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { warp_sums[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        s = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) { s += __shfl_down_sync(0xffffffffu, s, offset); }
        if (lane == 0) { out[blockIdx.x] = s; }
    }
}

// warp primitives at once: per group of 16 lanes the sum (xor shuffles of width 16) and
// the lane-0 value (broadcast); the warp's votes; a value handed to the next lane
// through shared memory behind a __syncwarp. Blocks of 48 threads: the second warp has
// 16 lanes, so every call names exactly the lanes that exist.
__global__ void warp_ops(int *out, const int *x) {
    __shared__ int handoff[64];
    int t = threadIdx.x, lane = t % 32, warp = t / 32;
    int lanes = min(32, (int)blockDim.x - 32 * warp);
    unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    int v = x[blockIdx.x * blockDim.x + t];
    int sum16 = v;
    for (int o = 8; o > 0; o /= 2) { sum16 += __shfl_xor_sync(mask, sum16, o, 16); }
    int first16 = __shfl_sync(mask, v, 0, 16);
    unsigned odd = __ballot_sync(mask, v % 2 != 0);
    int any_big = __any_sync(mask, v > 90), all_pos = __all_sync(mask, v >= 0);
    handoff[t] = v * 2;
    __syncwarp(mask);
    int next = handoff[32 * warp + (lane + 1) % lanes];
    int *o = out + (size_t)(blockIdx.x * blockDim.x + t) * 6;
    o[0] = sum16;
    o[1] = first16;
    o[2] = (int)(odd >> (lane & ~15) & 0xffffu); // (the bits of this lane's group of 16)
    o[3] = any_big;
    o[4] = all_pos;
    o[5] = next;
}

// legal on sm_70 and later: a vote and a __syncwarp after half the warp has returned (the
// operations wait only for lanes that have not exited), __syncwarp from two branches
// (Volta's independent thread scheduling matches them), and __syncthreads_count
__global__ void warp_exits(int *out) {
    __shared__ int box[32];
    int lane = threadIdx.x;
    int count = __syncthreads_count(lane % 3 == 0);
    if (lane >= 16) { return; }
    unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
    if (lane < 8) {
        box[lane] = lane;
        __syncwarp();
    } else {
        box[lane] = -lane;
        __syncwarp();
    }
    out[lane] = (int)odd + 1000 * box[15 - lane] + 100000 * count;
}

__global__ void histogram(int *bins, const int *values, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(&bins[values[i]], 1); }
}
// every block adds its share into one float: atomics never race with each other
__global__ void atomic_total(float *total, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(total, x[i]); }
}

// the reverse of each block's chunk through dynamic shared memory
__global__ void reverse_dynamic(float *out, const float *x, int chunk) {
    extern __shared__ float buf[];
    const float *in = x + (size_t)blockIdx.x * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) { buf[i] = in[i]; }
    __syncthreads();
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) { out[(size_t)blockIdx.x * chunk + i] = buf[chunk - 1 - i]; }
}

// ----------------------------------------------------------------------------
// kernels that are wrong: each a bug a GPU suffers from (run with --case NAME)

// thread t reads the slot of thread t - 1 (a lower thread) or t + 1 (a higher one);
// with the barrier between the writes and the reads it is right
__global__ void neighbour_read(int *out, int step, int use_barrier) {
    __shared__ int slots[64];
    int t = threadIdx.x, n = blockDim.x;
    slots[t] = t;
    if (use_barrier) { __syncthreads(); } // the same for the whole block: legal
    out[t] = slots[(t + step + n) % n];
}
// every block adds into one element with a plain +=: on a GPU, updates get lost
__global__ void plus_equals_total(float *total, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && threadIdx.x == 0) { *total += x[i]; }
}
// the bound <= instead of <: one element past the end
__global__ void copy_one_too_many(float *out, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) { out[i] = x[i < n ? i : 0]; }
}
// a shared array indexed one past its end
__global__ void shared_one_too_many(float *out) {
    __shared__ float buf[32];
    int t = threadIdx.x;
    buf[t + 1] = (float)t; // (threads 0..31 write 1..32)
    __syncthreads();
    if (t == 0) { out[0] = buf[1]; }
}
// block 0 writes a shared value, the others read it without writing: each block has its own
__global__ void shared_not_written(float *out) {
    __shared__ float value;
    if (blockIdx.x == 0 && threadIdx.x == 0) { value = 42.0f; }
    __syncthreads();
    if (threadIdx.x == 0) { out[blockIdx.x] = value; }
}
// lane 0 writes shared memory; lane 1 reads it after a shuffle (which orders no memory)
__global__ void shuffle_is_no_fence(int *out) {
    __shared__ int box[32];
    int lane = threadIdx.x;
    if (lane == 0) { box[0] = 7; }
    int dummy = __shfl_sync(0xffffffffu, lane, 0);
    if (lane == 1) { out[0] = box[0] + dummy; }
}
__global__ void shuffle_mask(int *out, unsigned mask, int src) {
    out[threadIdx.x] = __shfl_sync(mask, (int)threadIdx.x, src);
}
__global__ void shuffle_after_return(int *out) {
    if (threadIdx.x >= 16) { return; }
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);
}
__global__ void divergent_barrier(int *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
__global__ void deadlock(int *out) {
    if (threadIdx.x == 0) { __syncthreads(); }
    __syncwarp();
    out[threadIdx.x] = 1;
}
__global__ void __launch_bounds__(64) bounded(int *out) { out[threadIdx.x] = 1; }
// lanes 0-15 write, lanes 16-31 pass a __syncwarp of their own and read: nothing orders them
__global__ void partial_syncwarp(int *out) {
    __shared__ int buf[32];
    int lane = threadIdx.x;
    if (lane < 16) { buf[lane] = lane; }
    int dummy = __shfl_sync(0xffffffffu, lane, 0); // (makes every lane wait for lanes 0-15's writes)
    if (lane >= 16) {
        __syncwarp(0xffff0000u);
        out[lane] = buf[lane - 16] + dummy;
    }
}
// 16-bit halves: thread t writes its short; thread t+1 of another warp reads it without a barrier
__global__ void half_words(int *out) {
    __shared__ short buf[64];
    int t = threadIdx.x;
    buf[t] = (short)t;
    int dummy = __shfl_sync(0xffffffffu, t, 0);
    if (t < 32 && t % 2 == 0) { out[t] = buf[t + 33] + dummy; }
}
// an atomic on shared memory no thread zeroed
__global__ void shared_histogram(int *out) {
    __shared__ int bins[4];
    atomicAdd(&bins[threadIdx.x % 4], 1);
    __syncthreads();
    if (threadIdx.x < 4) { out[threadIdx.x] = bins[threadIdx.x]; }
}
// dynamic shared memory read before any thread of the block wrote it
__global__ void dynamic_not_written(float *out) {
    extern __shared__ float scratch[];
    if (blockIdx.x == 0) { scratch[threadIdx.x] = 1.0f; }
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = scratch[threadIdx.x];
}

// out (32 x 16) = scale (A B) + C on the tensor cores, A (32 x 32) row-major, B (32 x 16)
// column-major (element (k, j) at B[k + 32 j]), all bf16, C fp32: warp w takes rows
// 16w..16w+15 in two steps of k. The result goes through shared memory, where each lane
// copies out what other lanes stored (after a __syncwarp: with sync = 0, a race).
__global__ void wmma_tiles(float *out, const float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B, float scale, int sync) {
    __shared__ __align__(32) float tile[2][16 * 16];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int e = lane; e < 256; e += 32) { tile[w][e] = 0.0f; } // (so that a read too early is a race, not a read of nothing)
    __syncwarp();
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> a;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> b;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc, c;
    nvcuda::wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < 32; k += 16) {
        nvcuda::wmma::load_matrix_sync(a, A + 16 * w * 32 + k, 32);
        nvcuda::wmma::load_matrix_sync(b, B + k, 32);
        nvcuda::wmma::mma_sync(acc, a, b, acc);
    }
    nvcuda::wmma::load_matrix_sync(c, C + 16 * w * 16, 16, nvcuda::wmma::mem_row_major);
    for (int e = 0; e < acc.num_elements; e++) { acc.x[e] = scale * acc.x[e] + c.x[e]; } // (same types: same elements)
    nvcuda::wmma::store_matrix_sync(tile[w], acc, 16, nvcuda::wmma::mem_row_major);
    if (sync) { __syncwarp(); }
    for (int e = lane; e < 256; e += 32) { out[16 * w * 16 + e] = tile[w][e]; } // (lane 1 reads (0, 1): lane 0's on a GPU)
}
// wmma's rules broken: a tile 16 bytes off its 32-byte alignment; half the warp returned
__global__ void wmma_misaligned(float *C) {
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;
    nvcuda::wmma::load_matrix_sync(c, C + 4, 16, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::store_matrix_sync(C + 4, c, 16, nvcuda::wmma::mem_row_major);
}
// a fragment's x[0] taken for the tile's corner: on a GPU lane 0 holds (0, 0) somewhere in
// its few elements, in an order CUDA does not promise
__global__ void wmma_corner(float *out, const float *C) {
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;
    nvcuda::wmma::load_matrix_sync(c, C, 16, nvcuda::wmma::mem_row_major);
    if (threadIdx.x == 0) { out[0] = c.x[0]; }
}
__global__ void wmma_half_warp(float *C) {
    if (threadIdx.x >= 16) { return; }
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;
    nvcuda::wmma::fill_fragment(c, 1.0f);
    nvcuda::wmma::store_matrix_sync(C, c, 16, nvcuda::wmma::mem_row_major);
}

#ifdef CUDA_EMU_H
// The child: run one bug, check what a plain run can check itself (wrong values)
static int run_case(const char *name) {
    std::vector<float> ones(256, 1.0f);
    float *x = to_device(ones), *out;
    cudaCheck(cudaMalloc(&out, 256 * sizeof(float)));
    int *iout;
    cudaCheck(cudaMalloc(&iout, 64 * sizeof(int)));
    if (strcmp(name, "lower") == 0 || strcmp(name, "higher") == 0) {
        int step = name[0] == 'l' ? -1 : 1;
        neighbour_read<<<1, 64>>>(iout, step, 0);
        std::vector<int> r = to_host(iout, 64);
        for (int t = 0; t < 64; t++) {
            if (r[t] != (t + step + 64) % 64) { fprintf(stderr, "wrong result: thread %d read %d\n", t, r[t]); return 1; }
        }
    } else if (strcmp(name, "plus_equals") == 0) {
        cudaCheck(cudaMemset(out, 0, sizeof(float)));
        plus_equals_total<<<4, 64>>>(out, x, 256);
    } else if (strcmp(name, "past_end") == 0) {
        float *exact;
        cudaCheck(cudaMalloc(&exact, 100 * sizeof(float)));
        copy_one_too_many<<<2, 64>>>(exact, x, 100); // writes exact[100]
    } else if (strcmp(name, "shared_past_end") == 0) {
        shared_one_too_many<<<1, 32>>>(out);
    } else if (strcmp(name, "shared_not_written") == 0) {
        shared_not_written<<<2, 32>>>(out);
    } else if (strcmp(name, "shuffle_no_fence") == 0) {
        shuffle_is_no_fence<<<1, 32>>>(iout);
    } else if (strcmp(name, "mask_without_caller") == 0) {
        shuffle_mask<<<1, 32>>>(iout, 0x0000ffffu, 0);
    } else if (strcmp(name, "mask_past_blockdim") == 0) {
        shuffle_mask<<<1, 48>>>(iout, 0xffffffffu, 0);
    } else if (strcmp(name, "source_outside_mask") == 0) {
        shuffle_mask<<<1, 16>>>(iout, 0x0000ffffu, 20);
    } else if (strcmp(name, "lane_returned") == 0) {
        shuffle_after_return<<<1, 32>>>(iout);
    } else if (strcmp(name, "partial_syncwarp") == 0) {
        partial_syncwarp<<<1, 32>>>(iout);
    } else if (strcmp(name, "half_words") == 0) {
        half_words<<<1, 64>>>(iout);
    } else if (strcmp(name, "shared_atomic") == 0) {
        shared_histogram<<<1, 32>>>(iout);
    } else if (strcmp(name, "dynamic_not_written") == 0) {
        dynamic_not_written<<<2, 32, 32 * sizeof(float)>>>(out);
    } else if (strcmp(name, "wmma_no_syncwarp") == 0) {
        std::vector<__nv_bfloat16> ab(32 * 32, __nv_bfloat16(0.5f));
        __nv_bfloat16 *dab = to_device(ab);
        float *result;
        cudaCheck(cudaMalloc(&result, 256 * sizeof(float)));
        cudaCheck(cudaMemset(out, 0, 256 * sizeof(float)));
        wmma_tiles<<<1, 32>>>(result, out, dab, dab, 1.0f, 0);
    } else if (strcmp(name, "wmma_misaligned") == 0) {
        wmma_misaligned<<<1, 32>>>(out);
    } else if (strcmp(name, "wmma_corner") == 0) {
        std::vector<float> c(256);
        for (int e = 0; e < 256; e++) { c[e] = (float)e; }
        float *dc = to_device(c);
        wmma_corner<<<1, 32>>>(out, dc);
        float corner = to_host(out, 1)[0];
        if (corner != 0.0f) { fprintf(stderr, "wrong result: x[0] is element %g, not the corner\n", corner); return 1; }
    } else if (strcmp(name, "wmma_half_warp") == 0) {
        wmma_half_warp<<<1, 32>>>(out);
    } else if (strcmp(name, "host_deref") == 0) {
        out[3] = 1.0f; // a device pointer written on the host
    } else if (strcmp(name, "capture_default_stream") == 0) {
        cudaStream_t stream;
        cudaCheck(cudaStreamCreate(&stream));
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        saxpy<<<1, 64>>>(out, x, 2.0f, 64); // (no stream: the default one)
        cudaCheck(cudaStreamEndCapture(stream, &graph));
    } else if (strcmp(name, "divergent_barrier") == 0) {
        divergent_barrier<<<1, 32>>>(iout);
    } else if (strcmp(name, "deadlock") == 0) {
        deadlock<<<1, 32>>>(iout);
    } else if (strcmp(name, "launch_bounds") == 0) {
        bounded<<<1, 64>>>(iout); // fine
        bounded<<<1, 128>>>(iout);
    } else if (strcmp(name, "dynamic_shared") == 0) {
        reverse_dynamic<<<1, 32, 64 * 1024>>>(out, x, 16); // 64 KiB without the opt-in
    } else if (strcmp(name, "memcpy_direction") == 0) {
        std::vector<float> h(4);
        cudaCheck(cudaMemcpy(out, h.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost));
    } else if (strcmp(name, "memcpy_past_end") == 0) {
        std::vector<float> h(257);
        cudaCheck(cudaMemcpy(out, h.data(), 257 * sizeof(float), cudaMemcpyHostToDevice));
    } else if (strcmp(name, "memset_host") == 0) {
        std::vector<float> h(4);
        cudaCheck(cudaMemset(h.data(), 0, 4 * sizeof(float)));
    } else if (strcmp(name, "free_twice") == 0) {
        cudaCheck(cudaFree(out));
        cudaCheck(cudaFree(out));
    } else if (strcmp(name, "kernel_after_free") == 0) {
        cudaCheck(cudaFree(out));
        saxpy<<<1, 64>>>(out, x, 2.0f, 64);
    } else if (strcmp(name, "graph_after_free") == 0) {
        // a graph keeps the pointers it captured: replayed after the buffer is freed, it writes freed memory
        cudaStream_t stream;
        cudaCheck(cudaStreamCreate(&stream));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        saxpy<<<1, 64, 0, stream>>>(out, x, 2.0f, 64);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        cudaCheck(cudaGraphLaunch(exec, stream)); // fine
        cudaCheck(cudaFree(out));
        cudaCheck(cudaGraphLaunch(exec, stream));
    } else {
        fprintf(stderr, "no case %s\n", name);
        return 2;
    }
    cudaCheck(cudaDeviceSynchronize());
    return 0;
}

// Which builds and schedules must fail each case, with which words in the message: a
// case a build cannot see is not run there (a plain build cannot see a race that does
// not change the result; a missing barrier changes it only in one direction).
#if defined(EMU_RACECHECK)
#define BUILD "race"
#elif defined(EMU_ASAN)
#define BUILD "asan"
#else
#define BUILD "plain"
#endif
struct Case { const char *name, *builds, *schedule, *message; };
static const Case CASES[] = {
    {"lower", "plain", "descending", "wrong result"},         // thread t reads t-1's slot: only wrong if t runs first
    {"higher", "plain", "ascending", "wrong result"},         // thread t reads t+1's slot
    {"lower", "race", "ascending", "a race on shared memory"}, // the race build sees both in any order
    {"higher", "race", "descending", "a race on shared memory"},
    {"plus_equals", "race", "ascending", "a race on device memory"},
    {"past_end", "race", "random:3", "past its end"},
    {"past_end", "asan", "ascending", "heap-buffer-overflow"},
    {"shared_past_end", "race", "ascending", "past its end"},
    {"shared_past_end", "asan", "ascending", "index 32 out of bounds"}, // (UBSan sees it first)
    {"shared_not_written", "race", "ascending", "which no thread of its block has written"},
    {"shuffle_no_fence", "race", "ascending", "a shuffle orders no memory"},
    {"mask_without_caller", "plain asan race", "ascending", "does not include the calling lane"},
    {"mask_past_blockdim", "plain asan race", "ascending", "has only 16 threads"},
    {"source_outside_mask", "plain asan race", "ascending", "which is not in the mask"},
    {"lane_returned", "plain asan race", "ascending", "which has returned"},
    {"lane_returned", "plain", "descending", "which has returned"},
    {"partial_syncwarp", "race", "random:2", "a race on shared memory"},
    {"half_words", "race", "descending", "a race on shared memory"},
    {"shared_atomic", "race", "ascending", "atomically, which no thread of its block has written"},
    {"dynamic_not_written", "race", "ascending", "which no thread of its block has written"},
    {"wmma_no_syncwarp", "race", "ascending", "a race on shared memory"},
    {"wmma_misaligned", "plain asan race", "ascending", "is not 32-byte aligned"},
    {"wmma_half_warp", "plain asan race", "ascending", "needs all 32 lanes"},
    {"wmma_corner", "plain", "ascending", "wrong result: x[0] is element"},
    {"host_deref", "race", "ascending", "device memory, which on a GPU machine the host cannot touch"},
    {"capture_default_stream", "plain asan race", "ascending", "issued to the default stream during a capture"},
    {"divergent_barrier", "plain asan race", "random:5", "divergent barrier"},
    {"deadlock", "plain asan race", "ascending", "deadlock: 1 thread(s) wait at the __syncthreads"},
    {"launch_bounds", "plain asan race", "ascending", "__launch_bounds__ allows at most 64"},
    {"dynamic_shared", "plain asan race", "ascending", "more than the 49152 a block may have"},
    {"memcpy_direction", "plain asan race", "ascending", "is device memory, but the copy's kind says host memory"},
    {"memcpy_past_end", "plain asan race", "ascending", "4 bytes past its end"},
    {"memset_host", "plain asan race", "ascending", "is not device memory"},
    {"free_twice", "plain race", "ascending", "freed twice"},
    {"free_twice", "asan", "ascending", "not a pointer cudaMalloc returned"}, // (its allocation is gone at once)
    {"kernel_after_free", "race", "ascending", "device memory that was freed"},
    {"kernel_after_free", "asan", "ascending", "heap-use-after-free"},
    {"graph_after_free", "race", "descending", "device memory that was freed"},
    {"graph_after_free", "asan", "ascending", "heap-use-after-free"},
};

static void run_cases(const char *self) {
    char log[] = "/tmp/test_emu_case.XXXXXX";
    int fd = mkstemp(log);
    if (fd < 0) { fprintf(stderr, "Error: cannot create a temporary file\n"); exit(EXIT_FAILURE); }
    close(fd);
    printf("\nbugs a GPU suffers from, each in a child process (this is the %s build):\n", BUILD);
    for (const Case &c : CASES) {
        if (strstr(c.builds, BUILD) == nullptr) { continue; }
        char cmd[8192];
        snprintf(cmd, sizeof(cmd), "EMU_SCHEDULE=%s '%s' --case %s > '%s' 2>&1", c.schedule, self, c.name, log);
        int status = system(cmd);
        std::vector<char> text(1 << 16, '\0');
        FILE *f = fopen(log, "r");
        size_t n = f != nullptr ? fread(text.data(), 1, text.size() - 1, f) : 0;
        if (f != nullptr) { fclose(f); }
        text[n] = '\0';
        int ok = status != 0 && strstr(text.data(), c.message) != nullptr;
        printf("%-22s (%-10s) fails with \"%s\": %s\n", c.name, c.schedule, c.message, ok ? "OK" : "NOT OK");
        if (!ok) { printf("    exit status %d, output:\n%.1500s\n", status, text.data()); }
        if (ok) { num_passed++; } else { num_failed++; }
    }
    remove(log);
}
#endif

int main(int argc, char **argv) {
#ifdef CUDA_EMU_H
    if (argc == 3 && strcmp(argv[1], "--case") == 0) { return run_case(argv[2]); }
#endif
    (void)argc;
    (void)argv;
    uint32_t seed = 7;
    auto rnd = [&seed]() { seed = seed * 1664525u + 1013904223u; return (seed >> 8) * (1.0f / 16777216.0f) - 0.5f; };
    // saxpy over 1000 elements in blocks of 128: the last block is partly idle
    {
        int n = 1000;
        std::vector<float> x(n), y(n);
        for (int i = 0; i < n; i++) { x[i] = rnd(); y[i] = rnd(); }
        float *dx = to_device(x), *dy = to_device(y);
        saxpy<<<(n + 127) / 128, 128>>>(dy, dx, 2.5f, n);
        cudaCheck(cudaGetLastError());
        std::vector<float> out = to_host(dy, n);
        double err = 0;
        for (int i = 0; i < n; i++) { err = fmax(err, fabs(out[i] - (2.5f * x[i] + y[i]))); }
        report("saxpy, 1000 elements, blocks of 128", err, 1e-6);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dy));
    }
#if defined(CUDA_EMU_H) && !defined(EMU_RACECHECK)
    // the emulator's poison: fresh device memory reads as 0xFF bytes, and so does shared
    // memory that a block has not written (not what the block before it left there; the
    // race build reports such a read instead)
    {
        float *d;
        cudaCheck(cudaMalloc(&d, 8 * sizeof(float)));
        std::vector<uint32_t> fresh = to_host((const uint32_t *)d, 8);
        shared_not_written<<<2, 32>>>(d);
        std::vector<float> r = to_host(d, 2);
        double wrong = r[0] != 42.0f || !std::isnan(r[1]);
        for (uint32_t b : fresh) { wrong += b != 0xffffffffu; }
        report("emulator: fresh device memory and unwritten shared memory poisoned", wrong, 0);
        cudaCheck(cudaFree(d));
    }
#endif
    // a 3-D grid of (8, 4, 2) blocks over 37 x 9 x 5: partial blocks on every axis
    {
        int X = 37, Y = 9, Z = 5;
        int *d;
        cudaCheck(cudaMalloc(&d, X * Y * Z * sizeof(int)));
        dim3 block(8, 4, 2), grid((X + 7) / 8, (Y + 3) / 4, (Z + 1) / 2);
        index_3d<<<grid, block>>>(d, X, Y, Z);
        std::vector<int> out = to_host(d, X * Y * Z);
        double wrong = 0;
        for (int z = 0; z < Z; z++) {
            for (int y = 0; y < Y; y++) {
                for (int x = 0; x < X; x++) { wrong += out[(z * Y + y) * X + x] != x + 100 * y + 10000 * z; }
            }
        }
        report("3-D grid (5, 3, 3) of blocks (8, 4, 2) over 37 x 9 x 5", wrong, 0);
        cudaCheck(cudaFree(d));
    }
    // matmul 37 x 29 = (37 x 45) @ (45 x 29): no size is a multiple of the tile
    {
        int M = 37, N = 29, K = 45;
        std::vector<float> A(M * K), B(K * N);
        for (auto &v : A) { v = rnd(); }
        for (auto &v : B) { v = rnd(); }
        float *dA = to_device(A), *dB = to_device(B), *dC;
        cudaCheck(cudaMalloc(&dC, M * N * sizeof(float)));
        dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
        matmul_tiled<<<grid, block>>>(dC, dA, dB, M, N, K);
        std::vector<float> C = to_host(dC, M * N);
        double err = 0;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double ref = 0;
                for (int k = 0; k < K; k++) { ref += (double)A[i * K + k] * B[k * N + j]; }
                err = fmax(err, fabs(ref - C[i * N + j]));
            }
        }
        report("tiled matmul 37x45 @ 45x29, 8x8 tiles", err, 1e-5);
        cudaCheck(cudaFree(dA));
        cudaCheck(cudaFree(dB));
        cudaCheck(cudaFree(dC));
    }
    // row sums of 5 rows of 1000 with 256 threads: shuffles and shared memory
    {
        int rows = 5, n = 1000;
        std::vector<float> x(rows * n);
        for (auto &v : x) { v = rnd(); }
        float *dx = to_device(x), *dout;
        cudaCheck(cudaMalloc(&dout, rows * sizeof(float)));
        row_sum<<<rows, 256>>>(dout, dx, n);
        std::vector<float> out = to_host(dout, rows);
        double err = 0;
        for (int r = 0; r < rows; r++) {
            double ref = 0;
            for (int i = 0; i < n; i++) { ref += x[r * n + i]; }
            err = fmax(err, fabs(ref - out[r]));
        }
        report("row sums with warp shuffles, 5 x 1000, 256 threads", err, 1e-4);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dout));
    }
    // warp operations in blocks of 48 threads (a full warp and one of 16 lanes)
    {
        int blocks = 3, threads = 48, n = blocks * threads;
        std::vector<int> x(n);
        for (int i = 0; i < n; i++) { x[i] = (i * 37 + 11) % 97; }
        int *dx = to_device(x), *dout;
        cudaCheck(cudaMalloc(&dout, n * 6 * sizeof(int)));
        warp_ops<<<blocks, threads>>>(dout, dx);
        std::vector<int> out = to_host(dout, n * 6);
        double wrong = 0;
        for (int b = 0; b < blocks; b++) {
            for (int t = 0; t < threads; t++) {
                int warp = t / 32, lane = t % 32, lanes = t < 32 ? 32 : 16, g = b * threads + 32 * warp + (lane & ~15);
                int sum16 = 0, odd = 0, any_big = 0, all_pos = 1;
                for (int j = 0; j < 16; j++) { sum16 += x[g + j]; odd |= (x[g + j] % 2 != 0) << j; }
                for (int j = 0; j < lanes; j++) { any_big |= x[b * threads + 32 * warp + j] > 90; all_pos &= x[b * threads + 32 * warp + j] >= 0; }
                int expect[6] = {sum16, x[g], odd, any_big, all_pos, 2 * x[b * threads + 32 * warp + (lane + 1) % lanes]};
                for (int k = 0; k < 6; k++) { wrong += out[(b * threads + t) * 6 + k] != expect[k]; }
            }
        }
        report("shuffles of width 16, votes, __syncwarp; warps of 32 and 16 lanes", wrong, 0);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dout));
    }
    // a vote and __syncwarp after half the warp returned, __syncwarp from two branches, __syncthreads_count
    {
        int *dout;
        cudaCheck(cudaMalloc(&dout, 16 * sizeof(int)));
        warp_exits<<<1, 32>>>(dout);
        std::vector<int> out = to_host(dout, 16);
        double wrong = 0;
        for (int lane = 0; lane < 16; lane++) {
            int other = 15 - lane, box = other < 8 ? other : -other;
            wrong += out[lane] != 0xAAAA + 1000 * box + 100000 * 11; // (odd lanes of 0-15; 11 of 32 lanes are multiples of 3)
        }
        report("votes and __syncwarp after lanes return; __syncthreads_count", wrong, 0);
        cudaCheck(cudaFree(dout));
    }
    // histogram of 3000 values into 10 bins with atomicAdd, and one total from every block
    {
        int n = 3000;
        std::vector<int> v(n), ref(10, 0);
        for (int i = 0; i < n; i++) { v[i] = (i * 7 + i / 13) % 10; ref[v[i]]++; }
        int *dv = to_device(v), *dbins;
        cudaCheck(cudaMalloc(&dbins, 10 * sizeof(int)));
        cudaCheck(cudaMemset(dbins, 0, 10 * sizeof(int)));
        histogram<<<(n + 255) / 256, 256>>>(dbins, dv, n);
        std::vector<int> bins = to_host(dbins, 10);
        double err = 0;
        for (int b = 0; b < 10; b++) { err = fmax(err, fabs((double)bins[b] - ref[b])); }
        report("histogram with atomicAdd, 3000 values, 10 bins", err, 0);
        std::vector<float> ones(n, 0.25f);
        float *dx = to_device(ones), *dt;
        cudaCheck(cudaMalloc(&dt, sizeof(float)));
        cudaCheck(cudaMemset(dt, 0, sizeof(float)));
        atomic_total<<<(n + 255) / 256, 256>>>(dt, dx, n);
        report("one atomicAdd total from 12 blocks (3000 x 0.25)", fabs(to_host(dt, 1)[0] - 750.0f), 0);
        cudaCheck(cudaFree(dv));
        cudaCheck(cudaFree(dbins));
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dt));
    }
    // dynamic shared memory: 3 chunks of 1000 reversed, then 60 KiB a block with the opt-in
    {
        for (int chunk : {1000, 15000}) {
            int blocks = 3, n = blocks * chunk;
            size_t bytes = chunk * sizeof(float);
            std::vector<float> x(n);
            for (auto &v : x) { v = rnd(); }
            float *dx = to_device(x), *dout;
            cudaCheck(cudaMalloc(&dout, n * sizeof(float)));
            if (bytes > 48 * 1024) { cudaCheck(cudaFuncSetAttribute(reverse_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)); }
            reverse_dynamic<<<blocks, 128, bytes>>>(dout, dx, chunk);
            cudaCheck(cudaGetLastError());
            std::vector<float> out = to_host(dout, n);
            double err = 0;
            for (int b = 0; b < blocks; b++) {
                for (int i = 0; i < chunk; i++) { err = fmax(err, fabs(out[b * chunk + i] - x[b * chunk + chunk - 1 - i])); }
            }
            char what[96];
            snprintf(what, sizeof(what), "dynamic shared memory, %zu bytes a block%s", bytes, bytes > 48 * 1024 ? " (opt-in)" : "");
            report(what, err, 0);
            cudaCheck(cudaFree(dx));
            cudaCheck(cudaFree(dout));
        }
    }
    // the tensor cores (wmma): C = 0.75 (A B) + C, bf16 tiles in both layouts, two warps
    {
        std::vector<__nv_bfloat16> A(32 * 32), B(32 * 16);
        std::vector<float> C(32 * 16);
        for (auto &v : A) { v = __nv_bfloat16(rnd()); }
        for (auto &v : B) { v = __nv_bfloat16(rnd()); }
        for (auto &v : C) { v = rnd(); }
        __nv_bfloat16 *dA = to_device(A), *dB = to_device(B);
        float *dC = to_device(C), *dout;
        cudaCheck(cudaMalloc(&dout, 32 * 16 * sizeof(float)));
        wmma_tiles<<<1, 64>>>(dout, dC, dA, dB, 0.75f, 1);
        cudaCheck(cudaGetLastError());
        std::vector<float> out = to_host(dout, 32 * 16);
        double err = 0;
        for (int i = 0; i < 32; i++) {
            for (int j = 0; j < 16; j++) {
                double ref = 0;
                for (int k = 0; k < 32; k++) { ref += (double)(float)A[i * 32 + k] * (double)(float)B[k + 32 * j]; }
                err = fmax(err, fabs(0.75 * ref + C[i * 16 + j] - out[i * 16 + j]));
            }
        }
        report("wmma: 32x32 @ 32x16 bf16 (row-, column-major), fp32 accumulators", err, 1e-5);
        cudaCheck(cudaFree(dA));
        cudaCheck(cudaFree(dB));
        cudaCheck(cudaFree(dC));
        cudaCheck(cudaFree(dout));
    }
    // the missing barrier, as a GPU runs it: either outcome is possible, so only reported
    {
        int n = 64, *dout;
        cudaCheck(cudaMalloc(&dout, n * sizeof(int)));
        neighbour_read<<<1, n>>>(dout, 1, 1);
        std::vector<int> out = to_host(dout, n);
        double wrong = 0;
        for (int t = 0; t < n; t++) { wrong += out[t] != (t + 1) % n; }
        report("neighbour reads after __syncthreads", wrong, 0);
        cudaCheck(cudaFree(dout));
    }
#ifdef CUDA_EMU_H
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) { fprintf(stderr, "Error: cannot find this program's path\n"); exit(EXIT_FAILURE); }
    self[len] = '\0';
    run_cases(self);
#endif
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
