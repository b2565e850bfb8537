/* Part of x86-kernels.h: the vector primitives of a step, the unit of work of the bodies
 * that unpack the file's rows (x86-decode.h, x86-prefill.h). A step is STEP blocks: one
 * in a 256-bit register, two side by side in a 512-bit one (vi: int8 codes and int32
 * sums, vq: their f32 lanes), so the bodies are written once for both levels. Then a
 * token's view of a step (struct xstep) and its dot with a step of weights (step_acc). */

#if X86_W512
#define STEP 2
typedef __m512i vi;
typedef __m512 vq; /* f32 lanes of a quant step */
X86_INLINE vi vi_zero(void) { return _mm512_setzero_si512(); }
X86_INLINE vi vi_set1_8(int c) { return _mm512_set1_epi8((char)c); }
X86_INLINE vi vi_sub32(vi a, vi b) { return _mm512_sub_epi32(a, b); }
/* s blocks (1 or 2) of 32 bytes; the missing half reads as zero (no access) */
X86_INLINE vi vi_load(const uint8_t *p, int s) {
    return s == 2 ? _mm512_loadu_si512(p) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)p));
}
X86_INLINE vi vi_from2(__m256i a, __m256i b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}
X86_INLINE vi vi_dot(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
X86_INLINE vi vi_abs8(vi a) { return _mm512_abs_epi8(a); }
X86_INLINE vi vi_sign8(vi x, vi q) { /* x · sign(q); unused: VNNI levels use U mode */
    vi neg = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(q), vi_zero(), x);
    return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(q, q), neg);
}
/* lanes 0..7 = a (block 0), lanes 8..15 = b (block 1) */
X86_INLINE vq vq_pair(float a, float b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)),
                                               _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}
X86_INLINE vq vq_load(const float *p, int s) { /* p unaligned-safe via memcpy */
    if (s == 1) return _mm512_zextps256_ps512(_mm256_set1_ps(f32_load(p)));
    double two;
    memcpy(&two, p, sizeof(two));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(_mm_castpd_ps(_mm_set_sd(two))));
}
/* 2·s floats (da, db per block) spread over the lanes: 4 lanes each */
X86_INLINE vq vq_halves(const float *p, int s) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    if (s == 2) return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(p)));
    __m128 v = _mm_castpd_ps(_mm_load_sd((const double *)p));
    return _mm512_maskz_permutexvar_ps(0x00ff, idx, _mm512_castps128_ps512(v));
}
X86_INLINE vq vq_zero(void) { return _mm512_setzero_ps(); }
#define VQ_N 16
X86_INLINE vq vq_loadu(const float *p) { return _mm512_loadu_ps(p); }
X86_INLINE vq vq_cvt(vi a) { return _mm512_cvtepi32_ps(a); }
X86_INLINE vq vq_mul(vq a, vq b) { return _mm512_mul_ps(a, b); }
X86_INLINE vq vq_fma(vq a, vq b, vq c) { return _mm512_fmadd_ps(a, b, c); }
X86_INLINE float vq_hsum(vq a) { return _mm512_reduce_add_ps(a); }

/* Two fp16 (at p and p + stride) widened into lanes 0..7 and 8..15. */
X86_INLINE vq vq_pair_f16(const uint8_t *p, size_t stride, float scale) {
    uint16_t a, b;
    memcpy(&a, p, 2);
    memcpy(&b, p + stride, 2);
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | (uint32_t)b << 16)));
    if (scale != 1.0f) f = _mm_mul_ps(f, _mm_set1_ps(scale));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(f));
}

/* Nibbles of two blocks (16 bytes each at p and p + stride) in value order:
 * [b0 low | b0 high | b1 low | b1 high]. */
X86_INLINE vi nibbles2_unpack(const uint8_t *p, size_t stride) {
    __m256i t = _mm256_loadu2_m128i((const __m128i *)(p + stride), (const __m128i *)p);
    vi z = _mm512_broadcast_i64x4(t);
    z = _mm512_mask_srli_epi16(z, 0xffff0000u, z, 4);
    z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Fifth bits of two q5 blocks as 0x10 bytes, in value order. */
X86_INLINE vi qh2_unpack(const uint8_t *p, size_t stride) {
    uint32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, p + stride, 4);
    return _mm512_maskz_mov_epi8((__mmask64)a | (__mmask64)b << 32, _mm512_set1_epi8(0x10));
}

/* Blocks wb and wb + wbs of kind K: codes as wblock_unpack, d and m/8 in lane halves. */
X86_INLINE vi wblock2_unpack(const uint8_t *wb, size_t wbs, const int K, vq *ret_d, vq *ret_m) {
    *ret_d = K == WK_MXFP4 ? vq_pair(e8m0_half(wb[0]), e8m0_half(wb[wbs])) : vq_pair_f16(wb, wbs, 1.0f);
    if (wk_has_m(K)) *ret_m = vq_pair_f16(wb + 2, wbs, 0.125f);
    switch (K) {
    case WK_Q8_0: {
        __m256i a = _mm256_loadu_si256((const __m256i *)(wb + 2));
        __m256i b = _mm256_loadu_si256((const __m256i *)(wb + wbs + 2));
        return _mm512_xor_si512(vi_from2(a, b), _mm512_set1_epi8((char)0x80));
    }
    case WK_Q4_0: return nibbles2_unpack(wb + 2, wbs);
    case WK_Q4_1: return nibbles2_unpack(wb + 4, wbs);
    case WK_Q5_0: return _mm512_or_si512(nibbles2_unpack(wb + 6, wbs), qh2_unpack(wb + 2, wbs));
    case WK_Q5_1: return _mm512_or_si512(nibbles2_unpack(wb + 8, wbs), qh2_unpack(wb + 4, wbs));
    case WK_MXFP4: {
        const __m128i tbl = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(tbl), nibbles2_unpack(wb + 1, wbs));
    }
    default: {
        const __m128i tbl = _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                          (char)153, (char)166, (char)181, (char)197, (char)217,
                                          (char)241);
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(tbl), nibbles2_unpack(wb + 2, wbs));
    }
    }
}
#else
#define STEP 1
typedef __m256i vi;
typedef __m256 vq;
X86_INLINE vi vi_zero(void) { return _mm256_setzero_si256(); }
X86_INLINE vi vi_set1_8(int c) { return _mm256_set1_epi8((char)c); }
X86_INLINE vi vi_sub32(vi a, vi b) { return _mm256_sub_epi32(a, b); }
X86_INLINE vi vi_load(const uint8_t *p, int s) { return _mm256_loadu_si256((const __m256i *)p); }
/* Without VNNI the 16-bit pair sums of PMADDUBSW must not saturate: callers keep u·s
 * pairs below 2^15 (U mode only with u <= 31 or s's sums bounded, see wk_signed). */
X86_INLINE vi vi_dot(vi acc, vi u, vi s) {
#if X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}
X86_INLINE vi vi_abs8(vi a) { return _mm256_abs_epi8(a); }
X86_INLINE vi vi_sign8(vi x, vi q) { return _mm256_sign_epi8(x, q); }
X86_INLINE vq vq_load(const float *p, int s) { return _mm256_set1_ps(f32_load(p)); }
X86_INLINE vq vq_halves(const float *p, int s) {
    return _mm256_set_m128(_mm_set1_ps(p[1]), _mm_set1_ps(p[0]));
}
X86_INLINE vq vq_zero(void) { return _mm256_setzero_ps(); }
#define VQ_N 8
X86_INLINE vq vq_loadu(const float *p) { return _mm256_loadu_ps(p); }
X86_INLINE vq vq_cvt(vi a) { return _mm256_cvtepi32_ps(a); }
X86_INLINE vq vq_mul(vq a, vq b) { return _mm256_mul_ps(a, b); }
X86_INLINE vq vq_fma(vq a, vq b, vq c) { return _mm256_fmadd_ps(a, b, c); }
X86_INLINE float vq_hsum(vq a) { return hsum256(a); }
#endif

/* One token's view of step j (s blocks): codes, the -OFF·Σx correction, d and s. The
 * s lanes are scaled by 1/8 (exact): every block's m·s lands in 8 lanes. q2_K: xsum =
 * d·Σx per 4 codes (lanes as the codes' dot, so its halves meet their offsets). */
struct xstep {
    vi q, corr;
    vq d, s, xsum;
};

X86_INLINE void xstep_load(struct xstep *xs, const uint8_t *xrow, int64_t nb, int64_t j, int s,
                           const int K, const bool need_s) {
    const float *d = (const float *)(xrow + 32 * nb) + j;
    xs->q = vi_load(xrow + 32 * j, s);
    xs->d = vq_load(d, s);
    xs->corr = vi_zero();
    if (wk_has_m(K) && need_s) xs->s = vq_load(d + nb, s);
    if (!wk_signed(K) && wk_off(K))
        xs->corr = vi_sub32(vi_zero(), vi_dot(vi_zero(), vi_set1_8(wk_off(K)), xs->q));
    if (wk_has_m2(K)) xs->xsum = vq_mul(vq_cvt(vi_dot(vi_zero(), vi_set1_8(1), xs->q)), xs->d);
}

/* acc += Σ over the step's blocks of d_w·d_x·(u·x) (+ m·s when with_m; + the per-half
 * offsets mh (lanes as dw) times xsum for q2_K) */
X86_INLINE vq step_acc(vq acc, vi u, vq dw, vq mw, vq mh, const struct xstep *xs, const int K,
                       const bool with_m) {
    vi p = wk_signed(K) ? vi_dot(vi_zero(), vi_abs8(u), vi_sign8(xs->q, u)) : vi_dot(xs->corr, u, xs->q);
    acc = vq_fma(vq_cvt(p), vq_mul(dw, xs->d), acc);
    if (wk_has_m(K) && with_m) acc = vq_fma(mw, xs->s, acc);
    if (wk_has_m2(K)) acc = vq_fma(mh, xs->xsum, acc);
    return acc;
}
