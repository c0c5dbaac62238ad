// lib/cuda_utils.h: host-side CUDA helpers every .cu program needs and no chapter teaches:
// checked CUDA and cuBLAS calls, ceil_div for grid sizes, the -G memory budget (a 16 GB
// card studied on a bigger one), guard bands after tensors in debug builds, and NVTX
// ranges for Nsight Systems. No kernels: those are the chapters' lesson (STYLE.md
// section 1), and the emulator must see them in the programs' own text.
#ifndef LIB_CUDA_UTILS_H
#define LIB_CUDA_UTILS_H
#ifdef LIB_PHASES_H
#error "include lib/cuda_utils.h before lib/phases.h (phases.h takes the GPU's clock from it)"
#endif
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nvtx3/nvToolsExt.h> // (header-only: NVTX ranges for Nsight Systems)
#include "utils.h"

// exit with the file, line and the library's own message on any CUDA error
static inline void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "Error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check(err, __FILE__, __LINE__)
static inline void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "Error: cuBLAS: %s [%s:%d]\n", cublasGetStatusString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check(status, __FILE__, __LINE__)

// blocks of `d` threads (or warps) that cover n items
static inline unsigned ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

// -G GiB: behave as if the GPU had only this much memory, so that a 16 GB card can be
// studied on a bigger one. Before each allocation the device's memory in use is read
// (cudaMemGetInfo: the CUDA context, cuBLAS's workspace, this program's tensors, anything
// else on the device); an allocation that would take it past the budget fails as the real
// card's would, with the program's out-of-memory advice. 0: the whole device.
static size_t gpu_budget;
__attribute__((unused)) static inline void gpu_budget_set(const char *flag, const char *value) { // (unused: a test built from this file)
    char *end;
    errno = 0;
    double gib = strtod(value, &end);
    if (errno != 0 || end == value || *end != '\0' || !(gib >= 0.0) || gib > 1e6) {
        fprintf(stderr, "Error: flag %s needs a number of GiB >= 0, got '%s'\nHINT: %s -h lists every flag\n", flag, value, PROGRAM);
        exit(EXIT_FAILURE);
    }
    gpu_budget = (size_t)(gib * 1073741824.0 + 0.5);
    if (gib > 0.0 && gpu_budget == 0) { // (0 would mean no budget at all)
        fprintf(stderr, "Error: flag %s: %s GiB is less than a byte\nHINT: 0 means the whole device\n", flag, value);
        exit(EXIT_FAILURE);
    }
}
// the device's free and total memory, as the budget makes them
static inline void gpu_memory_info(size_t *free_bytes, size_t *total_bytes) {
    cudaGetLastError(); // (a failed allocation leaves its error behind; the query must not see it)
    cudaMemGetInfo(free_bytes, total_bytes);
    if (gpu_budget == 0) { return; }
    size_t used = *total_bytes - *free_bytes;
    *total_bytes = gpu_budget;
    *free_bytes = used < gpu_budget ? gpu_budget - used : 0;
}
// cudaMalloc within the budget
static inline cudaError_t gpu_malloc_budgeted(void **p, size_t bytes) {
    if (gpu_budget > 0) {
        size_t free_bytes = 0, total_bytes = 0;
        gpu_memory_info(&free_bytes, &total_bytes);
        if (bytes > free_bytes) { return cudaErrorMemoryAllocation; }
    }
    return cudaMalloc(p, bytes);
}

// What a guard band holds (debug builds, GUARD_BYTES > 0): the 16-bit word 0xFF81 + k % 63,
// over and over, in the band after tensor k of a table: a NaN as a bf16 or an fp16 and,
// two of them, as an fp32 (a signaling one in bf16 and fp32). So a kernel that writes past
// a tensor's end breaks the pattern whatever it writes: a number; a NaN copied from
// another band (another k); or a NaN computed from this one (fp32 arithmetic on a
// signaling NaN gives a quiet one, and a conversion to bf16 or fp16 gives CUDA's 0x7FFF,
// on the CPU as on the GPU). A kernel that reads past the end reads a NaN. (Bands of 0xFF
// bytes, a quiet NaN, missed an overrun in the emulator: x86 arithmetic passes a quiet NaN
// operand through bit for bit, and 0xFF + 0xFF came back as 0xFF.)
static inline uint8_t guard_byte(int k, uintptr_t address) {
    unsigned word = 0xFF81u + (unsigned)k % 63u;
    return (uint8_t)(address % 2 == 0 ? word & 0xFFu : word >> 8); // (little-endian: the low byte first)
}
// band k of `bytes` bytes at p, in device memory
static inline void guard_fill_band(void *p, size_t bytes, int k) {
    uint8_t *host = (uint8_t *)mallocCheck(bytes > 0 ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) { host[i] = guard_byte(k, (uintptr_t)p + i); }
    cudaCheck(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    free(host);
}
// the first byte of band k at p that lost its pattern, or -1 if none did
static inline long guard_band_broken(const void *p, size_t bytes, int k) {
    uint8_t *host = (uint8_t *)mallocCheck(bytes > 0 ? bytes : 1);
    cudaCheck(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost));
    long broken = -1;
    for (size_t i = 0; i < bytes && broken < 0; i++) {
        if (host[i] != guard_byte(k, (uintptr_t)p + i)) { broken = (long)i; }
    }
    free(host);
    return broken;
}

// a layer's pass as an NVTX range ("forward 3", "backward 3"), for Nsight Systems' timeline
static inline void layer_range_push(const char *pass, int layer) {
    char name[48];
    snprintf(name, sizeof(name), "%s %d", pass, layer);
    nvtxRangePushA(name);
}

#endif // LIB_CUDA_UTILS_H
