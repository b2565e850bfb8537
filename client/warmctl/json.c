/* json — see json.h. */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static void write_string(struct json *j, const char *str, size_t n);

static void sep(struct json *j, const char *key) {
    if (j->depth > 0 && j->depth <= JSON_MAX_DEPTH) {
        if (!j->first[j->depth - 1]) fputc(',', j->f);
        j->first[j->depth - 1] = false;
    }
    if (key) {
        write_string(j, key, strlen(key));
        fputc(':', j->f);
    }
}

static void open_(struct json *j, const char *key, char c) {
    sep(j, key);
    fputc(c, j->f);
    if (j->depth < JSON_MAX_DEPTH) j->first[j->depth] = true;
    j->depth++;
}

void json_begin(struct json *j, FILE *f) {
    *j = (struct json){.f = f};
    open_(j, NULL, '{');
}

void json_end(struct json *j) {
    json_object_end(j);
    fputc('\n', j->f);
    fflush(j->f);
}

void json_object_begin(struct json *j, const char *key) {
    open_(j, key, '{');
}
void json_object_end(struct json *j) {
    j->depth--;
    fputc('}', j->f);
}
void json_array_begin(struct json *j, const char *key) {
    open_(j, key, '[');
}
void json_array_end(struct json *j) {
    j->depth--;
    fputc(']', j->f);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    size_t len;
    uint32_t cp, min;
    if (b < 0x80) return 1;
    if ((b & 0xe0) == 0xc0) len = 2, cp = b & 0x1f, min = 0x80;
    else if ((b & 0xf0) == 0xe0) len = 3, cp = b & 0x0f, min = 0x800;
    else if ((b & 0xf8) == 0xf0) len = 4, cp = b & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static void write_string(struct json *j, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', j->f);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', j->f);
            fputc(c, j->f);
            i++;
        } else if (c == '\n') {
            fputs("\\n", j->f);
            i++;
        } else if (c == '\t') {
            fputs("\\t", j->f);
            i++;
        } else if (c == '\r') {
            fputs("\\r", j->f);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(j->f, "\\u%04x", c);
            i++;
        } else {
            size_t len = utf8_len(s + i, n - i);
            if (!len) {
                fputs("\\ufffd", j->f);
                i++;
            } else {
                fwrite(s + i, 1, len, j->f);
                i += len;
            }
        }
    }
    fputc('"', j->f);
}

void json_strn(struct json *j, const char *key, const char *s, size_t n) {
    sep(j, key);
    write_string(j, s, n);
}

void json_str(struct json *j, const char *key, const char *s) {
    s = s ? s : "";
    json_strn(j, key, s, strlen(s));
}

/* Integers a JSON reader's double holds exactly: |v| <= 2^53. Larger ones (seeds,
 * fingerprints of counters) are written as decimal strings so no reader rounds them. */
#define JSON_EXACT_MAX (1ULL << 53)

void json_u64(struct json *j, const char *key, uint64_t v) {
    sep(j, key);
    fprintf(j->f, v > JSON_EXACT_MAX ? "\"%" PRIu64 "\"" : "%" PRIu64, v);
}

void json_i64(struct json *j, const char *key, int64_t v) {
    sep(j, key);
    bool exact = v >= -(int64_t)JSON_EXACT_MAX && v <= (int64_t)JSON_EXACT_MAX;
    fprintf(j->f, exact ? "%" PRId64 : "\"%" PRId64 "\"", v);
}

void json_bool(struct json *j, const char *key, bool v) {
    sep(j, key);
    fputs(v ? "true" : "false", j->f);
}

void json_double(struct json *j, const char *key, double v) {
    sep(j, key);
    if (isfinite(v)) fprintf(j->f, "%.17g", v);
    else fputs("null", j->f);
}
