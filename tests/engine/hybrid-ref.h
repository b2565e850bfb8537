/* hybrid-ref — reading ../shared/models/hybrid/README.md's references in the MoE, gpt-oss
 * and Gemma 4 MoE tests (and test-cuda-device): a prompt's ids and greedy ids
 * (<model>-P<n>.txt) and its per-step logits (LGTS v1, <model>-P<n>.logits), and loading a
 * model with its error printed. */
#pragma once

#include "test.h"

#include "engine/engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 24
#define MAX_PROMPT 1024

struct reference {
    int32_t prompt[MAX_PROMPT];
    size_t n_prompt;
    int32_t gen[N_STEPS];
    float *logits; /* (N_STEPS, n_vocab) */
    uint32_t n_vocab;
};

static inline size_t ids_parse(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s || n == cap) break;
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The README's LGTS v1 logits file at path: (n_rows, n_vocab) floats. */
static inline float *logits_read_path(const char *path, uint32_t *n_vocab, uint32_t *n_rows,
                               uint32_t *n_prompt, uint32_t *first_pos) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return NULL;
    uint8_t h[24];
    float *x = NULL;
    if (fread(h, 1, 24, f) == 24 && !memcmp(h, "LGTS\0\0\0\1", 8)) {
        *n_vocab = rd32(h + 8), *n_rows = rd32(h + 12), *n_prompt = rd32(h + 16);
        *first_pos = rd32(h + 20);
        size_t n = (size_t)*n_vocab * *n_rows;
        x = malloc(n * sizeof *x + 1);
        if (x && fread(x, sizeof *x, n, f) != n) free(x), x = NULL; /* little-endian host */
    }
    fclose(f);
    return x;
}

/* The same of a file under ../shared/models. */
static inline float *logits_read(const char *rel, uint32_t *n_vocab, uint32_t *n_rows, uint32_t *n_prompt,
                          uint32_t *first_pos) {
    return logits_read_path(test_shared_path(rel), n_vocab, n_rows, n_prompt, first_pos);
}

static inline bool reference_load(const char *name, const char *prompt, struct reference *r) {
    char rel[128];
    snprintf(rel, sizeof rel, "hybrid/%s-%s.txt", name, prompt);
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return false;
    static char line[1 << 16];
    size_t n_gen = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "prompt_ids: ", 12))
            r->n_prompt = ids_parse(line + 12, r->prompt, MAX_PROMPT);
        if (!strncmp(line, "generated_ids: ", 15)) n_gen = ids_parse(line + 15, r->gen, N_STEPS);
    }
    fclose(f);
    snprintf(rel, sizeof rel, "hybrid/%s-%s.logits", name, prompt);
    uint32_t rows = 0, np = 0, fp = 0;
    r->logits = logits_read(rel, &r->n_vocab, &rows, &np, &fp);
    return r->logits && n_gen == N_STEPS && rows == N_STEPS && np == r->n_prompt &&
           fp == r->n_prompt - 1;
}

static inline struct engine_model *model_load(const char *path) {
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (!path) return NULL;
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}
