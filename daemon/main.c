/* warmd — entry point: the one mutable global, the command line, signals, and the
 * daemon's lifecycle (daemon.h). Exit codes: 0 clean stop (also after SIGTERM), 1 a
 * startup failure, 2 a bad command line or config. */
#include "daemon/daemon.h"
#include "daemon/log.h"

#include <signal.h>
#include <stdio.h>

static struct daemon warmd;

int main(int argc, char **argv) {
    struct config_cmdline cl;
    struct err_detail e = {0};
    int r = config_parse_args(&warmd.config, argc, argv, &cl, &e);
    if (r < 0) {
        fprintf(stderr, "warmd: %s\n", err_msg(&e, r));
        return 2;
    }
    if (cl.help) {
        config_print_help(stdout);
        return 0;
    }
    if (cl.version) {
        printf("warmd %s (API warm.v1)\n", DAEMON_VERSION);
        return 0;
    }
    if (cl.print_default_config) {
        config_print_default(stdout);
        return 0;
    }
    if (cl.print_config) {
        config_print(&warmd.config, stdout);
        return 0;
    }
    daemon_log_init((enum log_level)warmd.config.log_level);

    /* Blocked before any thread exists (gRPC's inherit the mask); the main loop takes
     * them with sigtimedwait. SIGPIPE: a client that vanished is not our death. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    r = daemon_start(&warmd, &e);
    if (r < 0) {
        log_error("cannot start: %s", err_msg(&e, r));
        daemon_stop(&warmd);
        return 1;
    }
    daemon_run(&warmd);
    daemon_stop(&warmd);
    return 0;
}
