/*
GPT-2's byte-level BPE tokenizer in plain C: text in, token ids out, token for token the same
as tiktoken's "gpt2" encoding. It also writes the two binary files the rest of the project
reads: token shards for training, and tokenizer.bin for turning ids back into text.

The tokenizer itself (how GPT-2 tokenizes, the Llama family's rules, what is left out) is
lib/tokenizer.h's, which infer, convert and finetune_lora include too; this program is its
command line: it reads a text and writes the files.

The tokenizer (-g) is GPT-2's (the folder of encoder.json and vocab.bpe), or any tokenizer
file ./convert writes (NAME_tokenizer.bin: SmolLM2's, Llama 3's, Qwen2's), with the same ids
as infer's tokenizer, which is this one, and as Hugging Face's tokenizers (test_tokenizer.c).

Modes (run with -h for every flag and default):
  default: the llm.c Tiny Shakespeare convention. Split the text at "\n\n"; every section
           becomes [<|endoftext|>] + encode(section + "\n\n") (the last section gets no
           "\n\n"); the first 32768 tokens go to PREFIX_val.bin, the rest to PREFIX_train.bin.
           (A tokenizer file's documents start with its <|endoftext|> if it has one, else its
           start token: Llama 3's <|begin_of_text|>.)
  -j:      the input is JSON lines {"text": ...}: each line one document, [<|endoftext|>] +
           encode(text), split as above (or into one shard with -e).
  -e:      encode the whole file as one string into the one shard named by -o.
  -p TEXT: print TEXT's tokens, id:piece each (with the start token where the tokenizer
           adds one, as Hugging Face's tokenizer(TEXT) does); nothing is written.
  -d IDS:  print the text of token ids ("15496,995"); nothing is written.
The shard modes also write GPT-2's tokenizer.bin (-t) unless told not to.

File formats (all integers little endian):
  token shard:   256 x int32 header [20240520, version, number of tokens, 0...], then the ids:
                 version 1 uint16 (vocabularies up to 65536 tokens: GPT-2's, SmolLM2's), version
                 2 uint32 (Llama 3's 128256, Qwen2's 151k), as llm.c's shards
  tokenizer.bin: 256 x int32 header [20240328, 2, vocab size, EOT id, 0...], then for each
                 id 0..V-1 one uint8 byte count followed by that many raw bytes

Build and run from the repository root:
  gcc -O3 -march=native -Wall -Wextra -Werror -std=c11 data/tokenizer.c -o data/tokenizer
  ./data/tokenizer          # data/tinyshakespeare/tiny_shakespeare_{val,train}.bin + data/gpt2_tokenizer.bin

Checked against tiktoken 0.14.0 by test_tokenizer.c, which reads fixtures written by
dev/reference/tokenizer_reference.py (regenerate: python dev/reference/tokenizer_reference.py).
*/

// fsync, fileno, access, stat, mkdir, mkdtemp and clock_gettime are POSIX, not C11
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define PROGRAM "./data/tokenizer" // in messages: how the user runs this program
#include "../lib/utils.h"
#include "../lib/json.h"
#include "../lib/tokenizer.h"

// ----------------------------------------------------------------------------
// output files: checked writes, all of a run's outputs renamed into place together


// Atomic writes. Every output goes to NAME.tmp first, which is flushed, fsync'ed and closed;
// only when all outputs of a run are complete do we rename them to their final names. (Not
// lib/utils.h's write_file_atomic, which writes one buffer: the shards are written as they
// are encoded, and a run's files must appear together.) If we
// exit early for any reason (a check macro, bad input), an atexit handler deletes the .tmp
// files, so a failed run leaves no partial file behind and never clobbers a good old one.
#define MAX_OUTPUTS 4
typedef struct {
    char path[MAX_PATH_LEN];      // final name
    char tmp_path[MAX_PATH_LEN];  // name while being written
    FILE *f;                      // open while writing, NULL once closed
} PendingOutput;
static PendingOutput pending_outputs[MAX_OUTPUTS];
static int num_pending_outputs = 0;

static void remove_pending_outputs(void) {
    for (int i = 0; i < num_pending_outputs; i++) {
        if (pending_outputs[i].f != NULL) { fclose(pending_outputs[i].f); }
        remove(pending_outputs[i].tmp_path);
    }
    num_pending_outputs = 0;
}

// Makes the folders above path that do not exist yet, like `mkdir -p`, so that
// `-o data/my/my` works without a separate mkdir. Says so for each new folder.
static void make_parent_folders(const char *path) {
    char dir[MAX_PATH_LEN];
    path_concat(dir, path, "");
    for (char *slash = strchr(dir + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(dir, 0777) == 0) { printf("made folder %s\n", dir); }
        else if (errno != EEXIST) { die_file(dir, NULL, "cannot make this folder: %s", strerror(errno)); }
        *slash = '/';
    }
}

static FILE *output_open(const char *path) {
    static int cleanup_registered = 0;
    if (!cleanup_registered) { atexit(remove_pending_outputs); cleanup_registered = 1; }
    if (num_pending_outputs == MAX_OUTPUTS) {
        fprintf(stderr, "Error: more than %d outputs in one run\n", MAX_OUTPUTS);
        exit(EXIT_FAILURE);
    }
    PendingOutput *out = &pending_outputs[num_pending_outputs];
    path_concat(out->tmp_path, path, ".tmp");
    path_concat(out->path, path, "");
    // register before opening, so even a failed open is cleaned up consistently
    out->f = NULL;
    num_pending_outputs++;
    make_parent_folders(path);
    out->f = fopenCheck(out->tmp_path, "wb");
    return out->f;
}

static void output_close(FILE *f) {
    for (int i = 0; i < num_pending_outputs; i++) {
        PendingOutput *out = &pending_outputs[i];
        if (out->f != f) { continue; }
        // fflush moves our buffer to the OS, fsync moves the OS's buffer to the disk
        if (fflush(f) != 0) { die_file(out->tmp_path, NULL, "flush failed: %s", strerror(errno)); }
        if (fsync(fileno(f)) != 0) { die_file(out->tmp_path, NULL, "fsync failed: %s", strerror(errno)); }
        out->f = NULL;
        fcloseCheck(f);
        return;
    }
    fprintf(stderr, "Error: output_close on a file that output_open did not open\n");
    exit(EXIT_FAILURE);
}

// Renames every finished NAME.tmp to NAME. rename() within one directory is atomic in POSIX.
static void output_commit_all(void) {
    for (int i = 0; i < num_pending_outputs; i++) {
        PendingOutput *out = &pending_outputs[i];
        if (out->f != NULL) { die_file(out->path, NULL, "committed before it was closed"); }
        if (rename(out->tmp_path, out->path) != 0) {
            die_file(out->path, NULL, "cannot rename %s to it: %s", out->tmp_path, strerror(errno));
        }
        // the rename is a change to the directory: fsync it too, so the new name is on disk
        // (best effort: some file systems refuse fsync on a directory)
        char dir[MAX_PATH_LEN];
        path_concat(dir, out->path, "");
        char *slash = strrchr(dir, '/');
        if (slash != NULL) { *slash = '\0'; } else { strcpy(dir, "."); }
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
    }
    num_pending_outputs = 0;
}

// We write integers byte by byte in little-endian order, so the files are the same on any host.
static void put_le32(uint8_t *dst, uint32_t v) {
    dst[0] = (uint8_t)v; dst[1] = (uint8_t)(v >> 8); dst[2] = (uint8_t)(v >> 16); dst[3] = (uint8_t)(v >> 24);
}

// ----------------------------------------------------------------------------
// encoding a text: the Tiny Shakespeare convention

// The llm.c Tiny Shakespeare convention: cut the text at every "\n\n" (as Python's
// str.split: left to right, not overlapping), then emit [EOT] + encode(section + "\n\n") for
// every section but the last, which gets no "\n\n". out needs room for len + len / 2 + 1 ids:
// at most one EOT per section, and a section ends at most every 2 bytes.
static size_t encode_sections(Tokenizer *t, const uint8_t *text, size_t len, int allow_special, int sep, int32_t *out) {
    size_t num = 0, section = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] == '\n' && text[i + 1] == '\n') {
            out[num++] = sep;
            // section + "\n\n" is exactly the text up to and including this separator
            num += tokenizer_encode(t, text + section, i + 2 - section, allow_special, out + num);
            section = i + 2;
            i++;  // do not let the separator's second '\n' start another one
        }
    }
    out[num++] = sep;
    num += tokenizer_encode(t, text + section, len - section, allow_special, out + num);
    return num;
}

// -j: JSON lines {"text": ...}, each a document: [sep] + encode(text). Blank lines are
// skipped; a line that is not such an object stops the run, naming its line. out: room for
// tokenizer_max_ids(len) + one per line.
static size_t encode_jsonl(Tokenizer *t, const char *path, const uint8_t *data, size_t len, int allow_special, int sep, int32_t *out) {
    size_t num = 0;
    int line_no = 0;
    char err[256];
    for (size_t start = 0; start < len;) {
        size_t end = start;
        while (end < len && data[end] != '\n') { end++; }
        line_no++;
        size_t stop = end > start && data[end - 1] == '\r' ? end - 1 : end;
        const char *line = (const char *)data + start;
        start = end + 1;
        if (stop == (size_t)(line - (const char *)data)) { continue; } // blank
        Json j;
        if (json_parse(&j, line, stop - (size_t)(line - (const char *)data), err, sizeof(err)) != 0) {
            die_file(path, "-j takes JSON lines {\"text\": ...}", "line %d: %s", line_no, err);
        }
        int at = json_get(&j, 0, "text");
        size_t cap = j.tokens[0].end - j.tokens[0].start + 1;
        char *text = (char *)mallocCheck(cap);
        if (at < 0 || json_string(&j, at, text, cap) < 0) { die_file(path, "-j takes JSON lines {\"text\": ...}", "line %d: no string \"text\"", line_no); }
        out[num++] = sep;
        num += tokenizer_encode(t, (const uint8_t *)text, strlen(text), allow_special, out + num);
        free(text);
        json_free(&j);
    }
    return num;
}

// ----------------------------------------------------------------------------
// output files: token shards and tokenizer.bin

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1      // uint16 ids
#define SHARD_VERSION_WIDE 2 // uint32 ids
#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define HEADER_INTS 256

// Writes ids as a token shard at path.tmp (see output_commit_all for the rename): uint16 ids
// (version 1) for a vocabulary of up to 65536 tokens, else uint32 (version 2)
static void write_shard(const char *path, const int32_t *ids, size_t n, int vocab_size) {
    if (n > INT32_MAX) { die_file(path, NULL, "%zu tokens do not fit the int32 count in the header", n); }
    int wide = vocab_size > 65536;
    size_t width = wide ? 4 : 2;
    uint8_t header[HEADER_INTS * 4] = {0};
    put_le32(header + 0, SHARD_MAGIC);
    put_le32(header + 4, wide ? SHARD_VERSION_WIDE : SHARD_VERSION);
    put_le32(header + 8, (uint32_t)n);
    uint8_t *body = (uint8_t *)mallocCheck(width * n);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab_size) { die_file(path, NULL, "token id %d is outside the vocabulary", ids[i]); }
        if (wide) { put_le32(body + 4 * i, (uint32_t)ids[i]); }
        else { body[2 * i] = (uint8_t)ids[i]; body[2 * i + 1] = (uint8_t)(ids[i] >> 8); }
    }
    FILE *f = output_open(path);
    fwriteCheck(header, 1, sizeof(header), f);
    fwriteCheck(body, 1, width * n, f);
    output_close(f);
    free(body);
}

// Writes the decoding table at path.tmp: for each id its raw bytes, length-prefixed.
static void write_tokenizer_bin(const Tokenizer *t, const char *path) {
    uint8_t header[HEADER_INTS * 4] = {0};
    put_le32(header + 0, TOKENIZER_MAGIC);
    put_le32(header + 4, TOKENIZER_VERSION);
    put_le32(header + 8, (uint32_t)t->vocab_size);
    put_le32(header + 12, (uint32_t)t->eot_token);
    FILE *f = output_open(path);
    fwriteCheck(header, 1, sizeof(header), f);
    for (int id = 0; id < t->vocab_size; id++) {
        size_t len;
        const uint8_t *tok = tokenizer_token(t, id, &len);
        uint8_t len8 = (uint8_t)len;  // fits: the loader rejects tokens over 255 bytes
        fwriteCheck(&len8, 1, 1, f);
        fwriteCheck(tok, 1, len, f);
    }
    output_close(f);
}

// ----------------------------------------------------------------------------
// the program: options and the two modes

__attribute__((noreturn)) static void bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "Error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nHINT: ./data/tokenizer -h lists every option\n");
    exit(EXIT_FAILURE);
}

typedef struct {
    const char *input_path;      // -i
    const char *output;          // -o: prefix, or the exact file with -e
    long val_tokens;             // -v
    const char *tokenizer_bin;   // -t: "" to skip; NULL: the default (GPT-2's only)
    const char *gpt2_dir;        // -g: GPT-2's folder, or a tokenizer file
    int encode_mode;             // -e
    int jsonl;                   // -j
    int allow_special;           // -s
    const char *print_text;      // -p
    const char *decode_ids;      // -d
} Options;

void options_default(Options *o) {
    o->input_path = "data/tinyshakespeare/input.txt";
    o->output = "data/tinyshakespeare/tiny_shakespeare";
    o->val_tokens = 32768;
    o->tokenizer_bin = NULL;
    o->gpt2_dir = "data/gpt2";
    o->encode_mode = 0;
    o->jsonl = 0;
    o->allow_special = 0;
    o->print_text = NULL;
    o->decode_ids = NULL;
}
#define DEFAULT_TOKENIZER_BIN "data/gpt2_tokenizer.bin"

// The tokenizer of -g, described in one line
static void open_tokenizer(Tokenizer *t, const char *path) {
    tokenizer_init(t, path);
    if (t->merge_key == NULL) {
        printf("tokenizer: %d tokens from %s: 256 bytes + %d merges + <|endoftext|> (id %d); Unicode %s tables\n",
               t->vocab_size, path, t->num_merges, t->eot_token, UNICODE_TABLES_VERSION);
    } else {
        printf("tokenizer: %d tokens and %d merges from %s; Unicode %s tables\n", t->vocab_size, t->num_merges, path, UNICODE_TABLES_VERSION);
    }
}

// Does one whole run: load, encode, check, write everything as .tmp, then rename it all.
// Every problem with the input is found before the first output file is opened.
void tokenize_file(const Options *o) {
    Tokenizer t;
    struct stat st;
    int is_file = stat(o->gpt2_dir, &st) == 0 && S_ISREG(st.st_mode);
    const char *tokenizer_bin = o->tokenizer_bin != NULL ? o->tokenizer_bin : is_file ? "" : DEFAULT_TOKENIZER_BIN;
    if (is_file && tokenizer_bin[0] != '\0') { // (llm.c's decode table: GPT-2's, one byte per token's length)
        bad_usage("-t writes GPT-2's decoding table (llm.c's tokenizer.bin); a tokenizer file (%s) is its own", o->gpt2_dir);
    }
    open_tokenizer(&t, o->gpt2_dir);
    // where a document starts: <|endoftext|> (GPT-2's, SmolLM2's, Qwen2's), else the start token (Llama 3's)
    int sep = tokenizer_find(&t, "<|endoftext|>");
    if (sep < 0) { sep = t.bos_token >= 0 ? t.bos_token : t.eot_token; }
    size_t len;
    const char *hint = o->jsonl ? "-i names the JSON lines file to tokenize" : "-i names the text file to tokenize";
    uint8_t *text = read_whole_file(o->input_path, &len, hint);
    if (len == 0) { die_file(o->input_path, hint, "the file is empty"); }

    double t0 = wall_seconds();
    int32_t *ids = (int32_t *)mallocCheck((tokenizer_max_ids(&t, len) + len / 2 + 1) * sizeof(int32_t));
    size_t num = o->jsonl ? encode_jsonl(&t, o->input_path, text, len, o->allow_special, sep, ids)
               : o->encode_mode ? tokenizer_encode(&t, text, len, o->allow_special, ids)
                                : encode_sections(&t, text, len, o->allow_special, sep, ids);
    double seconds = wall_seconds() - t0;
    size_t sep_len;
    const uint8_t *sep_text = tokenizer_token(&t, sep, &sep_len);
    printf("encoded %s: %zu bytes -> %zu tokens in %.4f s (%.1f MB/s)%s%s%.*s%s\n", o->input_path, len, num,
           seconds, (double)len / 1e6 / (seconds > 0 ? seconds : 1e-9),
           o->allow_special ? ", special tokens' text as special tokens" : "",
           o->encode_mode && !o->jsonl ? "" : ", each document after ", o->encode_mode && !o->jsonl ? 0 : (int)sep_len,
           (const char *)sep_text, "");
    if (num == 0) { die_file(o->input_path, hint, "holds no text to encode"); }

    char val_path[MAX_PATH_LEN], train_path[MAX_PATH_LEN];
    if (o->encode_mode) {
        write_shard(o->output, ids, num, t.vocab_size);
    } else {
        if (num <= (size_t)o->val_tokens) {
            die_file(o->input_path, "lower the validation split with -v, or use -e for one shard",
                     "gives %zu tokens, but the validation split alone takes %ld and training needs at least 1",
                     num, o->val_tokens);
        }
        path_concat(val_path, o->output, "_val.bin");
        path_concat(train_path, o->output, "_train.bin");
        write_shard(val_path, ids, (size_t)o->val_tokens, t.vocab_size);
        write_shard(train_path, ids + o->val_tokens, num - (size_t)o->val_tokens, t.vocab_size);
    }
    if (tokenizer_bin[0] != '\0') { write_tokenizer_bin(&t, tokenizer_bin); }
    output_commit_all();

    int wide = t.vocab_size > 65536;
    if (o->encode_mode) {
        printf("wrote %s (%zu tokens%s)\n", o->output, num, wide ? ", uint32 ids" : "");
    } else {
        printf("wrote %s (%ld tokens%s)\n", val_path, o->val_tokens, wide ? ", uint32 ids" : "");
        printf("wrote %s (%zu tokens%s)\n", train_path, num - (size_t)o->val_tokens, wide ? ", uint32 ids" : "");
    }
    if (tokenizer_bin[0] != '\0') { printf("wrote %s (%d tokens)\n", tokenizer_bin, t.vocab_size); }
    free(ids);
    free(text);
    tokenizer_free(&t);
}

#ifndef TESTING

// A token's bytes as printable text: control characters and bytes that are no UTF-8 of
// their own escaped (\n, \xNN)
static void print_piece(const uint8_t *b, size_t len) {
    for (size_t k = 0; k < len;) {
        uint32_t cp;
        size_t n = utf8_decode(b + k, len - k, &cp);
        if (n == 0) { printf("\\x%02X", b[k]); k++; continue; }
        if (cp == '\n') { printf("\\n"); }
        else if (cp == '\t') { printf("\\t"); }
        else if (cp < 0x20 || cp == 0x7F) { printf("\\x%02X", (unsigned)cp); }
        else { fwrite(b + k, 1, n, stdout); }
        k += n;
    }
}

// -p: a text's tokens, with the start token where the tokenizer adds one (Llama 3's), as
// Hugging Face's tokenizer(text) gives them; -s lets the text name special tokens
static void print_tokens(const Options *o) {
    Tokenizer t;
    open_tokenizer(&t, o->gpt2_dir);
    size_t len = strlen(o->print_text);
    int32_t *ids = (int32_t *)mallocCheck((tokenizer_max_ids(&t, len) + 2) * sizeof(int32_t));
    size_t n = 0;
    if (t.add_bos) { ids[n++] = t.bos_token; }
    n += tokenizer_encode(&t, (const uint8_t *)o->print_text, len, o->allow_special, ids + n);
    printf("%zu tokens:", n);
    for (size_t i = 0; i < n; i++) {
        size_t piece_len;
        const uint8_t *piece = tokenizer_token(&t, ids[i], &piece_len);
        printf(" %d:", ids[i]);
        print_piece(piece, piece_len);
    }
    printf("\nids: ");
    for (size_t i = 0; i < n; i++) { printf("%s%d", i ? "," : "", ids[i]); }
    printf("\n");
    free(ids);
    tokenizer_free(&t);
}

// -d: the text of token ids ("15496,995" or "15496 995"), to stdout as it is
static void decode_ids(const Options *o) {
    Tokenizer t;
    open_tokenizer(&t, o->gpt2_dir);
    size_t cap = strlen(o->decode_ids) / 2 + 2, n = 0;
    int32_t *ids = (int32_t *)mallocCheck(cap * sizeof(int32_t));
    for (const char *p = o->decode_ids; *p != '\0';) {
        while (*p == ' ' || *p == ',') { p++; }
        if (*p == '\0') { break; }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= t.vocab_size) { bad_usage("-d: '%.20s' is not a token id of this tokenizer", p); }
        ids[n++] = (int32_t)v;
        p = end;
    }
    size_t max = t.max_token_len > 64 ? t.max_token_len : 64, out_cap = n * (max + 16) + 1;
    uint8_t *text = (uint8_t *)mallocCheck(out_cap);
    size_t len = tokenizer_decode(&t, ids, n, text, out_cap);
    fwrite(text, 1, len, stdout);
    printf("\n");
    free(text);
    free(ids);
    tokenizer_free(&t);
}

static void usage(FILE *stream) {
    Options d;
    options_default(&d);
    fprintf(stream,
        "Usage: ./data/tokenizer [options]\n"
        "Byte-level BPE (GPT-2's, identical to tiktoken's gpt2 encoding; or a tokenizer file of ./convert:\n"
        "SmolLM2, Llama 3, Qwen2), writing llm.c token shards, or printing a text's tokens.\n"
        "Default mode: split the text at \"\\n\\n\" into sections, write [<|endoftext|>] + tokens of each\n"
        "section (with its \"\\n\\n\"), the first -v tokens to PREFIX_val.bin and the rest to PREFIX_train.bin.\n"
        "Options:\n"
        "  -i <path>  input text file (default %s)\n"
        "  -o <path>  output prefix; with -e the exact output file (default %s)\n"
        "  -v <int>   number of validation tokens, at least 1; unused with -e (default %ld)\n"
        "  -t <path>  also write GPT-2's decoding table (llm.c's tokenizer.bin) here; -t '' skips it\n"
        "             (default %s with GPT-2's tokenizer; nothing with a tokenizer file)\n"
        "  -g <path>  the tokenizer: the folder of GPT-2's encoder.json and vocab.bpe, or a tokenizer file\n"
        "             (./convert writes NAME_tokenizer.bin beside a model) (default %s)\n"
        "  -j         the input is JSON lines {\"text\": ...}, one document each (default off)\n"
        "  -e         encode mode: the whole file as one string (no sections, no <|endoftext|>) into one\n"
        "             shard at -o (default off)\n"
        "  -s         special tokens' text in the input (<|endoftext|>, <|im_start|>, ...) becomes the\n"
        "             special token; otherwise it is ordinary text (default off)\n"
        "  -p <text>  print the text's tokens (id:piece) and ids, as the model's tokenizer makes them; no files\n"
        "  -d <ids>   print the text of token ids (\"15496,995\"); no files\n"
        "  -h         print this help and exit\n"
        "Shards hold uint16 ids (version 1) for up to 65536 tokens, else uint32 (version 2), as llm.c's.\n",
        d.input_path, d.output, d.val_tokens, DEFAULT_TOKENIZER_BIN, d.gpt2_dir);
}

int main(int argc, char **argv) {
    Options o;
    options_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0' || a[2] != '\0') { bad_usage("unknown argument '%s'", a); }
        char flag = a[1];
        // the flags without a value
        if (flag == 'h') { usage(stdout); return 0; }
        if (flag == 'e') { o.encode_mode = 1; continue; }
        if (flag == 's') { o.allow_special = 1; continue; }
        if (flag == 'j') { o.jsonl = 1; continue; }
        // every other flag takes the next argument as its value
        if (!strchr("iovtgpd", flag)) { bad_usage("unknown option '%s'", a); }
        if (i + 1 >= argc) { bad_usage("option '%s' needs a value", a); }
        const char *value = argv[++i];
        if (flag == 'i') { o.input_path = value; }
        else if (flag == 'o') { o.output = value; }
        else if (flag == 't') { o.tokenizer_bin = value; }
        else if (flag == 'g') { o.gpt2_dir = value; }
        else if (flag == 'p') { o.print_text = value; }
        else if (flag == 'd') { o.decode_ids = value; }
        else {  // -v: a whole number >= 1; strtol alone would accept "12abc" or ""
            char *end;
            errno = 0;
            long v = strtol(value, &end, 10);
            if (errno != 0 || end == value || *end != '\0' || v < 1 || v > INT32_MAX) {
                bad_usage("-v needs a whole number of tokens, at least 1, got '%s'", value);
            }
            o.val_tokens = v;
        }
    }
    if (o.input_path[0] == '\0' || o.output[0] == '\0' || o.gpt2_dir[0] == '\0') {
        bad_usage("%s", "-i, -o and -g need a non-empty value");
    }
    if (o.print_text != NULL && o.decode_ids != NULL) { bad_usage("%s", "-p (print a text's tokens) and -d (decode ids): one at a time"); }
    if (o.print_text != NULL) { print_tokens(&o); return 0; }
    if (o.decode_ids != NULL) { decode_ids(&o); return 0; }
    if (o.jsonl && o.encode_mode) { bad_usage("%s", "-j (documents from JSON lines) and -e (one string): one or the other"); }
    tokenize_file(&o);
    return 0;
}

#endif // TESTING
