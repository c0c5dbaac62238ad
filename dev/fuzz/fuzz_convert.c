/*
fuzz_convert.c: libFuzzer targets for the parsers in convert.c that read files we did not
write. Each is built with AddressSanitizer and UBSan, so an out-of-bounds read, a leak, an
overflow or an endless loop is a finding; a parse error is the expected outcome for
almost every input, and must come back as a return value with a message, never an exit.

    make fuzz                     # each target for FUZZ_SECONDS (60), clang needed
    make dev/fuzz/fuzz_safetensors && ./dev/fuzz/fuzz_safetensors -max_total_time=10

Targets (chosen with -DFUZZ_<NAME>):
    SAFETENSORS  the input is a whole .safetensors file: 8-byte length, JSON header, data
    CONFIG       the input is a config.json (GPT2Config and LlamaConfig from it)
    JSON         the input is any JSON text; every string is also decoded, every number read
    GGUF         the input is a whole GGUF file; every key's values read, every tensor dequantized
*/
#define TESTING
#include "../../convert.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
#if defined(FUZZ_SAFETENSORS)
    SafeTensors st;
    if (safetensors_parse_buffer(&st, data, size, err, sizeof(err)) == 0) {
        // what the loader does next: look tensors up, read their bytes
        for (int k = 0; k < st.num; k++) {
            const StTensor *t = safetensors_find(&st, st.tensors[k].name);
            volatile uint8_t sum = 0;
            for (uint64_t i = t->begin; i < t->end; i++) { sum += data[st.data_start + i]; }
        }
    }
    safetensors_free(&st);
#elif defined(FUZZ_CONFIG)
    GPT2Config c;
    if (gpt2_config_from_hf_json(&c, (const char *)data, size, err, sizeof(err)) == 0) {
        if (c.channels % c.num_heads != 0 || c.padded_vocab_size < c.vocab_size) { __builtin_trap(); }
    }
    LlamaConfig l; // the same text as a Llama-family config.json
    if (llama_config_from_hf_json(&l, (const char *)data, size, err, sizeof(err)) == 0) {
        if (l.num_heads % l.num_kv_heads != 0 || l.head_size % 2 != 0) { __builtin_trap(); }
    }
#elif defined(FUZZ_JSON)
    Json j;
    if (json_parse(&j, (const char *)data, size, err, sizeof(err)) == 0) {
        char out[256];
        for (int i = 0; i < j.num; i++) {
            int64_t v;
            double d;
            json_string(&j, i, out, sizeof(out));
            json_int64(&j, i, &v);
            json_double(&j, i, &d);
            if (j.tokens[i].next <= i || j.tokens[i].next > j.num) { __builtin_trap(); } // the skip links
        }
        json_get(&j, 0, "n_embd");
    }
    json_free(&j);
#elif defined(FUZZ_GGUF)
    Gguf g;
    if (gguf_parse(&g, data, size, err, sizeof(err)) == 0) {
        // what a conversion does next: read the metadata, dequantize the tensors
        for (uint64_t i = 0; i < g.num_kv; i++) {
            for (uint64_t k = 0; k < g.kv[i].count && k < 64; k++) {
                const uint8_t *s;
                uint64_t len;
                double v;
                if (gguf_str(&g, &g.kv[i], k, &s, &len) == 0) {
                    volatile uint8_t sum = 0;
                    for (uint64_t b = 0; b < len; b++) { sum += s[b]; }
                } else if (gguf_number(&g, &g.kv[i], k, &v) != 0) { __builtin_trap(); }
            }
        }
        for (uint64_t i = 0; i < g.num_tensors; i++) {
            const GgufTensor *t = &g.tensors[i];
            if (t->elements > (1u << 20)) { continue; } // (the bytes are checked to be in the file; big ones only cost time)
            float *out = (float *)malloc(t->elements * sizeof(float));
            gguf_dequantize(&g, t, out);
            free(out);
        }
        gguf_free(&g);
    }
#else
#error "build with -DFUZZ_SAFETENSORS, -DFUZZ_CONFIG, -DFUZZ_JSON or -DFUZZ_GGUF"
#endif
    return 0;
}
