/*
train_gpt2.c: GPT-2 training on the CPU, in plain C, fp32.

This is the reference trainer of the book: every layer has a hand-written forward
and backward pass, the model and its optimizer live in a handful of flat arrays,
and the training loop (data, AdamW, learning-rate schedule, validation, sampling,
checkpoints, resume) is spelled out at the bottom of the file. The GPU trainer
train_gpt2.cu is checked against this file, and this file is checked against an
independent PyTorch GPT-2 (dev/reference/gpt2_reference.py, autograd, float64):
test_gpt2.c compares logits, loss, every parameter gradient and ten AdamW steps.

What it is: GPT-2 exactly as released (learned position embeddings, pre-LayerNorm,
tanh-GELU, input and output embeddings tied, vocabulary padded to a multiple of
128 so that the matmuls stay aligned; the padded rows stay zero).
Attention comes twice: first as written on paper, keeping the (T,T) probabilities of
every head for the backward pass (attention_forward), then in linear memory (-F 1:
flash_attention_forward, tiles and an online softmax, the probabilities recomputed in
the backward pass), the algorithm train_gpt2.cu's long sequences need.
What it leaves out on purpose: dropout (GPT-2 fine-tunes and small runs don't need
it), mixed precision (that is train_gpt2.cu's job).

Build and run (see the README):
    make train_gpt2 && ./train_gpt2          # trains a small GPT-2 on tinyshakespeare
    ./train_gpt2 -h                          # every flag with its default
Regenerate the reference this file is tested against: make reference

Sizes (one capital letter each, used throughout):
    B batch size, T sequence length, C channels, NH heads, HS = C/NH head size,
    V vocabulary size, Vp padded vocabulary, L layers, maxT longest sequence.
Conventions: a layer's backward ACCUMULATES (+=) into parameter gradients
(dweight, dbias) and into dinp of layernorm_backward and encoder_backward (the
residual stream is one running gradient, see gpt2_backward); the other
activation gradients are WRITTEN (=): matmul dinp, gelu, attention dqkv and the
cross-entropy's dlogits.
*/

// fsync, glob, access, mkdir and M_PI are POSIX / X/Open, not ISO C (and on_exit, with MPI,
// glibc's own)
#define _XOPEN_SOURCE 700
#ifdef USE_MPI
#define _DEFAULT_SOURCE
#endif
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
#ifdef _OPENMP
#include <omp.h>
#endif
#define PROGRAM "./train_gpt2" // in messages: how the user runs this program
#include "lib/utils.h"
#include "lib/rand.h"
#include "lib/gemm.h"
#include "lib/phases.h"

// ----------------------------------------------------------------------------
// the layers, forward and backward, in the order data flows through GPT-2

// The fast paths these layers call are lib/gemm.h's: the blocked GEMM behind
// matmul_forward/backward (about 90% of a training step is spent there), an exp the
// compiler can vectorise, a dot product in independent partial sums.

void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, size_t B, size_t T, size_t C) {
    // out[b,t,:] = wte[token] + wpe[t]: token embedding plus learned position embedding
    #pragma omp parallel for collapse(2)
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < T; t++) {
            float *out_bt = out + (b * T + t) * C;
            const float *wte_ix = wte + (size_t)inp[b * T + t] * C;
            const float *wpe_t = wpe + t * C;
            for (size_t i = 0; i < C; i++) { out_bt[i] = wte_ix[i] + wpe_t[i]; }
        }
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, size_t B, size_t T, size_t C) {
    // serial on purpose: two positions may hold the same token, and a parallel
    // loop would race on its wte row (and change the summation order)
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < T; t++) {
            const float *dout_bt = dout + (b * T + t) * C;
            float *dwte_ix = dwte + (size_t)inp[b * T + t] * C;
            float *dwpe_t = dwpe + t * C;
            for (size_t i = 0; i < C; i++) {
                dwte_ix[i] += dout_bt[i];
                dwpe_t[i] += dout_bt[i];
            }
        }
    }
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, size_t B, size_t T, size_t C) {
    // y = (x - mean) / sqrt(var + eps) * weight + bias over the C channels of each
    // position; var is the biased variance, eps = 1e-5 as in GPT-2 and PyTorch.
    // mean and rstd are saved for the backward pass.
    const float eps = 1e-5f;
    // (threads only where there is enough work to pay for waking them: not for the one
    // row of a decode step, where the wake-up would cost more than the row)
    #pragma omp parallel for if (B * T * C > 65536)
    for (size_t bt = 0; bt < B * T; bt++) {
        const float *x = inp + bt * C;
        float m = 0.0f;
        for (size_t i = 0; i < C; i++) { m += x[i]; }
        m /= C;
        float v = 0.0f; // two passes: the one-pass E[x^2] - m^2 cancels badly
        for (size_t i = 0; i < C; i++) { float d = x[i] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float *out_bt = out + bt * C;
        for (size_t i = 0; i < C; i++) { out_bt[i] = (x[i] - m) * s * weight[i] + bias[i]; }
        mean[bt] = m;
        rstd[bt] = s;
    }
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, size_t B, size_t T, size_t C) {
    // With xhat = (x - mean) * rstd and g = dout * weight:
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    // Pass 1 (parallel over positions) writes dinp; pass 2 (parallel over
    // channels) sums dweight and dbias over positions, so no two threads add
    // into the same parameter and the order of the sums is fixed.
    #pragma omp parallel for
    for (size_t bt = 0; bt < B * T; bt++) {
        const float *dout_bt = dout + bt * C, *x = inp + bt * C;
        float m = mean[bt], s = rstd[bt];
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (size_t i = 0; i < C; i++) {
            float g = dout_bt[i] * weight[i];
            g_mean += g;
            gx_mean += g * (x[i] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        float *dinp_bt = dinp + bt * C;
        for (size_t i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            dinp_bt[i] += s * (dout_bt[i] * weight[i] - g_mean - xhat * gx_mean);
        }
    }
    #pragma omp parallel for
    for (size_t i0 = 0; i0 < C; i0 += 64) { // 64 channels per thread, read along rows
        size_t width = C - i0 < 64 ? C - i0 : 64;
        float dw[64] = {0}, db[64] = {0};
        for (size_t bt = 0; bt < B * T; bt++) {
            const float *dout_bt = dout + bt * C + i0, *x = inp + bt * C + i0;
            for (size_t i = 0; i < width; i++) {
                dw[i] += dout_bt[i] * (x[i] - mean[bt]) * rstd[bt];
                db[i] += dout_bt[i];
            }
        }
        for (size_t i = 0; i < width; i++) {
            dweight[i0 + i] += dw[i];
            dbias[i0 + i] += db[i];
        }
    }
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                    size_t B, size_t T, size_t C, size_t OC) {
    // out (B,T,OC) = inp (B,T,C) @ weight^T + bias, weight is (OC,C) as in
    // PyTorch's nn.Linear: start from the bias, then accumulate the product
    #pragma omp parallel for
    for (size_t bt = 0; bt < B * T; bt++) {
        for (size_t o = 0; o < OC; o++) { out[bt * OC + o] = bias != NULL ? bias[o] : 0.0f; }
    }
    int pack_weight = (OC * sizeof(float)) % 4096 == 0;
#if defined(__AVX512F__) // (the GEMM's register tile is then 16 floats wide)
    pack_weight = pack_weight || B * T >= 128;
#endif
    if (!pack_weight) {
        // computed transposed, out^T (OC, B*T) = weight (OC,C) @ inp^T (C, B*T), so
        // that the big operand (the weight) is read in place and only the small
        // input is packed
        gemm(out, 1, OC, weight, C, 1, inp, 1, C, (int)OC, (int)(B * T), (int)C, 1);
    } else {
        // ...except when a row of out is a multiple of 4 KiB (OC = 1024, 3072, ...):
        // then the transposed tile's rows all map to the same cache sets and the stores
        // thrash (measured: half the speed), so we pack the weight instead; and with
        // AVX-512 for 128 rows and more, where the transposed tile's column-at-a-time
        // stores cost a quarter of the speed (measured 200-220 against 280 GFLOP/s at
        // 512 rows; with AVX2 the transposed product stays ahead)
        gemm(out, OC, 1, inp, C, 1, weight, 1, C, (int)(B * T), (int)OC, (int)C, 1);
    }
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, size_t B, size_t T, size_t C, size_t OC) {
    // dinp (B,T,C) = dout (B,T,OC) @ weight (OC,C)     (written)
    gemm(dinp, C, 1, dout, OC, 1, weight, C, 1, (int)(B * T), (int)C, (int)OC, 0);
    // dweight (OC,C) += dout^T (OC,B*T) @ inp (B*T,C)  (accumulated)
    gemm(dweight, C, 1, dout, 1, OC, inp, C, 1, (int)OC, (int)C, (int)(B * T), 1);
    if (dbias != NULL) {
        // dbias (OC) += column sums of dout: each thread takes 64 columns and
        // walks down the rows, so memory is read along rows, not down columns
        #pragma omp parallel for
        for (size_t o0 = 0; o0 < OC; o0 += 64) {
            size_t width = OC - o0 < 64 ? OC - o0 : 64;
            float sum[64] = {0};
            for (size_t bt = 0; bt < B * T; bt++) {
                for (size_t o = 0; o < width; o++) { sum[o] += dout[bt * OC + o0 + o]; }
            }
            for (size_t o = 0; o < width; o++) { dbias[o0 + o] += sum[o]; }
        }
    }
}

void attention_forward(float *out, float *att, const float *qkv, size_t B, size_t T, size_t C, size_t NH) {
    // qkv (B,T,3C) holds query, key, value side by side; head h uses channels
    // h*HS .. h*HS+HS-1 of each. att (B,NH,T,T) keeps the softmaxed scores for the
    // backward pass (zero above the diagonal: causal). out (B,T,C) = att @ v.
    size_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(3)
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * 3 * C + h * HS;
                float *att_bth = att + ((b * NH + h) * T + t) * T;
                float maxval = -INFINITY;
                for (size_t t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + (b * T + t2) * 3 * C + C + h * HS;
                    att_bth[t2] = dot8(q, k, HS) * scale;
                    if (att_bth[t2] > maxval) { maxval = att_bth[t2]; }
                }
                // softmax, shifted by the max for stability
                float sum = 0.0f;
                for (size_t t2 = 0; t2 <= t; t2++) {
                    att_bth[t2] = exp_fast(att_bth[t2] - maxval);
                    sum += att_bth[t2];
                }
                for (size_t t2 = 0; t2 <= t; t2++) { att_bth[t2] /= sum; }
                for (size_t t2 = t + 1; t2 < T; t2++) { att_bth[t2] = 0.0f; }
                float *out_bth = out + (b * T + t) * C + h * HS;
                for (size_t i = 0; i < HS; i++) { out_bth[i] = 0.0f; }
                for (size_t t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + (b * T + t2) * 3 * C + 2 * C + h * HS;
                    for (size_t i = 0; i < HS; i++) { out_bth[i] += att_bth[t2] * v[i]; }
                }
            }
        }
    }
}

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                        size_t B, size_t T, size_t C, size_t NH) {
    // Per (b, h): out_t = sum_t2 att[t,t2] v_t2 and att[t,:] = softmax(q_t . k_t2 * scale).
    //   datt[t,t2] = dout_t . v_t2           dv_t2 += att[t,t2] dout_t
    //   dscore[t,t2] = att[t,t2] (datt[t,t2] - sum_t3 att[t,t3] datt[t,t3])
    //   dq_t += scale dscore[t,t2] k_t2      dk_t2 += scale dscore[t,t2] q_t
    // Keys and values of one (b, h) collect contributions from every t, so we
    // parallelise over (b, h) only: no races, fixed summation order.
    // dqkv is written: we clear this (b, h)'s slice first. datt (B,NH,T,T) is scratch.
    size_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2)
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t t = 0; t < T; t++) {
                float *dqkv_bt = dqkv + (b * T + t) * 3 * C + h * HS;
                for (size_t i = 0; i < HS; i++) { dqkv_bt[i] = dqkv_bt[C + i] = dqkv_bt[2 * C + i] = 0.0f; }
            }
            for (size_t t = 0; t < T; t++) {
                const float *att_bth = att + ((b * NH + h) * T + t) * T;
                float *datt_bth = datt + ((b * NH + h) * T + t) * T;
                const float *dout_bth = dout + (b * T + t) * C + h * HS;
                const float *q = qkv + (b * T + t) * 3 * C + h * HS;
                float *dq = dqkv + (b * T + t) * 3 * C + h * HS;
                // through out = att @ v
                for (size_t t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + (b * T + t2) * 3 * C + 2 * C + h * HS;
                    float *dv = dqkv + (b * T + t2) * 3 * C + 2 * C + h * HS;
                    for (size_t i = 0; i < HS; i++) { dv[i] += att_bth[t2] * dout_bth[i]; }
                    datt_bth[t2] = dot8(dout_bth, v, HS);
                }
                // through the softmax
                float dot = 0.0f;
                for (size_t t2 = 0; t2 <= t; t2++) { dot += att_bth[t2] * datt_bth[t2]; }
                // through the scores q . k * scale
                for (size_t t2 = 0; t2 <= t; t2++) {
                    float dscore = att_bth[t2] * (datt_bth[t2] - dot) * scale;
                    const float *k = qkv + (b * T + t2) * 3 * C + C + h * HS;
                    float *dk = dqkv + (b * T + t2) * 3 * C + C + h * HS;
                    for (size_t i = 0; i < HS; i++) {
                        dq[i] += dscore * k[i];
                        dk[i] += dscore * q[i];
                    }
                }
            }
        }
    }
}

// Attention in linear memory (flash attention: Dao et al., "FlashAttention", 2022, and
// "FlashAttention-2", 2023). The two functions above keep every (B,NH,T,T) score: at
// T = 1,024 that is 48 MiB a layer for GPT-2 small's 12 heads, and it grows with T^2.
// These two compute the same attention without it. The forward pass walks the keys
// and values in tiles of FLASH_TK, against a tile of FLASH_TQ queries at a time, and
// keeps for each query a running maximum m, a running sum l of exp(score - m), and an
// output accumulated with the same weights. When a tile raises the maximum, everything
// accumulated so far is scaled by exp(m_old - m_new) (the online softmax: Milakov &
// Gimelshein, 2018), so the result after the last tile is the softmax's, exactly up to
// rounding. Each row's log-sum-exp, m + log l, is all it keeps for the backward pass:
// (B,NH,T), not (B,NH,T,T). Tiles wholly above the diagonal are never visited (causal).
// The tile sizes only set how much is reused from cache; any sizes give the same maths.
#define FLASH_TQ 32 // queries per tile
#define FLASH_TK 32 // keys and values per tile

void flash_attention_forward(float *out, float *lse, const float *qkv, size_t B, size_t T, size_t C, size_t NH) {
    // qkv (B,T,3C) as in attention_forward; out (B,T,C); lse (B,NH,T) log-sum-exp of
    // each row of scaled scores, for flash_attention_backward
    size_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t num_tiles = (T + FLASH_TQ - 1) / FLASH_TQ;
    #pragma omp parallel for collapse(3)
    for (size_t b = 0; b < B; b++) {
        for (size_t h = 0; h < NH; h++) {
            for (size_t tile = 0; tile < num_tiles; tile++) {
                size_t t0 = tile * FLASH_TQ, t_end = t0 + FLASH_TQ < T ? t0 + FLASH_TQ : T;
                float m[FLASH_TQ], l[FLASH_TQ], p[FLASH_TK];
                for (size_t t = t0; t < t_end; t++) {
                    m[t - t0] = -INFINITY;
                    l[t - t0] = 0.0f;
                    float *out_bth = out + (b * T + t) * C + h * HS;
                    for (size_t i = 0; i < HS; i++) { out_bth[i] = 0.0f; }
                }
                // key tiles up to the last query of this tile (t_end - 1)
                for (size_t k0 = 0; k0 < t_end; k0 += FLASH_TK) {
                    for (size_t t = t0; t < t_end; t++) {
                        if (k0 > t) { continue; } // this row sees no key of this tile
                        // keys k0 .. k_end-1 of this tile that query t may attend to
                        size_t k_end = k0 + FLASH_TK < t + 1 ? k0 + FLASH_TK : t + 1;
                        const float *q = qkv + (b * T + t) * 3 * C + h * HS;
                        float tile_max = -INFINITY;
                        for (size_t t2 = k0; t2 < k_end; t2++) {
                            const float *k = qkv + (b * T + t2) * 3 * C + C + h * HS;
                            p[t2 - k0] = dot8(q, k, HS) * scale;
                            if (p[t2 - k0] > tile_max) { tile_max = p[t2 - k0]; }
                        }
                        // the online softmax: rescale what we have to the new maximum
                        float m_new = tile_max > m[t - t0] ? tile_max : m[t - t0];
                        float rescale = exp_fast(m[t - t0] - m_new); // (exp(-inf) = 0 on the first tile)
                        float sum = 0.0f;
                        for (size_t t2 = k0; t2 < k_end; t2++) {
                            p[t2 - k0] = exp_fast(p[t2 - k0] - m_new);
                            sum += p[t2 - k0];
                        }
                        m[t - t0] = m_new;
                        l[t - t0] = l[t - t0] * rescale + sum;
                        float *out_bth = out + (b * T + t) * C + h * HS;
                        for (size_t i = 0; i < HS; i++) { out_bth[i] *= rescale; }
                        for (size_t t2 = k0; t2 < k_end; t2++) {
                            const float *v = qkv + (b * T + t2) * 3 * C + 2 * C + h * HS;
                            for (size_t i = 0; i < HS; i++) { out_bth[i] += p[t2 - k0] * v[i]; }
                        }
                    }
                }
                // divide by the softmax's sum once, at the end
                for (size_t t = t0; t < t_end; t++) {
                    float *out_bth = out + (b * T + t) * C + h * HS;
                    for (size_t i = 0; i < HS; i++) { out_bth[i] /= l[t - t0]; }
                    lse[(b * NH + h) * T + t] = m[t - t0] + logf(l[t - t0]);
                }
            }
        }
    }
}

void flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                              size_t B, size_t T, size_t C, size_t NH) {
    // The gradients of attention_backward, with each probability recomputed from the
    // scores and the saved log-sum-exp, P[t,t2] = exp(q_t . k_t2 * scale - lse_t),
    // instead of read from a (T,T) table. The softmax's row term needs no table either:
    //   sum_t2 P[t,t2] datt[t,t2] = sum_t2 P[t,t2] (dout_t . v_t2) = dout_t . out_t  =: D_t
    // The loop runs over key tiles outside and query tiles inside, as FlashAttention-2's
    // backward does: a key tile's dk, dv gather from every query after it. One thread
    // takes a whole (b, h), as in attention_backward: no races, a fixed order of sums.
    // dqkv is written (this (b, h)'s slice cleared first).
    size_t HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel
    {
        float *D = (float *)mallocCheck(T * sizeof(float)); // this thread's D_t of one (b, h)
        #pragma omp for collapse(2)
        for (size_t b = 0; b < B; b++) {
            for (size_t h = 0; h < NH; h++) {
                const float *lse_bh = lse + (b * NH + h) * T;
                for (size_t t = 0; t < T; t++) {
                    float *dqkv_bt = dqkv + (b * T + t) * 3 * C + h * HS;
                    for (size_t i = 0; i < HS; i++) { dqkv_bt[i] = dqkv_bt[C + i] = dqkv_bt[2 * C + i] = 0.0f; }
                    D[t] = dot8(dout + (b * T + t) * C + h * HS, out + (b * T + t) * C + h * HS, HS);
                }
                for (size_t k0 = 0; k0 < T; k0 += FLASH_TK) {
                    size_t k_end = k0 + FLASH_TK < T ? k0 + FLASH_TK : T;
                    // the query tiles from the one holding key k0 (the diagonal) to the last
                    for (size_t t0 = k0 / FLASH_TQ * FLASH_TQ; t0 < T; t0 += FLASH_TQ) {
                        size_t t_end = t0 + FLASH_TQ < T ? t0 + FLASH_TQ : T;
                        for (size_t t = t0 < k0 ? k0 : t0; t < t_end; t++) {
                            const float *q = qkv + (b * T + t) * 3 * C + h * HS;
                            const float *dout_bth = dout + (b * T + t) * C + h * HS;
                            float *dq = dqkv + (b * T + t) * 3 * C + h * HS;
                            size_t k_last = k_end < t + 1 ? k_end : t + 1; // causal
                            for (size_t t2 = k0; t2 < k_last; t2++) {
                                const float *k = qkv + (b * T + t2) * 3 * C + C + h * HS;
                                const float *v = qkv + (b * T + t2) * 3 * C + 2 * C + h * HS;
                                float *dk = dqkv + (b * T + t2) * 3 * C + C + h * HS;
                                float *dv = dk + C;
                                float p = exp_fast(dot8(q, k, HS) * scale - lse_bh[t]);
                                float dscore = p * (dot8(dout_bth, v, HS) - D[t]) * scale;
                                for (size_t i = 0; i < HS; i++) {
                                    dv[i] += p * dout_bth[i];
                                    dq[i] += dscore * k[i];
                                    dk[i] += dscore * q[i];
                                }
                            }
                        }
                    }
                }
            }
        }
        free(D);
    }
}

// --- begin shared-copy: gelu-tanh ---
// GELU, tanh approximation (Hendrycks & Gimpel 2016; PyTorch gelu(approximate='tanh')):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

// tanh(u) = 1 - 2 / (exp(2u) + 1): libm's tanhf is a slow function call, and
// GELU runs on every hidden unit (and its backward again). The absolute error stays below
// 3e-7 (exp_fast's clamp gives exactly 1 for large u, -1 for very negative u).
static inline float tanh_via_exp(float u) { return 1.0f - 2.0f / (exp_fast(2.0f * u) + 1.0f); }
// --- end shared-copy: gelu-tanh ---

void gelu_forward(float *out, const float *inp, size_t N) {
    #pragma omp parallel for if (N > 65536) // (as in layernorm_forward)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_via_exp(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
    // d/dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx, u = sqrt(2/pi)(x + 0.044715 x^3).
    // dinp may be the same buffer as dout (we use it in place).
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float th = tanh_via_exp(GELU_SCALE * (x + 0.044715f * x * x * x));
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}

void residual_forward(float *out, const float *inp1, const float *inp2, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) { out[i] = inp1[i] + inp2[i]; }
}

void softmax_forward(float *probs, const float *logits, size_t B, size_t T, size_t V, size_t Vp) {
    // probabilities over the real vocabulary only; the padded columns V..Vp-1 get 0
    #pragma omp parallel for
    for (size_t bt = 0; bt < B * T; bt++) {
        const float *logits_bt = logits + bt * Vp;
        float *probs_bt = probs + bt * Vp;
        float maxval = -INFINITY;
        for (size_t i = 0; i < V; i++) { if (logits_bt[i] > maxval) { maxval = logits_bt[i]; } }
        float sum = 0.0f;
        // exponentials first, in a loop of their own so that it vectorises; the sum
        // is a separate, sequential loop (a vectorised sum would reorder it)
        for (size_t i = 0; i < V; i++) { probs_bt[i] = exp_fast(logits_bt[i] - maxval); }
        for (size_t i = 0; i < V; i++) { sum += probs_bt[i]; }
        float inv_sum = 1.0f / sum;
        for (size_t i = 0; i < V; i++) { probs_bt[i] *= inv_sum; }
        for (size_t i = V; i < Vp; i++) { probs_bt[i] = 0.0f; }
    }
}

void crossentropy_forward(float *losses, const float *probs, const int *targets, size_t B, size_t T, size_t Vp) {
    for (size_t bt = 0; bt < B * T; bt++) { losses[bt] = -logf(probs[bt * Vp + targets[bt]]); }
}

void crossentropy_softmax_backward(float *dlogits, const float *probs, const int *targets, float dloss,
                                   size_t B, size_t T, size_t V, size_t Vp) {
    // softmax and cross-entropy together have the simple gradient p - onehot(target),
    // times dloss = d(mean loss)/d(one loss). The padded columns get no gradient.
    #pragma omp parallel for
    for (size_t bt = 0; bt < B * T; bt++) {
        const float *probs_bt = probs + bt * Vp;
        float *dlogits_bt = dlogits + bt * Vp;
        for (size_t i = 0; i < V; i++) { dlogits_bt[i] = probs_bt[i] * dloss; }
        for (size_t i = V; i < Vp; i++) { dlogits_bt[i] = 0.0f; }
        dlogits_bt[targets[bt]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// the model: configuration, parameter and activation tables

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

// Which tensors get weight decay: the matrices (embeddings and linear weights),
// not the biases and LayerNorm parameters (as in nanoGPT and most GPT training).
static const int WEIGHT_DECAYED[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// One allocation for a whole table; the struct's pointers are slices of it.
// (The struct is a run of float pointers, so we can fill it as an array.)
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

// Which attention the model runs (-F): 0 attention_forward/backward, which keep the
// (B,NH,T,T) probabilities; 1 flash_attention_forward/backward, which keep a (B,NH,T)
// log-sum-exp instead. gpt2_allocate_activations reads it.
static int flash_attention = 0;

#define NUM_ACTIVATION_TENSORS 23
typedef struct {
    float *encoded;   // (B, T, C) token + position embeddings
    float *ln1;       // (L, B, T, C)
    float *ln1_mean;  // (L, B, T)
    float *ln1_rstd;  // (L, B, T)
    float *qkv;       // (L, B, T, 3*C)
    float *atty;      // (L, B, T, C) attention output, before the projection
    float *att;       // (L, B, NH, T, T) softmaxed attention scores (none with -F 1)
    float *att_lse;   // (L, B, NH, T) log-sum-exp of each row of scores (-F 1 only)
    float *attproj;   // (L, B, T, C)
    float *residual2; // (L, B, T, C) residual stream after attention
    float *ln2;       // (L, B, T, C)
    float *ln2_mean;  // (L, B, T)
    float *ln2_rstd;  // (L, B, T)
    float *fch;       // (L, B, T, 4*C) MLP hidden layer, before GELU
    float *fch_gelu;  // (L, B, T, 4*C)
    float *fcproj;    // (L, B, T, C)
    float *residual3; // (L, B, T, C) residual stream after the MLP = the block's output
    float *lnf;       // (B, T, C)
    float *lnf_mean;  // (B, T)
    float *lnf_rstd;  // (B, T)
    float *logits;    // (B, T, Vp); the backward pass overwrites them with dlogits
    float *probs;     // (B, T, Vp)
    float *losses;    // (B, T)
} ActivationTensors;

void fill_in_activation_sizes(size_t *sizes, GPT2Config config, size_t B, size_t T, int flash) {
    size_t C = config.channels, NH = config.num_heads, L = config.num_layers, Vp = config.padded_vocab_size;
    size_t shapes[NUM_ACTIVATION_TENSORS] = {
        B * T * C, L * B * T * C, L * B * T, L * B * T, L * B * T * 3 * C, L * B * T * C,
        flash ? 0 : L * B * NH * T * T, flash ? L * B * NH * T : 0, L * B * T * C, L * B * T * C, L * B * T * C, L * B * T, L * B * T,
        L * B * T * 4 * C, L * B * T * 4 * C, L * B * T * C, L * B * T * C, B * T * C, B * T, B * T,
        B * T * Vp, B * T * Vp, B * T};
    memcpy(sizes, shapes, sizeof(shapes));
}

// Gradients of the activations. Thanks to the (=) conventions above we need one
// buffer of each shape for the whole network, not one per layer.
#define NUM_GRAD_ACT_TENSORS 6
typedef struct {
    float *dresidual; // (B, T, C) the running gradient of the residual stream
    float *dln;       // (B, T, C) gradient at a LayerNorm output (ln1, ln2 and lnf in turn)
    float *datty;     // (B, T, C)
    float *dqkv;      // (B, T, 3*C)
    float *datt;      // (B, NH, T, T) (none with -F 1)
    float *dfch;      // (B, T, 4*C) gradient at fch_gelu, then (in place) at fch
} GradActTensors;

void fill_in_grad_act_sizes(size_t *sizes, GPT2Config config, size_t B, size_t T, int flash) {
    size_t C = config.channels, NH = config.num_heads;
    size_t shapes[NUM_GRAD_ACT_TENSORS] = {B * T * C, B * T * C, B * T * C, B * T * 3 * C, flash ? 0 : B * NH * T * T,
                                           B * T * 4 * C};
    memcpy(sizes, shapes, sizeof(shapes));
}

#define NORM_CHUNK 4096 // gradients per partial sum in gpt2_grad_norm

typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float *params_memory;
    size_t num_parameters;
    ParameterTensors grads;
    float *grads_memory;
    double *norm_scratch; // partial sums of gpt2_grad_norm, one per NORM_CHUNK gradients
    float *m_memory; // AdamW first moments, allocated on the first update
    float *v_memory; // AdamW second moments
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float *acts_memory;
    size_t num_activations;
    GradActTensors grads_acts;
    float *grads_acts_memory;
    size_t num_grad_acts;
    int batch_size; // the B and T the activations were allocated for; 0 until the first forward
    int seq_len;
    int flash;      // and the attention (flash_attention at that time)
    int B, T;       // the batch of the last forward pass, which gpt2_backward works on
    int *inputs;    // (B, T) the current batch, kept for the backward pass
    int *targets;   // (B, T)
    float mean_loss; // of the last forward with targets, -1 without
} GPT2;

// set up sizes and one block of parameters (contents left for the caller)
static void gpt2_allocate_parameters(GPT2 *model) {
    fill_in_parameter_sizes(model->param_sizes, model->config);
    model->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { model->num_parameters += model->param_sizes[i]; }
    model->params_memory = malloc_and_point((float **)&model->params, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->grads_memory = NULL;
    model->norm_scratch = NULL;
    model->m_memory = NULL;
    model->v_memory = NULL;
    model->acts_memory = NULL;
    model->grads_acts_memory = NULL;
    model->inputs = NULL;
    model->targets = NULL;
    model->batch_size = 0;
    model->seq_len = 0;
    model->mean_loss = -1.0f;
}

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

void gpt2_build_from_checkpoint(GPT2 *model, const char *checkpoint_path) {
    FILE *fp = fopenCheck(checkpoint_path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: file too short for a model header (256 x int32)\n", checkpoint_path);
        fprintf(stderr, "HINT: is this a model checkpoint? train_gpt2 writes them as model_<step>.bin\n");
        exit(EXIT_FAILURE);
    }
    if (header[0] != MODEL_MAGIC) {
        fprintf(stderr, "Error: %s: bad magic number: expected %d (llm.c GPT-2 model), found %d\n",
                checkpoint_path, MODEL_MAGIC, header[0]);
        fprintf(stderr, "HINT: pass a model file (model_<step>.bin, or llm.c's gpt2_124M.bin), or -e d<N> for a new model\n");
        exit(EXIT_FAILURE);
    }
    if (header[1] != MODEL_VERSION_FP32) {
        fprintf(stderr, "Error: %s: model file version %d, this trainer reads version %d (fp32)%s\n",
                checkpoint_path, header[1], MODEL_VERSION_FP32,
                header[1] == MODEL_VERSION_BF16 ? "; version 5 is bf16, made for the GPU trainer" : "");
        fprintf(stderr, "HINT: write an fp32 checkpoint (llm.c: train_gpt2.py writes gpt2_124M.bin)\n");
        exit(EXIT_FAILURE);
    }
    model->config.max_seq_len = header[2];
    model->config.vocab_size = header[3];
    model->config.num_layers = header[4];
    model->config.num_heads = header[5];
    model->config.channels = header[6];
    model->config.padded_vocab_size = header[7];
    gpt2_validate_config(model->config, checkpoint_path);
    // the file must hold exactly the parameters the header promises: check before allocating
    size_t expected = 256 * sizeof(int) + gpt2_count_parameters(model->config) * sizeof(float);
    long actual = file_size(fp, checkpoint_path);
    if ((size_t)actual != expected) {
        fprintf(stderr, "Error: %s: file has %ld bytes, its header (L=%d C=%d Vp=%d maxT=%d) needs %zu: truncated or corrupt\n",
                checkpoint_path, actual, header[4], header[6], header[7], header[2], expected);
        exit(EXIT_FAILURE);
    }
    gpt2_allocate_parameters(model);
    freadCheck(model->params_memory, sizeof(float), model->num_parameters, fp);
    fcloseCheck(fp);
}

void gpt2_save_checkpoint(const GPT2 *model, const char *path) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_FP32;
    header[2] = model->config.max_seq_len;
    header[3] = model->config.vocab_size;
    header[4] = model->config.num_layers;
    header[5] = model->config.num_heads;
    header[6] = model->config.channels;
    header[7] = model->config.padded_vocab_size;
    const void *bufs[2] = {header, model->params_memory};
    size_t sizes[2] = {sizeof(header), model->num_parameters * sizeof(float)};
    write_file_atomic(path, bufs, sizes, 2);
}

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

void gpt2_init_random(GPT2 *model, uint64_t seed, int noisy) {
    init_parameters(model->params_memory, model->param_sizes, model->config, seed, noisy);
}

// a new model with random weights, from a descriptor d<N>
void gpt2_build_from_descriptor(GPT2 *model, const char *descriptor, uint64_t seed) {
    model->config = gpt2_config_from_descriptor(descriptor);
    gpt2_allocate_parameters(model);
    gpt2_init_random(model, seed, 0);
}

// ----------------------------------------------------------------------------
// the model: forward, backward, update

// Activations for batches of up to B x T tokens. gpt2_forward calls this on its
// first call; a trainer calls it first, so that sampling (B=1) can come before
// the first training step.
void gpt2_allocate_activations(GPT2 *model, size_t B, size_t T) {
    model->batch_size = (int)B;
    model->seq_len = (int)T;
    model->flash = flash_attention;
    fill_in_activation_sizes(model->act_sizes, model->config, B, T, model->flash);
    model->num_activations = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { model->num_activations += model->act_sizes[i]; }
    model->acts_memory = malloc_and_point((float **)&model->acts, model->act_sizes, NUM_ACTIVATION_TENSORS);
    model->inputs = (int *)mallocCheck(B * T * sizeof(int));
    model->targets = (int *)mallocCheck(B * T * sizeof(int));
}

// Forward pass over inputs (B,T). With targets (B,T) it also computes the mean
// loss; with targets == NULL (sampling) it stops at the probabilities. B and T
// may be smaller than at the first call (sampling runs with B=1); the activation
// tables are simply read with the smaller sizes.
void gpt2_forward(GPT2 *model, const int *inputs, const int *targets, size_t B, size_t T) {
    GPT2Config c = model->config;
    size_t V = c.vocab_size, Vp = c.padded_vocab_size, L = c.num_layers, NH = c.num_heads, C = c.channels;
    if (T > (size_t)c.max_seq_len) {
        fprintf(stderr, "Error: sequence length T=%zu exceeds the model's maximum maxT=%d\n", T, c.max_seq_len);
        exit(EXIT_FAILURE);
    }
    for (size_t i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || (size_t)inputs[i] >= V || (targets != NULL && (targets[i] < 0 || (size_t)targets[i] >= V))) {
            fprintf(stderr, "Error: token id %d at position %zu is outside the vocabulary [0, %zu)\n",
                    targets != NULL && (inputs[i] >= 0 && (size_t)inputs[i] < V) ? targets[i] : inputs[i], i, V);
            exit(EXIT_FAILURE);
        }
    }
    if (model->acts_memory == NULL) {
        gpt2_allocate_activations(model, B, T);
    } else if (B > (size_t)model->batch_size || T > (size_t)model->seq_len) {
        fprintf(stderr, "Error: forward with B=%zu T=%zu, but activations were allocated for B=%d T=%d\n",
                B, T, model->batch_size, model->seq_len);
        exit(EXIT_FAILURE);
    }
    memcpy(model->inputs, inputs, B * T * sizeof(int));
    if (targets != NULL) { memcpy(model->targets, targets, B * T * sizeof(int)); }
    model->B = (int)B;
    model->T = (int)T;

    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (size_t l = 0; l < L; l++) {
        // this layer's slices of the parameters and activations
        const float *residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * B * T * C;
        const float *l_ln1w = p.ln1w + l * C, *l_ln1b = p.ln1b + l * C;
        const float *l_qkvw = p.qkvw + l * 3 * C * C, *l_qkvb = p.qkvb + l * 3 * C;
        const float *l_attprojw = p.attprojw + l * C * C, *l_attprojb = p.attprojb + l * C;
        const float *l_ln2w = p.ln2w + l * C, *l_ln2b = p.ln2b + l * C;
        const float *l_fcw = p.fcw + l * 4 * C * C, *l_fcb = p.fcb + l * 4 * C;
        const float *l_fcprojw = p.fcprojw + l * C * 4 * C, *l_fcprojb = p.fcprojb + l * C;
        float *l_ln1 = a.ln1 + l * B * T * C, *l_ln1_mean = a.ln1_mean + l * B * T, *l_ln1_rstd = a.ln1_rstd + l * B * T;
        float *l_qkv = a.qkv + l * B * T * 3 * C, *l_atty = a.atty + l * B * T * C;
        float *l_att = a.att + l * B * NH * T * T, *l_att_lse = a.att_lse + l * B * NH * T;
        float *l_attproj = a.attproj + l * B * T * C;
        float *l_residual2 = a.residual2 + l * B * T * C;
        float *l_ln2 = a.ln2 + l * B * T * C, *l_ln2_mean = a.ln2_mean + l * B * T, *l_ln2_rstd = a.ln2_rstd + l * B * T;
        float *l_fch = a.fch + l * B * T * 4 * C, *l_fch_gelu = a.fch_gelu + l * B * T * 4 * C;
        float *l_fcproj = a.fcproj + l * B * T * C, *l_residual3 = a.residual3 + l * B * T * C;

        // attention block: x + attproj(attention(ln1(x)))
        layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, l_ln1w, l_ln1b, B, T, C);
        matmul_forward(l_qkv, l_ln1, l_qkvw, l_qkvb, B, T, C, 3 * C);
        if (model->flash) {
            flash_attention_forward(l_atty, l_att_lse, l_qkv, B, T, C, NH);
        } else {
            attention_forward(l_atty, l_att, l_qkv, B, T, C, NH);
        }
        matmul_forward(l_attproj, l_atty, l_attprojw, l_attprojb, B, T, C, C);
        residual_forward(l_residual2, residual, l_attproj, B * T * C);
        // MLP block: x + fcproj(gelu(fc(ln2(x))))
        layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, l_ln2w, l_ln2b, B, T, C);
        matmul_forward(l_fch, l_ln2, l_fcw, l_fcb, B, T, C, 4 * C);
        gelu_forward(l_fch_gelu, l_fch, B * T * 4 * C);
        matmul_forward(l_fcproj, l_fch_gelu, l_fcprojw, l_fcprojb, B, T, 4 * C, C);
        residual_forward(l_residual3, l_residual2, l_fcproj, B * T * C);
    }
    const float *residual = a.residual3 + (L - 1) * B * T * C;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p.lnfw, p.lnfb, B, T, C);
    // the output layer reuses the token embeddings (weight tying); this matmul
    // alone is a third of GPT-2 small's compute at this vocabulary size
    matmul_forward(a.logits, a.lnf, p.wte, NULL, B, T, C, Vp);
    softmax_forward(a.probs, a.logits, B, T, V, Vp);

    if (targets != NULL) {
        crossentropy_forward(a.losses, a.probs, targets, B, T, Vp);
        double sum = 0.0;
        for (size_t i = 0; i < B * T; i++) { sum += a.losses[i]; }
        model->mean_loss = (float)(sum / (B * T));
    } else {
        model->mean_loss = -1.0f;
    }
}

void gpt2_zero_grad(GPT2 *model) {
    if (model->grads_memory == NULL) { return; }
    // in parallel chunks: one core alone cannot saturate the memory bus
    size_t n = model->num_parameters, chunk = 1 << 20;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += chunk) { memset(model->grads_memory + i, 0, (n - i < chunk ? n - i : chunk) * sizeof(float)); }
}

// Backward pass of the last forward (which must have had targets). Parameter
// gradients ACCUMULATE, so that several micro-batches can add up before one
// update; loss_scale is d(total loss)/d(this batch's mean loss): 1 without
// gradient accumulation, 1/steps with it.
void gpt2_backward(GPT2 *model, float loss_scale) {
    if (model->mean_loss == -1.0f) {
        fprintf(stderr, "Error: gpt2_backward called without a forward pass with targets\n");
        exit(EXIT_FAILURE);
    }
    GPT2Config c = model->config;
    size_t B = model->B, T = model->T; // may be less than allocated: the layout follows the forward's
    size_t V = c.vocab_size, Vp = c.padded_vocab_size, L = c.num_layers, NH = c.num_heads, C = c.channels;
    if (model->grads_memory == NULL) {
        // first call: parameter gradients (zeroed) and the activation gradients
        model->grads_memory = malloc_and_point((float **)&model->grads, model->param_sizes, NUM_PARAMETER_TENSORS);
        memset(model->grads_memory, 0, model->num_parameters * sizeof(float));
        model->norm_scratch = (double *)mallocCheck((model->num_parameters / NORM_CHUNK + 1) * sizeof(double));
        size_t sizes[NUM_GRAD_ACT_TENSORS];
        fill_in_grad_act_sizes(sizes, c, model->batch_size, model->seq_len, model->flash);
        model->num_grad_acts = 0;
        for (int i = 0; i < NUM_GRAD_ACT_TENSORS; i++) { model->num_grad_acts += sizes[i]; }
        model->grads_acts_memory = malloc_and_point((float **)&model->grads_acts, sizes, NUM_GRAD_ACT_TENSORS);
    }
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts;
    GradActTensors ga = model->grads_acts;

    // the loss is the mean over B*T positions; dlogits overwrite the logits
    float dloss = loss_scale / (float)(B * T);
    float *dlogits = a.logits;
    crossentropy_softmax_backward(dlogits, a.probs, model->targets, dloss, B, T, V, Vp);
    matmul_backward(ga.dln, g.wte, NULL, dlogits, a.lnf, p.wte, B, T, C, Vp);
    // dresidual starts as the gradient at the last block's output...
    const float *residual = a.residual3 + (L - 1) * B * T * C;
    memset(ga.dresidual, 0, B * T * C * sizeof(float));
    layernorm_backward(ga.dresidual, g.lnfw, g.lnfb, ga.dln, residual, p.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C);

    // ...and flows down the residual stream: each LayerNorm backward adds its
    // branch's gradient into it, which turns "gradient at a block's output" into
    // "gradient at its input" without a separate residual_backward
    for (int li = (int)L - 1; li >= 0; li--) {
        size_t l = (size_t)li;
        residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * B * T * C;
        const float *l_ln1w = p.ln1w + l * C, *l_qkvw = p.qkvw + l * 3 * C * C, *l_attprojw = p.attprojw + l * C * C;
        const float *l_ln2w = p.ln2w + l * C, *l_fcw = p.fcw + l * 4 * C * C, *l_fcprojw = p.fcprojw + l * C * 4 * C;
        float *dl_ln1w = g.ln1w + l * C, *dl_ln1b = g.ln1b + l * C;
        float *dl_qkvw = g.qkvw + l * 3 * C * C, *dl_qkvb = g.qkvb + l * 3 * C;
        float *dl_attprojw = g.attprojw + l * C * C, *dl_attprojb = g.attprojb + l * C;
        float *dl_ln2w = g.ln2w + l * C, *dl_ln2b = g.ln2b + l * C;
        float *dl_fcw = g.fcw + l * 4 * C * C, *dl_fcb = g.fcb + l * 4 * C;
        float *dl_fcprojw = g.fcprojw + l * C * 4 * C, *dl_fcprojb = g.fcprojb + l * C;
        const float *l_ln1 = a.ln1 + l * B * T * C, *l_ln1_mean = a.ln1_mean + l * B * T, *l_ln1_rstd = a.ln1_rstd + l * B * T;
        const float *l_qkv = a.qkv + l * B * T * 3 * C, *l_atty = a.atty + l * B * T * C;
        const float *l_att = a.att + l * B * NH * T * T, *l_att_lse = a.att_lse + l * B * NH * T;
        const float *l_residual2 = a.residual2 + l * B * T * C;
        const float *l_ln2 = a.ln2 + l * B * T * C, *l_ln2_mean = a.ln2_mean + l * B * T, *l_ln2_rstd = a.ln2_rstd + l * B * T;
        const float *l_fch = a.fch + l * B * T * 4 * C, *l_fch_gelu = a.fch_gelu + l * B * T * 4 * C;

        // MLP block, in reverse; dresidual is the gradient at fcproj's output
        matmul_backward(ga.dfch, dl_fcprojw, dl_fcprojb, ga.dresidual, l_fch_gelu, l_fcprojw, B, T, 4 * C, C);
        gelu_backward(ga.dfch, l_fch, ga.dfch, B * T * 4 * C);
        matmul_backward(ga.dln, dl_fcw, dl_fcb, ga.dfch, l_ln2, l_fcw, B, T, C, 4 * C);
        layernorm_backward(ga.dresidual, dl_ln2w, dl_ln2b, ga.dln, l_residual2, l_ln2w, l_ln2_mean, l_ln2_rstd, B, T, C);
        // attention block, in reverse; dresidual is now the gradient at residual2
        matmul_backward(ga.datty, dl_attprojw, dl_attprojb, ga.dresidual, l_atty, l_attprojw, B, T, C, C);
        if (model->flash) {
            flash_attention_backward(ga.dqkv, ga.datty, l_qkv, l_atty, l_att_lse, B, T, C, NH);
        } else {
            attention_backward(ga.dqkv, ga.datt, ga.datty, l_qkv, l_att, B, T, C, NH);
        }
        matmul_backward(ga.dln, dl_qkvw, dl_qkvb, ga.dqkv, l_ln1, l_qkvw, B, T, C, 3 * C);
        layernorm_backward(ga.dresidual, dl_ln1w, dl_ln1b, ga.dln, residual, l_ln1w, l_ln1_mean, l_ln1_rstd, B, T, C);
    }
    encoder_backward(g.wte, g.wpe, ga.dresidual, model->inputs, B, T, C);
}

// ----------------------------------------------------------------------------
// data parallelism: several processes ("ranks", started by mpirun), each with the whole
// model and its own slice of every batch. Each rank's backward pass leaves the gradient of
// its slice's share of the batch's mean loss; summed over the ranks (an all-reduce) that is
// the gradient of the whole batch's mean loss, which every rank then applies: the same
// update a single process makes on the whole batch, so the weights stay the same on every
// rank. make train_gpt2_mpi builds this file with MPI (mpicc -DUSE_MPI); without it, one
// rank, and the functions below do nothing.
//
// ZeRO stage 1 (Rajbhandari et al. 2020; -Z 1): AdamW's two moments are 2 floats per
// parameter, kept whole on every rank above. Instead each rank keeps those of its shard of
// the parameters only (1/ranks of them, contiguous): the gradients are reduce-scattered
// (each rank gets the sum of its shard only), each rank updates its shard, and the updated
// shards are all-gathered into every rank's weights: together the traffic of one
// all-reduce, which is a reduce-scatter then an all-gather. The same AdamW on every weight
// (the sums and the norm added in other orders: the same run to rounding); the moments'
// memory divided by the number of ranks.
#ifdef USE_MPI
#include <limits.h>
#include <mpi.h>
#endif
typedef struct {
    int rank, world; // this process's rank, and how many there are
    int zero;        // 1: ZeRO-1, the AdamW moments sharded over the ranks (-Z 1)
} Ranks;
static Ranks ranks = {0, 1, 0};
// (train_gpt2.cu sums each layer's gradients during the last backward pass of a step, which
// main marks with this; here gpt2_sum_grads sums them all after it)
#ifndef TESTING
static int sum_grads_in_backward = 0;
#endif

#ifdef USE_MPI
// Any exit() after MPI started (an error's, or -h's success): a success finishes MPI as the
// run's end does; a failure aborts every rank (MPI_Abort), so that none waits forever in a
// collective for this one, whatever started them (mpirun stops the others itself, not
// every launcher does)
static void ranks_at_exit(int status, void *arg) {
    (void)arg;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) { return; }
    if (status != 0) { MPI_Abort(MPI_COMM_WORLD, status); }
    MPI_Finalize();
}
#endif

// MPI started, this process's rank found; the ranks but the first print nothing (their
// stdout goes to /dev/null: rank 0 speaks for all; errors still reach stderr)
void ranks_init(int *argc, char ***argv) {
#ifdef USE_MPI
    int provided; // (MPI calls come from the main thread only, between OpenMP's parallel loops: FUNNELED)
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (provided < MPI_THREAD_FUNNELED) {
        fprintf(stderr, "Error: this MPI does not allow a threaded (OpenMP) program: thread level %d\n", provided);
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &ranks.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks.world);
    if (ranks.rank > 0 && freopen("/dev/null", "w", stdout) == NULL) {
        fprintf(stderr, "Error: rank %d: cannot send its output to /dev/null\n", ranks.rank);
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    on_exit(ranks_at_exit, NULL);
#else
    (void)argc; (void)argv;
#endif
}

void ranks_finalize(void) {
#ifdef USE_MPI
    MPI_Finalize();
#endif
}

// x summed over the ranks (a loss: each rank's share of the mean)
double ranks_sum(double x) {
#ifdef USE_MPI
    if (ranks.world > 1) { MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }
#endif
    return x;
}

// Every rank starts from rank 0's weights. (A new model's are drawn from the seed, the same
// on every rank, and a checkpoint is read by every rank from -o, which must be storage they
// all share; but a machine with another maths library could draw other weights, and the
// ranks never compare them afterwards.) And every rank must have found the same checkpoint.
void ranks_start_alike(GPT2 *model, int resume_step) {
#ifdef USE_MPI
    if (ranks.world == 1) { return; }
    int steps[2] = {resume_step, -resume_step}, extremes[2]; // (the largest and, negated, the smallest)
    MPI_Allreduce(steps, extremes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (extremes[0] != -extremes[1]) {
        fprintf(stderr, "Error: rank %d: the ranks resume from different checkpoints (steps %d to %d)\n"
                "HINT: -o must be a folder every machine sees, the same one (a shared file system)\n", ranks.rank,
                -extremes[1], extremes[0]);
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    for (size_t at = 0; at < model->num_parameters; at += (size_t)1 << 30) {
        size_t part = model->num_parameters - at < ((size_t)1 << 30) ? model->num_parameters - at : (size_t)1 << 30;
        MPI_Bcast(model->params_memory + at, (int)part, MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
#else
    (void)model; (void)resume_step;
#endif
}

// whether the AdamW moments are sharded (ZeRO-1 on more than one rank)
static int sharded(void) { return ranks.zero && ranks.world > 1; }

// rank r's shard of n values: [*start, *start + *count), the ranks' shards in order
static void rank_shard(size_t n, int r, size_t *start, size_t *count) {
    *start = n * (size_t)r / (size_t)ranks.world;
    *count = n * (size_t)(r + 1) / (size_t)ranks.world - *start;
}

#ifdef USE_MPI
// every rank's shard of n values as MPI's counts and offsets (ints: n must fit one)
static void shard_counts(size_t n, int *counts, int *displs) {
    if (n > (size_t)INT_MAX) {
        fprintf(stderr, "Error: -Z 1 over MPI shards at most 2^31 - 1 parameters (MPI's counts are ints), not %zu\n", n);
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    for (int r = 0; r < ranks.world; r++) {
        size_t start, count;
        rank_shard(n, r, &start, &count);
        counts[r] = (int)count;
        displs[r] = (int)start;
    }
}
#endif

// The gradients summed over the ranks: every one, in place (MPI counts are ints: in pieces
// of 2^30); or, sharded, this rank's shard only (the rest of its gradients are left as its
// own, unsummed: only the shard is used from here on).
void gpt2_sum_grads(GPT2 *model) {
#ifdef USE_MPI
    if (ranks.world == 1) { return; }
    size_t n = model->num_parameters;
    if (sharded()) {
        static float *sum = NULL; // (this rank's shard) the sums, before they go into place
        int *counts = (int *)mallocCheck(2 * (size_t)ranks.world * sizeof(int)), *displs = counts + ranks.world;
        size_t start, count;
        shard_counts(n, counts, displs);
        rank_shard(n, ranks.rank, &start, &count);
        if (sum == NULL) { sum = (float *)mallocCheck((count > 0 ? count : 1) * sizeof(float)); }
        MPI_Reduce_scatter(model->grads_memory, sum, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        memcpy(model->grads_memory + start, sum, count * sizeof(float));
        free(counts);
        return;
    }
    for (size_t at = 0; at < n; at += (size_t)1 << 30) {
        size_t part = n - at < ((size_t)1 << 30) ? n - at : (size_t)1 << 30;
        MPI_Allreduce(MPI_IN_PLACE, model->grads_memory + at, (int)part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
#else
    (void)model;
#endif
}

// The updated shards into every rank's weights (ZeRO-1, after each rank's update of its own)
static void gather_params(GPT2 *model) {
#ifdef USE_MPI
    int *counts = (int *)mallocCheck(2 * (size_t)ranks.world * sizeof(int)), *displs = counts + ranks.world;
    shard_counts(model->num_parameters, counts, displs);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, model->params_memory, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    free(counts);
#else
    (void)model;
#endif
}

// The L2 norm of all parameter gradients together, accumulated in double. Each
// chunk of 4096 is summed in 8 independent lanes (so the compiler can vectorise
// without reordering a single addition), then the chunks are added in order:
// the result does not depend on the number of threads. (Sharded: each rank's
// shard, the squares summed over the ranks.)
float gpt2_grad_norm(const GPT2 *model) {
    size_t first = 0, n = model->num_parameters;
    if (sharded()) { rank_shard(model->num_parameters, ranks.rank, &first, &n); }
    size_t num_chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double *chunk_sums = model->norm_scratch; // (num_chunks), allocated with the gradients
    const float *g = model->grads_memory + first;
    #pragma omp parallel for
    for (size_t c = 0; c < num_chunks; c++) {
        size_t start = c * NORM_CHUNK, end = start + NORM_CHUNK < n ? start + NORM_CHUNK : n;
        double lanes[8] = {0};
        size_t i = start;
        for (; i + 8 <= end; i += 8) {
            for (int j = 0; j < 8; j++) { lanes[j] += (double)g[i + j] * g[i + j]; }
        }
        for (; i < end; i++) { lanes[0] += (double)g[i] * g[i]; }
        chunk_sums[c] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    }
    double sumsq = 0.0;
    for (size_t c = 0; c < num_chunks; c++) { sumsq += chunk_sums[c]; }
    if (sharded()) { sumsq = ranks_sum(sumsq); }
    return (float)sqrt(sumsq);
}

// AdamW (Loshchilov & Hutter 2019) exactly as torch.optim.AdamW computes it:
//   p -= lr * wd * p
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with g the gradient times grad_scale (the clipping factor, 1 when not clipping).
// t counts from 1. Sharded (ZeRO-1), each rank updates its shard [first, first + n),
// whose moments are all it keeps, then the shards are gathered into every rank's weights.
void gpt2_update(GPT2 *model, float learning_rate, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t) {
    size_t first = 0, n = model->num_parameters;
    if (sharded()) { rank_shard(model->num_parameters, ranks.rank, &first, &n); }
    if (model->m_memory == NULL) {
        // lazily, so that inference and evaluation never pay for the optimizer
        model->m_memory = (float *)mallocCheck((n > 0 ? n : 1) * sizeof(float));
        model->v_memory = (float *)mallocCheck((n > 0 ? n : 1) * sizeof(float));
        memset(model->m_memory, 0, n * sizeof(float));
        memset(model->v_memory, 0, n * sizeof(float));
    }
    float bias_correction1 = 1.0f - powf(beta1, (float)t);
    float sqrt_bias_correction2 = sqrtf(1.0f - powf(beta2, (float)t));
    float step_size = learning_rate / bias_correction1;
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        // tensor k's values offset..offset + size - 1 that are in [first, first + n): a..b-1
        size_t a = first > offset ? first : offset, end = offset + model->param_sizes[k];
        size_t b = first + n < end ? first + n : end;
        offset = end;
        if (a >= b) { continue; }
        float decay = WEIGHT_DECAYED[k] ? 1.0f - learning_rate * weight_decay : 1.0f;
        float *param = model->params_memory + a, *grad = model->grads_memory + a;
        float *m = model->m_memory + (a - first), *v = model->v_memory + (a - first);
        #pragma omp parallel for
        for (size_t i = 0; i < b - a; i++) {
            float gi = grad[i] * grad_scale;
            m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
            v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
            float denom = sqrtf(v[i]) / sqrt_bias_correction2 + eps;
            param[i] = param[i] * decay - step_size * m[i] / denom;
        }
    }
    if (sharded()) { gather_params(model); }
}

// the learning rate schedule: linear warm-up, then cosine decay to a floor
// --- begin shared-copy: gpt2-lr-schedule ---
// Step s (counting from 0) uses lr(s): warm-up from max_lr/warmup up to max_lr
// at s = warmup-1, then a cosine from max_lr (at s = warmup) towards
// max_lr*final_frac, which the curve would reach at s = max_steps, one past the
// last step. (llm.c's schedule; the peak is used twice, at warmup-1 and warmup.)
float get_learning_rate(int step, float max_lr, int warmup_steps, int max_steps, float final_frac) {
    if (step < warmup_steps) { return max_lr * (step + 1) / warmup_steps; }
    if (max_steps <= warmup_steps) { return max_lr; }
    float progress = (float)(step - warmup_steps) / (float)(max_steps - warmup_steps);
    float cosine = 0.5f * (1.0f + cosf((float)M_PI * progress)); // 1 -> 0
    float min_lr = max_lr * final_frac;
    return min_lr + (max_lr - min_lr) * cosine;
}

// --- end shared-copy: gpt2-lr-schedule ---

void gpt2_free(GPT2 *model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->norm_scratch);
    free(model->m_memory);
    free(model->v_memory);
    free(model->acts_memory);
    free(model->grads_acts_memory);
    free(model->inputs);
    free(model->targets);
}

// ----------------------------------------------------------------------------
// data: token shards in llm.c's format, read in shuffled order

// --- begin shared-copy: gpt2-data-shards ---
// A shard: a header of 256 int32 (magic 20240520, version 1, number of tokens),
// then the tokens as uint16. data/tokenizer writes them.
#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HINT "HINT: make data (or data/tokenizer -i your.txt -o prefix) writes token shards"

// Read one shard's header, check it against the file's size, return the token count.
static size_t shard_read_header(FILE *fp, const char *path) {
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a token shard header (256 x int32)\n%s\n", path, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    if (header[0] != SHARD_MAGIC || header[1] != SHARD_VERSION) {
        fprintf(stderr, "Error: %s: not a token shard: expected magic %d version %d, found magic %d version %d\n%s\n",
                path, SHARD_MAGIC, SHARD_VERSION, header[0], header[1], SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    long bytes = file_size(fp, path);
    size_t ntok = header[2] < 0 ? 0 : (size_t)header[2];
    if (header[2] < 0 || (size_t)bytes != 256 * sizeof(int) + ntok * sizeof(uint16_t)) {
        fprintf(stderr, "Error: %s: header says %d tokens (%zu bytes), the file has %ld bytes: truncated or corrupt\n%s\n",
                path, header[2], 256 * sizeof(int) + ntok * sizeof(uint16_t), bytes, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    return ntok;
}

typedef struct {
    size_t B, T;
    int vocab_size;          // every token must be below this
    glob_t glob_result;      // the shard paths
    size_t num_shards;
    int shuffle;             // train: 1, validation: 0
    uint64_t seed;
    // position: epoch, index into shard_order, index into sample_order
    size_t epoch, shard_pos, sample_pos;
    size_t *shard_order;     // (num_shards) the order we visit shards in this epoch
    uint16_t *tokens;        // the current shard
    size_t num_tokens;
    size_t num_samples;      // sequences of T+1 tokens that start at multiples of T
    size_t num_samples_total; // over all shards
    size_t *sample_order;    // (num_samples)
    size_t tokens_capacity, samples_capacity;
    int *inputs;             // (B, T) the batch
    int *targets;            // (B, T) the inputs shifted by one
} DataLoader;

// --- end shared-copy: gpt2-data-shards ---

// --- begin shared-copy: gpt2-data-loader ---
// Random streams of the data loader and the sampler. The shuffles are functions
// of (seed, epoch, shard), so resuming needs only the position, not a state.
#define STREAM_SHARD_ORDER 16  // index: epoch
#define STREAM_SAMPLE_ORDER 17 // index: epoch << 32 | shard position
#define STREAM_SAMPLING 18     // index: step

static void dataloader_load_shard(DataLoader *loader) {
    const char *path = loader->glob_result.gl_pathv[loader->shard_order[loader->shard_pos]];
    FILE *fp = fopenCheck(path, "rb");
    size_t ntok = shard_read_header(fp, path); // at least T+1: dataloader_init checked
    if (ntok > loader->tokens_capacity) {
        free(loader->tokens);
        loader->tokens = (uint16_t *)mallocCheck(ntok * sizeof(uint16_t));
        loader->tokens_capacity = ntok;
    }
    freadCheck(loader->tokens, sizeof(uint16_t), ntok, fp);
    fcloseCheck(fp);
    for (size_t i = 0; i < ntok; i++) {
        if (loader->tokens[i] >= loader->vocab_size) {
            fprintf(stderr, "Error: %s: token %zu has id %d, outside the model's vocabulary of %d\n"
                    "HINT: the shard was made with another tokenizer than the model's\n",
                    path, i, loader->tokens[i], loader->vocab_size);
            exit(EXIT_FAILURE);
        }
    }
    loader->num_tokens = ntok;
    loader->num_samples = (ntok - 1) / loader->T;
    if (loader->num_samples > loader->samples_capacity) {
        free(loader->sample_order);
        loader->sample_order = (size_t *)mallocCheck(loader->num_samples * sizeof(size_t));
        loader->samples_capacity = loader->num_samples;
    }
    if (loader->shuffle) {
        uint64_t index = ((uint64_t)loader->epoch << 32) | loader->shard_pos;
        random_permutation(loader->sample_order, loader->num_samples, rng_subkey(loader->seed, STREAM_SAMPLE_ORDER, index));
    } else {
        for (size_t i = 0; i < loader->num_samples; i++) { loader->sample_order[i] = i; }
    }
}

static void dataloader_start_epoch(DataLoader *loader) {
    if (loader->shuffle) {
        random_permutation(loader->shard_order, loader->num_shards, rng_subkey(loader->seed, STREAM_SHARD_ORDER, loader->epoch));
    } else {
        for (size_t i = 0; i < loader->num_shards; i++) { loader->shard_order[i] = i; }
    }
}

// Go to a position (epoch, shard, sample): at the start, on reset, on resume.
// sample_pos may equal the shard's sample count: the shard is used up, and the
// next batch moves on to the next shard (that is where a checkpoint taken right
// at a shard's end stands). Returns 0 if the position does not exist in this data.
int dataloader_seek(DataLoader *loader, size_t epoch, size_t shard_pos, size_t sample_pos) {
    if (shard_pos >= loader->num_shards) { return 0; }
    loader->epoch = epoch;
    loader->shard_pos = shard_pos;
    dataloader_start_epoch(loader);
    dataloader_load_shard(loader);
    if (sample_pos > loader->num_samples) { return 0; }
    loader->sample_pos = sample_pos;
    return 1;
}

void dataloader_init(DataLoader *loader, const char *pattern, size_t B, size_t T, int vocab_size, int shuffle, uint64_t seed) {
    memset(loader, 0, sizeof(*loader));
    loader->B = B;
    loader->T = T;
    loader->vocab_size = vocab_size;
    loader->shuffle = shuffle;
    loader->seed = seed;
    int status = glob(pattern, 0, NULL, &loader->glob_result);
    if (status != 0 || loader->glob_result.gl_pathc == 0) {
        fprintf(stderr, "Error: no data file matches '%s'\n%s\n", pattern, SHARD_HINT);
        exit(EXIT_FAILURE);
    }
    loader->num_shards = loader->glob_result.gl_pathc;
    // Check every shard's header and size now, rather than fail hours into a run
    // (the token ids are checked as each shard is loaded). A batch may span
    // shards, so each shard needs one sequence (T+1 tokens) and all of them
    // together one batch.
    size_t total_samples = 0;
    for (size_t i = 0; i < loader->num_shards; i++) {
        const char *path = loader->glob_result.gl_pathv[i];
        FILE *fp = fopenCheck(path, "rb");
        size_t ntok = shard_read_header(fp, path);
        fcloseCheck(fp);
        if (ntok < T + 1) {
            fprintf(stderr, "Error: %s: has %zu tokens, fewer than the T+1 = %zu of one sequence (-t %zu)\n"
                    "HINT: lower -t, or leave this file out of the pattern\n", path, ntok, T + 1, T);
            exit(EXIT_FAILURE);
        }
        total_samples += (ntok - 1) / T;
    }
    if (total_samples < B) {
        fprintf(stderr, "Error: %s: the data holds %zu sequences of T+1 = %zu tokens, fewer than the B = %zu of one batch\n"
                "HINT: lower -b or -t, or use more data\n", pattern, total_samples, T + 1, B);
        exit(EXIT_FAILURE);
    }
    loader->num_samples_total = total_samples;
    loader->shard_order = (size_t *)mallocCheck(loader->num_shards * sizeof(size_t));
    loader->inputs = (int *)mallocCheck(B * T * sizeof(int));
    loader->targets = (int *)mallocCheck(B * T * sizeof(int));
    dataloader_seek(loader, 0, 0, 0);
}

// Fill inputs and targets with the next B sequences; move to the next shard
// (and the next epoch, reshuffled) when this one runs out.
void dataloader_next_batch(DataLoader *loader) {
    size_t T = loader->T;
    for (size_t b = 0; b < loader->B; b++) {
        if (loader->sample_pos >= loader->num_samples) {
            loader->shard_pos++;
            if (loader->shard_pos >= loader->num_shards) {
                loader->epoch++;
                loader->shard_pos = 0;
                dataloader_start_epoch(loader);
            }
            dataloader_load_shard(loader); // reshuffles its samples for the new epoch
            loader->sample_pos = 0;
        }
        const uint16_t *seq = loader->tokens + loader->sample_order[loader->sample_pos] * T;
        for (size_t t = 0; t < T; t++) {
            loader->inputs[b * T + t] = seq[t];
            loader->targets[b * T + t] = seq[t + 1];
        }
        loader->sample_pos++;
    }
}

void dataloader_free(DataLoader *loader) {
    globfree(&loader->glob_result);
    free(loader->shard_order);
    free(loader->tokens);
    free(loader->sample_order);
    free(loader->inputs);
    free(loader->targets);
}

// --- end shared-copy: gpt2-data-loader ---

// ----------------------------------------------------------------------------
// decoding tokens to text, for the samples

// --- begin shared-copy: gpt2-tokenizer ---

// llm.c's tokenizer.bin: a header of 256 int32 (magic 20240328, version 2, vocab
// size, end-of-text id), then per token a uint8 length and that many bytes.
#define TOKENIZER_MAGIC 20240328
typedef struct {
    int vocab_size;
    int eot_token;
    char **token_table; // NULL when no tokenizer could be loaded: we print ids instead
} Tokenizer;

// Load tokenizer.bin for a model with vocabulary size model_vocab. A missing
// file is not fatal (training works without it; samples are then printed as
// token ids), a broken one is.
void tokenizer_init(Tokenizer *tok, const char *path, int model_vocab) {
    tok->token_table = NULL;
    tok->vocab_size = 0;
    tok->eot_token = 50256 < model_vocab ? 50256 : model_vocab - 1;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "Warning: could not open tokenizer '%s' (%s); samples will be printed as token ids\n"
                "HINT: make data writes data/gpt2_tokenizer.bin\n", path, strerror(errno));
        return;
    }
    const char *hint = "HINT: make data writes data/gpt2_tokenizer.bin";
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a tokenizer header (256 x int32)\n%s\n", path, hint);
        exit(EXIT_FAILURE);
    }
    if (header[0] != TOKENIZER_MAGIC || header[1] != 2) {
        fprintf(stderr, "Error: %s: not a tokenizer file: expected magic %d version 2, found magic %d version %d\n%s\n",
                path, TOKENIZER_MAGIC, header[0], header[1], hint);
        exit(EXIT_FAILURE);
    }
    if (header[2] <= 0 || header[2] > (1 << 24) || header[3] < 0 || header[3] >= header[2] || header[3] >= model_vocab) {
        fprintf(stderr, "Error: %s: vocabulary size %d and end-of-text id %d do not fit a model with %d tokens\n%s\n",
                path, header[2], header[3], model_vocab, hint);
        exit(EXIT_FAILURE);
    }
    tok->vocab_size = header[2];
    tok->eot_token = header[3];
    tok->token_table = (char **)mallocCheck((size_t)tok->vocab_size * sizeof(char *));
    for (int i = 0; i < tok->vocab_size; i++) {
        unsigned char length = 0;
        tok->token_table[i] = (char *)mallocCheck(256);
        if (fread(&length, 1, 1, fp) != 1 || fread(tok->token_table[i], 1, length, fp) != length) {
            fprintf(stderr, "Error: %s: ends inside token %d of %d: truncated\n%s\n", path, i, tok->vocab_size, hint);
            exit(EXIT_FAILURE);
        }
        tok->token_table[i][length] = '\0';
    }
    fcloseCheck(fp);
}

// Print a token's bytes, but only if they are printable or whitespace: a single
// token can be part of a multi-byte UTF-8 character, which alone is garbage.
void tokenizer_print(const Tokenizer *tok, int token) {
    if (tok->token_table == NULL || token < 0 || token >= tok->vocab_size) {
        printf("<%d>", token);
        return;
    }
    const char *s = tok->token_table[token];
    if (s[0] != '\0' && s[1] == '\0' && !((unsigned char)s[0] >= 32 && (unsigned char)s[0] < 127) &&
        s[0] != '\n' && s[0] != '\t') {
        return; // a lone non-printable byte
    }
    fputs(s, stdout);
}

void tokenizer_free(Tokenizer *tok) {
    if (tok->token_table != NULL) {
        for (int i = 0; i < tok->vocab_size; i++) { free(tok->token_table[i]); }
        free(tok->token_table);
    }
}

// --- end shared-copy: gpt2-tokenizer ---

// ----------------------------------------------------------------------------
// sampling

// --- begin shared-copy: gpt2-sample-mult ---
// Draw an index from a probability vector with the uniform coin in [0, 1).
int sample_mult(const float *probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return n - 1; // rounding left the cdf a hair below 1
}
// --- end shared-copy: gpt2-sample-mult ---

// Generate up to gen_tokens tokens after <|endoftext|> and print them. Each new
// token re-runs the forward pass over the whole prefix with B = 1: wasteful
// (infer.c keeps a KV cache), but simple and cheap next to a training step.
void gpt2_sample(GPT2 *model, const Tokenizer *tok, size_t gen_tokens, uint64_t seed, int step) {
    size_t T = gen_tokens + 1 < (size_t)model->seq_len ? gen_tokens + 1 : (size_t)model->seq_len;
    int *tokens = (int *)mallocCheck(T * sizeof(int));
    uint64_t rng = rng_subkey(seed, STREAM_SAMPLING, (uint64_t)step);
    size_t Vp = model->config.padded_vocab_size;
    tokens[0] = tok->eot_token;
    printf("generating:\n---\n");
    for (size_t t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t);
        const float *probs = model->acts.probs + (t - 1) * Vp;
        tokens[t] = sample_mult(probs, model->config.vocab_size, rng_float(&rng));
        tokenizer_print(tok, tokens[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
}

// ----------------------------------------------------------------------------
// training state: everything a resumed run needs to continue bit for bit

// --- begin shared-copy: gpt2-train-state ---
// A checkpoint is two files in the output directory, written atomically:
//   model_<step>.bin  the parameters, in llm.c's model format (usable on its own)
//   state_<step>.bin  a header of 256 int32, then AdamW's m and v (fp32)
// The state is renamed into place last, so a state file implies its model file
// is complete. The random streams are functions of the seed and the position,
// so (seed, step, data position) is the whole random state.
#define STATE_MAGIC 20261129
#define STATE_VERSION 1
#define STATE_HINT "HINT: checkpoints are written by train_gpt2 -n <every> into its -o directory"

typedef struct {
    int step;                 // steps completed
    uint64_t seed;
    size_t B, T, total_batch_size;
    size_t num_parameters;
    size_t epoch, shard_pos, sample_pos; // training data loader position
} TrainState;

static void put64(int *header, int at, uint64_t value) {
    header[at] = (int)(uint32_t)(value & 0xffffffffu);
    header[at + 1] = (int)(uint32_t)(value >> 32);
}
static uint64_t get64(const int *header, int at) {
    return (uint64_t)(uint32_t)header[at] | ((uint64_t)(uint32_t)header[at + 1] << 32);
}
// --- end shared-copy: gpt2-train-state ---

// Every rank calls it; rank 0 writes. (Sharded, the ranks first send rank 0 their shards of
// the moments: the file holds the whole state, whatever the ranks that read it back.)
void save_checkpoint(const char *out_dir, const GPT2 *model, const TrainState *st) {
    float *moments[2] = {model->m_memory, model->v_memory}; // (what rank 0 writes)
#ifdef USE_MPI
    if (sharded() && model->m_memory != NULL) {
        int *counts = (int *)mallocCheck(2 * (size_t)ranks.world * sizeof(int)), *displs = counts + ranks.world;
        size_t start, count;
        shard_counts(model->num_parameters, counts, displs);
        rank_shard(model->num_parameters, ranks.rank, &start, &count);
        for (int k = 0; k < 2; k++) {
            moments[k] = ranks.rank == 0 ? (float *)mallocCheck(model->num_parameters * sizeof(float)) : NULL;
            MPI_Gatherv(k == 0 ? model->m_memory : model->v_memory, (int)count, MPI_FLOAT, moments[k], counts, displs, MPI_FLOAT, 0,
                        MPI_COMM_WORLD);
        }
        free(counts);
    }
#endif
    if (ranks.rank != 0) { return; }
    char model_path[4096], state_path[4096];
    format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", out_dir, st->step);
    format_path(state_path, sizeof(state_path), "%s/state_%08d.bin", out_dir, st->step);
    gpt2_save_checkpoint(model, model_path);
    int header[256] = {0};
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = st->step;
    put64(header, 4, st->seed);
    put64(header, 6, st->B);
    put64(header, 8, st->T);
    put64(header, 10, st->total_batch_size);
    put64(header, 12, st->num_parameters);
    put64(header, 14, st->epoch);
    put64(header, 16, st->shard_pos);
    put64(header, 18, st->sample_pos);
    header[20] = model->m_memory != NULL; // no moments before the first update
    size_t moment_bytes = model->m_memory != NULL ? model->num_parameters * sizeof(float) : 0;
    const void *bufs[3] = {header, moments[0], moments[1]};
    size_t sizes[3] = {sizeof(header), moment_bytes, moment_bytes};
    write_file_atomic(state_path, bufs, sizes, 3);
    printf("wrote checkpoint %s + %s\n", model_path, state_path);
    if (moments[0] != model->m_memory) { free(moments[0]); free(moments[1]); }
}

// Read a state file written by save_checkpoint into st and the model's moments.
void load_state(const char *path, GPT2 *model, TrainState *st) {
    FILE *fp = fopenCheck(path, "rb");
    int header[256];
    if (fread(header, sizeof(int), 256, fp) != 256) {
        fprintf(stderr, "Error: %s: too short for a training state header (256 x int32)\n%s\n", path, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (header[0] != STATE_MAGIC || header[1] != STATE_VERSION) {
        fprintf(stderr, "Error: %s: not a training state: expected magic %d version %d, found magic %d version %d\n%s\n",
                path, STATE_MAGIC, STATE_VERSION, header[0], header[1], STATE_HINT);
        exit(EXIT_FAILURE);
    }
    st->step = header[2];
    st->seed = get64(header, 4);
    st->B = get64(header, 6);
    st->T = get64(header, 8);
    st->total_batch_size = get64(header, 10);
    st->num_parameters = get64(header, 12);
    st->epoch = get64(header, 14);
    st->shard_pos = get64(header, 16);
    st->sample_pos = get64(header, 18);
    if (st->num_parameters != model->num_parameters) {
        fprintf(stderr, "Error: %s: holds optimizer state for %zu parameters, the model has %zu\n%s\n",
                path, st->num_parameters, model->num_parameters, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (st->step < 0 || (st->step > 0) != (header[20] != 0)) {
        fprintf(stderr, "Error: %s: corrupt header (step %d, moments %s)\n%s\n", path, st->step,
                header[20] ? "present" : "absent", STATE_HINT);
        exit(EXIT_FAILURE);
    }
    size_t n = header[20] ? model->num_parameters : 0;
    long bytes = file_size(fp, path);
    if ((size_t)bytes != 256 * sizeof(int) + 2 * n * sizeof(float)) {
        fprintf(stderr, "Error: %s: has %ld bytes, expected %zu: truncated or corrupt\n%s\n",
                path, bytes, 256 * sizeof(int) + 2 * n * sizeof(float), STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (n > 0) { // (sharded: this rank keeps its shard of each)
        size_t start = 0, count = n;
        if (sharded()) { rank_shard(n, ranks.rank, &start, &count); }
        model->m_memory = (float *)mallocCheck((count > 0 ? count : 1) * sizeof(float));
        model->v_memory = (float *)mallocCheck((count > 0 ? count : 1) * sizeof(float));
        for (int k = 0; k < 2; k++) {
            if (fseek(fp, (long)(256 * sizeof(int) + ((size_t)k * n + start) * sizeof(float)), SEEK_SET) != 0) {
                fprintf(stderr, "Error: %s: cannot seek in it\n", path);
                exit(EXIT_FAILURE);
            }
            freadCheck(k == 0 ? model->m_memory : model->v_memory, sizeof(float), count, fp);
        }
    }
    fcloseCheck(fp);
}

// --- begin shared-copy: gpt2-find-checkpoint ---
// The step of the newest complete checkpoint in out_dir, or -1 if none.
int find_latest_checkpoint(const char *out_dir) {
    char pattern[4096];
    format_path(pattern, sizeof(pattern), "%s/state_*.bin", out_dir);
    glob_t g;
    int latest = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char *name = strrchr(g.gl_pathv[i], '/') + 1;
            int step;
            char model_path[4096];
            if (sscanf(name, "state_%d.bin", &step) != 1) { continue; }
            format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", out_dir, step);
            if (access(model_path, R_OK) == 0 && step > latest) { latest = step; }
        }
        globfree(&g);
    }
    return latest;
}

// --- end shared-copy: gpt2-find-checkpoint ---

// ----------------------------------------------------------------------------
// main: argument parsing and the training loop

// Nothing to set up on the CPU (train_gpt2.cu finds the GPU and starts cuBLAS here).
void setup_hardware(void) {}

// FP16's dynamic loss scale lives in train_gpt2.cu; in fp32 no gradient
// overflows for want of range: never skip a step, nothing to add to its line.
int gpt2_loss_scale_update(GPT2 *model, float norm, char *note, size_t note_size) {
    (void)model; (void)norm; (void)note_size;
    note[0] = '\0';
    return 0;
}

// The model FLOPs utilisation of a step: train_gpt2.cu reports it against its
// GPU's peak; a CPU has no such figure here, so -1 (not printed).
double model_flops_utilization(const GPT2 *model, size_t tokens, size_t T, double seconds) {
    (void)model; (void)tokens; (void)T; (void)seconds;
    return -1.0;
}

// the hardware line at start-up
void print_hardware(void) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("hardware: ");
    if (ranks.world > 1) { printf("%d ranks (MPI), each: ", ranks.world); }
    printf("CPU, %d OpenMP threads, fp32%s\n", threads, flash_attention ? ", flash attention (-F 1)" : "");
    if (ranks.zero && ranks.world == 1) { printf("note: -Z 1 on one rank: no other rank to share the moments with\n"); }
}

// the memory of a run with batches of B x T: parameters, gradients, AdamW
// moments, activations and their gradients
void gpt2_print_memory(const GPT2 *model, size_t B, size_t T) {
    size_t grad_act_sizes[NUM_GRAD_ACT_TENSORS], n_grad_acts = 0;
    fill_in_grad_act_sizes(grad_act_sizes, model->config, B, T, model->flash);
    for (int i = 0; i < NUM_GRAD_ACT_TENSORS; i++) { n_grad_acts += grad_act_sizes[i]; }
    double MiB = 1024.0 * 1024.0;
    size_t first = 0, moments = model->num_parameters; // (ZeRO-1: this rank's shard)
    if (sharded()) { rank_shard(model->num_parameters, ranks.rank, &first, &moments); }
    printf("memory: parameters %.1f MiB (%zu) | gradients %.1f MiB | AdamW moments %.1f MiB%s | activations %.1f MiB"
           " + gradients %.1f MiB\n", model->num_parameters * 4 / MiB, model->num_parameters,
           model->num_parameters * 4 / MiB, 2 * moments * 4 / MiB, sharded() ? " (ZeRO-1: rank 0's shard)" : "",
           model->num_activations * 4 / MiB, n_grad_acts * 4 / MiB);
}

#ifndef TESTING

// --- begin shared-copy: gpt2-options ---
// Defaults: the embedded default run trains a 4-layer GPT-2 (d4, 16M parameters,
// most of them the embeddings) on tinyshakespeare in a few minutes on 2 cores.
typedef struct {
    const char *train_pattern, *val_pattern, *tokenizer_path, *model, *out_dir;
    int B, T, total_batch_size;
    float lr, final_lr_frac, weight_decay, grad_clip, beta1, beta2, eps;
    int warmup, max_steps, val_every, val_batches, sample_every, gen_tokens, checkpoint_every, resume, phase_every;
    uint64_t seed;
} Options;

// The trainer's own flags (train_gpt2.cu: recomputation, master weights; none on
// the CPU), defined after parse_int: their help lines, and their parser, which
// returns 0 for a flag it does not know.
static void print_device_usage(void);
static int parse_device_flag(const char *flag, const char *value);

static void print_usage(const Options *d) {
    printf("Usage: %s [options]\n", PROGRAM);
    printf("Options (default in brackets):\n");
    printf("  -i <pattern>  training token shards, a glob [%s]\n", d->train_pattern);
    printf("  -j <pattern>  validation token shards [%s]\n", d->val_pattern);
    printf("  -k <path>     tokenizer for printing samples [%s]\n", d->tokenizer_path);
    printf("  -e <model>    checkpoint file, or a new random model: d<N> (L=N, C=64N, NH=N) or gpt2-124M, -350M, -774M, -1558M [%s]\n",
           d->model);
    printf("  -o <dir>      output directory for the log and checkpoints, \"\" for none [%s]\n", d->out_dir);
    printf("  -b <int>      batch size B [%d]\n", d->B);
    printf("  -t <int>      sequence length T [%d]\n", d->T);
    printf("  -d <int>      total batch size in tokens; a multiple of B*T accumulates gradients, 0 = B*T [%d]\n", d->total_batch_size);
    printf("  -l <float>    peak learning rate [%g]\n", d->lr);
    printf("  -u <int>      warm-up steps [%d]\n", d->warmup);
    printf("  -q <float>    final learning rate as a fraction of the peak (cosine decay) [%g]\n", d->final_lr_frac);
    printf("  -c <float>    AdamW weight decay (on matrices only) [%g]\n", d->weight_decay);
    printf("  -z <float>    clip the global gradient norm to this, 0 = off [%g]\n", d->grad_clip);
    printf("  -x <int>      number of training steps [%d]\n", d->max_steps);
    printf("  -v <int>      validation loss every this many steps, 0 = off [%d]\n", d->val_every);
    printf("  -m <int>      validation batches [%d]\n", d->val_batches);
    printf("  -s <int>      print a sample every this many steps, 0 = off [%d]\n", d->sample_every);
    printf("  -g <int>      tokens per sample, at most T-1 [%d]\n", d->gen_tokens);
    printf("  -n <int>      checkpoint every this many steps and at the end, 0 = off [%d]\n", d->checkpoint_every);
    printf("  -y <0|1>      resume from the newest checkpoint in -o [%d]\n", d->resume);
    printf("  -p <int>      random seed (model init, data order, samples) [%llu]\n", (unsigned long long)d->seed);
    printf("  -P <int>      time the phases of every this many steps (data, forward, backward, norm, update), 0 = off [%d]\n",
           d->phase_every);
    print_device_usage();
    printf("  -h            this help\n");
}

// --- end shared-copy: gpt2-options ---

// The CPU trainer's own flags: -Z, ZeRO-1 over the ranks (see gpt2_sum_grads), and -F,
// flash attention (flash_attention_forward). train_gpt2.cu's (-r recomputation, -w master
// weights, -G budget, -M plan) have no meaning here: the CPU trainer keeps every activation
// and computes in fp32.
static void print_device_usage(void) {
    printf("  -Z <0|1>      ZeRO-1 across ranks (train_gpt2_mpi): each keeps the AdamW moments of its shard only [0]\n");
    printf("  -F <0|1>      flash attention: tiles and an online softmax, keeping no (B,NH,T,T) scores [%d]\n",
           flash_attention);
}
static int parse_device_flag(const char *flag, const char *value) {
    if (strcmp(flag, "-F") == 0) {
        flash_attention = (int)parse_int(flag, value, 0);
        if (flash_attention > 1) { usage_error("-F %s: 0 (attention keeps its T x T scores) or 1 (flash attention)", value); }
        return 1;
    }
    if (strcmp(flag, "-Z") == 0) {
        ranks.zero = (int)parse_int(flag, value, 0);
        if (ranks.zero > 1) { usage_error("-Z %s: ZeRO stage 0 or 1 (stages 2 and 3 are not here)", value); }
        return 1;
    }
    if (strcmp(flag, "-r") == 0 || strcmp(flag, "-w") == 0 || strcmp(flag, "-G") == 0 || strcmp(flag, "-M") == 0) {
        usage_error("flag %s is train_gpt2cu's (GPU memory and precision); the CPU trainer has no such choice"
                    " (the random seed is -p)", flag);
    }
    return 0;
}
// (nor has -M, train_gpt2.cu's plan of the GPU memory a run would take)
static void print_plan_and_exit(const Options *o) { (void)o; }

// --- begin shared-copy: gpt2-main ---

// The flags. The defaults are the embedded default run. lr 1e-3 with a short warm-up suits
// a 4-layer model (GPT-2 small trained at 6e-4); betas (0.9, 0.95) and weight decay 0.1
// are GPT-3's and nanoGPT's; B x T = 512 tokens keeps a step near half a second on 2
// cores, so the validation loss visibly falls within a minute.
static Options parse_args(int argc, char **argv) {
    Options o = {
        .train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin",
        .val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin",
        .tokenizer_path = "data/gpt2_tokenizer.bin",
        .model = "d4", .out_dir = "log_gpt2",
        .B = 8, .T = 64, .total_batch_size = 0,
        .lr = 1e-3f, .final_lr_frac = 0.1f, .weight_decay = 0.1f, .grad_clip = 1.0f,
        .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
        .warmup = 20, .max_steps = 300, .val_every = 50, .val_batches = 16, .sample_every = 100,
        .gen_tokens = 60, .checkpoint_every = 0, .resume = 0, .phase_every = 0, .seed = 1337};
    const Options defaults = o;
    // every flag is "-x value"; anything else is an error, never silently ignored
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { print_usage(&defaults); exit(0); }
        if (a[0] != '-' || a[1] == '\0') { usage_error("unknown argument '%s'", a); }
        if (i + 1 >= argc) { usage_error("flag %s needs a value", a); }
        const char *v = argv[++i];
        if (a[2] != '\0') { // (longer flags are the program's own: train_gpt2.cu's -pi, -pn, ...)
            if (!parse_device_flag(a, v)) { usage_error("unknown flag '%s'", a); }
            continue;
        }
        switch (a[1]) {
        case 'i': o.train_pattern = v; break;
        case 'j': o.val_pattern = v; break;
        case 'k': o.tokenizer_path = v; break;
        case 'e': o.model = v; break;
        case 'o': o.out_dir = v; break;
        case 'b': o.B = (int)parse_int(a, v, 1); break;
        case 't': o.T = (int)parse_int(a, v, 1); break;
        case 'd': o.total_batch_size = (int)parse_int(a, v, 0); break;
        case 'l': o.lr = parse_float(a, v); break;
        case 'u': o.warmup = (int)parse_int(a, v, 0); break;
        case 'q': o.final_lr_frac = parse_float(a, v); break;
        case 'c': o.weight_decay = parse_float(a, v); break;
        case 'z': o.grad_clip = parse_float(a, v); break;
        case 'x': o.max_steps = (int)parse_int(a, v, 1); break;
        case 'v': o.val_every = (int)parse_int(a, v, 0); break;
        case 'm': o.val_batches = (int)parse_int(a, v, 1); break;
        case 's': o.sample_every = (int)parse_int(a, v, 0); break;
        case 'g': o.gen_tokens = (int)parse_int(a, v, 1); break;
        case 'n': o.checkpoint_every = (int)parse_int(a, v, 0); break;
        case 'y': o.resume = (int)parse_int(a, v, 0); break;
        case 'p': o.seed = (uint64_t)parse_int(a, v, 0); break;
        case 'P': o.phase_every = (int)parse_int(a, v, 0); break;
        default:
            if (!parse_device_flag(a, v)) { usage_error("unknown flag '%s'", a); }
        }
    }
    return o;
}

// What main carries from one step of setting up to the next.
typedef struct {
    Options o;
    int accum_steps;       // forward/backward passes of B x T per update
    int have_out;          // an output directory (-o "" runs without log and checkpoints)
    int resume_step;       // the checkpoint this run resumes from, -1 for none
    char state_path[4096]; // its training state
    TrainState st;         // where the run starts: step 0, or the checkpoint's step and data position
    double start_time;     // when its first step began (wall_seconds), for the ETA
} Run;

// Batch sizes that fit, gradient accumulation, whether there is an output directory.
static void plan_run(Run *r) {
    Options *o = &r->o;
    // sizes that fit: B*T*Vp floats of logits must be addressable, and gemm takes ints
    size_t tokens_per_batch = (size_t)o->B * o->T;
    if (o->B > (1 << 16) || o->T > (1 << 20) || tokens_per_batch > (1 << 24)) {
        fprintf(stderr, "Error: -b %d x -t %d = %zu tokens per batch is more than this trainer handles (2^24)\n",
                o->B, o->T, tokens_per_batch);
        exit(EXIT_FAILURE);
    }
    if (o->total_batch_size == 0) { o->total_batch_size = (int)(tokens_per_batch * ranks.world); } // (one pass of every rank)
    if (o->total_batch_size % tokens_per_batch != 0) {
        fprintf(stderr, "Error: total batch size -d %d is not a multiple of B*T = %zu\n", o->total_batch_size, tokens_per_batch);
        exit(EXIT_FAILURE);
    }
    r->accum_steps = (int)(o->total_batch_size / tokens_per_batch);
    if (r->accum_steps % ranks.world != 0) { // (each rank's B x T are part of every pass: the data parallelism)
        fprintf(stderr, "Error: total batch size -d %d is not a multiple of B*T x %d ranks = %zu\n", o->total_batch_size,
                ranks.world, tokens_per_batch * ranks.world);
        exit(EXIT_FAILURE);
    }
    r->accum_steps /= ranks.world;
    r->have_out = o->out_dir[0] != '\0';
    if ((o->resume || o->checkpoint_every > 0) && !r->have_out) {
        fprintf(stderr, "Error: -n and -y need an output directory (-o)\n");
        exit(EXIT_FAILURE);
    }
}

// the output directory, made if it is missing
static void make_out_dir(const Run *r) {
    const Options *o = &r->o;
    if (r->have_out && ranks.rank == 0 && mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) { // (rank 0 writes for all)
        fprintf(stderr, "Error: could not create output directory %s: %s\n", o->out_dir, strerror(errno));
        exit(EXIT_FAILURE);
    }
}

// The model: resumed from the newest checkpoint (-y 1), loaded (-e file), or new (-e d<N>).
static void build_model(Run *r, GPT2 *model) {
    Options *o = &r->o;
    memset(&r->st, 0, sizeof(r->st));
    r->resume_step = o->resume ? find_latest_checkpoint(o->out_dir) : -1;
    if (o->resume && r->resume_step < 0) {
        fprintf(stderr, "Error: -y 1 but no checkpoint (state_*.bin with its model_*.bin) in %s\n%s\n", o->out_dir, STATE_HINT);
        exit(EXIT_FAILURE);
    }
    if (!o->resume && o->checkpoint_every > 0 && find_latest_checkpoint(o->out_dir) >= 0) {
        // a new run would write its checkpoints over these, step by step
        fprintf(stderr, "Error: %s already holds checkpoints (newest: step %d); not overwriting them\n"
                "HINT: resume them with -y 1, or pick another -o\n", o->out_dir, find_latest_checkpoint(o->out_dir));
        exit(EXIT_FAILURE);
    }
    if (r->resume_step >= 0) {
        // The model comes from the checkpoint (-e is not used). The flags that
        // decide what the next batch is must be the same as before (-t, -d, -p); the
        // others (-x to train longer, -l, -v, ...) may change, at the cost of
        // exactness. -b and the number of ranks may change too: they only split each
        // step's sequences (the same ones, in the same order) into other passes, which
        // round differently.
        static char model_path[4096];
        TrainState *st = &r->st;
        format_path(model_path, sizeof(model_path), "%s/model_%08d.bin", o->out_dir, r->resume_step);
        format_path(r->state_path, sizeof(r->state_path), "%s/state_%08d.bin", o->out_dir, r->resume_step);
        gpt2_build_from_checkpoint(model, model_path);
        load_state(r->state_path, model, st);
        if (st->T != (size_t)o->T || st->total_batch_size != (size_t)o->total_batch_size || st->seed != o->seed) {
            fprintf(stderr, "Error: %s was written with -b %zu -t %zu -d %zu -p %llu; resume with the same -t, -d and -p\n",
                    r->state_path, st->B, st->T, st->total_batch_size, (unsigned long long)st->seed);
            exit(EXIT_FAILURE);
        }
        if (st->step != r->resume_step || st->step >= o->max_steps) {
            fprintf(stderr, "Error: %s is the state after step %d%s\n", r->state_path, st->step,
                    st->step != r->resume_step ? ", not the step in its name: corrupt" : "; nothing left to do (raise -x to train longer)");
            exit(EXIT_FAILURE);
        }
        printf("resuming from %s at step %d\n", r->state_path, st->step);
        o->model = model_path;
    } else if (access(o->model, F_OK) == 0) {
        gpt2_build_from_checkpoint(model, o->model);
    } else {
        gpt2_build_from_descriptor(model, o->model, o->seed);
    }
    if (o->T > model->config.max_seq_len) {
        fprintf(stderr, "Error: -t %d is longer than the model's maximum sequence length %d\n", o->T, model->config.max_seq_len);
        exit(EXIT_FAILURE);
    }
}

// The data: training batches shuffled, validation always the same first batches (so
// validation losses of different steps and runs compare like with like; without
// validation, -v 0, the validation data is not read at all). With several ranks every
// rank reads the batches of all of them, B x ranks sequences, in the order one process
// would, and takes its own B (rank_batch): the data seen does not depend on the ranks.
static void open_data(const Run *r, const GPT2 *model, DataLoader *train, DataLoader *val) {
    const Options *o = &r->o;
    const TrainState *st = &r->st;
    int V = model->config.vocab_size;
    size_t B_all = (size_t)o->B * ranks.world;
    dataloader_init(train, o->train_pattern, B_all, o->T, V, 1, o->seed);
    if (o->val_every > 0) { dataloader_init(val, o->val_pattern, B_all, o->T, V, 0, o->seed); }
    if (r->resume_step >= 0 && !dataloader_seek(train, st->epoch, st->shard_pos, st->sample_pos)) {
        fprintf(stderr, "Error: %s: its data position (shard %zu, sequence %zu) does not exist in '%s'\n"
                "HINT: resume with the same -i data the run started with\n", r->state_path, st->shard_pos, st->sample_pos,
                o->train_pattern);
        exit(EXIT_FAILURE);
    }
    if (o->val_every > 0 && (size_t)o->val_batches * B_all > val->num_samples_total) {
        fprintf(stderr, "Error: -m %d validation batches of -b %d x %d ranks need %zu sequences, '%s' holds %zu\n"
                "HINT: lower -m\n", o->val_batches, o->B, ranks.world, (size_t)o->val_batches * B_all, o->val_pattern,
                val->num_samples_total);
        exit(EXIT_FAILURE);
    }
    if (o->sample_every > 0 && o->gen_tokens >= o->T) {
        fprintf(stderr, "Error: -g %d tokens per sample do not fit after the prompt token in -t %d\n"
                "HINT: -g at most %d\n", o->gen_tokens, o->T, o->T - 1);
        exit(EXIT_FAILURE);
    }
}

// this rank's B sequences of the batch the loader holds (inputs, or targets)
static const int *rank_batch(const int *all, const Options *o) { return all + (size_t)ranks.rank * o->B * o->T; }

// The mean loss over the first val_batches batches of the validation data (each rank its
// share of every batch, summed over the ranks).
static double validation_loss(GPT2 *model, DataLoader *val, const Options *o) {
    dataloader_seek(val, 0, 0, 0);
    double val_loss = 0.0;
    for (int i = 0; i < o->val_batches; i++) {
        dataloader_next_batch(val);
        gpt2_forward(model, rank_batch(val->inputs, o), rank_batch(val->targets, o), o->B, o->T);
        val_loss += model->mean_loss;
    }
    return ranks_sum(val_loss / ranks.world) / o->val_batches;
}

// One optimizer step (step counts from 0): accumulate gradients over accum_steps
// micro-batches, each backward scaled so that the sum is the gradient of the mean loss
// (over the ranks too: each rank's share, then summed over them); clip; update; print and
// log the step's line.
static void train_step(const Run *r, GPT2 *model, DataLoader *train, int step, FILE *logfile, Phases *ph) {
    const Options *o = &r->o;
    phases_begin(ph, step); // (first: on the GPU a timed step waits here for the one before)
    double t0 = wall_seconds();
    phases_enter(ph, PHASE_UPDATE);
    gpt2_zero_grad(model);
    double loss = 0.0;
    for (int micro = 0; micro < r->accum_steps; micro++) {
        phases_enter(ph, PHASE_DATA);
        dataloader_next_batch(train);
        phases_enter(ph, PHASE_FORWARD);
        gpt2_forward(model, rank_batch(train->inputs, o), rank_batch(train->targets, o), o->B, o->T);
        phases_enter(ph, PHASE_BACKWARD);
        sum_grads_in_backward = micro == r->accum_steps - 1; // (train_gpt2.cu: the last pass sums each layer's as it goes)
        gpt2_backward(model, 1.0f / ((float)r->accum_steps * ranks.world));
        sum_grads_in_backward = 0;
        loss += model->mean_loss;
    }
    gpt2_sum_grads(model); // (one rank: nothing to do)
    loss = ranks_sum(loss / ((double)r->accum_steps * ranks.world));
    phases_enter(ph, PHASE_NORM);
    float norm = gpt2_grad_norm(model);
    // (train_gpt2.cu in FP16: gradients that overflowed skip the update and
    // lower the loss scale; otherwise skip is 0 and note empty)
    char note[128];
    int skip = gpt2_loss_scale_update(model, norm, note, sizeof(note));
    if (!isfinite(loss) || (!isfinite(norm) && !skip)) {
        // nothing good can come of the next step: stop while the checkpoints are sound
        fprintf(stderr, "Error: step %d: loss %g, gradient norm %g: training diverged\n"
                "HINT: lower the learning rate (-l), or keep gradient clipping on (-z)\n", step + 1, loss, norm);
        exit(EXIT_FAILURE);
    }
    // clip as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above 1
    float grad_scale = 1.0f;
    if (o->grad_clip > 0.0f && o->grad_clip / (norm + 1e-6f) < 1.0f) { grad_scale = o->grad_clip / (norm + 1e-6f); }
    float lr = get_learning_rate(step, o->lr, o->warmup, o->max_steps, o->final_lr_frac);
    phases_enter(ph, PHASE_UPDATE);
    if (!skip) { gpt2_update(model, lr, o->beta1, o->beta2, o->eps, o->weight_decay, grad_scale, step + 1); }
    phases_end(ph); // (on the GPU this waits for the step's kernels: the step's time below includes them)
    double ms = (wall_seconds() - t0) * 1000.0;
    printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step + 1, o->max_steps,
           loss, lr, norm, ms, o->total_batch_size / (ms / 1000.0));
    double mfu = model_flops_utilization(model, (size_t)o->total_batch_size, (size_t)o->T, ms / 1000.0);
    if (mfu >= 0.0) { printf(" | MFU %.1f%%", 100.0 * mfu); }
    char eta[32]; // (at the pace of this run's steps so far, validation and samples included)
    format_eta(eta, sizeof(eta), wall_seconds() - r->start_time, step + 1 - r->st.step, o->max_steps - r->st.step);
    printf(" | %s%s", eta, note);
    phases_print(ph, ms);
    printf("\n");
    phases_print_host(ph);
    if (logfile != NULL) {
        // %.9g prints a float so that it reads back exactly: logs can be compared bit for bit
        fprintf(logfile, "s:%d trl:%.9g lr:%.9g norm:%.9g ms:%.1f", step + 1, (float)loss, lr, norm, ms);
        phases_log(ph, logfile);
        fprintf(logfile, "\n");
        fflush(logfile);
    }
}

int main(int argc, char **argv) {
    set_omp_wait_policy(argv); // first of all: it may start the program over
    ranks_init(&argc, &argv);
    Run r;
    memset(&r, 0, sizeof(r));
    r.o = parse_args(argc, argv);
    const Options *o = &r.o;
    plan_run(&r);
    print_plan_and_exit(o); // (train_gpt2.cu's -M: the memory the run would take, without a GPU)
    setup_hardware();
    make_out_dir(&r);
    GPT2 model;
    build_model(&r, &model);
    ranks_start_alike(&model, r.resume_step);
    GPT2Config c = model.config;
    DataLoader train_loader, val_loader;
    open_data(&r, &model, &train_loader, &val_loader);
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, o->tokenizer_path, c.vocab_size);

    // the run, and its memory: parameters, gradients, AdamW moments, activations
    gpt2_allocate_activations(&model, o->B, o->T);
    printf("model: %s | maxT %d | V %d (padded %d) | L %d | NH %d | C %d | seed %llu\n", o->model,
           c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels,
           (unsigned long long)o->seed);
    printf("data: %s (%zu shards) | val %s\n", o->train_pattern, train_loader.num_shards, o->val_every > 0 ? o->val_pattern : "none (-v 0)");
    printf("batch: B %d x T %d", o->B, o->T);
    if (ranks.world > 1) { printf(" x %d ranks", ranks.world); }
    printf(" x %d accumulation steps = %d tokens | steps %d | lr %g warm-up %d\n", r.accum_steps, o->total_batch_size,
           o->max_steps, o->lr, o->warmup);
    print_hardware();
    gpt2_print_memory(&model, o->B, o->T);
    FILE *logfile = NULL;
    if (r.have_out && ranks.rank == 0) {
        char path[4096];
        format_path(path, sizeof(path), "%s/main.log", o->out_dir);
        if (r.resume_step >= 0) { log_truncate_after(path, "s:%d", r.resume_step); }
        logfile = fopenCheck(path, r.resume_step >= 0 ? "a" : "w");
    }

    Phases phases;
    memset(&phases, 0, sizeof(phases));
    phases.every = o->phase_every; // (the GPU's events go on the default stream, where train_gpt2.cu queues its work)
    r.start_time = wall_seconds();
    for (int step = r.st.step; step <= o->max_steps; step++) {
        int last_step = step == o->max_steps;
        // A resumed run starts where the checkpoint was taken: after that step's
        // validation and sample, which the first run already did and logged.
        int resumed_here = r.resume_step >= 0 && step == r.st.step;
        if (o->val_every > 0 && (step % o->val_every == 0 || last_step) && !resumed_here) {
            double val_loss = validation_loss(&model, &val_loader, o);
            printf("step %d | val loss %.6f\n", step, val_loss);
            if (logfile != NULL) { fprintf(logfile, "s:%d tel:%.9g\n", step, val_loss); fflush(logfile); }
        }
        if (o->sample_every > 0 && (step % o->sample_every == 0 || last_step) && !resumed_here && ranks.rank == 0) {
            gpt2_sample(&model, &tokenizer, (size_t)o->gen_tokens, o->seed, step);
        }
        // a checkpoint after `step` steps (not at the step we resumed from: it exists)
        if (o->checkpoint_every > 0 && step > r.st.step && (step % o->checkpoint_every == 0 || last_step)) { // (rank 0 writes)
            TrainState now = {step, o->seed, (size_t)o->B, (size_t)o->T, (size_t)o->total_batch_size,
                              model.num_parameters, train_loader.epoch, train_loader.shard_pos, train_loader.sample_pos};
            save_checkpoint(o->out_dir, &model, &now);
        }
        if (last_step) { break; }
        train_step(&r, &model, &train_loader, step, logfile, &phases);
    }

    if (logfile != NULL) { fcloseCheck(logfile); }
    dataloader_free(&train_loader);
    if (o->val_every > 0) { dataloader_free(&val_loader); }
    tokenizer_free(&tokenizer);
    gpt2_free(&model);
    ranks_finalize();
    return 0;
}
// --- end shared-copy: gpt2-main ---
#endif
