/* Part of x86-kernels.h: the decode bodies of weights in the file's rows (up to 4 rows ×
 * one token, unpacked as they go): direct_body for any kind, one step at a time, and
 * kdirect_body for the k-quants, a super-block at a time, one form per level. qtile
 * (x86-prefill.h) also runs them for the rows and tokens left over by its 4 × 4 tiles. */

/* NR rows unpacked on the fly × one token (decode and ragged edges). */
X86_INLINE void direct_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                            int64_t nb, const int NR, const int K) {
    const size_t wbs = wk_bytes(K);
    vq acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r] = vq_zero();
    for (int64_t j = 0; j < nb; j += STEP) {
        int s = nb - j >= STEP ? STEP : 1;
        struct xstep xs;
        xstep_load(&xs, xrow, nb, j, s, K, true);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + r * wst + (wk_is_k(K) ? j / 8 : j) * wbs;
            /* Three tiles ahead (12 rows on), every line of the step (q8_0's two blocks at
             * 512 bits are 68 bytes); the hardware prefetcher, following each row's own
             * stream, would fetch too late. The 32-value kinds fetch that tile in one
             * sequential stream, as fast as the 4 rows consume theirs: step j's rows take
             * bytes [4·j·wbs, 4·(j + STEP)·wbs) of it, row r the r-th share. Against one
             * tile ahead per row: q8_0 rows at 512 bits 18 -> 26-30 GB/s (the lines), 20 ->
             * 22-25 (the one stream); q4_0 15 -> 19-23 (1 thread, alternated A/B). */
            const uint8_t *pf = wk_is_k(K) ? wb + 12 * wst
                                           : w + 12 * wst + (size_t)(4 * j + r * s) * wbs;
            _mm_prefetch((const char *)pf, _MM_HINT_T0);
            if (STEP * wbs > 64) _mm_prefetch((const char *)pf + 64, _MM_HINT_T0);
            vi u;
            vq dw, mw = vq_zero(), mh = vq_zero();
#if X86_W512
            if (s == 2 && !wk_is_k(K)) {
                u = wblock2_unpack(wb, wbs, K, &dw, &mw);
            } else {
                /* scales stay in registers: a vector load of scalars just stored would
                 * stall on store forwarding */
                float da0, db0, m0, mb0, da1 = 0.0f, db1 = 0.0f, m1 = 0.0f, mb1 = 0.0f;
                __m256i u0 = block_unpack(w + r * wst, j, K, &da0, &db0, &m0, &mb0);
                if (s == 2) {
                    u = vi_from2(u0, block_unpack(w + r * wst, j + 1, K, &da1, &db1, &m1, &mb1));
                } else {
                    u = _mm512_zextsi256_si512(u0);
                }
                const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
                dw = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_setr_ps(da0, db0, da1, db1)));
                mw = vq_pair(m0 * 0.125f, m1 * 0.125f);
                if (wk_has_m2(K))
                    mh = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_setr_ps(m0, mb0, m1, mb1)));
            }
#else
            float da, db, m0, mb0;
            u = block_unpack(w + r * wst, j, K, &da, &db, &m0, &mb0);
            dw = _mm256_set_m128(_mm_set1_ps(db), _mm_set1_ps(da));
            mw = _mm256_set1_ps(m0 * 0.125f);
            if (wk_has_m2(K)) mh = _mm256_set_m128(_mm_set1_ps(mb0), _mm_set1_ps(m0));
#endif
            acc[r] = step_acc(acc[r], u, dw, mw, mh, &xs, K, true);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) y[r] = vq_hsum(acc[r]);
}

#if X86_W512
/* k-quant decode: a super-block of each row at a time. Its scales are decoded once, as
 * vectors (ggml's 12-byte packing unpacked with 32-bit masks), and each 512-bit step
 * covers two sub-blocks that share their bytes: q4_K/q5_K sub-blocks 2q and 2q+1 are
 * the low and high nibbles of the same 32 bytes. */
X86_INLINE void kdirect_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                             int64_t nb, const int NR, const int K) {
    const size_t sbs = wk_bytes(K);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    vq acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r] = vq_zero();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *sb = w + r * wst + sbi * sbs;
            /* as direct_body: 12 rows on, every line of the super-block (q6_K's 210 bytes
             * take four) */
            for (size_t o = 0; o < sbs; o += 64) _mm_prefetch((const char *)sb + 12 * wst + o, _MM_HINT_T0);
            __m512 scale; /* K6: 16 half-block scales; K4/K5: 8 block scales */
            __m256 mins = _mm256_setzero_ps();
            __m256i qh = _mm256_setzero_si256();
            if (K == WK_Q6_K) {
                __m128i sc = _mm_loadu_si128((const __m128i *)(sb + 192));
                scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)),
                                      _mm512_set1_ps(f16_load(sb + 208)));
                qh = _mm256_loadu_si256((const __m256i *)(sb + 128));
            } else {
                __m256 scf, mnf;
                kq_scales_mins(sb + 4, &scf, &mnf);
                scale = _mm512_castps256_ps512(_mm256_mul_ps(scf, _mm256_set1_ps(f16_load(sb))));
                mins = _mm256_mul_ps(mnf, _mm256_set1_ps(-0.125f * f16_load(sb + 2)));
                if (K == WK_Q5_K) qh = _mm256_loadu_si256((const __m256i *)(sb + 16));
            }
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                struct xstep xs;
                xstep_load(&xs, xrow, nb, sbi * 8 + 2 * q, 2, K, true);
                vi u;
                vq dw, mw = vq_zero();
                if (K == WK_Q6_K) {
                    /* sub-blocks 2q, 2q+1: half h = q/2, groups k = 2(q%2), 2(q%2)+1 */
                    vi l = _mm512_loadu_si512(sb + 64 * (q / 2));
                    if (q % 2) l = _mm512_srli_epi16(l, 4);
                    l = _mm512_and_si512(l, low4);
                    vi hb = _mm512_broadcast_i64x4(qh);
                    const __m512i cnt = _mm512_set_epi64(
                        0x0001000100010001ll * (4 * (q % 2) + 2), 0x0001000100010001ll * (4 * (q % 2) + 2),
                        0x0001000100010001ll * (4 * (q % 2) + 2), 0x0001000100010001ll * (4 * (q % 2) + 2),
                        0x0001000100010001ll * (4 * (q % 2)), 0x0001000100010001ll * (4 * (q % 2)),
                        0x0001000100010001ll * (4 * (q % 2)), 0x0001000100010001ll * (4 * (q % 2)));
                    if (q / 2) hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sb + 160)));
                    hb = _mm512_and_si512(_mm512_srlv_epi16(hb, cnt), _mm512_set1_epi8(3));
                    u = _mm512_or_si512(l, _mm512_slli_epi16(hb, 4));
                    const __m512i idx = _mm512_setr_epi32(4 * q, 4 * q, 4 * q, 4 * q, 4 * q + 1, 4 * q + 1,
                                                          4 * q + 1, 4 * q + 1, 4 * q + 2, 4 * q + 2, 4 * q + 2,
                                                          4 * q + 2, 4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 3);
                    dw = _mm512_permutexvar_ps(idx, scale);
                } else {
                    const uint8_t *qs = sb + (K == WK_Q4_K ? 16 : 48) + 32 * q;
                    vi z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
                    z = _mm512_mask_srli_epi16(z, 0xffff0000u, z, 4);
                    u = _mm512_and_si512(z, low4);
                    if (K == WK_Q5_K) {
                        const __m512i cnt = _mm512_set_epi64(
                            0x0001000100010001ll * (2 * q + 1), 0x0001000100010001ll * (2 * q + 1),
                            0x0001000100010001ll * (2 * q + 1), 0x0001000100010001ll * (2 * q + 1),
                            0x0001000100010001ll * (2 * q), 0x0001000100010001ll * (2 * q),
                            0x0001000100010001ll * (2 * q), 0x0001000100010001ll * (2 * q));
                        vi hb = _mm512_srlv_epi16(_mm512_broadcast_i64x4(qh), cnt);
                        hb = _mm512_and_si512(hb, _mm512_set1_epi8(1));
                        u = _mm512_or_si512(u, _mm512_slli_epi16(hb, 4));
                    }
                    const __m512i idx = _mm512_setr_epi32(2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q,
                                                          2 * q, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1,
                                                          2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1);
                    dw = _mm512_permutexvar_ps(idx, scale);
                    mw = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(mins));
                }
                acc[r] = step_acc(acc[r], u, dw, mw, vq_zero(), &xs, K, true);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) y[r] = vq_hsum(acc[r]);
}
#else
/* k-quant decode, 256-bit: a super-block of each row at a time. Its 8 (q6_K: 16) scales
 * are decoded once, as vectors, and multiplied by the activations' 8 block scales in one
 * step, so that a sub-block costs one broadcast of its combined scale; the offsets of
 * q4_K/q5_K meet the activations' sums s in a second accumulator (8 lanes at once).
 * q4_K/q5_K sub-blocks 2q and 2q+1 are the low and high nibbles of the same 32 bytes. */
X86_INLINE __m256 k_lane(__m256 v, int i) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i)); }

/* Spreads the 8 nibbles of v (4 bytes) into bytes 0..7, nibble j -> byte j. */
X86_INLINE uint64_t nib_spread(uint32_t v) {
    uint64_t t = v;
    t = (t | t << 16) & 0x0000ffff0000ffffull;
    t = (t | t << 8) & 0x00ff00ff00ff00ffull;
    return (t | t << 4) & 0x0f0f0f0f0f0f0f0full;
}
/* Spreads the 8 2-bit fields of v (16 bits) into bytes 0..7. */
X86_INLINE uint64_t bits2_spread(uint32_t v) {
    uint64_t t = v & 0xffffu;
    t = (t | t << 24) & 0x000000ff000000ffull;
    t = (t | t << 12) & 0x000f000f000f000full;
    return (t | t << 6) & 0x0303030303030303ull;
}

/* acc += Σ over sub-block j's two halves of sc_half·(u - off)·x, times dd's lane j; sc16
 * holds the 16 half scales as int16, (sc[2j], sc[2j+1]) in 32-bit lane j. Without VNNI:
 * u <= 63, so |u·x pair| <= 16002 and |off·x pair| <= 8128 stay within 16 bits. */
X86_INLINE __m256 k16_step(__m256 acc, __m256i u, __m256i x, __m256i sc16, int j, __m256 dd,
                           const int off) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    __m256i p = _mm256_maddubs_epi16(u, x);
    if (off) p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8((char)off), x));
    __m256i s = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(j)), pick);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, s)), k_lane(dd, j), acc);
}

/* macc -= off·Σ_j dd_j·(sc_2j·Σx of values 0..15 + sc_2j+1·Σx of 16..31) over a
 * super-block: U mode's correction for all 8 sub-blocks at once, from the half sums in
 * the q8_0 rows' s slot (hs, 8 of them). */
X86_INLINE __m256 koff_acc(__m256 macc, __m256i sc16, const float *hs, __m256 dd, const int off) {
    __m256i c = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)hs), sc16);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_mul_ps(dd, _mm256_set1_ps(-(float)off)), macc);
}

X86_INLINE void kdirect_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                             int64_t nb, const int NR, const int K) {
    const size_t sbs = wk_bytes(K);
    const float *xd = (const float *)(xrow + 32 * nb), *xsum = xd + nb;
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    vq acc[4], macc[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r] = macc[r] = vq_zero();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *xq = xrow + 256 * sbi;
        const __m256 dx = _mm256_loadu_ps(xd + 8 * sbi);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *sb = w + r * wst + sbi * sbs;
            /* as direct_body: 12 rows on */
            for (size_t o = 0; o < sbs; o += 64) _mm_prefetch((const char *)sb + 12 * wst + o, _MM_HINT_T0);
            if (K == WK_Q6_K) { /* ql[128] | qh[64] | scales[16] | d */
                const __m256 dd = _mm256_mul_ps(dx, _mm256_set1_ps(f16_load(sb + 208)));
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(sb + 192)));
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const int h = j / 4, k = j % 4;
                    __m256i l = _mm256_loadu_si256((const __m256i *)(sb + 64 * h + 32 * (k % 2)));
                    if (k / 2) l = _mm256_srli_epi16(l, 4);
                    __m256i hb = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
                    if (k) hb = _mm256_srli_epi16(hb, 2 * k);
                    __m256i u = _mm256_or_si256(_mm256_and_si256(l, low4),
                                                _mm256_slli_epi16(_mm256_and_si256(hb, low2), 4));
                    acc[r] = k16_step(acc[r], u, _mm256_loadu_si256((const __m256i *)(xq + 32 * j)), sc16, j, dd, 0);
                }
                macc[r] = koff_acc(macc[r], sc16, xsum + 8 * sbi, dd, 32);
            } else if (K == WK_Q3_K || K == WK_Q2_K) {
                /* q3_K: hmask[32] | qs[64] | scales[12] | d;  q2_K: scales[16] | qs[64] | d | dmin */
                __m256i sc16;
                __m256 dd;
                if (K == WK_Q3_K) {
                    uint64_t lo8, hi2;
                    uint32_t hw;
                    memcpy(&lo8, sb + 96, 8);
                    memcpy(&hw, sb + 104, 4);
                    /* group g: low 4 bits = nibble g%8... of bytes 0..7 (g < 8 low nibbles),
                     * top 2 bits at bits 2·(g/4) of byte 8 + g%4 */
                    hi2 = (uint64_t)(hw & 0x03030303u) | (uint64_t)((hw >> 2) & 0x03030303u) << 32;
                    uint64_t hi2b = (uint64_t)((hw >> 4) & 0x03030303u) | (uint64_t)((hw >> 6) & 0x03030303u) << 32;
                    __m128i scb = _mm_or_si128(
                        _mm_set_epi64x((long long)((lo8 >> 4) & 0x0f0f0f0f0f0f0f0full), (long long)(lo8 & 0x0f0f0f0f0f0f0f0full)),
                        _mm_slli_epi16(_mm_set_epi64x((long long)hi2b, (long long)hi2), 4));
                    sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(scb, _mm_set1_epi8(32)));
                    dd = _mm256_mul_ps(dx, _mm256_set1_ps(f16_load(sb + 108)));
                } else {
                    __m128i scb = _mm_loadu_si128((const __m128i *)sb);
                    sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(scb, _mm_set1_epi8(0x0f)));
                    dd = _mm256_mul_ps(dx, _mm256_set1_ps(f16_load(sb + 80)));
                    /* offsets: -dmin·Σ_j d_x,j·(m_2j·Σx of values 0..15 + m_2j+1·Σx of 16..31),
                     * the half sums from the q8_0 rows' s slot */
                    __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), _mm_set1_epi8(0x0f)));
                    __m256i hs = _mm256_loadu_si256((const __m256i *)(xsum + 8 * sbi));
                    macc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(hs, m16)), dx),
                                              _mm256_set1_ps(-f16_load(sb + 82)), macc[r]);
                }
                const uint8_t *qs = sb + (K == WK_Q3_K ? 32 : 16);
                __m256i hm = K == WK_Q3_K ? _mm256_loadu_si256((const __m256i *)sb) : _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 4)));
                    if (j % 4) q = _mm256_srli_epi16(q, 2 * (j % 4));
                    __m256i u = _mm256_and_si256(q, low2);
                    if (K == WK_Q3_K) {
                        __m256i hb = j ? _mm256_srli_epi16(hm, j) : hm;
                        u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(1)), 2));
                    }
                    acc[r] = k16_step(acc[r], u, _mm256_loadu_si256((const __m256i *)(xq + 32 * j)), sc16, j, dd, 0);
                }
                if (K == WK_Q3_K) macc[r] = koff_acc(macc[r], sc16, xsum + 8 * sbi, dd, 4);
            } else if (K == WK_IQ4_XS) { /* d | scales_h | scales_l[4] | qs[128] */
                uint16_t sh;
                uint32_t sl;
                memcpy(&sh, sb + 2, 2);
                memcpy(&sl, sb + 4, 4);
                uint64_t ls = nib_spread(sl) | bits2_spread(sh) << 4;
                __m128i lsb = _mm_sub_epi8(_mm_cvtsi64_si128((long long)ls), _mm_set1_epi8(32));
                const __m256 dd = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lsb)),
                                                              _mm256_set1_ps(f16_load(sb))), dx);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    /* S mode at any 256-bit level: this path has no U mode's -128·Σx */
                    __m256i v = iq4_lookup(nibbles_unpack(sb + 8 + 16 * j), true);
                    __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * j));
                    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(x, v));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), k_lane(dd, j), acc[r]);
                }
            } else { /* q4_K: d | dmin | scales[12] | qs[128];  q5_K: ... | qh[32] | qs[128] */
                __m256 scf, mnf;
                kq_scales_mins(sb + 4, &scf, &mnf);
                const __m256 dd = _mm256_mul_ps(_mm256_mul_ps(scf, _mm256_set1_ps(f16_load(sb))), dx);
                macc[r] = _mm256_fmadd_ps(_mm256_mul_ps(mnf, _mm256_set1_ps(-f16_load(sb + 2))),
                                          _mm256_loadu_ps(xsum + 8 * sbi), macc[r]);
                const uint8_t *qs = sb + (K == WK_Q4_K ? 16 : 48);
                __m256i qh = K == WK_Q5_K ? _mm256_loadu_si256((const __m256i *)(sb + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    __m256i bytes = _mm256_loadu_si256((const __m256i *)(qs + 32 * q));
                    __m256i lo = _mm256_and_si256(bytes, low4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
                    if (K == WK_Q5_K) {
                        const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * q))), b1 = _mm256_set1_epi8((char)(2 << (2 * q)));
                        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), _mm256_set1_epi8(0x10)));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), _mm256_set1_epi8(0x10)));
                    }
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 64 * q));
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 64 * q + 32));
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), ones);
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), ones);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), k_lane(dd, 2 * q), acc[r]);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), k_lane(dd, 2 * q + 1), acc[r]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        y[r] = vq_hsum(acc[r]) + (K == WK_IQ4_XS ? 0.0f : vq_hsum(macc[r]));
}
#endif

#if X86_W512
/* mxfp4 decode in the file's rows, four blocks a step: one 512-bit register holds the
 * four blocks' 16 code bytes, a block per 128-bit lane, so that their low nibbles (values
 * 0..15) and their high ones (16..31) each meet one register of the token's codes, which
 * the step shuffles once for all NR rows (direct_body unpacked each pair of blocks into
 * value order, row by row). The four E8M0 bytes, 17 bytes apart, come out of one 64-byte
 * load, and each lane's scale d_x·2^(e-128) is one VSCALEFPS: the same product as d_x
 * times the exact power of two. U mode (codes + 12, -12·Σx per step). The blocks past the
 * last multiple of 4 take one-block steps. */
X86_INLINE void mxfp4_direct_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                                  int64_t nb, const int NR) {
    const size_t bs = sizeof(struct block_mxfp4);
    const __m512i m4 = _mm512_set1_epi8(0x0f), c12 = _mm512_set1_epi8(12);
    const __m128i tbl = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m512i utbl = _mm512_broadcast_i32x4(tbl);
    /* block k's E8M0 byte: byte k of dword 4k of the step's first 64 bytes */
    const __m512i eidx = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m512i esh = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24);
    const __m512i didx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const float *xd = (const float *)(xrow + 32 * nb);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    const int64_t nb4 = nb / 4 * 4;
    for (int64_t j = 0; j < nb4; j += 4) {
        /* the token's codes of blocks j..j+3: values 0..15 of each, then 16..31 */
        const __m512i x0 = _mm512_loadu_si512(xrow + 32 * j),
                      x1 = _mm512_loadu_si512(xrow + 32 * j + 64);
        const __m512i xlo = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i xhi = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
        __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c12, xlo);
        corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(corr, c12, xhi));
        const __m512 dx = _mm512_permutexvar_ps(didx, _mm512_castps128_ps512(_mm_loadu_ps(xd + j)));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *b = w + r * wst + j * bs;
            /* three tiles ahead: the same place 12 rows on (measured against 4 and 8 rows,
             * 1 thread: 4 rows on left the loads waiting) */
            _mm_prefetch((const char *)b + 12 * wst, _MM_HINT_T0);
            _mm_prefetch((const char *)b + 12 * wst + 64, _MM_HINT_T0);
            __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b + 1)));
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(b + 1 + bs)), 1);
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(b + 1 + 2 * bs)), 2);
            q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(b + 1 + 3 * bs)), 3);
            const __m512i ulo = _mm512_shuffle_epi8(utbl, _mm512_and_si512(q, m4));
            const __m512i uhi =
                _mm512_shuffle_epi8(utbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, ulo, xlo), uhi, xhi);
            __m512i e = _mm512_permutexvar_epi32(eidx, _mm512_loadu_si512(b));
            e = _mm512_and_si512(_mm512_srlv_epi32(e, esh), _mm512_set1_epi32(0xff));
            e = _mm512_sub_epi32(e, _mm512_set1_epi32(128));
            const __m512 d = _mm512_scalef_ps(dx, _mm512_cvtepi32_ps(e));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[r]);
        }
    }
    for (int64_t j = nb4; j < nb; j++) {
        const __m256i xq = _mm256_loadu_si256((const __m256i *)(xrow + 32 * j));
        const __m256i z = _mm256_setzero_si256(),
                      corr = _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, _mm256_set1_epi8(12), xq));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            float dw, m;
            const __m256i u = wblock_unpack(w + r * wst + j * bs, WK_MXFP4, &dw, &m);
            const __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(corr, u, xq));
            const __m256 a = _mm256_mul_ps(p, _mm256_set1_ps(dw * xd[j]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_zextps256_ps512(a));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) y[r] = _mm512_reduce_add_ps(acc[r]);
}
#endif

/* Decode and edges: k-quants by super-block where the level has it, mxfp4 four blocks a
 * step at the 512-bit level. */
X86_INLINE void any_direct_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                                int64_t nb, const int NR, const int K) {
#if X86_W512
    if (K == WK_MXFP4) {
        mxfp4_direct_body(y, w, wst, xrow, nb, NR);
        return;
    }
#endif
    if (wk_kdirect(K)) {
        kdirect_body(y, w, wst, xrow, nb, NR, K);
        return;
    }
    direct_body(y, w, wst, xrow, nb, NR, K);
}
