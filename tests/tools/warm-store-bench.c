/* warm-store-bench: throughput of the prompt store next to memcpy, measured in one run.
 *
 *   warm-store-bench [--dir DIR] [--mib N]
 *
 * Prints put throughput (durable: one commit and fdatasync per record, and batched:
 * 8 records per commit) and get throughput (in place, checksum verified; and copied
 * out) for 1, 4 and 16 MiB records, each as MiB/s and as a fraction of memcpy bandwidth;
 * then the latency of a chain lookup for a 4,096-token prompt in 256-token chunks
 * (16 chunk records, checksums verified), hit and miss. DIR defaults to a fresh
 * directory under $TMPDIR (removed at the end); N (default 128) is how many MiB each
 * size writes. */
#include "store/store.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static void fill(void *buf, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *p = buf;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v = rng_next(&s);
        memcpy(p + i, &v, 8);
    }
}

static void tokens(int32_t *t, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)(rng_next(&s) % 32000);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Best of 5 copies of 256 MiB in total, in MiB/s. */
static double memcpy_mibs(void) {
    size_t n = 64u << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    if (!a || !b) return 0;
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t t0 = time_now_usec();
        for (int k = 0; k < 4; k++) memcpy(k & 1 ? a : b, k & 1 ? b : a, n);
        double s = (double)(time_now_usec() - t0) / 1e6;
        best = MAX(best, 4.0 * (double)n / MiB / s);
    }
    volatile uint8_t sink = a[n / 2] ^ b[n / 3];
    (void)sink;
    free(a);
    free(b);
    return best;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

struct size_result {
    size_t bytes;
    double put_mibs, put_batch_mibs, get_mibs, get_copy_mibs;
};

static int bench_size(struct store_env *env, const struct store_chain *ch, size_t bytes,
                      double total_mib, struct size_result *res) {
    uint32_t C = ch->chunk_tokens;
    int n = (int)(total_mib * MiB / (double)bytes);
    if (n < 4) n = 4;
    uint8_t *blob = malloc(bytes), *out = malloc(bytes);
    int32_t *t = malloc(sizeof(int32_t) * C * (size_t)n);
    struct store_key *keys = malloc(sizeof *keys * (size_t)n);
    if (!blob || !out || !t || !keys) return -ENOMEM;
    fill(blob, bytes, bytes);
    memset(out, 0, bytes);
    for (int i = 0; i < n; i++) tokens(t + (size_t)i * C, C, bytes * 1000 + (size_t)i);
    struct err_detail d = {0};
    int r = 0;

    /* durable puts: one commit (and fdatasync) per record */
    uint64_t t0 = time_now_usec();
    for (int i = 0; i < n && r >= 0; i++) {
        blob[0] = (uint8_t)i;
        struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = ch->h0,
                              .tokens = t + (size_t)i * C, .n_tokens = C, .blob = blob,
                              .blob_bytes = bytes};
        r = store_write(env, &p, &keys[i], &d);
    }
    double s = (double)(time_now_usec() - t0) / 1e6;
    res->put_mibs = (double)n * (double)bytes / MiB / s;

    /* batched: 8 records per write transaction (overwrites of the same keys) */
    t0 = time_now_usec();
    for (int i = 0; i < n && r >= 0; i += 8) {
        struct store_txn *txn = NULL;
        r = store_txn_begin(env, STORE_TXN_WRITE, &txn);
        for (int k = i; k < MIN(n, i + 8) && r >= 0; k++) {
            blob[1] = (uint8_t)k;
            struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = ch->h0,
                                  .tokens = t + (size_t)k * C, .n_tokens = C, .blob = blob,
                                  .blob_bytes = bytes};
            r = store_put(txn, &p, NULL, &d);
        }
        if (r >= 0)
            r = store_txn_commit(txn);
        else if (txn)
            store_txn_abort(txn);
    }
    s = (double)(time_now_usec() - t0) / 1e6;
    res->put_batch_mibs = (double)n * (double)bytes / MiB / s;
    if (r < 0) {
        fprintf(stderr, "put of %zu bytes: %s\n", bytes, err_msg(&d, r));
        goto out;
    }

    /* gets: verify in place (checksum over the blob), then also copy it out */
    for (int pass = 0; pass < 2 && r >= 0; pass++) {
        double best = 0;
        for (int rep = 0; rep < 3 && r >= 0; rep++) {
            struct store_txn *txn = NULL;
            r = store_txn_begin(env, STORE_TXN_READ, &txn);
            if (r < 0) break;
            t0 = time_now_usec();
            for (int i = 0; i < n && r >= 0; i++) {
                struct store_rec rec;
                r = store_get(txn, &keys[i], &rec, &d);
                if (r >= 0 && pass == 1) memcpy(out, rec.blob, rec.blob_bytes);
            }
            s = (double)(time_now_usec() - t0) / 1e6;
            store_txn_abort(txn);
            best = MAX(best, (double)n * (double)bytes / MiB / s);
        }
        if (pass == 0)
            res->get_mibs = best;
        else
            res->get_copy_mibs = best;
    }
    if (r < 0) fprintf(stderr, "get of %zu bytes: %s\n", bytes, err_msg(&d, r));
out:
    res->bytes = bytes;
    free(blob);
    free(out);
    free(t);
    free(keys);
    return r;
}

static int bench_lookup(struct store_env *env, const struct store_chain *ch, size_t chunk_bytes,
                        double *hit_us, double *miss_us) {
    enum { N_TOK = 4096, ITERS = 50 };
    int32_t *t = malloc(sizeof(int32_t) * N_TOK);
    uint8_t *blob = malloc(chunk_bytes);
    if (!t || !blob) return -ENOMEM;
    tokens(t, N_TOK, 4242);
    fill(blob, chunk_bytes, 4242);
    uint32_t C = ch->chunk_tokens;
    struct hash128 h = ch->h0;
    int r = 0;
    struct err_detail d = {0};
    for (size_t i = 0; i < N_TOK / C && r >= 0; i++) {
        struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = h, .p0 = i * C,
                              .tokens = t + i * C, .n_tokens = C, .blob = blob,
                              .blob_bytes = chunk_bytes};
        r = store_write(env, &p, NULL, &d);
        h = store_chain_next(h, t + i * C, C);
    }
    uint64_t hit[ITERS], miss[ITERS];
    for (int k = 0; k < ITERS && r >= 0; k++) {
        for (int pass = 0; pass < 2 && r >= 0; pass++) {
            if (pass == 1) t[0] ^= 1; /* a prompt that shares nothing */
            uint64_t t0 = time_now_usec();
            struct store_txn *txn = NULL;
            r = store_txn_begin(env, STORE_TXN_READ, &txn);
            struct store_match m = {0};
            if (r >= 0) r = store_lookup(txn, ch, t, N_TOK, &m, &d);
            if (r >= 0 && pass == 0 && m.n_tokens != N_TOK) r = ERR_NOT_FOUND;
            store_match_done(&m);
            store_txn_abort(txn);
            (pass ? miss : hit)[k] = time_now_usec() - t0;
            if (pass == 1) t[0] ^= 1;
        }
    }
    if (r < 0) {
        fprintf(stderr, "lookup: %s\n", err_msg(&d, r));
    } else {
        qsort(hit, ITERS, sizeof hit[0], cmp_u64);
        qsort(miss, ITERS, sizeof miss[0], cmp_u64);
        *hit_us = (double)hit[ITERS / 2];
        *miss_us = (double)miss[ITERS / 2];
    }
    free(t);
    free(blob);
    return r;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    double total_mib = 128;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            total_mib = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--mib N]\n", argv[0]);
            return 2;
        }
    }
    char tmp[512];
    bool made = false;
    if (!dir) {
        const char *base = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/warm-store-bench-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmp)) {
            perror("mkdtemp");
            return 1;
        }
        dir = tmp;
        made = true;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/cache", dir);
    struct store_options o = {.path = path, .budget_bytes = 2048ull << 20, .n_threads = 4};
    struct store_env *env = NULL;
    struct err_detail d = {0};
    int r = store_env_open(&o, &env, NULL, &d);
    if (r < 0) {
        fprintf(stderr, "opening %s: %s\n", path, err_msg(&d, r));
        return 1;
    }
    struct store_chain ch;
    static const uint8_t fp[16] = {0xbe, 0xac};
    store_chain_init(&ch, "bench", fp, 1, 1, 256);

    double mc = memcpy_mibs();
    printf("warm-store-bench: %s, memcpy %.0f MiB/s (best of 5, 64 MiB buffers)\n", path, mc);
    printf("%-8s %12s %12s %14s %14s\n", "record", "put MiB/s", "put x8/txn", "get MiB/s",
           "get+copy MiB/s");
    static const size_t sizes[] = {1u << 20, 4u << 20, 16u << 20};
    struct size_result res[3];
    for (size_t i = 0; i < 3 && r >= 0; i++) {
        r = bench_size(env, &ch, sizes[i], total_mib, &res[i]);
        if (r < 0) break;
        printf("%4zu MiB %7.0f %.3f %7.0f %.3f %8.0f %.3f %8.0f %.3f\n", sizes[i] >> 20,
               res[i].put_mibs, res[i].put_mibs / mc, res[i].put_batch_mibs,
               res[i].put_batch_mibs / mc, res[i].get_mibs, res[i].get_mibs / mc,
               res[i].get_copy_mibs, res[i].get_copy_mibs / mc);
    }
    printf("(each column: MiB/s, then the ratio to memcpy)\n");
    double hit = 0, miss = 0;
    if (r >= 0) r = bench_lookup(env, &ch, 1u << 20, &hit, &miss);
    if (r >= 0)
        printf("chain lookup, 4096 tokens in 16 chunks of 256 (1 MiB each, checksums verified): "
               "hit %.0f us, miss %.0f us (median of 50)\n",
               hit, miss);
    struct store_stats st;
    if (r >= 0 && store_env_stats(env, &st) == 0)
        printf("store: %llu records, %.0f MiB accounted, data.mdb %.0f MiB on disk\n",
               (unsigned long long)st.n_entries, (double)st.bytes / MiB,
               (double)st.file_bytes / MiB);
    store_env_close(env);
    if (made) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return r < 0 ? 1 : 0;
}
