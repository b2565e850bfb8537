/* Integrity: a structural walk of data.mdb read with pread (never through the map, so a
 * damaged page cannot crash us), and a check of every record and index entry.
 *
 * The walk follows LMDB 0.9's documented on-disk layout (lmdb.h / mdb.c, data version 1):
 *   page header (16 bytes): u64 pgno, u16 pad, u16 flags, u16 lower, u16 upper
 *                           (for an overflow page the last two are one u32: page count);
 *   flags: 0x01 branch, 0x02 leaf, 0x04 overflow, 0x08 meta, 0x20 leaf2, 0x40 sub-page;
 *   lower - 16 = 2 × number of nodes; the u16 offsets after the header point at nodes;
 *   node (8 bytes + key + data): u16 lo, u16 hi, u16 flags, u16 ksize; data size =
 *     lo | hi << 16; in a branch node lo | hi << 16 | flags << 32 is the child page;
 *   node flags: 0x01 big data (data is the u64 first page of an overflow run),
 *     0x02 sub-database (data is a 48-byte MDB_db), 0x04 duplicates;
 *   meta page (pages 0 and 1) after the header: u32 magic 0xBEEFC0DE, u32 version 1,
 *     u64 address, u64 mapsize, MDB_db free, MDB_db main, u64 last_pg, u64 txnid;
 *   MDB_db (48 bytes): u32 pad (page size in the free DB), u16 flags, u16 depth,
 *     u64 branch_pages, leaf_pages, overflow_pages, entries, root (~0 when empty). */
#include "store/env.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGEHDR 16u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_KIND_MASK 0x6Fu /* branch, leaf, overflow, meta, leaf2, sub-page */
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define NODEHDR 8u
#define MDB_MAGIC_V 0xBEEFC0DEu
#define P_INVALID_PG (~(uint64_t)0)
#define MAX_DEPTH 32u

struct db_disk {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries, root;
};
_Static_assert(sizeof(struct db_disk) == 48, "MDB_db is 48 bytes");

struct walk {
    int fd;
    unsigned psize;
    uint64_t last_pg, file_pages;
    uint8_t *seen, *freed;      /* bitmaps over pages 0 … last_pg */
    uint64_t n_pages;
    char *problem;
    size_t problem_size;
};

struct counts {
    uint64_t branch, leaf, overflow, entries;
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int bad(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct walk *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->problem, w->problem_size, fmt, ap);
    va_end(ap);
    return ERR_STORE_CORRUPT;
}

static bool bit_get(const uint8_t *b, uint64_t i) { return b[i >> 3] >> (i & 7) & 1; }
static void bit_set(uint8_t *b, uint64_t i) { b[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* An I/O error is an error (-errno), not a verdict on the file; a short read is. */
static int read_at(struct walk *w, void *buf, size_t n, uint64_t off) {
    ssize_t got = pread(w->fd, buf, n, (off_t)off);
    if (got < 0) return -errno;
    if ((size_t)got != n)
        return bad(w, "short read: %zd of %zu bytes at offset %llu", got, n,
                   (unsigned long long)off);
    return 0;
}

static int read_page(struct walk *w, uint64_t pgno, uint8_t *buf) {
    if (pgno < 2 || pgno > w->last_pg || pgno >= w->file_pages)
        return bad(w, "page %llu is outside the file (last page %llu, %llu pages on disk)",
                   (unsigned long long)pgno, (unsigned long long)w->last_pg,
                   (unsigned long long)w->file_pages);
    int r = read_at(w, buf, w->psize, pgno * w->psize);
    if (r < 0) return r;
    if (rd64(buf) != pgno)
        return bad(w, "page %llu (offset %llu) carries page number %llu: overwritten",
                   (unsigned long long)pgno, (unsigned long long)(pgno * w->psize),
                   (unsigned long long)rd64(buf));
    return 0;
}

static int mark(struct walk *w, uint64_t pgno, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        if (bit_get(w->seen, pgno + i))
            return bad(w, "page %llu is reachable twice", (unsigned long long)(pgno + i));
        bit_set(w->seen, pgno + i);
    }
    w->n_pages += n;
    return 0;
}

/* A key compares as LMDB's default: memcmp over the shorter length, then length. */
static int key_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    int c = memcmp(a, b, MIN(na, nb));
    return c ? c : (na > nb) - (na < nb);
}

enum tree_kind { TREE_FREE, TREE_MAIN, TREE_SUB };

static int walk_tree(struct walk *w, const struct db_disk *db, enum tree_kind kind,
                     const char *name);

/* A free-list record: u64 count, then count page numbers that are free. */
static int free_list(struct walk *w, const uint8_t *data, uint64_t size) {
    if (size < 8) return bad(w, "free list record of %llu bytes", (unsigned long long)size);
    uint64_t n = rd64(data);
    if (n > (size - 8) / 8) return bad(w, "free list claims %llu pages in %llu bytes",
                                       (unsigned long long)n, (unsigned long long)size);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t p = rd64(data + 8 + 8 * i);
        if (p < 2 || p > w->last_pg)
            return bad(w, "free list holds page %llu past the last page", (unsigned long long)p);
        bit_set(w->freed, p);
    }
    return 0;
}

static int walk_leaf_node(struct walk *w, const uint8_t *page, uint64_t pgno, const uint8_t *node,
                          size_t room, enum tree_kind kind, struct counts *cnt) {
    uint16_t nflags = rd16(node + 4), ksize = rd16(node + 6);
    uint64_t dsize = rd16(node) | (uint64_t)rd16(node + 2) << 16;
    const uint8_t *data = node + NODEHDR + ksize;
    (void)page;
    if (nflags & F_DUPDATA)
        return bad(w, "leaf page %llu: a duplicate-sorted node; the store uses none",
                   (unsigned long long)pgno);
    if (nflags & F_BIGDATA) {
        if (NODEHDR + ksize + 8u > room)
            return bad(w, "leaf page %llu: node runs past the page", (unsigned long long)pgno);
        uint64_t op = rd64(data), pages = (PAGEHDR - 1 + dsize) / w->psize + 1;
        uint8_t hdr[PAGEHDR];
        if (op < 2 || op > w->last_pg || pages > w->last_pg - op + 1)
            return bad(w, "leaf page %llu: overflow run %llu+%llu outside the file",
                       (unsigned long long)pgno, (unsigned long long)op, (unsigned long long)pages);
        int r = read_at(w, hdr, PAGEHDR, op * w->psize);
        if (r < 0) return r;
        if (rd64(hdr) != op || !(rd16(hdr + 10) & P_OVERFLOW))
            return bad(w, "overflow page %llu (from leaf page %llu) is overwritten",
                       (unsigned long long)op, (unsigned long long)pgno);
        uint32_t n_ov;
        memcpy(&n_ov, hdr + 12, 4);
        if (n_ov != pages)
            return bad(w, "overflow page %llu: %u pages, the value needs %llu",
                       (unsigned long long)op, n_ov, (unsigned long long)pages);
        if (op + pages > w->file_pages)
            return bad(w, "overflow run at page %llu ends past the end of the file",
                       (unsigned long long)op);
        r = mark(w, op, pages);
        if (r < 0) return r;
        cnt->overflow += pages;
        if (kind == TREE_FREE) {
            uint8_t *buf = malloc(dsize);
            if (!buf) return -ENOMEM;
            r = read_at(w, buf, dsize, op * w->psize + PAGEHDR);
            if (r >= 0) r = free_list(w, buf, dsize);
            free(buf);
            if (r < 0) return r;
        }
        return 0;
    }
    if (NODEHDR + ksize + dsize > room)
        return bad(w, "leaf page %llu: node of %llu data bytes runs past the page",
                   (unsigned long long)pgno, (unsigned long long)dsize);
    if (nflags & F_SUBDATA) {
        if (kind != TREE_MAIN || dsize != sizeof(struct db_disk))
            return bad(w, "leaf page %llu: a sub-database node outside the main database",
                       (unsigned long long)pgno);
        struct db_disk sub;
        memcpy(&sub, data, sizeof sub);
        char name[64];
        size_t m = MIN((size_t)ksize, sizeof name - 1);
        memcpy(name, node + NODEHDR, m);
        name[m] = 0;
        return walk_tree(w, &sub, TREE_SUB, name);
    }
    if (kind == TREE_FREE) return free_list(w, data, dsize);
    return 0;
}

static int walk_page(struct walk *w, uint64_t pgno, unsigned level, unsigned depth,
                     enum tree_kind kind, struct counts *cnt) {
    if (level > depth || level > MAX_DEPTH)
        return bad(w, "page %llu lies deeper than the tree's depth %u", (unsigned long long)pgno,
                   depth);
    uint8_t *page = malloc(w->psize);
    if (!page) return -ENOMEM;
    int r = read_page(w, pgno, page);
    if (r < 0) goto out;
    if ((r = mark(w, pgno, 1)) < 0) goto out;
    unsigned flags = rd16(page + 10) & P_KIND_MASK, lower = rd16(page + 12),
             upper = rd16(page + 14);
    bool leaf = level == depth;
    if (flags != (leaf ? P_LEAF : P_BRANCH)) {
        r = bad(w, "page %llu: flags 0x%x, expected a %s page at level %u of %u",
                (unsigned long long)pgno, flags, leaf ? "leaf" : "branch", level, depth);
        goto out;
    }
    if (lower < PAGEHDR + 2 || lower & 1 || lower > upper || upper > w->psize) {
        r = bad(w, "page %llu: free-space bounds %u..%u are impossible", (unsigned long long)pgno,
                lower, upper);
        goto out;
    }
    unsigned n = (lower - PAGEHDR) / 2;
    leaf ? cnt->leaf++ : cnt->branch++;
    const uint8_t *prev_key = NULL;
    size_t prev_len = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned off = rd16(page + PAGEHDR + 2 * i);
        if (off < upper || off + NODEHDR > w->psize) {
            r = bad(w, "page %llu: node %u at offset %u is outside the node area",
                    (unsigned long long)pgno, i, off);
            goto out;
        }
        const uint8_t *node = page + off;
        size_t room = w->psize - off;
        unsigned ksize = rd16(node + 6);
        if (NODEHDR + ksize > room) {
            r = bad(w, "page %llu: key of node %u runs past the page", (unsigned long long)pgno, i);
            goto out;
        }
        const uint8_t *key = node + NODEHDR;
        /* keys ascend (the first key of a branch page is empty by construction; the free
         * database orders integer keys natively, not bytewise) */
        if (kind != TREE_FREE && prev_key && !(leaf == false && i == 1) &&
            key_cmp(prev_key, prev_len, key, ksize) >= 0) {
            r = bad(w, "page %llu: keys of nodes %u and %u are out of order",
                    (unsigned long long)pgno, i - 1, i);
            goto out;
        }
        prev_key = key;
        prev_len = ksize;
        if (leaf) {
            cnt->entries++;
            r = walk_leaf_node(w, page, pgno, node, room, kind, cnt);
        } else {
            uint64_t child = rd16(node) | (uint64_t)rd16(node + 2) << 16 |
                             (uint64_t)rd16(node + 4) << 32;
            r = walk_page(w, child, level + 1, depth, kind, cnt);
        }
        if (r < 0) goto out;
    }
    r = 0;
out:
    free(page);
    return r;
}

static int walk_tree(struct walk *w, const struct db_disk *db, enum tree_kind kind,
                     const char *name) {
    if (db->root == P_INVALID_PG) {
        if (db->entries || db->depth)
            return bad(w, "database '%s': no root but %llu entries", name,
                       (unsigned long long)db->entries);
        return 0;
    }
    if (db->depth == 0 || db->depth > MAX_DEPTH)
        return bad(w, "database '%s': depth %u", name, db->depth);
    struct counts cnt = {0};
    int r = walk_page(w, db->root, 1, db->depth, kind, &cnt);
    if (r < 0) return r;
    if (cnt.entries != db->entries || cnt.leaf != db->leaf_pages ||
        cnt.branch != db->branch_pages || cnt.overflow != db->overflow_pages)
        return bad(w,
                   "database '%s': walked %llu entries in %llu/%llu/%llu branch/leaf/overflow "
                   "pages, its header says %llu in %llu/%llu/%llu",
                   name, (unsigned long long)cnt.entries, (unsigned long long)cnt.branch,
                   (unsigned long long)cnt.leaf, (unsigned long long)cnt.overflow,
                   (unsigned long long)db->entries, (unsigned long long)db->branch_pages,
                   (unsigned long long)db->leaf_pages, (unsigned long long)db->overflow_pages);
    return 0;
}

int store_walk_file(struct store_env *env, MDB_txn *txn, uint64_t *ret_pages, char *problem,
                    size_t problem_size) {
    struct walk w = {.problem = problem, .problem_size = problem_size};
    problem[0] = 0;
    int fd = -1;
    if (mdb_env_get_fd(env->mdb, &fd) || fd < 0) return 1;
    w.fd = fd;
    uint64_t want = mdb_txn_id(txn);
    struct stat sb;
    if (fstat(fd, &sb) < 0) return 1;
    /* the page size is the free DB's pad in meta page 0; LMDB checked both metas */
    uint8_t meta[2][PAGEHDR + 152];
    int r = read_at(&w, meta[0], sizeof meta[0], 0);
    if (r < 0) return r;
    uint32_t psize;
    memcpy(&psize, meta[0] + PAGEHDR + 24, 4);
    if (psize < 512 || psize > 65536 || (psize & (psize - 1)))
        return bad(&w, "meta page 0: page size %u", psize);
    if ((r = read_at(&w, meta[1], sizeof meta[1], psize)) < 0) return r;
    const uint8_t *m = NULL;
    for (int i = 0; i < 2; i++) {
        uint32_t magic, version;
        memcpy(&magic, meta[i] + PAGEHDR, 4);
        memcpy(&version, meta[i] + PAGEHDR + 4, 4);
        if (rd64(meta[i]) != (uint64_t)i || !(rd16(meta[i] + 10) & P_META) ||
            magic != MDB_MAGIC_V || version != 1)
            return bad(&w, "meta page %d is overwritten", i);
        if (rd64(meta[i] + PAGEHDR + 128) == want) m = meta[i];
    }
    if (!m) return 1; /* the writer has moved on twice; the caller retries */
    w.psize = psize;
    w.last_pg = rd64(m + PAGEHDR + 120);
    w.file_pages = (uint64_t)sb.st_size / psize;
    /* the file may end before last_pg (pages freed before they were ever written); the
     * pages the tree reaches must be inside it, which read_page checks */
    if (w.last_pg < 1 || w.last_pg > (1ull << 40))
        return bad(&w, "meta: last page %llu", (unsigned long long)w.last_pg);
    size_t bits = (size_t)(w.last_pg / 8 + 1);
    w.seen = calloc(1, bits);
    w.freed = calloc(1, bits);
    r = -ENOMEM;
    if (w.seen && w.freed) {
        struct db_disk fdb, mdb;
        memcpy(&fdb, m + PAGEHDR + 24, sizeof fdb);
        memcpy(&mdb, m + PAGEHDR + 24 + 48, sizeof mdb);
        r = walk_tree(&w, &mdb, TREE_MAIN, "main");
        if (r >= 0) r = walk_tree(&w, &fdb, TREE_FREE, "free");
        for (uint64_t p = 2; r >= 0 && p <= w.last_pg; p++)
            if (bit_get(w.seen, p) && bit_get(w.freed, p))
                r = bad(&w, "page %llu is both in use and on the free list",
                        (unsigned long long)p);
    }
    free(w.seen);
    free(w.freed);
    if (ret_pages) *ret_pages = w.n_pages;
    return r < 0 ? r : 0;
}

/* ---- record-level check --------------------------------------------------------------- */

static void report(struct store_check_report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report(struct store_check_report *rep, const char *fmt, ...) {
    if (rep->first_problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->first_problem, sizeof rep->first_problem, fmt, ap);
    va_end(ap);
}

static int check_records(struct store_txn *txn, struct store_check_report *rep) {
    struct store_env *env = txn->env;
    MDB_cursor *c = NULL;
    int rc = mdb_cursor_open(txn->mdb, env->dbi_rec, &c);
    if (rc) return store_map_err(env, rc);
    uint64_t sum = 0;
    MDB_val k, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        rep->n_records++;
        struct store_rec rec;
        struct err_detail d = {0};
        char hex[65];
        struct store_key key = {.len = (uint8_t)MIN(k.mv_size, (size_t)32)};
        memcpy(key.bytes, k.mv_data, key.len);
        store_key_to_hex(&key, hex);
        int r = store_rec_decode(&k, &v, true, &rec, &d);
        if (r == ERR_CHECKSUM) {
            rep->n_checksum_failures++;
            report(rep, "record %s: %s", hex, err_msg(&d, r));
            continue;
        }
        if (r < 0) {
            rep->n_bad_records++;
            report(rep, "record %s: %s", hex, err_msg(&d, r));
            continue;
        }
        struct store_info_disk info;
        r = store_info_read(txn, &rec.key, &info);
        if (r < 0 || info.n_tokens != rec.n_tokens || info.kind != rec.kind ||
            info.bytes != store_rec_bytes(env, v.mv_size)) {
            rep->n_index_errors++;
            report(rep, "record %s: bookkeeping missing or different", hex);
            continue;
        }
        sum += info.bytes;
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND) return store_map_err(env, rc);
    MDB_stat si, sl, sn;
    if ((rc = mdb_stat(txn->mdb, env->dbi_info, &si)) ||
        (rc = mdb_stat(txn->mdb, env->dbi_lru, &sl)) ||
        (rc = mdb_stat(txn->mdb, env->dbi_nsidx, &sn)))
        return store_map_err(env, rc);
    if (si.ms_entries != rep->n_records || sl.ms_entries != rep->n_records ||
        sn.ms_entries != rep->n_records) {
        rep->n_index_errors++;
        report(rep, "%llu records but %zu/%zu/%zu info/lru/namespace entries",
               (unsigned long long)rep->n_records, si.ms_entries, sl.ms_entries, sn.ms_entries);
    }
    uint64_t bytes = 0;
    int r = store_bytes_read(txn, &bytes);
    if (r < 0) return r;
    rep->bytes_ok = bytes == sum;
    if (!rep->bytes_ok)
        report(rep, "accounted bytes %llu, records add up to %llu", (unsigned long long)bytes,
               (unsigned long long)sum);
    return 0;
}

int store_env_check(struct store_env *env, struct store_check_report *ret) {
    if (!env || !ret) return ERR_INVALID;
    memset(ret, 0, sizeof *ret);
    struct store_txn *txn = NULL;
    int r = store_txn_begin(env, STORE_TXN_READ, &txn);
    if (r < 0) return r;
    char problem[512];
    r = store_walk_file(env, txn->mdb, &ret->n_pages_walked, problem, sizeof problem);
    ret->structure_ok = r >= 0; /* 1: the snapshot moved on, nothing to say */
    if (r < 0) report(ret, "structure: %s", problem);
    /* records are read through the map: only when the pages they sit on are sound */
    if (r >= 0) r = check_records(txn, ret);
    store_txn_abort(txn);
    if (r < 0 && r != ERR_STORE_CORRUPT) return r;
    bool clean = ret->structure_ok && ret->bytes_ok && !ret->n_checksum_failures &&
                 !ret->n_bad_records && !ret->n_index_errors;
    return clean ? 0 : ERR_STORE_CORRUPT;
}
