// lib/tokenizer.h: byte-level BPE as GPT-2 and the Llama family use it: the pre-tokenizers,
// Unicode NFC, the merges, special tokens, chat prompts, and the tokenizer files (GPT-2's
// encoder.json + vocab.bpe, our tokenizer file from ./convert). data/tokenizer.c is its
// command line (text in, token shards and tokenizer.bin out).
/*
How GPT-2 tokenizes, in three steps:
  1. Pre-tokenize: a regex cuts the text into pieces ("Hello", " world", "!", "\n"), so that a
     token never spans a word boundary:
         's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
     We match it by hand over UTF-8, no regex library. The Unicode classes come from
     lib/unicode_tables.h (Unicode 16.0.0, the version tiktoken's Rust regex uses; see that
     file for how it was generated and checked).
  2. BPE each piece: start from its single bytes, then keep merging the adjacent pair whose
     concatenation has the lowest rank (= token id) until no adjacent pair is a token.
  3. Special tokens: only <|endoftext|> (id 50256), and only when asked (tokenizer_encode's
     allow_special: data/tokenizer -s); otherwise that text is ordinary text, like tiktoken's
     encode_ordinary.

The same code tokenizes for the Llama family, from a tokenizer file
that ./convert writes out of a GGUF file or a Hugging Face tokenizer.json (the layout is at
tokenizer_load_file). What differs from GPT-2, all of it data in that file:
  - the pre-tokenizer rule: SmolLM2 cuts out every digit first; Llama 3 and Qwen2 use a
    regex of their own (pretoken_end_llama3);
  - the merges: Hugging Face's BPE merges only the pairs its merge list names, in the list's
    order, where tiktoken merges any two parts whose join is a token, in id order; the two
    agree on GPT-2's vocabulary, not on every vocabulary (bpe_merge does either);
  - many special tokens (<|im_start|>, <|eot_id|>, ...), a start token that Llama 3 puts in
    front of every prompt, and a chat template (tokenizer_chat_prompt).
test_tokenizer.c checks them against Hugging Face's tokenizers library running each model's
own definition (dev/reference/bpe_tokenizer_reference.py); Qwen2 normalizes text to Unicode
NFC first (nfc_normalize, on tables from lib/unicode_tables.h). Not done: SentencePiece
models (Llama 2's), other normalizers.

What we leave out: training a BPE, other encodings (cl100k, o200k), and input that is
not valid UTF-8 in tiktoken's sense. tiktoken cannot take such input at all; we treat every
byte that does not start a valid UTF-8 character as one "other symbol" character (class
[^\s\p{L}\p{N}]), so such files still encode and decode back to the same bytes.
encoder.json is read with the project's one JSON parser (lib/json.h).
*/
#ifndef LIB_TOKENIZER_H
#define LIB_TOKENIZER_H
#include "utils.h"
#include "json.h"
#include "unicode_tables.h"

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
static inline void tokenizer_init(Tokenizer *t, const char *path); // GPT-2's folder, or a tokenizer file
static inline void tokenizer_free(Tokenizer *t);
static inline size_t tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, int allow_special, int32_t *out);
static inline size_t tokenizer_max_ids(const Tokenizer *t, size_t len); // room tokenizer_encode needs for len bytes
static inline size_t tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, uint8_t *out, size_t cap);
static inline const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len);
static inline int tokenizer_find(const Tokenizer *t, const char *text); // the id whose bytes are text, or -1
static inline char *tokenizer_chat_prompt(const Tokenizer *t, const char *system, const char *user);

// ----------------------------------------------------------------------------
// UTF-8 and the three Unicode classes of the pre-tokenizer

// Every character falls in exactly one class. The pattern's alternatives map onto them:
// ' ?\p{L}+' is a run of LETTER, ' ?\p{N}+' of NUMBER, ' ?[^\s\p{L}\p{N}]+' of OTHER, and the
// two \s+ alternatives handle runs of SPACE.
enum { CHAR_LETTER, CHAR_NUMBER, CHAR_SPACE, CHAR_OTHER };

static inline int in_ranges(const uint32_t (*ranges)[2], size_t num_ranges, uint32_t cp) {
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

static inline int codepoint_class(uint32_t cp) {
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

// Decodes the UTF-8 character at s[0..n), n >= 1. Returns its length in bytes (1 to 4), or 0
// if s does not start a valid character: a stray continuation byte, a truncated sequence, an
// overlong encoding, a surrogate or a code point above U+10FFFF (what Rust's str rejects).
static inline size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
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

// 1 if s[0..n) is UTF-8 as RFC 3629 has it: no overlong forms, no surrogates, nothing above
// U+10FFFF (utf8_decode's rules), 0 if not
static inline int utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        if (len == 0) { return 0; }
        i += len;
    }
    return 1;
}

// The class and byte length of the character at s[0..n), n >= 1. A byte that does not start
// a valid character counts as a one-byte OTHER character (see the file header).
static inline size_t next_char(const uint8_t *s, size_t n, int *cls) {
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
static inline int nfc_class(uint32_t cp) {
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
static inline void nfc_decompose(uint32_t cp, uint32_t *out, size_t *n) {
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

static inline int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

// The character that a + b compose into, or 0. The pairs (those the table marks) are put in
// order of (a, b) once, on the first call, for a binary search: key (a << 21 | b) << 21 | result.
static inline uint32_t nfc_compose(uint32_t a, uint32_t b) {
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
static inline uint8_t *nfc_normalize(const uint8_t *text, size_t len, size_t *out_len) {
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
static inline size_t pretoken_end_gpt2(const uint8_t *text, size_t n, size_t i) {
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
static inline int class_at(const uint8_t *text, size_t n, size_t j) {
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
static inline size_t pretoken_end_llama3(const uint8_t *text, size_t n, size_t i, int max_digits) {
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

static inline int byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static inline void byte_alphabet_init(ByteAlphabet *a) {
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

#define ENCODER_JSON_HINT "encoder.json must be GPT-2's original file; -g names the folder holding it"

// FNV-1a: short, good enough for the short byte strings we hash
static inline uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ull; }
    return h;
}

// The public API (tokenizer_init/free/token/encode/decode, and options_default/tokenize_file
// for the program) has external linkage, so that a program or test including this file may
// leave parts of it unused without a warning; everything else is static.

// The raw bytes of token id, or NULL (and *len = 0) if id is not in the vocabulary.
static inline const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) { *len = 0; return NULL; }
    *len = t->token_offset[id + 1] - t->token_offset[id];
    return t->token_bytes + t->token_offset[id];
}

// The id of the ordinary token whose bytes are s[0..n), else -1: under tiktoken's rule, the
// string's rank. Most of the encoding time goes here.
static inline int tokenizer_rank(const Tokenizer *t, const uint8_t *s, size_t n) {
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
static inline void load_encoder_json(Tokenizer *t, const char *path, const ByteAlphabet *a) {
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
static inline int read_merge_half(const uint8_t *s, size_t end, size_t *pos, const ByteAlphabet *a,
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
static inline void check_vocab_bpe(Tokenizer *t, const char *path, const ByteAlphabet *a) {
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
static inline void tokenizer_load_gpt2(Tokenizer *t, const char *dir) {
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

static inline uint32_t tok_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define MERGE_EMPTY UINT64_MAX
static inline size_t merge_slot(uint64_t key, size_t mask) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask; }

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
static inline void tokenizer_load_file(Tokenizer *t, const char *path) {
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
static inline void tokenizer_index(Tokenizer *t, const char *path) {
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
static inline void tokenizer_init(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    struct stat st;
    int file = stat(path, &st) == 0 && !S_ISDIR(st.st_mode); // else a folder (or nothing: then
    if (file) { tokenizer_load_file(t, path); }              // the message names encoder.json)
    else { tokenizer_load_gpt2(t, path); }
    tokenizer_index(t, path);
}

static inline void tokenizer_free(Tokenizer *t) {
    free(t->token_bytes); free(t->token_offset); free(t->rank_table); free(t->special); free(t->specials);
    free(t->system); free(t->merge_key); free(t->merge_rank); free(t->merge_result);
    free(t->cache); free(t->cache_keys); free(t->cache_tokens);
    memset(t, 0, sizeof(*t));
}

// The id of the token whose bytes are text (special or not), or -1.
static inline int tokenizer_find(const Tokenizer *t, const char *text) {
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
static inline void chat_put(ChatText *c, const char *text, size_t n) {
    if (c->len + n + 1 > c->cap) {
        c->cap = 2 * (c->len + n + 1);
        c->s = (char *)realloc(c->s, c->cap);
        if (c->s == NULL) { fprintf(stderr, "Error: out of memory for a chat prompt\n"); exit(EXIT_FAILURE); }
    }
    memcpy(c->s + c->len, text, n);
    c->len += n;
    c->s[c->len] = '\0';
}
static inline void chat_puts(ChatText *c, const char *text) { chat_put(c, text, strlen(text)); }

// Python's str.isspace, which Jinja's trim strips: White_Space, and U+001C..U+001F
static inline int python_space(const uint8_t *s, size_t n, size_t *len) {
    uint32_t cp;
    *len = utf8_decode(s, n, &cp);
    if (*len == 0) { *len = 1; return 0; }
    return (cp >= 0x1C && cp <= 0x1F) || codepoint_class(cp) == CHAR_SPACE;
}

// Llama 3's template trims each message (Jinja's trim: Python's str.strip)
static inline void chat_put_trimmed(ChatText *c, const char *text) {
    const uint8_t *s = (const uint8_t *)text;
    size_t n = strlen(text), len, start = 0, end = 0;
    while (start < n && python_space(s + start, n - start, &len)) { start += len; }
    for (size_t i = start; i < n; i += len) { // end: after the last character that is not white space
        if (!python_space(s + i, n - i, &len)) { end = i + len; }
    }
    chat_put(c, text + start, end > start ? end - start : 0);
}

// A conversation as laid out in the model's chat template, as transformers'
// apply_chat_template renders it (roles "system", "user", "assistant", or any other name the
// template passes through), ending, with add_generation_prompt, where the assistant's next
// reply begins. The special tokens are written as their text, for tokenizer_encode with
// allow_special. NULL for a tokenizer without a template. Free the result.
//   ChatML (SmolLM2, Qwen2.5): every message as <|im_start|>{role}\n{content}<|im_end|>\n;
//       when the first is not a system message, the template's default system turn first
//       (t->system: SmolLM2's and Qwen2.5's templates write one; none if empty);
//       generation prompt <|im_start|>assistant\n
//   Llama 3: <|begin_of_text|>, then every message as
//       <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>;
//       generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n
//   Llama 3.1, 3.2: the same, but the system turn is always there, first, and opens with
//       Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n
//       then the first message's content, trimmed, if it is the system's (else nothing)
// Where these come from: SmolLM2's and Qwen2.5's Jinja templates write a default system turn
// when the chat has none (./convert keeps its text in t->system); Meta-Llama-3-Instruct's has
// none and trims every message (Jinja's trim). Llama 3.1's and 3.2's (and 3.3's) write the
// dates: 3.1's {date} is "26 Jul 2024", 3.2's today's (strftime_now("%d %b %Y"), which
// transformers and llama.cpp give it), or t->date when set. (Their tool-calling parts are not
// here: our conversations have no tools.) Checked against apply_chat_template on
// conversations of every shape by test_tokenizer.c (fixtures from dev/reference/chat_reference.py).
typedef struct {
    const char *role;    // "system", "user", "assistant"
    const char *content;
} ChatMessage;

static inline char *tokenizer_chat_render(const Tokenizer *t, const ChatMessage *m, int n, int add_generation_prompt) {
    if (t->chat == CHAT_NONE) { return NULL; }
    ChatText c = {NULL, 0, 0};
    chat_puts(&c, "");
    int has_system = n > 0 && strcmp(m[0].role, "system") == 0;
    if (t->chat == CHAT_CHATML) {
        if (!has_system && t->system[0] != '\0') {
            chat_puts(&c, "<|im_start|>system\n");
            chat_puts(&c, t->system);
            chat_puts(&c, "<|im_end|>\n");
        }
        for (int i = 0; i < n; i++) {
            chat_puts(&c, "<|im_start|>");
            chat_puts(&c, m[i].role);
            chat_puts(&c, "\n");
            chat_puts(&c, m[i].content);
            chat_puts(&c, "<|im_end|>\n");
        }
        if (add_generation_prompt) { chat_puts(&c, "<|im_start|>assistant\n"); }
        return c.s;
    }
    size_t len;
    const uint8_t *bos = tokenizer_token(t, t->bos_token, &len);
    int first = 0;
    if (t->chat == CHAT_LLAMA3) { // (Meta's template puts the start token in front of the first message only)
        if (bos != NULL && n > 0) { chat_put(&c, (const char *)bos, len); }
    } else {
        if (bos != NULL) { chat_put(&c, (const char *)bos, len); }
        char today[32] = "26 Jul 2024"; // (Llama 3.1's)
        if (t->chat == CHAT_LLAMA32 && t->date != NULL) { snprintf(today, sizeof(today), "%s", t->date); }
        else if (t->chat == CHAT_LLAMA32) {
            time_t now = time(NULL);
            struct tm *local = localtime(&now); // (the C locale's month names, as Python's strftime)
            if (local == NULL || strftime(today, sizeof(today), "%d %b %Y", local) == 0) { snprintf(today, sizeof(today), "26 Jul 2024"); }
        }
        chat_puts(&c, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        chat_puts(&c, today);
        chat_puts(&c, "\n\n");
        if (has_system) { chat_put_trimmed(&c, m[0].content); first = 1; }
        else if (t->system[0] != '\0') { chat_put_trimmed(&c, t->system); }
        chat_puts(&c, "<|eot_id|>");
    }
    if (t->chat == CHAT_LLAMA3 && !has_system && t->system[0] != '\0') {
        chat_puts(&c, "<|start_header_id|>system<|end_header_id|>\n\n");
        chat_put_trimmed(&c, t->system);
        chat_puts(&c, "<|eot_id|>");
    }
    for (int i = first; i < n; i++) {
        chat_puts(&c, "<|start_header_id|>");
        chat_puts(&c, m[i].role);
        chat_puts(&c, "<|end_header_id|>\n\n");
        chat_put_trimmed(&c, m[i].content);
        chat_puts(&c, "<|eot_id|>");
    }
    if (add_generation_prompt) { chat_puts(&c, "<|start_header_id|>assistant<|end_header_id|>\n\n"); }
    return c.s;
}

// One user message, after a system message (NULL: the template's default), with the
// generation prompt: the conversation of infer's -a 1 -i
static inline char *tokenizer_chat_prompt(const Tokenizer *t, const char *system, const char *user) {
    ChatMessage m[2] = {{"system", system}, {"user", user}};
    return system != NULL ? tokenizer_chat_render(t, m, 2, 1) : tokenizer_chat_render(t, m + 1, 1, 1);
}

// ----------------------------------------------------------------------------
// byte pair encoding of one piece

// Joining parts k and k+1: returns the rank of that merge (-1: they do not merge) and sets
// *made to the token it makes. Two rules, which agree on GPT-2's vocabulary:
//  - tiktoken's (GPT-2's files): any two parts whose bytes joined are a token merge, and that
//    token's id is the rank;
//  - Hugging Face's (tokenizer files): only the pairs in the merge list merge, ranked by
//    their place in it.
static inline int pair_rank(const Tokenizer *t, const uint8_t *piece, const size_t *start, const int32_t *id,
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
static inline size_t bpe_merge(const Tokenizer *t, const uint8_t *piece, size_t n, int32_t *out) {
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
static inline size_t bpe_encode_piece(Tokenizer *t, const uint8_t *piece, size_t n, int32_t *out) {
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
static inline size_t encode_pieces(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
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
static inline size_t encode_unnormalized(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
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
static inline size_t encode_ordinary(Tokenizer *t, const uint8_t *text, size_t len, int32_t *out) {
    size_t normalized_len;
    uint8_t *normalized = t->nfc ? nfc_normalize(text, len, &normalized_len) : NULL;
    if (normalized == NULL) { return encode_unnormalized(t, text, len, out); }
    size_t num = encode_unnormalized(t, normalized, normalized_len, out);
    free(normalized);
    return num;
}

// Room for the ids of len bytes of text: every token covers at least one byte, and NFC
// makes a text at most 3 times longer (U+1D1C0, 4 bytes, is 3 characters of 4 bytes).
static inline size_t tokenizer_max_ids(const Tokenizer *t, size_t len) { return (t->nfc ? 3 : 1) * len + 1; }

// The special token whose text starts at text[i] (the longest if several do), or -1.
static inline int special_at(const Tokenizer *t, const uint8_t *text, size_t len, size_t i) {
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
static inline size_t tokenizer_encode(Tokenizer *t, const uint8_t *text, size_t len, int allow_special, int32_t *out) {
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
static inline size_t tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, uint8_t *out, size_t cap) {
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

#endif // LIB_TOKENIZER_H
