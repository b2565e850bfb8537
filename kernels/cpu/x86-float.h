/* Part of x86-kernels.h: f32, f16 and bf16 weights against f32 activations (no unpacking,
 * a conversion per load): ftile for the file's rows, ftile8 for rows8 (8 rows per
 * register), ftile16 for two rows8 groups side by side and fdec4 for the decode of four
 * groups at once, the drivers of the types' tile, tile8, tile16 and dec4 entries. */

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

/* The file's rows (ftile): a token's sum over n is the same bits whatever the tile's
 * tokens (a token decoded alone or in a batch of others gets the same outputs). At 256
 * bits prefill covers n in chunks of FCHUNK values (below), so every body does: each
 * chunk's sum from zero, y = the first chunk's, then y + each next one's. 512 bits: one
 * chunk. */
#if X86_W512
enum { FCHUNK = 1 << 30 };
#else
enum { FCHUNK = 512 };
#endif

/* One chunk [i0, i1) of NR rows × NT tokens: the full vectors' sums, horizontally
 * added, then the chunk's last values one by one; y (+)= them */
X86_INLINE void ftile_chunk(float *y, int64_t ys, const uint8_t *w, size_t wst, const uint8_t *x,
                            size_t xst, int64_t i0, int64_t i1, bool add, const int NR,
                            const int NT, const int F) {
    vf acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = vf_zero();
    int64_t i = i0;
    for (; i + VF_N <= i1; i += VF_N) {
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
            for (int64_t j = i; j < i1; j++)
                s += f_load_w1(w + r * wst, j, F) * ((const float *)(x + t * xst))[j];
            y[t * ys + r] = add ? y[t * ys + r] + s : s;
        }
}

X86_INLINE void ftile_body(float *y, int64_t ys, const uint8_t *w, size_t wst, const uint8_t *x,
                           size_t xst, int64_t n, const int NR, const int NT, const int F) {
    for (int64_t i0 = 0; i0 < n; i0 += FCHUNK)
        ftile_chunk(y, ys, w, wst, x, xst, i0, n - i0 < FCHUNK ? n : i0 + FCHUNK, i0 > 0, NR, NT, F);
}

#if !X86_W512
/* Prefill, 256-bit: 16 ymm registers hold 4 rows × 3 tokens of accumulators and the 3
 * tokens' activations, the weights coming from memory (a 4 × 4 tile spills accumulators
 * to the stack, through store forwarding every step). n is covered in chunks of FCHUNK
 * values, over all the tile's tokens in turn: the rows' chunk, converted once to f32
 * (8 KiB: f16/bf16 then cost no conversion per token), stays in L1 and the tokens'
 * chunks (up to 64 × 2 KiB) in L2, where whole rows of a wide matrix (64 × 11 KiB for n
 * 2816) would not. y (+)= each chunk's sums. */

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


/* f32 / f16 / bf16 rows8: value k of the 8 rows is R8F_VB(F) bytes at R8F_VB(F)·k (32 for
 * f32, 16 for f16/bf16), lane r = row r, against f32 activations. Each value of the rows
 * is one load (f16/bf16: and a conversion) that meets up to 12 tokens' values broadcast
 * (12 accumulators, the rows' vector and a broadcast fill 14 registers). Token t's value
 * k is at x[k·xk + t·xt]: a row (xk = 1) for decode, a panel of KERN_R8F_PANEL tokens
 * (xt = 1) for prefill, whose broadcasts then come from one stream (12 rows 4 KiB apart
 * would share one L1 set). n is covered in chunks of R8F_CHUNK values, over all panels in
 * turn in prefill, the rows' chunk (8 KiB f32) staying in L1. No horizontal sums: a
 * token's 8 outputs are one store.
 *
 * One order of sums, whichever body computes an output and whatever else it computes
 * with it: each chunk's sum one FMA chain from zero over its values in turn, y = the
 * first chunk's, then each next chunk's + y. A token's outputs are then the same bits
 * decoded alone, in a batch of any size, on any thread count (ftile8, ftile16, fdec4; the
 * engine's continuous batching gives a stream the tokens it gets alone). Decode's one
 * chain per group is not latency-bound where it matters: fdec4 runs four groups' chains
 * side by side (one FMA per cycle, past what memory delivers). */
enum { R8F_CHUNK = 256 };

/* Tokens per packed panel: the 512-bit levels pack their own panels of 16 (r8f_pack,
 * f32_pack16 below; blocks of 64 tokens, 4 whole panels: pp64 in blocks of 60 + 4 left
 * the last panel a third full); the 256-bit ones read kern_matmul's panels of
 * KERN_R8F_PANEL (12, two half panels of 6: 12 accumulators of 16 registers). */
#if X86_W512
#define R8F_PW 16
#else
#define R8F_PW KERN_R8F_PANEL
#endif

#define R8F_VB(F) ((F) == FK_F32 ? 32 : 16)

X86_INLINE __m256 r8f_load(const uint8_t *g, int64_t k, const int F) {
    if (F == FK_F32) return _mm256_loadu_ps((const float *)(g + 32 * k));
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 16 * k));
    if (F == FK_F16) return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

/* One chunk [i0, i1) of the group g × NT tokens; y (+)= the chunk's sums */
X86_INLINE void r8f_body(float *y, int64_t ys, const uint8_t *g, const float *x, int64_t xk,
                         int64_t xt, int64_t i0, int64_t i1, bool add, const int NT, const int F) {
    __m256 acc[12];
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t k = i0; k < i1; k++) {
        /* decode streams the rows: 6 KiB ahead (whole-model runs: 3 KiB lost 10 % on a
         * 2048-wide model, 8 KiB lost on a 1024-wide one). f32 reads twice the bytes a
         * step and streams faster on the hardware's prefetch alone (the 246M model, 1
         * thread, 6 alternated rounds: 29.1 against 26.7 t/s with both lines fetched) */
        if (NT == 1 && F != FK_F32 && k % 4 == 0)
            _mm_prefetch((const char *)g + 16 * k + 6144, _MM_HINT_T0);
        const __m256 w = r8f_load(g, k, F);
        const float *xv = x + k * xk;
#pragma GCC unroll 12
        for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(xv + t * xt), acc[t]);
    }
#pragma GCC unroll 12
    for (int t = 0; t < NT; t++) {
        __m256 s = acc[t];
        if (add) s = _mm256_add_ps(s, _mm256_loadu_ps(y + t * ys));
        _mm256_storeu_ps(y + t * ys, s);
    }
}

/* Decode of four groups, group s at g + s·gstep, its outputs at y + s·ystep
 * (kern_dec4_fn): four streams from memory at once, which one core reads faster than one
 * (the hardware prefetches each stream; a software fetch ahead of one stream did not make
 * up for it). The 246M yardstick's matmuls (warm-kbench), 1 thread, against the groups in
 * turn, 3 alternated rounds: f32 25 -> 34, f16 48-58 -> 63-66 t/s; 2 threads f32 42-48 ->
 * 68-78. Each stream's line R8F_DEC4_AHEAD bytes on is fetched as well: the whole model
 * (warm-bench -p 1 -g 32, alternated), 1 thread, f32 35.9 -> 44.6 t/s at 512 bits and
 * 39.7 -> 47.9 at avx2, f16 74 -> 81; 2 threads f32 77 -> 90 (4 KiB ahead lost 6-15 %).
 * Each group's sums in r8f_body's order (one chain per chunk, the chunks added in turn). */
enum { R8F_DEC4_AHEAD = 1024 };
X86_INLINE void fdec4(float *y, int64_t ystep, const void *gv, size_t gstep, const void *xv,
                      int64_t n, const int F) {
    const uint8_t *g = gv;
    const float *x = xv;
    __m256 sum[4] = {0}; /* each the first chunk's (n > 0) */
    for (int64_t i0 = 0; i0 < n; i0 += R8F_CHUNK) {
        const int64_t i1 = n - i0 < R8F_CHUNK ? n : i0 + R8F_CHUNK;
        __m256 acc[4];
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) acc[s] = _mm256_setzero_ps();
        int64_t k = i0;
        for (; k + 4 <= i1; k += 4) {
            /* each stream's lines R8F_DEC4_AHEAD bytes on (4 values: 128 bytes f32, 64) */
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++)
                for (int o = 0; o < 4 * R8F_VB(F); o += 64)
                    _mm_prefetch((const char *)g + s * gstep + R8F_VB(F) * k + o + R8F_DEC4_AHEAD,
                                 _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m256 b = _mm256_broadcast_ss(x + k + u);
#pragma GCC unroll 4
                for (int s = 0; s < 4; s++)
                    acc[s] = _mm256_fmadd_ps(r8f_load(g + s * gstep, k + u, F), b, acc[s]);
            }
        }
        for (; k < i1; k++) {
            const __m256 b = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++)
                acc[s] = _mm256_fmadd_ps(r8f_load(g + s * gstep, k, F), b, acc[s]);
        }
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) sum[s] = i0 > 0 ? _mm256_add_ps(acc[s], sum[s]) : acc[s];
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++) _mm256_storeu_ps(y + s * ystep, sum[s]);
}

X86_INLINE void ftile8(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                       int nt, const int F) {
    const uint8_t *gb = g;
    const float *xf = x;
    (void)xst;
    for (int64_t i0 = 0; i0 < n; i0 += R8F_CHUNK) {
        const int64_t i1 = n - i0 < R8F_CHUNK ? n : i0 + R8F_CHUNK;
        if (nt == 1) {
            r8f_body(y, ys, gb, xf, 1, 0, i0, i1, i0 > 0, 1, F);
            continue;
        }
        for (int t0 = 0; t0 < nt; t0 += R8F_PW) {
            const float *pan = xf + (int64_t)t0 * n; /* panel t0 / R8F_PW */
            const int np = nt - t0 < R8F_PW ? nt - t0 : R8F_PW;
            int t = 0;
            if (np >= 12) { /* 12 accumulators at a time */
                r8f_body(y + t0 * ys, ys, gb, pan, R8F_PW, 1, i0, i1, i0 > 0, 12, F);
                t = 12;
            }
            for (; t + 4 <= np; t += 4)
                r8f_body(y + (t0 + t) * ys, ys, gb, pan + t, R8F_PW, 1, i0, i1, i0 > 0, 4, F);
            for (; t < np; t++)
                r8f_body(y + (t0 + t) * ys, ys, gb, pan + t, R8F_PW, 1, i0, i1, i0 > 0, 1, F);
        }
    }
}

/* Two groups (16 rows) × prefill panels: per chunk of R16F_CHUNK values, both groups'
 * values are converted once into f32 (f32: copied; value k of the 16 rows: one 64-byte
 * line, in L1), then each half panel (6 tokens) meets them: 2 loads and 6 broadcasts per
 * 12 FMAs, so the FMA ports rather than the load ports bound it (8 rows × 12 tokens needs
 * 13 loads per 12 FMAs). The panels' missing tokens are zeros; only the nt tokens are
 * stored. */
enum { R16F_CHUNK = R8F_CHUNK, R16F_HALF = KERN_R8F_PANEL / 2 }; /* r8f_body's chunks */
static_assert(KERN_R8F_PANEL % 2 == 0, "a panel is two half panels");

X86_INLINE void r16f_convert(float *wb, const uint8_t *ga, const uint8_t *gb, int64_t i0,
                             int64_t i1, const int F) {
    for (int64_t k = i0; k < i1; k++) {
        _mm256_store_ps(wb + 16 * (k - i0), r8f_load(ga, k, F));
        _mm256_store_ps(wb + 16 * (k - i0) + 8, r8f_load(gb, k, F));
    }
}

/* The next chunk's lines of both groups at value k (of 4 values: one line, f32 two) */
X86_INLINE void r16f_fetch(const uint8_t *pa, const uint8_t *pb, int64_t k, const int F) {
    _mm_prefetch((const char *)pa + R8F_VB(F) * k, _MM_HINT_T0);
    _mm_prefetch((const char *)pb + R8F_VB(F) * k, _MM_HINT_T0);
    if (F == FK_F32) {
        _mm_prefetch((const char *)pa + R8F_VB(F) * k + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)pb + R8F_VB(F) * k + 64, _MM_HINT_T0);
    }
}

X86_INLINE void r16f_half(float *y, int64_t ys, const float *wb, const float *pan, int64_t c,
                          bool add, int nv, const uint8_t *pa, const uint8_t *pb, const int NT,
                          const int F) {
    __m256 acc[2 * R16F_HALF];
#pragma GCC unroll 12
    for (int a = 0; a < 2 * NT; a++) acc[a] = _mm256_setzero_ps();
    for (int64_t k = 0; k < c; k++) {
        if (pa && k % 4 == 0) r16f_fetch(pa, pb, k, F);
        const __m256 w0 = _mm256_load_ps(wb + 16 * k), w1 = _mm256_load_ps(wb + 16 * k + 8);
        const float *xv = pan + k * KERN_R8F_PANEL;
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            const __m256 b = _mm256_broadcast_ss(xv + t);
            acc[2 * t] = _mm256_fmadd_ps(w0, b, acc[2 * t]);
            acc[2 * t + 1] = _mm256_fmadd_ps(w1, b, acc[2 * t + 1]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < NT; t++) { /* unrolled: acc stays in registers */
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
/* 512-bit: value k of the 16 rows is one register that meets a whole panel of R8F_PW
 * tokens (an accumulator each, each FMA's broadcast from the panel's stream): 17 loads per
 * 16 FMAs of 16 lanes, twice the work per FMA of the 256-bit half panels. */
X86_INLINE void r16f_step(__m512 *acc, const float *wb, const float *pan, int64_t k, const int NT) {
    const __m512 w = _mm512_load_ps(wb + 16 * k);
    const float *xv = pan + k * R8F_PW;
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(xv[t]), acc[t]);
}

/* NT: the panel's tokens computed (nv rounded up to 4: a block's short last panel then
 * costs its own tokens' FMAs, not a whole panel's). 16 accumulators, the rows' register
 * and a broadcast: 18 of the 32 registers. */
X86_INLINE void r16f_panel(float *y, int64_t ys, const float *wb, const float *pan, int64_t c,
                           bool add, int nv, const uint8_t *pa, const uint8_t *pb, const int NT,
                           const int F) {
    __m512 acc[R8F_PW];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 4 <= c; k += 4) {
        if (pa) r16f_fetch(pa, pb, k, F);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) r16f_step(acc, wb, pan, k + u, NT);
    }
    for (; k < c; k++) r16f_step(acc, wb, pan, k, NT);
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) {
        if (t >= nv) break;
        __m512 s = acc[t];
        if (add) s = _mm512_add_ps(s, _mm512_loadu_ps(y + t * ys));
        _mm512_storeu_ps(y + t * ys, s);
    }
}
#endif

X86_INLINE void ftile16(float *y, int64_t ys, const void *g, const void *x, size_t xst, int64_t n,
                        int nt, const int F) {
    const uint8_t *ga = g, *gb = ga + R8F_VB(F) * n;
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
        const int64_t vb = R8F_VB(F);
        const uint8_t *pa = i1 < n ? ga + vb * i1 : gb + vb * n;
        const uint8_t *pb = i1 < n ? gb + vb * i1 : gb + 2 * vb * n;
#if X86_W512
        for (int t0 = 0; t0 < nt; t0 += R8F_PW) {
            const float *pan = xf + (int64_t)t0 * n + i0 * R8F_PW;
            const int nv = nt - t0 < R8F_PW ? nt - t0 : R8F_PW;
            const uint8_t *qa = t0 == 0 ? pa : NULL;
            if (nv > 12) r16f_panel(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 16, F);
            else if (nv > 8) r16f_panel(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 12, F);
            else if (nv > 4) r16f_panel(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 8, F);
            else r16f_panel(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 4, F);
        }
#else
        for (int t0 = 0; t0 < nt; t0 += R16F_HALF) {
            const float *pan = xf + (int64_t)(t0 / KERN_R8F_PANEL) * KERN_R8F_PANEL * n +
                               i0 * KERN_R8F_PANEL + t0 % KERN_R8F_PANEL;
            const int nv = nt - t0 < R16F_HALF ? nt - t0 : R16F_HALF;
            const uint8_t *qa = t0 == 0 ? pa : NULL;
            /* a block's short last half panel computes its own tokens (pp64: 4 of 6) */
            if (nv > 4) r16f_half(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 6, F);
            else if (nv > 2) r16f_half(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 4, F);
            else r16f_half(y + t0 * ys, ys, wb, pan, i1 - i0, i0 > 0, nv, qa, pb, 2, F);
        }
#endif
    }
}

#if !X86_W512
/* r8f_pack of the float rows8 tiles at 256 bits: the f32 panels of KERN_R8F_PANEL
 * tokens (kernels/ref/matmul.h; a missing token's values 0); this part's panels of
 * n_parts. Four tokens' 8 values at a time, transposed in registers into 8 values' 4
 * tokens: 4 loads, 8 shuffles and 8 stores per 32 values, where one value at a time was
 * 32 loads and 32 scattered stores (about 1.7 % of a 1-thread f16 prefill). */
static void X86_SFX(f32_pack12)(void *dst, const float *x, int64_t n, int nt, int part, int n_parts) {
    enum { P = KERN_R8F_PANEL };
    static_assert(P % 4 == 0, "a panel is whole groups of 4 tokens");
    const int n_pan = (nt + P - 1) / P;
    for (int p = n_pan * part / n_parts; p < n_pan * (part + 1) / n_parts; p++) {
        float *pan = (float *)dst + (int64_t)p * P * n;
        const int nv = nt - p * P < P ? nt - p * P : P;
        const float *xr = x + (int64_t)p * P * n;
        int64_t k = 0;
        for (; k + 8 <= n; k += 8)
#pragma GCC unroll 3
            for (int g = 0; g < P / 4; g++) {
                __m256 r[4];
#pragma GCC unroll 4
                for (int l = 0; l < 4; l++)
                    r[l] = 4 * g + l < nv ? _mm256_loadu_ps(xr + (4 * g + l) * n + k) : _mm256_setzero_ps();
                const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
                const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
                /* u[j]: values k + j (low half) and k + 4 + j (high half) of the 4 tokens */
                const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                                     _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
                float *o = pan + k * P + 4 * g;
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    _mm_storeu_ps(o + j * P, _mm256_castps256_ps128(u[j]));
                    _mm_storeu_ps(o + (4 + j) * P, _mm256_extractf128_ps(u[j], 1));
                }
            }
        for (; k < n; k++)
            for (int l = 0; l < P; l++) pan[k * P + l] = l < nv ? xr[l * n + k] : 0.0f;
    }
}
#endif

#if X86_W512
static_assert(R8F_PW == 16 && KERN_TILE_TOKS % R8F_PW == 0 && KERN_TILE_TOKS <= KERN_R8F_BLOCK_SLOTS,
              "a block of KERN_TILE_TOKS tokens is whole panels within the packed block's bytes");
/* r8f_pack of the float rows8 tiles at 512 bits (kernels/ref/matmul.h): nt tokens'
 * f32 rows (n values each) into panels of R8F_PW, panel p at p·R8F_PW·n floats, value k
 * of its tokens side by side (a missing token's 0); this part's panels of n_parts. Value
 * by value, so that each 64-byte line of the panel is written whole. */
static void X86_SFX(f32_pack16)(void *dst, const float *x, int64_t n, int nt, int part, int n_parts) {
    const int n_pan = (nt + R8F_PW - 1) / R8F_PW;
    for (int p = n_pan * part / n_parts; p < n_pan * (part + 1) / n_parts; p++) {
        float *pan = (float *)dst + (int64_t)p * R8F_PW * n;
        const int nv = nt - p * R8F_PW < R8F_PW ? nt - p * R8F_PW : R8F_PW;
        const float *xr = x + (int64_t)p * R8F_PW * n;
        for (int64_t k = 0; k < n; k++) {
            float v[R8F_PW] = {0};
            for (int l = 0; l < nv; l++) v[l] = xr[l * n + k];
            _mm512_storeu_ps(pan + k * R8F_PW, _mm512_loadu_ps(v));
        }
    }
}
#endif
