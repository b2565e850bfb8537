/* store — internals shared by the store's .c files (private). */
#pragma once

#include "store/record.h"

#include <pthread.h>

/* A queued refresh (touch) or deletion, applied by the next write transaction. */
enum pending_op { PENDING_TOUCH, PENDING_DEL };
struct pending {
    struct store_key key;
    uint64_t stamp;
    enum pending_op op;
};
#define STORE_PENDING_MAX 4096

struct store_env {
    MDB_env *mdb;
    MDB_dbi dbi_rec, dbi_info, dbi_lru, dbi_nsidx, dbi_ns, dbi_meta;
    struct store_options opt;      /* opt.path points at path below */
    char path[3072];               /* the directory */
    unsigned psize;                /* LMDB page size */
    uint64_t budget, high, low, map_bytes;
    unsigned max_readers, reader_limit;

    pthread_mutex_t mu;            /* guards everything below */
    pthread_cond_t reader_cv;      /* a read slot became free */
    unsigned n_readers;            /* live read transactions of this process */
    unsigned n_txn;                /* live transactions of this process */
    bool broken;                   /* see store_env_is_broken */
    uint64_t last_stamp;           /* stamps are strictly increasing within the process */
    uint64_t last_reader_check_usec;
    struct pending pending[STORE_PENDING_MAX];
    size_t n_pending;
    struct store_stats st;         /* event counters (the in-memory part) */
};

struct store_txn {
    struct store_env *env;
    MDB_txn *mdb;
    enum store_txn_mode mode;
    uint64_t stamp;                /* write: the refresh stamp of this transaction */
    int err;                       /* write: sticky failure; commit then aborts */
    uint64_t put_bytes;            /* write: record bytes put so far (no-space judgement) */
};

/* env.c */
int store_map_err(struct store_env *env, int rc);
/* Fills d with "no space left on '<path>' (<free> free)" and returns -ENOSPC. */
int store_no_space_detail(struct store_env *env, struct err_detail *d);
uint64_t store_stamp_next(struct store_env *env);
int store_fault(struct store_env *env);
void store_count_reject(struct store_env *env, int reason);
void store_queue(struct store_env *env, const struct store_key *key, uint64_t stamp,
                 enum pending_op op);

/* record.c */
uint64_t store_rec_bytes(const struct store_env *env, size_t value_len);
int store_rec_decode(const MDB_val *key, const MDB_val *val, bool verify_blob,
                     struct store_rec *ret, struct err_detail *d);
int store_info_read(struct store_txn *txn, const struct store_key *key,
                    struct store_info_disk *ret);
int store_bytes_read(struct store_txn *txn, uint64_t *ret);
int store_rec_delete(struct store_txn *txn, const struct store_key *key, uint64_t *ret_bytes);
int store_evict_to(struct store_txn *txn, uint64_t target_bytes);
int store_touch_chain(struct store_txn *txn, struct store_key key, uint64_t stamp);
int store_pending_apply(struct store_txn *txn);
struct hash128 store_ns_id(const char *ns);

/* verify.c: the structural walk of data.mdb; 0 clean, ERR_STORE_CORRUPT with a message
 * in problem, 1 when the snapshot moved on (skipped). */
int store_walk_file(struct store_env *env, MDB_txn *txn, uint64_t *ret_pages, char *problem,
                    size_t problem_size);
