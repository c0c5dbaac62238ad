// Under emulation (dev/emu/emu_build.sh puts this folder first on the include
// path) bfloat16 is this file: a 16-bit storage type that converts to and from
// float as CUDA's does (round to nearest, ties to even; every NaN becomes the canonical
// 0x7FFF, as in cuda_bf16.hpp and on the GPU).
#ifndef CUDA_BF16_EMU_H
#define CUDA_BF16_EMU_H
#include "../cuda_emu.h"

namespace emu {
inline uint16_t float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) { return 0x7fffu; } // NaN: the canonical one
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
}

struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(emu::float_to_bf16_bits(f)) {}
    operator float() const { return emu::bf16_bits_to_float(x); }
};
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
#endif
