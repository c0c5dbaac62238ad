/*
test_emu.cu: kernels that exercise what the CPU emulator must get right, each
checked against a plain CPU loop. The same file builds with nvcc (and runs on a
GPU in make gpu-check) and with dev/emu/emu_build.sh (and runs in make test), so
it checks the emulator against the real thing as well as against the CPU.
    thread and block indexing over a grid rounded up to whole blocks
    shared memory and __syncthreads (a tiled matmul with ragged edges)
    warp shuffles (a block-wide sum: __shfl_down_sync within warps, shared memory across)
    atomics (a histogram with atomicAdd)
    a missing __syncthreads is caught: under the emulator, a kernel that reads its
    neighbour's shared-memory slot without the barrier must get wrong values (on a
    GPU the outcome of the race is only reported, not checked)
*/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

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
    printf("%-48s max abs err %.3e (tolerance %.0e) %s\n", what, max_err, tol, ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
}

__global__ void saxpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = a * x[i] + y[i]; }
}

#define TILE 8
__global__ void matmul_tiled(float *C, const float *A, const float *B, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
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

__global__ void histogram(int *bins, const int *values, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(&bins[values[i]], 1); }
}

// Each thread writes its slot of shared memory, then reads its neighbour's. The
// uneven busy loop makes thread t + 1 write well after thread t reads, unless the
// barrier between them holds every thread back until all have written.
__global__ void neighbour_read(int *out, int use_barrier) {
    __shared__ int slots[64];
    int t = threadIdx.x;
    slots[t] = -1;
    __syncthreads();
    volatile int spin = 0;
    for (int i = 0; i < t * 20000; i++) { spin = spin + 1; }
    slots[t] = t;
    if (use_barrier) { __syncthreads(); } // the same for the whole block: legal
    out[t] = slots[(t + 1) % blockDim.x];
}

int main() {
    uint32_t seed = 7;
    auto rnd = [&seed]() { seed = seed * 1664525u + 1013904223u; return (seed >> 8) * (1.0f / 16777216.0f) - 0.5f; };
    // saxpy over 1000 elements in blocks of 128: the last block is partly idle
    {
        int n = 1000;
        std::vector<float> x(n), y(n), out(n);
        for (int i = 0; i < n; i++) { x[i] = rnd(); y[i] = rnd(); }
        float *dx, *dy;
        cudaCheck(cudaMalloc(&dx, n * sizeof(float)));
        cudaCheck(cudaMalloc(&dy, n * sizeof(float)));
        cudaCheck(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        saxpy<<<(n + 127) / 128, 128>>>(dy, dx, 2.5f, n);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
        double err = 0;
        for (int i = 0; i < n; i++) { err = fmax(err, fabs(out[i] - (2.5f * x[i] + y[i]))); }
        report("saxpy, 1000 elements, blocks of 128", err, 1e-6);
        cudaFree(dx);
        cudaFree(dy);
    }
    // matmul 37 x 29 = (37 x 45) @ (45 x 29): no size is a multiple of the tile
    {
        int M = 37, N = 29, K = 45;
        std::vector<float> A(M * K), B(K * N), C(M * N);
        for (auto &v : A) { v = rnd(); }
        for (auto &v : B) { v = rnd(); }
        float *dA, *dB, *dC;
        cudaCheck(cudaMalloc(&dA, A.size() * sizeof(float)));
        cudaCheck(cudaMalloc(&dB, B.size() * sizeof(float)));
        cudaCheck(cudaMalloc(&dC, C.size() * sizeof(float)));
        cudaCheck(cudaMemcpy(dA, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dB, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice));
        dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
        matmul_tiled<<<grid, block>>>(dC, dA, dB, M, N, K);
        cudaCheck(cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double err = 0;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double ref = 0;
                for (int k = 0; k < K; k++) { ref += (double)A[i * K + k] * B[k * N + j]; }
                err = fmax(err, fabs(ref - C[i * N + j]));
            }
        }
        report("tiled matmul 37x45 @ 45x29, 8x8 tiles", err, 1e-5);
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dC);
    }
    // row sums of 5 rows of 1000 with 256 threads: shuffles and shared memory
    {
        int rows = 5, n = 1000;
        std::vector<float> x(rows * n), out(rows);
        for (auto &v : x) { v = rnd(); }
        float *dx, *dout;
        cudaCheck(cudaMalloc(&dx, x.size() * sizeof(float)));
        cudaCheck(cudaMalloc(&dout, rows * sizeof(float)));
        cudaCheck(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
        row_sum<<<rows, 256>>>(dout, dx, n);
        cudaCheck(cudaMemcpy(out.data(), dout, rows * sizeof(float), cudaMemcpyDeviceToHost));
        double err = 0;
        for (int r = 0; r < rows; r++) {
            double ref = 0;
            for (int i = 0; i < n; i++) { ref += x[r * n + i]; }
            err = fmax(err, fabs(ref - out[r]));
        }
        report("row sums with warp shuffles, 5 x 1000, 256 threads", err, 1e-4);
        cudaFree(dx);
        cudaFree(dout);
    }
    // histogram of 3000 values into 10 bins with atomicAdd
    {
        int n = 3000;
        std::vector<int> v(n), bins(10, 0), ref(10, 0);
        for (int i = 0; i < n; i++) { v[i] = (i * 7 + i / 13) % 10; ref[v[i]]++; }
        int *dv, *dbins;
        cudaCheck(cudaMalloc(&dv, n * sizeof(int)));
        cudaCheck(cudaMalloc(&dbins, 10 * sizeof(int)));
        cudaCheck(cudaMemcpy(dv, v.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(dbins, 0, 10 * sizeof(int)));
        histogram<<<(n + 255) / 256, 256>>>(dbins, dv, n);
        cudaCheck(cudaMemcpy(bins.data(), dbins, 10 * sizeof(int), cudaMemcpyDeviceToHost));
        double err = 0;
        for (int b = 0; b < 10; b++) { err = fmax(err, fabs((double)bins[b] - ref[b])); }
        report("histogram with atomicAdd, 3000 values, 10 bins", err, 0);
        cudaFree(dv);
        cudaFree(dbins);
    }
    // the barrier test: with __syncthreads every thread sees its neighbour's value;
    // without it, the emulator must expose the race (stale -1s)
    {
        int n = 64, *dout;
        std::vector<int> out(n);
        cudaCheck(cudaMalloc(&dout, n * sizeof(int)));
        int wrong[2];
        for (int use_barrier = 1; use_barrier >= 0; use_barrier--) {
            neighbour_read<<<1, n>>>(dout, use_barrier);
            cudaCheck(cudaMemcpy(out.data(), dout, n * sizeof(int), cudaMemcpyDeviceToHost));
            wrong[use_barrier] = 0;
            for (int t = 0; t < n; t++) { wrong[use_barrier] += out[t] != (t + 1) % n; }
        }
        report("neighbour reads after __syncthreads", wrong[1], 0);
#ifdef CUDA_EMU_H
        int caught = wrong[0] > 0;
        printf("%-48s %d of %d reads stale %s\n", "missing __syncthreads caught by the emulator", wrong[0], n, caught ? "OK" : "NOT OK");
        if (caught) { num_passed++; } else { num_failed++; }
#else
        printf("without the barrier, on this GPU: %d of %d reads stale (a race: either outcome is possible)\n", wrong[0], n);
#endif
        cudaFree(dout);
    }
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
