/* cache — the daemon's side of the prompt store that is neither the model loop nor the
 * writer thread: which namespace a request may use, what a refusal is called, and the
 * store's and the writer's counters mirrored into the metrics (DESIGN.md §4, §5).
 *
 * Namespaces. A caller's own namespace is "uid:<uid>". A request may name a shared
 * namespace that config `cache_shared_namespaces` lists ("NAME:GROUP[,GROUP...]", entries
 * separated by ';'): allowed when one of the groups is the caller's primary group or one of
 * its supplementary groups (from the group database, as initgroups sees them). Admins may
 * name any namespace. Everything else is refused, so one user's prompts are never served
 * to (or timed by) another user.
 *
 * Thread-safe: no state of its own; the config is read-only after startup. */
#pragma once

#include "base/base.h"
#include "daemon/config.h"
#include "daemon/listener.h"
#include "daemon/metrics.h"
#include "daemon/runner.h"

struct daemon;

#define CACHE_NS_MAX 128 /* bytes of a namespace name, NUL included */
#define CACHE_NS_VISIBLE_MAX 32 /* namespaces listed by cache_namespaces_visible */
_Static_assert(CACHE_NS_MAX == METRICS_NS_NAME_MAX, "metrics rows hold any namespace name");

/* The short machine-readable name of a refusal code ("key_rotation", "state_version",
 * ...; "other" for a code without one) and its metrics index. */
const char *cache_reject_label(int code);
enum metric_reject cache_reject_index(int code);

/* True when the peer may use the shared namespace ns: ns is listed in shared (the
 * config string) with a group the peer's uid or primary gid belongs to. A malformed
 * entry never matches. */
bool cache_namespace_shared_ok(const char *shared, const struct peer *p, const char *ns);

/* The namespace a request uses: requested "" means the caller's own. 0 and ret filled,
 * or -EACCES (not the caller's, not a shared namespace open to its groups, not admin) /
 * -EINVAL (too long, empty name) with a message in d. */
int cache_namespace_resolve(const struct config *cfg, const struct peer *p,
                            const char *requested, char ret[CACHE_NS_MAX], struct err_detail *d);

/* Copies the store's counters (lookups, hits, misses, rejections by reason, evictions,
 * bytes) and the writer's (written, dropped, failed) into d->metrics; for each scrape. */
void cache_metrics_sync(struct daemon *d);

/* The namespaces whose figures the peer may see: its own ("uid:<uid>") first, then the
 * shared namespaces cfg opens to its groups, at most max (CACHE_NS_VISIBLE_MAX) in all;
 * returns how many it wrote to ret. */
size_t cache_namespaces_visible(const struct config *cfg, const struct peer *p,
                                char ret[][CACHE_NS_MAX], size_t max);

/* Counts a finished Generate/Chat request (its runner result) in the row of its store
 * namespace ns. Cache hit: prompt tokens came from the store; miss: the store was asked
 * (mode RUNNER_CACHE_USE, a store, more than cache_restore_min_tokens past RAM) and gave
 * nothing; a request that ended before its prompt was placed counts its tokens only. */
void cache_metrics_request(struct daemon *d, const char *ns, enum runner_cache mode,
                           const struct runner_result *res);
