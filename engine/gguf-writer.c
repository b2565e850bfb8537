/* GGUF writer: KV pairs are encoded as they are added (so a 100k-entry vocabulary costs
 * its encoded size once), tensors are copied, and save() lays the file out exactly as
 * llama.cpp's gguf writer does: header, KVs in insertion order, tensor infos in insertion
 * order, zero padding to the alignment, then each tensor's data followed by zero padding
 * to the alignment (a file without tensors ends right after the metadata, unpadded, like
 * llama.cpp's vocab-only files). Copying every pair and tensor of a file written by
 * llama.cpp reproduces it byte for byte. Offsets are assigned at save time. The writer refuses to produce a
 * file the reader would reject (bad names, duplicate keys, bad shapes or alignment). */
#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_KEY 65535

struct wtensor {
    char name[GGUF_MAX_NAME + 1];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    enum kern_type type;
    uint64_t n_bytes;
    void *data;
};

/* A set of names, open addressing over indices (+1; 0 = empty). The names live in the
 * writer; name_at() reads the i-th. */
struct nameset {
    uint32_t *slots;
    uint64_t cap, n;
};

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    uint8_t *kv;          /* the encoded KV section */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    struct { size_t off, len; } *keys; /* key bytes inside kv, per pair */
    uint64_t keys_cap;
    struct nameset key_set;
    struct wtensor *tensors;
    uint64_t n_tensors, tensors_cap;
    struct nameset tensor_set;
};

typedef struct gguf_str (*name_at_fn)(const struct gguf_writer *w, uint32_t i);

static struct gguf_str key_at(const struct gguf_writer *w, uint32_t i) {
    return (struct gguf_str){w->keys[i].len, (const char *)w->kv + w->keys[i].off};
}

static struct gguf_str tensor_name_at(const struct gguf_writer *w, uint32_t i) {
    return (struct gguf_str){strlen(w->tensors[i].name), w->tensors[i].name};
}

static uint32_t *set_probe(const struct nameset *s, const struct gguf_writer *w, name_at_fn at,
                           const char *p, size_t len) {
    for (uint64_t k = hash64(p, len) & (s->cap - 1);; k = (k + 1) & (s->cap - 1)) {
        uint32_t *slot = &s->slots[k];
        if (!*slot) return slot;
        struct gguf_str n = at(w, *slot - 1);
        if (n.len == len && memcmp(n.ptr, p, len) == 0) return slot;
    }
}

static bool set_has(const struct nameset *s, const struct gguf_writer *w, name_at_fn at,
                    const char *p, size_t len) {
    return s->cap && *set_probe(s, w, at, p, len);
}

/* Adds element idx (whose name at() already returns); grows to keep the load <= 2/3. */
static int set_add(struct nameset *s, const struct gguf_writer *w, name_at_fn at, uint32_t idx) {
    if ((s->n + 1) * 3 > s->cap * 2) {
        uint64_t cap = s->cap ? s->cap * 2 : 16;
        uint32_t *slots = calloc_array(cap, sizeof *slots);
        if (!slots) return -ENOMEM;
        struct nameset grown = {slots, cap, s->n};
        for (uint64_t k = 0; k < s->cap; k++) {
            if (!s->slots[k]) continue;
            struct gguf_str n = at(w, s->slots[k] - 1);
            *set_probe(&grown, w, at, n.ptr, n.len) = s->slots[k];
        }
        free(s->slots);
        *s = grown;
    }
    struct gguf_str n = at(w, idx);
    *set_probe(s, w, at, n.ptr, n.len) = idx + 1;
    s->n++;
    return 0;
}

int gguf_writer_new(struct gguf_writer **ret) {
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    *ret = w;
    return 0;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].data);
    free(w->tensors);
    free(w->tensor_set.slots);
    free(w->keys);
    free(w->key_set.slots);
    free(w->kv);
    free(w);
}

int gguf_writer_set_version(struct gguf_writer *w, uint32_t version) {
    if (version != 2 && version != 3) return ERR_BAD_VERSION;
    w->version = version;
    return 0;
}

/* ---- KV encoding --------------------------------------------------------------------- */

static int kv_put(struct gguf_writer *w, const void *p, size_t n) {
    if (n > w->kv_cap - w->kv_len) {
        size_t need, cap = w->kv_cap ? w->kv_cap : 4096;
        if (!size_add(w->kv_len, n, &need)) return -ENOMEM;
        while (cap < need)
            if (!size_mul(cap, 2, &cap)) return -ENOMEM;
        uint8_t *kv = realloc(w->kv, cap);
        if (!kv) return -ENOMEM;
        w->kv = kv;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int kv_put_u32(struct gguf_writer *w, uint32_t v) { return kv_put(w, &v, 4); }
static int kv_put_u64(struct gguf_writer *w, uint64_t v) { return kv_put(w, &v, 8); }
static int kv_put_str(struct gguf_writer *w, const char *p, uint64_t len) {
    int r = kv_put_u64(w, len);
    return r < 0 ? r : kv_put(w, p, len);
}

/* One pair: the key, the type, and for arrays the element type and count; then the
 * values: n scalars at vals, or n strings. */
static int kv_add(struct gguf_writer *w, const char *key, size_t key_len, enum gguf_type type,
                  enum gguf_type elem, const void *vals, const struct gguf_str *strs, uint64_t n) {
    if (key_len == 0 || key_len > GGUF_MAX_KEY || memchr(key, 0, key_len)) return ERR_GGUF_BAD_KEY;
    if ((unsigned)type >= GGUF_TYPE_COUNT || (unsigned)elem >= GGUF_TYPE_COUNT ||
        elem == GGUF_TYPE_ARRAY)
        return ERR_GGUF_BAD_VALUE_TYPE;
    if (set_has(&w->key_set, w, key_at, key, key_len)) return ERR_GGUF_DUP_KEY;
    struct gguf_str k = {key_len, key};
    bool is_align = gguf_str_eq(k, "general.alignment");
    uint32_t align = 0;
    if (is_align) {
        if (type != GGUF_TYPE_UINT32) return ERR_GGUF_WRONG_TYPE;
        memcpy(&align, vals, 4);
        if (align == 0 || (align & (align - 1))) return ERR_GGUF_BAD_ALIGN;
    }
    if (w->n_kv >= UINT32_MAX - 1) return ERR_TOO_LARGE;
    if (w->n_kv == w->keys_cap) {
        uint64_t cap = w->keys_cap ? w->keys_cap * 2 : 64;
        void *keys = realloc(w->keys, (size_t)cap * sizeof *w->keys);
        if (!keys) return -ENOMEM;
        w->keys = keys;
        w->keys_cap = cap;
    }

    size_t start = w->kv_len;
    size_t esize = gguf_type_size(elem);
    uint64_t vbytes;
    int r;
    if (!u64_mul(n, esize, &vbytes)) return ERR_OVERFLOW;
    if ((r = kv_put_str(w, key, key_len)) < 0) goto fail;
    if ((r = kv_put_u32(w, type)) < 0) goto fail;
    if (type == GGUF_TYPE_ARRAY) {
        if ((r = kv_put_u32(w, elem)) < 0 || (r = kv_put_u64(w, n)) < 0) goto fail;
    }
    if (elem == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < n; i++)
            if ((r = kv_put_str(w, strs[i].ptr, strs[i].len)) < 0) goto fail;
    } else if ((r = kv_put(w, vals, vbytes)) < 0) {
        goto fail;
    }
    w->keys[w->n_kv].off = start + 8;
    w->keys[w->n_kv].len = key_len;
    if ((r = set_add(&w->key_set, w, key_at, (uint32_t)w->n_kv)) < 0) goto fail;
    w->n_kv++;
    if (is_align) w->alignment = align;
    return 0;
fail:
    w->kv_len = start;
    return r;
}

static int add_scalar(struct gguf_writer *w, const char *key, enum gguf_type type, const void *v) {
    return kv_add(w, key, strlen(key), type, type, v, NULL, 1);
}

int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v) {
    return add_scalar(w, key, GGUF_TYPE_UINT8, &v);
}
int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v) {
    return add_scalar(w, key, GGUF_TYPE_INT8, &v);
}
int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v) {
    return add_scalar(w, key, GGUF_TYPE_UINT16, &v);
}
int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v) {
    return add_scalar(w, key, GGUF_TYPE_INT16, &v);
}
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    return add_scalar(w, key, GGUF_TYPE_UINT32, &v);
}
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v) {
    return add_scalar(w, key, GGUF_TYPE_INT32, &v);
}
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v) {
    return add_scalar(w, key, GGUF_TYPE_UINT64, &v);
}
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v) {
    return add_scalar(w, key, GGUF_TYPE_INT64, &v);
}
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v) {
    return add_scalar(w, key, GGUF_TYPE_FLOAT32, &v);
}
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v) {
    return add_scalar(w, key, GGUF_TYPE_FLOAT64, &v);
}
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    return add_scalar(w, key, GGUF_TYPE_BOOL, &b);
}
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v) {
    struct gguf_str s = {strlen(v), v};
    return kv_add(w, key, strlen(key), GGUF_TYPE_STRING, GGUF_TYPE_STRING, NULL, &s, 1);
}

int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                        const void *data, uint64_t n) {
    if (gguf_type_size(elem) == 0) return ERR_GGUF_BAD_VALUE_TYPE; /* STRING, ARRAY, unknown */
    return kv_add(w, key, strlen(key), GGUF_TYPE_ARRAY, elem, data, NULL, n);
}

int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *v,
                            uint64_t n) {
    return kv_add(w, key, strlen(key), GGUF_TYPE_ARRAY, GGUF_TYPE_STRING, NULL, v, n);
}

int gguf_writer_add_kv(struct gguf_writer *w, const struct gguf_kv *kv) {
    if (kv->type == GGUF_TYPE_STRING) {
        struct gguf_str s = gguf_kv_str(kv, 0);
        return kv_add(w, kv->key.ptr, kv->key.len, kv->type, kv->type, NULL, &s, 1);
    }
    if (kv->type != GGUF_TYPE_ARRAY)
        return kv_add(w, kv->key.ptr, kv->key.len, kv->type, kv->type, kv->data, NULL, 1);
    if (kv->arr_type != GGUF_TYPE_STRING)
        return kv_add(w, kv->key.ptr, kv->key.len, kv->type, kv->arr_type, kv->data, NULL, kv->n);
    struct gguf_str *strs = malloc_array(kv->n ? kv->n : 1, sizeof *strs);
    if (!strs) return -ENOMEM;
    for (uint64_t i = 0; i < kv->n; i++) strs[i] = gguf_kv_str(kv, i);
    int r = kv_add(w, kv->key.ptr, kv->key.len, kv->type, GGUF_TYPE_STRING, NULL, strs, kv->n);
    free(strs);
    return r;
}

/* ---- tensors ------------------------------------------------------------------------- */

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum kern_type type,
                           uint32_t n_dims, const int64_t *ne, const void *data) {
    size_t len = strlen(name);
    if (len == 0 || len > GGUF_MAX_NAME) return ERR_GGUF_BAD_TENSOR_NAME;
    if (set_has(&w->tensor_set, w, tensor_name_at, name, len)) return ERR_GGUF_DUP_TENSOR;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return ERR_GGUF_BAD_DIMS;
    const struct kern_type_traits *tr = kern_type_traits(type);
    if (!tr) return ERR_GGUF_BAD_TENSOR_TYPE;
    struct wtensor t = {.n_dims = n_dims, .type = type, .ne = {1, 1, 1, 1}};
    int64_t n_el = 1;
    for (uint32_t k = 0; k < n_dims; k++) {
        if (ne[k] <= 0 || !i64_mul(n_el, ne[k], &n_el)) return ERR_GGUF_BAD_SHAPE;
        t.ne[k] = ne[k];
    }
    if (t.ne[0] % tr->blck_size != 0) return ERR_GGUF_BAD_SHAPE;
    uint64_t bytes = (uint64_t)(t.ne[0] / tr->blck_size);
    bool ok = u64_mul(bytes, tr->type_size, &bytes);
    for (int k = 1; ok && k < GGUF_MAX_DIMS; k++) ok = u64_mul(bytes, (uint64_t)t.ne[k], &bytes);
    if (!ok || bytes > SIZE_MAX / 2) return ERR_GGUF_BAD_SHAPE;
    if (w->n_tensors >= UINT32_MAX - 1) return ERR_TOO_LARGE;
    if (w->n_tensors == w->tensors_cap) {
        uint64_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
        struct wtensor *ts = realloc(w->tensors, (size_t)cap * sizeof *ts);
        if (!ts) return -ENOMEM;
        w->tensors = ts;
        w->tensors_cap = cap;
    }
    memcpy(t.name, name, len + 1);
    t.n_bytes = bytes;
    t.data = malloc(bytes ? bytes : 1);
    if (!t.data) return -ENOMEM;
    memcpy(t.data, data, bytes);
    w->tensors[w->n_tensors] = t;
    int r = set_add(&w->tensor_set, w, tensor_name_at, (uint32_t)w->n_tensors);
    if (r < 0) {
        free(t.data);
        return r;
    }
    w->n_tensors++;
    return 0;
}

/* ---- output -------------------------------------------------------------------------- */

/* Where save() and encode() send bytes: a FILE or a growing buffer. */
struct sink {
    FILE *fp;
    uint8_t *buf;
    size_t len, cap;
    int err;
};

static void sink_put(struct sink *s, const void *p, size_t n) {
    if (s->err || n == 0) return;
    if (s->fp) {
        if (fwrite(p, 1, n, s->fp) != n) s->err = errno ? -errno : -EIO;
        return;
    }
    if (s->len + n > s->cap) { /* sizes are bounded by the precomputed total */
        s->err = -EOVERFLOW;
        return;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void sink_pad(struct sink *s, uint64_t pos, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - pos % align) % align;
    while (pad) {
        size_t n = (size_t)MIN(pad, (uint64_t)sizeof zeros);
        sink_put(s, zeros, n);
        pad -= n;
    }
}

/* Bytes up to the start of the data section (unpadded) and the whole file. */
static int layout(const struct gguf_writer *w, uint64_t *ret_infos_end, uint64_t *ret_total) {
    uint64_t pos = 24 + (uint64_t)w->kv_len, data = 0, padded;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        pos += 8 + strlen(t->name) + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
        if (!u64_align_up(t->n_bytes, w->alignment, &padded) || !u64_add(data, padded, &data))
            return ERR_OVERFLOW;
    }
    uint64_t data_off = pos, total;
    if (w->n_tensors && !u64_align_up(pos, w->alignment, &data_off)) return ERR_OVERFLOW;
    if (!u64_add(data_off, data, &total)) return ERR_OVERFLOW;
    *ret_infos_end = pos;
    *ret_total = total;
    return 0;
}

static void write_all(const struct gguf_writer *w, struct sink *s) {
    uint32_t u32 = 0;
    uint64_t u64;
    sink_put(s, GGUF_MAGIC, 4);
    sink_put(s, &w->version, 4);
    sink_put(s, &w->n_tensors, 8);
    sink_put(s, &w->n_kv, 8);
    sink_put(s, w->kv, w->kv_len);
    uint64_t pos = 24 + (uint64_t)w->kv_len, offset = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        u64 = strlen(t->name);
        sink_put(s, &u64, 8);
        sink_put(s, t->name, u64);
        sink_put(s, &t->n_dims, 4);
        sink_put(s, t->ne, 8 * (size_t)t->n_dims);
        u32 = t->type;
        sink_put(s, &u32, 4);
        sink_put(s, &offset, 8);
        pos += 8 + u64 + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
        offset += (t->n_bytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    /* A file without tensors ends after the metadata, as llama.cpp's vocab-only files do. */
    if (w->n_tensors) sink_pad(s, pos, w->alignment);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        sink_put(s, w->tensors[i].data, w->tensors[i].n_bytes);
        sink_pad(s, w->tensors[i].n_bytes, w->alignment);
    }
}

int gguf_writer_encode(struct gguf_writer *w, void **ret, size_t *ret_size) {
    uint64_t infos_end, total;
    int r = layout(w, &infos_end, &total);
    if (r < 0) return r;
    if (total > SIZE_MAX / 2) return ERR_TOO_LARGE;
    struct sink s = {.cap = (size_t)total};
    s.buf = malloc(s.cap ? s.cap : 1);
    if (!s.buf) return -ENOMEM;
    write_all(w, &s);
    if (s.err < 0 || s.len != s.cap) {
        free(s.buf);
        return s.err < 0 ? s.err : ERR_INVALID;
    }
    *ret = s.buf;
    *ret_size = s.len;
    return 0;
}

/* fsync the directory holding path, so the rename survives a crash. */
static int fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return -ENOMEM;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

int gguf_writer_save(struct gguf_writer *w, const char *path) {
    uint64_t infos_end, total;
    int r = layout(w, &infos_end, &total);
    if (r < 0) return r;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return -ENOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        free(tmp);
        return r;
    }
    /* mkostemp creates 0600; a model file is world-readable like any other. */
    if (fchmod(fd, 0644) < 0) {
        r = -errno;
        goto fail_fd;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        r = -errno;
        goto fail_fd;
    }
    struct sink s = {.fp = fp};
    write_all(w, &s);
    if (s.err == 0 && fflush(fp) != 0) s.err = -errno;
    if (s.err == 0 && fsync(fileno(fp)) != 0) s.err = -errno;
    if (fclose(fp) != 0 && s.err == 0) s.err = -errno;
    if ((r = s.err) < 0) goto fail;
    if (rename(tmp, path) < 0) {
        r = -errno;
        goto fail;
    }
    free(tmp);
    return fsync_dir_of(path);
fail_fd:
    close(fd);
fail:
    unlink(tmp);
    free(tmp);
    return r;
}
