/* AVX2 attention over a KV cache: integer dots of q8_0 queries with the cached K blocks
 * (f32 dots of the f32 queries with float K rows), V rows decoded to f32 with vector
 * code, online softmax as the generic path (kernels/ops.c).
 *
 * Per call, tokens are taken in chunks whose quantized queries fit the scratch; per chunk
 * the keys are walked in tiles of KERN_ATTN_TILE rows:
 *   K tile: each 32-value block unpacked once to its signed codes v (q4_1/q5_1: the
 *           unsigned codes, their offset m kept per block) and |v|, so a query block x
 *           meets it as PMADDUBSW(|v|, sign(x, v)) = Σ v·x without saturating (|v| <= 127,
 *           |x| <= 127); the block scales d_K (and m_K) stored transposed, 8 keys apart;
 *   scores: 8 keys at a time per query, one int32 vector per key and block reduced to the
 *           8 keys' sums by a horizontal-add tree, then scaled by d_K·d_x (+ m_K·d_x·Σx);
 *   V tile: each row decoded to f32 once, reused by every query of the chunk.
 *   float K (f32, f16, bf16): the tile decoded to f32, 8 keys' dots per query in 8
 *           registers, reduced alike; the queries are used as they are.
 * Scratch (the floats kern_attn_scratch_floats() gives): running max, sum and accumulator
 * of every query (as the generic path), the V tile (TILE × head_dim_v floats), then in
 * the remaining TILE·(2·head_dim_k + 1) floats the K tile, the chunk's quantized queries
 * and their scores. */
#include "kernels/cpu/x86-attn.h"

#include "kernels/ops.h"

#include <math.h>
#include <string.h>

/* Can t be a K side (block codes) or a V side of this kernel? */
static bool k_type_ok(enum kern_type t) {
    return t == KERN_TYPE_Q8_0 || t == KERN_TYPE_Q4_0 || t == KERN_TYPE_Q4_1 ||
           t == KERN_TYPE_Q5_0 || t == KERN_TYPE_Q5_1 || t == KERN_TYPE_IQ4_NL;
}
static bool is_float(enum kern_type t) {
    return t == KERN_TYPE_F32 || t == KERN_TYPE_F16 || t == KERN_TYPE_BF16;
}
static bool v_type_ok(enum kern_type t) { return k_type_ok(t) || is_float(t); }

#if defined(__x86_64__)
#include "kernels/matmul.h"

#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define XA_INLINE static inline __attribute__((always_inline))
enum { TILE = KERN_ATTN_TILE };

XA_INLINE float xa_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
}

#include "kernels/cpu/x86-unpack.h" /* nibbles_unpack, qh_unpack */

/* Block b of a row of type t: its 32 codes in value order as int8 (signed values; q4_1,
 * q5_1: the unsigned codes), its scale d and offset m (x = d·code + m). */
XA_INLINE __m256i xa_block(const uint8_t *row, int64_t b, enum kern_type t, float *ret_d,
                           float *ret_m) {
    *ret_m = 0.0f;
    switch (t) {
    case KERN_TYPE_Q8_0: {
        const uint8_t *p = row + (int64_t)sizeof(struct block_q8_0) * b;
        *ret_d = xa_f16(p);
        return _mm256_loadu_si256((const __m256i *)(p + 2));
    }
    case KERN_TYPE_Q4_0: {
        const uint8_t *p = row + (int64_t)sizeof(struct block_q4_0) * b;
        *ret_d = xa_f16(p);
        return _mm256_sub_epi8(nibbles_unpack(p + 2), _mm256_set1_epi8(8));
    }
    case KERN_TYPE_Q4_1: {
        const uint8_t *p = row + (int64_t)sizeof(struct block_q4_1) * b;
        *ret_d = xa_f16(p);
        *ret_m = xa_f16(p + 2);
        return nibbles_unpack(p + 4);
    }
    case KERN_TYPE_Q5_0: {
        const uint8_t *p = row + (int64_t)sizeof(struct block_q5_0) * b;
        *ret_d = xa_f16(p);
        return _mm256_sub_epi8(_mm256_or_si256(nibbles_unpack(p + 6), qh_unpack(p + 2)),
                               _mm256_set1_epi8(16));
    }
    case KERN_TYPE_Q5_1: {
        const uint8_t *p = row + (int64_t)sizeof(struct block_q5_1) * b;
        *ret_d = xa_f16(p);
        *ret_m = xa_f16(p + 2);
        return _mm256_or_si256(nibbles_unpack(p + 8), qh_unpack(p + 4));
    }
    default: { /* iq4_nl */
        const uint8_t *p = row + (int64_t)sizeof(struct block_iq4_nl) * b;
        *ret_d = xa_f16(p);
        const __m128i tbl =
            _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(tbl), nibbles_unpack(p + 2));
    }
    }
}

/* A row of n values of V type t as f32 (the generic path's values: d·code, + m). */
XA_INLINE void xa_row_f32(float *dst, const uint8_t *row, enum kern_type t, int64_t n) {
    if (t == KERN_TYPE_F32) {
        memcpy(dst, row, (size_t)n * sizeof(float));
        return;
    }
    if (t == KERN_TYPE_F16 || t == KERN_TYPE_BF16) {
        for (int64_t i = 0; i < n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
            __m256 f = t == KERN_TYPE_F16
                           ? _mm256_cvtph_ps(h)
                           : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            _mm256_storeu_ps(dst + i, f);
        }
        return;
    }
    for (int64_t b = 0; b < n / 32; b++) {
        float d, m;
        __m256i c = xa_block(row, b, t, &d, &m);
        __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
        __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
        for (int k = 0; k < 4; k++) {
            __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k]));
            x = _mm256_mul_ps(dv, x);
            if (m != 0.0f) x = _mm256_add_ps(x, mv);
            _mm256_storeu_ps(dst + 32 * b + 8 * k, x);
        }
    }
}

/* Sums of 8 int32 vectors, p[k] -> lane k. */
XA_INLINE __m256i xa_reduce8(const __m256i p[8]) {
    __m256i a = _mm256_hadd_epi32(p[0], p[1]), b = _mm256_hadd_epi32(p[2], p[3]);
    __m256i c = _mm256_hadd_epi32(p[4], p[5]), d = _mm256_hadd_epi32(p[6], p[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* e^x for x <= 0, 8 at a time: x clamped at -87 (e^-87 < 2^-125, nothing beside the max's
 * 1), x = k·ln2 + r with |r| <= ln2/2 (Cody–Waite), e^r by the degree-7 Cephes
 * polynomial, 2^k into the exponent. */
XA_INLINE __m256 xa_exp(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* sigmoid(v), 8 at a time: e = e^-|v| (<= 1, so nothing overflows), 1/(1 + e) for v >= 0,
 * e/(1 + e) below and 0 below -87 (where e^v < 2^-125 and xa_exp clamps), so SwiGLU's
 * g·sigmoid(g)·u is -0 there as in the generic path. */
static inline __m256 xa_sigmoid(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 e = xa_exp(_mm256_or_ps(v, sign)); /* -|v| */
    const __m256 num = _mm256_blendv_ps(one, e, v); /* v < 0 (sign bit): e */
    return _mm256_and_ps(_mm256_div_ps(num, _mm256_add_ps(one, e)),
                         _mm256_cmp_ps(v, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
}

/* The last n % 8 values go through the same vector code (masked loads and stores of the
 * 1-7 left), so that a value's result does not depend on where it sits: a token's
 * activations then come out the same bits alone or in a batch of others. */
static inline __m256i xa_tail_mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 xa_silu_mul8(__m256 v, __m256 uv) {
    return _mm256_mul_ps(_mm256_mul_ps(v, xa_sigmoid(v)), uv);
}

int64_t kern_silu_mul_x86(float *y, const float *g, const float *u, int64_t n) {
    if (strcmp(kern_cpu()->level, "ref") == 0) return 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, xa_silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        const __m256i m = xa_tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, xa_silu_mul8(_mm256_maskload_ps(g + i, m),
                                                   _mm256_maskload_ps(u + i, m)));
    }
    return n;
}

/* kern_swiglu_oai(), 8 at a time, with the sigmoid above. */
static inline __m256 xa_swiglu_oai8(__m256 g, __m256 u, __m256 a, __m256 hi) {
    const __m256 x = _mm256_min_ps(g, hi);
    const __m256 v = _mm256_max_ps(_mm256_min_ps(u, hi), _mm256_sub_ps(_mm256_setzero_ps(), hi));
    const __m256 sg = xa_sigmoid(_mm256_mul_ps(x, a));
    return _mm256_mul_ps(_mm256_mul_ps(x, sg), _mm256_add_ps(v, _mm256_set1_ps(1.0f)));
}

int64_t kern_swiglu_oai_x86(float *y, const float *g, const float *u, int64_t n, float alpha,
                            float limit) {
    if (strcmp(kern_cpu()->level, "ref") == 0) return 0;
    const __m256 a = _mm256_set1_ps(alpha), hi = _mm256_set1_ps(limit);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, xa_swiglu_oai8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), a, hi));
    if (i < n) { /* the last 1-7 masked, as kern_silu_mul_x86's */
        const __m256i m = xa_tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, xa_swiglu_oai8(_mm256_maskload_ps(g + i, m),
                                                     _mm256_maskload_ps(u + i, m), a, hi));
    }
    return n;
}

/* The per-call layout of the scratch (see the top of the file). */
struct xa_scratch {
    float *m, *l, *acc; /* (n_query), (n_query), (n_query, hd_v) */
    float *vt;          /* (TILE, hd_v) */
    float *kf;          /* float K: (TILE, hd_k) values (over kd..ka) */
    int8_t *kv;         /* (TILE, hd_k) codes */
    uint8_t *ka;        /* (TILE, hd_k) |codes| */
    float *kd, *km;     /* (nb_k, TILE) block scales and offsets, transposed */
    int8_t *xq;         /* (chunk queries, hd_k) quantized queries */
    float *xd, *xs;     /* (chunk queries, nb_k) their scales, d·Σq */
    float *s;           /* (chunk queries, TILE) scores, then weights */
    int64_t chunk_q;    /* queries per chunk */
};

static bool xa_layout(struct xa_scratch *x, float *scratch, int64_t n_query, int64_t hk, int64_t hv,
                      bool kfloat) {
    int64_t nb = hk / 32;
    x->m = scratch;
    x->l = x->m + n_query;
    x->acc = x->l + n_query;
    x->vt = x->acc + n_query * hv;
    uint8_t *p = (uint8_t *)(x->vt + TILE * hv);
    uint8_t *end = (uint8_t *)(scratch + kern_attn_scratch_floats(n_query, hk, hv));
    if (end < p + (size_t)nb * TILE * 2 * sizeof(float) + (size_t)TILE * hk * 2) return false;
    x->kd = (float *)p;
    x->km = x->kd + nb * TILE;
    x->kv = (int8_t *)(x->km + nb * TILE);
    x->ka = (uint8_t *)(x->kv + TILE * hk);
    x->kf = (float *)p;
    uint8_t *rest = kfloat ? (uint8_t *)(x->kf + TILE * hk) : x->ka + TILE * hk;
    if (end < rest) return false;
    size_t per_q = (size_t)hk + (size_t)nb * 2 * sizeof(float) + TILE * sizeof(float);
    x->chunk_q = (int64_t)((size_t)(end - rest) / per_q);
    x->s = (float *)rest;
    x->xd = x->s + x->chunk_q * TILE;
    x->xs = x->xd + x->chunk_q * nb;
    x->xq = (int8_t *)(x->xs + x->chunk_q * nb);
    return x->chunk_q >= 1;
}

/* Query x (hd_k floats) to q8_0 blocks: d = amax/127, codes round(x/d), and d·Σcodes. */
static void xa_quantize(int8_t *qs, float *d, float *ds, const float *x, int64_t hk) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < hk / 32; b++, x += 32) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float dd = _mm_cvtss_f32(h) / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
        __m256i i[4];
        for (int k = 0; k < 4; k++)
            i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + 32 * b), p);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        d[b] = dd;
        ds[b] = dd * (float)_mm_cvtsi128_si32(s4);
    }
}

/* Unpacks rows [0, jn) of a K tile; rows [jn, jn rounded up to 8) become zero keys. */
static void xa_k_tile(struct xa_scratch *x, const uint8_t *k, size_t k_stride, enum kern_type kt,
                      int64_t jn, int64_t hk) {
    int64_t nb = hk / 32, jn8 = (jn + 7) / 8 * 8;
    for (int64_t j = 0; j < jn8; j++) {
        const uint8_t *row = k + (size_t)j * k_stride;
        for (int64_t b = 0; b < nb; b++) {
            float d = 0.0f, m = 0.0f;
            __m256i c = j < jn ? xa_block(row, b, kt, &d, &m) : _mm256_setzero_si256();
            _mm256_storeu_si256((__m256i *)(x->kv + j * hk + 32 * b), c);
            _mm256_storeu_si256((__m256i *)(x->ka + j * hk + 32 * b), _mm256_abs_epi8(c));
            x->kd[b * TILE + j] = d;
            x->km[b * TILE + j] = m;
        }
    }
}

/* Sums of 8 f32 vectors, p[k] -> lane k. */
XA_INLINE __m256 xa_reduce8f(const __m256 p[8]) {
    __m256 a = _mm256_hadd_ps(p[0], p[1]), b = _mm256_hadd_ps(p[2], p[3]);
    __m256 c = _mm256_hadd_ps(p[4], p[5]), d = _mm256_hadd_ps(p[6], p[7]);
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    return _mm256_add_ps(_mm256_permute2f128_ps(ab, cd, 0x20),
                         _mm256_permute2f128_ps(ab, cd, 0x31));
}

/* Float K: s[j] = scale · q·K_j (f32 query, the f32 K tile) for the 8-key groups
 * covering [ja, nk). */
static void xa_scores_f(float *s, const float *kf, const float *q, int64_t ja, int64_t nk,
                        int64_t hk, float scale) {
    for (int64_t j8 = ja / 8 * 8; j8 < nk; j8 += 8) {
        __m256 p[8];
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; kk++) p[kk] = _mm256_setzero_ps();
        for (int64_t i = 0; i < hk; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++)
                p[kk] = _mm256_fmadd_ps(_mm256_loadu_ps(kf + (j8 + kk) * hk + i), qv, p[kk]);
        }
        _mm256_storeu_ps(s + j8, _mm256_mul_ps(xa_reduce8f(p), _mm256_set1_ps(scale)));
    }
}

/* s[j] = scale · q_i·K_j for the 8-key groups covering [ja, nk). */
static void xa_scores(float *s, const struct xa_scratch *x, int64_t i, int64_t ja, int64_t nk,
                      int64_t hk, bool has_m, float scale) {
    const int64_t nb = hk / 32;
    const int8_t *xq = x->xq + i * hk;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t j8 = ja / 8 * 8; j8 < nk; j8 += 8) {
        __m256 r = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * b)), p[8];
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++) {
                const int64_t o = (j8 + kk) * hk + 32 * b;
                __m256i c = _mm256_loadu_si256((const __m256i *)(x->kv + o));
                __m256i a = _mm256_loadu_si256((const __m256i *)(x->ka + o));
                p[kk] = _mm256_madd_epi16(_mm256_maddubs_epi16(a, _mm256_sign_epi8(xv, c)), ones);
            }
            __m256 dk = _mm256_loadu_ps(x->kd + b * TILE + j8);
            r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(xa_reduce8(p)),
                                _mm256_mul_ps(dk, _mm256_set1_ps(x->xd[i * nb + b])), r);
            if (has_m)
                r = _mm256_fmadd_ps(_mm256_loadu_ps(x->km + b * TILE + j8),
                                    _mm256_set1_ps(x->xs[i * nb + b]), r);
        }
        _mm256_storeu_ps(s + j8, _mm256_mul_ps(r, _mm256_set1_ps(scale)));
    }
}

/* a = a·c + Σ_{ja <= j < nk} w[j]·V_j over NV·8 columns at d0. */
XA_INLINE void xa_v_acc(float *a, const float *w, const float *vt, int64_t hv, int64_t ja,
                        int64_t nk, float c, const int NV) {
    __m256 acc[8];
    const __m256 cv = _mm256_set1_ps(c);
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) acc[k] = _mm256_mul_ps(_mm256_loadu_ps(a + 8 * k), cv);
    for (int64_t j = ja; j < nk; j++) {
        const __m256 wj = _mm256_set1_ps(w[j]);
        const float *row = vt + j * hv;
#pragma GCC unroll 8
        for (int k = 0; k < NV; k++)
            acc[k] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(row + 8 * k), acc[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) _mm256_storeu_ps(a + 8 * k, acc[k]);
}

/* One query's step over a tile: scores, online softmax, V accumulation. qf: the f32
 * query for a float K tile, NULL for a quantized one. */
static void xa_query_tile(struct xa_scratch *x, int64_t i, int64_t iq, const float *qf, int64_t ja,
                          int64_t nk, int64_t hk, int64_t hv, bool has_m, float scale) {
    float *s = x->s + iq * TILE;
    if (qf)
        xa_scores_f(s, x->kf, qf, ja, nk, hk, scale);
    else
        xa_scores(s, x, iq, ja, nk, hk, has_m, scale);
    float tile_max = -INFINITY;
    for (int64_t j = ja; j < nk; j++) tile_max = s[j] > tile_max ? s[j] : tile_max;
    float m_new = x->m[i] > tile_max ? x->m[i] : tile_max, c = expf(x->m[i] - m_new);
    __m256 sum = _mm256_setzero_ps();
    const __m256 mv = _mm256_set1_ps(m_new);
    for (int64_t j8 = ja / 8 * 8; j8 < nk; j8 += 8) {
        __m256i lane =
            _mm256_add_epi32(_mm256_set1_epi32((int)j8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256i valid = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)nk), lane),
                                         _mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)ja - 1)));
        __m256 p = xa_exp(_mm256_sub_ps(_mm256_loadu_ps(s + j8), mv));
        p = _mm256_and_ps(p, _mm256_castsi256_ps(valid));
        _mm256_storeu_ps(s + j8, p);
        sum = _mm256_add_ps(sum, p);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float *a = x->acc + i * hv;
    int64_t d0 = 0;
    for (; d0 + 64 <= hv; d0 += 64) xa_v_acc(a + d0, s, x->vt + d0, hv, ja, nk, c, 8);
    for (; d0 < hv; d0 += 32) xa_v_acc(a + d0, s, x->vt + d0, hv, ja, nk, c, 4);
    x->l[i] = x->l[i] * c + _mm_cvtss_f32(h);
    x->m[i] = m_new;
}

bool kern_attn_q_head(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                      int64_t n_tok, int64_t n_group, const int32_t *kv_lo, const int32_t *n_kv,
                      const void *k, enum kern_type kt, size_t k_stride, const void *v,
                      enum kern_type vt, size_t v_stride, int64_t head_dim_k, int64_t head_dim_v,
                      float scale, const float *sinks, float *scratch) {
    const int64_t hk = head_dim_k, hv = head_dim_v, n_query = n_tok * n_group, nb = hk / 32;
    const bool kfloat = is_float(kt);
    if (!v_type_ok(kt) || !v_type_ok(vt) || hk % 32 || hv % 32 || n_query <= 0) return false;
    if (strcmp(kern_cpu()->level, "ref") == 0) return false;
    struct xa_scratch x;
    if (!xa_layout(&x, scratch, n_query, hk, hv, kfloat) || x.chunk_q < n_group) return false;
    const bool has_m = kt == KERN_TYPE_Q4_1 || kt == KERN_TYPE_Q5_1;
    for (int64_t i = 0; i < n_query; i++) x.m[i] = -INFINITY, x.l[i] = 0;
    memset(x.acc, 0, (size_t)(n_query * hv) * sizeof(float));

    const int64_t chunk_tok = x.chunk_q / n_group;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk_tok) {
        const int64_t t1 = t0 + chunk_tok < n_tok ? t0 + chunk_tok : n_tok;
        int64_t lo = INT64_MAX, hi = 0;
        for (int64_t t = t0; t < t1; t++) {
            lo = kv_lo ? (kv_lo[t] < lo ? kv_lo[t] : lo) : 0;
            hi = n_kv[t] > hi ? n_kv[t] : hi;
            for (int64_t g = 0; g < n_group && !kfloat; g++) {
                int64_t iq = (t - t0) * n_group + g;
                xa_quantize(x.xq + iq * hk, x.xd + iq * nb, x.xs + iq * nb,
                            q + t * q_stride + g * hk, hk);
            }
        }
        if (lo < 0) lo = 0;
        for (int64_t j0 = lo; j0 < hi; j0 += TILE) {
            const int64_t jn = hi - j0 < TILE ? hi - j0 : TILE;
            if (kfloat) { /* rows [jn, jn rounded up to 8) are zero keys */
                for (int64_t j = 0; j < (jn + 7) / 8 * 8; j++) {
                    if (j < jn)
                        xa_row_f32(x.kf + j * hk, (const uint8_t *)k + (size_t)(j0 + j) * k_stride,
                                   kt, hk);
                    else
                        memset(x.kf + j * hk, 0, (size_t)hk * sizeof(float));
                }
            } else {
                xa_k_tile(&x, (const uint8_t *)k + (size_t)j0 * k_stride, k_stride, kt, jn, hk);
            }
            for (int64_t j = 0; j < jn; j++)
                xa_row_f32(x.vt + j * hv, (const uint8_t *)v + (size_t)(j0 + j) * v_stride, vt, hv);
            for (int64_t t = t0; t < t1; t++) {
                int64_t nk = n_kv[t] - j0 < jn ? n_kv[t] - j0 : jn;
                int64_t ja = kv_lo && kv_lo[t] > j0 ? kv_lo[t] - j0 : 0;
                if (nk <= ja) continue;
                for (int64_t g = 0; g < n_group; g++)
                    xa_query_tile(&x, t * n_group + g, (t - t0) * n_group + g,
                                  kfloat ? q + t * q_stride + g * hk : NULL, ja, nk, hk, hv, has_m,
                                  scale);
            }
        }
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t g = 0; g < n_group; g++) {
            const int64_t i = t * n_group + g;
            float inv = x.l[i] > 0 ? 1.0f / (x.l[i] + kern_attn_sink(sinks, g, x.m[i])) : 0;
            float *o = out + t * out_stride + g * hv;
            for (int64_t d = 0; d < hv; d++) o[d] = x.acc[i * hv + d] * inv;
        }
    return true;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* not x86-64: the generic path */
int64_t kern_silu_mul_x86(float *y, const float *g, const float *u, int64_t n) {
    (void)y, (void)g, (void)u, (void)n;
    return 0;
}

int64_t kern_swiglu_oai_x86(float *y, const float *g, const float *u, int64_t n, float alpha,
                            float limit) {
    (void)y, (void)g, (void)u, (void)n, (void)alpha, (void)limit;
    return 0;
}

bool kern_attn_q_head(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                      int64_t n_tok, int64_t n_group, const int32_t *kv_lo, const int32_t *n_kv,
                      const void *k, enum kern_type kt, size_t k_stride, const void *v,
                      enum kern_type vt, size_t v_stride, int64_t head_dim_k, int64_t head_dim_v,
                      float scale, const float *sinks, float *scratch) {
    (void)k_type_ok, (void)v_type_ok, (void)is_float;
    return false;
}
#endif
