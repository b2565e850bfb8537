/* Gated DeltaNet: the level dispatch, the shape check and the small per-head ops (gates,
 * L2 norm) that have one body for every level. Contracts: kernels/deltanet.h. */
#include "kernels/deltanet.h"

#include "base/base.h"
#include "kernels/cpu/deltanet.h"
#include "kernels/matmul.h"
#include "kernels/ref/deltanet.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* The bodies of the current dispatch level. kern_cpu()->level is one of kern_level_name()'s
 * static strings; levels above avx512 (avx512bf16) add nothing here, nor avxvnni to avx2. */
static const struct kern_dn_impl *impl_get(void) {
#if defined(__x86_64__)
    const char *level = kern_cpu()->level;
    if (strncmp(level, "avx512", 6) == 0) return &kern_dn_impl_avx512;
    if (strcmp(level, "avx2") == 0 || strcmp(level, "avxvnni") == 0) return &kern_dn_impl_avx2;
#endif
    return &kern_dn_impl_ref;
}

const char *kern_dn_level(void) { return impl_get()->level; }

int kern_dn_shape_check(const struct kern_dn_shape *p) {
    if (!p || p->n_head_k <= 0 || p->n_head_v <= 0 || p->n_head_v % p->n_head_k != 0)
        return ERR_INVALID;
    if (p->head_dim_k <= 0 || p->head_dim_k > KERN_DN_MAX_HEAD_DIM || p->head_dim_v <= 0 ||
        p->head_dim_v > KERN_DN_MAX_HEAD_DIM)
        return ERR_INVALID;
    if ((unsigned)p->head_map >= KERN_DN_HEAD_MAP_COUNT) return ERR_INVALID;
    if (!isfinite(p->scale) || !isfinite(p->l2_eps) || p->l2_eps < 0) return ERR_INVALID;
    return 0;
}

void kern_dn_conv(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                  int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1) {
    assert(n_kernel >= 1 && n_kernel <= KERN_DN_MAX_KERNEL && 0 <= c0 && c1 <= n_chan);
    if (n_tok <= 0 || c0 >= c1) return;
    impl_get()->conv(y, state, x, w, n_tok, n_chan, n_kernel, c0, c1);
}

void kern_dn_transpose(float *dst, const float *src, int64_t n_rows, int64_t n_cols) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++) dst[c * n_rows + r] = src[r * n_cols + c];
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void kern_dn_gates(float *g, float *beta, const float *a, const float *b, const float *dt_bias,
                   const float *ssm_a, int64_t n_tok, int64_t n_head) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t i = t * n_head + h;
            g[i] = softplus(a[i] + dt_bias[h]) * ssm_a[h];
            beta[i] = 1.0f / (1.0f + expf(-b[i]));
        }
}

void kern_dn_l2norm(float *x, int64_t stride, int64_t n_tok, int64_t head_dim, int64_t h0,
                    int64_t h1, float eps) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = h0; h < h1; h++) {
            float *r = x + t * stride + h * head_dim;
            double ss = 0;
            for (int64_t i = 0; i < head_dim; i++) ss += (double)r[i] * r[i];
            const float norm = (float)sqrt(ss), inv = 1.0f / (norm > eps ? norm : eps);
            for (int64_t i = 0; i < head_dim; i++) r[i] *= inv;
        }
}

void kern_dn_recurrent(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                       int64_t h0, int64_t h1) {
    assert(kern_dn_shape_check(p) == 0 && 0 <= h0 && h1 <= p->n_head_v);
    if (s->n_tok <= 0 || h0 >= h1) return;
    impl_get()->recurrent(state, s, p, h0, h1);
}

size_t kern_dn_scratch_bytes(const struct kern_dn_shape *p) {
    size_t n = kern_dn_scratch_floats(p), bytes;
    if (n == 0 || !size_mul(n, sizeof(float), &bytes) || !size_add(bytes, 64, &bytes)) return 0;
    return bytes;
}

void kern_dn_chunked(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                     int64_t h0, int64_t h1, void *scratch) {
    assert(kern_dn_shape_check(p) == 0 && 0 <= h0 && h1 <= p->n_head_v && scratch);
    if (s->n_tok <= 0 || h0 >= h1) return;
    impl_get()->chunked(state, s, p, h0, h1, scratch);
}

void kern_dn_delta(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                   int64_t h0, int64_t h1, void *scratch) {
    if (s->n_tok >= KERN_DN_CHUNKED_MIN_TOK)
        kern_dn_chunked(state, s, p, h0, h1, scratch);
    else
        kern_dn_recurrent(state, s, p, h0, h1);
}

void kern_dn_gated_norm(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                        int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps) {
    assert(0 <= h0 && h1 <= n_head && head_dim > 0);
    if (n_tok <= 0 || h0 >= h1) return;
    impl_get()->gated_norm(y, x, z, w, n_tok, n_head, head_dim, h0, h1, eps);
}
