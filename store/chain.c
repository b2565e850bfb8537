/* Chain keys: h0 from the namespace, model and cache types; h[i+1] from h[i] and the
 * tokens of chunk i; tail keys. XXH3-128 with seed 0: the values are stored on disk. */
#include "store/env.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

static void put_u32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

struct hash128 store_ns_id(const char *ns) {
    /* a domain tag keeps namespace ids apart from chain hashes of the same bytes */
    static const char tag[] = "warm-store-ns";
    size_t n = strlen(ns);
    uint8_t buf[sizeof tag + 128];
    if (n > 127) n = 127;
    memcpy(buf, tag, sizeof tag);
    memcpy(buf + sizeof tag, ns, n);
    return hash128(buf, sizeof tag + n);
}

int store_chain_init(struct store_chain *chain, const char *ns, const uint8_t model_fp[16],
                     uint32_t type_k, uint32_t type_v, uint32_t chunk_tokens) {
    if (!chain || !ns || !model_fp) return ERR_INVALID;
    size_t n = strlen(ns);
    if (n == 0 || n >= sizeof chain->ns) return ERR_INVALID;
    if (chunk_tokens == 0 || chunk_tokens > STORE_MAX_CHUNK_TOKENS) return ERR_INVALID;
    /* "warm-store-h0" ‖ u32 len ‖ ns ‖ fingerprint[16] ‖ u32 type_k ‖ u32 type_v */
    static const char tag[] = "warm-store-h0";
    uint8_t buf[sizeof tag + 4 + 128 + 16 + 8];
    size_t o = 0;
    memcpy(buf, tag, sizeof tag);
    o += sizeof tag;
    put_u32le(buf + o, (uint32_t)n);
    o += 4;
    memcpy(buf + o, ns, n);
    o += n;
    memcpy(buf + o, model_fp, 16);
    o += 16;
    put_u32le(buf + o, type_k);
    put_u32le(buf + o + 4, type_v);
    o += 8;
    memset(chain, 0, sizeof *chain);
    chain->h0 = hash128(buf, o);
    chain->ns_id = store_ns_id(ns);
    chain->chunk_tokens = chunk_tokens;
    memcpy(chain->ns, ns, n + 1);
    return 0;
}

struct hash128 store_chain_next(struct hash128 h, const int32_t *tokens, size_t n_tokens) {
    /* canonical h ‖ tokens (int32 LE; the host is little-endian, see record.h), hashed
     * with a state on the stack so nothing here can fail */
    uint8_t hb[16];
    hash128_to_bytes(h, hb);
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, hb, sizeof hb);
    XXH3_128bits_update(&st, tokens, n_tokens * 4);
    XXH128_hash_t r = XXH3_128bits_digest(&st);
    return (struct hash128){.lo = r.low64, .hi = r.high64};
}

struct store_key store_key_chunk(struct hash128 h_next) {
    struct store_key k = {.len = 16};
    hash128_to_bytes(h_next, k.bytes);
    return k;
}

struct store_key store_key_tail(struct hash128 parent, const int32_t *tokens, size_t n_tokens) {
    struct store_key k = {.len = 32};
    hash128_to_bytes(parent, k.bytes);
    hash128_to_bytes(hash128(tokens, n_tokens * 4), k.bytes + 16);
    return k;
}

void store_key_to_hex(const struct store_key *key, char out[65]) {
    static const char hex[] = "0123456789abcdef";
    size_t n = MIN((size_t)key->len, (size_t)32);
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[key->bytes[i] >> 4];
        out[2 * i + 1] = hex[key->bytes[i] & 15];
    }
    out[2 * n] = 0;
}
