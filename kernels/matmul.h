/* Thread pool and matrix multiplication.
 *
 * kern_matmul() supports every type whose traits row has a vec_dot (f32, f16, bf16,
 * q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, mxfp4). It picks the kernels of the
 * best SIMD level once (kern_init()); results do not depend on the thread count (each
 * output is computed by one tile, whatever the split), so runs are reproducible.
 * A pool runs one task at a time: kern_pool_run() must not be called concurrently on the
 * same pool nor from inside one of its tasks. Nothing here allocates per call. */
#pragma once

#include "kernels/types.h"

/* CPU features detected once by kern_init() and the SIMD level chosen from them. */
struct kern_cpu_info {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx_vnni, avx512bf16;
    const char *level; /* "ref", "avx2", "avxvnni", "avx512", "avx512bf16" */
};
/* Detects CPU features and fills the dispatch table. Idempotent and thread-safe; the
 * environment variable WARM_KERNELS=ref forces the reference kernels (tests use it), and
 * WARM_KERNELS=<level> caps the level (e.g. "avx2" on an AVX-512 machine). kern_matmul()
 * calls it on first use. */
void kern_init(void);
const struct kern_cpu_info *kern_cpu(void);
/* Levels from slowest to fastest: "ref", "avx2", "avxvnni" (the avx2 level's int8 dots in
 * AVX-VNNI's VPDPBUSD), "avx512", "avx512bf16" (bf16 prefill with VDPBF16PS: its
 * activations rounded to bf16); NULL past the end. The chosen level is the highest this
 * CPU runs (a CPU may have avx512 without avxvnni: Zen 4, Ice Lake); the table holds its
 * kernels over those of every lower level the CPU runs. */
const char *kern_level_name(int i);
/* Tests and benchmarks: switch the dispatch table to level (a kern_level_name()).
 * Returns ERR_UNSUPPORTED when this CPU lacks it or the name is unknown. Not safe while
 * another thread runs a kernel. */
int kern_set_level(const char *level);

/* A fixed set of worker threads. kern_pool_run() runs fn(arg, ith, nth) on nth = the
 * pool's thread count (the caller is thread 0) and returns when all are done. */
struct kern_pool;
typedef void (*kern_task_fn)(void *arg, int ith, int nth);
int kern_pool_new(int n_threads, struct kern_pool **ret);
void kern_pool_free(struct kern_pool *pool);
int kern_pool_n_threads(const struct kern_pool *pool);
/* kern_pool_run calls on pool so far (0 for NULL): what a caller's work costs in hand-offs */
uint64_t kern_pool_runs(const struct kern_pool *pool);
void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *arg);

/* y = x · Wᵀ:  y[t][o] = Σ_i W[o][i] · x[t][i]
 *   W: n_out rows of n_in values of type wt, row stride kern_row_size(wt, n_in) bytes
 *   x: (n_tok, n_in) f32, row stride n_in;  y: (n_tok, n_out) f32, row stride n_out
 * Quantized weights use activations quantized to q8 (q8_0 or q8_1 as the type needs)
 * into scratch, which must hold kern_matmul_scratch_bytes(wt, n_in, n_tok) bytes (0 for
 * one token of any float type: scratch may then be NULL; the float types' (f32, f16, bf16)
 * prefill in rows8 packs the activations there in panels of tokens; no alignment needed;
 * contents are not kept).
 * n_in must be a multiple of wt's block size. pool may be NULL (single-threaded). */
size_t kern_matmul_scratch_bytes(enum kern_type wt, int64_t n_in, int64_t n_tok);
void kern_matmul(struct kern_pool *pool, float *y, const void *w, enum kern_type wt,
                 const float *x, int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch);

/* Load-time repacking into rows8 (kernels/types.h, enum kern_layout). */
/* Whether this CPU's kernels read wt weights of n_out rows faster as rows8 (a type with
 * rows8 kernels at the current level, n_out a multiple of 8). */
bool kern_rows8_supported(enum kern_type wt, int64_t n_in, int64_t n_out);
/* Converts n_out rows (a multiple of 8) of n_in values between the two layouts; returns
 * ERR_UNSUPPORTED for a type without a rows8 layout or a shape it cannot take. */
int kern_rows8_pack(enum kern_type wt, void *dst, const void *src, int64_t n_in, int64_t n_out);
int kern_rows8_unpack(enum kern_type wt, void *dst, const void *src, int64_t n_in, int64_t n_out);
/* kern_matmul over weights in the given layout (any level computes rows8: levels without
 * its kernels unpack blocks as they go). */
void kern_matmul_layout(struct kern_pool *pool, float *y, const void *w, enum kern_type wt,
                        enum kern_layout layout, const float *x, int64_t n_in, int64_t n_out,
                        int64_t n_tok, void *scratch);

/* One input row set through several matrices (a layer's q, k and v; gate and up):
 * outs[i].y (n_tok, outs[i].n_out) = x (n_tok, n_in) · W_iᵀ, each as kern_matmul_layout
 * computes it, bit for bit. The matrices whose activations are converted as the first
 * converting one's (quantized to the same type, or packed into the same token blocks), or
 * read as they are, get them converted once and their work units as one pool run (a dense
 * layer's matmuls take 4 pool runs, not 7, in decode and prefill; in prefill each after
 * its one conversion); the others one kern_matmul_layout each. scratch: the largest
 * kern_matmul_scratch_bytes of them. */
enum { KERN_MM_MANY_MAX = 4 };
struct kern_mm_out {
    float *y;
    const void *w;
    enum kern_type wt;
    enum kern_layout layout;
    int64_t n_out;
};
void kern_matmul_many(struct kern_pool *pool, const struct kern_mm_out *outs, int n,
                      const float *x, int64_t n_in, int64_t n_tok, void *scratch);

/* Which kernel kern_matmul_layout runs for wt weights in layout with n_tok tokens at the
 * current level: the path ("rows": the file's rows; "rows8"; "rows16": two rows8 groups
 * per register; "rows8x4": decode of four rows8 groups at once, four streams from memory;
 * "reference": the reference dots) and *ret_level (may be NULL) the level whose kernel it
 * is ("ref", "avx2", "avx512", ...: a level may leave a type to a lower one). Static
 * strings. */
const char *kern_matmul_path(enum kern_type wt, enum kern_layout layout, int64_t n_tok,
                             const char **ret_level);

/* Converts n f32 values (a multiple of t's block size) to a row of type t with the
 * fastest converter this CPU has; the bytes equal the traits' reference from_f32 (SIMD
 * converters are checked bit for bit). Types without from_f32 must not be passed. */
void kern_quantize_row(enum kern_type t, void *dst, const float *src, int64_t n);

/* Reference dot product of one row of w (type wt, n values) with f32 x: the spec that
 * every SIMD variant is checked against. x is quantized block by block to wt's
 * vec_dot_type exactly as kern_matmul() does, so kern_matmul() differs from it only by
 * float summation order. NaN for a type without a dot product or a bad n. */
float kern_ref_dot_f32(const void *w, enum kern_type wt, const float *x, int64_t n);
