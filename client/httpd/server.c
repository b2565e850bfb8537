/* server — the HTTP side on libmicrohttpd: one thread per connection, for the connections
 * the gate admitted (gate.c: accept, the caps per user and per listening address, the
 * request deadline). Every request then passes, before its body is read: the header
 * framing (two Host headers, Content-Length values that disagree: 400), the Host check
 * (only localhost, 127.0.0.1 and [::1] with our port are served, so a web page whose name
 * was rebound to 127.0.0.1 gets nothing), the Origin check (a browser page is refused
 * unless its origin is in allowed_origins; no wildcard CORS unless configured), the route
 * table, the identity (the connection's uid, else a bearer token, else 401 naming both)
 * and the body cap (413). An idle connection or a client that stops reading is closed
 * after connection_timeout. */
#include "httpd.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* Headers of one request must fit this (libmicrohttpd's per-connection pool). */
#define CONN_MEMORY_BYTES (64 * 1024)

static enum MHD_Result httpd_metrics(struct request *r);

static const struct route routes[] = {
    {"GET", "/", API_PLAIN, false, false, ollama_root},
    {"HEAD", "/", API_PLAIN, false, false, ollama_root},
    {"GET", "/metrics", API_PLAIN, false, false, httpd_metrics},
    {"GET", "/v1/models", API_OPENAI, true, false, openai_models},
    {"GET", "/v1/models/*", API_OPENAI, true, false, openai_model},
    {"POST", "/v1/chat/completions", API_OPENAI, true, true, openai_chat},
    {"POST", "/v1/completions", API_OPENAI, true, true, openai_completions},
    {"POST", "/v1/embeddings", API_OPENAI, true, true, openai_embeddings},
    {"POST", "/v1/responses", API_OPENAI, true, true, openai_responses},
    {"POST", "/v1/messages", API_ANTHROPIC, true, true, anthropic_messages},
    {"POST", "/v1/messages/count_tokens", API_ANTHROPIC, true, true, anthropic_count_tokens},
    {"GET", "/api/version", API_OLLAMA, false, false, ollama_version},
    {"HEAD", "/api/version", API_OLLAMA, false, false, ollama_version},
    {"GET", "/api/tags", API_OLLAMA, true, false, ollama_tags},
    {"GET", "/api/ps", API_OLLAMA, true, false, ollama_ps},
    {"POST", "/api/show", API_OLLAMA, true, true, ollama_show},
    {"POST", "/api/generate", API_OLLAMA, true, true, ollama_generate},
    {"POST", "/api/chat", API_OLLAMA, true, true, ollama_chat},
    {"POST", "/api/pull", API_OLLAMA, false, false, ollama_not_here},
    {"POST", "/api/push", API_OLLAMA, false, false, ollama_not_here},
    {"POST", "/api/create", API_OLLAMA, false, false, ollama_not_here},
    {"POST", "/api/copy", API_OLLAMA, false, false, ollama_not_here},
    {"DELETE", "/api/delete", API_OLLAMA, false, false, ollama_not_here},
    {"POST", "/api/embed", API_OLLAMA, true, true, ollama_embed},
    {"POST", "/api/embeddings", API_OLLAMA, true, true, ollama_embeddings},
};

/* ---- status codes ------------------------------------------------------------------------ */

static const struct {
    int code;
    unsigned status;
} status_rows[] = {
    {WARM_CANCELLED, 499},          {WARM_INVALID_ARGUMENT, 400},
    {WARM_DEADLINE_EXCEEDED, 504},  {WARM_NOT_FOUND, 404},
    {WARM_ALREADY_EXISTS, 409},     {WARM_PERMISSION_DENIED, 403},
    {WARM_RESOURCE_EXHAUSTED, 429}, {WARM_FAILED_PRECONDITION, 400},
    {WARM_OUT_OF_RANGE, 400},       {WARM_UNIMPLEMENTED, 501},
    {WARM_UNAVAILABLE, 503},        {WARM_UNAUTHENTICATED, 401},
    {WARM_NOT_RUNNING, 503},        {WARM_SOCKET_ACCESS, 503},
    {WARM_NO_MEMORY, 503},          {WARM_BAD_REQUEST, 400},
};

unsigned http_status_for(int code) {
    if (code < 0) code = -code;
    for (size_t i = 0; i < ARRAY_SIZE(status_rows); i++)
        if (status_rows[i].code == code) return status_rows[i].status;
    return 500;
}

static const struct {
    unsigned status;
    const char *type;
} openai_types[] = {
    {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
    {404, "not_found_error"},       {405, "invalid_request_error"}, {408, "timeout_error"},
    {413, "invalid_request_error"}, {429, "rate_limit_error"},     {499, "request_cancelled"},
    {501, "not_implemented_error"}, {503, "service_unavailable"},
};

const char *openai_error_type(unsigned status) {
    for (size_t i = 0; i < ARRAY_SIZE(openai_types); i++)
        if (openai_types[i].status == status) return openai_types[i].type;
    return "server_error";
}

/* ---- log lines clients cause ----------------------------------------------------------- */

/* Log lines a client can cause as often as it likes (libmicrohttpd's messages about what
 * clients did, 5xx answers) come in bursts of at most LOG_BURST per LOG_WINDOW_USEC each
 * kind; then one line says how many were left out. */
#define LOG_BURST 20
#define LOG_WINDOW_USEC 10000000ull

struct log_burst {
    pthread_mutex_t lock;
    const char *what;               /* "libmicrohttpd messages", in the left-out line */
    uint64_t window_usec, left_out;
    unsigned n_logged;
};

static bool log_burst_take(struct log_burst *b) {
    uint64_t now = time_now_usec(), dropped = 0;
    pthread_mutex_lock(&b->lock);
    if (now - b->window_usec >= LOG_WINDOW_USEC) {
        dropped = b->left_out;
        b->window_usec = now;
        b->n_logged = 0;
        b->left_out = 0;
    }
    bool take = b->n_logged < LOG_BURST;
    if (take) b->n_logged++;
    else b->left_out++;
    pthread_mutex_unlock(&b->lock);
    if (dropped)
        log_msg(LOG_LEVEL_INFO, "%llu more %s were left out of the log",
                (unsigned long long)dropped, b->what);
    return take;
}

static struct log_burst mhd_burst = {PTHREAD_MUTEX_INITIALIZER, "libmicrohttpd messages", 0, 0, 0};
static struct log_burst error_burst = {PTHREAD_MUTEX_INITIALIZER, "5xx answers", 0, 0, 0};

/* ---- replies ----------------------------------------------------------------------------- */

void reply_add_cors(struct request *r, struct MHD_Response *resp) {
    if (!r->cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors_origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result queue(struct request *r, unsigned status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    reply_add_cors(r, resp);
    if (r->close_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result m = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    log_debug("%s uid %s%u: %u", r->url, r->id.by_token ? "token:" : "",
              r->id.by_token ? 0 : r->id.uid, status);
    return m;
}

static enum MHD_Result reply_buffer(struct request *r, unsigned status, const char *type,
                                    char *data, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    return queue(r, status, resp);
}

enum MHD_Result reply_json(struct request *r, unsigned status, json_t *doc) {
    if (!doc) return MHD_NO;
    char *s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!s) return MHD_NO;
    return reply_buffer(r, status, "application/json", s, strlen(s));
}

enum MHD_Result reply_text(struct request *r, unsigned status, const char *content_type,
                           const char *text) {
    char *s = strdup(text);
    if (!s) return MHD_NO;
    return reply_buffer(r, status, content_type, s, strlen(s));
}

/* The error in the shape the API's clients parse: Ollama's {"error": "message"} (the
 * ollama packages read the string), OpenAI's {"error": {message, type, param, code}},
 * Anthropic's {"type": "error", "error": {type, message}}. A
 * message that echoes bytes of the request need not be UTF-8: never a reply-less NULL. */
/* The error in the shape the API's clients parse: Ollama's {"error": "..."}, except for the
 * Vercel AI SDK's Ollama provider (ollama-ai-provider-v2), which reads only OpenAI's
 * {"error": {"message", ...}} and otherwise shows the status line's "Bad Request"
 * (ai_sdk: its User-Agent names ai-sdk/); Anthropic's; OpenAI's. */
static json_t *error_doc(enum api api, bool ai_sdk, unsigned status, const char *param,
                         const char *msg) {
    json_t *m = json_text(msg, strlen(msg));
    if (api == API_OLLAMA && !ai_sdk) return json_pack("{s:o}", "error", m);
    if (api == API_ANTHROPIC)
        return json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type",
                         anthropic_error_type(status), "message", m);
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", m, "type",
                     openai_error_type(status), "param",
                     param ? json_text(param, strlen(param)) : json_null(), "code", json_null());
}

enum MHD_Result reply_error(struct request *r, unsigned status, const char *param,
                            const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500 && log_burst_take(&error_burst))
        log_msg(LOG_LEVEL_WARN, "%s: %u: %s", r->url, status, msg);
    return reply_json(r, status, error_doc(r->api, r->ai_sdk, status, param, msg));
}

enum MHD_Result reply_warm_error(struct request *r, const struct warm_error *e) {
    unsigned status = http_status_for(e->code);
    return reply_error(r, status, NULL, "%s", e->message);
}

/* ---- identity and per-uid caps ----------------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    struct httpd *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (*socket_context) gate_conn_closed(h, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    /* NULL (never expected: every connection comes through the gate) answers 503. */
    *socket_context = info ? gate_conn_started(h, info->connect_fd) : NULL;
}

/* The bearer token of an Authorization header, or NULL. */
static const char *bearer(struct MHD_Connection *conn) {
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7) != 0) return NULL;
    a += 7;
    while (*a == ' ') a++;
    return *a ? a : NULL;
}

/* Who r is served as: the connection's uid, else its bearer token. False: neither. */
static bool identify(struct request *r) {
    if (r->ci->identified) {
        r->id = (struct identity){.uid = r->ci->uid};
        return true;
    }
    const char *tok = bearer(r->conn);
    if (!tok || strlen(tok) >= sizeof r->id.token) return false;
    r->id = (struct identity){.by_token = true};
    strcpy(r->id.token, tok);
    return true;
}

static enum MHD_Result reply_unidentified(struct request *r) {
    return reply_error(r, 401, NULL,
                       "warm-httpd cannot tell which local user opened this connection (%s), so "
                       "it needs a token: run `warmctl token create` as that user and send the "
                       "token it writes (~/.config/warmd/token) as 'Authorization: Bearer "
                       "<token>'; or connect from a program running on this machine, outside "
                       "containers, which is recognised by its user id",
                       bearer(r->conn) ? "and the bearer token is too long"
                                       : "a client in a container or another network namespace?");
}

/* ---- Host and Origin --------------------------------------------------------------------- */

static bool host_ok(const char *host, uint16_t port) {
    static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
    if (!host) return false;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(host, names[i], n) != 0) continue;
        const char *rest = host + n;
        if (*rest == '\0') return port == 80;
        char want[8];
        snprintf(want, sizeof want, ":%u", port);
        if (strcmp(rest, want) == 0) return true;
    }
    return false;
}

/* The allowed origin to echo for this Origin header; NULL = refuse. */
static const char *origin_allowed(const struct httpd_config *c, const char *origin) {
    for (size_t i = 0; i < c->n_allowed_origins; i++) {
        if (strcmp(c->allowed_origins[i], "*") == 0) return "*";
        if (strcasecmp(c->allowed_origins[i], origin) == 0) return c->allowed_origins[i];
    }
    return NULL;
}

static enum MHD_Result preflight(struct request *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    const char *want = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                   "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            want ? want : "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return queue(r, 204, resp);
}

/* ---- routing ----------------------------------------------------------------------------- */

static bool path_matches(const char *pattern, const char *path) {
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*') return strncmp(pattern, path, n - 1) == 0 && path[n - 1];
    return strcmp(pattern, path) == 0;
}

/* ---- /metrics ---------------------------------------------------------------------------- */

/* warm-httpd's own counters in Prometheus' text format. Totals only: nothing in it tells
 * one local user what another does (which is why it needs no identity). */
static enum MHD_Result httpd_metrics(struct request *r) {
    struct gate_stats st;
    gate_metrics(r->h, &st);
    const uint64_t *c = st.counters;
    char text[2048];
    snprintf(text, sizeof text,
             "# HELP warm_httpd_connections_accepted_total Connections admitted at accept.\n"
             "# TYPE warm_httpd_connections_accepted_total counter\n"
             "warm_httpd_connections_accepted_total %llu\n"
             "# HELP warm_httpd_connections_refused_total Connections refused at accept, by "
             "the cap that was reached.\n"
             "# TYPE warm_httpd_connections_refused_total counter\n"
             "warm_httpd_connections_refused_total{cap=\"max_connections_per_uid\"} %llu\n"
             "warm_httpd_connections_refused_total{cap=\"max_connections_unidentified\"} %llu\n"
             "warm_httpd_connections_refused_total{cap=\"max_connections\"} %llu\n"
             "# HELP warm_httpd_request_timeouts_total Requests not received whole within "
             "request_timeout (closed).\n"
             "# TYPE warm_httpd_request_timeouts_total counter\n"
             "warm_httpd_request_timeouts_total %llu\n"
             "# HELP warm_httpd_bad_headers_total Requests refused for their header framing "
             "(two Host headers, Content-Length values that disagree, a NUL byte).\n"
             "# TYPE warm_httpd_bad_headers_total counter\n"
             "warm_httpd_bad_headers_total %llu\n"
             "# HELP warm_httpd_connections_open Connections open now.\n"
             "# TYPE warm_httpd_connections_open gauge\n"
             "warm_httpd_connections_open %u\n"
             "# HELP warm_httpd_connections_open_unidentified Of those, peers whose user "
             "cannot be told.\n"
             "# TYPE warm_httpd_connections_open_unidentified gauge\n"
             "warm_httpd_connections_open_unidentified %u\n",
             (unsigned long long)c[HM_ACCEPTED], (unsigned long long)c[HM_REFUSED_PER_UID],
             (unsigned long long)c[HM_REFUSED_UNIDENTIFIED],
             (unsigned long long)c[HM_REFUSED_TOTAL], (unsigned long long)c[HM_REQUEST_TIMEOUTS],
             (unsigned long long)c[HM_BAD_HEADERS], st.open, st.open_unidentified);
    return reply_text(r, 200, "text/plain; version=0.0.4", text);
}

/* ---- header framing ---------------------------------------------------------------------- */

/* What RFC 9112 says a server must refuse with 400, because a proxy in front of us may
 * have read the request otherwise: two Host headers (§3.2), Content-Length values that
 * disagree (§6.3); and a NUL byte in a header, where C strings stop short of what was sent.
 *
 * libmicrohttpd refuses a NUL in a header's name, but hands a value out only up to its
 * first NUL (strlen), so the rest of that line is never seen. It parses the head in place:
 * one buffer from the method's first byte, REQUEST_HEADER_SIZE bytes long, each line's end
 * (CRLF or LF) overwritten with NULs. So between the end of one value and the next name
 * there is just the line's end, 1 or 2 bytes, when nothing was hidden; more is a NUL and
 * what followed it. Where the strings do not lie in that buffer in order (another
 * libmicrohttpd, or a continuation line it joined elsewhere), the check does not judge. */
struct header_scan {
    uintptr_t hi;                   /* the head's end (it starts at the method) */
    uintptr_t end;                  /* where the last line seen ends (its value's end) */
    bool in_place;                  /* every string so far lies in [lo, hi), in order */
    bool hidden;                    /* bytes between two lines that no string shows */
    unsigned n_host;
    const char *length;
    size_t length_size;
    bool length_differs;
};

static bool line_gap_ok(uintptr_t from, uintptr_t to, uintptr_t min, uintptr_t max) {
    return to >= from + min && to <= from + max;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    struct header_scan *sc = cls;
    uintptr_t k = (uintptr_t)key, v = (uintptr_t)value;
    if (!key || !value || k < sc->end || v < k + key_size || v + value_size >= sc->hi)
        sc->in_place = false;
    if (sc->in_place) {
        if (!line_gap_ok(sc->end, k, 1, 2)) sc->hidden = true;
        sc->end = v + value_size;
    }
    if (key && strcasecmp(key, "Host") == 0) sc->n_host++;
    if (key && strcasecmp(key, "Content-Length") == 0) {
        if (sc->length && (sc->length_size != value_size ||
                           memcmp(sc->length, value, value_size) != 0))
            sc->length_differs = true;
        sc->length = value;
        sc->length_size = value_size;
    }
    return MHD_YES;
}

static const char *header_framing_error(struct MHD_Connection *conn, const char *method,
                                        const char *version) {
    const union MHD_ConnectionInfo *size =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    struct header_scan sc = {.end = (uintptr_t)version};
    sc.in_place = size && version && sc.end > (uintptr_t)method;
    if (sc.in_place) {
        sc.hi = (uintptr_t)method + size->header_size;
        sc.end += strlen(version);
        sc.in_place = sc.end < sc.hi;
    }
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, scan_header, &sc);
    /* After the last line: its end and the empty line's, 1 or 2 bytes each. */
    if (sc.in_place && !line_gap_ok(sc.end, sc.hi, 2, 4)) sc.hidden = true;
    if (sc.in_place && sc.hidden)
        return "a header carries a NUL byte (what follows it in the line could be read "
               "otherwise by others)";
    if (sc.n_host > 1) return "the request has more than one Host header";
    if (sc.length_differs) return "the request has Content-Length headers that disagree";
    return NULL;
}

static enum MHD_Result admit(struct request *r, const char *method, const char *version) {
    struct httpd_config *c = &r->h->cfg;
    r->api = strncmp(r->url, "/api/", 5) == 0            ? API_OLLAMA
             : strncmp(r->url, "/v1/messages", 12) == 0 ? API_ANTHROPIC
                                                        : API_OPENAI;
    const char *ua = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "User-Agent");
    r->ai_sdk = ua && strstr(ua, "ai-sdk/") != NULL;
    r->refused = true;          /* until every check passed */
    if (!r->ci) return reply_error(r, 503, NULL, "out of memory for this connection");
    const char *framing = header_framing_error(r->conn, method, version);
    if (framing) {
        atomic_fetch_add(&r->h->gate.metrics[HM_BAD_HEADERS], 1);
        r->close_after = true;  /* what follows may not be framed as we think */
        return reply_error(r, 400, NULL, "%s (RFC 9112)", framing);
    }
    const char *host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Host");
    if (!host_ok(host, r->ci->local_port))
        return reply_error(r, 403, NULL,
                           "Host '%s' is not served: use http://localhost:%u, "
                           "http://127.0.0.1:%u or http://[::1]:%u (other names could be a "
                           "web page's DNS rebinding)", host ? host : "", r->ci->local_port,
                           r->ci->local_port, r->ci->local_port);
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (origin) {
        r->cors_origin = origin_allowed(c, origin);
        if (!r->cors_origin)
            return reply_error(r, 403, NULL,
                               "requests from web pages of origin '%s' are refused; an "
                               "administrator may add it to allowed_origins in "
                               HTTPD_DEFAULT_CONFIG, origin);
        if (strcmp(r->cors_origin, "*") != 0) r->cors_origin = origin;
        if (strcmp(method, "OPTIONS") == 0) return preflight(r);
    }
    bool path_known = false;
    for (size_t i = 0; i < ARRAY_SIZE(routes) && !r->route; i++) {
        if (!path_matches(routes[i].path, r->url)) continue;
        path_known = true;
        if (strcmp(routes[i].method, method) == 0) r->route = &routes[i];
    }
    if (!r->route) {
        if (path_known) return reply_error(r, 405, NULL, "%s is not allowed on %s", method, r->url);
        return reply_error(r, 404, NULL, "no such endpoint: %s %s", method, r->url);
    }
    if (r->route->api != API_PLAIN) r->api = r->route->api;
    if (r->route->needs_identity && !identify(r)) return reply_unidentified(r);
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || n > c->max_body_bytes)
            return reply_error(r, 413, NULL, "request body of %s bytes is larger than max_body "
                               "(%llu bytes)", cl, (unsigned long long)c->max_body_bytes);
    }
    r->refused = false;
    return MHD_YES;
}

static int body_append(struct request *r, const char *data, size_t len) {
    size_t need;
    if (!size_add(r->body_len, len, &need) || need > r->h->cfg.max_body_bytes) return -E2BIG;
    if (need + 1 > r->body_cap) {
        size_t cap = MAX(need + 1, MIN(2 * r->body_cap, r->h->cfg.max_body_bytes + 1));
        char *b = realloc(r->body, cap);
        if (!b) return -ENOMEM;
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, len);
    r->body_len = need;
    r->body[need] = '\0';
    return 0;
}

static enum MHD_Result dispatch(struct request *r) {
    if (r->route->has_body) {
        if (!r->body_len) return reply_error(r, 400, NULL, "this endpoint takes a JSON body");
        json_error_t e;
        r->json = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &e);
        if (!r->json)
            return reply_error(r, 400, NULL, "the body is not JSON: %s (line %d, column %d)",
                               e.text, e.line, e.column);
        if (!json_is_object(r->json))
            return reply_error(r, 400, NULL, "the body must be a JSON object");
    }
    return r->route->handler(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    struct request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *r = (struct request){.h = cls, .conn = conn, .url = url};
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->ci = info ? info->socket_context : NULL;
        if (r->ci) gate_conn_phase(r->h, r->ci, CONN_BODY);
        *con_cls = r;
        return admit(r, method, version);
    }
    /* (A body that does not arrive within request_timeout of the request's first byte is
     * cut off by the gate.) */
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->refused) return MHD_YES;   /* answered; the rest is dropped */
        int e = body_append(r, upload, n);
        if (e == -E2BIG) r->refused = r->too_big = true; /* answered when the body ends */
        else if (e < 0) return MHD_NO;
        return MHD_YES;
    }
    if (r->ci) gate_conn_phase(r->h, r->ci, CONN_ANSWERING);
    if (r->too_big) {
        r->too_big = false;
        return reply_error(r, 413, NULL, "request body is larger than max_body (%llu bytes)",
                           (unsigned long long)r->h->cfg.max_body_bytes);
    }
    if (r->refused) return MHD_YES;
    r->refused = true;          /* one answer per request */
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    (void)cls, (void)conn, (void)why;
    struct request *r = *con_cls;
    if (!r) return;
    /* The next request's clock starts with its first byte. */
    if (r->ci) gate_conn_phase(r->h, r->ci, CONN_WAITING);
    json_decref(r->json);
    free(r->body);
    explicit_bzero(r->id.token, sizeof r->id.token);
    free(r);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    if (!log_burst_take(&mhd_burst)) return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = '\0';
    log_msg(LOG_LEVEL_INFO, "libmicrohttpd: %s", msg);
}

struct client_ref *request_client(struct request *r, enum MHD_Result *ret) {
    struct client_ref *c;
    struct warm_error e;
    int rc = clients_get(&r->h->clients, &r->id, &c, &e);
    if (rc < 0) {
        *ret = reply_warm_error(r, &e);
        return NULL;
    }
    return c;
}

int httpd_start(struct httpd *h, const int *fds, size_t n, struct err_detail *err) {
    if (n > HTTPD_MAX_LISTEN) return err_set(err, -E2BIG, "at most %d listening sockets", HTTPD_MAX_LISTEN);
    unsigned timeout_s = (unsigned)(h->cfg.connection_timeout_usec / 1000000);
    for (size_t i = 0; i < n; i++) {
        /* No listening socket of its own: the gate accepts and adds what it admits. Its
         * limit is above ours, which counts a connection out a moment before it does. */
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET |
                         MHD_USE_ITC;
        struct MHD_Daemon *d = MHD_start_daemon(
            flags, 0, NULL, NULL, on_request, h,
            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,   /* first, to catch the rest */
            MHD_OPTION_CONNECTION_LIMIT, 2 * (unsigned)h->cfg.max_connections,
            MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY_BYTES,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
            MHD_OPTION_END);
        if (!d) {
            httpd_stop(h);
            return err_set(err, -EIO, "libmicrohttpd could not start for listening socket %d",
                           fds[i]);
        }
        h->mhd[h->n_mhd++] = d;
    }
    int r = gate_start(h, fds, n, err);
    if (r < 0) httpd_stop(h);
    return r;
}

void httpd_stop(struct httpd *h) {
    atomic_store(&h->stopping, true);
    gate_stop(h);
    for (size_t i = 0; i < h->n_mhd; i++) MHD_stop_daemon(h->mhd[i]);
    h->n_mhd = 0;
    gate_done(h);
}
