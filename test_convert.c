/*
test_convert.c: convert.c against transformers' files, and its parsers against bad input.

The reference (dev/reference/infer_reference.py) saved random GPT2LMHeadModels with
transformers' save_pretrained (F32, BF16 and F16 copies of one model: V=300, L=2, NH=4, C=64,
maxT=128) and, for GPT-2's four sizes, the tensor names and shapes transformers saves; it also
loaded our export of fixtures/gpt2_tiny_model.bin back into transformers (its logits matched)
and wrote the hashes of the two files it loaded. dev/reference/convert_reference.py wrote a
sharded copy of the F32 folder with the safetensors library (names without "transformer.").
We check:
  - GPT-2's four sizes: every name and shape transformers saves is one of ours, none missing
  - export: our folder still has the bytes transformers loaded
  - round trips, bit for bit: HF folder <-> checkpoint v3, v5; BF16 and F16 folders; names
    with and without "transformer."; shards (the reference's, and our own of several sizes);
    the tokenizer's files
  - GGUF: a file written by the gguf package (dev/reference/gguf_reference.py) as gguf's
    GGUFReader reads it (header, every key's type and values, every tensor's type, dims and
    offset) and every tensor's values as gguf.quants dequantizes them (F32 ... Q6_K)
  - bad input: the JSON, safetensors and GGUF parsers return an error, never crash, on each kind
    of broken file; every broken folder, shard index or checkpoint makes the loader exit
    with a message naming the file (run in a child)
The whole test also runs under AddressSanitizer + UBSan (make test_convert_asan); the
parsers are fuzzed by make fuzz.

    make test_convert && ./test_convert        (make reference regenerates the fixtures)
*/
#define TESTING
#include "convert.c"
#include <sys/wait.h>

#define FIXTURES "dev/reference/fixtures/"

static int num_passed = 0, num_failed = 0;

static void record(int ok) {
    if (ok) { num_passed++; } else { num_failed++; }
}

static void check(const char *name, int ok, const char *detail) {
    printf("%-44s %s%s%s\n", name, ok ? "OK" : "NOT OK", detail[0] ? ": " : "", detail);
    record(ok);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopenCheck(path, "wb");
    if (n > 0 && fwrite(data, 1, n, fp) != n) { die_file(path, NULL, "write failed"); }
    fcloseCheck(fp);
}

static uint8_t *read_bytes(const char *path, size_t *n) { return read_whole_file(path, n, NULL); }

// FNV-1a, 64 bits: the hash infer_reference.py wrote for the files transformers loaded
static uint64_t fnv1a64(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 0x100000001b3ull; }
    return h;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = read_bytes(a, &na), *y = read_bytes(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int weights_equal(const GPT2Weights *a, const GPT2Weights *b) {
    return a->num_parameters == b->num_parameters &&
           memcmp(a->params_memory, b->params_memory, a->num_parameters * sizeof(float)) == 0;
}

// ----------------------------------------------------------------------------
// running a loader that is supposed to fail, in a child process

// --- begin shared-copy: expect-exit ---
// Runs fn(arg) in a child with stderr going to a file; passes if the child exits non-zero
// (not by a signal: a crash is a failure) and its message contains `expect`.
static void expect_exit(const char *name, void (*fn)(const void *), const void *arg, const char *expect) {
    char log[] = "/tmp/expect_exit_XXXXXX";
    int fd = mkstemp(log);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn(arg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char msg[2048] = "";
    ssize_t n = pread(fd, msg, sizeof(msg) - 1, 0);
    msg[n > 0 ? n : 0] = '\0';
    close(fd);
    remove(log);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(msg, expect) != NULL;
    char *newline = strchr(msg, '\n');
    if (newline != NULL) { *newline = '\0'; }
    printf("%-40s %s: %s\n", name, ok ? "OK" : "NOT OK", WIFSIGNALED(status) ? "killed by a signal" : msg);
    record(ok);
}
// --- end shared-copy: expect-exit ---

static void load_model(const void *path) {
    GPT2Weights w;
    gpt2_weights_build(&w, (const char *)path, 1);
    gpt2_weights_free(&w);
}

// ----------------------------------------------------------------------------
// the parsers

static void test_json(void) {
    printf("\nJSON parser\n");
    static const char *const good[] = {
        "{}", "[]", " {\"a\" : [1, -2.5e3, 0.25E-2, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"]} ", "0", "\"\"", "[[[]]]"};
    static const char *const bad[] = {
        "", " ", "{", "{\"a\":}", "{\"a\":1,}", "[1,]", "01", "1.", "-", "1e", "\"\x01\"", "\"\\q\"", "\"\\u12\"",
        "{\"a\" 1}", "[1] x", "tru", "{\"a\":1}}", "{1:2}", "[1 2]", "\"abc", "nul", "-x", "{\"a\":[}"};
    int ok = 1;
    char err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        Json j;
        if (json_parse(&j, good[i], strlen(good[i]), err, sizeof(err)) != 0) { printf("  rejected %s: %s\n", good[i], err); ok = 0; }
        json_free(&j);
    }
    check("well-formed JSON parses", ok, "");
    ok = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        Json j;
        if (json_parse(&j, bad[i], strlen(bad[i]), err, sizeof(err)) == 0) { printf("  accepted '%s'\n", bad[i]); ok = 0; }
        json_free(&j);
    }
    check("malformed JSON is an error (23 kinds)", ok, "");
    char deep[300];
    memset(deep, '[', 150);
    memset(deep + 150, ']', 150);
    Json j;
    int rejected = json_parse(&j, deep, 300, err, sizeof(err)) != 0 && strstr(err, "deeply") != NULL;
    json_free(&j);
    check("nesting 150 deep is refused", rejected, err);
    // decoding strings: escapes, \u, surrogate pairs; a lone surrogate is an error
    const char *text = "[\"a\\\"b\\\\c\\/\\t\\u00e9\\ud83d\\ude00\", \"\\udc00\", \"n_\\u0065mbd\"]";
    json_parse(&j, text, strlen(text), err, sizeof(err));
    char out[64];
    int n = json_string(&j, 1, out, sizeof(out));
    check("string escapes decode", n == 13 && memcmp(out, "a\"b\\c/\t\xc3\xa9\xf0\x9f\x98\x80", 13) == 0, "");
    check("a lone surrogate is an error", json_string(&j, 2, out, sizeof(out)) < 0, "");
    json_free(&j);
    const char *obj = "{\"n_\\u0065mbd\": 7}";
    json_parse(&j, obj, strlen(obj), err, sizeof(err));
    int64_t v = 0;
    check("keys compare after decoding", json_int64(&j, json_get(&j, 0, "n_embd"), &v) == 0 && v == 7, "");
    json_free(&j);
}

// A small valid safetensors file: a F32 [2] and b F16 [2, 2], then edits of its header.
static size_t make_st(uint8_t *buf, const char *header, size_t data_len) {
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++) { buf[i] = (uint8_t)((uint64_t)n >> (8 * i)); }
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++) { buf[8 + n + i] = (uint8_t)(i * 37); }
    return 8 + n + data_len;
}

static void test_safetensors(void) {
    printf("\nsafetensors parser: every broken header is an error, with a message\n");
    static const struct { const char *name, *header; size_t data; const char *expect; } cases[] = {
        {"valid", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}", 16, NULL},
        {"valid, __metadata__, reordered", "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"shape\":[2,2],\"dtype\":\"F16\","
                  "\"data_offsets\":[8,16]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 16, NULL},
        {"offsets past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12, "past the end"},
        {"overlapping tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps"},
        {"a hole between tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "hole"},
        {"data after the last tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "cover"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"shape disagrees with offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need"},
        {"dtype disagrees with offsets", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "need"},
        {"the same name twice", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "twice"},
        {"negative size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"overflowing shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,64],\"data_offsets\":[0,8]}}", 8, "too large"},
        {"fractional offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8, "data_offsets"},
        {"end before begin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "data_offsets"},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "needs exactly"},
        {"extra field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "needs exactly"},
        {"nine dimensions", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "at most"},
        {"metadata not strings", "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__"},
        {"header not an object", "[1, 2]", 0, "not a JSON object"},
        {"header not JSON", "{\"a\":{\"dtype\":\"F32\",}", 0, "JSON error"},
    };
    uint8_t buf[1024];
    char err[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = make_st(buf, cases[i].header, cases[i].data);
        SafeTensors st;
        int rc = safetensors_parse_buffer(&st, buf, len, err, sizeof(err));
        int ok = cases[i].expect == NULL ? rc == 0 && st.num == 2 : rc != 0 && strstr(err, cases[i].expect) != NULL;
        if (cases[i].expect == NULL && rc == 0) {
            const StTensor *b = safetensors_find(&st, "b");
            ok = ok && b != NULL && b->ndim == 2 && b->shape[1] == 2 && b->begin == 8 && strcmp(b->dtype, "F16") == 0;
        }
        check(cases[i].name, ok, rc != 0 ? err : "parsed");
        safetensors_free(&st);
    }
    // the 8-byte length itself
    size_t len = make_st(buf, cases[0].header, 16);
    SafeTensors st;
    check("shorter than 8 bytes", safetensors_parse_buffer(&st, buf, 5, err, sizeof(err)) != 0 && strstr(err, "too short"), err);
    check("header longer than the file", safetensors_parse_buffer(&st, buf, 40, err, sizeof(err)) != 0 && strstr(err, "impossible"), err);
    buf[7] = 0x80; // 2^63
    check("a length of 2^63", safetensors_parse_buffer(&st, buf, len, err, sizeof(err)) != 0 && strstr(err, "impossible"), err);
    // every truncation of a valid file is an error, none reads out of bounds (ASan watches)
    len = make_st(buf, cases[0].header, 16);
    int all = 1;
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = (uint8_t *)mallocCheck(cut + 1); // exactly cut bytes matter
        memcpy(copy, buf, cut);
        all = all && safetensors_parse_buffer(&st, copy, cut, err, sizeof(err)) != 0;
        free(copy);
    }
    check("every truncation of a valid file fails", all, "");
}

// ----------------------------------------------------------------------------
// GGUF: our reader against the gguf package's (dev/reference/gguf_reference.py)

static const char *const GGUF_TYPE_NAMES[GGUF_NUM_VALUE_TYPES] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};

// key-value pair `index` of the reference against ours: type, item type, count, values
static int gguf_kv_matches(const Gguf *g, const Json *j, int index, char *detail, size_t size) {
    char key[256], type[16], item[16];
    if (json_string(j, json_get(j, index, "key"), key, sizeof(key)) < 0 || json_string(j, json_get(j, index, "type"), type, sizeof(type)) < 0 ||
        json_string(j, json_get(j, index, "item_type"), item, sizeof(item)) < 0) {
        snprintf(detail, size, "bad reference entry");
        return 0;
    }
    int k = gguf_find(g, key);
    if (k < 0) { snprintf(detail, size, "%s: missing", key); return 0; }
    const GgufKV *kv = &g->kv[k];
    int values = json_get(j, index, "values"), count = j->tokens[values].size;
    if (strcmp(GGUF_TYPE_NAMES[kv->type], type) != 0 || strcmp(GGUF_TYPE_NAMES[kv->item_type], item) != 0 || kv->count != (uint64_t)count) {
        snprintf(detail, size, "%s: %s of %s x %" PRIu64 ", the reference %s of %s x %d", key, GGUF_TYPE_NAMES[kv->type],
                 GGUF_TYPE_NAMES[kv->item_type], kv->count, type, item, count);
        return 0;
    }
    int v = values + 1;
    for (int i = 0; i < count; i++, v = j->tokens[v].next) {
        if (kv->item_type == GGUF_STRING) {
            char want[256];
            const uint8_t *s;
            uint64_t len;
            int n = json_string(j, v, want, sizeof(want));
            if (n < 0 || gguf_str(g, kv, (uint64_t)i, &s, &len) != 0 || len != (uint64_t)n || memcmp(s, want, len) != 0) {
                snprintf(detail, size, "%s: string %d differs", key, i);
                return 0;
            }
        } else {
            double want, ours;
            if (kv->item_type == GGUF_BOOL) { want = j->text[j->tokens[v].start] == 't'; }
            else if (json_double(j, v, &want) != 0) { snprintf(detail, size, "%s: bad reference value", key); return 0; }
            if (gguf_number(g, kv, (uint64_t)i, &ours) != 0 || ours != want) {
                snprintf(detail, size, "%s: value %d is %.17g, the reference's %.17g", key, i, ours, want);
                return 0;
            }
        }
    }
    return 1;
}

// the GGUF fixture with 4 bytes at `at` set to v (a little-endian uint32), or 8 bytes if wide
static uint8_t *gguf_edited(const uint8_t *file, size_t len, size_t at, uint64_t v, int wide) {
    uint8_t *copy = (uint8_t *)mallocCheck(len);
    memcpy(copy, file, len);
    for (int i = 0; i < (wide ? 8 : 4); i++) { copy[at + i] = (uint8_t)(v >> (8 * i)); }
    return copy;
}

static void test_gguf(void) {
    printf("\nGGUF: our reader against the gguf package's, on a file it wrote\n");
    size_t len, jlen, flen;
    uint8_t *file = read_bytes(FIXTURES "gguf_tiny.gguf", &len);
    char *text = (char *)read_bytes(FIXTURES "gguf_tiny.json", &jlen);
    float *ref = (float *)read_bytes(FIXTURES "gguf_tiny_dequant.f32", &flen);
    Json j;
    char err[512], detail[512];
    if (json_parse(&j, text, jlen, err, sizeof(err)) != 0) { check("gguf_tiny.json", 0, err); return; }
    Gguf g;
    int rc = gguf_parse(&g, file, len, err, sizeof(err));
    check("parses", rc == 0, rc == 0 ? "" : err);
    if (rc != 0) { json_free(&j); free(file); free(text); free(ref); return; }
    int64_t version, start;
    json_int64(&j, json_get(&j, 0, "version"), &version);
    json_int64(&j, json_get(&j, 0, "data_start"), &start);
    int kvs = json_get(&j, 0, "kv"), tensors = json_get(&j, 0, "tensors");
    snprintf(detail, sizeof(detail), "version %u, alignment %" PRIu64 ", data at %zu, %" PRIu64 " keys, %" PRIu64 " tensors",
             g.version, g.alignment, g.data_start, g.num_kv, g.num_tensors);
    check("the header, as gguf reads it", g.version == (uint32_t)version && g.alignment == 64 && g.data_start == (size_t)start &&
          g.num_kv == (uint64_t)j.tokens[kvs].size && g.num_tensors == (uint64_t)j.tokens[tensors].size, detail);
    int ok = 1;
    detail[0] = '\0';
    for (int i = 0, e = kvs + 1; i < j.tokens[kvs].size && ok; i++, e = j.tokens[e].next) { ok = gguf_kv_matches(&g, &j, e, detail, sizeof(detail)); }
    if (ok) { snprintf(detail, sizeof(detail), "%d keys: every type, arrays of numbers and strings", j.tokens[kvs].size); }
    check("every key's type and values", ok, detail);
    // the tensors: names, types, dims, offsets, then their values dequantized
    size_t at = 0;
    for (int i = 0, e = tensors + 1; i < j.tokens[tensors].size; i++, e = j.tokens[e].next) {
        char name[64], type[16];
        json_string(&j, json_get(&j, e, "name"), name, sizeof(name));
        json_string(&j, json_get(&j, e, "type"), type, sizeof(type));
        int dims = json_get(&j, e, "dims");
        int64_t offset = -1, d = 0;
        json_int64(&j, json_get(&j, e, "offset"), &offset);
        const GgufTensor *t = gguf_tensor(&g, name);
        int same = t != NULL && strcmp(t->type->name, type) == 0 && t->offset == (uint64_t)offset && t->n_dims == (uint32_t)j.tokens[dims].size;
        for (int k = 0, v = dims + 1; same && k < j.tokens[dims].size; k++, v = j.tokens[v].next) { same = json_int64(&j, v, &d) == 0 && t->dims[k] == (uint64_t)d; }
        char label[96];
        snprintf(label, sizeof(label), "tensor %s (%s)", name, type);
        if (!same || at + t->elements > flen / sizeof(float)) { check(label, 0, "type, dims or offset differ from gguf's"); continue; }
        float *ours = (float *)mallocCheck(t->elements * sizeof(float));
        gguf_dequantize(&g, t, ours);
        double max_ref = 0.0, max_err = 0.0;
        size_t exact = 0;
        for (uint64_t k = 0; k < t->elements; k++) {
            max_ref = fmax(max_ref, fabs(ref[at + k]));
            max_err = fmax(max_err, fabs((double)ours[k] - ref[at + k]));
            exact += ours[k] == ref[at + k];
        }
        // dequantizing is one or two float products and a sum per value; the compiler may
        // fuse a multiply-add that numpy rounds twice: within 2 ulps of the largest value
        snprintf(detail, sizeof(detail), "%" PRIu64 " values, %zu bit for bit, max error %.2g of max %.3g", t->elements, exact, max_err, max_ref);
        check(label, max_err <= 2.4e-7 * max_ref, detail);
        free(ours);
        at += t->elements;
    }
    check("all of gguf_tiny_dequant.f32 compared", at * sizeof(float) == flen, "");

    // broken files: each edit of the fixture is one error with a message, never a crash
    const GgufTensor *q = gguf_tensor(&g, "q4_1"), *q0 = gguf_tensor(&g, "q4_0");
    size_t info = (size_t)(q->name - file) + q->name_len; // q4_1's info after its name: n_dims, dims, type, offset
    size_t type_at = info + 4 + 8 * q->n_dims, offset_at = type_at + 4;
    const GgufKV *arr = &g.kv[gguf_find(&g, "test.arr_i32")], *align = &g.kv[gguf_find(&g, "general.alignment")];
    const GgufKV *u8 = &g.kv[gguf_find(&g, "test.u8")];
    struct { const char *name; size_t at; uint64_t v; int wide; const char *expect; } edits[] = {
        {"not GGUF", 0, 0x46554748u, 0, "not a GGUF file"},
        {"version 1", 4, 1, 0, "version 1"},
        {"2^40 key-value pairs", 16, 1ull << 40, 1, "cannot fit"},
        {"2^40 tensors", 8, 1ull << 40, 1, "cannot fit"},
        {"an unknown value type", u8->at - 4, 13, 0, "unknown value type"},
        {"an array of arrays", arr->at - 12, GGUF_ARRAY, 0, "arrays"},
        {"an array longer than the file", arr->at - 8, 1ull << 40, 1, "cannot fit"},
        {"alignment 48", align->at, 48, 0, "power of two"},
        {"a tensor type we do not read", type_at, 6, 0, "ggml type 6"},
        {"a tensor of 5 dims", info, 5, 0, "5 dims"},
        {"a dim of 0", info + 4, 0, 1, "dim 0 is 0"},
        {"rows not whole blocks", info + 4, 48, 1, "not whole Q4_1 blocks"},
        {"an offset off the alignment", offset_at, q->offset + 32, 1, "not a multiple"},
        {"an offset past the end", offset_at, 1ull << 20, 1, "past the end"},
        {"two tensors overlapping", offset_at, q0->offset, 1, "overlaps"},
        {"a key twice", (size_t)(g.kv[3].key - file) - 8, g.kv[2].key_len, 1, "twice"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        uint8_t *copy = gguf_edited(file, len, edits[i].at, edits[i].v, edits[i].wide);
        if (i == sizeof(edits) / sizeof(edits[0]) - 1) { memcpy(copy + (g.kv[3].key - file), g.kv[2].key, g.kv[2].key_len); } // (same length: "test.i8" -> "test.u8")
        Gguf bad;
        rc = gguf_parse(&bad, copy, len, err, sizeof(err));
        check(edits[i].name, rc != 0 && strstr(err, edits[i].expect) != NULL, rc != 0 ? err : "parsed");
        if (rc == 0) { gguf_free(&bad); }
        free(copy);
    }
    // a tensor name twice: q4_0's name over q4_1's (same length)
    uint8_t *copy = gguf_edited(file, len, 0, GGUF_MAGIC, 0);
    memcpy(copy + (q->name - file), q0->name, q0->name_len);
    Gguf bad;
    rc = gguf_parse(&bad, copy, len, err, sizeof(err));
    check("a tensor name twice", rc != 0 && strstr(err, "appears twice") != NULL, rc != 0 ? err : "parsed");
    free(copy);
    // every truncation before the last tensor's end is an error; none reads past the bytes given (ASan)
    size_t end = 0;
    for (uint64_t i = 0; i < g.num_tensors; i++) {
        size_t e = g.data_start + g.tensors[i].offset + g.tensors[i].bytes;
        end = e > end ? e : end;
    }
    int all = 1;
    for (size_t cut = 0; cut < end; cut++) {
        uint8_t *part = (uint8_t *)mallocCheck(cut + 1);
        memcpy(part, file, cut);
        if (gguf_parse(&bad, part, cut, err, sizeof(err)) == 0) { all = 0; gguf_free(&bad); }
        free(part);
    }
    snprintf(detail, sizeof(detail), "%zu cuts", end);
    check("every truncation fails", all, detail);
    gguf_free(&g);
    json_free(&j);
    free(file);
    free(text);
    free(ref);
}

// ----------------------------------------------------------------------------
// the Llama family: transformers' folders and GGUF files (dev/reference/llama_convert_reference.py)

// source (a folder or a GGUF file) into our model file at out: fp32, or bf16
static void llama_convert_to(const char *source, const char *out, int bf16) {
    LlamaWeights w;
    size_t n = strlen(source);
    if (n > 5 && strcmp(source + n - 5, ".gguf") == 0) { llama_build_from_gguf(&w, source); }
    else {
        struct stat info;
        if (stat(source, &info) == 0 && S_ISDIR(info.st_mode)) { llama_build_from_hf(&w, source); }
        else { llama_load(&w, source); }
    }
    llama_save(&w, out, bf16, NULL);
    llama_free(&w);
}

static void llama_load_path(const void *path) { llama_convert_to((const char *)path, "/dev/null", 0); }

// a copy of a fixture folder whose config.json has `from` replaced by `to`
static void llama_edited_folder(const char *fixture, const char *dir, const char *from, const char *to) {
    mkdir(dir, 0777);
    static const char *const files[2] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char src[600], dst[600];
        snprintf(src, sizeof(src), "%s/%s", fixture, files[i]);
        snprintf(dst, sizeof(dst), "%s/%s", dir, files[i]);
        size_t n;
        char *text = (char *)read_bytes(src, &n);
        char *at = i == 0 ? strstr(text, from) : NULL;
        if (at == NULL) { write_bytes(dst, text, n); free(text); continue; }
        size_t before = (size_t)(at - text), flen = strlen(from), tlen = strlen(to);
        char *out = (char *)mallocCheck(n - flen + tlen);
        memcpy(out, text, before);
        memcpy(out + before, to, tlen);
        memcpy(out + before + tlen, at + flen, n - before - flen);
        write_bytes(dst, out, n - flen + tlen);
        free(out);
        free(text);
    }
}

static void test_llama(const char *tmp) {
    printf("\nthe Llama family: transformers' folders and GGUF files into our model file\n");
    size_t n;
    char *hashes = (char *)read_bytes(FIXTURES "llama_convert.fnv1a64", &n);
    static const char *const sources[6] = {"llama_gqa3", "qwen2_gqa4", "llama_mha3", "llama_gqa3.gguf", "qwen2_gqa4.gguf",
                                           "llama_mha3.gguf"};
    for (int i = 0; i < 6; i++) {
        char source[256], out[600], line[128], name[96];
        snprintf(source, sizeof(source), FIXTURES "%s", sources[i]);
        snprintf(out, sizeof(out), "%s/%s.bin", tmp, sources[i]);
        llama_convert_to(source, out, 0);
        size_t len;
        uint8_t *bytes = read_bytes(out, &len);
        snprintf(line, sizeof(line), "%s %016" PRIx64 "\n", sources[i], fnv1a64(bytes, len));
        free(bytes);
        snprintf(name, sizeof(name), "%s: as transformers reads it", sources[i]);
        check(name, strstr(hashes, line) != NULL, "our file's hash is the one whose export transformers loaded and matched");
    }
    free(hashes);
    // llama_mha3.gguf holds llama_mha3's F32 weights and its Llama 3 RoPE scaling as llama.cpp
    // writes it (rope_freqs.weight, divisors of the frequencies): the same file must come out
    char from_hf[600], from_gguf[600];
    snprintf(from_hf, sizeof(from_hf), "%s/llama_mha3.bin", tmp);
    snprintf(from_gguf, sizeof(from_gguf), "%s/llama_mha3.gguf.bin", tmp);
    check("rope_freqs.weight: Llama 3's scaling read back", files_equal(from_hf, from_gguf),
          "the GGUF copy converts to the Hugging Face folder's very bytes (factor 8, low 1, high 4, original 32)");
    // round trips: our file -> a Hugging Face folder -> our file; fp32 <-> bf16
    int all = 1;
    for (int i = 0; i < 3; i++) {
        char bin[600], dir[600], back[600];
        snprintf(bin, sizeof(bin), "%s/%s.bin", tmp, sources[i]);
        snprintf(dir, sizeof(dir), "%s/%s_hf", tmp, sources[i]);
        snprintf(back, sizeof(back), "%s/%s_back.bin", tmp, sources[i]);
        LlamaWeights w;
        llama_load(&w, bin);
        llama_export_hf(&w, dir, 0, 0);
        llama_free(&w);
        llama_convert_to(dir, back, 0);
        all = all && files_equal(bin, back);
    }
    check("file -> folder -> file, the 3 models", all, "the same bytes");
    char bin[600], b16[600], b16_back[600], dir[600], b16_dir[600];
    snprintf(bin, sizeof(bin), "%s/llama_gqa3.bin", tmp);
    snprintf(b16, sizeof(b16), "%s/llama_gqa3_bf16.bin", tmp);
    snprintf(b16_back, sizeof(b16_back), "%s/llama_gqa3_bf16_back.bin", tmp);
    snprintf(b16_dir, sizeof(b16_dir), "%s/llama_gqa3_bf16_hf", tmp);
    llama_convert_to(FIXTURES "llama_gqa3", b16, 1); // (the folder is BF16: bf16 -> fp32 -> bf16 is exact)
    LlamaWeights w;
    llama_load(&w, b16);
    int from_bf16 = w.from_bf16;
    llama_export_hf(&w, b16_dir, 1, 0);
    llama_free(&w);
    llama_convert_to(b16_dir, b16_back, 1);
    check("BF16 folder -> version 5 -> BF16 folder -> version 5", from_bf16 && files_equal(b16, b16_back), "the same bytes");
    llama_convert_to(b16, b16_back, 0);
    check("... and version 5 widened to version 3 is the fp32 file", files_equal(b16_back, bin), "");
    (void)dir;

    // config.json: every setting that changes the computation is read, or refused
    static const struct { const char *name, *from, *to, *expect; } configs[] = {
        {"model_type mistral", "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"", "we read gpt2, llama and qwen2"},
        {"MLP biases", "\"mlp_bias\": false", "\"mlp_bias\": true", "MLP biases are not supported"},
        {"another activation", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act must be silu"},
        {"heads that do not share evenly", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4", "cannot share 4 key/value heads"},
        {"RoPE scaling yarn", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "RoPE scaling \"yarn\""},
        {"no intermediate_size", "\"intermediate_size\"", "\"intermediate_sizes\"", "intermediate_size is missing"},
    };
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        size_t len;
        char *text = (char *)read_bytes(FIXTURES "llama_gqa3/config.json", &len);
        text = (char *)realloc(text, len + 64);
        char *at = strstr(text, configs[i].from), err[256] = "";
        int rc = 0;
        if (at != NULL) {
            size_t flen = strlen(configs[i].from), tlen = strlen(configs[i].to);
            memmove(at + tlen, at + flen, len - (size_t)(at - text) - flen);
            memcpy(at, configs[i].to, tlen);
            len = len - flen + tlen;
            LlamaConfig c;
            rc = llama_config_from_hf_json(&c, text, len, err, sizeof(err));
        }
        check(configs[i].name, at != NULL && rc != 0 && strstr(err, configs[i].expect) != NULL, at == NULL ? "(edit not found)" : err);
        free(text);
    }
    // folders, GGUF files and our files that do not fit: one message naming the file, in a child
    char path[600];
    snprintf(path, sizeof(path), "%s/biases", tmp);
    llama_edited_folder(FIXTURES "llama_gqa3", path, "\"attention_bias\": false", "\"attention_bias\": true");
    expect_exit("Llama's attention biases (o's too)", llama_load_path, path, "attention_bias true: Llama's attention biases");
    snprintf(path, sizeof(path), "%s/deeper", tmp);
    llama_edited_folder(FIXTURES "llama_gqa3", path, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    expect_exit("a folder without a layer config.json asks for", llama_load_path, path, "model.layers.2.input_layernorm.weight is missing");
    snprintf(path, sizeof(path), "%s/narrow", tmp);
    llama_edited_folder(FIXTURES "llama_gqa3", path, "\"intermediate_size\": 64", "\"intermediate_size\": 32");
    expect_exit("tensors of another shape than config.json's", llama_load_path, path, "does not have the shape config.json gives it");
    snprintf(path, sizeof(path), "%s/shallow", tmp);
    llama_edited_folder(FIXTURES "llama_gqa3", path, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    expect_exit("tensors of a layer config.json does not have", llama_load_path, path, "has no place in this model");
    uint8_t *gg = read_bytes(FIXTURES "llama_gqa3.gguf", &n);
    Gguf g;
    char err[512];
    if (gguf_parse(&g, gg, n, err, sizeof(err)) == 0) {
        int a = gguf_find(&g, "general.architecture");
        const GgufTensor *up = gguf_tensor(&g, "blk.1.ffn_up.weight");
        size_t arch_at = g.kv[a].at + 8, up_at = (size_t)(up->name - gg) + 9; // "blk.1.ffn_up": the 'u' of "up"
        gguf_free(&g);
        gg[arch_at + 4] = 'b'; // "llama" -> "llamb"
        snprintf(path, sizeof(path), "%s/arch.gguf", tmp);
        write_bytes(path, gg, n);
        expect_exit("a GGUF file of another architecture", llama_load_path, path, "general.architecture is \"llamb\"");
        gg[arch_at + 4] = 'a';
        gg[up_at] = 'U';
        snprintf(path, sizeof(path), "%s/missing.gguf", tmp);
        write_bytes(path, gg, n);
        expect_exit("a GGUF file without a tensor it needs", llama_load_path, path, "tensor blk.1.ffn_up.weight is missing");
    } else {
        check("llama_gqa3.gguf parses", 0, err);
    }
    free(gg);
    // divisors in rope_freqs.weight that Llama 3's scaling does not give: one fast frequency divided by 2
    gg = read_bytes(FIXTURES "llama_mha3.gguf", &n);
    if (gguf_parse(&g, gg, n, err, sizeof(err)) == 0) {
        const GgufTensor *rf = gguf_tensor(&g, "rope_freqs.weight");
        float two = 2.0f;
        memcpy(gg + g.data_start + rf->offset, &two, sizeof(two)); // divisor 0: 1 -> 2
        gguf_free(&g);
        snprintf(path, sizeof(path), "%s/rope.gguf", tmp);
        write_bytes(path, gg, n);
        expect_exit("rope_freqs.weight that Llama 3's scaling does not give", llama_load_path, path,
                    "rope_freqs.weight[0] = 2, but Llama 3's scaling (factor 8, low 1, high 4, original");
    } else {
        check("llama_mha3.gguf parses", 0, err);
    }
    free(gg);
    uint8_t *file = read_bytes(bin, &n);
    snprintf(path, sizeof(path), "%s/truncated.bin", tmp);
    write_bytes(path, file, n - 2);
    expect_exit("a truncated model file", llama_load_path, path, "truncated or corrupt");
    int *header = (int *)file;
    header[1] = 4;
    snprintf(path, sizeof(path), "%s/version.bin", tmp);
    write_bytes(path, file, n);
    expect_exit("a model file of version 4", llama_load_path, path, "version 4: we read 3 (fp32), 5 (bf16) and 7 (4-bit linear layers)");
    header[1] = 3;
    header[6] = 5; // NKV 5: 6 query heads cannot share them
    snprintf(path, sizeof(path), "%s/heads.bin", tmp);
    write_bytes(path, file, n);
    expect_exit("a model file whose header makes no model", llama_load_path, path, "its header is not a model's");
    free(file);
}

// ----------------------------------------------------------------------------
// GPT-2's four sizes: names and shapes against what transformers would save

static void test_layouts(void) {
    printf("\nGPT-2 sizes: tensor names and shapes against transformers\n");
    size_t len;
    char *text = (char *)read_bytes(FIXTURES "gpt2_hf_layouts.txt", &len);
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    while (line != NULL) {
        char name[64];
        if (sscanf(line, "model %63s", name) != 1) { printf("bad line %s NOT OK\n", line); record(0); break; }
        char path[256], err[256];
        snprintf(path, sizeof(path), FIXTURES "gpt2_hf_configs/%s.json", name);
        size_t clen;
        char *config_text = (char *)read_bytes(path, &clen);
        GPT2Config c;
        int ok = gpt2_config_from_hf_json(&c, config_text, clen, err, sizeof(err)) == 0;
        free(config_text);
        if (!ok) { printf("%s: %s\n", path, err); }
        int L = ok ? c.num_layers : 1, count = 0, bad = 0;
        char *seen = (char *)calloc((size_t)NUM_PARAMETER_TENSORS * L, 1);
        while ((line = strtok_r(NULL, "\n", &save)) != NULL && strncmp(line, "model ", 6) != 0) {
            char key[128], dims[64], want[64];
            if (sscanf(line, "%127s %63s", key, dims) != 2) { bad++; continue; }
            int layer, k = hf_tensor_index(key, &layer);
            if (!ok || k < 0 || layer >= L || seen[k * L + layer]) { bad++; continue; }
            seen[k * L + layer] = 1;
            int64_t d[2];
            int ndim = hf_shape(c, k, d);
            if (ndim == 2) { snprintf(want, sizeof(want), "%" PRId64 "x%" PRId64, d[0], d[1]); }
            else { snprintf(want, sizeof(want), "%" PRId64, d[0]); }
            if (strcmp(want, dims) != 0) { bad++; }
            count++;
        }
        int expected = ok ? 4 + 12 * L : -1;
        ok = ok && bad == 0 && count == expected;
        printf("%-12s L=%d C=%d NH=%d V=%d maxT=%d: %d tensors, %d mismatched  %s\n", name, c.num_layers, c.channels,
               c.num_heads, c.vocab_size, c.max_seq_len, count, bad, ok ? "OK" : "NOT OK");
        record(ok);
        free(seen);
    }
    free(text);
}

// ----------------------------------------------------------------------------
// export and import

static void test_export(const char *tmp) {
    printf("\nexport and import\n");
    GPT2Weights model, back, again;
    gpt2_weights_build(&model, FIXTURES "gpt2_tiny_model.bin", 1);
    char dir[512], path[600], detail[512];
    snprintf(dir, sizeof(dir), "%s/export", tmp);
    gpt2_export_hf(&model, dir, 0, 0);
    // the bytes transformers loaded (infer_reference.py --check-export wrote their hashes;
    // test_infer.c checks our logits against the ones transformers computed from them)
    size_t n;
    uint8_t *hashes = read_bytes(FIXTURES "infer_export.fnv1a64", &n);
    static const char *const files[2] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        size_t len;
        uint8_t *bytes = read_bytes(path, &len);
        char line[128];
        snprintf(line, sizeof(line), "%s %016" PRIx64, files[i], fnv1a64(bytes, len));
        snprintf(detail, sizeof(detail), "%s", line);
        check(i == 0 ? "export: config.json as transformers loaded" : "export: model.safetensors as loaded",
              strstr((const char *)hashes, line) != NULL, detail);
        free(bytes);
    }
    free(hashes);
    gpt2_weights_build(&back, dir, 1);
    check("HF folder -> ours: identical weights", weights_equal(&model, &back) && !back.from_bf16, "");
    gpt2_weights_free(&back);
    // the Hub's own GPT-2 files name the tensors without "transformer.": the same header
    // without the prefix (padded with spaces to its old length, so the offsets still hold)
    {
        size_t len;
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        uint8_t *bytes = read_bytes(path, &len);
        size_t header_len = 0;
        for (int i = 7; i >= 0; i--) { header_len = (header_len << 8) | bytes[i]; }
        char *h = (char *)bytes + 8, *out = h;
        for (size_t i = 0; i < header_len;) {
            if (i + 12 <= header_len && memcmp(h + i, "transformer.", 12) == 0) { i += 12; continue; }
            *out++ = h[i++];
        }
        while (out < h + header_len) { *out++ = ' '; }
        write_bytes(path, bytes, len);
        free(bytes);
        gpt2_weights_build(&back, dir, 1);
        check("names without transformer. (as on the Hub)", weights_equal(&model, &back), "");
        gpt2_weights_free(&back);
    }
    snprintf(path, sizeof(path), "%s/model_v3.bin", tmp);
    gpt2_save_checkpoint(&model, path, 0, NULL);
    check("checkpoint v3: the same bytes as the file read", files_equal(path, FIXTURES "gpt2_tiny_model.bin"), "");
    snprintf(path, sizeof(path), "%s/model_v5.bin", tmp);
    gpt2_save_checkpoint(&model, path, 1, NULL);
    gpt2_weights_build(&back, path, 1);
    int rounded = back.from_bf16;
    for (size_t i = 0; i < model.num_parameters && rounded; i++) {
        rounded = back.params_memory[i] == bf16_to_float(float_to_bf16(model.params_memory[i]));
    }
    check("checkpoint v5: the weights rounded to bf16", rounded, "");
    snprintf(dir, sizeof(dir), "%s/export_bf16", tmp);
    gpt2_export_hf(&back, dir, 1, 0);
    gpt2_weights_build(&again, dir, 1);
    check("bf16 checkpoint -> BF16 folder -> ours", weights_equal(&back, &again) && again.from_bf16, "");
    gpt2_weights_free(&again);
    gpt2_weights_free(&back);
    // transformers' own BF16 and F16 files: exact through our fp32
    static const char *const dtypes[2] = {"bf16", "fp16"};
    for (int i = 0; i < 2; i++) {
        char src[256];
        snprintf(src, sizeof(src), FIXTURES "hf_tiny_%s", dtypes[i]);
        snprintf(dir, sizeof(dir), "%s/export_%s", tmp, dtypes[i]);
        gpt2_weights_build(&back, src, 1);
        gpt2_export_hf(&back, dir, 0, 0);
        gpt2_weights_build(&again, dir, 1);
        snprintf(detail, sizeof(detail), "%s -> ours -> F32 folder -> ours", src);
        check("HF round trip", weights_equal(&back, &again), detail);
        gpt2_weights_free(&again);
        gpt2_weights_free(&back);
    }
    // the three copies of one model: F16 and BF16 hold the F32 weights rounded
    gpt2_weights_build(&back, FIXTURES "hf_tiny_fp32", 1);
    gpt2_weights_build(&again, FIXTURES "hf_tiny_bf16", 1);
    int same = 1;
    for (size_t i = 0; i < back.num_parameters; i++) {
        same = same && again.params_memory[i] == bf16_to_float(float_to_bf16(back.params_memory[i]));
    }
    check("BF16 folder = F32 folder rounded (our bf16)", same, "");
    gpt2_weights_free(&again);
    // shards: the reference's (written by the safetensors library, not by us), then our own
    gpt2_weights_build(&again, FIXTURES "hf_tiny_fp32_sharded", 1);
    check("the reference's 3 shards = its one file", weights_equal(&back, &again), "");
    gpt2_weights_free(&again);
    static const size_t shard_sizes[3] = {1, 100000, 300000}; // every tensor alone; several; two shards
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof(dir), "%s/shards%d", tmp, i);
        gpt2_export_hf(&back, dir, 0, shard_sizes[i]);
        gpt2_weights_build(&again, dir, 1);
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
        size_t len;
        uint8_t *index = read_bytes(path, &len);
        char *last = strstr((char *)index, "-of-");
        snprintf(detail, sizeof(detail), "at most %zu bytes a shard: %.5s shards", shard_sizes[i], last != NULL ? last + 4 : "?");
        check("our shards -> ours", weights_equal(&back, &again), detail);
        free(index);
        gpt2_weights_free(&again);
    }
    gpt2_weights_free(&back);
    gpt2_weights_free(&model);
}

// the tokenizer: data/gpt2's two files into a Hugging Face folder and back, unchanged
static void test_tokenizer_files(const char *tmp) {
    printf("\nthe tokenizer's files\n");
    char hf[512], ours[512], a[600], b[600];
    snprintf(hf, sizeof(hf), "%s/tok_hf", tmp);
    snprintf(ours, sizeof(ours), "%s/tok_ours", tmp);
    mkdir(hf, 0777);
    mkdir(ours, 0777);
    copy_tokenizer("data/gpt2", hf, 1);
    copy_tokenizer(hf, ours, 0);
    static const char *const names[2][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof(a), "data/gpt2/%s", names[i][0]);
        snprintf(b, sizeof(b), "%s/%s", hf, names[i][1]);
        int ok = files_equal(a, b);
        snprintf(b, sizeof(b), "%s/%s", ours, names[i][0]);
        ok = ok && files_equal(a, b);
        snprintf(b, sizeof(b), "%s -> %s -> %s", names[i][0], names[i][1], names[i][0]);
        check("tokenizer round trip", ok, b);
    }
}

// ----------------------------------------------------------------------------
// bad input: the loaders, each in a child process

// copies the fixture folder to dir, editing the safetensors header (same-length edits
// keep the offsets) and config.json
static void broken_folder(const char *dir, const char *header_from, const char *header_to, const char *config_from,
                          const char *config_to, size_t truncate_to) {
    mkdir(dir, 0777);
    char path[600];
    size_t n;
    uint8_t *bytes = read_bytes(FIXTURES "hf_tiny_fp32/model.safetensors", &n);
    if (header_from != NULL) {
        char *at = strstr((char *)bytes + 8, header_from);
        if (at != NULL) { memcpy(at, header_to, strlen(header_to)); }
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_bytes(path, bytes, truncate_to != 0 ? truncate_to : n);
    free(bytes);
    bytes = read_bytes(FIXTURES "hf_tiny_fp32/config.json", &n);
    char *text = (char *)mallocCheck(n + 64);
    memcpy(text, bytes, n + 1);
    if (config_from != NULL) {
        char *at = strstr(text, config_from);
        if (at != NULL) {
            memmove(at + strlen(config_to), at + strlen(config_from), strlen(at + strlen(config_from)) + 1);
            memcpy(at, config_to, strlen(config_to));
        }
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    write_bytes(path, text, strlen(text));
    free(text);
    free(bytes);
}

// copies the reference's sharded folder to dir, with its index edited (from -> to)
static void broken_shards(const char *dir, const char *from, const char *to, const char *drop) {
    static const char *const files[5] = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                                         "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
    mkdir(dir, 0777);
    for (int i = 0; i < 5; i++) {
        if (drop != NULL && strcmp(files[i], drop) == 0) { continue; }
        char src[600], dst[600];
        snprintf(src, sizeof(src), FIXTURES "hf_tiny_fp32_sharded/%s", files[i]);
        snprintf(dst, sizeof(dst), "%s/%s", dir, files[i]);
        size_t n;
        uint8_t *bytes = read_bytes(src, &n);
        char *text = (char *)mallocCheck(n + 256);
        memcpy(text, bytes, n + 1);
        if (i == 1 && from != NULL) {
            char *at = strstr(text, from);
            if (at != NULL) {
                memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
                memcpy(at, to, strlen(to));
            }
            n = strlen(text);
        }
        write_bytes(dst, text, n);
        free(text);
        free(bytes);
    }
}

static void test_bad_files(const char *tmp) {
    printf("\nbad files: the loaders exit with a message naming the problem\n");
    char dir[512];
    struct { const char *name, *hf, *ht, *cf, *ct; size_t cut; const char *expect; } cases[] = {
        {"truncated model.safetensors", NULL, NULL, NULL, NULL, 300000, "run past the end"},
        {"only the header survived", NULL, NULL, NULL, NULL, 100, "impossible"},
        {"a missing tensor", "transformer.ln_f.bias", "h.10.attn.masked_bias", NULL, NULL, 0, "ln_f.bias is missing"},
        {"a tensor GPT-2 does not have", "transformer.ln_f.bias", "transformer.ln_f.bxas", NULL, NULL, 0, "not part of GPT-2"},
        {"a tensor in the wrong dtype", "\"F32\"", "\"I32\"", NULL, NULL, 0, "dtype I32"},
        {"a shape that does not fit", NULL, NULL, "\"n_positions\": 128", "\"n_positions\": 64", 0, "has shape"},
        {"config: another activation", NULL, NULL, "gelu_new", "relu", 0, "activation_function"},
        {"config: untied output layer", NULL, NULL, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", 0, "must be true"},
        {"config: not GPT-2", NULL, NULL, "\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", 0, "model_type"},
        {"config: not JSON", NULL, NULL, "\"n_layer\": 2,", "\"n_layer\": 2,,", 0, "JSON error"},
        {"config: no n_embd", NULL, NULL, "\"n_embd\"", "\"n_embx\"", 0, "n_embd is missing"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/broken%zu", tmp, i);
        broken_folder(dir, cases[i].hf, cases[i].ht, cases[i].cf, cases[i].ct, cases[i].cut);
        expect_exit(cases[i].name, load_model, dir, cases[i].expect);
    }
    snprintf(dir, sizeof(dir), "%s/empty", tmp);
    mkdir(dir, 0777);
    expect_exit("a folder without config.json", load_model, dir, "config.json: cannot read it");
    // sharded folders whose index and shards disagree
    struct { const char *name, *from, *to, *drop, *expect; } shards[] = {
        {"shards: a shard missing", NULL, NULL, "model-00002-of-00003.safetensors", "cannot read it"},
        {"shards: a tensor in another shard", "\"wte.weight\": \"model-00003", "\"wte.weight\": \"model-00001", NULL, "which has no such tensor"},
        {"shards: a tensor the index leaves out", "\"ln_f.bias\": \"model-00003-of-00003.safetensors\",", "", NULL, "leaves out tensor ln_f.bias"},
        {"shards: a tensor named twice, one left out", "\"wte.weight\": \"model-00003", "\"wpe.weight\": \"model-00003", NULL, "names tensor wpe.weight twice"},
        {"shards: a file outside the folder", "\"model-00003-of-00003.safetensors\"", "\"../model-00003-of-00003.safetensors\"", NULL, "a file in this folder"},
        {"shards: no weight_map", "weight_map", "weight_mop", NULL, "weight_map"},
        {"shards: the index is not JSON", "{", "{,", NULL, "JSON error"},
    };
    for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/shards_broken%zu", tmp, i);
        broken_shards(dir, shards[i].from, shards[i].to, shards[i].drop);
        expect_exit(shards[i].name, load_model, dir, shards[i].expect);
    }
    // llm.c checkpoints
    char path[600];
    size_t n;
    uint8_t *bytes = read_bytes(FIXTURES "gpt2_tiny_model.bin", &n);
    snprintf(path, sizeof(path), "%s/truncated.bin", tmp);
    write_bytes(path, bytes, n - 4);
    expect_exit("a truncated checkpoint", load_model, path, "truncated or corrupt");
    bytes[0] ^= 1;
    snprintf(path, sizeof(path), "%s/magic.bin", tmp);
    write_bytes(path, bytes, n);
    expect_exit("a checkpoint with a wrong magic number", load_model, path, "bad magic number");
    free(bytes);
    expect_exit("no such model", load_model, "no/such/model.bin", "no such file or folder");
}

// ----------------------------------------------------------------------------

// 4-bit models (version 7; ./convert -Q, *-bnb-4bit folders): a Llama quantized by
// llama_requantize is finetune_lora's quantizer's bytes, band by band (bitsandbytes', checked by
// test_finetune_lora); written and read back, every byte of every band and every other tensor;
// dequantized again (-Q none), each value code x absmax; and a *-bnb-4bit folder read as it is
static void test_4bit(const char *tmp) {
    printf("\n4-bit Llama-family models: -Q, version 7, *-bnb-4bit folders\n");
    static const int specs[][3] = {{QUANT_NF4, 64, 1}, {QUANT_FP4, 32, 0}, {QUANT_NF4, 128, 0}};
    char path[600], label[160];
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        LlamaWeights w, back, plain;
        llama_load(&plain, "build/llama_gqa3.bin");
        llama_load(&w, "build/llama_gqa3.bin");
        llama_requantize(&w, specs[i][0], specs[i][1], specs[i][2]);
        int rows[4][3], in[4], linear[4] = {LL_QKVW, LL_ATTPROJW, LL_FCW, LL_FCPROJW}, same = 1, exact = 1;
        llama_bands(w.config, rows, in);
        size_t bytes = 0;
        for (int l = 0; l < w.config.num_layers; l++) { // the bands are quant4_quantize's of each module's rows
            for (int s = 0; s < 4; s++) {
                size_t site = (size_t)(rows[s][0] + rows[s][1] + rows[s][2]) * in[s], row = 0;
                for (int k = 0; k < 3 && rows[s][k] > 0; row += (size_t)rows[s][k] * in[s], k++) {
                    Quant4 ref, *q = &w.qw[((size_t)l * 4 + s) * 3 + k];
                    quant4_quantize(&ref, plain.tensors[linear[s]] + l * site + row, (size_t)rows[s][k] * in[s], specs[i][0], specs[i][1], specs[i][2]);
                    same = same && q->n == ref.n && memcmp(q->packed, ref.packed, (q->n + 1) / 2) == 0 && quant4_bytes(q) == quant4_bytes(&ref);
                    bytes += quant4_bytes(q);
                    quant4_free(&ref);
                }
            }
        }
        snprintf(path, sizeof(path), "%s/q4_%zu.bin", tmp, i);
        llama_save(&w, path, 1, NULL);
        llama_load(&back, path);
        for (size_t k = 0; k < (size_t)w.config.num_layers * 4 * 3; k++) {
            const Quant4 *a = &w.qw[k], *b = &back.qw[k];
            if (a->n == 0) { same = same && b->n == 0; continue; }
            const void *pa[4], *pb[4];
            size_t sa[4], sb[4];
            int na = quant4_file_parts(a, pa, sa), nb = quant4_file_parts(b, pb, sb);
            same = same && na == nb && a->type == b->type && a->blocksize == b->blocksize;
            for (int p = 0; same && p < na; p++) { same = sa[p] == sb[p] && memcmp(pa[p], pb[p], sa[p]) == 0; }
        }
        for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { // the rest, written as bf16: llama_gqa3's weights are bf16 values
            same = same && w.sizes[k] == back.sizes[k] && (w.sizes[k] == 0 || memcmp(w.tensors[k], back.tensors[k], w.sizes[k] * sizeof(float)) == 0);
        }
        llama_requantize(&back, QUANT_NONE, 0, 0);
        for (int l = 0; l < w.config.num_layers; l++) { // every value code x absmax (quant4_dequantize's)
            for (int s = 0; s < 4; s++) {
                size_t site = (size_t)(rows[s][0] + rows[s][1] + rows[s][2]) * in[s], row = 0;
                for (int k = 0; k < 3 && rows[s][k] > 0; row += (size_t)rows[s][k] * in[s], k++) {
                    const Quant4 *q = &w.qw[((size_t)l * 4 + s) * 3 + k];
                    const float *got = back.tensors[linear[s]] + l * site + row;
                    for (size_t v = 0; v < q->n && exact; v++) {
                        uint8_t byte = q->packed[v / 2];
                        exact = got[v] == quant4_code(q->type)[v % 2 == 0 ? byte >> 4 : byte & 15] * quant4_absmax(q, v / q->blocksize);
                    }
                }
            }
        }
        snprintf(label, sizeof(label), "-Q %s:%d:%d: the quantizer's bytes, saved and read back (%zu bytes)", quant4_name(specs[i][0]), specs[i][1],
                 specs[i][2], bytes);
        check(label, same, "");
        check("... and -Q none: every value code x absmax", exact && back.qw == NULL && back.tensors[LL_QKVW] != NULL, "");
        llama_free(&w); llama_free(&back); llama_free(&plain);
    }
    LlamaWeights bnb;
    llama_build_from_hf(&bnb, FIXTURES "bnb4_llama");
    check("a *-bnb-4bit folder: nf4, blocks of 64, double quantization, every band",
          bnb.quant == QUANT_NF4 && bnb.quant_blocksize == 64 && bnb.quant_nested == 1 && bnb.qw[0].n == 96 * 96 && bnb.qw[0].qabsmax != NULL &&
          bnb.tensors[LL_QKVW] == NULL && bnb.tensors[LL_WTE] != NULL, "");
    llama_free(&bnb);
}

int main(void) {
    char tmp[] = "/tmp/test_convert_dir_XXXXXX";
    if (mkdtemp(tmp) == NULL) { perror("mkdtemp"); return 1; }
    test_json();
    test_safetensors();
    test_gguf();
    test_layouts();
    test_export(tmp);
    test_tokenizer_files(tmp);
    test_llama(tmp);
    test_4bit(tmp);
    test_bad_files(tmp);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    if (system(cmd) != 0) { printf("could not remove %s\n", tmp); }
    printf("\n%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? 0 : 1;
}
