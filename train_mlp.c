/*
train_mlp.c: a neural network by hand, on Fashion-MNIST, on the CPU, in plain C.

The first chapter of the book. A multi-layer perceptron (fully connected layers,
ReLU or tanh between them, softmax + cross-entropy at the end) trained with
mini-batch SGD, SGD with momentum or AdamW. Every number is visible: the forward
pass, the hand-written backward pass, the optimizer update. Around it, the
experiments of the chapter on diagnosing training: a gradient check against
finite differences, a learning-rate sweep, an overfitting run on a small subset,
validation curves, and at the end the test accuracy, the confusion matrix and the
classes the network confuses most.

What it leaves out on purpose: convolutions (this is the MLP chapter), data
augmentation, batch norm. The GPU version is train_mlp.cu.

Data: Fashion-MNIST (Xiao, Rasul, Vollgraf 2017; MIT license): 60,000 training
and 10,000 test images of 28x28 grey pixels, 10 classes, as gzip'd idx files:
    apt-get install dataset-fashion-mnist     # Debian: /usr/share/datasets/fashion-mnist
or download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from the dataset's site
into a folder and pass it with -d. 5,000 training images (chosen with the seed)
are held out for validation; the test set is used once, for the final report.

Build and run:
    make train_mlp && ./train_mlp                 # 784-512-256-10, AdamW
    ./train_mlp -h                                # every flag and its default
    ./train_mlp --gradcheck                       # backward vs finite differences
    ./train_mlp --sweep 1e-4,1e-3,1e-2,1e-1,1     # learning-rate sweep
Checked against dev/reference/mlp_reference.py (numpy, cross-checked with torch
autograd) by test_mlp.c; regenerate its fixture with make reference.

Sizes: B batch size, L number of weight layers, IN / OUT a layer's input and
output width. A layer's backward WRITES the gradient of its input (=) and
ACCUMULATES (+=) into its parameter gradients.
*/

// fsync, M_PI, access and mkdir are POSIX / X/Open, not ISO C
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define PROGRAM "./train_mlp" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/gemm.h"
#include "lib/phases.h"

// ----------------------------------------------------------------------------
// the random streams (the generator is lib/rand.h's)

// The random streams of this program (see rng_key): each a function of the seed,
// so a resumed run draws exactly what an uninterrupted one would have.
#define STREAM_INIT 0       // index: layer; weights
#define STREAM_SPLIT 1      // which training images are held out for validation
#define STREAM_EPOCH 2      // index: epoch; the order of the training images
#define STREAM_DROPOUT 3    // index: step * MAX_LAYERS + layer; dropout masks
#define STREAM_GRADCHECK 4  // the gradient check's random network and inputs

// ----------------------------------------------------------------------------
// the layers, forward and backward

// The matrix multiply the linear layers call is lib/gemm.h's blocked GEMM (most of the
// time goes there): here, what each layer computes; there, how it is made fast.

// out (B, OUT) = inp (B, IN) @ weight^T + bias, weight (OUT, IN) as in nn.Linear
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, size_t B, size_t IN, size_t OUT) {
    #pragma omp parallel for if (B * OUT > 65536)
    for (size_t b = 0; b < B; b++) {
        for (size_t o = 0; o < OUT; o++) { out[b * OUT + o] = bias[o]; }
    }
    gemm(out, OUT, 1, inp, IN, 1, weight, 1, IN, (int)B, (int)OUT, (int)IN, 1);
}

// dinp (B, IN) = dout @ weight (written, skipped when dinp is NULL: the input
// layer needs no gradient); dweight += dout^T @ inp; dbias += column sums of dout
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, size_t B, size_t IN, size_t OUT) {
    if (dinp != NULL) { gemm(dinp, IN, 1, dout, OUT, 1, weight, IN, 1, (int)B, (int)IN, (int)OUT, 0); }
    gemm(dweight, IN, 1, dout, 1, OUT, inp, IN, 1, (int)OUT, (int)IN, (int)B, 1);
    // column sums, walking along rows (64 columns at a time) rather than down columns
    #pragma omp parallel for if (B * OUT > 65536)
    for (size_t o0 = 0; o0 < OUT; o0 += 64) {
        size_t width = OUT - o0 < 64 ? OUT - o0 : 64;
        float sum[64] = {0};
        for (size_t b = 0; b < B; b++) {
            for (size_t o = 0; o < width; o++) { sum[o] += dout[b * OUT + o0 + o]; }
        }
        for (size_t o = 0; o < width; o++) { dbias[o0 + o] += sum[o]; }
    }
}

enum { ACT_RELU, ACT_TANH };

// the non-linearity between layers, elementwise: ReLU max(0, z) or tanh(z)
void activation_forward(float *out, const float *inp, size_t N, int act) {
    #pragma omp parallel for if (N > 65536)
    for (size_t i = 0; i < N; i++) { out[i] = act == ACT_RELU ? (inp[i] > 0.0f ? inp[i] : 0.0f) : tanhf(inp[i]); }
}

// dinp = dout * act'(z): ReLU' is 1 where z > 0 (0 at the kink, as PyTorch),
// tanh' = 1 - tanh(z)^2, computed from the saved output
void activation_backward(float *dinp, const float *dout, const float *inp, const float *out, size_t N, int act) {
    #pragma omp parallel for if (N > 65536)
    for (size_t i = 0; i < N; i++) {
        dinp[i] = act == ACT_RELU ? (inp[i] > 0.0f ? dout[i] : 0.0f) : dout[i] * (1.0f - out[i] * out[i]);
    }
}

// Inverted dropout (Srivastava et al. 2014): keep each unit with probability
// 1-p and scale the kept ones by 1/(1-p), so nothing changes at evaluation time.
// The mask is stored (0 or 1/(1-p)) for the backward pass.
void dropout_forward(float *out, float *mask, const float *inp, size_t N, float p, uint64_t key) {
    float scale = 1.0f / (1.0f - p);
    #pragma omp parallel for if (N > 65536)
    for (size_t i = 0; i < N; i++) {
        mask[i] = rng_uniform_at(key, i) >= p ? scale : 0.0f;
        out[i] = inp[i] * mask[i];
    }
}

// Softmax + cross-entropy, mean over the batch. Subtracting the row's max before
// exp keeps it from overflowing; log-sum-exp gives the loss without log(0).
// Writes dlogits = (softmax - onehot) / B and returns the mean loss; counts the
// correct predictions into *correct.
float softmax_crossentropy(float *dlogits, float *probs, const float *logits, const int *labels, size_t B, size_t K,
                           int *correct) {
    double loss = 0.0;
    int right = 0;
    for (size_t b = 0; b < B; b++) {
        const float *z = logits + b * K;
        float *p = probs + b * K;
        size_t argmax = 0;
        for (size_t k = 1; k < K; k++) { if (z[k] > z[argmax]) { argmax = k; } }
        double sum = 0.0;
        for (size_t k = 0; k < K; k++) { sum += exp((double)z[k] - z[argmax]); }
        double logsumexp = z[argmax] + log(sum);
        loss += logsumexp - z[labels[b]];
        for (size_t k = 0; k < K; k++) { p[k] = (float)exp(z[k] - logsumexp); }
        if (dlogits != NULL) {
            for (size_t k = 0; k < K; k++) { dlogits[b * K + k] = (p[k] - (k == (size_t)labels[b] ? 1.0f : 0.0f)) / (float)B; }
        }
        right += argmax == (size_t)labels[b];
    }
    if (correct != NULL) { *correct = right; }
    return (float)(loss / B);
}

// ----------------------------------------------------------------------------
// the model

#define MAX_LAYERS 8

typedef struct {
    int num_layers;            // L weight layers
    int sizes[MAX_LAYERS + 1]; // sizes[0] = 784 inputs ... sizes[L] = 10 classes
    int act;                   // ACT_RELU or ACT_TANH between layers
    float dropout;             // probability of dropping a hidden unit while training
    size_t num_params;
    float *params;             // one block: W_0 (sizes[1], sizes[0]), b_0 (sizes[1]), W_1, b_1, ...
    float *grads;              // the same layout
    float *W[MAX_LAYERS], *b[MAX_LAYERS], *dW[MAX_LAYERS], *db[MAX_LAYERS];
    float *opt_m, *opt_v;      // optimizer state, same layout; allocated on the first update
    // activations for batches of up to max_batch
    size_t max_batch;
    float *acts;               // one block for all of the below
    float *h[MAX_LAYERS + 1];  // h[0] input (B, sizes[0]); h[i] the input of layer i after activation and dropout
    float *z[MAX_LAYERS];      // z[i] (B, sizes[i+1]) layer i's output before the activation
    float *a[MAX_LAYERS];      // a[i] after the activation (before dropout)
    float *mask[MAX_LAYERS];   // dropout masks
    float *probs;              // (B, 10)
    float *dz, *dh;            // scratch: the gradient at a layer's output and input, (B, widest)
} MLP;

void mlp_build(MLP *m, const int *sizes, int num_layers, int act, float dropout) {
    memset(m, 0, sizeof(*m));
    m->num_layers = num_layers;
    memcpy(m->sizes, sizes, (num_layers + 1) * sizeof(int));
    m->act = act;
    m->dropout = dropout;
    for (int l = 0; l < num_layers; l++) { m->num_params += (size_t)sizes[l + 1] * sizes[l] + sizes[l + 1]; }
    m->params = (float *)mallocCheck(m->num_params * sizeof(float));
    m->grads = (float *)mallocCheck(m->num_params * sizeof(float));
    memset(m->grads, 0, m->num_params * sizeof(float));
    size_t off = 0;
    for (int l = 0; l < num_layers; l++) {
        m->W[l] = m->params + off;
        m->dW[l] = m->grads + off;
        off += (size_t)sizes[l + 1] * sizes[l];
        m->b[l] = m->params + off;
        m->db[l] = m->grads + off;
        off += sizes[l + 1];
    }
}

// Weights: He initialisation for ReLU, N(0, 2/IN) (He et al. 2015), Xavier for
// tanh, N(0, 1/IN) (Glorot & Bengio 2010, the fan-in form); biases 0. Stream
// STREAM_INIT of the seed, indexed by layer.
void mlp_init(MLP *m, uint64_t seed) {
    for (int l = 0; l < m->num_layers; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        double std = sqrt((m->act == ACT_RELU ? 2.0 : 1.0) / in);
        uint64_t key = rng_subkey(seed, STREAM_INIT, (uint64_t)l);
        for (size_t i = 0; i < out * in; i++) { m->W[l][i] = (float)(std * rng_normal_at(key, i)); }
        memset(m->b[l], 0, out * sizeof(float));
    }
}

// how many floats the activations of batch B take
size_t mlp_activation_floats(const int *sizes, int L, size_t B) {
    size_t widest = 0, total = B * sizes[0];
    for (int l = 0; l <= L; l++) { widest = (size_t)sizes[l] > widest ? (size_t)sizes[l] : widest; }
    for (int l = 0; l < L; l++) { total += 4 * B * sizes[l + 1]; } // z, a, mask, h[l+1]
    return total + B * sizes[L] + 2 * B * widest;                 // probs, dz, dh
}

static void mlp_allocate_activations(MLP *m, size_t B) {
    size_t widest = 0;
    for (int l = 0; l <= m->num_layers; l++) { widest = (size_t)m->sizes[l] > widest ? (size_t)m->sizes[l] : widest; }
    free(m->acts);
    m->acts = (float *)mallocCheck(mlp_activation_floats(m->sizes, m->num_layers, B) * sizeof(float));
    float *p = m->acts;
    m->h[0] = p;
    p += B * m->sizes[0];
    for (int l = 0; l < m->num_layers; l++) {
        size_t n = B * m->sizes[l + 1];
        m->z[l] = p; p += n;
        m->a[l] = p; p += n;
        m->mask[l] = p; p += n;
        m->h[l + 1] = p; p += n;
    }
    m->probs = p; p += B * m->sizes[m->num_layers];
    m->dz = p; p += B * widest;
    m->dh = p;
    m->max_batch = B;
}

// Forward pass of x (B, sizes[0]) already in h[0]. With train = 1 dropout is on,
// its masks drawn from (seed, step). Returns the mean loss; logits end in z[L-1].
float mlp_forward(MLP *m, const int *labels, size_t B, int train, uint64_t seed, uint64_t step, int *correct) {
    int L = m->num_layers;
    for (int l = 0; l < L; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        linear_forward(m->z[l], m->h[l], m->W[l], m->b[l], B, in, out);
        if (l == L - 1) { break; } // the last layer's output are the logits
        activation_forward(m->a[l], m->z[l], B * out, m->act);
        if (train && m->dropout > 0.0f) {
            dropout_forward(m->h[l + 1], m->mask[l], m->a[l], B * out, m->dropout,
                            rng_subkey(seed, STREAM_DROPOUT, step * MAX_LAYERS + l));
        } else {
            memcpy(m->h[l + 1], m->a[l], B * out * sizeof(float));
        }
    }
    return softmax_crossentropy(train ? m->dz : NULL, m->probs, m->z[L - 1], labels, B, m->sizes[L], correct);
}

// Backward pass of the last training forward: dz holds dloss/dlogits. Parameter
// gradients accumulate; zero them before a step (mlp_zero_grad).
void mlp_backward(MLP *m, size_t B) {
    int L = m->num_layers;
    for (int l = L - 1; l >= 0; l--) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        // dz: gradient at layer l's output z[l]; dh becomes the gradient at its input h[l]
        linear_backward(l > 0 ? m->dh : NULL, m->dW[l], m->db[l], m->dz, m->h[l], m->W[l], B, in, out);
        if (l == 0) { break; }
        // back through dropout (multiply by the same mask) and the activation of layer l-1
        if (m->dropout > 0.0f) {
            for (size_t i = 0; i < B * in; i++) { m->dh[i] *= m->mask[l - 1][i]; }
        }
        activation_backward(m->dz, m->dh, m->z[l - 1], m->a[l - 1], B * in, m->act);
    }
}

void mlp_zero_grad(MLP *m) { memset(m->grads, 0, m->num_params * sizeof(float)); }

// the logits (B, 10) of the last forward pass, in host memory
const float *mlp_logits(MLP *m, size_t B) {
    (void)B;
    return m->z[m->num_layers - 1];
}

// Nothing to copy: on the CPU the parameters and optimizer state already live in
// host memory, where checkpoints are written from and read into. (train_mlp.cu
// copies them between the GPU and the host here.)
void mlp_to_host(MLP *m) { (void)m; }
void mlp_to_device(MLP *m) { (void)m; }

void mlp_free(MLP *m) {
    free(m->params);
    free(m->grads);
    free(m->opt_m);
    free(m->opt_v);
    free(m->acts);
}

// ----------------------------------------------------------------------------
// data: Fashion-MNIST's gzip'd idx files

// --- begin shared-copy: mlp-data ---
// idx: a big-endian header (magic, then one uint32 per dimension), then the
// data as unsigned bytes. 2051 = images (n, rows, cols), 2049 = labels (n).
#define IDX_IMAGES 2051
#define IDX_LABELS 2049
#define DATA_HINT "HINT: apt-get install dataset-fashion-mnist (Debian), or download the four *-ubyte.gz files of Fashion-MNIST into a folder and pass it with -d"
#define NUM_CLASSES 10
static const char *CLASS_NAMES[NUM_CLASSES] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Read exactly n bytes from a gzip stream, or exit naming the file.
static void gz_read_exact(gzFile gz, void *buf, size_t n, const char *path, const char *what) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(gz, (char *)buf + got, chunk);
        if (r <= 0) {
            int err;
            const char *msg = gzerror(gz, &err);
            fprintf(stderr, "Error: %s: %s after %zu of %zu bytes of %s%s%s\n%s\n", path,
                    r == 0 ? "file ends" : "cannot decompress", got, n, what, err != Z_OK ? ": " : "",
                    err != Z_OK ? msg : "", DATA_HINT);
            exit(EXIT_FAILURE);
        }
        got += (size_t)r;
    }
}

// Load one idx.gz file; dims receives its dimensions (3 for images, 1 for labels).
static uint8_t *load_idx_gz(const char *path, int magic, int ndims, uint32_t *dims) {
    gzFile gz = gzopen(path, "rb");
    if (gz == NULL) {
        fprintf(stderr, "Error: cannot open '%s': %s\n%s\n", path, errno ? strerror(errno) : "out of memory", DATA_HINT);
        exit(EXIT_FAILURE);
    }
    uint8_t header[16];
    gz_read_exact(gz, header, 4 + 4 * (size_t)ndims, path, "the idx header");
    uint32_t found = (uint32_t)header[0] << 24 | (uint32_t)header[1] << 16 | (uint32_t)header[2] << 8 | header[3];
    if (found != (uint32_t)magic) {
        fprintf(stderr, "Error: %s: bad idx magic number: expected %d (%s), found %u\n%s\n", path, magic,
                magic == IDX_IMAGES ? "images" : "labels", found, DATA_HINT);
        exit(EXIT_FAILURE);
    }
    size_t total = 1;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *h = header + 4 + 4 * d;
        dims[d] = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        total *= dims[d] < (1u << 24) ? dims[d] : 0; // each dimension below 2^24: no product can overflow
    }
    // checked before allocating anything: a corrupt header must not ask for gigabytes
    if (total == 0 || dims[0] > 10000000u || (ndims == 3 && (dims[1] != 28 || dims[2] != 28))) {
        fprintf(stderr, "Error: %s: idx dimensions", path);
        for (int d = 0; d < ndims; d++) { fprintf(stderr, " %u", dims[d]); }
        fprintf(stderr, " do not fit Fashion-MNIST (up to 10^7 %s)\n%s\n", ndims == 3 ? "28x28 images" : "labels", DATA_HINT);
        exit(EXIT_FAILURE);
    }
    uint8_t *data = (uint8_t *)mallocCheck(total);
    gz_read_exact(gz, data, total, path, "data");
    char extra;
    int r = gzread(gz, &extra, 1);
    if (r != 0) {
        int err;
        fprintf(stderr, "Error: %s: %s\n%s\n", path, r > 0 ? "more data than its header says: corrupt" : gzerror(gz, &err), DATA_HINT);
        exit(EXIT_FAILURE);
    }
    gzclose(gz);
    return data;
}

typedef struct {
    size_t n;          // number of images
    size_t dim;        // pixels per image: 784
    uint8_t *pixels;   // (n, dim)
    uint8_t *labels;   // (n)
} Dataset;

// Load images + labels of one split ("train" or "t10k") from dir, checking that
// they agree with each other and with what the network expects.
void dataset_load(Dataset *ds, const char *dir, const char *split) {
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof(ipath), "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lpath, sizeof(lpath), "%s/%s-labels-idx1-ubyte.gz", dir, split);
    uint32_t idims[3], ldims[1];
    ds->pixels = load_idx_gz(ipath, IDX_IMAGES, 3, idims);
    ds->labels = load_idx_gz(lpath, IDX_LABELS, 1, ldims);
    if (idims[0] != ldims[0]) {
        fprintf(stderr, "Error: %s has %u images but %s has %u labels\n%s\n", ipath, idims[0], lpath, ldims[0], DATA_HINT);
        exit(EXIT_FAILURE);
    }
    ds->n = idims[0];
    ds->dim = (size_t)idims[1] * idims[2];
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->labels[i] >= NUM_CLASSES) {
            fprintf(stderr, "Error: %s: label %zu is %d, not a class 0..9\n%s\n", lpath, i, ds->labels[i], DATA_HINT);
            exit(EXIT_FAILURE);
        }
    }
}

void dataset_free(Dataset *ds) {
    free(ds->pixels);
    free(ds->labels);
}

// Inputs as the network sees them: pixel / 255, in [0, 1].
static void gather_batch(float *x, int *y, const Dataset *ds, const size_t *indices, size_t B) {
    for (size_t b = 0; b < B; b++) {
        const uint8_t *img = ds->pixels + indices[b] * ds->dim;
        for (size_t i = 0; i < ds->dim; i++) { x[b * ds->dim + i] = img[i] * (1.0f / 255.0f); }
        y[b] = ds->labels[indices[b]];
    }
}
// --- end shared-copy: mlp-data ---

// The next batch: images `indices` of ds into the input h[0], their labels into
// labels. (train_mlp.cu gathers on the GPU instead; the training loop is the same.)
void mlp_set_batch(MLP *m, int *labels, const Dataset *ds, const size_t *indices, size_t B) {
    gather_batch(m->h[0], labels, ds, indices, B);
}

// ----------------------------------------------------------------------------
// optimizers and the learning-rate schedule

// --- begin shared-copy: mlp-optimizer ---
enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAMW };
static const char *OPT_NAMES[] = {"sgd", "momentum", "adamw"};

typedef struct {
    int kind;
    float lr, weight_decay, momentum, beta1, beta2, eps;
} Optimizer;

// constant, or linear warm-up then a cosine from lr to 0 over total steps
float get_lr(int schedule_cosine, float lr, int step, int warmup, int total) {
    if (step < warmup) { return lr * (step + 1) / warmup; }
    if (!schedule_cosine || total <= warmup) { return lr; }
    float progress = (float)(step - warmup) / (float)(total - warmup);
    return 0.5f * lr * (1.0f + cosf((float)M_PI * progress));
}
// --- end shared-copy: mlp-optimizer ---

// One update of every parameter, t = number of this update (from 1). Weight
// decay applies to the weights W only, never to biases. Each follows PyTorch:
//   sgd       g += wd p;  p -= lr g                                (torch.optim.SGD)
//   momentum  g += wd p;  buf = mu buf + g (buf = g at t = 1);  p -= lr buf
//   adamw     p *= 1 - lr wd;  m, v moving averages of g, g^2;
//             p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)  (torch.optim.AdamW)
void mlp_update(MLP *m, const Optimizer *opt, float lr, int t) {
    if (opt->kind != OPT_SGD && m->opt_m == NULL) { // lazily: evaluation never pays for it
        m->opt_m = (float *)mallocCheck(m->num_params * sizeof(float));
        memset(m->opt_m, 0, m->num_params * sizeof(float));
    }
    if (opt->kind == OPT_ADAMW && m->opt_v == NULL) {
        m->opt_v = (float *)mallocCheck(m->num_params * sizeof(float));
        memset(m->opt_v, 0, m->num_params * sizeof(float));
    }
    // bias corrections in double, as torch computes them (in Python floats)
    float bc1 = (float)(1.0 - pow(opt->beta1, t)), sqrt_bc2 = (float)sqrt(1.0 - pow(opt->beta2, t));
    // in locals: the compiler cannot prove that writing p[i] leaves *opt unchanged
    const float b1 = opt->beta1, b2 = opt->beta2, eps = opt->eps, mu = opt->momentum;
    for (int l = 0; l < m->num_layers; l++) {
        for (int is_bias = 0; is_bias < 2; is_bias++) {
            float *p = is_bias ? m->b[l] : m->W[l];
            size_t offset = (size_t)(p - m->params);
            const float *g = m->grads + offset;
            float *buf = m->opt_m != NULL ? m->opt_m + offset : NULL, *v = m->opt_v != NULL ? m->opt_v + offset : NULL;
            size_t n = is_bias ? (size_t)m->sizes[l + 1] : (size_t)m->sizes[l + 1] * m->sizes[l];
            float wd = is_bias ? 0.0f : opt->weight_decay;
            // one loop per optimizer, each simple enough for the compiler to vectorise
            if (opt->kind == OPT_ADAMW) {
                float decay = 1.0f - lr * wd, step_size = lr / bc1;
                #pragma omp parallel for if (n > 65536)
                for (size_t i = 0; i < n; i++) {
                    buf[i] = b1 * buf[i] + (1.0f - b1) * g[i];
                    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
                    p[i] = p[i] * decay - step_size * buf[i] / (sqrtf(v[i]) / sqrt_bc2 + eps);
                }
            } else if (opt->kind == OPT_MOMENTUM) {
                #pragma omp parallel for if (n > 65536)
                for (size_t i = 0; i < n; i++) {
                    float gi = g[i] + wd * p[i];
                    buf[i] = t == 1 ? gi : mu * buf[i] + gi;
                    p[i] -= lr * buf[i];
                }
            } else {
                #pragma omp parallel for if (n > 65536)
                for (size_t i = 0; i < n; i++) { p[i] -= lr * (g[i] + wd * p[i]); }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// checkpoints: weights, optimizer state, position, written atomically

// --- begin shared-copy: mlp-checkpoint-format ---
// A header of 256 int32 (magic, version, layer sizes, activation, optimizer,
// epochs done, updates done, seed), then the parameters, then the optimizer's
// buffers (momentum: m; AdamW: m and v), all float32.
#define CKPT_MAGIC 20261202
#define CKPT_VERSION 1
#define CKPT_HINT "HINT: train_mlp -o DIR writes checkpoints (mlp_<epoch>.bin) into DIR after every epoch"

typedef struct {
    int epoch; // epochs completed
    int step;  // updates completed
} Position;
// --- end shared-copy: mlp-checkpoint-format ---

// --- begin shared-copy: mlp-checkpoint ---
static int optimizer_buffers(int kind) { return kind == OPT_ADAMW ? 2 : kind == OPT_MOMENTUM ? 1 : 0; }

// Everything besides the network and the optimizer kind that a resumed run must
// share with the first one to continue it exactly (stored in the header).
typedef struct {
    float lr, weight_decay, momentum, dropout;
    int batch, epochs, warmup, cosine, subset, val_size;
} CheckpointSettings;

void mlp_save(MLP *m, const Optimizer *opt, Position pos, uint64_t seed, const CheckpointSettings *settings,
              const char *path) {
    mlp_to_host(m);
    int header[256] = {0};
    header[0] = CKPT_MAGIC;
    header[1] = CKPT_VERSION;
    header[2] = m->num_layers;
    for (int l = 0; l <= m->num_layers; l++) { header[3 + l] = m->sizes[l]; }
    header[20] = m->act;
    header[21] = opt->kind;
    header[22] = pos.epoch;
    header[23] = pos.step;
    header[24] = (int)(uint32_t)seed;
    header[25] = (int)(uint32_t)(seed >> 32);
    int nbuf = m->opt_m != NULL ? optimizer_buffers(opt->kind) : 0;
    header[26] = nbuf;
    size_t bytes = m->num_params * sizeof(float);
    // the settings that decide what the next update is: a resume must use the same
    memcpy(&header[30], settings, sizeof(CheckpointSettings));
    const void *bufs[4] = {header, m->params, m->opt_m, m->opt_v};
    size_t sizes[4] = {sizeof(header), bytes, nbuf >= 1 ? bytes : 0, nbuf >= 2 ? bytes : 0};
    write_file_atomic(path, bufs, sizes, 4);
}

// Load a checkpoint into m (built with the same sizes) and check it matches the
// flags; steps_per_epoch tells which update count the epoch count implies.
Position mlp_load(MLP *m, const Optimizer *opt, uint64_t seed, const CheckpointSettings *settings, int steps_per_epoch,
                  const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256 || header[0] != CKPT_MAGIC || header[1] != CKPT_VERSION) {
        fprintf(stderr, "Error: %s: not a train_mlp checkpoint (expected magic %d version %d)\n%s\n", path, CKPT_MAGIC,
                CKPT_VERSION, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    int same = header[2] == m->num_layers && header[20] == m->act && header[21] == opt->kind &&
               header[24] == (int)(uint32_t)seed && header[25] == (int)(uint32_t)(seed >> 32);
    for (int l = 0; same && l <= m->num_layers; l++) { same = header[3 + l] == m->sizes[l]; }
    if (!same) {
        fprintf(stderr, "Error: %s was written with other -l/-a/-O/-s flags than this run's\nHINT: resume with the same flags\n", path);
        exit(EXIT_FAILURE);
    }
    CheckpointSettings stored;
    memcpy(&stored, &header[30], sizeof(stored));
    if (memcmp(&stored, settings, sizeof(stored)) != 0) {
        fprintf(stderr, "Error: %s was written with -r %g -w %g -m %g -p %g -b %d -e %d -u %d -c %s -N %d -v %d;"
                " this run has -r %g -w %g -m %g -p %g -b %d -e %d -u %d -c %s -N %d -v %d\n"
                "HINT: resume with the same flags (to train longer, start a new run from scratch)\n", path, stored.lr,
                stored.weight_decay, stored.momentum, stored.dropout, stored.batch, stored.epochs, stored.warmup,
                stored.cosine ? "cosine" : "const", stored.subset, stored.val_size, settings->lr, settings->weight_decay,
                settings->momentum, settings->dropout, settings->batch, settings->epochs, settings->warmup,
                settings->cosine ? "cosine" : "const", settings->subset, settings->val_size);
        exit(EXIT_FAILURE);
    }
    int nbuf = header[26];
    if (nbuf != optimizer_buffers(opt->kind) || header[22] < 1 || header[23] != header[22] * steps_per_epoch) {
        fprintf(stderr, "Error: %s: corrupt header (%d optimizer buffers for %s, epoch %d, step %d; expected %d buffers"
                " and %d steps per epoch)\n%s\n", path, nbuf, OPT_NAMES[opt->kind], header[22], header[23],
                optimizer_buffers(opt->kind), steps_per_epoch, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    size_t bytes = m->num_params * sizeof(float);
    long expected = (long)(sizeof(header) + (1 + (size_t)nbuf) * bytes), actual = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { actual = ftell(fp); }
    if (nbuf < 0 || nbuf > 2 || actual != expected || fseek(fp, sizeof(header), SEEK_SET) != 0) {
        fprintf(stderr, "Error: %s: has %ld bytes, expected %ld: truncated or corrupt\n%s\n", path, actual, expected, CKPT_HINT);
        exit(EXIT_FAILURE);
    }
    freadCheck(m->params, 1, bytes, fp);
    if (nbuf >= 1) {
        m->opt_m = (float *)mallocCheck(bytes);
        freadCheck(m->opt_m, 1, bytes, fp);
    }
    if (nbuf == 2) {
        m->opt_v = (float *)mallocCheck(bytes);
        freadCheck(m->opt_v, 1, bytes, fp);
    }
    fcloseCheck(fp);
    mlp_to_device(m);
    Position pos = {header[22], header[23]};
    return pos;
}
// --- end shared-copy: mlp-checkpoint ---

// --- begin shared-copy: mlp-training ---
// the newest checkpoint mlp_<epoch>.bin in dir, or -1
int find_latest_checkpoint(const char *dir) {
    char pattern[4200];
    snprintf(pattern, sizeof(pattern), "%s/mlp_*.bin", dir);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int e;
            if (sscanf(strrchr(g.gl_pathv[i], '/') + 1, "mlp_%d.bin", &e) == 1 && e > latest) { latest = e; }
        }
        globfree(&g);
    }
    return latest;
}

// ----------------------------------------------------------------------------
// training and evaluation

// Loss and accuracy over a set of images (indices into ds), batch by batch; with
// a confusion matrix (rows: true class, columns: predicted) if one is given.
void evaluate(MLP *m, const Dataset *ds, const size_t *indices, size_t n, float *loss, float *acc, int *confusion) {
    double total_loss = 0.0;
    size_t right = 0;
    int *labels = (int *)mallocCheck(m->max_batch * sizeof(int));
    for (size_t start = 0; start < n; start += m->max_batch) {
        size_t B = n - start < m->max_batch ? n - start : m->max_batch;
        int correct;
        mlp_set_batch(m, labels, ds, indices + start, B);
        total_loss += mlp_forward(m, labels, B, 0, 0, 0, &correct) * (double)B;
        right += (size_t)correct;
        if (confusion != NULL) {
            const float *logits = mlp_logits(m, B);
            for (size_t b = 0; b < B; b++) {
                int best = 0;
                for (int k = 1; k < NUM_CLASSES; k++) { if (logits[b * NUM_CLASSES + k] > logits[b * NUM_CLASSES + best]) { best = k; } }
                confusion[labels[b] * NUM_CLASSES + best]++;
            }
        }
    }
    free(labels);
    *loss = (float)(total_loss / n);
    *acc = (float)right / n;
}

typedef struct {
    const char *data_dir, *layers, *out_dir, *sweep;
    int act, opt, batch, epochs, warmup, cosine, subset, val_size, resume, sweep_steps, phase_every;
    float lr, weight_decay, momentum, dropout;
    uint64_t seed;
} Options;

// Train from `pos` to o->epochs epochs over the images train_idx; validation
// loss and accuracy after every epoch; a checkpoint and a metrics line per epoch
// when there is an output directory.
void train(MLP *m, const Optimizer *opt, const Options *o, const CheckpointSettings *settings, const Dataset *ds,
           const size_t *train_idx, size_t n_train, const size_t *val_idx, size_t n_val, Position pos, FILE *metrics) {
    size_t B = (size_t)o->batch, steps_per_epoch = (n_train + B - 1) / B;
    int total_steps = (int)(steps_per_epoch * o->epochs);
    size_t *order = (size_t *)mallocCheck(n_train * sizeof(size_t)), *batch_idx = (size_t *)mallocCheck(B * sizeof(size_t));
    int *labels = (int *)mallocCheck(B * sizeof(int));
    double run_start = wall_seconds();
    int first_epoch = pos.epoch; // (a resumed run's ETA counts the epochs it runs)
    Phases ph; // -P: a step's phases; an epoch's line gives the measured steps' mean
    memset(&ph, 0, sizeof(ph));
    ph.every = o->phase_every;
    for (int epoch = pos.epoch; epoch < o->epochs; epoch++) {
        double t0 = wall_seconds(), loss_sum = 0.0;
        double phase_ms[NUM_PHASES] = {0}, host_ms[NUM_PHASES] = {0}, measured_ms = 0.0;
        int measured = 0;
        size_t right = 0;
        // a new order of the training images every epoch, a function of (seed, epoch)
        random_permutation(order, n_train, rng_subkey(o->seed, STREAM_EPOCH, (uint64_t)epoch));
        for (size_t start = 0; start < n_train; start += B) {
            size_t nb = n_train - start < B ? n_train - start : B; // the last batch may be smaller
            phases_begin(&ph, pos.step); // (first: on the GPU a timed step waits here for the one before)
            double step_t0 = wall_seconds();
            phases_enter(&ph, PHASE_DATA);
            for (size_t b = 0; b < nb; b++) { batch_idx[b] = train_idx[order[start + b]]; }
            mlp_set_batch(m, labels, ds, batch_idx, nb);
            phases_enter(&ph, PHASE_FORWARD);
            int correct;
            float loss = mlp_forward(m, labels, nb, 1, o->seed, (uint64_t)pos.step, &correct);
            phases_enter(&ph, PHASE_UPDATE);
            mlp_zero_grad(m);
            phases_enter(&ph, PHASE_BACKWARD);
            mlp_backward(m, nb);
            phases_enter(&ph, PHASE_UPDATE);
            float lr = get_lr(o->cosine, o->lr, pos.step, o->warmup, total_steps);
            mlp_update(m, opt, lr, pos.step + 1);
            phases_end(&ph);
            if (ph.on) { // (no gradient norm here: SGD, momentum and AdamW as they are, unclipped)
                measured_ms += 1e3 * (wall_seconds() - step_t0);
                for (int k = 0; k < NUM_PHASES; k++) { phase_ms[k] += ph.ms[k]; host_ms[k] += ph.host_ms[k]; }
                measured++;
            }
            pos.step++;
            loss_sum += loss * (double)nb;
            right += (size_t)correct;
            if (!isfinite(loss)) {
                fprintf(stderr, "Error: epoch %d step %d: loss %g: training diverged\nHINT: lower the learning rate (-r); "
                        "%s --sweep ... shows which rates work\n", epoch + 1, pos.step, loss, PROGRAM);
                exit(EXIT_FAILURE);
            }
        }
        pos.epoch = epoch + 1;
        double seconds = wall_seconds() - t0;
        float val_loss = 0.0f, val_acc = 0.0f;
        if (n_val > 0) { evaluate(m, ds, val_idx, n_val, &val_loss, &val_acc, NULL); }
        float train_loss = (float)(loss_sum / n_train), train_acc = (float)right / n_train;
        // (train loss and accuracy are running averages over the epoch, with dropout on)
        printf("epoch %3d/%d | train loss %.4f acc %.4f | ", pos.epoch, o->epochs, train_loss, train_acc);
        if (n_val > 0) { printf("val loss %.4f acc %.4f", val_loss, val_acc); } else { printf("no validation"); }
        char eta[32];
        format_eta(eta, sizeof(eta), wall_seconds() - run_start, pos.epoch - first_epoch, o->epochs - first_epoch);
        printf(" | %.2f s | %.0f samples/s | %s\n", seconds, n_train / seconds, eta);
        if (measured > 0) { // the measured steps' mean, and the same steps timed whole
            printf("  phases (-P %d: %d steps), ms a step:", ph.every, measured);
            for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.3f", PHASE_NAMES[k], phase_ms[k] / measured); }
            printf(" (sum %.3f of the step's %.3f)\n", phases_sum(phase_ms) / measured, measured_ms / measured);
            if (ph.device && !ph.shown) {
                ph.shown = 1;
                printf("  (those are the GPU's times, from events; the host's clock, read at the same marks without waiting"
                       " for the GPU, says");
                for (int k = 0; k < NUM_PHASES; k++) { printf(" %s %.3f", PHASE_NAMES[k], host_ms[k] / measured); }
                printf(": a phase whose kernels were only queued looks short, and the wait is charged to the first call"
                       " that needs a result)\n");
            }
        }
        if (metrics != NULL) {
            // %.9g reads back exactly: two runs' metrics can be compared bit for bit
            fprintf(metrics, "epoch:%d train_loss:%.9g train_acc:%.9g val_loss:%.9g val_acc:%.9g s:%.3f", pos.epoch,
                    train_loss, train_acc, val_loss, val_acc, seconds);
            if (measured > 0) { // each phase's mean ms a step over the measured steps
                for (int k = 0; k < NUM_PHASES; k++) { fprintf(metrics, " ms_%s:%.4f", PHASE_NAMES[k], phase_ms[k] / measured); }
            }
            fprintf(metrics, "\n");
            fflush(metrics);
        }
        if (o->out_dir[0] != '\0') {
            char path[4200];
            snprintf(path, sizeof(path), "%s/mlp_%d.bin", o->out_dir, pos.epoch);
            mlp_save(m, opt, pos, o->seed, settings, path);
        }
    }
    free(order);
    free(batch_idx);
    free(labels);
}

// The final report: test accuracy, the confusion matrix, the most confused pairs.
void report(MLP *m, const Dataset *test) {
    size_t *idx = (size_t *)mallocCheck(test->n * sizeof(size_t));
    for (size_t i = 0; i < test->n; i++) { idx[i] = i; }
    int confusion[NUM_CLASSES * NUM_CLASSES] = {0};
    float loss, acc;
    evaluate(m, test, idx, test->n, &loss, &acc, confusion);
    printf("\ntest: loss %.4f accuracy %.4f (%zu images)\n", loss, acc, test->n);
    printf("\nconfusion matrix (rows: true class, columns: predicted)\n%12s", "");
    for (int k = 0; k < NUM_CLASSES; k++) { printf(" %5.5s", CLASS_NAMES[k]); }
    printf("\n");
    for (int i = 0; i < NUM_CLASSES; i++) {
        printf("%-12s", CLASS_NAMES[i]);
        for (int k = 0; k < NUM_CLASSES; k++) { printf(" %5d", confusion[i * NUM_CLASSES + k]); }
        printf("\n");
    }
    // the off-diagonal cells, biggest first (selection of the top 5 is enough)
    printf("\nmost confused (true -> predicted):\n");
    int used[NUM_CLASSES * NUM_CLASSES] = {0};
    for (int r = 0; r < 5; r++) {
        int best = -1;
        for (int c = 0; c < NUM_CLASSES * NUM_CLASSES; c++) {
            if (c / NUM_CLASSES != c % NUM_CLASSES && !used[c] && (best < 0 || confusion[c] > confusion[best])) { best = c; }
        }
        used[best] = 1;
        printf("  %-12s -> %-12s %4d\n", CLASS_NAMES[best / NUM_CLASSES], CLASS_NAMES[best % NUM_CLASSES], confusion[best]);
    }
    free(idx);
}

// ----------------------------------------------------------------------------
// the learning-rate sweep

// Train a fresh network (same seed) for `steps` updates at each rate and say
// what happened: the loss went down (converges), went down but bounces around a
// lot (oscillates), or blew up (diverges: non-finite, or above 1.5x the start).
void lr_sweep(const Options *o, const Dataset *ds, const size_t *train_idx, size_t n_train, const int *sizes, int L) {
    printf("learning-rate sweep: %s, %d steps of batch %d each, from the same initial weights\n", OPT_NAMES[o->opt],
           o->sweep_steps, o->batch);
    printf("| lr | loss at start | mean of last 20 | min | spread of last 20 | verdict |\n|---|---|---|---|---|---|\n");
    char *list = strdup(o->sweep);
    if (list == NULL) { fprintf(stderr, "Error: out of memory\n"); exit(EXIT_FAILURE); }
    size_t B = (size_t)o->batch;
    int *labels = (int *)mallocCheck(B * sizeof(int));
    size_t *batch_idx = (size_t *)mallocCheck(B * sizeof(size_t)), *order = (size_t *)mallocCheck(n_train * sizeof(size_t));
    float *losses = (float *)mallocCheck((size_t)o->sweep_steps * sizeof(float));
    random_permutation(order, n_train, rng_subkey(o->seed, STREAM_EPOCH, 0));
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        char *end;
        float lr = strtof(tok, &end);
        if (end == tok || *end != '\0' || !(lr > 0.0f)) {
            fprintf(stderr, "Error: --sweep: '%s' is not a positive learning rate\n", tok);
            exit(EXIT_FAILURE);
        }
        MLP m;
        mlp_build(&m, sizes, L, o->act, o->dropout);
        mlp_init(&m, o->seed);
        mlp_allocate_activations(&m, B);
        Optimizer opt = {o->opt, lr, o->weight_decay, o->momentum, 0.9f, 0.999f, 1e-8f};
        int steps = 0, diverged = 0;
        for (; steps < o->sweep_steps; steps++) {
            size_t start = (steps * B) % (n_train - B + 1);
            for (size_t b = 0; b < B; b++) { batch_idx[b] = train_idx[order[start + b]]; }
            mlp_set_batch(&m, labels, ds, batch_idx, B);
            losses[steps] = mlp_forward(&m, labels, B, 1, o->seed, (uint64_t)steps, NULL);
            // diverged: not finite, or well above where it started (1.5x, plus 1 for small losses)
            if (!isfinite(losses[steps]) || losses[steps] > 1.5f * losses[0] + 1.0f) { diverged = 1; steps++; break; }
            mlp_zero_grad(&m);
            mlp_backward(&m, B);
            mlp_update(&m, &opt, lr, steps + 1);
        }
        int tail = steps < 20 ? steps : 20;
        double mean = 0, lo = losses[0], sq = 0;
        for (int i = steps - tail; i < steps; i++) { mean += losses[i]; }
        mean /= tail;
        for (int i = 0; i < steps; i++) { lo = fmin(lo, losses[i]); }
        for (int i = steps - tail; i < steps; i++) { sq += (losses[i] - mean) * (losses[i] - mean); }
        double spread = sqrt(sq / tail);
        const char *verdict = diverged ? "diverges" : spread > 0.25 * mean ? "oscillates" : mean < 0.8 * losses[0] ? "converges" : "too slow";
        if (diverged) {
            printf("| %g | %.4f | - | %.4f | - | diverges (loss %g at step %d) |\n", lr, losses[0], lo, losses[steps - 1], steps);
        } else {
            printf("| %g | %.4f | %.4f | %.4f | %.4f | %s |\n", lr, losses[0], mean, lo, spread, verdict);
        }
        mlp_free(&m);
    }
    free(list);
    free(labels);
    free(batch_idx);
    free(order);
    free(losses);
}
// --- end shared-copy: mlp-training ---

// ----------------------------------------------------------------------------
// the gradient check: every parameter gradient against finite differences

// The loss of m with parameters theta, recomputed in double precision by a
// separate, deliberately plain forward pass (no shared code with mlp_forward
// beyond the parameter layout), using the dropout masks of m's last forward.
static double loss_double(const MLP *m, const double *theta, const float *x, const int *y, size_t B) {
    int L = m->num_layers;
    size_t widest = 0;
    for (int l = 0; l <= L; l++) { widest = (size_t)m->sizes[l] > widest ? (size_t)m->sizes[l] : widest; }
    double *cur = (double *)mallocCheck(B * widest * sizeof(double)), *next = (double *)mallocCheck(B * widest * sizeof(double));
    for (size_t i = 0; i < B * (size_t)m->sizes[0]; i++) { cur[i] = x[i]; }
    const double *p = theta;
    for (int l = 0; l < L; l++) {
        size_t in = m->sizes[l], out = m->sizes[l + 1];
        const double *W = p, *bias = p + out * in;
        p += out * in + out;
        for (size_t b = 0; b < B; b++) {
            for (size_t o = 0; o < out; o++) {
                double s = bias[o];
                for (size_t i = 0; i < in; i++) { s += cur[b * in + i] * W[o * in + i]; }
                if (l < L - 1) {
                    s = m->act == ACT_RELU ? (s > 0 ? s : 0) : tanh(s);
                    if (m->dropout > 0.0f) { s *= m->mask[l][b * out + o]; }
                }
                next[b * out + o] = s;
            }
        }
        double *tmp = cur; cur = next; next = tmp;
    }
    double loss = 0.0;
    size_t K = m->sizes[L];
    for (size_t b = 0; b < B; b++) {
        double mx = cur[b * K];
        for (size_t k = 1; k < K; k++) { mx = fmax(mx, cur[b * K + k]); }
        double sum = 0.0;
        for (size_t k = 0; k < K; k++) { sum += exp(cur[b * K + k] - mx); }
        loss += mx + log(sum) - cur[b * K + y[b]];
    }
    free(cur);
    free(next);
    return loss / B;
}

// Central differences (f(t+e) - f(t-e)) / 2e in double, e = 1e-6, for every
// parameter of small random networks (ReLU, tanh, and ReLU with dropout);
// prints the error per tensor. The analytic gradient is fp32, so we expect
// relative errors around 1e-6..1e-5; a wrong backward gives errors near 1.
// Returns the number of tensors that fail.
int gradcheck(void) {
    const int sizes[4] = {20, 16, 12, 10};
    const size_t B = 6;
    const char *names[3] = {"relu", "tanh", "relu+dropout"};
    int failed = 0, checked = 0;
    printf("gradient check: network 20-16-12-10, batch %zu, central differences in double\n", B);
    printf("%-14s %-6s %8s %12s %12s %12s\n", "network", "tensor", "params", "max |grad|", "max abs err", "max rel err");
    for (int variant = 0; variant < 3; variant++) {
        MLP m;
        mlp_build(&m, sizes, 3, variant == 1 ? ACT_TANH : ACT_RELU, variant == 2 ? 0.3f : 0.0f);
        mlp_allocate_activations(&m, B);
        uint64_t key = rng_subkey(1, STREAM_GRADCHECK, (uint64_t)variant);
        // random weights, biases and inputs, so no unit sits exactly on ReLU's kink
        for (size_t i = 0; i < m.num_params; i++) { m.params[i] = (float)(0.5 * rng_normal_at(key, i)); }
        float *x = (float *)mallocCheck(B * sizes[0] * sizeof(float));
        int y[6];
        for (size_t i = 0; i < B * sizes[0]; i++) { x[i] = (float)rng_normal_at(key, m.num_params + i); }
        for (size_t b = 0; b < B; b++) { y[b] = (int)(rng_uniform_at(key, 1000000 + b) * 10); }
        memcpy(m.h[0], x, B * sizes[0] * sizeof(float));
        mlp_forward(&m, y, B, 1, 7, 0, NULL);
        mlp_zero_grad(&m);
        mlp_backward(&m, B);
        double *theta = (double *)mallocCheck(m.num_params * sizeof(double));
        for (size_t i = 0; i < m.num_params; i++) { theta[i] = m.params[i]; }
        for (int l = 0; l < m.num_layers; l++) {
            for (int is_bias = 0; is_bias < 2; is_bias++) {
                const float *g = is_bias ? m.db[l] : m.dW[l];
                size_t off = (size_t)(g - m.grads), n = is_bias ? (size_t)sizes[l + 1] : (size_t)sizes[l + 1] * sizes[l];
                double max_grad = 0, max_abs = 0, max_rel = 0;
                for (size_t i = 0; i < n; i++) {
                    const double eps = 1e-6, t = theta[off + i];
                    theta[off + i] = t + eps;
                    double up = loss_double(&m, theta, x, y, B);
                    theta[off + i] = t - eps;
                    double down = loss_double(&m, theta, x, y, B);
                    theta[off + i] = t;
                    double fd = (up - down) / (2 * eps), err = fabs(fd - g[i]);
                    max_grad = fmax(max_grad, fabs(fd));
                    max_abs = fmax(max_abs, err);
                    if (fabs(fd) > 1e-4) { max_rel = fmax(max_rel, err / fabs(fd)); }
                }
                // fp32 rounding in the analytic gradient: abs err ~1e-7 of the scale
                int ok = max_abs <= 1e-4 * fmax(max_grad, 1e-3) && max_rel <= 1e-2;
                char tensor[16];
                snprintf(tensor, sizeof(tensor), "%s%d", is_bias ? "b" : "W", l);
                printf("%-14s %-6s %8zu %12.4e %12.4e %12.4e %s\n", names[variant], tensor, n, max_grad, max_abs, max_rel,
                       ok ? "OK" : "NOT OK");
                failed += !ok;
                checked++;
            }
        }
        free(theta);
        free(x);
        mlp_free(&m);
    }
    printf("%d passed, %d failed\n", checked - failed, failed);
    return failed;
}

// ----------------------------------------------------------------------------
// main: arguments, data, training, report

// the hardware line at start-up
void print_hardware(void) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("hardware: CPU, %d OpenMP threads\n", threads);
}

// the memory, group by group (activations for the larger of a batch and an
// evaluation batch); data_bytes: the images and labels, in host memory
void mlp_print_memory(const MLP *m, int opt_kind, size_t data_bytes) {
    double MiB = 1048576.0, param_mib = m->num_params * sizeof(float) / MiB;
    printf("memory: parameters %.2f MiB | gradients %.2f MiB | optimizer state %.2f MiB | activations %.2f MiB | data %.1f MiB\n",
           param_mib, param_mib, optimizer_buffers(opt_kind) * param_mib, mlp_activation_floats(m->sizes, m->num_layers,
           m->max_batch) * sizeof(float) / MiB, data_bytes / MiB);
}

#ifndef TESTING

// --- begin shared-copy: mlp-cli ---
// Defaults: the chapter's main run. Two hidden layers and AdamW reach ~0.89-0.90
// test accuracy on Fashion-MNIST within a few epochs; the cosine schedule
// squeezes out the last few tenths of a percent.
static const Options DEFAULTS = {.data_dir = "/usr/share/datasets/fashion-mnist", .layers = "784,512,256,10",
                                 .out_dir = "", .sweep = NULL, .act = ACT_RELU, .opt = OPT_ADAMW, .batch = 128,
                                 .epochs = 15, .warmup = 100, .cosine = 1, .subset = 0, .val_size = 5000, .resume = 0,
                                 .sweep_steps = 200, .phase_every = 0, .lr = 1e-3f, .weight_decay = 0.0f, .momentum = 0.9f,
                                 .dropout = 0.0f, .seed = 1337};

// the flags both programs share, with their defaults
static void print_common_flags(void) {
    const Options *d = &DEFAULTS;
    printf("  -d <dir>      folder with Fashion-MNIST's four *-ubyte.gz files [%s]\n", d->data_dir);
    printf("  -l <sizes>    layer widths, input first, 10 classes last [%s]\n", d->layers);
    printf("  -a <act>      relu or tanh between layers [%s]\n", d->act == ACT_RELU ? "relu" : "tanh");
    printf("  -O <opt>      sgd, momentum or adamw [%s]\n", OPT_NAMES[d->opt]);
    printf("  -r <float>    learning rate [%g]\n", d->lr);
    printf("  -w <float>    weight decay, on weights only [%g]\n", d->weight_decay);
    printf("  -m <float>    momentum (-O momentum) [%g]\n", d->momentum);
    printf("  -p <float>    dropout probability on hidden units [%g]\n", d->dropout);
    printf("  -b <int>      batch size [%d]\n", d->batch);
    printf("  -e <int>      epochs [%d]\n", d->epochs);
    printf("  -u <int>      warm-up steps [%d]\n", d->warmup);
    printf("  -c <sched>    const or cosine learning rate [%s]\n", d->cosine ? "cosine" : "const");
    printf("  -N <int>      train on only this many images (overfitting experiments), 0 = all [%d]\n", d->subset);
    printf("  -v <int>      training images held out for validation [%d]\n", d->val_size);
    printf("  -o <dir>      write metrics.log and a checkpoint per epoch here, \"\" = none [%s]\n", d->out_dir);
    printf("  -y <0|1>      resume from the newest checkpoint in -o [%d]\n", d->resume);
    printf("  -s <int>      random seed [%llu]\n", (unsigned long long)d->seed);
    printf("  -P <int>      time the phases of every this many steps (data, forward, backward, update; a mean per\n"
           "                epoch), 0 = off [%d]\n", d->phase_every);
    printf("  --sweep <lrs> learning-rate sweep over a comma-separated list, then exit\n");
    printf("  -k <int>      steps per rate in the sweep [%d]\n", d->sweep_steps);
    printf("  -h            this help\n");
}

// --- end shared-copy: mlp-cli ---

// --- begin shared-copy: mlp-main ---
// a whole-string float in [0, hi], or a usage error naming the flag
static float parse_float_max(const char *flag, const char *s, float hi) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= 0.0f) || !(v <= hi)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag %s needs a number in [0, %g], got '%%s'", flag, hi);
        usage_error(msg, s);
    }
    return v;
}

// "784,512,256,10" -> sizes; the first must be 784 (28x28 pixels), the last 10
static int parse_layers(const char *s, int *sizes) {
    int n = 0;
    const char *p = s;
    while (*p != '\0') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || n > MAX_LAYERS || (*end != ',' && *end != '\0')) {
            usage_error("-l needs 2 to 9 comma-separated widths, e.g. 784,512,256,10; got '%s'", s);
        }
        sizes[n++] = (int)v;
        if (*end == ',' && end[1] == '\0') { usage_error("-l ends with a comma: '%s'", s); }
        p = *end == ',' ? end + 1 : end;
    }
    if (n < 2 || sizes[0] != 784 || sizes[n - 1] != NUM_CLASSES) {
        usage_error("-l must start with 784 (28x28 pixels) and end with 10 (classes); got '%s'", s);
    }
    return n - 1; // number of weight layers
}

// One of the flags both programs share: argv[*i] with its value argv[*i + 1]
// (*i moves past the value). Anything else is a usage error.
static void parse_common_flag(Options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--sweep") != 0 && (a[0] != '-' || a[1] == '\0' || a[2] != '\0')) { usage_error("unknown argument '%s'", a); }
    if (*i + 1 >= argc) { usage_error("flag %s needs a value", a); }
    const char *v = argv[++*i];
    if (strcmp(a, "--sweep") == 0) { o->sweep = v; return; }
    switch (a[1]) {
    case 'd': o->data_dir = v; break;
    case 'l': o->layers = v; break;
    case 'a':
        if (strcmp(v, "relu") != 0 && strcmp(v, "tanh") != 0) { usage_error("-a is relu or tanh, not '%s'", v); }
        o->act = strcmp(v, "relu") == 0 ? ACT_RELU : ACT_TANH;
        break;
    case 'O':
        o->opt = -1;
        for (int k = 0; k < 3; k++) { if (strcmp(v, OPT_NAMES[k]) == 0) { o->opt = k; } }
        if (o->opt < 0) { usage_error("-O is sgd, momentum or adamw, not '%s'", v); }
        break;
    case 'r': o->lr = parse_float_max(a, v, 1e3f); break;
    case 'w': o->weight_decay = parse_float_max(a, v, 1e3f); break;
    case 'm': o->momentum = parse_float_max(a, v, 1.0f); break;
    case 'p': o->dropout = parse_float_max(a, v, 0.95f); break;
    case 'b': o->batch = (int)parse_int(a, v, 1); break;
    case 'e': o->epochs = (int)parse_int(a, v, 1); break;
    case 'u': o->warmup = (int)parse_int(a, v, 0); break;
    case 'c':
        if (strcmp(v, "const") != 0 && strcmp(v, "cosine") != 0) { usage_error("-c is const or cosine, not '%s'", v); }
        o->cosine = strcmp(v, "cosine") == 0;
        break;
    case 'N': o->subset = (int)parse_int(a, v, 0); break;
    case 'v': o->val_size = (int)parse_int(a, v, 0); break;
    case 'o': o->out_dir = v; break;
    case 'y': o->resume = (int)parse_int(a, v, 0); break;
    case 's': o->seed = (uint64_t)parse_int(a, v, 0); break;
    case 'k': o->sweep_steps = (int)parse_int(a, v, 1); break;
    case 'P': o->phase_every = (int)parse_int(a, v, 0); break;
    default: usage_error("unknown flag '%s'", a);
    }
}

// Everything after the flags: the data, then a sweep, or training (from scratch
// or resumed) and the final report.
static int run(const Options *opts) {
    Options o = *opts;
    int sizes[MAX_LAYERS + 1];
    int L = parse_layers(o.layers, sizes);
    if (o.resume && o.out_dir[0] == '\0') { usage_error("-y needs an output directory (-o)%s", ""); }
    if (o.out_dir[0] != '\0' && mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "Error: could not create output directory %s: %s\n", o.out_dir, strerror(errno));
        return EXIT_FAILURE;
    }

    // the data: train (minus the validation images) and test
    Dataset train_set, test_set;
    dataset_load(&train_set, o.data_dir, "train");
    dataset_load(&test_set, o.data_dir, "t10k");
    if (train_set.dim != 784 || test_set.dim != 784) {
        fprintf(stderr, "Error: %s: images are not 28x28\n%s\n", o.data_dir, DATA_HINT);
        return EXIT_FAILURE;
    }
    if ((size_t)o.val_size >= train_set.n) {
        fprintf(stderr, "Error: -v %d holds out every training image (there are %zu)\n", o.val_size, train_set.n);
        return EXIT_FAILURE;
    }
    size_t *split = (size_t *)mallocCheck(train_set.n * sizeof(size_t));
    random_permutation(split, train_set.n, rng_key(o.seed, STREAM_SPLIT));
    const size_t *val_idx = split, *train_idx = split + o.val_size;
    size_t n_val = (size_t)o.val_size, n_train = train_set.n - n_val;
    if (o.subset > 0 && (size_t)o.subset < n_train) { n_train = (size_t)o.subset; }
    printf("data: %s: %zu training, %zu validation, %zu test images\n", o.data_dir, n_train, n_val, test_set.n);

    if ((size_t)o.batch > n_train) {
        fprintf(stderr, "Error: batch size -b %d is larger than the %zu training images\nHINT: lower -b, or raise -N\n", o.batch, n_train);
        return EXIT_FAILURE;
    }
    if ((double)n_train * o.epochs / o.batch > 2e9) {
        fprintf(stderr, "Error: -e %d epochs of batch %d make more than 2^31 updates\n", o.epochs, o.batch);
        return EXIT_FAILURE;
    }
    print_hardware();
    if (o.sweep != NULL) {
        lr_sweep(&o, &train_set, train_idx, n_train, sizes, L);
        free(split);
        dataset_free(&train_set);
        dataset_free(&test_set);
        return EXIT_SUCCESS;
    }

    MLP m;
    mlp_build(&m, sizes, L, o.act, o.dropout);
    mlp_init(&m, o.seed);
    mlp_allocate_activations(&m, (size_t)o.batch > 1000 ? (size_t)o.batch : 1000);
    Optimizer opt = {o.opt, o.lr, o.weight_decay, o.momentum, 0.9f, 0.999f, 1e-8f};
    CheckpointSettings settings = {o.lr, o.weight_decay, o.momentum, o.dropout, o.batch, o.epochs, o.warmup, o.cosine,
                                   o.subset, o.val_size};
    int steps_per_epoch = (int)((n_train + o.batch - 1) / o.batch);
    Position pos = {0, 0};
    if (!o.resume && o.out_dir[0] != '\0' && find_latest_checkpoint(o.out_dir) >= 0) {
        fprintf(stderr, "Error: %s already holds checkpoints; not overwriting them\nHINT: resume with -y 1, or pick another -o\n",
                o.out_dir);
        return EXIT_FAILURE;
    }
    if (o.resume) {
        int epoch = find_latest_checkpoint(o.out_dir);
        if (epoch < 0) {
            fprintf(stderr, "Error: -y 1 but no checkpoint mlp_<epoch>.bin in %s\n%s\n", o.out_dir, CKPT_HINT);
            return EXIT_FAILURE;
        }
        char path[4200];
        snprintf(path, sizeof(path), "%s/mlp_%d.bin", o.out_dir, epoch);
        pos = mlp_load(&m, &opt, o.seed, &settings, steps_per_epoch, path);
        if (pos.epoch >= o.epochs) {
            fprintf(stderr, "Error: %s is after epoch %d: nothing left to do (raise -e to train longer)\n", path, pos.epoch);
            return EXIT_FAILURE;
        }
        printf("resuming from %s: %d epochs, %d updates done\n", path, pos.epoch, pos.step);
    }
    printf("network:");
    for (int l = 0; l <= L; l++) { printf(" %d", sizes[l]); }
    printf(" | %s | %zu parameters | %s lr %g wd %g | dropout %g | batch %d | %d epochs | seed %llu\n",
           o.act == ACT_RELU ? "relu" : "tanh", m.num_params, OPT_NAMES[o.opt], o.lr, o.weight_decay, o.dropout, o.batch,
           o.epochs, (unsigned long long)o.seed);
    mlp_print_memory(&m, o.opt, (train_set.n + test_set.n) * (train_set.dim + 1));
    FILE *metrics = NULL;
    if (o.out_dir[0] != '\0') {
        char path[4200];
        snprintf(path, sizeof(path), "%s/metrics.log", o.out_dir);
        if (o.resume) { log_truncate_after(path, "epoch:%d", pos.epoch); }
        metrics = fopenCheck(path, o.resume ? "a" : "w");
    }
    double t0 = wall_seconds();
    train(&m, &opt, &o, &settings, &train_set, train_idx, n_train, val_idx, n_val, pos, metrics);
    printf("training took %.1f s\n", wall_seconds() - t0);
    report(&m, &test_set);
    if (metrics != NULL) { fcloseCheck(metrics); }
    mlp_free(&m);
    free(split);
    dataset_free(&train_set);
    dataset_free(&test_set);
    return 0;
}
// --- end shared-copy: mlp-main ---

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    Options o = DEFAULTS;
    int check_gradients = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("Usage: %s [options]\nOptions (default in brackets):\n", PROGRAM);
            print_common_flags();
            printf("  --gradcheck   check every gradient against finite differences, then exit\n");
            return 0;
        }
        if (strcmp(argv[i], "--gradcheck") == 0) { check_gradients = 1; continue; }
        parse_common_flag(&o, argc, argv, &i);
    }
    if (check_gradients) { return gradcheck() == 0 ? EXIT_SUCCESS : EXIT_FAILURE; }
    return run(&o);
}
#endif
