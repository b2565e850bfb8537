/* Part of x86-kernels.h: the bodies for rows8 weights (kernels/types.h, enum kern_layout):
 * a register holds 4 bytes of each of a group's 8 rows (lane r = row r), so decode needs
 * no horizontal sums. One body per layout (q4_0/iq4_nl/q4_1/q5_0/q5_1, mxfp4, q4_K/q5_K,
 * q8_0, iq4_xs, and q6_K/q3_K/q2_K with a scale per 16 values), each for 8 rows × up to 4
 * tokens; tile8 is the driver of a type's tile8 entry (at the 256-bit level, the prefill of
 * some kinds goes through x86-prefill.h's ipack, or unpacks a group's codes once for all
 * the tile's tokens: struct r8pack). The 512-bit level's 16-row forms follow in
 * x86-rows16.h. */

/* 4 bytes at p in every 32-bit lane: a broadcast load (VPBROADCASTD), no shuffle */
X86_INLINE __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Σ of the codes of block j of a q8_0 activation row xr (nb blocks): the two int16 half
 * sums act_q8_0 leaves in the row's s slot */
X86_INLINE int32_t act_q8_0_sum(const uint8_t *xr, int64_t nb, int64_t j) {
    int32_t hs;
    memcpy(&hs, (const float *)(xr + 32 * nb) + nb + j, sizeof hs);
    return (int32_t)(int16_t)(uint16_t)hs + (int32_t)(int16_t)(uint16_t)((uint32_t)hs >> 16);
}

/* The 32-value kinds whose rows8 block is d[8] | m[8] (q4_1, q5_1) | qh (q5_0, q5_1: one
 * chunk, row r's 4 bytes at 4r) | qs in 4 chunks (kernels/repack.c): q4_0, iq4_nl, q4_1,
 * q5_0, q5_1. The offsets of the qh and qs chunks in the block. */
X86_INLINE int r8q_qh(int k) { return wk_has_m(k) ? 32 : 16; }
X86_INLINE int r8q_qs(int k) { return r8q_qh(k) + (wk_has_qh(k) ? 32 : 0); }

/* The 4-byte broadcast pattern of byte s of every 32-bit lane (VPSHUFB indices) */
X86_INLINE __m256i r8q_byte(int s) {
    return _mm256_setr_epi32(0x01010101 * s, 0x01010101 * (4 + s), 0x01010101 * (8 + s), 0x01010101 * (12 + s),
                             0x01010101 * s, 0x01010101 * (4 + s), 0x01010101 * (8 + s), 0x01010101 * (12 + s));
}
/* u with the fifth bits of chunk k's low (hf 0) or high (hf 1) nibbles: lane r of qh is row
 * r's qh word, whose bit 16·hf + 4k + i (byte 2·hf + k/2, bit 4·(k%2) + i) is byte i's */
X86_INLINE __m256i r8q_qh_or(__m256i u, __m256i qh, int k, int hf) {
    const __m256i v = _mm256_shuffle_epi8(qh, r8q_byte(2 * hf + k / 2));
    const __m256i bits = _mm256_set1_epi32(k % 2 ? (int)0x80402010u : 0x08040201);
#if X86_W512
    return _mm256_mask_add_epi8(u, _mm256_test_epi8_mask(v, bits), u, _mm256_set1_epi8(0x10));
#else
    const __m256i h = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
    return _mm256_or_si256(u, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
#endif
}

/* The codes of rows8 block b of kind K (r8_q32_body): u[k] = chunk k's low nibbles, u[4 + k]
 * its high ones, as codes (U mode) or signed values (S mode: iq4_nl without VNNI). */
X86_INLINE void r8q_codes(__m256i u[8], const uint8_t *b, const int K) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qh = wk_has_qh(K) ? _mm256_loadu_si256((const __m256i *)(b + r8q_qh(K))) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i c = _mm256_loadu_si256((const __m256i *)(b + r8q_qs(K) + 32 * k));
        u[k] = _mm256_and_si256(c, m4);
        u[4 + k] = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        if (K == WK_IQ4_NL) {
            u[k] = iq4_lookup(u[k], wk_signed(K));
            u[4 + k] = iq4_lookup(u[4 + k], wk_signed(K));
        }
        if (wk_has_qh(K)) {
            u[k] = r8q_qh_or(u[k], qh, k, 0);
            u[4 + k] = r8q_qh_or(u[4 + k], qh, k, 1);
        }
    }
}

/* The 256-bit level's prefill of the kinds whose codes cost most per 4-token step (iq4_nl's
 * table and signs, q5's fifth bits): a group's codes unpacked once per R8P_BLOCKS blocks
 * for all the tile's tokens, as ipack does for the file's rows. */
enum { R8P_BLOCKS = 32 };
struct r8pack {
    _Alignas(32) uint8_t u[R8P_BLOCKS][8][32]; /* r8q_codes' u (S mode: |v|) */
    _Alignas(32) int8_t v[R8P_BLOCKS][8][32];  /* S mode: v, for the signs */
};

X86_INLINE void r8pack_fill(struct r8pack *p, const uint8_t *g, int64_t j0, int64_t nbk, const int K) {
    for (int64_t j = 0; j < nbk; j++) {
        __m256i u[8];
        r8q_codes(u, g + wk_r8_bytes(K) * (j0 + j), K);
        for (int k = 0; k < 8; k++) {
            _mm256_store_si256((__m256i *)p->u[j][k], wk_signed(K) ? _mm256_abs_epi8(u[k]) : u[k]);
            if (wk_signed(K)) _mm256_store_si256((__m256i *)p->v[j][k], u[k]);
        }
    }
}

/* q4_0, iq4_nl, q4_1, q5_0, q5_1: 8 rows × NT tokens over blocks [j0, j0 + nbk) of group g
 * (codes from the pack pk of those blocks where not NULL); y = the dots (add: y's sums
 * continued over these blocks). Chunk
 * k of a block holds, in lane r, row r's values 4k..4k+3 (low nibbles) and 16+4k..16+4k+3
 * (high nibbles): each meets the token's 4 codes broadcast to every lane, so lane r sums
 * row r's dot and the block's 8 scales are one fp16 load. U mode (wk_off): codes u = q
 * (q5: | 16·qh bit; iq4_nl: the table + 128), -OFF·Σx from the half sums in the q8_0 rows'
 * s slot; q4_1/q5_1 add m·s (the q8_1 rows' s = d·Σq) with their 8 m in one fp16 load.
 * Without VNNI, VPMADDUBSW's int16 pairs: q4_0/q4_1 codes up to 15 against |x| <= 127, a
 * pair at most 3810, the 8 byte dots of a block 30480; q5's up to 31, 7874 a pair, so the
 * low and the high nibbles' 4 each (31496) are widened apart; iq4_nl in S mode
 * (|v|·(x·sign v), pairs up to 32258, each dot widened at once), a chunk at a time for
 * all NT tokens (its |v| and v in few registers). */
X86_INLINE void r8_q32_body(float *y, int64_t ys, const uint8_t *g, const struct r8pack *pk,
                            const uint8_t *x, size_t xst, int64_t nb, int64_t j0, int64_t nbk,
                            bool add, const int NT, const int K) {
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
    /* add: the sums go on from y's, the chain of a whole row's (a float stored and loaded
     * back is the same value): a pack's chunks then give the bits decode's one call gives,
     * so a token's outputs are the same alone or in a batch */
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = add ? _mm256_loadu_ps(y + t * ys) : _mm256_setzero_ps();
    for (int64_t j = j0; j < j0 + nbk; j++) {
        const uint8_t *b = g + wk_r8_bytes(K) * j;
        if (!pk) { /* 4 KiB ahead: at 2 KiB 1-thread decode of q4_0 / q5_0 waited on memory
                    * (the 246M yardstick, alternated: +6-26 %) */
            _mm_prefetch((const char *)b + 4096, _MM_HINT_T0);
            _mm_prefetch((const char *)b + 4096 + 64, _MM_HINT_T0);
            if (wk_r8_bytes(K) > 144) _mm_prefetch((const char *)b + 4096 + 128, _MM_HINT_T0);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        if (wk_signed(K)) { /* iq4_nl without VNNI */
            __m256i is[4];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i vl, vh, al, ah;
                if (pk) {
                    vl = _mm256_load_si256((const __m256i *)pk->v[j - j0][k]);
                    vh = _mm256_load_si256((const __m256i *)pk->v[j - j0][4 + k]);
                    al = _mm256_load_si256((const __m256i *)pk->u[j - j0][k]);
                    ah = _mm256_load_si256((const __m256i *)pk->u[j - j0][4 + k]);
                } else {
                    const __m256i c = _mm256_loadu_si256((const __m256i *)(b + r8q_qs(K) + 32 * k));
                    const __m256i m4 = _mm256_set1_epi8(0x0f);
                    vl = iq4_lookup(_mm256_and_si256(c, m4), true);
                    vh = iq4_lookup(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), true);
                    al = _mm256_abs_epi8(vl), ah = _mm256_abs_epi8(vh);
                }
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * j + 4 * k;
                    __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(xq), vl));
                    __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(xq + 16), vh));
                    is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j)), acc[t]);
            }
            continue;
        }
        __m256i u[8];
        if (pk) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) u[k] = _mm256_load_si256((const __m256i *)pk->u[j - j0][k]);
        } else {
            r8q_codes(u, b, K);
        }
        const __m256 mw = wk_has_m(K) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16))) : _mm256_setzero_ps();
        (void)mw;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst, *xq = xr + 32 * j;
            const float *xd = (const float *)(xr + 32 * nb);
            /* -OFF·Σx in the integer unit: the vector multiplier is the busy one */
            const int32_t corr = wk_off(K) ? wk_off(K) * act_q8_0_sum(xr, nb, j) : 0;
#if X86_VNNI
            /* the low and high nibbles' dots in two chains, straight into int32 */
            __m256i s = _mm256_set1_epi32(-corr), s2 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s = _mm256_dpbusd_epi32(s, u[k], bcast4(xq + 4 * k));
                s2 = _mm256_dpbusd_epi32(s2, u[4 + k], bcast4(xq + 16 + 4 * k));
            }
            s = _mm256_add_epi32(s, s2);
#else
            __m256i p = _mm256_maddubs_epi16(u[0], bcast4(xq));
            __m256i p2 = _mm256_maddubs_epi16(u[4], bcast4(xq + 16));
            if (!wk_has_qh(K)) p = _mm256_add_epi16(p, p2);
#pragma GCC unroll 4
            for (int k = 1; k < 4; k++) {
                if (wk_has_qh(K)) {
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[k], bcast4(xq + 4 * k)));
                    p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(u[4 + k], bcast4(xq + 16 + 4 * k)));
                } else {
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[k], bcast4(xq + 4 * k)));
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[4 + k], bcast4(xq + 16 + 4 * k)));
                }
            }
            __m256i s = _mm256_madd_epi16(p, ones);
            if (wk_has_qh(K)) s = _mm256_add_epi32(s, _mm256_madd_epi16(p2, ones));
            if (wk_off(K)) s = _mm256_sub_epi32(s, _mm256_set1_epi32(corr));
#endif
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j)), acc[t]);
            if (wk_has_m(K)) acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(xd + nb + j), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

/* mxfp4, 8 rows × NT tokens: q4_0's chunks (lane r = row r's values 4k.. low, 16 + 4k..
 * high), each nibble through the mxfp4 table + 12 (U mode, u = 0..24, -12·Σx from the
 * half sums); the 8 rows' E8M0 bytes become their scales in one vector (e8m0_half8; at
 * 512 bits their exponents, which VSCALEFPS applies to the token's scale).
 * Without VNNI a pair of byte products is at most 2·24·127 = 6096, so the low and the
 * high nibbles' 4 chunks each stay within int16 (24384) and are widened apart. */
X86_INLINE void r8_mxfp4_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                              int64_t nb, const int NT) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i utbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24,
                                                                   12, 11, 10, 9, 8, 6, 4, 0));
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
#if X86_W512
    const __m512i m4z = _mm512_set1_epi8(0x0f), utblz = _mm512_broadcast_i32x4(_mm256_castsi256_si128(utbl));
    (void)m4;
#endif
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *b = g + wk_r8_bytes(WK_MXFP4) * j;
        /* 4 KiB ahead (2 KiB, as q4_0, left the loads waiting) */
        _mm_prefetch((const char *)b + 4096, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 4096 + 64, _MM_HINT_T0);
        __m256i lo[4], hi[4];
#if X86_W512
        /* two chunks a register: half the vector ALU work of the unpacking, the decode's
         * limit (with the scales below: hot weights, 1 thread, 37-40 -> 42-46 GB/s), each
         * half then its own dots */
#pragma GCC unroll 2
        for (int k = 0; k < 4; k += 2) {
            const __m512i c = _mm512_loadu_si512((const void *)(b + 8 + 32 * k));
            const __m512i l = _mm512_shuffle_epi8(utblz, _mm512_and_si512(c, m4z));
            const __m512i h = _mm512_shuffle_epi8(utblz, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4z));
            lo[k] = _mm512_castsi512_si256(l), lo[k + 1] = _mm512_extracti64x4_epi64(l, 1);
            hi[k] = _mm512_castsi512_si256(h), hi[k + 1] = _mm512_extracti64x4_epi64(h, 1);
        }
        /* the scales' exponents e - 128 (e8m0_half's 2^(e-128)), applied with VSCALEFPS to
         * each token's activation scale: the product x_d · 2^(e-128) rounded once, as the
         * multiply by e8m0_half8's value rounds it */
        const __m256 ew = _mm256_cvtepi32_ps(_mm256_sub_epi32(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b)), _mm256_set1_epi32(128)));
#else
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i c = _mm256_loadu_si256((const __m256i *)(b + 8 + 32 * k));
            lo[k] = _mm256_shuffle_epi8(utbl, _mm256_and_si256(c, m4));
            hi[k] = _mm256_shuffle_epi8(utbl, _mm256_and_si256(_mm256_srli_epi16(c, 4), m4));
        }
        const __m256 dw = e8m0_half8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b)));
#endif
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst, *xq = xr + 32 * j;
            const float *xd = (const float *)(xr + 32 * nb);
            const int32_t corr = 12 * act_q8_0_sum(xr, nb, j);
#if X86_VNNI
            __m256i s = _mm256_set1_epi32(-corr), s2 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s = _mm256_dpbusd_epi32(s, lo[k], bcast4(xq + 4 * k));
                s2 = _mm256_dpbusd_epi32(s2, hi[k], bcast4(xq + 16 + 4 * k));
            }
            s = _mm256_add_epi32(s, s2);
#else
            __m256i p = _mm256_maddubs_epi16(lo[0], bcast4(xq));
            __m256i p2 = _mm256_maddubs_epi16(hi[0], bcast4(xq + 16));
#pragma GCC unroll 4
            for (int k = 1; k < 4; k++) {
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[k], bcast4(xq + 4 * k)));
                p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(hi[k], bcast4(xq + 16 + 4 * k)));
            }
            __m256i s = _mm256_add_epi32(_mm256_madd_epi16(p, ones), _mm256_madd_epi16(p2, ones));
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(corr));
#endif
#if X86_W512
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_scalef_ps(_mm256_broadcast_ss(xd + j), ew), acc[t]);
#else
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j)), acc[t]);
#endif
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

/* q4_K / q5_K, 8 rows × NT tokens. Per super-block the 8 rows' 6-bit scales and mins are
 * decoded at once from their interleaved 12 bytes (lane r = row r, ggml's packing), into
 * d·sc and dmin·m per sub-block (lanes = rows). Sub-block 2q+h of every row is chunk
 * (q, k)'s low (h = 0) or high nibbles, k = 0..7 over its 32 values, and meets the token's
 * codes as q4_0's blocks do (q5_K: bit 2q+h of the qh chunk k is the code's fifth bit,
 * codes up to 31, so the int16 sums take 4 byte dots, not 8); the mins meet the q8_1
 * rows' s = d·Σq. */
X86_INLINE void r8_qk_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                           int64_t nb, const int NT, const int K) {
    const size_t sbs = wk_r8_bytes(K), qs0 = K == WK_Q5_K ? 384 : 128;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
    const __m256i m6 = _mm256_set1_epi8(0x3f), m2 = _mm256_set1_epi8(3), mb = _mm256_set1_epi32(0xff);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *b = g + sbs * sbi;
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        const __m256 dmv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16)));
        const __m256i wa = _mm256_loadu_si256((const __m256i *)(b + 32));
        const __m256i wb = _mm256_loadu_si256((const __m256i *)(b + 64));
        const __m256i wc = _mm256_loadu_si256((const __m256i *)(b + 96));
        /* bytes 0..3 of each lane: sub-blocks 0..3 (sc03, m03) and 4..7 (sc47, m47) */
        const __m256i sc[2] = {_mm256_and_si256(wa, m6),
                               _mm256_or_si256(_mm256_and_si256(wc, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(wa, 6), m2), 4))};
        const __m256i mn[2] = {_mm256_and_si256(wb, m6),
                               _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wc, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(wb, 6), m2), 4))};
        for (int q = 0; q < 4; q++) {
            const uint8_t *c = b + qs0 + 256 * q;
            /* the 512-bit level's steps are faster: further ahead (as r8_q6_K_vnni_body).
             * A quarter of the whole super-block per step: fetching only the codes' 256
             * bytes left its head and q5_K's qh (384 of 1408 bytes) to the hardware, and
             * q5_K's 1-thread decode at 63 % of the bound */
            const int ahead = X86_W512 ? 6144 : 2048;
            for (size_t o = 0; o < sbs / 4; o += 64)
                _mm_prefetch((const char *)b + ahead + sbs / 4 * q + o, _MM_HINT_T0);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * q + h; /* the sub-block */
                const int sh = 8 * (j % 4);
                const __m256 sd = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(sc[j / 4], sh), mb)));
                const __m256 md = _mm256_mul_ps(dmv, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(mn[j / 4], sh), mb)));
                __m256i u[8];
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(c + 32 * k));
                    u[k] = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, m4);
                    if (K == WK_Q5_K) { /* bit j of each qh byte to bit 4 */
                        __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * k));
                        hb = j < 4 ? _mm256_slli_epi16(hb, 4 - j) : j > 4 ? _mm256_srli_epi16(hb, j - 4) : hb;
                        u[k] = _mm256_or_si256(u[k], _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
                    }
                }
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xr = x + t * xst, *xq = xr + 32 * (8 * sbi + j);
                    const float *xd = (const float *)(xr + 32 * nb) + 8 * sbi + j;
#if X86_VNNI
                    __m256i s32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[0], bcast4(xq));
                    __m256i s2 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[1], bcast4(xq + 4));
#pragma GCC unroll 8
                    for (int k = 2; k < 8; k += 2) {
                        s32 = _mm256_dpbusd_epi32(s32, u[k], bcast4(xq + 4 * k));
                        s2 = _mm256_dpbusd_epi32(s2, u[k + 1], bcast4(xq + 4 * k + 4));
                    }
                    s32 = _mm256_add_epi32(s32, s2);
#else
                    __m256i p = _mm256_maddubs_epi16(u[0], bcast4(xq)), p2 = _mm256_setzero_si256();
#pragma GCC unroll 8
                    for (int k = 1; k < 8; k++) {
                        __m256i e = _mm256_maddubs_epi16(u[k], bcast4(xq + 4 * k));
                        if (K == WK_Q5_K && k >= 4) p2 = _mm256_add_epi16(p2, e);
                        else p = _mm256_add_epi16(p, e);
                    }
                    __m256i s32 = _mm256_madd_epi16(p, ones);
                    if (K == WK_Q5_K) s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(p2, ones));
#endif
                    __m256 f = _mm256_cvtepi32_ps(s32);
                    acc[t] = _mm256_fmadd_ps(f, _mm256_mul_ps(sd, _mm256_broadcast_ss(xd)), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(md, _mm256_broadcast_ss(xd + nb), acc[t]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

/* q8_0, 8 rows × NT tokens: chunk k, lane r = row r's values 4k..4k+3, against the
 * token's values 4k..4k+3 in every lane. Signed weights (S mode: |w| · x·sign w, each
 * pair up to 2·127·127, widened before the sums); with VNNI, U mode (VPDPBUSD sums into
 * int32, no pair to saturate). */
X86_INLINE void r8_q8_0_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                             int64_t nb, const int NT) {
    /* Rows of 2560 values or more (a group of 8 rows 21 KiB or more) also fetch 16 KiB
     * ahead into L2. Measured from memory, 1 thread, alternated: matrices 4096 and 2880
     * wide 22-24 -> 25-28 GB/s; a 4096-wide model (4 layers, n_ff 11008) 19.8-20.6 ->
     * 24.8-25.4 t/s. Rows of 2048 or fewer read about 10 % slower with it, and mxfp4's
     * smaller blocks lost a quarter, so only here. */
    const bool wide = NT == 1 && nb >= 80;
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *b = g + wk_r8_bytes(WK_Q8_0) * j;
        /* 4 KiB ahead (2 KiB left the loads waiting: gpt-oss's q8_0 matrices, 1 thread) */
#pragma GCC unroll 5
        for (int64_t o = 0; o < wk_r8_bytes(WK_Q8_0); o += 64) /* the block's 5 lines */
            _mm_prefetch((const char *)b + 4096 + o, _MM_HINT_T0);
        if (wide)
#pragma GCC unroll 5
            for (int64_t o = 0; o < wk_r8_bytes(WK_Q8_0); o += 64)
                _mm_prefetch((const char *)b + 16384 + o, _MM_HINT_T1);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        __m256i is[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) is[t] = _mm256_setzero_si256();
#if X86_VNNI
        /* U mode: u = w + 128, and -128·Σx from the rows' half sums */
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) is[t] = _mm256_set1_epi32(-128 * act_q8_0_sum(x + t * xst, nb, j));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 16 + 32 * k)), _mm256_set1_epi8((char)0x80));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm256_dpbusd_epi32(is[t], w, bcast4(x + t * xst + 32 * j + 4 * k));
        }
#else
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * k)), aw = _mm256_abs_epi8(w);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const __m256i xs = _mm256_sign_epi8(bcast4(x + t * xst + 32 * j + 4 * k), w);
                is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
            }
        }
#endif
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const float *xd = (const float *)(x + t * xst + 32 * nb);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j)), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

/* iq4_xs, 8 rows × NT tokens. Sub-block j's chunk kk holds, in lane r, row r's values
 * 4kk.. (low nibbles) and 16 + 4kk.. (high) through the iq4_nl table, signed: S mode
 * (|w| · x·sign w, pairs widened at once; with VNNI, U mode through the table + 128).
 * The 8 rows' 6-bit scales of sub-block j come
 * from the interleaved scales_l chunk and scales_h words in 32-bit lanes. */
X86_INLINE void r8_iq4_xs_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                               int64_t nb, const int NT) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10,
                                                                  1, 13, 25, 38, 53, 69, 89, 113));
    const __m256i utbl = _mm256_xor_si256(tbl, _mm256_set1_epi8((char)0x80));
    (void)ones, (void)utbl; /* one of the two is unused at each level */
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *b = g + wk_r8_bytes(WK_IQ4_XS) * sbi;
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(b + 16)));
        const __m256i sl = _mm256_loadu_si256((const __m256i *)(b + 32));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const uint8_t *c = b + 64 + 128 * j;
            _mm_prefetch((const char *)c + 2176, _MM_HINT_T0);
            _mm_prefetch((const char *)c + 2176 + 64, _MM_HINT_T0);
            const __m256i ls = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0x0f)),
                _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4));
            const __m256 sd = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
            /* a chunk's two halves at a time into each token's int32 sum: few live
             * registers whatever NT */
            __m256i is[4];
#if X86_VNNI
            /* U mode: the table + 128, and -128·Σx from the rows' half sums */
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm256_set1_epi32(-128 * act_q8_0_sum(x + t * xst, nb, 8 * sbi + j));
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; kk++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(c + 32 * kk));
                const __m256i ul = _mm256_shuffle_epi8(utbl, _mm256_and_si256(w, m4));
                const __m256i uh = _mm256_shuffle_epi8(utbl, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j) + 4 * kk;
                    is[t] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(is[t], ul, bcast4(xq)), uh, bcast4(xq + 16));
                }
            }
#else
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; kk++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(c + 32 * kk));
                const __m256i vl = _mm256_shuffle_epi8(tbl, _mm256_and_si256(w, m4));
                const __m256i vh = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
                const __m256i al = _mm256_abs_epi8(vl), ah = _mm256_abs_epi8(vh);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j) + 4 * kk;
                    __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(xq), vl));
                    __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(xq + 16), vh));
                    is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
                }
            }
#endif
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(sd, _mm256_broadcast_ss(xd)), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

/* q6_K, q3_K and q2_K, 8 rows × NT tokens: a scale (q2_K: and an offset) per 16 values.
 * Sub-block j = 4h + k of every row, its values 4c..4c+3 (c = 0..7) in lane r:
 *   q6_K: the low (k < 2) or high nibbles of ql chunk 16h + 8(k % 2) + c, bits 2k, 2k+1 of
 *         qh chunk 8h + c on top: u = 0..63, x = d·sc·(u - 32)
 *   q3_K: bits 2k, 2k+1 of qs chunk 8h + c, bit j of hmask chunk c as 4: u = 0..7,
 *         x = d·(sc - 32)·(u - 4)
 *   q2_K: bits 2k, 2k+1 of qs chunk 8h + c: u = 0..3, x = d·sc·u - dmin·m
 * The 8 rows' scales of the sub-block's halves come as int16 pairs (sc_2j, sc_2j+1) in
 * lane r; each half's byte dots (q6_K: two per int16 sum, a pair being up to 2·63·127 =
 * 16002; else four) meet their scale in VPMADDWD. The offsets (-32, -4, the q2_K mins m)
 * are one VPMADDWD of the rows' pairs with the half sums in the q8_0 rows' s slot. A
 * super-block's sub-blocks add up in float with the activations' scales, then meet the
 * rows' d (and dmin) once. */
X86_INLINE __m256i k16_codes(const uint8_t *b, int j, int c, const int K) {
    const int h = j / 4, k = j % 4;
    if (K == WK_Q6_K) {
        __m256i l = _mm256_loadu_si256((const __m256i *)(b + 144 + 32 * (16 * h + 8 * (k % 2) + c)));
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 1168 + 32 * (8 * h + c)));
        if (k >= 2) l = _mm256_srli_epi16(l, 4);
        hb = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2) : k == 3 ? _mm256_srli_epi16(hb, 2) : hb;
        return _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi8(0x0f)), _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
    }
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + (K == WK_Q3_K ? 368 : 160) + 32 * (8 * h + c)));
    if (k) q = _mm256_srli_epi16(q, 2 * k);
    q = _mm256_and_si256(q, _mm256_set1_epi8(3));
    if (K == WK_Q3_K) {
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 112 + 32 * c));
        hb = j < 2 ? _mm256_slli_epi16(hb, 2 - j) : j > 2 ? _mm256_srli_epi16(hb, j - 2) : hb;
        q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
    }
    return q;
}

/* The 8 rows' scales of sub-block j's halves as int16 pairs in lane r (q2_K: *mp its
 * offsets m). */
X86_INLINE __m256i k16_scales(const uint8_t *b, int j, __m256i *mp, const int K) {
    if (K == WK_Q6_K) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16 + 16 * j)));
    if (K == WK_Q2_K) {
        __m256i raw = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + 32 + 16 * j)));
        *mp = _mm256_srli_epi16(raw, 4);
        return _mm256_and_si256(raw, _mm256_set1_epi16(0x0f));
    }
    /* q3_K, scale g: low 4 bits in byte g % 8 (nibble g / 8) of chunks 0-1, top 2 bits at
     * bits 2·(g / 4) of chunk 2's byte g % 4; g = 2j, 2j + 1 are neighbouring bytes */
    const int o = 8 * (2 * (j % 2));
    __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * ((j % 4) / 2)));
    __m256i hi = _mm256_loadu_si256((const __m256i *)(b + 80));
    lo = _mm256_and_si256(_mm256_srli_epi32(lo, o + 4 * (j / 4)), _mm256_set1_epi32(0x0f0f));
    hi = _mm256_and_si256(_mm256_srli_epi32(hi, o + 2 * (j / 2)), _mm256_set1_epi32(0x0303));
    const __m256i widen = _mm256_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1,
                                           0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1);
    __m256i sc = _mm256_shuffle_epi8(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), widen);
    return _mm256_sub_epi16(sc, _mm256_set1_epi16(32));
}

X86_INLINE void r8_k16_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                            int64_t nb, const int NT, const int K) {
    /* the group's super-block: wk_r8_bytes(K), spelled out because GCC schedules this body
     * differently (same value, other registers) when the size comes from wk_bytes' table */
    const size_t sbs = 8 * (K == WK_Q6_K   ? sizeof(struct block_q6_K)
                            : K == WK_Q3_K ? sizeof(struct block_q3_K)
                                           : sizeof(struct block_q2_K));
    const __m256i pick[2] = {_mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                              0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13),
                             _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                              2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15)};
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *b = g + sbs * sbi;
        __m256 sacc[4], macc[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) sacc[t] = macc[t] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            /* 4800 bytes ahead (2-3 super-blocks of q6_K): at 1200 the 256-bit level's q6_K
             * decode waited on memory (the 246M yardstick, 1 thread: 115 -> 151 t/s; q2_K
             * +10-25 %, q3_K within noise) */
            for (size_t o = 0; o < sbs / 8; o += 64) _mm_prefetch((const char *)b + 4800 + sbs / 8 * j + o, _MM_HINT_T0);
            __m256i mp = _mm256_setzero_si256();
            const __m256i sp = k16_scales(b, j, &mp, K);
            __m256i is[4];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                const __m256i sc = _mm256_shuffle_epi8(sp, pick[hf]);
                __m256i u[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) u[c] = k16_codes(b, j, 4 * hf + c, K);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j) + 16 * hf;
                    __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(u[0], bcast4(xq)),
                                                  _mm256_maddubs_epi16(u[1], bcast4(xq + 4)));
                    __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(u[2], bcast4(xq + 8)),
                                                  _mm256_maddubs_epi16(u[3], bcast4(xq + 12)));
#if X86_VNNI
                    /* VPDPWSSD: the scale's products and their sum in one */
                    is[t] = K == WK_Q6_K ? _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(is[t], p0, sc), p1, sc)
                                         : _mm256_dpwssd_epi32(is[t], _mm256_add_epi16(p0, p1), sc);
#else
                    is[t] = _mm256_add_epi32(is[t], K == WK_Q6_K ? _mm256_add_epi32(_mm256_madd_epi16(p0, sc), _mm256_madd_epi16(p1, sc))
                                                                 : _mm256_madd_epi16(_mm256_add_epi16(p0, p1), sc));
#endif
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                const __m256i hs = bcast4((const uint8_t *)(xd + nb)); /* the half sums */
                const __m256 dx = _mm256_broadcast_ss(xd);
                if (K == WK_Q2_K) macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mp, hs)), dx, macc[t]);
                else is[t] = _mm256_sub_epi32(is[t], _mm256_slli_epi32(_mm256_madd_epi16(sp, hs), K == WK_Q6_K ? 5 : 2));
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), dx, sacc[t]);
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm256_fmadd_ps(sacc[t], dv, acc[t]);
            if (K == WK_Q2_K) acc[t] = _mm256_fnmadd_ps(macc[t], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16))), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}

#if X86_VNNI && X86_W512
/* q6_K, 8 rows × NT tokens, with VPDPBUSD (the 512-bit level): the layout and codes of
 * r8_k16_body, but each half's 4 byte dots go straight into int32 (codes up to 63, no
 * pair to saturate) and meet the half's scale in one VPMULLD, where r8_k16_body spends
 * 4 VPMADDUBSW, 2 adds and 2 VPDPWSSD on them; a code is one VPTERNLOGD and one AND on
 * top of its shifts (3 ops before). Streamed decode was bound by neither: r8_k16_body's
 * prefetches, then 1200 bytes ahead, came too late for this level's faster steps (below the
 * 256-bit level's speed); they run 4 super-blocks further here. Sums: |a half's dot| <=
 * 16·63·127 and |sc| <= 128, so a sub-block's scaled sum stays below 2^25. */
X86_INLINE __m256i q6_codes_vnni(const uint8_t *b, int j, int c) {
    const int h = j / 4, k = j % 4;
    __m256i l = _mm256_loadu_si256((const __m256i *)(b + 144 + 32 * (16 * h + 8 * (k % 2) + c)));
    __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 1168 + 32 * (8 * h + c)));
    if (k >= 2) l = _mm256_srli_epi16(l, 4);
    hb = k == 0   ? _mm256_slli_epi16(hb, 4)
         : k == 1 ? _mm256_slli_epi16(hb, 2)
         : k == 3 ? _mm256_srli_epi16(hb, 2)
                  : hb;
    /* bits 0-3 from l, 4-7 from hb (0xe4: C ? A : B per bit, C the mask), then 6 bits */
    const __m256i u = _mm256_ternarylogic_epi32(l, hb, _mm256_set1_epi8(0x0f), 0xe4);
    return _mm256_and_si256(u, _mm256_set1_epi8(0x3f));
}

X86_INLINE void r8_q6_K_vnni_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x,
                                  size_t xst, int64_t nb, const int NT) {
    const size_t sbs = 8 * sizeof(struct block_q6_K);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *b = g + sbs * sbi;
        __m256 sacc[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) sacc[t] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            /* 4 super-blocks further ahead than r8_k16_body: this body's faster
             * sub-blocks outran its 1200 bytes (1 thread: 20 -> 29 GB/s streamed) */
            for (size_t o = 0; o < sbs / 8; o += 64)
                _mm_prefetch((const char *)b + 4 * sbs + 1200 + sbs / 8 * j + o, _MM_HINT_T0);
            /* lane r: (sc_2j, sc_2j+1) as int16, and each alone as int32 */
            const __m256i sp =
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16 + 16 * j)));
            const __m256i s0 = _mm256_srai_epi32(_mm256_slli_epi32(sp, 16), 16),
                          s1 = _mm256_srai_epi32(sp, 16);
            __m256i is[4][2];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t][0] = is[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m256i u = q6_codes_vnni(b, j, c);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++)
                    is[t][c / 4] = _mm256_dpbusd_epi32(
                        is[t][c / 4], u, bcast4(x + t * xst + 32 * (8 * sbi + j) + 4 * c));
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                const __m256i hs = bcast4((const uint8_t *)(xd + nb)); /* the half sums */
                __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(is[t][0], s0),
                                             _mm256_mullo_epi32(is[t][1], s1));
                s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(sp, hs), 5));
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(xd), sacc[t]);
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(sacc[t], dv, acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}
#endif

#if X86_W512
/* q3_K and q2_K, 8 rows × NT tokens at the 512-bit level: r8_k16_body's layout and sums,
 * two chunks of a half per register, chunk c in lanes 0..7 and c + 1 in lanes 8..15 (64
 * contiguous bytes of the group, so the file is still read as one stream, unlike the
 * 16-row bodies'). Each code op, byte dot and scale product then serves 2 chunks; a
 * token's 8 activation bytes go to the two halves with one VPSHUFB. The two halves of a
 * sub-block's integer sums meet before its floats. */
X86_INLINE __m512i k16_codes2(const uint8_t *b, int j, int c, const int K) {
    const int h = j / 4, k = j % 4;
    __m512i q =
        _mm512_loadu_si512((const void *)(b + (K == WK_Q3_K ? 368 : 160) + 32 * (8 * h + c)));
    if (k) q = _mm512_srli_epi16(q, 2 * k);
    if (K != WK_Q3_K) return _mm512_and_si512(q, _mm512_set1_epi8(3));
    __m512i hb = _mm512_loadu_si512((const void *)(b + 112 + 32 * c));
    hb = j < 2 ? _mm512_slli_epi16(hb, 2 - j) : j > 2 ? _mm512_srli_epi16(hb, j - 2) : hb;
    /* bits 0-1 from q, 2-7 from hb (0xe4: C ? A : B per bit, C the mask), then 3 bits */
    return _mm512_and_si512(_mm512_ternarylogic_epi32(q, hb, _mm512_set1_epi8(3), 0xe4),
                            _mm512_set1_epi8(7));
}

/* p[0..3] in every lane 0..7, p[4..7] in every lane 8..15 (ctl: pair_ctl()) */
X86_INLINE __m512i bcast4x2(const uint8_t *p, __m512i ctl) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_shuffle_epi8(_mm512_set1_epi64(v), ctl);
}
X86_INLINE __m512i pair_ctl(void) {
    return _mm512_set_epi32(0x07060504, 0x07060504, 0x07060504, 0x07060504, 0x07060504, 0x07060504,
                            0x07060504, 0x07060504, 0x03020100, 0x03020100, 0x03020100, 0x03020100,
                            0x03020100, 0x03020100, 0x03020100, 0x03020100);
}

X86_INLINE void r8w_k16_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                             int64_t nb, const int NT, const int K) {
    const size_t sbs = 8 * (K == WK_Q3_K ? sizeof(struct block_q3_K) : sizeof(struct block_q2_K));
    const __m512i pick[2] = {
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13)),
        _mm512_broadcast_i32x4(
            _mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15))};
    const __m512i ctl = pair_ctl();
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t sbi = 0; sbi < nb / 8; sbi++) {
        const uint8_t *b = g + sbs * sbi;
        __m256 sacc[4], macc[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) sacc[t] = macc[t] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            for (size_t o = 0; o < sbs / 8; o += 64)
                _mm_prefetch((const char *)b + 4800 + sbs / 8 * j + o, _MM_HINT_T0);
            __m256i mp = _mm256_setzero_si256();
            const __m256i sp = k16_scales(b, j, &mp, K);
            const __m512i sp2 = _mm512_broadcast_i64x4(sp);
            __m512i is[4];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int hf = 0; hf < 2; hf++) {
                const __m512i sc = _mm512_shuffle_epi8(sp2, pick[hf]);
                const __m512i u0 = k16_codes2(b, j, 4 * hf, K),
                              u1 = k16_codes2(b, j, 4 * hf + 2, K);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = x + t * xst + 32 * (8 * sbi + j) + 16 * hf;
                    const __m512i p =
                        _mm512_add_epi16(_mm512_maddubs_epi16(u0, bcast4x2(xq, ctl)),
                                         _mm512_maddubs_epi16(u1, bcast4x2(xq + 8, ctl)));
                    is[t] = _mm512_dpwssd_epi32(is[t], p, sc);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *xd = (const float *)(x + t * xst + 32 * nb) + 8 * sbi + j;
                const __m256i hs = bcast4((const uint8_t *)(xd + nb)); /* the half sums */
                const __m256 dx = _mm256_broadcast_ss(xd);
                /* the two chunks' halves added as integers (exact), so that the floats
                 * are r8_k16_body's and the 16-row body's (x86-rows16.h): a token's
                 * outputs the same bits decoded alone or in a batch */
                __m256i it = _mm256_add_epi32(_mm512_castsi512_si256(is[t]),
                                              _mm512_extracti64x4_epi64(is[t], 1));
                if (K == WK_Q2_K)
                    macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mp, hs)), dx,
                                              macc[t]);
                else
                    it = _mm256_sub_epi32(it, _mm256_slli_epi32(_mm256_madd_epi16(sp, hs), 2));
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(it), dx, sacc[t]);
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm256_fmadd_ps(sacc[t], dv, acc[t]);
            if (K == WK_Q2_K)
                acc[t] = _mm256_fnmadd_ps(
                    macc[t], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16))), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + t * ys, acc[t]);
}
#endif

/* A group of 8 rows × nt tokens: 4 tokens at a time (their weights unpacked once), then
 * the 1-3 left. */
X86_INLINE void r8_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                        int64_t nb, const int NT, const int K) {
    if (K == WK_Q4_0 || K == WK_IQ4_NL || K == WK_Q4_1 || K == WK_Q5_0 || K == WK_Q5_1)
        r8_q32_body(y, ys, g, NULL, x, xst, nb, 0, nb, false, NT, K);
    else if (K == WK_MXFP4) r8_mxfp4_body(y, ys, g, x, xst, nb, NT);
    else if (K == WK_Q8_0) r8_q8_0_body(y, ys, g, x, xst, nb, NT);
    else if (K == WK_IQ4_XS) r8_iq4_xs_body(y, ys, g, x, xst, nb, NT);
#if X86_VNNI && X86_W512
    else if (K == WK_Q6_K)
        r8_q6_K_vnni_body(y, ys, g, x, xst, nb, NT);
#endif
#if X86_W512
    else if (K == WK_Q3_K || K == WK_Q2_K) r8w_k16_body(y, ys, g, x, xst, nb, NT, K);
#endif
    else if (K == WK_Q6_K || K == WK_Q3_K || K == WK_Q2_K) r8_k16_body(y, ys, g, x, xst, nb, NT, K);
    else r8_qk_body(y, ys, g, x, xst, nb, NT, K);
}


#if !X86_W512
/* Kinds whose prefill runs faster through struct r8pack (measured with 64 tokens: the file's
 * rows' ipack was faster than their unpacking per 4-token step) */
X86_INLINE bool r8_prefill_pack(int k) { return k == WK_IQ4_NL || k == WK_Q5_0 || k == WK_Q5_1; }

/* Prefill of a rows8 group through r8pack: every R8P_BLOCKS blocks, the codes unpacked once,
 * then 4 tokens at a time and the 1-3 left. */
X86_INLINE void tile8_pack(float *y, int64_t ys, const uint8_t *g, const uint8_t *xb, size_t xst,
                           int64_t n, int nt, const int K) {
    struct r8pack pack;
    const int64_t nb = n / 32;
    for (int64_t j0 = 0; j0 < nb; j0 += R8P_BLOCKS) {
        const int64_t nbk = nb - j0 < R8P_BLOCKS ? nb - j0 : R8P_BLOCKS;
        const bool add = j0 > 0;
        r8pack_fill(&pack, g, j0, nbk, K);
        int t = 0;
        for (; t + 4 <= nt; t += 4) r8_q32_body(y + t * ys, ys, g, &pack, xb + t * xst, xst, nb, j0, nbk, add, 4, K);
        switch (nt - t) {
        case 3: r8_q32_body(y + t * ys, ys, g, &pack, xb + t * xst, xst, nb, j0, nbk, add, 3, K); break;
        case 2: r8_q32_body(y + t * ys, ys, g, &pack, xb + t * xst, xst, nb, j0, nbk, add, 2, K); break;
        case 1: r8_q32_body(y + t * ys, ys, g, &pack, xb + t * xst, xst, nb, j0, nbk, add, 1, K); break;
        default: break;
        }
    }
}
#endif

X86_INLINE void tile8(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                      int nt, const int K) {
    const uint8_t *xb = x;
#if !X86_W512
    if (nt >= 4 && r8_prefill_pack(K)) {
        tile8_pack(y, ys, g, xb, xst, n, nt, K);
        return;
    }
#endif
    int t = 0;
    for (; t + 4 <= nt; t += 4) r8_body(y + t * ys, ys, g, xb + t * xst, xst, n / 32, 4, K);
    switch (nt - t) {
    case 3: r8_body(y + t * ys, ys, g, xb + t * xst, xst, n / 32, 3, K); break;
    case 2: r8_body(y + t * ys, ys, g, xb + t * xst, xst, n / 32, 2, K); break;
    case 1: r8_body(y + t * ys, ys, g, xb + t * xst, xst, n / 32, 1, K); break;
    default: break;
    }
}
