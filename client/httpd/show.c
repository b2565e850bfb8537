/* show — what apps read about a model: Ollama's /api/show, from warmd's ShowModel (the
 * file's metadata, read without loading it, and the context this warmd gives it).
 *
 * capabilities are true, never advertised: an embedding model (ShowModel's embedding)
 * has "embedding" alone, as Ollama's; any other model "completion"; "insert" when the
 * vocabulary names fill-in-the-middle tokens (what /api/generate's suffix needs);
 * "tools" and "thinking" when warmd's chat for the model's template family runs tool calls
 * or separates thinking (columns of the family table: tools for chatml, qwen3 and qwen35,
 * thinking for qwen3 and qwen35). parameters is Ollama's text form of the settings a
 * request starts from (num_ctx = the context warmd gives the model, the family's stop
 * strings); model_info the file's metadata as typed JSON (long arrays null, as Ollama's
 * non-verbose answer), so `<arch>.context_length` is the length the model was trained for. */
#include "httpd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- template families -------------------------------------------------------------- */

/* What a chat template family means for Ollama's clients: the template in Ollama's Go
 * syntax (the prompt warmd renders, for apps that print or inspect it), the strings that
 * end a turn, and what warmd's chat for the family does besides text. */
struct family_row {
    const char *name;               /* ShowModel's chat_template */
    const char *template_;
    const char *stop[4];
    bool tools;                     /* warmd parses the family's tool calls */
    bool thinking;                  /* warmd separates the family's thinking */
};

static const struct family_row family_rows[] = {
    {"chatml",
     "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
     "<|im_start|>assistant\n",
     {"<|im_start|>", "<|im_end|>"}, true, false},
    {"qwen3",
     "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
     "<|im_start|>assistant\n",
     {"<|im_start|>", "<|im_end|>"}, true, true},
    {"qwen35",
     "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
     "<|im_start|>assistant\n<think>\n",
     {"<|im_start|>", "<|im_end|>"}, true, true},
    {"llama3",
     "<|begin_of_text|>{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>"
     "\n\n{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n",
     {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, false, false},
    {"llama31",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
     "December 2023\nToday Date: 26 Jul 2024\n\n{{ .System }}<|eot_id|>{{- range .Messages }}"
     "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}"
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, true, false},
    {"harmony",
     "<|start|>system<|message|>Reasoning: medium<|end|>{{- range .Messages }}<|start|>"
     "{{ .Role }}<|message|>{{ .Content }}<|end|>{{ end }}<|start|>assistant",
     {"<|start|>", "<|end|>", "<|return|>", "<|call|>"}, true, true},
    {"gemma",
     "<bos>{{- range .Messages }}<start_of_turn>{{ if eq .Role \"assistant\" }}model"
     "{{ else }}user{{ end }}\n{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n",
     {"<start_of_turn>", "<end_of_turn>"}, false, false},
    {"mistral",
     "<s>{{- range .Messages }}{{ if eq .Role \"assistant\" }}{{ .Content }}</s>{{ else }}"
     "[INST] {{ .Content }} [/INST]{{ end }}{{ end }}",
     {"[INST]", "[/INST]", "</s>"}, false, false},
    {"gemma4",
     "<bos>{{- range .Messages }}<|turn>{{ if eq .Role \"assistant\" }}model{{ else }}"
     "{{ .Role }}{{ end }}\n{{ .Content }}<turn|>\n{{ end }}<|turn>model\n",
     {"<|turn>", "<turn|>"}, true, false},
};

/* A model without a template warmd knows completes its prompt as it is. */
static const struct family_row family_none = {"none", "{{ .Prompt }}", {NULL}, false, false};

static const struct family_row *family_of(const struct warm_model_details *d) {
    for (size_t i = 0; i < ARRAY_SIZE(family_rows); i++)
        if (strcmp(d->chat_template, family_rows[i].name) == 0) return &family_rows[i];
    return &family_none;
}

/* ---- metadata -------------------------------------------------------------------------- */

static const struct warm_metadata_entry *meta_find(const struct warm_model_details *d,
                                                   const char *key) {
    for (size_t i = 0; i < d->n_metadata; i++)
        if (strcmp(d->metadata[i].key, key) == 0) return &d->metadata[i];
    return NULL;
}

/* A token id the metadata names under key; -1 when it names none or not an id. */
static int32_t meta_token(const struct warm_model_details *d, const char *key) {
    const struct warm_metadata_entry *e = meta_find(d, key);
    if (!e || (strncmp(e->type, "uint", 4) != 0 && strncmp(e->type, "int", 3) != 0)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(e->value, &end, 10);
    if (errno || *end || v < 0 || (d->n_vocab && v >= d->n_vocab) || v > INT32_MAX) return -1;
    return (int32_t)v;
}

/* The keys llama.cpp's converter writes for the FIM tokens (prefix, suffix, middle), now
 * and before it renamed them. */
static const char *const fim_keys[][3] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
     "tokenizer.ggml.fim_mid_token_id"},
    {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
     "tokenizer.ggml.middle_token_id"},
};

bool model_fim_tokens(const struct warm_model_details *d, int32_t ret[3]) {
    for (size_t i = 0; i < ARRAY_SIZE(fim_keys); i++) {
        int32_t t[3];
        for (int k = 0; k < 3; k++) t[k] = meta_token(d, fim_keys[i][k]);
        if (t[0] < 0 || t[1] < 0 || t[2] < 0) continue;
        memcpy(ret, t, sizeof t);
        return true;
    }
    return false;
}

/* One metadata value as Ollama's model_info has it: numbers, booleans and strings typed;
 * arrays (warmd sends them summarized) null, as in Ollama's answer without verbose. */
static json_t *meta_json(const struct warm_metadata_entry *e) {
    const char *t = e->type;
    char *end;
    if (strncmp(t, "uint", 4) == 0) {
        unsigned long long v = strtoull(e->value, &end, 10);
        if (!*end && v <= INT64_MAX) return json_integer((json_int_t)v);
    } else if (strncmp(t, "int", 3) == 0) {
        long long v = strtoll(e->value, &end, 10);
        if (!*end) return json_integer((json_int_t)v);
    } else if (strncmp(t, "float", 5) == 0) {
        double v = strtod(e->value, &end);
        if (!*end) return json_real(v);
    } else if (strcmp(t, "bool") == 0) {
        return json_boolean(strcmp(e->value, "true") == 0);
    } else if (strcmp(t, "string") == 0) {
        return json_text(e->value, strlen(e->value));
    }
    return json_null();
}

/* ---- the answer ------------------------------------------------------------------------ */

/* The capabilities, each with when the model has it. */
struct capability_row {
    const char *name;
    bool (*has)(const struct warm_model_details *d, const struct family_row *f);
};

static bool cap_text(const struct warm_model_details *d, const struct family_row *f) {
    (void)f;
    return !d->embedding;
}
static bool cap_embedding(const struct warm_model_details *d, const struct family_row *f) {
    (void)f;
    return d->embedding;
}
static bool cap_insert(const struct warm_model_details *d, const struct family_row *f) {
    (void)f;
    int32_t t[3];
    return !d->embedding && model_fim_tokens(d, t);
}
static bool cap_tools(const struct warm_model_details *d, const struct family_row *f) {
    return !d->embedding && f->tools;
}
static bool cap_thinking(const struct warm_model_details *d, const struct family_row *f) {
    return !d->embedding && f->thinking;
}

static const struct capability_row capability_rows[] = {
    {"completion", cap_text},   {"insert", cap_insert},   {"tools", cap_tools},
    {"thinking", cap_thinking}, {"embedding", cap_embedding},
};

/* Ollama's "parameters": one `name value` line each, the name padded to 30 columns, the
 * value as Go's %#v writes it (strings quoted). */
static char *parameters(const struct warm_model_details *d, const struct family_row *f) {
    size_t cap = 64 + 320 * ARRAY_SIZE(f->stop);
    char *s = malloc(cap);
    if (!s) return NULL;
    int n = snprintf(s, cap, "%-30s %" PRIu32, "num_ctx", d->ctx_size);
    for (size_t i = 0; i < ARRAY_SIZE(f->stop) && f->stop[i] && n > 0 && (size_t)n < cap; i++)
        n += snprintf(s + n, cap - (size_t)n, "\n%-30s \"%s\"", "stop", f->stop[i]);
    return s;
}

/* "7.6B", "494.03M": Ollama's rendering of a parameter count. */
static void parameter_size(char buf[32], uint64_t n) {
    if (!n) buf[0] = '\0';
    else if (n >= 1000000000ull) snprintf(buf, 32, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, 32, "%.2fM", (double)n / 1e6);
    else snprintf(buf, 32, "%.2fK", (double)n / 1e3);
}

static json_t *show_doc(const struct warm_model_details *d) {
    const struct warm_model_info *m = &d->info;
    const struct family_row *f = family_of(d);
    char size[32], quant[32], at[48];
    parameter_size(size, m->n_params);
    snprintf(quant, sizeof quant, "%.*s", (int)strcspn(m->quantization, " ,"), m->quantization);
    time_t t = (time_t)(m->modified_usec / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *caps = json_array(), *info = json_object();
    for (size_t i = 0; caps && i < ARRAY_SIZE(capability_rows); i++)
        if (capability_rows[i].has(d, f))
            json_array_append_new(caps, json_string(capability_rows[i].name));
    for (size_t i = 0; info && i < d->n_metadata; i++)
        json_object_set_new(info, d->metadata[i].key, meta_json(&d->metadata[i]));
    char *params = parameters(d, f), modelfile[320];
    snprintf(modelfile, sizeof modelfile, "# %s: a GGUF file in warmd's models directory; "
             "warmd applies its chat template (%s) and settings\n", m->name, d->chat_template);
    json_t *doc = json_pack(
        "{s:s,s:s,s:s,s:s,s:{s:s,s:s,s:s,s:o,s:s,s:s},s:o,s:o,s:s}", "license", "",
        "modelfile", modelfile, "parameters", params ? params : "", "template", f->template_,
        "details", "parent_model", "", "format", "gguf", "family", m->architecture, "families",
        *m->architecture ? json_pack("[s]", m->architecture) : json_null(), "parameter_size",
        size, "quantization_level", quant, "model_info", info, "capabilities", caps,
        "modified_at", at);
    free(params);
    return doc;
}

enum MHD_Result ollama_show(struct request *r) {
    struct field_ctx f = {.r = r};
    const char *name = NULL;
    if (field_string(&f, r->json, "model", &name) < 0) return f.mhd;
    if (!name && field_string(&f, r->json, "name", &name) < 0) return f.mhd;
    if (!name || !*name) return reply_error(r, 400, "model", "model is required");
    char buf[HTTPD_MODEL_MAX];
    const char *want = request_model(r, name, buf);
    enum MHD_Result m;
    struct client_ref *c = request_client(r, &m);
    if (!c) return m;
    struct warm_model_details *d;
    struct warm_error e;
    int rc = warm_model_show(client_ref_client(c), want, &d, &e);
    clients_put(&r->h->clients, c);
    if (rc < 0) return reply_warm_error(r, &e);
    if (!d->info.available) {
        m = reply_error(r, 400, "model", "model '%s' is not available: %s", name,
                        d->info.unavailable_reason);
        warm_free(d);
        return m;
    }
    json_t *doc = show_doc(d);
    warm_free(d);
    return reply_json(r, 200, doc);
}
