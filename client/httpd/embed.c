/* embed — the embedding endpoints, forwarded to warmd's Embed RPC (warm.proto EmbedRequest)
 * as the user on whose behalf the request came:
 *
 *  - Ollama /api/embed: {model, input: a string or strings, truncate (default true, as
 *    Ollama), dimensions, keep_alive, options (accepted, not used: an embedding has no
 *    sampling)} → {model, embeddings: [[floats]], total_duration, load_duration,
 *    prompt_eval_count}; the vectors L2-normalized, as Ollama's. An empty input ("" or [])
 *    answers no vectors, as Ollama.
 *  - Ollama /api/embeddings (legacy): {model, prompt, keep_alive, options} → {embedding}:
 *    one vector, not normalized (Ollama's legacy endpoint returns the pooled vector as the
 *    model computes it); an empty prompt answers an empty one.
 *  - OpenAI /v1/embeddings: {model, input: a string, strings, token ids or arrays of
 *    token ids, encoding_format "float" (default) or "base64" (the little-endian f32 bytes,
 *    as OpenAI), dimensions, user} → {object: "list", data: [{object: "embedding", index,
 *    embedding}], model, usage: {prompt_tokens, total_tokens}}; an input longer than the
 *    model takes is refused (400), as OpenAI refuses one.
 *
 * A text model on these endpoints is warmd's FAILED_PRECONDITION ("model 'x' does not
 * produce embeddings"), a 400. */
#include "httpd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_INPUTS 2048 /* warmd's cap (rpc-embed.c) */

/* The inputs of a request: texts or token arrays, borrowed from the JSON body. */
struct embed_inputs {
    const char **texts;
    const int32_t **tokens;
    size_t *n_tokens;
    int32_t *ids;                 /* every token array's ids, one allocation */
    size_t n;
};

static void inputs_free(struct embed_inputs *in) {
    free(in->texts);
    free(in->tokens);
    free(in->n_tokens);
    free(in->ids);
}

static bool is_token_array(json_t *v) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x)) return false;
    return true;
}

/* A token id of the OpenAI input (0..2^31-1; warmd checks it against the vocabulary). */
static int token_get(struct field_ctx *f, json_t *x, int32_t *ret) {
    json_int_t v = json_integer_value(x);
    if (v < 0 || v > INT32_MAX) {
        f->mhd = reply_error(f->r, 400, "input", "input: token id %lld is out of range", (long long)v);
        return -EINVAL;
    }
    *ret = (int32_t)v;
    return 0;
}

/* input as a string, an array of strings, or (tokens_ok) an array of ids or of arrays of
 * ids. allow_empty: "" and [] give no inputs (Ollama); else they are refused (OpenAI). */
static int inputs_parse(struct field_ctx *f, json_t *v, bool tokens_ok, bool allow_empty,
                        struct embed_inputs *in) {
    static const char what_ollama[] = "input must be a string or an array of strings";
    static const char what_openai[] = "input must be a string, an array of strings, an array "
                                      "of token ids or an array of arrays of token ids";
    const char *what = tokens_ok ? what_openai : what_ollama;
    memset(in, 0, sizeof *in);
    if (!v || json_is_null(v)) {
        f->mhd = reply_error(f->r, 400, "input", "input is required");
        return -EINVAL;
    }
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v)) {
        f->mhd = reply_error(f->r, 400, "input", "%s", what);
        return -EINVAL;
    }
    bool one_tokens = tokens_ok && is_token_array(v);
    if (one_tokens) n = 1;
    if (n > EMBED_MAX_INPUTS) {
        f->mhd = reply_error(f->r, 400, "input", "input: %zu inputs, at most %d", n,
                             EMBED_MAX_INPUTS);
        return -EINVAL;
    }
    bool empty = n == 0 || (json_is_string(v) && !*json_string_value(v));
    if (empty) {
        if (allow_empty) return 0;
        f->mhd = reply_error(f->r, 400, "input", "input must not be empty");
        return -EINVAL;
    }
    /* texts, or token arrays: which one is decided by the first element */
    json_t *first = json_is_array(v) && !one_tokens ? json_array_get(v, 0) : v;
    bool tokens = one_tokens || (tokens_ok && is_token_array(first));
    if (!tokens) {
        if (!(in->texts = calloc(n, sizeof *in->texts))) goto oom;
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(x)) {
                f->mhd = reply_error(f->r, 400, "input", "input[%zu]: %s", i, what);
                goto fail;
            }
            if (!*json_string_value(x)) {
                f->mhd = reply_error(f->r, 400, "input", "input[%zu] must not be empty", i);
                goto fail;
            }
            in->texts[i] = json_string_value(x);
        }
        in->n = n;
        return 0;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = one_tokens ? v : json_array_get(v, i);
        if (!is_token_array(x)) {
            f->mhd = reply_error(f->r, 400, "input", "input[%zu]: %s", i, what);
            goto fail;
        }
        total += json_array_size(x);
    }
    in->tokens = calloc(n, sizeof *in->tokens);
    in->n_tokens = calloc(n, sizeof *in->n_tokens);
    in->ids = calloc(total, sizeof *in->ids);
    if (!in->tokens || !in->n_tokens || !in->ids) goto oom;
    int32_t *p = in->ids;
    for (size_t i = 0; i < n; i++) {
        json_t *x = one_tokens ? v : json_array_get(v, i), *t;
        size_t k;
        in->tokens[i] = p;
        in->n_tokens[i] = json_array_size(x);
        json_array_foreach(x, k, t) if (token_get(f, t, p++) < 0) goto fail;
    }
    in->n = n;
    return 0;
oom:
    f->mhd = reply_error(f->r, 503, NULL, "out of memory");
fail:
    inputs_free(in);
    return -EINVAL;
}

/* dimensions: absent or null = all, else 1..65536 (warmd checks it against the model). */
static int dims_parse(struct field_ctx *f, json_t *b, uint32_t *ret) {
    double v;
    bool present = false;
    if (field_number(f, b, "dimensions", 1, 65536, &v, &present) < 0) return -EINVAL;
    if (present) *ret = (uint32_t)v;
    return 0;
}

/* Sends the request; on success *ret is warmd's answer. */
static int embed_call(struct request *r, struct warm_embed_params *p,
                      struct warm_embed_result **ret, enum MHD_Result *ret_mhd) {
    struct client_ref *c = request_client(r, ret_mhd);
    if (!c) return -EIO;
    struct warm_error e;
    int rc = warm_embed(client_ref_client(c), p, ret, &e);
    clients_put(&r->h->clients, c);
    if (rc < 0) {
        *ret_mhd = reply_warm_error(r, &e);
        return rc;
    }
    return 0;
}

static json_t *vector_json(const float *v, uint32_t n) {
    json_t *a = json_array();
    for (uint32_t k = 0; k < n; k++) json_array_append_new(a, json_real(v[k]));
    return a;
}

/* The Ollama fields all three share: model, keep_alive (options accepted). */
static int ollama_common(struct field_ctx *f, json_t *b, struct warm_embed_params *p,
                         char model[HTTPD_MODEL_MAX]) {
    const char *name = NULL;
    if (field_string(f, b, "model", &name) < 0) return -EINVAL;
    if (!name || !*name) {
        f->mhd = reply_error(f->r, 400, "model", "model is required");
        return -EINVAL;
    }
    p->model = request_model(f->r, name, model);
    json_t *opts = json_object_get(b, "options");
    if (opts && !json_is_null(opts) && !json_is_object(opts)) {
        f->mhd = reply_error(f->r, 400, "options", "options must be an object");
        return -EINVAL;
    }
    struct warm_gen_params g = {.keep_alive_usec = f->r->h->cfg.keep_alive_usec};
    if (parse_keep_alive(f, json_object_get(b, "keep_alive"), &g) < 0) return -EINVAL;
    p->keep_alive_usec = g.keep_alive_usec;
    p->unload_after = g.unload_after;
    return 0;
}

enum MHD_Result ollama_embed(struct request *r) {
    struct field_ctx f = {.r = r};
    json_t *b = r->json;
    char model[HTTPD_MODEL_MAX];
    struct warm_embed_params p = {.truncate = true};
    struct embed_inputs in;
    if (ollama_common(&f, b, &p, model) < 0 || field_bool(&f, b, "truncate", &p.truncate) < 0 ||
        dims_parse(&f, b, &p.dimensions) < 0 ||
        inputs_parse(&f, json_object_get(b, "input"), false, true, &in) < 0)
        return f.mhd;
    json_t *embeddings = json_array();
    uint64_t total = 0, load = 0, n_tok = 0;
    if (in.n) {
        p.inputs = in.texts;
        p.n_inputs = in.n;
        struct warm_embed_result *res;
        enum MHD_Result m;
        int rc = embed_call(r, &p, &res, &m);
        inputs_free(&in);
        if (rc < 0) {
            json_decref(embeddings);
            return m;
        }
        for (size_t i = 0; i < res->n_embeddings; i++)
            json_array_append_new(embeddings,
                                  vector_json(res->values + i * res->dimensions, res->dimensions));
        total = res->total_usec, load = res->load_usec, n_tok = res->prompt_tokens;
        snprintf(model, HTTPD_MODEL_MAX, "%s", res->model);
        warm_free(res);
    }
    json_t *name = json_object_get(b, "model");
    return reply_json(r, 200, json_pack("{s:O,s:o,s:I,s:I,s:I}", "model", name, "embeddings",
                                        embeddings, "total_duration", (json_int_t)(total * 1000),
                                        "load_duration", (json_int_t)(load * 1000),
                                        "prompt_eval_count", (json_int_t)n_tok));
}

enum MHD_Result ollama_embeddings(struct request *r) {
    struct field_ctx f = {.r = r};
    json_t *b = r->json;
    char model[HTTPD_MODEL_MAX];
    struct warm_embed_params p = {.truncate = true, .raw = true};
    const char *prompt = NULL;
    if (ollama_common(&f, b, &p, model) < 0 || field_string(&f, b, "prompt", &prompt) < 0)
        return f.mhd;
    if (!prompt || !*prompt) return reply_json(r, 200, json_pack("{s:[]}", "embedding"));
    p.inputs = &prompt;
    p.n_inputs = 1;
    struct warm_embed_result *res;
    enum MHD_Result m;
    if (embed_call(r, &p, &res, &m) < 0) return m;
    json_t *v = vector_json(res->values, res->dimensions);
    warm_free(res);
    return reply_json(r, 200, json_pack("{s:o}", "embedding", v));
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The floats' little-endian bytes in standard base64 (with padding). */
static json_t *vector_base64(const float *v, uint32_t n) {
    size_t len = (size_t)n * 4;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (!out) return NULL;
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes) {
        free(out);
        return NULL;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        for (int s = 0; s < 4; s++) bytes[4 * k + s] = (uint8_t)(u >> (8 * s));
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)bytes[i] << 16 | (i + 1 < len ? (uint32_t)bytes[i + 1] << 8 : 0) |
                     (i + 2 < len ? bytes[i + 2] : 0);
        out[o++] = b64[w >> 18 & 63];
        out[o++] = b64[w >> 12 & 63];
        out[o++] = i + 1 < len ? b64[w >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64[w & 63] : '=';
    }
    out[o] = '\0';
    json_t *s = json_string(out);
    free(out);
    free(bytes);
    return s;
}

enum MHD_Result openai_embeddings(struct request *r) {
    struct field_ctx f = {.r = r};
    json_t *b = r->json;
    char model[HTTPD_MODEL_MAX];
    const char *name = NULL, *format = NULL, *user = NULL;
    struct warm_embed_params p = {.keep_alive_usec = r->h->cfg.keep_alive_usec};
    if (field_string(&f, b, "model", &name) < 0 || field_string(&f, b, "user", &user) < 0 ||
        field_string(&f, b, "encoding_format", &format) < 0 || dims_parse(&f, b, &p.dimensions) < 0)
        return f.mhd;
    if (!name || !*name) return reply_error(r, 400, "model", "model is required");
    bool base64 = format && strcmp(format, "base64") == 0;
    if (format && !base64 && strcmp(format, "float") != 0)
        return reply_error(r, 400, "encoding_format",
                           "encoding_format must be 'float' or 'base64', not '%s'", format);
    p.model = request_model(r, name, model);
    struct embed_inputs in;
    if (inputs_parse(&f, json_object_get(b, "input"), true, false, &in) < 0) return f.mhd;
    if (in.texts) p.inputs = in.texts, p.n_inputs = in.n;
    else p.token_inputs = in.tokens, p.n_tokens = in.n_tokens, p.n_token_inputs = in.n;
    struct warm_embed_result *res;
    enum MHD_Result m;
    int rc = embed_call(r, &p, &res, &m);
    inputs_free(&in);
    if (rc < 0) return m;
    json_t *data = json_array();
    for (size_t i = 0; i < res->n_embeddings; i++) {
        const float *v = res->values + i * res->dimensions;
        json_t *e = base64 ? vector_base64(v, res->dimensions) : vector_json(v, res->dimensions);
        if (!e) {
            json_decref(data);
            warm_free(res);
            return reply_error(r, 503, NULL, "out of memory");
        }
        json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", e));
    }
    json_t *doc = json_pack("{s:s,s:o,s:O,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                            json_object_get(b, "model"), "usage", "prompt_tokens",
                            (json_int_t)res->prompt_tokens, "total_tokens",
                            (json_int_t)res->prompt_tokens);
    warm_free(res);
    return reply_json(r, 200, doc);
}
