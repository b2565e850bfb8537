/* GGUF v2/v3 reader over a read-only mmap or a private copy, and a writer.
 *
 * gguf_open() validates the whole file before returning it: every count, length, offset,
 * alignment and size product is checked for overflow and against the file size; on bad
 * data it returns a specific ERR_GGUF_* / ERR_TRUNCATED / ERR_BAD_MAGIC / ERR_BAD_VERSION
 * code and fills the detail buffer with the field and the byte offset. It never aborts.
 *
 * Lifetimes: every view (struct gguf_str, kv->data, tensor->data, string-array items) points
 * into the mapping (or the copy) and lives until gguf_close(). A struct gguf_file is
 * immutable after open and may be read from any number of threads.
 *
 * Trailing bytes: a file whose bytes continue past the end of the data section (the end
 * of the last tensor, rounded up to the alignment) is accepted; the extra bytes are
 * ignored and reported by gguf_trailing_bytes(). llama.cpp loads such files too, and
 * tools that append (e.g. padding by copy utilities) produce them.
 *
 * File layout (GGUF v2 and v3; v1 used 32-bit counts and is rejected), little-endian:
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv      x { str key | u32 value type | value }   str = u64 byte length + bytes, no NUL
 *                 value: the scalar; a str; or u32 element type | u64 n | n elements
 *   n_tensors x { str name | u32 n_dims | i64 ne[n_dims] | u32 ggml type | u64 offset }
 *   zero padding up to general.alignment (uint32, default 32)
 *   data: tensor i at data_offset + offset_i, each tensor padded to the alignment
 *
 * What the reader accepts, and where it is stricter than llama.cpp (each rule is
 * something no file written by llama.cpp or gguf-py breaks):
 *  - keys: 1..65535 bytes (the GGUF spec's limit), no NUL byte, unique;
 *  - value types 0..12; arrays of arrays are rejected; general.alignment must be a
 *    UINT32 power of two;
 *  - tensor names: 1..63 bytes, no NUL byte, unique; n_dims 1..4; ggml types that
 *    kern_type_traits() knows; ne[0] a multiple of the type's block size;
 *  - every ne >= 1: zero-size dimensions are rejected. llama.cpp accepts them (its
 *    test-gguf loads a tensor with a zero dimension) but no model has an empty weight and
 *    they are what the division-by-zero PoCs use; rejecting them keeps every consumer's
 *    `n / ne[k]` safe. The element count must fit int64 and the byte size too;
 *  - offsets: tensor i starts where tensor i-1 ended, rounded up to the alignment (the
 *    rule llama.cpp's gguf reader enforces), so tensors are in order and never overlap;
 *  - each tensor's data (unpadded) lies inside the file; the padding after the last
 *    tensor may be missing. With no tensors the data section may start past the end of
 *    the file (llama.cpp's vocab-only files end right after the metadata).
 * Memory: the reader allocates O(n_kv + n_tensors + string-array elements), each count
 * checked against the bytes left before anything is allocated (at most a few times the
 * file size for a file made only of tiny pairs). Time: linear (hash tables for the
 * duplicate checks and lookups). */
#pragma once

#include "base/base.h"
#include "kernels/types.h"

#include <stdio.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63 /* tensor names are at most 63 bytes, as in ggml */

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};
/* "uint32", "string", ...; "?" for an unknown id. */
const char *gguf_type_name(enum gguf_type t);
/* Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown ids. */
size_t gguf_type_size(enum gguf_type t);

/* A string view into the file: not NUL-terminated. */
struct gguf_str {
    uint64_t len;
    const char *ptr;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;     /* GGUF_TYPE_ARRAY for arrays */
    enum gguf_type arr_type; /* element type when type == ARRAY */
    uint64_t n;              /* elements (1 for a scalar) */
    const void *data;        /* scalar or first element (unaligned: read with memcpy);
                              * for strings use gguf_kv_str() */
    uint64_t offset;         /* file offset of the key */
    const uint64_t *str_off; /* private: for string arrays, element i's length prefix is at
                              * (const char *)data + str_off[i]; NULL otherwise */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1 */
    enum kern_type type;
    uint64_t offset;  /* relative to the data section */
    uint64_t n_bytes;
    const void *data; /* into the map, aligned to the file's alignment */
};

struct gguf_file;

/* Opens and validates path. *ret is written on success only. The views point into a
 * shared mapping of the file: whoever writes or truncates the file changes them under the
 * reader (and a read past a truncation raises SIGBUS), so use it for files nobody replaces
 * while they are open (tools, tests). */
int gguf_open(const char *path, struct gguf_file **ret, struct err_detail *d);
/* Same, over a private read-only copy of the file in anonymous memory: a snapshot of the
 * file as it was when opened, which no later write, truncation or replacement of the file
 * reaches. Costs the file's size in memory that is not page cache (it cannot be dropped
 * and re-read under pressure, 2 MiB-aligned, huge pages asked for) and one read of the
 * file by a few parallel readers, about as long as `cat` takes (engine/gguf-copy.h says
 * how). The file's pages are dropped from the page cache as they are copied, so the
 * memory holds it once. The copy's XXH3-128 is computed while reading (gguf_copy_hash).
 * A file whose size, mtime or ctime moves while it is read is read again; -EAGAIN after a
 * few attempts; -ENOMEM when the copy does not fit. */
int gguf_open_copy(const char *path, struct gguf_file **ret, struct err_detail *d);
/* For a file from gguf_open_copy(): true, and *ret = XXH3-128 of all gguf_size(f) bytes
 * (hash128() of them, computed while they were read). false for other files. */
bool gguf_copy_hash(const struct gguf_file *f, struct hash128 *ret);
/* The metadata and the tensor table of the regular file open at fd (the caller's; read
 * with pread, not mapped), validated as gguf_open() does, tensor bounds against the file's
 * size; the tensor data is not read and every tensor's data pointer is NULL. For listing
 * and checking model files cheaply: it costs the metadata's size in memory (read in
 * growing prefixes, at most 512 MiB: ERR_TOO_LARGE past that), and a file truncated or
 * replaced meanwhile cannot fault the reader. */
int gguf_open_meta(int fd, struct gguf_file **ret, struct err_detail *d);
/* Same over a caller's buffer (borrowed; must outlive the file). For fuzzing and tests. */
int gguf_open_mem(const void *data, size_t size, struct gguf_file **ret, struct err_detail *d);
void gguf_close(struct gguf_file *f);

uint32_t gguf_version(const struct gguf_file *f);
uint64_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f);     /* file offset of the data section */
/* End of the data section: data offset + the last tensor's end rounded up to the
 * alignment (== the data offset when there are no tensors). */
uint64_t gguf_data_end(const struct gguf_file *f);
uint64_t gguf_trailing_bytes(const struct gguf_file *f);  /* file size - data end, or 0 */
const void *gguf_base(const struct gguf_file *f);          /* the whole mapping */
uint64_t gguf_size(const struct gguf_file *f);

uint64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, uint64_t i);
/* The pair with that key, NULL if absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
/* Element i of a string value or string array (i = 0 for a scalar string), in O(1).
 * An empty view ({0, NULL}) when kv holds no string or i >= kv->n. */
struct gguf_str gguf_kv_str(const struct gguf_kv *kv, uint64_t i);

/* Typed getters. They return 0 and write *ret when the key exists with a compatible type,
 * ERR_GGUF_MISSING when absent, ERR_GGUF_WRONG_TYPE (with detail) otherwise. Integer
 * getters accept any integer type whose value fits. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, struct err_detail *d);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *ret, struct err_detail *d);
int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *ret, struct err_detail *d);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, struct err_detail *d);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *ret, struct err_detail *d);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *ret, struct err_detail *d);
/* Array of elem type: *ret points at the pair (n, elements). */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
                 const struct gguf_kv **ret, struct err_detail *d);
/* true when s equals the NUL-terminated c */
bool gguf_str_eq(struct gguf_str s, const char *c);

uint64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, uint64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* ---- writer: builds a file in memory-light steps, in llama.cpp's layout --------------
 * (header, KVs in insertion order, tensor infos, padding to the alignment, tensor data
 * each padded to the alignment). Values are copied; nothing is borrowed.
 * It refuses what the reader would reject: an empty, over-long (> 65535 bytes) or
 * duplicate key (ERR_GGUF_BAD_KEY, ERR_GGUF_DUP_KEY); general.alignment that is not a
 * UINT32 power of two (ERR_GGUF_WRONG_TYPE, ERR_GGUF_BAD_ALIGN; a valid one sets the
 * layout's alignment); a tensor name of 0 or > 63 bytes or a duplicate
 * (ERR_GGUF_BAD_TENSOR_NAME, ERR_GGUF_DUP_TENSOR); n_dims outside 1..4, ne < 1, ne[0]
 * not a multiple of the block size (ERR_GGUF_BAD_DIMS, ERR_GGUF_BAD_SHAPE); an unknown
 * type (ERR_GGUF_BAD_TENSOR_TYPE). A failed add leaves the writer as it was. */
struct gguf_writer;
int gguf_writer_new(struct gguf_writer **ret);
void gguf_writer_free(struct gguf_writer *w);
int gguf_writer_set_version(struct gguf_writer *w, uint32_t version); /* 2 or 3 (default) */
int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v);
/* Array of n scalars of type elem (not STRING/ARRAY), elements packed little-endian. */
int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                        const void *data, uint64_t n);
/* Array of n strings (each with its length). */
int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *v,
                            uint64_t n);
/* Copies a key/value pair from a file being read (any type). */
int gguf_writer_add_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Adds a tensor; data (kern_row_size(type, ne[0]) * ne[1] * ... bytes) is copied. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum kern_type type,
                           uint32_t n_dims, const int64_t *ne, const void *data);
/* Writes the file atomically: a temporary file next to path (mode 0644), fsync'd, renamed
 * over path, then the directory fsync'd. On failure path is untouched. */
int gguf_writer_save(struct gguf_writer *w, const char *path);
/* The same bytes into a malloc'd buffer (*ret, *ret_size written on success; free()). */
int gguf_writer_encode(struct gguf_writer *w, void **ret, size_t *ret_size);
