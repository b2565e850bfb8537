/* store — on-disk layout of the prompt store (private to store/ and its tests).
 *
 * One LMDB environment, six named databases, every key compared bytewise (LMDB default):
 *
 *   "rec"   key: store_key (16 bytes chunk, 32 bytes tail)  value: record (below)
 *   "info"  key: store_key                                  value: struct store_info_disk
 *   "lru"   key: BE64 last_used stamp ‖ BE64 ~p0 ‖ store_key value: empty
 *           ascending order = eviction order: oldest stamp first, and among records
 *           refreshed by the same walk the deepest (largest p0) first.
 *   "nsidx" key: ns_id (16, canonical) ‖ store_key          value: empty
 *   "ns"    key: ns_id (16, canonical)                      value: namespace name bytes
 *   "meta"  key: "format" → u32 STORE_FORMAT_VERSION; "bytes" → u64 accounted bytes
 *
 * Record value (little-endian; the store builds only on little-endian hosts):
 *   struct store_rec_disk (80 bytes) ‖ n_tokens × int32 tokens ‖ blob (blob_bytes).
 * A record may sit at any even address in the map (inline values); read the header
 * with memcpy. */
#pragma once

#include "store/store.h"

#include <lmdb.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the store format is little-endian");

#define STORE_REC_MAGIC 0x43525357u  /* "WSRC" as little-endian bytes */
#define STORE_REC_VERSION 1u         /* bump on any change of struct store_rec_disk */
#define STORE_FORMAT_VERSION 1u      /* bump on any change of the databases above */

struct store_rec_disk {
    uint32_t magic;            /* STORE_REC_MAGIC */
    uint16_t version;          /* STORE_REC_VERSION */
    uint16_t kind;             /* enum store_kind: 1 chunk, 2 tail */
    uint32_t header_bytes;     /* sizeof(struct store_rec_disk) = 80; tokens start here */
    uint32_t n_tokens;         /* tokens covered by the record */
    uint8_t ns_id[16];         /* XXH3-128 of the namespace name, canonical bytes */
    uint64_t p0;               /* position of the first token in the prompt */
    uint64_t created_usec;     /* wall clock, µs since the epoch, at the first write */
    uint64_t last_used_usec;   /* wall clock at this write (the live value is in "info") */
    uint64_t blob_bytes;       /* length of the blob after the tokens */
    uint64_t blob_hash;        /* XXH3-64 of the blob */
    uint64_t head_hash;        /* XXH3-64 of the 72 bytes above and the tokens */
};
_Static_assert(sizeof(struct store_rec_disk) == 80, "record header is 80 bytes");

/* Per-record bookkeeping, small so a refresh rewrites 72 bytes, not the blob. */
struct store_info_disk {
    uint64_t last_used_usec;   /* the LRU stamp (also in the "lru" key) */
    uint64_t created_usec;
    uint64_t bytes;            /* accounted bytes (store_rec_bytes of the value) */
    uint64_t p0;
    uint8_t ns_id[16];
    uint8_t parent[16];        /* chain hash of the parent: chunk i-1's key, h0 for i=0 */
    uint32_t n_tokens;
    uint16_t kind;
    uint16_t version;          /* STORE_REC_VERSION */
};
_Static_assert(sizeof(struct store_info_disk) == 72, "info value is 72 bytes");

#define STORE_DB_REC "rec"
#define STORE_DB_INFO "info"
#define STORE_DB_LRU "lru"
#define STORE_DB_NSIDX "nsidx"
#define STORE_DB_NS "ns"
#define STORE_DB_META "meta"
#define STORE_LRU_KEY_MAX (16 + 32)
/* Per-record bytes charged for its keys and index entries, on top of its pages. */
#define STORE_INDEX_OVERHEAD 256u
