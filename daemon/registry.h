/* registry — the models the daemon can serve: the `*.gguf` files of models_dir, name =
 * file stem. Names are checked before any file system access (letters, digits, '.', '_',
 * '-', at most 128 bytes, first character a letter or digit), so "../x", absolute paths
 * and "/proc/self/fd/N" never reach open(). Files are opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) relative to the directory (symlinks out of it fail), O_NONBLOCK
 * (a FIFO cannot block us), and must be regular, start with "GGUF" and not be sparse.
 * A name that is absent or rejected gets the same answer, so the API is no file-existence
 * oracle (P1-8).
 *
 * Which models are loaded is resident.h's business; this object only knows the files.
 * Thread-safe: one mutex; lookups return copies. */
#pragma once

#include "base/base.h"
#include "daemon/config.h"

#include <pthread.h>

/* Which bytes a model file holds, as far as the kernel tells: a write, a truncation or a
 * rename over the path changes at least one field (ctime moves on every change of the
 * inode and, unlike mtime, no utimes() call sets it back). */
struct registry_file_id {
    uint64_t dev, ino, size_bytes;
    int64_t mtime_nsec, ctime_nsec;
};

struct registry_model {
    char name[CONFIG_NAME_MAX];
    uint64_t size_bytes;
    uint64_t modified_usec;     /* mtime, microseconds since the epoch */
    struct registry_file_id id;
};

struct registry {
    pthread_mutex_t lock;
    char dir[PATH_MAX];
    struct registry_model *models;   /* sorted by name */
    size_t n_models;
};

void registry_init(struct registry *r, const char *dir);
void registry_done(struct registry *r);
/* Rescans the directory; returns the number of models. On failure (e.g. the directory is
 * missing) the list becomes empty and the error names the directory. */
int registry_scan(struct registry *r, struct err_detail *d);
/* 0 when name is a syntactically valid model name, else ERR_INVALID with a message. */
int registry_name_check(const char *name, struct err_detail *d);
size_t registry_count(struct registry *r);
/* A malloc'd copy of the list (*ret, caller frees; NULL when empty). */
int registry_list(struct registry *r, struct registry_model **ret, size_t *ret_n);
/* Looks name up (rescanning once when unknown). ERR_INVALID for a bad name, ERR_NOT_FOUND
 * ("model 'x' not found") for anything else; ret is written on success only. */
int registry_find(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d);
/* Opens the model's file read-only beneath the directory (the checks above). *ret_fd is
 * the caller's to close. */
int registry_open(struct registry *r, const char *name, int *ret_fd, struct err_detail *d);
/* The model's file as it is now: opened and checked as registry_open does, then closed.
 * *ret (on success only) and the list's entry get its current size, mtime and identity.
 * Errors as registry_open. */
int registry_stat(struct registry *r, const char *name, struct registry_model *ret,
                  struct err_detail *d);
/* The identity of the file open at fd (*ret on success only). */
int registry_file_id_get(int fd, struct registry_file_id *ret);
bool registry_file_id_eq(const struct registry_file_id *a, const struct registry_file_id *b);
