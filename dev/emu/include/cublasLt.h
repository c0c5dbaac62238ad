// Under emulation (dev/emu/emu_build.sh puts this folder first on the include
// path) cuBLASLt is this file: the descriptors keep what the program sets, and
// cublasLtMatmul runs a plain loop with the same meaning, for the attributes the
// project's programs use: transposes, strided batches, and the epilogues BIAS,
// GELU_AUX_BIAS (the pre-GELU values go to the aux matrix) and DGELU (the result is
// multiplied by GELU'(aux)). Anything else is refused, as a real cuBLASLt refuses
// what it does not support, so that a program cannot rely on an attribute the
// stand-in ignores.
//
// The arithmetic follows cuBLASLt's: the products are summed (here in double),
// scaled, the bias added and the GELU applied in fp32, and only the results are
// rounded to the output type; the aux matrix holds the rounded pre-GELU values.
#ifndef CUBLASLT_EMU_H
#define CUBLASLT_EMU_H
#include "cublas_v2.h"
#include <cmath>
#include <cstdint>

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 } cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext { int unused; };
typedef cublasLtContext *cublasLtHandle_t;
struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t { uint64_t workspace; };
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new cublasLtContext{0}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) { return CUBLAS_STATUS_INVALID_VALUE; }
    *d = new cublasLtMatmulDescOpaque_t{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
// copies `size` bytes into the attribute, which must have exactly that size (as cuBLASLt checks)
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t size) {
    void *field = nullptr;
    size_t expected = 0;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: field = &d->transa; expected = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: field = &d->transb; expected = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: field = &d->epilogue; expected = sizeof(uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: field = &d->bias; expected = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: field = &d->aux; expected = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: field = &d->aux_ld; expected = sizeof(int64_t); break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (buf == nullptr || size != expected) { return CUBLAS_STATUS_INVALID_VALUE; }
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
    if (ld < (int64_t)(rows > 1 ? rows : 1)) { return CUBLAS_STATUS_INVALID_VALUE; }
    *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t size) {
    if (buf == nullptr) { return CUBLAS_STATUS_INVALID_VALUE; }
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof(int32_t)) { memcpy(&l->batch, buf, size); }
    else if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof(int64_t)) { memcpy(&l->stride, buf, size); }
    else { return CUBLAS_STATUS_INVALID_VALUE; }
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new cublasLtMatmulPreferenceOpaque_t{0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void *buf, size_t size) {
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || buf == nullptr || size != sizeof(uint64_t)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(&p->workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
// GELU with tanh approximation (GPT-2's; the one cuBLASLt's epilogues apply) and its derivative
inline float lt_gelu(float x) {
    const float s = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
inline float lt_dgelu(float x) {
    const float s = 0.7978845608028654f;
    float u = s * (x + 0.044715f * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x * x);
}
// the checks a real cuBLASLt makes before it looks for an algorithm: shapes that
// agree, a supported epilogue with the pointers and leading dimension it needs
inline cublasStatus_t lt_validate(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                  cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D) {
    uint64_t m = d->transa == CUBLAS_OP_N ? A->rows : A->cols, k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    uint64_t kb = d->transb == CUBLAS_OP_N ? B->rows : B->cols, n = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    if (k != kb || D->rows != m || D->cols != n || C->rows != m || C->cols != n || C->type != D->type) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch) { return CUBLAS_STATUS_INVALID_VALUE; }
    uint32_t e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
        e != CUBLASLT_EPILOGUE_DGELU) {
        return CUBLAS_STATUS_INVALID_VALUE; // not used by the project: not emulated
    }
    if ((e & CUBLASLT_EPILOGUE_BIAS) && d->bias == nullptr) { return CUBLAS_STATUS_INVALID_VALUE; }
    if ((e & 128) && (d->aux == nullptr || d->aux_ld < (int64_t)m || d->aux_ld % 8 != 0 || D->batch != 1)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
}

// no algorithms to choose between here: one "result" whenever the problem is
// valid; otherwise NOT_SUPPORTED and none, as the real one answers. With
// EMU_CUBLASLT_NO_EPILOGUES set, no epilogue is supported (as on a GPU whose
// cuBLASLt has no fused kernel for a shape): programs' fallbacks can be tested.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                                     cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t,
                                                     int requested, cublasLtMatmulHeuristicResult_t *results, int *returned) {
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    *returned = 0;
    if (requested < 1 || emu::lt_validate(d, A, B, C, D) != CUBLAS_STATUS_SUCCESS ||
        (getenv("EMU_CUBLASLT_NO_EPILOGUES") != nullptr && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof(results[0]));
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// D = epilogue(alpha op(A) op(B) + beta C), column-major; C and D may be the same matrix
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                                     const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                     const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
    emu::LibraryCall library_call; // (reads and writes device memory on the host: allowed here)
    emu::capture_forbidden("cublasLtMatmul (the emulator records only cublasGemmEx in graphs)");
    if (h == nullptr) { return CUBLAS_STATUS_NOT_INITIALIZED; }
    cublasStatus_t status = emu::lt_validate(d, Ad, Bd, Cd, Dd);
    if (status != CUBLAS_STATUS_SUCCESS) { return status; }
    float a = *(const float *)alpha, b = *(const float *)beta;
    long long m = (long long)Dd->rows, n = (long long)Dd->cols;
    long long k = (long long)(d->transa == CUBLAS_OP_N ? Ad->cols : Ad->rows);
    uint32_t e = d->epilogue;
    for (int p = 0; p < Dd->batch; p++) {
        #pragma omp parallel for collapse(2) if ((double)m * n * k > EMU_PARALLEL_WORK)
        for (long long j = 0; j < n; j++) {
            for (long long i = 0; i < m; i++) {
                double sum = 0.0;
                for (long long l = 0; l < k; l++) {
                    size_t ai = p * Ad->stride + (d->transa == CUBLAS_OP_N ? i + l * Ad->ld : l + i * Ad->ld);
                    size_t bi = p * Bd->stride + (d->transb == CUBLAS_OP_N ? l + j * Bd->ld : j + l * Bd->ld);
                    sum += emu::load_as_double(A, Ad->type, ai) * emu::load_as_double(B, Bd->type, bi);
                }
                float x = (float)((double)a * sum);
                if (b != 0.0f) { x += b * (float)emu::load_as_double(C, Cd->type, p * Cd->stride + i + j * Cd->ld); }
                if (e & CUBLASLT_EPILOGUE_BIAS) { x += (float)emu::load_as_double(d->bias, Dd->type, i); }
                if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    emu::store_from_double(d->aux, Dd->type, i + j * d->aux_ld, x);
                    x = emu::lt_gelu(x);
                } else if (e == CUBLASLT_EPILOGUE_DGELU) {
                    x *= emu::lt_dgelu((float)emu::load_as_double(d->aux, Dd->type, i + j * d->aux_ld));
                }
                emu::store_from_double(D, Dd->type, p * Dd->stride + i + j * Dd->ld, x);
            }
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
#endif
