/* The LMDB environment: open with the reliability settings, quarantine of corrupt files,
 * reader admission and checks, transactions, error mapping, counters. */
#include "store/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_HIGH_PCT 90u
#define DEFAULT_LOW_PCT 80u
#define DEFAULT_READER_CHECK_USEC (60ull * 1000000ull)
#define MAP_SLACK_BYTES (64ull << 20)
#define READER_SLOTS_RESERVED 16u   /* kept for other processes (warmctl cache) */
#define QUARANTINE_KEEP 2           /* quarantined files kept for inspection */
/* An EIO from LMDB is judged a full filesystem when less than this (plus what the
 * transaction was writing) is free: LMDB reports a short write as EIO. */
#define NO_SPACE_MARGIN_BYTES (1ull << 20)

/* ---- filesystems ---------------------------------------------------------------------- */

/* statfs f_type values of network and FUSE filesystems (linux/magic.h and the filesystems'
 * own headers): LMDB's locking and mmap coherence do not hold on them (lmdb.h caveats). */
static const struct {
    uint64_t magic;
    const char *name;
} refused_fs[] = {
    {0x6969, "nfs"},          {0x517B, "smb"},          {0xFF534D42, "cifs"},
    {0xFE534D42, "smb2"},     {0x65735546, "fuse"},     {0x73757245, "coda"},
    {0x5346414F, "afs"},      {0x6B414653, "kafs"},     {0x01021997, "9p"},
    {0x00C36400, "ceph"},     {0x01161970, "gfs2"},     {0x0BD00BD0, "lustre"},
    {0x7461636F, "ocfs2"},    {0x564C, "ncp"},          {0x20030528, "pvfs2"},
    {0x19830326, "fhgfs"},    {0x47504653, "gpfs"},
};

bool store_fs_type_is_refused(uint64_t f_type) {
    for (size_t i = 0; i < ARRAY_SIZE(refused_fs); i++)
        if (refused_fs[i].magic == f_type) return true;
    return false;
}

static int check_fs(const char *path, struct err_detail *d) {
    struct statfs sfs;
    if (statfs(path, &sfs) < 0) return err_set(d, -errno, "statfs '%s': %s", path, strerror(errno));
    uint64_t t = (uint64_t)(unsigned long)sfs.f_type;
    for (size_t i = 0; i < ARRAY_SIZE(refused_fs); i++)
        if (refused_fs[i].magic == t)
            return err_set(d, ERR_STORE_NETFS, "'%s' is on a %s filesystem (f_type 0x%llx)", path,
                           refused_fs[i].name, (unsigned long long)t);
    return 0;
}

/* ---- free space ------------------------------------------------------------------------ */

int store_env_space(struct store_env *env, uint64_t *ret_free_bytes) {
    if (!env || !ret_free_bytes) return ERR_INVALID;
    struct statvfs sv;
    if (statvfs(env->path, &sv) < 0) return -errno;
    /* root may write into the blocks reserved for it; everyone else stops at f_bavail */
    uint64_t blocks = geteuid() == 0 ? (uint64_t)sv.f_bfree : (uint64_t)sv.f_bavail;
    uint64_t bytes;
    *ret_free_bytes = u64_mul(blocks, (uint64_t)sv.f_frsize, &bytes) ? bytes : UINT64_MAX;
    return 0;
}

const char *store_env_path(const struct store_env *env) { return env ? env->path : ""; }

/* Whether errno rc from LMDB means the filesystem is full. LMDB's page flush turns a short
 * write (what a full filesystem gives a multi-page write) into EIO, so EIO counts as no
 * space when less than the transaction's bytes and a margin is free; an EIO with room to
 * spare stays an I/O error. */
static bool rc_is_no_space(struct store_env *env, int rc, uint64_t txn_bytes) {
    if (rc == ENOSPC || rc == EDQUOT) return true;
    if (rc != EIO) return false;
    uint64_t free_bytes = 0;
    return store_env_space(env, &free_bytes) == 0 &&
           free_bytes < txn_bytes + NO_SPACE_MARGIN_BYTES;
}

int store_no_space_detail(struct store_env *env, struct err_detail *d) {
    uint64_t free_bytes = 0;
    if (store_env_space(env, &free_bytes) < 0)
        return err_set(d, -ENOSPC, "no space left on %s", env->path);
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    uint64_t v = free_bytes;
    while (v >= 10240 && u + 1 < ARRAY_SIZE(units)) {
        v >>= 10;
        u++;
    }
    return err_set(d, -ENOSPC, "no space left on %s (%llu %s free)", env->path,
                   (unsigned long long)v, units[u]);
}

/* ---- errors and counters -------------------------------------------------------------- */

int store_map_err(struct store_env *env, int rc) {
    switch (rc) {
    case MDB_SUCCESS:
        return 0;
    case MDB_NOTFOUND:
        return ERR_NOT_FOUND;
    case MDB_MAP_FULL:
    case MDB_TXN_FULL:
        pthread_mutex_lock(&env->mu);
        env->st.n_map_full++;
        pthread_mutex_unlock(&env->mu);
        return ERR_STORE_FULL;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_PANIC:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
        pthread_mutex_lock(&env->mu);
        env->broken = true;
        pthread_mutex_unlock(&env->mu);
        return ERR_STORE_CORRUPT;
    case MDB_READERS_FULL:
        return -EAGAIN;
    default:
        /* a put that spilled dirty pages to a full filesystem */
        if (rc > 0) return rc_is_no_space(env, rc, 0) ? -ENOSPC : -rc;
        return ERR_STORE_LMDB;
    }
}

static bool rc_is_corrupt(int rc) {
    return rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_PANIC || rc == MDB_INVALID ||
           rc == MDB_VERSION_MISMATCH;
}

uint64_t store_stamp_next(struct store_env *env) {
    uint64_t now = time_wall_usec();
    pthread_mutex_lock(&env->mu);
    uint64_t s = MAX(now, env->last_stamp + 1);
    env->last_stamp = s;
    pthread_mutex_unlock(&env->mu);
    return s;
}

int store_fault(struct store_env *env) {
    if (env->opt.fault && env->opt.fault(env->opt.fault_userdata)) return -ENOMEM;
    return 0;
}

void store_count_reject(struct store_env *env, int reason) {
    pthread_mutex_lock(&env->mu);
    env->st.n_rejections++;
    unsigned i;
    for (i = 0; i < env->st.n_reject_reasons; i++)
        if (env->st.rejections[i].reason == reason) break;
    if (i == env->st.n_reject_reasons && i < STORE_REJECT_SLOTS) {
        env->st.rejections[i].reason = reason;
        env->st.n_reject_reasons++;
    }
    if (i < STORE_REJECT_SLOTS) env->st.rejections[i].n++;
    pthread_mutex_unlock(&env->mu);
}

void store_queue(struct store_env *env, const struct store_key *key, uint64_t stamp,
                 enum pending_op op) {
    if (env->opt.read_only) return;
    pthread_mutex_lock(&env->mu);
    if (env->n_pending < STORE_PENDING_MAX)
        env->pending[env->n_pending++] = (struct pending){.key = *key, .stamp = stamp, .op = op};
    else
        env->st.n_touch_dropped++;
    pthread_mutex_unlock(&env->mu);
}

void store_env_reject(struct store_env *env, const struct store_key *key, int reason) {
    store_count_reject(env, reason);
    if (key) store_queue(env, key, 0, PENDING_DEL);
}

bool store_env_is_broken(const struct store_env *env) {
    struct store_env *e = (struct store_env *)env;
    pthread_mutex_lock(&e->mu);
    bool b = e->broken;
    pthread_mutex_unlock(&e->mu);
    return b;
}

/* ---- quarantine ----------------------------------------------------------------------- */

static int path_join(char *out, size_t n, const char *dir, const char *name) {
    int k = snprintf(out, n, "%s/%s", dir, name);
    return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* Deletes all but the newest QUARANTINE_KEEP quarantined files (names sort by time). */
static void quarantine_prune(const char *dir) {
    DIR *dh = opendir(dir);
    if (!dh) return;
    char names[64][64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dh)) && n < 64)
        if (strncmp(de->d_name, "data.mdb.corrupt-", 17) == 0 && strlen(de->d_name) < 64)
            memcpy(names[n++], de->d_name, strlen(de->d_name) + 1);
    closedir(dh);
    /* the stamp is a fixed-width decimal, so string order is time order */
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int k = 0; k < n; k++) newer += strcmp(names[k], names[i]) > 0;
        if (newer >= QUARANTINE_KEEP) {
            char p[4096];
            if (path_join(p, sizeof p, dir, names[i]) == 0) unlink(p);
        }
    }
}

static int quarantine_files(struct store_env *env, const char *reason,
                            struct store_open_info *info, struct err_detail *d) {
    char data[4096], lock[4096], moved[4096], name[64];
    snprintf(name, sizeof name, "data.mdb.corrupt-%020llu", (unsigned long long)time_wall_usec());
    if (path_join(data, sizeof data, env->path, "data.mdb") < 0 ||
        path_join(lock, sizeof lock, env->path, "lock.mdb") < 0 ||
        path_join(moved, sizeof moved, env->path, name) < 0)
        return err_set(d, -ENAMETOOLONG, "store path too long");
    if (rename(data, moved) < 0 && errno != ENOENT)
        return err_set(d, -errno, "moving '%s' aside: %s", data, strerror(errno));
    /* the lock file describes readers of the old file; a fresh one is made at open */
    if (unlink(lock) < 0 && errno != ENOENT)
        return err_set(d, -errno, "removing '%s': %s", lock, strerror(errno));
    quarantine_prune(env->path);
    pthread_mutex_lock(&env->mu);
    env->st.n_quarantined++;
    pthread_mutex_unlock(&env->mu);
    if (info) {
        info->quarantined = true;
        snprintf(info->quarantine_path, sizeof info->quarantine_path, "%s", moved);
        snprintf(info->quarantine_reason, sizeof info->quarantine_reason, "%s", reason);
    }
    return 0;
}

/* ---- open ------------------------------------------------------------------------------ */

static void mdb_close_env(struct store_env *env) {
    if (env->mdb) mdb_env_close(env->mdb);
    env->mdb = NULL;
}

static int open_dbis(struct store_env *env, char *why, size_t why_n) {
    bool ro = env->opt.read_only;
    MDB_txn *t = NULL;
    int rc = mdb_txn_begin(env->mdb, NULL, ro ? MDB_RDONLY : 0, &t);
    if (rc) goto out;
    static const char *const names[] = {STORE_DB_REC, STORE_DB_INFO, STORE_DB_LRU,
                                        STORE_DB_NSIDX, STORE_DB_NS, STORE_DB_META};
    MDB_dbi *dbis[] = {&env->dbi_rec, &env->dbi_info, &env->dbi_lru,
                       &env->dbi_nsidx, &env->dbi_ns, &env->dbi_meta};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        rc = mdb_dbi_open(t, names[i], ro ? 0 : MDB_CREATE, dbis[i]);
        if (rc) goto out;
    }
    MDB_val k = {.mv_size = 6, .mv_data = (void *)"format"}, v;
    rc = mdb_get(t, env->dbi_meta, &k, &v);
    if (rc == MDB_NOTFOUND && !ro) {
        uint32_t ver = STORE_FORMAT_VERSION;
        uint64_t zero = 0;
        MDB_val vv = {.mv_size = sizeof ver, .mv_data = &ver};
        MDB_val bk = {.mv_size = 5, .mv_data = (void *)"bytes"}, bv = {sizeof zero, &zero};
        rc = mdb_put(t, env->dbi_meta, &k, &vv, 0);
        if (!rc) rc = mdb_put(t, env->dbi_meta, &bk, &bv, 0);
    } else if (rc == 0) {
        uint32_t ver = 0;
        if (v.mv_size == sizeof ver) memcpy(&ver, v.mv_data, sizeof ver);
        if (ver != STORE_FORMAT_VERSION) {
            snprintf(why, why_n, "store format version %u, this build reads %u", ver,
                     STORE_FORMAT_VERSION);
            rc = MDB_VERSION_MISMATCH;
            goto out;
        }
    }
    if (rc) goto out;
    /* committed even when read-only: handles opened in an aborted txn are closed */
    rc = mdb_txn_commit(t);
    t = NULL;
out:
    if (t) mdb_txn_abort(t);
    if (rc && !why[0]) snprintf(why, why_n, "opening the databases: %s", mdb_strerror(rc));
    return rc;
}

/* Highest stamp in the LRU index, so stamps keep increasing across restarts. */
static void load_last_stamp(struct store_env *env) {
    MDB_txn *t = NULL;
    MDB_cursor *c = NULL;
    MDB_val k, v;
    if (mdb_txn_begin(env->mdb, NULL, MDB_RDONLY, &t)) return;
    if (mdb_cursor_open(t, env->dbi_lru, &c) == 0 && mdb_cursor_get(c, &k, &v, MDB_LAST) == 0 &&
        k.mv_size >= 8) {
        const uint8_t *p = k.mv_data;
        uint64_t s = 0;
        for (int i = 0; i < 8; i++) s = s << 8 | p[i];
        env->last_stamp = MAX(env->last_stamp, s);
    }
    if (c) mdb_cursor_close(c);
    mdb_txn_abort(t);
}

/* One attempt: create, configure and open LMDB, open the databases, walk the file.
 * Returns 0, a negative error, or 1 with why filled when the file is corrupt. */
static int mdb_open_once(struct store_env *env, char *why, size_t why_n, struct err_detail *d) {
    why[0] = 0;
    int rc = mdb_env_create(&env->mdb);
    if (rc) return err_set(d, store_map_err(env, rc), "mdb_env_create: %s", mdb_strerror(rc));
    if ((rc = mdb_env_set_maxreaders(env->mdb, env->max_readers)) ||
        (rc = mdb_env_set_mapsize(env->mdb, env->map_bytes)) ||
        (rc = mdb_env_set_maxdbs(env->mdb, 8))) {
        mdb_close_env(env);
        return err_set(d, store_map_err(env, rc), "configuring lmdb: %s", mdb_strerror(rc));
    }
    /* MDB_NOTLS: read slots follow transactions, not threads (gRPC worker pools). No
     * MDB_WRITEMAP and no MDB_NOSYNC: commits are durable (§3.4). */
    unsigned flags = MDB_NOTLS | (env->opt.no_meta_sync ? MDB_NOMETASYNC : 0) |
                     (env->opt.read_only ? MDB_RDONLY : 0);
    rc = mdb_env_open(env->mdb, env->path, flags, 0600);
    if (rc) {
        mdb_close_env(env);
        if (rc_is_corrupt(rc)) {
            snprintf(why, why_n, "mdb_env_open: %s", mdb_strerror(rc));
            return 1;
        }
        return err_set(d, store_map_err(env, rc), "opening lmdb in '%s': %s", env->path,
                       mdb_strerror(rc));
    }
    if (!env->opt.read_only) {
        /* files stay 0600 even when they were made by an older build or another umask */
        char p[4096];
        if (path_join(p, sizeof p, env->path, "data.mdb") == 0) chmod(p, 0600);
        if (path_join(p, sizeof p, env->path, "lock.mdb") == 0) chmod(p, 0600);
    }
    MDB_stat ms;
    if (mdb_env_stat(env->mdb, &ms) == 0) env->psize = ms.ms_psize;
    /* Structural walk of the snapshot we hold: LMDB itself trusts every page it reads, so
     * overwritten pages would otherwise surface later as crashes or MDB_CORRUPTED. */
    for (int attempt = 0; attempt < 4; attempt++) {
        MDB_txn *t = NULL;
        rc = mdb_txn_begin(env->mdb, NULL, MDB_RDONLY, &t);
        if (rc) {
            mdb_close_env(env);
            if (rc_is_corrupt(rc)) {
                snprintf(why, why_n, "%s", mdb_strerror(rc));
                return 1;
            }
            return err_set(d, store_map_err(env, rc), "read txn: %s", mdb_strerror(rc));
        }
        uint64_t n_pages = 0;
        int w = store_walk_file(env, t, &n_pages, why, why_n);
        mdb_txn_abort(t);
        if (w == 1) continue; /* a writer moved the snapshot on; try again */
        if (w < 0) {
            mdb_close_env(env);
            if (w == ERR_STORE_CORRUPT) return 1;
            return err_set(d, w, "checking '%s': %s", env->path, err_str(w));
        }
        break;
    }
    rc = open_dbis(env, why, why_n);
    if (rc) {
        mdb_close_env(env);
        if (rc_is_corrupt(rc)) return 1;
        if (rc == MDB_NOTFOUND) return err_set(d, ERR_NOT_FOUND, "'%s' holds no store", env->path);
        return err_set(d, store_map_err(env, rc), "%s", why);
    }
    load_last_stamp(env);
    return 0;
}

static int mdb_open_env(struct store_env *env, struct store_open_info *info,
                        struct err_detail *d) {
    char why[512];
    char data[4096];
    if (path_join(data, sizeof data, env->path, "data.mdb") < 0)
        return err_set(d, -ENAMETOOLONG, "store path too long");
    bool existed = access(data, F_OK) == 0;
    /* until this succeeds there is no LMDB env: every call fails cleanly */
    pthread_mutex_lock(&env->mu);
    env->broken = true;
    pthread_mutex_unlock(&env->mu);
    int r = mdb_open_once(env, why, sizeof why, d);
    if (r == 1) {
        if (env->opt.read_only)
            return err_set(d, ERR_STORE_CORRUPT, "'%s' is corrupt: %s", data, why);
        r = quarantine_files(env, why, info, d);
        if (r < 0) return r;
        existed = false;
        r = mdb_open_once(env, why, sizeof why, d);
        if (r == 1) return err_set(d, ERR_STORE_CORRUPT, "a fresh store in '%s' is corrupt: %s",
                                   env->path, why);
    }
    if (r < 0) return r;
    if (info) info->created = info->created || !existed;
    int cleared = 0;
    store_env_check_readers(env, &cleared);
    if (info) info->n_readers_cleared += cleared;
    pthread_mutex_lock(&env->mu);
    env->broken = false;
    pthread_mutex_unlock(&env->mu);
    if (!env->opt.read_only) {
        /* a smaller budget than last time: evict now rather than at the next write */
        r = store_env_flush(env);
        if (r < 0) return err_set(d, r, "evicting to the budget: %s", err_str(r));
    }
    return 0;
}

int store_env_open(const struct store_options *opt, struct store_env **ret,
                   struct store_open_info *info, struct err_detail *d) {
    if (!opt || !opt->path || !ret) return err_set(d, ERR_INVALID, "store: no options or path");
    if (opt->budget_bytes < (1u << 20))
        return err_set(d, ERR_INVALID, "store: budget_bytes %llu is below 1 MiB",
                       (unsigned long long)opt->budget_bytes);
    unsigned high = opt->high_water_pct ? opt->high_water_pct : DEFAULT_HIGH_PCT;
    unsigned low = opt->low_water_pct ? opt->low_water_pct : DEFAULT_LOW_PCT;
    if (high > 100 || low >= high)
        return err_set(d, ERR_INVALID, "store: water marks low %u%% / high %u%% are not 0 < low < high <= 100",
                       low, high);
    uint64_t map = opt->map_bytes;
    if (!map && (!u64_mul(opt->budget_bytes, 2, &map) || !u64_add(map, MAP_SLACK_BYTES, &map)))
        return err_set(d, ERR_OVERFLOW, "store: budget_bytes too large");
    if (map < opt->budget_bytes + (16u << 20))
        return err_set(d, ERR_INVALID, "store: map_bytes %llu must exceed the budget by 16 MiB",
                       (unsigned long long)map);
    if (info) memset(info, 0, sizeof *info);

    struct store_env *env = calloc(1, sizeof *env);
    if (!env) return -ENOMEM;
    int k = snprintf(env->path, sizeof env->path, "%s", opt->path);
    if (k < 0 || (size_t)k >= sizeof env->path - 64) {
        free(env);
        return err_set(d, -ENAMETOOLONG, "store path too long");
    }
    env->opt = *opt;
    env->opt.path = env->path;
    env->budget = opt->budget_bytes;
    env->high = opt->budget_bytes / 100 * high;
    env->low = opt->budget_bytes / 100 * low;
    env->map_bytes = map;
    unsigned threads = opt->n_threads ? opt->n_threads : 1;
    env->max_readers = MAX(126u, 2 * threads) + READER_SLOTS_RESERVED;
    env->reader_limit = env->max_readers - READER_SLOTS_RESERVED;
    pthread_mutex_init(&env->mu, NULL);
    pthread_cond_init(&env->reader_cv, NULL);
    env->last_reader_check_usec = time_now_usec();

    int r;
    if (!opt->read_only && mkdir(env->path, 0700) < 0 && errno != EEXIST) {
        r = err_set(d, -errno, "creating '%s': %s", env->path, strerror(errno));
        goto fail;
    }
    r = check_fs(env->path, d);
    if (r < 0) goto fail;
    r = mdb_open_env(env, info, d);
    if (r < 0) goto fail;
    *ret = env;
    return 0;
fail:
    store_env_close(env);
    return r;
}

void store_env_close(struct store_env *env) {
    if (!env) return;
    if (env->mdb && !env->opt.read_only && !env->broken && env->n_txn == 0) store_env_flush(env);
    mdb_close_env(env);
    pthread_cond_destroy(&env->reader_cv);
    pthread_mutex_destroy(&env->mu);
    free(env);
}

static int env_idle(struct store_env *env, struct err_detail *d) {
    pthread_mutex_lock(&env->mu);
    unsigned n = env->n_txn;
    pthread_mutex_unlock(&env->mu);
    if (n) return err_set(d, -EBUSY, "store: %u transactions are still live", n);
    if (env->opt.read_only) return err_set(d, -EROFS, "store: opened read-only");
    return 0;
}

int store_env_quarantine(struct store_env *env, const char *reason,
                         struct store_open_info *info, struct err_detail *d) {
    int r = env_idle(env, d);
    if (r < 0) return r;
    if (info) memset(info, 0, sizeof *info);
    mdb_close_env(env);
    r = quarantine_files(env, reason ? reason : "quarantined by the caller", info, d);
    if (r < 0) return r;
    if (info) info->created = true;
    return mdb_open_env(env, info, d);
}

int store_env_reopen(struct store_env *env, struct store_open_info *info,
                     struct err_detail *d) {
    int r = env_idle(env, d);
    if (r < 0) return r;
    if (info) memset(info, 0, sizeof *info);
    mdb_close_env(env);
    pthread_mutex_lock(&env->mu);
    env->n_pending = 0;
    pthread_mutex_unlock(&env->mu);
    return mdb_open_env(env, info, d);
}

int store_env_check_readers(struct store_env *env, int *ret_cleared) {
    int dead = 0;
    int rc = env->mdb ? mdb_reader_check(env->mdb, &dead) : 0;
    pthread_mutex_lock(&env->mu);
    env->last_reader_check_usec = time_now_usec();
    if (rc == 0) env->st.n_readers_cleared += (uint64_t)dead;
    pthread_mutex_unlock(&env->mu);
    if (ret_cleared) *ret_cleared = rc == 0 ? dead : 0;
    return rc ? store_map_err(env, rc) : 0;
}

static void maybe_check_readers(struct store_env *env) {
    uint64_t period = env->opt.reader_check_usec ? env->opt.reader_check_usec
                                                 : DEFAULT_READER_CHECK_USEC;
    pthread_mutex_lock(&env->mu);
    bool due = time_now_usec() - env->last_reader_check_usec >= period;
    pthread_mutex_unlock(&env->mu);
    if (due) store_env_check_readers(env, NULL);
}

/* ---- transactions ---------------------------------------------------------------------- */

static void reader_release(struct store_env *env) {
    pthread_mutex_lock(&env->mu);
    env->n_readers--;
    env->n_txn--;
    pthread_cond_signal(&env->reader_cv);
    pthread_mutex_unlock(&env->mu);
}

static int begin_read(struct store_env *env, struct store_txn *txn) {
    /* Admission: at most reader_limit read transactions of this process at once, so
     * LMDB's reader table (max_readers) cannot fill up from here. */
    pthread_mutex_lock(&env->mu);
    while (env->n_readers >= env->reader_limit) pthread_cond_wait(&env->reader_cv, &env->mu);
    env->n_readers++;
    env->n_txn++;
    bool broken = env->broken;
    pthread_mutex_unlock(&env->mu);
    if (broken) {
        reader_release(env);
        return ERR_STORE_CORRUPT;
    }
    int rc = 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        rc = mdb_txn_begin(env->mdb, NULL, MDB_RDONLY, &txn->mdb);
        if (rc != MDB_READERS_FULL) break;
        /* other processes hold the slots: clear dead ones, then wait a little */
        store_env_check_readers(env, NULL);
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (rc) {
        reader_release(env);
        return store_map_err(env, rc);
    }
    return 0;
}

static int begin_write(struct store_env *env, struct store_txn *txn) {
    if (env->opt.read_only) return -EROFS;
    pthread_mutex_lock(&env->mu);
    bool broken = env->broken;
    if (!broken) env->n_txn++;
    pthread_mutex_unlock(&env->mu);
    if (broken) return ERR_STORE_CORRUPT;
    maybe_check_readers(env);
    int r = store_fault(env);
    int rc = r < 0 ? 0 : mdb_txn_begin(env->mdb, NULL, 0, &txn->mdb);
    if (!r && rc) r = store_map_err(env, rc);
    if (r < 0) {
        pthread_mutex_lock(&env->mu);
        env->n_txn--;
        pthread_mutex_unlock(&env->mu);
        return r;
    }
    txn->stamp = store_stamp_next(env);
    store_pending_apply(txn);
    return 0;
}

int store_txn_begin(struct store_env *env, enum store_txn_mode mode, struct store_txn **ret) {
    if (!env || !ret || mode >= STORE_TXN_MODE_COUNT) return ERR_INVALID;
    struct store_txn *txn = calloc(1, sizeof *txn);
    if (!txn) return -ENOMEM;
    txn->env = env;
    txn->mode = mode;
    int r = mode == STORE_TXN_READ ? begin_read(env, txn) : begin_write(env, txn);
    if (r < 0) {
        free(txn);
        return r;
    }
    *ret = txn;
    return 0;
}

static void txn_end(struct store_txn *txn) {
    if (txn->mode == STORE_TXN_READ)
        reader_release(txn->env);
    else {
        pthread_mutex_lock(&txn->env->mu);
        txn->env->n_txn--;
        pthread_mutex_unlock(&txn->env->mu);
    }
    free(txn);
}

int store_txn_commit(struct store_txn *txn) {
    if (!txn) return ERR_INVALID;
    struct store_env *env = txn->env;
    int r = 0;
    if (txn->mode == STORE_TXN_READ) {
        mdb_txn_abort(txn->mdb);
    } else if (txn->err < 0) {
        mdb_txn_abort(txn->mdb);
        r = txn->err;
    } else if ((r = store_fault(env)) < 0) {
        mdb_txn_abort(txn->mdb);
    } else {
        int rc = mdb_txn_commit(txn->mdb);
        if (rc > 0 && rc_is_no_space(env, rc, txn->put_bytes)) {
            /* A full filesystem. LMDB writes a transaction's pages to free or new pages
             * and the meta page last, and a failure before the meta page aborts the
             * transaction: the committed state is untouched and the pages written are
             * free again. Not corruption, so the env stays usable; the write is lost
             * and a later one succeeds when there is space. */
            r = -ENOSPC;
        } else if (rc > 0) {
            /* An I/O error (EIO, a failed fdatasync) during a commit: the state of
             * the page cache is unknown (fsyncgate). Never retry blindly; the caller
             * reopens or quarantines (P1-4). */
            pthread_mutex_lock(&env->mu);
            env->broken = true;
            pthread_mutex_unlock(&env->mu);
            r = -rc;
        } else {
            r = store_map_err(env, rc);
        }
    }
    txn_end(txn);
    return r;
}

void store_txn_abort(struct store_txn *txn) {
    if (!txn) return;
    mdb_txn_abort(txn->mdb);
    txn_end(txn);
}

/* ---- maintenance and stats -------------------------------------------------------------- */

int store_env_flush(struct store_env *env) {
    if (env->opt.read_only) return 0;
    struct store_txn *txn = NULL;
    int r = store_txn_begin(env, STORE_TXN_WRITE, &txn); /* applies pending work */
    if (r < 0) return r;
    uint64_t bytes = 0;
    r = store_bytes_read(txn, &bytes);
    if (r >= 0 && bytes > env->high) r = store_evict_to(txn, env->low);
    if (r < 0) {
        store_txn_abort(txn);
        return r;
    }
    return store_txn_commit(txn);
}

int store_env_stats(struct store_env *env, struct store_stats *ret) {
    if (!env || !ret) return ERR_INVALID;
    pthread_mutex_lock(&env->mu);
    *ret = env->st;
    pthread_mutex_unlock(&env->mu);
    ret->budget_bytes = env->budget;
    ret->high_water_bytes = env->high;
    ret->low_water_bytes = env->low;
    ret->map_bytes = env->map_bytes;
    ret->max_readers = env->max_readers;
    char p[4096];
    struct stat sb;
    if (path_join(p, sizeof p, env->path, "data.mdb") == 0 && stat(p, &sb) == 0)
        ret->file_bytes = (uint64_t)sb.st_blocks * 512u;

    struct store_txn *txn = NULL;
    int r = store_txn_begin(env, STORE_TXN_READ, &txn);
    if (r < 0) return r;
    r = store_bytes_read(txn, &ret->bytes);
    MDB_cursor *c = NULL;
    int rc = r < 0 ? 0 : mdb_cursor_open(txn->mdb, env->dbi_info, &c);
    MDB_val k, v;
    for (int op = MDB_FIRST; !rc && r >= 0; op = MDB_NEXT) {
        rc = mdb_cursor_get(c, &k, &v, op);
        if (rc) break;
        ret->n_entries++;
        if (k.mv_size == 32)
            ret->n_tails++;
        else
            ret->n_chunks++;
    }
    if (c) mdb_cursor_close(c);
    if (r >= 0 && rc && rc != MDB_NOTFOUND) r = store_map_err(env, rc);
    store_txn_abort(txn);
    return r < 0 ? r : 0;
}
