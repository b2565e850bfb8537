/* warm-info-loop: GetInfo through libwarm on a fresh connection, again and again, for
 * the churn test (tests/e2e/test_abuse.py): each round connects, asks with a deadline and
 * disconnects. Prints one JSON line: how many calls were answered, how many failed, and
 * the last failure.
 *
 *   warm-info-loop SOCKET SECONDS DEADLINE_MSEC */
#include "warm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: warm-info-loop SOCKET SECONDS DEADLINE_MSEC\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    uint64_t deadline_usec = strtoull(argv[3], NULL, 10) * 1000;
    unsigned long ok = 0, failed = 0;
    struct warm_error last = {0};
    for (double end = now_s() + seconds; now_s() < end;) {
        struct warm_client *c = NULL;
        struct warm_error err = {0};
        struct warm_info info;
        int r = warm_connect(argv[1], &c, &err);
        if (r >= 0) {
            warm_client_set_timeout(c, deadline_usec);
            r = warm_info_get(c, &info, &err);
            warm_disconnect(c);
        }
        if (r >= 0) {
            ok++;
        } else {
            failed++;
            last = err;
        }
    }
    /* The message as a JSON string: no quotes, backslashes or control bytes. */
    for (char *p = last.message; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    printf("{\"ok\": %lu, \"failed\": %lu, \"last_error\": \"%s: %s\"}\n", ok, failed,
           failed ? warm_code_name(last.code) : "", last.message);
    return 0;
}
