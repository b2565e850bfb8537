/* Reference matmul tile (the traits' vec_dot, one dot per output) and kern_ref_dot_f32,
 * the spec every variant is checked against. */
#include "kernels/ref/matmul.h"

#include "kernels/ref/quant.h"

#include <math.h>
#include <string.h>

/* Generic tile: one reference dot per (row, token). The weight type is implied by the
 * vec_dot pointer, so each type gets a tiny wrapper below. */
static void tile_generic(kern_vec_dot_fn dot, float *y, int64_t y_stride, const void *w,
                         size_t w_stride, const void *x, size_t x_stride, int64_t n, int nr,
                         int nt) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            y[t * y_stride + r] =
                dot((const uint8_t *)w + r * w_stride, (const uint8_t *)x + t * x_stride, n);
}

#define REF_TILE(wt, fn)                                                                \
    static void tile_ref_##wt(float *y, int64_t y_stride, const void *w, size_t w_stride, \
                              const void *x, size_t x_stride, int64_t n, int nr, int nt) { \
        tile_generic(fn, y, y_stride, w, w_stride, x, x_stride, n, nr, nt);             \
    }
REF_TILE(f32, kern_ref_dot_f32_f32)
REF_TILE(f16, kern_ref_dot_f16_f32)
REF_TILE(bf16, kern_ref_dot_bf16_f32)
REF_TILE(q8_0, kern_ref_dot_q8_0_q8_0)
REF_TILE(q4_0, kern_ref_dot_q4_0_q8_0)
REF_TILE(q4_1, kern_ref_dot_q4_1_q8_1)
REF_TILE(q5_0, kern_ref_dot_q5_0_q8_0)
REF_TILE(q5_1, kern_ref_dot_q5_1_q8_1)
REF_TILE(iq4_nl, kern_ref_dot_iq4_nl_q8_0)
REF_TILE(q4_K, kern_ref_dot_q4_K_q8_1)
REF_TILE(q5_K, kern_ref_dot_q5_K_q8_1)
REF_TILE(q6_K, kern_ref_dot_q6_K_q8_0)
REF_TILE(q2_K, kern_ref_dot_q2_K_q8_0)
REF_TILE(q3_K, kern_ref_dot_q3_K_q8_0)
REF_TILE(iq4_xs, kern_ref_dot_iq4_xs_q8_0)
REF_TILE(mxfp4, kern_ref_dot_mxfp4_q8_0)
#undef REF_TILE

void kern_impl_fill_ref(struct kern_impl *impl) {
    *impl = (struct kern_impl){
        .level = "ref",
        .tile =
            {
                [KERN_TYPE_F32] = tile_ref_f32,
                [KERN_TYPE_F16] = tile_ref_f16,
                [KERN_TYPE_BF16] = tile_ref_bf16,
                [KERN_TYPE_Q8_0] = tile_ref_q8_0,
                [KERN_TYPE_Q4_0] = tile_ref_q4_0,
                [KERN_TYPE_Q4_1] = tile_ref_q4_1,
                [KERN_TYPE_Q5_0] = tile_ref_q5_0,
                [KERN_TYPE_Q5_1] = tile_ref_q5_1,
                [KERN_TYPE_IQ4_NL] = tile_ref_iq4_nl,
                [KERN_TYPE_Q4_K] = tile_ref_q4_K,
                [KERN_TYPE_Q5_K] = tile_ref_q5_K,
                [KERN_TYPE_Q6_K] = tile_ref_q6_K,
                [KERN_TYPE_Q2_K] = tile_ref_q2_K,
                [KERN_TYPE_Q3_K] = tile_ref_q3_K,
                [KERN_TYPE_IQ4_XS] = tile_ref_iq4_xs,
                [KERN_TYPE_MXFP4] = tile_ref_mxfp4,
            },
    };
    for (int t = 0; t < KERN_TYPE_COUNT; t++) {
        const struct kern_type_traits *tr = kern_type_traits(t);
        impl->from_f32[t] = tr ? tr->from_f32 : NULL;
    }
    impl->act_from_f32[KERN_TYPE_Q8_0] = kern_ref_q8_0_from_f32;
    impl->act_from_f32[KERN_TYPE_Q8_1] = kern_ref_q8_1_from_f32;
    impl->act_row_size = kern_row_size;
}

/* Quantizes x one block at a time exactly as kern_matmul does (same rule, same blocks)
 * and sums the per-block reference dots in the same order, so a correct kern_matmul
 * differs from this only by float summation order. */
float kern_ref_dot_f32(const void *w, enum kern_type wt, const float *x, int64_t n) {
    const struct kern_type_traits *tr = kern_type_traits((int)wt);
    if (!tr || !tr->vec_dot || n <= 0 || n % tr->blck_size != 0) return NAN;
    if (tr->vec_dot_type == KERN_TYPE_F32) return tr->vec_dot(w, x, n);
    const struct kern_type_traits *xt = kern_type_traits(tr->vec_dot_type);
    uint8_t xq[QK_K / QK8_1 * sizeof(struct block_q8_1)]; /* activations for one block */
    float s = 0.0f;
    for (int64_t i = 0; i < n; i += tr->blck_size) {
        xt->from_f32(xq, x + i, tr->blck_size);
        s += tr->vec_dot((const uint8_t *)w + i / tr->blck_size * tr->type_size, xq,
                         tr->blck_size);
    }
    return s;
}
