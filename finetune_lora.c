/*
finetune_lora.c: LoRA fine-tuning on the CPU, in plain C, fp32 (issue 14: in progress).

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", 2021) freezes a
pretrained model and trains, beside some of its linear layers, a low-rank update: y = x W^T
+ s (x A^T) B^T with A (r, in) and B (out, r), r small (4 to 64), s = alpha / r. What trains is
r (in + out) numbers per layer instead of in x out, so the gradients and AdamW's moments of a
135M-parameter model fit in a few megabytes; the frozen weights need no gradient and no
optimizer state at all, and need not even be fp32 (QLoRA keeps them in 4 bits).

Here so far: the model of either family (GPT-2, the Llama family: our model files) with a
PEFT adapter (adapter_config.json + adapter_model.safetensors, PEFT's names and layout), the
forward pass to a loss on chosen tokens only (a response, not its prompt), the backward pass
to the adapter's gradients (through the frozen layers: norms, RoPE, attention with grouped
key/value heads, GELU or SwiGLU), gradient clipping, AdamW, and merging an adapter into the
base weights. test_finetune_lora.c checks all of it against PEFT on three tiny models
(dev/reference/lora_reference.py: logits, every gradient, five accumulated AdamW steps).
Next: the command line, the instruction data (data/instructions.c writes it), the prompt
template and masking, checkpoints, writing adapters, and the evaluation before and after.

Sizes: B sequences of T positions, N = B T rows, C channels, NH query heads and NKV key/value
heads of HS channels, Q = NH HS, KV = NKV HS, H the MLP's width, V vocabulary (Vp padded), L
layers, r the adapter's rank.
*/

// fsync, fileno, fseeko, mkdir and stat are POSIX; M_PI is X/Open
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void gemm_micro_kernel(float *c, size_t c_rs, size_t c_cs, const float *a, size_t a_rs, size_t a_cs,
                              const float *bp, int kc, int mr, int nr, int accumulate) {
    // rows past the edge of A repeat row 0: computed, never stored
    const float *arow[GEMM_MR];
    for (int i = 0; i < GEMM_MR; i++) { arow[i] = a + (size_t)(i < mr ? i : 0) * a_rs; }
    vecf acc[GEMM_MR][2];
    memset(acc, 0, sizeof(acc));
    if (nr <= GEMM_VEC) { // a narrow panel (a short prompt's 16 rows): its right half is padding
        for (int k = 0; k < kc; k++) {
            vecf b0;
            memcpy(&b0, bp + (size_t)k * GEMM_NR, sizeof(vecf));
            for (int i = 0; i < GEMM_MR; i++) { acc[i][0] += arow[i][(size_t)k * a_cs] * b0; }
        }
    } else {
        for (int k = 0; k < kc; k++) { // most of the training time is spent in this loop
            vecf b0, b1;
            memcpy(&b0, bp + (size_t)k * GEMM_NR, sizeof(vecf));
            memcpy(&b1, bp + (size_t)k * GEMM_NR + GEMM_VEC, sizeof(vecf));
            size_t ak = (size_t)k * a_cs;
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
    static _Thread_local float *buffers[2] = {NULL, NULL};
    if (buffers[0] == NULL) {
        buffers[0] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
        buffers[1] = (float *)mallocCheck(sizeof(float) * GEMM_KC * GEMM_NC);
    }
    float *packed[2] = {buffers[0], buffers[1]}; // (the calling thread's, read by the whole team)
    int strips = (M + GEMM_MR - 1) / GEMM_MR;
    // threads only for products big enough to pay for waking them, and not from inside a
    // parallel region (there the caller's threads each run products of their own)
    #pragma omp parallel if ((double)M * N * K > 2e6 && !omp_in_parallel())
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
                                      bp + (size_t)p * kc * GEMM_NR, kc, mr, nr, accumulate || pc > 0);
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

// ----------------------------------------------------------------------------
// the base model, frozen: either family's tensors under one set of names

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
static void base_load(Base *b, const char *path) {
    memset(b, 0, sizeof(*b));
    FILE *fp = fopenCheck(path, "rb");
    int magic = 0;
    if (fread(&magic, sizeof(magic), 1, fp) != 1) { magic = 0; }
    fcloseCheck(fp);
    if (magic == LLAMA_MAGIC) {
        llama_load(&b->llama_weights, path);
        LlamaConfig c = b->llama_weights.config;
        float **t = b->llama_weights.tensors; // wte ln1w qkvw qkvb attprojw ln2w fcw fcprojw lnfw lm_head
        *b = (Base){.llama = 1, .L = c.num_layers, .C = c.channels, .NH = c.num_heads, .NKV = c.num_kv_heads,
                    .HS = c.head_size, .H = c.hidden, .V = c.vocab_size, .Vp = c.vocab_size, .maxT = c.max_seq_len,
                    .eps = c.norm_eps, .wte = t[0], .ln1w = t[1], .qkvw = t[2], .qkvb = t[3], .attprojw = t[4], .ln2w = t[5],
                    .fcw = t[6], .fcprojw = t[7], .lnfw = t[8], .lm_head = c.tied ? t[0] : t[9],
                    .inv_freq = rope_frequencies(&c), .llama_weights = b->llama_weights};
    } else {
        gpt2_build_from_checkpoint(&b->gpt2, path);
        GPT2Config c = b->gpt2.config;
        ParameterTensors p = b->gpt2.params;
        *b = (Base){.llama = 0, .L = c.num_layers, .C = c.channels, .NH = c.num_heads, .NKV = c.num_heads,
                    .HS = c.channels / c.num_heads, .H = 4 * c.channels, .V = c.vocab_size, .Vp = c.padded_vocab_size,
                    .maxT = c.max_seq_len, .eps = 1e-5f, .wte = p.wte, .wpe = p.wpe, .ln1w = p.ln1w, .ln1b = p.ln1b,
                    .qkvw = p.qkvw, .qkvb = p.qkvb, .attprojw = p.attprojw, .attprojb = p.attprojb, .ln2w = p.ln2w,
                    .ln2b = p.ln2b, .fcw = p.fcw, .fcb = p.fcb, .fcprojw = p.fcprojw, .fcprojb = p.fcprojb, .lnfw = p.lnfw,
                    .lnfb = p.lnfb, .lm_head = p.wte, .gpt2 = b->gpt2};
    }
}

static void base_free(Base *b) {
    gpt2_weights_free(&b->gpt2);
    llama_free(&b->llama_weights);
    free(b->inv_freq);
    memset(b, 0, sizeof(*b));
}

// ----------------------------------------------------------------------------
// LoRA (Hu et al. 2021): each adapted linear layer y = x W^T + b gets a low-rank update,
//     y = x W^T + b + s (x A^T) B^T,    A (r, in), B (out, r), s = alpha / r (rsLoRA: alpha / sqrt(r))
// W stays frozen; only A and B train: r (in + out) numbers instead of in x out. PEFT names
// each adapted module by its path in the Hugging Face model, and so do we (its files are
// ours). Our model files fuse some of Hugging Face's layers: q, k and v are one (Q + 2KV, C)
// matrix, gate and up one (2H, C); a module of Hugging Face's then adapts a band of rows of
// ours (its `offset`, `out` rows), which changes nothing in the arithmetic.

enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, NUM_SITES }; // the four linear layers of a block

typedef struct {
    char name[128]; // PEFT's module path, e.g. "model.layers.3.self_attn.q_proj"
    int layer, site, offset, out, in;
    float *A, *B;   // (r, in), (out, r): into Lora.params
    float *dA, *dB; // their gradients: into Lora.grads
} LoraModule;

typedef struct {
    int r;
    float alpha, scale;
    int rslora;
    int num_modules;
    LoraModule *modules;
    size_t num_params;
    float *params, *grads, *m, *v; // all modules' A and B, back to back (and AdamW's moments)
} Lora;

// Every module the family has, in PEFT's names: fills names/sites/offsets/outs/ins for layer
// l and returns how many (GPT-2: 4, the Llama family: 7)
static int family_modules(const Base *b, int l, char names[][128], int *site, int *offset, int *out, int *in) {
    int C = b->C, Q = b->NH * b->HS, KV = b->NKV * b->HS, H = b->H;
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

// Reads a PEFT LoRA adapter folder for base b: adapter_config.json (peft_type LORA, r,
// lora_alpha, use_rslora, bias "none") and adapter_model.safetensors, whose every tensor
// must be the lora_A or lora_B of a module the base has, with shapes [r, in] and [out, r].
// Any mismatch is one error naming the file.
static void lora_load(Lora *lora, const Base *b, const char *dir) {
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
    lora->params = (float *)calloc(lora->num_params, sizeof(float));
    lora->grads = (float *)calloc(lora->num_params, sizeof(float));
    lora->m = (float *)calloc(lora->num_params, sizeof(float));
    lora->v = (float *)calloc(lora->num_params, sizeof(float));
    if (lora->params == NULL || lora->grads == NULL || lora->m == NULL || lora->v == NULL) { die_file(path, NULL, "out of memory"); }
    FILE *fp = fopenCheck(path, "rb");
    size_t at_param = 0, largest = 0; // (the biggest tensor, in bytes at 8 a number: the read buffer)
    for (int m = 0; m < lora->num_modules; m++) {
        size_t side = (size_t)(lora->modules[m].in > lora->modules[m].out ? lora->modules[m].in : lora->modules[m].out);
        largest = (size_t)r * side > largest ? (size_t)r * side : largest;
    }
    void *buf = mallocCheck(largest * 8);
    for (int m = 0; m < lora->num_modules; m++) {
        LoraModule *mod = &lora->modules[m];
        char key[256];
        mod->A = lora->params + at_param; mod->dA = lora->grads + at_param; at_param += (size_t)r * mod->in;
        mod->B = lora->params + at_param; mod->dB = lora->grads + at_param; at_param += (size_t)r * mod->out;
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
    gemm(m->dB, (size_t)r, 1, dy + m->offset, 1, (size_t)OUT, h, (size_t)r, 1, m->out, r, N, 1);
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
    int QKV = (NH + 2 * NKV) * HS;
    #pragma omp parallel for if ((size_t)N * QKV > 65536)
    for (int n = 0; n < N; n++) {
        int pos = n % T;
        for (int h = 0; h < NH + NKV; h++) { // the query heads, then the key heads (they follow in qkv)
            float *x = qkv + (size_t)n * QKV + (size_t)h * HS;
            for (int i = 0; i < HS / 2; i++) {
                float angle = (float)pos * inv_freq[i], c = cosf(angle), s = sign * sinf(angle);
                float x0 = x[i], x1 = x[i + HS / 2];
                x[i] = x0 * c - x1 * s;
                x[i + HS / 2] = x1 * c + x0 * s;
            }
        }
    }
}

// Causal self-attention of B sequences of T rows: q, k, v from qkv (N, Q + 2KV); query head
// h reads key/value head h / (NH / NKV). att (B, NH, T, T): the probabilities, kept.
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * QKV + (size_t)h * HS;
                float *a = att + (((size_t)b * NH + h) * T + t) * T, maxval = -INFINITY, sum = 0.0f;
                for (int s = 0; s <= t; s++) {
                    const float *k = qkv + ((size_t)b * T + s) * QKV + Q + (size_t)g * HS;
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                    a[s] = dot * scale;
                    maxval = a[s] > maxval ? a[s] : maxval;
                }
                for (int s = 0; s <= t; s++) { a[s] = expf(a[s] - maxval); sum += a[s]; }
                for (int s = 0; s <= t; s++) { a[s] /= sum; }
                for (int s = t + 1; s < T; s++) { a[s] = 0.0f; }
                float *o = out + ((size_t)b * T + t) * Q + (size_t)h * HS;
                for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
                for (int s = 0; s <= t; s++) {
                    const float *v = qkv + ((size_t)b * T + s) * QKV + Q + KV + (size_t)g * HS;
                    for (int i = 0; i < HS; i++) { o[i] += a[s] * v[i]; }
                }
            }
        }
    }
}
// dqkv (N, Q + 2KV) = the gradient of attention's inputs, from dout (N, Q): with p = att,
//     dv[s] += p[t,s] dout[t],  dp[t,s] = dout[t] . v[s],  dz[t,s] = p[t,s] (dp[t,s] - sum_s' p[t,s'] dp[t,s']),
//     dq[t] += scale sum_s dz[t,s] k[s],  dk[s] += scale dz[t,s] q[t]
// Key/value heads shared by several query heads sum their gradients: one thread per
// (sequence, key/value head) writes them, so no two threads write the same numbers.
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int NH, int NKV,
                               int HS) {
    int Q = NH * HS, KV = NKV * HS, QKV = Q + 2 * KV, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(float));
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            float *dp = (float *)mallocCheck((size_t)T * sizeof(float));
            for (int h = g * group; h < (g + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T, *dO = dout + ((size_t)b * T + t) * Q + (size_t)h * HS;
                    const float *q = qkv + ((size_t)b * T + t) * QKV + (size_t)h * HS;
                    float *dq = dqkv + ((size_t)b * T + t) * QKV + (size_t)h * HS, dot = 0.0f;
                    for (int s = 0; s <= t; s++) {
                        const float *v = qkv + ((size_t)b * T + s) * QKV + Q + KV + (size_t)g * HS;
                        float *dv = dqkv + ((size_t)b * T + s) * QKV + Q + KV + (size_t)g * HS;
                        dp[s] = 0.0f;
                        for (int i = 0; i < HS; i++) { dp[s] += dO[i] * v[i]; dv[i] += a[s] * dO[i]; }
                        dot += a[s] * dp[s];
                    }
                    for (int s = 0; s <= t; s++) {
                        float dz = a[s] * (dp[s] - dot) * scale;
                        const float *k = qkv + ((size_t)b * T + s) * QKV + Q + (size_t)g * HS;
                        float *dk = dqkv + ((size_t)b * T + s) * QKV + Q + (size_t)g * HS;
                        for (int i = 0; i < HS; i++) { dq[i] += dz * k[i]; dk[i] += dz * q[i]; }
                    }
                }
            }
            free(dp);
        }
    }
}

// GPT-2's GELU (tanh form) and SwiGLU (the Llama family: silu(gate) up), and their backward
#define GELU_K 0.7978845608028654f // sqrt(2 / pi)
static void activation_forward(float *out, const float *inp, int N, int H, int llama) {
    #pragma omp parallel for if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            if (llama) {
                float a = inp[(size_t)n * 2 * H + j], u = inp[(size_t)n * 2 * H + H + j];
                out[(size_t)n * H + j] = a / (1.0f + expf(-a)) * u;
            } else {
                float x = inp[(size_t)n * H + j];
                out[(size_t)n * H + j] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
            }
        }
    }
}
static void activation_backward(float *dinp, const float *dout, const float *inp, int N, int H, int llama) {
    #pragma omp parallel for if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < H; j++) {
            float d = dout[(size_t)n * H + j];
            if (llama) { // d/da silu(a) = sigmoid(a) (1 + a (1 - sigmoid(a)))
                float a = inp[(size_t)n * 2 * H + j], u = inp[(size_t)n * 2 * H + H + j], sig = 1.0f / (1.0f + expf(-a));
                dinp[(size_t)n * 2 * H + j] = d * u * sig * (1.0f + a * (1.0f - sig));
                dinp[(size_t)n * 2 * H + H + j] = d * a * sig;
            } else {
                float x = inp[(size_t)n * H + j], u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
                float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
                dinp[(size_t)n * H + j] = d * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
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
    float *dx, *dbuf, *dbuf2, *dh; // backward scratch: (N, C), (N, max width) twice, (N, r)
} Acts;

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void acts_allocate(Acts *a, const Base *b, const Lora *lora, int B, int T) {
    memset(a, 0, sizeof(*a));
    a->B = B; a->T = T;
    size_t N = (size_t)B * T, L = b->L, C = b->C, Q = (size_t)b->NH * b->HS, QKV = Q + 2 * (size_t)b->NKV * b->HS;
    size_t MLP = (b->llama ? 2 : 1) * (size_t)b->H, wide = max3(QKV, MLP, max3(C, Q, b->H));
    float **slots[] = {&a->x, &a->xmid, &a->n1, &a->n2, &a->stats, &a->qkv, &a->att, &a->atty, &a->fc, &a->act, &a->h, &a->nf,
                       &a->logits, &a->dx, &a->dbuf, &a->dbuf2, &a->dh};
    size_t sizes[] = {(L + 1) * N * C, L * N * C, L * N * C, L * N * C, (L * 4 + 2) * N, L * N * QKV, L * B * b->NH * T * T,
                      L * N * Q, L * N * MLP, L * N * b->H, (size_t)lora->num_modules * N * lora->r, N * C, N * b->Vp,
                      N * C, N * wide, N * wide, N * lora->r};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        *slots[k] = (float *)calloc(sizes[k] > 0 ? sizes[k] : 1, sizeof(float));
        if (*slots[k] == NULL) { fprintf(stderr, "Error: out of memory for the activations (B=%d T=%d)\n", B, T); exit(EXIT_FAILURE); }
    }
}

static void acts_free(Acts *a) {
    float *all[] = {a->x, a->xmid, a->n1, a->n2, a->stats, a->qkv, a->att, a->atty, a->fc, a->act, a->h, a->nf, a->logits, a->dx,
                    a->dbuf, a->dbuf2, a->dh};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) { free(all[k]); }
    memset(a, 0, sizeof(*a));
}

// The LoRA modules of one layer and site, added to y (its outputs) from x (its input)
static void site_lora_forward(float *y, const float *x, int layer, int site, const Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        const LoraModule *m = &lora->modules[k];
        if (m->layer == layer && m->site == site) { lora_forward(y, a->h + (size_t)k * N * lora->r, x, m, lora->scale, lora->r, N, OUT); }
    }
}
static void site_lora_backward(float *dx, const float *dy, const float *x, int layer, int site, Lora *lora, Acts *a, int N, int OUT) {
    for (int k = 0; k < lora->num_modules; k++) {
        LoraModule *m = &lora->modules[k];
        if (m->layer == layer && m->site == site) {
            lora_backward(dx, a->dh, dy, a->h + (size_t)k * N * lora->r, x, m, lora->scale, lora->r, N, OUT);
        }
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
    double total = 0.0;
    int counted = 0;
    for (int n = 0; n < N; n++) { // softmax over the V real tokens; the loss where there is a label
        float *row = a->logits + (size_t)n * b->Vp, maxval = -INFINITY;
        if (labels[n] == -100) { continue; }
        if (labels[n] < 0 || labels[n] >= b->V) { fprintf(stderr, "Error: label %d at row %d is outside the vocabulary (%d)\n", labels[n], n, b->V); exit(EXIT_FAILURE); }
        for (int v = 0; v < b->V; v++) { maxval = row[v] > maxval ? row[v] : maxval; }
        double sum = 0.0;
        for (int v = 0; v < b->V; v++) { sum += exp((double)row[v] - maxval); }
        total += log(sum) + maxval - row[labels[n]];
        for (int v = 0; v < b->V; v++) { row[v] = (float)(exp((double)row[v] - maxval) / sum); }
        counted++;
    }
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
