/* store — the persistent prompt store: KV-state blobs of prompt chunks in one LMDB
 * environment (DESIGN.md §4).
 *
 * What it keeps. A prompt of N tokens is cut into chunks of C tokens. Chunk i of a
 * prompt is stored under the chain key h[i+1], where h0 is seeded from the namespace, the
 * model fingerprint and the K/V cache types, and h[i+1] = XXH3-128(h[i] ‖ tokens of chunk
 * i). The last partial chunk (1 … C-1 tokens) is a *tail* record keyed by (h of the last
 * full chunk, XXH3-128 of the tail tokens). Every record holds the tokens it covers, the
 * caller's opaque blob and an XXH3-64 of that blob: a lookup compares tokens and checks
 * the checksum and never trusts a hash alone. The store knows nothing of the engine; the
 * blob is whatever the engine exports.
 *
 * Invariants. The records' accounted bytes stay under the byte budget: a write first
 * evicts least-recently-used records (at a high-water mark, down to a low-water mark).
 * Lookups and writes refresh the whole ancestor chain of what they touch with one stamp,
 * deepest first in eviction order, so leaves are evicted before the prefixes they hang
 * from. LMDB's MDB_MAP_FULL never reaches a caller: the map is sparse and larger than the
 * budget, and a full map is answered by evicting more and retrying (store_write), or by
 * ERR_STORE_FULL. Namespaces never see each other's records: their chain seeds differ
 * and the record header repeats the namespace id, which lookup checks.
 *
 * Settings (reliability notes §3.4): files 0600 in a 0700 directory, MDB_NOTLS, durable
 * sync (or MDB_NOMETASYNC on request), never MDB_WRITEMAP, maxreaders ≥ 2 × threads and
 * read transactions admitted by a counter so MDB_READERS_FULL never reaches a caller,
 * mdb_reader_check at open and every reader_check_usec (checked when a write begins; a
 * daemon that may sit idle also calls store_env_check_readers from its timer), network
 * and FUSE filesystems refused, a corrupt environment (found by LMDB or by the structural
 * walk at open) moved aside to data.mdb.corrupt-<usec> (the newest two are kept) and
 * recreated empty, counted in the stats and reported in struct store_open_info for the
 * caller to log.
 *
 * Threading. A struct store_env is shared by all threads of one process; open it once
 * per process and never fork() while it is open. A transaction belongs to one thread at
 * a time (MDB_NOTLS lets a read transaction move between threads). One thread must not
 * hold two read transactions at once. Write transactions are serialized by LMDB.
 *
 * Lifetimes. struct store_rec views (tokens, blob) point into the map: they are valid
 * until the transaction that produced them ends (commit or abort), and in a write
 * transaction only until its next put or delete. This is what lets a restore read at
 * memory speed: do lookups in read transactions.
 *
 * Counters. entries and bytes live in the database (transactional); hits, misses,
 * evictions, rejections and the other event counters live in memory and start at zero
 * at each open. */
#pragma once

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store_env;
struct store_txn;

/* ---- environment -------------------------------------------------------------------- */

/* Called before each allocation and I/O step the store makes for a write (tests only:
 * fault injection). Return non-zero to make that step fail with -ENOMEM. */
typedef int (*store_fault_fn)(void *userdata);

struct store_options {
    const char *path;             /* directory holding data.mdb and lock.mdb; created 0700 */
    uint64_t budget_bytes;        /* cache_max_bytes: records' accounted bytes stay below */
    uint64_t map_bytes;           /* LMDB map size (sparse); 0 = 2 × budget + 64 MiB */
    unsigned n_threads;           /* threads that may use the env; maxreaders ≥ 2 × this */
    unsigned high_water_pct;      /* evict when a write would pass this % of the budget (90) */
    unsigned low_water_pct;       /* ... down to this % (80) */
    uint64_t reader_check_usec;   /* period of mdb_reader_check; 0 = 60 s */
    bool read_only;               /* offline inspection: no writes, no quarantine */
    bool no_meta_sync;            /* MDB_NOMETASYNC (the last commit may be lost on OS crash) */
    store_fault_fn fault;         /* tests: fault hook, NULL in production */
    void *fault_userdata;
};

/* What open found, for the caller to log once. */
struct store_open_info {
    bool created;                 /* the environment did not exist (or was recreated) */
    bool quarantined;             /* a corrupt data.mdb was moved aside to quarantine_path */
    char quarantine_path[4096];
    char quarantine_reason[512];  /* why it was judged corrupt */
    int n_readers_cleared;        /* stale reader slots cleared by mdb_reader_check */
};

/* Opens (creating if needed) the environment in opt->path. Fails with ERR_STORE_NETFS on
 * a network or FUSE filesystem, ERR_STORE_CORRUPT for a corrupt read-only environment,
 * -errno for system errors. A corrupt read-write environment is quarantined and
 * recreated (info->quarantined). info may be NULL. */
int store_env_open(const struct store_options *opt, struct store_env **ret,
                   struct store_open_info *info, struct err_detail *d);
/* Applies pending touches (read-write envs), closes the environment and frees it.
 * NULL-safe. Every transaction must have ended. */
void store_env_close(struct store_env *env);
DEFINE_CLEANUP_FUNC(struct store_env, store_env_close);

/* Moves data.mdb aside and starts empty, as open does for a corrupt file; for a caller
 * that got ERR_STORE_CORRUPT or an I/O error from a commit. The caller guarantees that no
 * transaction of this env is live. info may be NULL. */
int store_env_quarantine(struct store_env *env, const char *reason,
                         struct store_open_info *info, struct err_detail *d);
/* Closes and reopens LMDB in place (what P1-4 asks after an fsync error: reopen, never
 * retry blindly); quarantines when the reopened file is corrupt. Same preconditions. */
int store_env_reopen(struct store_env *env, struct store_open_info *info,
                     struct err_detail *d);
/* Runs mdb_reader_check now; *ret_cleared (may be NULL) gets the stale slots cleared. */
int store_env_check_readers(struct store_env *env, int *ret_cleared);
/* Applies the touches and deletions queued by lookups (it happens on every write
 * anyway); also runs the periodic reader check and evicts down to the budget. */
int store_env_flush(struct store_env *env);
/* True once a commit failed with an I/O error or LMDB reported corruption: every call
 * then fails with ERR_STORE_CORRUPT until store_env_reopen or store_env_quarantine.
 * A full filesystem is not such an error: a commit that failed for lack of space (ENOSPC,
 * EDQUOT, or LMDB's EIO for a short write while the filesystem is nearly full) returns
 * -ENOSPC and leaves the env usable. LMDB writes new pages before the meta page, so the
 * last committed state is intact; lookups go on, and a later write succeeds once there
 * is space again. */
bool store_env_is_broken(const struct store_env *env);

/* Free bytes of the filesystem holding the store (what this process may still write:
 * f_bavail, or f_bfree for root), for the caller's messages about a full disk. */
int store_env_space(struct store_env *env, uint64_t *ret_free_bytes);
/* The store's directory; valid until store_env_close. */
const char *store_env_path(const struct store_env *env);

/* Filesystem types (statfs f_type) the store refuses: NFS, SMB/CIFS, FUSE, 9p, Ceph,
 * AFS, Coda, GFS2, Lustre, OCFS2... */
bool store_fs_type_is_refused(uint64_t f_type);

/* ---- transactions -------------------------------------------------------------------- */

enum store_txn_mode { STORE_TXN_READ, STORE_TXN_WRITE, STORE_TXN_MODE_COUNT };

/* Begins a transaction. A read transaction waits for a reader slot rather than fail
 * (never MDB_READERS_FULL); a write transaction waits for LMDB's writer lock, then
 * applies pending touches. */
int store_txn_begin(struct store_env *env, enum store_txn_mode mode, struct store_txn **ret);
/* Commits and frees the transaction (also on failure). Read transactions just end. */
int store_txn_commit(struct store_txn *txn);
/* Aborts and frees; NULL-safe. */
void store_txn_abort(struct store_txn *txn);
DEFINE_CLEANUP_FUNC(struct store_txn, store_txn_abort);

/* ---- chain keys ---------------------------------------------------------------------- */

enum store_kind { STORE_KIND_CHUNK = 1, STORE_KIND_TAIL = 2 };

/* A record key: 16 bytes for a chunk (h[i+1]), 32 for a tail (h ‖ tail hash), canonical
 * big-endian hash bytes (hash128_to_bytes). */
struct store_key {
    uint8_t bytes[32];
    uint8_t len;
};

/* Everything needed to walk chains of one (namespace, model, cache types, chunk size). */
struct store_chain {
    struct hash128 h0;            /* seed: namespace, model fingerprint, K/V types */
    struct hash128 ns_id;         /* XXH3-128 of the namespace name */
    uint32_t chunk_tokens;        /* C */
    char ns[128];                 /* the namespace name, NUL-terminated */
};

/* Fills chain. ns: 1 … 127 bytes, no NUL; chunk_tokens ≥ 1 and ≤ STORE_MAX_CHUNK_TOKENS.
 * h0 = XXH3-128("warm-store-h0" ‖ u32 len(ns) ‖ ns ‖ model_fp[16] ‖ u32 type_k ‖
 * u32 type_v), integers little-endian. */
int store_chain_init(struct store_chain *chain, const char *ns, const uint8_t model_fp[16],
                     uint32_t type_k, uint32_t type_v, uint32_t chunk_tokens);
#define STORE_MAX_CHUNK_TOKENS 65536u
/* h[i+1] = XXH3-128(canonical bytes of h ‖ tokens as int32 little-endian). */
struct hash128 store_chain_next(struct hash128 h, const int32_t *tokens, size_t n_tokens);
/* Key of the chunk record that follows parent h (= store_chain_next as a key). */
struct store_key store_key_chunk(struct hash128 h_next);
/* Key of the tail holding tokens after parent h (h of the last full chunk). */
struct store_key store_key_tail(struct hash128 parent, const int32_t *tokens, size_t n_tokens);
/* 32 (chunk) or 64 (tail) hex digits + NUL. */
void store_key_to_hex(const struct store_key *key, char out[65]);

/* ---- records ------------------------------------------------------------------------- */

/* A verified record, read in place. tokens_le and blob point into the map and are valid
 * until the transaction ends. tokens_le is n_tokens int32 little-endian, aligned to 2
 * bytes only: compare it with memcmp or read it with store_rec_token. blob is aligned to
 * 4 bytes when the record is larger than a page (always, for real KV blobs). */
struct store_rec {
    struct store_key key;
    enum store_kind kind;
    struct hash128 ns_id;
    uint64_t p0;                  /* position of the first token in the prompt */
    uint32_t n_tokens;
    const void *tokens_le;
    const void *blob;
    size_t blob_bytes;
    uint64_t created_usec;        /* wall clock (µs since the epoch) */
    uint64_t last_used_usec;      /* wall clock of the last write, walk or touch */
    uint64_t bytes;               /* what the record counts against the budget */
};
int32_t store_rec_token(const struct store_rec *rec, size_t i);

/* One record to write. The store derives the key itself from parent and tokens, so a
 * record can only land under the key its tokens hash to. */
struct store_put {
    const struct store_chain *chain;
    enum store_kind kind;
    struct hash128 parent;        /* h[i] for chunk i (h0 for chunk 0); the h of the last
                                     full chunk for a tail */
    uint64_t p0;                  /* i × C */
    const int32_t *tokens;        /* C tokens for a chunk, 1 … C-1 for a tail */
    uint32_t n_tokens;
    const void *blob;
    size_t blob_bytes;
};

/* Writes (or overwrites) one record inside a write transaction, evicting first if the
 * budget requires it, and refreshes its ancestors. ret_key may be NULL. Errors:
 * ERR_INVALID (bad arguments, detail says which), ERR_STORE_FULL (larger than the budget;
 * or the map filled up: the transaction is then dead, abort it and retry with
 * store_write), -ENOMEM, -EROFS, ERR_STORE_CORRUPT. */
int store_put(struct store_txn *txn, const struct store_put *put, struct store_key *ret_key,
              struct err_detail *d);
/* store_put in its own write transaction, retrying a full map after evicting more (and
 * clearing stale readers). This is the writer thread's call. Never retries an I/O
 * error: the env is then broken (store_env_is_broken). A full filesystem fails with
 * -ENOSPC, d naming the directory and its free space; the env stays usable. */
int store_write(struct store_env *env, const struct store_put *put, struct store_key *ret_key,
                struct err_detail *d);

/* Reads and verifies one record (header, lengths, blob checksum). ERR_NOT_FOUND when
 * absent; ERR_STORE_RECORD for a bad header; ERR_CHECKSUM for a bad blob. */
int store_get(struct store_txn *txn, const struct store_key *key, struct store_rec *ret,
              struct err_detail *d);
/* Deletes one record and its index entries. ERR_NOT_FOUND when absent. */
int store_del(struct store_txn *txn, const struct store_key *key);

/* ---- lookup -------------------------------------------------------------------------- */

/* The longest verified prefix of a prompt: chunks[0 … n_chunks) cover tokens
 * [0, n_chunks × C), then the tail (if has_tail) covers the next tail.n_tokens tokens.
 * h is the chain hash after the last verified chunk: the parent of the next record to
 * write. Views are valid until the transaction ends. */
struct store_match {
    size_t n_chunks;
    struct store_rec *chunks;     /* owned; freed by store_match_done */
    bool has_tail;
    struct store_rec tail;
    size_t n_tokens;              /* n_chunks × C + tail tokens */
    struct hash128 h;
    unsigned n_rejected;          /* records found but refused (token, checksum, header) */
    int first_reject;             /* the first refusal's code, 0 if none */
};

/* Walks the chain of tokens[0 … n_tokens) in chain's namespace. A record that fails
 * verification ends the walk; it is counted as a rejection and queued for deletion.
 * Refreshes what it matched (applied by the next write or store_env_flush). Pass
 * n_tokens - 1 when the caller must recompute the last token's logits. */
int store_lookup(struct store_txn *txn, const struct store_chain *chain, const int32_t *tokens,
                 size_t n_tokens, struct store_match *ret, struct err_detail *d);
void store_match_done(struct store_match *m);

/* The caller (daemon) refused a record the store returned (e.g. the engine's import said
 * ERR_STATE_KEY_ROT): counts the reason and queues the record for deletion, so it is
 * recomputed and overwritten. */
void store_env_reject(struct store_env *env, const struct store_key *key, int reason);

/* ---- list, purge, stats, check ------------------------------------------------------- */

struct store_entry {
    struct store_key key;
    enum store_kind kind;
    struct hash128 ns_id;
    const char *ns;               /* namespace name; valid during the callback */
    uint64_t p0;
    uint32_t n_tokens;
    uint64_t bytes;
    uint64_t created_usec, last_used_usec;
};
/* Calls fn for every record of namespace ns (NULL: every namespace), in key order, from
 * the per-namespace index. fn returns < 0 to stop with that code. */
int store_list(struct store_txn *txn, const char *ns,
               int (*fn)(const struct store_entry *e, void *userdata), void *userdata);
/* Calls fn for each namespace with its record count and bytes. */
int store_ns_list(struct store_txn *txn,
                  int (*fn)(const char *ns, uint64_t n_entries, uint64_t bytes, void *userdata),
                  void *userdata);
/* Deletes every record of namespace ns (NULL: everything) in one write transaction.
 * *ret_n (may be NULL) gets the number of records deleted. */
int store_purge(struct store_env *env, const char *ns, uint64_t *ret_n);

#define STORE_REJECT_SLOTS 16
struct store_stats {
    uint64_t n_entries, n_chunks, n_tails;  /* from the database */
    uint64_t bytes;                         /* accounted bytes of all records */
    uint64_t budget_bytes, high_water_bytes, low_water_bytes, map_bytes;
    uint64_t file_bytes;                    /* size of data.mdb on disk (st_blocks) */
    uint64_t n_hits, n_misses;              /* lookups with ≥ 1 record / with none */
    uint64_t n_hit_tokens;                  /* tokens covered by lookups */
    uint64_t n_writes, n_write_errors;
    uint64_t n_no_space;                    /* write errors that were a full filesystem */
    uint64_t n_evictions, n_evicted_bytes;
    uint64_t n_map_full;                    /* MDB_MAP_FULL met and handled internally */
    uint64_t n_rejections;                  /* all reasons together */
    struct {
        int reason;                         /* an error code: ERR_CHECKSUM, ERR_STATE_... */
        uint64_t n;
    } rejections[STORE_REJECT_SLOTS];
    unsigned n_reject_reasons;
    uint64_t n_quarantined;                 /* corrupt environments moved aside */
    uint64_t n_readers_cleared;             /* stale reader slots cleared */
    uint64_t n_touch_dropped;               /* refreshes dropped (queue full) */
    unsigned max_readers;
};
int store_env_stats(struct store_env *env, struct store_stats *ret);

/* What store_env_check found. */
struct store_check_report {
    uint64_t n_records, n_checksum_failures, n_bad_records, n_index_errors;
    uint64_t n_pages_walked;      /* structural walk of data.mdb */
    bool structure_ok;
    bool bytes_ok;                /* accounted bytes equal the sum over records */
    char first_problem[512];
};
/* Integrity check: the structural walk of data.mdb (every reachable page's header,
 * bounds, key order, page counts) and every record (header, tokens length, blob
 * checksum, index entries, byte accounting). Returns 0 when everything is clean,
 * ERR_STORE_CORRUPT otherwise (details in the report). */
int store_env_check(struct store_env *env, struct store_check_report *ret);
