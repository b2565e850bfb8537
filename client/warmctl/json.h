/* json — a small streaming JSON writer for warmctl --json: one compact document per
 * json_begin/json_end pair, a newline after it. Keys are NULL inside arrays. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json {
    FILE *f;
    int depth;
    bool first[JSON_MAX_DEPTH];
};

void json_begin(struct json *j, FILE *f);   /* starts the top-level object */
void json_end(struct json *j);              /* closes it, newline, flush */
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
void json_array_end(struct json *j);
void json_str(struct json *j, const char *key, const char *s);
/* n bytes; invalid UTF-8 bytes become U+FFFD so the output stays valid JSON. */
void json_strn(struct json *j, const char *key, const char *s, size_t n);
/* Integers: numbers up to 2^53 in magnitude (what a double holds exactly), decimal
 * strings beyond ("18446744073709551615"), so JavaScript and Python readers lose nothing. */
void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
void json_bool(struct json *j, const char *key, bool v);
void json_double(struct json *j, const char *key, double v);
