/* Chain semantics: keys, longest prefix, tails, planted and damaged records, namespaces. */
#include "store-test.h"

static const uint8_t FP_A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t FP_B[16] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
#define C 16u
#define BLOB 9000u /* larger than a page: the record lives in an overflow run */

TEST(keys) {
    struct store_chain a, b, c, d;
    ASSERT_OK(store_chain_init(&a, "uid:1000", FP_A, 1, 1, C));
    ASSERT_OK(store_chain_init(&b, "uid:1001", FP_A, 1, 1, C));
    ASSERT_OK(store_chain_init(&c, "uid:1000", FP_B, 1, 1, C));
    ASSERT_OK(store_chain_init(&d, "uid:1000", FP_A, 1, 8, C));
    ASSERT_TRUE(!hash128_eq(a.h0, b.h0) && !hash128_eq(a.h0, c.h0) && !hash128_eq(a.h0, d.h0));
    /* h0 is XXH3-128 of the documented byte string, nothing else */
    uint8_t buf[64];
    size_t o = 0;
    memcpy(buf, "warm-store-h0", 14);
    o = 14;
    uint32_t len = 8, tk = 1, tv = 1;
    memcpy(buf + o, &len, 4), o += 4;
    memcpy(buf + o, "uid:1000", 8), o += 8;
    memcpy(buf + o, FP_A, 16), o += 16;
    memcpy(buf + o, &tk, 4), o += 4;
    memcpy(buf + o, &tv, 4), o += 4;
    ASSERT_TRUE(hash128_eq(a.h0, hash128(buf, o)));
    /* h1 = XXH3-128(canonical h0 ‖ tokens LE) */
    int32_t t[C];
    store_test_tokens(t, C, 1);
    uint8_t hb[16 + 4 * C];
    hash128_to_bytes(a.h0, hb);
    memcpy(hb + 16, t, sizeof t);
    struct hash128 h1 = store_chain_next(a.h0, t, C);
    ASSERT_TRUE(hash128_eq(h1, hash128(hb, sizeof hb)));
    /* long chunks go through the same function */
    int32_t *big = malloc(5000 * 4);
    store_test_tokens(big, 5000, 2);
    uint8_t *bb = malloc(16 + 5000 * 4);
    hash128_to_bytes(h1, bb);
    memcpy(bb + 16, big, 5000 * 4);
    ASSERT_TRUE(hash128_eq(store_chain_next(h1, big, 5000), hash128(bb, 16 + 5000 * 4)));
    free(big);
    free(bb);
    struct store_key k = store_key_tail(h1, t, 3);
    ASSERT_EQ(k.len, 32);
    char hex[65];
    store_key_to_hex(&k, hex);
    ASSERT_EQ(strlen(hex), 64);
    ASSERT_ERR(store_chain_init(&a, "", FP_A, 1, 1, C), ERR_INVALID);
    ASSERT_ERR(store_chain_init(&a, "x", FP_A, 1, 1, 0), ERR_INVALID);
}

static int blob_is(const struct store_rec *r, uint64_t seed) {
    uint8_t *want = malloc(r->blob_bytes);
    store_test_fill(want, r->blob_bytes, seed);
    int same = memcmp(want, r->blob, r->blob_bytes) == 0;
    free(want);
    return same;
}

TEST(longest_prefix) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("prefix", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t a[4 * C + 5], b[4 * C + 5];
    store_test_tokens(a, ARRAY_SIZE(a), 10);
    memcpy(b, a, sizeof b);
    b[2 * C + 3] ^= 1; /* b shares chunks 0 and 1 with a, then differs */
    ASSERT_OK(store_test_write_prompt(env, &ch, a, ARRAY_SIZE(a), BLOB, 1));

    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, a, ARRAY_SIZE(a), &m, NULL));
    ASSERT_EQ(m.n_chunks, 4);
    ASSERT_TRUE(m.has_tail);
    ASSERT_EQ(m.tail.n_tokens, 5);
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(a));
    for (size_t i = 0; i < m.n_chunks; i++) {
        ASSERT_EQ(m.chunks[i].p0, i * C);
        ASSERT_TRUE(blob_is(&m.chunks[i], 1000 + i));
        ASSERT_EQ(store_rec_token(&m.chunks[i], 3), a[i * C + 3]);
    }
    ASSERT_TRUE(blob_is(&m.tail, 1000 + 999));
    store_match_done(&m);

    ASSERT_OK(store_lookup(txn, &ch, b, ARRAY_SIZE(b), &m, NULL));
    ASSERT_EQ(m.n_chunks, 2);
    ASSERT_TRUE(!m.has_tail);
    ASSERT_EQ(m.n_tokens, 2 * C);
    ASSERT_EQ(m.n_rejected, 0);
    /* h is the parent of b's next record */
    struct hash128 h = store_chain_next(store_chain_next(ch.h0, b, C), b + C, C);
    ASSERT_TRUE(hash128_eq(m.h, h));
    store_match_done(&m);

    /* a prompt shorter than one chunk finds nothing but tails under h0 */
    ASSERT_OK(store_lookup(txn, &ch, a, C - 1, &m, NULL));
    ASSERT_EQ(m.n_tokens, 0);
    store_match_done(&m);
    store_txn_abort(txn);

    /* b's own chunks coexist with a's */
    ASSERT_OK(store_test_write_prompt(env, &ch, b, ARRAY_SIZE(b), BLOB, 2));
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, b, ARRAY_SIZE(b), &m, NULL));
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(b));
    ASSERT_TRUE(blob_is(&m.chunks[0], 2000)); /* overwritten by the second write */
    ASSERT_TRUE(blob_is(&m.chunks[3], 2003));
    store_match_done(&m);
    ASSERT_OK(store_lookup(txn, &ch, a, ARRAY_SIZE(a), &m, NULL));
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(a));
    ASSERT_TRUE(blob_is(&m.chunks[3], 1003));
    store_match_done(&m);
    store_txn_abort(txn);

    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_chunks, 6); /* 4 of a, chunks 2 and 3 of b */
    ASSERT_EQ(st.n_tails, 2);
    ASSERT_EQ(st.n_hits, 4);
    ASSERT_EQ(st.n_misses, 1);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_EQ(rep.n_records, 8);
    store_env_close(env);
}

TEST(tail_exact_end) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("tail", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t t[3 * C + 7];
    store_test_tokens(t, ARRAY_SIZE(t), 20);
    /* the conversation at two moments: 3 chunks + 3 tokens, then 3 chunks + 7 tokens */
    ASSERT_OK(store_test_write_prompt(env, &ch, t, 3 * C + 3, BLOB, 3));
    ASSERT_OK(store_test_write_prompt(env, &ch, t, 3 * C + 7, BLOB, 4));
    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(t)); /* resumes to the exact end */
    ASSERT_EQ(m.tail.n_tokens, 7);
    ASSERT_EQ(m.tail.p0, 3 * C);
    ASSERT_TRUE(blob_is(&m.tail, 4999));
    store_match_done(&m);
    /* a prompt that ends after 5 tail tokens takes the 3-token tail */
    ASSERT_OK(store_lookup(txn, &ch, t, 3 * C + 5, &m, NULL));
    ASSERT_EQ(m.n_tokens, 3 * C + 3);
    ASSERT_TRUE(blob_is(&m.tail, 3999));
    store_match_done(&m);
    /* a different continuation gets the chunks only */
    int32_t u[3 * C + 7];
    memcpy(u, t, sizeof u);
    u[3 * C] ^= 1;
    ASSERT_OK(store_lookup(txn, &ch, u, ARRAY_SIZE(u), &m, NULL));
    ASSERT_EQ(m.n_tokens, 3 * C);
    ASSERT_TRUE(!m.has_tail);
    ASSERT_EQ(m.n_rejected, 0);
    store_match_done(&m);
    store_txn_abort(txn);
    store_env_close(env);
}

/* Copies the record under from to key to (or, with flip_at >= 0, flips one bit of the
 * record under from in place), with plain LMDB. */
static int raw_edit(const char *dir, const struct store_key *from, const struct store_key *to,
                    long flip_at) {
    MDB_env *e = NULL;
    MDB_dbi rec;
    int rc = store_test_raw_open(dir, &e, &rec);
    MDB_txn *t = NULL;
    if (!rc) rc = mdb_txn_begin(e, NULL, 0, &t);
    MDB_val k = {from->len, (void *)from->bytes}, v;
    if (!rc) rc = mdb_get(t, rec, &k, &v);
    if (!rc) {
        uint8_t *copy = malloc(v.mv_size);
        memcpy(copy, v.mv_data, v.mv_size);
        if (flip_at >= 0) copy[flip_at] ^= 0x10;
        MDB_val nk = to ? (MDB_val){to->len, (void *)to->bytes} : k, nv = {v.mv_size, copy};
        rc = mdb_put(t, rec, &nk, &nv, 0);
        free(copy);
    }
    if (!rc) rc = mdb_txn_commit(t);
    else if (t)
        mdb_txn_abort(t);
    mdb_env_close(e);
    return rc;
}

TEST(many_tails) {
    /* a shared prefix followed by 150 different conversations: the right tail is found
     * among them (the lookup probes keys instead of scanning) */
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("many-tails", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t t[C + 9];
    store_test_tokens(t, ARRAY_SIZE(t), 80);
    ASSERT_OK(store_test_write_prompt(env, &ch, t, C, BLOB, 10));
    struct hash128 h = store_chain_next(ch.h0, t, C);
    uint8_t small[100];
    for (int i = 0; i < 150; i++) {
        int32_t u[9];
        store_test_tokens(u, 9, 1000 + (uint64_t)i);
        store_test_fill(small, sizeof small, (uint64_t)i);
        struct store_put p = {.chain = &ch, .kind = STORE_KIND_TAIL, .parent = h, .p0 = C,
                              .tokens = i == 77 ? t + C : u, .n_tokens = 1 + (uint32_t)(i % 9),
                              .blob = small, .blob_bytes = sizeof small};
        if (i == 77) p.n_tokens = 9;
        ASSERT_OK(store_write(env, &p, NULL, NULL));
    }
    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(t));
    ASSERT_TRUE(m.has_tail && m.tail.n_tokens == 9);
    store_match_done(&m);
    store_txn_abort(txn);
    store_env_close(env);
}

TEST(planted_record) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("planted", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t x[C], y[C];
    store_test_tokens(x, C, 30);
    store_test_tokens(y, C, 31);
    ASSERT_OK(store_test_write_prompt(env, &ch, x, C, BLOB, 5));
    store_env_close(env);
    /* the record of x, planted under y's key (as a hash collision would) */
    struct store_key kx = store_key_chunk(store_chain_next(ch.h0, x, C));
    struct store_key ky = store_key_chunk(store_chain_next(ch.h0, y, C));
    ASSERT_EQ(raw_edit(store_test_dir("planted"), &kx, &ky, -1), 0);

    ASSERT_OK(store_test_open("planted", 64 << 20, &env, NULL));
    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, y, C, &m, NULL));
    ASSERT_EQ(m.n_tokens, 0);
    ASSERT_EQ(m.n_rejected, 1);
    ASSERT_ERR(m.first_reject, ERR_STATE_TOKENS);
    store_match_done(&m);
    ASSERT_OK(store_lookup(txn, &ch, x, C, &m, NULL));
    ASSERT_EQ(m.n_chunks, 1);
    store_match_done(&m);
    store_txn_abort(txn);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_rejections, 1);
    ASSERT_ERR(st.rejections[0].reason, ERR_STATE_TOKENS);
    store_env_close(env);
}

TEST(flipped_bit) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("flip", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t x[2 * C];
    store_test_tokens(x, ARRAY_SIZE(x), 40);
    ASSERT_OK(store_test_write_prompt(env, &ch, x, ARRAY_SIZE(x), BLOB, 6));
    store_env_close(env);
    /* flip a bit in the middle of chunk 1's blob */
    struct hash128 h1 = store_chain_next(ch.h0, x, C);
    struct store_key k1 = store_key_chunk(store_chain_next(h1, x + C, C));
    ASSERT_EQ(raw_edit(store_test_dir("flip"), &k1, NULL,
                       (long)sizeof(struct store_rec_disk) + 4 * C + BLOB / 2),
              0);

    ASSERT_OK(store_test_open("flip", 64 << 20, &env, NULL));
    struct store_check_report rep;
    ASSERT_ERR(store_env_check(env, &rep), ERR_STORE_CORRUPT);
    ASSERT_EQ(rep.n_checksum_failures, 1);
    ASSERT_TRUE(rep.structure_ok);
    struct store_txn *txn = NULL;
    struct store_match m;
    struct store_rec rec;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_ERR(store_get(txn, &k1, &rec, NULL), ERR_CHECKSUM);
    ASSERT_OK(store_lookup(txn, &ch, x, ARRAY_SIZE(x), &m, NULL));
    ASSERT_EQ(m.n_chunks, 1); /* the walk stops before the damaged record */
    ASSERT_ERR(m.first_reject, ERR_CHECKSUM);
    store_match_done(&m);
    store_txn_abort(txn);
    /* the refused record is deleted by the next write (here: a flush) */
    ASSERT_OK(store_env_flush(env));
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_EQ(rep.n_records, 1);
    store_env_close(env);
}

static int count_fn(const struct store_entry *e, void *u) {
    (*(int *)u)++;
    return 0;
}
static int ns_fn(const char *ns, uint64_t n, uint64_t bytes, void *u) {
    (*(int *)u)++;
    return 0;
}

TEST(namespaces) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("ns", 64 << 20, &env, NULL));
    struct store_chain a, b, other_model;
    ASSERT_OK(store_chain_init(&a, "uid:1000", FP_A, 1, 1, C));
    ASSERT_OK(store_chain_init(&b, "uid:1001", FP_A, 1, 1, C));
    ASSERT_OK(store_chain_init(&other_model, "uid:1000", FP_B, 1, 1, C));
    int32_t t[3 * C + 2];
    store_test_tokens(t, ARRAY_SIZE(t), 50);
    ASSERT_OK(store_test_write_prompt(env, &a, t, ARRAY_SIZE(t), BLOB, 7));

    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &b, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, 0); /* B sends A's exact prompt: no hit */
    store_match_done(&m);
    ASSERT_OK(store_lookup(txn, &other_model, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, 0);
    store_match_done(&m);
    store_txn_abort(txn);

    /* even A's record planted under B's key is refused: the header names A's namespace */
    store_env_close(env);
    struct store_key ka = store_key_chunk(store_chain_next(a.h0, t, C));
    struct store_key kb = store_key_chunk(store_chain_next(b.h0, t, C));
    ASSERT_EQ(raw_edit(store_test_dir("ns"), &ka, &kb, -1), 0);
    ASSERT_OK(store_test_open("ns", 64 << 20, &env, NULL));
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &b, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, 0);
    ASSERT_EQ(m.n_rejected, 1);
    store_match_done(&m);
    store_txn_abort(txn);
    ASSERT_OK(store_env_flush(env)); /* deletes the planted record */

    ASSERT_OK(store_test_write_prompt(env, &b, t, 2 * C, BLOB, 8));
    int n_a = 0, n_b = 0, n_all = 0, n_ns = 0;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_list(txn, "uid:1000", count_fn, &n_a));
    ASSERT_OK(store_list(txn, "uid:1001", count_fn, &n_b));
    ASSERT_OK(store_list(txn, NULL, count_fn, &n_all));
    ASSERT_OK(store_ns_list(txn, ns_fn, &n_ns));
    store_txn_abort(txn);
    ASSERT_EQ(n_a, 4);
    ASSERT_EQ(n_b, 2);
    ASSERT_EQ(n_all, 6);
    ASSERT_EQ(n_ns, 2);

    uint64_t n = 0;
    ASSERT_OK(store_purge(env, "uid:1000", &n));
    ASSERT_EQ(n, 4);
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &a, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, 0);
    store_match_done(&m);
    ASSERT_OK(store_lookup(txn, &b, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, 2 * C);
    store_match_done(&m);
    store_txn_abort(txn);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_OK(store_purge(env, NULL, &n));
    ASSERT_EQ(n, 2);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_entries, 0);
    ASSERT_EQ(st.bytes, 0);
    store_env_close(env);
}

TEST(caller_reject) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("reject", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t t[2 * C];
    store_test_tokens(t, ARRAY_SIZE(t), 60);
    ASSERT_OK(store_test_write_prompt(env, &ch, t, ARRAY_SIZE(t), BLOB, 9));
    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_chunks, 2);
    /* the engine refuses chunk 1 (another rotation): reported with its reason */
    store_env_reject(env, &m.chunks[1].key, ERR_STATE_KEY_ROT);
    store_match_done(&m);
    store_txn_abort(txn);
    ASSERT_OK(store_env_flush(env));
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_entries, 1);
    ASSERT_EQ(st.n_rejections, 1);
    ASSERT_ERR(st.rejections[0].reason, ERR_STATE_KEY_ROT);
    store_env_close(env);
}

TEST(bad_arguments) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("args", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1000", FP_A, 1, 1, C));
    int32_t t[C];
    store_test_tokens(t, C, 70);
    uint8_t blob[64] = {0};
    struct err_detail d = {0};
    struct store_put p = {.chain = &ch, .kind = STORE_KIND_CHUNK, .parent = ch.h0,
                          .tokens = t, .n_tokens = C - 1, .blob = blob, .blob_bytes = 64};
    ASSERT_ERR(store_write(env, &p, NULL, &d), ERR_INVALID);
    ASSERT_TRUE(strstr(d.msg, "n_tokens") != NULL);
    p.kind = STORE_KIND_TAIL;
    p.n_tokens = C;
    ASSERT_ERR(store_write(env, &p, NULL, &d), ERR_INVALID);
    p.n_tokens = 3;
    p.p0 = 5;
    ASSERT_ERR(store_write(env, &p, NULL, &d), ERR_INVALID);
    p.p0 = 0;
    ASSERT_OK(store_write(env, &p, NULL, &d));
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_ERR(store_put(txn, &p, NULL, &d), ERR_INVALID);
    struct store_key k = store_key_chunk(ch.h0);
    struct store_rec rec;
    ASSERT_ERR(store_get(txn, &k, &rec, NULL), ERR_NOT_FOUND);
    store_txn_abort(txn);
    store_env_close(env);
}

TEST_MAIN(T(keys), T(longest_prefix), T(tail_exact_end), T(many_tails), T(planted_record), T(flipped_bit),
          T(namespaces), T(caller_reject), T(bad_arguments))
