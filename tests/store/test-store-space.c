/* A full filesystem under the store (P1-6 DISK-BOUND), on a real one: a small tmpfs is
 * mounted on the test's directory and filled with a file. A write then fails with
 * -ENOSPC (not EIO, not "environment is corrupt") and a detail naming the directory and
 * its free space, also when a little room is left and LMDB's write comes back short; the env is not broken, so records stored before are still read; no
 * quarantine at reopen; once the filler is deleted, writes succeed again on the same env.
 * Needs root (mount); skipped otherwise, or where mounting tmpfs is refused. */
#include "store-test.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

static const uint8_t FP[16] = {0x5a, 0xce};
#define C 64u
#define FS_BYTES (8u << 20)
#define BUDGET (4ull << 20)
#define BLOB (256u << 10)

static char mnt[600];

static void unmount_dir(void) {
    if (mnt[0]) umount2(mnt, MNT_DETACH);
}

/* Fills the filesystem holding dir with one file until a write fails with ENOSPC;
 * returns the bytes written, or -errno for any other failure. */
static long long fill(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -errno;
    static uint8_t buf[64 << 10];
    memset(buf, 0xab, sizeof buf);
    long long n = 0;
    for (size_t chunk = sizeof buf; chunk;) {
        ssize_t k = write(fd, buf, chunk);
        if (k > 0) {
            n += k;
            continue;
        }
        if (k < 0 && errno != ENOSPC) {
            int e = errno;
            close(fd);
            return -e;
        }
        chunk /= 2; /* fill the last blocks too */
    }
    close(fd);
    return n;
}

static int put_one(struct store_env *env, const struct store_chain *ch, uint64_t seed,
                   const uint8_t *blob, struct store_key *ret_key, struct err_detail *d) {
    int32_t t[C];
    store_test_tokens(t, C, seed);
    struct store_put p = {.chain = ch, .kind = STORE_KIND_CHUNK, .parent = ch->h0, .tokens = t,
                          .n_tokens = C, .blob = blob, .blob_bytes = BLOB};
    return store_write(env, &p, ret_key, d);
}

static void check_present(struct store_env *env, const struct store_key *key, const uint8_t *blob) {
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    struct store_rec rec;
    ASSERT_OK(store_get(txn, key, &rec, NULL));
    ASSERT_EQ(rec.blob_bytes, BLOB);
    ASSERT_TRUE(memcmp(rec.blob, blob, BLOB) == 0);
    store_txn_abort(txn);
}

TEST(enospc_is_not_corruption) {
    if (geteuid() != 0) SKIP("needs root to mount a small tmpfs");
    snprintf(mnt, sizeof mnt, "%s/small", test_tmpdir());
    ASSERT_TRUE(mkdir(mnt, 0700) == 0);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%u,mode=0700", FS_BYTES);
    if (mount("tmpfs", mnt, "tmpfs", 0, opts) < 0) {
        int e = errno;
        mnt[0] = 0;
        SKIP("cannot mount tmpfs (%s)", strerror(e));
    }
    atexit(unmount_dir);
    char dir[700], filler[700];
    snprintf(dir, sizeof dir, "%s/cache", mnt);
    snprintf(filler, sizeof filler, "%s/filler", mnt);

    struct store_options o = {.path = dir, .budget_bytes = BUDGET, .n_threads = 2};
    struct store_env *env = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(store_env_open(&o, &env, NULL, &d), &d);
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "space", FP, 1, 1, C));
    uint8_t *blob = malloc(BLOB);
    ASSERT_TRUE(blob != NULL);
    store_test_fill(blob, BLOB, 1);
    struct store_key before;
    ASSERT_OK_D(put_one(env, &ch, 1, blob, &before, &d), &d);

    long long filled = fill(filler);
    ASSERT_TRUE(filled > 0);
    uint64_t free_bytes = UINT64_MAX;
    ASSERT_OK(store_env_space(env, &free_bytes));
    ASSERT_TRUE(free_bytes < BLOB);

    /* every write fails for lack of space, and says so */
    enum { N_FULL = 8 };
    for (int i = 0; i < N_FULL; i++) {
        d = (struct err_detail){0};
        int r = put_one(env, &ch, 100 + (uint64_t)i, blob, NULL, &d);
        if (i == 0) printf("  with %llu bytes free: %s\n", (unsigned long long)free_bytes,
                           err_msg(&d, r));
        ASSERT_EQ(r, -ENOSPC);
        ASSERT_TRUE(strstr(d.msg, "no space left on ") != NULL);
        ASSERT_TRUE(strstr(d.msg, dir) != NULL);
        ASSERT_TRUE(strstr(d.msg, " free)") != NULL);
        ASSERT_TRUE(!store_env_is_broken(env));
        /* what was stored before is still served */
        check_present(env, &before, blob);
    }
    /* a little room: the record's pages go out in one write that comes back short, which
     * LMDB reports as EIO ("short write, filesystem full?"); still no space, not an I/O
     * error that breaks the env */
    ASSERT_TRUE(truncate(filler, filled - (64 << 10)) == 0);
    ASSERT_OK(store_env_space(env, &free_bytes));
    ASSERT_TRUE(free_bytes > 0 && free_bytes < BLOB);
    d = (struct err_detail){0};
    int r = put_one(env, &ch, 200, blob, NULL, &d);
    printf("  with %llu bytes free: %s\n", (unsigned long long)free_bytes, err_msg(&d, r));
    ASSERT_EQ(r, -ENOSPC);
    ASSERT_TRUE(!store_env_is_broken(env));
    check_present(env, &before, blob);

    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_no_space, N_FULL + 1);
    ASSERT_EQ(st.n_write_errors, N_FULL + 1);
    ASSERT_EQ(st.n_quarantined, 0);

    /* space comes back: the same env writes again, nothing reopened */
    ASSERT_TRUE(unlink(filler) == 0);
    struct store_key after;
    store_test_fill(blob, BLOB, 2);
    ASSERT_OK_D(put_one(env, &ch, 2, blob, &after, &d), &d);
    check_present(env, &after, blob);
    struct store_check_report rep;
    if (store_env_check(env, &rep) < 0) TEST_FAIL_("store inconsistent: %s", rep.first_problem);
    store_env_close(env);

    /* and a restart finds both records, with no quarantine */
    struct store_open_info info;
    ASSERT_OK_D(store_env_open(&o, &env, &info, &d), &d);
    ASSERT_TRUE(!info.quarantined);
    check_present(env, &after, blob);
    store_test_fill(blob, BLOB, 1);
    check_present(env, &before, blob);
    store_env_close(env);
    free(blob);
}

TEST_MAIN(T(enospc_is_not_corruption))
