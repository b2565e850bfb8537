/* Records: encode, decode and verify; put, get, delete; eviction and refresh (LRU);
 * the per-namespace index, list and purge. */
#include "store/env.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define HEAD_HASHED_BYTES offsetof(struct store_rec_disk, head_hash)
#define TOUCH_MAX_DEPTH 1000000 /* a chain longer than this is a cycle: stop */

static MDB_val mval(const void *p, size_t n) { return (MDB_val){.mv_size = n, .mv_data = (void *)p}; }
static MDB_val kval(const struct store_key *k) { return mval(k->bytes, k->len); }

static int txn_fail(struct store_txn *txn, int rc) {
    int r = store_map_err(txn->env, rc);
    if (txn->mode == STORE_TXN_WRITE && r < 0 && r != ERR_NOT_FOUND) txn->err = r;
    return r;
}

uint64_t store_rec_bytes(const struct store_env *env, size_t value_len) {
    uint64_t ps = env->psize ? env->psize : 4096, pages;
    /* an LMDB overflow run: 16-byte page header, then the value, whole pages */
    if (!u64_align_up((uint64_t)value_len + 16, ps, &pages)) return UINT64_MAX;
    return pages + STORE_INDEX_OVERHEAD;
}

static uint64_t head_hash(const struct store_rec_disk *h, const void *tokens, size_t n_tokens) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, h, HEAD_HASHED_BYTES);
    XXH3_64bits_update(&st, tokens, n_tokens * 4);
    return XXH3_64bits_digest(&st);
}

int store_rec_decode(const MDB_val *key, const MDB_val *val, bool verify_blob,
                     struct store_rec *ret, struct err_detail *d) {
    struct store_rec_disk h;
    if (key->mv_size != 16 && key->mv_size != 32)
        return err_set(d, ERR_STORE_RECORD, "record key of %zu bytes (expected 16 or 32)",
                       key->mv_size);
    if (val->mv_size < sizeof h)
        return err_set(d, ERR_STORE_RECORD, "record of %zu bytes is shorter than its header",
                       val->mv_size);
    memcpy(&h, val->mv_data, sizeof h);
    if (h.magic != STORE_REC_MAGIC)
        return err_set(d, ERR_STORE_RECORD, "record: bad magic 0x%08x at offset 0", h.magic);
    if (h.version != STORE_REC_VERSION)
        return err_set(d, ERR_BAD_VERSION, "record: format version %u at offset 4, expected %u",
                       h.version, STORE_REC_VERSION);
    if (h.header_bytes != sizeof h)
        return err_set(d, ERR_STORE_RECORD, "record: header_bytes %u at offset 8, expected %zu",
                       h.header_bytes, sizeof h);
    if (!((h.kind == STORE_KIND_CHUNK && key->mv_size == 16) ||
          (h.kind == STORE_KIND_TAIL && key->mv_size == 32)))
        return err_set(d, ERR_STORE_RECORD, "record: kind %u at offset 6 under a %zu-byte key",
                       h.kind, key->mv_size);
    uint64_t want;
    if (!u64_mul(h.n_tokens, 4, &want) || !u64_add(want, sizeof h, &want) ||
        !u64_add(want, h.blob_bytes, &want) || want != val->mv_size)
        return err_set(d, ERR_STORE_RECORD,
                       "record: %u tokens (offset 12) and %llu blob bytes (offset 56) do not "
                       "add up to the record's %zu bytes",
                       h.n_tokens, (unsigned long long)h.blob_bytes, val->mv_size);
    const uint8_t *base = val->mv_data;
    const uint8_t *tokens = base + sizeof h, *blob = tokens + (size_t)h.n_tokens * 4;
    if (head_hash(&h, tokens, h.n_tokens) != h.head_hash)
        return err_set(d, ERR_CHECKSUM, "record: header or tokens checksum mismatch (offset 72)");
    if (verify_blob && hash64(blob, h.blob_bytes) != h.blob_hash)
        return err_set(d, ERR_CHECKSUM, "record: blob checksum mismatch (%llu bytes at offset %zu)",
                       (unsigned long long)h.blob_bytes, (size_t)(blob - base));
    memset(ret, 0, sizeof *ret);
    memcpy(ret->key.bytes, key->mv_data, key->mv_size);
    ret->key.len = (uint8_t)key->mv_size;
    ret->kind = h.kind;
    ret->ns_id = hash128_from_bytes(h.ns_id);
    ret->p0 = h.p0;
    ret->n_tokens = h.n_tokens;
    ret->tokens_le = tokens;
    ret->blob = blob;
    ret->blob_bytes = h.blob_bytes;
    ret->created_usec = h.created_usec;
    ret->last_used_usec = h.last_used_usec;
    return 0;
}

int32_t store_rec_token(const struct store_rec *rec, size_t i) {
    int32_t t = 0;
    if (i < rec->n_tokens) memcpy(&t, (const uint8_t *)rec->tokens_le + 4 * i, 4);
    return t;
}

/* ---- small values ----------------------------------------------------------------------- */

int store_info_read(struct store_txn *txn, const struct store_key *key,
                    struct store_info_disk *ret) {
    MDB_val k = kval(key), v;
    int rc = mdb_get(txn->mdb, txn->env->dbi_info, &k, &v);
    if (rc) return txn_fail(txn, rc);
    if (v.mv_size != sizeof *ret) return ERR_STORE_RECORD;
    memcpy(ret, v.mv_data, sizeof *ret);
    return 0;
}

int store_bytes_read(struct store_txn *txn, uint64_t *ret) {
    MDB_val k = mval("bytes", 5), v;
    int rc = mdb_get(txn->mdb, txn->env->dbi_meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        *ret = 0;
        return 0;
    }
    if (rc) return txn_fail(txn, rc);
    if (v.mv_size != 8) return ERR_STORE_RECORD;
    memcpy(ret, v.mv_data, 8);
    return 0;
}

static int bytes_write(struct store_txn *txn, uint64_t bytes) {
    MDB_val k = mval("bytes", 5), v = mval(&bytes, 8);
    int rc = mdb_put(txn->mdb, txn->env->dbi_meta, &k, &v, 0);
    return rc ? txn_fail(txn, rc) : 0;
}

static size_t lru_key(uint8_t *out, uint64_t stamp, uint64_t p0, const struct store_key *key) {
    uint64_t inv = ~p0;
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(stamp >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(inv >> (56 - 8 * i));
    }
    memcpy(out + 16, key->bytes, key->len);
    return 16u + key->len;
}

static size_t nsidx_key(uint8_t *out, const uint8_t ns_id[16], const struct store_key *key) {
    memcpy(out, ns_id, 16);
    memcpy(out + 16, key->bytes, key->len);
    return 16u + key->len;
}

/* ---- delete, evict, refresh -------------------------------------------------------------- */

int store_rec_delete(struct store_txn *txn, const struct store_key *key, uint64_t *ret_bytes) {
    struct store_env *env = txn->env;
    struct store_info_disk info;
    uint8_t buf[16 + 16 + 32];
    int r = store_info_read(txn, key, &info);
    if (r == ERR_NOT_FOUND || r == ERR_STORE_RECORD) {
        /* a record without bookkeeping (should not happen): drop what is there */
        MDB_val k = kval(key);
        int rc = mdb_del(txn->mdb, env->dbi_rec, &k, NULL);
        if (r == ERR_STORE_RECORD) mdb_del(txn->mdb, env->dbi_info, &k, NULL);
        if (rc && rc != MDB_NOTFOUND) return txn_fail(txn, rc);
        return rc == MDB_NOTFOUND ? ERR_NOT_FOUND : 0;
    }
    if (r < 0) return r;
    MDB_val k = kval(key);
    MDB_val lk = mval(buf, lru_key(buf, info.last_used_usec, info.p0, key));
    int rc = mdb_del(txn->mdb, env->dbi_lru, &lk, NULL);
    if (!rc || rc == MDB_NOTFOUND) {
        MDB_val nk = mval(buf, nsidx_key(buf, info.ns_id, key));
        rc = mdb_del(txn->mdb, env->dbi_nsidx, &nk, NULL);
    }
    if (!rc || rc == MDB_NOTFOUND) rc = mdb_del(txn->mdb, env->dbi_info, &k, NULL);
    if (!rc || rc == MDB_NOTFOUND) rc = mdb_del(txn->mdb, env->dbi_rec, &k, NULL);
    if (rc && rc != MDB_NOTFOUND) return txn_fail(txn, rc);
    uint64_t total = 0;
    r = store_bytes_read(txn, &total);
    if (r < 0) return r;
    r = bytes_write(txn, total > info.bytes ? total - info.bytes : 0);
    if (r < 0) return r;
    if (ret_bytes) *ret_bytes = info.bytes;
    return 0;
}

int store_evict_to(struct store_txn *txn, uint64_t target_bytes) {
    struct store_env *env = txn->env;
    uint64_t n = 0, freed = 0;
    int r = 0;
    for (;;) {
        uint64_t total = 0;
        r = store_bytes_read(txn, &total);
        if (r < 0 || total <= target_bytes) break;
        MDB_cursor *c = NULL;
        MDB_val k, v;
        int rc = mdb_cursor_open(txn->mdb, env->dbi_lru, &c);
        if (!rc) rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
        struct store_key key = {0};
        if (!rc && (k.mv_size == 32 || k.mv_size == 48)) {
            key.len = (uint8_t)(k.mv_size - 16);
            memcpy(key.bytes, (uint8_t *)k.mv_data + 16, key.len);
        } else if (!rc) {
            mdb_cursor_del(c, 0); /* a malformed index entry: drop it */
            mdb_cursor_close(c);
            continue;
        }
        if (c) mdb_cursor_close(c);
        if (rc == MDB_NOTFOUND) {
            /* nothing left to evict but the count says otherwise: resynchronize */
            r = bytes_write(txn, 0);
            break;
        }
        if (rc) {
            r = txn_fail(txn, rc);
            break;
        }
        uint64_t b = 0;
        r = store_rec_delete(txn, &key, &b);
        if (r == ERR_NOT_FOUND) {
            /* an index entry without a record: drop it and go on */
            MDB_val lk = {.mv_size = k.mv_size, .mv_data = k.mv_data};
            uint8_t buf[STORE_LRU_KEY_MAX];
            memcpy(buf, k.mv_data, k.mv_size);
            lk.mv_data = buf;
            mdb_del(txn->mdb, env->dbi_lru, &lk, NULL);
            continue;
        }
        if (r < 0) break;
        n++;
        freed += b;
    }
    pthread_mutex_lock(&env->mu);
    env->st.n_evictions += n;
    env->st.n_evicted_bytes += freed;
    pthread_mutex_unlock(&env->mu);
    return r < 0 ? r : 0;
}

/* Sets the stamp of key and of each ancestor to stamp. Ancestors always carry a stamp at
 * least as new as their descendants, so the walk stops at the first one already there. */
int store_touch_chain(struct store_txn *txn, struct store_key key, uint64_t stamp) {
    struct store_env *env = txn->env;
    for (int depth = 0; depth < TOUCH_MAX_DEPTH; depth++) {
        struct store_info_disk info;
        int r = store_info_read(txn, &key, &info);
        if (r == ERR_NOT_FOUND || r == ERR_STORE_RECORD) return 0;
        if (r < 0) return r;
        if (info.last_used_usec >= stamp) return 0;
        uint8_t buf[STORE_LRU_KEY_MAX];
        MDB_val lk = mval(buf, lru_key(buf, info.last_used_usec, info.p0, &key)), empty = {0};
        int rc = mdb_del(txn->mdb, env->dbi_lru, &lk, NULL);
        if (rc && rc != MDB_NOTFOUND) return txn_fail(txn, rc);
        info.last_used_usec = stamp;
        lk = mval(buf, lru_key(buf, stamp, info.p0, &key));
        rc = mdb_put(txn->mdb, env->dbi_lru, &lk, &empty, 0);
        MDB_val k = kval(&key), iv = mval(&info, sizeof info);
        if (!rc) rc = mdb_put(txn->mdb, env->dbi_info, &k, &iv, 0);
        if (rc) return txn_fail(txn, rc);
        key = (struct store_key){.len = 16};
        memcpy(key.bytes, info.parent, 16);
    }
    return 0;
}

int store_pending_apply(struct store_txn *txn) {
    struct store_env *env = txn->env;
    struct pending *list = NULL;
    size_t n = 0;
    pthread_mutex_lock(&env->mu);
    if (env->n_pending && store_fault(env) == 0 &&
        (list = malloc_array(env->n_pending, sizeof *list))) {
        n = env->n_pending;
        memcpy(list, env->pending, n * sizeof *list);
        env->n_pending = 0;
    }
    pthread_mutex_unlock(&env->mu);
    if (!n) return 0;
    /* In a nested transaction: refreshes are hints, and a failure here must not take the
     * caller's write with it. */
    MDB_txn *parent = txn->mdb, *child = NULL;
    int rc = mdb_txn_begin(env->mdb, parent, 0, &child);
    if (rc) {
        free(list);
        return 0;
    }
    txn->mdb = child;
    int r = 0;
    for (size_t i = 0; i < n && r >= 0; i++) {
        if (list[i].op == PENDING_DEL) {
            r = store_rec_delete(txn, &list[i].key, NULL);
            if (r == ERR_NOT_FOUND) r = 0;
        } else {
            r = store_touch_chain(txn, list[i].key, list[i].stamp);
        }
    }
    txn->mdb = parent;
    txn->err = 0;
    if (r >= 0 && mdb_txn_commit(child) == 0) child = NULL;
    if (child) mdb_txn_abort(child);
    free(list);
    return 0;
}

/* ---- put --------------------------------------------------------------------------------- */

/* Checks a put and computes its value length and accounted bytes. */
static int put_check(const struct store_env *env, const struct store_put *p, size_t *ret_len,
                     uint64_t *ret_bytes, struct err_detail *d) {
    if (!p || !p->chain) return err_set(d, ERR_INVALID, "store_put: no record or chain");
    uint32_t C = p->chain->chunk_tokens;
    if (C == 0 || C > STORE_MAX_CHUNK_TOKENS)
        return err_set(d, ERR_INVALID, "store_put: chain.chunk_tokens %u out of range", C);
    if (p->kind == STORE_KIND_CHUNK) {
        if (p->n_tokens != C)
            return err_set(d, ERR_INVALID, "store_put: a chunk holds %u tokens, got n_tokens %u",
                           C, p->n_tokens);
    } else if (p->kind == STORE_KIND_TAIL) {
        if (p->n_tokens == 0 || p->n_tokens >= C)
            return err_set(d, ERR_INVALID, "store_put: a tail holds 1 … %u tokens, got %u", C - 1,
                           p->n_tokens);
    } else {
        return err_set(d, ERR_INVALID, "store_put: kind %d is neither chunk nor tail", p->kind);
    }
    if (!p->tokens) return err_set(d, ERR_INVALID, "store_put: tokens is NULL");
    if (p->blob_bytes && !p->blob) return err_set(d, ERR_INVALID, "store_put: blob is NULL");
    if (p->p0 % C != 0)
        return err_set(d, ERR_INVALID, "store_put: p0 %llu is not a multiple of the chunk size %u",
                       (unsigned long long)p->p0, C);
    size_t len;
    if (!size_add(sizeof(struct store_rec_disk), (size_t)p->n_tokens * 4, &len) ||
        !size_add(len, p->blob_bytes, &len) || len > 0xFFFFFFFFull * 1024)
        return err_set(d, ERR_OVERFLOW, "store_put: record size overflows");
    uint64_t bytes = store_rec_bytes(env, len);
    if (bytes > env->budget)
        return err_set(d, ERR_STORE_FULL,
                       "store_put: a record of %zu bytes (%llu with its pages and index) is "
                       "larger than the byte budget of %llu bytes",
                       len, (unsigned long long)bytes, (unsigned long long)env->budget);
    *ret_len = len;
    *ret_bytes = bytes;
    return 0;
}

int store_put(struct store_txn *txn, const struct store_put *p, struct store_key *ret_key,
              struct err_detail *d) {
    if (!txn) return err_set(d, ERR_INVALID, "store_put: no transaction");
    struct store_env *env = txn->env;
    if (txn->mode != STORE_TXN_WRITE)
        return err_set(d, ERR_INVALID, "store_put needs a write transaction");
    if (txn->err < 0) return err_set(d, txn->err, "store_put: the transaction already failed");
    size_t len;
    uint64_t bytes;
    int r = put_check(env, p, &len, &bytes, d);
    if (r < 0) return r;
    struct store_key key = p->kind == STORE_KIND_CHUNK
                               ? store_key_chunk(store_chain_next(p->parent, p->tokens, p->n_tokens))
                               : store_key_tail(p->parent, p->tokens, p->n_tokens);
    if ((r = store_fault(env)) < 0) goto fail;

    /* an overwrite replaces the record and its bookkeeping */
    r = store_rec_delete(txn, &key, NULL);
    if (r < 0 && r != ERR_NOT_FOUND) goto fail;
    uint64_t total = 0;
    if ((r = store_bytes_read(txn, &total)) < 0) goto fail;
    if (total + bytes > env->high) {
        r = store_evict_to(txn, env->low > bytes ? env->low - bytes : 0);
        if (r < 0) goto fail;
        if ((r = store_bytes_read(txn, &total)) < 0) goto fail;
    }

    uint64_t now = time_wall_usec();
    struct store_rec_disk h = {
        .magic = STORE_REC_MAGIC,
        .version = STORE_REC_VERSION,
        .kind = (uint16_t)p->kind,
        .header_bytes = sizeof h,
        .n_tokens = p->n_tokens,
        .p0 = p->p0,
        .created_usec = now,
        .last_used_usec = now,
        .blob_bytes = p->blob_bytes,
        .blob_hash = hash64(p->blob, p->blob_bytes),
    };
    hash128_to_bytes(p->chain->ns_id, h.ns_id);
    h.head_hash = head_hash(&h, p->tokens, p->n_tokens);

    txn->put_bytes += bytes;
    MDB_val k = kval(&key), v = {.mv_size = len};
    int rc = mdb_put(txn->mdb, env->dbi_rec, &k, &v, MDB_RESERVE);
    if (rc) {
        r = txn_fail(txn, rc);
        goto fail;
    }
    uint8_t *dst = v.mv_data;
    memcpy(dst, &h, sizeof h);
    memcpy(dst + sizeof h, p->tokens, (size_t)p->n_tokens * 4);
    if (p->blob_bytes) memcpy(dst + sizeof h + (size_t)p->n_tokens * 4, p->blob, p->blob_bytes);

    struct store_info_disk info = {
        .last_used_usec = txn->stamp,
        .created_usec = now,
        .bytes = bytes,
        .p0 = p->p0,
        .n_tokens = p->n_tokens,
        .kind = (uint16_t)p->kind,
        .version = STORE_REC_VERSION,
    };
    memcpy(info.ns_id, h.ns_id, 16);
    hash128_to_bytes(p->parent, info.parent);
    uint8_t buf[STORE_LRU_KEY_MAX];
    MDB_val iv = mval(&info, sizeof info), empty = {0};
    rc = mdb_put(txn->mdb, env->dbi_info, &k, &iv, 0);
    if (!rc) {
        MDB_val lk = mval(buf, lru_key(buf, txn->stamp, p->p0, &key));
        rc = mdb_put(txn->mdb, env->dbi_lru, &lk, &empty, 0);
    }
    if (!rc) {
        MDB_val nk = mval(buf, nsidx_key(buf, h.ns_id, &key));
        rc = mdb_put(txn->mdb, env->dbi_nsidx, &nk, &empty, 0);
    }
    if (!rc) {
        MDB_val nk = mval(h.ns_id, 16), nv = mval(p->chain->ns, strlen(p->chain->ns));
        rc = mdb_put(txn->mdb, env->dbi_ns, &nk, &nv, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) rc = 0;
    }
    if (rc) {
        r = txn_fail(txn, rc);
        goto fail;
    }
    if ((r = bytes_write(txn, total + bytes)) < 0) goto fail;
    /* the prefix this record hangs from is as fresh as the record, and evicted after it */
    struct store_key parent = {.len = 16};
    hash128_to_bytes(p->parent, parent.bytes);
    if ((r = store_touch_chain(txn, parent, txn->stamp)) < 0) goto fail;
    if (ret_key) *ret_key = key;
    return 0;
fail:
    if (txn->err == 0) txn->err = r;
    return err_set(d, r, "store_put: %s", err_str(r));
}

int store_write(struct store_env *env, const struct store_put *p, struct store_key *ret_key,
                struct err_detail *d) {
    if (!env) return err_set(d, ERR_INVALID, "store_write: no env");
    size_t len;
    uint64_t bytes;
    int r = put_check(env, p, &len, &bytes, d);
    for (int attempt = 0; r >= 0 && attempt < 4; attempt++) {
        struct store_txn *txn = NULL;
        r = store_txn_begin(env, STORE_TXN_WRITE, &txn);
        if (r < 0) {
            err_set(d, r, "store_write: begin: %s", err_str(r));
            break;
        }
        r = store_put(txn, p, ret_key, d);
        if (r < 0)
            store_txn_abort(txn);
        else if ((r = store_txn_commit(txn)) < 0)
            err_set(d, r, "store_write: commit: %s", err_str(r));
        if (r != ERR_STORE_FULL) break;
        /* The map is full although the budget is not: free pages are pinned by readers
         * or fragmented. Clear dead readers and evict more, committed on its own so the
         * freed pages are reusable by the retry. */
        store_env_check_readers(env, NULL);
        struct store_txn *ev = NULL;
        if (store_txn_begin(env, STORE_TXN_WRITE, &ev) == 0) {
            if (store_evict_to(ev, attempt == 0 ? env->low / 2 : attempt == 1 ? env->low / 8 : 0) < 0)
                store_txn_abort(ev);
            else
                store_txn_commit(ev);
        }
    }
    if (r == -ENOSPC) store_no_space_detail(env, d);
    pthread_mutex_lock(&env->mu);
    env->st.n_writes++;
    if (r < 0) env->st.n_write_errors++;
    if (r == -ENOSPC) env->st.n_no_space++;
    pthread_mutex_unlock(&env->mu);
    return r < 0 ? r : 0;
}

/* ---- get, delete -------------------------------------------------------------------------- */

int store_get(struct store_txn *txn, const struct store_key *key, struct store_rec *ret,
              struct err_detail *d) {
    if (!txn || !key || !ret || (key->len != 16 && key->len != 32))
        return err_set(d, ERR_INVALID, "store_get: bad arguments");
    MDB_val k = kval(key), v;
    int rc = mdb_get(txn->mdb, txn->env->dbi_rec, &k, &v);
    if (rc) return err_set(d, txn_fail(txn, rc), "store_get: %s", mdb_strerror(rc));
    struct store_rec rec;
    int r = store_rec_decode(&k, &v, true, &rec, d);
    if (r < 0) return r;
    struct store_info_disk info;
    if (store_info_read(txn, key, &info) == 0) {
        rec.last_used_usec = info.last_used_usec;
        rec.bytes = info.bytes;
    }
    *ret = rec;
    return 0;
}

int store_del(struct store_txn *txn, const struct store_key *key) {
    if (!txn || !key || (key->len != 16 && key->len != 32)) return ERR_INVALID;
    if (txn->mode != STORE_TXN_WRITE) return ERR_INVALID;
    return store_rec_delete(txn, key, NULL);
}

/* ---- list and purge ------------------------------------------------------------------------ */

static int ns_name(struct store_txn *txn, const uint8_t ns_id[16], char *out, size_t n) {
    MDB_val k = mval(ns_id, 16), v;
    out[0] = 0;
    int rc = mdb_get(txn->mdb, txn->env->dbi_ns, &k, &v);
    if (rc) return rc == MDB_NOTFOUND ? 0 : txn_fail(txn, rc);
    size_t m = MIN(v.mv_size, n - 1);
    memcpy(out, v.mv_data, m);
    out[m] = 0;
    return 0;
}

static int list_one(struct store_txn *txn, const struct store_key *key, char *ns_buf,
                    int (*fn)(const struct store_entry *, void *), void *userdata) {
    struct store_info_disk info;
    int r = store_info_read(txn, key, &info);
    if (r == ERR_NOT_FOUND || r == ERR_STORE_RECORD) return 0;
    if (r < 0) return r;
    if ((r = ns_name(txn, info.ns_id, ns_buf, 128)) < 0) return r;
    struct store_entry e = {
        .key = *key,
        .kind = info.kind,
        .ns_id = hash128_from_bytes(info.ns_id),
        .ns = ns_buf,
        .p0 = info.p0,
        .n_tokens = info.n_tokens,
        .bytes = info.bytes,
        .created_usec = info.created_usec,
        .last_used_usec = info.last_used_usec,
    };
    return fn(&e, userdata);
}

int store_list(struct store_txn *txn, const char *ns,
               int (*fn)(const struct store_entry *e, void *userdata), void *userdata) {
    if (!txn || !fn) return ERR_INVALID;
    struct store_env *env = txn->env;
    uint8_t id[16];
    if (ns) hash128_to_bytes(store_ns_id(ns), id);
    MDB_cursor *c = NULL;
    int rc = mdb_cursor_open(txn->mdb, ns ? env->dbi_nsidx : env->dbi_info, &c);
    if (rc) return txn_fail(txn, rc);
    char ns_buf[128];
    MDB_val k = mval(id, 16), v;
    int r = 0;
    rc = mdb_cursor_get(c, &k, &v, ns ? MDB_SET_RANGE : MDB_FIRST);
    while (!rc && r >= 0) {
        struct store_key key = {0};
        if (ns) {
            if (k.mv_size < 16 || memcmp(k.mv_data, id, 16) != 0) break;
            if (k.mv_size == 32 || k.mv_size == 48) {
                key.len = (uint8_t)(k.mv_size - 16);
                memcpy(key.bytes, (uint8_t *)k.mv_data + 16, key.len);
            }
        } else if (k.mv_size == 16 || k.mv_size == 32) {
            key.len = (uint8_t)k.mv_size;
            memcpy(key.bytes, k.mv_data, key.len);
        }
        if (key.len) r = list_one(txn, &key, ns_buf, fn, userdata);
        if (r >= 0) rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (r < 0) return r;
    return rc && rc != MDB_NOTFOUND ? txn_fail(txn, rc) : 0;
}

struct ns_sum {
    uint64_t n, bytes;
};
static int ns_sum_fn(const struct store_entry *e, void *u) {
    struct ns_sum *s = u;
    s->n++;
    s->bytes += e->bytes;
    return 0;
}

int store_ns_list(struct store_txn *txn,
                  int (*fn)(const char *ns, uint64_t n_entries, uint64_t bytes, void *userdata),
                  void *userdata) {
    if (!txn || !fn) return ERR_INVALID;
    MDB_cursor *c = NULL;
    int rc = mdb_cursor_open(txn->mdb, txn->env->dbi_ns, &c);
    if (rc) return txn_fail(txn, rc);
    MDB_val k, v;
    int r = 0;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc && r >= 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        char name[128];
        size_t m = MIN(v.mv_size, sizeof name - 1);
        memcpy(name, v.mv_data, m);
        name[m] = 0;
        struct ns_sum s = {0};
        r = store_list(txn, name, ns_sum_fn, &s);
        if (r >= 0 && s.n) r = fn(name, s.n, s.bytes, userdata);
    }
    mdb_cursor_close(c);
    if (r < 0) return r;
    return rc && rc != MDB_NOTFOUND ? txn_fail(txn, rc) : 0;
}

static int purge_all(struct store_txn *txn, uint64_t *ret_n) {
    struct store_env *env = txn->env;
    MDB_stat ms;
    int rc = mdb_stat(txn->mdb, env->dbi_rec, &ms);
    MDB_dbi dbis[] = {env->dbi_rec, env->dbi_info, env->dbi_lru, env->dbi_nsidx, env->dbi_ns};
    for (size_t i = 0; i < ARRAY_SIZE(dbis) && !rc; i++) rc = mdb_drop(txn->mdb, dbis[i], 0);
    if (rc) return txn_fail(txn, rc);
    if (ret_n) *ret_n = ms.ms_entries;
    return bytes_write(txn, 0);
}

static int purge_ns(struct store_txn *txn, const char *ns, uint64_t *ret_n) {
    struct store_env *env = txn->env;
    uint8_t id[16];
    hash128_to_bytes(store_ns_id(ns), id);
    uint64_t n = 0;
    for (;;) {
        /* re-seek after every deletion: the cursor is invalidated by it */
        MDB_cursor *c = NULL;
        MDB_val k = mval(id, 16), v;
        int rc = mdb_cursor_open(txn->mdb, env->dbi_nsidx, &c);
        if (!rc) rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
        struct store_key key = {0};
        uint8_t idx[STORE_LRU_KEY_MAX];
        size_t idx_len = 0;
        bool mine = !rc && k.mv_size >= 16 && memcmp(k.mv_data, id, 16) == 0;
        if (mine) {
            idx_len = MIN(k.mv_size, sizeof idx);
            memcpy(idx, k.mv_data, idx_len);
            if (k.mv_size == 32 || k.mv_size == 48) {
                key.len = (uint8_t)(k.mv_size - 16);
                memcpy(key.bytes, (uint8_t *)k.mv_data + 16, key.len);
            }
        }
        if (c) mdb_cursor_close(c);
        if (rc && rc != MDB_NOTFOUND) return txn_fail(txn, rc);
        if (!mine) break;
        int r = key.len ? store_rec_delete(txn, &key, NULL) : ERR_NOT_FOUND;
        if (r == ERR_NOT_FOUND) {
            MDB_val ik = mval(idx, idx_len);
            rc = mdb_del(txn->mdb, env->dbi_nsidx, &ik, NULL);
            if (rc) return txn_fail(txn, rc);
            continue;
        }
        if (r < 0) return r;
        n++;
    }
    MDB_val nk = mval(id, 16);
    int rc = mdb_del(txn->mdb, env->dbi_ns, &nk, NULL);
    if (rc && rc != MDB_NOTFOUND) return txn_fail(txn, rc);
    if (ret_n) *ret_n = n;
    return 0;
}

int store_purge(struct store_env *env, const char *ns, uint64_t *ret_n) {
    if (!env) return ERR_INVALID;
    struct store_txn *txn = NULL;
    int r = store_txn_begin(env, STORE_TXN_WRITE, &txn);
    if (r < 0) return r;
    r = ns ? purge_ns(txn, ns, ret_n) : purge_all(txn, ret_n);
    if (r < 0) {
        store_txn_abort(txn);
        return r;
    }
    return store_txn_commit(txn);
}
