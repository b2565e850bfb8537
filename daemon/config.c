/* config — the schema table and its parsers (see config.h). */
#include "daemon/config.h"
#include "daemon/registry.h"
#include "engine/engine.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const config_cache_type_names[CONFIG_CACHE_TYPE_COUNT + 1] = {
    [CONFIG_CACHE_TYPE_F32] = "f32",   [CONFIG_CACHE_TYPE_F16] = "f16",
    [CONFIG_CACHE_TYPE_BF16] = "bf16", [CONFIG_CACHE_TYPE_Q8_0] = "q8_0",
    [CONFIG_CACHE_TYPE_Q4_0] = "q4_0", [CONFIG_CACHE_TYPE_Q4_1] = "q4_1",
    [CONFIG_CACHE_TYPE_Q5_0] = "q5_0", [CONFIG_CACHE_TYPE_Q5_1] = "q5_1",
    [CONFIG_CACHE_TYPE_IQ4_NL] = "iq4_nl", [CONFIG_CACHE_TYPE_COUNT] = NULL,
};
static const char *const split_names[] = {"none", "tensor", NULL}; /* enum engine_split */
/* enum engine_experts_place */
static const char *const experts_names[] = {"auto", "gpu", "cpu", NULL};

static const char *const log_level_names[LOG_LEVEL_COUNT + 1] = {
    [LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warn", [LOG_LEVEL_INFO] = "info",
    [LOG_LEVEL_DEBUG] = "debug", [LOG_LEVEL_COUNT] = NULL,
};

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define TIB (1024ULL * GIB)
#define SEC_USEC 1000000ULL
#define DAY_USEC (86400ULL * SEC_USEC)

#define OFF(field) offsetof(struct config, field)
#define SIZE(field) sizeof(((struct config *)0)->field)
#define TEXT_(x) #x
#define TEXT(x) TEXT_(x) /* a number macro as the text of a default */

/* ---- structured strings: checked when read by the parser their user runs -------------- */

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

static int check_device(const char *v, struct err_detail *d) {
    enum engine_device_kind kind;
    int index;
    return engine_device_parse(v, &kind, &index, d);
}

/* "" = one CPU, as the runner reads it */
static int check_devices(const char *v, struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    return *v ? engine_devices_parse_into(v, &p, d) : 0;
}

static int check_tensor_split(const char *v, struct err_detail *d) {
    float share[ENGINE_MAX_DEVICES];
    return *v ? engine_tensor_split_parse(v, share, ENGINE_MAX_DEVICES, d) : 0;
}

static int check_model_name(const char *v, struct err_detail *d) {
    return *v ? registry_name_check(v, d) : 0;
}

static int check_model_names(const char *v, struct err_detail *d) {
    char list[SIZE(preload)];
    if (snprintf(list, sizeof list, "%s", v) >= (int)sizeof list)
        return err_set(d, ERR_CONFIG, "longer than %zu bytes", sizeof list - 1);
    char *save = NULL;
    for (char *name = strtok_r(list, CONFIG_LIST_SEP, &save); name;
         name = strtok_r(NULL, CONFIG_LIST_SEP, &save)) {
        struct err_detail nd = {0};
        int r = registry_name_check(name, &nd);
        if (r < 0) return err_set(d, r, "'%s': %s", name, err_msg(&nd, r));
    }
    return 0;
}

int config_shared_ns_next(char **s, char **ret_name, char **ret_groups, struct err_detail *d) {
    while (*s) {
        char *ent = *s, *end = strchr(ent, ';');
        if (end) *end = 0;
        *s = end ? end + 1 : NULL;
        ent = trim(ent);
        if (!*ent) continue;
        char *colon = strrchr(ent, ':');
        if (colon) *colon = 0;
        char *name = trim(ent), *groups = colon ? trim(colon + 1) : NULL;
        if (!colon || !*name || strspn(groups, ", \t") == strlen(groups))
            return err_set(d, ERR_CONFIG, "'%s%s%s' is not NAME:GROUP[,GROUP...]", name,
                           colon ? ":" : "", colon ? groups : "");
        if (strncmp(name, "uid:", 4) == 0)
            return err_set(d, ERR_CONFIG, "'%s': a user's own namespace is never shared", name);
        *ret_name = name;
        *ret_groups = groups;
        return 1;
    }
    return 0;
}

static int check_shared_namespaces(const char *v, struct err_detail *d) {
    char list[SIZE(cache_shared_namespaces)];
    if (snprintf(list, sizeof list, "%s", v) >= (int)sizeof list)
        return err_set(d, ERR_CONFIG, "longer than %zu bytes", sizeof list - 1);
    char *s = list, *name, *groups;
    int r;
    while ((r = config_shared_ns_next(&s, &name, &groups, d)) > 0) {}
    return r;
}

/* The schema. Order = the order of --help and --print-config. */
const struct config_key config_keys[] = {
    {"socket", CONFIG_TYPE_PATH, OFF(socket), "/run/warmd.sock", 0, SIZE(socket), NULL,
     "Unix socket to bind when not socket-activated (mode 0660, guarded by PATH.lock)"},
    {"socket_group", CONFIG_TYPE_GROUP, OFF(socket_group), "", 0, 0, NULL,
     "group owning the socket warmd binds; empty = the daemon's group"},
    {"models_dir", CONFIG_TYPE_PATH, OFF(models_dir), "/var/lib/warmd/models", 0,
     SIZE(models_dir), NULL, "directory of *.gguf models (model name = file stem)"},
    {"state_dir", CONFIG_TYPE_PATH, OFF(state_dir), "/var/lib/warmd", 0, SIZE(state_dir),
     NULL, "state directory (the prompt cache lives in STATE_DIR/cache)"},
    {"default_model", CONFIG_TYPE_STRING, OFF(default_model), "", 0, SIZE(default_model),
     NULL, "model used when a request names none; empty = requests must name one"},
    {"preload", CONFIG_TYPE_STRING, OFF(preload), "", 0, SIZE(preload), NULL,
     "models (comma-separated names) loaded before the daemon reports ready; they stay "
     "for max_keep_alive after their last use"},
    {"threads", CONFIG_TYPE_U32, OFF(threads), "0", 0, 1024, NULL,
     "compute threads per model; 0 = number of online CPUs"},
    {"ctx_size", CONFIG_TYPE_U32, OFF(ctx_size), "4096", 16, 1048576, NULL,
     "context size per sequence, tokens; a model gets at most the context it was trained "
     "for (unless ctx_above_trained)"},
    {"ctx_above_trained", CONFIG_TYPE_BOOL, OFF(ctx_above_trained), "no", 0, 0, NULL,
     "give models the whole ctx_size even past their trained context (quality drops "
     "there; prompts longer than it get a warning)"},
    {"parallel", CONFIG_TYPE_U32, OFF(parallel), "4", 1, 256, NULL,
     "sequences decoded together per loaded model"},
    {"cache_type_k", CONFIG_TYPE_ENUM, OFF(cache_type_k), "f16", 0, 0,
     config_cache_type_names, "KV cache type of keys"},
    {"cache_type_v", CONFIG_TYPE_ENUM, OFF(cache_type_v), "f16", 0, 0,
     config_cache_type_names, "KV cache type of values"},
    {"kv_rotation", CONFIG_TYPE_BOOL, OFF(kv_rotation), "on", 0, 0, NULL,
     "Hadamard rotation of quantized K/V (WARM_ATTN_ROT_DISABLE=1 forces off)"},
    {"device", CONFIG_TYPE_STRING, OFF(device), "auto", 0, SIZE(device), NULL,
     "device of a model on one device: auto (cuda:0 where the model runs and fits, else the "
     "CPU), cpu, or cuda:N"},
    {"gpu_layers", CONFIG_TYPE_U32, OFF(gpu_layers), "0", 0, 65536, NULL,
     "the last layers of a model on its CUDA device, the others on the CPU (0 = all)"},
    {"experts", CONFIG_TYPE_ENUM, OFF(experts), "auto", 0, 0, experts_names,
     "where a mixture-of-experts model's routed experts go when it runs on a CUDA device: "
     "auto (on the GPU when its weights fit, else on the CPU), gpu, or cpu (attention, "
     "router and shared expert stay on the GPU)"},
    {"devices", CONFIG_TYPE_STRING, OFF(devices), "cpu", 0, SIZE(devices), NULL,
     "devices a model is split over: cpu (one), cpu,cpu,... for CPU partitions or "
     "cuda:0,cuda:1,... for GPUs (cuda:0,cuda:0: two contexts on one GPU), each with its "
     "share of the weights and KV heads; needs split = tensor"},
    {"split", CONFIG_TYPE_ENUM, OFF(split), "none", 0, 0, split_names,
     "how a model spreads over several devices: none, or tensor (by heads and FFN rows)"},
    {"tensor_split", CONFIG_TYPE_STRING, OFF(tensor_split), "", 0, SIZE(tensor_split), NULL,
     "relative share of each device under split = tensor, e.g. 3,1 (empty = equal)"},
    {"cache_max_bytes", CONFIG_TYPE_BYTES, OFF(cache_max_bytes), "8G", 0, 1024 * TIB, NULL,
     "byte budget of the persistent prompt cache; 0 = no persistent cache"},
    {"cache_chunk_tokens", CONFIG_TYPE_U32, OFF(cache_chunk_tokens), TEXT(ENGINE_CHUNK_TOKENS),
     16, 4096, NULL,
     "tokens per prompt-cache chunk record (a changed value starts new chains)"},
    {"cache_restore_min_tokens", CONFIG_TYPE_U32, OFF(cache_restore_min_tokens), "16", 0,
     1048576, NULL,
     "prompt tokens past what RAM holds below which the prompt cache is not looked up"},
    {"cache_shared_namespaces", CONFIG_TYPE_STRING, OFF(cache_shared_namespaces), "", 0,
     SIZE(cache_shared_namespaces), NULL,
     "shared prompt-cache namespaces, 'NAME:GROUP[,GROUP...]' separated by ';': members "
     "of a listed group (primary or supplementary) may name NAME in a request"},
    {"keep_alive", CONFIG_TYPE_DURATION, OFF(keep_alive_usec), "5m", 0, 365 * DAY_USEC,
     NULL, "how long an idle model stays loaded by default"},
    {"max_keep_alive", CONFIG_TYPE_DURATION, OFF(max_keep_alive_usec), "1h", 0,
     365 * DAY_USEC, NULL, "cap on the keep-alive a client may ask for"},
    {"max_loaded_models", CONFIG_TYPE_U32, OFF(max_loaded_models), "2", 1, 64, NULL,
     "models resident at once; idle ones are unloaded to make room"},
    {"memory_budget", CONFIG_TYPE_BYTES, OFF(memory_budget_bytes), "0", 0, 1024 * TIB, NULL,
     "memory for loaded models (weights, KV and recurrent state, scratch); a load that does "
     "not fit is refused before anything is unloaded; 0 = 3/4 of physical memory"},
    {"allowed_uids", CONFIG_TYPE_UIDS, OFF(allowed_uids), "", 0, 0, NULL,
     "users allowed to connect (names or ids, comma-separated); with allowed_groups "
     "empty too, anyone who can open the socket; root and the daemon's user always"},
    {"allowed_groups", CONFIG_TYPE_GROUPS, OFF(allowed_groups), "", 0, 0, NULL,
     "groups whose members may connect (primary or supplementary)"},
    {"trusted_proxy_uids", CONFIG_TYPE_UIDS, OFF(trusted_proxy_uids), "", 0, 0, NULL,
     "users whose connections may ask to be served on behalf of another uid (warm-httpd's "
     "user); that uid's policy, admin rights and namespace then apply"},
    {"admin_group", CONFIG_TYPE_GROUP, OFF(admin_group), "", 0, 0, NULL,
     "group allowed LoadModel, UnloadModel and purging other namespaces; empty = root "
     "and the daemon's user only"},
    {"max_request_bytes", CONFIG_TYPE_BYTES, OFF(max_request_bytes), "4M", 1024, GIB, NULL,
     "largest request message accepted"},
    {"max_streams", CONFIG_TYPE_U32, OFF(max_streams), "64", 1, 4096, NULL,
     "concurrent calls per connection"},
    {"max_metadata_bytes", CONFIG_TYPE_BYTES, OFF(max_metadata_bytes), "16K", 1024, MIB,
     NULL, "largest request metadata (headers)"},
    {"max_prompt_tokens", CONFIG_TYPE_U32, OFF(max_prompt_tokens), "0", 0, 1048576, NULL,
     "longest prompt in tokens; 0 = ctx_size"},
    {"max_connections", CONFIG_TYPE_U32, OFF(max_connections), "1024", 1, 65536, NULL,
     "connections open at once, all users together; more are refused at accept"},
    {"max_connections_per_uid", CONFIG_TYPE_U32, OFF(max_connections_per_uid), "128", 1, 65536,
     NULL, "connections open at once per uid; more are refused at accept"},
    {"connection_idle_timeout", CONFIG_TYPE_DURATION, OFF(connection_idle_timeout_usec), "5m",
     1000, 365 * DAY_USEC, NULL,
     "a connection without a call in progress for this long is closed (clients reconnect)"},
    {"request_timeout", CONFIG_TYPE_DURATION, OFF(request_timeout_usec), "30s", 1000,
     DAY_USEC, NULL, "time a client has to send a request whole once it started it"},
    {"slow_reader_timeout", CONFIG_TYPE_DURATION, OFF(slow_reader_timeout_usec), "30s", 1000,
     DAY_USEC, NULL,
     "a stream or connection whose client reads nothing of what it is sent for this long "
     "is ended"},
    {"max_pending_bytes_per_uid", CONFIG_TYPE_BYTES, OFF(max_pending_bytes_per_uid), "64M",
     64 * KIB, 1024 * GIB, NULL,
     "request bytes not yet answered, and response bytes not yet read, held for one uid's "
     "connections; past it the uid's connections are not read / its calls fail"},
    {"max_pending_bytes", CONFIG_TYPE_BYTES, OFF(max_pending_bytes), "256M", 64 * KIB,
     1024 * GIB, NULL, "the same for all connections together"},
    {"max_stream_resets", CONFIG_TYPE_U32, OFF(max_stream_resets), "200", 1, 1000000, NULL,
     "streams a client may cancel per connection in 10 s; more closes the connection "
     "(HTTP/2 rapid reset)"},
    {"max_queued_per_uid", CONFIG_TYPE_U32, OFF(max_queued_per_uid), "0", 0, 65536, NULL,
     "generation requests one uid may have queued or running per model; 0 = a quarter of "
     "the model's queue (4 x parallel), at least parallel"},
    {"log_level", CONFIG_TYPE_ENUM, OFF(log_level), "info", 0, 0, log_level_names,
     "error, warn, info or debug"},
};
const size_t config_n_keys = ARRAY_SIZE(config_keys);

/* The STRING keys with a syntax of their own (a device list, shares, names) and the parser
 * their user runs later, run on the value when it is read: a typo is an error naming the
 * file and line at start, never at the first request that needs the value. */
static const struct {
    size_t offset;
    int (*check)(const char *value, struct err_detail *d);
} string_checks[] = {
    {OFF(default_model), check_model_name},
    {OFF(preload), check_model_names},
    {OFF(device), check_device},
    {OFF(devices), check_devices},
    {OFF(tensor_split), check_tensor_split},
    {OFF(cache_shared_namespaces), check_shared_namespaces},
};

/* ---- value parsers: text -> field; each writes dst only on success ----------------- */

static int parse_u64(const char *s, uint64_t *ret) {
    if (!isdigit((unsigned char)*s)) return -EINVAL;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
            return -ERANGE;
    }
    if (*s) return -EINVAL;
    *ret = v;
    return 0;
}

/* A number followed by a unit from table; a bare number uses the unit named "". */
struct unit {
    const char *suffix;
    uint64_t mult;
};
static const struct unit byte_units[] = {
    {"", 1}, {"B", 1}, {"K", KIB}, {"KiB", KIB}, {"M", MIB}, {"MiB", MIB},
    {"G", GIB}, {"GiB", GIB}, {"T", TIB}, {"TiB", TIB}, {NULL, 0},
};
static const struct unit duration_units[] = {
    {"us", 1}, {"ms", 1000}, {"s", SEC_USEC}, {"", SEC_USEC}, {"m", 60 * SEC_USEC},
    {"min", 60 * SEC_USEC}, {"h", 3600 * SEC_USEC}, {"d", DAY_USEC}, {NULL, 0},
};

static int parse_with_unit(const char *s, const struct unit *units, uint64_t *ret) {
    size_t n = 0;
    while (isdigit((unsigned char)s[n])) n++;
    if (n == 0 || n > 20) return -EINVAL;
    char num[24];
    memcpy(num, s, n);
    num[n] = 0;
    uint64_t v;
    int r = parse_u64(num, &v);
    if (r < 0) return r;
    const char *suffix = s + n;
    while (*suffix == ' ') suffix++;
    for (const struct unit *u = units; u->suffix; u++) {
        if (strcasecmp(suffix, u->suffix) == 0 &&
            (strcmp(u->suffix, "m") != 0 || strcmp(suffix, "M") != 0)) {
            if (!u64_mul(v, u->mult, ret)) return -ERANGE;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_bool(const char *s, bool *ret) {
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) return *ret = true, 0;
        if (strcasecmp(s, no[i]) == 0) return *ret = false, 0;
    }
    return -EINVAL;
}

/* One user or group: a decimal id or a name looked up now. */
static int resolve_id(const char *tok, bool group, uint32_t *ret, struct err_detail *d,
                      const char *key) {
    uint64_t v;
    if (parse_u64(tok, &v) == 0) {
        if (v >= UINT32_MAX) return err_set(d, ERR_CONFIG, "%s: id %s out of range", key, tok);
        *ret = (uint32_t)v;
        return 0;
    }
    char buf[16384];
    if (group) {
        struct group gr, *res = NULL;
        if (getgrnam_r(tok, &gr, buf, sizeof buf, &res) == 0 && res) return *ret = res->gr_gid, 0;
        return err_set(d, ERR_CONFIG, "%s: unknown group '%s'", key, tok);
    }
    struct passwd pw, *res = NULL;
    if (getpwnam_r(tok, &pw, buf, sizeof buf, &res) == 0 && res) return *ret = res->pw_uid, 0;
    return err_set(d, ERR_CONFIG, "%s: unknown user '%s'", key, tok);
}

static int parse_idlist(const char *s, bool group, struct config_idlist *ret,
                        struct err_detail *d, const char *key) {
    struct config_idlist l = {0};
    char tok[256];
    while (*s) {
        size_t n = strcspn(s, ", \t");
        if (n >= sizeof tok) return err_set(d, ERR_CONFIG, "%s: name too long", key);
        if (n > 0) {
            if (l.n == CONFIG_MAX_IDS)
                return err_set(d, ERR_CONFIG, "%s: more than %d entries", key, CONFIG_MAX_IDS);
            memcpy(tok, s, n);
            tok[n] = 0;
            int r = resolve_id(tok, group, &l.ids[l.n], d, key);
            if (r < 0) return r;
            l.n++;
        }
        s += n;
        s += strspn(s, ", \t");
    }
    *ret = l;
    return 0;
}

static const struct config_key *key_find(const char *name) {
    char norm[64];
    size_t n = strlen(name);
    if (n >= sizeof norm) return NULL;
    for (size_t i = 0; i <= n; i++) norm[i] = name[i] == '-' ? '_' : name[i];
    for (size_t i = 0; i < config_n_keys; i++)
        if (strcmp(config_keys[i].name, norm) == 0) return &config_keys[i];
    return NULL;
}

static int key_set(struct config *c, const struct config_key *k, const char *v,
                   struct err_detail *d) {
    char *field = (char *)c + k->offset;
    uint64_t u;
    int r;
    switch (k->type) {
    case CONFIG_TYPE_PATH:
        if (v[0] != '/') return err_set(d, ERR_CONFIG, "%s: '%s' is not an absolute path", k->name, v);
        /* fall through */
    case CONFIG_TYPE_STRING:
        if (strlen(v) >= k->max)
            return err_set(d, ERR_CONFIG, "%s: longer than %llu bytes", k->name,
                           (unsigned long long)k->max - 1);
        for (size_t i = 0; i < ARRAY_SIZE(string_checks); i++) {
            struct err_detail kd = {0};
            if (string_checks[i].offset == k->offset && (r = string_checks[i].check(v, &kd)) < 0)
                return err_set(d, ERR_CONFIG, "%s: %s", k->name, err_msg(&kd, r));
        }
        strcpy(field, v);
        return 0;
    case CONFIG_TYPE_U32:
    case CONFIG_TYPE_BYTES:
    case CONFIG_TYPE_DURATION:
        r = k->type == CONFIG_TYPE_U32 ? parse_u64(v, &u)
            : parse_with_unit(v, k->type == CONFIG_TYPE_BYTES ? byte_units : duration_units, &u);
        if (r == -ERANGE || (r == 0 && (u < k->min || u > k->max)))
            return err_set(d, ERR_CONFIG, "%s: '%s' out of range [%llu, %llu]%s", k->name, v,
                           (unsigned long long)k->min, (unsigned long long)k->max,
                           k->type == CONFIG_TYPE_DURATION ? " microseconds"
                           : k->type == CONFIG_TYPE_BYTES  ? " bytes" : "");
        if (r < 0)
            return err_set(d, ERR_CONFIG, "%s: '%s' is not %s", k->name, v,
                           k->type == CONFIG_TYPE_U32     ? "a non-negative integer"
                           : k->type == CONFIG_TYPE_BYTES ? "a size (e.g. 512M, 8G)"
                                                          : "a duration (e.g. 30s, 5m, 1h)");
        if (k->type == CONFIG_TYPE_U32) *(uint32_t *)field = (uint32_t)u;
        else *(uint64_t *)field = u;
        return 0;
    case CONFIG_TYPE_BOOL:
        if (parse_bool(v, (bool *)field) < 0)
            return err_set(d, ERR_CONFIG, "%s: '%s' is not a boolean (yes/no, on/off)", k->name, v);
        return 0;
    case CONFIG_TYPE_ENUM:
        for (int i = 0; k->choices[i]; i++)
            if (strcasecmp(v, k->choices[i]) == 0) return *(int *)field = i, 0;
        {
            char list[256] = "";
            for (int i = 0; k->choices[i]; i++) {
                if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, k->choices[i], sizeof list - strlen(list) - 1);
            }
            return err_set(d, ERR_CONFIG, "%s: '%s' is not one of %s", k->name, v, list);
        }
    case CONFIG_TYPE_UIDS:
    case CONFIG_TYPE_GROUPS:
        return parse_idlist(v, k->type == CONFIG_TYPE_GROUPS, (struct config_idlist *)field, d,
                            k->name);
    case CONFIG_TYPE_GROUP: {
        struct config_group g = {0};
        if (*v) {
            r = resolve_id(v, true, &g.gid, d, k->name);
            if (r < 0) return r;
            g.set = true;
        }
        *(struct config_group *)field = g;
        return 0;
    }
    case CONFIG_TYPE_COUNT:
        break;
    }
    return err_set(d, ERR_CONFIG, "%s: bad schema type", k->name);
}

int config_set(struct config *c, const char *key, const char *value, struct err_detail *d) {
    const struct config_key *k = key_find(key);
    if (!k) return err_set(d, ERR_CONFIG, "unknown key '%s'", key);
    return key_set(c, k, value, d);
}

int config_init(struct config *c, struct err_detail *d) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < config_n_keys; i++) {
        int r = key_set(c, &config_keys[i], config_keys[i].def, d);
        if (r < 0) return r;
    }
    return 0;
}

void config_apply_env(struct config *c) {
    const char *e = getenv("WARM_ATTN_ROT_DISABLE");
    bool off;
    if (e && parse_bool(e, &off) == 0 && off) c->kv_rotation = false;
}

/* ---- config file --------------------------------------------------------------------- */

#define CONFIG_FILE_MAX (1024 * 1024)

/* The errors of one configuration read, over the main file and its drop-ins: each
 * "FILE:LINE: message" on a line of its own in d->msg while they fit, so an admin fixes
 * them all in one go, then how many did not fit. */
struct config_errors {
    struct err_detail *d;
    int code;          /* the first error's code; 0 = none yet */
    unsigned n;        /* errors seen */
    unsigned n_shown;  /* of them, lines in d->msg */
};
/* Room kept at the end of d->msg for "\n(and 4294967295 more errors)". */
#define CONFIG_ERRORS_TAIL 32

static void errors_add(struct config_errors *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errors_add(struct config_errors *e, int code, const char *fmt, ...) {
    if (e->n++ == 0) e->code = code;
    if (!e->d) return;
    char line[sizeof e->d->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (e->n_shown == 0) {
        err_set(e->d, code, "%s", line);
        e->n_shown = 1;
        return;
    }
    size_t len = strlen(e->d->msg), n = strlen(line);
    if (len + 1 + n + CONFIG_ERRORS_TAIL >= sizeof e->d->msg) return;
    e->d->msg[len] = '\n';
    memcpy(e->d->msg + len + 1, line, n + 1);
    e->n_shown++;
}

/* 0 when no error was seen, else the first error's code (d->msg says how many were left
 * out). */
static int errors_finish(struct config_errors *e) {
    if (e->n == 0) return 0;
    if (e->d && e->n > e->n_shown) {
        size_t len = strlen(e->d->msg);
        snprintf(e->d->msg + len, sizeof e->d->msg - len, "\n(and %u more errors)",
                 e->n - e->n_shown);
    }
    return e->code;
}

/* Reads one file's `key = value` lines into c; a bad line is an error in e and the next
 * line is read all the same. Returns -ENOENT when the file does not exist (an error in e
 * unless optional), another -errno / ERR_CONFIG when it cannot be read, else 0. */
static int file_load(struct config *c, const char *path, bool optional,
                     struct config_errors *e) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        if (!(optional && err == ENOENT)) errors_add(e, -err, "%s: %s", path, strerror(err));
        return -err;
    }
    struct stat st;
    /* Character devices are read as empty (--config /dev/null = no file). */
    if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) ||
        st.st_size > CONFIG_FILE_MAX) {
        close(fd);
        errors_add(e, ERR_CONFIG, "%s: not a regular file of at most %d bytes", path,
                   CONFIG_FILE_MAX);
        return ERR_CONFIG;
    }
    if (S_ISCHR(st.st_mode)) st.st_size = 0;
    _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        errors_add(e, -ENOMEM, "%s: out of memory", path);
        return -ENOMEM;
    }
    size_t len = 0;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        errors_add(e, ERR_CONFIG, "%s: contains a NUL byte", path);
        return ERR_CONFIG;
    }

    unsigned line = 0;
    for (char *p = buf, *next; p; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next) *next++ = 0;
        char *s = trim(p);
        if (*s == 0 || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            errors_add(e, ERR_CONFIG, "%s:%u: expected 'key = value'", path, line);
            continue;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        size_t vn = strlen(val);
        if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') {
            val[vn - 1] = 0;
            val++;
        }
        if (strchr(key, '-') || !key_find(key)) {
            errors_add(e, ERR_CONFIG, "%s:%u: unknown key '%s'", path, line, key);
            continue;
        }
        struct err_detail kd = {0};
        int r = config_set(c, key, val, &kd);
        if (r < 0) errors_add(e, r, "%s:%u: %s", path, line, err_msg(&kd, r));
    }
    return 0;
}

int config_load_file(struct config *c, const char *path, struct err_detail *d) {
    /* Parse into a copy so a failing file leaves c untouched. */
    struct config tmp = *c;
    struct config_errors e = {.d = d};
    file_load(&tmp, path, false, &e);
    int r = errors_finish(&e);
    if (r < 0) return r;
    *c = tmp;
    return 0;
}

/* Drop-ins: PATH.d/NAME.conf (NAME not starting with '.'), in byte order of NAME. */
static int dropin_filter(const struct dirent *de) {
    size_t n = strlen(de->d_name);
    return de->d_name[0] != '.' && n > 5 && strcmp(de->d_name + n - 5, ".conf") == 0;
}
static int dropin_cmp(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Reads PATH.d/ *.conf after PATH, so admins (and packages) add settings without editing
 * the conffile; a later file wins. A missing directory is no error. */
static void dropins_load(struct config *c, const char *path, struct config_errors *e) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s.d", path) >= (int)sizeof dir) {
        errors_add(e, ERR_CONFIG, "%s.d: path too long", path);
        return;
    }
    struct dirent **list = NULL;
    int n = scandir(dir, &list, dropin_filter, dropin_cmp);
    if (n < 0) {
        int err = errno;
        if (err != ENOENT) errors_add(e, -err, "%s: %s", dir, strerror(err));
        return;
    }
    for (int i = 0; i < n; i++) {
        char file[PATH_MAX];
        if (snprintf(file, sizeof file, "%s/%s", dir, list[i]->d_name) < (int)sizeof file)
            file_load(c, file, false, e);
        else
            errors_add(e, ERR_CONFIG, "%s/%s: path too long", dir, list[i]->d_name);
        free(list[i]);
    }
    free(list);
}

/* ---- command line -------------------------------------------------------------------- */

static int check(const struct config *c, struct err_detail *d) {
    if (c->keep_alive_usec > c->max_keep_alive_usec)
        return err_set(d, ERR_CONFIG, "keep_alive is larger than max_keep_alive");
    if (c->max_prompt_tokens > c->ctx_size)
        return err_set(d, ERR_CONFIG, "max_prompt_tokens is larger than ctx_size");
    /* devices, split and tensor_split together, as a model load would take them */
    struct engine_context_params p;
    struct err_detail sd = {0};
    engine_context_params_default(&p);
    p.split = (enum engine_split)c->split;
    int r = *c->devices ? engine_devices_parse_into(c->devices, &p, &sd) : 0;
    if (r >= 0 && *c->tensor_split)
        r = engine_tensor_split_parse(c->tensor_split, p.tensor_split, ENGINE_MAX_DEVICES, &sd);
    if (r >= 0) r = engine_split_check(&p, &sd);
    if (r < 0) return err_set(d, ERR_CONFIG, "%s", err_msg(&sd, r));
    return 0;
}

int config_parse_args(struct config *c, int argc, char **argv, struct config_cmdline *ret,
                      struct err_detail *d) {
    struct config_cmdline cl = {0};
    const char *file = NULL;
    /* Pass 1: flags and --config, so the file is read before the overrides. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) cl.help = true;
        else if (strcmp(a, "--version") == 0) cl.version = true;
        else if (strcmp(a, "--print-config") == 0) cl.print_config = true;
        else if (strcmp(a, "--print-default-config") == 0) cl.print_default_config = true;
        else if (strncmp(a, "--config=", 9) == 0) file = a + 9;
        else if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) return err_set(d, ERR_CONFIG, "--config needs a file");
            file = argv[++i];
        } else if (strncmp(a, "--", 2) == 0) {
            if (!strchr(a, '=')) i++; /* "--key value" */
        } else {
            return err_set(d, ERR_CONFIG, "unexpected argument '%s' (options are --key=value)", a);
        }
    }
    if (cl.help || cl.version || cl.print_default_config) {
        *ret = cl;
        return 0;
    }
    int r = config_init(c, d);
    if (r < 0) return r;
    /* The file (--config FILE, else CONFIG_DEFAULT_PATH when it exists), then its
     * drop-ins; every error in any of them is reported at once. */
    const char *path = file ? file : CONFIG_DEFAULT_PATH;
    struct config_errors e = {.d = d};
    file_load(c, path, !file, &e);
    dropins_load(c, path, &e);
    r = errors_finish(&e);
    if (r < 0) return r;
    /* Pass 2: the overrides, in order. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "--version") == 0 ||
            strcmp(a, "--print-config") == 0 || strncmp(a, "--config=", 9) == 0)
            continue;
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        char key[64];
        const char *val;
        const char *eq = strchr(a, '=');
        size_t kn = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (kn >= sizeof key) return err_set(d, ERR_CONFIG, "unknown option '%s'", a);
        memcpy(key, a + 2, kn);
        key[kn] = 0;
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else return err_set(d, ERR_CONFIG, "option '%s' needs a value", a);
        if (!key_find(key)) return err_set(d, ERR_CONFIG, "unknown option '--%s'", key);
        struct err_detail kd = {0};
        r = config_set(c, key, val, &kd);
        if (r < 0) return err_set(d, r, "--%s", err_msg(&kd, r));
    }
    config_apply_env(c);
    r = check(c, d);
    if (r < 0) return r;
    *ret = cl;
    return 0;
}

/* ---- printing ------------------------------------------------------------------------ */

/* The largest unit that represents v exactly; among equal units the first in the table. */
static void print_with_unit(FILE *f, uint64_t v, const struct unit *units) {
    const struct unit *best = NULL;
    for (const struct unit *u = units; u->suffix; u++)
        if (v % u->mult == 0 && (!best || u->mult > best->mult)) best = u;
    if (v == 0 || !best) {
        fprintf(f, "%llu", (unsigned long long)v);
        return;
    }
    fprintf(f, "%llu%s", (unsigned long long)(v / best->mult), best->suffix);
}

static void print_value(FILE *f, const struct config *c, const struct config_key *k) {
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case CONFIG_TYPE_STRING:
    case CONFIG_TYPE_PATH: fputs(field, f); break;
    case CONFIG_TYPE_U32: fprintf(f, "%u", *(const uint32_t *)field); break;
    case CONFIG_TYPE_BYTES: print_with_unit(f, *(const uint64_t *)field, byte_units); break;
    case CONFIG_TYPE_DURATION: print_with_unit(f, *(const uint64_t *)field, duration_units); break;
    case CONFIG_TYPE_BOOL: fputs(*(const bool *)field ? "yes" : "no", f); break;
    case CONFIG_TYPE_ENUM: fputs(k->choices[*(const int *)field], f); break;
    case CONFIG_TYPE_UIDS:
    case CONFIG_TYPE_GROUPS: {
        const struct config_idlist *l = (const struct config_idlist *)field;
        for (uint32_t i = 0; i < l->n; i++) fprintf(f, "%s%u", i ? "," : "", l->ids[i]);
        break;
    }
    case CONFIG_TYPE_GROUP: {
        const struct config_group *g = (const struct config_group *)field;
        if (g->set) fprintf(f, "%u", g->gid);
        break;
    }
    case CONFIG_TYPE_COUNT: break;
    }
}

void config_print(const struct config *c, FILE *f) {
    for (size_t i = 0; i < config_n_keys; i++) {
        fprintf(f, "%s = ", config_keys[i].name);
        print_value(f, c, &config_keys[i]);
        fputc('\n', f);
    }
}

void config_print_help(FILE *f) {
    fprintf(f,
            "Usage: warmd [--config FILE] [--KEY=VALUE]... [--print-config] [--print-default-config]\n"
            "             [--help] [--version]\n"
            "\n"
            "warmd keeps LLM models resident and serves them over gRPC on a Unix socket.\n"
            "Settings come from %s (or --config FILE), then from FILE.d/*.conf\n"
            "in lexical order, then from the command line (--models-dir=DIR or\n"
            "--models_dir DIR). Keys, with defaults:\n\n",
            CONFIG_DEFAULT_PATH);
    for (size_t i = 0; i < config_n_keys; i++) {
        const struct config_key *k = &config_keys[i];
        char opt[64];
        size_t n = strlen(k->name);
        for (size_t j = 0; j <= n; j++) opt[j] = k->name[j] == '_' ? '-' : k->name[j];
        fprintf(f, "  --%s=VALUE\n      %s (default: %s)\n", opt, k->help,
                *k->def ? k->def : "\"\"");
    }
    fprintf(f, "\nSignals: SIGTERM drains and exits, SIGHUP rescans the models directory.\n");
}

/* Writes "# " + text word-wrapped to lines of at most 80 columns. */
static void print_comment(FILE *f, const char *text) {
    while (*text) {
        size_t n = strlen(text);
        if (n > 78) {
            n = 78;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = strcspn(text, " ");
        }
        fprintf(f, "# %.*s\n", (int)n, text);
        text += n;
        while (*text == ' ') text++;
    }
}

void config_print_default(FILE *f) {
    fprintf(f, "# %s: warmd's settings, `key = value`; '#' starts a comment.\n"
               "# Every key is listed with its default, commented out. Rather than editing\n"
               "# this file, put settings in %s.d/*.conf: those files are read\n"
               "# after it, in lexical order, a later one winning. warmd --KEY=VALUE on the\n"
               "# command line overrides them all. Generated by warmd --print-default-config.\n",
            CONFIG_DEFAULT_PATH, CONFIG_DEFAULT_PATH);
    for (size_t i = 0; i < config_n_keys; i++) {
        const struct config_key *k = &config_keys[i];
        fputc('\n', f);
        print_comment(f, k->help);
        if (k->type == CONFIG_TYPE_U32)
            fprintf(f, "# range: %llu to %llu\n", (unsigned long long)k->min,
                    (unsigned long long)k->max);
        if (k->type == CONFIG_TYPE_ENUM) {
            fputs("# one of:", f);
            for (int j = 0; k->choices[j]; j++) fprintf(f, " %s", k->choices[j]);
            fputc('\n', f);
        }
        fprintf(f, "#%s =%s%s\n", k->name, *k->def ? " " : "", k->def);
    }
}
