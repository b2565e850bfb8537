/* httpd.h — warm-httpd, the OpenAI and Ollama HTTP APIs on loopback TCP for the apps that
 * speak only those (DESIGN.md §5.0). It is a client of warmd like any other: every request
 * becomes libwarm calls made on behalf of the local user who opened the TCP connection
 * (found with the kernel's socket diagnostics, peer.c) or of the user whose bearer token
 * it carries; warmd decides what that user may do. warmd itself never sees TCP or HTTP.
 *
 * Files: main.c (command line, sockets, signals), config.c (settings table), peer.c (uid
 * of a loopback peer), gate.c (accepting: connection caps per user at accept, request
 * deadlines), clients.c (libwarm connections per represented user), server.c
 * (libmicrohttpd: header framing, Host/Origin checks, bodies, routing, replies), gen.c
 * (a generation on its own thread feeding a streamed or a whole reply), openai.c and
 * ollama.c (the two APIs), anthropic.c (Anthropic's Messages API), responses.c (OpenAI's
 * Responses API), show.c (what /api/show says about a model).
 *
 * Threading: libmicrohttpd runs one thread per connection (capped by max_connections);
 * a handler may block on its connection's thread. A generation runs on a thread of its
 * own and hands bytes to the connection's thread through its struct gen_job (locked).
 * The only shared state is struct httpd (config read-only after start, the client pool
 * and the gate's connection list and counts behind their locks). */
#pragma once

#include "base/base.h"
#include "warm.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HTTPD_VERSION "0.1.0"
/* The Ollama release whose API warm-httpd answers like; /api/version reports it, since
 * clients compare it against the versions that introduced the calls they use. */
#define HTTPD_OLLAMA_API_VERSION "0.6.4"
#define HTTPD_DEFAULT_CONFIG "/etc/warmd/warm-httpd.conf"
#define HTTPD_MAX_LISTEN 8
#define HTTPD_MAX_ORIGINS 32
#define HTTPD_ADDR_MAX 64
#define HTTPD_ORIGIN_MAX 256
#define HTTPD_TOKEN_MAX 256
#define HTTPD_MAX_STOP 16
#define HTTPD_MODEL_MAX 160

/* ---- settings (config.c) -------------------------------------------------------------- */

struct httpd_config {
    char listen[HTTPD_MAX_LISTEN][HTTPD_ADDR_MAX];  /* "127.0.0.1:11434", "[::1]:11434" */
    size_t n_listen;
    char warmd_socket[108];
    char allowed_origins[HTTPD_MAX_ORIGINS][HTTPD_ORIGIN_MAX];  /* "*" = any, echoed */
    size_t n_allowed_origins;
    uint64_t max_body_bytes;
    uint32_t max_connections;          /* per listening address */
    uint32_t max_connections_per_uid;
    uint32_t max_connections_unidentified; /* all peers without a uid together */
    uint64_t connection_timeout_usec;  /* idle connection, or a client that stops reading */
    uint64_t request_timeout_usec;     /* headers and body must arrive within this */
    char default_model[136];           /* "" = warmd's default model */
    uint64_t keep_alive_usec;          /* a request that names no keep_alive (Ollama's
                                          OLLAMA_KEEP_ALIVE): its lease, capped by warmd */
    enum log_level log_level;
};

/* Defaults, then the file (path NULL = HTTPD_DEFAULT_CONFIG, which may be absent), then the
 * --key=value arguments. Errors name the file and line or the argument. */
int config_load(struct httpd_config *c, const char *path, bool path_required, char **args,
                size_t n_args, struct err_detail *err);
/* Sets one key from text ("max_body", "8M"); source names it in errors. */
int config_set(struct httpd_config *c, const char *key, const char *value, const char *source,
               struct err_detail *err);
/* Prints every key with its help and default (for --help), commented out. */
void config_print_help(FILE *f);
void config_print(const struct httpd_config *c, FILE *f);

/* ---- the uid of a loopback peer (peer.c) ---------------------------------------------- */

/* The netlink socket lookups go through: systemd's (fd >= 0, shared, serialized by lock),
 * or none (fd -1: each lookup opens its own, in warm-httpd's network namespace). */
struct peer_diag {
    int fd;
    pthread_mutex_t lock;
    uint32_t seq;
};
int peer_diag_init(struct peer_diag *d, int fd);
void peer_diag_done(struct peer_diag *d);
/* The uid owning the socket at the other end of the accepted TCP connection fd, asked of
 * the kernel's socket diagnostics (NETLINK_SOCK_DIAG, the peer's address pair). Returns 0
 * with *ret_uid; -ENOENT when no socket of that network namespace is that peer (a client
 * in a container or on another machine); another -errno when the lookup itself failed. */
int peer_uid(struct peer_diag *d, int fd, uint32_t *ret_uid);

/* ---- libwarm connections per represented user (clients.c) ----------------------------- */

/* Who a request is served as: the uid found for its connection, or a bearer token. */
struct identity {
    bool by_token;
    uint32_t uid;
    char token[HTTPD_TOKEN_MAX];
};

struct client_ref;  /* one pooled warm_client acting for one identity */

struct clients {
    pthread_mutex_t lock;
    char socket[108];
    struct client_ref *refs;  /* list, most recently used first */
    size_t n;
};
int clients_init(struct clients *p, const char *socket);
void clients_done(struct clients *p);
/* A connection acting for id (made on first use, then shared by that identity's requests).
 * Returns it with one reference; clients_put releases. Errors from warm_connect. */
int clients_get(struct clients *p, const struct identity *id, struct client_ref **ret,
                struct warm_error *err);
struct warm_client *client_ref_client(struct client_ref *r);
void clients_put(struct clients *p, struct client_ref *r);

/* ---- the server (server.c) ------------------------------------------------------------ */

enum api { API_PLAIN, API_OPENAI, API_OLLAMA, API_ANTHROPIC, API_COUNT };

struct uid_count {
    uint32_t uid, n;
};

/* Where a connection's current request is (gate.c keeps its deadline). */
enum conn_phase {
    CONN_WAITING,       /* between two requests: idle, only connection_timeout applies */
    CONN_HEADERS,       /* its first bytes came (or it is new): request_timeout runs */
    CONN_BODY,          /* headers whole, body coming: request_timeout still runs */
    CONN_ANSWERING,     /* request whole: being answered */
};

/* One accepted connection, from accept (gate.c) to libmicrohttpd's CLOSED notification. */
struct conn_info {
    int fd;
    size_t listener;                /* index of its listening socket */
    uint16_t local_port;
    bool identified;                /* uid is the peer's, from peer_uid() */
    uint32_t uid;
    bool started;                   /* libmicrohttpd took it (its socket context) */
    bool expired;                   /* past its request deadline: shut down */
    enum conn_phase phase;
    uint64_t phase_usec;            /* when the request's clock started */
    uint64_t rx_bytes;              /* bytes received when it went CONN_WAITING */
    uint64_t accepted_usec;
    uint64_t serial;
    struct conn_info *prev, *next;
};

/* warm-httpd's counters, in /metrics. */
enum httpd_metric {
    HM_ACCEPTED, HM_REFUSED_PER_UID, HM_REFUSED_UNIDENTIFIED, HM_REFUSED_TOTAL,
    HM_REQUEST_TIMEOUTS, HM_BAD_HEADERS, HM_COUNT
};

struct gate_log_slot {
    bool used;
    uint32_t uid;
    unsigned why;
    uint64_t last_usec, left_out;
};

/* The accept thread, the connection caps and the request deadlines (gate.c). */
struct gate {
    int fds[HTTPD_MAX_LISTEN];
    size_t n_fds;
    int stop_fd;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;           /* everything below */
    struct conn_info *conns;        /* admitted, open */
    uint32_t open[HTTPD_MAX_LISTEN];
    uint32_t open_unidentified;
    struct uid_count *uids;         /* open connections per identified uid */
    size_t n_uids, cap_uids;
    uint64_t serial;
    struct gate_log_slot log[64];
    _Atomic uint64_t metrics[HM_COUNT];
};

struct gate_stats {
    uint64_t counters[HM_COUNT];
    uint32_t open, open_unidentified, users;
};

struct httpd {
    struct httpd_config cfg;
    struct clients clients;
    struct peer_diag diag;
    _Atomic bool stopping;          /* set first by httpd_stop: waits end, jobs cancel */
    struct MHD_Daemon *mhd[HTTPD_MAX_LISTEN];
    size_t n_mhd;
    struct gate gate;
};

/* Accepts on the listening sockets fds (one libmicrohttpd daemon each, h->mhd[k]) in a
 * thread of its own; gate_stop ends it, gate_done frees what is left once libmicrohttpd
 * has stopped. */
int gate_start(struct httpd *h, const int *fds, size_t n, struct err_detail *err);
void gate_stop(struct httpd *h);
void gate_done(struct httpd *h);
/* libmicrohttpd's notifications: the conn_info admitted for fd (NULL: none), and its end. */
struct conn_info *gate_conn_started(struct httpd *h, int fd);
void gate_conn_closed(struct httpd *h, struct conn_info *ci);
/* The request on ci moved to phase (called from its connection's thread). */
void gate_conn_phase(struct httpd *h, struct conn_info *ci, enum conn_phase phase);
void gate_metrics(struct httpd *h, struct gate_stats *ret);

struct request {
    struct httpd *h;
    struct MHD_Connection *conn;
    struct conn_info *ci;
    const struct route *route;
    enum api api;                   /* the error shape */
    bool ai_sdk;                    /* a Vercel AI SDK client (its User-Agent): Ollama errors
                                       in OpenAI's object shape, which it reads (server.c) */
    const char *url;
    char *body;
    size_t body_len, body_cap;
    bool refused;                   /* answered (or to be); the rest of the body is dropped */
    bool too_big;                   /* a body without Content-Length passed max_body */
    bool close_after;               /* the reply closes the connection */
    const char *cors_origin;        /* allowed Origin to echo, or NULL */
    struct identity id;
    json_t *json;                   /* the parsed body, NULL without one */
};

/* A handler answers its request (one of the reply_* calls) and returns its result. */
typedef enum MHD_Result (*handler_fn)(struct request *r);

struct route {
    const char *method, *path;      /* path ending in '*' matches a prefix */
    enum api api;
    bool needs_identity;            /* calls warmd on someone's behalf */
    bool has_body;                  /* JSON body required */
    handler_fn handler;
};

/* Serves the listening sockets fds (already listening; made non-blocking here): the gate
 * accepts, one libmicrohttpd daemon per socket serves what it admits. */
int httpd_start(struct httpd *h, const int *fds, size_t n, struct err_detail *err);
void httpd_stop(struct httpd *h);

/* Replies. Each queues a response on r's connection and returns MHD's result. */
enum MHD_Result reply_json(struct request *r, unsigned status, json_t *doc);  /* steals doc */
enum MHD_Result reply_text(struct request *r, unsigned status, const char *content_type,
                           const char *text);
/* An error in the shape of r's API: OpenAI {"error":{message,type,param,code}}, Ollama
 * {"error":message}, Anthropic {"type":"error","error":{type,message}}. param may be NULL. */
enum MHD_Result reply_error(struct request *r, unsigned status, const char *param,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A libwarm error with the HTTP status that matches its code. */
enum MHD_Result reply_warm_error(struct request *r, const struct warm_error *e);
unsigned http_status_for(int warm_code);
/* The type/code pair OpenAI uses for an HTTP status ("invalid_request_error"). */
const char *openai_error_type(unsigned status);
/* Adds the CORS headers r earned (none unless its Origin is allowed). */
void reply_add_cors(struct request *r, struct MHD_Response *resp);

/* A pooled client acting for r's identity; errors answered. NULL when answered. */
struct client_ref *request_client(struct request *r, enum MHD_Result *ret);

/* ---- generation (gen.c) --------------------------------------------------------------- */

struct gen_job;

/* How one API writes a generation. piece and end append to the stream with gen_emit (the
 * job's lock is held); whole builds the reply of a request that did not stream. */
struct gen_ops {
    const char *content_type;
    int (*piece)(struct gen_job *j, const char *text, size_t len);
    /* Reasoning of a thinking family as it streams (NULL: not streamed). */
    int (*thinking)(struct gen_job *j, const char *text, size_t len);
    /* A piece of a tool call as it streams (NULL: calls come whole from the summary, at
     * the end). end then writes only the summary's calls from j->n_calls_streamed on. */
    int (*tool_call)(struct gen_job *j, const struct warm_tool_call_delta *d);
    int (*end)(struct gen_job *j);
    int (*error)(struct gen_job *j);
    json_t *(*whole)(struct gen_job *j);
};

struct gen_job {
    const struct gen_ops *ops;
    struct httpd *h;
    struct client_ref *client;
    json_t *body;                   /* the request; its strings are borrowed below */
    /* What to ask for. */
    bool chat;
    bool plain_fallback;            /* a chat refused for want of a template: generate */
    const char *prompt;             /* generate (or the fallback's prompt) */
    int32_t *tokens;                /* generate by ids instead (owned) */
    size_t n_tokens;
    struct warm_chat_message *msgs; /* owned array; contents borrowed or in strings */
    size_t n_msgs;
    char **strings;                 /* owned texts the request made (joined parts) */
    size_t n_strings;
    struct warm_gen_params params;
    struct warm_sampling sampling;
    const char *stop[HTTPD_MAX_STOP];
    uint32_t num_ctx;               /* Ollama's options.num_ctx; 0 = the model's context */
    const char *format_param;       /* the API's name of the output format's field (in its
                                       errors), when the request has one */
    bool format_error;              /* warmd refused the format: err names format_param */
    bool stream;
    /* What the reply needs. */
    enum api api;
    char id[48];
    int64_t created;                /* seconds since the epoch */
    char model[HTTPD_MODEL_MAX];    /* as the request named it, echoed in replies */
    char model_buf[HTTPD_MODEL_MAX]; /* the name sent to warmd, when it differs */
    bool include_usage;
    bool head_sent;                 /* the first chunk (OpenAI chat: the role) is out */
    int block_open, block_index;    /* Anthropic's and Responses' streams: the kind of the
                                       block (output item) open (0: none) and its index (or
                                       the next one's) */
    int64_t seq;                    /* Responses' stream: the next event's sequence_number */
    char *text;                     /* the whole text (not streaming) */
    size_t text_len, text_cap;
    char *reasoning;                /* the whole reasoning (not streaming) */
    size_t reasoning_len, reasoning_cap;
    struct warm_tool_call *calls;   /* the tool calls of assistant messages (owned) */
    size_t n_calls;
    /* Tool calls as they stream (ops->tool_call): how many have begun, and the last one's
     * id, name and arguments so far (for the APIs that repeat them when it ends); updated
     * after ops->tool_call returns. */
    unsigned n_calls_streamed;
    char call_id[48], call_name[128];
    char *call_args;
    size_t call_args_len, call_args_cap;
    /* The hand-over between the generation thread and the connection's thread. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *out;                      /* bytes to send: [out_off, out_len) */
    size_t out_len, out_cap, out_off;
    bool started;                   /* the first token (or the end) arrived */
    bool finished;
    volatile sig_atomic_t cancel;
    int rc;
    struct warm_error err;
    struct warm_summary summary;    /* valid when finished with rc >= 0 */
    pthread_t thread;
    bool running;
    int client_fd;                  /* the HTTP client's socket, watched for hang-ups */
};

/* A job for request r with ops; takes a reference on r's body. NULL on ENOMEM. */
struct gen_job *gen_job_new(struct request *r, const struct gen_ops *ops, enum api api);
void gen_job_free(struct gen_job *j);
/* Keeps a text the job's messages point into; returns it (NULL on ENOMEM, text freed). */
char *gen_job_keep(struct gen_job *j, char *text);
/* Appends bytes to the stream (lock held by the caller: inside ops). */
int gen_emit(struct gen_job *j, const char *data, size_t len);
/* Appends doc as one SSE event ("data: ...\n\n") or one NDJSON line; steals doc. */
int gen_emit_json(struct gen_job *j, json_t *doc, bool sse);
/* Runs the job and answers r: the whole reply, or a streamed one. Takes the job. */
enum MHD_Result gen_run(struct request *r, struct gen_job *j);

/* Shared helpers of the two APIs. */
const char *finish_reason(enum warm_stop_reason s);  /* "stop", "length" or "tool_calls" */
uint32_t cached_tokens(const struct warm_summary *s);

/* ---- the APIs (openai.c, ollama.c) ---------------------------------------------------- */

enum MHD_Result openai_models(struct request *r);
enum MHD_Result openai_model(struct request *r);
enum MHD_Result openai_chat(struct request *r);
enum MHD_Result openai_completions(struct request *r);

enum MHD_Result ollama_root(struct request *r);
enum MHD_Result ollama_version(struct request *r);
enum MHD_Result ollama_tags(struct request *r);
enum MHD_Result ollama_ps(struct request *r);
enum MHD_Result ollama_show(struct request *r);
enum MHD_Result ollama_generate(struct request *r);
enum MHD_Result ollama_chat(struct request *r);
enum MHD_Result ollama_not_here(struct request *r);
/* /api/embed, /api/embeddings, /v1/embeddings (embed.c): warmd's Embed. */
enum MHD_Result ollama_embed(struct request *r);
enum MHD_Result ollama_embeddings(struct request *r);
enum MHD_Result openai_embeddings(struct request *r);

/* /v1/responses (responses.c): OpenAI's Responses API, stateless. */
enum MHD_Result openai_responses(struct request *r);

/* /v1/messages and /v1/messages/count_tokens (anthropic.c): Anthropic's Messages API. */
enum MHD_Result anthropic_messages(struct request *r);
enum MHD_Result anthropic_count_tokens(struct request *r);
/* The error type Anthropic uses for an HTTP status ("not_found_error"). */
const char *anthropic_error_type(unsigned status);

/* Request field readers (openai.c): each returns 0 (absent leaves *ret as it was), or
 * answers a 400 naming the field and returns -EINVAL with *ret_mhd set. */
struct field_ctx {
    struct request *r;
    enum MHD_Result mhd;
};
int field_number(struct field_ctx *f, json_t *obj, const char *key, double lo, double hi,
                 double *ret, bool *ret_present);
int field_bool(struct field_ctx *f, json_t *obj, const char *key, bool *ret);
int field_string(struct field_ctx *f, json_t *obj, const char *key, const char **ret);
/* Ollama's keep_alive (a Go duration or seconds; ollama.c) into ret->keep_alive_usec and
 * ret->unload_after (absent: ret as it was); a 400 naming it otherwise. */
int parse_keep_alive(struct field_ctx *f, json_t *v, struct warm_gen_params *ret);
/* stop: a string or an array of at most max strings. */
int field_stop(struct field_ctx *f, json_t *obj, const char *key, size_t max, struct gen_job *j);
/* Constrains j's output to schema (a JSON Schema object or boolean; NULL = JSON mode, any
 * object), sent to warmd as OutputFormat.json_schema; param is the request's field, named
 * in warmd's errors about the schema (unsupported keywords). */
int field_schema(struct field_ctx *f, struct gen_job *j, json_t *schema, const char *param);
/* The model a request names (in buf when ":latest" is dropped), the configured default, or
 * NULL for warmd's own default. */
const char *request_model(struct request *r, const char *name, char buf[HTTPD_MODEL_MAX]);
/* messages: [{role, content}] with content a string or text parts; roles system,
 * developer (as system), user, assistant, tool; anything else refused by name. Assistant
 * messages may carry tool_calls (OpenAI: {id, type, function: {name, arguments as JSON
 * text}}; Ollama: {function: {name, arguments as an object}}) and their reasoning (OpenAI
 * reasoning_content, Ollama thinking); tool messages tool_call_id (OpenAI) or tool_name
 * (Ollama). */
int parse_messages(struct field_ctx *f, struct gen_job *j, json_t *msgs);
/* tools: an array of {"type": "function", "function": {"name", ...}} sent to warmd as
 * tools_json (absent, null or []: none). */
int field_tools(struct field_ctx *f, struct gen_job *j, json_t *tools);
/* tool_choice (after field_tools): "auto", "none", "required" or {"type": "function",
 * "function": {"name"}} (OpenAI's; on Ollama's /api/chat a warm-httpd extension). */
int field_tool_choice(struct field_ctx *f, struct gen_job *j, json_t *tc);
/* A JSON string of n bytes of model output; bytes that are not UTF-8 become U+FFFD. */
json_t *json_text(const char *s, size_t n);
/* The fill-in-the-middle token ids (prefix, suffix, middle) d's vocabulary names (show.c);
 * false when it names none. */
bool model_fim_tokens(const struct warm_model_details *d, int32_t ret[3]);
/* Random hex id with a prefix ("chatcmpl-"). */
void make_id(char *dst, size_t size, const char *prefix);
