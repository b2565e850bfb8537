/* warm-client-mkstore: writes a small prompt store for the offline `warmctl cache check`
 * test: in DIR (created), two namespaces, each with a chain of N chunk records of 16
 * tokens and one tail; every blob is 32 KiB filled with the marker "WARMCTL-BLOB-<i>-"
 * so that the test can find a blob's bytes in data.mdb and damage them.
 *
 *   warm-client-mkstore DIR [N] */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16
#define BLOB_BYTES (32 * 1024)

static int write_chain(struct store_env *env, const char *ns, int n_chunks, int seed) {
    uint8_t fp[16];
    for (int i = 0; i < 16; i++) fp[i] = (uint8_t)(seed * 31 + i);
    struct store_chain chain;
    struct err_detail d = {0};
    int r = store_chain_init(&chain, ns, fp, 1, 1, CHUNK);
    if (r < 0) return r;
    int32_t tokens[CHUNK];
    char *blob = malloc(BLOB_BYTES);
    if (!blob) return -1;
    struct hash128 h = chain.h0;
    for (int c = 0; c <= n_chunks; c++) {
        char marker[32];
        int m = snprintf(marker, sizeof marker, "WARMCTL-BLOB-%d-%d-", seed, c);
        for (size_t i = 0; i < BLOB_BYTES; i++) blob[i] = marker[i % (size_t)m];
        for (int t = 0; t < CHUNK; t++) tokens[t] = seed * 1000 + c * CHUNK + t;
        bool tail = c == n_chunks;
        struct store_put put = {
            .chain = &chain,
            .kind = tail ? STORE_KIND_TAIL : STORE_KIND_CHUNK,
            .parent = h,
            .p0 = (uint64_t)c * CHUNK,
            .tokens = tokens,
            .n_tokens = tail ? CHUNK / 2 : CHUNK,
            .blob = blob,
            .blob_bytes = BLOB_BYTES,
        };
        r = store_write(env, &put, NULL, &d);
        if (r < 0) {
            fprintf(stderr, "store_write: %s\n", err_msg(&d, r));
            break;
        }
        if (!tail) h = store_chain_next(h, tokens, CHUNK);
    }
    free(blob);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: warm-client-mkstore DIR [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 3;
    struct store_options opt = {.path = argv[1], .budget_bytes = 64u << 20, .n_threads = 1};
    struct store_env *env = NULL;
    struct err_detail d = {0};
    int r = store_env_open(&opt, &env, NULL, &d);
    if (r < 0) {
        fprintf(stderr, "store_env_open %s: %s\n", argv[1], err_msg(&d, r));
        return 1;
    }
    if ((r = write_chain(env, "uid:1000", n, 1)) >= 0) r = write_chain(env, "shared:docs", n, 2);
    store_env_close(env);
    return r < 0 ? 1 : 0;
}
