/* 16 rows of rows8 weights (two groups side by side) in 512-bit registers: the bodies of
 * the 512-bit level's tile16 entries for quantized types. Included by x86-kernels.h inside
 * its 512-bit region, after the 8-row bodies (r8_body), whose helpers and layouts these
 * share. */

/* Group a (rows 0..7) in lanes 0..7, group b (rows 8..15) in lanes 8..15: every op of the
 * 8-row bodies then serves 16 rows, and a token's codes are broadcast once for both.
 * Group b starts a whole group (8 rows) after group a (tile16 in kernels/matmul.h). */

/* 32 bytes at a into lanes 0..7, 32 at b into lanes 8..15 */
X86_INLINE __m512i ld2x32(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}
/* 16 bytes at a into the low half, 16 at b into the high half */
X86_INLINE __m256i ld2x16(const uint8_t *a, const uint8_t *b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}
X86_INLINE __m512i bcast4x16(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* k16_codes for both groups */
X86_INLINE __m512i k16_codes16(const uint8_t *a, const uint8_t *b, int j, int c, const int K) {
    const int h = j / 4, k = j % 4;
    if (K == WK_Q6_K) {
        const size_t lo = 144 + 32 * (16 * h + 8 * (k % 2) + c), ho = 1168 + 32 * (8 * h + c);
        __m512i l = ld2x32(a + lo, b + lo), hb = ld2x32(a + ho, b + ho);
        if (k >= 2) l = _mm512_srli_epi16(l, 4);
        hb = k == 0 ? _mm512_slli_epi16(hb, 4) : k == 1 ? _mm512_slli_epi16(hb, 2) : k == 3 ? _mm512_srli_epi16(hb, 2) : hb;
        return _mm512_or_si512(_mm512_and_si512(l, _mm512_set1_epi8(0x0f)), _mm512_and_si512(hb, _mm512_set1_epi8(0x30)));
    }
    const size_t qo = (K == WK_Q3_K ? 368 : 160) + 32 * (8 * h + c);
    __m512i q = ld2x32(a + qo, b + qo);
    if (k) q = _mm512_srli_epi16(q, 2 * k);
    q = _mm512_and_si512(q, _mm512_set1_epi8(3));
    if (K == WK_Q3_K) {
        __m512i hb = ld2x32(a + 112 + 32 * c, b + 112 + 32 * c);
        hb = j < 2 ? _mm512_slli_epi16(hb, 2 - j) : j > 2 ? _mm512_srli_epi16(hb, j - 2) : hb;
        q = _mm512_or_si512(q, _mm512_and_si512(hb, _mm512_set1_epi8(4)));
    }
    return q;
}

/* k16_scales for both groups */
X86_INLINE __m512i k16_scales16(const uint8_t *a, const uint8_t *b, int j, __m512i *mp, const int K) {
    if (K == WK_Q6_K) return _mm512_cvtepi8_epi16(ld2x16(a + 16 + 16 * j, b + 16 + 16 * j));
    if (K == WK_Q2_K) {
        __m512i raw = _mm512_cvtepu8_epi16(ld2x16(a + 32 + 16 * j, b + 32 + 16 * j));
        *mp = _mm512_srli_epi16(raw, 4);
        return _mm512_and_si512(raw, _mm512_set1_epi16(0x0f));
    }
    const int o = 8 * (2 * (j % 2));
    const size_t lo_off = 16 + 32 * ((j % 4) / 2);
    __m512i lo = ld2x32(a + lo_off, b + lo_off), hi = ld2x32(a + 80, b + 80);
    lo = _mm512_and_si512(_mm512_srli_epi32(lo, o + 4 * (j / 4)), _mm512_set1_epi32(0x0f0f));
    hi = _mm512_and_si512(_mm512_srli_epi32(hi, o + 2 * (j / 2)), _mm512_set1_epi32(0x0303));
    const __m512i widen = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1));
    __m512i sc = _mm512_shuffle_epi8(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), widen);
    return _mm512_sub_epi16(sc, _mm512_set1_epi16(32));
}

/* r8_k16_body over 16 rows: groups ga and gb, y (+)= the 16 rows' dots of NT tokens */
X86_INLINE void r16_k16_body(float *y, int64_t ys, const uint8_t *ga, const uint8_t *gb, const uint8_t *x,
                             size_t xst, int64_t nb, const int NT, const int K) {
    const size_t sbs = wk_r8_bytes(K);
    const __m512i pick[2] = {_mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13)),
                             _mm512_broadcast_i32x4(_mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15))};
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *a = ga + sbs * sbi, *b = gb + sbs * sbi;
        __m512 sacc[4], macc[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) sacc[t] = macc[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            for (size_t o = 0; o < sbs / 8; o += 64) {
                _mm_prefetch((const char *)a + 1200 + sbs / 8 * j + o, _MM_HINT_T0);
                _mm_prefetch((const char *)b + 1200 + sbs / 8 * j + o, _MM_HINT_T0);
            }
            __m512i mp = _mm512_setzero_si512();
            const __m512i sp = k16_scales16(a, b, j, &mp, K);
            __m512i is[4];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                const __m512i sc = _mm512_shuffle_epi8(sp, pick[hf]);
                __m512i u[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) u[c] = k16_codes16(a, b, j, 4 * hf + c, K);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j) + 16 * hf;
                    __m512i p0 = _mm512_add_epi16(_mm512_maddubs_epi16(u[0], bcast4x16(xq)),
                                                  _mm512_maddubs_epi16(u[1], bcast4x16(xq + 4)));
                    __m512i p1 = _mm512_add_epi16(_mm512_maddubs_epi16(u[2], bcast4x16(xq + 8)),
                                                  _mm512_maddubs_epi16(u[3], bcast4x16(xq + 12)));
                    is[t] = K == WK_Q6_K ? _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(is[t], p0, sc), p1, sc)
                                         : _mm512_dpwssd_epi32(is[t], _mm512_add_epi16(p0, p1), sc);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                const __m512i hs = bcast4x16((const uint8_t *)(xd + nb)); /* the half sums */
                const __m512 dx = _mm512_set1_ps(*xd);
                if (K == WK_Q2_K) macc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(mp, hs)), dx, macc[t]);
                else is[t] = _mm512_sub_epi32(is[t], _mm512_slli_epi32(_mm512_madd_epi16(sp, hs), K == WK_Q6_K ? 5 : 2));
                sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), dx, sacc[t]);
            }
        }
        const __m512 dv = _mm512_cvtph_ps(ld2x16(a, b));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm512_fmadd_ps(sacc[t], dv, acc[t]);
            if (K == WK_Q2_K) acc[t] = _mm512_fnmadd_ps(macc[t], _mm512_cvtph_ps(ld2x16(a + 16, b + 16)), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* r8q_qh_or over 16 rows: lanes 0..7 and 8..15 of qh are the two groups' qh words */
X86_INLINE __m512i r16q_qh_or(__m512i u, __m512i qh, int k, int hf) {
    const __m512i v = _mm512_shuffle_epi8(qh, _mm512_broadcast_i64x4(r8q_byte(2 * hf + k / 2)));
    const __m512i bits = _mm512_set1_epi32(k % 2 ? (int)0x80402010u : 0x08040201);
    return _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(v, bits), u, _mm512_set1_epi8(0x10));
}

/* r8_q32_body (q4_0, iq4_nl, q4_1, q5_0, q5_1) over 16 rows (VNNI: the 512-bit level has it) */
X86_INLINE void r16_q32_body(float *y, int64_t ys, const uint8_t *ga, const uint8_t *gb, const uint8_t *x,
                             size_t xst, int64_t nb, const int NT, const int K) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i utbl = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                                              (char)153, (char)166, (char)181, (char)197, (char)217,
                                                              (char)241));
    (void)utbl; /* iq4_nl's */
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *a = ga + wk_r8_bytes(K) * j, *b = gb + wk_r8_bytes(K) * j;
        _mm_prefetch((const char *)a + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)a + 2048 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 64, _MM_HINT_T0);
        if (wk_r8_bytes(K) > 144) {
            _mm_prefetch((const char *)a + 2048 + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)b + 2048 + 128, _MM_HINT_T0);
        }
        const size_t qs = (size_t)r8q_qs(K), qho = (size_t)r8q_qh(K);
        const __m512i qh = wk_has_qh(K) ? ld2x32(a + qho, b + qho) : _mm512_setzero_si512();
        __m512i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i c = ld2x32(a + qs + 32 * k, b + qs + 32 * k);
            lo[k] = _mm512_and_si512(c, m4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
            if (K == WK_IQ4_NL) {
                lo[k] = _mm512_shuffle_epi8(utbl, lo[k]);
                hi[k] = _mm512_shuffle_epi8(utbl, hi[k]);
            }
            if (wk_has_qh(K)) {
                lo[k] = r16q_qh_or(lo[k], qh, k, 0);
                hi[k] = r16q_qh_or(hi[k], qh, k, 1);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld2x16(a, b));
        const __m512 mw = wk_has_m(K) ? _mm512_cvtph_ps(ld2x16(a + 16, b + 16)) : _mm512_setzero_ps();
        (void)mw;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst, *xq = xr + 32 * j;
            const float *xd = (const float *)(xr + 32 * nb);
            const int32_t corr = wk_off(K) ? wk_off(K) * act_q8_0_sum(xr, nb, j) : 0;
            __m512i s = _mm512_set1_epi32(-corr), s2 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s = _mm512_dpbusd_epi32(s, lo[k], bcast4x16(xq + 4 * k));
                s2 = _mm512_dpbusd_epi32(s2, hi[k], bcast4x16(xq + 16 + 4 * k));
            }
            s = _mm512_add_epi32(s, s2);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[j])), acc[t]);
            if (wk_has_m(K)) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xd[nb + j]), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* r8_mxfp4_body over 16 rows (VNNI) */
X86_INLINE void r16_mxfp4_body(float *y, int64_t ys, const uint8_t *ga, const uint8_t *gb, const uint8_t *x,
                               size_t xst, int64_t nb, const int NT) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i utbl = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24,
                                                              12, 11, 10, 9, 8, 6, 4, 0));
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *a = ga + wk_r8_bytes(WK_MXFP4) * j, *b = gb + wk_r8_bytes(WK_MXFP4) * j;
        _mm_prefetch((const char *)a + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)a + 2048 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 64, _MM_HINT_T0);
        __m512i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i c = ld2x32(a + 8 + 32 * k, b + 8 + 32 * k);
            lo[k] = _mm512_shuffle_epi8(utbl, _mm512_and_si512(c, m4));
            hi[k] = _mm512_shuffle_epi8(utbl, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
        }
        /* the 16 rows' E8M0 bytes in 32-bit lanes, then e8m0_half8's blend at 512 bits */
        const __m512i e = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a),
                                                                 _mm_loadl_epi64((const __m128i *)b)));
        const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        const __m512 dw = _mm512_castsi512_ps(
            _mm512_mask_mov_epi32(sub, _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), norm));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst, *xq = xr + 32 * j;
            const float *xd = (const float *)(xr + 32 * nb);
            __m512i s = _mm512_set1_epi32(-12 * act_q8_0_sum(xr, nb, j)), s2 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s = _mm512_dpbusd_epi32(s, lo[k], bcast4x16(xq + 4 * k));
                s2 = _mm512_dpbusd_epi32(s2, hi[k], bcast4x16(xq + 16 + 4 * k));
            }
            s = _mm512_add_epi32(s, s2);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[j])), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* r8_qk_body (q4_K, q5_K) over 16 rows */
X86_INLINE void r16_qk_body(float *y, int64_t ys, const uint8_t *ga, const uint8_t *gb, const uint8_t *x,
                            size_t xst, int64_t nb, const int NT, const int K) {
    const size_t sbs = wk_r8_bytes(K), qs0 = K == WK_Q5_K ? 384 : 128;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi8(0x3f), m2 = _mm512_set1_epi8(3);
    const __m512i mb = _mm512_set1_epi32(0xff);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *a = ga + sbs * sbi, *b = gb + sbs * sbi;
        const __m512 dv = _mm512_cvtph_ps(ld2x16(a, b)), dmv = _mm512_cvtph_ps(ld2x16(a + 16, b + 16));
        const __m512i wa = ld2x32(a + 32, b + 32), wb = ld2x32(a + 64, b + 64), wc = ld2x32(a + 96, b + 96);
        /* bytes 0..3 of each lane: sub-blocks 0..3 and 4..7 */
        const __m512i sc[2] = {_mm512_and_si512(wa, m6),
                               _mm512_or_si512(_mm512_and_si512(wc, m4),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(wa, 6), m2), 4))};
        const __m512i mn[2] = {_mm512_and_si512(wb, m6),
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(wc, 4), m4),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(wb, 6), m2), 4))};
        for (int q = 0; q < 4; q++) {
            const uint8_t *ca = a + qs0 + 256 * q, *cb = b + qs0 + 256 * q;
            for (int o = 0; o < 256; o += 64) {
                _mm_prefetch((const char *)ca + 2048 + o, _MM_HINT_T0);
                _mm_prefetch((const char *)cb + 2048 + o, _MM_HINT_T0);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * q + h, sh = 8 * (j % 4);
                const __m512 sd = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(sc[j / 4], sh), mb)));
                const __m512 md = _mm512_mul_ps(dmv, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(mn[j / 4], sh), mb)));
                __m512i u[8];
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    const __m512i v = ld2x32(ca + 32 * k, cb + 32 * k);
                    u[k] = _mm512_and_si512(h ? _mm512_srli_epi16(v, 4) : v, m4);
                    if (K == WK_Q5_K) { /* bit j of each qh byte to bit 4 */
                        __m512i hb = ld2x32(a + 128 + 32 * k, b + 128 + 32 * k);
                        hb = j < 4 ? _mm512_slli_epi16(hb, 4 - j) : j > 4 ? _mm512_srli_epi16(hb, j - 4) : hb;
                        u[k] = _mm512_or_si512(u[k], _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
                    }
                }
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j);
                    const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                    __m512i s32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bcast4x16(xq));
                    __m512i s2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[1], bcast4x16(xq + 4));
#pragma GCC unroll 8
                    for (int k = 2; k < 8; k += 2) {
                        s32 = _mm512_dpbusd_epi32(s32, u[k], bcast4x16(xq + 4 * k));
                        s2 = _mm512_dpbusd_epi32(s2, u[k + 1], bcast4x16(xq + 4 * k + 4));
                    }
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s32, s2));
                    acc[t] = _mm512_fmadd_ps(f, _mm512_mul_ps(sd, _mm512_set1_ps(xd[0])), acc[t]);
                    acc[t] = _mm512_fnmadd_ps(md, _mm512_set1_ps(xd[nb]), acc[t]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + t * ys, acc[t]);
}

/* the 16-row body of kind K */
X86_INLINE void r16_body(float *y, int64_t ys, const uint8_t *ga, const uint8_t *gb, const uint8_t *x,
                         size_t xst, int64_t nb, const int NT, const int K) {
    if (K == WK_Q4_0 || K == WK_IQ4_NL || K == WK_Q4_1 || K == WK_Q5_0 || K == WK_Q5_1)
        r16_q32_body(y, ys, ga, gb, x, xst, nb, NT, K);
    else if (K == WK_MXFP4) r16_mxfp4_body(y, ys, ga, gb, x, xst, nb, NT);
    else if (K == WK_Q4_K || K == WK_Q5_K) r16_qk_body(y, ys, ga, gb, x, xst, nb, NT, K);
    else r16_k16_body(y, ys, ga, gb, x, xst, nb, NT, K);
}

/* 16 rows × nt tokens: 4 tokens at a time, then the 1-3 left. Decode (one token) does
 * not come here: kern_matmul_layout gives it tile8 (the 8-row bodies). Where the 512-bit
 * multiplies issue on one port (their 256-bit forms on two) these bodies are no faster;
 * on a core with full-width 512-bit units (Zen 5) they are 1.5-1.8x faster with the
 * weights in cache than the 256-bit 8-row bodies (warm-kbench --hot, 1 thread: q3_K 22 ->
 * 35-42 GB/s, q4_K 41 -> 60-70; q3_K's 8-row body is now r8w_k16_body's, 29-30),
 * yet slower from memory, which is where decode reads: the two groups are two streams a
 * group apart, and one core read two interleaved streams at 15-16 GB/s (21-24 with
 * software prefetch past each group into the next pair's) against one stream's 26-30
 * (a plain read loop). warm-kbench --quick's matmul-only decode fell by 28-50 % per type;
 * with that prefetch the two rounds disagreed (one 0-29 % slower, the other 3 % slower
 * to 43 % faster): not settled on this noisy guest. */
X86_INLINE void tile16q(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                        int nt, const int K) {
    const uint8_t *ga = g, *xb = x;
    const int64_t nb = n / 32;
    /* the group's bytes: 8 rows of nb blocks (k-quants: nb / 8 super-blocks) */
    const uint8_t *gb = ga + 8 * (size_t)(wk_is_k(K) ? nb / 8 : nb) * wk_bytes(K);
    int t = 0;
    for (; t + 4 <= nt; t += 4) r16_body(y + t * ys, ys, ga, gb, xb + t * xst, xst, nb, 4, K);
    switch (nt - t) {
    case 3: r16_body(y + t * ys, ys, ga, gb, xb + t * xst, xst, nb, 3, K); break;
    case 2: r16_body(y + t * ys, ys, ga, gb, xb + t * xst, xst, nb, 2, K); break;
    case 1: r16_body(y + t * ys, ys, ga, gb, xb + t * xst, xst, nb, 1, K); break;
    default: break;
    }
}
