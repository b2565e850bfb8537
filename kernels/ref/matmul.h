/* The matmul dispatch table (private to kernels/) and its reference row.
 *
 * kern_matmul() converts activations with act_from_f32[vdt] (vdt = the weight type's
 * vec_dot_type) into rows of act_row_size(vdt, n) bytes, a layout private to the level,
 * then covers the output with tiles: tile[wt] computes y for up to KERN_TILE_ROWS weight
 * rows × KERN_TILE_TOKS tokens, so that SIMD variants unpack each weight block once for
 * all the tile's tokens (prefill) and reuse each activation block across rows.
 * kern_init() fills the table from the reference row, then lets the best SIMD level the
 * CPU has overwrite entries. */
#pragma once

#include "kernels/matmul.h"

#define KERN_TILE_ROWS 4
#define KERN_TILE_TOKS 64

/* y[t·y_stride + r] = w_r · x_t for r < nr, t < nt (1 <= nr <= KERN_TILE_ROWS,
 * 1 <= nt <= KERN_TILE_TOKS). w: nr rows of the weight type, w_stride bytes apart;
 * x: nt activation rows in the level's layout, x_stride bytes apart; n values per row. */
typedef void (*kern_tile_fn)(float *y, int64_t y_stride, const void *w, size_t w_stride,
                             const void *x, size_t x_stride, int64_t n, int nr, int nt);

/* rows8 (kernels/matmul.h): y[t·y_stride + r] for the 8 rows of one group (r < 8),
 * nt tokens (1 <= nt <= KERN_TILE_TOKS); g: the group's first byte. The float types
 * (f32, f16, bf16) with nt > 1 take their f32 activations packed in panels of
 * KERN_R8F_PANEL tokens (kern_matmul packs and covers the tokens in blocks of
 * KERN_R8F_BLOCK_TOKS, whole panels, so that only a matmul's last block computes a panel
 * short of tokens; that block also takes a remainder of up to KERN_TILE_TOKS -
 * KERN_R8F_BLOCK_TOKS tokens; a level may ask for other blocks, r8f_block_toks): panel p
 * holds [n][KERN_R8F_PANEL] floats, value k of its tokens side by side (a missing token's
 * 0), and starts p·KERN_R8F_PANEL·n floats into x; x_stride is then unused. A level
 * with an r8f_pack entry for the type reads its own packing instead. A block of one token
 * (decode; blocks of 64: a matmul of 64k + 1 tokens ends with one) is its f32 row. Any
 * level's packed block of up to KERN_TILE_TOKS tokens fits KERN_R8F_BLOCK_SLOTS·(n + 1)
 * floats. */
#define KERN_R8F_PANEL 12
#define KERN_R8F_BLOCK_TOKS (KERN_TILE_TOKS / KERN_R8F_PANEL * KERN_R8F_PANEL)
#define KERN_R8F_BLOCK_SLOTS 80
typedef void (*kern_tile8_fn)(float *y, int64_t y_stride, const void *g, const void *x,
                              size_t x_stride, int64_t n, int nt);
/* Decode (one token, x its f32 row of n values) of four rows8 groups at once, group s at
 * g + s·g_step bytes, its 8 outputs at y + s·y_step: four streams from memory, which one
 * core reads faster than one; each group's outputs the same bits as tile8's. */
typedef void (*kern_dec4_fn)(float *y, int64_t y_step, const void *g, size_t g_step,
                             const void *x, int64_t n);

/* Activation row layouts: the reference uses the vec_dot_type's own blocks; SIMD levels
 * may use another layout of at most KERN_ACT_BLOCK_BYTES per 32 values (scratch is sized
 * for the largest). */
#define KERN_ACT_BLOCK_BYTES 40

struct kern_impl {
    const char *level;
    kern_tile_fn tile[KERN_TYPE_COUNT];         /* by weight type; NULL = unsupported */
    kern_tile_fn tile1[KERN_TYPE_COUNT];        /* tile's contract for one token (decode of
                                                 * the file's rows); NULL: tile */
    kern_tile8_fn tile8[KERN_TYPE_COUNT];       /* rows8 weights; NULL: unpacked as they go */
    kern_tile8_fn tile16[KERN_TYPE_COUNT];      /* tile8's contract for two consecutive
                                                 * groups (g, g + 8 rows' bytes: 16 rows,
                                                 * y's 16 columns); NULL: two tile8 calls */
    kern_dec4_fn dec4[KERN_TYPE_COUNT];         /* rows8 decode of four groups; NULL: tile8
                                                 * and tile16 */
    kern_from_f32_fn from_f32[KERN_TYPE_COUNT]; /* by destination type; bit-identical to
                                                 * the traits' reference from_f32 */
    kern_from_f32_fn act_from_f32[KERN_TYPE_COUNT]; /* by vec_dot_type (q8_0, q8_1) */
    /* f32/f16/bf16 rows8 prefill, by weight type: packs part `part` of n_parts (its share
     * of the panels: the parts together write the whole) of a block of nt tokens (2 <= nt
     * <= KERN_TILE_TOKS; f32 rows of n values, n apart) into dst, in the layout this
     * level's tile8/tile16 of the type read, within KERN_R8F_BLOCK_SLOTS·(n + 1) floats;
     * NULL: the f32 panels */
    void (*r8f_pack[KERN_TYPE_COUNT])(void *dst, const float *x, int64_t n, int nt, int part,
                                      int n_parts);
    /* tokens per packed block where the level's tiles of the type prefer another count
     * than KERN_R8F_BLOCK_TOKS (at least it, at most KERN_TILE_TOKS); 0: that one */
    int r8f_block_toks[KERN_TYPE_COUNT];
    size_t (*act_row_size)(enum kern_type vdt, int64_t n);
    /* the level that wrote each tile entry (impl_build; for kern_matmul_path) */
    const char *tile_level[KERN_TYPE_COUNT], *tile1_level[KERN_TYPE_COUNT],
        *tile8_level[KERN_TYPE_COUNT], *tile16_level[KERN_TYPE_COUNT],
        *dec4_level[KERN_TYPE_COUNT];
};

/* Fills every entry from the reference kernels. */
void kern_impl_fill_ref(struct kern_impl *impl);

/* Whether wt has a rows8 layout and n_out rows of n_in values can take it. */
bool kern_rows8_shape_ok(enum kern_type wt, int64_t n_in, int64_t n_out);

/* Type blocks [j0, j0 + cnt) of a rows8 group g, in the file's layout: row r's at
 * dst + r·dst_stride. */
void kern_rows8_blocks(enum kern_type wt, uint8_t *dst, size_t dst_stride, const void *g,
                       int64_t j0, int64_t cnt);

/* rows8 weights without a tile8: rebuilds the group's blocks in the file's layout a few at
 * a time and runs the reference dots (reference activation rows only). */
void kern_tile8_unpacked(enum kern_type wt, float *y, int64_t y_stride, const void *g,
                         const void *x, size_t x_stride, int64_t n, int nt);
