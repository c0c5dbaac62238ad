/*
convert.c: every model-file conversion of the book, in one program (what llama2.c's export.py
and llm.c's train_gpt2.py are to those projects, but in C). The chapters' programs read only
the project's own files; this one turns other people's files into ours and ours into theirs.

Formats today:
  GPT-2
  in:  a Hugging Face GPT-2 folder: config.json + model.safetensors, or several shards named
       by model.safetensors.index.json (as save_pretrained writes big models); F32, F16, BF16
       or F64 tensors; names with or without "transformer."; gpt2 ... gpt2-xl as downloaded.
       An llm.c checkpoint (version 3 fp32, version 5 bf16). d<N>: a new random model.
  out: an llm.c checkpoint (a name ending in .bin; -d fp32 or bf16), or a Hugging Face folder
       (anything else) that transformers loads: config.json, model.safetensors (or shards of
       at most -S MiB and their index), and the tokenizer's vocab.json + merges.txt.
  the tokenizer: GPT-2's encoder.json + vocab.bpe (ours, in data/gpt2/) are Hugging Face's
       vocab.json + merges.txt under other names; -t DIR copies them across (-t data/gpt2 is
       the default for exports).
  the Llama family (Llama 2/3, SmolLM2: LlamaForCausalLM; Qwen2ForCausalLM)
  in:  a Hugging Face folder (config.json with model_type llama or qwen2, safetensors as
       above); a GGUF file (llama.cpp's, architecture llama or qwen2; F32, F16, BF16, Q8_0,
       Q4_0, Q4_1, Q4_K, Q5_K, Q6_K tensors, dequantized to fp32; Llama 3.1/3.2's RoPE scaling,
       which llama.cpp writes as rope_freqs.weight, read back into its parameters); our
       Llama-family model file.
  out: our Llama-family model file (.bin; the layout is at LLAMA_MAGIC below), or a Hugging
       Face folder transformers loads.
  their tokenizers (byte-level BPE): from the GGUF file, or the folder's tokenizer.json and
       tokenizer_config.json, into our tokenizer file beside the model (NAME_tokenizer.bin;
       the layout is lib/tokenizer.h's, at tokenizer_load_file), and back out to
       tokenizer.json + tokenizer_config.json in an export (transformers' AutoTokenizer loads
       them: the same ids, the same chat prompts).
  GGUF without -o: what the file holds (metadata and tensors), listed.
HF's GPT-2 keeps its linear weights as Conv1D, (in, out): transposed relative to ours
(out, in), as nn.Linear keeps them. Our safetensors reader and JSON parser check every
offset, dtype and shape before they touch the data (fuzzed by make fuzz).

How it is built, so that the later chapters' formats (Llama-family folders, GGUF, PEFT
adapters) slot in: one reader per container format (JSON, safetensors, GGUF), one writer per
target (llm.c checkpoint, safetensors folder), and per model family a table that maps our
tensors to the other format's names and layouts (GPT2_HF below), plus its config.json fields.

What it leaves out on purpose: pickled PyTorch files (.bin / .pt: they run code when
loaded), TensorFlow and Flax checkpoints, writing GGUF (llama.cpp's tools do), and other
architectures (Mistral's sliding window, Gemma, mixtures of experts).

Build and run (from the repository root):
    make convert
    ./convert -i path/to/gpt2 -o gpt2_124M.bin           # a Hugging Face folder -> a checkpoint
    ./convert -i log_gpt2/model_00005000.bin -o my_gpt2  # a checkpoint -> a Hugging Face folder
    ./convert -i gpt2_124M.bin -o gpt2_124M_bf16.bin -d bf16
    ./convert -i SmolLM2-135M-Instruct.Q4_1.gguf          # what a GGUF file holds
    ./convert -i SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.bin   # ... into our Llama-family file
    ./convert -h                                          # every flag with its default
Checked by test_convert.c: Hugging Face folders written by transformers
(dev/reference/infer_reference.py: F32, F16, BF16, with and without the prefix, sharded) to
our checkpoint and back, byte for byte; our exported folder's bytes are the ones transformers
loaded and matched (fixtures/infer_export.fnv1a64); a GGUF file written and read back by
the gguf package (dev/reference/gguf_reference.py): every key, every tensor's shape and its
values dequantized, bit for bit; three tiny Llama and Qwen2 models and two GGUF copies made by
dev/reference/llama_convert_reference.py, whose conversion transformers loaded and matched
bit for bit (the hashes of our files); every kind of broken file is one error message; test_infer.c then runs the converted checkpoints against transformers' logits.

Sizes: C channels, NH heads, V vocabulary, Vp padded vocabulary, L layers, maxT the context.
*/

// fsync, mkdir, fseeko, M_PI are POSIX / X/Open, not ISO C
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRAM "./convert" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/json.h"
#include "lib/safetensors.h"
#include "lib/tokenizer.h"
#include "lib/model_notes.h"

// ----------------------------------------------------------------------------
// the model in memory (GPT-2), and llm.c checkpoints: the same code as infer.c's

// --- begin shared-copy: gpt2-config ---
typedef struct {
    int max_seq_len;       // maxT, e.g. 1024
    int vocab_size;        // V, e.g. 50257
    int padded_vocab_size; // Vp, V rounded up to a multiple of 128, e.g. 50304
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The parameters, in the order of llm.c's checkpoint files (which we read and write).
#define NUM_PARAMETER_TENSORS 16
// --- end shared-copy: gpt2-config ---
// --- begin shared-copy: gpt2-parameters ---
typedef struct {
    float *wte;      // (Vp, C) token embeddings, tied with the output layer
    float *wpe;      // (maxT, C) position embeddings
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3*C, C)
    float *qkvb;     // (L, 3*C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4*C, C)
    float *fcb;      // (L, 4*C)
    float *fcprojw;  // (L, C, 4*C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
} ParameterTensors;
// --- end shared-copy: gpt2-parameters ---
// --- begin shared-copy: gpt2-shapes ---
// (extern: in C++ a const array would have internal linkage, and a program that does not
// print the names would be warned about it; the tests use them)
extern const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS];
const char *const PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

void fill_in_parameter_sizes(size_t *sizes, GPT2Config config) {
    size_t Vp = config.padded_vocab_size, C = config.channels, maxT = config.max_seq_len, L = config.num_layers;
    size_t shapes[NUM_PARAMETER_TENSORS] = {
        Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
        L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    memcpy(sizes, shapes, sizeof(shapes));
}

// Check a configuration for sizes that cannot work; `source` names where it came
// from. The caps are far above any GPT-2 (V 50257, L 48, C 1600, maxT 1024) and
// keep every size product far from overflowing: a corrupt header is then reported
// as such, not as an attempt to allocate petabytes.
static void gpt2_validate_config(GPT2Config c, const char *source) {
    if (c.max_seq_len <= 0 || c.max_seq_len > (1 << 20) || c.vocab_size <= 0 || c.vocab_size > (1 << 24) ||
        c.padded_vocab_size < c.vocab_size || c.padded_vocab_size > (1 << 24) || c.num_layers <= 0 ||
        c.num_layers > 1024 || c.num_heads <= 0 || c.channels <= 0 || c.channels > (1 << 16) ||
        c.channels % c.num_heads != 0) {
        fprintf(stderr, "Error: %s: impossible model shape maxT=%d V=%d Vp=%d L=%d NH=%d C=%d (need all > 0,"
                " Vp >= V, C divisible by NH, maxT <= 2^20, V and Vp <= 2^24, L <= 1024, C <= 2^16): corrupt header?\n",
                source, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
        exit(EXIT_FAILURE);
    }
}

static size_t gpt2_count_parameters(GPT2Config config) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    fill_in_parameter_sizes(sizes, config);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// --- end shared-copy: gpt2-shapes ---

// --- begin shared-copy: gpt2-weights ---
// One allocation for a whole table; the struct's pointers are slices of it.
float *malloc_and_point(float **slices, const size_t *sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += sizes[i]; }
    float *memory = (float *)mallocCheck(total * sizeof(float));
    float *p = memory;
    for (int i = 0; i < n; i++) {
        slices[i] = p;
        p += sizes[i];
    }
    return memory;
}

// The weights as loaded, fp32 in host memory whatever the file held (infer.cu uploads
// them to the GPU in its precision).
typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float *params_memory;
    size_t num_parameters;
    int from_bf16;     // they came from a bf16 file (./convert -d auto keeps them bf16: exact)
    char source[4096]; // where they came from, for messages
} GPT2Weights;

static void gpt2_weights_allocate(GPT2Weights *w) {
    fill_in_parameter_sizes(w->param_sizes, w->config);
    w->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { w->num_parameters += w->param_sizes[i]; }
    w->params_memory = malloc_and_point((float **)&w->params, w->param_sizes, NUM_PARAMETER_TENSORS);
}

void gpt2_weights_free(GPT2Weights *w) {
    free(w->params_memory);
    w->params_memory = NULL;
}
// --- end shared-copy: gpt2-weights ---

// --- begin shared-copy: gpt2-model-file ---
// The size of an open file in bytes; the position is left just after the 256 x
// int32 header that all our binary files start with.
static long file_size(FILE *fp, const char *path) {
    long bytes = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { bytes = ftell(fp); }
    if (bytes < 0 || fseek(fp, 256 * sizeof(int), SEEK_SET) != 0) {
        fprintf(stderr, "Error: %s: cannot seek: %s\n", path, strerror(errno));
        exit(EXIT_FAILURE);
    }
    return bytes;
}

// Model checkpoints use llm.c's format, so its GPT-2 files load here unchanged:
// a header of 256 int32 (magic 20240326, version 3 = fp32, maxT, V, L, NH, C, Vp),
// then the 16 parameter tensors in table order, float32.
#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
// --- end shared-copy: gpt2-model-file ---
// --- begin shared-copy: gpt2-init ---
// Fill the parameters with random numbers: tensor k gets mean_k + std_k * N(0,1)
// from random stream k of `seed`, then the vocabulary padding rows are zeroed.
// GPT-2's scheme (Radford et al. 2019, and its released code): weights N(0, 0.02),
// the two projections that feed the residual stream scaled by 1/sqrt(2L) so the
// stream's variance does not grow with depth, biases 0, LayerNorms 1 and 0.
// With noisy = 1, biases and LayerNorms get noise too: the tests use that, so a
// bias or a LayerNorm weight that is ignored somewhere cannot go unnoticed.
// params: all of them, fp32, in table order (sizes: param_sizes).
void init_parameters(float *params, const size_t *param_sizes, GPT2Config config, uint64_t seed, int noisy) {
    double std_w = 0.02, std_proj = 0.02 / sqrt(2.0 * config.num_layers);
    double std_b = noisy ? 0.02 : 0.0, std_ln = noisy ? 0.1 : 0.0;
    //                                   wte    wpe    ln1w   ln1b   qkvw   qkvb   attprojw  attprojb
    double means[NUM_PARAMETER_TENSORS] = {0,     0,     1,     0,     0,     0,     0,        0,
    //                                   ln2w   ln2b   fcw    fcb    fcprojw   fcprojb lnfw lnfb
                                         1,     0,     0,     0,     0,        0,      1,   0};
    double stds[NUM_PARAMETER_TENSORS] = {std_w, std_w, std_ln, std_ln, std_w, std_b, std_proj, std_b,
                                          std_ln, std_ln, std_w, std_b, std_proj, std_b, std_ln, std_ln};
    float *p = params;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        uint64_t key = rng_key(seed, (uint64_t)k);
        double mean = means[k], std = stds[k];
        #pragma omp parallel for
        for (size_t i = 0; i < param_sizes[k]; i++) {
            // the product is rounded before the add, as numpy does it: GCC would
            // otherwise fuse the two into an FMA, which can differ in the last bit
            volatile double scaled = std * rng_normal_at(key, i);
            p[i] = (float)(mean + scaled);
        }
        p += param_sizes[k];
    }
    // wte is the first tensor: its rows V..Vp-1 are the padding
    size_t V = config.vocab_size, Vp = config.padded_vocab_size, C = config.channels;
    memset(params + V * C, 0, (Vp - V) * C * sizeof(float));
}

// The configuration of a new model from a short descriptor: "d<N>", depth L = N,
// channels C = 64 N, heads NH = N (so the head size is always 64, as in every
// GPT-2), or one of the four GPT-2 sizes by name; maxT = 1024, GPT-2's vocabulary.
// d12 is gpt2-124M, GPT-2 small; gpt2-350M (medium) is 24 layers of C = 1024 in
// 16 heads, which no d<N> makes.
static const struct { const char *name; int L, NH, C; } GPT2_SIZES[] = { // name, layers, heads, channels
    {"gpt2-124M", 12, 12, 768}, {"gpt2-350M", 24, 16, 1024}, {"gpt2-774M", 36, 20, 1280}, {"gpt2-1558M", 48, 25, 1600}};
GPT2Config gpt2_config_from_descriptor(const char *descriptor) {
    for (size_t i = 0; i < sizeof(GPT2_SIZES) / sizeof(GPT2_SIZES[0]); i++) {
        if (strcmp(descriptor, GPT2_SIZES[i].name) == 0) {
            GPT2Config c = {1024, 50257, 50304, GPT2_SIZES[i].L, GPT2_SIZES[i].NH, GPT2_SIZES[i].C};
            return c;
        }
    }
    char *end = NULL;
    long depth = descriptor[0] == 'd' ? strtol(descriptor + 1, &end, 10) : 0;
    if (end == NULL || *end != '\0' || depth < 1 || depth > 64) {
        fprintf(stderr, "Error: model '%s' is neither an existing file nor a descriptor d<N> (1 <= N <= 64)"
                " or gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M\n", descriptor);
        fprintf(stderr, "HINT: d4 makes a new 4-layer model; path/model.bin loads a checkpoint\n");
        exit(EXIT_FAILURE);
    }
    GPT2Config c = {1024, 50257, 50304, (int)depth, (int)depth, 64 * (int)depth};
    return c;
}
// --- end shared-copy: gpt2-init ---

// --- begin shared-copy: checkpoint-read ---
// Reads an llm.c / train_gpt2 checkpoint: version 3 (fp32) or 5 (bf16, widened to fp32).
void gpt2_build_from_checkpoint(GPT2Weights *w, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        die_file(path, "pass a model file (model_<step>.bin from train_gpt2; ./convert makes one from a Hugging Face folder)",
                 "file too short for a model header (256 x int32)");
    }
    if (header[0] != MODEL_MAGIC) {
        die_file(path, "pass a model file (model_<step>.bin, llm.c's gpt2_124M.bin; ./convert makes one from a Hugging Face"
                 " folder) or d<N> for a random model", "bad magic number: expected %d (llm.c GPT-2 model), found %d",
                 MODEL_MAGIC, header[0]);
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        die_file(path, NULL, "model file version %d, expected %d (fp32) or %d (bf16)", header[1],
                 MODEL_VERSION_FP32, MODEL_VERSION_BF16);
    }
    w->config.max_seq_len = header[2];
    w->config.vocab_size = header[3];
    w->config.num_layers = header[4];
    w->config.num_heads = header[5];
    w->config.channels = header[6];
    w->config.padded_vocab_size = header[7];
    gpt2_validate_config(w->config, path);
    size_t bytes_per = header[1] == MODEL_VERSION_BF16 ? 2 : 4;
    size_t expected = 256 * sizeof(int) + gpt2_count_parameters(w->config) * bytes_per;
    long actual = file_size(fp, path);
    if ((size_t)actual != expected) {
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d Vp=%d maxT=%d) needs %zu:"
                 " truncated or corrupt", actual, header[1], header[4], header[6], header[7], header[2], expected);
    }
    gpt2_weights_allocate(w);
    w->from_bf16 = header[1] == MODEL_VERSION_BF16;
    if (!w->from_bf16) {
        freadCheck(w->params_memory, sizeof(float), w->num_parameters, fp);
    } else { // in chunks, widening as we go
        uint16_t buf[1 << 16];
        for (size_t done = 0; done < w->num_parameters;) {
            size_t n = w->num_parameters - done < (1 << 16) ? w->num_parameters - done : (1 << 16);
            freadCheck(buf, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params_memory[done + i] = bf16_to_float(buf[i]); }
            done += n;
        }
    }
    fcloseCheck(fp);
}
// --- end shared-copy: checkpoint-read ---

// --- begin shared-copy: model-file-write ---
// Our model files (GPT-2's and the Llama family's): the 256-int header, then n weights as
// float32, or bf16 (rounded to nearest even), written atomically.
static void write_model_file(const char *path, const int *header, const float *params, size_t n, int bf16) {
    uint16_t *narrow = NULL;
    const void *bufs[2] = {header, params};
    size_t sizes[2] = {256 * sizeof(int), n * sizeof(float)};
    if (bf16) {
        narrow = (uint16_t *)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) { narrow[i] = float_to_bf16(params[i]); }
        bufs[1] = narrow;
        sizes[1] = n * sizeof(uint16_t);
    }
    write_file_atomic(path, bufs, sizes, 2);
    free(narrow);
}

// Writes an llm.c checkpoint: version 3 (fp32) or, with bf16, version 5; with notes (NULL:
// none) where the model came from and how to sample it (lib/model_notes.h).
void gpt2_save_checkpoint(const GPT2Weights *w, const char *path, int bf16, const ModelNotes *notes) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32;
    header[2] = w->config.max_seq_len;
    header[3] = w->config.vocab_size;
    header[4] = w->config.num_layers;
    header[5] = w->config.num_heads;
    header[6] = w->config.channels;
    header[7] = w->config.padded_vocab_size;
    model_notes_put(header, notes);
    write_model_file(path, header, w->params_memory, w->num_parameters, bf16);
}
// --- end shared-copy: model-file-write ---

// ----------------------------------------------------------------------------
// a Hugging Face folder's weights: one model.safetensors, or shards and their index

// Big models come in shards: model-00001-of-00004.safetensors ... and an index,
// model.safetensors.index.json = {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}
// (transformers' save_pretrained with max_shard_size). We open every shard the index names,
// and check that each tensor is where the index says and that no tensor is in two shards.
#define HF_MAX_SHARDS 4096
typedef struct {
    int num;             // shards: 1 for a single model.safetensors
    char (*paths)[MAX_PATH_LEN];
    SafeTensors *st;     // the header of each
} HfWeights;

static void hf_weights_free(HfWeights *h) {
    for (int s = 0; s < h->num; s++) { safetensors_free(&h->st[s]); }
    free(h->paths);
    free(h->st);
    memset(h, 0, sizeof(*h));
}

// a shard's file name as the index gives it: a plain name in the same folder
static int hf_shard_name_ok(const char *name) {
    size_t n = strlen(name);
    return n > 12 && n < 256 && strchr(name, '/') == NULL && strcmp(name + n - 12, ".safetensors") == 0;
}

// A tensor's name (or a shard's file name) and a number beside it: its shard, or the entry
// of the index that named it. The index's checks sort these and search them (O(n log n)):
// an index is a file we did not write, and one of a million entries must not take a
// million squared comparisons.
typedef struct {
    char *name;
    int num;
} HfName;
static int compare_hf_names(const void *a, const void *b) {
    const HfName *x = (const HfName *)a, *y = (const HfName *)b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->num > y->num) - (x->num < y->num);
}
static int compare_tensor_names(const void *a, const void *b) { return strcmp(((const HfName *)a)->name, ((const HfName *)b)->name); }
static int compare_ints(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }
static char *hf_strdup(const char *s, const char *index) {
    char *copy = strdup(s);
    if (copy == NULL) { die_file(index, NULL, "out of memory"); }
    return copy;
}
static void hf_names_free(HfName *names, size_t n) {
    for (size_t i = 0; i < n; i++) { free(names[i].name); }
    free(names);
}

static void hf_weights_open(HfWeights *h, const char *dir, const char *hint) {
    memset(h, 0, sizeof(*h));
    h->paths = (char (*)[MAX_PATH_LEN])mallocCheck((size_t)HF_MAX_SHARDS * MAX_PATH_LEN);
    char single[MAX_PATH_LEN], index[MAX_PATH_LEN], err[512];
    path_concat(single, dir, "/model.safetensors");
    path_concat(index, dir, "/model.safetensors.index.json");
    if (access(single, F_OK) == 0 || access(index, F_OK) != 0) { // one file (or neither: the error names it)
        h->num = 1;
        memcpy(h->paths[0], single, MAX_PATH_LEN);
        h->st = (SafeTensors *)mallocCheck(sizeof(SafeTensors));
        safetensors_open(&h->st[0], single, hint);
        return;
    }
    size_t len;
    uint8_t *text = read_whole_file(index, &len, hint);
    Json j;
    if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0) { die_file(index, hint, "%s", err); }
    int map = j.tokens[0].type == JSON_OBJECT ? json_get(&j, 0, "weight_map") : -1;
    if (map < 0 || j.tokens[map].type != JSON_OBJECT || j.tokens[map].size == 0) {
        die_file(index, hint, "no \"weight_map\" object naming the shard of each tensor");
    }
    // every entry's tensor and file (files: num is the entry)
    size_t entries = (size_t)j.tokens[map].size;
    HfName *named = (HfName *)mallocCheck(entries * sizeof(HfName)), *files = (HfName *)mallocCheck(entries * sizeof(HfName));
    char name[256], file[256];
    int at = map + 1;
    for (size_t e = 0; e < entries; e++, at = j.tokens[at + 1].next) {
        if (json_string(&j, at, name, sizeof(name)) < 0 || json_string(&j, at + 1, file, sizeof(file)) < 0 || !hf_shard_name_ok(file)) {
            die_file(index, hint, "weight_map entry %zu is not \"tensor name\": \"<file>.safetensors\" (a file in this folder)", e);
        }
        named[e].name = hf_strdup(name, index);
        files[e].name = hf_strdup(file, index);
        files[e].num = (int)e;
    }
    // the shards, in the order the index first names them: the files sorted (by name, then
    // entry), each run of one name a shard whose first entry is its run's first
    qsort(files, entries, sizeof(HfName), compare_hf_names);
    int *first = (int *)mallocCheck(((size_t)HF_MAX_SHARDS + 1) * sizeof(int)), runs = 0;
    for (size_t i = 0; i < entries; i++) {
        if (i > 0 && strcmp(files[i].name, files[i - 1].name) == 0) { continue; }
        if (runs == HF_MAX_SHARDS) { die_file(index, NULL, "names more than %d shards", HF_MAX_SHARDS); }
        first[runs++] = files[i].num;
    }
    qsort(first, (size_t)runs, sizeof(int), compare_ints); // (shard s is the run whose first entry is first[s])
    for (size_t i = 0, run_start = 0; i < entries; i++) {
        if (i > 0 && strcmp(files[i].name, files[i - 1].name) != 0) { run_start = i; }
        int *found = (int *)bsearch(&files[run_start].num, first, (size_t)runs, sizeof(int), compare_ints);
        named[files[i].num].num = (int)(found - first);
        if (i == run_start) { format_path(h->paths[found - first], MAX_PATH_LEN, "%s/%s", dir, files[i].name); }
    }
    h->num = runs;
    free(first);
    hf_names_free(files, entries);
    h->st = (SafeTensors *)mallocCheck((size_t)h->num * sizeof(SafeTensors));
    for (int s = 0; s < h->num; s++) { safetensors_open(&h->st[s], h->paths[s], hint); }
    // what the shards hold: (tensor, shard), sorted
    size_t held = 0;
    for (int s = 0; s < h->num; s++) { held += (size_t)h->st[s].num; }
    HfName *holds = (HfName *)mallocCheck((held > 0 ? held : 1) * sizeof(HfName));
    for (int s = 0, k = 0; s < h->num; s++) {
        for (int i = 0; i < h->st[s].num; i++, k++) { holds[k].name = h->st[s].tensors[i].name; holds[k].num = s; }
    }
    qsort(holds, held, sizeof(HfName), compare_hf_names);
    // every tensor in the shard the index names (in the index's order: the first wrong entry
    // is the one reported), named once; every tensor of every shard in the index, in one shard
    for (size_t e = 0; e < entries; e++) {
        if (bsearch(&named[e], holds, held, sizeof(HfName), compare_hf_names) == NULL) {
            die_file(index, hint, "says tensor %s is in %s, which has no such tensor", named[e].name, h->paths[named[e].num]);
        }
    }
    qsort(named, entries, sizeof(HfName), compare_hf_names);
    for (size_t e = 1; e < entries; e++) {
        if (strcmp(named[e - 1].name, named[e].name) == 0) { die_file(index, hint, "names tensor %s twice", named[e].name); }
    }
    for (int s = 0; s < h->num; s++) {
        for (int i = 0; i < h->st[s].num; i++) {
            HfName key = {h->st[s].tensors[i].name, 0};
            if (bsearch(&key, named, entries, sizeof(HfName), compare_tensor_names) == NULL) {
                die_file(index, hint, "leaves out tensor %s of %s", key.name, h->paths[s]);
            }
        }
    }
    for (size_t k = 1; k < held; k++) {
        if (strcmp(holds[k - 1].name, holds[k].name) == 0) {
            die_file(index, hint, "tensor %s is in two shards, %s and %s", holds[k].name, h->paths[holds[k - 1].num], h->paths[holds[k].num]);
        }
    }
    free(holds); // (its names are the shards')
    hf_names_free(named, entries);
    json_free(&j);
    free(text);
}

// ----------------------------------------------------------------------------
// GGUF: llama.cpp's model file (version 3; version 2 is read the same way)

// Little-endian throughout. "GGUF", uint32 version, uint64 tensor count, uint64 key-value
// count; the key-value pairs (a string key, a uint32 value type, the value: arrays are a
// uint32 item type, a uint64 count and the items); the tensor infos (a string name, uint32
// dims, a uint64 size per dim, ggml's ne[0] first: the fastest-varying, so a PyTorch (out,
// in) weight has dims [in, out]; uint32 ggml type; uint64 offset into the data); then the
// data, from the first multiple of general.alignment (32 by default) on, each tensor at its
// offset. A string is a uint64 length and its bytes, no terminating NUL. Nothing here trusts
// the file: every count, length, type, shape and offset is checked against the bytes there
// are before anything is read or allocated (make fuzz runs this on random files).
#define GGUF_MAGIC 0x46554747u // "GGUF" read as a little-endian uint32
#define GGUF_MAX_DIMS 4        // ggml's
#define GGUF_DEFAULT_ALIGNMENT 32
enum { GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL,
       GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_NUM_VALUE_TYPES };
static const uint8_t GGUF_VALUE_SIZE[GGUF_NUM_VALUE_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}; // 0: variable

// The tensor types we know: how many elements a block holds and in how many bytes (ggml's
// type numbers). Each is dequantized block by block (gguf_dequantize, below).
typedef struct {
    uint32_t id;
    const char *name;
    uint32_t block, bytes; // elements per block, bytes per block
} GgmlType;
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13,
       GGML_Q6_K = 14, GGML_BF16 = 30 };
static const GgmlType GGML_TYPES[] = {
    {GGML_F32, "F32", 1, 4},      {GGML_F16, "F16", 1, 2},        {GGML_BF16, "BF16", 1, 2},
    {GGML_Q8_0, "Q8_0", 32, 34},  {GGML_Q4_0, "Q4_0", 32, 18},    {GGML_Q4_1, "Q4_1", 32, 20},
    {GGML_Q4_K, "Q4_K", 256, 144}, {GGML_Q5_K, "Q5_K", 256, 176}, {GGML_Q6_K, "Q6_K", 256, 210},
};
#define NUM_GGML_TYPES (int)(sizeof(GGML_TYPES) / sizeof(GGML_TYPES[0]))

static const GgmlType *ggml_type(uint32_t id) {
    for (int k = 0; k < NUM_GGML_TYPES; k++) {
        if (GGML_TYPES[k].id == id) { return &GGML_TYPES[k]; }
    }
    return NULL;
}

typedef struct {
    const uint8_t *key;   // into the file's bytes, key_len of them (not NUL-terminated)
    uint64_t key_len;
    uint32_t type;        // GGUF_*
    uint32_t item_type;   // arrays: the items' type
    uint64_t count;       // arrays: the number of items; 1 otherwise
    size_t at;            // where the value starts (arrays: the first item)
} GgufKV;

typedef struct {
    const uint8_t *name;
    uint64_t name_len;
    uint32_t n_dims;
    uint64_t dims[GGUF_MAX_DIMS]; // ne[0] first; dims past n_dims are 1
    const GgmlType *type;
    uint64_t offset;              // from the start of the data
    uint64_t elements, bytes;
} GgufTensor;

typedef struct {
    const uint8_t *buf; // the whole file
    size_t len;
    uint32_t version;
    uint64_t num_kv, num_tensors;
    GgufKV *kv;
    GgufTensor *tensors;
    uint64_t alignment;
    size_t data_start;  // where the data begins: a multiple of the alignment
    void *mapping;      // gguf_open's mmap of the file, or NULL
} Gguf;

// A reader over the file's bytes that fails, with a message, instead of reading past them.
typedef struct {
    const uint8_t *buf;
    size_t len, at;
    char *err;
    size_t err_size;
} GgufCursor;

static int gguf_fail(GgufCursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int gguf_fail(GgufCursor *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(c->err, c->err_size, "at byte %zu: ", c->at);
    if (n >= 0 && (size_t)n < c->err_size) { vsnprintf(c->err + n, c->err_size - (size_t)n, fmt, ap); }
    va_end(ap);
    return -1;
}
static int gguf_need(GgufCursor *c, uint64_t n, const char *what) {
    if (n > c->len - c->at) { return gguf_fail(c, "the file ends inside %s (%" PRIu64 " bytes needed, %zu left)", what, n, c->len - c->at); }
    return 0;
}
static uint64_t gguf_le(const uint8_t *p, int n) { // a little-endian unsigned integer of n bytes
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) { v = v << 8 | p[i]; }
    return v;
}
static int gguf_u32(GgufCursor *c, uint32_t *v, const char *what) {
    if (gguf_need(c, 4, what) != 0) { return -1; }
    *v = (uint32_t)gguf_le(c->buf + c->at, 4);
    c->at += 4;
    return 0;
}
static int gguf_u64(GgufCursor *c, uint64_t *v, const char *what) {
    if (gguf_need(c, 8, what) != 0) { return -1; }
    *v = gguf_le(c->buf + c->at, 8);
    c->at += 8;
    return 0;
}
static int gguf_string(GgufCursor *c, const uint8_t **s, uint64_t *len, const char *what) {
    if (gguf_u64(c, len, what) != 0 || gguf_need(c, *len, what) != 0) { return -1; }
    *s = c->buf + c->at;
    c->at += *len;
    return 0;
}
// skips one value of a scalar or string type
static int gguf_skip_value(GgufCursor *c, uint32_t type) {
    if (type == GGUF_STRING) {
        const uint8_t *s;
        uint64_t n;
        return gguf_string(c, &s, &n, "a string value");
    }
    if (gguf_need(c, GGUF_VALUE_SIZE[type], "a value") != 0) { return -1; }
    c->at += GGUF_VALUE_SIZE[type];
    return 0;
}

static int gguf_same(const uint8_t *a, uint64_t a_len, const uint8_t *b, uint64_t b_len) {
    return a_len == b_len && memcmp(a, b, a_len) == 0;
}
static int gguf_compare_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

void gguf_free(Gguf *g);
int gguf_find(const Gguf *g, const char *key);

// No name twice among n keys or tensors (GgufKV and GgufTensor both start with the name's
// pointer and length): sorted, then neighbours compared, so that a file of a million
// names costs a sort, not 10^12 comparisons.
typedef struct { const uint8_t *name; uint64_t len; } GgufName;
static int gguf_compare_names(const void *a, const void *b) {
    const GgufName *x = (const GgufName *)a, *y = (const GgufName *)b;
    int d = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return d != 0 ? d : (x->len > y->len) - (x->len < y->len);
}
static int gguf_check_unique(GgufCursor *c, const void *items, uint64_t n, size_t stride, const char *what) {
    if (n < 2) { return 0; }
    GgufName *names = (GgufName *)mallocCheck(n * sizeof(GgufName));
    for (uint64_t i = 0; i < n; i++) { memcpy(&names[i], (const char *)items + i * stride, sizeof(GgufName)); }
    qsort(names, n, sizeof(GgufName), gguf_compare_names);
    int rc = 0;
    for (uint64_t i = 1; i < n && rc == 0; i++) {
        if (gguf_compare_names(&names[i - 1], &names[i]) == 0) {
            rc = gguf_fail(c, "%s '%.*s' appears twice", what, (int)(names[i].len < 200 ? names[i].len : 200), (const char *)names[i].name);
        }
    }
    free(names);
    return rc;
}

// Parses a whole GGUF file in buf (len bytes; kept, not copied). 0, or -1 with a message
// in err (g is then empty).
int gguf_parse(Gguf *g, const uint8_t *buf, size_t len, char *err, size_t err_size) {
    memset(g, 0, sizeof(*g));
    g->buf = buf;
    g->len = len;
    GgufCursor c = {buf, len, 0, err, err_size};
    uint32_t magic;
    if (gguf_u32(&c, &magic, "the header") != 0) { return -1; }
    if (magic != GGUF_MAGIC) { return gguf_fail(&c, "not a GGUF file (its first bytes are not \"GGUF\")"); }
    if (gguf_u32(&c, &g->version, "the header") != 0) { return -1; }
    if (g->version != 2 && g->version != 3) { return gguf_fail(&c, "GGUF version %u: we read versions 2 and 3", g->version); }
    if (gguf_u64(&c, &g->num_tensors, "the header") != 0 || gguf_u64(&c, &g->num_kv, "the header") != 0) { return -1; }
    // each key-value pair takes 13 bytes at least, each tensor info 28: counts that the
    // file cannot hold are corrupt, and must not size an allocation
    if (g->num_kv > (len - c.at) / 13 || g->num_tensors > (len - c.at) / 28) {
        return gguf_fail(&c, "%" PRIu64 " key-value pairs and %" PRIu64 " tensors cannot fit in a file of %zu bytes",
                         g->num_kv, g->num_tensors, len);
    }
    g->kv = (GgufKV *)calloc(g->num_kv > 0 ? g->num_kv : 1, sizeof(GgufKV));
    g->tensors = (GgufTensor *)calloc(g->num_tensors > 0 ? g->num_tensors : 1, sizeof(GgufTensor));
    if (g->kv == NULL || g->tensors == NULL) { gguf_free(g); return gguf_fail(&c, "out of memory"); }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int rc = 0;
    for (uint64_t i = 0; i < g->num_kv && rc == 0; i++) {
        GgufKV *kv = &g->kv[i];
        if ((rc = gguf_string(&c, &kv->key, &kv->key_len, "a key")) != 0 || (rc = gguf_u32(&c, &kv->type, "a value type")) != 0) { break; }
        if (kv->type >= GGUF_NUM_VALUE_TYPES) { rc = gguf_fail(&c, "key '%.*s': unknown value type %u", (int)(kv->key_len < 200 ? kv->key_len : 200), (const char *)kv->key, kv->type); break; }
        kv->count = 1;
        kv->item_type = kv->type;
        if (kv->type == GGUF_ARRAY) {
            if ((rc = gguf_u32(&c, &kv->item_type, "an array's item type")) != 0 || (rc = gguf_u64(&c, &kv->count, "an array's length")) != 0) { break; }
            if (kv->item_type >= GGUF_NUM_VALUE_TYPES || kv->item_type == GGUF_ARRAY) {
                rc = gguf_fail(&c, "key '%.*s': an array of %s", (int)(kv->key_len < 200 ? kv->key_len : 200), (const char *)kv->key,
                               kv->item_type == GGUF_ARRAY ? "arrays (not supported)" : "an unknown type");
                break;
            }
            // (a string takes 8 bytes at least, any other item its size)
            uint64_t least = kv->item_type == GGUF_STRING ? 8 : GGUF_VALUE_SIZE[kv->item_type];
            if (kv->count > (len - c.at) / least) { rc = gguf_fail(&c, "an array of %" PRIu64 " items cannot fit in the file", kv->count); break; }
        }
        kv->at = c.at;
        if (kv->item_type == GGUF_STRING) {
            for (uint64_t k = 0; k < kv->count && rc == 0; k++) { rc = gguf_skip_value(&c, GGUF_STRING); }
        } else {
            rc = gguf_need(&c, kv->count * GGUF_VALUE_SIZE[kv->item_type], "a value");
            c.at += rc == 0 ? kv->count * GGUF_VALUE_SIZE[kv->item_type] : 0;
        }
    }
    if (rc == 0) { rc = gguf_check_unique(&c, g->kv, g->num_kv, sizeof(GgufKV), "key"); }
    int a = rc == 0 ? gguf_find(g, "general.alignment") : -1;
    if (a >= 0) {
        const GgufKV *kv = &g->kv[a];
        uint64_t v = kv->type == GGUF_UINT32 ? gguf_le(buf + kv->at, 4) : 0;
        if (kv->type != GGUF_UINT32 || v == 0 || (v & (v - 1)) != 0) { rc = gguf_fail(&c, "general.alignment must be a power of two, as a uint32"); }
        g->alignment = v;
    }
    for (uint64_t i = 0; i < g->num_tensors && rc == 0; i++) {
        GgufTensor *t = &g->tensors[i];
        uint32_t type;
        if ((rc = gguf_string(&c, &t->name, &t->name_len, "a tensor's name")) != 0 || (rc = gguf_u32(&c, &t->n_dims, "a tensor's dims")) != 0) { break; }
        int shown = (int)(t->name_len < 200 ? t->name_len : 200);
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) { rc = gguf_fail(&c, "tensor '%.*s' has %u dims (1 to %d)", shown, (const char *)t->name, t->n_dims, GGUF_MAX_DIMS); break; }
        t->elements = 1;
        for (int d = 0; d < GGUF_MAX_DIMS && rc == 0; d++) {
            t->dims[d] = 1;
            if ((uint32_t)d < t->n_dims && (rc = gguf_u64(&c, &t->dims[d], "a tensor's shape")) != 0) { break; }
            if (t->dims[d] == 0 || t->dims[d] > (1ull << 40) / t->elements) {
                rc = gguf_fail(&c, "tensor '%.*s': dim %d is %" PRIu64 " (0, or more than 2^40 elements in all)", shown, (const char *)t->name, d, t->dims[d]);
                break;
            }
            t->elements *= t->dims[d];
        }
        if (rc != 0 || (rc = gguf_u32(&c, &type, "a tensor's type")) != 0 || (rc = gguf_u64(&c, &t->offset, "a tensor's offset")) != 0) { break; }
        t->type = ggml_type(type);
        if (t->type == NULL) { rc = gguf_fail(&c, "tensor '%.*s': ggml type %u, which we do not read (we read F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)", shown, (const char *)t->name, type); break; }
        if (t->dims[0] % t->type->block != 0) {
            rc = gguf_fail(&c, "tensor '%.*s': its rows of %" PRIu64 " are not whole %s blocks of %u", shown, (const char *)t->name, t->dims[0], t->type->name, t->type->block);
            break;
        }
        t->bytes = t->elements / t->type->block * t->type->bytes;
        if (t->offset % g->alignment != 0) { rc = gguf_fail(&c, "tensor '%.*s': offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, shown, (const char *)t->name, t->offset, g->alignment); break; }
    }
    if (rc == 0) { rc = gguf_check_unique(&c, g->tensors, g->num_tensors, sizeof(GgufTensor), "tensor"); }
    if (rc == 0) {
        g->data_start = (c.at + g->alignment - 1) / g->alignment * g->alignment;
        if (g->data_start > len) { rc = gguf_fail(&c, "the file ends before its data (at byte %zu)", g->data_start); }
    }
    if (rc == 0 && g->num_tensors > 0) { // inside the file, in any order, no two overlapping
        const GgufTensor **order = (const GgufTensor **)mallocCheck(g->num_tensors * sizeof(*order));
        for (uint64_t i = 0; i < g->num_tensors; i++) { order[i] = &g->tensors[i]; }
        qsort(order, g->num_tensors, sizeof(*order), gguf_compare_offset);
        uint64_t data_len = len - g->data_start, end = 0;
        for (uint64_t i = 0; i < g->num_tensors && rc == 0; i++) {
            const GgufTensor *t = order[i];
            int shown = (int)(t->name_len < 200 ? t->name_len : 200);
            if (t->offset > data_len || t->bytes > data_len - t->offset) {
                rc = gguf_fail(&c, "tensor '%.*s' (bytes %" PRIu64 "..%" PRIu64 " of the data) runs past the end of the file (%" PRIu64 " bytes of data)",
                               shown, (const char *)t->name, t->offset, t->offset + t->bytes, data_len);
            } else if (t->offset < end) {
                rc = gguf_fail(&c, "tensor '%.*s' overlaps the tensor before it", shown, (const char *)t->name);
            }
            end = t->offset + t->bytes;
        }
        free(order);
    }
    if (rc != 0) { gguf_free(g); }
    return rc;
}

void gguf_free(Gguf *g) {
    free(g->kv);
    free(g->tensors);
    if (g->mapping != NULL) { munmap(g->mapping, g->len); }
    memset(g, 0, sizeof(*g));
}

// the index of the key-value pair called key, or -1
int gguf_find(const Gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->num_kv; i++) {
        if (gguf_same(g->kv[i].key, g->kv[i].key_len, (const uint8_t *)key, strlen(key))) { return (int)i; }
    }
    return -1;
}

// the tensor called name, or NULL
const GgufTensor *gguf_tensor(const Gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->num_tensors; i++) {
        if (gguf_same(g->tensors[i].name, g->tensors[i].name_len, (const uint8_t *)name, strlen(name))) { return &g->tensors[i]; }
    }
    return NULL;
}

// Item i of a value (i = 0 for a scalar) as a double, for any numeric or bool type; 0, or
// -1 if it is a string. (Integers above 2^53 lose their low bits: no GGUF count is near.)
int gguf_number(const Gguf *g, const GgufKV *kv, uint64_t i, double *out) {
    if (kv->item_type == GGUF_STRING || i >= kv->count) { return -1; }
    const uint8_t *p = g->buf + kv->at + i * GGUF_VALUE_SIZE[kv->item_type];
    uint64_t u = gguf_le(p, GGUF_VALUE_SIZE[kv->item_type]);
    switch (kv->item_type) {
    case GGUF_INT8: *out = (int8_t)u; break;
    case GGUF_INT16: *out = (int16_t)u; break;
    case GGUF_INT32: *out = (int32_t)u; break;
    case GGUF_INT64: *out = (double)(int64_t)u; break;
    case GGUF_FLOAT32: { uint32_t b = (uint32_t)u; float f; memcpy(&f, &b, 4); *out = f; break; }
    case GGUF_FLOAT64: { double d; memcpy(&d, &u, 8); *out = d; break; }
    default: *out = (double)u; break; // the unsigned types and bool
    }
    return 0;
}

// String i of a string value or an array of strings: its bytes and length; 0, or -1.
// (Walks the array from its start: fine for the few lookups a conversion makes.)
int gguf_str(const Gguf *g, const GgufKV *kv, uint64_t i, const uint8_t **s, uint64_t *len) {
    if (kv->item_type != GGUF_STRING || i >= kv->count) { return -1; }
    size_t at = kv->at;
    for (uint64_t k = 0;; k++) { // (the parser checked every length)
        *len = gguf_le(g->buf + at, 8);
        *s = g->buf + at + 8;
        if (k == i) { return 0; }
        at += 8 + *len;
    }
}

// ----------------------------------------------------------------------------
// GGUF's tensor types to float32, block by block. A quantized block stores small integers
// q and one or two fp16 numbers for the whole block: a scale d (and an offset m), so that
// x = d * q (or d * q + m). The K-quants group 256 values into a super-block of 8 or 16
// sub-blocks, each with a 6- or 8-bit scale (and minimum) of its own, themselves scaled by
// the super-block's fp16 d (and dmin). The formats are llama.cpp's (ggml-common.h);
// dev/reference/gguf_reference.py checks us against the gguf package's dequantization.

// Q4_K and Q5_K: the scale and minimum of sub-block j, 6 bits each, packed into 12 bytes:
// j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 and the
// top 2 bits of bytes j - 4 (the scale) and j (the minimum).
static void k_scale_min(const uint8_t *s, int j, float *scale, float *min) {
    if (j < 4) {
        *scale = (float)(s[j] & 63);
        *min = (float)(s[j + 4] & 63);
    } else {
        *scale = (float)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *min = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// One block of type t at p into out (t->block values).
static void ggml_dequantize_block(const GgmlType *t, const uint8_t *p, float *out) {
    switch (t->id) {
    case GGML_F32: memcpy(out, p, 4); break;
    case GGML_F16: out[0] = fp16_to_float((uint16_t)gguf_le(p, 2)); break;
    case GGML_BF16: out[0] = bf16_to_float((uint16_t)gguf_le(p, 2)); break;
    case GGML_Q8_0: { // fp16 d, 32 x int8
        float d = fp16_to_float((uint16_t)gguf_le(p, 2));
        for (int j = 0; j < 32; j++) { out[j] = d * (float)(int8_t)p[2 + j]; }
        break;
    }
    case GGML_Q4_0:   // fp16 d, 16 bytes: value j in the low nibble of byte j, value j + 16 in its high one; q - 8
    case GGML_Q4_1: { // fp16 d, fp16 m, the same nibbles, unsigned: d * q + m
        float d = fp16_to_float((uint16_t)gguf_le(p, 2)), m = t->id == GGML_Q4_1 ? fp16_to_float((uint16_t)gguf_le(p + 2, 2)) : 0.0f;
        const uint8_t *q = p + (t->id == GGML_Q4_1 ? 4 : 2);
        int offset = t->id == GGML_Q4_0 ? 8 : 0;
        for (int j = 0; j < 16; j++) {
            out[j] = d * (float)((q[j] & 0xF) - offset) + m;
            out[j + 16] = d * (float)((q[j] >> 4) - offset) + m;
        }
        break;
    }
    case GGML_Q4_K:   // fp16 d, fp16 dmin, 12 bytes of scales, 128 bytes of nibbles: 8 sub-blocks of 32
    case GGML_Q5_K: { // the same, with a fifth bit of each value in 32 bytes qh before the nibbles
        float d = fp16_to_float((uint16_t)gguf_le(p, 2)), dmin = fp16_to_float((uint16_t)gguf_le(p + 2, 2));
        const uint8_t *scales = p + 4, *qh = p + 16, *q = p + (t->id == GGML_Q5_K ? 48 : 16);
        // 64 values at a time: sub-block 2i from the low nibbles of 32 bytes, 2i + 1 from the high ones;
        // their fifth bits are bits 2i and 2i + 1 of the qh bytes
        for (int i = 0; i < 4; i++, q += 32, out += 64) {
            for (int h = 0; h < 2; h++) {
                float scale, min;
                k_scale_min(scales, 2 * i + h, &scale, &min);
                for (int l = 0; l < 32; l++) {
                    int v = h == 0 ? q[l] & 0xF : q[l] >> 4;
                    if (t->id == GGML_Q5_K && (qh[l] >> (2 * i + h) & 1)) { v += 16; }
                    out[32 * h + l] = d * scale * (float)v - dmin * min;
                }
            }
        }
        break;
    }
    case GGML_Q6_K: { // 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales, fp16 d: 16 sub-blocks of 16
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        float d = fp16_to_float((uint16_t)gguf_le(p + 208, 2));
        // 128 values at a time, 32 positions l each giving four: in 64 low-nibble bytes and
        // 32 bytes holding the four values' high 2 bits; q - 32
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, out += 128) {
            for (int l = 0; l < 32; l++) {
                int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
                int s = l / 16;
                out[l] = d * (float)sc[s] * (float)q1;
                out[l + 32] = d * (float)sc[s + 2] * (float)q2;
                out[l + 64] = d * (float)sc[s + 4] * (float)q3;
                out[l + 96] = d * (float)sc[s + 6] * (float)q4;
            }
        }
        break;
    }
    default: break; // (the parser accepts no other type)
    }
}

// Tensor t of g as t->elements float32 values, in ggml's order (ne[0] fastest).
void gguf_dequantize(const Gguf *g, const GgufTensor *t, float *out) {
    const uint8_t *p = g->buf + g->data_start + t->offset;
    uint64_t blocks = t->elements / t->type->block;
    #pragma omp parallel for if (blocks > 4096)
    for (uint64_t b = 0; b < blocks; b++) { ggml_dequantize_block(t->type, p + b * t->type->bytes, out + b * t->type->block); }
}

// Maps the file at path into memory and parses it, or exits with a message naming it.
void gguf_open(Gguf *g, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { die_file(path, NULL, "cannot open it: %s", strerror(errno)); }
    struct stat info;
    if (fstat(fd, &info) != 0) { die_file(path, NULL, "cannot stat it: %s", strerror(errno)); }
    size_t len = (size_t)info.st_size;
    void *m = len > 0 ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len > 0 && m == MAP_FAILED) { die_file(path, NULL, "cannot map it into memory: %s", strerror(errno)); }
    char err[512];
    if (gguf_parse(g, (const uint8_t *)m, len, err, sizeof(err)) != 0) {
        if (m != NULL) { munmap(m, len); }
        die_file(path, "a GGUF file (llama.cpp's) holds a header, metadata, tensor infos and the tensors' data", "%s", err);
    }
    g->mapping = m;
}

// a string of the file, for the terminal: at most 60 bytes, control characters escaped
static void gguf_print_string(const uint8_t *s, uint64_t len) {
    printf(" \"");
    for (uint64_t i = 0; i < len && i < 60; i++) {
        if (s[i] == '\n') { printf("\\n"); }
        else if (s[i] < 0x20 || s[i] == 0x7f) { printf("\\x%02x", s[i]); }
        else { putchar(s[i]); }
    }
    printf("\"%s", len > 60 ? "..." : "");
}

// -i FILE.gguf without -o: what the file holds, as gguf-dump shows it (metadata with short
// arrays in full and long ones by their first items and length, then the tensors).
void gguf_print(const Gguf *g, const char *path) {
    printf("%s: GGUF version %u, %" PRIu64 " key-value pairs, %" PRIu64 " tensors, data from byte %zu (alignment %" PRIu64 ")\n",
           path, g->version, g->num_kv, g->num_tensors, g->data_start, g->alignment);
    static const char *const TYPE_NAMES[GGUF_NUM_VALUE_TYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    for (uint64_t i = 0; i < g->num_kv; i++) {
        const GgufKV *kv = &g->kv[i];
        printf("  %-40.*s ", (int)(kv->key_len < 200 ? kv->key_len : 200), (const char *)kv->key);
        if (kv->type == GGUF_ARRAY) { printf("[%s x %" PRIu64 "]", TYPE_NAMES[kv->item_type], kv->count); }
        else { printf("%s", TYPE_NAMES[kv->type]); }
        uint64_t shown = kv->count <= 8 ? kv->count : 3;
        for (uint64_t k = 0; k < shown; k++) {
            const uint8_t *s;
            uint64_t len;
            double v;
            if (gguf_str(g, kv, k, &s, &len) == 0) { gguf_print_string(s, len); }
            else if (gguf_number(g, kv, k, &v) == 0 && (kv->item_type == GGUF_FLOAT32 || kv->item_type == GGUF_FLOAT64)) { printf(" %.9g", v); }
            else if (kv->item_type == GGUF_INT8 || kv->item_type == GGUF_INT16 || kv->item_type == GGUF_INT32 || kv->item_type == GGUF_INT64) {
                int n = GGUF_VALUE_SIZE[kv->item_type];
                uint64_t u = gguf_le(g->buf + kv->at + k * n, n);
                printf(" %" PRId64, (int64_t)(u << (64 - 8 * n)) >> (64 - 8 * n)); // sign-extended
            } else {
                printf(" %" PRIu64, gguf_le(g->buf + kv->at + k * GGUF_VALUE_SIZE[kv->item_type], GGUF_VALUE_SIZE[kv->item_type]));
            }
        }
        printf("%s\n", shown < kv->count ? " ..." : "");
    }
    for (uint64_t i = 0; i < g->num_tensors; i++) {
        const GgufTensor *t = &g->tensors[i];
        printf("  %-40.*s %-5s [", (int)(t->name_len < 200 ? t->name_len : 200), (const char *)t->name, t->type->name);
        for (uint32_t d = 0; d < t->n_dims; d++) { printf("%s%" PRIu64, d > 0 ? ", " : "", t->dims[d]); }
        printf("] at %" PRIu64 "\n", t->offset);
    }
}

// ----------------------------------------------------------------------------
// writing safetensors: one file, or shards of at most max_bytes and their index

// A tensor to write: our float32 data, written as F32 or BF16 in HF's layout.
typedef struct {
    char name[128];
    int ndim;
    int64_t dims[2];    // HF's shape
    const float *src;   // our data; for a transposed tensor (dims[1], dims[0]) row-major
    int transposed;     // HF keeps it (in, out), we (out, in)
    const void *raw;    // ... or bytes written as they are, of dtype raw_dtype (4-bit layers' parts)
    const char *raw_dtype;
} OutTensor;

static size_t out_numel(const OutTensor *t) { return (size_t)t->dims[0] * (t->ndim == 2 ? (size_t)t->dims[1] : 1); }
static size_t out_bytes(const OutTensor *t, int bf16) {
    size_t element = t->raw == NULL ? (bf16 ? 2 : 4) : strcmp(t->raw_dtype, "F32") == 0 ? 4 : 1;
    return out_numel(t) * element;
}

// Writes tensors [0, n) into one safetensors file, atomically (the header is lib/safetensors.h's:
// them in order, with "__metadata__": {"format": "pt"} as transformers writes it, padded
// to 8 bytes so the data is aligned).
static void safetensors_write(const char *path, const OutTensor *t, int n, int bf16, int keep_tmp) {
    StOut *outs = (StOut *)mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(StOut));
    size_t largest = 1, used, data_bytes;
    for (int i = 0; i < n; i++) {
        outs[i] = (StOut){.name = t[i].name, .dtype = t[i].raw != NULL ? t[i].raw_dtype : bf16 ? "BF16" : "F32", .ndim = t[i].ndim,
                          .shape = {t[i].dims[0], t[i].dims[1]}};
        if (out_numel(&t[i]) > largest) { largest = out_numel(&t[i]); }
    }
    uint8_t *header = safetensors_header_bytes(outs, n, NULL, &used, &data_bytes);
    free(outs);
    char tmp[MAX_PATH_LEN];
    path_concat(tmp, path, ".tmp");
    FILE *fp = fopenCheck(tmp, "wb");
    int ok = fwrite(header, 1, used, fp) == used;
    // the data, one tensor at a time (transposed or narrowed in a scratch buffer)
    float *slice = (float *)mallocCheck(largest * sizeof(float));
    uint16_t *narrow = (uint16_t *)mallocCheck(largest * sizeof(uint16_t));
    for (int i = 0; i < n && ok; i++) {
        const float *src = t[i].src;
        size_t numel = out_numel(&t[i]);
        if (t[i].raw != NULL) {
            ok = fwrite(t[i].raw, 1, out_bytes(&t[i], bf16), fp) == out_bytes(&t[i], bf16);
            continue;
        }
        if (t[i].transposed) { // ours (out, in) -> HF (in, out)
            size_t in = (size_t)t[i].dims[0], out = (size_t)t[i].dims[1];
            for (size_t r = 0; r < in; r++) {
                for (size_t o = 0; o < out; o++) { slice[r * out + o] = src[o * in + r]; }
            }
            src = slice;
        }
        if (bf16) {
            for (size_t k = 0; k < numel; k++) { narrow[k] = float_to_bf16(src[k]); }
            ok = fwrite(narrow, 2, numel, fp) == numel;
        } else {
            ok = fwrite(src, 4, numel, fp) == numel;
        }
    }
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok = (fclose(fp) == 0) && ok;
    if (!ok || (!keep_tmp && rename(tmp, path) != 0)) {
        remove(tmp);
        die_file(path, NULL, "could not write it: %s (the previous file, if any, is untouched)", strerror(errno));
    }
    free(slice);
    free(narrow);
    free(header);
}

// Writes the weights into dir: model.safetensors, or (max_bytes > 0) shards of at most
// max_bytes each (a tensor bigger than that gets a shard of its own) and their index.
// We refuse a folder that holds the other layout: transformers would load the stale one.
static void hf_weights_write(const char *dir, const OutTensor *t, int n, int bf16, size_t max_bytes) {
    char single[MAX_PATH_LEN], index[MAX_PATH_LEN];
    path_concat(single, dir, "/model.safetensors");
    path_concat(index, dir, "/model.safetensors.index.json");
    const char *stale = max_bytes > 0 ? single : index;
    if (access(stale, F_OK) == 0) {
        die_file(dir, "export into a new folder, or remove the old weights first",
                 "holds %s: a model in the other layout (%s), which transformers would load instead",
                 stale + strlen(dir) + 1, max_bytes > 0 ? "one file" : "sharded");
    }
    if (max_bytes == 0) {
        safetensors_write(single, t, n, bf16, 0);
        return;
    }
    int *first = (int *)mallocCheck(((size_t)n + 1) * sizeof(int)), shards = 0;
    size_t total = 0, bytes = 0;
    for (int i = 0; i < n; i++) { // greedy, in order, as save_pretrained splits
        size_t b = out_bytes(&t[i], bf16);
        if (i == 0 || bytes + b > max_bytes) { first[shards++] = i; bytes = 0; }
        bytes += b;
        total += b;
    }
    first[shards] = n;
    size_t cap = 4096 + (size_t)n * 256, used = 0;
    char *json = (char *)mallocCheck(cap);
    used += (size_t)snprintf(json, cap, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n  \"weight_map\": {", total);
    // Every shard is first written whole under a temporary name (a failure leaves the folder
    // as it was, but for .tmp files). Only then does the old index go, the shards take their
    // names, and the new index is written: an old index that names files of the same names
    // must never point at a mix of old and new shards. (A crash between the removal and the
    // new index leaves a folder without an index: an error to load, never a wrong model.)
    for (int s = 0; s < shards; s++) {
        char file[64], path[MAX_PATH_LEN];
        snprintf(file, sizeof(file), "model-%05d-of-%05d.safetensors", s + 1, shards);
        format_path(path, sizeof(path), "%s/%s", dir, file);
        safetensors_write(path, t + first[s], first[s + 1] - first[s], bf16, 1);
        for (int i = first[s]; i < first[s + 1]; i++) {
            used += (size_t)snprintf(json + used, cap - used, "%s\n    \"%s\": \"%s\"", i ? "," : "", t[i].name, file);
        }
    }
    if (remove(index) != 0 && errno != ENOENT) { die_file(index, NULL, "cannot replace it: %s", strerror(errno)); }
    for (int s = 0; s < shards; s++) {
        char path[MAX_PATH_LEN], tmp[MAX_PATH_LEN];
        format_path(path, sizeof(path), "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        format_path(tmp, sizeof(tmp), "%s.tmp", path);
        if (rename(tmp, path) != 0) { die_file(path, NULL, "cannot rename %s to it: %s", tmp, strerror(errno)); }
    }
    used += (size_t)snprintf(json + used, cap - used, "\n  }\n}\n");
    const void *bufs[1] = {json};
    size_t sizes[1] = {used};
    write_file_atomic(index, bufs, sizes, 1); // last: until now, no index points at the new shards
    free(json);
    free(first);
}

// ----------------------------------------------------------------------------
// the GPT-2 family: tensor names, config.json

// HF's names for our 16 tensors (GPT2LMHeadModel's state_dict, which save_pretrained
// prefixes with "transformer."; the files on the Hub for gpt2 ... gpt2-xl have no prefix).
// The per-layer ones (2..13) are h.<l>.<name>. Conv1D weights are (in, out): transposed.
static const char *const HF_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte.weight", "wpe.weight", "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"};
static const int HF_TRANSPOSED[NUM_PARAMETER_TENSORS] = {0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
static int hf_per_layer(int k) { return k >= 2 && k <= 13; }

// HF's shape of tensor k (one layer's slice for the per-layer ones): ndim, and dims
static int hf_shape(GPT2Config c, int k, int64_t *dims) {
    int64_t C = c.channels;
    switch (k) {
    case 0: dims[0] = c.vocab_size; dims[1] = C; return 2;
    case 1: dims[0] = c.max_seq_len; dims[1] = C; return 2;
    case 4: dims[0] = C; dims[1] = 3 * C; return 2;
    case 5: dims[0] = 3 * C; return 1;
    case 6: dims[0] = C; dims[1] = C; return 2;
    case 10: dims[0] = C; dims[1] = 4 * C; return 2;
    case 11: dims[0] = 4 * C; return 1;
    case 12: dims[0] = 4 * C; dims[1] = C; return 2;
    default: dims[0] = C; return 1; // LayerNorms and the C-sized biases
    }
}

// GPT2Config from a parsed config.json. Refuses what our forward pass does not compute:
// another activation, epsilon, head scaling, or untied output weights. 0, or -1 and err.
static int hf_config_fields(GPT2Config *c, const Json *j, char *err, size_t err_size) {
    if (j->tokens[0].type != JSON_OBJECT) { return st_fail(err, err_size, "not a JSON object"); }
    char s[64];
    int model_type = json_get(j, 0, "model_type");
    if (model_type >= 0 && (json_string(j, model_type, s, sizeof(s)) < 0 || strcmp(s, "gpt2") != 0)) {
        return st_fail(err, err_size, "model_type is not \"gpt2\": only GPT-2 is supported");
    }
    static const char *const keys[5] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    int64_t v[5];
    for (int k = 0; k < 5; k++) {
        int at = json_get(j, 0, keys[k]);
        if (at < 0 && k == 4) { at = json_get(j, 0, "n_ctx"); } // very old configs
        if (at < 0 || json_int64(j, at, &v[k]) != 0 || v[k] <= 0 || v[k] > (1 << 24)) {
            return st_fail(err, err_size, "%s is missing or not a positive integer", keys[k]);
        }
    }
    int act = json_get(j, 0, "activation_function");
    if (act >= 0 && (json_string(j, act, s, sizeof(s)) < 0 || (strcmp(s, "gelu_new") != 0 && strcmp(s, "gelu_pytorch_tanh") != 0))) {
        return st_fail(err, err_size, "activation_function must be gelu_new (GPT-2's tanh GELU), found something else");
    }
    int eps = json_get(j, 0, "layer_norm_epsilon");
    double e;
    if (eps >= 0 && (json_double(j, eps, &e) != 0 || fabs(e - 1e-5) > 1e-12)) {
        return st_fail(err, err_size, "layer_norm_epsilon must be 1e-5 (GPT-2's; our LayerNorm has it built in)");
    }
    int inner = json_get(j, 0, "n_inner");
    int64_t n_inner;
    if (inner >= 0 && j->tokens[inner].type != JSON_NULL && (json_int64(j, inner, &n_inner) != 0 || n_inner != 4 * v[2])) {
        return st_fail(err, err_size, "n_inner must be null or 4 x n_embd");
    }
    // flags whose non-default value changes the computation
    static const char *const must_be_true[2] = {"scale_attn_weights", "tie_word_embeddings"};
    static const char *const must_be_false[2] = {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"};
    for (int k = 0; k < 2; k++) {
        int at = json_get(j, 0, must_be_true[k]);
        if (at >= 0 && j->tokens[at].type != JSON_TRUE) { return st_fail(err, err_size, "%s must be true", must_be_true[k]); }
        at = json_get(j, 0, must_be_false[k]);
        if (at >= 0 && j->tokens[at].type != JSON_FALSE) { return st_fail(err, err_size, "%s must be false", must_be_false[k]); }
    }
    if (v[2] % v[1] != 0) { return st_fail(err, err_size, "n_embd %" PRId64 " is not divisible by n_head %" PRId64, v[2], v[1]); }
    c->num_layers = (int)v[0];
    c->num_heads = (int)v[1];
    c->channels = (int)v[2];
    c->vocab_size = (int)v[3];
    c->max_seq_len = (int)v[4];
    c->padded_vocab_size = (int)((v[3] + 127) / 128 * 128); // as llm.c pads: a multiple of 128
    return 0;
}

// GPT2Config from a config.json text: 0, or -1 and a message in err.
int gpt2_config_from_hf_json(GPT2Config *c, const char *text, size_t len, char *err, size_t err_size) {
    Json j;
    int ok = json_parse(&j, text, len, err, err_size) == 0 && hf_config_fields(c, &j, err, err_size) == 0;
    json_free(&j);
    return ok ? 0 : -1;
}

// Which of our tensors an HF name is: k (and the layer in *layer), -1 for a name we
// accept and ignore (attention-mask buffers of old files; lm_head.weight, checked
// separately), -2 for a name that has no place in GPT-2.
static int hf_tensor_index(const char *name, int *layer) {
    if (strncmp(name, "transformer.", 12) == 0) { name += 12; }
    *layer = 0;
    if (strcmp(name, "lm_head.weight") == 0) { return -1; }
    if (strncmp(name, "h.", 2) == 0) {
        char *end;
        long l = strtol(name + 2, &end, 10);
        if (end == name + 2 || *end != '.' || l < 0 || l > 100000) { return -2; }
        *layer = (int)l;
        if (strcmp(end + 1, "attn.bias") == 0 || strcmp(end + 1, "attn.masked_bias") == 0) { return -1; }
        for (int k = 2; k <= 13; k++) {
            if (strcmp(end + 1, HF_NAMES[k]) == 0) { return k; }
        }
        return -2;
    }
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (!hf_per_layer(k) && strcmp(name, HF_NAMES[k]) == 0) { return k; }
    }
    return -2;
}

// ----------------------------------------------------------------------------
// Hugging Face GPT-2 folders in and out

#define HF_HINT "a Hugging Face GPT-2 folder holds config.json and model.safetensors (or shards and model.safetensors.index.json)"

void gpt2_build_from_hf(GPT2Weights *w, const char *dir) {
    char config_path[MAX_PATH_LEN], err[512];
    path_concat(config_path, dir, "/config.json");
    size_t len;
    uint8_t *text = read_whole_file(config_path, &len, HF_HINT);
    if (gpt2_config_from_hf_json(&w->config, (const char *)text, len, err, sizeof(err)) != 0) {
        die_file(config_path, HF_HINT, "%s", err);
    }
    free(text);
    gpt2_validate_config(w->config, config_path);
    // the headers, checked in full before any data is read
    HfWeights h;
    hf_weights_open(&h, dir, HF_HINT);

    // every tensor must be found once, with GPT-2's shape for this config
    GPT2Config c = w->config;
    int L = c.num_layers;
    typedef struct { int shard; const StTensor *t; } Found;
    Found *found = (Found *)calloc((size_t)NUM_PARAMETER_TENSORS * L, sizeof(Found));
    Found lm_head = {0, NULL};
    if (found == NULL) { die_file(dir, NULL, "out of memory"); }
    size_t largest = 0;
    int all_bf16 = 1;
    for (int s = 0; s < h.num; s++) {
        const char *path = h.paths[s];
        for (int i = 0; i < h.st[s].num; i++) {
            const StTensor *t = &h.st[s].tensors[i];
            int layer, k = hf_tensor_index(t->name, &layer);
            if (k == -2) { die_file(path, HF_HINT, "tensor %s is not part of GPT-2", t->name); }
            int is_lm_head = k == -1 && strstr(t->name, "lm_head") != NULL;
            if ((k >= 0 || is_lm_head) && !st_float_dtype(t->dtype)) {
                die_file(path, NULL, "tensor %s has dtype %s; we read F32, F16, BF16 and F64", t->name, t->dtype);
            }
            if (k == -1) { // lm_head (checked against wte below) or an attention-mask buffer (not a weight)
                if (is_lm_head) {
                    if (lm_head.t != NULL) { die_file(path, NULL, "tensors %s and %s are the same weight", lm_head.t->name, t->name); }
                    lm_head = (Found){s, t};
                }
                continue;
            }
            if (layer >= L) { die_file(path, NULL, "tensor %s: layer %d, but config.json says n_layer=%d", t->name, layer, L); }
            Found *slot = &found[k * L + (hf_per_layer(k) ? layer : 0)];
            if (slot->t != NULL) { die_file(path, NULL, "tensors %s and %s are the same weight", slot->t->name, t->name); }
            *slot = (Found){s, t};
            int64_t dims[2] = {0, 0};
            int ndim = hf_shape(c, k, dims);
            if (t->ndim != ndim || t->shape[0] != dims[0] || (ndim == 2 && t->shape[1] != dims[1])) {
                char got[160] = "", want[64];
                for (int d = 0; d < t->ndim; d++) {
                    snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%" PRId64, d ? " x " : "", t->shape[d]);
                }
                if (ndim == 2) { snprintf(want, sizeof(want), "%" PRId64 " x %" PRId64, dims[0], dims[1]); }
                else { snprintf(want, sizeof(want), "%" PRId64, dims[0]); }
                die_file(path, NULL, "tensor %s has shape [%s], config.json (L=%d C=%d V=%d maxT=%d) needs [%s]",
                         t->name, got, L, c.channels, c.vocab_size, c.max_seq_len, want);
            }
            if (t->end - t->begin > largest) { largest = t->end - t->begin; }
            all_bf16 = all_bf16 && strcmp(t->dtype, "BF16") == 0;
        }
    }
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        for (int l = 0; l < (hf_per_layer(k) ? L : 1); l++) {
            if (found[k * L + l].t == NULL) {
                char name[64];
                if (hf_per_layer(k)) { snprintf(name, sizeof(name), "h.%d.%s", l, HF_NAMES[k]); }
                else { snprintf(name, sizeof(name), "%s", HF_NAMES[k]); }
                die_file(h.paths[0], HF_HINT, "tensor %s is missing (with or without the transformer. prefix)", name);
            }
        }
    }

    // now the data, shard by shard: read, widen to float32, transpose the Conv1D weights
    gpt2_weights_allocate(w);
    w->from_bf16 = all_bf16;
    memset(w->params_memory, 0, w->num_parameters * sizeof(float)); // wte's padding rows stay 0
    void *buf = mallocCheck(largest);
    float *slice = (float *)mallocCheck(largest / 2 * sizeof(float) + sizeof(float)); // enough for 2-byte dtypes
    float **tables = (float **)&w->params;
    for (int s = 0; s < h.num; s++) {
        FILE *fp = fopenCheck(h.paths[s], "rb");
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            for (int l = 0; l < (hf_per_layer(k) ? L : 1); l++) {
                const StTensor *t = found[k * L + l].t;
                if (found[k * L + l].shard != s) { continue; }
                float *dst = tables[k] + (size_t)l * (w->param_sizes[k] / (hf_per_layer(k) ? (size_t)L : 1));
                if (!HF_TRANSPOSED[k]) { // (wte: the file's V rows, then our padding rows, already 0)
                    st_read_floats(fp, &h.st[s], t, dst, buf, h.paths[s]);
                } else { // HF (in, out) -> ours (out, in)
                    st_read_floats(fp, &h.st[s], t, slice, buf, h.paths[s]);
                    size_t in = (size_t)t->shape[0], out = (size_t)t->shape[1];
                    for (size_t o = 0; o < out; o++) {
                        for (size_t i = 0; i < in; i++) { dst[o * in + i] = slice[i * out + o]; }
                    }
                }
            }
        }
        fcloseCheck(fp);
    }
    // a stored lm_head must be wte itself: our GPT-2 computes logits with the tied wte
    if (lm_head.t != NULL) {
        const StTensor *t = lm_head.t;
        const char *path = h.paths[lm_head.shard];
        size_t n = (size_t)c.vocab_size * c.channels;
        if (t->ndim != 2 || t->shape[0] != c.vocab_size || t->shape[1] != c.channels || t->end - t->begin > largest) {
            die_file(path, NULL, "tensor %s does not have wte's shape: untied output layers are not supported", t->name);
        }
        FILE *fp = fopenCheck(path, "rb");
        st_read_floats(fp, &h.st[lm_head.shard], t, slice, buf, path);
        fcloseCheck(fp);
        if (memcmp(slice, w->params.wte, n * sizeof(float)) != 0) {
            die_file(path, NULL, "tensor %s differs from wte: untied output layers are not supported", t->name);
        }
    }
    free(buf);
    free(slice);
    free(found);
    hf_weights_free(&h);
}

// The config.json transformers needs to build this model (its defaults cover the rest).
// The config.json transformers needs to build this model (its defaults cover the rest).
static int hf_config_text(const GPT2Weights *w, const char *dtype, char *out, size_t size) {
    GPT2Config c = w->config;
    char special[96] = ""; // <|endoftext|> is GPT-2's bos and eos, where the vocabulary has it
    if (c.vocab_size > 50256) { snprintf(special, sizeof(special), "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"); }
    return snprintf(out, size,
                    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"activation_function\": \"gelu_new\",\n%s  \"dtype\": \"%s\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_layer\": %d,\n  \"n_positions\": %d,\n"
                    "  \"tie_word_embeddings\": true,\n  \"vocab_size\": %d\n}\n",
                    special, dtype, c.max_seq_len, c.channels, c.num_heads, c.num_layers, c.max_seq_len, c.vocab_size);
}

// Writes dir/config.json and dir/model.safetensors (F32, or BF16 for weights that came

// Writes dir/config.json and the weights (model.safetensors, or shards of at most max_bytes),
// F32, or BF16 with bf16 (exact for weights that came from a bf16 file), each file
// atomically. Tensor names as save_pretrained writes them; wte without its padding rows;
// Conv1D weights transposed back to (in, out).
void gpt2_export_hf(const GPT2Weights *w, const char *dir, int bf16, size_t max_bytes) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) { die_file(dir, NULL, "cannot create the folder: %s", strerror(errno)); }
    GPT2Config c = w->config;
    int L = c.num_layers, n = 0;
    OutTensor *t = (OutTensor *)calloc((size_t)NUM_PARAMETER_TENSORS * L, sizeof(OutTensor)); // (raw: NULL)
    if (t == NULL) { die_file(dir, NULL, "out of memory"); }
    const float *const *tables = (const float *const *)&w->params;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t per = w->param_sizes[k] / (hf_per_layer(k) ? (size_t)L : 1);
        for (int l = 0; l < (hf_per_layer(k) ? L : 1); l++, n++) {
            if (hf_per_layer(k)) { snprintf(t[n].name, sizeof(t[n].name), "transformer.h.%d.%s", l, HF_NAMES[k]); }
            else { snprintf(t[n].name, sizeof(t[n].name), "transformer.%s", HF_NAMES[k]); }
            t[n].ndim = hf_shape(c, k, t[n].dims);
            t[n].src = tables[k] + (size_t)l * per;
            t[n].transposed = HF_TRANSPOSED[k];
        }
    }
    hf_weights_write(dir, t, n, bf16, max_bytes);
    free(t);
    char config[2048], config_path[MAX_PATH_LEN];
    int len = hf_config_text(w, bf16 ? "bfloat16" : "float32", config, sizeof(config));
    path_concat(config_path, dir, "/config.json");
    const void *bufs[1] = {config};
    size_t sizes[1] = {(size_t)len};
    write_file_atomic(config_path, bufs, sizes, 1);
}

// ----------------------------------------------------------------------------
// the tokenizer: GPT-2's encoder.json + vocab.bpe are HF's vocab.json + merges.txt

// Copies the tokenizer's two files from one folder to the other, renamed; each is checked
// first (the vocabulary parses as a JSON object, the merges start with their #version line).
// With to == NULL, only the check: main runs it before it writes anything.
static void copy_tokenizer(const char *from, const char *to, int to_hf) {
    static const char *const ours[2] = {"/encoder.json", "/vocab.bpe"}, *const theirs[2] = {"/vocab.json", "/merges.txt"};
    for (int i = 0; i < 2; i++) {
        char src[MAX_PATH_LEN], dst[MAX_PATH_LEN], err[512] = "the top level is not an object";
        path_concat(src, from, to_hf ? ours[i] : theirs[i]);
        path_concat(dst, to != NULL ? to : ".", to_hf ? theirs[i] : ours[i]);
        size_t len;
        uint8_t *text = read_whole_file(src, &len, "GPT-2's tokenizer: encoder.json + vocab.bpe (ours, in data/gpt2), "
                                        "vocab.json + merges.txt (a Hugging Face folder)");
        if (i == 0) {
            Json j;
            if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) {
                die_file(src, NULL, "not a vocabulary (a JSON object of token: id): %s", err);
            }
            json_free(&j);
        } else if (len < 8 || memcmp(text, "#version", 8) != 0) {
            die_file(src, NULL, "not a BPE merges file: it should start with a #version line");
        }
        const void *bufs[1] = {text};
        if (to != NULL) { write_file_atomic(dst, bufs, &len, 1); }
        free(text);
    }
}

// ----------------------------------------------------------------------------
// the model from -i: a Hugging Face folder, a checkpoint file, or d<N> for a new random model

void gpt2_weights_build(GPT2Weights *w, const char *source, uint64_t seed) {
    memset(w, 0, sizeof(*w));
    struct stat info;
    if (stat(source, &info) == 0 && S_ISDIR(info.st_mode)) {
        gpt2_build_from_hf(w, source);
    } else if (stat(source, &info) == 0) {
        gpt2_build_from_checkpoint(w, source);
    } else if (source[0] == 'd' && source[1] >= '0' && source[1] <= '9') {
        w->config = gpt2_config_from_descriptor(source);
        gpt2_weights_allocate(w);
        init_parameters(w->params_memory, w->param_sizes, w->config, seed, 0);
    } else {
        die_file(source, "-i takes a Hugging Face GPT-2 folder, a checkpoint file, or d<N> (a new random model)",
                 "no such file or folder");
    }
    snprintf(w->source, sizeof(w->source), "%s", source);
}

// ----------------------------------------------------------------------------
// the Llama family: configuration, weights in memory, our model file

// --- begin shared-copy: quant4 ---
// QLoRA (Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", 2023) keeps the
// frozen weights in 4 bits and trains LoRA beside them. We store them exactly as
// bitsandbytes does (its quantize_4bit / dequantize_4bit, the layout of Hugging Face's
// *-bnb-4bit checkpoints), the same bytes as bitsandbytes computes on the CPU (where it
// summed the double quantization's mean in another order, on a GPU, the offset can differ
// in its last bit: torch_sum_f32):
//   - a tensor of n values, flattened row-major, cut into blocks of `blocksize` (64; any
//     power of two from 32 to 4096), the last block possibly partial;
//   - each block's absmax = max |x|, and each value the index of the code nearest to
//     x / absmax, two indices per byte, the first element in the high nibble (an odd n pads
//     the last byte with the index of 0);
//   - the codes: NF4 (16 quantiles of N(0, 1) scaled to [-1, 1]: each code equally likely
//     for normally distributed weights) or FP4 (a 4-bit float, 1 sign, 2 exponent and 1
//     mantissa bits, over 12), listed in bitsandbytes' order;
//   - dequantized, x = code[index] * absmax (fp32).
// Double quantization (bitsandbytes' compress_statistics, QLoRA's default) stores the absmax
// values in 8 bits too: minus their mean (the offset), in blocks of 256, each the index of
// the nearest of the 256 values of the signed 8-bit "dynamic" map times the fp32 absmax of
// its block of 256. Per 64 weights: 256 bits of codes + 8 + 32/256 bits of scale, 4.127
// bits a weight against 4.5 without it (QLoRA's 0.52 bytes per parameter, against fp32's 4).
// Checked against bitsandbytes 0.50.2 by test_finetune_lora (dev/reference/nf4_reference.py).
enum { QUANT_NONE = 0, QUANT_NF4 = 1, QUANT_FP4 = 2 };

static const float NF4_CODE[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                   -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                   0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                                   0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
// FP4 by bit pattern: 0, 0.0625, 8, 12, 4, 6, 2, 3 (and the same negated), / 12. (Both zeros
// are +0, as bitsandbytes' table has them.)
static const float FP4_CODE[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 1.0f, 4.0f / 12, 6.0f / 12, 2.0f / 12, 3.0f / 12,
                                   0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
#define QUANT_NESTED_BLOCK 256 // double quantization's blocksize

typedef struct {
    int type;                 // QUANT_NF4 or QUANT_FP4
    int blocksize;
    size_t n, num_blocks;     // values; blocks, ceil(n / blocksize)
    uint8_t *packed;          // (n + 1) / 2 bytes
    float *absmax;            // (num_blocks): without double quantization; NULL with it
    uint8_t *qabsmax;         // (num_blocks): with it, the 8-bit index of absmax - offset ...
    float *nested_absmax;     // ... the fp32 absmax of each block of 256 of those
    float offset;             // ... their mean
    float nested_code[256];   // ... and the map (bitsandbytes' dynamic map)
} Quant4;

static const float *quant4_code(int type) { return type == QUANT_FP4 ? FP4_CODE : NF4_CODE; }
static const char *quant4_name(int type) { return type == QUANT_FP4 ? "fp4" : type == QUANT_NF4 ? "nf4" : "none"; }
static int quant4_blocksize_ok(long blocksize) {
    for (long b = 32; b <= 4096; b *= 2) {
        if (blocksize == b) { return 1; }
    }
    return 0;
}

// bitsandbytes' signed dynamic map (create_dynamic_map(signed=True)), as torch computes it in
// float32: for i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1), times 10^(i - 6),
// with both signs; then 0 and 1; sorted. 256 values from -0.993 to 1. (torch's linspace
// computes each point with one rounding, a fused multiply-add from the start before halfway
// and from the end after.)
static float linspace_point(float start, float end, int steps, int i) {
    float step = (end - start) / (float)(steps - 1);
    return i < steps / 2 ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
}
static int compare_floats(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
static void dynamic_map(float code[256]) {
    int k = 0;
    for (int i = 0; i < 7; i++) {
        int steps = (1 << i) + 1;
        float scale = (float)pow(10.0, i - 6);
        for (int s = 0; s + 1 < steps; s++) {
            float mean = (linspace_point(0.1f, 1.0f, steps, s) + linspace_point(0.1f, 1.0f, steps, s + 1)) / 2.0f;
            code[k++] = scale * mean;
            code[k++] = -(scale * mean);
        }
    }
    code[k++] = 0.0f;
    code[k++] = 1.0f;
    qsort(code, 256, sizeof(float), compare_floats);
}

// torch's float32 sum, in its order (at::native's cascade sum with AVX2's 8-lane vectors,
// one thread): the mean that double quantization subtracts must be bitsandbytes' to the last
// bit. The data as rows of 4 vectors of 8 (32 lanes); each lane sums its column through four
// levels (a level's running sum added to the next every 16 rows); vectors left over go into
// the first vector; the 4 vectors are added, then the scalar tail, then the 8 lanes in order.
static float torch_sum_f32(const float *x, size_t n) {
    enum { W = 8, ILP = 4, LEVELS = 4 };
    if (n < W) { // (no vector: torch's scalar path, 4 running sums)
        float p[ILP] = {0};
        size_t rows = n / ILP;
        for (size_t i = 0; i < rows; i++) { for (int k = 0; k < ILP; k++) { p[k] += x[i * ILP + k]; } }
        for (size_t i = rows * ILP; i < n; i++) { p[0] += x[i]; }
        for (int k = 1; k < ILP; k++) { p[0] += p[k]; }
        return p[0];
    }
    size_t vecs = n / W, rows = vecs / ILP;
    int ceil_log2 = 1;
    while (rows > 2 && ((size_t)1 << ceil_log2) < rows) { ceil_log2++; }
    int power = ceil_log2 / LEVELS > 4 ? ceil_log2 / LEVELS : 4;
    size_t step = (size_t)1 << power, mask = step - 1;
    float acc[LEVELS][ILP][W] = {{{0}}};
    size_t i = 0;
    while (i + step <= rows) {
        for (size_t j = 0; j < step; j++, i++) {
            for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += x[(i * ILP + k) * W + w]; } }
        }
        for (int l = 1; l < LEVELS; l++) {
            for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[l][k][w] += acc[l - 1][k][w]; acc[l - 1][k][w] = 0.0f; } }
            if ((i & (mask << (l * power))) != 0) { break; }
        }
    }
    for (; i < rows; i++) {
        for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += x[(i * ILP + k) * W + w]; } }
    }
    for (int l = 1; l < LEVELS; l++) {
        for (int k = 0; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][k][w] += acc[l][k][w]; } }
    }
    for (size_t v = rows * ILP; v < vecs; v++) { for (int w = 0; w < W; w++) { acc[0][0][w] += x[v * W + w]; } }
    for (int k = 1; k < ILP; k++) { for (int w = 0; w < W; w++) { acc[0][0][w] += acc[0][k][w]; } }
    float sum = 0.0f;
    for (size_t t = vecs * W; t < n; t++) { sum += x[t]; }
    for (int w = 0; w < W; w++) { sum += acc[0][0][w]; }
    return sum;
}

// bitsandbytes' 8-bit blockwise quantization on the CPU (the second level): each block's
// absmax, then each value x / absmax looked up in a table of 65,536 points of [-1, 1], each
// holding the index of the code nearest to it (ties to the lower). code: 256 sorted values.
static void quantize_blockwise8(uint8_t *out, float *absmax, const float *x, size_t n, int blocksize, const float code[256]) {
    uint8_t *lut = (uint8_t *)mallocCheck(65536);
    float mid[255];
    for (int i = 0; i < 255; i++) { mid[i] = 0.5f * (code[i] + code[i + 1]); }
    for (int i = 0, c = 0; i < 65536; i++) {
        float v = -1.0f + (2.0f * (float)i) / 65535.0f;
        while (c < 255 && mid[c] < v) { c++; }
        lut[i] = (uint8_t)c;
    }
    for (size_t b = 0; b * blocksize < n; b++) {
        size_t first = b * blocksize, last = first + blocksize < n ? first + blocksize : n;
        float am = 0.0f;
        for (size_t i = first; i < last; i++) { am = fmaxf(am, fabsf(x[i])); }
        absmax[b] = am;
        float inv = am == 0.0f ? 0.0f : 1.0f / am;
        for (size_t i = first; i < last; i++) {
            float v = fminf(fmaxf(x[i] * inv, -1.0f), 1.0f);
            volatile float t = (v + 1.0f) * 0.5f * 65535.0f; // (volatile: rounded here, then + 0.5, as bitsandbytes)
            out[i] = am == 0.0f ? 0 : lut[(uint16_t)(t + 0.5f)];
        }
    }
    free(lut);
}

// The absmax of block b: stored, or (double quantization) rebuilt from its 8 bits
static float quant4_absmax(const Quant4 *q, size_t b) {
    if (q->qabsmax == NULL) { return q->absmax[b]; }
    volatile float scaled = q->nested_code[q->qabsmax[b]] * q->nested_absmax[b / QUANT_NESTED_BLOCK]; // (rounded before the offset is added)
    return scaled + q->offset;
}

// x (n) into q, as bitsandbytes' quantize_4bit(x, blocksize, quant_type, compress_statistics
// = nested). A value equal to the midpoint of two codes takes the lower; a block of zeros
// stores absmax 0 (a last, partial one 1e-38, and divides where full blocks multiply by the
// reciprocal: bitsandbytes' own arithmetic, kept for the bits).
static void quant4_quantize(Quant4 *q, const float *x, size_t n, int type, int blocksize, int nested) {
    memset(q, 0, sizeof(*q));
    q->type = type; q->blocksize = blocksize; q->n = n; q->num_blocks = (n + blocksize - 1) / blocksize;
    q->packed = (uint8_t *)mallocCheck((n + 1) / 2);
    float *absmax = (float *)mallocCheck(q->num_blocks * sizeof(float));
    const float *code = quant4_code(type);
    float sorted[16], bound[15];
    int order[16];
    for (int i = 0; i < 16; i++) { sorted[i] = code[i]; order[i] = i; }
    for (int i = 1; i < 16; i++) { // sort the codes, keeping where each came from (FP4's are not in order)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            float t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t;
            int o = order[j]; order[j] = order[j - 1]; order[j - 1] = o;
        }
    }
    for (int i = 0; i < 15; i++) { bound[i] = (sorted[i] + sorted[i + 1]) / 2.0f; }
    for (size_t b = 0; b < q->num_blocks; b++) {
        size_t first = b * blocksize, last = first + blocksize < n ? first + blocksize : n;
        float am = 0.0f;
        for (size_t i = first; i < last; i++) { am = fmaxf(am, fabsf(x[i])); }
        int partial = last - first < (size_t)blocksize;
        float clamped = fmaxf(am, 1e-38f), inv = 1.0f / clamped;
        absmax[b] = partial ? clamped : am;
        for (size_t i = first; i < last; i++) {
            float s = partial ? x[i] / clamped : x[i] * inv;
            s = fminf(fmaxf(s, -1.0f), 1.0f);
            int k = 0;
            while (k < 15 && bound[k] < s) { k++; }
            uint8_t nib = (uint8_t)order[k];
            if (i % 2 == 0) { q->packed[i / 2] = (uint8_t)(nib << 4); } else { q->packed[i / 2] |= nib; }
        }
    }
    if (n % 2 == 1) { // the pad: the index of 0
        int k = 0;
        while (k < 15 && bound[k] < 0.0f) { k++; }
        q->packed[n / 2] |= (uint8_t)order[k];
    }
    if (!nested) { q->absmax = absmax; return; }
    q->offset = torch_sum_f32(absmax, q->num_blocks) / (float)q->num_blocks;
    for (size_t b = 0; b < q->num_blocks; b++) { absmax[b] -= q->offset; }
    dynamic_map(q->nested_code);
    q->qabsmax = (uint8_t *)mallocCheck(q->num_blocks);
    q->nested_absmax = (float *)mallocCheck(((q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK) * sizeof(float));
    quantize_blockwise8(q->qabsmax, q->nested_absmax, absmax, q->num_blocks, QUANT_NESTED_BLOCK, q->nested_code);
    free(absmax);
}

// Values [first, first + count) of the tensor, dequantized into out: what dequantize_4bit
// computes, any range of it (a tile of rows of a weight)
static void quant4_dequantize(const Quant4 *q, float *out, size_t first, size_t count) {
    const float *code = quant4_code(q->type);
    size_t i = first, end = first + count;
    while (i < end) {
        size_t b = i / q->blocksize, block_end = (b + 1) * q->blocksize < end ? (b + 1) * q->blocksize : end;
        float am = quant4_absmax(q, b);
        for (; i < block_end; i++) {
            uint8_t byte = q->packed[i / 2];
            out[i - first] = code[i % 2 == 0 ? byte >> 4 : byte & 15] * am;
        }
    }
}

// bytes held (the memory table): codes, and absmax or its 8 bits and their constants
static size_t quant4_bytes(const Quant4 *q) {
    size_t nested = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
    return (q->n + 1) / 2 + (q->qabsmax != NULL ? q->num_blocks + nested * sizeof(float) + sizeof(float) + sizeof(q->nested_code)
                                                : q->num_blocks * sizeof(float));
}

static void quant4_free(Quant4 *q) {
    free(q->packed); free(q->absmax); free(q->qabsmax); free(q->nested_absmax);
    memset(q, 0, sizeof(*q));
}
// --- end shared-copy: quant4 ---

// --- begin shared-copy: llama-config ---
// Llama 2/3, SmolLM2, Qwen2 and their kin are GPT-2 with five changes: RMSNorm (no mean, no
// bias) for LayerNorm; RoPE (positions rotate each query and key) for learned positions;
// SwiGLU (down(silu(gate x) * up x)) for the GELU MLP; grouped-query attention (NKV
// key/value heads, each shared by NH/NKV query heads); and no biases, except Qwen2's on q,
// k and v. The output head may be the embedding (tied) or a matrix of its own.
typedef struct {
    int max_seq_len;  // maxT
    int vocab_size;   // V (no padding: every Llama-family vocabulary here is a multiple of 128)
    int num_layers;   // L
    int num_heads;    // NH query heads
    int num_kv_heads; // NKV key/value heads: NH is a multiple of NKV
    int channels;     // C
    int head_size;    // HS (usually C / NH; a config may set it apart: then NH x HS is not C)
    int hidden;       // H, SwiGLU's width
    int tied;         // the output head is wte
    int qkv_bias;     // q, k and v have biases (Qwen2)
    int family;       // LLAMA_FAMILY_*: which Hugging Face class an export names
    float rope_theta; // RoPE's base
    float norm_eps;   // RMSNorm's epsilon
    // Llama 3's RoPE scaling (transformers' rope_type "llama3"); factor 0: none
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max;
    int bos_token_id, eos_token_id; // -1: none
} LlamaConfig;
enum { LLAMA_FAMILY_LLAMA = 1, LLAMA_FAMILY_QWEN2 = 2 };

// Our Llama-family model file: a header of 256 int32, then the tensors below in order,
// float32 (version 3) or bf16 (version 5). The first 8 header fields are llm.c's Llama 3
// file's: magic 20240803, version, maxT, V, L, NH, NKV, C. llm.c stores its float
// settings as truncated ints after those; we store them as float32 bits, and add what
// the other families need:
//   [8] H  [9] HS  [10] flags: 1 tied head, 2 q/k/v biases  [11] rope_theta (float bits)
//   [12] norm_eps (float bits)  [13] Llama 3 RoPE factor (float bits, 0: none)
//   [14] low_freq_factor  [15] high_freq_factor (float bits)  [16] original max positions
//   [17] family (1 Llama, 2 Qwen2)  [18] bos token id  [19] eos token id (-1: none)
// Tensors are stored tensor by tensor, all layers of one together (as llm.c does); q, k and
// v are one matrix per layer (their rows in that order), and so are gate and up. RoPE pairs
// channel i with channel i + HS/2 of a head (Hugging Face's rotate_half layout; GGUF files
// pair neighbours, so reading one reorders q's and k's rows).
#define LLAMA_MAGIC 20240803
#define NUM_LLAMA_TENSORS 10
enum { LL_WTE, LL_LN1W, LL_QKVW, LL_QKVB, LL_ATTPROJW, LL_LN2W, LL_FCW, LL_FCPROJW, LL_LNFW, LL_LM_HEAD };

// element counts: wte (V, C); ln1w (L, C); qkvw (L, (NH + 2 NKV) HS, C); qkvb (L, (NH + 2 NKV) HS)
// or none; attprojw (L, C, NH HS); ln2w (L, C); fcw (L, 2H, C): gate rows, then up rows;
// fcprojw (L, C, H); lnfw (C); lm_head (V, C) or none when tied
static void llama_tensor_sizes(size_t *sizes, LlamaConfig c) {
    size_t L = c.num_layers, C = c.channels, V = c.vocab_size, QKV = (size_t)(c.num_heads + 2 * c.num_kv_heads) * c.head_size;
    size_t Q = (size_t)c.num_heads * c.head_size, H = c.hidden;
    size_t s[NUM_LLAMA_TENSORS] = {V * C, L * C, L * QKV * C, c.qkv_bias ? L * QKV : 0, L * C * Q, L * C, L * 2 * H * C,
                                   L * C * H, C, c.tied ? 0 : V * C};
    memcpy(sizes, s, sizeof(s));
}

// The shapes a header or a config may give, checked before they size anything: caps far
// above any model here (Llama 3.1 405B: L 126, C 16384, H 53248, V 128256), so that no
// product overflows and a corrupt header is reported as one.
static int llama_check_config(LlamaConfig c, char *err, size_t err_size) {
#define LLAMA_FAIL(...) return (snprintf(err, err_size, __VA_ARGS__), -1)
    if (c.max_seq_len < 1 || c.max_seq_len > (1 << 24) || c.vocab_size < 1 || c.vocab_size > (1 << 22) || c.num_layers < 1 ||
        c.num_layers > 1024 || c.num_heads < 1 || c.num_heads > 1024 || c.num_kv_heads < 1 || c.channels < 1 ||
        c.channels > (1 << 17) || c.head_size < 2 || c.head_size > 1024 || c.hidden < 1 || c.hidden > (1 << 20)) {
        LLAMA_FAIL("a size out of range: maxT=%d V=%d L=%d NH=%d NKV=%d C=%d HS=%d H=%d", c.max_seq_len,
                       c.vocab_size, c.num_layers, c.num_heads, c.num_kv_heads, c.channels, c.head_size, c.hidden);
    }
    if (c.num_heads % c.num_kv_heads != 0) { LLAMA_FAIL("%d query heads cannot share %d key/value heads evenly", c.num_heads, c.num_kv_heads); }
    if (c.head_size % 2 != 0) { LLAMA_FAIL("head size %d is odd: RoPE rotates pairs of channels", c.head_size); }
    if (!(c.rope_theta > 0.0f) || !(c.norm_eps > 0.0f) || c.norm_eps > 1.0f || !(c.rope_factor >= 0.0f)) {
        LLAMA_FAIL("rope_theta %g, norm_eps %g or the RoPE scaling factor %g is not a sensible number",
                       c.rope_theta, c.norm_eps, c.rope_factor);
    }
    if (c.rope_factor > 0.0f && (c.rope_original_max < 1 || !(c.rope_low_freq_factor > 0.0f) || !(c.rope_high_freq_factor > c.rope_low_freq_factor))) {
        LLAMA_FAIL("Llama 3 RoPE scaling needs original_max_position_embeddings >= 1 and high_freq_factor > low_freq_factor > 0");
    }
    if (c.family != LLAMA_FAMILY_LLAMA && c.family != LLAMA_FAMILY_QWEN2) { LLAMA_FAIL("unknown family %d", c.family); }
    if (c.family == LLAMA_FAMILY_LLAMA && c.qkv_bias) { LLAMA_FAIL("q/k/v biases without o's: only Qwen2 has those"); }
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size || c.eos_token_id < -1 || c.eos_token_id >= c.vocab_size) {
        LLAMA_FAIL("start or end token (%d, %d) outside the vocabulary of %d", c.bos_token_id, c.eos_token_id, c.vocab_size);
    }
    return 0;
#undef LLAMA_FAIL
}

typedef struct {
    LlamaConfig config;
    size_t sizes[NUM_LLAMA_TENSORS];
    float *tensors[NUM_LLAMA_TENSORS]; // into params; NULL for a tensor of size 0
    float *params;
    size_t num_parameters;
    int from_bf16; // every weight read was bf16 (-d auto then writes bf16)
    // a 4-bit model (file version 7, or a Hugging Face *-bnb-4bit folder): the four linear
    // layers of every block as bitsandbytes stores them, (L, 4, 3) bands (llama_bands: one
    // per Hugging Face module); their tensors above then hold no floats (size 0)
    int quant, quant_blocksize, quant_nested; // QUANT_NF4 or QUANT_FP4 (QUANT_NONE: not 4-bit), blocksize, 0 or 1
    Quant4 *qw;
} LlamaWeights;

// (with w->quant set, the four linear layers go to qw, empty bands for their reader to fill)
static void llama_allocate(LlamaWeights *w) {
    llama_tensor_sizes(w->sizes, w->config);
    if (w->quant != QUANT_NONE) {
        w->sizes[LL_QKVW] = w->sizes[LL_ATTPROJW] = w->sizes[LL_FCW] = w->sizes[LL_FCPROJW] = 0;
        w->qw = (Quant4 *)calloc((size_t)w->config.num_layers * 4 * 3, sizeof(Quant4));
        if (w->qw == NULL) { fprintf(stderr, "Error: out of memory for the 4-bit weights\n"); exit(EXIT_FAILURE); }
    }
    w->num_parameters = 0;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { w->num_parameters += w->sizes[k]; }
    w->params = (float *)mallocCheck(w->num_parameters * sizeof(float));
    float *p = w->params;
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) {
        w->tensors[k] = w->sizes[k] > 0 ? p : NULL;
        p += w->sizes[k];
    }
}

static void llama_free(LlamaWeights *w) {
    for (size_t k = 0; w->qw != NULL && k < (size_t)w->config.num_layers * 4 * 3; k++) { quant4_free(&w->qw[k]); }
    free(w->qw);
    free(w->params);
    memset(w, 0, sizeof(*w));
}
// --- end shared-copy: llama-config ---

// --- begin shared-copy: llama-4bit ---
// Our 4-bit Llama-family model file (version 7: ./convert makes one of a Hugging Face
// *-bnb-4bit folder): the header of versions 3 and 5, and
//   [20] the 4-bit type (1 NF4, 2 FP4)  [21] its blocksize  [22] 1: double quantization
//   [23] 1: the other tensors in bf16, 0: in fp32
// then the tensors of the table above without qkvw, attprojw, fcw and fcprojw, in its order;
// then those four, layer by layer, each Hugging Face module a band of its own as
// bitsandbytes stores it (q, k, v; o; gate, up; down: llama_bands), each band: its codes
// ((n + 1) / 2 bytes, two a byte, the first in the high nibble), then its absmax (fp32 per
// block) or, under double quantization, its 8-bit absmax (a byte per block), the fp32 absmax
// of each 256 of those, and their offset (fp32). (quant4: the format, finetune_lora.c's.)
#define MODEL_VERSION_4BIT 7
// the rows of each band of the four linear layers (0: none), and their inputs
static void llama_bands(LlamaConfig c, int rows[4][3], int in[4]) {
    int C = c.channels, Q = c.num_heads * c.head_size, KV = c.num_kv_heads * c.head_size, H = c.hidden;
    int r[4][3] = {{Q, KV, KV}, {C, 0, 0}, {H, H, 0}, {C, 0, 0}}, i[4] = {C, Q, C, H};
    memcpy(rows, r, sizeof(r));
    memcpy(in, i, sizeof(i));
}

// a band of n values: its bytes in the file, and its parts (up to 4 buffers) in their order
static size_t quant4_file_bytes(size_t n, int blocksize, int nested) {
    size_t blocks = (n + blocksize - 1) / blocksize;
    return (n + 1) / 2 + (nested ? blocks + (blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float) + sizeof(float)
                                 : blocks * sizeof(float));
}
static int quant4_file_parts(const Quant4 *q, const void **bufs, size_t *sizes) {
    bufs[0] = q->packed;
    sizes[0] = (q->n + 1) / 2;
    if (q->qabsmax == NULL) { bufs[1] = q->absmax; sizes[1] = q->num_blocks * sizeof(float); return 2; }
    bufs[1] = q->qabsmax;
    sizes[1] = q->num_blocks;
    bufs[2] = q->nested_absmax;
    sizes[2] = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float);
    bufs[3] = &q->offset;
    sizes[3] = sizeof(float);
    return 4;
}

// the bytes of all the bands of a model
static size_t llama_4bit_bytes(LlamaConfig c, int blocksize, int nested) {
    int rows[4][3], in[4];
    llama_bands(c, rows, in);
    size_t total = 0;
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3; k++) { total += rows[s][k] > 0 ? quant4_file_bytes((size_t)rows[s][k] * in[s], blocksize, nested) : 0; }
    }
    return total * c.num_layers;
}
// --- end shared-copy: llama-4bit ---

// --- begin shared-copy: llama-model-write ---
static int float_bits(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}

void llama_save(const LlamaWeights *w, const char *path, int bf16, const ModelNotes *notes) {
    LlamaConfig c = w->config;
    int header[256] = {0};
    int fields[20] = {LLAMA_MAGIC, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32, c.max_seq_len, c.vocab_size, c.num_layers,
                      c.num_heads, c.num_kv_heads, c.channels, c.hidden, c.head_size, (c.tied ? 1 : 0) | (c.qkv_bias ? 2 : 0),
                      float_bits(c.rope_theta), float_bits(c.norm_eps), float_bits(c.rope_factor), float_bits(c.rope_low_freq_factor),
                      float_bits(c.rope_high_freq_factor), c.rope_original_max, c.family, c.bos_token_id, c.eos_token_id};
    memcpy(header, fields, sizeof(fields));
    model_notes_put(header, notes);
    if (w->qw == NULL) {
        write_model_file(path, header, w->params, w->num_parameters, bf16);
        return;
    }
    // 4-bit (version 7): the other tensors, then every band's parts, in one atomic write
    header[1] = MODEL_VERSION_4BIT;
    header[20] = w->quant;
    header[21] = w->quant_blocksize;
    header[22] = w->quant_nested;
    header[23] = bf16;
    int rows[4][3], in[4], n = 2;
    llama_bands(c, rows, in);
    size_t max_parts = 2 + (size_t)c.num_layers * 4 * 3 * 4, *sizes = (size_t *)mallocCheck(max_parts * sizeof(size_t));
    const void **bufs = (const void **)mallocCheck(max_parts * sizeof(void *));
    uint16_t *narrow = NULL;
    bufs[0] = header;
    sizes[0] = sizeof(header);
    bufs[1] = w->params;
    sizes[1] = w->num_parameters * sizeof(float);
    if (bf16) {
        narrow = (uint16_t *)mallocCheck((w->num_parameters > 0 ? w->num_parameters : 1) * sizeof(uint16_t));
        for (size_t i = 0; i < w->num_parameters; i++) { narrow[i] = float_to_bf16(w->params[i]); }
        bufs[1] = narrow;
        sizes[1] = w->num_parameters * sizeof(uint16_t);
    }
    for (int l = 0; l < c.num_layers; l++) {
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) { n += quant4_file_parts(&w->qw[((size_t)l * 4 + s) * 3 + k], bufs + n, sizes + n); }
        }
    }
    write_file_atomic(path, bufs, sizes, n);
    free(narrow);
    free(bufs);
    free(sizes);
}
// --- end shared-copy: llama-model-write ---

// --- begin shared-copy: llama-model-read ---
static float bits_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}

// Reads our Llama-family model file, or exits with a message naming it.
void llama_load(LlamaWeights *w, const char *path) {
    memset(w, 0, sizeof(*w));
    FILE *fp = fopenCheck(path, "rb");
    int h[256];
    if (fread(h, sizeof(int), 256, fp) != 256) { die_file(path, NULL, "file too short for a model header (256 x int32)"); }
    long size = file_size(fp, path); // (and back to the end of the header)
    if (h[0] != LLAMA_MAGIC) { die_file(path, NULL, "bad magic number: expected %d (a Llama-family model), found %d", LLAMA_MAGIC, h[0]); }
    if (h[1] != MODEL_VERSION_FP32 && h[1] != MODEL_VERSION_BF16 && h[1] != MODEL_VERSION_4BIT) {
        die_file(path, NULL, "version %d: we read 3 (fp32), 5 (bf16) and 7 (4-bit linear layers)", h[1]);
    }
    int four = h[1] == MODEL_VERSION_4BIT;
    if (four && ((h[20] != QUANT_NF4 && h[20] != QUANT_FP4) || !quant4_blocksize_ok(h[21]) || (h[22] != 0 && h[22] != 1) ||
                 (h[23] != 0 && h[23] != 1))) {
        die_file(path, NULL, "its 4-bit header fields (type %d, blocksize %d, double quantization %d, bf16 %d) are not a model's: "
                 "truncated or corrupt", h[20], h[21], h[22], h[23]);
    }
    LlamaConfig c = {h[2], h[3], h[4], h[5], h[6], h[7], h[9], h[8], h[10] & 1, (h[10] >> 1) & 1, h[17],
                     bits_float(h[11]), bits_float(h[12]), bits_float(h[13]), bits_float(h[14]), bits_float(h[15]), h[16], h[18], h[19]};
    char err[256];
    if (h[17] == 0 && h[8] >= 0 && h[8] < 16) { // llm.c's own Llama 3 files: ffn_dim_multiplier, multiple_of, ... from field 8
        die_file(path, NULL, "an llm.c Llama 3 model file (its header stores other fields from field 8 on); we read our own "
                 "(./convert makes one from a Hugging Face folder or a GGUF file)");
    }
    if ((h[10] & ~3) != 0 || llama_check_config(c, err, sizeof(err)) != 0) {
        die_file(path, NULL, "its header is not a model's (%s): truncated or corrupt", (h[10] & ~3) != 0 ? "unknown flags" : err);
    }
    size_t element = h[1] == MODEL_VERSION_BF16 || (four && h[23]) ? 2 : 4, sizes[NUM_LLAMA_TENSORS], count = 0;
    llama_tensor_sizes(sizes, c);
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) {
        count += four && (k == LL_QKVW || k == LL_ATTPROJW || k == LL_FCW || k == LL_FCPROJW) ? 0 : sizes[k];
    }
    size_t bands = four ? llama_4bit_bytes(c, h[21], h[22]) : 0;
    if ((unsigned long)size != sizeof(h) + count * element + bands) { // (before allocating: a corrupt header may ask for terabytes)
        die_file(path, NULL, "file has %ld bytes, its header (version %d, L=%d C=%d V=%d H=%d) needs %zu: truncated or corrupt",
                 size, h[1], c.num_layers, c.channels, c.vocab_size, c.hidden, sizeof(h) + count * element + bands);
    }
    w->config = c;
    if (four) { w->quant = h[20]; w->quant_blocksize = h[21]; w->quant_nested = h[22]; }
    llama_allocate(w);
    if (element == 4) {
        freadCheck(w->params, sizeof(float), w->num_parameters, fp);
    } else { // bf16 -> fp32, a chunk at a time
        uint16_t chunk[4096];
        for (size_t at = 0; at < w->num_parameters; at += 4096) {
            size_t n = w->num_parameters - at < 4096 ? w->num_parameters - at : 4096;
            freadCheck(chunk, sizeof(uint16_t), n, fp);
            for (size_t i = 0; i < n; i++) { w->params[at + i] = bf16_to_float(chunk[i]); }
        }
        w->from_bf16 = 1;
    }
    int rows[4][3], in[4];
    llama_bands(c, rows, in);
    for (int l = 0; four && l < c.num_layers; l++) { // the bands (their sizes checked with the file's above)
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) {
                Quant4 *q = &w->qw[((size_t)l * 4 + s) * 3 + k];
                q->type = w->quant;
                q->blocksize = w->quant_blocksize;
                q->n = (size_t)rows[s][k] * in[s];
                q->num_blocks = (q->n + q->blocksize - 1) / q->blocksize;
                q->packed = (uint8_t *)mallocCheck((q->n + 1) / 2);
                if (w->quant_nested) {
                    q->qabsmax = (uint8_t *)mallocCheck(q->num_blocks);
                    q->nested_absmax = (float *)mallocCheck((q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK * sizeof(float));
                    dynamic_map(q->nested_code);
                } else {
                    q->absmax = (float *)mallocCheck(q->num_blocks * sizeof(float));
                }
                const void *parts[4];
                size_t bytes[4];
                int n = quant4_file_parts(q, parts, bytes);
                for (int p = 0; p < n; p++) { freadCheck((void *)parts[p], 1, bytes[p], fp); }
            }
        }
    }
    fcloseCheck(fp);
}
// --- end shared-copy: llama-model-read ---

// ----------------------------------------------------------------------------
// the Llama family's Hugging Face folders: config.json, tensor names

// The config.json fields of LlamaForCausalLM and Qwen2ForCausalLM that change what the
// model computes: every one is read, or refused when it asks for something we do not do
// (another activation, MLP biases, a sliding window, RoPE scaling but Llama 3's).
// Transformers 5 writes RoPE's settings as "rope_parameters"; older files (the Hub's
// SmolLM2, Llama 3.2, Qwen2.5) as "rope_theta" and "rope_scaling": both are read.
static int llama_config_fields(LlamaConfig *c, const Json *j, char *err, size_t err_size) {
    if (j->tokens[0].type != JSON_OBJECT) { return st_fail(err, err_size, "not a JSON object"); }
    char s[64];
    int mt = json_get(j, 0, "model_type");
    if (mt < 0 || json_string(j, mt, s, sizeof(s)) < 0) { return st_fail(err, err_size, "no model_type"); }
    memset(c, 0, sizeof(*c));
    c->family = strcmp(s, "llama") == 0 ? LLAMA_FAMILY_LLAMA : strcmp(s, "qwen2") == 0 ? LLAMA_FAMILY_QWEN2 : 0;
    if (c->family == 0) { return st_fail(err, err_size, "model_type \"%s\": we read gpt2, llama and qwen2", s); }
    static const char *const keys[5] = {"num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size", "intermediate_size"};
    int64_t v[5];
    for (int k = 0; k < 5; k++) {
        int at = json_get(j, 0, keys[k]);
        if (at < 0 || json_int64(j, at, &v[k]) != 0 || v[k] <= 0 || v[k] > (1 << 24)) {
            return st_fail(err, err_size, "%s is missing or not a positive integer", keys[k]);
        }
    }
    c->num_layers = (int)v[0];
    c->num_heads = (int)v[1];
    c->channels = (int)v[2];
    c->vocab_size = (int)v[3];
    c->hidden = (int)v[4];
    // optional integers, with transformers' defaults
    struct { const char *key; int *out; int fallback; } ints[5] = {
        {"num_key_value_heads", &c->num_kv_heads, c->num_heads}, {"max_position_embeddings", &c->max_seq_len, 2048},
        {"head_dim", &c->head_size, c->channels / c->num_heads}, {"bos_token_id", &c->bos_token_id, -1},
        {"eos_token_id", &c->eos_token_id, -1}};
    for (int k = 0; k < 5; k++) {
        int at = json_get(j, 0, ints[k].key);
        int64_t x = ints[k].fallback;
        if (at >= 0 && j->tokens[at].type == JSON_ARRAY && k >= 3) { at = j->tokens[at].size > 0 ? at + 1 : -1; } // (several eos tokens: the first)
        if (at >= 0 && j->tokens[at].type != JSON_NULL && (json_int64(j, at, &x) != 0 || x < 0 || x > (1 << 24))) {
            return st_fail(err, err_size, "%s is not a non-negative integer", ints[k].key);
        }
        *ints[k].out = (int)x;
    }
    double d;
    int at = json_get(j, 0, "rms_norm_eps");
    if (at < 0 || json_double(j, at, &d) != 0) { return st_fail(err, err_size, "rms_norm_eps is missing or not a number"); }
    c->norm_eps = (float)d;
    at = json_get(j, 0, "tie_word_embeddings");
    c->tied = at >= 0 && j->tokens[at].type == JSON_TRUE;
    at = json_get(j, 0, "attention_bias"); // (Llama's puts biases on q, k, v and o: not supported; Qwen2 has q, k, v's)
    if (c->family == LLAMA_FAMILY_LLAMA && at >= 0 && j->tokens[at].type == JSON_TRUE) {
        return st_fail(err, err_size, "attention_bias true: Llama's attention biases (q, k, v and o) are not supported");
    }
    c->qkv_bias = c->family == LLAMA_FAMILY_QWEN2;
    at = json_get(j, 0, "mlp_bias");
    if (at >= 0 && j->tokens[at].type == JSON_TRUE) { return st_fail(err, err_size, "mlp_bias true: MLP biases are not supported"); }
    at = json_get(j, 0, "use_sliding_window");
    if (at >= 0 && j->tokens[at].type == JSON_TRUE) { return st_fail(err, err_size, "use_sliding_window true: sliding-window attention is not supported"); }
    at = json_get(j, 0, "hidden_act");
    if (at >= 0 && (json_string(j, at, s, sizeof(s)) < 0 || strcmp(s, "silu") != 0)) {
        return st_fail(err, err_size, "hidden_act must be silu (SwiGLU)");
    }
    // RoPE: rope_parameters {rope_theta, rope_type, ...}, or rope_theta + rope_scaling {rope_type or type, ...}
    int rope = json_get(j, 0, "rope_parameters"), scaling = json_get(j, 0, "rope_scaling");
    int params = rope >= 0 && j->tokens[rope].type == JSON_OBJECT ? rope : scaling >= 0 && j->tokens[scaling].type == JSON_OBJECT ? scaling : -1;
    at = params == rope && rope >= 0 ? json_get(j, rope, "rope_theta") : json_get(j, 0, "rope_theta");
    c->rope_theta = 10000.0f;
    if (at >= 0) {
        if (json_double(j, at, &d) != 0) { return st_fail(err, err_size, "rope_theta is not a number"); }
        c->rope_theta = (float)d;
    }
    if (params >= 0) {
        int type = json_get(j, params, "rope_type");
        if (type < 0) { type = json_get(j, params, "type"); }
        s[0] = '\0';
        if (type >= 0 && json_string(j, type, s, sizeof(s)) < 0) { return st_fail(err, err_size, "rope_type is not a string"); }
        if (strcmp(s, "llama3") == 0) {
            static const char *const rk[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
            double r[4];
            for (int k = 0; k < 4; k++) {
                int f = json_get(j, params, rk[k]);
                if (f < 0 || json_double(j, f, &r[k]) != 0) { return st_fail(err, err_size, "Llama 3 RoPE scaling without %s", rk[k]); }
            }
            c->rope_factor = (float)r[0];
            c->rope_low_freq_factor = (float)r[1];
            c->rope_high_freq_factor = (float)r[2];
            if (!(r[3] >= 1 && r[3] <= (1 << 24))) { return st_fail(err, err_size, "original_max_position_embeddings out of range"); }
            c->rope_original_max = (int)r[3];
        } else if (s[0] != '\0' && strcmp(s, "default") != 0) {
            return st_fail(err, err_size, "RoPE scaling \"%s\": we do Llama 3's (rope_type llama3) or none", s);
        }
    }
    return llama_check_config(*c, err, err_size);
}

// LlamaConfig from a config.json text: 0, or -1 and a message in err.
int llama_config_from_hf_json(LlamaConfig *c, const char *text, size_t len, char *err, size_t err_size) {
    Json j;
    int ok = json_parse(&j, text, len, err, err_size) == 0 && llama_config_fields(c, &j, err, err_size) == 0;
    json_free(&j);
    return ok ? 0 : -1;
}

// The family's Hugging Face tensors: per layer "model.layers.<l>." + a name below, or the
// whole-model ones. Each maps onto rows [row, row + rows) of one of our tensors (per
// layer: of that layer's slice).
typedef struct {
    const char *name;
    int tensor, per_layer;
    int part; // which block of rows: for qkv 0 q, 1 k, 2 v; for fc 0 gate, 1 up; else 0
} LlamaHfName;
static const LlamaHfName LLAMA_HF_NAMES[] = {
    {"model.embed_tokens.weight", LL_WTE, 0, 0},
    {"input_layernorm.weight", LL_LN1W, 1, 0},
    {"self_attn.q_proj.weight", LL_QKVW, 1, 0},
    {"self_attn.k_proj.weight", LL_QKVW, 1, 1},
    {"self_attn.v_proj.weight", LL_QKVW, 1, 2},
    {"self_attn.q_proj.bias", LL_QKVB, 1, 0},
    {"self_attn.k_proj.bias", LL_QKVB, 1, 1},
    {"self_attn.v_proj.bias", LL_QKVB, 1, 2},
    {"self_attn.o_proj.weight", LL_ATTPROJW, 1, 0},
    {"post_attention_layernorm.weight", LL_LN2W, 1, 0},
    {"mlp.gate_proj.weight", LL_FCW, 1, 0},
    {"mlp.up_proj.weight", LL_FCW, 1, 1},
    {"mlp.down_proj.weight", LL_FCPROJW, 1, 0},
    {"model.norm.weight", LL_LNFW, 0, 0},
    {"lm_head.weight", LL_LM_HEAD, 0, 0},
};
#define NUM_LLAMA_HF_NAMES (int)(sizeof(LLAMA_HF_NAMES) / sizeof(LLAMA_HF_NAMES[0]))

// Where the tensor named by entry e (of layer l) goes: the first float in w, its shape (HF's: rows, cols; cols
// 0 for a vector). The shapes follow from the config; a tensor the config leaves out (a bias
// without biases, lm_head when tied) has no place: NULL.
static float *llama_slot(LlamaWeights *w, const LlamaHfName *e, int l, int64_t *rows, int64_t *cols) {
    LlamaConfig c = w->config;
    int64_t C = c.channels, HS = c.head_size, Q = (int64_t)c.num_heads * HS, KV = (int64_t)c.num_kv_heads * HS, H = c.hidden;
    int64_t QKV = Q + 2 * KV;
    float *base = w->tensors[e->tensor];
    if (base == NULL) { return NULL; }
    int64_t per_layer = (int64_t)(w->sizes[e->tensor] / (e->per_layer ? (size_t)c.num_layers : 1));
    base += (size_t)l * (size_t)per_layer;
    int64_t offsets[3] = {0, Q, Q + KV}, lengths[3] = {Q, KV, KV};
    switch (e->tensor) {
    case LL_WTE: case LL_LM_HEAD: *rows = c.vocab_size; *cols = C; return base;
    case LL_LN1W: case LL_LN2W: case LL_LNFW: *rows = C; *cols = 0; return base;
    case LL_QKVW: *rows = lengths[e->part]; *cols = C; return base + offsets[e->part] * C;
    case LL_QKVB: *rows = lengths[e->part]; *cols = 0; return base + offsets[e->part];
    case LL_ATTPROJW: *rows = C; *cols = Q; return base;
    case LL_FCW: *rows = H; *cols = C; return base + e->part * H * C;
    case LL_FCPROJW: *rows = C; *cols = H; return base;
    default: (void)QKV; return NULL;
    }
}

// which entry of LLAMA_HF_NAMES a tensor name is, and its layer; -1 if none
static int llama_hf_index(const char *name, int *layer) {
    *layer = 0;
    const char *rest = name;
    if (strncmp(name, "model.layers.", 13) == 0) {
        char *end;
        long l = strtol(name + 13, &end, 10);
        if (end == name + 13 || *end != '.' || l < 0 || l > 100000) { return -1; }
        *layer = (int)l;
        rest = end + 1;
    }
    for (int n = 0; n < NUM_LLAMA_HF_NAMES; n++) {
        if (LLAMA_HF_NAMES[n].per_layer == (rest != name) && strcmp(rest, LLAMA_HF_NAMES[n].name) == 0) { return n; }
    }
    return -1;
}

#define LLAMA_HF_HINT "a Hugging Face Llama-family folder holds config.json (model_type llama or qwen2) and model.safetensors (or shards and their index)"

// ----------------------------------------------------------------------------
// Hugging Face *-bnb-4bit folders: bitsandbytes' 4-bit layers as transformers saves them
//
// config.json's "quantization_config" (quant_method "bitsandbytes", load_in_4bit) says the
// type (bnb_4bit_quant_type: nf4 or fp4) and whether the absmax values are quantized again
// (bnb_4bit_use_double_quant). Each linear layer of the blocks is then, beside its name's
// .weight (the packed codes: uint8, shape ((n + 1) / 2, 1)):
//   .absmax             fp32 per block, or (double quantization) uint8 per block
//   .quant_map          the 16 codes (fp32): must be NF4's or FP4's as bitsandbytes has them
//   .nested_absmax      (double quantization) fp32 per 256 blocks
//   .nested_quant_map   (double quantization) the 256 values of the dynamic map
//   .quant_state.bitsandbytes__<type>  a JSON object as uint8 bytes: quant_type, blocksize,
//                       shape [out, in], dtype, and (double quantization) nested_blocksize
//                       256 and nested_offset (the mean subtracted before)
// We keep the bytes as they are (LlamaWeights' qw, our file's version 7) and check every
// piece of it against the others and against config.json.
static const char *const BNB_MODULES[4][3] = {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, {"self_attn.o_proj"},
                                              {"mlp.gate_proj", "mlp.up_proj"}, {"mlp.down_proj"}};
static const char *const BNB_PARTS[] = {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}; // (and .quant_state.*)

// Whether a tensor name is one of the 4-bit layers' (their .weight or a part beside it), of a
// layer the model has; a quantization state of another type than config.json's is an error
static int bnb_tensor(const char *name, const LlamaWeights *w, const char *path) {
    if (strncmp(name, "model.layers.", 13) != 0) { return 0; }
    char *end;
    long layer = strtol(name + 13, &end, 10);
    if (end == name + 13 || *end != '.' || layer < 0 || layer >= w->config.num_layers) { return 0; } // (no place: the caller says so)
    const char *rest = end + 1;
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3 && BNB_MODULES[s][k] != NULL; k++) {
            size_t n = strlen(BNB_MODULES[s][k]);
            if (strncmp(rest, BNB_MODULES[s][k], n) != 0 || strncmp(rest + n, ".weight", 7) != 0) { continue; }
            const char *part = rest + n + 7;
            if (*part == '\0') { return 1; }
            if (strncmp(part, ".quant_state.", 13) == 0) {
                if (strcmp(part + 13, w->quant == QUANT_FP4 ? "bitsandbytes__fp4" : "bitsandbytes__nf4") != 0) {
                    die_file(path, NULL, "tensor %s: a quantization state other than config.json's %s", name, quant4_name(w->quant));
                }
                return 1;
            }
            for (size_t i = 0; i < sizeof(BNB_PARTS) / sizeof(BNB_PARTS[0]); i++) {
                if (strcmp(part, BNB_PARTS[i]) == 0) { return 1; }
            }
        }
    }
    return 0;
}

// config.json's quantization_config: 0 none, 1 bitsandbytes' 4 bits (*type, *nested), -1 one
// we do not read (err says which)
static int bnb_config(const char *text, size_t len, int *type, int *nested, char *err, size_t err_size) {
    Json j;
    if (json_parse(&j, text, len, err, err_size) != 0) { return -1; }
    int q = j.tokens[0].type == JSON_OBJECT ? json_get(&j, 0, "quantization_config") : -1, result = 0;
    char method[64] = "", qt[16] = "";
    if (q >= 0 && j.tokens[q].type == JSON_OBJECT) {
        int m = json_get(&j, q, "quant_method"), l4 = json_get(&j, q, "load_in_4bit"), l8 = json_get(&j, q, "load_in_8bit");
        int t = json_get(&j, q, "bnb_4bit_quant_type"), d = json_get(&j, q, "bnb_4bit_use_double_quant");
        if (m >= 0) { json_string(&j, m, method, sizeof(method)); }
        int is4 = l4 >= 0 && j.tokens[l4].type == JSON_TRUE, is8 = l8 >= 0 && j.tokens[l8].type == JSON_TRUE;
        if (strcmp(method, "bitsandbytes") != 0) {
            snprintf(err, err_size, "its quantization_config is %s's; we read bitsandbytes' 4-bit checkpoints (and unquantized ones)",
                     method[0] ? method : "an unnamed method");
            result = -1;
        } else if (is8 || !is4) {
            snprintf(err, err_size, "a bitsandbytes 8-bit (LLM.int8) checkpoint; we read its 4-bit ones (load_in_4bit)");
            result = -1;
        } else {
            if (t >= 0) { json_string(&j, t, qt, sizeof(qt)); }
            *type = strcmp(qt, "nf4") == 0 ? QUANT_NF4 : strcmp(qt, "fp4") == 0 ? QUANT_FP4 : QUANT_NONE;
            *nested = d >= 0 && j.tokens[d].type == JSON_TRUE;
            result = 1;
            if (*type == QUANT_NONE) { snprintf(err, err_size, "bnb_4bit_quant_type \"%s\": we know nf4 and fp4", qt); result = -1; }
        }
    }
    json_free(&j);
    return result;
}

// a tensor of the folder by name: its shard, or -1
static const StTensor *hf_find(const HfWeights *h, const char *name, int *shard) {
    for (int s = 0; s < h->num; s++) {
        const StTensor *t = safetensors_find(&h->st[s], name);
        if (t != NULL) { *shard = s; return t; }
    }
    return NULL;
}
// ... its bytes, which must be `bytes` of dtype `dtype`, into out
static void hf_read_raw(const HfWeights *h, const char *name, const char *dtype, size_t bytes, void *out, const char *what) {
    int s = 0;
    const StTensor *t = hf_find(h, name, &s);
    if (t == NULL) { die_file(h->paths[0], LLAMA_HF_HINT, "tensor %s is missing (%s)", name, what); }
    if (strcmp(t->dtype, dtype) != 0 || (size_t)(t->end - t->begin) != bytes) {
        die_file(h->paths[s], NULL, "tensor %s is %s of %zu bytes; %s needs %s of %zu", name, t->dtype, (size_t)(t->end - t->begin), what, dtype, bytes);
    }
    FILE *fp = fopenCheck(h->paths[s], "rb");
    if (fseeko(fp, (off_t)(h->st[s].data_start + t->begin), SEEK_SET) != 0 || fread(out, 1, bytes, fp) != bytes) {
        die_file(h->paths[s], NULL, "cannot read tensor %s: truncated?", name);
    }
    fcloseCheck(fp);
}

// One 4-bit layer (a module, `name` its .weight) of rows x in values into q, every piece checked
static void bnb_read_module(const HfWeights *h, const LlamaWeights *w, const char *name, int rows, int in, Quant4 *q, int *blocksize) {
    char key[256], state[2048], err[256], qt[16] = "";
    const char *type = w->quant == QUANT_FP4 ? "fp4" : "nf4";
    snprintf(key, sizeof(key), "%s.quant_state.bitsandbytes__%s", name, type);
    int s = 0;
    const StTensor *t = hf_find(h, key, &s);
    if (t == NULL) {
        die_file(h->paths[0], NULL, "tensor %s is missing: its quantization state (config.json says %s%s)", key, type,
                 w->quant_nested ? ", double quantization" : "");
    }
    size_t len = (size_t)(t->end - t->begin);
    if (strcmp(t->dtype, "U8") != 0 || len >= sizeof(state)) { die_file(h->paths[s], NULL, "tensor %s is not a quantization state (U8 JSON)", key); }
    hf_read_raw(h, key, "U8", len, state, "the quantization state");
    Json j;
    if (json_parse(&j, state, len, err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) {
        die_file(h->paths[s], NULL, "tensor %s: its JSON: %s", key, err);
    }
    double bs = 0, nested_bs = 0, offset = 0, dim[2] = {0, 0};
    int iqt = json_get(&j, 0, "quant_type"), ibs = json_get(&j, 0, "blocksize"), ishape = json_get(&j, 0, "shape");
    int inb = json_get(&j, 0, "nested_blocksize"), ioff = json_get(&j, 0, "nested_offset");
    if (iqt >= 0) { json_string(&j, iqt, qt, sizeof(qt)); }
    if (ibs < 0 || json_double(&j, ibs, &bs) != 0 || ishape < 0 || j.tokens[ishape].type != JSON_ARRAY || j.tokens[ishape].size != 2 ||
        json_double(&j, ishape + 1, &dim[0]) != 0 || json_double(&j, j.tokens[ishape + 1].next, &dim[1]) != 0) {
        die_file(h->paths[s], NULL, "tensor %s: no blocksize and shape [out, in] in its quantization state", key);
    }
    if (strcmp(qt, type) != 0) { die_file(h->paths[s], NULL, "tensor %s: quant_type \"%s\", config.json says %s", key, qt, type); }
    if (!quant4_blocksize_ok((long)bs) || bs != (long)bs) { die_file(h->paths[s], NULL, "tensor %s: blocksize %g; bitsandbytes' are powers of two from 32 to 4096", key, bs); }
    if (*blocksize != 0 && (int)bs != *blocksize) { die_file(h->paths[s], NULL, "tensor %s: blocksize %d, the layers before it %d; we keep one per model", key, (int)bs, *blocksize); }
    if (dim[0] != rows || dim[1] != in) { die_file(h->paths[s], NULL, "tensor %s: shape [%g, %g], config.json gives the layer [%d, %d]", key, dim[0], dim[1], rows, in); }
    if (w->quant_nested != (inb >= 0) || (inb >= 0 && (json_double(&j, inb, &nested_bs) != 0 || nested_bs != QUANT_NESTED_BLOCK ||
                                                          ioff < 0 || json_double(&j, ioff, &offset) != 0))) {
        die_file(h->paths[s], NULL, "tensor %s: %s", key, w->quant_nested ? "double quantization needs nested_blocksize 256 and nested_offset"
                                                                          : "double quantization, which config.json does not have");
    }
    json_free(&j);
    *blocksize = (int)bs;
    size_t n = (size_t)rows * in;
    q->type = w->quant;
    q->blocksize = (int)bs;
    q->n = n;
    q->num_blocks = (n + q->blocksize - 1) / q->blocksize;
    q->packed = (uint8_t *)mallocCheck((n + 1) / 2);
    hf_read_raw(h, name, "U8", (n + 1) / 2, q->packed, "the packed 4-bit codes");
    float code[16], nested_code[256];
    snprintf(key, sizeof(key), "%s.quant_map", name);
    hf_read_raw(h, key, "F32", sizeof(code), code, "the 16 codes");
    if (memcmp(code, quant4_code(w->quant), sizeof(code)) != 0) { die_file(h->paths[0], NULL, "tensor %s: a codebook that is not bitsandbytes' %s", key, type); }
    snprintf(key, sizeof(key), "%s.absmax", name);
    if (!w->quant_nested) {
        q->absmax = (float *)mallocCheck(q->num_blocks * sizeof(float));
        hf_read_raw(h, key, "F32", q->num_blocks * sizeof(float), q->absmax, "an fp32 absmax per block");
        return;
    }
    size_t nested = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
    q->qabsmax = (uint8_t *)mallocCheck(q->num_blocks);
    q->nested_absmax = (float *)mallocCheck(nested * sizeof(float));
    hf_read_raw(h, key, "U8", q->num_blocks, q->qabsmax, "an 8-bit absmax per block (double quantization)");
    snprintf(key, sizeof(key), "%s.nested_absmax", name);
    hf_read_raw(h, key, "F32", nested * sizeof(float), q->nested_absmax, "an fp32 absmax per 256 blocks");
    snprintf(key, sizeof(key), "%s.nested_quant_map", name);
    hf_read_raw(h, key, "F32", sizeof(nested_code), nested_code, "the 256 values of the dynamic map");
    dynamic_map(q->nested_code);
    if (memcmp(nested_code, q->nested_code, sizeof(nested_code)) != 0) { die_file(h->paths[0], NULL, "tensor %s: not bitsandbytes' dynamic map", key); }
    q->offset = (float)offset; // (a float32 written as a decimal: the nearest float32 is the one)
    if (!isfinite(q->offset)) { die_file(h->paths[0], NULL, "%s: nested_offset %g is not a finite float32", name, offset); }
}

// every 4-bit layer of the folder into w->qw
static void bnb_read(const HfWeights *h, LlamaWeights *w) {
    int rows[4][3], in[4], blocksize = 0;
    llama_bands(w->config, rows, in);
    for (int l = 0; l < w->config.num_layers; l++) {
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) {
                char name[128];
                snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, BNB_MODULES[s][k]);
                bnb_read_module(h, w, name, rows[s][k], in[s], &w->qw[((size_t)l * 4 + s) * 3 + k], &blocksize);
            }
        }
    }
    w->quant_blocksize = blocksize;
}


void llama_build_from_hf(LlamaWeights *w, const char *dir) {
    memset(w, 0, sizeof(*w));
    char config_path[MAX_PATH_LEN], err[512];
    path_concat(config_path, dir, "/config.json");
    size_t len;
    uint8_t *text = read_whole_file(config_path, &len, LLAMA_HF_HINT);
    if (llama_config_from_hf_json(&w->config, (const char *)text, len, err, sizeof(err)) != 0) { die_file(config_path, LLAMA_HF_HINT, "%s", err); }
    int quant = QUANT_NONE, nested = 0, four = bnb_config((const char *)text, len, &quant, &nested, err, sizeof(err));
    if (four < 0) { die_file(config_path, NULL, "%s", err); }
    free(text);
    HfWeights h;
    hf_weights_open(&h, dir, LLAMA_HF_HINT);
    w->quant = four ? quant : QUANT_NONE; // (4-bit: the linear layers' bands, below)
    w->quant_nested = nested;
    llama_allocate(w);
    LlamaConfig c = w->config;
    // every tensor the config needs, once, with its shape; no tensor the config does not know
    int slots = NUM_LLAMA_HF_NAMES * c.num_layers;
    char *seen = (char *)calloc((size_t)slots, 1);
    size_t largest = 0;
    int all_bf16 = 1;
    for (int s = 0; s < h.num; s++) {
        for (int i = 0; i < h.st[s].num; i++) {
            const StTensor *t = &h.st[s].tensors[i];
            if (w->quant != QUANT_NONE && bnb_tensor(t->name, w, h.paths[s])) { continue; } // (bnb_read's)
            int layer, n = llama_hf_index(t->name, &layer);
            int64_t rows = 0, cols = 0;
            float *dst = n >= 0 && layer < c.num_layers ? llama_slot(w, &LLAMA_HF_NAMES[n], layer, &rows, &cols) : NULL;
            if (n >= 0 && LLAMA_HF_NAMES[n].tensor == LL_LM_HEAD && c.tied) { continue; } // (a copy of wte some files carry)
            if (dst == NULL) { die_file(h.paths[s], LLAMA_HF_HINT, "tensor %s has no place in this model (L=%d%s)", t->name, c.num_layers, c.qkv_bias ? "" : ", no q/k/v biases"); }
            if (!st_float_dtype(t->dtype)) { die_file(h.paths[s], NULL, "tensor %s has dtype %s; we read F32, F16, BF16 and F64", t->name, t->dtype); }
            if (t->ndim != (cols > 0 ? 2 : 1) || t->shape[0] != rows || (cols > 0 && t->shape[1] != cols)) {
                die_file(h.paths[s], NULL, "tensor %s does not have the shape config.json gives it ([%" PRId64 "%s%.0" PRId64 "])",
                         t->name, rows, cols > 0 ? ", " : "", cols);
            }
            if (seen[n * c.num_layers + layer]++) { die_file(h.paths[s], NULL, "tensor %s appears twice", t->name); }
            if (t->end - t->begin > largest) { largest = t->end - t->begin; }
            all_bf16 = all_bf16 && strcmp(t->dtype, "BF16") == 0;
        }
    }
    for (int n = 0; n < NUM_LLAMA_HF_NAMES; n++) {
        for (int l = 0; l < (LLAMA_HF_NAMES[n].per_layer ? c.num_layers : 1); l++) {
            int64_t rows, cols;
            if (!seen[n * c.num_layers + l] && llama_slot(w, &LLAMA_HF_NAMES[n], l, &rows, &cols) != NULL) {
                char name[128];
                if (LLAMA_HF_NAMES[n].per_layer) { snprintf(name, sizeof(name), "model.layers.%d.%s", l, LLAMA_HF_NAMES[n].name); }
                else { snprintf(name, sizeof(name), "%s", LLAMA_HF_NAMES[n].name); }
                die_file(h.paths[0], LLAMA_HF_HINT, "tensor %s is missing", name);
            }
        }
    }
    void *buf = mallocCheck(largest > 0 ? largest : 1);
    for (int s = 0; s < h.num; s++) {
        FILE *fp = fopenCheck(h.paths[s], "rb");
        for (int i = 0; i < h.st[s].num; i++) {
            const StTensor *t = &h.st[s].tensors[i];
            if (w->quant != QUANT_NONE && bnb_tensor(t->name, w, h.paths[s])) { continue; }
            int layer, n = llama_hf_index(t->name, &layer);
            int64_t rows, cols;
            float *dst = llama_slot(w, &LLAMA_HF_NAMES[n], layer, &rows, &cols);
            if (dst != NULL && !(LLAMA_HF_NAMES[n].tensor == LL_LM_HEAD && c.tied)) { st_read_floats(fp, &h.st[s], t, dst, buf, h.paths[s]); }
        }
        fcloseCheck(fp);
    }
    if (w->quant != QUANT_NONE) { bnb_read(&h, w); }
    w->from_bf16 = all_bf16;
    free(buf);
    free(seen);
    hf_weights_free(&h);
}

// the shortest decimal that reads back as f (1e-05, not 9.99999975e-06)
static void shortest_float(char *out, size_t size, float f) {
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(out, size, "%.*g", digits, f);
        if (strtof(out, NULL) == f) { return; }
    }
}

// config.json for transformers: the family's class, every field that matters
static int llama_hf_config_text(const LlamaWeights *w, const char *dtype, char *out, size_t size) {
    LlamaConfig c = w->config;
    char quant[640] = "";
    if (w->qw != NULL) { // (transformers' BitsAndBytesConfig, as its save_pretrained writes it)
        snprintf(quant, sizeof(quant), ",\n  \"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, "
                 "\"load_in_8bit\": false, \"bnb_4bit_quant_type\": \"%s\", \"bnb_4bit_use_double_quant\": %s, "
                 "\"bnb_4bit_compute_dtype\": \"%s\", \"bnb_4bit_quant_storage\": \"uint8\", \"llm_int8_threshold\": 6.0, "
                 "\"llm_int8_skip_modules\": null, \"llm_int8_enable_fp32_cpu_offload\": false, \"llm_int8_has_fp16_weight\": false}",
                 quant4_name(w->quant), w->quant_nested ? "true" : "false", dtype);
    }
    int qwen = c.family == LLAMA_FAMILY_QWEN2;
    char rope[320], ids[96] = "", theta[32], eps[32], f[3][32];
    shortest_float(theta, sizeof(theta), c.rope_theta);
    shortest_float(eps, sizeof(eps), c.norm_eps);
    shortest_float(f[0], sizeof(f[0]), c.rope_factor);
    shortest_float(f[1], sizeof(f[1]), c.rope_low_freq_factor);
    shortest_float(f[2], sizeof(f[2]), c.rope_high_freq_factor);
    if (c.rope_factor > 0.0f) {
        snprintf(rope, sizeof(rope), "{\"rope_type\": \"llama3\", \"rope_theta\": %s, \"factor\": %s, \"low_freq_factor\": %s, "
                 "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}", theta, f[0], f[1], f[2], c.rope_original_max);
    } else {
        snprintf(rope, sizeof(rope), "{\"rope_type\": \"default\", \"rope_theta\": %s}", theta);
    }
    if (c.bos_token_id >= 0) { snprintf(ids, sizeof(ids), "  \"bos_token_id\": %d,\n", c.bos_token_id); }
    if (c.eos_token_id >= 0) { snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "  \"eos_token_id\": %d,\n", c.eos_token_id); }
    return snprintf(out, size,
                    "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n%s%s  \"hidden_act\": \"silu\",\n"
                    "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                    "  \"rms_norm_eps\": %s,\n  \"rope_parameters\": %s,\n  \"tie_word_embeddings\": %s,\n  \"dtype\": \"%s\"%s\n}\n",
                    qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", qwen ? "qwen2" : "llama",
                    qwen ? "" : (c.qkv_bias ? "  \"attention_bias\": true,\n" : "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"), ids,
                    c.channels, c.hidden, c.num_layers, c.num_heads, c.num_kv_heads, c.head_size, c.vocab_size, c.max_seq_len,
                    eps, rope, c.tied ? "true" : "false", dtype, quant);
}

// The model as a Hugging Face folder transformers loads: config.json and the weights, atomically.
void llama_export_hf(const LlamaWeights *w, const char *dir, int bf16, size_t max_bytes) {
    LlamaConfig c = w->config;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) { die_file(dir, NULL, "cannot create the folder: %s", strerror(errno)); }
    OutTensor *t = (OutTensor *)mallocCheck((size_t)NUM_LLAMA_HF_NAMES * c.num_layers * 6 * sizeof(OutTensor));
    int n = 0, rows[4][3], in[4];
    char (*states)[512] = (char (*)[512])mallocCheck((size_t)c.num_layers * 4 * 3 * 512);
    static float nested_code[256];
    dynamic_map(nested_code);
    llama_bands(c, rows, in);
    for (int l = 0; w->qw != NULL && l < c.num_layers; l++) { // the 4-bit layers, as bitsandbytes' Linear4bit saves them
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 3 && rows[s][k] > 0; k++) {
                const Quant4 *q = &w->qw[((size_t)l * 4 + s) * 3 + k];
                char *state = states[((size_t)l * 4 + s) * 3 + k], offset[32];
                shortest_float(offset, sizeof(offset), q->offset);
                int len = snprintf(state, 512, "{\"quant_type\": \"%s\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%d, %d]",
                                   quant4_name(q->type), q->blocksize, bf16 ? "bfloat16" : "float32", rows[s][k], in[s]);
                if (q->qabsmax != NULL) { len += snprintf(state + len, 512 - len, ", \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": %s", offset); }
                len += snprintf(state + len, 512 - len, "}");
                size_t nested = (q->num_blocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
                struct { const char *suffix, *dtype; const void *raw; int64_t d0, d1; int ndim; } parts[6] = {
                    {"", "U8", q->packed, (int64_t)(q->n + 1) / 2, 1, 2},
                    {".absmax", q->qabsmax != NULL ? "U8" : "F32", q->qabsmax != NULL ? (const void *)q->qabsmax : q->absmax, (int64_t)q->num_blocks, 0, 1},
                    {".quant_map", "F32", quant4_code(q->type), 16, 0, 1},
                    {".nested_absmax", "F32", q->nested_absmax, (int64_t)nested, 0, 1},
                    {".nested_quant_map", "F32", nested_code, 256, 0, 1},
                    {q->type == QUANT_FP4 ? ".quant_state.bitsandbytes__fp4" : ".quant_state.bitsandbytes__nf4", "U8", state, len, 0, 1}};
                for (int p = 0; p < 6; p++) {
                    if ((p == 3 || p == 4) && q->qabsmax == NULL) { continue; }
                    OutTensor *o = &t[n++];
                    memset(o, 0, sizeof(*o));
                    snprintf(o->name, sizeof(o->name), "model.layers.%d.%s.weight%s", l, BNB_MODULES[s][k], parts[p].suffix);
                    o->ndim = parts[p].ndim;
                    o->dims[0] = parts[p].d0;
                    o->dims[1] = parts[p].d1;
                    o->raw = parts[p].raw;
                    o->raw_dtype = parts[p].dtype;
                }
            }
        }
    }
    for (int e = 0; e < NUM_LLAMA_HF_NAMES; e++) {
        for (int l = 0; l < (LLAMA_HF_NAMES[e].per_layer ? c.num_layers : 1); l++) {
            int64_t rows, cols;
            const float *src = llama_slot((LlamaWeights *)w, &LLAMA_HF_NAMES[e], l, &rows, &cols);
            if (src == NULL) { continue; }
            OutTensor *o = &t[n++];
            memset(o, 0, sizeof(*o));
            if (LLAMA_HF_NAMES[e].per_layer) { snprintf(o->name, sizeof(o->name), "model.layers.%d.%s", l, LLAMA_HF_NAMES[e].name); }
            else { snprintf(o->name, sizeof(o->name), "%s", LLAMA_HF_NAMES[e].name); }
            o->ndim = cols > 0 ? 2 : 1;
            o->dims[0] = rows;
            o->dims[1] = cols;
            o->src = src;
        }
    }
    hf_weights_write(dir, t, n, bf16, max_bytes);
    free(t);
    free(states);
    char text[4096], path[MAX_PATH_LEN];
    llama_hf_config_text(w, bf16 ? "bfloat16" : "float32", text, sizeof(text));
    path_concat(path, dir, "/config.json");
    const void *bufs[1] = {text};
    size_t sizes[1] = {strlen(text)};
    write_file_atomic(path, bufs, sizes, 1);
}

// ----------------------------------------------------------------------------
// the Llama family's GGUF files: metadata keys, tensor names, RoPE's row order

// a number under "<arch>.<key>": 0, or -1 if the file has no such key (or it is a string)
static int gguf_arch_number(const Gguf *g, const char *arch, const char *key, double *out) {
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int k = gguf_find(g, full);
    return k >= 0 && g->kv[k].type != GGUF_ARRAY ? gguf_number(g, &g->kv[k], 0, out) : -1;
}

// GGUF's names for our tensors (per layer "blk.<l>." + the name)
static const LlamaHfName LLAMA_GGUF_NAMES[] = {
    {"token_embd.weight", LL_WTE, 0, 0},      {"attn_norm.weight", LL_LN1W, 1, 0},   {"attn_q.weight", LL_QKVW, 1, 0},
    {"attn_k.weight", LL_QKVW, 1, 1},         {"attn_v.weight", LL_QKVW, 1, 2},      {"attn_q.bias", LL_QKVB, 1, 0},
    {"attn_k.bias", LL_QKVB, 1, 1},           {"attn_v.bias", LL_QKVB, 1, 2},        {"attn_output.weight", LL_ATTPROJW, 1, 0},
    {"ffn_norm.weight", LL_LN2W, 1, 0},       {"ffn_gate.weight", LL_FCW, 1, 0},     {"ffn_up.weight", LL_FCW, 1, 1},
    {"ffn_down.weight", LL_FCPROJW, 1, 0},    {"output_norm.weight", LL_LNFW, 0, 0}, {"output.weight", LL_LM_HEAD, 0, 0},
};
#define NUM_LLAMA_GGUF_NAMES (int)(sizeof(LLAMA_GGUF_NAMES) / sizeof(LLAMA_GGUF_NAMES[0]))

#define GGUF_LLAMA_HINT "a GGUF file of the Llama family (general.architecture llama or qwen2)"

// llama.cpp's converter writes Llama 3's RoPE scaling (transformers' rope_type "llama3", used
// by Llama 3.1 and 3.2) not as its parameters but as rope_freqs.weight: HS/2 divisors of the
// frequencies, factor for the slow ones, 1 for the fast ones, a blend between. The divisors
// depend on the parameters only through factor and, with low_freq_factor fixed at 1 (every
// Llama 3 has low 1, high 4), on high_freq_factor and original_max_position_embeddings in
// the blend. We take factor as the largest divisor, high 4, the original context from a
// blended divisor (8192 if none is), and then check that these give every divisor back.
static void llama3_rope_from_divisors(LlamaConfig *c, const Gguf *g, const GgufTensor *t, const char *path) {
    int half = c->head_size / 2;
    if (t->elements != (uint64_t)half || t->n_dims != 1) {
        die_file(path, NULL, "rope_freqs.weight has %" PRIu64 " values, not one per frequency (%d)", t->elements, half);
    }
    float *d = (float *)mallocCheck((size_t)half * sizeof(float));
    gguf_dequantize(g, t, d);
    double factor = 1.0;
    for (int i = 0; i < half; i++) {
        if (!(d[i] >= 1.0f && d[i] < 1e6f)) { die_file(path, NULL, "rope_freqs.weight[%d] is %g, not a divisor >= 1", i, d[i]); }
        factor = d[i] > factor ? d[i] : factor;
    }
    if (factor == 1.0) { free(d); return; } // (no scaling at all)
    double low = 1.0, high = 4.0, original = 8192.0;
    for (int i = 0; i < half; i++) {
        if (d[i] > 1.0f + 1e-6f && d[i] < factor * (1.0 - 1e-6)) { // blended: 1/d = (1 - s)/factor + s
            double s = (1.0 / d[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
            double wavelen = 2.0 * M_PI * pow((double)c->rope_theta, 2.0 * i / c->head_size);
            original = wavelen * (s * (high - low) + low); // s = (original/wavelen - low) / (high - low)
            break;
        }
    }
    c->rope_factor = (float)factor;
    c->rope_low_freq_factor = (float)low;
    c->rope_high_freq_factor = (float)high;
    c->rope_original_max = (int)lround(original);
    for (int i = 0; i < half; i++) { // the check: transformers' formula (in float, as it computes)
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_size), scaled = inv;
        float wavelen = 2.0f * (float)M_PI / inv, old = (float)c->rope_original_max;
        if (wavelen > old / c->rope_low_freq_factor) { scaled = inv / c->rope_factor; }
        else if (wavelen >= old / c->rope_high_freq_factor) {
            float smooth = (old / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
            scaled = (1.0f - smooth) * inv / c->rope_factor + smooth * inv;
        }
        if (fabsf(inv / scaled - d[i]) > 1e-4f * d[i]) {
            die_file(path, NULL, "rope_freqs.weight[%d] = %g, but Llama 3's scaling (factor %g, low 1, high 4, original %d) "
                     "gives %g: not supported", i, d[i], factor, c->rope_original_max, inv / scaled);
        }
    }
    free(d);
}

// The model in a GGUF file: its metadata as our config, every tensor dequantized to fp32.
// llama.cpp's converter reorders the rows of each Llama head's q and k so that RoPE pairs
// neighbouring channels (2i, 2i + 1) instead of (i, i + HS/2): we put them back. (Qwen2's
// files keep Hugging Face's order.)
void llama_build_from_gguf(LlamaWeights *w, const char *path) {
    memset(w, 0, sizeof(*w));
    Gguf g;
    gguf_open(&g, path);
    int a = gguf_find(&g, "general.architecture");
    const uint8_t *s;
    uint64_t len;
    char arch[32] = "";
    if (a < 0 || gguf_str(&g, &g.kv[a], 0, &s, &len) != 0 || len >= sizeof(arch)) { die_file(path, GGUF_LLAMA_HINT, "no general.architecture"); }
    memcpy(arch, s, len);
    LlamaConfig c;
    memset(&c, 0, sizeof(c));
    c.family = strcmp(arch, "llama") == 0 ? LLAMA_FAMILY_LLAMA : strcmp(arch, "qwen2") == 0 ? LLAMA_FAMILY_QWEN2 : 0;
    if (c.family == 0) { die_file(path, GGUF_LLAMA_HINT, "general.architecture is \"%s\": we read llama and qwen2", arch); }
    struct { const char *key; int *out; int required; } ints[6] = {
        {"context_length", &c.max_seq_len, 1}, {"embedding_length", &c.channels, 1}, {"block_count", &c.num_layers, 1},
        {"feed_forward_length", &c.hidden, 1}, {"attention.head_count", &c.num_heads, 1}, {"attention.head_count_kv", &c.num_kv_heads, 0}};
    for (int k = 0; k < 6; k++) {
        double v;
        if (gguf_arch_number(&g, arch, ints[k].key, &v) != 0) {
            if (ints[k].required) { die_file(path, GGUF_LLAMA_HINT, "no %s.%s", arch, ints[k].key); }
            v = c.num_heads;
        }
        if (v < 1 || v > (1 << 24) || v != floor(v)) { die_file(path, NULL, "%s.%s is %g, not a size", arch, ints[k].key, v); }
        *ints[k].out = (int)v;
    }
    int used_extra = 0; // rope_freqs.weight, read into the config
    double v;
    c.head_size = c.channels / c.num_heads;
    if (gguf_arch_number(&g, arch, "rope.dimension_count", &v) == 0) {
        if (!(v >= 2 && v <= 4096 && v == floor(v))) { die_file(path, NULL, "%s.rope.dimension_count is %g, not a head size", arch, v); }
        c.head_size = (int)v;
    }
    c.rope_theta = gguf_arch_number(&g, arch, "rope.freq_base", &v) == 0 ? (float)v : 10000.0f;
    if (gguf_arch_number(&g, arch, "attention.layer_norm_rms_epsilon", &v) != 0) { die_file(path, GGUF_LLAMA_HINT, "no %s.attention.layer_norm_rms_epsilon", arch); }
    c.norm_eps = (float)v;
    int k = gguf_find(&g, "tokenizer.ggml.bos_token_id");
    c.bos_token_id = k >= 0 && gguf_number(&g, &g.kv[k], 0, &v) == 0 && v >= 0 && v < (1 << 22) ? (int)v : -1;
    k = gguf_find(&g, "tokenizer.ggml.eos_token_id");
    c.eos_token_id = k >= 0 && gguf_number(&g, &g.kv[k], 0, &v) == 0 && v >= 0 && v < (1 << 22) ? (int)v : -1;
    const GgufTensor *wte = gguf_tensor(&g, "token_embd.weight");
    if (wte == NULL || wte->n_dims != 2) { die_file(path, GGUF_LLAMA_HINT, "no 2-D token_embd.weight"); }
    c.vocab_size = wte->dims[1] <= (1u << 22) ? (int)wte->dims[1] : 0;
    c.tied = gguf_tensor(&g, "output.weight") == NULL;
    c.qkv_bias = gguf_tensor(&g, "blk.0.attn_q.bias") != NULL;
    const GgufTensor *rope_freqs = gguf_tensor(&g, "rope_freqs.weight");
    if (rope_freqs != NULL) { llama3_rope_from_divisors(&c, &g, rope_freqs, path); used_extra = 1; }
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    k = gguf_find(&g, key);
    if (k >= 0 && (gguf_str(&g, &g.kv[k], 0, &s, &len) != 0 || !(len == 4 && memcmp(s, "none", 4) == 0))) {
        die_file(path, NULL, "%s: RoPE scaling other than none is not supported", key);
    }
    if (c.qkv_bias && c.family == LLAMA_FAMILY_LLAMA) { die_file(path, NULL, "q/k/v biases in a llama-architecture GGUF file are not supported"); }
    char err[256];
    if (llama_check_config(c, err, sizeof(err)) != 0) { die_file(path, NULL, "%s", err); }
    w->config = c;
    llama_allocate(w);
    // every tensor we need, with the shape the config gives it (ggml lists dims fastest first: [cols, rows])
    int all_bf16 = 1;
    uint64_t used = 0;
    for (int n = 0; n < NUM_LLAMA_GGUF_NAMES; n++) {
        const LlamaHfName *e = &LLAMA_GGUF_NAMES[n];
        for (int l = 0; l < (e->per_layer ? c.num_layers : 1); l++) {
            int64_t rows = 0, cols = 0;
            float *dst = llama_slot(w, e, l, &rows, &cols);
            char name[96];
            if (e->per_layer) { snprintf(name, sizeof(name), "blk.%d.%s", l, e->name); }
            else { snprintf(name, sizeof(name), "%s", e->name); }
            const GgufTensor *t = gguf_tensor(&g, name);
            if (dst == NULL) {
                if (t != NULL) { die_file(path, NULL, "tensor %s has no place in this model", name); }
                continue;
            }
            if (t == NULL) { die_file(path, GGUF_LLAMA_HINT, "tensor %s is missing", name); }
            if (t->n_dims != (cols > 0 ? 2u : 1u) || t->dims[0] != (uint64_t)(cols > 0 ? cols : rows) || (cols > 0 && t->dims[1] != (uint64_t)rows)) {
                die_file(path, NULL, "tensor %s does not have the shape the metadata gives it ([%" PRId64 "%s%.0" PRId64 "], ne[0] first)",
                         name, cols > 0 ? cols : rows, cols > 0 ? ", " : "", cols > 0 ? rows : 0);
            }
            gguf_dequantize(&g, t, dst);
            all_bf16 = all_bf16 && t->type->id == GGML_BF16;
            used++;
            int heads = e->tensor == LL_QKVW && e->part < 2 && c.family == LLAMA_FAMILY_LLAMA ? (e->part == 0 ? c.num_heads : c.num_kv_heads) : 0;
            if (heads > 0) { // un-permute each head's rows: GGUF row 2i + h holds HF row h * HS/2 + i
                size_t HS = (size_t)c.head_size, C = (size_t)c.channels;
                float *copy = (float *)mallocCheck(HS * C * sizeof(float));
                for (int hd = 0; hd < heads; hd++) {
                    float *head = dst + (size_t)hd * HS * C;
                    memcpy(copy, head, HS * C * sizeof(float));
                    for (size_t i = 0; i < HS / 2; i++) {
                        for (size_t half = 0; half < 2; half++) { memcpy(head + (half * HS / 2 + i) * C, copy + (2 * i + half) * C, C * sizeof(float)); }
                    }
                }
                free(copy);
            }
        }
    }
    used += (uint64_t)used_extra;
    for (uint64_t i = 0; i < g.num_tensors && used < g.num_tensors; i++) { // nothing we would silently drop
        const GgufTensor *t = &g.tensors[i];
        int known = 0;
        for (int n = 0; n < NUM_LLAMA_GGUF_NAMES && !known; n++) {
            for (int l = 0; l < (LLAMA_GGUF_NAMES[n].per_layer ? c.num_layers : 1) && !known; l++) {
                char name[96];
                if (LLAMA_GGUF_NAMES[n].per_layer) { snprintf(name, sizeof(name), "blk.%d.%s", l, LLAMA_GGUF_NAMES[n].name); }
                else { snprintf(name, sizeof(name), "%s", LLAMA_GGUF_NAMES[n].name); }
                known = gguf_same(t->name, t->name_len, (const uint8_t *)name, strlen(name));
            }
        }
        known = known || (rope_freqs != NULL && t == rope_freqs);
        if (!known) { die_file(path, NULL, "tensor %.*s is not part of this %s model", (int)(t->name_len < 100 ? t->name_len : 100), (const char *)t->name, arch); }
    }
    w->from_bf16 = all_bf16;
    gguf_free(&g);
}

// ----------------------------------------------------------------------------
// The Llama family's tokenizers: from a GGUF file or a Hugging Face tokenizer.json into our
// tokenizer file (its layout, and the code that reads it, are lib/tokenizer.h's:
// tokenizer_load_file). Byte-level BPE only: a vocabulary, a ranked merge list, a
// pre-tokenizer rule, special tokens, and the chat template reduced to its kind and
// default system message. (SentencePiece tokenizers, Llama 2's, are not byte-level BPE.)

// (TOKENIZER_FILE_MAGIC, the PRE_* rules and the CHAT_* kinds are lib/tokenizer.h's)
static const char *PRE_NAMES[] = {"GPT-2's", "SmolLM2's (digits apart, then GPT-2's)", "Llama 3's", "Qwen2's"};
static const char *CHAT_NAMES[] = {"none", "ChatML", "Llama 3", "Llama 3.1 (system turn dated 26 Jul 2024)",
                                   "Llama 3.2 (system turn dated today)"};
// the regexes of Llama 3's and Qwen2's tokenizer.json (lib/tokenizer.h matches them by hand)
#define LLAMA3_REGEX "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_REGEX "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    int vocab_size, num_merges;
    uint8_t *bytes;      // every token's bytes, back to back (a special token's are its text)
    size_t used, cap;
    uint32_t *offset;    // (V+1,)
    uint8_t *special;    // (V,) 1: a special token
    uint8_t *present;    // (V,) 1: the source gave this id
    uint32_t *length;    // (V,) each token's bytes
    int32_t *merges;     // (2M,) left id, right id, in rank order
    int pre, chat, bos, eot, unk, ignore_merges, add_bos, nfc;
    char system[4096];   // the chat template's default system message
    // byte string -> id, to turn merges written as text into ids
    int32_t *lookup;
    size_t lookup_mask;
} TokenizerSpec;

static void spec_init(TokenizerSpec *ts, int V) {
    memset(ts, 0, sizeof(*ts));
    ts->vocab_size = V;
    ts->cap = 16 * (size_t)V + 64;
    ts->bytes = (uint8_t *)mallocCheck(ts->cap);
    ts->offset = (uint32_t *)mallocCheck(((size_t)V + 1) * sizeof(uint32_t));
    ts->special = (uint8_t *)mallocCheck((size_t)V);
    ts->present = (uint8_t *)mallocCheck((size_t)V);
    ts->length = (uint32_t *)mallocCheck((size_t)V * sizeof(uint32_t));
    memset(ts->special, 0, (size_t)V);
    memset(ts->present, 0, (size_t)V);
    ts->bos = ts->eot = ts->unk = -1;
}

void spec_free(TokenizerSpec *ts) {
    free(ts->bytes); free(ts->offset); free(ts->special); free(ts->present); free(ts->length); free(ts->merges); free(ts->lookup);
    memset(ts, 0, sizeof(*ts));
}

// Token id's text as the source writes it: byte-level characters for an ordinary token
// (every character one byte, 'Ġ' a space), plain text for a special one. Tokens arrive in
// any order: each is appended to the store, and offset[id] and length[id] say where it is.
static int spec_add(TokenizerSpec *ts, int id, const uint8_t *text, size_t n, int special, const ByteAlphabet *a) {
    if (id < 0 || id >= ts->vocab_size || ts->present[id]) { return -1; }
    if (ts->used + n + 1 > ts->cap) {
        while (ts->used + n + 1 > ts->cap) { ts->cap *= 2; }
        ts->bytes = (uint8_t *)realloc(ts->bytes, ts->cap);
        if (ts->bytes == NULL) { fprintf(stderr, "Error: out of memory for the tokenizer\n"); exit(EXIT_FAILURE); }
    }
    size_t start = ts->used;
    if (special) {
        memcpy(ts->bytes + start, text, n);
        ts->used += n;
    } else {
        for (size_t k = 0; k < n;) {
            uint32_t cp;
            size_t step = utf8_decode(text + k, n - k, &cp);
            if (step == 0 || cp >= BYTE_ALPHABET_SIZE || a->byte_of_codepoint[cp] < 0) { ts->used = start; return -2; }
            ts->bytes[ts->used++] = (uint8_t)a->byte_of_codepoint[cp];
            k += step;
        }
    }
    if (ts->used == start || ts->used - start > 65535) { ts->used = start; return -3; }
    ts->offset[id] = (uint32_t)start;
    ts->length[id] = (uint32_t)(ts->used - start);
    ts->special[id] = (uint8_t)special;
    ts->present[id] = 1;
    return 0;
}

static uint64_t fnv1a(const uint8_t *s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 1099511628211ull; }
    return h;
}

// After the tokens: every id present, and the byte-string lookup for the merges.
static void spec_index(TokenizerSpec *ts, const char *path, const char *hint) {
    for (int id = 0; id < ts->vocab_size; id++) {
        if (!ts->present[id]) { die_file(path, hint, "token id %d is missing (the vocabulary has %d)", id, ts->vocab_size); }
    }
    size_t slots = 1;
    while (slots < 2 * (size_t)ts->vocab_size) { slots *= 2; }
    ts->lookup = (int32_t *)mallocCheck(slots * sizeof(int32_t));
    ts->lookup_mask = slots - 1;
    for (size_t i = 0; i < slots; i++) { ts->lookup[i] = -1; }
    for (int id = 0; id < ts->vocab_size; id++) {
        if (ts->special[id]) { continue; }
        const uint8_t *s = ts->bytes + ts->offset[id];
        size_t slot = fnv1a(s, ts->length[id]) & ts->lookup_mask;
        for (; ts->lookup[slot] >= 0; slot = (slot + 1) & ts->lookup_mask) {
            int other = ts->lookup[slot];
            if (ts->length[other] == ts->length[id] && memcmp(ts->bytes + ts->offset[other], s, ts->length[id]) == 0) {
                die_file(path, hint, "tokens %d and %d are the same bytes", other, id);
            }
        }
        ts->lookup[slot] = id;
    }
}

static int spec_find(const TokenizerSpec *ts, const uint8_t *s, size_t n) {
    for (size_t slot = fnv1a(s, n) & ts->lookup_mask; ts->lookup[slot] >= 0; slot = (slot + 1) & ts->lookup_mask) {
        int id = ts->lookup[slot];
        if (ts->length[id] == n && memcmp(ts->bytes + ts->offset[id], s, n) == 0) { return id; }
    }
    return -1;
}

// Merge m, "left right" in byte-level text (or the two halves apart): their ids. 0, or -1.
static int spec_merge(TokenizerSpec *ts, int m, const uint8_t *left, size_t n1, const uint8_t *right, size_t n2, const ByteAlphabet *a) {
    int32_t ids[2];
    const uint8_t *half[2] = {left, right};
    size_t len[2] = {n1, n2};
    uint8_t buf[65536];
    for (int h = 0; h < 2; h++) {
        size_t used = 0;
        for (size_t k = 0; k < len[h];) {
            uint32_t cp;
            size_t step = utf8_decode(half[h] + k, len[h] - k, &cp);
            if (step == 0 || cp >= BYTE_ALPHABET_SIZE || a->byte_of_codepoint[cp] < 0 || used == sizeof(buf)) { return -1; }
            buf[used++] = (uint8_t)a->byte_of_codepoint[cp];
            k += step;
        }
        if ((ids[h] = spec_find(ts, buf, used)) < 0) { return -1; }
    }
    ts->merges[2 * m] = ids[0];
    ts->merges[2 * m + 1] = ids[1];
    return 0;
}

// The chat template's kind and default system message, from its Jinja text. We recognise
// the layouts by their markers rather than running Jinja: ChatML's <|im_start|> and
// Llama 3's <|start_header_id|>; with "Cutting Knowledge Date: December 2023", Llama 3.1's
// (its date_string, "26 Jul 2024") or, where the template asks for strftime_now, 3.2's
// (today's date). Dates of another kind are not ours to guess: a warning, and plain Llama 3.
// ChatML templates often write a system turn of their own
// when the chat has none (SmolLM2: "You are a helpful AI assistant named SmolLM, trained
// by Hugging Face"): that is the literal text between "<|im_start|>system\n" and
// "<|im_end|>" inside one Jinja string.
static void spec_chat(TokenizerSpec *ts, const char *tmpl, size_t n) {
    ts->chat = CHAT_NONE;
    ts->system[0] = '\0';
    if (tmpl == NULL) { return; }
    char *t = (char *)mallocCheck(n + 1);
    memcpy(t, tmpl, n);
    t[n] = '\0';
    if (strstr(t, "<|im_start|>") != NULL) { ts->chat = CHAT_CHATML; }
    else if (strstr(t, "<|start_header_id|>") != NULL) { ts->chat = CHAT_LLAMA3; }
    if (ts->chat == CHAT_LLAMA3 && strstr(t, "Cutting Knowledge Date") != NULL) {
        int today = strstr(t, "strftime_now") != NULL;
        if (strstr(t, "Cutting Knowledge Date: December 2023") != NULL && strstr(t, "\"26 Jul 2024\"") != NULL) {
            ts->chat = today ? CHAT_LLAMA32 : CHAT_LLAMA31;
        } else {
            fprintf(stderr, "warning: the chat template's \"Cutting Knowledge Date\" lines are not Llama 3.1's or 3.2's: "
                            "chat prompts will lack them\n");
        }
    }
    const char *heads[2] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (int h = 0; h < 2 && ts->chat == CHAT_CHATML && ts->system[0] == '\0'; h++) {
        for (const char *p = strstr(t, heads[h]); p != NULL; p = strstr(p + 1, heads[h])) {
            const char *from = p + strlen(heads[h]), *end = strstr(from, "<|im_end|>");
            if (end == NULL || end == from || (size_t)(end - from) >= sizeof(ts->system)) { continue; }
            size_t k = 0;
            for (const char *q = from; q < end; q++) {
                if (*q == '\'' || *q == '"' || *q == '{' || *q == '}' || *q == '\n' || *q == '\\') { k = 0; break; } // not one literal
                ts->system[k++] = *q;
            }
            ts->system[k] = '\0';
            if (k > 0) { break; }
        }
    }
    free(t);
}

// Where generation stops: the chat template's end-of-turn token if the vocabulary has it,
// else the model's end token.
static void spec_end_token(TokenizerSpec *ts, int eos) {
    const char *name = ts->chat == CHAT_CHATML ? "<|im_end|>" : ts->chat != CHAT_NONE ? "<|eot_id|>" : NULL;
    ts->eot = eos;
    for (int id = 0; name != NULL && id < ts->vocab_size; id++) {
        if (ts->special[id] && ts->length[id] == strlen(name) && memcmp(ts->bytes + ts->offset[id], name, strlen(name)) == 0) { ts->eot = id; }
    }
}

#define GGUF_TOKENIZER_HINT "a GGUF file with a byte-level BPE tokenizer (tokenizer.ggml.model \"gpt2\")"

// A GGUF file's tokenizer: tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/
// unknown_token_id, add_bos_token} and tokenizer.chat_template. Returns 0 if it has none.
int tokenizer_from_gguf(TokenizerSpec *ts, const char *path, int model_vocab) {
    Gguf g;
    gguf_open(&g, path);
    const char *hint = GGUF_TOKENIZER_HINT;
    int km = gguf_find(&g, "tokenizer.ggml.model");
    if (km < 0) { gguf_free(&g); return 0; }
    const uint8_t *s;
    uint64_t n;
    char model[32] = "", pre[64] = "default";
    if (gguf_str(&g, &g.kv[km], 0, &s, &n) != 0 || n >= sizeof(model)) { die_file(path, hint, "tokenizer.ggml.model is not a short string"); }
    memcpy(model, s, n);
    if (strcmp(model, "gpt2") != 0) {
        fprintf(stderr, "note: %s: its tokenizer is \"%s\", not byte-level BPE (\"gpt2\"): not converted\n", path, model);
        gguf_free(&g);
        return 0;
    }
    int kp = gguf_find(&g, "tokenizer.ggml.pre");
    if (kp >= 0 && gguf_str(&g, &g.kv[kp], 0, &s, &n) == 0 && n < sizeof(pre)) { memcpy(pre, s, n); pre[n] = '\0'; }
    // llama.cpp's names for the pre-tokenizers (llama-vocab.cpp)
    int rule = strcmp(pre, "smollm") == 0 ? PRE_SMOLLM : strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0 ? PRE_LLAMA3
             : strcmp(pre, "qwen2") == 0 ? PRE_QWEN2 : strcmp(pre, "gpt-2") == 0 || strcmp(pre, "gpt2") == 0 ? PRE_GPT2 : -1;
    if (rule < 0) {
        fprintf(stderr, "note: %s: pre-tokenizer \"%s\" is not one we have (gpt-2, smollm, llama-bpe, qwen2): its tokenizer "
                "is not converted\n", path, pre);
        gguf_free(&g);
        return 0;
    }
    int kt = gguf_find(&g, "tokenizer.ggml.tokens"), ky = gguf_find(&g, "tokenizer.ggml.token_type");
    int kg = gguf_find(&g, "tokenizer.ggml.merges");
    if (kt < 0 || g.kv[kt].type != GGUF_ARRAY || g.kv[kt].item_type != GGUF_STRING) { die_file(path, hint, "no tokenizer.ggml.tokens (an array of strings)"); }
    if (kg < 0 || g.kv[kg].type != GGUF_ARRAY || g.kv[kg].item_type != GGUF_STRING) { die_file(path, hint, "no tokenizer.ggml.merges (an array of strings)"); }
    uint64_t V = g.kv[kt].count, M = g.kv[kg].count;
    if (V == 0 || V > (uint64_t)model_vocab) { die_file(path, hint, "%" PRIu64 " tokens for a model of %d", V, model_vocab); }
    if (ky >= 0 && (g.kv[ky].type != GGUF_ARRAY || g.kv[ky].count != V || g.kv[ky].item_type == GGUF_STRING)) {
        die_file(path, hint, "tokenizer.ggml.token_type is not one number per token");
    }
    ByteAlphabet a;
    byte_alphabet_init(&a);
    spec_init(ts, (int)V);
    size_t at = g.kv[kt].at;
    for (uint64_t id = 0; id < V; id++) { // (the parser checked every length)
        uint64_t len = gguf_le(g.buf + at, 8);
        double type = 1;
        if (ky >= 0) { gguf_number(&g, &g.kv[ky], id, &type); }
        // llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
        int special = type == 2 || type == 3 || type == 4 || type == 5;
        int rc = spec_add(ts, (int)id, g.buf + at + 8, (size_t)len, special, &a);
        if (rc != 0) { die_file(path, hint, "token %" PRIu64 ": %s", id, rc == -2 ? "a character outside the byte-level alphabet" : "empty or longer than 65535 bytes"); }
        at += 8 + len;
    }
    spec_index(ts, path, hint);
    ts->num_merges = (int)M;
    ts->merges = (int32_t *)mallocCheck(2 * (M + 1) * sizeof(int32_t));
    at = g.kv[kg].at;
    for (uint64_t m = 0; m < M; m++) {
        uint64_t len = gguf_le(g.buf + at, 8);
        const uint8_t *text = g.buf + at + 8;
        const uint8_t *space = (const uint8_t *)memchr(text + 1, ' ', len > 1 ? len - 1 : 0); // a half is never empty
        if (space == NULL || spec_merge(ts, (int)m, text, (size_t)(space - text), space + 1, (size_t)(text + len - space - 1), &a) != 0) {
            die_file(path, hint, "merge %" PRIu64 " (\"%.*s\") is not two tokens of the vocabulary", m, (int)(len < 80 ? len : 80), (const char *)text);
        }
        at += 8 + len;
    }
    const char *ids[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"};
    int values[3] = {-1, -1, -1};
    for (int k = 0; k < 3; k++) {
        int i = gguf_find(&g, ids[k]);
        double v;
        if (i >= 0 && g.kv[i].type != GGUF_ARRAY && gguf_number(&g, &g.kv[i], 0, &v) == 0 && v >= 0 && v < (double)V) { values[k] = (int)v; }
    }
    ts->bos = values[0];
    ts->unk = values[2];
    int kb = gguf_find(&g, "tokenizer.ggml.add_bos_token");
    double add = 0;
    if (kb >= 0 && g.kv[kb].type == GGUF_BOOL) { gguf_number(&g, &g.kv[kb], 0, &add); }
    ts->add_bos = add != 0 && ts->bos >= 0;
    ts->pre = rule;
    ts->ignore_merges = rule == PRE_LLAMA3; // llama.cpp's rule for llama-bpe (Llama 3's tokenizer.json says so too)
    int kc = gguf_find(&g, "tokenizer.chat_template");
    if (kc >= 0 && gguf_str(&g, &g.kv[kc], 0, &s, &n) == 0) { spec_chat(ts, (const char *)s, (size_t)n); }
    else { spec_chat(ts, NULL, 0); }
    spec_end_token(ts, values[1]);
    if (ts->eot < 0) { die_file(path, hint, "no end token (tokenizer.ggml.eos_token_id)"); }
    gguf_free(&g);
    return 1;
}

#define HF_TOKENIZER_HINT "tokenizer.json as Hugging Face's tokenizers library writes it (a byte-level BPE)"

// A JSON string token's decoded text into a fresh buffer (NUL-terminated); its length in *n.
static char *json_dup(const Json *j, int at, size_t *n) {
    size_t cap = j->tokens[at].end - j->tokens[at].start + 1; // decoding never makes a string longer
    char *s = (char *)mallocCheck(cap);
    int len = j->tokens[at].type == JSON_STRING ? json_string(j, at, s, cap) : -1;
    if (len < 0) { free(s); return NULL; }
    *n = (size_t)len;
    return s;
}

// 1 if token `at` is the JSON string `text`
static int json_is(const Json *j, int at, const char *text) {
    char buf[512];
    return at >= 0 && j->tokens[at].type == JSON_STRING && json_string(j, at, buf, sizeof(buf)) >= 0 && strcmp(buf, text) == 0;
}

// The first value of key in any object inside the value at `node` (depth first), or -1.
static int json_find_deep(const Json *j, int node, const char *key) {
    if (node < 0) { return -1; }
    if (j->tokens[node].type == JSON_OBJECT) {
        int direct = json_get(j, node, key);
        if (direct >= 0) { return direct; }
    }
    if (j->tokens[node].type != JSON_OBJECT && j->tokens[node].type != JSON_ARRAY) { return -1; }
    for (int at = node + 1; at < j->tokens[node].next; at = j->tokens[at].next) {
        int found = json_find_deep(j, at, key);
        if (found >= 0) { return found; }
    }
    return -1;
}

// tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}; its id, or -1
static int hf_special_id(const TokenizerSpec *ts, const Json *j, const char *key) {
    int at = json_get(j, 0, key);
    if (at >= 0 && j->tokens[at].type == JSON_OBJECT) { at = json_get(j, at, "content"); }
    size_t n;
    char *text = at >= 0 ? json_dup(j, at, &n) : NULL;
    int id = -1;
    for (int k = 0; text != NULL && k < ts->vocab_size; k++) {
        if (ts->special[k] && ts->length[k] == n && memcmp(ts->bytes + ts->offset[k], text, n) == 0) { id = k; }
    }
    free(text);
    return id;
}

// The pre-tokenizer rule a tokenizer.json describes, or -1. We know four: GPT-2's ByteLevel
// with its regex; SmolLM2's Digits (each digit apart) then that; Llama 3's and Qwen2's Split
// on their regex, then ByteLevel without one.
static int hf_pre_rule(const Json *j, int pre) {
    if (pre < 0 || j->tokens[pre].type != JSON_OBJECT) { return -1; }
    int type = json_get(j, pre, "type");
    if (json_is(j, type, "ByteLevel")) {
        int re = json_get(j, pre, "use_regex"), prefix = json_get(j, pre, "add_prefix_space");
        return (re < 0 || j->tokens[re].type == JSON_TRUE) && (prefix < 0 || j->tokens[prefix].type == JSON_FALSE) ? PRE_GPT2 : -1;
    }
    int list = json_get(j, pre, "pretokenizers");
    if (!json_is(j, type, "Sequence") || list < 0 || j->tokens[list].type != JSON_ARRAY || j->tokens[list].size != 2) { return -1; }
    int first = list + 1, second = j->tokens[first].next;
    int second_re = json_get(j, second, "use_regex");
    if (json_is(j, json_get(j, first, "type"), "Digits")) {
        int each = json_get(j, first, "individual_digits");
        return each >= 0 && j->tokens[each].type == JSON_TRUE && hf_pre_rule(j, second) == PRE_GPT2 ? PRE_SMOLLM : -1;
    }
    if (json_is(j, json_get(j, first, "type"), "Split") && json_is(j, json_get(j, second, "type"), "ByteLevel")
        && second_re >= 0 && j->tokens[second_re].type == JSON_FALSE) {
        int pattern = json_get(j, json_get(j, first, "pattern"), "Regex");
        if (!json_is(j, json_get(j, first, "behavior"), "Isolated")) { return -1; }
        if (json_is(j, pattern, LLAMA3_REGEX)) { return PRE_LLAMA3; }
        if (json_is(j, pattern, QWEN2_REGEX)) { return PRE_QWEN2; }
    }
    return -1;
}

// A Hugging Face folder's tokenizer: tokenizer.json (vocabulary, merges, added tokens,
// pre-tokenizer, whether the start token is added), tokenizer_config.json (start and end
// tokens, chat template; or chat_template.jinja). Returns 0 if the folder has no tokenizer.json.
int tokenizer_from_hf(TokenizerSpec *ts, const char *dir, int model_vocab, int model_bos, int model_eos) {
    char path[MAX_PATH_LEN];
    format_path(path, sizeof(path), "%s/tokenizer.json", dir);
    struct stat info;
    if (stat(path, &info) != 0) { return 0; }
    const char *hint = HF_TOKENIZER_HINT;
    size_t len;
    uint8_t *text = read_whole_file(path, &len, hint);
    Json j;
    char err[256];
    if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) { die_file(path, hint, "%s", err); }
    int model = json_get(&j, 0, "model");
    int vocab = json_get(&j, model, "vocab"), merges = json_get(&j, model, "merges"), added = json_get(&j, 0, "added_tokens");
    if (!json_is(&j, json_get(&j, model, "type"), "BPE")) { die_file(path, hint, "its model is not BPE"); }
    if (vocab < 0 || j.tokens[vocab].type != JSON_OBJECT || merges < 0 || j.tokens[merges].type != JSON_ARRAY) {
        die_file(path, hint, "no model.vocab object or model.merges list");
    }
    int rule = hf_pre_rule(&j, json_get(&j, 0, "pre_tokenizer"));
    if (rule < 0) { die_file(path, hint, "a pre_tokenizer we do not have (we have GPT-2's, SmolLM2's, Llama 3's and Qwen2's)"); }
    int norm = json_get(&j, 0, "normalizer"), nfc = 0;
    if (norm >= 0 && j.tokens[norm].type != JSON_NULL) {
        if (!json_is(&j, json_get(&j, norm, "type"), "NFC")) { die_file(path, hint, "a normalizer other than NFC: not supported"); }
        nfc = 1;
    }
    // the vocabulary's size: one past the largest id, of the model's tokens and the added ones
    int64_t top = -1, id = 0;
    int at = vocab + 1;
    for (int e = 0; e < j.tokens[vocab].size; e++, at = j.tokens[at + 1].next) {
        if (json_int64(&j, at + 1, &id) != 0 || id < 0 || id >= model_vocab) { die_file(path, hint, "model.vocab entry %d: not an id below the model's %d", e, model_vocab); }
        top = id > top ? id : top;
    }
    for (int e = 0, a = added >= 0 ? added + 1 : 0; added >= 0 && e < j.tokens[added].size; e++, a = j.tokens[a].next) {
        if (json_int64(&j, json_get(&j, a, "id"), &id) != 0 || id < 0 || id >= model_vocab) { die_file(path, hint, "added_tokens entry %d: no id below the model's %d", e, model_vocab); }
        top = id > top ? id : top;
    }
    ByteAlphabet alphabet;
    byte_alphabet_init(&alphabet);
    spec_init(ts, (int)top + 1);
    // added tokens first: their text is plain (an added token may also be in model.vocab)
    for (int e = 0, a = added >= 0 ? added + 1 : 0; added >= 0 && e < j.tokens[added].size; e++, a = j.tokens[a].next) {
        size_t n;
        char *content = json_dup(&j, json_get(&j, a, "content"), &n);
        json_int64(&j, json_get(&j, a, "id"), &id);
        if (content == NULL || spec_add(ts, (int)id, (const uint8_t *)content, n, 1, &alphabet) != 0) { die_file(path, hint, "added token %d: no content, or its id twice", (int)id); }
        free(content);
    }
    at = vocab + 1;
    for (int e = 0; e < j.tokens[vocab].size; e++, at = j.tokens[at + 1].next) {
        size_t n;
        json_int64(&j, at + 1, &id);
        if (ts->present[id] && ts->special[id]) { continue; } // an added token: already in
        char *key = json_dup(&j, at, &n);
        int rc = key == NULL ? -2 : spec_add(ts, (int)id, (const uint8_t *)key, n, 0, &alphabet);
        if (rc != 0) { die_file(path, hint, "model.vocab entry %d (id %d): %s", e, (int)id, rc == -1 ? "its id twice" : "not byte-level text"); }
        free(key);
    }
    spec_index(ts, path, hint);
    ts->num_merges = j.tokens[merges].size;
    ts->merges = (int32_t *)mallocCheck(2 * ((size_t)ts->num_merges + 1) * sizeof(int32_t));
    at = merges + 1;
    for (int m = 0; m < ts->num_merges; m++, at = j.tokens[at].next) {
        int ok = 0;
        if (j.tokens[at].type == JSON_STRING) { // "left right" (older files)
            size_t n;
            char *pair = json_dup(&j, at, &n);
            char *space = pair != NULL && n > 1 ? memchr(pair + 1, ' ', n - 1) : NULL;
            ok = space != NULL && spec_merge(ts, m, (const uint8_t *)pair, (size_t)(space - pair), (const uint8_t *)space + 1, n - (size_t)(space - pair) - 1, &alphabet) == 0;
            free(pair);
        } else if (j.tokens[at].type == JSON_ARRAY && j.tokens[at].size == 2) { // ["left", "right"]
            size_t n1, n2;
            char *left = json_dup(&j, at + 1, &n1), *right = json_dup(&j, j.tokens[at + 1].next, &n2);
            ok = left != NULL && right != NULL && spec_merge(ts, m, (const uint8_t *)left, n1, (const uint8_t *)right, n2, &alphabet) == 0;
            free(left);
            free(right);
        }
        if (!ok) { die_file(path, hint, "merge %d is not two tokens of the vocabulary", m); }
    }
    int ignore = json_get(&j, model, "ignore_merges"), unk = json_get(&j, model, "unk_token");
    ts->ignore_merges = ignore >= 0 && j.tokens[ignore].type == JSON_TRUE;
    ts->pre = rule;
    ts->nfc = nfc;
    if (unk >= 0 && j.tokens[unk].type == JSON_STRING) {
        size_t n;
        char *name = json_dup(&j, unk, &n);
        for (int k = 0; name != NULL && k < ts->vocab_size; k++) {
            if (ts->length[k] == n && memcmp(ts->bytes + ts->offset[k], name, n) == 0) { ts->unk = k; }
        }
        free(name);
    }
    // the start token the post-processor puts in front of every text (Llama 3's), if any
    int single = json_find_deep(&j, json_get(&j, 0, "post_processor"), "single");
    int first = single >= 0 && j.tokens[single].type == JSON_ARRAY && j.tokens[single].size > 0 ? single + 1 : -1;
    int lead = json_get(&j, json_get(&j, first, "SpecialToken"), "id"), lead_id = -1;
    size_t lead_len;
    char *lead_name = lead >= 0 ? json_dup(&j, lead, &lead_len) : NULL;
    for (int k = 0; lead_name != NULL && k < ts->vocab_size; k++) {
        if (ts->special[k] && ts->length[k] == lead_len && memcmp(ts->bytes + ts->offset[k], lead_name, lead_len) == 0) { lead_id = k; }
    }
    free(lead_name);
    json_free(&j);
    free(text);
    ts->bos = model_bos;
    int eos = model_eos;
    char *tmpl = NULL;
    size_t tmpl_len = 0;
    format_path(path, sizeof(path), "%s/tokenizer_config.json", dir);
    if (stat(path, &info) == 0) {
        text = read_whole_file(path, &len, hint);
        if (json_parse(&j, (const char *)text, len, err, sizeof(err)) != 0 || j.tokens[0].type != JSON_OBJECT) { die_file(path, hint, "%s", err); }
        int b = hf_special_id(ts, &j, "bos_token"), e = hf_special_id(ts, &j, "eos_token");
        ts->bos = b >= 0 ? b : ts->bos;
        eos = e >= 0 ? e : eos;
        int ct = json_get(&j, 0, "chat_template");
        if (ct >= 0) { tmpl = json_dup(&j, ct, &tmpl_len); }
        int add = json_get(&j, 0, "add_bos_token");
        if (add >= 0 && j.tokens[add].type == JSON_TRUE) { ts->add_bos = 1; }
        json_free(&j);
        free(text);
    }
    format_path(path, sizeof(path), "%s/chat_template.jinja", dir);
    if (tmpl == NULL && stat(path, &info) == 0) { tmpl = (char *)read_whole_file(path, &tmpl_len, hint); }
    if (lead_id >= 0) { ts->bos = lead_id; ts->add_bos = 1; }
    ts->add_bos = ts->add_bos && ts->bos >= 0;
    spec_chat(ts, tmpl, tmpl_len);
    free(tmpl);
    spec_end_token(ts, eos);
    format_path(path, sizeof(path), "%s/tokenizer.json", dir);
    if (ts->eot < 0) { die_file(path, hint, "no end token (eos_token in tokenizer_config.json, or eos_token_id in config.json)"); }
    return 1;
}

// Writes the tokenizer file (layout at lib/tokenizer.h's tokenizer_load_file), atomically.
void tokenizer_write(const TokenizerSpec *ts, const char *path) {
    int32_t header[256] = {0};
    size_t syslen = strlen(ts->system);
    header[0] = TOKENIZER_FILE_MAGIC;
    header[1] = 1;
    header[2] = ts->vocab_size;
    header[3] = ts->num_merges;
    header[4] = ts->pre;
    header[5] = ts->chat;
    header[6] = ts->bos;
    header[7] = ts->eot;
    header[8] = ts->unk;
    header[9] = ts->ignore_merges | ts->add_bos << 1 | ts->nfc << 2;
    header[10] = (int32_t)syslen;
    size_t tok_bytes = 0;
    for (int id = 0; id < ts->vocab_size; id++) { tok_bytes += 3 + ts->length[id]; }
    uint8_t *tokens = (uint8_t *)mallocCheck(tok_bytes);
    size_t at = 0;
    for (int id = 0; id < ts->vocab_size; id++) {
        tokens[at] = ts->special[id];
        tokens[at + 1] = (uint8_t)(ts->length[id] & 0xFF);
        tokens[at + 2] = (uint8_t)(ts->length[id] >> 8);
        memcpy(tokens + at + 3, ts->bytes + ts->offset[id], ts->length[id]);
        at += 3 + ts->length[id];
    }
    const void *bufs[4] = {header, tokens, ts->merges, ts->system};
    size_t sizes[4] = {sizeof(header), tok_bytes, 2 * (size_t)ts->num_merges * sizeof(int32_t), syslen};
    write_file_atomic(path, bufs, sizes, 4);
    free(tokens);
}

// Reads our tokenizer file back (for an export to a Hugging Face folder); the checks are
// lib/tokenizer.h's loader's, in short: every count and length against the file's size.
void tokenizer_read(TokenizerSpec *ts, const char *path) {
    const char *hint = "a tokenizer file written by ./convert (NAME_tokenizer.bin)";
    size_t len;
    uint8_t *s = read_whole_file(path, &len, hint);
    int32_t h[16];
    if (len < 1024) { die_file(path, hint, "%zu bytes: too short for the 1024-byte header", len); }
    memcpy(h, s, sizeof(h));
    if (h[0] != TOKENIZER_FILE_MAGIC || h[1] != 1) { die_file(path, hint, "bad magic %d or version %d", h[0], h[1]); }
    int V = h[2], M = h[3];
    if (V < 1 || (size_t)V > (len - 1024) / 3 || M < 0 || (size_t)M > (len - 1024) / 8 || h[4] < 0 || h[4] > PRE_QWEN2 || h[5] < 0 || h[5] > CHAT_LLAMA32
        || h[6] < -1 || h[6] >= V || h[7] < 0 || h[7] >= V || h[8] < -1 || h[8] >= V || (h[9] & ~7) != 0 || h[10] < 0
        || (size_t)h[10] >= sizeof(ts->system) || ((h[9] & 2) && h[6] < 0)) {
        die_file(path, hint, "a header field out of range");
    }
    ByteAlphabet a;
    byte_alphabet_init(&a);
    spec_init(ts, V);
    size_t at = 1024;
    for (int id = 0; id < V; id++) {
        if (len - at < 3) { die_file(path, hint, "the file ends inside token %d", id); }
        size_t n = (size_t)s[at + 1] | (size_t)s[at + 2] << 8;
        if (s[at] > 1 || n == 0 || n > len - at - 3) { die_file(path, hint, "token %d: malformed or cut off", id); }
        ts->offset[id] = (uint32_t)ts->used; // (stored as raw bytes, whatever the kind)
        if (ts->used + n > ts->cap) {
            ts->cap = 2 * (ts->used + n);
            ts->bytes = (uint8_t *)realloc(ts->bytes, ts->cap);
            if (ts->bytes == NULL) { die_file(path, NULL, "out of memory"); }
        }
        memcpy(ts->bytes + ts->used, s + at + 3, n);
        ts->used += n;
        ts->length[id] = (uint32_t)n;
        ts->special[id] = s[at];
        ts->present[id] = 1;
        at += 3 + n;
    }
    spec_index(ts, path, hint);
    if ((len - at) / 8 < (size_t)M || len - at - 8 * (size_t)M != (size_t)h[10]) { die_file(path, hint, "the merges or the system message do not fit the file"); }
    ts->num_merges = M;
    ts->merges = (int32_t *)mallocCheck(2 * ((size_t)M + 1) * sizeof(int32_t));
    memcpy(ts->merges, s + at, 8 * (size_t)M);
    for (int m = 0; m < 2 * M; m++) {
        if (ts->merges[m] < 0 || ts->merges[m] >= V) { die_file(path, hint, "merge %d: a token outside the vocabulary", m / 2); }
    }
    memcpy(ts->system, s + at + 8 * (size_t)M, (size_t)h[10]);
    ts->system[h[10]] = '\0';
    ts->pre = h[4];
    ts->chat = h[5];
    ts->bos = h[6];
    ts->eot = h[7];
    ts->unk = h[8];
    ts->ignore_merges = h[9] & 1;
    ts->add_bos = (h[9] >> 1) & 1;
    ts->nfc = (h[9] >> 2) & 1;
    free(s);
}

// A growing text, for the JSON we write
typedef struct { char *s; size_t len, cap; } Text;
static void text_put(Text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        t->cap = 2 * (t->len + n + 1);
        t->s = (char *)realloc(t->s, t->cap);
        if (t->s == NULL) { fprintf(stderr, "Error: out of memory writing tokenizer.json\n"); exit(EXIT_FAILURE); }
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}
static void text_puts(Text *t, const char *s) { text_put(t, s, strlen(s)); }

// s[0..n) as a JSON string: in quotes, '"', '\' and control characters escaped
static void text_json(Text *t, const uint8_t *s, size_t n) {
    text_puts(t, "\"");
    for (size_t i = 0; i < n; i++) {
        char esc[8];
        if (s[i] == '"' || s[i] == '\\') { esc[0] = '\\'; esc[1] = (char)s[i]; text_put(t, esc, 2); }
        else if (s[i] == '\n') { text_put(t, "\\n", 2); }
        else if (s[i] == '\t') { text_put(t, "\\t", 2); }
        else if (s[i] == '\r') { text_put(t, "\\r", 2); }
        else if (s[i] < 0x20) { snprintf(esc, sizeof(esc), "\\u%04x", s[i]); text_put(t, esc, 6); }
        else { text_put(t, (const char *)s + i, 1); }
    }
    text_puts(t, "\"");
}

// token id's bytes in the byte-level alphabet (a space is 'Ġ'), as a JSON string
static void text_byte_level(Text *t, const TokenizerSpec *ts, int id, const int *codepoint_of_byte) {
    Text chars = {NULL, 0, 0};
    text_puts(&chars, "");
    for (uint32_t k = 0; k < ts->length[id]; k++) {
        int cp = codepoint_of_byte[ts->bytes[ts->offset[id] + k]];
        char utf8[2] = {(char)(cp < 0x80 ? cp : 0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
        text_put(&chars, utf8, cp < 0x80 ? 1 : 2); // (every code point of the alphabet is below U+0800)
    }
    text_json(t, (const uint8_t *)chars.s, chars.len);
    free(chars.s);
}

// 1 if special token id's text is what an ordinary token looks like in the byte-level
// alphabet (both would be the same key of tokenizer.json's vocab)
static int special_collides(const TokenizerSpec *ts, int id, const int *codepoint_of_byte) {
    ByteAlphabet a;
    byte_alphabet_init(&a);
    uint8_t bytes[65536];
    size_t n = 0;
    for (size_t k = 0; k < ts->length[id];) { // the text read as byte-level characters
        uint32_t cp;
        size_t step = utf8_decode(ts->bytes + ts->offset[id] + k, ts->length[id] - k, &cp);
        if (step == 0 || cp >= BYTE_ALPHABET_SIZE || a.byte_of_codepoint[cp] < 0) { return 0; }
        bytes[n++] = (uint8_t)a.byte_of_codepoint[cp];
        k += step;
    }
    (void)codepoint_of_byte;
    return spec_find(ts, bytes, n) >= 0;
}

// The tokenizer as a Hugging Face folder's tokenizer.json and tokenizer_config.json, which
// transformers' AutoTokenizer loads (PreTrainedTokenizerFast): the same vocabulary, merges,
// pre-tokenizer, special tokens and, as a Jinja template, the same chat layout.
void tokenizer_export_hf(const TokenizerSpec *ts, const char *dir) {
    ByteAlphabet a;
    byte_alphabet_init(&a);
    int codepoint_of_byte[256];
    for (int cp = 0; cp < BYTE_ALPHABET_SIZE; cp++) {
        if (a.byte_of_codepoint[cp] >= 0) { codepoint_of_byte[a.byte_of_codepoint[cp]] = cp; }
    }
    static const char *pre[] = {
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, {\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}", NULL, NULL};
    Text t = {NULL, 0, 0};
    text_puts(&t, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    int first = 1;
    for (int id = 0; id < ts->vocab_size; id++) {
        if (!ts->special[id]) { continue; }
        char head[64];
        snprintf(head, sizeof(head), "%s\n    {\"id\": %d, \"content\": ", first ? "" : ",", id);
        text_puts(&t, head);
        text_json(&t, ts->bytes + ts->offset[id], ts->length[id]);
        text_puts(&t, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}");
        first = 0;
    }
    text_puts(&t, "\n  ],\n  \"normalizer\": ");
    text_puts(&t, ts->nfc ? "{\"type\": \"NFC\"}" : "null");
    text_puts(&t, ",\n  \"pre_tokenizer\": ");
    if (ts->pre == PRE_LLAMA3 || ts->pre == PRE_QWEN2) {
        text_puts(&t, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
        const char *re = ts->pre == PRE_LLAMA3 ? LLAMA3_REGEX : QWEN2_REGEX;
        text_json(&t, (const uint8_t *)re, strlen(re));
        text_puts(&t, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                      "\"trim_offsets\": true, \"use_regex\": false}]}");
    } else {
        text_puts(&t, pre[ts->pre]);
    }
    text_puts(&t, ",\n  \"post_processor\": ");
    if (ts->add_bos) { // the start token in front of every text, as Llama 3's does
        Text name = {NULL, 0, 0};
        text_json(&name, ts->bytes + ts->offset[ts->bos], ts->length[ts->bos]);
        char ids[32];
        snprintf(ids, sizeof(ids), "%d", ts->bos);
        text_puts(&t, "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": ");
        text_puts(&t, name.s);
        text_puts(&t, ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"SpecialToken\": {\"id\": ");
        text_puts(&t, name.s);
        text_puts(&t, ", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": ");
        text_puts(&t, name.s);
        text_puts(&t, ", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {");
        text_puts(&t, name.s);
        text_puts(&t, ": {\"id\": ");
        text_puts(&t, name.s);
        text_puts(&t, ", \"ids\": [");
        text_puts(&t, ids);
        text_puts(&t, "], \"tokens\": [");
        text_puts(&t, name.s);
        text_puts(&t, "]}}}");
        free(name.s);
    } else {
        text_puts(&t, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true}");
    }
    text_puts(&t, ",\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n");
    text_puts(&t, "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ");
    if (ts->unk >= 0) { text_json(&t, ts->bytes + ts->offset[ts->unk], ts->length[ts->unk]); }
    else { text_puts(&t, "null"); }
    text_puts(&t, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, "
                  "\"ignore_merges\": ");
    text_puts(&t, ts->ignore_merges ? "true" : "false");
    text_puts(&t, ",\n    \"vocab\": {");
    // every token: an ordinary one in the byte-level alphabet, a special one under its own
    // text (as added_tokens names it: that is how transformers finds its id), unless an
    // ordinary token is already written that way (then the special one is left out)
    first = 1;
    for (int id = 0; id < ts->vocab_size; id++) {
        if (ts->special[id] && special_collides(ts, id, codepoint_of_byte)) { continue; }
        text_puts(&t, first ? "\n      " : ",\n      ");
        if (ts->special[id]) { text_json(&t, ts->bytes + ts->offset[id], ts->length[id]); }
        else { text_byte_level(&t, ts, id, codepoint_of_byte); }
        char value[32];
        snprintf(value, sizeof(value), ": %d", id);
        text_puts(&t, value);
        first = 0;
    }
    text_puts(&t, "\n    },\n    \"merges\": [");
    for (int m = 0; m < ts->num_merges; m++) {
        text_puts(&t, m == 0 ? "\n      [" : ",\n      [");
        text_byte_level(&t, ts, ts->merges[2 * m], codepoint_of_byte);
        text_puts(&t, ", ");
        text_byte_level(&t, ts, ts->merges[2 * m + 1], codepoint_of_byte);
        text_puts(&t, "]");
    }
    text_puts(&t, "\n    ]\n  }\n}\n");
    char path[MAX_PATH_LEN];
    path_concat(path, dir, "/tokenizer.json");
    const void *bufs[1] = {t.s};
    size_t sizes[1] = {t.len};
    write_file_atomic(path, bufs, sizes, 1);
    // tokenizer_config.json: the start and end tokens, and the chat layout as Jinja
    Text c = {NULL, 0, 0};
    text_puts(&c, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"bos_token\": ");
    if (ts->bos >= 0) { text_json(&c, ts->bytes + ts->offset[ts->bos], ts->length[ts->bos]); }
    else { text_puts(&c, "null"); }
    text_puts(&c, ",\n  \"eos_token\": ");
    text_json(&c, ts->bytes + ts->offset[ts->eot], ts->length[ts->eot]);
    if (ts->chat != CHAT_NONE) {
        Text j = {NULL, 0, 0};
        text_puts(&j, "");
        if (ts->chat == CHAT_CHATML) { // SmolLM2's template (the default system turn only if there is one)
            text_puts(&j, "{% for message in messages %}");
            if (ts->system[0] != '\0') {
                text_puts(&j, "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n");
                for (const char *p = ts->system; *p != '\0'; p++) { // (a Jinja string in single quotes)
                    if (*p == '\'' || *p == '\\') { text_puts(&j, "\\"); }
                    text_put(&j, p, 1);
                }
                text_puts(&j, "<|im_end|>\n' }}{% endif %}");
            }
            text_puts(&j, "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
        } else if (ts->chat != CHAT_LLAMA3) { // Llama 3.1's and 3.2's, without their tools
            text_puts(&j, "{{- bos_token }}{%- if not date_string is defined %}");
            if (ts->chat == CHAT_LLAMA32) {
                text_puts(&j, "{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}"
                              "{%- else %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}");
            } else {
                text_puts(&j, "{%- set date_string = \"26 Jul 2024\" %}");
            }
            text_puts(&j, "{%- endif %}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
                          "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
                          "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
                          "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string + \"\\n\\n\" }}"
                          "{{- system_message }}{{- \"<|eot_id|>\" }}{%- for message in messages %}"
                          "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
                          "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}");
        } else { // Meta-Llama-3-Instruct's
            text_puts(&j, "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
                          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}");
        }
        text_puts(&c, ",\n  \"chat_template\": ");
        text_json(&c, (const uint8_t *)j.s, j.len);
        free(j.s);
    }
    text_puts(&c, "\n}\n");
    path_concat(path, dir, "/tokenizer_config.json");
    bufs[0] = c.s;
    sizes[0] = c.len;
    write_file_atomic(path, bufs, sizes, 1);
    free(t.s);
    free(c.s);
}

// The tokenizer's one-line summary, for convert's report
void tokenizer_describe(const TokenizerSpec *ts, char *out, size_t size) {
    int specials = 0;
    for (int id = 0; id < ts->vocab_size; id++) { specials += ts->special[id]; }
    snprintf(out, size, "%d tokens (%d special), %d merges, %s%s pre-tokenizer, chat template %s%s%s%s", ts->vocab_size, specials,
             ts->num_merges, ts->nfc ? "NFC, " : "", PRE_NAMES[ts->pre], CHAT_NAMES[ts->chat],
             ts->system[0] ? " (default system message: \"" : "", ts->system, ts->system[0] ? "\")" : "");
}

// -Q on a Llama-family model: its four linear layers into 4 bits (quant4, bitsandbytes'
// bytes: each Hugging Face module a band of its own), or (type QUANT_NONE) a 4-bit model's
// dequantized back into floats
static void llama_requantize(LlamaWeights *w, int type, int blocksize, int nested) {
    LlamaConfig c = w->config;
    if (type == QUANT_NONE && w->qw == NULL) { return; }
    if (type != QUANT_NONE && w->qw != NULL) {
        if (type == w->quant && blocksize == w->quant_blocksize && nested == w->quant_nested) { return; } // (as it is)
        llama_requantize(w, QUANT_NONE, 0, 0); // (another format: through floats)
    }
    LlamaWeights out;
    memset(&out, 0, sizeof(out));
    out.config = c;
    out.quant = type;
    out.quant_blocksize = blocksize;
    out.quant_nested = nested;
    out.from_bf16 = type != QUANT_NONE && w->from_bf16; // (dequantized weights are no bf16 values: -d auto writes fp32)
    llama_allocate(&out);
    for (int k = 0; k < NUM_LLAMA_TENSORS; k++) { // the other tensors as they are
        if (out.sizes[k] > 0 && w->sizes[k] > 0) { memcpy(out.tensors[k], w->tensors[k], out.sizes[k] * sizeof(float)); }
    }
    int rows[4][3], in[4], linear[4] = {LL_QKVW, LL_ATTPROJW, LL_FCW, LL_FCPROJW};
    llama_bands(c, rows, in);
    for (int l = 0; l < c.num_layers; l++) {
        for (int s = 0; s < 4; s++) {
            size_t site = (size_t)(rows[s][0] + rows[s][1] + rows[s][2]) * in[s], row = 0;
            for (int k = 0; k < 3 && rows[s][k] > 0; row += (size_t)rows[s][k] * in[s], k++) {
                size_t b = ((size_t)l * 4 + s) * 3 + k, n = (size_t)rows[s][k] * in[s];
                if (type != QUANT_NONE) { quant4_quantize(&out.qw[b], w->tensors[linear[s]] + l * site + row, n, type, blocksize, nested); }
                else { quant4_dequantize(&w->qw[b], out.tensors[linear[s]] + l * site + row, 0, n); }
            }
        }
    }
    llama_free(w);
    *w = out;
}

// ----------------------------------------------------------------------------
// main

#ifndef TESTING
typedef struct {
    const char *input, *output, *dtype, *tokenizer, *quant;
    long seed;
    size_t shard_bytes;
} Options;

static void print_usage(const Options *d) {
    printf("Usage: %s -i <model> -o <output> [flags]\n", PROGRAM);
    printf("  -i <model>    a Hugging Face folder (GPT-2, Llama, Qwen2), a GGUF file (Llama, Qwen2), an llm.c\n");
    printf("                GPT-2 checkpoint or our Llama-family file, or d<N> (a new random GPT-2);\n");
    printf("                a GGUF file without -o: list its metadata and tensors\n");
    printf("  -o <output>   a name ending in .bin: our model file (llm.c's checkpoint for GPT-2; a Llama-family\n");
    printf("                model's tokenizer goes beside it as NAME_tokenizer.bin); anything else: a Hugging\n");
    printf("                Face folder. NAME_tokenizer.bin from a GGUF file or a tokenizer.json: the tokenizer only\n");
    printf("  -d <dtype>    fp32, bf16, or auto (bf16 if every weight read was bf16, else fp32) [%s]\n", d->dtype);
    printf("  -t <dir>      the tokenizer's folder: into a Hugging Face folder, its encoder.json + vocab.bpe\n");
    printf("                become vocab.json + merges.txt; from one, those two are copied into <dir> [%s]\n",
           d->tokenizer ? d->tokenizer : "data/gpt2 for exports, none for imports");
    printf("  -S <size>     into a Hugging Face folder: shards of at most this many bytes (suffix K, M or G:\n");
    printf("                2G, 500M), as save_pretrained's max_shard_size; 0 = one model.safetensors [%zu]\n", d->shard_bytes);
    printf("  -s <int>      seed of a new random model [%ld]\n", d->seed);
    printf("  -Q <type>     the Llama family: its linear layers into 4 bits as bitsandbytes stores them, nf4 or fp4\n"
           "                with :BLOCKSIZE [64] and :0 or :1 double quantization [1] (-o DIR: a *-bnb-4bit folder); none:\n"
           "                a 4-bit model's back to floats [a 4-bit input stays 4-bit, with its own bytes]\n");
    printf("Examples:\n");
    printf("  %s -i path/to/gpt2 -o gpt2_124M.bin                  a Hugging Face download -> a checkpoint\n", PROGRAM);
    printf("  %s -i log_gpt2/model_00005000.bin -o my_gpt2         a checkpoint -> transformers\n", PROGRAM);
    printf("  %s -i gpt2_124M.bin -o gpt2_124M_bf16.bin -d bf16    fp32 -> bf16\n", PROGRAM);
    printf("  %s -i SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.bin  a GGUF file -> our Llama-family file\n", PROGRAM);
    printf("                                                         (and smollm2_tokenizer.bin)\n");
    printf("  %s -i path/to/tokenizer.json -o my_tokenizer.bin    a tokenizer alone (and back: -i my_tokenizer.bin -o DIR)\n", PROGRAM);
    printf("  %s -i unsloth/Llama-3.2-1B-bnb-4bit -o llama_nf4.bin  a *-bnb-4bit download, its 4-bit bytes kept\n", PROGRAM);
    printf("  %s -i smollm2.bin -o smollm2_nf4 -Q nf4             a model -> a *-bnb-4bit folder (QLoRA's base)\n", PROGRAM);
}


// a size in bytes with an optional K, M or G (powers of 1024), or a usage error
static size_t parse_size(const char *flag, const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift != 0) { end++; }
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > (1ull << (62 - shift))) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag %s needs a size like 2G, 500M, 64K or 0, got '%%s'", flag);
        usage_error(msg, s);
    }
    return (size_t)(v << shift);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// A Llama-family model: a GGUF file, a Hugging Face folder whose config.json says llama or
// qwen2, or our Llama model file (its magic number). Anything else is GPT-2's business.
static int is_llama_family(const char *input) {
    if (ends_with(input, ".gguf")) { return 1; }
    struct stat info;
    if (stat(input, &info) != 0) { return 0; }
    if (S_ISDIR(info.st_mode)) {
        char path[MAX_PATH_LEN], type[32];
        format_path(path, sizeof(path), "%s/config.json", input);
        FILE *fp = fopen(path, "rb");
        if (fp == NULL) { return 0; } // (the GPT-2 reader names the missing file)
        fclose(fp);
        size_t len;
        uint8_t *text = read_whole_file(path, &len, NULL);
        Json j;
        char err[256];
        int llama = 0;
        if (json_parse(&j, (const char *)text, len, err, sizeof(err)) == 0 && j.tokens[0].type == JSON_OBJECT) {
            int mt = json_get(&j, 0, "model_type");
            llama = mt >= 0 && json_string(&j, mt, type, sizeof(type)) >= 0 && (strcmp(type, "llama") == 0 || strcmp(type, "qwen2") == 0);
        }
        json_free(&j);
        free(text);
        return llama;
    }
    FILE *fp = fopen(input, "rb");
    int magic = 0;
    if (fp != NULL) {
        if (fread(&magic, sizeof(magic), 1, fp) != 1) { magic = 0; }
        fclose(fp);
    }
    return magic == LLAMA_MAGIC;
}

// -i a GGUF file or a tokenizer.json, -o NAME_tokenizer.bin: the tokenizer alone (its start
// and end tokens from the files beside a tokenizer.json, or from the GGUF's metadata); or
// -i NAME_tokenizer.bin -o DIR: ours as a Hugging Face folder's tokenizer files
// The notes a model file carries (lib/model_notes.h): from a Hugging Face folder, its
// generation_config.json and the folder's path as the origin; from our model file, its own;
// none from a GGUF file (llama.cpp keeps no sampling settings) or a new model.
static void notes_of_input(ModelNotes *n, const char *input, int from_folder, int V) {
    memset(n, 0, sizeof(*n));
    if (from_folder) {
        model_notes_from_generation_config(n, input, V);
        model_notes_set_origin(n, input);
        return;
    }
    FILE *fp = fopen(input, "rb"); // our model files, by any name: not a GGUF file (or d<N>, no file)
    char magic[4] = {0};
    if (fp == NULL) { return; }
    size_t got = fread(magic, 1, 4, fp);
    fclose(fp);
    if (got == 4 && memcmp(magic, "GGUF", 4) != 0) { model_notes_read(input, V, n); }
}

// one line on what the notes say, if anything
static void print_notes(const ModelNotes *n) {
    char about[512];
    model_notes_describe(n, about, sizeof(about));
    if (n->has != 0) { fprintf(stderr, "generation settings: %s\n", about); }
}

// An export's generation_config.json, from the notes (nothing to write: no file)
static void write_generation_config(const char *dir, const ModelNotes *n) {
    char text[2048], path[MAX_PATH_LEN], num[32];
    path_concat(path, dir, "/generation_config.json");
    if (n->has == 0) { // (nothing to say: an older export's file must not speak for this model)
        if (remove(path) == 0) { fprintf(stderr, "removed %s: this model has no generation settings\n", path); }
        return;
    }
    size_t at = 0;
#define GEN_PUT(...) at += (size_t)snprintf(text + at, sizeof(text) - at, __VA_ARGS__)
    GEN_PUT("{\n");
    if (n->has & NOTE_DO_SAMPLE) { GEN_PUT("  \"do_sample\": %s,\n", n->do_sample ? "true" : "false"); }
    if (n->has & NOTE_END_TOKENS) {
        GEN_PUT("  \"eos_token_id\": ");
        if (n->num_end == 1) { GEN_PUT("%d,\n", n->end_tokens[0]); }
        else {
            for (int i = 0; i < n->num_end; i++) { GEN_PUT("%s%d", i ? ", " : "[", n->end_tokens[i]); }
            GEN_PUT("],\n");
        }
    }
    if (n->has & NOTE_MIN_P) { shortest_float(num, sizeof(num), n->min_p); GEN_PUT("  \"min_p\": %s,\n", num); }
    if (n->has & NOTE_REPETITION_PENALTY) { shortest_float(num, sizeof(num), n->repetition_penalty); GEN_PUT("  \"repetition_penalty\": %s,\n", num); }
    if (n->has & NOTE_TEMPERATURE) { shortest_float(num, sizeof(num), n->temperature); GEN_PUT("  \"temperature\": %s,\n", num); }
    if (n->has & NOTE_TOP_K) { GEN_PUT("  \"top_k\": %d,\n", n->top_k); }
    if (n->has & NOTE_TOP_P) { shortest_float(num, sizeof(num), n->top_p); GEN_PUT("  \"top_p\": %s,\n", num); }
#undef GEN_PUT
    text[at - 2] = '\n'; // the last comma goes
    text[at - 1] = '}';
    text[at++] = '\n';
    const void *bufs[1] = {text};
    write_file_atomic(path, bufs, &at, 1);
}

static void convert_tokenizer(const Options *o) {
    TokenizerSpec ts;
    int found = 1;
    if (ends_with(o->input, "_tokenizer.bin")) { // ours -> a Hugging Face folder's tokenizer files
        tokenizer_read(&ts, o->input);
        if (mkdir(o->output, 0777) != 0 && errno != EEXIST) { die_file(o->output, NULL, "cannot create the folder: %s", strerror(errno)); }
        tokenizer_export_hf(&ts, o->output);
        fprintf(stderr, "wrote %s/tokenizer.json and %s/tokenizer_config.json\n", o->output, o->output);
        spec_free(&ts);
        return;
    }
    if (ends_with(o->input, ".gguf")) {
        found = tokenizer_from_gguf(&ts, o->input, 1 << 24);
    } else {
        char dir[MAX_PATH_LEN];
        size_t n = strlen(o->input) - strlen("tokenizer.json"); // the folder: what comes before, without its '/'
        format_path(dir, sizeof(dir), "%.*s", (int)(n > 1 ? n - 1 : n), o->input);
        if (dir[0] == '\0') { strcpy(dir, "."); }
        found = tokenizer_from_hf(&ts, dir, 1 << 24, -1, -1);
    }
    if (!found) { die_file(o->input, NULL, "no tokenizer we can convert"); }
    char about[8192];
    tokenizer_write(&ts, o->output);
    tokenizer_describe(&ts, about, sizeof(about));
    fprintf(stderr, "wrote %s (tokenizer: %s)\n", o->output, about);
    spec_free(&ts);
}

// -i a Llama-family model -o our model file or a Hugging Face folder
static void convert_llama(const Options *o, int to_checkpoint) {
    if (o->tokenizer != NULL) { usage_error("-t is GPT-2's: a Llama-family tokenizer goes next to the model file, as NAME_tokenizer.bin (%s)", o->input); }
    struct stat info;
    LlamaWeights w;
    TokenizerSpec ts;
    int has_tokenizer = 0;
    const char *kind = "our Llama-family model file";
    // the model, then its tokenizer, both read and checked before anything is written
    if (ends_with(o->input, ".gguf")) {
        llama_build_from_gguf(&w, o->input);
        kind = "GGUF";
        has_tokenizer = tokenizer_from_gguf(&ts, o->input, w.config.vocab_size);
    } else if (stat(o->input, &info) == 0 && S_ISDIR(info.st_mode)) {
        llama_build_from_hf(&w, o->input);
        kind = "Hugging Face folder";
        has_tokenizer = tokenizer_from_hf(&ts, o->input, w.config.vocab_size, w.config.bos_token_id, w.config.eos_token_id);
    } else { // our model file, and the tokenizer beside it, if there is one
        llama_load(&w, o->input);
        char path[MAX_PATH_LEN];
        size_t n = strlen(o->input);
        format_path(path, sizeof(path), "%.*s_tokenizer.bin", (int)(n > 4 && ends_with(o->input, ".bin") ? n - 4 : n), o->input);
        if (access(path, R_OK) == 0) { // (it goes beside the output too, or into the export)
            tokenizer_read(&ts, path);
            has_tokenizer = 1;
            if (ts.vocab_size > w.config.vocab_size) {
                die_file(path, NULL, "%d tokens, but the model beside it (%s) has %d: they do not belong together", ts.vocab_size,
                         o->input, w.config.vocab_size);
            }
        }
    }
    if (o->quant != NULL) { // -Q TYPE[:BLOCKSIZE[:DOUBLE]] (finetune_lora's syntax)
        char type[16] = "", again[64];
        long blocksize = 64, nested = 1;
        int got = sscanf(o->quant, "%15[a-z0-9]:%ld:%ld", type, &blocksize, &nested);
        int t = strcmp(type, "nf4") == 0 ? QUANT_NF4 : strcmp(type, "fp4") == 0 ? QUANT_FP4 : QUANT_NONE;
        snprintf(again, sizeof(again), got >= 3 ? "%s:%ld:%ld" : got == 2 ? "%s:%ld" : "%s", type, blocksize, nested);
        if (got < 1 || strcmp(again, o->quant) != 0 || (t == QUANT_NONE && (strcmp(type, "none") != 0 || got > 1)) ||
            !quant4_blocksize_ok(blocksize) || (nested != 0 && nested != 1)) {
            usage_error("-Q %s: expected nf4 or fp4 with optionally :BLOCKSIZE (a power of two, 32 to 4096) and :0 or :1, or none", o->quant);
        }
        llama_requantize(&w, t, (int)blocksize, (int)nested);
    }
    LlamaConfig c = w.config;
    ModelNotes notes;
    notes_of_input(&notes, o->input, strcmp(kind, "Hugging Face folder") == 0, c.vocab_size);
    int bf16 = strcmp(o->dtype, "bf16") == 0 || (strcmp(o->dtype, "auto") == 0 && w.from_bf16);
    fprintf(stderr, "read %s (%s): %s, L=%d C=%d NH=%d NKV=%d HS=%d H=%d V=%d maxT=%d%s%s, %zu parameters%s\n", o->input, kind,
            c.family == LLAMA_FAMILY_QWEN2 ? "Qwen2" : "Llama", c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.head_size,
            c.hidden, c.vocab_size, c.max_seq_len, c.tied ? ", tied head" : "", c.qkv_bias ? ", q/k/v biases" : "", w.num_parameters,
            w.from_bf16 ? " (bf16)" : "");
    if (w.qw != NULL) {
        size_t values = 0, bytes = 0;
        for (size_t k = 0; k < (size_t)c.num_layers * 4 * 3; k++) { values += w.qw[k].n; bytes += w.qw[k].n > 0 ? quant4_bytes(&w.qw[k]) : 0; }
        fprintf(stderr, "... and %zu in the linear layers, in %s (blocks of %d%s): %.1f MiB\n", values, quant4_name(w.quant),
                w.quant_blocksize, w.quant_nested ? ", double quantization" : "", (double)bytes / (1 << 20));
    }
    print_notes(&notes);
    if (to_checkpoint) {
        llama_save(&w, o->output, bf16, &notes);
        if (w.qw != NULL) {
            fprintf(stderr, "wrote %s (Llama-family model file, version %d: the linear layers in %s, blocks of %d%s; the rest %s)\n",
                    o->output, MODEL_VERSION_4BIT, quant4_name(w.quant), w.quant_blocksize, w.quant_nested ? ", double quantization" : "",
                    bf16 ? "bf16" : "fp32");
        } else {
            fprintf(stderr, "wrote %s (Llama-family model file, version %d: %s)\n", o->output, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32,
                    bf16 ? "bf16" : "fp32");
        }
        char path[MAX_PATH_LEN], about[8192];
        format_path(path, sizeof(path), "%.*s_tokenizer.bin", (int)(strlen(o->output) - 4), o->output);
        if (has_tokenizer) {
            tokenizer_write(&ts, path);
            tokenizer_describe(&ts, about, sizeof(about));
            fprintf(stderr, "wrote %s (tokenizer: %s)\n", path, about);
        } else {
            fprintf(stderr, "note: no tokenizer %s %s: ./infer takes this model in token ids (-z 1)\n",
                    strcmp(kind, "our Llama-family model file") != 0 ? "converted from" : "beside", o->input);
        }
    } else {
        llama_export_hf(&w, o->output, bf16, o->shard_bytes);
        write_generation_config(o->output, &notes);
        fprintf(stderr, "wrote %s/config.json and the weights (%s%s)\n", o->output, bf16 ? "BF16" : "F32", o->shard_bytes > 0 ? ", sharded" : "");
        if (has_tokenizer) {
            tokenizer_export_hf(&ts, o->output);
            fprintf(stderr, "wrote %s/tokenizer.json and %s/tokenizer_config.json\n", o->output, o->output);
        }
    }
    llama_free(&w);
    if (has_tokenizer) { spec_free(&ts); }
}

int main(int argc, char **argv) {
    Options o = {.input = NULL, .output = NULL, .dtype = "auto", .tokenizer = NULL, .seed = 1337, .shard_bytes = 0};
    const Options defaults = o;
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0) { print_usage(&defaults); return 0; }
        if (flag[0] != '-' || strlen(flag) != 2) { usage_error("unknown argument '%s'", flag); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", flag); }
        const char *v = argv[i + 1];
        switch (flag[1]) {
        case 'i': o.input = v; break;
        case 'o': o.output = v; break;
        case 'd': o.dtype = v; break;
        case 't': o.tokenizer = v; break;
        case 'S': o.shard_bytes = parse_size(flag, v); break;
        case 's': o.seed = parse_int(flag, v, 0); break;
        case 'Q': o.quant = v; break;
        default: usage_error("unknown flag %s", flag);
        }
    }
    if (o.input != NULL && o.output == NULL && ends_with(o.input, ".gguf")) { // what the file holds
        Gguf g;
        gguf_open(&g, o.input);
        gguf_print(&g, o.input);
        gguf_free(&g);
        return 0;
    }
    if (o.input == NULL || o.output == NULL) { usage_error("-i (the model to read) and -o (what to write) are both needed%s", ""); }
    if (strcmp(o.dtype, "auto") != 0 && strcmp(o.dtype, "fp32") != 0 && strcmp(o.dtype, "bf16") != 0) {
        usage_error("-d takes auto, fp32 or bf16, not '%s'", o.dtype);
    }
    const char *base = strrchr(o.input, '/') != NULL ? strrchr(o.input, '/') + 1 : o.input;
    if ((ends_with(o.output, "_tokenizer.bin") && (ends_with(o.input, ".gguf") || strcmp(base, "tokenizer.json") == 0))
        || (ends_with(o.input, "_tokenizer.bin") && !ends_with(o.output, ".bin"))) {
        convert_tokenizer(&o);
        return 0;
    }
    int to_checkpoint = ends_with(o.output, ".bin");
    if (to_checkpoint && o.shard_bytes > 0) { usage_error("-S (shards) is for Hugging Face folders, not %s", o.output); }
    if (is_llama_family(o.input)) {
        convert_llama(&o, to_checkpoint);
        return 0;
    }
    if (o.quant != NULL) { usage_error("-Q (4-bit linear layers) is for the Llama family's models, not GPT-2's (%s)", o.input); }
    struct stat info;
    int from_hf = stat(o.input, &info) == 0 && S_ISDIR(info.st_mode);

    GPT2Weights w;
    gpt2_weights_build(&w, o.input, (uint64_t)o.seed);
    GPT2Config c = w.config;
    ModelNotes notes;
    notes_of_input(&notes, o.input, from_hf, c.vocab_size);
    int bf16 = strcmp(o.dtype, "bf16") == 0 || (strcmp(o.dtype, "auto") == 0 && w.from_bf16);
    // the tokenizer's files, checked before anything is written: into a Hugging Face folder
    // from -t (default data/gpt2, for a model with GPT-2's vocabulary, where that folder is
    // here), from a Hugging Face folder into -t
    const char *tok_from = NULL, *tok_to = NULL;
    if (!to_checkpoint && (o.tokenizer != NULL || c.vocab_size == 50257)) {
        struct stat ts;
        tok_from = o.tokenizer != NULL ? o.tokenizer : "data/gpt2";
        if (o.tokenizer == NULL && stat("data/gpt2/encoder.json", &ts) != 0) {
            fprintf(stderr, "note: no data/gpt2/ here: %s gets no tokenizer files (-t names GPT-2's tokenizer folder)\n", o.output);
            tok_from = NULL;
        }
        tok_to = o.output;
    } else if (to_checkpoint && from_hf && o.tokenizer != NULL) {
        tok_from = o.input;
        tok_to = o.tokenizer;
    } else if (o.tokenizer != NULL) {
        usage_error("-t goes with a Hugging Face folder: as the output, or as the input of a checkpoint (not %s)", o.input);
    }
    if (tok_from != NULL) { copy_tokenizer(tok_from, NULL, !to_checkpoint); }
    fprintf(stderr, "read %s: GPT-2, L=%d C=%d NH=%d V=%d maxT=%d, %zu parameters%s\n", o.input, c.num_layers, c.channels,
            c.num_heads, c.vocab_size, c.max_seq_len, gpt2_count_parameters(c), w.from_bf16 ? " (bf16)" : "");
    print_notes(&notes);
    if (to_checkpoint) {
        gpt2_save_checkpoint(&w, o.output, bf16, &notes);
        fprintf(stderr, "wrote %s (llm.c checkpoint, version %d: %s)\n", o.output, bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32,
                bf16 ? "bf16" : "fp32");
        if (tok_from != NULL) {
            if (mkdir(tok_to, 0777) != 0 && errno != EEXIST) { die_file(tok_to, NULL, "cannot create the folder: %s", strerror(errno)); }
            copy_tokenizer(tok_from, tok_to, 0);
            fprintf(stderr, "wrote %s/encoder.json and %s/vocab.bpe\n", tok_to, tok_to);
        }
    } else {
        gpt2_export_hf(&w, o.output, bf16, o.shard_bytes);
        write_generation_config(o.output, &notes);
        fprintf(stderr, "wrote %s/config.json and the weights (%s%s)\n", o.output, bf16 ? "BF16" : "F32",
                o.shard_bytes > 0 ? ", sharded" : "");
        // the tokenizer, where the model has GPT-2's vocabulary (our own models of other
        // vocabularies have no tokenizer files to give) or -t names one
        if (tok_from != NULL) {
            copy_tokenizer(tok_from, tok_to, 1);
            fprintf(stderr, "wrote %s/vocab.json and %s/merges.txt (from %s)\n", tok_to, tok_to, tok_from);
        }
    }
    gpt2_weights_free(&w);
    return 0;
}
#endif
