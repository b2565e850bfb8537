/* rows8: weights repacked at load so that a register holds one block of 8 rows
 * (kernels/matmul.h). The conversions both ways, and the reference tile for levels
 * without rows8 kernels. */
#include "base/base.h"
#include "kernels/ref/matmul.h"

#include <string.h>

/* Bytes of one block of 8 rows, or 0 for a type without a rows8 layout. */
static size_t group_block_bytes(enum kern_type wt) {
    switch (wt) {
    case KERN_TYPE_F32: return 8 * sizeof(float);
    case KERN_TYPE_F16: return 8 * sizeof(kern_f16);
    case KERN_TYPE_BF16: return 8 * sizeof(kern_bf16);
    case KERN_TYPE_Q4_0: return 8 * sizeof(struct block_q4_0);
    case KERN_TYPE_IQ4_NL: return 8 * sizeof(struct block_iq4_nl);
    case KERN_TYPE_Q4_1: return 8 * sizeof(struct block_q4_1);
    case KERN_TYPE_Q5_0: return 8 * sizeof(struct block_q5_0);
    case KERN_TYPE_Q5_1: return 8 * sizeof(struct block_q5_1);
    case KERN_TYPE_Q8_0: return 8 * sizeof(struct block_q8_0);
    case KERN_TYPE_Q4_K: return 8 * sizeof(struct block_q4_K);
    case KERN_TYPE_Q5_K: return 8 * sizeof(struct block_q5_K);
    case KERN_TYPE_Q6_K: return 8 * sizeof(struct block_q6_K);
    case KERN_TYPE_Q3_K: return 8 * sizeof(struct block_q3_K);
    case KERN_TYPE_Q2_K: return 8 * sizeof(struct block_q2_K);
    case KERN_TYPE_IQ4_XS: return 8 * sizeof(struct block_iq4_xs);
    case KERN_TYPE_MXFP4: return 8 * sizeof(struct block_mxfp4);
    default: return 0;
    }
}

bool kern_rows8_shape_ok(enum kern_type wt, int64_t n_in, int64_t n_out) {
    const struct kern_type_traits *tr = kern_type_traits((int)wt);
    return tr && group_block_bytes(wt) && n_in > 0 && n_in % tr->blck_size == 0 && n_out > 0 &&
           n_out % 8 == 0;
}

/* n bytes between a row's block and the group block, either way */
static inline __attribute__((always_inline)) void move(uint8_t *g, uint8_t *row, size_t n,
                                                       bool to_group) {
    if (to_group) memcpy(g, row, n);
    else memcpy(row, g, n);
}

/* Block j of 8 rows (row[r]: row r's block, file layout) to or from the group block g, for
 * the types q32_blocks and kq_blocks do not take. */
static void group_block(enum kern_type wt, uint8_t *g, uint8_t *row[8], bool to_group) {
    for (int r = 0; r < 8; r++) {
        if (wt == KERN_TYPE_MXFP4) { /* e | qs[16] */
            move(g + r, row[r], 1, to_group);
            for (int k = 0; k < 4; k++) move(g + 8 + 32 * k + 4 * r, row[r] + 1 + 4 * k, 4, to_group);
        } else if (wt == KERN_TYPE_Q6_K) { /* ql[128] | qh[64] | scales[16] | d */
            move(g + 2 * r, row[r] + 208, 2, to_group);
            for (int j = 0; j < 8; j++) move(g + 16 + 16 * j + 2 * r, row[r] + 192 + 2 * j, 2, to_group);
            for (int c = 0; c < 32; c++) move(g + 144 + 32 * c + 4 * r, row[r] + 4 * c, 4, to_group);
            for (int c = 0; c < 16; c++) move(g + 1168 + 32 * c + 4 * r, row[r] + 128 + 4 * c, 4, to_group);
        } else if (wt == KERN_TYPE_Q3_K) { /* hmask[32] | qs[64] | scales[12] | d */
            move(g + 2 * r, row[r] + 108, 2, to_group);
            for (int w = 0; w < 3; w++) move(g + 16 + 32 * w + 4 * r, row[r] + 96 + 4 * w, 4, to_group);
            for (int c = 0; c < 8; c++) move(g + 112 + 32 * c + 4 * r, row[r] + 4 * c, 4, to_group);
            for (int c = 0; c < 16; c++) move(g + 368 + 32 * c + 4 * r, row[r] + 32 + 4 * c, 4, to_group);
        } else if (wt == KERN_TYPE_Q2_K) { /* scales[16] | qs[64] | d | dmin */
            move(g + 2 * r, row[r] + 80, 2, to_group);
            move(g + 16 + 2 * r, row[r] + 82, 2, to_group);
            for (int j = 0; j < 8; j++) move(g + 32 + 16 * j + 2 * r, row[r] + 2 * j, 2, to_group);
            for (int c = 0; c < 16; c++) move(g + 160 + 32 * c + 4 * r, row[r] + 16 + 4 * c, 4, to_group);
        } else if (wt == KERN_TYPE_IQ4_XS) { /* d | scales_h | scales_l[4] | qs[128] */
            move(g + 2 * r, row[r], 2, to_group);
            move(g + 16 + 2 * r, row[r] + 2, 2, to_group);
            move(g + 32 + 4 * r, row[r] + 4, 4, to_group);
            for (int c = 0; c < 32; c++) move(g + 64 + 32 * c + 4 * r, row[r] + 8 + 4 * c, 4, to_group);
        }
    }
}

/* Blocks of the 32-value types, q4_0, iq4_nl, q8_0: d | qs;  q4_1: d | m | qs;  q5_0: d |
 * qh[4] | qs;  q5_1: d | m | qh[4] | qs: in a group the fp16 fields (d, m) 16 bytes each,
 * then the rest in 4-byte chunks (qh first), 32 bytes each. The field counts are constants
 * (n16 fp16 fields, nc chunks), so that every move is one load and one store: with them
 * tested per row and block a 7 GB q8_0 model's load spent 0.6 s in the repack (12 -> 24
 * GB/s a thread for q8_0 and q4_0 groups in cache). */
static inline __attribute__((always_inline)) void q32_blocks(uint8_t *g, uint8_t *plain,
                                                             size_t stride, int64_t j0, int64_t cnt,
                                                             const bool to_group, const int n16,
                                                             const int nc) {
    const size_t tb = 2 * (size_t)n16 + 4 * (size_t)nc, gb = 8 * tb;
    for (int64_t j = 0; j < cnt; j++) {
        uint8_t *gj = g + (size_t)(j0 + j) * gb;
        for (int r = 0; r < 8; r++) {
            uint8_t *row = plain + r * stride + (size_t)j * tb;
            for (int f = 0; f < n16; f++) move(gj + 16 * f + 2 * r, row + 2 * f, 2, to_group);
            for (int k = 0; k < nc; k++) move(gj + 16 * n16 + 32 * k + 4 * r, row + 2 * n16 + 4 * k, 4, to_group);
        }
    }
}

/* q4_K: d | dmin | scales[12] | qs[128];  q5_K: ... | qh[32] | qs[128]: in a group d[8] |
 * dmin[8] | scales in 3 chunks | qh in 8 chunks | qs in 4 × 8 chunks (kernels/types.h), with
 * qh (a row's qh bytes) a constant, as q32_blocks (12 -> 25 GB/s a thread in cache) */
static inline __attribute__((always_inline)) void kq_blocks(uint8_t *g, uint8_t *plain,
                                                            size_t stride, int64_t j0, int64_t cnt,
                                                            const bool to_group, const int qh) {
    const size_t tb = 144 + (size_t)qh, gb = 8 * tb;
    for (int64_t j = 0; j < cnt; j++) {
        uint8_t *gj = g + (size_t)(j0 + j) * gb;
        for (int r = 0; r < 8; r++) {
            uint8_t *row = plain + r * stride + (size_t)j * tb;
            move(gj + 2 * r, row, 2, to_group);
            move(gj + 16 + 2 * r, row + 2, 2, to_group);
            for (int w = 0; w < 3; w++) move(gj + 32 + 32 * w + 4 * r, row + 4 + 4 * w, 4, to_group);
            for (int k = 0; k < qh / 4; k++) move(gj + 128 + 32 * k + 4 * r, row + 16 + 4 * k, 4, to_group);
            for (int q = 0; q < 4; q++)
                for (int k = 0; k < 8; k++)
                    move(gj + 128 + 8 * qh + 256 * q + 32 * k + 4 * r, row + 16 + qh + 32 * q + 4 * k, 4,
                         to_group);
        }
    }
}

/* The float types' blocks: a value of es bytes each (es a constant: one load and one
 * store per value, no per-block calls) */
static inline __attribute__((always_inline)) void value_blocks(uint8_t *g, uint8_t *plain,
                                                               size_t stride, int64_t j0,
                                                               int64_t cnt, bool to_group,
                                                               const size_t es) {
    for (int r = 0; r < 8; r++) {
        uint8_t *gv = g + ((size_t)j0 * 8 + (size_t)r) * es, *row = plain + r * stride;
        for (int64_t j = 0; j < cnt; j++) {
            if (to_group) memcpy(gv + 8 * es * (size_t)j, row + es * (size_t)j, es);
            else memcpy(row + es * (size_t)j, gv + 8 * es * (size_t)j, es);
        }
    }
}

/* Type blocks [j0, j0 + cnt) of the group at g and of 8 rows in the file's layout (row r
 * at plain + r·stride, from its block j0), one way or the other. */
static void blocks_convert(enum kern_type wt, uint8_t *g, uint8_t *plain, size_t stride, int64_t j0,
                           int64_t cnt, bool to_group) {
    const size_t gb = group_block_bytes(wt), tb = kern_type_traits((int)wt)->type_size;
    if (wt == KERN_TYPE_F32) {
        value_blocks(g, plain, stride, j0, cnt, to_group, 4);
        return;
    }
    if (wt == KERN_TYPE_F16 || wt == KERN_TYPE_BF16) {
        value_blocks(g, plain, stride, j0, cnt, to_group, 2);
        return;
    }
#define Q32(n16, nc)                                                                        \
    do {                                                                                    \
        if (to_group) q32_blocks(g, plain, stride, j0, cnt, true, n16, nc);                 \
        else q32_blocks(g, plain, stride, j0, cnt, false, n16, nc);                         \
        return;                                                                             \
    } while (0)
#define KQ(qh)                                                                              \
    do {                                                                                    \
        if (to_group) kq_blocks(g, plain, stride, j0, cnt, true, qh);                       \
        else kq_blocks(g, plain, stride, j0, cnt, false, qh);                               \
        return;                                                                             \
    } while (0)
    switch (wt) {
    case KERN_TYPE_Q4_0:
    case KERN_TYPE_IQ4_NL: Q32(1, 4);
    case KERN_TYPE_Q8_0: Q32(1, 8);
    case KERN_TYPE_Q4_1: Q32(2, 4);
    case KERN_TYPE_Q5_0: Q32(1, 5);
    case KERN_TYPE_Q5_1: Q32(2, 5);
    case KERN_TYPE_Q4_K: KQ(0);
    case KERN_TYPE_Q5_K: KQ(32);
    default: break;
    }
#undef Q32
#undef KQ
    for (int64_t j = 0; j < cnt; j++) {
        uint8_t *rows[8];
        for (int r = 0; r < 8; r++) rows[r] = plain + r * stride + (size_t)j * tb;
        group_block(wt, g + (size_t)(j0 + j) * gb, rows, to_group);
    }
}

static int convert(enum kern_type wt, uint8_t *grouped, uint8_t *plain, int64_t n_in,
                   int64_t n_out, bool to_group) {
    if (!kern_rows8_shape_ok(wt, n_in, n_out)) return ERR_UNSUPPORTED;
    const int64_t nb = n_in / kern_type_traits((int)wt)->blck_size;
    const size_t rb = kern_row_size(wt, n_in);
    for (int64_t g0 = 0; g0 < n_out; g0 += 8)
        blocks_convert(wt, grouped + (size_t)g0 * rb, plain + (size_t)g0 * rb, rb, 0, nb, to_group);
    return 0;
}

int kern_rows8_pack(enum kern_type wt, void *dst, const void *src, int64_t n_in, int64_t n_out) {
    return convert(wt, dst, (uint8_t *)src, n_in, n_out, true);
}

int kern_rows8_unpack(enum kern_type wt, void *dst, const void *src, int64_t n_in, int64_t n_out) {
    return convert(wt, (uint8_t *)src, dst, n_in, n_out, false);
}

void kern_rows8_blocks(enum kern_type wt, uint8_t *dst, size_t dst_stride, const void *g,
                       int64_t j0, int64_t cnt) {
    blocks_convert(wt, (uint8_t *)g, dst, dst_stride, j0, cnt, false);
}

void kern_tile8_unpacked(enum kern_type wt, float *y, int64_t y_stride, const void *g,
                         const void *x, size_t x_stride, int64_t n, int nt) {
    enum { CHUNK_BYTES = 1152 }; /* a few blocks of each row rebuilt at a time */
    const struct kern_type_traits *tr = kern_type_traits((int)wt), *xt = kern_type_traits(tr->vec_dot_type);
    const int64_t nb = n / tr->blck_size, chunk = CHUNK_BYTES / (int64_t)tr->type_size;
    const size_t xb = xt->type_size * (size_t)(tr->blck_size / xt->blck_size);
    _Alignas(16) uint8_t buf[8][CHUNK_BYTES];
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < 8; r++) y[t * y_stride + r] = 0.0f;
    for (int64_t j0 = 0; j0 < nb; j0 += chunk) {
        const int64_t cnt = MIN(chunk, nb - j0);
        kern_rows8_blocks(wt, buf[0], CHUNK_BYTES, g, j0, cnt);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xr = (const uint8_t *)x + t * x_stride + (size_t)j0 * xb;
            for (int r = 0; r < 8; r++)
                y[t * y_stride + r] += tr->vec_dot(buf[r], xr, cnt * tr->blck_size);
        }
    }
}
