/* tokens — per-user bearer tokens, for callers the kernel cannot name.
 *
 * A client that reaches warmd through a trusted proxy (warm-httpd) from where the proxy
 * cannot learn its uid (a container in another network namespace) presents a token that
 * the user made beforehand with `warmctl token create` on the socket, where SO_PEERCRED
 * names them. warmd keeps only the SHA-256 of each token, with the uid that made it, in
 * STATE_DIR/tokens (mode 0600, replaced atomically), so the file never holds a usable
 * secret. A token is 32 random bytes, written "warm_" + 64 hex digits.
 *
 * Bounded: at most TOKENS_PER_UID per uid (a new one retires the oldest) and TOKENS_MAX in
 * all (past it, creating fails with -ENOSPC). */
#pragma once

#include "base/base.h"

#include <pthread.h>
#include <stdint.h>

#define TOKENS_PER_UID 8
#define TOKENS_MAX 4096
#define TOKEN_PREFIX "warm_"
#define TOKEN_TEXT_LEN (5 + 64)     /* "warm_" + hex of 32 bytes */

struct token_rec {
    uint32_t uid;
    uint8_t hash[32];               /* SHA-256 of the token text */
    uint64_t created_usec;          /* wall clock */
};

struct tokens {
    pthread_mutex_t lock;
    char path[4096];
    struct token_rec *v;
    size_t n;
    int open_error;                 /* the file exists but could not be read: read-only */
};

/* Loads STATE_DIR/tokens (absent = none). Malformed lines are skipped with a warning
 * naming file:line (the next write drops them); an unreadable file is an error. */
int tokens_open(struct tokens *t, const char *state_dir, struct err_detail *d);
void tokens_close(struct tokens *t);
/* Makes a token for uid and saves the file; ret gets the text (NUL-terminated). */
int tokens_create(struct tokens *t, uint32_t uid, char ret[TOKEN_TEXT_LEN + 1],
                  struct err_detail *d);
/* Removes every token of uid; *ret_n gets how many. */
int tokens_revoke(struct tokens *t, uint32_t uid, size_t *ret_n, struct err_detail *d);
/* The uid that made the token text[0..len); -ENOENT when unknown or revoked. */
int tokens_lookup(struct tokens *t, const char *text, size_t len, uint32_t *ret_uid);
