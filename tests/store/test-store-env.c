/* The environment: reliability settings (§3.4), read-only inspection, 200 concurrent
 * readers (P1-2), a stale reader of a killed process (P1-3), corrupt files (P0-6/P1-4). */
#include "store-test.h"
#include "store/env.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static const uint8_t FP[16] = {7};
#define C 32u

static void file_mode(const char *dir, const char *name, unsigned *mode) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    *mode = stat(p, &sb) == 0 ? (unsigned)(sb.st_mode & 0777) : 0xFFFF;
}

TEST(settings) {
    mode_t old = umask(022);
    struct store_env *env = NULL;
    struct store_options o = {.path = store_test_dir("settings"), .budget_bytes = 100 << 20,
                              .n_threads = 100};
    struct store_open_info info;
    ASSERT_OK(store_env_open(&o, &env, &info, NULL));
    umask(old);
    ASSERT_TRUE(info.created && !info.quarantined);
    unsigned mode;
    file_mode(o.path, "data.mdb", &mode);
    ASSERT_EQ(mode, 0600);
    file_mode(o.path, "lock.mdb", &mode);
    ASSERT_EQ(mode, 0600);
    struct stat sb;
    ASSERT_TRUE(stat(o.path, &sb) == 0 && (sb.st_mode & 0777) == 0700);

    unsigned flags = 0;
    ASSERT_EQ(mdb_env_get_flags(env->mdb, &flags), 0);
    ASSERT_TRUE(flags & MDB_NOTLS);
    ASSERT_TRUE(!(flags & MDB_WRITEMAP));
    ASSERT_TRUE(!(flags & MDB_NOSYNC));
    ASSERT_TRUE(!(flags & MDB_MAPASYNC));
    unsigned readers = 0;
    ASSERT_EQ(mdb_env_get_maxreaders(env->mdb, &readers), 0);
    ASSERT_TRUE(readers >= 2 * 100);
    MDB_envinfo ei;
    ASSERT_EQ(mdb_env_info(env->mdb, &ei), 0);
    ASSERT_EQ(ei.me_mapsize, 2 * (100ull << 20) + (64ull << 20)); /* sparse: budget × 2 + 64 MiB */
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_TRUE(st.file_bytes < 1 << 20);   /* the map is sparse */
    ASSERT_EQ(st.high_water_bytes, 90 * (1ull << 20));
    ASSERT_EQ(st.low_water_bytes, 80 * (1ull << 20));
    store_env_close(env);

    /* files made with a wide mode are narrowed at open */
    char p[600];
    snprintf(p, sizeof p, "%s/data.mdb", o.path);
    ASSERT_TRUE(chmod(p, 0644) == 0);
    o.no_meta_sync = true;
    ASSERT_OK(store_env_open(&o, &env, &info, NULL));
    ASSERT_TRUE(!info.created);
    file_mode(o.path, "data.mdb", &mode);
    ASSERT_EQ(mode, 0600);
    ASSERT_EQ(mdb_env_get_flags(env->mdb, &flags), 0);
    ASSERT_TRUE(flags & MDB_NOMETASYNC);
    store_env_close(env);

    /* bad options are refused with the field named */
    struct err_detail d = {0};
    o.budget_bytes = 1000;
    ASSERT_ERR(store_env_open(&o, &env, NULL, &d), ERR_INVALID);
    ASSERT_TRUE(strstr(d.msg, "budget_bytes") != NULL);
    o.budget_bytes = 64 << 20;
    o.low_water_pct = 95;
    ASSERT_ERR(store_env_open(&o, &env, NULL, &d), ERR_INVALID);
}

TEST(network_fs) {
    ASSERT_TRUE(store_fs_type_is_refused(0x6969));      /* NFS */
    ASSERT_TRUE(store_fs_type_is_refused(0xFF534D42));  /* CIFS */
    ASSERT_TRUE(store_fs_type_is_refused(0xFE534D42));  /* SMB2 */
    ASSERT_TRUE(store_fs_type_is_refused(0x65735546));  /* FUSE */
    ASSERT_TRUE(store_fs_type_is_refused(0x01021997));  /* 9p */
    ASSERT_TRUE(!store_fs_type_is_refused(0xEF53));     /* ext4 */
    ASSERT_TRUE(!store_fs_type_is_refused(0x58465342)); /* xfs */
    ASSERT_TRUE(!store_fs_type_is_refused(0x01021994)); /* tmpfs */
    ASSERT_TRUE(!store_fs_type_is_refused(0x9123683E)); /* btrfs */
    ASSERT_TRUE(!store_fs_type_is_refused(0x794C7630)); /* overlayfs */
}

TEST(read_only) {
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("ro", 64 << 20, &env, NULL));
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    int32_t t[2 * C + 3];
    store_test_tokens(t, ARRAY_SIZE(t), 1);
    ASSERT_OK(store_test_write_prompt(env, &ch, t, ARRAY_SIZE(t), 5000, 1));
    store_env_close(env);

    struct store_options o = {.path = store_test_dir("ro"), .budget_bytes = 64 << 20,
                              .read_only = true};
    ASSERT_OK(store_env_open(&o, &env, NULL, NULL));
    struct store_txn *txn = NULL;
    struct store_match m;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    ASSERT_OK(store_lookup(txn, &ch, t, ARRAY_SIZE(t), &m, NULL));
    ASSERT_EQ(m.n_tokens, ARRAY_SIZE(t));
    store_match_done(&m);
    store_txn_abort(txn);
    ASSERT_ERR(store_test_write_prompt(env, &ch, t, C, 100, 2), -EROFS);
    ASSERT_ERR(store_purge(env, NULL, NULL), -EROFS);
    ASSERT_ERR(store_txn_begin(env, STORE_TXN_WRITE, &txn), -EROFS);
    struct store_check_report rep;
    ASSERT_OK(store_env_check(env, &rep));
    ASSERT_EQ(rep.n_records, 3);
    store_env_close(env);

    o.path = store_test_dir("ro-missing");
    ASSERT_TRUE(store_env_open(&o, &env, NULL, NULL) < 0);
}

/* ---- 200 concurrent readers ------------------------------------------------------------ */

struct reader_arg {
    struct store_env *env;
    const struct store_chain *ch;
    const int32_t *tokens;
    size_t n;
    int failures, hits;
};

static void *reader_main(void *p) {
    struct reader_arg *a = p;
    struct store_txn *txn = NULL;
    int r = store_txn_begin(a->env, STORE_TXN_READ, &txn);
    if (r < 0) {
        a->failures++;
        return NULL;
    }
    struct store_match m;
    if (store_lookup(txn, a->ch, a->tokens, a->n, &m, NULL) < 0)
        a->failures++;
    else
        a->hits += m.n_tokens == a->n;
    /* hold the slot a while so that the readers overlap */
    nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    store_match_done(&m);
    store_txn_abort(txn);
    return NULL;
}

static int run_readers(struct store_env *env, const struct store_chain *ch, const int32_t *t,
                       size_t n, int n_threads) {
    pthread_t th[200];
    struct reader_arg args[200];
    int failures = 0, hits = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    for (int i = 0; i < n_threads; i++) {
        args[i] = (struct reader_arg){.env = env, .ch = ch, .tokens = t, .n = n};
        if (pthread_create(&th[i], &attr, reader_main, &args[i]) != 0) return -1;
    }
    for (int i = 0; i < n_threads; i++) {
        pthread_join(th[i], NULL);
        failures += args[i].failures;
        hits += args[i].hits;
    }
    pthread_attr_destroy(&attr);
    return failures ? -failures : hits;
}

TEST(readers_200) {
    struct store_env *env = NULL;
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    int32_t t[4 * C];
    store_test_tokens(t, ARRAY_SIZE(t), 2);
    /* configured for 4 threads: 142 LMDB slots, 126 for this process; 200 threads still
     * all succeed (the surplus waits for a slot instead of getting MDB_READERS_FULL) */
    ASSERT_OK(store_test_open("readers", 64 << 20, &env, NULL));
    ASSERT_OK(store_test_write_prompt(env, &ch, t, ARRAY_SIZE(t), 5000, 3));
    ASSERT_EQ(run_readers(env, &ch, t, ARRAY_SIZE(t), 200), 200);
    store_env_close(env);
    /* configured for 200 threads: maxreaders ≥ 400, nobody waits */
    struct store_options o = {.path = store_test_dir("readers"), .budget_bytes = 64 << 20,
                              .n_threads = 200};
    ASSERT_OK(store_env_open(&o, &env, NULL, NULL));
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_TRUE(st.max_readers >= 400);
    ASSERT_EQ(run_readers(env, &ch, t, ARRAY_SIZE(t), 200), 200);
    store_env_close(env);
}

/* ---- a stale reader ------------------------------------------------------------------------ */

/* mdb_reader_list prints a header line, then one line per slot in use, or
 * "(no active readers)" */
static int count_readers_fn(const char *msg, void *ctx) {
    if (!strstr(msg, "no active readers") && !strstr(msg, "pid")) (*(int *)ctx)++;
    return 0;
}

TEST(stale_reader) {
    /* make the store, then close it: the child must be forked with no env open here */
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("stale", 64 << 20, &env, NULL));
    store_env_close(env);
    env = NULL;
    int pfd[2];
    ASSERT_TRUE(pipe(pfd) == 0);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        /* the CLI inspector: opens read-only, holds a read transaction, gets SIGKILL */
        close(pfd[0]);
        struct store_options o = {.path = store_test_dir("stale"), .budget_bytes = 64 << 20,
                                  .read_only = true};
        struct store_env *ce = NULL;
        struct store_txn *txn = NULL;
        char ok = store_env_open(&o, &ce, NULL, NULL) == 0 &&
                  store_txn_begin(ce, STORE_TXN_READ, &txn) == 0;
        if (write(pfd[1], &ok, 1) != 1) _exit(2);
        for (;;) pause();
    }
    close(pfd[1]);
    char ok = 0;
    ASSERT_EQ(read(pfd[0], &ok, 1), 1);
    close(pfd[0]);
    ASSERT_EQ(ok, 1);
    struct store_open_info info;
    ASSERT_OK(store_test_open("stale", 64 << 20, &env, &info));
    ASSERT_EQ(info.n_readers_cleared, 0); /* the child is alive: its slot is kept */
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    int before = 0, after = 0, cleared = 0;
    mdb_reader_list(env->mdb, count_readers_fn, &before);
    ASSERT_OK(store_env_check_readers(env, &cleared));
    mdb_reader_list(env->mdb, count_readers_fn, &after);
    ASSERT_EQ(cleared, 1);
    ASSERT_EQ(before, 1);
    ASSERT_EQ(after, 0);
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_readers_cleared, 1);
    store_env_close(env);
}

/* ---- corruption ------------------------------------------------------------------------------ */

static void make_store(const char *name, int n_prompts) {
    struct store_env *env = NULL;
    if (store_test_open(name, 64 << 20, &env, NULL) < 0) return;
    struct store_chain ch;
    store_chain_init(&ch, "uid:1", FP, 1, 1, C);
    int32_t t[3 * C + 5];
    for (int i = 0; i < n_prompts; i++) {
        store_test_tokens(t, ARRAY_SIZE(t), 100 + i);
        store_test_write_prompt(env, &ch, t, ARRAY_SIZE(t), 3000 + 1000 * i, i);
    }
    store_env_close(env);
}

/* Overwrites pages [first, last] of data.mdb with pseudo-random bytes (last < 0: to the
 * end of the file). Returns the file size. */
static long overwrite_pages(const char *name, long first, long last, uint64_t seed) {
    char p[600];
    snprintf(p, sizeof p, "%s/data.mdb", store_test_dir(name));
    int fd = open(p, O_RDWR);
    if (fd < 0) return -1;
    struct stat sb;
    fstat(fd, &sb);
    long n_pages = (long)(sb.st_size / 4096);
    if (last < 0 || last >= n_pages) last = n_pages - 1;
    uint8_t page[4096];
    for (long i = first; i <= last; i++) {
        store_test_fill(page, sizeof page, seed + (uint64_t)i);
        if (pwrite(fd, page, sizeof page, (off_t)i * 4096) != (ssize_t)sizeof page) return -1;
    }
    close(fd);
    return (long)sb.st_size;
}

static int quarantine_case(const char *name, long first, long last) {
    make_store(name, 6);
    long size = overwrite_pages(name, first, last, 99);
    if (size <= 0) return -1;
    struct store_env *env = NULL;
    struct store_open_info info;
    int r = store_test_open(name, 64 << 20, &env, &info);
    if (r < 0) return r;
    int ok = info.quarantined && info.created && info.quarantine_reason[0];
    struct stat sb;
    ok = ok && stat(info.quarantine_path, &sb) == 0 && sb.st_size == size; /* kept as it was */
    struct store_stats st;
    ok = ok && store_env_stats(env, &st) == 0 && st.n_entries == 0 && st.n_quarantined == 1;
    printf("  %s: quarantined to %s: %s\n", name, info.quarantine_path, info.quarantine_reason);
    /* the new store works */
    struct store_chain ch;
    store_chain_init(&ch, "uid:1", FP, 1, 1, C);
    int32_t t[C];
    store_test_tokens(t, C, 5);
    ok = ok && store_test_write_prompt(env, &ch, t, C, 4000, 1) == 0;
    struct store_check_report rep;
    ok = ok && store_env_check(env, &rep) == 0 && rep.n_records == 1;
    store_env_close(env);
    return ok ? 0 : -1;
}

TEST(corrupt_pages) {
    /* every page after the metas overwritten */
    ASSERT_OK(quarantine_case("corrupt-all", 2, -1));
    /* only the last few pages, where the newest tree pages sit */
    char p[600];
    make_store("probe", 6);
    snprintf(p, sizeof p, "%s/data.mdb", store_test_dir("probe"));
    struct stat sb;
    ASSERT_TRUE(stat(p, &sb) == 0);
    long last = (long)(sb.st_size / 4096) - 1;
    ASSERT_OK(quarantine_case("corrupt-tail", last - 3, last));
    /* both meta pages */
    ASSERT_OK(quarantine_case("corrupt-meta", 0, 1));
}

TEST(corrupt_single_tree_page) {
    /* Overwrite one page at a time, each in a fresh copy of the same store: every page of
     * the B-trees must be caught at open, and overflow (blob) pages by the checksum. */
    make_store("single", 3);
    char src[600];
    snprintf(src, sizeof src, "%s/data.mdb", store_test_dir("single"));
    struct stat sb;
    ASSERT_TRUE(stat(src, &sb) == 0);
    long n_pages = (long)(sb.st_size / 4096);
    int caught_open = 0, caught_check = 0, harmless = 0;
    uint8_t *orig = malloc((size_t)sb.st_size);
    int fd = open(src, O_RDONLY);
    ASSERT_TRUE(fd >= 0 && read(fd, orig, (size_t)sb.st_size) == sb.st_size);
    close(fd);
    for (long pg = 2; pg < n_pages; pg++) {
        fd = open(src, O_WRONLY | O_TRUNC);
        ASSERT_TRUE(fd >= 0 && write(fd, orig, (size_t)sb.st_size) == sb.st_size);
        close(fd);
        char lock[600];
        snprintf(lock, sizeof lock, "%s/lock.mdb", store_test_dir("single"));
        unlink(lock);
        ASSERT_TRUE(overwrite_pages("single", pg, pg, 7) > 0);
        struct store_env *env = NULL;
        struct store_open_info info;
        ASSERT_OK(store_test_open("single", 64 << 20, &env, &info));
        if (info.quarantined) {
            caught_open++;
            /* put the original back for the next round */
            rename(info.quarantine_path, src);
        } else {
            struct store_check_report rep;
            if (store_env_check(env, &rep) < 0)
                caught_check++;
            else
                harmless++; /* a free page */
        }
        store_env_close(env);
    }
    free(orig);
    printf("  %ld pages: %d caught at open, %d by the record check, %d free pages\n",
           n_pages - 2, caught_open, caught_check, harmless);
    ASSERT_TRUE(caught_open > 0 && caught_check > 0);
}

TEST(read_only_corrupt) {
    make_store("ro-corrupt", 2);
    ASSERT_TRUE(overwrite_pages("ro-corrupt", 2, -1, 5) > 0);
    struct store_options o = {.path = store_test_dir("ro-corrupt"), .budget_bytes = 64 << 20,
                              .read_only = true};
    struct store_env *env = NULL;
    struct err_detail d = {0};
    ASSERT_ERR(store_env_open(&o, &env, NULL, &d), ERR_STORE_CORRUPT);
    ASSERT_TRUE(strstr(d.msg, "corrupt") != NULL);
    char p[600];
    snprintf(p, sizeof p, "%s/data.mdb", o.path);
    ASSERT_TRUE(access(p, F_OK) == 0); /* inspection never moves anything */
}

TEST(quarantine_by_caller) {
    make_store("q-caller", 2);
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("q-caller", 64 << 20, &env, NULL));
    struct store_txn *txn = NULL;
    ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
    struct store_open_info info;
    ASSERT_ERR(store_env_quarantine(env, "test", &info, NULL), -EBUSY);
    store_txn_abort(txn);
    ASSERT_OK(store_env_quarantine(env, "MDB_PAGE_NOTFOUND during a lookup", &info, NULL));
    ASSERT_TRUE(info.quarantined);
    ASSERT_STREQ(info.quarantine_reason, "MDB_PAGE_NOTFOUND during a lookup");
    struct store_stats st;
    ASSERT_OK(store_env_stats(env, &st));
    ASSERT_EQ(st.n_entries, 0);
    ASSERT_OK(store_env_reopen(env, &info, NULL));
    ASSERT_TRUE(!info.quarantined);

    /* a reopen that fails leaves an env whose every call fails cleanly */
    char data[600], aside[600];
    snprintf(data, sizeof data, "%s/data.mdb", store_test_dir("q-caller"));
    snprintf(aside, sizeof aside, "%s/data.mdb.aside", store_test_dir("q-caller"));
    ASSERT_TRUE(rename(data, aside) == 0 && mkdir(data, 0700) == 0);
    ASSERT_TRUE(store_env_reopen(env, &info, NULL) < 0);
    ASSERT_TRUE(store_env_is_broken(env));
    ASSERT_ERR(store_txn_begin(env, STORE_TXN_READ, &txn), ERR_STORE_CORRUPT);
    struct store_chain ch;
    ASSERT_OK(store_chain_init(&ch, "uid:1", FP, 1, 1, C));
    int32_t t[C];
    store_test_tokens(t, C, 3);
    ASSERT_ERR(store_test_write_prompt(env, &ch, t, C, 100, 1), ERR_STORE_CORRUPT);
    ASSERT_TRUE(store_env_stats(env, &st) < 0);
    ASSERT_TRUE(rmdir(data) == 0 && rename(aside, data) == 0);
    ASSERT_OK(store_env_reopen(env, &info, NULL));
    ASSERT_OK(store_test_write_prompt(env, &ch, t, C, 100, 1));
    store_env_close(env);
}

TEST_MAIN(T(settings), T(network_fs), T(read_only), T(readers_200), T(stale_reader),
          T(corrupt_pages), T(corrupt_single_tree_page), T(read_only_corrupt),
          T(quarantine_by_caller))
