/* Part of x86-kernels.h (the x86 SIMD kernels' body, compiled once per level): the kinds
 * of quantized weights the bodies are specialised for (enum wkind, a compile-time constant
 * K in every body, so each branch on it folds away) and their facts, the sizes taken from
 * the block structs of kernels/types.h; then the scalar loads and the horizontal sum that
 * every later part uses. */

/* k-quants (q4_K, q5_K, q6_K) are handled as their 32-value sub-blocks: q4_K/q5_K like
 * q4_1 (scale d·sc_j, offset -dmin·m_j, q8_1 activations), q6_K like q5_0 with 6-bit
 * codes (OFF 32) and one scale per 16 values, hence two scales (da, db) per block.
 * q3_K is q6_K's shape with 3-bit codes (OFF 4), iq4_xs iq4_nl's with a scale per
 * sub-block; q2_K has an offset per 16 values, so its term is Σ over each half of
 * m_half·(d_x·Σq_x), the half sums taken per step (xstep.xsum) next to the codes' dot. */
enum wkind {
    WK_Q8_0, WK_Q4_0, WK_Q4_1, WK_Q5_0, WK_Q5_1, WK_IQ4_NL, WK_MXFP4, WK_Q4_K, WK_Q5_K,
    WK_Q6_K, WK_Q2_K, WK_Q3_K, WK_IQ4_XS
};

/* Every kind's block is 32 values (a step of the planar activation rows, see the top of
 * x86-kernels.h), a k-quant's super-block 8 of them: the bodies count in both. */
static_assert(QK8_0 == 32 && QK4_0 == 32 && QK4_1 == 32 && QK5_0 == 32 && QK5_1 == 32 &&
                  QK4_NL == 32 && QK_MXFP4 == 32 && QK8_1 == 32,
              "a block is 32 values");
static_assert(QK_K == 8 * 32, "a k-quant super-block is 8 blocks of 32 values");

/* bytes per weight block (per super-block of 8 blocks for k-quants) */
X86_INLINE size_t wk_bytes(int k) {
    static const size_t b[] = {
        [WK_Q8_0] = sizeof(struct block_q8_0), [WK_Q4_0] = sizeof(struct block_q4_0),
        [WK_Q4_1] = sizeof(struct block_q4_1), [WK_Q5_0] = sizeof(struct block_q5_0),
        [WK_Q5_1] = sizeof(struct block_q5_1), [WK_IQ4_NL] = sizeof(struct block_iq4_nl),
        [WK_MXFP4] = sizeof(struct block_mxfp4),
        [WK_Q4_K] = sizeof(struct block_q4_K), [WK_Q5_K] = sizeof(struct block_q5_K),
        [WK_Q6_K] = sizeof(struct block_q6_K), [WK_Q2_K] = sizeof(struct block_q2_K),
        [WK_Q3_K] = sizeof(struct block_q3_K), [WK_IQ4_XS] = sizeof(struct block_iq4_xs),
    };
    return b[k];
}
/* bytes per block of a rows8 group (kernels/types.h, enum kern_layout): its 8 rows';
 * signed, as the block indices it scales */
X86_INLINE int64_t wk_r8_bytes(int k) { return 8 * (int64_t)wk_bytes(k); }
/* offset of the codes' zero (U mode); mxfp4's values -12..12 become 0..24 */
X86_INLINE int wk_off(int k) {
    static const int o[] = {
        [WK_Q8_0] = 128, [WK_Q4_0] = 8,     [WK_Q4_1] = 0, [WK_Q5_0] = 16,
        [WK_Q5_1] = 0,   [WK_IQ4_NL] = 128, [WK_MXFP4] = 12, [WK_Q4_K] = 0, [WK_Q5_K] = 0,
        [WK_Q6_K] = 32,  [WK_Q2_K] = 0,     [WK_Q3_K] = 4, [WK_IQ4_XS] = 128,
    };
    return o[k];
}
/* a k-quant: its blocks are super-blocks */
X86_INLINE bool wk_is_k(int k) { return k >= WK_Q4_K; }
/* an offset m per block */
X86_INLINE bool wk_has_m(int k) {
    return k == WK_Q4_1 || k == WK_Q5_1 || k == WK_Q4_K || k == WK_Q5_K;
}
/* a fifth bit per code in qh (q5_0, q5_1) */
X86_INLINE bool wk_has_qh(int k) { return k == WK_Q5_0 || k == WK_Q5_1; }
/* S mode (signed values): PMADDUBSW would saturate on U mode's codes up to 255 (with
 * VNNI every U mode dot is a VPDPBUSD) */
X86_INLINE bool wk_signed(int k) {
    return !X86_VNNI && (k == WK_Q8_0 || k == WK_IQ4_NL || k == WK_IQ4_XS);
}
/* an offset per 16 values (q2_K) */
X86_INLINE bool wk_has_m2(int k) { return k == WK_Q2_K; }
/* k-quants with a super-block decode kernel (kdirect_body) */
X86_INLINE bool wk_kdirect(int k) {
    return k == WK_Q4_K || k == WK_Q5_K || k == WK_Q6_K || (!X86_W512 && wk_is_k(k));
}

X86_INLINE float f16_load(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
}
/* kern_e8m0_half, inlined: 2^(e-128) */
X86_INLINE float e8m0_half(uint8_t e) {
    uint32_t u = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
/* The same for 8 bytes e in 32-bit lanes (e8m0_half's bits, blended) */
X86_INLINE __m256 e8m0_half8(__m256i e) {
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, norm, big));
}
X86_INLINE float f32_load(const void *p) {
    float f;
    memcpy(&f, p, sizeof(f));
    return f;
}

X86_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
