/* tokens — per-user bearer tokens (see tokens.h). */
#include "daemon/tokens.h"

#include "daemon/log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_HEADER "# warmd tokens: uid sha256 created_usec (kept by warmd; do not edit)\n"

static int sha256(const char *text, size_t len, uint8_t out[32]) {
    unsigned n = 0;
    if (!EVP_Digest(text, len, out, &n, EVP_sha256(), NULL) || n != 32) return -EIO;
    return 0;
}

static int hex_nibble(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool parse_line(const char *line, struct token_rec *r) {
    char hex[65];
    unsigned long long uid, created;
    int used = 0;
    if (sscanf(line, "%llu %64s %llu%n", &uid, hex, &created, &used) != 3 || uid > UINT32_MAX ||
        strlen(hex) != 64)
        return false;
    for (const char *p = line + used; *p; p++)
        if (*p != '\n' && *p != ' ') return false;
    for (int i = 0; i < 32; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        r->hash[i] = (uint8_t)(hi << 4 | lo);
    }
    r->uid = (uint32_t)uid;
    r->created_usec = created;
    return true;
}

int tokens_open(struct tokens *t, const char *state_dir, struct err_detail *d) {
    *t = (struct tokens){0};
    pthread_mutex_init(&t->lock, NULL);
    if (snprintf(t->path, sizeof t->path, "%s/tokens", state_dir) >= (int)sizeof t->path)
        return err_set(d, -ENAMETOOLONG, "state_dir is too long for %s/tokens", state_dir);
    FILE *f = fopen(t->path, "re");
    if (!f) {
        if (errno == ENOENT) return 0;
        t->open_error = -errno; /* never overwrite a file we could not read */
        return err_set(d, -errno, "%s: %s", t->path, strerror(errno));
    }
    t->v = calloc_array(TOKENS_MAX, sizeof *t->v);
    if (!t->v) {
        fclose(f);
        return err_set(d, -ENOMEM, "out of memory for the token table");
    }
    char line[256];
    unsigned no = 0;
    while (fgets(line, sizeof line, f)) {
        no++;
        if (line[0] == '#' || line[0] == '\n') continue;
        struct token_rec r;
        if (t->n == TOKENS_MAX || !parse_line(line, &r)) {
            log_warn("%s:%u: %s; ignored (the next token change drops it)", t->path, no,
                        t->n == TOKENS_MAX ? "more than 4096 tokens"
                                           : "not \"uid sha256-hex created_usec\"");
            continue;
        }
        t->v[t->n++] = r;
    }
    fclose(f);
    return 0;
}

void tokens_close(struct tokens *t) {
    free(t->v);
    t->v = NULL;
    t->n = 0;
    pthread_mutex_destroy(&t->lock);
}

/* Writes the table to PATH.tmp, fsyncs and renames it over PATH. Under the lock. */
static int save(struct tokens *t, struct err_detail *d) {
    char tmp[sizeof t->path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", t->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return err_set(d, -errno, "%s: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = -errno;
        close(fd);
        unlink(tmp);
        return err_set(d, e, "%s: %s", tmp, strerror(-e));
    }
    fputs(FILE_HEADER, f);
    for (size_t i = 0; i < t->n; i++) {
        fprintf(f, "%" PRIu32 " ", t->v[i].uid);
        for (int k = 0; k < 32; k++) fprintf(f, "%02x", t->v[i].hash[k]);
        fprintf(f, " %" PRIu64 "\n", t->v[i].created_usec);
    }
    int e = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -errno;
    if (fclose(f) != 0 && !e) e = -errno;
    if (!e && rename(tmp, t->path) < 0) e = -errno;
    if (e) {
        unlink(tmp);
        return err_set(d, e, "saving %s: %s", t->path, strerror(-e));
    }
    return 0;
}

int tokens_create(struct tokens *t, uint32_t uid, char ret[TOKEN_TEXT_LEN + 1],
                  struct err_detail *d) {
    uint8_t raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return err_set(d, -EIO, "getrandom: %s", strerror(errno));
    memcpy(ret, TOKEN_PREFIX, 5);
    for (int i = 0; i < 32; i++) snprintf(ret + 5 + 2 * i, 3, "%02x", raw[i]);
    struct token_rec r = {.uid = uid, .created_usec = time_wall_usec()};
    if (sha256(ret, TOKEN_TEXT_LEN, r.hash) < 0) return err_set(d, -EIO, "SHA-256 failed");

    pthread_mutex_lock(&t->lock);
    int e = 0;
    if (t->open_error) {
        e = err_set(d, t->open_error, "tokens are unavailable: %s could not be read at start "
                    "(%s)", t->path, strerror(-t->open_error));
        goto out;
    }
    if (!t->v && !(t->v = calloc_array(TOKENS_MAX, sizeof *t->v))) {
        e = err_set(d, -ENOMEM, "out of memory for the token table");
        goto out;
    }
    /* The oldest of uid's tokens goes when it has TOKENS_PER_UID already. */
    size_t mine = 0, oldest = SIZE_MAX;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].uid == uid) {
            mine++;
            if (oldest == SIZE_MAX || t->v[i].created_usec < t->v[oldest].created_usec) oldest = i;
        }
    struct token_rec keep = {0};
    bool replaced = false;
    if (mine >= TOKENS_PER_UID) {
        keep = t->v[oldest];
        t->v[oldest] = r;
        replaced = true;
    } else if (t->n == TOKENS_MAX) {
        e = err_set(d, -ENOSPC, "the server holds %d tokens, its limit; revoke unused ones",
                    TOKENS_MAX);
        goto out;
    } else {
        t->v[t->n++] = r;
    }
    e = save(t, d);
    if (e < 0) { /* the file is unchanged: so is the table */
        if (replaced) t->v[oldest] = keep;
        else t->n--;
    }
out:
    pthread_mutex_unlock(&t->lock);
    if (e < 0) memset(ret, 0, TOKEN_TEXT_LEN + 1);
    return e;
}

int tokens_revoke(struct tokens *t, uint32_t uid, size_t *ret_n, struct err_detail *d) {
    pthread_mutex_lock(&t->lock);
    size_t n = 0, w = 0;
    _cleanup_free_ struct token_rec *old = NULL;
    if (t->n && !(old = malloc_array(t->n, sizeof *old))) {
        pthread_mutex_unlock(&t->lock);
        return err_set(d, -ENOMEM, "out of memory");
    }
    if (t->open_error) {
        pthread_mutex_unlock(&t->lock);
        return err_set(d, t->open_error, "tokens are unavailable: %s could not be read at "
                       "start (%s)", t->path, strerror(-t->open_error));
    }
    size_t old_n = t->n;
    if (old) memcpy(old, t->v, old_n * sizeof *old);
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].uid == uid) n++;
        else t->v[w++] = t->v[i];
    }
    t->n = w;
    int e = n ? save(t, d) : 0;
    if (e < 0) {
        memcpy(t->v, old, old_n * sizeof *old);
        t->n = old_n;
    }
    pthread_mutex_unlock(&t->lock);
    if (e == 0) *ret_n = n;
    return e;
}

int tokens_lookup(struct tokens *t, const char *text, size_t len, uint32_t *ret_uid) {
    if (len != TOKEN_TEXT_LEN || memcmp(text, TOKEN_PREFIX, 5) != 0) return -ENOENT;
    uint8_t h[32];
    if (sha256(text, len, h) < 0) return -EIO;
    pthread_mutex_lock(&t->lock);
    int e = -ENOENT;
    for (size_t i = 0; i < t->n; i++)
        if (CRYPTO_memcmp(t->v[i].hash, h, 32) == 0) {
            *ret_uid = t->v[i].uid;
            e = 0;
        }
    pthread_mutex_unlock(&t->lock);
    return e;
}
