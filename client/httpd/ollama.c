/* ollama — the Ollama API that desktop apps use: /api/version, /api/tags, /api/ps,
 * /api/generate and /api/chat (NDJSON streams by default, one object with "stream": false;
 * /api/show is show.c), with "options" (sampling, num_predict, num_ctx, stop) and
 * format ("json", or a JSON Schema object: the output is constrained by warmd, and a
 * schema keyword it does not support is a 400 naming it) and
 * keep_alive in Ollama's meanings for the user's own lease on the model (warm.proto): a
 * duration ("5m", "1h30m", or a number of seconds), 0 = end it (the model goes once no
 * request uses it and no other user's lease holds it), negative = as long as warmd allows
 * (its max_keep_alive caps every value), absent = warm-httpd's keep_alive setting (5m, as
 * Ollama's default), never what an earlier request asked for. temperature, top_p and
 * max_output_tokens beside options (the AI SDK's Ollama provider sends them there) count
 * as those options where options leaves them unset. An empty prompt (no
 * messages) loads the model ("done_reason": "load"), or with keep_alive 0 ends the user's
 * lease without loading anything ("unload"). suffix fills in the middle with the
 * vocabulary's FIM tokens; raw sends the prompt without the template. Calls that manage
 * models (/api/pull, /api/delete, /api/create, ...) answer 501 saying how models reach
 * warmd. Errors are {"error": "message"}; fields warmd does not know are ignored, as
 * Ollama does, and fields it knows but cannot honour are refused by name.
 *
 * Tools (/api/chat): tools go to warmd, which writes them into the model's template and
 * parses the answer's calls: message.tool_calls [{id, function: {index, name, arguments as
 * an object}}] (streamed in a line of their own before the last), done_reason "stop" as
 * Ollama's; messages carry tool_calls and role "tool" with tool_name. think: true, or
 * "low", "medium", "high" (accepted as on: the Qwen templates have only on and off), makes
 * a thinking family think and is refused (400) for a model whose family does not; false
 * answers at once; the reasoning is message.thinking (/api/generate: thinking), streamed
 * in lines of its own. A model whose template has no tool format refuses tools (400). */
#include "httpd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_USEC 1000

static void rfc3339(char buf[48], uint64_t wall_usec) {
    time_t t = (time_t)(wall_usec / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, 48, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, 48 - n, ".%06uZ", (unsigned)(wall_usec % 1000000));
}

/* ---- keep_alive ----------------------------------------------------------------------------- */

static const struct {
    const char *unit;
    double usec;
} go_units[] = {{"ns", 1e-3}, {"us", 1}, {"\xc2\xb5s", 1}, {"ms", 1e3}, {"s", 1e6},
                {"m", 60e6},  {"h", 3600e6}};

/* A Go duration ("1h30m", "-1m", "0", "250ms") in microseconds; -EINVAL when it is not one. */
static int go_duration(const char *s, double *ret) {
    double sign = 1, total = 0;
    if (*s == '-' || *s == '+') sign = *s++ == '-' ? -1 : 1;
    if (strcmp(s, "0") == 0) {
        *ret = 0;
        return 0;
    }
    if (!*s) return -EINVAL;
    while (*s) {
        char *end;
        if ((*s < '0' || *s > '9') && *s != '.') return -EINVAL;
        double v = strtod(s, &end);
        if (end == s) return -EINVAL;
        s = end;
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < ARRAY_SIZE(go_units); i++) {
            size_t l = strlen(go_units[i].unit);
            if (strncmp(s, go_units[i].unit, l) == 0 && l > best_len) best = i, best_len = l;
        }
        if (!best_len) return -EINVAL;
        total += v * go_units[best].usec;
        s += best_len;
    }
    *ret = sign * total;
    return 0;
}

/* keep_alive to warmd's keep_alive_usec and unload_after (absent: the job keeps
 * warm-httpd's default): 0 ends the user's lease (unload_after), less than 1 µs becomes
 * 1 µs, a negative value the largest (capped by warmd). */
int parse_keep_alive(struct field_ctx *f, json_t *v, struct warm_gen_params *ret) {
    double usec;
    if (!v || json_is_null(v)) return 0;
    if (json_is_number(v)) usec = json_number_value(v) * 1e6;
    else if (!json_is_string(v) || go_duration(json_string_value(v), &usec) < 0) {
        f->mhd = reply_error(f->r, 400, "keep_alive", "keep_alive must be a duration such as "
                             "\"5m\", \"1h\" or \"0\", or a number of seconds; negative keeps the "
                             "model loaded as long as warmd allows");
        return -EINVAL;
    }
    if (usec == 0) ret->unload_after = true;
    else if (usec < 0 || usec >= 1.8e19) ret->keep_alive_usec = UINT64_MAX;
    else ret->keep_alive_usec = usec < 1 ? 1 : (uint64_t)usec;
    return 0;
}

/* ---- options -------------------------------------------------------------------------------- */

enum opt_kind {
    OPT_FLOAT, OPT_INT, OPT_SEED, OPT_NUM_PREDICT, OPT_NUM_CTX, OPT_STOP, OPT_IGNORED, OPT_REFUSED
};

struct option_row {
    const char *name;
    enum opt_kind kind;
    size_t offset;              /* in struct warm_sampling (OPT_FLOAT, OPT_INT) */
    double lo, hi, neutral;     /* bounds; OPT_REFUSED: the value that changes nothing */
};

#define SOFF(f) offsetof(struct warm_sampling, f)
static const struct option_row option_rows[] = {
    {"temperature", OPT_FLOAT, SOFF(temperature), 0, 100, 0},
    {"top_k", OPT_INT, SOFF(top_k), 0, 1 << 20, 0},
    {"top_p", OPT_FLOAT, SOFF(top_p), 0, 1, 0},
    {"min_p", OPT_FLOAT, SOFF(min_p), 0, 1, 0},
    {"repeat_penalty", OPT_FLOAT, SOFF(repeat_penalty), 0, 10, 0},
    {"repeat_last_n", OPT_INT, SOFF(repeat_last_n), -1, 1 << 20, 0},
    {"frequency_penalty", OPT_FLOAT, SOFF(frequency_penalty), -10, 10, 0},
    {"presence_penalty", OPT_FLOAT, SOFF(presence_penalty), -10, 10, 0},
    {"seed", OPT_SEED, 0, -9.2e18, 9.2e18, 0},
    {"num_predict", OPT_NUM_PREDICT, 0, -2, UINT32_MAX, 0},
    {"num_ctx", OPT_NUM_CTX, 0, 0, INT32_MAX, 0},
    {"stop", OPT_STOP, 0, 0, 0, 0},
    /* How warmd runs the model is warmd's configuration, not a request's. */
    {"num_batch", OPT_IGNORED, 0, 0, 0, 0},
    {"num_gpu", OPT_IGNORED, 0, 0, 0, 0},   {"main_gpu", OPT_IGNORED, 0, 0, 0, 0},
    {"num_thread", OPT_IGNORED, 0, 0, 0, 0}, {"use_mmap", OPT_IGNORED, 0, 0, 0, 0},
    {"use_mlock", OPT_IGNORED, 0, 0, 0, 0}, {"low_vram", OPT_IGNORED, 0, 0, 0, 0},
    {"numa", OPT_IGNORED, 0, 0, 0, 0},      {"num_keep", OPT_IGNORED, 0, 0, 0, 0},
    {"f16_kv", OPT_IGNORED, 0, 0, 0, 0},    {"penalize_newline", OPT_IGNORED, 0, 0, 0, 0},
    /* Samplers warmd does not have: refused unless set to their no-op value. */
    {"mirostat", OPT_REFUSED, 0, 0, 0, 0},  {"typical_p", OPT_REFUSED, 0, 0, 0, 1},
    {"tfs_z", OPT_REFUSED, 0, 0, 0, 1},
};

static int parse_options(struct field_ctx *f, json_t *opts, struct gen_job *j) {
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) {
        f->mhd = reply_error(f->r, 400, "options", "options must be an object");
        return -EINVAL;
    }
    for (size_t i = 0; i < ARRAY_SIZE(option_rows); i++) {
        const struct option_row *o = &option_rows[i];
        json_t *v = json_object_get(opts, o->name);
        if (!v || json_is_null(v) || o->kind == OPT_IGNORED) continue;
        if (o->kind == OPT_STOP) {
            if (field_stop(f, opts, o->name, HTTPD_MAX_STOP, j) < 0) return -EINVAL;
            continue;
        }
        double x = 0;
        bool set = false;
        if (field_number(f, opts, o->name, o->kind == OPT_REFUSED ? -1e300 : o->lo,
                         o->kind == OPT_REFUSED ? 1e300 : o->hi, &x, &set) < 0)
            return -EINVAL;
        if (o->kind != OPT_FLOAT && o->kind != OPT_REFUSED && x != floor(x)) {
            f->mhd = reply_error(f->r, 400, o->name, "options.%s must be an integer", o->name);
            return -EINVAL;
        }
        char *field = (char *)&j->sampling + o->offset;
        switch (o->kind) {
        case OPT_FLOAT: *(float *)field = (float)x; break;
        case OPT_INT:
            if (x >= 0) *(int32_t *)field = (int32_t)x;  /* repeat_last_n -1: keep warmd's */
            break;
        case OPT_SEED:
            /* -1 is Ollama's "random", warmd's 0; keep a fixed seed 0 fixed. */
            j->sampling.seed = x < 0 ? 0 : x == 0 ? UINT64_MAX : (uint64_t)x;
            break;
        case OPT_NUM_PREDICT:
            if (x == 0) {
                f->mhd = reply_error(f->r, 400, "num_predict", "options.num_predict 0 asks for "
                                     "no tokens; use -1 for no limit");
                return -EINVAL;
            }
            j->params.max_tokens = x < 0 ? 0 : (uint32_t)x;  /* -1, -2: until the end */
            break;
        case OPT_NUM_CTX: j->num_ctx = (uint32_t)x; break;  /* 0: the model's (gen.c) */
        case OPT_REFUSED:
            if (x != o->neutral) {
                f->mhd = reply_error(f->r, 400, o->name, "options.%s is not supported: warmd has "
                                     "no such sampler", o->name);
                return -EINVAL;
            }
            break;
        case OPT_STOP:
        case OPT_IGNORED: break;
        }
    }
    return 0;
}

/* ---- refused fields ------------------------------------------------------------------------- */

static const struct {
    const char *name, *why;
} refused_rows[] = {
    {"images", "warmd's models read text only"},
    {"template", "warmd renders prompts with the model's own chat template"},
    {"context", "send the conversation with /api/chat instead; warmd resumes it from its "
                "prompt cache"},
};

/* think: true (on), "low", "medium", "high" (on with that effort: gpt-oss's levels; the
 * other thinking families have none), false (off). */
static int parse_think(struct field_ctx *f, json_t *v, struct gen_job *j) {
    if (!v || json_is_null(v)) return 0;
    const char *s = json_string_value(v);
    if (json_is_true(v))
        j->params.think = WARM_THINK_ON;
    else if (s && strcmp(s, "low") == 0)
        j->params.think = WARM_THINK_LOW;
    else if (s && strcmp(s, "medium") == 0)
        j->params.think = WARM_THINK_MEDIUM;
    else if (s && strcmp(s, "high") == 0)
        j->params.think = WARM_THINK_HIGH;
    else if (json_is_false(v))
        j->params.think = WARM_THINK_OFF;
    else {
        f->mhd = reply_error(f->r, 400, "think", "think must be true, false, \"low\", "
                             "\"medium\" or \"high\"");
        return -EINVAL;
    }
    return 0;
}

static bool meaningful(json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return false;
    if (json_is_string(v)) return *json_string_value(v) != '\0';
    if (json_is_array(v)) return json_array_size(v) > 0;
    return true;
}

static int check_common(struct field_ctx *f, json_t *b, struct gen_job *j) {
    for (size_t i = 0; i < ARRAY_SIZE(refused_rows); i++)
        if (meaningful(json_object_get(b, refused_rows[i].name))) {
            f->mhd = reply_error(f->r, 400, refused_rows[i].name, "'%s' is not supported: %s",
                                 refused_rows[i].name, refused_rows[i].why);
            return -EINVAL;
        }
    const char *model = NULL;
    if (field_string(f, b, "model", &model) < 0) return -EINVAL;
    if (!model || !*model) {
        f->mhd = reply_error(f->r, 400, "model", "model is required");
        return -EINVAL;
    }
    snprintf(j->model, sizeof j->model, "%s", model);
    j->params.model = request_model(f->r, model, j->model_buf);
    /* format: "json" (one object, as Ollama's JSON grammar), or a JSON Schema object */
    json_t *format = json_object_get(b, "format");
    if (json_is_string(format) && strcmp(json_string_value(format), "json") == 0) {
        if (field_schema(f, j, NULL, "format") < 0) return -EINVAL;
    } else if (json_is_object(format)) {
        if (field_schema(f, j, format, "format") < 0) return -EINVAL;
    } else if (format && !json_is_null(format) &&
               !(json_is_string(format) && !*json_string_value(format))) {
        f->mhd = reply_error(f->r, 400, "format", "'format' must be \"json\" or a JSON Schema "
                             "object");
        return -EINVAL;
    }
    if (parse_think(f, json_object_get(b, "think"), j) < 0) return -EINVAL;
    j->stream = true;           /* Ollama streams unless told not to */
    if (field_bool(f, b, "stream", &j->stream) < 0) return -EINVAL;
    if (parse_keep_alive(f, json_object_get(b, "keep_alive"), &j->params) < 0)
        return -EINVAL;
    /* The Vercel AI SDK's Ollama provider (ollama-ai-provider-v2) sends temperature, top_p
     * and max_output_tokens beside options, where Ollama ignores them: taken as the options
     * temperature, top_p and num_predict where options does not set those. */
    static const char *const top[][2] = {{"temperature", "temperature"}, {"top_p", "top_p"},
                                         {"max_output_tokens", "num_predict"}};
    json_t *opts = json_object_get(b, "options"), *merged = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(top); i++) {
        json_t *v = json_object_get(b, top[i][0]);
        if (!v || json_is_null(v) || (json_is_object(opts) && json_object_get(opts, top[i][1])))
            continue;
        if (!merged) merged = json_is_object(opts) ? json_copy(opts) : json_object();
        if (!merged || (opts && !json_is_object(opts))) break; /* parse_options says why */
        json_object_set(merged, top[i][1], v);
    }
    int r = parse_options(f, merged ? merged : opts, j);
    json_decref(merged);
    return r;
}

/* ---- replies -------------------------------------------------------------------------------- */

static json_t *head(const struct gen_job *j) {
    char at[48];
    rfc3339(at, time_wall_usec());
    return json_pack("{s:s,s:s}", "model", j->model, "created_at", at);
}

static void add_stats(json_t *d, const struct gen_job *j) {
    const struct warm_summary *s = &j->summary;
    json_object_set_new(d, "done", json_true());
    /* Ollama ends a turn of tool calls with "stop" */
    json_object_set_new(d, "done_reason", json_string(s->stop_reason == WARM_STOP_TOOL_CALLS
                                                          ? "stop"
                                                          : finish_reason(s->stop_reason)));
    json_object_set_new(d, "total_duration", json_integer((json_int_t)(s->total_usec * NS_PER_USEC)));
    json_object_set_new(d, "load_duration", json_integer((json_int_t)(s->load_usec * NS_PER_USEC)));
    json_object_set_new(d, "prompt_eval_count", json_integer(s->prompt_tokens));
    json_object_set_new(d, "prompt_eval_duration",
                        json_integer((json_int_t)((s->restore_usec + s->prefill_usec) * NS_PER_USEC)));
    json_object_set_new(d, "eval_count", json_integer(s->generated_tokens));
    json_object_set_new(d, "eval_duration", json_integer((json_int_t)(s->decode_usec * NS_PER_USEC)));
}

/* The answer's tool calls as Ollama writes them: arguments as an object. */
static json_t *tool_calls_doc(const struct warm_summary *s) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n_tool_calls; i++) {
        const struct warm_tool_call *c = &s->tool_calls[i];
        json_t *args = json_loads(c->arguments, 0, NULL);
        json_array_append_new(a, json_pack("{s:s,s:{s:I,s:s,s:o}}", "id", c->id, "function",
                                           "index", (json_int_t)i, "name", c->name, "arguments",
                                           json_is_object(args) ? args : json_object()));
        if (!json_is_object(args)) json_decref(args);
    }
    return a;
}

/* The text of one line: "response" (and "thinking") for /api/generate, "message" for
 * /api/chat; calls: the answer's tool calls (chat only). */
static void add_text(json_t *d, const struct gen_job *j, const char *text, size_t len,
                     const char *thinking, size_t n_thinking, bool calls) {
    json_t *t = n_thinking ? json_text(thinking, n_thinking) : NULL;
    if (j->chat && !j->plain_fallback) {
        json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", json_text(text, len));
        if (m && t) json_object_set_new(m, "thinking", t);
        else json_decref(t);
        if (m && calls) json_object_set_new(m, "tool_calls", tool_calls_doc(&j->summary));
        json_object_set_new(d, "message", m);
    } else {
        json_object_set_new(d, "response", json_text(text, len));
        if (t) json_object_set_new(d, "thinking", t);
    }
}

static int line_emit(struct gen_job *j, const char *text, size_t len, const char *thinking,
                     size_t n_thinking, bool calls) {
    json_t *d = head(j);
    if (!d) return -ENOMEM;
    add_text(d, j, text, len, thinking, n_thinking, calls);
    json_object_set_new(d, "done", json_false());
    return gen_emit_json(j, d, false);
}

static int line_piece(struct gen_job *j, const char *text, size_t len) {
    j->head_sent = true;
    return len ? line_emit(j, text, len, NULL, 0, false) : 0;
}

static int line_thinking(struct gen_job *j, const char *text, size_t len) {
    j->head_sent = true;
    return len ? line_emit(j, "", 0, text, len, false) : 0;
}

static int line_end(struct gen_job *j) {
    /* the calls in a line of their own before the last, as Ollama streams them */
    if (j->summary.n_tool_calls && j->chat && !j->plain_fallback) {
        int r = line_emit(j, "", 0, NULL, 0, true);
        if (r < 0) return r;
    }
    json_t *d = head(j);
    if (!d) return -ENOMEM;
    add_text(d, j, "", 0, NULL, 0, false);
    add_stats(d, j);
    return gen_emit_json(j, d, false);
}

static int line_error(struct gen_job *j) {
    return gen_emit_json(j, json_pack("{s:s}", "error", j->err.message), false);
}

static json_t *line_whole(struct gen_job *j) {
    json_t *d = head(j);
    if (!d) return NULL;
    add_text(d, j, j->text ? j->text : "", j->text_len, j->reasoning, j->reasoning_len,
             j->summary.n_tool_calls > 0);
    add_stats(d, j);
    return d;
}

static const struct gen_ops line_ops = {
    .content_type = "application/x-ndjson",
    .piece = line_piece, .thinking = line_thinking, .end = line_end, .error = line_error,
    .whole = line_whole,
};

/* ---- load and unload ------------------------------------------------------------------ */

/* An empty prompt (no messages) asks Ollama to load the model, or with keep_alive 0 to let
 * it go, and nothing else. warmd loads a model for a generation (LoadModel is for admins)
 * and ends a user's lease with one (unload_after): one token from token id 0, outside the
 * prompt cache. Unloading a model that is not loaded loads nothing. */
static enum MHD_Result load_or_unload(struct request *r, struct gen_job *j) {
    bool unload = j->params.unload_after;
    enum MHD_Result m;
    struct client_ref *c = request_client(r, &m);
    if (!c) {
        gen_job_free(j);
        return m;
    }
    j->client = c;
    struct warm_client *wc = client_ref_client(c);
    bool loaded = true;
    int rc = 0;
    if (unload) {
        struct warm_model_info *ms;
        size_t n;
        rc = warm_models_list(wc, &ms, &n, &j->err);
        if (rc >= 0) {
            const char *want = j->params.model ? j->params.model : "";
            bool found = false;
            loaded = false;
            for (size_t i = 0; i < n; i++)
                if (strcmp(ms[i].name, want) == 0) found = true, loaded = ms[i].loaded;
            warm_free(ms);
            /* warmd's default model (no name) is looked up by warmd itself */
            if (!found && *want) {
                enum MHD_Result e = reply_error(r, 404, "model", "model '%s' not found", j->model);
                gen_job_free(j);
                return e;
            }
            loaded = loaded || !*want;
        }
    }
    if (rc >= 0 && loaded) {
        static const int32_t token = 0;
        j->params.max_tokens = 1;
        j->params.cache_mode = WARM_CACHE_SKIP;
        j->params.sampling = NULL;
        j->params.n_stop = 0;
        j->params.json_schema = NULL;   /* nothing is generated worth constraining */
        j->params.tools_json = NULL;    /* nor any chat to call tools or think in */
        j->params.tool_choice = WARM_TOOLS_AUTO;
        j->params.think = WARM_THINK_DEFAULT;
        struct warm_summary s;
        rc = warm_generate(wc, &j->params, NULL, &token, 1, NULL, NULL, &s, &j->err);
        if (rc >= 0) warm_summary_done(&s);
    }
    if (rc < 0) {
        m = reply_warm_error(r, &j->err);
        gen_job_free(j);
        return m;
    }
    json_t *d = head(j);
    if (d) {
        if (j->chat) json_object_set_new(d, "message", json_pack("{s:s,s:s}", "role", "assistant",
                                                                 "content", ""));
        else json_object_set_new(d, "response", json_string(""));
        json_object_set_new(d, "done", json_true());
        json_object_set_new(d, "done_reason", json_string(unload ? "unload" : "load"));
    }
    gen_job_free(j);
    return reply_json(r, 200, d);
}

/* ---- fill in the middle ------------------------------------------------------------------ */

/* Appends the ids of text (no special tokens) to j->tokens. */
static int fim_append_text(struct gen_job *j, struct warm_client *c, const char *text,
                           size_t *cap) {
    int32_t *ids;
    size_t n;
    int rc = warm_tokenize(c, j->params.model, text, 0, &ids, &n, &j->err);
    if (rc < 0) return rc;
    if (j->n_tokens + n > *cap) {
        size_t want = j->n_tokens + n + 4;
        int32_t *t = realloc(j->tokens, want * sizeof *t);
        if (!t) {
            warm_free(ids);
            j->err.code = WARM_NO_MEMORY;
            snprintf(j->err.message, sizeof j->err.message, "out of memory");
            return -WARM_NO_MEMORY;
        }
        j->tokens = t;
        *cap = want;
    }
    memcpy(j->tokens + j->n_tokens, ids, n * sizeof *ids);
    j->n_tokens += n;
    warm_free(ids);
    return 0;
}

/* The prompt as llama.cpp's infill lays it out (prefix-suffix-middle): BOS where the
 * vocabulary adds one, FIM prefix, the prompt, FIM suffix, the suffix, FIM middle; the
 * model writes the middle. 400 naming the model when its vocabulary has no FIM tokens. */
static enum MHD_Result fill_in_middle(struct request *r, struct gen_job *j, const char *prompt,
                                      const char *suffix) {
    enum MHD_Result m;
    struct client_ref *c = request_client(r, &m);
    if (!c) {
        gen_job_free(j);
        return m;
    }
    j->client = c;
    struct warm_client *wc = client_ref_client(c);
    struct warm_model_details *d;
    int rc = warm_model_show(wc, j->params.model, &d, &j->err);
    if (rc < 0) {
        m = reply_warm_error(r, &j->err);
        gen_job_free(j);
        return m;
    }
    int32_t fim[3];
    bool has = model_fim_tokens(d, fim);
    warm_free(d);
    if (!has) {
        enum MHD_Result e = reply_error(r, 400, "suffix", "model '%s' does not support insert: "
                                        "its vocabulary names no fill-in-the-middle tokens "
                                        "(prefix, suffix, middle), so 'suffix' cannot be used "
                                        "with it", j->model);
        gen_job_free(j);
        return e;
    }
    /* BOS: what tokenizing with the vocabulary's own rule puts before the text. */
    int32_t *with;
    size_t n_with, cap = 0;
    rc = warm_tokenize(wc, j->params.model, prompt, WARM_TOKENIZE_ADD_SPECIAL, &with, &n_with,
                       &j->err);
    if (rc >= 0) {
        int32_t *plain;
        size_t n_plain;
        rc = warm_tokenize(wc, j->params.model, prompt, 0, &plain, &n_plain, &j->err);
        if (rc >= 0) {
            bool bos = n_with > n_plain && (n_plain == 0 || memcmp(with + 1, plain,
                                                                   n_plain * sizeof *plain) == 0);
            size_t n = n_plain + (bos ? 1 : 0) + 1;
            cap = n + 8;
            j->tokens = malloc(cap * sizeof *j->tokens);
            if (j->tokens) {
                if (bos) j->tokens[j->n_tokens++] = with[0];
                j->tokens[j->n_tokens++] = fim[0];
                memcpy(j->tokens + j->n_tokens, plain, n_plain * sizeof *plain);
                j->n_tokens += n_plain;
            } else {
                rc = -WARM_NO_MEMORY;
                j->err.code = WARM_NO_MEMORY;
                snprintf(j->err.message, sizeof j->err.message, "out of memory");
            }
            warm_free(plain);
        }
        warm_free(with);
    }
    if (rc >= 0) {
        j->tokens[j->n_tokens++] = fim[1];
        rc = fim_append_text(j, wc, suffix, &cap);
    }
    if (rc >= 0) j->tokens[j->n_tokens++] = fim[2];   /* cap keeps room for it */
    if (rc < 0) {
        m = reply_warm_error(r, &j->err);
        gen_job_free(j);
        return m;
    }
    return gen_run(r, j);
}

/* ---- handlers ------------------------------------------------------------------------------- */

enum MHD_Result ollama_generate(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &line_ops, API_OLLAMA);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    const char *prompt = "", *system = NULL, *suffix = NULL;
    bool raw = false;
    if (meaningful(json_object_get(r->json, "tools"))) {
        gen_job_free(j);
        return reply_error(r, 400, "tools", "'tools' is not supported by /api/generate: send the "
                           "conversation and its tools with /api/chat");
    }
    if (check_common(&f, r->json, j) < 0 || field_string(&f, r->json, "prompt", &prompt) < 0 ||
        field_string(&f, r->json, "system", &system) < 0 ||
        field_string(&f, r->json, "suffix", &suffix) < 0 ||
        field_bool(&f, r->json, "raw", &raw) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    bool has_system = system && *system, has_suffix = suffix && *suffix;
    /* As Ollama: raw sends the prompt as it is, so there is no template to put a system
     * message in. */
    if (raw && has_system) {
        gen_job_free(j);
        return reply_error(r, 400, "system", "'system' cannot be used with raw: a raw prompt "
                           "is sent as it is, without the template that would hold it");
    }
    if (has_suffix && has_system) {
        gen_job_free(j);
        return reply_error(r, 400, "system", "'system' cannot be used with 'suffix': the "
                           "fill-in-the-middle prompt has no place for it");
    }
    if (has_suffix) return fill_in_middle(r, j, prompt ? prompt : "", suffix);
    if (!prompt || !*prompt) return load_or_unload(r, j);
    j->prompt = prompt;
    if (!raw) {
        /* Ollama renders the prompt with the model's template; a model without one (a base
         * model) completes the text as it is, system message first. */
        j->chat = j->plain_fallback = true;
        j->msgs = calloc(2, sizeof *j->msgs);
        if (!j->msgs) {
            gen_job_free(j);
            return reply_error(r, 503, NULL, "out of memory");
        }
        if (has_system) {
            j->msgs[j->n_msgs++] = (struct warm_chat_message){.role = "system", .content = system};
            size_t n = strlen(system) + strlen(prompt) + 3;
            char *both = gen_job_keep(j, malloc(n));
            if (!both) {
                gen_job_free(j);
                return reply_error(r, 503, NULL, "out of memory");
            }
            snprintf(both, n, "%s\n\n%s", system, prompt);
            j->prompt = both;
        }
        j->msgs[j->n_msgs++] = (struct warm_chat_message){.role = "user", .content = prompt};
    }
    return gen_run(r, j);
}

enum MHD_Result ollama_chat(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &line_ops, API_OLLAMA);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    j->chat = true;
    if (check_common(&f, r->json, j) < 0 || field_tools(&f, j, json_object_get(r->json, "tools")) < 0 ||
        field_tool_choice(&f, j, json_object_get(r->json, "tool_choice")) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    json_t *msgs = json_object_get(r->json, "messages");
    if (!msgs || json_is_null(msgs) || (json_is_array(msgs) && json_array_size(msgs) == 0))
        return load_or_unload(r, j);
    if (parse_messages(&f, j, msgs) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    return gen_run(r, j);
}

enum MHD_Result ollama_root(struct request *r) {
    /* Clients probe for this exact text; the Server header says who answers. */
    return reply_text(r, 200, "text/plain; charset=utf-8", "Ollama is running");
}

enum MHD_Result ollama_version(struct request *r) {
    return reply_json(r, 200, json_pack("{s:s,s:s}", "version", HTTPD_OLLAMA_API_VERSION,
                                        "warm_httpd", HTTPD_VERSION));
}

static json_t *details(const struct warm_model_info *m) {
    return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "parent_model", "", "format", "gguf", "family",
                     m->architecture, "families",
                     *m->architecture ? json_pack("[s]", m->architecture) : json_null(),
                     "parameter_size", "", "quantization_level", "");
}

static json_t *model_entry(const struct warm_model_info *m, bool running) {
    char at[48];
    rfc3339(at, running ? time_wall_usec() + m->keep_alive_left_usec : m->modified_usec);
    json_t *d = json_pack("{s:s,s:s,s:I,s:s,s:o}", "name", m->name, "model", m->name, "size",
                          (json_int_t)(running ? m->memory_bytes : m->size_bytes), "digest",
                          m->fingerprint, "details", details(m));
    if (!d) return NULL;
    json_object_set_new(d, running ? "expires_at" : "modified_at", json_string(at));
    if (running) json_object_set_new(d, "size_vram", json_integer(0));
    return d;
}

static int models(struct request *r, enum MHD_Result *m, struct warm_model_info **ret,
                  size_t *ret_n) {
    struct client_ref *c = request_client(r, m);
    if (!c) return -1;
    struct warm_error e;
    int rc = warm_models_list(client_ref_client(c), ret, ret_n, &e);
    clients_put(&r->h->clients, c);
    if (rc < 0) *m = reply_warm_error(r, &e);
    return rc;
}

static enum MHD_Result list(struct request *r, bool running) {
    enum MHD_Result m;
    struct warm_model_info *ms;
    size_t n;
    if (models(r, &m, &ms, &n) < 0) return m;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        if (!running || ms[i].loaded) json_array_append_new(a, model_entry(&ms[i], running));
    warm_free(ms);
    return reply_json(r, 200, json_pack("{s:o}", "models", a));
}

enum MHD_Result ollama_tags(struct request *r) {
    return list(r, false);
}

enum MHD_Result ollama_ps(struct request *r) {
    return list(r, true);
}

enum MHD_Result ollama_not_here(struct request *r) {
    return reply_error(r, 501, NULL,
                       "%s is not available: warmd does not download, create or delete models. "
                       "An administrator adds a model by copying its GGUF file into warmd's "
                       "models directory (/var/lib/warmd/models by default) and running "
                       "`systemctl reload warmd`; the file name without .gguf is the model's "
                       "name (`warmctl models` lists them)", r->url);
}
