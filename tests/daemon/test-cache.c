/* daemon/cache: namespace resolution (own, shared by group, admin, refused), the
 * cache_shared_namespaces syntax, refusal labels and their metrics rows. Group lookups
 * use the real group database: root's primary group (gid 0, "root") is always there. */
#include "test.h"

#include "daemon/cache.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static const struct peer root_peer = {.uid = 0, .gid = 0, .pid = 1, .admin = false};

TEST(shared_namespaces) {
    /* a group by name or number; spaces around entries and groups */
    ASSERT_EQ(cache_namespace_shared_ok("team:root", &root_peer, "team"), true);
    ASSERT_EQ(cache_namespace_shared_ok(" a:nosuchgroup-xyz ; team : 0 ", &root_peer, "team"), true);
    ASSERT_EQ(cache_namespace_shared_ok("team:nosuchgroup-xyz,root", &root_peer, "team"), true);
    /* not listed, another group, malformed, "uid:" names, empty */
    ASSERT_EQ(cache_namespace_shared_ok("team:root", &root_peer, "other"), false);
    ASSERT_EQ(cache_namespace_shared_ok("team:nosuchgroup-xyz", &root_peer, "team"), false);
    ASSERT_EQ(cache_namespace_shared_ok("team", &root_peer, "team"), false);
    ASSERT_EQ(cache_namespace_shared_ok("team:", &root_peer, "team"), false);
    ASSERT_EQ(cache_namespace_shared_ok("uid:5:root", &root_peer, "uid:5"), false);
    ASSERT_EQ(cache_namespace_shared_ok("", &root_peer, "team"), false);
    ASSERT_EQ(cache_namespace_shared_ok("team:root", &root_peer, ""), false);
    /* a member through a supplementary group only: uid 0 is not in gid 4242's list
     * unless the database says so; a primary gid that matches always is */
    struct peer p = {.uid = 4242424, .gid = 0};
    ASSERT_EQ(cache_namespace_shared_ok("team:root", &p, "team"), true);
    p.gid = 4242424;
    ASSERT_EQ(cache_namespace_shared_ok("team:root", &p, "team"), false);
}

TEST(namespace_resolve) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK_D(config_init(&c, &d), &d);
    snprintf(c.cache_shared_namespaces, sizeof c.cache_shared_namespaces, "team:root");
    char ns[CACHE_NS_MAX];
    struct peer p = {.uid = 1000, .gid = 1000};
    ASSERT_OK(cache_namespace_resolve(&c, &p, "", ns, &d));
    ASSERT_STREQ(ns, "uid:1000");
    ASSERT_OK(cache_namespace_resolve(&c, &p, "uid:1000", ns, &d));
    ASSERT_STREQ(ns, "uid:1000");
    ASSERT_ERR(cache_namespace_resolve(&c, &p, "uid:0", ns, &d), -EACCES);
    ASSERT_TRUE(strstr(d.msg, "uid 1000") != NULL);
    ASSERT_ERR(cache_namespace_resolve(&c, &p, "team", ns, &d), -EACCES);
    ASSERT_ERR(cache_namespace_resolve(&c, &p, "*", ns, &d), -EINVAL);
    char longname[200];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ASSERT_ERR(cache_namespace_resolve(&c, &p, longname, ns, &d), -EINVAL);
    /* a member of the shared group; an admin may name anything */
    p.gid = 0;
    ASSERT_OK(cache_namespace_resolve(&c, &p, "team", ns, &d));
    ASSERT_STREQ(ns, "team");
    p.gid = 1000;
    p.admin = true;
    ASSERT_OK(cache_namespace_resolve(&c, &p, "uid:0", ns, &d));
    ASSERT_STREQ(ns, "uid:0");
}

TEST(reject_labels) {
    ASSERT_STREQ(cache_reject_label(ERR_STATE_KEY_ROT), "key_rotation");
    ASSERT_STREQ(cache_reject_label(ERR_STATE_VALUE_ROT), "value_rotation");
    ASSERT_STREQ(cache_reject_label(ERR_STATE_VERSION), "state_version");
    ASSERT_STREQ(cache_reject_label(ERR_CHECKSUM), "checksum");
    ASSERT_STREQ(cache_reject_label(-ENOMEM), "other");
    ASSERT_EQ(cache_reject_index(ERR_STATE_KEY_ROT), METRIC_REJECT_KEY_ROTATION);
    ASSERT_EQ(cache_reject_index(ERR_STATE_CHECKSUM), METRIC_REJECT_CHECKSUM);
    ASSERT_EQ(cache_reject_index(12345), METRIC_REJECT_OTHER);
    /* the metrics text has one labelled row per reason */
    static struct metrics m;
    atomic_store(&m.cache_rejected[METRIC_REJECT_KEY_ROTATION], 3);
    char *text = NULL;
    ASSERT_OK(metrics_render(&m, NULL, 0, 0, &text));
    ASSERT_TRUE(strstr(text, "warmd_cache_rejections_total{reason=\"key_rotation\"} 3\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_cache_rejections_total{reason=\"state_version\"} 0\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_cache_writes_dropped_total 0\n") != NULL);
    free(text);
}

TEST_MAIN(T(shared_namespaces), T(namespace_resolve), T(reject_labels))
