// Under emulation (dev/emu/emu_build.sh puts this folder first on the include
// path) cuBLAS is this file: plain C++ loops with cuBLAS's column-major
// semantics, for the calls the project's programs make. They are correctness
// stand-ins (double accumulation, no blocking), never fast.
//
// Column-major, as in the cuBLAS documentation: op(X) is X, X^T (CUBLAS_OP_N,
// CUBLAS_OP_T); element (i, j) of an m x n column-major matrix with leading
// dimension ld is at [i + j * ld].
#ifndef CUBLAS_EMU_H
#define CUBLAS_EMU_H
#include "../cuda_emu.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
struct cublasContext { int math_mode; void *stream; };
typedef cublasContext *cublasHandle_t;

inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_NOT_INITIALIZED ? "CUBLAS_STATUS_NOT_INITIALIZED"
         : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_INVALID_VALUE";
}
inline cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new cublasContext{0, nullptr}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) { h->math_mode = mode; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t h, void *stream) { h->stream = stream; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }

// Below this many multiply-adds a matmul runs on one thread: starting OpenMP's team costs
// more than the work, and its spinning threads slow everything on a busy machine.
#define EMU_PARALLEL_WORK 4e6

namespace emu {
// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, column-major; beta = 0
// overwrites C without reading it, as cuBLAS does (C may hold NaN garbage)
inline cublasStatus_t gemm_f32(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                               const float *A, int lda, long long sa, const float *B, int ldb, long long sb, float beta,
                               float *C, int ldc, long long sc, int batch) {
    emu::LibraryCall library_call; // (reads and writes device memory on the host: allowed here)
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1) || lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
        ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int p = 0; p < batch; p++) {
        const float *a = A + p * sa, *b = B + p * sb;
        float *c = C + p * sc;
        #pragma omp parallel for collapse(2) if ((double)m * n * k > EMU_PARALLEL_WORK)
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                double sum = 0.0;
                for (int l = 0; l < k; l++) {
                    double x = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
                    double y = tb == CUBLAS_OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
                    sum += x * y;
                }
                float *out = &c[i + (size_t)j * ldc];
                *out = (float)(alpha * sum + (beta != 0.0f ? (double)beta * *out : 0.0));
            }
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
}

// the element types and compute types of the *Ex calls
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

namespace emu {
inline double load_as_double(const void *p, cudaDataType_t t, size_t i) {
    return t == CUDA_R_32F ? (double)((const float *)p)[i]
         : t == CUDA_R_16F ? (double)(float)((const __half *)p)[i] : (double)(float)((const __nv_bfloat16 *)p)[i];
}
// (rounded to float first, then to the 16-bit type, as an fp32 accumulator is)
inline void store_from_double(void *p, cudaDataType_t t, size_t i, double v) {
    if (t == CUDA_R_32F) { ((float *)p)[i] = (float)v; }
    else if (t == CUDA_R_16F) { ((__half *)p)[i] = __half((float)v); }
    else { ((__nv_bfloat16 *)p)[i] = __nv_bfloat16((float)v); }
}
// the *Ex gemms, for fp32, fp16 and bf16 data (alpha and beta are floats: compute type 32F)
inline cublasStatus_t gemm_ex(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                              const void *A, cudaDataType_t at, int lda, long long sa, const void *B, cudaDataType_t bt,
                              int ldb, long long sb, float beta, void *C, cudaDataType_t ct, int ldc, long long sc,
                              int batch) {
    emu::LibraryCall library_call; // (reads and writes device memory on the host: allowed here)
    if (m < 0 || n < 0 || k < 0 || (at != CUDA_R_32F && at != CUDA_R_16BF && at != CUDA_R_16F) ||
        (bt != CUDA_R_32F && bt != CUDA_R_16BF && bt != CUDA_R_16F) || (ct != CUDA_R_32F && ct != CUDA_R_16BF && ct != CUDA_R_16F)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int p = 0; p < batch; p++) {
        #pragma omp parallel for collapse(2) if ((double)m * n * k > EMU_PARALLEL_WORK)
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                double sum = 0.0;
                for (int l = 0; l < k; l++) {
                    double x = load_as_double(A, at, p * sa + (ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda));
                    double y = load_as_double(B, bt, p * sb + (tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb));
                    sum += x * y;
                }
                size_t ci = p * sc + i + (size_t)j * ldc;
                double old = beta != 0.0f ? load_as_double(C, ct, ci) : 0.0;
                store_from_double(C, ct, ci, alpha * sum + (double)beta * old);
            }
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                   cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    // (replayed from a graph, alpha and beta are read then: keep them alive, e.g. static)
    if (h != nullptr) { emu::capture_stream_check("cublasGemmEx", "(cublasSetStream's stream)", h->stream); }
    EMU_RECORD_IF_CAPTURING(cublasGemmEx(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo),
                            CUBLAS_STATUS_SUCCESS)
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_ex(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, 0, B, bt, ldb, 0, *(const float *)beta, C, ct,
                        ldc, 0, 1);
}

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                 int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
                                                 long long sa, const void *B, cudaDataType_t bt, int ldb, long long sb,
                                                 const void *beta, void *C, cudaDataType_t ct, int ldc, long long sc,
                                                 int batch, cublasComputeType_t, cublasGemmAlgo_t) {
    emu::capture_forbidden("cublasGemmStridedBatchedEx (the emulator records only cublasGemmEx in graphs)");
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_ex(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sa, B, bt, ldb, sb, *(const float *)beta, C,
                        ct, ldc, sc, batch);
}

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                                  float *C, int ldc) {
    emu::capture_forbidden("cublasSgemm (the emulator records only cublasGemmEx in graphs)");
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_f32(ta, tb, m, n, k, *alpha, A, lda, 0, B, ldb, 0, *beta, C, ldc, 0, 1);
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                int k, const float *alpha, const float *A, int lda, long long sa,
                                                const float *B, int ldb, long long sb, const float *beta, float *C,
                                                int ldc, long long sc, int batch) {
    emu::capture_forbidden("cublasSgemmStridedBatched (the emulator records only cublasGemmEx in graphs)");
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_f32(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch);
}
#endif
