/* The error table's strings, and the detail buffer. */
#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const err_msgs[] = {
#define X(name, msg) [name - ERR__START - 1] = msg,
    ERR_TABLE(X)
#undef X
};
static const char *const err_names[] = {
#define X(name, msg) [name - ERR__START - 1] = #name,
    ERR_TABLE(X)
#undef X
};

static bool err_is_project(int code) { return code > ERR__START && code < ERR__END; }

const char *err_str(int code) {
    if (code >= 0) return "success";
    if (err_is_project(code)) return err_msgs[code - ERR__START - 1];
    /* strerror() is not thread-safe in theory; glibc's table lookup for known codes is. */
    return strerror(-code);
}

const char *err_name(int code) {
    if (code >= 0) return "OK";
    if (err_is_project(code)) return err_names[code - ERR__START - 1];
    const char *n = strerrorname_np(-code);
    return n ? n : "E?";
}

int err_setv(struct err_detail *d, int code, const char *fmt, va_list ap) {
    if (d) {
        d->code = code;
        vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    }
    return code;
}

int err_set(struct err_detail *d, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_setv(d, code, fmt, ap);
    va_end(ap);
    return code;
}

const char *err_msg(const struct err_detail *d, int code) {
    if (d && d->code == code && d->msg[0]) return d->msg;
    return err_str(code);
}

void *malloc_array(size_t n, size_t size) {
    size_t bytes;
    if (!size_mul(n, size, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *malloc_array_aligned(size_t n, size_t size) {
    size_t bytes;
    void *p;
    if (!size_mul(n, size, &bytes)) return NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

void *calloc_array(size_t n, size_t size) {
    size_t bytes;
    if (!size_mul(n, size, &bytes)) return NULL;
    return calloc(bytes ? n : 1, bytes ? size : 1);
}
