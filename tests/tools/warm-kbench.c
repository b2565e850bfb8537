/* warm-kbench: matmul microbenchmark next to memory bandwidth measured in the same run.
 *
 *   warm-kbench [--types q4_0,q8_0,...] [--threads 1,2] [--quick] [--cpu-time] [--rows]
 *   warm-kbench --compare avx2,avx512 [--hot] [--types ...] [--threads ...] [--cpu-time]
 *   warm-kbench --attn [--types f16,q8_0,...] [--cpu-time]
 *
 * Decode (n_tok = 1): GB/s of weights read, compared with memcpy bandwidth (read + write,
 * and the read half of it), over enough copies of the weight matrix (>= 256 MiB) that
 * nothing is served from cache. Prefill (n_tok = 64, 512): GFLOP/s.
 * Weights are in the layout the engine runs them in: rows8 (repacked at load) where the
 * level has rows8 kernels for the type and shape, the file's rows otherwise; the "lay"
 * column says which. --rows measures the file's rows throughout.
 * Last, a matmul-only estimate for llama-bench's yardstick model (n_embd 1024, 16 layers,
 * n_ff 2816, vocab 32000): tg = 1 / Σ decode times, pp512 = 512 / Σ prefill times. It
 * ignores attention and element-wise ops, so it is an upper bound for the full model.
 *
 * --compare A,B: levels A and B (kern_level_name) side by side on the same weights, each
 * shape measured in 3 rounds that alternate the levels (best of each), so that both see
 * the same load on a shared machine: decode on the three small shapes, prefill of 64
 * tokens on 1024 × 2816, and the ratio B / A. The path each level takes is named
 * (kern_matmul_path). --hot: one copy of the weights (they stay in L2/L3: the kernels'
 * compute speed, without the memory).
 *
 * --attn: kern_attn_head over a cache of each type (one thread, 4 query heads per KV
 * head, head sizes 64 and 128): decode (1 token) and a 16-token batch after 512 and 4096
 * cached keys, µs per call, GB/s of cache read, and the time as a multiple of f16's. */
#include "base/base.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MIN_BYTES = 256 << 20 };

/* --cpu-time: measure process CPU time divided by the thread count instead of wall time,
 * for machines shared with other work (a descheduled thread then costs nothing; memory
 * and cache contention still do). */
static bool use_cpu_time;
static bool rows_only; /* --rows: the file's layout even where the engine repacks */
static int bench_threads = 1;

static uint64_t clock_usec(void) {
    if (!use_cpu_time) return time_now_usec();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u) / (uint64_t)bench_threads;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

struct copy_task {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
};
static void copy_run(void *arg, int ith, int nth) {
    struct copy_task *c = arg;
    size_t a = c->n * (size_t)ith / (size_t)nth, b = c->n * (size_t)(ith + 1) / (size_t)nth;
    memcpy(c->dst + a, c->src + a, b - a);
}

/* memcpy GB/s (bytes read + bytes written) over 512 MiB with the pool's threads. */
static double memcpy_gbs(struct kern_pool *pool) {
    size_t n = (size_t)512 << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    struct copy_task c = {b, a, n};
    kern_pool_run(pool, copy_run, &c);
    double best = 0;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = clock_usec();
        kern_pool_run(pool, copy_run, &c);
        double s = (double)(clock_usec() - t0) * 1e-6;
        if (2.0 * (double)n / s > best) best = 2.0 * (double)n / s;
    }
    free(a);
    free(b);
    return best * 1e-9;
}

struct mm_setup {
    int wt;
    enum kern_layout layout;
    int64_t n_in, n_out, n_tok;
    size_t w_bytes;
    int n_copies;
    uint8_t *w;
    float *x, *y;
    void *scratch;
};

static void mm_setup_free(struct mm_setup *m) {
    free(m->w);
    free(m->x);
    free(m->y);
    free(m->scratch);
}

static int mm_setup_init(struct mm_setup *m, int wt, int64_t n_in, int64_t n_out, int64_t n_tok,
                         bool rotate) {
    *m = (struct mm_setup){.wt = wt, .n_in = n_in, .n_out = n_out, .n_tok = n_tok};
    m->w_bytes = kern_row_size(wt, n_in) * (size_t)n_out;
    m->n_copies = rotate ? (int)((MIN_BYTES + m->w_bytes - 1) / m->w_bytes) : 1;
    m->w = malloc(m->w_bytes * (size_t)m->n_copies);
    m->x = malloc((size_t)(n_in * n_tok) * sizeof(float));
    m->y = malloc((size_t)(n_out * n_tok) * sizeof(float));
    size_t sb = kern_matmul_scratch_bytes(wt, n_in, n_tok);
    m->scratch = malloc(sb ? sb : 1);
    float *row = malloc((size_t)n_in * sizeof(float));
    if (!m->w || !m->x || !m->y || !m->scratch || !row) {
        free(row);
        mm_setup_free(m);
        return -ENOMEM;
    }
    const struct kern_type_traits *tr = kern_type_traits(wt);
    size_t rs = kern_row_size(wt, n_in);
    /* quantize a few distinct rows and replicate them: quantizing 256 MiB of iq4_nl
     * with the reference would dominate the run */
    uint8_t *proto = malloc(rs * 16);
    if (!proto) {
        free(row);
        mm_setup_free(m);
        return -ENOMEM;
    }
    for (int k = 0; k < 16; k++) {
        uint8_t *dst = proto + rs * (size_t)k;
        for (int64_t i = 0; i < n_in; i++) row[i] = frand();
        if (tr->from_f32) {
            tr->from_f32(dst, row, n_in);
            continue;
        }
        /* k-quants have no quantizer: random blocks with sane fp16 super-block scales
         * (d, dmin at bytes 0 and 2; q6_K's d at byte 208) */
        for (size_t i = 0; i < rs; i++) dst[i] = (uint8_t)(frand() * 127.0f);
        kern_f16 d = kern_fp32_to_fp16(0.01f);
        for (size_t b = 0; b < rs / tr->type_size; b++) {
            uint8_t *blk = dst + b * tr->type_size;
            if (wt == KERN_TYPE_Q6_K) memcpy(blk + 208, &d, 2);
            else {
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &d, 2);
            }
        }
    }
    for (size_t r = 0; r < (size_t)n_out * (size_t)m->n_copies; r++)
        memcpy(m->w + r * rs, proto + rs * (r % 16), rs);
    for (int64_t i = 0; i < n_in * n_tok; i++) m->x[i] = frand();
    free(proto);
    free(row);
    /* repacked as the engine's load does (engine/device.c), one copy at a time */
    m->layout = KERN_LAYOUT_ROWS;
    if (!rows_only && kern_rows8_supported(wt, n_in, n_out)) {
        uint8_t *tmp = malloc(m->w_bytes);
        if (!tmp) {
            mm_setup_free(m);
            return -ENOMEM;
        }
        for (int c = 0; c < m->n_copies; c++) {
            uint8_t *w = m->w + m->w_bytes * (size_t)c;
            memcpy(tmp, w, m->w_bytes);
            if (kern_rows8_pack(wt, w, tmp, n_in, n_out) < 0) {
                free(tmp);
                mm_setup_free(m);
                return -EINVAL;
            }
        }
        free(tmp);
        m->layout = KERN_LAYOUT_ROWS8;
    }
    return 0;
}

static const char *layout_name(enum kern_layout l) { return l == KERN_LAYOUT_ROWS8 ? "rows8" : "rows"; }

/* Seconds per matmul (best of a few batches), rotating over the weight copies. */
static double mm_time(struct mm_setup *m, struct kern_pool *pool, double min_seconds) {
    int c = 0;
    /* warm up: page in every copy */
    for (int i = 0; i < m->n_copies; i++)
        kern_matmul_layout(pool, m->y, m->w + m->w_bytes * (size_t)i, m->wt, m->layout, m->x,
                           m->n_in, m->n_out, m->n_tok, m->scratch);
    double best = 1e30;
    uint64_t start = clock_usec();
    for (int batch = 0; batch < 20; batch++) {
        int iters = m->n_copies > 4 ? m->n_copies : 4;
        uint64_t t0 = clock_usec();
        for (int i = 0; i < iters; i++) {
            kern_matmul_layout(pool, m->y, m->w + m->w_bytes * (size_t)c, m->wt, m->layout, m->x,
                               m->n_in, m->n_out, m->n_tok, m->scratch);
            c = (c + 1) % m->n_copies;
        }
        double s = (double)(clock_usec() - t0) * 1e-6 / iters;
        if (s < best) best = s;
        if ((double)(clock_usec() - start) * 1e-6 > min_seconds && batch >= 2) break;
    }
    return best;
}

static int parse_list(const char *s, int *out, int max, bool types) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        int v = types ? kern_type_from_name(tok) : atoi(tok);
        if (v < 0 || (!types && v < 1)) {
            fprintf(stderr, "warm-kbench: bad value '%s'\n", tok);
            return -EINVAL;
        }
        out[n++] = v;
    }
    return n;
}

/* Seconds per kern_attn_head call of n_tok tokens × n_group heads after n_kv keys of type
 * t (K and V alike), best of a few runs of >= min_sec. */
static double attn_time(enum kern_type t, int64_t hd, int64_t n_kv, int64_t n_tok, int64_t n_group,
                        double min_sec, double *ret_bytes) {
    size_t rs = kern_row_size(t, hd);
    float *x = malloc((size_t)(n_kv * hd) * sizeof *x);
    float *q = malloc((size_t)(n_tok * n_group * hd) * sizeof *q);
    float *out = malloc((size_t)(n_tok * n_group * hd) * sizeof *out);
    float *scratch = malloc((size_t)kern_attn_scratch_floats(n_tok * n_group, hd, hd) * sizeof(float));
    uint8_t *k = malloc(rs * (size_t)n_kv), *v = malloc(rs * (size_t)n_kv);
    int32_t *nkv = malloc((size_t)n_tok * sizeof *nkv);
    double best = -1;
    if (x && q && out && scratch && k && v && nkv) {
        for (int64_t i = 0; i < n_kv * hd; i++) x[i] = frand();
        for (int64_t j = 0; j < n_kv; j++) kern_quantize_row(t, k + (size_t)j * rs, x + j * hd, hd);
        for (int64_t i = 0; i < n_kv * hd; i++) x[i] = frand();
        for (int64_t j = 0; j < n_kv; j++) kern_quantize_row(t, v + (size_t)j * rs, x + j * hd, hd);
        for (int64_t i = 0; i < n_tok * n_group * hd; i++) q[i] = frand();
        for (int64_t i = 0; i < n_tok; i++) nkv[i] = (int32_t)(n_kv - n_tok + 1 + i);
        for (int rep = 0; rep < 3; rep++) {
            int calls = 0;
            uint64_t t0 = clock_usec(), t1;
            do {
                kern_attn_head(out, n_group * hd, q, n_group * hd, n_tok, n_group, nkv, k, t, rs, v,
                               t, rs, hd, hd, 0.125f, scratch);
                calls++;
            } while ((t1 = clock_usec()) - t0 < (uint64_t)(min_sec * 1e6));
            double sec = (double)(t1 - t0) / 1e6 / calls;
            if (best < 0 || sec < best) best = sec;
        }
    }
    *ret_bytes = 2.0 * (double)rs * (double)n_kv;
    free(x), free(q), free(out), free(scratch), free(k), free(v), free(nkv);
    return best;
}

static void attn_bench(const int *types, int n_types) {
    printf("attention, 1 thread, 4 query heads per KV head; us per call, GB/s of K+V read, "
           "time / f16's\n%-7s %4s %5s %4s %10s %8s %7s\n", "cache", "hd", "n_kv", "tok", "us",
           "GB/s", "x f16");
    static const int64_t hds[] = {64, 128}, n_kvs[] = {512, 4096}, toks[] = {1, 16};
    for (size_t h = 0; h < ARRAY_SIZE(hds); h++)
        for (size_t c = 0; c < ARRAY_SIZE(n_kvs); c++)
            for (size_t b = 0; b < ARRAY_SIZE(toks); b++) {
                double bytes, f16 = attn_time(KERN_TYPE_F16, hds[h], n_kvs[c], toks[b], 4, 0.1, &bytes);
                for (int i = 0; i < n_types; i++) {
                    const struct kern_type_traits *tr = kern_type_traits(types[i]);
                    if (!tr || !tr->from_f32 || hds[h] % tr->blck_size) continue;
                    double sec = attn_time((enum kern_type)types[i], hds[h], n_kvs[c], toks[b], 4, 0.1, &bytes);
                    printf("%-7s %4lld %5lld %4lld %10.1f %8.2f %7.2f\n", tr->name, (long long)hds[h],
                           (long long)n_kvs[c], (long long)toks[b], sec * 1e6, bytes / sec * 1e-9, sec / f16);
                }
            }
}

/* --compare: levels a and b alternated on each shape (see the top). */
static int compare_levels(const char *a, const char *b, const int *types, int n_types,
                          const int *threads, int n_threads, bool hot) {
    static const int64_t shapes[][3] = {
        {1024, 1024, 1},
        {1024, 2816, 1},
        {2816, 1024, 1},
        {1024, 2816, 64},
    };
    const char *lv[2] = {a, b};
    for (int l = 0; l < 2; l++)
        if (kern_set_level(lv[l]) < 0) {
            fprintf(stderr, "warm-kbench: --compare: level %s: not on this CPU\n", lv[l]);
            return 2;
        }
    for (int ti = 0; ti < n_threads; ti++) {
        struct kern_pool *pool = NULL;
        bench_threads = threads[ti];
        if (kern_pool_new(threads[ti], &pool) < 0) return 1;
        printf("\n== %d thread(s), %s weights; GB/s of weights (decode) or GFLOP/s (pp)\n",
               threads[ti], hot ? "hot (one copy)" : "streamed (>= 256 MiB of copies)");
        printf("%-7s %-6s %6s %6s %-12s %9s %-12s %9s %7s\n", "type", "mode", "n_in", "n_out", a,
               "", b, "", "b/a");
        for (int k = 0; k < n_types; k++) {
            const int wt = types[k];
            if (!kern_type_traits(wt) || !kern_type_traits(wt)->vec_dot) continue;
            for (size_t s = 0; s < ARRAY_SIZE(shapes); s++) {
                const int64_t n_in = shapes[s][0], n_out = shapes[s][1], n_tok = shapes[s][2];
                if (n_in % kern_type_traits(wt)->blck_size) continue;
                double best[2] = {1e30, 1e30};
                char path[2][32] = {"?", "?"};
                for (int round = 0; round < 3; round++)
                    for (int l = 0; l < 2; l++) {
                        kern_set_level(lv[l]);
                        struct mm_setup m;
                        if (mm_setup_init(&m, wt, n_in, n_out, n_tok, !hot && n_tok == 1) < 0)
                            return 1;
                        const char *lvl, *p = kern_matmul_path(wt, m.layout, n_tok, &lvl);
                        snprintf(path[l], sizeof path[l], "%s/%s", lvl, p);
                        double sec = mm_time(&m, pool, 0.2);
                        best[l] = MIN(best[l], sec);
                        mm_setup_free(&m);
                    }
                double v[2];
                for (int l = 0; l < 2; l++)
                    v[l] = n_tok == 1
                               ? (double)(kern_row_size(wt, n_in) * (size_t)n_out) / best[l] * 1e-9
                               : 2.0 * (double)(n_in * n_out * n_tok) / best[l] * 1e-9;
                printf("%-7s %-6s %6lld %6lld %-12s %9.1f %-12s %9.1f %6.2fx\n", kern_type_name(wt),
                       n_tok == 1 ? "decode" : "pp64", (long long)n_in, (long long)n_out, path[0],
                       v[0], path[1], v[1], v[1] / v[0]);
                fflush(stdout);
            }
        }
        kern_pool_free(pool);
    }
    return 0;
}

int main(int argc, char **argv) {
    int types[16] = {KERN_TYPE_F16, KERN_TYPE_BF16, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0,
                     KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
                     KERN_TYPE_MXFP4, KERN_TYPE_F32};
    int n_types = 10, threads[8] = {1, 2}, n_threads = 2;
    bool quick = false, attn = false, hot = false;
    const char *compare = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
            n_types = parse_list(argv[++i], types, 16, true);
            if (n_types < 0) return 2;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads = parse_list(argv[++i], threads, 8, false);
            if (n_threads < 0) return 2;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--cpu-time") == 0) {
            use_cpu_time = true;
        } else if (strcmp(argv[i], "--attn") == 0) {
            attn = true;
        } else if (strcmp(argv[i], "--rows") == 0) {
            rows_only = true;
        } else if (strcmp(argv[i], "--hot") == 0) {
            hot = true;
        } else if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc) {
            compare = argv[++i];
        } else {
            fprintf(stderr, "usage: warm-kbench [--types q4_0,q8_0,...] [--threads 1,2] [--quick] "
                            "[--cpu-time] [--rows] [--attn] [--compare A,B [--hot]]\n");
            return 2;
        }
    }
    kern_init();
    printf("kernels level: %s\n", kern_cpu()->level);
    if (attn) {
        attn_bench(types, n_types);
        return 0;
    }
    if (compare) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", compare);
        char *comma = strchr(buf, ',');
        if (!comma) {
            fprintf(stderr, "warm-kbench: --compare A,B\n");
            return 2;
        }
        *comma = 0;
        return compare_levels(buf, comma + 1, types, n_types, threads, n_threads, hot);
    }

    static const int64_t decode_shapes[][2] = {
        {1024, 1024}, {1024, 2816}, {2816, 1024}, {4096, 4096}, {4096, 11008}, {11008, 4096},
    };
    static const int64_t prefill_shapes[][2] = {{1024, 2816}, {4096, 11008}};
    static const int64_t prefill_toks[] = {64, 512};
    /* the yardstick model's per-token matmuls: q, k, v, o, gate, up, down × 16 + output */
    static const struct {
        int64_t n_in, n_out, count;
    } model[] = {{1024, 1024, 4 * 16}, {1024, 2816, 2 * 16}, {2816, 1024, 16}, {1024, 32000, 1}};

    for (int ti = 0; ti < n_threads; ti++) {
        struct kern_pool *pool = NULL;
        bench_threads = threads[ti];
        int r = kern_pool_new(threads[ti], &pool);
        if (r < 0) {
            fprintf(stderr, "warm-kbench: pool: %s\n", err_str(r));
            return 1;
        }
        double bw = memcpy_gbs(pool);
        printf("\n== %d thread(s): memcpy %.1f GB/s (read+write), read half %.1f GB/s\n",
               threads[ti], bw, bw / 2);
        printf("%-7s %-6s %-5s %6s %6s %5s %9s %9s %7s\n", "type", "mode", "lay", "n_in", "n_out",
               "n_tok", "GFLOP/s", "GB/s(w)", "w/copy");
        for (int k = 0; k < n_types; k++) {
            int wt = types[k];
            if (!kern_type_traits(wt) || !kern_type_traits(wt)->vec_dot) continue;
            for (size_t s = 0; s < ARRAY_SIZE(decode_shapes); s++) {
                if (quick && s >= 3) break;
                struct mm_setup m;
                if (mm_setup_init(&m, wt, decode_shapes[s][0], decode_shapes[s][1], 1, true) < 0)
                    return 1;
                double sec = mm_time(&m, pool, quick ? 0.1 : 0.3);
                double gbs = (double)m.w_bytes / sec * 1e-9;
                printf("%-7s %-6s %-5s %6lld %6lld %5d %9.1f %9.1f %6.0f%%\n", kern_type_name(wt),
                       "decode", layout_name(m.layout), (long long)m.n_in, (long long)m.n_out, 1,
                       2.0 * (double)(m.n_in * m.n_out) / sec * 1e-9, gbs, 100.0 * gbs / bw);
                mm_setup_free(&m);
            }
            for (size_t s = 0; s < ARRAY_SIZE(prefill_shapes); s++) {
                for (size_t p = 0; p < ARRAY_SIZE(prefill_toks); p++) {
                    if (quick && (s > 0 || p > 0)) break;
                    struct mm_setup m;
                    if (mm_setup_init(&m, wt, prefill_shapes[s][0], prefill_shapes[s][1],
                                      prefill_toks[p], false) < 0)
                        return 1;
                    double sec = mm_time(&m, pool, quick ? 0.2 : 0.5);
                    printf("%-7s %-6s %-5s %6lld %6lld %5lld %9.1f %9.1f\n", kern_type_name(wt),
                           "pp", layout_name(m.layout), (long long)m.n_in, (long long)m.n_out, (long long)m.n_tok,
                           2.0 * (double)(m.n_in * m.n_out * m.n_tok) / sec * 1e-9,
                           (double)m.w_bytes / sec * 1e-9);
                    mm_setup_free(&m);
                }
            }
            /* yardstick model estimate (output layer kept f16-free: same type as the rest) */
            double tg = 0, pp = 0, bytes = 0, out1 = 0;
            for (size_t l = 0; l < ARRAY_SIZE(model); l++) {
                struct mm_setup m;
                if (mm_setup_init(&m, wt, model[l].n_in, model[l].n_out, 1, true) < 0) return 1;
                double t1 = mm_time(&m, pool, 0.1);
                tg += t1 * (double)model[l].count;
                if (model[l].n_out == 32000) out1 = t1;
                bytes += (double)m.w_bytes * (double)model[l].count;
                mm_setup_free(&m);
                /* llama-bench's pp computes logits for the last token only */
                if (quick || model[l].n_out == 32000) continue;
                if (mm_setup_init(&m, wt, model[l].n_in, model[l].n_out, 512, false) < 0) return 1;
                pp += mm_time(&m, pool, 0.1) * (double)model[l].count;
                mm_setup_free(&m);
            }
            printf("%-7s model  matmul-only: tg %.0f tok/s (%.0f MB/token, %.1f GB/s = %.0f%% of memcpy)",
                   kern_type_name(wt), 1.0 / tg, bytes * 1e-6, bytes / tg * 1e-9,
                   100.0 * bytes / tg * 1e-9 / bw);
            if (!quick) printf(", pp512 %.0f tok/s", 512.0 / (pp + out1));
            printf("\n");
        }
        kern_pool_free(pool);
    }
    return 0;
}
