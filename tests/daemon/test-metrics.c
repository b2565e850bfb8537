/* The per-namespace counters of daemon/metrics: a bounded table (the first METRICS_NS_MAX
 * namespaces get a row, the rest share the overflow row, totals are kept), concurrent
 * adders never name two rows alike, label values are escaped, and what a non-admin's
 * scrape shows: the public rows and the namespaces asked for, nothing else; and which
 * namespaces a caller may see (cache_namespaces_visible). */
#include "test.h"

#include "daemon/cache.h"
#include "daemon/config.h"
#include "daemon/metrics.h"

#include <pthread.h>

static struct metrics m; /* ~200 KiB: static, not on a test's stack */

static const char *const row_names[METRIC_COUNT] = {
#define X(id, kind, name, help) [METRIC_##id] = name,
    METRICS_TABLE(X)
#undef X
};

static void reset(void) {
    memset(&m, 0, sizeof m);
}

static void add(const char *ns, uint64_t tokens) {
    uint64_t v[METRIC_NS_COUNT] = {[METRIC_NS_REQUESTS] = 1, [METRIC_NS_TOKENS_IN] = tokens};
    metrics_ns_add(&m, ns, v);
}

static uint64_t get(const char *ns, enum metric_ns_id id) {
    uint64_t v[METRIC_NS_COUNT];
    metrics_ns_get(&m, ns, v);
    return v[id];
}

/* Counts the lines of text that contain needle. */
static size_t count_lines(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)MIN(len, sizeof buf - 1), line);
        n += strstr(buf, needle) != NULL;
        line += len + (end ? 1 : 0);
    }
    return n;
}

TEST(rows_and_overflow) {
    reset();
    enum { N = METRICS_NS_MAX + 76 };
    char name[64];
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "uid:%d", 1000 + i);
        add(name, (uint64_t)i + 1);
        total += (uint64_t)i + 1;
    }
    /* again: the same rows, not new ones */
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "uid:%d", 1000 + i);
        add(name, 5);
        total += 5;
    }
    size_t named = 0;
    uint64_t sum = 0, requests = 0;
    for (size_t i = 0; i < METRICS_NS_MAX; i++) {
        if (atomic_load(&m.ns[i].state) != 2) continue;
        named++;
        sum += atomic_load(&m.ns[i].v[METRIC_NS_TOKENS_IN]);
        requests += atomic_load(&m.ns[i].v[METRIC_NS_REQUESTS]);
    }
    ASSERT_EQ(named, (size_t)METRICS_NS_MAX);
    uint64_t over = atomic_load(&m.ns_overflow[METRIC_NS_TOKENS_IN]);
    ASSERT_EQ(atomic_load(&m.ns_overflow[METRIC_NS_REQUESTS]), (uint64_t)(N - METRICS_NS_MAX));
    ASSERT_EQ(requests, (uint64_t)METRICS_NS_MAX + 10);
    ASSERT_EQ(sum + over, total);
    ASSERT_EQ(get("uid:1000", METRIC_NS_TOKENS_IN), 1 + 5);
    ASSERT_EQ(get("uid:1000", METRIC_NS_REQUESTS), 2);
    ASSERT_EQ(get("uid:999999", METRIC_NS_TOKENS_IN), 0); /* never counted */
    /* the last namespaces went to the overflow row: no row of their own */
    snprintf(name, sizeof name, "uid:%d", 1000 + N - 1);
    ASSERT_EQ(get(name, METRIC_NS_REQUESTS), 0);
    /* a name too long for a row, and the empty name, count in the overflow row only */
    char huge[METRICS_NS_NAME_MAX + 8];
    memset(huge, 'x', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    reset();
    add(huge, 7);
    add("", 3);
    ASSERT_EQ(atomic_load(&m.ns_overflow[METRIC_NS_TOKENS_IN]), 10);
    ASSERT_EQ(get(huge, METRIC_NS_TOKENS_IN), 0);
}

struct adder {
    int first;
};

static void *adder_run(void *arg) {
    const struct adder *a = arg;
    char name[32];
    for (int round = 0; round < 4; round++)
        for (int i = 0; i < 300; i++) {
            snprintf(name, sizeof name, "ns-%d", (a->first + i) % 400);
            add(name, 1);
        }
    return NULL;
}

TEST(concurrent_adders) {
    reset();
    enum { T = 4 };
    pthread_t th[T];
    struct adder a[T];
    for (int i = 0; i < T; i++) {
        a[i].first = i * 100;
        ASSERT_EQ(pthread_create(&th[i], NULL, adder_run, &a[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    /* 400 names, each in exactly one row; every add counted */
    size_t named = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < METRICS_NS_MAX; i++) {
        if (atomic_load(&m.ns[i].state) != 2) continue;
        named++;
        sum += atomic_load(&m.ns[i].v[METRIC_NS_REQUESTS]);
        for (size_t k = i + 1; k < METRICS_NS_MAX; k++)
            if (atomic_load(&m.ns[k].state) == 2)
                ASSERT_TRUE(strcmp(m.ns[i].name, m.ns[k].name) != 0);
    }
    ASSERT_EQ(named, 400);
    ASSERT_EQ(sum, (uint64_t)T * 4 * 300);
    ASSERT_EQ(atomic_load(&m.ns_overflow[METRIC_NS_REQUESTS]), 0);
}

TEST(admin_and_scoped_text) {
    reset();
    metrics_set(&m, METRIC_MODELS_LOADED, 2);
    metrics_add(&m, METRIC_TOKENS_STORE, 314);
    metrics_add(&m, METRIC_CONN_ACCEPTED, 9);
    metrics_rpc_started(&m, 0);
    uint64_t v[METRIC_NS_COUNT] = {[METRIC_NS_TOKENS_STORE] = 314, [METRIC_NS_CACHE_HITS] = 1};
    metrics_ns_add(&m, "uid:1001", v);
    add("uid:1002", 40);
    add("we\"ird\\ns\nname", 1);

    /* an admin: the totals, every namespace, the overflow row and the table's fill */
    const char *names[] = {"GetInfo"};
    char *text = NULL;
    ASSERT_OK(metrics_render(&m, names, 1, 0, &text));
    ASSERT_TRUE(strstr(text, "\nwarmd_prompt_tokens_store_total 314\n") != NULL);
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_prompt_tokens_store_total"
                             "{namespace=\"uid:1001\"} 314\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_prompt_tokens_total{namespace=\"uid:1002\"} 40\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_requests_total"
                             "{namespace=\"we\\\"ird\\\\ns\\nname\"} 1\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_cache_hits_total{namespace=\"\"} 0\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespaces_tracked 3\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_rpc_requests_total{method=\"GetInfo\"} 1\n") != NULL);
    ASSERT_EQ(count_lines(text, "# TYPE warmd_namespace_cache_hits_total counter"), 1);
    free(text);

    /* uid 1002: its own rows and the public ones; nothing of uid 1001, no totals */
    const char *mine[] = {"uid:1002", "team"};
    ASSERT_OK(metrics_render_scoped(&m, mine, 2, 1000000, &text));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_prompt_tokens_total{namespace=\"uid:1002\"} 40\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_cache_hits_total{namespace=\"uid:1002\"} 0\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_namespace_cache_hits_total{namespace=\"team\"} 0\n"));
    ASSERT_TRUE(strstr(text, "\nwarmd_models_loaded 2\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_uptime_seconds 1.000\n") != NULL);
    ASSERT_EQ(count_lines(text, "uid:1001"), 0);
    ASSERT_EQ(count_lines(text, "314"), 0);
    ASSERT_EQ(count_lines(text, "ird"), 0);
    ASSERT_EQ(count_lines(text, "namespace=\"\""), 0);
    ASSERT_EQ(count_lines(text, "warmd_prompt_tokens_store_total"), 0);
    ASSERT_EQ(count_lines(text, "warmd_connections_accepted_total"), 0);
    ASSERT_EQ(count_lines(text, "warmd_rpc_"), 0);
    ASSERT_EQ(count_lines(text, "warmd_namespaces_tracked"), 0);
    /* every sample line is a public row or a namespace row */
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (*line != '#') {
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)MIN(len, sizeof buf - 1), line);
            buf[strcspn(buf, " {")] = 0; /* the sample's name */
            bool ok = strncmp(buf, "warmd_namespace_", 16) == 0 ||
                      strcmp(buf, "warmd_uptime_seconds") == 0;
            for (int id = 0; id < METRIC_COUNT && !ok; id++)
                ok = metrics_row_public((enum metric_id)id) && strcmp(buf, row_names[id]) == 0;
            if (!ok) fprintf(stderr, "not public: %s\n", buf);
            ASSERT_TRUE(ok);
        }
        line += len + (end ? 1 : 0);
    }
    free(text);
    ASSERT_TRUE(metrics_row_public(METRIC_MODELS_LOADED));
    ASSERT_TRUE(!metrics_row_public(METRIC_STREAMS_ACTIVE));
    ASSERT_TRUE(!metrics_row_public(METRIC_CACHE_HITS));
    ASSERT_TRUE(!metrics_row_public(METRIC_COUNT));
}

TEST(visible_namespaces) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK_D(config_init(&c, &d), &d);
    /* gid 0 is "root" in every group database; "nosuch..." matches nobody */
    snprintf(c.cache_shared_namespaces, sizeof c.cache_shared_namespaces,
             "team:root; lab: nosuchgroup4242; team:0; ops:4242,root; uid:7:root");
    char ns[CACHE_NS_VISIBLE_MAX][CACHE_NS_MAX];
    struct peer p = {.uid = 4242424, .gid = 0};
    size_t n = cache_namespaces_visible(&c, &p, ns, CACHE_NS_VISIBLE_MAX);
    ASSERT_EQ(n, 3);
    ASSERT_STREQ(ns[0], "uid:4242424");
    ASSERT_STREQ(ns[1], "team");
    ASSERT_STREQ(ns[2], "ops");
    /* outside the groups: one's own namespace only; a cap of 1 keeps just that */
    p.gid = 4242424;
    ASSERT_EQ(cache_namespaces_visible(&c, &p, ns, CACHE_NS_VISIBLE_MAX), 1);
    ASSERT_STREQ(ns[0], "uid:4242424");
    p.gid = 0;
    ASSERT_EQ(cache_namespaces_visible(&c, &p, ns, 1), 1);
}

TEST_MAIN(T(rows_and_overflow), T(concurrent_adders), T(admin_and_scoped_text),
          T(visible_namespaces))
