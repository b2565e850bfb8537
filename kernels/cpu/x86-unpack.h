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
