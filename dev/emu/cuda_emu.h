/*
cuda_emu.h: run unmodified CUDA kernels on the CPU, to test GPU code without a GPU.

How a .cu file becomes a CPU program (dev/emu/emu_build.sh does both steps):
  1. a sed rewrites each launch  kernel<<<grid, block>>>(args)  into
     emu::Launch{grid, block}.run(kernel, args)   (C++ has no <<< >>>);
  2. g++ compiles the result with -fopenmp, this header force-included
     (-include dev/emu/cuda_emu.h), and without the CUDA headers.
What the emulation does:
  - the blocks of a grid run one after another; the threads of a block run as
    the threads of one OpenMP team (so a block of 256 threads is 256 OS threads);
  - threadIdx / blockIdx are thread-local, blockDim / gridDim global;
  - __shared__ variables are function statics: one copy, seen by the whole team;
  - __syncthreads() is an OpenMP barrier; so, like on a GPU, every thread of the
    block must reach it;
  - warp shuffles go through an exchange buffer between two barriers of the
    warp's 32 threads (so all threads of a warp must call them together, as the
    full-mask shuffles of the usual reductions do); atomics are OpenMP atomics;
  - the runtime API the project uses (cudaMalloc, cudaMemcpy, events, device
    properties, errors) has plain C stand-ins: device memory is host memory;
    include/cublas_v2.h does the same for the cuBLAS calls (loops in double).
Run emulated programs with OMP_WAIT_POLICY=passive: a block of 256 threads on a
2-core machine spends most of its time in barriers, and sleeping there instead
of spinning makes the whole run about 5x faster.
What it cannot do: tensor cores (mma, wmma), inline PTX, streams running in
parallel, timing (events measure CPU time), and anything that relies on warps
running in lock-step without __syncwarp. It is a correctness tool, not a
performance one.
*/
#ifndef CUDA_EMU_H
#define CUDA_EMU_H
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <ctime>
#include <atomic>
#include <sched.h>
#include <unistd.h>
#include <omp.h>

// ----------------------------------------------------------------------------
// built-in variables and qualifiers

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
namespace emu {
inline thread_local uint3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;
inline int team_size() { return (int)(block_dim.x * block_dim.y * block_dim.z); }
inline int linear_tid() { return (int)(thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z)); }
}
#define threadIdx (emu::thread_idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
#define __launch_bounds__(...)
// functions, so that they work anywhere a statement or expression does
#define __syncthreads() emu::barrier()
#define __syncwarp(...) emu::warp_barrier()
namespace emu {
inline void barrier() {
    #pragma omp barrier
}
}

// ----------------------------------------------------------------------------
// warp shuffles and atomics

namespace emu {
// A barrier for the threads of one warp only (shuffles are often called by one
// warp inside an if): the last of the warp's threads to arrive opens it. Waiting
// threads yield their core: a block has far more threads than the CPU has cores.
struct WarpBarrier {
    std::atomic<int> count{0}, generation{0};
};
inline WarpBarrier warp_barriers[32];
inline void warp_barrier() {
    int tid = linear_tid(), w = tid / 32;
    int members = team_size() - 32 * w < 32 ? team_size() - 32 * w : 32;
    WarpBarrier &b = warp_barriers[w];
    int gen = b.generation.load();
    if (b.count.fetch_add(1) + 1 == members) {
        b.count.store(0);
        b.generation.fetch_add(1);
    } else {
        while (b.generation.load() == gen) { sched_yield(); }
    }
}
// every thread of the warp posts its value, waits, reads its partner's, waits again
template <typename T> inline T exchange(T v, int partner_tid) {
    static T slots[1024];
    int tid = linear_tid();
    slots[tid] = v;
    warp_barrier();
    T r = slots[partner_tid];
    warp_barrier();
    return r;
}
}
template <typename T> inline T __shfl_down_sync(unsigned, T v, int delta, int width = 32) {
    int tid = emu::linear_tid(), lane = tid % width;
    return emu::exchange(v, lane + delta < width ? tid + delta : tid);
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, int delta, int width = 32) {
    int tid = emu::linear_tid(), lane = tid % width;
    return emu::exchange(v, lane - delta >= 0 ? tid - delta : tid);
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    int tid = emu::linear_tid(), lane = tid % width;
    return emu::exchange(v, tid - lane + ((lane ^ mask) % width));
}
template <typename T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    int tid = emu::linear_tid(), lane = tid % width;
    return emu::exchange(v, tid - lane + (src % width));
}
template <typename T> inline T atomicAdd(T *address, T val) {
    T old;
    #pragma omp atomic capture
    { old = *address; *address += val; }
    return old;
}
template <typename T> inline T atomicMax(T *address, T val) {
    T old;
    #pragma omp critical(emu_atomic)
    { old = *address; if (val > old) { *address = val; } }
    return old;
}

// ----------------------------------------------------------------------------
// launching a kernel

namespace emu {
struct Launch {
    dim3 grid, block;
    size_t shared_bytes = 0;
    void *stream = nullptr;
    template <typename... P, typename... A> void run(void (*kernel)(P...), A &&...args) const {
        grid_dim = grid;
        block_dim = block;
        int threads = (int)(block.x * block.y * block.z);
        // one OpenMP team for the whole grid (starting a team per block costs
        // far more than the barrier between blocks)
        #pragma omp parallel num_threads(threads)
        {
            if (omp_get_num_threads() != threads) {
                #pragma omp single
                fprintf(stderr, "Error: emulation: got %d OpenMP threads for a block of %d (raise OMP_THREAD_LIMIT)\n",
                        omp_get_num_threads(), threads);
                exit(EXIT_FAILURE);
            }
            int t = omp_get_thread_num();
            thread_idx = {(unsigned)t % block.x, ((unsigned)t / block.x) % block.y, (unsigned)t / (block.x * block.y)};
            for (unsigned bz = 0; bz < grid.z; bz++) {
                for (unsigned by = 0; by < grid.y; by++) {
                    for (unsigned bx = 0; bx < grid.x; bx++) {
                        block_idx = {bx, by, bz};
                        kernel(args...);
                        // the block is done (its shared memory free) before the next starts;
                        // a thread that returned early waits here too
                        #pragma omp barrier
                    }
                }
            }
        }
    }
};
}

// ----------------------------------------------------------------------------
// the runtime API, as plain C

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "out of memory (emulation)"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) {
    *p = (T *)malloc(bytes > 0 ? bytes : 1);
    return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) { memcpy(dst, src, bytes); return cudaSuccess; }
inline cudaError_t cudaMemset(void *dst, int value, size_t bytes) { memset(dst, value, bytes); return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
// the emulated device: the CPU, with the host's memory
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
    size_t totalGlobalMem, sharedMemPerBlock;
};
inline size_t emu_host_memory() { return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE); }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    *p = cudaDeviceProp{};
    snprintf(p->name, sizeof(p->name), "CPU emulation (dev/emu)");
    p->multiProcessorCount = omp_get_num_procs();
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->totalGlobalMem = emu_host_memory();
    p->sharedMemPerBlock = 48 * 1024;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *total_bytes = emu_host_memory();
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE);
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
typedef double *cudaEvent_t; // an event is the CPU time at which it was recorded
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new double(0.0); return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, void * = nullptr) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *e = ts.tv_sec + 1e-9 * ts.tv_nsec;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)((*b - *a) * 1e3); return cudaSuccess; }
#endif
