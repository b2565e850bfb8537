/* XXH3 wrappers over libxxhash. Seeds are always 0: hashes are stored on disk. */
#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <xxhash.h>

/* On x86-64 the library's dispatching entry points pick AVX2 or AVX-512 at run time: the
 * same values, 2-4 times faster over a model file (its fingerprint) than the SSE2 ones
 * the plain entry points are built with. */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define hash_128 XXH3_128bits_dispatch
#define hash_128_update XXH3_128bits_update_dispatch
#endif
#endif
#ifndef hash_128
#define hash_128 XXH3_128bits
#define hash_128_update XXH3_128bits_update
#endif

struct hash128_state {
    XXH3_state_t *st;
};

uint64_t hash64(const void *data, size_t n) { return XXH3_64bits(data, n); }

struct hash128 hash128(const void *data, size_t n) {
    XXH128_hash_t h = hash_128(data, n);
    return (struct hash128){.lo = h.low64, .hi = h.high64};
}

int hash128_state_new(struct hash128_state **ret) {
    struct hash128_state *s = malloc(sizeof *s);
    if (!s) return -ENOMEM;
    s->st = XXH3_createState();
    if (!s->st) {
        free(s);
        return -ENOMEM;
    }
    XXH3_128bits_reset(s->st);
    *ret = s;
    return 0;
}

void hash128_state_free(struct hash128_state *s) {
    if (!s) return;
    XXH3_freeState(s->st);
    free(s);
}

void hash128_state_reset(struct hash128_state *s) { XXH3_128bits_reset(s->st); }

void hash128_state_update(struct hash128_state *s, const void *data, size_t n) {
    hash_128_update(s->st, data, n);
}

struct hash128 hash128_state_digest(const struct hash128_state *s) {
    XXH128_hash_t h = XXH3_128bits_digest(s->st);
    return (struct hash128){.lo = h.low64, .hi = h.high64};
}

void hash128_to_bytes(struct hash128 h, uint8_t out[16]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, (XXH128_hash_t){.low64 = h.lo, .high64 = h.hi});
    for (int i = 0; i < 16; i++) out[i] = c.digest[i];
}

struct hash128 hash128_from_bytes(const uint8_t in[16]) {
    XXH128_canonical_t c;
    for (int i = 0; i < 16; i++) c.digest[i] = in[i];
    XXH128_hash_t h = XXH128_hashFromCanonical(&c);
    return (struct hash128){.lo = h.low64, .hi = h.high64};
}

void hash128_to_hex(struct hash128 h, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}
