/* base — the leaf module every other module stands on.
 *
 * Errors: fallible functions return int, >= 0 on success, < 0 on failure: either a
 * negative errno or a project code from ERR_TABLE below (all project codes are below
 * ERR_BASE, far from any errno). err_str() and err_name() name both kinds.
 *
 * Details: parsers of untrusted input take an optional struct err_detail * and write a
 * message a person can act on (the field and the byte offset) with err_set(). A NULL
 * detail pointer is allowed everywhere.
 *
 * Also: cleanup macros, overflow-checked size arithmetic, XXH3 hashing over libxxhash,
 * monotonic time in microseconds, and a log hook (library code logs at debug only).
 * Nothing here allocates global state; everything is thread-safe. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- error codes ----------------------------------------------------------------- */

/* X(NAME, "message"). Append new rows inside the section of the module that uses them. */
#define ERR_TABLE(X)                                                                    \
    /* generic */                                                                      \
    X(ERR_INVALID, "invalid argument")                                                 \
    X(ERR_OVERFLOW, "size arithmetic overflow")                                        \
    X(ERR_TRUNCATED, "input is truncated")                                             \
    X(ERR_BAD_MAGIC, "bad magic")                                                      \
    X(ERR_BAD_VERSION, "unsupported format version")                                   \
    X(ERR_NOT_FOUND, "not found")                                                      \
    X(ERR_UNSUPPORTED, "not supported")                                                \
    X(ERR_TOO_LARGE, "too large")                                                      \
    X(ERR_CHECKSUM, "checksum mismatch")                                               \
    /* gguf */                                                                         \
    X(ERR_GGUF_BAD_COUNT, "gguf: count out of range")                                  \
    X(ERR_GGUF_BAD_STRING, "gguf: bad string")                                         \
    X(ERR_GGUF_BAD_KEY, "gguf: bad key")                                               \
    X(ERR_GGUF_DUP_KEY, "gguf: duplicate key")                                         \
    X(ERR_GGUF_BAD_VALUE_TYPE, "gguf: bad value type")                                 \
    X(ERR_GGUF_BAD_ALIGN, "gguf: bad alignment")                                       \
    X(ERR_GGUF_BAD_TENSOR_NAME, "gguf: bad tensor name")                               \
    X(ERR_GGUF_DUP_TENSOR, "gguf: duplicate tensor name")                              \
    X(ERR_GGUF_BAD_DIMS, "gguf: bad number of dimensions")                             \
    X(ERR_GGUF_BAD_SHAPE, "gguf: bad tensor shape")                                    \
    X(ERR_GGUF_BAD_TENSOR_TYPE, "gguf: bad tensor type")                               \
    X(ERR_GGUF_BAD_OFFSET, "gguf: bad tensor offset")                                  \
    X(ERR_GGUF_DATA_EOF, "gguf: tensor data past end of file")                         \
    X(ERR_GGUF_TRAILING, "gguf: trailing bytes after the data section")                \
    X(ERR_GGUF_WRONG_TYPE, "gguf: metadata value has the wrong type")                  \
    X(ERR_GGUF_MISSING, "gguf: required key or tensor missing")                        \
    /* model and vocab */                                                              \
    X(ERR_MODEL_ARCH, "model: unknown or unsupported architecture")                    \
    X(ERR_MODEL_HPARAM, "model: bad hyperparameter")                                   \
    X(ERR_MODEL_TENSOR, "model: bad or missing tensor")                                \
    X(ERR_MODEL_TENSOR_MISSING, "model: required tensor missing")                      \
    X(ERR_MODEL_TENSOR_UNUSED, "model: unexpected tensor")                             \
    X(ERR_MODEL_TENSOR_SHAPE, "model: tensor has the wrong shape")                     \
    X(ERR_MODEL_TENSOR_TYPE, "model: tensor has an unsupported type")                  \
    X(ERR_VOCAB, "vocab: bad vocabulary")                                              \
    X(ERR_TOKEN, "vocab: token id out of range")                                       \
    /* grammar (constrained decoding) */                                               \
    X(ERR_GRAMMAR, "grammar: bad grammar or JSON schema")                              \
    X(ERR_GRAMMAR_TOKEN, "grammar: token not allowed by the grammar")                  \
    X(ERR_GRAMMAR_STUCK, "grammar: no token of the vocabulary can continue the output") \
    /* context and kv state */                                                         \
    X(ERR_CTX_FULL, "context is full")                                                 \
    X(ERR_STATE_BAD, "state: not a state blob or truncated")                           \
    X(ERR_STATE_VERSION, "state: incompatible state version")                          \
    X(ERR_STATE_MODEL, "state: belongs to another model")                              \
    X(ERR_STATE_LAYOUT, "state: incompatible cache layout")                            \
    X(ERR_STATE_KEY_TYPE, "state: incompatible key type")                              \
    X(ERR_STATE_VALUE_TYPE, "state: incompatible value type")                          \
    X(ERR_STATE_KEY_ROT, "state: incompatible key rotation")                           \
    X(ERR_STATE_VALUE_ROT, "state: incompatible value rotation")                       \
    X(ERR_STATE_TOKENS, "state: token mismatch")                                       \
    X(ERR_STATE_CHECKSUM, "state: payload checksum mismatch")                          \
    /* store */                                                                        \
    X(ERR_STORE_CORRUPT, "store: environment is corrupt")                              \
    X(ERR_STORE_FULL, "store: record larger than the byte budget")                     \
    X(ERR_STORE_NETFS, "store: refusing a network or FUSE filesystem")                 \
    X(ERR_STORE_RECORD, "store: bad record")                                           \
    X(ERR_STORE_LMDB, "store: lmdb error")                                             \
    /* config */                                                                       \
    X(ERR_CONFIG, "config: bad configuration")

/* Project codes are negative and far below any -errno: ERR_INVALID == ERR_BASE + 1, ... */
#define ERR_BASE (-100000)
enum err_code {
    ERR__START = ERR_BASE,
#define X(name, msg) name,
    ERR_TABLE(X)
#undef X
    ERR__END
};

/* Message for a return code: strerror() for -errno, the table's text for project codes.
 * Never NULL; the string is static. */
const char *err_str(int code);
/* Symbolic name: "ENOENT", "ERR_GGUF_BAD_SHAPE"; "OK" for >= 0, "E?" when unknown. */
const char *err_name(int code);

/* ---- detail buffer ------------------------------------------------------------------ */

struct err_detail {
    int code;       /* the code of the last err_set(), 0 if none */
    char msg[512];  /* NUL-terminated, may be empty */
};

/* Records code and a printf-style message in d (if d != NULL) and returns code, so a
 * parser writes `return err_set(d, ERR_GGUF_BAD_SHAPE, "tensor '%s': ...", ...)`. */
int err_set(struct err_detail *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int err_setv(struct err_detail *d, int code, const char *fmt, va_list ap);
/* The detail message if one was set, else err_str(code). */
const char *err_msg(const struct err_detail *d, int code);

/* ---- cleanup ------------------------------------------------------------------------ */

#define _cleanup_(f) __attribute__((cleanup(f)))
static inline void freep(void *p) { free(*(void **)p); }
#define _cleanup_free_ _cleanup_(freep)
/* Returns the pointer and sets the variable to NULL so its cleanup does nothing. */
#define TAKE_PTR(p)                                                                    \
    __extension__({                                                                    \
        __typeof__(p) _ptr_ = (p);                                                     \
        (p) = NULL;                                                                    \
        _ptr_;                                                                         \
    })
/* Defines `static inline void func##p(type **p)` calling func(*p) when non-NULL. */
#define DEFINE_CLEANUP_FUNC(type, func)                                                \
    static inline void func##p(type **p) {                                             \
        if (*p)                                                                        \
            func(*p);                                                                  \
    }

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- checked arithmetic: return false on overflow, *r written only on success ------ */

static inline bool size_add(size_t a, size_t b, size_t *r) {
    size_t t;
    if (__builtin_add_overflow(a, b, &t)) return false;
    *r = t;
    return true;
}
static inline bool size_mul(size_t a, size_t b, size_t *r) {
    size_t t;
    if (__builtin_mul_overflow(a, b, &t)) return false;
    *r = t;
    return true;
}
static inline bool u64_add(uint64_t a, uint64_t b, uint64_t *r) {
    uint64_t t;
    if (__builtin_add_overflow(a, b, &t)) return false;
    *r = t;
    return true;
}
static inline bool u64_mul(uint64_t a, uint64_t b, uint64_t *r) {
    uint64_t t;
    if (__builtin_mul_overflow(a, b, &t)) return false;
    *r = t;
    return true;
}
static inline bool i64_mul(int64_t a, int64_t b, int64_t *r) {
    int64_t t;
    if (__builtin_mul_overflow(a, b, &t)) return false;
    *r = t;
    return true;
}
/* Rounds x up to a multiple of align (a power of two or any non-zero value). */
static inline bool u64_align_up(uint64_t x, uint64_t align, uint64_t *r) {
    uint64_t t;
    if (align == 0 || __builtin_add_overflow(x, align - 1, &t)) return false;
    *r = t - t % align;
    return true;
}
/* malloc(n * size) with the product checked; NULL on overflow or failure. */
void *malloc_array(size_t n, size_t size);
void *calloc_array(size_t n, size_t size);
/* malloc_array on a 64-byte boundary (free() frees it): buffers that threads write in
 * 64-byte column blocks then share no cache line, and a 512-bit store splits none. */
void *malloc_array_aligned(size_t n, size_t size);

/* ---- hashing (XXH3 from libxxhash; no random seeds: values are stable on disk) ------ */

struct hash128 {
    uint64_t lo, hi;
};
uint64_t hash64(const void *data, size_t n);
struct hash128 hash128(const void *data, size_t n);
static inline bool hash128_eq(struct hash128 a, struct hash128 b) {
    return a.lo == b.lo && a.hi == b.hi;
}
/* Streaming XXH3-128. */
struct hash128_state;
int hash128_state_new(struct hash128_state **ret);
void hash128_state_free(struct hash128_state *s);
void hash128_state_reset(struct hash128_state *s);
void hash128_state_update(struct hash128_state *s, const void *data, size_t n);
struct hash128 hash128_state_digest(const struct hash128_state *s);
/* Canonical big-endian 16-byte form (XXH128_canonical_t) and back. */
void hash128_to_bytes(struct hash128 h, uint8_t out[16]);
struct hash128 hash128_from_bytes(const uint8_t in[16]);
/* 32 lowercase hex digits + NUL. */
void hash128_to_hex(struct hash128 h, char out[33]);

/* ---- time --------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in microseconds. */
uint64_t time_now_usec(void);
/* CLOCK_REALTIME in microseconds since the epoch. */
uint64_t time_wall_usec(void);

/* ---- logging hook ------------------------------------------------------------------- */

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG, LOG_LEVEL_COUNT };
typedef void (*log_sink_fn)(enum log_level level, const char *msg, void *userdata);
/* Installs the process-wide sink (the daemon and CLIs do, libraries never do). NULL
 * restores the default sink, which drops everything. */
void log_set_sink(log_sink_fn fn, void *userdata);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
