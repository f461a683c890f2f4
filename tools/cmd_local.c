/* cmd_local.c — `swarmtrain local`: a whole swarm on this machine. It starts N peer
 * processes on loopback (free ports picked here), one stage each in turn, gives each
 * its share of the cores, shows live progress from the swarm's own status answers,
 * stops everything on Ctrl-C, and exits non-zero if the run failed. For fault tests it
 * can SIGKILL a peer or add one at a given step. Its parts (local.h): options
 * (local_opts.c), processes (local_launch.c), watching (local_watch.c), faults
 * (local_fault.c), the summary from the peers' events (local_summary.c).
 * Not for: anything a peer does (peer/peer.c). */
#include "common/clock.h"
#include "swarm/auth.h"
#include "tools/cmd.h"
#include "tools/local.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t local_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    local_interrupted = 1;
}

/* The run as parsed: each peer's share of the cores, tokens per step, the faults' seed,
 * Ctrl-C caught. */
static void setup(local_t *L)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int peers = L->lo.peers;
    L->S = L->run.cfg.stages;
    L->threads = L->run.threads > 0 ? L->run.threads : (int)(cores / peers > 1 ? cores / peers : 1);
    L->tokens_per_step = (double)L->run.replicas * L->run.accum * L->run.cfg.batch * L->run.cfg.seq;
    if (!L->lo.fault_seed) L->lo.fault_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_seed(&L->frng, L->lo.fault_seed);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* user0: where the user's own words begin in argv (after the defaults) */
static int local_main(int argc, char **argv, int user0)
{
    local_t *L = calloc(1, sizeof *L);
    if (!L) return 1;
    L->argc = argc, L->argv = argv, L->user0 = user0;
    int rc = local_opts_parse(L);
    if (rc) {
        free(L);
        return rc == 1 ? 0 : 2;
    }
    if ((rc = local_launch_dir(L))) goto done;
    setup(L);
    if (!(L->ch = calloc(LOCAL_MAX_PEERS, sizeof *L->ch))) {
        rc = 1;
        goto done;
    }
    if ((rc = local_launch_all(L))) goto done;
    local_fault_plan(L);
    if (!(rc = local_watch(L))) rc = local_summary(L);
done:
    auth_destroy(&L->auth);
    free(L->ch);
    free(L);
    return rc;
}

int cmd_local(int argc, char **argv)
{
    /* The demo's defaults: tiny, 2 stages, 2 microbatches a step, DeMo between the
     * replicas of a pool, int8 activations on the wire, 1000 steps (a few minutes). They
     * go in front of the user's words, both for parsing here and for the first peer,
     * which decides the run: later words win. */
    static const char *defaults[] = {
        "--stages", "2",    "--replicas",  "2",  "--optimizer",        "demo", "--codec", "int8",
        "--steps",  "1000", "--log-every", "50", "--checkpoint-every", "50"};
    enum { ND = sizeof defaults / sizeof defaults[0] };
    /* --resume DIR: the words the run was started with (DIR/local.args), then these */
    const char *rdir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--resume") && i + 1 < argc)
            rdir = argv[i + 1];
        else if (!strncmp(argv[i], "--resume=", 9))
            rdir = argv[i] + 9;
    }
    char *saved[128], line[4096];
    int ns = 0;
    if (rdir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/local.args", rdir);
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "swarmtrain local: --resume %s: cannot read %s: %s\n", rdir, path,
                    strerror(errno));
            return 2;
        }
        while (ns < 128 && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            if (!(saved[ns++] = strdup(line))) break;
        }
        fclose(f);
    }
    char **args = malloc((size_t)(argc + ND + ns + 1) * sizeof *args);
    if (!args) return 1;
    args[0] = argv[0];
    for (int i = 0; i < ND; i++) args[1 + i] = (char *)defaults[i];
    for (int i = 0; i < ns; i++) args[1 + ND + i] = saved[i];
    for (int i = 1; i <= argc; i++) args[ND + ns + i] = argv[i]; /* with the NULL */
    int rc = local_main(argc + ND + ns, args, 1 + ND);
    free(args);
    for (int i = 0; i < ns; i++) free(saved[i]);
    return rc;
}
