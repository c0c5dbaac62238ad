/*
Benchmark of one training step of train_gpt2.c (not a test: it prints a table).

Builds a randomly initialised GPT-2 of the given depth (d12 = GPT-2 small, 124M
parameters) and times forward, backward and the AdamW update on random tokens,
at B=4, T=64 by default (the shape llm.c's CPU trainer is usually quoted at).
Prints the median (and the fastest) of the timed steps, after one warm-up step; then
(unless -y 0) the same again while a busy neighbour, one process spinning on each core,
competes for the cores (dev/cpu/busy_neighbour.h).
On shared virtual machines step times vary by 10% or more from run to run: run
it a few times, and compare programs back to back.

    make bench_train_gpt2 && ./dev/cpu/bench_train_gpt2            # d12, B=4, T=64
    ./dev/cpu/bench_train_gpt2 -e d4 -b 8 -t 64 -n 20
*/
#define TESTING
#include "../../train_gpt2.c"
#include "busy_neighbour.h"

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof(double), compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `steps` training steps after `warmup` untimed ones and prints one row of the table.
static void time_steps(GPT2 *model, const int *inputs, const int *targets, int B, int T, int steps, int warmup,
                       const char *descriptor, const char *neighbour) {
    double *fwd = (double *)mallocCheck(steps * sizeof(double)), *bwd = (double *)mallocCheck(steps * sizeof(double));
    double *upd = (double *)mallocCheck(steps * sizeof(double)), *tot = (double *)mallocCheck(steps * sizeof(double));
    for (int s = -warmup; s < steps; s++) {
        double t0 = wall_seconds();
        gpt2_forward(model, inputs, targets, B, T);
        double t1 = wall_seconds();
        gpt2_zero_grad(model);
        gpt2_backward(model, 1.0f);
        double t2 = wall_seconds();
        float norm = gpt2_grad_norm(model);
        gpt2_update(model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0f ? 1.0f / norm : 1.0f, s + warmup + 1);
        double t3 = wall_seconds();
        if (s >= 0) { fwd[s] = t1 - t0; bwd[s] = t2 - t1; upd[s] = t3 - t2; tot[s] = t3 - t0; }
    }
    // the matmuls' FLOPs per step (2 per multiply-add; backward twice forward), over the whole step's time
    GPT2Config c = model->config;
    double N = (double)B * T, C = c.channels, L = c.num_layers;
    double flops = 3.0 * 2.0 * N * (L * 12.0 * C * C + C * c.padded_vocab_size);
    double t = median(tot, steps), fastest = tot[0]; // median() sorted tot
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("| %s | %.1fM | %d | %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", descriptor,
           model->num_parameters / 1e6, B, T, threads, neighbour, 1e3 * median(fwd, steps), 1e3 * median(bwd, steps),
           1e3 * median(upd, steps), 1e3 * t, 1e3 * fastest, flops / t / 1e9);
    fflush(stdout);
    free(fwd); free(bwd); free(upd); free(tot);
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // as train_gpt2's main does, so that we time what it runs
    const char *descriptor = "d12";
    int B = 4, T = 64, steps = 10, warmup = 1, busy = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-e") == 0) { descriptor = argv[i + 1]; }
        else if (strcmp(argv[i], "-b") == 0) { B = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-t") == 0) { T = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-n") == 0) { steps = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-y") == 0) { busy = atoi(argv[i + 1]); }
        else { fprintf(stderr, "usage: %s [-e d12] [-b 4] [-t 64] [-n 10] [-y 1 (also with a busy neighbour)]\n", argv[0]); return 1; }
    }
    if (B < 1 || T < 1 || steps < 1) { fprintf(stderr, "Error: -b, -t and -n must be positive\n"); return 1; }
    GPT2 model;
    gpt2_build_from_descriptor(&model, descriptor, 1337);
    int *inputs = (int *)mallocCheck((size_t)B * T * sizeof(int)), *targets = (int *)mallocCheck((size_t)B * T * sizeof(int));
    uint64_t rng = 42;
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int)(rng_next(&rng) % model.config.vocab_size);
        targets[i] = (int)(rng_next(&rng) % model.config.vocab_size);
    }
    printf("training step of %s, B=%d, T=%d; %s; 'busy': a busy neighbour, one process spinning on each core\n",
           descriptor, B, T, wait_policy_in_effect());
    printf("| model | params | B | T | threads | neighbour | forward ms | backward ms | update ms | step ms (median) | fastest | GFLOP/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    time_steps(&model, inputs, targets, B, T, steps, warmup, descriptor, "none");
    if (busy) {
        busy_neighbour_start();
        time_steps(&model, inputs, targets, B, T, steps, warmup, descriptor, "busy");
        busy_neighbour_stop();
    }
    free(inputs); free(targets);
    gpt2_free(&model);
    return 0;
}
