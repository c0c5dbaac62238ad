/*
test_infer.c: infer.c against transformers.

The reference (dev/reference/infer_reference.py) built random GPT2LMHeadModels in
transformers, saved them with save_pretrained (F32, BF16 and F16 copies of one model,
V=300, L=2, NH=4, C=64, maxT=128) and wrote, for 4 prompts, 64 greedy tokens and the float64
logits at every position of prompt + those tokens. It also loaded our export of
fixtures/gpt2_tiny_model.bin back in transformers and wrote its logits. infer.c reads only
checkpoints: make converts the three folders with ./convert into build/ first (test_convert.c
checks the conversion itself, bit for bit). We check:
  - the forward pass: prefill of all positions against transformers' logits, each dtype
  - the KV cache: decoding token by token gives the same logits as recomputing the whole
    sequence (prefill), at every step; chunked prefill and a batch of prompts of different
    lengths give the same as one prompt alone
  - greedy generation: the same 64 tokens as transformers (fp32)
  - our checkpoint against transformers on our export of it
  - sampling: top-k / top-p keep exactly the right tokens of hand-made distributions,
    temperature reshapes them, the draw follows the probabilities, a seed reproduces
  - stops: <|endoftext|>, a stop string (never printed, also when streamed), the length
  - bad input: broken checkpoints and tokenizer files, a folder where a checkpoint belongs:
    the loaders exit with a message naming the file (run in a child)
The whole test also runs under AddressSanitizer + UBSan (make test_infer_asan).

    make test_infer && ./test_infer          (make reference regenerates the fixtures)

Tolerances: the reference is float64; our differences are fp32 rounding. Logits are
judged on their tensor's scale (atol relative to the largest |ref|), as in test_gpt2.c;
the values are about 10x the largest errors measured (printed).
*/
#define TESTING
#include "infer.c"
#include <sys/wait.h>

// --- begin shared-copy: gpt2-test-compare ---
typedef struct {
    const char *what;
    float rtol; // relative to the entry
    float atol; // relative to the largest |ref| of the tensor
} Tolerance;

static int num_passed = 0, num_failed = 0;

static void record(int ok) {
    if (ok) { num_passed++; } else { num_failed++; }
}

// A sampled tensor from the fixture: count values at flat indices j*stride.
typedef struct {
    int64_t numel, stride, count;
    float *values;
} Sampled;

// Compare ours[index(j * stride)] with the sampled reference values. `map`
// translates a flat index of the reference's layout to ours (the logits differ:
// (B,T,V) there, (B,T,Vp) here); NULL means identical layouts.
static void check_tensor(const char *name, const float *ours, const Sampled *ref, Tolerance tol,
                         size_t (*map)(size_t, const void *), const void *map_ctx) {
    float max_ref = 0.0f;
    for (int64_t j = 0; j < ref->count; j++) { max_ref = fmaxf(max_ref, fabsf(ref->values[j])); }
    float max_abs = 0.0f, max_rel = 0.0f;
    int64_t bad = 0;
    for (int64_t j = 0; j < ref->count; j++) {
        size_t idx = (size_t)(j * ref->stride);
        float a = ours[map != NULL ? map(idx, map_ctx) : idx], b = ref->values[j];
        float err = fabsf(a - b);
        if (!(err <= tol.atol * max_ref + tol.rtol * fabsf(b))) { bad++; } // also catches NaN
        if (!(err <= max_abs)) { max_abs = err; }
        float rel = err / fmaxf(fabsf(b), 1e-30f);
        if (fabsf(b) > 1e-3f * max_ref && !(rel <= max_rel)) { max_rel = rel; } // rel. error of non-tiny entries
    }
    printf("%-9s %9lld %10.3e %10.3e %10.3e  ", name, (long long)ref->count, max_ref, max_abs, max_rel);
    for (int64_t j = 0; j < 2 && j < ref->count; j++) {
        size_t idx = (size_t)(j * ref->stride);
        printf("%+.6e/%+.6e ", ours[map != NULL ? map(idx, map_ctx) : idx], ref->values[j]);
    }
    printf("%s\n", bad == 0 ? "OK" : "NOT OK");
    if (bad != 0) { printf("          %lld of %lld entries outside the tolerance\n", (long long)bad, (long long)ref->count); }
    record(bad == 0);
}

static void check_scalar(const char *name, float ours, float ref, Tolerance tol) {
    float err = fabsf(ours - ref);
    int ok = err <= tol.rtol * fabsf(ref);
    printf("%-9s ours %.7f ref %.7f abs err %.2e rel err %.2e %s\n", name, ours, ref, err, err / fabsf(ref), ok ? "OK" : "NOT OK");
    record(ok);
}
// --- end shared-copy: gpt2-test-compare ---

static const Tolerance TOL[] = {
    // measured: max abs err / max |ref| 1.2e-6 (fp32 against transformers' float64)
    {"logits", 1e-4f, 1e-5f},
    // cached decode vs prefill of the same positions: both fp32, summed in different
    // orders (matrix-vector vs GEMM); measured 1.4e-6 of max |ref|
    {"cached", 1e-4f, 1e-5f},
    // the real SmolLM2 (30 layers, fp32 against float64): measured max abs err / max |ref|
    // 1.8e-6 (6.96e-5 of 39.7); allowed: 1e-5 of max |ref| (+ 2e-5 of the entry)
    {"smollm2", 2e-5f, 1e-5f},
    // make test_infer_bf16 on SmolLM2, whose weights (Q4_1 and Q8_0 blocks dequantized) are
    // not bf16 values: rounding them (relative error up to 2^-8) moves the logits, measured
    // max abs err / max |ref| 6.0e-3 (0.24 of 39.7); allowed 1.5e-2 (a wrong or skipped block
    // of weights moves them by whole units). Every argmax and the 24-token answer still agree.
    {"smollm2 bf16", 0.0f, 1.5e-2f},
};
enum { TOL_LOGITS, TOL_CACHED, TOL_SMOLLM2, TOL_SMOLLM2_BF16 };

// ----------------------------------------------------------------------------
// the logits fixtures (layout: dev/reference/infer_reference.py)

// --- begin shared-copy: infer-test-fixture ---
#define FIXTURES "dev/reference/fixtures/"
// the reference's Hugging Face folders (fixtures/hf_tiny_*) as our checkpoints: make writes
// them with ./convert (fp32 and fp16 as version 3, bf16 as version 5)
#define CONVERTED "build/"
#define INFER_MAGIC 20261130

typedef struct {
    int P, V, G;
    int len[16];     // prompt lengths
    int *tokens[16]; // (len + G) prompt, then the greedy tokens
    float *logits[16]; // (len + G, V) transformers' logits at every position
} LogitsFixture;

static void read_logits_fixture(LogitsFixture *f, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, fp);
    if (header[0] != INFER_MAGIC || header[1] != 1 || header[2] < 1 || header[2] > 16) {
        die_file(path, "make reference regenerates dev/reference/fixtures", "not an infer logits fixture (magic %d)", header[0]);
    }
    f->P = header[2];
    f->V = header[3];
    f->G = header[4];
    for (int p = 0; p < f->P; p++) {
        f->len[p] = header[16 + p];
        size_t n = (size_t)f->len[p] + f->G;
        f->tokens[p] = (int *)mallocCheck(n * sizeof(int));
        f->logits[p] = (float *)mallocCheck(n * f->V * sizeof(float));
        freadCheck(f->tokens[p], sizeof(int), n, fp);
        freadCheck(f->logits[p], sizeof(float), n * f->V, fp);
    }
    fcloseCheck(fp);
}

static void free_logits_fixture(LogitsFixture *f) {
    for (int p = 0; p < f->P; p++) { free(f->tokens[p]); free(f->logits[p]); }
}

static void check_rows(const char *name, const float *ours, const float *ref, size_t n, Tolerance tol) {
    Sampled s = {(int64_t)n, 1, (int64_t)n, (float *)ref};
    check_tensor(name, ours, &s, tol, NULL, NULL);
}

static void check(const char *name, int ok, const char *detail) {
    printf("%-40s %s%s%s\n", name, ok ? "OK" : "NOT OK", detail[0] ? ": " : "", detail);
    record(ok);
}
// --- end shared-copy: infer-test-fixture ---

// rows of logits (N, Vp) -> (N, V), the fixture's layout
static float *unpad(const float *logits, int N, int V, int Vp) {
    float *out = (float *)mallocCheck((size_t)N * V * sizeof(float));
    for (int n = 0; n < N; n++) { memcpy(out + (size_t)n * V, logits + (size_t)n * Vp, V * sizeof(float)); }
    return out;
}

// All positions of tokens[0..T) of sequence 0 in one prefill; logits of every row: (T, V).
static float *prefill_all(GPT2 *model, const int *tokens, int T) {
    int *seq = (int *)calloc((size_t)T, sizeof(int)), *pos = (int *)calloc((size_t)T, sizeof(int));
    for (int t = 0; t < T; t++) { pos[t] = t; }
    gpt2_allocate_cache(model, 1, T);
    gpt2_allocate_rows(model, T, T);
    gpt2_forward(model, tokens, seq, pos, T, pos, T, 0); // logit rows 0..T-1 = pos
    float *out = unpad(model->logits, T, model->config.vocab_size, model->config.padded_vocab_size);
    free(seq);
    free(pos);
    return out;
}

// The prompt tokens[0..len) in one prefill, then one token per step from the cache:
// the logits after each position, (T, V) for positions len-1 .. T-1 at rows len-1 ...
static float *decode_all(GPT2 *model, const int *tokens, int len, int T) {
    float *out = (float *)mallocCheck((size_t)T * model->config.vocab_size * sizeof(float));
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int *seq = (int *)calloc((size_t)T, sizeof(int)), *pos = (int *)calloc((size_t)T, sizeof(int));
    for (int t = 0; t < T; t++) { pos[t] = t; }
    gpt2_allocate_cache(model, 1, T);
    gpt2_allocate_rows(model, len, len);
    gpt2_forward(model, tokens, seq, pos, len, pos, len, 0);
    for (int t = 0; t < len; t++) { memcpy(out + (size_t)t * V, model->logits + (size_t)t * Vp, V * sizeof(float)); }
    for (int t = len; t < T; t++) {
        int zero = 0;
        gpt2_forward(model, tokens + t, seq, pos + t, 1, &zero, 1, 0);
        memcpy(out + (size_t)t * V, model->logits, V * sizeof(float));
    }
    free(seq);
    free(pos);
    return out;
}

// ----------------------------------------------------------------------------
// a LoRA adapter applied unmerged (-L) against PEFT

// --- begin shared-copy: infer-test-lora-fixture ---
// dev/reference/lora_reference.py's fixture at path: its tokens (rows of *T), and PeftModel's
// float64 logits (logits0, 2 x *T x *V, as floats) of its first two rows;
// a file that is not such a fixture exits with its name
static void read_lora_fixture(const char *path, int **tokens, float **ref, int *T, int *V) {
    SafeTensors st;
    safetensors_open(&st, path, "python dev/reference/lora_reference.py regenerates it");
    const StTensor *tt = safetensors_find(&st, "tokens"), *tl = safetensors_find(&st, "logits0");
    if (tt == NULL || tl == NULL || strcmp(tt->dtype, "I32") != 0 || tt->ndim != 2 || tl->ndim != 3 || tl->shape[0] != 2 ||
        tl->shape[1] != tt->shape[1]) {
        die_file(path, NULL, "no I32 tokens (B, T) and logits0 (2, T, V)");
    }
    *T = (int)tt->shape[1];
    *V = (int)tl->shape[2];
    size_t n_tokens = (size_t)tt->shape[0] * *T, n_logits = (size_t)(tl->end - tl->begin) / tl->element_bytes;
    *tokens = (int *)mallocCheck(n_tokens * sizeof(int));
    *ref = (float *)mallocCheck(n_logits * sizeof(float));
    void *buf = mallocCheck(n_logits * 8);
    FILE *fp = fopenCheck(path, "rb");
    if (fseeko(fp, (off_t)(st.data_start + tt->begin), SEEK_SET) != 0 || fread(*tokens, sizeof(int), n_tokens, fp) != n_tokens) {
        die_file(path, NULL, "cannot read tokens");
    }
    st_read_floats(fp, &st, tl, *ref, buf, path);
    fcloseCheck(fp);
    free(buf);
    safetensors_free(&st);
}
// --- end shared-copy: infer-test-lora-fixture ---

// Rows 0 and 1 of tokens (rows of T) as two sequences in one pass: 2T rows (at T = 20,
// beyond MATVEC_MAX_ROWS: the GEMM's path), logits of every row (2T, V)
static float *prefill_two(GPT2 *model, const int *tokens, int T) {
    int N = 2 * T, *seq = (int *)mallocCheck((size_t)N * sizeof(int)), *pos = (int *)mallocCheck((size_t)N * sizeof(int));
    int *rows = (int *)mallocCheck((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) { seq[n] = n / T; pos[n] = n % T; rows[n] = n; }
    gpt2_allocate_cache(model, 2, T);
    gpt2_allocate_rows(model, N, N);
    gpt2_forward(model, tokens, seq, pos, N, rows, N, 0);
    float *out = unpad(model->logits, N, model->config.vocab_size, model->config.padded_vocab_size);
    free(seq); free(pos); free(rows);
    return out;
}

// dev/reference/lora_reference.py's fixtures: a tiny model of each family with a PEFT
// adapter (lora_NAME/, its B not zero) and PeftModel's float64 logits (logits0) on the
// first two rows of `tokens`. The adapter applied unmerged gives them, in one pass (GEMM)
// and decoded token by token from the cache (matrix-vector); turned off, the base model's
// logits, bit for bit.
static void test_lora(const char *model_path, const char *name) {
    char dir[256], path[256], label[128];
    snprintf(dir, sizeof(dir), FIXTURES "lora_%s", name);
    snprintf(path, sizeof(path), FIXTURES "lora_%s.safetensors", name);
    printf("\n%s + %s (unmerged) against PEFT (%s)\n", model_path, dir, path);
    int *tokens, T, ref_V;
    float *ref;
    read_lora_fixture(path, &tokens, &ref, &T, &ref_V);

    GPT2 model;
    gpt2_build(&model, model_path, 0);
    int V = model.config.vocab_size;
    check("fixture's vocabulary is the model's", ref_V == V, "");
    if (ref_V != V) { gpt2_free(&model); free(tokens); free(ref); return; }
    float *base = prefill_two(&model, tokens, T);
    model_adapter_load(&model, dir);
    float *with = prefill_two(&model, tokens, T);
    snprintf(label, sizeof(label), "%s: 2 x %d rows in one pass", name, T);
    check_rows(label, with, ref, (size_t)2 * T * V, TOL[TOL_LOGITS]);
    for (int b = 0; b < 2; b++) {
        float *decoded = decode_all(&model, tokens + (size_t)b * T, 1, T);
        snprintf(label, sizeof(label), "%s: sequence %d decoded from the cache", name, b);
        check_rows(label, decoded, ref + (size_t)b * T * V, (size_t)T * V, TOL[TOL_CACHED]);
        free(decoded);
    }
    int moved = 0;
    for (size_t i = 0; i < (size_t)2 * T * V && !moved; i++) { moved = fabsf(with[i] - base[i]) > 1e-3f; }
    check("the adapter changes the logits", moved, "");
    model_adapter_on(&model, 0);
    float *off = prefill_two(&model, tokens, T);
    check("adapter off: the base model's logits, bit for bit", memcmp(off, base, (size_t)2 * T * V * sizeof(float)) == 0, "");
    free(off); free(with); free(base); free(tokens); free(ref);
    gpt2_free(&model);
}

// ----------------------------------------------------------------------------
// -E's rules (eval_classify), case by case

static void test_eval_rules(void) {
    printf("\nthe evaluation's classes (-E)\n");
    char question[] = "What is the ISO 3166 two-letter code of Germany?", answer[] = "DE", deu[] = "DEU", *partial[1] = {deu};
    EvalQuestion q = {question, NULL, answer, partial, 1};
    char numeric_question[] = "What is the ISO 3166 numeric code of Germany?", numeric[] = "276";
    EvalQuestion qn = {numeric_question, NULL, numeric, NULL, 0};
    char capital_question[] = "What is the capital of Germany?", berlin[] = "Berlin";
    EvalQuestion qc = {capital_question, NULL, berlin, NULL, 0};
    char us_question[] = "What is the capital of the United States?", washington[] = "Washington, D.C.";
    EvalQuestion qw = {us_question, NULL, washington, NULL, 0};
    struct { const EvalQuestion *q; const char *reply; int ended, expect; } cases[] = {
        {&q, "The ISO 3166-1 alpha-2 code of Germany is DE.", 1, EVAL_CORRECT},
        {&q, "DE", 1, EVAL_CORRECT},
        {&q, "DE (DEU for the alpha-3 code)", 1, EVAL_CORRECT},           // the same fact in its other form beside it
        {&q, "The ISO 3166-1 alpha-2 code of Germany is DE. It is", 0, EVAL_PARTIAL}, // cut off at -n
        {&q, "It is DE or GE.", 1, EVAL_PARTIAL},                          // a hedge
        {&q, "The code of Germany is DEU.", 1, EVAL_PARTIAL},              // the other code
        {&q, "the code is de.", 1, EVAL_PARTIAL},                          // other capitals
        {&q, "It is DEU or GER.", 1, EVAL_HALLUCINATION},                  // the other code, and a wrong one
        {&q, "The ISO 3166 two-letter code of Germany is GER.", 1, EVAL_HALLUCINATION},
        {&q, "The ISO 3166 two-letter code of Germany is KENZELA.", 1, EVAL_HALLUCINATION},
        {&q, "The ISO 3166 two-letter code of Germany is 3166.", 1, EVAL_FORMAT}, // digits, and a word of the question
        {&q, "Germany is a country in Europe.", 1, EVAL_FORMAT},
        {&q, "ISO", 1, EVAL_FORMAT},                                       // the question's own word
        {&q, "", 1, EVAL_FORMAT},
        {&q, "I think A is it.", 1, EVAL_FORMAT},                          // one-letter capitals are no code
        {&q, "Die Abkürzung ist DE.", 1, EVAL_CORRECT},                    // non-ASCII letters end a word
        {&qn, "The numeric code of Germany is 276.", 1, EVAL_CORRECT},
        {&qn, "The numeric code of Germany is 280.", 1, EVAL_HALLUCINATION},
        {&qn, "It is 276 or 280.", 1, EVAL_PARTIAL},
        {&qn, "The ISO 3166 code is DE.", 1, EVAL_FORMAT},                 // no number but the question's
        {&qc, "The capital of Germany is Berlin.", 1, EVAL_CORRECT},      // "The": a sentence's capital, no answer
        {&qc, "It is Berlin, or maybe Munich.", 1, EVAL_PARTIAL},          // a second name beside it
        {&qc, "It is Berlin. Munich is bigger.", 1, EVAL_CORRECT},         // (a sentence's first word is not counted)
        {&qc, "The capital of Germany is Munich.", 1, EVAL_HALLUCINATION},
        {&qc, "The capital is berlin.", 1, EVAL_PARTIAL},                  // other capitals
        {&qc, "Germany's capital is a city.", 1, EVAL_FORMAT},             // "Germany": the question's word
        {&qw, "It is Washington, D.C., on the Potomac.", 1, EVAL_PARTIAL}, // (the Potomac: another name beside it)
        {&qw, "It is Washington, D.C.", 1, EVAL_CORRECT},                 // several words, punctuation
        {&qw, "The capital is New York.", 1, EVAL_HALLUCINATION},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int got = eval_classify(cases[k].q, cases[k].reply, cases[k].ended);
        char label[160];
        snprintf(label, sizeof(label), "\"%s\"%s: %s", cases[k].reply, cases[k].ended ? "" : " (cut off)", EVAL_CLASS_NAMES[cases[k].expect]);
        check(label, got == cases[k].expect, EVAL_CLASS_NAMES[got]);
    }
    char eta[32]; // (its progress lines: format_eta, tested with finetune_lora's)
    format_eta(eta, sizeof(eta), 6.0, 8.0, 40.0);
    check("progress: 8 of 40 questions in 6 s, \"ETA 24s\"", strcmp(eta, "ETA 24s") == 0, eta);
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
    GPT2 model;
    gpt2_build(&model, (const char *)path, 1);
    gpt2_free(&model);
}

static void load_tokenizer(const void *dir) {
    Tokenizer t;
    tokenizer_init(&t, (const char *)dir);
    tokenizer_free(&t);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopenCheck(path, "wb");
    if (n > 0 && fwrite(data, 1, n, fp) != n) { die_file(path, NULL, "write failed"); }
    fcloseCheck(fp);
}

static uint8_t *read_bytes(const char *path, size_t *n) { return read_whole_file(path, n, NULL); }

// ----------------------------------------------------------------------------
// the forward pass and the KV cache against transformers

static GenerateOptions greedy_options(int eot) {
    GenerateOptions o = {.max_new = 0, .stop_string = "", .eot_token = eot, .seed = 1,
                         .sampler = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL}, .tok = NULL, .stream = NULL};
    return o;
}

// generate from each fixture prompt (all of them in one batch if batched, else one by one)
// and compare with the fixture's greedy tokens
static void check_greedy(GPT2 *model, const LogitsFixture *f, int batched, const char *name) {
    Sequence seqs[16];
    GenerateOptions o = greedy_options(-1);
    o.max_new = f->G;
    GenerateStats stats;
    int same = 1;
    for (int p = 0; p < f->P; p++) {
        sequence_init(&seqs[p], NULL, f->tokens[p], f->len[p], f->G, model->config.max_seq_len);
        if (!batched) { generate(model, &seqs[p], 1, &o, &stats); }
    }
    if (batched) { generate(model, seqs, f->P, &o, &stats); }
    int first_diff = -1, diff_prompt = -1;
    for (int p = 0; p < f->P; p++) {
        int n = f->len[p] + f->G;
        if (seqs[p].num_tokens != n) { same = 0; }
        for (int t = f->len[p]; t < n && t < seqs[p].num_tokens; t++) {
            if (seqs[p].tokens[t] != f->tokens[p][t] && first_diff < 0) { first_diff = t - f->len[p]; diff_prompt = p; same = 0; }
        }
        sequence_free(&seqs[p]);
    }
    printf("%-40s %s", name, same ? "OK" : "NOT OK");
    if (same) { printf(": %d x %d tokens identical\n", f->P, f->G); }
    else { printf(": prompt %d differs at generated token %d\n", diff_prompt, first_diff); }
    record(same);
}

static void test_fixture(const char *path, const char *fixture) {
    printf("\n%s against %s\n", path, fixture);
    GPT2 model;
    gpt2_build(&model, path, 1);
    LogitsFixture f;
    read_logits_fixture(&f, fixture);
    int V = model.config.vocab_size;
    if (f.V != V) { printf("vocabulary %d vs fixture %d NOT OK\n", V, f.V); record(0); return; }
    printf("%-9s %9s %10s %10s %10s\n", "tensor", "entries", "max|ref|", "max abs", "max rel");
    for (int p = 0; p < f.P; p++) {
        int T = f.len[p] + f.G;
        char name[32];
        float *all = prefill_all(&model, f.tokens[p], T);
        snprintf(name, sizeof(name), "prefill%d", p);
        check_rows(name, all, f.logits[p], (size_t)T * V, TOL[TOL_LOGITS]);
        float *dec = decode_all(&model, f.tokens[p], f.len[p], T);
        snprintf(name, sizeof(name), "decode%d", p);
        check_rows(name, dec, f.logits[p], (size_t)T * V, TOL[TOL_LOGITS]);
        snprintf(name, sizeof(name), "cached%d", p); // decode against recomputing everything
        check_rows(name, dec + (size_t)f.len[p] * V, all + (size_t)f.len[p] * V, (size_t)f.G * V, TOL[TOL_CACHED]);
        free(all);
        free(dec);
    }
    // prefill in chunks of 5 rows, each attending to the cache the earlier chunks wrote
    {
        int p = f.P - 1, T = f.len[p] + f.G, V5 = 5;
        int *seq = (int *)calloc((size_t)T, sizeof(int)), *pos = (int *)calloc((size_t)T, sizeof(int));
        for (int t = 0; t < T; t++) { pos[t] = t; }
        float *chunked = (float *)mallocCheck((size_t)T * V * sizeof(float));
        gpt2_allocate_cache(&model, 1, T);
        gpt2_allocate_rows(&model, V5, V5);
        int rows[5] = {0, 1, 2, 3, 4};
        for (int t = 0; t < T; t += V5) {
            int n = T - t < V5 ? T - t : V5;
            gpt2_forward(&model, f.tokens[p] + t, seq, pos + t, n, rows, n, 0);
            for (int j = 0; j < n; j++) {
                memcpy(chunked + (size_t)(t + j) * V, model.logits + (size_t)j * model.config.padded_vocab_size, V * sizeof(float));
            }
        }
        check_rows("chunked", chunked, f.logits[p], (size_t)T * V, TOL[TOL_LOGITS]);
        free(chunked);
        free(seq);
        free(pos);
    }
    // transformers' greedy tokens come from float64 on the same weights (for BF16 and F16
    // the rounded ones, exactly what we load); its smallest top-2 gap over the 256 steps is
    // 1.4e-3 (F32), 1.9e-3 (BF16) and 2.6e-3 (F16), and our fp32 logits are within ~1e-5:
    // the tokens must be the same
    char label[64];
    snprintf(label, sizeof(label), "greedy: %d tokens as transformers'", f.G);
    check_greedy(&model, &f, 0, label);
    snprintf(label, sizeof(label), "greedy, the %d prompts as one batch", f.P);
    check_greedy(&model, &f, 1, label);
    free_logits_fixture(&f);
    gpt2_free(&model);
}

// --- begin shared-copy: smollm2-test ---
// The real SmolLM2-135M-Instruct (make smollm2: its GGUF through ./convert) against
// transformers on the same GGUF (dev/reference/smollm2_reference.py: float64, on the values
// transformers dequantizes, which are the ones our file holds): the logits of every row of
// a 54-token chat prompt and of transformers' 24 greedy tokens after it, at 1024 sampled
// columns (each row's top 8 among them), every row's argmax, and the greedy tokens.
#define SMOLLM2_MODEL "data/smollm2/SmolLM2-135M-Instruct.bin"
static void test_smollm2(Tolerance tol) {
    const char *path = FIXTURES "smollm2_logits.bin";
    printf("\n%s against %s\n", SMOLLM2_MODEL, path);
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    freadCheck(h, sizeof(int), 256, fp);
    if (h[0] != 20261201 || h[1] != 1 || h[2] < 1 || h[3] < 1 || h[4] < 1 || h[2] + h[3] > 4096 || h[4] > h[5]) {
        die_file(path, "python dev/reference/smollm2_reference.py regenerates it", "not a SmolLM2 logits fixture");
    }
    int T = h[2], G = h[3], K = h[4], V = h[5], R = T + G;
    int *tokens = (int *)mallocCheck((size_t)R * sizeof(int)), *cols = (int *)mallocCheck((size_t)K * sizeof(int));
    int *argmax = (int *)mallocCheck((size_t)R * sizeof(int));
    float *ref = (float *)mallocCheck((size_t)R * K * sizeof(float)), *gap = (float *)mallocCheck((size_t)R * sizeof(float));
    freadCheck(tokens, sizeof(int), (size_t)R, fp);
    freadCheck(cols, sizeof(int), (size_t)K, fp);
    freadCheck(ref, sizeof(float), (size_t)R * K, fp);
    freadCheck(argmax, sizeof(int), (size_t)R, fp);
    freadCheck(gap, sizeof(float), (size_t)R, fp);
    fcloseCheck(fp);
    GPT2 model;
    gpt2_build(&model, SMOLLM2_MODEL, 1);
    if (model.config.vocab_size != V) { die_file(SMOLLM2_MODEL, NULL, "%d tokens, the fixture %d", model.config.vocab_size, V); }
    // every row at once (a prefill of prompt and answer), at the sampled columns
    float *all = prefill_all(&model, tokens, R);
    float *ours = (float *)mallocCheck((size_t)R * K * sizeof(float));
    // A row's most likely token must be transformers' wherever its top two logits are more
    // than twice the error the tolerance allows apart (closer ones may swap without a bug):
    // in fp32 that is every row (the smallest gap, 0.036, against 4e-4), in infer_bf16 not
    float max_ref = 0.0f;
    for (size_t i = 0; i < (size_t)R * K; i++) { max_ref = fmaxf(max_ref, fabsf(ref[i])); }
    float bound = 2.0f * tol.atol * max_ref;
    int same_argmax = 0, asserted = 0, greedy_asserted = 1;
    float min_gap = 1e30f;
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++) { ours[(size_t)r * K + k] = all[(size_t)r * V + cols[k]]; }
        int best = 0;
        for (int v = 1; v < V; v++) { best = all[(size_t)r * V + v] > all[(size_t)r * V + best] ? v : best; }
        if (gap[r] > bound) { asserted++; same_argmax += best == argmax[r]; }
        else if (r >= T - 1 && r < R - 1) { greedy_asserted = 0; } // (a row that picks a token of the answer)
        min_gap = fminf(min_gap, gap[r]);
    }
    printf("%-9s %9s %10s %10s %10s\n", "tensor", "entries", "max|ref|", "max abs", "max rel");
    check_rows("smollm2", ours, ref, (size_t)R * K, tol);
    char detail[160];
    snprintf(detail, sizeof(detail), "%d of the %d rows whose top-2 gap is over %.3g (of %d; smallest gap %.3g)", same_argmax,
             asserted, bound, R, min_gap);
    check("smollm2: each row's most likely token", same_argmax == asserted, detail);
    // greedy decoding from the prompt through the KV cache: transformers' 24 tokens
    Sequence seq;
    GenerateOptions o = {.max_new = G, .stop_string = "", .eot_token = -1, .eot_name = NULL, .more_end = NULL, .num_more_end = 0, .seed = 1,
                         .sampler = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL}, .tok = NULL, .stream = NULL};
    GenerateStats stats;
    sequence_init(&seq, NULL, tokens, T, G, model.config.max_seq_len);
    generate(&model, &seq, 1, &o, &stats);
    int first_diff = -1;
    for (int t = T; t < R && first_diff < 0; t++) {
        if (t >= seq.num_tokens || seq.tokens[t] != tokens[t]) { first_diff = t - T; }
    }
    snprintf(detail, sizeof(detail), first_diff < 0 ? "%d tokens identical" : "differs at generated token %d", first_diff < 0 ? G : first_diff);
    if (greedy_asserted) { check("smollm2: greedy answer as transformers'", first_diff < 0, detail); }
    else { printf("smollm2: greedy answer (not checked: a top-2 gap on its way is below %.3g): %s\n", bound, detail); }
    sequence_free(&seq);
    free(ours); free(all); free(tokens); free(cols); free(argmax); free(ref); free(gap);
    gpt2_free(&model);
}
// --- end shared-copy: smollm2-test ---

// ----------------------------------------------------------------------------
// export and import

// Our forward on fixtures/gpt2_tiny_model.bin against transformers' on our export of it
// (./convert -i that -o DIR: test_convert.c checks the export still has the bytes
// transformers loaded).
// linear_forward alone, against a float64 sum on the same weights (weightX's values: in
// make test_infer_bf16, bf16 ones), packed into panels as the model's are, at shapes that do
// not divide its blocks: 1 to 33 rows (the matrix-vector path below 24 rows, in groups of 4
// and a rest; the GEMM from 24), widths that are odd, below one panel or not a multiple of
// one (a last, narrower panel), and C over several GEMM_KC blocks.
static void test_linear(void) {
    printf("\nlinear_forward against a float64 sum, weights in %s\n", WEIGHTS_TYPE);
    static const int rows[] = {1, 2, 3, 4, 5, 7, 16, 23, 24, 33, 100}, widths[][2] = {{1, 5}, {31, 9}, {33, 40}, {48, 17}, {63, 64}, {95, 3}, {576, 70}, {8200, 70}};
    uint64_t key = rng_key(5, 77);
    float worst = 0.0f;
    int bad = 0;
    for (size_t iw = 0; iw < sizeof(widths) / sizeof(widths[0]); iw++) {
        int C = widths[iw][0], OC = widths[iw][1], N = 100;
        weightX *w = (weightX *)mallocCheck((size_t)OC * C * sizeof(weightX));
        float *rows_major = (float *)mallocCheck((size_t)OC * C * sizeof(float)); // (OC, C) as loaded, weightX's values
        float *x = (float *)mallocCheck((size_t)N * C * sizeof(float)), *out = (float *)mallocCheck((size_t)N * OC * sizeof(float));
        float *scratch = (float *)mallocCheck((size_t)N * (C > OC ? C : OC) * sizeof(float));
        for (size_t i = 0; i < (size_t)OC * C; i++) { rows_major[i] = weight_value(to_weight((float)rng_normal_at(key, i))); }
        pack_linear(w, rows_major, OC, C);
        for (size_t i = 0; i < (size_t)N * C; i++) { x[i] = (float)rng_normal_at(key, (1ull << 40) + i); }
        for (size_t ir = 0; ir < sizeof(rows) / sizeof(rows[0]); ir++) {
            int n_rows = rows[ir];
            for (size_t i = 0; i < (size_t)N * OC; i++) { out[i] = NAN; } // (an output left unwritten fails)
            linear_forward(x, (Linear){w, NULL, 0}, epilogue_logits(out), scratch, n_rows, C, OC);
            for (int n = 0; n < n_rows; n++) {
                for (int o = 0; o < OC; o++) {
                    double ref = 0.0, scale = 0.0;
                    for (int i = 0; i < C; i++) {
                        double wi = rows_major[(size_t)o * C + i];
                        ref += wi * x[(size_t)n * C + i];
                        scale += fabs(wi * x[(size_t)n * C + i]);
                    }
                    // fp32 sums of C products: error below C * 2^-24 * sum |products|, and
                    // far below it in practice; we allow 1e-6 of that sum (C <= 8200 here)
                    float err = (float)(fabs(out[(size_t)n * OC + o] - ref) / (scale > 0.0 ? scale : 1.0));
                    worst = err > worst ? err : worst;
                    bad += !(err <= 1e-6f);
                }
            }
        }
        free(w); free(rows_major); free(x); free(out); free(scratch);
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%d entries off; worst error %.2e of the sum of |products|", bad, worst);
    check("linear_forward: 1-100 rows, C 1..8200", bad == 0, detail);
}

// attention_forward against a float64 softmax(q k^T / sqrt(HS)) v, on shapes that do not
// divide its blocks: decode's rows (one position each: several sequences, positions 0 to
// 299, so 1 to 10 blocks of 32 and 1 to 5 parts of 64, the last one partial), a key/value
// head shared by 1, 3 or 10 query heads (more than ATT_HEADS at a time), HS 64, 72 (not a
// multiple of 16) and 136 (two tiles and a rest); and prompts (attention_prefill: its blocks
// and key tiles of 64): 40 rows at positions 100-139 (a chunk after a cached prefix: one block,
// three tiles, the last one past some of its rows) and 150 at 150-299 (three blocks, the last
// one partial, five tiles).
// Decode's rows also give the same bits on 1 and 3 threads, and each alone as in the batch.
static void test_attention(void) {
    printf("\nattention_forward against a float64 softmax\n");
    static const int shapes[][3] = {{12, 12, 64}, {9, 3, 64}, {20, 2, 72}, {6, 3, 136}}; // NH, NKV, HS
    static const int positions[][2] = {{0, 0}, {1, 31}, {2, 32}, {0, 299}, {1, 95}, {2, 7}, {1, 200}}; // (seq, pos) of decode's rows
    uint64_t key = rng_key(7, 11);
    int bad = 0, B = 3, S = 300, same_bits = 0, tries = 0;
    float worst = 0.0f;
    for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++) {
        int NH = shapes[is][0], NKV = shapes[is][1], HS = shapes[is][2];
        size_t Q = (size_t)NH * HS, KV = (size_t)NKV * HS, cache = (size_t)B * S * KV;
        float *k = (float *)mallocCheck(cache * sizeof(float)), *v = (float *)mallocCheck(cache * sizeof(float));
        float *q = (float *)mallocCheck(150 * Q * sizeof(float)), *out = (float *)mallocCheck(150 * Q * sizeof(float));
        for (size_t i = 0; i < cache; i++) { k[i] = 2.0f * (float)rng_normal_at(key, i); v[i] = (float)rng_normal_at(key, (1ull << 40) + i); }
        for (size_t i = 0; i < 150 * Q; i++) { q[i] = (float)rng_normal_at(key, (2ull << 40) + i); }
        for (int prompt = 0; prompt < 3; prompt++) {
            int seq[150], pos[150], N = prompt == 2 ? 150 : prompt ? 40 : (int)(sizeof(positions) / sizeof(positions[0]));
            for (int n = 0; n < N; n++) {
                seq[n] = prompt ? 1 + prompt % 2 : positions[n][0];
                pos[n] = prompt == 2 ? 150 + n : prompt ? 100 + n : positions[n][1];
            }
            for (size_t i = 0; i < (size_t)N * Q; i++) { out[i] = NAN; }
            attention_forward(out, NULL, q, k, v, seq, pos, N, S, NH, NKV, HS);
            if (!prompt) { // the same bits whatever the threads, and for a row alone
                float *again = (float *)mallocCheck((size_t)N * Q * sizeof(float));
                int threads = num_threads();
                (void)threads; // (unused without OpenMP)
                for (int t = 1; t <= 3; t += 2) {
#ifdef _OPENMP
                    omp_set_num_threads(t);
#endif
                    attention_forward(again, NULL, q, k, v, seq, pos, N, S, NH, NKV, HS);
                    same_bits += memcmp(again, out, (size_t)N * Q * sizeof(float)) == 0;
                    tries++;
                }
#ifdef _OPENMP
                omp_set_num_threads(threads);
#endif
                for (int n = 0; n < N; n++) {
                    attention_forward(again, NULL, q + (size_t)n * Q, k, v, seq + n, pos + n, 1, S, NH, NKV, HS);
                    same_bits += memcmp(again, out + (size_t)n * Q, Q * sizeof(float)) == 0;
                    tries++;
                }
                free(again);
            }
            for (int n = 0; n < N; n++) {
                for (int h = 0; h < NH; h++) {
                    const float *qh = q + (size_t)n * Q + (size_t)h * HS;
                    const float *kh = k + (size_t)seq[n] * S * KV + (size_t)(h / (NH / NKV)) * HS, *vh = v + (kh - k);
                    double scores[300], m = -INFINITY, sum = 0.0;
                    for (int t = 0; t <= pos[n]; t++) {
                        double s = 0.0;
                        for (int d = 0; d < HS; d++) { s += (double)qh[d] * kh[(size_t)t * KV + d]; }
                        scores[t] = s / sqrt((double)HS);
                        m = scores[t] > m ? scores[t] : m;
                    }
                    for (int t = 0; t <= pos[n]; t++) { scores[t] = exp(scores[t] - m); sum += scores[t]; }
                    for (int d = 0; d < HS; d++) {
                        double ref = 0.0;
                        for (int t = 0; t <= pos[n]; t++) { ref += scores[t] / sum * vh[(size_t)t * KV + d]; }
                        // fp32 against float64 on values of about 1 (weighted means of N(0, 1)):
                        // rounding leaves a few 1e-6; 1e-5 is above that, far below any wrong weight
                        float err = (float)fabs(out[(size_t)n * Q + (size_t)h * HS + d] - ref);
                        worst = err > worst ? err : worst;
                        bad += !(err <= 1e-5f);
                    }
                }
            }
        }
        free(k); free(v); free(q); free(out);
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%d values off; worst error %.2e", bad, worst);
    check("attention_forward: decode and prompt rows, groups of 1-10 heads, HS 64-136", bad == 0, detail);
    snprintf(detail, sizeof(detail), "%d of %d runs bit for bit", same_bits, tries);
    check("... decode's rows: the same bits on 1 and 3 threads, and each row alone", tries > 0 && same_bits == tries, detail);
}

// ----------------------------------------------------------------------------
// -Q: quantized weights

// linear_forward on quantized weights (nf4, fp4, q8_0; a layer cut into bands as a fused
// q/k/v is; widths that are and are not a whole number of blocks: the fast paths and the
// dequantizing one) against a float64 sum over the same dequantized weights
static void test_quant_linear(void) {
    printf("\nlinear_forward on quantized weights (-Q) against a float64 sum\n");
    static const QuantSpec specs[] = {{QUANT_NF4, 64, 1}, {QUANT_FP4, 32, 0}, {QUANT_NF4, 128, 1}, {QUANT_Q8_0, 32, 0}};
    static const int rows[] = {1, 2, 3, 4, 5, 7, 23, 24, 33, 100}, widths[][2] = {{33, 40}, {64, 17}, {96, 70}, {256, 9}, {576, 70}, {1536, 33}, {4160, 5}}; // (4160: more than 64 blocks a row)
    uint64_t key = rng_key(5, 78);
    long scales_checked = 0, scales_off = 0;
    for (size_t is = 0; is < sizeof(specs) / sizeof(specs[0]); is++) {
        float worst = 0.0f;
        int bad = 0;
        for (size_t iw = 0; iw < sizeof(widths) / sizeof(widths[0]); iw++) {
            int C = widths[iw][0], OC = widths[iw][1], N = 100, band_rows[3] = {OC / 3, OC / 3, OC - 2 * (OC / 3)};
            float *W = (float *)mallocCheck((size_t)OC * C * sizeof(float)), *deq = (float *)mallocCheck((size_t)OC * C * sizeof(float));
            float *x = (float *)mallocCheck((size_t)N * C * sizeof(float)), *out = (float *)mallocCheck((size_t)N * OC * sizeof(float));
            float *scratch = (float *)mallocCheck((size_t)N * (C > OC ? C : OC) * sizeof(float));
            for (size_t i = 0; i < (size_t)OC * C; i++) { W[i] = (float)rng_normal_at(key, i) * (i % 97 == 0 ? 8.0f : 1.0f); }
            for (size_t i = 0; i < (size_t)N * C; i++) { x[i] = (float)rng_normal_at(key, (1ull << 40) + i); }
            QuantBand bands[3];
            for (int k = 0, row = 0; k < 3; row += band_rows[k], k++) {
                band_quantize(&bands[k], specs[is].type, specs[is].blocksize, specs[is].nested, W + (size_t)row * C, band_rows[k], C);
                band_dequantize(&bands[k], deq + (size_t)row * C, 0, (size_t)band_rows[k] * C);
                if (bands[k].type != QUANT_Q8_0) { // decode's scales (quant4_scales) are quant4_absmax's, bit for bit
                    const Quant4 *q4 = &bands[k].q4;
                    for (size_t b = 0; b < q4->num_blocks; b += SCALES_AHEAD) {
                        float fast[SCALES_AHEAD];
                        int nb = q4->num_blocks - b < SCALES_AHEAD ? (int)(q4->num_blocks - b) : SCALES_AHEAD;
                        quant4_scales(fast, q4, b, nb);
                        for (int i = 0; i < nb; i++) {
                            float slow = quant4_absmax(q4, b + i);
                            scales_off += memcmp(&fast[i], &slow, sizeof(float)) != 0;
                            scales_checked++;
                        }
                    }
                }
            }
            for (size_t ir = 0; ir < sizeof(rows) / sizeof(rows[0]); ir++) {
                int n_rows = rows[ir];
                for (size_t i = 0; i < (size_t)N * OC; i++) { out[i] = NAN; } // (an output left unwritten fails)
                linear_forward(x, (Linear){NULL, bands, 3}, epilogue_logits(out), scratch, n_rows, C, OC);
                for (int n = 0; n < n_rows; n++) {
                    for (int o = 0; o < OC; o++) {
                        double ref = 0.0, scale = 0.0;
                        for (int i = 0; i < C; i++) {
                            double p = (double)deq[(size_t)o * C + i] * x[(size_t)n * C + i];
                            ref += p;
                            scale += fabs(p);
                        }
                        // as test_linear's (the blocks' sums, each times its scale, then added: a few
                        // roundings more per product, all fp32)
                        float err = (float)(fabs(out[(size_t)n * OC + o] - ref) / (scale > 0.0 ? scale : 1.0));
                        worst = err > worst ? err : worst;
                        bad += !(err <= 1e-6f);
                    }
                }
            }
            for (int k = 0; k < 3; k++) { band_free(&bands[k]); }
            free(W); free(deq); free(x); free(out); free(scratch);
        }
        char label[200], detail[160], what[96];
        quant_describe(what, sizeof(what), specs[is], "");
        snprintf(label, sizeof(label), "-Q %s: 1-100 rows, C 33..4160, 3 bands", what);
        snprintf(detail, sizeof(detail), "%d entries off; worst error %.2e of the sum of |products|", bad, worst);
        check(label, bad == 0, detail);
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%ld of %ld blocks differ", scales_off, scales_checked);
    check("4-bit decode's block scales (quant4_scales) are quant4_absmax's, bit for bit", scales_checked > 0 && scales_off == 0, detail);
}

// a tensor's bytes from a safetensors file, malloc'ed (its dtype and element count checked)
static void *read_tensor(const char *path, const char *name, const char *dtype, size_t count) {
    SafeTensors st;
    safetensors_open(&st, path, "python dev/reference/q8_0_reference.py regenerates it");
    const StTensor *t = safetensors_find(&st, name);
    if (t == NULL || strcmp(t->dtype, dtype) != 0 || (count > 0 && (size_t)(t->end - t->begin) != count * t->element_bytes)) {
        die_file(path, NULL, "no %s tensor %s of %zu values", dtype, name, count);
    }
    size_t n = (size_t)(t->end - t->begin);
    uint8_t *bytes = (uint8_t *)mallocCheck(n > 0 ? n : 1);
    FILE *fp = fopenCheck(path, "rb");
    if (fseeko(fp, (off_t)(st.data_start + t->begin), SEEK_SET) != 0 || fread(bytes, 1, n, fp) != n) { die_file(path, NULL, "cannot read %s", name); }
    fcloseCheck(fp);
    safetensors_free(&st);
    return bytes;
}
static size_t tensor_count(const char *path, const char *name) {
    SafeTensors st;
    safetensors_open(&st, path, "python dev/reference/q8_0_reference.py regenerates it");
    const StTensor *t = safetensors_find(&st, name);
    size_t n = t != NULL ? (size_t)(t->end - t->begin) / t->element_bytes : 0;
    safetensors_free(&st);
    return n;
}

// q8_0's bytes against the gguf package's quantizer (dev/reference/q8_0_reference.py): every
// code, every fp16 scale, every dequantized value; and float_to_fp16 against numpy's
static void test_q8_0_bytes(void) {
    const char *path = FIXTURES "q8_0_cases.safetensors";
    printf("\nq8_0 against gguf's quantizer (%s)\n", path);
    int bad = 0, cases = 0;
    for (int c = 0;; c++) {
        char name[64];
        snprintf(name, sizeof(name), "c%d.input", c);
        size_t n = tensor_count(path, name);
        if (n == 0) { break; }
        float *x = (float *)read_tensor(path, name, "F32", n);
        snprintf(name, sizeof(name), "c%d.qs", c);
        int8_t *qs = (int8_t *)read_tensor(path, name, "I8", n);
        snprintf(name, sizeof(name), "c%d.d", c);
        uint16_t *d = (uint16_t *)read_tensor(path, name, "F16", n / Q8_BLOCK);
        snprintf(name, sizeof(name), "c%d.dequant", c);
        float *deq = (float *)read_tensor(path, name, "F32", n), *ours = (float *)mallocCheck(n * sizeof(float));
        QuantQ8 q;
        q8_quantize(&q, x, n);
        q8_dequantize(&q, ours, 0, n);
        bad += memcmp(q.q, qs, n) != 0 || memcmp(q.d, d, n / Q8_BLOCK * sizeof(uint16_t)) != 0 || memcmp(ours, deq, n * sizeof(float)) != 0;
        q8_free(&q);
        free(x); free(qs); free(d); free(deq); free(ours);
        cases++;
    }
    char detail[96];
    snprintf(detail, sizeof(detail), "%d of %d cases differ", bad, cases);
    check("q8_0: codes, scales, dequantized, bit for bit", cases > 0 && bad == 0, detail);
    size_t n = tensor_count(path, "fp16.input");
    float *in = (float *)read_tensor(path, "fp16.input", "F32", n);
    uint16_t *expect = (uint16_t *)read_tensor(path, "fp16.output", "F16", n);
    int off = 0;
    for (size_t i = 0; i < n; i++) { off += float_to_fp16(in[i]) != expect[i]; }
    snprintf(detail, sizeof(detail), "%d of %zu differ", off, n);
    check("float_to_fp16 is numpy's float16", n > 0 && off == 0, detail);
    free(in); free(expect);
}

// --- begin shared-copy: infer-test-quantized ---
// A model quantized at load (-Q spec), with an adapter (-L, adapter not NULL), against the
// reference's logits on the same weights quantized and dequantized (fixture: tokens,
// logits0): in one pass of 2 sequences (the GEMM's path) and decoded from the cache
// (matrix-vector), both at the tolerance of logits against transformers
static void test_quantized(const char *model_path, const char *spec, const char *adapter, const char *fixture) {
    printf("\n%s -Q %s%s%s against %s\n", model_path, spec, adapter ? " -L " : "", adapter ? adapter : "", fixture);
    int *tokens, T, ref_V;
    float *ref;
    read_lora_fixture(fixture, &tokens, &ref, &T, &ref_V);
    QuantSpec blocks, head;
    char err[256], label[160];
    if (parse_quant(spec, &blocks, &head, err, sizeof(err)) != 0) { check(spec, 0, err); return; }
    GPT2 model;
    gpt2_build_quantized(&model, model_path, 0, blocks, head);
    int V = model.config.vocab_size;
    check("fixture's vocabulary is the model's", ref_V == V, "");
    if (ref_V == V) {
        if (adapter != NULL) { model_adapter_load(&model, adapter); }
        float *with = prefill_two(&model, tokens, T);
        snprintf(label, sizeof(label), "-Q %s: 2 x %d rows in one pass", spec, T);
        check_rows(label, with, ref, (size_t)2 * T * V, TOL[TOL_LOGITS]);
        for (int b = 0; b < 2; b++) {
            float *decoded = decode_all(&model, tokens + (size_t)b * T, 1, T);
            snprintf(label, sizeof(label), "-Q %s: sequence %d decoded", spec, b);
            // (against the reference, as the pass above, so at its tolerance: infer.cu's bf16
            // measured 3.6e-2 of max|ref| here on the Llama's nf4, 2.9e-2 without -Q)
            check_rows(label, decoded, ref + (size_t)b * T * V, (size_t)T * V, TOL[TOL_LOGITS]);
            free(decoded);
        }
        free(with);
    }
    free(tokens); free(ref);
    gpt2_free(&model);
}
// --- end shared-copy: infer-test-quantized ---

#ifndef WEIGHTS_BF16 // (its checkpoint's weights are fp32)
static void test_export(void) {
    printf("\nour checkpoint against transformers on our export of it\n");
    GPT2 model;
    gpt2_build(&model, FIXTURES "gpt2_tiny_model.bin", 1);
    LogitsFixture f;
    read_logits_fixture(&f, FIXTURES "infer_export.bin");
    int V = model.config.vocab_size;
    for (int p = 0; p < f.P; p++) {
        float *all = prefill_all(&model, f.tokens[p], f.len[p]);
        char name[32];
        snprintf(name, sizeof(name), "export%d", p);
        check_rows(name, all, f.logits[p], (size_t)f.len[p] * V, TOL[TOL_LOGITS]);
        free(all);
    }
    free_logits_fixture(&f);
    gpt2_free(&model);
}
#endif

// ----------------------------------------------------------------------------
// sampling on hand-made distributions

// logits = log(probs), so that softmax gives the probabilities back
static void make_logits(float *logits, const double *probs, int V) {
    for (int i = 0; i < V; i++) { logits[i] = (float)log(probs[i]); }
}

// The candidates of one setting against the expected ids and probabilities.
static void check_candidates(const char *name, const double *probs, int V, float temperature, int top_k, float top_p,
                             const int *want_ids, const double *want_probs, int want_n) {
    float logits[16], scratch[16];
    Candidate out[16];
    make_logits(logits, probs, V);
    Sampler s = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = scratch};
    int n = sample_candidates(logits, V, &s, out);
    int ok = n == want_n;
    for (int i = 0; i < n && ok; i++) { ok = out[i].id == want_ids[i] && fabs(out[i].prob - want_probs[i]) < 1e-6; }
    printf("%-40s %s: kept", name, ok ? "OK" : "NOT OK");
    for (int i = 0; i < n; i++) { printf(" %d (%.4f)", out[i].id, out[i].prob); }
    printf("\n");
    record(ok);
}

static void test_sampling(void) {
    printf("\nsampling\n");
    // a distribution listed out of order, so that sorting matters
    const double p[5] = {0.1, 0.5, 0.05, 0.2, 0.15}; // by rank: 1, 3, 4, 0, 2
    { int ids[1] = {1}; double q[1] = {1.0}; check_candidates("temperature 0: the argmax", p, 5, 0.0f, 0, 1.0f, ids, q, 1); }
    { int ids[5] = {0, 1, 2, 3, 4}; check_candidates("t=1, no filters: everything, id order", p, 5, 1.0f, 0, 1.0f, ids, p, 5); }
    { int ids[2] = {1, 3}; double q[2] = {0.5 / 0.7, 0.2 / 0.7}; check_candidates("top-k 2", p, 5, 1.0f, 2, 1.0f, ids, q, 2); }
    { int ids[4] = {1, 3, 4, 0}; double q[4] = {0.5 / 0.95, 0.2 / 0.95, 0.15 / 0.95, 0.1 / 0.95};
      check_candidates("top-k 4", p, 5, 1.0f, 4, 1.0f, ids, q, 4); }
    { int ids[2] = {1, 3}; double q[2] = {0.5 / 0.7, 0.2 / 0.7}; check_candidates("top-p 0.69: 0.5 + 0.2 reach it", p, 5, 1.0f, 0, 0.69f, ids, q, 2); }
    { int ids[3] = {1, 3, 4}; double q[3] = {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85};
      check_candidates("top-p 0.71: needs a third token", p, 5, 1.0f, 0, 0.71f, ids, q, 3); }
    { int ids[1] = {1}; double q[1] = {1.0}; check_candidates("top-p 0.4: the best alone", p, 5, 1.0f, 0, 0.4f, ids, q, 1); }
    // top-k first, then top-p of the renormalised rest (transformers' order): over
    // {0.5, 0.2, 0.15}/0.85 = {0.588, 0.235, 0.176}, p=0.8 needs two
    { int ids[2] = {1, 3}; double q[2] = {0.5 / 0.7, 0.2 / 0.7}; check_candidates("top-k 3 then top-p 0.8", p, 5, 1.0f, 3, 0.8f, ids, q, 2); }
    // temperature 2: probabilities proportional to p^(1/2)
    {
        double r[5], sum = 0.0;
        for (int i = 0; i < 5; i++) { r[i] = sqrt(p[i]); sum += r[i]; }
        for (int i = 0; i < 5; i++) { r[i] /= sum; }
        int ids[5] = {0, 1, 2, 3, 4};
        check_candidates("temperature 2: p^(1/2), renormalised", p, 5, 2.0f, 0, 1.0f, ids, r, 5);
    }
    // temperature 0.5 sharpens: the top token's probability is 0.5^2 / sum(p^2)
    {
        float logits[5], scratch[5];
        Candidate out[5];
        make_logits(logits, p, 5);
        Sampler s = {.temperature = 0.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = scratch};
        sample_candidates(logits, 5, &s, out);
        double sum = 0.0;
        for (int i = 0; i < 5; i++) { sum += p[i] * p[i]; }
        Tolerance tol = {"p", 1e-6f, 0.0f};
        check_scalar("t=0.5 p1", out[1].prob, (float)(0.25 / sum), tol);
    }
    // ties: equal probabilities keep the lower id first
    { const double u[4] = {0.25, 0.25, 0.25, 0.25}; int ids[2] = {0, 1}; double q[2] = {0.5, 0.5};
      check_candidates("ties: top-k 2 keeps the lower ids", u, 4, 1.0f, 2, 1.0f, ids, q, 2);
      int ids1[1] = {0}; double q1[1] = {1.0};
      check_candidates("ties: greedy takes the lowest id", u, 4, 0.0f, 0, 1.0f, ids1, q1, 1);
      check_candidates("top-p below 1/V: the best token", u, 4, 1.0f, 0, 0.1f, ids1, q1, 1); }
    // the draw: coins spread over [0, 1) land on each token as often as its probability
    {
        float logits[5], scratch[5];
        Candidate cands[5];
        make_logits(logits, p, 5);
        Sampler s = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = scratch};
        int counts[5] = {0};
        for (int i = 0; i < 10000; i++) { counts[sample_token(logits, 5, &s, cands, (i + 0.5f) / 10000)]++; }
        int ok = 1;
        for (int i = 0; i < 5; i++) { ok = ok && abs(counts[i] - (int)lround(p[i] * 10000)) <= 1; }
        printf("%-40s %s: %d %d %d %d %d of 10000\n", "draws follow the probabilities", ok ? "OK" : "NOT OK", counts[0],
               counts[1], counts[2], counts[3], counts[4]);
        record(ok);
        s.top_k = 2; // only 1 and 3, in the ratio 5:2
        memset(counts, 0, sizeof(counts));
        for (int i = 0; i < 7000; i++) { counts[sample_token(logits, 5, &s, cands, (i + 0.5f) / 7000)]++; }
        ok = counts[0] == 0 && counts[2] == 0 && counts[4] == 0 && abs(counts[1] - 5000) <= 1 && abs(counts[3] - 2000) <= 1;
        printf("%-40s %s: %d %d %d %d %d of 7000\n", "top-k 2 draws: only the two, 5:2", ok ? "OK" : "NOT OK", counts[0],
               counts[1], counts[2], counts[3], counts[4]);
        record(ok);
    }
}

// ----------------------------------------------------------------------------
// generation with text: seeds, stops, streaming, batches

static Sequence run_text(GPT2 *model, const Tokenizer *tok, const char *prompt, GenerateOptions o, FILE *stream) {
    int ids[256];
    int n = (int)tokenizer_encode((Tokenizer *)tok, (const uint8_t *)prompt, strlen(prompt), 1, ids);
    Sequence s;
    GenerateStats stats;
    sequence_init(&s, prompt, ids, n, o.max_new, model->config.max_seq_len);
    o.stream = stream;
    generate(model, &s, 1, &o, &stats);
    return s;
}

static void test_generation(void) {
    printf("\ngeneration (a random d1 model with GPT-2's vocabulary)\n");
    GPT2 model;
    gpt2_build(&model, "d1", 42);
    Tokenizer tok;
    tokenizer_init(&tok, "data/gpt2");
    GenerateOptions o = {.max_new = 24, .stop_string = "", .eot_token = tok.eot_token, .seed = 7,
                         .sampler = {.temperature = 1.0f, .top_k = 50, .top_p = 0.95f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL}, .tok = &tok, .stream = NULL};
    const char *prompt = "The quick brown fox";
    Sequence a = run_text(&model, &tok, prompt, o, NULL), b = run_text(&model, &tok, prompt, o, NULL);
    check("a seed reproduces the text", a.num_tokens == b.num_tokens && memcmp(a.tokens, b.tokens, a.num_tokens * sizeof(int)) == 0 &&
          strcmp(a.text, b.text) == 0, "");
    o.seed = 8;
    Sequence c = run_text(&model, &tok, prompt, o, NULL);
    check("another seed, another text", strcmp(a.text, c.text) != 0, "");
    o.seed = 7;
    check("the length limit", a.num_tokens == a.num_prompt + 24 && strcmp(a.stop, "the length limit") == 0, a.stop);
    // a stop string from the middle of the text we got: the output ends just before its
    // first occurrence, streamed or not, and the stop string is not printed
    size_t at = a.text_len / 2;
    char stop[8];
    snprintf(stop, sizeof(stop), "%.3s", a.text + at);
    const char *first = strstr(a.text, stop);
    o.stop_string = stop;
    FILE *stream = tmpfile();
    Sequence d = run_text(&model, &tok, prompt, o, stream);
    char streamed[4096] = "";
    rewind(stream);
    size_t got = fread(streamed, 1, sizeof(streamed) - 1, stream);
    streamed[got] = '\0';
    fclose(stream);
    char detail[128];
    snprintf(detail, sizeof(detail), "stop \"%s\" at byte %zu of %zu", stop, (size_t)(first - a.text), a.text_len);
    check("a stop string ends the text before it", d.done && strcmp(d.stop, "the stop string") == 0 &&
          d.text_len == (size_t)(first - a.text) && memcmp(d.text, a.text, d.text_len) == 0, detail);
    check("streamed: the same bytes, no stop string", got == d.text_len && memcmp(streamed, d.text, got) == 0, "");
    // <|endoftext|>: pretend the 5th token we generated is the end of text
    o.stop_string = "";
    o.eot_token = a.tokens[a.num_prompt + 4];
    Sequence e = run_text(&model, &tok, prompt, o, NULL);
    int k = 0; // the first occurrence of that token may be earlier than the 5th
    while (a.tokens[a.num_prompt + k] != o.eot_token) { k++; }
    check("<|endoftext|> stops, and is not kept", strcmp(e.stop, "<|endoftext|>") == 0 && e.num_tokens == e.num_prompt + k, "");
    o.eot_token = tok.eot_token;
    // a batch of prompts of different lengths gives each the text it gets alone (greedy:
    // sampling coins depend on the position in the batch)
    o.sampler.temperature = 0.0f;
    const char *prompts[3] = {"Hello", "A much longer prompt than the first one, with more tokens", "x"};
    Sequence alone[3], batch[3];
    GenerateStats stats;
    for (int i = 0; i < 3; i++) { alone[i] = run_text(&model, &tok, prompts[i], o, NULL); }
    for (int i = 0; i < 3; i++) {
        int ids[256];
        int n = (int)tokenizer_encode(&tok, (const uint8_t *)prompts[i], strlen(prompts[i]), 1, ids);
        sequence_init(&batch[i], prompts[i], ids, n, o.max_new, model.config.max_seq_len);
    }
    generate(&model, batch, 3, &o, &stats);
    int same = 1;
    for (int i = 0; i < 3; i++) {
        same = same && alone[i].num_tokens == batch[i].num_tokens &&
               memcmp(alone[i].tokens, batch[i].tokens, alone[i].num_tokens * sizeof(int)) == 0;
        sequence_free(&alone[i]);
        sequence_free(&batch[i]);
    }
    check("a batch gives each prompt its own text", same, "");
    // instruction mode: the template, as documented
    char *text = alpaca_prompt("Name a color.", "");
    check("the Alpaca template without input", strcmp(text, "Below is an instruction that describes a task. Write a response "
          "that appropriately completes the request.\n\n### Instruction:\nName a color.\n\n### Response:\n") == 0, "");
    free(text);
    text = alpaca_prompt("Translate.", "chat");
    check("... and with an input", strstr(text, "paired with an input") != NULL &&
          strstr(text, "### Instruction:\nTranslate.\n\n### Input:\nchat\n\n### Response:\n") != NULL, "");
    free(text);
    sequence_free(&a);
    sequence_free(&b);
    sequence_free(&c);
    sequence_free(&d);
    sequence_free(&e);
    tokenizer_free(&tok);
    gpt2_free(&model);
}

// ----------------------------------------------------------------------------
// bad input: the loaders, and gpt2_forward's rows, each in a child process

// a pass over a d1 model with a cache of 2 sequences x 8 positions and buffers of 4 rows,
// rows as given: 0 = fine, 1 = a position past the cache, 2 = a logit row past the pass,
// 3 = more rows than the buffers hold
static void bad_forward(const void *arg) {
    int kind = *(const int *)arg;
#ifdef _OPENMP
    omp_set_num_threads(1); // a forked child cannot use the parent's OpenMP threads: it would wait for them forever
#endif
    GPT2 model;
    gpt2_build(&model, "d1", 1);
    gpt2_allocate_cache(&model, 2, 8);
    gpt2_allocate_rows(&model, 4, 4);
    int tokens[5] = {1, 2, 3, 4, 5}, seq[5] = {0, 0, 1, 1, 1}, pos[5] = {0, 1, 0, kind == 1 ? 8 : 1, 2}, rows[1] = {kind == 2 ? 4 : 3};
    gpt2_forward(&model, tokens, seq, pos, kind == 3 ? 5 : 4, rows, 1, 0);
    gpt2_forward(&model, tokens, seq, pos, 0, NULL, 0, 0); // a pass of no rows does nothing
    gpt2_free(&model);
    fprintf(stderr, "no error\n");
    exit(EXIT_FAILURE);
}

static void load_eval(const void *path) {
    EvalQuestion *qs;
    read_eval((const char *)path, NULL, NULL, &qs);
}

// -E's file: questions read as written (the instruction and its input, the answer, the
// partial answers); a line without an answer, or with partial answers that are not strings, is
// refused with its number
static void test_eval_file(const char *tmp) {
    printf("\nthe evaluation's file (-E)\n");
    char path[600];
    snprintf(path, sizeof(path), "%s/eval.jsonl", tmp);
    const char *good = "{\"instruction\": \"Code of Germany?\", \"input\": \"\", \"answer\": \"DE\", \"partial\": [\"DEU\", \"276\"]}\n"
                       "\n"
                       "{\"instruction\": \"Its capital?\", \"input\": \"France\", \"output\": \"Paris.\", \"answer\": \"Paris\"}\r\n";
    write_bytes(path, good, strlen(good));
    EvalQuestion *qs;
    int n = read_eval(path, NULL, NULL, &qs);
    check("two questions (a blank line skipped)", n == 2, "");
    if (n == 2) {
        check("the first: its answer and two partial answers", strcmp(qs[0].answer, "DE") == 0 && qs[0].num_partial == 2 &&
              strcmp(qs[0].partial[1], "276") == 0 && strcmp(qs[0].question, "Code of Germany?") == 0, "");
        check("the second: the question is the instruction and its input", strcmp(qs[1].question, "Its capital?\n\nFrance") == 0 &&
              qs[1].num_partial == 0 && strcmp(qs[1].answer, "Paris") == 0, "");
        check("... in Alpaca's template (no tokenizer)", strstr(qs[1].prompt, "### Input:\nFrance") != NULL, "");
    }
    eval_free(qs, n);
    const char *no_answer = "{\"instruction\": \"a\", \"answer\": \"b\"}\n{\"instruction\": \"c\", \"output\": \"d\"}\n";
    write_bytes(path, no_answer, strlen(no_answer));
    expect_exit("a question without an answer: its line", load_eval, path, "line 2: no \"answer\" string");
    const char *bad_partial = "{\"instruction\": \"a\", \"answer\": \"b\", \"partial\": [3]}\n";
    write_bytes(path, bad_partial, strlen(bad_partial));
    expect_exit("partial answers that are not strings", load_eval, path, "line 1: \"partial\" holds something other");
    write_bytes(path, "{\"instruction\": \"a\", ", 20);
    expect_exit("a line that is not JSON: the parser's message", load_eval, path, "line 1: JSON error at byte");
    write_bytes(path, "[1]\n", 4);
    expect_exit("a JSON line that is no object", load_eval, path, "line 1 is not a JSON object");
    write_bytes(path, "\n\n", 2);
    expect_exit("no question at all", load_eval, path, "holds no question");
}

static void test_bad_files(const char *tmp) {
    printf("\nbad files: the loaders exit with a message naming the problem\n");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/empty", tmp);
    mkdir(dir, 0777);
    expect_exit("a folder: which ./convert command", load_model, dir, "./convert -i");
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
    // the tokenizer's files
    snprintf(dir, sizeof(dir), "%s/empty", tmp);
    expect_exit("no encoder.json in -g's folder", load_tokenizer, dir, "encoder.json");
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    write_bytes(path, "{\"!\": 0, ", 9);
    expect_exit("a truncated encoder.json", load_tokenizer, dir, "encoder.json");
    // gpt2_forward's rows: the control passes (it reaches "no error"), the others stop
    int kinds[4] = {0, 1, 2, 3};
    expect_exit("gpt2_forward: good rows, and no rows", bad_forward, &kinds[0], "no error");
    expect_exit("gpt2_forward: a position past the cache", bad_forward, &kinds[1], "outside B=2, S=8");
    expect_exit("gpt2_forward: a logit row past the pass", bad_forward, &kinds[2], "logit row 0 is row 4");
    expect_exit("gpt2_forward: more rows than the buffers", bad_forward, &kinds[3], "buffers hold 4");
}

// ----------------------------------------------------------------------------

// The repetition penalty and min-p with temperature, top-k and top-p, in generate()'s order,
// against transformers' logits processors (RepetitionPenaltyLogitsProcessor, then the
// Temperature, TopK, TopP and MinP warpers) on recorded logits: SmolLM2's after the prompt of
// fixtures/smollm2_logits.bin, its 1024 recorded columns as a vocabulary of 1024, with a
// history of token ids, shifted in some cases so that some are negative (the penalty
// multiplies those) (dev/reference/chat_reference.py). Each case: the same tokens kept, their
// probabilities to 1e-5 + 1e-3 p (float32 arithmetic on both sides; measured: below 4e-7).
static void test_processors(void) {
    printf("\nrepetition penalty and min-p against transformers' logits processors\n");
    size_t len;
    uint8_t *bin = read_whole_file(FIXTURES "smollm2_logits.bin", &len, "make reference writes it");
    int32_t h[8];
    memcpy(h, bin, sizeof(h));
    int T = h[2], G = h[3], V = h[4];
    float *logits = (float *)mallocCheck((size_t)V * sizeof(float)), *scratch = (float *)mallocCheck((size_t)V * sizeof(float));
    float *shifted = (float *)mallocCheck((size_t)V * sizeof(float));
    memcpy(logits, bin + 1024 + 4 * (size_t)(T + G) + 4 * (size_t)V + 4 * (size_t)(T - 1) * V, (size_t)V * sizeof(float));
    free(bin);
    Candidate *out = (Candidate *)mallocCheck((size_t)V * sizeof(Candidate));
    char *text = (char *)read_whole_file(FIXTURES "sampling_processors.txt", &len, "make reference writes it");
    int cases = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *at = line + strlen("case ");
        float penalty = strtof(at, &at), temperature = strtof(at, &at);
        int top_k = (int)strtol(at, &at, 10);
        float top_p = strtof(at, &at), min_p = strtof(at, &at), shift = strtof(at, &at);
        for (int i = 0; i < V; i++) { shifted[i] = logits[i] + shift; }
        int nh = (int)strtol(at, &at, 10), history[64];
        if (nh < 0 || nh > 64) { check("a fixture case's history of at most 64 ids", 0, line); continue; }
        for (int i = 0; i < nh; i++) { history[i] = (int)strtol(at, &at, 10); }
        at = strchr(at, ';') + 1;
        int want_n = (int)strtol(at, &at, 10);
        Sampler sm = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p, .repetition_penalty = penalty,
                      .history = history, .num_history = nh, .probs = scratch};
        int n = sample_candidates(shifted, V, &sm, out);
        int ok = n == want_n;
        double worst = 0.0;
        for (int k = 0; k < want_n && ok; k++) { // the reference lists them in id order
            int id = (int)strtol(at, &at, 10);
            double p = strtod(at + 1, &at);
            int found = -1;
            for (int i = 0; i < n; i++) { if (out[i].id == id) { found = i; } }
            ok = found >= 0 && fabs(out[found].prob - p) < 1e-5 + 1e-3 * p;
            if (found >= 0 && fabs(out[found].prob - p) > worst) { worst = fabs(out[found].prob - p); }
        }
        char name[160];
        snprintf(name, sizeof(name), "penalty %g, t %g, top-k %d, top-p %g, min-p %g, logits %+g: %d kept", penalty, temperature, top_k,
                 top_p, min_p, shift, n);
        char detail[64];
        snprintf(detail, sizeof(detail), "the reference keeps %d; worst |dp| %.1e", want_n, worst);
        check(name, ok, detail);
        cases++;
    }
    check("... every case of the fixture", cases >= 11, "");
    free(shifted);
    free(text);
    free(out);
    free(logits);
    free(scratch);
}

// The ids of a fixture line "<label> <count> <hash> <ids...>" (dev/reference/chat_reference.py's
// files), malloc'ed, their number in *n; NULL if the file has no such line
static int *fixture_ids(const char *path, const char *label, size_t *n) {
    size_t len;
    char *text = (char *)read_whole_file(path, &len, "make reference writes it (dev/reference/chat_reference.py)");
    char head[64];
    snprintf(head, sizeof(head), "\n%s ", label);
    char *at = strncmp(text, head + 1, strlen(head + 1)) == 0 ? text : strstr(text, head);
    int *ids = NULL;
    if (at != NULL) {
        at += at == text ? strlen(head + 1) : strlen(head);
        char *end;
        *n = strtoul(at, &end, 10);
        strtoull(end, &end, 16);
        ids = (int *)mallocCheck((*n + 1) * sizeof(int));
        for (size_t i = 0; i < *n; i++) { ids[i] = (int)strtol(end, &end, 10); }
    }
    free(text);
    return ids;
}

// Conversations of every shape (fixtures/chat_conversations.jsonl: system, user and
// assistant turns, several of each, an empty system message, none), in each template
// family's chat template and in our Alpaca template (GPT-2's tokenizer), with and without
// the generation prompt: token for token what transformers' apply_chat_template gives
// (dev/reference/chat_reference.py). The same code renders infer's conversations and -f's
// {"messages": [...]}.
static void test_chat_templates(void) {
    const struct { const char *name, *tokenizer; } families[] = {
        {"smollm2", "data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin"}, {"qwen2", "build/tok_qwen2_tokenizer.bin"},
        {"llama3", "build/tok_llama3_tokenizer.bin"}, {"llama31", "build/tok_llama31_tokenizer.bin"},
        {"llama32", "build/tok_llama32_tokenizer.bin"}, {"alpaca", "data/gpt2"}};
    size_t len;
    char *lines = (char *)read_whole_file(FIXTURES "chat_conversations.jsonl", &len, "make reference writes it");
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        Tokenizer t;
        tokenizer_init(&t, families[f].tokenizer);
        if (t.chat == CHAT_LLAMA32) { t.date = "26 Jul 2024"; } // (the fixture's date_string)
        char fixture[256];
        snprintf(fixture, sizeof(fixture), FIXTURES "chat_%s.txt", families[f].name);
        int k = 0, good = 0, total = 0;
        char detail[256] = "";
        for (char *line = lines, *next; *line != '\0'; line = next, k++) {
            next = strchr(line, '\n');
            size_t line_len = next != NULL ? (size_t)(next - line) : strlen(line);
            next = next != NULL ? next + 1 : line + line_len;
            Json j;
            char err[256];
            ChatMessage *m = NULL;
            int n = json_parse(&j, line, line_len, err, sizeof(err)) == 0 ? json_messages(&j, 0, &m, err, sizeof(err)) : -1;
            for (int gen = 1; gen >= 0; gen--) {
                char label[32];
                snprintf(label, sizeof(label), "%s%d", gen ? "conv" : "open", k);
                size_t want_n = 0;
                int *want = fixture_ids(fixture, label, &want_n);
                char *text = n < 0 ? NULL : gen ? conversation_prompt(&t, m, n) : t.chat == CHAT_NONE ? alpaca_render(m, n, 0) : tokenizer_chat_render(&t, m, n, 0);
                int32_t *ids = text != NULL ? (int32_t *)mallocCheck((tokenizer_max_ids(&t, strlen(text)) + 1) * sizeof(int32_t)) : NULL;
                size_t got = text != NULL ? tokenizer_encode(&t, (const uint8_t *)text, strlen(text), 1, ids) : 0;
                int same = want != NULL && text != NULL && got == want_n;
                for (size_t i = 0; same && i < got; i++) { same = ids[i] == want[i]; }
                total++;
                good += same;
                if (!same && detail[0] == '\0') { snprintf(detail, sizeof(detail), "%s: %zu tokens, the reference %zu", label, got, want_n); }
                free(ids);
                free(text);
                free(want);
            }
            chat_free(m, n);
            json_free(&j);
        }
        char name[96];
        snprintf(name, sizeof(name), "chat template %s: %d of %d renderings", families[f].name, good, total);
        check(name, good == total && total >= 18, detail);
        tokenizer_free(&t);
    }
    free(lines);
}

int main(void) {
    char tmp[] = "/tmp/test_infer_dir_XXXXXX";
    if (mkdtemp(tmp) == NULL) { perror("mkdtemp"); return 1; }
#ifdef WEIGHTS_BF16
    // make test_infer_bf16: the linear layers' weights rounded to bf16. On checkpoints whose
    // weights are bf16 already the rounding changes nothing, and transformers' logits hold to
    // fp32's tolerances: GPT-2's and a Llama's (grouped-query attention, Llama 3 RoPE).
    test_linear();
    test_attention();
    test_fixture(CONVERTED "hf_tiny_bf16.bin", FIXTURES "infer_tiny_bf16.bin");
    test_fixture(CONVERTED "llama_gqa3.bin", FIXTURES "llama_infer_llama_gqa3.bin");
    test_lora(CONVERTED "llama_gqa3.bin", "llama"); // (the adapter stays fp32)
    test_quant_linear(); // (-Q: the same code as the fp32 build's; the head's panels bf16 unless -Q quantizes it)
    test_q8_0_bytes();
    test_quantized(CONVERTED "llama_gqa3.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_llama.safetensors");
    test_quantized(CONVERTED "llama_gqa3.bin", "nf4", FIXTURES "lora_llama", FIXTURES "lora_llama_nf4.safetensors");
    test_smollm2(TOL[TOL_SMOLLM2_BF16]);
    test_sampling();
    test_processors();
    test_chat_templates();
    test_generation();
    test_eval_rules();
    test_bad_files(tmp);
    test_eval_file(tmp);
#else
    test_sampling();
    test_processors();
    test_linear();
    test_attention();
    test_fixture(CONVERTED "hf_tiny_fp32.bin", FIXTURES "infer_tiny_fp32.bin");
    test_fixture(CONVERTED "hf_tiny_bf16.bin", FIXTURES "infer_tiny_bf16.bin");
    test_fixture(CONVERTED "hf_tiny_fp16.bin", FIXTURES "infer_tiny_fp16.bin");
    test_fixture(CONVERTED "llama_gqa3.bin", FIXTURES "llama_infer_llama_gqa3.bin");
    test_fixture(CONVERTED "qwen2_gqa4.bin", FIXTURES "llama_infer_qwen2_gqa4.bin");
    test_fixture(CONVERTED "llama_mha3.bin", FIXTURES "llama_infer_llama_mha3.bin");
    test_smollm2(TOL[TOL_SMOLLM2]);
    test_lora(CONVERTED "hf_tiny_fp32.bin", "gpt2");
    test_lora(CONVERTED "llama_gqa3.bin", "llama");
    test_lora(CONVERTED "qwen2_gqa4.bin", "qwen2");
    test_quant_linear();
    test_q8_0_bytes();
    test_quantized(CONVERTED "hf_tiny_fp32.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_gpt2.safetensors");
    test_quantized(CONVERTED "llama_gqa3.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_llama.safetensors");
    test_quantized(CONVERTED "qwen2_gqa4.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_qwen2.safetensors");
    test_quantized(CONVERTED "hf_tiny_fp32.bin", "nf4", FIXTURES "lora_gpt2", FIXTURES "lora_gpt2_nf4.safetensors");
    test_quantized(CONVERTED "llama_gqa3.bin", "nf4", FIXTURES "lora_llama", FIXTURES "lora_llama_nf4.safetensors");
    test_quantized(CONVERTED "qwen2_gqa4.bin", "nf4", FIXTURES "lora_qwen2", FIXTURES "lora_qwen2_nf4.safetensors");
    // Hugging Face *-bnb-4bit folders (./convert keeps their 4-bit bytes): against transformers on them
    test_quantized(CONVERTED "bnb4_llama.bin", "none", NULL, FIXTURES "bnb4_llama.safetensors");
    test_quantized(CONVERTED "bnb4_qwen2.bin", "none", NULL, FIXTURES "bnb4_qwen2.safetensors");
    test_export();
    test_chat_templates();
    test_generation();
    test_eval_rules();
    test_bad_files(tmp);
    test_eval_file(tmp);
#endif
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    if (system(cmd) != 0) { printf("could not remove %s\n", tmp); }
    printf("\n%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? 0 : 1;
}
