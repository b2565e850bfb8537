/* x86 level "avx512bf16": the avx512 level plus AVX512_BF16 (Zen 4, Cooper Lake, Sapphire
 * Rapids): bf16 prefill with VDPBF16PS, two products per f32 lane, where the avx512 level
 * converts the weights to f32 and runs one FMA per product. Only bf16 rows8 (the tile8,
 * tile16, dec4 and r8f_pack entries) changes; everything else is the avx512 level's.
 *
 * Numerics: the activations are rounded to bf16 (round to nearest even) before the dot,
 * as llama.cpp's bf16 dot does; a product of two bf16 is exact in f32, so the error over
 * the f32 path is that rounding: |Δ| <= 2^-9·Σ|w·x| (tests/kernels/test-matmul.c,
 * TOL_BF16_ACT). The activations are converted once per matmul (r8f_pack, in the
 * activation packing step), not once per tile. Decode rounds them too, a chunk at a time
 * in each group of 8 rows, and runs the group with one VDPBF16PS per pair of values
 * (bf_decode: a group at a time, or four at once for dec4). Called only when kern_init()
 * saw the avx512 level's features and AVX512_BF16, after the avx512 level's fill. */
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

/* Values per chunk: the 16 rows' pairs (64 bytes each, 8 KiB) and a panel's (16 tokens ×
 * 4 bytes each, 8 KiB) stay in L1 while every panel meets them. A panel of 16 tokens
 * keeps 16 sums in flight (12 left no slack for VDPBF16PS's latency × throughput) in 18
 * of the 32 registers, and blocks of 64 tokens are 4 whole panels: with panels of 20,
 * a block's last 4 tokens ran 4 dependent chains (latency-bound), and one thread's 64-
 * and 512-token prefill of 1024 × 1024 took 6-12 % longer. */
enum { BF_CHUNK = 256, BF_PAIRS = BF_CHUNK / 2, BF_PANEL = 16 };
static_assert(BF_CHUNK % 2 == 0, "chunks start on a pair");
enum { BF_BLOCK_TOKS = KERN_TILE_TOKS };
static_assert(BF_BLOCK_TOKS >= KERN_R8F_BLOCK_TOKS && BF_BLOCK_TOKS % BF_PANEL == 0 &&
                  BF_BLOCK_TOKS <= KERN_R8F_BLOCK_SLOTS,
              "a block is whole panels within the packed block's bytes");

/* The packed activations (r8f_pack): a block's tokens in panels of BF_PANEL, panel
 * p at p·BF_PANEL·bf_n_pairs(n) words; in a panel, token t's pair j (bf16 x_2j in
 * the low half, x_2j+1 in the high half, round to nearest even; a missing odd value or
 * token 0) is word BF_PANEL·j + t. Blocks of 64 tokens (r8f_block_toks; in blocks of 60,
 * pp64's last 4 tokens cost a pass over the weights of their own): 4 panels of 64 bytes
 * per pair, 128·(n + 1) bytes, within KERN_R8F_BLOCK_SLOTS·(n + 1) floats. */
static int64_t bf_n_pairs(int64_t n) { return (n + 1) / 2; }

/* 16 pairs (32 values from k) of token row xr as 16 words; zeros past n or for a missing
 * token (xr NULL) */
BF_INLINE __m512i bf_pairs_x(const float *xr, int64_t n, int64_t k) {
    if (!xr) return _mm512_setzero_si512();
    const int64_t left = n - k;
    const __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
    /* words 0..15 from the first 16 values, 16..31 from the next */
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, xr + k + 16),
                                        _mm512_maskz_loadu_ps(m0, xr + k));
}

/* The 4×4 word transposes within each 128-bit lane of 4 vectors: afterwards v[c]'s lane L
 * holds word 4L + c of v[0..3] (in that order). */
BF_INLINE void bf_tr4(__m512i *v) {
    const __m512i a = _mm512_unpacklo_epi32(v[0], v[1]), b = _mm512_unpackhi_epi32(v[0], v[1]);
    const __m512i c = _mm512_unpacklo_epi32(v[2], v[3]), d = _mm512_unpackhi_epi32(v[2], v[3]);
    v[0] = _mm512_unpacklo_epi64(a, c);
    v[1] = _mm512_unpackhi_epi64(a, c);
    v[2] = _mm512_unpacklo_epi64(b, d);
    v[3] = _mm512_unpackhi_epi64(b, d);
}

/* Packs panel by panel, 16 pairs at a time: the 16 tokens' pairs converted, then
 * transposed in registers (a 16 × 16 word transpose) so that each pair's 64 bytes are one
 * store, where a word per store (a token at a time) took 2-3 times as long. */
static void bf_pack(void *dst, const float *x, int64_t n, int nt, int part, int n_parts) {
    const int64_t np = bf_n_pairs(n);
    const int n_pan = (nt + BF_PANEL - 1) / BF_PANEL;
    static_assert(BF_PANEL == 16, "a panel's pair is one 16-word transpose column");
    for (int p = n_pan * part / n_parts; p < n_pan * (part + 1) / n_parts; p++) {
        uint32_t *pan = (uint32_t *)dst + (int64_t)p * BF_PANEL * np;
        const float *xr[BF_PANEL];
        for (int l = 0; l < BF_PANEL; l++)
            xr[l] = p * BF_PANEL + l < nt ? x + (int64_t)(p * BF_PANEL + l) * n : NULL;
        for (int64_t k = 0; k < n; k += 32) {
            __m512i v[16];
            for (int l = 0; l < 16; l++) v[l] = bf_pairs_x(xr[l], n, k);
            /* v[4g + c] lane L: word 4L + c of tokens 4g..4g+3; then across the groups */
            for (int g = 0; g < 4; g++) bf_tr4(v + 4 * g);
            __m512i o[16]; /* o[j]: pair j of the 16 tokens */
            for (int c = 0; c < 4; c++) {
                const __m512i a = _mm512_shuffle_i32x4(v[c], v[4 + c], 0x44);
                const __m512i b = _mm512_shuffle_i32x4(v[c], v[4 + c], 0xee);
                const __m512i d = _mm512_shuffle_i32x4(v[8 + c], v[12 + c], 0x44);
                const __m512i f = _mm512_shuffle_i32x4(v[8 + c], v[12 + c], 0xee);
                o[c] = _mm512_shuffle_i32x4(a, d, 0x88);
                o[4 + c] = _mm512_shuffle_i32x4(a, d, 0xdd);
                o[8 + c] = _mm512_shuffle_i32x4(b, f, 0x88);
                o[12 + c] = _mm512_shuffle_i32x4(b, f, 0xdd);
            }
            const int64_t j0 = k / 2, nj = np - j0 < 16 ? np - j0 : 16;
            for (int64_t j = 0; j < nj; j++) _mm512_storeu_si512(pan + (j0 + j) * BF_PANEL, o[j]);
        }
    }
}

/* Pairs of values [i0, i1) of groups ga and gb (rows8: value k of a group's 8 rows is 16
 * bytes at 16k) as 16 rows' (w_k, w_k+1) in the 32-bit lanes of one 64-byte line per pair,
 * lanes 0..7 group a, 8..15 group b; a missing odd value reads as 0. The bytes the next
 * chunk pairs (pa, pb: the next chunk's or the next 16 rows') are fetched meanwhile: the
 * panels' work on this chunk hides their latency (weights streamed from memory: with
 * the then 20-token panels, 4096 × 11008 prefill went from 161 to 272 GFLOP/s). */
BF_INLINE void bf_pairs_w(uint32_t *wp, const uint8_t *ga, const uint8_t *gb, int64_t i0,
                          int64_t i1, const uint8_t *pa, const uint8_t *pb) {
    /* words 0..7: a's value k, 8..15 its k+1, 16..31 the same of b → lane r (k, k+1) */
    const __m512i inter =
        _mm512_set_epi16(31, 23, 30, 22, 29, 21, 28, 20, 27, 19, 26, 18, 25, 17, 24, 16, 15, 7,
                         14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int64_t k = i0; k < i1; k += 2) {
        if ((k - i0) % 4 == 0) { /* a 64-byte line of each group per 4 values */
            _mm_prefetch((const char *)pa + 16 * (k - i0), _MM_HINT_T0);
            _mm_prefetch((const char *)pb + 16 * (k - i0), _MM_HINT_T0);
        }
        const __mmask16 m = k + 1 < i1 ? 0xffff : 0x00ff;
        const __m256i a = _mm256_maskz_loadu_epi16(m, ga + 16 * k);
        const __m256i b = _mm256_maskz_loadu_epi16(m, gb + 16 * k);
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        _mm512_store_si512(wp + 16 * ((k - i0) / 2), _mm512_permutexvar_epi16(inter, v));
    }
}

/* The same for one group: 8 rows' pairs, 32 bytes per pair. */
BF_INLINE void bf_pairs_w8(uint32_t *wp, const uint8_t *g, int64_t i0, int64_t i1) {
    for (int64_t k = i0; k < i1; k += 2) {
        const __m128i a0 = _mm_loadu_si128((const __m128i *)(g + 16 * k));
        const __m128i a1 =
            k + 1 < i1 ? _mm_loadu_si128((const __m128i *)(g + 16 * (k + 1))) : _mm_setzero_si128();
        const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(a0, a1)),
                                                  _mm_unpackhi_epi16(a0, a1), 1);
        _mm256_store_si256((__m256i *)(wp + 8 * ((k - i0) / 2)), v);
    }
}

/* y (+)= the 16 rows × nv tokens of one panel over np pairs (xp: the panel's first pair) */
BF_INLINE void bf_panel(float *y, int64_t ys, const uint32_t *wp, const uint32_t *xp, int64_t np,
                        bool add, int nv, const int NT) {
    __m512 acc[BF_PANEL];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        const __m512bh w = (__m512bh)_mm512_load_si512(wp + 16 * p);
        const uint32_t *xv = xp + BF_PANEL * p;
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++)
            acc[t] = _mm512_dpbf16_ps(acc[t], w, (__m512bh)_mm512_set1_epi32((int)xv[t]));
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) {
        if (t >= nv) break;
        __m512 s = acc[t];
        if (add) s = _mm512_add_ps(s, _mm512_loadu_ps(y + t * ys));
        _mm512_storeu_ps(y + t * ys, s);
    }
}

/* The same for 8 rows. */
BF_INLINE void bf_panel8(float *y, int64_t ys, const uint32_t *wp, const uint32_t *xp, int64_t np,
                         bool add, int nv, const int NT) {
    __m256 acc[BF_PANEL];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        const __m256bh w = (__m256bh)_mm256_load_si256((const __m256i *)(wp + 8 * p));
        const uint32_t *xv = xp + BF_PANEL * p;
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_dpbf16_ps(acc[t], w, (__m256bh)_mm256_set1_epi32((int)xv[t]));
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) {
        if (t >= nv) break;
        __m256 s = acc[t];
        if (add) s = _mm256_add_ps(s, _mm256_loadu_ps(y + t * ys));
        _mm256_storeu_ps(y + t * ys, s);
    }
}

/* Decode: NG groups of 8 rows × one token with VDPBF16PS, as prefill: the token's values
 * rounded to bf16 a chunk at a time (pairs, as bf_pack words; once for the NG groups),
 * values k and k + 1 of the 8 rows (32 contiguous bytes) put in pair order with one VPERMW,
 * then one dot per pair of values: a third of the f32 path's instructions per weight byte
 * (widen, shift and FMA per value). Group s is at g + s·gstep, its outputs at y + s·ystep.
 * One group (tile8, tile16: a tile's two groups one after the other, each one sequential
 * stream; the two side by side, two streams 16·n bytes apart, read 20-30 % slower) is
 * streamed 6 KiB ahead like the f32 path's; four (dec4: a quarter of a work unit's groups
 * apart) are four streams, faster than one, each fetched 1 KiB ahead (x86-float.h fdec4;
 * the 246M yardstick, 1 thread, 4 alternated rounds: 76 -> 86 t/s with the fetch).
 * A group's sums in the panels' order (one chain of dots per chunk from zero, the chunks
 * added in turn), so that a token's outputs are the same bits decoded alone or in a batch
 * (x86-float.h r8f_body). The full pairs read unmasked: a masked load per pair ran at half
 * speed. */
BF_INLINE void bf_decode(float *y, int64_t ystep, const uint8_t *g, size_t gstep, const float *x,
                         int64_t n, const int NG) {
    /* words 0..7 value k of the 8 rows, 8..15 value k + 1 → lane r (k, k+1) */
    const __m256i inter = _mm256_set_epi16(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    __m256 sum[4] = {0}; /* each the first chunk's (n > 0) */
    _Alignas(64) uint32_t xw[BF_PAIRS];
    for (int64_t i0 = 0; i0 < n; i0 += BF_CHUNK) {
        const int64_t i1 = n - i0 < BF_CHUNK ? n : i0 + BF_CHUNK, np = (i1 - i0 + 1) / 2;
        for (int64_t k = i0; k < i1; k += 32)
            _mm512_store_si512(xw + (k - i0) / 2, bf_pairs_x(x, i1, k));
        __m256 acc[4];
#pragma GCC unroll 4
        for (int s = 0; s < NG; s++) acc[s] = _mm256_setzero_ps();
        int64_t p = 0;
        const int64_t full = (i1 - i0) / 2; /* pairs with both values */
        for (; p + 4 <= full; p += 4) {     /* 128 bytes a group: two lines */
            const uint8_t *gk = g + 16 * (i0 + 2 * p);
            /* one group 6 KiB ahead; four 1 KiB (x86-float.h fdec4) */
            const int ahead = NG == 1 ? 6144 : 1024;
#pragma GCC unroll 4
            for (int s = 0; s < NG; s++) {
                _mm_prefetch((const char *)gk + s * gstep + ahead, _MM_HINT_T0);
                _mm_prefetch((const char *)gk + s * gstep + ahead + 64, _MM_HINT_T0);
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m256bh xb = (__m256bh)_mm256_set1_epi32((int)xw[p + u]);
#pragma GCC unroll 4
                for (int s = 0; s < NG; s++) {
                    const __m256i v =
                        _mm256_loadu_si256((const __m256i *)(gk + s * gstep + 32 * u));
                    acc[s] = _mm256_dpbf16_ps(acc[s], (__m256bh)_mm256_permutexvar_epi16(inter, v),
                                              xb);
                }
            }
        }
        for (; p < np; p++) { /* the last pairs; a missing odd value reads as 0 */
            const int64_t k = i0 + 2 * p;
            const __m256bh xb = (__m256bh)_mm256_set1_epi32((int)xw[p]);
#pragma GCC unroll 4
            for (int s = 0; s < NG; s++) {
                const __m256i v = _mm256_maskz_loadu_epi16(k + 1 < i1 ? 0xffff : 0x00ff,
                                                           g + s * gstep + 16 * k);
                acc[s] = _mm256_dpbf16_ps(acc[s], (__m256bh)_mm256_permutexvar_epi16(inter, v), xb);
            }
        }
#pragma GCC unroll 4
        for (int s = 0; s < NG; s++) sum[s] = i0 > 0 ? _mm256_add_ps(acc[s], sum[s]) : acc[s];
    }
#pragma GCC unroll 4
    for (int s = 0; s < NG; s++) _mm256_storeu_ps(y + s * ystep, sum[s]);
}

/* dec4 of bf16 (kern_dec4_fn) */
static void dec4_bf16_dp(float *y, int64_t ystep, const void *g, size_t gstep, const void *x,
                         int64_t n) {
    bf_decode(y, ystep, g, gstep, x, n, 4);
}

/* tile16 of bf16 (kernels/ref/matmul.h): two groups × nt tokens; nt > 1: bf_pack's panels */
static void tile16_bf16_dp(float *y, int64_t ys, const void *g, const void *x, size_t xst,
                           int64_t n, int nt) {
    const uint8_t *ga = g, *gb = ga + 16 * n;
    (void)xst;
    if (nt == 1) {
        bf_decode(y, 0, ga, 0, x, n, 1);
        bf_decode(y + 8, 0, gb, 0, x, n, 1);
        return;
    }
    const uint32_t *xp = x;
    const int64_t pan_words = BF_PANEL * bf_n_pairs(n);
    _Alignas(64) uint32_t wp[16 * BF_PAIRS];
    for (int64_t i0 = 0; i0 < n; i0 += BF_CHUNK) {
        const int64_t i1 = n - i0 < BF_CHUNK ? n : i0 + BF_CHUNK, np = (i1 - i0 + 1) / 2;
        const uint8_t *pa = i1 < n ? ga + 16 * i1 : gb + 16 * n, *pb = i1 < n ? gb + 16 * i1 : gb + 32 * n;
        bf_pairs_w(wp, ga, gb, i0, i1, pa, pb);
        for (int t0 = 0; t0 < nt; t0 += BF_PANEL) {
            const uint32_t *pan = xp + t0 / BF_PANEL * pan_words + i0 / 2 * BF_PANEL;
            const int nv = nt - t0 < BF_PANEL ? nt - t0 : BF_PANEL;
            /* a short last panel computes only the tokens it has, rounded up to 4 */
            if (nv > 12) bf_panel(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, BF_PANEL);
            else if (nv > 8) bf_panel(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 12);
            else if (nv > 4) bf_panel(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 8);
            else bf_panel(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 4);
        }
    }
}

/* tile8 of bf16: one group (a matmul's last 8 rows of 16k + 8), the same layouts */
static void tile8_bf16_dp(float *y, int64_t ys, const void *g, const void *x, size_t xst,
                          int64_t n, int nt) {
    (void)xst;
    if (nt == 1) {
        bf_decode(y, 0, g, 0, x, n, 1);
        return;
    }
    const uint32_t *xp = x;
    const int64_t pan_words = BF_PANEL * bf_n_pairs(n);
    _Alignas(64) uint32_t wp[8 * BF_PAIRS];
    for (int64_t i0 = 0; i0 < n; i0 += BF_CHUNK) {
        const int64_t i1 = n - i0 < BF_CHUNK ? n : i0 + BF_CHUNK, np = (i1 - i0 + 1) / 2;
        bf_pairs_w8(wp, g, i0, i1);
        for (int t0 = 0; t0 < nt; t0 += BF_PANEL) {
            const uint32_t *pan = xp + t0 / BF_PANEL * pan_words + i0 / 2 * BF_PANEL;
            const int nv = nt - t0 < BF_PANEL ? nt - t0 : BF_PANEL;
            /* a short last panel computes only the tokens it has, rounded up to 4 */
            if (nv > 12) bf_panel8(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, BF_PANEL);
            else if (nv > 8) bf_panel8(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 12);
            else if (nv > 4) bf_panel8(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 8);
            else bf_panel8(y + t0 * ys, ys, wp, pan, np, i0 > 0, nv, 4);
        }
    }
}

void kern_impl_fill_avx512bf16(struct kern_impl *impl) {
    impl->tile8[KERN_TYPE_BF16] = tile8_bf16_dp;
    impl->tile16[KERN_TYPE_BF16] = tile16_bf16_dp;
    impl->dec4[KERN_TYPE_BF16] = dec4_bf16_dp;
    impl->r8f_pack[KERN_TYPE_BF16] = bf_pack;
    impl->r8f_block_toks[KERN_TYPE_BF16] = BF_BLOCK_TOKS;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
