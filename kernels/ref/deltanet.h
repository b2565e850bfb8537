/* Gated DeltaNet kernels: the per-level table kernels/deltanet.c dispatches through, and
 * the plain-C reference bodies (kernels/ref/deltanet.c), the spec every SIMD level is
 * tested against (tests/kernels/test-deltanet.c). Contracts: kernels/deltanet.h. */
#pragma once

#include "kernels/deltanet.h"

#include <stdbool.h>

/* One level's bodies, with the public functions' contracts. */
struct kern_dn_impl {
    const char *level;
    void (*conv)(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                 int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1);
    void (*recurrent)(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                      int64_t h0, int64_t h1);
    void (*chunked)(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                    int64_t h0, int64_t h1, void *scratch);
    void (*gated_norm)(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                       int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps);
};

/* The reference level. Its recurrence accumulates dot products and norms in double: it is
 * the spec. Its chunked form is the same algorithm as the SIMD bodies' in plain loops
 * (float, as they are), for targets without them. */
extern const struct kern_dn_impl kern_dn_impl_ref;

void kern_ref_dn_conv(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                      int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1);
void kern_ref_dn_recurrent(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                           int64_t h0, int64_t h1);
void kern_ref_dn_chunked(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                         int64_t h0, int64_t h1, void *scratch);
void kern_ref_dn_gated_norm(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                            int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps);

/* Floats of the chunked form's scratch (its layout: kernels/ref/deltanet.c); 0 on
 * overflow. kern_dn_scratch_bytes() adds 64 bytes for aligning it. */
size_t kern_dn_scratch_floats(const struct kern_dn_shape *p);

/* The primitives a level gives the chunked driver. Row-major matrices, leading
 * dimensions in floats.
 *   gemm:  c[r][j] = Σ_{i < n_i(r)} a[r][i]·b[i][j]  (+ ds[r·ds_inc]·d[r][j] when d is not
 *          NULL), r < nr, j < nc; n_i(r) = ni, or with lower any bound >= r + 1 (a is zero
 *          right of its diagonal there). d may equal c (the same ldc).
 *   solve: rows r < n of x (nc values each) ← x_r − Σ_{j<r} l[r][j]·x_j, in order: x
 *          becomes (I + L)⁻¹·x for L strictly lower triangular.
 *   head_load: dst = src·f (n values), f times 1/max(‖src‖, eps) when eps > 0: a query or
 *          key as read; dst may hold up to 16 more floats, which may be overwritten. */
struct kern_dn_chunk_ops {
    void (*gemm)(float *c, int64_t ldc, const float *a, int64_t lda, const float *b, int64_t ldb,
                 int64_t nr, int64_t nc, int64_t ni, const float *d, int64_t ldd, const float *ds,
                 int64_t ds_inc, bool lower);
    void (*solve)(float *x, int64_t ldx, const float *l, int64_t ldl, int64_t n, int64_t nc);
    void (*head_load)(float *dst, const float *src, int64_t n, float f, float eps);
};
/* kern_dn_chunked() over the given primitives (every level's chunked body). */
void kern_dn_chunked_run(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                         int64_t h0, int64_t h1, void *scratch,
                         const struct kern_dn_chunk_ops *ops);
