/*
fuzz_convert.c: libFuzzer targets for the parsers in convert.c that read files we did not
write. Each is built with AddressSanitizer and UBSan, so an out-of-bounds read, a leak, an
overflow or an endless loop is a finding; a parse error is the expected outcome for
almost every input, and must come back as a return value with a message, never an exit.

    make fuzz                     # each target for FUZZ_SECONDS (60), clang needed
    make dev/fuzz/fuzz_safetensors && ./dev/fuzz/fuzz_safetensors -max_total_time=10

Targets (chosen with -DFUZZ_<NAME>):
    SAFETENSORS  the input is a whole .safetensors file: 8-byte length, JSON header, data
    CONFIG       the input is a config.json (GPT2Config from it)
    JSON         the input is any JSON text; every string is also decoded, every number read
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
#else
#error "build with -DFUZZ_SAFETENSORS, -DFUZZ_CONFIG or -DFUZZ_JSON"
#endif
    return 0;
}
