/* notify — sd_notify wrappers and the progress-gated watchdog (see notify.h). */
#include "daemon/notify.h"

#include "daemon/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

void notify_init(struct notify *n) {
    memset(n, 0, sizeof *n);
    pthread_mutex_init(&n->lock, NULL);
    uint64_t usec = 0;
    /* unset_environment = 0: the variables stay for anything we exec (nothing). */
    if (sd_watchdog_enabled(0, &usec) > 0) n->watchdog_usec = usec;
}

void notify_done(struct notify *n) { pthread_mutex_destroy(&n->lock); }

int notify_beat_add(struct notify *n, struct notify_beat *b) {
    pthread_mutex_lock(&n->lock);
    int r = -ENOSPC;
    if (n->n_beats < NOTIFY_MAX_BEATS) {
        n->beats[n->n_beats++] = b;
        r = 0;
    }
    pthread_mutex_unlock(&n->lock);
    return r;
}

void notify_beat_del(struct notify *n, struct notify_beat *b) {
    pthread_mutex_lock(&n->lock);
    for (unsigned i = 0; i < n->n_beats; i++) {
        if (n->beats[i] == b) {
            n->beats[i] = n->beats[--n->n_beats];
            break;
        }
    }
    pthread_mutex_unlock(&n->lock);
}

/* The calling thread's beat, and its busy flag while paused. */
static _Thread_local struct {
    struct notify_beat *beat;
    unsigned depth;
    bool busy;
} current;

void notify_beat_bind(struct notify_beat *b) {
    current.beat = b;
    current.depth = 0;
}

void notify_beat_pause(void) {
    if (!current.beat || current.depth++) return;
    current.busy = atomic_load_explicit(&current.beat->busy, memory_order_relaxed);
    notify_beat_busy(current.beat, false, time_now_usec());
}

void notify_beat_resume(void) {
    if (!current.beat || !current.depth || --current.depth) return;
    notify_beat_busy(current.beat, current.busy, time_now_usec());
}

void notify_ready(struct notify *n, const char *status) {
    snprintf(n->last_status, sizeof n->last_status, "%s", status);
    sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_status(struct notify *n, const char *status) {
    if (strcmp(status, n->last_status) == 0) return;
    snprintf(n->last_status, sizeof n->last_status, "%s", status);
    sd_notifyf(0, "STATUS=%s", status);
}

void notify_stopping(struct notify *n, const char *status) {
    sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status);
}

void notify_reloading(struct notify *n) { sd_notify(0, "RELOADING=1"); }

void notify_extend_timeout(struct notify *n, uint64_t usec) {
    sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
}

uint64_t notify_interval_usec(const struct notify *n) {
    uint64_t i = n->watchdog_usec ? n->watchdog_usec / 2 : 1000000;
    return MIN(i, 1000000);
}

void notify_tick(struct notify *n, uint64_t now) {
    if (!n->watchdog_usec) return;
    const char *stalled = NULL;
    pthread_mutex_lock(&n->lock);
    for (unsigned i = 0; i < n->n_beats; i++) {
        struct notify_beat *b = n->beats[i];
        uint64_t p = atomic_load_explicit(&b->progress_usec, memory_order_relaxed);
        if (atomic_load_explicit(&b->busy, memory_order_relaxed) && now > p &&
            now - p > n->watchdog_usec) {
            stalled = b->name;
            break;
        }
    }
    pthread_mutex_unlock(&n->lock);
    if (stalled) {
        if (!n->stalled) log_error("watchdog: '%s' made no progress; no longer pinging", stalled);
        n->stalled = true;
        return;
    }
    n->stalled = false;
    if (now - n->last_ping_usec >= n->watchdog_usec / 2) {
        sd_notify(0, "WATCHDOG=1");
        n->last_ping_usec = now;
    }
}
