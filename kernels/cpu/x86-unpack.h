/* x86-unpack — quant block unpackers shared by the x86 matmul kernels (x86-kernels.h) and
 * attention over a quantized KV cache (x86-attn.c). Include inside a target region with
 * AVX2 at least, after <immintrin.h> (see x86-avx2.c). */
#pragma once

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* 16 bytes of nibbles -> 32 bytes: low nibbles (values 0..15) then high (16..31). */
static inline __attribute__((always_inline)) __m256i nibbles_unpack(const uint8_t *qs) {
    /* the 16 bytes in both halves (a load, no shuffle), the upper half shifted by 4: 3
     * operations where two shifts/masks and an insert took 5 */
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    b = _mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* The 32 fifth bits of a q5 block (bit j of the little-endian u32 = value j) as bytes
 * 0x10 / 0x00. */
static inline __attribute__((always_inline)) __m256i qh_unpack(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, sizeof(bits));
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                             0x0101010101010101ll, 0x0000000000000000ll);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The 12 bytes of 6-bit scales and mins of a q4_K / q5_K super-block (ggml's packing:
 * bytes 0-3 scales 0-3 and the top bits of 4-7, bytes 4-7 mins 0-3 and theirs, bytes
 * 8-11 the low nibbles of scales and mins 4-7) as 8 floats each. */
static inline __attribute__((always_inline)) void kq_scales_mins(const uint8_t *p, __m256 *scales,
                                                                  __m256 *mins) {
    uint32_t a, b, c;
    memcpy(&a, p, 4);
    memcpy(&b, p + 4, 4);
    memcpy(&c, p + 8, 4);
    uint64_t sc = (uint64_t)(a & 0x3f3f3f3fu) |
                  (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4) << 32;
    uint64_t mn = (uint64_t)(b & 0x3f3f3f3fu) |
                  (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4) << 32;
    *scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    *mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn)));
}
