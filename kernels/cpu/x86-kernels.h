/* The body of the x86 SIMD kernels, compiled once per level: kernels/cpu/x86-avx2.c and
 * x86-avx512.c include it inside a target region (GCC or clang pragma) after defining
 *   X86_SFX(name)  name with the level's suffix
 *   X86_VNNI       1: int8 dot products with VPDPBUSD (AVX512-VNNI + VL), 0: PMADDUBSW
 *   X86_W512       1: 512-bit registers (two quant blocks per step), 0: 256-bit (one)
 * Nothing here runs unless kern_init() saw the level's features.
 *
 * Activations (q8_0 / q8_1) are kept in a planar row layout private to these levels:
 *   qs[nb][32] int8 | d[nb] f32 | s[nb] f32   (nb = n / 32; d, s = the fp16 values of
 * the reference blocks, widened), so that a step loads 64 contiguous bytes of codes and
 * its scales without any fp16 conversion. q8_0 rows, which have no s, keep there the
 * codes' sums over values 0..15 and 16..31 as two int16 (low, high).
 *
 * Quantized weights: every block is unpacked to 32 bytes in natural value order. Two ways
 * to feed the unsigned×signed byte dot (VPDPBUSD / PMADDUBSW):
 *   U: unsigned codes u = value + OFF (q4_0: OFF 8, q5_0: 16, q8_0/iq4_nl: 128,
 *      q4_1/q5_1: 0), and Σ u·x is corrected by -OFF·Σx, computed once per token step;
 *   S: signed values v, Σ |v|·(x·sign v) — for PMADDUBSW when u could reach 255, where its
 *      16-bit pair sums would saturate (q8_0 and iq4_nl without VNNI).
 * Each block's integer lanes are converted to f32 and accumulated with d_w·d_x; q4_1 and
 * q5_1 add m·s (s = d_x·Σq_x). Tiles of 4 rows × several tokens first unpack the 4 rows
 * into a small pack (64 blocks at a time) and then run 4×4 register tiles over it, so
 * the unpacking is paid once per up to KERN_TILE_TOKS tokens; single tokens (decode)
 * unpack as they go. The 256-bit level (16 registers) packs the 4 rows interleaved
 * instead (ipack: one register holds 4 rows, see ipack_body), decodes k-quants a
 * super-block at a time (kdirect_body) and runs float tiles of 4 rows × 3 tokens. Rows8
 * weights (kernels/ref/matmul.h) run 8 rows per register (r8_body); the 512-bit level's
 * prefill of q4_0 and the k-quants runs 16, two groups side by side (x86-rows16.h). */
#include <immintrin.h>
#include <string.h>

#define X86_INLINE static inline __attribute__((always_inline))

/* k-quants (q4_K, q5_K, q6_K) are handled as their 32-value sub-blocks: q4_K/q5_K like
 * q4_1 (scale d·sc_j, offset -dmin·m_j, q8_1 activations), q6_K like q5_0 with 6-bit
 * codes (OFF 32) and one scale per 16 values, hence two scales (da, db) per block.
 * q3_K is q6_K's shape with 3-bit codes (OFF 4), iq4_xs iq4_nl's with a scale per
 * sub-block; q2_K has an offset per 16 values, so its term is Σ over each half of
 * m_half·(d_x·Σq_x), the half sums taken per step (xstep.xsum) next to the codes' dot. */
enum wkind {
    WK_Q8_0, WK_Q4_0, WK_Q4_1, WK_Q5_0, WK_Q5_1, WK_IQ4_NL, WK_Q4_K, WK_Q5_K, WK_Q6_K,
    WK_Q2_K, WK_Q3_K, WK_IQ4_XS
};

enum {
    PACK_BLOCKS = 64, /* blocks of 4 rows unpacked at a time: 8 KiB of codes */
};

/* bytes per weight block (per super-block of 8 blocks for k-quants), offset of the codes'
 * zero, whether it carries m */
X86_INLINE size_t wk_bytes(int k) {
    static const size_t b[] = {34, 18, 20, 22, 24, 18, 144, 176, 210, 84, 110, 136};
    return b[k];
}
X86_INLINE int wk_off(int k) {
    static const int o[] = {128, 8, 0, 16, 0, 128, 0, 0, 32, 0, 4, 128};
    return o[k];
}
X86_INLINE bool wk_is_k(int k) { return k >= WK_Q4_K; }
X86_INLINE bool wk_has_m(int k) {
    return k == WK_Q4_1 || k == WK_Q5_1 || k == WK_Q4_K || k == WK_Q5_K;
}
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

/* ---- one block, 256-bit: the unpackers ----------------------------------------------- */

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

/* Unpacks weight block wb of kind K into 32 codes (U) or signed values (S) in value
 * order, its d and its m. */
X86_INLINE __m256i wblock_unpack(const uint8_t *wb, const int K, float *ret_d, float *ret_m) {
    *ret_d = f16_load(wb);
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

/* ---- vector primitives of a step (STEP blocks) ----------------------------------------- */

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
    *ret_d = vq_pair_f16(wb, wbs, 1.0f);
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

/* ---- the pack: 4 rows × up to PACK_BLOCKS blocks, unpacked -------------------------- */

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
            /* one tile ahead: the same place in the next 4 rows, which the hardware
             * prefetcher (following each row's own stream) would fetch too late */
            _mm_prefetch((const char *)wb + 4 * wst, _MM_HINT_T0);
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
            _mm_prefetch((const char *)sb + 4 * wst, _MM_HINT_T0);
            _mm_prefetch((const char *)sb + 4 * wst + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)sb + 4 * wst + 128, _MM_HINT_T0);
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
            /* one tile ahead, as direct_body */
            for (size_t o = 0; o < sbs; o += 64) _mm_prefetch((const char *)sb + 4 * wst + o, _MM_HINT_T0);
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
                    __m256i v = iq4_lookup(nibbles_unpack(sb + 8 + 16 * j), wk_signed(K));
                    __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 32 * j));
                    __m256i p = wk_signed(K) ? _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(x, v))
                                             : _mm256_maddubs_epi16(v, x);
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

/* Decode and edges: k-quants by super-block where the level has it. */
X86_INLINE void any_direct_body(float *y, const uint8_t *w, size_t wst, const uint8_t *xrow,
                                int64_t nb, const int NR, const int K) {
    if (wk_kdirect(K)) {
        kdirect_body(y, w, wst, xrow, nb, NR, K);
        return;
    }
    direct_body(y, w, wst, xrow, nb, NR, K);
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

#define X86_QTILE(name, K)                                                                  \
    static void X86_SFX(tile_##name)(float *y, int64_t ys, const void *w, size_t wst,       \
                                     const void *x, size_t xst, int64_t n, int nr, int nt) { \
        qtile(y, ys, w, wst, x, xst, n, nr, nt, K);                                          \
    }
X86_QTILE(q8_0, WK_Q8_0)
X86_QTILE(q4_0, WK_Q4_0)
X86_QTILE(q4_1, WK_Q4_1)
X86_QTILE(q5_0, WK_Q5_0)
X86_QTILE(q5_1, WK_Q5_1)
X86_QTILE(iq4_nl, WK_IQ4_NL)
X86_QTILE(q4_K, WK_Q4_K)
X86_QTILE(q5_K, WK_Q5_K)
X86_QTILE(q6_K, WK_Q6_K)
X86_QTILE(q2_K, WK_Q2_K)
X86_QTILE(q3_K, WK_Q3_K)
X86_QTILE(iq4_xs, WK_IQ4_XS)
#undef X86_QTILE

/* ---- rows8 weights (kernels/matmul.h): lanes are rows -------------------------------- */

/* q4_0, 8 rows × NT tokens over all nb blocks of group g. Chunk k of a block holds, in
 * lane r, row r's values 4k..4k+3 (low nibbles) and 16+4k..16+4k+3 (high nibbles): each
 * meets the token's 4 codes broadcast to every lane, so lane r sums row r's dot and the
 * block's 8 scales are one fp16 load. Codes u = q (0..15) against |x| <= 127: a pair is
 * at most 3810, the 16 of a block's 8 byte dots 30480, within int16; -8·Σx comes from the
 * half sums in the q8_0 rows' s slot. */
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

X86_INLINE void r8_q4_0_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                             int64_t nb, const int NT) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *b = g + 144 * j;
        _mm_prefetch((const char *)b + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 64, _MM_HINT_T0);
        __m256i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i c = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * k));
            lo[k] = _mm256_and_si256(c, m4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const uint8_t *xr = x + t * xst, *xq = xr + 32 * j;
            const float *xd = (const float *)(xr + 32 * nb);
            /* -8·Σx in the integer unit: the vector multiplier is the busy one */
            const int32_t corr = 8 * act_q8_0_sum(xr, nb, j);
#if X86_VNNI
            /* the low and high nibbles' dots in two chains, straight into int32 */
            __m256i s = _mm256_set1_epi32(-corr), s2 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s = _mm256_dpbusd_epi32(s, lo[k], bcast4(xq + 4 * k));
                s2 = _mm256_dpbusd_epi32(s2, hi[k], bcast4(xq + 16 + 4 * k));
            }
            s = _mm256_add_epi32(s, s2);
#else
            __m256i p = _mm256_maddubs_epi16(lo[0], bcast4(xq));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[0], bcast4(xq + 16)));
#pragma GCC unroll 4
            for (int k = 1; k < 4; k++) {
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[k], bcast4(xq + 4 * k)));
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[k], bcast4(xq + 16 + 4 * k)));
            }
            __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(p, ones), _mm256_set1_epi32(corr));
#endif
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + j)), acc[t]);
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
    const size_t sbs = K == WK_Q5_K ? 1408 : 1152, qs0 = K == WK_Q5_K ? 384 : 128;
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
            _mm_prefetch((const char *)c + 2048, _MM_HINT_T0);
            _mm_prefetch((const char *)c + 2048 + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)c + 2048 + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)c + 2048 + 192, _MM_HINT_T0);
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
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* the VNNI bodies sum in VPDPBUSD */
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *b = g + 272 * j;
        _mm_prefetch((const char *)b + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 192, _MM_HINT_T0);
        _mm_prefetch((const char *)b + 2048 + 256, _MM_HINT_T0);
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
        const uint8_t *b = g + 1088 * sbi;
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
    const size_t sbs = K == WK_Q6_K ? 1680 : K == WK_Q3_K ? 880 : 672;
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
            for (size_t o = 0; o < sbs / 8; o += 64) _mm_prefetch((const char *)b + 1200 + sbs / 8 * j + o, _MM_HINT_T0);
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

/* A group of 8 rows × nt tokens: 4 tokens at a time (their weights unpacked once), then
 * the 1-3 left. */
X86_INLINE void r8_body(float *y, int64_t ys, const uint8_t *g, const uint8_t *x, size_t xst,
                        int64_t nb, const int NT, const int K) {
    if (K == WK_Q4_0) r8_q4_0_body(y, ys, g, x, xst, nb, NT);
    else if (K == WK_Q8_0) r8_q8_0_body(y, ys, g, x, xst, nb, NT);
    else if (K == WK_IQ4_XS) r8_iq4_xs_body(y, ys, g, x, xst, nb, NT);
    else if (K == WK_Q6_K || K == WK_Q3_K || K == WK_Q2_K) r8_k16_body(y, ys, g, x, xst, nb, NT, K);
    else r8_qk_body(y, ys, g, x, xst, nb, NT, K);
}

#if X86_W512
#include "kernels/cpu/x86-rows16.h"
#endif

#if !X86_W512
/* Types whose prefill runs faster through the interleaved pack of the file's rows (the
 * table look-ups, the codes of 3, 5 and 6 bits; measured with 64 tokens): rows8 serves
 * their decode. */
X86_INLINE bool r8_prefill_ipack(int k) {
    return k == WK_Q3_K || k == WK_Q5_K || k == WK_Q6_K || k == WK_IQ4_XS;
}

/* Prefill of a rows8 group through ipack_body: every PACK_BLOCKS blocks, the 8 rows' blocks
 * in the file's layout (kern_rows8_blocks) fill the pack of rows 0-3 and then of 4-7. */
X86_INLINE void tile8_ipack(float *y, int64_t ys, const void *g, const uint8_t *xb, size_t xst,
                            int64_t n, int nt, const int K) {
    enum { ROW_CHUNK = PACK_BLOCKS / 8 * 210 }; /* PACK_BLOCKS values' blocks, the largest kind */
    _Alignas(32) uint8_t rows[8][ROW_CHUNK];
    struct ipack pack;
    const int64_t nb = n / 32, per = wk_is_k(K) ? 8 : 1; /* 32-value blocks per type block */
    const enum kern_type wt = K == WK_Q3_K   ? KERN_TYPE_Q3_K
                              : K == WK_Q5_K ? KERN_TYPE_Q5_K
                              : K == WK_Q6_K ? KERN_TYPE_Q6_K
                                             : KERN_TYPE_IQ4_XS;
    for (int64_t j0 = 0; j0 < nb; j0 += PACK_BLOCKS) {
        int64_t nbk = nb - j0 < PACK_BLOCKS ? nb - j0 : PACK_BLOCKS;
        kern_rows8_blocks(wt, rows[0], ROW_CHUNK, g, j0 / per, nbk / per);
        for (int h = 0; h < 2; h++) {
            ipack_fill(&pack, rows[4 * h], ROW_CHUNK, 0, nbk, K);
            ipack_tokens(y + 4 * h, ys, &pack, nbk, xb, xst, nb, j0, nt, K);
        }
    }
}
#endif

X86_INLINE void tile8(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                      int nt, const int K) {
    const uint8_t *xb = x;
#if !X86_W512
    if (nt >= 4 && r8_prefill_ipack(K)) {
        tile8_ipack(y, ys, g, xb, xst, n, nt, K);
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

/* the level's tile8 entry points: drv (tile8, ftile8) for the type K (a wkind, an fkind) */
#define X86_TILE8(name, drv, K)                                                             \
    static void X86_SFX(tile8_##name)(float *y, int64_t ys, const void *g, const void *x,   \
                                      size_t xst, int64_t n, int nt) {                      \
        drv(y, ys, g, x, xst, n, nt, K);                                                    \
    }
X86_TILE8(q4_0, tile8, WK_Q4_0)
X86_TILE8(q8_0, tile8, WK_Q8_0)
X86_TILE8(q4_K, tile8, WK_Q4_K)
X86_TILE8(q5_K, tile8, WK_Q5_K)
X86_TILE8(iq4_xs, tile8, WK_IQ4_XS)
X86_TILE8(q6_K, tile8, WK_Q6_K)
X86_TILE8(q3_K, tile8, WK_Q3_K)
X86_TILE8(q2_K, tile8, WK_Q2_K)
#if X86_W512
X86_TILE8(16_q4_0, tile16q, WK_Q4_0)
X86_TILE8(16_q4_K, tile16q, WK_Q4_K)
X86_TILE8(16_q5_K, tile16q, WK_Q5_K)
X86_TILE8(16_q6_K, tile16q, WK_Q6_K)
X86_TILE8(16_q3_K, tile16q, WK_Q3_K)
X86_TILE8(16_q2_K, tile16q, WK_Q2_K)
#endif

/* ---- float weights × f32 activations ------------------------------------------------- */

enum fkind { FK_F32, FK_F16, FK_BF16 };

#if X86_W512
typedef __m512 vf;
#define VF_N 16
#define vf_zero _mm512_setzero_ps
#define vf_fma _mm512_fmadd_ps
#define vf_loadu _mm512_loadu_ps
#define vf_hsum _mm512_reduce_add_ps
X86_INLINE vf vf_load_w(const uint8_t *row, int64_t i, const int F) {
    switch (F) {
    case FK_F32: return _mm512_loadu_ps((const float *)row + i);
    case FK_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * i)));
    default:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * i))), 16));
    }
}
#else
typedef __m256 vf;
#define VF_N 8
#define vf_zero _mm256_setzero_ps
#define vf_fma _mm256_fmadd_ps
#define vf_loadu _mm256_loadu_ps
#define vf_hsum hsum256
X86_INLINE vf vf_load_w(const uint8_t *row, int64_t i, const int F) {
    switch (F) {
    case FK_F32: return _mm256_loadu_ps((const float *)row + i);
    case FK_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * i))), 16));
    }
}
#endif

X86_INLINE const uint8_t *vf_w_addr(const uint8_t *row, int64_t i, const int F) {
    return row + (F == FK_F32 ? 4 : 2) * i;
}

X86_INLINE float f_load_w1(const uint8_t *row, int64_t i, const int F) {
    switch (F) {
    case FK_F32: {
        float f;
        memcpy(&f, row + 4 * i, sizeof(f));
        return f;
    }
    case FK_F16: return f16_load(row + 2 * i);
    default: {
        uint16_t h;
        uint32_t u;
        float f;
        memcpy(&h, row + 2 * i, sizeof(h));
        u = (uint32_t)h << 16;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    }
}

X86_INLINE void ftile_body(float *y, int64_t ys, const uint8_t *w, size_t wst, const uint8_t *x,
                           size_t xst, int64_t n, const int NR, const int NT, const int F) {
    vf acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = vf_zero();
    int64_t i = 0;
    for (; i + VF_N <= n; i += VF_N) {
        vf xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = vf_loadu((const float *)(x + t * xst) + i);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            /* decode streams w once: fetch the next tile's rows ahead (see direct_body) */
            if (NT == 1) _mm_prefetch((const char *)vf_w_addr(w + r * wst, i, F) + 4 * wst, _MM_HINT_T0);
            vf wv = vf_load_w(w + r * wst, i, F);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[r][t] = vf_fma(wv, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            float s = vf_hsum(acc[r][t]);
            for (int64_t j = i; j < n; j++)
                s += f_load_w1(w + r * wst, j, F) * ((const float *)(x + t * xst))[j];
            y[t * ys + r] = s;
        }
}

#if !X86_W512
/* Prefill, 256-bit: 16 ymm registers hold 4 rows × 3 tokens of accumulators and the 3
 * tokens' activations, the weights coming from memory (a 4 × 4 tile spills accumulators
 * to the stack, through store forwarding every step). n is covered in chunks of FCHUNK
 * values, over all the tile's tokens in turn: the rows' chunk, converted once to f32
 * (8 KiB: f16/bf16 then cost no conversion per token), stays in L1 and the tokens'
 * chunks (up to 64 × 2 KiB) in L2, where whole rows of a wide matrix (64 × 11 KiB for n
 * 2816) would not. y (+)= each chunk's sums. */
enum { FCHUNK = 512 };

/* w: 4 rows of f32, value i at w[r][i - i0] */
X86_INLINE void fchunk_body(float *y, int64_t ys, const float (*w)[FCHUNK], const uint8_t *x,
                            size_t xst, int64_t i0, int64_t i1, bool add, const int NT) {
    vf acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
        for (int t = 0; t < NT; t++) acc[r][t] = vf_zero();
    int64_t i = i0;
    for (; i + VF_N <= i1; i += VF_N) {
        vf xv[3];
#pragma GCC unroll 3
        for (int t = 0; t < NT; t++) xv[t] = vf_loadu((const float *)(x + t * xst) + i);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vf wv = _mm256_load_ps(&w[r][i - i0]);
#pragma GCC unroll 3
            for (int t = 0; t < NT; t++) acc[r][t] = vf_fma(wv, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 3
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            float s = vf_hsum(acc[r][t]);
            for (int64_t j = i; j < i1; j++) s += w[r][j - i0] * ((const float *)(x + t * xst))[j];
            y[t * ys + r] = add ? y[t * ys + r] + s : s;
        }
}
#endif

X86_INLINE void ftile(float *y, int64_t ys, const void *w, size_t wst, const void *x, size_t xst,
                      int64_t n, int nr, int nt, const int F) {
    const uint8_t *wb = w, *xb = x;
#if !X86_W512
    if (nr == 4 && nt >= 3) {
        _Alignas(32) float wf[4][FCHUNK];
        for (int64_t i0 = 0; i0 < n; i0 += FCHUNK) {
            int64_t i1 = n - i0 < FCHUNK ? n : i0 + FCHUNK;
            for (int r = 0; r < 4; r++) {
                /* the weights come from DRAM once per token block: fetch the next chunk
                 * (past the rows' end: the next tile's) while this one is computed */
                const uint8_t *next = i1 < n ? vf_w_addr(wb + r * wst, i1, F) : wb + (r + 4) * wst;
                for (int64_t o = 0; o < (i1 - i0) * (F == FK_F32 ? 4 : 2); o += 64)
                    _mm_prefetch((const char *)next + o, _MM_HINT_T0);
                int64_t i = i0;
                for (; i + VF_N <= i1; i += VF_N) _mm256_store_ps(&wf[r][i - i0], vf_load_w(wb + r * wst, i, F));
                for (; i < i1; i++) wf[r][i - i0] = f_load_w1(wb + r * wst, i, F);
            }
            int t = 0;
            for (; t + 3 <= nt; t += 3)
                fchunk_body(y + t * ys, ys, (const float(*)[FCHUNK])wf, xb + t * xst, xst, i0, i1, i0 > 0, 3);
            for (; t < nt; t++)
                fchunk_body(y + t * ys, ys, (const float(*)[FCHUNK])wf, xb + t * xst, xst, i0, i1, i0 > 0, 1);
        }
        return;
    }
#endif
    if (nr == 4) {
        int t = 0;
        for (; t + 4 <= nt; t += 4) ftile_body(y + t * ys, ys, wb, wst, xb + t * xst, xst, n, 4, 4, F);
        for (; t < nt; t++) ftile_body(y + t * ys, ys, wb, wst, xb + t * xst, xst, n, 4, 1, F);
    } else {
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < nr; r++)
                ftile_body(y + t * ys + r, ys, wb + r * wst, wst, xb + t * xst, xst, n, 1, 1, F);
    }
}

#define X86_FTILE(name, F)                                                                  \
    static void X86_SFX(tile_##name)(float *y, int64_t ys, const void *w, size_t wst,       \
                                     const void *x, size_t xst, int64_t n, int nr, int nt) { \
        ftile(y, ys, w, wst, x, xst, n, nr, nt, F);                                          \
    }
X86_FTILE(f32, FK_F32)
X86_FTILE(f16, FK_F16)
X86_FTILE(bf16, FK_BF16)
#undef X86_FTILE

/* f16 / bf16 rows8: value k of the 8 rows is 16 bytes at 16k, lane r = row r, against
 * f32 activations. Each value of the rows is one conversion that meets up to 12 tokens'
 * values broadcast (12 accumulators, the rows' vector and a broadcast fill 14 registers);
 * decode keeps 4 accumulators over consecutive values so that the FMA latency hides.
 * Token t's value k is at x[k·xk + t·xt]: a row (xk = 1) for decode, a panel of
 * KERN_R8F_PANEL tokens (xt = 1) for prefill, whose broadcasts then come from one stream
 * (12 rows 4 KiB apart would share one L1 set). Prefill covers n in chunks of R8F_CHUNK
 * values over all panels in turn, the rows' chunk (8 KiB) staying in L1; y (+)= each
 * chunk's sums. No horizontal sums: a token's 8 outputs are one store. */
enum { R8F_CHUNK = 512 };

X86_INLINE __m256 r8f_load(const uint8_t *g, int64_t k, const int F) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 16 * k));
    if (F == FK_F16) return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

X86_INLINE void r8f_body(float *y, int64_t ys, const uint8_t *g, const float *x, int64_t xk,
                         int64_t xt, int64_t i0, int64_t i1, bool add, const int NT, const int F) {
    const int KU = NT >= 4 ? 1 : NT >= 2 ? 2 : 4; /* consecutive values per step */
    __m256 acc[12];
#pragma GCC unroll 12
    for (int a = 0; a < KU * NT; a++) acc[a] = _mm256_setzero_ps();
    int64_t k = i0;
    for (; k + KU <= i1; k += KU) {
        /* decode streams the rows: 6 KiB ahead (whole-model runs: 3 KiB lost 10 % on a
         * 2048-wide model, 8 KiB lost on a 1024-wide one) */
        if (NT == 1) _mm_prefetch((const char *)g + 16 * k + 6144, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int u = 0; u < KU; u++) {
            const __m256 w = r8f_load(g, k + u, F);
            const float *xv = x + (k + u) * xk;
#pragma GCC unroll 12
            for (int t = 0; t < NT; t++)
                acc[u * NT + t] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(xv + t * xt), acc[u * NT + t]);
        }
    }
    for (; k < i1; k++) {
        const __m256 w = r8f_load(g, k, F);
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(x + k * xk + t * xt), acc[t]);
    }
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) {
        __m256 s = acc[t];
#pragma GCC unroll 3
        for (int u = 1; u < KU; u++) s = _mm256_add_ps(s, acc[u * NT + t]);
        if (add) s = _mm256_add_ps(s, _mm256_loadu_ps(y + t * ys));
        _mm256_storeu_ps(y + t * ys, s);
    }
}

X86_INLINE void ftile8(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                       int nt, const int F) {
    const uint8_t *gb = g;
    const float *xf = x;
    (void)xst;
    if (nt == 1) {
        r8f_body(y, ys, gb, xf, 1, 0, 0, n, false, 1, F);
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += R8F_CHUNK) {
        const int64_t i1 = n - i0 < R8F_CHUNK ? n : i0 + R8F_CHUNK;
        for (int t0 = 0; t0 < nt; t0 += KERN_R8F_PANEL) {
            const float *pan = xf + (int64_t)t0 * n; /* panel t0 / KERN_R8F_PANEL */
            const int np = nt - t0 < KERN_R8F_PANEL ? nt - t0 : KERN_R8F_PANEL;
            int t = 0;
            if (np == KERN_R8F_PANEL) {
                r8f_body(y + t0 * ys, ys, gb, pan, KERN_R8F_PANEL, 1, i0, i1, i0 > 0, KERN_R8F_PANEL, F);
                continue;
            }
            for (; t + 4 <= np; t += 4)
                r8f_body(y + (t0 + t) * ys, ys, gb, pan + t, KERN_R8F_PANEL, 1, i0, i1, i0 > 0, 4, F);
            for (; t < np; t++)
                r8f_body(y + (t0 + t) * ys, ys, gb, pan + t, KERN_R8F_PANEL, 1, i0, i1, i0 > 0, 1, F);
        }
    }
}

X86_TILE8(f16, ftile8, FK_F16)
X86_TILE8(bf16, ftile8, FK_BF16)
/* Two groups (16 rows) × prefill panels: per chunk of R16F_CHUNK values, both groups'
 * values are converted once into f32 (value k of the 16 rows: one 64-byte line), then
 * each half panel (6 tokens) meets them: 2 loads and 6 broadcasts per 12 FMAs, so the
 * FMA ports rather than the load ports bound it (8 rows × 12 tokens needs 13 loads per
 * 12 FMAs). The panels' missing tokens are zeros; only the nt tokens are stored. */
enum { R16F_CHUNK = 256, R16F_HALF = KERN_R8F_PANEL / 2 };
static_assert(KERN_R8F_PANEL % 2 == 0, "a panel is two half panels");

X86_INLINE void r16f_convert(float *wb, const uint8_t *ga, const uint8_t *gb, int64_t i0,
                             int64_t i1, const int F) {
    for (int64_t k = i0; k < i1; k++) {
        _mm256_store_ps(wb + 16 * (k - i0), r8f_load(ga, k, F));
        _mm256_store_ps(wb + 16 * (k - i0) + 8, r8f_load(gb, k, F));
    }
}

X86_INLINE void r16f_half(float *y, int64_t ys, const float *wb, const float *pan, int64_t c,
                          bool add, int nv, const uint8_t *pa, const uint8_t *pb) {
    __m256 acc[2 * R16F_HALF];
#pragma GCC unroll 12
    for (int a = 0; a < 2 * R16F_HALF; a++) acc[a] = _mm256_setzero_ps();
    for (int64_t k = 0; k < c; k++) {
        if (pa && k % 4 == 0) { /* the next chunk's lines, 4 values per line */
            _mm_prefetch((const char *)pa + 16 * k, _MM_HINT_T0);
            _mm_prefetch((const char *)pb + 16 * k, _MM_HINT_T0);
        }
        const __m256 w0 = _mm256_load_ps(wb + 16 * k), w1 = _mm256_load_ps(wb + 16 * k + 8);
        const float *xv = pan + k * KERN_R8F_PANEL;
#pragma GCC unroll 6
        for (int t = 0; t < R16F_HALF; t++) {
            const __m256 b = _mm256_broadcast_ss(xv + t);
            acc[2 * t] = _mm256_fmadd_ps(w0, b, acc[2 * t]);
            acc[2 * t + 1] = _mm256_fmadd_ps(w1, b, acc[2 * t + 1]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < R16F_HALF; t++) { /* unrolled: acc stays in registers */
        if (t >= nv) break;
        __m256 s0 = acc[2 * t], s1 = acc[2 * t + 1];
        if (add) {
            s0 = _mm256_add_ps(s0, _mm256_loadu_ps(y + t * ys));
            s1 = _mm256_add_ps(s1, _mm256_loadu_ps(y + t * ys + 8));
        }
        _mm256_storeu_ps(y + t * ys, s0);
        _mm256_storeu_ps(y + t * ys + 8, s1);
    }
}

#if X86_W512
/* 512-bit: value k of the 16 rows is one register that meets a whole panel (12
 * accumulators, each FMA's broadcast from the panel's stream): 13 loads per 12 FMAs of
 * 16 lanes, twice the work per FMA of the 256-bit half panels. */
X86_INLINE void r16f_step(__m512 *acc, const float *wb, const float *pan, int64_t k) {
    const __m512 w = _mm512_load_ps(wb + 16 * k);
    const float *xv = pan + k * KERN_R8F_PANEL;
#pragma GCC unroll 12
    for (int t = 0; t < KERN_R8F_PANEL; t++) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(xv[t]), acc[t]);
}

X86_INLINE void r16f_panel(float *y, int64_t ys, const float *wb, const float *pan, int64_t c,
                           bool add, int nv, const uint8_t *pa, const uint8_t *pb) {
    __m512 acc[KERN_R8F_PANEL];
#pragma GCC unroll 12
    for (int t = 0; t < KERN_R8F_PANEL; t++) acc[t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 4 <= c; k += 4) { /* a line of the next chunk per group every 4 values */
        if (pa) {
            _mm_prefetch((const char *)pa + 16 * k, _MM_HINT_T0);
            _mm_prefetch((const char *)pb + 16 * k, _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) r16f_step(acc, wb, pan, k + u);
    }
    for (; k < c; k++) r16f_step(acc, wb, pan, k);
#pragma GCC unroll 12
    for (int t = 0; t < KERN_R8F_PANEL; t++) {
        if (t >= nv) break;
        __m512 s = acc[t];
        if (add) s = _mm512_add_ps(s, _mm512_loadu_ps(y + t * ys));
        _mm512_storeu_ps(y + t * ys, s);
    }
}
#endif

X86_INLINE void ftile16(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                        int nt, const int F) {
    const uint8_t *ga = g, *gb = ga + 16 * n;
    const float *xf = x;
    if (nt == 1) {
        ftile8(y, ys, ga, x, xst, n, nt, F);
        ftile8(y + 8, ys, gb, x, xst, n, nt, F);
        return;
    }
    _Alignas(64) float wb[16 * R16F_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += R16F_CHUNK) {
        const int64_t i1 = n - i0 < R16F_CHUNK ? n : i0 + R16F_CHUNK;
        r16f_convert(wb, ga, gb, i0, i1, F);
        /* the first (half) panel fetches the next chunk (or the next groups) */
        const uint8_t *pa = i1 < n ? ga + 16 * i1 : gb + 16 * n, *pb = i1 < n ? gb + 16 * i1 : gb + 32 * n;
#if X86_W512
        for (int t0 = 0; t0 < nt; t0 += KERN_R8F_PANEL) {
            const float *pan = xf + (int64_t)t0 * n + i0 * KERN_R8F_PANEL;
            const int nv = nt - t0 < KERN_R8F_PANEL ? nt - t0 : KERN_R8F_PANEL;
            r16f_panel(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, t0 == 0 ? pa : NULL, pb);
        }
#else
        for (int t0 = 0; t0 < nt; t0 += R16F_HALF) {
            const float *pan = xf + (int64_t)(t0 / KERN_R8F_PANEL) * KERN_R8F_PANEL * n +
                               i0 * KERN_R8F_PANEL + t0 % KERN_R8F_PANEL;
            const int nv = nt - t0 < R16F_HALF ? nt - t0 : R16F_HALF;
            r16f_half(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, t0 == 0 ? pa : NULL, pb);
        }
#endif
    }
}

#define X86_TILE16(name, K)                                                                 \
    static void X86_SFX(tile16_##name)(float *y, int64_t ys, const void *g, const void *x,  \
                                       size_t xst, int64_t n, int nt) {                     \
        ftile16(y, ys, g, x, xst, n, nt, K);                                                \
    }
X86_TILE16(f16, FK_F16)
X86_TILE16(bf16, FK_BF16)
#undef X86_TILE16
#undef X86_TILE8

/* ---- activation quantizers, bit-identical to the reference --------------------------- */

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

void X86_SFX(kern_impl_fill)(struct kern_impl *impl) {
    impl->tile[KERN_TYPE_F32] = X86_SFX(tile_f32);
    impl->tile[KERN_TYPE_F16] = X86_SFX(tile_f16);
    impl->tile[KERN_TYPE_BF16] = X86_SFX(tile_bf16);
    impl->tile[KERN_TYPE_Q8_0] = X86_SFX(tile_q8_0);
    impl->tile[KERN_TYPE_Q4_0] = X86_SFX(tile_q4_0);
    impl->tile[KERN_TYPE_Q4_1] = X86_SFX(tile_q4_1);
    impl->tile[KERN_TYPE_Q5_0] = X86_SFX(tile_q5_0);
    impl->tile[KERN_TYPE_Q5_1] = X86_SFX(tile_q5_1);
    impl->tile[KERN_TYPE_IQ4_NL] = X86_SFX(tile_iq4_nl);
    impl->tile[KERN_TYPE_Q4_K] = X86_SFX(tile_q4_K);
    impl->tile[KERN_TYPE_Q5_K] = X86_SFX(tile_q5_K);
    impl->tile[KERN_TYPE_Q6_K] = X86_SFX(tile_q6_K);
    impl->tile[KERN_TYPE_Q2_K] = X86_SFX(tile_q2_K);
    impl->tile[KERN_TYPE_Q3_K] = X86_SFX(tile_q3_K);
    impl->tile[KERN_TYPE_IQ4_XS] = X86_SFX(tile_iq4_xs);
    impl->tile8[KERN_TYPE_Q4_0] = X86_SFX(tile8_q4_0);
    impl->tile8[KERN_TYPE_Q8_0] = X86_SFX(tile8_q8_0);
    impl->tile8[KERN_TYPE_Q4_K] = X86_SFX(tile8_q4_K);
    impl->tile8[KERN_TYPE_Q5_K] = X86_SFX(tile8_q5_K);
    impl->tile8[KERN_TYPE_IQ4_XS] = X86_SFX(tile8_iq4_xs);
    impl->tile8[KERN_TYPE_Q6_K] = X86_SFX(tile8_q6_K);
    impl->tile8[KERN_TYPE_F16] = X86_SFX(tile8_f16);
    impl->tile8[KERN_TYPE_BF16] = X86_SFX(tile8_bf16);
    impl->tile16[KERN_TYPE_F16] = X86_SFX(tile16_f16);
    impl->tile16[KERN_TYPE_BF16] = X86_SFX(tile16_bf16);
    impl->tile8[KERN_TYPE_Q3_K] = X86_SFX(tile8_q3_K);
    impl->tile8[KERN_TYPE_Q2_K] = X86_SFX(tile8_q2_K);
#if X86_W512
    impl->tile16[KERN_TYPE_Q4_0] = X86_SFX(tile8_16_q4_0);
    impl->tile16[KERN_TYPE_Q4_K] = X86_SFX(tile8_16_q4_K);
    impl->tile16[KERN_TYPE_Q5_K] = X86_SFX(tile8_16_q5_K);
    impl->tile16[KERN_TYPE_Q6_K] = X86_SFX(tile8_16_q6_K);
    impl->tile16[KERN_TYPE_Q3_K] = X86_SFX(tile8_16_q3_K);
    impl->tile16[KERN_TYPE_Q2_K] = X86_SFX(tile8_16_q2_K);
#endif
    impl->from_f32[KERN_TYPE_Q8_0] = X86_SFX(quant_q8_0);
    impl->from_f32[KERN_TYPE_Q8_1] = X86_SFX(quant_q8_1);
    impl->from_f32[KERN_TYPE_F16] = X86_SFX(quant_f16);
    impl->act_from_f32[KERN_TYPE_Q8_0] = X86_SFX(act_q8_0);
    impl->act_from_f32[KERN_TYPE_Q8_1] = X86_SFX(act_q8_1);
    impl->act_row_size = X86_SFX(act_row_size);
}
