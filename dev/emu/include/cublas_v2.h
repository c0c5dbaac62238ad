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

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
struct cublasContext { int math_mode; };
typedef cublasContext *cublasHandle_t;

inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_NOT_INITIALIZED ? "CUBLAS_STATUS_NOT_INITIALIZED"
                                                                                                      : "CUBLAS_STATUS_INVALID_VALUE";
}
inline cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new cublasContext{0}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) { h->math_mode = mode; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, void *) { return CUBLAS_STATUS_SUCCESS; }

namespace emu {
// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, column-major; beta = 0
// overwrites C without reading it, as cuBLAS does (C may hold NaN garbage)
inline cublasStatus_t gemm_f32(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                               const float *A, int lda, long long sa, const float *B, int ldb, long long sb, float beta,
                               float *C, int ldc, long long sc, int batch) {
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1) || lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
        ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int p = 0; p < batch; p++) {
        const float *a = A + p * sa, *b = B + p * sb;
        float *c = C + p * sc;
        #pragma omp parallel for collapse(2)
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

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                                  float *C, int ldc) {
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_f32(ta, tb, m, n, k, *alpha, A, lda, 0, B, ldb, 0, *beta, C, ldc, 0, 1);
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                int k, const float *alpha, const float *A, int lda, long long sa,
                                                const float *B, int ldb, long long sb, const float *beta, float *C,
                                                int ldc, long long sc, int batch) {
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    return emu::gemm_f32(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch);
}
#endif
