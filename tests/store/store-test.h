/* Helpers shared by the store tests (header-only; every function is static). */
#pragma once

#include "store/record.h"
#include "store/store.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A directory under the test's tmpdir; fresh for each name. */
static inline const char *store_test_dir(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", test_tmpdir(), name);
    return p;
}

static inline int store_test_open(const char *name, uint64_t budget, struct store_env **ret,
                                  struct store_open_info *info) {
    struct store_options o = {.path = store_test_dir(name), .budget_bytes = budget, .n_threads = 4};
    struct err_detail d = {0};
    int r = store_env_open(&o, ret, info, &d);
    if (r < 0) fprintf(stderr, "store_env_open(%s): %s\n", o.path, err_msg(&d, r));
    return r;
}

static inline uint64_t store_test_rng(uint64_t *s) {
    /* xorshift64*: fast and deterministic */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static inline void store_test_fill(void *buf, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = store_test_rng(&s);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)store_test_rng(&s);
}

static inline void store_test_tokens(int32_t *t, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(store_test_rng(&s) % 32000);
}

/* Writes the whole chain of a prompt (its full chunks and its tail, if any), each chunk
 * with a blob of blob_bytes derived from (seed, chunk index). */
static inline int store_test_write_prompt(struct store_env *env, const struct store_chain *ch,
                                          const int32_t *tokens, size_t n, size_t blob_bytes,
                                          uint64_t seed) {
    uint8_t *blob = malloc(blob_bytes ? blob_bytes : 1);
    if (!blob) return -ENOMEM;
    struct hash128 h = ch->h0;
    uint32_t C = ch->chunk_tokens;
    size_t i = 0;
    int r = 0;
    for (; (i + 1) * C <= n && r >= 0; i++) {
        store_test_fill(blob, blob_bytes, seed * 1000 + i);
        struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = h, .p0 = i * C,
                              .tokens = tokens + i * C, .n_tokens = C, .blob = blob,
                              .blob_bytes = blob_bytes};
        struct err_detail d = {0};
        r = store_write(env, &p, NULL, &d);
        if (r < 0) fprintf(stderr, "store_write chunk %zu: %s\n", i, err_msg(&d, r));
        h = store_chain_next(h, tokens + i * C, C);
    }
    if (r >= 0 && i * C < n) {
        store_test_fill(blob, blob_bytes, seed * 1000 + 999);
        struct store_put p = {.chain = ch, .kind = STORE_KIND_TAIL, .parent = h, .p0 = i * C,
                              .tokens = tokens + i * C, .n_tokens = (uint32_t)(n - i * C),
                              .blob = blob, .blob_bytes = blob_bytes};
        struct err_detail d = {0};
        r = store_write(env, &p, NULL, &d);
        if (r < 0) fprintf(stderr, "store_write tail: %s\n", err_msg(&d, r));
    }
    free(blob);
    return r;
}

/* Opens the environment with plain LMDB (the store must be closed in this process). */
static inline int store_test_raw_open(const char *dir, MDB_env **env, MDB_dbi *rec) {
    int rc = mdb_env_create(env);
    if (!rc) rc = mdb_env_set_maxdbs(*env, 8);
    if (!rc) rc = mdb_env_set_mapsize(*env, 1ull << 30);
    if (!rc) rc = mdb_env_open(*env, dir, MDB_NOTLS, 0600);
    MDB_txn *t = NULL;
    if (!rc) rc = mdb_txn_begin(*env, NULL, 0, &t);
    if (!rc) rc = mdb_dbi_open(t, STORE_DB_REC, 0, rec);
    if (!rc) rc = mdb_txn_commit(t);
    else if (t)
        mdb_txn_abort(t);
    return rc;
}
