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
#include "../lib/utils.h"
#include "../lib/rand.h"
#include "../lib/json.h"

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
