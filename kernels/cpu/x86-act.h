/* Part of x86-kernels.h: the activation quantizers, bit-identical to the reference: the
 * q8_0 / q8_1 blocks of kernels/types.h (from_f32) and the planar rows these levels' bodies
 * read (act_from_f32, the layout at the top of x86-kernels.h), and f16. */

/* round(v) with ties away from zero, as roundf: round to nearest even, then fix exact
 * ties (v - trunc(v) == ±0.5) to trunc(v) ± 1. */
X86_INLINE __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 tie = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_EQ_OQ);
    __m256 away = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f)));
    return _mm256_blendv_ps(r, away, tie);
}

/* One block of 32: writes d (fp16) and 32 int8 at qs; returns Σq and the unrounded d.
 * Same arithmetic as the reference: d = amax / 127, id = 1 / d, q = round(x · id). */
X86_INLINE int q8_block(const float *x, kern_f16 *ret_d, int8_t *qs, float *ret_df, int *ret_lo) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    *ret_d = (kern_f16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    *ret_df = d;
    __m256 idv = _mm256_set1_ps(id);
    __m256i i[4];
    for (int k = 0; k < 4; k++) i[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], idv)));
    __m256i lo = _mm256_add_epi32(i[0], i[1]), s = _mm256_add_epi32(lo, _mm256_add_epi32(i[2], i[3]));
    if (ret_lo) { /* Σq of values 0..15 */
        __m128i l4 = _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
        l4 = _mm_add_epi32(l4, _mm_shuffle_epi32(l4, 0x4e));
        l4 = _mm_add_epi32(l4, _mm_shuffle_epi32(l4, 0xb1));
        *ret_lo = _mm_cvtsi128_si32(l4);
    }
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    return _mm_cvtsi128_si32(s4);
}

static void X86_SFX(quant_q8_0)(void *dst, const float *src, int64_t n) {
    struct block_q8_0 *b = dst;
    float d;
    for (int64_t i = 0; i < n / 32; i++) q8_block(src + 32 * i, &b[i].d, b[i].qs, &d, NULL);
}

static void X86_SFX(quant_q8_1)(void *dst, const float *src, int64_t n) {
    struct block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        int sum = q8_block(src + 32 * i, &b[i].d, b[i].qs, &d, NULL);
        b[i].s = (kern_f16)_cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* Planar activation rows (see the top of this file): qs[nb][32] | d[nb] | s[nb]. */
static size_t X86_SFX(act_row_size)(enum kern_type vdt, int64_t n) {
    return (size_t)(n / 32) * KERN_ACT_BLOCK_BYTES;
}

X86_INLINE void act_q8(void *dst, const float *src, int64_t n, bool with_s) {
    int64_t nb = n / 32;
    uint8_t *qs = dst;
    float *d = (float *)(qs + 32 * nb), *s = d + nb;
    for (int64_t i = 0; i < nb; i++) {
        kern_f16 dh;
        float df;
        int lo;
        int sum = q8_block(src + 32 * i, &dh, (int8_t *)qs + 32 * i, &df, &lo);
        d[i] = _cvtsh_ss(dh);
        if (with_s) {
            s[i] = _cvtsh_ss(_cvtss_sh((float)sum * df, _MM_FROUND_TO_NEAREST_INT));
        } else { /* the half sums, |Σ| <= 16·127 (ipack_body's U-mode correction) */
            uint32_t hs = (uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)(sum - lo) << 16;
            memcpy(&s[i], &hs, sizeof(hs));
        }
    }
}
static void X86_SFX(act_q8_0)(void *dst, const float *src, int64_t n) { act_q8(dst, src, n, false); }
static void X86_SFX(act_q8_1)(void *dst, const float *src, int64_t n) { act_q8(dst, src, n, true); }

static void X86_SFX(quant_f16)(void *dst, const float *src, int64_t n) {
    kern_f16 *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = kern_fp32_to_fp16(src[i]);
}
