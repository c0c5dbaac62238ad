/*
vector_add.cu: the first kernel, and what a launch costs.

1. c = a + b on the GPU, with the thread indexing spelled out and checked against
   the CPU.
2. Launch overhead: adding N numbers with one launch of N threads, versus with
   many small launches of 1024 threads each. The work is the same; the second
   pays the fixed cost of a kernel launch (a few microseconds) thousands of times.
   Timed with CUDA events after a warm-up, as every timing in dev/cuda is.

    make dev/cuda/vector_add && ./dev/cuda/vector_add
*/
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

// A launch <<<blocks, threads>>> runs blocks x threads copies of this function.
// Each copy finds its element from where it sits: blockIdx.x is its block's number
// in the grid, blockDim.x the threads per block, threadIdx.x its number in the
// block. So element i = blockIdx.x * blockDim.x + threadIdx.x; the grid is rounded
// up to whole blocks, so the last block's extra threads must do nothing.
__global__ void vector_add(float *c, const float *a, const float *b, size_t n, size_t offset) {
    size_t i = offset + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { c[i] = a[i] + b[i]; }
}

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "Error: no usable CUDA GPU (./dev/check_env tells more)\n");
        return EXIT_FAILURE;
    }
    const size_t n = (size_t)1 << 24; // 16M floats, 64 MiB per vector
    std::vector<float> a(n), b(n), c(n);
    for (size_t i = 0; i < n; i++) { a[i] = (float)(i % 1000) * 0.5f; b[i] = (float)(i % 7) - 3.0f; }
    float *da, *db, *dc;
    cudaCheck(cudaMalloc(&da, n * sizeof(float)));
    cudaCheck(cudaMalloc(&db, n * sizeof(float)));
    cudaCheck(cudaMalloc(&dc, n * sizeof(float)));
    cudaCheck(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    const int threads = 256;

    // 1. one launch over everything, checked against the CPU
    unsigned blocks = (unsigned)((n + threads - 1) / threads);
    vector_add<<<blocks, threads>>>(dc, da, db, n, 0); // warm-up
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventRecord(start));
    vector_add<<<blocks, threads>>>(dc, da, db, n, 0);
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms_one = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms_one, start, stop));
    cudaCheck(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) { wrong += c[i] != a[i] + b[i]; }
    // 3 x 4 bytes move per element: that, over the time, is the bandwidth we got
    printf("one launch of %u blocks x %d threads: %.3f ms, %.0f GB/s, %zu wrong elements: %s\n", blocks, threads, ms_one,
           3.0 * n * sizeof(float) / (ms_one * 1e-3) / 1e9, wrong, wrong == 0 ? "OK" : "NOT OK");

    // 2. the same work as many launches of 1024 elements each
    const size_t chunk = 1024, launches = 4096; // the first 4M elements
    cudaCheck(cudaEventRecord(start));
    for (size_t l = 0; l < launches; l++) { vector_add<<<chunk / threads, threads>>>(dc, da, db, n, l * chunk); }
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms_many = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms_many, start, stop));
    cudaCheck(cudaEventRecord(start));
    vector_add<<<(unsigned)(launches * chunk / threads), threads>>>(dc, da, db, n, 0);
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms_single = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms_single, start, stop));
    printf("%zu elements: %zu launches of %zu: %.3f ms (%.2f us per launch) vs one launch: %.3f ms\n", launches * chunk,
           launches, chunk, ms_many, 1e3 * ms_many / launches, ms_single);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return wrong == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
