/*
check_env.cu: the first thing to run on a new GPU machine.

Prints the CUDA driver and runtime versions, then for every device its name,
compute capability, memory, SM count and clocks, and finally runs a 4096 x 4096
fp32 matmul on device 0 (a simple tiled kernel, so this needs no library) and
checks a sample of its outputs against the CPU. Without a GPU (or without a
driver) it says so clearly and exits non-zero.

    make dev/check_env && ./dev/check_env
*/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

// exit with the file, line and CUDA's own message on any error
static void cuda_check(cudaError_t err, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "Error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check(err, __FILE__, __LINE__)

// C (N,N) = A (N,N) @ B (N,N), row-major; each block computes a 16 x 16 tile of
// C, staging 16 x 16 tiles of A and B through shared memory
#define TILE 16
__global__ void matmul_tiled(float *C, const float *A, const float *B, int N) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < N; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < N && k0 + threadIdx.x < N) ? A[(size_t)row * N + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < N) ? B[(size_t)(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) { sum += As[threadIdx.y][k] * Bs[k][threadIdx.x]; }
        __syncthreads();
    }
    if (row < N && col < N) { C[(size_t)row * N + col] = sum; }
}

int main() {
    int driver = 0, runtime = 0, count = 0;
    cudaCheck(cudaRuntimeGetVersion(&runtime));
    cudaError_t derr = cudaDriverGetVersion(&driver);
    printf("CUDA runtime %d.%d, ", runtime / 1000, (runtime % 1000) / 10);
    if (derr == cudaSuccess && driver > 0) {
        printf("driver supports CUDA up to %d.%d\n", driver / 1000, (driver % 1000) / 10);
    } else {
        printf("driver not installed\n");
    }
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fprintf(stderr, "Error: no usable CUDA GPU: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        fprintf(stderr, "HINT: this machine can compile CUDA code but not run it; the CPU programs and tests work without a GPU\n");
        return EXIT_FAILURE;
    }
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, d));
        int clock_khz = 0, mem_clock_khz = 0;
        cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, d);
        cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, d);
        printf("device %d: %s | compute capability %d.%d | %.1f GiB | %d SMs | %.2f GHz | memory bus %d bits at %.2f GHz\n",
               d, p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0, p.multiProcessorCount, clock_khz / 1e6,
               p.memoryBusWidth, mem_clock_khz / 1e6);
    }
    // a 4096 x 4096 matmul on device 0, checked against the CPU at a few hundred entries
    const int N = 4096;
    size_t bytes = (size_t)N * N * sizeof(float);
    std::vector<float> A((size_t)N * N), B((size_t)N * N), C((size_t)N * N);
    uint32_t s = 1;
    for (size_t i = 0; i < A.size(); i++) {
        s = s * 1664525u + 1013904223u; A[i] = (s >> 8) * (1.0f / 16777216.0f) - 0.5f;
        s = s * 1664525u + 1013904223u; B[i] = (s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    float *dA, *dB, *dC;
    cudaCheck(cudaMalloc(&dA, bytes));
    cudaCheck(cudaMalloc(&dB, bytes));
    cudaCheck(cudaMalloc(&dC, bytes));
    cudaCheck(cudaMemcpy(dA, A.data(), bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dB, B.data(), bytes, cudaMemcpyHostToDevice));
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (N + TILE - 1) / TILE);
    matmul_tiled<<<grid, block>>>(dC, dA, dB, N); // warm-up
    cudaCheck(cudaGetLastError());
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    cudaCheck(cudaEventRecord(start));
    matmul_tiled<<<grid, block>>>(dC, dA, dB, N);
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    cudaCheck(cudaMemcpy(C.data(), dC, bytes, cudaMemcpyDeviceToHost));
    double max_err = 0.0;
    for (int t = 0; t < 256; t++) {
        int i = (t * 7919) % N, j = (t * 104729) % N;
        double ref = 0.0;
        for (int k = 0; k < N; k++) { ref += (double)A[(size_t)i * N + k] * B[(size_t)k * N + j]; }
        max_err = fmax(max_err, fabs(ref - C[(size_t)i * N + j]));
    }
    // 4096 products of size <= 1/4 each, summed in fp32: errors ~1e-4; a wrong kernel gives ~1
    int ok = max_err < 1e-2;
    printf("matmul 4096x4096 (tiled fp32 kernel): %.2f ms, %.1f TFLOP/s, max abs error vs CPU %.2e: %s\n", ms,
           2.0 * N * N * (double)N / (ms * 1e-3) / 1e12, max_err, ok ? "OK" : "NOT OK");
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
