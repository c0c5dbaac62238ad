// lib/safetensors.h: Hugging Face's safetensors files: the JSON header (names, dtypes,
// shapes, offsets) checked against the file, tensors read as fp32 from F32/F16/BF16, and
// written back.
#ifndef LIB_SAFETENSORS_H
#define LIB_SAFETENSORS_H
#include <inttypes.h>
#include "utils.h"
#include "json.h"

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

static inline int st_fail(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int st_fail(char *err, size_t err_size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_size, fmt, args);
    va_end(args);
    return -1;
}

static inline int st_compare_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

static inline int st_compare_begin(const void *a, const void *b) {
    uint64_t x = (*(const StTensor *const *)a)->begin, y = (*(const StTensor *const *)b)->begin;
    return x < y ? -1 : x > y;
}

// Checks the entries of a parsed header into st->tensors (room for all) and order (the
// same, to be sorted by offset). 0, or -1 and a message in err.
static inline int st_check_entries(SafeTensors *st, const Json *j, StTensor **order, uint64_t data_len, char *err, size_t err_size) {
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
static inline int safetensors_parse_header(SafeTensors *st, const char *header, size_t N, uint64_t data_len, char *err, size_t err_size) {
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
static inline int safetensors_header_length(const uint8_t *head, uint64_t file_len, size_t *N, char *err, size_t err_size) {
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
static inline int safetensors_parse_buffer(SafeTensors *st, const uint8_t *buf, size_t len, char *err, size_t err_size) {
    size_t N = 0;
    memset(st, 0, sizeof(*st));
    if (safetensors_header_length(buf, len, &N, err, err_size) != 0) { return -1; }
    return safetensors_parse_header(st, (const char *)buf + 8, N, len - 8 - N, err, err_size);
}

static inline void safetensors_free(SafeTensors *st) {
    free(st->tensors);
    memset(st, 0, sizeof(*st));
}

static inline const StTensor *safetensors_find(const SafeTensors *st, const char *name) {
    for (int k = 0; k < st->num; k++) {
        if (strcmp(st->tensors[k].name, name) == 0) { return &st->tensors[k]; }
    }
    return NULL;
}

// Reads and checks the header of the safetensors file at path (any error: one message
// naming the file, and exit). The data is read later, tensor by tensor.
static inline void safetensors_open(SafeTensors *st, const char *path, const char *hint) {
    char err[512];
    struct stat info;
    if (stat(path, &info) != 0) { die_file(path, hint, "cannot read it: %s", strerror(errno)); }
    FILE *fp = fopenCheck(path, "rb");
    if (fseeko(fp, 0, SEEK_END) != 0) { die_file(path, NULL, "cannot seek: %s", strerror(errno)); }
    off_t file_len = ftello(fp);
    uint8_t head[8] = {0};
    size_t N = 0;
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
static inline int st_float_dtype(const char *dtype) {
    return strcmp(dtype, "F32") == 0 || strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 || strcmp(dtype, "F64") == 0;
}

// Reads tensor t (F32, F16, BF16 or F64: st_float_dtype) of an open file and widens it to
// float32 into out; buf holds its bytes on the way.
static inline void st_read_floats(FILE *fp, const SafeTensors *st, const StTensor *t, float *out, void *buf, const char *path) {
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

// ----------------------------------------------------------------------------
// writing: the header for tensors laid out back to back in the order given

// A tensor to write: its name, dtype (F32, BF16, ...: its bytes from ST_DTYPES) and shape
typedef struct {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} StOut;

// The file's first bytes for tensors t[0..n): the header's length (8 bytes, little-endian),
// then {"__metadata__":{"format":"pt", ...}, "name":{"dtype","shape","data_offsets"}, ...} as
// transformers writes it, padded with spaces to a multiple of 8 so that the data, which
// follows, is aligned. Returns them (malloc'ed), their count in *len, and the data's bytes
// in *data_bytes.
// (appends to a header of capacity cap; a header that would not fit is our own error)
static inline void st_append(char *header, size_t cap, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline void st_append(char *header, size_t cap, size_t *used, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int n = *used < cap ? vsnprintf(header + *used, cap - *used, fmt, args) : -1;
    va_end(args);
    if (n < 0 || *used + (size_t)n >= cap) {
        fprintf(stderr, "Error: safetensors_header_bytes: the header outgrew its %zu bytes (a bug: its size estimate)\n", cap);
        exit(EXIT_FAILURE);
    }
    *used += (size_t)n;
}
// metadata: more "key":"value" members of __metadata__ (JSON, quoted: json_quote), or NULL
static inline uint8_t *safetensors_header_bytes(const StOut *t, int n, const char *metadata, size_t *len, size_t *data_bytes) {
    size_t cap = 64 + (metadata != NULL ? strlen(metadata) : 0), used = 0, offset = 0;
    for (int i = 0; i < n; i++) { cap += strlen(t[i].name) + strlen(t[i].dtype) + 64 + 24 * (size_t)(t[i].ndim + 2); }
    uint8_t *out = (uint8_t *)mallocCheck(8 + cap + 8); // (the length, the header, up to 7 bytes of padding)
    char *header = (char *)out + 8;
    st_append(header, cap, &used, "{\"__metadata__\":{\"format\":\"pt\"%s%s}", metadata != NULL ? "," : "", metadata != NULL ? metadata : "");
    for (int i = 0; i < n; i++) {
        size_t element = 0, numel = 1;
        for (size_t d = 0; d < sizeof(ST_DTYPES) / sizeof(ST_DTYPES[0]); d++) {
            if (strcmp(t[i].dtype, ST_DTYPES[d].name) == 0) { element = ST_DTYPES[d].bytes; }
        }
        if (element == 0 || t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
            fprintf(stderr, "Error: safetensors_header_bytes: tensor %s: dtype %s, %d dims\n", t[i].name, t[i].dtype, t[i].ndim);
            exit(EXIT_FAILURE);
        }
        st_append(header, cap, &used, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) {
            st_append(header, cap, &used, "%s%" PRId64, d > 0 ? "," : "", t[i].shape[d]);
            numel *= (size_t)t[i].shape[d];
        }
        st_append(header, cap, &used, "],\"data_offsets\":[%zu,%zu]}", offset, offset + numel * element);
        offset += numel * element;
    }
    st_append(header, cap, &used, "}");
    while (used % 8 != 0) { header[used++] = ' '; }
    for (int i = 0; i < 8; i++) { out[i] = (uint8_t)((uint64_t)used >> (8 * i)); }
    *len = 8 + used;
    *data_bytes = offset;
    return out;
}

#endif // LIB_SAFETENSORS_H
