/* Gated DeltaNet bodies for one x86 level, included once per level by deltanet-avx2.c
 * (DN_W512 0: 8-float vectors) and deltanet-avx512.c (DN_W512 1: 16-float vectors, mask
 * registers), inside the region that sets the level's target; DN_SFX names the table.
 * Contracts: kernels/deltanet.h; the chunked driver and its scratch: kernels/ref/deltanet.c.
 *
 * Recurrence: per head and token, each state row j (column j of S, d_k values) is read
 * twice from L1 and written once: u_j = e^g·(row·k), δ_j = β·(v_j − u_j), then
 * row ← e^g·row + δ_j·k and o_j = row·q. The state is the memory traffic of decode:
 * 2·d_k·d_v·4 bytes per head and token.
 * Chunked: the driver's six products run on a 4-row × (4 or 2 vectors) register tile that
 * broadcasts one operand, B streamed by column panels that stay in L1; the triangular
 * solve accumulates two partial sums per vector to hide the FMA latency. */

#define DN_INLINE static inline __attribute__((always_inline))

#if DN_W512
typedef __m512 vf;
typedef __mmask16 vmask;
enum { VL = 16, GEMM_NV = 4, SOLVE_NV = 4 };
DN_INLINE vf v_zero(void) { return _mm512_setzero_ps(); }
DN_INLINE vf v_set1(float x) { return _mm512_set1_ps(x); }
DN_INLINE vf v_load(const float *p) { return _mm512_loadu_ps(p); }
DN_INLINE void v_store(float *p, vf x) { _mm512_storeu_ps(p, x); }
DN_INLINE vmask v_mask(int64_t n) {
    return (vmask)(n >= VL ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}
DN_INLINE vf v_loadm(const float *p, vmask m) { return _mm512_maskz_loadu_ps(m, p); }
DN_INLINE void v_storem(float *p, vf x, vmask m) { _mm512_mask_storeu_ps(p, m, x); }
DN_INLINE vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
DN_INLINE vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
DN_INLINE vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
DN_INLINE vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }
DN_INLINE vf v_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
DN_INLINE vf v_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
DN_INLINE float v_hsum(vf x) { return _mm512_reduce_add_ps(x); }
DN_INLINE vf v_negabs(vf x) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}
DN_INLINE vf v_round(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^k for integral k in [-126, 127] */
DN_INLINE vf v_pow2i(vf k) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
/* x >= 0 ? a : b, by x's sign bit (so -0 and negative NaN take b) */
DN_INLINE vf v_select_nonneg(vf x, vf a, vf b) {
    __mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(x), _mm512_setzero_si512());
    return _mm512_mask_blend_ps(neg, a, b);
}
#else
typedef __m256 vf;
typedef __m256i vmask;
enum { VL = 8, GEMM_NV = 2, SOLVE_NV = 4 };
DN_INLINE vf v_zero(void) { return _mm256_setzero_ps(); }
DN_INLINE vf v_set1(float x) { return _mm256_set1_ps(x); }
DN_INLINE vf v_load(const float *p) { return _mm256_loadu_ps(p); }
DN_INLINE void v_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
DN_INLINE vmask v_mask(int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int c = n >= VL ? VL : n <= 0 ? 0 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), lane);
}
DN_INLINE vf v_loadm(const float *p, vmask m) { return _mm256_maskload_ps(p, m); }
DN_INLINE void v_storem(float *p, vf x, vmask m) { _mm256_maskstore_ps(p, m, x); }
DN_INLINE vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
DN_INLINE vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
DN_INLINE vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
DN_INLINE vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }
DN_INLINE vf v_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
DN_INLINE vf v_fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
DN_INLINE float v_hsum(vf x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
DN_INLINE vf v_negabs(vf x) { return _mm256_or_ps(x, _mm256_set1_ps(-0.0f)); }
DN_INLINE vf v_round(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
DN_INLINE vf v_pow2i(vf k) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
DN_INLINE vf v_select_nonneg(vf x, vf a, vf b) { return _mm256_blendv_ps(a, b, x); }
#endif

/* e^x for x <= 0: x clamped at −87 (e^−87 > 2^−126 stays normal), x = k·ln2 + r with
 * |r| <= ln2/2 (ln2 split in two parts so k·ln2 is exact), e^r by its Taylor series to r^7
 * (truncation below 6e−9 relative), 2^k into the exponent. */
DN_INLINE vf v_exp_neg(vf x) {
    x = v_max(x, v_set1(-87.0f));
    const vf k = v_round(v_mul(x, v_set1(1.44269504f)));
    vf r = v_fnmadd(k, v_set1(0.693145752f), x);
    r = v_fnmadd(k, v_set1(1.42860677e-6f), r);
    vf e = v_set1(1.0f / 5040);
    e = v_fmadd(e, r, v_set1(1.0f / 720));
    e = v_fmadd(e, r, v_set1(1.0f / 120));
    e = v_fmadd(e, r, v_set1(1.0f / 24));
    e = v_fmadd(e, r, v_set1(1.0f / 6));
    e = v_fmadd(e, r, v_set1(0.5f));
    e = v_fmadd(e, r, v_set1(1.0f));
    e = v_fmadd(e, r, v_set1(1.0f));
    return v_mul(e, v_pow2i(k));
}

/* SiLU(x) = x·σ(x) with e = e^−|x| <= 1: σ = 1/(1 + e) for x >= 0, e/(1 + e) below. */
DN_INLINE vf v_silu(vf x) {
    const vf one = v_set1(1.0f), e = v_exp_neg(v_negabs(x));
    return v_mul(x, v_div(v_select_nonneg(x, one, e), v_add(one, e)));
}

/* n values at p (n <= VL): the whole vector when n == VL, masked below. */
DN_INLINE vf v_loadn(const float *p, int64_t n) {
    return n >= VL ? v_load(p) : v_loadm(p, v_mask(n));
}
DN_INLINE void v_storen(float *p, vf x, int64_t n) {
    if (n >= VL)
        v_store(p, x);
    else
        v_storem(p, x, v_mask(n));
}

/* ---- conv ------------------------------------------------------------------------------ */

/* Channels [c, c + nc) (nc <= VL), one per lane; K is a constant where it is inlined with
 * one, so the window lives in registers. */
DN_INLINE void conv_block(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                          int64_t n_chan, int64_t c, int64_t nc, const int K) {
    const int ns = K - 1;
    vf wv[KERN_DN_MAX_KERNEL], win[KERN_DN_MAX_KERNEL];
    for (int j = 0; j < K; j++) wv[j] = v_loadn(w + j * n_chan + c, nc);
    for (int j = 0; j < ns; j++) win[j] = v_loadn(state + j * n_chan + c, nc);
    for (int64_t t = 0; t < n_tok; t++) {
        const vf xt = v_loadn(x + t * n_chan + c, nc); /* read before y (may be x) is written */
        vf acc = v_mul(wv[ns], xt);
        for (int j = 0; j < ns; j++) acc = v_fmadd(wv[j], win[j], acc);
        for (int j = 0; j + 1 < ns; j++) win[j] = win[j + 1];
        if (ns > 0) win[ns - 1] = xt;
        v_storen(y + t * n_chan + c, v_silu(acc), nc);
    }
    for (int j = 0; j < ns; j++) v_storen(state + j * n_chan + c, win[j], nc);
}

static void conv(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                 int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += VL) {
        const int64_t nc = c1 - c < VL ? c1 - c : VL;
        if (n_kernel == 4)
            conv_block(y, state, x, w, n_tok, n_chan, c, nc, 4);
        else
            conv_block(y, state, x, w, n_tok, n_chan, c, nc, (int)n_kernel);
    }
}

/* ---- recurrence ------------------------------------------------------------------------ */

/* dst = src·f, f times 1/max(‖src‖, eps) when eps > 0; n values, zero up to a multiple of
 * VL. */
static void head_load(float *dst, const float *src, int64_t n, float f, float eps) {
    vf ss = v_zero();
    for (int64_t i = 0; i < n; i += VL) {
        const vf x = v_loadn(src + i, n - i);
        v_store(dst + i, x);
        ss = v_fmadd(x, x, ss);
    }
    if (eps > 0) {
        const float norm = sqrtf(v_hsum(ss));
        f *= 1.0f / (norm > eps ? norm : eps);
    }
    const vf fv = v_set1(f);
    for (int64_t i = 0; i < n; i += VL) v_store(dst + i, v_mul(v_load(dst + i), fv));
}

/* One token on the d_v rows of one head's state. nv vectors per row, the last one of
 * `last` values (VL: full); both constants where inlined with them. */
DN_INLINE void rec_token(float *S, const float *kn, const float *qn, const float *v, float *o,
                         float decay, float beta, int64_t dv, const int64_t nv,
                         const int64_t last) {
    const int64_t dk = (nv - 1) * VL + last;
    const vf vg = v_set1(decay);
    for (int64_t j = 0; j < dv; j++) {
        float *row = S + j * dk;
        vf a0 = v_zero(), a1 = v_zero();
        int64_t b = 0;
        for (; b + 2 < nv; b += 2) {
            a0 = v_fmadd(v_load(row + b * VL), v_load(kn + b * VL), a0);
            a1 = v_fmadd(v_load(row + b * VL + VL), v_load(kn + b * VL + VL), a1);
        }
        for (; b < nv - 1; b++) a0 = v_fmadd(v_load(row + b * VL), v_load(kn + b * VL), a0);
        a1 = v_fmadd(v_loadn(row + b * VL, last), v_load(kn + b * VL), a1);
        const float u = decay * v_hsum(v_add(a0, a1));
        const vf vd = v_set1(beta * (v[j] - u));
        vf o0 = v_zero(), o1 = v_zero();
        for (b = 0; b + 2 < nv; b += 2) {
            const vf r0 = v_fmadd(vd, v_load(kn + b * VL), v_mul(vg, v_load(row + b * VL)));
            const vf r1 =
                v_fmadd(vd, v_load(kn + b * VL + VL), v_mul(vg, v_load(row + b * VL + VL)));
            v_store(row + b * VL, r0);
            v_store(row + b * VL + VL, r1);
            o0 = v_fmadd(r0, v_load(qn + b * VL), o0);
            o1 = v_fmadd(r1, v_load(qn + b * VL + VL), o1);
        }
        for (; b < nv - 1; b++) {
            const vf r = v_fmadd(vd, v_load(kn + b * VL), v_mul(vg, v_load(row + b * VL)));
            v_store(row + b * VL, r);
            o0 = v_fmadd(r, v_load(qn + b * VL), o0);
        }
        const vf r = v_fmadd(vd, v_load(kn + b * VL), v_mul(vg, v_loadn(row + b * VL, last)));
        v_storen(row + b * VL, r, last);
        o1 = v_fmadd(r, v_load(qn + b * VL), o1);
        o[j] = v_hsum(v_add(o0, o1));
    }
}

static void recurrent(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                      int64_t h0, int64_t h1) {
    const int64_t dk = p->head_dim_k, dv = p->head_dim_v, hv = p->n_head_v;
    const int64_t nv = (dk + VL - 1) / VL, last = dk - (nv - 1) * VL;
    float kn[KERN_DN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float qn[KERN_DN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    for (int64_t h = h0; h < h1; h++) {
        const int64_t kh = kern_dn_head_k(p, h);
        float *S = state + h * dv * dk;
        for (int64_t t = 0; t < s->n_tok; t++) {
            head_load(kn, s->k + t * s->k_stride + kh * dk, dk, 1.0f, p->l2_eps);
            head_load(qn, s->q + t * s->q_stride + kh * dk, dk, p->scale, p->l2_eps);
            const float *v = s->v + t * s->v_stride + h * dv;
            float *o = s->o + t * s->o_stride + h * dv;
            const float decay = expf(s->g[t * hv + h]), beta = s->beta[t * hv + h];
            if (dk == 128) /* the constant sizes unroll the rows' loops */
                rec_token(S, kn, qn, v, o, decay, beta, dv, 128 / VL, VL);
            else if (dk == 64)
                rec_token(S, kn, qn, v, o, decay, beta, dv, 64 / VL, VL);
            else
                rec_token(S, kn, qn, v, o, decay, beta, dv, nv, last);
        }
    }
}

/* ---- gated norm ------------------------------------------------------------------------ */

static void gated_norm(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                       int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps) {
    const int64_t n = head_dim;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = h0; h < h1; h++) {
            const int64_t off = (t * n_head + h) * n;
            vf ss = v_zero();
            for (int64_t i = 0; i < n; i += VL) {
                const vf xv = v_loadn(x + off + i, n - i);
                ss = v_fmadd(xv, xv, ss);
            }
            const vf sv = v_set1(1.0f / sqrtf(v_hsum(ss) / (float)n + eps));
            for (int64_t i = 0; i < n; i += VL) {
                const vf xv = v_loadn(x + off + i, n - i), zv = v_loadn(z + off + i, n - i);
                const vf r = v_mul(v_mul(v_mul(xv, sv), v_loadn(w + i, n - i)), v_silu(zv));
                v_storen(y + off + i, r, n - i);
            }
        }
}

/* ---- chunked: the driver's primitives ---------------------------------------------------- */

enum { GEMM_R = 4 };

/* One register tile of gemm: rows [0, rows) (<= GEMM_R) × cols (<= GEMM_NV·VL) columns. */
DN_INLINE void gemm_tile(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                         int64_t ldb, int64_t rows, int64_t cols, int64_t ni, const float *d,
                         int64_t ldd, const float *ds, int64_t ds_inc, const bool full) {
    const float *ar[GEMM_R];
    vmask m[GEMM_NV];
    vf acc[GEMM_R][GEMM_NV];
    for (int r = 0; r < GEMM_R; r++) ar[r] = a + (r < rows ? r : rows - 1) * lda;
    for (int v = 0; v < GEMM_NV; v++) m[v] = v_mask(cols - v * VL);
    for (int r = 0; r < GEMM_R; r++)
        for (int v = 0; v < GEMM_NV; v++) acc[r][v] = v_zero();
    for (int64_t i = 0; i < ni; i++) {
        vf bv[GEMM_NV];
        for (int v = 0; v < GEMM_NV; v++)
            bv[v] = full ? v_load(b + i * ldb + v * VL) : v_loadm(b + i * ldb + v * VL, m[v]);
        for (int r = 0; r < GEMM_R; r++) {
            const vf av = v_set1(ar[r][i]);
            for (int v = 0; v < GEMM_NV; v++) acc[r][v] = v_fmadd(av, bv[v], acc[r][v]);
        }
    }
    for (int r = 0; r < GEMM_R && r < rows; r++)
        for (int v = 0; v < GEMM_NV; v++) {
            vf o = acc[r][v];
            if (d) {
                const float *dp = d + r * ldd + v * VL;
                o = v_fmadd(v_set1(ds[r * ds_inc]), full ? v_load(dp) : v_loadm(dp, m[v]), o);
            }
            if (full)
                v_store(c + r * ldc + v * VL, o);
            else
                v_storem(c + r * ldc + v * VL, o, m[v]);
        }
}

static void gemm(float *c, int64_t ldc, const float *a, int64_t lda, const float *b, int64_t ldb,
                 int64_t nr, int64_t nc, int64_t ni, const float *d, int64_t ldd, const float *ds,
                 int64_t ds_inc, bool lower) {
    enum { NC = GEMM_NV * VL };
    for (int64_t j0 = 0; j0 < nc; j0 += NC) { /* a column panel of b stays in L1 */
        const int64_t cols = nc - j0 < NC ? nc - j0 : NC;
        for (int64_t r0 = 0; r0 < nr; r0 += GEMM_R) {
            const int64_t rows = nr - r0 < GEMM_R ? nr - r0 : GEMM_R;
            const int64_t nir = lower && r0 + GEMM_R < ni ? r0 + GEMM_R : ni;
            float *ct = c + r0 * ldc + j0;
            const float *dt = d ? d + r0 * ldd + j0 : NULL;
            if (cols == NC)
                gemm_tile(ct, ldc, a + r0 * lda, lda, b + j0, ldb, rows, cols, nir, dt, ldd,
                          ds ? ds + r0 * ds_inc : NULL, ds_inc, true);
            else
                gemm_tile(ct, ldc, a + r0 * lda, lda, b + j0, ldb, rows, cols, nir, dt, ldd,
                          ds ? ds + r0 * ds_inc : NULL, ds_inc, false);
        }
    }
}

static void solve(float *x, int64_t ldx, const float *l, int64_t ldl, int64_t n, int64_t nc) {
    enum { NC = SOLVE_NV * VL };
    for (int64_t j0 = 0; j0 < nc; j0 += NC) { /* the column panel of x stays in L1 */
        const int64_t cols = nc - j0 < NC ? nc - j0 : NC;
        vmask m[SOLVE_NV];
        for (int v = 0; v < SOLVE_NV; v++) m[v] = v_mask(cols - v * VL);
        for (int64_t r = 1; r < n; r++) {
            vf s0[SOLVE_NV], s1[SOLVE_NV];
            float *xr = x + r * ldx + j0;
            for (int v = 0; v < SOLVE_NV; v++) {
                s0[v] = v_loadm(xr + v * VL, m[v]);
                s1[v] = v_zero();
            }
            int64_t i = 0;
            for (; i + 2 <= r; i += 2) {
                const vf l0 = v_set1(l[r * ldl + i]), l1 = v_set1(l[r * ldl + i + 1]);
                const float *x0 = x + i * ldx + j0, *x1 = x0 + ldx;
                for (int v = 0; v < SOLVE_NV; v++) {
                    s0[v] = v_fnmadd(l0, v_loadm(x0 + v * VL, m[v]), s0[v]);
                    s1[v] = v_fnmadd(l1, v_loadm(x1 + v * VL, m[v]), s1[v]);
                }
            }
            if (i < r) {
                const vf l0 = v_set1(l[r * ldl + i]);
                for (int v = 0; v < SOLVE_NV; v++)
                    s0[v] = v_fnmadd(l0, v_loadm(x + i * ldx + j0 + v * VL, m[v]), s0[v]);
            }
            for (int v = 0; v < SOLVE_NV; v++) v_storem(xr + v * VL, v_add(s0[v], s1[v]), m[v]);
        }
    }
}

static void chunked(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                    int64_t h0, int64_t h1, void *scratch) {
    static const struct kern_dn_chunk_ops ops = {
        .gemm = gemm, .solve = solve, .head_load = head_load};
    kern_dn_chunked_run(state, s, p, h0, h1, scratch, &ops);
}

const struct kern_dn_impl DN_SFX(kern_dn_impl) = {
    .level = DN_LEVEL,
    .conv = conv,
    .recurrent = recurrent,
    .chunked = chunked,
    .gated_norm = gated_norm,
};
