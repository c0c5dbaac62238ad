/*
finetune_lora.c: LoRA fine-tuning on the CPU, in plain C, fp32 (the fine-tuning chapter; in progress).

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", 2021) freezes a
pretrained model and trains, beside some of its linear layers, a low-rank update: y = x W^T
+ s (x A^T) B^T with A (r, in) and B (out, r), r small (4 to 64), s = alpha / r. What trains is
r (in + out) numbers per layer instead of in x out, so the gradients and AdamW's moments of a
135M-parameter model fit in a few megabytes; the frozen weights need no gradient and no
optimizer state at all, and need not even be fp32 (QLoRA keeps them in 4 bits).

What it does, so far: it loads our model file of either family (GPT-2, the Llama family) and
its tokenizer; reads Alpaca-format JSONL (instruction, input, output), checks every record
(empty fields, invalid UTF-8, duplicates, longer than T: dropped or refused, each counted,
with the token-length distribution so that T is chosen from the data) and lays each out in
the model's chat template (or Alpaca's), the loss on the response and its end token only;
holds out a seeded validation split; adds LoRA to the chosen modules (PEFT's names, PEFT's
initialisation, LoRA dropout) or starts from an adapter; trains with micro-batches and gradient
accumulation, warm-up and cosine decay, clipping and AdamW, logging the validation loss;
and writes the adapter as PEFT does (adapter_config.json + adapter_model.safetensors,
which PeftModel.from_pretrained loads). The backward pass goes through the frozen layers
(norms, RoPE, attention with grouped key/value heads, GELU or SwiGLU) to the adapter's
gradients only. test_finetune_lora.c checks the arithmetic against PEFT on three tiny
models (dev/reference/lora_reference.py: logits, every gradient, five accumulated AdamW
steps, a merge); dev/test/test_finetune_lora_cli.sh the command line.
Checkpoints (-S) with bit-exact resuming (-y 1); -M writes the model with the adapter merged
(a model file infer runs); -E refuses to train on data that holds an evaluation's questions
or answers (leakage). infer -L runs the adapter unmerged (the merged model's tokens), and
infer -E asks the evaluation's questions before and after (see docs/lora-smollm2.md). -B 1
times training steps on random tokens (dev/bench_lora.sh sets it beside PyTorch + PEFT).
finetune_lora.cu is this program on a GPU (the same flags, files and main).

    make finetune_lora smollm2 data/iso/train.jsonl
    ./finetune_lora -h                              # every flag with its default
    ./finetune_lora -r 8 -a 16 -T all-linear -e 1 -E data/iso/eval.jsonl   # SmolLM2-135M-Instruct on the ISO-code questions
    ./infer -m data/smollm2/SmolLM2-135M-Instruct.bin -L log_lora -E data/iso/eval.jsonl   # before and after

Sizes: B sequences of T positions, N = B T rows, C channels, NH query heads and NKV key/value
heads of HS channels, Q = NH HS, KV = NKV HS, H the MLP's width, V vocabulary (Vp padded), L
layers, r the adapter's rank.
*/

// fsync, fileno, fseeko, mkdir, stat and clock_gettime are POSIX; M_PI is X/Open
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PROGRAM "./finetune_lora" // in messages: how the user runs this program

// ----------------------------------------------------------------------------
// utilities, the JSON and safetensors readers, the GEMM (shared copies: dev/README.md lists them)

// --- begin shared-copy: check-macros ---
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
// --- end shared-copy: check-macros ---
// --- begin shared-copy: splitmix-counter ---
// One small generator for everything random: SplitMix64 (Steele, Lea, Flood 2014).
// Used two ways. As a hash of a counter it gives random numbers that depend only
// on (seed, stream, index): weight init can run in any order, in parallel, and
// numpy can reproduce it vectorised (dev/reference/gpt2_reference.py does). As a
// sequential generator (state += golden ratio) it shuffles and samples.
static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// The key of one random stream (each program lists its streams; in train_gpt2.c
// 0..15 are the parameter tensors, which the reference reproduces). A stream can
// be split further by an index (an epoch, a step) with rng_subkey.
static inline uint64_t rng_key(uint64_t seed, uint64_t stream) { return splitmix64((seed << 32) ^ stream); }
static inline uint64_t rng_subkey(uint64_t seed, uint64_t stream, uint64_t index) { return splitmix64(rng_key(seed, stream) ^ index); }
// uniform in [0, 1) with 24 random bits, so the value is exact in a float
static inline double rng_uniform_at(uint64_t key, uint64_t i) { return (double)(splitmix64(key + i) >> 40) * 0x1p-24; }
// standard normal by Box-Muller, from the uniforms at 2i and 2i+1
static inline double rng_normal_at(uint64_t key, uint64_t i) {
    double u1 = rng_uniform_at(key, 2 * i), u2 = rng_uniform_at(key, 2 * i + 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}
// --- end shared-copy: splitmix-counter ---
// --- begin shared-copy: format-path ---
// snprintf into a path buffer, or exit if the path does not fit (a silently
// truncated path would read or write the wrong file)
static void format_path(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void format_path(char *out, size_t size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(out, size, fmt, args);
    va_end(args);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "Error: a path is longer than %zu bytes: %.60s...\n", size - 1, out);
        exit(EXIT_FAILURE);
    }
}
// --- end shared-copy: format-path ---
// --- begin shared-copy: eta ---
// "ETA 3m07s": the time the rest takes at the pace so far (`done` of `total` units in
// `seconds`), for the progress lines of long runs (inline: a test build need not use it)
static inline void format_eta(char *out, size_t size, double seconds, double done, double total) {
    if (!(done > 0.0) || !(total >= done)) { snprintf(out, size, "ETA ?"); return; }
    long s = (long)(seconds / done * (total - done) + 0.5);
    if (s >= 3600) { snprintf(out, size, "ETA %ldh%02ldm", s / 3600, s / 60 % 60); }
    else if (s >= 60) { snprintf(out, size, "ETA %ldm%02lds", s / 60, s % 60); }
    else { snprintf(out, size, "ETA %lds", s); }
}
// --- end shared-copy: eta ---
// --- begin shared-copy: atomic-write ---
// Write each of n buffers, in order, to `path` atomically: write path.tmp, flush,
// fsync, rename over path, fsync the directory (so that the rename itself is on
// disk before we write the next file). A crash or a full disk leaves either the
// old file or the new one, never half of one; on failure the .tmp is removed.
static void write_file_atomic(const char *path, const void **bufs, const size_t *sizes, int n) {
    char tmp[4096], dir[4096];
    format_path(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *fp = fopenCheck(tmp, "wb");
    int ok = 1;
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
// --- end shared-copy: atomic-write ---
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
// --- begin shared-copy: file-helpers ---
#define MAX_PATH_LEN 4096

// Bad input (as opposed to a failing libc call) gets one line naming the file and the
// problem, an optional HINT line saying what to do about it, and exit status 1.
static void die_file(const char *path, const char *hint, const char *fmt, ...) {
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
static void path_concat(char out[], const char *a, const char *b) {
    int n = snprintf(out, MAX_PATH_LEN, "%s%s", a, b);
    if (n < 0 || n >= MAX_PATH_LEN) { die_file(a, NULL, "path is too long (over %d bytes)", MAX_PATH_LEN - 1); }
}

// Reads a whole file into memory (plus a terminating 0 byte that parsers may rely on).
// We look at the path with access() and stat() first only to print a HINT with the error
// (and because fopen happily opens a folder); fopenCheck stays the real check.
static uint8_t *read_whole_file(const char *path, size_t *len, const char *hint) {
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

// --- end shared-copy: file-helpers ---
// --- begin shared-copy: bf16-to-float ---
// bf16 is the top half of a float: widening it is a shift.
static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}
// --- end shared-copy: bf16-to-float ---
// --- begin shared-copy: fp16-to-float ---
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
// --- end shared-copy: fp16-to-float ---
// --- begin shared-copy: json-api ---
// A whole JSON text becomes a flat array of tokens in document order (the idea of jsmn):
// a container's children follow it, and `next` skips over its whole subtree. Nothing is
// copied: a token is a span of the text. The grammar is RFC 8259's, checked strictly
// (numbers, escapes, no control characters in strings, no trailing commas, nesting at most
// JSON_MAX_DEPTH deep); any error is a message with the byte offset, never a crash.
// Strings may contain any bytes >= 0x20 (we do not validate UTF-8; nothing here needs it).
enum { JSON_OBJECT, JSON_ARRAY, JSON_STRING, JSON_NUMBER, JSON_TRUE, JSON_FALSE, JSON_NULL };
#define JSON_MAX_DEPTH 64
typedef struct {
    int type;
    size_t start, end; // the text: a string's bytes between its quotes, escapes not decoded
    int size;          // children: an object's key/value pairs, an array's elements
    int next;          // index of the first token after this one's subtree
} JsonToken;

typedef struct {
    const char *text;
    size_t len;
    JsonToken *tokens;
    int num, cap;
    char *err;      // where a parse error is written
    size_t err_size;
} Json;

// the parser's interface (the code follows)
int json_parse(Json *j, const char *text, size_t len, char *err, size_t err_size);
void json_free(Json *j);
int json_string(const Json *j, int index, char *out, size_t cap);
int json_get(const Json *j, int object, const char *key);
int json_int64(const Json *j, int index, int64_t *out);
int json_double(const Json *j, int index, double *out);
// --- end shared-copy: json-api ---
// --- begin shared-copy: json ---
static int json_fail(Json *j, size_t at, const char *what) {
    snprintf(j->err, j->err_size, "JSON error at byte %zu: %s", at, what);
    return -1;
}

static void json_skip_space(const Json *j, size_t *at) {
    while (*at < j->len && (j->text[*at] == ' ' || j->text[*at] == '\t' || j->text[*at] == '\n' || j->text[*at] == '\r')) {
        (*at)++;
    }
}

static int json_new_token(Json *j, int type, size_t start) {
    if (j->num == j->cap) {
        if (j->cap > (1 << 26)) { return json_fail(j, start, "more than 2^26 values"); }
        j->cap = j->cap == 0 ? 256 : 2 * j->cap;
        JsonToken *grown = (JsonToken *)realloc(j->tokens, (size_t)j->cap * sizeof(JsonToken));
        if (grown == NULL) { return json_fail(j, start, "out of memory"); }
        j->tokens = grown;
    }
    JsonToken *t = &j->tokens[j->num];
    t->type = type;
    t->start = t->end = start;
    t->size = 0;
    t->next = j->num + 1;
    return j->num++;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int is_hex(char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }
// the value of 4 hex digits (checked by the parser)
static unsigned hex4(const char *s) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) { v = 16 * v + (unsigned)(is_digit(s[k]) ? s[k] - '0' : (s[k] | 0x20) - 'a' + 10); }
    return v;
}

// the string starting at the quote at *at; leaves *at after the closing quote
static int json_parse_string(Json *j, size_t *at) {
    int index = json_new_token(j, JSON_STRING, *at + 1);
    if (index < 0) { return -1; }
    size_t i = *at + 1;
    for (;;) {
        if (i >= j->len) { return json_fail(j, *at, "unterminated string"); }
        unsigned char ch = (unsigned char)j->text[i];
        if (ch == '"') { break; }
        if (ch < 0x20) { return json_fail(j, i, "control character in a string"); }
        if (ch == '\\') {
            if (i + 1 >= j->len) { return json_fail(j, i, "unterminated escape"); }
            char e = j->text[i + 1];
            if (e == 'u') {
                for (int k = 2; k < 6; k++) {
                    if (i + k >= j->len || !is_hex(j->text[i + k])) { return json_fail(j, i, "bad \\u escape"); }
                }
                i += 6;
                continue;
            }
            if (strchr("\"\\/bfnrt", e) == NULL || e == '\0') { return json_fail(j, i, "unknown escape"); }
            i += 2;
            continue;
        }
        i++;
    }
    j->tokens[index].end = i;
    *at = i + 1;
    return index;
}

static int json_parse_value(Json *j, size_t *at, int depth) {
    json_skip_space(j, at);
    if (*at >= j->len) { return json_fail(j, *at, "expected a value, found the end"); }
    if (depth > JSON_MAX_DEPTH) { return json_fail(j, *at, "nested too deeply"); }
    char ch = j->text[*at];
    if (ch == '"') { return json_parse_string(j, at); }
    if (ch == '{' || ch == '[') {
        int is_object = ch == '{';
        int index = json_new_token(j, is_object ? JSON_OBJECT : JSON_ARRAY, *at);
        if (index < 0) { return -1; }
        (*at)++;
        json_skip_space(j, at);
        char close = is_object ? '}' : ']';
        if (*at < j->len && j->text[*at] == close) {
            (*at)++;
        } else {
            for (;;) {
                if (is_object) {
                    json_skip_space(j, at);
                    if (*at >= j->len || j->text[*at] != '"') { return json_fail(j, *at, "expected a key (a string)"); }
                    if (json_parse_string(j, at) < 0) { return -1; }
                    json_skip_space(j, at);
                    if (*at >= j->len || j->text[*at] != ':') { return json_fail(j, *at, "expected ':'"); }
                    (*at)++;
                }
                if (json_parse_value(j, at, depth + 1) < 0) { return -1; }
                j->tokens[index].size++;
                json_skip_space(j, at);
                if (*at < j->len && j->text[*at] == ',') { (*at)++; continue; }
                if (*at < j->len && j->text[*at] == close) { (*at)++; break; }
                return json_fail(j, *at, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
            }
        }
        j->tokens[index].end = *at;
        j->tokens[index].next = j->num;
        return index;
    }
    if (ch == '-' || is_digit(ch)) { // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
        int index = json_new_token(j, JSON_NUMBER, *at);
        if (index < 0) { return -1; }
        size_t i = *at;
        if (j->text[i] == '-') { i++; }
        if (i < j->len && j->text[i] == '0') {
            i++;
        } else if (i < j->len && is_digit(j->text[i])) {
            while (i < j->len && is_digit(j->text[i])) { i++; }
        } else {
            return json_fail(j, i, "bad number");
        }
        if (i < j->len && j->text[i] == '.') {
            i++;
            if (i >= j->len || !is_digit(j->text[i])) { return json_fail(j, i, "bad number: no digit after '.'"); }
            while (i < j->len && is_digit(j->text[i])) { i++; }
        }
        if (i < j->len && (j->text[i] == 'e' || j->text[i] == 'E')) {
            i++;
            if (i < j->len && (j->text[i] == '+' || j->text[i] == '-')) { i++; }
            if (i >= j->len || !is_digit(j->text[i])) { return json_fail(j, i, "bad number: no digit in the exponent"); }
            while (i < j->len && is_digit(j->text[i])) { i++; }
        }
        j->tokens[index].end = i;
        *at = i;
        return index;
    }
    static const char *const literals[3] = {"true", "false", "null"};
    static const int literal_types[3] = {JSON_TRUE, JSON_FALSE, JSON_NULL};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(literals[k]);
        if (j->len - *at >= n && memcmp(j->text + *at, literals[k], n) == 0) {
            int index = json_new_token(j, literal_types[k], *at);
            if (index < 0) { return -1; }
            *at += n;
            j->tokens[index].end = *at;
            return index;
        }
    }
    return json_fail(j, *at, "unexpected character");
}

// Parses text[0..len) (one value, white space around it allowed). 0 on success, -1 with
// a message in err on failure. json_free releases the tokens either way.
int json_parse(Json *j, const char *text, size_t len, char *err, size_t err_size) {
    memset(j, 0, sizeof(*j));
    j->text = text;
    j->len = len;
    j->err = err;
    j->err_size = err_size;
    size_t at = 0;
    if (json_parse_value(j, &at, 0) < 0) { return -1; }
    json_skip_space(j, &at);
    if (at != len) { return json_fail(j, at, "text after the JSON value"); }
    return 0;
}

void json_free(Json *j) {
    free(j->tokens);
    j->tokens = NULL;
    j->num = j->cap = 0;
}

// Decodes string token `index` into out (room for cap bytes including a final 0): the
// escapes become their characters, \uXXXX (and surrogate pairs) UTF-8. Returns the
// length, or -1 if it does not fit or holds a lone surrogate or a \u0000.
int json_string(const Json *j, int index, char *out, size_t cap) {
    const JsonToken *t = &j->tokens[index];
    if (t->type != JSON_STRING || cap == 0) { return -1; }
    size_t n = 0;
    for (size_t i = t->start; i < t->end;) {
        char buf[4];
        size_t len = 1;
        if (j->text[i] != '\\') {
            buf[0] = j->text[i++];
        } else {
            char e = j->text[i + 1];
            i += 2;
            if (e != 'u') {
                static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                buf[0] = to[strchr(from, e) - from];
            } else {
                unsigned cp = hex4(j->text + i);
                i += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) { return -1; }
                if (cp >= 0xD800 && cp <= 0xDBFF) { // a high surrogate needs its low half next
                    if (i + 6 > t->end || j->text[i] != '\\' || j->text[i + 1] != 'u') { return -1; }
                    unsigned lo = hex4(j->text + i + 2);
                    if (lo < 0xDC00 || lo > 0xDFFF) { return -1; }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
                if (cp == 0) { return -1; } // would end our C string early
                if (cp < 0x80) { buf[0] = (char)cp; }
                else if (cp < 0x800) { buf[0] = (char)(0xC0 | (cp >> 6)); buf[1] = (char)(0x80 | (cp & 0x3F)); len = 2; }
                else if (cp < 0x10000) {
                    buf[0] = (char)(0xE0 | (cp >> 12)); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                    buf[2] = (char)(0x80 | (cp & 0x3F)); len = 3;
                } else {
                    buf[0] = (char)(0xF0 | (cp >> 18)); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cp & 0x3F)); len = 4;
                }
            }
        }
        if (n + len >= cap) { return -1; }
        memcpy(out + n, buf, len);
        n += len;
    }
    out[n] = '\0';
    return (int)n;
}

// The value of key in object token `object`, or -1 if absent. Keys are compared after
// decoding, so "n_\u0065mbd" is n_embd, as JSON says.
int json_get(const Json *j, int object, const char *key) {
    if (object < 0 || j->tokens[object].type != JSON_OBJECT) { return -1; }
    int at = object + 1;
    for (int k = 0; k < j->tokens[object].size; k++) {
        char name[256];
        int value = at + 1;
        if (json_string(j, at, name, sizeof(name)) >= 0 && strcmp(name, key) == 0) { return value; }
        at = j->tokens[value].next;
    }
    return -1;
}

// A number token as an integer: digits only (an optional minus sign), at most 18 of them.
int json_int64(const Json *j, int index, int64_t *out) {
    if (index < 0 || j->tokens[index].type != JSON_NUMBER) { return -1; }
    const JsonToken *t = &j->tokens[index];
    size_t i = t->start, digits = 0;
    int negative = j->text[i] == '-';
    if (negative) { i++; }
    int64_t v = 0;
    for (; i < t->end; i++, digits++) {
        if (!is_digit(j->text[i]) || digits == 18) { return -1; }
        v = v * 10 + (j->text[i] - '0');
    }
    *out = negative ? -v : v;
    return 0;
}

int json_double(const Json *j, int index, double *out) {
    if (index < 0 || j->tokens[index].type != JSON_NUMBER) { return -1; }
    char buf[64];
    size_t n = j->tokens[index].end - j->tokens[index].start;
    if (n >= sizeof(buf)) { return -1; }
    memcpy(buf, j->text + j->tokens[index].start, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return 0;
}
// --- end shared-copy: json ---
// --- begin shared-copy: safetensors ---
// A .safetensors file (https://github.com/huggingface/safetensors, "Format"):
//   8 bytes         N, the header's length, unsigned little endian
//   N bytes         a JSON object: "name": {"dtype": "F32", "shape": [2, 3],
//                   "data_offsets": [begin, end]}, ..., plus an optional "__metadata__"
//                   object of strings; may be padded with spaces
//   the rest        the data: tensor "name" is bytes [begin, end) of it, row-major
// We check what the format promises before reading any data: every entry has a known
// dtype, a shape whose size times the dtype's matches its byte range, ranges inside the
// file, and (as the reference implementation requires) the ranges tile the data exactly:
// no overlaps, no holes, nothing after the last one.
#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) // the reference implementation's limit: 100 MB
typedef struct {
    char name[256];
    char dtype[16];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;    // byte range within the data
    size_t element_bytes;
} StTensor;

typedef struct {
    StTensor *tensors;
    int num;
    uint64_t data_start; // file offset of the data: 8 + N
} SafeTensors;

static const struct { const char *name; size_t bytes; } ST_DTYPES[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
    {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

static int st_fail(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int st_fail(char *err, size_t err_size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_size, fmt, args);
    va_end(args);
    return -1;
}

static int st_compare_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

static int st_compare_begin(const void *a, const void *b) {
    uint64_t x = (*(const StTensor *const *)a)->begin, y = (*(const StTensor *const *)b)->begin;
    return x < y ? -1 : x > y;
}

// Checks the entries of a parsed header into st->tensors (room for all) and order (the
// same, to be sorted by offset). 0, or -1 and a message in err.
static int st_check_entries(SafeTensors *st, const Json *j, StTensor **order, uint64_t data_len, char *err, size_t err_size) {
    int at = 1;
    for (int k = 0; k < j->tokens[0].size; k++, at = j->tokens[at + 1].next) {
        int value = at + 1;
        StTensor *t = &st->tensors[st->num];
        if (json_string(j, at, t->name, sizeof(t->name)) < 0) {
            return st_fail(err, err_size, "entry %d: name too long (over %zu bytes) or malformed", k, sizeof(t->name) - 1);
        }
        if (strcmp(t->name, "__metadata__") == 0) { // free-form strings: only their types are checked
            if (j->tokens[value].type != JSON_OBJECT) { return st_fail(err, err_size, "__metadata__ is not an object"); }
            for (int m = value + 2; m < j->tokens[value].next; m = j->tokens[m].next + 1) {
                if (j->tokens[m].type != JSON_STRING) { return st_fail(err, err_size, "__metadata__ holds a value that is not a string"); }
            }
            continue;
        }
        if (j->tokens[value].type != JSON_OBJECT) { return st_fail(err, err_size, "tensor %s: entry is not an object", t->name); }
        int dtype = json_get(j, value, "dtype"), shape = json_get(j, value, "shape");
        int offsets = json_get(j, value, "data_offsets");
        if (dtype < 0 || shape < 0 || offsets < 0 || j->tokens[value].size != 3) {
            return st_fail(err, err_size, "tensor %s: needs exactly dtype, shape and data_offsets", t->name);
        }
        if (json_string(j, dtype, t->dtype, sizeof(t->dtype)) < 0) { return st_fail(err, err_size, "tensor %s: bad dtype", t->name); }
        for (size_t d = 0; d < sizeof(ST_DTYPES) / sizeof(ST_DTYPES[0]); d++) {
            if (strcmp(t->dtype, ST_DTYPES[d].name) == 0) { t->element_bytes = ST_DTYPES[d].bytes; }
        }
        if (t->element_bytes == 0) { return st_fail(err, err_size, "tensor %s: unknown dtype %s", t->name, t->dtype); }
        if (j->tokens[shape].type != JSON_ARRAY || j->tokens[shape].size > ST_MAX_DIMS) {
            return st_fail(err, err_size, "tensor %s: shape is not an array of at most %d sizes", t->name, ST_MAX_DIMS);
        }
        t->ndim = j->tokens[shape].size;
        uint64_t elements = 1;
        for (int d = 0; d < t->ndim; d++) {
            int64_t size;
            if (json_int64(j, shape + 1 + d, &size) != 0 || size < 0 || size > ((int64_t)1 << 40)) {
                return st_fail(err, err_size, "tensor %s: shape[%d] is not a size in [0, 2^40]", t->name, d);
            }
            t->shape[d] = size;
            if (size != 0 && elements > (UINT64_MAX >> 4) / (uint64_t)size) { return st_fail(err, err_size, "tensor %s: shape too large", t->name); }
            elements *= (uint64_t)size;
        }
        int64_t begin, end;
        if (j->tokens[offsets].type != JSON_ARRAY || j->tokens[offsets].size != 2 || json_int64(j, offsets + 1, &begin) != 0 ||
            json_int64(j, offsets + 2, &end) != 0 || begin < 0 || end < begin) {
            return st_fail(err, err_size, "tensor %s: data_offsets is not [begin, end] with 0 <= begin <= end", t->name);
        }
        t->begin = (uint64_t)begin;
        t->end = (uint64_t)end;
        if (t->end > data_len) {
            return st_fail(err, err_size, "tensor %s: bytes [%" PRIu64 ", %" PRIu64 ") run past the end of the data (%" PRIu64
                           " bytes): truncated file?", t->name, t->begin, t->end, data_len);
        }
        if (t->end - t->begin != elements * t->element_bytes) {
            return st_fail(err, err_size, "tensor %s: shape and %s need %" PRIu64 " bytes, data_offsets give %" PRIu64, t->name,
                           t->dtype, elements * t->element_bytes, t->end - t->begin);
        }
        order[st->num] = t;
        st->num++;
    }
    // no name twice: sorted by name, equal names are neighbours (n log n: a header may
    // hold millions of entries)
    qsort(order, (size_t)st->num, sizeof(StTensor *), st_compare_name);
    for (int k = 1; k < st->num; k++) {
        if (strcmp(order[k - 1]->name, order[k]->name) == 0) { return st_fail(err, err_size, "tensor %s appears twice", order[k]->name); }
    }
    // the byte ranges, sorted, must tile [0, data_len)
    qsort(order, (size_t)st->num, sizeof(StTensor *), st_compare_begin);
    uint64_t covered = 0;
    for (int k = 0; k < st->num; k++) {
        if (order[k]->begin != covered) {
            return st_fail(err, err_size, "tensor %s starts at byte %" PRIu64 " of the data, expected %" PRIu64 " (%s)", order[k]->name,
                           order[k]->begin, covered, order[k]->begin < covered ? "overlaps the tensor before it" : "a hole before it");
        }
        covered = order[k]->end;
    }
    if (covered != data_len) {
        return st_fail(err, err_size, "the tensors cover %" PRIu64 " bytes of data, the file holds %" PRIu64, covered, data_len);
    }
    return 0;
}

// Parses and checks the header text (N bytes) of a file whose data part has data_len
// bytes. 0 on success; -1 with a message in err (st is then empty).
int safetensors_parse_header(SafeTensors *st, const char *header, size_t N, uint64_t data_len, char *err, size_t err_size) {
    memset(st, 0, sizeof(*st));
    Json j;
    int ok = json_parse(&j, header, N, err, err_size) == 0;
    StTensor **order = NULL;
    if (ok && j.tokens[0].type != JSON_OBJECT) { ok = 0; st_fail(err, err_size, "header is not a JSON object"); }
    if (ok) {
        st->tensors = (StTensor *)calloc((size_t)j.tokens[0].size + 1, sizeof(StTensor));
        order = (StTensor **)calloc((size_t)j.tokens[0].size + 1, sizeof(StTensor *));
        if (st->tensors == NULL || order == NULL) { ok = 0; st_fail(err, err_size, "out of memory"); }
    }
    ok = ok && st_check_entries(st, &j, order, data_len, err, err_size) == 0;
    json_free(&j);
    free(order);
    if (!ok) {
        free(st->tensors);
        memset(st, 0, sizeof(*st));
        return -1;
    }
    st->data_start = 8 + (uint64_t)N;
    return 0;
}

// The first step of reading a file of file_len bytes that starts with head (at least
// min(8, file_len) bytes): the header length N, checked against the file. -1 and a
// message if it cannot be a safetensors file.
int safetensors_header_length(const uint8_t *head, uint64_t file_len, size_t *N, char *err, size_t err_size) {
    if (file_len < 8) { return st_fail(err, err_size, "only %" PRIu64 " bytes: too short for a safetensors file", file_len); }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) { n = (n << 8) | head[i]; }
    if (n > ST_MAX_HEADER || n > file_len - 8) {
        return st_fail(err, err_size, "header length %" PRIu64 " is impossible (file: %" PRIu64 " bytes, limit %u):"
                       " not a safetensors file, or truncated", n, file_len, ST_MAX_HEADER);
    }
    if (n < 2) { return st_fail(err, err_size, "header length %" PRIu64 ": too short for a JSON object", n); }
    *N = (size_t)n;
    return 0;
}

// A whole file in memory (the fuzzer's entry point; the loader reads just the header).
int safetensors_parse_buffer(SafeTensors *st, const uint8_t *buf, size_t len, char *err, size_t err_size) {
    size_t N = 0;
    memset(st, 0, sizeof(*st));
    if (safetensors_header_length(buf, len, &N, err, err_size) != 0) { return -1; }
    return safetensors_parse_header(st, (const char *)buf + 8, N, len - 8 - N, err, err_size);
}

void safetensors_free(SafeTensors *st) {
    free(st->tensors);
    memset(st, 0, sizeof(*st));
}

const StTensor *safetensors_find(const SafeTensors *st, const char *name) {
    for (int k = 0; k < st->num; k++) {
        if (strcmp(st->tensors[k].name, name) == 0) { return &st->tensors[k]; }
    }
    return NULL;
}

// Reads and checks the header of the safetensors file at path (any error: one message
// naming the file, and exit). The data is read later, tensor by tensor.
static void safetensors_open(SafeTensors *st, const char *path, const char *hint) {
    char err[512];
    struct stat info;
    if (stat(path, &info) != 0) { die_file(path, hint, "cannot read it: %s", strerror(errno)); }
    FILE *fp = fopenCheck(path, "rb");
    if (fseeko(fp, 0, SEEK_END) != 0) { die_file(path, NULL, "cannot seek: %s", strerror(errno)); }
    off_t file_len = ftello(fp);
    uint8_t head[8] = {0};
    size_t N;
    if (fseeko(fp, 0, SEEK_SET) != 0 || file_len < 0) { die_file(path, NULL, "cannot seek: %s", strerror(errno)); }
    if (file_len >= 8) { freadCheck(head, 1, 8, fp); }
    if (safetensors_header_length(head, (uint64_t)file_len, &N, err, sizeof(err)) != 0) { die_file(path, hint, "%s", err); }
    char *header = (char *)mallocCheck(N);
    freadCheck(header, 1, N, fp);
    fcloseCheck(fp);
    if (safetensors_parse_header(st, header, N, (uint64_t)file_len - 8 - N, err, sizeof(err)) != 0) { die_file(path, hint, "%s", err); }
    free(header);
}

// the dtypes we read weights from
static int st_float_dtype(const char *dtype) {
    return strcmp(dtype, "F32") == 0 || strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 || strcmp(dtype, "F64") == 0;
}

// Reads tensor t (F32, F16, BF16 or F64: st_float_dtype) of an open file and widens it to
// float32 into out; buf holds its bytes on the way.
static void st_read_floats(FILE *fp, const SafeTensors *st, const StTensor *t, float *out, void *buf, const char *path) {
    size_t n = (size_t)(t->end - t->begin) / t->element_bytes;
    if (fseeko(fp, (off_t)(st->data_start + t->begin), SEEK_SET) != 0) {
        die_file(path, NULL, "cannot seek to tensor %s: %s", t->name, strerror(errno));
    }
    freadCheck(buf, t->element_bytes, n, fp);
    if (strcmp(t->dtype, "F32") == 0) {
        memcpy(out, buf, n * sizeof(float));
    } else if (strcmp(t->dtype, "BF16") == 0) {
        for (size_t i = 0; i < n; i++) { out[i] = bf16_to_float(((const uint16_t *)buf)[i]); }
    } else if (strcmp(t->dtype, "F16") == 0) {
        for (size_t i = 0; i < n; i++) { out[i] = fp16_to_float(((const uint16_t *)buf)[i]); }
    } else if (strcmp(t->dtype, "F64") == 0) {
        for (size_t i = 0; i < n; i++) { out[i] = (float)((const double *)buf)[i]; }
    } else {
        die_file(path, NULL, "tensor %s has dtype %s; we read F32, F16, BF16 and F64", t->name, t->dtype);
    }
}
// --- end shared-copy: safetensors ---
// --- begin shared-copy: gemm ---
// C(M,N) (+)= A(M,K) B(K,N), where every operand is addressed through a row
// and a column stride (element (i,j) of C is C[i*c_rs + j*c_cs]), so that the
// transposes a linear layer needs cost nothing. With accumulate = 0, C is
// overwritten instead of added to.
//
// This is the blocked GEMM of Goto & van de Geijn ("Anatomy of High-Performance
// Matrix Multiplication", 2008), cut down to what our shapes need. One of the two
// sizes N or K is always small here (B*T or C), so:
//   - a KC x NC block of B is copied ("packed") into panels of 16 columns, so the
//     micro-kernel reads it contiguously and it stays in the L2 cache;
//   - A is read in place, MR rows at a time; the callers arrange for A to be the
//     big operand (a weight matrix, or dlogits) so that it streams through once;
//   - the micro-kernel keeps an MR x 2V tile of C in 2 MR vector registers (V floats
//     each: 16 with AVX-512, 8 with AVX) and does 2 MR fused multiply-adds per step of
//     k: all the FLOPs happen there.
// Each element of C is summed in the same order whatever the number of threads,
// so results are deterministic and a run reproduces exactly.
#if defined(__AVX512F__)
#define GEMM_VEC 16 // floats in a vector register: AVX-512's 512 bits (and 32 registers)
#else
#define GEMM_VEC 8  // AVX's 256 bits (SSE and NEON do it as two halves)
#endif
#define GEMM_NR (2 * GEMM_VEC) // columns of the register tile: two vectors
// Rows of the register tile (MR) and depth of a packed block (KC). AVX has 16 registers:
// a 6 x 2 tile (12) + 2 of B + 1 of A. AVX-512 has 32: an 8 x 2 tile (16 FMAs per step
// of k for 10 loads, against 12 for 8), and a deeper block (a K of 576 or 768 in two
// blocks, not three): 10-30% faster on a 2-core Xeon (AVX-512) at inference's shapes.
#if defined(__AVX512F__)
#define GEMM_MR 8
#ifndef GEMM_KC
#define GEMM_KC 384
#endif
#else
#define GEMM_MR 6
#ifndef GEMM_KC
#define GEMM_KC 256
#endif
#endif
#ifndef GEMM_NC
#define GEMM_NC 256 // columns of a packed block: KC x NC x 4 bytes = 256 KiB (AVX-512: 384), within an L2
#endif

// GCC's auto-vectoriser keeps a plain float acc[6][2V] in memory and spills; a
// vector type (a GCC/Clang extension: no intrinsics, compiles to AVX-512, AVX, NEON
// or SSE) makes the register tile explicit. (infer.c uses it for decode too.)
typedef float vecf __attribute__((vector_size(GEMM_VEC * sizeof(float))));

// bp: the panel of B, its row k at bp + k b_ld (b_ld = GEMM_NR when packed)
static void gemm_micro_kernel(float *c, size_t c_rs, size_t c_cs, const float *a, size_t a_rs, size_t a_cs,
                              const float *bp, size_t b_ld, int kc, int mr, int nr, int accumulate) {
    // rows past the edge of A repeat row 0: computed, never stored
    const float *arow[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) { arow[i] = a + (size_t)(i < mr ? i : 0) * a_rs; }
    vecf acc[GEMM_MR][2];
    memset(acc, 0, sizeof(acc));
    if (nr <= GEMM_VEC) { // a narrow panel (a short prompt's 16 rows): its right half is padding
        for (int k = 0; k < kc; k++) {
            vecf b0;
            memcpy(&b0, bp + (size_t)k * b_ld, sizeof(vecf));
            for (int i = 0; i < GEMM_MR; i++) { acc[i][0] += arow[i][(size_t)k * a_cs] * b0; }
        }
    } else {
        for (int k = 0; k < kc; k++) { // most of the training time is spent in this loop
            vecf b0, b1;
            memcpy(&b0, bp + (size_t)k * b_ld, sizeof(vecf));
            memcpy(&b1, bp + (size_t)k * b_ld + GEMM_VEC, sizeof(vecf));
            size_t ak = (size_t)k * a_cs;
            // the panel comes in from the L2 cache: ask for its row 16 steps ahead, so that it
            // is in L1 by then (the hardware's own prefetcher falls behind: 6-8% of a LoRA step)
            __builtin_prefetch(bp + (size_t)(k + 16) * b_ld);
            __builtin_prefetch(bp + (size_t)(k + 16) * b_ld + GEMM_VEC);
            for (int i = 0; i < GEMM_MR; i++) {
                float ai = arow[i][ak];
                acc[i][0] += ai * b0;
                acc[i][1] += ai * b1;
            }
        }
    }
    if (c_cs == 1 && nr == GEMM_NR) {
        // rows of C are contiguous: two vector loads and stores per row
        for (int i = 0; i < mr; i++) {
            float *ci = c + i * c_rs;
            vecf c0 = acc[i][0], c1 = acc[i][1];
            if (accumulate) {
                vecf old0, old1;
                memcpy(&old0, ci, sizeof(vecf));
                memcpy(&old1, ci + GEMM_VEC, sizeof(vecf));
                c0 += old0;
                c1 += old1;
            }
            memcpy(ci, &c0, sizeof(vecf));
            memcpy(ci + GEMM_VEC, &c1, sizeof(vecf));
        }
        return;
    }
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < nr; j++) {
            float *cij = c + i * c_rs + j * c_cs;
            float v = acc[i][j / GEMM_VEC][j % GEMM_VEC];
            *cij = accumulate ? *cij + v : v;
        }
    }
}

static void gemm(float *C, size_t c_rs, size_t c_cs, const float *A, size_t a_rs, size_t a_cs,
                 const float *B, size_t b_rs, size_t b_cs, int M, int N, int K, int accumulate) {
    // The packed blocks, shared by the threads: two, used in turn, so that a thread
    // that is done with one block can pack the next while others still read the last
    // (one barrier per block instead of two: a barrier costs microseconds, and a time
    // slice when another program holds a core). They live as long as the program: a
    // fresh 256 KiB malloc per call is an mmap, and the kernel would zero its pages
    // again on every one of the ~100 calls per step (measured: 5% of a step). Each thread
    // that calls gemm has a pair of its own (_Thread_local), shared with the team it starts:
    // so threads may each run a gemm of their own at once (infer.c's attention does: inside
    // a parallel region, a gemm's own region runs on the calling thread alone).
    int strips = (M + GEMM_MR - 1) / GEMM_MR;
    if (M <= 4 * GEMM_MR && b_cs == 1) {
        // A few rows of C (an adapter's gradient, r rows) and a B whose rows are contiguous:
        // packing B would cost as much as the product (each number of it meets only M rows of
        // A), so the micro-kernel reads B where it lies, and the threads share its columns
        // (there are too few rows to share). Only the last panel, if narrower than GEMM_NR,
        // is copied with zero padding, so that no load reaches past the end of a row.
        int panels = (N + GEMM_NR - 1) / GEMM_NR;
        #pragma omp parallel for schedule(static) if ((double)M * N * K > 2e5 && !omp_in_parallel())
        for (int p = 0; p < panels; p++) {
            int j0 = p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
            float edge[GEMM_KC * GEMM_NR];
            for (int pc = 0; pc < K; pc += GEMM_KC) {
                int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
                const float *bp = B + (size_t)pc * b_rs + j0;
                size_t b_ld = b_rs;
                if (nr < GEMM_NR) {
                    for (int k = 0; k < kc; k++) {
                        for (int j = 0; j < GEMM_NR; j++) { edge[k * GEMM_NR + j] = j < nr ? bp[(size_t)k * b_rs + j] : 0.0f; }
                    }
                    bp = edge;
                    b_ld = GEMM_NR;
                }
                for (int s = 0; s < strips; s++) {
                    int i0 = s * GEMM_MR, mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                    gemm_micro_kernel(C + (size_t)i0 * c_rs + (size_t)j0 * c_cs, c_rs, c_cs, A + (size_t)i0 * a_rs + (size_t)pc * a_cs,
                                      a_rs, a_cs, bp, b_ld, kc, mr, nr, accumulate || pc > 0);
                }
            }
        }
        return;
    }
    static _Thread_local float *buffers[2] = {NULL, NULL};
    if (buffers[0] == NULL) {
        buffers[0] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
        buffers[1] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
    }
    float *packed[2] = {buffers[0], buffers[1]}; // (the calling thread's, read by the whole team)
    // threads only for products big enough to pay for waking them, and not from inside a
    // parallel region (there the caller's threads each run products of their own)
    #pragma omp parallel if ((double)M * N * K > 2e5 && !omp_in_parallel())
    for (int jc = 0, block = 0; jc < N; jc += GEMM_NC) {
        int panels = ((N - jc < GEMM_NC ? N - jc : GEMM_NC) + GEMM_NR - 1) / GEMM_NR;
        for (int pc = 0; pc < K; pc += GEMM_KC, block++) {
            int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
            float *bp = packed[block % 2];
            // pack B[pc:pc+kc, jc:jc+NC] as panels of NR columns, zero-padded. No thread
            // still reads this buffer: each passed the barrier after packing the block in
            // between, and so had finished its strips of the block before that.
            #pragma omp for schedule(static)
            for (int p = 0; p < panels; p++) {
                int j0 = jc + p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
                float *dst = bp + (size_t)p * kc * GEMM_NR;
                for (int k = 0; k < kc; k++) {
                    const float *src = B + (size_t)(pc + k) * b_rs + (size_t)j0 * b_cs;
                    for (int j = 0; j < GEMM_NR; j++) { dst[k * GEMM_NR + j] = j < nr ? src[j * b_cs] : 0.0f; }
                }
            }
            // (the implicit barrier: the block is packed) then MR-row strips of A against every
            // panel; no barrier after them (nowait): a thread gets the same strips, so the
            // same rows of C, in every block (OpenMP's static schedule promises it)
            #pragma omp for schedule(static) nowait
            for (int s = 0; s < strips; s++) {
                int i0 = s * GEMM_MR, mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                const float *a = A + (size_t)i0 * a_rs + (size_t)pc * a_cs;
                size_t strip_rs = a_rs, strip_cs = a_cs;
                float ap[GEMM_KC * GEMM_MR];
                if (a_cs != 1) {
                    // A is a transpose (dout^T for dweight): its MR rows at one k sit
                    // in one row of memory, and successive k are a whole row apart,
                    // a stride that lands every k in the same few L1 sets. Copying
                    // the strip to a contiguous buffer once is cheaper than the misses.
                    for (int k = 0; k < kc; k++) {
                        for (int i = 0; i < GEMM_MR; i++) { ap[k * GEMM_MR + i] = a[(size_t)(i < mr ? i : 0) * a_rs + (size_t)k * a_cs]; }
                    }
                    a = ap;
                    strip_rs = 1;
                    strip_cs = GEMM_MR;
                }
                for (int p = 0; p < panels; p++) {
                    int j0 = jc + p * GEMM_NR, nr = N - j0 < GEMM_NR ? N - j0 : GEMM_NR;
                    gemm_micro_kernel(C + (size_t)i0 * c_rs + (size_t)j0 * c_cs, c_rs, c_cs, a, strip_rs, strip_cs,
                                      bp + (size_t)p * kc * GEMM_NR, GEMM_NR, kc, mr, nr, accumulate || pc > 0);
                }
            }
        }
    }
}
// --- end shared-copy: gemm ---

// ----------------------------------------------------------------------------
// the model files: llm.c's GPT-2 checkpoints and our Llama-family files (as infer.c reads them)

// --- begin shared-copy: gpt2-config ---
typedef struct {
    int max_seq_len;       // maxT, e.g. 1024
    int vocab_size;        // V, e.g. 50257
    int padded_vocab_size; // Vp, V rounded up to a multiple of 128, e.g. 50304
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The parameters, in the order of llm.c's checkpoint files (which we read and write).
#define NUM_PARAMETER_TENSORS 16
// --- end shared-copy: gpt2-config ---
// --- begin shared-copy: infer-weights ---
typedef struct {
    float *wte;      // (Vp, C) token embeddings, tied with the output layer
    float *wpe;      // (maxT, C) position embeddings
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3*C, C)
    float *qkvb;     // (L, 3*C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4*C, C)
    float *fcb;      // (L, 4*C)
    float *fcprojw;  // (L, C, 4*C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
} ParameterTensors;
// --- end shared-copy: infer-weights ---
// --- begin shared-copy: gpt2-shapes ---
// (extern: in C++ a const array would have internal linkage, and a program that does not
// print the names would be warned about it; the tests use them)
extern const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS];
const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

void fill_in_parameter_sizes(size_t *sizes, GPT2Config config) {
    size_t Vp = config.padded_vocab_size, C = config.channels, maxT = config.max_seq_len, L = config.num_layers;
    size_t shapes[NUM_PARAMETER_TENSORS] = {
        Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
        L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    memcpy(sizes, shapes, sizeof(shapes));
}

// Check a configuration for sizes that cannot work; `source` names where it came
// from. The caps are far above any GPT-2 (V 50257, L 48, C 1600, maxT 1024) and
// keep every size product far from overflowing: a corrupt header is then reported
// as such, not as an attempt to allocate petabytes.
static void gpt2_validate_config(GPT2Config c, const char *source) {
    if (c.max_seq_len <= 0 || c.max_seq_len > (1 << 20) || c.vocab_size <= 0 || c.vocab_size > (1 << 24) ||
        c.padded_vocab_size < c.vocab_size || c.padded_vocab_size > (1 << 24) || c.num_layers <= 0 ||
        c.num_layers > 1024 || c.num_heads <= 0 || c.channels <= 0 || c.channels > (1 << 16) ||
        c.channels % c.num_heads != 0) {
        fprintf(stderr, "Error: %s: impossible model shape maxT=%d V=%d Vp=%d L=%d NH=%d C=%d (need all > 0,"
                " Vp >= V, C divisible by NH, maxT <= 2^20, V and Vp <= 2^24, L <= 1024, C <= 2^16): corrupt header?\n",
                source, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
        exit(EXIT_FAILURE);
    }
}

static size_t gpt2_count_parameters(GPT2Config config) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    fill_in_parameter_sizes(sizes, config);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// --- end shared-copy: gpt2-shapes ---
// --- begin shared-copy: gpt2-weights ---
// One allocation for a whole table; the struct's pointers are slices of it.
float *malloc_and_point(float **slices, const size_t *sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += sizes[i]; }
    float *memory = (float *)mallocCheck(total * sizeof(float));
    float *p = memory;
    for (int i = 0; i < n; i++) {
        slices[i] = p;
        p += sizes[i];
    }
    return memory;
}

// The weights as loaded, fp32 in host memory whatever the file held (infer.cu uploads
// them to the GPU in its precision).
typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float *params_memory;
    size_t num_parameters;
    int from_bf16;     // they came from a bf16 file (./convert -d auto keeps them bf16: exact)
    char source[4096]; // where they came from, for messages
} GPT2Weights;

static void gpt2_weights_allocate(GPT2Weights *w) {
    fill_in_parameter_sizes(w->param_sizes, w->config);
    w->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { w->num_parameters += w->param_sizes[i]; }
    w->params_memory = malloc_and_point((float **)&w->params, w->param_sizes, NUM_PARAMETER_TENSORS);
}

void gpt2_weights_free(GPT2Weights *w) {
    free(w->params_memory);
    w->params_memory = NULL;
}
// --- end shared-copy: gpt2-weights ---
// --- begin shared-copy: gpt2-model-file ---
// The size of an open file in bytes; the position is left just after the 256 x
// int32 header that all our binary files start with.
static long file_size(FILE *fp, const char *path) {
    long bytes = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { bytes = ftell(fp); }
    if (bytes < 0 || fseek(fp, 256 * sizeof(int), SEEK_SET) != 0) {
        fprintf(stderr, "Error: %s: cannot seek: %s\n", path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    return bytes;
}

// Model checkpoints use llm.c's format, so its GPT-2 files load here unchanged:
// a header of 256 int32 (magic 20240326, version 3 = fp32, maxT, V, L, NH, C, Vp),
// then the 16 parameter tensors in table order, float32.
#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
// --- end shared-copy: gpt2-model-file ---
// --- begin shared-copy: checkpoint-read ---
// Reads an llm.c / train_gpt2 checkpoint: version 3 (fp32) or 5 (bf16, widened to fp32).
void gpt2_build_from_checkpoint(GPT2Weights *w, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        die_file(path, "pass a model file (model_<step>.bin from train_gpt2; ./convert makes one from a Hugging Face folder)",
                 "file too short for a model header (256 x int32)");
    }
    if (header[0] != MODEL_MAGIC) {
        die_file(path, "pass a model file (model_<step>.bin, llm.c's gpt2_124M.bin; ./convert makes one from a Hugging Face"
                 " folder) or d<N> for a random model", "bad magic number: expected %d (llm.c GPT-2 model), found %d",
                 MODEL_MAGIC, header[0]);
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        die_file(path, NULL, "model file version %d, expected %d (fp32) or %d (bf16)", header[1],
                 MODEL_VERSION_FP32, MODEL_VERSION_BF16);
    }
    w->config.max_seq_len = header[2];
    w->config.vocab_size = header[3];
    w->config.num_layers = header[4];
    w->config.num_heads = header[5];
    w->config.channels = header[6];
    w->config.padded_vocab_size = header[7];
    gpt2_validate_config(w->config, path);
    size_t bytes_per = header[1] == MODEL_VERSION_BF16 ? 2 : 4;
    size_t expected = 256 * sizeof(int) + gpt2_count_parameters(w->config) * bytes_per;
    long actual = file_size(fp, path);
    if ((size_t)actual != expected) {
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d Vp=%d maxT=%d) needs %zu:"
                 " truncated or corrupt", actual, header[1], header[4], header[6], header[7], header[2], expected);
    }
    gpt2_weights_allocate(w);
    w->from_bf16 = header[1] == MODEL_VERSION_BF16;
    if (!w->from_bf16) {
        freadCheck(w->params_memory, sizeof(float), w->num_parameters, fp);
    } else { // in chunks, widening as we go
        uint16_t buf[1 << 16];
        for (size_t done = 0; done < w->num_parameters;) {
            size_t n = w->num_parameters - done < (1 << 16) ? w->num_parameters - done : (1 << 16);
            freadCheck(buf, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params_memory[done + i] = bf16_to_float(buf[i]); }
            done += n;
        }
    }
    fcloseCheck(fp);
}
// --- end shared-copy: checkpoint-read ---
// --- begin shared-copy: llama-config ---
// Llama 2/3, SmolLM2, Qwen2 and their kin are GPT-2 with five changes: RMSNorm (no mean, no
// bias) for LayerNorm; RoPE (positions rotate each query and key) for learned positions;
// SwiGLU (down(silu(gate x) * up x)) for the GELU MLP; grouped-query attention (NKV
// key/value heads, each shared by NH/NKV query heads); and no biases, except Qwen2's on q,
// k and v. The output head may be the embedding (tied) or a matrix of its own.
typedef struct {
    int max_seq_len;  // maxT
    int vocab_size;   // V (no padding: every Llama-family vocabulary here is a multiple of 128)
    int num_layers;   // L
    int num_heads;    // NH query heads
    int num_kv_heads; // NKV key/value heads: NH is a multiple of NKV
    int channels;     // C
    int head_size;    // HS (usually C / NH; a config may set it apart: then NH x HS is not C)
    int hidden;       // H, SwiGLU's width
    int tied;         // the output head is wte
    int qkv_bias;     // q, k and v have biases (Qwen2)
    int family;       // LLAMA_FAMILY_*: which Hugging Face class an export names
    float rope_theta; // RoPE's base
    float norm_eps;   // RMSNorm's epsilon
    // Llama 3's RoPE scaling (transformers' rope_type "llama3"); factor 0: none
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max;
    int bos_token_id, eos_token_id; // -1: none
} LlamaConfig;
enum { LLAMA_FAMILY_LLAMA = 1, LLAMA_FAMILY_QWEN2 = 2 };

// Our Llama-family model file: a header of 256 int32, then the tensors below in order,
// float32 (version 3) or bf16 (version 5). The first 8 header fields are llm.c's Llama 3
// file's: magic 20240803, version, maxT, V, L, NH, NKV, C. llm.c stores its float
// settings as truncated ints after those; we store them as float32 bits, and add what
// the other families need:
//   [8] H  [9] HS  [10] flags: 1 tied head, 2 q/k/v biases  [11] rope_theta (float bits)
//   [12] norm_eps (float bits)  [13] Llama 3 RoPE factor (float bits, 0: none)
//   [14] low_freq_factor  [15] high_freq_factor (float bits)  [16] original max positions
//   [17] family (1 Llama, 2 Qwen2)  [18] bos token id  [19] eos token id (-1: none)
// Tensors are stored tensor by tensor, all layers of one together (as llm.c does); q, k and
// v are one matrix per layer (their rows in that order), and so are gate and up. RoPE pairs
// channel i with channel i + HS/2 of a head (Hugging Face's rotate_half layout; GGUF files
// pair neighbours, so reading one reorders q's and k's rows).
#define LLAMA_MAGIC 20240803
#define NUM_LLAMA_TENSORS 10
enum { LL_WTE, LL_LN1W, LL_QKVW, LL_QKVB, LL_ATTPROJW, LL_LN2W, LL_FCW, LL_FCPROJW, LL_LNFW, LL_LM_HEAD };

// element counts: wte (V, C); ln1w (L, C); qkvw (L, (NH + 2 NKV) HS, C); qkvb (L, (NH + 2 NKV) HS)
// or none; attprojw (L, C, NH HS); ln2w (L, C); fcw (L, 2H, C): gate rows, then up rows;
// fcprojw (L, C, H); lnfw (C); lm_head (V, C) or none when tied
static void llama_tensor_sizes(size_t *sizes, LlamaConfig c) {
    size_t L = c.num_layers, C = c.channels, V = c.vocab_size, QKV = (size_t)(c.num_heads + 2 * c.num_kv_heads) * c.head_size;
    size_t Q = (size_t)c.num_heads * c.head_size, H = c.hidden;
    size_t s[NUM_LLAMA_TENSORS] = {V * C, L * C, L * QKV * C, c.qkv_bias ? L * QKV : 0, L * C * Q, L * C, L * 2 * H * C,
                                   L * C * H, C, c.tied ? 0 : V * C};
    memcpy(sizes, s, sizeof(s));
}

// The shapes a header or a config may give, checked before they size anything: caps far
// above any model here (Llama 3.1 405B: L 126, C 16384, H 53248, V 128256), so that no
// product overflows and a corrupt header is reported as one.
static int llama_check_config(LlamaConfig c, char *err, size_t err_size) {
#define LLAMA_FAIL(...) return (snprintf(err, err_size, __VA_ARGS__), -1)
    if (c.max_seq_len < 1 || c.max_seq_len > (1 << 24) || c.vocab_size < 1 || c.vocab_size > (1 << 22) || c.num_layers < 1 ||
        c.num_layers > 1024 || c.num_heads < 1 || c.num_heads > 1024 || c.num_kv_heads < 1 || c.channels < 1 ||
        c.channels > (1 << 17) || c.head_size < 2 || c.head_size > 1024 || c.hidden < 1 || c.hidden > (1 << 20)) {
        LLAMA_FAIL("a size out of range: maxT=%d V=%d L=%d NH=%d NKV=%d C=%d HS=%d H=%d", c.max_seq_len,
                       c.vocab_size, c.num_layers, c.num_heads, c.num_kv_heads, c.channels, c.head_size, c.hidden);
    }
    if (c.num_heads % c.num_kv_heads != 0) { LLAMA_FAIL("%d query heads cannot share %d key/value heads evenly", c.num_heads, c.num_kv_heads); }
    if (c.head_size % 2 != 0) { LLAMA_FAIL("head size %d is odd: RoPE rotates pairs of channels", c.head_size); }
    if (!(c.rope_theta > 0.0f) || !(c.norm_eps > 0.0f) || c.norm_eps > 1.0f || !(c.rope_factor >= 0.0f)) {
        LLAMA_FAIL("rope_theta %g, norm_eps %g or the RoPE scaling factor %g is not a sensible number",
                       c.rope_theta, c.norm_eps, c.rope_factor);
    }
    if (c.rope_factor > 0.0f && (c.rope_original_max < 1 || !(c.rope_low_freq_factor > 0.0f) || !(c.rope_high_freq_factor > c.rope_low_freq_factor))) {
        LLAMA_FAIL("Llama 3 RoPE scaling needs original_max_position_embeddings >= 1 and high_freq_factor > low_freq_factor > 0");
    }
    if (c.family != LLAMA_FAMILY_LLAMA && c.family != LLAMA_FAMILY_QWEN2) { LLAMA_FAIL("unknown family %d", c.family); }
    if (c.family == LLAMA_FAMILY_LLAMA && c.qkv_bias) { LLAMA_FAIL("q/k/v biases without o's: only Qwen2 has those"); }
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size || c.eos_token_id < -1 || c.eos_token_id >= c.vocab_size) {
        LLAMA_FAIL("start or end token (%d, %d) outside the vocabulary of %d", c.bos_token_id, c.eos_token_id, c.vocab_size);
    }
    return 0;
#undef LLAMA_FAIL
}

typedef struct {
    LlamaConfig config;
    size_t sizes[NUM_LLAMA_TENSORS];
    float *tensors[NUM_LLAMA_TENSORS]; // into params; NULL for a tensor of size 0
    float *params;
    size_t num_parameters;
    int from_bf16; // every weight read was bf16 (-d auto then writes bf16)
} LlamaWeights;

static void llama_allocate(LlamaWeights *w) {
    llama_tensor_sizes(w->sizes, w->config);
    w->num_parameters = 0;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { w->num_parameters += w->sizes[k]; }
    w->params = (float *)mallocCheck(w->num_parameters * sizeof(float));
    float *p = w->params;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) {
        w->tensors[k] = w->sizes[k] > 0 ? p : NULL;
        p += w->sizes[k];
    }
}

static void llama_free(LlamaWeights *w) {
    free(w->params);
    memset(w, 0, sizeof(*w));
}
// --- end shared-copy: llama-config ---
// --- begin shared-copy: llama-model-read ---
static float bits_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}

// Reads our Llama-family model file, or exits with a message naming it.
void llama_load(LlamaWeights *w, const char *path) {
    memset(w, 0, sizeof(*w));
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    if (fread(h, sizeof(int), 256, fp) != 256) { die_file(path, NULL, "file too short for a model header (256 x int32)"); }
    long size = file_size(fp, path); // (and back to the end of the header)
    if (h[0] != LLAMA_MAGIC) { die_file(path, NULL, "bad magic number: expected %d (a Llama-family model), found %d", LLAMA_MAGIC, h[0]); }
    if (h[1] != MODEL_VERSION_FP32 && h[1] != MODEL_VERSION_BF16) {
        die_file(path, NULL, "version %d: we read 3 (fp32) and 5 (bf16)", h[1]);
    }
    LlamaConfig c = {h[2], h[3], h[4], h[5], h[6], h[7], h[9], h[8], h[10] & 1, (h[10] >> 1) & 1, h[17],
                     bits_float(h[11]), bits_float(h[12]), bits_float(h[13]), bits_float(h[14]), bits_float(h[15]), h[16], h[18], h[19]};
    char err[256];
    if (h[17] == 0 && h[8] >= 0 && h[8] < 16) { // llm.c's own Llama 3 files: ffn_dim_multiplier, multiple_of, ... from field 8
        die_file(path, NULL, "an llm.c Llama 3 model file (its header stores other fields from field 8 on); we read our own "
                 "(./convert makes one from a Hugging Face folder or a GGUF file)");
    }
    if ((h[10] & ~3) != 0 || llama_check_config(c, err, sizeof(err)) != 0) {
        die_file(path, NULL, "its header is not a model's (%s): truncated or corrupt", (h[10] & ~3) != 0 ? "unknown flags" : err);
    }
    size_t element = h[1] == MODEL_VERSION_BF16 ? 2 : 4, sizes[NUM_LLAMA_TENSORS], count = 0;
    llama_tensor_sizes(sizes, c);
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { count += sizes[k]; }
    if ((unsigned long)size != sizeof(h) + count * element) { // (before allocating: a corrupt header may ask for terabytes)
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d V=%d H=%d) needs %zu: truncated or corrupt",
                 size, h[1], c.num_layers, c.channels, c.vocab_size, c.hidden, sizeof(h) + count * element);
    }
    w->config = c;
    llama_allocate(w);
    if (element == 4) {
        freadCheck(w->params, sizeof(float), w->num_parameters, fp);
    } else { // bf16 -> fp32, a chunk at a time
        uint16_t chunk[4096];
        for (size_t at = 0; at < w->num_parameters; at += 4096) {
            size_t n = w->num_parameters - at < 4096 ? w->num_parameters - at : 4096;
            freadCheck(chunk, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params[at + i] = bf16_to_float(chunk[i]); }
        }
        w->from_bf16 = 1;
    }
    fcloseCheck(fp);
}
// --- end shared-copy: llama-model-read ---
// --- begin shared-copy: float-to-bf16 ---
// ... and narrowing a float to bf16 rounds its top half to nearest, ties to even.
static inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((bits >> 16) | 0x40); } // NaN stays NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
// --- end shared-copy: float-to-bf16 ---
// --- begin shared-copy: model-file-write ---
// Our model files (GPT-2's and the Llama family's): the 256-int header, then n weights as
// float32, or bf16 (rounded to nearest even), written atomically.
static void write_model_file(const char *path, const int *header, const float *params, size_t n, int bf16) {
    uint16_t *narrow = NULL;
    const void *bufs[2] = {header, params};
    size_t sizes[2] = {256 * sizeof(int), n * sizeof(float)};
    if (bf16) {
        narrow = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) { narrow[i] = float_to_bf16(params[i]); }
        bufs[1] = narrow;
        sizes[1] = n * sizeof(uint16_t);
    }
    write_file_atomic(path, bufs, sizes, 2);
    free(narrow);
}

// Writes an llm.c checkpoint: version 3 (fp32) or, with bf16, version 5.
void gpt2_save_checkpoint(const GPT2Weights *w, const char *path, int bf16) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32;
    header[2] = w->config.max_seq_len;
    header[3] = w->config.vocab_size;
    header[4] = w->config.num_layers;
    header[5] = w->config.num_heads;
    header[6] = w->config.channels;
    header[7] = w->config.padded_vocab_size;
    write_model_file(path, header, w->params_memory, w->num_parameters, bf16);
}
// --- end shared-copy: model-file-write ---
// --- begin shared-copy: llama-model-write ---
static int float_bits(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}

void llama_save(const LlamaWeights *w, const char *path, int bf16) {
    LlamaConfig c = w->config;
    int header[256] = {0};
    int fields[20] = {LLAMA_MAGIC, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32, c.max_seq_len, c.vocab_size, c.num_layers,
                      c.num_heads, c.num_kv_heads, c.channels, c.hidden, c.head_size, (c.tied ? 1 : 0) | (c.qkv_bias ? 2 : 0),
                      float_bits(c.rope_theta), float_bits(c.norm_eps), float_bits(c.rope_factor), float_bits(c.rope_low_freq_factor),
                      float_bits(c.rope_high_freq_factor), c.rope_original_max, c.family, c.bos_token_id, c.eos_token_id};
    memcpy(header, fields, sizeof(fields));
    write_model_file(path, header, w->params, w->num_parameters, bf16);
}
// --- end shared-copy: llama-model-write ---
// --- begin shared-copy: rope-frequencies ---
// RoPE's HS/2 frequencies, inv_freq[i] = theta^(-2i/HS), in float as transformers computes
// them; with Llama 3's scaling, long wavelengths (beyond original_max / low_freq_factor
// positions) are slowed down by factor, short ones (within original_max /
// high_freq_factor) kept, those between blended (transformers' rope_type "llama3").
static float *rope_frequencies(const LlamaConfig *c) {
    int half = c->head_size / 2;
    float *f = (float *)mallocCheck((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        f[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_size);
        if (c->rope_factor > 0.0f) {
            float wavelen = 2.0f * (float)M_PI / f[i], old = (float)c->rope_original_max;
            float low = old / c->rope_low_freq_factor, high = old / c->rope_high_freq_factor;
            if (wavelen > low) { f[i] = f[i] / c->rope_factor; }
            else if (wavelen >= high) {
                float smooth = (old / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f[i] = (1.0f - smooth) * f[i] / c->rope_factor + smooth * f[i];
            }
        }
    }
    return f;
}
// --- end shared-copy: rope-frequencies ---
// --- begin shared-copy: llama-random ---
// Random Llama-family models of real models' shapes, for benchmarks (-m llama:NAME): what
// matters for speed is the shape, not the values. Weights uniform in [-0.02, 0.02] (0.02
// is GPT-2's init scale), RMSNorm weights 1. (Llama 3.2 1B: 1.24B parameters, 4.6 GiB fp32.)
static const struct { const char *name; LlamaConfig c; } LLAMA_SHAPES[] = {
    // maxT, V, L, NH, NKV, C, HS, H, tied, qkv_bias, family, theta, eps, Llama 3 RoPE scaling (4), bos, eos
    {"smollm2-135m", {8192, 49152, 30, 9, 3, 576, 64, 1536, 1, 0, LLAMA_FAMILY_LLAMA, 1e5f, 1e-5f, 0.0f, 0.0f, 0.0f, 0, 1, 2}},
    {"llama3.2-1b", {131072, 128256, 16, 32, 8, 2048, 64, 8192, 1, 0, LLAMA_FAMILY_LLAMA, 5e5f, 1e-5f, 32.0f, 1.0f, 4.0f, 8192,
                     128000, 128009}},
    {"qwen2.5-0.5b", {32768, 151936, 24, 14, 2, 896, 64, 4864, 1, 1, LLAMA_FAMILY_QWEN2, 1e6f, 1e-6f, 0.0f, 0.0f, 0.0f, 0, -1,
                      151645}},
};

static int llama_random(LlamaWeights *w, const char *source, uint64_t seed) {
    if (strncmp(source, "llama:", 6) != 0) { return 0; }
    for (size_t k = 0; k < sizeof(LLAMA_SHAPES) / sizeof(LLAMA_SHAPES[0]); k++) {
        if (strcmp(source + 6, LLAMA_SHAPES[k].name) != 0) { continue; }
        memset(w, 0, sizeof(*w));
        w->config = LLAMA_SHAPES[k].c;
        llama_allocate(w);
        uint64_t key = rng_key(seed, 0);
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < w->num_parameters; i++) { w->params[i] = (float)(0.04 * rng_uniform_at(key, i) - 0.02); }
        const int norms[3] = {LL_LN1W, LL_LN2W, LL_LNFW};
        for (int n = 0; n < 3; n++) {
            for (size_t i = 0; i < w->sizes[norms[n]]; i++) { w->tensors[norms[n]][i] = 1.0f; }
        }
        return 1;
    }
    die_file(source, "-m llama:NAME takes smollm2-135m, llama3.2-1b or qwen2.5-0.5b", "no such shape");
    return 0;
}
// --- end shared-copy: llama-random ---

// ----------------------------------------------------------------------------
// the base model, frozen: either family's tensors under one set of names

// --- begin shared-copy: finetune-base ---

// The tensors of the forward pass (as infer.c's ForwardTensors), pointers into the loaded
// weights: GPT-2's 16 (lm_head = wte), or the Llama family's (no wpe, no LayerNorm biases;
// Qwen2 has qkvb). Shapes per layer: qkvw (Q + 2 KV, C), attprojw (C, Q), fcw (MLP, C) with
// MLP = H (GPT-2) or 2H (gate rows, then up rows), fcprojw (C, H); lm_head (Vp, C).
typedef struct {
    int llama, L, C, NH, NKV, HS, H, V, Vp, maxT;
    float eps;
    const float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb,
        *lnfw, *lnfb, *lm_head;
    float *inv_freq; // the Llama family's RoPE frequencies (HS/2)
    GPT2Weights gpt2;
    LlamaWeights llama_weights;
} Base;

// Our model file: GPT-2 (llm.c's checkpoint) or the Llama family's (./convert's), by its magic
// (or llama:NAME, a random model of that shape: the benchmark's, -B 1)
static void base_load(Base *b, const char *path) {
    memset(b, 0, sizeof(*b));
    int magic = 0, random = strncmp(path, "llama:", 6) == 0;
    if (!random) {
        FILE *fp = fopenCheck(path, "rb");
        if (fread(&magic, sizeof(magic), 1, fp) != 1) { magic = 0; }
        fcloseCheck(fp);
    }
    if (magic == LLAMA_MAGIC || random) {
        if (random) { llama_random(&b->llama_weights, path, 1337); } else { llama_load(&b->llama_weights, path); }
        LlamaConfig c = b->llama_weights.config;
        float **t = b->llama_weights.tensors; // wte ln1w qkvw qkvb attprojw ln2w fcw fcprojw lnfw lm_head
        b->llama = 1; b->L = c.num_layers; b->C = c.channels; b->NH = c.num_heads; b->NKV = c.num_kv_heads; b->HS = c.head_size;
        b->H = c.hidden; b->V = c.vocab_size; b->Vp = c.vocab_size; b->maxT = c.max_seq_len; b->eps = c.norm_eps;
        b->wte = t[0]; b->ln1w = t[1]; b->qkvw = t[2]; b->qkvb = t[3]; b->attprojw = t[4]; b->ln2w = t[5]; b->fcw = t[6];
        b->fcprojw = t[7]; b->lnfw = t[8]; b->lm_head = c.tied ? t[0] : t[9];
        b->inv_freq = rope_frequencies(&c);
    } else {
        gpt2_build_from_checkpoint(&b->gpt2, path);
        GPT2Config c = b->gpt2.config;
        ParameterTensors p = b->gpt2.params;
        b->llama = 0; b->L = c.num_layers; b->C = c.channels; b->NH = c.num_heads; b->NKV = c.num_heads; b->HS = c.channels / c.num_heads;
        b->H = 4 * c.channels; b->V = c.vocab_size; b->Vp = c.padded_vocab_size; b->maxT = c.max_seq_len; b->eps = 1e-5f;
        b->wte = p.wte; b->wpe = p.wpe; b->ln1w = p.ln1w; b->ln1b = p.ln1b; b->qkvw = p.qkvw; b->qkvb = p.qkvb; b->attprojw = p.attprojw;
        b->attprojb = p.attprojb; b->ln2w = p.ln2w; b->ln2b = p.ln2b; b->fcw = p.fcw; b->fcb = p.fcb; b->fcprojw = p.fcprojw;
        b->fcprojb = p.fcprojb; b->lnfw = p.lnfw; b->lnfb = p.lnfb; b->lm_head = p.wte;
    }
}

static void base_free(Base *b) {
    gpt2_weights_free(&b->gpt2);
    llama_free(&b->llama_weights);
    free(b->inv_freq);
    memset(b, 0, sizeof(*b));
}
// --- end shared-copy: finetune-base ---

// ----------------------------------------------------------------------------
// --- begin shared-copy: lora-adapter ---
// LoRA (Hu et al. 2021): each adapted linear layer y = x W^T + b gets a low-rank update,
//     y = x W^T + b + s (x A^T) B^T,    A (r, in), B (out, r), s = alpha / r (rsLoRA: alpha / sqrt(r))
// W stays frozen; only A and B train: r (in + out) numbers instead of in x out. PEFT names
// each adapted module by its path in the Hugging Face model, and so do we (its files are
// ours). Our model files fuse some of Hugging Face's layers: q, k and v are one (Q + 2KV, C)
// matrix, gate and up one (2H, C); a module of Hugging Face's then adapts a band of rows of
// ours (its `offset`, `out` rows), which changes nothing in the arithmetic.

enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, NUM_SITES }; // the four linear layers of a block

// What of the base model an adapter must fit: the family (its module names), L layers, C
// channels, Q = NH HS query and KV = NKV HS key/value channels, the MLP's width H
typedef struct {
    int llama, L, C, Q, KV, H;
} LoraShape;

typedef struct {
    char name[128]; // PEFT's module path, e.g. "model.layers.3.self_attn.q_proj"
    int layer, site, offset, out, in;
    float *A, *B;   // (r, in), (out, r): into Lora.params
    float *dA, *dB; // their gradients: into Lora.grads (finetune_lora; NULL in infer)
} LoraModule;

typedef struct {
    int r;
    float alpha, scale;
    int rslora;
    float dropout;         // LoRA dropout p: on the adapter's input x (not the base layer's), while training
    int training;          // 1: dropout applies (0: evaluation, inference)
    uint64_t dropout_key;  // the current micro-batch's: which inputs are dropped (set before its forward pass)
    int num_modules;
    LoraModule *modules;
    size_t num_params;
    float *params, *grads, *m, *v; // all modules' A and B, back to back (training: their gradients, AdamW's moments)
} Lora;

// Every module the family has, in PEFT's names: fills names/sites/offsets/outs/ins for layer
// l and returns how many (GPT-2: 4, the Llama family: 7)
static int family_modules(const LoraShape *b, int l, char names[][128], int *site, int *offset, int *out, int *in) {
    int C = b->C, Q = b->Q, KV = b->KV, H = b->H;
    if (!b->llama) {
        const char *n[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
        int s[4] = {SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ}, o[4] = {3 * C, C, H, C}, i[4] = {C, C, C, H};
        for (int k = 0; k < 4; k++) {
            snprintf(names[k], 128, "transformer.h.%d.%s", l, n[k]);
            site[k] = s[k]; offset[k] = 0; out[k] = o[k]; in[k] = i[k];
        }
        return 4;
    }
    const char *n[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                        "mlp.up_proj", "mlp.down_proj"};
    int s[7] = {SITE_QKV, SITE_QKV, SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FC, SITE_FCPROJ};
    int f[7] = {0, Q, Q + KV, 0, 0, H, 0}, o[7] = {Q, KV, KV, C, H, H, C}, i[7] = {C, C, C, Q, C, C, H};
    for (int k = 0; k < 7; k++) {
        snprintf(names[k], 128, "model.layers.%d.%s", l, n[k]);
        site[k] = s[k]; offset[k] = f[k]; out[k] = o[k]; in[k] = i[k];
    }
    return 7;
}

static const char *ADAPTER_HINT = "an adapter folder holds adapter_config.json and adapter_model.safetensors (PEFT's save_pretrained)";

// The numbers of lora's modules (num_modules, their in, out and lora->r set): params, each
// module's A then B; for training also grads (dA, dB alike) and AdamW's m and v, zeroed
static void lora_allocate(Lora *lora, int training, const char *what) {
    lora->params = (float *)calloc(lora->num_params, sizeof(float));
    int ok = lora->params != NULL;
    if (training) {
        lora->grads = (float *)calloc(lora->num_params, sizeof(float));
        lora->m = (float *)calloc(lora->num_params, sizeof(float));
        lora->v = (float *)calloc(lora->num_params, sizeof(float));
        ok = ok && lora->grads != NULL && lora->m != NULL && lora->v != NULL;
    }
    if (!ok) { die_file(what, NULL, "out of memory for an adapter of %zu numbers", lora->num_params); }
    size_t at = 0;
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        m->A = lora->params + at; m->dA = training ? lora->grads + at : NULL; at += (size_t)lora->r * m->in;
        m->B = lora->params + at; m->dB = training ? lora->grads + at : NULL; at += (size_t)lora->r * m->out;
    }
}

// Reads a PEFT LoRA adapter folder for a base model of shape b: adapter_config.json
// (peft_type LORA, r, lora_alpha, use_rslora, bias "none") and adapter_model.safetensors,
// whose every tensor must be the lora_A or lora_B of a module the base has, with shapes
// [r, in] and [out, r]. Any mismatch is one error naming the file. training: 1 allocates
// the gradients and AdamW's moments too (lora_allocate).
static void lora_load(Lora *lora, const LoraShape *b, const char *dir, int training) {
    memset(lora, 0, sizeof(*lora));
    char path[MAX_PATH_LEN], err[256];
    path_concat(path, dir, "/adapter_config.json");
    size_t len;
    uint8_t *text = read_whole_file(path, &len, ADAPTER_HINT);
    Json j;
    if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0) { die_file(path, NULL, "%s", err); }
    if (j.tokens[0].type != JSON_OBJECT) { die_file(path, NULL, "not a JSON object"); }
    char s[64] = "";
    int at = json_get(&j, 0, "peft_type");
    if (at < 0 || json_string(&j, at, s, sizeof(s)) < 0 || strcmp(s, "LORA") != 0) { die_file(path, NULL, "peft_type is not \"LORA\""); }
    int64_t r = 0;
    double alpha = 0.0;
    at = json_get(&j, 0, "r");
    if (at < 0 || json_int64(&j, at, &r) != 0 || r < 1 || r > 4096) { die_file(path, NULL, "r is not a rank in 1..4096"); }
    at = json_get(&j, 0, "lora_alpha");
    if (at < 0 || json_double(&j, at, &alpha) != 0 || !(alpha > 0.0)) { die_file(path, NULL, "lora_alpha is not a positive number"); }
    at = json_get(&j, 0, "lora_dropout");
    double dropout = 0.0;
    if (at >= 0 && (json_double(&j, at, &dropout) != 0 || !(dropout >= 0.0 && dropout < 1.0))) { die_file(path, NULL, "lora_dropout is not a probability below 1"); }
    lora->dropout = (float)dropout;
    at = json_get(&j, 0, "use_rslora");
    lora->rslora = at >= 0 && j.tokens[at].type == JSON_TRUE;
    at = json_get(&j, 0, "bias");
    if (at >= 0 && (json_string(&j, at, s, sizeof(s)) < 0 || strcmp(s, "none") != 0)) {
        die_file(path, NULL, "bias is not \"none\": we train LoRA's A and B only");
    }
    at = json_get(&j, 0, "use_dora");
    if (at >= 0 && j.tokens[at].type == JSON_TRUE) { die_file(path, NULL, "a DoRA adapter (use_dora): we read LoRA's"); }
    json_free(&j);
    free(text);
    lora->r = (int)r;
    lora->alpha = (float)alpha;
    lora->scale = (float)(lora->rslora ? alpha / sqrt((double)r) : alpha / (double)r);

    path_concat(path, dir, "/adapter_model.safetensors");
    SafeTensors st;
    safetensors_open(&st, path, ADAPTER_HINT);
    // the modules present: each of the family's whose lora_A is in the file
    int max_modules = b->L * 7;
    lora->modules = (LoraModule *)calloc((size_t)max_modules, sizeof(LoraModule));
    if (lora->modules == NULL) { die_file(path, NULL, "out of memory"); }
    int found = 0;
    for (int l = 0; l < b->L; l++) {
        char names[7][128];
        int site[7], offset[7], out[7], in[7], n = family_modules(b, l, names, site, offset, out, in);
        for (int k = 0; k < n; k++) {
            char key_a[256], key_b[256];
            snprintf(key_a, sizeof(key_a), "base_model.model.%s.lora_A.weight", names[k]);
            snprintf(key_b, sizeof(key_b), "base_model.model.%s.lora_B.weight", names[k]);
            const StTensor *ta = safetensors_find(&st, key_a), *tb = safetensors_find(&st, key_b);
            if (ta == NULL && tb == NULL) { continue; }
            if (ta == NULL || tb == NULL) { die_file(path, ADAPTER_HINT, "%s without %s", ta != NULL ? key_a : key_b, ta != NULL ? key_b : key_a); }
            if (ta->ndim != 2 || ta->shape[0] != r || ta->shape[1] != in[k] || tb->ndim != 2 || tb->shape[0] != out[k] || tb->shape[1] != r) {
                die_file(path, "the adapter is for another model, or another rank than adapter_config.json's",
                         "%s: lora_A must be [%d, %d] and lora_B [%d, %d] (r = %d)", names[k], (int)r, in[k], out[k], (int)r, (int)r);
            }
            if (!st_float_dtype(ta->dtype) || !st_float_dtype(tb->dtype)) { die_file(path, NULL, "%s: dtype %s, we read F32, F16, BF16, F64", names[k], ta->dtype); }
            LoraModule *m = &lora->modules[lora->num_modules++];
            snprintf(m->name, sizeof(m->name), "%s", names[k]);
            m->layer = l; m->site = site[k]; m->offset = offset[k]; m->out = out[k]; m->in = in[k];
            lora->num_params += (size_t)r * (in[k] + out[k]);
            found += 2;
        }
    }
    if (found != st.num) { // a tensor that is no module of ours
        for (int k = 0; k < st.num; k++) {
            int ours = 0;
            for (int m = 0; m < lora->num_modules && !ours; m++) {
                char key[256];
                snprintf(key, sizeof(key), "base_model.model.%s.lora_", lora->modules[m].name);
                ours = strncmp(st.tensors[k].name, key, strlen(key)) == 0;
            }
            if (!ours) { die_file(path, "the adapter is for another model family or layout", "tensor %s is no LoRA module of this %s model", st.tensors[k].name, b->llama ? "Llama-family" : "GPT-2"); }
        }
    }
    if (lora->num_modules == 0) { die_file(path, NULL, "no LoRA tensors"); }
    lora_allocate(lora, training, path);
    FILE *fp = fopenCheck(path, "rb");
    size_t largest = 0; // (the biggest tensor, in bytes at 8 a number: the read buffer)
    for (int m = 0; m < lora->num_modules; m++) {
        size_t side = (size_t)(lora->modules[m].in > lora->modules[m].out ? lora->modules[m].in : lora->modules[m].out);
        largest = (size_t)r * side > largest ? (size_t)r * side : largest;
    }
    void *buf = mallocCheck(largest * 8);
    for (int m = 0; m < lora->num_modules; m++) {
        LoraModule *mod = &lora->modules[m];
        char key[256];
        snprintf(key, sizeof(key), "base_model.model.%s.lora_A.weight", mod->name);
        st_read_floats(fp, &st, safetensors_find(&st, key), mod->A, buf, path);
        snprintf(key, sizeof(key), "base_model.model.%s.lora_B.weight", mod->name);
        st_read_floats(fp, &st, safetensors_find(&st, key), mod->B, buf, path);
    }
    free(buf);
    fcloseCheck(fp);
    safetensors_free(&st);
}

static void lora_free(Lora *lora) {
    free(lora->modules); free(lora->params); free(lora->grads); free(lora->m); free(lora->v);
    memset(lora, 0, sizeof(*lora));
}
// --- end shared-copy: lora-adapter ---


// ----------------------------------------------------------------------------
// the layers, forward and backward, over N = B T rows (row n: sequence n / T, position n % T)

// y (N, OUT) = x (N, in) W^T (+ bias), W (OUT, in) as nn.Linear's
static void linear_forward(float *y, const float *x, const float *W, const float *bias, int N, int in, int OUT) {
    gemm(y, (size_t)OUT, 1, x, (size_t)in, 1, W, 1, (size_t)in, N, OUT, in, 0);
    if (bias == NULL) { return; }
    #pragma omp parallel for if ((size_t)N * OUT > 65536)
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OUT; o++) { y[(size_t)n * OUT + o] += bias[o]; }
    }
}
// dx (N, in) += dy (N, OUT) W: the frozen weight passes the gradient through, and gets none
static void linear_backward(float *dx, const float *dy, const float *W, int N, int in, int OUT) {
    gemm(dx, (size_t)in, 1, dy, (size_t)OUT, 1, W, (size_t)in, 1, N, in, OUT, 1);
}

// A module's update, added to its rows of y (N, OUT): h = s x A^T (N, r), kept for the
// backward pass, then y[:, offset:offset+out] += h B^T
static void lora_forward(float *y, float *h, const float *x, const LoraModule *m, float scale, int r, int N, int OUT) {
    gemm(h, (size_t)r, 1, x, (size_t)m->in, 1, m->A, 1, (size_t)m->in, N, r, m->in, 0);
    for (size_t i = 0; i < (size_t)N * r; i++) { h[i] *= scale; }
    gemm(y + m->offset, (size_t)OUT, 1, h, (size_t)r, 1, m->B, 1, (size_t)r, N, m->out, r, 1);
}
// ... and its backward, dy_m = dy[:, offset:offset+out]:
//     dB += dy_m^T h,   dh = s dy_m B (N, r; dh is scratch),   dA += dh^T x,   dx += dh A
static void lora_backward(float *dx, float *dh, const float *dy, const float *h, const float *x, LoraModule *m, float scale,
                          int r, int N, int OUT) {
    gemm(m->dB, 1, (size_t)r, h, 1, (size_t)r, dy + m->offset, (size_t)OUT, 1, r, m->out, N, 1); // as dB^T += h^T dy_m: r rows
    gemm(dh, (size_t)r, 1, dy + m->offset, (size_t)OUT, 1, m->B, (size_t)r, 1, N, r, m->out, 0);
    for (size_t i = 0; i < (size_t)N * r; i++) { dh[i] *= scale; }
    gemm(m->dA, (size_t)m->in, 1, dh, 1, (size_t)r, x, (size_t)m->in, 1, r, m->in, N, 1);
    gemm(dx, (size_t)m->in, 1, dh, (size_t)r, 1, m->A, (size_t)m->in, 1, N, m->in, r, 1);
}

// LayerNorm (GPT-2) or, with rms, RMSNorm (the Llama family): y = (x - mean) rstd w + b, or
// x rstd w; mean and rstd of each row kept for the backward pass
static void norm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *bias, int N, int C,
                         float eps, int rms) {
    #pragma omp parallel for if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C;
        float m = 0.0f, v = 0.0f;
        for (int i = 0; i < C && !rms; i++) { m += xn[i]; }
        m /= C;
        for (int i = 0; i < C; i++) { v += (xn[i] - m) * (xn[i] - m); }
        float s = 1.0f / sqrtf(v / C + eps);
        for (int i = 0; i < C; i++) { y[(size_t)n * C + i] = (xn[i] - m) * s * w[i] + (bias != NULL ? bias[i] : 0.0f); }
        mean[n] = m;
        rstd[n] = s;
    }
}
// dx += the gradient through the norm (w and b frozen): with x^ = (x - mean) rstd and g = dy w,
// LayerNorm's dx = rstd (g - mean(g) - x^ mean(g x^)); RMSNorm's the same without mean(g)
static void norm_backward(float *dx, const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                          int N, int C, int rms) {
    #pragma omp parallel for if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C, *dyn = dy + (size_t)n * C;
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float g = dyn[i] * w[i], xh = (xn[i] - mean[n]) * rstd[n];
            g_mean += g;
            gx_mean += g * xh;
        }
        g_mean = rms ? 0.0f : g_mean / C;
        gx_mean /= C;
        for (int i = 0; i < C; i++) {
            float g = dyn[i] * w[i], xh = (xn[i] - mean[n]) * rstd[n];
            dx[(size_t)n * C + i] += rstd[n] * (g - g_mean - xh * gx_mean);
        }
    }
}

// RoPE on the queries and keys of qkv (N, Q + 2KV), in place: channels i and i + HS/2 of each
// head turned by pos inv_freq[i] (as infer.c's rope_forward); sign -1 turns them back, which
// is the backward pass (a rotation's transpose is its inverse)
static void rope_apply(float *qkv, const float *inv_freq, int N, int T, int NH, int NKV, int HS, float sign) {
    int QKV = (NH + 2 * NKV) * HS, half = HS / 2;
    // the cosines and sines of the T positions' angles, once for all rows and heads
    float *cs = (float *)mallocCheck((size_t)T * HS * sizeof(float)); // position t: HS/2 cosines, then HS/2 sines
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)t * inv_freq[i];
            cs[(size_t)t * HS + i] = cosf(angle);
            cs[(size_t)t * HS + half + i] = sign * sinf(angle);
        }
    }
    #pragma omp parallel for if ((size_t)N * QKV > 65536)
    for (int n = 0; n < N; n++) {
        const float *c = cs + (size_t)(n % T) * HS, *s = c + half;
        for (int h = 0; h < NH + NKV; h++) { // the query heads, then the key heads (they follow in qkv)
            float *x = qkv + (size_t)n * QKV + (size_t)h * HS;
            for (int i = 0; i < half; i++) {
                float x0 = x[i], x1 = x[i + half];
                x[i] = x0 * c[i] - x1 * s[i];
                x[i + half] = x1 * c[i] + x0 * s[i];
            }
        }
    }
    free(cs);
}


// --- begin shared-copy: exp-fast ---
// e^x in a form the compiler can vectorise (libm's expf is a function call per
// element, and the softmaxes and GELUs call it ~50 million times a step).
// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r from its Taylor
// series to degree 6; 2^n built directly in the float's exponent bits. ln 2 is
// split in two (Cody & Waite) so that r = x - n ln2 stays exact. Max relative
// error 2.3e-7 (4 ulp) over the clamped range; below -87 the result is 1e-38
// rather than a denormal or 0, which no sum of probabilities can tell apart.
// (GCC vectorises the clamp's comparisons only with -fno-trapping-math, which
// the Makefile sets; without it this is still correct, just scalar.)
static inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; // round to nearest via 1.5 * 2^23
    float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f; // ln 2 = hi + lo
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t bits = ((int32_t)n + 127) << 23; // 2^n as a float: n in the exponent field
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return p * two_n;
}
// --- end shared-copy: exp-fast ---

// Causal self-attention of B sequences of T rows: q, k, v from qkv (N, Q + 2KV); query head
// h reads key/value head h / (NH / NKV). att (B, NH, T, T): the probabilities, kept.
// For each sequence and head it is two matrix products, S = Q K^T and O = P V, with the
// softmax of S's rows in between (P = 0 above the diagonal: a position sees no later one).
// The products are gemm's, on one thread each (gemm runs alone inside a parallel region):
// they compute the masked half too, and are still several times faster than loops over
// (t, s) pairs, whose short dot products and row updates wait on memory.
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            const float *q = qkv + (size_t)b * T * QKV + (size_t)h * HS, *k = qkv + (size_t)b * T * QKV + Q + (size_t)g * HS;
            const float *v = k + KV;
            float *p = att + ((size_t)b * NH + h) * T * T;
            gemm(p, (size_t)T, 1, q, (size_t)QKV, 1, k, 1, (size_t)QKV, T, T, HS, 0); // S = Q K^T: (T, T)
            for (int t = 0; t < T; t++) {
                float *row = p + (size_t)t * T, maxval = -INFINITY, sum = 0.0f;
                for (int s = 0; s <= t; s++) {
                    row[s] *= scale;
                    maxval = row[s] > maxval ? row[s] : maxval;
                }
                for (int s = 0; s <= t; s++) { row[s] = exp_fast(row[s] - maxval); }
                for (int s = 0; s <= t; s++) { sum += row[s]; }
                for (int s = 0; s <= t; s++) { row[s] /= sum; }
                for (int s = t + 1; s < T; s++) { row[s] = 0.0f; }
            }
            gemm(out + (size_t)b * T * Q + (size_t)h * HS, (size_t)Q, 1, p, (size_t)T, 1, v, (size_t)QKV, 1, T, HS, T, 0); // O = P V
        }
    }
}
// dqkv (N, Q + 2KV) = the gradient of attention's inputs, from dout (N, Q): per sequence and
// head, with P = att and dO its rows of dout,
//     dP = dO V^T,  dV += P^T dO,  dZ = P * (dP - rowsum(P * dP)) scale (elementwise),
//     dQ = dZ K,  dK += dZ^T Q
// Key/value heads shared by several query heads sum their gradients: one thread per
// (sequence, key/value head) writes them, so no two threads write the same numbers.
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int NH, int NKV,
                               int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(float));
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            float *dz = (float *)mallocCheck((size_t)T * T * sizeof(float));
            const float *k = qkv + (size_t)b * T * QKV + Q + (size_t)g * HS, *v = k + KV;
            float *dk = dqkv + (size_t)b * T * QKV + Q + (size_t)g * HS, *dv = dk + KV;
            for (int h = g * group; h < (g + 1) * group; h++) {
                const float *p = att + ((size_t)b * NH + h) * T * T, *dO = dout + (size_t)b * T * Q + (size_t)h * HS;
                const float *q = qkv + (size_t)b * T * QKV + (size_t)h * HS;
                float *dq = dqkv + (size_t)b * T * QKV + (size_t)h * HS;
                gemm(dz, (size_t)T, 1, dO, (size_t)Q, 1, v, 1, (size_t)QKV, T, T, HS, 0);     // dP = dO V^T
                gemm(dv, (size_t)QKV, 1, p, 1, (size_t)T, dO, (size_t)Q, 1, T, HS, T, 1);     // dV += P^T dO
                for (int t = 0; t < T; t++) {
                    const float *pt = p + (size_t)t * T;
                    float *row = dz + (size_t)t * T, dot = 0.0f;
                    for (int s = 0; s <= t; s++) { dot += pt[s] * row[s]; }
                    for (int s = 0; s < T; s++) { row[s] = s <= t ? pt[s] * (row[s] - dot) * scale : 0.0f; }
                }
                gemm(dq, (size_t)QKV, 1, dz, (size_t)T, 1, k, (size_t)QKV, 1, T, HS, T, 0);   // dQ = dZ K
                gemm(dk, (size_t)QKV, 1, dz, 1, (size_t)T, q, (size_t)QKV, 1, T, HS, T, 1);   // dK += dZ^T Q
            }
            free(dz);
        }
    }
}

// GPT-2's GELU (tanh form) and SwiGLU (the Llama family: silu(gate) up), and their backward
#define GELU_K 0.7978845608028654f // sqrt(2 / pi)
static void activation_forward(float *out, const float *inp, int N, int H, int llama) {
    #pragma omp parallel for if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++) {
        float *y = out + (size_t)n * H;
        if (llama) { // (one loop per branch, so that the compiler vectorises each)
            const float *gate = inp + (size_t)n * 2 * H, *up = gate + H;
            for (int j = 0; j < H; j++) { y[j] = gate[j] / (1.0f + exp_fast(-gate[j])) * up[j]; }
        } else {
            const float *x = inp + (size_t)n * H;
            for (int j = 0; j < H; j++) { y[j] = 0.5f * x[j] * (1.0f + tanhf(GELU_K * (x[j] + 0.044715f * x[j] * x[j] * x[j]))); }
        }
    }
}
static void activation_backward(float *dinp, const float *dout, const float *inp, int N, int H, int llama) {
    #pragma omp parallel for if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * H;
        if (llama) { // d/da silu(a) = sigmoid(a) (1 + a (1 - sigmoid(a)))
            const float *gate = inp + (size_t)n * 2 * H, *up = gate + H;
            float *dgate = dinp + (size_t)n * 2 * H, *dup = dgate + H;
            for (int j = 0; j < H; j++) {
                float a = gate[j], sig = 1.0f / (1.0f + exp_fast(-a));
                dgate[j] = d[j] * up[j] * sig * (1.0f + a * (1.0f - sig));
                dup[j] = d[j] * a * sig;
            }
        } else {
            const float *x = inp + (size_t)n * H;
            float *dx = dinp + (size_t)n * H;
            for (int j = 0; j < H; j++) {
                float u = GELU_K * (x[j] + 0.044715f * x[j] * x[j] * x[j]), th = tanhf(u);
                float du = GELU_K * (1.0f + 3.0f * 0.044715f * x[j] * x[j]);
                dx[j] = d[j] * (0.5f * (1.0f + th) + 0.5f * x[j] * (1.0f - th * th) * du);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the model with its adapter: forward to the loss, backward to the adapter's gradients

// What the backward pass needs of the forward one, for B sequences of T positions
typedef struct {
    int B, T;
    float *x;            // (L + 1, N, C) the residual stream into each block, and out of the last
    float *xmid;         // (L, N, C) ... after each block's attention
    float *n1, *n2;      // (L, N, C) the norms' outputs
    float *stats;        // (L, 4, N) mean1, rstd1, mean2, rstd2; and nf's at the end (2, N)
    float *qkv;          // (L, N, Q + 2KV) after RoPE
    float *att;          // (L, B, NH, T, T)
    float *atty;         // (L, N, Q)
    float *fc;           // (L, N, MLP) before the activation
    float *act;          // (L, N, H)
    float *h;            // each module's h (N, r), back to back
    float *nf;           // (N, C)
    float *logits;       // (N, Vp): the probabilities after the loss
    double *row_loss;    // (N) each row's loss, summed in order after
    float *dx, *dbuf, *dbuf2, *dh; // backward scratch: (N, C), (N, max width) twice, (N, r)
    float *drop, *drop2;           // LoRA dropout's scratch: (N, max width) twice
    size_t bytes;                  // all of it (the memory table)
} Acts;

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// (recompute: finetune_lora.cu's -A; the CPU keeps every activation, whatever it says)
static void acts_allocate(Acts *a, const Base *b, const Lora *lora, int B, int T, int recompute) {
    (void)recompute;
    memset(a, 0, sizeof(*a));
    a->B = B; a->T = T;
    size_t N = (size_t)B * T, L = b->L, C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS;
    size_t MLP = (b->llama ? 2 : 1) * (size_t)b->H, wide = max3(QKV, MLP, max3(C, Q, b->H));
    float **slots[] = {&a->x, &a->xmid, &a->n1, &a->n2, &a->stats, &a->qkv, &a->att, &a->atty, &a->fc, &a->act, &a->h, &a->nf,
                       &a->logits, &a->dx, &a->dbuf, &a->dbuf2, &a->dh, &a->drop, &a->drop2};
    size_t drop = lora->dropout > 0.0f ? N * wide : 1;
    size_t sizes[] = {(L + 1) * N * C, L * N * C, L * N * C, L * N * C, (L * 4 + 2) * N, L * N * QKV, L * B * b->NH * T * T,
                      L * N * Q, L * N * MLP, L * N * b->H, (size_t)lora->num_modules * N * lora->r, N * C, N * b->Vp,
                      N * C, N * wide, N * wide, N * lora->r, drop, drop};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        a->bytes += sizes[k] * sizeof(float);
        *slots[k] = (float *)calloc(sizes[k] > 0 ? sizes[k] : 1, sizeof(float));
        if (*slots[k] == NULL) { fprintf(stderr, "Error: out of memory for the activations (B=%d T=%d)\n", B, T); exit(EXIT_FAILURE); }
    }
    a->row_loss = (double *)mallocCheck(N * sizeof(double));
    a->bytes += N * sizeof(double);
}

static void acts_free(Acts *a) {
    float *all[] = {a->x, a->xmid, a->n1, a->n2, a->stats, a->qkv, a->att, a->atty, a->fc, a->act, a->h, a->nf, a->logits, a->dx,
                    a->dbuf, a->dbuf2, a->dh, a->drop, a->drop2};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) { free(all[k]); }
    free(a->row_loss);
    memset(a, 0, sizeof(*a));
}

// LoRA dropout (PEFT's lora_dropout): while training, the adapter of module k sees its input
// with each entry dropped (zeroed) with probability p and the rest scaled by 1 / (1 - p); the
// base layer sees it whole. Which entries: a counter-based draw from the micro-batch's key,
// the module and the entry's place, so the backward pass draws the same without storing it.
// out = x with the mask applied (N, in); accumulate: out += x masked instead.
static void dropout_apply(float *out, const float *x, const Lora *lora, int k, int N, int in, int accumulate) {
    uint64_t key = rng_subkey(lora->dropout_key, (uint64_t)k, 0);
    float p = lora->dropout, keep_scale = 1.0f / (1.0f - p);
    #pragma omp parallel for if ((size_t)N * in > 65536)
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < in; i++) {
            size_t at = (size_t)n * in + i;
            float v = rng_uniform_at(key, at) < p ? 0.0f : x[at] * keep_scale;
            out[at] = accumulate ? out[at] + v : v;
        }
    }
}
static int dropping(const Lora *lora) { return lora->training && lora->dropout > 0.0f; }

// The LoRA modules of one layer and site, added to y (its outputs) from x (its input)
static void site_lora_forward(float *y, const float *x, int layer, int site, const Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        if (m->layer != layer || m->site != site) { continue; }
        const float *in = x;
        if (dropping(lora)) { dropout_apply(a->drop, x, lora, k, N, m->in, 0); in = a->drop; }
        lora_forward(y, a->h + (size_t)k * N * lora->r, in, m, lora->scale, lora->r, N, OUT);
    }
}
// ... and backward: with dropout, dA comes from the masked input (drawn again) and the
// gradient into x goes back through the same mask
static void site_lora_backward(float *dx, const float *dy, const float *x, int layer, int site, Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        if (m->layer != layer || m->site != site) { continue; }
        if (!dropping(lora)) {
            lora_backward(dx, a->dh, dy, a->h + (size_t)k * N * lora->r, x, m, lora->scale, lora->r, N, OUT);
            continue;
        }
        dropout_apply(a->drop, x, lora, k, N, m->in, 0);
        memset(a->drop2, 0, (size_t)N * m->in * sizeof(float));
        lora_backward(a->drop2, a->dh, dy, a->h + (size_t)k * N * lora->r, a->drop, m, lora->scale, lora->r, N, OUT);
        dropout_apply(dx, a->drop2, lora, k, N, m->in, 1);
    }
}

// The forward pass over tokens (B, T), and the summed cross-entropy of the rows whose label
// is not -100 (label[n]: the token row n should predict). Leaves the probabilities of those
// rows in a->logits for the backward pass; *count gets how many there were.
static double model_forward(const Base *b, const Lora *lora, Acts *a, const int *tokens, const int *labels, int *count) {
    int B = a->B, T = a->T, N = B * T, C = b->C, L = b->L, Q = b->NH * b->HS, QKV = Q + 2 * b->NKV * b->HS;
    int H = b->H, MLP = (b->llama ? 2 : 1) * H;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= b->V) { fprintf(stderr, "Error: token %d at row %d is outside the vocabulary (%d)\n", tokens[n], n, b->V); exit(EXIT_FAILURE); }
        for (int i = 0; i < C; i++) {
            a->x[(size_t)n * C + i] = b->wte[(size_t)tokens[n] * C + i] + (b->wpe != NULL ? b->wpe[(size_t)(n % T) * C + i] : 0.0f);
        }
    }
    for (int l = 0; l < L; l++) {
        size_t NC = (size_t)N * C;
        float *x = a->x + l * NC, *xmid = a->xmid + l * NC, *n1 = a->n1 + l * NC, *n2 = a->n2 + l * NC, *xout = a->x + (l + 1) * NC;
        float *st = a->stats + (size_t)l * 4 * N, *qkv = a->qkv + (size_t)l * N * QKV, *att = a->att + (size_t)l * B * b->NH * T * T;
        float *atty = a->atty + (size_t)l * N * Q, *fc = a->fc + (size_t)l * N * MLP, *act = a->act + (size_t)l * N * H;
        norm_forward(n1, st, st + N, x, b->ln1w + (size_t)l * C, b->ln1b != NULL ? b->ln1b + (size_t)l * C : NULL, N, C, b->eps, b->llama);
        linear_forward(qkv, n1, b->qkvw + (size_t)l * QKV * C, b->qkvb != NULL ? b->qkvb + (size_t)l * QKV : NULL, N, C, QKV);
        site_lora_forward(qkv, n1, l, SITE_QKV, lora, a, N, QKV);
        if (b->llama) { rope_apply(qkv, b->inv_freq, N, T, b->NH, b->NKV, b->HS, 1.0f); }
        attention_forward(atty, att, qkv, B, T, b->NH, b->NKV, b->HS);
        linear_forward(xmid, atty, b->attprojw + (size_t)l * C * Q, b->attprojb != NULL ? b->attprojb + (size_t)l * C : NULL, N, Q, C);
        site_lora_forward(xmid, atty, l, SITE_ATTPROJ, lora, a, N, C);
        for (size_t i = 0; i < NC; i++) { xmid[i] += x[i]; }
        norm_forward(n2, st + 2 * N, st + 3 * N, xmid, b->ln2w + (size_t)l * C, b->ln2b != NULL ? b->ln2b + (size_t)l * C : NULL, N, C, b->eps, b->llama);
        linear_forward(fc, n2, b->fcw + (size_t)l * MLP * C, b->fcb != NULL ? b->fcb + (size_t)l * MLP : NULL, N, C, MLP);
        site_lora_forward(fc, n2, l, SITE_FC, lora, a, N, MLP);
        activation_forward(act, fc, N, H, b->llama);
        linear_forward(xout, act, b->fcprojw + (size_t)l * C * H, b->fcprojb != NULL ? b->fcprojb + (size_t)l * C : NULL, N, H, C);
        site_lora_forward(xout, act, l, SITE_FCPROJ, lora, a, N, C);
        for (size_t i = 0; i < NC; i++) { xout[i] += xmid[i]; }
    }
    float *stf = a->stats + (size_t)L * 4 * N;
    norm_forward(a->nf, stf, stf + N, a->x + (size_t)L * N * C, b->lnfw, b->lnfb, N, C, b->eps, b->llama);
    linear_forward(a->logits, a->nf, b->lm_head, NULL, N, C, b->Vp);
    int counted = 0;
    for (int n = 0; n < N; n++) {
        if (labels[n] == -100) { continue; }
        if (labels[n] < 0 || labels[n] >= b->V) { fprintf(stderr, "Error: label %d at row %d is outside the vocabulary (%d)\n", labels[n], n, b->V); exit(EXIT_FAILURE); }
        counted++;
    }
    // softmax over the V real tokens and the loss, where there is a label: the rows in
    // parallel (a row's numbers do not depend on the threads), their losses summed after in
    // row order so that the total does not either. exp once per logit, in float (as torch's
    // fp32 log_softmax), summed in double.
    double *loss = a->row_loss;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = a->logits + (size_t)n * b->Vp, maxval = -INFINITY;
        loss[n] = 0.0;
        if (labels[n] == -100) { continue; }
        for (int v = 0; v < b->V; v++) { maxval = row[v] > maxval ? row[v] : maxval; }
        float target = row[labels[n]];
        double sum = 0.0;
        for (int v = 0; v < b->V; v++) { row[v] = exp_fast(row[v] - maxval); }
        for (int v = 0; v < b->V; v++) { sum += row[v]; }
        loss[n] = log(sum) + maxval - target;
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < b->V; v++) { row[v] *= inv; }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) { total += loss[n]; }
    *count = counted;
    return total;
}

// The gradient of dscale x (the loss sum) into the adapter's grads (added to them: micro-
// batches accumulate). Call after model_forward on the same batch.
static void model_backward(const Base *b, Lora *lora, Acts *a, const int *labels, float dscale) {
    int B = a->B, T = a->T, N = B * T, C = b->C, L = b->L, Q = b->NH * b->HS, QKV = Q + 2 * b->NKV * b->HS;
    int H = b->H, MLP = (b->llama ? 2 : 1) * H;
    size_t NC = (size_t)N * C;
    // dlogits = dscale (p - onehot(label)) on labelled rows, 0 elsewhere (and on the padding columns)
    float *dlogits = a->logits;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = dlogits + (size_t)n * b->Vp;
        if (labels[n] == -100) { memset(row, 0, (size_t)b->Vp * sizeof(float)); continue; }
        for (int v = 0; v < b->Vp; v++) { row[v] = v < b->V ? dscale * (row[v] - (v == labels[n] ? 1.0f : 0.0f)) : 0.0f; }
    }
    float *dnf = a->dbuf, *dx = a->dx, *stf = a->stats + (size_t)L * 4 * N;
    memset(dnf, 0, NC * sizeof(float));
    linear_backward(dnf, dlogits, b->lm_head, N, C, b->Vp);
    memset(dx, 0, NC * sizeof(float));
    norm_backward(dx, dnf, a->x + (size_t)L * NC, stf, stf + N, b->lnfw, N, C, b->llama);
    for (int l = L - 1; l >= 0; l--) {
        float *x = a->x + l * NC, *xmid = a->xmid + l * NC, *n1 = a->n1 + l * NC, *n2 = a->n2 + l * NC;
        float *st = a->stats + (size_t)l * 4 * N, *qkv = a->qkv + (size_t)l * N * QKV, *att = a->att + (size_t)l * B * b->NH * T * T;
        float *atty = a->atty + (size_t)l * N * Q, *fc = a->fc + (size_t)l * N * MLP, *act = a->act + (size_t)l * N * H;
        // x_out = xmid + fcproj(act): dx flows to xmid as it is, and through fcproj
        float *dact = a->dbuf;
        memset(dact, 0, (size_t)N * H * sizeof(float));
        linear_backward(dact, dx, b->fcprojw + (size_t)l * C * H, N, H, C);
        site_lora_backward(dact, dx, act, l, SITE_FCPROJ, lora, a, N, C);
        float *dfc = a->dbuf2;
        activation_backward(dfc, dact, fc, N, H, b->llama);
        float *dn2 = a->dbuf;
        memset(dn2, 0, NC * sizeof(float));
        linear_backward(dn2, dfc, b->fcw + (size_t)l * MLP * C, N, C, MLP);
        site_lora_backward(dn2, dfc, n2, l, SITE_FC, lora, a, N, MLP);
        norm_backward(dx, dn2, xmid, st + 2 * N, st + 3 * N, b->ln2w + (size_t)l * C, N, C, b->llama); // dx is now d xmid
        // xmid = x + attproj(atty)
        float *datty = a->dbuf;
        memset(datty, 0, (size_t)N * Q * sizeof(float));
        linear_backward(datty, dx, b->attprojw + (size_t)l * C * Q, N, Q, C);
        site_lora_backward(datty, dx, atty, l, SITE_ATTPROJ, lora, a, N, C);
        float *dqkv = a->dbuf2;
        attention_backward(dqkv, datty, qkv, att, B, T, b->NH, b->NKV, b->HS);
        if (b->llama) { rope_apply(dqkv, b->inv_freq, N, T, b->NH, b->NKV, b->HS, -1.0f); }
        float *dn1 = a->dbuf;
        memset(dn1, 0, NC * sizeof(float));
        linear_backward(dn1, dqkv, b->qkvw + (size_t)l * QKV * C, N, C, QKV);
        site_lora_backward(dn1, dqkv, n1, l, SITE_QKV, lora, a, N, QKV);
        norm_backward(dx, dn1, x, st, st + N, b->ln1w + (size_t)l * C, N, C, b->llama); // dx is now d x
    }
}

// ----------------------------------------------------------------------------
// the optimizer, over the adapter only

// The gradient's norm, and scaled to at most max_norm as torch's clip_grad_norm_ does (by
// max_norm / (norm + 1e-6) when that is below 1). Returns the norm before clipping.
static float clip_gradients(Lora *lora, float max_norm) {
    double sq = 0.0;
    for (size_t i = 0; i < lora->num_params; i++) { sq += (double)lora->grads[i] * lora->grads[i]; }
    float norm = (float)sqrt(sq), coef = max_norm / (norm + 1e-6f);
    if (max_norm > 0.0f && coef < 1.0f) {
        for (size_t i = 0; i < lora->num_params; i++) { lora->grads[i] *= coef; }
    }
    return norm;
}

// AdamW (Loshchilov & Hutter), torch's: p -= lr wd p, then p -= lr m^ / (sqrt(v^) + eps)
// with m^, v^ the moments corrected for their start at zero; step counts from 1
static void adamw_update(Lora *lora, float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
    float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
    for (size_t i = 0; i < lora->num_params; i++) {
        float g = lora->grads[i];
        lora->m[i] = beta1 * lora->m[i] + (1.0f - beta1) * g;
        lora->v[i] = beta2 * lora->v[i] + (1.0f - beta2) * g * g;
        float p = lora->params[i] * (1.0f - lr * weight_decay);
        lora->params[i] = p - lr * (lora->m[i] / c1) / (sqrtf(lora->v[i] / c2) + eps);
    }
}

// --- begin shared-copy: lora-train-host ---
// the shape an adapter for base b must have
static LoraShape base_shape(const Base *b) {
    return (LoraShape){.llama = b->llama, .L = b->L, .C = b->C, .Q = b->NH * b->HS, .KV = b->NKV * b->HS, .H = b->H};
}

// Folds module m into the base weight W of its site (W + s B A into its band of rows): a
// model that runs with no adapter at all (PEFT's merge_and_unload). W is (OUT, in).
static void lora_merge(float *W, const LoraModule *m, float scale, int r) {
    for (int o = 0; o < m->out; o++) {
        for (int i = 0; i < m->in; i++) {
            float sum = 0.0f;
            for (int k = 0; k < r; k++) { sum += m->B[(size_t)o * r + k] * m->A[(size_t)k * m->in + i]; }
            W[(size_t)(m->offset + o) * m->in + i] += scale * sum;
        }
    }
}

// Every module of the adapter folded into the base's weights: the model, with no adapter,
// computes what base + adapter did (up to fp32's rounding in the order of the sums)
static void merge_adapter(Base *b, const Lora *lora) {
    size_t C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS, H = b->H, MLP = (b->llama ? 2 : 1) * H;
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        float *W = m->site == SITE_QKV ? (float *)b->qkvw + m->layer * QKV * C : m->site == SITE_ATTPROJ ? (float *)b->attprojw + m->layer * C * Q
                 : m->site == SITE_FC ? (float *)b->fcw + m->layer * MLP * C : (float *)b->fcprojw + m->layer * C * H;
        lora_merge(W, m, lora->scale, lora->r);
    }
}

// ----------------------------------------------------------------------------
// a new adapter: the modules chosen, PEFT's initialisation

// -T: "all-linear" or PEFT module names, comma-separated ("q_proj,v_proj"; GPT-2's: c_attn,
// c_proj, c_fc). A name this family does not have is an error.
static int target_wanted(const char *targets, const char *module_name) {
    if (strcmp(targets, "all-linear") == 0) { return 1; }
    const char *leaf = strrchr(module_name, '.') + 1; // "q_proj" of "model.layers.3.self_attn.q_proj"
    for (const char *p = targets; *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n == strlen(leaf) && strncmp(p, leaf, n) == 0) { return 1; }
        p += n + (comma != NULL);
    }
    return 0;
}

// A fresh adapter on base b: rank r on the -T modules; A Kaiming-uniform with a = sqrt(5)
// (PEFT's, and nn.Linear's own init: U(-1/sqrt(in), 1/sqrt(in))) from the seed, B zero, so
// that the adapted model starts as the base model exactly.
static void lora_create(Lora *lora, const Base *b, int r, float alpha, int rslora, const char *targets, uint64_t seed) {
    memset(lora, 0, sizeof(*lora));
    lora->r = r;
    lora->alpha = alpha;
    lora->rslora = rslora;
    lora->scale = rslora ? alpha / sqrtf((float)r) : alpha / (float)r;
    lora->modules = (LoraModule *)calloc((size_t)b->L * 7, sizeof(LoraModule));
    if (lora->modules == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    LoraShape shape = base_shape(b);
    int matched = 0;
    for (int l = 0; l < b->L; l++) {
        char names[7][128];
        int site[7], offset[7], out[7], in[7], n = family_modules(&shape, l, names, site, offset, out, in);
        for (int k = 0; k < n; k++) {
            if (!target_wanted(targets, names[k])) { continue; }
            if (r > in[k] || r > out[k]) {
                fprintf(stderr, "Error: -r %d: larger than %s (%d x %d): the rank can be at most its smaller side\n", r, names[k], out[k], in[k]);
                exit(EXIT_FAILURE);
            }
            LoraModule *m = &lora->modules[lora->num_modules++];
            snprintf(m->name, sizeof(m->name), "%s", names[k]);
            m->layer = l; m->site = site[k]; m->offset = offset[k]; m->out = out[k]; m->in = in[k];
            lora->num_params += (size_t)r * (in[k] + out[k]);
        }
    }
    // every name asked for must be one of the family's
    char names[7][128];
    int site[7], offset[7], out[7], in[7], n = family_modules(&shape, 0, names, site, offset, out, in);
    for (const char *p = targets; strcmp(targets, "all-linear") != 0 && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        int known = 0;
        for (int k = 0; k < n && !known; k++) { known = len == strlen(strrchr(names[k], '.') + 1) && strncmp(p, strrchr(names[k], '.') + 1, len) == 0; }
        if (!known) {
            fprintf(stderr, "Error: -T: this %s model has no module \"%.*s\"; it has:", b->llama ? "Llama-family" : "GPT-2", (int)len, p);
            for (int k = 0; k < n; k++) { fprintf(stderr, " %s", strrchr(names[k], '.') + 1); }
            fprintf(stderr, " (or all-linear)\n");
            exit(EXIT_FAILURE);
        }
        matched++;
        p += len + (comma != NULL);
    }
    (void)matched;
    lora_allocate(lora, 1, "the new adapter");
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        float bound = 1.0f / sqrtf((float)m->in);
        uint64_t key = rng_key(seed, (uint64_t)k + 1);
        for (size_t i = 0; i < (size_t)r * m->in; i++) { m->A[i] = bound * (float)(2.0 * rng_uniform_at(key, i) - 1.0); }
    }
}

// ----------------------------------------------------------------------------
// writing an adapter as PEFT does: a folder PeftModel.from_pretrained loads

// safetensors' layout (see the reader): 8 bytes of header length, the JSON header (padded
// with spaces to a multiple of 8), then each tensor's bytes, F32 little endian
static void lora_save(const Lora *lora, const Base *b, const char *dir, const char *base_path) {
    char path[MAX_PATH_LEN];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { die_file(dir, NULL, "cannot make the folder: %s", strerror(errno)); }
    // adapter_config.json: what PEFT needs to rebuild the modules
    size_t cap = 4096 + (size_t)lora->num_modules * 64;
    char *json = (char *)mallocCheck(cap);
    int n = snprintf(json, cap, "{\n  \"base_model_name_or_path\": \"%s\",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n"
                     "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n  \"lora_alpha\": %g,\n  \"lora_dropout\": %g,\n"
                     "  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"target_modules\": [",
                     base_path, b->llama ? "false" : "true", lora->alpha, lora->dropout, lora->r);
    int first = 1;
    for (int k = 0; k < lora->num_modules; k++) { // each leaf name once, in the order met
        const char *leaf = strrchr(lora->modules[k].name, '.') + 1;
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) { seen = strcmp(strrchr(lora->modules[j].name, '.') + 1, leaf) == 0; }
        if (!seen) { n += snprintf(json + n, cap - (size_t)n, "%s\n    \"%s\"", first ? "" : ",", leaf); first = 0; }
    }
    n += snprintf(json + n, cap - (size_t)n, "\n  ],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n  \"use_rslora\": %s\n}\n",
                  lora->rslora ? "true" : "false");
    path_concat(path, dir, "/adapter_config.json");
    const void *bufs[3] = {json};
    size_t sizes[3] = {(size_t)n};
    write_file_atomic(path, bufs, sizes, 1);
    free(json);
    // adapter_model.safetensors
    size_t hcap = 256 + (size_t)lora->num_modules * 2 * 256;
    char *header = (char *)mallocCheck(hcap);
    int h = snprintf(header, hcap, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t offset = 0;
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        size_t a = (size_t)lora->r * m->in * 4, bb = (size_t)lora->r * m->out * 4;
        h += snprintf(header + h, hcap - (size_t)h, ",\"base_model.model.%s.lora_A.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                      "\"data_offsets\":[%zu,%zu]}", m->name, lora->r, m->in, offset, offset + a);
        offset += a;
        h += snprintf(header + h, hcap - (size_t)h, ",\"base_model.model.%s.lora_B.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                      "\"data_offsets\":[%zu,%zu]}", m->name, m->out, lora->r, offset, offset + bb);
        offset += bb;
    }
    h += snprintf(header + h, hcap - (size_t)h, "}");
    while (h % 8 != 0) { header[h++] = ' '; }
    uint8_t length[8];
    for (int i = 0; i < 8; i++) { length[i] = (uint8_t)((uint64_t)h >> (8 * i)); }
    // the modules' A and B are back to back in params, in this order: one buffer
    path_concat(path, dir, "/adapter_model.safetensors");
    bufs[0] = length; bufs[1] = header; bufs[2] = lora->params;
    sizes[0] = 8; sizes[1] = (size_t)h; sizes[2] = lora->num_params * sizeof(float);
    write_file_atomic(path, bufs, sizes, 3);
    free(header);
}
// --- end shared-copy: lora-train-host ---


// ----------------------------------------------------------------------------
// the tokenizer (its code is at the end of the file, as data/tokenizer.c's) and the prompt templates

// --- begin shared-copy: bpe-tokenizer-api ---
// Limits of what we accept: GPT-2's longest token is 128 bytes and its files (and
// tokenizer.bin) store each token's length in one byte; the tokenizer file, in two.
#define MAX_TOKEN_BYTES 255
#define MAX_FILE_TOKEN_BYTES 65535
#define SPECIAL_TEXT "<|endoftext|>"
#define SPECIAL_LEN 13
#define TOKENIZER_FILE_MAGIC 20241201 // ./convert's tokenizer file (layout at tokenizer_load_file)

// How a text is cut into pieces before BPE: each model family has its own rule.
enum { PRE_GPT2, PRE_SMOLLM, PRE_LLAMA3, PRE_QWEN2, PRE_NUM };
// How a chat is laid out in text (infer's -a 1): GPT-2 and our models have none (infer uses
// the Alpaca instruction template), SmolLM2 and Qwen2.5 use ChatML, Llama 3 its headers;
// Llama 3.1 and 3.2 add a system turn that opens with two dates (tokenizer_chat_prompt).
enum { CHAT_NONE, CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA31, CHAT_LLAMA32, CHAT_NUM };

// Pieces we have already run through BPE, so that each distinct word is merged only once.
// Fixed capacity: once full we stop adding (every piece still encodes, just without the
// shortcut). Only short pieces are cached; long ones are rare and would crowd the arenas.
#define CACHE_SLOTS (1u << 18)             // hash slots, a power of two
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)  // keep the table at most half full
#define CACHE_MAX_PIECE 64                 // bytes
#define CACHE_KEY_ARENA (CACHE_MAX_ENTRIES * 8)
#define CACHE_TOKEN_ARENA (CACHE_MAX_ENTRIES * 2)
typedef struct {
    uint32_t key_offset;    // into cache_keys
    uint32_t token_offset;  // into cache_tokens
    uint8_t key_len;        // 0 marks an empty slot (pieces are never empty)
    uint8_t num_tokens;
} CacheSlot;

typedef struct Tokenizer {
    int vocab_size;          // V (GPT-2: 256 single bytes + 50000 merges + <|endoftext|> = 50257)
    int num_merges;          // GPT-2: 50000
    int eot_token;           // where a document or a reply ends: GPT-2's <|endoftext|> (50256),
                             // SmolLM2's <|im_end|>, Llama 3's <|eot_id|>; generation stops there
    int bos_token;           // the start token; -1: none (GPT-2 starts from <|endoftext|>)
    int add_bos;             // 1: a prompt starts with bos_token (Llama 3), as its tokenizer does
    int unk_token;           // stands for a byte that has no token; -1: such a byte is dropped
    int pre;                 // PRE_*: the pre-tokenizer's rule
    int chat;                // CHAT_*: the chat template
    int ignore_merges;       // 1: a piece that is a token is taken whole, without merging
    int nfc;                 // 1: text is normalized to Unicode NFC first (Qwen2)
    char *system;            // the chat template's default system message ("": none)
    const char *date;        // CHAT_LLAMA32's "Today Date:" (e.g. "26 Jul 2024"); NULL: today's
    uint8_t *special;        // (V,) 1 for a special token: <|endoftext|>, <|im_start|>, ...
    int32_t *specials;       // the special tokens' ids, longest text first
    int num_specials;
    uint8_t special_start[256]; // 1 for a byte that some special token's text starts with
    uint8_t *token_bytes;    // every token's raw bytes, back to back
    uint32_t *token_offset;  // (V+1,) token i is token_bytes[token_offset[i] .. token_offset[i+1])
    size_t max_token_len;    // bytes of the longest ordinary token
    int32_t *rank_table;     // open addressing: byte string -> id of an ordinary token, -1 = empty
    size_t rank_mask;        // number of slots - 1
    int32_t byte_token[256]; // the id of each single byte's token, -1: none
    // The merges, Hugging Face's rule: (left id, right id) -> the merge's rank and the id it
    // makes. NULL for GPT-2's files, which follow tiktoken's rule instead (see bpe_merge).
    uint64_t *merge_key;     // (left << 32 | right), or MERGE_EMPTY
    int32_t *merge_rank, *merge_result;
    size_t merge_mask;
    CacheSlot *cache;        // (CACHE_SLOTS,)
    uint8_t *cache_keys;     // (CACHE_KEY_ARENA,)
    int32_t *cache_tokens;   // (CACHE_TOKEN_ARENA,)
    size_t cache_entries, cache_key_used, cache_token_used;
} Tokenizer;

// the tokenizer's interface (the code follows)
void tokenizer_init(Tokenizer *t, const char *path); // GPT-2's folder, or a tokenizer file
void tokenizer_free(Tokenizer *t);
size_t tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, int allow_special, int32_t *out);
size_t tokenizer_max_ids(const Tokenizer *t, size_t len); // room tokenizer_encode needs for len bytes
size_t tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, uint8_t *out, size_t cap);
const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len);
int tokenizer_find(const Tokenizer *t, const char *text); // the id whose bytes are text, or -1
char *tokenizer_chat_prompt(const Tokenizer *t, const char *system, const char *user);
// --- end shared-copy: bpe-tokenizer-api ---
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

// --- begin shared-copy: alpaca-template ---
// The instruction template of the fine-tuning chapter (Alpaca's, Taori et al. 2023): the
// one place it is written down. finetune_lora.c trains on exactly this text, so a model it
// tuned answers the instruction when prompted the same way (-a 1).
#define ALPACA_WITH_INPUT                                                                                  \
    "Below is an instruction that describes a task, paired with an input that provides further context. " \
    "Write a response that appropriately completes the request.\n\n"                                       \
    "### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:\n"
#define ALPACA_NO_INPUT                                                                                    \
    "Below is an instruction that describes a task. Write a response that appropriately completes the "   \
    "request.\n\n### Instruction:\n%s\n\n### Response:\n"

// The prompt text for an instruction (and an optional input, NULL or "" for none); malloc'ed.
char *alpaca_prompt(const char *instruction, const char *input) {
    int with_input = input != NULL && input[0] != '\0';
    size_t n = strlen(ALPACA_WITH_INPUT) + strlen(instruction) + (with_input ? strlen(input) : 0) + 1;
    char *text = (char *)mallocCheck(n);
    if (with_input) { snprintf(text, n, ALPACA_WITH_INPUT, instruction, input); }
    else { snprintf(text, n, ALPACA_NO_INPUT, instruction); }
    return text;
}

// --- end shared-copy: alpaca-template ---

// --- begin shared-copy: instruct-prompt ---
// -a 1: an instruction (and an optional input) as the model expects it: in its chat
// template as one user message (after the system message, NULL for the template's own),
// or, for a tokenizer without one (GPT-2's, our models), in the Alpaca template. Malloc'ed.
char *instruct_prompt(const Tokenizer *tok, const char *system, const char *instruction, const char *input) {
    if (tok == NULL || tok->chat == CHAT_NONE) { return alpaca_prompt(instruction, input); }
    if (input == NULL || input[0] == '\0') { return tokenizer_chat_prompt(tok, system, instruction); }
    size_t n = strlen(instruction) + strlen(input) + 3;
    char *user = (char *)mallocCheck(n);
    snprintf(user, n, "%s\n\n%s", instruction, input);
    char *text = tokenizer_chat_prompt(tok, system, user);
    free(user);
    return text;
}
// --- end shared-copy: instruct-prompt ---

// ----------------------------------------------------------------------------
// where the numbers live: finetune_lora.cu keeps the base model and the adapter (with its
// gradients and AdamW's moments) on the GPU, and main tells it when they change on the host
// or are needed there. Here they are in host memory all along: nothing to do.

static void base_to_device(const Base *b) { (void)b; }
static void lora_to_device(const Lora *lora) { (void)lora; }
static void lora_to_host(Lora *lora) { (void)lora; }
static void lora_zero_grads(Lora *lora) { memset(lora->grads, 0, lora->num_params * sizeof(float)); }


#ifndef TESTING // (test_finetune_lora takes what is above; dev/test/test_finetune_lora_cli.sh what follows)

// --- begin shared-copy: phase-names ---
// The phases of a training step that -P times (phases_enter, below)
enum { PHASE_DATA, PHASE_FORWARD, PHASE_BACKWARD, PHASE_NORM, PHASE_UPDATE, NUM_PHASES };
static const char *const PHASE_NAMES[NUM_PHASES] = {"data", "forward", "backward", "norm", "update"};
// --- end shared-copy: phase-names ---
// --- begin shared-copy: phase-clock-cpu ---
// -P's clock on the CPU is the host's own: a call returns when its work is done, so the
// time between two marks is the time of what ran between them.
typedef struct { int unused; } PhaseClock;
static void phase_clock_start(PhaseClock *c) { (void)c; }
static void phase_clock_mark(PhaseClock *c, int phase) { (void)c; (void)phase; }
// 0: no clock of its own (the host's times are the phases')
static int phase_clock_read(PhaseClock *c, double *ms) { (void)c; (void)ms; return 0; }
// ... and a profiler's ranges: none on the CPU (perf and gprof see the functions themselves)
static void range_push(const char *name) { (void)name; }
static void range_pop(void) {}
// --- end shared-copy: phase-clock-cpu ---
// --- begin shared-copy: phases ---
// Where a training step's time goes (-P N: every N-th step, on the step's line and in the
// metrics log): loading the data, the forward pass, the backward pass, the gradient's norm
// (and clipping), the optimizer's update (and zeroing the gradients). phases_enter(p, X)
// says that what runs from here to the next phases_enter (or to phases_end) is phase X: the
// phases follow one another, so they add up to the step, and a step's micro-batches add up
// their passes. The clock is phase_clock's: the host's on the CPU, the GPU's events on the
// GPU. Every step and phase is also a range for a profiler (range_push: NVTX on the GPU, so
// that Nsight Systems shows the step's structure; nothing on the CPU), timed or not.
typedef struct {
    int every;                  // -P: measure every this many steps (0: never)
    int on;                     // measuring the current step
    int current;                // the phase running now (-1: none yet)
    int device;                 // ms is the device's own clock's (the GPU's), not the host's
    int shown;                  // (the host's clock has been shown beside the device's)
    double ms[NUM_PHASES];      // each phase's milliseconds
    double host_ms[NUM_PHASES]; // ... by the host's clock, read at each boundary without waiting
    double host_last;           // the host's clock at the last boundary
    PhaseClock clock;
} Phases;

// a step begins (step counts from 0: -P N measures steps N, 2N, ...)
static void phases_begin(Phases *p, int step) {
    char name[32];
    snprintf(name, sizeof(name), "step %d", step + 1);
    range_push(name);
    p->current = -1;
    p->on = p->every > 0 && (step + 1) % p->every == 0;
    if (!p->on) { return; }
    for (int k = 0; k < NUM_PHASES; k++) { p->ms[k] = p->host_ms[k] = 0.0; }
    phase_clock_start(&p->clock);
    p->host_last = wall_seconds();
}
// the phase that was running (if any) ends here
static void phases_close(Phases *p) {
    if (p->current < 0) { return; }
    range_pop();
    if (p->on) {
        double now = wall_seconds();
        p->host_ms[p->current] += 1e3 * (now - p->host_last);
        p->host_last = now;
        phase_clock_mark(&p->clock, p->current);
    }
    p->current = -1;
}
static void phases_enter(Phases *p, int phase) {
    phases_close(p);
    range_push(PHASE_NAMES[phase]);
    p->current = phase;
}
// the step is done: read the device's clock (waiting for it)
static void phases_end(Phases *p) {
    phases_close(p);
    range_pop(); // (the step's)
    if (!p->on) { return; }
    p->device = phase_clock_read(&p->clock, p->ms);
    if (!p->device) {
        for (int k = 0; k < NUM_PHASES; k++) { p->ms[k] = p->host_ms[k]; }
    }
}
static double phases_sum(const double *ms) {
    double sum = 0.0;
    for (int k = 0; k < NUM_PHASES; k++) { sum += ms[k]; }
    return sum;
}
// The reports (marked unused: train_mlp prints a mean per epoch its own way, finetune_lora
// writes its own columns, and neither compiler may warn of them).
// on the step's line: " | data 0.1 forward 20.5 ... ms (sum 41.0 of the step's 41.0)", the
// step's time as the program measured it for its line
__attribute__((unused)) static void phases_print(const Phases *p, double step_ms) {
    if (!p->on) { return; }
    printf(" |");
    for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.1f", PHASE_NAMES[k], p->ms[k]); }
    printf(" ms (sum %.1f of the step's %.1f)", phases_sum(p->ms), step_ms);
}
// once, on a line of its own, where the device has its own clock: what the host's said
__attribute__((unused)) static void phases_print_host(Phases *p) {
    if (!p->on || !p->device || p->shown) { return; }
    p->shown = 1;
    printf("  (-P: those are the GPU's times, from events; the host's clock, read at the same marks without"
           " waiting for the GPU, says");
    for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.1f", PHASE_NAMES[k], p->host_ms[k]); }
    printf(" ms: a phase whose kernels were only queued looks short, and the wait for them is charged to"
           " the first call that needs a result)\n");
}
// key:value fields for a metrics log line: ms_data:... and, with a device clock, host_ms_data:...
__attribute__((unused)) static void phases_log(const Phases *p, FILE *f) {
    if (!p->on || f == NULL) { return; }
    for (int k = 0; k < NUM_PHASES; k++) { fprintf(f, " ms_%s:%.3f", PHASE_NAMES[k], p->ms[k]); }
    if (p->device) {
        for (int k = 0; k < NUM_PHASES; k++) { fprintf(f, " host_ms_%s:%.3f", PHASE_NAMES[k], p->host_ms[k]); }
    }
}
// --- end shared-copy: phases ---
static void phases_device_setup(Phases *p) { (void)p; } // (finetune_lora.cu: its events go on its stream)
static void gpu_budget_flag(const char *flag, const char *value) { // (-G: finetune_lora.cu's)
    (void)value;
    fprintf(stderr, "Error: flag %s is finetune_loracu's (a GPU memory budget); the CPU program has none\n"
            "HINT: %s -h lists every flag\n", flag, PROGRAM);
    exit(EXIT_FAILURE);
}
// the benchmark's peak memory: the process's largest resident set (Linux's ru_maxrss, KiB)
static void print_peak_memory(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) == 0) { printf("peak memory: %.1f MiB resident (the whole process)\n", usage.ru_maxrss / 1024.0); }
}

// what the run holds in memory, by kind (the activations: what the backward pass keeps)
static void print_memory(const Base *b, const Lora *lora, const Acts *a) {
    size_t base_params = b->llama ? b->llama_weights.num_parameters : b->gpt2.num_parameters;
    printf("memory (MiB): base weights %.1f (fp32, no gradients), adapter %.2f, its gradients %.2f, AdamW's moments %.2f, "
           "activations and their gradients' scratch %.1f (B=%d, T=%d)\n", base_params * 4.0 / (1 << 20), lora->num_params * 4.0 / (1 << 20),
           lora->num_params * 4.0 / (1 << 20), lora->num_params * 8.0 / (1 << 20), a->bytes / 1048576.0, a->B, a->T);
}

// --- begin shared-copy: finetune-main ---
// ----------------------------------------------------------------------------
// the instruction data: Alpaca JSONL, checked, laid out in the model's template

// One example: the prompt (the instruction and input in the model's chat template, or
// Alpaca's for a model without one), then the response and the end token. The loss is on
// the response and the end token only: the model learns to answer, not to ask.
typedef struct {
    int *tokens;
    int len, prompt_len;
} Example;

typedef struct {
    Example *examples;
    int n;
} Dataset;

// UTF-8 as RFC 3629 has it: no overlong forms, no surrogates, nothing above U+10FFFF
static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        if (len == 0) { return 0; }
        i += len;
    }
    return 1;
}

// a field of a record: 1 with a string (maybe empty) in *out (malloc'ed), 0 if the key is
// missing, -1 if it is not a string
static int record_field(const Json *j, const char *key, char **out) {
    int at = json_get(j, 0, key);
    *out = NULL;
    if (at < 0) { return 0; }
    if (j->tokens[at].type != JSON_STRING) { return -1; }
    size_t cap = j->tokens[at].end - j->tokens[at].start + 1;
    *out = (char *)mallocCheck(cap);
    if (json_string(j, at, *out, cap) < 0) { free(*out); *out = NULL; return -1; }
    return 1;
}

static int compare_ints(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

// Reads path: one JSON object per line with "instruction", "input" (optional) and "output".
// A line that is not a JSON object stops us (its number in the message). A record with an
// empty or missing instruction or output, invalid UTF-8, the same as an earlier one, or more
// than T tokens laid out is counted and dropped, or (refuse) reported and the run stops.
// Then a seeded val_frac of the rest (at least 1) is held out for validation.
static void read_examples(Dataset *train, Dataset *val, const char *path, const Tokenizer *tok, int T, int refuse, float val_frac,
                          uint64_t seed) {
    size_t len;
    char *text = (char *)read_whole_file(path, &len, "the instruction data: JSONL, one {\"instruction\", \"input\", \"output\"} a line (make data/iso/train.jsonl writes some)");
    Example *all = NULL;
    int n = 0, cap = 0, lines = 0, empty = 0, bad_utf8 = 0, duplicates = 0, too_long = 0, first_bad[4] = {0, 0, 0, 0};
    uint64_t *seen = NULL;
    int *lengths = NULL;
    int32_t *ids = (int32_t *)mallocCheck(tokenizer_max_ids(tok, len + 4096) * sizeof(int32_t));
    for (char *line = text; line < text + len;) {
        char *end = (char *)memchr(line, '\n', (size_t)(text + len - line));
        size_t line_len = end != NULL ? (size_t)(end - line) : (size_t)(text + len - line);
        lines++;
        char *next = line + line_len + 1;
        if (line_len == 0 || (line_len == 1 && line[0] == '\r')) { line = next; continue; } // (a blank line)
        Json j;
        char err[256];
        int parsed = json_parse(&j, line, line_len, err, sizeof(err)) == 0;
        if (!parsed || j.tokens[0].type != JSON_OBJECT) {
            die_file(path, "each line must be one JSON object: {\"instruction\": ..., \"input\": ..., \"output\": ...}",
                     "line %d: %s", lines, parsed ? "not a JSON object" : err);
        }
        char *instruction, *input, *output;
        int fi = record_field(&j, "instruction", &instruction), fn = record_field(&j, "input", &input), fo = record_field(&j, "output", &output);
        json_free(&j);
        if (fi < 0 || fn < 0 || fo < 0) { die_file(path, NULL, "line %d: instruction, input and output must be strings", lines); }
        int problem = -1; // 0 empty, 1 UTF-8, 2 duplicate, 3 too long
        if (fi == 0 || fo == 0 || instruction[0] == '\0' || output[0] == '\0') { problem = 0; }
        else if (!valid_utf8((const uint8_t *)instruction, strlen(instruction)) || !valid_utf8((const uint8_t *)output, strlen(output)) ||
                 (input != NULL && !valid_utf8((const uint8_t *)input, strlen(input)))) { problem = 1; }
        if (problem < 0) { // exact duplicates: the three fields' hash (FNV-1a 64), compared with every earlier one
            uint64_t hash = 14695981039346656037ull;
            const char *fields[3] = {instruction, input != NULL ? input : "", output};
            for (int f = 0; f < 3; f++) {
                for (const unsigned char *p = (const unsigned char *)fields[f]; ; p++) {
                    hash = (hash ^ *p) * 1099511628211ull;
                    if (*p == '\0') { break; }
                }
            }
            for (int k = 0; k < n && problem < 0; k++) { problem = seen[k] == hash ? 2 : -1; }
            if (problem < 0) {
                char *prompt = instruct_prompt(tok, NULL, instruction, input);
                size_t m = 0;
                if (tok->add_bos && tok->chat == CHAT_NONE && tok->bos_token >= 0) { ids[m++] = tok->bos_token; }
                m += tokenizer_encode((Tokenizer *)tok, (const uint8_t *)prompt, strlen(prompt), 1, ids + m);
                int prompt_len = (int)m;
                m += tokenizer_encode((Tokenizer *)tok, (const uint8_t *)output, strlen(output), 0, ids + m);
                ids[m++] = tok->eot_token;
                free(prompt);
                if ((int)m > T + 1) { problem = 3; } // (T inputs and T labels: T + 1 tokens)
                else {
                    if (n == cap) {
                        cap = cap == 0 ? 1024 : 2 * cap;
                        all = (Example *)realloc(all, (size_t)cap * sizeof(Example));
                        seen = (uint64_t *)realloc(seen, (size_t)cap * sizeof(uint64_t));
                        lengths = (int *)realloc(lengths, (size_t)cap * sizeof(int));
                        if (all == NULL || seen == NULL || lengths == NULL) { die_file(path, NULL, "out of memory"); }
                    }
                    all[n].tokens = (int *)mallocCheck(m * sizeof(int));
                    for (size_t i = 0; i < m; i++) { all[n].tokens[i] = ids[i]; }
                    all[n].len = (int)m;
                    all[n].prompt_len = prompt_len;
                    seen[n] = hash;
                    lengths[n] = (int)m;
                    n++;
                }
            }
        }
        if (problem >= 0) {
            int *count[4] = {&empty, &bad_utf8, &duplicates, &too_long};
            (*count[problem])++;
            if (first_bad[problem] == 0) { first_bad[problem] = lines; }
        }
        free(instruction); free(input); free(output);
        line = next;
    }
    free(ids);
    free(text);
    int dropped = empty + bad_utf8 + duplicates + too_long;
    printf("data: %s: %d records; %d dropped: %d with an empty or missing instruction or output, %d with invalid UTF-8, "
           "%d duplicates, %d longer than T = %d tokens\n", path, n + dropped, dropped, empty, bad_utf8, duplicates, too_long, T);
    if (refuse && dropped > 0) {
        const char *what[4] = {"an empty or missing field", "invalid UTF-8", "a duplicate", "longer than T (-t)"};
        for (int k = 0; k < 4; k++) {
            if (first_bad[k] > 0) { fprintf(stderr, "Error: %s: line %d: %s\n", path, first_bad[k], what[k]); }
        }
        fprintf(stderr, "HINT: -x drop leaves such records out instead\n");
        exit(EXIT_FAILURE);
    }
    if (n < 2) { die_file(path, NULL, "%d usable records: too few to train and validate on", n); }
    qsort(lengths, (size_t)n, sizeof(int), compare_ints);
    printf("tokens per example (template, response, end token): min %d, median %d, p90 %d, p99 %d, max %d\n", lengths[0],
           lengths[n / 2], lengths[(int)(0.9 * (n - 1))], lengths[(int)(0.99 * (n - 1))], lengths[n - 1]);
    free(lengths);
    free(seen);
    // the split: a seeded shuffle, then the last val_frac
    for (int i = n - 1; i > 0; i--) {
        int k = (int)(rng_uniform_at(rng_key(seed, 101), (uint64_t)i) * (i + 1));
        Example t = all[i]; all[i] = all[k]; all[k] = t;
    }
    int nv = (int)(val_frac * n);
    nv = nv < 1 ? 1 : nv;
    train->examples = all;
    train->n = n - nv;
    val->examples = all + (n - nv);
    val->n = nv;
    printf("split: %d for training, %d for validation (seed %llu)\n", train->n, val->n, (unsigned long long)seed);
}

// A micro-batch of B examples into tokens and labels (B, T): example e at row b, padded
// with token 0 after its end; label[t] = token t + 1 where that token is the response's or
// the end token, -100 elsewhere (the prompt, the padding). Returns the labelled count.
static int fill_batch(int *tokens, int *labels, const Dataset *d, const int *order, int first, int B, int T) {
    int count = 0;
    for (int b = 0; b < B; b++) {
        const Example *e = &d->examples[order[(first + b) % d->n]];
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = t < e->len ? e->tokens[t] : 0;
            int labelled = t + 1 < e->len && t + 1 >= e->prompt_len;
            labels[b * T + t] = labelled ? e->tokens[t + 1] : -100;
            count += labelled;
        }
    }
    return count;
}

// ----------------------------------------------------------------------------
// checkpoints: a run that stops can go on, bit for bit

// At step s (-S): the adapter as PEFT's files in OUT/step_<s>/ (usable as it is), and
// OUT/state_<s>.bin, what else the run needs to go on exactly: int32 header [magic, version,
// step, epoch, cursor, training records, B, accum, T, steps, r, seed (2 x 32 bits),
// parameters, 0...] (256 x int32), the training order (records x int32), AdamW's m and v
// (2 x parameters x float32). All written atomically: a crash leaves the last whole one.
#define STATE_MAGIC 20261202
typedef struct {
    int step, epoch, cursor;
} Progress;

static void checkpoint_save(const char *out, const Lora *lora, const Base *b, const char *model_path, const Progress *pr,
                            const int *order, int n_train, int B, int accum, int T, int steps, uint64_t seed) {
    char dir[MAX_PATH_LEN], path[MAX_PATH_LEN];
    format_path(dir, sizeof(dir), "%s/step_%06d", out, pr->step);
    lora_save(lora, b, dir, model_path);
    int h[256] = {STATE_MAGIC, 1, pr->step, pr->epoch, pr->cursor, n_train, B, accum, T, steps, lora->r, (int)(seed & 0x7fffffff),
                  (int)(seed >> 31), (int)lora->num_params};
    const void *bufs[4] = {h, order, lora->m, lora->v};
    size_t sizes[4] = {sizeof(h), (size_t)n_train * sizeof(int), lora->num_params * sizeof(float), lora->num_params * sizeof(float)};
    format_path(path, sizeof(path), "%s/state_%06d.bin", out, pr->step);
    write_file_atomic(path, bufs, sizes, 4);
}

// the newest step with both its state and its adapter in out, -1 if none
static int find_latest_checkpoint(const char *out) {
    char pattern[MAX_PATH_LEN], dir[MAX_PATH_LEN];
    format_path(pattern, sizeof(pattern), "%s/state_*.bin", out);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int step;
            if (sscanf(strrchr(g.gl_pathv[i], '/') + 1, "state_%d.bin", &step) != 1) { continue; }
            format_path(dir, sizeof(dir), "%s/step_%06d/adapter_model.safetensors", out, step);
            if (access(dir, R_OK) == 0 && step > latest) { latest = step; }
        }
        globfree(&g);
    }
    return latest;
}

// Reads state_<step>.bin into pr, order and the moments; the run's settings must be the
// ones it was written with (else one error saying which flags to give)
static void checkpoint_load(const char *out, int step, Lora *lora, Progress *pr, int *order, int n_train, int B, int accum, int T,
                            int steps, uint64_t seed) {
    char path[MAX_PATH_LEN];
    format_path(path, sizeof(path), "%s/state_%06d.bin", out, step);
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    if (fread(h, sizeof(int), 256, fp) != 256 || h[0] != STATE_MAGIC || h[1] != 1) { die_file(path, NULL, "not a finetune_lora state file (magic %d)", STATE_MAGIC); }
    if (h[5] != n_train || h[6] != B || h[7] != accum || h[8] != T || h[9] != steps || h[10] != lora->r || h[11] != (int)(seed & 0x7fffffff) ||
        h[12] != (int)(seed >> 31) || h[13] != (int)lora->num_params) {
        die_file(path, "resume with the flags and data of the run that wrote it",
                 "written by a run with %d training records, -b %d -k %d, T %d, %d steps, -r %d, seed %d; this one has %d, -b %d -k %d, "
                 "T %d, %d steps, -r %d, seed %d", h[5], h[6], h[7], h[8], h[9], h[10], h[11], n_train, B, accum, T, steps, lora->r,
                 (int)(seed & 0x7fffffff));
    }
    if (h[2] != step || h[3] < 0 || h[4] < 0 || h[4] > n_train) { die_file(path, NULL, "its header is not a state's: corrupt"); }
    pr->step = h[2];
    pr->epoch = h[3];
    pr->cursor = h[4];
    freadCheck(order, sizeof(int), (size_t)n_train, fp);
    freadCheck(lora->m, sizeof(float), lora->num_params, fp);
    freadCheck(lora->v, sizeof(float), lora->num_params, fp);
    for (int i = 0; i < n_train; i++) {
        if (order[i] < 0 || order[i] >= n_train) { die_file(path, NULL, "its record order is corrupt"); }
    }
    fcloseCheck(fp);
}

// ----------------------------------------------------------------------------
// the leakage check (-E): an evaluation says nothing if its questions were trained on

// one JSONL file's records as (text, line) pairs: for each record, the instruction and its
// input ("what was asked", as one lowercase line of single spaces), and every field's text
// (where an answer would show); the fields absent are empty
typedef struct {
    char *asked, *all;
    int line;
} LeakRecord;

static char *normalized(const char *s) { // lowercase ASCII, runs of white space as one space, trimmed
    size_t n = strlen(s), k = 0;
    char *out = (char *)mallocCheck(n + 1);
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            if (k > 0 && out[k - 1] != ' ') { out[k++] = ' '; }
            continue;
        }
        out[k++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
    }
    while (k > 0 && out[k - 1] == ' ') { k--; }
    out[k] = '\0';
    return out;
}

static int read_leak_records(const char *path, const char *answer_key, LeakRecord **out, char ***answers) {
    size_t len;
    char *data = (char *)read_whole_file(path, &len, NULL);
    int n = 0, cap = 64, line_no = 0;
    LeakRecord *rs = (LeakRecord *)mallocCheck((size_t)cap * sizeof(LeakRecord));
    if (answers != NULL) { *answers = (char **)mallocCheck((size_t)cap * sizeof(char *)); }
    for (size_t start = 0; start < len;) {
        size_t end = start;
        while (end < len && data[end] != '\n') { end++; }
        line_no++;
        const char *line = data + start;
        size_t line_len = end - start;
        start = end + 1;
        while (line_len > 0 && (line[line_len - 1] == '\r' || line[line_len - 1] == ' ')) { line_len--; }
        if (line_len == 0) { continue; }
        Json j;
        char err[256] = "";
        if (json_parse(&j, line, line_len, err, sizeof(err)) != 0) { die_file(path, NULL, "line %d: JSON error: %s", line_no, err); }
        if (j.tokens[0].type != JSON_OBJECT) { die_file(path, NULL, "line %d is not a JSON object", line_no); }
        char *f[3], *answer = NULL;
        const char *keys[3] = {"instruction", "input", "output"};
        for (int k = 0; k < 3; k++) {
            if (record_field(&j, keys[k], &f[k]) < 0) { die_file(path, NULL, "line %d: %s is not a string", line_no, keys[k]); }
        }
        if (answer_key != NULL && (record_field(&j, answer_key, &answer) <= 0 || answer[0] == '\0')) {
            die_file(path, "-E takes an evaluation's questions, each with its \"answer\" (data/iso/eval.jsonl)",
                     "line %d: no \"%s\" string", line_no, answer_key);
        }
        int p = answer_key != NULL ? json_get(&j, 0, "partial") : -1; // (its other forms, one a line after it)
        if (p >= 0 && j.tokens[p].type == JSON_ARRAY) {
            for (int k = 0, at = p + 1; k < j.tokens[p].size; k++, at = j.tokens[at].next) {
                size_t have = strlen(answer), cap_more = j.tokens[at].end - j.tokens[at].start + 2;
                answer = (char *)realloc(answer, have + cap_more);
                if (answer == NULL) { die_file(path, NULL, "out of memory"); }
                answer[have] = '\n';
                if (json_string(&j, at, answer + have + 1, cap_more) < 0) { answer[have] = '\0'; }
            }
        }
        json_free(&j);
        if (n == cap) {
            cap *= 2;
            rs = (LeakRecord *)realloc(rs, (size_t)cap * sizeof(LeakRecord));
            if (answers != NULL) { *answers = (char **)realloc(*answers, (size_t)cap * sizeof(char *)); }
            if (rs == NULL || (answers != NULL && *answers == NULL)) { die_file(path, NULL, "out of memory"); }
        }
        size_t total = 3;
        for (int k = 0; k < 3; k++) { total += f[k] != NULL ? strlen(f[k]) + 1 : 0; }
        char *asked = (char *)mallocCheck(total), *all = (char *)mallocCheck(total);
        snprintf(asked, total, "%s\n%s", f[0] != NULL ? f[0] : "", f[1] != NULL ? f[1] : "");
        snprintf(all, total, "%s\n%s\n%s", f[0] != NULL ? f[0] : "", f[1] != NULL ? f[1] : "", f[2] != NULL ? f[2] : "");
        rs[n].asked = normalized(asked);
        rs[n].all = all;
        rs[n].line = line_no;
        if (answers != NULL) { (*answers)[n] = answer; }
        n++;
        free(asked);
        for (int k = 0; k < 3; k++) { free(f[k]); }
    }
    free(data);
    *out = rs;
    return n;
}

static int ascii_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// whether word (a whole word of letters and digits) is in text, not inside a longer one
static int contains_word(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word)) {
        int before = p > text && ascii_alnum(p[-1]), after = ascii_alnum(p[n]);
        if (!before && !after) { return 1; }
    }
    return 0;
}

// Refuses (exit 1, naming lines) if an evaluation question was trained on: the same
// instruction and input as a record of the data (case and white space aside), or its
// expected answer (or one of its "partial" forms) a word of any record (whichever field). Both files whole: the validation
// records are held out for the loss, but they come from the same data.
static void check_leakage(const char *data_path, const char *eval_path) {
    LeakRecord *train, *eval;
    char **answers;
    int nt = read_leak_records(data_path, NULL, &train, NULL), ne = read_leak_records(eval_path, "answer", &eval, &answers);
    int leaked = 0, shown = 0;
    for (int e = 0; e < ne; e++) {
        int hit = 0;
        for (int t = 0; t < nt; t++) {
            int same = strcmp(eval[e].asked, train[t].asked) == 0, answer = 0;
            for (char *a = answers[e]; *a != '\0' && !answer;) { // the answer and its partial forms, a line each
                char *end = strchr(a, '\n'), keep = end != NULL ? *end : '\0';
                if (end != NULL) { *end = '\0'; }
                answer = a[0] != '\0' && contains_word(train[t].all, a);
                if (end != NULL) { *end = keep; }
                a = end != NULL ? end + 1 : a + strlen(a);
            }
            if (!same && !answer) { continue; }
            hit = 1;
            if (shown++ < 5) {
                fprintf(stderr, "leak: %s line %d: %s %s line %d\n", eval_path, eval[e].line,
                        same ? "the same question as" : "its answer is a word of", data_path, train[t].line);
            }
        }
        leaked += hit;
    }
    if (leaked > 0) {
        die_file(eval_path, "drop those records from the training data (data/instructions holds countries out for this), or those questions",
                 "%d of its %d questions are in the training data %s (asked there, or their answer a word there): "
                 "an evaluation on them measures memory", leaked, ne, data_path);
    }
    printf("leakage: none of %s's %d questions and answers is in %s's %d records\n", eval_path, ne, data_path, nt);
    for (int i = 0; i < nt; i++) { free(train[i].asked); free(train[i].all); }
    for (int i = 0; i < ne; i++) { free(eval[i].asked); free(eval[i].all); free(answers[i]); }
    free(train); free(eval); free(answers);
}

// --- begin shared-copy: log-truncate ---
// On resume, the log of the first run may go on past the checkpoint (it ran a
// while longer before it stopped). Keep only the lines whose first number, read
// with key_format (e.g. "s:%d"), is at most `last`, and write the result back
// atomically, so that the resumed run's lines follow on.
void log_truncate_after(const char *path, const char *key_format, int last) {
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
// --- end shared-copy: log-truncate ---

// ----------------------------------------------------------------------------
// main: train an adapter

// --- begin shared-copy: usage-error ---
// a bad flag: one line saying what is wrong, one saying where the flags are listed
static void usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "Error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nHINT: %s -h lists every flag\n", PROGRAM);
    exit(EXIT_FAILURE);
}
// --- end shared-copy: usage-error ---
// --- begin shared-copy: parse-int ---
// a whole-string integer in [lo, 2^31), or a usage error naming the flag
static long parse_int(const char *flag, const char *s, long lo) {
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
// --- end shared-copy: parse-int ---
// --- begin shared-copy: parse-float ---
// a whole-string non-negative float, or a usage error naming the flag
static float parse_float(const char *flag, const char *s) {
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
// --- end shared-copy: parse-float ---
// --- begin shared-copy: gpt2-lr-schedule ---
// Step s (counting from 0) uses lr(s): warm-up from max_lr/warmup up to max_lr
// at s = warmup-1, then a cosine from max_lr (at s = warmup) towards
// max_lr*final_frac, which the curve would reach at s = max_steps, one past the
// last step. (llm.c's schedule; the peak is used twice, at warmup-1 and warmup.)
float get_learning_rate(int step, float max_lr, int warmup_steps, int max_steps, float final_frac) {
    if (step < warmup_steps) { return max_lr * (step + 1) / warmup_steps; }
    if (max_steps <= warmup_steps) { return max_lr; }
    float progress = (float)(step - warmup_steps) / (float)(max_steps - warmup_steps);
    float cosine = 0.5f * (1.0f + cosf((float)M_PI * progress)); // 1 -> 0
    float min_lr = max_lr * final_frac;
    return min_lr + (max_lr - min_lr) * cosine;
}

// --- end shared-copy: gpt2-lr-schedule ---

typedef struct {
    const char *model, *tokenizer, *data, *eval, *out, *targets, *init, *merge;
    int r, rslora, B, accum, T, steps, epochs, warmup, val_every, refuse, save_every, resume, recompute, bench;
    float alpha, dropout, lr, weight_decay, clip, val_frac, final_frac;
    uint64_t seed;
    int phase_every;
} Options;

static void print_usage(const Options *d) {
    printf("usage: %s [flags]    LoRA fine-tuning of a model file on instruction data (Alpaca JSONL)\n"
           "  -m FILE   the base model, frozen: our GPT-2 or Llama-family model file [%s]\n"
           "  -g FILE   its tokenizer [the model's NAME_tokenizer.bin, else data/gpt2]\n"
           "  -d FILE   the training data, JSONL: instruction, input, output [%s]\n"
           "  -E FILE   an evaluation's questions (JSONL with \"answer\"; infer -E asks them): refuse to train if one of\n"
           "            them, or its answer, is in the training data (leakage) [none]\n"
           "  -o DIR    where the adapter (PEFT's files) and metrics.tsv go [%s]\n"
           "  -i DIR    start from this adapter (PEFT's files; its rank, alpha and modules) instead of a new one\n"
           "  -M FILE   no training: merge -i's adapter into the model and write it to FILE (with its tokenizer beside it),\n"
           "            after checking on -d's validation records that it computes what model + adapter do\n"
           "  -T LIST   the modules to adapt: all-linear, or PEFT names (q_proj,v_proj; GPT-2: c_attn,c_proj,c_fc) [%s]\n"
           "  -r N      LoRA's rank [%d]\n"
           "  -a X      LoRA's alpha: the update is scaled by alpha / r [%g]\n"
           "  -R 0|1    rsLoRA: scale by alpha / sqrt(r) [%d]\n"
           "  -D X      LoRA dropout: the probability that an entry of an adapter's input is dropped [%g]\n"
           "  -b N      sequences per micro-batch [%d]\n"
           "  -k N      micro-batches per step (gradient accumulation) [%d]\n"
           "  -t N      tokens per sequence, T: the longest example (printed with the data) must fit [%d]\n"
           "  -x 0|1    records with a problem (empty field, bad UTF-8, duplicate, longer than T): 0 drop, 1 refuse [%d]\n"
           "  -e N      epochs over the training records (when -n is 0) [%d]\n"
           "  -n N      optimizer steps (0: from -e) [%d]\n"
           "  -l X      peak learning rate (AdamW) [%g]\n"
           "  -u N      warm-up steps, then a cosine down to -q x peak [%d]\n"
           "  -q X      the cosine's end, a fraction of the peak [%g]\n"
           "  -w X      weight decay [%g]\n"
           "  -c X      clip the gradient to this norm (0: never) [%g]\n"
           "  -v N      validation loss every N steps (and at the end) [%d]\n"
           "  -V X      fraction of the records held out for validation [%g]\n"
           "  -S N      a checkpoint every N steps (OUT/step_N/: the adapter; OUT/state_N.bin), 0: none [%d]\n"
           "  -y 0|1    resume from the newest checkpoint in -o, with the same flags and data [%d]\n"
           "  -A 0|1    activation recomputation: keep only each block's input, run the block again in the\n"
           "            backward pass (less memory, about a third more compute; finetune_lora.cu; the CPU keeps all) [%d]\n"
           "  -B 0|1    benchmark: random tokens on -m (a model file, or llama:smollm2-135m, llama:llama3.2-1b,\n"
           "            llama:qwen2.5-0.5b: random weights of that shape), -n steps (10 if 0) of -k x -b x -t; no data,\n"
           "            no files written: tokens/s and peak memory [%d]\n"
           "  -s N      seed: the adapter's start, the split, the order [%llu]\n"
           "  -P N      time the phases of every N-th step (data, forward, backward, norm, update; in metrics.tsv\n"
           "            too), 0 = off [%d]\n"
           "  -G GiB    finetune_lora.cu: behave as if the GPU had only this much memory (a 16 GB card on a\n"
           "            bigger one), 0 = all of it [0]\n"
           "  -h        this help\n",
           PROGRAM, d->model, d->data, d->out, d->targets, d->r, d->alpha, d->rslora, d->dropout, d->B, d->accum, d->T, d->refuse, d->epochs,
           d->steps, d->lr, d->warmup, d->final_frac, d->weight_decay, d->clip, d->val_every, d->val_frac, d->save_every, d->resume,
           d->recompute, d->bench, (unsigned long long)d->seed, d->phase_every);
}

// the mean loss over a dataset's labelled tokens (forward only)
static double evaluate(const Base *b, Lora *lora, Acts *a, const Dataset *d, int *tokens, int *labels) {
    int training = lora->training;
    lora->training = 0; // (no dropout)
    int *order = (int *)mallocCheck((size_t)d->n * sizeof(int));
    for (int i = 0; i < d->n; i++) { order[i] = i; }
    double sum = 0.0;
    int total = 0;
    for (int first = 0; first < d->n; first += a->B) {
        fill_batch(tokens, labels, d, order, first, a->B, a->T);
        for (int r = d->n - first; r < a->B; r++) { // (rows past the end repeat earlier examples: unlabelled)
            for (int t = 0; t < a->T; t++) { labels[r * a->T + t] = -100; }
        }
        int count;
        sum += model_forward(b, lora, a, tokens, labels, &count);
        total += count;
    }
    free(order);
    lora->training = training;
    return total > 0 ? sum / total : 0.0;
}

// -B 1: the benchmark. Random tokens (every position labelled with the next one), a new
// adapter on the -T modules, -n optimizer steps (10 if 0) of -k micro-batches of -b x -t;
// tokens/s over the steps after the first (which allocates and warms up), and the peak
// memory (print_peak_memory). What dev/bench_lora.sh sets beside PyTorch + PEFT.
static void run_bench(const Base *b, const Options *o) {
    int B = o->B, T = o->T, N = B * T, steps = o->steps > 0 ? o->steps : 10;
    Lora lora;
    lora_create(&lora, b, o->r, o->alpha, o->rslora, o->targets, o->seed);
    lora.dropout = o->dropout;
    lora.training = 1;
    lora_to_device(&lora);
    Acts a;
    acts_allocate(&a, b, &lora, B, T, o->recompute);
    printf("benchmark: %s, LoRA r=%d on %s (%d modules, %zu parameters), dropout %g; %d steps of %d x %d sequences of %d tokens%s\n",
           o->model, o->r, o->targets, lora.num_modules, lora.num_params, o->dropout, steps, o->accum, B, T,
           o->recompute ? ", activations recomputed" : "");
    print_memory(b, &lora, &a);
    int *tokens = (int *)mallocCheck((size_t)N * sizeof(int)), *labels = (int *)mallocCheck((size_t)N * sizeof(int));
    double timed = 0.0;
    Phases ph;
    memset(&ph, 0, sizeof(ph));
    ph.every = o->phase_every;
    phases_device_setup(&ph);
    for (int step = 0; step < steps; step++) {
        phases_begin(&ph, step); // (first: on the GPU a timed step waits here for the one before)
        double t0 = wall_seconds(), sum = 0.0;
        phases_enter(&ph, PHASE_UPDATE);
        lora_zero_grads(&lora);
        for (int k = 0; k < o->accum; k++) {
            phases_enter(&ph, PHASE_DATA);
            uint64_t key = rng_subkey(o->seed, 404, (uint64_t)step * 256 + (uint64_t)k);
            for (int n = 0; n < N; n++) { tokens[n] = (int)(rng_uniform_at(key, (uint64_t)n) * b->V) % b->V; }
            for (int n = 0; n < N; n++) { labels[n] = n % T == T - 1 ? -100 : tokens[n + 1]; }
            phases_enter(&ph, PHASE_FORWARD);
            int count;
            lora.dropout_key = key;
            sum += model_forward(b, &lora, &a, tokens, labels, &count);
            phases_enter(&ph, PHASE_BACKWARD);
            model_backward(b, &lora, &a, labels, 1.0f / (float)(count * o->accum));
        }
        phases_enter(&ph, PHASE_NORM);
        float norm = clip_gradients(&lora, o->clip);
        phases_enter(&ph, PHASE_UPDATE);
        adamw_update(&lora, o->lr, 0.9f, 0.999f, 1e-8f, o->weight_decay, step + 1);
        phases_end(&ph);
        double dt = wall_seconds() - t0;
        if (step > 0) { timed += dt; }
        printf("step %3d/%d | loss %.4f | norm %.3f | %.1f ms | %.0f tokens/s", step + 1, steps, sum / ((double)(T - 1) * B * o->accum),
               norm, dt * 1000.0, (double)N * o->accum / dt);
        phases_print(&ph, 1e3 * dt);
        printf("\n");
        phases_print_host(&ph);
    }
    lora_to_host(&lora); // (the end of the work)
    if (steps > 1) {
        printf("tokens/s: %.0f (steps 2-%d, %d tokens a step)\n", (double)N * o->accum * (steps - 1) / timed, steps, N * o->accum);
    }
    print_peak_memory();
    free(tokens); free(labels);
    acts_free(&a);
    lora_free(&lora);
}

// metrics.tsv: a line a step (0: before any); the ms_ columns are -P's phases, empty on the steps not timed
#define METRICS_HEADER "step\tlr\tloss\tgrad_norm\tval_loss\ttokens_per_s\tms_data\tms_forward\tms_backward\tms_norm\tms_update\n"

// --- begin shared-copy: omp-wait-policy ---
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
void set_omp_wait_policy(char **argv) {
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
// --- end shared-copy: omp-wait-policy ---

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    Options defaults = {"data/smollm2/SmolLM2-135M-Instruct.bin", NULL, "data/iso/train.jsonl", NULL, "log_lora", "all-linear", NULL, NULL, 8, 0, 4, 4,
                        128, 0, 1, 10, 50, 0, 0, 0, 0, 0, 16.0f, 0.05f, 1e-3f, 0.0f, 1.0f, 0.05f, 0.1f, 1337, 0},
            o = defaults;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0) { print_usage(&defaults); return 0; }
        if (argv[i][0] != '-' || argv[i][1] == '\0' || argv[i][2] != '\0') { usage_error("unknown argument '%s'", argv[i]); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", argv[i]); }
        const char *v = argv[i + 1], *flag = argv[i];
        switch (flag[1]) {
        case 'm': o.model = v; break;
        case 'g': o.tokenizer = v; break;
        case 'd': o.data = v; break;
        case 'E': o.eval = v; break;
        case 'o': o.out = v; break;
        case 'T': o.targets = v; break;
        case 'i': o.init = v; break;
        case 'M': o.merge = v; break;
        case 'r': o.r = (int)parse_int(flag, v, 1); break;
        case 'a': o.alpha = parse_float(flag, v); break;
        case 'R': o.rslora = (int)parse_int(flag, v, 0) != 0; break;
        case 'D': o.dropout = parse_float(flag, v); break;
        case 'b': o.B = (int)parse_int(flag, v, 1); break;
        case 'k': o.accum = (int)parse_int(flag, v, 1); break;
        case 't': o.T = (int)parse_int(flag, v, 2); break;
        case 'x': o.refuse = (int)parse_int(flag, v, 0) != 0; break;
        case 'e': o.epochs = (int)parse_int(flag, v, 1); break;
        case 'n': o.steps = (int)parse_int(flag, v, 0); break;
        case 'l': o.lr = parse_float(flag, v); break;
        case 'u': o.warmup = (int)parse_int(flag, v, 0); break;
        case 'q': o.final_frac = parse_float(flag, v); break;
        case 'w': o.weight_decay = parse_float(flag, v); break;
        case 'c': o.clip = parse_float(flag, v); break;
        case 'v': o.val_every = (int)parse_int(flag, v, 1); break;
        case 'V': o.val_frac = parse_float(flag, v); break;
        case 's': o.seed = (uint64_t)parse_int(flag, v, 0); break;
        case 'S': o.save_every = (int)parse_int(flag, v, 0); break;
        case 'y': o.resume = (int)parse_int(flag, v, 0) != 0; break;
        case 'A': o.recompute = (int)parse_int(flag, v, 0) != 0; break;
        case 'B': o.bench = (int)parse_int(flag, v, 0) != 0; break;
        case 'P': o.phase_every = (int)parse_int(flag, v, 0); break;
        case 'G': gpu_budget_flag(flag, v); break;
        default: usage_error("unknown flag %s", flag);
        }
    }
    if (!(o.alpha > 0.0f)) { usage_error("-a: alpha must be above 0, got '%s'", "0"); }
    if (o.merge != NULL && o.init == NULL) { usage_error("-M %s: merges an adapter: name it with -i", o.merge); }
    if (o.dropout >= 1.0f) { usage_error("-D: the dropout probability must be below 1%s", ""); }
    if (o.accum > 256) { usage_error("-k: at most 256 micro-batches a step, got more%s", ""); }
    if (o.val_frac >= 1.0f) { usage_error("-V: the validation fraction must be below 1%s", ""); }

    Base b;
    base_load(&b, o.model);
    base_to_device(&b);
    if (o.T > b.maxT) {
        char msg[160];
        snprintf(msg, sizeof(msg), "-t %d: longer than the model's context (%d)", o.T, b.maxT);
        usage_error("%s", msg);
    }
    if (o.bench) {
        run_bench(&b, &o);
        base_free(&b);
        return 0;
    }
    // the tokenizer: -g, else the one ./convert wrote beside the model, else GPT-2's
    Tokenizer tok;
    char beside[MAX_PATH_LEN] = "";
    const char *tok_path = o.tokenizer;
    size_t model_len = strlen(o.model);
    if (tok_path == NULL && model_len > 4 && strcmp(o.model + model_len - 4, ".bin") == 0 && model_len < sizeof(beside) - 16) {
        snprintf(beside, sizeof(beside), "%.*s_tokenizer.bin", (int)(model_len - 4), o.model);
        if (access(beside, R_OK) == 0) { tok_path = beside; }
    }
    if (tok_path == NULL && b.llama) {
        die_file(o.model, "./convert writes NAME_tokenizer.bin beside the model; -g names another", "a Llama-family model without its tokenizer");
    }
    tokenizer_init(&tok, tok_path != NULL ? tok_path : "data/gpt2");
    if (tok.vocab_size > b.V) { die_file(o.model, "-g names the model's tokenizer", "%d tokens, its tokenizer %d: they do not belong together", b.V, tok.vocab_size); }

    Dataset train, val;
    read_examples(&train, &val, o.data, &tok, o.T, o.refuse, o.val_frac, o.seed);
    if (o.eval != NULL) { check_leakage(o.data, o.eval); }
    int longest = 0; // T: as long as the longest example needs, at most -t
    for (int i = 0; i < train.n + val.n; i++) { longest = train.examples[i].len - 1 > longest ? train.examples[i].len - 1 : longest; }
    int T = longest < o.T ? longest : o.T;
    int per_step = o.B * o.accum, steps = o.steps > 0 ? o.steps : o.epochs * ((train.n + per_step - 1) / per_step);

    // the adapter: from the newest checkpoint (-y 1), from -i, or new
    int resume_step = o.resume ? find_latest_checkpoint(o.out) : -1;
    if (o.resume && resume_step < 0) {
        die_file(o.out, "a run with -S N writes them; -y 1 resumes it with the same flags", "-y 1, but no checkpoint here (state_N.bin with step_N/)");
    }
    if (!o.resume && o.save_every > 0 && find_latest_checkpoint(o.out) >= 0) {
        die_file(o.out, "resume them with -y 1, or pick another -o", "already holds checkpoints (the newest: step %d); not writing over them",
                 find_latest_checkpoint(o.out));
    }
    Lora lora;
    char from[MAX_PATH_LEN];
    LoraShape shape = base_shape(&b);
    if (resume_step >= 0) {
        format_path(from, sizeof(from), "%s/step_%06d", o.out, resume_step);
        lora_load(&lora, &shape, from, 1);
        o.r = lora.r; o.alpha = lora.alpha; o.rslora = lora.rslora; o.targets = "from the checkpoint";
    } else if (o.init != NULL) {
        lora_load(&lora, &shape, o.init, 1);
        o.r = lora.r; o.alpha = lora.alpha; o.rslora = lora.rslora; o.targets = "from -i";
    } else {
        lora_create(&lora, &b, o.r, o.alpha, o.rslora, o.targets, o.seed);
    }
    lora.dropout = o.dropout;
    lora_to_device(&lora);
    size_t base_params = b.llama ? b.llama_weights.num_parameters : b.gpt2.num_parameters;
    Acts a;
    acts_allocate(&a, &b, &lora, o.B, T, o.recompute);
    printf("model: %s: %s, %.1fM parameters, frozen\n", o.model, b.llama ? "Llama family" : "GPT-2", base_params / 1e6);
    printf("LoRA: r=%d, alpha %g (scale %.4g%s), dropout %g, %d modules (%s): %zu trainable parameters, %.3f%% of the model's\n",
           o.r, o.alpha, lora.scale, o.rslora ? ", rsLoRA" : "", o.dropout, lora.num_modules, o.targets, lora.num_params,
           100.0 * lora.num_params / base_params);
    print_memory(&b, &lora, &a);
    size_t N = (size_t)o.B * T;

    if (o.merge != NULL) { // -M: merge, check, write
        int *tokens = (int *)mallocCheck(N * sizeof(int)), *labels = (int *)mallocCheck(N * sizeof(int));
        double adapted = evaluate(&b, &lora, &a, &val, tokens, labels);
        Lora none = lora;
        none.num_modules = 0;
        merge_adapter(&b, &lora);
        base_to_device(&b);
        double merged = evaluate(&b, &none, &a, &val, tokens, labels);
        printf("validation loss: %.6f with the adapter, %.6f merged\n", adapted, merged);
        int bf16 = b.llama ? b.llama_weights.from_bf16 : b.gpt2.from_bf16;
        if (b.llama) { llama_save(&b.llama_weights, o.merge, bf16); } else { gpt2_save_checkpoint(&b.gpt2, o.merge, bf16); }
        size_t merge_len = strlen(o.merge);
        if (tok_path != NULL && merge_len > 4 && strcmp(o.merge + merge_len - 4, ".bin") == 0) { // its tokenizer beside it, as ./convert does
            char tok_out[MAX_PATH_LEN];
            format_path(tok_out, sizeof(tok_out), "%.*s_tokenizer.bin", (int)(merge_len - 4), o.merge);
            size_t len;
            uint8_t *bytes = read_whole_file(tok_path, &len, NULL);
            const void *bufs[1] = {bytes};
            write_file_atomic(tok_out, bufs, &len, 1);
            free(bytes);
            printf("wrote %s (%s, the adapter merged%s) and %s\n", o.merge, b.llama ? "Llama-family model file" : "GPT-2 checkpoint",
                   bf16 ? ", rounded to bf16 as the base was" : "", tok_out);
        } else {
            printf("wrote %s (%s, the adapter merged%s)\n", o.merge, b.llama ? "Llama-family model file" : "GPT-2 checkpoint",
                   bf16 ? ", rounded to bf16 as the base was" : "");
        }
        free(tokens); free(labels);
        acts_free(&a); lora_free(&lora); tokenizer_free(&tok); base_free(&b);
        return 0;
    }
    printf("training: %d steps of %d x %d sequences (%.2f epochs of %d records), lr %g, warm-up %d, weight decay %g, clip %g\n", steps,
           o.accum, o.B, (double)steps * per_step / train.n, train.n, o.lr, o.warmup, o.weight_decay, o.clip);
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) { die_file(o.out, NULL, "cannot make the folder: %s", strerror(errno)); }
    char path[MAX_PATH_LEN];
    path_concat(path, o.out, "/adapter_model.safetensors");
    if (resume_step < 0 && access(path, F_OK) == 0) { // (a new run would write its metrics and adapter over a finished one's)
        die_file(o.out, "pick another -o, or remove the folder's files first", "already holds an adapter (adapter_model.safetensors); not writing over it");
    }
    path_concat(path, o.out, "/metrics.tsv");
    int *tokens = (int *)mallocCheck(N * sizeof(int)), *labels = (int *)mallocCheck(N * sizeof(int));
    int *order = (int *)mallocCheck((size_t)train.n * sizeof(int));
    for (int i = 0; i < train.n; i++) { order[i] = i; }
    Progress pr = {0, 0, train.n}; // (the cursor past the end: the first step starts an epoch, with a new order)
    double val_loss = 0.0;
    FILE *log;
    if (resume_step >= 0) {
        checkpoint_load(o.out, resume_step, &lora, &pr, order, train.n, o.B, o.accum, T, steps, o.seed);
        lora_to_device(&lora); // (AdamW's moments, read just now)
        log_truncate_after(path, "%d", resume_step); // (the lines the stopped run wrote after its checkpoint go,
        size_t len;                                  // and the header, which has no step: written again)
        uint8_t *kept = read_whole_file(path, &len, NULL);
        const void *bufs[2] = {METRICS_HEADER, kept};
        size_t sizes[2] = {strlen(METRICS_HEADER), len};
        write_file_atomic(path, bufs, sizes, 2);
        free(kept);
        log = fopenCheck(path, "a");
        printf("resuming at step %d of %d from %s\n", pr.step, steps, from);
    } else {
        log = fopenCheck(path, "w");
        fputs(METRICS_HEADER, log);
        val_loss = evaluate(&b, &lora, &a, &val, tokens, labels);
        printf("step %5d/%d | val loss %.4f (the %s)\n", 0, steps, val_loss, o.init != NULL ? "start adapter" : "base model");
        fprintf(log, "0\t\t\t\t%.6f\t\t\t\t\t\t\n", val_loss);
    }
    int cursor = pr.cursor, epoch = pr.epoch;
    double start = wall_seconds();
    int first_step = pr.step; // (a resumed run's ETA counts the steps it runs)
    Phases ph;
    memset(&ph, 0, sizeof(ph));
    ph.every = o.phase_every;
    phases_device_setup(&ph);
    for (int step = pr.step; step < steps; step++) {
        phases_begin(&ph, step); // (first: on the GPU a timed step waits here for the one before)
        double t0 = wall_seconds();
        phases_enter(&ph, PHASE_UPDATE);
        float lr = get_learning_rate(step, o.lr, o.warmup, steps, o.final_frac);
        lora_zero_grads(&lora);
        // the step's micro-batches first, to count their labelled tokens: the loss is their mean
        phases_enter(&ph, PHASE_DATA);
        int firsts[256], count = 0;
        for (int k = 0; k < o.accum && k < 256; k++) {
            if (cursor + o.B > train.n) { // a new epoch: a new order
                for (int i = train.n - 1; i > 0; i--) {
                    int j = (int)(rng_uniform_at(rng_subkey(o.seed, 202, (uint64_t)epoch), (uint64_t)i) * (i + 1));
                    int t = order[i]; order[i] = order[j]; order[j] = t;
                }
                cursor = 0;
                epoch++;
            }
            firsts[k] = cursor;
            cursor += o.B;
            count += fill_batch(tokens, labels, &train, order, firsts[k], o.B, T);
        }
        double sum = 0.0;
        for (int k = 0; k < o.accum && k < 256; k++) {
            int c;
            phases_enter(&ph, PHASE_DATA);
            lora.training = 1;
            lora.dropout_key = rng_subkey(o.seed, 303, (uint64_t)step * 256 + (uint64_t)k);
            fill_batch(tokens, labels, &train, order, firsts[k], o.B, T);
            phases_enter(&ph, PHASE_FORWARD);
            sum += model_forward(&b, &lora, &a, tokens, labels, &c);
            phases_enter(&ph, PHASE_BACKWARD);
            model_backward(&b, &lora, &a, labels, 1.0f / (float)(count > 0 ? count : 1));
        }
        phases_enter(&ph, PHASE_NORM);
        float loss = (float)(sum / (count > 0 ? count : 1)), norm = clip_gradients(&lora, o.clip);
        phases_enter(&ph, PHASE_UPDATE);
        adamw_update(&lora, lr, 0.9f, 0.999f, 1e-8f, o.weight_decay, step + 1);
        phases_end(&ph); // (on the GPU: waits for the step's kernels, so that dt below includes them)
        double dt = wall_seconds() - t0, elapsed = wall_seconds() - start;
        int last = step + 1 == steps, validate = (step + 1) % o.val_every == 0 || last;
        if (validate) { val_loss = evaluate(&b, &lora, &a, &val, tokens, labels); }
        printf("step %5d/%d | loss %.4f | norm %.3f | lr %.2e | %.0f tokens/s", step + 1, steps, loss, norm, lr, N * o.accum / dt);
        if (validate) { printf(" | val loss %.4f", val_loss); }
        char eta[32];
        format_eta(eta, sizeof(eta), elapsed, step + 1 - first_step, steps - first_step);
        printf(" | %s", eta);
        phases_print(&ph, 1e3 * dt);
        printf("\n");
        phases_print_host(&ph);
        fflush(stdout);
        fprintf(log, "%d\t%g\t%.6f\t%.6f\t", step + 1, lr, loss, norm);
        if (validate) { fprintf(log, "%.6f", val_loss); }
        fprintf(log, "\t%.1f", N * o.accum / dt);
        for (int k = 0; k < NUM_PHASES; k++) {
            if (ph.on) { fprintf(log, "\t%.3f", ph.ms[k]); } else { fprintf(log, "\t"); }
        }
        fprintf(log, "\n");
        fflush(log);
        if (o.save_every > 0 && ((step + 1) % o.save_every == 0 || last)) {
            Progress now = {step + 1, epoch, cursor};
            lora_to_host(&lora);
            checkpoint_save(o.out, &lora, &b, o.model, &now, order, train.n, o.B, o.accum, T, steps, o.seed);
            printf("checkpoint: %s/step_%06d/ and state_%06d.bin\n", o.out, step + 1, step + 1);
        }
    }
    fcloseCheck(log);
    lora_to_host(&lora);
    lora_save(&lora, &b, o.out, o.model);
    printf("wrote %s/adapter_config.json and adapter_model.safetensors (PEFT's LoRA adapter), %s/metrics.tsv\n", o.out, o.out);
    free(tokens); free(labels); free(order);
    for (int i = 0; i < train.n + val.n; i++) { free(train.examples[i].tokens); }
    free(train.examples);
    acts_free(&a);
    lora_free(&lora);
    tokenizer_free(&tok);
    base_free(&b);
    return 0;
}
// --- end shared-copy: finetune-main ---
#endif

// ----------------------------------------------------------------------------
// the prompt's tokenizer: byte-level BPE (GPT-2's, SmolLM2's, Llama 3's, Qwen2's), the same code as data/tokenizer.c

// --- begin shared-copy: unicode-tables ---
#define UNICODE_TABLES_VERSION "16.0.0"

// \p{L}: Lu Ll Lt Lm Lo: 677 ranges
static const uint32_t unicode_letter_ranges[][2] = {
    {0x41,0x5A}, {0x61,0x7A}, {0xAA,0xAA}, {0xB5,0xB5}, {0xBA,0xBA}, {0xC0,0xD6},
    {0xD8,0xF6}, {0xF8,0x2C1}, {0x2C6,0x2D1}, {0x2E0,0x2E4}, {0x2EC,0x2EC}, {0x2EE,0x2EE},
    {0x370,0x374}, {0x376,0x377}, {0x37A,0x37D}, {0x37F,0x37F}, {0x386,0x386}, {0x388,0x38A},
    {0x38C,0x38C}, {0x38E,0x3A1}, {0x3A3,0x3F5}, {0x3F7,0x481}, {0x48A,0x52F}, {0x531,0x556},
    {0x559,0x559}, {0x560,0x588}, {0x5D0,0x5EA}, {0x5EF,0x5F2}, {0x620,0x64A}, {0x66E,0x66F},
    {0x671,0x6D3}, {0x6D5,0x6D5}, {0x6E5,0x6E6}, {0x6EE,0x6EF}, {0x6FA,0x6FC}, {0x6FF,0x6FF},
    {0x710,0x710}, {0x712,0x72F}, {0x74D,0x7A5}, {0x7B1,0x7B1}, {0x7CA,0x7EA}, {0x7F4,0x7F5},
    {0x7FA,0x7FA}, {0x800,0x815}, {0x81A,0x81A}, {0x824,0x824}, {0x828,0x828}, {0x840,0x858},
    {0x860,0x86A}, {0x870,0x887}, {0x889,0x88E}, {0x8A0,0x8C9}, {0x904,0x939}, {0x93D,0x93D},
    {0x950,0x950}, {0x958,0x961}, {0x971,0x980}, {0x985,0x98C}, {0x98F,0x990}, {0x993,0x9A8},
    {0x9AA,0x9B0}, {0x9B2,0x9B2}, {0x9B6,0x9B9}, {0x9BD,0x9BD}, {0x9CE,0x9CE}, {0x9DC,0x9DD},
    {0x9DF,0x9E1}, {0x9F0,0x9F1}, {0x9FC,0x9FC}, {0xA05,0xA0A}, {0xA0F,0xA10}, {0xA13,0xA28},
    {0xA2A,0xA30}, {0xA32,0xA33}, {0xA35,0xA36}, {0xA38,0xA39}, {0xA59,0xA5C}, {0xA5E,0xA5E},
    {0xA72,0xA74}, {0xA85,0xA8D}, {0xA8F,0xA91}, {0xA93,0xAA8}, {0xAAA,0xAB0}, {0xAB2,0xAB3},
    {0xAB5,0xAB9}, {0xABD,0xABD}, {0xAD0,0xAD0}, {0xAE0,0xAE1}, {0xAF9,0xAF9}, {0xB05,0xB0C},
    {0xB0F,0xB10}, {0xB13,0xB28}, {0xB2A,0xB30}, {0xB32,0xB33}, {0xB35,0xB39}, {0xB3D,0xB3D},
    {0xB5C,0xB5D}, {0xB5F,0xB61}, {0xB71,0xB71}, {0xB83,0xB83}, {0xB85,0xB8A}, {0xB8E,0xB90},
    {0xB92,0xB95}, {0xB99,0xB9A}, {0xB9C,0xB9C}, {0xB9E,0xB9F}, {0xBA3,0xBA4}, {0xBA8,0xBAA},
    {0xBAE,0xBB9}, {0xBD0,0xBD0}, {0xC05,0xC0C}, {0xC0E,0xC10}, {0xC12,0xC28}, {0xC2A,0xC39},
    {0xC3D,0xC3D}, {0xC58,0xC5A}, {0xC5D,0xC5D}, {0xC60,0xC61}, {0xC80,0xC80}, {0xC85,0xC8C},
    {0xC8E,0xC90}, {0xC92,0xCA8}, {0xCAA,0xCB3}, {0xCB5,0xCB9}, {0xCBD,0xCBD}, {0xCDD,0xCDE},
    {0xCE0,0xCE1}, {0xCF1,0xCF2}, {0xD04,0xD0C}, {0xD0E,0xD10}, {0xD12,0xD3A}, {0xD3D,0xD3D},
    {0xD4E,0xD4E}, {0xD54,0xD56}, {0xD5F,0xD61}, {0xD7A,0xD7F}, {0xD85,0xD96}, {0xD9A,0xDB1},
    {0xDB3,0xDBB}, {0xDBD,0xDBD}, {0xDC0,0xDC6}, {0xE01,0xE30}, {0xE32,0xE33}, {0xE40,0xE46},
    {0xE81,0xE82}, {0xE84,0xE84}, {0xE86,0xE8A}, {0xE8C,0xEA3}, {0xEA5,0xEA5}, {0xEA7,0xEB0},
    {0xEB2,0xEB3}, {0xEBD,0xEBD}, {0xEC0,0xEC4}, {0xEC6,0xEC6}, {0xEDC,0xEDF}, {0xF00,0xF00},
    {0xF40,0xF47}, {0xF49,0xF6C}, {0xF88,0xF8C}, {0x1000,0x102A}, {0x103F,0x103F}, {0x1050,0x1055},
    {0x105A,0x105D}, {0x1061,0x1061}, {0x1065,0x1066}, {0x106E,0x1070}, {0x1075,0x1081}, {0x108E,0x108E},
    {0x10A0,0x10C5}, {0x10C7,0x10C7}, {0x10CD,0x10CD}, {0x10D0,0x10FA}, {0x10FC,0x1248}, {0x124A,0x124D},
    {0x1250,0x1256}, {0x1258,0x1258}, {0x125A,0x125D}, {0x1260,0x1288}, {0x128A,0x128D}, {0x1290,0x12B0},
    {0x12B2,0x12B5}, {0x12B8,0x12BE}, {0x12C0,0x12C0}, {0x12C2,0x12C5}, {0x12C8,0x12D6}, {0x12D8,0x1310},
    {0x1312,0x1315}, {0x1318,0x135A}, {0x1380,0x138F}, {0x13A0,0x13F5}, {0x13F8,0x13FD}, {0x1401,0x166C},
    {0x166F,0x167F}, {0x1681,0x169A}, {0x16A0,0x16EA}, {0x16F1,0x16F8}, {0x1700,0x1711}, {0x171F,0x1731},
    {0x1740,0x1751}, {0x1760,0x176C}, {0x176E,0x1770}, {0x1780,0x17B3}, {0x17D7,0x17D7}, {0x17DC,0x17DC},
    {0x1820,0x1878}, {0x1880,0x1884}, {0x1887,0x18A8}, {0x18AA,0x18AA}, {0x18B0,0x18F5}, {0x1900,0x191E},
    {0x1950,0x196D}, {0x1970,0x1974}, {0x1980,0x19AB}, {0x19B0,0x19C9}, {0x1A00,0x1A16}, {0x1A20,0x1A54},
    {0x1AA7,0x1AA7}, {0x1B05,0x1B33}, {0x1B45,0x1B4C}, {0x1B83,0x1BA0}, {0x1BAE,0x1BAF}, {0x1BBA,0x1BE5},
    {0x1C00,0x1C23}, {0x1C4D,0x1C4F}, {0x1C5A,0x1C7D}, {0x1C80,0x1C8A}, {0x1C90,0x1CBA}, {0x1CBD,0x1CBF},
    {0x1CE9,0x1CEC}, {0x1CEE,0x1CF3}, {0x1CF5,0x1CF6}, {0x1CFA,0x1CFA}, {0x1D00,0x1DBF}, {0x1E00,0x1F15},
    {0x1F18,0x1F1D}, {0x1F20,0x1F45}, {0x1F48,0x1F4D}, {0x1F50,0x1F57}, {0x1F59,0x1F59}, {0x1F5B,0x1F5B},
    {0x1F5D,0x1F5D}, {0x1F5F,0x1F7D}, {0x1F80,0x1FB4}, {0x1FB6,0x1FBC}, {0x1FBE,0x1FBE}, {0x1FC2,0x1FC4},
    {0x1FC6,0x1FCC}, {0x1FD0,0x1FD3}, {0x1FD6,0x1FDB}, {0x1FE0,0x1FEC}, {0x1FF2,0x1FF4}, {0x1FF6,0x1FFC},
    {0x2071,0x2071}, {0x207F,0x207F}, {0x2090,0x209C}, {0x2102,0x2102}, {0x2107,0x2107}, {0x210A,0x2113},
    {0x2115,0x2115}, {0x2119,0x211D}, {0x2124,0x2124}, {0x2126,0x2126}, {0x2128,0x2128}, {0x212A,0x212D},
    {0x212F,0x2139}, {0x213C,0x213F}, {0x2145,0x2149}, {0x214E,0x214E}, {0x2183,0x2184}, {0x2C00,0x2CE4},
    {0x2CEB,0x2CEE}, {0x2CF2,0x2CF3}, {0x2D00,0x2D25}, {0x2D27,0x2D27}, {0x2D2D,0x2D2D}, {0x2D30,0x2D67},
    {0x2D6F,0x2D6F}, {0x2D80,0x2D96}, {0x2DA0,0x2DA6}, {0x2DA8,0x2DAE}, {0x2DB0,0x2DB6}, {0x2DB8,0x2DBE},
    {0x2DC0,0x2DC6}, {0x2DC8,0x2DCE}, {0x2DD0,0x2DD6}, {0x2DD8,0x2DDE}, {0x2E2F,0x2E2F}, {0x3005,0x3006},
    {0x3031,0x3035}, {0x303B,0x303C}, {0x3041,0x3096}, {0x309D,0x309F}, {0x30A1,0x30FA}, {0x30FC,0x30FF},
    {0x3105,0x312F}, {0x3131,0x318E}, {0x31A0,0x31BF}, {0x31F0,0x31FF}, {0x3400,0x4DBF}, {0x4E00,0xA48C},
    {0xA4D0,0xA4FD}, {0xA500,0xA60C}, {0xA610,0xA61F}, {0xA62A,0xA62B}, {0xA640,0xA66E}, {0xA67F,0xA69D},
    {0xA6A0,0xA6E5}, {0xA717,0xA71F}, {0xA722,0xA788}, {0xA78B,0xA7CD}, {0xA7D0,0xA7D1}, {0xA7D3,0xA7D3},
    {0xA7D5,0xA7DC}, {0xA7F2,0xA801}, {0xA803,0xA805}, {0xA807,0xA80A}, {0xA80C,0xA822}, {0xA840,0xA873},
    {0xA882,0xA8B3}, {0xA8F2,0xA8F7}, {0xA8FB,0xA8FB}, {0xA8FD,0xA8FE}, {0xA90A,0xA925}, {0xA930,0xA946},
    {0xA960,0xA97C}, {0xA984,0xA9B2}, {0xA9CF,0xA9CF}, {0xA9E0,0xA9E4}, {0xA9E6,0xA9EF}, {0xA9FA,0xA9FE},
    {0xAA00,0xAA28}, {0xAA40,0xAA42}, {0xAA44,0xAA4B}, {0xAA60,0xAA76}, {0xAA7A,0xAA7A}, {0xAA7E,0xAAAF},
    {0xAAB1,0xAAB1}, {0xAAB5,0xAAB6}, {0xAAB9,0xAABD}, {0xAAC0,0xAAC0}, {0xAAC2,0xAAC2}, {0xAADB,0xAADD},
    {0xAAE0,0xAAEA}, {0xAAF2,0xAAF4}, {0xAB01,0xAB06}, {0xAB09,0xAB0E}, {0xAB11,0xAB16}, {0xAB20,0xAB26},
    {0xAB28,0xAB2E}, {0xAB30,0xAB5A}, {0xAB5C,0xAB69}, {0xAB70,0xABE2}, {0xAC00,0xD7A3}, {0xD7B0,0xD7C6},
    {0xD7CB,0xD7FB}, {0xF900,0xFA6D}, {0xFA70,0xFAD9}, {0xFB00,0xFB06}, {0xFB13,0xFB17}, {0xFB1D,0xFB1D},
    {0xFB1F,0xFB28}, {0xFB2A,0xFB36}, {0xFB38,0xFB3C}, {0xFB3E,0xFB3E}, {0xFB40,0xFB41}, {0xFB43,0xFB44},
    {0xFB46,0xFBB1}, {0xFBD3,0xFD3D}, {0xFD50,0xFD8F}, {0xFD92,0xFDC7}, {0xFDF0,0xFDFB}, {0xFE70,0xFE74},
    {0xFE76,0xFEFC}, {0xFF21,0xFF3A}, {0xFF41,0xFF5A}, {0xFF66,0xFFBE}, {0xFFC2,0xFFC7}, {0xFFCA,0xFFCF},
    {0xFFD2,0xFFD7}, {0xFFDA,0xFFDC}, {0x10000,0x1000B}, {0x1000D,0x10026}, {0x10028,0x1003A}, {0x1003C,0x1003D},
    {0x1003F,0x1004D}, {0x10050,0x1005D}, {0x10080,0x100FA}, {0x10280,0x1029C}, {0x102A0,0x102D0}, {0x10300,0x1031F},
    {0x1032D,0x10340}, {0x10342,0x10349}, {0x10350,0x10375}, {0x10380,0x1039D}, {0x103A0,0x103C3}, {0x103C8,0x103CF},
    {0x10400,0x1049D}, {0x104B0,0x104D3}, {0x104D8,0x104FB}, {0x10500,0x10527}, {0x10530,0x10563}, {0x10570,0x1057A},
    {0x1057C,0x1058A}, {0x1058C,0x10592}, {0x10594,0x10595}, {0x10597,0x105A1}, {0x105A3,0x105B1}, {0x105B3,0x105B9},
    {0x105BB,0x105BC}, {0x105C0,0x105F3}, {0x10600,0x10736}, {0x10740,0x10755}, {0x10760,0x10767}, {0x10780,0x10785},
    {0x10787,0x107B0}, {0x107B2,0x107BA}, {0x10800,0x10805}, {0x10808,0x10808}, {0x1080A,0x10835}, {0x10837,0x10838},
    {0x1083C,0x1083C}, {0x1083F,0x10855}, {0x10860,0x10876}, {0x10880,0x1089E}, {0x108E0,0x108F2}, {0x108F4,0x108F5},
    {0x10900,0x10915}, {0x10920,0x10939}, {0x10980,0x109B7}, {0x109BE,0x109BF}, {0x10A00,0x10A00}, {0x10A10,0x10A13},
    {0x10A15,0x10A17}, {0x10A19,0x10A35}, {0x10A60,0x10A7C}, {0x10A80,0x10A9C}, {0x10AC0,0x10AC7}, {0x10AC9,0x10AE4},
    {0x10B00,0x10B35}, {0x10B40,0x10B55}, {0x10B60,0x10B72}, {0x10B80,0x10B91}, {0x10C00,0x10C48}, {0x10C80,0x10CB2},
    {0x10CC0,0x10CF2}, {0x10D00,0x10D23}, {0x10D4A,0x10D65}, {0x10D6F,0x10D85}, {0x10E80,0x10EA9}, {0x10EB0,0x10EB1},
    {0x10EC2,0x10EC4}, {0x10F00,0x10F1C}, {0x10F27,0x10F27}, {0x10F30,0x10F45}, {0x10F70,0x10F81}, {0x10FB0,0x10FC4},
    {0x10FE0,0x10FF6}, {0x11003,0x11037}, {0x11071,0x11072}, {0x11075,0x11075}, {0x11083,0x110AF}, {0x110D0,0x110E8},
    {0x11103,0x11126}, {0x11144,0x11144}, {0x11147,0x11147}, {0x11150,0x11172}, {0x11176,0x11176}, {0x11183,0x111B2},
    {0x111C1,0x111C4}, {0x111DA,0x111DA}, {0x111DC,0x111DC}, {0x11200,0x11211}, {0x11213,0x1122B}, {0x1123F,0x11240},
    {0x11280,0x11286}, {0x11288,0x11288}, {0x1128A,0x1128D}, {0x1128F,0x1129D}, {0x1129F,0x112A8}, {0x112B0,0x112DE},
    {0x11305,0x1130C}, {0x1130F,0x11310}, {0x11313,0x11328}, {0x1132A,0x11330}, {0x11332,0x11333}, {0x11335,0x11339},
    {0x1133D,0x1133D}, {0x11350,0x11350}, {0x1135D,0x11361}, {0x11380,0x11389}, {0x1138B,0x1138B}, {0x1138E,0x1138E},
    {0x11390,0x113B5}, {0x113B7,0x113B7}, {0x113D1,0x113D1}, {0x113D3,0x113D3}, {0x11400,0x11434}, {0x11447,0x1144A},
    {0x1145F,0x11461}, {0x11480,0x114AF}, {0x114C4,0x114C5}, {0x114C7,0x114C7}, {0x11580,0x115AE}, {0x115D8,0x115DB},
    {0x11600,0x1162F}, {0x11644,0x11644}, {0x11680,0x116AA}, {0x116B8,0x116B8}, {0x11700,0x1171A}, {0x11740,0x11746},
    {0x11800,0x1182B}, {0x118A0,0x118DF}, {0x118FF,0x11906}, {0x11909,0x11909}, {0x1190C,0x11913}, {0x11915,0x11916},
    {0x11918,0x1192F}, {0x1193F,0x1193F}, {0x11941,0x11941}, {0x119A0,0x119A7}, {0x119AA,0x119D0}, {0x119E1,0x119E1},
    {0x119E3,0x119E3}, {0x11A00,0x11A00}, {0x11A0B,0x11A32}, {0x11A3A,0x11A3A}, {0x11A50,0x11A50}, {0x11A5C,0x11A89},
    {0x11A9D,0x11A9D}, {0x11AB0,0x11AF8}, {0x11BC0,0x11BE0}, {0x11C00,0x11C08}, {0x11C0A,0x11C2E}, {0x11C40,0x11C40},
    {0x11C72,0x11C8F}, {0x11D00,0x11D06}, {0x11D08,0x11D09}, {0x11D0B,0x11D30}, {0x11D46,0x11D46}, {0x11D60,0x11D65},
    {0x11D67,0x11D68}, {0x11D6A,0x11D89}, {0x11D98,0x11D98}, {0x11EE0,0x11EF2}, {0x11F02,0x11F02}, {0x11F04,0x11F10},
    {0x11F12,0x11F33}, {0x11FB0,0x11FB0}, {0x12000,0x12399}, {0x12480,0x12543}, {0x12F90,0x12FF0}, {0x13000,0x1342F},
    {0x13441,0x13446}, {0x13460,0x143FA}, {0x14400,0x14646}, {0x16100,0x1611D}, {0x16800,0x16A38}, {0x16A40,0x16A5E},
    {0x16A70,0x16ABE}, {0x16AD0,0x16AED}, {0x16B00,0x16B2F}, {0x16B40,0x16B43}, {0x16B63,0x16B77}, {0x16B7D,0x16B8F},
    {0x16D40,0x16D6C}, {0x16E40,0x16E7F}, {0x16F00,0x16F4A}, {0x16F50,0x16F50}, {0x16F93,0x16F9F}, {0x16FE0,0x16FE1},
    {0x16FE3,0x16FE3}, {0x17000,0x187F7}, {0x18800,0x18CD5}, {0x18CFF,0x18D08}, {0x1AFF0,0x1AFF3}, {0x1AFF5,0x1AFFB},
    {0x1AFFD,0x1AFFE}, {0x1B000,0x1B122}, {0x1B132,0x1B132}, {0x1B150,0x1B152}, {0x1B155,0x1B155}, {0x1B164,0x1B167},
    {0x1B170,0x1B2FB}, {0x1BC00,0x1BC6A}, {0x1BC70,0x1BC7C}, {0x1BC80,0x1BC88}, {0x1BC90,0x1BC99}, {0x1D400,0x1D454},
    {0x1D456,0x1D49C}, {0x1D49E,0x1D49F}, {0x1D4A2,0x1D4A2}, {0x1D4A5,0x1D4A6}, {0x1D4A9,0x1D4AC}, {0x1D4AE,0x1D4B9},
    {0x1D4BB,0x1D4BB}, {0x1D4BD,0x1D4C3}, {0x1D4C5,0x1D505}, {0x1D507,0x1D50A}, {0x1D50D,0x1D514}, {0x1D516,0x1D51C},
    {0x1D51E,0x1D539}, {0x1D53B,0x1D53E}, {0x1D540,0x1D544}, {0x1D546,0x1D546}, {0x1D54A,0x1D550}, {0x1D552,0x1D6A5},
    {0x1D6A8,0x1D6C0}, {0x1D6C2,0x1D6DA}, {0x1D6DC,0x1D6FA}, {0x1D6FC,0x1D714}, {0x1D716,0x1D734}, {0x1D736,0x1D74E},
    {0x1D750,0x1D76E}, {0x1D770,0x1D788}, {0x1D78A,0x1D7A8}, {0x1D7AA,0x1D7C2}, {0x1D7C4,0x1D7CB}, {0x1DF00,0x1DF1E},
    {0x1DF25,0x1DF2A}, {0x1E030,0x1E06D}, {0x1E100,0x1E12C}, {0x1E137,0x1E13D}, {0x1E14E,0x1E14E}, {0x1E290,0x1E2AD},
    {0x1E2C0,0x1E2EB}, {0x1E4D0,0x1E4EB}, {0x1E5D0,0x1E5ED}, {0x1E5F0,0x1E5F0}, {0x1E7E0,0x1E7E6}, {0x1E7E8,0x1E7EB},
    {0x1E7ED,0x1E7EE}, {0x1E7F0,0x1E7FE}, {0x1E800,0x1E8C4}, {0x1E900,0x1E943}, {0x1E94B,0x1E94B}, {0x1EE00,0x1EE03},
    {0x1EE05,0x1EE1F}, {0x1EE21,0x1EE22}, {0x1EE24,0x1EE24}, {0x1EE27,0x1EE27}, {0x1EE29,0x1EE32}, {0x1EE34,0x1EE37},
    {0x1EE39,0x1EE39}, {0x1EE3B,0x1EE3B}, {0x1EE42,0x1EE42}, {0x1EE47,0x1EE47}, {0x1EE49,0x1EE49}, {0x1EE4B,0x1EE4B},
    {0x1EE4D,0x1EE4F}, {0x1EE51,0x1EE52}, {0x1EE54,0x1EE54}, {0x1EE57,0x1EE57}, {0x1EE59,0x1EE59}, {0x1EE5B,0x1EE5B},
    {0x1EE5D,0x1EE5D}, {0x1EE5F,0x1EE5F}, {0x1EE61,0x1EE62}, {0x1EE64,0x1EE64}, {0x1EE67,0x1EE6A}, {0x1EE6C,0x1EE72},
    {0x1EE74,0x1EE77}, {0x1EE79,0x1EE7C}, {0x1EE7E,0x1EE7E}, {0x1EE80,0x1EE89}, {0x1EE8B,0x1EE9B}, {0x1EEA1,0x1EEA3},
    {0x1EEA5,0x1EEA9}, {0x1EEAB,0x1EEBB}, {0x20000,0x2A6DF}, {0x2A700,0x2B739}, {0x2B740,0x2B81D}, {0x2B820,0x2CEA1},
    {0x2CEB0,0x2EBE0}, {0x2EBF0,0x2EE5D}, {0x2F800,0x2FA1D}, {0x30000,0x3134A}, {0x31350,0x323AF},
};

// \p{N}: Nd Nl No: 144 ranges
static const uint32_t unicode_number_ranges[][2] = {
    {0x30,0x39}, {0xB2,0xB3}, {0xB9,0xB9}, {0xBC,0xBE}, {0x660,0x669}, {0x6F0,0x6F9},
    {0x7C0,0x7C9}, {0x966,0x96F}, {0x9E6,0x9EF}, {0x9F4,0x9F9}, {0xA66,0xA6F}, {0xAE6,0xAEF},
    {0xB66,0xB6F}, {0xB72,0xB77}, {0xBE6,0xBF2}, {0xC66,0xC6F}, {0xC78,0xC7E}, {0xCE6,0xCEF},
    {0xD58,0xD5E}, {0xD66,0xD78}, {0xDE6,0xDEF}, {0xE50,0xE59}, {0xED0,0xED9}, {0xF20,0xF33},
    {0x1040,0x1049}, {0x1090,0x1099}, {0x1369,0x137C}, {0x16EE,0x16F0}, {0x17E0,0x17E9}, {0x17F0,0x17F9},
    {0x1810,0x1819}, {0x1946,0x194F}, {0x19D0,0x19DA}, {0x1A80,0x1A89}, {0x1A90,0x1A99}, {0x1B50,0x1B59},
    {0x1BB0,0x1BB9}, {0x1C40,0x1C49}, {0x1C50,0x1C59}, {0x2070,0x2070}, {0x2074,0x2079}, {0x2080,0x2089},
    {0x2150,0x2182}, {0x2185,0x2189}, {0x2460,0x249B}, {0x24EA,0x24FF}, {0x2776,0x2793}, {0x2CFD,0x2CFD},
    {0x3007,0x3007}, {0x3021,0x3029}, {0x3038,0x303A}, {0x3192,0x3195}, {0x3220,0x3229}, {0x3248,0x324F},
    {0x3251,0x325F}, {0x3280,0x3289}, {0x32B1,0x32BF}, {0xA620,0xA629}, {0xA6E6,0xA6EF}, {0xA830,0xA835},
    {0xA8D0,0xA8D9}, {0xA900,0xA909}, {0xA9D0,0xA9D9}, {0xA9F0,0xA9F9}, {0xAA50,0xAA59}, {0xABF0,0xABF9},
    {0xFF10,0xFF19}, {0x10107,0x10133}, {0x10140,0x10178}, {0x1018A,0x1018B}, {0x102E1,0x102FB}, {0x10320,0x10323},
    {0x10341,0x10341}, {0x1034A,0x1034A}, {0x103D1,0x103D5}, {0x104A0,0x104A9}, {0x10858,0x1085F}, {0x10879,0x1087F},
    {0x108A7,0x108AF}, {0x108FB,0x108FF}, {0x10916,0x1091B}, {0x109BC,0x109BD}, {0x109C0,0x109CF}, {0x109D2,0x109FF},
    {0x10A40,0x10A48}, {0x10A7D,0x10A7E}, {0x10A9D,0x10A9F}, {0x10AEB,0x10AEF}, {0x10B58,0x10B5F}, {0x10B78,0x10B7F},
    {0x10BA9,0x10BAF}, {0x10CFA,0x10CFF}, {0x10D30,0x10D39}, {0x10D40,0x10D49}, {0x10E60,0x10E7E}, {0x10F1D,0x10F26},
    {0x10F51,0x10F54}, {0x10FC5,0x10FCB}, {0x11052,0x1106F}, {0x110F0,0x110F9}, {0x11136,0x1113F}, {0x111D0,0x111D9},
    {0x111E1,0x111F4}, {0x112F0,0x112F9}, {0x11450,0x11459}, {0x114D0,0x114D9}, {0x11650,0x11659}, {0x116C0,0x116C9},
    {0x116D0,0x116E3}, {0x11730,0x1173B}, {0x118E0,0x118F2}, {0x11950,0x11959}, {0x11BF0,0x11BF9}, {0x11C50,0x11C6C},
    {0x11D50,0x11D59}, {0x11DA0,0x11DA9}, {0x11F50,0x11F59}, {0x11FC0,0x11FD4}, {0x12400,0x1246E}, {0x16130,0x16139},
    {0x16A60,0x16A69}, {0x16AC0,0x16AC9}, {0x16B50,0x16B59}, {0x16B5B,0x16B61}, {0x16D70,0x16D79}, {0x16E80,0x16E96},
    {0x1CCF0,0x1CCF9}, {0x1D2C0,0x1D2D3}, {0x1D2E0,0x1D2F3}, {0x1D360,0x1D378}, {0x1D7CE,0x1D7FF}, {0x1E140,0x1E149},
    {0x1E2F0,0x1E2F9}, {0x1E4F0,0x1E4F9}, {0x1E5F1,0x1E5FA}, {0x1E8C7,0x1E8CF}, {0x1E950,0x1E959}, {0x1EC71,0x1ECAB},
    {0x1ECAD,0x1ECAF}, {0x1ECB1,0x1ECB4}, {0x1ED01,0x1ED2D}, {0x1ED2F,0x1ED3D}, {0x1F100,0x1F10C}, {0x1FBF0,0x1FBF9},
};

// \s: White_Space: 10 ranges
static const uint32_t unicode_space_ranges[][2] = {
    {0x9,0xD}, {0x20,0x20}, {0x85,0x85}, {0xA0,0xA0}, {0x1680,0x1680}, {0x2000,0x200A},
    {0x2028,0x2029}, {0x202F,0x202F}, {0x205F,0x205F}, {0x3000,0x3000},
};
// --- end shared-copy: unicode-tables ---

// --- begin shared-copy: unicode-nfc ---
// Unicode NFC (data/tokenizer.c's nfc_normalize, for Qwen2's tokenizer), Unicode 16.0.0.
// Canonical decompositions, one level: {code point, first, second (0: a singleton), 1 if NFC
// composes first + second back into it}, sorted: 2081 entries
static const uint32_t unicode_decompositions[][4] = {
    {0xC0,0x41,0x300,1}, {0xC1,0x41,0x301,1}, {0xC2,0x41,0x302,1}, {0xC3,0x41,0x303,1}, {0xC4,0x41,0x308,1},
    {0xC5,0x41,0x30A,1}, {0xC7,0x43,0x327,1}, {0xC8,0x45,0x300,1}, {0xC9,0x45,0x301,1}, {0xCA,0x45,0x302,1},
    {0xCB,0x45,0x308,1}, {0xCC,0x49,0x300,1}, {0xCD,0x49,0x301,1}, {0xCE,0x49,0x302,1}, {0xCF,0x49,0x308,1},
    {0xD1,0x4E,0x303,1}, {0xD2,0x4F,0x300,1}, {0xD3,0x4F,0x301,1}, {0xD4,0x4F,0x302,1}, {0xD5,0x4F,0x303,1},
    {0xD6,0x4F,0x308,1}, {0xD9,0x55,0x300,1}, {0xDA,0x55,0x301,1}, {0xDB,0x55,0x302,1}, {0xDC,0x55,0x308,1},
    {0xDD,0x59,0x301,1}, {0xE0,0x61,0x300,1}, {0xE1,0x61,0x301,1}, {0xE2,0x61,0x302,1}, {0xE3,0x61,0x303,1},
    {0xE4,0x61,0x308,1}, {0xE5,0x61,0x30A,1}, {0xE7,0x63,0x327,1}, {0xE8,0x65,0x300,1}, {0xE9,0x65,0x301,1},
    {0xEA,0x65,0x302,1}, {0xEB,0x65,0x308,1}, {0xEC,0x69,0x300,1}, {0xED,0x69,0x301,1}, {0xEE,0x69,0x302,1},
    {0xEF,0x69,0x308,1}, {0xF1,0x6E,0x303,1}, {0xF2,0x6F,0x300,1}, {0xF3,0x6F,0x301,1}, {0xF4,0x6F,0x302,1},
    {0xF5,0x6F,0x303,1}, {0xF6,0x6F,0x308,1}, {0xF9,0x75,0x300,1}, {0xFA,0x75,0x301,1}, {0xFB,0x75,0x302,1},
    {0xFC,0x75,0x308,1}, {0xFD,0x79,0x301,1}, {0xFF,0x79,0x308,1}, {0x100,0x41,0x304,1}, {0x101,0x61,0x304,1},
    {0x102,0x41,0x306,1}, {0x103,0x61,0x306,1}, {0x104,0x41,0x328,1}, {0x105,0x61,0x328,1}, {0x106,0x43,0x301,1},
    {0x107,0x63,0x301,1}, {0x108,0x43,0x302,1}, {0x109,0x63,0x302,1}, {0x10A,0x43,0x307,1}, {0x10B,0x63,0x307,1},
    {0x10C,0x43,0x30C,1}, {0x10D,0x63,0x30C,1}, {0x10E,0x44,0x30C,1}, {0x10F,0x64,0x30C,1}, {0x112,0x45,0x304,1},
    {0x113,0x65,0x304,1}, {0x114,0x45,0x306,1}, {0x115,0x65,0x306,1}, {0x116,0x45,0x307,1}, {0x117,0x65,0x307,1},
    {0x118,0x45,0x328,1}, {0x119,0x65,0x328,1}, {0x11A,0x45,0x30C,1}, {0x11B,0x65,0x30C,1}, {0x11C,0x47,0x302,1},
    {0x11D,0x67,0x302,1}, {0x11E,0x47,0x306,1}, {0x11F,0x67,0x306,1}, {0x120,0x47,0x307,1}, {0x121,0x67,0x307,1},
    {0x122,0x47,0x327,1}, {0x123,0x67,0x327,1}, {0x124,0x48,0x302,1}, {0x125,0x68,0x302,1}, {0x128,0x49,0x303,1},
    {0x129,0x69,0x303,1}, {0x12A,0x49,0x304,1}, {0x12B,0x69,0x304,1}, {0x12C,0x49,0x306,1}, {0x12D,0x69,0x306,1},
    {0x12E,0x49,0x328,1}, {0x12F,0x69,0x328,1}, {0x130,0x49,0x307,1}, {0x134,0x4A,0x302,1}, {0x135,0x6A,0x302,1},
    {0x136,0x4B,0x327,1}, {0x137,0x6B,0x327,1}, {0x139,0x4C,0x301,1}, {0x13A,0x6C,0x301,1}, {0x13B,0x4C,0x327,1},
    {0x13C,0x6C,0x327,1}, {0x13D,0x4C,0x30C,1}, {0x13E,0x6C,0x30C,1}, {0x143,0x4E,0x301,1}, {0x144,0x6E,0x301,1},
    {0x145,0x4E,0x327,1}, {0x146,0x6E,0x327,1}, {0x147,0x4E,0x30C,1}, {0x148,0x6E,0x30C,1}, {0x14C,0x4F,0x304,1},
    {0x14D,0x6F,0x304,1}, {0x14E,0x4F,0x306,1}, {0x14F,0x6F,0x306,1}, {0x150,0x4F,0x30B,1}, {0x151,0x6F,0x30B,1},
    {0x154,0x52,0x301,1}, {0x155,0x72,0x301,1}, {0x156,0x52,0x327,1}, {0x157,0x72,0x327,1}, {0x158,0x52,0x30C,1},
    {0x159,0x72,0x30C,1}, {0x15A,0x53,0x301,1}, {0x15B,0x73,0x301,1}, {0x15C,0x53,0x302,1}, {0x15D,0x73,0x302,1},
    {0x15E,0x53,0x327,1}, {0x15F,0x73,0x327,1}, {0x160,0x53,0x30C,1}, {0x161,0x73,0x30C,1}, {0x162,0x54,0x327,1},
    {0x163,0x74,0x327,1}, {0x164,0x54,0x30C,1}, {0x165,0x74,0x30C,1}, {0x168,0x55,0x303,1}, {0x169,0x75,0x303,1},
    {0x16A,0x55,0x304,1}, {0x16B,0x75,0x304,1}, {0x16C,0x55,0x306,1}, {0x16D,0x75,0x306,1}, {0x16E,0x55,0x30A,1},
    {0x16F,0x75,0x30A,1}, {0x170,0x55,0x30B,1}, {0x171,0x75,0x30B,1}, {0x172,0x55,0x328,1}, {0x173,0x75,0x328,1},
    {0x174,0x57,0x302,1}, {0x175,0x77,0x302,1}, {0x176,0x59,0x302,1}, {0x177,0x79,0x302,1}, {0x178,0x59,0x308,1},
    {0x179,0x5A,0x301,1}, {0x17A,0x7A,0x301,1}, {0x17B,0x5A,0x307,1}, {0x17C,0x7A,0x307,1}, {0x17D,0x5A,0x30C,1},
    {0x17E,0x7A,0x30C,1}, {0x1A0,0x4F,0x31B,1}, {0x1A1,0x6F,0x31B,1}, {0x1AF,0x55,0x31B,1}, {0x1B0,0x75,0x31B,1},
    {0x1CD,0x41,0x30C,1}, {0x1CE,0x61,0x30C,1}, {0x1CF,0x49,0x30C,1}, {0x1D0,0x69,0x30C,1}, {0x1D1,0x4F,0x30C,1},
    {0x1D2,0x6F,0x30C,1}, {0x1D3,0x55,0x30C,1}, {0x1D4,0x75,0x30C,1}, {0x1D5,0xDC,0x304,1}, {0x1D6,0xFC,0x304,1},
    {0x1D7,0xDC,0x301,1}, {0x1D8,0xFC,0x301,1}, {0x1D9,0xDC,0x30C,1}, {0x1DA,0xFC,0x30C,1}, {0x1DB,0xDC,0x300,1},
    {0x1DC,0xFC,0x300,1}, {0x1DE,0xC4,0x304,1}, {0x1DF,0xE4,0x304,1}, {0x1E0,0x226,0x304,1}, {0x1E1,0x227,0x304,1},
    {0x1E2,0xC6,0x304,1}, {0x1E3,0xE6,0x304,1}, {0x1E6,0x47,0x30C,1}, {0x1E7,0x67,0x30C,1}, {0x1E8,0x4B,0x30C,1},
    {0x1E9,0x6B,0x30C,1}, {0x1EA,0x4F,0x328,1}, {0x1EB,0x6F,0x328,1}, {0x1EC,0x1EA,0x304,1}, {0x1ED,0x1EB,0x304,1},
    {0x1EE,0x1B7,0x30C,1}, {0x1EF,0x292,0x30C,1}, {0x1F0,0x6A,0x30C,1}, {0x1F4,0x47,0x301,1}, {0x1F5,0x67,0x301,1},
    {0x1F8,0x4E,0x300,1}, {0x1F9,0x6E,0x300,1}, {0x1FA,0xC5,0x301,1}, {0x1FB,0xE5,0x301,1}, {0x1FC,0xC6,0x301,1},
    {0x1FD,0xE6,0x301,1}, {0x1FE,0xD8,0x301,1}, {0x1FF,0xF8,0x301,1}, {0x200,0x41,0x30F,1}, {0x201,0x61,0x30F,1},
    {0x202,0x41,0x311,1}, {0x203,0x61,0x311,1}, {0x204,0x45,0x30F,1}, {0x205,0x65,0x30F,1}, {0x206,0x45,0x311,1},
    {0x207,0x65,0x311,1}, {0x208,0x49,0x30F,1}, {0x209,0x69,0x30F,1}, {0x20A,0x49,0x311,1}, {0x20B,0x69,0x311,1},
    {0x20C,0x4F,0x30F,1}, {0x20D,0x6F,0x30F,1}, {0x20E,0x4F,0x311,1}, {0x20F,0x6F,0x311,1}, {0x210,0x52,0x30F,1},
    {0x211,0x72,0x30F,1}, {0x212,0x52,0x311,1}, {0x213,0x72,0x311,1}, {0x214,0x55,0x30F,1}, {0x215,0x75,0x30F,1},
    {0x216,0x55,0x311,1}, {0x217,0x75,0x311,1}, {0x218,0x53,0x326,1}, {0x219,0x73,0x326,1}, {0x21A,0x54,0x326,1},
    {0x21B,0x74,0x326,1}, {0x21E,0x48,0x30C,1}, {0x21F,0x68,0x30C,1}, {0x226,0x41,0x307,1}, {0x227,0x61,0x307,1},
    {0x228,0x45,0x327,1}, {0x229,0x65,0x327,1}, {0x22A,0xD6,0x304,1}, {0x22B,0xF6,0x304,1}, {0x22C,0xD5,0x304,1},
    {0x22D,0xF5,0x304,1}, {0x22E,0x4F,0x307,1}, {0x22F,0x6F,0x307,1}, {0x230,0x22E,0x304,1}, {0x231,0x22F,0x304,1},
    {0x232,0x59,0x304,1}, {0x233,0x79,0x304,1}, {0x340,0x300,0x0,0}, {0x341,0x301,0x0,0}, {0x343,0x313,0x0,0},
    {0x344,0x308,0x301,0}, {0x374,0x2B9,0x0,0}, {0x37E,0x3B,0x0,0}, {0x385,0xA8,0x301,1}, {0x386,0x391,0x301,1},
    {0x387,0xB7,0x0,0}, {0x388,0x395,0x301,1}, {0x389,0x397,0x301,1}, {0x38A,0x399,0x301,1}, {0x38C,0x39F,0x301,1},
    {0x38E,0x3A5,0x301,1}, {0x38F,0x3A9,0x301,1}, {0x390,0x3CA,0x301,1}, {0x3AA,0x399,0x308,1}, {0x3AB,0x3A5,0x308,1},
    {0x3AC,0x3B1,0x301,1}, {0x3AD,0x3B5,0x301,1}, {0x3AE,0x3B7,0x301,1}, {0x3AF,0x3B9,0x301,1}, {0x3B0,0x3CB,0x301,1},
    {0x3CA,0x3B9,0x308,1}, {0x3CB,0x3C5,0x308,1}, {0x3CC,0x3BF,0x301,1}, {0x3CD,0x3C5,0x301,1}, {0x3CE,0x3C9,0x301,1},
    {0x3D3,0x3D2,0x301,1}, {0x3D4,0x3D2,0x308,1}, {0x400,0x415,0x300,1}, {0x401,0x415,0x308,1}, {0x403,0x413,0x301,1},
    {0x407,0x406,0x308,1}, {0x40C,0x41A,0x301,1}, {0x40D,0x418,0x300,1}, {0x40E,0x423,0x306,1}, {0x419,0x418,0x306,1},
    {0x439,0x438,0x306,1}, {0x450,0x435,0x300,1}, {0x451,0x435,0x308,1}, {0x453,0x433,0x301,1}, {0x457,0x456,0x308,1},
    {0x45C,0x43A,0x301,1}, {0x45D,0x438,0x300,1}, {0x45E,0x443,0x306,1}, {0x476,0x474,0x30F,1}, {0x477,0x475,0x30F,1},
    {0x4C1,0x416,0x306,1}, {0x4C2,0x436,0x306,1}, {0x4D0,0x410,0x306,1}, {0x4D1,0x430,0x306,1}, {0x4D2,0x410,0x308,1},
    {0x4D3,0x430,0x308,1}, {0x4D6,0x415,0x306,1}, {0x4D7,0x435,0x306,1}, {0x4DA,0x4D8,0x308,1}, {0x4DB,0x4D9,0x308,1},
    {0x4DC,0x416,0x308,1}, {0x4DD,0x436,0x308,1}, {0x4DE,0x417,0x308,1}, {0x4DF,0x437,0x308,1}, {0x4E2,0x418,0x304,1},
    {0x4E3,0x438,0x304,1}, {0x4E4,0x418,0x308,1}, {0x4E5,0x438,0x308,1}, {0x4E6,0x41E,0x308,1}, {0x4E7,0x43E,0x308,1},
    {0x4EA,0x4E8,0x308,1}, {0x4EB,0x4E9,0x308,1}, {0x4EC,0x42D,0x308,1}, {0x4ED,0x44D,0x308,1}, {0x4EE,0x423,0x304,1},
    {0x4EF,0x443,0x304,1}, {0x4F0,0x423,0x308,1}, {0x4F1,0x443,0x308,1}, {0x4F2,0x423,0x30B,1}, {0x4F3,0x443,0x30B,1},
    {0x4F4,0x427,0x308,1}, {0x4F5,0x447,0x308,1}, {0x4F8,0x42B,0x308,1}, {0x4F9,0x44B,0x308,1}, {0x622,0x627,0x653,1},
    {0x623,0x627,0x654,1}, {0x624,0x648,0x654,1}, {0x625,0x627,0x655,1}, {0x626,0x64A,0x654,1}, {0x6C0,0x6D5,0x654,1},
    {0x6C2,0x6C1,0x654,1}, {0x6D3,0x6D2,0x654,1}, {0x929,0x928,0x93C,1}, {0x931,0x930,0x93C,1}, {0x934,0x933,0x93C,1},
    {0x958,0x915,0x93C,0}, {0x959,0x916,0x93C,0}, {0x95A,0x917,0x93C,0}, {0x95B,0x91C,0x93C,0}, {0x95C,0x921,0x93C,0},
    {0x95D,0x922,0x93C,0}, {0x95E,0x92B,0x93C,0}, {0x95F,0x92F,0x93C,0}, {0x9CB,0x9C7,0x9BE,1}, {0x9CC,0x9C7,0x9D7,1},
    {0x9DC,0x9A1,0x9BC,0}, {0x9DD,0x9A2,0x9BC,0}, {0x9DF,0x9AF,0x9BC,0}, {0xA33,0xA32,0xA3C,0}, {0xA36,0xA38,0xA3C,0},
    {0xA59,0xA16,0xA3C,0}, {0xA5A,0xA17,0xA3C,0}, {0xA5B,0xA1C,0xA3C,0}, {0xA5E,0xA2B,0xA3C,0}, {0xB48,0xB47,0xB56,1},
    {0xB4B,0xB47,0xB3E,1}, {0xB4C,0xB47,0xB57,1}, {0xB5C,0xB21,0xB3C,0}, {0xB5D,0xB22,0xB3C,0}, {0xB94,0xB92,0xBD7,1},
    {0xBCA,0xBC6,0xBBE,1}, {0xBCB,0xBC7,0xBBE,1}, {0xBCC,0xBC6,0xBD7,1}, {0xC48,0xC46,0xC56,1}, {0xCC0,0xCBF,0xCD5,1},
    {0xCC7,0xCC6,0xCD5,1}, {0xCC8,0xCC6,0xCD6,1}, {0xCCA,0xCC6,0xCC2,1}, {0xCCB,0xCCA,0xCD5,1}, {0xD4A,0xD46,0xD3E,1},
    {0xD4B,0xD47,0xD3E,1}, {0xD4C,0xD46,0xD57,1}, {0xDDA,0xDD9,0xDCA,1}, {0xDDC,0xDD9,0xDCF,1}, {0xDDD,0xDDC,0xDCA,1},
    {0xDDE,0xDD9,0xDDF,1}, {0xF43,0xF42,0xFB7,0}, {0xF4D,0xF4C,0xFB7,0}, {0xF52,0xF51,0xFB7,0}, {0xF57,0xF56,0xFB7,0},
    {0xF5C,0xF5B,0xFB7,0}, {0xF69,0xF40,0xFB5,0}, {0xF73,0xF71,0xF72,0}, {0xF75,0xF71,0xF74,0}, {0xF76,0xFB2,0xF80,0},
    {0xF78,0xFB3,0xF80,0}, {0xF81,0xF71,0xF80,0}, {0xF93,0xF92,0xFB7,0}, {0xF9D,0xF9C,0xFB7,0}, {0xFA2,0xFA1,0xFB7,0},
    {0xFA7,0xFA6,0xFB7,0}, {0xFAC,0xFAB,0xFB7,0}, {0xFB9,0xF90,0xFB5,0}, {0x1026,0x1025,0x102E,1}, {0x1B06,0x1B05,0x1B35,1},
    {0x1B08,0x1B07,0x1B35,1}, {0x1B0A,0x1B09,0x1B35,1}, {0x1B0C,0x1B0B,0x1B35,1}, {0x1B0E,0x1B0D,0x1B35,1}, {0x1B12,0x1B11,0x1B35,1},
    {0x1B3B,0x1B3A,0x1B35,1}, {0x1B3D,0x1B3C,0x1B35,1}, {0x1B40,0x1B3E,0x1B35,1}, {0x1B41,0x1B3F,0x1B35,1}, {0x1B43,0x1B42,0x1B35,1},
    {0x1E00,0x41,0x325,1}, {0x1E01,0x61,0x325,1}, {0x1E02,0x42,0x307,1}, {0x1E03,0x62,0x307,1}, {0x1E04,0x42,0x323,1},
    {0x1E05,0x62,0x323,1}, {0x1E06,0x42,0x331,1}, {0x1E07,0x62,0x331,1}, {0x1E08,0xC7,0x301,1}, {0x1E09,0xE7,0x301,1},
    {0x1E0A,0x44,0x307,1}, {0x1E0B,0x64,0x307,1}, {0x1E0C,0x44,0x323,1}, {0x1E0D,0x64,0x323,1}, {0x1E0E,0x44,0x331,1},
    {0x1E0F,0x64,0x331,1}, {0x1E10,0x44,0x327,1}, {0x1E11,0x64,0x327,1}, {0x1E12,0x44,0x32D,1}, {0x1E13,0x64,0x32D,1},
    {0x1E14,0x112,0x300,1}, {0x1E15,0x113,0x300,1}, {0x1E16,0x112,0x301,1}, {0x1E17,0x113,0x301,1}, {0x1E18,0x45,0x32D,1},
    {0x1E19,0x65,0x32D,1}, {0x1E1A,0x45,0x330,1}, {0x1E1B,0x65,0x330,1}, {0x1E1C,0x228,0x306,1}, {0x1E1D,0x229,0x306,1},
    {0x1E1E,0x46,0x307,1}, {0x1E1F,0x66,0x307,1}, {0x1E20,0x47,0x304,1}, {0x1E21,0x67,0x304,1}, {0x1E22,0x48,0x307,1},
    {0x1E23,0x68,0x307,1}, {0x1E24,0x48,0x323,1}, {0x1E25,0x68,0x323,1}, {0x1E26,0x48,0x308,1}, {0x1E27,0x68,0x308,1},
    {0x1E28,0x48,0x327,1}, {0x1E29,0x68,0x327,1}, {0x1E2A,0x48,0x32E,1}, {0x1E2B,0x68,0x32E,1}, {0x1E2C,0x49,0x330,1},
    {0x1E2D,0x69,0x330,1}, {0x1E2E,0xCF,0x301,1}, {0x1E2F,0xEF,0x301,1}, {0x1E30,0x4B,0x301,1}, {0x1E31,0x6B,0x301,1},
    {0x1E32,0x4B,0x323,1}, {0x1E33,0x6B,0x323,1}, {0x1E34,0x4B,0x331,1}, {0x1E35,0x6B,0x331,1}, {0x1E36,0x4C,0x323,1},
    {0x1E37,0x6C,0x323,1}, {0x1E38,0x1E36,0x304,1}, {0x1E39,0x1E37,0x304,1}, {0x1E3A,0x4C,0x331,1}, {0x1E3B,0x6C,0x331,1},
    {0x1E3C,0x4C,0x32D,1}, {0x1E3D,0x6C,0x32D,1}, {0x1E3E,0x4D,0x301,1}, {0x1E3F,0x6D,0x301,1}, {0x1E40,0x4D,0x307,1},
    {0x1E41,0x6D,0x307,1}, {0x1E42,0x4D,0x323,1}, {0x1E43,0x6D,0x323,1}, {0x1E44,0x4E,0x307,1}, {0x1E45,0x6E,0x307,1},
    {0x1E46,0x4E,0x323,1}, {0x1E47,0x6E,0x323,1}, {0x1E48,0x4E,0x331,1}, {0x1E49,0x6E,0x331,1}, {0x1E4A,0x4E,0x32D,1},
    {0x1E4B,0x6E,0x32D,1}, {0x1E4C,0xD5,0x301,1}, {0x1E4D,0xF5,0x301,1}, {0x1E4E,0xD5,0x308,1}, {0x1E4F,0xF5,0x308,1},
    {0x1E50,0x14C,0x300,1}, {0x1E51,0x14D,0x300,1}, {0x1E52,0x14C,0x301,1}, {0x1E53,0x14D,0x301,1}, {0x1E54,0x50,0x301,1},
    {0x1E55,0x70,0x301,1}, {0x1E56,0x50,0x307,1}, {0x1E57,0x70,0x307,1}, {0x1E58,0x52,0x307,1}, {0x1E59,0x72,0x307,1},
    {0x1E5A,0x52,0x323,1}, {0x1E5B,0x72,0x323,1}, {0x1E5C,0x1E5A,0x304,1}, {0x1E5D,0x1E5B,0x304,1}, {0x1E5E,0x52,0x331,1},
    {0x1E5F,0x72,0x331,1}, {0x1E60,0x53,0x307,1}, {0x1E61,0x73,0x307,1}, {0x1E62,0x53,0x323,1}, {0x1E63,0x73,0x323,1},
    {0x1E64,0x15A,0x307,1}, {0x1E65,0x15B,0x307,1}, {0x1E66,0x160,0x307,1}, {0x1E67,0x161,0x307,1}, {0x1E68,0x1E62,0x307,1},
    {0x1E69,0x1E63,0x307,1}, {0x1E6A,0x54,0x307,1}, {0x1E6B,0x74,0x307,1}, {0x1E6C,0x54,0x323,1}, {0x1E6D,0x74,0x323,1},
    {0x1E6E,0x54,0x331,1}, {0x1E6F,0x74,0x331,1}, {0x1E70,0x54,0x32D,1}, {0x1E71,0x74,0x32D,1}, {0x1E72,0x55,0x324,1},
    {0x1E73,0x75,0x324,1}, {0x1E74,0x55,0x330,1}, {0x1E75,0x75,0x330,1}, {0x1E76,0x55,0x32D,1}, {0x1E77,0x75,0x32D,1},
    {0x1E78,0x168,0x301,1}, {0x1E79,0x169,0x301,1}, {0x1E7A,0x16A,0x308,1}, {0x1E7B,0x16B,0x308,1}, {0x1E7C,0x56,0x303,1},
    {0x1E7D,0x76,0x303,1}, {0x1E7E,0x56,0x323,1}, {0x1E7F,0x76,0x323,1}, {0x1E80,0x57,0x300,1}, {0x1E81,0x77,0x300,1},
    {0x1E82,0x57,0x301,1}, {0x1E83,0x77,0x301,1}, {0x1E84,0x57,0x308,1}, {0x1E85,0x77,0x308,1}, {0x1E86,0x57,0x307,1},
    {0x1E87,0x77,0x307,1}, {0x1E88,0x57,0x323,1}, {0x1E89,0x77,0x323,1}, {0x1E8A,0x58,0x307,1}, {0x1E8B,0x78,0x307,1},
    {0x1E8C,0x58,0x308,1}, {0x1E8D,0x78,0x308,1}, {0x1E8E,0x59,0x307,1}, {0x1E8F,0x79,0x307,1}, {0x1E90,0x5A,0x302,1},
    {0x1E91,0x7A,0x302,1}, {0x1E92,0x5A,0x323,1}, {0x1E93,0x7A,0x323,1}, {0x1E94,0x5A,0x331,1}, {0x1E95,0x7A,0x331,1},
    {0x1E96,0x68,0x331,1}, {0x1E97,0x74,0x308,1}, {0x1E98,0x77,0x30A,1}, {0x1E99,0x79,0x30A,1}, {0x1E9B,0x17F,0x307,1},
    {0x1EA0,0x41,0x323,1}, {0x1EA1,0x61,0x323,1}, {0x1EA2,0x41,0x309,1}, {0x1EA3,0x61,0x309,1}, {0x1EA4,0xC2,0x301,1},
    {0x1EA5,0xE2,0x301,1}, {0x1EA6,0xC2,0x300,1}, {0x1EA7,0xE2,0x300,1}, {0x1EA8,0xC2,0x309,1}, {0x1EA9,0xE2,0x309,1},
    {0x1EAA,0xC2,0x303,1}, {0x1EAB,0xE2,0x303,1}, {0x1EAC,0x1EA0,0x302,1}, {0x1EAD,0x1EA1,0x302,1}, {0x1EAE,0x102,0x301,1},
    {0x1EAF,0x103,0x301,1}, {0x1EB0,0x102,0x300,1}, {0x1EB1,0x103,0x300,1}, {0x1EB2,0x102,0x309,1}, {0x1EB3,0x103,0x309,1},
    {0x1EB4,0x102,0x303,1}, {0x1EB5,0x103,0x303,1}, {0x1EB6,0x1EA0,0x306,1}, {0x1EB7,0x1EA1,0x306,1}, {0x1EB8,0x45,0x323,1},
    {0x1EB9,0x65,0x323,1}, {0x1EBA,0x45,0x309,1}, {0x1EBB,0x65,0x309,1}, {0x1EBC,0x45,0x303,1}, {0x1EBD,0x65,0x303,1},
    {0x1EBE,0xCA,0x301,1}, {0x1EBF,0xEA,0x301,1}, {0x1EC0,0xCA,0x300,1}, {0x1EC1,0xEA,0x300,1}, {0x1EC2,0xCA,0x309,1},
    {0x1EC3,0xEA,0x309,1}, {0x1EC4,0xCA,0x303,1}, {0x1EC5,0xEA,0x303,1}, {0x1EC6,0x1EB8,0x302,1}, {0x1EC7,0x1EB9,0x302,1},
    {0x1EC8,0x49,0x309,1}, {0x1EC9,0x69,0x309,1}, {0x1ECA,0x49,0x323,1}, {0x1ECB,0x69,0x323,1}, {0x1ECC,0x4F,0x323,1},
    {0x1ECD,0x6F,0x323,1}, {0x1ECE,0x4F,0x309,1}, {0x1ECF,0x6F,0x309,1}, {0x1ED0,0xD4,0x301,1}, {0x1ED1,0xF4,0x301,1},
    {0x1ED2,0xD4,0x300,1}, {0x1ED3,0xF4,0x300,1}, {0x1ED4,0xD4,0x309,1}, {0x1ED5,0xF4,0x309,1}, {0x1ED6,0xD4,0x303,1},
    {0x1ED7,0xF4,0x303,1}, {0x1ED8,0x1ECC,0x302,1}, {0x1ED9,0x1ECD,0x302,1}, {0x1EDA,0x1A0,0x301,1}, {0x1EDB,0x1A1,0x301,1},
    {0x1EDC,0x1A0,0x300,1}, {0x1EDD,0x1A1,0x300,1}, {0x1EDE,0x1A0,0x309,1}, {0x1EDF,0x1A1,0x309,1}, {0x1EE0,0x1A0,0x303,1},
    {0x1EE1,0x1A1,0x303,1}, {0x1EE2,0x1A0,0x323,1}, {0x1EE3,0x1A1,0x323,1}, {0x1EE4,0x55,0x323,1}, {0x1EE5,0x75,0x323,1},
    {0x1EE6,0x55,0x309,1}, {0x1EE7,0x75,0x309,1}, {0x1EE8,0x1AF,0x301,1}, {0x1EE9,0x1B0,0x301,1}, {0x1EEA,0x1AF,0x300,1},
    {0x1EEB,0x1B0,0x300,1}, {0x1EEC,0x1AF,0x309,1}, {0x1EED,0x1B0,0x309,1}, {0x1EEE,0x1AF,0x303,1}, {0x1EEF,0x1B0,0x303,1},
    {0x1EF0,0x1AF,0x323,1}, {0x1EF1,0x1B0,0x323,1}, {0x1EF2,0x59,0x300,1}, {0x1EF3,0x79,0x300,1}, {0x1EF4,0x59,0x323,1},
    {0x1EF5,0x79,0x323,1}, {0x1EF6,0x59,0x309,1}, {0x1EF7,0x79,0x309,1}, {0x1EF8,0x59,0x303,1}, {0x1EF9,0x79,0x303,1},
    {0x1F00,0x3B1,0x313,1}, {0x1F01,0x3B1,0x314,1}, {0x1F02,0x1F00,0x300,1}, {0x1F03,0x1F01,0x300,1}, {0x1F04,0x1F00,0x301,1},
    {0x1F05,0x1F01,0x301,1}, {0x1F06,0x1F00,0x342,1}, {0x1F07,0x1F01,0x342,1}, {0x1F08,0x391,0x313,1}, {0x1F09,0x391,0x314,1},
    {0x1F0A,0x1F08,0x300,1}, {0x1F0B,0x1F09,0x300,1}, {0x1F0C,0x1F08,0x301,1}, {0x1F0D,0x1F09,0x301,1}, {0x1F0E,0x1F08,0x342,1},
    {0x1F0F,0x1F09,0x342,1}, {0x1F10,0x3B5,0x313,1}, {0x1F11,0x3B5,0x314,1}, {0x1F12,0x1F10,0x300,1}, {0x1F13,0x1F11,0x300,1},
    {0x1F14,0x1F10,0x301,1}, {0x1F15,0x1F11,0x301,1}, {0x1F18,0x395,0x313,1}, {0x1F19,0x395,0x314,1}, {0x1F1A,0x1F18,0x300,1},
    {0x1F1B,0x1F19,0x300,1}, {0x1F1C,0x1F18,0x301,1}, {0x1F1D,0x1F19,0x301,1}, {0x1F20,0x3B7,0x313,1}, {0x1F21,0x3B7,0x314,1},
    {0x1F22,0x1F20,0x300,1}, {0x1F23,0x1F21,0x300,1}, {0x1F24,0x1F20,0x301,1}, {0x1F25,0x1F21,0x301,1}, {0x1F26,0x1F20,0x342,1},
    {0x1F27,0x1F21,0x342,1}, {0x1F28,0x397,0x313,1}, {0x1F29,0x397,0x314,1}, {0x1F2A,0x1F28,0x300,1}, {0x1F2B,0x1F29,0x300,1},
    {0x1F2C,0x1F28,0x301,1}, {0x1F2D,0x1F29,0x301,1}, {0x1F2E,0x1F28,0x342,1}, {0x1F2F,0x1F29,0x342,1}, {0x1F30,0x3B9,0x313,1},
    {0x1F31,0x3B9,0x314,1}, {0x1F32,0x1F30,0x300,1}, {0x1F33,0x1F31,0x300,1}, {0x1F34,0x1F30,0x301,1}, {0x1F35,0x1F31,0x301,1},
    {0x1F36,0x1F30,0x342,1}, {0x1F37,0x1F31,0x342,1}, {0x1F38,0x399,0x313,1}, {0x1F39,0x399,0x314,1}, {0x1F3A,0x1F38,0x300,1},
    {0x1F3B,0x1F39,0x300,1}, {0x1F3C,0x1F38,0x301,1}, {0x1F3D,0x1F39,0x301,1}, {0x1F3E,0x1F38,0x342,1}, {0x1F3F,0x1F39,0x342,1},
    {0x1F40,0x3BF,0x313,1}, {0x1F41,0x3BF,0x314,1}, {0x1F42,0x1F40,0x300,1}, {0x1F43,0x1F41,0x300,1}, {0x1F44,0x1F40,0x301,1},
    {0x1F45,0x1F41,0x301,1}, {0x1F48,0x39F,0x313,1}, {0x1F49,0x39F,0x314,1}, {0x1F4A,0x1F48,0x300,1}, {0x1F4B,0x1F49,0x300,1},
    {0x1F4C,0x1F48,0x301,1}, {0x1F4D,0x1F49,0x301,1}, {0x1F50,0x3C5,0x313,1}, {0x1F51,0x3C5,0x314,1}, {0x1F52,0x1F50,0x300,1},
    {0x1F53,0x1F51,0x300,1}, {0x1F54,0x1F50,0x301,1}, {0x1F55,0x1F51,0x301,1}, {0x1F56,0x1F50,0x342,1}, {0x1F57,0x1F51,0x342,1},
    {0x1F59,0x3A5,0x314,1}, {0x1F5B,0x1F59,0x300,1}, {0x1F5D,0x1F59,0x301,1}, {0x1F5F,0x1F59,0x342,1}, {0x1F60,0x3C9,0x313,1},
    {0x1F61,0x3C9,0x314,1}, {0x1F62,0x1F60,0x300,1}, {0x1F63,0x1F61,0x300,1}, {0x1F64,0x1F60,0x301,1}, {0x1F65,0x1F61,0x301,1},
    {0x1F66,0x1F60,0x342,1}, {0x1F67,0x1F61,0x342,1}, {0x1F68,0x3A9,0x313,1}, {0x1F69,0x3A9,0x314,1}, {0x1F6A,0x1F68,0x300,1},
    {0x1F6B,0x1F69,0x300,1}, {0x1F6C,0x1F68,0x301,1}, {0x1F6D,0x1F69,0x301,1}, {0x1F6E,0x1F68,0x342,1}, {0x1F6F,0x1F69,0x342,1},
    {0x1F70,0x3B1,0x300,1}, {0x1F71,0x3AC,0x0,0}, {0x1F72,0x3B5,0x300,1}, {0x1F73,0x3AD,0x0,0}, {0x1F74,0x3B7,0x300,1},
    {0x1F75,0x3AE,0x0,0}, {0x1F76,0x3B9,0x300,1}, {0x1F77,0x3AF,0x0,0}, {0x1F78,0x3BF,0x300,1}, {0x1F79,0x3CC,0x0,0},
    {0x1F7A,0x3C5,0x300,1}, {0x1F7B,0x3CD,0x0,0}, {0x1F7C,0x3C9,0x300,1}, {0x1F7D,0x3CE,0x0,0}, {0x1F80,0x1F00,0x345,1},
    {0x1F81,0x1F01,0x345,1}, {0x1F82,0x1F02,0x345,1}, {0x1F83,0x1F03,0x345,1}, {0x1F84,0x1F04,0x345,1}, {0x1F85,0x1F05,0x345,1},
    {0x1F86,0x1F06,0x345,1}, {0x1F87,0x1F07,0x345,1}, {0x1F88,0x1F08,0x345,1}, {0x1F89,0x1F09,0x345,1}, {0x1F8A,0x1F0A,0x345,1},
    {0x1F8B,0x1F0B,0x345,1}, {0x1F8C,0x1F0C,0x345,1}, {0x1F8D,0x1F0D,0x345,1}, {0x1F8E,0x1F0E,0x345,1}, {0x1F8F,0x1F0F,0x345,1},
    {0x1F90,0x1F20,0x345,1}, {0x1F91,0x1F21,0x345,1}, {0x1F92,0x1F22,0x345,1}, {0x1F93,0x1F23,0x345,1}, {0x1F94,0x1F24,0x345,1},
    {0x1F95,0x1F25,0x345,1}, {0x1F96,0x1F26,0x345,1}, {0x1F97,0x1F27,0x345,1}, {0x1F98,0x1F28,0x345,1}, {0x1F99,0x1F29,0x345,1},
    {0x1F9A,0x1F2A,0x345,1}, {0x1F9B,0x1F2B,0x345,1}, {0x1F9C,0x1F2C,0x345,1}, {0x1F9D,0x1F2D,0x345,1}, {0x1F9E,0x1F2E,0x345,1},
    {0x1F9F,0x1F2F,0x345,1}, {0x1FA0,0x1F60,0x345,1}, {0x1FA1,0x1F61,0x345,1}, {0x1FA2,0x1F62,0x345,1}, {0x1FA3,0x1F63,0x345,1},
    {0x1FA4,0x1F64,0x345,1}, {0x1FA5,0x1F65,0x345,1}, {0x1FA6,0x1F66,0x345,1}, {0x1FA7,0x1F67,0x345,1}, {0x1FA8,0x1F68,0x345,1},
    {0x1FA9,0x1F69,0x345,1}, {0x1FAA,0x1F6A,0x345,1}, {0x1FAB,0x1F6B,0x345,1}, {0x1FAC,0x1F6C,0x345,1}, {0x1FAD,0x1F6D,0x345,1},
    {0x1FAE,0x1F6E,0x345,1}, {0x1FAF,0x1F6F,0x345,1}, {0x1FB0,0x3B1,0x306,1}, {0x1FB1,0x3B1,0x304,1}, {0x1FB2,0x1F70,0x345,1},
    {0x1FB3,0x3B1,0x345,1}, {0x1FB4,0x3AC,0x345,1}, {0x1FB6,0x3B1,0x342,1}, {0x1FB7,0x1FB6,0x345,1}, {0x1FB8,0x391,0x306,1},
    {0x1FB9,0x391,0x304,1}, {0x1FBA,0x391,0x300,1}, {0x1FBB,0x386,0x0,0}, {0x1FBC,0x391,0x345,1}, {0x1FBE,0x3B9,0x0,0},
    {0x1FC1,0xA8,0x342,1}, {0x1FC2,0x1F74,0x345,1}, {0x1FC3,0x3B7,0x345,1}, {0x1FC4,0x3AE,0x345,1}, {0x1FC6,0x3B7,0x342,1},
    {0x1FC7,0x1FC6,0x345,1}, {0x1FC8,0x395,0x300,1}, {0x1FC9,0x388,0x0,0}, {0x1FCA,0x397,0x300,1}, {0x1FCB,0x389,0x0,0},
    {0x1FCC,0x397,0x345,1}, {0x1FCD,0x1FBF,0x300,1}, {0x1FCE,0x1FBF,0x301,1}, {0x1FCF,0x1FBF,0x342,1}, {0x1FD0,0x3B9,0x306,1},
    {0x1FD1,0x3B9,0x304,1}, {0x1FD2,0x3CA,0x300,1}, {0x1FD3,0x390,0x0,0}, {0x1FD6,0x3B9,0x342,1}, {0x1FD7,0x3CA,0x342,1},
    {0x1FD8,0x399,0x306,1}, {0x1FD9,0x399,0x304,1}, {0x1FDA,0x399,0x300,1}, {0x1FDB,0x38A,0x0,0}, {0x1FDD,0x1FFE,0x300,1},
    {0x1FDE,0x1FFE,0x301,1}, {0x1FDF,0x1FFE,0x342,1}, {0x1FE0,0x3C5,0x306,1}, {0x1FE1,0x3C5,0x304,1}, {0x1FE2,0x3CB,0x300,1},
    {0x1FE3,0x3B0,0x0,0}, {0x1FE4,0x3C1,0x313,1}, {0x1FE5,0x3C1,0x314,1}, {0x1FE6,0x3C5,0x342,1}, {0x1FE7,0x3CB,0x342,1},
    {0x1FE8,0x3A5,0x306,1}, {0x1FE9,0x3A5,0x304,1}, {0x1FEA,0x3A5,0x300,1}, {0x1FEB,0x38E,0x0,0}, {0x1FEC,0x3A1,0x314,1},
    {0x1FED,0xA8,0x300,1}, {0x1FEE,0x385,0x0,0}, {0x1FEF,0x60,0x0,0}, {0x1FF2,0x1F7C,0x345,1}, {0x1FF3,0x3C9,0x345,1},
    {0x1FF4,0x3CE,0x345,1}, {0x1FF6,0x3C9,0x342,1}, {0x1FF7,0x1FF6,0x345,1}, {0x1FF8,0x39F,0x300,1}, {0x1FF9,0x38C,0x0,0},
    {0x1FFA,0x3A9,0x300,1}, {0x1FFB,0x38F,0x0,0}, {0x1FFC,0x3A9,0x345,1}, {0x1FFD,0xB4,0x0,0}, {0x2000,0x2002,0x0,0},
    {0x2001,0x2003,0x0,0}, {0x2126,0x3A9,0x0,0}, {0x212A,0x4B,0x0,0}, {0x212B,0xC5,0x0,0}, {0x219A,0x2190,0x338,1},
    {0x219B,0x2192,0x338,1}, {0x21AE,0x2194,0x338,1}, {0x21CD,0x21D0,0x338,1}, {0x21CE,0x21D4,0x338,1}, {0x21CF,0x21D2,0x338,1},
    {0x2204,0x2203,0x338,1}, {0x2209,0x2208,0x338,1}, {0x220C,0x220B,0x338,1}, {0x2224,0x2223,0x338,1}, {0x2226,0x2225,0x338,1},
    {0x2241,0x223C,0x338,1}, {0x2244,0x2243,0x338,1}, {0x2247,0x2245,0x338,1}, {0x2249,0x2248,0x338,1}, {0x2260,0x3D,0x338,1},
    {0x2262,0x2261,0x338,1}, {0x226D,0x224D,0x338,1}, {0x226E,0x3C,0x338,1}, {0x226F,0x3E,0x338,1}, {0x2270,0x2264,0x338,1},
    {0x2271,0x2265,0x338,1}, {0x2274,0x2272,0x338,1}, {0x2275,0x2273,0x338,1}, {0x2278,0x2276,0x338,1}, {0x2279,0x2277,0x338,1},
    {0x2280,0x227A,0x338,1}, {0x2281,0x227B,0x338,1}, {0x2284,0x2282,0x338,1}, {0x2285,0x2283,0x338,1}, {0x2288,0x2286,0x338,1},
    {0x2289,0x2287,0x338,1}, {0x22AC,0x22A2,0x338,1}, {0x22AD,0x22A8,0x338,1}, {0x22AE,0x22A9,0x338,1}, {0x22AF,0x22AB,0x338,1},
    {0x22E0,0x227C,0x338,1}, {0x22E1,0x227D,0x338,1}, {0x22E2,0x2291,0x338,1}, {0x22E3,0x2292,0x338,1}, {0x22EA,0x22B2,0x338,1},
    {0x22EB,0x22B3,0x338,1}, {0x22EC,0x22B4,0x338,1}, {0x22ED,0x22B5,0x338,1}, {0x2329,0x3008,0x0,0}, {0x232A,0x3009,0x0,0},
    {0x2ADC,0x2ADD,0x338,0}, {0x304C,0x304B,0x3099,1}, {0x304E,0x304D,0x3099,1}, {0x3050,0x304F,0x3099,1}, {0x3052,0x3051,0x3099,1},
    {0x3054,0x3053,0x3099,1}, {0x3056,0x3055,0x3099,1}, {0x3058,0x3057,0x3099,1}, {0x305A,0x3059,0x3099,1}, {0x305C,0x305B,0x3099,1},
    {0x305E,0x305D,0x3099,1}, {0x3060,0x305F,0x3099,1}, {0x3062,0x3061,0x3099,1}, {0x3065,0x3064,0x3099,1}, {0x3067,0x3066,0x3099,1},
    {0x3069,0x3068,0x3099,1}, {0x3070,0x306F,0x3099,1}, {0x3071,0x306F,0x309A,1}, {0x3073,0x3072,0x3099,1}, {0x3074,0x3072,0x309A,1},
    {0x3076,0x3075,0x3099,1}, {0x3077,0x3075,0x309A,1}, {0x3079,0x3078,0x3099,1}, {0x307A,0x3078,0x309A,1}, {0x307C,0x307B,0x3099,1},
    {0x307D,0x307B,0x309A,1}, {0x3094,0x3046,0x3099,1}, {0x309E,0x309D,0x3099,1}, {0x30AC,0x30AB,0x3099,1}, {0x30AE,0x30AD,0x3099,1},
    {0x30B0,0x30AF,0x3099,1}, {0x30B2,0x30B1,0x3099,1}, {0x30B4,0x30B3,0x3099,1}, {0x30B6,0x30B5,0x3099,1}, {0x30B8,0x30B7,0x3099,1},
    {0x30BA,0x30B9,0x3099,1}, {0x30BC,0x30BB,0x3099,1}, {0x30BE,0x30BD,0x3099,1}, {0x30C0,0x30BF,0x3099,1}, {0x30C2,0x30C1,0x3099,1},
    {0x30C5,0x30C4,0x3099,1}, {0x30C7,0x30C6,0x3099,1}, {0x30C9,0x30C8,0x3099,1}, {0x30D0,0x30CF,0x3099,1}, {0x30D1,0x30CF,0x309A,1},
    {0x30D3,0x30D2,0x3099,1}, {0x30D4,0x30D2,0x309A,1}, {0x30D6,0x30D5,0x3099,1}, {0x30D7,0x30D5,0x309A,1}, {0x30D9,0x30D8,0x3099,1},
    {0x30DA,0x30D8,0x309A,1}, {0x30DC,0x30DB,0x3099,1}, {0x30DD,0x30DB,0x309A,1}, {0x30F4,0x30A6,0x3099,1}, {0x30F7,0x30EF,0x3099,1},
    {0x30F8,0x30F0,0x3099,1}, {0x30F9,0x30F1,0x3099,1}, {0x30FA,0x30F2,0x3099,1}, {0x30FE,0x30FD,0x3099,1}, {0xF900,0x8C48,0x0,0},
    {0xF901,0x66F4,0x0,0}, {0xF902,0x8ECA,0x0,0}, {0xF903,0x8CC8,0x0,0}, {0xF904,0x6ED1,0x0,0}, {0xF905,0x4E32,0x0,0},
    {0xF906,0x53E5,0x0,0}, {0xF907,0x9F9C,0x0,0}, {0xF908,0x9F9C,0x0,0}, {0xF909,0x5951,0x0,0}, {0xF90A,0x91D1,0x0,0},
    {0xF90B,0x5587,0x0,0}, {0xF90C,0x5948,0x0,0}, {0xF90D,0x61F6,0x0,0}, {0xF90E,0x7669,0x0,0}, {0xF90F,0x7F85,0x0,0},
    {0xF910,0x863F,0x0,0}, {0xF911,0x87BA,0x0,0}, {0xF912,0x88F8,0x0,0}, {0xF913,0x908F,0x0,0}, {0xF914,0x6A02,0x0,0},
    {0xF915,0x6D1B,0x0,0}, {0xF916,0x70D9,0x0,0}, {0xF917,0x73DE,0x0,0}, {0xF918,0x843D,0x0,0}, {0xF919,0x916A,0x0,0},
    {0xF91A,0x99F1,0x0,0}, {0xF91B,0x4E82,0x0,0}, {0xF91C,0x5375,0x0,0}, {0xF91D,0x6B04,0x0,0}, {0xF91E,0x721B,0x0,0},
    {0xF91F,0x862D,0x0,0}, {0xF920,0x9E1E,0x0,0}, {0xF921,0x5D50,0x0,0}, {0xF922,0x6FEB,0x0,0}, {0xF923,0x85CD,0x0,0},
    {0xF924,0x8964,0x0,0}, {0xF925,0x62C9,0x0,0}, {0xF926,0x81D8,0x0,0}, {0xF927,0x881F,0x0,0}, {0xF928,0x5ECA,0x0,0},
    {0xF929,0x6717,0x0,0}, {0xF92A,0x6D6A,0x0,0}, {0xF92B,0x72FC,0x0,0}, {0xF92C,0x90CE,0x0,0}, {0xF92D,0x4F86,0x0,0},
    {0xF92E,0x51B7,0x0,0}, {0xF92F,0x52DE,0x0,0}, {0xF930,0x64C4,0x0,0}, {0xF931,0x6AD3,0x0,0}, {0xF932,0x7210,0x0,0},
    {0xF933,0x76E7,0x0,0}, {0xF934,0x8001,0x0,0}, {0xF935,0x8606,0x0,0}, {0xF936,0x865C,0x0,0}, {0xF937,0x8DEF,0x0,0},
    {0xF938,0x9732,0x0,0}, {0xF939,0x9B6F,0x0,0}, {0xF93A,0x9DFA,0x0,0}, {0xF93B,0x788C,0x0,0}, {0xF93C,0x797F,0x0,0},
    {0xF93D,0x7DA0,0x0,0}, {0xF93E,0x83C9,0x0,0}, {0xF93F,0x9304,0x0,0}, {0xF940,0x9E7F,0x0,0}, {0xF941,0x8AD6,0x0,0},
    {0xF942,0x58DF,0x0,0}, {0xF943,0x5F04,0x0,0}, {0xF944,0x7C60,0x0,0}, {0xF945,0x807E,0x0,0}, {0xF946,0x7262,0x0,0},
    {0xF947,0x78CA,0x0,0}, {0xF948,0x8CC2,0x0,0}, {0xF949,0x96F7,0x0,0}, {0xF94A,0x58D8,0x0,0}, {0xF94B,0x5C62,0x0,0},
    {0xF94C,0x6A13,0x0,0}, {0xF94D,0x6DDA,0x0,0}, {0xF94E,0x6F0F,0x0,0}, {0xF94F,0x7D2F,0x0,0}, {0xF950,0x7E37,0x0,0},
    {0xF951,0x964B,0x0,0}, {0xF952,0x52D2,0x0,0}, {0xF953,0x808B,0x0,0}, {0xF954,0x51DC,0x0,0}, {0xF955,0x51CC,0x0,0},
    {0xF956,0x7A1C,0x0,0}, {0xF957,0x7DBE,0x0,0}, {0xF958,0x83F1,0x0,0}, {0xF959,0x9675,0x0,0}, {0xF95A,0x8B80,0x0,0},
    {0xF95B,0x62CF,0x0,0}, {0xF95C,0x6A02,0x0,0}, {0xF95D,0x8AFE,0x0,0}, {0xF95E,0x4E39,0x0,0}, {0xF95F,0x5BE7,0x0,0},
    {0xF960,0x6012,0x0,0}, {0xF961,0x7387,0x0,0}, {0xF962,0x7570,0x0,0}, {0xF963,0x5317,0x0,0}, {0xF964,0x78FB,0x0,0},
    {0xF965,0x4FBF,0x0,0}, {0xF966,0x5FA9,0x0,0}, {0xF967,0x4E0D,0x0,0}, {0xF968,0x6CCC,0x0,0}, {0xF969,0x6578,0x0,0},
    {0xF96A,0x7D22,0x0,0}, {0xF96B,0x53C3,0x0,0}, {0xF96C,0x585E,0x0,0}, {0xF96D,0x7701,0x0,0}, {0xF96E,0x8449,0x0,0},
    {0xF96F,0x8AAA,0x0,0}, {0xF970,0x6BBA,0x0,0}, {0xF971,0x8FB0,0x0,0}, {0xF972,0x6C88,0x0,0}, {0xF973,0x62FE,0x0,0},
    {0xF974,0x82E5,0x0,0}, {0xF975,0x63A0,0x0,0}, {0xF976,0x7565,0x0,0}, {0xF977,0x4EAE,0x0,0}, {0xF978,0x5169,0x0,0},
    {0xF979,0x51C9,0x0,0}, {0xF97A,0x6881,0x0,0}, {0xF97B,0x7CE7,0x0,0}, {0xF97C,0x826F,0x0,0}, {0xF97D,0x8AD2,0x0,0},
    {0xF97E,0x91CF,0x0,0}, {0xF97F,0x52F5,0x0,0}, {0xF980,0x5442,0x0,0}, {0xF981,0x5973,0x0,0}, {0xF982,0x5EEC,0x0,0},
    {0xF983,0x65C5,0x0,0}, {0xF984,0x6FFE,0x0,0}, {0xF985,0x792A,0x0,0}, {0xF986,0x95AD,0x0,0}, {0xF987,0x9A6A,0x0,0},
    {0xF988,0x9E97,0x0,0}, {0xF989,0x9ECE,0x0,0}, {0xF98A,0x529B,0x0,0}, {0xF98B,0x66C6,0x0,0}, {0xF98C,0x6B77,0x0,0},
    {0xF98D,0x8F62,0x0,0}, {0xF98E,0x5E74,0x0,0}, {0xF98F,0x6190,0x0,0}, {0xF990,0x6200,0x0,0}, {0xF991,0x649A,0x0,0},
    {0xF992,0x6F23,0x0,0}, {0xF993,0x7149,0x0,0}, {0xF994,0x7489,0x0,0}, {0xF995,0x79CA,0x0,0}, {0xF996,0x7DF4,0x0,0},
    {0xF997,0x806F,0x0,0}, {0xF998,0x8F26,0x0,0}, {0xF999,0x84EE,0x0,0}, {0xF99A,0x9023,0x0,0}, {0xF99B,0x934A,0x0,0},
    {0xF99C,0x5217,0x0,0}, {0xF99D,0x52A3,0x0,0}, {0xF99E,0x54BD,0x0,0}, {0xF99F,0x70C8,0x0,0}, {0xF9A0,0x88C2,0x0,0},
    {0xF9A1,0x8AAA,0x0,0}, {0xF9A2,0x5EC9,0x0,0}, {0xF9A3,0x5FF5,0x0,0}, {0xF9A4,0x637B,0x0,0}, {0xF9A5,0x6BAE,0x0,0},
    {0xF9A6,0x7C3E,0x0,0}, {0xF9A7,0x7375,0x0,0}, {0xF9A8,0x4EE4,0x0,0}, {0xF9A9,0x56F9,0x0,0}, {0xF9AA,0x5BE7,0x0,0},
    {0xF9AB,0x5DBA,0x0,0}, {0xF9AC,0x601C,0x0,0}, {0xF9AD,0x73B2,0x0,0}, {0xF9AE,0x7469,0x0,0}, {0xF9AF,0x7F9A,0x0,0},
    {0xF9B0,0x8046,0x0,0}, {0xF9B1,0x9234,0x0,0}, {0xF9B2,0x96F6,0x0,0}, {0xF9B3,0x9748,0x0,0}, {0xF9B4,0x9818,0x0,0},
    {0xF9B5,0x4F8B,0x0,0}, {0xF9B6,0x79AE,0x0,0}, {0xF9B7,0x91B4,0x0,0}, {0xF9B8,0x96B8,0x0,0}, {0xF9B9,0x60E1,0x0,0},
    {0xF9BA,0x4E86,0x0,0}, {0xF9BB,0x50DA,0x0,0}, {0xF9BC,0x5BEE,0x0,0}, {0xF9BD,0x5C3F,0x0,0}, {0xF9BE,0x6599,0x0,0},
    {0xF9BF,0x6A02,0x0,0}, {0xF9C0,0x71CE,0x0,0}, {0xF9C1,0x7642,0x0,0}, {0xF9C2,0x84FC,0x0,0}, {0xF9C3,0x907C,0x0,0},
    {0xF9C4,0x9F8D,0x0,0}, {0xF9C5,0x6688,0x0,0}, {0xF9C6,0x962E,0x0,0}, {0xF9C7,0x5289,0x0,0}, {0xF9C8,0x677B,0x0,0},
    {0xF9C9,0x67F3,0x0,0}, {0xF9CA,0x6D41,0x0,0}, {0xF9CB,0x6E9C,0x0,0}, {0xF9CC,0x7409,0x0,0}, {0xF9CD,0x7559,0x0,0},
    {0xF9CE,0x786B,0x0,0}, {0xF9CF,0x7D10,0x0,0}, {0xF9D0,0x985E,0x0,0}, {0xF9D1,0x516D,0x0,0}, {0xF9D2,0x622E,0x0,0},
    {0xF9D3,0x9678,0x0,0}, {0xF9D4,0x502B,0x0,0}, {0xF9D5,0x5D19,0x0,0}, {0xF9D6,0x6DEA,0x0,0}, {0xF9D7,0x8F2A,0x0,0},
    {0xF9D8,0x5F8B,0x0,0}, {0xF9D9,0x6144,0x0,0}, {0xF9DA,0x6817,0x0,0}, {0xF9DB,0x7387,0x0,0}, {0xF9DC,0x9686,0x0,0},
    {0xF9DD,0x5229,0x0,0}, {0xF9DE,0x540F,0x0,0}, {0xF9DF,0x5C65,0x0,0}, {0xF9E0,0x6613,0x0,0}, {0xF9E1,0x674E,0x0,0},
    {0xF9E2,0x68A8,0x0,0}, {0xF9E3,0x6CE5,0x0,0}, {0xF9E4,0x7406,0x0,0}, {0xF9E5,0x75E2,0x0,0}, {0xF9E6,0x7F79,0x0,0},
    {0xF9E7,0x88CF,0x0,0}, {0xF9E8,0x88E1,0x0,0}, {0xF9E9,0x91CC,0x0,0}, {0xF9EA,0x96E2,0x0,0}, {0xF9EB,0x533F,0x0,0},
    {0xF9EC,0x6EBA,0x0,0}, {0xF9ED,0x541D,0x0,0}, {0xF9EE,0x71D0,0x0,0}, {0xF9EF,0x7498,0x0,0}, {0xF9F0,0x85FA,0x0,0},
    {0xF9F1,0x96A3,0x0,0}, {0xF9F2,0x9C57,0x0,0}, {0xF9F3,0x9E9F,0x0,0}, {0xF9F4,0x6797,0x0,0}, {0xF9F5,0x6DCB,0x0,0},
    {0xF9F6,0x81E8,0x0,0}, {0xF9F7,0x7ACB,0x0,0}, {0xF9F8,0x7B20,0x0,0}, {0xF9F9,0x7C92,0x0,0}, {0xF9FA,0x72C0,0x0,0},
    {0xF9FB,0x7099,0x0,0}, {0xF9FC,0x8B58,0x0,0}, {0xF9FD,0x4EC0,0x0,0}, {0xF9FE,0x8336,0x0,0}, {0xF9FF,0x523A,0x0,0},
    {0xFA00,0x5207,0x0,0}, {0xFA01,0x5EA6,0x0,0}, {0xFA02,0x62D3,0x0,0}, {0xFA03,0x7CD6,0x0,0}, {0xFA04,0x5B85,0x0,0},
    {0xFA05,0x6D1E,0x0,0}, {0xFA06,0x66B4,0x0,0}, {0xFA07,0x8F3B,0x0,0}, {0xFA08,0x884C,0x0,0}, {0xFA09,0x964D,0x0,0},
    {0xFA0A,0x898B,0x0,0}, {0xFA0B,0x5ED3,0x0,0}, {0xFA0C,0x5140,0x0,0}, {0xFA0D,0x55C0,0x0,0}, {0xFA10,0x585A,0x0,0},
    {0xFA12,0x6674,0x0,0}, {0xFA15,0x51DE,0x0,0}, {0xFA16,0x732A,0x0,0}, {0xFA17,0x76CA,0x0,0}, {0xFA18,0x793C,0x0,0},
    {0xFA19,0x795E,0x0,0}, {0xFA1A,0x7965,0x0,0}, {0xFA1B,0x798F,0x0,0}, {0xFA1C,0x9756,0x0,0}, {0xFA1D,0x7CBE,0x0,0},
    {0xFA1E,0x7FBD,0x0,0}, {0xFA20,0x8612,0x0,0}, {0xFA22,0x8AF8,0x0,0}, {0xFA25,0x9038,0x0,0}, {0xFA26,0x90FD,0x0,0},
    {0xFA2A,0x98EF,0x0,0}, {0xFA2B,0x98FC,0x0,0}, {0xFA2C,0x9928,0x0,0}, {0xFA2D,0x9DB4,0x0,0}, {0xFA2E,0x90DE,0x0,0},
    {0xFA2F,0x96B7,0x0,0}, {0xFA30,0x4FAE,0x0,0}, {0xFA31,0x50E7,0x0,0}, {0xFA32,0x514D,0x0,0}, {0xFA33,0x52C9,0x0,0},
    {0xFA34,0x52E4,0x0,0}, {0xFA35,0x5351,0x0,0}, {0xFA36,0x559D,0x0,0}, {0xFA37,0x5606,0x0,0}, {0xFA38,0x5668,0x0,0},
    {0xFA39,0x5840,0x0,0}, {0xFA3A,0x58A8,0x0,0}, {0xFA3B,0x5C64,0x0,0}, {0xFA3C,0x5C6E,0x0,0}, {0xFA3D,0x6094,0x0,0},
    {0xFA3E,0x6168,0x0,0}, {0xFA3F,0x618E,0x0,0}, {0xFA40,0x61F2,0x0,0}, {0xFA41,0x654F,0x0,0}, {0xFA42,0x65E2,0x0,0},
    {0xFA43,0x6691,0x0,0}, {0xFA44,0x6885,0x0,0}, {0xFA45,0x6D77,0x0,0}, {0xFA46,0x6E1A,0x0,0}, {0xFA47,0x6F22,0x0,0},
    {0xFA48,0x716E,0x0,0}, {0xFA49,0x722B,0x0,0}, {0xFA4A,0x7422,0x0,0}, {0xFA4B,0x7891,0x0,0}, {0xFA4C,0x793E,0x0,0},
    {0xFA4D,0x7949,0x0,0}, {0xFA4E,0x7948,0x0,0}, {0xFA4F,0x7950,0x0,0}, {0xFA50,0x7956,0x0,0}, {0xFA51,0x795D,0x0,0},
    {0xFA52,0x798D,0x0,0}, {0xFA53,0x798E,0x0,0}, {0xFA54,0x7A40,0x0,0}, {0xFA55,0x7A81,0x0,0}, {0xFA56,0x7BC0,0x0,0},
    {0xFA57,0x7DF4,0x0,0}, {0xFA58,0x7E09,0x0,0}, {0xFA59,0x7E41,0x0,0}, {0xFA5A,0x7F72,0x0,0}, {0xFA5B,0x8005,0x0,0},
    {0xFA5C,0x81ED,0x0,0}, {0xFA5D,0x8279,0x0,0}, {0xFA5E,0x8279,0x0,0}, {0xFA5F,0x8457,0x0,0}, {0xFA60,0x8910,0x0,0},
    {0xFA61,0x8996,0x0,0}, {0xFA62,0x8B01,0x0,0}, {0xFA63,0x8B39,0x0,0}, {0xFA64,0x8CD3,0x0,0}, {0xFA65,0x8D08,0x0,0},
    {0xFA66,0x8FB6,0x0,0}, {0xFA67,0x9038,0x0,0}, {0xFA68,0x96E3,0x0,0}, {0xFA69,0x97FF,0x0,0}, {0xFA6A,0x983B,0x0,0},
    {0xFA6B,0x6075,0x0,0}, {0xFA6C,0x242EE,0x0,0}, {0xFA6D,0x8218,0x0,0}, {0xFA70,0x4E26,0x0,0}, {0xFA71,0x51B5,0x0,0},
    {0xFA72,0x5168,0x0,0}, {0xFA73,0x4F80,0x0,0}, {0xFA74,0x5145,0x0,0}, {0xFA75,0x5180,0x0,0}, {0xFA76,0x52C7,0x0,0},
    {0xFA77,0x52FA,0x0,0}, {0xFA78,0x559D,0x0,0}, {0xFA79,0x5555,0x0,0}, {0xFA7A,0x5599,0x0,0}, {0xFA7B,0x55E2,0x0,0},
    {0xFA7C,0x585A,0x0,0}, {0xFA7D,0x58B3,0x0,0}, {0xFA7E,0x5944,0x0,0}, {0xFA7F,0x5954,0x0,0}, {0xFA80,0x5A62,0x0,0},
    {0xFA81,0x5B28,0x0,0}, {0xFA82,0x5ED2,0x0,0}, {0xFA83,0x5ED9,0x0,0}, {0xFA84,0x5F69,0x0,0}, {0xFA85,0x5FAD,0x0,0},
    {0xFA86,0x60D8,0x0,0}, {0xFA87,0x614E,0x0,0}, {0xFA88,0x6108,0x0,0}, {0xFA89,0x618E,0x0,0}, {0xFA8A,0x6160,0x0,0},
    {0xFA8B,0x61F2,0x0,0}, {0xFA8C,0x6234,0x0,0}, {0xFA8D,0x63C4,0x0,0}, {0xFA8E,0x641C,0x0,0}, {0xFA8F,0x6452,0x0,0},
    {0xFA90,0x6556,0x0,0}, {0xFA91,0x6674,0x0,0}, {0xFA92,0x6717,0x0,0}, {0xFA93,0x671B,0x0,0}, {0xFA94,0x6756,0x0,0},
    {0xFA95,0x6B79,0x0,0}, {0xFA96,0x6BBA,0x0,0}, {0xFA97,0x6D41,0x0,0}, {0xFA98,0x6EDB,0x0,0}, {0xFA99,0x6ECB,0x0,0},
    {0xFA9A,0x6F22,0x0,0}, {0xFA9B,0x701E,0x0,0}, {0xFA9C,0x716E,0x0,0}, {0xFA9D,0x77A7,0x0,0}, {0xFA9E,0x7235,0x0,0},
    {0xFA9F,0x72AF,0x0,0}, {0xFAA0,0x732A,0x0,0}, {0xFAA1,0x7471,0x0,0}, {0xFAA2,0x7506,0x0,0}, {0xFAA3,0x753B,0x0,0},
    {0xFAA4,0x761D,0x0,0}, {0xFAA5,0x761F,0x0,0}, {0xFAA6,0x76CA,0x0,0}, {0xFAA7,0x76DB,0x0,0}, {0xFAA8,0x76F4,0x0,0},
    {0xFAA9,0x774A,0x0,0}, {0xFAAA,0x7740,0x0,0}, {0xFAAB,0x78CC,0x0,0}, {0xFAAC,0x7AB1,0x0,0}, {0xFAAD,0x7BC0,0x0,0},
    {0xFAAE,0x7C7B,0x0,0}, {0xFAAF,0x7D5B,0x0,0}, {0xFAB0,0x7DF4,0x0,0}, {0xFAB1,0x7F3E,0x0,0}, {0xFAB2,0x8005,0x0,0},
    {0xFAB3,0x8352,0x0,0}, {0xFAB4,0x83EF,0x0,0}, {0xFAB5,0x8779,0x0,0}, {0xFAB6,0x8941,0x0,0}, {0xFAB7,0x8986,0x0,0},
    {0xFAB8,0x8996,0x0,0}, {0xFAB9,0x8ABF,0x0,0}, {0xFABA,0x8AF8,0x0,0}, {0xFABB,0x8ACB,0x0,0}, {0xFABC,0x8B01,0x0,0},
    {0xFABD,0x8AFE,0x0,0}, {0xFABE,0x8AED,0x0,0}, {0xFABF,0x8B39,0x0,0}, {0xFAC0,0x8B8A,0x0,0}, {0xFAC1,0x8D08,0x0,0},
    {0xFAC2,0x8F38,0x0,0}, {0xFAC3,0x9072,0x0,0}, {0xFAC4,0x9199,0x0,0}, {0xFAC5,0x9276,0x0,0}, {0xFAC6,0x967C,0x0,0},
    {0xFAC7,0x96E3,0x0,0}, {0xFAC8,0x9756,0x0,0}, {0xFAC9,0x97DB,0x0,0}, {0xFACA,0x97FF,0x0,0}, {0xFACB,0x980B,0x0,0},
    {0xFACC,0x983B,0x0,0}, {0xFACD,0x9B12,0x0,0}, {0xFACE,0x9F9C,0x0,0}, {0xFACF,0x2284A,0x0,0}, {0xFAD0,0x22844,0x0,0},
    {0xFAD1,0x233D5,0x0,0}, {0xFAD2,0x3B9D,0x0,0}, {0xFAD3,0x4018,0x0,0}, {0xFAD4,0x4039,0x0,0}, {0xFAD5,0x25249,0x0,0},
    {0xFAD6,0x25CD0,0x0,0}, {0xFAD7,0x27ED3,0x0,0}, {0xFAD8,0x9F43,0x0,0}, {0xFAD9,0x9F8E,0x0,0}, {0xFB1D,0x5D9,0x5B4,0},
    {0xFB1F,0x5F2,0x5B7,0}, {0xFB2A,0x5E9,0x5C1,0}, {0xFB2B,0x5E9,0x5C2,0}, {0xFB2C,0xFB49,0x5C1,0}, {0xFB2D,0xFB49,0x5C2,0},
    {0xFB2E,0x5D0,0x5B7,0}, {0xFB2F,0x5D0,0x5B8,0}, {0xFB30,0x5D0,0x5BC,0}, {0xFB31,0x5D1,0x5BC,0}, {0xFB32,0x5D2,0x5BC,0},
    {0xFB33,0x5D3,0x5BC,0}, {0xFB34,0x5D4,0x5BC,0}, {0xFB35,0x5D5,0x5BC,0}, {0xFB36,0x5D6,0x5BC,0}, {0xFB38,0x5D8,0x5BC,0},
    {0xFB39,0x5D9,0x5BC,0}, {0xFB3A,0x5DA,0x5BC,0}, {0xFB3B,0x5DB,0x5BC,0}, {0xFB3C,0x5DC,0x5BC,0}, {0xFB3E,0x5DE,0x5BC,0},
    {0xFB40,0x5E0,0x5BC,0}, {0xFB41,0x5E1,0x5BC,0}, {0xFB43,0x5E3,0x5BC,0}, {0xFB44,0x5E4,0x5BC,0}, {0xFB46,0x5E6,0x5BC,0},
    {0xFB47,0x5E7,0x5BC,0}, {0xFB48,0x5E8,0x5BC,0}, {0xFB49,0x5E9,0x5BC,0}, {0xFB4A,0x5EA,0x5BC,0}, {0xFB4B,0x5D5,0x5B9,0},
    {0xFB4C,0x5D1,0x5BF,0}, {0xFB4D,0x5DB,0x5BF,0}, {0xFB4E,0x5E4,0x5BF,0}, {0x105C9,0x105D2,0x307,1}, {0x105E4,0x105DA,0x307,1},
    {0x1109A,0x11099,0x110BA,1}, {0x1109C,0x1109B,0x110BA,1}, {0x110AB,0x110A5,0x110BA,1}, {0x1112E,0x11131,0x11127,1}, {0x1112F,0x11132,0x11127,1},
    {0x1134B,0x11347,0x1133E,1}, {0x1134C,0x11347,0x11357,1}, {0x11383,0x11382,0x113C9,1}, {0x11385,0x11384,0x113BB,1}, {0x1138E,0x1138B,0x113C2,1},
    {0x11391,0x11390,0x113C9,1}, {0x113C5,0x113C2,0x113C2,1}, {0x113C7,0x113C2,0x113B8,1}, {0x113C8,0x113C2,0x113C9,1}, {0x114BB,0x114B9,0x114BA,1},
    {0x114BC,0x114B9,0x114B0,1}, {0x114BE,0x114B9,0x114BD,1}, {0x115BA,0x115B8,0x115AF,1}, {0x115BB,0x115B9,0x115AF,1}, {0x11938,0x11935,0x11930,1},
    {0x16121,0x1611E,0x1611E,1}, {0x16122,0x1611E,0x16129,1}, {0x16123,0x1611E,0x1611F,1}, {0x16124,0x16129,0x1611F,1}, {0x16125,0x1611E,0x16120,1},
    {0x16126,0x16121,0x1611F,1}, {0x16127,0x16122,0x1611F,1}, {0x16128,0x16121,0x16120,1}, {0x16D68,0x16D67,0x16D67,1}, {0x16D69,0x16D63,0x16D67,1},
    {0x16D6A,0x16D69,0x16D67,1}, {0x1D15E,0x1D157,0x1D165,0}, {0x1D15F,0x1D158,0x1D165,0}, {0x1D160,0x1D15F,0x1D16E,0}, {0x1D161,0x1D15F,0x1D16F,0},
    {0x1D162,0x1D15F,0x1D170,0}, {0x1D163,0x1D15F,0x1D171,0}, {0x1D164,0x1D15F,0x1D172,0}, {0x1D1BB,0x1D1B9,0x1D165,0}, {0x1D1BC,0x1D1BA,0x1D165,0},
    {0x1D1BD,0x1D1BB,0x1D16E,0}, {0x1D1BE,0x1D1BC,0x1D16E,0}, {0x1D1BF,0x1D1BB,0x1D16F,0}, {0x1D1C0,0x1D1BC,0x1D16F,0}, {0x2F800,0x4E3D,0x0,0},
    {0x2F801,0x4E38,0x0,0}, {0x2F802,0x4E41,0x0,0}, {0x2F803,0x20122,0x0,0}, {0x2F804,0x4F60,0x0,0}, {0x2F805,0x4FAE,0x0,0},
    {0x2F806,0x4FBB,0x0,0}, {0x2F807,0x5002,0x0,0}, {0x2F808,0x507A,0x0,0}, {0x2F809,0x5099,0x0,0}, {0x2F80A,0x50E7,0x0,0},
    {0x2F80B,0x50CF,0x0,0}, {0x2F80C,0x349E,0x0,0}, {0x2F80D,0x2063A,0x0,0}, {0x2F80E,0x514D,0x0,0}, {0x2F80F,0x5154,0x0,0},
    {0x2F810,0x5164,0x0,0}, {0x2F811,0x5177,0x0,0}, {0x2F812,0x2051C,0x0,0}, {0x2F813,0x34B9,0x0,0}, {0x2F814,0x5167,0x0,0},
    {0x2F815,0x518D,0x0,0}, {0x2F816,0x2054B,0x0,0}, {0x2F817,0x5197,0x0,0}, {0x2F818,0x51A4,0x0,0}, {0x2F819,0x4ECC,0x0,0},
    {0x2F81A,0x51AC,0x0,0}, {0x2F81B,0x51B5,0x0,0}, {0x2F81C,0x291DF,0x0,0}, {0x2F81D,0x51F5,0x0,0}, {0x2F81E,0x5203,0x0,0},
    {0x2F81F,0x34DF,0x0,0}, {0x2F820,0x523B,0x0,0}, {0x2F821,0x5246,0x0,0}, {0x2F822,0x5272,0x0,0}, {0x2F823,0x5277,0x0,0},
    {0x2F824,0x3515,0x0,0}, {0x2F825,0x52C7,0x0,0}, {0x2F826,0x52C9,0x0,0}, {0x2F827,0x52E4,0x0,0}, {0x2F828,0x52FA,0x0,0},
    {0x2F829,0x5305,0x0,0}, {0x2F82A,0x5306,0x0,0}, {0x2F82B,0x5317,0x0,0}, {0x2F82C,0x5349,0x0,0}, {0x2F82D,0x5351,0x0,0},
    {0x2F82E,0x535A,0x0,0}, {0x2F82F,0x5373,0x0,0}, {0x2F830,0x537D,0x0,0}, {0x2F831,0x537F,0x0,0}, {0x2F832,0x537F,0x0,0},
    {0x2F833,0x537F,0x0,0}, {0x2F834,0x20A2C,0x0,0}, {0x2F835,0x7070,0x0,0}, {0x2F836,0x53CA,0x0,0}, {0x2F837,0x53DF,0x0,0},
    {0x2F838,0x20B63,0x0,0}, {0x2F839,0x53EB,0x0,0}, {0x2F83A,0x53F1,0x0,0}, {0x2F83B,0x5406,0x0,0}, {0x2F83C,0x549E,0x0,0},
    {0x2F83D,0x5438,0x0,0}, {0x2F83E,0x5448,0x0,0}, {0x2F83F,0x5468,0x0,0}, {0x2F840,0x54A2,0x0,0}, {0x2F841,0x54F6,0x0,0},
    {0x2F842,0x5510,0x0,0}, {0x2F843,0x5553,0x0,0}, {0x2F844,0x5563,0x0,0}, {0x2F845,0x5584,0x0,0}, {0x2F846,0x5584,0x0,0},
    {0x2F847,0x5599,0x0,0}, {0x2F848,0x55AB,0x0,0}, {0x2F849,0x55B3,0x0,0}, {0x2F84A,0x55C2,0x0,0}, {0x2F84B,0x5716,0x0,0},
    {0x2F84C,0x5606,0x0,0}, {0x2F84D,0x5717,0x0,0}, {0x2F84E,0x5651,0x0,0}, {0x2F84F,0x5674,0x0,0}, {0x2F850,0x5207,0x0,0},
    {0x2F851,0x58EE,0x0,0}, {0x2F852,0x57CE,0x0,0}, {0x2F853,0x57F4,0x0,0}, {0x2F854,0x580D,0x0,0}, {0x2F855,0x578B,0x0,0},
    {0x2F856,0x5832,0x0,0}, {0x2F857,0x5831,0x0,0}, {0x2F858,0x58AC,0x0,0}, {0x2F859,0x214E4,0x0,0}, {0x2F85A,0x58F2,0x0,0},
    {0x2F85B,0x58F7,0x0,0}, {0x2F85C,0x5906,0x0,0}, {0x2F85D,0x591A,0x0,0}, {0x2F85E,0x5922,0x0,0}, {0x2F85F,0x5962,0x0,0},
    {0x2F860,0x216A8,0x0,0}, {0x2F861,0x216EA,0x0,0}, {0x2F862,0x59EC,0x0,0}, {0x2F863,0x5A1B,0x0,0}, {0x2F864,0x5A27,0x0,0},
    {0x2F865,0x59D8,0x0,0}, {0x2F866,0x5A66,0x0,0}, {0x2F867,0x36EE,0x0,0}, {0x2F868,0x36FC,0x0,0}, {0x2F869,0x5B08,0x0,0},
    {0x2F86A,0x5B3E,0x0,0}, {0x2F86B,0x5B3E,0x0,0}, {0x2F86C,0x219C8,0x0,0}, {0x2F86D,0x5BC3,0x0,0}, {0x2F86E,0x5BD8,0x0,0},
    {0x2F86F,0x5BE7,0x0,0}, {0x2F870,0x5BF3,0x0,0}, {0x2F871,0x21B18,0x0,0}, {0x2F872,0x5BFF,0x0,0}, {0x2F873,0x5C06,0x0,0},
    {0x2F874,0x5F53,0x0,0}, {0x2F875,0x5C22,0x0,0}, {0x2F876,0x3781,0x0,0}, {0x2F877,0x5C60,0x0,0}, {0x2F878,0x5C6E,0x0,0},
    {0x2F879,0x5CC0,0x0,0}, {0x2F87A,0x5C8D,0x0,0}, {0x2F87B,0x21DE4,0x0,0}, {0x2F87C,0x5D43,0x0,0}, {0x2F87D,0x21DE6,0x0,0},
    {0x2F87E,0x5D6E,0x0,0}, {0x2F87F,0x5D6B,0x0,0}, {0x2F880,0x5D7C,0x0,0}, {0x2F881,0x5DE1,0x0,0}, {0x2F882,0x5DE2,0x0,0},
    {0x2F883,0x382F,0x0,0}, {0x2F884,0x5DFD,0x0,0}, {0x2F885,0x5E28,0x0,0}, {0x2F886,0x5E3D,0x0,0}, {0x2F887,0x5E69,0x0,0},
    {0x2F888,0x3862,0x0,0}, {0x2F889,0x22183,0x0,0}, {0x2F88A,0x387C,0x0,0}, {0x2F88B,0x5EB0,0x0,0}, {0x2F88C,0x5EB3,0x0,0},
    {0x2F88D,0x5EB6,0x0,0}, {0x2F88E,0x5ECA,0x0,0}, {0x2F88F,0x2A392,0x0,0}, {0x2F890,0x5EFE,0x0,0}, {0x2F891,0x22331,0x0,0},
    {0x2F892,0x22331,0x0,0}, {0x2F893,0x8201,0x0,0}, {0x2F894,0x5F22,0x0,0}, {0x2F895,0x5F22,0x0,0}, {0x2F896,0x38C7,0x0,0},
    {0x2F897,0x232B8,0x0,0}, {0x2F898,0x261DA,0x0,0}, {0x2F899,0x5F62,0x0,0}, {0x2F89A,0x5F6B,0x0,0}, {0x2F89B,0x38E3,0x0,0},
    {0x2F89C,0x5F9A,0x0,0}, {0x2F89D,0x5FCD,0x0,0}, {0x2F89E,0x5FD7,0x0,0}, {0x2F89F,0x5FF9,0x0,0}, {0x2F8A0,0x6081,0x0,0},
    {0x2F8A1,0x393A,0x0,0}, {0x2F8A2,0x391C,0x0,0}, {0x2F8A3,0x6094,0x0,0}, {0x2F8A4,0x226D4,0x0,0}, {0x2F8A5,0x60C7,0x0,0},
    {0x2F8A6,0x6148,0x0,0}, {0x2F8A7,0x614C,0x0,0}, {0x2F8A8,0x614E,0x0,0}, {0x2F8A9,0x614C,0x0,0}, {0x2F8AA,0x617A,0x0,0},
    {0x2F8AB,0x618E,0x0,0}, {0x2F8AC,0x61B2,0x0,0}, {0x2F8AD,0x61A4,0x0,0}, {0x2F8AE,0x61AF,0x0,0}, {0x2F8AF,0x61DE,0x0,0},
    {0x2F8B0,0x61F2,0x0,0}, {0x2F8B1,0x61F6,0x0,0}, {0x2F8B2,0x6210,0x0,0}, {0x2F8B3,0x621B,0x0,0}, {0x2F8B4,0x625D,0x0,0},
    {0x2F8B5,0x62B1,0x0,0}, {0x2F8B6,0x62D4,0x0,0}, {0x2F8B7,0x6350,0x0,0}, {0x2F8B8,0x22B0C,0x0,0}, {0x2F8B9,0x633D,0x0,0},
    {0x2F8BA,0x62FC,0x0,0}, {0x2F8BB,0x6368,0x0,0}, {0x2F8BC,0x6383,0x0,0}, {0x2F8BD,0x63E4,0x0,0}, {0x2F8BE,0x22BF1,0x0,0},
    {0x2F8BF,0x6422,0x0,0}, {0x2F8C0,0x63C5,0x0,0}, {0x2F8C1,0x63A9,0x0,0}, {0x2F8C2,0x3A2E,0x0,0}, {0x2F8C3,0x6469,0x0,0},
    {0x2F8C4,0x647E,0x0,0}, {0x2F8C5,0x649D,0x0,0}, {0x2F8C6,0x6477,0x0,0}, {0x2F8C7,0x3A6C,0x0,0}, {0x2F8C8,0x654F,0x0,0},
    {0x2F8C9,0x656C,0x0,0}, {0x2F8CA,0x2300A,0x0,0}, {0x2F8CB,0x65E3,0x0,0}, {0x2F8CC,0x66F8,0x0,0}, {0x2F8CD,0x6649,0x0,0},
    {0x2F8CE,0x3B19,0x0,0}, {0x2F8CF,0x6691,0x0,0}, {0x2F8D0,0x3B08,0x0,0}, {0x2F8D1,0x3AE4,0x0,0}, {0x2F8D2,0x5192,0x0,0},
    {0x2F8D3,0x5195,0x0,0}, {0x2F8D4,0x6700,0x0,0}, {0x2F8D5,0x669C,0x0,0}, {0x2F8D6,0x80AD,0x0,0}, {0x2F8D7,0x43D9,0x0,0},
    {0x2F8D8,0x6717,0x0,0}, {0x2F8D9,0x671B,0x0,0}, {0x2F8DA,0x6721,0x0,0}, {0x2F8DB,0x675E,0x0,0}, {0x2F8DC,0x6753,0x0,0},
    {0x2F8DD,0x233C3,0x0,0}, {0x2F8DE,0x3B49,0x0,0}, {0x2F8DF,0x67FA,0x0,0}, {0x2F8E0,0x6785,0x0,0}, {0x2F8E1,0x6852,0x0,0},
    {0x2F8E2,0x6885,0x0,0}, {0x2F8E3,0x2346D,0x0,0}, {0x2F8E4,0x688E,0x0,0}, {0x2F8E5,0x681F,0x0,0}, {0x2F8E6,0x6914,0x0,0},
    {0x2F8E7,0x3B9D,0x0,0}, {0x2F8E8,0x6942,0x0,0}, {0x2F8E9,0x69A3,0x0,0}, {0x2F8EA,0x69EA,0x0,0}, {0x2F8EB,0x6AA8,0x0,0},
    {0x2F8EC,0x236A3,0x0,0}, {0x2F8ED,0x6ADB,0x0,0}, {0x2F8EE,0x3C18,0x0,0}, {0x2F8EF,0x6B21,0x0,0}, {0x2F8F0,0x238A7,0x0,0},
    {0x2F8F1,0x6B54,0x0,0}, {0x2F8F2,0x3C4E,0x0,0}, {0x2F8F3,0x6B72,0x0,0}, {0x2F8F4,0x6B9F,0x0,0}, {0x2F8F5,0x6BBA,0x0,0},
    {0x2F8F6,0x6BBB,0x0,0}, {0x2F8F7,0x23A8D,0x0,0}, {0x2F8F8,0x21D0B,0x0,0}, {0x2F8F9,0x23AFA,0x0,0}, {0x2F8FA,0x6C4E,0x0,0},
    {0x2F8FB,0x23CBC,0x0,0}, {0x2F8FC,0x6CBF,0x0,0}, {0x2F8FD,0x6CCD,0x0,0}, {0x2F8FE,0x6C67,0x0,0}, {0x2F8FF,0x6D16,0x0,0},
    {0x2F900,0x6D3E,0x0,0}, {0x2F901,0x6D77,0x0,0}, {0x2F902,0x6D41,0x0,0}, {0x2F903,0x6D69,0x0,0}, {0x2F904,0x6D78,0x0,0},
    {0x2F905,0x6D85,0x0,0}, {0x2F906,0x23D1E,0x0,0}, {0x2F907,0x6D34,0x0,0}, {0x2F908,0x6E2F,0x0,0}, {0x2F909,0x6E6E,0x0,0},
    {0x2F90A,0x3D33,0x0,0}, {0x2F90B,0x6ECB,0x0,0}, {0x2F90C,0x6EC7,0x0,0}, {0x2F90D,0x23ED1,0x0,0}, {0x2F90E,0x6DF9,0x0,0},
    {0x2F90F,0x6F6E,0x0,0}, {0x2F910,0x23F5E,0x0,0}, {0x2F911,0x23F8E,0x0,0}, {0x2F912,0x6FC6,0x0,0}, {0x2F913,0x7039,0x0,0},
    {0x2F914,0x701E,0x0,0}, {0x2F915,0x701B,0x0,0}, {0x2F916,0x3D96,0x0,0}, {0x2F917,0x704A,0x0,0}, {0x2F918,0x707D,0x0,0},
    {0x2F919,0x7077,0x0,0}, {0x2F91A,0x70AD,0x0,0}, {0x2F91B,0x20525,0x0,0}, {0x2F91C,0x7145,0x0,0}, {0x2F91D,0x24263,0x0,0},
    {0x2F91E,0x719C,0x0,0}, {0x2F91F,0x243AB,0x0,0}, {0x2F920,0x7228,0x0,0}, {0x2F921,0x7235,0x0,0}, {0x2F922,0x7250,0x0,0},
    {0x2F923,0x24608,0x0,0}, {0x2F924,0x7280,0x0,0}, {0x2F925,0x7295,0x0,0}, {0x2F926,0x24735,0x0,0}, {0x2F927,0x24814,0x0,0},
    {0x2F928,0x737A,0x0,0}, {0x2F929,0x738B,0x0,0}, {0x2F92A,0x3EAC,0x0,0}, {0x2F92B,0x73A5,0x0,0}, {0x2F92C,0x3EB8,0x0,0},
    {0x2F92D,0x3EB8,0x0,0}, {0x2F92E,0x7447,0x0,0}, {0x2F92F,0x745C,0x0,0}, {0x2F930,0x7471,0x0,0}, {0x2F931,0x7485,0x0,0},
    {0x2F932,0x74CA,0x0,0}, {0x2F933,0x3F1B,0x0,0}, {0x2F934,0x7524,0x0,0}, {0x2F935,0x24C36,0x0,0}, {0x2F936,0x753E,0x0,0},
    {0x2F937,0x24C92,0x0,0}, {0x2F938,0x7570,0x0,0}, {0x2F939,0x2219F,0x0,0}, {0x2F93A,0x7610,0x0,0}, {0x2F93B,0x24FA1,0x0,0},
    {0x2F93C,0x24FB8,0x0,0}, {0x2F93D,0x25044,0x0,0}, {0x2F93E,0x3FFC,0x0,0}, {0x2F93F,0x4008,0x0,0}, {0x2F940,0x76F4,0x0,0},
    {0x2F941,0x250F3,0x0,0}, {0x2F942,0x250F2,0x0,0}, {0x2F943,0x25119,0x0,0}, {0x2F944,0x25133,0x0,0}, {0x2F945,0x771E,0x0,0},
    {0x2F946,0x771F,0x0,0}, {0x2F947,0x771F,0x0,0}, {0x2F948,0x774A,0x0,0}, {0x2F949,0x4039,0x0,0}, {0x2F94A,0x778B,0x0,0},
    {0x2F94B,0x4046,0x0,0}, {0x2F94C,0x4096,0x0,0}, {0x2F94D,0x2541D,0x0,0}, {0x2F94E,0x784E,0x0,0}, {0x2F94F,0x788C,0x0,0},
    {0x2F950,0x78CC,0x0,0}, {0x2F951,0x40E3,0x0,0}, {0x2F952,0x25626,0x0,0}, {0x2F953,0x7956,0x0,0}, {0x2F954,0x2569A,0x0,0},
    {0x2F955,0x256C5,0x0,0}, {0x2F956,0x798F,0x0,0}, {0x2F957,0x79EB,0x0,0}, {0x2F958,0x412F,0x0,0}, {0x2F959,0x7A40,0x0,0},
    {0x2F95A,0x7A4A,0x0,0}, {0x2F95B,0x7A4F,0x0,0}, {0x2F95C,0x2597C,0x0,0}, {0x2F95D,0x25AA7,0x0,0}, {0x2F95E,0x25AA7,0x0,0},
    {0x2F95F,0x7AEE,0x0,0}, {0x2F960,0x4202,0x0,0}, {0x2F961,0x25BAB,0x0,0}, {0x2F962,0x7BC6,0x0,0}, {0x2F963,0x7BC9,0x0,0},
    {0x2F964,0x4227,0x0,0}, {0x2F965,0x25C80,0x0,0}, {0x2F966,0x7CD2,0x0,0}, {0x2F967,0x42A0,0x0,0}, {0x2F968,0x7CE8,0x0,0},
    {0x2F969,0x7CE3,0x0,0}, {0x2F96A,0x7D00,0x0,0}, {0x2F96B,0x25F86,0x0,0}, {0x2F96C,0x7D63,0x0,0}, {0x2F96D,0x4301,0x0,0},
    {0x2F96E,0x7DC7,0x0,0}, {0x2F96F,0x7E02,0x0,0}, {0x2F970,0x7E45,0x0,0}, {0x2F971,0x4334,0x0,0}, {0x2F972,0x26228,0x0,0},
    {0x2F973,0x26247,0x0,0}, {0x2F974,0x4359,0x0,0}, {0x2F975,0x262D9,0x0,0}, {0x2F976,0x7F7A,0x0,0}, {0x2F977,0x2633E,0x0,0},
    {0x2F978,0x7F95,0x0,0}, {0x2F979,0x7FFA,0x0,0}, {0x2F97A,0x8005,0x0,0}, {0x2F97B,0x264DA,0x0,0}, {0x2F97C,0x26523,0x0,0},
    {0x2F97D,0x8060,0x0,0}, {0x2F97E,0x265A8,0x0,0}, {0x2F97F,0x8070,0x0,0}, {0x2F980,0x2335F,0x0,0}, {0x2F981,0x43D5,0x0,0},
    {0x2F982,0x80B2,0x0,0}, {0x2F983,0x8103,0x0,0}, {0x2F984,0x440B,0x0,0}, {0x2F985,0x813E,0x0,0}, {0x2F986,0x5AB5,0x0,0},
    {0x2F987,0x267A7,0x0,0}, {0x2F988,0x267B5,0x0,0}, {0x2F989,0x23393,0x0,0}, {0x2F98A,0x2339C,0x0,0}, {0x2F98B,0x8201,0x0,0},
    {0x2F98C,0x8204,0x0,0}, {0x2F98D,0x8F9E,0x0,0}, {0x2F98E,0x446B,0x0,0}, {0x2F98F,0x8291,0x0,0}, {0x2F990,0x828B,0x0,0},
    {0x2F991,0x829D,0x0,0}, {0x2F992,0x52B3,0x0,0}, {0x2F993,0x82B1,0x0,0}, {0x2F994,0x82B3,0x0,0}, {0x2F995,0x82BD,0x0,0},
    {0x2F996,0x82E6,0x0,0}, {0x2F997,0x26B3C,0x0,0}, {0x2F998,0x82E5,0x0,0}, {0x2F999,0x831D,0x0,0}, {0x2F99A,0x8363,0x0,0},
    {0x2F99B,0x83AD,0x0,0}, {0x2F99C,0x8323,0x0,0}, {0x2F99D,0x83BD,0x0,0}, {0x2F99E,0x83E7,0x0,0}, {0x2F99F,0x8457,0x0,0},
    {0x2F9A0,0x8353,0x0,0}, {0x2F9A1,0x83CA,0x0,0}, {0x2F9A2,0x83CC,0x0,0}, {0x2F9A3,0x83DC,0x0,0}, {0x2F9A4,0x26C36,0x0,0},
    {0x2F9A5,0x26D6B,0x0,0}, {0x2F9A6,0x26CD5,0x0,0}, {0x2F9A7,0x452B,0x0,0}, {0x2F9A8,0x84F1,0x0,0}, {0x2F9A9,0x84F3,0x0,0},
    {0x2F9AA,0x8516,0x0,0}, {0x2F9AB,0x273CA,0x0,0}, {0x2F9AC,0x8564,0x0,0}, {0x2F9AD,0x26F2C,0x0,0}, {0x2F9AE,0x455D,0x0,0},
    {0x2F9AF,0x4561,0x0,0}, {0x2F9B0,0x26FB1,0x0,0}, {0x2F9B1,0x270D2,0x0,0}, {0x2F9B2,0x456B,0x0,0}, {0x2F9B3,0x8650,0x0,0},
    {0x2F9B4,0x865C,0x0,0}, {0x2F9B5,0x8667,0x0,0}, {0x2F9B6,0x8669,0x0,0}, {0x2F9B7,0x86A9,0x0,0}, {0x2F9B8,0x8688,0x0,0},
    {0x2F9B9,0x870E,0x0,0}, {0x2F9BA,0x86E2,0x0,0}, {0x2F9BB,0x8779,0x0,0}, {0x2F9BC,0x8728,0x0,0}, {0x2F9BD,0x876B,0x0,0},
    {0x2F9BE,0x8786,0x0,0}, {0x2F9BF,0x45D7,0x0,0}, {0x2F9C0,0x87E1,0x0,0}, {0x2F9C1,0x8801,0x0,0}, {0x2F9C2,0x45F9,0x0,0},
    {0x2F9C3,0x8860,0x0,0}, {0x2F9C4,0x8863,0x0,0}, {0x2F9C5,0x27667,0x0,0}, {0x2F9C6,0x88D7,0x0,0}, {0x2F9C7,0x88DE,0x0,0},
    {0x2F9C8,0x4635,0x0,0}, {0x2F9C9,0x88FA,0x0,0}, {0x2F9CA,0x34BB,0x0,0}, {0x2F9CB,0x278AE,0x0,0}, {0x2F9CC,0x27966,0x0,0},
    {0x2F9CD,0x46BE,0x0,0}, {0x2F9CE,0x46C7,0x0,0}, {0x2F9CF,0x8AA0,0x0,0}, {0x2F9D0,0x8AED,0x0,0}, {0x2F9D1,0x8B8A,0x0,0},
    {0x2F9D2,0x8C55,0x0,0}, {0x2F9D3,0x27CA8,0x0,0}, {0x2F9D4,0x8CAB,0x0,0}, {0x2F9D5,0x8CC1,0x0,0}, {0x2F9D6,0x8D1B,0x0,0},
    {0x2F9D7,0x8D77,0x0,0}, {0x2F9D8,0x27F2F,0x0,0}, {0x2F9D9,0x20804,0x0,0}, {0x2F9DA,0x8DCB,0x0,0}, {0x2F9DB,0x8DBC,0x0,0},
    {0x2F9DC,0x8DF0,0x0,0}, {0x2F9DD,0x208DE,0x0,0}, {0x2F9DE,0x8ED4,0x0,0}, {0x2F9DF,0x8F38,0x0,0}, {0x2F9E0,0x285D2,0x0,0},
    {0x2F9E1,0x285ED,0x0,0}, {0x2F9E2,0x9094,0x0,0}, {0x2F9E3,0x90F1,0x0,0}, {0x2F9E4,0x9111,0x0,0}, {0x2F9E5,0x2872E,0x0,0},
    {0x2F9E6,0x911B,0x0,0}, {0x2F9E7,0x9238,0x0,0}, {0x2F9E8,0x92D7,0x0,0}, {0x2F9E9,0x92D8,0x0,0}, {0x2F9EA,0x927C,0x0,0},
    {0x2F9EB,0x93F9,0x0,0}, {0x2F9EC,0x9415,0x0,0}, {0x2F9ED,0x28BFA,0x0,0}, {0x2F9EE,0x958B,0x0,0}, {0x2F9EF,0x4995,0x0,0},
    {0x2F9F0,0x95B7,0x0,0}, {0x2F9F1,0x28D77,0x0,0}, {0x2F9F2,0x49E6,0x0,0}, {0x2F9F3,0x96C3,0x0,0}, {0x2F9F4,0x5DB2,0x0,0},
    {0x2F9F5,0x9723,0x0,0}, {0x2F9F6,0x29145,0x0,0}, {0x2F9F7,0x2921A,0x0,0}, {0x2F9F8,0x4A6E,0x0,0}, {0x2F9F9,0x4A76,0x0,0},
    {0x2F9FA,0x97E0,0x0,0}, {0x2F9FB,0x2940A,0x0,0}, {0x2F9FC,0x4AB2,0x0,0}, {0x2F9FD,0x29496,0x0,0}, {0x2F9FE,0x980B,0x0,0},
    {0x2F9FF,0x980B,0x0,0}, {0x2FA00,0x9829,0x0,0}, {0x2FA01,0x295B6,0x0,0}, {0x2FA02,0x98E2,0x0,0}, {0x2FA03,0x4B33,0x0,0},
    {0x2FA04,0x9929,0x0,0}, {0x2FA05,0x99A7,0x0,0}, {0x2FA06,0x99C2,0x0,0}, {0x2FA07,0x99FE,0x0,0}, {0x2FA08,0x4BCE,0x0,0},
    {0x2FA09,0x29B30,0x0,0}, {0x2FA0A,0x9B12,0x0,0}, {0x2FA0B,0x9C40,0x0,0}, {0x2FA0C,0x9CFD,0x0,0}, {0x2FA0D,0x4CCE,0x0,0},
    {0x2FA0E,0x4CED,0x0,0}, {0x2FA0F,0x9D67,0x0,0}, {0x2FA10,0x2A0CE,0x0,0}, {0x2FA11,0x4CF8,0x0,0}, {0x2FA12,0x2A105,0x0,0},
    {0x2FA13,0x2A20E,0x0,0}, {0x2FA14,0x2A291,0x0,0}, {0x2FA15,0x9EBB,0x0,0}, {0x2FA16,0x4D56,0x0,0}, {0x2FA17,0x9EF9,0x0,0},
    {0x2FA18,0x9EFE,0x0,0}, {0x2FA19,0x9F05,0x0,0}, {0x2FA1A,0x9F0F,0x0,0}, {0x2FA1B,0x9F16,0x0,0}, {0x2FA1C,0x9F3B,0x0,0},
    {0x2FA1D,0x2A600,0x0,0},
};

// Canonical combining classes other than 0: {lo, hi, class}: 393 ranges
static const uint32_t unicode_combining_ranges[][3] = {
    {0x300,0x314,230}, {0x315,0x315,232}, {0x316,0x319,220}, {0x31A,0x31A,232}, {0x31B,0x31B,216}, {0x31C,0x320,220},
    {0x321,0x322,202}, {0x323,0x326,220}, {0x327,0x328,202}, {0x329,0x333,220}, {0x334,0x338,1}, {0x339,0x33C,220},
    {0x33D,0x344,230}, {0x345,0x345,240}, {0x346,0x346,230}, {0x347,0x349,220}, {0x34A,0x34C,230}, {0x34D,0x34E,220},
    {0x350,0x352,230}, {0x353,0x356,220}, {0x357,0x357,230}, {0x358,0x358,232}, {0x359,0x35A,220}, {0x35B,0x35B,230},
    {0x35C,0x35C,233}, {0x35D,0x35E,234}, {0x35F,0x35F,233}, {0x360,0x361,234}, {0x362,0x362,233}, {0x363,0x36F,230},
    {0x483,0x487,230}, {0x591,0x591,220}, {0x592,0x595,230}, {0x596,0x596,220}, {0x597,0x599,230}, {0x59A,0x59A,222},
    {0x59B,0x59B,220}, {0x59C,0x5A1,230}, {0x5A2,0x5A7,220}, {0x5A8,0x5A9,230}, {0x5AA,0x5AA,220}, {0x5AB,0x5AC,230},
    {0x5AD,0x5AD,222}, {0x5AE,0x5AE,228}, {0x5AF,0x5AF,230}, {0x5B0,0x5B0,10}, {0x5B1,0x5B1,11}, {0x5B2,0x5B2,12},
    {0x5B3,0x5B3,13}, {0x5B4,0x5B4,14}, {0x5B5,0x5B5,15}, {0x5B6,0x5B6,16}, {0x5B7,0x5B7,17}, {0x5B8,0x5B8,18},
    {0x5B9,0x5BA,19}, {0x5BB,0x5BB,20}, {0x5BC,0x5BC,21}, {0x5BD,0x5BD,22}, {0x5BF,0x5BF,23}, {0x5C1,0x5C1,24},
    {0x5C2,0x5C2,25}, {0x5C4,0x5C4,230}, {0x5C5,0x5C5,220}, {0x5C7,0x5C7,18}, {0x610,0x617,230}, {0x618,0x618,30},
    {0x619,0x619,31}, {0x61A,0x61A,32}, {0x64B,0x64B,27}, {0x64C,0x64C,28}, {0x64D,0x64D,29}, {0x64E,0x64E,30},
    {0x64F,0x64F,31}, {0x650,0x650,32}, {0x651,0x651,33}, {0x652,0x652,34}, {0x653,0x654,230}, {0x655,0x656,220},
    {0x657,0x65B,230}, {0x65C,0x65C,220}, {0x65D,0x65E,230}, {0x65F,0x65F,220}, {0x670,0x670,35}, {0x6D6,0x6DC,230},
    {0x6DF,0x6E2,230}, {0x6E3,0x6E3,220}, {0x6E4,0x6E4,230}, {0x6E7,0x6E8,230}, {0x6EA,0x6EA,220}, {0x6EB,0x6EC,230},
    {0x6ED,0x6ED,220}, {0x711,0x711,36}, {0x730,0x730,230}, {0x731,0x731,220}, {0x732,0x733,230}, {0x734,0x734,220},
    {0x735,0x736,230}, {0x737,0x739,220}, {0x73A,0x73A,230}, {0x73B,0x73C,220}, {0x73D,0x73D,230}, {0x73E,0x73E,220},
    {0x73F,0x741,230}, {0x742,0x742,220}, {0x743,0x743,230}, {0x744,0x744,220}, {0x745,0x745,230}, {0x746,0x746,220},
    {0x747,0x747,230}, {0x748,0x748,220}, {0x749,0x74A,230}, {0x7EB,0x7F1,230}, {0x7F2,0x7F2,220}, {0x7F3,0x7F3,230},
    {0x7FD,0x7FD,220}, {0x816,0x819,230}, {0x81B,0x823,230}, {0x825,0x827,230}, {0x829,0x82D,230}, {0x859,0x85B,220},
    {0x897,0x898,230}, {0x899,0x89B,220}, {0x89C,0x89F,230}, {0x8CA,0x8CE,230}, {0x8CF,0x8D3,220}, {0x8D4,0x8E1,230},
    {0x8E3,0x8E3,220}, {0x8E4,0x8E5,230}, {0x8E6,0x8E6,220}, {0x8E7,0x8E8,230}, {0x8E9,0x8E9,220}, {0x8EA,0x8EC,230},
    {0x8ED,0x8EF,220}, {0x8F0,0x8F0,27}, {0x8F1,0x8F1,28}, {0x8F2,0x8F2,29}, {0x8F3,0x8F5,230}, {0x8F6,0x8F6,220},
    {0x8F7,0x8F8,230}, {0x8F9,0x8FA,220}, {0x8FB,0x8FF,230}, {0x93C,0x93C,7}, {0x94D,0x94D,9}, {0x951,0x951,230},
    {0x952,0x952,220}, {0x953,0x954,230}, {0x9BC,0x9BC,7}, {0x9CD,0x9CD,9}, {0x9FE,0x9FE,230}, {0xA3C,0xA3C,7},
    {0xA4D,0xA4D,9}, {0xABC,0xABC,7}, {0xACD,0xACD,9}, {0xB3C,0xB3C,7}, {0xB4D,0xB4D,9}, {0xBCD,0xBCD,9},
    {0xC3C,0xC3C,7}, {0xC4D,0xC4D,9}, {0xC55,0xC55,84}, {0xC56,0xC56,91}, {0xCBC,0xCBC,7}, {0xCCD,0xCCD,9},
    {0xD3B,0xD3C,9}, {0xD4D,0xD4D,9}, {0xDCA,0xDCA,9}, {0xE38,0xE39,103}, {0xE3A,0xE3A,9}, {0xE48,0xE4B,107},
    {0xEB8,0xEB9,118}, {0xEBA,0xEBA,9}, {0xEC8,0xECB,122}, {0xF18,0xF19,220}, {0xF35,0xF35,220}, {0xF37,0xF37,220},
    {0xF39,0xF39,216}, {0xF71,0xF71,129}, {0xF72,0xF72,130}, {0xF74,0xF74,132}, {0xF7A,0xF7D,130}, {0xF80,0xF80,130},
    {0xF82,0xF83,230}, {0xF84,0xF84,9}, {0xF86,0xF87,230}, {0xFC6,0xFC6,220}, {0x1037,0x1037,7}, {0x1039,0x103A,9},
    {0x108D,0x108D,220}, {0x135D,0x135F,230}, {0x1714,0x1715,9}, {0x1734,0x1734,9}, {0x17D2,0x17D2,9}, {0x17DD,0x17DD,230},
    {0x18A9,0x18A9,228}, {0x1939,0x1939,222}, {0x193A,0x193A,230}, {0x193B,0x193B,220}, {0x1A17,0x1A17,230}, {0x1A18,0x1A18,220},
    {0x1A60,0x1A60,9}, {0x1A75,0x1A7C,230}, {0x1A7F,0x1A7F,220}, {0x1AB0,0x1AB4,230}, {0x1AB5,0x1ABA,220}, {0x1ABB,0x1ABC,230},
    {0x1ABD,0x1ABD,220}, {0x1ABF,0x1AC0,220}, {0x1AC1,0x1AC2,230}, {0x1AC3,0x1AC4,220}, {0x1AC5,0x1AC9,230}, {0x1ACA,0x1ACA,220},
    {0x1ACB,0x1ACE,230}, {0x1B34,0x1B34,7}, {0x1B44,0x1B44,9}, {0x1B6B,0x1B6B,230}, {0x1B6C,0x1B6C,220}, {0x1B6D,0x1B73,230},
    {0x1BAA,0x1BAB,9}, {0x1BE6,0x1BE6,7}, {0x1BF2,0x1BF3,9}, {0x1C37,0x1C37,7}, {0x1CD0,0x1CD2,230}, {0x1CD4,0x1CD4,1},
    {0x1CD5,0x1CD9,220}, {0x1CDA,0x1CDB,230}, {0x1CDC,0x1CDF,220}, {0x1CE0,0x1CE0,230}, {0x1CE2,0x1CE8,1}, {0x1CED,0x1CED,220},
    {0x1CF4,0x1CF4,230}, {0x1CF8,0x1CF9,230}, {0x1DC0,0x1DC1,230}, {0x1DC2,0x1DC2,220}, {0x1DC3,0x1DC9,230}, {0x1DCA,0x1DCA,220},
    {0x1DCB,0x1DCC,230}, {0x1DCD,0x1DCD,234}, {0x1DCE,0x1DCE,214}, {0x1DCF,0x1DCF,220}, {0x1DD0,0x1DD0,202}, {0x1DD1,0x1DF5,230},
    {0x1DF6,0x1DF6,232}, {0x1DF7,0x1DF8,228}, {0x1DF9,0x1DF9,220}, {0x1DFA,0x1DFA,218}, {0x1DFB,0x1DFB,230}, {0x1DFC,0x1DFC,233},
    {0x1DFD,0x1DFD,220}, {0x1DFE,0x1DFE,230}, {0x1DFF,0x1DFF,220}, {0x20D0,0x20D1,230}, {0x20D2,0x20D3,1}, {0x20D4,0x20D7,230},
    {0x20D8,0x20DA,1}, {0x20DB,0x20DC,230}, {0x20E1,0x20E1,230}, {0x20E5,0x20E6,1}, {0x20E7,0x20E7,230}, {0x20E8,0x20E8,220},
    {0x20E9,0x20E9,230}, {0x20EA,0x20EB,1}, {0x20EC,0x20EF,220}, {0x20F0,0x20F0,230}, {0x2CEF,0x2CF1,230}, {0x2D7F,0x2D7F,9},
    {0x2DE0,0x2DFF,230}, {0x302A,0x302A,218}, {0x302B,0x302B,228}, {0x302C,0x302C,232}, {0x302D,0x302D,222}, {0x302E,0x302F,224},
    {0x3099,0x309A,8}, {0xA66F,0xA66F,230}, {0xA674,0xA67D,230}, {0xA69E,0xA69F,230}, {0xA6F0,0xA6F1,230}, {0xA806,0xA806,9},
    {0xA82C,0xA82C,9}, {0xA8C4,0xA8C4,9}, {0xA8E0,0xA8F1,230}, {0xA92B,0xA92D,220}, {0xA953,0xA953,9}, {0xA9B3,0xA9B3,7},
    {0xA9C0,0xA9C0,9}, {0xAAB0,0xAAB0,230}, {0xAAB2,0xAAB3,230}, {0xAAB4,0xAAB4,220}, {0xAAB7,0xAAB8,230}, {0xAABE,0xAABF,230},
    {0xAAC1,0xAAC1,230}, {0xAAF6,0xAAF6,9}, {0xABED,0xABED,9}, {0xFB1E,0xFB1E,26}, {0xFE20,0xFE26,230}, {0xFE27,0xFE2D,220},
    {0xFE2E,0xFE2F,230}, {0x101FD,0x101FD,220}, {0x102E0,0x102E0,220}, {0x10376,0x1037A,230}, {0x10A0D,0x10A0D,220}, {0x10A0F,0x10A0F,230},
    {0x10A38,0x10A38,230}, {0x10A39,0x10A39,1}, {0x10A3A,0x10A3A,220}, {0x10A3F,0x10A3F,9}, {0x10AE5,0x10AE5,230}, {0x10AE6,0x10AE6,220},
    {0x10D24,0x10D27,230}, {0x10D69,0x10D6D,230}, {0x10EAB,0x10EAC,230}, {0x10EFD,0x10EFF,220}, {0x10F46,0x10F47,220}, {0x10F48,0x10F4A,230},
    {0x10F4B,0x10F4B,220}, {0x10F4C,0x10F4C,230}, {0x10F4D,0x10F50,220}, {0x10F82,0x10F82,230}, {0x10F83,0x10F83,220}, {0x10F84,0x10F84,230},
    {0x10F85,0x10F85,220}, {0x11046,0x11046,9}, {0x11070,0x11070,9}, {0x1107F,0x1107F,9}, {0x110B9,0x110B9,9}, {0x110BA,0x110BA,7},
    {0x11100,0x11102,230}, {0x11133,0x11134,9}, {0x11173,0x11173,7}, {0x111C0,0x111C0,9}, {0x111CA,0x111CA,7}, {0x11235,0x11235,9},
    {0x11236,0x11236,7}, {0x112E9,0x112E9,7}, {0x112EA,0x112EA,9}, {0x1133B,0x1133C,7}, {0x1134D,0x1134D,9}, {0x11366,0x1136C,230},
    {0x11370,0x11374,230}, {0x113CE,0x113D0,9}, {0x11442,0x11442,9}, {0x11446,0x11446,7}, {0x1145E,0x1145E,230}, {0x114C2,0x114C2,9},
    {0x114C3,0x114C3,7}, {0x115BF,0x115BF,9}, {0x115C0,0x115C0,7}, {0x1163F,0x1163F,9}, {0x116B6,0x116B6,9}, {0x116B7,0x116B7,7},
    {0x1172B,0x1172B,9}, {0x11839,0x11839,9}, {0x1183A,0x1183A,7}, {0x1193D,0x1193E,9}, {0x11943,0x11943,7}, {0x119E0,0x119E0,9},
    {0x11A34,0x11A34,9}, {0x11A47,0x11A47,9}, {0x11A99,0x11A99,9}, {0x11C3F,0x11C3F,9}, {0x11D42,0x11D42,7}, {0x11D44,0x11D45,9},
    {0x11D97,0x11D97,9}, {0x11F41,0x11F42,9}, {0x1612F,0x1612F,9}, {0x16AF0,0x16AF4,1}, {0x16B30,0x16B36,230}, {0x16FF0,0x16FF1,6},
    {0x1BC9E,0x1BC9E,1}, {0x1D165,0x1D166,216}, {0x1D167,0x1D169,1}, {0x1D16D,0x1D16D,226}, {0x1D16E,0x1D172,216}, {0x1D17B,0x1D182,220},
    {0x1D185,0x1D189,230}, {0x1D18A,0x1D18B,220}, {0x1D1AA,0x1D1AD,230}, {0x1D242,0x1D244,230}, {0x1E000,0x1E006,230}, {0x1E008,0x1E018,230},
    {0x1E01B,0x1E021,230}, {0x1E023,0x1E024,230}, {0x1E026,0x1E02A,230}, {0x1E08F,0x1E08F,230}, {0x1E130,0x1E136,230}, {0x1E2AE,0x1E2AE,230},
    {0x1E2EC,0x1E2EF,230}, {0x1E4EC,0x1E4ED,232}, {0x1E4EE,0x1E4EE,220}, {0x1E4EF,0x1E4EF,230}, {0x1E5EE,0x1E5EE,230}, {0x1E5EF,0x1E5EF,220},
    {0x1E8D0,0x1E8D6,220}, {0x1E944,0x1E949,230}, {0x1E94A,0x1E94A,7},
};
// --- end shared-copy: unicode-nfc ---
// --- begin shared-copy: bpe-tokenizer ---
// ----------------------------------------------------------------------------
// UTF-8 and the three Unicode classes of the pre-tokenizer

// Every character falls in exactly one class. The pattern's alternatives map onto them:
// ' ?\p{L}+' is a run of LETTER, ' ?\p{N}+' of NUMBER, ' ?[^\s\p{L}\p{N}]+' of OTHER, and the
// two \s+ alternatives handle runs of SPACE.
enum { CHAR_LETTER, CHAR_NUMBER, CHAR_SPACE, CHAR_OTHER };

static int in_ranges(const uint32_t (*ranges)[2], size_t num_ranges, uint32_t cp) {
    // binary search in sorted, non-overlapping [lo, hi] ranges
    size_t lo = 0, hi = num_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < ranges[mid][0]) { hi = mid; }
        else if (cp > ranges[mid][1]) { lo = mid + 1; }
        else { return 1; }
    }
    return 0;
}
#define NUM_RANGES(table) (sizeof(table) / sizeof(table[0]))

static int codepoint_class(uint32_t cp) {
    // ASCII is almost all of English text, so it skips the binary searches
    if (cp < 128) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') { return CHAR_LETTER; }
        if (cp >= '0' && cp <= '9') { return CHAR_NUMBER; }
        if (cp == ' ' || (cp >= '\t' && cp <= '\r')) { return CHAR_SPACE; }
        return CHAR_OTHER;
    }
    if (in_ranges(unicode_letter_ranges, NUM_RANGES(unicode_letter_ranges), cp)) { return CHAR_LETTER; }
    if (in_ranges(unicode_number_ranges, NUM_RANGES(unicode_number_ranges), cp)) { return CHAR_NUMBER; }
    if (in_ranges(unicode_space_ranges, NUM_RANGES(unicode_space_ranges), cp)) { return CHAR_SPACE; }
    return CHAR_OTHER;
}

// --- begin shared-copy: utf8-decode ---
// Decodes the UTF-8 character at s[0..n), n >= 1. Returns its length in bytes (1 to 4), or 0
// if s does not start a valid character: a stray continuation byte, a truncated sequence, an
// overlong encoding, a surrogate or a code point above U+10FFFF (what Rust's str rejects).
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    size_t len;
    uint32_t min;  // smallest code point that needs this many bytes (rejects overlong forms)
    if (b < 0x80) { *cp = b; return 1; }
    else if ((b & 0xE0) == 0xC0) { len = 2; *cp = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; *cp = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; *cp = b & 0x07; min = 0x10000; }
    else { return 0; }
    if (len > n) { return 0; }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { return 0; }
        *cp = (*cp << 6) | (s[i] & 0x3F);
    }
    if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) { return 0; }
    return len;
}
// --- end shared-copy: utf8-decode ---

// The class and byte length of the character at s[0..n), n >= 1. A byte that does not start
// a valid character counts as a one-byte OTHER character (see the file header).
static size_t next_char(const uint8_t *s, size_t n, int *cls) {
    uint32_t cp;
    size_t len = utf8_decode(s, n, &cp);
    if (len == 0) { *cls = CHAR_OTHER; return 1; }
    *cls = codepoint_class(cp);
    return len;
}

// ----------------------------------------------------------------------------
// Unicode NFC: Qwen2's tokenizer normalizes every text to it before anything else

// The canonical combining class of cp: 0 for a starter (most characters), else the order
// in which marks stack onto it.
static int nfc_class(uint32_t cp) {
    if (cp < 0x300) { return 0; }
    size_t lo = 0, hi = NUM_RANGES(unicode_combining_ranges);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_combining_ranges[mid][0]) { hi = mid; }
        else if (cp > unicode_combining_ranges[mid][1]) { lo = mid + 1; }
        else { return (int)unicode_combining_ranges[mid][2]; }
    }
    return 0;
}

// Hangul syllables decompose into their letters (jamo), and back, by arithmetic (Unicode 3.12)
#define HANGUL_S 0xAC00u // the first syllable
#define HANGUL_L 0x1100u // leading consonants (19)
#define HANGUL_V 0x1161u // vowels (21)
#define HANGUL_T 0x11A7u // trailing consonants, HANGUL_T + 1 ... (27; 0: none)
#define HANGUL_SYLLABLES (19u * 21u * 28u)

// Appends cp's full canonical decomposition (at most 4 code points) to out[*n ...].
static void nfc_decompose(uint32_t cp, uint32_t *out, size_t *n) {
    if (cp - HANGUL_S < HANGUL_SYLLABLES) {
        uint32_t s = cp - HANGUL_S;
        out[(*n)++] = HANGUL_L + s / (21 * 28);
        out[(*n)++] = HANGUL_V + s % (21 * 28) / 28;
        if (s % 28 != 0) { out[(*n)++] = HANGUL_T + s % 28; }
        return;
    }
    size_t lo = 0, hi = cp < 0xC0 ? 0 : NUM_RANGES(unicode_decompositions);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_decompositions[mid][0]) { hi = mid; }
        else if (cp > unicode_decompositions[mid][0]) { lo = mid + 1; }
        else {
            nfc_decompose(unicode_decompositions[mid][1], out, n);
            if (unicode_decompositions[mid][2] != 0) { nfc_decompose(unicode_decompositions[mid][2], out, n); }
            return;
        }
    }
    out[(*n)++] = cp;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

// The character that a + b compose into, or 0. The pairs (those the table marks) are put in
// order of (a, b) once, on the first call, for a binary search: key (a << 21 | b) << 21 | result.
static uint32_t nfc_compose(uint32_t a, uint32_t b) {
    if (a - HANGUL_L < 19 && b - HANGUL_V < 21) { return HANGUL_S + ((a - HANGUL_L) * 21 + (b - HANGUL_V)) * 28; }
    if (a - HANGUL_S < HANGUL_SYLLABLES && (a - HANGUL_S) % 28 == 0 && b - HANGUL_T - 1 < 27) { return a + (b - HANGUL_T); }
    static uint64_t pairs[NUM_RANGES(unicode_decompositions)];
    static size_t num_pairs = 0;
    if (num_pairs == 0) {
        for (size_t e = 0; e < NUM_RANGES(unicode_decompositions); e++) {
            const uint32_t *d = unicode_decompositions[e];
            if (d[3]) { pairs[num_pairs++] = ((uint64_t)d[1] << 21 | d[2]) << 21 | d[0]; }
        }
        qsort(pairs, num_pairs, sizeof(uint64_t), compare_u64);
    }
    uint64_t key = (uint64_t)a << 21 | b;
    size_t lo = 0, hi = num_pairs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k = pairs[mid] >> 21;
        if (key < k) { hi = mid; }
        else if (key > k) { lo = mid + 1; }
        else { return (uint32_t)(pairs[mid] & 0x1FFFFF); }
    }
    return 0;
}

// text[0..len) in NFC (Unicode's canonical composition, UAX #15): decompose every character
// fully, put each run of combining marks in order of their classes, then compose each mark
// with the last starter before it unless a mark in between blocks it. Returns a malloc'ed
// copy (*out_len bytes, at most 3 x len) or NULL if the text is ASCII, which NFC never
// changes. A byte that is not UTF-8 passes through as itself, composing with nothing.
static uint8_t *nfc_normalize(const uint8_t *text, size_t len, size_t *out_len) {
    size_t i = 0;
    while (i < len && text[i] < 0x80) { i++; }
    if (i == len) { return NULL; }
    uint32_t *cps = (uint32_t *)mallocCheck((4 * len + 4) * sizeof(uint32_t));
    size_t n = 0;
    for (i = 0; i < len;) { // 1. decompose (a stray byte b becomes 0x110000 + b)
        uint32_t cp;
        size_t step = utf8_decode(text + i, len - i, &cp);
        if (step == 0) { cps[n++] = 0x110000u + text[i]; i++; continue; }
        nfc_decompose(cp, cps, &n);
        i += step;
    }
    // 2. each run of marks (class > 0) in class order, stably: an insertion sort for a few
    // marks, a counting sort over the 255 classes for more (a text of many thousands of
    // marks in a row stays linear)
    for (size_t a = 0; a < n;) {
        if (nfc_class(cps[a]) == 0) { a++; continue; }
        size_t b = a;
        while (b < n && nfc_class(cps[b]) != 0) { b++; }
        if (b - a <= 16) {
            for (size_t k = a + 1; k < b; k++) {
                int cls = nfc_class(cps[k]);
                for (size_t j = k; j > a && nfc_class(cps[j - 1]) > cls; j--) {
                    uint32_t t = cps[j]; cps[j] = cps[j - 1]; cps[j - 1] = t;
                }
            }
        } else {
            size_t count[256] = {0};
            uint32_t *run = (uint32_t *)mallocCheck((b - a) * sizeof(uint32_t));
            for (size_t k = a; k < b; k++) { count[nfc_class(cps[k])]++; }
            for (int c = 1, total = 0; c < 256; c++) { int here = (int)count[c]; count[c] = (size_t)total; total += here; }
            for (size_t k = a; k < b; k++) { run[count[nfc_class(cps[k])]++] = cps[k]; }
            memcpy(cps + a, run, (b - a) * sizeof(uint32_t));
            free(run);
        }
        a = b;
    }
    size_t kept = 1, starter = 0; // 3. compose (the algorithm of UAX #15's sample code)
    int last_class = nfc_class(cps[0]) != 0 ? 256 : 0; // 256: no starter yet
    for (size_t k = 1; k < n; k++) {
        int cls = nfc_class(cps[k]);
        uint32_t composite = last_class < cls || last_class == 0 ? nfc_compose(cps[starter], cps[k]) : 0;
        if (composite != 0 && last_class != 256) {
            cps[starter] = composite;
            continue;
        }
        if (cls == 0) { starter = kept; }
        last_class = cls;
        cps[kept++] = cps[k];
    }
    uint8_t *out = (uint8_t *)mallocCheck(4 * kept + 1);
    size_t used = 0;
    for (size_t k = 0; k < kept; k++) { // back to UTF-8
        uint32_t c = cps[k];
        if (c >= 0x110000u) { out[used++] = (uint8_t)(c - 0x110000u); }
        else if (c < 0x80) { out[used++] = (uint8_t)c; }
        else if (c < 0x800) { out[used++] = (uint8_t)(0xC0 | c >> 6); out[used++] = (uint8_t)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) {
            out[used++] = (uint8_t)(0xE0 | c >> 12); out[used++] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
            out[used++] = (uint8_t)(0x80 | (c & 0x3F));
        } else {
            out[used++] = (uint8_t)(0xF0 | c >> 18); out[used++] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
            out[used++] = (uint8_t)(0x80 | (c >> 6 & 0x3F)); out[used++] = (uint8_t)(0x80 | (c & 0x3F));
        }
    }
    free(cps);
    *out_len = used;
    return out;
}

// ----------------------------------------------------------------------------
// pre-tokenizers: each family's regex, by hand

// Returns where the piece that starts at text[i] ends (exclusive), i < n. tiktoken runs the
// regex with find_iter: at each position the alternatives are tried left to right and the
// first that matches wins, and since every character is a letter, number, space or other,
// some alternative always matches, so the pieces tile the text with no gaps. We go through
// the alternatives in the same order.
static size_t pretoken_end_gpt2(const uint8_t *text, size_t n, size_t i) {
    // 's 't 're 've 'm 'll 'd: ASCII apostrophe and lower case only, exactly as GPT-2 did.
    // They win over everything else, so "'sand" is "'s" + "and".
    if (text[i] == '\'' && i + 1 < n) {
        uint8_t c = text[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') { return i + 2; }
        if (i + 2 < n) {
            uint8_t d = text[i + 2];
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) { return i + 3; }
        }
    }
    int cls;
    size_t j = i + next_char(text + i, n - i, &cls);
    // ' ?X+': one plain space (U+0020 only) glues onto a following run of letters, numbers or
    // others. A space before more white space (or at the end) is left to the \s rules below.
    if (text[i] == ' ' && j < n) {
        int next_cls;
        size_t next_len = next_char(text + j, n - j, &next_cls);
        if (next_cls != CHAR_SPACE) { cls = next_cls; j += next_len; }
    }
    if (cls != CHAR_SPACE) {
        // the runs are greedy: take every following character of the same class
        while (j < n) {
            int c;
            size_t len = next_char(text + j, n - j, &c);
            if (c != cls) { break; }
            j += len;
        }
        return j;
    }
    // A run of white space. '\s+(?!\S)' takes the whole run and, if a non-space follows,
    // backtracks one character, so that character's space can glue onto the next word
    // (" \n  word" -> " \n " + " word"). At the end of the text it keeps the whole run.
    // If the run is a single character followed by a non-space, the backtracking leaves
    // nothing, and the last alternative '\s+' takes that one character.
    size_t last_start = i;  // where the run's last character starts
    while (j < n) {
        int c;
        size_t len = next_char(text + j, n - j, &c);
        if (c != CHAR_SPACE) { break; }
        last_start = j;
        j += len;
    }
    if (j == n) { return n; }
    if (last_start > i) { return last_start; }
    return j;
}

// the class of the character at text[j], j < n
static int class_at(const uint8_t *text, size_t n, size_t j) {
    int cls;
    next_char(text + j, n - j, &cls);
    return cls;
}

// Llama 3's rule (Qwen2's with max_digits 1), the regex of their tokenizer.json:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// What changed from GPT-2's: contractions in any case; a word takes one character in front
// of it that is not a letter, number or line break (so "(hello" and "\tb" are pieces, not
// only " hello"); numbers in groups of at most three digits (Qwen2: one); punctuation takes
// the line breaks after it; a run of white space that holds line breaks ends after its last.
static size_t pretoken_end_llama3(const uint8_t *text, size_t n, size_t i, int max_digits) {
    if (text[i] == '\'' && i + 1 < n) { // | 0x20 lower-cases an ASCII letter
        uint8_t c = text[i + 1] | 0x20;
        if (c == 's' || c == 't' || c == 'm' || c == 'd') { return i + 2; }
        if (i + 2 < n && text[i + 1] == 0xC5 && text[i + 2] == 0xBF) { return i + 3; } // U+017F, long s: (?i) folds it to s
        if (i + 2 < n) {
            uint8_t d = text[i + 2] | 0x20;
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) { return i + 3; }
        }
    }
    int cls;
    size_t j = i + next_char(text + i, n - i, &cls);
    // [^\r\n\p{L}\p{N}]?\p{L}+: letters, perhaps after one character that is none of those
    int lead = cls != CHAR_LETTER && cls != CHAR_NUMBER && text[i] != '\r' && text[i] != '\n';
    if (cls == CHAR_LETTER || (lead && j < n && class_at(text, n, j) == CHAR_LETTER)) {
        while (j < n) {
            int c;
            size_t len = next_char(text + j, n - j, &c);
            if (c != CHAR_LETTER) { break; }
            j += len;
        }
        return j;
    }
    if (cls == CHAR_NUMBER) { // \p{N}{1,3}
        for (int digits = 1; digits < max_digits && j < n; digits++) {
            int c;
            size_t len = next_char(text + j, n - j, &c);
            if (c != CHAR_NUMBER) { break; }
            j += len;
        }
        return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*': punctuation, perhaps after a space, then any line breaks
    size_t k = text[i] == ' ' && j < n && class_at(text, n, j) == CHAR_OTHER ? j : i;
    if (class_at(text, n, k) == CHAR_OTHER) {
        while (k < n) {
            int c;
            size_t len = next_char(text + k, n - k, &c);
            if (c != CHAR_OTHER) { break; }
            k += len;
        }
        while (k < n && (text[k] == '\r' || text[k] == '\n')) { k++; }
        return k;
    }
    // white space from here. '\s*[\r\n]+': if the run holds line breaks, it ends after the last
    size_t last_start = i, after_break = 0;
    for (j = i; j < n;) {
        int c;
        size_t len = next_char(text + j, n - j, &c);
        if (c != CHAR_SPACE) { break; }
        if (text[j] == '\r' || text[j] == '\n') { after_break = j + 1; }
        last_start = j;
        j += len;
    }
    if (after_break > 0) { return after_break; }
    // '\s+(?!\S)' and '\s+', as in GPT-2's rule
    if (j == n) { return n; }
    if (last_start > i) { return last_start; }
    return j;
}

// ----------------------------------------------------------------------------
// the vocabulary: encoder.json, vocab.bpe and a hash table over token bytes

// --- begin shared-copy: byte-alphabet ---
// GPT-2 stores tokens as text in which every raw byte is replaced by a printable character
// (bytes_to_unicode in GPT-2's encoder.py): the 188 bytes that are already printable and not
// a space ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves, and the other 68
// bytes, in increasing order, become U+0100, U+0101, ... So a space is 'Ġ' (U+0120). The
// single-byte tokens get ids in this same order: the printable bytes first, then the rest.
#define BYTE_ALPHABET_SIZE 324  // every code point of the mapping is below U+0144

typedef struct {
    int16_t byte_of_codepoint[BYTE_ALPHABET_SIZE];  // -1 where a code point stands for no byte
    uint8_t byte_of_rank[256];                      // the byte of single-byte token id r
} ByteAlphabet;

static int byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void byte_alphabet_init(ByteAlphabet *a) {
    for (int cp = 0; cp < BYTE_ALPHABET_SIZE; cp++) { a->byte_of_codepoint[cp] = -1; }
    int rank = 0;
    for (int b = 0; b < 256; b++) {
        if (byte_is_printable(b)) {
            a->byte_of_codepoint[b] = (int16_t)b;
            a->byte_of_rank[rank++] = (uint8_t)b;
        }
    }
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        if (!byte_is_printable(b)) {
            a->byte_of_codepoint[256 + extra++] = (int16_t)b;
            a->byte_of_rank[rank++] = (uint8_t)b;
        }
    }
}
// --- end shared-copy: byte-alphabet ---

#define ENCODER_JSON_HINT "encoder.json must be GPT-2's original file; -g names the folder holding it"

// FNV-1a: short, good enough for the short byte strings we hash
static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ull; }
    return h;
}

// The public API (tokenizer_init/free/token/encode/decode, and options_default/tokenize_file
// for the program) has external linkage, so that a program or test including this file may
// leave parts of it unused without a warning; everything else is static.

// The raw bytes of token id, or NULL (and *len = 0) if id is not in the vocabulary.
const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) { *len = 0; return NULL; }
    *len = t->token_offset[id + 1] - t->token_offset[id];
    return t->token_bytes + t->token_offset[id];
}

// The id of the ordinary token whose bytes are s[0..n), else -1: under tiktoken's rule, the
// string's rank. Most of the encoding time goes here.
static int tokenizer_rank(const Tokenizer *t, const uint8_t *s, size_t n) {
    if (n > t->max_token_len) { return -1; }
    size_t slot = (size_t)hash_bytes(s, n) & t->rank_mask;
    for (;;) {
        int32_t id = t->rank_table[slot];
        if (id < 0) { return -1; }
        size_t len;
        const uint8_t *tok = tokenizer_token(t, id, &len);
        if (len == n && memcmp(tok, s, n) == 0) { return id; }
        slot = (slot + 1) & t->rank_mask;
    }
}

// Parses encoder.json, {"token text": id, ...}, into t->token_bytes / t->token_offset.
// The ids must be exactly 0..V-1, each once. We do not yet know which ids are mergeable.
static void load_encoder_json(Tokenizer *t, const char *path, const ByteAlphabet *a) {
    const char *hint = ENCODER_JSON_HINT;
    size_t len;
    uint8_t *s = read_whole_file(path, &len, hint);
    Json j;
    char err[256];
    if (json_parse(&j, (const char *)s, len, err, sizeof(err)) != 0) { die_file(path, hint, "%s", err); }
    if (j.tokens[0].type != JSON_OBJECT || j.tokens[0].size == 0) { die_file(path, hint, "not a JSON object of \"token\": id"); }
    // first pass: collect (id, bytes) pairs in file order into scratch arrays. Every token
    // takes fewer bytes than its JSON text, so the file size bounds both.
    size_t num = (size_t)j.tokens[0].size, used = 0;
    int32_t *ids = (int32_t *)mallocCheck(num * sizeof(int32_t));
    uint32_t *offsets = (uint32_t *)mallocCheck((num + 1) * sizeof(uint32_t));
    uint8_t *bytes = (uint8_t *)mallocCheck(len + 1);
    char key[4 * MAX_TOKEN_BYTES + 1]; // a token's text: at most 2 UTF-8 bytes per byte of it
    int at = 1;
    for (size_t e = 0; e < num; e++, at = j.tokens[at + 1].next) {
        int64_t id;
        int n = json_string(&j, at, key, sizeof(key));
        if (n < 0) { die_file(path, hint, "entry %zu: a key longer than %d bytes, or malformed", e, MAX_TOKEN_BYTES); }
        if (json_int64(&j, at + 1, &id) != 0 || id < 0 || id > 10000000) {
            die_file(path, hint, "entry %zu: the value is not a token id (an integer in [0, 10^7])", e);
        }
        // the key's characters, each one byte in GPT-2's alphabet
        offsets[e] = (uint32_t)used;
        for (size_t k = 0; k < (size_t)n;) {
            uint32_t cp;
            size_t step = utf8_decode((const uint8_t *)key + k, (size_t)n - k, &cp);
            if (step == 0 || cp >= BYTE_ALPHABET_SIZE || a->byte_of_codepoint[cp] < 0) {
                die_file(path, hint, "entry %zu: a key has a character outside GPT-2's byte alphabet", e);
            }
            if (used - offsets[e] == MAX_TOKEN_BYTES) { die_file(path, hint, "entry %zu: a key is longer than 255 bytes", e); }
            bytes[used++] = (uint8_t)a->byte_of_codepoint[cp];
            k += step;
        }
        ids[e] = (int32_t)id;
    }
    offsets[num] = (uint32_t)used;
    json_free(&j);

    // second pass: place the tokens in id order, checking that the ids are 0..V-1, each once
    t->vocab_size = (int)num;
    t->token_bytes = (uint8_t *)mallocCheck(used);
    t->token_offset = (uint32_t *)mallocCheck((num + 1) * sizeof(uint32_t));
    size_t *entry_of_id = (size_t *)mallocCheck(num * sizeof(size_t));
    for (size_t i = 0; i < num; i++) { entry_of_id[i] = SIZE_MAX; }
    for (size_t e = 0; e < num; e++) {
        if ((size_t)ids[e] >= num) {
            die_file(path, hint, "token id %d is out of range for %zu tokens", ids[e], num);
        }
        if (entry_of_id[ids[e]] != SIZE_MAX) { die_file(path, hint, "token id %d appears twice", ids[e]); }
        entry_of_id[ids[e]] = e;
    }
    size_t out = 0;
    for (size_t id = 0; id < num; id++) {
        size_t e = entry_of_id[id];
        t->token_offset[id] = (uint32_t)out;
        memcpy(t->token_bytes + out, bytes + offsets[e], offsets[e + 1] - offsets[e]);
        out += offsets[e + 1] - offsets[e];
    }
    t->token_offset[num] = (uint32_t)out;
    free(entry_of_id); free(bytes); free(offsets); free(ids); free(s);
}

// Reads one space-separated field of a vocab.bpe line as raw bytes; returns 0 if malformed.
static int read_merge_half(const uint8_t *s, size_t end, size_t *pos, const ByteAlphabet *a,
                           uint8_t *out, size_t *out_len) {
    *out_len = 0;
    while (*pos < end && s[*pos] != ' ') {
        uint32_t cp;
        size_t n = utf8_decode(s + *pos, end - *pos, &cp);
        if (n == 0 || cp >= BYTE_ALPHABET_SIZE || a->byte_of_codepoint[cp] < 0) { return 0; }
        if (*out_len == MAX_TOKEN_BYTES) { return 0; }
        out[(*out_len)++] = (uint8_t)a->byte_of_codepoint[cp];
        *pos += n;
    }
    return *out_len > 0;
}

// vocab.bpe lists the merges in priority order after a "#version" line. tiktoken never uses
// it to encode, and neither do we: a token's rank is simply its id. But the id-as-rank rule
// only holds if the files agree, so, like tiktoken's data_gym_to_mergeable_bpe_ranks, we check
// that ids 0..255 are the single bytes in alphabet order (in tokenizer_init), that merge k
// ("a b") produces token 256 + k, and that <|endoftext|> is the one id left after the merges.
static void check_vocab_bpe(Tokenizer *t, const char *path, const ByteAlphabet *a) {
    const char *hint = "vocab.bpe must be GPT-2's original file, matching encoder.json; "
                       "-g names the folder holding it";
    size_t len;
    uint8_t *s = read_whole_file(path, &len, hint);
    size_t pos = 0, line = 1;
    if (strncmp((const char *)s, "#version", 8) != 0) { die_file(path, hint, "line 1 is not a #version line"); }
    while (pos < len && s[pos] != '\n') { pos++; }
    int next_id = 256;
    uint8_t merged[2 * MAX_TOKEN_BYTES];
    while (pos < len) {
        pos++;  // past the '\n'
        line++;
        size_t end = pos;
        while (end < len && s[end] != '\n') { end++; }
        if (end == pos) { continue; }  // blank line (the file ends with one newline)
        size_t n1, n2;
        if (!read_merge_half(s, end, &pos, a, merged, &n1) || pos >= end || s[pos++] != ' '
            || !read_merge_half(s, end, &pos, a, merged + n1, &n2) || pos != end) {
            die_file(path, hint, "line %zu is not two tokens separated by one space", line);
        }
        if (next_id >= t->vocab_size) { die_file(path, hint, "more merges than encoder.json has tokens"); }
        size_t tok_len;
        const uint8_t *tok = tokenizer_token(t, next_id, &tok_len);
        if (tok_len != n1 + n2 || memcmp(tok, merged, tok_len) != 0) {
            die_file(path, hint, "merge on line %zu does not produce encoder.json's token %d", line, next_id);
        }
        next_id++;
        pos = end;
    }
    free(s);
    t->num_merges = next_id - 256;
    // the only token that is not a merge must be <|endoftext|>, right after the merges
    size_t eot_len;
    const uint8_t *eot = tokenizer_token(t, next_id, &eot_len);
    if (t->vocab_size != next_id + 1 || eot_len != SPECIAL_LEN
        || memcmp(eot, SPECIAL_TEXT, SPECIAL_LEN) != 0) {
        die_file(path, hint, "%d merges, but encoder.json's tokens after them are not exactly <|endoftext|>",
                 next_id - 256);
    }
    t->eot_token = next_id;
}

// Loads GPT-2's vocabulary from dir/encoder.json and dir/vocab.bpe.
static void tokenizer_load_gpt2(Tokenizer *t, const char *dir) {
    char encoder_path[MAX_PATH_LEN], vocab_path[MAX_PATH_LEN];
    path_concat(encoder_path, dir, "/encoder.json");
    path_concat(vocab_path, dir, "/vocab.bpe");
    ByteAlphabet alphabet;
    byte_alphabet_init(&alphabet);
    load_encoder_json(t, encoder_path, &alphabet);
    const char *hint = ENCODER_JSON_HINT;
    if (t->vocab_size < 257) {
        die_file(encoder_path, hint, "only %d tokens, not even the 256 bytes + 1", t->vocab_size);
    }
    for (int id = 0; id < 256; id++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, id, &len);
        if (len != 1 || tok[0] != alphabet.byte_of_rank[id]) {
            die_file(encoder_path, hint, "token %d is not the single byte 0x%02X that GPT-2's byte "
                     "order puts there", id, alphabet.byte_of_rank[id]);
        }
    }
    check_vocab_bpe(t, vocab_path, &alphabet);
    t->special = (uint8_t *)mallocCheck((size_t)t->vocab_size);
    memset(t->special, 0, (size_t)t->vocab_size);
    t->special[t->eot_token] = 1;
    t->bos_token = t->unk_token = -1;
    t->pre = PRE_GPT2;
    t->chat = CHAT_NONE;
    t->ignore_merges = 1; // tiktoken looks a piece up whole first
    t->system = (char *)mallocCheck(1);
    t->system[0] = '\0';
}

static uint32_t tok_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define MERGE_EMPTY UINT64_MAX
static size_t merge_slot(uint64_t key, size_t mask) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask; }

// The tokenizer file ./convert writes from a GGUF file or a Hugging Face tokenizer.json
// (little endian):
//   header: 256 x int32 [TOKENIZER_FILE_MAGIC, version 1, V tokens, M merges, pre-tokenizer (PRE_*),
//           chat template (CHAT_*), bos, eos (where generation stops), unk (-1: none), flags
//           (bit 0: ignore_merges, bit 1: add bos to a prompt, bit 2: NFC first), bytes of
//           the default system message, 0...]
//   V tokens, id order: uint8 kind (0 ordinary, 1 special), uint16 length, the raw bytes
//   M merges, rank order: int32 left id, int32 right id (they make the token of their bytes joined)
//   the default system message's bytes
// Special tokens are the ones the text may name (<|im_start|>); ordinary ones are what BPE makes.
static void tokenizer_load_file(Tokenizer *t, const char *path) {
    const char *hint = "a tokenizer file is written by ./convert (next to the model file, as NAME_tokenizer.bin)";
    size_t len;
    uint8_t *s = read_whole_file(path, &len, hint);
    if (len < 1024) { die_file(path, hint, "%zu bytes: too short for the 1024-byte header", len); }
    int32_t h[16];
    for (int i = 0; i < 16; i++) { h[i] = (int32_t)tok_le32(s + 4 * i); }
    if (h[0] == 20240328) {
        die_file(path, hint, "an llm.c tokenizer.bin, which only decodes; give GPT-2's folder (encoder.json, "
                 "vocab.bpe) or a tokenizer file of ./convert");
    }
    if (h[0] != TOKENIZER_FILE_MAGIC) { die_file(path, hint, "bad magic %d (expected %d)", h[0], TOKENIZER_FILE_MAGIC); }
    if (h[1] != 1) { die_file(path, hint, "version %d (we read version 1)", h[1]); }
    int V = h[2], M = h[3];
    // (a vocabulary may have more merges than tokens: Llama 3's 128256 tokens come from 280147)
    if (V < 1 || (size_t)V > (len - 1024) / 3 || M < 0 || (size_t)M > (len - 1024) / 8) { die_file(path, hint, "%d tokens and %d merges do not fit its %zu bytes", V, M, len); }
    if (h[4] < 0 || h[4] >= PRE_NUM || h[5] < 0 || h[5] >= CHAT_NUM) { die_file(path, hint, "unknown pre-tokenizer %d or chat template %d", h[4], h[5]); }
    for (int i = 6; i <= 8; i++) {
        if (h[i] < -1 || h[i] >= V) { die_file(path, hint, "header field %d: token %d outside the vocabulary of %d", i, h[i], V); }
    }
    if ((h[9] & ~7) != 0 || h[10] < 0 || h[7] < 0) { die_file(path, hint, "bad flags %d, system message length %d or end token %d", h[9], h[10], h[7]); }
    t->vocab_size = V;
    t->num_merges = M;
    t->pre = h[4];
    t->chat = h[5];
    t->bos_token = h[6];
    t->eot_token = h[7];
    t->unk_token = h[8];
    t->ignore_merges = h[9] & 1;
    t->add_bos = (h[9] >> 1) & 1;
    t->nfc = (h[9] >> 2) & 1;
    if (t->add_bos && t->bos_token < 0) { die_file(path, hint, "adds a start token, but has none"); }
    // the tokens
    t->special = (uint8_t *)mallocCheck((size_t)V);
    t->token_offset = (uint32_t *)mallocCheck(((size_t)V + 1) * sizeof(uint32_t));
    t->token_bytes = (uint8_t *)mallocCheck(len);
    size_t at = 1024, used = 0;
    for (int id = 0; id < V; id++) {
        if (len - at < 3) { die_file(path, hint, "the file ends inside token %d", id); }
        size_t n = (size_t)s[at + 1] | (size_t)s[at + 2] << 8;
        if (s[at] > 1 || n == 0 || n > len - at - 3) { die_file(path, hint, "token %d: kind %d, %zu bytes: malformed or cut off", id, s[at], n); }
        t->special[id] = s[at];
        t->token_offset[id] = (uint32_t)used;
        memcpy(t->token_bytes + used, s + at + 3, n);
        used += n;
        at += 3 + n;
    }
    t->token_offset[V] = (uint32_t)used;
    // the merges (checked, and the token each makes found, in tokenizer_index)
    if ((len - at) / 8 < (size_t)M) { die_file(path, hint, "the file ends inside the merges"); }
    t->merge_key = (uint64_t *)mallocCheck((size_t)M * sizeof(uint64_t)); // in rank order for now
    for (int m = 0; m < M; m++, at += 8) {
        int32_t left = (int32_t)tok_le32(s + at), right = (int32_t)tok_le32(s + at + 4);
        if (left < 0 || left >= V || right < 0 || right >= V) { die_file(path, hint, "merge %d: token %d or %d outside the vocabulary", m, left, right); }
        t->merge_key[m] = (uint64_t)left << 32 | (uint64_t)right;
    }
    if (len - at != (size_t)h[10]) { die_file(path, hint, "%zu bytes after the merges, but a system message of %d", len - at, h[10]); }
    t->system = (char *)mallocCheck((size_t)h[10] + 1);
    memcpy(t->system, s + at, (size_t)h[10]);
    t->system[h[10]] = '\0';
    free(s);
}

// The lookup tables over a loaded vocabulary: byte strings -> ordinary tokens, single bytes,
// the special tokens, the merges, and the empty piece cache.
static void tokenizer_index(Tokenizer *t, const char *path) {
    const char *hint = "the tokenizer's vocabulary must be what its model was trained with";
    // the rank table: a power of two at least twice the tokens keeps probes short
    size_t slots = 1;
    while (slots < 2 * (size_t)t->vocab_size) { slots *= 2; }
    t->rank_table = (int32_t *)mallocCheck(slots * sizeof(int32_t));
    t->rank_mask = slots - 1;
    for (size_t i = 0; i < slots; i++) { t->rank_table[i] = -1; }
    t->max_token_len = 0;
    for (int b = 0; b < 256; b++) { t->byte_token[b] = -1; }
    memset(t->special_start, 0, sizeof(t->special_start));
    t->specials = (int32_t *)mallocCheck((size_t)t->vocab_size * sizeof(int32_t));
    t->num_specials = 0;
    for (int id = 0; id < t->vocab_size; id++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, id, &len);
        if (t->special[id]) {
            t->specials[t->num_specials++] = id;
            t->special_start[tok[0]] = 1;
            continue;
        }
        if (tokenizer_rank(t, tok, len) >= 0) { die_file(path, hint, "token %d's bytes appear twice", id); }
        size_t slot = (size_t)hash_bytes(tok, len) & t->rank_mask;
        while (t->rank_table[slot] >= 0) { slot = (slot + 1) & t->rank_mask; }
        t->rank_table[slot] = id;
        // tokenizer_rank rejects strings longer than the longest token before hashing, so
        // max_token_len must grow as we insert (the duplicate check above relies on it)
        if (len > t->max_token_len) { t->max_token_len = len; }
        if (len == 1) { t->byte_token[tok[0]] = id; }
    }
    // special tokens, longest first: where two start at the same place, the longer wins
    for (int i = 1; i < t->num_specials; i++) { // insertion sort: there are few
        int32_t id = t->specials[i];
        size_t len, other;
        tokenizer_token(t, id, &len);
        int k = i;
        while (k > 0 && (tokenizer_token(t, t->specials[k - 1], &other), other < len)) { t->specials[k] = t->specials[k - 1]; k--; }
        t->specials[k] = id;
    }
    // the merges: (left, right) -> rank and result; a pair listed twice keeps its last rank,
    // as in Hugging Face's BPE (its merge map is built by inserting the list in order)
    if (t->merge_key != NULL) {
        uint64_t *list = t->merge_key;
        size_t mslots = 1;
        while (mslots < 2 * (size_t)t->num_merges + 2) { mslots *= 2; }
        t->merge_key = (uint64_t *)mallocCheck(mslots * sizeof(uint64_t));
        t->merge_rank = (int32_t *)mallocCheck(mslots * sizeof(int32_t));
        t->merge_result = (int32_t *)mallocCheck(mslots * sizeof(int32_t));
        t->merge_mask = mslots - 1;
        for (size_t i = 0; i < mslots; i++) { t->merge_key[i] = MERGE_EMPTY; }
        uint8_t *joined = (uint8_t *)mallocCheck(2 * (t->max_token_len + 1));
        for (int m = 0; m < t->num_merges; m++) {
            int left = (int)(list[m] >> 32), right = (int)(list[m] & 0xFFFFFFFFu);
            size_t n1, n2;
            const uint8_t *a = tokenizer_token(t, left, &n1), *b = tokenizer_token(t, right, &n2);
            int result = -1;
            if (!t->special[left] && !t->special[right]) {
                memcpy(joined, a, n1);
                memcpy(joined + n1, b, n2);
                result = tokenizer_rank(t, joined, n1 + n2);
            }
            if (result < 0) { die_file(path, hint, "merge %d (tokens %d and %d) does not make a token", m, left, right); }
            size_t slot = merge_slot(list[m], t->merge_mask);
            while (t->merge_key[slot] != MERGE_EMPTY && t->merge_key[slot] != list[m]) { slot = (slot + 1) & t->merge_mask; }
            t->merge_key[slot] = list[m];
            t->merge_rank[slot] = m;
            t->merge_result[slot] = result;
        }
        free(joined);
        free(list);
    }
    t->cache = (CacheSlot *)mallocCheck(CACHE_SLOTS * sizeof(CacheSlot));
    memset(t->cache, 0, CACHE_SLOTS * sizeof(CacheSlot));
    t->cache_keys = (uint8_t *)mallocCheck(CACHE_KEY_ARENA);
    t->cache_tokens = (int32_t *)mallocCheck(CACHE_TOKEN_ARENA * sizeof(int32_t));
    t->cache_entries = t->cache_key_used = t->cache_token_used = 0;
}

// Loads a tokenizer: from a file, the tokenizer file of ./convert; from a folder, GPT-2's
// encoder.json and vocab.bpe. Exits with a message naming the file on any problem.
void tokenizer_init(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    struct stat st;
    int file = stat(path, &st) == 0 && !S_ISDIR(st.st_mode); // else a folder (or nothing: then
    if (file) { tokenizer_load_file(t, path); }              // the message names encoder.json)
    else { tokenizer_load_gpt2(t, path); }
    tokenizer_index(t, path);
}

void tokenizer_free(Tokenizer *t) {
    free(t->token_bytes); free(t->token_offset); free(t->rank_table); free(t->special); free(t->specials);
    free(t->system); free(t->merge_key); free(t->merge_rank); free(t->merge_result);
    free(t->cache); free(t->cache_keys); free(t->cache_tokens);
    memset(t, 0, sizeof(*t));
}

// The id of the token whose bytes are text (special or not), or -1.
int tokenizer_find(const Tokenizer *t, const char *text) {
    size_t n = strlen(text);
    for (int i = 0; i < t->num_specials; i++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, t->specials[i], &len);
        if (len == n && memcmp(tok, text, n) == 0) { return t->specials[i]; }
    }
    return tokenizer_rank(t, (const uint8_t *)text, n);
}

// A growing string for the chat templates
typedef struct { char *s; size_t len, cap; } ChatText;
static void chat_put(ChatText *c, const char *text, size_t n) {
    if (c->len + n + 1 > c->cap) {
        c->cap = 2 * (c->len + n + 1);
        c->s = (char *)realloc(c->s, c->cap);
        if (c->s == NULL) { fprintf(stderr, "Error: out of memory for a chat prompt\n"); exit(EXIT_FAILURE); }
    }
    memcpy(c->s + c->len, text, n);
    c->len += n;
    c->s[c->len] = '\0';
}
static void chat_puts(ChatText *c, const char *text) { chat_put(c, text, strlen(text)); }

// Python's str.isspace, which Jinja's trim strips: White_Space, and U+001C..U+001F
static int python_space(const uint8_t *s, size_t n, size_t *len) {
    uint32_t cp;
    *len = utf8_decode(s, n, &cp);
    if (*len == 0) { *len = 1; return 0; }
    return (cp >= 0x1C && cp <= 0x1F) || codepoint_class(cp) == CHAR_SPACE;
}

// Llama 3's template trims each message (Jinja's trim: Python's str.strip)
static void chat_put_trimmed(ChatText *c, const char *text) {
    const uint8_t *s = (const uint8_t *)text;
    size_t n = strlen(text), len, start = 0, end = 0;
    while (start < n && python_space(s + start, n - start, &len)) { start += len; }
    for (size_t i = start; i < n; i += len) { // end: after the last character that is not white space
        if (!python_space(s + i, n - i, &len)) { end = i + len; }
    }
    chat_put(c, text + start, end > start ? end - start : 0);
}

// One user message (and a system message, or NULL for the template's default) laid out as
// the model's chat template does with add_generation_prompt, ending where the assistant's
// reply begins; the special tokens are written as their text, for tokenizer_encode with
// allow_special. NULL for a tokenizer without a template. Free the result.
//   ChatML (SmolLM2, Qwen2.5): [<|im_start|>system\n{system}<|im_end|>\n]
//                              <|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n
//   Llama 3: <|begin_of_text|>[<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>]
//            <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//            <|start_header_id|>assistant<|end_header_id|>\n\n
//   Llama 3.1, 3.2: the same, but the system turn is always there and opens with
//            Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n
//            (then {system}, or nothing)
// Where these come from: SmolLM2's and Qwen2.5's Jinja templates write a default system turn
// when the chat has none (./convert keeps its text in t->system); Meta-Llama-3-Instruct's has
// none. Llama 3.1's and 3.2's (and 3.3's) write the dates: 3.1's {date} is "26 Jul 2024",
// 3.2's today's (strftime_now("%d %b %Y"), which transformers and llama.cpp give it), or
// t->date when set. (Their tool-calling parts are not here: one user message has no tools.)
char *tokenizer_chat_prompt(const Tokenizer *t, const char *system, const char *user) {
    if (t->chat == CHAT_NONE) { return NULL; }
    ChatText c = {NULL, 0, 0};
    chat_puts(&c, "");
    if (system == NULL && t->system[0] != '\0') { system = t->system; }
    if (t->chat == CHAT_CHATML) {
        if (system != NULL) { chat_puts(&c, "<|im_start|>system\n"); chat_puts(&c, system); chat_puts(&c, "<|im_end|>\n"); }
        chat_puts(&c, "<|im_start|>user\n");
        chat_puts(&c, user);
        chat_puts(&c, "<|im_end|>\n<|im_start|>assistant\n");
    } else {
        size_t n;
        const uint8_t *bos = tokenizer_token(t, t->bos_token, &n);
        if (bos != NULL) { chat_put(&c, (const char *)bos, n); }
        if (system != NULL || t->chat != CHAT_LLAMA3) {
            chat_puts(&c, "<|start_header_id|>system<|end_header_id|>\n\n");
            if (t->chat != CHAT_LLAMA3) {
                char today[32] = "26 Jul 2024"; // (Llama 3.1's)
                if (t->chat == CHAT_LLAMA32 && t->date != NULL) { snprintf(today, sizeof(today), "%s", t->date); }
                else if (t->chat == CHAT_LLAMA32) {
                    time_t now = time(NULL);
                    struct tm *local = localtime(&now); // (the C locale's month names, as Python's strftime)
                    if (local == NULL || strftime(today, sizeof(today), "%d %b %Y", local) == 0) { snprintf(today, sizeof(today), "26 Jul 2024"); }
                }
                chat_puts(&c, "Cutting Knowledge Date: December 2023\nToday Date: ");
                chat_puts(&c, today);
                chat_puts(&c, "\n\n");
            }
            if (system != NULL) { chat_put_trimmed(&c, system); }
            chat_puts(&c, "<|eot_id|>");
        }
        chat_puts(&c, "<|start_header_id|>user<|end_header_id|>\n\n");
        chat_put_trimmed(&c, user);
        chat_puts(&c, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    return c.s;
}

// ----------------------------------------------------------------------------
// byte pair encoding of one piece

// Joining parts k and k+1: returns the rank of that merge (-1: they do not merge) and sets
// *made to the token it makes. Two rules, which agree on GPT-2's vocabulary:
//  - tiktoken's (GPT-2's files): any two parts whose bytes joined are a token merge, and that
//    token's id is the rank;
//  - Hugging Face's (tokenizer files): only the pairs in the merge list merge, ranked by
//    their place in it.
static int pair_rank(const Tokenizer *t, const uint8_t *piece, const size_t *start, const int32_t *id,
                     size_t k, int32_t *made) {
    if (t->merge_key == NULL) {
        *made = tokenizer_rank(t, piece + start[k], start[k + 2] - start[k]);
        return *made;
    }
    uint64_t key = (uint64_t)(uint32_t)id[k] << 32 | (uint32_t)id[k + 1];
    for (size_t slot = merge_slot(key, t->merge_mask);; slot = (slot + 1) & t->merge_mask) {
        if (t->merge_key[slot] == MERGE_EMPTY) { return -1; }
        if (t->merge_key[slot] == key) { *made = t->merge_result[slot]; return t->merge_rank[slot]; }
    }
}

// The merge loop (tiktoken's _byte_pair_merge; Hugging Face's BPE does the same with a heap).
// The piece is split into parts, part k being piece[start[k] .. start[k+1]) and token id[k];
// initially every byte is a part. rank[k] is the rank of joining part k with part k+1 (-1:
// they do not merge), made[k] what that makes. Each step merges the pair with the lowest
// rank, the leftmost one on ties, and recomputes the two pairs that now contain the merged
// part. O(n^2) in the piece length, which is fine for words; a piece of many kilobytes (a
// long run of letters with no space) is slow. TODO: a heap would make that O(n log n), at
// the cost of the simplicity we want here.
static size_t bpe_merge(const Tokenizer *t, const uint8_t *piece, size_t n, int32_t *out) {
    size_t stack_start[CACHE_MAX_PIECE + 2];
    int32_t stack_id[CACHE_MAX_PIECE + 2], stack_rank[CACHE_MAX_PIECE + 2], stack_made[CACHE_MAX_PIECE + 2];
    size_t *start = stack_start;
    int32_t *id = stack_id, *rank = stack_rank, *made = stack_made;
    if (n > CACHE_MAX_PIECE) {  // only long pieces need the heap
        start = (size_t *)mallocCheck((n + 1) * sizeof(size_t));
        id = (int32_t *)mallocCheck((n + 1) * sizeof(int32_t));
        rank = (int32_t *)mallocCheck((n + 1) * sizeof(int32_t));
        made = (int32_t *)mallocCheck((n + 1) * sizeof(int32_t));
    }
    size_t parts = 0;  // parts live at 0..parts-1, start[parts] == n
    for (size_t k = 0; k < n; k++) {
        // a byte without a token of its own (SmolLM2 has none for 21 bytes) becomes the
        // unknown token, or, without one, is dropped, as Hugging Face's BPE does
        int32_t b = t->byte_token[piece[k]] >= 0 ? t->byte_token[piece[k]] : t->unk_token;
        if (b < 0) { continue; }
        start[parts] = k;
        id[parts++] = b;
    }
    start[parts] = n;
    for (size_t k = 0; k + 1 < parts; k++) { rank[k] = pair_rank(t, piece, start, id, k, &made[k]); }
    while (parts > 1) {
        // find the lowest-ranked pair, leftmost first; most of a cache miss goes here
        size_t best = SIZE_MAX;
        for (size_t k = 0; k + 1 < parts; k++) {
            if (rank[k] >= 0 && (best == SIZE_MAX || rank[k] < rank[best])) { best = k; }
        }
        if (best == SIZE_MAX) { break; }
        // merge parts best and best+1 into part best: drop entry best+1 of start and id, and
        // of rank and made (start has parts + 1 entries, id parts, rank and made parts - 1)
        id[best] = made[best];
        memmove(start + best + 1, start + best + 2, (parts - best - 1) * sizeof(size_t));
        memmove(id + best + 1, id + best + 2, (parts - best - 2) * sizeof(int32_t));
        if (best + 2 < parts) {
            memmove(rank + best + 1, rank + best + 2, (parts - best - 3) * sizeof(int32_t));
            memmove(made + best + 1, made + best + 2, (parts - best - 3) * sizeof(int32_t));
        }
        parts--;
        // the merged part now pairs with its neighbours
        if (best + 1 < parts) { rank[best] = pair_rank(t, piece, start, id, best, &made[best]); }
        if (best > 0) { rank[best - 1] = pair_rank(t, piece, start, id, best - 1, &made[best - 1]); }
    }
    memcpy(out, id, parts * sizeof(int32_t));
    if (start != stack_start) { free(start); free(id); free(rank); free(made); }
    return parts;
}

// Encodes one piece into out and returns the number of tokens.
static size_t bpe_encode_piece(Tokenizer *t, const uint8_t *piece, size_t n, int32_t *out) {
    // tiktoken first looks the whole piece up and, if it is a token, takes it without merging
    // (Hugging Face's BPE too, with ignore_merges: Llama 3). For GPT-2's vocabulary merging
    // reaches every token anyway (we checked all 50256), so there it is only a shortcut;
    // with another vocabulary it can change the result.
    if (t->ignore_merges) {
        int whole = tokenizer_rank(t, piece, n);
        if (whole >= 0) { out[0] = whole; return 1; }
    }
    if (n > CACHE_MAX_PIECE) { return bpe_merge(t, piece, n, out); }
    // look in the cache before doing the merges
    uint64_t h = hash_bytes(piece, n);
    size_t slot = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        CacheSlot *c = &t->cache[slot];
        if (c->key_len == 0) { break; }
        if (c->key_len == n && memcmp(t->cache_keys + c->key_offset, piece, n) == 0) {
            memcpy(out, t->cache_tokens + c->token_offset, c->num_tokens * sizeof(int32_t));
            return c->num_tokens;
        }
        slot = (slot + 1) & (CACHE_SLOTS - 1);
    }
    size_t num = bpe_merge(t, piece, n, out);
    // a miss: remember the answer in the empty slot we stopped at, while there is room
    if (t->cache_entries < CACHE_MAX_ENTRIES && t->cache_key_used + n <= CACHE_KEY_ARENA
        && t->cache_token_used + num <= CACHE_TOKEN_ARENA) {
        CacheSlot *c = &t->cache[slot];
        c->key_offset = (uint32_t)t->cache_key_used;
        c->token_offset = (uint32_t)t->cache_token_used;
        c->key_len = (uint8_t)n;
        c->num_tokens = (uint8_t)num;
        memcpy(t->cache_keys + t->cache_key_used, piece, n);
        memcpy(t->cache_tokens + t->cache_token_used, out, num * sizeof(int32_t));
        t->cache_key_used += n;
        t->cache_token_used += num;
        t->cache_entries++;
    }
    return num;
}

// ----------------------------------------------------------------------------
// encode and decode

// Pre-tokenizes text[0..len) with the family's rule and BPEs every piece.
static size_t encode_pieces(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
    size_t num = 0;
    for (size_t i = 0; i < len;) {
        size_t end = t->pre == PRE_LLAMA3 ? pretoken_end_llama3(text, len, i, 3)
                   : t->pre == PRE_QWEN2 ? pretoken_end_llama3(text, len, i, 1) : pretoken_end_gpt2(text, len, i);
        num += bpe_encode_piece(t, text + i, end - i, out + num);
        i = end;
    }
    return num;
}

// Encodes text with no special tokens. SmolLM2's rule first cuts out every number character
// (\p{N}: digits, but also '²' and '½') as a piece of its own, then runs GPT-2's on the
// text between them as if each stretch were a whole text (its tokenizer.json: Digits with
// individual_digits, then ByteLevel). So "a  1" is "a", "  ", "1" there, but "a", " ", " 1"
// in GPT-2's. (transformers 5.24, building a tokenizer from a GGUF file, has no rule for
// the "smollm" pre-tokenizer and uses GPT-2's: it differs from SmolLM2's own tokenizer there.)
static size_t encode_unnormalized(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
    if (t->pre != PRE_SMOLLM) { return encode_pieces(t, text, len, out); }
    size_t num = 0, from = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t step = utf8_decode(text + i, len - i, &cp);
        // Digits decides with Rust's char::is_numeric, which knows Unicode 17 (tokenizers
        // 0.23); our tables are Unicode 16 (tiktoken's regex), and 17 added these numbers
        int number = step > 0 && (codepoint_class(cp) == CHAR_NUMBER || (cp >= 0x11DE0 && cp <= 0x11DE9)
                                  || (cp >= 0x16FF4 && cp <= 0x16FF6));
        step = step > 0 ? step : 1;
        if (number) {
            num += encode_pieces(t, text + from, i - from, out + num);
            num += bpe_encode_piece(t, text + i, step, out + num);
            from = i + step;
        }
        i += step;
    }
    return num + encode_pieces(t, text + from, len - from, out + num);
}

// Encodes text with no special tokens, in NFC first if the tokenizer says so (Qwen2's).
static size_t encode_ordinary(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
    size_t normalized_len;
    uint8_t *normalized = t->nfc ? nfc_normalize(text, len, &normalized_len) : NULL;
    if (normalized == NULL) { return encode_unnormalized(t, text, len, out); }
    size_t num = encode_unnormalized(t, normalized, normalized_len, out);
    free(normalized);
    return num;
}

// Room for the ids of len bytes of text: every token covers at least one byte, and NFC
// makes a text at most 3 times longer (U+1D1C0, 4 bytes, is 3 characters of 4 bytes).
size_t tokenizer_max_ids(const Tokenizer *t, size_t len) { return (t->nfc ? 3 : 1) * len + 1; }

// The special token whose text starts at text[i] (the longest if several do), or -1.
static int special_at(const Tokenizer *t, const uint8_t *text, size_t len, size_t i) {
    if (!t->special_start[text[i]]) { return -1; }
    for (int k = 0; k < t->num_specials; k++) {
        size_t n;
        const uint8_t *tok = tokenizer_token(t, t->specials[k], &n);
        if (n <= len - i && memcmp(text + i, tok, n) == 0) { return t->specials[k]; }
    }
    return -1;
}

// Encodes text[0..len) into out and returns the number of ids. out needs room for
// tokenizer_max_ids(t, len) ids (len without NFC). With allow_special, the text of every
// special token (GPT-2: "<|endoftext|>"; SmolLM2: "<|im_start|>", ...) becomes that token and
// the text between them is encoded on its own (like tiktoken's encode with allowed_special,
// and Hugging Face's added tokens: the pre-tokenizer never sees across a special token);
// without it that text is ordinary text, like tiktoken's encode_ordinary.
size_t tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, int allow_special, int32_t *out) {
    if (!allow_special) { return encode_ordinary(t, text, len, out); }
    size_t num = 0, segment = 0;
    for (size_t i = 0; i < len; i++) {
        int id = special_at(t, text, len, i);
        if (id >= 0) {
            size_t n;
            tokenizer_token(t, id, &n);
            num += encode_ordinary(t, text + segment, i - segment, out + num);
            out[num++] = id;
            segment = i + n;
            i = segment - 1;  // the loop's i++ moves on to segment
        }
    }
    num += encode_ordinary(t, text + segment, len - segment, out + num);
    return num;
}

// Writes the bytes of ids[0..n) to out (room for cap bytes) and returns how many it wrote,
// or SIZE_MAX if an id is not in the vocabulary or out is too small.
size_t tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, uint8_t *out, size_t cap) {
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, ids[i], &len);
        if (tok == NULL || len > cap - used) { return SIZE_MAX; }
        memcpy(out + used, tok, len);
        used += len;
    }
    return used;
}

// --- end shared-copy: bpe-tokenizer ---
