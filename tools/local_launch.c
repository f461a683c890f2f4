/* local_launch.c — `swarmtrain local` starts and stops its peer processes (local.h): the
 * run directory, a free loopback port each, the words each peer gets (the run's own
 * options and local's choices: stage, threads, store, events file), the swarm's start
 * one peer at a time, SIGTERM then SIGKILL at the end.
 * Not for: when peers are killed or added during the run (local_fault.c). */
#include "common/clock.h"
#include "common/status.h"
#include "swarm/auth.h"
#include "swarm/status_client.h"
#include "tools/local.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A free loopback TCP port (bound and released; a small race we accept on loopback). */
static int free_port1(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0) close(s);
    return port;
}

/* A free loopback port no other peer of this run was given: a port bound and released
 * may come back from the next bind (two peers were once given one port, and the swarm
 * waited for the peer that could not listen). */
static int free_port(const local_t *L, int n)
{
    for (int tries = 0; tries < 100; tries++) {
        int port = free_port1(), taken = 0;
        for (int i = 0; i < n && !taken; i++) taken = L->ch[i].port == port;
        if (!taken) return port;
    }
    return -1;
}

/* The run's own words, for --resume: the user's, without --dir. */
static void save_args(const local_t *L)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/local.args", L->lo.dir);
    FILE *f = fopen(path, "w");
    for (int i = L->user0; f && i < L->argc; i++) {
        if (!strcmp(L->argv[i], "--dir")) {
            i++;
            continue;
        }
        if (!strncmp(L->argv[i], "--dir=", 6)) continue;
        fprintf(f, "%s\n", L->argv[i]);
    }
    if (f) fclose(f);
}

int local_launch_dir(local_t *L)
{
    local_opts_t *lo = &L->lo;
    if (!lo->dir) {
        snprintf(L->dirbuf, sizeof L->dirbuf, "/tmp/swarmtrain-local-XXXXXX");
        if (!mkdtemp(L->dirbuf)) {
            fprintf(stderr, "swarmtrain local: cannot make a run directory: %s\n", strerror(errno));
            return 1;
        }
        lo->dir = L->dirbuf;
    } else if (mkdir(lo->dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "swarmtrain local: cannot make %s: %s\n", lo->dir, strerror(errno));
        return 1;
    }
    if (lo->resume) /* the logs and events of the run before go on in the same files */
        printf("local: resuming the swarm in %s from its peers' stores\n", lo->dir);
    else
        save_args(L);
    if (lo->secure) {
        snprintf(lo->swarm_key, sizeof lo->swarm_key, "%s/swarm.key", lo->dir);
        char kerr[STATUS_ERR_LEN];
        /* a resumed swarm keeps its key */
        if (((!lo->resume || access(lo->swarm_key, R_OK)) &&
             auth_swarm_keygen(lo->swarm_key, kerr)) ||
            !(L->auth = auth_new(lo->swarm_key, NULL, kerr))) {
            fprintf(stderr, "swarmtrain local: %s\n", kerr);
            return 1;
        }
    }
    return 0;
}

/* The peer's argument vector into args[0, 256): local's choices, then every word of the
 * run that is not local's own. The strings live in buf (64 bytes a slot). */
static void peer_args(const local_t *L, int idx, int db_idx, int join_port, char **args,
                      char (*buf)[600])
{
    const local_opts_t *lo = &L->lo;
    const local_child_t *c = &L->ch[idx];
    int n = 0, b = 0;
#define ARG(...) (snprintf(buf[b], sizeof buf[b], __VA_ARGS__), args[n++] = buf[b++])
    args[n++] = "swarmtrain";
    args[n++] = "peer";
    args[n++] = "--listen", ARG("tcp://127.0.0.1:%d", c->port);
    if (lo->resume) args[n++] = "--resume";
    if (join_port < 0)
        args[n++] = "--new", args[n++] = "--wait-peers", ARG("%d", lo->peers);
    else
        args[n++] = "--join", ARG("tcp://127.0.0.1:%d", join_port);
    args[n++] = "--stage", ARG("%d", c->stage);
    args[n++] = "--threads", ARG("%d", L->threads);
    args[n++] = "--in-flight", ARG("%d", lo->in_flight);
    args[n++] = "--db", ARG("%s/peer%d.db", lo->dir, db_idx);
    args[n++] = "--events", ARG("%s", c->events);
    if (lo->peer_timeout) args[n++] = "--peer-timeout", args[n++] = (char *)lo->peer_timeout;
    if (lo->custody_timeout)
        args[n++] = "--custody-timeout", args[n++] = (char *)lo->custody_timeout;
    if (lo->secure) args[n++] = "--swarm-key", args[n++] = (char *)lo->swarm_key;
    if (lo->poison_kind[0] && idx == lo->poison_peer)
        args[n++] = "--poison", args[n++] = (char *)lo->poison_kind;
    if (idx < LOCAL_MAX_PEERS && lo->slowdown[idx][0])
        args[n++] = "--slowdown", ARG("%s", lo->slowdown[idx]);
#undef ARG
    for (int i = 1; i < L->argc && n < 250; i++) {
        int takes;
        if (local_opts_own(L->argv[i], &takes)) {
            i += takes;
            continue;
        }
        if (!strcmp(L->argv[i], "--threads")) { /* local divides the cores itself */
            i++;
            continue;
        }
        args[n++] = L->argv[i];
    }
    args[n] = NULL;
}

/* In the forked child: its output into its log, its events file emptied on a fresh run,
 * the drill's fault set, then the peer. Never returns. */
static void exec_peer(const local_t *L, int idx, int db_idx, char **args, pid_t parent)
{
    const local_opts_t *lo = &L->lo;
    const local_child_t *c = &L->ch[idx];
    /* local killed outright (SIGKILL: no chance to stop its peers) takes them along:
     * they leave as on Ctrl-C rather than train on as orphans */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(0);
    int fd = open(c->log, O_WRONLY | O_CREAT | (lo->resume ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    if (!lo->resume && (fd = open(c->events, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0) close(fd);
    setpgid(0, 0); /* Ctrl-C goes to local, which stops the peers in order */
    if (idx == lo->kill_peer && db_idx == idx) { /* it dies holding a microbatch */
        char at[32];
        snprintf(at, sizeof at, "%d", lo->kill_step);
        setenv("SWARMTRAIN_FAULT_DIE_AT_STEP", at, 1);
    }
    execv("/proc/self/exe", args);
    _exit(127);
}

int local_launch_spawn(local_t *L, int idx, int db_idx, int join_port)
{
    local_child_t *c = &L->ch[idx];
    char *args[256];
    static char buf[16][600];
    c->store = db_idx;
    snprintf(c->log, sizeof c->log, "%s/peer%d.log", L->lo.dir, idx);
    snprintf(c->events, sizeof c->events, "%s/peer%d.events.jsonl", L->lo.dir, idx);
    peer_args(L, idx, db_idx, join_port, args, buf);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) exec_peer(L, idx, db_idx, args, parent);
    c->pid = pid;
    return 0;
}

int local_launch_one(local_t *L, int stage, int db_idx)
{
    int via = local_launch_live_port(L);
    if (!via || L->n >= LOCAL_MAX_PEERS) return 1;
    local_child_t *c = &L->ch[L->n];
    c->port = free_port(L, L->n);
    c->stage = stage;
    if (local_launch_spawn(L, L->n, db_idx, via)) return -1;
    L->n++;
    return 0;
}

int local_launch_failed(local_t *L)
{
    fprintf(stderr, "swarmtrain local: cannot start peers: %s\n", strerror(errno));
    for (int i = 0; i < L->n; i++)
        if (L->ch[i].pid > 0 && !L->ch[i].exited) kill(L->ch[i].pid, SIGKILL);
    return 1;
}

/* Waits (up to 5 s) for the founding peer to answer status requests. */
static void wait_first(const local_t *L)
{
    char ep0[64], err[STATUS_ERR_LEN], *json = NULL;
    snprintf(ep0, sizeof ep0, "tcp://127.0.0.1:%d", L->ch[0].port);
    for (int tries = 0; tries < 50 && !local_interrupted; tries++) {
        if (!status_client_fetch_auth(ep0, L->auth, 200, &json, err)) break;
        clock_sleep(0.1);
    }
    free(json);
}

/* Waits (up to 10 s) until the swarm counts the live ones of the first n as serving, so
 * that peers of the same stage find each other. A peer that dies meanwhile is reported
 * by the watch; the others start without it (join.h). */
static void wait_serving(local_t *L, int n)
{
    for (int tries = 0; tries < 100 && !local_interrupted; tries++) {
        local_view_t v;
        if (L->lo.resume) { /* nobody serves before they all agree on a step */
            clock_sleep(0.2);
            return;
        }
        local_fault_start_tick(L);
        int live = n - local_launch_exited(L, n);
        if (live <= 0 || (local_watch_view(L, &v) == 0 && v.serving >= live)) return;
        clock_sleep(0.1);
    }
}

int local_launch_all(local_t *L)
{
    local_opts_t *lo = &L->lo;
    int n = lo->peers;
    for (int i = 0; i < n; i++) {
        L->ch[i].port = free_port(L, i);
        L->ch[i].stage = i % L->S;
    }
    for (int s = 0, i = 0; s < lo->nplacement; s++) /* --placement: stage by stage */
        for (int k = 0; k < lo->placement[s]; k++) L->ch[i++].stage = s;
    printf("local: %d peers, %d stages, %d thread(s) each, logs in %s\n", n, L->S, L->threads,
           lo->dir);
    if (lo->secure) printf("local: CURVE on every connection, swarm key %s\n", lo->swarm_key);
    if (lo->kill_random || lo->kill_start || lo->churn_rate > 0 || lo->churn_at ||
        lo->kill_stage >= 0 || lo->stage_failures || lo->pause_peer != -1)
        printf("local: faults from seed %llu (--fault-seed)\n", (unsigned long long)lo->fault_seed);
    fflush(stdout);
    L->t0 = clock_now();
    L->t0_wall = clock_wall();
    L->n = 1;
    if (local_launch_spawn(L, 0, 0, -1)) return local_launch_failed(L);
    wait_first(L); /* the others join once the first answers */
    local_fault_plan_start(L);
    for (int i = 1; i < n && !local_interrupted; i++) { /* one at a time */
        if (local_launch_spawn(L, i, i, L->ch[0].port)) return local_launch_failed(L);
        L->n = i + 1;
        wait_serving(L, i + 1);
    }
    return 0; /* L->n: fewer on Ctrl-C while they started */
}

int local_launch_live_port(const local_t *L)
{
    for (int i = 0; i < L->n; i++)
        if (!L->ch[i].exited && !L->ch[i].killed && L->ch[i].pid > 0) return L->ch[i].port;
    return 0;
}

int local_launch_exited(const local_t *L, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (L->ch[i].pid > 0 &&
            !waitid(P_PID, (id_t)L->ch[i].pid, &si, WEXITED | WNOHANG | WNOWAIT) &&
            si.si_pid == L->ch[i].pid)
            k++;
    }
    return k;
}

void local_launch_stop_all(local_t *L)
{
    for (int i = 0; i < L->n; i++)
        if (!L->ch[i].exited && L->ch[i].pid > 0) kill(L->ch[i].pid, SIGTERM);
    double end = clock_now() + 10;
    for (int i = 0; i < L->n; i++)
        while (!L->ch[i].exited && L->ch[i].pid > 0) {
            int st;
            if (waitpid(L->ch[i].pid, &st, WNOHANG) == L->ch[i].pid)
                L->ch[i].exited = 1;
            else if (clock_now() > end)
                kill(L->ch[i].pid, SIGKILL);
            else
                clock_sleep(0.02);
        }
}
