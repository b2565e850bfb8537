/* gguf_open_copy: the file read into private memory is a snapshot. A write over the file or
 * a truncation of it changes the views of a mapping (gguf_open) and, past the new end,
 * faults them with SIGBUS; the copy keeps the bytes it was opened with (P1-11). A file of
 * many chunks is read by parallel readers (engine/gguf-copy.c), hashed in order while it is
 * read, and not kept a second time in the page cache. */
#include "test.h"

#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define N_VALUES 4096 /* 16 KiB of f32: the tensor spans several pages */

/* Writes a file with one f32 tensor of value[i] = i + offset; the encoded bytes in *ret. */
static int write_model(const char *path, float offset, void **ret, size_t *ret_size) {
    struct gguf_writer *w = NULL;
    static float values[N_VALUES];
    for (int i = 0; i < N_VALUES; i++) values[i] = (float)i + offset;
    int64_t ne[1] = {N_VALUES};
    int r = gguf_writer_new(&w);
    if (r >= 0) r = gguf_writer_add_str(w, "general.name", "copy-test");
    if (r >= 0) r = gguf_writer_add_tensor(w, "t", KERN_TYPE_F32, 1, ne, values);
    if (r >= 0) r = gguf_writer_encode(w, ret, ret_size);
    gguf_writer_free(w);
    if (r < 0) return r;
    FILE *fp = fopen(path, "wb");
    bool ok = fp && fwrite(*ret, 1, *ret_size, fp) == *ret_size;
    if (fp && fclose(fp) != 0) ok = false;
    return ok ? 0 : -EIO;
}

/* Rewrites path in place (no new inode, same size), as `cp` over a same-size file does. */
static int rewrite_in_place(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = pwrite(fd, data, size, 0);
    close(fd);
    return n == (ssize_t)size ? 0 : -EIO;
}

static const float *tensor_values(const struct gguf_file *f) {
    const struct gguf_tensor *t = gguf_find_tensor(f, "t");
    return t ? t->data : NULL;
}

TEST(same_bytes_as_the_file) {
    char path[512];
    snprintf(path, sizeof path, "%s/same.gguf", test_tmpdir());
    void *bytes = NULL;
    size_t size = 0;
    ASSERT_OK(write_model(path, 0, &bytes, &size));
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open_copy(path, &f, &d), &d);
    ASSERT_EQ(gguf_size(f), size);
    ASSERT_TRUE(memcmp(gguf_base(f), bytes, size) == 0);
    const float *v = tensor_values(f);
    ASSERT_TRUE(v != NULL);
    ASSERT_TRUE(v[0] == 0.0f && v[N_VALUES - 1] == (float)(N_VALUES - 1));
    gguf_close(f);
    free(bytes);
}

TEST(in_place_rewrite_changes_a_map_not_a_copy) {
    char path[512];
    snprintf(path, sizeof path, "%s/rewrite.gguf", test_tmpdir());
    void *old = NULL, *new = NULL;
    size_t old_size = 0, new_size = 0;
    ASSERT_OK(write_model(path, 0, &old, &old_size));
    struct gguf_file *map = NULL, *copy = NULL;
    ASSERT_OK(gguf_open(path, &map, NULL));
    ASSERT_OK(gguf_open_copy(path, &copy, NULL));
    /* a same-size file with other weights written over it: no fault anywhere */
    char other[512];
    snprintf(other, sizeof other, "%s/other.gguf", test_tmpdir());
    ASSERT_OK(write_model(other, 1000, &new, &new_size));
    ASSERT_EQ(new_size, old_size);
    ASSERT_OK(rewrite_in_place(path, new, new_size));
    /* the mapping now reads the new weights under the old metadata ... */
    ASSERT_TRUE(tensor_values(map)[7] == 1007.0f);
    /* ... the copy still has the ones it was opened with, byte for byte */
    ASSERT_TRUE(tensor_values(copy)[7] == 7.0f);
    ASSERT_TRUE(memcmp(gguf_base(copy), old, old_size) == 0);
    gguf_close(map);
    gguf_close(copy);
    free(old);
    free(new);
}

TEST(truncation_leaves_a_copy_whole) {
    char path[512];
    snprintf(path, sizeof path, "%s/trunc.gguf", test_tmpdir());
    void *bytes = NULL;
    size_t size = 0;
    ASSERT_OK(write_model(path, 0, &bytes, &size));
    struct gguf_file *f = NULL;
    ASSERT_OK(gguf_open_copy(path, &f, NULL));
    /* a mapping would raise SIGBUS reading these pages now */
    ASSERT_TRUE(truncate(path, 0) == 0);
    const float *v = tensor_values(f);
    double sum = 0;
    for (int i = 0; i < N_VALUES; i++) sum += v[i];
    ASSERT_NEAR(sum, (double)N_VALUES * (N_VALUES - 1) / 2, 0.5);
    ASSERT_TRUE(memcmp(gguf_base(f), bytes, size) == 0);
    gguf_close(f);
    /* and opening what is left fails as the map reader fails on it */
    struct gguf_file *g = NULL;
    int want = gguf_open(path, &g, NULL);
    ASSERT_TRUE(want < 0);
    ASSERT_ERR(gguf_open_copy(path, &g, NULL), want);
    ASSERT_TRUE(g == NULL);
    free(bytes);
}

TEST(open_errors) {
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.gguf", test_tmpdir());
    ASSERT_ERR(gguf_open_copy(path, &f, &d), -ENOENT);
    ASSERT_TRUE(strstr(d.msg, "does-not-exist.gguf") != NULL);
    ASSERT_ERR(gguf_open_copy(test_tmpdir(), &f, &d), ERR_INVALID); /* a directory */
    ASSERT_TRUE(f == NULL);
}

/* Bytes of path in the page cache. */
static size_t cached_bytes(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return SIZE_MAX;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return SIZE_MAX;
    unsigned char *v = malloc(size / page + 1);
    size_t in = 0;
    if (v && mincore(map, size, v) == 0)
        for (size_t i = 0; i < (size + page - 1) / page; i++) in += v[i] & 1;
    free(v);
    munmap(map, size);
    return in * page;
}

TEST(many_chunks_hashed_in_order_not_cached_twice) {
    /* 9 MiB + 4 KiB of f32 data and 12345 trailing bytes: three 4 MiB chunks, the last
     * one short and of an odd length, several readers */
    char path[512];
    snprintf(path, sizeof path, "%s/big.gguf", test_tmpdir());
    const int64_t n = (9 << 20) / 4 + 1024;
    float *values = malloc_array((size_t)n, sizeof *values);
    ASSERT_TRUE(values != NULL);
    for (int64_t i = 0; i < n; i++) values[i] = (float)(i % 9973) * 0.5f;
    struct gguf_writer *w = NULL;
    void *bytes = NULL;
    size_t size = 0;
    ASSERT_OK(gguf_writer_new(&w));
    ASSERT_OK(gguf_writer_add_tensor(w, "t", KERN_TYPE_F32, 1, (int64_t[]){n}, values));
    ASSERT_OK(gguf_writer_encode(w, &bytes, &size));
    gguf_writer_free(w);
    free(values);
    const size_t tail = 12345;
    uint8_t *all = malloc(size + tail);
    ASSERT_TRUE(all != NULL);
    memcpy(all, bytes, size);
    for (size_t i = 0; i < tail; i++) all[size + i] = (uint8_t)(i * 7 + 1);
    size += tail;
    free(bytes);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_TRUE(fd >= 0);
    ASSERT_TRUE(write(fd, all, size) == (ssize_t)size);
    ASSERT_TRUE(fsync(fd) == 0); /* clean pages: the cache can drop them */
    close(fd);

    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open_copy(path, &f, &d), &d);
    ASSERT_EQ(gguf_size(f), size);
    ASSERT_EQ(gguf_trailing_bytes(f), tail);
    ASSERT_TRUE(memcmp(gguf_base(f), all, size) == 0);
    /* the fingerprint computed while reading is the hash of the bytes, in order */
    struct hash128 h = {0};
    ASSERT_TRUE(gguf_copy_hash(f, &h));
    ASSERT_TRUE(hash128_eq(h, hash128(all, size)));
    /* on a huge page boundary, for the transparent huge pages */
    ASSERT_EQ((uintptr_t)gguf_base(f) % (2u << 20), 0);
    /* the page cache does not hold the file a second time (tmpfs pages are the file
     * itself and cannot be dropped) */
    struct statfs sf;
    ASSERT_TRUE(statfs(path, &sf) == 0);
    if (sf.f_type != TMPFS_MAGIC) ASSERT_TRUE(cached_bytes(path) < size / 4);
    gguf_close(f);
    /* a mapping is not hashed */
    ASSERT_OK(gguf_open(path, &f, NULL));
    ASSERT_TRUE(!gguf_copy_hash(f, &h));
    gguf_close(f);
    free(all);
}

TEST_MAIN(T(same_bytes_as_the_file), T(in_place_rewrite_changes_a_map_not_a_copy),
          T(truncation_leaves_a_copy_whole), T(open_errors),
          T(many_chunks_hashed_in_order_not_cached_twice))
