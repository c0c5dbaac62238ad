// lib/rand.h: the one random number generator every program uses (STYLE.md section 6:
// our own, a fixed default seed, never rand() or the clock), and the permutations that
// shuffle the data with it.
#ifndef LIB_RAND_H
#define LIB_RAND_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

// One small generator for everything random: SplitMix64 (Steele, Lea, Flood 2014).
// Used two ways. As a hash of a counter it gives random numbers that depend only
// on (seed, stream, index): weight init can run in any order, in parallel, and
// numpy can reproduce it vectorised (dev/reference/gpt2_reference.py does). As a
// sequential generator (state += golden ratio) it shuffles and samples.
static inline uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// The key of one random stream (each program lists its streams; in train_gpt2.c
// 0..15 are the parameter tensors, which the reference reproduces). A stream can
// be split further by an index (an epoch, a step) with rng_subkey.
static inline uint64_t rng_key(uint64_t seed, uint64_t stream) { return splitmix64((seed << 32) ^ stream); }
static inline uint64_t rng_subkey(uint64_t seed, uint64_t stream, uint64_t index) { return splitmix64(rng_key(seed, stream) ^ index); }
// uniform in [0, 1) with 24 random bits, so the value is exact in a float
static inline double rng_uniform_at(uint64_t key, uint64_t i) { return (double)(splitmix64(key + i) >> 40) * 0x1p-24; }
// standard normal by Box-Muller, from the uniforms at 2i and 2i+1
static inline double rng_normal_at(uint64_t key, uint64_t i) {
    double u1 = rng_uniform_at(key, 2 * i), u2 = rng_uniform_at(key, 2 * i + 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}
// sequential use: *state is the counter
static inline uint64_t rng_next(uint64_t *state) { return splitmix64((*state)++); }
static inline float rng_float(uint64_t *state) { return (float)((rng_next(state) >> 40) * 0x1p-24); }

// a random permutation of 0..n-1 (Fisher-Yates) from its own random stream
static inline void random_permutation(size_t *order, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++) { order[i] = i; }
    uint64_t state = key;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rng_next(&state) % i);
        size_t tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
}

#endif // LIB_RAND_H
