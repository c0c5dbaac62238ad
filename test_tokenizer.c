/*
Tests data/tokenizer.c against tiktoken 0.14.0's GPT-2 encoding.

tiktoken is not run here (CI has no Python): dev/reference/tokenizer_reference.py wrote its
answers into dev/reference/fixtures/, and we compare against those files. The checks:
  - pre-tokenizer: hand-checked splits, including the \s+(?!\S) backtracking and bad UTF-8
  - encode: Tiny Shakespeare and a UTF-8 stress text, token for token (both with and without
    <|endoftext|> as a special token); on a mismatch we print where, the text around it and
    both token lists
  - decode(encode(x)) == x byte for byte, also for random bytes that are not UTF-8
  - the shards the program writes for Tiny Shakespeare equal tiktoken's llm.c-style split
  - the tokenizer.bin it writes: the hash of the file tiktoken implies, and every id against
    encoder.json decoded here independently, through GPT-2's bytes_to_unicode
  - errors the API reports by return value (loader errors exit, so
    dev/test/test_tokenizer_cli.sh tests those through the program)

Build and run from the repository root:
  gcc -O3 -march=native -Wall -Wextra -Werror -std=c11 test_tokenizer.c -o test_tokenizer
  ./test_tokenizer
Regenerate the fixtures: python dev/reference/tokenizer_reference.py
*/

#define TESTING
#include "data/tokenizer.c"

#define FIXTURES "dev/reference/fixtures/"
#define GPT2_DIR "data/gpt2"
#define SHAKESPEARE "data/tinyshakespeare/input.txt"

static int num_passed = 0, num_failed = 0;

static void report(const char *name, int ok) {
    printf("%-70s %s\n", name, ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
}

// Prints bytes as a C string literal, so spaces, newlines and bad UTF-8 are visible: valid
// UTF-8 characters go out as they are, every other byte as \xNN (a token may hold part of a
// character, so this happens even for good text).
static void print_escaped(const uint8_t *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        if (s[i] == '"' || s[i] == '\\') { printf("\\%c", s[i]); }
        else if (s[i] == '\n') { printf("\\n"); }
        else if (s[i] == '\r') { printf("\\r"); }
        else if (s[i] == '\t') { printf("\\t"); }
        else if (len == 0 || s[i] < 0x20 || s[i] == 0x7F) { printf("\\x%02X", s[i]); }
        else { fwrite(s + i, 1, len, stdout); i += len; continue; }
        i++;
    }
    putchar('"');
}

// ----------------------------------------------------------------------------
// reading the fixtures

static uint8_t *read_fixture(const char *path, size_t *len) {
    return read_whole_file(path, len, "run from the repository root; to regenerate the fixtures: "
                                      "python dev/reference/tokenizer_reference.py");
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Reads a token shard written by the reference script (or by us) into int32 ids.
static int32_t *read_shard(const char *path, size_t *num) {
    size_t len;
    uint8_t *data = read_fixture(path, &len);
    if (len < HEADER_INTS * 4 || get_le32(data) != SHARD_MAGIC || get_le32(data + 4) != SHARD_VERSION) {
        die_file(path, "regenerate: python dev/reference/tokenizer_reference.py",
                 "not a token shard (expected magic %d, version %d)", SHARD_MAGIC, SHARD_VERSION);
    }
    *num = get_le32(data + 8);
    if (len != HEADER_INTS * 4 + 2 * *num) {
        die_file(path, NULL, "header says %zu tokens, the file has room for %zu", *num, (len - HEADER_INTS * 4) / 2);
    }
    int32_t *ids = (int32_t *)mallocCheck((*num + 1) * sizeof(int32_t));
    for (size_t i = 0; i < *num; i++) {
        const uint8_t *p = data + HEADER_INTS * 4 + 2 * i;
        ids[i] = p[0] | p[1] << 8;
    }
    free(data);
    return ids;
}

// ----------------------------------------------------------------------------
// the pre-tokenizer on hand-checked cases

// The expected pieces were checked with Python's re (same leftmost-first, backtracking
// semantics as fancy-regex) using ASCII stand-ins for \p{L} and \p{N}, and by hand for the
// non-ASCII and invalid UTF-8 cases.
typedef struct {
    const char *text;
    const char *pieces[8];  // NULL-terminated
} PretokenCase;

static const PretokenCase pretoken_cases[] = {
    {"Hello world", {"Hello", " world", NULL}},
    {"   a", {"  ", " a", NULL}},                    // the run gives its last space to the word
    {"a\n\nb", {"a", "\n", "\n", "b", NULL}},          // ... and its last newline stands alone
    {"x  \n", {"x", "  \n", NULL}},                    // at the end the whole run stays together
    {"it's 'sand", {"it", "'s", " '", "sand", NULL}},
    {"I'M we'LL", {"I", "'", "M", " we", "'", "LL", NULL}},  // contractions are lower case only
    {"?'s", {"?'", "s", NULL}},                        // a symbol run swallows the apostrophe
    {"'ll'", {"'ll", "'", NULL}},
    {"a  1   !", {"a", " ", " 1", "  ", " !", NULL}},
    {"a \n b", {"a", " \n", " b", NULL}},
    {"x\r\n\r\ny", {"x", "\r\n\r", "\n", "y", NULL}},
    {"$5.00!!", {"$", "5", ".", "00", "!!", NULL}},
    {"caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87", {"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", NULL}},
    {"a\xC2\xA0 b", {"a", "\xC2\xA0", " b", NULL}},    // NBSP is white space but never glues
    {"\xE2\x85\xAB\xC2\xBD!", {"\xE2\x85\xAB\xC2\xBD", "!", NULL}},  // Nl and No are numbers
    // bytes that are not UTF-8 are one-byte 'other' characters
    {"a\xFF\xFE" "b", {"a", "\xFF\xFE", "b", NULL}},
    {" \x80x", {" \x80", "x", NULL}},
    {"\xC0\xAFz", {"\xC0\xAF", "z", NULL}},            // overlong '/'
    {"\xED\xA0\x80!", {"\xED\xA0\x80!", NULL}},        // a surrogate
    {"ab\xE6\x97", {"ab", "\xE6\x97", NULL}},          // truncated at the end
};

static void test_pretokenizer(void) {
    int all_ok = 1;
    for (size_t c = 0; c < sizeof(pretoken_cases) / sizeof(pretoken_cases[0]); c++) {
        const PretokenCase *pc = &pretoken_cases[c];
        const uint8_t *text = (const uint8_t *)pc->text;
        size_t n = strlen(pc->text), i = 0, k = 0;
        int ok = 1;
        while (i < n && ok) {
            size_t end = pretoken_end_gpt2(text, n, i);
            const char *want = pc->pieces[k++];
            ok = want != NULL && strlen(want) == end - i && memcmp(want, text + i, end - i) == 0;
            i = end;
        }
        ok = ok && pc->pieces[k] == NULL;
        if (!ok) {
            printf("  pre-tokenizer case "); print_escaped(text, n); printf(" gives:");
            for (size_t j = 0; j < n;) {
                size_t end = pretoken_end_gpt2(text, n, j);
                putchar(' '); print_escaped(text + j, end - j);
                j = end;
            }
            printf("\n");
            all_ok = 0;
        }
    }
    report("pre-tokenizer: hand-checked splits", all_ok);
}

// ----------------------------------------------------------------------------
// encoding against the fixtures

static void print_tokens_around(const Tokenizer *t, const char *label, const int32_t *ids, size_t n, size_t at) {
    size_t from = at >= 5 ? at - 5 : 0, to = at + 6 < n ? at + 6 : n;
    printf("  %s tokens %zu..%zu:", label, from, to);
    for (size_t i = from; i < to; i++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, ids[i], &len);
        printf(" %s%d=", i == at ? ">" : "", ids[i]);
        print_escaped(tok != NULL ? tok : (const uint8_t *)"?", tok != NULL ? len : 1);
    }
    printf("\n");
}

// Compares our ids with the expected ones; on a mismatch shows the first difference in context.
static int compare_tokens(const Tokenizer *t, const int32_t *got, size_t num_got,
                          const int32_t *want, size_t num_want) {
    size_t i = 0;
    while (i < num_got && i < num_want && got[i] == want[i]) { i++; }
    if (i == num_got && i == num_want) { return 1; }
    printf("  first difference at token %zu (we have %zu tokens, tiktoken %zu)\n", i, num_got, num_want);
    // the text there: the bytes of tiktoken's tokens just before and after the difference
    size_t from = i >= 5 ? i - 5 : 0, to = i + 6 < num_want ? i + 6 : num_want;
    uint8_t context[16 * MAX_TOKEN_BYTES];
    size_t len = tokenizer_decode(t, want + from, to - from, context, sizeof(context));
    if (len != SIZE_MAX) { printf("  text around it: "); print_escaped(context, len); printf("\n"); }
    print_tokens_around(t, "ours:    ", got, num_got, i);
    print_tokens_around(t, "tiktoken:", want, num_want, i);
    return 0;
}

static void check_encoding(Tokenizer *t, const char *name, const uint8_t *text, size_t len,
                           int allow_special, const char *fixture) {
    size_t num_want;
    int32_t *want = read_shard(fixture, &num_want);
    int32_t *got = (int32_t *)mallocCheck((len + 1) * sizeof(int32_t));
    size_t num_got = tokenizer_encode(t, text, len, allow_special, got);
    report(name, compare_tokens(t, got, num_got, want, num_want));
    free(got);
    free(want);
}

// decode(encode(text)) must give back text exactly
static void check_roundtrip(Tokenizer *t, const char *name, const uint8_t *text, size_t len, int allow_special) {
    int32_t *ids = (int32_t *)mallocCheck((len + 1) * sizeof(int32_t));
    uint8_t *back = (uint8_t *)mallocCheck(len + 1);
    size_t num = tokenizer_encode(t, text, len, allow_special, ids);
    size_t back_len = tokenizer_decode(t, ids, num, back, len);
    int ok = back_len == len && memcmp(back, text, len) == 0;
    if (!ok && back_len != SIZE_MAX) {
        size_t i = 0;
        while (i < len && i < back_len && back[i] == text[i]) { i++; }
        printf("  decoded text differs at byte %zu (%zu bytes in, %zu out)\n", i, len, back_len);
    } else if (!ok) {
        printf("  decode failed: an invalid id or more bytes than went in\n");
    }
    report(name, ok);
    free(back);
    free(ids);
}

static void test_small_cases(Tokenizer *t) {
    int32_t ids[16];
    size_t n = tokenizer_encode(t, (const uint8_t *)"Hello world", 11, 0, ids);
    report("encode \"Hello world\" -> [15496, 995]", n == 2 && ids[0] == 15496 && ids[1] == 995);
    n = tokenizer_encode(t, (const uint8_t *)SPECIAL_TEXT, SPECIAL_LEN, 1, ids);
    report("encode <|endoftext|> with special tokens -> [50256]", n == 1 && ids[0] == 50256);
    // tiktoken's encode_ordinary("<|endoftext|>")
    const int32_t plain[7] = {27, 91, 437, 1659, 5239, 91, 29};
    n = tokenizer_encode(t, (const uint8_t *)SPECIAL_TEXT, SPECIAL_LEN, 0, ids);
    report("encode <|endoftext|> as ordinary text -> 7 tokens", n == 7 && memcmp(ids, plain, sizeof(plain)) == 0);
    n = tokenizer_encode(t, (const uint8_t *)"", 0, 1, ids);
    report("encode empty text -> no tokens", n == 0);
}

// Random bytes are mostly invalid UTF-8, which tiktoken cannot take, so there is no fixture;
// but they must still encode to valid ids and decode back exactly. xorshift32, fixed seed.
static void test_random_bytes(Tokenizer *t) {
    size_t len = 1 << 16;
    uint8_t *text = (uint8_t *)mallocCheck(len);
    uint32_t state = 1337;
    for (size_t i = 0; i < len; i++) {
        state ^= state << 13; state ^= state >> 17; state ^= state << 5;
        text[i] = (uint8_t)state;
    }
    check_roundtrip(t, "roundtrip: 64 KiB of random bytes (invalid UTF-8)", text, len, 0);
    free(text);
}

// ----------------------------------------------------------------------------
// the files the program writes

// GPT-2's bytes_to_unicode, written here independently of the tokenizer's ByteAlphabet: the
// printable bytes map to themselves, the others to 256, 257, ... in increasing byte order.
static void build_byte_decoder(int byte_of[BYTE_ALPHABET_SIZE]) {
    for (int c = 0; c < BYTE_ALPHABET_SIZE; c++) { byte_of[c] = -1; }
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (printable) { byte_of[b] = b; } else { byte_of[256 + n] = b; n++; }
    }
}

// Decodes every key of encoder.json into raw bytes, placing token id's bytes at
// bytes[id * 256 ..] with length lens[id]. Returns the number of entries.
static int decode_encoder_json(const char *path, uint8_t *bytes, int *lens, int max_ids) {
    int byte_of[BYTE_ALPHABET_SIZE];
    build_byte_decoder(byte_of);
    size_t len;
    uint8_t *s = read_fixture(path, &len);
    int entries = 0;
    size_t i = 0;
    while (i < len) {
        // find the next key: a '"' after '{' or ','
        while (i < len && s[i] != '"') { i++; }
        if (i >= len) { break; }
        i++;
        uint8_t key[256];
        int key_len = 0;
        while (i < len && s[i] != '"' && key_len < 256) {
            uint32_t c;
            if (s[i] == '\\' && s[i + 1] == 'u') {
                char hex[5] = {0};
                memcpy(hex, s + i + 2, 4);  // the file ends in a 0 byte, so this stays inside
                c = (uint32_t)strtoul(hex, NULL, 16);
                i += 6;
            } else if (s[i] == '\\') {
                c = s[i + 1];  // \" and \\ are the only other escapes encoder.json uses
                i += 2;
            } else if (s[i] < 0x80) {
                c = s[i++];
            } else {
                return -1;  // GPT-2's encoder.json is pure ASCII
            }
            if (c >= BYTE_ALPHABET_SIZE || byte_of[c] < 0) { return -1; }
            key[key_len++] = (uint8_t)byte_of[c];
        }
        i++;  // closing quote
        while (i < len && (s[i] == ':' || s[i] == ' ')) { i++; }
        int id = (int)strtol((const char *)s + i, NULL, 10);
        if (id < 0 || id >= max_ids) { return -1; }
        memcpy(bytes + (size_t)id * 256, key, (size_t)key_len);
        lens[id] = key_len;
        entries++;
        while (i < len && s[i] != ',' && s[i] != '}') { i++; }
    }
    free(s);
    return entries;
}

static uint64_t fnv1a64(const uint8_t *s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ull; }
    return h;
}

static void check_tokenizer_bin(const char *path) {
    size_t len;
    uint8_t *data = read_fixture(path, &len);
    report("tokenizer.bin: header [20240328, 2, 50257, 50256]",
           len > HEADER_INTS * 4 && get_le32(data) == TOKENIZER_MAGIC && get_le32(data + 4) == TOKENIZER_VERSION
           && get_le32(data + 8) == 50257 && get_le32(data + 12) == 50256);

    // the whole file against the hash of what tiktoken's decode_single_token_bytes implies
    size_t digest_len;
    uint8_t *digest = read_fixture(FIXTURES "gpt2_tokenizer.fnv1a64", &digest_len);
    char ours[32];
    snprintf(ours, sizeof(ours), "%016llx", (unsigned long long)fnv1a64(data, len));
    int same = digest_len >= 16 && memcmp(ours, digest, 16) == 0;
    if (!same) { printf("  FNV-1a 64 of %s is %s, tiktoken's is %.16s\n", path, ours, (const char *)digest); }
    report("tokenizer.bin: file hash equals tiktoken's", same);
    free(digest);

    // every id against encoder.json, decoded above with our own little bytes_to_unicode
    int max_ids = 50257;
    uint8_t *want = (uint8_t *)mallocCheck((size_t)max_ids * 256);
    int *want_len = (int *)mallocCheck((size_t)max_ids * sizeof(int));
    for (int id = 0; id < max_ids; id++) { want_len[id] = -1; }
    int entries = decode_encoder_json(GPT2_DIR "/encoder.json", want, want_len, max_ids);
    int ok = entries == max_ids, bad_id = -1;
    size_t pos = HEADER_INTS * 4;
    for (int id = 0; ok && id < max_ids; id++) {
        int n = pos < len ? data[pos] : -1;
        ok = n == want_len[id] && pos + 1 + (size_t)n <= len && memcmp(data + pos + 1, want + (size_t)id * 256, (size_t)n) == 0;
        if (!ok) { bad_id = id; }
        pos += 1 + (size_t)n;
    }
    ok = ok && pos == len;
    if (bad_id >= 0) { printf("  token %d differs from encoder.json (%d entries read)\n", bad_id, entries); }
    report("tokenizer.bin: ids 0..50256 equal encoder.json via bytes_to_unicode", ok);

    // "Hello world" back through the file's own table
    const int32_t hello[2] = {15496, 995};
    char text[64];
    size_t used = 0;
    for (int k = 0; k < 2; k++) {
        size_t p = HEADER_INTS * 4;
        for (int id = 0; id < hello[k] && p < len; id++) { p += 1 + data[p]; }
        if (p < len && used + data[p] < sizeof(text)) { memcpy(text + used, data + p + 1, data[p]); used += data[p]; }
    }
    report("tokenizer.bin: [15496, 995] decodes to \"Hello world\"", used == 11 && memcmp(text, "Hello world", 11) == 0);
    free(want_len);
    free(want);
    free(data);
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    uint8_t *da = read_fixture(a, &la), *db = read_fixture(b, &lb);
    int same = la == lb && memcmp(da, db, la) == 0;
    if (!same) { printf("  %s (%zu bytes) differs from %s (%zu bytes)\n", a, la, b, lb); }
    free(da);
    free(db);
    return same;
}

// Runs the program's own code path (default mode) into a temporary folder and compares the
// shards byte for byte with tiktoken's split; then checks the tokenizer.bin it wrote.
static void test_written_files(void) {
    char dir[] = "/tmp/test_tokenizer_XXXXXX";
    if (mkdtemp(dir) == NULL) { fprintf(stderr, "Error: mkdtemp failed: %s\n", strerror(errno)); exit(EXIT_FAILURE); }
    char prefix[256], val[256], train[256], tok[256];
    snprintf(prefix, sizeof(prefix), "%s/ts", dir);
    snprintf(val, sizeof(val), "%s/ts_val.bin", dir);
    snprintf(train, sizeof(train), "%s/ts_train.bin", dir);
    snprintf(tok, sizeof(tok), "%s/tokenizer.bin", dir);
    Options o;
    options_default(&o);
    o.input_path = SHAKESPEARE;
    o.output = prefix;
    o.tokenizer_bin = tok;
    o.gpt2_dir = GPT2_DIR;
    tokenize_file(&o);
    report("shards: val equals tiktoken's llm.c split", files_equal(val, FIXTURES "tiny_shakespeare_val.bin"));
    report("shards: train equals tiktoken's llm.c split", files_equal(train, FIXTURES "tiny_shakespeare_train.bin"));
    check_tokenizer_bin(tok);
    remove(val); remove(train); remove(tok);
    rmdir(dir);
}

// The API reports these by return value; errors in the files are tested through the program.
static void test_api_errors(Tokenizer *t) {
    uint8_t out[64];
    const int32_t too_big[1] = {50257}, negative[1] = {-1}, fine[2] = {15496, 995};
    report("decode: id 50257 is an error", tokenizer_decode(t, too_big, 1, out, sizeof(out)) == SIZE_MAX);
    report("decode: id -1 is an error", tokenizer_decode(t, negative, 1, out, sizeof(out)) == SIZE_MAX);
    report("decode: output buffer too small is an error", tokenizer_decode(t, fine, 2, out, 10) == SIZE_MAX);
    size_t len;
    report("token: id 50257 gives NULL", tokenizer_token(t, 50257, &len) == NULL && len == 0);
}

// ----------------------------------------------------------------------------
// the Llama family's tokenizers: our tokenizer files (./convert) against Hugging Face's

// the same FNV-1a 64 the reference hashes the ids with (as int32, little endian)
static uint64_t ids_hash(const int32_t *ids, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        for (int b = 0; b < 4; b++) { h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xFF)) * 1099511628211ull; }
    }
    return h;
}

// Compares ids[0..n) with the fixture line "<label> <count> <hash> <ids...>" (no ids: only
// count and hash); on a mismatch prints the first difference.
static void check_line(const char *name, const char *fixture, const char *label, const int32_t *ids, size_t n) {
    size_t len;
    char *text = (char *)read_fixture(fixture, &len);
    char head[64];
    snprintf(head, sizeof(head), "\n%s ", label);
    char *at = strncmp(text, head + 1, strlen(head + 1)) == 0 ? text : strstr(text, head);
    if (at == NULL) { die_file(fixture, "regenerate: python dev/reference/bpe_tokenizer_reference.py", "no line '%s'", label); }
    at += at == text ? strlen(head + 1) : strlen(head);
    char *end;
    size_t count = strtoul(at, &end, 10);
    uint64_t hash = strtoull(end, &end, 16);
    int ok = count == n && hash == ids_hash(ids, n);
    if (!ok) {
        printf("  %s: %zu tokens, hash %016llx; the reference: %zu, %016llx\n", label, n, (unsigned long long)ids_hash(ids, n),
               count, (unsigned long long)hash);
        for (size_t i = 0; i < count && *end == ' '; i++) {
            long want = strtol(end, &end, 10);
            if (i >= n || ids[i] != want) {
                printf("  first difference at token %zu: ours %d, the reference's %ld\n", i, i < n ? ids[i] : -1, want);
                break;
            }
        }
    }
    free(text);
    char title[128];
    snprintf(title, sizeof(title), "%s: %s", name, label);
    report(title, ok);
}

// The question and system message the reference's chats use
#define CHAT_QUESTION "What is the ISO 3166 two-letter code of Germany?  Answer in 2 words. "
#define CHAT_SYSTEM "You answer briefly.\xE3\x80\x80\n" // (U+3000: Llama 3's trim takes it off)
// ... and what follows the special tokens in the "specials" line: digit groups, a word that
// is a token no merge makes (in the Llama 3 fixture), runs of white space with lone CRs
#define CHAT_TAIL "'S 12345 a  1\r\n zyzzyva 2024 31415926 a\r\r  b\r \r\n it'\xC5\xBF x'\xC5\xBFy\n"

static void test_model_tokenizer(const char *name, const char *path, const char *fixture, const uint8_t *stress, size_t stress_len,
                                 const uint8_t *shakespeare, size_t shakespeare_len) {
    Tokenizer t;
    tokenizer_init(&t, path);
    if (t.chat == CHAT_LLAMA32) { t.date = "26 Jul 2024"; } // (the fixture's date_string; by default, today's)
    size_t cap = tokenizer_max_ids(&t, shakespeare_len) + 1024;
    int32_t *ids = (int32_t *)mallocCheck(cap * sizeof(int32_t));
    size_t n = tokenizer_encode(&t, stress, stress_len, 1, ids);
    check_line(name, fixture, "utf8_stress", ids, n);
    n = tokenizer_encode(&t, shakespeare, shakespeare_len, 1, ids);
    check_line(name, fixture, "tiny_shakespeare", ids, n);
    // every special token of the vocabulary (the first six), and near misses
    char chat[2048] = "";
    for (int k = 0; k < t.num_specials && k < 6; k++) {
        size_t len;
        int id = -1;
        for (int i = 0, seen = 0; i < t.vocab_size; i++) { // (in id order, as the reference lists them)
            if (t.special[i] && seen++ == k) { id = i; }
        }
        const char *s = (const char *)tokenizer_token(&t, id, &len);
        snprintf(chat + strlen(chat), sizeof(chat) - strlen(chat), "%.*sx %.*s%.*s\n", (int)len, s, (int)len, s, (int)len, s);
    }
    size_t first_len, last_len;
    int first = -1, last = -1;
    for (int i = 0; i < t.vocab_size; i++) {
        if (t.special[i]) { last = i; first = first < 0 ? i : first; }
    }
    const char *a = (const char *)tokenizer_token(&t, first, &first_len), *b = (const char *)tokenizer_token(&t, last, &last_len);
    snprintf(chat + strlen(chat), sizeof(chat) - strlen(chat), "<|%.*s %.*s> " CHAT_TAIL, (int)first_len - 2, a + 2,
             (int)last_len - 1, b);
    n = tokenizer_encode(&t, (const uint8_t *)chat, strlen(chat), 1, ids);
    check_line(name, fixture, "specials", ids, n);
    // a prompt, with the start token where the model's tokenizer adds it
    n = 0;
    if (t.add_bos) { ids[n++] = t.bos_token; }
    n += tokenizer_encode(&t, (const uint8_t *)CHAT_QUESTION, strlen(CHAT_QUESTION), 1, ids + n);
    check_line(name, fixture, "prompt", ids, n);
    // the chat template, as transformers' apply_chat_template lays it out
    for (int with_system = 0; with_system < 2; with_system++) {
        char *prompt = tokenizer_chat_prompt(&t, with_system ? CHAT_SYSTEM : NULL, CHAT_QUESTION);
        n = prompt == NULL ? 0 : tokenizer_encode(&t, (const uint8_t *)prompt, strlen(prompt), 1, ids);
        check_line(name, fixture, with_system ? "chat_system" : "chat", ids, n);
        free(prompt);
    }
    // and back: decoding gives the text again (in NFC, for a tokenizer that normalizes)
    n = tokenizer_encode(&t, stress, stress_len, 1, ids);
    uint8_t *back = (uint8_t *)mallocCheck(8 * stress_len + 64);
    size_t back_len = tokenizer_decode(&t, ids, n, back, 8 * stress_len + 64), want_len = stress_len;
    uint8_t *normalized = t.nfc ? nfc_normalize(stress, stress_len, &want_len) : NULL;
    const uint8_t *want = normalized != NULL ? normalized : stress;
    char title[128];
    snprintf(title, sizeof(title), "%s: decode(encode(stress text)) is the text%s", name, t.nfc ? " in NFC" : "");
    report(title, back_len == want_len && memcmp(back, want, want_len) == 0 && (!t.nfc || want_len != stress_len));
    free(normalized);
    free(back);
    free(ids);
    tokenizer_free(&t);
}

// NFC (Qwen2's normalizer) against Python's unicodedata.normalize (Unicode 16, the tables'
// version): dev/reference/bpe_tokenizer_reference.py wrote every code point whose NFC is not
// itself, and a set of sequences (marks out of order, blocked and unblocked compositions,
// Hangul, composition exclusions), each as "input hex codes ; NFC hex codes".
// Llama 3.2's template dates its system turn with today's date, as strftime_now("%d %b %Y")
// in transformers and llama.cpp: without t.date, the prompt is the fixture's with that date
static void test_llama32_today(void) {
    Tokenizer t;
    tokenizer_init(&t, "build/tok_llama32_tokenizer.bin");
    t.date = "26 Jul 2024";
    char *dated = tokenizer_chat_prompt(&t, NULL, CHAT_QUESTION);
    t.date = NULL;
    char before[64], expect[64]; // (today's date before and after: a run across midnight may get either)
    time_t now = time(NULL);
    strftime(before, sizeof(before), "Today Date: %d %b %Y\n", localtime(&now));
    char *today = tokenizer_chat_prompt(&t, NULL, CHAT_QUESTION);
    now = time(NULL);
    strftime(expect, sizeof(expect), "Today Date: %d %b %Y\n", localtime(&now));
    if (strstr(today, expect) == NULL) { memcpy(expect, before, sizeof(expect)); }
    const char *at = strstr(dated, "Today Date: 26 Jul 2024\n"), *line = at != NULL ? at + strlen("Today Date: 26 Jul 2024\n") : NULL;
    size_t head = at != NULL ? (size_t)(at - dated) : 0;
    int ok = at != NULL && strncmp(today, dated, head) == 0 && strncmp(today + head, expect, strlen(expect)) == 0 &&
             strcmp(today + head + strlen(expect), line) == 0;
    char name[128];
    snprintf(name, sizeof(name), "Llama 3.2 template: today's date by default (%.*s)", (int)strlen(expect) - 1, expect);
    report(name, ok);
    free(dated);
    free(today);
    tokenizer_free(&t);
}

static void test_nfc(void) {
    size_t len;
    char *text = (char *)read_fixture(FIXTURES "nfc_cases.txt", &len);
    int cases = 0, bad = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        uint8_t in[256], want[256];
        size_t n_in = 0, n_want = 0;
        int side = 0;
        for (char *p = line; *p != '\0';) {
            if (*p == ';') { side = 1; p++; continue; }
            if (*p == ' ') { p++; continue; }
            char *end;
            uint32_t cp = (uint32_t)strtoul(p, &end, 16);
            uint8_t *dst = side ? want + n_want : in + n_in;
            size_t k = 0; // (UTF-8 by hand: these are test inputs)
            if (cp < 0x80) { dst[k++] = (uint8_t)cp; }
            else if (cp < 0x800) { dst[k++] = (uint8_t)(0xC0 | cp >> 6); dst[k++] = (uint8_t)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) { dst[k++] = (uint8_t)(0xE0 | cp >> 12); dst[k++] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); dst[k++] = (uint8_t)(0x80 | (cp & 0x3F)); }
            else { dst[k++] = (uint8_t)(0xF0 | cp >> 18); dst[k++] = (uint8_t)(0x80 | (cp >> 12 & 0x3F)); dst[k++] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); dst[k++] = (uint8_t)(0x80 | (cp & 0x3F)); }
            if (side) { n_want += k; } else { n_in += k; }
            p = end;
        }
        size_t out_len;
        uint8_t *out = nfc_normalize(in, n_in, &out_len);
        const uint8_t *got = out != NULL ? out : in;
        if (out == NULL) { out_len = n_in; }
        if (out_len != n_want || memcmp(got, want, n_want) != 0) {
            if (bad++ < 5) { printf("  NFC of %s: ours has %zu bytes, ", line, out_len); print_escaped(got, out_len); printf("\n"); }
        }
        cases++;
        free(out);
    }
    free(text);
    char title[128];
    snprintf(title, sizeof(title), "NFC: %d cases as Python's unicodedata (%d differ)", cases, bad);
    report(title, cases > 3000 && bad == 0);
    // stray bytes pass through, and ASCII is left alone (NULL: nothing to do)
    size_t out_len;
    uint8_t *out = nfc_normalize((const uint8_t *)"e\xCC\x81\xFFx", 5, &out_len);
    report("NFC: e + U+0301 -> U+00E9, a stray byte kept", out != NULL && out_len == 4 && memcmp(out, "\xC3\xA9\xFFx", 4) == 0);
    free(out);
    report("NFC: ASCII is left alone", nfc_normalize((const uint8_t *)"plain", 5, &out_len) == NULL);
}

// A vocabulary may have more merges than tokens (Llama 3: 128256 tokens, 280147 merges).
// The Llama 3 rule's file with its last merge listed 2000 more times (a pair listed again
// keeps its last rank, and the last merge's rank stays the last) loads and encodes the same.
static void test_more_merges_than_tokens(void) {
    size_t len;
    uint8_t *file = read_fixture("build/tok_llama3_tokenizer.bin", &len);
    int32_t h[16];
    memcpy(h, file, sizeof(h));
    size_t merges_end = len - (size_t)h[10], extra = 2000;
    uint8_t *big = (uint8_t *)mallocCheck(len + 8 * extra);
    memcpy(big, file, merges_end);
    for (size_t k = 0; k < extra; k++) { memcpy(big + merges_end + 8 * k, file + merges_end - 8, 8); }
    memcpy(big + merges_end + 8 * extra, file + merges_end, (size_t)h[10]);
    int32_t merges = h[3] + (int32_t)extra;
    memcpy(big + 12, &merges, 4);
    char path[] = "/tmp/test_tokenizer_merges_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, big, len + 8 * extra) != (ssize_t)(len + 8 * extra)) { perror(path); exit(1); }
    close(fd);
    Tokenizer a, b;
    tokenizer_init(&a, "build/tok_llama3_tokenizer.bin");
    tokenizer_init(&b, path);
    const char *text = "First Citizen: Before we proceed any further, hear me speak. 12345";
    int32_t ia[128], ib[128];
    size_t na = tokenizer_encode(&a, (const uint8_t *)text, strlen(text), 1, ia);
    size_t nb = tokenizer_encode(&b, (const uint8_t *)text, strlen(text), 1, ib);
    char title[128];
    snprintf(title, sizeof(title), "a tokenizer of %d tokens and %d merges loads and encodes the same", b.vocab_size, b.num_merges);
    report(title, b.num_merges > b.vocab_size && na == nb && memcmp(ia, ib, na * sizeof(int32_t)) == 0);
    tokenizer_free(&a);
    tokenizer_free(&b);
    remove(path);
    free(big);
    free(file);
}

int main(void) {
    Tokenizer t;
    tokenizer_init(&t, GPT2_DIR);
    test_pretokenizer();
    test_small_cases(&t);

    size_t shakespeare_len, stress_len;
    uint8_t *shakespeare = read_fixture(SHAKESPEARE, &shakespeare_len);
    uint8_t *stress = read_fixture(FIXTURES "utf8_stress.txt", &stress_len);
    check_encoding(&t, "encode: Tiny Shakespeare, ordinary", shakespeare, shakespeare_len, 0,
                   FIXTURES "tiny_shakespeare_ordinary.bin");
    check_encoding(&t, "encode: UTF-8 stress text, ordinary", stress, stress_len, 0,
                   FIXTURES "utf8_stress_ordinary.bin");
    check_encoding(&t, "encode: UTF-8 stress text, <|endoftext|> special", stress, stress_len, 1,
                   FIXTURES "utf8_stress_special.bin");
    check_roundtrip(&t, "roundtrip: Tiny Shakespeare", shakespeare, shakespeare_len, 0);
    check_roundtrip(&t, "roundtrip: UTF-8 stress text, ordinary", stress, stress_len, 0);
    check_roundtrip(&t, "roundtrip: UTF-8 stress text, special", stress, stress_len, 1);
    test_random_bytes(&t);
    test_api_errors(&t);
    test_written_files();
    // the Llama family's (made by make test: ./convert from the fixtures, and make smollm2)
    test_model_tokenizer("SmolLM2", "data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin", FIXTURES "bpe_smollm2.txt", stress,
                         stress_len, shakespeare, shakespeare_len);
    test_model_tokenizer("Llama 3 rule", "build/tok_llama3_tokenizer.bin", FIXTURES "bpe_llama3.txt", stress, stress_len,
                         shakespeare, shakespeare_len);
    test_model_tokenizer("Llama 3.1 template", "build/tok_llama31_tokenizer.bin", FIXTURES "bpe_llama31.txt", stress, stress_len,
                         shakespeare, shakespeare_len);
    test_model_tokenizer("Llama 3.2 template", "build/tok_llama32_tokenizer.bin", FIXTURES "bpe_llama32.txt", stress, stress_len,
                         shakespeare, shakespeare_len);
    test_llama32_today();
    test_model_tokenizer("Qwen2 rule", "build/tok_qwen2_tokenizer.bin", FIXTURES "bpe_qwen2.txt", stress, stress_len,
                         shakespeare, shakespeare_len);
    test_nfc();
    test_more_merges_than_tokens();

    free(stress);
    free(shakespeare);
    tokenizer_free(&t);
    printf("%d passed, %d failed\n", num_passed, num_failed);
    return num_failed > 0 ? 1 : 0;
}
