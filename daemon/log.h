/* log — the daemon's log sink: levels, to stderr, with sd-daemon "<N>" priority prefixes
 * when stderr is the journal (JOURNAL_STREAM). Library code logs through base's log_msg
 * (debug only); the daemon logs at its boundaries with the macros below. gRPC's own
 * messages (gpr_log) are routed here too. */
#pragma once

#include "base/base.h"

/* Installs the sink for base's log_msg and gRPC's gpr_log; messages above level are
 * dropped. Call before grpc_init (gpr_set_log_function is safe at any time). */
void daemon_log_init(enum log_level level);
void daemon_log_set_level(enum log_level level);

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
