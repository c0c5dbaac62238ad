// lib/utils.h: what every program needs and no chapter teaches. Checked libc calls that
// exit with the reason and our source line (fopenCheck, freadCheck, fwriteCheck, fcloseCheck,
// mallocCheck); bad input named by its file (die_file, read_whole_file); paths that never
// silently truncate (format_path, path_concat); atomic file writes (write_file_atomic);
// flags parsed whole (usage_error, parse_int, parse_float); a resumed run's log cut back to
// its checkpoint (log_truncate_after); the OpenMP wait policy; clocks and ETAs; bf16 and
// fp16 conversions on the host.
// Header-only, every function static inline (a program that uses some of them still
// compiles under -Wall -Wextra -Werror). The including program defines PROGRAM first (how
// the user runs it, for the HINT lines) and _XOPEN_SOURCE 700 (or _POSIX_C_SOURCE 200809L)
// before any system header (fsync, access, mkdir and clock_gettime are POSIX; M_PI X/Open).
#ifndef LIB_UTILS_H
#define LIB_UTILS_H
#ifndef PROGRAM
#error "define PROGRAM (how the user runs this program, e.g. \"./infer\") before including lib/utils.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// checked calls

// Every libc call that can fail goes through one of these wrappers. On failure each prints one
// line saying what failed, the C library's own reason (strerror) and where in our source it
// happened, then exits with status 1. They are static inline so that a program using only
// some of them still compiles cleanly under -Wall -Wextra -Werror.

static inline FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *fp = fopen(path, mode);
    if (fp == NULL) {
        fprintf(stderr, "Error: cannot open '%s' (mode \"%s\"): %s [%s:%d]\n",
                path, mode, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

static inline void fread_check(void *ptr, size_t size, size_t nmemb, FILE *stream,
                               const char *file, int line) {
    size_t got = fread(ptr, size, nmemb, stream);
    if (got != nmemb) {
        // a short read is either the file ending early or a real I/O error; say which
        if (feof(stream)) {
            fprintf(stderr, "Error: file ended early: read %zu of %zu items of %zu bytes [%s:%d]\n",
                    got, nmemb, size, file, line);
        } else {
            fprintf(stderr, "Error: read failed after %zu of %zu items: %s [%s:%d]\n",
                    got, nmemb, strerror(errno), file, line);
        }
        exit(EXIT_FAILURE);
    }
}
#define freadCheck(ptr, size, nmemb, stream) fread_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

static inline void fclose_check(FILE *fp, const char *file, int line) {
    // fclose flushes buffered writes, so a full disk often shows up only here
    if (fclose(fp) != 0) {
        fprintf(stderr, "Error: closing a file failed: %s [%s:%d]\n", strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fcloseCheck(fp) fclose_check(fp, __FILE__, __LINE__)

static inline void fwrite_check(const void *ptr, size_t size, size_t nmemb, FILE *stream, const char *file, int line) {
    size_t put = fwrite(ptr, size, nmemb, stream);
    if (put != nmemb) {
        fprintf(stderr, "Error: write failed after %zu of %zu items: %s [%s:%d]\n", put, nmemb, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fwriteCheck(ptr, size, nmemb, stream) fwrite_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

static inline void *malloc_check(size_t size, const char *file, int line) {
    // malloc(0) may legally return NULL; ask for one byte so that is never mistaken for failure
    void *ptr = malloc(size > 0 ? size : 1);
    if (ptr == NULL) {
        fprintf(stderr, "Error: out of memory: could not allocate %zu bytes [%s:%d]\n",
                size, file, line);
        exit(EXIT_FAILURE);
    }
    return ptr;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// files: paths, bad input, atomic writes

// snprintf into a path buffer, or exit if the path does not fit (a silently
// truncated path would read or write the wrong file)
static inline void format_path(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void format_path(char *out, size_t size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(out, size, fmt, args);
    va_end(args);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "Error: a path is longer than %zu bytes: %.60s...\n", size - 1, out);
        exit(EXIT_FAILURE);
    }
}

#define MAX_PATH_LEN 4096

// Bad input (as opposed to a failing libc call) gets one line naming the file and the
// problem, an optional HINT line saying what to do about it, and exit status 1.
__attribute__((noreturn)) static inline void die_file(const char *path, const char *hint, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "Error: %s: ", path);
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    if (hint != NULL) { fprintf(stderr, "HINT: %s\n", hint); }
    exit(EXIT_FAILURE);
}

// out = a followed by b, for building file names; a name that does not fit is an error.
static inline void path_concat(char out[], const char *a, const char *b) {
    int n = snprintf(out, MAX_PATH_LEN, "%s%s", a, b);
    if (n < 0 || n >= MAX_PATH_LEN) { die_file(a, NULL, "path is too long (over %d bytes)", MAX_PATH_LEN - 1); }
}

// Reads a whole file into memory (plus a terminating 0 byte that parsers may rely on).
// We look at the path with access() and stat() first only to print a HINT with the error
// (and because fopen happily opens a folder); fopenCheck stays the real check.
static inline uint8_t *read_whole_file(const char *path, size_t *len, const char *hint) {
    struct stat st;
    if (access(path, R_OK) != 0) { die_file(path, hint, "cannot read it: %s", strerror(errno)); }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { die_file(path, hint, "is a folder, not a file"); }
    FILE *f = fopenCheck(path, "rb");
    if (fseek(f, 0, SEEK_END) != 0) { die_file(path, NULL, "cannot seek: %s", strerror(errno)); }
    long size = ftell(f);
    if (size < 0) { die_file(path, NULL, "cannot tell its size: %s", strerror(errno)); }
    if (fseek(f, 0, SEEK_SET) != 0) { die_file(path, NULL, "cannot seek: %s", strerror(errno)); }
    uint8_t *data = (uint8_t *)mallocCheck((size_t)size + 1);
    freadCheck(data, 1, (size_t)size, f);
    fcloseCheck(f);
    data[size] = 0;
    *len = (size_t)size;
    return data;
}

// Write each of n buffers, in order, to `path` atomically: write path.tmp, flush,
// fsync, rename over path, fsync the directory (so that the rename itself is on
// disk before we write the next file). A crash or a full disk leaves either the
// old file or the new one, never half of one; on failure the .tmp is removed.
static inline void write_file_atomic(const char *path, const void **bufs, const size_t *sizes, int n) {
    char tmp[4096], dir[4096];
    format_path(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *fp = fopenCheck(tmp, "wb");
    int ok = 1;
    // (for dev/test/test_checkpoint_kill.sh: with TEST_KILL_WRITING=TEXT set, writing a file
    // whose path contains TEXT kills the process, kill -9's SIGKILL, halfway through its bytes)
    const char *kill_at = getenv("TEST_KILL_WRITING");
    if (kill_at != NULL && kill_at[0] != '\0' && strstr(path, kill_at) != NULL) {
        size_t total = 0, half;
        for (int i = 0; i < n; i++) { total += sizes[i]; }
        half = total / 2;
        for (int i = 0; i < n && half > 0; i++) {
            size_t part = sizes[i] < half ? sizes[i] : half;
            if (part > 0 && fwrite(bufs[i], 1, part, fp) != part) { break; }
            half -= part;
        }
        fflush(fp);
        kill(getpid(), SIGKILL);
    }
    for (int i = 0; i < n && ok; i++) { ok = sizes[i] == 0 || fwrite(bufs[i], 1, sizes[i], fp) == sizes[i]; }
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "Error: could not write %s: %s (the previous file, if any, is untouched)\n", path, strerror(errno));
        remove(tmp);
        exit(EXIT_FAILURE);
    }
    // the directory entry: fsync the folder the file is in
    format_path(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) { *slash = '\0'; } else { strcpy(dir, "."); }
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd); // best effort: some file systems refuse fsync on a directory
        close(dfd);
    }
}

// On resume, the log of the first run may go on past the checkpoint (it ran a
// while longer before it stopped). Keep only the lines whose first number, read
// with key_format (e.g. "s:%d"), is at most `last`, and write the result back
// atomically, so that the resumed run's lines follow on.
static inline void log_truncate_after(const char *path, const char *key_format, int last) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) { return; } // no log yet: nothing to keep
    size_t cap = 1 << 16, len = 0;
    char *kept = (char *)mallocCheck(cap), line[1024];
    while (fgets(line, sizeof(line), fp) != NULL) {
        int key;
        if (sscanf(line, key_format, &key) != 1 || key > last) { continue; }
        size_t n = strlen(line);
        if (len + n > cap) {
            cap = 2 * (len + n);
            char *bigger = (char *)realloc(kept, cap);
            if (bigger == NULL) { fprintf(stderr, "Error: out of memory reading %s\n", path); exit(EXIT_FAILURE); }
            kept = bigger;
        }
        memcpy(kept + len, line, n);
        len += n;
    }
    fcloseCheck(fp);
    const void *bufs[1] = {kept};
    write_file_atomic(path, bufs, &len, 1);
    free(kept);
}

// ----------------------------------------------------------------------------
// flags

// a bad flag: one line saying what is wrong, one saying where the flags are listed
__attribute__((noreturn)) static inline void usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "Error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nHINT: %s -h lists every flag\n", PROGRAM);
    exit(EXIT_FAILURE);
}

// a whole-string integer in [lo, 2^31), or a usage error naming the flag
static inline long parse_int(const char *flag, const char *s, long lo) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > 2147483647L) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag %s needs an integer >= %ld, got '%%s'", flag, lo);
        usage_error(msg, s);
    }
    return v;
}

// a whole-string non-negative float, or a usage error naming the flag
static inline float parse_float(const char *flag, const char *s) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= 0.0f) || isinf(v)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag %s needs a non-negative number, got '%%s'", flag);
        usage_error(msg, s);
    }
    return v;
}

// ----------------------------------------------------------------------------
// threads and clocks

// How our OpenMP threads wait for each other. At the end of a parallel loop the threads
// that are done wait at a barrier; libgomp's default makes them spin for up to 300,000
// rounds (a millisecond or more) before they sleep. On an idle machine that is fast. But
// when another process keeps the cores busy, a spinning thread holds a core that the
// thread everyone waits for needs, and time slices are milliseconds long: with a busy
// neighbour on both cores, a GPT-2 124M decode step took 10 times as long. So we spin
// briefly (10,000 rounds), then sleep. Measured with ./dev/cpu/bench_infer (d12, decode
// ms at positions 16/256/1000; 2-core Xeon VM, 2026-12-01, while a `make test` also ran):
//   lightly loaded: default 27/29/34, GOMP_SPINCOUNT=10000 27/28/35, passive 32/32/39
//   busy neighbour: default 330/914/375, GOMP_SPINCOUNT=10000 168/180/212, passive 141/148/183
// Passive (never spin) is a little better under load, but 15% slower without it.
// libgomp reads its settings once, when it is loaded, before main runs; setting them
// in main is too late. So main sets ours and starts the program over (exec of
// /proc/self/exe, same arguments), unless the user chose (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT set: then we leave theirs alone). Where exec fails (no /proc), or a
// program is started by another name than its path (from $PATH), we carry on with
// libgomp's default.
static inline void set_omp_wait_policy(char **argv) {
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL) { return; }
    // only where /proc/self/exe is this program: under valgrind or a loader run by hand it
    // is the tool or ld.so, which would start something else (there, set the variable yourself)
    struct stat self, named;
    if (stat("/proc/self/exe", &self) != 0 || stat(argv[0], &named) != 0 || self.st_dev != named.st_dev ||
        self.st_ino != named.st_ino) { return; }
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);
#else
    (void)argv;
#endif
}

// seconds on a clock that only moves forward (for durations, never for randomness)
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "ETA 3m07s": the time the rest takes at the pace so far (`done` of `total` units in
// `seconds`), for the progress lines of long runs (inline: a test build need not use it)
static inline void format_eta(char *out, size_t size, double seconds, double done, double total) {
    if (!(done > 0.0) || !(total >= done)) { snprintf(out, size, "ETA ?"); return; }
    long s = (long)(seconds / done * (total - done) + 0.5);
    if (s >= 3600) { snprintf(out, size, "ETA %ldh%02ldm", s / 3600, s / 60 % 60); }
    else if (s >= 60) { snprintf(out, size, "ETA %ldm%02lds", s / 60, s % 60); }
    else { snprintf(out, size, "ETA %lds", s); }
}

// ----------------------------------------------------------------------------
// 16-bit floats on the host
// To and from float. Narrowing to bf16 rounds to nearest even (llm.c writes its version-5
// files the same way). fp16 (IEEE binary16: 5 exponent bits, 10 mantissa bits) needs its
// exponent rebiased, and its subnormals (exponent 0) scaled by hand.

// bf16 is the top half of a float: widening it is a shift.
static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// ... and narrowing a float to bf16 rounds its top half to nearest, ties to even.
static inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((bits >> 16) | 0x40); } // NaN stays NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    float magnitude;
    if (exponent == 0) {
        magnitude = ldexpf((float)mantissa, -24); // subnormal (or zero): mantissa x 2^-24
    } else if (exponent == 31) {
        magnitude = mantissa == 0 ? INFINITY : NAN;
    } else {
        magnitude = ldexpf((float)(mantissa | 0x400), (int)exponent - 25); // 1.mantissa x 2^(e-15)
    }
    uint32_t bits;
    memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

#endif // LIB_UTILS_H
