#include "test.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>
#include <ftw.h>

int test_failed_;
int test_skipped_;

static char tmpdir[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void tmpdir_cleanup(void) {
    if (tmpdir[0] && !getenv("WARM_TEST_KEEP")) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/warm-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(tmpdir_cleanup);
    }
    return tmpdir;
}

const char *test_shared_path(const char *rel) {
    static _Thread_local char buf[4096];
    const char *dir = getenv("WARM_SHARED_MODELS");
#ifdef WARM_SHARED_MODELS_DIR
    if (!dir) dir = WARM_SHARED_MODELS_DIR;
#endif
    if (!dir) return NULL;
    snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

const char *test_tool_path(const char *name) {
    static _Thread_local char buf[4096];
    const char *bin = getenv("WARM_BIN");
    if (!bin) return NULL;
    snprintf(buf, sizeof buf, "%s/%s", bin, name);
    return access(buf, X_OK) == 0 ? buf : NULL;
}

static int mkmodel_vrun(const char *path, const char *fmt, va_list ap) {
    const char *tool = test_tool_path("warm-mkmodel");
    if (!tool) return -1;
    char args[4096], cmd[8192];
    vsnprintf(args, sizeof args, fmt, ap);
    snprintf(cmd, sizeof cmd, "'%s' %s -o '%s' > '%s/mkmodel.log' 2>&1", tool, args, path,
             test_tmpdir());
    int st = system(cmd);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int test_mkmodel_run(const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int st = mkmodel_vrun(path, fmt, ap);
    va_end(ap);
    return st;
}

/* The models test_mkmodel() made, by name (kept until exit: callers hold their paths). */
struct made_model {
    struct made_model *next;
    char name[64];
    char path[4096];
};
static struct made_model *made_models;

const char *test_mkmodel(const char *name, const char *fmt, ...) {
    for (struct made_model *m = made_models; m; m = m->next)
        if (strcmp(m->name, name) == 0) return m->path;
    struct made_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->path, sizeof m->path, "%s/%s.gguf", test_tmpdir(), name);
    va_list ap;
    va_start(ap, fmt);
    int st = mkmodel_vrun(m->path, fmt, ap);
    va_end(ap);
    if (st != 0) {
        free(m);
        return NULL;
    }
    m->next = made_models;
    made_models = m;
    return m->path;
}

int test_main(const struct test_case *cases, size_t n, int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    const char *only = argc > 1 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, cases[i].name) != 0) continue;
        test_failed_ = test_skipped_ = 0;
        printf("[ RUN  ] %s\n", cases[i].name);
        uint64_t t0 = time_now_usec();
        cases[i].fn();
        double ms = (double)(time_now_usec() - t0) / 1000.0;
        if (test_failed_) {
            failed++;
            printf("[ FAIL ] %s (%.1f ms)\n", cases[i].name, ms);
        } else if (test_skipped_) {
            skipped++;
            printf("[ SKIP ] %s\n", cases[i].name);
        } else {
            passed++;
            printf("[  OK  ] %s (%.1f ms)\n", cases[i].name, ms);
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed) return 1;
    if (skipped && !passed) return 77;
    return 0;
}

int32_t test_top_index(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double test_nmse(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - ref[i]) * (double)(got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}
