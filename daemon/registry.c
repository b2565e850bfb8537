/* registry — scanning models_dir safely (see registry.h). */
#include "daemon/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GGUF_SUFFIX ".gguf"
/* A file this large whose allocated blocks cover less than half of it is sparse. */
#define SPARSE_MIN_BYTES (64ull << 20)

void registry_init(struct registry *r, const char *dir) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
}

void registry_done(struct registry *r) {
    free(r->models);
    r->models = NULL;
    r->n_models = 0;
    pthread_mutex_destroy(&r->lock);
}

int registry_name_check(const char *name, struct err_detail *d) {
    size_t n = strlen(name);
    if (n == 0) return err_set(d, ERR_INVALID, "model name is empty");
    if (n >= CONFIG_NAME_MAX)
        return err_set(d, ERR_INVALID, "model name is longer than %d bytes", CONFIG_NAME_MAX - 1);
    static const char extra[] = "._-";
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && (i == 0 || !strchr(extra, ch)))
            return err_set(d, ERR_INVALID,
                           "bad model name: byte %zu is not allowed (names use letters, digits, "
                           "'.', '_' and '-', and start with a letter or digit)", i);
    }
    return 0;
}

/* openat2 beneath dirfd; a kernel without openat2 falls back to O_NOFOLLOW on the last
 * component (names never contain '/', so there is no other component). */
static int open_beneath(int dirfd, const char *file) {
    struct open_how how = {
        .flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, dirfd, file, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        fd = openat(dirfd, file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
    return fd < 0 ? -errno : (int)fd;
}

static void file_id_of(const struct stat *st, struct registry_file_id *ret) {
    *ret = (struct registry_file_id){
        .dev = (uint64_t)st->st_dev,
        .ino = (uint64_t)st->st_ino,
        .size_bytes = (uint64_t)st->st_size,
        .mtime_nsec = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
        .ctime_nsec = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec,
    };
}

int registry_file_id_get(int fd, struct registry_file_id *ret) {
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    file_id_of(&st, ret);
    return 0;
}

bool registry_file_id_eq(const struct registry_file_id *a, const struct registry_file_id *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size_bytes == b->size_bytes &&
           a->mtime_nsec == b->mtime_nsec && a->ctime_nsec == b->ctime_nsec;
}

/* Opens and checks one model file; fills m on success. */
static int model_probe(int dirfd, const char *file, struct registry_model *m, int *ret_fd) {
    int fd = open_beneath(dirfd, file);
    if (fd < 0) return fd;
    struct stat st;
    char magic[4];
    int r = 0;
    if (fstat(fd, &st) < 0) r = -errno;
    else if (!S_ISREG(st.st_mode)) r = -EINVAL;
    else if (st.st_size >= (off_t)SPARSE_MIN_BYTES && (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size / 2)
        r = -EINVAL;
    else if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "GGUF", 4) != 0) r = -EINVAL;
    if (r < 0) {
        close(fd);
        return r;
    }
    m->size_bytes = (uint64_t)st.st_size;
    m->modified_usec = (uint64_t)st.st_mtim.tv_sec * 1000000u + (uint64_t)st.st_mtim.tv_nsec / 1000u;
    file_id_of(&st, &m->id);
    if (ret_fd) *ret_fd = fd;
    else close(fd);
    return 0;
}

static int cmp_model(const void *a, const void *b) {
    return strcmp(((const struct registry_model *)a)->name, ((const struct registry_model *)b)->name);
}

int registry_scan(struct registry *r, struct err_detail *d) {
    int dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        int e = errno;
        pthread_mutex_lock(&r->lock);
        free(r->models);
        r->models = NULL;
        r->n_models = 0;
        pthread_mutex_unlock(&r->lock);
        return err_set(d, -e, "models_dir %s: %s", r->dir, strerror(e));
    }
    int dfd2 = dup(dirfd);
    DIR *dir = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
    if (!dir) {
        int e = errno;
        if (dfd2 >= 0) close(dfd2);
        close(dirfd);
        return err_set(d, -e, "models_dir %s: %s", r->dir, strerror(e));
    }
    struct registry_model *list = NULL;
    size_t n = 0, cap = 0;
    int ret = 0;
    for (struct dirent *de; (de = readdir(dir));) {
        size_t len = strlen(de->d_name), sl = strlen(GGUF_SUFFIX);
        if (len <= sl || strcmp(de->d_name + len - sl, GGUF_SUFFIX) != 0) continue;
        struct registry_model m = {0};
        if (len - sl >= sizeof m.name) continue;
        memcpy(m.name, de->d_name, len - sl);
        if (registry_name_check(m.name, NULL) < 0) continue;
        if (model_probe(dirfd, de->d_name, &m, NULL) < 0) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct registry_model *t = realloc(list, nc * sizeof *t);
            if (!t) {
                ret = -ENOMEM;
                break;
            }
            list = t;
            cap = nc;
        }
        list[n++] = m;
    }
    closedir(dir);
    close(dirfd);
    if (ret < 0) {
        free(list);
        return err_set(d, ret, "out of memory scanning %s", r->dir);
    }
    if (n) qsort(list, n, sizeof *list, cmp_model);
    pthread_mutex_lock(&r->lock);
    free(r->models);
    r->models = list;
    r->n_models = n;
    pthread_mutex_unlock(&r->lock);
    return (int)MIN(n, (size_t)INT32_MAX);
}

size_t registry_count(struct registry *r) {
    pthread_mutex_lock(&r->lock);
    size_t n = r->n_models;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int registry_list(struct registry *r, struct registry_model **ret, size_t *ret_n) {
    pthread_mutex_lock(&r->lock);
    struct registry_model *copy = NULL;
    size_t n = r->n_models;
    if (n) {
        copy = malloc_array(n, sizeof *copy);
        if (!copy) {
            pthread_mutex_unlock(&r->lock);
            return -ENOMEM;
        }
        memcpy(copy, r->models, n * sizeof *copy);
    }
    pthread_mutex_unlock(&r->lock);
    *ret = copy;
    *ret_n = n;
    return 0;
}

static bool lookup(struct registry *r, const char *name, struct registry_model *ret) {
    struct registry_model key = {0};
    snprintf(key.name, sizeof key.name, "%s", name);
    pthread_mutex_lock(&r->lock);
    const struct registry_model *m =
        r->n_models ? bsearch(&key, r->models, r->n_models, sizeof *m, cmp_model) : NULL;
    if (m) *ret = *m;
    pthread_mutex_unlock(&r->lock);
    return m != NULL;
}

int registry_find(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d) {
    int e = registry_name_check(name, d);
    if (e < 0) return e;
    struct registry_model m;
    if (!lookup(r, name, &m)) {
        /* A file may have been added since the last scan. */
        (void)registry_scan(r, NULL);
        if (!lookup(r, name, &m))
            return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory", name);
    }
    *ret = m;
    return 0;
}

/* Finds name and probes its file (m: the list's entry, then what the file says now). */
static int probe_name(struct registry *r, const char *name, struct registry_model *m,
                      int *ret_fd, struct err_detail *d) {
    int e = registry_find(r, name, m, d);
    if (e < 0) return e;
    int dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory", name);
    char file[CONFIG_NAME_MAX + sizeof GGUF_SUFFIX];
    snprintf(file, sizeof file, "%s%s", name, GGUF_SUFFIX);
    e = model_probe(dirfd, file, m, ret_fd);
    close(dirfd);
    if (e < 0) return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory", name);
    return 0;
}

int registry_open(struct registry *r, const char *name, int *ret_fd, struct err_detail *d) {
    struct registry_model m;
    return probe_name(r, name, &m, ret_fd, d);
}

int registry_stat(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d) {
    struct registry_model m;
    int e = probe_name(r, name, &m, NULL, d);
    if (e < 0) return e;
    /* ListModels and the memory budget see the file as it is, not as the last scan saw it */
    pthread_mutex_lock(&r->lock);
    struct registry_model *entry =
        r->n_models ? bsearch(&m, r->models, r->n_models, sizeof *entry, cmp_model) : NULL;
    if (entry) *entry = m;
    pthread_mutex_unlock(&r->lock);
    *ret = m;
    return 0;
}
