/*
cuda_emu.h: run unmodified CUDA kernels on the CPU, to test GPU code without a GPU,
and catch what a GPU would get wrong (or what would only go wrong on some GPUs).

How a .cu file becomes a CPU program (dev/emu/emu_build.sh does it):
  1. the source is rewritten: each launch  kernel<<<grid, block, shared, stream>>>(args)
     becomes  emu::Launch{grid, block, shared, stream}.named("kernel").run(kernel, args)
     (C++ has no <<< >>>); __launch_bounds__(N) moves into the kernel's body as a check;
     extern __shared__ arrays point at the launch's dynamic shared memory; each
     __shared__ variable becomes a reference to an allocation of its own, made the first
     time its declaration runs (emu::shared_alloc);
  2. g++ compiles the result with this header force-included and without CUDA's headers.
     Three builds (emu_build.sh's first argument -m): plain (the default), asan
     (AddressSanitizer and UBSan over everything, each cudaMalloc its own exact-size
     allocation) and race (the race detector below: compiled with GCC's ThreadSanitizer
     instrumentation, whose callbacks we implement here instead of linking libtsan).

What the emulation does:
  - The blocks of a grid run one after another, in an order set by EMU_SCHEDULE: the
    threads of a block run as fibers (coroutines, each with its own stack) on one OS
    thread; a fiber runs until it reaches a barrier, a warp operation or its end, then
    another runs. Which one: EMU_SCHEDULE=ascending (threads and blocks in index order,
    the default), descending (reverse order: a thread that reads what a lower thread
    writes without a barrier between reads it before it is written), or random:SEED
    (blocks shuffled, and each time the next thread to run drawn at random). A kernel
    without a race gives bit-identical results under all of them; make test runs every
    emulated test under two and compares (dev/emu/run_schedules.sh).
  - threadIdx / blockIdx are set for each fiber as it resumes; blockDim / gridDim are
    global. Every __shared__ variable is filled with 0xFF bytes (NaN) at the start of every
    block, as a GPU gives each block fresh, uninitialised shared memory (not what the
    block before it left); so is the dynamic shared memory of a launch (its size is
    checked against the device's limits, with cudaFuncSetAttribute's opt-in).
  - __syncthreads() parks the thread until every thread of the block that has not
    returned waits there too; threads waiting at different __syncthreads (different
    lines: a divergent barrier) are an error, and so are threads that can never meet
    (deadlock).
  - Warp operations (__shfl*_sync, __syncwarp, __ballot_sync, __any_sync, __all_sync)
    honour their mask: every lane named must exist (a lane past blockDim is an error),
    must not have returned, and must reach the same operation (same line); the caller
    must be in the mask; a shuffle may only read a lane of the mask.
  - Atomics are read-modify-writes (one fiber runs at a time: atomic as they stand);
    the race detector knows them as atomics.
  - Device memory is host memory, each cudaMalloc its own block, filled with 0xFF bytes
    (NaN, and -1 as an integer) so that a read of memory never written shows; freed
    blocks stay poisoned and reserved for a while (use after free shows). cudaMemcpy and
    cudaMemset check their direction and that the range lies inside one live allocation;
    cudaFree, that it gets an allocation. EMU_DEVICE_MIB=N makes the device N MiB.
  - The race detector (race build): for every load and store of a kernel it records, per
    4-byte word of device and shared memory, who last wrote it and the last two threads
    that read it, with their barrier epochs; it reports two accesses of different threads
    to the same bytes, one a write, not both atomic, and not ordered: threads of
    different blocks are never ordered within a launch; threads of one block are ordered
    by a __syncthreads between them, lanes of a warp also by a __syncwarp (a shuffle
    orders no memory). It also reports accesses outside a device allocation (each has a
    red zone on both sides), of freed memory, outside a __shared__ array, and reads of
    shared memory that no thread of the block has written.
  - Kernels and copies run as they are issued, but on a stream created with
    cudaStreamNonBlocking: there they, and the NCCL stand-ins of include/nccl.h on any
    stream, run only when the program waits for that stream (an event, a synchronize), so
    a missing wait reads stale data or overwrites what the stream has yet to read
    (emu::Stream says more; not modelled: the legacy default stream's implicit waits for
    a blocking stream's deferred collectives). A stream capture records launches, async copies and the cuBLAS stand-ins'
    calls, and a graph launch replays them with the pointers they were captured with, as
    a GPU does.
  - The runtime API the project uses (cudaMalloc, cudaMemcpy, events, device properties,
    errors) has plain C stand-ins; include/cublas_v2.h and include/cublasLt.h do the same
    for cuBLAS (loops in double), include/cuda_bf16.h and cuda_fp16.h for the 16-bit types,
    include/nvtx3/nvToolsExt.h for NVTX's ranges (calls that do nothing), and
    include/nccl.h for NCCL's collectives between the processes of an MPI run (each
    process one emulated GPU, the data moved by MPI).
  - EMU_DIGEST_FILE=F: at exit, append a hash of every byte copied from the device to the
    host to F, so that two runs under different schedules can be compared.
The tensor cores' warp matrix functions (nvcuda::wmma) have a stand-in, include/mma.h: each
lane holds a fragment's whole tile, and the results match to the order of fp32 sums.
What it cannot do: mma.sync and other inline PTX, streams running in parallel,
timing (events measure CPU time), memory-ordering subtleties between blocks (fences), and
anything that relies on warps running in lock-step without __syncwarp. It is a
correctness tool, not a performance one.
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
#include <map>
#include <deque>
#include <ucontext.h>
#include <unistd.h>
#include <dlfcn.h>
#include <omp.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
// programs leave their device memory to the end of the process, as they may
extern "C" const char *__asan_default_options() { return "detect_leaks=0"; }
#endif
// the emulator's own code is never instrumented by the race build (it would record itself),
// and its scheduler not by the asan build either (it would only be slower)
#define EMU_NO_RACE __attribute__((no_sanitize_thread))
#define EMU_INTERNAL __attribute__((no_sanitize_thread, no_sanitize("address", "undefined")))

// ----------------------------------------------------------------------------
// built-in variables and qualifiers

struct uint3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; }; // (16-byte loads and stores, as CUDA's vector type)
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
// (emu_build.sh rewrites __shared__ declarations into emu::shared_alloc; one it cannot
// parse stays a plain static: shared by all blocks, not poisoned, not checked)
#define __shared__ static
#define __launch_bounds__(...) // (emu_build.sh turns it into emu::check_launch_bounds in the body)
#define __align__(n) alignas(n)
#define __syncthreads() emu::barrier(__LINE__)
#define __syncthreads_count(p) emu::barrier(__LINE__, (p) != 0)
#define __syncthreads_and(p) (emu::barrier(__LINE__, (p) != 0) == emu::block.barrier_arrived)
#define __syncthreads_or(p) (emu::barrier(__LINE__, (p) != 0) != 0)
#define __activemask() emu::active_mask()
#define __syncwarp(...) emu::At{__LINE__}.syncwarp(__VA_ARGS__)
#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)
constexpr int warpSize = 32;

// ----------------------------------------------------------------------------
// errors, and how the emulator is asked to run

namespace emu {
inline const char *kernel_name = "(no kernel)"; // of the launch running now
inline int library_calls = 0; // > 0 while a cuBLAS stand-in runs: host code that may touch device memory
struct LibraryCall {
    EMU_NO_RACE LibraryCall() { library_calls++; }
    EMU_NO_RACE ~LibraryCall() { library_calls--; }
};
inline uint32_t launch_id = 0;                   // counts launches (the race detector's clock)
[[noreturn]] inline void fail() {
    fflush(stdout);
    exit(EXIT_FAILURE);
}
// one line that says where (kernel, block, thread), then what
#define EMU_ERROR(...)                                                                                                   \
    do {                                                                                                                 \
        fprintf(stderr, "Error: emulation: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", emu::kernel_name,          \
                emu::block_idx.x, emu::block_idx.y, emu::block_idx.z, emu::thread_idx.x, emu::thread_idx.y, emu::thread_idx.z); \
        fprintf(stderr, __VA_ARGS__);                                                                                    \
        fprintf(stderr, "\n");                                                                                           \
        emu::fail();                                                                                                     \
    } while (0)
#define EMU_HOST_ERROR(...)                                                                                              \
    do {                                                                                                                 \
        fprintf(stderr, "Error: emulation: ");                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                                                    \
        fprintf(stderr, "\n");                                                                                           \
        emu::fail();                                                                                                     \
    } while (0)

enum Order { ASCENDING, DESCENDING, RANDOM };
struct Schedule {
    Order order = ASCENDING;
    uint64_t seed = 0;
};
inline const Schedule &schedule() {
    static const Schedule s = [] {
        Schedule r;
        const char *e = getenv("EMU_SCHEDULE");
        if (e == nullptr || *e == '\0' || strcmp(e, "ascending") == 0) { return r; }
        if (strcmp(e, "descending") == 0) {
            r.order = DESCENDING;
        } else if (strncmp(e, "random", 6) == 0 && (e[6] == '\0' || e[6] == ':')) {
            r.order = RANDOM;
            r.seed = e[6] == ':' ? strtoull(e + 7, nullptr, 10) : 1;
        } else {
            EMU_HOST_ERROR("EMU_SCHEDULE=%s is none of ascending, descending, random, random:SEED", e);
        }
        return r;
    }();
    return s;
}
// SplitMix64: the random schedule's numbers
inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}

// ----------------------------------------------------------------------------
// the threads of a block as fibers

namespace emu {
enum FiberState { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_OP, DONE };
struct WarpOp;
const size_t FIBER_STACK = 256 * 1024;
inline std::function<void()> kernel_body; // the kernel call of the current launch
inline int current_fiber;
void fiber_entry();

#if defined(__x86_64__)
// Switching fibers is on the hot path (a block of 256 threads is 256 switches even
// without a barrier), and glibc's swapcontext makes two system calls per switch to save
// the signal mask. So on x86-64 we switch ourselves: push the callee-saved registers,
// swap stack pointers, pop them (System V ABI). The MXCSR and x87 control words are not
// switched: no kernel of ours changes the rounding mode. (With shadow stacks,
// -fcf-protection and CET enforced, this hand-made return would fault; emu_build.sh
// builds without them.)
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");
struct Fiber {
    void *sp;
    char *stack;
    FiberState state;
    int line;     // the __syncthreads it waits at
    WarpOp *op;   // the warp operation it waits at, or whose result it has yet to read
};
inline void *scheduler_sp;
inline Fiber fibers[1024]; // one per thread of the block
// a new fiber's stack as emu_switch expects it: six registers, then the address it
// "returns" to (fiber_entry), then a dummy return address for fiber_entry
EMU_INTERNAL inline void fiber_start(Fiber &f) {
    uintptr_t top = ((uintptr_t)(f.stack + FIBER_STACK)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;
    *--sp = (void *)fiber_entry;
    for (int r = 0; r < 6; r++) { *--sp = nullptr; }
    f.sp = sp;
}
inline void raw_switch_to_fiber(int t) { emu_switch(&scheduler_sp, fibers[t].sp); }
inline void raw_switch_to_scheduler() { emu_switch(&fibers[current_fiber].sp, scheduler_sp); }
#else
// elsewhere: ucontext (correct everywhere, slower)
struct Fiber {
    ucontext_t context;
    char *stack;
    FiberState state;
    int line;
    WarpOp *op;
};
inline ucontext_t scheduler_context;
inline Fiber fibers[1024];
EMU_INTERNAL inline void fiber_start(Fiber &f) {
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = FIBER_STACK;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_entry, 0);
}
inline void raw_switch_to_fiber(int t) { swapcontext(&scheduler_context, &fibers[t].context); }
inline void raw_switch_to_scheduler() { swapcontext(&fibers[current_fiber].context, &scheduler_context); }
#endif

#if defined(EMU_ASAN)
// AddressSanitizer must know which stack is in use, or it takes a fiber's frames for
// overflows of the scheduler's stack (its documented fiber-switch annotations)
inline void *asan_fake_stack;
inline const void *scheduler_stack_bottom;
inline size_t scheduler_stack_size;
inline void switch_to_fiber(int t) {
    __sanitizer_start_switch_fiber(&asan_fake_stack, fibers[t].stack, FIBER_STACK);
    raw_switch_to_fiber(t);
    __sanitizer_finish_switch_fiber(asan_fake_stack, nullptr, nullptr);
}
inline void switch_to_scheduler(bool exiting = false) {
    __sanitizer_start_switch_fiber(exiting ? nullptr : &asan_fake_stack, scheduler_stack_bottom, scheduler_stack_size);
    raw_switch_to_scheduler();
    __sanitizer_finish_switch_fiber(asan_fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
}
inline void fiber_entered() { __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size); }
#else
inline void switch_to_fiber(int t) { raw_switch_to_fiber(t); }
inline void switch_to_scheduler(bool = false) { raw_switch_to_scheduler(); }
inline void fiber_entered() {}
#endif

// A warp operation (shuffle, vote, __syncwarp) in flight: the lanes of its mask post
// their values as they arrive; when the last one arrives all of them go on and read.
// Lanes of the mask that have returned count as arrived (sm_70 and later: a warp
// operation waits for the lanes of its mask that have not exited), with a 0 for a vote;
// a shuffle that reads one is an error.
struct WarpOp {
    unsigned mask, gone; // gone: lanes of the mask that have returned
    int line, arrived, needed, unread;
    const char *what; // (a string literal: compared as a pointer)
    unsigned char values[32][16];
};

// The block being run: its threads' states, the barrier, the warps' operations, the
// epochs the race detector orders accesses by, and the queue of runnable threads. (Plain
// arrays: this is the emulator's hot path, and the asan build calls std::vector's
// instrumented methods instead of inlining them.)
const int MAX_PENDING = 4; // warp operations with different masks waiting at once, per warp
struct Block {
    int threads, live, at_barrier, barrier_line;
    int barrier_count, barrier_result, barrier_arrived; // __syncthreads_count/and/or: predicates so far, and of the last barrier
    uint32_t epoch;                        // __syncthreads passed by the block
    uint32_t warp_epoch[32];               // __syncwarps passed by each warp
    unsigned sync_mask[32][64];            // the masks of each warp's last 64 __syncwarps, by epoch % 64
    int warp_lanes[32];                    // threads in each warp (the last may be partial)
    WarpOp *pending[32][MAX_PENDING];      // each warp's operations waiting for lanes
    int npending[32];
    int queue[1024];                       // runnable threads, in the order they will run: a ring
    unsigned head, tail;                   // (a thread is in it at most once)
    uint64_t rng;
    uint32_t linear;                       // the block's index in the grid, linearised
};
inline Block block;

inline void race_stamp(); // the race detector learns who runs now (defined below; empty without it)
inline void kernel_mode(int on);

EMU_INTERNAL inline void make_runnable(int t) {
    fibers[t].state = RUNNABLE;
    block.queue[block.tail++ % 1024] = t;
}
// the threads in [first, last) that are in state `from`, made runnable in the schedule's order
EMU_INTERNAL inline void release_all(FiberState from, int first, int last, unsigned mask = 0xffffffffu) {
    bool down = schedule().order == DESCENDING;
    for (int k = 0; k < last - first; k++) {
        int t = down ? last - 1 - k : first + k;
        if (fibers[t].state == from && (mask >> ((t - first) & 31) & 1u)) { make_runnable(t); }
    }
}
EMU_INTERNAL inline void park(FiberState why) {
    fibers[current_fiber].state = why;
    switch_to_scheduler();
    race_stamp();
}

// a fiber runs the kernel once, then hands back to the scheduler for good
inline void thread_exited();
inline void fiber_entry() {
    fiber_entered();
    kernel_body();
    thread_exited();
    switch_to_scheduler(true);
}

EMU_INTERNAL inline void barrier_open() {
    block.barrier_result = block.barrier_count;
    block.barrier_arrived = block.at_barrier;
    block.barrier_count = 0;
    block.at_barrier = 0;
    block.epoch++;
    release_all(AT_BLOCK_BARRIER, 0, block.threads);
}
// returns how many threads arrived with a non-zero predicate (__syncthreads_count); read
// before the next barrier can open, which needs this thread too
EMU_INTERNAL inline int barrier(int line, int predicate = 0) {
    block.barrier_count += predicate;
    if (block.at_barrier == 0) {
        block.barrier_line = line;
    } else if (line != block.barrier_line) {
        EMU_ERROR("__syncthreads at line %d, while %d thread(s) of the block wait at the __syncthreads at line %d "
                  "(a divergent barrier: every thread must reach the same one)", line, block.at_barrier, block.barrier_line);
    }
    fibers[current_fiber].line = line;
    if (++block.at_barrier == block.live) { // the last to arrive opens it and goes on
        barrier_open();
        race_stamp();
        return block.barrier_result;
    }
    park(AT_BLOCK_BARRIER);
    return block.barrier_result;
}

EMU_INTERNAL inline void thread_exited() {
    int t = current_fiber, w = t / 32, lane = t % 32;
    fibers[t].state = DONE;
    block.live--;
    for (int i = 0; i < block.npending[w]; i++) { // an operation waiting for this lane waits no more
        WarpOp *op = block.pending[w][i];
        if (op->mask >> lane & 1u) {
            op->gone |= 1u << lane;
            memset(op->values[lane], 0, sizeof(op->values[lane]));
            if (op->arrived == --op->needed) {
                block.pending[w][i--] = block.pending[w][--block.npending[w]];
                op->unread = op->arrived;
                release_all(AT_WARP_OP, 32 * w, 32 * w + block.warp_lanes[w], op->mask);
            }
        }
    }
    if (block.at_barrier > 0 && block.at_barrier == block.live) { barrier_open(); }
}

inline WarpOp *free_ops[1024]; // (recycled: a kernel may do millions; at most one a lane is in use)
inline int nfree_ops = 0;
EMU_INTERNAL inline WarpOp *new_warp_op() { return nfree_ops > 0 ? free_ops[--nfree_ops] : new WarpOp; }
// Arrive at a warp operation with mask `mask`, posting `bytes` of value; returns the
// operation once every lane of the mask has arrived (the caller reads, then calls done).
EMU_INTERNAL inline WarpOp *warp_arrive(unsigned mask, const char *what, int line, const void *value, size_t bytes) {
    int t = current_fiber, w = t / 32, lane = t % 32;
    if (!(mask >> lane & 1u)) { EMU_ERROR("%s at line %d with mask 0x%08x, which does not include the calling lane %d", what, line, mask, lane); }
    unsigned exists = block.warp_lanes[w] == 32 ? 0xffffffffu : (1u << block.warp_lanes[w]) - 1u;
    if (mask & ~exists) {
        EMU_ERROR("%s at line %d with mask 0x%08x, but warp %d has only %d threads (a lane past blockDim does not exist: "
                  "on a GPU it hangs or reads garbage)", what, line, mask, w, block.warp_lanes[w]);
    }
    WarpOp *op = nullptr;
    for (int i = 0; i < block.npending[w]; i++) {
        WarpOp *p = block.pending[w][i];
        if (p->mask == mask) {
            op = p;
        } else if (p->mask & mask) {
            EMU_ERROR("%s at line %d with mask 0x%08x, while lanes wait in %s at line %d with mask 0x%08x: lanes of a warp "
                      "must take part in the same operations", what, line, mask, p->what, p->line, p->mask);
        }
    }
    if (op == nullptr) {
        op = new_warp_op();
        op->mask = mask;
        op->gone = 0;
        for (int j = 0; j < block.warp_lanes[w]; j++) {
            if ((mask >> j & 1u) && fibers[32 * w + j].state == DONE) {
                op->gone |= 1u << j;
                memset(op->values[j], 0, sizeof(op->values[j]));
            }
        }
        op->line = line;
        op->arrived = 0;
        op->needed = __builtin_popcount(mask & ~op->gone);
        op->unread = 0;
        op->what = what;
        if (block.npending[w] == MAX_PENDING) { EMU_ERROR("%s at line %d: more than %d warp operations with different masks at once in one warp (the emulator's limit)", what, line, MAX_PENDING); }
        block.pending[w][block.npending[w]++] = op;
    } else if (op->what != what) { // (at another line is fine: sm_70 and later match them)
        EMU_ERROR("%s at line %d, while lanes of mask 0x%08x wait in %s at line %d (different warp operations)", what, line,
                  mask, op->what, op->line);
    }
    if (bytes > 0) { memcpy(op->values[lane], value, bytes); }
    fibers[t].op = op;
    if (++op->arrived < op->needed) {
        park(AT_WARP_OP);
        return op;
    }
    // the last lane: everyone goes on
    for (int i = 0; i < block.npending[w]; i++) {
        if (block.pending[w][i] == op) { block.pending[w][i] = block.pending[w][--block.npending[w]]; break; }
    }
    op->unread = op->arrived;
    release_all(AT_WARP_OP, 32 * w, 32 * w + block.warp_lanes[w], mask);
    return op;
}
EMU_INTERNAL inline void warp_done(WarpOp *op) {
    fibers[current_fiber].op = nullptr;
    if (--op->unread == 0) { free_ops[nfree_ops++] = op; }
}
EMU_INTERNAL inline void syncwarp(int line, unsigned mask = 0xffffffffu) {
    int w = current_fiber / 32;
    WarpOp *op = warp_arrive(mask, "__syncwarp", line, nullptr, 0);
    if (op->unread == op->arrived) { // (the first lane to go on: once per __syncwarp)
        block.warp_epoch[w]++;
        block.sync_mask[w][block.warp_epoch[w] % 64] = mask;
    }
    warp_done(op);
    race_stamp();
}

// Run one block: every thread in the schedule's order until all have returned
inline void poison_shared();
EMU_INTERNAL inline void run_block(int threads) {
    block.threads = threads;
    block.live = threads;
    block.at_barrier = 0;
    block.barrier_count = 0;
    block.epoch = 0;
    for (int w = 0; w * 32 < threads; w++) {
        block.warp_epoch[w] = 0;
        block.warp_lanes[w] = threads - 32 * w < 32 ? threads - 32 * w : 32;
        block.npending[w] = 0;
    }
    block.head = block.tail = 0;
    block.rng = mix64(schedule().seed ^ ((uint64_t)launch_id << 32) ^ block.linear);
    for (int t = 0; t < threads; t++) {
        Fiber &f = fibers[t];
        if (f.stack == nullptr) { f.stack = (char *)malloc(FIBER_STACK); }
        fiber_start(f);
        f.op = nullptr;
        f.line = 0;
    }
    for (int k = 0; k < threads; k++) { make_runnable(schedule().order == DESCENDING ? threads - 1 - k : k); }
    poison_shared();
    bool random = schedule().order == RANDOM;
    while (block.head != block.tail) {
        if (random) { // any runnable thread may go next
            block.rng = mix64(block.rng);
            unsigned pick = block.head + (unsigned)(block.rng % (block.tail - block.head));
            std::swap(block.queue[block.head % 1024], block.queue[pick % 1024]);
        }
        int t = block.queue[block.head++ % 1024];
        current_fiber = t;
        thread_idx = {(unsigned)t % block_dim.x, ((unsigned)t / block_dim.x) % block_dim.y, (unsigned)t / (block_dim.x * block_dim.y)};
        race_stamp();
        kernel_mode(1);
        switch_to_fiber(t);
        kernel_mode(0);
    }
    if (block.live > 0) { // nobody can go on: who waits where
        int at_op = 0;
        for (int t = 0; t < threads; t++) { at_op += fibers[t].state == AT_WARP_OP; }
        fprintf(stderr, "Error: emulation: kernel %s, block (%u,%u,%u): deadlock: %d thread(s) wait at the __syncthreads at line %d, "
                "%d at warp operations that not all lanes of their mask reach:", kernel_name, block_idx.x, block_idx.y,
                block_idx.z, block.at_barrier, block.barrier_line, at_op);
        for (int w = 0; w * 32 < threads; w++) {
            for (int i = 0; i < block.npending[w]; i++) {
                WarpOp *op = block.pending[w][i];
                fprintf(stderr, " warp %d: %s at line %d, mask 0x%08x, %d arrived;", w, op->what, op->line, op->mask, op->arrived);
            }
        }
        fprintf(stderr, "\n");
        fail();
    }
}
}

// CUDA's integer min and max device functions
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
// reinterpreting a float's bits and back
inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, sizeof(u)); return u; }
inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, sizeof(x)); return x; }
inline int __float_as_int(float x) { int u; memcpy(&u, &x, sizeof(u)); return u; }
inline float __int_as_float(int u) { float x; memcpy(&x, &u, sizeof(x)); return x; }
template <typename T> inline T __ldg(const T *p) { return *p; }
// round-to-nearest float arithmetic that is never fused into a multiply-add (this build
// never fuses: g++ -std=c++17 does not contract)
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }

// ----------------------------------------------------------------------------
// warp shuffles and votes

namespace emu {
// lane `src` of the calling lane's warp, as a shuffle reads it: it must be in the mask
template <typename T> EMU_INTERNAL inline T shuffle(unsigned mask, T v, int src, const char *what, int line) {
    static_assert(sizeof(T) <= 16, "the emulator shuffles values of up to 16 bytes");
    WarpOp *op = warp_arrive(mask, what, line, &v, sizeof(T));
    int lane = current_fiber % 32;
    if (src != lane && !(mask >> src & 1u)) {
        EMU_ERROR("%s at line %d: lane %d reads lane %d, which is not in the mask 0x%08x (undefined on a GPU)", what, line,
                  lane, src, mask);
    }
    if (op->gone >> src & 1u) {
        EMU_ERROR("%s at line %d: lane %d reads lane %d, which has returned (undefined on a GPU)", what, line, lane, src);
    }
    T r;
    memcpy(&r, op->values[src], sizeof(T));
    warp_done(op);
    return r;
}
// a vote: the predicates of the mask's lanes as bits
EMU_INTERNAL inline unsigned vote(unsigned mask, int predicate, const char *what, int line) {
    int p = predicate != 0;
    WarpOp *op = warp_arrive(mask, what, line, &p, sizeof(p));
    unsigned bits = 0;
    for (int j = 0; j < 32; j++) {
        int q;
        memcpy(&q, op->values[j], sizeof(q));
        if ((mask >> j & 1u) && q) { bits |= 1u << j; }
    }
    warp_done(op);
    return bits;
}
inline int lane_id() { return current_fiber % 32; }
// the lanes of the caller's warp that have not returned
inline unsigned active_mask() {
    int w = current_fiber / 32;
    unsigned m = 0;
    for (int j = 0; j < block.warp_lanes[w]; j++) { m |= (unsigned)(fibers[32 * w + j].state != DONE) << j; }
    return m;
}
}
// The warp operations are macros, so that they know their line: each becomes a call on
// emu::At{__LINE__}, whose member functions take CUDA's arguments, defaults included.
// (width: the lanes form groups of `width`; a source outside the caller's group gives
// the caller's own value, as CUDA's documentation says)
#define __shfl_sync(...) emu::At{__LINE__}.shfl(__VA_ARGS__)
#define __shfl_down_sync(...) emu::At{__LINE__}.shfl_down(__VA_ARGS__)
#define __shfl_up_sync(...) emu::At{__LINE__}.shfl_up(__VA_ARGS__)
#define __shfl_xor_sync(...) emu::At{__LINE__}.shfl_xor(__VA_ARGS__)
#define __ballot_sync(...) emu::At{__LINE__}.ballot(__VA_ARGS__)
#define __any_sync(...) emu::At{__LINE__}.any(__VA_ARGS__)
#define __all_sync(...) emu::At{__LINE__}.all(__VA_ARGS__)
namespace emu {
struct At {
    int line;
    template <typename T> T shfl(unsigned mask, T v, int src, int width = 32) const {
        int lane = lane_id();
        return shuffle(mask, v, lane - lane % width + (src % width + width) % width, "__shfl_sync", line);
    }
    template <typename T> T shfl_down(unsigned mask, T v, unsigned delta, int width = 32) const {
        int lane = lane_id();
        return shuffle(mask, v, lane % width + (int)delta < width ? lane + (int)delta : lane, "__shfl_down_sync", line);
    }
    template <typename T> T shfl_up(unsigned mask, T v, unsigned delta, int width = 32) const {
        int lane = lane_id();
        return shuffle(mask, v, lane % width - (int)delta >= 0 ? lane - (int)delta : lane, "__shfl_up_sync", line);
    }
    template <typename T> T shfl_xor(unsigned mask, T v, int lane_mask, int width = 32) const {
        int lane = lane_id(), src = lane ^ lane_mask;
        return shuffle(mask, v, src >= 32 || src / width > lane / width ? lane : src, "__shfl_xor_sync", line);
    }
    unsigned ballot(unsigned mask, int p) const { return vote(mask, p, "__ballot_sync", line); }
    int any(unsigned mask, int p) const { return vote(mask, p, "__any_sync", line) != 0u; }
    int all(unsigned mask, int p) const { return vote(mask, p, "__all_sync", line) == mask; }
    void syncwarp(unsigned mask = 0xffffffffu) const { emu::syncwarp(line, mask); }
};
}

// ----------------------------------------------------------------------------
// device memory: a registry of allocations, poisoned when made and when freed

namespace emu {
const size_t RED_ZONE = 1024; // (race build) bytes on each side of an allocation that no access may touch
struct Cell;
struct Alloc {
    char *base;       // what cudaMalloc returned
    size_t size;      // bytes asked for
    char *raw;        // what we got from malloc
    size_t span;      // from raw: red zone + size rounded up + red zone (the race build), or the block
    int freed;        // freed (kept for a while, poisoned, to catch use after free)
    int shared;       // not device memory: a __shared__ variable, or a launch's dynamic shared memory
    const char *name; // (shared memory: the variable's name)
    Cell **pages;     // the race detector's records, a page of them per 4 KiB, made on first use
    size_t npages;
};
inline std::map<uintptr_t, Alloc> &allocations() { // by raw start
    // (never destroyed: the race build's checks look allocations up until the process ends)
    static std::map<uintptr_t, Alloc> &m = *new std::map<uintptr_t, Alloc>;
    return m;
}
// In the plain and race builds every allocation's span starts on 256 bytes and is a
// multiple of 256 long, so each 256-byte granule of the address space belongs to one
// allocation or to none: a cache by granule answers most lookups (the race detector makes
// one per load and store). (A hit is checked against the span all the same: the asan
// build's allocations have their exact sizes.)
const size_t GRANULE_CACHE = 1 << 16;
struct GranuleEntry { uintptr_t granule; Alloc *alloc; };
inline GranuleEntry granule_cache[GRANULE_CACHE];
inline void forget_cached() { memset(granule_cache, 0, sizeof(granule_cache)); }
// the allocation (live or freed) whose span holds p, or null
EMU_NO_RACE inline Alloc *find_alloc(const void *p) {
    uintptr_t a = (uintptr_t)p, g = (a >> 8) + 1; // (+1: granule 0 would look cached)
    GranuleEntry &e = granule_cache[(g ^ (g >> 16)) & (GRANULE_CACHE - 1)];
    if (e.granule == g && (e.alloc == nullptr || a - (uintptr_t)e.alloc->raw < e.alloc->span)) { return e.alloc; }
    auto &m = allocations();
    auto it = m.upper_bound(a);
    Alloc *found = nullptr;
    if (it != m.begin()) {
        --it;
        if (a < it->first + it->second.span) { found = &it->second; }
    }
#if defined(EMU_ASAN)
    if (found == nullptr) { return nullptr; } // (exact sizes: a granule may hold the end of one and nothing else)
#endif
    e = GranuleEntry{g, found};
    return found;
}
inline size_t device_in_use = 0;
inline size_t device_limit() {
    static size_t limit = getenv("EMU_DEVICE_MIB") != nullptr ? (size_t)strtoull(getenv("EMU_DEVICE_MIB"), nullptr, 10) << 20 : 0;
    return limit;
}
inline std::deque<uintptr_t> quarantine; // freed allocations not yet given back, oldest first
inline size_t quarantine_bytes = 0;
const size_t QUARANTINE_LIMIT = 256u << 20;
inline void race_forget(Alloc &a);

EMU_NO_RACE inline void poison(void *p, size_t bytes) { memset(p, 0xff, bytes); }
inline Alloc *register_alloc(char *base, size_t size, char *raw, size_t span, int shared) {
    Alloc &a = allocations()[(uintptr_t)raw];
    a = Alloc{base, size, raw, span, 0, shared, nullptr, nullptr, 0};
    forget_cached();
    return &a;
}
inline void release_alloc(uintptr_t raw) {
    auto &m = allocations();
    auto it = m.find(raw);
    race_forget(it->second);
    free(it->second.raw);
    m.erase(it);
    forget_cached();
}

// checks of the runtime API's pointer arguments: [p, p + bytes) inside one live
// device allocation (want_device), or not in device memory at all
// (p as an integer: GCC would take a const void * for a read of the memory, which a
// destination has not had written yet)
inline void check_range(const char *call, const char *which, uintptr_t addr, size_t bytes, int want_device) {
    if (bytes == 0) { return; }
    const char *p = (const char *)addr;
    Alloc *a = find_alloc(p);
    int in_device = a != nullptr && !a->shared && (char *)p >= a->base && (char *)p < a->base + (a->size > 0 ? a->size : 1);
    if (!want_device) {
        if (in_device) { EMU_HOST_ERROR("%s: the %s %p is device memory, but the copy's kind says host memory", call, which, p); }
        return;
    }
    if (a == nullptr || a->shared || (char *)p < a->base || (char *)p >= a->base + a->size + (a->size == 0)) {
        EMU_HOST_ERROR("%s: the %s %p is not device memory (not from cudaMalloc%s)", call, which, p,
                       a != nullptr && !a->shared ? ": it lies in the red zone of an allocation" : "");
    }
    if (a->freed) { EMU_HOST_ERROR("%s: the %s %p is device memory that was freed", call, which, p); }
    size_t off = (size_t)((char *)p - a->base);
    if (bytes > a->size - off) {
        EMU_HOST_ERROR("%s: %zu bytes at byte %zu of a device allocation of %zu bytes: %zu bytes past its end", call, bytes, off,
                       a->size, bytes - (a->size - off));
    }
}
}

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidDevice = 101 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory (emulation)"
         : e == cudaErrorInvalidDevice ? "invalid device ordinal (emulation: EMU_DEVICES)" : "invalid argument (emulation)";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }

namespace emu {
inline void capture_forbidden(const char *what);
inline uint64_t digest = 0xcbf29ce484222325ull; // FNV-1a of every byte copied to the host
inline size_t digest_bytes = 0;
inline void digest_add(const void *p, size_t bytes) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < bytes; i++) { digest = (digest ^ b[i]) * 0x100000001b3ull; }
    digest_bytes += bytes;
}
inline void digest_write() {
    const char *path = getenv("EMU_DIGEST_FILE");
    FILE *f = path != nullptr ? fopen(path, "a") : nullptr;
    if (f == nullptr) { return; }
    char exe[4096] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 1] = '\0';
    fprintf(f, "%s %016llx %zu\n", strrchr(exe, '/') != nullptr ? strrchr(exe, '/') + 1 : exe, (unsigned long long)digest, digest_bytes);
    fclose(f);
}
inline int digest_registered = [] { return getenv("EMU_DIGEST_FILE") != nullptr ? atexit(digest_write) : 0; }();
// the checks and the copy of cudaMemcpy(Async)
inline void memcpy_checked(const char *call, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (kind == cudaMemcpyDefault) { // either side may be either; device ranges must still fit
        if (find_alloc(dst) != nullptr) { check_range(call, "destination", (uintptr_t)dst, bytes, 1); }
        if (find_alloc(src) != nullptr) { check_range(call, "source", (uintptr_t)src, bytes, 1); }
    } else if ((int)kind < 0 || (int)kind > 4) {
        EMU_HOST_ERROR("%s: %d is not a cudaMemcpyKind", call, (int)kind);
    } else {
        check_range(call, "destination", (uintptr_t)dst, bytes, kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice);
        check_range(call, "source", (uintptr_t)src, bytes, kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
    }
    if (bytes > 0) { memmove(dst, src, bytes); }
    if (kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyDefault && find_alloc(src) != nullptr && find_alloc(dst) == nullptr)) {
        digest_add(dst, bytes);
    }
}
}

namespace emu {
// Streams. Work on the default stream and on streams created blocking (cudaStreamCreate)
// runs as it is issued (kernels, copies; a blocking stream's deferred work first). A
// stream's deferred work (the NCCL stand-ins of include/nccl.h on any stream, and every
// kernel and async copy on a stream created with cudaStreamNonBlocking, which CUDA never
// orders against the default stream) waits in its queue until the program waits for it:
// cudaStreamWaitEvent on an event recorded after it, cudaStreamSynchronize,
// cudaEventSynchronize, cudaDeviceSynchronize. So a consumer that forgets to wait reads what
// was there before, as it may on a GPU, and a producer that overwrites what the stream has
// yet to read shows (include/nccl.h's race check). Each stream counts the work issued to it; an event
// remembers its stream's count when recorded, and a stream that waits on an event of the
// default stream remembers how much of the default stream's work it has waited for
// (waited_default): a kernel on a non-blocking stream, and include/nccl.h's collectives on
// any stream, are refused when their stream has not waited for all of it, since on a GPU
// they could read what the default stream is still writing. (Strict: a kernel that reads
// only its own stream's results would not need to wait.)
struct Stream {
    bool nonblocking = false;    // created with cudaStreamNonBlocking: all its work is deferred
    uint64_t count = 0;          // work issued to it
    uint64_t waited_default = 0; // the default stream's work it has waited for (by events)
    std::deque<std::pair<uint64_t, std::function<void()>>> deferred; // (its count, the work) not run yet
};
inline uint64_t default_count = 0; // work issued to the default stream
inline std::vector<Stream *> &streams() { static std::vector<Stream *> s; return s; }
// run a stream's deferred work, in order, up to its work number `upto`
inline void stream_run(void *stream, uint64_t upto = UINT64_MAX) {
    if (stream == nullptr) { return; }
    Stream *s = (Stream *)stream;
    while (!s->deferred.empty() && s->deferred.front().first <= upto) {
        std::function<void()> work = std::move(s->deferred.front().second);
        s->deferred.pop_front();
        work();
    }
}
inline bool deferring(void *stream) { return stream != nullptr && ((Stream *)stream)->nonblocking; }
// work issued now on `stream`, to run now: what the stream deferred before it runs first
inline void issued(void *stream) {
    if (stream == nullptr) { default_count++; return; }
    stream_run(stream);
    ((Stream *)stream)->count++;
}
// work issued now on `stream` that runs when the program next waits for the stream
inline void defer(void *stream, std::function<void()> work) {
    if (stream == nullptr) { default_count++; work(); return; }
    Stream *s = (Stream *)stream;
    s->deferred.emplace_back(++s->count, std::move(work));
}
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::capture_forbidden("cudaDeviceSynchronize");
    for (void *s : std::vector<emu::Stream *>(emu::streams())) { emu::stream_run(s); }
    return cudaSuccess;
}
// Device memory is host memory: see the file's header. The plain build keeps CUDA's
// 256-byte alignment and rounds the block up to it (as a GPU's allocator does); the
// asan build allocates exactly the bytes asked for, so that AddressSanitizer sees a
// byte past the end; the race build puts a red zone on each side, for its own checks.
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) {
    emu::capture_forbidden("cudaMalloc");
    *p = nullptr;
    if (emu::device_limit() != 0 && emu::device_in_use + bytes > emu::device_limit()) { return cudaErrorMemoryAllocation; }
#if defined(EMU_ASAN)
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, bytes > 0 ? bytes : 1) != 0) { return cudaErrorMemoryAllocation; }
    char *base = (char *)raw;
    size_t span = bytes > 0 ? bytes : 1;
#elif defined(EMU_RACECHECK)
    size_t span = emu::RED_ZONE + (bytes + 255) / 256 * 256 + emu::RED_ZONE;
    char *raw = (char *)aligned_alloc(256, span), *base = raw + emu::RED_ZONE;
    if (raw == nullptr) { return cudaErrorMemoryAllocation; }
#else
    size_t span = bytes > 0 ? (bytes + 255) / 256 * 256 : 256;
    char *raw = (char *)aligned_alloc(256, span), *base = raw;
    if (raw == nullptr) { return cudaErrorMemoryAllocation; }
#endif
    emu::poison(raw, span);
    emu::register_alloc(base, bytes, (char *)raw, span, 0);
    emu::device_in_use += bytes;
    *p = (T *)base;
    return cudaSuccess;
}
inline cudaError_t cudaFree(void *p) {
    emu::capture_forbidden("cudaFree");
    if (p == nullptr) { return cudaSuccess; }
    emu::Alloc *a = emu::find_alloc(p);
    if (a == nullptr || a->shared || (char *)p != a->base) {
        EMU_HOST_ERROR("cudaFree(%p): not a pointer cudaMalloc returned%s", p, a != nullptr && !a->shared ? " (it points inside an allocation)" : "");
    }
    if (a->freed) { EMU_HOST_ERROR("cudaFree(%p): freed twice", p); }
    emu::device_in_use -= a->size;
    uintptr_t key = (uintptr_t)a->raw;
#if defined(EMU_ASAN)
    emu::release_alloc(key); // (AddressSanitizer keeps freed memory poisoned itself)
#else
    a->freed = 1;
    emu::poison(a->raw, a->span);
    emu::quarantine.push_back(key);
    emu::quarantine_bytes += a->span;
    while (emu::quarantine_bytes > emu::QUARANTINE_LIMIT) {
        emu::quarantine_bytes -= emu::allocations()[emu::quarantine.front()].span;
        emu::release_alloc(emu::quarantine.front());
        emu::quarantine.pop_front();
    }
#endif
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    emu::capture_forbidden("cudaMemcpy");
    emu::issued(nullptr);
    emu::memcpy_checked("cudaMemcpy", dst, src, bytes, kind);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    emu::capture_forbidden("cudaMemset");
    emu::issued(nullptr);
    emu::check_range("cudaMemset", "destination", (uintptr_t)dst, bytes, 1);
    memset(dst, value, bytes);
    return cudaSuccess;
}
// EMU_DEVICES=N: the machine has N GPUs (1 by default), for programs that give each of
// their processes its own (an MPI run under emulation: each process emulates one GPU, its
// memory its own, whichever number it picks)
namespace emu {
inline int device_count() {
    const char *e = getenv("EMU_DEVICES");
    int n = e != nullptr ? atoi(e) : 1;
    return n >= 1 ? n : 1;
}
inline int current_device = 0;
}
inline cudaError_t cudaGetDeviceCount(int *n) { *n = emu::device_count(); return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu::device_count()) { return cudaErrorInvalidDevice; }
    emu::current_device = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) { *d = emu::current_device; return cudaSuccess; }
// the emulated device: the CPU, with the host's memory; shared memory as the smaller of
// the project's targets (an RTX 50xx, sm_120: 48 KiB a block, 99 KiB with the opt-in)
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
};
inline size_t emu_host_memory() { return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE); }
namespace emu {
const size_t SHARED_DEFAULT = 48 * 1024, SHARED_OPTIN = 99 * 1024;
}
#if defined(EMU_RACECHECK)
// The race detector's bookkeeping (the callbacks below, its maps and caches) is one thread's:
// host code's OpenMP loops run on one thread in the race build (two threads calling into it at
// once corrupt it, seen as an intermittent crash in finetune_lora.cu's parallel quantizer)
inline int emu_one_host_thread = [] { omp_set_num_threads(1); return 0; }();
#endif
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    *p = cudaDeviceProp{};
    snprintf(p->name, sizeof(p->name), "CPU emulation (dev/emu)");
    p->multiProcessorCount = omp_get_num_procs();
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->totalGlobalMem = emu::device_limit() != 0 ? emu::device_limit() : emu_host_memory();
    p->sharedMemPerBlock = emu::SHARED_DEFAULT;
    p->sharedMemPerBlockOptin = emu::SHARED_OPTIN;
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
// a kernel's dynamic shared memory above 48 KiB needs this opt-in, as on a GPU
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
namespace emu {
inline std::map<const void *, size_t> &shared_optin() {
    static std::map<const void *, size_t> m;
    return m;
}
}
template <typename F> inline cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > emu::SHARED_OPTIN) { return cudaErrorInvalidValue; }
    emu::shared_optin()[(const void *)kernel] = (size_t)value;
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// the race detector (the race build) and the checks of shared memory

namespace emu {
// Shared memory: each __shared__ variable its own allocation (made the first time its
// declaration runs: emu_build.sh rewrites the declaration into a reference to it), and a
// launch's dynamic shared memory (extern __shared__) one more. Every block starts with
// them all full of 0xFF bytes (NaN), as a GPU's block starts with garbage.
inline std::vector<Alloc *> shared_slots;
inline char *dynamic_shared_memory = nullptr;
inline size_t dynamic_shared_bytes = 0;
inline char *dynamic_shared_raw = nullptr; // (the block it lies in, red zones included)
inline size_t dynamic_shared_span = 0;
inline char *dynamic_shared() { return dynamic_shared_memory; }
inline char *shared_block(size_t bytes, const char *name, size_t *span_out, char **raw_out) {
#if defined(EMU_ASAN)
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, bytes > 0 ? bytes : 1) != 0) { EMU_HOST_ERROR("no memory for __shared__ %s", name); }
    *span_out = bytes > 0 ? bytes : 1;
    *raw_out = (char *)raw;
    return (char *)raw;
#else
    size_t span = RED_ZONE + (bytes + 255) / 256 * 256 + RED_ZONE; // (red zones: the race build's checks)
    char *raw = (char *)aligned_alloc(256, span);
    if (raw == nullptr) { EMU_HOST_ERROR("no memory for __shared__ %s", name); }
    *span_out = span;
    *raw_out = raw;
    return raw + RED_ZONE;
#endif
}
EMU_NO_RACE inline void *shared_alloc(size_t bytes, const char *name) {
    size_t span;
    char *raw, *base = shared_block(bytes, name, &span, &raw);
    poison(raw, span);
    Alloc *a = register_alloc(base, bytes, raw, span, 1);
    a->name = name;
    shared_slots.push_back(a);
    return base;
}
inline void poison_shared() {
    for (Alloc *a : shared_slots) { poison(a->base, a->size); }
    if (dynamic_shared_bytes > 0) { poison(dynamic_shared_memory, dynamic_shared_bytes); }
}
inline void check_launch_bounds(int max_threads, const char *kernel) {
    if (team_size() > max_threads) {
        EMU_ERROR("%s is launched with %d threads a block, but its __launch_bounds__ allows at most %d (a GPU refuses the "
                  "launch: too many resources requested)", kernel, team_size(), max_threads);
    }
}
}

#if defined(EMU_RACECHECK)
namespace emu {
// Who touched a 4-byte word: the launch, the block, the thread, the block's barrier
// epoch and its warp's __syncwarp epoch then (their low 16 bits: only compared for
// equality, and two accesses 65536 barriers apart within one launch would be a first),
// which bytes of the word (mask), whether by an atomic, and where in the program (as an
// offset from fiber_entry). 0 in launch: nobody yet. 20 bytes; a word has three.
struct Access {
    uint32_t launch, block;
    uint16_t tid;
    uint8_t mask, atomic;
    uint16_t epoch, warp_epoch;
    int32_t pc;
};
inline int32_t pc_offset(const void *pc) { return (int32_t)((intptr_t)pc - (intptr_t)&fiber_entry); }
inline const void *pc_of(int32_t offset) { return (const void *)((intptr_t)&fiber_entry + offset); }
struct Cell {
    Access write, write2, read1, read2;    // the last write, and one before it to other bytes of the word (two
                                           // 16-bit halves); the last two readers (different threads)
    uint32_t init_launch, init_block;      // shared memory: which bytes this block has written
    uint8_t init_mask;
};
const size_t PAGE_WORDS = 1024;
inline Access now;                  // the running thread, as an access would record it
inline int in_kernel = 0;           // only kernels' accesses are checked
inline int reports = 0;             // problems found in this launch

EMU_NO_RACE inline void race_stamp_impl() {
    now.launch = launch_id;
    now.block = block.linear;
    now.tid = (uint16_t)current_fiber;
    now.epoch = (uint16_t)block.epoch;
    now.warp_epoch = (uint16_t)block.warp_epoch[current_fiber / 32];
}
// where an access came from: a function and line, if the build has debug information
EMU_NO_RACE inline void describe_pc(const void *pc, char *out, size_t n) {
    Dl_info info;
    snprintf(out, n, "?");
    if (pc == nullptr || dladdr(pc, &info) == 0) { return; }
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "addr2line -f -C -s -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(),
             (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_fbase - 1));
    FILE *p = popen(cmd, "r");
    if (p == nullptr) { return; }
    char fn[256] = "", line[256] = "";
    if (fgets(fn, sizeof(fn), p) != nullptr && fgets(line, sizeof(line), p) != nullptr) {
        fn[strcspn(fn, "\n")] = '\0';
        line[strcspn(line, "\n")] = '\0';
        snprintf(out, n, "%s at %s", fn, line);
    }
    pclose(p);
}
EMU_NO_RACE inline void who(const Access &a, char *out, size_t n) {
    uint32_t bx = a.block % grid_dim.x, by = a.block / grid_dim.x % grid_dim.y, bz = a.block / (grid_dim.x * grid_dim.y);
    unsigned t = a.tid, tx = t % block_dim.x, ty = t / block_dim.x % block_dim.y, tz = t / (block_dim.x * block_dim.y);
    char where[600];
    describe_pc(pc_of(a.pc), where, sizeof(where));
    snprintf(out, n, "thread (%u,%u,%u) of block (%u,%u,%u)%s [%s]", tx, ty, tz, bx, by, bz, a.atomic ? " (atomic)" : "", where);
}
EMU_NO_RACE inline void report_start() {
    if (reports++ == 0) { fflush(stdout); }
}
EMU_NO_RACE inline bool reporting() { return reports <= 8; } // (after report_start: the first 8)
// what the second access conflicts with, if it does
EMU_NO_RACE inline bool ordered(const Access &a, const Access &b, bool shared) {
    if (a.launch != b.launch) { return true; }  // launches run one after another
    if (a.block != b.block) { return shared; }  // blocks never wait for each other (and have their own shared memory)
    if (a.tid == b.tid) { return true; }
    if (a.epoch != b.epoch) { return true; }     // a __syncthreads in between
    if (a.tid / 32 != b.tid / 32) { return false; }
    // same warp: a __syncwarp since a whose mask holds both lanes (b's lane passed it, since
    // it completed before b; a's lane after a, as it was not waiting there at a). Further
    // back than the last 64 __syncwarps: taken as ordered.
    unsigned both = 1u << (a.tid % 32) | 1u << (b.tid % 32);
    uint16_t since = (uint16_t)(b.warp_epoch - a.warp_epoch);
    if (since > 64) { return true; }
    for (uint16_t k = 1; k <= since; k++) {
        if ((block.sync_mask[a.tid / 32][(uint16_t)(a.warp_epoch + k) % 64] & both) == both) { return true; }
    }
    return false;
}
// "byte 12 of __shared__ partial (128 bytes)", "byte 4096 of a device allocation of 4096 bytes"
EMU_NO_RACE inline void describe_place(const Alloc &al, const char *p, char *out, size_t n) {
    if (al.shared) {
        snprintf(out, n, "byte %lld of %s%s (%zu bytes)", (long long)(p - al.base), al.name != nullptr ? "__shared__ " : "",
                 al.name != nullptr ? al.name : "the launch's dynamic shared memory", al.size);
        return;
    }
    snprintf(out, n, "byte %lld of a device allocation of %zu bytes", (long long)(p - al.base), al.size);
}
// a race: the running thread `doing` (reads / writes) what `earlier` `did` (read / wrote)
EMU_NO_RACE inline void race_report(const char *doing, const char *did, const Alloc &al, const char *p, unsigned size,
                                    const Access &earlier, bool shared) {
    report_start();
    if (!reporting()) { return; }
    char a[800], b[800], place[200];
    who(now, a, sizeof(a));
    who(earlier, b, sizeof(b));
    describe_place(al, p, place, sizeof(place));
    fprintf(stderr, "Error: emulation: kernel %s: a race on %s memory: %s %s %u bytes at %s, which %s %s in the same launch "
            "with nothing to order them: %s\n", kernel_name, shared ? "shared" : "device", a, doing, size, place, b, did,
            earlier.block != now.block ? "blocks are never ordered within a launch (one writer per element, or atomics)"
            : earlier.tid / 32 == now.tid / 32 ? "lanes of a warp need a __syncwarp or __syncthreads between them (a shuffle orders no memory)"
                                               : "threads of a block need a __syncthreads between them");
}
EMU_NO_RACE inline Cell *cell_of(Alloc &a, const char *word) {
    size_t w = (size_t)(word - a.raw) / 4, page = w / PAGE_WORDS;
    if (a.pages == nullptr) {
        a.npages = (a.span / 4 + PAGE_WORDS - 1) / PAGE_WORDS;
        a.pages = (Cell **)calloc(a.npages, sizeof(Cell *));
    }
    if (a.pages[page] == nullptr) { a.pages[page] = (Cell *)calloc(PAGE_WORDS, sizeof(Cell)); }
    return &a.pages[page][w % PAGE_WORDS];
}
EMU_NO_RACE inline void race_forget_impl(Alloc &a) {
    for (size_t i = 0; i < a.npages; i++) { free(a.pages[i]); }
    free(a.pages);
    a.pages = nullptr;
    a.npages = 0;
}
EMU_NO_RACE inline void record_word(Alloc &al, const char *word, uint8_t mask, bool write, bool atomic, const char *p, unsigned size,
                                    const void *pc) {
    bool shared = al.shared != 0;
    Cell *c = cell_of(al, word);
    Access cur = now;
    cur.mask = mask;
    cur.atomic = atomic;
    cur.pc = pc_offset(pc);
    auto live = [&](const Access &a) { return a.launch == cur.launch && a.launch != 0 && (a.mask & mask) && (!shared || a.block == cur.block); };
    if (live(c->write) && !ordered(c->write, cur, shared) && !(c->write.atomic && atomic)) {
        race_report(write ? "writes" : "reads", "wrote", al, p, size, c->write, shared);
    } else if (live(c->write2) && !ordered(c->write2, cur, shared) && !(c->write2.atomic && atomic)) {
        race_report(write ? "writes" : "reads", "wrote", al, p, size, c->write2, shared);
    }
    if (write) {
        const Access *readers[2] = {&c->read1, &c->read2};
        for (const Access *r : readers) {
            if (live(*r) && !ordered(*r, cur, shared) && !(r->atomic && atomic)) {
                race_report("writes", "read", al, p, size, *r, shared);
                break;
            }
        }
        bool other_bytes = c->write.launch == cur.launch && !(c->write.mask & mask);
        if (other_bytes) { c->write2 = c->write; }
        c->write = cur;
        if (shared && atomic && !(c->init_launch == cur.launch && c->init_block == cur.block && (c->init_mask & mask) == mask) &&
            (report_start(), reporting())) { // (an atomic reads the old value first)
            char a[800], place[200];
            who(cur, a, sizeof(a));
            describe_place(al, p, place, sizeof(place));
            fprintf(stderr, "Error: emulation: kernel %s: %s updates %u bytes at %s atomically, which no thread of its block has "
                    "written (on a GPU: garbage, e.g. what the previous block left there)\n", kernel_name, a, size, place);
        }
        if (shared) {
            if (c->init_launch != cur.launch || c->init_block != cur.block) {
                c->init_launch = cur.launch;
                c->init_block = cur.block;
                c->init_mask = 0;
            }
            c->init_mask |= mask;
        }
    } else {
        if (shared && !(c->init_launch == cur.launch && c->init_block == cur.block && (c->init_mask & mask) == mask) &&
            (report_start(), reporting())) {
            char a[800], place[200];
            who(cur, a, sizeof(a));
            describe_place(al, p, place, sizeof(place));
            fprintf(stderr, "Error: emulation: kernel %s: %s reads %u bytes at %s, which no thread of its block has written "
                    "(on a GPU: garbage, e.g. what the previous block left there)\n", kernel_name, a, size, place);
        }
        if (c->read1.launch == cur.launch && c->read1.block == cur.block && c->read1.tid == cur.tid) {
            c->read1 = cur;
        } else {
            c->read2 = c->read1;
            c->read1 = cur;
        }
    }
}
EMU_NO_RACE inline void out_of_bounds(const char *what, const Alloc *a, const char *p, unsigned size, bool write, const void *pc) {
    report_start();
    if (!reporting()) { return; }
    char w[800];
    who(now, w, sizeof(w));
    if (a == nullptr) {
        fprintf(stderr, "Error: emulation: kernel %s: %s %s %u bytes %s\n", kernel_name, w, write ? "writes" : "reads", size, what);
    } else {
        char place[200];
        describe_place(*a, p, place, sizeof(place));
        fprintf(stderr, "Error: emulation: kernel %s: %s %s %u bytes at %s: %s\n", kernel_name, w, write ? "writes" : "reads",
                size, place, what);
    }
    (void)pc;
}
// every load and store of a kernel comes through here
EMU_NO_RACE inline void access(const void *addr, unsigned size, bool write, bool atomic, const void *pc) {
    const char *p = (const char *)addr;
    Alloc *a = find_alloc(p);
    if (a == nullptr) { return; } // the stack, the kernel's arguments, host memory: not ours to check
    now.pc = pc_offset(pc);
    if (a->freed) { out_of_bounds("device memory that was freed (cudaFree)", a, p, size, write, pc); return; }
    if (p < a->base || p + size > a->base + a->size) {
        out_of_bounds(p < a->base ? "before its start" : "past its end",
                      a, p, size, write, pc);
        return;
    }
    uintptr_t start = (uintptr_t)p, end = start + size;
    for (uintptr_t word = start & ~(uintptr_t)3; word < end; word += 4) {
        uint8_t mask = 0;
        for (unsigned b = 0; b < 4; b++) {
            if (word + b >= start && word + b < end) { mask |= (uint8_t)(1u << b); }
        }
        record_word(*a, (const char *)word, mask, write, atomic, p, size, pc);
    }
}
inline Alloc *dynamic_shared_alloc = nullptr;
EMU_NO_RACE inline void host_access(const void *p, unsigned size, bool write, const void *pc) {
    LibraryCall self; // (find_alloc's std::map is instrumented too: not again from here)
    Alloc *a = find_alloc(p);
    if (a == nullptr || a->shared) { return; }
    char where[600], place[200];
    describe_pc(pc, where, sizeof(where));
    describe_place(*a, (const char *)p, place, sizeof(place));
    EMU_HOST_ERROR("host code %s %u bytes at %s [%s]: device memory, which on a GPU machine the host cannot touch "
                   "(a crash): copy it with cudaMemcpy", write ? "writes" : "reads", size, place, where);
}
EMU_NO_RACE inline void race_launch_start() {
    reports = 0;
    if (dynamic_shared_bytes > 0) {
        dynamic_shared_alloc = register_alloc(dynamic_shared_memory, dynamic_shared_bytes, dynamic_shared_raw,
                                              dynamic_shared_span, 1);
    }
}
EMU_NO_RACE inline void race_launch_end() {
    if (dynamic_shared_alloc != nullptr) {
        race_forget_impl(*dynamic_shared_alloc);
        allocations().erase((uintptr_t)dynamic_shared_alloc->raw);
        dynamic_shared_alloc = nullptr;
        forget_cached();
    }
    if (reports > 0) {
        fprintf(stderr, "Error: emulation: kernel %s: %d problem(s) found by the race detector%s\n", kernel_name, reports,
                reports > 8 ? " (the first 8 shown)" : "");
        fail();
    }
}
}
// GCC's -fsanitize=thread calls these for every load and store of the code it compiles
// (and a few more); we implement them here, instead of linking ThreadSanitizer's runtime
extern "C" {
// (not inline: the instrumentation adds its calls after the compiler chose what to emit;
// one translation unit per emulated program, so one definition)
EMU_NO_RACE void __tsan_init() {}
EMU_NO_RACE void __tsan_func_entry(void *) {}
EMU_NO_RACE void __tsan_func_exit() {}
// (in_kernel is cleared while we record: the library code access() calls is instrumented
// too.) Outside kernels, host code must not touch device memory (on a GPU machine a
// device pointer dereferenced on the host crashes), except in the cuBLAS stand-ins.
#define EMU_RECORD(p, n, write)                                                                                          \
    if (emu::in_kernel) {                                                                                                \
        emu::in_kernel = 0;                                                                                              \
        emu::access(p, n, write, false, __builtin_return_address(0));                                                    \
        emu::in_kernel = 1;                                                                                              \
    } else if (emu::library_calls == 0) {                                                                                \
        emu::host_access(p, n, write, __builtin_return_address(0));                                                      \
    }
#define EMU_TSAN_HOOKS(n)                                                                                                \
    EMU_NO_RACE void __tsan_read##n(void *p) { EMU_RECORD(p, n, false) }                                                 \
    EMU_NO_RACE void __tsan_write##n(void *p) { EMU_RECORD(p, n, true) }                                                 \
    EMU_NO_RACE void __tsan_unaligned_read##n(void *p) { EMU_RECORD(p, n, false) }                                       \
    EMU_NO_RACE void __tsan_unaligned_write##n(void *p) { EMU_RECORD(p, n, true) }
EMU_TSAN_HOOKS(1)
EMU_TSAN_HOOKS(2)
EMU_TSAN_HOOKS(4)
EMU_TSAN_HOOKS(8)
EMU_TSAN_HOOKS(16)
EMU_NO_RACE void __tsan_read_range(void *p, unsigned long n) { if (n > 0) { EMU_RECORD(p, (unsigned)n, false) } }
EMU_NO_RACE void __tsan_write_range(void *p, unsigned long n) { if (n > 0) { EMU_RECORD(p, (unsigned)n, true) } }
EMU_NO_RACE void __tsan_vptr_update(void **, void *) {}
EMU_NO_RACE void __tsan_vptr_read(void **) {}
// the host's atomics (static-initialisation guards, OpenMP's reductions): done, not recorded
#define EMU_TSAN_ATOMICS(bits, T)                                                                                        \
    EMU_NO_RACE T __tsan_atomic##bits##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }   \
    EMU_NO_RACE void __tsan_atomic##bits##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }  \
    EMU_NO_RACE T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE T __tsan_atomic##bits##_fetch_nand(volatile T *a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    EMU_NO_RACE int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {                  \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
    }                                                                                                                    \
    EMU_NO_RACE int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {                    \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
    }                                                                                                                    \
    EMU_NO_RACE T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                        \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                \
        return c;                                                                                                        \
    }
EMU_TSAN_ATOMICS(8, unsigned char)
EMU_TSAN_ATOMICS(16, unsigned short)
EMU_TSAN_ATOMICS(32, unsigned int)
EMU_TSAN_ATOMICS(64, unsigned long long)
EMU_NO_RACE void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_NO_RACE void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
namespace emu {
EMU_NO_RACE inline void race_stamp() { race_stamp_impl(); }
EMU_NO_RACE inline void race_forget(Alloc &a) { race_forget_impl(a); }
EMU_NO_RACE inline void on_atomic(const void *p, unsigned size) {
    if (in_kernel) {
        in_kernel = 0;
        access(p, size, true, true, __builtin_return_address(0));
        in_kernel = 1;
    }
}
inline void kernel_mode(int on) { in_kernel = on; }
}
#else
namespace emu {
inline void race_stamp() {}
inline void race_forget(Alloc &) {}
inline void race_launch_start() {}
inline void race_launch_end() {}
inline void on_atomic(const void *, unsigned) {}
inline void kernel_mode(int) {}
}
#endif

// ----------------------------------------------------------------------------
// atomics: one fiber runs at a time, so a plain read-modify-write is atomic; the race
// detector records them as atomics (two atomics to one address never race)

#define EMU_ATOMIC(name, expr)                                                                                           \
    template <typename T, typename U> EMU_NO_RACE inline T name(T *address, U value) {                                   \
        T val = (T)value;                                                                                                \
        emu::on_atomic(address, sizeof(T));                                                                              \
        T old = *address;                                                                                                \
        *address = (expr);                                                                                               \
        return old;                                                                                                      \
    }
EMU_ATOMIC(atomicAdd, old + val)
EMU_ATOMIC(atomicSub, old - val)
EMU_ATOMIC(atomicMax, val > old ? val : old)
EMU_ATOMIC(atomicMin, val < old ? val : old)
EMU_ATOMIC(atomicExch, val)
EMU_ATOMIC(atomicAnd, old & val)
EMU_ATOMIC(atomicOr, old | val)
template <typename T, typename U, typename V> EMU_NO_RACE inline T atomicCAS(T *address, U compare_, V val_) {
    T compare = (T)compare_, val = (T)val_;
    emu::on_atomic(address, sizeof(T));
    T old = *address;
    if (old == compare) { *address = val; }
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
inline void *capture_stream = nullptr; // and the stream it captures
// work issued during a capture must go to the capturing stream: to another, or to the
// default stream, a GPU fails the capture (cudaErrorStreamCaptureImplicit)
inline void capture_stream_check(const char *what, const char *name, void *stream) {
    if (capture != nullptr && stream != capture_stream) {
        EMU_HOST_ERROR("%s %s issued to %s during a capture of another stream (a GPU fails the capture: "
                       "cudaErrorStreamCaptureImplicit)", what, name, stream == nullptr ? "the default stream" : "a stream");
    }
}
inline void capture_forbidden(const char *what) {
    if (capture != nullptr) { EMU_HOST_ERROR("%s during a stream capture (a GPU refuses it too)", what); }
}
struct Launch {
    dim3 grid, block;
    size_t shared_bytes = 0;
    void *stream = nullptr;
    const char *name = "?";
    Launch &named(const char *n) {
        name = n;
        return *this;
    }
    void execute(const std::function<void()> &body, const void *kernel) const {
        kernel_name = name;
        int threads = (int)(block.x * block.y * block.z);
        if (threads < 1 || threads > 1024) { EMU_HOST_ERROR("kernel %s: a block of %d threads (CUDA allows 1 to 1024)", name, threads); }
        // the limits a real launch has: a GPU would refuse these with "invalid configuration"
        if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 || block.z > 64) {
            EMU_HOST_ERROR("kernel %s: grid (%u, %u, %u) or block (%u, %u, %u) outside CUDA's limits", name, grid.x, grid.y,
                           grid.z, block.x, block.y, block.z);
        }
        size_t limit = SHARED_DEFAULT;
        auto optin = shared_optin().find(kernel);
        if (optin != shared_optin().end() && optin->second > limit) { limit = optin->second; }
        if (shared_bytes > limit) {
            EMU_HOST_ERROR("kernel %s: %zu bytes of dynamic shared memory, more than the %zu a block may have%s", name,
                           shared_bytes, limit, limit == SHARED_DEFAULT ? " without cudaFuncSetAttribute(kernel, "
                           "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) (99 KiB at most on sm_120)" : "");
        }
        launch_id++;
        grid_dim = grid;
        block_dim = block;
        kernel_body = body;
        dynamic_shared_bytes = shared_bytes;
        dynamic_shared_raw = nullptr;
        if (shared_bytes > 0) {
            dynamic_shared_memory = shared_block(shared_bytes, "(dynamic)", &dynamic_shared_span, &dynamic_shared_raw);
        }
        race_launch_start();
        // the blocks, in the schedule's order
        uint64_t n = (uint64_t)grid.x * grid.y * grid.z;
        std::vector<uint32_t> order;
        if (schedule().order == RANDOM) {
            order.resize(n);
            for (uint64_t i = 0; i < n; i++) { order[i] = (uint32_t)i; }
            uint64_t r = mix64(schedule().seed ^ ((uint64_t)launch_id << 20));
            for (uint64_t i = n; i > 1; i--) {
                r = mix64(r);
                std::swap(order[i - 1], order[r % i]);
            }
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t b = schedule().order == ASCENDING ? i : schedule().order == DESCENDING ? n - 1 - i : order[i];
            block_idx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / ((uint64_t)grid.x * grid.y))};
            emu::block.linear = (uint32_t)b;
            run_block(threads);
        }
        race_launch_end();
        free(dynamic_shared_raw);
        dynamic_shared_bytes = 0;
        dynamic_shared_memory = nullptr;
        kernel_name = "(no kernel)";
    }
    template <typename... P, typename... A> void run(void (*kernel)(P...), A &&...args) const {
        // the arguments converted to the kernel's parameter types once, as a launch does
        std::function<void()> body = [kernel, params = std::tuple<P...>(args...)]() { std::apply(kernel, params); };
        if (capture != nullptr) {
            capture_stream_check("kernel", name, stream);
            Launch launch = *this;
            capture->ops.push_back([launch, body, kernel]() { launch.execute(body, (const void *)kernel); });
            return;
        }
        if (deferring(stream)) {
            if (((Stream *)stream)->waited_default < default_count) {
                EMU_HOST_ERROR("kernel %s on a non-blocking stream that has not waited (cudaStreamWaitEvent) for all the work "
                               "issued to the default stream before it: on a GPU it may read what that work is still writing", name);
            }
            Launch launch = *this;
            defer(stream, [launch, body, kernel]() { launch.execute(body, (const void *)kernel); });
            return;
        }
        issued(stream);
        execute(body, (const void *)kernel);
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
// streams, events, graphs

typedef void *cudaStream_t; // an emu::Stream (nullptr: the default stream); see emu::Stream
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaStreamCreate(cudaStream_t *s) {
    emu::streams().push_back(new emu::Stream());
    *s = emu::streams().back();
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    cudaStreamCreate(s);
    ((emu::Stream *)*s)->nonblocking = (flags & cudaStreamNonBlocking) != 0;
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    emu::stream_run(s); // (a GPU finishes a destroyed stream's work; the Stream itself is kept:
    return cudaSuccess; // an event recorded on it may still be waited for, which CUDA allows)
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::capture_forbidden("cudaStreamSynchronize");
    emu::stream_run(s);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
    if (emu::capture != nullptr) {
        emu::capture_stream_check("cudaMemcpyAsync", "", stream);
        emu::capture->ops.push_back([=]() { emu::memcpy_checked("cudaMemcpyAsync (replayed from a graph)", dst, src, bytes, kind); });
        return cudaSuccess;
    }
    if (emu::deferring(stream)) {
        emu::defer(stream, [=]() { emu::memcpy_checked("cudaMemcpyAsync", dst, src, bytes, kind); });
        return cudaSuccess;
    }
    emu::issued(stream);
    emu::memcpy_checked("cudaMemcpyAsync", dst, src, bytes, kind);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream = nullptr) {
    auto op = [=]() {
        emu::check_range("cudaMemsetAsync", "destination", (uintptr_t)dst, bytes, 1);
        memset(dst, value, bytes);
    };
    if (emu::capture != nullptr) {
        emu::capture_stream_check("cudaMemsetAsync", "", stream);
        emu::capture->ops.push_back(op);
        return cudaSuccess;
    }
    if (emu::deferring(stream)) {
        emu::defer(stream, op);
        return cudaSuccess;
    }
    emu::issued(stream);
    op();
    return cudaSuccess;
}
// graphs: a captured list of operations, replayed in order
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
typedef emu::Graph *cudaGraph_t;
typedef emu::Graph *cudaGraphExec_t;
inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
    emu::capture_forbidden("cudaStreamBeginCapture");
    if (stream == nullptr) { EMU_HOST_ERROR("cudaStreamBeginCapture of the default stream (a GPU refuses it)"); }
    emu::capture = new emu::Graph();
    emu::capture_stream = stream;
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *graph) {
    if (emu::capture == nullptr) { EMU_HOST_ERROR("cudaStreamEndCapture without a capture"); }
    *graph = emu::capture;
    emu::capture = nullptr;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long = 0) {
    *exec = new emu::Graph(*graph);
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    emu::capture_forbidden("cudaGraphLaunch");
    emu::issued(stream); // (after what the stream deferred)
    for (auto &op : exec->ops) { op(); }
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
// an event: the CPU time at which it was recorded, and its stream's work up to then
namespace emu { struct Event { double seconds = 0.0; void *stream = nullptr; uint64_t count = 0; }; }
typedef emu::Event *cudaEvent_t;
enum { cudaEventDefault = 0, cudaEventDisableTiming = 2 };
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new emu::Event(); return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->seconds = ts.tv_sec + 1e-9 * ts.tv_nsec;
    e->stream = stream;
    e->count = stream == nullptr ? emu::default_count : ((emu::Stream *)stream)->count;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::capture_forbidden("cudaEventSynchronize");
    emu::stream_run(e->stream, e->count);
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned = 0) {
    emu::stream_run(e->stream, e->count);
    if (stream != nullptr && e->stream == nullptr && e->count > ((emu::Stream *)stream)->waited_default) {
        ((emu::Stream *)stream)->waited_default = e->count;
    }
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)((b->seconds - a->seconds) * 1e3);
    return cudaSuccess;
}
#endif
