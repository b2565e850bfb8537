/* log — stderr sink with levels (see log.h). */
#include "daemon/log.h"

#include <grpc/support/log.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static _Atomic int max_level = LOG_LEVEL_INFO;
static _Atomic bool journal;

/* sd-daemon(3) priorities and plain-text names, per level. */
static const struct {
    const char *prefix, *name;
} levels[LOG_LEVEL_COUNT] = {
    [LOG_LEVEL_ERROR] = {"<3>", "error"},
    [LOG_LEVEL_WARN] = {"<4>", "warning"},
    [LOG_LEVEL_INFO] = {"<6>", "info"},
    [LOG_LEVEL_DEBUG] = {"<7>", "debug"},
};

static void sink(enum log_level level, const char *msg, void *userdata) {
    if ((int)level > atomic_load(&max_level) || level >= LOG_LEVEL_COUNT) return;
    /* One fprintf per line so concurrent threads do not interleave within a line. */
    if (atomic_load(&journal)) fprintf(stderr, "%s%s\n", levels[level].prefix, msg);
    else fprintf(stderr, "warmd: %s: %s\n", levels[level].name, msg);
}

static void grpc_sink(gpr_log_func_args *a) {
    enum log_level l = a->severity == GPR_LOG_SEVERITY_ERROR  ? LOG_LEVEL_ERROR
                       : a->severity == GPR_LOG_SEVERITY_INFO ? LOG_LEVEL_INFO
                                                              : LOG_LEVEL_DEBUG;
    const char *file = strrchr(a->file, '/');
    log_msg(l, "grpc: %s (%s:%d)", a->message, file ? file + 1 : a->file, a->line);
}

/* True when stderr is the stream JOURNAL_STREAM names ("dev:ino"). */
static bool stderr_is_journal(void) {
    const char *e = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0) return false;
    return st.st_dev == dev && st.st_ino == ino;
}

void daemon_log_init(enum log_level level) {
    atomic_store(&max_level, level);
    atomic_store(&journal, stderr_is_journal());
    setvbuf(stderr, NULL, _IOLBF, 0);
    log_set_sink(sink, NULL);
    gpr_set_log_function(grpc_sink);
}

void daemon_log_set_level(enum log_level level) { atomic_store(&max_level, level); }
