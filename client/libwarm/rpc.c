/* rpc — the warm.v1.Warm methods: public argument structs to protobuf-c requests, responses
 * back to public structs. Protobuf types stay in this file and call.c. */
#include "libwarm.h"

#include "warm/v1/warm.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNPACKED_FREE(m) protobuf_c_message_free_unpacked((ProtobufCMessage *)(m), NULL)

/* Request strings are `char *` in protobuf-c but are only read while packing. */
static char *str_in(const char *s) {
    return (char *)(s ? s : "");
}

/* ---- info ---------------------------------------------------------------------------- */

WARM_API int warm_info_get(struct warm_client *c, struct warm_info *ret, struct warm_error *err) {
    Warm__V1__GetInfoRequest req = WARM__V1__GET_INFO_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "GetInfo", &req.base, &warm__v1__get_info_response__descriptor, &m, err);
    if (r < 0) return r;
    const Warm__V1__GetInfoResponse *q = (const Warm__V1__GetInfoResponse *)m;
    struct warm_info info = {
        .uptime_usec = q->uptime_usec,
        .threads = q->threads,
        .ctx_size = q->ctx_size,
        .parallel = q->parallel,
        .kv_rotation = q->kv_rotation,
        .max_keep_alive_usec = q->max_keep_alive_usec,
        .max_loaded_models = q->max_loaded_models,
        .memory_budget_bytes = q->memory_budget_bytes,
        .cache_max_bytes = q->cache_max_bytes,
        .models_available = q->models_available,
        .models_loaded = q->models_loaded,
        .active_streams = q->active_streams,
    };
    lw_copy(info.version, sizeof info.version, q->version);
    lw_copy(info.api_version, sizeof info.api_version, q->api_version);
    lw_copy(info.cache_type_k, sizeof info.cache_type_k, q->cache_type_k);
    lw_copy(info.cache_type_v, sizeof info.cache_type_v, q->cache_type_v);
    if (q->peer) {
        info.uid = q->peer->uid;
        info.gid = q->peer->gid;
        info.pid = q->peer->pid;
        info.admin = q->peer->admin;
        lw_copy(info.namespace_, sizeof info.namespace_, q->peer->namespace_);
        info.via_proxy = q->peer->via_proxy;
        info.proxy_uid = q->peer->proxy_uid;
    }
    size_t used = 0;
    for (size_t i = 0; i < q->n_features; i++) {
        size_t n = strlen(q->features[i]);
        if (used + n + 2 > sizeof info.features) break;
        if (used) info.features[used++] = ' ';
        memcpy(info.features + used, q->features[i], n);
        used += n;
    }
    info.features[used] = '\0';
    for (size_t i = 0; i < q->n_devices && info.n_devices < WARM_INFO_MAX_DEVICES; i++) {
        struct warm_device_info *di = &info.devices[info.n_devices++];
        lw_copy(di->name, sizeof di->name, q->devices[i]->name);
        lw_copy(di->kind, sizeof di->kind, q->devices[i]->kind);
        lw_copy(di->description, sizeof di->description, q->devices[i]->description);
        di->reserved_bytes = q->devices[i]->reserved_bytes;
    }
    UNPACKED_FREE(m);
    *ret = info;
    return 0;
}

WARM_API int warm_metrics_get(struct warm_client *c, char **ret_text, struct warm_error *err) {
    Warm__V1__MetricsRequest req = WARM__V1__METRICS_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "Metrics", &req.base, &warm__v1__metrics_response__descriptor, &m, err);
    if (r < 0) return r;
    char *text = strdup(((const Warm__V1__MetricsResponse *)m)->text);
    UNPACKED_FREE(m);
    if (!text) return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    *ret_text = text;
    return 0;
}

/* ---- tokens -------------------------------------------------------------------------- */

WARM_API int warm_token_create(struct warm_client *c, char **ret_token, struct warm_error *err) {
    Warm__V1__CreateTokenRequest req = WARM__V1__CREATE_TOKEN_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "CreateToken", &req.base, &warm__v1__create_token_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    char *text = strdup(((const Warm__V1__CreateTokenResponse *)m)->token);
    UNPACKED_FREE(m);
    if (!text) return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    *ret_token = text;
    return 0;
}

WARM_API int warm_tokens_revoke(struct warm_client *c, uint32_t *ret_n, struct warm_error *err) {
    Warm__V1__RevokeTokensRequest req = WARM__V1__REVOKE_TOKENS_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "RevokeTokens", &req.base,
                          &warm__v1__revoke_tokens_response__descriptor, &m, err);
    if (r < 0) return r;
    if (ret_n) *ret_n = ((const Warm__V1__RevokeTokensResponse *)m)->revoked;
    UNPACKED_FREE(m);
    return 0;
}

/* ---- models -------------------------------------------------------------------------- */

static void model_from(struct warm_model_info *dst, const Warm__V1__ModelInfo *src) {
    *dst = (struct warm_model_info){
        .size_bytes = src->size_bytes,
        .modified_usec = src->modified_usec,
        .loaded = src->loaded,
        .memory_bytes = src->memory_bytes,
        .keep_alive_left_usec = src->keep_alive_left_usec,
        .available = src->available,
        .n_params = src->n_params,
        .trained_context = src->trained_context,
    };
    lw_copy(dst->name, sizeof dst->name, src->name);
    lw_copy(dst->fingerprint, sizeof dst->fingerprint, src->fingerprint);
    lw_copy(dst->architecture, sizeof dst->architecture, src->architecture);
    lw_copy(dst->unavailable_reason, sizeof dst->unavailable_reason, src->unavailable_reason);
    lw_copy(dst->quantization, sizeof dst->quantization, src->quantization);
}

WARM_API int warm_models_list(struct warm_client *c, struct warm_model_info **ret, size_t *ret_n,
                              struct warm_error *err) {
    Warm__V1__ListModelsRequest req = WARM__V1__LIST_MODELS_REQUEST__INIT;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "ListModels", &req.base, &warm__v1__list_models_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__ListModelsResponse *q = (const Warm__V1__ListModelsResponse *)m;
    struct warm_model_info *v = NULL;
    if (q->n_models) {
        v = calloc(q->n_models, sizeof *v);
        if (!v) {
            UNPACKED_FREE(m);
            return lw_fail(err, WARM_NO_MEMORY, "out of memory");
        }
        for (size_t i = 0; i < q->n_models; i++) model_from(&v[i], q->models[i]);
    }
    *ret_n = q->n_models;
    *ret = v;
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_model_load(struct warm_client *c, const char *model, uint64_t keep_alive_usec,
                             struct warm_model_info *ret_info, uint64_t *ret_load_usec,
                             struct warm_error *err) {
    Warm__V1__LoadModelRequest req = WARM__V1__LOAD_MODEL_REQUEST__INIT;
    req.model = str_in(model);
    req.keep_alive_usec = keep_alive_usec;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "LoadModel", &req.base, &warm__v1__load_model_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__LoadModelResponse *q = (const Warm__V1__LoadModelResponse *)m;
    if (ret_info) {
        if (q->model) model_from(ret_info, q->model);
        else {
            *ret_info = (struct warm_model_info){0};
            lw_copy(ret_info->name, sizeof ret_info->name, model);
        }
    }
    if (ret_load_usec) *ret_load_usec = q->load_usec;
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_model_show(struct warm_client *c, const char *model,
                             struct warm_model_details **ret, struct warm_error *err) {
    Warm__V1__ShowModelRequest req = WARM__V1__SHOW_MODEL_REQUEST__INIT;
    req.model = str_in(model);
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "ShowModel", &req.base, &warm__v1__show_model_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__ShowModelResponse *q = (const Warm__V1__ShowModelResponse *)m;
    /* one block: the struct, the entries, then their strings */
    size_t strings = 0;
    for (size_t i = 0; i < q->n_metadata; i++)
        strings += strlen(q->metadata[i]->key) + strlen(q->metadata[i]->type) +
                   strlen(q->metadata[i]->value) + 3;
    size_t head = sizeof(struct warm_model_details) + q->n_metadata * sizeof(struct warm_metadata_entry);
    struct warm_model_details *d = calloc(1, head + strings);
    if (!d) {
        UNPACKED_FREE(m);
        return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    }
    if (q->model) model_from(&d->info, q->model);
    lw_copy(d->chat_template, sizeof d->chat_template, q->chat_template);
    d->n_layer = q->n_layer;
    d->n_embd = q->n_embd;
    d->n_head = q->n_head;
    d->n_head_kv = q->n_head_kv;
    d->head_dim_k = q->head_dim_k;
    d->head_dim_v = q->head_dim_v;
    d->n_vocab = q->n_vocab;
    d->embedding = q->embedding;
    lw_copy(d->pooling, sizeof d->pooling, q->pooling);
    d->embedding_length = q->embedding_length;
    d->ctx_size = q->ctx_size;
    d->parallel = q->parallel;
    d->cache_chunk_tokens = q->cache_chunk_tokens;
    lw_copy(d->cache_type_k, sizeof d->cache_type_k, q->cache_type_k);
    lw_copy(d->cache_type_v, sizeof d->cache_type_v, q->cache_type_v);
    d->rotate_k = q->rotate_k;
    d->rotate_v = q->rotate_v;
    struct warm_metadata_entry *e = (struct warm_metadata_entry *)(d + 1);
    char *p = (char *)(e + q->n_metadata);
    for (size_t i = 0; i < q->n_metadata; i++) {
        const char *src[3] = {q->metadata[i]->key, q->metadata[i]->type, q->metadata[i]->value};
        const char **dst[3] = {&e[i].key, &e[i].type, &e[i].value};
        for (int k = 0; k < 3; k++) {
            size_t n = strlen(src[k]) + 1;
            memcpy(p, src[k], n);
            *dst[k] = p;
            p += n;
        }
    }
    d->n_metadata = q->n_metadata;
    d->metadata = e;
    *ret = d;
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_model_unload(struct warm_client *c, const char *model, struct warm_error *err) {
    Warm__V1__UnloadModelRequest req = WARM__V1__UNLOAD_MODEL_REQUEST__INIT;
    req.model = str_in(model);
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "UnloadModel", &req.base,
                          &warm__v1__unload_model_response__descriptor, &m, err);
    if (r < 0) return r;
    r = ((const Warm__V1__UnloadModelResponse *)m)->was_loaded ? 1 : 0;
    UNPACKED_FREE(m);
    return r;
}

/* ---- tokens -------------------------------------------------------------------------- */

WARM_API int warm_tokenize(struct warm_client *c, const char *model, const char *text,
                           unsigned flags, int32_t **ret_tokens, size_t *ret_n,
                           struct warm_error *err) {
    Warm__V1__TokenizeRequest req = WARM__V1__TOKENIZE_REQUEST__INIT;
    req.model = str_in(model);
    req.text = str_in(text);
    req.add_special = (flags & WARM_TOKENIZE_ADD_SPECIAL) != 0;
    req.parse_special = (flags & WARM_TOKENIZE_PARSE_SPECIAL) != 0;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "Tokenize", &req.base, &warm__v1__tokenize_response__descriptor, &m,
                          err);
    if (r < 0) return r;
    const Warm__V1__TokenizeResponse *q = (const Warm__V1__TokenizeResponse *)m;
    int32_t *v = malloc((q->n_tokens ? q->n_tokens : 1) * sizeof *v);
    if (!v) {
        UNPACKED_FREE(m);
        return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    }
    if (q->n_tokens) memcpy(v, q->tokens, q->n_tokens * sizeof *v);
    *ret_n = q->n_tokens;
    *ret_tokens = v;
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_detokenize(struct warm_client *c, const char *model, const int32_t *tokens,
                             size_t n_tokens, unsigned flags, char **ret_text, size_t *ret_len,
                             struct warm_error *err) {
    Warm__V1__DetokenizeRequest req = WARM__V1__DETOKENIZE_REQUEST__INIT;
    req.model = str_in(model);
    req.tokens = (int32_t *)tokens;
    req.n_tokens = n_tokens;
    req.skip_special = (flags & WARM_DETOKENIZE_SKIP_SPECIAL) != 0;
    if (n_tokens && !tokens) return lw_fail(err, WARM_BAD_REQUEST, "tokens: NULL with n_tokens > 0");
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "Detokenize", &req.base, &warm__v1__detokenize_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__DetokenizeResponse *q = (const Warm__V1__DetokenizeResponse *)m;
    char *text = malloc(q->text.len + 1);
    if (!text) {
        UNPACKED_FREE(m);
        return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    }
    if (q->text.len) memcpy(text, q->text.data, q->text.len);
    text[q->text.len] = '\0';
    *ret_len = q->text.len;
    *ret_text = text;
    UNPACKED_FREE(m);
    return 0;
}

/* ---- generation ---------------------------------------------------------------------- */

WARM_API struct warm_sampling warm_sampling_default(void) {
    return (struct warm_sampling){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
    };
}

static const char *const stop_reason_names[WARM_STOP_REASON_COUNT] = {
    [WARM_STOP_UNSPECIFIED] = "unspecified",
    [WARM_STOP_MAX_TOKENS] = "max_tokens",
    [WARM_STOP_EOS] = "eos",
    [WARM_STOP_STOP_STRING] = "stop_string",
    [WARM_STOP_CONTEXT_FULL] = "context_full",
    [WARM_STOP_TOOL_CALLS] = "tool_calls",
};

WARM_API const char *warm_stop_reason_name(int reason) {
    if (reason < 0 || reason >= WARM_STOP_REASON_COUNT) return "unspecified";
    return stop_reason_names[reason];
}

WARM_API void warm_summary_done(struct warm_summary *s) {
    if (!s) return;
    free(s->rejected);
    s->rejected = NULL;
    s->n_rejected = 0;
    for (size_t i = 0; i < s->n_tool_calls; i++) {
        free((char *)s->tool_calls[i].id);
        free((char *)s->tool_calls[i].name);
        free((char *)s->tool_calls[i].arguments);
    }
    free(s->tool_calls);
    s->tool_calls = NULL;
    s->n_tool_calls = 0;
}

/* The request parts generate and chat share; they point into params (borrowed). */
struct gen_parts {
    Warm__V1__Sampling sampling;
    Warm__V1__CacheOptions cache;
    Warm__V1__OutputFormat format;
    bool has_format;
};

static int gen_parts_init(struct gen_parts *p, const struct warm_gen_params *params,
                          struct warm_error *err) {
    p->sampling = (Warm__V1__Sampling)WARM__V1__SAMPLING__INIT;
    p->cache = (Warm__V1__CacheOptions)WARM__V1__CACHE_OPTIONS__INIT;
    p->format = (Warm__V1__OutputFormat)WARM__V1__OUTPUT_FORMAT__INIT;
    bool schema = params->json_schema && *params->json_schema;
    bool grammar = params->grammar && *params->grammar;
    if (schema && grammar)
        return lw_fail(err, WARM_BAD_REQUEST, "json_schema and grammar: set at most one");
    p->has_format = schema || grammar;
    if (schema) {
        p->format.format_case = WARM__V1__OUTPUT_FORMAT__FORMAT_JSON_SCHEMA;
        p->format.json_schema = (char *)params->json_schema;
    } else if (grammar) {
        p->format.format_case = WARM__V1__OUTPUT_FORMAT__FORMAT_GRAMMAR;
        p->format.grammar = (char *)params->grammar;
    }
    if (params->stop && params->n_stop) {
        for (size_t i = 0; i < params->n_stop; i++)
            if (!params->stop[i]) return lw_fail(err, WARM_BAD_REQUEST, "stop[%zu]: NULL", i);
    } else if (params->n_stop) {
        return lw_fail(err, WARM_BAD_REQUEST, "stop: NULL with n_stop > 0");
    }
    if ((unsigned)params->cache_mode >= WARM_CACHE_MODE_COUNT)
        return lw_fail(err, WARM_BAD_REQUEST, "cache_mode: %d is not a mode", (int)params->cache_mode);
    const struct warm_sampling *s = params->sampling;
    if (s) {
        p->sampling.temperature = s->temperature;
        p->sampling.top_k = s->top_k;
        p->sampling.top_p = s->top_p;
        p->sampling.min_p = s->min_p;
        p->sampling.seed = s->seed;
        p->sampling.repeat_penalty = s->repeat_penalty;
        p->sampling.repeat_last_n = s->repeat_last_n;
        p->sampling.frequency_penalty = s->frequency_penalty;
        p->sampling.presence_penalty = s->presence_penalty;
    }
    p->cache.mode = (Warm__V1__CacheMode)params->cache_mode;
    p->cache.namespace_ = str_in(params->cache_namespace);
    return 0;
}

struct stream_ctx {
    warm_token_fn on_token;
    warm_token_fn on_reasoning;
    warm_tool_call_fn on_tool_call;
    warm_progress_fn on_progress;
    void *userdata;
    struct warm_summary summary;
    bool have_summary;
    bool out_of_memory;
};

static int on_event(const ProtobufCMessage *msg, void *userdata) {
    struct stream_ctx *x = userdata;
    const Warm__V1__GenerateEvent *ev = (const Warm__V1__GenerateEvent *)msg;
    if (ev->event_case == WARM__V1__GENERATE_EVENT__EVENT_TOKEN && ev->token) {
        const Warm__V1__ToolCallDelta *tc = ev->token->tool_call;
        if (tc) { /* a piece of a tool call, not text */
            const char *args = tc->arguments ? tc->arguments : "";
            const struct warm_tool_call_delta d = {
                .index = tc->index,
                .id = tc->id && *tc->id ? tc->id : NULL,
                .name = tc->name && *tc->name ? tc->name : NULL,
                .arguments = args,
                .len = strlen(args)};
            return x->on_tool_call ? x->on_tool_call(&d, x->userdata) : 0;
        }
        const char *text = ev->token->text ? ev->token->text : "";
        const char *reasoning = ev->token->reasoning ? ev->token->reasoning : "";
        if (*reasoning && x->on_reasoning &&
            x->on_reasoning(ev->token->id, reasoning, strlen(reasoning), x->userdata))
            return 1;
        return x->on_token ? x->on_token(ev->token->id, text, strlen(text), x->userdata) : 0;
    }
    if (ev->event_case == WARM__V1__GENERATE_EVENT__EVENT_PROGRESS && ev->progress) {
        const Warm__V1__Progress *p = ev->progress;
        /* stages this library does not know yet are not passed on */
        if (x->on_progress && (p->stage == WARM__V1__PROGRESS_STAGE__PROGRESS_STAGE_LOAD ||
                               p->stage == WARM__V1__PROGRESS_STAGE__PROGRESS_STAGE_PREFILL)) {
            const struct warm_progress wp = {
                .stage = p->stage == WARM__V1__PROGRESS_STAGE__PROGRESS_STAGE_LOAD
                             ? WARM_PROGRESS_LOAD : WARM_PROGRESS_PREFILL,
                .prompt_tokens = p->prompt_tokens,
                .done_tokens = p->done_tokens,
                .ram_tokens = p->ram_tokens,
                .store_tokens = p->store_tokens,
                .elapsed_usec = p->elapsed_usec,
            };
            x->on_progress(&wp, x->userdata);
        }
        return 0;
    }
    if (ev->event_case != WARM__V1__GENERATE_EVENT__EVENT_SUMMARY || !ev->summary) return 0;
    const Warm__V1__Summary *q = ev->summary;
    struct warm_summary *s = &x->summary;
    warm_summary_done(s);
    *s = (struct warm_summary){
        .prompt_tokens = q->prompt_tokens,
        .ram_tokens = q->ram_tokens,
        .store_tokens = q->store_tokens,
        .evaluated_tokens = q->evaluated_tokens,
        .generated_tokens = q->generated_tokens,
        .stop_reason = (unsigned)q->stop_reason < WARM_STOP_REASON_COUNT
                           ? (enum warm_stop_reason)q->stop_reason
                           : WARM_STOP_UNSPECIFIED,
        .queue_usec = q->queue_usec,
        .load_usec = q->load_usec,
        .restore_usec = q->restore_usec,
        .prefill_usec = q->prefill_usec,
        .decode_usec = q->decode_usec,
        .total_usec = q->total_usec,
        .seed = q->seed,
        .keep_alive_usec = q->keep_alive_usec,
    };
    lw_copy(s->stop_string, sizeof s->stop_string, q->stop_string);
    for (size_t i = 0, at = 0; i < q->n_warnings && at + 1 < sizeof s->warnings; i++) {
        lw_copy(s->warnings + at, sizeof s->warnings - at, q->warnings[i]);
        at += strlen(s->warnings + at);
        if (i + 1 < q->n_warnings && at + 1 < sizeof s->warnings) s->warnings[at++] = '\n';
        s->warnings[at] = '\0';
    }
    if (q->n_rejected) {
        s->rejected = calloc(q->n_rejected, sizeof *s->rejected);
        if (!s->rejected) {
            x->out_of_memory = true;
            return 1;
        }
        s->n_rejected = q->n_rejected;
        for (size_t i = 0; i < q->n_rejected; i++) {
            s->rejected[i].position = q->rejected[i]->position;
            lw_copy(s->rejected[i].reason, sizeof s->rejected[i].reason, q->rejected[i]->reason);
            lw_copy(s->rejected[i].message, sizeof s->rejected[i].message, q->rejected[i]->message);
        }
    }
    if (q->n_tool_calls) {
        s->tool_calls = calloc(q->n_tool_calls, sizeof *s->tool_calls);
        if (!s->tool_calls) {
            x->out_of_memory = true;
            return 1;
        }
        s->n_tool_calls = q->n_tool_calls;
        for (size_t i = 0; i < q->n_tool_calls; i++) {
            const Warm__V1__ToolCall *t = q->tool_calls[i];
            struct warm_tool_call *c = &s->tool_calls[i];
            c->id = strdup(t->id ? t->id : "");
            c->name = strdup(t->name ? t->name : "");
            c->arguments = strdup(t->arguments && *t->arguments ? t->arguments : "{}");
            if (!c->id || !c->name || !c->arguments) {
                x->out_of_memory = true;
                return 1;
            }
        }
    }
    x->have_summary = true;
    return 0;
}

static int stream_run(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                      const struct warm_gen_params *params, warm_token_fn on_token, void *userdata,
                      struct warm_summary *ret_summary, struct warm_error *err) {
    struct stream_ctx x = {.on_token = on_token, .on_reasoning = params->on_reasoning,
                           .on_tool_call = params->on_tool_call,
                           .on_progress = params->on_progress, .userdata = userdata};
    int r = lw_call_stream(c, method, req, &warm__v1__generate_event__descriptor, on_event, &x,
                           params->cancel, err);
    if (x.out_of_memory) r = lw_fail(err, WARM_NO_MEMORY, "out of memory");
    else if (r >= 0 && !x.have_summary)
        r = lw_fail(err, WARM_PROTOCOL, "%s: the stream ended without a summary", method);
    if (r < 0 || !ret_summary) warm_summary_done(&x.summary);
    else *ret_summary = x.summary;
    return r;
}

WARM_API int warm_generate(struct warm_client *c, const struct warm_gen_params *params,
                           const char *prompt, const int32_t *tokens, size_t n_tokens,
                           warm_token_fn on_token, void *userdata,
                           struct warm_summary *ret_summary, struct warm_error *err) {
    static const struct warm_gen_params none = {0};
    if (!params) params = &none;
    if (n_tokens && !tokens) return lw_fail(err, WARM_BAD_REQUEST, "tokens: NULL with n_tokens > 0");
    if ((params->tools_json && *params->tools_json) || params->tool_choice || params->think)
        return lw_fail(err, WARM_BAD_REQUEST, "tools_json, tool_choice and think are for chat only");
    struct gen_parts parts;
    int r = gen_parts_init(&parts, params, err);
    if (r < 0) return r;
    Warm__V1__GenerateRequest req = WARM__V1__GENERATE_REQUEST__INIT;
    req.model = str_in(params->model);
    req.prompt = str_in(prompt);
    req.tokens = (int32_t *)tokens;
    req.n_tokens = n_tokens;
    req.max_tokens = params->max_tokens;
    req.sampling = params->sampling ? &parts.sampling : NULL;
    req.stop = (char **)params->stop;
    req.n_stop = params->n_stop;
    req.cache = &parts.cache;
    req.keep_alive_usec = params->keep_alive_usec;
    req.unload_after = params->unload_after;
    req.format = parts.has_format ? &parts.format : NULL;
    return stream_run(c, "Generate", &req.base, params, on_token, userdata, ret_summary, err);
}

WARM_API int warm_chat(struct warm_client *c, const struct warm_gen_params *params,
                       const struct warm_chat_message *messages, size_t n_messages,
                       unsigned flags, warm_token_fn on_token, void *userdata,
                       struct warm_summary *ret_summary, struct warm_error *err) {
    static const struct warm_gen_params none = {0};
    if (!params) params = &none;
    if (n_messages && !messages)
        return lw_fail(err, WARM_BAD_REQUEST, "messages: NULL with n_messages > 0");
    struct gen_parts parts;
    int r = gen_parts_init(&parts, params, err);
    if (r < 0) return r;
    if ((unsigned)params->tool_choice > WARM_TOOLS_FUNCTION || (unsigned)params->think > WARM_THINK_HIGH)
        return lw_fail(err, WARM_BAD_REQUEST, "tool_choice or think: not a known value");
    size_t n_calls = 0;
    for (size_t i = 0; i < n_messages; i++) {
        if (messages[i].n_tool_calls && !messages[i].tool_calls)
            return lw_fail(err, WARM_BAD_REQUEST, "messages[%zu].tool_calls: NULL with "
                           "n_tool_calls > 0", i);
        n_calls += messages[i].n_tool_calls;
    }
    Warm__V1__ChatMessage *msgs = NULL, **ptrs = NULL;
    Warm__V1__ToolCall *calls = NULL, **cptrs = NULL;
    if (n_messages) {
        msgs = calloc(n_messages, sizeof *msgs);
        ptrs = calloc(n_messages, sizeof *ptrs);
        calls = calloc(n_calls ? n_calls : 1, sizeof *calls);
        cptrs = calloc(n_calls ? n_calls : 1, sizeof *cptrs);
        if (!msgs || !ptrs || !calls || !cptrs) {
            free(msgs);
            free(ptrs);
            free(calls);
            free(cptrs);
            return lw_fail(err, WARM_NO_MEMORY, "out of memory");
        }
    }
    for (size_t i = 0, k = 0; i < n_messages; i++) {
        const struct warm_chat_message *m = &messages[i];
        msgs[i] = (Warm__V1__ChatMessage)WARM__V1__CHAT_MESSAGE__INIT;
        msgs[i].role = str_in(m->role);
        msgs[i].content = str_in(m->content);
        msgs[i].reasoning = str_in(m->reasoning);
        msgs[i].tool_call_id = str_in(m->tool_call_id);
        msgs[i].name = str_in(m->name);
        msgs[i].tool_calls = m->n_tool_calls ? &cptrs[k] : NULL;
        msgs[i].n_tool_calls = m->n_tool_calls;
        for (size_t t = 0; t < m->n_tool_calls; t++, k++) {
            calls[k] = (Warm__V1__ToolCall)WARM__V1__TOOL_CALL__INIT;
            calls[k].id = str_in(m->tool_calls[t].id);
            calls[k].name = str_in(m->tool_calls[t].name);
            calls[k].arguments = str_in(m->tool_calls[t].arguments);
            cptrs[k] = &calls[k];
        }
        ptrs[i] = &msgs[i];
    }
    Warm__V1__ChatRequest req = WARM__V1__CHAT_REQUEST__INIT;
    req.model = str_in(params->model);
    req.messages = ptrs;
    req.n_messages = n_messages;
    req.max_tokens = params->max_tokens;
    req.sampling = params->sampling ? &parts.sampling : NULL;
    req.stop = (char **)params->stop;
    req.n_stop = params->n_stop;
    req.cache = &parts.cache;
    req.keep_alive_usec = params->keep_alive_usec;
    req.continue_last = (flags & WARM_CHAT_CONTINUE_LAST) != 0;
    req.unload_after = params->unload_after;
    req.format = parts.has_format ? &parts.format : NULL;
    req.tools_json = str_in(params->tools_json);
    req.tool_choice = (Warm__V1__ToolChoice)params->tool_choice;
    req.tool_choice_name = str_in(params->tool_choice_name);
    req.max_tool_calls = params->max_tool_calls;
    req.think = (Warm__V1__Think)params->think;
    r = stream_run(c, "Chat", &req.base, params, on_token, userdata, ret_summary, err);
    free(msgs);
    free(ptrs);
    free(calls);
    free(cptrs);
    return r;
}

/* ---- prompt cache -------------------------------------------------------------------- */

WARM_API int warm_cache_stats(struct warm_client *c, const char *namespace_,
                              struct warm_cache_stats *ret, struct warm_error *err) {
    Warm__V1__CacheStatsRequest req = WARM__V1__CACHE_STATS_REQUEST__INIT;
    req.namespace_ = str_in(namespace_);
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "CacheStats", &req.base, &warm__v1__cache_stats_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__CacheStatsResponse *q = (const Warm__V1__CacheStatsResponse *)m;
    *ret = (struct warm_cache_stats){
        .entries = q->entries,
        .bytes = q->bytes,
        .budget_bytes = q->budget_bytes,
        .hits = q->hits,
        .misses = q->misses,
        .rejections = q->rejections,
        .evictions = q->evictions,
    };
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_cache_list(struct warm_client *c, const char *namespace_, const char *model,
                             uint32_t limit, struct warm_cache_entry **ret, size_t *ret_n,
                             struct warm_error *err) {
    Warm__V1__CacheListRequest req = WARM__V1__CACHE_LIST_REQUEST__INIT;
    req.namespace_ = str_in(namespace_);
    req.model = str_in(model);
    req.limit = limit;
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "CacheList", &req.base, &warm__v1__cache_list_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__CacheListResponse *q = (const Warm__V1__CacheListResponse *)m;
    struct warm_cache_entry *v = NULL;
    if (q->n_entries) {
        v = calloc(q->n_entries, sizeof *v);
        if (!v) {
            UNPACKED_FREE(m);
            return lw_fail(err, WARM_NO_MEMORY, "out of memory");
        }
    }
    for (size_t i = 0; i < q->n_entries; i++) {
        const Warm__V1__CacheEntry *e = q->entries[i];
        v[i] = (struct warm_cache_entry){
            .n_tokens = e->n_tokens,
            .position = e->position,
            .bytes = e->bytes,
            .last_used_usec = e->last_used_usec,
        };
        lw_copy(v[i].namespace_, sizeof v[i].namespace_, e->namespace_);
        lw_copy(v[i].fingerprint, sizeof v[i].fingerprint, e->fingerprint);
        lw_copy(v[i].key, sizeof v[i].key, e->key);
        lw_copy(v[i].kind, sizeof v[i].kind, e->kind);
        lw_copy(v[i].model, sizeof v[i].model, e->model);
    }
    *ret_n = q->n_entries;
    *ret = v;
    UNPACKED_FREE(m);
    return 0;
}

WARM_API int warm_cache_purge(struct warm_client *c, const char *namespace_, const char *model,
                              uint64_t *ret_entries, uint64_t *ret_bytes, struct warm_error *err) {
    Warm__V1__CachePurgeRequest req = WARM__V1__CACHE_PURGE_REQUEST__INIT;
    req.namespace_ = str_in(namespace_);
    req.model = str_in(model);
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "CachePurge", &req.base, &warm__v1__cache_purge_response__descriptor,
                          &m, err);
    if (r < 0) return r;
    const Warm__V1__CachePurgeResponse *q = (const Warm__V1__CachePurgeResponse *)m;
    if (ret_entries) *ret_entries = q->entries;
    if (ret_bytes) *ret_bytes = q->bytes;
    UNPACKED_FREE(m);
    return 0;
}
