/* Runs a libFuzzer-style target without libFuzzer: each seed (files named on the command
 * line or listed, space-separated, in $WARM_FUZZ_SEEDS; directories are read one level
 * deep), then WARM_FUZZ_RUNS (default 20000) mutations drawn from a fixed-seed generator:
 * bit flips, byte sets to edge values, truncations, duplicated and deleted ranges. The run
 * is deterministic; a crash or sanitizer report fails the test.
 *
 *   <target> --write-seeds DIR   writes the same seeds to DIR (one file each, named by
 *                                their hash) and runs nothing: libFuzzer's starting corpus
 *                                (scripts/fuzz.sh) */
#include "base/base.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: a target may provide seeds of its own (e.g. a valid tiny file it builds). */
__attribute__((weak)) int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

struct seed {
    uint8_t *data;
    size_t size;
};
static struct seed seeds[256];
static size_t n_seeds;

static void seed_add(const uint8_t *data, size_t size) {
    if (n_seeds == ARRAY_SIZE(seeds) || size > (64u << 20)) return;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return;
    memcpy(copy, data, size);
    seeds[n_seeds++] = (struct seed){copy, size};
}

static void seed_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return;
        struct dirent *e;
        char buf[4096];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            snprintf(buf, sizeof buf, "%s/%s", path, e->d_name);
            struct stat st2;
            if (stat(buf, &st2) == 0 && S_ISREG(st2.st_mode)) seed_file(buf);
        }
        closedir(d);
        return;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return;
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    if (buf && fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size)
        seed_add(buf, (size_t)st.st_size);
    free(buf);
    fclose(f);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t mutate(uint8_t *buf, size_t size, size_t cap) {
    static const uint8_t edge[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, 0x20, 0x40};
    int n_ops = 1 + (int)(rng() % 4);
    for (int k = 0; k < n_ops; k++) {
        switch (rng() % 6) {
        case 0: if (size) buf[rng() % size] ^= (uint8_t)(1u << (rng() % 8)); break;
        case 1: if (size) buf[rng() % size] = edge[rng() % ARRAY_SIZE(edge)]; break;
        case 2: if (size) size = rng() % size; break;
        case 3: /* 8 bytes of 0xff: a huge length or count */
            if (size >= 8) memset(buf + rng() % (size - 7), 0xff, 8);
            break;
        case 4: /* duplicate a range */
            if (size && size < cap) {
                size_t at = rng() % size, len = 1 + rng() % MIN((size_t)64, size - at);
                if (size + len <= cap) {
                    memmove(buf + at + len, buf + at, size - at);
                    size += len;
                }
            }
            break;
        case 5: /* delete a range */
            if (size) {
                size_t at = rng() % size, len = 1 + rng() % MIN((size_t)64, size - at);
                memmove(buf + at, buf + at + len, size - at - len);
                size -= len;
            }
            break;
        }
    }
    return size;
}

/* Writes every seed to dir as seed-<hash64>; 0, or 1 after saying what failed. */
static int seeds_write(const char *dir) {
    for (size_t i = 0; i < n_seeds; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%016llx", dir,
                 (unsigned long long)hash64(seeds[i].data, seeds[i].size));
        FILE *f = fopen(path, "wb");
        bool ok = f && fwrite(seeds[i].data, 1, seeds[i].size, f) == seeds[i].size;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) {
            perror(path);
            return 1;
        }
    }
    printf("fuzz: wrote %zu seeds to %s\n", n_seeds, dir);
    return 0;
}

int main(int argc, char **argv) {
    const char *write_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--write-seeds") && i + 1 < argc)
            write_dir = argv[++i];
        else
            seed_file(argv[i]);
    }
    const char *env = getenv("WARM_FUZZ_SEEDS");
    if (env) {
        char *list = strdup(env), *save = NULL;
        for (char *p = strtok_r(list, " ", &save); p; p = strtok_r(NULL, " ", &save)) seed_file(p);
        free(list);
    }
    if (fuzz_seeds) fuzz_seeds(seed_add);
    if (!n_seeds) seed_add((const uint8_t *)"", 0);
    if (write_dir) return seeds_write(write_dir);
    long runs = getenv("WARM_FUZZ_RUNS") ? atol(getenv("WARM_FUZZ_RUNS")) : 20000;
    for (size_t i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
    size_t cap = 0;
    for (size_t i = 0; i < n_seeds; i++) cap = MAX(cap, seeds[i].size);
    cap += 4096;
    uint8_t *buf = malloc(cap);
    if (!buf) return 1;
    for (long r = 0; r < runs; r++) {
        struct seed *s = &seeds[rng() % n_seeds];
        memcpy(buf, s->data, s->size);
        size_t size = mutate(buf, s->size, cap);
        LLVMFuzzerTestOneInput(buf, size);
    }
    free(buf);
    printf("fuzz: %zu seeds, %ld mutated inputs, no crash\n", n_seeds, runs);
    printf("%ld passed, 0 failed\n", runs + (long)n_seeds);
    for (size_t i = 0; i < n_seeds; i++) free(seeds[i].data);
    return 0;
}
