/* warm-httpd-bench: what warm-httpd adds per streamed token. The same greedy completion is
 * streamed R times directly through libwarm and R times through warm-httpd's
 * /v1/completions (SSE over loopback TCP); for each run the time between the first and
 * the last token is divided by the tokens in between (prefill and connection set-up left
 * out), and the medians are printed with their difference; so is the time to the first
 * token (what a request costs once: TCP, HTTP, JSON, the on-behalf-of lookup).
 *
 *   warm-httpd-bench --socket PATH --port N [--model M] [--tokens N] [--reps R]
 *
 * Prints one line per path and "overhead_usec_per_token X"; exits 1 when the two paths
 * did not stream the same text. */
#include "warm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 64
#define PROMPT "Once upon a time"

static double now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

struct run {
    double start, first, last;
    unsigned n;
    char text[65536];
    size_t len;
};

static void run_token(struct run *r, const char *text, size_t len) {
    if (!len) return;
    double t = now_usec();
    if (!r->n) r->first = t;
    r->last = t;
    r->n++;
    if (r->len + len < sizeof r->text) {
        memcpy(r->text + r->len, text, len);
        r->len += len;
        r->text[r->len] = '\0';
    }
}

static int on_token(int32_t id, const char *text, size_t len, void *userdata) {
    (void)id;
    run_token(userdata, text, len);
    return 0;
}

static double per_token(const struct run *r) {
    return r->n > 1 ? (r->last - r->first) / (r->n - 1) : 0;
}

static int direct(struct warm_client *c, const char *model, unsigned n, struct run *r) {
    struct warm_sampling s = warm_sampling_default();
    s.temperature = 0;
    struct warm_gen_params p = {.model = model, .max_tokens = n, .sampling = &s};
    struct warm_error e;
    memset(r, 0, sizeof *r);
    r->start = now_usec();
    int rc = warm_generate(c, &p, PROMPT, NULL, 0, on_token, r, NULL, &e);
    if (rc < 0) fprintf(stderr, "direct: %s\n", e.message);
    return rc;
}

/* Undoes the JSON string escapes the SSE events use for the text of this model. */
static size_t unescape(const char *s, const char *end, char *out) {
    size_t o = 0;
    for (; s < end && *s != '"'; s++) {
        if (*s == '\\' && s + 1 < end) {
            s++;
            if (*s == 'n') out[o++] = '\n';
            else if (*s == 't') out[o++] = '\t';
            else if (*s == 'u' && s + 4 < end) {
                unsigned v = (unsigned)strtoul((char[5]){s[1], s[2], s[3], s[4], 0}, NULL, 16);
                s += 4;
                if (v < 0x80) out[o++] = (char)v;
                else if (v < 0x800) out[o++] = (char)(0xc0 | v >> 6), out[o++] = (char)(0x80 | (v & 63));
                else out[o++] = (char)(0xe0 | v >> 12), out[o++] = (char)(0x80 | ((v >> 6) & 63)),
                     out[o++] = (char)(0x80 | (v & 63));
            } else out[o++] = *s;
        } else out[o++] = *s;
    }
    return o;
}

static int http(unsigned port, const char *model, unsigned n, struct run *r) {
    memset(r, 0, sizeof *r);
    r->start = now_usec();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        fprintf(stderr, "http: connect: %s\n", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char body[512], req[1024];
    int bl = snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":%u,"
                      "\"temperature\":0,\"stream\":true}", model, PROMPT, n);
    int rl = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n%s", port, bl, body);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return -1;
    }
    /* Scan for "text":"..." in each event as bytes arrive (chunk framing is skipped over:
     * the pattern never spans a chunk header for these short events). */
    static char buf[1 << 20];
    size_t have = 0, scanned = 0;
    bool done = false;
    while (!done) {
        ssize_t k = read(fd, buf + have, sizeof buf - have - 1);
        if (k <= 0) break;
        have += (size_t)k;
        buf[have] = '\0';
        for (;;) {
            char *ev = strstr(buf + scanned, "\"text\":\"");
            char *eol = ev ? strstr(ev, "}\n") : NULL;
            if (!eol) break;
            char tmp[4096];
            size_t len = unescape(ev + 8, eol, tmp);
            run_token(r, tmp, len);
            scanned = (size_t)(eol - buf) + 2;
        }
        if (strstr(buf + (scanned > 16 ? scanned - 16 : 0), "[DONE]")) done = true;
        if (have + 4096 > sizeof buf) break;
    }
    close(fd);
    if (!done) fprintf(stderr, "http: the stream did not end with [DONE]\n");
    return done ? 0 : -1;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *socket_path = NULL, *model = "stories";
    unsigned port = 0, n = 200;
    int reps = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--socket") == 0) socket_path = argv[i + 1];
        else if (strcmp(argv[i], "--port") == 0) port = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--model") == 0) model = argv[i + 1];
        else if (strcmp(argv[i], "--tokens") == 0) n = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    }
    if (!port || reps < 1 || reps > MAX_REPS || n < 2) {
        fprintf(stderr, "usage: warm-httpd-bench --socket PATH --port N [--model M] "
                        "[--tokens N] [--reps R<=%d]\n", MAX_REPS);
        return 2;
    }
    struct warm_client *c;
    struct warm_error e;
    if (warm_connect(socket_path, &c, &e) < 0) {
        fprintf(stderr, "%s\n", e.message);
        return 1;
    }
    static struct run d, h;
    double dv[MAX_REPS], hv[MAX_REPS], df[MAX_REPS], hf[MAX_REPS];
    unsigned dn = 0, hn = 0;
    if (direct(c, model, n, &d) < 0) return 1;  /* warm-up: the model loads */
    for (int i = 0; i < reps; i++) {
        if (direct(c, model, n, &d) < 0 || http(port, model, n, &h) < 0) return 1;
        if (d.len != h.len || memcmp(d.text, h.text, d.len) != 0) {
            fprintf(stderr, "the two paths streamed different text:\n%s\n---\n%s\n", d.text, h.text);
            return 1;
        }
        dv[i] = per_token(&d);
        hv[i] = per_token(&h);
        df[i] = d.first - d.start;
        hf[i] = h.first - h.start;
        dn = d.n;
        hn = h.n;
    }
    double dm = median(dv, reps), hm = median(hv, reps);
    printf("direct_libwarm_usec_per_token %.2f (%u tokens, median of %d)\n", dm, dn, reps);
    printf("warm_httpd_sse_usec_per_token %.2f (%u events, median of %d)\n", hm, hn, reps);
    printf("overhead_usec_per_token %.2f\n", hm - dm);
    double dfm = median(df, reps), hfm = median(hf, reps);
    printf("first_token_usec direct %.0f warm_httpd %.0f (request overhead %.0f)\n", dfm, hfm,
           hfm - dfm);
    warm_disconnect(c);
    return 0;
}
