// Data parallelism on paper: the step time of train_gpt2cu_mpi on 1 to 1,024 GPUs, from a
// single GPU's compute and the published bandwidths of NVLink and InfiniBand, and where
// the gradients' communication stops hiding behind the backward pass.
//
//     make dev/scaling && ./dev/scaling                     GPT-2 1.5B, 1M-token steps, H100s
//     ./dev/scaling -n 124e6 -l 12 -d 524288 -s 300 -t 65536   your model, and a step you measured
//
// The model of a step on G GPUs (each with the tokens of 1/G of it):
//   compute  = tokens/G x (6 N + 12 L C T) FLOPs at the GPU's peak x MFU (PaLM's count, as
//              train_gpt2cu's MFU; or -s: a measured single-GPU step of -t tokens, scaled)
//   backward = 2/3 of compute (4 of the 6 FLOPs a parameter)
//   the gradients of each layer are reduce-scattered (ZeRO-1) or all-reduced (-Z 0) while
//   the layers below run backward: a ring moves (G-1)/G of the bytes (bf16: 2 a parameter)
//   through each GPU's link for a reduce-scatter, twice that for an all-reduce, in 2(G-1)
//   or (G-1) steps of latency each; on one machine (G <= 8) the link is NVLink, beyond it
//   the ring crosses machines and each GPU's InfiniBand rail is the bottleneck
//   hidden   = the communication of all layers but the last to finish (layer 0's), up to the
//              backward time of the layers that run beside it; the rest is exposed, and so
//              are the embeddings' sums (wte and wpe: V C + T C values, whose gradients are
//              whole only when the backward pass ends)
//   ZeRO-1 adds the all-gather of the updated weights after AdamW, exposed (train_gpt2cu
//   does not overlap it with the next forward pass)
// The published figures: H100 SXM bf16 dense 989.4 TFLOP/s; NVLink 4: 900 GB/s a GPU both
// ways, 450 each way, of which NCCL's all-reduce reaches a bus bandwidth near 360 GB/s on
// 8 GPUs (-b); InfiniBand NDR: 400 Gb/s a GPU (one rail each, DGX H100), 50 GB/s, ~45
// reached (-i); latencies about 5 us a ring step in a machine, 10 us across (-a, -A). llm.c's
// GPT-2 1.5B run (8 x H100, 1M-token steps) took about 2.8 s a step, which with this FLOP
// count is an MFU of 0.49, the default: on 8 GPUs the model then adds only its
// communication to llm.c's step (how much of a step it is, is the comparison).
// This is a model, not a measurement: NCCL's tree and NVLS algorithms beat the ring's
// latency at scale, and congestion, stragglers and the data loader are not in it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

typedef struct {
    double params, layers, channels, seq, vocab, tokens; // the model, T, the padded vocabulary, tokens a step
    double peak, mfu, step_ms, step_tokens;       // a GPU: peak FLOP/s and MFU, or a measured step
    double nvlink, ib, alpha_in, alpha_out;       // bus bandwidths (bytes/s) and ring-step latencies (s)
    int per_machine, zero;
} Setup;

static double arg(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "Error: flag %s needs a value\n", argv[*i]);
        exit(EXIT_FAILURE);
    }
    char *end;
    double v = strtod(argv[++*i], &end);
    if (*end != '\0' || !(v >= 0)) {
        fprintf(stderr, "Error: flag %s takes a number >= 0, got '%s'\n", argv[*i - 1], argv[*i]);
        exit(EXIT_FAILURE);
    }
    return v;
}

// seconds of one collective over G GPUs: a ring of `steps` steps moving `bytes` x (G-1)/G
// through each GPU's link (`factor` 1: reduce-scatter or all-gather; 2: all-reduce)
static double ring_seconds(const Setup *s, int G, double bytes, int factor) {
    if (G == 1) { return 0.0; }
    double bw = G <= s->per_machine ? s->nvlink : s->ib, alpha = G <= s->per_machine ? s->alpha_in : s->alpha_out;
    return factor * ((double)(G - 1) / G * bytes / bw + (G - 1) * alpha);
}

int main(int argc, char **argv) {
    Setup s = {1558e6, 48, 1600, 1024, 50304, 1048576, 989.4e12, 0.49, 0, 0, 360e9, 45e9, 5e-6, 10e-6, 8, 1};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0) { s.params = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-l") == 0) { s.layers = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-c") == 0) { s.channels = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-T") == 0) { s.seq = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-V") == 0) { s.vocab = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-d") == 0) { s.tokens = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-p") == 0) { s.peak = arg(argc, argv, &i) * 1e12; }
        else if (strcmp(argv[i], "-m") == 0) { s.mfu = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-s") == 0) { s.step_ms = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-t") == 0) { s.step_tokens = arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-b") == 0) { s.nvlink = arg(argc, argv, &i) * 1e9; }
        else if (strcmp(argv[i], "-i") == 0) { s.ib = arg(argc, argv, &i) * 1e9; }
        else if (strcmp(argv[i], "-a") == 0) { s.alpha_in = arg(argc, argv, &i) * 1e-6; }
        else if (strcmp(argv[i], "-A") == 0) { s.alpha_out = arg(argc, argv, &i) * 1e-6; }
        else if (strcmp(argv[i], "-g") == 0) { s.per_machine = (int)arg(argc, argv, &i); }
        else if (strcmp(argv[i], "-Z") == 0) { s.zero = (int)arg(argc, argv, &i); }
        else {
            printf("Usage: %s [options] (defaults: GPT-2 1.5B, 1M-token steps, H100 SXM machines of 8)\n"
                   "  -n <params> [1558e6]  -l <layers> [48]  -c <channels> [1600]  -T <sequence length> [1024]\n"
                   "  -V <padded vocabulary> [50304]\n"
                   "  -d <tokens a step> [1048576]\n"
                   "  -p <peak TFLOP/s> [989.4]  -m <MFU> [0.49: what llm.c's 2.8 s step on 8 GPUs implies]\n"
                   "  -s <ms> -t <tokens>: a measured single-GPU step of this many tokens instead of -p, -m\n"
                   "  -b <GB/s> NVLink bus bandwidth [360]  -i <GB/s> InfiniBand a GPU [45]\n"
                   "  -a <us> -A <us> ring-step latency in a machine and across [5, 10]  -g <GPUs a machine> [8]\n"
                   "  -Z <0|1> ZeRO-1's reduce-scatter + all-gather, or all-reduce [1]\n", argv[0]);
            return strcmp(argv[i], "-h") == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    if (s.layers < 1 || s.tokens <= 0 || s.params <= 0 || s.per_machine < 1 || s.zero > 1 || (s.step_ms > 0 && s.step_tokens <= 0) ||
        (s.step_ms == 0 && (s.peak <= 0 || s.mfu <= 0))) {
        fprintf(stderr, "Error: the model needs -n, -l, -d > 0, -g >= 1, -Z 0 or 1, and either -p and -m, or -s and -t\n");
        return EXIT_FAILURE;
    }
    double flops_per_token = 6.0 * s.params + 12.0 * s.layers * s.channels * s.seq;
    double seconds_per_token = s.step_ms > 0 ? s.step_ms / 1e3 / s.step_tokens : flops_per_token / (s.peak * s.mfu);
    double grad_bytes = 2.0 * s.params;                                 // bf16
    double embedding_bytes = 2.0 * (s.vocab + s.seq) * s.channels;     // wte, wpe
    if (embedding_bytes >= grad_bytes) {
        fprintf(stderr, "Error: the embeddings (-V, -T, -c) are more than the %g parameters (-n)\n", s.params);
        return EXIT_FAILURE;
    }
    printf("model: %.0fM parameters, %g layers, %.0f tokens a step (%.1f GFLOP a token) | one GPU: %s\n", s.params / 1e6,
           s.layers, s.tokens, flops_per_token / 1e9, s.step_ms > 0 ? "a measured step" : "peak x MFU");
    printf("communication: %s in bf16, per layer during the backward pass%s | NVLink %.0f GB/s, InfiniBand %.0f GB/s a GPU, "
           "%d GPUs a machine\n\n", s.zero ? "reduce-scatter" : "all-reduce", s.zero ? ", then the weights all-gathered" : "",
           s.nvlink / 1e9, s.ib / 1e9, s.per_machine);
    printf("%6s %10s %10s %10s %10s %10s %10s %12s %8s\n", "GPUs", "compute", "backward", "grad comm", "exposed",
           "gather", "step", "tokens/s", "scaling");
    double one_step = 0.0, eight_step = 0.0;
    int stops_hiding = 0;
    for (int G = 1; G <= 1024; G *= 2) {
        double compute = s.tokens / G * seconds_per_token, backward = compute * 2.0 / 3.0;
        double per_layer = ring_seconds(&s, G, (grad_bytes - embedding_bytes) / s.layers, s.zero ? 1 : 2);
        double embeddings = ring_seconds(&s, G, embedding_bytes, s.zero ? 1 : 2);
        double grads = per_layer * s.layers + embeddings;
        // all layers' sums but the last run beside the backward pass of the layers below
        double hidden = fmin(per_layer * (s.layers - 1), backward * (s.layers - 1) / s.layers);
        double exposed = grads - hidden;
        double gather = s.zero ? ring_seconds(&s, G, grad_bytes, 1) : 0.0;
        double step = compute + exposed + gather;
        if (G == 1) { one_step = step; }
        if (G == 8) { eight_step = step; }
        if (!stops_hiding && G > 1 && per_layer * (s.layers - 1) > backward * (s.layers - 1) / s.layers) { stops_hiding = G; }
        printf("%6d %8.1f ms %8.1f ms %8.1f ms %8.1f ms %8.1f ms %8.1f ms %12.0f %7.0f%%\n", G, compute * 1e3, backward * 1e3,
               grads * 1e3, exposed * 1e3, gather * 1e3, step * 1e3, s.tokens / step, 100.0 * one_step / (G * step));
    }
    if (stops_hiding) {
        printf("\nthe gradients' communication stops hiding behind the backward pass at %d GPUs (each layer's sums take longer than"
               " a layer's backward pass)\n", stops_hiding);
    } else {
        printf("\nthe gradients' communication hides behind the backward pass at every size here but for the last layer's\n");
    }
    if (s.params == 1558e6 && s.tokens == 1048576 && s.step_ms == 0) {
        printf("llm.c's GPT-2 1.5B on 8 x H100 (its published run): about 2.8 s a 1M-token step; this model: %.2f s at MFU %.2f\n",
               eight_step, s.mfu);
    }
    return EXIT_SUCCESS;
}
