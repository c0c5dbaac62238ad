/*
Benchmark of infer.c's decode step against llama2.c-style code (not a test: it prints a
table). The inference chapter's CPU target is to decode at least as fast as fp32 code
written the way llama2.c's run.c is, on the same model size (dev/cpu/llama2c_style.c,
compiled with -Ofast like llama2.c's `make runomp`).

Builds a random GPT-2 (d12 = GPT-2 124M by default), fills the cache of one sequence up
to a context position with a prefill, then times single-token decode steps at that
position with both programs on the same weights, and checks that their logits agree.
Prints the median of the timed steps, then (unless -y 0) the medians again while a busy
neighbour, one process spinning on each core, competes for the cores (dev/cpu/busy_neighbour.h).
On shared VMs step times vary by 10% or more: run it a few times.

    make dev/cpu/bench_infer && ./dev/cpu/bench_infer            # d12, positions 16 256 1000
    ./dev/cpu/bench_infer -e d4 -n 20
*/
#define TESTING
#include "../../infer.c"
#include "busy_neighbour.h"

typedef struct {
    const float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb, *lnfw, *lnfb;
} L2cWeights;
void l2c_forward(const L2cWeights *w, float *key_cache, float *value_cache, float *s, float *logits, int token, int pos,
                 int L, int C, int NH, int maxT, int Vp);

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Times `steps` decode steps at position P with both programs (after one warm-up step each),
// leaving the sorted times in ours and theirs.
static void time_steps(GPT2 *model, const L2cWeights *w, float *l2c_keys, float *l2c_values, float *scratch,
                       float *l2c_logits, const int *tokens, const int *seq, const int *pos, int P, int steps,
                       double *ours, double *theirs) {
    ModelConfig c = model->config;
    for (int s = -1; s < steps; s++) { // the step at position P, again and again (it overwrites its own cache entry)
        int zero = 0;
        double t0 = wall_seconds();
        gpt2_forward(model, tokens + P, seq, pos + P, 1, &zero, 1, 0);
        double t1 = wall_seconds();
        l2c_forward(w, l2c_keys, l2c_values, scratch, l2c_logits, tokens[P], P, c.num_layers, c.channels, c.num_heads,
                    c.max_seq_len, c.padded_vocab_size);
        double t2 = wall_seconds();
        if (s >= 0) { ours[s] = t1 - t0; theirs[s] = t2 - t1; }
    }
    qsort(ours, (size_t)steps, sizeof(double), compare_doubles);
    qsort(theirs, (size_t)steps, sizeof(double), compare_doubles);
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // as infer's main does, so that we time what it runs
    const char *descriptor = "d12";
    int steps = 10, busy = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-e") == 0) { descriptor = argv[i + 1]; }
        else if (strcmp(argv[i], "-n") == 0) { steps = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-y") == 0) { busy = atoi(argv[i + 1]); }
        else { fprintf(stderr, "usage: %s [-e d12] [-n 10] [-y 1 (also with a busy neighbour)]\n", argv[0]); return 1; }
    }
    if (steps < 1) { fprintf(stderr, "Error: -n must be positive\n"); return 1; }
    GPT2 model;
    gpt2_build(&model, descriptor, 1337);
    ModelConfig c = model.config;
    int L = c.num_layers, C = c.channels, NH = c.num_heads, maxT = c.max_seq_len, Vp = c.padded_vocab_size;
    // llama2.c-style code reads the weights as loaded, which gpt2_build lays out anew and lets
    // go: it gets the same random weights of its own (same descriptor and seed)
    GPT2Weights own;
    memset(&own, 0, sizeof(own));
    own.config = gpt2_config_from_descriptor(descriptor);
    gpt2_weights_allocate(&own);
    init_parameters(own.params_memory, own.param_sizes, own.config, 1337, 0);
    L2cWeights w;
    memcpy(&w, &own.params, sizeof(w)); // the same 16 pointers, in the same order
    float *l2c_keys = (float *)mallocCheck((size_t)L * maxT * C * sizeof(float));
    float *l2c_values = (float *)mallocCheck((size_t)L * maxT * C * sizeof(float));
    float *scratch = (float *)mallocCheck(((size_t)9 * C + (size_t)NH * maxT) * sizeof(float));
    float *l2c_logits = (float *)mallocCheck((size_t)Vp * sizeof(float));
    int *tokens = (int *)mallocCheck((size_t)maxT * sizeof(int)), *seq = (int *)calloc((size_t)maxT, sizeof(int));
    int *pos = (int *)mallocCheck((size_t)maxT * sizeof(int));
    for (int t = 0; t < maxT; t++) { tokens[t] = (int)(rng_uniform_at(7, (uint64_t)t) * c.vocab_size); pos[t] = t; }
    gpt2_allocate_cache(&model, 1, maxT);
    gpt2_allocate_rows(&model, maxT, 1);
    printf("decode step of %s (%.1fM parameters, %d threads, %s), median of %d steps after a warm-up;\n", descriptor,
           model.num_parameters / 1e6, num_threads(), wait_policy_in_effect(), steps);
    printf("'busy': the same with a busy neighbour, one process spinning on each core\n");
    printf("| position | infer.c ms | llama2.c-style ms | infer.c tok/s | llama2.c-style tok/s | speed-up | max logit diff |%s\n",
           busy ? " infer.c ms, busy | llama2.c-style ms, busy |" : "");
    printf("|---------:|-----------:|------------------:|--------------:|---------------------:|---------:|---------------:|%s\n",
           busy ? "-----------------:|------------------------:|" : "");
    const int positions[3] = {16, 256, maxT - 24 > 256 ? maxT - 24 : 257};
    double *ours = (double *)mallocCheck((size_t)steps * sizeof(double)), *theirs = (double *)mallocCheck((size_t)steps * sizeof(double));
    for (int k = 0; k < 3; k++) {
        int P = positions[k];
        if (P + 1 >= maxT) { continue; }
        // both caches hold positions 0..P-1 (ours by a prefill, theirs token by token)
        int last = P - 1;
        gpt2_forward(&model, tokens, seq, pos, P, &last, 1, 0);
        for (int t = 0; t < P; t++) { l2c_forward(&w, l2c_keys, l2c_values, scratch, l2c_logits, tokens[t], t, L, C, NH, maxT, Vp); }
        time_steps(&model, &w, l2c_keys, l2c_values, scratch, l2c_logits, tokens, seq, pos, P, steps, ours, theirs);
        float diff = 0.0f;
        for (int v = 0; v < c.vocab_size; v++) { diff = fmaxf(diff, fabsf(model.logits[v] - l2c_logits[v])); }
        double a = ours[steps / 2], b = theirs[steps / 2];
        printf("| %8d | %10.2f | %17.2f | %13.1f | %20.1f | %7.2fx | %14.2e |", P, 1e3 * a, 1e3 * b, 1 / a, 1 / b, b / a, diff);
        if (busy) {
            busy_neighbour_start();
            time_steps(&model, &w, l2c_keys, l2c_values, scratch, l2c_logits, tokens, seq, pos, P, steps, ours, theirs);
            busy_neighbour_stop();
            printf(" %16.2f | %23.2f |", 1e3 * ours[steps / 2], 1e3 * theirs[steps / 2]);
        }
        printf("\n");
        fflush(stdout);
    }
    gpt2_weights_free(&own);
    gpt2_free(&model);
    return 0;
}
