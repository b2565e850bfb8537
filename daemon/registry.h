/* registry — the models the daemon can serve: the `*.gguf` files of models_dir (the suffix
 * in any case), name = file stem. Names are checked before any file system access
 * (letters, digits, '.', '_', '-', at most 128 bytes, first character a letter or digit),
 * so "../x", absolute paths and "/proc/self/fd/N" never reach open().
 *
 * Files are opened relative to the directory, O_NONBLOCK (a FIFO cannot block us), and
 * must be regular, start with "GGUF" and not be sparse. A directory entry that is a regular
 * file is opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS); a symlink (the
 * usual way to reuse a download) is followed wherever it points, but only to a regular file
 * owned by root or by the service user, never through a /proc magic link: anyone else's
 * file could change under the daemon.
 *
 * Every scan reads each file's metadata (gguf_open_meta: no mapping, no tensor data) and
 * checks it as the loader would (architecture, hparams, tensor types and shapes,
 * vocabulary), once per file identity: a file that would not load is listed as
 * unavailable with the reason, logged once (again only when it changes), and never
 * evicts a loaded model to make room for a load that would fail (resident.c).
 *
 * Which models are loaded is resident.h's business; this object only knows the files.
 * Thread-safe: one mutex; lookups return copies. */
#pragma once

#include "base/base.h"
#include "daemon/config.h"

#include <pthread.h>

#define REGISTRY_REASON_MAX 320

/* Which bytes a model file holds, as far as the kernel tells: a write, a truncation or a
 * rename over the path changes at least one field (ctime moves on every change of the
 * inode and, unlike mtime, no utimes() call sets it back). */
struct registry_file_id {
    uint64_t dev, ino, size_bytes;
    int64_t mtime_nsec, ctime_nsec;
};

/* What a model file says about itself, from its metadata (no load). Zero / "" when the
 * file does not say or could not be read that far. */
struct registry_meta {
    char architecture[32];   /* general.architecture, as written */
    char quantization[96];   /* weight bytes by type, largest first: "Q4_K 71%, Q6_K 24%, F32 5%" */
    char chat_template[24];  /* family of tokenizer.chat_template ("chatml", "none", ...) */
    uint64_t n_params;       /* values in all tensors */
    uint32_t n_ctx_train;    /* <arch>.context_length */
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v, n_vocab;
    bool embedding;          /* an embedding model (engine_model_is_embedding) */
    char pooling[8];         /* its pooling ("mean", "cls", "last", ...) */
    uint32_t n_embd_out;     /* the width of its vectors */
};

struct registry_model {
    char name[CONFIG_NAME_MAX];  /* the file stem (a skipped file's, printable: "\xNN") */
    char file[CONFIG_NAME_MAX + 8]; /* the directory entry ("x.gguf", "x.GGUF") */
    uint64_t size_bytes;
    uint64_t modified_usec;     /* mtime, microseconds since the epoch */
    struct registry_file_id id;
    bool available;             /* false: skipped, `reason` says why */
    bool bad_name;              /* skipped for its name (never a valid lookup key) */
    char reason[REGISTRY_REASON_MAX];
    struct registry_meta meta;
};

struct registry {
    pthread_mutex_t lock;
    pthread_mutex_t scan_lock;       /* held through a scan (never inside lock) */
    char dir[PATH_MAX];
    struct registry_model *models;   /* sorted by name, skipped files included */
    size_t n_models;
    size_t n_available;
};

void registry_init(struct registry *r, const char *dir);
void registry_done(struct registry *r);
/* Rescans the directory; returns the number of available models. Each skipped file is
 * logged (warning) when it is first seen and whenever its reason or its file changes. On
 * failure (e.g. the directory is missing) the list becomes empty and the error names the
 * directory. */
int registry_scan(struct registry *r, struct err_detail *d);
/* 0 when name is a syntactically valid model name, else ERR_INVALID with a message. */
int registry_name_check(const char *name, struct err_detail *d);
/* Available models. */
size_t registry_count(struct registry *r);
/* A malloc'd copy of the list, skipped files included (*ret, caller frees; NULL when
 * empty). */
int registry_list(struct registry *r, struct registry_model **ret, size_t *ret_n);
/* Looks name up (rescanning once when unknown or skipped). ERR_INVALID for a bad name,
 * ERR_UNSUPPORTED ("model 'x' is not available: <reason>") for a skipped file, ERR_NOT_FOUND
 * ("model 'x' not found in the models directory", with "did you mean 'y'?" when a model's
 * name is close) for anything else; ret is written on success only. */
int registry_find(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d);
/* Opens the model's file read-only (the checks above). *ret_fd is the caller's to close. */
int registry_open(struct registry *r, const char *name, int *ret_fd, struct err_detail *d);
/* The model's file as it is now: opened and checked as a scan does (its metadata read
 * again only when the file changed), then closed. *ret (on success only) and the list's
 * entry get its current identity, metadata and availability; an unavailable file is
 * ERR_UNSUPPORTED with the reason. Other errors as registry_find. */
int registry_stat(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d);
/* The identity of the file open at fd (*ret on success only). */
int registry_file_id_get(int fd, struct registry_file_id *ret);
bool registry_file_id_eq(const struct registry_file_id *a, const struct registry_file_id *b);
/* The name in names[0..n) closest to name (edit distance, case-insensitive, small enough
 * to be a typo), or NULL. */
const char *registry_suggest(const char *name, const char *const *names, size_t n);
