/* The KV cache is faulted in when the context is made (issue 16, resume at the floor): a
 * restore after a restart writes megabytes of rows, and paying a page fault per 4 KiB of
 * them made import several times slower than a memcpy. Every K and V buffer of every
 * store (full attention, SWA ring) is resident right after engine_context_new, still
 * reads as zeros, and a blob imported into it generates what the exporting context does. */
#include "kv-test.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

/* Pages of [p, p + n) that are not resident, by mincore; < 0 on error. */
static long pages_absent(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(page - 1), end = (uintptr_t)p + n;
    size_t n_pages = (end - a + page - 1) / page;
    unsigned char *vec = malloc(n_pages);
    if (!vec) return -ENOMEM;
    long absent = mincore((void *)a, end - a, vec) < 0 ? -errno : 0;
    for (size_t i = 0; absent >= 0 && i < n_pages; i++) absent += !(vec[i] & 1);
    free(vec);
    return absent;
}

static bool all_zero(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i]) return false;
    return true;
}

/* Bytes of one K (or V) buffer of store st: n_seq × (ring ? 2 : 1) × n_cells rows. */
static size_t buffer_bytes(const struct kv_cache *kv, const struct kv_store *st, size_t row) {
    return (size_t)kv->n_seq * st->n_cells * (st->ring ? 2 : 1) * row;
}

/* Every buffer of ctx resident and zero; the number of buffers checked in *ret_n. */
static void check_resident(struct engine_context *ctx, int *ret_n) {
    const struct kv_cache *kv = &ctx->kv;
    *ret_n = 0;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            size_t kb = buffer_bytes(kv, st, st->k_row_bytes);
            size_t vb = buffer_bytes(kv, st, st->v_row_bytes);
            ASSERT_EQ(pages_absent(st->k[i], kb), 0);
            ASSERT_EQ(pages_absent(st->v[i], vb), 0);
            ASSERT_TRUE(all_zero(st->k[i], kb));
            ASSERT_TRUE(all_zero(st->v[i], vb));
            *ret_n += 2;
        }
    }
}

/* name, warm-mkmodel shape, context size: buffers of several MiB (the huge-page part and
 * its edges) and of less than a page; an SWA model, whose ring is a buffer of its own */
static const struct {
    const char *name, *shape;
    uint32_t n_ctx;
} cases[] = {
    {"llama", "--arch llama --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 --n-ff 128 "
              "--n-vocab 300 --seed 31", 8192},
    {"llama-tiny", "--arch llama --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 --n-ff 128 "
                   "--n-vocab 300 --seed 31", 16},
    {"gemma3", "--arch gemma3 --n-embd 128 --n-layer 4 --n-head 2 --n-head-kv 1 --head-dim 64 "
               "--n-ff 128 --n-vocab 300 --window 8 --swa-pattern 2 --seed 32", 4096},
};

TEST(resident_at_load) {
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const char *path = test_mkmodel(cases[c].name, "%s", cases[c].shape);
        if (!path) SKIP("warm-mkmodel unavailable (WARM_BIN)");
        struct engine_model *m = kvt_model_open(path);
        ASSERT_TRUE(m);
        const enum kern_type types[][2] = {{KERN_TYPE_F16, KERN_TYPE_F16},
                                           {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0}};
        for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
            struct engine_context *ctx =
                kvt_ctx(m, types[t][0], types[t][1], false, cases[c].n_ctx, NULL);
            ASSERT_TRUE(ctx);
            int n = 0;
            check_resident(ctx, &n);
            bool swa = ctx->kv.n_store == 2 && ctx->kv.store[KV_STORE_SWA].ring;
            engine_context_free(ctx);
            if (test_failed_) {
                fprintf(stderr, "  model %s, context %u, types %s/%s\n", cases[c].name,
                        cases[c].n_ctx, kern_type_name(types[t][0]), kern_type_name(types[t][1]));
                engine_model_free(m);
                return;
            }
            ASSERT_TRUE(n >= 4);
            if (strcmp(cases[c].name, "gemma3") == 0) ASSERT_TRUE(swa);
        }
        engine_model_free(m);
    }
}

/* The prefaulted cache takes a blob: export [0, 40) of a 48-token prompt, import it into
 * a fresh context (the whole-blob bulk copy into pages faulted at load), decode the rest
 * and generate: the tokens equal the uninterrupted run's. */
TEST(import_into_prefaulted) {
    const char *path = test_mkmodel(cases[0].name, "%s", cases[0].shape);
    if (!path) SKIP("warm-mkmodel unavailable (WARM_BIN)");
    struct engine_model *m = kvt_model_open(path);
    ASSERT_TRUE(m);
    enum { N = 48, AT = 40, GEN = 16 };
    int32_t prompt[N], ref[GEN], got[GEN];
    for (int i = 0; i < N; i++) prompt[i] = 3 + (i * 37) % 290;
    struct engine_context *r = kvt_ctx(m, KERN_TYPE_F16, KERN_TYPE_F16, false, 8192, NULL);
    struct engine_context *b = kvt_ctx(m, KERN_TYPE_F16, KERN_TYPE_F16, false, 8192, NULL);
    uint8_t *blob = NULL;
    size_t size = 0;
    struct err_detail d = {0};
    uint32_t p1 = 0;
    bool ok = r && b && kvt_decode(r, prompt, 0, AT) >= 0 &&
              engine_kv_export(r, 0, 0, AT, NULL, 0, &size, &d) >= 0 && (blob = malloc(size)) &&
              engine_kv_export(r, 0, 0, AT, blob, size, &size, &d) >= 0 &&
              kvt_decode(r, prompt, AT, N) >= 0 && kvt_greedy(r, N, GEN, ref) >= 0 &&
              engine_kv_import(b, 0, blob, size, prompt, N, &p1, &d) >= 0 && p1 == AT &&
              kvt_decode(b, prompt, AT, N) >= 0 && kvt_greedy(b, N, GEN, got) >= 0;
    free(blob);
    engine_context_free(r);
    engine_context_free(b);
    engine_model_free(m);
    if (!ok) TEST_FAIL_("export, import or decoding failed: %s", d.msg[0] ? d.msg : "-");
    for (int i = 0; i < GEN; i++) ASSERT_EQ(got[i], ref[i]);
}

TEST_MAIN(T(resident_at_load), T(import_into_prefaulted))
