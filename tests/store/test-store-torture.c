// labels: slow
/* kill -9 torture (P0-6). Each cycle forks a writer process (the parent holds no env when
 * it forks) that opens the store and runs 8 writer threads committing records of
 * 64 KiB – 8 MiB; after a random 20–200 ms the parent SIGKILLs it. The parent then opens
 * the store and checks (a ninth thread does lookups, so the kill also leaves reader slots
 * behind): it opens without quarantine, every acknowledged write is present
 * with its exact blob, the whole store passes the structural walk and every checksum, and
 * no stale reader survives the open. Cycles: WARM_TORTURE_CYCLES (default 300).
 *
 * Acknowledgements travel over a pipe: the writer sends an intent before store_write and
 * an ack after it returns 0, so the parent knows what was acknowledged and what was in
 * flight when the process died (in-flight records may be present or absent, but a present
 * one must be whole). The parent purges the store whenever it holds more than a quarter
 * of the budget, and each cycle writes at most 96 MiB of records as the store accounts
 * them, so nothing acknowledged is ever evicted between two checks. The cap is taken by
 * compare-and-swap and never goes below zero: however fast the disk, a cycle's total is
 * bounded (an unsigned fetch-and-subtract wrapped past zero, and a fast disk then wrote
 * 40 GB in 300 cycles and had the budget evict acknowledged records). As a second guard
 * every writer reports the store's eviction count with each answer, and a record missing
 * after a cycle in which the store evicted is counted as evicted, not lost (and fails the
 * test on its own line). */
#include "store-test.h"
#include "store/env.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_WRITERS 8
#define C 256u
#define MIN_BLOB (64u << 10)
#define MAX_BLOB (8u << 20)
#define BUDGET (256ull << 20)
#define CYCLE_CAP (96ull << 20)
#define PURGE_ABOVE (BUDGET / 4)
#define MAX_INTENTS 4096
/* The store evicts once a write would pass 90 % of the budget (the default high-water
 * mark); a cycle starts at most PURGE_ABOVE full and adds at most CYCLE_CAP. */
_Static_assert(PURGE_ABOVE + CYCLE_CAP <= BUDGET / 100 * 90,
               "a cycle's writes must fit under the high-water mark: no eviction by design");
_Static_assert(CYCLE_CAP / MIN_BLOB <= MAX_INTENTS, "every intent of a cycle is kept");

static const uint8_t FP[16] = {0x70, 0x12};

enum msg_type { MSG_OPEN_FAILED = 1, MSG_INTENT, MSG_ACK, MSG_ERROR };
struct msg {
    uint8_t type, key_len;
    uint8_t key[32];
    int32_t status;
    uint64_t blob_bytes, blob_hash;
    uint64_t n_evictions;      /* the store's evictions in this process so far */
};
_Static_assert(sizeof(struct msg) < 512, "pipe writes up to PIPE_BUF are atomic");

/* Random bytes made once by the parent before the first fork; a record's blob is a slice
 * of it at a random offset (no per-record fill: the writers spend their time in
 * commits, as the daemon's writer thread does). */
#define BASE_BYTES (16u << 20)
static uint8_t *base_bytes;

struct writer {
    struct store_env *env;
    const struct store_chain *ch;
    int fd;
    unsigned cycle, id;
    _Atomic uint64_t *budget_left;
};

static void send_msg(int fd, const struct msg *m) {
    if (write(fd, m, sizeof *m) != (ssize_t)sizeof *m) _exit(3);
}

/* Takes n bytes from the cycle's cap; false, and nothing taken, when fewer are left. */
static bool cap_take(_Atomic uint64_t *left, uint64_t n) {
    uint64_t cur = atomic_load(left);
    do {
        if (cur < n) return false;
    } while (!atomic_compare_exchange_weak(left, &cur, cur - n));
    return true;
}

static uint64_t evictions(struct store_env *env) {
    pthread_mutex_lock(&env->mu);
    uint64_t n = env->st.n_evictions;
    pthread_mutex_unlock(&env->mu);
    return n;
}

static void *writer_main(void *p) {
    struct writer *w = p;
    int32_t t[C];
    uint64_t rng = (uint64_t)w->cycle * 1000003u + w->id * 7919u + 1;
    for (unsigned seq = 0;; seq++) {
        /* log-uniform in [64 KiB, 8 MiB]: many small records, some large */
        double u = (double)(store_test_rng(&rng) >> 11) / 9007199254740992.0;
        size_t n = (size_t)((double)MIN_BLOB * exp2(u * 7.0));
        n = MIN(MAX(n, (size_t)MIN_BLOB), (size_t)MAX_BLOB);
        uint64_t seed = store_test_rng(&rng);
        const uint8_t *blob = base_bytes + seed % (BASE_BYTES - n + 1);
        bool tail = seq % 4 == 3;
        uint32_t n_tok = tail ? 1 + (uint32_t)(seed % (C - 1)) : C;
        /* charged as the store accounts it (pages and index), not by its blob alone */
        uint64_t charge = store_rec_bytes(w->env, sizeof(struct store_rec_disk) +
                                                      (size_t)n_tok * 4 + n);
        if (!cap_take(w->budget_left, charge)) {
            for (;;) pause(); /* this cycle's share is written: wait for the kill */
        }
        store_test_tokens(t, n_tok, seed);
        struct store_put put = {.chain = w->ch, .kind = tail ? STORE_KIND_TAIL : STORE_KIND_CHUNK,
                                .parent = w->ch->h0, .tokens = t, .n_tokens = n_tok,
                                .blob = blob, .blob_bytes = n};
        struct store_key key = tail ? store_key_tail(w->ch->h0, t, n_tok)
                                    : store_key_chunk(store_chain_next(w->ch->h0, t, C));
        struct msg m = {.type = MSG_INTENT, .key_len = key.len, .blob_bytes = n,
                        .blob_hash = hash64(blob, n)};
        memcpy(m.key, key.bytes, key.len);
        send_msg(w->fd, &m);
        int r = store_write(w->env, &put, NULL, NULL);
        m.type = r < 0 ? MSG_ERROR : MSG_ACK;
        m.status = r;
        m.n_evictions = evictions(w->env);
        send_msg(w->fd, &m);
    }
    return NULL;
}

/* A reader as the daemon's request threads are: lookups in read transactions, holding
 * each for a moment, so that the kill often leaves a reader slot behind. */
static void *reader_main(void *p) {
    struct writer *w = p;
    int32_t t[4 * C];
    store_test_tokens(t, ARRAY_SIZE(t), w->cycle);
    for (;;) {
        struct store_txn *txn = NULL;
        if (store_txn_begin(w->env, STORE_TXN_READ, &txn) < 0) _exit(6);
        struct store_match m;
        if (store_lookup(txn, w->ch, t, ARRAY_SIZE(t), &m, NULL) < 0) _exit(7);
        usleep(2000);
        store_match_done(&m);
        store_txn_abort(txn);
    }
    return NULL;
}

static _Noreturn void child_main(int fd, unsigned cycle) {
    struct store_options o = {.path = store_test_dir("torture"), .budget_bytes = BUDGET,
                              .n_threads = N_WRITERS};
    struct store_env *env = NULL;
    int r = store_env_open(&o, &env, NULL, NULL);
    if (r < 0) {
        send_msg(fd, &(struct msg){.type = MSG_OPEN_FAILED, .status = r});
        _exit(2);
    }
    struct store_chain ch;
    store_chain_init(&ch, "torture", FP, 1, 1, C);
    _Atomic uint64_t left = CYCLE_CAP;
    pthread_t th[N_WRITERS + 1];
    struct writer w[N_WRITERS + 1];
    for (unsigned i = 0; i <= N_WRITERS; i++) {
        w[i] = (struct writer){.env = env, .ch = &ch, .fd = fd, .cycle = cycle, .id = i,
                               .budget_left = &left};
        if (pthread_create(&th[i], NULL, i < N_WRITERS ? writer_main : reader_main, &w[i]) != 0)
            _exit(5);
    }
    for (;;) pause();
}

struct ack {
    struct store_key key;
    uint64_t blob_bytes, blob_hash;
};

struct totals {
    unsigned cycles, opens_ok, quarantines, open_failures;
    uint64_t acked, verified, lost, checksum_failures, wrong_blob, write_errors;
    uint64_t in_flight, in_flight_present, readers_cleared, readers_left, purges;
    uint64_t bytes_acked, check_failures;
    uint64_t evicting_cycles, evicted;
};

/* mdb_reader_list prints a header line, then one line per slot in use, or
 * "(no active readers)" */
static int count_fn(const char *msg, void *ctx) {
    if (!strstr(msg, "no active readers") && !strstr(msg, "pid")) (*(int *)ctx)++;
    return 0;
}

static unsigned cycles_wanted(void) {
    const char *e = getenv("WARM_TORTURE_CYCLES");
    long n = e ? strtol(e, NULL, 10) : 300;
    return n > 0 && n < 100000 ? (unsigned)n : 300;
}

TEST(kill9) {
    unsigned n_cycles = cycles_wanted();
    struct totals tot = {0};
    size_t cap = 4096, n_acks = 0;
    struct ack *acks = malloc(cap * sizeof *acks);
    struct msg *intents = malloc(MAX_INTENTS * sizeof *intents);
    ASSERT_TRUE(acks && intents);
    uint64_t rng = 12345;
    base_bytes = malloc(BASE_BYTES);
    ASSERT_TRUE(base_bytes != NULL);
    store_test_fill(base_bytes, BASE_BYTES, 777);
    uint64_t t_start = time_now_usec();
    bool evicted_since = false; /* an eviction since the acks were last cleared */
    /* make the store once so the first cycle's open is not a create */
    struct store_env *env = NULL;
    ASSERT_OK(store_test_open("torture", BUDGET, &env, NULL));
    store_env_close(env);
    env = NULL;

    for (unsigned cycle = 0; cycle < n_cycles; cycle++) {
        int pfd[2];
        ASSERT_TRUE(pipe(pfd) == 0);
        uint64_t t_fork = time_now_usec();
        pid_t pid = fork(); /* no env is open in this process */
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            child_main(pfd[1], cycle);
        }
        close(pfd[1]);
        uint64_t delay = 20000 + store_test_rng(&rng) % 180001; /* 20–200 ms */
        uint64_t spent = time_now_usec() - t_fork;
        if (spent < delay) usleep((useconds_t)(delay - spent));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);

        /* what the writer acknowledged before it died */
        size_t n_int = 0;
        struct msg m;
        bool open_failed = false;
        uint64_t cycle_evictions = 0;
        while (read(pfd[0], &m, sizeof m) == (ssize_t)sizeof m) {
            cycle_evictions = MAX(cycle_evictions, m.n_evictions);
            if (m.type == MSG_OPEN_FAILED) {
                open_failed = true;
                fprintf(stderr, "cycle %u: writer could not open the store: %s\n", cycle,
                        err_str(m.status));
            } else if (m.type == MSG_INTENT) {
                if (n_int < MAX_INTENTS) intents[n_int++] = m;
            } else if (m.type == MSG_ERROR) {
                tot.write_errors++;
                fprintf(stderr, "cycle %u: write failed: %s\n", cycle, err_str(m.status));
            } else if (m.type == MSG_ACK) {
                for (size_t i = 0; i < n_int; i++)
                    if (intents[i].type == MSG_INTENT && intents[i].key_len == m.key_len &&
                        memcmp(intents[i].key, m.key, m.key_len) == 0)
                        intents[i].type = 0; /* no longer in flight */
                if (n_acks == cap) {
                    cap *= 2;
                    acks = realloc(acks, cap * sizeof *acks);
                    ASSERT_TRUE(acks != NULL);
                }
                struct ack *a = &acks[n_acks++];
                a->key.len = m.key_len;
                memcpy(a->key.bytes, m.key, m.key_len);
                a->blob_bytes = m.blob_bytes;
                a->blob_hash = m.blob_hash;
                tot.acked++;
                tot.bytes_acked += m.blob_bytes;
            }
        }
        close(pfd[0]);
        if (open_failed) tot.open_failures++;

        /* restart */
        struct store_open_info info;
        struct err_detail d = {0};
        struct store_options o = {.path = store_test_dir("torture"), .budget_bytes = BUDGET,
                                  .n_threads = N_WRITERS};
        int r = store_env_open(&o, &env, &info, &d);
        if (r < 0) {
            tot.open_failures++;
            TEST_FAIL_("cycle %u: open failed: %s", cycle, err_msg(&d, r));
        }
        /* the open evicts too when the store is over its budget */
        cycle_evictions += evictions(env);
        if (cycle_evictions) {
            tot.evicting_cycles++;
            fprintf(stderr, "cycle %u: the store evicted %llu records\n", cycle,
                    (unsigned long long)cycle_evictions);
            /* what went missing may have been evicted: from now on nothing is "lost" */
            evicted_since = true;
        }
        tot.opens_ok++;
        tot.readers_cleared += (uint64_t)info.n_readers_cleared;
        if (info.quarantined) {
            tot.quarantines++;
            fprintf(stderr, "cycle %u: quarantined: %s\n", cycle, info.quarantine_reason);
            n_acks = 0;
            evicted_since = false;
        }
        int n_readers = 0;
        mdb_reader_list(env->mdb, count_fn, &n_readers);
        /* the first opener after a crash resets LMDB's reader table itself; a live
         * process's stale slot is test-env's stale_reader */
        if (n_readers > 0) tot.readers_left++;

        struct store_txn *txn = NULL;
        ASSERT_OK(store_txn_begin(env, STORE_TXN_READ, &txn));
        for (size_t i = 0; i < n_acks; i++) {
            struct store_rec rec;
            r = store_get(txn, &acks[i].key, &rec, NULL);
            if (r == ERR_NOT_FOUND && evicted_since)
                tot.evicted++;
            else if (r == ERR_NOT_FOUND)
                tot.lost++;
            else if (r == ERR_CHECKSUM)
                tot.checksum_failures++;
            else if (r < 0 || rec.blob_bytes != acks[i].blob_bytes ||
                     hash64(rec.blob, rec.blob_bytes) != acks[i].blob_hash)
                tot.wrong_blob++;
            else
                tot.verified++;
        }
        for (size_t i = 0; i < n_int; i++) {
            if (intents[i].type != MSG_INTENT) continue;
            tot.in_flight++;
            struct store_key k = {.len = intents[i].key_len};
            memcpy(k.bytes, intents[i].key, k.len);
            struct store_rec rec;
            r = store_get(txn, &k, &rec, NULL);
            if (r == 0 && rec.blob_bytes == intents[i].blob_bytes &&
                hash64(rec.blob, rec.blob_bytes) == intents[i].blob_hash)
                tot.in_flight_present++;
            else if (r == ERR_CHECKSUM)
                tot.checksum_failures++;
        }
        store_txn_abort(txn);
        struct store_check_report rep;
        if (store_env_check(env, &rep) < 0) {
            tot.check_failures++;
            fprintf(stderr, "cycle %u: check: %s\n", cycle, rep.first_problem);
        }
        tot.checksum_failures += rep.n_checksum_failures;

        struct store_stats st;
        ASSERT_OK(store_env_stats(env, &st));
        if (st.bytes > PURGE_ABOVE) {
            ASSERT_OK(store_purge(env, NULL, NULL));
            n_acks = 0;
            evicted_since = false;
            tot.purges++;
        }
        store_env_close(env);
        env = NULL;
        tot.cycles++;
    }
    free(acks);
    free(intents);
    free(base_bytes);
    double secs = (double)(time_now_usec() - t_start) / 1e6;
    printf("  kill -9 torture: %u cycles in %.1f s (%d writer threads and a reader, records "
           "64 KiB-8 MiB, killed 20-200 ms after the fork)\n"
           "  store opened on %u/%u restarts, %u quarantined, %u open failures\n"
           "  acknowledged writes: %llu (%.0f MiB); verified present %llu times, lost %llu, "
           "wrong blob %llu\n"
           "  cycles in which the store evicted: %llu (records missing after one: %llu)\n"
           "  checksum failures: %llu; full checks failed: %llu\n"
           "  in flight at the kill: %llu (%llu committed, the rest absent)\n"
           "  write errors: %llu; stale readers cleared at open: %llu; restarts with readers "
           "left: %llu; purges: %llu\n",
           tot.cycles, secs, N_WRITERS, tot.opens_ok, tot.cycles, tot.quarantines,
           tot.open_failures, (unsigned long long)tot.acked,
           (double)tot.bytes_acked / (1 << 20), (unsigned long long)tot.verified,
           (unsigned long long)tot.lost, (unsigned long long)tot.wrong_blob,
           (unsigned long long)tot.evicting_cycles, (unsigned long long)tot.evicted,
           (unsigned long long)tot.checksum_failures, (unsigned long long)tot.check_failures,
           (unsigned long long)tot.in_flight, (unsigned long long)tot.in_flight_present,
           (unsigned long long)tot.write_errors, (unsigned long long)tot.readers_cleared,
           (unsigned long long)tot.readers_left, (unsigned long long)tot.purges);
    ASSERT_EQ(tot.cycles, n_cycles);
    ASSERT_EQ(tot.opens_ok, n_cycles);
    ASSERT_EQ(tot.quarantines, 0);
    ASSERT_EQ(tot.open_failures, 0);
    ASSERT_EQ(tot.evicting_cycles, 0); /* the cap above keeps every cycle under the budget */
    ASSERT_EQ(tot.evicted, 0);
    ASSERT_EQ(tot.lost, 0);
    ASSERT_EQ(tot.wrong_blob, 0);
    ASSERT_EQ(tot.checksum_failures, 0);
    ASSERT_EQ(tot.check_failures, 0);
    ASSERT_EQ(tot.write_errors, 0);
    ASSERT_EQ(tot.readers_left, 0);
    ASSERT_TRUE(tot.acked > 0);
}

TEST_MAIN(T(kill9))
