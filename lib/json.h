// lib/json.h: a small JSON parser for the files we read but did not write (config.json,
// tokenizer.json, adapter_config.json, safetensors headers, JSONL data): a tree of
// values, lookups by key, and errors that say where the text went wrong.
#ifndef LIB_JSON_H
#define LIB_JSON_H
#include "utils.h"

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
static inline int json_parse(Json *j, const char *text, size_t len, char *err, size_t err_size);
static inline void json_free(Json *j);
static inline int json_string(const Json *j, int index, char *out, size_t cap);
static inline int json_get(const Json *j, int object, const char *key);
static inline int json_int64(const Json *j, int index, int64_t *out);
static inline int json_double(const Json *j, int index, double *out);
static inline size_t json_quote(const char *text, char *out, size_t cap);

static inline int json_fail(Json *j, size_t at, const char *what) {
    snprintf(j->err, j->err_size, "JSON error at byte %zu: %s", at, what);
    return -1;
}

static inline void json_skip_space(const Json *j, size_t *at) {
    while (*at < j->len && (j->text[*at] == ' ' || j->text[*at] == '\t' || j->text[*at] == '\n' || j->text[*at] == '\r')) {
        (*at)++;
    }
}

static inline int json_new_token(Json *j, int type, size_t start) {
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

static inline int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static inline int is_hex(char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }
// the value of 4 hex digits (checked by the parser)
static inline unsigned hex4(const char *s) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) { v = 16 * v + (unsigned)(is_digit(s[k]) ? s[k] - '0' : (s[k] | 0x20) - 'a' + 10); }
    return v;
}

// the string starting at the quote at *at; leaves *at after the closing quote
static inline int json_parse_string(Json *j, size_t *at) {
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

static inline int json_parse_value(Json *j, size_t *at, int depth) {
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
static inline int json_parse(Json *j, const char *text, size_t len, char *err, size_t err_size) {
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

static inline void json_free(Json *j) {
    free(j->tokens);
    j->tokens = NULL;
    j->num = j->cap = 0;
}

// Decodes string token `index` into out (room for cap bytes including a final 0): the
// escapes become their characters, \uXXXX (and surrogate pairs) UTF-8. Returns the
// length, or -1 if it does not fit or holds a lone surrogate or a \u0000.
static inline int json_string(const Json *j, int index, char *out, size_t cap) {
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
static inline int json_get(const Json *j, int object, const char *key) {
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
static inline int json_int64(const Json *j, int index, int64_t *out) {
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

static inline int json_double(const Json *j, int index, double *out) {
    if (index < 0 || j->tokens[index].type != JSON_NUMBER) { return -1; }
    char buf[64];
    size_t n = j->tokens[index].end - j->tokens[index].start;
    if (n >= sizeof(buf)) { return -1; }
    memcpy(buf, j->text + j->tokens[index].start, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return 0;
}

// text as a JSON string, quotes and escapes included, into out (cap bytes, NUL-terminated);
// returns the length it needs (as snprintf: more than cap - 1 means it was cut). Control
// characters, the quote and the backslash are escaped; other bytes go as they are (UTF-8 stays UTF-8).
static inline size_t json_quote(const char *text, char *out, size_t cap) {
    size_t n = 0;
#define JSON_PUT(ch) do { if (n + 1 < cap) { out[n] = (ch); } n++; } while (0)
    JSON_PUT('"');
    for (const unsigned char *s = (const unsigned char *)text; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\') { JSON_PUT('\\'); JSON_PUT((char)*s); }
        else if (*s < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", *s);
            for (int i = 0; esc[i] != '\0'; i++) { JSON_PUT(esc[i]); }
        } else { JSON_PUT((char)*s); }
    }
    JSON_PUT('"');
#undef JSON_PUT
    if (cap > 0) { out[n < cap ? n : cap - 1] = '\0'; }
    return n;
}

#endif // LIB_JSON_H
