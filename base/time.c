/* Clocks in microseconds, and the process-wide log hook. */
#include "base/base.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static uint64_t clock_usec(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t time_now_usec(void) { return clock_usec(CLOCK_MONOTONIC); }
uint64_t time_wall_usec(void) { return clock_usec(CLOCK_REALTIME); }

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static log_sink_fn log_sink;
static void *log_userdata;

void log_set_sink(log_sink_fn fn, void *userdata) {
    pthread_mutex_lock(&log_lock);
    log_sink = fn;
    log_userdata = userdata;
    pthread_mutex_unlock(&log_lock);
}

void log_msg(enum log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&log_lock);
    log_sink_fn fn = log_sink;
    void *ud = log_userdata;
    pthread_mutex_unlock(&log_lock);
    if (!fn) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(level, buf, ud);
}
