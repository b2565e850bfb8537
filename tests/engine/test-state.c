/* KV state blobs (DESIGN.md 3.5): the state matrix (models × K/V type pairs × rotation
 * on/off: export, import into a fresh context, generation equals the in-memory run;
 * crossing rotation is rejected and changes nothing), bad blobs (P0-4 of
 * notes/reliability-tests.md), chaining, and warm-run --save-state / --load-state. */
#include "kv-test.h"

#include <errno.h>
#include <sys/wait.h>

static const enum kern_type all_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
};
enum { N_TYPES = ARRAY_SIZE(all_types) };

/* ---- the state matrix --------------------------------------------------------------- */

enum { PROMPT = 12, EXPORT_AT = 7, GEN = 32, MATRIX_CTX = 64 };

struct matrix_stats {
    int run, passed, vacuous, not_applicable, failed;
    int rot_differ; /* cases whose full and SWA caches both rotate, with different sizes */
};

static const int32_t matrix_prompt[PROMPT] = {1, 260, 275, 281, 263, 290, 266, 270, 284, 261, 299, 272};

/* A hybrid's refusals on b (empty): blob (of [0, EXPORT_AT), with its snapshot) as version
 * 2, and [0, EXPORT_AT) of r (which holds no state at EXPORT_AT any more) without one. */
static bool hybrid_refusals(struct engine_context *b, const uint8_t *blob, size_t size,
                            const struct engine_context *r, char *why, size_t why_n) {
    struct err_detail d = {0};
    uint8_t *v2 = malloc(size), *rows = NULL;
    size_t n = 0;
    bool ok = false;
    if (!v2) return false;
    memcpy(v2, blob, size);
    v2[4] = 2;
    int e = engine_kv_import(b, 0, v2, size, NULL, 0, NULL, &d);
    if (e != ERR_STATE_VERSION || strcmp(d.msg, "incompatible state version (blob 2, runtime 3)")) {
        snprintf(why, why_n, "version 2: %.100s", e < 0 ? d.msg : "accepted");
        goto out;
    }
    if (engine_kv_export_snap(r, 0, 0, EXPORT_AT, ENGINE_KV_SNAP_NEED, NULL, 0, &n, NULL) != -ENODATA ||
        engine_kv_export_snap(r, 0, 0, EXPORT_AT, ENGINE_KV_SNAP_AUTO, NULL, 0, &n, NULL) < 0 ||
        !(rows = malloc(n)) ||
        engine_kv_export_snap(r, 0, 0, EXPORT_AT, ENGINE_KV_SNAP_AUTO, rows, n, &n, NULL) < 0) {
        snprintf(why, why_n, "a blob without the snapshot: export");
        goto out;
    }
    e = engine_kv_import(b, 0, rows, n, NULL, 0, NULL, &d);
    if (e != ERR_STATE_LAYOUT || !strstr(d.msg, "no recurrent snapshot at position 7") ||
        engine_kv_seq_len(b, 0) != 0) {
        snprintf(why, why_n, "without the snapshot: %.100s", e < 0 ? d.msg : "accepted");
        goto out;
    }
    ok = true;
out:
    free(v2);
    free(rows);
    return ok;
}

/* One case: R decodes [0, EXPORT_AT), exports it, decodes the rest of the prompt and
 * generates GEN tokens (the uninterrupted, in-memory run); B imports the blob into a
 * fresh context, decodes the same rest and generates: the tokens must be equal (exactly,
 * for every cache type: B computes from the very bytes R had). C, a context with the
 * other rotation setting holding 3 positions, must reject the blob with the rotation
 * error when its rotation sizes differ, and be left exactly as it was; when they are the
 * same (float types, head sizes without a 64 multiple) that part is vacuous. Returns
 * true when the case passed; *ret_vacuous says whether the rotation part was vacuous. */
static bool matrix_case(const struct engine_model *m, enum kern_type tk, enum kern_type tv,
                        bool rot, bool *ret_vacuous, char *why, size_t why_n) {
    int32_t ref[GEN], got[GEN];
    struct engine_context *r = kvt_ctx(m, tk, tv, rot, MATRIX_CTX, NULL);
    struct engine_context *b = kvt_ctx(m, tk, tv, rot, MATRIX_CTX, NULL);
    struct engine_context *c = kvt_ctx(m, tk, tv, !rot, MATRIX_CTX, NULL);
    uint8_t *blob = NULL;
    size_t size = 0;
    bool ok = false;
    struct err_detail d = {0};
    int e;
    snprintf(why, why_n, "setup");
    if (!r || !b || !c) goto out;
    if (kvt_decode(r, matrix_prompt, 0, EXPORT_AT) < 0) goto out;
    if ((e = engine_kv_export(r, 0, 0, EXPORT_AT, NULL, 0, &size, &d)) < 0 || !(blob = malloc(size)) ||
        (e = engine_kv_export(r, 0, 0, EXPORT_AT, blob, size, &size, &d)) < 0) {
        snprintf(why, why_n, "export: %s", err_msg(&d, e));
        goto out;
    }
    if (kvt_decode(r, matrix_prompt, EXPORT_AT, PROMPT) < 0 || kvt_greedy(r, PROMPT, GEN, ref) < 0)
        goto out;
    /* a hybrid (blob format 3): a version-2 blob and one without the recurrent snapshot
     * are refused, each with its message, and change nothing */
    struct engine_kv_info ih;
    engine_context_kv_info(b, &ih);
    if (ih.n_layer_rs && !hybrid_refusals(b, blob, size, r, why, why_n)) goto out;
    uint32_t p1 = 0;
    if ((e = engine_kv_import(b, 0, blob, size, matrix_prompt, PROMPT, &p1, &d)) < 0) {
        snprintf(why, why_n, "import: %s", err_msg(&d, e));
        goto out;
    }
    if (p1 != EXPORT_AT || kvt_decode(b, matrix_prompt, EXPORT_AT, PROMPT) < 0 ||
        kvt_greedy(b, PROMPT, GEN, got) < 0)
        goto out;
    if (memcmp(ref, got, sizeof ref) != 0) {
        int i = 0;
        while (ref[i] == got[i]) i++;
        snprintf(why, why_n, "generation differs at token %d (%d, restored %d)", i, ref[i], got[i]);
        goto out;
    }
    /* the other rotation setting: the first cache (full, then SWA) whose rotation differs
     * names the refusal */
    struct engine_kv_info ir, ic;
    engine_context_kv_info(r, &ir);
    engine_context_kv_info(c, &ic);
    if (kvt_decode(c, matrix_prompt, 0, 3) < 0) goto out;
    uint64_t before = kvt_seq_hash(c);
    e = engine_kv_import(c, 0, blob, size, matrix_prompt, PROMPT, NULL, &d);
    const struct engine_kv_cache_info *cr = NULL, *cc = NULL;
    for (uint32_t k = 0; !cr && k < ir.n_cache; k++)
        if (ir.cache[k].n_layer_kv && (ir.cache[k].n_rot_k != ic.cache[k].n_rot_k ||
                                       ir.cache[k].n_rot_v != ic.cache[k].n_rot_v))
            cr = &ir.cache[k], cc = &ic.cache[k];
    *ret_vacuous = cr == NULL;
    if (*ret_vacuous) {
        if (e < 0) {
            snprintf(why, why_n, "same ABI, import refused: %s", err_msg(&d, e));
            goto out;
        }
    } else {
        int want = cr->n_rot_k != cc->n_rot_k ? ERR_STATE_KEY_ROT : ERR_STATE_VALUE_ROT;
        char msg[128];
        if (want == ERR_STATE_KEY_ROT)
            snprintf(msg, sizeof msg, "incompatible key rotation (blob n_rot_k=%d, runtime %d)",
                     cr->n_rot_k, cc->n_rot_k);
        else
            snprintf(msg, sizeof msg, "incompatible value rotation (blob n_rot_v=%d, runtime %d)",
                     cr->n_rot_v, cc->n_rot_v);
        if (e != want || strcmp(d.msg, msg) != 0 || kvt_seq_hash(c) != before ||
            engine_kv_seq_len(c, 0) != 3) {
            snprintf(why, why_n, "rotation crossing: %.100s, expected %.100s", e < 0 ? d.msg : "accepted", msg);
            goto out;
        }
    }
    ok = true;
out:
    free(blob);
    engine_context_free(r);
    engine_context_free(b);
    engine_context_free(c);
    return ok;
}

/* The (K, V) type pairs given as indices into all_types (n_pairs of them) × rotation
 * on/off. */
static void matrix_model(const char *name, const char *path, const int (*pairs)[2], int n_pairs,
                         struct matrix_stats *total) {
    struct engine_model *m = kvt_model_open(path);
    if (!m) {
        total->failed++;
        return;
    }
    struct matrix_stats s = {0};
    for (int i = 0; i < n_pairs; i++)
        for (int rot = 1; rot >= 0; rot--) {
            enum kern_type tk = all_types[pairs[i][0]], tv = all_types[pairs[i][1]];
            int err = 0;
            struct engine_context *probe = kvt_ctx(m, tk, tv, rot, 8, &err);
            if (!probe) { /* the model's head size cannot hold this type's blocks */
                s.not_applicable++;
                continue;
            }
            struct engine_kv_info pi;
            engine_context_kv_info(probe, &pi);
            s.rot_differ += pi.n_cache == 2 && pi.cache[0].n_layer_kv && pi.cache[1].n_layer_kv &&
                            pi.cache[0].n_rot_k && pi.cache[1].n_rot_k &&
                            pi.cache[0].n_rot_k != pi.cache[1].n_rot_k;
            engine_context_free(probe);
            bool vacuous = false;
            char why[256];
            s.run++;
            if (matrix_case(m, tk, tv, rot, &vacuous, why, sizeof why)) {
                s.passed++;
                s.vacuous += vacuous;
            } else {
                s.failed++;
                fprintf(stderr, "  FAIL %s K %s V %s rotation %s: %s\n", name,
                        kern_type_name(tk), kern_type_name(tv), rot ? "on" : "off", why);
            }
        }
    printf("  %-12s head %3u: %d pairs x rotation on/off: %d run, %d passed, %d vacuous "
           "(rotation not applicable)%s", name, m->hp.head_dim_k, n_pairs, s.run, s.passed,
           s.vacuous, s.not_applicable ? "" : "\n");
    if (s.not_applicable)
        printf(", %d not applicable (quantized cache needs a head size multiple of 32)\n",
               s.not_applicable);
    if (s.rot_differ)
        printf("  %-12s %d cases with the full and SWA caches rotating with different sizes\n",
               name, s.rot_differ);
    total->run += s.run;
    total->passed += s.passed;
    total->vacuous += s.vacuous;
    total->not_applicable += s.not_applicable;
    total->failed += s.failed;
    total->rot_differ += s.rot_differ;
    engine_model_free(m);
}

struct matrix_model {
    const char *name, *shape; /* shape NULL: ../shared/models/<name>.gguf */
};

static const struct matrix_model matrix_models[] = {
    {"stories260K", NULL},
    {"llama-h64", "--arch llama --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300 --seed 11"},
    {"llama-h128", "--arch llama --n-embd 128 --n-layer 2 --n-head 2 --head-dim 128 --n-ff 128 --n-vocab 300 --seed 12"},
    {"qwen2-h64", "--arch qwen2 --n-embd 128 --n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 128 --n-vocab 300 --seed 13"},
    {"qwen2-h128", "--arch qwen2 --n-embd 256 --n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 128 --n-vocab 300 --seed 14"},
    {"qwen3-h64", "--arch qwen3 --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300 --seed 15"},
    {"qwen3-h128", "--arch qwen3 --n-embd 128 --n-layer 2 --n-head 2 --n-head-kv 1 --head-dim 128 --n-ff 128 --n-vocab 300 --seed 16"},
    {"qwen3-h32", "--arch qwen3 --n-embd 128 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 32 --n-ff 128 --n-vocab 300 --seed 17"},
    {"shared-kv", "--arch qwen3 --n-embd 128 --n-layer 3 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300 --shared-kv-layers 1 --seed 18"},
    /* a mixture of experts (attention only: its KV is a dense model's) */
    {"qwen3moe", "--arch qwen3moe --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300 --experts 4 --experts-used 2 --n-ff-exp 64 --seed 22"},
    /* a hybrid: 6 Gated DeltaNet layers, 2 attention layers (blob format 3) */
    {"hybrid/qwen35-tiny", NULL},
    /* window 8: the export point (7) is inside the first window, the rest of the prompt
     * and the generation run far past it, through the SWA ring */
    {"gemma3", "--arch gemma3 --n-embd 128 --n-layer 4 --n-head 2 --n-head-kv 1 --head-dim 64 --n-ff 128 --n-vocab 300 --window 8 --swa-pattern 2 --seed 19"},
    {"gemma4", "--arch gemma4 --n-embd 128 --n-layer 5 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300 --window 8 --swa-pattern 10110 --shared-kv-layers 2 --ple 16 --seed 20"},
    /* SWA heads of 64, global heads of 128: the two caches rotate with different sizes */
    {"gemma4-mixed", "--arch gemma4 --n-embd 128 --n-layer 4 --n-head 2 --n-head-kv 1 --head-dim 128 --head-dim-swa 64 --n-ff 128 --n-vocab 300 --window 8 --swa-pattern 1011 --shared-kv-layers 1 --seed 21"},
};

/* Sanitizer builds run ~20x slower: all 81 pairs for llama-h64 and the shared-KV model,
 * and for the others the 9 same-type pairs plus f16 with q8_0 and q4_0 either way round
 * (every type, K-only and V-only rotation); normal builds run all 81 pairs everywhere. */
#if defined(__SANITIZE_ADDRESS__)
#define MATRIX_FULL_ONLY_SOME 1
#else
#define MATRIX_FULL_ONLY_SOME 0
#endif

TEST(state_matrix) {
    struct matrix_stats total = {0};
    int all[N_TYPES * N_TYPES][2], some[N_TYPES + 4][2] = {{1, 3}, {3, 1}, {1, 4}, {4, 1}};
    for (int i = 0; i < N_TYPES * N_TYPES; i++) all[i][0] = i / N_TYPES, all[i][1] = i % N_TYPES;
    for (int i = 0; i < N_TYPES; i++) some[4 + i][0] = some[4 + i][1] = i;
    for (size_t i = 0; i < ARRAY_SIZE(matrix_models); i++) {
        const struct matrix_model *mm = &matrix_models[i];
        char file[64];
        snprintf(file, sizeof file, "%s.gguf", mm->name);
        const char *path = mm->shape ? test_mkmodel(mm->name, "%s", mm->shape)
                                     : test_shared_path(file);
        if (!path) {
            printf("  %-12s skipped: %s%s\n", mm->name, mm->shape ? "warm-mkmodel unavailable"
                                                                : file,
                   mm->shape ? "" : " is absent");
            continue;
        }
        bool full = !MATRIX_FULL_ONLY_SOME || strcmp(mm->name, "llama-h64") == 0 ||
                    strcmp(mm->name, "shared-kv") == 0;
        if (full)
            matrix_model(mm->name, path, (const int(*)[2])all, N_TYPES * N_TYPES, &total);
        else
            matrix_model(mm->name, path, (const int(*)[2])some, N_TYPES + 4, &total);
    }
    printf("state matrix: %d cases run, %d passed, %d vacuous (rotation not applicable), "
           "%d not applicable (type needs head size multiple of 32), %d failed\n", total.run,
           total.passed, total.vacuous, total.not_applicable, total.failed);
    if (total.run == 0) SKIP("no model available");
    ASSERT_EQ(total.failed, 0);
    if (test_mkmodel("gemma4-mixed", "%s", matrix_models[ARRAY_SIZE(matrix_models) - 1].shape))
        ASSERT_TRUE(total.rot_differ > 0); /* gemma4-mixed: per-cache rotation sizes exercised */
    ASSERT_EQ(total.passed, total.run);
}

/* ---- bad blobs (P0-4) --------------------------------------------------------------- */

struct bad_env {
    struct engine_model *m, *other;
    struct engine_context *src, *dst;
    uint8_t *blob;
    size_t size;
    int32_t tok[256];
};

static int bad_env_open(struct bad_env *e, enum kern_type tk, enum kern_type tv, uint32_t n) {
    const char *p = test_mkmodel("llama-h64", "%s", matrix_models[1].shape);
    const char *q = test_mkmodel("llama-h64-other",
                                 "--arch llama --n-embd 128 --n-layer 2 --n-head 2 --head-dim 64 "
                                 "--n-ff 128 --n-vocab 300 --seed 99");
    if (!p || !q) return ERR_NOT_FOUND;
    memset(e, 0, sizeof *e);
    e->m = kvt_model_open(p);
    e->other = kvt_model_open(q);
    if (!e->m || !e->other) return ERR_INVALID;
    for (uint32_t i = 0; i < n; i++) e->tok[i] = 1 + (int32_t)((i * 37 + 11) % 299);
    e->src = kvt_ctx(e->m, tk, tv, true, 256, NULL);
    e->dst = kvt_ctx(e->m, tk, tv, true, 256, NULL);
    if (!e->src || !e->dst) return ERR_INVALID;
    int r = kvt_decode(e->src, e->tok, 0, (int32_t)n);
    if (r < 0) return r;
    if ((r = engine_kv_export(e->src, 0, 0, n, NULL, 0, &e->size, NULL)) < 0) return r;
    if (!(e->blob = malloc(e->size))) return -ENOMEM;
    if ((r = engine_kv_export(e->src, 0, 0, n, e->blob, e->size, &e->size, NULL)) < 0) return r;
    /* the destination holds 5 other positions that every rejected import must keep */
    int32_t other[5] = {1, 290, 291, 292, 293};
    return kvt_decode(e->dst, other, 0, 5);
}

static void bad_env_close(struct bad_env *e) {
    free(e->blob);
    engine_context_free(e->src);
    engine_context_free(e->dst);
    engine_model_free(e->m);
    engine_model_free(e->other);
}

static bool is_state_err(int r) {
    return r == ERR_STATE_BAD || r == ERR_STATE_VERSION || r == ERR_STATE_MODEL ||
           r == ERR_STATE_LAYOUT || r == ERR_STATE_KEY_TYPE || r == ERR_STATE_VALUE_TYPE ||
           r == ERR_STATE_KEY_ROT || r == ERR_STATE_VALUE_ROT || r == ERR_STATE_TOKENS ||
           r == ERR_STATE_CHECKSUM;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

TEST(bad_blobs) {
    struct bad_env e;
    int r = bad_env_open(&e, KERN_TYPE_F32, KERN_TYPE_F32, 256);
    if (r == ERR_NOT_FOUND) SKIP("warm-mkmodel is not available (WARM_BIN)");
    ASSERT_OK(r);
    const uint64_t before = kvt_seq_hash(e.dst);
    uint8_t *copy = malloc(e.size);
    ASSERT_TRUE(copy);
    struct err_detail d = {0};
    int n_trunc = 0, n_flip = 0;
    printf("  blob of 256 positions, f32/f32, 2 layers: %zu bytes\n", e.size);

    /* truncation at every 4 KiB boundary and at 200 pseudo-random offsets (+ 0..12 bytes) */
    uint64_t s = 42;
    for (size_t i = 0; i < e.size / 4096 + 200 + 13; i++) {
        size_t cut = i < e.size / 4096 ? (i + 1) * 4096 % e.size : 0;
        if (i >= e.size / 4096 && i < e.size / 4096 + 200) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            cut = (size_t)(s >> 20) % e.size;
        } else if (i >= e.size / 4096 + 200) {
            cut = i - (e.size / 4096 + 200);
        }
        r = engine_kv_import(e.dst, 0, e.blob, cut, NULL, 0, NULL, &d);
        if (r != ERR_STATE_BAD) TEST_FAIL_("truncated at %zu: %s, expected ERR_STATE_BAD", cut, err_name(r));
        ASSERT_TRUE(kvt_seq_hash(e.dst) == before);
        n_trunc++;
    }
    /* 200 single-bit flips: half in the header, ABI and tokens, half anywhere */
    size_t header = get32(e.blob + 8) + 8 + 4 * 256 + 24;
    for (int i = 0; i < 200; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t at = (size_t)(s >> 20) % (i % 2 ? e.size : header);
        int bit = (int)(s >> 8) & 7;
        memcpy(copy, e.blob, e.size);
        copy[at] ^= (uint8_t)(1u << bit);
        r = engine_kv_import(e.dst, 0, copy, e.size, NULL, 0, NULL, &d);
        if (!is_state_err(r)) TEST_FAIL_("bit %d of byte %zu flipped: %s", bit, at, err_name(r));
        ASSERT_TRUE(kvt_seq_hash(e.dst) == before);
        n_flip++;
    }
    printf("  %d truncations and %d bit flips rejected, destination unchanged\n", n_trunc, n_flip);

    /* each header field, with its own error and message */
    static const struct {
        size_t off; /* byte offset of a u32 */
        uint32_t value;
        int err;
        const char *msg; /* prefix of the message, NULL: any */
    } fields[] = {
        {0, 0x53564b57 ^ 1, ERR_STATE_BAD, "not a state blob"},          /* magic */
        {4, 1, ERR_STATE_VERSION, "incompatible state version (blob 1, runtime 3)"},
        {4, 2, ERR_STATE_VERSION, "incompatible state version (blob 2, runtime 3)"},
        {4, 0, ERR_STATE_VERSION, "incompatible state version (blob 0, runtime 3)"},
        {8, 0xfffffff0u, ERR_STATE_BAD, NULL},                            /* header_bytes */
        {12, 1, ERR_STATE_BAD, NULL},                                     /* flags */
        {36, 1000000, ERR_STATE_BAD, NULL},                               /* n_cache */
        {40, 0xffffffffu, ERR_STATE_BAD, NULL},                           /* n_layer */
        {44, 0xffffffffu, ERR_STATE_BAD, NULL},                           /* n_layer_kv */
        {48, 0xffffffffu, ERR_STATE_BAD, NULL},                           /* type_k */
        {64, 0x7fffffffu, ERR_STATE_BAD, NULL},                           /* n_head_kv */
    };
    for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
        memcpy(copy, e.blob, e.size);
        put32(copy + fields[i].off, fields[i].value);
        r = engine_kv_import(e.dst, 0, copy, e.size, NULL, 0, NULL, &d);
        if (r != fields[i].err)
            TEST_FAIL_("field at %zu = %u: %s (%s), expected %s", fields[i].off, fields[i].value,
                       err_name(r), d.msg, err_name(fields[i].err));
        if (fields[i].msg && strncmp(d.msg, fields[i].msg, strlen(fields[i].msg)) != 0)
            TEST_FAIL_("message '%s', expected '%s'", d.msg, fields[i].msg);
        ASSERT_TRUE(kvt_seq_hash(e.dst) == before);
    }
    /* huge counts in the range section: p1, and the payload length */
    size_t range = get32(e.blob + 8);
    memcpy(copy, e.blob, e.size);
    put32(copy + range + 4, 0xffffffffu);
    ASSERT_ERR(engine_kv_import(e.dst, 0, copy, e.size, NULL, 0, NULL, &d), ERR_STATE_BAD);
    memcpy(copy, e.blob, e.size);
    put32(copy + range + 8 + 4 * 256 + 4, 0xffffffffu); /* payload_bytes high half */
    ASSERT_ERR(engine_kv_import(e.dst, 0, copy, e.size, NULL, 0, NULL, &d), ERR_STATE_BAD);
    /* a trailing byte */
    uint8_t *longer = malloc(e.size + 1);
    ASSERT_TRUE(longer);
    memcpy(longer, e.blob, e.size);
    longer[e.size] = 0;
    ASSERT_ERR(engine_kv_import(e.dst, 0, longer, e.size + 1, NULL, 0, NULL, &d), ERR_STATE_BAD);
    free(longer);
    ASSERT_ERR(engine_kv_import(e.dst, 0, NULL, 0, NULL, 0, NULL, &d), ERR_STATE_BAD);

    /* another model of the same shape */
    struct engine_context *oc = kvt_ctx(e.other, KERN_TYPE_F32, KERN_TYPE_F32, true, 256, NULL);
    ASSERT_TRUE(oc);
    ASSERT_ERR(engine_kv_import(oc, 0, e.blob, e.size, NULL, 0, NULL, &d), ERR_STATE_MODEL);
    ASSERT_STREQ(d.msg, "state belongs to another model");
    engine_context_free(oc);
    /* other cache types */
    struct engine_context *tc = kvt_ctx(e.m, KERN_TYPE_Q8_0, KERN_TYPE_F32, true, 256, NULL);
    ASSERT_ERR(engine_kv_import(tc, 0, e.blob, e.size, NULL, 0, NULL, &d), ERR_STATE_KEY_TYPE);
    ASSERT_STREQ(d.msg, "incompatible key type (blob f32, runtime q8_0)");
    engine_context_free(tc);
    tc = kvt_ctx(e.m, KERN_TYPE_F32, KERN_TYPE_F16, true, 256, NULL);
    ASSERT_ERR(engine_kv_import(tc, 0, e.blob, e.size, NULL, 0, NULL, &d), ERR_STATE_VALUE_TYPE);
    ASSERT_STREQ(d.msg, "incompatible value type (blob f32, runtime f16)");
    engine_context_free(tc);
    /* tokens: the caller expects others, or fewer */
    int32_t want[256];
    memcpy(want, e.tok, sizeof want);
    want[100] ^= 1;
    ASSERT_ERR(engine_kv_import(e.dst, 0, e.blob, e.size, want, 256, NULL, &d), ERR_STATE_TOKENS);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(strncmp(d.msg, "token mismatch at position 100", 30) == 0);
    ASSERT_ERR(engine_kv_import(e.dst, 0, e.blob, e.size, e.tok, 200, NULL, &d), ERR_STATE_TOKENS);
    /* where it goes: a sequence that does not exist; a context too small */
    ASSERT_ERR(engine_kv_import(e.dst, 1, e.blob, e.size, NULL, 0, NULL, &d), ERR_INVALID);
    struct engine_context *small = kvt_ctx(e.m, KERN_TYPE_F32, KERN_TYPE_F32, true, 100, NULL);
    ASSERT_ERR(engine_kv_import(small, 0, e.blob, e.size, NULL, 0, NULL, &d), ERR_CTX_FULL);
    engine_context_free(small);
    ASSERT_TRUE(kvt_seq_hash(e.dst) == before);

    /* and after all that the destination still works, and the good blob imports */
    int32_t g[4];
    ASSERT_OK(kvt_greedy(e.dst, 5, 4, g));
    ASSERT_OK_D(engine_kv_import(e.dst, 0, e.blob, e.size, e.tok, 256, NULL, &d), &d);
    ASSERT_EQ(engine_kv_seq_len(e.dst, 0), 256);
    free(copy);
    bad_env_close(&e);
}

/* Export: size query first, too small a buffer, the same bytes twice, bad ranges. */
TEST(export_api) {
    struct bad_env e;
    int r = bad_env_open(&e, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, 40);
    if (r == ERR_NOT_FOUND) SKIP("warm-mkmodel is not available (WARM_BIN)");
    ASSERT_OK(r);
    size_t size = 0;
    ASSERT_OK(engine_kv_export(e.src, 0, 0, 40, NULL, 0, &size, NULL));
    ASSERT_EQ(size, e.size);
    uint8_t *buf = malloc(size);
    ASSERT_TRUE(buf);
    struct err_detail d = {0};
    ASSERT_ERR(engine_kv_export(e.src, 0, 0, 40, buf, size - 1, &size, &d), ERR_TOO_LARGE);
    ASSERT_OK(engine_kv_export(e.src, 0, 0, 40, buf, size, &size, NULL));
    ASSERT_TRUE(memcmp(buf, e.blob, size) == 0);
    ASSERT_ERR(engine_kv_export(e.src, 0, 0, 41, NULL, 0, &size, NULL), ERR_INVALID);
    ASSERT_ERR(engine_kv_export(e.src, 0, 5, 5, NULL, 0, &size, NULL), ERR_INVALID);
    ASSERT_ERR(engine_kv_export(e.src, 3, 0, 4, NULL, 0, &size, NULL), ERR_INVALID);
    /* 2 layers x 40 positions x (q8_0 row 136 + q4_0 row 72) bytes of payload */
    ASSERT_EQ(size, 40 + 88 + 4 * 2 + 8 + 4 * 40 + 24 + 2 * 40 * (136 + 72));
    free(buf);
    bad_env_close(&e);
}

/* Chunks: [0, 16) then [16, 40) into a fresh context equal the whole [0, 40); a chunk
 * whose start the sequence has not reached is refused; a blob overwrites a longer tail. */
TEST(chained_chunks) {
    struct bad_env e;
    int r = bad_env_open(&e, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, 40);
    if (r == ERR_NOT_FOUND) SKIP("warm-mkmodel is not available (WARM_BIN)");
    ASSERT_OK(r);
    size_t n1, n2;
    ASSERT_OK(engine_kv_export(e.src, 0, 0, 16, NULL, 0, &n1, NULL));
    ASSERT_OK(engine_kv_export(e.src, 0, 16, 40, NULL, 0, &n2, NULL));
    uint8_t *b1 = malloc(n1), *b2 = malloc(n2);
    ASSERT_TRUE(b1 && b2);
    ASSERT_OK(engine_kv_export(e.src, 0, 0, 16, b1, n1, &n1, NULL));
    ASSERT_OK(engine_kv_export(e.src, 0, 16, 40, b2, n2, &n2, NULL));
    struct engine_context *c = kvt_ctx(e.m, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, true, 256, NULL);
    struct err_detail d = {0};
    uint32_t r0 = 0, r1 = 0;
    ASSERT_OK(engine_kv_blob_range(b2, n2, &r0, &r1, NULL));
    ASSERT_EQ(r0, 16);
    ASSERT_EQ(r1, 40);
    ASSERT_ERR(engine_kv_blob_range(b2, n2 - 1, &r0, &r1, NULL), ERR_STATE_BAD);
    ASSERT_ERR(engine_kv_import(c, 0, b2, n2, e.tok, 40, NULL, &d), ERR_INVALID);
    printf("  %s\n", d.msg);
    ASSERT_EQ(engine_kv_seq_len(c, 0), 0);
    uint32_t p1;
    ASSERT_OK_D(engine_kv_import(c, 0, b1, n1, e.tok, 40, &p1, &d), &d);
    ASSERT_EQ(p1, 16);
    ASSERT_OK_D(engine_kv_import(c, 0, b2, n2, e.tok, 40, &p1, &d), &d);
    ASSERT_EQ(p1, 40);
    ASSERT_TRUE(kvt_seq_hash(c) == kvt_seq_hash(e.src));
    /* generation from the restored chain = from the original */
    int32_t g1[8], g2[8];
    int32_t last = e.tok[39];
    ASSERT_OK(engine_kv_seq_rm(c, 0, 39));
    ASSERT_OK(engine_kv_seq_rm(e.src, 0, 39));
    ASSERT_OK(kvt_decode(c, e.tok, 39, 40));
    ASSERT_OK(kvt_decode(e.src, e.tok, 39, 40));
    (void)last;
    ASSERT_OK(kvt_greedy(c, 40, 8, g1));
    ASSERT_OK(kvt_greedy(e.src, 40, 8, g2));
    ASSERT_TRUE(memcmp(g1, g2, sizeof g1) == 0);
    /* the first chunk again: the sequence (48 positions now) is cut back to [0, 16) */
    ASSERT_OK(engine_kv_import(c, 0, b1, n1, NULL, 0, NULL, NULL));
    ASSERT_EQ(engine_kv_seq_len(c, 0), 16);
    engine_context_free(c);
    free(b1);
    free(b2);
    bad_env_close(&e);
}

/* ---- warm-run --save-state / --load-state -------------------------------------------- */

static char *run_capture(const char *cmd, int *ret_status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    int st = pclose(p);
    *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf) buf[n] = 0;
    return buf;
}

static const char *line_of(const char *out, const char *prefix) {
    const char *p = out ? strstr(out, prefix) : NULL;
    return p ? p : "";
}

TEST(warm_run_save_load_reject) {
    const char *bin = getenv("WARM_BIN");
    const char *model = test_mkmodel("llama-h64", "%s", matrix_models[1].shape);
    if (!bin || !model) SKIP("WARM_BIN / warm-mkmodel is not available");
    char cmd[4096], blob[512];
    snprintf(blob, sizeof blob, "%s/run.blob", test_tmpdir());
    const char *common = "--prompt-ids '1 260 275 281 263 290 266 270 284 261' -n 40 -t 1 --ids";
    int st;
    for (int pass = 0; pass < 2; pass++) {
        const char *types = pass ? "--ctk q8_0 --ctv q4_0" : "--ctk f32 --ctv f16";
        /* uninterrupted */
        snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' %s %s 2>/dev/null", bin, model, common, types);
        char *full = run_capture(cmd, &st);
        ASSERT_EQ(st, 0);
        /* save [0, 6), then load it and finish the prompt (4 tokens) */
        snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' %s %s --save-state '%s' --save-at 6 2>&1",
                 bin, model, common, types, blob);
        char *saved = run_capture(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_TRUE(strstr(saved, "saved positions [0, 6)") != NULL);
        ASSERT_TRUE(strstr(saved, "generated_ids") == NULL); /* it stops */
        snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' %s %s --load-state '%s' 2>/dev/null",
                 bin, model, common, types, blob);
        char *loaded = run_capture(cmd, &st);
        ASSERT_EQ(st, 0);
        printf("  %s: %.60s...\n", types, line_of(full, "generated_ids"));
        /* the loaded run recomputes [6, 10) as one batch where the full run did [0, 10):
         * the same values up to float summation order, the same greedy tokens */
        ASSERT_STREQ(line_of(loaded, "generated_ids"), line_of(full, "generated_ids"));
        free(full);
        free(saved);
        free(loaded);
    }
    /* the last blob (q8_0 K, q4_0 V, rotated) loaded with rotation disabled */
    snprintf(cmd, sizeof cmd, "WARM_ATTN_ROT_DISABLE=1 '%s/warm-run' -m '%s' %s --ctk q8_0 "
             "--ctv q4_0 --load-state '%s' 2>&1", bin, model, common, blob);
    char *rej = run_capture(cmd, &st);
    printf("  rejected: %s", line_of(rej, "warm-run: load state"));
    ASSERT_EQ(st, 1);
    ASSERT_TRUE(strstr(rej, "incompatible key rotation (blob n_rot_k=64, runtime 0)") != NULL);
    ASSERT_TRUE(strstr(rej, "generated_ids") == NULL);
    free(rej);
    /* other types, another prompt */
    snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' %s --ctk q8_0 --ctv q8_0 --load-state '%s' 2>&1",
             bin, model, common, blob);
    rej = run_capture(cmd, &st);
    ASSERT_EQ(st, 1);
    ASSERT_TRUE(strstr(rej, "incompatible value type (blob q4_0, runtime q8_0)") != NULL);
    free(rej);
    snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' --prompt-ids '1 260 275 9 9 9 9' -n 40 "
             "--ctk q8_0 --ctv q4_0 --load-state '%s' 2>&1", bin, model, blob);
    rej = run_capture(cmd, &st);
    ASSERT_EQ(st, 1);
    ASSERT_TRUE(strstr(rej, "token mismatch at position 3") != NULL);
    free(rej);
}

TEST_MAIN(T(state_matrix), T(bad_blobs), T(export_api), T(chained_chunks),
          T(warm_run_save_load_reject))
