/* x86 level "avx512bf16": the avx512 level plus AVX512_BF16 (Zen 4, Cooper Lake, Sapphire
 * Rapids): bf16 prefill with VDPBF16PS, two products per f32 lane, where the avx512 level
 * converts the weights to f32 and runs one FMA per product. Only bf16 rows8 prefill (the
 * tile16 entry) changes; everything else is the avx512 level's.
 *
 * Numerics: the activations are rounded to bf16 (round to nearest even) before the dot,
 * as llama.cpp's bf16 dot does; a product of two bf16 is exact in f32, so the error over
 * the f32 path is that rounding: |Δ| <= 2^-9·Σ|w·x| (tests/kernels/test-matmul.c,
 * TOL_BF16_ACT). Decode keeps the f32 activations: it is bound by memory, not by FMAs;
 * it runs the 16 rows in one 512-bit pass. Called only when kern_init() saw the avx512
 * level's features and AVX512_BF16, after the avx512 level's fill. */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16"))),      \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16")
#endif

#define BF_INLINE static inline __attribute__((always_inline))

/* Values per chunk: the 16 rows' pairs (64 bytes each, 8 KiB) and a panel's (12 tokens ×
 * 4 bytes each, 6 KiB) stay in L1 while every panel meets them. */
enum { BF_CHUNK = 256, BF_PAIRS = BF_CHUNK / 2 };

/* Pairs of values [i0, i1) of groups ga and gb (rows8: value k of a group's 8 rows is 16
 * bytes at 16k) as 16 rows' (w_k, w_k+1) in the 32-bit lanes of one 64-byte line per pair,
 * lanes 0..7 group a, 8..15 group b; a missing odd value reads as 0. */
BF_INLINE void bf_pairs_w(uint32_t *wp, const uint8_t *ga, const uint8_t *gb, int64_t i0,
                          int64_t i1) {
    for (int64_t k = i0; k < i1; k += 2) {
        const bool two = k + 1 < i1;
        const __m128i a0 = _mm_loadu_si128((const __m128i *)(ga + 16 * k));
        const __m128i a1 =
            two ? _mm_loadu_si128((const __m128i *)(ga + 16 * (k + 1))) : _mm_setzero_si128();
        const __m128i b0 = _mm_loadu_si128((const __m128i *)(gb + 16 * k));
        const __m128i b1 =
            two ? _mm_loadu_si128((const __m128i *)(gb + 16 * (k + 1))) : _mm_setzero_si128();
        __m512i v = _mm512_castsi128_si512(_mm_unpacklo_epi16(a0, a1));
        v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(a0, a1), 1);
        v = _mm512_inserti32x4(v, _mm_unpacklo_epi16(b0, b1), 2);
        v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(b0, b1), 3);
        _mm512_store_si512(wp + 16 * ((k - i0) / 2), v);
    }
}

/* A panel's tokens (value k's KERN_R8F_PANEL floats at pan[k·KERN_R8F_PANEL]) over values
 * [i0, i1) as bf16 pairs: token t's (x_k, x_k+1) at xp[16·pair + t]. */
BF_INLINE void bf_pairs_x(uint32_t *xp, const float *pan, int64_t i0, int64_t i1) {
    /* word 2t = token t's x_k (from b's half of cvtne2ps), 2t+1 its x_k+1 (a's half) */
    const __m512i inter =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __mmask16 m = (__mmask16)((1u << KERN_R8F_PANEL) - 1);
    for (int64_t k = i0; k < i1; k += 2) {
        const __m512 x0 = _mm512_maskz_loadu_ps(m, pan + k * KERN_R8F_PANEL);
        const __m512 x1 = k + 1 < i1 ? _mm512_maskz_loadu_ps(m, pan + (k + 1) * KERN_R8F_PANEL)
                                     : _mm512_setzero_ps();
        const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(x1, x0); /* words 0..15 x0, 16..31 x1 */
        _mm512_store_si512(xp + 16 * ((k - i0) / 2), _mm512_permutexvar_epi16(inter, b));
    }
}

/* y (+)= the 16 rows × nv tokens of one panel over np pairs */
BF_INLINE void bf_panel(float *y, int64_t ys, const uint32_t *wp, const uint32_t *xp, int64_t np,
                        bool add, int nv) {
    __m512 acc[KERN_R8F_PANEL];
#pragma GCC unroll 12
    for (int t = 0; t < KERN_R8F_PANEL; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        const __m512bh w = (__m512bh)_mm512_load_si512(wp + 16 * p);
#pragma GCC unroll 12
        for (int t = 0; t < KERN_R8F_PANEL; t++)
            acc[t] = _mm512_dpbf16_ps(acc[t], w, (__m512bh)_mm512_set1_epi32((int)xp[16 * p + t]));
    }
#pragma GCC unroll 12
    for (int t = 0; t < KERN_R8F_PANEL; t++) {
        if (t >= nv) break;
        __m512 s = acc[t];
        if (add) s = _mm512_add_ps(s, _mm512_loadu_ps(y + t * ys));
        _mm512_storeu_ps(y + t * ys, s);
    }
}

/* Decode: the 16 rows × one token in f32 (value k of both groups widened to one 512-bit
 * register, 4 accumulators over consecutive values so that the FMA latency hides, the
 * rows streamed 6 KiB ahead as the avx512 level's r8f_body). */
BF_INLINE __m512 bf_w16(const uint8_t *ga, const uint8_t *gb, int64_t k) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ga + 16 * k))),
        _mm_loadu_si128((const __m128i *)(gb + 16 * k)), 1);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

BF_INLINE void bf_decode(float *y, const uint8_t *ga, const uint8_t *gb, const float *x,
                         int64_t n) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        _mm_prefetch((const char *)ga + 16 * k + 6144, _MM_HINT_T0);
        _mm_prefetch((const char *)gb + 16 * k + 6144, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = _mm512_fmadd_ps(bf_w16(ga, gb, k + u), _mm512_set1_ps(x[k + u]), acc[u]);
    }
    for (; k < n; k++) acc[0] = _mm512_fmadd_ps(bf_w16(ga, gb, k), _mm512_set1_ps(x[k]), acc[0]);
    _mm512_storeu_ps(y,
                     _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* tile16 of bf16 (kernels/ref/matmul.h): two groups × nt tokens, in panels when nt > 1 */
static void tile16_bf16_dp(float *y, int64_t ys, const void *g, const void *x, size_t xst,
                           int64_t n, int nt) {
    const uint8_t *ga = g, *gb = ga + 16 * n;
    const float *xf = x;
    (void)xst;
    if (nt == 1) {
        bf_decode(y, ga, gb, xf, n);
        return;
    }
    _Alignas(64) uint32_t wp[16 * BF_PAIRS], xp[16 * BF_PAIRS];
    for (int64_t i0 = 0; i0 < n; i0 += BF_CHUNK) {
        const int64_t i1 = n - i0 < BF_CHUNK ? n : i0 + BF_CHUNK, np = (i1 - i0 + 1) / 2;
        bf_pairs_w(wp, ga, gb, i0, i1);
        for (int t0 = 0; t0 < nt; t0 += KERN_R8F_PANEL) {
            const float *pan = xf + (int64_t)t0 * n;
            const int nv = nt - t0 < KERN_R8F_PANEL ? nt - t0 : KERN_R8F_PANEL;
            bf_pairs_x(xp, pan, i0, i1);
            bf_panel(y + t0 * ys, ys, wp, xp, np, i0 > 0, nv);
        }
    }
}

void kern_impl_fill_avx512bf16(struct kern_impl *impl) {
    impl->tile16[KERN_TYPE_BF16] = tile16_bf16_dp;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
