/* Thread pool and matrix multiplication. */
#pragma once

#include "kernels/types.h"

/* CPU features detected once by kern_init() and the SIMD level chosen from them. */
struct kern_cpu_info {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vnni, avx_vnni;
    const char *level; /* "ref", "avx2", "avx512", ... */
};
/* Detects CPU features and fills the dispatch table. Idempotent and thread-safe; the
 * environment variable WARM_KERNELS=ref forces the reference kernels (tests use it). */
void kern_init(void);
const struct kern_cpu_info *kern_cpu(void);

/* A fixed set of worker threads. kern_pool_run() runs fn(arg, ith, nth) on nth = the
 * pool's thread count (the caller is thread 0) and returns when all are done. */
struct kern_pool;
typedef void (*kern_task_fn)(void *arg, int ith, int nth);
int kern_pool_new(int n_threads, struct kern_pool **ret);
void kern_pool_free(struct kern_pool *pool);
int kern_pool_n_threads(const struct kern_pool *pool);
void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *arg);

/* y = x · Wᵀ:  y[t][o] = Σ_i W[o][i] · x[t][i]
 *   W: n_out rows of n_in values of type wt, row stride kern_row_size(wt, n_in) bytes
 *   x: (n_tok, n_in) f32, row stride n_in;  y: (n_tok, n_out) f32, row stride n_out
 * Quantized weights use activations quantized to q8 (q8_0 or q8_1 as the type needs)
 * into scratch, which must hold kern_matmul_scratch_bytes(wt, n_in, n_tok) bytes.
 * pool may be NULL (single-threaded). */
size_t kern_matmul_scratch_bytes(enum kern_type wt, int64_t n_in, int64_t n_tok);
void kern_matmul(struct kern_pool *pool, float *y, const void *w, enum kern_type wt,
                 const float *x, int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch);

/* Reference dot product of one row of w (type wt, n values) with f32 x: the spec that
 * every SIMD variant is checked against. */
float kern_ref_dot_f32(const void *w, enum kern_type wt, const float *x, int64_t n);
