/*
cuda_emu.h: run unmodified CUDA kernels on the CPU, to test GPU code without a GPU.

How a .cu file becomes a CPU program (dev/emu/emu_build.sh does both steps):
  1. a sed rewrites each launch  kernel<<<grid, block>>>(args)  into
     emu::Launch{grid, block}.run(kernel, args)   (C++ has no <<< >>>);
  2. g++ compiles the result with -fopenmp, this header force-included
     (-include dev/emu/cuda_emu.h), and without the CUDA headers.
What the emulation does:
  - the blocks of a grid run one after another; the threads of a block run as
    fibers (coroutines) on the calling OS thread, each with its own stack: a
    thread runs until it reaches a barrier or returns, then the next one runs;
  - threadIdx / blockIdx are set for each fiber as it resumes, blockDim / gridDim
    are global;
  - __shared__ variables are function statics: one copy, seen by the whole block;
  - __syncthreads() parks the thread until every thread of the block that has
    not returned is parked there too, as on a GPU; threads waiting at different
    barriers that can never meet are reported as a deadlock;
  - warp shuffles go through an exchange buffer between two warp barriers (all
    live threads of the warp must call them together, as the full-mask shuffles
    of the usual reductions do); atomics are plain read-modify-writes;
  - so the interleaving is fixed: thread 0 runs first up to its barrier, then
    thread 1, and so on. A missing __syncthreads is therefore caught every time:
    the threads after the first read what the others have not written yet;
  - the runtime API the project uses (cudaMalloc, cudaMemcpy, events, device
    properties, errors) has plain C stand-ins: device memory is host memory;
    include/cublas_v2.h does the same for the cuBLAS calls (loops in double),
    include/cuda_bf16.h for the bfloat16 type.
What it cannot do: tensor cores (mma, wmma), inline PTX, streams running in
parallel, timing (events measure CPU time), and anything that relies on warps
running in lock-step without __syncwarp, and blocks running at the same time.
It is a correctness tool, not a performance one.
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
#include <tuple>
#include <functional>
#include <vector>
#include <ucontext.h>
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
inline uint3 thread_idx, block_idx;
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
#define __align__(n) alignas(n)
// functions, so that they work anywhere a statement or expression does
#define __syncthreads() emu::barrier()
#define __syncwarp(...) emu::warp_barrier()

// ----------------------------------------------------------------------------
// the threads of a block as fibers

namespace emu {
enum FiberState { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
const size_t FIBER_STACK = 256 * 1024;
inline std::function<void()> kernel_body; // the kernel call of the current launch
inline int current_fiber;
void fiber_entry();

#if defined(__x86_64__)
// Switching fibers is on the hot path (a block of 256 threads is 256 switches
// even without a barrier), and glibc's swapcontext makes two system calls per
// switch to save the signal mask. So on x86-64 we switch ourselves: push the
// callee-saved registers, swap stack pointers, pop them (System V ABI). The
// MXCSR and x87 control words are not switched: no kernel of ours changes the
// rounding mode. (With shadow stacks, -fcf-protection and CET enforced, this
// hand-made return would fault; emu_build.sh builds without them.)
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");
struct Fiber {
    void *sp;
    FiberState state;
    char *stack;
};
inline void *scheduler_sp;
inline std::vector<Fiber> fibers; // one per thread of the block
// a new fiber's stack as emu_switch expects it: six registers, then the address
// it "returns" to (fiber_entry), then a dummy return address for fiber_entry
inline void fiber_start(Fiber &f) {
    uintptr_t top = ((uintptr_t)(f.stack + FIBER_STACK)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;
    *--sp = (void *)fiber_entry;
    for (int r = 0; r < 6; r++) { *--sp = nullptr; }
    f.sp = sp;
}
inline void switch_to_fiber(int t) { emu_switch(&scheduler_sp, fibers[t].sp); }
inline void switch_to_scheduler() { emu_switch(&fibers[current_fiber].sp, scheduler_sp); }
#else
// elsewhere: ucontext (correct everywhere, slower)
struct Fiber {
    ucontext_t context;
    FiberState state;
    char *stack;
};
inline ucontext_t scheduler_context;
inline std::vector<Fiber> fibers;
inline void fiber_start(Fiber &f) {
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = FIBER_STACK;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_entry, 0);
}
inline void switch_to_fiber(int t) { swapcontext(&scheduler_context, &fibers[t].context); }
inline void switch_to_scheduler() { swapcontext(&fibers[current_fiber].context, &scheduler_context); }
#endif

// a fiber runs the kernel once, then hands back to the scheduler for good
inline void fiber_entry() {
    kernel_body();
    fibers[current_fiber].state = DONE;
    switch_to_scheduler();
}
inline void park(FiberState why) {
    fibers[current_fiber].state = why;
    switch_to_scheduler();
}
inline void barrier() { park(AT_BLOCK_BARRIER); }
inline void warp_barrier() { park(AT_WARP_BARRIER); }

// Run one block: every runnable fiber until it parks or returns; then open the
// warp barriers whose live threads have all arrived, or else the block barrier
// once every live thread waits there; repeat until all have returned.
inline void run_block(int threads) {
    for (int t = 0; t < threads; t++) {
        Fiber &f = fibers[t];
        if (f.stack == nullptr) { f.stack = (char *)malloc(FIBER_STACK); }
        fiber_start(f);
        f.state = RUNNABLE;
    }
    for (;;) {
        for (int t = 0; t < threads; t++) {
            if (fibers[t].state != RUNNABLE) { continue; }
            current_fiber = t;
            thread_idx = {(unsigned)t % block_dim.x, ((unsigned)t / block_dim.x) % block_dim.y, (unsigned)t / (block_dim.x * block_dim.y)};
            switch_to_fiber(t);
        }
        int live = 0, at_block = 0, released = 0;
        for (int w = 0; w * 32 < threads; w++) {
            int members = 0, waiting = 0;
            for (int t = 32 * w; t < threads && t < 32 * w + 32; t++) {
                members += fibers[t].state != DONE;
                waiting += fibers[t].state == AT_WARP_BARRIER;
            }
            if (waiting > 0 && waiting == members) {
                for (int t = 32 * w; t < threads && t < 32 * w + 32; t++) {
                    if (fibers[t].state == AT_WARP_BARRIER) { fibers[t].state = RUNNABLE; } // not the returned ones
                }
                released = 1;
            }
        }
        if (released) { continue; }
        for (int t = 0; t < threads; t++) {
            live += fibers[t].state != DONE;
            at_block += fibers[t].state == AT_BLOCK_BARRIER;
        }
        if (live == 0) { return; }
        if (at_block != live) {
            fprintf(stderr, "Error: emulation: deadlock in block (%u,%u,%u): %d threads wait at __syncthreads, %d at a warp"
                    " barrier (shuffle or __syncwarp) that not all of their warp reach\n", block_idx.x, block_idx.y,
                    block_idx.z, at_block, live - at_block);
            exit(EXIT_FAILURE);
        }
        for (int t = 0; t < threads; t++) {
            if (fibers[t].state == AT_BLOCK_BARRIER) { fibers[t].state = RUNNABLE; }
        }
    }
}
}

// CUDA's integer min and max device functions
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
// reinterpreting a float's bits and back
inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, sizeof(u)); return u; }
inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, sizeof(x)); return x; }

// ----------------------------------------------------------------------------
// warp shuffles and atomics

namespace emu {
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
// one fiber runs at a time: a read-modify-write is atomic as it stands
template <typename T> inline T atomicAdd(T *address, T val) {
    T old = *address;
    *address += val;
    return old;
}
template <typename T> inline T atomicMax(T *address, T val) {
    T old = *address;
    if (val > old) { *address = val; }
    return old;
}

// ----------------------------------------------------------------------------
// launching a kernel

namespace emu {
// Stream capture (CUDA graphs): while a capture is open, launches, async copies and the
// cuBLAS stand-ins are recorded instead of run, and a graph launch replays them in order,
// reading and writing memory at replay time, as a GPU does. (One stream: captures do
// not nest, and a capture must not call a synchronous API, which a GPU refuses too.
// Not emulated: which stream work goes to (everything issued while capturing is
// captured), and pinned versus pageable host memory, which a GPU's capture tells apart.)
struct Graph { std::vector<std::function<void()>> ops; };
inline Graph *capture = nullptr; // the graph being captured, or none
inline void capture_forbidden(const char *what) {
    if (capture != nullptr) {
        fprintf(stderr, "Error: emulation: %s during a stream capture (a GPU refuses it too)\n", what);
        exit(EXIT_FAILURE);
    }
}
struct Launch {
    dim3 grid, block;
    size_t shared_bytes = 0;
    void *stream = nullptr;
    void execute(const std::function<void()> &body) const {
        int threads = (int)(block.x * block.y * block.z);
        if (threads < 1 || threads > 1024) {
            fprintf(stderr, "Error: emulation: a block of %d threads (CUDA allows 1 to 1024)\n", threads);
            exit(EXIT_FAILURE);
        }
        // the limits a real launch has: a GPU would refuse these with "invalid configuration"
        if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 || block.z > 64) {
            fprintf(stderr, "Error: emulation: grid (%u, %u, %u) or block (%u, %u, %u) outside CUDA's limits\n", grid.x, grid.y,
                    grid.z, block.x, block.y, block.z);
            exit(EXIT_FAILURE);
        }
        grid_dim = grid;
        block_dim = block;
        if ((int)fibers.size() < threads) { fibers.resize(threads, Fiber{}); }
        kernel_body = body;
        for (unsigned bz = 0; bz < grid.z; bz++) {
            for (unsigned by = 0; by < grid.y; by++) {
                for (unsigned bx = 0; bx < grid.x; bx++) {
                    block_idx = {bx, by, bz};
                    run_block(threads);
                }
            }
        }
    }
    template <typename... P, typename... A> void run(void (*kernel)(P...), A &&...args) const {
        // the arguments converted to the kernel's parameter types once, as a launch does
        std::function<void()> body = [kernel, params = std::tuple<P...>(args...)]() { std::apply(kernel, params); };
        if (capture != nullptr) {
            Launch launch = *this;
            capture->ops.push_back([launch, body]() { launch.execute(body); });
            return;
        }
        execute(body);
    }
};
}
// A library stand-in's first line: while capturing, record this very call (its arguments
// by value) to replay later, and report success now.
#define EMU_RECORD_IF_CAPTURING(call, success)                          \
    if (emu::capture != nullptr) {                                      \
        emu::capture->ops.push_back([=]() { (void)(call); });           \
        return success;                                                 \
    }

// ----------------------------------------------------------------------------
// the runtime API, as plain C

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "out of memory (emulation)"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { emu::capture_forbidden("cudaDeviceSynchronize"); return cudaSuccess; }
// Device memory is host memory. EMU_DEVICE_MIB=N makes the emulated device N MiB
// large, so that programs' out-of-memory paths can be tested: each block then
// carries its size in front of it, and the bytes in use are counted.
namespace emu {
inline size_t device_in_use = 0;
inline size_t device_limit() {
    static size_t limit = getenv("EMU_DEVICE_MIB") != nullptr ? (size_t)strtoull(getenv("EMU_DEVICE_MIB"), nullptr, 10) << 20 : 0;
    return limit;
}
constexpr size_t DEVICE_HEADER = 256; // (keeps the 256-byte alignment cudaMalloc promises)
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) {
    emu::capture_forbidden("cudaMalloc");
    *p = nullptr;
    if (emu::device_limit() != 0 && emu::device_in_use + bytes > emu::device_limit()) { return cudaErrorMemoryAllocation; }
    char *raw = (char *)aligned_alloc(emu::DEVICE_HEADER, emu::DEVICE_HEADER + (bytes + 255) / 256 * 256);
    if (raw == nullptr) { return cudaErrorMemoryAllocation; }
    memcpy(raw, &bytes, sizeof(bytes));
    emu::device_in_use += bytes;
    *p = (T *)(raw + emu::DEVICE_HEADER);
    return cudaSuccess;
}
inline cudaError_t cudaFree(void *p) {
    emu::capture_forbidden("cudaFree");
    if (p == nullptr) { return cudaSuccess; }
    char *raw = (char *)p - emu::DEVICE_HEADER;
    size_t bytes;
    memcpy(&bytes, raw, sizeof(bytes));
    emu::device_in_use -= bytes;
    free(raw);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
    emu::capture_forbidden("cudaMemcpy");
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    emu::capture_forbidden("cudaMemset");
    memset(dst, value, bytes);
    return cudaSuccess;
}
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
    emu::capture_forbidden("cudaMemGetInfo");
    if (emu::device_limit() != 0) {
        *total_bytes = emu::device_limit();
        *free_bytes = emu::device_limit() - emu::device_in_use;
        return cudaSuccess;
    }
    *total_bytes = emu_host_memory();
    *free_bytes = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE);
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
typedef void *cudaStream_t; // one stream, in effect: work runs as it is issued
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new int(0); return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete (int *)s; return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { emu::capture_forbidden("cudaStreamSynchronize"); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t = nullptr) {
    if (emu::capture != nullptr) {
        emu::capture->ops.push_back([=]() { memcpy(dst, src, bytes); });
        return cudaSuccess;
    }
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
// graphs: a captured list of operations, replayed in order
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
typedef emu::Graph *cudaGraph_t;
typedef emu::Graph *cudaGraphExec_t;
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    emu::capture_forbidden("cudaStreamBeginCapture");
    emu::capture = new emu::Graph();
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *graph) {
    if (emu::capture == nullptr) {
        fprintf(stderr, "Error: emulation: cudaStreamEndCapture without a capture\n");
        exit(EXIT_FAILURE);
    }
    *graph = emu::capture;
    emu::capture = nullptr;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long = 0) {
    *exec = new emu::Graph(*graph);
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
    emu::capture_forbidden("cudaGraphLaunch");
    for (auto &op : exec->ops) { op(); }
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
typedef double *cudaEvent_t; // an event is the CPU time at which it was recorded
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new double(0.0); return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, void * = nullptr) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *e = ts.tv_sec + 1e-9 * ts.tv_nsec;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { emu::capture_forbidden("cudaEventSynchronize"); return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)((*b - *a) * 1e3); return cudaSuccess; }
#endif
