/* The daemon's config schema and parsers, the peer policy, model-name and directory
 * checks, the UTF-8 validator and the metrics rendering: everything of warmd that is
 * pure enough to test without a socket (the e2e tests cover the rest). */
#include "test.h"

#include "daemon/config.h"
#include "daemon/listener.h"
#include "daemon/metrics.h"
#include "daemon/registry.h"
#include "daemon/rpc-handlers.h"
#include "engine/engine.h"
#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static char *print_to_string(const struct config *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(c, f);
    fclose(f);
    return buf;
}

static const char *write_file(const char *name, const char *text) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

TEST(defaults) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK_D(config_init(&c, &d), &d);
    ASSERT_STREQ(c.socket, "/run/warmd.sock");
    ASSERT_EQ(c.threads, 0);
    ASSERT_EQ(c.ctx_size, 4096);
    ASSERT_EQ(c.cache_type_k, CONFIG_CACHE_TYPE_F16);
    ASSERT_TRUE(c.kv_rotation);
    ASSERT_EQ(c.keep_alive_usec, 5ull * 60 * 1000000);
    ASSERT_EQ(c.cache_max_bytes, 8ull << 30);
    ASSERT_EQ(c.max_request_bytes, 4ull << 20);
    ASSERT_EQ(c.allowed_uids.n, 0);
    ASSERT_TRUE(!c.admin_group.set);
    ASSERT_EQ(c.log_level, LOG_LEVEL_INFO);
    /* Every key has help text and a unique name. */
    for (size_t i = 0; i < config_n_keys; i++) {
        ASSERT_TRUE(config_keys[i].help && *config_keys[i].help);
        for (size_t k = i + 1; k < config_n_keys; k++)
            ASSERT_TRUE(strcmp(config_keys[i].name, config_keys[k].name) != 0);
    }
}

TEST(values) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&c, NULL));
    ASSERT_OK_D(config_set(&c, "cache-max-bytes", "512m", &d), &d);
    ASSERT_EQ(c.cache_max_bytes, 512ull << 20);
    ASSERT_OK_D(config_set(&c, "cache_max_bytes", "3GiB", &d), &d);
    ASSERT_EQ(c.cache_max_bytes, 3ull << 30);
    ASSERT_OK_D(config_set(&c, "keep_alive", "500ms", &d), &d);
    ASSERT_EQ(c.keep_alive_usec, 500000);
    ASSERT_OK_D(config_set(&c, "keep_alive", "90", &d), &d);
    ASSERT_EQ(c.keep_alive_usec, 90000000);
    ASSERT_OK_D(config_set(&c, "max_keep_alive", "2h", &d), &d);
    ASSERT_EQ(c.max_keep_alive_usec, 7200ull * 1000000);
    ASSERT_OK_D(config_set(&c, "kv_rotation", "off", &d), &d);
    ASSERT_TRUE(!c.kv_rotation);
    ASSERT_OK_D(config_set(&c, "cache_type_v", "Q8_0", &d), &d);
    ASSERT_EQ(c.cache_type_v, CONFIG_CACHE_TYPE_Q8_0);
    ASSERT_OK_D(config_set(&c, "allowed_uids", "0, 1000,1001", &d), &d);
    ASSERT_EQ(c.allowed_uids.n, 3);
    ASSERT_EQ(c.allowed_uids.ids[2], 1001);
    ASSERT_OK_D(config_set(&c, "allowed_uids", "root", &d), &d);
    ASSERT_EQ(c.allowed_uids.n, 1);
    ASSERT_EQ(c.allowed_uids.ids[0], 0);
    ASSERT_OK_D(config_set(&c, "admin_group", "0", &d), &d);
    ASSERT_TRUE(c.admin_group.set && c.admin_group.gid == 0);
    ASSERT_OK_D(config_set(&c, "admin_group", "", &d), &d);
    ASSERT_TRUE(!c.admin_group.set);

    /* Errors name the key and leave the value unchanged. */
    uint32_t threads = c.threads;
    ASSERT_ERR(config_set(&c, "threads", "-1", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "threads") != NULL);
    ASSERT_ERR(config_set(&c, "threads", "99999", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "out of range [0, 1024]") != NULL);
    ASSERT_ERR(config_set(&c, "threads", "99999999999999999999999", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "threads", "4x", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "threads", "", &d), ERR_CONFIG);
    ASSERT_EQ(c.threads, threads);
    ASSERT_ERR(config_set(&c, "ctx_size", "8", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "cache_max_bytes", "1.5G", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "cache_max_bytes", "99999999999T", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "keep_alive", "5 parsecs", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "kv_rotation", "maybe", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "cache_type_k", "q3_k", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "q8_0") != NULL);
    ASSERT_ERR(config_set(&c, "models_dir", "relative/dir", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "socket", "@abstract", &d), ERR_CONFIG);
    char longpath[200];
    memset(longpath, 'a', sizeof longpath);
    longpath[0] = '/';
    longpath[199] = 0;
    ASSERT_ERR(config_set(&c, "socket", longpath, &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "allowed_uids", "no-such-user-warmd-test", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "unknown user 'no-such-user-warmd-test'") != NULL);
    ASSERT_ERR(config_set(&c, "admin_group", "no-such-group-warmd-test", &d), ERR_CONFIG);
    ASSERT_ERR(config_set(&c, "no_such_key", "1", &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "unknown key 'no_such_key'");
}

TEST(file) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&c, NULL));
    const char *good = write_file("good.conf",
                                  "# warmd test config\n"
                                  "\n"
                                  "models_dir = /srv/models\n"
                                  "  threads=3  \n"
                                  "socket = \"/tmp/warmd test.sock\"\n"
                                  "cache_type_k = q8_0\n");
    ASSERT_TRUE(good != NULL);
    ASSERT_OK_D(config_load_file(&c, good, &d), &d);
    ASSERT_STREQ(c.models_dir, "/srv/models");
    ASSERT_EQ(c.threads, 3);
    ASSERT_STREQ(c.socket, "/tmp/warmd test.sock");
    ASSERT_EQ(c.cache_type_k, CONFIG_CACHE_TYPE_Q8_0);

    /* Errors carry file:line, and a failing file changes nothing. */
    const char *bad = write_file("bad.conf", "threads = 5\n# comment\nfrobnicate = 1\n");
    ASSERT_ERR(config_load_file(&c, bad, &d), ERR_CONFIG);
    char want[4200];
    snprintf(want, sizeof want, "%s:3: unknown key 'frobnicate'", bad);
    ASSERT_STREQ(d.msg, want);
    ASSERT_EQ(c.threads, 3);
    bad = write_file("bad2.conf", "\n\nctx_size = 1\n");
    ASSERT_ERR(config_load_file(&c, bad, &d), ERR_CONFIG);
    snprintf(want, sizeof want, "%s:3: ctx_size: '1' out of range [16, 1048576]", bad);
    ASSERT_STREQ(d.msg, want);
    bad = write_file("bad3.conf", "threads 4\n");
    ASSERT_ERR(config_load_file(&c, bad, &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, ":1: expected 'key = value'") != NULL);
    bad = write_file("bad4.conf", "models-dir = /x\n");  /* files use the underscore form */
    ASSERT_ERR(config_load_file(&c, bad, &d), ERR_CONFIG);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/none.conf", test_tmpdir());
    ASSERT_ERR(config_load_file(&c, missing, &d), -ENOENT);
}

TEST(print_roundtrip) {
    struct config a, b;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&a, NULL));
    ASSERT_OK(config_set(&a, "keep_alive", "1500ms", NULL));
    ASSERT_OK(config_set(&a, "allowed_uids", "0,7", NULL));
    ASSERT_OK(config_set(&a, "admin_group", "0", NULL));
    ASSERT_OK(config_set(&a, "memory_budget", "3000", NULL));
    char *text = print_to_string(&a);
    ASSERT_TRUE(strstr(text, "keep_alive = 1500ms\n") != NULL);
    ASSERT_TRUE(strstr(text, "cache_max_bytes = 8G\n") != NULL);
    ASSERT_TRUE(strstr(text, "allowed_uids = 0,7\n") != NULL);
    const char *path = write_file("printed.conf", text);
    ASSERT_OK(config_init(&b, NULL));
    ASSERT_OK_D(config_load_file(&b, path, &d), &d);
    char *again = print_to_string(&b);
    ASSERT_STREQ(again, text);
    free(again);
    free(text);
}

TEST(cmdline) {
    const char *file = write_file("cmd.conf", "threads = 2\nctx_size = 512\n");
    char *argv[] = {"warmd", "--config", (char *)file, "--threads=7", "--models-dir", "/m",
                    "--print-config", NULL};
    struct config c;
    struct config_cmdline cl;
    struct err_detail d = {0};
    ASSERT_OK_D(config_parse_args(&c, 7, argv, &cl, &d), &d);
    ASSERT_TRUE(cl.print_config && !cl.help);
    ASSERT_EQ(c.threads, 7);      /* the command line wins over the file */
    ASSERT_EQ(c.ctx_size, 512);
    ASSERT_STREQ(c.models_dir, "/m");

    char *bad[] = {"warmd", "--config", (char *)file, "--no-such-thing=1", NULL};
    ASSERT_ERR(config_parse_args(&c, 4, bad, &cl, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "unknown option '--no-such-thing'");
    char *badval[] = {"warmd", "--config", (char *)file, "--parallel=0", NULL};
    ASSERT_ERR(config_parse_args(&c, 4, badval, &cl, &d), ERR_CONFIG);
    ASSERT_TRUE(strncmp(d.msg, "--parallel: ", 12) == 0);
    char *cross[] = {"warmd", "--config", (char *)file, "--keep-alive=2h", NULL};
    ASSERT_ERR(config_parse_args(&c, 4, cross, &cl, &d), ERR_CONFIG);
    char *stray[] = {"warmd", "oops", NULL};
    ASSERT_ERR(config_parse_args(&c, 2, stray, &cl, &d), ERR_CONFIG);
    char *help[] = {"warmd", "--help", NULL};
    ASSERT_OK(config_parse_args(&c, 2, help, &cl, &d));
    ASSERT_TRUE(cl.help);
}

/* Drop-ins: FILE.d/NAME.conf after FILE, in byte order of NAME (so "9-" sorts after
 * "20-"), hidden and non-.conf names ignored, the command line still last. */
TEST(dropins) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/main.conf.d", test_tmpdir());
    ASSERT_OK(mkdir(dir, 0755) == 0 ? 0 : -errno);
    char *main_conf = strdup(write_file("main.conf", "threads = 2\nctx_size = 512\n"));
    ASSERT_TRUE(main_conf != NULL);
    ASSERT_TRUE(write_file("main.conf.d/10-a.conf", "threads = 3\nparallel = 8\n") != NULL);
    ASSERT_TRUE(write_file("main.conf.d/20-b.conf", "threads = 5\n") != NULL);
    ASSERT_TRUE(write_file("main.conf.d/9-z.conf", "parallel = 2\n") != NULL);
    ASSERT_TRUE(write_file("main.conf.d/.hidden.conf", "threads = 99\n") != NULL);
    ASSERT_TRUE(write_file("main.conf.d/notes.txt", "threads = 98\n") != NULL);
    ASSERT_TRUE(write_file("main.conf.d/20-b.conf.dpkg-old", "threads = 97\n") != NULL);

    struct config c;
    struct config_cmdline cl;
    struct err_detail d = {0};
    char *argv[] = {"warmd", "--config", main_conf, NULL};
    ASSERT_OK_D(config_parse_args(&c, 3, argv, &cl, &d), &d);
    ASSERT_EQ(c.ctx_size, 512);   /* the main file, not overridden */
    ASSERT_EQ(c.threads, 5);      /* 20-b.conf after 10-a.conf after the main file */
    ASSERT_EQ(c.parallel, 2);     /* 9-z.conf after 10-a.conf */
    char *over[] = {"warmd", "--config", main_conf, "--threads=7", NULL};
    ASSERT_OK_D(config_parse_args(&c, 4, over, &cl, &d), &d);
    ASSERT_EQ(c.threads, 7);

    /* A bad drop-in is an error naming its file and line. */
    const char *bad = write_file("main.conf.d/30-bad.conf", "\nfrobnicate = 1\n");
    ASSERT_TRUE(bad != NULL);
    char want[8192];
    snprintf(want, sizeof want, "%s:2: unknown key 'frobnicate'", bad);
    ASSERT_ERR(config_parse_args(&c, 3, argv, &cl, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, want);
    ASSERT_OK(unlink(bad) == 0 ? 0 : -errno);

    /* A file without a drop-in directory is fine (--config /dev/null looks for
     * /dev/null.d); a drop-in "directory" that is a file is an error. */
    char *devnull[] = {"warmd", "--config", "/dev/null", NULL};
    ASSERT_OK_D(config_parse_args(&c, 3, devnull, &cl, &d), &d);
    ASSERT_EQ(c.threads, 0);
    char *lone = strdup(write_file("lone.conf", "threads = 4\n"));
    ASSERT_TRUE(write_file("lone.conf.d", "threads = 1\n") != NULL);
    char *notdir[] = {"warmd", "--config", lone, NULL};
    ASSERT_ERR(config_parse_args(&c, 3, notdir, &cl, &d), -ENOTDIR);
    ASSERT_TRUE(strstr(d.msg, "lone.conf.d: Not a directory") != NULL);
    free(lone);
    free(main_conf);
}

/* Every error of a configuration is reported with its file and line, not only the first:
 * within one file, and across the main file and its drop-ins. */
TEST(many_errors) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&c, NULL));
    const char *path = write_file("three.conf", "threads = 2\n"
                                                "frobnicate = 1\n"
                                                "# fine\n"
                                                "ctx_size = 1\n"
                                                "parallel 3\n"
                                                "parallel = 3\n");
    ASSERT_TRUE(path != NULL);
    char want[16384];
    snprintf(want, sizeof want,
             "%s:2: unknown key 'frobnicate'\n"
             "%s:4: ctx_size: '1' out of range [16, 1048576]\n"
             "%s:5: expected 'key = value'", path, path, path);
    ASSERT_ERR(config_load_file(&c, path, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, want);
    ASSERT_EQ(c.threads, 0);      /* a failing file changes nothing */
    ASSERT_EQ(c.parallel, 4);

    /* Main file and drop-in together. */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/both.conf.d", test_tmpdir());
    ASSERT_OK(mkdir(dir, 0755) == 0 ? 0 : -errno);
    char *both = strdup(write_file("both.conf", "threads = x\n"));
    const char *drop = write_file("both.conf.d/50-local.conf", "ok = no\n");
    ASSERT_TRUE(both != NULL && drop != NULL);
    snprintf(want, sizeof want,
             "%s:1: threads: 'x' is not a non-negative integer\n"
             "%s:1: unknown key 'ok'", both, drop);
    struct config_cmdline cl;
    char *argv[] = {"warmd", "--config", both, NULL};
    ASSERT_ERR(config_parse_args(&c, 3, argv, &cl, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, want);
    free(both);

    /* More errors than the message holds: whole lines while they fit, then the count of
     * the rest; shown + rest = every bad line. */
    char text[100 * 16] = "";
    for (int i = 0; i < 100; i++) strcat(text, "nokey\n");
    path = write_file("hundred.conf", text);
    ASSERT_ERR(config_load_file(&c, path, &d), ERR_CONFIG);
    unsigned shown = 0, rest = 0;
    for (const char *p = d.msg; (p = strstr(p, ": expected 'key = value'")); p++) shown++;
    const char *tail = strstr(d.msg, "\n(and ");
    ASSERT_TRUE(tail != NULL);
    ASSERT_EQ(sscanf(tail, "\n(and %u more errors)", &rest), 1);
    ASSERT_TRUE(shown >= 2);
    ASSERT_EQ(shown + rest, 100);
    snprintf(want, sizeof want, "%s:%u: expected 'key = value'\n(and", path, shown);
    ASSERT_TRUE(strstr(d.msg, want) != NULL);   /* the lines shown are the first ones */
}

/* The settings with a syntax of their own are parsed when read, by the parser their user
 * runs later: a typo in devices or tensor_split is an error naming the file and line at
 * start (it was first seen when a model loaded), as is one in device, preload,
 * default_model or cache_shared_namespaces; and devices, split and tensor_split are
 * checked together once every file and option is in. */
TEST(structured_values) {
    struct config c;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&c, NULL));
    ASSERT_STREQ(c.devices, "cpu");
    ASSERT_EQ(c.cache_chunk_tokens, ENGINE_CHUNK_TOKENS);
    ASSERT_OK_D(config_set(&c, "devices", "cuda:0,cuda:0,cuda:1", &d), &d);
    ASSERT_OK_D(config_set(&c, "devices", "", &d), &d);
    ASSERT_OK_D(config_set(&c, "devices", "cpu,cpu", &d), &d);
    ASSERT_OK_D(config_set(&c, "tensor_split", "", &d), &d);
    ASSERT_OK_D(config_set(&c, "tensor_split", "3,1", &d), &d);
    ASSERT_OK_D(config_set(&c, "device", "cuda:3", &d), &d); /* which GPUs exist: at load */
    ASSERT_OK_D(config_set(&c, "preload", "a, b.c\tQ-1,", &d), &d);
    ASSERT_OK_D(config_set(&c, "default_model", "stories", &d), &d);
    ASSERT_OK_D(config_set(&c, "cache_shared_namespaces", " team : root, 0 ; a:b:nosuchgroup ;",
                           &d), &d);

    /* Typos name the key and the entry, and leave the value as it was. */
    ASSERT_ERR(config_set(&c, "devices", "cpu,cpux", &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "devices: device \"cpux\" in \"cpu,cpux\" is not cpu or cuda:N");
    ASSERT_ERR(config_set(&c, "devices", "cpu,cuda:0", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "devices: devices \"cpu,cuda:0\" mix CPU partitions") == d.msg);
    ASSERT_STREQ(c.devices, "cpu,cpu");
    ASSERT_ERR(config_set(&c, "tensor_split", "3;1", &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "tensor_split: tensor split \"3;1\": share 0 is not a number >= 0");
    ASSERT_ERR(config_set(&c, "tensor_split", "1,-2", &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "tensor_split: tensor split \"1,-2\": share 1 is not a number >= 0");
    ASSERT_STREQ(c.tensor_split, "3,1");
    ASSERT_ERR(config_set(&c, "device", "gpu", &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "device: device \"gpu\" is not auto, cpu or cuda:N");
    ASSERT_STREQ(c.device, "cuda:3");
    ASSERT_ERR(config_set(&c, "preload", "a;b", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "preload: 'a;b': bad model name: byte 1 is not allowed") == d.msg);
    ASSERT_ERR(config_set(&c, "default_model", "my model", &d), ERR_CONFIG);
    ASSERT_TRUE(strstr(d.msg, "default_model: bad model name: byte 2") == d.msg);
    static const char *const bad_ns[][2] = {
        {"team", "'team' is not NAME:GROUP[,GROUP...]"},
        {"x:y; team: ,", "'team:,' is not NAME:GROUP[,GROUP...]"},
        {" :root", "':root' is not NAME:GROUP[,GROUP...]"},
        {"uid:5:root", "'uid:5': a user's own namespace is never shared"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad_ns); i++) {
        char want[256];
        snprintf(want, sizeof want, "cache_shared_namespaces: %s", bad_ns[i][1]);
        ASSERT_ERR(config_set(&c, "cache_shared_namespaces", bad_ns[i][0], &d), ERR_CONFIG);
        ASSERT_STREQ(d.msg, want);
    }

    /* In a file: FILE:LINE, every bad line. */
    const char *path = write_file("typo.conf", "split = tensor\n"
                                               "devices = cpu,cpu\n"
                                               "tensor_split = 3,,1\n"
                                               "devices = cpu.cpu\n");
    ASSERT_TRUE(path != NULL);
    char want[16384];
    snprintf(want, sizeof want,
             "%s:3: tensor_split: tensor split \"3,,1\": share 1 is not a number >= 0\n"
             "%s:4: devices: device \"cpu.cpu\" in \"cpu.cpu\" is not cpu or cuda:N", path, path);
    ASSERT_ERR(config_load_file(&c, path, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, want);

    /* Together, after the files and the options: more than one device needs a split. */
    struct config_cmdline cl;
    char *file = strdup(write_file("split.conf", "devices = cpu,cpu\ntensor_split = 1,3\n"));
    ASSERT_TRUE(file != NULL);
    char *nosplit[] = {"warmd", "--config", file, NULL};
    ASSERT_ERR(config_parse_args(&c, 3, nosplit, &cl, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "2 devices need split = tensor (split = none takes one)");
    char *split[] = {"warmd", "--config", file, "--split=tensor", NULL};
    ASSERT_OK_D(config_parse_args(&c, 4, split, &cl, &d), &d);
    ASSERT_STREQ(c.devices, "cpu,cpu");
    char *lone[] = {"warmd", "--config", file, "--devices=cuda:1", NULL};
    ASSERT_ERR(config_parse_args(&c, 4, lone, &cl, &d), ERR_CONFIG);
    ASSERT_STREQ(d.msg, "devices = cuda:1 alone is not a split: use device = cuda:1");
    free(file);
}

TEST(env_rotation) {
    struct config c;
    ASSERT_OK(config_init(&c, NULL));
    setenv("WARM_ATTN_ROT_DISABLE", "0", 1);
    config_apply_env(&c);
    ASSERT_TRUE(c.kv_rotation);
    setenv("WARM_ATTN_ROT_DISABLE", "1", 1);
    config_apply_env(&c);
    ASSERT_TRUE(!c.kv_rotation);
    unsetenv("WARM_ATTN_ROT_DISABLE");
}

TEST(policy) {
    struct config c;
    struct policy p;
    bool admin = true;
    struct err_detail d = {0};
    ASSERT_OK(config_init(&c, NULL));
    listener_policy_from_config(&p, &c);
    p.self_uid = 999;
    /* Empty lists: anyone who can open the socket; admin only root and the daemon. */
    ASSERT_OK(listener_policy_check(&p, 1000, 1000, NULL, 0, &admin, &d));
    ASSERT_TRUE(!admin);
    ASSERT_OK(listener_policy_check(&p, 0, 0, NULL, 0, &admin, &d));
    ASSERT_TRUE(admin);
    ASSERT_OK(listener_policy_check(&p, 999, 5, NULL, 0, &admin, &d));
    ASSERT_TRUE(admin);

    ASSERT_OK(config_set(&c, "allowed_uids", "1000", NULL));
    ASSERT_OK(config_set(&c, "allowed_groups", "4242", NULL));
    ASSERT_OK(config_set(&c, "admin_group", "4343", NULL));
    listener_policy_from_config(&p, &c);
    p.self_uid = 999;
    ASSERT_OK(listener_policy_check(&p, 1000, 1000, NULL, 0, &admin, &d));
    ASSERT_TRUE(!admin);
    ASSERT_ERR(listener_policy_check(&p, 1001, 1001, NULL, 0, &admin, &d), -EACCES);
    ASSERT_TRUE(strstr(d.msg, "uid 1001") != NULL);
    uint32_t groups[] = {10, 4242};
    ASSERT_OK(listener_policy_check(&p, 1001, 1001, groups, 2, &admin, &d));   /* supplementary */
    ASSERT_OK(listener_policy_check(&p, 1002, 4242, NULL, 0, &admin, &d));     /* primary */
    uint32_t admins[] = {4343};
    ASSERT_OK(listener_policy_check(&p, 1000, 1000, admins, 1, &admin, &d));
    ASSERT_TRUE(admin);
    /* Admin membership does not admit a peer the allow lists refuse. */
    ASSERT_ERR(listener_policy_check(&p, 1003, 1003, admins, 1, &admin, &d), -EACCES);
    ASSERT_OK(listener_policy_check(&p, 0, 0, NULL, 0, &admin, &d));            /* root */
}

TEST(model_names) {
    static const char *const good[] = {"stories260K", "qwen3-0.6b", "a", "Llama_3.2-1B-Q4_K_M"};
    static const char *const bad[] = {"", "../etc/passwd", "/dev/zero", ".hidden", "-x", "a/b",
                                      "/proc/self/fd/3", "a b", "caf\xc3\xa9", "x\n", ".."};
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) ASSERT_OK(registry_name_check(good[i], NULL));
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        ASSERT_ERR(registry_name_check(bad[i], NULL), ERR_INVALID);
    char longname[200];
    memset(longname, 'a', sizeof longname);
    longname[129] = 0;
    ASSERT_ERR(registry_name_check(longname, NULL), ERR_INVALID);
    longname[128] = 0;
    ASSERT_OK(registry_name_check(longname, NULL));
}

/* Copies the file at src to path (a real model for the registry's checks). */
static int copy_file(const char *src, const char *path) {
    FILE *in = fopen(src, "rb"), *out = fopen(path, "wb");
    char buf[65536];
    size_t n;
    int r = in && out ? 0 : -errno;
    while (r == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) r = -EIO;
    if (in) fclose(in);
    if (out && fclose(out) != 0 && r == 0) r = -EIO;
    return r;
}

TEST(model_dir) {
    const char *model = test_shared_path("stories260K.gguf");
    if (!model) SKIP("../shared/models/stories260K.gguf is absent");
    char dir[4096], outside[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/models", test_tmpdir());
    snprintf(outside, sizeof outside, "%s/outside.gguf", test_tmpdir());
    ASSERT_OK(mkdir(dir, 0755) == 0 ? 0 : -errno);
    snprintf(path, sizeof path, "%s/good.gguf", dir);
    ASSERT_OK(copy_file(model, path));
    snprintf(path, sizeof path, "%s/Upper.GGUF", dir);
    ASSERT_OK(copy_file(model, path));
    ASSERT_TRUE(write_file("models/fake.gguf", "GGUF rest of a model") != NULL);
    ASSERT_TRUE(write_file("models/notgguf.gguf", "NOPE") != NULL);
    ASSERT_TRUE(write_file("models/readme.txt", "GGUF") != NULL);
    ASSERT_TRUE(write_file("models/bad name.gguf", "GGUF") != NULL);
    ASSERT_OK(copy_file(model, outside));
    snprintf(path, sizeof path, "%s/linked.gguf", dir);
    ASSERT_OK(symlink(outside, path) == 0 ? 0 : -errno); /* ours: followed out of the dir */
    snprintf(path, sizeof path, "%s/alias.gguf", dir);
    ASSERT_OK(symlink("good.gguf", path) == 0 ? 0 : -errno);
    snprintf(path, sizeof path, "%s/null.gguf", dir);
    ASSERT_OK(symlink("/dev/zero", path) == 0 ? 0 : -errno);
    snprintf(path, sizeof path, "%s/magic.gguf", dir);
    ASSERT_OK(symlink("/proc/self/fd/0", path) == 0 ? 0 : -errno);
    snprintf(path, sizeof path, "%s/fifo.gguf", dir);
    ASSERT_OK(mkfifo(path, 0644) == 0 ? 0 : -errno);
    snprintf(path, sizeof path, "%s/dir.gguf", dir);
    ASSERT_OK(mkdir(path, 0755) == 0 ? 0 : -errno);
    ASSERT_TRUE(write_file("models/.hidden.gguf", "GGUF") != NULL);
    /* A 1 TiB sparse file with a GGUF magic. */
    snprintf(path, sizeof path, "%s/sparse.gguf", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(write(fd, "GGUF", 4), 4);
    int tr = ftruncate(fd, 1ll << 40);
    close(fd);
    (void)tr;

    struct registry r;
    struct err_detail d = {0};
    registry_init(&r, dir);
    int n = registry_scan(&r, &d);
    ASSERT_OK_D(n, &d);
    struct registry_model *list = NULL;
    size_t count = 0;
    ASSERT_OK(registry_list(&r, &list, &count));
    /* every *.gguf but the hidden one is listed; four are served */
    static const struct {
        const char *name, *reason; /* NULL: available */
    } want[] = {
        {"Upper", NULL},
        {"alias", NULL},
        {"bad name", "the file name is not a model name"},
        {"dir", "not a regular file"},
        {"fake", "malformed GGUF"},
        {"fifo", "not a regular file"},
        {"good", NULL},
        {"linked", NULL},
        {"magic", "symlink to '/proc/self/fd/0' cannot be followed"},
        {"notgguf", "not a GGUF file: it starts with 'NOPE'"},
        {"null", "symlink to '/dev/zero' does not point to a regular file"},
        {"sparse", "sparse file"},
    };
    ASSERT_EQ(count, ARRAY_SIZE(want));
    ASSERT_EQ(n, 4);
    ASSERT_EQ(registry_count(&r), 4);
    for (size_t i = 0; i < count; i++) {
        ASSERT_STREQ(list[i].name, want[i].name);
        ASSERT_EQ(list[i].available, want[i].reason == NULL);
        if (want[i].reason && !strstr(list[i].reason, want[i].reason))
            TEST_FAIL_("%s: reason '%s' lacks '%s'", list[i].name, list[i].reason, want[i].reason);
    }
    ASSERT_STREQ(list[0].meta.architecture, "llama");
    ASSERT_EQ(list[0].meta.n_ctx_train, 2048);
    ASSERT_STREQ(list[0].meta.quantization, "F32 100%");
    free(list);

    struct registry_model m;
    ASSERT_OK(registry_find(&r, "good", &m, &d));
    int mfd = -1;
    ASSERT_OK(registry_open(&r, "alias", &mfd, &d));
    ASSERT_TRUE(mfd >= 0);
    close(mfd);
    ASSERT_OK(registry_open(&r, "linked", &mfd, &d));
    close(mfd);
    /* a skipped file says why; a name not in the directory, what is close to it */
    ASSERT_ERR(registry_open(&r, "notgguf", &mfd, &d), ERR_UNSUPPORTED);
    ASSERT_STREQ(d.msg, "model 'notgguf' is not available: not a GGUF file: it starts with "
                        "'NOPE', not 'GGUF'");
    ASSERT_ERR(registry_find(&r, "bad name", &m, &d), ERR_UNSUPPORTED);
    ASSERT_ERR(registry_find(&r, "god", &m, &d), ERR_NOT_FOUND);
    ASSERT_STREQ(d.msg, "model 'god' not found in the models directory; did you mean 'good'?");
    ASSERT_ERR(registry_find(&r, "missing", &m, &d), ERR_NOT_FOUND);
    ASSERT_STREQ(d.msg, "model 'missing' not found in the models directory");
    ASSERT_ERR(registry_find(&r, ".hidden", &m, &d), ERR_INVALID);
    ASSERT_ERR(registry_find(&r, "../outside", &m, &d), ERR_INVALID);
    /* A file added later is found without an explicit rescan. */
    snprintf(path, sizeof path, "%s/late.gguf", dir);
    ASSERT_OK(copy_file(model, path));
    ASSERT_OK(registry_find(&r, "late", &m, &d));
    /* and one fixed later too */
    snprintf(path, sizeof path, "%s/notgguf.gguf", dir);
    ASSERT_OK(copy_file(model, path));
    ASSERT_OK(registry_find(&r, "notgguf", &m, &d));
    /* two files, one name: neither is served */
    snprintf(path, sizeof path, "%s/late.GGUF", dir);
    ASSERT_OK(copy_file(model, path));
    ASSERT_OK(registry_scan(&r, &d));
    ASSERT_ERR(registry_find(&r, "late", &m, &d), ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(d.msg, "'late.GGUF' and 'late.gguf' both name this model") != NULL);
    registry_done(&r);

    /* A missing directory is an error naming it, and an empty list. */
    registry_init(&r, "/nonexistent/warmd-models");
    ASSERT_ERR(registry_scan(&r, &d), -ENOENT);
    ASSERT_TRUE(strstr(d.msg, "/nonexistent/warmd-models") != NULL);
    ASSERT_EQ(registry_count(&r), 0);
    registry_done(&r);
}

TEST(model_name_suggestions) {
    static const char *const names[] = {"qwen3-0.6b", "llama3.2-1b", "stories260K", "gemma3"};
    const size_t n = ARRAY_SIZE(names);
    ASSERT_STREQ(registry_suggest("stories260k", names, n), "stories260K"); /* case */
    ASSERT_STREQ(registry_suggest("storeis260K", names, n), "stories260K"); /* a swap */
    ASSERT_STREQ(registry_suggest("gema3", names, n), "gemma3");           /* a letter out */
    ASSERT_STREQ(registry_suggest("qwen3", names, n), "qwen3-0.6b");       /* a prefix */
    ASSERT_TRUE(registry_suggest("mistral", names, n) == NULL);
    ASSERT_TRUE(registry_suggest("ab", names, n) == NULL);
    ASSERT_TRUE(registry_suggest("x", NULL, 0) == NULL);
}

TEST(utf8) {
    ASSERT_TRUE(rpc_utf8_valid("plain ascii", 11));
    ASSERT_TRUE(rpc_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14));
    ASSERT_TRUE(!rpc_utf8_valid("\xc3", 1));                 /* truncated */
    ASSERT_TRUE(!rpc_utf8_valid("\xc0\xaf", 2));             /* overlong '/' */
    ASSERT_TRUE(!rpc_utf8_valid("\xed\xa0\x80", 3));         /* surrogate */
    ASSERT_TRUE(!rpc_utf8_valid("\xf4\x90\x80\x80", 4));     /* > U+10FFFF */
    ASSERT_TRUE(!rpc_utf8_valid("\xff", 1));
    ASSERT_TRUE(!rpc_utf8_valid("a\x80", 2));                /* stray continuation */
}

TEST(metrics_text) {
    struct metrics m;
    memset(&m, 0, sizeof m);
    metrics_add(&m, METRIC_CONN_REFUSED, 3);
    metrics_rpc_started(&m, 1);
    metrics_rpc_finished(&m, 12);
    metrics_rpc_finished(&m, 99);  /* out of range: ignored */
    const char *names[] = {"GetInfo", "ListModels"};
    char *text = NULL;
    ASSERT_OK(metrics_render(&m, names, 2, 1500000, &text));
    ASSERT_TRUE(strstr(text, "\nwarmd_connections_refused_total 3\n") != NULL);
    ASSERT_TRUE(strstr(text, "# TYPE warmd_connections_refused_total counter\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_rpc_requests_total{method=\"ListModels\"} 1\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_rpc_responses_total{code=\"UNIMPLEMENTED\"} 1\n") != NULL);
    ASSERT_TRUE(strstr(text, "warmd_uptime_seconds 1.500\n") != NULL);
    free(text);
}

TEST(status_map) {
    ASSERT_EQ(rpc_status_from_err(ERR_NOT_FOUND), GRPC_STATUS_NOT_FOUND);
    ASSERT_EQ(rpc_status_from_err(ERR_INVALID), GRPC_STATUS_INVALID_ARGUMENT);
    ASSERT_EQ(rpc_status_from_err(-EACCES), GRPC_STATUS_PERMISSION_DENIED);
    ASSERT_EQ(rpc_status_from_err(-ENOMEM), GRPC_STATUS_RESOURCE_EXHAUSTED);
    ASSERT_EQ(rpc_status_from_err(-EIO), GRPC_STATUS_INTERNAL);
    /* The method table matches the service's paths and flags. */
    ASSERT_STREQ(rpc_service_name, "warm.v1.Warm");
    /* every method of the proto's service, by name (the generated descriptor lists them
     * sorted, the table in proto order) */
    ASSERT_EQ(rpc_n_methods, warm__v1__warm__descriptor.n_methods);
    for (unsigned k = 0; k < warm__v1__warm__descriptor.n_methods; k++) {
        size_t found = 0;
        for (size_t i = 0; i < rpc_n_methods; i++)
            found += strcmp(rpc_methods[i].name, warm__v1__warm__descriptor.methods[k].name) == 0;
        ASSERT_EQ(found, 1);
    }
    for (size_t i = 0; i < rpc_n_methods; i++) {
        ASSERT_TRUE(rpc_methods[i].handler && rpc_methods[i].request);
        bool admin_only = strcmp(rpc_methods[i].name, "LoadModel") == 0 ||
                          strcmp(rpc_methods[i].name, "UnloadModel") == 0;
        ASSERT_EQ(rpc_methods[i].admin, admin_only);
    }
}

TEST_MAIN(T(defaults), T(values), T(file), T(print_roundtrip), T(cmdline), T(dropins),
          T(many_errors), T(structured_values), T(env_rotation),
          T(policy), T(model_names), T(model_dir), T(model_name_suggestions), T(utf8), T(metrics_text), T(status_map))
