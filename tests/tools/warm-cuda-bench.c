/* warm-cuda-bench — speed of the CUDA tier's matrix products on the weights of a
 * ~1B-parameter llama (n_embd 2048, 16 layers, 32 heads, 8 KV heads, head 64, n_ff 8192,
 * vocab 32000), against the device's own copy bandwidth.
 *
 *   warm-cuda-bench [--types f16,q8_0,q4_0] [--tokens N] [--prefill N] [--device N] [--json FILE]
 *   warm-cuda-bench --model FILE.gguf [--tokens N] [--prefill N] [--device N] [--json FILE]
 *
 * --model: the engine itself on the GPU (an engine context with device = cuda:N, f16 KV,
 * the daemon's code path: the recipe of engine/forward.c on engine/exec-cuda.c's ops, the
 * CUDA graph of a decode step, the argmax on the device): one prefill of --prefill
 * tokens (<= 512), then --tokens greedy decode steps, each fetching only its greedy token;
 * tokens/s and decode weight bytes/s as a percentage of the copy bandwidth. Without the
 * engine (a kernels-only build, -DWARM_CUDA_BENCH_NO_ENGINE) --model is not available.
 *
 * Per weight type: all 16 layers' matrices and the classifier are resident on the device
 * (random rows of the type: the contents do not change the speed). "decode" runs the
 * seven matrix-vector products of every layer, the norms and SwiGLU, and the classifier
 * for one token, N times, timed with device events: tokens/s, the weight bytes read per
 * second, and that as a percentage of the measured device copy bandwidth (the memory
 * bound of decode). "prefill" runs the same with a batch of N tokens through the GEMM
 * path. Attention and the KV cache are not included (weights only), which the output
 * says. Exit 0 after printing; 77 when there is no CUDA device. */
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#ifndef WARM_CUDA_BENCH_NO_ENGINE
#include "engine/engine.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 2048, N_LAYER = 16, N_HEAD = 32, N_HEAD_KV = 8, HEAD_DIM = 64, N_FF = 8192, N_VOCAB = 32000 };

struct mat {
    const char *name;
    int64_t n_in, n_out;
};
/* one layer: q, k, v, o, gate, up, down */
static const struct mat layer_mats[] = {
    {"wq", N_EMBD, N_HEAD * HEAD_DIM},    {"wk", N_EMBD, N_HEAD_KV * HEAD_DIM},
    {"wv", N_EMBD, N_HEAD_KV * HEAD_DIM}, {"wo", N_HEAD * HEAD_DIM, N_EMBD},
    {"gate", N_EMBD, N_FF},               {"up", N_EMBD, N_FF},
    {"down", N_FF, N_EMBD},
};
static const struct mat output_mat = {"output", N_EMBD, N_VOCAB};

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

struct model {
    struct kern_cuda_buf *w[N_LAYER][7], *out;
    size_t weight_bytes;
};

/* A buffer of n_out rows of type t: one random chunk of rows quantized on the host and
 * uploaded repeatedly (every matrix gets its own memory, so reads come from HBM). */
static int mat_new(struct kern_cuda_ctx *ctx, enum kern_type t, const struct mat *m, const uint8_t *chunk,
                   int64_t chunk_rows, struct kern_cuda_buf **ret) {
    size_t rs = kern_row_size(t, m->n_in), bytes = rs * (size_t)m->n_out;
    int r = kern_cuda_buf_new(ctx, bytes, ret);
    for (int64_t o = 0; r == 0 && o < m->n_out; o += chunk_rows) {
        int64_t n = m->n_out - o < chunk_rows ? m->n_out - o : chunk_rows;
        r = kern_cuda_buf_upload(*ret, (size_t)o * rs, chunk, (size_t)n * rs);
    }
    return r;
}

static void model_free(struct model *m) {
    for (int il = 0; il < N_LAYER; il++)
        for (int k = 0; k < 7; k++) kern_cuda_buf_free(m->w[il][k]);
    kern_cuda_buf_free(m->out);
    memset(m, 0, sizeof *m);
}

/* Random rows of n_in = N_FF values (enough for every matrix's row) of type t. */
static uint8_t *chunk_new(enum kern_type t, int64_t rows) {
    const struct kern_type_traits *tr = kern_type_traits(t);
    size_t rs = kern_row_size(t, N_FF);
    uint8_t *c = malloc(rs * (size_t)rows);
    float *x = malloc(sizeof(float) * N_FF);
    if (!c || !x) goto fail;
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < N_FF; i++) x[i] = rnd() * 0.05f;
        if (tr->from_f32) {
            tr->from_f32(c + (size_t)r * rs, x, N_FF);
        } else { /* k-quants: random bytes, sane fp16 scales */
            for (size_t i = 0; i < rs; i++) c[(size_t)r * rs + i] = (uint8_t)(rnd() * 127 + 128);
            for (int64_t b = 0; b < N_FF / QK_K; b++) {
                kern_f16 d = kern_fp32_to_fp16(0.001f);
                memcpy(c + (size_t)r * rs + (size_t)b * tr->type_size + (t == KERN_TYPE_Q6_K ? 208 : 0), &d, 2);
            }
        }
    }
    free(x);
    return c;
fail:
    free(c);
    free(x);
    return NULL;
}

/* The weights only: per layer norm -> q,k,v -> o -> norm -> gate, up -> silu -> down,
 * then the classifier; n_tok tokens (decode: 1). */
struct acts {
    float *x, *xb, *q, *k, *v, *hb, *hb2, *logits, *norm_w;
    void *scratch;
};

static int step(struct kern_cuda_ctx *ctx, const struct model *m, enum kern_type t, const struct acts *a,
                int64_t n_tok) {
    int r = 0;
    for (int il = 0; il < N_LAYER && r == 0; il++) {
#define W(k) kern_cuda_buf_ptr(m->w[il][k])
        if (r == 0) r = kern_cuda_rmsnorm(ctx, a->xb, a->x, a->norm_w, N_EMBD, n_tok, 1e-5f);
        if (r == 0) r = kern_cuda_matmul(ctx, a->q, W(0), t, a->xb, N_EMBD, N_HEAD * HEAD_DIM, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_matmul(ctx, a->k, W(1), t, a->xb, N_EMBD, N_HEAD_KV * HEAD_DIM, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_matmul(ctx, a->v, W(2), t, a->xb, N_EMBD, N_HEAD_KV * HEAD_DIM, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_matmul(ctx, a->xb, W(3), t, a->q, N_HEAD * HEAD_DIM, N_EMBD, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_add(ctx, a->x, a->xb, N_EMBD, n_tok, n_tok);
        if (r == 0) r = kern_cuda_rmsnorm(ctx, a->xb, a->x, a->norm_w, N_EMBD, n_tok, 1e-5f);
        if (r == 0) r = kern_cuda_matmul(ctx, a->hb, W(4), t, a->xb, N_EMBD, N_FF, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_matmul(ctx, a->hb2, W(5), t, a->xb, N_EMBD, N_FF, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_silu_mul(ctx, a->hb, a->hb, a->hb2, N_FF * n_tok);
        if (r == 0) r = kern_cuda_matmul(ctx, a->xb, W(6), t, a->hb, N_FF, N_EMBD, n_tok, a->scratch);
        if (r == 0) r = kern_cuda_add(ctx, a->x, a->xb, N_EMBD, n_tok, n_tok);
#undef W
    }
    if (r == 0) r = kern_cuda_rmsnorm(ctx, a->xb, a->x, a->norm_w, N_EMBD, n_tok, 1e-5f);
    if (r == 0)
        r = kern_cuda_matmul(ctx, a->logits, kern_cuda_buf_ptr(m->out), t, a->xb, N_EMBD, N_VOCAB, n_tok, a->scratch);
    return r;
}

struct result {
    enum kern_type t;
    double weight_gb, decode_tps, decode_gbs, decode_pct, prefill_tps, matvec_gbs;
};

static int bench_type(struct kern_cuda_ctx *ctx, enum kern_type t, int n_decode, int n_prefill, double copy_bw,
                      struct result *res) {
    struct model m = {0};
    struct kern_cuda_buf *act[10] = {0};
    const int64_t chunk_rows = 256;
    uint8_t *chunk = chunk_new(t, chunk_rows);
    int r = chunk ? 0 : -ENOMEM;
    /* each matrix's rows are rows of the N_FF-wide chunk re-cut to its n_in */
    for (int il = 0; il < N_LAYER && r == 0; il++)
        for (int k = 0; k < 7 && r == 0; k++) {
            r = mat_new(ctx, t, &layer_mats[k], chunk, chunk_rows * N_FF / layer_mats[k].n_in, &m.w[il][k]);
            if (r == 0) m.weight_bytes += kern_row_size(t, layer_mats[k].n_in) * (size_t)layer_mats[k].n_out;
        }
    if (r == 0) r = mat_new(ctx, t, &output_mat, chunk, chunk_rows * N_FF / N_EMBD, &m.out);
    if (r == 0) m.weight_bytes += kern_row_size(t, N_EMBD) * (size_t)N_VOCAB;
    free(chunk);

    const int64_t nt = n_prefill > 1 ? n_prefill : 1;
    const size_t sizes[10] = {
        sizeof(float) * nt * N_EMBD, sizeof(float) * nt * N_EMBD, sizeof(float) * nt * N_HEAD * HEAD_DIM,
        sizeof(float) * nt * N_HEAD_KV * HEAD_DIM, sizeof(float) * nt * N_HEAD_KV * HEAD_DIM,
        sizeof(float) * nt * N_FF, sizeof(float) * nt * N_FF, sizeof(float) * nt * N_VOCAB, sizeof(float) * N_EMBD,
        kern_cuda_matmul_scratch_bytes(N_FF, N_VOCAB, nt) + 16,
    };
    for (int i = 0; i < 10 && r == 0; i++) r = kern_cuda_buf_new(ctx, sizes[i], &act[i]);
    struct acts a = {0};
    if (r == 0) {
        a = (struct acts){kern_cuda_buf_ptr(act[0]), kern_cuda_buf_ptr(act[1]), kern_cuda_buf_ptr(act[2]),
                          kern_cuda_buf_ptr(act[3]), kern_cuda_buf_ptr(act[4]), kern_cuda_buf_ptr(act[5]),
                          kern_cuda_buf_ptr(act[6]), kern_cuda_buf_ptr(act[7]), kern_cuda_buf_ptr(act[8]),
                          kern_cuda_buf_ptr(act[9])};
        /* x and the norm weight: small values so nothing overflows */
        float *h = malloc(sizes[0]);
        if (!h) r = -ENOMEM;
        for (int64_t i = 0; r == 0 && i < nt * N_EMBD; i++) h[i] = rnd();
        if (r == 0) r = kern_cuda_buf_upload(act[0], 0, h, sizes[0]);
        if (r == 0) r = kern_cuda_buf_upload(act[8], 0, h, sizes[8]);
        free(h);
    }
    double usec = 0;
    res->t = t;
    res->weight_gb = (double)m.weight_bytes / 1e9;
    /* decode: warm-up, then n_decode steps of one token between two device events */
    if (r == 0) r = step(ctx, &m, t, &a, 1);
    if (r == 0) r = kern_cuda_timer_begin(ctx);
    for (int i = 0; i < n_decode && r == 0; i++) r = step(ctx, &m, t, &a, 1);
    if (r == 0) r = kern_cuda_timer_end(ctx, &usec);
    if (r == 0) {
        res->decode_tps = n_decode / (usec * 1e-6);
        res->decode_gbs = (double)m.weight_bytes * res->decode_tps / 1e9;
        /* copy bandwidth counts read + write; decode only reads: compare with it directly */
        res->decode_pct = 100.0 * res->decode_gbs * 1e9 / copy_bw;
    }
    /* the largest matrix-vector product alone (gate, all layers): kernel efficiency */
    if (r == 0) r = kern_cuda_timer_begin(ctx);
    for (int il = 0; il < N_LAYER && r == 0; il++)
        r = kern_cuda_matmul(ctx, a.hb, kern_cuda_buf_ptr(m.w[il][4]), t, a.xb, N_EMBD, N_FF, 1, a.scratch);
    if (r == 0) r = kern_cuda_timer_end(ctx, &usec);
    if (r == 0) res->matvec_gbs = (double)kern_row_size(t, N_EMBD) * N_FF * N_LAYER / (usec * 1e-6) / 1e9;
    /* prefill: one batch of n_prefill tokens through the GEMM path */
    if (r == 0 && n_prefill > KERN_CUDA_MATVEC_MAX_TOK) {
        r = step(ctx, &m, t, &a, n_prefill);
        if (r == 0) r = kern_cuda_timer_begin(ctx);
        if (r == 0) r = step(ctx, &m, t, &a, n_prefill);
        if (r == 0) r = kern_cuda_timer_end(ctx, &usec);
        if (r == 0) res->prefill_tps = n_prefill / (usec * 1e-6);
    }
    if (r == 0) r = kern_cuda_ctx_sync(ctx);
    for (int i = 0; i < 10; i++) kern_cuda_buf_free(act[i]);
    model_free(&m);
    return r;
}

#ifndef WARM_CUDA_BENCH_NO_ENGINE
/* The engine on cuda:dev: prefill, then greedy decode with one token fetched a step. */
static int bench_model(struct kern_cuda_ctx *cu, int dev, const char *path, int n_decode,
                       int n_prefill, double copy_bw, FILE *jf) {
    struct engine_model *m = NULL;
    struct engine_context *c = NULL;
    struct err_detail d = {0};
    int r = engine_model_load(path, NULL, &m, &d);
    if (n_prefill < 1) n_prefill = 1;
    if (n_prefill > 512) n_prefill = 512;
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = (uint32_t)(2 * n_prefill + 2 * n_decode + 2);
    p.n_batch = (uint32_t)n_prefill;
    p.device = ENGINE_DEVICE_CUDA;
    p.device_index = dev;
    if (r == 0) r = engine_context_new(m, &p, &c, &d);
    if (r < 0) {
        fprintf(stderr, "warm-cuda-bench: %s: %s\n", path, err_msg(&d, r));
        engine_model_free(m);
        return r;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_prefill),
            *pos = malloc(sizeof(int32_t) * (size_t)n_prefill);
    if (!tok || !pos) r = -ENOMEM;
    for (int i = 0; r == 0 && i < n_prefill; i++) {
        tok[i] = (int32_t)((i * 7919 + 3) % m->hp.n_vocab);
        pos[i] = i;
    }
    /* a prefill, then n greedy steps from position at */
    uint64_t t[4] = {0};
    for (int round = 0; round < 2 && r == 0;
         round++) { /* round 0 warms up (and records the graph) */
        engine_kv_seq_rm(c, 0, 0);
        struct engine_batch b = {.n_tok = n_prefill, .token = tok, .pos = pos, .argmax_only = true};
        t[0] = time_now_usec();
        r = engine_context_decode(c, &b, &d);
        int32_t next = r == 0 ? engine_context_argmax(c, 0) : 0;
        t[1] = time_now_usec();
        for (int i = 0; r == 0 && i < (round ? n_decode : 2); i++) {
            int32_t at = n_prefill + i;
            struct engine_batch one = {.n_tok = 1, .token = &next, .pos = &at, .argmax_only = true};
            r = engine_context_decode(c, &one, &d);
            next = engine_context_argmax(c, 0);
        }
        t[2] = time_now_usec();
    }
    if (r == 0) {
        struct engine_device_info info = {0};
        engine_context_device_info(c, 0, &info);
        double p_tps = n_prefill / ((double)(t[1] - t[0]) * 1e-6),
               d_tps = n_decode / ((double)(t[2] - t[1]) * 1e-6);
        double gbs = (double)info.weight_bytes * d_tps / 1e9;
        printf("model %s (%s on %s, %.2f GB of weights on the device, %.2f GB of KV, %.2f GB of "
               "activations)\n",
               path, m->arch_name, info.name, (double)info.weight_bytes / 1e9,
               (double)info.kv_bytes / 1e9, (double)info.scratch_bytes / 1e9);
        printf("  prefill %d tokens: %.0f tokens/s\n", n_prefill, p_tps);
        printf("  decode %d tokens: %.1f tokens/s, %.0f GB/s of weights = %.1f%% of the copy "
               "bandwidth\n",
               n_decode, d_tps, gbs, 100.0 * gbs * 1e9 / copy_bw);
        if (jf)
            fprintf(jf,
                    "{\"model\": \"%s\", \"weight_gb\": %.3f, \"prefill_tokens\": %d, "
                    "\"prefill_tps\": %.1f, "
                    "\"decode_tokens\": %d, \"decode_tps\": %.2f, \"decode_gbs\": %.1f, "
                    "\"decode_pct_of_copy_bw\": %.1f, \"copy_gbs\": %.1f}\n",
                    path, (double)info.weight_bytes / 1e9, n_prefill, p_tps, n_decode, d_tps, gbs,
                    100.0 * gbs * 1e9 / copy_bw, copy_bw / 1e9);
    } else {
        fprintf(stderr, "warm-cuda-bench: %s: %s\n", path, err_msg(&d, r));
    }
    (void)cu;
    free(tok);
    free(pos);
    engine_context_free(c);
    engine_model_free(m);
    return r;
}
#endif

int main(int argc, char **argv) {
    const char *types = "f16,q8_0,q4_0", *json = NULL, *model = NULL;
    int n_decode = 32, n_prefill = 512, dev = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) n_prefill = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--types f16,q8_0,q4_0 | --model FILE] [--tokens N] [--prefill N] [--device N] "
                    "[--json FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_decode < 1 || n_prefill < 0) {
        fprintf(stderr, "warm-cuda-bench: --tokens must be >= 1 and --prefill >= 0\n");
        return 2;
    }
    if (kern_cuda_device_count() <= dev) {
        printf("warm-cuda-bench: no CUDA device %d (no GPU or no driver)\n", dev);
        return 77;
    }
    struct kern_cuda_device_info info;
    struct kern_cuda_ctx *ctx = NULL;
    int r = kern_cuda_device_get_info(dev, &info);
    if (r == 0) r = kern_cuda_ctx_new(dev, &ctx);
    double copy_bw = 0;
    if (r == 0) r = kern_cuda_copy_bandwidth(ctx, (size_t)1 << 30, 20, &copy_bw);
    if (r < 0) {
        fprintf(stderr, "warm-cuda-bench: device %d: %s\n", dev, strerror(-r));
        kern_cuda_ctx_free(ctx);
        return 1;
    }
    printf("device %d: %s sm_%d%d, %d SMs, %.1f GiB; copy bandwidth %.0f GB/s (read + write)\n", dev, info.name,
           info.cc_major, info.cc_minor, info.n_sm, (double)info.total_bytes / (1 << 30), copy_bw / 1e9);
    if (model) {
#ifndef WARM_CUDA_BENCH_NO_ENGINE
        FILE *mf = json ? fopen(json, "w") : NULL;
        r = bench_model(ctx, dev, model, n_decode, n_prefill, copy_bw, mf);
        if (mf) fclose(mf);
#else
        fprintf(stderr, "warm-cuda-bench: --model needs the engine (this is a kernels-only build)\n");
        r = -EOPNOTSUPP;
#endif
        kern_cuda_ctx_free(ctx);
        return r < 0 ? 1 : 0;
    }
    printf("model: llama n_embd %d, %d layers, %d heads, %d KV heads, head %d, n_ff %d, vocab %d\n", N_EMBD, N_LAYER,
           N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB);
    printf("weights only (matrix products, norms, SwiGLU; no attention, no KV cache)\n");
    printf("%-7s %9s %12s %12s %10s %12s %14s\n", "type", "GB", "decode t/s", "decode GB/s", "% bound",
           "matvec GB/s", "prefill t/s");
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf)
        fprintf(jf, "{\"device\": \"%s\", \"copy_gbs\": %.1f, \"weights_only\": true, \"decode_tokens\": %d, "
                    "\"prefill_tokens\": %d, \"types\": [",
                info.name, copy_bw / 1e9, n_decode, n_prefill);
    int n_done = 0, status = 0;
    char *list = strdup(types);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int t = kern_type_from_name(name);
        struct result res = {0};
        r = t < 0 ? -EINVAL : bench_type(ctx, (enum kern_type)t, n_decode, n_prefill, copy_bw, &res);
        if (r < 0) {
            fprintf(stderr, "warm-cuda-bench: %s: %s\n", name, strerror(-r));
            status = 1;
            continue;
        }
        printf("%-7s %9.2f %12.1f %12.0f %9.1f%% %12.0f %14.0f\n", kern_type_name(t), res.weight_gb, res.decode_tps,
               res.decode_gbs, res.decode_pct, res.matvec_gbs, res.prefill_tps);
        if (jf)
            fprintf(jf, "%s{\"type\": \"%s\", \"weight_gb\": %.3f, \"decode_tps\": %.2f, \"decode_gbs\": %.1f, "
                        "\"decode_pct_of_copy_bw\": %.1f, \"matvec_gbs\": %.1f, \"prefill_tps\": %.1f}",
                    n_done ? ", " : "", kern_type_name(t), res.weight_gb, res.decode_tps, res.decode_gbs,
                    res.decode_pct, res.matvec_gbs, res.prefill_tps);
        n_done++;
    }
    free(list);
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    kern_cuda_ctx_free(ctx);
    return status;
}
