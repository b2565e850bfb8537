/* warm-bench — prefill and decode speed of a model, next to the memory bandwidth bound.
 *
 *   warm-bench MODEL [-t N] [-p PROMPT_TOKENS] [-g DECODE_TOKENS] [-r REPEATS]
 *              [-d DEPTH] [--cache-type f32|f16|bf16|q8_0|q4_0|...] [--peer LLAMA_BENCH]
 *              [--private-copy]
 *
 * For 1 thread and for N threads (default: all online CPUs):
 *   prefill: one batch of PROMPT_TOKENS (default 512) random tokens into an empty
 *            sequence, tokens/s;
 *   decode:  DECODE_TOKENS (default 128) single-token steps from an empty sequence
 *            (llama-bench's tg), tokens/s;
 *   -d DEPTH: both start after DEPTH tokens already in the cache (llama-bench's -d),
 *            prefilled once, untimed, so attention reads DEPTH more keys per token;
 *   bandwidth: reading a 1 GiB buffer with the same threads, GB/s: one sample right after
 *            each repeat's decode, the best of them (a shared machine's bandwidth drifts
 *            over seconds: the samples come from the same minutes as the decodes);
 *   bound:   bandwidth / bytes of weights read per decoded token; decode as % of it (a
 *            mixture of experts reads its active bytes: the selected experts' rows and
 *            the weights outside the experts, engine_model.active_bytes). The buffer
 *            comes from DRAM; a model's weights partly from the last-level cache where
 *            they are not many times its size, so a small model can pass 100 %.
 * First the CPU's features, the kernel level (WARM_KERNELS caps it) and, per weight type
 * of the model's matrices, the level and path its decode and prefill take (rows8,
 * rows8x4, rows16, rows, reference: kern_matmul_path).
 * Each figure is the best of REPEATS (default 3) runs after one warm-up.
 *   --device cuda:N [--gpu-layers N], --devices cuda:0,cuda:1 --split tensor: the model on
 *            GPUs (the bandwidth bound printed is still the host's: device-check.sh's
 *            warm-cuda-bench measures the GPU's); --experts cpu keeps a mixture's routed
 *            experts on the CPU (config `experts`);
 *   --private-copy: load the model as the daemon does, into a private copy that the first
 *            context repacks in place (a MoE model's experts too; a mapped file's experts
 *            are read in the file's rows);
 *   --peer LLAMA_BENCH: after each thread count, that llama-bench binary on the same file,
 *            threads, sizes, depth, cache type and repeats (-ngl 0), its best repeat, and
 *            the ratios warm-bench / llama-bench; run back to back, so both see the same
 *            load.
 *
 * On a shared machine the wall-clock figures fall with the load; the "cpu" columns divide
 * by the process's CPU time per thread instead (waiting workers spin, so an undisturbed
 * run uses threads × wall-clock seconds), which estimates the figure the same run would
 * reach with the cores to itself. The load average is printed too. */
#include "engine/engine.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct read_task {
    const uint64_t *buf;
    size_t n;          /* words */
    uint64_t sums[64]; /* one per thread, spaced to keep the compiler from dropping reads */
};

/* Sums the thread's slice; the xor of all words keeps every load live. */
static void read_run(void *arg, int ith, int nth) {
    struct read_task *t = arg;
    size_t i0 = t->n * (size_t)ith / (size_t)nth, i1 = t->n * (size_t)(ith + 1) / (size_t)nth;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = i0; i + 4 <= i1; i += 4) {
        a ^= t->buf[i];
        b ^= t->buf[i + 1];
        c ^= t->buf[i + 2];
        d ^= t->buf[i + 3];
    }
    t->sums[ith % 64] = a ^ b ^ c ^ d;
}

/* Read bandwidth in bytes per second with the pool's threads, best of repeats. */
static double bandwidth(struct kern_pool *pool, const uint64_t *buf, size_t bytes, int repeats) {
    struct read_task t = {.buf = buf, .n = bytes / 8};
    double best = 0;
    kern_pool_run(pool, read_run, &t); /* warm-up */
    for (int r = 0; r < repeats; r++) {
        uint64_t t0 = time_now_usec();
        kern_pool_run(pool, read_run, &t);
        double s = (double)(time_now_usec() - t0) / 1e6;
        best = MAX(best, (double)bytes / s);
    }
    return best;
}

struct result {
    double prefill, decode, bw;
    double prefill_cpu, decode_cpu; /* per CPU-second of each thread */
};

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --devices / --split / --tensor-split: the context's devices (default one CPU);
 * --device / --gpu-layers / --experts: one GPU, and where a mixture's experts run */
static uint32_t split_n_devices = 1;
static uint16_t split_cuda[ENGINE_MAX_DEVICES];
static enum engine_device_kind device_kind = ENGINE_DEVICE_CPU;
static int device_index;
static uint32_t gpu_layers;
static enum engine_experts_place experts;
static enum engine_split split_kind = ENGINE_SPLIT_NONE;
static float split_ratio[ENGINE_MAX_DEVICES];
static bool devices_printed;

/* The memory each device of ctx reserved, once per run. */
static void devices_print(const struct engine_context *ctx) {
    if (devices_printed) return;
    devices_printed = true;
    printf("%-6s %8s %12s %12s %12s %12s\n", "device", "threads", "weights MiB", "copied MiB",
           "KV MiB", "scratch MiB");
    for (uint32_t i = 0; i < engine_context_n_devices(ctx); i++) {
        struct engine_device_info di;
        if (engine_context_device_info(ctx, i, &di) < 0) break;
        printf("%-6s %8d %12.2f %12.2f %12.2f %12.2f\n", di.name, di.n_threads,
               (double)di.weight_bytes / (1 << 20), (double)di.copied_bytes / (1 << 20),
               (double)di.kv_bytes / (1 << 20), (double)di.scratch_bytes / (1 << 20));
    }
}

static int bench(const struct engine_model *m, int threads, int n_prompt, int n_gen, int depth,
                 int repeats, enum kern_type kv_type, const uint64_t *buf, size_t buf_bytes,
                 struct result *res) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = (uint32_t)(depth + MAX(n_prompt, n_gen) + 1);
    p.n_batch = (uint32_t)n_prompt;
    p.n_threads = threads;
    p.type_k = p.type_v = kv_type;
    p.n_devices = split_n_devices;
    memcpy(p.split_cuda, split_cuda, sizeof split_cuda);
    p.split = split_kind;
    p.device = device_kind;
    p.device_index = device_index;
    p.gpu_layers = gpu_layers;
    p.experts = experts;
    memcpy(p.tensor_split, split_ratio, sizeof split_ratio);
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) {
        fprintf(stderr, "warm-bench: context: %s\n", err_msg(&d, r));
        return r;
    }
    devices_print(ctx);
    int n_tok = MAX(n_prompt, depth);
    int32_t *tok = malloc_array((size_t)n_tok, sizeof *tok);
    int32_t *pos = malloc_array((size_t)n_tok, sizeof *pos);
    if (!tok || !pos) {
        free(tok);
        free(pos);
        engine_context_free(ctx);
        return -ENOMEM;
    }
    uint64_t rng = 12345;
    for (int i = 0; i < n_tok; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((rng >> 33) % m->hp.n_vocab);
        pos[i] = i;
    }
    /* the DEPTH prefix, in batches of n_prompt; every run below starts after it */
    for (int i = 0; i < depth && r >= 0; i += n_prompt) {
        struct engine_batch b = {.n_tok = MIN(n_prompt, depth - i), .token = tok + i, .pos = pos + i};
        r = engine_context_decode(ctx, &b, &d);
    }
    for (int i = 0; i < n_prompt; i++) pos[i] = depth + i;
    *res = (struct result){0};
    struct kern_pool *pool = NULL; /* the bandwidth's threads, asleep while the model runs */
    if (r >= 0) r = kern_pool_new(threads, &pool);
    for (int rep = 0; rep <= repeats && r >= 0; rep++) { /* rep 0 warms up */
        engine_kv_seq_rm(ctx, 0, (uint32_t)depth);
        struct engine_batch b = {.n_tok = n_prompt, .token = tok, .pos = pos};
        uint64_t t0 = time_now_usec();
        double c0 = cpu_seconds();
        r = engine_context_decode(ctx, &b, &d);
        double s = (double)(time_now_usec() - t0) / 1e6, c = (cpu_seconds() - c0) / threads;
        if (rep > 0) res->prefill = MAX(res->prefill, n_prompt / s);
        if (rep > 0) res->prefill_cpu = MAX(res->prefill_cpu, n_prompt / c);

        engine_kv_seq_rm(ctx, 0, (uint32_t)depth);
        t0 = time_now_usec();
        c0 = cpu_seconds();
        int32_t t = tok[0];
        for (int i = 0; i < n_gen && r >= 0; i++) {
            int32_t at = depth + i;
            struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &at};
            r = engine_context_decode(ctx, &one, &d);
            t = tok[(i + 1) % n_prompt];
        }
        s = (double)(time_now_usec() - t0) / 1e6;
        c = (cpu_seconds() - c0) / threads;
        if (rep > 0) res->decode = MAX(res->decode, n_gen / s);
        if (rep > 0) res->decode_cpu = MAX(res->decode_cpu, n_gen / c);
        if (rep > 0 && r >= 0) res->bw = MAX(res->bw, bandwidth(pool, buf, buf_bytes, 2));
    }
    if (r < 0) fprintf(stderr, "warm-bench: decode: %s\n", err_msg(&d, r));
    kern_pool_free(pool);
    free(tok);
    free(pos);
    engine_context_free(ctx);
    return r;
}

/* The best of a llama-bench JSONL line's samples_ts (tokens/s of each repeat), like our
 * best of repeats; its avg_ts when the line has no samples. */
static double peer_best_ts(json_t *o) {
    json_t *samples = json_object_get(o, "samples_ts"), *v;
    size_t i;
    double best = 0;
    json_array_foreach(samples, i, v) best = MAX(best, json_number_value(v));
    return best > 0 ? best : json_number_value(json_object_get(o, "avg_ts"));
}

/* Runs llama-bench on the same file and settings; *ret_pp and *ret_tg get its best
 * tokens/s (0 when absent), *ret_commit its build_commit. Its JSONL lines each describe
 * one test (n_prompt or n_gen). -ngl 0: CPU against CPU even when it was built with a GPU
 * backend. -d only when a depth is asked for (older builds lack it). Its stderr goes to a
 * temporary file whose tail is shown when no figure came back. */
static int peer_bench(const char *peer, const char *model, int threads, int n_prompt, int n_gen,
                      int depth, int repeats, const char *cache, double *ret_pp,
                      double *ret_tg, char *ret_commit, size_t commit_size) {
    *ret_pp = *ret_tg = 0;
    char err_path[] = "/tmp/warm-bench-peer-XXXXXX";
    int efd = mkstemp(err_path);
    if (efd < 0) return -errno;
    close(efd);
    char cmd[8192], dep[32] = "";
    if (depth > 0) snprintf(dep, sizeof dep, " -d %d", depth);
    int n = snprintf(cmd, sizeof cmd,
                     "'%s' -m '%s' -t %d -p %d -n %d%s -r %d -ngl 0 -ctk %s -ctv %s -o jsonl "
                     "2>'%s'", peer, model, threads, n_prompt, n_gen, dep, repeats, cache, cache,
                     err_path);
    if (n < 0 || (size_t)n >= sizeof cmd || strchr(peer, '\'') || strchr(model, '\'') ||
        strchr(cache, '\'')) {
        unlink(err_path);
        return -EINVAL;
    }
    FILE *f = popen(cmd, "r");
    if (!f) {
        int e = -errno;
        unlink(err_path);
        return e;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        if (!json_is_object(o)) {
            json_decref(o);
            continue;
        }
        json_int_t np = json_integer_value(json_object_get(o, "n_prompt"));
        json_int_t ng = json_integer_value(json_object_get(o, "n_gen"));
        const char *commit = json_string_value(json_object_get(o, "build_commit"));
        if (commit) snprintf(ret_commit, commit_size, "%s", commit);
        if (np > 0 && ng == 0) *ret_pp = peer_best_ts(o);
        if (ng > 0 && np == 0) *ret_tg = peer_best_ts(o);
        json_decref(o);
    }
    free(line);
    int st = pclose(f);
    int r = 0;
    if (*ret_pp == 0 && *ret_tg == 0) {
        fprintf(stderr, "warm-bench: --peer: no figures from: %s (%s %d); its last "
                        "messages:\n", cmd, WIFEXITED(st) ? "exit status" : "status",
                WIFEXITED(st) ? WEXITSTATUS(st) : st);
        char buf[4096];
        size_t got = 0;
        FILE *ef = fopen(err_path, "r");
        if (ef && fseek(ef, 0, SEEK_END) == 0) {
            long size = ftell(ef);
            fseek(ef, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
            got = fread(buf, 1, sizeof buf - 1, ef);
        }
        if (ef) fclose(ef);
        buf[got] = 0;
        fputs(buf, stderr);
        r = -EIO;
    }
    unlink(err_path);
    return r;
}

/* The CPU's features, the kernel level, and for each weight type of the model's matrices
 * the level and path (kern_matmul_path) of its decode and prefill, in the layout the
 * engine gives it (rows8 where kern_rows8_supported, as engine/device.c repacks); then
 * the same for the experts' types, which are repacked only in a private copy. */
static void kernels_print(const struct engine_model *m, int n_prompt, bool private_copy) {
    const struct kern_cpu_info *c = kern_cpu();
    printf("cpu features:%s%s%s%s%s%s%s%s%s; kernels %s\n", c->avx2 ? " avx2" : "",
           c->fma ? " fma" : "", c->f16c ? " f16c" : "", c->avx512f ? " avx512f" : "",
           c->avx512bw ? " avx512bw" : "", c->avx512vl ? " avx512vl" : "",
           c->avx512vnni ? " avx512vnni" : "", c->avx_vnni ? " avx_vnni" : "",
           c->avx512bf16 ? " avx512bf16" : "", c->level);
    bool seen[KERN_TYPE_COUNT] = {0};
    for (uint32_t il = 0; il <= m->hp.n_layer; il++) {
        const struct engine_layer *l = il < m->hp.n_layer ? &m->layers[il] : NULL;
        const struct engine_weight *ws[] = {
            l ? &l->wq : &m->output, l ? &l->wk : NULL,   l ? &l->wv : NULL,     l ? &l->wo : NULL,
            l ? &l->w_gate : NULL,   l ? &l->w_up : NULL, l ? &l->w_down : NULL,
        };
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++) {
            const struct engine_weight *w = ws[i];
            if (!w || !w->data || (int)w->type >= KERN_TYPE_COUNT || seen[w->type]) continue;
            seen[w->type] = true;
            const enum kern_layout lay = kern_rows8_supported(w->type, w->n_in, w->n_out)
                                             ? KERN_LAYOUT_ROWS8
                                             : KERN_LAYOUT_ROWS;
            const char *dl, *pl;
            const char *dp = kern_matmul_path(w->type, lay, 1, &dl);
            const char *pp = kern_matmul_path(w->type, lay, n_prompt, &pl);
            printf("  %-7s decode %s/%s, prefill %s/%s\n", kern_type_name(w->type), dl, dp, pl, pp);
        }
    }
    bool seen_exp[KERN_TYPE_COUNT] = {0};
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];
        const struct engine_weight *ws[] = {&l->exp_gate, &l->exp_up, &l->exp_down};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++) {
            if (!ws[i]->data || !ws[i]->n_expert) continue;
            const struct engine_weight w = engine_weight_expert(ws[i], 0);
            if ((int)w.type >= KERN_TYPE_COUNT || seen_exp[w.type]) continue;
            seen_exp[w.type] = true;
            const bool r8 = private_copy && kern_rows8_supported(w.type, w.n_in, w.n_out);
            const enum kern_layout lay = r8 ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS;
            const char *dl, *pl;
            const char *dp = kern_matmul_path(w.type, lay, 1, &dl);
            const char *pp = kern_matmul_path(w.type, lay, n_prompt, &pl);
            printf("  %-7s decode %s/%s, prefill %s/%s (experts)\n", kern_type_name(w.type), dl, dp,
                   pl, pp);
        }
    }
}

static void usage(void) {
    fprintf(stderr, "usage: warm-bench MODEL [-t N] [-p PROMPT_TOKENS] [-g DECODE_TOKENS] "
                    "[-r REPEATS] [-d DEPTH] [--cache-type f32|f16|bf16|q8_0|q4_0|...] "
                    "[--peer LLAMA_BENCH] [--private-copy]\n"
                    "       [--devices cpu,cpu,...|cuda:0,cuda:1,... --split none|tensor [--tensor-split R,R,...]]\n"
                    "       [--device auto|cpu|cuda:N [--gpu-layers N] [--experts auto|gpu|cpu]]\n"
                    "(with N devices each gets threads / N, at least one)\n");
}

int main(int argc, char **argv) {
    const char *path = NULL, *cache = "f16", *peer = NULL;
    int threads = (int)MAX(1, sysconf(_SC_NPROCESSORS_ONLN)), n_prompt = 512, n_gen = 128;
    int repeats = 3, depth = 0;
    bool private_copy = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = !strcmp(a, "-t") ? &threads : !strcmp(a, "-p") ? &n_prompt
                 : !strcmp(a, "-g") ? &n_gen : !strcmp(a, "-r") ? &repeats
                 : !strcmp(a, "-d") ? &depth : NULL;
        if (dst && v) {
            *dst = atoi(v);
            i++;
        } else if (!strcmp(a, "--cache-type") && v) {
            cache = v;
            i++;
        } else if (!strcmp(a, "--devices") && v) {
            struct err_detail dd = {0};
            struct engine_context_params dp = {0};
            int e = engine_devices_parse_into(v, &dp, &dd);
            if (e < 0) {
                fprintf(stderr, "warm-bench: --devices: %s\n", err_msg(&dd, e));
                return 2;
            }
            split_n_devices = dp.n_devices;
            memcpy(split_cuda, dp.split_cuda, sizeof split_cuda);
            i++;
        } else if (!strcmp(a, "--device") && v) {
            struct err_detail dd = {0};
            int e = engine_device_resolve(v, &device_kind, &device_index, NULL, 0, &dd);
            if (e < 0) {
                fprintf(stderr, "warm-bench: --device: %s\n", err_msg(&dd, e));
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--gpu-layers") && v) {
            gpu_layers = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--experts") && v &&
                   (!strcmp(v, "auto") || !strcmp(v, "gpu") || !strcmp(v, "cpu"))) {
            experts = !strcmp(v, "auto") ? ENGINE_EXPERTS_AUTO
                      : !strcmp(v, "gpu") ? ENGINE_EXPERTS_GPU
                                          : ENGINE_EXPERTS_CPU;
            i++;
        } else if (!strcmp(a, "--split") && v && engine_split_from_name(v) >= 0) {
            split_kind = (enum engine_split)engine_split_from_name(v);
            i++;
        } else if (!strcmp(a, "--tensor-split") && v) {
            struct err_detail dd = {0};
            int e = engine_tensor_split_parse(v, split_ratio, ENGINE_MAX_DEVICES, &dd);
            if (e < 0) {
                fprintf(stderr, "warm-bench: --tensor-split: %s\n", err_msg(&dd, e));
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--private-copy")) {
            private_copy = true;
        } else if (!strcmp(a, "--peer") && v) {
            peer = v;
            i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            usage();
            return 2;
        }
    }
    int kv_type = kern_type_from_name(cache);
    if (!path || threads < 1 || n_prompt < 1 || n_gen < 1 || repeats < 1 || depth < 0 || kv_type < 0) {
        usage();
        return 2;
    }
    kern_init();
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    const struct engine_model_params mp = {.private_copy = private_copy};
    int r = engine_model_load(path, &mp, &m, &d);
    if (r < 0) {
        fprintf(stderr, "warm-bench: %s: %s\n", path, err_msg(&d, r));
        return 1;
    }
    const size_t buf_bytes = (size_t)1 << 30;
    uint64_t *buf = malloc(buf_bytes);
    if (!buf) {
        engine_model_free(m);
        return 1;
    }
    for (size_t i = 0; i < buf_bytes / 8; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;

    const struct engine_hparams *hp = &m->hp;
    printf("model %s: %s, %u layers, n_embd %u, %u/%u heads, head_dim %u, n_ff %u, vocab %u, "
           "weights %s (token_embd %s)\n", path, m->arch_name, hp->n_layer, hp->n_embd,
           hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->n_ff, hp->n_vocab,
           kern_type_name(m->layers[0].wq.type), kern_type_name(m->tok_embd.type));
    if (hp->n_expert > 0) /* a token reads its n_expert_used experts of each layer */
        printf("mixture of experts: %u experts, %u a token of %u hidden units; weights %.1f "
               "MiB, of which active a token %.1f MiB\n", hp->n_expert, hp->n_expert_used,
               hp->n_ff_exp, (double)m->weight_bytes / (1 << 20),
               (double)m->active_bytes / (1 << 20));
    printf("weights read per decoded token: %.1f MiB; KV cache %s; depth %d; kernels %s\n",
           (double)m->active_bytes / (1 << 20), cache, depth, kern_cpu()->level);
    kernels_print(m, n_prompt, private_copy);
    double load[3] = {0};
    if (getloadavg(load, 3) > 0) printf("load average %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    printf("%7s %12s %12s %10s %10s %8s %12s %12s\n", "threads", "prefill t/s", "decode t/s",
           "bw GB/s", "bound t/s", "of bound", "prefill/cpu", "decode/cpu");
    int list[2] = {1, threads};
    for (int k = 0; k < (threads == 1 ? 1 : 2) && r >= 0; k++) {
        struct result res;
        r = bench(m, list[k], n_prompt, n_gen, depth, repeats, (enum kern_type)kv_type, buf,
                  buf_bytes, &res);
        if (r < 0) break;
        double bound = res.bw / (double)m->active_bytes;
        printf("%7d %12.1f %12.1f %10.2f %10.1f %7.1f%% %12.1f %12.1f\n", list[k], res.prefill,
               res.decode, res.bw / 1e9, bound, 100.0 * res.decode / bound, res.prefill_cpu,
               res.decode_cpu);
        fflush(stdout);
        if (!peer) continue;
        double pp = 0, tg = 0;
        char commit[64] = "?";
        int e = peer_bench(peer, path, list[k], n_prompt, n_gen, depth, repeats, cache, &pp, &tg,
                           commit, sizeof commit);
        if (e < 0) { /* -EIO: peer_bench showed llama-bench's own messages */
            if (e != -EIO) fprintf(stderr, "warm-bench: --peer %s: %s\n", peer, strerror(-e));
            continue;
        }
        printf("%7s %12.1f %12.1f %10s %10s %7.1f%%   (llama-bench pp%d/tg%d, best of %d, "
               "build %s)\n", "peer", pp, tg, "", "", 100.0 * tg / bound, n_prompt, n_gen,
               repeats, commit);
        printf("%7s %11.2fx %11.2fx   (warm-bench / llama-bench)\n", "ratio",
               pp > 0 ? res.prefill / pp : 0.0, tg > 0 ? res.decode / tg : 0.0);
        fflush(stdout);
    }
    free(buf);
    engine_model_free(m);
    return r < 0 ? 1 : 0;
}
