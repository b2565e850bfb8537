/* Reference (plain C) conversions between f32 and every block type, and the reference
 * dot products of a weight row with an activation row. Private to kernels/: the public
 * entry points are the traits rows in kernels/types.c. n is a multiple of the type's
 * block size everywhere. */
#pragma once

#include "kernels/types.h"

#define KERN_REF_CONV(name)                                                            \
    void kern_ref_##name##_to_f32(float *dst, const void *src, int64_t n);             \
    void kern_ref_##name##_from_f32(void *dst, const float *src, int64_t n);
KERN_REF_CONV(f32)
KERN_REF_CONV(f16)
KERN_REF_CONV(bf16)
KERN_REF_CONV(q8_0)
KERN_REF_CONV(q8_1)
KERN_REF_CONV(q4_0)
KERN_REF_CONV(q4_1)
KERN_REF_CONV(q5_0)
KERN_REF_CONV(q5_1)
KERN_REF_CONV(iq4_nl)
KERN_REF_CONV(mxfp4)
#undef KERN_REF_CONV

void kern_ref_q4_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q4_K_from_f32(void *dst, const float *src, int64_t n);
void kern_ref_q5_K_from_f32(void *dst, const float *src, int64_t n);
void kern_ref_q6_K_from_f32(void *dst, const float *src, int64_t n);
void kern_ref_q5_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q6_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q8_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q2_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q2_K_from_f32(void *dst, const float *src, int64_t n);
void kern_ref_q3_K_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_q3_K_from_f32(void *dst, const float *src, int64_t n);
void kern_ref_iq4_xs_to_f32(float *dst, const void *src, int64_t n);
void kern_ref_iq4_xs_from_f32(void *dst, const float *src, int64_t n);
/* Scale d_g (g < 16) of q3_K's 12 packed scale bytes, minus 32: -32..31. */
int kern_ref_q3_K_scale(const uint8_t *scales, int g);
/* Scale ls_j (j < 8) of an iq4_xs super-block, minus 32: -32..31. */
int kern_ref_iq4_xs_scale(const struct block_iq4_xs *b, int j);

/* Reference dot products (kern_vec_dot_fn): weight row · activation row, where the
 * activation row has the weight type's vec_dot_type. */
float kern_ref_dot_f32_f32(const void *w, const void *x, int64_t n);
float kern_ref_dot_f16_f32(const void *w, const void *x, int64_t n);
float kern_ref_dot_bf16_f32(const void *w, const void *x, int64_t n);
float kern_ref_dot_q8_0_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q4_0_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q4_1_q8_1(const void *w, const void *x, int64_t n);
float kern_ref_dot_q5_0_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q5_1_q8_1(const void *w, const void *x, int64_t n);
float kern_ref_dot_iq4_nl_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q4_K_q8_1(const void *w, const void *x, int64_t n);
float kern_ref_dot_q5_K_q8_1(const void *w, const void *x, int64_t n);
float kern_ref_dot_q6_K_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q2_K_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_q3_K_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_iq4_xs_q8_0(const void *w, const void *x, int64_t n);
float kern_ref_dot_mxfp4_q8_0(const void *w, const void *x, int64_t n);
