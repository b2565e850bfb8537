/* gguf-copy — a model file read into private memory by parallel readers (gguf-copy.h). */
#include "engine/gguf-copy.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Chunk: the unit each reader claims, reads and drops from the page cache, a multiple of
 * the huge page so that no two readers fault the same one. Readers: one per CPU this
 * process may run on, at least 2, at most 8. More readers than CPUs made a warm load of
 * 7 GB three times slower on 2 vCPUs (0.66 s with 2 readers, 2.0 s with 4: they contend
 * for the page allocator); past 8 a memory copy gains nothing. */
#define COPY_CHUNK_BYTES (4u << 20)
#define COPY_HUGE_BYTES (2u << 20)
#define COPY_MIN_READERS 2
#define COPY_MAX_READERS 8

struct copy {
    int fd;
    uint8_t *buf;
    size_t size, n_chunks;
    atomic_size_t next;   /* the next chunk to claim */
    atomic_int err;       /* first error (< 0) or 1 (the file shrank); stops every reader */
    pthread_mutex_t lock; /* guards done, hashed, hashing */
    uint8_t *done;        /* per chunk: read */
    size_t hashed;        /* chunks [0, hashed) are in the hash */
    bool hashing;         /* a reader is feeding the hash (outside the lock) */
    struct hash128_state *hash;
};

static size_t chunk_len(const struct copy *c, size_t i) {
    return MIN((size_t)COPY_CHUNK_BYTES, c->size - i * COPY_CHUNK_BYTES);
}

/* Reads chunk i; 0, 1 (end of file before its end) or -errno. */
static int chunk_read(struct copy *c, size_t i) {
    const size_t at = i * COPY_CHUNK_BYTES, len = chunk_len(c, i);
    for (size_t got = 0; got < len;) {
        ssize_t n = pread(c->fd, c->buf + at + got, len - got, (off_t)(at + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return 1;
        got += (size_t)n;
    }
    /* the copy holds these bytes now: the cache's pages of them would be a second copy
     * (pages someone else maps stay) */
    (void)posix_fadvise(c->fd, (off_t)at, (off_t)len, POSIX_FADV_DONTNEED);
    return 0;
}

/* Marks chunk i read and, unless another reader is at it, feeds the hash every chunk that
 * is next in order and read: the hash is one stream over the file, in order, yet nobody
 * waits for it. */
static void chunk_done(struct copy *c, size_t i) {
    pthread_mutex_lock(&c->lock);
    c->done[i] = 1;
    if (!c->hashing) {
        c->hashing = true;
        while (c->hashed < c->n_chunks && c->done[c->hashed]) {
            const size_t k = c->hashed;
            pthread_mutex_unlock(&c->lock);
            hash128_state_update(c->hash, c->buf + k * COPY_CHUNK_BYTES, chunk_len(c, k));
            pthread_mutex_lock(&c->lock);
            c->hashed = k + 1;
        }
        c->hashing = false;
    }
    pthread_mutex_unlock(&c->lock);
}

static void *reader(void *arg) {
    struct copy *c = arg;
    while (atomic_load(&c->err) == 0) {
        const size_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n_chunks) break;
        int r = chunk_read(c, i);
        if (r != 0) {
            int none = 0;
            atomic_compare_exchange_strong(&c->err, &none, r);
            break;
        }
        chunk_done(c, i);
    }
    return NULL;
}

/* A private read-write anonymous mapping of size bytes on a 2 MiB boundary, huge pages
 * asked for (best effort); NULL with errno set. */
static void *map_aligned(size_t size) {
    const size_t len = size + COPY_HUGE_BYTES;
    if (len < size) {
        errno = ENOMEM;
        return NULL;
    }
    uint8_t *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + COPY_HUGE_BYTES - 1) & ~(uintptr_t)(COPY_HUGE_BYTES - 1));
    uint8_t *end = p + (size + page - 1) / page * page;
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + len > end) munmap(end, (size_t)(raw + len - end));
    (void)madvise(p, size, MADV_HUGEPAGE);
    return p;
}

int gguf_copy_read(int fd, size_t size, void **ret_map, struct hash128 *ret_hash) {
    struct copy c = {.fd = fd, .size = size};
    c.n_chunks = size / COPY_CHUNK_BYTES + (size % COPY_CHUNK_BYTES != 0);
    int e = hash128_state_new(&c.hash);
    if (e < 0) return e;
    c.done = calloc(c.n_chunks ? c.n_chunks : 1, 1);
    c.buf = size ? map_aligned(size) : NULL;
    if (!c.done || (size && !c.buf)) {
        e = -ENOMEM;
        goto out;
    }
    pthread_mutex_init(&c.lock, NULL);
    cpu_set_t cpus;
    long n_cpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                                : sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = (size_t)MIN(MAX(n_cpu, (long)COPY_MIN_READERS), (long)COPY_MAX_READERS);
    n = MIN(n, MAX(c.n_chunks, (size_t)1));
    pthread_t th[COPY_MAX_READERS];
    size_t n_th = 0;
    /* this thread is one of the readers; fewer helpers (none, if threads are short) only
     * cost time */
    while (n_th + 1 < n && pthread_create(&th[n_th], NULL, reader, &c) == 0) n_th++;
    reader(&c);
    for (size_t i = 0; i < n_th; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.lock);
    e = atomic_load(&c.err);
    if (e == 0) {
        *ret_map = c.buf;
        *ret_hash = hash128_state_digest(c.hash);
        c.buf = NULL;
    }
out:
    if (c.buf) munmap(c.buf, size);
    free(c.done);
    hash128_state_free(c.hash);
    return e;
}
