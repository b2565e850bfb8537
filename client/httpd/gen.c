/* gen — one generation for one HTTP request. libwarm's generate and chat are synchronous
 * with a per-token callback, and libmicrohttpd pulls a streamed body through a reader
 * callback on the connection's thread, so the call runs on a thread of its own and the two
 * meet in struct gen_job: the generation appends formatted bytes (SSE events, NDJSON
 * lines) under the lock, the reader takes them. The generation waits when more than
 * OUT_MAX bytes are unsent (a client that stops reading holds no more than that; the
 * connection timeout closes it), and the reader waits for bytes in slices of WAIT_MSEC,
 * looking each time whether the client hung up.
 *
 * Cancellation: when the client goes away (a failed write ends the response, or its socket
 * reports a hang-up while we wait), the job's cancel flag is set; libwarm sees it at the
 * next token or within 50 ms and cancels the call, so warmd stops generating for nobody. */
#include "httpd.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define OUT_MAX (256 * 1024)
#define WAIT_MSEC 100
#define STREAM_BLOCK 16384

const char *finish_reason(enum warm_stop_reason s) {
    return s == WARM_STOP_MAX_TOKENS || s == WARM_STOP_CONTEXT_FULL ? "length"
           : s == WARM_STOP_TOOL_CALLS                              ? "tool_calls"
                                                                    : "stop";
}

uint32_t cached_tokens(const struct warm_summary *s) {
    return s->ram_tokens + s->store_tokens;
}

void make_id(char *dst, size_t size, const char *prefix) {
    uint8_t b[12];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        uint64_t t = time_wall_usec() ^ ((uint64_t)(uintptr_t)dst << 16);
        memcpy(b, &t, sizeof t);
        memcpy(b + 8, &t, 4);
    }
    int n = snprintf(dst, size, "%s", prefix);
    for (size_t i = 0; i < sizeof b && n > 0 && (size_t)n + 2 < size; i++, n += 2)
        snprintf(dst + n, size - (size_t)n, "%02x", b[i]);
}

static int on_reasoning(int32_t id, const char *text, size_t len, void *userdata);

struct gen_job *gen_job_new(struct request *r, const struct gen_ops *ops, enum api api) {
    struct gen_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->ops = ops;
    j->h = r->h;
    j->api = api;
    j->body = json_incref(r->json);
    j->created = (int64_t)(time_wall_usec() / 1000000);
    j->sampling = warm_sampling_default();
    j->params.sampling = &j->sampling;
    j->params.stop = j->stop;
    j->params.cancel = &j->cancel;
    j->params.on_reasoning = on_reasoning;
    /* As Ollama: a request without keep_alive gets the default, never the previous
     * request's (warmd's 0 would keep the user's lease as that one left it). */
    j->params.keep_alive_usec = r->h->cfg.keep_alive_usec;
    j->client_fd = r->ci ? r->ci->fd : -1;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    return j;
}

void gen_job_free(struct gen_job *j) {
    if (!j) return;
    if (j->running) {
        pthread_mutex_lock(&j->lock);
        j->cancel = 1;
        pthread_cond_broadcast(&j->cond);
        pthread_mutex_unlock(&j->lock);
        pthread_join(j->thread, NULL);
    }
    if (j->finished && j->rc >= 0) warm_summary_done(&j->summary);
    clients_put(&j->h->clients, j->client);
    json_decref(j->body);
    for (size_t i = 0; i < j->n_strings; i++) free(j->strings[i]);
    free(j->strings);
    free(j->msgs);
    free(j->tokens);
    free(j->text);
    free(j->reasoning);
    free(j->call_args);
    free(j->calls);
    free(j->out);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

char *gen_job_keep(struct gen_job *j, char *text) {
    if (!text) return NULL;
    char **s = realloc(j->strings, (j->n_strings + 1) * sizeof *s);
    if (!s) {
        free(text);
        return NULL;
    }
    j->strings = s;
    j->strings[j->n_strings++] = text;
    return text;
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t n = MAX(need, *cap ? 2 * *cap : 4096);
    char *b = realloc(*buf, n);
    if (!b) return -ENOMEM;
    *buf = b;
    *cap = n;
    return 0;
}

int gen_emit(struct gen_job *j, const char *data, size_t len) {
    if (j->out_off == j->out_len) j->out_off = j->out_len = 0;
    if (grow(&j->out, &j->out_cap, j->out_len + len) < 0) return -ENOMEM;
    memcpy(j->out + j->out_len, data, len);
    j->out_len += len;
    pthread_cond_broadcast(&j->cond);
    return 0;
}

int gen_emit_json(struct gen_job *j, json_t *doc, bool sse) {
    if (!doc) return -ENOMEM;
    char *s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!s) return -ENOMEM;
    int r = 0;
    if (sse) r = gen_emit(j, "data: ", 6);
    if (r >= 0) r = gen_emit(j, s, strlen(s));
    if (r >= 0) r = gen_emit(j, sse ? "\n\n" : "\n", sse ? 2 : 1);
    free(s);
    return r;
}

/* ---- the generation thread ----------------------------------------------------------------- */

static int on_reasoning(int32_t id, const char *text, size_t len, void *userdata) {
    (void)id;
    struct gen_job *j = userdata;
    pthread_mutex_lock(&j->lock);
    int r = 0;
    if (j->stream) {
        if (j->ops->thinking) r = j->ops->thinking(j, text, len);
    } else {
        r = grow(&j->reasoning, &j->reasoning_cap, j->reasoning_len + len + 1);
        if (r >= 0) {
            memcpy(j->reasoning + j->reasoning_len, text, len);
            j->reasoning_len += len;
            j->reasoning[j->reasoning_len] = '\0';
        }
    }
    bool stop = j->cancel || r < 0;
    pthread_mutex_unlock(&j->lock);
    return stop;
}

static int on_token(int32_t id, const char *text, size_t len, void *userdata) {
    (void)id;
    struct gen_job *j = userdata;
    pthread_mutex_lock(&j->lock);
    int r = 0;
    if (j->stream) {
        if (len || !j->head_sent) r = j->ops->piece(j, text, len);
        /* Backpressure: a client that does not read holds at most OUT_MAX bytes. */
        while (r >= 0 && !j->cancel && j->out_len - j->out_off > OUT_MAX)
            pthread_cond_wait(&j->cond, &j->lock);
    } else {
        r = grow(&j->text, &j->text_cap, j->text_len + len + 1);
        if (r >= 0) {
            memcpy(j->text + j->text_len, text, len);
            j->text_len += len;
            j->text[j->text_len] = '\0';
        }
    }
    j->started = true;
    pthread_cond_broadcast(&j->cond);
    bool stop = j->cancel || r < 0;
    pthread_mutex_unlock(&j->lock);
    return stop;
}

/* A piece of a tool call: the API streams it, then j keeps the call's id, name and
 * arguments so far (so when a call's first piece comes, j still describes the one before,
 * for the APIs that close it with its whole arguments). */
static int on_tool_call(const struct warm_tool_call_delta *d, void *userdata) {
    struct gen_job *j = userdata;
    pthread_mutex_lock(&j->lock);
    int r = j->ops->tool_call(j, d);
    if (r >= 0 && d->name) {
        snprintf(j->call_id, sizeof j->call_id, "%s", d->id ? d->id : "");
        snprintf(j->call_name, sizeof j->call_name, "%s", d->name);
        j->call_args_len = 0;
        j->n_calls_streamed = d->index + 1;
    }
    if (r >= 0) r = grow(&j->call_args, &j->call_args_cap, j->call_args_len + d->len + 1);
    if (r >= 0) {
        memcpy(j->call_args + j->call_args_len, d->arguments, d->len);
        j->call_args_len += d->len;
        j->call_args[j->call_args_len] = '\0';
    }
    while (r >= 0 && !j->cancel && j->out_len - j->out_off > OUT_MAX)
        pthread_cond_wait(&j->cond, &j->lock);
    j->started = true;
    pthread_cond_broadcast(&j->cond);
    bool stop = j->cancel || r < 0;
    pthread_mutex_unlock(&j->lock);
    return stop;
}

/* One call as the job asks for it: chat, or generate (also a chat refused for want of a
 * template, when plain_fallback allows it), with the job's params except max_tokens. */
static int call_once(struct gen_job *j, uint32_t max_tokens, warm_token_fn on, void *userdata,
                     struct warm_summary *ret) {
    struct warm_client *c = client_ref_client(j->client);
    struct warm_gen_params p = j->params;
    p.max_tokens = max_tokens;
    if (j->stream && j->ops->tool_call && on) p.on_tool_call = on_tool_call;
    if (j->chat) {
        int r = warm_chat(c, &p, j->msgs, j->n_msgs, 0, on, userdata, ret, &j->err);
        /* A base model has no chat template: Ollama's /api/generate then completes the
         * prompt as it is, and so do we (nothing was sent yet). */
        if (r != -WARM_FAILED_PRECONDITION || !j->plain_fallback || j->started) return r;
        log_debug("no chat template (%s): completing the prompt as text", j->err.message);
        p.think = WARM_THINK_DEFAULT; /* a plain completion has no template to think in */
        p.tools_json = NULL;
        p.tool_choice = WARM_TOOLS_AUTO;
    }
    return warm_generate(c, &p, j->tokens ? NULL : j->prompt, j->tokens, j->n_tokens, on,
                         userdata, ret, &j->err);
}

/* options.num_ctx, as Ollama's context size for this request: warmd's context per sequence
 * is the administrator's (ctx_size), so a num_ctx at or above the model's is that context
 * (Ollama too clamps num_ctx to what the model has). A smaller one bounds prompt plus
 * output: the prompt's length is what a one-token call reports (its prompt stays in RAM
 * for the real call), a prompt that fills num_ctx is refused, and the output stops
 * ("length") where the context would be full. */
static int fit_num_ctx(struct gen_job *j) {
    struct warm_model_details *d;
    int r = warm_model_show(client_ref_client(j->client), j->params.model, &d, &j->err);
    if (r < 0) return r;
    uint32_t model_ctx = d->ctx_size;
    warm_free(d);
    if (!model_ctx || j->num_ctx >= model_ctx) return 0;
    struct warm_summary s;
    bool unload_after = j->params.unload_after;
    j->params.unload_after = false;  /* the model must stay for the real call */
    r = call_once(j, 1, NULL, NULL, &s);
    j->params.unload_after = unload_after;
    if (r < 0) return r;
    uint32_t prompt = s.prompt_tokens;
    warm_summary_done(&s);
    if (prompt >= j->num_ctx) {
        j->err.code = WARM_INVALID_ARGUMENT;
        snprintf(j->err.message, sizeof j->err.message,
                 "the prompt is %u tokens, which leaves no room in options.num_ctx %u; raise "
                 "num_ctx (model '%s' has %u) or send less", prompt, j->num_ctx, j->model,
                 model_ctx);
        return -WARM_INVALID_ARGUMENT;
    }
    uint32_t room = j->num_ctx - prompt;
    j->params.max_tokens = j->params.max_tokens ? MIN(j->params.max_tokens, room) : room;
    return 0;
}

/* /api/generate renders its prompt as a one-message chat: warmd's errors about that
 * conversation are about the request's prompt. */
static void error_as_prompt(struct warm_error *e) {
    static const char msgs[] = "messages: ", conv[] = "the rendered conversation";
    if (strncmp(e->message, msgs, sizeof msgs - 1) != 0) return;
    char text[sizeof e->message];
    const char *rest = e->message + sizeof msgs - 1;
    const char *c = strstr(rest, conv);
    if (c)
        snprintf(text, sizeof text, "prompt: %.*sthe prompt in the model's template%s",
                 (int)(c - rest), rest, c + sizeof conv - 1);
    else
        snprintf(text, sizeof text, "prompt: %s", rest);
    snprintf(e->message, sizeof e->message, "%s", text);
}

/* warmd names the request's format in its errors ("format.json_schema: unsupported keyword
 * 'pattern' at /properties/zip"): the API's field takes its place, and the reply names it. */
static void error_as_format(struct gen_job *j) {
    static const char *const fields[] = {"format.json_schema: ", "format.grammar: "};
    struct warm_error *e = &j->err;
    for (size_t i = 0; j->format_param && i < ARRAY_SIZE(fields); i++) {
        size_t n = strlen(fields[i]);
        if (strncmp(e->message, fields[i], n) != 0) continue;
        char text[sizeof e->message];
        snprintf(text, sizeof text, "%s: %s", j->format_param, e->message + n);
        snprintf(e->message, sizeof e->message, "%s", text);
        j->format_error = true;
        return;
    }
}

static int run_call(struct gen_job *j) {
    j->params.n_stop = 0;
    while (j->params.n_stop < HTTPD_MAX_STOP && j->stop[j->params.n_stop]) j->params.n_stop++;
    if (j->num_ctx) {
        int r = fit_num_ctx(j);
        if (r < 0) return r;
    }
    return call_once(j, j->params.max_tokens, on_token, j, &j->summary);
}

static void *job_thread(void *p) {
    struct gen_job *j = p;
    int r = run_call(j);
    if (r < 0 && j->plain_fallback) error_as_prompt(&j->err);
    if (r < 0) error_as_format(j);
    pthread_mutex_lock(&j->lock);
    j->rc = r;
    /* Once a token is out, so is the status line: an error then travels in the stream. */
    if (j->stream && r >= 0) j->ops->end(j);
    else if (j->stream && j->started && !j->cancel) j->ops->error(j);
    j->finished = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* True when the HTTP client closed its end or its connection broke. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits (lock held) one slice for the job's condition to change; false when the client hung
 * up meanwhile (then the job is cancelled). */
static bool wait_slice(struct gen_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_MSEC * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (pthread_cond_timedwait(&j->cond, &j->lock, &ts) != ETIMEDOUT) return true;
    if (!client_gone(j->client_fd) && !atomic_load(&j->h->stopping)) return true;
    j->cancel = 1;
    pthread_cond_broadcast(&j->cond);
    return false;
}

/* ---- the streamed reply ---------------------------------------------------------------------- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct gen_job *j = cls;
    pthread_mutex_lock(&j->lock);
    for (;;) {
        if (j->out_off < j->out_len) {
            size_t n = MIN(max, j->out_len - j->out_off);
            memcpy(buf, j->out + j->out_off, n);
            j->out_off += n;
            pthread_cond_broadcast(&j->cond);   /* room for the generation */
            pthread_mutex_unlock(&j->lock);
            return (ssize_t)n;
        }
        if (j->finished) {
            bool ok = j->rc >= 0 || !j->cancel;
            pthread_mutex_unlock(&j->lock);
            return ok ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!wait_slice(j)) {
            pthread_mutex_unlock(&j->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* libmicrohttpd is done with the response (sent, or the client went away). */
static void stream_free(void *cls) {
    gen_job_free(cls);
}

enum MHD_Result gen_run(struct request *r, struct gen_job *j) {
    enum MHD_Result m;
    if (!j->client) j->client = request_client(r, &m);
    if (!j->client) {
        gen_job_free(j);
        return m;
    }
    if (pthread_create(&j->thread, NULL, job_thread, j) != 0) {
        gen_job_free(j);
        return reply_error(r, 503, NULL, "cannot start a thread for this request");
    }
    j->running = true;
    /* Until the first token, an error still gets its own HTTP status. */
    pthread_mutex_lock(&j->lock);
    bool here = true;
    while (here && !(j->finished || (j->stream && j->started))) here = wait_slice(j);
    pthread_mutex_unlock(&j->lock);
    if (!here) {
        log_debug("%s: client went away before the reply", r->url);
        gen_job_free(j);
        return MHD_NO;
    }
    if (j->finished && j->rc < 0) {
        m = j->format_error ? reply_error(r, http_status_for(j->err.code), j->format_param, "%s",
                                          j->err.message)
                            : reply_warm_error(r, &j->err);
        gen_job_free(j);
        return m;
    }
    if (!j->stream) {
        m = reply_json(r, 200, j->ops->whole(j));
        gen_job_free(j);
        return m;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                                                  stream_read, j, stream_free);
    if (!resp) {
        gen_job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", j->ops->content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    reply_add_cors(r, resp);
    m = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);   /* the job now lives until stream_free */
    return m;
}
