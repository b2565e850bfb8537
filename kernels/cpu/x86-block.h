/* Part of x86-kernels.h: the unpackers. One weight block of any kind (a k-quant: one
 * 32-value sub-block of its super-block) as 32 codes in value order in a 256-bit register,
 * with its scales and offsets (U or S mode, see the top of x86-kernels.h). The decode
 * bodies unpack as they go with these; the prefill packs unpack once per tile. */

/* nibbles_unpack, qh_unpack */
#include "kernels/cpu/x86-unpack.h"

/* 32 nibbles (value order) through the iq4_nl table: signed values (S) or +128 (U). */
X86_INLINE __m256i iq4_lookup(__m256i nib, const bool sgn) {
    const __m128i tbl =
        sgn ? _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
            : _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153,
                            (char)166, (char)181, (char)197, (char)217, (char)241);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tbl), nib);
}

/* 32 nibbles (value order) through the mxfp4 table + 12 (U mode, wk_off): 0..24. */
X86_INLINE __m256i mxfp4_lookup(__m256i nib) {
    const __m128i tbl = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tbl), nib);
}

/* Unpacks weight block wb of kind K into 32 codes (U) or signed values (S) in value
 * order, its d and its m. */
X86_INLINE __m256i wblock_unpack(const uint8_t *wb, const int K, float *ret_d, float *ret_m) {
    *ret_d = K == WK_MXFP4 ? e8m0_half(wb[0]) : f16_load(wb);
    *ret_m = wk_has_m(K) ? f16_load(wb + 2) : 0.0f;
    switch (K) {
    case WK_Q8_0: {
        __m256i v = _mm256_loadu_si256((const __m256i *)(wb + 2));
        return wk_signed(K) ? v : _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
    }
    case WK_Q4_0: return nibbles_unpack(wb + 2);
    case WK_Q4_1: return nibbles_unpack(wb + 4);
    case WK_Q5_0: return _mm256_or_si256(nibbles_unpack(wb + 6), qh_unpack(wb + 2));
    case WK_Q5_1: return _mm256_or_si256(nibbles_unpack(wb + 8), qh_unpack(wb + 4));
    case WK_MXFP4: return mxfp4_lookup(nibbles_unpack(wb + 1));
    default: /* WK_IQ4_NL: codes through the 16-entry table (+128 in U mode) */
        return iq4_lookup(nibbles_unpack(wb + 2), wk_signed(K));
    }
}

/* 6-bit scale and min of sub-block j of q4_K / q5_K (12 packed bytes, see ref/quant.c). */
X86_INLINE void k4_scale_min(int j, const uint8_t *s, int *ret_sc, int *ret_m) {
    if (j < 4) {
        *ret_sc = s[j] & 63;
        *ret_m = s[j + 4] & 63;
    } else {
        *ret_sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *ret_m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* q3_K's 6-bit scale g (0..15) minus 32 (see kernels/types.h). */
X86_INLINE int k3_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 0x0f : s[g - 8] >> 4;
    return (lo | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}

/* Sub-block j (0..7) of k-quant super-block sb: codes in value order, the scales of its
 * two halves and its offset m (x = da|db · q + m); q2_K: the offsets of its halves
 * (m, mb), others: mb = m. */
X86_INLINE __m256i kblock_unpack(const uint8_t *sb, int j, const int K, float *ret_da, float *ret_db,
                                 float *ret_m, float *ret_mb) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    if (K == WK_Q2_K || K == WK_Q3_K) { /* 2-bit planes: sub-block j = plane j%4 of half j/4 */
        const uint8_t *qs = sb + (K == WK_Q2_K ? 16 : 32) + 32 * (j / 4);
        __m256i q = _mm256_loadu_si256((const __m256i *)qs);
        q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (j % 4))), _mm256_set1_epi8(3));
        if (K == WK_Q2_K) { /* scales[16] | qs[64] | d | dmin */
            float d = f16_load(sb + 80), dmin = f16_load(sb + 82);
            int s0 = sb[2 * j], s1 = sb[2 * j + 1];
            *ret_da = d * (float)(s0 & 0x0f);
            *ret_db = d * (float)(s1 & 0x0f);
            *ret_m = -dmin * (float)(s0 >> 4);
            *ret_mb = -dmin * (float)(s1 >> 4);
            return q;
        }
        /* q3_K: hmask[32] | qs[64] | scales[12] | d; u = low 2 bits + 4·hbit = code + 4 */
        float d = f16_load(sb + 108);
        __m256i hb = _mm256_loadu_si256((const __m256i *)sb);
        hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
        *ret_da = d * (float)k3_scale(sb + 96, 2 * j);
        *ret_db = d * (float)k3_scale(sb + 96, 2 * j + 1);
        *ret_m = *ret_mb = 0.0f;
        return _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
    }
    if (K == WK_IQ4_XS) { /* d | scales_h | scales_l[4] | qs[128] */
        uint16_t sh;
        memcpy(&sh, sb + 2, sizeof(sh));
        int ls = ((sb[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | ((sh >> (2 * j)) & 3) << 4;
        *ret_da = *ret_db = f16_load(sb) * (float)(ls - 32);
        *ret_m = *ret_mb = 0.0f;
        return iq4_lookup(nibbles_unpack(sb + 8 + 16 * j), wk_signed(K));
    }
    if (K == WK_Q6_K) { /* ql[128] | qh[64] | scales[16] | d */
        float d = f16_load(sb + 208);
        int h = j / 4, k = j % 4;
        __m256i q = _mm256_loadu_si256((const __m256i *)(sb + 64 * h + 32 * (k % 2)));
        q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (k / 2))), low4);
        __m256i hb = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
        hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
        const int8_t *sc = (const int8_t *)(sb + 192) + 8 * h + 2 * k;
        *ret_da = d * (float)sc[0];
        *ret_db = d * (float)sc[1];
        *ret_m = *ret_mb = 0.0f;
        return _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
    }
    /* q4_K: d | dmin | scales[12] | qs[128];  q5_K: ... | qh[32] | qs[128] */
    int sc, mn;
    k4_scale_min(j, sb + 4, &sc, &mn);
    *ret_da = *ret_db = f16_load(sb) * (float)sc;
    *ret_m = *ret_mb = -f16_load(sb + 2) * (float)mn;
    const uint8_t *qs = sb + (K == WK_Q4_K ? 16 : 48) + 32 * (j / 2);
    __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    q = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (j % 2))), low4);
    if (K == WK_Q5_K) {
        __m256i hb = _mm256_loadu_si256((const __m256i *)(sb + 16));
        hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
        q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
    }
    return q;
}

/* Block j of a weight row, any kind. */
X86_INLINE __m256i block_unpack(const uint8_t *row, int64_t j, const int K, float *ret_da,
                                float *ret_db, float *ret_m, float *ret_mb) {
    if (wk_is_k(K))
        return kblock_unpack(row + (j / 8) * wk_bytes(K), (int)(j % 8), K, ret_da, ret_db, ret_m, ret_mb);
    __m256i u = wblock_unpack(row + j * wk_bytes(K), K, ret_da, ret_m);
    *ret_db = *ret_da;
    *ret_mb = *ret_m;
    return u;
}
