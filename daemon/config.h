/* config — warmd's configuration: one schema table (key, type, default, bounds, help),
 * read from /etc/warmd/warmd.conf (or --config FILE), then from the drop-ins FILE.d/NAME.conf
 * in lexical order, and then overridden by command-line `--key=value` (dashes or
 * underscores). Unknown keys and bad values are errors that name the file and line (or
 * the option); every error of the files is reported, not only the first. The same table
 * drives --help and --print-config.
 *
 * struct config is plain data: no pointers, copyable, nothing to free. */
#pragma once

#include "base/base.h"

#include <limits.h>
#include <stdio.h>

#define CONFIG_DEFAULT_PATH "/etc/warmd/warmd.conf"
#define CONFIG_MAX_IDS 64
/* sun_path is 108 bytes including the NUL. */
#define CONFIG_SOCKET_PATH_MAX 108
#define CONFIG_NAME_MAX 129

/* A list of numeric uids or gids (names are resolved once, while parsing). */
struct config_idlist {
    uint32_t n;
    uint32_t ids[CONFIG_MAX_IDS];
};

/* One group (name resolved while parsing); set = false means "none". */
struct config_group {
    bool set;
    uint32_t gid;
};

/* Cache value types, in kernels' naming. */
enum config_cache_type {
    CONFIG_CACHE_TYPE_F32,
    CONFIG_CACHE_TYPE_F16,
    CONFIG_CACHE_TYPE_BF16,
    CONFIG_CACHE_TYPE_Q8_0,
    CONFIG_CACHE_TYPE_Q4_0,
    CONFIG_CACHE_TYPE_Q4_1,
    CONFIG_CACHE_TYPE_Q5_0,
    CONFIG_CACHE_TYPE_Q5_1,
    CONFIG_CACHE_TYPE_IQ4_NL,
    CONFIG_CACHE_TYPE_COUNT
};
extern const char *const config_cache_type_names[CONFIG_CACHE_TYPE_COUNT + 1];

struct config {
    char socket[CONFIG_SOCKET_PATH_MAX];   /* path bound when not socket-activated */
    struct config_group socket_group;      /* group of the socket we bind (mode 0660) */
    char models_dir[PATH_MAX];
    char state_dir[PATH_MAX];
    char default_model[CONFIG_NAME_MAX];   /* "" = none */
    char preload[1024];                    /* models loaded before READY=1, comma-separated */
    uint32_t threads;                      /* 0 = number of online CPUs */
    uint32_t ctx_size;                     /* tokens per sequence */
    bool ctx_above_trained;                /* ctx_size may exceed a model's trained context */
    uint32_t parallel;                     /* sequences per loaded model */
    int cache_type_k;                      /* enum config_cache_type */
    int cache_type_v;
    bool kv_rotation;
    char device[32];                       /* "auto", "cpu" or "cuda:N" (one device) */
    uint32_t gpu_layers;                   /* layers on a CUDA device; 0 = all */
    int experts;                           /* enum engine_experts_place: auto | gpu | cpu */
    char devices[256];                     /* "cpu" or "cpu,cpu,..." CPU partitions */
    int split;                             /* enum engine_split: none | tensor */
    char tensor_split[256];                /* shares "3,1"; "" = equal */
    uint64_t cache_max_bytes;              /* prompt-cache budget */
    uint32_t cache_chunk_tokens;           /* C: tokens per chunk record */
    uint32_t cache_restore_min_tokens;     /* below this many, the store is not asked */
    char cache_shared_namespaces[1024];    /* "NAME:GROUP[,GROUP...]; ..." */
    uint64_t keep_alive_usec;              /* default idle time before unload */
    uint64_t max_keep_alive_usec;          /* cap on what clients ask for */
    uint32_t max_loaded_models;
    uint64_t memory_budget_bytes;          /* 0 = 3/4 of physical memory */
    struct config_idlist allowed_uids;     /* empty + empty groups = anyone who can connect */
    struct config_idlist allowed_groups;
    struct config_idlist trusted_proxy_uids; /* may act on behalf of other uids */
    struct config_group admin_group;       /* may LoadModel, UnloadModel, purge others */
    uint64_t max_request_bytes;            /* largest request message */
    uint32_t max_streams;                  /* concurrent streams per connection */
    uint64_t max_metadata_bytes;           /* request metadata (headers) */
    uint32_t max_prompt_tokens;            /* 0 = ctx_size */
    uint32_t max_connections;              /* open at once, all users */
    uint32_t max_connections_per_uid;
    uint64_t connection_idle_timeout_usec; /* no stream open for this long: closed */
    uint64_t request_timeout_usec;         /* a request must arrive whole within it */
    uint64_t slow_reader_timeout_usec;     /* a client not reading for this long: dropped */
    uint64_t max_pending_bytes_per_uid;    /* request / response bytes held for one uid */
    uint64_t max_pending_bytes;            /* the same for everyone together */
    uint32_t max_stream_resets;            /* per connection and 10 s (HTTP/2 rapid reset) */
    uint32_t max_queued_per_uid;           /* generation requests per uid and model */
    int log_level;                         /* enum log_level */
};

enum config_type {
    CONFIG_TYPE_STRING,    /* a char array of `max` bytes */
    CONFIG_TYPE_PATH,      /* an absolute path, char array of `max` bytes */
    CONFIG_TYPE_U32,       /* decimal, within [min, max] */
    CONFIG_TYPE_BYTES,     /* u64 with an optional K/M/G/T (KiB...) suffix */
    CONFIG_TYPE_DURATION,  /* u64 usec from "500ms", "30s", "5m", "1h", "1d" (bare = s) */
    CONFIG_TYPE_BOOL,      /* yes/no, true/false, on/off, 1/0 */
    CONFIG_TYPE_ENUM,      /* int index into `choices` */
    CONFIG_TYPE_UIDS,      /* struct config_idlist: comma-separated user names or ids */
    CONFIG_TYPE_GROUPS,    /* struct config_idlist: group names or ids */
    CONFIG_TYPE_GROUP,     /* struct config_group: one group name or id, "" = none */
    CONFIG_TYPE_COUNT
};

/* One row of the schema. */
struct config_key {
    const char *name;              /* file form; the command line uses dashes */
    enum config_type type;
    size_t offset;                 /* of the field in struct config */
    const char *def;               /* default, in file syntax */
    uint64_t min, max;             /* numeric bounds; the buffer size for strings */
    const char *const *choices;    /* ENUM: names, NULL-terminated */
    const char *help;
};

extern const struct config_key config_keys[];
extern const size_t config_n_keys;

/* Fills c with every key's default (and the WARM_ATTN_ROT_DISABLE environment override
 * is NOT applied here; see config_apply_env). Returns 0, or ERR_CONFIG if a default does
 * not parse (a programming error the unit test catches). */
int config_init(struct config *c, struct err_detail *d);
/* Sets one key from its text form; key may use dashes. ERR_CONFIG with a message naming
 * the key on an unknown key or a bad value; c is unchanged on failure. */
int config_set(struct config *c, const char *key, const char *value, struct err_detail *d);
/* Reads `key = value` lines ('#' starts a comment line; blank lines ignored). Errors are
 * "FILE:LINE: message", one line each in d, every bad line of the file (as many as d
 * holds, then "(and N more errors)"); the first error's code is returned and c is
 * unchanged. -ENOENT when the file does not exist (nothing set). */
int config_load_file(struct config *c, const char *path, struct err_detail *d);
/* Environment overrides read once at startup: WARM_ATTN_ROT_DISABLE=1 turns kv_rotation
 * off. */
void config_apply_env(struct config *c);

/* Between the names of a list setting (preload). */
#define CONFIG_LIST_SEP ", \t"

/* cache_shared_namespaces, entry by entry: *s walks a writable copy of the value (start
 * with *s = the copy), which it cuts in place. Entries are separated by ';' and read
 * NAME:GROUP[,GROUP...], the last ':' starting the groups; blanks around NAME and the
 * groups are dropped. Returns 1 with *ret_name and *ret_groups ("GROUP[,GROUP...]") pointing
 * into the copy, 0 at the end, or ERR_CONFIG with d for an entry without a name or a group,
 * or naming a user's own namespace ("uid:..."); the walk goes on past it. The one parser of
 * the setting: the config checks it when read, daemon/cache.c walks it per request. */
int config_shared_ns_next(char **s, char **ret_name, char **ret_groups, struct err_detail *d);

/* What the command line asked for besides settings. */
struct config_cmdline {
    bool help, version, print_config, print_default_config;
};
/* The whole startup sequence: defaults, then the config file (--config FILE, else
 * CONFIG_DEFAULT_PATH if it exists), then the drop-ins FILE.d/NAME.conf in byte order of
 * their names (a missing directory is fine; the errors of all files are reported
 * together), then every --key=value / --key value, then the environment.
 * --help/--version/--print-config are reported in ret. */
int config_parse_args(struct config *c, int argc, char **argv, struct config_cmdline *ret,
                      struct err_detail *d);

/* The effective config, one `key = value` line per key; re-readable as a config file. */
void config_print(const struct config *c, FILE *f);
/* Usage text listing every key with its default and help. */
void config_print_help(FILE *f);
/* The default config file (packaging/ ships it as /etc/warmd/warmd.conf): every key's help
 * and default as comments, the key commented out, so the file sets nothing. */
void config_print_default(FILE *f);
