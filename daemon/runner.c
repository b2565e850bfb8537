/* runner — a loaded model and its generation loop (see runner.h).
 *
 * Continuous batching: the loop owns n_slots sequences of the context. Each step it
 * admits queued jobs into free slots (the slot whose cached tokens share the longest
 * prefix with the prompt, so that prefix is not recomputed), then builds one batch of
 * every decoding slot's next token plus up to PREFILL_STEP prompt tokens of prefilling
 * slots, runs one forward pass, and samples for every slot that got logits. */
#include "daemon/runner.h"

#include "daemon/embedder.h"
#include "daemon/log.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Prompt tokens per step over all prefilling slots (the widest matmul tile): decoding
 * slots wait at most one such step, cancellation is seen and the watchdog beat stamped
 * between steps, so even a big model on a CPU stays well inside WatchdogSec. */
#define PREFILL_STEP 64

/* Recurrent snapshots of a hybrid (qwen35; DESIGN.md 3.6): where a job keeps one, in RAM
 * (engine_kv_snapshot) and in the store (the record ending there carries it).
 *   - At the end of the prompt minus the generation prompt: the last message start (the
 *     model's turn-start token, e.g. <|im_start|>) or, without a chat template,
 *     SNAP_GEN_PROMPT tokens before the end (llama-server's "4 before the end"). The next
 *     turn of a chat diverges just after it (its template drops this turn's thinking),
 *     and a resend of the prompt recomputes only the generation prompt.
 *   - At message starts inside the computed part, at least msg_gap apart (one chunk, or
 *     the state's size in tokens of KV when larger, so such snapshots cost at most as much
 *     as the rows between them): the points a later conversation sharing the system
 *     prompt or an edited last message resumes at.
 *   - Sparsely along a long prompt: every snap_every tokens, the chunk multiple nearest
 *     above SNAP_SPARSE_KV × the state's size in tokens of KV (notes/hybrid.md §A.10: a
 *     state costs the KV of 1.6k-3.2k tokens), so sparse snapshots add at most ~1/4 to the
 *     attention rows stored and a resume recomputes at most snap_every tokens from one.
 * A job plans at most SLOT_MAX_PLAN points. */
#define SNAP_GEN_PROMPT 4
#define SNAP_SPARSE_KV 4
#define SLOT_MAX_PLAN 32

enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct slot {
    enum slot_state state;
    struct runner_job *job;
    /* the uid + 1 of the slot's job, 0 when free, for runner_submit's count per uid: a
     * uid and not the job, which done may free while a counter reads it */
    _Atomic uint64_t running_uid;
    int32_t *cached;            /* tokens whose KV is in this sequence */
    uint32_t n_cached;
    uint32_t n_prefilled;       /* prompt tokens in the cache (PREFILL) */
    int32_t next;               /* sampled, to be decoded (DECODE) */
    struct engine_sampler *sampler;
    struct engine_grammar_matcher *matcher; /* the job's grammar, or NULL */
    struct engine_detok dt;
    uint32_t stored_chunks;     /* leading chunks of the sequence known to be stored */
    uint32_t plan[SLOT_MAX_PLAN];   /* hybrid: the job's snapshot positions, ascending */
    uint32_t n_plan, next_plan; /* planned, and the next not reached yet */
    char ns[128];               /* the namespace of the job whose tokens are cached */
    struct runner_result res;
    uint64_t start_usec, prefill_end_usec, last_used_usec;
};

struct runner {
    char name[160];
    struct engine_model *model;
    struct engine_vocab *vocab;
    struct engine_context *ctx;
    /* An embedding model's loop (embedder.h) instead of the generation loop: then there are
     * no slots and no loop thread of ours. */
    struct embedder *embedder;
    /* The bytes of every token, for grammars: built by the loop on the first job with a
     * grammar (it costs tens of milliseconds on a big vocabulary, and most models are never
     * constrained), then kept while the model is loaded; the loop's alone. */
    struct engine_grammar_vocab *grammar_vocab;
    uint32_t n_ctx;
    uint64_t memory_bytes;
    struct store_env *store;
    struct cache_writer *writer;
    uint32_t chunk_tokens;      /* C: a chunk record's tokens */
    uint32_t restore_min_tokens;    /* fewer tokens past RAM: the store is not asked */
    /* A hybrid (recurrent layers): its snapshot policy (PREFILL_STEP's comment) */
    bool hybrid;
    uint32_t snap_every;        /* sparse snapshots: tokens between them */
    uint32_t msg_gap;           /* snapshots at message starts: at least this far apart */
    int32_t turn_tok;           /* the chat template's turn-start token, -1 none */
    uint8_t fingerprint[16];
    uint32_t type_k, type_v;
    struct notify *notify;
    uint64_t test_stall_usec;
    struct notify_beat beat;
    char beat_name[192];

    struct slot *slots;         /* n_slots; slot i is sequence i */
    uint32_t n_slots;
    /* Scratch of one batch: at most one token per decoding slot plus PREFILL_STEP. */
    int32_t *b_token, *b_pos, *b_seq;
    bool *b_want;
    char *piece;
    size_t piece_cap;

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct runner_job *head, *tail;
    unsigned n_jobs;            /* queued + running */
    unsigned max_jobs, max_jobs_per_uid;
    bool stopping;
};

const struct engine_vocab *runner_vocab(const struct runner *r) { return r->vocab; }
const struct engine_model *runner_model(const struct runner *r) { return r->model; }
uint32_t runner_n_ctx(const struct runner *r) { return r->n_ctx; }
uint64_t runner_memory_bytes(const struct runner *r) { return r->memory_bytes; }
int runner_device_info(const struct runner *r, uint32_t i, struct engine_device_info *ret) {
    return engine_context_device_info(r->ctx, i, ret);
}
const char *runner_device_note(const struct runner *r) {
    return engine_context_device_note(r->ctx);
}

struct embedder *runner_embedder(const struct runner *r) { return r->embedder; }

unsigned runner_n_jobs(struct runner *r) {
    if (r->embedder) return embedder_n_jobs(r->embedder);
    pthread_mutex_lock(&r->lock);
    unsigned n = r->n_jobs;
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* Jobs of uid queued or running (the slots are the loop's; each publishes its job's uid). */
static unsigned uid_jobs_locked(struct runner *r, uint32_t uid) {
    unsigned n = 0;
    for (struct runner_job *q = r->head; q; q = q->next) n += q->uid == uid;
    for (uint32_t i = 0; i < r->n_slots; i++) {
        n += atomic_load(&r->slots[i].running_uid) == (uint64_t)uid + 1;
    }
    return n;
}

unsigned runner_n_jobs_of(struct runner *r, uint32_t uid) {
    if (r->embedder) return embedder_n_jobs_of(r->embedder, uid);
    pthread_mutex_lock(&r->lock);
    unsigned n = uid_jobs_locked(r, uid);
    pthread_mutex_unlock(&r->lock);
    return n;
}

unsigned runner_max_jobs_per_uid(const struct runner *r) { return r->max_jobs_per_uid; }

int runner_submit(struct runner *r, struct runner_job *j) {
    j->submit_usec = time_now_usec();
    j->next = NULL;
    if (r->embedder) return -EOPNOTSUPP; /* rpc-generate.c says so before */
    pthread_mutex_lock(&r->lock);
    int e = r->stopping ? -ESHUTDOWN : r->n_jobs >= r->max_jobs ? -EAGAIN : 0;
    if (!e && uid_jobs_locked(r, j->uid) >= r->max_jobs_per_uid) e = -EDQUOT;
    if (e < 0) {
        pthread_mutex_unlock(&r->lock);
        return e;
    }
    if (r->tail) r->tail->next = j;
    else r->head = j;
    r->tail = j;
    r->n_jobs++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static bool stopping(struct runner *r) {
    pthread_mutex_lock(&r->lock);
    bool s = r->stopping;
    pthread_mutex_unlock(&r->lock);
    return s;
}

/* The test hook: waits test_stall_usec without stamping progress (a stop ends it). */
static void stall(struct runner *r) {
    uint64_t until = time_now_usec() + r->test_stall_usec;
    while (time_now_usec() < until && !stopping(r)) usleep(10000);
}

/* ---- the prompt store ---------------------------------------------------------------- */

static int chain_init(const struct runner *r, const struct runner_job *j,
                      struct store_chain *chain) {
    return store_chain_init(chain, j->ns, r->fingerprint, r->type_k, r->type_v, r->chunk_tokens);
}

static void reject(struct slot *s, uint32_t position, int code, const char *msg) {
    if (s->res.n_rejected >= RUNNER_MAX_REJECTED) return;
    struct runner_rejected *x = &s->res.rejected[s->res.n_rejected++];
    x->position = position;
    x->code = code;
    snprintf(x->msg, sizeof x->msg, "%s", msg);
}

/* A hybrid's records: the index of the last one ending past keep that carries a
 * recurrent snapshot (n_recs when none does): the furthest the prompt can resume at. */
static size_t last_snapshot(const struct store_match *m, uint32_t keep) {
    size_t n_recs = m->n_chunks + (m->has_tail ? 1 : 0), last = n_recs;
    for (size_t i = 0; i < n_recs; i++) {
        const struct store_rec *rec = i < m->n_chunks ? &m->chunks[i] : &m->tail;
        struct engine_kv_blob_info bi;
        if (rec->p0 + rec->n_tokens > keep &&
            engine_kv_blob_info(rec->blob, rec->blob_bytes, &bi, NULL) >= 0 && bi.snapshot)
            last = i;
    }
    return last;
}

/* Imports the stored records of the prompt past the keep positions RAM already has;
 * returns the new number of cached positions. A hybrid imports the records up to the last
 * one with a recurrent snapshot (the rows before it, then the state) and resumes there. */
static uint32_t slot_restore(struct runner *r, struct slot *s, const struct runner_job *j,
                             uint32_t keep) {
    struct store_chain chain;
    struct store_txn *txn = NULL;
    if (chain_init(r, j, &chain) < 0 || store_txn_begin(r->store, STORE_TXN_READ, &txn) < 0)
        return keep;
    uint64_t t0 = time_now_usec();
    struct store_match m = {0};
    struct err_detail d = {0};
    size_t n_look = j->n_prompt - 1;
    int32_t seq = (int32_t)(s - r->slots);
    int e_look = store_lookup(txn, &chain, j->prompt, n_look, &m, &d);
    /* A hybrid whose walk ended on chunks without a snapshot: the snapshot tail of an
     * earlier turn may hang from the chunk before the last one (the prompts diverge just
     * past a chunk boundary); look once more without that chunk. */
    if (e_look >= 0 && r->hybrid && m.n_chunks && !m.has_tail &&
        last_snapshot(&m, keep) != m.n_chunks - 1) {
        struct store_match m2 = {0};
        n_look = (size_t)m.chunks[m.n_chunks - 1].p0 + r->chunk_tokens - 1;
        if (store_lookup(txn, &chain, j->prompt, n_look, &m2, &d) >= 0) {
            if (m2.has_tail && last_snapshot(&m2, keep) == m2.n_chunks) {
                store_match_done(&m);
                m = m2;
            } else {
                store_match_done(&m2);
            }
        }
    }
    if (e_look >= 0) {
        size_t n_recs = m.n_chunks + (m.has_tail ? 1 : 0);
        if (r->hybrid) {
            size_t last = last_snapshot(&m, keep);
            n_recs = last == n_recs ? 0 : last + 1;
        }
        s->stored_chunks = MAX(s->stored_chunks, (uint32_t)m.n_chunks);
        for (size_t i = 0; i < n_recs; i++) {
            const struct store_rec *rec = i < m.n_chunks ? &m.chunks[i] : &m.tail;
            if (rec->p0 + rec->n_tokens <= keep) continue;
            struct err_detail id = {0};
            uint32_t p1 = 0;
            int e = engine_kv_import_snap(r->ctx, seq, rec->blob, rec->blob_bytes, j->prompt,
                                          j->n_prompt, ENGINE_KV_SNAP_AUTO, &p1, &id);
            if (e < 0) {
                /* Refused (another rotation, version, ...): reported, recomputed, and
                 * overwritten by this job's save. */
                store_env_reject(r->store, &rec->key, e);
                log_info("prompt cache: model '%s', namespace '%s': refused the record at "
                         "position %llu: %s; recomputing and overwriting it", r->name, j->ns,
                         (unsigned long long)rec->p0, err_msg(&id, e));
                reject(s, (uint32_t)rec->p0, e, err_msg(&id, e));
                s->stored_chunks = MIN(s->stored_chunks, (uint32_t)MIN(i, m.n_chunks));
                break;
            }
            keep = p1;
        }
        if (m.n_rejected) {
            /* the store itself refused records (bad checksum or header): deleted, so the
             * write-back below recomputes them; reported with the first reason */
            char msg[200];
            snprintf(msg, sizeof msg, "%u stored records refused by the store: %s",
                     m.n_rejected, err_str(m.first_reject));
            reject(s, (uint32_t)(m.n_chunks * r->chunk_tokens), m.first_reject, msg);
            log_info("prompt cache: model '%s', namespace '%s': %s", r->name, j->ns, msg);
        }
        store_match_done(&m);
    }
    store_txn_abort(txn);
    /* a hybrid continues where its state is: the last snapshot imported (or what RAM had,
     * unless a partial chain of rows overwrote it) */
    if (r->hybrid) {
        keep = engine_kv_seq_resume_pos(r->ctx, seq, keep);
        if (engine_kv_seq_rm(r->ctx, seq, keep) < 0) keep = 0, engine_kv_seq_rm(r->ctx, seq, 0);
        s->res.ram_tokens = MIN(s->res.ram_tokens, keep);
    }
    s->res.restore_usec = time_now_usec() - t0;
    return keep;
}

/* Exports positions [p0, p0 + n) of the slot's sequence (a hybrid's with or without the
 * recurrent snapshot at its end: snap) and queues the record. */
static void queue_record(struct runner *r, struct slot *s, const struct store_chain *chain,
                         enum store_kind kind, struct hash128 parent, uint32_t p0, uint32_t n,
                         enum engine_kv_snap snap) {
    int32_t seq = (int32_t)(s - r->slots);
    size_t size = 0;
    if (engine_kv_export_snap(r->ctx, seq, p0, p0 + n, snap, NULL, 0, &size, NULL) < 0) return;
    struct cache_write *w = calloc(1, sizeof *w);
    if (!w) return;
    w->blob = malloc(size);
    w->tokens = malloc_array(n, sizeof *w->tokens);
    if (!w->blob || !w->tokens ||
        engine_kv_export_snap(r->ctx, seq, p0, p0 + n, snap, w->blob, size, &w->blob_bytes,
                              NULL) < 0) {
        cache_write_free(w);
        return;
    }
    memcpy(w->tokens, s->cached + p0, n * sizeof *w->tokens);
    w->chain = *chain;
    w->kind = kind;
    w->parent = parent;
    w->p0 = p0;
    w->n_tokens = n;
    cache_writer_put(r->writer, w);
}

/* Saves the chunks of the sequence the store lacks (as soon as they are computed: an SWA
 * layer keeps a chunk's rows only for a while, DESIGN.md 3.6), and a tail ending at each of
 * the positions tail_end[0 … n_tail): the end of the prompt and one before it (which a
 * resend of the same prompt looks up), or the end of the sequence. A tail covers
 * [floor(end / C) × C, end) and hangs from the chain hash of the chunks before it.
 * A hybrid's records carry no recurrent snapshot, except at snap_at (> 0: where the job
 * just kept one): the chunk ending there (written again when it was stored without), else
 * a tail ending there; its other tails would be rows no resume can use, and are not
 * written. */
static void slot_save(struct runner *r, struct slot *s, const uint32_t *tail_end, size_t n_tail,
                      uint32_t snap_at) {
    const struct runner_job *j = s->job;
    struct store_chain chain;
    if (!r->store || !r->writer || j->cache == RUNNER_CACHE_SKIP || s->n_cached == 0)
        return;
    uint32_t c = r->chunk_tokens, n_full = s->n_cached / c;
    if (r->hybrid) {
        tail_end = snap_at % c ? &snap_at : NULL;
        n_tail = snap_at % c ? 1 : 0;
    }
    if (n_full <= s->stored_chunks && n_tail == 0 && !(snap_at && snap_at % c == 0)) return;
    if (chain_init(r, j, &chain) < 0) return;
    struct hash128 h = chain.h0;
    for (uint32_t i = 0; i <= n_full; i++) {
        for (size_t k = 0; k < n_tail; k++) {
            uint32_t end = tail_end[k];
            bool dup = false;
            for (size_t q = 0; q < k; q++) dup = dup || tail_end[q] == end;
            if (!dup && end / c == i && end % c && end <= s->n_cached)
                queue_record(r, s, &chain, STORE_KIND_TAIL, h, i * c, end - i * c,
                             r->hybrid ? ENGINE_KV_SNAP_NEED : ENGINE_KV_SNAP_AUTO);
        }
        if (i == n_full) break;
        struct hash128 next = store_chain_next(h, s->cached + (size_t)i * c, c);
        bool snap = r->hybrid && snap_at == (i + 1) * c;
        if (i >= s->stored_chunks || snap)
            queue_record(r, s, &chain, STORE_KIND_CHUNK, h, i * c, c,
                         snap ? ENGINE_KV_SNAP_NEED : r->hybrid ? ENGINE_KV_SNAP_NONE
                                                             : ENGINE_KV_SNAP_AUTO);
        h = next;
    }
    s->stored_chunks = MAX(s->stored_chunks, n_full);
}

/* ---- slots --------------------------------------------------------------------------- */

/* Ends the slot's job: done() with the outcome, the slot is free again. */
static void slot_finish(struct runner *r, struct slot *s, int err, const char *msg) {
    struct runner_job *j = s->job;
    if (err == 0) slot_save(r, s, &s->n_cached, 1, 0);
    if (s->state == SLOT_DECODE || s->prefill_end_usec)
        s->res.decode_usec = time_now_usec() - (s->prefill_end_usec ? s->prefill_end_usec : s->start_usec);
    engine_sampler_free(s->sampler);
    s->sampler = NULL;
    engine_grammar_matcher_free(s->matcher); /* after the sampler, which borrowed it */
    s->matcher = NULL;
    s->job = NULL;
    atomic_store(&s->running_uid, 0);
    s->state = SLOT_FREE;
    s->last_used_usec = time_now_usec();
    char m[600];
    if (err == -ESHUTDOWN) snprintf(m, sizeof m, "model '%s' was unloaded", r->name);
    else if (err == -ECANCELED) snprintf(m, sizeof m, "cancelled by the client");
    else snprintf(m, sizeof m, "%s", msg ? msg : "");
    j->ops->done(j, &s->res, err, m);
    pthread_mutex_lock(&r->lock);
    r->n_jobs--;
    pthread_mutex_unlock(&r->lock);
}

/* A hybrid job's snapshot positions past from (PREFILL_STEP's comment), ascending. */
static void slot_plan(struct runner *r, struct slot *s, const struct runner_job *j,
                      uint32_t from) {
    s->n_plan = s->next_plan = 0;
    if (!r->hybrid) return;
    const uint32_t n = (uint32_t)j->n_prompt, c = r->chunk_tokens;
    uint32_t end = 0;
    for (uint32_t i = n; r->turn_tok >= 0 && i-- > 0;)
        if (j->prompt[i] == r->turn_tok) {
            end = i;
            break;
        }
    if (end == 0) end = n > SNAP_GEN_PROMPT ? n - SNAP_GEN_PROMPT : 0;
    if (end <= from) return;
    uint32_t last = from;
    for (uint32_t p = from + 1; p + c <= end && s->n_plan + 1 < SLOT_MAX_PLAN; p++) {
        bool turn = r->turn_tok >= 0 && j->prompt[p] == r->turn_tok && p - last >= r->msg_gap;
        if ((turn || p % r->snap_every == 0) && p - last >= c) s->plan[s->n_plan++] = last = p;
    }
    s->plan[s->n_plan++] = end;
}

/* Prompt tokens of j already in slot s (never the last: its logits are needed). */
static uint32_t common_prefix(const struct slot *s, const struct runner_job *j) {
    /* another namespace's prompts are never reused, nor timed (DESIGN.md §4) */
    if (strcmp(s->ns, j->ns) != 0) return 0;
    uint32_t keep = 0, lim = (uint32_t)MIN((size_t)s->n_cached, j->n_prompt - 1);
    while (keep < lim && s->cached[keep] == j->prompt[keep]) keep++;
    return keep;
}

/* The free slot for j: the longest shared prefix, then the least recently used. */
static struct slot *slot_pick(struct runner *r, const struct runner_job *j) {
    struct slot *best = NULL;
    uint32_t best_keep = 0;
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        if (s->state != SLOT_FREE) continue;
        uint32_t keep = j->n_prompt ? common_prefix(s, j) : 0;
        /* a hybrid reuses only up to a recurrent state it holds */
        if (r->hybrid) keep = engine_kv_seq_resume_pos(r->ctx, (int32_t)i, keep);
        if (!best || keep > best_keep ||
            (keep == best_keep && s->last_used_usec < best->last_used_usec)) {
            best = s;
            best_keep = keep;
        }
    }
    return best;
}

/* Tells the job how far its prompt is, when it has more than one step to compute. */
static void slot_progress(struct slot *s) {
    const struct runner_job *j = s->job;
    if (!j->ops->progress || s->res.evaluated_tokens <= PREFILL_STEP) return;
    const struct runner_progress p = {
        .prompt_tokens = (uint32_t)j->n_prompt,
        .done_tokens = s->n_prefilled,
        .ram_tokens = s->res.ram_tokens,
        .store_tokens = s->res.store_tokens,
    };
    s->job->ops->progress(s->job, &p);
}

/* Constrains the slot's sampler with a matcher of g (the model's grammar vocabulary is
 * built first if no job needed it yet). msg says why on failure. */
static int slot_grammar(struct runner *r, struct slot *s, const struct engine_grammar *g,
                        char *msg, size_t n_msg) {
    int e;
    if (!r->grammar_vocab) {
        uint64_t t0 = time_now_usec();
        e = engine_grammar_vocab_new(r->vocab, &r->grammar_vocab);
        if (e < 0) {
            snprintf(msg, n_msg, "output format: the grammar vocabulary of model '%s': %s",
                     r->name, err_str(e));
            return e;
        }
        log_info("model '%s': grammar vocabulary of %d tokens built in %.1f ms", r->name,
                 engine_grammar_vocab_n_tokens(r->grammar_vocab),
                 (double)(time_now_usec() - t0) / 1000.0);
    }
    e = engine_grammar_matcher_new(g, r->grammar_vocab, &s->matcher);
    if (e >= 0) e = engine_sampler_set_grammar(s->sampler, s->matcher);
    if (e < 0) snprintf(msg, n_msg, "output format: %s", err_str(e));
    return e;
}

/* Starts j in slot s: keeps the shared prefix, sets up sampler and detokenizer. */
static void slot_start(struct runner *r, struct slot *s, struct runner_job *j) {
    int32_t seq = (int32_t)(s - r->slots);
    memset(&s->res, 0, sizeof s->res);
    s->job = j;
    atomic_store(&s->running_uid, (uint64_t)j->uid + 1);
    s->start_usec = time_now_usec();
    s->prefill_end_usec = 0;
    s->res.queue_usec = s->start_usec - j->submit_usec;
    s->res.prompt_tokens = (uint32_t)j->n_prompt;
    s->state = SLOT_PREFILL;
    char msg[400];
    if (j->n_prompt == 0 || j->n_prompt > r->n_ctx) {
        snprintf(msg, sizeof msg, "the prompt has %zu tokens; the context holds %u",
                 j->n_prompt, r->n_ctx);
        slot_finish(r, s, ERR_CTX_FULL, msg);
        return;
    }
    /* refresh recomputes the whole prompt (and so rewrites every record of it); a hybrid
     * keeps what it can continue from: its state there, live or a snapshot */
    uint32_t keep = j->cache == RUNNER_CACHE_REFRESH ? 0 : common_prefix(s, j);
    if (r->hybrid) keep = engine_kv_seq_resume_pos(r->ctx, seq, keep);
    int e = engine_kv_seq_rm(r->ctx, seq, keep);
    if (e < 0) keep = 0, e = engine_kv_seq_rm(r->ctx, seq, 0);
    if (e < 0) {
        s->n_cached = 0;
        snprintf(msg, sizeof msg, "cannot reset sequence %d: %s", seq, err_str(e));
        slot_finish(r, s, e, msg);
        return;
    }
    s->res.ram_tokens = keep;
    /* What RAM has is known to match; the store's knowledge of this sequence is not. */
    s->stored_chunks = j->cache == RUNNER_CACHE_REFRESH || strcmp(s->ns, j->ns) != 0
                           ? 0 : MIN(s->stored_chunks, keep / r->chunk_tokens);
    snprintf(s->ns, sizeof s->ns, "%s", j->ns);
    if (r->store && j->cache == RUNNER_CACHE_USE &&
        j->n_prompt - keep > (size_t)r->restore_min_tokens)
        keep = slot_restore(r, s, j, keep);
    memcpy(s->cached + s->res.ram_tokens, j->prompt + s->res.ram_tokens,
           (keep - s->res.ram_tokens) * sizeof(int32_t));
    s->n_cached = s->n_prefilled = keep;
    s->res.store_tokens = keep - s->res.ram_tokens;
    slot_plan(r, s, j, keep);
    s->res.evaluated_tokens = (uint32_t)j->n_prompt - keep;
    e = engine_sampler_new(&j->sampling, engine_vocab_n_tokens(r->vocab), &s->sampler);
    if (e < 0) {
        snprintf(msg, sizeof msg, "sampler: %s", err_str(e));
        slot_finish(r, s, e, msg);
        return;
    }
    if (j->grammar && (e = slot_grammar(r, s, j->grammar, msg, sizeof msg)) < 0) {
        slot_finish(r, s, e, msg);
        return;
    }
    for (size_t i = 0; i < j->n_prompt; i++) engine_sampler_accept(s->sampler, j->prompt[i]);
    /* The detokenizer sees the prompt so a leading-space rule knows where text stands. */
    engine_detok_init(&s->dt, r->vocab, ENGINE_DETOK_TEXT_START | ENGINE_DETOK_VALID_UTF8);
    for (size_t i = 0; i < j->n_prompt; i++)
        if (engine_detok_feed(&s->dt, j->prompt[i], r->piece, r->piece_cap) < 0) break;
    slot_progress(s);
}

/* Samples the slot's next token from logits and hands it to the job; the slot then
 * decodes it next step or is finished. (An unfinished character at the very end of a
 * stream is dropped, never sent half.) */
static void slot_sample(struct runner *r, struct slot *s, const float *logits) {
    struct runner_job *j = s->job;
    struct err_detail d = {0};
    int32_t tok = engine_sampler_sample(s->sampler, logits, &d);
    char msg[700];
    if (tok == ERR_GRAMMAR_STUCK) {
        /* the output cannot go on in the format's language with this model's tokens */
        snprintf(msg, sizeof msg, "output format: after %u generated tokens no token of model "
                 "'%s' continues the output in the requested format (%s)",
                 s->res.generated_tokens, r->name, err_msg(&d, tok));
        slot_finish(r, s, tok, msg);
        return;
    }
    if (tok < 0) {
        /* broken logits (a model with NaN weights) end this job; the others go on */
        snprintf(msg, sizeof msg, "sampling: %s", err_msg(&d, tok));
        slot_finish(r, s, tok, msg);
        return;
    }
    /* Under a grammar the mask allows end of generation only once the output is complete. */
    if (engine_vocab_is_eog(r->vocab, tok)) {
        s->res.stop = RUNNER_STOP_EOS;
        slot_finish(r, s, 0, NULL);
        return;
    }
    int e = engine_sampler_accept_generated(s->sampler, tok, &d);
    if (e < 0) {
        snprintf(msg, sizeof msg, "output format: %s", err_msg(&d, e));
        slot_finish(r, s, e, msg);
        return;
    }
    s->res.generated_tokens++;
    int n = engine_detok_feed(&s->dt, tok, r->piece, r->piece_cap);
    if (!j->ops->token(j, tok, r->piece, (size_t)MAX(n, 0))) {
        /* a token that could not be delivered is a client gone, not a stop string */
        if (j->ops->cancelled(j)) {
            slot_finish(r, s, -ECANCELED, NULL);
        } else {
            s->res.stop = RUNNER_STOP_CALLER;
            slot_finish(r, s, 0, NULL);
        }
    } else if (j->max_tokens && s->res.generated_tokens >= j->max_tokens) {
        s->res.stop = RUNNER_STOP_MAX_TOKENS;
        slot_finish(r, s, 0, NULL);
    } else if (s->n_cached >= r->n_ctx) {
        s->res.stop = RUNNER_STOP_CONTEXT_FULL;
        slot_finish(r, s, 0, NULL);
    } else {
        s->next = tok;
        s->state = SLOT_DECODE;
    }
}

/* ---- the loop ------------------------------------------------------------------------ */

/* Builds and runs one batch over the active slots, then samples. */
static void step(struct runner *r) {
    int32_t n = 0;
    struct slot *owner[PREFILL_STEP + 256]; /* the slot of each batch token */
    uint32_t n_take[256] = {0};             /* prompt tokens added per slot */
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        if (s->state != SLOT_DECODE) continue;
        r->b_token[n] = s->next;
        r->b_pos[n] = (int32_t)s->n_cached;
        r->b_seq[n] = (int32_t)i;
        r->b_want[n] = true;
        owner[n++] = s;
    }
    int32_t n_decode = n;
    uint32_t budget = PREFILL_STEP;
    for (uint32_t i = 0; i < r->n_slots && budget; i++) {
        struct slot *s = &r->slots[i];
        if (s->state != SLOT_PREFILL) continue;
        uint32_t left = (uint32_t)s->job->n_prompt - s->n_prefilled;
        uint32_t take = MIN(left, budget);
        /* a hybrid's step ends at its next snapshot position */
        if (s->next_plan < s->n_plan) take = MIN(take, s->plan[s->next_plan] - s->n_prefilled);
        for (uint32_t k = 0; k < take; k++) {
            uint32_t p = s->n_prefilled + k;
            r->b_token[n] = s->job->prompt[p];
            r->b_pos[n] = (int32_t)p;
            r->b_seq[n] = (int32_t)i;
            r->b_want[n] = p + 1 == s->job->n_prompt; /* the last prompt token's logits */
            owner[n++] = s;
        }
        n_take[i] = take;
        budget -= take;
    }
    if (n == 0) return;
    if (r->test_stall_usec && n_decode) stall(r); /* a decode step wedges, like a hang */
    struct engine_batch b = {.n_tok = n, .token = r->b_token, .pos = r->b_pos,
                             .seq = r->b_seq, .want_logits = r->b_want};
    struct err_detail d = {0};
    int e = engine_context_decode(r->ctx, &b, &d);
    if (e < 0) {
        /* A rejected batch changes nothing; fail the jobs that were in it. */
        char msg[600];
        snprintf(msg, sizeof msg, "forward pass: %s", err_msg(&d, e));
        for (uint32_t i = 0; i < r->n_slots; i++) {
            struct slot *s = &r->slots[i];
            if (s->state == SLOT_DECODE || (s->state == SLOT_PREFILL && n_take[i]))
                slot_finish(r, s, e, msg);
        }
        return;
    }
    /* The cache now holds the batch: record it per slot. */
    for (uint32_t i = 0; i < r->n_slots; i++) {
        struct slot *s = &r->slots[i];
        if (s->state == SLOT_DECODE) {
            s->cached[s->n_cached++] = s->next;
            if (s->n_cached % r->chunk_tokens == 0) slot_save(r, s, NULL, 0, 0);
        }
        else if (s->state == SLOT_PREFILL && n_take[i]) {
            memcpy(s->cached + s->n_prefilled, s->job->prompt + s->n_prefilled,
                   n_take[i] * sizeof(int32_t));
            s->n_prefilled += n_take[i];
            s->n_cached = s->n_prefilled;
            /* a hybrid at a planned position keeps its state there, in RAM and stored */
            uint32_t snap_at = 0;
            if (s->next_plan < s->n_plan && s->n_prefilled == s->plan[s->next_plan]) {
                s->next_plan++;
                if (engine_kv_snapshot(r->ctx, (int32_t)i, NULL) >= 0) snap_at = s->n_prefilled;
            }
            if (s->n_prefilled == s->job->n_prompt) {
                uint32_t ends[2] = {s->n_prefilled - 1, s->n_prefilled};
                slot_save(r, s, ends, 2, snap_at);
            } else {
                slot_save(r, s, NULL, 0, snap_at);
            }
            if (s->n_prefilled == s->job->n_prompt) {
                s->prefill_end_usec = time_now_usec();
                s->res.prefill_usec = s->prefill_end_usec - s->start_usec - s->res.restore_usec;
            }
            slot_progress(s);
        }
    }
    /* Logits come in batch order of the tokens that wanted them. */
    int32_t out = 0;
    for (int32_t k = 0; k < n; k++) {
        if (!r->b_want[k]) continue;
        const float *logits = engine_context_logits(r->ctx, out++);
        struct slot *s = owner[k];
        if (s->state != SLOT_FREE && logits) slot_sample(r, s, logits);
    }
}

/* The queued job whose uid runs the fewest sequences (counting those admitted this round
 * as running), the oldest among them: a uid's share of the slots. */
static struct runner_job *fair_pick_locked(struct runner *r, struct runner_job *const *admitted,
                                           uint32_t n_admitted) {
    struct runner_job *best = NULL;
    unsigned best_n = UINT_MAX;
    for (struct runner_job *q = r->head; q && best_n; q = q->next) {
        unsigned n = 0;
        for (uint32_t i = 0; i < r->n_slots; i++)
            n += r->slots[i].state != SLOT_FREE && r->slots[i].job->uid == q->uid;
        for (uint32_t i = 0; i < n_admitted; i++) n += admitted[i]->uid == q->uid;
        if (n < best_n) {
            best = q;
            best_n = n;
        }
    }
    return best;
}

static void queue_remove_locked(struct runner *r, struct runner_job *j) {
    struct runner_job *prev = NULL;
    for (struct runner_job *q = r->head; q; prev = q, q = q->next) {
        if (q != j) continue;
        if (prev) prev->next = q->next;
        else r->head = q->next;
        if (r->tail == q) r->tail = prev;
        return;
    }
}

static void *loop(void *arg) {
    struct runner *r = arg;
    for (;;) {
        /* Admit queued jobs into free slots. */
        pthread_mutex_lock(&r->lock);
        bool stop = r->stopping;
        struct runner_job *admit[256];
        uint32_t n_admit = 0, n_busy = 0;
        for (uint32_t i = 0; i < r->n_slots; i++) n_busy += r->slots[i].state != SLOT_FREE;
        while (r->head && (stop || n_busy + n_admit < r->n_slots) && n_admit < 256) {
            admit[n_admit] = stop ? r->head : fair_pick_locked(r, admit, n_admit);
            queue_remove_locked(r, admit[n_admit++]);
        }
        if (!n_busy && !n_admit) {
            if (stop) {
                pthread_mutex_unlock(&r->lock);
                break;
            }
            notify_beat_busy(&r->beat, false, time_now_usec());
            pthread_cond_wait(&r->cond, &r->lock);
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        pthread_mutex_unlock(&r->lock);
        if (!atomic_load(&r->beat.busy)) notify_beat_busy(&r->beat, true, time_now_usec());

        for (uint32_t i = 0; i < n_admit; i++) {
            if (stop) {
                /* Unloading: queued jobs end without a slot. */
                struct runner_result res = {.prompt_tokens = (uint32_t)admit[i]->n_prompt};
                char msg[200];
                snprintf(msg, sizeof msg, "model '%s' was unloaded", r->name);
                admit[i]->ops->done(admit[i], &res, -ESHUTDOWN, msg);
                pthread_mutex_lock(&r->lock);
                r->n_jobs--;
                pthread_mutex_unlock(&r->lock);
                continue;
            }
            struct slot *slot = slot_pick(r, admit[i]);
            if (slot) slot_start(r, slot, admit[i]); /* admitted only when a slot is free */
        }
        /* Stops and cancellations, then one step for everyone left. */
        for (uint32_t i = 0; i < r->n_slots; i++) {
            struct slot *s = &r->slots[i];
            if (s->state == SLOT_FREE) continue;
            if (stop) slot_finish(r, s, -ESHUTDOWN, NULL);
            else if (s->job->ops->cancelled(s->job)) slot_finish(r, s, -ECANCELED, NULL);
        }
        if (!stop) step(r);
        notify_beat_step(&r->beat, time_now_usec());
    }
    return NULL;
}

/* The bytes of a chunk record of c tokens (engine/kv-state.c): the K and V rows of every
 * layer that owns KV, for all c tokens in a full-attention layer and for the last
 * min(c, W - 1) in a sliding-window layer (the rows needed to continue after it). */
static size_t chunk_record_bytes(const struct engine_model *m, const struct engine_kv_info *kvi,
                                 uint32_t c) {
    size_t n = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer_hparams *l = &m->hp.layer[il];
        if (l->kv_source != (int32_t)il || l->mixer == ENGINE_MIXER_GATED_DELTANET) continue;
        size_t rows = l->swa ? MIN(c, m->hp.swa_window - 1) : c;
        n += rows * (kern_row_size(kvi->type_k, (int64_t)l->n_head_kv * l->head_dim_k) +
                     kern_row_size(kvi->type_v, (int64_t)l->n_head_kv * l->head_dim_v));
    }
    return n;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

/* The turn-start text of each chat family (engine/chat.h): where a message begins. */
static const char *const turn_start[ENGINE_CHAT_FAMILY_COUNT] = {
    [ENGINE_CHAT_CHATML] = "<|im_start|>",
    [ENGINE_CHAT_LLAMA3] = "<|start_header_id|>",
    [ENGINE_CHAT_GEMMA] = "<start_of_turn>",
    [ENGINE_CHAT_MISTRAL] = "[INST]",
    [ENGINE_CHAT_GEMMA4] = "<|turn>",
    [ENGINE_CHAT_QWEN3] = "<|im_start|>",
    [ENGINE_CHAT_QWEN35] = "<|im_start|>",
};

/* A hybrid's snapshot policy: the sparse spacing (the chunk multiple at or above
 * SNAP_SPARSE_KV × the state's bytes in tokens of KV) and the turn-start token. */
static void runner_hybrid_init(struct runner *r, const struct engine_kv_info *kvi) {
    r->hybrid = kvi->n_layer_rs > 0;
    r->turn_tok = -1;
    if (!r->hybrid) return;
    const uint32_t c = r->chunk_tokens;
    size_t kv_chunk = MAX(chunk_record_bytes(r->model, kvi, c), (size_t)1);
    uint64_t state_tokens = MIN((uint64_t)kvi->rs_state_bytes * c / kv_chunk, (uint64_t)1 << 28);
    uint64_t sparse = SNAP_SPARSE_KV * state_tokens;
    r->snap_every = (uint32_t)MAX((sparse + c - 1) / c * c, (uint64_t)c);
    r->msg_gap = (uint32_t)MAX(state_tokens, (uint64_t)c);
    enum engine_chat_family fam = engine_chat_detect_gguf(engine_model_gguf(r->model));
    const char *t = fam < ENGINE_CHAT_FAMILY_COUNT ? turn_start[fam] : NULL;
    int32_t id = t ? engine_vocab_find(r->vocab, t, strlen(t)) : -1;
    r->turn_tok = id >= 0 ? id : -1;
    log_info("model '%s': %u recurrent layers, a state of %zu bytes (the KV of %llu tokens): "
             "snapshots at the end of each prompt minus its generation prompt%s, at message "
             "starts %u apart, and every %u tokens", r->name, kvi->n_layer_rs,
             kvi->rs_state_bytes, (unsigned long long)state_tokens,
             r->turn_tok >= 0 ? "" : " (no chat template: 4 tokens before the end)",
             r->msg_gap, r->snap_every);
}

/* An embedding model's context: an embeddings one whose batch holds a whole input of up to
 * n_ctx tokens (the engine takes an input in one step), min(parallel, 8) inputs a pass
 * (a pass holds n_batch tokens in all, so more sequences only help short inputs), and f16
 * K/V unless the config asks for f32 (the cache lives for one pass: a quantized one would
 * only cost precision). */
static void embed_params(struct engine_context_params *cp, const struct runner_params *p) {
    cp->embeddings = true;
    cp->n_seq = MIN(MAX(p->n_seq, 1u), 8u);
    cp->n_outputs = 0;
    cp->n_batch = p->n_ctx ? p->n_ctx : 512;
    cp->type_k = p->type_k == KERN_TYPE_F32 ? KERN_TYPE_F32 : KERN_TYPE_F16;
    cp->type_v = p->type_v == KERN_TYPE_F32 ? KERN_TYPE_F32 : KERN_TYPE_F16;
}

static void runner_release(struct runner *r) {
    embedder_free(r->embedder);
    if (r->notify) notify_beat_del(r->notify, &r->beat);
    for (uint32_t i = 0; r->slots && i < r->n_slots; i++) {
        engine_sampler_free(r->slots[i].sampler);
        free(r->slots[i].cached);
    }
    free(r->slots);
    engine_context_free(r->ctx);
    engine_grammar_vocab_free(r->grammar_vocab);
    engine_vocab_free(r->vocab);
    engine_model_free(r->model);
    free(r->b_token);
    free(r->b_pos);
    free(r->b_seq);
    free(r->b_want);
    free(r->piece);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int runner_new(const char *name, int fd, const struct runner_params *p, struct runner **ret,
               struct err_detail *d) {
    struct runner *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return -ENOMEM;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    /* The fd was opened beneath the models directory; reopen it through /proc so the
     * loader reads exactly that file, into a private copy: a mapping of a file that is
     * replaced with cp or truncated while in use changes under the weights and raises
     * SIGBUS (P1-11), a snapshot does neither. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const struct engine_model_params mp = {.private_copy = true};
    int e = engine_model_load(path, &mp, &r->model, d);
    close(fd);
    if (e < 0) goto fail;
    e = engine_vocab_load(engine_model_gguf(r->model), &r->vocab, d);
    if (e < 0) goto fail;
    struct engine_context_params cp;
    engine_context_params_default(&cp);
    cp.n_ctx = p->n_ctx;
    cp.n_seq = MIN(MAX(p->n_seq, 1u), 256u);
    cp.n_outputs = cp.n_seq;
    cp.n_threads = p->n_threads;
    cp.type_k = p->type_k;
    cp.type_v = p->type_v;
    cp.kv_rotation = p->kv_rotation;
    cp.split = (enum engine_split)p->split;
    cp.gpu_layers = p->gpu_layers;
    cp.experts = (enum engine_experts_place)p->experts;
    if (p->device && *p->device &&
        (e = engine_device_resolve(p->device, &cp.device, &cp.device_index, NULL, 0, d)) < 0)
        goto fail;
    if (p->devices && *p->devices && (e = engine_devices_parse_into(p->devices, &cp, d)) < 0)
        goto fail;
    if (p->tensor_split && *p->tensor_split &&
        (e = engine_tensor_split_parse(p->tensor_split, cp.tensor_split, ENGINE_MAX_DEVICES, d)) < 0)
        goto fail;
    /* an SWA ring keeps a chunk's rows until it is exported (chunks only shrink below) */
    if (p->chunk_tokens) cp.swa_chunk = p->chunk_tokens;
    if (engine_model_is_embedding(r->model)) embed_params(&cp, p);
    e = engine_context_new(r->model, &cp, &r->ctx, d);
    if (e < 0) goto fail;
    if (engine_model_is_embedding(r->model)) {
        r->n_ctx = engine_context_params(r->ctx)->n_ctx;
        r->memory_bytes = r->model->weight_bytes + engine_context_kv_bytes(r->ctx);
        struct embedder_params ep = {.max_jobs = p->max_jobs, .max_jobs_per_uid = p->max_jobs_per_uid,
                                     .notify = p->notify, .metrics = p->metrics};
        if ((e = embedder_new(name, r->ctx, &ep, &r->embedder, d)) < 0) goto fail;
        *ret = r;
        return 0;
    }
    r->n_ctx = engine_context_params(r->ctx)->n_ctx;
    r->n_slots = cp.n_seq;
    r->memory_bytes = r->model->weight_bytes + engine_context_kv_bytes(r->ctx);
    struct engine_kv_info kvi;
    engine_context_kv_info(r->ctx, &kvi);
    /* Chunk records of at most ~4 MiB: C = cache_chunk_tokens, halved for big KV rows.
     * Sized by the record itself, not by kv_bytes / n_ctx, which undercounts an SWA ring's
     * rows. */
    r->chunk_tokens = cp.swa_chunk;
    r->restore_min_tokens = p->restore_min_tokens;
    while (r->chunk_tokens > 16 && chunk_record_bytes(r->model, &kvi, r->chunk_tokens) > (4u << 20))
        r->chunk_tokens /= 2;
    r->type_k = (uint32_t)kvi.type_k;
    r->type_v = (uint32_t)kvi.type_v;
    runner_hybrid_init(r, &kvi);
    hash128_to_bytes(r->model->fingerprint, r->fingerprint);
    r->store = p->store;
    r->writer = p->writer;
    size_t n_batch = PREFILL_STEP + r->n_slots;
    r->slots = calloc_array(r->n_slots, sizeof *r->slots);
    r->b_token = malloc_array(n_batch, sizeof *r->b_token);
    r->b_pos = malloc_array(n_batch, sizeof *r->b_pos);
    r->b_seq = malloc_array(n_batch, sizeof *r->b_seq);
    r->b_want = malloc_array(n_batch, sizeof *r->b_want);
    r->piece_cap = 4 * (engine_vocab_max_piece(r->vocab) + 8);
    r->piece = malloc(r->piece_cap);
    bool ok = r->slots && r->b_token && r->b_pos && r->b_seq && r->b_want && r->piece;
    for (uint32_t i = 0; ok && i < r->n_slots; i++)
        ok = (r->slots[i].cached = malloc_array(r->n_ctx, sizeof(int32_t))) != NULL;
    if (!ok) {
        e = err_set(d, -ENOMEM, "out of memory for model '%s'", name);
        goto fail;
    }
    r->notify = p->notify;
    r->test_stall_usec = p->test_stall_usec;
    r->max_jobs = p->max_jobs ? p->max_jobs : 64;
    r->max_jobs_per_uid = p->max_jobs_per_uid ? MIN(p->max_jobs_per_uid, r->max_jobs) : r->max_jobs;
    snprintf(r->beat_name, sizeof r->beat_name, "model loop '%s'", name);
    r->beat.name = r->beat_name;
    notify_beat_step(&r->beat, time_now_usec());
    if (r->notify && (e = notify_beat_add(r->notify, &r->beat)) < 0) {
        err_set(d, e, "too many loaded models for the watchdog table");
        r->notify = NULL;
        goto fail;
    }
    e = -pthread_create(&r->thread, NULL, loop, r);
    if (e < 0) {
        err_set(d, e, "cannot start the loop of model '%s'", name);
        goto fail;
    }
    *ret = r;
    return 0;
fail:
    runner_release(r);
    return e;
}

void runner_free(struct runner *r) {
    if (!r) return;
    if (r->embedder) { /* no loop thread of ours */
        runner_release(r);
        return;
    }
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    /* The loop ends the running jobs after the current step and fails the queued ones. */
    pthread_join(r->thread, NULL);
    runner_release(r);
}
