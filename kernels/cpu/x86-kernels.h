/* The body of the x86 SIMD kernels, compiled once per level: kernels/cpu/x86-avx2.c and
 * x86-avx512.c include it inside a target region (GCC or clang pragma) after defining
 *   X86_SFX(name)  name with the level's suffix
 *   X86_VNNI       1: int8 dot products with VPDPBUSD (AVX512-VNNI + VL, or AVX-VNNI at
 *                  256 bits), 0: PMADDUBSW
 *   X86_W512       1: 512-bit registers (two quant blocks per step), 0: 256-bit (one)
 * Nothing here runs unless kern_init() saw the level's features.
 *
 * Activations (q8_0 / q8_1) are kept in a planar row layout private to these levels:
 *   qs[nb][32] int8 | d[nb] f32 | s[nb] f32   (nb = n / 32; d, s = the fp16 values of
 * the reference blocks, widened), so that a step loads 64 contiguous bytes of codes and
 * its scales without any fp16 conversion. q8_0 rows, which have no s, keep there the
 * codes' sums over values 0..15 and 16..31 as two int16 (low, high).
 *
 * Quantized weights: every block is unpacked to 32 bytes in natural value order. Two ways
 * to feed the unsigned×signed byte dot (VPDPBUSD / PMADDUBSW):
 *   U: unsigned codes u = value + OFF (q4_0: OFF 8, q5_0: 16, q8_0/iq4_nl: 128,
 *      mxfp4: 12, q4_1/q5_1: 0), and Σ u·x is corrected by -OFF·Σx, computed once per token step;
 *   S: signed values v, Σ |v|·(x·sign v) — for PMADDUBSW when u could reach 255, where its
 *      16-bit pair sums would saturate (q8_0 and iq4_nl without VNNI).
 * Each block's integer lanes are converted to f32 and accumulated with d_w·d_x; q4_1 and
 * q5_1 add m·s (s = d_x·Σq_x). Tiles of 4 rows × several tokens first unpack the 4 rows
 * into a small pack (64 blocks at a time) and then run 4×4 register tiles over it, so
 * the unpacking is paid once per up to KERN_TILE_TOKS tokens; single tokens (decode)
 * unpack as they go. The 256-bit level (16 registers) packs the 4 rows interleaved
 * instead (ipack: one register holds 4 rows, see ipack_body), decodes k-quants a
 * super-block at a time (kdirect_body) and runs float tiles of 4 rows × 3 tokens. Rows8
 * weights (kernels/ref/matmul.h) run 8 rows per register (r8_body); the 512-bit level's
 * prefill of q4_0, iq4_nl, q4_1, q5_0, q5_1, mxfp4 and the k-quants runs 16, two groups
 * side by side (x86-rows16.h).
 *
 * The body is in parts, one per section, included below in the order they build on each
 * other; each says what it holds at its top. This file ends with the dispatch: the level's
 * entry points, one per type and layout, and the table kern_impl_fill writes them into. */
#include <immintrin.h>
#include <string.h>

#define X86_INLINE static inline __attribute__((always_inline))

#include "kernels/cpu/x86-kinds.h"   /* enum wkind and the kinds' facts */
#include "kernels/cpu/x86-block.h"   /* one block of any kind unpacked */
#include "kernels/cpu/x86-step.h"    /* vector primitives of a step, per level */
#include "kernels/cpu/x86-decode.h"  /* file's rows × one token */
#include "kernels/cpu/x86-prefill.h" /* file's rows × a tile of tokens */
#include "kernels/cpu/x86-rows8.h"   /* rows8 weights, 8 rows per register */
#if X86_W512
#include "kernels/cpu/x86-rows16.h" /* rows8 weights, 16 rows per register */
#endif
#include "kernels/cpu/x86-float.h" /* f32, f16, bf16 weights */
#include "kernels/cpu/x86-act.h"   /* activation quantizers */

/* ---- dispatch: the level's entry points, one per type and layout, and its table ------ */

/* tile (the file's rows): qtile for a wkind K, ftile for an fkind F */
#define X86_QTILE(name, K)                                                                  \
    static void X86_SFX(tile_##name)(float *y, int64_t ys, const void *w, size_t wst,       \
                                     const void *x, size_t xst, int64_t n, int nr, int nt) { \
        qtile(y, ys, w, wst, x, xst, n, nr, nt, K);                                          \
    }
X86_QTILE(q8_0, WK_Q8_0)
X86_QTILE(q4_0, WK_Q4_0)
X86_QTILE(q4_1, WK_Q4_1)
X86_QTILE(q5_0, WK_Q5_0)
X86_QTILE(q5_1, WK_Q5_1)
X86_QTILE(iq4_nl, WK_IQ4_NL)
X86_QTILE(mxfp4, WK_MXFP4)
X86_QTILE(q4_K, WK_Q4_K)
X86_QTILE(q5_K, WK_Q5_K)
X86_QTILE(q6_K, WK_Q6_K)
X86_QTILE(q2_K, WK_Q2_K)
X86_QTILE(q3_K, WK_Q3_K)
X86_QTILE(iq4_xs, WK_IQ4_XS)
#undef X86_QTILE
#define X86_FTILE(name, F)                                                                  \
    static void X86_SFX(tile_##name)(float *y, int64_t ys, const void *w, size_t wst,       \
                                     const void *x, size_t xst, int64_t n, int nr, int nt) { \
        ftile(y, ys, w, wst, x, xst, n, nr, nt, F);                                          \
    }
X86_FTILE(f32, FK_F32)
X86_FTILE(f16, FK_F16)
X86_FTILE(bf16, FK_BF16)
#undef X86_FTILE

/* tile8 (rows8): drv (tile8, ftile8) for the type K (a wkind, an fkind); the 512-bit
 * level's tile16 of quantized types: tile16q over two groups */
#define X86_TILE8(name, drv, K)                                                             \
    static void X86_SFX(tile8_##name)(float *y, int64_t ys, const void *g, const void *x,   \
                                      size_t xst, int64_t n, int nt) {                      \
        drv(y, ys, g, x, xst, n, nt, K);                                                    \
    }
X86_TILE8(q4_0, tile8, WK_Q4_0)
X86_TILE8(iq4_nl, tile8, WK_IQ4_NL)
X86_TILE8(q4_1, tile8, WK_Q4_1)
X86_TILE8(q5_0, tile8, WK_Q5_0)
X86_TILE8(q5_1, tile8, WK_Q5_1)
X86_TILE8(mxfp4, tile8, WK_MXFP4)
X86_TILE8(q8_0, tile8, WK_Q8_0)
X86_TILE8(q4_K, tile8, WK_Q4_K)
X86_TILE8(q5_K, tile8, WK_Q5_K)
X86_TILE8(iq4_xs, tile8, WK_IQ4_XS)
X86_TILE8(q6_K, tile8, WK_Q6_K)
X86_TILE8(q3_K, tile8, WK_Q3_K)
X86_TILE8(q2_K, tile8, WK_Q2_K)
X86_TILE8(f32, ftile8, FK_F32)
X86_TILE8(f16, ftile8, FK_F16)
X86_TILE8(bf16, ftile8, FK_BF16)
#if X86_W512
X86_TILE8(16_q4_0, tile16q, WK_Q4_0)
X86_TILE8(16_iq4_nl, tile16q, WK_IQ4_NL)
X86_TILE8(16_q4_1, tile16q, WK_Q4_1)
X86_TILE8(16_q5_0, tile16q, WK_Q5_0)
X86_TILE8(16_q5_1, tile16q, WK_Q5_1)
X86_TILE8(16_mxfp4, tile16q, WK_MXFP4)
X86_TILE8(16_q4_K, tile16q, WK_Q4_K)
X86_TILE8(16_q5_K, tile16q, WK_Q5_K)
X86_TILE8(16_q6_K, tile16q, WK_Q6_K)
X86_TILE8(16_q3_K, tile16q, WK_Q3_K)
X86_TILE8(16_q2_K, tile16q, WK_Q2_K)
#endif
#undef X86_TILE8

/* tile16 (two rows8 groups) of the float types: ftile16 */
#define X86_TILE16(name, F)                                                                 \
    static void X86_SFX(tile16_##name)(float *y, int64_t ys, const void *g, const void *x,  \
                                       size_t xst, int64_t n, int nt) {                     \
        ftile16(y, ys, g, x, xst, n, nt, F);                                                \
    }
X86_TILE16(f32, FK_F32)
X86_TILE16(f16, FK_F16)
X86_TILE16(bf16, FK_BF16)
#undef X86_TILE16

/* dec4 (four groups' decode) of the float types: fdec4 */
#define X86_DEC4(name, F)                                                                   \
    static void X86_SFX(dec4_##name)(float *y, int64_t ystep, const void *g, size_t gstep,  \
                                     const void *x, int64_t n) {                            \
        fdec4(y, ystep, g, gstep, x, n, F);                                                 \
    }
X86_DEC4(f32, FK_F32)
X86_DEC4(f16, FK_F16)
X86_DEC4(bf16, FK_BF16)
#undef X86_DEC4

void X86_SFX(kern_impl_fill)(struct kern_impl *impl) {
    impl->tile[KERN_TYPE_F32] = X86_SFX(tile_f32);
    impl->tile[KERN_TYPE_F16] = X86_SFX(tile_f16);
    impl->tile[KERN_TYPE_BF16] = X86_SFX(tile_bf16);
    impl->tile[KERN_TYPE_Q8_0] = X86_SFX(tile_q8_0);
    impl->tile[KERN_TYPE_Q4_0] = X86_SFX(tile_q4_0);
    impl->tile[KERN_TYPE_Q4_1] = X86_SFX(tile_q4_1);
    impl->tile[KERN_TYPE_Q5_0] = X86_SFX(tile_q5_0);
    impl->tile[KERN_TYPE_Q5_1] = X86_SFX(tile_q5_1);
    impl->tile[KERN_TYPE_IQ4_NL] = X86_SFX(tile_iq4_nl);
    impl->tile[KERN_TYPE_MXFP4] = X86_SFX(tile_mxfp4);
    impl->tile[KERN_TYPE_Q4_K] = X86_SFX(tile_q4_K);
    impl->tile[KERN_TYPE_Q5_K] = X86_SFX(tile_q5_K);
    impl->tile[KERN_TYPE_Q6_K] = X86_SFX(tile_q6_K);
    impl->tile[KERN_TYPE_Q2_K] = X86_SFX(tile_q2_K);
    impl->tile[KERN_TYPE_Q3_K] = X86_SFX(tile_q3_K);
    impl->tile[KERN_TYPE_IQ4_XS] = X86_SFX(tile_iq4_xs);
    impl->tile8[KERN_TYPE_Q4_0] = X86_SFX(tile8_q4_0);
    impl->tile8[KERN_TYPE_IQ4_NL] = X86_SFX(tile8_iq4_nl);
    impl->tile8[KERN_TYPE_Q4_1] = X86_SFX(tile8_q4_1);
    impl->tile8[KERN_TYPE_Q5_0] = X86_SFX(tile8_q5_0);
    impl->tile8[KERN_TYPE_Q5_1] = X86_SFX(tile8_q5_1);
    impl->tile8[KERN_TYPE_MXFP4] = X86_SFX(tile8_mxfp4);
    impl->tile8[KERN_TYPE_Q8_0] = X86_SFX(tile8_q8_0);
    impl->tile8[KERN_TYPE_Q4_K] = X86_SFX(tile8_q4_K);
    impl->tile8[KERN_TYPE_Q5_K] = X86_SFX(tile8_q5_K);
    impl->tile8[KERN_TYPE_IQ4_XS] = X86_SFX(tile8_iq4_xs);
    impl->tile8[KERN_TYPE_Q6_K] = X86_SFX(tile8_q6_K);
    impl->tile8[KERN_TYPE_F32] = X86_SFX(tile8_f32);
    impl->tile8[KERN_TYPE_F16] = X86_SFX(tile8_f16);
    impl->tile8[KERN_TYPE_BF16] = X86_SFX(tile8_bf16);
    impl->tile16[KERN_TYPE_F32] = X86_SFX(tile16_f32);
    impl->tile16[KERN_TYPE_F16] = X86_SFX(tile16_f16);
    impl->tile16[KERN_TYPE_BF16] = X86_SFX(tile16_bf16);
    impl->dec4[KERN_TYPE_F32] = X86_SFX(dec4_f32);
    impl->dec4[KERN_TYPE_F16] = X86_SFX(dec4_f16);
    impl->dec4[KERN_TYPE_BF16] = X86_SFX(dec4_bf16);
    impl->tile8[KERN_TYPE_Q3_K] = X86_SFX(tile8_q3_K);
    impl->tile8[KERN_TYPE_Q2_K] = X86_SFX(tile8_q2_K);
#if X86_W512
    impl->tile16[KERN_TYPE_Q4_0] = X86_SFX(tile8_16_q4_0);
    impl->tile16[KERN_TYPE_IQ4_NL] = X86_SFX(tile8_16_iq4_nl);
    impl->tile16[KERN_TYPE_Q4_1] = X86_SFX(tile8_16_q4_1);
    impl->tile16[KERN_TYPE_Q5_0] = X86_SFX(tile8_16_q5_0);
    impl->tile16[KERN_TYPE_Q5_1] = X86_SFX(tile8_16_q5_1);
    impl->tile16[KERN_TYPE_MXFP4] = X86_SFX(tile8_16_mxfp4);
    impl->tile16[KERN_TYPE_Q4_K] = X86_SFX(tile8_16_q4_K);
    impl->tile16[KERN_TYPE_Q5_K] = X86_SFX(tile8_16_q5_K);
    impl->tile16[KERN_TYPE_Q6_K] = X86_SFX(tile8_16_q6_K);
    impl->tile16[KERN_TYPE_Q3_K] = X86_SFX(tile8_16_q3_K);
    impl->tile16[KERN_TYPE_Q2_K] = X86_SFX(tile8_16_q2_K);
    /* float prefill in panels of 16 tokens (x86-float.h R8F_PW) */
    impl->r8f_pack[KERN_TYPE_F32] = impl->r8f_pack[KERN_TYPE_F16] =
        impl->r8f_pack[KERN_TYPE_BF16] = X86_SFX(f32_pack16);
    impl->r8f_block_toks[KERN_TYPE_F32] = impl->r8f_block_toks[KERN_TYPE_F16] =
        impl->r8f_block_toks[KERN_TYPE_BF16] = KERN_TILE_TOKS;
#endif
#if !X86_W512
    /* float prefill in kern_matmul's panels of KERN_R8F_PANEL, packed in registers */
    impl->r8f_pack[KERN_TYPE_F32] = impl->r8f_pack[KERN_TYPE_F16] =
        impl->r8f_pack[KERN_TYPE_BF16] = X86_SFX(f32_pack12);
#endif
    /* Decode of the file's rows (a mapped model's experts, shapes rows8 cannot take): the
     * level's tile, except that the 512-bit level leaves q2_K, q3_K and iq4_xs to the
     * 256-bit one, filled before it (the activation rows are this file's planar layout at
     * both): at 512 bits these have no super-block body (wk_kdirect) and direct_body
     * unpacks each sub-block with its super-block's scales, 0.4-0.7x the 256-bit speed
     * (warm-kbench --rows --compare avx2,avx512). */
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (!X86_W512 || (t != KERN_TYPE_Q2_K && t != KERN_TYPE_Q3_K && t != KERN_TYPE_IQ4_XS))
            impl->tile1[t] = impl->tile[t];
    impl->from_f32[KERN_TYPE_Q8_0] = X86_SFX(quant_q8_0);
    impl->from_f32[KERN_TYPE_Q8_1] = X86_SFX(quant_q8_1);
    impl->from_f32[KERN_TYPE_F16] = X86_SFX(quant_f16);
    impl->act_from_f32[KERN_TYPE_Q8_0] = X86_SFX(act_q8_0);
    impl->act_from_f32[KERN_TYPE_Q8_1] = X86_SFX(act_q8_1);
    impl->act_row_size = X86_SFX(act_row_size);
}
