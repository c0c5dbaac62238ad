/*
test_gpt2.c: train_gpt2.c against an independent PyTorch GPT-2.

The reference (dev/reference/gpt2_reference.py, autograd, float64) wrote, for two
configurations, the batch, the logits, the loss, the gradient of every parameter
tensor and the losses and gradient norms of ten AdamW steps on that batch:
    tiny   V=300, L=2, NH=4, C=64, B=4, T=13: weights from an llm.c checkpoint the
           reference wrote (so this also checks our checkpoint reader); every
           tensor is stored whole
    small  GPT-2 small's layer shapes (C=768, NH=12, V=50257) with L=2, B=2, T=57:
           weights from the counter-based generator both sides implement; big
           tensors are stored as ~8192 evenly strided samples
We run the same computation here in fp32 and compare every number.

    make test_gpt2 && ./test_gpt2            (make reference regenerates the fixtures)

Tolerances (one table, TOL below). The reference is float64, so the differences
are our fp32 rounding alone. An fp32 sum of K terms has a relative error of about
sqrt(K) * 6e-8 (random-walk rounding); our longest sums have K = 50304 (the tied
output layer) or K = B*T for weight gradients, and errors pass through a few
layers, so we expect relative errors around 1e-5 of a tensor's scale. Each check
is |ours - ref| <= atol + rtol * |ref| with atol relative to the largest |ref| of
the tensor, so that entries that are zero in exact arithmetic (the key third of
qkvb's gradient, padded rows) are judged on the tensor's scale rather than on
their own. The values in the table are about 10x the largest errors we measured
on these fixtures (the test prints them), so a real bug (which shows up as
errors of order 1) cannot hide, while a different summation order cannot fail
the test. (Tried, on the fixtures of T = 13 and 57: GELU's 0.044715 -> 0.04 fails 39
checks, LayerNorm's eps 1e-5 -> 1e-4 in the forward pass fails 54, scaling the keys'
gradient by 0.999 fails 11.)
The ten training losses compound everything, including AdamW's division by
sqrt(v) which amplifies tiny gradients, hence the looser bound.
*/
#define TESTING
#include "train_gpt2.c"

// ----------------------------------------------------------------------------
// tolerances and tensor comparison

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
    // measured (tiny, small): logits max abs err / max|ref| 3e-7, 9e-7; loss rel err 8e-8, 0
    {"logits", 1e-4f, 1e-5f},
    {"loss", 1e-6f, 0.0f},
    // measured: max abs err / max|ref| up to 1.6e-6 (small's wpe), rel err of
    // entries above 1e-3 max|ref| up to 3.6e-4 (small's ln2b): these entries are the
    // difference of large terms and carry the absolute error of their tensor
    {"grads", 1e-4f, 1e-5f},
    // measured: up to 4.4e-6 (small, step 10: the loss fell from 11 to 0.2, so every
    // step's rounding is compounded by the next)
    {"steps", 5e-5f, 0.0f},
    // flash attention against attention_forward/backward, both fp32: they sum in different
    // orders and exponentiate different differences, so they differ by rounding. Measured:
    // max abs err / max|ref| up to 3e-7, rel err of entries above 1e-3 max|ref| up to 1e-4.
    // Planted bugs: no rescale of the running output when the maximum grows gives abs errors
    // of 1 to 2.5 (T > 32 only: hence shapes of several tiles), a skipped last key tile NaN,
    // D_t scaled by 0.999 in the backward pass 1e-3 (dqkv only)
    {"flash", 1e-3f, 1e-5f},
};
enum { TOL_LOGITS, TOL_LOSS, TOL_GRADS, TOL_STEPS, TOL_FLASH };

// ----------------------------------------------------------------------------
// the fixture file (format: dev/reference/gpt2_reference.py's header)

// --- begin shared-copy: gpt2-test-fixture ---
#define FIXTURE_MAGIC 20261129
#define FIXTURE_HINT "HINT: make reference regenerates dev/reference/fixtures (needs dev/reference/requirements.txt)"

typedef struct {
    int header[256];
    float hparams[16];
    int *inputs, *targets;
    Sampled logits;
    Sampled grads[NUM_PARAMETER_TENSORS];
    float loss;
    float *losses, *norms;
} Fixture;

static void read_sampled(FILE *fp, Sampled *s) {
    freadCheck(&s->numel, sizeof(int64_t), 1, fp);
    freadCheck(&s->stride, sizeof(int64_t), 1, fp);
    freadCheck(&s->count, sizeof(int64_t), 1, fp);
    if (s->stride < 1 || s->count != (s->numel + s->stride - 1) / s->stride) {
        fprintf(stderr, "Error: corrupt sampled tensor record (numel %lld stride %lld count %lld)\n%s\n",
                (long long)s->numel, (long long)s->stride, (long long)s->count, FIXTURE_HINT);
        exit(EXIT_FAILURE);
    }
    s->values = (float *)mallocCheck((size_t)s->count * sizeof(float));
    freadCheck(s->values, sizeof(float), (size_t)s->count, fp);
}

static void fixture_read(Fixture *f, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    freadCheck(f->header, sizeof(int), 256, fp);
    if (f->header[0] != FIXTURE_MAGIC || f->header[1] != 1) {
        fprintf(stderr, "Error: %s: expected magic %d version 1, found %d version %d\n%s\n",
                path, FIXTURE_MAGIC, f->header[0], f->header[1], FIXTURE_HINT);
        exit(EXIT_FAILURE);
    }
    freadCheck(f->hparams, sizeof(float), 16, fp);
    size_t BT = (size_t)f->header[8] * f->header[9];
    f->inputs = (int *)mallocCheck(BT * sizeof(int));
    f->targets = (int *)mallocCheck(BT * sizeof(int));
    freadCheck(f->inputs, sizeof(int), BT, fp);
    freadCheck(f->targets, sizeof(int), BT, fp);
    read_sampled(fp, &f->logits);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { read_sampled(fp, &f->grads[i]); }
    freadCheck(&f->loss, sizeof(float), 1, fp);
    int steps = f->header[12];
    f->losses = (float *)mallocCheck(steps * sizeof(float));
    f->norms = (float *)mallocCheck(steps * sizeof(float));
    freadCheck(f->losses, sizeof(float), steps, fp);
    freadCheck(f->norms, sizeof(float), steps, fp);
    fcloseCheck(fp);
}

static void fixture_free(Fixture *f) {
    free(f->inputs);
    free(f->targets);
    free(f->logits.values);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { free(f->grads[i].values); }
    free(f->losses);
    free(f->norms);
}

// (B,T,V) flat index -> (B,T,Vp) flat index
typedef struct { size_t V, Vp; } LogitsLayout;
static size_t map_logits(size_t idx, const void *ctx) {
    const LogitsLayout *l = (const LogitsLayout *)ctx;
    return (idx / l->V) * l->Vp + idx % l->V;
}
// --- end shared-copy: gpt2-test-fixture ---

// ----------------------------------------------------------------------------
// one configuration: logits, loss, gradients, ten steps

static void test_config(const char *name, const char *fixture_path, const char *model_path) {
    printf("\n== %s: %s ==\n", name, fixture_path);
    Fixture f;
    fixture_read(&f, fixture_path);
    int *h = f.header;
    GPT2 model;
    if (h[10] == 0) {
        gpt2_build_from_checkpoint(&model, model_path);
    } else {
        model.config = (GPT2Config){.max_seq_len = h[2], .vocab_size = h[3], .num_layers = h[4], .num_heads = h[5],
                                    .channels = h[6], .padded_vocab_size = h[7]};
        gpt2_validate_config(model.config, fixture_path);
        gpt2_allocate_parameters(&model);
        gpt2_init_random(&model, (uint64_t)h[11], 1);
    }
    GPT2Config c = model.config;
    int config_ok = c.max_seq_len == h[2] && c.vocab_size == h[3] && c.num_layers == h[4] && c.num_heads == h[5] &&
                    c.channels == h[6] && c.padded_vocab_size == h[7];
    printf("config maxT %d V %d Vp %d L %d NH %d C %d, batch B %d T %d", c.max_seq_len, c.vocab_size,
           c.padded_vocab_size, c.num_layers, c.num_heads, c.channels, h[8], h[9]);
    if (h[10] == 0) {
        // the model file's header, read by our loader, against the fixture's
        printf(": checkpoint header %s\n", config_ok ? "OK" : "NOT OK (model file and fixture disagree)");
        record(config_ok);
    } else {
        printf("\n");
    }
    if (!config_ok) { fixture_free(&f); gpt2_free(&model); return; }
    size_t B = h[8], T = h[9];

    gpt2_forward(&model, f.inputs, f.targets, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    printf("%-9s %9s %10s %10s %10s  first pairs (ours/ref)\n", "tensor", "compared", "max|ref|", "max abs", "max rel");
    LogitsLayout layout = {(size_t)c.vocab_size, (size_t)c.padded_vocab_size};
    // the backward pass overwrote the logits with dlogits: recompute them
    gpt2_forward(&model, f.inputs, f.targets, B, T);
    check_tensor("logits", model.acts.logits, &f.logits, TOL[TOL_LOGITS], map_logits, &layout);
    float **grads = (float **)&model.grads;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if ((size_t)f.grads[i].numel != model.param_sizes[i]) {
            printf("%-9s size %lld in the fixture, %zu here: NOT OK\n", PARAMETER_NAMES[i], (long long)f.grads[i].numel, model.param_sizes[i]);
            record(0);
            continue;
        }
        check_tensor(PARAMETER_NAMES[i], grads[i], &f.grads[i], TOL[TOL_GRADS], NULL, NULL);
    }
    check_scalar("loss", model.mean_loss, f.loss, TOL[TOL_LOSS]);

    // ten training steps on the same batch, as the reference did them
    float lr = f.hparams[0], beta1 = f.hparams[1], beta2 = f.hparams[2], eps = f.hparams[3];
    float wd = f.hparams[4], clip = f.hparams[5];
    int steps = h[12], steps_ok = 1;
    printf("step  loss ours     loss ref      rel err    norm ours    norm ref     rel err\n");
    for (int step = 0; step < steps; step++) {
        gpt2_forward(&model, f.inputs, f.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        float scale = clip / (norm + 1e-6f) < 1.0f ? clip / (norm + 1e-6f) : 1.0f;
        gpt2_update(&model, lr, beta1, beta2, eps, wd, scale, step + 1);
        float loss_err = fabsf(model.mean_loss - f.losses[step]) / fabsf(f.losses[step]);
        float norm_err = fabsf(norm - f.norms[step]) / fabsf(f.norms[step]);
        int ok = loss_err <= TOL[TOL_STEPS].rtol && norm_err <= TOL[TOL_STEPS].rtol;
        printf("%4d  %.7f  %.7f  %.2e   %.7f  %.7f  %.2e %s\n", step + 1, model.mean_loss, f.losses[step], loss_err,
               norm, f.norms[step], norm_err, ok ? "OK" : "NOT OK");
        steps_ok &= ok;
    }
    record(steps_ok);
    fixture_free(&f);
    gpt2_free(&model);
}

// Gradient accumulation: the tiny batch as two micro-batches of B/2, each backward
// scaled by 1/2, must give the fixture's gradients of the whole batch.
static void test_accumulation(const char *fixture_path, const char *model_path) {
    printf("\n== gradient accumulation: tiny as 2 micro-batches of B/2 ==\n");
    Fixture f;
    fixture_read(&f, fixture_path);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path);
    size_t B = f.header[8], T = f.header[9];
    gpt2_allocate_activations(&model, B / 2, T);
    gpt2_zero_grad(&model);
    for (size_t half = 0; half < 2; half++) {
        gpt2_forward(&model, f.inputs + half * (B / 2) * T, f.targets + half * (B / 2) * T, B / 2, T);
        gpt2_backward(&model, 0.5f);
    }
    float **grads = (float **)&model.grads;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        check_tensor(PARAMETER_NAMES[i], grads[i], &f.grads[i], TOL[TOL_GRADS], NULL, NULL);
    }
    fixture_free(&f);
    gpt2_free(&model);
}

// ----------------------------------------------------------------------------
// smaller checks that need no fixture

// gemm, the one routine everything goes through, at awkward sizes (edges of the
// 6 x 16 register tile and of the 256 x 256 blocks) in all the stride patterns
// the layers use, against a plain double-precision triple loop.
static void test_gemm_shapes(void) {
    printf("\n== gemm at awkward shapes, against a double-precision loop ==\n");
    const int shapes[][3] = {{1, 1, 1}, {5, 17, 3}, {7, 15, 257}, {13, 33, 300}, {6, 16, 256}, {61, 47, 515}, {300, 270, 70}};
    int all_ok = 1;
    uint64_t rng = 123;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        float *A = (float *)mallocCheck((size_t)M * K * sizeof(float)), *B = (float *)mallocCheck((size_t)K * N * sizeof(float));
        float *C = (float *)mallocCheck((size_t)M * N * sizeof(float));
        for (int i = 0; i < M * K; i++) { A[i] = rng_float(&rng) - 0.5f; }
        for (int i = 0; i < K * N; i++) { B[i] = rng_float(&rng) - 0.5f; }
        // mode: bit 0 = A stored transposed, bit 1 = B stored transposed, bit 2 = C stored transposed
        for (int mode = 0; mode < 8; mode++) {
            size_t a_rs = mode & 1 ? 1 : K, a_cs = mode & 1 ? M : 1;
            size_t b_rs = mode & 2 ? 1 : N, b_cs = mode & 2 ? K : 1;
            size_t c_rs = mode & 4 ? 1 : N, c_cs = mode & 4 ? M : 1;
            for (int i = 0; i < M * N; i++) { C[i] = 1.0f; } // accumulate onto ones
            gemm(C, c_rs, c_cs, A, a_rs, a_cs, B, b_rs, b_cs, M, N, K, 1);
            double max_err = 0.0;
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double ref = 1.0;
                    for (int k = 0; k < K; k++) { ref += (double)A[i * a_rs + k * a_cs] * B[k * b_rs + j * b_cs]; }
                    max_err = fmax(max_err, fabs(ref - C[i * c_rs + j * c_cs]));
                }
            }
            // K products of size <= 1/4, summed in fp32: error well below 1e-6 * K
            int ok = max_err <= 1e-6 * K;
            if (!ok) { printf("M %d N %d K %d mode %d: max abs err %.2e NOT OK\n", M, N, K, mode, max_err); }
            all_ok &= ok;
        }
        free(A);
        free(B);
        free(C);
    }
    printf("%zu shapes x 8 stride patterns: %s\n", sizeof(shapes) / sizeof(shapes[0]), all_ok ? "OK" : "NOT OK");
    record(all_ok);
}

// Flash attention against the attention that keeps its T x T scores, forward and every
// gradient, on shapes that divide no tile size (FLASH_TQ, FLASH_TK = 32): one token, one
// short tile, a tile and one, several tiles, odd head sizes. The inputs span [-2, 2), so a
// query's scores spread over several units and later key tiles often raise the running
// maximum (the rescaling path runs). The whole model with -F 1 is also checked against
// PyTorch in main.
static void check_close(const char *name, const float *ours, const float *ref, size_t n, Tolerance tol) {
    Sampled s = {(int64_t)n, 1, (int64_t)n, (float *)ref};
    check_tensor(name, ours, &s, tol, NULL, NULL);
}

static void test_flash_attention(void) {
    printf("\n== flash attention against attention_forward/backward, uneven shapes ==\n");
    const size_t shapes[][4] = {{1, 1, 1, 8}, {2, 31, 3, 24}, {1, 33, 2, 7}, {2, 77, 2, 64}, {1, 130, 4, 20}, {1, 200, 1, 128}};
    uint64_t rng = 42;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        size_t B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], HS = shapes[si][3], C = NH * HS;
        float *qkv = (float *)mallocCheck(B * T * 3 * C * sizeof(float)), *dout = (float *)mallocCheck(B * T * C * sizeof(float));
        float *out = (float *)mallocCheck(B * T * C * sizeof(float)), *out_f = (float *)mallocCheck(B * T * C * sizeof(float));
        float *att = (float *)mallocCheck(B * NH * T * T * sizeof(float)), *datt = (float *)mallocCheck(B * NH * T * T * sizeof(float));
        float *lse = (float *)mallocCheck(B * NH * T * sizeof(float));
        float *dqkv = (float *)mallocCheck(B * T * 3 * C * sizeof(float)), *dqkv_f = (float *)mallocCheck(B * T * 3 * C * sizeof(float));
        for (size_t i = 0; i < B * T * 3 * C; i++) { qkv[i] = 4.0f * rng_float(&rng) - 2.0f; }
        for (size_t i = 0; i < B * T * C; i++) { dout[i] = 2.0f * rng_float(&rng) - 1.0f; }
        for (size_t i = 0; i < B * T * 3 * C; i++) { dqkv_f[i] = NAN; } // written, not accumulated
        attention_forward(out, att, qkv, B, T, C, NH);
        attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
        flash_attention_forward(out_f, lse, qkv, B, T, C, NH);
        flash_attention_backward(dqkv_f, dout, qkv, out_f, lse, B, T, C, NH);
        // the log-sum-exp against the scores' (att = exp(score - lse), so at the diagonal
        // lse = q.k*scale - log att)
        double lse_err = 0.0;
        for (size_t b = 0; b < B; b++) {
            for (size_t h = 0; h < NH; h++) {
                for (size_t t = 0; t < T; t++) {
                    const float *q = qkv + (b * T + t) * 3 * C + h * HS, *k = q + C;
                    double s = 0.0;
                    for (size_t i = 0; i < HS; i++) { s += (double)q[i] * k[i]; }
                    double want = s / sqrt((double)HS) - log((double)att[((b * NH + h) * T + t) * T + t]);
                    lse_err = fmax(lse_err, fabs(want - lse[(b * NH + h) * T + t]));
                }
            }
        }
        printf("B %zu T %zu NH %zu HS %zu: log-sum-exp max abs err %.2e %s\n", B, T, NH, HS, lse_err,
               lse_err <= 1e-4 ? "OK" : "NOT OK");
        record(lse_err <= 1e-4);
        check_close("out", out_f, out, B * T * C, TOL[TOL_FLASH]);
        check_close("dqkv", dqkv_f, dqkv, B * T * 3 * C, TOL[TOL_FLASH]);
        free(qkv); free(dout); free(out); free(out_f); free(att); free(datt); free(lse); free(dqkv); free(dqkv_f);
    }
}

// The counter-based generator must give exactly the values the reference's numpy
// port printed (dev/reference/README.md lists them), or the "small" weights differ.
static void test_generator(void) {
    printf("\n== the weight generator matches the reference's ==\n");
    GPT2 model;
    model.config = (GPT2Config){.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304,
                                .num_layers = 2, .num_heads = 12, .channels = 768};
    gpt2_allocate_parameters(&model);
    gpt2_init_random(&model, 1337, 1);
    const uint32_t expect_wte[4] = {0x3b62e1e3u, 0xbc9c263eu, 0xbd0b7eb1u, 0x3b81f936u};
    const uint32_t expect_ln1w[4] = {0x3f699e5bu, 0x3f9d5a66u, 0x3f5f19d5u, 0x3f76f5ecu};
    const uint32_t expect_wte_1m = 0x39e36819u;
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        uint32_t a, b;
        memcpy(&a, &model.params.wte[i], 4);
        memcpy(&b, &model.params.ln1w[i], 4);
        ok &= a == expect_wte[i] && b == expect_ln1w[i];
    }
    uint32_t m;
    memcpy(&m, &model.params.wte[1000000], 4);
    ok &= m == expect_wte_1m;
    printf("wte[0..3] %.9g %.9g %.9g %.9g, ln1w[0] %.9g, wte[1000000] %.9g: %s\n", model.params.wte[0],
           model.params.wte[1], model.params.wte[2], model.params.wte[3], model.params.ln1w[0],
           model.params.wte[1000000], ok ? "OK" : "NOT OK");
    record(ok);
    gpt2_free(&model);
}

// A checkpoint written and read back is the same model, bit for bit.
static void test_checkpoint_roundtrip(void) {
    printf("\n== checkpoint write + read ==\n");
    GPT2 a, b;
    gpt2_build_from_descriptor(&a, "d1", 7);
    const char *path = "test_gpt2_roundtrip.tmp.bin";
    gpt2_save_checkpoint(&a, path);
    gpt2_build_from_checkpoint(&b, path);
    int ok = memcmp(&a.config, &b.config, sizeof(GPT2Config)) == 0 && a.num_parameters == b.num_parameters &&
             memcmp(a.params_memory, b.params_memory, a.num_parameters * sizeof(float)) == 0;
    printf("d1 model, %zu parameters: %s\n", a.num_parameters, ok ? "OK" : "NOT OK");
    record(ok);
    remove(path);
    gpt2_free(&a);
    gpt2_free(&b);
}

int main(void) {
    test_gemm_shapes();
    test_generator();
    test_checkpoint_roundtrip();
    test_config("tiny", "dev/reference/fixtures/gpt2_tiny_state.bin", "dev/reference/fixtures/gpt2_tiny_model.bin");
    test_config("small", "dev/reference/fixtures/gpt2_small_state.bin", NULL);
    test_accumulation("dev/reference/fixtures/gpt2_tiny_state.bin", "dev/reference/fixtures/gpt2_tiny_model.bin");
    test_flash_attention();
    flash_attention = 1; // the whole model again, with flash attention (-F 1)
    test_config("tiny, -F 1", "dev/reference/fixtures/gpt2_tiny_state.bin", "dev/reference/fixtures/gpt2_tiny_model.bin");
    test_config("small, -F 1", "dev/reference/fixtures/gpt2_small_state.bin", NULL);
    printf("\n%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
