// Under emulation (dev/emu/emu_build.sh puts this folder first on the include
// path) IEEE half precision is this file: a 16-bit storage type (1 sign, 5
// exponent, 10 mantissa bits; largest finite 65504, subnormals down to 2^-24)
// that converts to and from float as CUDA's __float2half does: round to nearest,
// ties to even; too large becomes infinity; every NaN becomes CUDA's canonical 0x7FFF
// (cuda_fp16.hpp's host code, and what the GPU's conversion gives).
#ifndef CUDA_FP16_EMU_H
#define CUDA_FP16_EMU_H
#include "../cuda_emu.h"

namespace emu {
inline uint16_t float_to_half_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return 0x7fffu; }          // NaN: the canonical one
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }  // 65520 and up (and inf) round to inf
    if (a >= 0x38800000u) {                            // a normal half: 2^-14 and up
        a += 0xfffu + ((a >> 13) & 1u);                // round the 13 dropped bits, ties to even
        return sign | (uint16_t)((a - 0x38000000u) >> 13); // exponent bias 127 -> 15
    }
    float x;                                           // a subnormal half: a multiple of 2^-24
    memcpy(&x, &a, sizeof(x));
    return sign | (uint16_t)nearbyintf(x * 16777216.0f); // exact scaling, then ties-to-even rounding
}
inline float half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (exp == 0) { // zero or subnormal: mant * 2^-24
        float x = (float)mant * 0x1p-24f;
        return sign ? -x : x;
    }
    u = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}
}

struct __half {
    uint16_t x;
    __half() = default;
    __half(float f) : x(emu::float_to_half_bits(f)) {}
    operator float() const { return emu::half_bits_to_float(x); }
};
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return (float)h; }
#endif
