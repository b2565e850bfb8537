/* The byte budget (P1-1, P1-6): LRU eviction at the high-water mark, leaves before their
 * prefixes, MDB_MAP_FULL handled inside, oversized writes refused. */
#include "store-test.h"

#include <pthread.h>
#include <unistd.h>

static const uint8_t FP[16] = {9};
#define C 64u
#define MiB (1ull << 20)

static int write_chunk(struct store_env *env, const struct store_chain *ch, uint64_t seed,
                       size_t blob_bytes, uint8_t *blob) {
    int32_t t[C];
    store_test_tokens(t, C, seed);
    store_test_fill(blob, blob_bytes, seed);
    struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = ch->h0,
                          .tokens = t, .n_tokens = C, .blob = blob, .blob_bytes = blob_bytes};
    struct err_detail d = {0};
    int r = store_write(env, &p, NULL, &d);
    if (r < 0 && r != ERR_STORE_FULL) fprintf(stderr, "store_write: %s\n", err_msg(&d, r));
    return r;
}

TEST(fill_past_budget) {
    /* 100k unique prompts of P1-6, scaled: 32 MiB budget, 400 records of 64 KiB–1 MiB
     * (about 8 × the budget) */
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("fill", 32 * MiB, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(MiB);
    uint64_t rng = 1, written = 0, max_bytes = 0;
    struct store_stats st;
    for (int i = 0; i < 400; i++) {
        size_t n = 64 * 1024 + store_test_rng(&rng) % (MiB - 64 * 1024);
        ASSERT_OK(write_chunk(env, &ch, 1000 + (uint64_t)i, n, blob));
        written += n;
        ASSERT_OK(store_env_stats(env, &st));
        ASSERT_TRUE(st.bytes <= st.budget_bytes);
        ASSERT_TRUE(st.bytes <= st.high_water_bytes);
        max_bytes = MAX(max_bytes, st.bytes);
        ASSERT_TRUE(st.file_bytes <= st.map_bytes);
    }
    free(blob);
    ASSERT_TRUE(st.n_evictions > 0);
    ASSERT_EQ(st.n_write_errors, 0);
    printf("  wrote %.0f MiB into a %.0f MiB budget: %llu records kept, %.1f MiB accounted "
           "(max %.1f), data.mdb %.1f MiB on disk, %llu evictions, %llu map-full handled\n",
           (double)written / MiB, (double)st.budget_bytes / MiB,
           (unsigned long long)st.n_entries, (double)st.bytes / MiB, (double)max_bytes / MiB,
           (double)st.file_bytes / MiB, (unsigned long long)st.n_evictions,
           (unsigned long long)st.n_map_full);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_EQ(rep.n_records, st.n_entries);
    /* the newest records are the ones kept */
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    int32_t t[C];
    store_test_tokens(t, C, 1000 + 399);
    struct store_match m;
    ASSERT_OK(store_lookup(txn, &ch, t, C, &m, NULL));
    ASSERT_EQ(m.n_chunks, 1);
    store_match_done(&m);
    store_test_tokens(t, C, 1000);
    ASSERT_OK(store_lookup(txn, &ch, t, C, &m, NULL));
    ASSERT_EQ(m.n_chunks, 0);
    store_match_done(&m);
    store_txn_abort(txn);
    store_env_close(env);

    /* reopening with a smaller budget evicts at once */
    struct store_options o = {.path = store_test_dir("fill"), .budget_bytes = 8 * MiB};
    ASSERT_OK(store_env_open(&o, &env, NULL, NULL));
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_TRUE(st.bytes <= st.high_water_bytes);
    ASSERT_OK(store_env_check(env, &rep));
    store_env_close(env);
}

TEST(too_large) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("large", 8 * MiB, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(9 * MiB);
    ASSERT_OK(write_chunk(env, &ch, 1, MiB, blob));
    int32_t t[C];
    store_test_tokens(t, C, 2);
    struct store_put p = {.chain = &ch, .kind = STORE_KIND_CHUNK, .parent = ch.h0,
                          .tokens = t, .n_tokens = C, .blob = blob, .blob_bytes = 9 * MiB};
    struct err_detail d = {0};
    ASSERT_ERR(store_write(env, &p, NULL, &d), ERR_STORE_FULL);
    ASSERT_TRUE(strstr(d.msg, "larger than the byte budget") != NULL);
    printf("  %s\n", d.msg);
    /* inside a caller's transaction too, and the transaction stays usable */
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_WRITE, &txn));
    ASSERT_ERR(store_put(txn, &p, NULL, &d), ERR_STORE_FULL);
    p.blob_bytes = 100;
    ASSERT_OK(store_put(txn, &p, NULL, &d));
    ASSERT_OK(store_txn_commit(txn));
    free(blob);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_entries, 2);
    store_env_close(env);
}

/* A reader that pins an old snapshot: LMDB cannot reuse any page freed after it, so the
 * file grows until the map is full. */
struct pin {
    struct store_env *env;
    int fd_ready[2], fd_done[2];
};
static void *pin_main(void *p) {
    struct pin *a = p;
    struct store_txn *txn = NULL;
    char c = store_txn_begin(a->env, STORE_TXN_READ, &txn) == 0;
    if (write(a->fd_ready[1], &c, 1) != 1) return NULL;
    if (read(a->fd_done[0], &c, 1) != 1) c = 0;
    store_txn_abort(txn);
    return NULL;
}

TEST(map_full) {
    /* map = budget + 16 MiB, the smallest allowed */
    struct store_options o = {.path = store_test_dir("mapfull"), .budget_bytes = 16 * MiB,
                              .map_bytes = 32 * MiB};
    struct store_env *env = NULL;
    ASSERT_OK(store_env_open(&o, &env, NULL, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(2 * MiB);
    for (int i = 0; i < 8; i++) ASSERT_OK(write_chunk(env, &ch, (uint64_t)i, 2 * MiB, blob));

    struct pin pin = {.env = env};
    ASSERT_TRUE(pipe(pin.fd_ready) == 0 && pipe(pin.fd_done) == 0);
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, pin_main, &pin) == 0);
    char c;
    ASSERT_EQ(read(pin.fd_ready[0], &c, 1), 1);
    int ok = 0, full = 0, other = 0;
    for (int i = 0; i < 40; i++) {
        int r = write_chunk(env, &ch, 100 + (uint64_t)i, 2 * MiB, blob);
        if (r == 0)
            ok++;
        else if (r == ERR_STORE_FULL)
            full++;
        else
            other++;
    }
    c = 1;
    ASSERT_EQ(write(pin.fd_done[1], &c, 1), 1);
    pthread_join(th, NULL);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    printf("  with a pinned snapshot: %d written, %d refused (RESOURCE_EXHAUSTED), %llu map-full "
           "met inside\n",
           ok, full, (unsigned long long)st.n_map_full);
    ASSERT_EQ(other, 0);
    ASSERT_TRUE(full > 0 && st.n_map_full > 0);
    ASSERT_TRUE(!store_env_is_broken(env)); /* never MDB_PANIC */
    /* once the reader is gone, writes succeed again */
    for (int i = 0; i < 20; i++) ASSERT_OK(write_chunk(env, &ch, 200 + (uint64_t)i, 2 * MiB, blob));
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_TRUE(st.bytes <= st.budget_bytes);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    free(blob);
    for (int i = 0; i < 2; i++) close(pin.fd_ready[i]), close(pin.fd_done[i]);
    store_env_close(env);
}

static int present(struct store_txn *txn, const struct store_chain *ch, const int32_t *t,
                   size_t n_chunks) {
    struct store_match m;
    if (store_lookup(txn, ch, t, n_chunks * C, &m, NULL) < 0) return -1;
    int k = (int)m.n_chunks;
    store_match_done(&m);
    return k;
}

TEST(leaves_first) {
    /* 24 MiB budget: three prompts of 8 chunks × 1 MiB fit (high water 21.6 MiB) only
     * until the third one is written */
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("leaves", 24 * MiB, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    int32_t a[8 * C], b[8 * C], c[8 * C];
    store_test_tokens(a, ARRAY_SIZE(a), 1);
    store_test_tokens(b, ARRAY_SIZE(b), 2);
    store_test_tokens(c, ARRAY_SIZE(c), 3);
    ASSERT_OK(store_test_write_prompt(env, &ch, a, ARRAY_SIZE(a), MiB - 4096, 1));
    ASSERT_OK(store_test_write_prompt(env, &ch, b, ARRAY_SIZE(b), MiB - 4096, 2));
    /* a is used again: b is now the least recently used */
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_EQ(present(txn, &ch, a, 8), 8);
    store_txn_abort(txn);
    ASSERT_OK(store_test_write_prompt(env, &ch, c, ARRAY_SIZE(c), MiB - 4096, 3));

    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    int ka = present(txn, &ch, a, 8), kb = present(txn, &ch, b, 8), kc = present(txn, &ch, c, 8);
    store_txn_abort(txn);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    printf("  chunks left: a %d, b %d, c %d of 8 (%llu records, %llu evictions)\n", ka, kb, kc,
           (unsigned long long)st.n_entries, (unsigned long long)st.n_evictions);
    ASSERT_EQ(ka, 8);
    ASSERT_EQ(kc, 8);
    ASSERT_TRUE(kb < 8);
    /* b lost its leaves, not its prefix: what is left of b is exactly chunks 0 … kb-1 */
    ASSERT_EQ((long long)st.n_entries, 16 + kb);
    store_env_close(env);
}

TEST(overwrite) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("overwrite", 16 * MiB, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(MiB);
    ASSERT_OK(write_chunk(env, &ch, 1, MiB, blob));
    struct store_stats st1, st2;
    ASSERT_OK(store_env_stats(env, &st1));
    for (int i = 0; i < 10; i++) ASSERT_OK(write_chunk(env, &ch, 1, MiB, blob));
    ASSERT_OK(store_env_stats(env, &st2));
    ASSERT_EQ(st2.n_entries, 1);
    ASSERT_EQ(st2.bytes, st1.bytes);
    ASSERT_EQ(st2.n_evictions, 0);
    free(blob);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    store_env_close(env);
}

TEST_MAIN(T(fill_past_budget), T(too_large), T(map_full), T(leaves_first), T(overwrite))
