/* notify — systemd readiness, status and watchdog (sd_notify). All calls are no-ops when
 * NOTIFY_SOCKET is unset.
 *
 * Watchdog: every loop that must keep making progress (later: each scheduler loop; now:
 * the accept loop) owns a struct notify_beat registered here. A loop marks itself busy
 * while it has work and stamps progress after each step. notify_tick() sends WATCHDOG=1
 * only when every busy loop stamped progress within the watchdog interval, so a wedged
 * loop stops the pings and systemd restarts the service. */
#pragma once

#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>

#define NOTIFY_MAX_BEATS 64

struct notify_beat {
    const char *name;                  /* for the log when it stalls */
    _Atomic uint64_t progress_usec;    /* time_now_usec() of the last step */
    _Atomic bool busy;                 /* has work; idle loops never block the watchdog */
};

struct notify {
    uint64_t watchdog_usec;            /* from WATCHDOG_USEC; 0 = off */
    uint64_t last_ping_usec;
    bool stalled;                      /* logged once per stall */
    pthread_mutex_t lock;
    struct notify_beat *beats[NOTIFY_MAX_BEATS];
    unsigned n_beats;
    char last_status[256];
};

void notify_init(struct notify *n);
void notify_done(struct notify *n);
/* Adds or removes a loop's beat (the beat must outlive its registration). */
int notify_beat_add(struct notify *n, struct notify_beat *b);
void notify_beat_del(struct notify *n, struct notify_beat *b);
static inline void notify_beat_step(struct notify_beat *b, uint64_t now_usec) {
    atomic_store_explicit(&b->progress_usec, now_usec, memory_order_relaxed);
}
static inline void notify_beat_busy(struct notify_beat *b, bool busy, uint64_t now_usec) {
    notify_beat_step(b, now_usec);
    atomic_store_explicit(&b->busy, busy, memory_order_relaxed);
}
/* Names the calling thread's beat (NULL: none) for notify_beat_pause/resume. */
void notify_beat_bind(struct notify_beat *b);
/* Bracket a step of the calling thread whose length is not its loop's (a model load
 * lasts as long as its file is big; waiting for another thread's load): the thread's beat
 * counts as idle in between and is stamped at both ends. Pairs nest; no-ops on a thread
 * without a bound beat. */
void notify_beat_pause(void);
void notify_beat_resume(void);

void notify_ready(struct notify *n, const char *status);
/* Sends STATUS= when the text changed since the last call. */
void notify_status(struct notify *n, const char *status);
void notify_stopping(struct notify *n, const char *status);
void notify_reloading(struct notify *n);
/* Asks systemd for usec more start-up time (a long model load before READY=1). */
void notify_extend_timeout(struct notify *n, uint64_t usec);
/* Called by the main loop at least every interval_usec(): pings the watchdog when every
 * busy loop progressed. */
void notify_tick(struct notify *n, uint64_t now_usec);
/* How often notify_tick must run: half the watchdog interval, at most 1 s. */
uint64_t notify_interval_usec(const struct notify *n);
