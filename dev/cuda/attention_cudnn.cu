/*
attention_cudnn.cu: train_gpt2.cu's causal self-attention, forward and backward, through
cuDNN's fused flash attention (cuDNN 9, called through the cudnn-frontend headers). A
draft of the trainer's optional `make USE_CUDNN=1` path; one variant, nothing to ladder.

    forward:  out (B,T,C) = softmax(q k^T / sqrt(HS), causal) v per head, and the
              softmax statistics stats (B,NH,T) fp32: logsumexp of each row's scores
    backward: dqkv (B,T,3C) written (=), from dout (B,T,C), qkv, out and stats

qkv is the trainer's (B,T,3C) activation as the qkv matmul writes it: a token's row
holds its q, then k, then v, each NH heads of HS = C/NH. cuDNN reads q, k, v in place as
(B,NH,T,HS) views with strides (3C*T, HS, 3C, 1), so we need no permute kernels, no
qkvr copy and no (B,NH,T,T) att: the stats, 4 bytes a row, are all the backward needs
to rebuild the probabilities tile by tile (Dao et al. 2022, "FlashAttention"). The I/O is
bf16 (default) or fp16 (-DENABLE_FP16), the arithmetic fp32; cuDNN has no fp32 flash
attention, so an fp32 build stops at #error.

main checks, at B,T,NH,C = 2,64,4,256, 3,67,2,128 (a T that is no multiple of 64) and
GPT-2 small's 4,1024,12,768, with fresh random inputs (seed -s), the forward's out and
stats and the backward's dq, dk, dv against a CPU reference in double written plainly
from the same 16-bit inputs; and that a second backward is bitwise equal to the first
(we ask cuDNN for its deterministic backward). Then it times forward and backward at
the trainer's B,T,NH,C = 64,1024,12,768: warm-up, CUDA events, median of 20, ms and
TFLOP/s; then at dev/cuda/flash_attention.cu's shapes (T = 1K/4K/16K, HS = 64/128, 16 K
tokens a batch), in that table's columns (make gpu-check prints these rows under the
ladder's; its grouped heads at HS = 128 are G = 1 here, the same FLOPs). It ends with "N passed, M failed" and exits non-zero if a check failed. Without
a GPU it says so and exits 0: there is nothing to run (the CPU emulator has no cuDNN).
TODO: the H200 numbers go here once measured (written on a machine without a GPU).

Needs cuDNN 9 (libcudnn, its headers: CUDNN_HOME) and the cudnn-frontend headers (MIT
licensed, header-only C++17; tested with 1.32.0), which pip fetches without their
Python dependencies (nvidia-cutlass-dsl and others, which the headers do not need):
    pip install --no-deps --target $HOME/.cache/cudnn-frontend nvidia-cudnn-frontend==1.32.0
    (headers in $HOME/.cache/cudnn-frontend/include; a plain pip install puts them in
    site-packages/include and pulls in those dependencies)
Build (the frontend goes in with -isystem: its headers are not -Wall -Wextra clean; it
calls NVRTC for an experimental engine of its own, hence -lnvrtc; -DENABLE_FP16 for fp16):
    nvcc -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -gencode arch=compute_90,code=sm_90 \
         -gencode arch=compute_120,code=sm_120 -DENABLE_BF16 -isystem $HOME/.cache/cudnn-frontend/include \
         -I$CUDNN_HOME/include dev/cuda/attention_cudnn.cu -L$CUDNN_HOME/lib -lcudnn -lnvrtc -o dev/cuda/attention_cudnn
    ./dev/cuda/attention_cudnn          (-c checks only, -s SEED, -h all flags)
(CUDNN_HOME is /usr/local/cuda where the toolkit ships cuDNN, as on our c-kernels machines;
a cuDNN from the nvidia-cudnn-cu12/13 wheels also needs its lib in LD_LIBRARY_PATH.)
The frontend is heavy to compile, so every line that touches it is host-only code inside
#ifndef __CUDA_ARCH__: nvcc's device passes (one per architecture) then skip it. On our
2-core machines this file then takes about 1.5 minutes of CPU for both architectures,
where a bare #include of the frontend, unguarded, took 3 for one.
CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stdout show what the frontend builds.

Left out: inference without stats (the trainer always runs the backward), dropout, other
masks, the UNIFIED/COMPOSITE choice (the frontend picks), and CUDA graphs.
*/
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>
#include "common.h" // cudaCheck, rng_uniform, parse_args, require_gpu, time_median_ms
#ifndef __CUDA_ARCH__
// without nlohmann's JSON library, which the frontend uses only to print and save
// graphs: a third less to compile
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h> // host only: see the header comment
#endif

// ----------------------------------------------------------------------------
// precision: 16-bit I/O only, so not precision.h (which has fp32 and bf16)

#if defined(ENABLE_FP32)
#error "cuDNN's flash attention takes 16-bit q, k, v: build with -DENABLE_BF16 (the default) or -DENABLE_FP16"
#elif defined(ENABLE_FP16)
typedef __half floatX;
#define PRECISION_NAME "fp16"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif
// host-side conversions, for the random inputs and the checks (cuDNN does the device side)
static inline float to_float(floatX x) { return (float)x; }
static inline floatX from_float(float x) { return (floatX)x; }

// ----------------------------------------------------------------------------
// cuDNN: the handle, the workspace, the graphs. Declared here, defined below for the
// host only (a device pass sees main's calls, and needs no more than these lines).

// device memory or an error naming what did not fit (train_gpt2.cu's also keeps to its -G budget)
__attribute__((unused)) static void *cuda_malloc_check(size_t bytes, const char *what) { // (unused: the device pass)
    void *p = NULL;
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, "Error: out of GPU memory: %s needs %.1f MiB\n", what, bytes / 1048576.0);
        exit(EXIT_FAILURE);
    }
    return p;
}
__attribute__((unused)) static void cuda_free_check(void *p) { cudaCheck(cudaFree(p)); } // (train_gpt2.cu's also keeps its ledger)

// --- begin shared-copy: cudnn-attention ---
void cudnn_create(void);
void cudnn_destroy(void);
void cudnn_describe(char *buf, size_t size);
int cudnn_backward_is_deterministic(void);
size_t cudnn_workspace_bytes(void);
void attention_forward_cudnn(floatX *out, float *stats, const floatX *qkv, size_t B, size_t T, size_t NH, size_t C);
void attention_backward_cudnn(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                              const float *stats, size_t B, size_t T, size_t NH, size_t C);

#ifndef __CUDA_ARCH__
namespace fe = cudnn_frontend;
#if defined(ENABLE_FP16)
static const fe::DataType_t CUDNN_FLOATX = fe::DataType_t::HALF;
#else
static const fe::DataType_t CUDNN_FLOATX = fe::DataType_t::BFLOAT16;
#endif

// check macros in the style of cudaCheck: the library's message, file and line, exit 1
static void cudnn_check(cudnnStatus_t status, const char *file, int line) {
    if (status != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "Error: cuDNN: %s [%s:%d]\n", cudnnGetErrorString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudnnCheck(status) cudnn_check(status, __FILE__, __LINE__)
static void cudnn_fe_check(const fe::error_object &e, const char *file, int line) {
    if (e.is_bad()) {
        fprintf(stderr, "Error: cuDNN frontend: %s [%s:%d]\n", e.err_msg.c_str(), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudnnFECheck(err) cudnn_fe_check(err, __FILE__, __LINE__)

static cudnnHandle_t cudnn_handle;
// one workspace for every graph, grown to the largest any of them asks for (cuDNN's
// backward wants some for its fp32 dq accumulator; the forward often none)
static void *cudnn_workspace = NULL;
static size_t cudnn_workspace_size = 0;
// Building a graph takes cuDNN's heuristics and plan compilation, from tens of ms to
// seconds, so we build each shape once and keep it. The trainer meets one or two
// shapes (B,T for training and for evaluation); NH and HS are in the key for main's checks.
typedef std::array<int64_t, 4> GraphKey; // B, T, NH, HS
static std::map<GraphKey, std::shared_ptr<fe::graph::Graph>> forward_graphs, backward_graphs;
static int backward_deterministic = 1; // cleared if cuDNN has no deterministic backward for a shape

// Each tensor of a graph has a number (UID); at run time a map from these numbers to
// device pointers binds the graph to the buffers of one call.
enum { Q_UID = 1, K_UID, V_UID, O_UID, STATS_UID, DO_UID, DQ_UID, DK_UID, DV_UID };

void cudnn_create(void) { cudnnCheck(cudnnCreate(&cudnn_handle)); }

void cudnn_destroy(void) {
    forward_graphs.clear(); // the plans first: they were built on the handle
    backward_graphs.clear();
    cuda_free_check(cudnn_workspace);
    cudnn_workspace = NULL;
    cudnn_workspace_size = 0;
    cudnnCheck(cudnnDestroy(cudnn_handle));
}

void cudnn_describe(char *buf, size_t size) {
    snprintf(buf, size, "cuDNN %zu (headers %d), cudnn-frontend %d.%d.%d", cudnnGetVersion(), (int)CUDNN_VERSION,
             CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
}

int cudnn_backward_is_deterministic(void) { return backward_deterministic; }
size_t cudnn_workspace_bytes(void) { return cudnn_workspace_size; }

// (B,NH,T,HS) views. One of q, k, v inside qkv (B,T,3C): heads HS apart within a token's
// row, tokens 3C apart, sequences 3C*T apart; the pointer bound at run time (qkv, +C or
// +2C) picks which of the three. The same strides serve dq, dk, dv inside dqkv.
static std::vector<int64_t> qkv_strides(int64_t T, int64_t NH, int64_t HS) {
    return {3 * NH * HS * T, HS, 3 * NH * HS, 1};
}
// out and dout (B,T,C): the same with C in place of 3C
static std::vector<int64_t> out_strides(int64_t T, int64_t NH, int64_t HS) { return {NH * HS * T, HS, NH * HS, 1}; }

static std::shared_ptr<fe::graph::Tensor_attributes> input_tensor(fe::graph::Graph &graph, const char *name, int64_t uid,
                                                                  std::vector<int64_t> dim, std::vector<int64_t> stride) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

// The steps from a described graph to a runnable plan; the first error stops them.
// Heuristic mode A: cuDNN's fast heuristic, which ranks its engines for the shape.
static fe::error_object build_graph(fe::graph::Graph &graph) {
    if (fe::error_object e = graph.validate(); e.is_bad()) { return e; }
    if (fe::error_object e = graph.build_operation_graph(cudnn_handle); e.is_bad()) { return e; }
    if (fe::error_object e = graph.create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) { return e; }
    if (fe::error_object e = graph.check_support(); e.is_bad()) { return e; }
    if (fe::error_object e = graph.build_plans(); e.is_bad()) { return e; }
    int64_t bytes = 0;
    if (fe::error_object e = graph.get_workspace_size(bytes); e.is_bad()) { return e; }
    if ((size_t)bytes > cudnn_workspace_size) {
        cuda_free_check(cudnn_workspace); // (waits for the GPU)
        cudnn_workspace = cuda_malloc_check((size_t)bytes, "cuDNN's attention workspace"); // (within -G's budget)
        cudnn_workspace_size = (size_t)bytes;
    }
    return fe::error_object();
}

// The forward graph of one shape: one SDPA node. Scale and causal mask are fixed, so
// they are baked into the graph instead of being passed at every call.
static std::shared_ptr<fe::graph::Graph> forward_graph(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    GraphKey key = {B, T, NH, HS};
    auto found = forward_graphs.find(key);
    if (found != forward_graphs.end()) { return found->second; }
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(CUDNN_FLOATX)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    std::vector<int64_t> dim = {B, NH, T, HS}, qkv_stride = qkv_strides(T, NH, HS);
    auto Q = input_tensor(*graph, "Q", Q_UID, dim, qkv_stride);
    auto K = input_tensor(*graph, "K", K_UID, dim, qkv_stride);
    auto V = input_tensor(*graph, "V", V_UID, dim, qkv_stride);
    // causal: query t sees keys 0..t, the band's right edge on the diagonal (right
    // bound 0), the diagonal starting at the top left as q and k have the same length
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(1.0f / sqrtf((float)HS))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
    auto [O, stats] = graph->sdpa(Q, K, V, options);
    // out (B,T,C) as the trainer lays it out: the heads side by side in a token's row
    O->set_output(true).set_uid(O_UID).set_dim(dim).set_stride(out_strides(T, NH, HS));
    // stats (B,NH,T,1) fp32, logsumexp in natural log: what the backward reads back
    stats->set_output(true).set_uid(STATS_UID).set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1}).set_stride({NH * T, T, 1, 1});
    cudnnFECheck(build_graph(*graph));
    forward_graphs[key] = graph;
    return graph;
}

// The backward graph's description; deterministic or not (see backward_graph).
static std::shared_ptr<fe::graph::Graph> describe_backward(int64_t B, int64_t T, int64_t NH, int64_t HS, bool deterministic) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(CUDNN_FLOATX)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    std::vector<int64_t> dim = {B, NH, T, HS}, qkv_stride = qkv_strides(T, NH, HS), out_stride = out_strides(T, NH, HS);
    auto Q = input_tensor(*graph, "Q", Q_UID, dim, qkv_stride);
    auto K = input_tensor(*graph, "K", K_UID, dim, qkv_stride);
    auto V = input_tensor(*graph, "V", V_UID, dim, qkv_stride);
    auto O = input_tensor(*graph, "O", O_UID, dim, out_stride);
    auto dO = input_tensor(*graph, "dO", DO_UID, dim, out_stride);
    auto stats = input_tensor(*graph, "stats", STATS_UID, {B, NH, T, 1}, {NH * T, T, 1, 1});
    stats->set_data_type(fe::DataType_t::FLOAT);
    // the same scale and mask as the forward, or the rebuilt probabilities would differ
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(1.0f / sqrtf((float)HS))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(deterministic);
    auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, stats, options);
    // dq, dk, dv land in their thirds of dqkv (B,T,3C), the layout the qkv matmul's backward reads
    dQ->set_output(true).set_uid(DQ_UID).set_dim(dim).set_stride(qkv_stride);
    dK->set_output(true).set_uid(DK_UID).set_dim(dim).set_stride(qkv_stride);
    dV->set_output(true).set_uid(DV_UID).set_dim(dim).set_stride(qkv_stride);
    return graph;
}

// The backward walks the keys block by block, and each block adds its share to dq. By
// default those adds are fp32 atomics, in an order that changes from run to run, and so
// do the last bits of dq; we ask for cuDNN's deterministic algorithm instead. Where this
// cuDNN and GPU have none (the frontend names Blackwell before cuDNN 9.18), we say so and
// take the other.
static std::shared_ptr<fe::graph::Graph> backward_graph(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    GraphKey key = {B, T, NH, HS};
    auto found = backward_graphs.find(key);
    if (found != backward_graphs.end()) { return found->second; }
    auto graph = describe_backward(B, T, NH, HS, true);
    fe::error_object e = build_graph(*graph);
    if (e.is_bad()) {
        fprintf(stderr, "Warning: cuDNN has no deterministic attention backward for B %lld T %lld NH %lld HS %lld (%s); "
                "using the non-deterministic one\n", (long long)B, (long long)T, (long long)NH, (long long)HS,
                e.err_msg.c_str());
        graph = describe_backward(B, T, NH, HS, false);
        cudnnFECheck(build_graph(*graph));
        backward_deterministic = 0;
    }
    backward_graphs[key] = graph;
    return graph;
}

// out (B,T,C) and stats (B,NH,T) written, from qkv (B,T,3C); on the default stream
void attention_forward_cudnn(floatX *out, float *stats, const floatX *qkv, size_t B, size_t T, size_t NH, size_t C) {
    size_t HS = C / NH;
    auto graph = forward_graph((int64_t)B, (int64_t)T, (int64_t)NH, (int64_t)HS);
    floatX *q = (floatX *)qkv; // cuDNN takes void *, also for what it only reads
    std::unordered_map<int64_t, void *> pointers = {
        {Q_UID, q}, {K_UID, q + C}, {V_UID, q + 2 * C}, {O_UID, out}, {STATS_UID, stats}};
    cudnnFECheck(graph->execute(cudnn_handle, pointers, cudnn_workspace));
    cudaCheck(cudaGetLastError());
}

// dqkv (B,T,3C) written, from dout (B,T,C) and the forward's qkv, out and stats
void attention_backward_cudnn(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out,
                              const float *stats, size_t B, size_t T, size_t NH, size_t C) {
    size_t HS = C / NH;
    auto graph = backward_graph((int64_t)B, (int64_t)T, (int64_t)NH, (int64_t)HS);
    floatX *q = (floatX *)qkv;
    std::unordered_map<int64_t, void *> pointers = {
        {Q_UID, q},             {K_UID, q + C},         {V_UID, q + 2 * C},
        {O_UID, (void *)out},   {DO_UID, (void *)dout}, {STATS_UID, (void *)stats},
        {DQ_UID, dqkv},         {DK_UID, dqkv + C},     {DV_UID, dqkv + 2 * C}};
    cudnnFECheck(graph->execute(cudnn_handle, pointers, cudnn_workspace));
    cudaCheck(cudaGetLastError());
}
#endif // __CUDA_ARCH__
// --- end shared-copy: cudnn-attention ---

// ----------------------------------------------------------------------------
// the CPU reference, in double, from the same 16-bit inputs (converted exactly)

// out (B,T,C) and stats (B,NH,T): for each head, the scores s_j = q_t . k_j / sqrt(HS)
// for keys j <= t, stats = logsumexp_j s_j, out_t = sum_j exp(s_j - stats) v_j
static void attention_forward_cpu(double *out, double *stats, const double *qkv, size_t B, size_t T, size_t NH,
                                  size_t C) {
    size_t HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    std::vector<double> s(T);
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * HS;
                // s holds row t's scores; their max m is taken out before exp, which
                // then cannot overflow
                double m = -INFINITY;
                for (size_t j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * 3 * C + C + h * HS;
                    double dot = 0.0;
                    for (size_t i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                    s[j] = dot * scale;
                    m = fmax(m, s[j]);
                }
                double sum = 0.0;
                for (size_t j = 0; j <= t; j++) { sum += exp(s[j] - m); }
                double lse = m + log(sum);
                double *o = out + (b * T + t) * C + h * HS;
                for (size_t i = 0; i < HS; i++) { o[i] = 0.0; }
                for (size_t j = 0; j <= t; j++) {
                    const double *v = qkv + (b * T + j) * 3 * C + 2 * C + h * HS;
                    double p = exp(s[j] - lse);
                    for (size_t i = 0; i < HS; i++) { o[i] += p * v[i]; }
                }
                stats[(b * NH + h) * T + t] = lse;
            }
        }
    }
}

// dqkv (B,T,3C) written. With p_j = exp(s_j - stats) and dy = dout_t: dp_j = dy . v_j,
// ds_j = p_j (dp_j - sum_i p_i dp_i) (the softmax's backward), then dq_t += ds_j k_j / sqrt(HS),
// dk_j += ds_j q_t / sqrt(HS), dv_j += p_j dy. As plain as we can write it: no trick of cuDNN's
// (such as sum_i p_i dp_i = dy . out_t) is used.
static void attention_backward_cpu(double *dqkv, const double *dout, const double *qkv, const double *stats, size_t B,
                                   size_t T, size_t NH, size_t C) {
    size_t HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    std::vector<double> p(T), dp(T);
    for (size_t i = 0; i < B * T * 3 * C; i++) { dqkv[i] = 0.0; }
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                size_t qt = (b * T + t) * 3 * C + h * HS; // offset of q_t (and dq_t)
                const double *q = qkv + qt, *dy = dout + (b * T + t) * C + h * HS;
                // first pass over the keys: p and dp of row t, and pdp = sum_j p_j dp_j,
                // the softmax backward's term shared by the whole row
                double lse = stats[(b * NH + h) * T + t], pdp = 0.0;
                for (size_t j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * 3 * C + C + h * HS, *v = k + C;
                    double dot = 0.0, dyv = 0.0;
                    for (size_t i = 0; i < HS; i++) { dot += q[i] * k[i]; dyv += dy[i] * v[i]; }
                    p[j] = exp(dot * scale - lse);
                    dp[j] = dyv;
                    pdp += p[j] * dp[j];
                }
                // second pass: each key's share of the three gradients
                for (size_t j = 0; j <= t; j++) {
                    size_t kj = (b * T + j) * 3 * C + C + h * HS; // offset of k_j; v_j is C further
                    double ds = p[j] * (dp[j] - pdp);
                    for (size_t i = 0; i < HS; i++) {
                        dqkv[qt + i] += ds * scale * qkv[kj + i];
                        dqkv[kj + i] += ds * scale * q[i];
                        dqkv[kj + C + i] += p[j] * dy[i];
                    }
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the checks

// Tolerances on max |gpu - ref| / max |ref| over a tensor: its error relative to its
// largest entry. (Per entry, relative errors are large where sums of many terms of both
// signs nearly cancel, and those are common here.) bf16 keeps 8 significant bits, fp16
// 11; flash attention rounds the probabilities to 16 bits before the p v matmul and its
// outputs at the end, and the backward rounds dS and reads the rounded out. A model of
// those roundings in PyTorch (fp32 arithmetic, the roundings where flash attention has
// them) gave at most 4e-3 forward and 6e-3 backward in bf16, 5e-4 and 6e-4 in fp16, at
// main's shapes; a mask off by one, a missing mask, the scale 1/HS or the keys of the
// neighbouring head gave 0.26 or more. We allow about 4x the model's errors forward and
// 5x backward: a power of 2 above each. stats are fp32 logsumexps of fp32 scores (exact
// products of 16-bit inputs, summed in fp32): the model gave 2e-7, and 2^-12 leaves room
// for cuDNN's exp2 and log2, while the bugs above moved stats by 0.26 or more too.
#if defined(ENABLE_FP16)
static const double tol_out = 0x1p-9, tol_grad = 0x1p-8;
#else
static const double tol_out = 0x1p-6, tol_grad = 0x1p-5;
#endif
static const double tol_stats = 0x1p-12;

static int num_passed = 0, num_failed = 0;

// One line: the error, the tolerance, OK or NOT OK; on failure, the first few pairs and
// the worst entry. A NaN (e.g. an entry cuDNN never wrote: the buffers start as NaN)
// counts as infinitely wrong.
static void check_tensor(const char *name, const std::vector<float> &gpu, const std::vector<double> &ref, double tol) {
    double max_ref = 0.0, max_err = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double err = fabs((double)gpu[i] - ref[i]);
        if (std::isnan(err)) { err = INFINITY; }
        if (err > max_err) { max_err = err; worst_at = i; }
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    double rel = max_err / max_ref;
    int ok = rel <= tol;
    printf("  %-5s (%9zu) max err %.2e of max |ref| %.3g: %.2e (tolerance %.1e)  %s\n", name, ref.size(), max_err,
           max_ref, rel, tol, ok ? "OK" : "NOT OK");
    if (!ok) {
        printf("        first: ");
        for (size_t i = 0; i < 4 && i < ref.size(); i++) { printf("%.6g/%.6g ", gpu[i], ref[i]); }
        printf("(gpu/ref); worst at %zu: %.6g, expected %.6g\n", worst_at, gpu[worst_at], ref[worst_at]);
    }
    if (ok) { num_passed++; } else { num_failed++; }
}

// the q, k or v third (part 0, 1 or 2) of every 3C-long row of a (B*T, 3C) tensor
template <typename F>
static std::vector<F> third(const std::vector<F> &x, int part, size_t C) {
    std::vector<F> y;
    y.reserve(x.size() / 3);
    for (size_t row = 0; row < x.size() / (3 * C); row++) {
        y.insert(y.end(), x.begin() + row * 3 * C + part * C, x.begin() + row * 3 * C + (part + 1) * C);
    }
    return y;
}

// the GPU's 16-bit results as floats (exact) for the checks, the inputs as doubles for
// the reference
static std::vector<float> to_floats(const std::vector<floatX> &x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) { y[i] = to_float(x[i]); }
    return y;
}
static std::vector<double> to_doubles(const std::vector<floatX> &x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); i++) { y[i] = (double)to_float(x[i]); }
    return y;
}

// Random 16-bit inputs: q, k, v uniform in [-2, 2), so that the scores q.k/8 (HS = 64)
// have a standard deviation near 1.3 and the softmax is neither flat nor one-hot; dout
// uniform in [-1, 1).
static void fill_inputs(std::vector<floatX> &qkv, std::vector<floatX> &dout) {
    for (floatX &x : qkv) { x = from_float(2.0f * rng_uniform()); }
    for (floatX &x : dout) { x = from_float(rng_uniform()); }
}

// The device buffers of one shape, allocated per shape and freed after it: the timing
// shape alone takes 0.8 GB (qkv and dqkv are 0.3 GB each in 16 bits).
struct Buffers {
    floatX *qkv, *out, *dout, *dqkv;
    float *stats;
};
static Buffers buffers_alloc(size_t B, size_t T, size_t NH, size_t C) {
    Buffers d;
    cudaCheck(cudaMalloc(&d.qkv, B * T * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d.out, B * T * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d.dout, B * T * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d.dqkv, B * T * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d.stats, B * NH * T * sizeof(float)));
    return d;
}
static void buffers_free(Buffers &d) {
    cudaCheck(cudaFree(d.qkv));
    cudaCheck(cudaFree(d.out));
    cudaCheck(cudaFree(d.dout));
    cudaCheck(cudaFree(d.dqkv));
    cudaCheck(cudaFree(d.stats));
}

// Forward and backward at one shape against the CPU reference, then a second backward
// against the first, bit for bit.
static void check_shape(size_t B, size_t T, size_t NH, size_t C) {
    printf("B %zu T %zu NH %zu C %zu (HS %zu)\n", B, T, NH, C, C / NH);
    size_t nqkv = B * T * 3 * C, nout = B * T * C, nstats = B * NH * T;
    std::vector<floatX> qkv(nqkv), dout(nout), out(nout), dqkv(nqkv), dqkv2(nqkv);
    std::vector<float> stats(nstats);
    fill_inputs(qkv, dout);
    Buffers d = buffers_alloc(B, T, NH, C);
    cudaCheck(cudaMemcpy(d.qkv, qkv.data(), nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d.dout, dout.data(), nout * sizeof(floatX), cudaMemcpyHostToDevice));
    // all bits set is a NaN in bf16, fp16 and fp32: an entry left unwritten fails its check
    cudaCheck(cudaMemset(d.out, 0xff, nout * sizeof(floatX)));
    cudaCheck(cudaMemset(d.stats, 0xff, nstats * sizeof(float)));
    cudaCheck(cudaMemset(d.dqkv, 0xff, nqkv * sizeof(floatX)));
    attention_forward_cudnn(d.out, d.stats, d.qkv, B, T, NH, C);
    attention_backward_cudnn(d.dqkv, d.dout, d.qkv, d.out, d.stats, B, T, NH, C);
    cudaCheck(cudaMemcpy(out.data(), d.out, nout * sizeof(floatX), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(stats.data(), d.stats, nstats * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(dqkv.data(), d.dqkv, nqkv * sizeof(floatX), cudaMemcpyDeviceToHost));

    // the reference: the forward's stats (exact) feed the reference backward, as the
    // GPU's feed the GPU's
    std::vector<double> qkv_d = to_doubles(qkv), dout_d = to_doubles(dout);
    std::vector<double> out_ref(nout), stats_ref(nstats), dqkv_ref(nqkv);
    attention_forward_cpu(out_ref.data(), stats_ref.data(), qkv_d.data(), B, T, NH, C);
    attention_backward_cpu(dqkv_ref.data(), dout_d.data(), qkv_d.data(), stats_ref.data(), B, T, NH, C);
    check_tensor("out", to_floats(out), out_ref, tol_out);
    check_tensor("stats", stats, stats_ref, tol_stats);
    std::vector<float> dqkv_f = to_floats(dqkv);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        check_tensor(names[part], third(dqkv_f, part, C), third(dqkv_ref, part, C), tol_grad);
    }

    // determinism: the same inputs again must give the same bits
    attention_backward_cudnn(d.dqkv, d.dout, d.qkv, d.out, d.stats, B, T, NH, C);
    cudaCheck(cudaMemcpy(dqkv2.data(), d.dqkv, nqkv * sizeof(floatX), cudaMemcpyDeviceToHost));
    int same = memcmp(dqkv.data(), dqkv2.data(), nqkv * sizeof(floatX)) == 0;
    if (cudnn_backward_is_deterministic()) {
        printf("  dqkv of a second backward bitwise equal to the first  %s\n", same ? "OK" : "NOT OK");
        if (same) { num_passed++; } else { num_failed++; }
    } else {
        printf("  dqkv of a second backward %s the first (non-deterministic backward: not a check)\n",
               same ? "bitwise equal to" : "differs from");
    }
    buffers_free(d);
}

// ----------------------------------------------------------------------------

static void usage(void) {
    printf("usage: attention_cudnn [-c] [-s SEED] [-h]\n"
           LADDER_COMMON_FLAGS);
}

int main(int argc, char **argv) {
    LadderArgs args = parse_args(argc, argv, 1, 0, usage); // one variant, cuDNN's
    rng_state = args.seed;
    // require_gpu exits 1 and points to the CPU emulator, which has no cuDNN: here a
    // machine without a GPU has nothing to run, which is no failure
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("no usable CUDA GPU (%s): the cuDNN attention checks need one; skipped\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return EXIT_SUCCESS;
    }
    require_gpu("has no cuDNN", PRECISION_NAME, args.seed);
    cudnn_create();
    char versions[128];
    cudnn_describe(versions, sizeof(versions));
    printf("%s\n", versions);

    // 1. correctness, before any timing: a small shape, a T that is no multiple of 64
    // (cuDNN's tile), and GPT-2 small's heads at full length
    const size_t sizes[][4] = {{2, 64, 4, 256}, {3, 67, 2, 128}, {4, 1024, 12, 768}}; // B, T, NH, C
    for (const size_t *s : sizes) { check_shape(s[0], s[1], s[2], s[3]); }

    // 2. timing at the trainer's shape, then at the shapes of dev/cuda/flash_attention.cu's
    // table, in its columns, so that make gpu-check prints cuDNN under our ladder. FLOPs as the
    // FlashAttention papers count them: the forward's two matmuls 4 B NH T^2 HS, the
    // backward's five 2.5 times that; the causal mask skips half of each.
    if (!args.check_only) {
        const double peak = 989e12; // NVIDIA's H100/H200 SXM data sheets, bf16/fp16 dense
        // median ms of the forward and the backward at one shape (after its first calls, which
        // build the graphs: reported at the trainer's shape)
        auto time_shape = [&](size_t B, size_t T, size_t NH, size_t C, float *ms_fwd, float *ms_bwd, bool first_calls) {
            std::vector<floatX> qkv(B * T * 3 * C), dout(B * T * C);
            fill_inputs(qkv, dout);
            Buffers d = buffers_alloc(B, T, NH, C);
            cudaCheck(cudaMemcpy(d.qkv, qkv.data(), qkv.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d.dout, dout.data(), dout.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            auto t0 = std::chrono::steady_clock::now();
            attention_forward_cudnn(d.out, d.stats, d.qkv, B, T, NH, C);
            cudaCheck(cudaDeviceSynchronize());
            auto t1 = std::chrono::steady_clock::now();
            attention_backward_cudnn(d.dqkv, d.dout, d.qkv, d.out, d.stats, B, T, NH, C);
            cudaCheck(cudaDeviceSynchronize());
            auto t2 = std::chrono::steady_clock::now();
            if (first_calls) {
                printf("\nB %zu T %zu NH %zu C %zu, %s: first calls (graph build included): forward %.0f ms, backward %.0f ms;\n"
                       "workspace %.1f MB; median of 20 calls after a warm-up, %% of 989 TFLOP/s (H100/H200 dense 16-bit)\n",
                       B, T, NH, C, PRECISION_NAME, std::chrono::duration<double, std::milli>(t1 - t0).count(),
                       std::chrono::duration<double, std::milli>(t2 - t1).count(), cudnn_workspace_bytes() / 1e6);
            }
            *ms_fwd = time_median_ms([&] { attention_forward_cudnn(d.out, d.stats, d.qkv, B, T, NH, C); });
            *ms_bwd = time_median_ms([&] { attention_backward_cudnn(d.dqkv, d.dout, d.qkv, d.out, d.stats, B, T, NH, C); });
            buffers_free(d);
        };
        {
            const size_t B = 64, T = 1024, NH = 12, C = 768, HS = C / NH;
            float ms_fwd, ms_bwd;
            time_shape(B, T, NH, C, &ms_fwd, &ms_bwd, true);
            double flops_fwd = 4.0 * B * NH * T * T * HS / 2.0, flops_bwd = 2.5 * flops_fwd;
            printf("forward  %8.3f ms %7.1f TFLOP/s %5.1f%%\n", ms_fwd, flops_fwd / (ms_fwd * 1e-3) / 1e12,
                   100.0 * flops_fwd / (ms_fwd * 1e-3) / peak);
            printf("backward %8.3f ms %7.1f TFLOP/s %5.1f%%\n", ms_bwd, flops_bwd / (ms_bwd * 1e-3) / 1e12,
                   100.0 * flops_bwd / (ms_bwd * 1e-3) / peak);
        }
        // flash_attention.cu's shapes: 16 K tokens a batch, NH * HS = 2,048. Its HS = 128 rows
        // have grouped heads (G = 4), which this fused (B,T,3C) layout cannot express: here
        // G = 1, the same FLOPs, more K/V to read.
        printf("\nflash_attention.cu's table (ms: median of up to 20 calls after a warm-up)\n%-16s %6s %4s %4s %4s %10s %8s %10s %8s\n",
               "variant", "T", "B", "NH", "HS", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
        for (size_t HS : {64, 128}) {
            for (size_t T : {1024, 4096, 16384}) {
                size_t NH = 2048 / HS, B = 16384 / T;
                float ms_fwd, ms_bwd;
                time_shape(B, T, NH, NH * HS, &ms_fwd, &ms_bwd, false);
                double flops = 2.0 * B * NH * (double)T * T * HS;
                printf("%-16s %6zu %4zu %4zu %4zu %10.3f %8.1f %10.3f %8.1f\n", "cuDNN (G = 1)", T, B, NH, HS, ms_fwd,
                       flops / (ms_fwd * 1e-3) / 1e12, ms_bwd, 2.5 * flops / (ms_bwd * 1e-3) / 1e12);
            }
        }
    }
    cudnn_destroy();
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
