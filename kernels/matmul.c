/* kern_matmul: activation quantization, the work split over threads and the dispatch
 * table chosen once from the CPU's features. */
#include "kernels/matmul.h"

#include "base/base.h"
#include "kernels/cpu/x86.h"
#include "kernels/ref/matmul.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* Process-wide, written once by kern_init() (or by kern_set_level() in tests). */
static struct kern_impl impl;
static struct kern_cpu_info cpu_info = {.level = "ref"};
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Levels, slowest first: a name, whether this CPU can run it, and the function that
 * overwrites the reference entries it has kernels for. */
struct level_row {
    const char *name;
    bool (*usable)(const struct kern_cpu_info *cpu);
    void (*fill)(struct kern_impl *impl);
};
static bool level_ref_usable(const struct kern_cpu_info *cpu) { return true; }
#if defined(__x86_64__)
static bool level_avx2_usable(const struct kern_cpu_info *cpu) {
    return cpu->avx2 && cpu->fma && cpu->f16c;
}
static bool level_avxvnni_usable(const struct kern_cpu_info *cpu) {
    return level_avx2_usable(cpu) && cpu->avx_vnni;
}
static bool level_avx512_usable(const struct kern_cpu_info *cpu) {
    return level_avx2_usable(cpu) && cpu->avx512f && cpu->avx512bw && cpu->avx512vl &&
           cpu->avx512vnni;
}
static bool level_avx512bf16_usable(const struct kern_cpu_info *cpu) {
    return level_avx512_usable(cpu) && cpu->avx512bf16;
}
#endif
static const struct level_row levels[] = {
    {"ref", level_ref_usable, NULL},
#if defined(__x86_64__)
    {"avx2", level_avx2_usable, kern_impl_fill_avx2},
    /* not below avx512 in features (Zen 4 and Ice Lake have AVX-512 without AVX-VNNI):
     * a level the CPU lacks is skipped, and the ones above it still apply */
    {"avxvnni", level_avxvnni_usable, kern_impl_fill_avxvnni},
    {"avx512", level_avx512_usable, kern_impl_fill_avx512},
    {"avx512bf16", level_avx512bf16_usable, kern_impl_fill_avx512bf16},
#endif
};

const char *kern_level_name(int i) {
    return i >= 0 && (size_t)i < ARRAY_SIZE(levels) ? levels[i].name : NULL;
}

static void cpu_detect(struct kern_cpu_info *cpu) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    cpu->avx2 = __builtin_cpu_supports("avx2");
    cpu->fma = __builtin_cpu_supports("fma");
    /* f16c and avxvnni straight from CPUID (clang 14's __builtin_cpu_supports knows
     * neither): leaf 1 ECX bit 29, leaf 7 subleaf 1 EAX bit 4. Both use the AVX state,
     * whose support by the OS the avx2 test already covers. */
    unsigned a, b, c, d;
    cpu->f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    cpu->avx512f = __builtin_cpu_supports("avx512f");
    cpu->avx512bw = __builtin_cpu_supports("avx512bw");
    cpu->avx512vl = __builtin_cpu_supports("avx512vl");
    cpu->avx512vnni = __builtin_cpu_supports("avx512vnni");
    cpu->avx_vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
    cpu->avx512bf16 = __builtin_cpu_supports("avx512bf16");
#else
    (void)cpu;
#endif
}

/* Marks the tile entries that differ from before's with level (all of them when before is
 * NULL). */
static void impl_mark(struct kern_impl *dst, const struct kern_impl *before, const char *level) {
    for (size_t t = 0; t < KERN_TYPE_COUNT; t++) {
        if (!before || dst->tile[t] != before->tile[t]) dst->tile_level[t] = level;
        if (!before || dst->tile1[t] != before->tile1[t]) dst->tile1_level[t] = level;
        if (!before || dst->tile8[t] != before->tile8[t]) dst->tile8_level[t] = level;
        if (!before || dst->tile16[t] != before->tile16[t]) dst->tile16_level[t] = level;
        if (!before || dst->dec4[t] != before->dec4[t]) dst->dec4_level[t] = level;
    }
}

/* Fills impl with ref, then every level this CPU runs up to and including levels[top]. */
static void impl_build(struct kern_impl *dst, size_t top) {
    kern_impl_fill_ref(dst);
    impl_mark(dst, NULL, levels[0].name);
    for (size_t i = 1; i <= top; i++) {
        if (!levels[i].usable(&cpu_info)) continue;
        struct kern_impl before = *dst;
        levels[i].fill(dst);
        dst->level = levels[i].name;
        impl_mark(dst, &before, levels[i].name);
    }
}

static void init_once_fn(void) {
    cpu_detect(&cpu_info);
    /* WARM_KERNELS caps the level; read once, here, like every environment knob. A cap
     * this CPU lacks (avxvnni on Zen 4) still caps: the highest level below it runs. */
    const char *cap = getenv("WARM_KERNELS");
    size_t top = 0;
    for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
        if (levels[i].usable(&cpu_info)) top = i;
        if (cap && strcmp(cap, levels[i].name) == 0) break;
    }
    impl_build(&impl, top);
    cpu_info.level = impl.level;
}

void kern_init(void) {
    pthread_once(&init_once, init_once_fn);
}

const struct kern_cpu_info *kern_cpu(void) {
    kern_init();
    return &cpu_info;
}

int kern_set_level(const char *level) {
    kern_init();
    for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
        if (!level || strcmp(levels[i].name, level) != 0) continue;
        if (!levels[i].usable(&cpu_info)) return ERR_UNSUPPORTED;
        impl_build(&impl, i);
        cpu_info.level = impl.level;
        return 0;
    }
    return ERR_UNSUPPORTED;
}

void kern_quantize_row(enum kern_type t, void *dst, const float *src, int64_t n) {
    kern_init();
    const struct kern_type_traits *tr = kern_type_traits((int)t);
    assert(tr && impl.from_f32[t] && n % tr->blck_size == 0);
    (void)tr;
    impl.from_f32[t](dst, src, n);
}

/* ---- matmul ------------------------------------------------------------------------ */

enum {
    MM_UNIT_ROWS = 16,      /* rows of a work unit: at least, and a multiple of */
    MM_DECODE_UNITS = 2,    /* decode work units per thread */
    MM_PREFILL_UNITS = 8,   /* prefill work units per thread and token block */
    MM_MAX_UNIT_ROWS = 8192, /* a large vocabulary's output rows still split finer */
    MM_UNIT_TOKS = KERN_TILE_TOKS, /* tokens per work unit: their activations stay in L2 */
};
static_assert(KERN_R8F_BLOCK_TOKS > 0 && KERN_R8F_BLOCK_TOKS % KERN_R8F_PANEL == 0 &&
                  KERN_R8F_BLOCK_TOKS <= KERN_TILE_TOKS,
              "float rows8 token blocks are whole panels within a tile's tokens");
static_assert(KERN_R8F_BLOCK_SLOTS >=
                  (KERN_TILE_TOKS + KERN_R8F_PANEL - 1) / KERN_R8F_PANEL * KERN_R8F_PANEL,
              "a block of KERN_TILE_TOKS tokens in f32 panels fits its bytes");

/* Bytes of one packed block of activations for the float (f32, f16, bf16) rows8 tiles
 * (any level's layout, up to KERN_TILE_TOKS tokens: kernels/ref/matmul.h), or 0 where
 * rows are read as they are. */
static size_t rows8_f32_block(enum kern_type wt, int64_t n_in) {
    if (wt != KERN_TYPE_F32 && wt != KERN_TYPE_F16 && wt != KERN_TYPE_BF16) return 0;
    return (size_t)KERN_R8F_BLOCK_SLOTS * (size_t)(n_in + 1) * sizeof(float);
}

/* The packed token blocks of n_tok tokens: bt each (the level's r8f_block_toks, else
 * KERN_R8F_BLOCK_TOKS), the last one also taking a remainder of up to KERN_TILE_TOKS - bt
 * tokens, which as a block of its own would cost a pass over the weights for a few tokens
 * (pp64 in blocks of 60 was 60 + 4 tokens: the 4 took 23 % of the 60's time). There are
 * never more than ceil(n_tok / KERN_R8F_BLOCK_TOKS) (the scratch's count). */
static int64_t r8f_n_blocks(int64_t n_tok, int64_t bt) {
    int64_t nb = (n_tok + bt - 1) / bt;
    if (nb > 1 && n_tok - (nb - 1) * bt <= KERN_TILE_TOKS - bt) nb--;
    return nb;
}
/* Tokens [*t0, *t1) of block b of the nb blocks of n_tok. A block of one token (blocks of
 * 64: 64k + 1 tokens) is not packed: the tiles read its f32 row, as decode's. */
static void r8f_block(int64_t b, int64_t nb, int64_t n_tok, int64_t bt, int64_t *t0, int64_t *t1) {
    *t0 = b * bt;
    *t1 = b == nb - 1 ? n_tok : *t0 + bt;
}

size_t kern_matmul_scratch_bytes(enum kern_type wt, int64_t n_in, int64_t n_tok) {
    const struct kern_type_traits *tr = kern_type_traits((int)wt);
    size_t r;
    if (tr && tr->vec_dot && tr->vec_dot_type == KERN_TYPE_F32 && n_in > 0 && n_tok > 1) {
        /* at most this many blocks, whatever the level's block size */
        const size_t b = rows8_f32_block(wt, n_in), nb = (size_t)((n_tok + KERN_R8F_BLOCK_TOKS - 1) / KERN_R8F_BLOCK_TOKS);
        return b && size_mul(b, nb, &r) ? r : b ? SIZE_MAX : 0;
    }
    if (!tr || !tr->vec_dot || tr->vec_dot_type == KERN_TYPE_F32 || n_tok <= 0) return 0;
    /* the largest activation layout of any level, so that levels may be switched */
    if (n_in <= 0 || n_in % 32 != 0) return 0;
    if (!size_mul((size_t)(n_in / 32) * KERN_ACT_BLOCK_BYTES, (size_t)n_tok, &r)) return SIZE_MAX;
    return r;
}

/* The activations converted for the tiles: quantized rows of dst_stride bytes, or
 * (quant NULL) token blocks packed for the float rows8 tiles (kernels/ref/matmul.h),
 * block_bytes each: by the level's pack (bf16 pairs at avx512bf16: converted once per
 * matmul, not once per tile) or in f32 panels. */
struct act_task {
    kern_from_f32_fn quant;
    void (*pack)(void *dst, const float *x, int64_t n, int nt, int part, int n_parts);
    uint8_t *dst;
    size_t dst_stride, block_bytes;
    const float *x;
    int64_t n_in, n_tok, block_toks;
};

/* Part `part` of n_parts of block b's panels: every thread packs its part of every block
 * (a matmul of 64 tokens is one block; its packing, about 3 % of a 1-thread bf16 layer,
 * fell to one thread while the other waited). */
static void act_pack_block(const struct act_task *q, int64_t b, int part, int n_parts) {
    int64_t t0, t1;
    r8f_block(b, r8f_n_blocks(q->n_tok, q->block_toks), q->n_tok, q->block_toks, &t0, &t1);
    const int64_t nt = t1 - t0;
    if (nt == 1) return; /* the tiles read a lone token's row (mm_unit) */
    uint8_t *blk = q->dst + (size_t)b * q->block_bytes;
    if (q->pack) {
        q->pack(blk, q->x + t0 * q->n_in, q->n_in, (int)nt, part, n_parts);
        return;
    }
    const int64_t np = (nt + KERN_R8F_PANEL - 1) / KERN_R8F_PANEL;
    for (int64_t p = np * part / n_parts; p < np * (part + 1) / n_parts; p++) {
        float *pan = (float *)blk + p * KERN_R8F_PANEL * q->n_in;
        for (int l = 0; l < KERN_R8F_PANEL; l++) {
            const int64_t t = p * KERN_R8F_PANEL + l;
            if (t < nt) {
                const float *xr = q->x + (t0 + t) * q->n_in;
                for (int64_t k = 0; k < q->n_in; k++) pan[k * KERN_R8F_PANEL + l] = xr[k];
            } else {
                for (int64_t k = 0; k < q->n_in; k++) pan[k * KERN_R8F_PANEL + l] = 0.0f;
            }
        }
    }
}

static void act_task_run(void *arg, int ith, int nth) {
    const struct act_task *q = arg;
    if (!q->quant) {
        const int64_t nb = r8f_n_blocks(q->n_tok, q->block_toks);
        for (int64_t b = 0; b < nb; b++) act_pack_block(q, b, ith, nth);
        return;
    }
    for (int64_t i = q->n_tok * ith / nth; i < q->n_tok * (ith + 1) / nth; i++)
        q->quant(q->dst + i * q->dst_stride, q->x + i * q->n_in, q->n_in);
}

struct mm_task {
    kern_tile_fn tile;
    kern_tile8_fn tile8;  /* rows8 weights: one group of 8 rows per call */
    kern_tile8_fn tile16; /* or two groups, where the level has it */
    kern_dec4_fn dec4;    /* or, for one token, four groups, each its own stream */
    bool rows8;
    enum kern_type wt;
    float *y;
    const uint8_t *w, *x;
    const float *xf; /* the f32 rows (a packed matmul's lone last token) */
    size_t w_stride, x_stride;
    size_t x_block; /* != 0: x holds packed token blocks of this many bytes */
    int64_t n_in, n_out, n_tok;
    int64_t unit_rows, unit_toks, n_row_units, n_tok_units, n_units;
    _Atomic int64_t next; /* next work unit to take */
};

/* Work unit u of m: a token block's rows of one row block */
static void mm_unit(const struct mm_task *m, int64_t u) {
    const int64_t tb = u / m->n_row_units, r0 = u % m->n_row_units * m->unit_rows;
    const int64_t r1 = MIN(r0 + m->unit_rows, m->n_out);
    int64_t t0 = tb * m->unit_toks, t1 = MIN(t0 + m->unit_toks, m->n_tok);
    if (m->x_block) r8f_block(tb, m->n_tok_units, m->n_tok, m->unit_toks, &t0, &t1);
    if (m->rows8) { /* units are whole groups: unit_rows and n_out are multiples of 8 */
        int64_t r = r0;
        if (m->dec4) { /* decode: four streams, a quarter of the unit's groups each */
            const int64_t q = (r1 - r0) / 32; /* groups per stream; the 0-3 left below */
            for (int64_t i = 0; i < q; i++)
                m->dec4(m->y + r0 + 8 * i, 8 * q, m->w + (r0 + 8 * i) * m->w_stride,
                        (size_t)(8 * q) * m->w_stride, m->x, m->n_in);
            r = r0 + 32 * q;
        }
        while (r < r1) {
            float *y = m->y + t0 * m->n_out + r;
            const uint8_t *g = m->w + r * m->w_stride;
            const uint8_t *x = !m->x_block ? m->x + t0 * m->x_stride
                               : t1 - t0 == 1 ? (const uint8_t *)(m->xf + t0 * m->n_in)
                                              : m->x + tb * m->x_block;
            const int rows = m->tile16 && r + 16 <= r1 ? 16 : 8;
            r += rows;
            if (rows == 16)
                m->tile16(y, m->n_out, g, x, m->x_stride, m->n_in, (int)(t1 - t0));
            else if (m->tile8)
                m->tile8(y, m->n_out, g, x, m->x_stride, m->n_in, (int)(t1 - t0));
            else
                kern_tile8_unpacked(m->wt, y, m->n_out, g, x, m->x_stride, m->n_in, (int)(t1 - t0));
        }
        return;
    }
    for (int64_t r = r0; r < r1; r += KERN_TILE_ROWS)
        m->tile(m->y + t0 * m->n_out + r, m->n_out, m->w + r * m->w_stride, m->w_stride,
                m->x + t0 * m->x_stride, m->x_stride, m->n_in,
                (int)MIN(KERN_TILE_ROWS, r1 - r), (int)(t1 - t0));
}

/* Work units = (token block, row block), token block varying slowest so that threads
 * share the activations in cache; units are taken dynamically (threads may be slowed by
 * other work on the machine). Inside a unit, each tile of weight rows meets every token
 * of the block (one tile call) while it is hot in L1. */
static void mm_task_run(void *arg, int ith, int nth) {
    struct mm_task *m = arg;
    (void)ith, (void)nth;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&m->next, 1, memory_order_relaxed);
        if (u >= m->n_units) break;
        mm_unit(m, u);
    }
}

/* The float types' decode: four groups at a time, for types whose activations are the f32
 * row (the dec4 contract) */
static kern_dec4_fn rows8_dec4(enum kern_type wt, const struct kern_type_traits *tr,
                               int64_t n_tok) {
    return n_tok == 1 && tr->vec_dot_type == KERN_TYPE_F32 ? impl.dec4[wt] : NULL;
}

/* The tile of the file's rows that n_tok tokens of wt take: tile1 for one, where set */
static kern_tile_fn rows_tile(enum kern_type wt, int64_t n_tok, const char **ret_level) {
    const bool one = n_tok == 1 && impl.tile1[wt];
    if (ret_level) *ret_level = one ? impl.tile1_level[wt] : impl.tile_level[wt];
    return one ? impl.tile1[wt] : impl.tile[wt];
}

const char *kern_matmul_path(enum kern_type wt, enum kern_layout layout, int64_t n_tok,
                             const char **ret_level) {
    kern_init();
    const struct kern_type_traits *tr = kern_type_traits((int)wt);
    const char *level = "ref", *path = "reference";
    if (tr && tr->vec_dot && layout == KERN_LAYOUT_ROWS8) {
        /* as kern_matmul_layout chooses (a matmul of fewer than 16 rows takes tile8; a
         * work unit's groups past a multiple of 4 take tile16/tile8 after rows8x4) */
        if (rows8_dec4(wt, tr, n_tok)) {
            level = impl.dec4_level[wt];
            path = "rows8x4";
        } else if (impl.tile16[wt] && (n_tok > 1 || tr->vec_dot_type == KERN_TYPE_F32)) {
            level = impl.tile16_level[wt];
            path = "rows16";
        } else if (impl.tile8[wt]) {
            level = impl.tile8_level[wt];
            path = "rows8";
        }
    } else if (tr && impl.tile[wt]) {
        rows_tile(wt, n_tok, &level);
        path = strcmp(level, "ref") == 0 ? "reference" : "rows";
    }
    if (ret_level) *ret_level = level;
    return path;
}

bool kern_rows8_supported(enum kern_type wt, int64_t n_in, int64_t n_out) {
    kern_init();
    return kern_rows8_shape_ok(wt, n_in, n_out) && impl.tile8[wt];
}

void kern_matmul(struct kern_pool *pool, float *y, const void *w, enum kern_type wt,
                 const float *x, int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch) {
    kern_matmul_layout(pool, y, w, wt, KERN_LAYOUT_ROWS, x, n_in, n_out, n_tok, scratch);
}

/* The task of one matmul (n_out, n_tok > 0) and, in q, the conversion of its activations
 * into scratch that must run before it (act_run); m reads them from there already. */
static void mm_setup(struct mm_task *m, struct act_task *q, struct kern_pool *pool, float *y,
                     const void *w, enum kern_type wt, enum kern_layout layout, const float *x,
                     int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch) {
    const struct kern_type_traits *tr = kern_type_traits((int)wt);
    const bool rows8 = layout == KERN_LAYOUT_ROWS8;
    assert(tr && impl.tile[wt] && n_in > 0 && n_out >= 0 && n_tok >= 0);
    assert(n_in % tr->blck_size == 0 && (!rows8 || n_out % 8 == 0));
    /* a level without rows8 kernels reads the reference's activation rows */
    assert(!rows8 || impl.tile8[wt] || impl.act_row_size == kern_row_size);

    *m = (struct mm_task){
        .tile = rows_tile(wt, n_tok, NULL),
        .tile8 = impl.tile8[wt],
        /* quantized decode: tile8's 8-row bodies read one stream, faster from memory
         * (tile16q in kernels/cpu/x86-rows16.h) */
        .tile16 = rows8 && (n_tok > 1 || tr->vec_dot_type == KERN_TYPE_F32) ? impl.tile16[wt] : NULL,
        .dec4 = rows8 ? rows8_dec4(wt, tr, n_tok) : NULL,
        .rows8 = rows8,
        .wt = wt,
        .y = y,
        .w = w,
        .w_stride = kern_row_size(wt, n_in),
        .x = (const uint8_t *)x,
        .xf = x,
        .x_stride = (size_t)n_in * sizeof(float),
        .n_in = n_in,
        .n_out = n_out,
        .n_tok = n_tok,
    };
    *q = (struct act_task){.dst = scratch, .x = x, .n_in = n_in, .n_tok = n_tok};
    if (tr->vec_dot_type != KERN_TYPE_F32) {
        q->quant = impl.act_from_f32[tr->vec_dot_type];
        q->dst_stride = impl.act_row_size(tr->vec_dot_type, n_in);
        assert(scratch && q->quant);
    } else if (rows8 && m->tile8 && n_tok > 1 && rows8_f32_block(wt, n_in)) {
        q->block_bytes = rows8_f32_block(wt, n_in);
        q->block_toks = impl.r8f_block_toks[wt] ? impl.r8f_block_toks[wt] : KERN_R8F_BLOCK_TOKS;
        q->pack = impl.r8f_pack[wt];
        assert(scratch);
    }
    if (q->dst_stride || q->block_bytes) {
        m->x = scratch;
        m->x_stride = q->dst_stride;
        m->x_block = q->block_bytes;
    }
    /* Each thread's rows are contiguous runs: the tiles fetch the rows after their own
     * (the next chunk, then the next groups), which in 16-row units taken in turn were
     * the other thread's (2 threads, 512-bit prefill, 1024 x 2816 x 64 tokens: f16 306 ->
     * 343 GFLOP/s, bf16 526 -> 598; the quantized types within noise). Decode streams the
     * weights once: a few big units per thread also keep the shared unit counter (a cache
     * line both threads write) off the critical path. Prefill takes MM_PREFILL_UNITS per
     * thread of each token block, so that a thread slowed by other work is balanced within
     * an eighth of a block's rows. */
    const int64_t per_thread = n_tok <= KERN_TILE_ROWS ? MM_DECODE_UNITS : MM_PREFILL_UNITS;
    int64_t want = n_out / ((int64_t)kern_pool_n_threads(pool) * per_thread);
    want = (want + MM_UNIT_ROWS - 1) / MM_UNIT_ROWS * MM_UNIT_ROWS;
    m->unit_rows = MAX((int64_t)MM_UNIT_ROWS, MIN(want, (int64_t)MM_MAX_UNIT_ROWS));
    m->n_row_units = (n_out + m->unit_rows - 1) / m->unit_rows;
    /* a unit's tokens: a packed block (r8f_block) or MM_UNIT_TOKS */
    m->unit_toks = m->x_block ? q->block_toks : MM_UNIT_TOKS;
    m->n_tok_units = m->x_block ? r8f_n_blocks(n_tok, q->block_toks)
                                : (n_tok + m->unit_toks - 1) / m->unit_toks;
    m->n_units = m->n_row_units * m->n_tok_units;
    atomic_init(&m->next, 0);
}

/* q's conversion, where the matmul has one */
static void act_run(struct kern_pool *pool, struct act_task *q) {
    if (!q->dst_stride && !q->block_bytes) return;
    /* one token is a few hundred ns of work: not worth waking the workers */
    if (q->n_tok * q->n_in >= 16384) kern_pool_run(pool, act_task_run, q);
    else act_task_run(q, 0, 1);
}

void kern_matmul_layout(struct kern_pool *pool, float *y, const void *w, enum kern_type wt,
                        enum kern_layout layout, const float *x, int64_t n_in, int64_t n_out,
                        int64_t n_tok, void *scratch) {
    kern_init();
    if (n_out == 0 || n_tok == 0) return;
    struct mm_task m;
    struct act_task q;
    mm_setup(&m, &q, pool, y, w, wt, layout, x, n_in, n_out, n_tok, scratch);
    act_run(pool, &q);
    kern_pool_run(pool, mm_task_run, &m);
}

/* Several matmuls' units as one: unit u is matmul i's unit u - end[i - 1] */
struct mm_many {
    struct mm_task m[KERN_MM_MANY_MAX];
    int64_t end[KERN_MM_MANY_MAX];
    int n;
    _Atomic int64_t next;
};

static void mm_many_run(void *arg, int ith, int nth) {
    struct mm_many *a = arg;
    (void)ith, (void)nth;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (u >= a->end[a->n - 1]) break;
        int i = 0;
        while (u >= a->end[i]) i++;
        mm_unit(&a->m[i], i ? u - a->end[i - 1] : u);
    }
}

/* Whether two matmuls' activation conversions are one: the same quantization into rows
 * of the same bytes, or the same packing into blocks of the same tokens and bytes */
static bool act_same(const struct act_task *a, const struct act_task *b) {
    return a->quant == b->quant && a->pack == b->pack && a->dst_stride == b->dst_stride &&
           a->block_bytes == b->block_bytes && a->block_toks == b->block_toks;
}

static bool act_none(const struct act_task *q) { return !q->dst_stride && !q->block_bytes; }

void kern_matmul_many(struct kern_pool *pool, const struct kern_mm_out *outs, int n,
                      const float *x, int64_t n_in, int64_t n_tok, void *scratch) {
    kern_init();
    assert(n >= 0 && n <= KERN_MM_MANY_MAX);
    if (n == 0) return;
    /* One pool run for the matrices whose activations are converted as the first
     * converting one's (or read as they are): the conversion runs once, before it. The
     * others one kern_matmul_layout each. */
    struct mm_many a = {.n = 0};
    struct act_task q[KERN_MM_MANY_MAX];
    bool apart[KERN_MM_MANY_MAX] = {false};
    int conv = -1; /* the index in a.m of the matmul whose conversion the run shares */
    for (int i = 0; i < n; i++) {
        if (outs[i].n_out == 0) continue;
        mm_setup(&a.m[a.n], &q[a.n], pool, outs[i].y, outs[i].w, outs[i].wt, outs[i].layout, x,
                 n_in, outs[i].n_out, n_tok, scratch);
        if (!act_none(&q[a.n])) {
            if (conv >= 0 && !act_same(&q[a.n], &q[conv])) {
                apart[i] = true;
                continue;
            }
            if (conv < 0) conv = a.n;
        }
        a.end[a.n] = (a.n ? a.end[a.n - 1] : 0) + a.m[a.n].n_units;
        a.n++;
    }
    if (a.n > 0) {
        if (conv >= 0) act_run(pool, &q[conv]);
        atomic_init(&a.next, 0);
        kern_pool_run(pool, mm_many_run, &a);
    }
    for (int i = 0; i < n; i++)
        if (apart[i])
            kern_matmul_layout(pool, outs[i].y, outs[i].w, outs[i].wt, outs[i].layout, x, n_in,
                               outs[i].n_out, n_tok, scratch);
}
