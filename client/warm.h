/* warm.h — libwarm, the C client of warmd, the local model service (DESIGN.md §6).
 *
 * A struct warm_client is one connection (a gRPC channel over the daemon's Unix socket,
 * default /run/warmd.sock, or $WARM_SOCKET). Every call is synchronous: it returns when
 * the daemon has answered, and the streaming calls (warm_generate, warm_chat) call the
 * token callback on the calling thread as tokens arrive. A client may be shared by
 * several threads making calls at the same time; warm_disconnect must not race any call.
 *
 * Errors: calls return >= 0 on success and a negative enum warm_code otherwise; the
 * optional struct warm_error gets the code and a message a person can act on ("warmd is
 * not running: no socket at /run/warmd.sock; start it with ..."). The codes 1 … 16 are
 * the gRPC status codes the daemon answers with; the codes from 100 on come from this
 * side of the socket.
 *
 * Ownership: strings and structs passed in are borrowed for the duration of the call.
 * What a call returns through a ret_ pointer belongs to the caller: heap arrays and
 * strings are freed with warm_free, summaries with warm_summary_done; ret_ values are
 * written on success only. Fixed-size char arrays in result structs are NUL-terminated
 * (longer values are cut). No gRPC or protobuf type appears in this API; the library
 * exports only warm_* symbols. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(WARM_BUILDING_LIBRARY)
#define WARM_API __attribute__((visibility("default")))
#else
#define WARM_API
#endif

#define WARM_DEFAULT_SOCKET "/run/warmd.sock"

/* ---- errors -------------------------------------------------------------------------- */

enum warm_code {
    WARM_OK = 0,
    /* gRPC status codes, as the daemon sends them. */
    WARM_CANCELLED = 1,
    WARM_UNKNOWN = 2,
    WARM_INVALID_ARGUMENT = 3,
    WARM_DEADLINE_EXCEEDED = 4,
    WARM_NOT_FOUND = 5,
    WARM_ALREADY_EXISTS = 6,
    WARM_PERMISSION_DENIED = 7,
    WARM_RESOURCE_EXHAUSTED = 8,
    WARM_FAILED_PRECONDITION = 9,
    WARM_ABORTED = 10,
    WARM_OUT_OF_RANGE = 11,
    WARM_UNIMPLEMENTED = 12,
    WARM_INTERNAL = 13,
    WARM_UNAVAILABLE = 14,
    WARM_DATA_LOSS = 15,
    WARM_UNAUTHENTICATED = 16,
    /* Client side. */
    WARM_NOT_RUNNING = 100,     /* no socket, or nobody listening on it */
    WARM_SOCKET_ACCESS = 101,   /* this user may not open the socket, or warmd refuses it */
    WARM_NO_MEMORY = 102,
    WARM_PROTOCOL = 103,        /* the daemon's answer could not be decoded */
    WARM_BAD_REQUEST = 104,     /* the caller's arguments are wrong (caught before sending) */
    WARM_CODE_COUNT
};

struct warm_error {
    int code;                   /* enum warm_code, positive */
    char message[1024];
};

/* Name of a code ("NOT_FOUND", "NOT_RUNNING"); "?" for an unknown one. Accepts the code
 * or its negation. Static storage. */
WARM_API const char *warm_code_name(int code);

/* The library version, "0.1.0". Static storage. */
WARM_API const char *warm_version(void);

/* Frees what a call returned through a ret_ pointer (arrays, strings). NULL-safe. */
WARM_API void warm_free(void *p);

/* ---- connection ---------------------------------------------------------------------- */

struct warm_client;

/* Connects to the daemon at socket_path; NULL or "" = $WARM_SOCKET, else
 * WARM_DEFAULT_SOCKET. Checks that something listens there (WARM_NOT_RUNNING,
 * WARM_SOCKET_ACCESS naming the group to join) but sends no RPC. */
WARM_API int warm_connect(const char *socket_path, struct warm_client **ret, struct warm_error *err);
/* Closes the connection and frees the client. NULL-safe. */
WARM_API void warm_disconnect(struct warm_client *c);
/* The socket path this client uses. Valid until warm_disconnect. */
WARM_API const char *warm_client_socket(const struct warm_client *c);
/* Deadline of unary calls (everything but generate and chat), microseconds; 0 = none.
 * The default is 10 minutes (loading a big model takes a while). */
WARM_API void warm_client_set_timeout(struct warm_client *c, uint64_t usec);
/* For a trusted proxy (a uid in the daemon's trusted_proxy_uids, such as warm-httpd):
 * every later call on c is served as uid — its policy, admin rights and namespace, as if
 * uid had connected. A negative uid clears it (calls are the connection's own again). */
WARM_API void warm_client_act_for_uid(struct warm_client *c, int64_t uid);
/* Like warm_client_act_for_uid for a user the proxy cannot name: every later call carries
 * the user's bearer token (see warm_token_create); the daemon answers UNAUTHENTICATED for
 * an unknown one. Copied; NULL clears. BAD_REQUEST for a token that is not 1..256
 * printable ASCII bytes. */
WARM_API int warm_client_act_for_token(struct warm_client *c, const char *token,
                                       struct warm_error *err);

/* ---- info ---------------------------------------------------------------------------- */

#define WARM_INFO_MAX_DEVICES 16
/* A device the loaded models run on (GetInfo's devices). */
struct warm_device_info {
    char name[16];              /* "cpu", "cpu0".. (CPU partitions), "cuda:0".. */
    char kind[8];               /* "cpu" or "cuda" */
    char description[128];      /* a GPU's own name ("NVIDIA H200"); "" for the CPU */
    uint64_t reserved_bytes;    /* their weights, KV and scratch there */
};

struct warm_info {
    char version[32];
    char api_version[32];
    uint64_t uptime_usec;
    /* The caller as the daemon sees it. */
    uint32_t uid, gid, pid;
    bool admin;
    char namespace_[160];
    /* Effective configuration. */
    uint32_t threads, ctx_size, parallel;
    char cache_type_k[16], cache_type_v[16];
    bool kv_rotation;
    uint64_t max_keep_alive_usec;
    uint32_t max_loaded_models;
    uint64_t memory_budget_bytes, cache_max_bytes;
    uint32_t models_available, models_loaded, active_streams;
    char features[256];         /* space-separated, e.g. "cpu store" */
    /* Set when a trusted proxy made the call on behalf of uid (warm_client_act_for_*). */
    bool via_proxy;
    uint32_t proxy_uid;
    /* The devices the loaded models run on (the first WARM_INFO_MAX_DEVICES; none while no
     * model is loaded), with the bytes reserved on each. */
    uint32_t n_devices;
    struct warm_device_info devices[WARM_INFO_MAX_DEVICES];
};
WARM_API int warm_info_get(struct warm_client *c, struct warm_info *ret, struct warm_error *err);

/* Makes a bearer token for the calling user (only on the socket itself, not through a
 * proxy). *ret_token ("warm_" + 64 hex digits) is freed with warm_free; the daemon keeps
 * only its hash, so it cannot be shown again. */
WARM_API int warm_token_create(struct warm_client *c, char **ret_token, struct warm_error *err);
/* Revokes every token of the calling user; *ret_n (may be NULL) gets how many. */
WARM_API int warm_tokens_revoke(struct warm_client *c, uint32_t *ret_n, struct warm_error *err);

/* Prometheus text exposition of the daemon's counters; *ret_text is NUL-terminated and
 * freed with warm_free. */
WARM_API int warm_metrics_get(struct warm_client *c, char **ret_text, struct warm_error *err);

/* ---- models -------------------------------------------------------------------------- */

struct warm_model_info {
    char name[136];
    uint64_t size_bytes;
    uint64_t modified_usec;     /* µs since the epoch */
    bool loaded;
    char fingerprint[40];       /* 32 hex digits; empty until loaded once */
    char architecture[64];      /* general.architecture, read without loading */
    uint64_t memory_bytes;      /* 0 when not loaded */
    uint64_t keep_alive_left_usec;
    bool available;             /* false: the daemon skips the file, for this reason: */
    char unavailable_reason[320];
    char quantization[96];      /* weight bytes by type: "Q4_K 71%, Q6_K 24%, F32 5%" */
    uint64_t n_params;          /* 0 when the file does not say */
    uint32_t trained_context;   /* tokens; 0 when the file does not say */
};

/* One metadata pair of a model file, as text (arrays summarized, long strings cut). */
struct warm_metadata_entry {
    const char *key, *type, *value;
};

/* A model in detail (warm_model_show): read from its file, without loading it. */
struct warm_model_details {
    struct warm_model_info info;
    char chat_template[32];     /* family warmd renders ("chatml", ...), "none" */
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v, n_vocab;
    /* an embedding model (warm_embed, not generation), its pooling and vector width */
    bool embedding;
    char pooling[8];
    uint32_t embedding_length;
    /* the cache it gets from this daemon: context per sequence (capped at the trained
     * context unless the daemon allows more), sequences, K/V types, rotation, chunk */
    uint32_t ctx_size, parallel, cache_chunk_tokens;
    char cache_type_k[16], cache_type_v[16];
    bool rotate_k, rotate_v;
    size_t n_metadata;
    const struct warm_metadata_entry *metadata; /* in file order; inside this allocation */
};

/* Every model of the daemon's models directory, sorted by name. *ret is an array of
 * *ret_n entries freed with warm_free (NULL when there are none). */
WARM_API int warm_models_list(struct warm_client *c, struct warm_model_info **ret, size_t *ret_n,
                              struct warm_error *err);
/* Loads a model now and holds the caller's keep-alive lease on it for keep_alive_usec after
 * the caller's last use (0 = the daemon's default; capped by the daemon), as a generation
 * would; other users' leases are their own. Admin only. ret_info and ret_load_usec may be
 * NULL. */
WARM_API int warm_model_load(struct warm_client *c, const char *model, uint64_t keep_alive_usec,
                             struct warm_model_info *ret_info, uint64_t *ret_load_usec,
                             struct warm_error *err);
/* Unloads a model. Admin only. Returns 1 when it was resident, 0 when it was not. */
WARM_API int warm_model_unload(struct warm_client *c, const char *model, struct warm_error *err);
/* One model in detail (NULL = the daemon's default); *ret is one allocation freed with
 * warm_free. A file the daemon skips is answered too (info.available false, with the
 * reason, and no metadata). */
WARM_API int warm_model_show(struct warm_client *c, const char *model,
                             struct warm_model_details **ret, struct warm_error *err);

/* ---- tokens -------------------------------------------------------------------------- */

enum warm_tokenize_flags {
    WARM_TOKENIZE_ADD_SPECIAL = 1 << 0,   /* BOS/EOS as the model's tokenizer says */
    WARM_TOKENIZE_PARSE_SPECIAL = 1 << 1, /* "<|im_start|>" is the special token */
};
/* Text (UTF-8) to token ids; *ret_tokens (freed with warm_free) has *ret_n ids. */
WARM_API int warm_tokenize(struct warm_client *c, const char *model, const char *text,
                           unsigned flags, int32_t **ret_tokens, size_t *ret_n,
                           struct warm_error *err);

enum warm_detokenize_flags {
    WARM_DETOKENIZE_SKIP_SPECIAL = 1 << 0, /* leave out BOS, EOS and other control tokens */
};
/* Token ids to text: *ret_text (freed with warm_free) holds *ret_len bytes plus a NUL; the
 * bytes may end inside a UTF-8 character. */
WARM_API int warm_detokenize(struct warm_client *c, const char *model, const int32_t *tokens,
                             size_t n_tokens, unsigned flags, char **ret_text, size_t *ret_len,
                             struct warm_error *err);

/* ---- generation ---------------------------------------------------------------------- */

/* Sampling parameters, taken as written (see warm.proto for ranges and "off" values).
 * warm_sampling_default() gives the daemon's defaults; temperature 0 is greedy. */
struct warm_sampling {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;              /* 0 = random, reported in the summary */
    float repeat_penalty;
    int32_t repeat_last_n;
    float frequency_penalty;
    float presence_penalty;
};
WARM_API struct warm_sampling warm_sampling_default(void);

enum warm_cache_mode {
    WARM_CACHE_USE = 0,         /* restore the longest cached prefix, save new chunks */
    WARM_CACHE_SKIP = 1,        /* neither read nor write the prompt cache */
    WARM_CACHE_REFRESH = 2,     /* recompute and overwrite */
    WARM_CACHE_MODE_COUNT
};

/* Where a request stands before its first token (warm_gen_params.on_progress). */
enum warm_progress_stage {
    WARM_PROGRESS_LOAD = 1,     /* the model is being loaded (no token counts yet) */
    WARM_PROGRESS_PREFILL = 2,  /* the prompt is being computed */
};
struct warm_progress {
    enum warm_progress_stage stage;
    uint32_t prompt_tokens;     /* the whole prompt (0 while loading) */
    uint32_t done_tokens;       /* ready: from RAM, from the cache and computed so far */
    uint32_t ram_tokens, store_tokens;  /* of done_tokens: reused, restored */
    uint64_t elapsed_usec;      /* since the daemon received the request */
};
/* Called on the calling thread as progress events arrive: before a model load, and while
 * a prompt longer than one batch step is prefilled (the last one has done_tokens ==
 * prompt_tokens). userdata is the token callback's. */
typedef void (*warm_progress_fn)(const struct warm_progress *p, void *userdata);

/* keep_alive_usec: as long as the daemon allows (its max_keep_alive). */
#define WARM_KEEP_ALIVE_FOREVER UINT64_MAX

/* Called for every token as it arrives. id is -1 for an event that only releases held-back
 * text at the end; text (len bytes, NUL-terminated) holds complete UTF-8 characters only
 * and may be empty. Return 0 to go on, non-zero to cancel the stream (the call then
 * returns -WARM_CANCELLED). */
typedef int (*warm_token_fn)(int32_t id, const char *text, size_t len, void *userdata);

/* A piece of a tool call as the answer streams it (warm.proto's ToolCallDelta): the
 * first piece of call index has its id and name (non-NULL); the next ones NULL there and
 * the next len bytes of its arguments' JSON text. The pieces of a call concatenate to its
 * arguments as the model wrote them; every call warm_summary.tool_calls lists has come this
 * way first, with the same index and id. The strings live until the callback returns. */
struct warm_tool_call_delta {
    uint32_t index;
    const char *id, *name;
    const char *arguments;
    size_t len;
};
typedef int (*warm_tool_call_fn)(const struct warm_tool_call_delta *delta, void *userdata);

/* warm_gen_params.tool_choice (warm.proto's ToolChoice). */
enum warm_tool_choice {
    WARM_TOOLS_AUTO = 0,        /* the model decides (the default) */
    WARM_TOOLS_NONE = 1,        /* the tools are not shown to the model */
    WARM_TOOLS_REQUIRED = 2,    /* the answer is one or more calls */
    WARM_TOOLS_FUNCTION = 3,    /* the answer is a call of tool_choice_name */
};
/* warm_gen_params.think (warm.proto's Think). */
enum warm_think {
    WARM_THINK_DEFAULT = 0,     /* the family's default (qwen3, qwen35 think) */
    WARM_THINK_ON = 1,
    WARM_THINK_OFF = 2,
    /* thinking with an effort: gpt-oss (harmony) writes it into its system message; other
     * thinking families take it as WARM_THINK_ON, the others ignore it (warm.proto's Think) */
    WARM_THINK_LOW = 3,
    WARM_THINK_MEDIUM = 4,
    WARM_THINK_HIGH = 5,
};

/* What generate and chat have in common. Zero-initialize, then set what you need. */
struct warm_gen_params {
    const char *model;          /* NULL or "" = the daemon's default model */
    uint32_t max_tokens;        /* 0 = until a stop condition or the context is full */
    const struct warm_sampling *sampling;   /* NULL = the daemon's defaults */
    const char *const *stop;    /* stop strings (at most 16); the match is not sent */
    size_t n_stop;
    enum warm_cache_mode cache_mode;
    const char *cache_namespace; /* NULL or "" = the caller's own */
    uint64_t keep_alive_usec;   /* 0 = the daemon's default; WARM_KEEP_ALIVE_FOREVER; more
                                   than the daemon's cap is capped (summary.warnings) */
    /* Cancellation from another thread or a signal handler: when *cancel becomes
     * non-zero the call is cancelled within about 50 ms and returns -WARM_CANCELLED. */
    const volatile sig_atomic_t *cancel;
    /* Unload the model once the request is over and nothing else uses it (Ollama's
     * keep_alive 0); keep_alive_usec is then ignored. */
    bool unload_after;
    warm_progress_fn on_progress;   /* NULL = none */
    /* Constrained output, at most one of the two (NULL or "" = free text; at most 65536
     * bytes): a JSON Schema as text (WARM_JSON_OBJECT is JSON mode), or a grammar in warmd's
     * GBNF-like form (start rule `root`). The output then stays in that language and, when
     * it ends with WARM_STOP_EOS, is one complete value. The daemon compiles it before
     * queueing: -WARM_INVALID_ARGUMENT naming the problem ("format.json_schema: unsupported
     * keyword 'pattern' at /properties/zip"); -WARM_FAILED_PRECONDITION when the model's
     * tokens cannot continue the output. See warm.proto's OutputFormat. */
    const char *json_schema;
    const char *grammar;
    /* warm_chat only (warm_generate refuses them). tools_json: the tools the model may call,
     * a JSON array of OpenAI-shaped tools ([{"type": "function", "function": {"name",
     * "description", "parameters"}}], at most 262144 bytes; NULL or "" = none); a model whose
     * chat family has no tool format refuses them (-WARM_INVALID_ARGUMENT naming it). The
     * answer's calls come in warm_summary.tool_calls (stop reason WARM_STOP_TOOL_CALLS), not
     * as text. tool_choice WARM_TOOLS_REQUIRED or WARM_TOOLS_FUNCTION (the function
     * tool_choice_name) forces a call whose arguments follow the tool's parameters (not with
     * json_schema or grammar). max_tool_calls 1: at most one call (OpenAI
     * parallel_tool_calls false); 0 = any number. See warm.proto's ChatRequest. */
    const char *tools_json;
    enum warm_tool_choice tool_choice;
    const char *tool_choice_name;
    uint32_t max_tool_calls;
    /* Thinking families (qwen3, qwen35): WARM_THINK_OFF answers at once; WARM_THINK_ON for
     * a family that does not think is -WARM_INVALID_ARGUMENT. */
    enum warm_think think;
    /* warm_chat: called with the reasoning text a token adds (thinking families), before
     * on_token is called for the same token with its answer text; NULL = the reasoning is
     * not delivered. Same contract as on_token (non-zero cancels). */
    warm_token_fn on_reasoning;
    /* warm_chat with tools: called with each piece of a tool call as it streams (see
     * struct warm_tool_call_delta); NULL = the calls come in the summary only. Non-zero
     * cancels, as on_token. */
    warm_tool_call_fn on_tool_call;
};

/* warm_gen_params.json_schema for JSON mode: any JSON object. */
#define WARM_JSON_OBJECT "{\"type\":\"object\"}"

enum warm_stop_reason {
    WARM_STOP_UNSPECIFIED = 0,
    WARM_STOP_MAX_TOKENS = 1,
    WARM_STOP_EOS = 2,
    WARM_STOP_STOP_STRING = 3,
    WARM_STOP_CONTEXT_FULL = 4,
    WARM_STOP_TOOL_CALLS = 5,   /* chat: the answer ended with tool calls */
    WARM_STOP_REASON_COUNT
};
/* "max_tokens", "eos", "stop_string", "context_full", "tool_calls", "unspecified". */
WARM_API const char *warm_stop_reason_name(int reason);

/* A cache entry the daemon found for the prompt but refused. */
struct warm_rejected {
    uint32_t position;
    char reason[64];
    char message[256];
};

/* A tool call: one an assistant message made (warm_chat_message.tool_calls: id may be NULL)
 * or one an answer made (warm_summary.tool_calls: the strings belong to the summary). */
struct warm_tool_call {
    const char *id;             /* "call_" + 24 letters and digits, made by the daemon */
    const char *name;           /* the function's name */
    const char *arguments;      /* a JSON object, as text */
};

/* The last event of a stream. prompt_tokens = ram_tokens + store_tokens +
 * evaluated_tokens. Release with warm_summary_done. */
struct warm_summary {
    uint32_t prompt_tokens, ram_tokens, store_tokens, evaluated_tokens, generated_tokens;
    enum warm_stop_reason stop_reason;
    char stop_string[260];
    uint64_t queue_usec, load_usec, restore_usec, prefill_usec, decode_usec, total_usec;
    uint64_t seed;
    struct warm_rejected *rejected;  /* owned */
    size_t n_rejected;
    uint64_t keep_alive_usec;   /* how long the model stays loaded (0 with unload_after) */
    char warnings[512];         /* what the daemon said about the request, one per line */
    struct warm_tool_call *tool_calls;  /* owned: the answer's tool calls (chat with tools) */
    size_t n_tool_calls;
};
WARM_API void warm_summary_done(struct warm_summary *s);

/* Completes a prompt: exactly one of prompt (UTF-8 text) and tokens (used as given) is
 * set. on_token may be NULL. ret_summary may be NULL. */
WARM_API int warm_generate(struct warm_client *c, const struct warm_gen_params *params,
                           const char *prompt, const int32_t *tokens, size_t n_tokens,
                           warm_token_fn on_token, void *userdata,
                           struct warm_summary *ret_summary, struct warm_error *err);

struct warm_chat_message {
    const char *role;           /* "system", "user", "assistant" or "tool" */
    const char *content;
    /* Assistant messages: the reasoning before the content (thinking families; NULL =
     * none) and the tool calls made (families with tools). */
    const char *reasoning;
    const struct warm_tool_call *tool_calls;
    size_t n_tool_calls;
    /* Tool messages: the call answered and the function's name (NULL = not given). */
    const char *tool_call_id;
    const char *name;
};
enum warm_chat_flags {
    WARM_CHAT_CONTINUE_LAST = 1 << 0, /* continue the last assistant message */
};
/* Renders the conversation (oldest first) with the model's chat template on the daemon,
 * then streams like warm_generate: on_token gets the answer (a thinking family's reasoning
 * goes to params->on_reasoning, tool calls to the summary). */
WARM_API int warm_chat(struct warm_client *c, const struct warm_gen_params *params,
                       const struct warm_chat_message *messages, size_t n_messages,
                       unsigned flags, warm_token_fn on_token, void *userdata,
                       struct warm_summary *ret_summary, struct warm_error *err);

/* ---- prompt cache -------------------------------------------------------------------- */

/* namespace_: NULL or "" = the caller's own; "*" = all (admin only). */
struct warm_cache_stats {
    uint64_t entries, bytes, budget_bytes, hits, misses, rejections, evictions;
};
WARM_API int warm_cache_stats(struct warm_client *c, const char *namespace_,
                              struct warm_cache_stats *ret, struct warm_error *err);

struct warm_cache_entry {
    char namespace_[160];
    char fingerprint[40];
    char key[72];
    uint32_t n_tokens, position;
    uint64_t bytes;
    uint64_t last_used_usec;
    char kind[8];               /* "chunk" or "tail" */
    char model[136];            /* the model's name when the daemon knows it, else "" */
};
/* Entries of a namespace, of one model (NULL = all), at most limit (0 = 100), the most
 * recently used first. *ret
 * (freed with warm_free) has *ret_n entries. */
WARM_API int warm_cache_list(struct warm_client *c, const char *namespace_, const char *model,
                             uint32_t limit, struct warm_cache_entry **ret, size_t *ret_n,
                             struct warm_error *err);
/* Removes entries of a namespace ("*" = all, admin only), of one model (NULL = all).
 * ret_entries and ret_bytes may be NULL. */
WARM_API int warm_cache_purge(struct warm_client *c, const char *namespace_, const char *model,
                              uint64_t *ret_entries, uint64_t *ret_bytes, struct warm_error *err);

/* ---- embeddings ---------------------------------------------------------------------- */

/* What warm_embed sends (warm.proto EmbedRequest): texts (inputs) or token arrays, exactly
 * one of the two; at most 2048 inputs and 262144 tokens in all. */
struct warm_embed_params {
    const char *model;                  /* NULL = the daemon's default */
    const char *const *inputs;          /* n_inputs UTF-8 texts */
    size_t n_inputs;
    const int32_t *const *token_inputs; /* or n_token_inputs arrays of ids, used as given */
    const size_t *n_tokens;             /* their lengths */
    size_t n_token_inputs;
    bool truncate;        /* cut an input past the model's limit instead of refusing it */
    bool raw;             /* the pooled vectors as computed; false = L2-normalized */
    uint32_t dimensions;  /* keep the first ones (Matryoshka), then normalize; 0 = all */
    uint64_t keep_alive_usec; /* the caller's lease, as warm_gen_params' */
    bool unload_after;
};

/* One allocation, freed with warm_free: vector i is values[i * dimensions ..]. */
struct warm_embed_result {
    char model[136];
    size_t n_embeddings;
    uint32_t dimensions;
    uint32_t prompt_tokens;             /* tokens of all inputs, after truncation */
    uint32_t cached_inputs;             /* answered from the daemon's embedding cache */
    uint32_t truncated_inputs;
    uint64_t load_usec, total_usec, keep_alive_usec;
    float *values;                      /* inside this allocation */
};
/* Embeddings of the inputs with an embedding model. A text model is FAILED_PRECONDITION
 * ("model 'x' does not produce embeddings"); an input past the model's limit without
 * truncate is INVALID_ARGUMENT naming its index and token count. */
WARM_API int warm_embed(struct warm_client *c, const struct warm_embed_params *p,
                        struct warm_embed_result **ret, struct warm_error *err);

#ifdef __cplusplus
}
#endif
