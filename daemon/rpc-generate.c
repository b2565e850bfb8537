/* rpc-generate — Generate and Chat: request validation (every field's bounds, P0-12)
 * before anything is resolved or allocated. */
#include "daemon/rpc-handlers.h"

#include "daemon/cache.h"
#include "daemon/log.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define STOP_MAX 16
#define STOP_MAX_BYTES 256
#define CHAT_MAX_MESSAGES 4096
/* OutputFormat text (a JSON Schema or a grammar), as warm.proto documents: compiling is
 * done on the RPC thread, so it is kept well below ENGINE_GRAMMAR_MAX_TEXT_BYTES. */
#define FORMAT_MAX_BYTES 65536
/* ChatRequest.tools_json, as warm.proto documents */
#define TOOLS_MAX_BYTES 262144
/* Tool calls parsed from one answer (more are dropped) */
#define TOOL_CALLS_MAX 64

static bool in_range(float v, float lo, float hi) { return isfinite(v) && v >= lo && v <= hi; }

/* Sampling bounds as documented in warm.proto. */
static int sampling_check(struct rpc_call *c, const Warm__V1__Sampling *s) {
    if (!s) return 0;
    const char *field = NULL;
    if (!in_range(s->temperature, 0, 10)) field = "temperature must be in [0, 10]";
    else if (s->top_k < 0) field = "top_k must be >= 0";
    else if (!in_range(s->top_p, 0, 1)) field = "top_p must be in [0, 1]";
    else if (!in_range(s->min_p, 0, 1)) field = "min_p must be in [0, 1]";
    else if (!in_range(s->repeat_penalty, 0, 10)) field = "repeat_penalty must be in [0, 10]";
    else if (s->repeat_last_n < -1) field = "repeat_last_n must be >= -1";
    else if (!in_range(s->frequency_penalty, -2, 2)) field = "frequency_penalty must be in [-2, 2]";
    else if (!in_range(s->presence_penalty, -2, 2)) field = "presence_penalty must be in [-2, 2]";
    if (field) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "sampling.%s", field);
        return -EINVAL;
    }
    return 0;
}

static int stop_check(struct rpc_call *c, char **stop, size_t n) {
    if (n > STOP_MAX) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "stop: %zu strings, at most %d", n, STOP_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(stop[i]);
        if (len == 0 || len > STOP_MAX_BYTES || !rpc_utf8_valid(stop[i], len)) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "stop[%zu]: must be 1..%d bytes of UTF-8", i, STOP_MAX_BYTES);
            return -EINVAL;
        }
    }
    return 0;
}

static int cache_check(struct rpc_call *c, const Warm__V1__CacheOptions *o) {
    if (!o) return 0;
    if (o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_USE &&
        o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_SKIP &&
        o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_REFRESH) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "cache.mode: unknown value %d", (int)o->mode);
        return -EINVAL;
    }
    /* a shared namespace the config opens to the caller's groups (daemon/cache.h) */
    if (*o->namespace_ && strlen(o->namespace_) < CACHE_NS_MAX &&
        cache_namespace_shared_ok(rpc_call_daemon(c)->config.cache_shared_namespaces,
                                  rpc_call_peer(c), o->namespace_))
        return 0;
    return rpc_namespace_check(c, o->namespace_, false);
}

/* Compiles the request's OutputFormat (NULL: free text) into *ret (NULL when absent);
 * answers the call and returns < 0 when it is malformed or unsupported. */
static int format_compile(struct rpc_call *c, const Warm__V1__OutputFormat *f,
                          struct engine_grammar **ret) {
    *ret = NULL;
    if (!f) return 0;
    const char *field, *text;
    if (f->format_case == WARM__V1__OUTPUT_FORMAT__FORMAT_JSON_SCHEMA) {
        field = "format.json_schema";
        text = f->json_schema;
    } else if (f->format_case == WARM__V1__OUTPUT_FORMAT__FORMAT_GRAMMAR) {
        field = "format.grammar";
        text = f->grammar;
    } else {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "format: set json_schema or grammar (this server knows no other format)");
        return -EINVAL;
    }
    size_t len = strlen(text);
    if (len == 0 || len > FORMAT_MAX_BYTES) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s: %zu bytes; it must have 1..%d", field,
                      len, FORMAT_MAX_BYTES);
        return -EINVAL;
    }
    struct err_detail d = {0};
    int e = f->format_case == WARM__V1__OUTPUT_FORMAT__FORMAT_JSON_SCHEMA
                ? engine_grammar_from_schema(text, len, ret, &d)
                : engine_grammar_parse(text, len, ret, &d);
    if (e < 0) {
        /* the schema's or grammar's own fault (its size included), or our memory */
        static const char prefix[] = "JSON schema: ";
        const char *msg = err_msg(&d, e);
        if (strncmp(msg, prefix, sizeof prefix - 1) == 0) msg += sizeof prefix - 1;
        rpc_call_fail(c, e == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                      : GRPC_STATUS_INVALID_ARGUMENT, "%s: %s", field, msg);
        return e;
    }
    return 0;
}

/* The limits on prompt length: max_prompt_tokens (0 = ctx_size) tokens, and a byte cap
 * applied before tokenization (a token is rarely longer than 16 bytes of text). */
static uint32_t prompt_token_cap(const struct config *cfg) {
    return cfg->max_prompt_tokens ? cfg->max_prompt_tokens : cfg->ctx_size;
}


/* ---- the generation job: runs on the model's loop thread ---------------------------- */

struct gen_job {
    struct runner_job base;     /* first: the runner hands us &base */
    struct rpc_call *call;      /* referenced until done */
    struct daemon *d;
    int32_t *prompt;
    struct engine_grammar *grammar; /* the request's OutputFormat, or NULL */
    char **stop;                /* copies of the request's stop strings */
    size_t n_stop;
    char *pending;              /* text held back: it may start a stop string */
    size_t n_pending, cap_pending;
    int stop_hit;               /* index into stop, or -1 */
    uint64_t seed, start_usec, load_usec;
    uint64_t keep_alive_usec;   /* the caller's lease on the model after this request */
    char warning[256];          /* Summary.warnings (one at most so far); "" = none */
    char warning_ctx[256];      /* the prompt is past the trained context; "" = not */
    /* Chat: the answer apart from the reasoning (thinking families, engine_chat_think_*),
     * and tool calls held back from "<tool_call>" on, parsed at the end. */
    enum engine_chat_family fam;
    bool split;                 /* reasoning is split from the answer */
    struct engine_chat_think think;
    bool tools;                 /* the answer is searched for tool calls */
    uint32_t max_calls;         /* 0 = any number */
    bool in_calls;              /* "<tool_call>" was seen: the rest of the answer is held */
    bool no_calls;              /* llama31: the answer began as text, so it is no call */
    bool sent;                  /* some answer text was sent */
    const struct engine_vocab *vocab; /* harmony, gemma4's calls: control tokens as text */
    /* The held calls read as they stream (engine_chat_scan_*): held[0..n_scanned) was
     * scanned; the first n_started calls have had their first piece (id, name) sent, and
     * args_sent[i] says whether any of call i's arguments were. */
    struct engine_chat_scan scan;
    size_t n_scanned;
    unsigned n_started;
    bool args_sent[TOOL_CALLS_MAX];
    char ids[TOOL_CALLS_MAX][32];
    char *held;                 /* answer text held back: a tool call or its possible start */
    size_t n_held, cap_held;
    char *scratch;              /* the split's output: reasoning, then answer */
    size_t cap_scratch;
};

static void job_free(struct gen_job *j) {
    for (size_t i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->prompt);
    engine_grammar_free(j->grammar);
    free(j->pending);
    free(j->held);
    free(j->scratch);
    free(j);
}

static char *dup_text(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) {
        if (n) memcpy(t, s, n);
        t[n] = 0;
    }
    return t;
}

/* One TokenEvent: the answer's text and the reasoning's. */
static int send_event(struct gen_job *j, int32_t id, const char *text, size_t len,
                      const char *reasoning, size_t n_reasoning) {
    char *a = dup_text(text, len), *r = dup_text(reasoning, n_reasoning);
    int e = -ENOMEM;
    if (a && r) {
        Warm__V1__TokenEvent t = WARM__V1__TOKEN_EVENT__INIT;
        t.id = id;
        t.text = a;
        t.reasoning = r;
        Warm__V1__GenerateEvent ev = WARM__V1__GENERATE_EVENT__INIT;
        ev.event_case = WARM__V1__GENERATE_EVENT__EVENT_TOKEN;
        ev.token = &t;
        e = rpc_call_send(j->call, &ev.base);
    }
    free(a);
    free(r);
    return e;
}

static int buf_append(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
    size_t need;
    if (!size_add(*n, len, &need)) return -ENOMEM;
    if (need > *cap) {
        size_t c = MAX(need, *cap * 2);
        char *p = realloc(*buf, c);
        if (!p) return -ENOMEM;
        *buf = p;
        *cap = c;
    }
    if (len) memcpy(*buf + *n, s, len);
    *n = need;
    return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Appends answer text to the held text and returns how many leading bytes of it can be
 * sent: none from the family's call opening ("<tool_call>", engine_chat_call_open) on, nor
 * a tail that may start one (with the whitespace before it, which the parser drops from
 * the content). */
static size_t hold_calls(struct gen_job *j, const char *a, size_t n, int *err) {
    const char *open = engine_chat_call_open(j->fam);
    size_t open_len = strlen(open);
    *err = buf_append(&j->held, &j->n_held, &j->cap_held, a, n);
    if (*err < 0 || j->in_calls) return 0;
    if (j->fam == ENGINE_CHAT_LLAMA31 && !j->no_calls) {
        /* Llama 3.x: a call is the whole answer, a JSON object from its first byte on */
        size_t k = 0;
        while (k < j->n_held && is_ws(j->held[k])) k++;
        if (k == j->n_held) return 0;
        if (!j->sent && j->held[k] == '{') {
            j->in_calls = true;
            return 0;
        }
        j->no_calls = true;
    }
    if (j->fam == ENGINE_CHAT_LLAMA31) return j->n_held;
    const char *hit = j->n_held ? memmem(j->held, j->n_held, open, open_len) : NULL;
    size_t keep;
    if (hit) {
        j->in_calls = true;
        keep = (size_t)(hit - j->held);
    } else {
        size_t part = 0;
        for (size_t l = MIN(j->n_held, open_len - 1); l > 0 && !part; l--)
            if (memcmp(j->held + j->n_held - l, open, l) == 0) part = l;
        keep = j->n_held - part;
    }
    while (keep > 0 && is_ws(j->held[keep - 1])) keep--;
    return keep;
}

static int scan_held(struct gen_job *j, int32_t tok);

/* Sends text the stop strings let through: split into reasoning and answer, the answer's
 * tool calls held back (and sent piece by piece as they stream, scan_held). */
static int send_text(struct gen_job *j, int32_t id, const char *text, size_t len) {
    if (!j->split && !j->tools) return send_event(j, id, text, len, "", 0);
    /* each of the split's outputs takes up to 2 * len + ENGINE_CHAT_SPLIT_EXTRA bytes */
    size_t half = 2 * len + ENGINE_CHAT_SPLIT_EXTRA, need = 2 * half, nr = 0, na = len;
    if (need > j->cap_scratch) {
        char *p = realloc(j->scratch, need);
        if (!p) return -ENOMEM;
        j->scratch = p;
        j->cap_scratch = need;
    }
    char *r = j->scratch, *a = j->scratch + half;
    if (j->split) engine_chat_think_split(&j->think, text, len, r, &nr, a, &na);
    else if (len) memcpy(a, text, len);
    if (!j->tools) return send_event(j, id, a, na, r, nr);
    int e;
    size_t out = hold_calls(j, a, na, &e);
    if (e < 0) return e;
    e = send_event(j, id, j->held, out, r, nr);
    j->sent = j->sent || out > 0;
    if (out) memmove(j->held, j->held + out, j->n_held - out);
    j->n_held -= out;
    if (e >= 0 && j->in_calls) e = scan_held(j, id);
    return e;
}

/* "call_" and 24 random letters and digits, as OpenAI's ids look. */
static void call_id(char out[32]) {
    static const char digits[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint8_t b[24];
    while (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
    }
    memcpy(out, "call_", 5);
    for (size_t i = 0; i < sizeof b; i++) out[5 + i] = digits[b[i] % (sizeof digits - 1)];
    out[5 + sizeof b] = 0;
}

/* One piece of tool call index (ToolCallDelta): its id and name (the first piece), or
 * len bytes of its arguments. */
static int send_delta(struct gen_job *j, int32_t tok, unsigned index, const char *name,
                      const char *args, size_t len) {
    char *a = dup_text(args, len);
    if (!a) return -ENOMEM;
    Warm__V1__ToolCallDelta tc = WARM__V1__TOOL_CALL_DELTA__INIT;
    tc.index = index;
    tc.id = name ? j->ids[index] : "";
    tc.name = name ? (char *)name : "";
    tc.arguments = a;
    Warm__V1__TokenEvent t = WARM__V1__TOKEN_EVENT__INIT;
    t.id = tok;
    t.tool_call = &tc;
    Warm__V1__GenerateEvent ev = WARM__V1__GENERATE_EVENT__INIT;
    ev.event_case = WARM__V1__GENERATE_EVENT__EVENT_TOKEN;
    ev.token = &t;
    int e = rpc_call_send(j->call, &ev.base);
    free(a);
    return e;
}

/* Scans the held calls' new bytes: a call's name is sent when whole, its arguments as they
 * come (one piece per run of them). */
static int scan_held(struct gen_job *j, int32_t tok) {
    int e = 0;
    size_t run = 0, k = j->n_scanned; /* the arguments' bytes [run, k) are not sent yet */
    bool in_run = false;
    for (; k < j->n_held && e >= 0 && !j->scan.failed; k++) {
        enum engine_chat_scan_event ev = engine_chat_scan_byte(&j->scan, j->held[k]);
        if (ev == ENGINE_CHAT_SCAN_ARG) {
            if (!in_run) run = k, in_run = true;
            continue;
        }
        if (in_run && j->n_started) {
            e = send_delta(j, tok, j->n_started - 1, NULL, j->held + run, k - run);
            j->args_sent[j->n_started - 1] = true;
        }
        in_run = false;
        if (ev == ENGINE_CHAT_SCAN_NAME && e >= 0) {
            if (j->n_started == TOOL_CALLS_MAX || (j->max_calls && j->n_started >= j->max_calls)) {
                j->scan.failed = true; /* no more calls are reported */
                break;
            }
            call_id(j->ids[j->n_started]);
            e = send_delta(j, tok, j->n_started++, j->scan.name, "", 0);
        }
    }
    if (in_run && e >= 0 && j->n_started) {
        e = send_delta(j, tok, j->n_started - 1, NULL, j->held + run, k - run);
        j->args_sent[j->n_started - 1] = true;
    }
    j->n_scanned = j->n_held;
    return e;
}

/* The parsed calls' pieces not sent while they streamed: a call not seen then whole, one
 * whose arguments were not (qwen35's XML) its arguments as parsed. */
static int finish_deltas(struct gen_job *j, const struct engine_chat_parsed_call *calls,
                         size_t n) {
    int e = 0;
    for (unsigned i = 0; i < n && e >= 0; i++) {
        if (i >= j->n_started) {
            call_id(j->ids[i]);
            e = send_delta(j, -1, i, calls[i].name, "", 0);
            j->n_started = i + 1;
        }
        if (e >= 0 && !j->args_sent[i])
            e = send_delta(j, -1, i, NULL, calls[i].arguments, strlen(calls[i].arguments));
    }
    return e;
}

/* The end of a chat answer: what the split held back, then the held tool calls parsed
 * (*ret_n of them into calls), the text before them (or all of it, when nothing parses)
 * released with id -1. */
static int finish_answer(struct gen_job *j, struct engine_chat_parsed_call *calls,
                         size_t *ret_n) {
    *ret_n = 0;
    if (!j->split && !j->tools) return 0;
    char r[ENGINE_CHAT_SPLIT_EXTRA], a[ENGINE_CHAT_SPLIT_EXTRA];
    size_t nr = 0, na = 0;
    if (j->split) engine_chat_think_end(&j->think, r, &nr, a, &na);
    if (!j->tools) return nr || na ? send_event(j, -1, a, na, r, nr) : 0;
    int e = buf_append(&j->held, &j->n_held, &j->cap_held, a, na);
    if (e < 0) return e;
    if (j->in_calls && (e = scan_held(j, -1)) < 0) return e;
    size_t content = j->n_held;
    if (j->in_calls) {
        size_t cap = j->max_calls ? MIN(j->max_calls, TOOL_CALLS_MAX) : TOOL_CALLS_MAX;
        e = engine_chat_parse_tool_calls(j->fam, j->held, j->n_held, calls, cap, ret_n, &content);
        if (e < 0) return e;
    }
    if (*ret_n == 0) content = j->n_held; /* no call after all: it was text */
    return content || nr ? send_event(j, -1, j->held, content, r, nr) : 0;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of stop. */
static size_t partial_stop(const char *s, size_t n, const char *stop) {
    size_t ls = strlen(stop);
    for (size_t l = MIN(n, ls - 1); l > 0; l--)
        if (memcmp(s + n - l, stop, l) == 0) return l;
    return 0;
}

static bool job_token(struct runner_job *b, int32_t id, const char *text, size_t len) {
    struct gen_job *j = (struct gen_job *)b;
    if (j->vocab && !len && id >= 0 &&
        engine_vocab_token_type(j->vocab, id) == ENGINE_TOKEN_TYPE_CONTROL) {
        /* harmony's <|channel|>, <|message|>, <|end|>, ... carry its structure */
        const char *p = engine_vocab_piece_view(j->vocab, id, ENGINE_PIECE_SPECIAL, &len);
        text = p ? p : "";
        if (!p) len = 0;
    }
    size_t need;
    if (!size_add(j->n_pending, len, &need)) return false;
    if (need > j->cap_pending) {
        size_t cap = MAX(need, j->cap_pending * 2);
        char *p = realloc(j->pending, cap);
        if (!p) return false;
        j->pending = p;
        j->cap_pending = cap;
    }
    if (len) memcpy(j->pending + j->n_pending, text, len); /* pending is NULL until text */
    j->n_pending = need;
    size_t emit = j->n_pending, hold = 0;
    for (size_t k = 0; k < j->n_stop && j->n_pending; k++) {
        const char *hit = memmem(j->pending, j->n_pending, j->stop[k], strlen(j->stop[k]));
        if (hit && (size_t)(hit - j->pending) < emit) {
            emit = (size_t)(hit - j->pending);
            j->stop_hit = (int)k;
        }
    }
    if (j->stop_hit < 0)
        for (size_t k = 0; k < j->n_stop; k++)
            hold = MAX(hold, partial_stop(j->pending, j->n_pending, j->stop[k]));
    emit -= hold;
    int e = send_text(j, id, j->pending, emit);
    if (j->stop_hit >= 0) {
        j->n_pending = 0;
        return false;
    }
    if (j->n_pending > emit) memmove(j->pending, j->pending + emit, j->n_pending - emit);
    j->n_pending -= emit;
    return e >= 0;
}

/* Progress of a long prefill (Progress events, stage PREFILL). */
static void send_progress(struct rpc_call *c, Warm__V1__ProgressStage stage, uint64_t start_usec,
                          const struct runner_progress *p) {
    Warm__V1__Progress pr = WARM__V1__PROGRESS__INIT;
    pr.stage = stage;
    if (p) {
        pr.prompt_tokens = p->prompt_tokens;
        pr.done_tokens = p->done_tokens;
        pr.ram_tokens = p->ram_tokens;
        pr.store_tokens = p->store_tokens;
    }
    pr.elapsed_usec = time_now_usec() - start_usec;
    Warm__V1__GenerateEvent ev = WARM__V1__GENERATE_EVENT__INIT;
    ev.event_case = WARM__V1__GENERATE_EVENT__EVENT_PROGRESS;
    ev.progress = &pr;
    (void)rpc_call_send(c, &ev.base); /* a client gone is seen by job_cancelled */
}

static void job_progress(struct runner_job *b, const struct runner_progress *p) {
    struct gen_job *j = (struct gen_job *)b;
    send_progress(j->call, WARM__V1__PROGRESS_STAGE__PROGRESS_STAGE_PREFILL, j->start_usec, p);
}

static bool job_cancelled(struct runner_job *b) {
    return rpc_call_is_cancelled(((struct gen_job *)b)->call);
}

static const Warm__V1__StopReason stop_reasons[RUNNER_STOP_COUNT] = {
    [RUNNER_STOP_NONE] = WARM__V1__STOP_REASON__STOP_REASON_UNSPECIFIED,
    [RUNNER_STOP_MAX_TOKENS] = WARM__V1__STOP_REASON__STOP_REASON_MAX_TOKENS,
    [RUNNER_STOP_EOS] = WARM__V1__STOP_REASON__STOP_REASON_EOS,
    [RUNNER_STOP_CALLER] = WARM__V1__STOP_REASON__STOP_REASON_STOP_STRING,
    [RUNNER_STOP_CONTEXT_FULL] = WARM__V1__STOP_REASON__STOP_REASON_CONTEXT_FULL,
};

/* Short machine-readable reasons of refused cache records (RejectedEntry.reason). */
static const struct {
    int code;
    const char *reason;
} reject_reasons[] = {
    {ERR_STATE_BAD, "bad_blob"},        {ERR_STATE_VERSION, "state_version"},
    {ERR_STATE_MODEL, "model"},         {ERR_STATE_LAYOUT, "layout"},
    {ERR_STATE_KEY_TYPE, "key_type"},   {ERR_STATE_VALUE_TYPE, "value_type"},
    {ERR_STATE_KEY_ROT, "key_rotation"}, {ERR_STATE_VALUE_ROT, "value_rotation"},
    {ERR_STATE_TOKENS, "tokens"},       {ERR_STATE_CHECKSUM, "checksum"},
    {ERR_CHECKSUM, "checksum"},
};

static const char *reject_reason(int code) {
    for (size_t i = 0; i < ARRAY_SIZE(reject_reasons); i++)
        if (reject_reasons[i].code == code) return reject_reasons[i].reason;
    return "other";
}

static void job_done(struct runner_job *b, const struct runner_result *res, int err,
                     const char *msg) {
    struct gen_job *j = (struct gen_job *)b;
    /* the store-wide totals and the namespace's row (daemon/cache.h) */
    cache_metrics_request(j->d, j->base.ns, j->base.cache, res);
    if (err < 0) {
        grpc_status_code code = err == -ESHUTDOWN   ? GRPC_STATUS_UNAVAILABLE
                                : err == -ECANCELED ? GRPC_STATUS_CANCELLED
                                                    : rpc_status_from_err(err);
        rpc_call_finish(j->call, NULL, code, msg);
    } else {
        if (j->n_pending) send_text(j, -1, j->pending, j->n_pending);
        struct engine_chat_parsed_call calls[TOOL_CALLS_MAX];
        size_t n_calls = 0;
        /* a client gone is seen by the finish */
        if (finish_answer(j, calls, &n_calls) >= 0) (void)finish_deltas(j, calls, n_calls);
        Warm__V1__ToolCall tc[TOOL_CALLS_MAX], *tcp[TOOL_CALLS_MAX];
        for (size_t i = 0; i < n_calls; i++) {
            warm__v1__tool_call__init(&tc[i]);
            if (i >= j->n_started) call_id(j->ids[i]); /* finish_deltas did not get there */
            tc[i].id = j->ids[i];
            tc[i].name = calls[i].name;
            tc[i].arguments = calls[i].arguments;
            tcp[i] = &tc[i];
        }
        Warm__V1__Summary sum = WARM__V1__SUMMARY__INIT;
        sum.n_tool_calls = n_calls;
        sum.tool_calls = tcp;
        sum.prompt_tokens = res->prompt_tokens;
        sum.ram_tokens = res->ram_tokens;
        sum.store_tokens = res->store_tokens;
        sum.restore_usec = res->restore_usec;
        Warm__V1__RejectedEntry rej[RUNNER_MAX_REJECTED], *rejp[RUNNER_MAX_REJECTED];
        for (unsigned i = 0; i < res->n_rejected && i < RUNNER_MAX_REJECTED; i++) {
            warm__v1__rejected_entry__init(&rej[i]);
            rej[i].position = res->rejected[i].position;
            rej[i].reason = (char *)reject_reason(res->rejected[i].code);
            rej[i].message = (char *)res->rejected[i].msg;
            rejp[i] = &rej[i];
        }
        sum.n_rejected = MIN(res->n_rejected, (unsigned)RUNNER_MAX_REJECTED);
        sum.rejected = rejp;
        sum.evaluated_tokens = res->evaluated_tokens;
        sum.generated_tokens = res->generated_tokens;
        sum.stop_reason = n_calls ? WARM__V1__STOP_REASON__STOP_REASON_TOOL_CALLS
                                  : stop_reasons[res->stop < RUNNER_STOP_COUNT ? res->stop : 0];
        sum.stop_string = j->stop_hit >= 0 ? j->stop[j->stop_hit] : "";
        sum.queue_usec = res->queue_usec;
        sum.load_usec = j->load_usec;
        sum.prefill_usec = res->prefill_usec;
        sum.decode_usec = res->decode_usec;
        sum.total_usec = time_now_usec() - j->start_usec;
        sum.seed = j->seed;
        sum.keep_alive_usec = j->keep_alive_usec;
        char *warnings[2];
        sum.n_warnings = 0;
        if (*j->warning) warnings[sum.n_warnings++] = j->warning;
        if (*j->warning_ctx) warnings[sum.n_warnings++] = j->warning_ctx;
        sum.warnings = warnings;
        Warm__V1__GenerateEvent ev = WARM__V1__GENERATE_EVENT__INIT;
        ev.event_case = WARM__V1__GENERATE_EVENT__EVENT_SUMMARY;
        ev.summary = &sum;
        rpc_call_finish(j->call, &ev.base, GRPC_STATUS_OK, "");
        engine_chat_parsed_calls_free(calls, n_calls);
    }
    rpc_call_unref(j->call);
    job_free(j);
}

static const struct runner_job_ops gen_job_ops = {
    .token = job_token, .progress = job_progress, .cancelled = job_cancelled, .done = job_done,
};

/* The request's sampling (or the documented defaults) as engine parameters. */
static uint64_t sampling_params(const Warm__V1__Sampling *s, uint32_t n_ctx,
                                struct engine_sampler_params *p) {
    engine_sampler_params_default(p);
    if (!s) {
        p->temperature = 0.8f;
        p->top_k = 40;
        p->top_p = 0.95f;
        p->min_p = 0.05f;
    } else {
        p->temperature = s->temperature;
        p->top_k = s->top_k;
        p->top_p = s->top_p == 0 ? 1.0f : s->top_p;
        p->min_p = s->min_p;
        p->repeat_penalty = s->repeat_penalty == 0 ? 1.0f : s->repeat_penalty;
        p->frequency_penalty = s->frequency_penalty;
        p->presence_penalty = s->presence_penalty;
        p->penalty_last_n = s->repeat_last_n == 0    ? 64
                            : s->repeat_last_n == -1 ? (int32_t)n_ctx
                                                     : s->repeat_last_n;
        p->seed = s->seed;
    }
    while (p->seed == 0 && getrandom(&p->seed, sizeof p->seed, 0) != sizeof p->seed) {
    }
    return p->seed;
}

/* Tokenizes or copies the prompt; answers the call and returns < 0 on failure. */
static int prompt_tokens(struct rpc_call *c, const Warm__V1__GenerateRequest *q,
                         const struct engine_vocab *v, uint32_t cap, int32_t **ret,
                         size_t *ret_n) {
    int32_t n_vocab = engine_vocab_n_tokens(v);
    size_t n = 0;
    int32_t *ids = NULL;
    if (q->n_tokens) {
        for (size_t i = 0; i < q->n_tokens; i++) {
            if (q->tokens[i] >= n_vocab) {
                rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                              "tokens[%zu]: id %d is out of range [0, %d)", i,
                              (int)q->tokens[i], (int)n_vocab);
                return -EINVAL;
            }
        }
        n = q->n_tokens;
        ids = malloc_array(n, sizeof *ids);
        if (ids) memcpy(ids, q->tokens, n * sizeof *ids);
    } else {
        size_t len = strlen(q->prompt);
        int e = engine_vocab_tokenize(v, q->prompt, len, ENGINE_TOKENIZE_ADD_SPECIAL, NULL, 0, &n);
        if (e == -ENOSPC || (e == 0 && n == 0)) {
            ids = malloc_array(n + 1, sizeof *ids);
            e = !ids ? -ENOMEM
                : n  ? engine_vocab_tokenize(v, q->prompt, len, ENGINE_TOKENIZE_ADD_SPECIAL, ids,
                                             n, &n)
                     : 0;
        }
        if (e < 0) {
            free(ids);
            rpc_call_fail(c, rpc_status_from_err(e), "prompt: %s", err_str(e));
            return e;
        }
        if (n == 0 && engine_vocab_bos(v) >= 0) ids[n++] = engine_vocab_bos(v);
    }
    if (!ids) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the prompt");
        return -ENOMEM;
    }
    if (n == 0 || n > cap) {
        free(ids);
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "prompt: %zu tokens; it must have 1..%u", n, cap);
        return -EINVAL;
    }
    *ret = ids;
    *ret_n = n;
    return 0;
}

/* The request's messages as the engine's (their strings borrowed from q); *ret_calls holds
 * every message's tool calls. */
static int chat_messages(const Warm__V1__ChatRequest *q, struct engine_chat_msg **ret,
                         struct engine_chat_tool_call **ret_calls) {
    size_t n_calls = 0;
    for (size_t i = 0; i < q->n_messages; i++) n_calls += q->messages[i]->n_tool_calls;
    struct engine_chat_msg *msgs = calloc_array(q->n_messages, sizeof *msgs);
    struct engine_chat_tool_call *calls = calloc_array(MAX(n_calls, 1), sizeof *calls);
    if (!msgs || !calls) {
        free(msgs);
        free(calls);
        return -ENOMEM;
    }
    struct engine_chat_tool_call *c = calls;
    for (size_t i = 0; i < q->n_messages; i++) {
        const Warm__V1__ChatMessage *m = q->messages[i];
        (void)engine_chat_role_parse(m->role, &msgs[i].role); /* checked before */
        msgs[i].content = m->content;
        msgs[i].len = strlen(m->content);
        if (*m->reasoning) {
            msgs[i].reasoning = m->reasoning;
            msgs[i].reasoning_len = strlen(m->reasoning);
        }
        msgs[i].tool_calls = m->n_tool_calls ? c : NULL;
        msgs[i].n_tool_calls = m->n_tool_calls;
        if (!strcmp(m->role, "tool")) { /* the function it answers (gemma4 writes it) */
            const char *name = *m->name ? m->name : NULL;
            size_t a = i;
            while (a > 0 && !strcmp(q->messages[a - 1]->role, "tool")) a--;
            for (size_t k = 0; a > 0 && k < q->messages[a - 1]->n_tool_calls; k++) {
                const Warm__V1__ToolCall *t = q->messages[a - 1]->tool_calls[k];
                if (!strcmp(t->id, m->tool_call_id)) name = t->name;
            }
            msgs[i].tool_name = name;
            msgs[i].tool_name_len = name ? strlen(name) : 0;
        }
        for (size_t k = 0; k < m->n_tool_calls; k++, c++) {
            const Warm__V1__ToolCall *t = m->tool_calls[k];
            *c = (struct engine_chat_tool_call){
                .name = t->name, .name_len = strlen(t->name),
                .arguments = *t->arguments ? t->arguments : NULL,
                .arguments_len = strlen(t->arguments)};
        }
    }
    *ret = msgs;
    *ret_calls = calls;
    return 0;
}

/* The grammar of a call tool_choice forces (REQUIRED, FUNCTION) in j->grammar. */
static int tool_grammar(struct rpc_call *c, const Warm__V1__ChatRequest *q,
                        const struct resident *res, struct gen_job *j) {
    struct err_detail d = {0};
    char *text = NULL;
    bool named = q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION;
    int r = engine_chat_tool_grammar(j->fam, q->tools_json, strlen(q->tools_json),
                                     named ? q->tool_choice_name : NULL,
                                     named || q->max_tool_calls == 1 ? 1 : 0, &text, &d);
    if (r >= 0) r = engine_grammar_parse(text, strlen(text), &j->grammar, &d);
    free(text);
    if (r < 0) {
        rpc_call_fail(c, r == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                      : GRPC_STATUS_INVALID_ARGUMENT,
                      "model %s (%s template): %s", res->name, engine_chat_family_name(j->fam),
                      err_msg(&d, r));
        return r;
    }
    j->base.grammar = j->grammar;
    return 0;
}

/* Renders the conversation with the model's built-in chat template (engine/chat.h: the
 * template is only inspected for its family, never executed) into prompt tokens, with its
 * tools and thinking; sets up j's answer split and tool calls. */
static int chat_prompt_tokens(struct rpc_call *c, const Warm__V1__ChatRequest *q,
                              const struct resident *res, uint32_t cap, struct gen_job *j,
                              size_t *ret_n) {
    const struct engine_vocab *v = runner_vocab(res->runner);
    enum engine_chat_family fam =
        engine_chat_detect_gguf(engine_model_gguf(runner_model(res->runner)));
    if (fam == ENGINE_CHAT_NONE) {
        rpc_call_fail(c, GRPC_STATUS_FAILED_PRECONDITION,
                      "model %s has no supported chat template (recognised: %s); complete a "
                      "plain prompt instead",
                      res->name, engine_chat_family_list());
        return -ENOENT;
    }
    j->fam = fam;
    bool forced = q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_REQUIRED ||
                  q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION;
    bool use_tools = *q->tools_json && q->tool_choice != WARM__V1__TOOL_CHOICE__TOOL_CHOICE_NONE;
    if (use_tools && !engine_chat_has_tools(fam) && strcmp(q->tools_json, "[]") != 0) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "model %s does not support tools: its %s chat template has no tool format "
                      "(tools work with the chatml, qwen3, qwen35, llama31, gemma4 and harmony "
                      "families)",
                      res->name, engine_chat_family_name(fam));
        return -EINVAL;
    }
    /* THINK_LOW..HIGH: an effort where the family has levels, thinking on where it thinks,
     * nothing where it does not (OpenAI clients send an effort to every model) */
    bool level = q->think == WARM__V1__THINK__THINK_LOW ||
                 q->think == WARM__V1__THINK__THINK_MEDIUM || q->think == WARM__V1__THINK__THINK_HIGH;
    bool think_on = q->think == WARM__V1__THINK__THINK_ON || (level && engine_chat_thinks(fam));
    if (think_on && !engine_chat_thinks(fam)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "model %s does not support thinking: its %s chat template has no "
                      "reasoning block (thinking works with the qwen3, qwen35 and harmony "
                      "families)",
                      res->name, engine_chat_family_name(fam));
        return -EINVAL;
    }
    struct engine_chat_opts opts = {0};
    if (q->think == WARM__V1__THINK__THINK_LOW) opts.effort = ENGINE_CHAT_EFFORT_LOW;
    if (q->think == WARM__V1__THINK__THINK_MEDIUM) opts.effort = ENGINE_CHAT_EFFORT_MEDIUM;
    if (q->think == WARM__V1__THINK__THINK_HIGH) opts.effort = ENGINE_CHAT_EFFORT_HIGH;
    if (forced && q->think == WARM__V1__THINK__THINK_ON) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "think: on cannot be used with a forced tool call (tool_choice required "
                      "or a named function): the reply is the call alone");
        return -EINVAL;
    }
    if (forced && tool_grammar(c, q, res, j) < 0) return -EINVAL;
    struct engine_chat_msg *msgs;
    struct engine_chat_tool_call *calls;
    if (chat_messages(q, &msgs, &calls) < 0) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the messages");
        return -ENOMEM;
    }
    unsigned flags = q->continue_last ? ENGINE_CHAT_CONTINUE_LAST : ENGINE_CHAT_ADD_GENERATION_PROMPT;
    if (q->think == WARM__V1__THINK__THINK_OFF || forced) flags |= ENGINE_CHAT_NO_THINKING;
    opts.tools = (struct engine_chat_tools){.json = use_tools ? q->tools_json : NULL,
                                            .len = use_tools ? strlen(q->tools_json) : 0};
    struct err_detail e = {0};
    size_t n = 0;
    int r = engine_chat_tokenize_opts(fam, v, msgs, q->n_messages, &opts, flags, &j->prompt, &n,
                                      &e);
    free(msgs);
    free(calls);
    if (r < 0) {
        grpc_status_code code = r == -EINVAL     ? GRPC_STATUS_INVALID_ARGUMENT
                                : r == ERR_VOCAB ? GRPC_STATUS_FAILED_PRECONDITION
                                                 : rpc_status_from_err(r);
        rpc_call_fail(c, code, "model %s (%s template): %s", res->name,
                      engine_chat_family_name(fam), err_msg(&e, r));
        return r;
    }
    if (n == 0 || n > cap) {
        /* j->prompt is freed again by job_free: never leave it dangling */
        free(j->prompt);
        j->prompt = NULL;
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "messages: the rendered conversation is %zu tokens; it must have 1..%u", n, cap);
        return -EINVAL;
    }
    /* A continued message may be anywhere in its think block: it is all answer then. */
    j->split = engine_chat_thinks(fam) && !q->continue_last;
    engine_chat_think_begin(&j->think, fam, flags);
    engine_chat_scan_begin(&j->scan, fam);
    j->tools = use_tools && engine_chat_has_tools(fam);
    /* harmony's channels and Gemma 4's calls are control tokens: read as their text */
    if (engine_chat_has_effort(fam) || (j->tools && fam == ENGINE_CHAT_GEMMA4)) j->vocab = v;
    j->max_calls = q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION ? 1
                                                                             : q->max_tool_calls;
    *ret_n = n;
    return 0;
}

/* What Generate and Chat share: everything but where the prompt comes from. */
struct gen_args {
    const char *model;
    uint64_t keep_alive_usec;
    bool unload_after;
    uint32_t max_tokens;
    const Warm__V1__Sampling *sampling;
    char **stop;
    size_t n_stop;
    const Warm__V1__CacheOptions *cache;
    const Warm__V1__OutputFormat *format;
    const Warm__V1__GenerateRequest *generate; /* exactly one of these two */
    const Warm__V1__ChatRequest *chat;
};

/* "2h", "90m", "45s", "1.5s": the largest unit that divides it, as in warmd.conf. */
static const char *fmt_duration(char buf[32], uint64_t usec) {
    static const struct {
        uint64_t usec;
        const char *unit;
    } units[] = {{86400000000ULL, "d"}, {3600000000ULL, "h"}, {60000000ULL, "m"},
                 {1000000ULL, "s"}};
    for (size_t i = 0; i < ARRAY_SIZE(units); i++)
        if (usec >= units[i].usec && usec % units[i].usec == 0) {
            snprintf(buf, 32, "%llu%s", (unsigned long long)(usec / units[i].usec), units[i].unit);
            return buf;
        }
    snprintf(buf, 32, "%.3gs", (double)usec / 1e6);
    return buf;
}

/* Keep-alive as Ollama's, for the caller's own lease on the model: 0 = the server's
 * default, UINT64_MAX = as long as the server allows, unload_after = until the request
 * ends; more than max_keep_alive is capped and the summary says so. Returns the value to
 * acquire the model with (0 leaves the caller's lease as it is, or gives a new one the
 * server's keep_alive). */
static uint64_t keep_alive_want(const struct config *cfg, const struct gen_args *q, char *warning,
                                size_t n_warning) {
    uint64_t want = q->keep_alive_usec;
    if (q->unload_after || want == 0) return 0;
    if (want == UINT64_MAX) return cfg->max_keep_alive_usec;
    if (want > cfg->max_keep_alive_usec) {
        char a[32], b[32];
        snprintf(warning, n_warning,
                 "keep_alive %s is more than the server's max_keep_alive (%s): the model stays "
                 "loaded %s after its last use", fmt_duration(a, want),
                 fmt_duration(b, cfg->max_keep_alive_usec), b);
    }
    return MIN(want, cfg->max_keep_alive_usec);
}

static void generate_start(struct rpc_call *c, const struct gen_args *q) {
    struct daemon *d = rpc_call_daemon(c);
    uint64_t start = time_now_usec(), load_usec = 0;
    char warning[256] = "";
    uint64_t keep_alive = keep_alive_want(&d->config, q, warning, sizeof warning);
    /* The output format is compiled before a model is resolved or loaded for it. */
    struct engine_grammar *grammar;
    if (format_compile(c, q->format, &grammar) < 0) return;
    /* A model that has to be loaded first: say so before the wait. */
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) {
        engine_grammar_free(grammar);
        return;
    }
    struct residency_info ri;
    residency_info(d, m.name, &ri);
    if (!ri.loaded)
        send_progress(c, WARM__V1__PROGRESS_STAGE__PROGRESS_STAGE_LOAD, start, NULL);
    struct resident *res;
    uint32_t uid = rpc_call_peer(c)->uid;
    if (rpc_model_acquire(c, m.name, uid, keep_alive, &res, &load_usec) < 0) {
        engine_grammar_free(grammar);
        return;
    }
    if (runner_embedder(res->runner)) {
        rpc_call_fail(c, GRPC_STATUS_FAILED_PRECONDITION,
                      "model '%s' is an embedding model: it does not generate text (use Embed)",
                      res->name);
        engine_grammar_free(grammar);
        residency_release(d, res);
        return;
    }
    struct gen_job *j = calloc(1, sizeof *j);
    if (!j) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        engine_grammar_free(grammar);
        residency_release(d, res);
        return;
    }
    j->grammar = grammar;
    /* unload_after ends the caller's lease only: the next tick unloads the model once it
     * is idle (no request holds it or runs on it) and no other user's lease holds it */
    if (q->unload_after) residency_lease_end(d, res, uid);
    j->keep_alive_usec = residency_lease_get(d, res, uid);
    snprintf(j->warning, sizeof j->warning, "%s", warning);
    if (*warning)
        log_info("uid %u, model '%s': %s", rpc_call_peer(c)->uid, res->name, warning);
    j->d = d;
    j->call = c;
    j->stop_hit = -1;
    j->start_usec = start;
    j->load_usec = load_usec;
    uint32_t n_ctx = runner_n_ctx(res->runner);
    uint32_t cap = MIN(prompt_token_cap(&d->config), n_ctx);
    size_t n_prompt = 0;
    int pr = q->chat ? chat_prompt_tokens(c, q->chat, res, cap, j, &n_prompt)
                     : prompt_tokens(c, q->generate, runner_vocab(res->runner), cap, &j->prompt,
                                     &n_prompt);
    if (pr < 0) {
        job_free(j);
        residency_release(d, res);
        return;
    }
    /* Only with ctx_above_trained can a prompt be longer than the model was trained for:
     * it is served, and the caller and the log hear that quality drops past that point. */
    uint32_t trained = runner_model(res->runner)->hp.n_ctx_train;
    if (trained && n_prompt > trained) {
        snprintf(j->warning_ctx, sizeof j->warning_ctx, "the prompt is %zu tokens, past the "
                 "trained context of %u tokens of model '%s'; output may degrade", n_prompt,
                 trained, res->name);
        log_warn("uid %u: %s", rpc_call_peer(c)->uid, j->warning_ctx);
    }
    j->stop = q->n_stop ? calloc_array(q->n_stop, sizeof *j->stop) : NULL;
    for (size_t i = 0; j->stop && i < q->n_stop; i++, j->n_stop++)
        if (!(j->stop[i] = strdup(q->stop[i]))) break;
    if (q->n_stop && j->n_stop != q->n_stop) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        job_free(j);
        residency_release(d, res);
        return;
    }
    j->base.ops = &gen_job_ops;
    j->base.prompt = j->prompt;
    j->base.n_prompt = n_prompt;
    j->base.max_tokens = q->max_tokens;
    j->base.grammar = j->grammar;
    j->seed = sampling_params(q->sampling, n_ctx, &j->base.sampling);
    /* The store namespace: the request's (checked by cache_check) or the caller's. */
    j->base.cache = !q->cache ? RUNNER_CACHE_USE
                    : q->cache->mode == WARM__V1__CACHE_MODE__CACHE_MODE_SKIP ? RUNNER_CACHE_SKIP
                    : q->cache->mode == WARM__V1__CACHE_MODE__CACHE_MODE_REFRESH
                        ? RUNNER_CACHE_REFRESH
                        : RUNNER_CACHE_USE;
    if (q->cache && *q->cache->namespace_)
        snprintf(j->base.ns, sizeof j->base.ns, "%s", q->cache->namespace_);
    else
        snprintf(j->base.ns, sizeof j->base.ns, "uid:%u", rpc_call_peer(c)->uid);
    j->base.uid = rpc_call_peer(c)->uid;
    rpc_call_ref(c);
    int e = runner_submit(res->runner, &j->base);
    if (e < 0) {
        rpc_call_unref(c);
        if (e == -EAGAIN)
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "model '%s' has %u requests waiting; try again later", res->name,
                          16 * d->config.parallel);
        else if (e == -EDQUOT)
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "uid %u has %u requests queued or running on model '%s' "
                          "(max_queued_per_uid); try again when one ends",
                          rpc_call_peer(c)->uid, runner_max_jobs_per_uid(res->runner), res->name);
        else
            rpc_call_fail(c, GRPC_STATUS_UNAVAILABLE, "model '%s' is being unloaded", res->name);
        job_free(j);
    }
    residency_release(d, res);
}

void rpc_generate_generate(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__GenerateRequest *q = (const Warm__V1__GenerateRequest *)req;
    const struct config *cfg = &rpc_call_daemon(c)->config;
    size_t plen = strlen(q->prompt);
    uint32_t cap = prompt_token_cap(cfg);
    if ((plen == 0) == (q->n_tokens == 0)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "exactly one of prompt and tokens must be set (prompt %zu bytes, %zu tokens)",
                      plen, q->n_tokens);
        return;
    }
    if (plen > (size_t)cap * 16) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "prompt: %zu bytes is more than %u tokens can hold", plen, cap);
        return;
    }
    if (!rpc_utf8_valid(q->prompt, plen)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "prompt: not valid UTF-8");
        return;
    }
    if (q->n_tokens > cap) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens: %zu tokens, at most %u",
                      q->n_tokens, cap);
        return;
    }
    for (size_t i = 0; i < q->n_tokens; i++) {
        if (q->tokens[i] < 0) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens[%zu]: id %d is negative", i,
                          (int)q->tokens[i]);
            return;
        }
    }
    if (q->max_tokens > cfg->ctx_size) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "max_tokens: %u is more than ctx_size %u",
                      q->max_tokens, cfg->ctx_size);
        return;
    }
    if (sampling_check(c, q->sampling) < 0 || stop_check(c, q->stop, q->n_stop) < 0 ||
        cache_check(c, q->cache) < 0)
        return;
    generate_start(c, &(struct gen_args){
        .model = q->model, .keep_alive_usec = q->keep_alive_usec,
        .unload_after = q->unload_after, .max_tokens = q->max_tokens,
        .sampling = q->sampling, .stop = q->stop, .n_stop = q->n_stop, .cache = q->cache,
        .format = q->format, .generate = q});
}

void rpc_generate_chat(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__ChatRequest *q = (const Warm__V1__ChatRequest *)req;
    const struct config *cfg = &rpc_call_daemon(c)->config;
    if (q->n_messages == 0 || q->n_messages > CHAT_MAX_MESSAGES) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "messages: %zu messages, need 1..%d",
                      q->n_messages, CHAT_MAX_MESSAGES);
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < q->n_messages; i++) {
        const Warm__V1__ChatMessage *m = q->messages[i];
        enum engine_chat_role role;
        if (engine_chat_role_parse(m->role, &role) < 0) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "messages[%zu].role: must be system, user, assistant or tool", i);
            return;
        }
        const struct {
            const char *name, *text;
        } texts[] = {{"content", m->content}, {"reasoning", m->reasoning},
                     {"tool_call_id", m->tool_call_id}, {"name", m->name}};
        for (size_t k = 0; k < ARRAY_SIZE(texts); k++) {
            size_t len = strlen(texts[k].text);
            if (!rpc_utf8_valid(texts[k].text, len)) {
                rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "messages[%zu].%s: not valid UTF-8",
                              i, texts[k].name);
                return;
            }
            total += len;
        }
        if (m->n_tool_calls && role != ENGINE_CHAT_ASSISTANT) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "messages[%zu].tool_calls: only assistant messages make tool calls", i);
            return;
        }
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            const Warm__V1__ToolCall *t = m->tool_calls[k];
            size_t nn = strlen(t->name), na = strlen(t->arguments);
            if (nn == 0 || !rpc_utf8_valid(t->name, nn) || !rpc_utf8_valid(t->arguments, na)) {
                rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                              "messages[%zu].tool_calls[%zu]: the name must be set and the name "
                              "and arguments valid UTF-8", i, k);
                return;
            }
            total += nn + na;
        }
    }
    size_t tools_len = strlen(q->tools_json);
    if (tools_len > TOOLS_MAX_BYTES || !rpc_utf8_valid(q->tools_json, tools_len)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "tools_json: %zu bytes; it must be at most %d bytes of UTF-8", tools_len,
                      TOOLS_MAX_BYTES);
        return;
    }
    bool forced = q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_REQUIRED ||
                  q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION;
    const char *bad = NULL;
    if ((unsigned)q->tool_choice > WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION)
        bad = "tool_choice: unknown value";
    else if ((unsigned)q->think > WARM__V1__THINK__THINK_HIGH)
        bad = "think: unknown value";
    else if (forced && (!tools_len || strcmp(q->tools_json, "[]") == 0))
        bad = "tool_choice: a required or named tool call needs tools_json";
    else if ((q->tool_choice == WARM__V1__TOOL_CHOICE__TOOL_CHOICE_FUNCTION) !=
             (*q->tool_choice_name != '\0'))
        bad = "tool_choice_name: set it exactly when tool_choice is TOOL_CHOICE_FUNCTION";
    else if (forced && q->format)
        bad = "format: cannot be used with a required or named tool call (the call's "
              "arguments follow the tool's parameters)";
    if (bad) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", bad);
        return;
    }
    uint32_t cap = prompt_token_cap(cfg);
    if (total > (size_t)cap * 16) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "messages: %zu bytes of content is more than %u tokens can hold", total, cap);
        return;
    }
    if (q->max_tokens > cfg->ctx_size) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "max_tokens: %u is more than ctx_size %u",
                      q->max_tokens, cfg->ctx_size);
        return;
    }
    if (sampling_check(c, q->sampling) < 0 || stop_check(c, q->stop, q->n_stop) < 0 ||
        cache_check(c, q->cache) < 0)
        return;
    generate_start(c, &(struct gen_args){
        .model = q->model, .keep_alive_usec = q->keep_alive_usec,
        .unload_after = q->unload_after, .max_tokens = q->max_tokens,
        .sampling = q->sampling, .stop = q->stop, .n_stop = q->n_stop, .cache = q->cache,
        .format = q->format, .chat = q});
}
