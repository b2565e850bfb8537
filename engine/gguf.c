/* GGUF reader: one validating pass over a read-only mapping, a private copy or a borrowed
 * buffer. The layout and the acceptance rules are documented in gguf.h. Every read goes
 * through a cursor that checks the bytes left; every count is checked against the bytes
 * left before anything is allocated from it; every size product is overflow-checked. */
#include "engine/gguf.h"
#include "engine/gguf-copy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian fields with memcpy: little-endian hosts only"
#endif

#define GGUF_HEADER_BYTES 24   /* magic, version, n_tensors, n_kv */
#define GGUF_MAX_KEY 65535     /* GGUF spec: keys are at most 2^16 - 1 bytes */
/* The smallest encodings, used to bound counts by the bytes left before allocating:
 * a pair = key length + 1 key byte + type + a 1-byte scalar (an empty array needs 12,
 * an empty string 8); a tensor info = name length + 1 byte + n_dims + ne[0] + type +
 * offset. */
#define GGUF_MIN_KV_BYTES (8 + 1 + 4 + 1)
#define GGUF_MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)

/* ---- value types ------------------------------------------------------------------- */

static const struct gguf_type_row {
    const char *name;
    uint8_t size;     /* bytes of one scalar; 0 for STRING and ARRAY */
    uint8_t min_size; /* smallest encoding of one element (for count checks) */
} type_rows[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = {"uint8", 1, 1},     [GGUF_TYPE_INT8] = {"int8", 1, 1},
    [GGUF_TYPE_UINT16] = {"uint16", 2, 2},   [GGUF_TYPE_INT16] = {"int16", 2, 2},
    [GGUF_TYPE_UINT32] = {"uint32", 4, 4},   [GGUF_TYPE_INT32] = {"int32", 4, 4},
    [GGUF_TYPE_FLOAT32] = {"float32", 4, 4}, [GGUF_TYPE_BOOL] = {"bool", 1, 1},
    [GGUF_TYPE_STRING] = {"string", 0, 8},   [GGUF_TYPE_ARRAY] = {"array", 0, 12},
    [GGUF_TYPE_UINT64] = {"uint64", 8, 8},   [GGUF_TYPE_INT64] = {"int64", 8, 8},
    [GGUF_TYPE_FLOAT64] = {"float64", 8, 8},
};

const char *gguf_type_name(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? type_rows[t].name : "?";
}

size_t gguf_type_size(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? type_rows[t].size : 0;
}

/* ---- allocation ---------------------------------------------------------------------- */

/* calloc for the per-pair and per-tensor arrays. Arrays of several MiB (a file of a
 * million tiny pairs) are filled page by page; asking for transparent huge pages cuts
 * the page faults about 500-fold, which is most of the time spent on such files. */
static void *calloc_big(uint64_t n, size_t size) {
    void *p = calloc_array(n, size);
    const uintptr_t huge = 2u << 20;
    if (p && n * size >= 2 * huge) {
        uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1);
        uintptr_t end = ((uintptr_t)p + n * size) & ~(huge - 1);
        if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
    }
    return p;
}

/* ---- name index: open addressing over element indices ------------------------------- */

/* Both struct gguf_kv and struct gguf_tensor begin with their name, so one index type
 * serves both: it reads the name of element i at base + i * stride. */
static_assert(offsetof(struct gguf_kv, key) == 0, "kv key first");
static_assert(offsetof(struct gguf_tensor, name) == 0, "tensor name first");

struct name_index {
    uint32_t *slots; /* element index + 1; 0 = empty */
    uint64_t mask;   /* capacity - 1, capacity a power of two >= 1.5 * n */
    const char *base;
    size_t stride;
};

static int index_init(struct name_index *ix, uint64_t n, const void *base, size_t stride) {
    uint64_t cap = 8;
    while (cap < n + n / 2 + 1) cap *= 2;
    ix->slots = calloc_big(cap, sizeof *ix->slots);
    if (!ix->slots) return -ENOMEM;
    ix->mask = cap - 1;
    ix->base = base;
    ix->stride = stride;
    return 0;
}

static const struct gguf_str *index_name(const struct name_index *ix, uint32_t slot) {
    return (const struct gguf_str *)(ix->base + (size_t)(slot - 1) * ix->stride);
}

/* The slot holding name, or the empty slot where it would go. */
static uint32_t *index_probe(const struct name_index *ix, const char *p, uint64_t len) {
    uint64_t h = hash64(p, len);
    for (uint64_t k = h & ix->mask;; k = (k + 1) & ix->mask) {
        uint32_t *s = &ix->slots[k];
        if (!*s) return s;
        const struct gguf_str *n = index_name(ix, *s);
        if (n->len == len && memcmp(n->ptr, p, len) == 0) return s;
    }
}

/* ---- the file ------------------------------------------------------------------------ */

struct gguf_file {
    const uint8_t *base;
    uint64_t size;      /* bytes at base */
    uint64_t file_size; /* of the file; > size for a metadata-only read (gguf_open_meta) */
    bool meta_only;     /* tensor data not read: tensor data pointers are NULL */
    void *own_buf;      /* malloc'd copy of the metadata (gguf_open_meta) */
    void *map; /* NULL when the buffer is borrowed */
    size_t map_size;
    bool copy_hashed;         /* gguf_open_copy(): copy_hash is the bytes' XXH3-128 */
    struct hash128 copy_hash;
    uint32_t version;
    uint64_t alignment, data_offset, data_end;
    uint64_t n_kv;
    struct gguf_kv *kvs;
    struct name_index kv_index;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    struct name_index tensor_index;
};

/* ---- cursor -------------------------------------------------------------------------- */

struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    struct err_detail *d;
    const char *what;     /* NULL (the header), "key" or "tensor" */
    uint64_t index;       /* of the key or tensor */
    struct gguf_str name; /* its name once read */
    char ctx[160];        /* ctx_str()'s buffer */
};

static uint64_t cur_left(const struct cursor *c) { return c->size - c->pos; }

/* Writes a printable, quoted-safe form of a name into out (at most ~64 characters). */
static void name_print(char *out, size_t cap, const char *p, uint64_t len) {
    size_t o = 0;
    for (uint64_t i = 0; i < len && o + 5 < cap; i++) {
        if (i == 60) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\') {
            out[o++] = (char)ch;
        } else {
            snprintf(out + o, cap - o, "\\x%02x", ch);
            o += 4;
        }
    }
    out[o] = 0;
}

/* Records what is being read; the text is formatted only when an error needs it. */
static void ctx_set(struct cursor *c, const char *what, uint64_t i, const struct gguf_str *name) {
    c->what = what;
    c->index = i;
    c->name = name ? *name : (struct gguf_str){0, NULL};
}

/* "header", "key #4", "key #4 'general.alignment'", "tensor #2 'output.weight'" */
static const char *ctx_str(struct cursor *c) {
    if (!c->what) return "header";
    if (!c->name.ptr) {
        snprintf(c->ctx, sizeof c->ctx, "%s #%" PRIu64, c->what, c->index);
        return c->ctx;
    }
    char buf[80];
    name_print(buf, sizeof buf, c->name.ptr, c->name.len);
    snprintf(c->ctx, sizeof c->ctx, "%s #%" PRIu64 " '%s'", c->what, c->index, buf);
    return c->ctx;
}

/* ERR_TRUNCATED unless n bytes are left. */
static int cur_need(struct cursor *c, uint64_t n, const char *field) {
    if (cur_left(c) >= n) return 0;
    return err_set(c->d, ERR_TRUNCATED,
                   "%s: %s at offset %" PRIu64 ": needs %" PRIu64 " bytes, only %" PRIu64
                   " left (the file is %" PRIu64 " bytes)",
                   ctx_str(c), field, c->pos, n, cur_left(c), c->size);
}

static int cur_u32(struct cursor *c, uint32_t *v, const char *field) {
    int r = cur_need(c, 4, field);
    if (r < 0) return r;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(struct cursor *c, uint64_t *v, const char *field) {
    int r = cur_need(c, 8, field);
    if (r < 0) return r;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string's bytes after its length was read at len_off. */
static int cur_str_bytes(struct cursor *c, uint64_t len, uint64_t len_off, const char *field,
                         struct gguf_str *ret) {
    if (len > cur_left(c))
        return err_set(c->d, ERR_GGUF_BAD_STRING,
                       "%s: %s at offset %" PRIu64 ": length %" PRIu64
                       " exceeds the %" PRIu64 " bytes left in the file",
                       ctx_str(c), field, len_off, len, cur_left(c));
    *ret = (struct gguf_str){len, (const char *)c->base + c->pos};
    c->pos += len;
    return 0;
}

/* Reads element j of a string array. Its field name ("element #j") is formatted only
 * when the element is bad: formatting it for every element was half the time of
 * opening a 100k-token vocabulary. */
static int cur_str_elem(struct cursor *c, uint64_t j) {
    uint64_t len_off = c->pos, len;
    struct gguf_str s;
    struct err_detail *d = c->d;
    c->d = NULL;
    int r = cur_u64(c, &len, "element");
    if (r >= 0) r = cur_str_bytes(c, len, len_off, "element", &s);
    c->d = d;
    if (r >= 0 || !d) return r;
    /* the same checks again, naming the element in the detail */
    char field[48];
    snprintf(field, sizeof field, "element #%" PRIu64, j);
    c->pos = len_off;
    if ((r = cur_u64(c, &len, field)) < 0) return r;
    return cur_str_bytes(c, len, len_off, field, &s);
}

/* ---- header -------------------------------------------------------------------------- */

static int parse_header(struct gguf_file *f, struct cursor *c) {
    if (c->size == 0) return err_set(c->d, ERR_TRUNCATED, "header: the file is empty");
    size_t m = (size_t)MIN(c->size, (uint64_t)4);
    if (memcmp(c->base, GGUF_MAGIC, m) != 0) {
        char buf[24];
        name_print(buf, sizeof buf, (const char *)c->base, m);
        return err_set(c->d, ERR_BAD_MAGIC, "header: magic '%s' at offset 0 is not 'GGUF'", buf);
    }
    int r = cur_need(c, 4, "magic");
    if (r < 0) return r;
    c->pos = 4;
    uint32_t version;
    if ((r = cur_u32(c, &version, "version")) < 0) return r;
    if (version != 2 && version != 3) {
        uint32_t swapped = __builtin_bswap32(version);
        if (swapped == 2 || swapped == 3)
            return err_set(c->d, ERR_BAD_VERSION,
                           "header: version 0x%08" PRIx32 " at offset 4 is byte-swapped: "
                           "big-endian GGUF files are not supported", version);
        if (version == 1)
            return err_set(c->d, ERR_BAD_VERSION,
                           "header: version 1 at offset 4: GGUF v1 (32-bit counts) is not supported");
        return err_set(c->d, ERR_BAD_VERSION,
                       "header: version %" PRIu32 " at offset 4: only versions 2 and 3 are supported",
                       version);
    }
    f->version = version;
    uint64_t n_tensors, n_kv;
    if ((r = cur_u64(c, &n_tensors, "n_tensors")) < 0) return r;
    if ((r = cur_u64(c, &n_kv, "n_kv")) < 0) return r;
    /* Bound both counts by the bytes left before allocating anything from them. */
    uint64_t left = cur_left(c);
    if (n_kv > left / GGUF_MIN_KV_BYTES || n_kv > UINT32_MAX - 1)
        return err_set(c->d, ERR_GGUF_BAD_COUNT,
                       "header: n_kv %" PRIu64 " at offset 16: %" PRIu64
                       " pairs need at least %d bytes each, only %" PRIu64 " bytes left",
                       n_kv, n_kv, GGUF_MIN_KV_BYTES, left);
    if (n_tensors > left / GGUF_MIN_TENSOR_BYTES || n_tensors > UINT32_MAX - 1)
        return err_set(c->d, ERR_GGUF_BAD_COUNT,
                       "header: n_tensors %" PRIu64 " at offset 8: %" PRIu64
                       " tensor infos need at least %d bytes each, only %" PRIu64 " bytes left",
                       n_tensors, n_tensors, GGUF_MIN_TENSOR_BYTES, left);
    if (n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES > left)
        return err_set(c->d, ERR_GGUF_BAD_COUNT,
                       "header: n_kv %" PRIu64 " and n_tensors %" PRIu64
                       " at offsets 16 and 8 need at least %" PRIu64 " bytes, only %" PRIu64 " left",
                       n_kv, n_tensors, n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES,
                       left);
    f->n_kv = n_kv;
    f->n_tensors = n_tensors;
    return 0;
}

/* ---- metadata ------------------------------------------------------------------------ */

static int parse_value(struct cursor *c, struct gguf_kv *kv, uint64_t **ret_off) {
    int r;
    if (kv->type == GGUF_TYPE_STRING) {
        uint64_t off = c->pos, len;
        struct gguf_str s;
        kv->data = c->base + c->pos;
        if ((r = cur_u64(c, &len, "string length")) < 0) return r;
        return cur_str_bytes(c, len, off, "string value", &s);
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        kv->data = c->base + c->pos;
        if ((r = cur_need(c, type_rows[kv->type].size, "value")) < 0) return r;
        c->pos += type_rows[kv->type].size;
        return 0;
    }
    uint32_t et;
    uint64_t et_off = c->pos, n_off;
    if ((r = cur_u32(c, &et, "array element type")) < 0) return r;
    if (et == GGUF_TYPE_ARRAY)
        return err_set(c->d, ERR_GGUF_BAD_VALUE_TYPE,
                       "%s: array element type at offset %" PRIu64 ": arrays of arrays are not supported",
                       ctx_str(c), et_off);
    if (et >= GGUF_TYPE_COUNT)
        return err_set(c->d, ERR_GGUF_BAD_VALUE_TYPE,
                       "%s: array element type %" PRIu32 " at offset %" PRIu64
                       " is not a GGUF type (0..12)", ctx_str(c), et, et_off);
    kv->arr_type = et;
    n_off = c->pos;
    uint64_t n;
    if ((r = cur_u64(c, &n, "array length")) < 0) return r;
    uint64_t min = type_rows[et].min_size;
    if (n > cur_left(c) / min)
        return err_set(c->d, ERR_GGUF_BAD_COUNT,
                       "%s: array of %" PRIu64 " %s at offset %" PRIu64
                       " needs at least %" PRIu64 " bytes each, only %" PRIu64 " bytes left",
                       ctx_str(c), n, type_rows[et].name, n_off, min, cur_left(c));
    kv->n = n;
    kv->data = c->base + c->pos;
    if (et != GGUF_TYPE_STRING) {
        c->pos += n * min; /* n * min <= bytes left: no overflow */
        return 0;
    }
    /* The string index makes gguf_kv_str() O(1); n * 8 <= bytes left bounds it. */
    uint64_t *off = malloc_array(n ? n : 1, sizeof *off);
    if (!off) return -ENOMEM;
    uint64_t start = c->pos;
    for (uint64_t j = 0; j < n; j++) {
        off[j] = c->pos - start;
        if ((r = cur_str_elem(c, j)) < 0) goto fail;
    }
    *ret_off = off;
    return 0;
fail:
    free(off);
    return r;
}

static int parse_alignment(struct gguf_file *f, struct cursor *c, const struct gguf_kv *kv) {
    if (kv->type != GGUF_TYPE_UINT32)
        return err_set(c->d, ERR_GGUF_WRONG_TYPE,
                       "%s at offset %" PRIu64 ": alignment has type %s, expected uint32",
                       ctx_str(c), kv->offset,
                       kv->type == GGUF_TYPE_ARRAY ? "array" : type_rows[kv->type].name);
    uint32_t a;
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return err_set(c->d, ERR_GGUF_BAD_ALIGN,
                       "%s at offset %" PRIu64 ": alignment %" PRIu32 " is not a power of two",
                       ctx_str(c), kv->offset, a);
    f->alignment = a;
    return 0;
}

static int parse_kvs(struct gguf_file *f, struct cursor *c) {
    int r;
    if (f->n_kv) {
        f->kvs = calloc_big(f->n_kv, sizeof *f->kvs);
        if (!f->kvs) return -ENOMEM;
        if ((r = index_init(&f->kv_index, f->n_kv, f->kvs, sizeof *f->kvs)) < 0) return r;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kvs[i];
        uint64_t len;
        ctx_set(c, "key", i, NULL);
        kv->offset = c->pos;
        if ((r = cur_u64(c, &len, "key length")) < 0) return r;
        if (len == 0)
            return err_set(c->d, ERR_GGUF_BAD_KEY, "%s at offset %" PRIu64 ": empty key",
                           ctx_str(c), kv->offset);
        if (len > GGUF_MAX_KEY)
            return err_set(c->d, ERR_GGUF_BAD_KEY,
                           "%s at offset %" PRIu64 ": key length %" PRIu64
                           " exceeds the GGUF limit of %d bytes", ctx_str(c), kv->offset, len,
                           GGUF_MAX_KEY);
        if ((r = cur_str_bytes(c, len, kv->offset, "key", &kv->key)) < 0) return r;
        ctx_set(c, "key", i, &kv->key);
        if (memchr(kv->key.ptr, 0, len))
            return err_set(c->d, ERR_GGUF_BAD_KEY, "%s at offset %" PRIu64 ": key contains a NUL byte",
                           ctx_str(c), kv->offset);
        uint32_t *slot = index_probe(&f->kv_index, kv->key.ptr, len);
        if (*slot)
            return err_set(c->d, ERR_GGUF_DUP_KEY,
                           "%s at offset %" PRIu64 ": duplicate of key #%" PRIu32 " at offset %" PRIu64,
                           ctx_str(c), kv->offset, *slot - 1, f->kvs[*slot - 1].offset);
        *slot = (uint32_t)(i + 1);
        uint32_t type;
        uint64_t type_off = c->pos;
        if ((r = cur_u32(c, &type, "value type")) < 0) return r;
        if (type >= GGUF_TYPE_COUNT)
            return err_set(c->d, ERR_GGUF_BAD_VALUE_TYPE,
                           "%s: value type %" PRIu32 " at offset %" PRIu64 " is not a GGUF type (0..12)",
                           ctx_str(c), type, type_off);
        kv->type = type;
        kv->arr_type = type;
        kv->n = 1;
        uint64_t *off = NULL;
        if ((r = parse_value(c, kv, &off)) < 0) return r;
        kv->str_off = off;
        if (gguf_str_eq(kv->key, "general.alignment") && (r = parse_alignment(f, c, kv)) < 0)
            return r;
    }
    return 0;
}

/* ---- tensor infos -------------------------------------------------------------------- */

static int parse_tensor_info(struct gguf_file *f, struct cursor *c, uint64_t i) {
    struct gguf_tensor *t = &f->tensors[i];
    uint64_t info_off = c->pos, len;
    int r;
    ctx_set(c, "tensor", i, NULL);
    if ((r = cur_u64(c, &len, "name length")) < 0) return r;
    if (len == 0)
        return err_set(c->d, ERR_GGUF_BAD_TENSOR_NAME, "%s at offset %" PRIu64 ": empty name",
                       ctx_str(c), info_off);
    if (len > GGUF_MAX_NAME)
        return err_set(c->d, ERR_GGUF_BAD_TENSOR_NAME,
                       "%s at offset %" PRIu64 ": name length %" PRIu64 " exceeds %d bytes",
                       ctx_str(c), info_off, len, GGUF_MAX_NAME);
    if ((r = cur_str_bytes(c, len, info_off, "name", &t->name)) < 0) return r;
    ctx_set(c, "tensor", i, &t->name);
    if (memchr(t->name.ptr, 0, len))
        return err_set(c->d, ERR_GGUF_BAD_TENSOR_NAME,
                       "%s at offset %" PRIu64 ": name contains a NUL byte", ctx_str(c), info_off);
    uint32_t *slot = index_probe(&f->tensor_index, t->name.ptr, len);
    if (*slot)
        return err_set(c->d, ERR_GGUF_DUP_TENSOR,
                       "%s at offset %" PRIu64 ": duplicate of tensor #%" PRIu32,
                       ctx_str(c), info_off, *slot - 1);
    *slot = (uint32_t)(i + 1);

    uint64_t dims_off = c->pos;
    if ((r = cur_u32(c, &t->n_dims, "n_dims")) < 0) return r;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(c->d, ERR_GGUF_BAD_DIMS,
                       "%s: n_dims %" PRIu32 " at offset %" PRIu64 " is not in 1..%d",
                       ctx_str(c), t->n_dims, dims_off, GGUF_MAX_DIMS);
    for (int k = 0; k < GGUF_MAX_DIMS; k++) t->ne[k] = 1;
    for (uint32_t k = 0; k < t->n_dims; k++) {
        uint64_t ne_off = c->pos, ne;
        if ((r = cur_u64(c, &ne, "ne")) < 0) return r;
        if (ne > INT64_MAX)
            return err_set(c->d, ERR_GGUF_BAD_SHAPE,
                           "%s: ne[%" PRIu32 "] = %" PRId64 " at offset %" PRIu64 " is negative",
                           ctx_str(c), k, (int64_t)ne, ne_off);
        if (ne == 0)
            return err_set(c->d, ERR_GGUF_BAD_SHAPE,
                           "%s: ne[%" PRIu32 "] at offset %" PRIu64
                           " is 0 (empty tensors are rejected)", ctx_str(c), k, ne_off);
        t->ne[k] = (int64_t)ne;
    }
    uint64_t type_off = c->pos;
    uint32_t type;
    if ((r = cur_u32(c, &type, "type")) < 0) return r;
    const struct kern_type_traits *tr = type <= INT_MAX ? kern_type_traits((int)type) : NULL;
    if (!tr || tr->blck_size <= 0 || tr->type_size == 0)
        return err_set(c->d, ERR_GGUF_BAD_TENSOR_TYPE,
                       "%s: type %" PRIu32 " at offset %" PRIu64 " is not a known ggml type",
                       ctx_str(c), type, type_off);
    t->type = type;
    if ((r = cur_u64(c, &t->offset, "offset")) < 0) return r;

    int64_t n_el = 1;
    for (int k = 0; k < GGUF_MAX_DIMS; k++)
        if (!i64_mul(n_el, t->ne[k], &n_el))
            return err_set(c->d, ERR_GGUF_BAD_SHAPE,
                           "%s at offset %" PRIu64 ": element count %" PRId64 " x %" PRId64
                           " x %" PRId64 " x %" PRId64 " overflows int64", ctx_str(c), info_off,
                           t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    if (t->ne[0] % tr->blck_size != 0)
        return err_set(c->d, ERR_GGUF_BAD_SHAPE,
                       "%s at offset %" PRIu64 ": ne[0] = %" PRId64
                       " is not a multiple of the block size %" PRId64 " of %s",
                       ctx_str(c), info_off, t->ne[0], tr->blck_size, tr->name);
    uint64_t bytes = (uint64_t)(t->ne[0] / tr->blck_size);
    bool ok = u64_mul(bytes, tr->type_size, &bytes);
    for (int k = 1; ok && k < GGUF_MAX_DIMS; k++) ok = u64_mul(bytes, (uint64_t)t->ne[k], &bytes);
    if (!ok || bytes > INT64_MAX)
        return err_set(c->d, ERR_GGUF_BAD_SHAPE,
                       "%s at offset %" PRIu64 ": the byte size of %" PRId64 " %s values overflows",
                       ctx_str(c), info_off, n_el, tr->name);
    t->n_bytes = bytes;
    return 0;
}

/* Places the data section and checks each tensor's offset and bounds. */
static int check_data(struct gguf_file *f, struct cursor *c) {
    if (!u64_align_up(c->pos, f->alignment, &f->data_offset))
        return err_set(c->d, ERR_OVERFLOW, "data section offset overflows");
    uint64_t running = 0; /* where the next tensor must start, relative to the data section */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        char name[80];
        name_print(name, sizeof name, t->name.ptr, t->name.len);
        if (t->offset % f->alignment != 0)
            return err_set(c->d, ERR_GGUF_BAD_ALIGN,
                           "tensor #%" PRIu64 " '%s': offset %" PRIu64
                           " is not a multiple of the alignment %" PRIu64,
                           i, name, t->offset, f->alignment);
        if (t->offset != running)
            return err_set(c->d, ERR_GGUF_BAD_OFFSET,
                           "tensor #%" PRIu64 " '%s': offset %" PRIu64 ", expected %" PRIu64
                           " (tensor data must follow in order, each padded to the alignment)",
                           i, name, t->offset, running);
        uint64_t start, end;
        if (!u64_add(f->data_offset, t->offset, &start) || !u64_add(start, t->n_bytes, &end))
            return err_set(c->d, ERR_GGUF_DATA_EOF,
                           "tensor '%s': data (offset %" PRIu64 ", %" PRIu64
                           " bytes) ends past 2^64, the file is %" PRIu64 " bytes",
                           name, t->offset, t->n_bytes, f->file_size);
        if (end > f->file_size)
            return err_set(c->d, ERR_GGUF_DATA_EOF,
                           "tensor '%s': data ends at %" PRIu64
                           " bytes past the end of the file (data at file offset %" PRIu64
                           ", %" PRIu64 " bytes; the file is %" PRIu64 " bytes)",
                           name, end - f->file_size, start, t->n_bytes, f->file_size);
        t->data = f->meta_only ? NULL : f->base + start;
        uint64_t padded;
        if (!u64_align_up(t->n_bytes, f->alignment, &padded) || !u64_add(running, padded, &running))
            return err_set(c->d, ERR_GGUF_DATA_EOF, "tensor '%s': padded size overflows", name);
    }
    if (!u64_add(f->data_offset, running, &f->data_end))
        return err_set(c->d, ERR_OVERFLOW, "data section end overflows");
    return 0;
}

static int parse(struct gguf_file *f, struct err_detail *d) {
    struct cursor c = {.base = f->base, .size = f->size, .pos = 0, .d = d};
    int r;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((r = parse_header(f, &c)) < 0) return r;
    if ((r = parse_kvs(f, &c)) < 0) return r;
    if (f->n_tensors) {
        f->tensors = calloc_big(f->n_tensors, sizeof *f->tensors);
        if (!f->tensors) return -ENOMEM;
        r = index_init(&f->tensor_index, f->n_tensors, f->tensors, sizeof *f->tensors);
        if (r < 0) return r;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((r = parse_tensor_info(f, &c, i)) < 0) return r;
    return check_data(f, &c);
}

/* ---- open / close -------------------------------------------------------------------- */

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_kv && f->kvs; i++) free((void *)f->kvs[i].str_off);
    free(f->kvs);
    free(f->kv_index.slots);
    free(f->tensors);
    free(f->tensor_index.slots);
    if (f->map) munmap(f->map, f->map_size);
    free(f->own_buf);
    free(f);
}

/* Takes ownership of map (unmapped on failure). */
static int open_buffer(const void *data, size_t size, void *map, struct gguf_file **ret,
                       struct err_detail *d) {
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map) munmap(map, size);
        return -ENOMEM;
    }
    f->base = data;
    f->size = f->file_size = size;
    f->map = map;
    f->map_size = size;
    int r = parse(f, d);
    if (r < 0) {
        if (r == -ENOMEM) err_set(d, r, "out of memory while reading the GGUF metadata");
        gguf_close(f);
        return r;
    }
    *ret = f;
    return 0;
}

int gguf_open_mem(const void *data, size_t size, struct gguf_file **ret, struct err_detail *d) {
    if (!data && size) return err_set(d, ERR_INVALID, "NULL buffer");
    static const uint8_t empty[1];
    return open_buffer(data ? data : empty, size, NULL, ret, d);
}

/* Opens path read-only and checks it is a regular file; *ret_fd and *ret_st on success. */
static int open_regular(const char *path, int *ret_fd, struct stat *ret_st, struct err_detail *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = -errno;
        return err_set(d, e, "open '%s': %s", path, err_str(e));
    }
    if (fstat(fd, ret_st) < 0) {
        int e = -errno;
        close(fd);
        return err_set(d, e, "stat '%s': %s", path, err_str(e));
    }
    if (!S_ISREG(ret_st->st_mode)) {
        close(fd);
        return err_set(d, ERR_INVALID, "'%s' is not a regular file", path);
    }
    if ((uint64_t)ret_st->st_size > SIZE_MAX / 2) {
        close(fd);
        return err_set(d, ERR_TOO_LARGE, "'%s' has %llu bytes, more than this host can map",
                       path, (unsigned long long)ret_st->st_size);
    }
    *ret_fd = fd;
    return 0;
}

int gguf_open(const char *path, struct gguf_file **ret, struct err_detail *d) {
    int fd = -1;
    struct stat st;
    int e = open_regular(path, &fd, &st, d);
    if (e < 0) return e;
    if (st.st_size == 0) { /* mmap cannot map 0 bytes; the parser rejects it the same way */
        close(fd);
        return gguf_open_mem("", 0, ret, d);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    e = -errno;
    close(fd);
    if (map == MAP_FAILED) return err_set(d, e, "mmap '%s': %s", path, err_str(e));
    return open_buffer(map, (size_t)st.st_size, map, ret, d);
}

/* Reads of the metadata: bytes per read() call. How often a file that changes while it is
 * copied is read again before giving up (a copy still being written keeps changing). */
#define READ_CHUNK_BYTES (16u << 20)
#define COPY_ATTEMPTS 3

/* Did the file change between two fstat() calls on one open fd? A write or a truncation
 * moves ctime, which (unlike mtime) no utimes() call can set back; size catches a change
 * within one timestamp tick that also changes the length. */
static bool file_changed(const struct stat *a, const struct stat *b) {
    return a->st_size != b->st_size || a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
           a->st_mtim.tv_nsec != b->st_mtim.tv_nsec || a->st_ctim.tv_sec != b->st_ctim.tv_sec ||
           a->st_ctim.tv_nsec != b->st_ctim.tv_nsec;
}

/* Reads all size bytes of fd into buf; 1 when the file ended early (it shrank). */
static int read_all(int fd, uint8_t *buf, size_t size) {
    for (size_t at = 0; at < size;) {
        ssize_t n = pread(fd, buf + at, MIN(size - at, (size_t)READ_CHUNK_BYTES), (off_t)at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return 1;
        at += (size_t)n;
    }
    return 0;
}

int gguf_open_copy(const char *path, struct gguf_file **ret, struct err_detail *d) {
    int fd = -1;
    struct stat st, after;
    int e = open_regular(path, &fd, &st, d);
    if (e < 0) return e;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (int attempt = 0; attempt < COPY_ATTEMPTS; attempt++) {
        if (attempt && fstat(fd, &st) < 0) break;
        size_t size = (size_t)st.st_size;
        if (size == 0) { /* the parser rejects it as gguf_open does */
            close(fd);
            return gguf_open_mem("", 0, ret, d);
        }
        void *map = NULL;
        struct hash128 h;
        e = gguf_copy_read(fd, size, &map, &h);
        if (e == -ENOMEM) {
            close(fd);
            return err_set(d, e, "'%s': no memory for a copy of %zu bytes", path, size);
        }
        if (e < 0) {
            close(fd);
            return err_set(d, e, "read '%s': %s", path, err_str(e));
        }
        if (e == 0 && fstat(fd, &after) == 0 && !file_changed(&st, &after)) {
            close(fd);
            /* read-only from here on, like the mapping it stands in for */
            (void)mprotect(map, size, PROT_READ);
            e = open_buffer(map, size, map, ret, d);
            if (e >= 0) {
                (*ret)->copy_hashed = true;
                (*ret)->copy_hash = h;
            }
            return e;
        }
        if (map) munmap(map, size);
    }
    close(fd);
    return err_set(d, -EAGAIN, "'%s' changed while it was being read (%d attempts); is it "
                   "still being written?", path, COPY_ATTEMPTS);
}

/* The metadata of a file is read in growing prefixes: most fit the first read; a big
 * vocabulary takes a few more; past the cap the file is refused rather than read whole. */
#define META_FIRST_BYTES (1u << 20)
#define META_MAX_BYTES (512u << 20)

int gguf_open_meta(int fd, struct gguf_file **ret, struct err_detail *d) {
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        return err_set(d, e, "stat: %s", err_str(e));
    }
    if (!S_ISREG(st.st_mode)) return err_set(d, ERR_INVALID, "not a regular file");
    uint64_t file_size = (uint64_t)st.st_size;
    for (uint64_t want = META_FIRST_BYTES;; want *= 8) {
        size_t size = (size_t)MIN(want, MIN(file_size, (uint64_t)META_MAX_BYTES));
        uint8_t *buf = malloc(size ? size : 1);
        if (!buf) return -ENOMEM;
        int e = read_all(fd, buf, size);
        if (e < 0) {
            free(buf);
            return err_set(d, e, "read: %s", err_str(e));
        }
        if (e == 1) { /* it shrank: judge what is there now */
            free(buf);
            if (fstat(fd, &st) < 0 || (uint64_t)st.st_size >= file_size)
                return err_set(d, -EAGAIN, "the file changed while it was being read");
            file_size = (uint64_t)st.st_size;
            want = META_FIRST_BYTES / 8; /* start over */
            continue;
        }
        struct gguf_file *f = calloc(1, sizeof *f);
        if (!f) {
            free(buf);
            return -ENOMEM;
        }
        f->base = buf;
        f->size = size;
        f->file_size = file_size;
        f->meta_only = true;
        f->own_buf = buf;
        struct err_detail attempt = {0};
        e = parse(f, &attempt);
        if (e >= 0) {
            *ret = f;
            return 0;
        }
        gguf_close(f);
        /* A prefix can fail anywhere (a count checked against the bytes left, a string
         * cut short); only the whole file, or the cap, gives the verdict. */
        if (size == file_size || size == META_MAX_BYTES) {
            if (d) *d = attempt;
            if (size < file_size && e == ERR_TRUNCATED)
                return err_set(d, ERR_TOO_LARGE, "the metadata is larger than %u MiB",
                               META_MAX_BYTES >> 20);
            return e;
        }
    }
}

/* ---- accessors ----------------------------------------------------------------------- */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
uint64_t gguf_data_end(const struct gguf_file *f) { return f->data_end; }
uint64_t gguf_trailing_bytes(const struct gguf_file *f) {
    return f->file_size > f->data_end ? f->file_size - f->data_end : 0;
}
const void *gguf_base(const struct gguf_file *f) { return f->base; }
bool gguf_copy_hash(const struct gguf_file *f, struct hash128 *ret) {
    if (f->copy_hashed) *ret = f->copy_hash;
    return f->copy_hashed;
}
uint64_t gguf_size(const struct gguf_file *f) { return f->file_size; }
uint64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
uint64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, uint64_t i) {
    return i < f->n_kv ? &f->kvs[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, uint64_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
    if (!f->n_kv) return NULL;
    uint32_t *s = index_probe(&f->kv_index, key, strlen(key));
    return *s ? &f->kvs[*s - 1] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    if (!f->n_tensors) return NULL;
    uint32_t *s = index_probe(&f->tensor_index, name, strlen(name));
    return *s ? &f->tensors[*s - 1] : NULL;
}

bool gguf_str_eq(struct gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

struct gguf_str gguf_kv_str(const struct gguf_kv *kv, uint64_t i) {
    const char *p;
    if (kv->type == GGUF_TYPE_STRING && i == 0)
        p = kv->data;
    else if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING && i < kv->n)
        p = (const char *)kv->data + kv->str_off[i];
    else
        return (struct gguf_str){0, NULL};
    uint64_t len;
    memcpy(&len, p, 8);
    return (struct gguf_str){len, p + 8};
}

/* ---- typed getters ------------------------------------------------------------------- */

/* The pair, or NULL with ERR_GGUF_MISSING recorded in d. */
static const struct gguf_kv *get_kv(const struct gguf_file *f, const char *key,
                                    struct err_detail *d) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) err_set(d, ERR_GGUF_MISSING, "key '%s' is missing", key);
    return kv;
}

static const char *kv_type_desc(const struct gguf_kv *kv, char *buf, size_t cap) {
    if (kv->type == GGUF_TYPE_ARRAY)
        snprintf(buf, cap, "array of %s", type_rows[kv->arr_type].name);
    else
        snprintf(buf, cap, "%s", type_rows[kv->type].name);
    return buf;
}

static int wrong_type(const struct gguf_kv *kv, const char *key, const char *want,
                      struct err_detail *d) {
    char buf[40];
    return err_set(d, ERR_GGUF_WRONG_TYPE, "key '%s' at offset %" PRIu64 ": type %s, expected %s",
                   key, kv->offset, kv_type_desc(kv, buf, sizeof buf), want);
}

/* An integer scalar as (negative?, magnitude). false for non-integer types. */
static bool kv_int(const struct gguf_kv *kv, bool *neg, uint64_t *mag) {
    int64_t s;
    uint64_t u;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: { uint8_t v; memcpy(&v, kv->data, 1); u = v; goto unsigned_; }
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, kv->data, 2); u = v; goto unsigned_; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, kv->data, 4); u = v; goto unsigned_; }
    case GGUF_TYPE_UINT64: { memcpy(&u, kv->data, 8); goto unsigned_; }
    case GGUF_TYPE_INT8: { int8_t v; memcpy(&v, kv->data, 1); s = v; goto signed_; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, kv->data, 2); s = v; goto signed_; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, kv->data, 4); s = v; goto signed_; }
    case GGUF_TYPE_INT64: { memcpy(&s, kv->data, 8); goto signed_; }
    default: return false;
    }
unsigned_:
    *neg = false;
    *mag = u;
    return true;
signed_:
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

/* Reads an integer that must lie in [-neg_max, pos_max]. */
static int get_int(const struct gguf_file *f, const char *key, const char *want, uint64_t neg_max,
                   uint64_t pos_max, bool *ret_neg, uint64_t *ret_mag, struct err_detail *d) {
    const struct gguf_kv *kv = get_kv(f, key, d);
    if (!kv) return ERR_GGUF_MISSING;
    bool neg;
    uint64_t mag;
    if (!kv_int(kv, &neg, &mag)) return wrong_type(kv, key, want, d);
    if (neg ? mag > neg_max : mag > pos_max)
        return err_set(d, ERR_GGUF_WRONG_TYPE, "key '%s' at offset %" PRIu64 ": value %s%" PRIu64
                       " does not fit in %s", key, kv->offset, neg ? "-" : "", mag, want);
    *ret_neg = neg;
    *ret_mag = mag;
    return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, struct err_detail *d) {
    bool neg = false;
    uint64_t mag = 0;
    int r = get_int(f, key, "uint32", 0, UINT32_MAX, &neg, &mag, d);
    if (r < 0) return r;
    *ret = (uint32_t)mag;
    return 0;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *ret, struct err_detail *d) {
    bool neg = false;
    uint64_t mag = 0;
    int r = get_int(f, key, "uint64", 0, UINT64_MAX, &neg, &mag, d);
    if (r < 0) return r;
    *ret = mag;
    return 0;
}

int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *ret, struct err_detail *d) {
    bool neg = false;
    uint64_t mag = 0;
    int r = get_int(f, key, "int32", (uint64_t)INT32_MAX + 1, INT32_MAX, &neg, &mag, d);
    if (r < 0) return r;
    *ret = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, struct err_detail *d) {
    const struct gguf_kv *kv = get_kv(f, key, d);
    if (!kv) return ERR_GGUF_MISSING;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(ret, kv->data, 4);
    } else if (kv->type == GGUF_TYPE_FLOAT64) {
        double v;
        memcpy(&v, kv->data, 8);
        *ret = (float)v;
    } else {
        return wrong_type(kv, key, "float32", d);
    }
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *ret, struct err_detail *d) {
    const struct gguf_kv *kv = get_kv(f, key, d);
    if (!kv) return ERR_GGUF_MISSING;
    if (kv->type != GGUF_TYPE_BOOL) return wrong_type(kv, key, "bool", d);
    *ret = *(const uint8_t *)kv->data != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *ret,
                 struct err_detail *d) {
    const struct gguf_kv *kv = get_kv(f, key, d);
    if (!kv) return ERR_GGUF_MISSING;
    if (kv->type != GGUF_TYPE_STRING) return wrong_type(kv, key, "string", d);
    *ret = gguf_kv_str(kv, 0);
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
                 const struct gguf_kv **ret, struct err_detail *d) {
    const struct gguf_kv *kv = get_kv(f, key, d);
    if (!kv) return ERR_GGUF_MISSING;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != elem) {
        char want[40];
        snprintf(want, sizeof want, "array of %s", gguf_type_name(elem));
        return wrong_type(kv, key, want, d);
    }
    *ret = kv;
    return 0;
}
