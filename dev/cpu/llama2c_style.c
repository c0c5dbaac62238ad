/*
llama2c_style.c: a GPT-2 decode step written the way llama2.c's run.c writes its
forward pass, as the baseline that dev/cpu/bench_infer.c holds infer.c against (the
inference chapter's CPU target: decode at least as fast as llama2.c-style fp32 code on
the same model size). Our own code, in that style: one token at a time, matmul as
llama2.c's (an OpenMP loop over the output rows, a plain dot product per row), attention
parallel over heads, libm's expf and tanhf, everything fp32, compiled with -Ofast as
llama2.c's `make runomp` does. GPT-2 rather than Llama: LayerNorm with biases, learned
positions, a GELU MLP, tied embeddings, so the two programs do the same arithmetic.
Only the decode step (position pos, the cache already holding 0..pos-1) is here.
*/
#include <math.h>
#include <string.h>

void l2c_matmul(float *xout, const float *x, const float *w, int n, int d) {
    // W (d,n) @ x (n,) -> xout (d,)
    int i;
    #pragma omp parallel for private(i)
    for (i = 0; i < d; i++) {
        float val = 0.0f;
        for (int j = 0; j < n; j++) { val += w[i * n + j] * x[j]; }
        xout[i] = val;
    }
}

static void l2c_layernorm(float *o, const float *x, const float *weight, const float *bias, int size) {
    float mean = 0.0f, var = 0.0f;
    for (int j = 0; j < size; j++) { mean += x[j]; }
    mean /= size;
    for (int j = 0; j < size; j++) { var += (x[j] - mean) * (x[j] - mean); }
    var /= size;
    float s = 1.0f / sqrtf(var + 1e-5f);
    for (int j = 0; j < size; j++) { o[j] = (x[j] - mean) * s * weight[j] + bias[j]; }
}

static void l2c_softmax(float *x, int size) {
    float max_val = x[0];
    for (int i = 1; i < size; i++) { if (x[i] > max_val) { max_val = x[i]; } }
    float sum = 0.0f;
    for (int i = 0; i < size; i++) { x[i] = expf(x[i] - max_val); sum += x[i]; }
    for (int i = 0; i < size; i++) { x[i] /= sum; }
}

// The weights as pointers into infer.c's parameter table (same layout), the KV cache as
// llama2.c keeps it: (L, maxT, C) for one sequence. s: scratch of C*4 + 3C + NH*maxT floats.
typedef struct {
    const float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb, *lnfw, *lnfb;
} L2cWeights;

void l2c_forward(const L2cWeights *w, float *key_cache, float *value_cache, float *s, float *logits, int token, int pos,
                 int L, int C, int NH, int maxT, int Vp) {
    int HS = C / NH;
    float *x = s, *xb = x + C, *xb2 = xb + C, *hb = xb2 + C, *qkv = hb + 4 * C, *att = qkv + 3 * C;
    for (int i = 0; i < C; i++) { x[i] = w->wte[(size_t)token * C + i] + w->wpe[(size_t)pos * C + i]; }
    for (int l = 0; l < L; l++) {
        l2c_layernorm(xb, x, w->ln1w + l * C, w->ln1b + l * C, C);
        l2c_matmul(qkv, xb, w->qkvw + (size_t)l * 3 * C * C, C, 3 * C);
        for (int i = 0; i < 3 * C; i++) { qkv[i] += w->qkvb[l * 3 * C + i]; }
        float *kc = key_cache + (size_t)l * maxT * C, *vc = value_cache + (size_t)l * maxT * C;
        memcpy(kc + (size_t)pos * C, qkv + C, C * sizeof(float));
        memcpy(vc + (size_t)pos * C, qkv + 2 * C, C * sizeof(float));
        int h;
        #pragma omp parallel for private(h)
        for (h = 0; h < NH; h++) {
            const float *q = qkv + h * HS;
            float *a = att + h * maxT;
            for (int t = 0; t <= pos; t++) {
                const float *k = kc + (size_t)t * C + h * HS;
                float score = 0.0f;
                for (int i = 0; i < HS; i++) { score += q[i] * k[i]; }
                a[t] = score / sqrtf((float)HS);
            }
            l2c_softmax(a, pos + 1);
            float *o = xb + h * HS;
            memset(o, 0, HS * sizeof(float));
            for (int t = 0; t <= pos; t++) {
                const float *v = vc + (size_t)t * C + h * HS;
                for (int i = 0; i < HS; i++) { o[i] += a[t] * v[i]; }
            }
        }
        l2c_matmul(xb2, xb, w->attprojw + (size_t)l * C * C, C, C);
        for (int i = 0; i < C; i++) { x[i] += xb2[i] + w->attprojb[l * C + i]; }
        l2c_layernorm(xb, x, w->ln2w + l * C, w->ln2b + l * C, C);
        l2c_matmul(hb, xb, w->fcw + (size_t)l * 4 * C * C, C, 4 * C);
        for (int i = 0; i < 4 * C; i++) {
            float u = hb[i] + w->fcb[l * 4 * C + i];
            hb[i] = 0.5f * u * (1.0f + tanhf(0.7978845608f * (u + 0.044715f * u * u * u)));
        }
        l2c_matmul(xb2, hb, w->fcprojw + (size_t)l * C * 4 * C, 4 * C, C);
        for (int i = 0; i < C; i++) { x[i] += xb2[i] + w->fcprojb[l * C + i]; }
    }
    l2c_layernorm(x, x, w->lnfw, w->lnfb, C);
    l2c_matmul(logits, x, w->wte, C, Vp);
}
