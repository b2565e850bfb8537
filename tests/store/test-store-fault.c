/* Fault injection (P1-4 b): fail the N-th write, sync or allocation of a commit, for
 * N = 1, 2, … until the commit needs fewer calls than N. Every failure must be reported
 * as an error, the store must stay consistent (structural walk, every record's checksum,
 * the byte accounting), committed records must survive, and the store must work again
 * after store_env_reopen (an fsync error is never retried blindly).
 *
 * The failure hook is symbol interposition: this executable defines pwrite, writev,
 * write, fdatasync, fsync and msync (and, outside ASan, malloc, calloc and realloc),
 * which liblmdb.so and the store resolve to before libc. A call fails only while a test
 * has armed it, and only on the calling thread. */
#include "store-test.h"
#include "store/env.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FAULT_ALLOC 0 /* ASan owns malloc */
#else
#define FAULT_ALLOC 1
#endif

enum fault_cat { CAT_NONE, CAT_WRITE, CAT_SYNC, CAT_ALLOC };
static __thread enum fault_cat armed;
static __thread long countdown;
static __thread int fired;
static __thread long calls;

static int fault_hit(enum fault_cat cat) {
    if (armed != cat || fired) return 0;
    calls++;
    if (--countdown == 0) {
        fired = 1;
        return 1;
    }
    return 0;
}

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static int (*real_msync)(void *, size_t, int);

static void fault_init(void) {
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    if (fault_hit(CAT_WRITE)) return errno = EIO, -1;
    return real_pwrite(fd, buf, n, off);
}
ssize_t writev(int fd, const struct iovec *iov, int n) {
    if (fault_hit(CAT_WRITE)) return errno = EIO, -1;
    return real_writev(fd, iov, n);
}
ssize_t write(int fd, const void *buf, size_t n) {
    if (fault_hit(CAT_WRITE)) return errno = EIO, -1;
    if (!real_write) return syscall(1 /* SYS_write */, fd, buf, n);
    return real_write(fd, buf, n);
}
int fdatasync(int fd) {
    if (fault_hit(CAT_SYNC)) return errno = EIO, -1;
    return real_fdatasync(fd);
}
int fsync(int fd) {
    if (fault_hit(CAT_SYNC)) return errno = EIO, -1;
    return real_fsync(fd);
}
int msync(void *addr, size_t n, int flags) {
    if (fault_hit(CAT_SYNC)) return errno = EIO, -1;
    return real_msync(addr, n, flags);
}

#if FAULT_ALLOC
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
void *malloc(size_t n) {
    if (fault_hit(CAT_ALLOC)) return errno = ENOMEM, NULL;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    if (fault_hit(CAT_ALLOC)) return errno = ENOMEM, NULL;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    if (fault_hit(CAT_ALLOC)) return errno = ENOMEM, NULL;
    return __libc_realloc(p, n);
}
#endif

static const uint8_t FP[16] = {3};
#define C 32u

static void arm(enum fault_cat cat, long n) {
    fired = 0;
    calls = 0;
    countdown = n;
    armed = cat;
}
static int disarm(void) {
    armed = CAT_NONE;
    return fired;
}

/* The record written under fault: chunk 0 of a prompt of its own, 300 KiB. */
static int write_one(struct store_env *env, const struct store_chain *ch, uint64_t seed,
                     uint8_t *blob, int32_t *t) {
    store_test_tokens(t, C, seed);
    store_test_fill(blob, 300 * 1024, seed);
    struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = ch->h0,
                          .tokens = t, .n_tokens = C, .blob = blob, .blob_bytes = 300 * 1024};
    return store_write(env, &p, NULL, NULL);
}

static int lookup_n(struct store_env *env, const struct store_chain *ch, const int32_t *t,
                    size_t n) {
    struct store_txn *txn = NULL;
    if (store_txn_begin(env, STORE_TXN_READ, &txn) < 0) return -1;
    struct store_match m;
    int k = store_lookup(txn, ch, t, n, &m, NULL) < 0 ? -1 : (int)m.n_tokens;
    store_match_done(&m);
    store_txn_abort(txn);
    return k;
}

static void run_category(enum fault_cat cat, const char *name, const char *dir) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open(dir, 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    int32_t base[2 * C + 4], t[C];
    store_test_tokens(base, ARRAY_SIZE(base), 1);
    ASSERT_OK(store_test_write_prompt(env, &ch, base, ARRAY_SIZE(base), 200 * 1024, 1));
    uint8_t *blob = malloc(300 * 1024);
    ASSERT_TRUE(blob != NULL);
    int n_fail = 0, n_tolerated = 0, n_reopen = 0, n_present = 0;
    long n;
    for (n = 1; n < 2000; n++) {
        arm(cat, n);
        int r = write_one(env, &ch, 1000 + (uint64_t)n, blob, t);
        int hit = disarm();
        if (!hit) {
            ASSERT_OK(r); /* the commit needs fewer than n calls: done */
            break;
        }
        if (r < 0)
            n_fail++;
        else
            n_tolerated++; /* e.g. a refresh dropped (a hint), the write itself done */
        if (cat != CAT_ALLOC && r >= 0)
            TEST_FAIL_("%s #%ld failed but store_write reported success", name, n);
        if (store_env_is_broken(env)) {
            struct err_detail d = {0};
            ASSERT_OK_D(store_env_reopen(env, NULL, &d), &d);
            n_reopen++;
        }
        struct store_check_report rep;
        int c = store_env_check(env, &rep);
        if (c < 0) TEST_FAIL_("%s #%ld: store inconsistent: %s", name, n, rep.first_problem);
        ASSERT_EQ(rep.n_checksum_failures, 0);
        /* committed work survives; the faulted record is all there or not there */
        ASSERT_EQ(lookup_n(env, &ch, base, ARRAY_SIZE(base)), ARRAY_SIZE(base));
        int k = lookup_n(env, &ch, t, C);
        ASSERT_TRUE(k == 0 || k == (int)C);
        if (r >= 0) ASSERT_EQ(k, C);
        n_present += k == (int)C;
        /* and the store still takes writes */
        ASSERT_OK(write_one(env, &ch, 5000 + (uint64_t)n, blob, t));
    }
    free(blob);
    printf("  %-5s: a commit makes %ld such calls; failing each: %d errors reported, %d "
           "tolerated, %d reopens, %d faulted records found complete, 0 inconsistencies\n",
           name, n - 1, n_fail, n_tolerated, n_reopen, n_present);
    ASSERT_TRUE(n > 1);
    store_env_close(env);
    /* a clean reopen from disk */
    ASSERT_OK(store_test_open(dir, 64 << 20, &env, NULL));
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_EQ(lookup_n(env, &ch, base, ARRAY_SIZE(base)), ARRAY_SIZE(base));
    store_env_close(env);
}

TEST(fail_nth_write) {
    fault_init();
    run_category(CAT_WRITE, "write", "fault-write");
}

TEST(fail_nth_sync) {
    fault_init();
    run_category(CAT_SYNC, "sync", "fault-sync");
}

TEST(fail_nth_alloc) {
    if (!FAULT_ALLOC) SKIP("allocation faults need the non-ASan build (ASan owns malloc)");
    fault_init();
    run_category(CAT_ALLOC, "alloc", "fault-alloc");
}

struct hook {
    long countdown;
    int fired;
};

static int hook_fn(void *u) {
    struct hook *h = u;
    if (h->fired) return 0;
    if (--h->countdown == 0) {
        h->fired = 1;
        return 1;
    }
    return 0;
}

TEST(fault_hook) {
    /* the store's own hook (works under ASan too): fail the N-th fallible step of a
     * write, then check the store */
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    uint8_t *blob = malloc(300 * 1024);
    int32_t t[C];
    long n;
    int n_fail = 0;
    for (n = 1; n < 100; n++) {
        struct hook h = {.countdown = n};
        struct store_options o = {.path = store_test_dir("hook"), .budget_bytes = 64 << 20};
        struct store_env *env = NULL;
        ASSERT_OK(store_env_open(&o, &env, NULL, NULL));
        /* armed after open, so it sees only the write */
        env->opt.fault_userdata = &h;
        env->opt.fault = hook_fn;
        int r = write_one(env, &ch, 100 + (uint64_t)n, blob, t);
        env->opt.fault = NULL;
        struct store_check_report rep;
        ASSERT_OK(store_env_check(env, &rep));
        int k = lookup_n(env, &ch, t, C);
        store_env_close(env);
        if (!h.fired) {
            ASSERT_OK(r);
            break;
        }
        ASSERT_TRUE(r < 0);
        ASSERT_EQ(k, 0);
        n_fail++;
    }
    printf("  store hook: %ld fallible steps in a write, %d failures reported, store clean "
           "after each\n",
           n - 1, n_fail);
    ASSERT_TRUE(n > 1);
    free(blob);
}

TEST_MAIN(T(fail_nth_write), T(fail_nth_sync), T(fail_nth_alloc), T(fault_hook))
