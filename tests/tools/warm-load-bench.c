/* warm-load-bench: how long a model file takes to load into the daemon's private copy,
 * against the time `cat FILE > /dev/null` takes to read it, from a cold and from a warm
 * page cache; and what the loaded copy holds in memory against the file's size.
 *
 *   warm-load-bench [--runs N] [--threads N] [--drop-caches] [--no-model] [--warm-only]
 *                   [--verify] FILE
 *
 * For each state of the page cache (cold, then warm) it times N runs (default 1) and prints
 * the best and the median (on a shared machine the best is the fair comparison):
 *   cat    /bin/cat FILE > /dev/null, run as a child;
 *   copy   gguf_open_copy(): the file read into private memory and validated;
 *   model  engine_model_load() with private_copy: the copy, the checks of the
 *          architecture and tensors, and the fingerprint (XXH3-128 of the bytes), as warmd
 *          loads a model before it makes a context;
 *   ready  the model and then a context on the CPU (512 positions, --threads N threads,
 *          default all CPUs), as warmd's LoadModel: the context repacks the weights in
 *          place into the layout the CPU's kernels read (kernels/types.h rows8), so this
 *          is the time until the model can serve.
 * Cold: the file's pages are dropped from the page cache before each run
 * (posix_fadvise DONTNEED, which needs no privilege; --drop-caches also writes 3 to
 * /proc/sys/vm/drop_caches, as root, to drop the file system's metadata too). Warm: the file
 * is read once by cat first, so that all of it is cached when the run starts.
 *
 * After each load it prints the process's resident anonymous memory (the copy) and how
 * much of the file the page cache still holds (mincore over a mapping of the file): the
 * copy should be the file once and the cache should not hold a second copy.
 * --no-model skips the model and ready rows (a GGUF file the engine does not know loads as a copy);
 * --warm-only skips the cold rows; --verify checks once that the copy holds the file's
 * bytes and that the fingerprint computed while reading is hash128() of them.
 * Run it on an idle machine: the figures are wall-clock times. */
#include "engine/context.h"
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Drops path's pages from the page cache (and, with all, every clean page and the dentry
 * and inode caches: needs root). */
static int cache_drop(const char *path, bool all) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    (void)fdatasync(fd);
    int r = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (r) return -r;
    if (!all) return 0;
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f) return -errno;
    r = fputs("3\n", f) < 0 ? -EIO : 0;
    if (fclose(f) != 0 && !r) r = -errno;
    return r;
}

/* Bytes of path in the page cache. */
static uint64_t cache_bytes(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return 0;
    size_t n = (size + page - 1) / page;
    unsigned char *v = malloc(n);
    uint64_t in = 0;
    if (v && mincore(map, size, v) == 0)
        for (size_t i = 0; i < n; i++) in += v[i] & 1;
    free(v);
    munmap(map, size);
    return MIN(in * page, (uint64_t)size);
}

/* A field of /proc/self/status in bytes ("RssAnon:"), 0 if absent. */
static uint64_t status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) kb = strtoull(line + n, NULL, 10);
    if (f) fclose(f);
    return kb << 10;
}

/* Runs /bin/cat path > /dev/null; returns its wall time or 0 on failure. */
static uint64_t time_cat(const char *path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {"cat", (char *)path, NULL};
    pid_t pid;
    uint64_t t0 = time_now_usec();
    int r = posix_spawn(&pid, "/bin/cat", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r) return 0;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    uint64_t t = time_now_usec() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? t : 0;
}

enum what { CAT, COPY, MODEL, READY, WHAT_COUNT };
static const char *const what_names[] = {"cat", "copy", "model", "ready"};
static int n_threads; /* the context's (ready) */

struct result {
    uint64_t usec;        /* best run */
    uint64_t median_usec;
    uint64_t anon_bytes;  /* resident anonymous memory after the load (the copy) */
    uint64_t cached_bytes; /* the file's bytes in the page cache after the load */
};

/* One run of w; *ret filled. Returns 0 or a negative error (printed). */
static int run_one(enum what w, const char *path, struct result *ret) {
    struct err_detail d = {0};
    uint64_t anon0 = status_bytes("RssAnon:");
    uint64_t t0 = time_now_usec(), t = 0;
    int r = 0;
    if (w == CAT) {
        t = time_cat(path);
        if (!t) r = -EIO;
    } else if (w == COPY) {
        struct gguf_file *f = NULL;
        r = gguf_open_copy(path, &f, &d);
        t = time_now_usec() - t0;
        if (r >= 0) {
            ret->anon_bytes = status_bytes("RssAnon:") - MIN(anon0, status_bytes("RssAnon:"));
            ret->cached_bytes = cache_bytes(path);
        }
        gguf_close(f);
    } else {
        struct engine_model *m = NULL;
        struct engine_context *ctx = NULL;
        const struct engine_model_params p = {.private_copy = true};
        r = engine_model_load(path, &p, &m, &d);
        if (r >= 0 && w == READY) {
            struct engine_context_params cp;
            engine_context_params_default(&cp);
            cp.n_ctx = 512;
            cp.n_threads = n_threads;
            r = engine_context_new(m, &cp, &ctx, &d);
        }
        t = time_now_usec() - t0;
        if (r >= 0) {
            ret->anon_bytes = status_bytes("RssAnon:") - MIN(anon0, status_bytes("RssAnon:"));
            ret->cached_bytes = cache_bytes(path);
        }
        engine_context_free(ctx);
        engine_model_free(m);
    }
    if (r < 0) {
        fprintf(stderr, "warm-load-bench: %s of '%s': %s\n", what_names[w], path, err_msg(&d, r));
        return r;
    }
    ret->usec = t;
    return 0;
}

/* The copy against a mapping of the file: the same bytes, and the hash of them. */
static int verify(const char *path) {
    struct err_detail d = {0};
    struct gguf_file *copy = NULL, *map = NULL;
    int r = gguf_open_copy(path, &copy, &d);
    if (r >= 0) r = gguf_open(path, &map, &d);
    if (r < 0) {
        fprintf(stderr, "warm-load-bench: '%s': %s\n", path, err_msg(&d, r));
        gguf_close(copy);
        return r;
    }
    struct hash128 h = {0}, want = hash128(gguf_base(map), (size_t)gguf_size(map));
    bool same = gguf_size(copy) == gguf_size(map) &&
                memcmp(gguf_base(copy), gguf_base(map), (size_t)gguf_size(map)) == 0;
    bool hashed = gguf_copy_hash(copy, &h) && hash128_eq(h, want);
    char hex[33];
    hash128_to_hex(want, hex);
    printf("verify: copy %s the file's bytes; fingerprint %s %s\n", same ? "holds" : "DIFFERS FROM",
           hex, hashed ? "matches" : "DOES NOT MATCH");
    gguf_close(copy);
    gguf_close(map);
    return same && hashed ? 0 : ERR_INVALID;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *out) {
    fprintf(out, "usage: warm-load-bench [--runs N] [--threads N] [--drop-caches] [--no-model] "
                 "[--warm-only] [--verify] FILE\n");
}

int main(int argc, char **argv) {
    int runs = 1;
    bool drop_all = false, no_model = false, warm_only = false, verify_copy = false;
    static const struct option opts[] = {
        {"runs", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"drop-caches", no_argument, NULL, 'D'},
        {"no-model", no_argument, NULL, 'M'},
        {"warm-only", no_argument, NULL, 'W'},
        {"verify", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case 'r': runs = atoi(optarg); break;
        case 't': n_threads = atoi(optarg); break;
        case 'D': drop_all = true; break;
        case 'M': no_model = true; break;
        case 'W': warm_only = true; break;
        case 'V': verify_copy = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!n_threads) n_threads = (int)MAX(1, sysconf(_SC_NPROCESSORS_ONLN));
    if (optind != argc - 1 || runs < 1 || runs > 64 || n_threads < 1 || n_threads > 1024) {
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    struct stat st;
    if (stat(path, &st) < 0) {
        fprintf(stderr, "warm-load-bench: '%s': %s\n", path, strerror(errno));
        return 1;
    }
    const double size = (double)st.st_size;
    printf("file %s: %.0f bytes (%.2f GiB)\n", path, size, size / (1u << 30));

    if (verify_copy && verify(path) < 0) return 1;
    struct result res[2][WHAT_COUNT] = {0};
    for (int warm = warm_only; warm < 2; warm++) {
        for (int w = 0; w < WHAT_COUNT; w++) {
            if ((w == MODEL || w == READY) && no_model) continue;
            uint64_t all[64];
            for (int i = 0; i < runs; i++) {
                int r = warm ? (time_cat(path) ? 0 : -EIO) : cache_drop(path, drop_all);
                if (r < 0) {
                    fprintf(stderr, "warm-load-bench: %s the page cache: %s\n",
                            warm ? "warming" : "dropping", strerror(-r));
                    return 1;
                }
                struct result one = {0};
                if (run_one((enum what)w, path, &one) < 0) return 1;
                if (!i || one.usec < res[warm][w].usec) res[warm][w] = one;
                all[i] = one.usec;
            }
            qsort(all, (size_t)runs, sizeof *all, cmp_u64);
            res[warm][w].median_usec = all[runs / 2];
        }
    }
    printf("%-6s %-5s %8s %8s %8s %9s %10s %10s %12s\n", "cache", "what", "best s", "GB/s",
           "x cat", "median s", "x cat med", "anon/file", "cached/file");
    for (int warm = 0; warm < 2; warm++) {
        for (int w = 0; w < WHAT_COUNT; w++) {
            const struct result *x = &res[warm][w];
            if (!x->usec) continue;
            const double s = (double)x->usec / 1e6, cat = (double)res[warm][CAT].usec / 1e6;
            const double med = (double)x->median_usec / 1e6;
            const double cat_med = (double)res[warm][CAT].median_usec / 1e6;
            printf("%-6s %-5s %8.2f %8.2f %8.2f %9.2f %10.2f", warm ? "warm" : "cold",
                   what_names[w], s, size / s / 1e9, s / cat, med, med / cat_med);
            if (w == CAT)
                printf(" %10s %12s\n", "-", "-");
            else
                printf(" %10.2f %12.2f\n", (double)x->anon_bytes / size,
                       (double)x->cached_bytes / size);
        }
    }
    return 0;
}
