/*
train_mlp.cu: the MLP of train_mlp.c on the GPU, with our first CUDA kernels.

The same network, data, flags, random numbers and checkpoint files as
train_mlp.c (a checkpoint written by one resumes in the other); only the
arithmetic moves to the GPU. Each layer of train_mlp.c becomes a kernel with a
launcher of the same name and arguments, so the two files can be read side by
side:
  - matmuls: a naive kernel (one thread per output), a shared-memory tiled kernel,
    or cuBLAS (the default), chosen with -M;
  - bias, ReLU/tanh, dropout: elementwise kernels; the bias gradient is a column
    sum with one thread per column;
  - softmax + cross-entropy: one thread per image (10 classes), writing the
    probabilities, the gradient of the logits and the image's loss; the batch
    mean is summed on the host in double, as train_mlp.c does;
  - SGD, momentum and AdamW: one elementwise kernel each.
Everything stays in fp32. Every kernel is deterministic (no atomics): two runs
give identical results. The images are copied to the GPU once; each batch is
gathered there from a list of indices.

What it leaves out: the gradient check (train_mlp.c --gradcheck runs it in
double on the CPU; here --check compares every GPU result with a double
precision CPU reference instead), streams and CUDA graphs, fused kernels. The
GPU-performance experiments (the matmul ladder) live in dev/cuda/matmul.cu.

Build and run (the data as for train_mlp.c: apt-get install dataset-fashion-mnist):
    make train_mlpcu && ./train_mlpcu             # 784-512-256-10, AdamW, cuBLAS
    ./train_mlpcu -M tiled                        # our own tiled matmul kernel
    ./train_mlpcu --check                         # GPU vs CPU from identical weights
    ./train_mlpcu --time                          # step time of each matmul path
Checked by --check (every tensor of 3 steps against a double-precision CPU
reference) and, without a GPU, in make test: dev/test/test_train_mlp_cuda.sh
runs these kernels under the CPU emulator (dev/emu) and compares the results
with train_mlp.c. A debug build (-DGUARD_BYTES=256, see GUARD_BYTES below)
checks after every update that no kernel wrote past the end of its tensor.

Sizes: B batch size, L number of weight layers, IN / OUT a layer's input and
output width. A layer's backward WRITES the gradient of its input (=) and
ACCUMULATES (+=) into its parameter gradients.
*/

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zlib.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h> // (header-only: NVTX ranges for Nsight Systems)
#include <cublas_v2.h>
#define PROGRAM "./train_mlpcu" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/cuda_utils.h"
#include "lib/phases.h"
// Guard bands, for debug builds (-DGUARD_BYTES=256): each tensor carved out of a
// shared allocation (the parameters, their gradients, the optimizer state, the
// activations) is followed by this many bytes of a pattern (guard_byte, lib/cuda_utils.h), and
// after every update we read them back: a kernel that writes past the end of its tensor (an `i <= N`, a
// tile without its bounds check) is named, instead of silently corrupting its
// neighbour. The default 0 costs nothing: no bands, no checks, the packed layout.
#ifndef GUARD_BYTES
#define GUARD_BYTES 0
#endif
#define GUARD_FLOATS ((size_t)GUARD_BYTES / sizeof(float))
static_assert(GUARD_BYTES % sizeof(float) == 0, "GUARD_BYTES: a whole number of floats");

// ----------------------------------------------------------------------------
// device memory: checked allocations

// device memory, with a message that says what did not fit
static void *cuda_malloc_check(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = gpu_malloc_budgeted(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        gpu_memory_info(&free_bytes, &total_bytes);
        fprintf(stderr, "Error: out of GPU memory%s allocating %.1f MiB for %s (%.1f of %.1f MiB free): %s\n"
                "HINT: lower the batch size (-b) or the layer widths (-l)\n", gpu_budget > 0 ? " (the -G budget)" : "", bytes / 1048576.0, what,
                free_bytes / 1048576.0, total_bytes / 1048576.0, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
    return p;
}

// The same counter-based generator on the device, for the dropout masks: the
// GPU draws exactly the numbers train_mlp.c draws (integer arithmetic, and a
// conversion to double that is exact).
__device__ inline double rng_uniform_at_device(uint64_t key, uint64_t i) {
    uint64_t z = key + i + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z = z ^ (z >> 31);
    return (double)(z >> 40) * 0x1p-24;
}

// The random streams of this program (see rng_key): each a function of the seed,
// so a resumed run draws exactly what an uninterrupted one would have.
#define STREAM_INIT 0       // index: layer; weights
#define STREAM_SPLIT 1      // which training images are held out for validation
#define STREAM_EPOCH 2      // index: epoch; the order of the training images
#define STREAM_DROPOUT 3    // index: step * MAX_LAYERS + layer; dropout masks

// ----------------------------------------------------------------------------
// the kernels

// C (M, N) = op(A) (M, K) @ op(B) (K, N), all row-major; C is overwritten, or
// added to when accumulate = 1. op(A) = A stored (M, K), or with ta = 1 A^T of
// an A stored (K, M); likewise op(B) = B stored (K, N), or with tb = 1 B^T of a
// B stored (N, K). The three matmuls of a linear layer are all of this form:
//   forward   z  = h @ W^T        (ta 0, tb 1)
//   backward  dh = dz @ W         (ta 0, tb 0)
//             dW += dz^T @ h      (ta 1, tb 0, accumulate)
__device__ inline float op_at(const float *X, int rows, int cols, int transposed, int r, int c) {
    // element (r, c) of op(X), where op(X) has `rows` rows and `cols` columns
    return transposed ? X[(size_t)c * rows + r] : X[(size_t)r * cols + c];
}

// The two kernels are named for what they are rather than matmul_kernelN: this
// program offers both on purpose (-M), and unlike the rungs of dev/cuda/matmul.cu
// (which they follow: variants 2 and 3) they take transposed operands.
// 1. Naive: one thread per output element, a dot product of length K straight
// from global memory. Threads next to each other in x compute neighbouring
// columns of C, so their loads of B (tb = 0) and stores of C are coalesced; but
// every element of A and B is read from memory M or N times over.
__global__ void matmul_naive_kernel(float *C, const float *A, const float *B, int M, int N, int K, int ta, int tb,
                                    int accumulate) {
    int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) { return; }
    float sum = 0.0f;
    for (int k = 0; k < K; k++) { sum += op_at(A, M, K, ta, row, k) * op_at(B, K, N, tb, k, col); }
    size_t i = (size_t)row * N + col;
    C[i] = accumulate ? C[i] + sum : sum;
}

// 2. Tiled: a block of 16 x 16 threads computes a 16 x 16 tile of C. It walks
// along K in steps of 16, each thread loading one element of A's tile and one of
// B's into shared memory, then every thread reads 16 of each from there: every
// element loaded from global memory is used 16 times. Transposed operands are
// loaded along their rows in memory (consecutive threads, consecutive
// addresses) and written transposed into the tile; the +1 column of padding
// keeps those transposed writes free of shared-memory bank conflicts.
#define MATMUL_TILE 16
__global__ void matmul_tiled_kernel(float *C, const float *A, const float *B, int M, int N, int K, int ta, int tb,
                                    int accumulate) {
    __shared__ float As[MATMUL_TILE][MATMUL_TILE + 1]; // As[r][k]: op(A)(row0 + r, k0 + k)
    __shared__ float Bs[MATMUL_TILE][MATMUL_TILE + 1]; // Bs[k][c]: op(B)(k0 + k, col0 + c)
    int tx = threadIdx.x, ty = threadIdx.y;
    int row0 = blockIdx.y * MATMUL_TILE, col0 = blockIdx.x * MATMUL_TILE;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MATMUL_TILE) {
        if (!ta) { // A (M, K): along a row of A, k varies fastest
            int r = row0 + ty, k = k0 + tx;
            As[ty][tx] = r < M && k < K ? A[(size_t)r * K + k] : 0.0f;
        } else {   // A stored (K, M): along a row in memory, r varies fastest
            int r = row0 + tx, k = k0 + ty;
            As[tx][ty] = r < M && k < K ? A[(size_t)k * M + r] : 0.0f;
        }
        if (!tb) { // B (K, N): c varies fastest
            int k = k0 + ty, c = col0 + tx;
            Bs[ty][tx] = k < K && c < N ? B[(size_t)k * N + c] : 0.0f;
        } else {   // B stored (N, K): k varies fastest
            int k = k0 + tx, c = col0 + ty;
            Bs[tx][ty] = k < K && c < N ? B[(size_t)c * K + k] : 0.0f;
        }
        __syncthreads(); // the tiles are complete before anyone reads them
        for (int k = 0; k < MATMUL_TILE; k++) { sum += As[ty][k] * Bs[k][tx]; }
        __syncthreads(); // and everyone is done with them before they are overwritten
    }
    int row = row0 + ty, col = col0 + tx;
    if (row < M && col < N) {
        size_t i = (size_t)row * N + col;
        C[i] = accumulate ? C[i] + sum : sum;
    }
}

// out (B, OUT) += bias, broadcast over the rows
__global__ void add_bias_kernel(float *out, const float *bias, size_t B, size_t OUT) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * OUT) { out[i] += bias[i % OUT]; }
}

// dbias (OUT) += column sums of dout (B, OUT): one thread per column walks down
// the rows, so neighbouring threads read neighbouring addresses; no atomics, and
// the sum's order is fixed (deterministic)
__global__ void bias_backward_kernel(float *dbias, const float *dout, size_t B, size_t OUT) {
    size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OUT) { return; }
    float sum = 0.0f;
    for (size_t b = 0; b < B; b++) { sum += dout[b * OUT + o]; }
    dbias[o] += sum;
}

enum { ACT_RELU, ACT_TANH };

__global__ void activation_forward_kernel(float *out, const float *inp, size_t N, int act) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = act == ACT_RELU ? (inp[i] > 0.0f ? inp[i] : 0.0f) : tanhf(inp[i]); }
}

__global__ void activation_backward_kernel(float *dinp, const float *dout, const float *inp, const float *out, size_t N,
                                           int act) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { dinp[i] = act == ACT_RELU ? (inp[i] > 0.0f ? dout[i] : 0.0f) : dout[i] * (1.0f - out[i] * out[i]); }
}

__global__ void dropout_forward_kernel(float *out, float *mask, const float *inp, size_t N, float p, uint64_t key) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float scale = 1.0f / (1.0f - p);
    mask[i] = rng_uniform_at_device(key, i) >= p ? scale : 0.0f;
    out[i] = inp[i] * mask[i];
}

// back through dropout: the gradient passes where the unit was kept, scaled alike
__global__ void dropout_backward_kernel(float *dinp, const float *mask, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { dinp[i] *= mask[i]; }
}

// One thread per image (row of K logits; K = 10, so a warp per row would idle).
// The exp-sum in double, as train_mlp.c: the probabilities and the loss agree
// with the CPU to the last bits or nearly. Writes the row's loss and whether its
// argmax is the label; the batch mean is taken on the host.
__global__ void softmax_crossentropy_kernel(float *dlogits, float *probs, float *losses, int *correct,
                                            const float *logits, const int *labels, size_t B, size_t K) {
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) { return; }
    const float *z = logits + b * K;
    float *p = probs + b * K;
    size_t argmax = 0;
    for (size_t k = 1; k < K; k++) { if (z[k] > z[argmax]) { argmax = k; } }
    double sum = 0.0;
    for (size_t k = 0; k < K; k++) { sum += exp((double)z[k] - z[argmax]); }
    double logsumexp = z[argmax] + log(sum);
    losses[b] = (float)(logsumexp - z[labels[b]]);
    for (size_t k = 0; k < K; k++) { p[k] = (float)exp(z[k] - logsumexp); }
    if (dlogits != NULL) {
        for (size_t k = 0; k < K; k++) { dlogits[b * K + k] = (p[k] - (k == (size_t)labels[b] ? 1.0f : 0.0f)) / (float)B; }
    }
    correct[b] = argmax == (size_t)labels[b];
}

// a batch of images from the uint8 pixels already on the GPU: pixel / 255
__global__ void gather_batch_kernel(float *x, const uint8_t *pixels, const size_t *indices, size_t B, size_t dim) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * dim) { x[i] = pixels[indices[i / dim] * dim + i % dim] * (1.0f / 255.0f); }
}

// the optimizers of train_mlp.c's mlp_update, one element per thread
__global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n, float decay, float step_size,
                             float b1, float b2, float sqrt_bc2, float eps) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] = p[i] * decay - step_size * m[i] / (sqrtf(v[i]) / sqrt_bc2 + eps);
}

__global__ void momentum_kernel(float *p, float *buf, const float *g, size_t n, float lr, float wd, float mu, int first) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float gi = g[i] + wd * p[i];
    buf[i] = first ? gi : mu * buf[i] + gi;
    p[i] -= lr * buf[i];
}

__global__ void sgd_kernel(float *p, const float *g, size_t n, float lr, float wd) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { p[i] -= lr * (g[i] + wd * p[i]); }
}

// ----------------------------------------------------------------------------
// the layers: launchers with train_mlp.c's names and arguments

enum { MATMUL_NAIVE, MATMUL_TILED, MATMUL_CUBLAS };
static const char *MATMUL_NAMES[] = {"naive", "tiled", "cublas"};
static int matmul_kind = MATMUL_CUBLAS; // -M
static cublasHandle_t cublas_handle;

#define BLOCK 256 // threads per block of the elementwise kernels

// C = op(A) @ op(B) (+ C), as in the kernels' comment above
static void matmul(float *C, const float *A, const float *B, int M, int N, int K, int ta, int tb, int accumulate) {
    if (matmul_kind == MATMUL_CUBLAS) {
        // cuBLAS is column-major: a row-major (R, S) matrix is, as it lies in
        // memory, the column-major (S, R) matrix of its transpose. So we ask for
        // C^T (N, M) = op(B)^T @ op(A)^T, which needs no copies. TF32 stays off:
        // fp32 matmuls in full precision, like the kernels above.
        const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        cublasCheck(cublasSgemm(cublas_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                &one, B, tb ? K : N, A, ta ? M : K, &beta, C, N));
        return;
    }
    dim3 block(MATMUL_TILE, MATMUL_TILE), grid(ceil_div(N, MATMUL_TILE), ceil_div(M, MATMUL_TILE));
    if (matmul_kind == MATMUL_NAIVE) {
        matmul_naive_kernel<<<grid, block>>>(C, A, B, M, N, K, ta, tb, accumulate);
    } else {
        matmul_tiled_kernel<<<grid, block>>>(C, A, B, M, N, K, ta, tb, accumulate);
    }
    cudaCheck(cudaGetLastError());
}

// out (B, OUT) = inp (B, IN) @ weight^T + bias, weight (OUT, IN) as in nn.Linear
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, size_t B, size_t IN, size_t OUT) {
    matmul(out, inp, weight, (int)B, (int)OUT, (int)IN, 0, 1, 0);
    add_bias_kernel<<<ceil_div(B * OUT, BLOCK), BLOCK>>>(out, bias, B, OUT);
    cudaCheck(cudaGetLastError());
}

// dinp (B, IN) = dout @ weight (written, skipped when dinp is NULL: the input
// layer needs no gradient); dweight += dout^T @ inp; dbias += column sums of dout
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, size_t B, size_t IN, size_t OUT) {
    if (dinp != NULL) { matmul(dinp, dout, weight, (int)B, (int)IN, (int)OUT, 0, 0, 0); }
    matmul(dweight, dout, inp, (int)OUT, (int)IN, (int)B, 1, 0, 1);
    bias_backward_kernel<<<ceil_div(OUT, BLOCK), BLOCK>>>(dbias, dout, B, OUT);
    cudaCheck(cudaGetLastError());
}

void activation_forward(float *out, const float *inp, size_t N, int act) {
    activation_forward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(out, inp, N, act);
    cudaCheck(cudaGetLastError());
}

void activation_backward(float *dinp, const float *dout, const float *inp, const float *out, size_t N, int act) {
    activation_backward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(dinp, dout, inp, out, N, act);
    cudaCheck(cudaGetLastError());
}

void dropout_forward(float *out, float *mask, const float *inp, size_t N, float p, uint64_t key) {
    dropout_forward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(out, mask, inp, N, p, key);
    cudaCheck(cudaGetLastError());
}

void dropout_backward(float *dinp, const float *mask, size_t N) {
    dropout_backward_kernel<<<ceil_div(N, BLOCK), BLOCK>>>(dinp, mask, N);
    cudaCheck(cudaGetLastError());
}

// (losses, correct: per image, on the GPU; mlp_forward sums them on the host)
void softmax_crossentropy(float *dlogits, float *probs, float *losses, int *correct, const float *logits,
                          const int *labels, size_t B, size_t K) {
    softmax_crossentropy_kernel<<<ceil_div(B, BLOCK), BLOCK>>>(dlogits, probs, losses, correct, logits, labels, B, K);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the model

#define MAX_LAYERS 8

typedef struct {
    int num_layers;            // L weight layers
    int sizes[MAX_LAYERS + 1]; // sizes[0] = 784 inputs ... sizes[L] = 10 classes
    int act;                   // ACT_RELU or ACT_TANH between layers
    float dropout;             // probability of dropping a hidden unit while training
    size_t num_params;
    // on the GPU
    float *d_params;           // one block: W_0 (sizes[1], sizes[0]), b_0 (sizes[1]), W_1, b_1, ...
    float *grads;              // the same layout
    float *W[MAX_LAYERS], *b[MAX_LAYERS], *dW[MAX_LAYERS], *db[MAX_LAYERS]; // slices of the two
    float *d_opt_m, *d_opt_v;  // optimizer state, same layout; allocated on the first update
    size_t block_floats;       // the floats of each of these blocks: num_params, plus the guard bands (GUARD_BYTES)
    // in host memory: the copies that checkpoints are written from and read into, packed (no guard bands)
    float *params, *opt_m, *opt_v;
    // activations on the GPU, for batches of up to max_batch (names as in train_mlp.c)
    size_t max_batch;
    float *acts;               // one block for all of the below
    float *h[MAX_LAYERS + 1];  // h[0] input (B, sizes[0]); h[i] the input of layer i after activation and dropout
    float *z[MAX_LAYERS];      // z[i] (B, sizes[i+1]) layer i's output before the activation
    float *a[MAX_LAYERS];      // a[i] after the activation (before dropout)
    float *mask[MAX_LAYERS];   // dropout masks
    float *probs;              // (B, 10)
    float *dz, *dh;            // scratch: the gradient at a layer's output and input, (B, widest)
    float *losses;             // (B) each image's loss
    int *correct, *labels;     // (B) whether its prediction was right; its label
    size_t *indices;           // (B) the batch's images in the dataset
    float *host_losses, *host_logits; // host copies of losses (B) and the logits (B, 10)
    int *host_correct;
    // the images on the GPU: the last two datasets used (training, test), copied once
    const uint8_t *cached_from[2];
    uint8_t *cached_pixels[2];
} MLP;

// Tensor k's band: the GUARD_BYTES after the n floats at p. Fill it, or check that it is
// still whole, else name the tensor (`what` its kind, `name` the tensor) and stop. Byte K
// of a band is the K-th byte past the tensor.
static void guard_fill(float *p, size_t n, int k) {
    if (GUARD_BYTES > 0) { guard_fill_band(p + n, GUARD_BYTES, k); }
}
static void guard_check(const float *p, size_t n, int k, const char *what, const char *name) {
    if (GUARD_BYTES > 0) {
        long at = guard_band_broken(p + n, GUARD_BYTES, k);
        if (at >= 0) {
            fprintf(stderr, "Error: a kernel wrote past the end of the %s tensor %s (guard band after it overwritten at byte %ld)\n",
                    what, name, at);
            exit(EXIT_FAILURE);
        }
    }
}

// The 2L tensors of a block laid out like the parameters (W_0, b_0, W_1, ...):
// tensor i starts at offset(i) floats and has size(i).
static size_t mlp_tensor_floats(const MLP *m, int i) {
    size_t out = m->sizes[i / 2 + 1];
    return i % 2 ? out : out * m->sizes[i / 2];
}
static size_t mlp_tensor_offset(const MLP *m, int i) { return (size_t)((i % 2 ? m->b[i / 2] : m->W[i / 2]) - m->d_params); }

// Fill (check = 0) or check (1) the guard bands of such a block (what: "gradient")
static void mlp_block_guards(const MLP *m, float *block, const char *what, int check) {
    if (GUARD_BYTES > 0 && block != NULL) {
        for (int i = 0; i < 2 * m->num_layers; i++) {
            char name[16];
            snprintf(name, sizeof(name), "%c%d", i % 2 ? 'b' : 'W', i / 2);
            float *t = block + mlp_tensor_offset(m, i);
            if (check) { guard_check(t, mlp_tensor_floats(m, i), i, what, name); } else { guard_fill(t, mlp_tensor_floats(m, i), i); }
        }
    }
}

// A new block in the parameters' layout, zero but for its guard bands
static float *mlp_block_alloc(const MLP *m, const char *what) {
    float *block = (float *)cuda_malloc_check(m->block_floats * sizeof(float), what);
    cudaCheck(cudaMemset(block, 0, m->block_floats * sizeof(float)));
    mlp_block_guards(m, block, NULL, 0);
    return block;
}

void mlp_build(MLP *m, const int *sizes, int num_layers, int act, float dropout) {
    memset(m, 0, sizeof(*m));
    m->num_layers = num_layers;
    memcpy(m->sizes, sizes, (num_layers + 1) * sizeof(int));
    m->act = act;
    m->dropout = dropout;
    for (int l = 0; l < num_layers; l++) { m->num_params += (size_t)sizes[l + 1] * sizes[l] + sizes[l + 1]; }
    m->block_floats = m->num_params + 2 * num_layers * GUARD_FLOATS;
    m->params = (float *)mallocCheck(m->num_params * sizeof(float));
    // (the slices first: mlp_block_alloc finds the guard bands through them)
    m->d_params = (float *)cuda_malloc_check(m->block_floats * sizeof(float), "the parameters");
    size_t off = 0;
    for (int l = 0; l < num_layers; l++) {
        m->W[l] = m->d_params + off;
        off += (size_t)sizes[l + 1] * sizes[l] + GUARD_FLOATS;
        m->b[l] = m->d_params + off;
        off += sizes[l + 1] + GUARD_FLOATS;
    }
    mlp_block_guards(m, m->d_params, NULL, 0);
    m->grads = mlp_block_alloc(m, "the gradients");
    for (int l = 0; l < num_layers; l++) {
        m->dW[l] = m->grads + (m->W[l] - m->d_params);
        m->db[l] = m->grads + (m->b[l] - m->d_params);
    }
}

// Copy a block between the GPU's layout and the host's packed one, tensor by
// tensor (to_host: which way)
static void mlp_copy_block(const MLP *m, float *host, float *device, int to_host) {
    size_t packed = 0;
    for (int i = 0; i < 2 * m->num_layers; i++) {
        size_t bytes = mlp_tensor_floats(m, i) * sizeof(float);
        float *d = device + mlp_tensor_offset(m, i);
        if (to_host) {
            cudaCheck(cudaMemcpy(host + packed, d, bytes, cudaMemcpyDeviceToHost));
        } else {
            cudaCheck(cudaMemcpy(d, host + packed, bytes, cudaMemcpyHostToDevice));
        }
        packed += mlp_tensor_floats(m, i);
    }
}

// Copy the parameters and optimizer state to the host (for a checkpoint) and
// back (after loading one). The host's optimizer buffers appear with the GPU's.
void mlp_to_host(MLP *m) {
    size_t bytes = m->num_params * sizeof(float);
    mlp_copy_block(m, m->params, m->d_params, 1);
    if (m->d_opt_m != NULL) {
        if (m->opt_m == NULL) { m->opt_m = (float *)mallocCheck(bytes); }
        mlp_copy_block(m, m->opt_m, m->d_opt_m, 1);
    }
    if (m->d_opt_v != NULL) {
        if (m->opt_v == NULL) { m->opt_v = (float *)mallocCheck(bytes); }
        mlp_copy_block(m, m->opt_v, m->d_opt_v, 1);
    }
}

void mlp_to_device(MLP *m) {
    mlp_copy_block(m, m->params, m->d_params, 0);
    if (m->opt_m != NULL) {
        if (m->d_opt_m == NULL) { m->d_opt_m = mlp_block_alloc(m, "the optimizer state"); }
        mlp_copy_block(m, m->opt_m, m->d_opt_m, 0);
    }
    if (m->opt_v != NULL) {
        if (m->d_opt_v == NULL) { m->d_opt_v = mlp_block_alloc(m, "the optimizer state"); }
        mlp_copy_block(m, m->opt_v, m->d_opt_v, 0);
    }
}

// Weights: He initialisation for ReLU, N(0, 2/IN), Xavier for tanh, N(0, 1/IN);
// biases 0. Drawn on the host exactly as train_mlp.c draws them, then copied.
void mlp_init(MLP *m, uint64_t seed) {
    size_t off = 0;
    for (int l = 0; l < m->num_layers; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        double std = sqrt((m->act == ACT_RELU ? 2.0 : 1.0) / in);
        uint64_t key = rng_subkey(seed, STREAM_INIT, (uint64_t)l);
        for (size_t i = 0; i < out * in; i++) { m->params[off + i] = (float)(std * rng_normal_at(key, i)); }
        memset(m->params + off + out * in, 0, out * sizeof(float));
        off += out * in + out;
    }
    mlp_to_device(m);
}

// how many floats the activations of batch B take (with the guard bands after
// each of their 4L + 4 tensors, in debug builds)
size_t mlp_activation_floats(const int *sizes, int L, size_t B) {
    size_t widest = 0, total = B * sizes[0];
    for (int l = 0; l <= L; l++) { widest = (size_t)sizes[l] > widest ? (size_t)sizes[l] : widest; }
    for (int l = 0; l < L; l++) { total += 4 * B * sizes[l + 1]; } // z, a, mask, h[l+1]
    return total + B * sizes[L] + 2 * B * widest                  // probs, dz, dh
           + (4 * (size_t)L + 4) * GUARD_FLOATS;
}

// The activation tensors in the order they lie in their block: tensor i's
// start, size (for batches of max_batch) and name.
static int mlp_activation_tensors(const MLP *m, float **start, size_t *floats, char (*names)[16]) {
    int L = m->num_layers, n = 0;
    size_t B = m->max_batch, widest = 0;
    for (int l = 0; l <= L; l++) { widest = (size_t)m->sizes[l] > widest ? (size_t)m->sizes[l] : widest; }
    start[n] = m->h[0], floats[n] = B * m->sizes[0], snprintf(names[n++], 16, "h0");
    for (int l = 0; l < L; l++) {
        size_t out = B * m->sizes[l + 1];
        start[n] = m->z[l], floats[n] = out, snprintf(names[n++], 16, "z%d", l);
        start[n] = m->a[l], floats[n] = out, snprintf(names[n++], 16, "a%d", l);
        start[n] = m->mask[l], floats[n] = out, snprintf(names[n++], 16, "mask%d", l);
        start[n] = m->h[l + 1], floats[n] = out, snprintf(names[n++], 16, "h%d", l + 1);
    }
    start[n] = m->probs, floats[n] = B * m->sizes[L], snprintf(names[n++], 16, "probs");
    start[n] = m->dz, floats[n] = B * widest, snprintf(names[n++], 16, "dz");
    start[n] = m->dh, floats[n] = B * widest, snprintf(names[n++], 16, "dh");
    return n;
}

// Fill (check = 0) or check (1) the activations' guard bands
static void mlp_activation_guards(const MLP *m, int check) {
    if (GUARD_BYTES > 0 && m->acts != NULL) {
        float *start[4 * MAX_LAYERS + 4];
        size_t floats[4 * MAX_LAYERS + 4];
        char names[4 * MAX_LAYERS + 4][16];
        int n = mlp_activation_tensors(m, start, floats, names);
        for (int i = 0; i < n; i++) {
            if (check) { guard_check(start[i], floats[i], i, "activation", names[i]); } else { guard_fill(start[i], floats[i], i); }
        }
    }
}

// Debug builds: every guard band still whole? After each update (the step's
// forward, backward and update kernels) and when the network is freed.
static void mlp_check_guards(const MLP *m) {
    mlp_block_guards(m, m->d_params, "parameter", 1);
    mlp_block_guards(m, m->grads, "gradient", 1);
    mlp_block_guards(m, m->d_opt_m, "optimizer state (m)", 1);
    mlp_block_guards(m, m->d_opt_v, "optimizer state (v)", 1);
    mlp_activation_guards(m, 1);
}

static void mlp_allocate_activations(MLP *m, size_t B) {
    size_t widest = 0;
    for (int l = 0; l <= m->num_layers; l++) { widest = (size_t)m->sizes[l] > widest ? (size_t)m->sizes[l] : widest; }
    m->acts = (float *)cuda_malloc_check(mlp_activation_floats(m->sizes, m->num_layers, B) * sizeof(float), "the activations");
    float *p = m->acts;
    m->h[0] = p;
    p += B * m->sizes[0] + GUARD_FLOATS;
    for (int l = 0; l < m->num_layers; l++) {
        size_t n = B * m->sizes[l + 1] + GUARD_FLOATS;
        m->z[l] = p; p += n;
        m->a[l] = p; p += n;
        m->mask[l] = p; p += n;
        m->h[l + 1] = p; p += n;
    }
    m->probs = p; p += B * m->sizes[m->num_layers] + GUARD_FLOATS;
    m->dz = p; p += B * widest + GUARD_FLOATS;
    m->dh = p;
    m->losses = (float *)cuda_malloc_check(B * sizeof(float), "the per-image losses");
    m->correct = (int *)cuda_malloc_check(B * sizeof(int), "the per-image results");
    m->labels = (int *)cuda_malloc_check(B * sizeof(int), "the labels");
    m->indices = (size_t *)cuda_malloc_check(B * sizeof(size_t), "the batch indices");
    m->host_losses = (float *)mallocCheck(B * sizeof(float));
    m->host_correct = (int *)mallocCheck(B * sizeof(int));
    m->host_logits = (float *)mallocCheck(B * m->sizes[m->num_layers] * sizeof(float));
    m->max_batch = B;
    mlp_activation_guards(m, 0);
}

// Forward pass of the batch in h[0]. With train = 1 dropout is on, its masks
// drawn from (seed, step). Returns the mean loss; logits end in z[L-1]. Copying
// the per-image losses back waits for the GPU: every step ends synchronised, so
// the host's clock measures the GPU's work.
float mlp_forward(MLP *m, const int *labels, size_t B, int train, uint64_t seed, uint64_t step, int *correct) {
    int L = m->num_layers;
    cudaCheck(cudaMemcpy(m->labels, labels, B * sizeof(int), cudaMemcpyHostToDevice));
    for (int l = 0; l < L; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        layer_range_push("forward", l);
        linear_forward(m->z[l], m->h[l], m->W[l], m->b[l], B, in, out);
        if (l == L - 1) { nvtxRangePop(); break; } // the last layer's output are the logits
        activation_forward(m->a[l], m->z[l], B * out, m->act);
        if (train && m->dropout > 0.0f) {
            dropout_forward(m->h[l + 1], m->mask[l], m->a[l], B * out, m->dropout,
                            rng_subkey(seed, STREAM_DROPOUT, step * MAX_LAYERS + l));
        } else {
            cudaCheck(cudaMemcpy(m->h[l + 1], m->a[l], B * out * sizeof(float), cudaMemcpyDeviceToDevice));
        }
        nvtxRangePop();
    }
    softmax_crossentropy(train ? m->dz : NULL, m->probs, m->losses, m->correct, m->z[L - 1], m->labels, B, m->sizes[L]);
    cudaCheck(cudaMemcpy(m->host_losses, m->losses, B * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(m->host_correct, m->correct, B * sizeof(int), cudaMemcpyDeviceToHost));
    double loss = 0.0;
    int right = 0;
    for (size_t b = 0; b < B; b++) {
        loss += m->host_losses[b];
        right += m->host_correct[b];
    }
    if (correct != NULL) { *correct = right; }
    return (float)(loss / B);
}

// Backward pass of the last training forward: dz holds dloss/dlogits. Parameter
// gradients accumulate; zero them before a step (mlp_zero_grad).
void mlp_backward(MLP *m, size_t B) {
    int L = m->num_layers;
    for (int l = L - 1; l >= 0; l--) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        layer_range_push("backward", l);
        // dz: gradient at layer l's output z[l]; dh becomes the gradient at its input h[l]
        linear_backward(l > 0 ? m->dh : NULL, m->dW[l], m->db[l], m->dz, m->h[l], m->W[l], B, in, out);
        if (l == 0) { nvtxRangePop(); break; }
        // back through dropout (multiply by the same mask) and the activation of layer l-1
        if (m->dropout > 0.0f) { dropout_backward(m->dh, m->mask[l - 1], B * in); }
        activation_backward(m->dz, m->dh, m->z[l - 1], m->a[l - 1], B * in, m->act);
        nvtxRangePop();
    }
}

void mlp_zero_grad(MLP *m) {
    cudaCheck(cudaMemset(m->grads, 0, m->block_floats * sizeof(float)));
    mlp_block_guards(m, m->grads, NULL, 0); // (debug builds: the bands again)
}

// the logits (B, 10) of the last forward pass, copied to host memory
const float *mlp_logits(MLP *m, size_t B) {
    size_t bytes = B * m->sizes[m->num_layers] * sizeof(float);
    cudaCheck(cudaMemcpy(m->host_logits, m->z[m->num_layers - 1], bytes, cudaMemcpyDeviceToHost));
    return m->host_logits;
}

void mlp_free(MLP *m) {
    mlp_check_guards(m); // (debug builds: nor did the evaluations since the last update)
    free(m->params);
    free(m->opt_m);
    free(m->opt_v);
    free(m->host_losses);
    free(m->host_correct);
    free(m->host_logits);
    cudaCheck(cudaFree(m->d_params));
    cudaCheck(cudaFree(m->grads));
    cudaCheck(cudaFree(m->d_opt_m));
    cudaCheck(cudaFree(m->d_opt_v));
    cudaCheck(cudaFree(m->acts));
    cudaCheck(cudaFree(m->losses));
    cudaCheck(cudaFree(m->correct));
    cudaCheck(cudaFree(m->labels));
    cudaCheck(cudaFree(m->indices));
    for (int s = 0; s < 2; s++) { cudaCheck(cudaFree(m->cached_pixels[s])); }
}

// ----------------------------------------------------------------------------
// data: Fashion-MNIST's gzip'd idx files

// --- begin shared-copy: mlp-data ---
// idx: a big-endian header (magic, then one uint32 per dimension), then the
// data as unsigned bytes. 2051 = images (n, rows, cols), 2049 = labels (n).
#define IDX_IMAGES 2051
#define IDX_LABELS 2049
#define DATA_HINT "HINT: apt-get install dataset-fashion-mnist (Debian), or download the four *-ubyte.gz files of Fashion-MNIST into a folder and pass it with -d"
#define NUM_CLASSES 10
static const char *CLASS_NAMES[NUM_CLASSES] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Read exactly n bytes from a gzip stream, or exit naming the file.
static void gz_read_exact(gzFile gz, void *buf, size_t n, const char *path, const char *what) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(gz, (char *)buf + got, chunk);
        if (r <= 0) {
            int err;
            const char *msg = gzerror(gz, &err);
            fprintf(stderr, "Error: %s: %s after %zu of %zu bytes of %s%s%s\n%s\n", path,
                    r == 0 ? "file ends" : "cannot decompress", got, n, what, err != Z_OK ? ": " : "",
                    err != Z_OK ? msg : "", DATA_HINT);
            exit(EXIT_FAILURE);
        }
        got += (size_t)r;
    }
}

// Load one idx.gz file; dims receives its dimensions (3 for images, 1 for labels).
static uint8_t *load_idx_gz(const char *path, int magic, int ndims, uint32_t *dims) {
    gzFile gz = gzopen(path, "rb");
    if (gz == NULL) {
        fprintf(stderr, "Error: cannot open '%s': %s\n%s\n", path, errno ? strerror(errno) : "out of memory", DATA_HINT);
        exit(EXIT_FAILURE);
    }
    uint8_t header[16];
    gz_read_exact(gz, header, 4 + 4 * (size_t)ndims, path, "the idx header");
    uint32_t found = (uint32_t)header[0] << 24 | (uint32_t)header[1] << 16 | (uint32_t)header[2] << 8 | header[3];
    if (found != (uint32_t)magic) {
        fprintf(stderr, "Error: %s: bad idx magic number: expected %d (%s), found %u\n%s\n", path, magic,
                magic == IDX_IMAGES ? "images" : "labels", found, DATA_HINT);
        exit(EXIT_FAILURE);
    }
    size_t total = 1;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *h = header + 4 + 4 * d;
        dims[d] = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        total *= dims[d] < (1u << 24) ? dims[d] : 0; // each dimension below 2^24: no product can overflow
    }
    // checked before allocating anything: a corrupt header must not ask for gigabytes
    if (total == 0 || dims[0] > 10000000u || (ndims == 3 && (dims[1] != 28 || dims[2] != 28))) {
        fprintf(stderr, "Error: %s: idx dimensions", path);
        for (int d = 0; d < ndims; d++) { fprintf(stderr, " %u", dims[d]); }
        fprintf(stderr, " do not fit Fashion-MNIST (up to 10^7 %s)\n%s\n", ndims == 3 ? "28x28 images" : "labels", DATA_HINT);
        exit(EXIT_FAILURE);
    }
    uint8_t *data = (uint8_t *)mallocCheck(total);
    gz_read_exact(gz, data, total, path, "data");
    char extra;
    int r = gzread(gz, &extra, 1);
    if (r != 0) {
        int err;
        fprintf(stderr, "Error: %s: %s\n%s\n", path, r > 0 ? "more data than its header says: corrupt" : gzerror(gz, &err), DATA_HINT);
        exit(EXIT_FAILURE);
    }
    gzclose(gz);
    return data;
}

typedef struct {
    size_t n;          // number of images
    size_t dim;        // pixels per image: 784
    uint8_t *pixels;   // (n, dim)
    uint8_t *labels;   // (n)
} Dataset;

// Load images + labels of one split ("train" or "t10k") from dir, checking that
// they agree with each other and with what the network expects.
void dataset_load(Dataset *ds, const char *dir, const char *split) {
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof(ipath), "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lpath, sizeof(lpath), "%s/%s-labels-idx1-ubyte.gz", dir, split);
    uint32_t idims[3], ldims[1];
    ds->pixels = load_idx_gz(ipath, IDX_IMAGES, 3, idims);
    ds->labels = load_idx_gz(lpath, IDX_LABELS, 1, ldims);
    if (idims[0] != ldims[0]) {
        fprintf(stderr, "Error: %s has %u images but %s has %u labels\n%s\n", ipath, idims[0], lpath, ldims[0], DATA_HINT);
        exit(EXIT_FAILURE);
    }
    ds->n = idims[0];
    ds->dim = (size_t)idims[1] * idims[2];
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->labels[i] >= NUM_CLASSES) {
            fprintf(stderr, "Error: %s: label %zu is %d, not a class 0..9\n%s\n", lpath, i, ds->labels[i], DATA_HINT);
            exit(EXIT_FAILURE);
        }
    }
}

void dataset_free(Dataset *ds) {
    free(ds->pixels);
    free(ds->labels);
}

// Inputs as the network sees them: pixel / 255, in [0, 1].
static void gather_batch(float *x, int *y, const Dataset *ds, const size_t *indices, size_t B) {
    for (size_t b = 0; b < B; b++) {
        const uint8_t *img = ds->pixels + indices[b] * ds->dim;
        for (size_t i = 0; i < ds->dim; i++) { x[b * ds->dim + i] = img[i] * (1.0f / 255.0f); }
        y[b] = ds->labels[indices[b]];
    }
}
// --- end shared-copy: mlp-data ---

// The next batch: images `indices` of ds gathered on the GPU into h[0] (the
// dataset's pixels are copied there on first use), their labels into labels.
void mlp_set_batch(MLP *m, int *labels, const Dataset *ds, const size_t *indices, size_t B) {
    int slot = m->cached_from[0] == ds->pixels ? 0 : m->cached_from[1] == ds->pixels ? 1 : m->cached_from[0] == NULL ? 0 : 1;
    if (m->cached_from[slot] != ds->pixels) {
        if (m->cached_pixels[slot] != NULL) { cudaCheck(cudaFree(m->cached_pixels[slot])); }
        m->cached_pixels[slot] = (uint8_t *)cuda_malloc_check(ds->n * ds->dim, "the images");
        cudaCheck(cudaMemcpy(m->cached_pixels[slot], ds->pixels, ds->n * ds->dim, cudaMemcpyHostToDevice));
        m->cached_from[slot] = ds->pixels;
    }
    cudaCheck(cudaMemcpy(m->indices, indices, B * sizeof(size_t), cudaMemcpyHostToDevice));
    gather_batch_kernel<<<ceil_div(B * ds->dim, BLOCK), BLOCK>>>(m->h[0], m->cached_pixels[slot], m->indices, B, ds->dim);
    cudaCheck(cudaGetLastError());
    for (size_t b = 0; b < B; b++) { labels[b] = ds->labels[indices[b]]; }
}

// ----------------------------------------------------------------------------
// optimizers and the learning-rate schedule

// --- begin shared-copy: mlp-optimizer ---
enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAMW };
static const char *OPT_NAMES[] = {"sgd", "momentum", "adamw"};

typedef struct {
    int kind;
    float lr, weight_decay, momentum, beta1, beta2, eps;
} Optimizer;

// constant, or linear warm-up then a cosine from lr to 0 over total steps
float get_lr(int schedule_cosine, float lr, int step, int warmup, int total) {
    if (step < warmup) { return lr * (step + 1) / warmup; }
    if (!schedule_cosine || total <= warmup) { return lr; }
    float progress = (float)(step - warmup) / (float)(total - warmup);
    return 0.5f * lr * (1.0f + cosf((float)M_PI * progress));
}
// --- end shared-copy: mlp-optimizer ---

// One update of every parameter on the GPU, t = number of this update (from 1);
// the formulas of train_mlp.c's mlp_update, one kernel launch per tensor.
void mlp_update(MLP *m, const Optimizer *opt, float lr, int t) {
    // the optimizer state lazily (evaluation never pays for it), in the parameters'
    // layout: every tensor's offset into d_params is its offset into grads, m and v
    if (opt->kind != OPT_SGD && m->d_opt_m == NULL) { m->d_opt_m = mlp_block_alloc(m, "the optimizer state"); }
    if (opt->kind == OPT_ADAMW && m->d_opt_v == NULL) { m->d_opt_v = mlp_block_alloc(m, "the optimizer state"); }
    // bias corrections in double on the host, as torch computes them
    float bc1 = (float)(1.0 - pow(opt->beta1, t)), sqrt_bc2 = (float)sqrt(1.0 - pow(opt->beta2, t));
    for (int l = 0; l < m->num_layers; l++) {
        for (int is_bias = 0; is_bias < 2; is_bias++) {
            float *p = is_bias ? m->b[l] : m->W[l];
            size_t offset = (size_t)(p - m->d_params);
            const float *g = m->grads + offset;
            size_t n = is_bias ? (size_t)m->sizes[l + 1] : (size_t)m->sizes[l + 1] * m->sizes[l];
            float wd = is_bias ? 0.0f : opt->weight_decay;
            if (opt->kind == OPT_ADAMW) {
                adamw_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(p, m->d_opt_m + offset, m->d_opt_v + offset, g, n, 1.0f - lr * wd,
                                                           lr / bc1, opt->beta1, opt->beta2, sqrt_bc2, opt->eps);
            } else if (opt->kind == OPT_MOMENTUM) {
                momentum_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(p, m->d_opt_m + offset, g, n, lr, wd, opt->momentum, t == 1);
            } else {
                sgd_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(p, g, n, lr, wd);
            }
            cudaCheck(cudaGetLastError());
        }
    }
    mlp_check_guards(m); // (debug builds: the step's kernels stayed inside their tensors?)
}

// ----------------------------------------------------------------------------
// checkpoints: weights, optimizer state, position, written atomically

// --- begin shared-copy: mlp-checkpoint-format ---
// A header of 256 int32 (magic, version, layer sizes, activation, optimizer,
// epochs done, updates done, seed), then the parameters, then the optimizer's
// buffers (momentum: m; AdamW: m and v), all float32.
#define CKPT_MAGIC 20261202
#define CKPT_VERSION 1
#define CKPT_HINT "HINT: train_mlp -o DIR writes checkpoints (mlp_<epoch>.bin) into DIR after every epoch"

typedef struct {
    int epoch; // epochs completed
    int step;  // updates completed
} Position;
// --- end shared-copy: mlp-checkpoint-format ---

// --- begin shared-copy: mlp-checkpoint ---
static int optimizer_buffers(int kind) { return kind == OPT_ADAMW ? 2 : kind == OPT_MOMENTUM ? 1 : 0; }

// Everything besides the network and the optimizer kind that a resumed run must
// share with the first one to continue it exactly (stored in the header).
typedef struct {
    float lr, weight_decay, momentum, dropout;
    int batch, epochs, warmup, cosine, subset, val_size;
} CheckpointSettings;

void mlp_save(MLP *m, const Optimizer *opt, Position pos, uint64_t seed, const CheckpointSettings *settings,
              const char *path) {
    mlp_to_host(m);
    int header[256] = {0};
    header[0] = CKPT_MAGIC;
    header[1] = CKPT_VERSION;
    header[2] = m->num_layers;
    for (int l = 0; l <= m->num_layers; l++) { header[3 + l] = m->sizes[l]; }
    header[20] = m->act;
    header[21] = opt->kind;
    header[22] = pos.epoch;
    header[23] = pos.step;
    header[24] = (int)(uint32_t)seed;
    header[25] = (int)(uint32_t)(seed >> 32);
    int nbuf = m->opt_m != NULL ? optimizer_buffers(opt->kind) : 0;
    header[26] = nbuf;
    size_t bytes = m->num_params * sizeof(float);
    // the settings that decide what the next update is: a resume must use the same
    memcpy(&header[30], settings, sizeof(CheckpointSettings));
    const void *bufs[4] = {header, m->params, m->opt_m, m->opt_v};
    size_t sizes[4] = {sizeof(header), bytes, nbuf >= 1 ? bytes : 0, nbuf >= 2 ? bytes : 0};
    write_file_atomic(path, bufs, sizes, 4);
}

// Load a checkpoint into m (built with the same sizes) and check it matches the
// flags; steps_per_epoch tells which update count the epoch count implies.
Position mlp_load(MLP *m, const Optimizer *opt, uint64_t seed, const CheckpointSettings *settings, int steps_per_epoch,
                  const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256 || header[0] != CKPT_MAGIC || header[1] != CKPT_VERSION) {
        fprintf(stderr, "Error: %s: not a train_mlp checkpoint (expected magic %d version %d)\n%s\n", path, CKPT_MAGIC,
                CKPT_VERSION, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    int same = header[2] == m->num_layers && header[20] == m->act && header[21] == opt->kind &&
               header[24] == (int)(uint32_t)seed && header[25] == (int)(uint32_t)(seed >> 32);
    for (int l = 0; same && l <= m->num_layers; l++) { same = header[3 + l] == m->sizes[l]; }
    if (!same) {
        fprintf(stderr, "Error: %s was written with other -l/-a/-O/-s flags than this run's\nHINT: resume with the same flags\n", path);
        exit(EXIT_FAILURE);
    }
    CheckpointSettings stored;
    memcpy(&stored, &header[30], sizeof(stored));
    if (memcmp(&stored, settings, sizeof(stored)) != 0) {
        fprintf(stderr, "Error: %s was written with -r %g -w %g -m %g -p %g -b %d -e %d -u %d -c %s -N %d -v %d;"
                " this run has -r %g -w %g -m %g -p %g -b %d -e %d -u %d -c %s -N %d -v %d\n"
                "HINT: resume with the same flags (to train longer, start a new run from scratch)\n", path, stored.lr,
                stored.weight_decay, stored.momentum, stored.dropout, stored.batch, stored.epochs, stored.warmup,
                stored.cosine ? "cosine" : "const", stored.subset, stored.val_size, settings->lr, settings->weight_decay,
                settings->momentum, settings->dropout, settings->batch, settings->epochs, settings->warmup,
                settings->cosine ? "cosine" : "const", settings->subset, settings->val_size);
        exit(EXIT_FAILURE);
    }
    int nbuf = header[26];
    if (nbuf != optimizer_buffers(opt->kind) || header[22] < 1 || header[23] != header[22] * steps_per_epoch) {
        fprintf(stderr, "Error: %s: corrupt header (%d optimizer buffers for %s, epoch %d, step %d; expected %d buffers"
                " and %d steps per epoch)\n%s\n", path, nbuf, OPT_NAMES[opt->kind], header[22], header[23],
                optimizer_buffers(opt->kind), steps_per_epoch, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    size_t bytes = m->num_params * sizeof(float);
    long expected = (long)(sizeof(header) + (1 + (size_t)nbuf) * bytes), actual = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { actual = ftell(fp); }
    if (nbuf < 0 || nbuf > 2 || actual != expected || fseek(fp, sizeof(header), SEEK_SET) != 0) {
        fprintf(stderr, "Error: %s: has %ld bytes, expected %ld: truncated or corrupt\n%s\n", path, actual, expected, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    freadCheck(m->params, 1, bytes, fp);
    if (nbuf >= 1) {
        m->opt_m = (float *)mallocCheck(bytes);
        freadCheck(m->opt_m, 1, bytes, fp);
    }
    if (nbuf == 2) {
        m->opt_v = (float *)mallocCheck(bytes);
        freadCheck(m->opt_v, 1, bytes, fp);
    }
    fcloseCheck(fp);
    mlp_to_device(m);
    Position pos = {header[22], header[23]};
    return pos;
}
// --- end shared-copy: mlp-checkpoint ---

// --- begin shared-copy: mlp-training ---
// the newest checkpoint mlp_<epoch>.bin in dir, or -1
int find_latest_checkpoint(const char *dir) {
    char pattern[4200];
    snprintf(pattern, sizeof(pattern), "%s/mlp_*.bin", dir);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int e;
            if (sscanf(strrchr(g.gl_pathv[i], '/') + 1, "mlp_%d.bin", &e) == 1 && e > latest) { latest = e; }
        }
        globfree(&g);
    }
    return latest;
}

// ----------------------------------------------------------------------------
// training and evaluation

// Loss and accuracy over a set of images (indices into ds), batch by batch; with
// a confusion matrix (rows: true class, columns: predicted) if one is given.
void evaluate(MLP *m, const Dataset *ds, const size_t *indices, size_t n, float *loss, float *acc, int *confusion) {
    double total_loss = 0.0;
    size_t right = 0;
    int *labels = (int *)mallocCheck(m->max_batch * sizeof(int));
    for (size_t start = 0; start < n; start += m->max_batch) {
        size_t B = n - start < m->max_batch ? n - start : m->max_batch;
        int correct;
        mlp_set_batch(m, labels, ds, indices + start, B);
        total_loss += mlp_forward(m, labels, B, 0, 0, 0, &correct) * (double)B;
        right += (size_t)correct;
        if (confusion != NULL) {
            const float *logits = mlp_logits(m, B);
            for (size_t b = 0; b < B; b++) {
                int best = 0;
                for (int k = 1; k < NUM_CLASSES; k++) { if (logits[b * NUM_CLASSES + k] > logits[b * NUM_CLASSES + best]) { best = k; } }
                confusion[labels[b] * NUM_CLASSES + best]++;
            }
        }
    }
    free(labels);
    *loss = (float)(total_loss / n);
    *acc = (float)right / n;
}

typedef struct {
    const char *data_dir, *layers, *out_dir, *sweep;
    int act, opt, batch, epochs, warmup, cosine, subset, val_size, resume, sweep_steps, phase_every;
    float lr, weight_decay, momentum, dropout;
    uint64_t seed;
} Options;

// Train from `pos` to o->epochs epochs over the images train_idx; validation
// loss and accuracy after every epoch; a checkpoint and a metrics line per epoch
// when there is an output directory.
void train(MLP *m, const Optimizer *opt, const Options *o, const CheckpointSettings *settings, const Dataset *ds,
           const size_t *train_idx, size_t n_train, const size_t *val_idx, size_t n_val, Position pos, FILE *metrics) {
    size_t B = (size_t)o->batch, steps_per_epoch = (n_train + B - 1) / B;
    int total_steps = (int)(steps_per_epoch * o->epochs);
    size_t *order = (size_t *)mallocCheck(n_train * sizeof(size_t)), *batch_idx = (size_t *)mallocCheck(B * sizeof(size_t));
    int *labels = (int *)mallocCheck(B * sizeof(int));
    double run_start = wall_seconds();
    int first_epoch = pos.epoch; // (a resumed run's ETA counts the epochs it runs)
    Phases ph; // -P: a step's phases; an epoch's line gives the measured steps' mean
    memset(&ph, 0, sizeof(ph));
    ph.every = o->phase_every;
    for (int epoch = pos.epoch; epoch < o->epochs; epoch++) {
        double t0 = wall_seconds(), loss_sum = 0.0;
        double phase_ms[NUM_PHASES] = {0}, host_ms[NUM_PHASES] = {0}, measured_ms = 0.0;
        int measured = 0;
        size_t right = 0;
        // a new order of the training images every epoch, a function of (seed, epoch)
        random_permutation(order, n_train, rng_subkey(o->seed, STREAM_EPOCH, (uint64_t)epoch));
        for (size_t start = 0; start < n_train; start += B) {
            size_t nb = n_train - start < B ? n_train - start : B; // the last batch may be smaller
            phases_begin(&ph, pos.step); // (first: on the GPU a timed step waits here for the one before)
            double step_t0 = wall_seconds();
            phases_enter(&ph, PHASE_DATA);
            for (size_t b = 0; b < nb; b++) { batch_idx[b] = train_idx[order[start + b]]; }
            mlp_set_batch(m, labels, ds, batch_idx, nb);
            phases_enter(&ph, PHASE_FORWARD);
            int correct;
            float loss = mlp_forward(m, labels, nb, 1, o->seed, (uint64_t)pos.step, &correct);
            phases_enter(&ph, PHASE_UPDATE);
            mlp_zero_grad(m);
            phases_enter(&ph, PHASE_BACKWARD);
            mlp_backward(m, nb);
            phases_enter(&ph, PHASE_UPDATE);
            float lr = get_lr(o->cosine, o->lr, pos.step, o->warmup, total_steps);
            mlp_update(m, opt, lr, pos.step + 1);
            phases_end(&ph);
            if (ph.on) { // (no gradient norm here: SGD, momentum and AdamW as they are, unclipped)
                measured_ms += 1e3 * (wall_seconds() - step_t0);
                for (int k = 0; k < NUM_PHASES; k++) { phase_ms[k] += ph.ms[k]; host_ms[k] += ph.host_ms[k]; }
                measured++;
            }
            pos.step++;
            loss_sum += loss * (double)nb;
            right += (size_t)correct;
            if (!isfinite(loss)) {
                fprintf(stderr, "Error: epoch %d step %d: loss %g: training diverged\nHINT: lower the learning rate (-r); "
                        "%s --sweep ... shows which rates work\n", epoch + 1, pos.step, loss, PROGRAM);
                exit(EXIT_FAILURE);
            }
        }
        pos.epoch = epoch + 1;
        double seconds = wall_seconds() - t0;
        float val_loss = 0.0f, val_acc = 0.0f;
        if (n_val > 0) { evaluate(m, ds, val_idx, n_val, &val_loss, &val_acc, NULL); }
        float train_loss = (float)(loss_sum / n_train), train_acc = (float)right / n_train;
        // (train loss and accuracy are running averages over the epoch, with dropout on)
        printf("epoch %3d/%d | train loss %.4f acc %.4f | ", pos.epoch, o->epochs, train_loss, train_acc);
        if (n_val > 0) { printf("val loss %.4f acc %.4f", val_loss, val_acc); } else { printf("no validation"); }
        char eta[32];
        format_eta(eta, sizeof(eta), wall_seconds() - run_start, pos.epoch - first_epoch, o->epochs - first_epoch);
        printf(" | %.2f s | %.0f samples/s | %s\n", seconds, n_train / seconds, eta);
        if (measured > 0) { // the measured steps' mean, and the same steps timed whole
            printf("  phases (-P %d: %d steps), ms a step:", ph.every, measured);
            for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.3f", PHASE_NAMES[k], phase_ms[k] / measured); }
            printf(" (sum %.3f of the step's %.3f)\n", phases_sum(phase_ms) / measured, measured_ms / measured);
            if (ph.device && !ph.shown) {
                ph.shown = 1;
                printf("  (those are the GPU's times, from events; the host's clock, read at the same marks without waiting"
                       " for the GPU, says");
                for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.3f", PHASE_NAMES[k], host_ms[k] / measured); }
                printf(": a phase whose kernels were only queued looks short, and the wait is charged to the first call"
                       " that needs a result)\n");
            }
        }
        if (metrics != NULL) {
            // %.9g reads back exactly: two runs' metrics can be compared bit for bit
            fprintf(metrics, "epoch:%d train_loss:%.9g train_acc:%.9g val_loss:%.9g val_acc:%.9g s:%.3f", pos.epoch,
                    train_loss, train_acc, val_loss, val_acc, seconds);
            if (measured > 0) { // each phase's mean ms a step over the measured steps
                for (int k = 0; k < NUM_PHASES; k++) { fprintf(metrics, " ms_%s:%.4f", PHASE_NAMES[k], phase_ms[k] / measured); }
            }
            fprintf(metrics, "\n");
            fflush(metrics);
        }
        if (o->out_dir[0] != '\0') {
            char path[4200];
            snprintf(path, sizeof(path), "%s/mlp_%d.bin", o->out_dir, pos.epoch);
            mlp_save(m, opt, pos, o->seed, settings, path);
        }
    }
    free(order);
    free(batch_idx);
    free(labels);
}

// The final report: test accuracy, the confusion matrix, the most confused pairs.
void report(MLP *m, const Dataset *test) {
    size_t *idx = (size_t *)mallocCheck(test->n * sizeof(size_t));
    for (size_t i = 0; i < test->n; i++) { idx[i] = i; }
    int confusion[NUM_CLASSES * NUM_CLASSES] = {0};
    float loss, acc;
    evaluate(m, test, idx, test->n, &loss, &acc, confusion);
    printf("\ntest: loss %.4f accuracy %.4f (%zu images)\n", loss, acc, test->n);
    printf("\nconfusion matrix (rows: true class, columns: predicted)\n%12s", "");
    for (int k = 0; k < NUM_CLASSES; k++) { printf(" %5.5s", CLASS_NAMES[k]); }
    printf("\n");
    for (int i = 0; i < NUM_CLASSES; i++) {
        printf("%-12s", CLASS_NAMES[i]);
        for (int k = 0; k < NUM_CLASSES; k++) { printf(" %5d", confusion[i * NUM_CLASSES + k]); }
        printf("\n");
    }
    // the off-diagonal cells, biggest first (selection of the top 5 is enough)
    printf("\nmost confused (true -> predicted):\n");
    int used[NUM_CLASSES * NUM_CLASSES] = {0};
    for (int r = 0; r < 5; r++) {
        int best = -1;
        for (int c = 0; c < NUM_CLASSES * NUM_CLASSES; c++) {
            if (c / NUM_CLASSES != c % NUM_CLASSES && !used[c] && (best < 0 || confusion[c] > confusion[best])) { best = c; }
        }
        used[best] = 1;
        printf("  %-12s -> %-12s %4d\n", CLASS_NAMES[best / NUM_CLASSES], CLASS_NAMES[best % NUM_CLASSES], confusion[best]);
    }
    free(idx);
}

// ----------------------------------------------------------------------------
// the learning-rate sweep

// Train a fresh network (same seed) for `steps` updates at each rate and say
// what happened: the loss went down (converges), went down but bounces around a
// lot (oscillates), or blew up (diverges: non-finite, or above 1.5x the start).
void lr_sweep(const Options *o, const Dataset *ds, const size_t *train_idx, size_t n_train, const int *sizes, int L) {
    printf("learning-rate sweep: %s, %d steps of batch %d each, from the same initial weights\n", OPT_NAMES[o->opt],
           o->sweep_steps, o->batch);
    printf("| lr | loss at start | mean of last 20 | min | spread of last 20 | verdict |\n|---|---|---|---|---|---|\n");
    char *list = strdup(o->sweep);
    if (list == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    size_t B = (size_t)o->batch;
    int *labels = (int *)mallocCheck(B * sizeof(int));
    size_t *batch_idx = (size_t *)mallocCheck(B * sizeof(size_t)), *order = (size_t *)mallocCheck(n_train * sizeof(size_t));
    float *losses = (float *)mallocCheck((size_t)o->sweep_steps * sizeof(float));
    random_permutation(order, n_train, rng_subkey(o->seed, STREAM_EPOCH, 0));
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        char *end;
        float lr = strtof(tok, &end);
        if (end == tok || *end != '\0' || !(lr > 0.0f)) {
            fprintf(stderr, "Error: --sweep: '%s' is not a positive learning rate\n", tok);
            exit(EXIT_FAILURE);
        }
        MLP m;
        mlp_build(&m, sizes, L, o->act, o->dropout);
        mlp_init(&m, o->seed);
        mlp_allocate_activations(&m, B);
        Optimizer opt = {o->opt, lr, o->weight_decay, o->momentum, 0.9f, 0.999f, 1e-8f};
        int steps = 0, diverged = 0;
        for (; steps < o->sweep_steps; steps++) {
            size_t start = (steps * B) % (n_train - B + 1);
            for (size_t b = 0; b < B; b++) { batch_idx[b] = train_idx[order[start + b]]; }
            mlp_set_batch(&m, labels, ds, batch_idx, B);
            losses[steps] = mlp_forward(&m, labels, B, 1, o->seed, (uint64_t)steps, NULL);
            // diverged: not finite, or well above where it started (1.5x, plus 1 for small losses)
            if (!isfinite(losses[steps]) || losses[steps] > 1.5f * losses[0] + 1.0f) { diverged = 1; steps++; break; }
            mlp_zero_grad(&m);
            mlp_backward(&m, B);
            mlp_update(&m, &opt, lr, steps + 1);
        }
        int tail = steps < 20 ? steps : 20;
        double mean = 0, lo = losses[0], sq = 0;
        for (int i = steps - tail; i < steps; i++) { mean += losses[i]; }
        mean /= tail;
        for (int i = 0; i < steps; i++) { lo = fmin(lo, losses[i]); }
        for (int i = steps - tail; i < steps; i++) { sq += (losses[i] - mean) * (losses[i] - mean); }
        double spread = sqrt(sq / tail);
        const char *verdict = diverged ? "diverges" : spread > 0.25 * mean ? "oscillates" : mean < 0.8 * losses[0] ? "converges" : "too slow";
        if (diverged) {
            printf("| %g | %.4f | - | %.4f | - | diverges (loss %g at step %d) |\n", lr, losses[0], lo, losses[steps - 1], steps);
        } else {
            printf("| %g | %.4f | %.4f | %.4f | %.4f | %s |\n", lr, losses[0], mean, lo, spread, verdict);
        }
        mlp_free(&m);
    }
    free(list);
    free(labels);
    free(batch_idx);
    free(order);
    free(losses);
}
// --- end shared-copy: mlp-training ---

// ----------------------------------------------------------------------------
// main: arguments, data, training, report

// the hardware line at start-up
void print_hardware(void) {
    cudaDeviceProp p;
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaGetDeviceProperties(&p, device));
    printf("hardware: GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB | matmul: %s\n", device, p.name, p.major,
           p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, MATMUL_NAMES[matmul_kind]);
}

// the memory, group by group (activations for the larger of a batch and an
// evaluation batch), all of it on the GPU; data_bytes: the images and labels
void mlp_print_memory(const MLP *m, int opt_kind, size_t data_bytes) {
    double MiB = 1048576.0, param_mib = m->num_params * sizeof(float) / MiB;
    printf("GPU memory: parameters %.2f MiB | gradients %.2f MiB | optimizer state %.2f MiB | activations %.2f MiB | data %.1f MiB\n",
           param_mib, param_mib, optimizer_buffers(opt_kind) * param_mib, mlp_activation_floats(m->sizes, m->num_layers,
           m->max_batch) * sizeof(float) / MiB, data_bytes / MiB);
}

#ifndef TESTING

// --- begin shared-copy: mlp-cli ---
// Defaults: the chapter's main run. Two hidden layers and AdamW reach ~0.89-0.90
// test accuracy on Fashion-MNIST within a few epochs; the cosine schedule
// squeezes out the last few tenths of a percent.
static const Options DEFAULTS = {.data_dir = "/usr/share/datasets/fashion-mnist", .layers = "784,512,256,10",
                                 .out_dir = "", .sweep = NULL, .act = ACT_RELU, .opt = OPT_ADAMW, .batch = 128,
                                 .epochs = 15, .warmup = 100, .cosine = 1, .subset = 0, .val_size = 5000, .resume = 0,
                                 .sweep_steps = 200, .phase_every = 0, .lr = 1e-3f, .weight_decay = 0.0f, .momentum = 0.9f,
                                 .dropout = 0.0f, .seed = 1337};

// the flags both programs share, with their defaults
static void print_common_flags(void) {
    const Options *d = &DEFAULTS;
    printf("  -d <dir>      folder with Fashion-MNIST's four *-ubyte.gz files [%s]\n", d->data_dir);
    printf("  -l <sizes>    layer widths, input first, 10 classes last [%s]\n", d->layers);
    printf("  -a <act>      relu or tanh between layers [%s]\n", d->act == ACT_RELU ? "relu" : "tanh");
    printf("  -O <opt>      sgd, momentum or adamw [%s]\n", OPT_NAMES[d->opt]);
    printf("  -r <float>    learning rate [%g]\n", d->lr);
    printf("  -w <float>    weight decay, on weights only [%g]\n", d->weight_decay);
    printf("  -m <float>    momentum (-O momentum) [%g]\n", d->momentum);
    printf("  -p <float>    dropout probability on hidden units [%g]\n", d->dropout);
    printf("  -b <int>      batch size [%d]\n", d->batch);
    printf("  -e <int>      epochs [%d]\n", d->epochs);
    printf("  -u <int>      warm-up steps [%d]\n", d->warmup);
    printf("  -c <sched>    const or cosine learning rate [%s]\n", d->cosine ? "cosine" : "const");
    printf("  -N <int>      train on only this many images (overfitting experiments), 0 = all [%d]\n", d->subset);
    printf("  -v <int>      training images held out for validation [%d]\n", d->val_size);
    printf("  -o <dir>      write metrics.log and a checkpoint per epoch here, \"\" = none [%s]\n", d->out_dir);
    printf("  -y <0|1>      resume from the newest checkpoint in -o [%d]\n", d->resume);
    printf("  -s <int>      random seed [%llu]\n", (unsigned long long)d->seed);
    printf("  -P <int>      time the phases of every this many steps (data, forward, backward, update; a mean per\n"
           "                epoch), 0 = off [%d]\n", d->phase_every);
    printf("  --sweep <lrs> learning-rate sweep over a comma-separated list, then exit\n");
    printf("  -k <int>      steps per rate in the sweep [%d]\n", d->sweep_steps);
    printf("  -h            this help\n");
}

// --- end shared-copy: mlp-cli ---

// --- begin shared-copy: mlp-main ---
// a whole-string float in [0, hi], or a usage error naming the flag
static float parse_float_max(const char *flag, const char *s, float hi) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= 0.0f) || !(v <= hi)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag %s needs a number in [0, %g], got '%%s'", flag, hi);
        usage_error(msg, s);
    }
    return v;
}

// "784,512,256,10" -> sizes; the first must be 784 (28x28 pixels), the last 10
static int parse_layers(const char *s, int *sizes) {
    int n = 0;
    const char *p = s;
    while (*p != '\0') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || n > MAX_LAYERS || (*end != ',' && *end != '\0')) {
            usage_error("-l needs 2 to 9 comma-separated widths, e.g. 784,512,256,10; got '%s'", s);
        }
        sizes[n++] = (int)v;
        if (*end == ',' && end[1] == '\0') { usage_error("-l ends with a comma: '%s'", s); }
        p = *end == ',' ? end + 1 : end;
    }
    if (n < 2 || sizes[0] != 784 || sizes[n - 1] != NUM_CLASSES) {
        usage_error("-l must start with 784 (28x28 pixels) and end with 10 (classes); got '%s'", s);
    }
    return n - 1; // number of weight layers
}

// One of the flags both programs share: argv[*i] with its value argv[*i + 1]
// (*i moves past the value). Anything else is a usage error.
static void parse_common_flag(Options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--sweep") != 0 && (a[0] != '-' || a[1] == '\0' || a[2] != '\0')) { usage_error("unknown argument '%s'", a); }
    if (*i + 1 >= argc) { usage_error("flag %s needs a value", a); }
    const char *v = argv[++*i];
    if (strcmp(a, "--sweep") == 0) { o->sweep = v; return; }
    switch (a[1]) {
    case 'd': o->data_dir = v; break;
    case 'l': o->layers = v; break;
    case 'a':
        if (strcmp(v, "relu") != 0 && strcmp(v, "tanh") != 0) { usage_error("-a is relu or tanh, not '%s'", v); }
        o->act = strcmp(v, "relu") == 0 ? ACT_RELU : ACT_TANH;
        break;
    case 'O':
        o->opt = -1;
        for (int k = 0; k < 3; k++) { if (strcmp(v, OPT_NAMES[k]) == 0) { o->opt = k; } }
        if (o->opt < 0) { usage_error("-O is sgd, momentum or adamw, not '%s'", v); }
        break;
    case 'r': o->lr = parse_float_max(a, v, 1e3f); break;
    case 'w': o->weight_decay = parse_float_max(a, v, 1e3f); break;
    case 'm': o->momentum = parse_float_max(a, v, 1.0f); break;
    case 'p': o->dropout = parse_float_max(a, v, 0.95f); break;
    case 'b': o->batch = (int)parse_int(a, v, 1); break;
    case 'e': o->epochs = (int)parse_int(a, v, 1); break;
    case 'u': o->warmup = (int)parse_int(a, v, 0); break;
    case 'c':
        if (strcmp(v, "const") != 0 && strcmp(v, "cosine") != 0) { usage_error("-c is const or cosine, not '%s'", v); }
        o->cosine = strcmp(v, "cosine") == 0;
        break;
    case 'N': o->subset = (int)parse_int(a, v, 0); break;
    case 'v': o->val_size = (int)parse_int(a, v, 0); break;
    case 'o': o->out_dir = v; break;
    case 'y': o->resume = (int)parse_int(a, v, 0); break;
    case 's': o->seed = (uint64_t)parse_int(a, v, 0); break;
    case 'k': o->sweep_steps = (int)parse_int(a, v, 1); break;
    case 'P': o->phase_every = (int)parse_int(a, v, 0); break;
    default: usage_error("unknown flag '%s'", a);
    }
}

// Everything after the flags: the data, then a sweep, or training (from scratch
// or resumed) and the final report.
static int run(const Options *opts) {
    Options o = *opts;
    int sizes[MAX_LAYERS + 1];
    int L = parse_layers(o.layers, sizes);
    if (o.resume && o.out_dir[0] == '\0') { usage_error("-y needs an output directory (-o)%s", ""); }
    if (o.out_dir[0] != '\0' && mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "Error: could not create output directory %s: %s\n", o.out_dir, strerror(errno));
        return EXIT_FAILURE;
    }

    // the data: train (minus the validation images) and test
    Dataset train_set, test_set;
    dataset_load(&train_set, o.data_dir, "train");
    dataset_load(&test_set, o.data_dir, "t10k");
    if (train_set.dim != 784 || test_set.dim != 784) {
        fprintf(stderr, "Error: %s: images are not 28x28\n%s\n", o.data_dir, DATA_HINT);
        return EXIT_FAILURE;
    }
    if ((size_t)o.val_size >= train_set.n) {
        fprintf(stderr, "Error: -v %d holds out every training image (there are %zu)\n", o.val_size, train_set.n);
        return EXIT_FAILURE;
    }
    size_t *split = (size_t *)mallocCheck(train_set.n * sizeof(size_t));
    random_permutation(split, train_set.n, rng_key(o.seed, STREAM_SPLIT));
    const size_t *val_idx = split, *train_idx = split + o.val_size;
    size_t n_val = (size_t)o.val_size, n_train = train_set.n - n_val;
    if (o.subset > 0 && (size_t)o.subset < n_train) { n_train = (size_t)o.subset; }
    printf("data: %s: %zu training, %zu validation, %zu test images\n", o.data_dir, n_train, n_val, test_set.n);

    if ((size_t)o.batch > n_train) {
        fprintf(stderr, "Error: batch size -b %d is larger than the %zu training images\nHINT: lower -b, or raise -N\n", o.batch, n_train);
        return EXIT_FAILURE;
    }
    if ((double)n_train * o.epochs / o.batch > 2e9) {
        fprintf(stderr, "Error: -e %d epochs of batch %d make more than 2^31 updates\n", o.epochs, o.batch);
        return EXIT_FAILURE;
    }
    print_hardware();
    if (o.sweep != NULL) {
        lr_sweep(&o, &train_set, train_idx, n_train, sizes, L);
        free(split);
        dataset_free(&train_set);
        dataset_free(&test_set);
        return EXIT_SUCCESS;
    }

    MLP m;
    mlp_build(&m, sizes, L, o.act, o.dropout);
    mlp_init(&m, o.seed);
    mlp_allocate_activations(&m, (size_t)o.batch > 1000 ? (size_t)o.batch : 1000);
    Optimizer opt = {o.opt, o.lr, o.weight_decay, o.momentum, 0.9f, 0.999f, 1e-8f};
    CheckpointSettings settings = {o.lr, o.weight_decay, o.momentum, o.dropout, o.batch, o.epochs, o.warmup, o.cosine,
                                   o.subset, o.val_size};
    int steps_per_epoch = (int)((n_train + o.batch - 1) / o.batch);
    Position pos = {0, 0};
    if (!o.resume && o.out_dir[0] != '\0' && find_latest_checkpoint(o.out_dir) >= 0) {
        fprintf(stderr, "Error: %s already holds checkpoints; not overwriting them\nHINT: resume with -y 1, or pick another -o\n",
                o.out_dir);
        return EXIT_FAILURE;
    }
    if (o.resume) {
        int epoch = find_latest_checkpoint(o.out_dir);
        if (epoch < 0) {
            fprintf(stderr, "Error: -y 1 but no checkpoint mlp_<epoch>.bin in %s\n%s\n", o.out_dir, CKPT_HINT);
            return EXIT_FAILURE;
        }
        char path[4200];
        snprintf(path, sizeof(path), "%s/mlp_%d.bin", o.out_dir, epoch);
        pos = mlp_load(&m, &opt, o.seed, &settings, steps_per_epoch, path);
        if (pos.epoch >= o.epochs) {
            fprintf(stderr, "Error: %s is after epoch %d: nothing left to do (raise -e to train longer)\n", path, pos.epoch);
            return EXIT_FAILURE;
        }
        printf("resuming from %s: %d epochs, %d updates done\n", path, pos.epoch, pos.step);
    }
    printf("network:");
    for (int l = 0; l <= L; l++) { printf(" %d", sizes[l]); }
    printf(" | %s | %zu parameters | %s lr %g wd %g | dropout %g | batch %d | %d epochs | seed %llu\n",
           o.act == ACT_RELU ? "relu" : "tanh", m.num_params, OPT_NAMES[o.opt], o.lr, o.weight_decay, o.dropout, o.batch,
           o.epochs, (unsigned long long)o.seed);
    mlp_print_memory(&m, o.opt, (train_set.n + test_set.n) * (train_set.dim + 1));
    FILE *metrics = NULL;
    if (o.out_dir[0] != '\0') {
        char path[4200];
        snprintf(path, sizeof(path), "%s/metrics.log", o.out_dir);
        if (o.resume) { log_truncate_after(path, "epoch:%d", pos.epoch); }
        metrics = fopenCheck(path, o.resume ? "a" : "w");
    }
    double t0 = wall_seconds();
    train(&m, &opt, &o, &settings, &train_set, train_idx, n_train, val_idx, n_val, pos, metrics);
    printf("training took %.1f s\n", wall_seconds() - t0);
    report(&m, &test_set);
    if (metrics != NULL) { fcloseCheck(metrics); }
    mlp_free(&m);
    free(split);
    dataset_free(&train_set);
    dataset_free(&test_set);
    return 0;
}
// --- end shared-copy: mlp-main ---

// ----------------------------------------------------------------------------
// --check: the GPU against a CPU reference, from identical weights

// The CPU reference: forward and backward of one batch in double precision, in
// plain loops (nothing shared with the kernels above but the parameter layout).
// Dropout masks are drawn on the host with the same generator and key as the
// GPU's. Writes the logits (B, K) and every parameter gradient (same layout as
// the parameters); returns the mean loss.
static double reference_forward_backward(const MLP *m, const double *theta, double *grad, double *logits, const float *x,
                                         const int *y, size_t B, uint64_t seed, uint64_t step) {
    int L = m->num_layers;
    double *h[MAX_LAYERS + 1], *z[MAX_LAYERS], *mask[MAX_LAYERS];
    const double *W[MAX_LAYERS], *bias[MAX_LAYERS];
    size_t off = 0, widest = 0;
    for (int l = 0; l <= L; l++) {
        size_t n = B * m->sizes[l];
        widest = (size_t)m->sizes[l] > widest ? (size_t)m->sizes[l] : widest;
        h[l] = (double *)mallocCheck(n * sizeof(double));
        if (l < L) {
            W[l] = theta + off;
            bias[l] = theta + off + (size_t)m->sizes[l + 1] * m->sizes[l];
            off += (size_t)m->sizes[l + 1] * m->sizes[l] + m->sizes[l + 1];
            z[l] = (double *)mallocCheck(B * m->sizes[l + 1] * sizeof(double));
            mask[l] = (double *)mallocCheck(B * m->sizes[l + 1] * sizeof(double));
        }
    }
    for (size_t i = 0; i < B * (size_t)m->sizes[0]; i++) { h[0][i] = x[i]; }
    for (int l = 0; l < L; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        uint64_t key = rng_subkey(seed, STREAM_DROPOUT, step * MAX_LAYERS + l);
        for (size_t b = 0; b < B; b++) {
            for (size_t o = 0; o < out; o++) {
                double s = bias[l][o];
                for (size_t i = 0; i < in; i++) { s += h[l][b * in + i] * W[l][o * in + i]; }
                z[l][b * out + o] = s;
                if (l == L - 1) { continue; }
                double a = m->act == ACT_RELU ? (s > 0 ? s : 0) : tanh(s);
                size_t i = b * out + o;
                mask[l][i] = m->dropout > 0.0f ? (rng_uniform_at(key, i) >= m->dropout ? 1.0 / (1.0 - m->dropout) : 0.0) : 1.0;
                h[l + 1][i] = a * mask[l][i];
            }
        }
    }
    // softmax + cross-entropy; dz (B, widest) is the gradient at the current layer's output
    size_t K = m->sizes[L];
    double loss = 0.0, *dz = (double *)mallocCheck(B * widest * sizeof(double)), *dh = (double *)mallocCheck(B * widest * sizeof(double));
    for (size_t b = 0; b < B; b++) {
        const double *zb = z[L - 1] + b * K;
        double mx = zb[0], sum = 0.0;
        for (size_t k = 1; k < K; k++) { mx = fmax(mx, zb[k]); }
        for (size_t k = 0; k < K; k++) { sum += exp(zb[k] - mx); }
        loss += mx + log(sum) - zb[y[b]];
        for (size_t k = 0; k < K; k++) {
            logits[b * K + k] = zb[k];
            dz[b * K + k] = (exp(zb[k] - mx) / sum - (k == (size_t)y[b])) / B;
        }
    }
    memset(grad, 0, m->num_params * sizeof(double));
    off = m->num_params;
    for (int l = L - 1; l >= 0; l--) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        off -= out * in + out;
        double *dW = grad + off, *db = grad + off + out * in;
        for (size_t b = 0; b < B; b++) {
            for (size_t o = 0; o < out; o++) {
                db[o] += dz[b * out + o];
                for (size_t i = 0; i < in; i++) { dW[o * in + i] += dz[b * out + o] * h[l][b * in + i]; }
            }
        }
        if (l == 0) { break; }
        for (size_t b = 0; b < B; b++) {
            for (size_t i = 0; i < in; i++) {
                double s = 0.0;
                for (size_t o = 0; o < out; o++) { s += dz[b * out + o] * W[l][o * in + i]; }
                double zi = z[l - 1][b * in + i];
                double dact = m->act == ACT_RELU ? (zi > 0 ? 1.0 : 0.0) : 1.0 - tanh(zi) * tanh(zi);
                dh[b * in + i] = s * mask[l - 1][b * in + i] * dact;
            }
        }
        double *tmp = dz; dz = dh; dh = tmp;
    }
    for (int l = 0; l <= L; l++) { free(h[l]); }
    for (int l = 0; l < L; l++) { free(z[l]); free(mask[l]); }
    free(dz);
    free(dh);
    return loss / B;
}

// The reference update in double, the formulas of mlp_update, applied to p, m, v
// (num_params each) with gradient g.
static void reference_update(const MLP *mlp, const Optimizer *opt, double *p, double *m, double *v, const double *g,
                             double lr, int t) {
    double bc1 = 1.0 - pow(opt->beta1, t), bc2 = 1.0 - pow(opt->beta2, t);
    size_t off = 0;
    for (int l = 0; l < mlp->num_layers; l++) {
        for (int is_bias = 0; is_bias < 2; is_bias++) {
            size_t n = is_bias ? (size_t)mlp->sizes[l + 1] : (size_t)mlp->sizes[l + 1] * mlp->sizes[l];
            double wd = is_bias ? 0.0 : opt->weight_decay;
            for (size_t i = off; i < off + n; i++) {
                if (opt->kind == OPT_ADAMW) {
                    m[i] = opt->beta1 * m[i] + (1.0 - opt->beta1) * g[i];
                    v[i] = opt->beta2 * v[i] + (1.0 - opt->beta2) * g[i] * g[i];
                    p[i] = p[i] * (1.0 - lr * wd) - lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + opt->eps);
                } else if (opt->kind == OPT_MOMENTUM) {
                    double gi = g[i] + wd * p[i];
                    m[i] = t == 1 ? gi : opt->momentum * m[i] + gi;
                    p[i] -= lr * m[i];
                } else {
                    p[i] -= lr * (g[i] + wd * p[i]);
                }
            }
            off += n;
        }
    }
}

// Compare n GPU values with the reference: max |difference| relative to the
// reference's largest magnitude. Prints one line; returns 1 if within tol.
static int check_tensor(const char *what, int step, const float *gpu, const double *ref, size_t n, double tol) {
    double max_diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        max_diff = fmax(max_diff, fabs(gpu[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    double rel = max_diff / fmax(scale, 1e-30);
    int ok = rel <= tol && isfinite(rel);
    printf("step %d %-14s %9zu values | first gpu %11.4e ref %11.4e | max |ref| %10.4e | max |gpu-ref| %10.4e | relative %9.2e %s\n",
           step, what, n, gpu[0], ref[0], scale, max_diff, rel, ok ? "OK" : "NOT OK");
    return ok;
}

// The same for an update, compared as the step itself (new minus old values):
// its terms are measured against the step's size, not the weights' (a missing
// weight decay term changes a step by ~1e-2 of itself, but a weight by ~1e-6).
// Storing the new weight in fp32 rounds it by up to half an ulp, which can be
// large next to a small step: that much (2^-24 |new weight|) is allowed on top.
static int check_step(const char *what, int step, const float *gpu_new, const double *before, const double *ref_new,
                      size_t n, double tol) {
    double max_diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((gpu_new[i] - before[i]) - (ref_new[i] - before[i])) - 0x1p-24 * fabs(ref_new[i]);
        max_diff = fmax(max_diff, diff);
        scale = fmax(scale, fabs(ref_new[i] - before[i]));
    }
    double rel = max_diff / fmax(scale, 1e-30);
    int ok = rel <= tol && isfinite(rel);
    printf("step %d %-14s %9zu values | first gpu %11.4e ref %11.4e | max |ref| %10.4e | max |gpu-ref| %10.4e | relative %9.2e %s\n",
           step, what, n, gpu_new[0] - before[0], ref_new[0] - before[0], scale, max_diff, rel, ok ? "OK" : "NOT OK");
    return ok;
}

// Tolerances, relative to the largest reference value of each tensor. The GPU
// computes in fp32, the reference in double: a dot product of n fp32 terms is
// off by about sqrt(n) * 6e-8 of its scale (n = 784 for the first layer: ~2e-6).
// Updates are compared as steps (check_step). Measured (emulator and H200): up to 1.3e-6 (forward), 1.1e-6 (gradients),
// 3e-6 (steps), 1e-7 (optimizer state). Tolerances are ~10x that, at least
// 100x below what a wrong index, term or constant gives (1e-3 and above).
#define TOL_FORWARD 2e-5
#define TOL_GRADIENT 2e-5
#define TOL_UPDATE 5e-5

// Run `steps` training steps on the GPU. Before each, the reference takes the
// GPU's current parameters and optimizer state; after it, every tensor the step
// produced is compared: logits, loss, each gradient, each updated parameter
// tensor and the optimizer state. (Starting each step from the GPU's state
// keeps fp32 rounding from accumulating across steps: each step is checked on
// its own, tightly.)
static int gpu_check(const Options *o, int steps) {
    int sizes[MAX_LAYERS + 1];
    int L = parse_layers(o->layers, sizes);
    Dataset ds;
    dataset_load(&ds, o->data_dir, "train");
    size_t B = (size_t)o->batch;
    if (B * steps > ds.n) {
        fprintf(stderr, "Error: --check needs %d batches of %zu images; %s has %zu\n", steps, B, o->data_dir, ds.n);
        exit(EXIT_FAILURE);
    }
    MLP m;
    mlp_build(&m, sizes, L, o->act, o->dropout);
    mlp_init(&m, o->seed);
    mlp_allocate_activations(&m, B);
    Optimizer opt = {o->opt, o->lr, o->weight_decay, o->momentum, 0.9f, 0.999f, 1e-8f};
    printf("check: GPU (matmul %s) against a double-precision CPU reference | network", MATMUL_NAMES[matmul_kind]);
    for (int l = 0; l <= L; l++) { printf(" %d", sizes[l]); }
    printf(" | %s | %s lr %g wd %g | dropout %g | batch %zu | %d steps\n", o->act == ACT_RELU ? "relu" : "tanh",
           OPT_NAMES[o->opt], o->lr, o->weight_decay, o->dropout, B, steps);
    size_t P = m.num_params, K = sizes[L];
    size_t *order = (size_t *)mallocCheck(ds.n * sizeof(size_t));
    random_permutation(order, ds.n, rng_subkey(o->seed, STREAM_EPOCH, 0));
    int *labels = (int *)mallocCheck(B * sizeof(int));
    float *x = (float *)mallocCheck(B * sizes[0] * sizeof(float)), *gpu = (float *)mallocCheck(P * sizeof(float));
    double *theta = (double *)mallocCheck(P * sizeof(double)), *grad = (double *)mallocCheck(P * sizeof(double));
    double *opt_m = (double *)mallocCheck(P * sizeof(double)), *opt_v = (double *)mallocCheck(P * sizeof(double));
    double *gpu_grad = (double *)mallocCheck(P * sizeof(double)), *logits = (double *)mallocCheck(B * K * sizeof(double));
    double *before = (double *)mallocCheck(P * sizeof(double));
    int passed = 0, failed = 0;
    for (int s = 0; s < steps; s++) {
        // the reference starts from the GPU's state
        mlp_to_host(&m);
        for (size_t i = 0; i < P; i++) {
            theta[i] = m.params[i];
            opt_m[i] = m.opt_m != NULL ? m.opt_m[i] : 0.0;
            opt_v[i] = m.opt_v != NULL ? m.opt_v[i] : 0.0;
        }
        gather_batch(x, labels, &ds, order + s * B, B);
        mlp_set_batch(&m, labels, &ds, order + s * B, B);
        float lr = get_lr(o->cosine, o->lr, s, o->warmup, steps);
        float loss = mlp_forward(&m, labels, B, 1, o->seed, (uint64_t)s, NULL);
        mlp_zero_grad(&m);
        mlp_backward(&m, B);
        const float *gpu_logits = mlp_logits(&m, B);
        double ref_loss = reference_forward_backward(&m, theta, grad, logits, x, labels, B, o->seed, (uint64_t)s);
        int ok = check_tensor("logits", s, gpu_logits, logits, B * K, TOL_FORWARD);
        ok += check_tensor("loss", s, &loss, &ref_loss, 1, TOL_FORWARD);
        mlp_copy_block(&m, gpu, m.grads, 1);
        for (size_t i = 0; i < P; i++) { gpu_grad[i] = gpu[i]; }
        size_t off = 0;
        char name[32];
        for (int l = 0; l < L; l++) {
            size_t nw = (size_t)sizes[l + 1] * sizes[l], nb = sizes[l + 1];
            snprintf(name, sizeof(name), "grad W%d", l);
            ok += check_tensor(name, s, gpu + off, grad + off, nw, TOL_GRADIENT);
            snprintf(name, sizeof(name), "grad b%d", l);
            ok += check_tensor(name, s, gpu + off + nw, grad + off + nw, nb, TOL_GRADIENT);
            off += nw + nb;
        }
        int checks = 2 + 2 * L;
        // the update, from the same state and the GPU's own gradient, compared as steps
        memcpy(before, theta, P * sizeof(double));
        mlp_update(&m, &opt, lr, s + 1);
        reference_update(&m, &opt, theta, opt_m, opt_v, gpu_grad, lr, s + 1);
        mlp_to_host(&m);
        off = 0;
        for (int l = 0; l < L; l++) {
            size_t nw = (size_t)sizes[l + 1] * sizes[l], nb = sizes[l + 1];
            snprintf(name, sizeof(name), "step of W%d", l);
            ok += check_step(name, s, m.params + off, before + off, theta + off, nw, TOL_UPDATE);
            snprintf(name, sizeof(name), "step of b%d", l);
            ok += check_step(name, s, m.params + off + nw, before + off + nw, theta + off + nw, nb, TOL_UPDATE);
            off += nw + nb;
        }
        checks += 2 * L;
        if (m.opt_m != NULL) { ok += check_tensor(opt.kind == OPT_ADAMW ? "adam m" : "momentum", s, m.opt_m, opt_m, P, TOL_UPDATE); checks++; }
        if (m.opt_v != NULL) { ok += check_tensor("adam v", s, m.opt_v, opt_v, P, TOL_UPDATE); checks++; }
        passed += ok;
        failed += checks - ok;
    }
    free(order); free(labels); free(x); free(gpu); free(theta); free(grad); free(opt_m); free(opt_v); free(gpu_grad); free(logits);
    free(before);
    mlp_free(&m);
    dataset_free(&ds);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

// ----------------------------------------------------------------------------
// --time: the step time of each matmul path, measured properly

// For each matmul path: warm-up steps first (the first launches load kernels and
// let cuBLAS pick its algorithms), then each training step (forward, backward,
// update) between two CUDA events; the median of the steps. The events time
// the GPU's work; the step's closing copy of the losses keeps the host in step.
static int time_steps(const Options *o, int steps) {
    int sizes[MAX_LAYERS + 1];
    int L = parse_layers(o->layers, sizes);
    Dataset ds;
    dataset_load(&ds, o->data_dir, "train");
    size_t B = (size_t)o->batch;
    if (B > ds.n) { fprintf(stderr, "Error: batch %zu is larger than %s's %zu images\n", B, o->data_dir, ds.n); exit(EXIT_FAILURE); }
    size_t *order = (size_t *)mallocCheck(ds.n * sizeof(size_t));
    random_permutation(order, ds.n, rng_subkey(o->seed, STREAM_EPOCH, 0));
    int *labels = (int *)mallocCheck(B * sizeof(int));
    float *ms = (float *)mallocCheck((size_t)steps * sizeof(float));
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    double flops = 0.0; // per step: forward 2 B IN OUT per layer, backward twice that (once for the input layer)
    for (int l = 0; l < L; l++) { flops += (l == 0 ? 4.0 : 6.0) * B * sizes[l] * sizes[l + 1]; } // (no dinp for layer 0)
    printf("step time, network");
    for (int l = 0; l <= L; l++) { printf(" %d", sizes[l]); }
    printf(", batch %zu, %s, median of %d steps after 10 warm-up steps\n", B, OPT_NAMES[o->opt], steps);
    printf("| matmul | ms/step | samples/s | matmul TFLOP/s | vs cuBLAS |\n|---|---|---|---|---|\n");
    float cublas_ms = 0.0f;
    for (int kind = MATMUL_CUBLAS; kind >= MATMUL_NAIVE; kind--) {
        matmul_kind = kind;
        MLP m;
        mlp_build(&m, sizes, L, o->act, o->dropout);
        mlp_init(&m, o->seed);
        mlp_allocate_activations(&m, B);
        Optimizer opt = {o->opt, o->lr, o->weight_decay, o->momentum, 0.9f, 0.999f, 1e-8f};
        for (int s = -10; s < steps; s++) {
            size_t first = ((size_t)(s + 10) * B) % (ds.n - B + 1);
            mlp_set_batch(&m, labels, &ds, order + first, B); // (outside the timed part: a host-to-device copy)
            cudaCheck(cudaEventRecord(start));
            mlp_forward(&m, labels, B, 1, o->seed, (uint64_t)(s + 10), NULL);
            mlp_zero_grad(&m);
            mlp_backward(&m, B);
            mlp_update(&m, &opt, o->lr, s + 11);
            cudaCheck(cudaEventRecord(stop));
            cudaCheck(cudaEventSynchronize(stop));
            if (s >= 0) { cudaCheck(cudaEventElapsedTime(&ms[s], start, stop)); }
        }
        // median: sort the few values
        for (int i = 1; i < steps; i++) {
            for (int j = i; j > 0 && ms[j - 1] > ms[j]; j--) { float t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t; }
        }
        float median = ms[steps / 2];
        if (kind == MATMUL_CUBLAS) { cublas_ms = median; }
        printf("| %s | %.3f | %.0f | %.2f | %.0f%% |\n", MATMUL_NAMES[kind], median, B / (median * 1e-3),
               flops / (median * 1e-3) / 1e12, 100.0 * cublas_ms / median);
        mlp_free(&m);
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    free(order); free(labels); free(ms);
    dataset_free(&ds);
    return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    Options o = DEFAULTS;
    int check = 0, timing = 0, matmul_chosen = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("Usage: %s [options]\nOptions (default in brackets):\n", PROGRAM);
            print_common_flags();
            printf("  -M <matmul>   naive, tiled or cublas [cublas]\n");
            printf("  -G <GiB>      behave as if the GPU had only this much memory, 0 = all [0]\n");
            printf("  --check       3 steps on the GPU, each tensor compared with a CPU reference, then exit\n");
            printf("  --time        the step time of each matmul path (naive, tiled, cublas), then exit\n");
            return 0;
        }
        if (strcmp(argv[i], "--check") == 0) { check = 1; continue; }
        if (strcmp(argv[i], "--time") == 0) { timing = 1; continue; }
        if (strcmp(argv[i], "-G") == 0) {
            if (i + 1 >= argc) { usage_error("flag %s needs a value", argv[i]); }
            gpu_budget_set(argv[i], argv[i + 1]);
            i++;
            continue;
        }
        if (strcmp(argv[i], "-M") == 0) {
            matmul_chosen = 1;
            if (i + 1 >= argc) { usage_error("flag %s needs a value", argv[i]); }
            const char *v = argv[++i];
            matmul_kind = -1;
            for (int k = 0; k < 3; k++) { if (strcmp(v, MATMUL_NAMES[k]) == 0) { matmul_kind = k; } }
            if (matmul_kind < 0) { usage_error("-M is naive, tiled or cublas, not '%s'", v); }
            continue;
        }
        parse_common_flag(&o, argc, argv, &i);
    }
    // --check and --time use the data, network, optimizer and batch flags, nothing else
    if ((check || timing) && ((check && timing) || (timing && matmul_chosen) || o.out_dir[0] != '\0' || o.resume ||
                              o.sweep != NULL || o.subset != DEFAULTS.subset || o.val_size != DEFAULTS.val_size ||
                              o.epochs != DEFAULTS.epochs)) {
        usage_error("--check and --time run alone: not together, and without -o, -y, -N, -v, -e or --sweep (--time without -M: it times all three)%s", "");
    }
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        fprintf(stderr, "Error: no usable CUDA GPU: %s\nHINT: train_mlp.c is the same program on the CPU (make train_mlp)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return EXIT_FAILURE;
    }
    cublasCheck(cublasCreate(&cublas_handle));
    // the default math mode keeps fp32 matmuls in full fp32 (TF32 tensor cores only if asked for)
    cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_DEFAULT_MATH));
    int rc = check ? gpu_check(&o, 3) : timing ? time_steps(&o, 50) : run(&o);
    cublasCheck(cublasDestroy(cublas_handle));
    return rc;
}
#endif
