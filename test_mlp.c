/*
test_mlp.c: train_mlp.c against an independent numpy reference.

dev/reference/mlp_reference.py (numpy in float64, its gradients cross-checked
against torch autograd) wrote, for a 784-64-32-10 network on the first 32
Fashion-MNIST training images: the initial weights, the logits, the loss, every
parameter gradient, and the losses of 5 steps each of SGD with momentum, AdamW
and plain SGD. Two fixtures: ReLU and tanh. We load the same weights, run the
same computation in fp32 and compare.

    make test_mlp && ./test_mlp            (make reference regenerates the fixtures)

Tolerances: the reference is float64, so the differences are our fp32 rounding.
Sums here have at most 784 terms of size ~1, so we expect errors of ~1e-6 of a
tensor's scale. A check passes when |ours - ref| <= atol * max|ref| + rtol * |ref|;
the values below are about 10x the largest errors we measured (the test prints
them), far below the errors of order 1 that a wrong formula produces.
*/
#define TESTING
#include "train_mlp.c"

static const float LOGITS_ATOL = 1e-5f, LOGITS_RTOL = 1e-4f;
static const float GRAD_ATOL = 1e-5f, GRAD_RTOL = 1e-3f;
static const float LOSS_RTOL = 1e-5f; // the loss, and each of the 15 training losses

static int num_passed = 0, num_failed = 0;

static void check_tensor(const char *name, const float *ours, const float *ref, size_t n, float atol, float rtol) {
    float max_ref = 0.0f, max_abs = 0.0f, max_rel = 0.0f;
    for (size_t i = 0; i < n; i++) { max_ref = fmaxf(max_ref, fabsf(ref[i])); }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float err = fabsf(ours[i] - ref[i]);
        if (!(err <= atol * max_ref + rtol * fabsf(ref[i]))) { bad++; }
        if (!(err <= max_abs)) { max_abs = err; }
        if (fabsf(ref[i]) > 1e-3f * max_ref && !(err / fabsf(ref[i]) <= max_rel)) { max_rel = err / fabsf(ref[i]); }
    }
    printf("%-8s %7zu %10.3e %10.3e %10.3e  %+.6e/%+.6e %s\n", name, n, max_ref, max_abs, max_rel, ours[0], ref[0],
           bad == 0 ? "OK" : "NOT OK");
    if (bad == 0) { num_passed++; } else { num_failed++; }
}

static void check_losses(const char *name, const float *ours, const float *ref, int n) {
    int ok = 1;
    printf("%-13s", name);
    for (int i = 0; i < n; i++) {
        float rel = fabsf(ours[i] - ref[i]) / fabsf(ref[i]);
        ok &= rel <= LOSS_RTOL;
        printf(" %.6f/%.6f", ours[i], ref[i]);
    }
    printf(" %s\n", ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
}

static void read_floats(float *dst, size_t n, FILE *fp) { freadCheck(dst, sizeof(float), n, fp); }

static void test_fixture(const char *path) {
    printf("\n== %s ==\n", path);
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, fp);
    if (header[0] != 20261201 || header[1] != 1 || header[2] < 2 || header[2] > 7) { // sizes sit in [3, 10)
        fprintf(stderr, "Error: %s: not an MLP fixture (magic %d version %d)\n"
                "HINT: make reference regenerates dev/reference/fixtures\n", path, header[0], header[1]);
        exit(EXIT_FAILURE);
    }
    int L = header[2] - 1, sizes[MAX_LAYERS + 1];
    for (int l = 0; l <= L; l++) { sizes[l] = header[3 + l]; }
    size_t B = header[10];
    int act = header[11], steps = header[12];
    MLP m;
    mlp_build(&m, sizes, L, act == 0 ? ACT_RELU : ACT_TANH, 0.0f);
    mlp_allocate_activations(&m, B);
    float *x = (float *)mallocCheck(B * sizes[0] * sizeof(float));
    int *labels = (int *)mallocCheck(B * sizeof(int));
    float *init = (float *)mallocCheck(m.num_params * sizeof(float)), *ref_grads = (float *)mallocCheck(m.num_params * sizeof(float));
    float *ref_logits = (float *)mallocCheck(B * sizes[L] * sizeof(float)), ref_loss;
    float ref_losses[3][16], our_losses[3][16];
    read_floats(x, B * sizes[0], fp);
    freadCheck(labels, sizeof(int), B, fp);
    read_floats(init, m.num_params, fp); // W_0, b_0, W_1, ...: the same layout as m.params
    read_floats(ref_logits, B * sizes[L], fp);
    read_floats(&ref_loss, 1, fp);
    read_floats(ref_grads, m.num_params, fp);
    for (int k = 0; k < 3; k++) { read_floats(ref_losses[k], (size_t)steps, fp); }
    fcloseCheck(fp);
    printf("network");
    for (int l = 0; l <= L; l++) { printf(" %d", sizes[l]); }
    printf(", %s, batch %zu\n", act == 0 ? "relu" : "tanh", B);

    // forward and backward from the fixture's weights
    memcpy(m.params, init, m.num_params * sizeof(float));
    memcpy(m.h[0], x, B * sizes[0] * sizeof(float));
    float loss = mlp_forward(&m, labels, B, 1, 0, 0, NULL);
    mlp_zero_grad(&m);
    mlp_backward(&m, B);
    printf("%-8s %7s %10s %10s %10s  first pair (ours/ref)\n", "tensor", "n", "max|ref|", "max abs", "max rel");
    check_tensor("logits", m.z[L - 1], ref_logits, B * sizes[L], LOGITS_ATOL, LOGITS_RTOL);
    for (int l = 0; l < L; l++) {
        char name[16];
        size_t off_w = (size_t)(m.W[l] - m.params), off_b = (size_t)(m.b[l] - m.params);
        snprintf(name, sizeof(name), "dW%d", l);
        check_tensor(name, m.dW[l], ref_grads + off_w, (size_t)sizes[l + 1] * sizes[l], GRAD_ATOL, GRAD_RTOL);
        snprintf(name, sizeof(name), "db%d", l);
        check_tensor(name, m.db[l], ref_grads + off_b, (size_t)sizes[l + 1], GRAD_ATOL, GRAD_RTOL);
    }
    check_losses("loss", &loss, &ref_loss, 1);

    // 5 steps of each optimizer, each from the initial weights, on the same batch
    Optimizer opts[3] = {{OPT_MOMENTUM, 0.05f, 1e-3f, 0.9f, 0.9f, 0.999f, 1e-8f},
                         {OPT_ADAMW, 1e-3f, 0.01f, 0.0f, 0.9f, 0.999f, 1e-8f},
                         {OPT_SGD, 0.1f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f}};
    const char *names[3] = {"sgd+momentum", "adamw", "sgd"};
    for (int k = 0; k < 3; k++) {
        memcpy(m.params, init, m.num_params * sizeof(float));
        free(m.opt_m);
        free(m.opt_v);
        m.opt_m = m.opt_v = NULL;
        for (int t = 0; t < steps; t++) {
            memcpy(m.h[0], x, B * sizes[0] * sizeof(float));
            our_losses[k][t] = mlp_forward(&m, labels, B, 1, 0, (uint64_t)t, NULL);
            mlp_zero_grad(&m);
            mlp_backward(&m, B);
            mlp_update(&m, &opts[k], opts[k].lr, t + 1);
        }
        check_losses(names[k], our_losses[k], ref_losses[k], steps);
    }
    free(x);
    free(labels);
    free(init);
    free(ref_grads);
    free(ref_logits);
    mlp_free(&m);
}

// Dropout, forward: the fixtures run without it, and the gradient check reuses its
// masks, so here we check the forward pass itself. With p = 0.3 over 100,000 units
// the kept fraction is 0.7 +- 0.0015 (binomial standard deviation), so we allow
// 0.7 +- 0.01 (6.9 standard deviations); kept units must be exactly x / 0.7; an
// evaluation forward (train = 0) must not drop anything.
static void test_dropout(void) {
    printf("\n== dropout forward ==\n");
    size_t n = 100000;
    float *x = (float *)mallocCheck(n * sizeof(float)), *out = (float *)mallocCheck(n * sizeof(float));
    float *mask = (float *)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = 1.0f + (float)(i % 17); }
    dropout_forward(out, mask, x, n, 0.3f, rng_key(5, STREAM_DROPOUT));
    size_t kept = 0, wrong = 0;
    for (size_t i = 0; i < n; i++) {
        if (out[i] != 0.0f) { kept++; wrong += out[i] != x[i] / 0.7f && out[i] != x[i] * (1.0f / 0.7f); }
    }
    double frac = (double)kept / n;
    int ok = fabs(frac - 0.7) <= 0.01 && wrong == 0;
    printf("p = 0.3: kept %.4f of the units (expect 0.7 +- 0.01), %zu kept values not x / 0.7: %s\n", frac, wrong, ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
    // evaluation: an MLP with dropout 0.5 must give the same logits as one without
    const int sizes[3] = {784, 16, 10};
    MLP a, b;
    mlp_build(&a, sizes, 2, ACT_RELU, 0.5f);
    mlp_build(&b, sizes, 2, ACT_RELU, 0.0f);
    mlp_init(&a, 3);
    mlp_init(&b, 3);
    mlp_allocate_activations(&a, 4);
    mlp_allocate_activations(&b, 4);
    int labels[4] = {1, 2, 3, 4};
    for (size_t i = 0; i < 4 * 784; i++) { a.h[0][i] = b.h[0][i] = (float)((i * 31) % 255) / 255.0f; }
    mlp_forward(&a, labels, 4, 0, 9, 0, NULL);
    mlp_forward(&b, labels, 4, 0, 9, 0, NULL);
    ok = memcmp(a.z[1], b.z[1], 4 * 10 * sizeof(float)) == 0;
    printf("evaluation (train = 0) with dropout 0.5 equals no dropout: %s\n", ok ? "OK" : "NOT OK");
    if (ok) { num_passed++; } else { num_failed++; }
    mlp_free(&a);
    mlp_free(&b);
    free(x);
    free(out);
    free(mask);
}

// The learning-rate schedule at the points that define it: warm-up from lr/w,
// the peak at the end of warm-up, the cosine's midpoint at half the peak, and 0
// one step past the end.
static void test_schedule(void) {
    printf("\n== learning-rate schedule (lr 1, warm-up 10, 110 steps) ==\n");
    struct { int cosine, step; float expect; } cases[] = {
        {1, 0, 0.1f}, {1, 4, 0.5f}, {1, 9, 1.0f}, {1, 10, 1.0f}, {1, 60, 0.5f}, {1, 110, 0.0f}, {0, 0, 0.1f}, {0, 100, 1.0f}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        float lr = get_lr(cases[i].cosine, 1.0f, cases[i].step, 10, 110);
        int good = fabsf(lr - cases[i].expect) <= 1e-6f;
        printf("  %s step %3d: %.6f (expect %.6f) %s\n", cases[i].cosine ? "cosine" : "const ", cases[i].step, lr,
               cases[i].expect, good ? "OK" : "NOT OK");
        ok &= good;
    }
    if (ok) { num_passed++; } else { num_failed++; }
}

int main(void) {
    test_dropout();
    test_schedule();
    test_fixture("dev/reference/fixtures/mlp_state.bin");
    test_fixture("dev/reference/fixtures/mlp_state_tanh.bin");
    printf("\n%d passed, %d failed\n", num_passed, num_failed);
    return num_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
