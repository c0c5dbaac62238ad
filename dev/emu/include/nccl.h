// Under emulation (dev/emu/emu_build.sh puts this folder first on the include path) NCCL
// is this file: the collectives the project's programs call, between processes, each
// process one emulated GPU, however they were started (mpirun, or a launcher of their own
// with a rendezvous). The data moves over TCP, as NCCL's own bootstrap does: the unique id
// names a socket of the process that made it (NCCL_COMM_ID=host:port picks it, as it
// does NCCL's; else this machine's first network address other than loopback), rank 0
// listens there and every other rank connects to it. Each collective then goes through
// rank 0 (a star: every rank sends it its part, it computes and sends each rank its
// result); the sums are NCCL's, in the buffer's own type: each addition in float, rounded
// to the type (bf16, fp16) before the next, the ranks' values added in rank order. (NCCL's
// ring adds them in ring order; with 2 ranks it is one addition, the same either way.)
// A rank that dies closes its connection: every other rank then stops with a message
// naming it; a rank silent for EMU_NCCL_TIMEOUT seconds (600 by default) too.
//
// What a GPU would do wrong is an error here, with the call named:
//   - every rank must make the same calls, in the same order, with the same counts and
//     types (on a GPU a mismatch hangs or mixes data): rank 0 compares them as each runs;
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
#include <arpa/inet.h>
#include <cerrno>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

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
struct ncclComm { int rank, nranks; std::vector<int> fds; }; // (rank 0: a socket to each rank; others: one, to rank 0)
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
inline double wall_now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
// the socket transport: its time-out, and whole messages to and from one rank
inline double nccl_timeout() {
    const char *e = getenv("EMU_NCCL_TIMEOUT");
    double t = e != nullptr ? atof(e) : 600.0;
    return t > 0.0 ? t : 600.0;
}
inline void nccl_wait_fd(int fd, short events, const char *call, int peer, int rank) {
    struct pollfd p = {fd, events, 0};
    int ms = (int)(nccl_timeout() * 1000.0);
    for (;;) {
        int n = poll(&p, 1, ms);
        if (n > 0) { return; }
        if (n == 0) {
            EMU_HOST_ERROR("%s on rank %d: no word from rank %d for %g s (EMU_NCCL_TIMEOUT): it hangs, or it makes other calls",
                           call, rank, peer, nccl_timeout());
        }
        if (errno != EINTR) { EMU_HOST_ERROR("%s on rank %d: poll: %s", call, rank, strerror(errno)); }
    }
}
// all of `bytes` sent (sending) or received, or an error naming the peer
inline void nccl_move(int fd, void *data, size_t bytes, bool sending, const char *call, int peer, int rank) {
    char *p = (char *)data;
    while (bytes > 0) {
        nccl_wait_fd(fd, sending ? POLLOUT : POLLIN, call, peer, rank);
        ssize_t n = sending ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
        if (n < 0 && errno == EINTR) { continue; }
        if (n <= 0) {
            const char *why = n < 0 ? strerror(errno) : "closed";
            if (peer < 0) { EMU_HOST_ERROR("%s on rank %d: a connecting process is gone (its connection: %s)", call, rank, why); }
            EMU_HOST_ERROR("%s on rank %d: rank %d is gone (its connection: %s): it exited or died", call, rank, peer, why);
        }
        p += n;
        bytes -= (size_t)n;
    }
}
inline void nccl_send(int fd, const void *data, size_t bytes, const char *call, int peer, int rank) {
    nccl_move(fd, (void *)data, bytes, true, call, peer, rank);
}
inline void nccl_recv(int fd, void *data, size_t bytes, const char *call, int peer, int rank) {
    nccl_move(fd, data, bytes, false, call, peer, rank);
}
// What a rank says of a collective before its data: which call, count, type, root, and
// how many bytes of data follow
struct NcclHeader { long long which, count, type, root, bytes; };
// One collective through rank 0: every rank sends its header and `bytes` of data; on rank
// 0 `reply` gets every rank's data (rank order) and returns each rank's result, which this
// function sends (and rank 0's own it copies to out); the other ranks receive theirs
// (out_bytes) into out.
inline void nccl_star(const char *call, ncclComm_t comm, long long count, ncclDataType_t type, int root, const void *mine,
                      size_t bytes, void *out, size_t out_bytes,
                      const std::function<std::vector<std::vector<char>>(std::vector<std::vector<char>> &)> &reply) {
    long long which = 0; // (the call, by its name's hash)
    for (const char *c = call; *c != '\0'; c++) { which = which * 31 + *c; }
    NcclHeader h = {which, count, (long long)type, root, (long long)bytes};
    if (comm->rank != 0) {
        nccl_send(comm->fds[0], &h, sizeof(h), call, 0, comm->rank);
        nccl_send(comm->fds[0], mine, bytes, call, 0, comm->rank);
        nccl_recv(comm->fds[0], out, out_bytes, call, 0, comm->rank);
        return;
    }
    std::vector<std::vector<char>> all((size_t)comm->nranks);
    all[0].assign((const char *)mine, (const char *)mine + bytes);
    for (int r = 1; r < comm->nranks; r++) {
        NcclHeader theirs;
        nccl_recv(comm->fds[(size_t)r], &theirs, sizeof(theirs), call, r, 0);
        if (theirs.which != h.which || theirs.count != h.count || theirs.type != h.type || theirs.root != h.root) {
            EMU_HOST_ERROR("%s on rank 0: rank %d made another call or another count or type (%lld elements of type %lld"
                           " against %lld of %lld): on a GPU the ranks would hang or mix data", call, r, count,
                           (long long)type, theirs.count, theirs.type);
        }
        all[(size_t)r].resize((size_t)theirs.bytes);
        nccl_recv(comm->fds[(size_t)r], all[(size_t)r].data(), (size_t)theirs.bytes, call, r, 0);
    }
    std::vector<std::vector<char>> results = reply(all);
    for (int r = 1; r < comm->nranks; r++) {
        nccl_send(comm->fds[(size_t)r], results[(size_t)r].data(), results[(size_t)r].size(), call, r, 0);
    }
    memcpy(out, results[0].data(), out_bytes);
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
                       size_t recv_bytes, void *stream) {
    if (comm == nullptr) { EMU_HOST_ERROR("%s: no communicator (ncclCommInitRank first)", call); }
    if (stream != nullptr && ((Stream *)stream)->waited_default < default_count) {
        EMU_HOST_ERROR("%s on a stream that has not waited (cudaStreamWaitEvent) for all the work issued to the default "
                       "stream before it: on a GPU it may read memory that work is still writing", call);
    }
    if (send_bytes > 0) { check_range(call, "send buffer", (uintptr_t)send, send_bytes, 1); }
    if (recv_bytes > 0) { check_range(call, "receive buffer", (uintptr_t)recv, recv_bytes, 1); }
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
}

// The unique id: where rank 0 listens, and a number that tells this run's ranks from
// another's
namespace emu {
struct NcclId { uint64_t magic, nonce; uint32_t addr; uint16_t port; }; // (addr, port: network byte order)
inline constexpr uint64_t NCCL_ID_MAGIC = 0x314c43434e554d45ull; // "EMUNCCL1"
inline int nccl_listen_fd = -1; // the socket ncclGetUniqueId opened (in the process that is to be rank 0)
inline uint64_t nccl_listen_nonce = 0;
struct NcclHello { uint64_t magic, nonce; int rank, nranks; };
inline void nccl_tcp_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
// NCCL_COMM_ID=host:port, else this machine's first IPv4 address other than loopback (else
// loopback) and any free port
inline void nccl_root_address(uint32_t *addr, uint16_t *port) {
    *addr = htonl(INADDR_LOOPBACK);
    *port = 0;
    const char *e = getenv("NCCL_COMM_ID");
    if (e != nullptr && *e != '\0') {
        char host[256];
        const char *colon = strrchr(e, ':');
        int p = colon != nullptr ? atoi(colon + 1) : 0;
        size_t n = colon != nullptr ? (size_t)(colon - e) : 0;
        if (colon == nullptr || n == 0 || n >= sizeof(host) || p <= 0 || p > 65535) {
            EMU_HOST_ERROR("NCCL_COMM_ID=%s: not host:port", e);
        }
        memcpy(host, e, n);
        host[n] = '\0';
        in_addr a;
        if (inet_pton(AF_INET, host, &a) != 1) { EMU_HOST_ERROR("NCCL_COMM_ID=%s: the stand-in takes an IPv4 address", e); }
        *addr = a.s_addr;
        *port = htons((uint16_t)p);
        return;
    }
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0) { return; }
    for (ifaddrs *i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) {
            continue;
        }
        *addr = ((sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        break;
    }
    freeifaddrs(list);
}
}

// A new run's id: opens the socket its rank 0 (this process) listens on
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    emu::NcclId x;
    memset(&x, 0, sizeof(x));
    x.magic = emu::NCCL_ID_MAGIC;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x.nonce = emu::mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec);
    emu::nccl_root_address(&x.addr, &x.port);
    if (emu::nccl_listen_fd >= 0) { close(emu::nccl_listen_fd); }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) { EMU_HOST_ERROR("ncclGetUniqueId: socket: %s", strerror(errno)); }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = x.port;
    socklen_t len = sizeof(a);
    if (bind(fd, (sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 || getsockname(fd, (sockaddr *)&a, &len) != 0) {
        EMU_HOST_ERROR("ncclGetUniqueId: cannot listen on port %d: %s", ntohs(x.port), strerror(errno));
    }
    x.port = a.sin_port;
    emu::nccl_listen_fd = fd;
    emu::nccl_listen_nonce = x.nonce;
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &x, sizeof(x));
    return ncclSuccess;
}
// A communicator of nranks processes, this one rank `rank`; every rank must pass the same
// id, and rank 0 must be the process that made it. Rank 0 waits for every other rank to
// connect (EMU_NCCL_TIMEOUT), the others try to until then.
inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    const char *call = "ncclCommInitRank";
    emu::NcclId x;
    memcpy(&x, id.internal, sizeof(x));
    if (nranks < 1 || rank < 0 || rank >= nranks) { EMU_HOST_ERROR("%s: rank %d of %d ranks", call, rank, nranks); }
    if (x.magic != emu::NCCL_ID_MAGIC) { EMU_HOST_ERROR("%s on rank %d: the id is not one ncclGetUniqueId made", call, rank); }
    ncclComm_t c = new ncclComm{rank, nranks, {}};
    double deadline = emu::wall_now() + emu::nccl_timeout();
    if (rank == 0) {
        if (emu::nccl_listen_fd < 0 || emu::nccl_listen_nonce != x.nonce) {
            EMU_HOST_ERROR("%s: rank 0 must be the process whose ncclGetUniqueId made the id (the stand-in's rank 0 listens"
                           " on the socket it opened)", call);
        }
        c->fds.assign((size_t)nranks, -1);
        for (int joined = 1; joined < nranks; joined++) {
            struct pollfd p = {emu::nccl_listen_fd, POLLIN, 0};
            int left = (int)((deadline - emu::wall_now()) * 1000.0);
            if (left <= 0 || poll(&p, 1, left) <= 0) {
                EMU_HOST_ERROR("%s on rank 0: only %d of %d ranks connected in %g s (EMU_NCCL_TIMEOUT)", call, joined, nranks,
                               emu::nccl_timeout());
            }
            int fd = accept4(emu::nccl_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) { EMU_HOST_ERROR("%s on rank 0: accept: %s", call, strerror(errno)); }
            emu::nccl_tcp_options(fd);
            emu::NcclHello h;
            emu::nccl_recv(fd, &h, sizeof(h), call, -1, 0);
            if (h.magic != emu::NCCL_ID_MAGIC || h.nonce != x.nonce) {
                EMU_HOST_ERROR("%s on rank 0: a rank with another id connected (another run's, on a GPU: never connects)", call);
            }
            if (h.nranks != nranks || h.rank < 1 || h.rank >= nranks || c->fds[(size_t)h.rank] >= 0) {
                EMU_HOST_ERROR("%s on rank 0: a rank says it is rank %d of %d, this run has %d ranks%s", call, h.rank, h.nranks,
                               nranks, h.rank >= 1 && h.rank < nranks && c->fds[(size_t)h.rank] >= 0 ? " and that rank already" : "");
            }
            c->fds[(size_t)h.rank] = fd;
        }
        close(emu::nccl_listen_fd);
        emu::nccl_listen_fd = -1;
    } else {
        int fd = -1;
        for (;;) {
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a;
            memset(&a, 0, sizeof(a));
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = x.addr;
            a.sin_port = x.port;
            if (fd >= 0 && connect(fd, (sockaddr *)&a, sizeof(a)) == 0) { break; }
            int err = errno;
            if (fd >= 0) { close(fd); }
            if (emu::wall_now() > deadline) {
                char host[INET_ADDRSTRLEN] = "?";
                inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
                EMU_HOST_ERROR("%s on rank %d: cannot reach rank 0 at %s:%d in %g s (EMU_NCCL_TIMEOUT): %s", call, rank, host,
                               ntohs(x.port), emu::nccl_timeout(), strerror(err));
            }
            usleep(50000);
        }
        emu::nccl_tcp_options(fd);
        emu::NcclHello h = {emu::NCCL_ID_MAGIC, x.nonce, rank, nranks};
        emu::nccl_send(fd, &h, sizeof(h), call, 0, rank);
        c->fds.assign(1, fd);
    }
    *comm = c;
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    for (int fd : comm->fds) { if (fd >= 0) { close(fd); } }
    delete comm;
    return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
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
    emu::nccl_issue(call, comm, send, bytes, recv, bytes, stream);
    if (send != recv && emu::nccl_overlap(send, bytes, recv, bytes)) { EMU_HOST_ERROR("%s: send and receive buffers overlap, not in place", call); }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, bytes, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        emu::nccl_star(call, comm, (long long)count, type, -1, send, bytes, recv, bytes, [&](std::vector<std::vector<char>> &all) {
            std::vector<char> sum = all[0];
            for (size_t r = 1; r < all.size(); r++) {
                for (size_t i = 0; i < count; i++) { emu::nccl_add(sum.data(), all[r].data(), i, type); }
            }
            return std::vector<std::vector<char>>(all.size(), sum);
        });
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
    emu::nccl_issue(call, comm, send, send_bytes, recv, bytes, stream);
    if ((const char *)recv != (const char *)send + (size_t)comm->rank * bytes && emu::nccl_overlap(send, send_bytes, recv, bytes)) {
        EMU_HOST_ERROR("%s: the receive buffer overlaps the send buffer, but not in place (recv = send + rank * count)", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, send_bytes, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        emu::nccl_star(call, comm, (long long)count, type, -1, send, send_bytes, recv, bytes, [&](std::vector<std::vector<char>> &all) {
            std::vector<std::vector<char>> parts(all.size());
            for (size_t p = 0; p < all.size(); p++) { // (part p: the sum of every rank's part p)
                parts[p].assign(all[0].begin() + (long)(p * bytes), all[0].begin() + (long)((p + 1) * bytes));
                for (size_t r = 1; r < all.size(); r++) {
                    for (size_t i = 0; i < count; i++) { emu::nccl_add(parts[p].data(), all[r].data() + p * bytes, i, type); }
                }
            }
            return parts;
        });
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
// recv (nranks * count elements) = every rank's send, in rank order
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t stream) {
    const char *call = "ncclAllGather";
    size_t bytes = count * emu::nccl_type_size(type, call), recv_bytes = bytes * (size_t)comm->nranks;
    emu::nccl_issue(call, comm, send, bytes, recv, recv_bytes, stream);
    if ((const char *)send != (const char *)recv + (size_t)comm->rank * bytes && emu::nccl_overlap(send, bytes, recv, recv_bytes)) {
        EMU_HOST_ERROR("%s: the send buffer overlaps the receive buffer, but not in place (send = recv + rank * count)", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, bytes, recv, recv_bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        emu::nccl_star(call, comm, (long long)count, type, -1, send, bytes, recv, recv_bytes, [&](std::vector<std::vector<char>> &all) {
            std::vector<char> joined;
            for (const std::vector<char> &part : all) { joined.insert(joined.end(), part.begin(), part.end()); }
            return std::vector<std::vector<char>>(all.size(), joined);
        });
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
// recv = root's send, on every rank
inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
    const char *call = "ncclBroadcast";
    if (root < 0 || root >= comm->nranks) { EMU_HOST_ERROR("%s: root %d of %d ranks", call, root, comm->nranks); }
    size_t bytes = count * emu::nccl_type_size(type, call), mine = comm->rank == root ? bytes : 0;
    emu::nccl_issue(call, comm, send, mine, recv, bytes, stream);
    if (send != recv && comm->rank == root && emu::nccl_overlap(send, bytes, recv, bytes)) {
        EMU_HOST_ERROR("%s: send and receive buffers overlap, not in place", call);
    }
    emu::NcclRace race = emu::nccl_race_start(call, stream, send, mine, recv, bytes);
    emu::defer(stream, [=]() {
        emu::LibraryCall library_call;
        emu::nccl_race_check(race);
        emu::nccl_star(call, comm, (long long)count, type, root, mine > 0 ? send : nullptr, mine, recv, bytes,
                       [&](std::vector<std::vector<char>> &all) {
            if (all[(size_t)root].size() != bytes) { EMU_HOST_ERROR("%s: the root sent %zu bytes, not %zu", call, all[(size_t)root].size(), bytes); }
            return std::vector<std::vector<char>>(all.size(), all[(size_t)root]);
        });
        emu::nccl_race_done(race);
    });
    return ncclSuccess;
}
#endif
