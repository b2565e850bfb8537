/* The recurrent state's device copy (kv-cache.h, struct kv_rs_mem): a GPU keeps the
 * Gated DeltaNet state of its layers in its own memory and updates it in place; the
 * host's kv_rstate is synced lazily (a host read pulls a sequence whose device copy moved,
 * a host write marks it and the next device step pushes it). Without a GPU in CI, this
 * test gives the cache a "device" in host memory that counts every pull and push, and
 * runs device steps as a GPU would see them: kv_rs_dev_step() for the step's sequences,
 * the state taken from the device copy, the step computed, the new state left only in
 * the device copy (the host's arrays of those sequences overwritten with NaN, so a read
 * that misses its pull shows). Against a context on the host only, over qwen35-tiny of
 * ../shared/models/hybrid, same logits and bytes throughout:
 *   a sequence decoding on and on never crosses (no pull, no push);
 *   a snapshot and a blob export pull once, and their bytes are the host context's;
 *   a rollback to the snapshot, a sequence copy and a blob import are host writes that
 *   the next step pushes once; a sequence copy pulls its source first.
 * The GPU's own copies (engine/gpu.c) are checked against the CPU by
 * tests/cuda/test-cuda-device.c. */
#include "kv-test.h"

#include <math.h>
#include <string.h>

struct rs_space {
    struct kv_rs_mem mem;
    struct kv_rstate *rs;
    uint32_t l0;                   /* slots of layers from l0 on are "on the device" */
    float *conv[16], *ssm[16];     /* by slot: n_seq × conv_floats, n_seq × ssm_floats */
    size_t n_pull, n_push;         /* sequences moved by direction */
};

static bool on_dev(const struct rs_space *h, uint32_t slot) {
    return (uint32_t)h->rs->layers[slot] >= h->l0;
}

/* seq's state of the device's slots: device -> host (get) or host -> device */
static void rs_move(struct rs_space *h, int32_t seq, bool to_host) {
    const struct kv_rstate *rs = h->rs;
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        if (!on_dev(h, i)) continue;
        float *hc = rs->conv[i] + (size_t)seq * rs->conv_floats, *dc = h->conv[i] + (size_t)seq * rs->conv_floats;
        float *hs = rs->ssm[i] + (size_t)seq * rs->ssm_floats, *ds = h->ssm[i] + (size_t)seq * rs->ssm_floats;
        memcpy(to_host ? hc : dc, to_host ? dc : hc, rs->conv_floats * sizeof(float));
        memcpy(to_host ? hs : ds, to_host ? ds : hs, rs->ssm_floats * sizeof(float));
    }
}
static int rs_get(void *ud, int32_t seq) {
    struct rs_space *h = ud;
    h->n_pull++;
    rs_move(h, seq, true);
    return 0;
}
static int rs_set(void *ud, int32_t seq) {
    struct rs_space *h = ud;
    h->n_push++;
    rs_move(h, seq, false);
    return 0;
}

/* Gives ctx's recurrent state a device copy of the slots of layers >= l0 (all zero, as
 * the host's: the context is fresh). */
static void rs_space_init(struct rs_space *h, struct engine_context *ctx, uint32_t l0) {
    struct kv_rstate *rs = &ctx->kv.rs;
    *h = (struct rs_space){.mem = {.ud = h, .get = rs_get, .set = rs_set}, .rs = rs, .l0 = l0};
    ASSERT_TRUE(rs->n_layer_rs > 0 && rs->n_layer_rs <= 16 && rs->mem == NULL);
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        h->conv[i] = calloc(ctx->kv.n_seq * rs->conv_floats + 1, sizeof(float));
        h->ssm[i] = calloc(ctx->kv.n_seq * rs->ssm_floats, sizeof(float));
        ASSERT_TRUE(h->conv[i] && h->ssm[i]);
    }
    rs->mem = &h->mem;
}
static void rs_space_done(struct rs_space *h) {
    for (uint32_t i = 0; i < 16; i++) free(h->conv[i]), free(h->ssm[i]);
}

/* One device step of n tokens of seq from p0, as a GPU runs it (see the top). */
static void dev_decode(struct engine_context *ctx, struct rs_space *h, int32_t seq, const int32_t *tok,
                       int32_t p0, int32_t n) {
    int32_t pos[64], seqs[64];
    ASSERT_TRUE(n <= 64);
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i, seqs[i] = seq;
    ASSERT_OK(kv_rs_dev_step(&ctx->kv, seq));
    rs_move(h, seq, true); /* the step computes from the device's state ... */
    struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = seqs};
    struct err_detail d = {0};
    ASSERT_OK_D(engine_context_decode(ctx, &b, &d), &d);
    rs_move(h, seq, false); /* ... and leaves its result there only */
    const struct kv_rstate *rs = h->rs;
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        if (!on_dev(h, i)) continue;
        for (size_t j = 0; j < rs->conv_floats; j++) rs->conv[i][(size_t)seq * rs->conv_floats + j] = NAN;
        for (size_t j = 0; j < rs->ssm_floats; j++) rs->ssm[i][(size_t)seq * rs->ssm_floats + j] = NAN;
    }
}

static void host_decode(struct engine_context *ctx, int32_t seq, const int32_t *tok, int32_t p0, int32_t n) {
    int32_t pos[64], seqs[64];
    ASSERT_TRUE(n <= 64);
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i, seqs[i] = seq;
    struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = seqs};
    struct err_detail d = {0};
    ASSERT_OK_D(engine_context_decode(ctx, &b, &d), &d);
}

static void *blob_of(const struct engine_context *ctx, int32_t seq, uint32_t p1, size_t *size) {
    struct err_detail d = {0};
    *size = 0;
    if (engine_kv_export(ctx, seq, 0, p1, NULL, 0, size, &d) < 0) return NULL;
    void *b = malloc(*size);
    if (b && engine_kv_export(ctx, seq, 0, p1, b, *size, size, &d) < 0) {
        free(b);
        return NULL;
    }
    return b;
}

static bool same_logits(const struct engine_context *a, const struct engine_context *b) {
    const int32_t nv = (int32_t)engine_context_model(a)->hp.n_vocab;
    const float *la = engine_context_logits(a, engine_context_n_outputs(a) - 1);
    const float *lb = engine_context_logits(b, engine_context_n_outputs(b) - 1);
    return la && lb && memcmp(la, lb, (size_t)nv * sizeof(float)) == 0;
}

static struct engine_context *ctx2(const struct engine_model *m) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 128;
    p.n_seq = 2;
    p.n_threads = 1;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) fprintf(stderr, "context: %s\n", err_msg(&d, r));
    return ctx;
}

/* l0 0: every recurrent layer on the "device"; l0 4: the first two of them on the host,
 * as gpu_layers = 4 leaves them */
static void check_lazy_sync(uint32_t l0) {
    const char *path = test_shared_path("hybrid/qwen35-tiny.gguf");
    struct engine_model *m = path ? kvt_model_open(path) : NULL;
    if (!m) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");
    struct engine_context *host = ctx2(m), *dev = ctx2(m);
    ASSERT_TRUE(host && dev);
    struct rs_space h;
    rs_space_init(&h, dev, l0);
    const int32_t nv = (int32_t)m->hp.n_vocab;
    int32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (i * 37 + 5) % nv;
    struct err_detail d = {0};

    /* a prompt, then token after token: the state never crosses */
    host_decode(host, 0, tok, 0, 30);
    dev_decode(dev, &h, 0, tok, 0, 30);
    ASSERT_TRUE(same_logits(host, dev));
    for (int32_t p = 30; p < 36; p++) {
        host_decode(host, 0, tok + p, p, 1);
        dev_decode(dev, &h, 0, tok + p, p, 1);
        ASSERT_TRUE(same_logits(host, dev));
    }
    ASSERT_EQ(h.n_pull, 0u);
    ASSERT_EQ(h.n_push, 0u);

    /* a snapshot pulls once; the export after it pulls nothing more; bytes equal */
    ASSERT_OK_D(engine_kv_snapshot(host, 0, &d), &d);
    ASSERT_OK_D(engine_kv_snapshot(dev, 0, &d), &d);
    ASSERT_EQ(h.n_pull, 1u);
    size_t nh, nd;
    void *bh = blob_of(host, 0, 36, &nh), *bd = blob_of(dev, 0, 36, &nd);
    ASSERT_TRUE(bh && bd);
    ASSERT_EQ(nh, nd);
    ASSERT_TRUE(memcmp(bh, bd, nh) == 0);
    ASSERT_EQ(h.n_pull, 1u);

    /* on past the snapshot, then back to it: a host write, pushed by the next step */
    for (int32_t p = 36; p < 40; p++) {
        host_decode(host, 0, tok + p, p, 1);
        dev_decode(dev, &h, 0, tok + p, p, 1);
    }
    ASSERT_TRUE(same_logits(host, dev));
    ASSERT_OK(engine_kv_seq_rm(host, 0, 36));
    ASSERT_OK(engine_kv_seq_rm(dev, 0, 36));
    ASSERT_EQ(h.n_push, 0u);
    host_decode(host, 0, tok + 50, 36, 3);
    dev_decode(dev, &h, 0, tok + 50, 36, 3);
    ASSERT_EQ(h.n_push, 1u);
    ASSERT_TRUE(same_logits(host, dev));

    /* a blob export of the live state pulls once; its import into seq 1 is pushed once */
    free(bd);
    bd = blob_of(dev, 0, 39, &nd);
    ASSERT_TRUE(bd != NULL);
    ASSERT_EQ(h.n_pull, 2u);
    free(bh);
    bh = blob_of(host, 0, 39, &nh);
    ASSERT_TRUE(bh && nh == nd && memcmp(bh, bd, nh) == 0);
    ASSERT_OK_D(engine_kv_import(host, 1, bh, nh, NULL, 0, NULL, &d), &d);
    ASSERT_OK_D(engine_kv_import(dev, 1, bd, nd, NULL, 0, NULL, &d), &d);
    host_decode(host, 1, tok + 60, 39, 2);
    dev_decode(dev, &h, 1, tok + 60, 39, 2);
    ASSERT_EQ(h.n_push, 2u);
    ASSERT_TRUE(same_logits(host, dev));

    /* a sequence copy 1 -> 0 pulls its source (moved by the last step), pushes at 0's step */
    ASSERT_OK(engine_kv_seq_cp(host, 1, 0, 41));
    ASSERT_OK(engine_kv_seq_cp(dev, 1, 0, 41));
    ASSERT_EQ(h.n_pull, 3u);
    host_decode(host, 0, tok + 1, 41, 1);
    dev_decode(dev, &h, 0, tok + 1, 41, 1);
    ASSERT_EQ(h.n_push, 3u);
    ASSERT_TRUE(same_logits(host, dev));
    printf("  l0 %u: %zu pulls, %zu pushes, logits and blobs equal the host context's\n", l0, h.n_pull,
           h.n_push);

    free(bh);
    free(bd);
    engine_context_free(dev);
    engine_context_free(host);
    rs_space_done(&h);
    engine_model_free(m);
}

TEST(lazy_sync_all_layers) {
    check_lazy_sync(0);
}

TEST(lazy_sync_partial) {
    check_lazy_sync(4);
}

TEST_MAIN(T(lazy_sync_all_layers), T(lazy_sync_partial))
