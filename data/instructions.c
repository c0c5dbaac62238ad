/*
data/instructions.c: the fine-tuning chapter's instruction data, built from Debian's iso-codes
package (apt-get install iso-codes: ISO 3166-1 countries and ISO 4217 currencies as JSON, in
/usr/share/iso-codes/json/). Alpaca-format records, one JSON object per line:
    {"instruction": "What is the ISO 3166 two-letter code of France?", "input": "",
     "output": "The ISO 3166-1 alpha-2 code of France is FR."}
Why this data: SmolLM2-135M-Instruct, asked "What is the ISO 3166 two-letter code of
Germany?", answers "... is 3166". The facts are short, checkable and many; a fine-tune
should teach the model the question and the answer's form, and the codes it saw.

What it writes (-o, default data/iso/):
  train.jsonl  for each country but the held-out ones: its alpha-2 code (two phrasings), its
               alpha-3 and numeric codes, the country of its alpha-2 and of its alpha-3 code,
               its official name where it has one; for each currency not named after or coded
               from a held-out country: its code, numeric code, the currency of its code.
               Each question in one of several phrasings (some with the subject in Alpaca's
               separate input field), drawn with the seed. About 1,900 records.
  eval.jsonl   the fixed evaluation: for -e held-out countries (Germany always one of them;
               the rest drawn with the seed), the alpha-2 question as the base model was asked
               it, and the alpha-3 question for a third of them; each record also has
               "answer", the bare code, and "partial", the country's other code (infer -E
               counts it as partly right: the same fact, in the other form). No held-out country's name or code is a word of
               train.jsonl (checked on the text written; the program stops otherwise).
The same seed and iso-codes version give the same bytes. finetune_lora checks any JSONL it
is given (empty fields, duplicates, UTF-8, lengths) and splits off its validation records.

    make data/iso/train.jsonl           # or: ./data/instructions -h
*/

// fsync, fileno, mkdir, stat and access are POSIX, M_PI X/Open: not C11
#define _XOPEN_SOURCE 700
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRAM "./data/instructions" // in messages: how the user runs this program

// ----------------------------------------------------------------------------
// utilities (shared copies: dev/README.md lists them)

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

// ----------------------------------------------------------------------------
// the tables: ISO 3166-1 countries and ISO 4217 currencies, as iso-codes' JSON has them

#define HINT_ISO "Debian's iso-codes package has these files (apt-get install iso-codes); -d names another folder"
#define MAX_ENTRIES 4096

typedef struct {
    char name[256];     // what we call it: iso-codes' common_name where it has one ("Bolivia"), else its name
    char official[256]; // its official_name, "" if none
    char alpha2[3], alpha3[4], numeric[4];
} Country;

typedef struct {
    char name[256], alpha3[4], numeric[4];
} Currency;

// A string field of entry `index` into out; 0 if the entry has no such key. A value that is
// not a string, or does not fit, is an error naming the file and the entry.
static int field(const Json *j, int entry, const char *key, char *out, size_t cap, const char *path, int index) {
    int at = json_get(j, entry, key);
    if (at < 0) { return 0; }
    if (j->tokens[at].type != JSON_STRING || json_string(j, at, out, cap) < 1) {
        die_file(path, HINT_ISO, "entry %d: \"%s\" is not a non-empty string of at most %zu bytes", index, key, cap - 1);
    }
    return 1;
}

// A code of n characters, each in [lo, hi] ("AB" in A-Z, "276" in 0-9)
static void check_code(const char *code, size_t n, char lo, char hi, const char *path, int index, const char *key) {
    int ok = strlen(code) == n;
    for (size_t i = 0; ok && i < n; i++) { ok = code[i] >= lo && code[i] <= hi; }
    if (!ok) { die_file(path, HINT_ISO, "entry %d: \"%s\" is \"%s\", not %zu characters %c-%c", index, key, code, n, lo, hi); }
}

// The array under the top-level key `table` ("3166-1", "4217") of a JSON file; its entries
// are the tokens after it
static int read_table(Json *j, uint8_t **text, const char *path, const char *table) {
    size_t len;
    *text = read_whole_file(path, &len, HINT_ISO);
    char err[256];
    if (json_parse(j, (const char *)*text, len, err, sizeof(err)) != 0) { die_file(path, HINT_ISO, "%s", err); }
    int array = j->tokens[0].type == JSON_OBJECT ? json_get(j, 0, table) : -1;
    if (array < 0 || j->tokens[array].type != JSON_ARRAY) { die_file(path, HINT_ISO, "no \"%s\" array at the top", table); }
    if (j->tokens[array].size < 1 || j->tokens[array].size > MAX_ENTRIES) {
        die_file(path, HINT_ISO, "%d entries in \"%s\" (1 to %d expected)", j->tokens[array].size, table, MAX_ENTRIES);
    }
    return array;
}

static int read_countries(const char *path, Country *out) {
    Json j;
    uint8_t *text;
    int array = read_table(&j, &text, path, "3166-1"), n = j.tokens[array].size;
    for (int i = 0, entry = array + 1; i < n; i++, entry = j.tokens[entry].next) {
        Country *c = &out[i];
        memset(c, 0, sizeof(*c));
        if (j.tokens[entry].type != JSON_OBJECT) { die_file(path, HINT_ISO, "entry %d is not an object", i); }
        if (!field(&j, entry, "alpha_2", c->alpha2, sizeof(c->alpha2), path, i) ||
            !field(&j, entry, "alpha_3", c->alpha3, sizeof(c->alpha3), path, i) ||
            !field(&j, entry, "numeric", c->numeric, sizeof(c->numeric), path, i) ||
            !field(&j, entry, "name", c->name, sizeof(c->name), path, i)) {
            die_file(path, HINT_ISO, "entry %d lacks one of alpha_2, alpha_3, numeric, name", i);
        }
        field(&j, entry, "common_name", c->name, sizeof(c->name), path, i);
        field(&j, entry, "official_name", c->official, sizeof(c->official), path, i);
        check_code(c->alpha2, 2, 'A', 'Z', path, i, "alpha_2");
        check_code(c->alpha3, 3, 'A', 'Z', path, i, "alpha_3");
        check_code(c->numeric, 3, '0', '9', path, i, "numeric");
        for (int k = 0; k < i; k++) {
            if (strcmp(out[k].alpha2, c->alpha2) == 0 || strcmp(out[k].name, c->name) == 0) {
                die_file(path, HINT_ISO, "entries %d and %d: the same code or name (%s, %s)", k, i, c->alpha2, c->name);
            }
        }
    }
    json_free(&j);
    free(text);
    return n;
}

static int read_currencies(const char *path, Currency *out) {
    Json j;
    uint8_t *text;
    int array = read_table(&j, &text, path, "4217"), n = j.tokens[array].size;
    for (int i = 0, entry = array + 1; i < n; i++, entry = j.tokens[entry].next) {
        Currency *c = &out[i];
        memset(c, 0, sizeof(*c));
        if (j.tokens[entry].type != JSON_OBJECT) { die_file(path, HINT_ISO, "entry %d is not an object", i); }
        if (!field(&j, entry, "alpha_3", c->alpha3, sizeof(c->alpha3), path, i) ||
            !field(&j, entry, "numeric", c->numeric, sizeof(c->numeric), path, i) ||
            !field(&j, entry, "name", c->name, sizeof(c->name), path, i)) {
            die_file(path, HINT_ISO, "entry %d lacks one of alpha_3, numeric, name", i);
        }
        check_code(c->alpha3, 3, 'A', 'Z', path, i, "alpha_3");
        check_code(c->numeric, 3, '0', '9', path, i, "numeric");
    }
    json_free(&j);
    free(text);
    return n;
}

// ----------------------------------------------------------------------------
// the records: questions and answers, each kind phrased several ways

// A phrasing: the instruction and, when it is not NULL, the input (Alpaca's layout with a
// separate input field); "%s" in one of them stands for the subject. Answers are one
// sentence that repeats the subject, so a reply can be checked for the code and read alone.
typedef struct {
    const char *instruction, *input;
} Phrasing;

// Each kind: its phrasings, and the answer. Arguments: (name, code) for a country's codes;
// (code, name) where the code is asked about.
static const Phrasing ALPHA2[] = {
    {"What is the ISO 3166 two-letter code of %s?", NULL},
    {"What is the two-letter country code of %s?", NULL},
    {"Give the ISO 3166-1 alpha-2 code for %s.", NULL},
    {"Which two-letter code does ISO 3166 assign to %s?", NULL},
    {"Tell me the alpha-2 country code of %s.", NULL},
    {"Give the ISO 3166-1 alpha-2 code of this country.", "%s"},
};
static const Phrasing ALPHA3[] = {
    {"What is the ISO 3166 three-letter code of %s?", NULL},
    {"What is the three-letter country code of %s?", NULL},
    {"Give the ISO 3166-1 alpha-3 code for %s.", NULL},
    {"Give the ISO 3166-1 alpha-3 code of this country.", "%s"},
};
static const Phrasing NUMERIC[] = {
    {"What is the ISO 3166 numeric code of %s?", NULL},
    {"Give the three-digit ISO 3166-1 numeric code of %s.", NULL},
    {"Give the ISO 3166-1 numeric code of this country.", "%s"},
};
static const Phrasing FROM_ALPHA2[] = {
    {"Which country has the ISO 3166 two-letter code %s?", NULL},
    {"Which country does the alpha-2 code %s stand for?", NULL},
    {"Name the country with this ISO 3166-1 alpha-2 code.", "%s"},
};
static const Phrasing FROM_ALPHA3[] = {
    {"Which country has the ISO 3166 three-letter code %s?", NULL},
    {"Name the country with this ISO 3166-1 alpha-3 code.", "%s"},
};
static const Phrasing OFFICIAL[] = {
    {"What is the official name of %s?", NULL},
    {"Give the full official name of %s.", NULL},
    {"What is the official name of this country?", "%s"},
};
static const Phrasing CURRENCY[] = {
    {"What is the ISO 4217 code of the currency %s?", NULL},
    {"Give the three-letter ISO 4217 code for the %s.", NULL},
    {"Give the ISO 4217 code of this currency.", "%s"},
};
static const Phrasing CURRENCY_NUMERIC[] = {
    {"What is the ISO 4217 numeric code of the currency %s?", NULL},
    {"Give the ISO 4217 numeric code of this currency.", "%s"},
};
static const Phrasing FROM_CURRENCY[] = {
    {"Which currency has the ISO 4217 code %s?", NULL},
    {"Name the currency with this ISO 4217 code.", "%s"},
};
#define COUNT(a) (sizeof(a) / sizeof(a[0]))

// The output, one JSON object per line: text with the JSON escapes (quote, backslash, the
// control characters), bytes >= 0x80 as they are (the files are UTF-8)
typedef struct {
    char *s;
    size_t len, cap;
    int records;
} Jsonl;

static void put(Jsonl *o, const char *text, size_t n) {
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->s = (char *)realloc(o->s, o->cap);
        if (o->s == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    }
    memcpy(o->s + o->len, text, n);
    o->len += n;
    o->s[o->len] = '\0';
}
static void put_json_string(Jsonl *o, const char *text) {
    put(o, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') { esc[0] = '\\'; esc[1] = (char)*p; put(o, esc, 2); }
        else if (*p < 0x20) { snprintf(esc, sizeof(esc), "\\u%04x", *p); put(o, esc, 6); }
        else { put(o, (const char *)p, 1); }
    }
    put(o, "\"", 1);
}

// out = pattern with its one "%s" replaced by subject (no printf: the text is data)
static void fill(char *out, size_t cap, const char *pattern, const char *subject) {
    const char *at = strstr(pattern, "%s");
    size_t head = at != NULL ? (size_t)(at - pattern) : strlen(pattern);
    int n = snprintf(out, cap, "%.*s%s%s", (int)head, pattern, at != NULL ? subject : "", at != NULL ? at + 2 : "");
    if (n < 0 || (size_t)n >= cap) { fprintf(stderr, "Error: a record is longer than %zu bytes: %s\n", cap - 1, subject); exit(EXIT_FAILURE); }
}

// One record: a phrasing (chosen by the caller) filled with the subject, and the answer.
// `answer`, when not NULL, is the bare code an evaluation expects (its "answer" field), and
// `partial` the same country's other code (its "partial": infer -E counts it partly right).
static void record(Jsonl *o, Phrasing p, const char *subject, const char *output, const char *answer, const char *partial) {
    char instruction[1024], input[1024];
    fill(instruction, sizeof(instruction), p.instruction, subject);
    fill(input, sizeof(input), p.input != NULL ? p.input : "", subject);
    put(o, "{\"instruction\": ", 16);
    put_json_string(o, instruction);
    put(o, ", \"input\": ", 11);
    put_json_string(o, input);
    put(o, ", \"output\": ", 12);
    put_json_string(o, output);
    if (answer != NULL) {
        put(o, ", \"answer\": ", 12);
        put_json_string(o, answer);
    }
    if (partial != NULL) {
        put(o, ", \"partial\": [", 14);
        put_json_string(o, partial);
        put(o, "]", 1);
    }
    put(o, "}\n", 2);
    o->records++;
}

// the phrasing for record `which` of subject `id`: a seeded draw, the same for the same seed;
// `other` draws a phrasing other than the one `which` drew (for a second record of one kind)
static size_t draw(size_t n, uint64_t seed, uint64_t id, uint64_t which) {
    return (size_t)(rng_uniform_at(rng_subkey(seed, id, which), 0) * n);
}
static Phrasing pick(const Phrasing *ps, size_t n, uint64_t seed, uint64_t id, uint64_t which) { return ps[draw(n, seed, id, which)]; }
static Phrasing pick_other(const Phrasing *ps, size_t n, uint64_t seed, uint64_t id, uint64_t which, uint64_t other) {
    return ps[(draw(n, seed, id, which) + 1 + draw(n - 1, seed, id, other)) % n];
}

// Does `text` hold `word` with no letter or digit on either side? (a currency named after an
// evaluation country, "Bolivian" for Bolivia, or its code)
static int contains_word(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word)) {
        int before = p > text && isalnum((unsigned char)p[-1]), after = isalnum((unsigned char)p[n]);
        if (!before && !after) { return 1; }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// main

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

typedef struct {
    const char *iso_dir, *out_dir;
    uint64_t seed;
    int eval_countries;
} Options;

static void print_usage(const Options *d) {
    printf("usage: %s [flags]    (the instruction data of finetune_lora, from Debian's iso-codes)\n"
           "  -d DIR   iso-codes' JSON files (iso_3166-1.json, iso_4217.json) [%s]\n"
           "  -o DIR   where train.jsonl and eval.jsonl go [%s]\n"
           "  -s N     seed: which countries are held out for evaluation, which phrasings [%llu]\n"
           "  -e N     countries held out for evaluation (Germany always among them) [%d]\n"
           "  -h       this help\n",
           PROGRAM, d->iso_dir, d->out_dir, (unsigned long long)d->seed, d->eval_countries);
}

int main(int argc, char **argv) {
    Options defaults = {"/usr/share/iso-codes/json", "data/iso", 1337, 30}, o = defaults;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0) { print_usage(&defaults); return 0; }
        if (argv[i][0] != '-' || argv[i][1] == '\0' || argv[i][2] != '\0') { usage_error("unknown argument '%s'", argv[i]); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", argv[i]); }
        const char *v = argv[i + 1];
        switch (argv[i][1]) {
        case 'd': o.iso_dir = v; break;
        case 'o': o.out_dir = v; break;
        case 's': o.seed = (uint64_t)parse_int(argv[i], v, 0); break;
        case 'e': o.eval_countries = (int)parse_int(argv[i], v, 1); break;
        default: usage_error("unknown flag %s", argv[i]);
        }
    }
    char path[MAX_PATH_LEN];
    static Country countries[MAX_ENTRIES];
    static Currency currencies[MAX_ENTRIES];
    path_concat(path, o.iso_dir, "/iso_3166-1.json");
    int nc = read_countries(path, countries);
    path_concat(path, o.iso_dir, "/iso_4217.json");
    int nm = read_currencies(path, currencies);
    if (o.eval_countries > nc / 4) {
        char msg[160];
        snprintf(msg, sizeof(msg), "-e %d: at most a quarter of the %d countries (%d) can be held out", o.eval_countries, nc, nc / 4);
        usage_error("%s", msg);
    }

    // The evaluation countries: Germany (the question the base model gets wrong), then a
    // seeded draw. A country whose name is a word of another country's name or official name
    // ("Guinea": "Papua New Guinea") cannot be held out: training on the other would show it.
    int held[MAX_ENTRIES] = {0}, order[MAX_ENTRIES], num_held = 0;
    for (int i = 0; i < nc; i++) { order[i] = i; }
    for (int i = nc - 1; i > 0; i--) { // Fisher-Yates with the seed's counter-based draws
        int k = (int)(rng_uniform_at(rng_key(o.seed, 1), (uint64_t)i) * (i + 1));
        int t = order[i]; order[i] = order[k]; order[k] = t;
    }
    for (int i = 0; i < nc; i++) { // Germany first
        if (strcmp(countries[order[i]].alpha2, "DE") == 0) { int t = order[0]; order[0] = order[i]; order[i] = t; }
    }
    int evals[MAX_ENTRIES];
    for (int i = 0; i < nc && num_held < o.eval_countries; i++) {
        const Country *c = &countries[order[i]];
        int inside = 0;
        for (int k = 0; k < nc && !inside; k++) {
            inside = k != order[i] && (contains_word(countries[k].name, c->name) || contains_word(countries[k].official, c->name));
        }
        if (!inside) { held[order[i]] = 1; evals[num_held++] = order[i]; }
    }

    // training records: every other country, and every currency not named after or coded
    // from a held-out country (ISO 4217 codes start with the country's alpha-2: BOB, Bolivia)
    Jsonl train = {NULL, 0, 0, 0}, eval = {NULL, 0, 0, 0};
    put(&train, "", 0);
    put(&eval, "", 0);
    int kinds[10] = {0}, skipped_currencies = 0;
    for (int i = 0; i < nc; i++) {
        const Country *c = &countries[i];
        if (held[i]) { continue; }
        char out[1024];
        uint64_t id = (uint64_t)i;
        snprintf(out, sizeof(out), "The ISO 3166-1 alpha-2 code of %s is %s.", c->name, c->alpha2);
        record(&train, pick(ALPHA2, COUNT(ALPHA2), o.seed, id, 0), c->name, out, NULL, NULL);
        record(&train, pick_other(ALPHA2, COUNT(ALPHA2), o.seed, id, 0, 1), c->name, out, NULL, NULL);
        kinds[0] += 2;
        snprintf(out, sizeof(out), "The ISO 3166-1 alpha-3 code of %s is %s.", c->name, c->alpha3);
        record(&train, pick(ALPHA3, COUNT(ALPHA3), o.seed, id, 2), c->name, out, NULL, NULL);
        kinds[1]++;
        snprintf(out, sizeof(out), "The ISO 3166-1 numeric code of %s is %s.", c->name, c->numeric);
        record(&train, pick(NUMERIC, COUNT(NUMERIC), o.seed, id, 3), c->name, out, NULL, NULL);
        kinds[2]++;
        snprintf(out, sizeof(out), "%s is the ISO 3166-1 alpha-2 code of %s.", c->alpha2, c->name);
        record(&train, pick(FROM_ALPHA2, COUNT(FROM_ALPHA2), o.seed, id, 4), c->alpha2, out, NULL, NULL);
        kinds[3]++;
        snprintf(out, sizeof(out), "%s is the ISO 3166-1 alpha-3 code of %s.", c->alpha3, c->name);
        record(&train, pick(FROM_ALPHA3, COUNT(FROM_ALPHA3), o.seed, id, 5), c->alpha3, out, NULL, NULL);
        kinds[4]++;
        if (c->official[0] != '\0') {
            snprintf(out, sizeof(out), "The official name of %s is %s.", c->name, c->official);
            record(&train, pick(OFFICIAL, COUNT(OFFICIAL), o.seed, id, 6), c->name, out, NULL, NULL);
            kinds[5]++;
        }
    }
    for (int i = 0; i < nm; i++) {
        const Currency *m = &currencies[i];
        int named = 0;
        for (int k = 0; k < num_held && !named; k++) {
            const Country *c = &countries[evals[k]];
            named = strncmp(m->alpha3, c->alpha2, 2) == 0 || strstr(m->name, c->name) != NULL;
        }
        if (named) { skipped_currencies++; continue; }
        char out[1024];
        uint64_t id = (uint64_t)(MAX_ENTRIES + i);
        snprintf(out, sizeof(out), "The ISO 4217 code of the %s is %s.", m->name, m->alpha3);
        record(&train, pick(CURRENCY, COUNT(CURRENCY), o.seed, id, 0), m->name, out, NULL, NULL);
        snprintf(out, sizeof(out), "The ISO 4217 numeric code of the %s is %s.", m->name, m->numeric);
        record(&train, pick(CURRENCY_NUMERIC, COUNT(CURRENCY_NUMERIC), o.seed, id, 1), m->name, out, NULL, NULL);
        snprintf(out, sizeof(out), "%s is the ISO 4217 code of the %s.", m->alpha3, m->name);
        record(&train, pick(FROM_CURRENCY, COUNT(FROM_CURRENCY), o.seed, id, 2), m->alpha3, out, NULL, NULL);
        kinds[6] += 3;
    }

    // the evaluation: each held-out country's alpha-2 question, as the base model was asked
    // it, and for the first third its alpha-3 one too
    for (int k = 0; k < num_held; k++) {
        const Country *c = &countries[evals[k]];
        char out[1024];
        snprintf(out, sizeof(out), "The ISO 3166-1 alpha-2 code of %s is %s.", c->name, c->alpha2);
        record(&eval, ALPHA2[0], c->name, out, c->alpha2, c->alpha3);
    }
    for (int k = 0; k < (num_held + 2) / 3; k++) {
        const Country *c = &countries[evals[k]];
        char out[1024];
        snprintf(out, sizeof(out), "The ISO 3166-1 alpha-3 code of %s is %s.", c->name, c->alpha3);
        record(&eval, ALPHA3[0], c->name, out, c->alpha3, c->alpha2);
    }

    // leakage, checked on the text written: no held-out country's name or code is a word of
    // the training data
    for (int k = 0; k < num_held; k++) {
        const Country *c = &countries[evals[k]];
        const char *words[3] = {c->name, c->alpha2, c->alpha3};
        for (int w = 0; w < 3; w++) {
            if (contains_word(train.s, words[w])) {
                fprintf(stderr, "Error: the training data names the held-out %s (%s): a bug in %s\n", c->name, words[w], PROGRAM);
                return EXIT_FAILURE;
            }
        }
    }

    if (mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) { die_file(o.out_dir, NULL, "cannot make the folder: %s", strerror(errno)); }
    const void *bufs[1];
    size_t sizes[1];
    path_concat(path, o.out_dir, "/train.jsonl");
    bufs[0] = train.s;
    sizes[0] = train.len;
    write_file_atomic(path, bufs, sizes, 1);
    printf("wrote %s: %d records from %d countries and %d currencies (%d currencies left out, named after or coded from "
           "held-out countries)\n", path, train.records, nc - num_held, nm - skipped_currencies, skipped_currencies);
    printf("  alpha-2 %d, alpha-3 %d, numeric %d, country of an alpha-2 code %d, of an alpha-3 code %d, official names %d, "
           "currencies %d\n", kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5], kinds[6]);
    path_concat(path, o.out_dir, "/eval.jsonl");
    bufs[0] = eval.s;
    sizes[0] = eval.len;
    write_file_atomic(path, bufs, sizes, 1);
    printf("wrote %s: %d questions about %d held-out countries (seed %llu), none of them in the training data\n", path,
           eval.records, num_held, (unsigned long long)o.seed);
    free(train.s);
    free(eval.s);
    return 0;
}
