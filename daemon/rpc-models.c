/* rpc-models — ListModels, ShowModel, LoadModel, UnloadModel. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The buffers a ModelInfo points into. */
struct info_bufs {
    char fp[33], arch[32];
};

/* Fills info from the registry entry and the residency. */
static void model_info_fill(struct daemon *d, const struct registry_model *m,
                            Warm__V1__ModelInfo *info, struct info_bufs *b) {
    struct residency_info ri;
    residency_info(d, m->name, &ri);
    warm__v1__model_info__init(info);
    info->name = (char *)m->name;
    info->size_bytes = m->size_bytes;
    info->modified_usec = m->modified_usec;
    info->loaded = ri.loaded;
    b->fp[0] = 0;
    snprintf(b->arch, sizeof b->arch, "%s", m->meta.architecture);
    if (ri.loaded) {
        hash128_to_hex(ri.fingerprint, b->fp);
        snprintf(b->arch, sizeof b->arch, "%s", ri.architecture);
    }
    info->fingerprint = b->fp;
    info->architecture = b->arch;
    info->memory_bytes = ri.memory_bytes;
    info->keep_alive_left_usec = ri.keep_alive_left_usec;
    info->available = m->available;
    info->unavailable_reason = m->available ? "" : (char *)m->reason;
    info->quantization = (char *)m->meta.quantization;
    info->n_params = m->meta.n_params;
    info->trained_context = m->meta.n_ctx_train;
}

void rpc_models_list(struct rpc_call *c, const ProtobufCMessage *req) {
    struct daemon *d = rpc_call_daemon(c);
    /* A rescan per call: a file dropped into the directory shows up at once. */
    (void)registry_scan(&d->registry, NULL);
    metrics_set(&d->metrics, METRIC_MODELS_AVAILABLE, registry_count(&d->registry));
    struct registry_model *list = NULL;
    size_t n = 0;
    if (registry_list(&d->registry, &list, &n) < 0) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory listing models");
        return;
    }
    Warm__V1__ModelInfo *infos = n ? calloc_array(n, sizeof *infos) : NULL;
    Warm__V1__ModelInfo **ptrs = n ? calloc_array(n, sizeof *ptrs) : NULL;
    struct info_bufs *bufs = n ? calloc_array(n, sizeof *bufs) : NULL;
    if (n && (!infos || !ptrs || !bufs)) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory listing models");
    } else {
        for (size_t i = 0; i < n; i++) {
            model_info_fill(d, &list[i], &infos[i], &bufs[i]);
            ptrs[i] = &infos[i];
        }
        Warm__V1__ListModelsResponse r = WARM__V1__LIST_MODELS_RESPONSE__INIT;
        r.n_models = n;
        r.models = ptrs;
        rpc_call_reply(c, &r.base);
    }
    free(bufs);
    free(ptrs);
    free(infos);
    free(list);
}

/* ---- ShowModel ----------------------------------------------------------------------- */

#define SHOW_MAX_KV 1024
#define SHOW_VALUE_BYTES 1024

/* Appends s[0..n) to out as valid UTF-8 for a proto string: kept when it is valid UTF-8
 * (cut at a character boundary), else every byte outside printable ASCII as \xNN. */
static size_t text_put(char *out, size_t at, size_t cap, const char *s, size_t n) {
    bool utf8 = rpc_utf8_valid(s, n);
    for (size_t i = 0; i < n && at + 8 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (utf8 || (ch >= 0x20 && ch < 0x7f)) {
            if (utf8 && ch >= 0x80 && (ch & 0xc0) != 0x80) { /* a lead byte: room for all? */
                size_t len = (ch & 0xe0) == 0xc0 ? 2 : (ch & 0xf0) == 0xe0 ? 3 : 4;
                if (at + len + 8 >= cap) break;
            }
            out[at++] = (char)ch;
        } else {
            at += (size_t)snprintf(out + at, cap - at, "\\x%02x", ch);
        }
    }
    out[at] = 0;
    return at;
}

/* One element of a scalar type as text. */
static size_t scalar_put(char *out, size_t at, size_t cap, enum gguf_type t, const void *p) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    memcpy(&v, p, gguf_type_size(t));
    int w = 0;
    switch (t) { /* a mapping of the GGUF scalar encodings, one line each */
    case GGUF_TYPE_UINT8: w = snprintf(out + at, cap - at, "%u", v.u8); break;
    case GGUF_TYPE_INT8: w = snprintf(out + at, cap - at, "%d", v.i8); break;
    case GGUF_TYPE_UINT16: w = snprintf(out + at, cap - at, "%u", v.u16); break;
    case GGUF_TYPE_INT16: w = snprintf(out + at, cap - at, "%d", v.i16); break;
    case GGUF_TYPE_UINT32: w = snprintf(out + at, cap - at, "%" PRIu32, v.u32); break;
    case GGUF_TYPE_INT32: w = snprintf(out + at, cap - at, "%" PRId32, v.i32); break;
    case GGUF_TYPE_UINT64: w = snprintf(out + at, cap - at, "%" PRIu64, v.u64); break;
    case GGUF_TYPE_INT64: w = snprintf(out + at, cap - at, "%" PRId64, v.i64); break;
    case GGUF_TYPE_FLOAT32: w = snprintf(out + at, cap - at, "%g", (double)v.f32); break;
    case GGUF_TYPE_FLOAT64: w = snprintf(out + at, cap - at, "%g", v.f64); break;
    case GGUF_TYPE_BOOL: w = snprintf(out + at, cap - at, "%s", v.u8 ? "true" : "false"); break;
    default: break;
    }
    return w > 0 ? MIN(at + (size_t)w, cap - 1) : at;
}

/* kv's value as text: scalars, strings (cut past SHOW_VALUE_BYTES), arrays summarized. */
static void kv_format(const struct gguf_kv *kv, char *type, size_t tcap, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    if (kv->type == GGUF_TYPE_ARRAY) {
        snprintf(type, tcap, "array of %s", gguf_type_name(kv->arr_type));
        at = (size_t)snprintf(out, cap, "[%" PRIu64 " items]", kv->n);
        for (uint64_t i = 0; i < kv->n && i < 4 && at + 64 < cap; i++) {
            out[at++] = i ? ',' : ' ';
            out[at++] = ' ';
            if (kv->arr_type == GGUF_TYPE_STRING) {
                struct gguf_str s = gguf_kv_str(kv, i);
                out[at++] = '"';
                at = text_put(out, at, MIN(cap, at + 48), s.ptr, (size_t)s.len);
                out[at++] = '"';
            } else {
                at = scalar_put(out, at, cap, kv->arr_type,
                                (const uint8_t *)kv->data + i * gguf_type_size(kv->arr_type));
            }
        }
        if (kv->n > 4 && at + 5 < cap) memcpy(out + at, ", ...", 6);
        else out[at] = 0;
        return;
    }
    snprintf(type, tcap, "%s", gguf_type_name(kv->type));
    if (kv->type == GGUF_TYPE_STRING) {
        struct gguf_str s = gguf_kv_str(kv, 0);
        at = text_put(out, 0, cap - 40, s.ptr, (size_t)s.len);
        if (at < s.len) snprintf(out + at, cap - at, " ... (%" PRIu64 " bytes)", s.len);
        return;
    }
    scalar_put(out, 0, cap, kv->type, kv->data);
}

/* DESIGN.md 3.4: a cache type is rotated when quantized, rotation is on and the head size
 * is a multiple of 64. */
static bool rotates(const struct config *c, int cache_type, uint32_t head_dim) {
    const struct kern_type_traits *tt =
        kern_type_traits(kern_type_from_name(config_cache_type_names[cache_type]));
    return c->kv_rotation && tt && tt->is_quantized && head_dim && head_dim % 64 == 0;
}

/* The prompt-cache chunk the runner would choose (runner.c: records of at most ~4 MiB). */
static uint32_t chunk_tokens(const struct config *c, const struct registry_meta *m) {
    uint32_t n = c->cache_chunk_tokens ? c->cache_chunk_tokens : ENGINE_CHUNK_TOKENS;
    if (c->cache_chunk_tokens) return n;
    size_t k = kern_row_size((enum kern_type)kern_type_from_name(
                                 config_cache_type_names[c->cache_type_k]),
                             (int64_t)m->n_head_kv * m->head_dim_k);
    size_t v = kern_row_size((enum kern_type)kern_type_from_name(
                                 config_cache_type_names[c->cache_type_v]),
                             (int64_t)m->n_head_kv * m->head_dim_v);
    uint64_t per_token = (uint64_t)m->n_layer * (k + v);
    while (n > 16 && n * per_token > (4u << 20)) n /= 2;
    return n;
}

struct show_bufs {
    Warm__V1__MetadataEntry *entries;
    Warm__V1__MetadataEntry **ptrs;
    char (*keys)[128];
    char (*types)[32];
    char (*values)[SHOW_VALUE_BYTES + 64];
};

static void show_bufs_free(struct show_bufs *b) {
    free(b->entries);
    free(b->ptrs);
    free(b->keys);
    free(b->types);
    free(b->values);
}

/* Every metadata pair of the file open at fd into resp (b holds the text). */
static int metadata_fill(int fd, Warm__V1__ShowModelResponse *resp, struct show_bufs *b,
                         struct err_detail *d) {
    struct gguf_file *f = NULL;
    int e = gguf_open_meta(fd, &f, d);
    if (e < 0) return e;
    size_t n = (size_t)MIN(gguf_n_kv(f), (uint64_t)SHOW_MAX_KV);
    if (n) {
        b->entries = calloc_array(n, sizeof *b->entries);
        b->ptrs = calloc_array(n, sizeof *b->ptrs);
        b->keys = calloc_array(n, sizeof *b->keys);
        b->types = calloc_array(n, sizeof *b->types);
        b->values = calloc_array(n, sizeof *b->values);
        if (!b->entries || !b->ptrs || !b->keys || !b->types || !b->values) {
            gguf_close(f);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        text_put(b->keys[i], 0, sizeof b->keys[i], kv->key.ptr, (size_t)kv->key.len);
        kv_format(kv, b->types[i], sizeof b->types[i], b->values[i], sizeof b->values[i]);
        warm__v1__metadata_entry__init(&b->entries[i]);
        b->entries[i].key = b->keys[i];
        b->entries[i].type = b->types[i];
        b->entries[i].value = b->values[i];
        b->ptrs[i] = &b->entries[i];
    }
    resp->n_metadata = n;
    resp->metadata = b->ptrs;
    gguf_close(f);
    return 0;
}

/* The registry entry of name, available or not (ShowModel explains skipped files too). */
static int entry_any(struct daemon *d, const char *name, struct registry_model *ret) {
    struct registry_model *list = NULL;
    size_t n = 0;
    int e = registry_list(&d->registry, &list, &n);
    if (e < 0) return e;
    e = ERR_NOT_FOUND;
    for (size_t i = 0; i < n && e < 0; i++)
        if (strcmp(list[i].name, name) == 0) *ret = list[i], e = 0;
    free(list);
    return e;
}

static void show_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__ShowModelRequest *q = (const Warm__V1__ShowModelRequest *)req;
    struct daemon *d = rpc_call_daemon(c);
    const struct config *cfg = &d->config;
    const char *name = *q->model ? q->model : cfg->default_model;
    if (!*name) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "model: no model named and the server has no default_model");
        return;
    }
    struct registry_model m;
    struct err_detail e = {0};
    int r = registry_stat(&d->registry, name, &m, &e);
    if (r == ERR_UNSUPPORTED) r = entry_any(d, name, &m);
    if (r < 0) {
        rpc_call_fail(c, rpc_status_from_err(r), "%s", err_msg(&e, r));
        return;
    }
    Warm__V1__ShowModelResponse resp = WARM__V1__SHOW_MODEL_RESPONSE__INIT;
    Warm__V1__ModelInfo info;
    struct info_bufs ib;
    struct show_bufs sb = {0};
    model_info_fill(d, &m, &info, &ib);
    resp.model = &info;
    int fd = -1;
    if (m.available && registry_open(&d->registry, m.name, &fd, NULL) >= 0) {
        r = metadata_fill(fd, &resp, &sb, &e);
        close(fd);
        if (r == -ENOMEM) {
            show_bufs_free(&sb);
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
    }
    resp.chat_template = m.meta.chat_template[0] ? m.meta.chat_template : "none";
    resp.n_layer = m.meta.n_layer;
    resp.n_embd = m.meta.n_embd;
    resp.n_head = m.meta.n_head;
    resp.n_head_kv = m.meta.n_head_kv;
    resp.head_dim_k = m.meta.head_dim_k;
    resp.head_dim_v = m.meta.head_dim_v;
    resp.n_vocab = m.meta.n_vocab;
    resp.embedding = m.meta.embedding;
    resp.pooling = m.meta.pooling;
    resp.embedding_length = m.meta.n_embd_out;
    resp.ctx_size = residency_ctx_size(cfg, m.meta.n_ctx_train);
    resp.parallel = cfg->parallel;
    resp.cache_type_k = (char *)config_cache_type_names[cfg->cache_type_k];
    resp.cache_type_v = (char *)config_cache_type_names[cfg->cache_type_v];
    resp.rotate_k = rotates(cfg, cfg->cache_type_k, m.meta.head_dim_k);
    resp.rotate_v = rotates(cfg, cfg->cache_type_v, m.meta.head_dim_v);
    resp.cache_chunk_tokens = m.available ? chunk_tokens(cfg, &m.meta) : 0;
    rpc_call_reply(c, &resp.base);
    show_bufs_free(&sb);
}

void rpc_models_show(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, show_run); /* reads the file's metadata */
}

/* ---- LoadModel, UnloadModel ------------------------------------------------------------ */

/* On the work pool: a load takes as long as the file is big. */
static void load_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__LoadModelRequest *q = (const Warm__V1__LoadModelRequest *)req;
    struct daemon *d = rpc_call_daemon(c);
    struct resident *res;
    uint64_t load_usec;
    /* the admin's own lease: another user's unload_after leaves it, the admin's ends it */
    if (rpc_model_acquire(c, q->model, rpc_call_peer(c)->uid, q->keep_alive_usec, &res,
                          &load_usec) < 0)
        return;
    struct registry_model m;
    struct err_detail e = {0};
    Warm__V1__ModelInfo info;
    struct info_bufs ib;
    int r = registry_find(&d->registry, res->name, &m, &e);
    if (r >= 0) model_info_fill(d, &m, &info, &ib);
    /* Released before answering: a client's next call must find the model idle. */
    residency_release(d, res);
    if (r < 0) {
        rpc_call_fail(c, rpc_status_from_err(r), "%s", err_msg(&e, r));
    } else {
        Warm__V1__LoadModelResponse resp = WARM__V1__LOAD_MODEL_RESPONSE__INIT;
        resp.model = &info;
        resp.load_usec = load_usec;
        rpc_call_reply(c, &resp.base);
    }
}

void rpc_models_load(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, load_run);
}

void rpc_models_unload(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__UnloadModelRequest *q = (const Warm__V1__UnloadModelRequest *)req;
    struct daemon *d = rpc_call_daemon(c);
    const char *name = *q->model ? q->model : d->config.default_model;
    struct registry_model m;
    /* A loaded model whose file went bad since can still be unloaded. */
    bool bad_file = *name && registry_find(&d->registry, name, &m, NULL) == ERR_UNSUPPORTED &&
                    registry_name_check(name, NULL) >= 0;
    if (bad_file) snprintf(m.name, sizeof m.name, "%s", name);
    else if (rpc_model_resolve(c, q->model, &m) < 0) return;
    bool was = false;
    residency_unload(d, m.name, &was);
    Warm__V1__UnloadModelResponse resp = WARM__V1__UNLOAD_MODEL_RESPONSE__INIT;
    resp.was_loaded = was;
    rpc_call_reply(c, &resp.base);
}
