/* registry — scanning models_dir safely and saying why a file is skipped (see registry.h). */
#include "daemon/registry.h"

#include "daemon/log.h"
#include "engine/engine.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <strings.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GGUF_SUFFIX ".gguf"
#define GGUF_SUFFIX_LEN (sizeof GGUF_SUFFIX - 1)
/* A file this large whose allocated blocks cover less than half of it is sparse. */
#define SPARSE_MIN_BYTES (64ull << 20)

void registry_init(struct registry *r, const char *dir) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->scan_lock, NULL);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
}

void registry_done(struct registry *r) {
    free(r->models);
    r->models = NULL;
    r->n_models = r->n_available = 0;
    pthread_mutex_destroy(&r->scan_lock);
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

/* A printable copy of s[0..n) for names and messages (they travel in proto strings, which
 * must be UTF-8): printable ASCII stays, every other byte becomes \xNN; cut with "..."
 * when it does not fit. */
static void printable(char *out, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        size_t need = ch >= 0x20 && ch < 0x7f ? 1 : 4;
        if (o + need + 4 > cap) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (need == 1) out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
    }
    out[o] = 0;
}

/* ---- opening a directory entry ------------------------------------------------------ */

static long openat2_or_fallback(int dirfd, const char *file, uint64_t resolve, int fallback_flags) {
    struct open_how how = {
        .flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
        .resolve = resolve,
    };
    long fd = syscall(SYS_openat2, dirfd, file, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        fd = openat(dirfd, file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | fallback_flags);
    return fd;
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

/* Opens the entry `file` of dirfd: a regular file in the directory, or a symlink to a
 * regular file owned by root or by us. On refusal: < 0 and why[] says it. */
static int entry_open(int dirfd, const char *file, int *ret_fd, struct stat *ret_st,
                      bool *ret_link, char *why, size_t cap) {
    struct stat lst;
    if (fstatat(dirfd, file, &lst, AT_SYMLINK_NOFOLLOW) < 0) {
        int e = -errno;
        snprintf(why, cap, "cannot read the directory entry: %s", err_str(e));
        return e;
    }
    bool link = S_ISLNK(lst.st_mode);
    char target[160] = "";
    if (link) {
        char raw[PATH_MAX];
        ssize_t n = readlinkat(dirfd, file, raw, sizeof raw);
        printable(target, sizeof target, raw, n > 0 ? (size_t)n : 0);
    }
    long fd = link ? openat2_or_fallback(dirfd, file, RESOLVE_NO_MAGICLINKS, 0)
                   : openat2_or_fallback(dirfd, file, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
                                         O_NOFOLLOW);
    if (fd < 0) {
        int e = -errno;
        if (link && e == -ENOENT) snprintf(why, cap, "symlink to '%s' points to nothing", target);
        else if (link) snprintf(why, cap, "symlink to '%s' cannot be followed: %s", target, err_str(e));
        else snprintf(why, cap, "cannot open: %s", err_str(e));
        return e;
    }
    struct stat st;
    struct statfs sfs;
    int e = 0;
    if (fstat((int)fd, &st) < 0) {
        e = -errno;
        snprintf(why, cap, "stat: %s", err_str(e));
    } else if (!S_ISREG(st.st_mode)) {
        e = -EINVAL;
        if (link) snprintf(why, cap, "symlink to '%s' does not point to a regular file", target);
        else snprintf(why, cap, "not a regular file");
    } else if (link && fstatfs((int)fd, &sfs) == 0 &&
               (sfs.f_type == PROC_SUPER_MAGIC || sfs.f_type == SYSFS_MAGIC)) {
        /* kernel files look regular and root's, and would show the daemon's view */
        e = -EPERM;
        snprintf(why, cap, "symlink to '%s' refused: it points into /proc or /sys", target);
    } else if (link && st.st_uid != 0 && st.st_uid != geteuid()) {
        /* anyone else could rewrite the model under the daemon */
        e = -EPERM;
        snprintf(why, cap, "symlink to '%s' refused: the file belongs to uid %u; only files "
                 "owned by root or by warmd's user (uid %u) are followed", target,
                 (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (!link && (st.st_dev != lst.st_dev || st.st_ino != lst.st_ino)) {
        e = -EAGAIN; /* replaced between the two looks */
        snprintf(why, cap, "the file changed while it was being opened");
    } else if (st.st_size >= (off_t)SPARSE_MIN_BYTES &&
               (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size / 2) {
        e = -EINVAL;
        snprintf(why, cap, "sparse file: %llu of %llu bytes are allocated (still downloading?)",
                 (unsigned long long)st.st_blocks * 512, (unsigned long long)st.st_size);
    }
    if (e < 0) {
        close((int)fd);
        return e;
    }
    *ret_fd = (int)fd;
    *ret_st = st;
    if (ret_link) *ret_link = link;
    return 0;
}

/* ---- what a file says about itself ----------------------------------------------------- */

struct type_share {
    int type;
    uint64_t bytes;
};

static int share_cmp(const void *a, const void *b) {
    const struct type_share *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : x->type - y->type;
}

/* Architecture, parameter count and the bytes by tensor type, from the tensor table. */
static void meta_from_file(const struct gguf_file *f, struct registry_meta *m) {
    struct gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s, NULL) >= 0)
        printable(m->architecture, sizeof m->architecture, s.ptr, (size_t)s.len);
    struct type_share shares[KERN_TYPE_COUNT];
    for (int t = 0; t < KERN_TYPE_COUNT; t++) shares[t] = (struct type_share){t, 0};
    uint64_t total = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        int64_t n = 1;
        for (int k = 0; k < GGUF_MAX_DIMS; k++) n *= t->ne[k]; /* the reader checked overflow */
        m->n_params += (uint64_t)n;
        if ((unsigned)t->type < KERN_TYPE_COUNT) shares[t->type].bytes += t->n_bytes;
        total += t->n_bytes;
    }
    qsort(shares, KERN_TYPE_COUNT, sizeof *shares, share_cmp);
    size_t o = 0;
    for (int i = 0; i < KERN_TYPE_COUNT && total && shares[i].bytes; i++) {
        char up[16];
        const char *name = kern_type_name(shares[i].type);
        size_t k = 0;
        for (; name[k] && k + 1 < sizeof up; k++) up[k] = (char)toupper((unsigned char)name[k]);
        up[k] = 0;
        unsigned pct = (unsigned)((shares[i].bytes * 100 + total / 2) / total);
        int w = snprintf(m->quantization + o, sizeof m->quantization - o, "%s%s %u%%",
                         o ? ", " : "", up, pct ? pct : 1);
        if (w < 0 || (size_t)w >= sizeof m->quantization - o) {
            m->quantization[o] = 0; /* a whole entry or none */
            break;
        }
        o += (size_t)w;
    }
    enum engine_chat_family fam = engine_chat_detect_gguf(f);
    snprintf(m->chat_template, sizeof m->chat_template, "%s",
             fam == ENGINE_CHAT_NONE ? "none" : engine_chat_family_name(fam));
}

/* Reads and checks the metadata of the open file fd as the loader would; fills m->meta,
 * and on a refusal sets m->available = false with the reason. */
static void examine(int fd, const struct stat *st, bool link, struct registry_model *m) {
    m->available = false;
    if (st->st_size == 0) {
        snprintf(m->reason, sizeof m->reason, "empty file (0 bytes)");
        return;
    }
    unsigned char magic[4];
    ssize_t n = pread(fd, magic, sizeof magic, 0);
    if (n != (ssize_t)sizeof magic || memcmp(magic, GGUF_MAGIC, 4) != 0) {
        /* the first bytes of a file out of the directory are none of the listeners' business */
        char shown[24];
        printable(shown, sizeof shown, (const char *)magic, n > 0 ? (size_t)n : 0);
        if (link) snprintf(m->reason, sizeof m->reason, "not a GGUF file");
        else snprintf(m->reason, sizeof m->reason, "not a GGUF file: it starts with '%s', not "
                      "'GGUF'", shown);
        return;
    }
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    int e = gguf_open_meta(fd, &f, &d);
    if (e < 0) {
        snprintf(m->reason, sizeof m->reason, "malformed GGUF: %s", err_msg(&d, e));
        return;
    }
    meta_from_file(f, &m->meta);
    struct engine_model_facts facts;
    struct engine_vocab *v = NULL;
    if ((e = engine_model_check(f, &facts, &d)) < 0) {
        snprintf(m->reason, sizeof m->reason, "%s", err_msg(&d, e));
    } else if ((e = engine_vocab_load(f, &v, &d)) < 0) {
        snprintf(m->reason, sizeof m->reason, "vocabulary: %s", err_msg(&d, e));
    } else {
        m->available = true;
        m->meta.n_ctx_train = facts.n_ctx_train;
        m->meta.n_layer = facts.n_layer;
        m->meta.n_embd = facts.n_embd;
        m->meta.n_head = facts.n_head;
        m->meta.n_head_kv = facts.n_head_kv;
        m->meta.head_dim_k = facts.head_dim_k;
        m->meta.head_dim_v = facts.head_dim_v;
        m->meta.n_vocab = facts.n_vocab;
        m->meta.embedding = facts.embedding;
        m->meta.n_embd_out = facts.embedding ? facts.n_embd_out : 0;
        if (facts.embedding)
            snprintf(m->meta.pooling, sizeof m->meta.pooling, "%s", engine_pooling_name(facts.pooling));
    }
    engine_vocab_free(v);
    gguf_close(f);
}

/* The entry for directory entry `file`: its name, and whether and why it is skipped. prev:
 * the last scan's entry for the same file, whose verdict is kept while the file is the
 * same (NULL if none). */
static void entry_probe(int dirfd, const char *file, const struct registry_model *prev,
                        struct registry_model *m) {
    size_t len = strlen(file);
    memset(m, 0, sizeof *m);
    snprintf(m->file, sizeof m->file, "%s", file);
    printable(m->name, sizeof m->name, file, len - GGUF_SUFFIX_LEN);
    char stem[NAME_MAX + 1];
    memcpy(stem, file, len - GGUF_SUFFIX_LEN);
    stem[len - GGUF_SUFFIX_LEN] = 0;
    struct err_detail d = {0};
    if (registry_name_check(stem, &d) < 0) {
        m->bad_name = true;
        snprintf(m->reason, sizeof m->reason, "the file name is not a model name (%.240s); "
                 "rename the file", d.msg);
        return;
    }
    int fd;
    struct stat st;
    bool link;
    if (entry_open(dirfd, file, &fd, &st, &link, m->reason, sizeof m->reason) < 0) return;
    m->size_bytes = (uint64_t)st.st_size;
    m->modified_usec = (uint64_t)st.st_mtim.tv_sec * 1000000u + (uint64_t)st.st_mtim.tv_nsec / 1000u;
    file_id_of(&st, &m->id);
    if (prev && !prev->bad_name && registry_file_id_eq(&prev->id, &m->id) && prev->id.ino) {
        m->available = prev->available;
        memcpy(m->reason, prev->reason, sizeof m->reason);
        m->meta = prev->meta;
    } else {
        examine(fd, &st, link, m);
    }
    close(fd);
    char raw[REGISTRY_REASON_MAX];
    memcpy(raw, m->reason, sizeof raw);
    printable(m->reason, sizeof m->reason, raw, strnlen(raw, sizeof raw));
}

static int cmp_model(const void *a, const void *b) {
    const struct registry_model *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->file, y->file);
}

static int cmp_name(const void *key, const void *elem) {
    return strcmp(((const struct registry_model *)key)->name,
                  ((const struct registry_model *)elem)->name);
}

/* The entry of list[0..n) for file (linear: only used while building a new list). */
static const struct registry_model *by_file(const struct registry_model *list, size_t n,
                                            const char *file) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].file, file) == 0) return &list[i];
    return NULL;
}

static bool has_suffix(const char *file) {
    size_t len = strlen(file);
    /* hidden files (editors' and downloaders' temporaries) are not models */
    return file[0] != '.' && len > GGUF_SUFFIX_LEN &&
           strcasecmp(file + len - GGUF_SUFFIX_LEN, GGUF_SUFFIX) == 0;
}

/* Two files with one stem ("a.gguf", "a.GGUF"): neither is served, so a name always means
 * one file. */
static void mark_duplicates(struct registry_model *list, size_t n) {
    for (size_t i = 1; i < n; i++) {
        if (strcmp(list[i - 1].name, list[i].name) != 0) continue;
        for (size_t k = i - 1; k <= i; k++) {
            list[k].available = false;
            snprintf(list[k].reason, sizeof list[k].reason, "'%.120s' and '%.120s' both name "
                     "this model; remove or rename one", list[i - 1].file, list[i].file);
        }
    }
}

static int scan_locked(struct registry *r, struct err_detail *d);

int registry_scan(struct registry *r, struct err_detail *d) {
    /* one scan at a time: each new file is read once and each skip logged once */
    pthread_mutex_lock(&r->scan_lock);
    int e = scan_locked(r, d);
    pthread_mutex_unlock(&r->scan_lock);
    return e;
}

static int scan_locked(struct registry *r, struct err_detail *d) {
    int dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = NULL;
    int e = 0;
    if (dirfd < 0) {
        e = -errno;
    } else {
        int dfd2 = dup(dirfd);
        if (dfd2 < 0 || !(dir = fdopendir(dfd2))) {
            e = -errno;
            if (dfd2 >= 0) close(dfd2);
            close(dirfd);
        }
    }
    if (e < 0) {
        pthread_mutex_lock(&r->lock);
        free(r->models);
        r->models = NULL;
        r->n_models = r->n_available = 0;
        pthread_mutex_unlock(&r->lock);
        return err_set(d, e, "models_dir %s: %s", r->dir, err_str(e));
    }
    /* The previous verdicts: a file seen before is not read again while it is the same. */
    struct registry_model *prev = NULL;
    size_t n_prev = 0;
    (void)registry_list(r, &prev, &n_prev);

    struct registry_model *list = NULL;
    size_t n = 0, cap = 0;
    int ret = 0;
    for (struct dirent *de; (de = readdir(dir));) {
        if (!has_suffix(de->d_name)) continue;
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
        entry_probe(dirfd, de->d_name, by_file(prev, n_prev, de->d_name), &list[n++]);
    }
    closedir(dir);
    close(dirfd);
    if (ret < 0) {
        free(prev);
        free(list);
        return err_set(d, ret, "out of memory scanning %s", r->dir);
    }
    if (n) qsort(list, n, sizeof *list, cmp_model);
    mark_duplicates(list, n);
    size_t n_available = 0;
    for (size_t i = 0; i < n; i++) {
        n_available += list[i].available;
        if (list[i].available) continue;
        const struct registry_model *p = by_file(prev, n_prev, list[i].file);
        /* Once per file while it stays skipped: a rescan per ListModels must not repeat
         * it, nor a file being copied in (its reason changes with every write). */
        if (!p || p->available)
            log_warn("models_dir %s: skipping '%s': %s", r->dir, list[i].name, list[i].reason);
        else if (strcmp(p->reason, list[i].reason) != 0)
            log_debug("models_dir %s: still skipping '%s': %s", r->dir, list[i].name,
                      list[i].reason);
    }
    free(prev);
    pthread_mutex_lock(&r->lock);
    free(r->models);
    r->models = list;
    r->n_models = n;
    r->n_available = n_available;
    pthread_mutex_unlock(&r->lock);
    return (int)MIN(n_available, (size_t)INT32_MAX);
}

size_t registry_count(struct registry *r) {
    pthread_mutex_lock(&r->lock);
    size_t n = r->n_available;
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

/* An entry named name (printable form). */
static bool lookup(struct registry *r, const char *name, struct registry_model *ret) {
    struct registry_model key;
    snprintf(key.name, sizeof key.name, "%s", name);
    pthread_mutex_lock(&r->lock);
    const struct registry_model *m =
        r->n_models ? bsearch(&key, r->models, r->n_models, sizeof *m, cmp_name) : NULL;
    if (m) *ret = *m;
    pthread_mutex_unlock(&r->lock);
    return m != NULL;
}

/* Edit distance of a and b (insertions, deletions, substitutions and swaps of two
 * neighbours, as typos go), case-insensitive, or cap + 1 when it is more than cap. */
static size_t distance(const char *a, const char *b, size_t cap) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > cap) return cap + 1;
    uint8_t t[65][65];
    for (size_t i = 0; i <= la; i++) t[i][0] = (uint8_t)i;
    for (size_t j = 0; j <= lb; j++) t[0][j] = (uint8_t)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int x = tolower((unsigned char)a[i - 1]), y = tolower((unsigned char)b[j - 1]);
            size_t v = MIN(MIN(t[i - 1][j] + 1u, t[i][j - 1] + 1u),
                           t[i - 1][j - 1] + (x != y ? 1u : 0u));
            if (i > 1 && j > 1 && x == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == y)
                v = MIN(v, t[i - 2][j - 2] + 1u);
            t[i][j] = (uint8_t)v;
        }
    return MIN((size_t)t[la][lb], cap + 1);
}

const char *registry_suggest(const char *name, const char *const *names, size_t n) {
    size_t len = strlen(name);
    /* about one edit per three characters, at least one, at most three */
    size_t cap = MAX((size_t)1, MIN((size_t)3, len / 3));
    const char *best = NULL;
    size_t best_d = cap + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(name, names[i], cap);
        /* "qwen3" for "qwen3-0.6b": a name that starts with what was typed */
        if (d > cap && len >= 3 && strncasecmp(names[i], name, len) == 0) d = cap;
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

/* "not found", with a suggestion from the available models. */
static int not_found(struct registry *r, const char *name, struct err_detail *d) {
    char shown[CONFIG_NAME_MAX];
    printable(shown, sizeof shown, name, strlen(name));
    char hint[CONFIG_NAME_MAX + 32] = "";
    pthread_mutex_lock(&r->lock);
    const char **names = r->n_models ? calloc_array(r->n_models, sizeof *names) : NULL;
    size_t k = 0;
    for (size_t i = 0; names && i < r->n_models; i++)
        if (r->models[i].available) names[k++] = r->models[i].name;
    const char *best = names ? registry_suggest(name, names, k) : NULL;
    if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
    pthread_mutex_unlock(&r->lock);
    free(names);
    return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory%s", shown, hint);
}

static int unavailable(const struct registry_model *m, struct err_detail *d) {
    return err_set(d, ERR_UNSUPPORTED, "model '%s' is not available: %s", m->name, m->reason);
}

int registry_find(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d) {
    struct registry_model m;
    int e = registry_name_check(name, d);
    if (e < 0) {
        /* a file whose name is not a model name: say so rather than "bad name" alone */
        char shown[CONFIG_NAME_MAX];
        printable(shown, sizeof shown, name, strlen(name));
        if (lookup(r, shown, &m) && m.bad_name) return unavailable(&m, d);
        return e;
    }
    if (!lookup(r, name, &m) || !m.available) {
        /* A file may have been added or fixed since the last scan. */
        (void)registry_scan(r, NULL);
        if (!lookup(r, name, &m)) return not_found(r, name, d);
        if (!m.available) return unavailable(&m, d);
    }
    *ret = m;
    return 0;
}

/* Finds name and opens its file (m: the list's entry, then what the file is now). */
static int open_name(struct registry *r, const char *name, struct registry_model *m,
                     int *ret_fd, struct stat *ret_st, bool *ret_link, struct err_detail *d) {
    int e = registry_find(r, name, m, d);
    if (e < 0) return e;
    int dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory", name);
    char why[REGISTRY_REASON_MAX];
    e = entry_open(dirfd, m->file, ret_fd, ret_st, ret_link, why, sizeof why);
    close(dirfd);
    if (e == -ENOENT) return err_set(d, ERR_NOT_FOUND, "model '%s' not found in the models directory", name);
    if (e < 0) return err_set(d, ERR_UNSUPPORTED, "model '%s' is not available: %s", name, why);
    return 0;
}

int registry_open(struct registry *r, const char *name, int *ret_fd, struct err_detail *d) {
    struct registry_model m;
    struct stat st;
    return open_name(r, name, &m, ret_fd, &st, NULL, d);
}

int registry_stat(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d) {
    struct registry_model m;
    struct stat st;
    int fd;
    bool link;
    int e = open_name(r, name, &m, &fd, &st, &link, d);
    if (e < 0) return e;
    struct registry_file_id id;
    file_id_of(&st, &id);
    if (!registry_file_id_eq(&id, &m.id)) {
        /* the file changed since the scan: its verdict is the file's as it is now */
        m.id = id;
        m.size_bytes = (uint64_t)st.st_size;
        m.modified_usec =
            (uint64_t)st.st_mtim.tv_sec * 1000000u + (uint64_t)st.st_mtim.tv_nsec / 1000u;
        memset(&m.meta, 0, sizeof m.meta);
        m.reason[0] = 0;
        bool was = m.available;
        examine(fd, &st, link, &m);
        char raw[REGISTRY_REASON_MAX];
        memcpy(raw, m.reason, sizeof raw);
        printable(m.reason, sizeof m.reason, raw, strnlen(raw, sizeof raw));
        if (was && !m.available)
            log_warn("models_dir %s: skipping '%s': %s", r->dir, m.name, m.reason);
    }
    close(fd);
    /* ListModels and the memory budget see the file as it is, not as the last scan saw it */
    pthread_mutex_lock(&r->lock);
    struct registry_model *entry = NULL;
    for (size_t i = 0; i < r->n_models && !entry; i++)
        if (strcmp(r->models[i].file, m.file) == 0) entry = &r->models[i];
    if (entry) {
        *entry = m;
        r->n_available = 0;
        for (size_t i = 0; i < r->n_models; i++) r->n_available += r->models[i].available;
    }
    pthread_mutex_unlock(&r->lock);
    if (!m.available) return unavailable(&m, d);
    *ret = m;
    return 0;
}
