/* Lookup: walk the chain of a prompt while records exist and verify, then pick the
 * longest tail that matches the tokens that follow. */
#include "store/env.h"

#include <errno.h>
#include <string.h>

/* Reads and verifies the record under key against the prompt's tokens. 0 ok,
 * ERR_NOT_FOUND, or the reason it was refused. */
static int rec_verify(struct store_txn *txn, const struct store_chain *chain,
                      const struct store_key *key, enum store_kind kind, uint64_t p0,
                      const int32_t *tokens, uint32_t n_tokens, struct store_rec *ret) {
    MDB_val k = {.mv_size = key->len, .mv_data = (void *)key->bytes}, v;
    int rc = mdb_get(txn->mdb, txn->env->dbi_rec, &k, &v);
    if (rc) return store_map_err(txn->env, rc);
    struct store_rec rec;
    int r = store_rec_decode(&k, &v, false, &rec, NULL);
    if (r < 0) return r;
    /* never trust the hash: the record must hold exactly these tokens, at this place, in
     * this namespace */
    if (rec.kind != kind || rec.n_tokens != n_tokens || rec.p0 != p0 ||
        memcmp(rec.tokens_le, tokens, (size_t)n_tokens * 4) != 0)
        return ERR_STATE_TOKENS;
    if (!hash128_eq(rec.ns_id, chain->ns_id)) return ERR_STATE_TOKENS;
    r = store_rec_decode(&k, &v, true, &rec, NULL);
    if (r < 0) return r;
    struct store_info_disk info;
    if (store_info_read(txn, key, &info) == 0) {
        rec.last_used_usec = info.last_used_usec;
        rec.bytes = info.bytes;
    }
    *ret = rec;
    return 0;
}

static void reject(struct store_txn *txn, struct store_match *m, const struct store_key *key,
                   int reason) {
    store_count_reject(txn->env, reason);
    store_queue(txn->env, key, 0, PENDING_DEL);
    if (!m->n_rejected++) m->first_reject = reason;
}

/* The best tail under parent h for tokens[0 … n): the longest whose tokens match. A
 * handful of tails (other turns of other conversations) are scanned; when there are
 * more than fit in cand[], the keys of every possible tail length are probed instead,
 * longest first. */
static int find_tail(struct store_txn *txn, const struct store_chain *chain, struct hash128 h,
                     uint64_t p0, const int32_t *tokens, size_t n, struct store_match *m) {
    uint8_t prefix[16];
    hash128_to_bytes(h, prefix);
    MDB_cursor *c = NULL;
    int rc = mdb_cursor_open(txn->mdb, txn->env->dbi_rec, &c);
    if (rc) return store_map_err(txn->env, rc);
    MDB_val k = {.mv_size = 16, .mv_data = prefix}, v;
    struct store_key cand[64];
    size_t n_cand = 0;
    bool many = false;
    /* keys only: a value's pages are not touched until it is a candidate */
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); !rc;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size < 16 || memcmp(k.mv_data, prefix, 16) != 0) break;
        if (k.mv_size != 32) continue; /* the chunk record whose key is h itself */
        if (n_cand == ARRAY_SIZE(cand)) {
            many = true;
            break;
        }
        cand[n_cand] = (struct store_key){.len = 32};
        memcpy(cand[n_cand].bytes, k.mv_data, 32);
        n_cand++;
    }
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND) return store_map_err(txn->env, rc);
    size_t max_len = MIN(n, (size_t)chain->chunk_tokens - 1);
    if (many) {
        for (size_t len = max_len; len >= 1 && !m->has_tail; len--) {
            struct store_key key = store_key_tail(h, tokens, len);
            struct store_rec rec;
            int r = rec_verify(txn, chain, &key, STORE_KIND_TAIL, p0, tokens, (uint32_t)len, &rec);
            if (r == ERR_NOT_FOUND) continue;
            if (r == ERR_STORE_CORRUPT) return r;
            if (r < 0) {
                reject(txn, m, &key, r);
                continue;
            }
            m->tail = rec;
            m->has_tail = true;
        }
        return 0;
    }
    for (size_t i = 0; i < n_cand; i++) {
        MDB_val ck = {.mv_size = 32, .mv_data = cand[i].bytes}, cv;
        if (mdb_get(txn->mdb, txn->env->dbi_rec, &ck, &cv)) continue;
        struct store_rec_disk hd;
        if (cv.mv_size < sizeof hd) continue; /* rec_verify below refuses it */
        memcpy(&hd, cv.mv_data, sizeof hd);
        if (hd.n_tokens == 0 || hd.n_tokens > max_len) continue;
        if (m->has_tail && hd.n_tokens <= m->tail.n_tokens) continue;
        if (cv.mv_size < sizeof hd + (size_t)hd.n_tokens * 4) continue;
        /* tails whose tokens differ from the prompt are other conversations: not refused */
        if (memcmp((const uint8_t *)cv.mv_data + sizeof hd, tokens, (size_t)hd.n_tokens * 4) != 0)
            continue;
        struct store_rec rec;
        int r = rec_verify(txn, chain, &cand[i], STORE_KIND_TAIL, p0, tokens, hd.n_tokens, &rec);
        if (r == ERR_NOT_FOUND) continue;
        if (r == ERR_STORE_CORRUPT) return r;
        if (r < 0) {
            reject(txn, m, &cand[i], r);
            continue;
        }
        m->tail = rec;
        m->has_tail = true;
    }
    return 0;
}

int store_lookup(struct store_txn *txn, const struct store_chain *chain, const int32_t *tokens,
                 size_t n_tokens, struct store_match *ret, struct err_detail *d) {
    if (!txn || !chain || !ret || (n_tokens && !tokens))
        return err_set(d, ERR_INVALID, "store_lookup: bad arguments");
    struct store_env *env = txn->env;
    uint32_t C = chain->chunk_tokens;
    if (C == 0 || C > STORE_MAX_CHUNK_TOKENS)
        return err_set(d, ERR_INVALID, "store_lookup: chunk_tokens %u out of range", C);
    struct store_match m = {.h = chain->h0};
    size_t max_chunks = n_tokens / C;
    int r = store_fault(env);
    if (r < 0) return err_set(d, r, "store_lookup: %s", err_str(r));
    if (max_chunks && !(m.chunks = calloc_array(max_chunks, sizeof *m.chunks)))
        return err_set(d, -ENOMEM, "store_lookup: %zu chunks", max_chunks);

    struct hash128 h = chain->h0;
    for (size_t i = 0; i < max_chunks; i++) {
        const int32_t *t = tokens + i * C;
        struct hash128 next = store_chain_next(h, t, C);
        struct store_key key = store_key_chunk(next);
        r = rec_verify(txn, chain, &key, STORE_KIND_CHUNK, (uint64_t)i * C, t, C, &m.chunks[i]);
        if (r == ERR_NOT_FOUND) break;
        if (r == ERR_STORE_CORRUPT) goto fail;
        if (r < 0) {
            reject(txn, &m, &key, r);
            break;
        }
        m.n_chunks++;
        h = next;
    }
    m.h = h;
    size_t done = m.n_chunks * C;
    if (done < n_tokens) {
        r = find_tail(txn, chain, h, done, tokens + done, n_tokens - done, &m);
        if (r < 0) goto fail;
    }
    m.n_tokens = done + (m.has_tail ? m.tail.n_tokens : 0);

    /* refresh the leaf and, through it, every ancestor with one stamp */
    if (m.has_tail || m.n_chunks) {
        const struct store_key *leaf = m.has_tail ? &m.tail.key : &m.chunks[m.n_chunks - 1].key;
        store_queue(env, leaf, store_stamp_next(env), PENDING_TOUCH);
    }
    pthread_mutex_lock(&env->mu);
    if (m.n_tokens) {
        env->st.n_hits++;
        env->st.n_hit_tokens += m.n_tokens;
    } else {
        env->st.n_misses++;
    }
    pthread_mutex_unlock(&env->mu);
    *ret = m;
    return 0;
fail:
    free(m.chunks);
    return err_set(d, r, "store_lookup: %s", err_str(r));
}

void store_match_done(struct store_match *m) {
    if (!m) return;
    free(m->chunks);
    m->chunks = NULL;
    m->n_chunks = 0;
}
