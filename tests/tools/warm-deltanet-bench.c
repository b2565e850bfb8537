/* warm-deltanet-bench: the Gated DeltaNet kernels (kernels/deltanet.h) on one layer of a
 * Qwen3.5-0.8B shape (notes hybrid.md §A.10: H_k = H_v = 16 heads of 128, K = 4; the head
 * counts are marked unverified there) at each dispatch level.
 *
 *   warm-deltanet-bench [--shape 0.8b|35b] [--threads N] [--levels ref,avx2,avx512]
 *                       [--tokens 512] [--quick]
 *
 * Per level, µs per token for the whole layer (all heads):
 *   decode hot:   kern_dn_recurrent on one token, one state (it stays in cache);
 *   decode cold:  the same over copies of the state that together exceed the caches
 *                 (>= 256 MiB), as a model's layers and sequences see it, with the state
 *                 bytes touched per token (read + written) as GB/s next to memcpy's;
 *   prefill:      kern_dn_recurrent and kern_dn_chunked on --tokens tokens in one call;
 *   conv, norm:   kern_dn_conv over the conv_dim channels (one token; --tokens tokens) and
 *                 kern_dn_gated_norm over the heads (--tokens tokens).
 * Then, at the best level, recurrent vs chunked for a few token counts: where the chunked
 * form starts to pay (KERN_DN_CHUNKED_MIN_TOK). Each figure is the best of several runs
 * (the machine may be shared). --threads splits the heads (channels for the conv) over a
 * kern_pool, as the engine will. */
#include "base/base.h"
#include "kernels/deltanet.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

/* One layer's inputs for n_tok tokens and its state copies. */
struct bench {
    struct kern_dn_shape p;
    int64_t n_tok, conv_dim, row, n_copies;
    float *qkv, *qkv_in, *z, *g, *beta, *o, *conv_w, *conv_state, *norm_w;
    float *states;   /* n_copies · state_n */
    int64_t state_n; /* floats of one S */
    char **scratch;  /* one per thread */
    struct kern_pool *pool;
    int n_threads;
};

/* ---- the work each thread does: its share of the heads (channels) ---------------------- */

enum op { OP_RECURRENT, OP_CHUNKED, OP_CONV, OP_NORM };
struct task {
    struct bench *b;
    enum op op;
    int64_t n_tok;
    float *state;
};

static void task_run(void *arg, int ith, int nth) {
    struct task *t = arg;
    struct bench *b = t->b;
    const int64_t hv = b->p.n_head_v, dv = b->p.head_dim_v, kd = b->p.n_head_k * b->p.head_dim_k;
    const int64_t h0 = hv * ith / nth, h1 = hv * (ith + 1) / nth;
    const struct kern_dn_seq s = {.n_tok = t->n_tok,
                                  .q = b->qkv,
                                  .q_stride = b->row,
                                  .k = b->qkv + kd,
                                  .k_stride = b->row,
                                  .v = b->qkv + 2 * kd,
                                  .v_stride = b->row,
                                  .g = b->g,
                                  .beta = b->beta,
                                  .o = b->o,
                                  .o_stride = hv * dv};
    switch (t->op) {
    case OP_RECURRENT:
        kern_dn_recurrent(t->state, &s, &b->p, h0, h1);
        break;
    case OP_CHUNKED:
        kern_dn_chunked(t->state, &s, &b->p, h0, h1, b->scratch[ith]);
        break;
    case OP_CONV: {
        /* channels in multiples of 16, so threads share no cache line of the rows */
        const int64_t n16 = b->conv_dim / 16;
        const int64_t c0 = n16 * ith / nth * 16,
                      c1 = ith + 1 == nth ? b->conv_dim : n16 * (ith + 1) / nth * 16;
        kern_dn_conv(b->qkv, b->conv_state, b->qkv_in, b->conv_w, t->n_tok, b->conv_dim, 4, c0, c1);
        break;
    }
    case OP_NORM:
        kern_dn_gated_norm(b->o, b->o, b->z, b->norm_w, t->n_tok, hv, dv, h0, h1, 1e-6f);
        break;
    }
}

static void run(struct bench *b, enum op op, int64_t n_tok, float *state) {
    struct task t = {.b = b, .op = op, .n_tok = n_tok, .state = state};
    if (b->pool)
        kern_pool_run(b->pool, task_run, &t);
    else
        task_run(&t, 0, 1);
}

/* Best µs of reps runs of op on n_tok tokens (hot: one state). */
static double time_op(struct bench *b, enum op op, int64_t n_tok, int reps) {
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        const uint64_t t0 = time_now_usec();
        run(b, op, n_tok, b->states);
        const uint64_t dt = time_now_usec() - t0;
        best = dt < best ? dt : best;
    }
    return (double)best;
}

/* Best µs per call of one-token decode cycling over all state copies (cold). */
static double time_decode_cold(struct bench *b, int rounds) {
    double best = INFINITY;
    for (int r = 0; r < rounds; r++) {
        const uint64_t t0 = time_now_usec();
        for (int64_t c = 0; c < b->n_copies; c++)
            run(b, OP_RECURRENT, 1, b->states + c * b->state_n);
        const double dt = (double)(time_now_usec() - t0) / (double)b->n_copies;
        best = dt < best ? dt : best;
    }
    return best;
}

/* memcpy GB/s (bytes read + written) over 256 MiB, best of 3. */
static double memcpy_gbs(void) {
    const size_t n = (size_t)256 << 20;
    char *a = malloc(n), *c = malloc(n);
    double best = 0;
    if (a && c) {
        memset(a, 1, n);
        memset(c, 2, n);
        for (int r = 0; r < 3; r++) {
            const uint64_t t0 = time_now_usec();
            memcpy(c, a, n);
            const double gbs = 2.0 * (double)n / (double)(time_now_usec() - t0 + 1) / 1e3;
            best = gbs > best ? gbs : best;
        }
    }
    free(a);
    free(c);
    return best;
}

static void bench_free(struct bench *b) {
    free(b->qkv), free(b->qkv_in), free(b->z), free(b->g), free(b->beta), free(b->o);
    free(b->conv_w), free(b->conv_state), free(b->norm_w), free(b->states);
    if (b->scratch)
        for (int i = 0; i < b->n_threads; i++) free(b->scratch[i]);
    free(b->scratch);
    kern_pool_free(b->pool);
}

static int bench_init(struct bench *b, int64_t hk, int64_t hv, int64_t n_tok, int n_threads,
                      bool quick) {
    const int64_t d = 128;
    *b = (struct bench){
        .p = {.n_head_k = hk,
              .n_head_v = hv,
              .head_dim_k = d,
              .head_dim_v = d,
              .head_map = KERN_DN_HEAD_MAP_TILED,
              .scale = 1.0f / sqrtf((float)d),
              .l2_eps = 1e-6f},
        .n_tok = n_tok,
        .conv_dim = 2 * hk * d + hv * d,
        .n_threads = n_threads,
    };
    b->row = b->conv_dim;
    b->state_n = hv * d * d;
    /* >= 256 MiB of states (32 MiB with --quick), well past any L3 */
    const int64_t state_bytes = b->state_n * (int64_t)sizeof(float);
    b->n_copies = (((int64_t)(quick ? 32 : 256) << 20) + state_bytes - 1) / state_bytes;
    b->qkv = malloc_array((size_t)(n_tok * b->row), sizeof(float));
    b->qkv_in = malloc_array((size_t)(n_tok * b->row), sizeof(float));
    b->z = malloc_array((size_t)(n_tok * hv * d), sizeof(float));
    b->o = malloc_array((size_t)(n_tok * hv * d), sizeof(float));
    b->g = malloc_array((size_t)(n_tok * hv), sizeof(float));
    b->beta = malloc_array((size_t)(n_tok * hv), sizeof(float));
    b->conv_w = malloc_array((size_t)(b->conv_dim * 4), sizeof(float));
    b->conv_state = calloc_array((size_t)(b->conv_dim * 3), sizeof(float));
    b->norm_w = malloc_array((size_t)d, sizeof(float));
    b->states = malloc_array_aligned((size_t)(b->n_copies * b->state_n), sizeof(float));
    b->scratch = calloc_array((size_t)n_threads, sizeof(char *));
    if (!b->qkv || !b->qkv_in || !b->z || !b->o || !b->g || !b->beta || !b->conv_w ||
        !b->conv_state || !b->norm_w || !b->states || !b->scratch)
        return -ENOMEM;
    for (int i = 0; i < n_threads; i++)
        if (!(b->scratch[i] = malloc_array_aligned(kern_dn_scratch_bytes(&b->p), 1)))
            return -ENOMEM;
    if (n_threads > 1) {
        int r = kern_pool_new(n_threads, &b->pool);
        if (r < 0) return r;
    }
    for (int64_t i = 0; i < n_tok * b->row; i++) b->qkv[i] = b->qkv_in[i] = frand();
    for (int64_t i = 0; i < n_tok * hv * d; i++) b->z[i] = frand() * 3.0f, b->o[i] = frand();
    for (int64_t i = 0; i < n_tok * hv; i++) {
        b->g[i] = frand() * 3.0f;
        b->beta[i] = frand() * 3.0f;
    }
    float dt[64], a[64];
    for (int64_t h = 0; h < hv; h++) dt[h] = frand(), a[h] = -expf(frand());
    kern_dn_gates(b->g, b->beta, b->g, b->beta, dt, a, n_tok, hv);
    for (int64_t i = 0; i < b->conv_dim * 4; i++) b->conv_w[i] = frand() * 0.5f;
    for (int64_t i = 0; i < d; i++) b->norm_w[i] = 1.0f + 0.1f * frand();
    for (int64_t i = 0; i < b->n_copies * b->state_n; i++) b->states[i] = frand() * 0.1f;
    return 0;
}

static bool level_wanted(const char *levels, const char *name) {
    if (!levels) return true;
    const size_t n = strlen(name);
    for (const char *p = levels; (p = strstr(p, name)); p += n)
        if ((p == levels || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

int main(int argc, char **argv) {
    int64_t hk = 16, hv = 16, n_tok = 512;
    int n_threads = 1;
    bool quick = false;
    const char *levels = NULL, *shape = "0.8b";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            shape = argv[++i];
            if (strcmp(shape, "35b") == 0)
                hk = 16, hv = 32;
            else if (strcmp(shape, "0.8b") != 0) {
                fprintf(stderr, "unknown shape '%s' (0.8b, 35b)\n", shape);
                return 2;
            }
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--levels") == 0 && i + 1 < argc) {
            levels = argv[++i];
        } else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            n_tok = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else {
            fprintf(stderr,
                    "usage: %s [--shape 0.8b|35b] [--threads N] [--levels a,b] "
                    "[--tokens N] [--quick]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_threads < 1 || n_threads > 256 || n_tok < 64) {
        fprintf(stderr, "--threads 1..256, --tokens >= 64\n");
        return 2;
    }
    struct bench b;
    int r = bench_init(&b, hk, hv, n_tok, n_threads, quick);
    if (r < 0) {
        fprintf(stderr, "setup failed: %s\n", err_str(r));
        bench_free(&b);
        return 1;
    }
    const double s_bytes = (double)b.state_n * sizeof(float);
    const double mc = memcpy_gbs();
    printf("Gated DeltaNet layer, Qwen3.5-%s shape: H_k %lld, H_v %lld, d_k = d_v = 128, "
           "conv %lld channels, K 4; %d thread%s\n",
           shape, (long long)hk, (long long)hv, (long long)b.conv_dim, n_threads,
           n_threads > 1 ? "s" : "");
    printf("state per layer and sequence: S %.0f KiB, conv %lld KiB; decode reads and writes "
           "S once per token: %.2f MiB\n",
           s_bytes / 1024, (long long)(b.conv_dim * 3 * 4 / 1024), 2 * s_bytes / 1048576);
    printf("memcpy: %.1f GB/s (read + write, 256 MiB); cold decode cycles %lld state copies "
           "(%.0f MiB)\n\n",
           mc, (long long)b.n_copies, (double)b.n_copies * s_bytes / 1048576);
    printf("%-10s %-6s | %9s %9s %6s | %10s %10s %6s | %8s %8s %8s\n", "level", "bodies", "dec hot",
           "dec cold", "GB/s", "pre rec", "pre chunk", "ratio", "conv 1", "conv N", "norm N");
    printf("%-10s %-6s | %9s %9s %6s | %10s %10s %6s | %8s %8s %8s\n", "", "", "µs/tok", "µs/tok",
           "", "µs/tok", "µs/tok", "", "µs/tok", "µs/tok", "µs/tok");
    const char *saved = kern_cpu()->level, *best_level = "ref";
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (!level_wanted(levels, level) || kern_set_level(level) < 0) continue;
        best_level = level;
        const bool slow = strcmp(kern_dn_level(), "ref") == 0;
        const int reps = quick || slow ? 2 : 5;
        const double hot = time_op(&b, OP_RECURRENT, 1, slow ? 20 : 200);
        const double cold = time_decode_cold(&b, slow ? 1 : quick ? 2 : 3);
        const double rec = time_op(&b, OP_RECURRENT, n_tok, reps) / (double)n_tok;
        const double chk = time_op(&b, OP_CHUNKED, n_tok, reps) / (double)n_tok;
        const double conv1 = time_op(&b, OP_CONV, 1, 200);
        const double convn = time_op(&b, OP_CONV, n_tok, reps) / (double)n_tok;
        const double norm = time_op(&b, OP_NORM, n_tok, reps) / (double)n_tok;
        printf("%-10s %-6s | %9.1f %9.1f %6.1f | %10.1f %10.1f %6.2f | %8.2f %8.2f %8.2f\n", level,
               kern_dn_level(), hot, cold, 2 * s_bytes / cold / 1e3, rec, chk, rec / chk, conv1,
               convn, norm);
        fflush(stdout);
    }
    kern_set_level(best_level);
    printf("\nrecurrent vs chunked at level %s, µs per token:\n%8s %10s %10s\n", best_level,
           "tokens", "recurrent", "chunked");
    static const int64_t counts[] = {2, 4, 8, 16, 32, 64, 128};
    for (size_t i = 0; i < ARRAY_SIZE(counts); i++) {
        const int reps = quick ? 3 : 20;
        const double rec = time_op(&b, OP_RECURRENT, counts[i], reps) / (double)counts[i];
        const double chk = time_op(&b, OP_CHUNKED, counts[i], reps) / (double)counts[i];
        printf("%8lld %10.1f %10.1f\n", (long long)counts[i], rec, chk);
    }
    printf("(kern_dn_delta switches to the chunked form at %d tokens)\n", KERN_DN_CHUNKED_MIN_TOK);
    kern_set_level(saved);
    bench_free(&b);
    return 0;
}
