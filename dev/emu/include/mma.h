// Under emulation (dev/emu/emu_build.sh puts this folder first on the include path)
// CUDA's warp matrix functions, nvcuda::wmma (mma.h), are this file: a stand-in for the
// tensor cores that gives the same results up to the order of the fp32 sums.
//
// On a GPU a fragment is spread over the 32 lanes of a warp (num_elements of it in each,
// in an order CUDA does not document). Here every lane holds the whole tile (num_elements
// is the tile's size), in an order of its own: x[] is the tile row by row, rotated by an
// amount that differs from lane to lane and between matrix_a, matrix_b and accumulator.
// So code that treats a fragment's elements alike (fill_fragment, or a loop over
// x[0..num_elements) doing the same to each, or combining two fragments of the same type
// element by element) means the same on both, and code that assumes where an element is
// (x[0] as the tile's corner, or a matrix_a's x[i] as an accumulator's) is wrong on both.
//   - load_matrix_sync: each lane reads the whole tile, but the race detector and
//     AddressSanitizer see each lane read only the 1/32 of it that lane would hold on an
//     sm_80+ GPU (wmma_owner: the layout PTX documents for mma.sync's 16 x 8 x 16 tiles,
//     which wmma's 16 x 16 x 16 are two of), the rest read unseen. Those are the elements a
//     lane stores (below): so a warp may load an accumulator, add to it and store it back
//     with no __syncwarp, as on a GPU, where a lane stores the very elements it loaded; and a
//     lane that reads a tile another lane stored, without a __syncwarp between, is a race
//     here as there (a copy-out loop e = lane, lane + 32, ... crosses lanes).
//   - mma_sync: each lane computes the whole product d = a b + c, in fp32, from the
//     inputs' exact values (products of bf16 or fp16 numbers are exact in fp32), summing
//     over k in order; a tensor core's order of addition is its own, so results match a
//     GPU's to fp32 rounding, not bit for bit.
//   - store_matrix_sync: each lane writes the elements it owns, so the race detector sees the
//     tile written by the whole warp, as on a GPU: a lane that reads what another stored
//     needs a __syncwarp (or a barrier) first, there too.
// All three are collective, as CUDA requires: every lane of the warp must call the same
// one (a warp operation, checked like a shuffle with a full mask: a warp with fewer than
// 32 threads, or lanes in different wmma calls, is an error). The pointer must be 32-byte
// aligned and ldm a multiple of 16 bytes' worth of elements (CUDA's rules: on a GPU a
// misaligned tile is undefined behaviour), and both are checked.
#ifndef MMA_EMU_H
#define MMA_EMU_H
#include "../cuda_emu.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include <type_traits>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape; // the fragment's rows and columns
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> { static const int rows = M, cols = K; };
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> { static const int rows = K, cols = N; };
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> { static const int rows = M, cols = N; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static const int rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols;
    enum { num_elements = rows * cols };
    T x[num_elements];
    // element (i, j): the tile row by row, rotated by the lane and the fragment's use
    T &at(int i, int j) {
        int salt = std::is_same<Use, matrix_a>::value ? 3 : std::is_same<Use, matrix_b>::value ? 11 : 5;
        return x[(i * cols + j + 37 * emu::lane_id() + salt) % num_elements];
    }
    const T &at(int i, int j) const { return const_cast<fragment *>(this)->at(i, j); }
};

// a collective call: every lane of the caller's warp arrives before any goes on
inline void wmma_arrive(const char *what, int line) {
    emu::WarpOp *op = emu::warp_arrive(0xffffffffu, what, line, nullptr, 0);
    unsigned gone = op->gone;
    emu::warp_done(op);
    if (gone != 0) {
        EMU_ERROR("%s at line %d: lane %d has returned, and a warp matrix function needs all 32 lanes (undefined on a GPU)",
                  what, line, __builtin_ctz(gone));
    }
}
template <typename T> inline void wmma_check_tile(const char *what, int line, const T *p, unsigned ldm, int cols) {
    if ((uintptr_t)p % 32 != 0) {
        EMU_ERROR("%s at line %d: the pointer %p is not 32-byte aligned (undefined on a GPU)", what, line, (const void *)p);
    }
    if (ldm * sizeof(T) % 16 != 0 || (int)ldm < cols) {
        EMU_ERROR("%s at line %d: ldm %u: it must be a multiple of %d elements (16 bytes) and at least the tile's %d",
                  what, line, ldm, (int)(16 / sizeof(T)), cols);
    }
}

// the lane that holds element (i, j) of a fragment on an sm_80+ GPU: row i % 8 of a group of
// four lanes, two columns a lane (matrix_b, k by n: the transpose, column j % 8)
template <typename Use> inline int wmma_owner(int i, int j) {
    return std::is_same<Use, matrix_b>::value ? (j % 8) * 4 + (i % 8) / 2 : (i % 8) * 4 + (j % 8) / 2;
}
// an element of a tile, as lane `lane` reads it: seen by the race detector and
// AddressSanitizer if the lane owns it, unseen otherwise
template <typename T> EMU_INTERNAL __attribute__((noipa)) T wmma_unseen(const T *p) { return *p; } // (opaque: the caller is instrumented)
template <typename T> inline T wmma_read(const T *p, bool own) { return own ? *p : wmma_unseen(p); }

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, const V &v) {
    for (int e = 0; e < f.num_elements; e++) { f.x[e] = (T)v; }
}

// matrix_a or matrix_b, its layout in its type: element (i, j) at p[i ldm + j] (row_major)
// or p[i + j ldm] (col_major)
template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const T *p, unsigned ldm, int line = __builtin_LINE()) {
    const char *what = "wmma::load_matrix_sync";
    wmma_arrive(what, line);
    const bool row = std::is_same<Layout, row_major>::value;
    wmma_check_tile(what, line, p, ldm, row ? f.cols : f.rows);
    int lane = emu::lane_id();
    for (int i = 0; i < f.rows; i++) {
        for (int j = 0; j < f.cols; j++) {
            f.at(i, j) = wmma_read(row ? p + (size_t)i * ldm + j : p + i + (size_t)j * ldm, wmma_owner<Use>(i, j) == lane);
        }
    }
}
// an accumulator, its layout given
template <int M, int N, int K, typename T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t layout,
                             int line = __builtin_LINE()) {
    const char *what = "wmma::load_matrix_sync";
    wmma_arrive(what, line);
    wmma_check_tile(what, line, p, ldm, layout == mem_row_major ? N : M);
    int lane = emu::lane_id();
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            f.at(i, j) = wmma_read(layout == mem_row_major ? p + (size_t)i * ldm + j : p + i + (size_t)j * ldm,
                                   wmma_owner<accumulator>(i, j) == lane);
        }
    }
}
template <int M, int N, int K, typename T>
inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t layout,
                              int line = __builtin_LINE()) {
    const char *what = "wmma::store_matrix_sync";
    wmma_arrive(what, line);
    wmma_check_tile(what, line, (const T *)p, ldm, layout == mem_row_major ? N : M);
    int lane = emu::lane_id();
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            if (wmma_owner<accumulator>(i, j) == lane) { (layout == mem_row_major ? p[(size_t)i * ldm + j] : p[i + (size_t)j * ldm]) = f.at(i, j); }
        }
    }
}
// d = a b + c, each lane the whole tile (d may be c)
template <int M, int N, int K, typename Tin, typename LA, typename LB, typename Tacc>
inline void mma_sync(fragment<accumulator, M, N, K, Tacc> &d, const fragment<matrix_a, M, N, K, Tin, LA> &a,
                     const fragment<matrix_b, M, N, K, Tin, LB> &b, const fragment<accumulator, M, N, K, Tacc> &c,
                     int line = __builtin_LINE()) {
    wmma_arrive("wmma::mma_sync", line);
    Tacc r[M * N];
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float sum = (float)c.at(i, j);
            for (int k = 0; k < K; k++) { sum += (float)a.at(i, k) * (float)b.at(k, j); }
            r[i * N + j] = (Tacc)sum;
        }
    }
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) { d.at(i, j) = r[i * N + j]; }
    }
}
} // namespace wmma
} // namespace nvcuda
#endif
