/* warm-embed-bench: embedding throughput of an embedding model on the CPU.
 *
 *   warm-embed-bench FILE [-t threads] [-n inputs] [-l tokens] [-b inputs-per-pass]
 *                    [-r repeats] [--peer LLAMA_BENCH]
 *
 * Makes an embeddings context (f16 K/V, as the daemon's), then embeds n inputs (64) of l
 * random token ids (128) in passes of b inputs each (default as the daemon packs them: at
 * most 8 inputs and 512 tokens a pass, so 4 for 128-token inputs): one decode per pass,
 * every input a sequence from position 0, then each input's pooled vector read back
 * (engine_context_embeddings, normalized). One untimed pass warms up; the best of r
 * (3) timed runs over all n inputs gives inputs/s and tokens/s (wall clock).
 *
 * --peer LLAMA_BENCH: then runs
 *   LLAMA_BENCH -m FILE -embd 1 -p l -n 0 -b 2048 -ub 2048 -t T -r r -ngl 0 -o jsonl
 * on the same file and prints its best tokens/s and our tokens/s over it. What llama-bench
 * measures: one sequence of l tokens per pass (its pp test: the prompt decoded in one
 * ubatch, embeddings on, the pooled output computed), tokens/s = l / pass time, best of
 * its samples; it has no inputs-per-pass notion, so its inputs/s is tokens/s / l. */
#include "engine/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

struct bench {
    struct engine_context *ctx;
    int n, l, b;
    uint32_t n_vocab, n_out;
    int32_t *tok, *pos, *seq; /* one pass: b * l */
    float *vec;
    uint64_t rng;
};

static uint32_t rnd(struct bench *B) { /* xorshift64 */
    B->rng ^= B->rng << 13;
    B->rng ^= B->rng >> 7;
    B->rng ^= B->rng << 17;
    return (uint32_t)(B->rng >> 32);
}

/* One pass of k inputs: random ids, one decode, k vectors read back. */
static int pass(struct bench *B, int k, struct err_detail *d) {
    int t = 0;
    for (int s = 0; s < k; s++)
        for (int i = 0; i < B->l; i++, t++) {
            B->tok[t] = (int32_t)(rnd(B) % B->n_vocab);
            B->pos[t] = i;
            B->seq[t] = s;
        }
    struct engine_batch batch = {.n_tok = t, .token = B->tok, .pos = B->pos, .seq = B->seq};
    int r = engine_context_decode(B->ctx, &batch, d);
    for (int s = 0; r >= 0 && s < k; s++) r = engine_context_embeddings(B->ctx, s, B->vec, true, d);
    return r;
}

/* All n inputs; seconds in *ret. */
static int run_all(struct bench *B, double *ret, struct err_detail *d) {
    uint64_t t0 = time_now_usec();
    int r = 0;
    for (int done = 0; r >= 0 && done < B->n; done += B->b) r = pass(B, MIN(B->b, B->n - done), d);
    *ret = (double)(time_now_usec() - t0) / 1e6;
    return r;
}

/* The largest number after `"key": [` (an array) or `"key": ` in a JSON line; 0 if none. */
static double json_best(const char *line, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\"", key);
    const char *p = strstr(line, k);
    if (!p) return 0;
    p += strlen(k);
    while (*p == ' ' || *p == ':') p++;
    bool arr = *p == '[';
    if (arr) p++;
    double best = 0;
    for (;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        best = MAX(best, v);
        p = end;
        while (*p == ' ' || *p == ',') p++;
        if (!arr) break;
    }
    return best;
}

/* llama-bench on the same file: its best tokens/s (samples_ts, else avg_ts). */
static int peer_bench(const char *peer, const char *file, int threads, int l, int repeats,
                      double *ret) {
    *ret = 0;
    if (strchr(peer, '\'') || strchr(file, '\'')) return -EINVAL;
    char cmd[8192];
    int n = snprintf(cmd, sizeof cmd,
                     "'%s' -m '%s' -embd 1 -p %d -n 0 -b 2048 -ub 2048 -t %d -r %d -ngl 0 "
                     "-o jsonl 2>/dev/null",
                     peer, file, l, threads, repeats);
    if (n < 0 || (size_t)n >= sizeof cmd) return -EINVAL;
    FILE *f = popen(cmd, "r");
    if (!f) return -errno;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strstr(line, "\"n_prompt\"")) continue;
        double v = json_best(line, "samples_ts");
        if (v <= 0) v = json_best(line, "avg_ts");
        *ret = MAX(*ret, v);
    }
    free(line);
    int st = pclose(f);
    if (*ret > 0) return 0;
    fprintf(stderr, "warm-embed-bench: --peer: no figures from: %s (%s %d)\n", cmd,
            WIFEXITED(st) ? "exit status" : "status", WIFEXITED(st) ? WEXITSTATUS(st) : st);
    return -EIO;
}

static void usage(FILE *out) {
    fprintf(out, "usage: warm-embed-bench FILE [-t threads (1)] [-n inputs (64)]\n"
                 "                        [-l tokens (128)]"
                 " [-b inputs-per-pass (min(8, 512 / l))] [-r repeats (3)]\n"
                 "                        [--peer LLAMA_BENCH]\n");
}

static bool parse_pos(const char *s, int *ret) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1 << 20) return false;
    *ret = (int)v;
    return true;
}

int main(int argc, char **argv) {
    const char *file = NULL, *peer = NULL;
    int threads = 1, n = 64, l = 128, b = 0, repeats = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") && v) ok = parse_pos(v, &threads), i++;
        else if (!strcmp(a, "-n") && v) ok = parse_pos(v, &n), i++;
        else if (!strcmp(a, "-l") && v) ok = parse_pos(v, &l), i++;
        else if (!strcmp(a, "-b") && v) ok = parse_pos(v, &b), i++;
        else if (!strcmp(a, "-r") && v) ok = parse_pos(v, &repeats), i++;
        else if (!strcmp(a, "--peer") && v) peer = v, i++;
        else if (a[0] != '-' && !file) file = a;
        else ok = false;
        if (!ok) {
            usage(stderr);
            return 2;
        }
    }
    if (!file) {
        usage(stderr);
        return 2;
    }
    if (!b) b = MAX(1, MIN(8, 512 / l));
    b = MIN(b, n);

    struct err_detail d = {0};
    struct engine_model *m = NULL;
    int r = engine_model_load(file, NULL, &m, &d);
    if (r < 0) {
        fprintf(stderr, "warm-embed-bench: %s: %s\n", file, err_msg(&d, r));
        return 1;
    }
    struct bench B = {.n = n, .l = l, .b = b, .n_vocab = m->hp.n_vocab,
                      .n_out = engine_model_n_embd_out(m), .rng = 0x9e3779b97f4a7c15ull};
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.embeddings = true;
    p.n_seq = (uint32_t)b;
    p.n_ctx = (uint32_t)l;
    p.n_batch = (uint32_t)(b * l);
    p.n_threads = threads;
    r = engine_context_new(m, &p, &B.ctx, &d);
    if (r < 0) {
        fprintf(stderr, "warm-embed-bench: context: %s\n", err_msg(&d, r));
        engine_model_free(m);
        return 1;
    }
    size_t nt = (size_t)b * (size_t)l;
    B.tok = malloc_array(nt, sizeof *B.tok);
    B.pos = malloc_array(nt, sizeof *B.pos);
    B.seq = malloc_array(nt, sizeof *B.seq);
    B.vec = malloc_array(B.n_out, sizeof *B.vec);
    if (!B.tok || !B.pos || !B.seq || !B.vec) r = -ENOMEM;
    printf("model %s: n_embd %" PRIu32 ", %" PRIu32 " layers, n_vocab %" PRIu32
           ", embedding of %" PRIu32 "\n",
           file, m->hp.n_embd, m->hp.n_layer, B.n_vocab, B.n_out);
    printf("%d inputs of %d tokens, %d a pass (%d tokens), %d threads, f16 K/V, best of %d\n", n,
           l, b, b * l, threads, repeats);

    /* warm-up and sanity: a pass, its first vector finite with norm 1 */
    if (r >= 0) r = pass(&B, b, &d);
    if (r >= 0) {
        r = engine_context_embeddings(B.ctx, 0, B.vec, true, &d);
        double ss = 0;
        for (uint32_t i = 0; r >= 0 && i < B.n_out; i++) ss += (double)B.vec[i] * B.vec[i];
        if (r >= 0 && !(fabs(ss - 1.0) < 1e-3)) {
            fprintf(stderr, "warm-embed-bench: a vector of squared norm %g\n", ss);
            r = ERR_INVALID;
        } else if (r >= 0) {
            printf("sanity: vector 0 of the warm-up pass: %.5f %.5f %.5f %.5f ... |v| = 1\n",
                   B.vec[0], B.vec[1 % B.n_out], B.vec[2 % B.n_out], B.vec[3 % B.n_out]);
        }
    }
    double best = 0;
    for (int k = 0; r >= 0 && k < repeats; k++) {
        double s;
        r = run_all(&B, &s, &d);
        if (r >= 0) best = best == 0 ? s : MIN(best, s);
    }
    int rc = 0;
    if (r < 0) {
        fprintf(stderr, "warm-embed-bench: %s\n", err_msg(&d, r));
        rc = 1;
    } else {
        double ips = n / best, tps = (double)n * l / best;
        printf("%-6s %12s %12s %10s\n", "", "inputs/s", "tokens/s", "ms/pass");
        printf("%-6s %12.2f %12.1f %10.2f\n", "warm", ips, tps, 1e3 * best / ((n + b - 1) / b));
        if (peer) {
            double pt;
            int e = peer_bench(peer, file, threads, l, repeats, &pt);
            if (e < 0 && e != -EIO) fprintf(stderr, "warm-embed-bench: --peer: %s\n", strerror(-e));
            if (e >= 0) {
                printf("%-6s %12.2f %12.1f %10.2f  (llama-bench pp%d -embd 1: 1 input a pass)\n",
                       "peer", pt / l, pt, 1e3 * l / pt, l);
                printf("ratio warm / peer (tokens/s): %.3fx\n", tps / pt);
            } else {
                rc = 1;
            }
        }
    }
    free(B.tok);
    free(B.pos);
    free(B.seq);
    free(B.vec);
    engine_context_free(B.ctx);
    engine_model_free(m);
    return rc;
}
