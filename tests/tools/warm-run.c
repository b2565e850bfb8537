/* warm-run — the engine without the daemon: load a GGUF model, tokenize a prompt, run
 * the forward pass and sample, printing the text as it is generated.
 *
 *   warm-run -m MODEL [-p PROMPT | --prompt-ids "1 403 407"] [-n STEPS] [--max-new N]
 *            [-t THREADS] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S]
 *            [--repeat-penalty R] [--freq-penalty F] [--presence-penalty P]
 *            [--penalty-last-n N] [--cache-type TYPE] [--ctk TYPE] [--ctv TYPE]
 *            [--kv-rotation on|off] [--save-state FILE --save-at N] [--load-state FILE]
 *            [--ids] [--stop-on-bos] [--logits FILE]
 *
 * Steps (-n, as llama2.c's run.c and ../shared/models/README.md): forward passes at
 * positions 0..STEPS-1; every position from the last prompt token on samples one token,
 * so at most STEPS - n_prompt + 1 tokens are generated; --max-new caps that count.
 * Generation stops at an end-of-generation token, and at BOS with --stop-on-bos (models
 * like stories260K end a story with BOS). Neither stop token is printed or counted.
 * With --ids, two lines follow the text: "prompt_ids: ..." and "generated_ids: ...".
 * Timings go to stderr. Default sampling is greedy (--temp 0).
 *
 * KV cache: --cache-type sets the K and V types, --ctk / --ctv each one (f32, f16, bf16,
 * q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; default f16). Hadamard rotation of quantized K/V
 * is on unless --kv-rotation off or WARM_ATTN_ROT_DISABLE=1 (read once here).
 * --save-state FILE --save-at N processes prompt positions [0, N), writes their KV state
 * blob to FILE and stops. --load-state FILE imports a blob (its tokens must be the
 * prompt's), processes the rest of the prompt (at least its last token, for the logits)
 * and generates; a rejected blob ends warm-run with exit status 1 and the reason.
 *
 * --logits FILE writes the logits of every sampling step in the format of
 * ../shared/models/gemma/README.md: the 8-byte magic "LGTS" 00 00 00 01, then u32 n_vocab,
 * n_rows, n_prompt, first_pos (= n_prompt - 1), little-endian, then n_rows rows of n_vocab
 * f32; row k holds the logits (after any soft-cap) at position first_pos + k, from which
 * the k-th token was sampled (a stop token's step included). */
#include "engine/engine.h"
#include "engine/vocab.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct options {
    const char *model, *prompt, *prompt_ids;
    long steps, max_new;
    int threads;
    bool ids, stop_on_bos;
    const char *cache_type, *ctk, *ctv;
    const char *save_state, *load_state, *logits;
    long save_at;
    int kv_rotation; /* -1: from the environment */
    const char *devices, *split, *tensor_split; /* NULL: one device, split none, equal */
    const char *device; /* NULL: cpu */
    long gpu_layers;
    int experts; /* enum engine_experts_place */
    struct engine_sampler_params sp;
};

static void usage(FILE *f) {
    fprintf(f, "usage: warm-run -m MODEL [-p PROMPT | --prompt-ids \"ID ...\"] [-n STEPS] "
               "[--max-new N] [-t THREADS]\n"
               "       [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] "
               "[--repeat-penalty R]\n"
               "       [--freq-penalty F] [--presence-penalty P] [--penalty-last-n N] "
               "[--cache-type TYPE]\n"
               "       [--ctk TYPE] [--ctv TYPE] [--kv-rotation on|off] "
               "[--save-state FILE --save-at N] [--load-state FILE]\n"
               "       [--ids] [--stop-on-bos] [--logits FILE]\n"
               "       [--devices cpu,cpu,...|cuda:0,cuda:1,... --split none|tensor [--tensor-split R,R,...]]\n"
               "       [--device auto|cpu|cuda:N [--gpu-layers N] [--experts auto|gpu|cpu]]\n"
               "TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl\n");
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -EINVAL;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return -EINVAL;
    *out = v;
    return 0;
}

static int options_parse(int argc, char **argv, struct options *o) {
    engine_sampler_params_default(&o->sp);
    o->prompt = "";
    o->steps = 256;
    o->max_new = -1;
    o->threads = (int)MAX(1, sysconf(_SC_NPROCESSORS_ONLN));
    o->cache_type = "f16";
    o->kv_rotation = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        int r = 0;
        bool takes = true;
        if (!strcmp(a, "--ids")) o->ids = true, takes = false;
        else if (!strcmp(a, "--stop-on-bos")) o->stop_on_bos = true, takes = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!v) r = -EINVAL;
        else if (!strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "-p")) o->prompt = v;
        else if (!strcmp(a, "--prompt-ids")) o->prompt_ids = v;
        else if (!strcmp(a, "--cache-type")) o->cache_type = v;
        else if (!strcmp(a, "--ctk")) o->ctk = v;
        else if (!strcmp(a, "--ctv")) o->ctv = v;
        else if (!strcmp(a, "--save-state")) o->save_state = v;
        else if (!strcmp(a, "--load-state")) o->load_state = v;
        else if (!strcmp(a, "--logits")) o->logits = v;
        else if (!strcmp(a, "--devices")) o->devices = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--gpu-layers")) r = parse_long(v, 0, 65536, &o->gpu_layers);
        else if (!strcmp(a, "--experts")) {
            o->experts = !strcmp(v, "auto") ? ENGINE_EXPERTS_AUTO
                         : !strcmp(v, "gpu") ? ENGINE_EXPERTS_GPU
                         : !strcmp(v, "cpu") ? ENGINE_EXPERTS_CPU
                                             : -1;
            if (o->experts < 0) r = -EINVAL;
        }
        else if (!strcmp(a, "--split")) o->split = v;
        else if (!strcmp(a, "--tensor-split")) o->tensor_split = v;
        else if (!strcmp(a, "--save-at")) r = parse_long(v, 1, INT32_MAX, &o->save_at);
        else if (!strcmp(a, "--kv-rotation")) {
            o->kv_rotation = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -2;
            if (o->kv_rotation == -2) r = -EINVAL;
        }
        else if (!strcmp(a, "-n")) r = parse_long(v, 1, INT32_MAX, &o->steps);
        else if (!strcmp(a, "--max-new")) r = parse_long(v, 0, INT32_MAX, &o->max_new);
        else if (!strcmp(a, "-t")) r = parse_long(v, 1, 1024, &n), o->threads = (int)n;
        else if (!strcmp(a, "--top-k")) r = parse_long(v, 0, INT32_MAX, &n), o->sp.top_k = (int32_t)n;
        else if (!strcmp(a, "--penalty-last-n"))
            r = parse_long(v, 0, 1 << 20, &n), o->sp.penalty_last_n = (int32_t)n;
        else if (!strcmp(a, "--seed")) r = parse_long(v, 0, LONG_MAX, &n), o->sp.seed = (uint64_t)n;
        else if (!strcmp(a, "--temp")) r = parse_float(v, &o->sp.temperature);
        else if (!strcmp(a, "--top-p")) r = parse_float(v, &o->sp.top_p);
        else if (!strcmp(a, "--min-p")) r = parse_float(v, &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty")) r = parse_float(v, &o->sp.repeat_penalty);
        else if (!strcmp(a, "--freq-penalty")) r = parse_float(v, &o->sp.frequency_penalty);
        else if (!strcmp(a, "--presence-penalty")) r = parse_float(v, &o->sp.presence_penalty);
        else {
            fprintf(stderr, "warm-run: unknown option '%s'\n", a);
            return -EINVAL;
        }
        if (r < 0) {
            fprintf(stderr, "warm-run: bad or missing value for '%s'\n", a);
            return r;
        }
        if (takes) i++;
    }
    if (!o->model) {
        usage(stderr);
        return -EINVAL;
    }
    if (!o->save_state != !o->save_at) {
        fprintf(stderr, "warm-run: --save-state and --save-at go together\n");
        return -EINVAL;
    }
    if (o->save_state && o->load_state) {
        fprintf(stderr, "warm-run: --save-state and --load-state exclude each other\n");
        return -EINVAL;
    }
    return 0;
}

/* Parses "1 403 407" into ids; returns the count or < 0. */
static int ids_parse(const char *s, int32_t *ids, size_t cap, size_t *ret_n) {
    size_t n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s) {
            if (*s == ' ' || *s == ',') {
                s++;
                continue;
            }
            return -EINVAL;
        }
        if (errno || v < 0 || v > INT32_MAX || n == cap) return -EINVAL;
        ids[n++] = (int32_t)v;
        s = end;
    }
    *ret_n = n;
    return 0;
}

static void ids_print(const char *label, const int32_t *ids, size_t n) {
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

struct run {
    struct engine_model *model;
    struct engine_vocab *vocab;
    struct engine_context *ctx;
    struct engine_sampler *sampler;
    int32_t *prompt, *gen;
    char *piece;
    FILE *lf; /* --logits */
};

static void run_done(struct run *r) {
    engine_sampler_free(r->sampler);
    engine_context_free(r->ctx);
    engine_vocab_free(r->vocab);
    engine_model_free(r->model);
    free(r->prompt);
    free(r->gen);
    free(r->piece);
    if (r->lf) fclose(r->lf);
}

static int fail(const char *what, int r, const struct err_detail *d) {
    fprintf(stderr, "warm-run: %s: %s (%s)\n", what, err_msg(d, r), err_name(r));
    return 1;
}

/* Writes the state blob of positions [0, n) of sequence 0 to path; 0 or exit status 1. */
static int state_save(struct engine_context *ctx, const char *path, uint32_t n) {
    struct err_detail d = {0};
    size_t size = 0;
    int r = engine_kv_export(ctx, 0, 0, n, NULL, 0, &size, &d);
    if (r < 0) return fail("save state", r, &d);
    void *buf = malloc(size);
    if (!buf) return fail("save state", -ENOMEM, NULL);
    r = engine_kv_export(ctx, 0, 0, n, buf, size, &size, &d);
    if (r < 0) {
        free(buf);
        return fail("save state", r, &d);
    }
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(buf, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = false;
    free(buf);
    if (!ok) {
        fprintf(stderr, "warm-run: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(stderr, "warm-run: saved positions [0, %u) to %s (%zu bytes)\n", n, path, size);
    return 0;
}

/* Imports the blob in path into sequence 0, checked against the prompt's tokens;
 * 0 or exit status 1 with the reason printed. */
static int state_load(struct engine_context *ctx, const char *path, const int32_t *prompt,
                      size_t n_prompt, uint32_t *ret_p1) {
    struct err_detail d = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "warm-run: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return fail("load state", -ENOMEM, NULL);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    int r = engine_kv_import(ctx, 0, buf, n, prompt, n_prompt, ret_p1, &d);
    free(buf);
    if (r < 0) {
        fprintf(stderr, "warm-run: load state %s: %s (%s)\n", path, err_msg(&d, r), err_name(r));
        return 1;
    }
    fprintf(stderr, "warm-run: loaded positions [0, %u) from %s\n", *ret_p1, path);
    return 0;
}

/* The --logits file: header (its row count rewritten at the end), then one row per step. */
static void le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int logits_header(FILE *f, uint32_t n_vocab, uint32_t n_rows, uint32_t n_prompt) {
    uint8_t h[24] = {'L', 'G', 'T', 'S', 0, 0, 0, 1};
    le32(h + 8, n_vocab);
    le32(h + 12, n_rows);
    le32(h + 16, n_prompt);
    le32(h + 20, n_prompt - 1);
    return fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, f) == sizeof h ? 0 : -EIO;
}

static int logits_row(FILE *f, const float *x, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        uint8_t b[4];
        memcpy(&u, &x[i], 4);
        le32(b, u);
        if (fwrite(b, 1, 4, f) != 4) return -EIO;
    }
    return 0;
}

/* Prints the piece of id through the streaming detokenizer. */
static void emit(struct engine_detok *dt, int32_t id, char *buf, size_t cap) {
    int n = engine_detok_feed(dt, id, buf, cap);
    if (n > 0) {
        fwrite(buf, 1, (size_t)n, stdout);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    struct options o = {0};
    if (options_parse(argc, argv, &o) < 0) return 2;
    struct run run = {0};
    struct err_detail d = {0};
    int r, rc = 1;
    int kt = kern_type_from_name(o.ctk ? o.ctk : o.cache_type);
    int vt = kern_type_from_name(o.ctv ? o.ctv : o.cache_type);
    if (kt < 0 || vt < 0) {
        fprintf(stderr, "warm-run: unknown cache type '%s'\n",
                kt < 0 ? (o.ctk ? o.ctk : o.cache_type) : (o.ctv ? o.ctv : o.cache_type));
        return 2;
    }

    uint64_t t_load = time_now_usec();
    if ((r = engine_model_load(o.model, NULL, &run.model, &d)) < 0) {
        rc = fail(o.model, r, &d);
        goto out;
    }
    const struct engine_hparams *hp = &run.model->hp;
    if ((r = engine_vocab_load(engine_model_gguf(run.model), &run.vocab, &d)) < 0) {
        rc = fail("vocabulary", r, &d);
        goto out;
    }

    /* prompt ids: given, or the prompt tokenized with BOS as the vocabulary asks */
    size_t n_prompt = 0, cap = strlen(o.prompt) + 16;
    if (o.prompt_ids) cap = strlen(o.prompt_ids) + 1;
    run.prompt = malloc_array(cap, sizeof *run.prompt);
    if (!run.prompt) goto out;
    if (o.prompt_ids)
        r = ids_parse(o.prompt_ids, run.prompt, cap, &n_prompt);
    else
        r = engine_vocab_tokenize(run.vocab, o.prompt, strlen(o.prompt),
                                  ENGINE_TOKENIZE_ADD_SPECIAL, run.prompt, cap, &n_prompt);
    if (r < 0) {
        rc = fail("prompt", r, NULL);
        goto out;
    }
    if (n_prompt == 0 && engine_vocab_bos(run.vocab) >= 0) run.prompt[n_prompt++] = engine_vocab_bos(run.vocab);
    if (n_prompt == 0) {
        fprintf(stderr, "warm-run: the prompt has no tokens\n");
        goto out;
    }
    if ((long)n_prompt > o.steps) {
        fprintf(stderr, "warm-run: the prompt has %zu tokens, more than -n %ld\n", n_prompt, o.steps);
        goto out;
    }

    struct engine_context_params cp;
    engine_context_params_default(&cp);
    cp.n_ctx = (uint32_t)o.steps;
    cp.n_threads = o.threads;
    cp.type_k = (enum kern_type)kt;
    cp.type_v = (enum kern_type)vt;
    cp.kv_rotation = o.kv_rotation >= 0 ? o.kv_rotation == 1 : engine_kv_rotation_env_default();
    cp.gpu_layers = (uint32_t)o.gpu_layers;
    cp.experts = (enum engine_experts_place)o.experts;
    if ((o.device && (r = engine_device_resolve(o.device, &cp.device, &cp.device_index, NULL, 0, &d)) < 0) ||
        (o.devices && (r = engine_devices_parse_into(o.devices, &cp, &d)) < 0) ||
        (o.split && (r = engine_split_from_name(o.split)) < 0 &&
         (r = err_set(&d, ERR_INVALID, "--split %s: not none or tensor", o.split)) < 0) ||
        (o.tensor_split && (r = engine_tensor_split_parse(o.tensor_split, cp.tensor_split,
                                                          ENGINE_MAX_DEVICES, &d)) < 0)) {
        rc = fail("devices", r, &d);
        goto out;
    }
    if (o.split) cp.split = (enum engine_split)engine_split_from_name(o.split);
    if ((r = engine_context_new(run.model, &cp, &run.ctx, &d)) < 0) {
        rc = fail("context", r, &d);
        goto out;
    }
    if (*engine_context_device_note(run.ctx))
        fprintf(stderr, "warm-run: device auto: on the CPU, since %s\n", engine_context_device_note(run.ctx));
    if ((r = engine_sampler_new(&o.sp, (int32_t)hp->n_vocab, &run.sampler)) < 0) {
        rc = fail("sampler", r, NULL);
        goto out;
    }
    size_t max_gen = (size_t)(o.steps - (long)n_prompt + 1);
    if (o.max_new >= 0) max_gen = MIN(max_gen, (size_t)o.max_new);
    /* the detokenizer wants room for the piece plus held bytes, x3 when it replaces
     * invalid bytes by U+FFFD: be generous */
    size_t piece_cap = 4 * (engine_vocab_max_piece(run.vocab) + 8);
    run.gen = malloc_array(max_gen + 1, sizeof *run.gen);
    run.piece = malloc(piece_cap);
    int32_t *pos = malloc_array(n_prompt, sizeof *pos);
    if (!run.gen || !run.piece || !pos) {
        free(pos);
        goto out;
    }
    t_load = time_now_usec() - t_load;

    /* the prompt: one batch (the context splits it), its pieces printed first */
    struct engine_detok dt;
    engine_detok_init(&dt, run.vocab, ENGINE_DETOK_TEXT_START);
    for (size_t i = 0; i < n_prompt; i++) {
        pos[i] = (int32_t)i;
        engine_sampler_accept(run.sampler, run.prompt[i]);
        emit(&dt, run.prompt[i], run.piece, piece_cap);
    }
    uint64_t t0 = time_now_usec();
    if (o.save_state) {
        if ((size_t)o.save_at > n_prompt) {
            fprintf(stderr, "warm-run: --save-at %ld is past the prompt's %zu tokens\n",
                    o.save_at, n_prompt);
            free(pos);
            goto out;
        }
        struct engine_batch sb = {.n_tok = (int32_t)o.save_at, .token = run.prompt, .pos = pos};
        r = engine_context_decode(run.ctx, &sb, &d);
        free(pos);
        if (r < 0) {
            rc = fail("prompt", r, &d);
            goto out;
        }
        rc = state_save(run.ctx, o.save_state, (uint32_t)o.save_at);
        goto out;
    }
    /* with --load-state: the blob's positions, then the rest of the prompt (at least its
     * last token, whose logits start the generation) */
    size_t start = 0;
    if (o.load_state) {
        uint32_t p1 = 0;
        if ((rc = state_load(run.ctx, o.load_state, run.prompt, n_prompt, &p1)) != 0) {
            free(pos);
            goto out;
        }
        rc = 1;
        start = MIN((size_t)p1, n_prompt - 1);
        engine_kv_seq_rm(run.ctx, 0, (uint32_t)start);
    }
    struct engine_batch b = {.n_tok = (int32_t)(n_prompt - start), .token = run.prompt + start,
                             .pos = pos + start};
    r = engine_context_decode(run.ctx, &b, &d);
    free(pos);
    if (r < 0) {
        rc = fail("prompt", r, &d);
        goto out;
    }
    uint64_t t_prompt = time_now_usec() - t0;

    /* generation: sample, print, feed back at the next position */
    size_t n_gen = 0;
    uint32_t n_rows = 0;
    int32_t bos = engine_vocab_bos(run.vocab);
    FILE *lf = o.logits ? (run.lf = fopen(o.logits, "wb")) : NULL;
    if (o.logits && (!lf || logits_header(lf, hp->n_vocab, 0, (uint32_t)n_prompt) < 0)) {
        fprintf(stderr, "warm-run: cannot write %s: %s\n", o.logits, strerror(errno));
        goto out;
    }
    t0 = time_now_usec();
    while (n_gen < max_gen) {
        if (lf && logits_row(lf, engine_context_logits(run.ctx, 0), hp->n_vocab) < 0) break;
        n_rows++;
        int32_t tok = engine_sampler_sample(run.sampler, engine_context_logits(run.ctx, 0), &d);
        if (tok < 0) {
            rc = fail("sample", tok, &d);
            goto out;
        }
        if (engine_vocab_is_eog(run.vocab, tok) || (o.stop_on_bos && tok == bos)) break;
        run.gen[n_gen++] = tok;
        engine_sampler_accept(run.sampler, tok);
        emit(&dt, tok, run.piece, piece_cap);
        if (n_gen == max_gen) break;
        int32_t p = (int32_t)(n_prompt - 1 + n_gen);
        struct engine_batch one = {.n_tok = 1, .token = &tok, .pos = &p};
        if ((r = engine_context_decode(run.ctx, &one, &d)) < 0) {
            rc = fail("decode", r, &d);
            goto out;
        }
    }
    uint64_t t_gen = time_now_usec() - t0;
    if (lf) {
        bool ok = logits_header(lf, hp->n_vocab, n_rows, (uint32_t)n_prompt) == 0;
        run.lf = NULL;
        if (fclose(lf) != 0 || !ok) {
            fprintf(stderr, "warm-run: cannot write %s\n", o.logits);
            goto out;
        }
    }
    int n = engine_detok_flush(&dt, run.piece, piece_cap);
    if (n > 0) fwrite(run.piece, 1, (size_t)n, stdout);
    printf("\n");
    if (o.ids) {
        ids_print("prompt_ids", run.prompt, n_prompt);
        ids_print("generated_ids", run.gen, n_gen);
    }
    fflush(stdout);
    fprintf(stderr, "warm-run: load %.1f ms; prompt %zu tokens in %.1f ms (%.1f tok/s); "
            "generated %zu tokens in %.1f ms (%.1f tok/s); %d threads\n",
            (double)t_load / 1e3, n_prompt, (double)t_prompt / 1e3,
            t_prompt ? (double)n_prompt * 1e6 / (double)t_prompt : 0.0, n_gen,
            (double)t_gen / 1e3, t_gen ? (double)n_gen * 1e6 / (double)t_gen : 0.0, o.threads);
    rc = 0;
out:
    run_done(&run);
    return rc;
}
