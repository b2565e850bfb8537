/* The KV cache's device slots (kv-cache.h, struct kv_mem): a GPU keeps the KV rows of its
 * layers in its own memory, which the cache reaches only through kv_mem's alloc, free and
 * copies. Without a GPU in CI, this test gives the cache a memory space in host memory
 * that keeps its own books (it allocates every device slot's rows itself, and counts every
 * row copy in and out by direction) and checks, against a context whose cache is all on
 * the host, over the same model:
 *   the device slots are exactly the layers from dev_layer0 on, and every row of them
 *   moves through kv_mem (the counters), never through the host paths;
 *   state blobs exported through kv_mem are byte for byte the host context's;
 *   a blob imported through kv_mem continues with the same logits;
 *   a sequence copy and a context shift through kv_mem equal the host's.
 * The forward pass reads these slots directly here (they are host memory): on a GPU it is
 * the GPU's own kernels that do (tests/cuda/test-cuda-device.c). */
#include "kv-test.h"

#include <errno.h>
#include <string.h>

struct host_space {
    struct kv_mem mem;
    const struct kv_cache *kv;
    char *rows[KV_MAX_STORES][16][2]; /* [store][slot][K, V] */
    size_t n_alloc;
    size_t n_to_host, n_from_host, n_on_dev; /* row copies by direction */
};

static size_t hs_rb(const struct host_space *h, uint32_t s, bool v) {
    return v ? h->kv->store[s].v_row_bytes : h->kv->store[s].k_row_bytes;
}
static int hs_alloc(void *ud, uint32_t s, uint32_t slot, size_t rows, void **ret_k, void **ret_v) {
    struct host_space *h = ud;
    if (slot >= 16) return -EINVAL;
    for (int v = 0; v < 2; v++)
        if (!(h->rows[s][slot][v] = calloc(rows, hs_rb(h, s, v)))) return -ENOMEM;
    h->n_alloc += 2;
    /* whole rows at one address: the forward pass reads them (as a GPU's kernels would) */
    *ret_k = h->rows[s][slot][0];
    *ret_v = h->rows[s][slot][1];
    return 0;
}
static void hs_free(void *ud, uint32_t s, uint32_t slot) {
    struct host_space *h = ud;
    for (int v = 0; v < 2; v++) {
        h->n_alloc -= h->rows[s][slot][v] != NULL;
        free(h->rows[s][slot][v]);
        h->rows[s][slot][v] = NULL;
    }
}
static int hs_get(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n, void *dst) {
    struct host_space *h = ud;
    h->n_to_host++;
    memcpy(dst, h->rows[s][slot][v] + cell * hs_rb(h, s, v), n * hs_rb(h, s, v));
    return 0;
}
static int hs_set(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n, const void *src) {
    struct host_space *h = ud;
    h->n_from_host++;
    memcpy(h->rows[s][slot][v] + cell * hs_rb(h, s, v), src, n * hs_rb(h, s, v));
    return 0;
}
static int hs_copy(void *ud, uint32_t s, uint32_t slot, bool v, size_t dst, size_t src, size_t n) {
    struct host_space *h = ud;
    h->n_on_dev++;
    char *b = h->rows[s][slot][v];
    memcpy(b + dst * hs_rb(h, s, v), b + src * hs_rb(h, s, v), n * hs_rb(h, s, v));
    return 0;
}

/* Replaces ctx's cache with one whose slots of layers >= l0 are in h's space. */
static void move_cache(struct engine_context *ctx, struct host_space *h, uint32_t l0) {
    const struct engine_context_params *p = &ctx->params;
    *h = (struct host_space){.kv = &ctx->kv,
                             .mem = {.ud = h, .alloc = hs_alloc, .free = hs_free, .get = hs_get, .set = hs_set,
                                     .copy = hs_copy}};
    uint32_t ring_extra =
        p->swa_full ? 0 : p->n_batch + (p->swa_chunk ? p->swa_chunk : ENGINE_CHUNK_TOKENS);
    kv_cache_done(&ctx->kv);
    struct err_detail d = {0};
    ASSERT_OK_D(kv_cache_init(&ctx->kv, ctx->model, p->type_k, p->type_v, p->n_seq, p->n_ctx, p->kv_rotation,
                              ring_extra, &h->mem, l0, p->n_rs_snapshots, &d), &d);
}

static void decode(struct engine_context *ctx, const int32_t *tok, int32_t p0, int32_t n) {
    int32_t pos[64];
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i;
    struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos};
    struct err_detail d = {0};
    ASSERT_OK_D(engine_context_decode(ctx, &b, &d), &d);
}

static void *blob_of(const struct engine_context *ctx, uint32_t p1, size_t *size) {
    struct err_detail d = {0};
    *size = 0;
    if (engine_kv_export(ctx, 0, 0, p1, NULL, 0, size, &d) < 0) return NULL;
    void *b = malloc(*size);
    if (b && engine_kv_export(ctx, 0, 0, p1, b, *size, size, &d) < 0) {
        free(b);
        return NULL;
    }
    return b;
}

static bool same_logits(const struct engine_context *a, const struct engine_context *b) {
    const int32_t nv = (int32_t)engine_context_model(a)->hp.n_vocab;
    return memcmp(engine_context_logits(a, 0), engine_context_logits(b, 0), (size_t)nv * sizeof(float)) == 0;
}

TEST(device_slots_route_through_kv_mem) {
    const char *path = test_mkmodel("devmem", "--arch llama --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 "
                                              "--head-dim 64 --n-ff 384 --n-vocab 320 --type q8_0");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct engine_model *m = kvt_model_open(path);
    ASSERT_TRUE(m != NULL);
    static const enum kern_type types[] = {KERN_TYPE_F16, KERN_TYPE_Q8_0}; /* q8_0: rotated */
    for (size_t k = 0; k < ARRAY_SIZE(types); k++) {
        int e = 0;
        struct engine_context *host = kvt_ctx(m, types[k], types[k], true, 128, &e);
        struct engine_context *dev = kvt_ctx(m, types[k], types[k], true, 128, &e);
        ASSERT_TRUE(host && dev);
        struct host_space hs;
        move_cache(dev, &hs, 2);
        /* layers 2 and 3 in the space: their K and V buffers */
        ASSERT_EQ(hs.n_alloc, 4u);
        const struct kv_store *st = &dev->kv.store[0];
        for (uint32_t i = 0; i < st->n_layer_kv; i++) ASSERT_EQ(st->on_dev[i], st->layers[i] >= 2);

        int32_t tok[40];
        for (int i = 0; i < 40; i++) tok[i] = (i * 37 + 5) % 320;
        decode(host, tok, 0, 30);
        decode(dev, tok, 0, 30);
        ASSERT_TRUE(same_logits(host, dev));

        /* export: the device slots' rows come out through kv_mem, the bytes are the host's */
        size_t nh, nd;
        void *bh = blob_of(host, 30, &nh), *bd = blob_of(dev, 30, &nd);
        ASSERT_TRUE(bh && bd);
        ASSERT_EQ(nh, nd);
        ASSERT_TRUE(memcmp(bh, bd, nh) == 0);
        ASSERT_EQ(hs.n_to_host, 4u); /* K and V of two layers, one run each */
        ASSERT_EQ(hs.n_from_host, 0u);

        /* import into the device context's fresh sequence, then both continue */
        struct err_detail d = {0};
        ASSERT_OK_D(engine_kv_seq_rm(dev, 0, 0), &d);
        ASSERT_OK_D(engine_kv_import(dev, 0, bh, nh, tok, 40, NULL, &d), &d);
        ASSERT_EQ(hs.n_from_host, 4u);
        decode(host, tok + 30, 30, 4);
        decode(dev, tok + 30, 30, 4);
        ASSERT_TRUE(same_logits(host, dev));

        /* a sequence copy, on the device */
        ASSERT_OK_D(engine_kv_seq_cp(host, 0, 0, 34), &d); /* same sequence: nothing moves */
        size_t on_dev = hs.n_on_dev;
        ASSERT_EQ(engine_kv_seq_cp(dev, 0, 0, 34), 0);
        ASSERT_EQ(hs.n_on_dev, on_dev);

        /* a context shift: device rows staged through the host and back */
        size_t to = hs.n_to_host, from = hs.n_from_host;
        ASSERT_OK_D(engine_kv_seq_shift(host, 0, 4, 10, &d), &d);
        ASSERT_OK_D(engine_kv_seq_shift(dev, 0, 4, 10, &d), &d);
        ASSERT_TRUE(hs.n_to_host > to && hs.n_from_host > from);
        decode(host, tok + 34, 24, 2);
        decode(dev, tok + 34, 24, 2);
        ASSERT_TRUE(same_logits(host, dev));
        printf("  %s: blob %zu bytes equal, import/shift equal; copies to host %zu, from host %zu\n",
               kern_type_traits(types[k])->name, nh, hs.n_to_host, hs.n_from_host);
        free(bh);
        free(bd);
        engine_context_free(host);
        engine_context_free(dev);
        ASSERT_EQ(hs.n_alloc, 0u); /* every device buffer given back */
    }
    engine_model_free(m);
}

/* n_seq 2: a copy between sequences of device slots is one device-to-device copy per
 * K and V of each device layer, and equals the host's */
TEST(sequence_copy_on_device) {
    const char *path = test_mkmodel("devmem", "--arch llama --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 "
                                              "--head-dim 64 --n-ff 384 --n-vocab 320 --type q8_0");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct engine_model *m = kvt_model_open(path);
    ASSERT_TRUE(m != NULL);
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.n_seq = 2;
    p.n_threads = 1;
    struct engine_context *host = NULL, *dev = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(engine_context_new(m, &p, &host, &d), &d);
    ASSERT_OK_D(engine_context_new(m, &p, &dev, &d), &d);
    struct host_space hs;
    move_cache(dev, &hs, 1);
    int32_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (i * 11 + 3) % 320;
    decode(host, tok, 0, 16);
    decode(dev, tok, 0, 16);
    ASSERT_OK_D(engine_kv_seq_cp(host, 0, 1, 16), &d);
    ASSERT_OK_D(engine_kv_seq_cp(dev, 0, 1, 16), &d);
    ASSERT_EQ(hs.n_on_dev, 6u); /* layers 1..3, K and V */
    int32_t pos = 16, seq = 1;
    struct engine_batch b = {.n_tok = 1, .token = tok + 16, .pos = &pos, .seq = &seq};
    ASSERT_OK_D(engine_context_decode(host, &b, &d), &d);
    ASSERT_OK_D(engine_context_decode(dev, &b, &d), &d);
    ASSERT_TRUE(same_logits(host, dev));
    engine_context_free(host);
    engine_context_free(dev);
    engine_model_free(m);
}

TEST_MAIN(T(device_slots_route_through_kv_mem), T(sequence_copy_on_device))
