/* The malformed-GGUF corpus (reliability-tests.md §1.4, classes G01-G18, G24-G37, G39,
 * G42): every file is built here byte by byte, written to the test's temporary directory
 * and opened through gguf_open() (the real path) and gguf_open_mem(); each must be
 * rejected with its specific error code and a detail message naming the field and the
 * offset. G37 cuts a valid tiny model at every byte through the end of its tensor infos
 * and then every 4 KiB; the expected code of each cut comes from a log of the fields the
 * builder wrote (see predict_cut()). G42 (trailing bytes) is accepted, as gguf.h
 * documents. Classes G19-G23, G38, G40, G41, G43 concern the vocab and model loaders and
 * the request path, and are tested there. */
#include "test.h"

#include "engine/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

/* ---- byte builder with a field log ---------------------------------------------------- */

enum fld_kind {
    FLD_FIXED, /* a fixed-size field: a cut inside it is ERR_TRUNCATED */
    FLD_STR,   /* string bytes after their length: a cut inside is ERR_GGUF_BAD_STRING */
    FLD_COUNT, /* a fixed-size count: a cut inside is ERR_TRUNCATED, and fewer than
                * `need` bytes after it is ERR_GGUF_BAD_COUNT */
};

struct fld {
    uint64_t end;
    enum fld_kind kind;
    uint64_t need;
};

struct bb {
    uint8_t *p;
    size_t len, cap;
    struct fld *flds;
    size_t n_flds, flds_cap;
    bool oom;
};

static void bb_raw(struct bb *b, const void *p, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bb_log(struct bb *b, enum fld_kind kind, uint64_t need) {
    if (b->oom) return;
    if (b->n_flds == b->flds_cap) {
        size_t cap = b->flds_cap ? b->flds_cap * 2 : 64;
        struct fld *nf = realloc(b->flds, cap * sizeof *nf);
        if (!nf) {
            b->oom = true;
            return;
        }
        b->flds = nf;
        b->flds_cap = cap;
    }
    b->flds[b->n_flds++] = (struct fld){b->len, kind, need};
}

static void bb_free(struct bb *b) {
    free(b->p);
    free(b->flds);
    *b = (struct bb){0};
}

static void put_u8(struct bb *b, uint8_t v) { bb_raw(b, &v, 1), bb_log(b, FLD_FIXED, 0); }
static void put_u32(struct bb *b, uint32_t v) { bb_raw(b, &v, 4), bb_log(b, FLD_FIXED, 0); }
static void put_u64(struct bb *b, uint64_t v) { bb_raw(b, &v, 8), bb_log(b, FLD_FIXED, 0); }
static void put_f32(struct bb *b, float v) { bb_raw(b, &v, 4), bb_log(b, FLD_FIXED, 0); }
static void put_count(struct bb *b, uint64_t v, uint64_t need) {
    bb_raw(b, &v, 8);
    bb_log(b, FLD_COUNT, need);
}
static void put_strn(struct bb *b, const char *s, uint64_t n) {
    put_u64(b, n);
    if (n) {
        bb_raw(b, s, n);
        bb_log(b, FLD_STR, 0);
    }
}
static void put_str(struct bb *b, const char *s) { put_strn(b, s, strlen(s)); }
static void put_zeros(struct bb *b, size_t n) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = MIN(n, sizeof z);
        bb_raw(b, z, k);
        n -= k;
    }
}
static void put_pad(struct bb *b, size_t align) { put_zeros(b, (align - b->len % align) % align); }

/* Header: magic, version, n_tensors, n_kv (with the count check logged). */
static void hdr_v(struct bb *b, const char *magic, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    bb_raw(b, magic, 4);
    bb_log(b, FLD_FIXED, 0);
    put_u32(b, version);
    put_u64(b, n_t);
    put_count(b, n_kv, n_kv * 14 + n_t * 33);
}
static void hdr(struct bb *b, uint64_t n_t, uint64_t n_kv) { hdr_v(b, "GGUF", 3, n_t, n_kv); }

static void kv_u32(struct bb *b, const char *key, uint32_t v) {
    put_str(b, key);
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, v);
}
static void kv_str(struct bb *b, const char *key, const char *v) {
    put_str(b, key);
    put_u32(b, GGUF_TYPE_STRING);
    put_str(b, v);
}
static void arr_hdr(struct bb *b, const char *key, enum gguf_type et, uint64_t n, uint64_t min) {
    put_str(b, key);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, et);
    put_count(b, n, n * min);
}
/* A tensor info; ne has n_dims entries. */
static void ti(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
               uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t k = 0; k < n_dims; k++) put_u64(b, ne[k]);
    put_u32(b, type);
    put_u64(b, offset);
}

/* A file with one KV and one tensor info as given, then padding and `data` bytes. */
static void one_tensor(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data) {
    hdr(b, 1, 1);
    kv_str(b, "general.architecture", "llama");
    ti(b, name, n_dims, ne, type, offset);
    put_pad(b, 32);
    put_zeros(b, data);
}

/* ---- the corpus ----------------------------------------------------------------------- */

#define NE(...) (const uint64_t[]){__VA_ARGS__}

static void g01_fugg(struct bb *b) { hdr_v(b, "FUGG", 3, 0, 0); }
static void g01_lower(struct bb *b) { hdr_v(b, "gguf", 3, 0, 0); }
static void g02_v0(struct bb *b) { hdr_v(b, "GGUF", 0, 0, 0); }
static void g03_v1(struct bb *b) { hdr_v(b, "GGUF", 1, 0, 0); }
static void g04_v4(struct bb *b) { hdr_v(b, "GGUF", 4, 0, 0); }
static void g05_swapped(struct bb *b) { hdr_v(b, "GGUF", 0x03000000u, 0, 0); }
static void g06_ntensors_max(struct bb *b) {
    hdr(b, UINT64_MAX, 0);
    put_zeros(b, 1000);
}
static void g06_ntensors_2p32(struct bb *b) {
    hdr(b, 1ull << 32, 1);
    kv_u32(b, "a", 1);
}
static void g07_nkv_max(struct bb *b) { /* CVE-2024-23605 */
    hdr(b, 0, UINT64_MAX);
    kv_u32(b, "a", 1);
}
static void g07_nkv_1000(struct bb *b) {
    hdr(b, 0, 1000);
    for (int i = 0; i < 4; i++) kv_u32(b, (const char *[]){"a", "b", "c", "d"}[i], 1);
}
static void g08_empty(struct bb *b) { (void)b; }
static void g09_1(struct bb *b) { bb_raw(b, "G", 1); }
static void g09_3(struct bb *b) { bb_raw(b, "GGU", 3); }
static void g09_7(struct bb *b) { bb_raw(b, "GGUF\3\0\0", 7); }
static void g09_16(struct bb *b) {
    hdr(b, 0, 0);
    b->len = 16;
}
static void g09_23(struct bb *b) {
    hdr(b, 0, 0);
    b->len = 23;
}
static void g10_keylen_max(struct bb *b) {
    hdr(b, 0, 1);
    put_u64(b, UINT64_MAX);
    put_zeros(b, 64);
}
static void g10_keylen_65536(struct bb *b) {
    hdr(b, 0, 1);
    put_u64(b, 65536);
    put_zeros(b, 70000);
}
static void g11_value_len(struct bb *b) { /* CVE-2024-23496 */
    hdr(b, 0, 1);
    put_str(b, "general.name");
    put_u32(b, GGUF_TYPE_STRING);
    put_u64(b, 100);
    put_zeros(b, 99);
}
static void g11_key_len(struct bb *b) {
    hdr(b, 0, 1);
    put_u64(b, 40);
    put_zeros(b, 20);
}
static void g11_arr_elem_len(struct bb *b) {
    hdr(b, 0, 1);
    arr_hdr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 3, 8);
    put_str(b, "a");
    put_str(b, "b");
    put_u64(b, 1000);
    put_zeros(b, 10);
}
static void g12_empty_key(struct bb *b) {
    hdr(b, 0, 1);
    put_str(b, "");
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, 1);
}
static void g12_nul_key(struct bb *b) {
    hdr(b, 0, 1);
    put_strn(b, "a\0b", 3);
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, 1);
}
static void g13_dup_key(struct bb *b) {
    hdr(b, 0, 3);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.block_count", 1);
    kv_str(b, "general.architecture", "qwen2");
}
static void g14_type13(struct bb *b) {
    hdr(b, 0, 1);
    put_str(b, "a.key");
    put_u32(b, 13);
    put_u64(b, 0);
}
static void g14_type_max(struct bb *b) {
    hdr(b, 0, 1);
    put_str(b, "a.key");
    put_u32(b, 0xFFFFFFFFu);
    put_u64(b, 0);
}
static void g14_elem13(struct bb *b) {
    hdr(b, 0, 1);
    arr_hdr(b, "a.key", 13, 1, 1);
    put_u64(b, 0);
}
static void g15_arr_arr(struct bb *b) {
    hdr(b, 0, 1);
    arr_hdr(b, "a.key", GGUF_TYPE_ARRAY, 1, 12);
    put_u32(b, GGUF_TYPE_UINT8);
    put_u64(b, 0);
}
static void g16_count_2p40(struct bb *b) { /* PR #19856 */
    hdr(b, 0, 1);
    arr_hdr(b, "a.key", GGUF_TYPE_UINT32, 1ull << 40, 4);
    put_zeros(b, 1024 - b->len);
}
static void g16_str_count(struct bb *b) {
    hdr(b, 0, 1);
    arr_hdr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 1ull << 60, 8);
    put_zeros(b, 64);
}
static void g17_len_1gib(struct bb *b) {
    hdr(b, 0, 1);
    put_str(b, "general.name");
    put_u32(b, GGUF_TYPE_STRING);
    put_u64(b, (1ull << 30) + 1);
    put_zeros(b, 4096);
}
static void g18_align(struct bb *b, uint32_t type, uint32_t v) {
    hdr(b, 0, 1);
    put_str(b, "general.alignment");
    put_u32(b, type);
    put_u32(b, v);
}
static void g18_align0(struct bb *b) { g18_align(b, GGUF_TYPE_UINT32, 0); }
static void g18_align3(struct bb *b) { g18_align(b, GGUF_TYPE_UINT32, 3); }
static void g18_align_i32(struct bb *b) { g18_align(b, GGUF_TYPE_INT32, 32); }
static void g18_align_f32(struct bb *b) { g18_align(b, GGUF_TYPE_FLOAT32, 0x42000000u); }
static void g18_align_2g(struct bb *b) {
    hdr(b, 1, 1);
    kv_u32(b, "general.alignment", 0x80000000u);
    ti(b, "t", 1, NE(32), KERN_TYPE_F32, 0);
    put_pad(b, 32);
    put_zeros(b, 128);
}
static void g24_name64(struct bb *b) {
    one_tensor(b, "blk.0.attn_q.weight." "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* 64 bytes */, 1, NE(32),
               KERN_TYPE_F32, 0, 128);
}
static void g24_name_max(struct bb *b) {
    hdr(b, 1, 0);
    put_u64(b, UINT64_MAX);
    put_zeros(b, 64);
}
static void g24_name_empty(struct bb *b) { one_tensor(b, "", 1, NE(32), KERN_TYPE_F32, 0, 128); }
static void g24_name_nul(struct bb *b) {
    hdr(b, 1, 0);
    put_strn(b, "a\0b", 3);
    put_u32(b, 1);
    put_u64(b, 32);
    put_u32(b, KERN_TYPE_F32);
    put_u64(b, 0);
    put_pad(b, 32);
    put_zeros(b, 128);
}
static void g25_dup_tensor(struct bb *b) {
    hdr(b, 2, 0);
    ti(b, "output.weight", 1, NE(32), KERN_TYPE_F32, 0);
    ti(b, "output.weight", 1, NE(32), KERN_TYPE_F32, 128);
    put_pad(b, 32);
    put_zeros(b, 256);
}
static void g26_dims5(struct bb *b) {
    one_tensor(b, "t", 5, NE(32, 1, 1, 1, 1), KERN_TYPE_F32, 0, 128);
}
static void g26_dims_max(struct bb *b) {
    hdr(b, 1, 0);
    put_str(b, "t");
    put_u32(b, 0xFFFFFFFFu);
    put_zeros(b, 64);
}
static void g26_dims0(struct bb *b) { one_tensor(b, "t", 0, NE(0), KERN_TYPE_F32, 0, 128); }
static void g27_neg(struct bb *b) {
    one_tensor(b, "t", 2, NE(32, (uint64_t)-1), KERN_TYPE_F32, 0, 128);
}
static void g27_int64_min(struct bb *b) {
    one_tensor(b, "t", 1, NE(1ull << 63), KERN_TYPE_F32, 0, 128);
}
static void g28_ne_product(struct bb *b) {
    one_tensor(b, "t", 2, NE(1ull << 32, 1ull << 31), KERN_TYPE_I8, 0, 128);
}
static void g29_zero_dim(struct bb *b) { one_tensor(b, "t", 2, NE(32, 0), KERN_TYPE_F32, 0, 0); }
static void g29_zero_ne0(struct bb *b) { one_tensor(b, "t", 3, NE(0, 4, 4), KERN_TYPE_F32, 0, 0); }
static void g30_q8_nbytes(struct bb *b) { /* CVE-2026-33298: elements fit, bytes do not */
    one_tensor(b, "t", 1, NE((1ull << 63) - 32), KERN_TYPE_Q8_0, 0, 128);
}
static void g30_f32_wrap(struct bb *b) {
    one_tensor(b, "t", 2, NE(1ull << 61, 2), KERN_TYPE_F32, 0, 128);
}
static void g31_pad_wrap(struct bb *b) { /* PR #24759: 4 * ne[0] = 2^64 - 4 */
    one_tensor(b, "t", 1, NE(SIZE_MAX / 4), KERN_TYPE_F32, 0, 128);
}
static void g32_two_i8(struct bb *b) { /* CVE-2026-27940 */
    hdr(b, 2, 0);
    ti(b, "a", 1, NE(0x7FFFFFFFFFFFFFC0ull), KERN_TYPE_I8, 0);
    ti(b, "b", 1, NE(0x7FFFFFFFFFFFFFC0ull), KERN_TYPE_I8, 0x7FFFFFFFFFFFFFC0ull);
    put_pad(b, 32);
    put_zeros(b, 64);
}
static void g33_type_neg(struct bb *b) { one_tensor(b, "t", 1, NE(32), 0xFFFFFFFFu, 0, 128); }
static void g33_type40(struct bb *b) { one_tensor(b, "t", 1, NE(64), 40, 0, 128); } /* nvfp4 */
static void g33_type34(struct bb *b) { one_tensor(b, "t", 1, NE(256), 34, 0, 128); } /* tq1_0 */
static void g33_type_removed(struct bb *b) { one_tensor(b, "t", 1, NE(32), 4, 0, 128); }
static void g34_q8_33(struct bb *b) { one_tensor(b, "t", 2, NE(33, 2), KERN_TYPE_Q8_0, 0, 128); }
static void g34_q4k_128(struct bb *b) { one_tensor(b, "t", 1, NE(128), KERN_TYPE_Q4_K, 0, 128); }
/* mxfp4 (17 bytes per 32 values, so its byte size is below its value count and cannot
 * overflow where the count did not): a row of 48, a tensor 1 byte short of 8 experts' 64
 * rows of 64 (17408 bytes) */
static void g34_mxfp4_48(struct bb *b) {
    one_tensor(b, "blk.0.ffn_up_exps.weight", 3, NE(48, 64, 8), KERN_TYPE_MXFP4, 0, 8192);
}
static void g36_mxfp4_short(struct bb *b) {
    one_tensor(b, "blk.0.ffn_down_exps.weight", 3, NE(64, 64, 8), KERN_TYPE_MXFP4, 0, 8 * 64 * 34 - 1);
}

static void two_tensors(struct bb *b, uint64_t off0, uint64_t off1) {
    hdr(b, 2, 0);
    ti(b, "a", 1, NE(8), KERN_TYPE_F32, off0); /* 32 bytes */
    ti(b, "b", 1, NE(8), KERN_TYPE_F32, off1);
    put_pad(b, 32);
    put_zeros(b, 128);
}
static void g35_gap(struct bb *b) { two_tensors(b, 0, 64); }
static void g35_order(struct bb *b) { two_tensors(b, 32, 0); }
static void g35_overlap(struct bb *b) { two_tensors(b, 0, 0); }
static void g35_misaligned(struct bb *b) { two_tensors(b, 0, 33); }
static void g35_first_nonzero(struct bb *b) { two_tensors(b, 32, 64); }
static void g36_short(struct bb *b) {
    one_tensor(b, "blk.3.attn_q.weight", 2, NE(64, 64), KERN_TYPE_F32, 0, 64 * 64 * 4 - 100);
}
static void g36_huge(struct bb *b) {
    one_tensor(b, "token_embd.weight", 2, NE(4096, 32000), KERN_TYPE_F16, 0, 4096);
}
static void g36_no_data(struct bb *b) {
    hdr(b, 1, 0);
    ti(b, "t", 1, NE(32), KERN_TYPE_F32, 0);
}
/* G39: many items, with the only defect at the very end, so the whole section is read
 * (the duplicate check must be a hash, not a scan). */
static void g39_kvs(struct bb *b) {
    enum { N = 1000000 };
    hdr(b, 0, N);
    char key[16];
    for (int i = 0; i < N - 1; i++) {
        snprintf(key, sizeof key, "k%07d", i);
        put_str(b, key);
        put_u32(b, GGUF_TYPE_UINT8);
        put_u8(b, 1);
    }
    put_str(b, "k0000000");
    put_u32(b, GGUF_TYPE_UINT8);
    put_u8(b, 1);
}
static void g39_tensors(struct bb *b) {
    enum { N = 100000 };
    hdr(b, N, 0);
    char name[16];
    for (int i = 0; i < N - 1; i++) {
        snprintf(name, sizeof name, "t%06d", i);
        ti(b, name, 1, NE(8), KERN_TYPE_F32, (uint64_t)i * 32);
    }
    ti(b, "t000000", 1, NE(8), KERN_TYPE_F32, (uint64_t)(N - 1) * 32);
    put_pad(b, 32);
    put_zeros(b, (size_t)N * 32);
}

struct corpus_case {
    const char *cls, *what;
    int code;
    void (*build)(struct bb *b);
    const char *msg; /* a part the detail message must contain */
};

static const struct corpus_case cases[] = {
    {"G01", "magic FUGG", ERR_BAD_MAGIC, g01_fugg, "magic 'FUGG' at offset 0"},
    {"G01", "magic gguf (lower case)", ERR_BAD_MAGIC, g01_lower, "is not 'GGUF'"},
    {"G02", "version 0", ERR_BAD_VERSION, g02_v0, "version 0 at offset 4"},
    {"G03", "version 1", ERR_BAD_VERSION, g03_v1, "GGUF v1"},
    {"G04", "version 4", ERR_BAD_VERSION, g04_v4, "version 4 at offset 4"},
    {"G05", "version byte-swapped", ERR_BAD_VERSION, g05_swapped, "byte-swapped"},
    {"G06", "n_tensors 2^64-1", ERR_GGUF_BAD_COUNT, g06_ntensors_max, "n_tensors 18446744073709551615 at offset 8"},
    {"G06", "n_tensors 2^32", ERR_GGUF_BAD_COUNT, g06_ntensors_2p32, "n_tensors 4294967296"},
    {"G07", "n_kv 2^64-1", ERR_GGUF_BAD_COUNT, g07_nkv_max, "n_kv 18446744073709551615 at offset 16"},
    {"G07", "n_kv 1000 in 100 bytes", ERR_GGUF_BAD_COUNT, g07_nkv_1000, "n_kv 1000"},
    {"G08", "empty file", ERR_TRUNCATED, g08_empty, "empty"},
    {"G09", "header cut at 1 byte", ERR_TRUNCATED, g09_1, "magic at offset 0"},
    {"G09", "header cut at 3 bytes", ERR_TRUNCATED, g09_3, "magic at offset 0"},
    {"G09", "header cut at 7 bytes", ERR_TRUNCATED, g09_7, "version at offset 4"},
    {"G09", "header cut at 16 bytes", ERR_TRUNCATED, g09_16, "n_kv at offset 16"},
    {"G09", "header cut at 23 bytes", ERR_TRUNCATED, g09_23, "n_kv at offset 16"},
    {"G10", "key length 2^64-1", ERR_GGUF_BAD_KEY, g10_keylen_max, "key #0 at offset 24: key length 18446744073709551615"},
    {"G10", "key length 65536", ERR_GGUF_BAD_KEY, g10_keylen_65536, "exceeds the GGUF limit"},
    {"G11", "value string longer than the file", ERR_GGUF_BAD_STRING, g11_value_len, "key #0 'general.name': string value at offset 48: length 100 exceeds the 99 bytes left"},
    {"G11", "key longer than the file", ERR_GGUF_BAD_STRING, g11_key_len, "key at offset 24: length 40 exceeds"},
    {"G11", "string-array element longer than the file", ERR_GGUF_BAD_STRING, g11_arr_elem_len, "element #2"},
    {"G12", "empty key", ERR_GGUF_BAD_KEY, g12_empty_key, "key #0 at offset 24: empty key"},
    {"G12", "key with a NUL byte", ERR_GGUF_BAD_KEY, g12_nul_key, "NUL"},
    {"G13", "duplicate key", ERR_GGUF_DUP_KEY, g13_dup_key, "key #2 'general.architecture' at offset 102: duplicate of key #0 at offset 24"},
    {"G14", "value type 13", ERR_GGUF_BAD_VALUE_TYPE, g14_type13, "value type 13 at offset 37"},
    {"G14", "value type 0xFFFFFFFF", ERR_GGUF_BAD_VALUE_TYPE, g14_type_max, "value type 4294967295"},
    {"G14", "array element type 13", ERR_GGUF_BAD_VALUE_TYPE, g14_elem13, "array element type 13"},
    {"G15", "array of arrays", ERR_GGUF_BAD_VALUE_TYPE, g15_arr_arr, "arrays of arrays"},
    {"G16", "array count 2^40 in 1 KiB", ERR_GGUF_BAD_COUNT, g16_count_2p40, "array of 1099511627776 uint32"},
    {"G16", "string-array count 2^60", ERR_GGUF_BAD_COUNT, g16_str_count, "array of 1152921504606846976 string"},
    {"G17", "string length 1 GiB + 1", ERR_GGUF_BAD_STRING, g17_len_1gib, "length 1073741825 exceeds"},
    {"G18", "alignment 0", ERR_GGUF_BAD_ALIGN, g18_align0, "key #0 'general.alignment' at offset 24: alignment 0 is not a power of two"},
    {"G18", "alignment 3", ERR_GGUF_BAD_ALIGN, g18_align3, "alignment 3 is not a power of two"},
    {"G18", "alignment 0x80000000 (data section past the end)", ERR_GGUF_DATA_EOF, g18_align_2g, "tensor 't': data ends at"},
    {"G18", "alignment typed INT32", ERR_GGUF_WRONG_TYPE, g18_align_i32, "has type int32, expected uint32"},
    {"G18", "alignment typed FLOAT32", ERR_GGUF_WRONG_TYPE, g18_align_f32, "has type float32"},
    {"G24", "tensor name of 64 bytes", ERR_GGUF_BAD_TENSOR_NAME, g24_name64, "name length 64 exceeds 63"},
    {"G24", "tensor name length 2^64-1", ERR_GGUF_BAD_TENSOR_NAME, g24_name_max, "tensor #0 at offset 24"},
    {"G24", "empty tensor name", ERR_GGUF_BAD_TENSOR_NAME, g24_name_empty, "empty name"},
    {"G24", "tensor name with a NUL byte", ERR_GGUF_BAD_TENSOR_NAME, g24_name_nul, "NUL"},
    {"G25", "duplicate tensor name", ERR_GGUF_DUP_TENSOR, g25_dup_tensor, "tensor #1 'output.weight'"},
    {"G26", "n_dims 5", ERR_GGUF_BAD_DIMS, g26_dims5, "n_dims 5 at offset"},
    {"G26", "n_dims 0xFFFFFFFF", ERR_GGUF_BAD_DIMS, g26_dims_max, "n_dims 4294967295 at offset 33"},
    {"G26", "n_dims 0", ERR_GGUF_BAD_DIMS, g26_dims0, "n_dims 0"},
    {"G27", "negative ne[1]", ERR_GGUF_BAD_SHAPE, g27_neg, "ne[1] = -1"},
    {"G27", "ne[0] = INT64_MIN", ERR_GGUF_BAD_SHAPE, g27_int64_min, "is negative"},
    {"G28", "ne product 2^63", ERR_GGUF_BAD_SHAPE, g28_ne_product, "overflows int64"},
    {"G29", "zero ne[1] with n_dims 2", ERR_GGUF_BAD_SHAPE, g29_zero_dim, "ne[1] at offset"},
    {"G29", "zero ne[0] with n_dims 3", ERR_GGUF_BAD_SHAPE, g29_zero_ne0, "ne[0] at offset"},
    {"G30", "q8_0 byte size past INT64_MAX", ERR_GGUF_BAD_SHAPE, g30_q8_nbytes, "byte size"},
    {"G30", "f32 byte size wraps 2^64", ERR_GGUF_BAD_SHAPE, g30_f32_wrap, "byte size"},
    {"G31", "f32 ne[0] = SIZE_MAX/4", ERR_GGUF_BAD_SHAPE, g31_pad_wrap, "byte size"},
    {"G32", "two i8 tensors of 2^63-64 elements", ERR_GGUF_DATA_EOF, g32_two_i8, "tensor 'a': data ends at"},
    {"G33", "tensor type -1", ERR_GGUF_BAD_TENSOR_TYPE, g33_type_neg, "type 4294967295"},
    {"G33", "tensor type 40 (nvfp4, unknown here)", ERR_GGUF_BAD_TENSOR_TYPE, g33_type40, "type 40 at offset"},
    {"G33", "tensor type 34 (tq1_0, unknown here)", ERR_GGUF_BAD_TENSOR_TYPE, g33_type34, "type 34 at offset"},
    {"G33", "tensor type 4 (removed Q4_2)", ERR_GGUF_BAD_TENSOR_TYPE, g33_type_removed, "not a known ggml type"},
    {"G34", "q8_0 ne[0] = 33", ERR_GGUF_BAD_SHAPE, g34_q8_33, "ne[0] = 33 is not a multiple of the block size 32 of q8_0"},
    {"G34", "q4_K ne[0] = 128", ERR_GGUF_BAD_SHAPE, g34_q4k_128, "block size 256"},
    {"G34", "mxfp4 ne[0] = 48", ERR_GGUF_BAD_SHAPE, g34_mxfp4_48, "tensor #0 'blk.0.ffn_up_exps.weight' at offset 69: ne[0] = 48 is not a multiple of the block size 32 of mxfp4"},
    {"G35", "offset with a gap", ERR_GGUF_BAD_OFFSET, g35_gap, "tensor #1 'b': offset 64, expected 32"},
    {"G35", "offsets out of order", ERR_GGUF_BAD_OFFSET, g35_order, "tensor #0 'a': offset 32, expected 0"},
    {"G35", "overlapping tensors", ERR_GGUF_BAD_OFFSET, g35_overlap, "offset 0, expected 32"},
    {"G35", "misaligned offset", ERR_GGUF_BAD_ALIGN, g35_misaligned, "offset 33 is not a multiple of the alignment 32"},
    {"G35", "first offset not 0", ERR_GGUF_BAD_OFFSET, g35_first_nonzero, "expected 0"},
    {"G36", "tensor data 100 bytes short", ERR_GGUF_DATA_EOF, g36_short, "tensor 'blk.3.attn_q.weight': data ends at 100 bytes past the end of the file"},
    {"G36", "mxfp4 experts 1 byte short", ERR_GGUF_DATA_EOF, g36_mxfp4_short, "tensor 'blk.0.ffn_down_exps.weight': data ends at 1 bytes past the end of the file"},
    {"G36", "256 MiB tensor in a small file", ERR_GGUF_DATA_EOF, g36_huge, "tensor 'token_embd.weight': data ends at"},
    {"G36", "no data section at all", ERR_GGUF_DATA_EOF, g36_no_data, "data ends at 135 bytes past"},
    {"G39", "10^6 keys, the last a duplicate", ERR_GGUF_DUP_KEY, g39_kvs, "key #999999 'k0000000'"},
    {"G39", "10^5 tensors, the last a duplicate", ERR_GGUF_DUP_TENSOR, g39_tensors, "tensor #99999 't000000'"},
};

static int write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -errno;
    int r = (n && fwrite(p, 1, n, fp) != n) ? -EIO : 0;
    if (fclose(fp) != 0 && r == 0) r = -EIO;
    return r;
}

/* Opens bytes both ways; returns the code (both must agree) and fills d from gguf_open. */
static int open_both(const char *path, const uint8_t *p, size_t n, struct err_detail *d,
                     bool *agree) {
    struct gguf_file *f = NULL;
    struct err_detail dm = {0};
    int rm = gguf_open_mem(p, n, &f, &dm);
    gguf_close(rm >= 0 ? f : NULL);
    f = NULL;
    int r = write_file(path, p, n);
    if (r < 0) return r;
    *d = (struct err_detail){0};
    r = gguf_open(path, &f, d);
    if (r >= 0) gguf_close(f);
    *agree = r == rm && strcmp(d->msg, dm.msg) == 0;
    remove(path);
    return r;
}

static int n_rejected, n_total;

TEST(corpus) {
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        const struct corpus_case *c = &cases[i];
        struct bb b = {0};
        c->build(&b);
        ASSERT_TRUE(!b.oom);
        char path[512];
        snprintf(path, sizeof path, "%s/%s-%zu.gguf", test_tmpdir(), c->cls, i);
        struct err_detail d = {0};
        bool agree = false;
        uint64_t t0 = time_now_usec();
        int r = open_both(path, b.p, b.len, &d, &agree);
        double ms = (double)(time_now_usec() - t0) / 1000.0;
        printf("  %s %-48s %8zu bytes  %-26s %.1f ms  %s\n", c->cls, c->what, b.len, err_name(r),
               ms, d.msg);
        bb_free(&b);
        n_total++;
        if (r != c->code) TEST_FAIL_("%s %s: got %s, expected %s", c->cls, c->what, err_name(r), err_name(c->code));
        ASSERT_TRUE(agree);
        ASSERT_TRUE(d.code == r && d.msg[0] != 0);
        if (!strstr(d.msg, c->msg)) TEST_FAIL_("%s %s: message lacks \"%s\"", c->cls, c->what, c->msg);
        n_rejected++;
    }
}

/* ---- G37: every prefix of a valid tiny model ----------------------------------------- */

static void tiny_model(struct bb *b) {
    hdr(b, 3, 6);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "general.alignment", 32);
    kv_u32(b, "llama.block_count", 1);
    arr_hdr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 3, 8);
    put_str(b, "a");
    put_str(b, "");
    put_str(b, "bc");
    arr_hdr(b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, 3, 4);
    for (int i = 0; i < 3; i++) put_f32(b, -(float)i);
    put_str(b, "tokenizer.ggml.add_bos_token");
    put_u32(b, GGUF_TYPE_BOOL);
    put_u8(b, 1);
    ti(b, "token_embd.weight", 2, NE(32, 64), KERN_TYPE_F32, 0);        /* 8192 bytes */
    ti(b, "blk.0.attn_norm.weight", 1, NE(32), KERN_TYPE_F32, 8192);    /* 128 */
    ti(b, "output.weight", 2, NE(64, 32), KERN_TYPE_Q8_0, 8192 + 128);  /* 2176 = 68 * 32 */
    put_pad(b, 32);
    for (int i = 0; i < 8192 + 128 + 2176; i++) {
        uint8_t v = (uint8_t)(i * 31);
        bb_raw(b, &v, 1);
    }
}

/* The code a prefix of k bytes must get: the first logged field that the cut breaks. */
static int predict_cut(const struct bb *b, uint64_t k) {
    for (size_t i = 0; i < b->n_flds; i++) {
        const struct fld *f = &b->flds[i];
        if (k < f->end) return f->kind == FLD_STR ? ERR_GGUF_BAD_STRING : ERR_TRUNCATED;
        if (f->kind == FLD_COUNT && k - f->end < f->need) return ERR_GGUF_BAD_COUNT;
    }
    return ERR_GGUF_DATA_EOF;
}

TEST(truncations) {
    struct bb b = {0};
    tiny_model(&b);
    ASSERT_TRUE(!b.oom);
    uint64_t infos_end = b.flds[b.n_flds - 1].end;
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open_mem(b.p, b.len, &f, &d), &d);
    ASSERT_EQ(gguf_n_tensors(f), 3);
    ASSERT_EQ(gguf_data_end(f), b.len);
    gguf_close(f);

    int counts[4] = {0}; /* TRUNCATED, BAD_STRING, BAD_COUNT, DATA_EOF */
    int n = 0, bad = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/G37-cut.gguf", test_tmpdir());
    for (uint64_t k = 0; k < b.len; k = k < infos_end ? k + 1 : k + 4096) {
        bool agree = false;
        int r = open_both(path, b.p, (size_t)k, &d, &agree);
        int want = predict_cut(&b, k);
        n++;
        if (r != want || !agree || !d.msg[0]) {
            if (bad++ < 10)
                fprintf(stderr, "G37 cut at %" PRIu64 ": %s (%s), expected %s\n", k, err_name(r),
                        d.msg, err_name(want));
            continue;
        }
        counts[want == ERR_TRUNCATED ? 0 : want == ERR_GGUF_BAD_STRING ? 1
               : want == ERR_GGUF_BAD_COUNT ? 2 : 3]++;
        /* every message names an offset or the bytes missing */
        if (!strstr(d.msg, "offset") && !strstr(d.msg, "past the end") && !strstr(d.msg, "empty"))
            if (bad++ < 10) fprintf(stderr, "G37 cut at %" PRIu64 ": vague message: %s\n", k, d.msg);
    }
    /* the last byte too */
    bool agree = false;
    int r = open_both(path, b.p, b.len - 1, &d, &agree);
    n++;
    if (r == ERR_GGUF_DATA_EOF && agree && strstr(d.msg, "output.weight': data ends at 1 bytes past"))
        counts[3]++;
    else
        bad++, fprintf(stderr, "G37 cut at size-1: %s (%s)\n", err_name(r), d.msg);
    printf("  G37 %d prefixes of a %zu-byte model (tensor infos end at %" PRIu64 "): "
           "%d ERR_TRUNCATED, %d ERR_GGUF_BAD_STRING, %d ERR_GGUF_BAD_COUNT, %d ERR_GGUF_DATA_EOF\n",
           n, b.len, infos_end, counts[0], counts[1], counts[2], counts[3]);
    n_total += n;
    n_rejected += n - bad;
    ASSERT_EQ(bad, 0);
    ASSERT_TRUE(counts[0] > 0 && counts[1] > 0 && counts[2] > 0 && counts[3] > 0);
    bb_free(&b);
}

/* ---- accepted files ------------------------------------------------------------------ */

/* G42: trailing bytes after the data section are accepted and reported (gguf.h). */
TEST(trailing_bytes_accepted) {
    struct bb b = {0};
    tiny_model(&b);
    size_t valid = b.len;
    put_zeros(&b, 5);
    bb_raw(&b, "garbage", 7);
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/G42.gguf", test_tmpdir());
    ASSERT_OK(write_file(path, b.p, b.len));
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_EQ(gguf_trailing_bytes(f), 12);
    ASSERT_EQ(gguf_data_end(f), valid);
    printf("  G42 trailing garbage: accepted, gguf_trailing_bytes() = %" PRIu64 "\n",
           gguf_trailing_bytes(f));
    gguf_close(f);
    bb_free(&b);
}

/* The variants llama.cpp's test loads: custom alignment, a last tensor without its
 * padding, no tensors and no padding, version 2. */
TEST(valid_variants_accepted) {
    struct bb b = {0};
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    hdr_v(&b, "GGUF", 2, 2, 1);
    kv_u32(&b, "general.alignment", 256);
    ti(&b, "a", 1, NE(8), KERN_TYPE_F32, 0);
    ti(&b, "b", 1, NE(32), KERN_TYPE_Q4_0, 256);
    put_pad(&b, 256);
    put_zeros(&b, 256 + 18); /* b's padding is missing */
    ASSERT_OK_D(gguf_open_mem(b.p, b.len, &f, &d), &d);
    ASSERT_EQ(gguf_version(f), 2);
    ASSERT_EQ(gguf_alignment(f), 256);
    ASSERT_EQ(gguf_data_offset(f), 256);
    ASSERT_EQ(gguf_tensor_at(f, 1)->n_bytes, 18);
    ASSERT_EQ(gguf_trailing_bytes(f), 0);
    gguf_close(f);
    bb_free(&b);
    /* mxfp4 experts (gpt-oss): {64, 64, 8} in 8·64·2·17 bytes */
    one_tensor(&b, "blk.0.ffn_gate_exps.weight", 3, NE(64, 64, 8), KERN_TYPE_MXFP4, 0, 17408);
    ASSERT_OK_D(gguf_open_mem(b.p, b.len, &f, &d), &d);
    ASSERT_EQ(gguf_tensor_at(f, 0)->type, KERN_TYPE_MXFP4);
    ASSERT_EQ(gguf_tensor_at(f, 0)->n_bytes, 17408);
    ASSERT_EQ(gguf_trailing_bytes(f), 0);
    gguf_close(f);
    bb_free(&b);
    hdr(&b, 0, 1);
    kv_str(&b, "general.architecture", "llama");
    ASSERT_OK_D(gguf_open_mem(b.p, b.len, &f, &d), &d);
    ASSERT_EQ(gguf_n_kv(f), 1);
    gguf_close(f);
    bb_free(&b);
}

/* G39 without the defect: a million pairs load (the time is printed, not asserted). */
TEST(many_kvs_accepted) {
    struct bb b = {0};
    g39_kvs(&b);
    ASSERT_TRUE(!b.oom);
    /* make the last key unique */
    memcpy(b.p + b.len - 1 - 4 - 8, "k9999999", 8);
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    uint64_t t0 = time_now_usec();
    ASSERT_OK_D(gguf_open_mem(b.p, b.len, &f, &d), &d);
    double ms = (double)(time_now_usec() - t0) / 1000.0;
    ASSERT_EQ(gguf_n_kv(f), 1000000);
    ASSERT_TRUE(gguf_find_kv(f, "k0123456") == gguf_kv_at(f, 123456));
    ASSERT_TRUE(gguf_find_kv(f, "k9999999") == gguf_kv_at(f, 999999));
    printf("  G39 10^6 keys (%zu bytes) accepted in %.1f ms\n", b.len, ms);
    gguf_close(f);
    bb_free(&b);
}

TEST(summary) {
    printf("gguf corpus: %d rejected / %d\n", n_rejected, n_total);
    ASSERT_TRUE(n_total >= 45 + 24);
    ASSERT_EQ(n_rejected, n_total);
}

TEST_MAIN(T(corpus), T(truncations), T(trailing_bytes_accepted), T(valid_variants_accepted),
          T(many_kvs_accepted), T(summary))
