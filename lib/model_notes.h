// lib/model_notes.h: what a model file says beyond its shapes and weights: where the model
// came from, and how its makers say to sample from it. Both of our model files (llm.c's
// GPT-2 checkpoint and our Llama-family file) start with a header of 256 int32 whose first
// fields are the shapes (see each reader); the notes live further on, where those readers
// look at nothing and older files hold zeros (no notes):
//   [64] which notes are there (NOTE_* bits; 0: none)
//   [65] temperature (float bits)  [66] top-k  [67] top-p (float bits)
//   [68] repetition penalty (float bits)  [69] min-p (float bits)
//   [70] do_sample (0 or 1, with NOTE_DO_SAMPLE)
//   [71] how many end tokens (1..NOTE_MAX_END)  [72..79] their ids
//   [128..255] the origin: 512 bytes of UTF-8, NUL-terminated and NUL-padded: the Hugging
//              Face folder the model was converted from, as ./convert was given it
// ./convert fills the sampling notes from a Hugging Face folder's generation_config.json
// (what transformers' generate() reads: the model's makers' recommended settings) and
// writes them back into an export; ./infer uses them unless a flag says otherwise;
// ./finetune_lora names the origin in an adapter's base_model_name_or_path, as PEFT expects.
#ifndef LIB_MODEL_NOTES_H
#define LIB_MODEL_NOTES_H
#include "utils.h"
#include "json.h"

enum {
    NOTE_TEMPERATURE = 1, NOTE_TOP_K = 2, NOTE_TOP_P = 4, NOTE_REPETITION_PENALTY = 8, NOTE_MIN_P = 16,
    NOTE_DO_SAMPLE = 32, NOTE_END_TOKENS = 64, NOTE_ALL = 127
};
#define NOTE_MAX_END 8
#define NOTE_ORIGIN_BYTES 512
#define NOTES_FIELD 64   // the header's first field of notes
#define ORIGIN_FIELD 128 // the header's field where the origin starts

typedef struct {
    int has;                  // NOTE_* bits: what the notes say
    float temperature;        // > 0; 0 is said as do_sample false
    int top_k;                // 0: all tokens
    float top_p;              // (0, 1]
    float repetition_penalty; // > 0; 1: none
    float min_p;              // [0, 1]; 0: none
    int do_sample;            // 0: greedy, whatever the temperature says
    int num_end;              // generation stops at any of these
    int end_tokens[NOTE_MAX_END];
    char origin[NOTE_ORIGIN_BYTES]; // "" unknown
} ModelNotes;

static inline int note_float_bits(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float note_bits_float(int i) { float f; memcpy(&f, &i, 4); return f; }

// the notes into a header about to be written (NULL: none)
static inline void model_notes_put(int header[256], const ModelNotes *n) {
    if (n == NULL) { return; }
    header[NOTES_FIELD] = n->has;
    header[NOTES_FIELD + 1] = note_float_bits(n->temperature);
    header[NOTES_FIELD + 2] = n->top_k;
    header[NOTES_FIELD + 3] = note_float_bits(n->top_p);
    header[NOTES_FIELD + 4] = note_float_bits(n->repetition_penalty);
    header[NOTES_FIELD + 5] = note_float_bits(n->min_p);
    header[NOTES_FIELD + 6] = n->do_sample;
    header[NOTES_FIELD + 7] = n->num_end;
    for (int i = 0; i < n->num_end && i < NOTE_MAX_END; i++) { header[NOTES_FIELD + 8 + i] = n->end_tokens[i]; }
    memcpy(header + ORIGIN_FIELD, n->origin, NOTE_ORIGIN_BYTES);
}

// Whether notes hold values that make sense (V: the model's vocabulary); 0, with why in err, if not
static inline int model_notes_check(const ModelNotes *n, int V, char *err, size_t err_size) {
    const char *bad = NULL;
    if ((n->has & ~NOTE_ALL) != 0) { bad = "set of flags"; }
    else if ((n->has & NOTE_TEMPERATURE) && !(n->temperature >= 0.0f && n->temperature <= 100.0f)) { bad = "temperature"; }
    else if ((n->has & NOTE_TOP_K) && n->top_k < 0) { bad = "top-k"; }
    else if ((n->has & NOTE_TOP_P) && !(n->top_p > 0.0f && n->top_p <= 1.0f)) { bad = "top-p"; }
    else if ((n->has & NOTE_REPETITION_PENALTY) && !(n->repetition_penalty > 0.0f && n->repetition_penalty <= 100.0f)) { bad = "repetition penalty"; }
    else if ((n->has & NOTE_MIN_P) && !(n->min_p >= 0.0f && n->min_p <= 1.0f)) { bad = "min-p"; }
    else if ((n->has & NOTE_DO_SAMPLE) && n->do_sample != 0 && n->do_sample != 1) { bad = "do_sample"; }
    else if ((n->has & NOTE_END_TOKENS) && (n->num_end < 1 || n->num_end > NOTE_MAX_END)) { bad = "the number of end tokens"; }
    for (int i = 0; bad == NULL && (n->has & NOTE_END_TOKENS) && i < n->num_end; i++) {
        if (n->end_tokens[i] < 0 || n->end_tokens[i] >= V) { bad = "an end token outside the vocabulary"; }
    }
    if (bad == NULL && memchr(n->origin, '\0', NOTE_ORIGIN_BYTES) == NULL) { bad = "an origin without its end"; }
    if (bad != NULL) { snprintf(err, err_size, "a bad %s", bad); }
    return bad == NULL;
}

// the notes of a header just read (checked by model_notes_check)
static inline void model_notes_get(const int header[256], ModelNotes *n) {
    memset(n, 0, sizeof(*n));
    n->has = header[NOTES_FIELD];
    n->temperature = note_bits_float(header[NOTES_FIELD + 1]);
    n->top_k = header[NOTES_FIELD + 2];
    n->top_p = note_bits_float(header[NOTES_FIELD + 3]);
    n->repetition_penalty = note_bits_float(header[NOTES_FIELD + 4]);
    n->min_p = note_bits_float(header[NOTES_FIELD + 5]);
    n->do_sample = header[NOTES_FIELD + 6];
    n->num_end = header[NOTES_FIELD + 7];
    for (int i = 0; i < NOTE_MAX_END; i++) { n->end_tokens[i] = header[NOTES_FIELD + 8 + i]; }
    memcpy(n->origin, header + ORIGIN_FIELD, NOTE_ORIGIN_BYTES);
}

// The notes of a model file, read again from its header (a file the program has already
// loaded, so the header is there); exits with a message naming it if they are corrupt. A
// name that is no file (d12, llama:NAME: a new random model) has none.
static inline void model_notes_read(const char *path, int V, ModelNotes *n) {
    memset(n, 0, sizeof(*n));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) { return; }
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) { die_file(path, NULL, "file too short for a model header (256 x int32)"); }
    fclose(fp);
    model_notes_get(header, n);
    char err[160];
    if (!model_notes_check(n, V, err, sizeof(err))) { die_file(path, "./convert writes them; rewrite the file with it", "its notes (header fields %d..): %s", NOTES_FIELD, err); }
}

// Reads a Hugging Face folder's generation_config.json into n (its sampling settings and end
// tokens; any other key is not ours). No file: nothing, and 0. A file that is not what
// transformers writes: an error naming it. (One difference from transformers: its generate()
// samples only when do_sample is true, and a file that gives a temperature without do_sample
// is greedy there, with a warning; ./infer samples with it, as the file's authors evidently
// meant, unless do_sample is false.)
static inline int model_notes_from_generation_config(ModelNotes *n, const char *dir, int V) {
    char path[4096];
    format_path(path, sizeof(path), "%s/generation_config.json", dir);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) { return 0; }
    fclose(fp);
    const char *hint = "transformers' GenerationConfig.save_pretrained writes it";
    size_t len;
    char *text = (char *)read_whole_file(path, &len, hint), err[256];
    Json j;
    if (json_parse(&j, text, len, err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) { die_file(path, hint, "not a JSON object: %s", err); }
    struct { const char *key; int bit; float *value; } floats[] = {
        {"temperature", NOTE_TEMPERATURE, &n->temperature}, {"top_p", NOTE_TOP_P, &n->top_p},
        {"repetition_penalty", NOTE_REPETITION_PENALTY, &n->repetition_penalty}, {"min_p", NOTE_MIN_P, &n->min_p}};
    for (int i = 0; i < 4; i++) {
        int at = json_get(&j, 0, floats[i].key);
        double v;
        if (at < 0 || j.tokens[at].type == JSON_NULL) { continue; }
        if (json_double(&j, at, &v) != 0) { die_file(path, hint, "\"%s\" is not a number", floats[i].key); }
        *floats[i].value = (float)v;
        n->has |= floats[i].bit;
    }
    int at = json_get(&j, 0, "top_k");
    int64_t k;
    if (at >= 0 && j.tokens[at].type != JSON_NULL) {
        if (json_int64(&j, at, &k) != 0 || k < 0 || k > INT32_MAX) { die_file(path, hint, "\"top_k\" is not a count"); }
        n->top_k = (int)k;
        n->has |= NOTE_TOP_K;
    }
    at = json_get(&j, 0, "do_sample");
    if (at >= 0 && (j.tokens[at].type == JSON_TRUE || j.tokens[at].type == JSON_FALSE)) {
        n->do_sample = j.tokens[at].type == JSON_TRUE;
        n->has |= NOTE_DO_SAMPLE;
    }
    at = json_get(&j, 0, "eos_token_id"); // one id, or a list of them
    if (at >= 0 && j.tokens[at].type != JSON_NULL) {
        int count = j.tokens[at].type == JSON_ARRAY ? j.tokens[at].size : 1, item = j.tokens[at].type == JSON_ARRAY ? at + 1 : at;
        if (count > NOTE_MAX_END) {
            fprintf(stderr, "note: %s: \"eos_token_id\" lists %d end tokens; we keep the first %d\n", path, count, NOTE_MAX_END);
        }
        for (int i = 0; i < count; i++, item = j.tokens[item].next) {
            if (json_int64(&j, item, &k) != 0 || k < 0 || k >= V) { die_file(path, hint, "\"eos_token_id\" holds something that is no token id of the %d", V); }
            if (i < NOTE_MAX_END) { n->end_tokens[i] = (int)k; }
        }
        n->num_end = count < NOTE_MAX_END ? count : NOTE_MAX_END;
        if (n->num_end > 0) { n->has |= NOTE_END_TOKENS; } // (an empty list: no end tokens of its own)
    }
    json_free(&j);
    free(text);
    if (!model_notes_check(n, V, err, sizeof(err))) { die_file(path, hint, "%s setting", err); }
    return 1;
}

// The origin: where the model came from (a folder's path as given), cut to fit, between
// UTF-8 characters.
static inline void model_notes_set_origin(ModelNotes *n, const char *origin) {
    size_t len = strlen(origin);
    if (len >= NOTE_ORIGIN_BYTES) {
        len = NOTE_ORIGIN_BYTES - 1;
        while (len > 0 && ((unsigned char)origin[len] & 0xC0) == 0x80) { len--; }
    }
    memset(n->origin, 0, NOTE_ORIGIN_BYTES);
    memcpy(n->origin, origin, len);
}

// What the notes say, in one line for a report (e.g. "temperature 0.6, top-p 0.9, end tokens
// 128001 128008 128009"); "none" if nothing
static inline void model_notes_describe(const ModelNotes *n, char *out, size_t cap) {
    size_t at = 0;
    out[0] = '\0';
#define NOTE_PUT(...) do { if (at < cap) { int w = snprintf(out + at, cap - at, __VA_ARGS__); at += w > 0 ? (size_t)w : 0; } } while (0)
    if (n->has & NOTE_DO_SAMPLE) { NOTE_PUT("%sdo_sample %s", at ? ", " : "", n->do_sample ? "true" : "false"); }
    if (n->has & NOTE_TEMPERATURE) { NOTE_PUT("%stemperature %g", at ? ", " : "", n->temperature); }
    if (n->has & NOTE_TOP_K) { NOTE_PUT("%stop-k %d", at ? ", " : "", n->top_k); }
    if (n->has & NOTE_TOP_P) { NOTE_PUT("%stop-p %g", at ? ", " : "", n->top_p); }
    if (n->has & NOTE_MIN_P) { NOTE_PUT("%smin-p %g", at ? ", " : "", n->min_p); }
    if (n->has & NOTE_REPETITION_PENALTY) { NOTE_PUT("%srepetition penalty %g", at ? ", " : "", n->repetition_penalty); }
    if (n->has & NOTE_END_TOKENS) {
        NOTE_PUT("%send token%s", at ? ", " : "", n->num_end > 1 ? "s" : "");
        for (int i = 0; i < n->num_end; i++) { NOTE_PUT(" %d", n->end_tokens[i]); }
    }
#undef NOTE_PUT
    if (at == 0) { snprintf(out, cap, "none"); }
}

#endif // LIB_MODEL_NOTES_H
