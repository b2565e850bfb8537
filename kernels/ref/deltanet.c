/* Gated DeltaNet, plain C: the reference bodies (the spec of every level) and the chunked
 * driver every level's chunked form runs over its own primitives. The maths: notes
 * hybrid.md §A.6 and the comment above kern_dn_chunked_run. */
#include "kernels/ref/deltanet.h"

#include "base/base.h"

#include <math.h>
#include <string.h>

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* 1 / max(‖x‖, eps), the factor that L2-normalises x (n values). */
static float l2_inv(const float *x, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float norm = (float)sqrt(ss);
    return 1.0f / (norm > eps ? norm : eps);
}

/* dst = src · f, the factor times 1/max(‖src‖, eps) when eps > 0 (q and k as read). */
static void head_load(float *dst, const float *src, int64_t n, float f, float eps) {
    if (eps > 0) f *= l2_inv(src, n, eps);
    for (int64_t i = 0; i < n; i++) dst[i] = src[i] * f;
}

void kern_ref_dn_conv(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                      int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1) {
    const int64_t ns = n_kernel - 1; /* state rows */
    for (int64_t c = c0; c < c1; c++) {
        float win[KERN_DN_MAX_KERNEL]; /* the last ns inputs, oldest first */
        for (int64_t j = 0; j < ns; j++) win[j] = state[j * n_chan + c];
        for (int64_t t = 0; t < n_tok; t++) {
            const float xt = x[t * n_chan + c]; /* read before y (which may be x) is written */
            double acc = (double)w[ns * n_chan + c] * xt;
            for (int64_t j = 0; j < ns; j++) acc += (double)w[j * n_chan + c] * win[j];
            for (int64_t j = 0; j + 1 < ns; j++) win[j] = win[j + 1];
            if (ns > 0) win[ns - 1] = xt;
            y[t * n_chan + c] = silu((float)acc);
        }
        for (int64_t j = 0; j < ns; j++) state[j * n_chan + c] = win[j];
    }
}

void kern_ref_dn_recurrent(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                           int64_t h0, int64_t h1) {
    const int64_t dk = p->head_dim_k, dv = p->head_dim_v, hv = p->n_head_v;
    float kn[KERN_DN_MAX_HEAD_DIM], qn[KERN_DN_MAX_HEAD_DIM];
    for (int64_t h = h0; h < h1; h++) {
        const int64_t kh = kern_dn_head_k(p, h);
        float *S = state + h * dv * dk;
        for (int64_t t = 0; t < s->n_tok; t++) {
            head_load(kn, s->k + t * s->k_stride + kh * dk, dk, 1.0f, p->l2_eps);
            head_load(qn, s->q + t * s->q_stride + kh * dk, dk, p->scale, p->l2_eps);
            const float *v = s->v + t * s->v_stride + h * dv;
            const float decay = expf(s->g[t * hv + h]), beta = s->beta[t * hv + h];
            float *o = s->o + t * s->o_stride + h * dv;
            for (int64_t j = 0; j < dv; j++) { /* row j: column j of S */
                float *row = S + j * dk;
                double u = 0;
                for (int64_t i = 0; i < dk; i++) {
                    row[i] *= decay;
                    u += (double)row[i] * kn[i];
                }
                const float d = beta * (v[j] - (float)u);
                double acc = 0;
                for (int64_t i = 0; i < dk; i++) {
                    row[i] += kn[i] * d;
                    acc += (double)row[i] * qn[i];
                }
                o[j] = (float)acc;
            }
        }
    }
}

void kern_ref_dn_gated_norm(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                            int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = h0; h < h1; h++) {
            const int64_t off = (t * n_head + h) * head_dim;
            double ss = 0;
            for (int64_t i = 0; i < head_dim; i++) ss += (double)x[off + i] * x[off + i];
            const float scale = (float)(1.0 / sqrt(ss / (double)head_dim + eps));
            for (int64_t i = 0; i < head_dim; i++)
                y[off + i] = x[off + i] * scale * w[i] * silu(z[off + i]);
        }
}

/* ---- the chunked form ------------------------------------------------------------------
 *
 * Per head and chunk of n <= C tokens, with S the state before the chunk, a_t = e^(g_t),
 * γ_c = a_0·…·a_c (e^(G_c)) and E[c][j] = γ_c/γ_j = a_(j+1)·…·a_c (j <= c): unrolling the
 * recurrence within the chunk gives
 *   S_c = γ_c·S + Σ_{j<=c} E[c][j]·k_j·δ_jᵀ
 *   δ_c = β_c·(v_c − γ_c·Sᵀk_c − Σ_{j<c} E[c][j]·(k_c·k_j)·δ_j)
 *   o_c = γ_c·Sᵀq_c + Σ_{j<=c} E[c][j]·(q_c·k_j)·δ_j
 * so with L[c][j] = β_c·E[c][j]·(k_c·k_j) (j < c) the δ rows solve the unit lower
 * triangular system (I + L)·Δ = β∘(V − γ∘(K·S)): forward substitution, whose result
 * equals the notes' U − W·S (U = T·(β∘V), W = T·(β∘γ∘K), T = (I + L)⁻¹) without forming
 * T. Then O = γ∘(Q·S) + (P ∘ E)·Δ with P = Q·Kᵀ on and below the diagonal, and the state
 * after the chunk is γ_(n−1)·S + Σ_c E[n−1][c]·k_c·δ_cᵀ. The decays are products, never
 * differences of cumulative sums, so they keep their relative precision and underflow
 * to 0 where the state is forgotten.
 *
 * The work is six matrix products of the primitives' gemm and one triangular solve; the
 * state is kept key-major (S[i][:] contiguous) for the chunks of one call, so every
 * product broadcasts an element of one operand against rows of the other. */

struct dn_scratch {
    float *sk;           /* (d_k, d_v) the head's state, key-major: S[i][j] at i·d_v + j */
    float *kc, *qc;      /* (C, d_k) the chunk's keys, queries (· scale), normalised */
    float *kt, *kd;      /* (d_k, C) keys transposed; · E[n−1][c] */
    float *x, *y;        /* (C, d_v) K·S, then the right-hand side, then Δ; Q·S */
    float *a, *pq, *e;   /* (C, C) K·Kᵀ then L; Q·Kᵀ then P∘E; E */
    float *eg, *dec, *b; /* (C) γ_c, a_c, β_c */
};

enum { C = KERN_DN_CHUNK };

/* The parts' sizes in floats: each with 16 floats of slack (head_load's vector tail),
 * rounded up to 16 (a 64-byte line). */
static void scratch_sizes(const struct kern_dn_shape *p, size_t sz[13]) {
    const size_t dk = (size_t)p->head_dim_k, dv = (size_t)p->head_dim_v;
    const size_t raw[13] = {dk * dv, C * dk, C * dk, dk * C, dk * C, C * dv, C * dv,
                            C * C,   C * C,  C * C,  C,      C,      C};
    for (int i = 0; i < 13; i++) sz[i] = (raw[i] + 16 + 15) / 16 * 16;
}

size_t kern_dn_scratch_floats(const struct kern_dn_shape *p) {
    if (p->head_dim_k <= 0 || p->head_dim_v <= 0 || p->head_dim_k > KERN_DN_MAX_HEAD_DIM ||
        p->head_dim_v > KERN_DN_MAX_HEAD_DIM)
        return 0;
    size_t sz[13], n = 0;
    scratch_sizes(p, sz);
    for (int i = 0; i < 13; i++) n += sz[i]; /* bounded by the head dims above */
    return n;
}

static void scratch_layout(struct dn_scratch *sc, void *scratch, const struct kern_dn_shape *p) {
    size_t sz[13];
    scratch_sizes(p, sz);
    float *f = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float **part[13] = {&sc->sk, &sc->kc, &sc->qc, &sc->kt, &sc->kd,  &sc->x, &sc->y,
                        &sc->a,  &sc->pq, &sc->e,  &sc->eg, &sc->dec, &sc->b};
    for (int i = 0; i < 13; i++) {
        *part[i] = f;
        f += sz[i];
    }
}

/* dst (nc × nr, row stride ldd) = src (nr × nc, row stride lds) transposed, in tiles
 * that stay in L1. */
static void transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t nr,
                      int64_t nc) {
    enum { B = 16 };
    for (int64_t r0 = 0; r0 < nr; r0 += B)
        for (int64_t c0 = 0; c0 < nc; c0 += B) {
            const int64_t r1 = r0 + B < nr ? r0 + B : nr, c1 = c0 + B < nc ? c0 + B : nc;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

enum { PREFETCH_TOK = 8 };
/* Asks for the cache lines of n floats at x. */
static void prefetch(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(x + i);
}

/* Token rows [t0, t0 + n) of head h into the scratch, and the decay products. */
static void chunk_load(struct dn_scratch *sc, const struct kern_dn_seq *s,
                       const struct kern_dn_shape *p, int64_t h, int64_t t0, int64_t n,
                       const struct kern_dn_chunk_ops *ops) {
    const int64_t dk = p->head_dim_k, kh = kern_dn_head_k(p, h), hv = p->n_head_v;
    for (int64_t c = 0; c < n; c++) {
        const int64_t t = t0 + c;
        if (c + PREFETCH_TOK < n) { /* the rows of one head are a stride apart: fetch ahead */
            const int64_t ta = t + PREFETCH_TOK;
            prefetch(s->k + ta * s->k_stride + kh * dk, dk);
            prefetch(s->q + ta * s->q_stride + kh * dk, dk);
            prefetch(s->v + ta * s->v_stride + h * p->head_dim_v, p->head_dim_v);
        }
        ops->head_load(sc->kc + c * dk, s->k + t * s->k_stride + kh * dk, dk, 1.0f, p->l2_eps);
        ops->head_load(sc->qc + c * dk, s->q + t * s->q_stride + kh * dk, dk, p->scale, p->l2_eps);
        sc->b[c] = s->beta[t * hv + h];
        sc->dec[c] = expf(s->g[t * hv + h]);
    }
    for (int64_t c = 0; c < n; c++) {
        float *e = sc->e + c * C;
        sc->eg[c] = c > 0 ? sc->eg[c - 1] * sc->dec[c] : sc->dec[0];
        for (int64_t j = 0; j < c; j++) e[j] = sc->e[(c - 1) * C + j] * sc->dec[c];
        e[c] = 1.0f;
    }
    const float *elast = sc->e + (n - 1) * C;
    transpose(sc->kt, C, sc->kc, dk, n, dk);
    for (int64_t i = 0; i < dk; i++)
        for (int64_t c = 0; c < n; c++) sc->kd[i * C + c] = sc->kt[i * C + c] * elast[c];
}

/* The right-hand side β∘(V − γ∘(K·S)) into x (which holds K·S), L into a (which holds
 * K·Kᵀ) and P∘E into pq (which holds Q·Kᵀ), zero right of their diagonals. */
static void chunk_mix(struct dn_scratch *sc, const struct kern_dn_seq *s,
                      const struct kern_dn_shape *p, int64_t h, int64_t t0, int64_t n) {
    const int64_t dv = p->head_dim_v;
    for (int64_t c = 0; c < n; c++) {
        const float *v = s->v + (t0 + c) * s->v_stride + h * dv;
        float *x = sc->x + c * dv;
        const float b = sc->b[c], g = sc->eg[c];
        for (int64_t j = 0; j < dv; j++) x[j] = b * (v[j] - g * x[j]);
        float *a = sc->a + c * C, *pq = sc->pq + c * C;
        const float *e = sc->e + c * C;
        for (int64_t j = 0; j < n; j++) {
            a[j] = j < c ? b * e[j] * a[j] : 0.0f;
            pq[j] = j <= c ? e[j] * pq[j] : 0.0f;
        }
    }
}

void kern_dn_chunked_run(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                         int64_t h0, int64_t h1, void *scratch,
                         const struct kern_dn_chunk_ops *ops) {
    const int64_t dk = p->head_dim_k, dv = p->head_dim_v;
    struct dn_scratch sc;
    scratch_layout(&sc, scratch, p);
    for (int64_t h = h0; h < h1; h++) {
        float *st = state + h * dv * dk;
        transpose(sc.sk, dv, st, dk, dv, dk); /* to key-major */
        for (int64_t t0 = 0; t0 < s->n_tok; t0 += C) {
            const int64_t n = s->n_tok - t0 < C ? s->n_tok - t0 : C;
            chunk_load(&sc, s, p, h, t0, n, ops);
            ops->gemm(sc.x, dv, sc.kc, dk, sc.sk, dv, n, dv, dk, NULL, 0, NULL, 0, false);
            ops->gemm(sc.y, dv, sc.qc, dk, sc.sk, dv, n, dv, dk, NULL, 0, NULL, 0, false);
            ops->gemm(sc.a, C, sc.kc, dk, sc.kt, C, n, n, dk, NULL, 0, NULL, 0, false);
            ops->gemm(sc.pq, C, sc.qc, dk, sc.kt, C, n, n, dk, NULL, 0, NULL, 0, false);
            chunk_mix(&sc, s, p, h, t0, n);
            ops->solve(sc.x, dv, sc.a, C, n, dv); /* x = Δ */
            /* O = γ∘(Q·S) + (P∘E)·Δ, straight into the output rows */
            ops->gemm(s->o + t0 * s->o_stride + h * dv, s->o_stride, sc.pq, C, sc.x, dv, n, dv, n,
                      sc.y, dv, sc.eg, 1, true);
            /* S = γ_(n−1)·S + (K∘E[n−1])ᵀ·Δ */
            ops->gemm(sc.sk, dv, sc.kd, C, sc.x, dv, dk, dv, n, sc.sk, dv, sc.eg + n - 1, 0, false);
        }
        transpose(st, dk, sc.sk, dv, dk, dv); /* back to the stored layout */
    }
}

static void ref_gemm(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                     int64_t ldb, int64_t nr, int64_t nc, int64_t ni, const float *d, int64_t ldd,
                     const float *ds, int64_t ds_inc, bool lower) {
    for (int64_t r = 0; r < nr; r++) {
        const int64_t nir = lower && r + 1 < ni ? r + 1 : ni;
        for (int64_t j = 0; j < nc; j++) {
            double acc = d ? (double)ds[r * ds_inc] * d[r * ldd + j] : 0.0;
            for (int64_t i = 0; i < nir; i++) acc += (double)a[r * lda + i] * b[i * ldb + j];
            c[r * ldc + j] = (float)acc;
        }
    }
}

static void ref_solve(float *x, int64_t ldx, const float *l, int64_t ldl, int64_t n, int64_t nc) {
    for (int64_t r = 1; r < n; r++)
        for (int64_t j = 0; j < nc; j++) {
            double acc = x[r * ldx + j];
            for (int64_t i = 0; i < r; i++) acc -= (double)l[r * ldl + i] * x[i * ldx + j];
            x[r * ldx + j] = (float)acc;
        }
}

void kern_ref_dn_chunked(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                         int64_t h0, int64_t h1, void *scratch) {
    static const struct kern_dn_chunk_ops ops = {
        .gemm = ref_gemm, .solve = ref_solve, .head_load = head_load};
    kern_dn_chunked_run(state, s, p, h0, h1, scratch, &ops);
}

const struct kern_dn_impl kern_dn_impl_ref = {
    .level = "ref",
    .conv = kern_ref_dn_conv,
    .recurrent = kern_ref_dn_recurrent,
    .chunked = kern_ref_dn_chunked,
    .gated_norm = kern_ref_dn_gated_norm,
};
