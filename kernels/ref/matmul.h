/* The matmul dispatch table (private to kernels/) and its reference row.
 *
 * kern_matmul() converts activations to the weight type's vec_dot_type with from_f32[], then
 * covers the output with tiles: tile[wt] computes y for up to KERN_TILE_ROWS weight rows
 * × KERN_TILE_TOKS tokens, so that SIMD variants reuse each unpacked weight block across
 * tokens (prefill) and each activation block across rows. kern_init() fills the table
 * from the reference row, then lets the best SIMD level the CPU has overwrite entries. */
#pragma once

#include "kernels/matmul.h"

#define KERN_TILE_ROWS 4
#define KERN_TILE_TOKS 4

/* y[t·y_stride + r] = w_r · x_t for r < nr, t < nt (1 <= nr <= KERN_TILE_ROWS,
 * 1 <= nt <= KERN_TILE_TOKS). w: nr rows of the weight type, w_stride bytes apart;
 * x: nt rows of its vec_dot_type, x_stride bytes apart; n values per row. */
typedef void (*kern_tile_fn)(float *y, int64_t y_stride, const void *w, size_t w_stride,
                             const void *x, size_t x_stride, int64_t n, int nr, int nt);

struct kern_impl {
    const char *level;
    kern_tile_fn tile[KERN_TYPE_COUNT];      /* by weight type; NULL = unsupported */
    kern_from_f32_fn from_f32[KERN_TYPE_COUNT]; /* by destination type; bit-identical to
                                                  * the traits' reference from_f32 */
};

/* Fills every entry from the reference kernels. */
void kern_impl_fill_ref(struct kern_impl *impl);
