// Under emulation (dev/emu/emu_build.sh puts this folder first on the include path) NCCL
// is this file: the collectives the project's programs call, between the processes of an
// MPI run, each process one emulated GPU. The data moves through MPI on the host (device
// memory is host memory here); the sums are NCCL's, in the buffer's own type: each
// addition in float, rounded to the type (bf16, fp16) before the next, the ranks' values
// added in rank order. (NCCL's ring adds them in ring order; with 2 ranks it is one
// addition, the same either way.) Build with MPI's flags (mpicxx --showme:compile/link).
//
// What a GPU would do wrong is an error here, with the call named:
//   - every rank must make the same calls, in the same order, with the same counts and
//     types (on a GPU a mismatch hangs or mixes data): each call compares them first;
//   - the buffers must lie inside live device allocations, and may overlap only as NCCL
//     allows in place (all-reduce: the same buffer; reduce-scatter: recv = send + rank *
//     count; all-gather: send = recv + rank * count);
//   - a collective on a stream other than the default runs when the program waits for that
//     stream (cuda_emu.h's emu::Stream): whoever uses its result without a
//     cudaStreamWaitEvent reads the old data; and such a collective must have waited
//     (cudaStreamWaitEvent) for all the work issued to the default stream before it, or
//     on a GPU it could read what that work is still writing;
//   - and its buffers must not change between the call and its run (but by the collectives
//     of its own stream before it): other work writing them then races with it on a GPU.
// Group calls (ncclGroupStart/End) only count: the calls inside run in order anyway.
#ifndef NCCL_EMU_H
#define NCCL_EMU_H
#include "../cuda_emu.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include <climits>
#include <mpi.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
               ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
#define ncclHalf ncclFloat16
#define ncclFloat ncclFloat32
#define ncclDouble ncclFloat64
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
struct ncclComm { int rank, nranks; };
typedef ncclComm *ncclComm_t;
#define NCCL_MAJOR 2
#define NCCL_MINOR 0
#define NCCL_PATCH 0

inline const char *ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument" : r == ncclInvalidUsage ? "invalid usage"
         : "error (emulated NCCL)";
}
inline ncclResult_t ncclGetVersion(int *version) { *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH; return ncclSuccess; }

namespace emu {
inline int nccl_group_depth = 0;
inline void nccl_mpi_check(int err, const char *call) {
    if (err != MPI_SUCCESS) { EMU_HOST_ERROR("%s: the MPI under the NCCL stand-in failed (error %d)", call, err); }
}
inline size_t nccl_type_size(ncclDataType_t t, const char *call) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    EMU_HOST_ERROR("%s: %d is not an ncclDataType_t", call, (int)t);
}
// acc += x in the type's arithmetic (floats: in float, rounded to the type)
inline void nccl_add(void *acc, const void *x, size_t i, ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: ((float *)acc)[i] += ((const float *)x)[i]; break;
    case ncclFloat64: ((double *)acc)[i] += ((const double *)x)[i]; break;
    case ncclBfloat16: {
        __nv_bfloat16 *a = (__nv_bfloat16 *)acc;
        a[i] = __nv_bfloat16((float)a[i] + (float)((const __nv_bfloat16 *)x)[i]);
        break;
    }
    case ncclFloat16: {
        __half *a = (__half *)acc;
        a[i] = __half((float)a[i] + (float)((const __half *)x)[i]);
        break;
    }
    case ncclInt8: ((int8_t *)acc)[i] += ((const int8_t *)x)[i]; break;
    case ncclUint8: ((uint8_t *)acc)[i] += ((const uint8_t *)x)[i]; break;
    case ncclInt32: ((int32_t *)acc)[i] += ((const int32_t *)x)[i]; break;
    case ncclUint32: ((uint32_t *)acc)[i] += ((const uint32_t *)x)[i]; break;
    case ncclInt64: ((int64_t *)acc)[i] += ((const int64_t *)x)[i]; break;
    case ncclUint64: ((uint64_t *)acc)[i] += ((const uint64_t *)x)[i]; break;
    }
}
// The checks every call makes when issued: the same call on every rank, buffers inside
// device allocations, the stream's wait for the default stream.
inline void nccl_issue(const char *call, ncclComm_t comm, const void *send, size_t send_bytes, const void *recv,
                       size_t recv_bytes, long long count, ncclDataType_t type, int root, void *stream) {
    if (comm == nullptr) { EMU_HOST_ERROR("%s: no communicator (ncclCommInitRank first)", call); }
    if (stream != nullptr && ((Stream *)stream)->waited_default < default_count) {
        EMU_HOST_ERROR("%s on a stream that has not waited (cudaStreamWaitEvent) for all the work issued to the default "
                       "stream before it: on a GPU it may read memory that work is still writing", call);
    }
    if (send_bytes > 0) { check_range(call, "send buffer", (uintptr_t)send, send_bytes, 1); }
    if (recv_bytes > 0) { check_range(call, "receive buffer", (uintptr_t)recv, recv_bytes, 1); }
    long long which = 0; // (the call, by its name's hash)
    for (const char *c = call; *c != '\0'; c++) { which = which * 31 + *c; }
    long long mine[4] = {which, count, (long long)type, root};
    std::vector<long long> all((size_t)comm->nranks * 4);
    nccl_mpi_check(MPI_Allgather(mine, 4, MPI_LONG_LONG, all.data(), 4, MPI_LONG_LONG, MPI_COMM_WORLD), call);
    for (int r = 0; r < comm->nranks; r++) {
        if (memcmp(&all[(size_t)r * 4], mine, sizeof(mine)) != 0) {
            EMU_HOST_ERROR("%s on rank %d: rank %d made another call or another count or type (%lld elements of type %lld"
                           " against %lld of %lld): on a GPU the ranks would hang or mix data", call, comm->rank, r, count,
                           (long long)type, all[(size_t)r * 4 + 1], all[(size_t)r * 4 + 2]);
        }
    }
}
// The race check of a deferred collective: its buffers' bytes are hashed when it is issued
// and again when it runs; a change means other work wrote them in between, which on a GPU
// races with the collective (a default-stream kernel still writing the gradients it sums, or
// one reading its result before it is done: the result is then stale here). Writes by the
// collectives of the same stream that ran in between are in order, not races: their receive
// ranges are remembered, and a buffer one of them wrote is not checked.
inline uint64_t nccl_hash(const void *p, size_t bytes) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < bytes; i++) { h = (h ^ b[i]) * 0x100000001b3ull; }
    return h;
}
struct NcclWrite { uintptr_t at; size_t bytes; };
inline std::map<void *, std::vector<NcclWrite>> &nccl_writes() { static std::map<void *, std::vector<NcclWrite>> w; return w; }
struct NcclRace {
    const char *call;
    void *stream;
    const void *send, *recv;
    size_t send_bytes, recv_bytes, writes_before; // (the stream's collectives that had run when this one was issued)
    uint64_t send_hash, recv_hash;
};
inline NcclRace nccl_race_start(const char *call, void *stream, const void *send, size_t send_bytes, const void *recv,
                                size_t recv_bytes) {
    return NcclRace{call, stream, send, recv, send_bytes, recv_bytes, nccl_writes()[stream].size(),
                    nccl_hash(send, send_bytes), nccl_hash(recv, recv_bytes)};
}
// when the collective runs (before it moves anything)
inline void nccl_race_check(const NcclRace &r) {
    if (r.stream == nullptr) { return; } // (the default stream: it ran as issued)
    const std::vector<NcclWrite> &w = nccl_writes()[r.stream];
    auto written = [&](const void *p, size_t bytes) {
        for (size_t i = r.writes_before; i < w.size(); i++) {
            if ((uintptr_t)p < w[i].at + w[i].bytes && w[i].at < (uintptr_t)p + bytes) { return true; }
        }
        return false;
    };
    if (!written(r.send, r.send_bytes) && nccl_hash(r.send, r.send_bytes) != r.send_hash) {
        EMU_HOST_ERROR("%s: its send buffer was written after the call was issued and before it ran (on a GPU: a race between "
                       "the collective's stream and the work that wrote it; wait with an event before issuing it)", r.call);
    }
    if (!written(r.recv, r.recv_bytes) && nccl_hash(r.recv, r.recv_bytes) != r.recv_hash) {
        EMU_HOST_ERROR("%s: its receive buffer was written after the call was issued and before it ran (on a GPU: a race "
                       "with the collective's stream)", r.call);
    }
}
// after it ran: what it wrote
inline void nccl_race_done(const NcclRace &r) {
    if (r.stream != nullptr) { nccl_writes()[r.stream].push_back(NcclWrite{(uintptr_t)r.recv, r.recv_bytes}); }
}
// two ranges that overlap (other than as NCCL allows in place, checked by the caller)
inline bool nccl_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}
inline int nccl_bytes_int(size_t bytes, const char *call) {
    if (bytes > (size_t)INT_MAX) { EMU_HOST_ERROR("%s: %zu bytes in one call, more than the stand-in moves (2^31 - 1)", call, bytes); }
    return (int)bytes;
}
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof(*id));
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = emu::mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32));
    memcpy(id->internal, &x, sizeof(x));
    return ncclSuccess;
}
// a communicator of all the processes of the MPI run (the stand-in's transport): nranks
// must be their number and rank this process's, and every rank must pass the same id
inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int initialized = 0, size = 0, me = 0;
    MPI_Initialized(&initialized);
    if (!initialized) { EMU_HOST_ERROR("ncclCommInitRank: the NCCL stand-in moves data with MPI: MPI_Init first"); }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me) {
        EMU_HOST_ERROR("ncclCommInitRank(nranks %d, rank %d) in MPI process %d of %d: the stand-in's ranks are MPI's",
                       nranks, rank, me, size);
    }
    ncclUniqueId first = id;
    emu::nccl_mpi_check(MPI_Bcast(&first, sizeof(first), MPI_BYTE, 0, MPI_COMM_WORLD), "ncclCommInitRank");
    if (memcmp(&first, &id, sizeof(id)) != 0) {
        EMU_HOST_ERROR("ncclCommInitRank on rank %d: a unique id other than rank 0's (on a GPU: never connects)", rank);
    }
    *comm = new ncclComm{rank, nranks};
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) { delete comm; return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { delete comm; return ncclSuccess; }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *r) { *r = ncclSuccess; return ncclSuccess; }
inline ncclResult_t ncclCommCount(const ncclComm_t comm, int *n) { *n = comm->nranks; return ncclSuccess; }
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *r) { *r = comm->rank; return ncclSuccess; }
inline ncclResult_t ncclGroupStart() { emu::nccl_group_depth++; return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() {
    if (emu::nccl_group_depth == 0) { EMU_HOST_ERROR("ncclGroupEnd without ncclGroupStart"); }
    emu::nccl_group_depth--;
    return ncclSuccess;
}

// recv = the sum over the ranks of send (count elements each)
inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
    const char *call = "ncclAllReduce";
    if (op != ncclSum) { EMU_HOST_ERROR("%s: only ncclSum is emulated", call); }
    size_t bytes = count * emu::nccl_type_size(type, call);
    emu::nccl_issue(call, comm, send, bytes, recv, bytes, (long long)count, type, -1, stream);
    if (send != recv && emu::nccl_overlap(send, bytes, recv, bytes)) { EMU_HOST_ERROR("%s: send and receive buffers overlap, not in place", call); }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, bytes, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        std::vector<char> all((size_t)comm->nranks * bytes + 1);
        emu::nccl_mpi_check(MPI_Allgather(send, emu::nccl_bytes_int(bytes, call), MPI_BYTE, all.data(), (int)bytes, MPI_BYTE,
                                          MPI_COMM_WORLD), call);
        for (int r = 1; r < comm->nranks; r++) {
            for (size_t i = 0; i < count; i++) { emu::nccl_add(all.data(), all.data() + (size_t)r * bytes, i, type); }
        }
        memcpy(recv, all.data(), bytes);
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
// recv (count elements) = the sum over the ranks of their send's part `rank` (send holds
// nranks * count elements)
inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream) {
    const char *call = "ncclReduceScatter";
    if (op != ncclSum) { EMU_HOST_ERROR("%s: only ncclSum is emulated", call); }
    size_t bytes = count * emu::nccl_type_size(type, call), send_bytes = bytes * (size_t)comm->nranks;
    emu::nccl_issue(call, comm, send, send_bytes, recv, bytes, (long long)count, type, -1, stream);
    if ((const char *)recv != (const char *)send + (size_t)comm->rank * bytes && emu::nccl_overlap(send, send_bytes, recv, bytes)) {
        EMU_HOST_ERROR("%s: the receive buffer overlaps the send buffer, but not in place (recv = send + rank * count)", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, send_bytes, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        std::vector<char> parts(send_bytes + 1); // part r: rank r's send part `rank`
        int n = emu::nccl_bytes_int(bytes, call);
        emu::nccl_mpi_check(MPI_Alltoall(send, n, MPI_BYTE, parts.data(), n, MPI_BYTE, MPI_COMM_WORLD), call);
        for (int r = 1; r < comm->nranks; r++) {
            for (size_t i = 0; i < count; i++) { emu::nccl_add(parts.data(), parts.data() + (size_t)r * bytes, i, type); }
        }
        memcpy(recv, parts.data(), bytes);
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
// recv (nranks * count elements) = every rank's send, in rank order
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t stream) {
    const char *call = "ncclAllGather";
    size_t bytes = count * emu::nccl_type_size(type, call), recv_bytes = bytes * (size_t)comm->nranks;
    emu::nccl_issue(call, comm, send, bytes, recv, recv_bytes, (long long)count, type, -1, stream);
    if ((const char *)send != (const char *)recv + (size_t)comm->rank * bytes && emu::nccl_overlap(send, bytes, recv, recv_bytes)) {
        EMU_HOST_ERROR("%s: the send buffer overlaps the receive buffer, but not in place (send = recv + rank * count)", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, bytes, recv, recv_bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        std::vector<char> all(recv_bytes + 1);
        int n = emu::nccl_bytes_int(bytes, call);
        emu::nccl_mpi_check(MPI_Allgather(send, n, MPI_BYTE, all.data(), n, MPI_BYTE, MPI_COMM_WORLD), call);
        memcpy(recv, all.data(), recv_bytes);
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
// recv = root's send, on every rank
inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
    const char *call = "ncclBroadcast";
    if (root < 0 || root >= comm->nranks) { EMU_HOST_ERROR("%s: root %d of %d ranks", call, root, comm->nranks); }
    size_t bytes = count * emu::nccl_type_size(type, call);
    emu::nccl_issue(call, comm, send, comm->rank == root ? bytes : 0, recv, bytes, (long long)count, type, root, stream);
    if (send != recv && comm->rank == root && emu::nccl_overlap(send, bytes, recv, bytes)) {
        EMU_HOST_ERROR("%s: send and receive buffers overlap, not in place", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, comm->rank == root ? bytes : 0, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        std::vector<char> data(bytes + 1);
        if (comm->rank == root) { memcpy(data.data(), send, bytes); }
        emu::nccl_mpi_check(MPI_Bcast(data.data(), emu::nccl_bytes_int(bytes, call), MPI_BYTE, root, MPI_COMM_WORLD), call);
        memcpy(recv, data.data(), bytes);
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
#endif
