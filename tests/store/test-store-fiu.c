/* Random I/O faults with Debian's libfiu (P1-4 a): the test re-executes itself under
 * `fiu-run -x` (the POSIX preload library) and, around each store call, enables random
 * failures of posix/io/rw (2 %) and posix/io/sync (5 %) points and libc/mm/malloc (1 %);
 * skipped under ASan (both replace malloc; test-store-fault covers that build). Every failure must come back as an error; a broken env is reopened (never
 * retried blindly); with faults off at the end the store is consistent and every
 * acknowledged write is there. The fiu control functions are looked up at run time in
 * the libfiu.so the preload library loaded, so nothing links libfiu. */
#include "store-test.h"

#include <dlfcn.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

static const uint8_t FP[16] = {0xf1};
#define C 32u
#define N_OPS 400

typedef int (*fiu_enable_random_fn)(const char *, int, void *, unsigned, float);
typedef int (*fiu_disable_fn)(const char *);
static fiu_enable_random_fn fiu_enable_random_p;
static fiu_disable_fn fiu_disable_p;

static const char *points[] = {"posix/io/rw/*", "posix/io/sync/*", "libc/mm/malloc"};
static const float probs[] = {0.02f, 0.05f, 0.01f};

static void faults_on(void) {
    for (size_t i = 0; i < ARRAY_SIZE(points); i++)
        fiu_enable_random_p(points[i], 1, NULL, 0, probs[i]);
}
static void faults_off(void) {
    for (size_t i = 0; i < ARRAY_SIZE(points); i++) fiu_disable_p(points[i]);
}

/* Runs this test again under fiu-run -x; returns only when that is impossible. */
static int reexec_under_fiu(void) {
    if (getenv("WARM_FIU_CHILD")) return -1; /* already tried: the preload did not load */
    if (access("/usr/lib/fiu/fiu_posix_preload.so", R_OK) != 0) return -1;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    setenv("WARM_FIU_CHILD", "1", 1);
    fflush(NULL);
    execlp("fiu-run", "fiu-run", "-x", "-f", "", self, "random_faults", (char *)NULL);
    return -1;
}

TEST(random_faults) {
    /* the preload library defines malloc and the POSIX calls ASan intercepts */
    if (UNDER_ASAN) SKIP("libfiu's preload library and ASan both replace malloc");
    fiu_enable_random_p = (fiu_enable_random_fn)dlsym(RTLD_DEFAULT, "fiu_enable_random");
    fiu_disable_p = (fiu_disable_fn)dlsym(RTLD_DEFAULT, "fiu_disable");
    if (!fiu_enable_random_p || !fiu_disable_p) {
        reexec_under_fiu();
        SKIP("fiu-run or /usr/lib/fiu/fiu_posix_preload.so not available (Debian fiu-utils)");
    }
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("fiu", 256 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(256 * 1024);
    struct store_key *acked = malloc(sizeof *acked * N_OPS);
    uint64_t *acked_seed = malloc(sizeof *acked_seed * N_OPS);
    ASSERT_TRUE(blob && acked && acked_seed);
    int n_ok = 0, n_err = 0, n_reopen = 0, n_lookup = 0, n_lookup_err = 0;
    uint64_t rng = 99;
    for (int i = 0; i < N_OPS; i++) {
        int32_t t[C];
        uint64_t seed = 1000 + (uint64_t)i;
        store_test_tokens(t, C, seed);
        size_t n = 16 * 1024 + store_test_rng(&rng) % (240 * 1024);
        store_test_fill(blob, n, seed);
        struct store_put p = {.chain = &ch, .kind = STORE_KIND_CHUNK, .parent = ch.h0,
                              .tokens = t, .n_tokens = C, .blob = blob, .blob_bytes = n};
        struct store_key key;
        faults_on();
        int r = store_write(env, &p, &key, NULL);
        faults_off();
        if (r < 0) {
            n_err++;
        } else {
            acked_seed[n_ok] = seed;
            acked[n_ok++] = key;
        }
        if (i % 3 == 0 && n_ok) {
            /* look up an acknowledged prompt under faults too */
            int32_t u[C];
            store_test_tokens(u, C, acked_seed[store_test_rng(&rng) % (uint64_t)n_ok]);
            struct store_txn *txn = NULL;
            struct store_match m = {0};
            faults_on();
            r = store_txn_begin(env, STORE_TXN_READ, &txn);
            if (r >= 0) r = store_lookup(txn, &ch, u, C, &m, NULL);
            store_match_done(&m);
            store_txn_abort(txn);
            faults_off();
            n_lookup++;
            n_lookup_err += r < 0;
        }
        if (store_env_is_broken(env)) {
            struct err_detail d = {0};
            ASSERT_OK_D(store_env_reopen(env, NULL, &d), &d);
            n_reopen++;
        }
    }
    faults_off();
    store_env_close(env);
    ASSERT_OK(store_test_open("fiu", 256 << 20, &env, NULL));
    struct store_check_report rep;
    int c = store_env_check(env, &rep);
    if (c < 0) TEST_FAIL_("store inconsistent after random faults: %s", rep.first_problem);
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    int present = 0;
    for (int i = 0; i < n_ok; i++) {
        struct store_rec rec;
        present += store_get(txn, &acked[i], &rec, NULL) == 0;
    }
    store_txn_abort(txn);
    printf("  libfiu: %d writes ok, %d failed with an error, %d reopens after I/O errors; "
           "%d lookups (%d errors); acknowledged present %d/%d; check clean\n",
           n_ok, n_err, n_reopen, n_lookup, n_lookup_err, present, n_ok);
    ASSERT_EQ(present, n_ok);
    ASSERT_TRUE(n_err > 0 && n_ok > 0);
    free(blob);
    free(acked);
    free(acked_seed);
    store_env_close(env);
}

TEST_MAIN(T(random_faults))
