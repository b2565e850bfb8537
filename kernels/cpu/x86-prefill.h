/* Part of x86-kernels.h: the prefill tiles of weights in the file's rows (4 rows × several
 * tokens). The 4 rows are unpacked once per PACK_BLOCKS blocks into a pack that every
 * token of the tile then meets: struct wpack (a row per register, packed_body) or, at the
 * 256-bit level, struct ipack (the 4 rows interleaved in one register, ipack_body). qtile
 * is the driver of a type's tile entry: the packs for 4 rows × 4 tokens or more, the
 * decode bodies (x86-decode.h) for the rest. */

enum {
    PACK_BLOCKS = 64, /* blocks of 4 rows unpacked at a time: 8 KiB of codes */
};

struct wpack {
    _Alignas(64) uint8_t codes[4][PACK_BLOCKS][32];
    _Alignas(16) float d[4][PACK_BLOCKS][2]; /* scales of the two halves of each block */
    _Alignas(64) float m[4][PACK_BLOCKS];     /* offsets m of the blocks */
    _Alignas(16) float mh[4][PACK_BLOCKS][2]; /* q2_K: offsets of the two halves */
};

X86_INLINE void wpack_fill(struct wpack *p, const uint8_t *w, size_t wst, int64_t j0, int64_t nbk,
                           const int K) {
    for (int r = 0; r < 4; r++)
        for (int64_t j = 0; j < nbk; j++) {
            float m, mb;
            __m256i u = block_unpack(w + r * wst, j0 + j, K, &p->d[r][j][0], &p->d[r][j][1], &m, &mb);
            _mm256_store_si256((__m256i *)p->codes[r][j], u);
            p->m[r][j] = m;
            p->mh[r][j][0] = m;
            p->mh[r][j][1] = mb;
        }
}

/* 4 packed rows × NT tokens over the pack's nbk blocks; y (+)= the dots. */
X86_INLINE void packed_body(float *y, int64_t ys, const struct wpack *p, int64_t nbk,
                            const uint8_t *x, size_t xst, int64_t nb, int64_t j0, bool add,
                            const int NT, const int K) {
    vq acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = vq_zero();
    for (int64_t j = 0; j < nbk; j += STEP) {
        int s = nbk - j >= STEP ? STEP : 1;
        struct xstep xs[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xstep_load(&xs[t], x + t * xst, nb, j0 + j, s, K, false);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vi u = vi_load(p->codes[r][j], s);
            vq dw = vq_halves(p->d[r][j], s);
            vq mh = wk_has_m2(K) ? vq_halves(p->mh[r][j], s) : vq_zero();
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[r][t] = step_acc(acc[r][t], u, dw, vq_zero(), mh, &xs[t], K, false);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            float v = vq_hsum(acc[r][t]);
            if (wk_has_m(K)) { /* Σ_b m_b·s_b: its own short dot, out of the hot loop */
                const float *sx = (const float *)(x + t * xst + 32 * nb) + nb + j0;
                vq a = vq_zero();
                int64_t j = 0;
                for (; j + VQ_N <= nbk; j += VQ_N) a = vq_fma(vq_loadu(&p->m[r][j]), vq_loadu(sx + j), a);
                v += vq_hsum(a);
                for (; j < nbk; j++) v += p->m[r][j] * f32_load(sx + j);
            }
            y[t * ys + r] = add ? y[t * ys + r] + v : v;
        }
}


#if !X86_W512
/* Prefill, 256-bit: the 4 rows of a tile interleaved so that one register holds all 4.
 * Group g (0..3) of block j is 32 bytes: 32-bit lane 4h + r = values 16h + 4g .. +3 of
 * row r (h = the block's half). A token's block, broadcast 4 bytes at a time within each
 * 128-bit half (VPSHUFD), meets the 4 groups with 4 byte dots whose 16-bit sums add up
 * before one widening, so lane 4h + r ends with half h of row r's block dot: per token
 * and block, 4 rows cost what one row did, the per-half scales (q6_K, q3_K) are a lane
 * vector, and U mode's -OFF·Σx is one multiply of the half sums that the activation
 * quantizer leaves in the q8_0 rows' s slot (see act_q8). S mode keeps |w| and w. */
struct ipack {
    _Alignas(32) uint8_t codes[PACK_BLOCKS][4][32]; /* U codes, or S mode's |w| */
    _Alignas(32) int8_t sgn[PACK_BLOCKS][4][32];    /* S mode: w, for the signs */
    _Alignas(32) float d[PACK_BLOCKS][8];           /* lane 4h + r: scale of half h of row r */
    _Alignas(32) float m[4][PACK_BLOCKS];           /* offsets m of the blocks */
};

X86_INLINE bool wk_ipack(int k) { return k != WK_Q2_K; }

X86_INLINE void ipack_fill(struct ipack *p, const uint8_t *w, size_t wst, int64_t j0, int64_t nbk,
                           const int K) {
    for (int64_t j = 0; j < nbk; j++) {
        __m256i u[4];
        for (int r = 0; r < 4; r++) {
            float da, db, m, mb;
            u[r] = block_unpack(w + r * wst, j0 + j, K, &da, &db, &m, &mb);
            p->d[j][r] = da;
            p->d[j][4 + r] = db;
            p->m[r][j] = m;
        }
        /* a 4 × 4 transpose of 32-bit words within each 128-bit half */
        __m256i ab0 = _mm256_unpacklo_epi32(u[0], u[1]), ab1 = _mm256_unpackhi_epi32(u[0], u[1]);
        __m256i cd0 = _mm256_unpacklo_epi32(u[2], u[3]), cd1 = _mm256_unpackhi_epi32(u[2], u[3]);
        __m256i g[4] = {_mm256_unpacklo_epi64(ab0, cd0), _mm256_unpackhi_epi64(ab0, cd0),
                        _mm256_unpacklo_epi64(ab1, cd1), _mm256_unpackhi_epi64(ab1, cd1)};
        for (int k = 0; k < 4; k++) {
            _mm256_store_si256((__m256i *)p->codes[j][k], wk_signed(K) ? _mm256_abs_epi8(g[k]) : g[k]);
            if (wk_signed(K)) _mm256_store_si256((__m256i *)p->sgn[j][k], g[k]);
        }
    }
}

/* The pack's 4 rows × NT tokens over its nbk blocks; y (+)= the dots. */
X86_INLINE void ipack_body(float *y, int64_t ys, const struct ipack *p, int64_t nbk,
                           const uint8_t *x, size_t xst, int64_t nb, int64_t j0, bool add,
                           const int NT, const int K) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i koff = _mm256_setr_epi16(wk_off(K), 0, wk_off(K), 0, wk_off(K), 0, wk_off(K), 0,
                                           0, wk_off(K), 0, wk_off(K), 0, wk_off(K), 0, wk_off(K));
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nbk; j++) {
        __m256i w0 = _mm256_load_si256((const __m256i *)p->codes[j][0]);
        __m256i w1 = _mm256_load_si256((const __m256i *)p->codes[j][1]);
        __m256i w2 = _mm256_load_si256((const __m256i *)p->codes[j][2]);
        __m256i w3 = _mm256_load_si256((const __m256i *)p->codes[j][3]);
        __m256 dw = _mm256_load_ps(p->d[j]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst;
            const float *xd = (const float *)(xr + 32 * nb);
            __m256i xb = _mm256_loadu_si256((const __m256i *)(xr + 32 * (j0 + j)));
            __m256i x0 = _mm256_shuffle_epi32(xb, 0x00), x1 = _mm256_shuffle_epi32(xb, 0x55);
            __m256i x2 = _mm256_shuffle_epi32(xb, 0xaa), x3 = _mm256_shuffle_epi32(xb, 0xff);
            __m256i s;
            if (wk_signed(K)) { /* |pair| up to 2·127·127: widen each dot */
                const __m256i *sg = (const __m256i *)p->sgn[j];
                __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_sign_epi8(x0, _mm256_load_si256(sg))), ones);
                __m256i b = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, _mm256_sign_epi8(x1, _mm256_load_si256(sg + 1))), ones);
                __m256i c = _mm256_madd_epi16(_mm256_maddubs_epi16(w2, _mm256_sign_epi8(x2, _mm256_load_si256(sg + 2))), ones);
                __m256i e = _mm256_madd_epi16(_mm256_maddubs_epi16(w3, _mm256_sign_epi8(x3, _mm256_load_si256(sg + 3))), ones);
                s = _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, e));
            } else if (X86_VNNI) { /* VPDPBUSD: int32 sums, U mode's codes up to 255 */
                s = vi_dot(vi_dot(_mm256_setzero_si256(), w0, x0), w1, x1);
                s = vi_dot(vi_dot(s, w2, x2), w3, x3);
            } else if (K == WK_Q6_K) { /* u <= 63: |pair| <= 16002, two of them fit in 16 bits */
                __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
                __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(w2, x2), _mm256_maddubs_epi16(w3, x3));
                s = _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
            } else { /* u <= 31: four pairs stay within 4·2·31·127 = 31496 */
                __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
                __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(w2, x2), _mm256_maddubs_epi16(w3, x3));
                s = _mm256_madd_epi16(_mm256_add_epi16(a, b), ones);
            }
            if (!wk_signed(K) && wk_off(K)) {
                int32_t hs;
                memcpy(&hs, xd + nb + j0 + j, sizeof(hs));
                s = _mm256_sub_epi32(s, _mm256_madd_epi16(_mm256_set1_epi32(hs), koff));
            }
            __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j0 + j));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        float v[4];
        _mm_storeu_ps(v, _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1)));
        for (int r = 0; r < 4; r++) {
            if (wk_has_m(K)) { /* Σ_b m_b·s_b, as packed_body */
                const float *sx = (const float *)(x + t * xst + 32 * nb) + nb + j0;
                __m256 a = _mm256_setzero_ps();
                int64_t j = 0;
                for (; j + 8 <= nbk; j += 8) a = _mm256_fmadd_ps(_mm256_load_ps(&p->m[r][j]), _mm256_loadu_ps(sx + j), a);
                v[r] += hsum256(a);
                for (; j < nbk; j++) v[r] += p->m[r][j] * f32_load(sx + j);
            }
            y[t * ys + r] = add ? y[t * ys + r] + v[r] : v[r];
        }
    }
}

/* The pack's 4 rows × nt tokens: 4 tokens at a time, then the rest one by one. */
X86_INLINE void ipack_tokens(float *y, int64_t ys, const struct ipack *p, int64_t nbk, const uint8_t *x,
                             size_t xst, int64_t nb, int64_t j0, int nt, const int K) {
    int t = 0;
    for (; t + 4 <= nt; t += 4) ipack_body(y + t * ys, ys, p, nbk, x + t * xst, xst, nb, j0, j0 > 0, 4, K);
    for (; t < nt; t++) ipack_body(y + t * ys, ys, p, nbk, x + t * xst, xst, nb, j0, j0 > 0, 1, K);
}
#endif

X86_INLINE void qtile(float *y, int64_t ys, const void *w, size_t wst, const void *x, size_t xst,
                      int64_t n, int nr, int nt, const int K) {
    const uint8_t *wb = w, *xb = x;
    int64_t nb = n / 32;
#if !X86_W512
    if (nr == 4 && nt >= 4 && wk_ipack(K)) {
        struct ipack pack;
        for (int64_t j0 = 0; j0 < nb; j0 += PACK_BLOCKS) {
            int64_t nbk = nb - j0 < PACK_BLOCKS ? nb - j0 : PACK_BLOCKS;
            ipack_fill(&pack, wb, wst, j0, nbk, K);
            ipack_tokens(y, ys, &pack, nbk, xb, xst, nb, j0, nt, K);
        }
        return;
    }
#endif
    if (nr == 4 && nt >= 4) {
        struct wpack pack;
        for (int64_t j0 = 0; j0 < nb; j0 += PACK_BLOCKS) {
            int64_t nbk = nb - j0 < PACK_BLOCKS ? nb - j0 : PACK_BLOCKS;
            wpack_fill(&pack, wb, wst, j0, nbk, K);
            int t = 0;
            for (; t + 4 <= nt; t += 4)
                packed_body(y + t * ys, ys, &pack, nbk, xb + t * xst, xst, nb, j0, j0 > 0, 4, K);
            for (; t < nt; t++)
                packed_body(y + t * ys, ys, &pack, nbk, xb + t * xst, xst, nb, j0, j0 > 0, 1, K);
        }
    } else if (nr == 4) {
        for (int t = 0; t < nt; t++) any_direct_body(y + t * ys, wb, wst, xb + t * xst, nb, 4, K);
    } else {
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < nr; r++)
                any_direct_body(y + t * ys + r, wb + r * wst, wst, xb + t * xst, nb, 1, K);
    }
}
