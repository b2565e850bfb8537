/* warm-cache-patch: rewrites every record of a stopped daemon's prompt store with the
 * format_version field of its KV state blob set to another value — the e2e test of
 * "entries of another format version are rejected and rewritten" (DESIGN.md 3.5, §4).
 *
 *   warm-cache-patch --store DIR --set-version N [--chunk-tokens C] [--budget BYTES]
 *
 * The store derives a record's key from its parent hash and tokens, so the tool rebuilds
 * each chain: h0 from the namespace, the model fingerprint and the K/V types read from the
 * blob header (engine/kv-state.c: fingerprint at offset 16, type_k / type_v at 48 / 52),
 * then chunk i's parent is the chunk at position (i-1)·C whose next hash is the record's
 * key; a tail's parent is the first 16 bytes of its key. Prints "patched N records". */
#include "engine/engine.h"
#include "store/store.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Blob header offsets (engine/kv-state.c, format version 1; bytes 0..11 are forever). */
#define BLOB_VERSION_OFF 4
#define BLOB_FP_OFF 16
#define BLOB_TYPE_K_OFF 48
#define BLOB_TYPE_V_OFF 52
#define BLOB_MIN_BYTES 56

struct rec {
    struct store_key key;
    enum store_kind kind;
    char ns[128];
    uint64_t p0;
    int32_t *tokens;
    uint32_t n_tokens;
    uint8_t *blob;
    size_t blob_bytes;
    struct hash128 h;     /* a chunk's own chain hash (its key) */
    bool done;
};

struct list {
    struct rec *v;
    size_t n, cap;
};

static int list_cb(const struct store_entry *e, void *userdata) {
    struct list *l = userdata;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct rec *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    struct rec *r = &l->v[l->n++];
    memset(r, 0, sizeof *r);
    r->key = e->key;
    r->kind = e->kind;
    snprintf(r->ns, sizeof r->ns, "%s", e->ns ? e->ns : "");
    r->p0 = e->p0;
    return 0;
}

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const uint8_t *p) {
    return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
}

/* Reads tokens and blob of every listed record into owned copies. */
static int load_records(struct store_env *env, struct list *l) {
    struct store_txn *txn = NULL;
    int e = store_txn_begin(env, STORE_TXN_READ, &txn);
    if (e < 0) return e;
    e = store_list(txn, NULL, list_cb, l);
    for (size_t i = 0; e >= 0 && i < l->n; i++) {
        struct rec *r = &l->v[i];
        struct store_rec sr;
        struct err_detail d = {0};
        e = store_get(txn, &r->key, &sr, &d);
        if (e < 0) {
            fprintf(stderr, "warm-cache-patch: %s\n", err_msg(&d, e));
            break;
        }
        r->n_tokens = sr.n_tokens;
        r->blob_bytes = sr.blob_bytes;
        r->tokens = malloc_array(sr.n_tokens, sizeof *r->tokens);
        r->blob = malloc(sr.blob_bytes);
        if (!r->tokens || !r->blob) {
            e = -ENOMEM;
            break;
        }
        for (uint32_t k = 0; k < sr.n_tokens; k++) r->tokens[k] = store_rec_token(&sr, k);
        memcpy(r->blob, sr.blob, sr.blob_bytes);
        if (r->blob_bytes < BLOB_MIN_BYTES) {
            fprintf(stderr, "warm-cache-patch: record at %llu: blob of %zu bytes is too short\n",
                    (unsigned long long)r->p0, r->blob_bytes);
            e = ERR_STATE_BAD;
            break;
        }
        r->h = hash128_from_bytes(r->key.bytes);
    }
    store_txn_abort(txn);
    return e;
}

/* The chain seed of a record: its namespace, and the model and types its blob names. */
static int chain_of(const struct rec *r, uint32_t C, struct store_chain *ret) {
    struct hash128 fp = {.lo = rd_u64(r->blob + BLOB_FP_OFF), .hi = rd_u64(r->blob + BLOB_FP_OFF + 8)};
    uint8_t fpb[16];
    hash128_to_bytes(fp, fpb);
    return store_chain_init(ret, r->ns, fpb, rd_u32(r->blob + BLOB_TYPE_K_OFF),
                            rd_u32(r->blob + BLOB_TYPE_V_OFF), C);
}

/* The parent hash of r, or false when no listed record (or h0) leads to it. */
static bool parent_of(const struct list *l, const struct rec *r, const struct store_chain *chain,
                      uint32_t C, struct hash128 *ret) {
    if (r->kind == STORE_KIND_TAIL) {
        *ret = hash128_from_bytes(r->key.bytes);
        return true;
    }
    if (r->p0 == 0) {
        *ret = chain->h0;
        return hash128_eq(store_chain_next(chain->h0, r->tokens, r->n_tokens), r->h);
    }
    for (size_t i = 0; i < l->n; i++) {
        const struct rec *q = &l->v[i];
        if (q->kind != STORE_KIND_CHUNK || q->p0 + C != r->p0 || strcmp(q->ns, r->ns)) continue;
        if (hash128_eq(store_chain_next(q->h, r->tokens, r->n_tokens), r->h)) {
            *ret = q->h;
            return true;
        }
    }
    return false;
}

static void usage(void) {
    fprintf(stderr, "usage: warm-cache-patch --store DIR --set-version N [--chunk-tokens C] "
                    "[--budget BYTES]\n");
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    long long version = -1, chunk = ENGINE_CHUNK_TOKENS, budget = 8ll << 30;
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},
        {"set-version", required_argument, NULL, 'v'},
        {"chunk-tokens", required_argument, NULL, 'c'},
        {"budget", required_argument, NULL, 'b'},
        {0, 0, 0, 0},
    };
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (o == 's') dir = optarg;
        else if (o == 'v') version = strtoll(optarg, NULL, 10);
        else if (o == 'c') chunk = strtoll(optarg, NULL, 10);
        else if (o == 'b') budget = strtoll(optarg, NULL, 10);
        else {
            usage();
            return 2;
        }
    }
    if (!dir || version < 0 || version > UINT32_MAX || chunk < 1 ||
        chunk > (long long)STORE_MAX_CHUNK_TOKENS || budget < 1) {
        usage();
        return 2;
    }
    struct store_options so = {.path = dir, .budget_bytes = (uint64_t)budget, .n_threads = 1};
    struct store_env *env = NULL;
    struct err_detail d = {0};
    int e = store_env_open(&so, &env, NULL, &d);
    if (e < 0) {
        fprintf(stderr, "warm-cache-patch: %s: %s\n", dir, err_msg(&d, e));
        return 1;
    }
    struct list l = {0};
    e = load_records(env, &l);
    size_t n_patched = 0;
    for (size_t i = 0; e >= 0 && i < l.n; i++) {
        struct rec *r = &l.v[i];
        struct store_chain chain;
        struct hash128 parent;
        e = chain_of(r, (uint32_t)chunk, &chain);
        if (e < 0) break;
        if (!parent_of(&l, r, &chain, (uint32_t)chunk, &parent)) {
            fprintf(stderr, "warm-cache-patch: no parent for the %s at %llu in '%s' (wrong "
                            "--chunk-tokens?)\n", r->kind == STORE_KIND_TAIL ? "tail" : "chunk",
                    (unsigned long long)r->p0, r->ns);
            e = ERR_NOT_FOUND;
            break;
        }
        uint8_t *v = r->blob + BLOB_VERSION_OFF;
        for (int k = 0; k < 4; k++) v[k] = (uint8_t)((uint64_t)version >> (8 * k));
        struct store_put put = {.chain = &chain, .kind = r->kind, .parent = parent, .p0 = r->p0,
                                .tokens = r->tokens, .n_tokens = r->n_tokens, .blob = r->blob,
                                .blob_bytes = r->blob_bytes};
        e = store_write(env, &put, NULL, &d);
        if (e < 0) fprintf(stderr, "warm-cache-patch: write: %s\n", err_msg(&d, e));
        else n_patched++;
    }
    for (size_t i = 0; i < l.n; i++) {
        free(l.v[i].tokens);
        free(l.v[i].blob);
    }
    free(l.v);
    store_env_close(env);
    if (e < 0) return 1;
    printf("patched %zu records\n", n_patched);
    return 0;
}
