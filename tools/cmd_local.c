/* cmd_local.c — `swarmtrain local`: a whole swarm on this machine. It starts N peer
 * processes on loopback (free ports picked here), one stage each in turn, gives each
 * its share of the cores, shows live progress from the swarm's own status answers,
 * stops everything on Ctrl-C, and exits non-zero if the run failed. For fault tests it
 * can SIGKILL a peer or add one at a given step.
 * Not for: anything a peer does (peer/peer.c). */
#include "common/clock.h"
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "swarm/auth.h"
#include "swarm/status_client.h"
#include "swarm/transport.h"
#include "tools/cmd.h"
#include "tools/json.h"
#include "tools/run_opts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_STAGES 64   /* stages shown in the progress line */
#define MAX_PEERS  1024 /* peer processes over a run, restarts included */

enum {
    O_PEERS = RUN_OPTS_EXTRA,
    O_DIR,
    O_INFLIGHT,
    O_KILL,
    O_PAUSE,
    O_JOIN,
    O_JOINSTAGE,
    O_QUIET,
    O_PTIMEOUT,
    O_REVIVE,
    O_CKEVERY,
    O_CKBUDGET,
    O_CHURN,
    O_CHURN_KILLS,
    O_FAULT_SEED,
    O_KILL_STAGE,
    O_RESUME,
    O_SECURE,
    O_POISON,
    O_RECOVERY,
    O_STAGE_FAILURES,
    /* rebalancing (issue 12) */
    O_PLACEMENT,
    O_SLOWDOWN,
    O_NOREBAL,
    O_REBAL_MARGIN,
    O_REBAL_COOL,
    O_COPY_BUDGET
};

typedef struct {
    int peers, in_flight, quiet;
    const char *dir;
    int kill_peer, kill_step;  /* peer kill_peer dies on a microbatch of step >= kill_step */
    int join_step, join_stage; /* add a peer at join_step */
    int revive;                /* ... which is the killed peer again, with its store */
    int kill_random;           /* --kill random: one outside SIGKILL at a random moment */
    int kill_start;            /* --kill start: one outside SIGKILL while the swarm starts */
    int pause_peer;            /* --pause PEER:S (-1: none; -2: random) */
    double pause_s;            /* ... frozen (SIGSTOP) this long, then SIGCONT */
    double churn_rate;         /* --churn: SIGKILLs per peer per minute, from outside */
    double churn_restart_s;    /* ... and a new peer after this long; < 0: none */
    int churn_kills;           /* at most this many kills (0: no limit) */
    uint64_t fault_seed;
    int kill_stage, kill_stage_step; /* --kill-stage: every peer of a stage, from outside */
    int resume;                      /* --resume DIR: the swarm in DIR restarts from its stores */
    const char *peer_timeout;
    int secure;           /* --secure: CURVE with a swarm key made in the run directory */
    char swarm_key[600];  /* ... its path */
    int poison_peer;      /* tests only: this peer sends poisoned DeMo messages */
    char poison_kind[16]; /* ... of this kind (peer --poison) */
    int stage_failures;        /* --stage-failures K: K whole stages lost at drawn steps */
    double stage_restart_s;    /* ... their peers back (with their stores) after this; <0 never */
    /* rebalancing (issue 12) */
    int placement[64], nplacement; /* --placement: peers per stage */
    char slowdown[MAX_PEERS][16];  /* --slowdown: per peer ("" = as fast as it is) */
} local_opts_t;

/* The swarm key, for local's own status requests (--secure). */
static auth_t *local_auth;

typedef struct {
    pid_t pid;
    int port, stage, exited, status, killed;
    int stopped_late; /* told to stop: it missed the run's end */
    double killed_at;
    char log[600];
} child_t;

/* The stage a peer serves now: the last "moved: stage A -> B" of its log, else `stage`. */
static int log_stage(const char *log, int stage)
{
    FILE *f = fopen(log, "r");
    char line[512];
    int a, b;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "moved: stage %d -> %d", &a, &b) == 2) stage = b;
    if (f) fclose(f);
    return stage;
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int local_option(void *ctx, int c, const char *arg)
{
    local_opts_t *lo = ctx;
    switch (c) {
    case O_PEERS:
        return run_opts_int("--peers", arg, 1, &lo->peers);
    case O_DIR:
        lo->dir = arg;
        return 0;
    case O_INFLIGHT:
        return run_opts_int("--in-flight", arg, 1, &lo->in_flight);
    case O_PAUSE: {
        char who[16];
        double secs = 20.0;
        int k = sscanf(arg, "%15[^:]:%lf", who, &secs);
        char *end = NULL;
        long pk = k >= 1 ? strtol(who, &end, 10) : -1;
        if (k < 1 || secs <= 0 || secs > 3600 ||
            (strcmp(who, "random") && (!end || *end || pk < 0 || pk > 1000))) {
            fprintf(stderr, "swarmtrain local: --pause PEER:SECONDS or --pause random[:SECONDS]\n");
            return -1;
        }
        lo->pause_peer = strcmp(who, "random") ? (int)pk : -2;
        lo->pause_s = secs;
        return 0;
    }
    case O_KILL:
        if (!strcmp(arg, "random")) {
            lo->kill_random = 1;
            return 0;
        }
        if (!strcmp(arg, "start")) {
            lo->kill_start = 1;
            return 0;
        }
        if (sscanf(arg, "%d:%d", &lo->kill_peer, &lo->kill_step) != 2 || lo->kill_peer < 0 ||
            lo->kill_step < 0) {
            fprintf(stderr, "swarmtrain local: --kill PEER:STEP, --kill random or --kill start\n");
            return -1;
        }
        return 0;
    case O_CHURN: {
        char *end;
        lo->churn_rate = strtod(arg, &end);
        lo->churn_restart_s = -1;
        if (*end == ':') lo->churn_restart_s = strtod(end + 1, &end);
        if (*end || !(lo->churn_rate > 0) || (lo->churn_restart_s < 0 && strchr(arg, ':'))) {
            fprintf(stderr, "swarmtrain local: --churn RATE[:RESTART_S], e.g. --churn 0.5:5\n");
            return -1;
        }
        return 0;
    }
    case O_KILL_STAGE: {
        char tail[16] = "";
        if (sscanf(arg, "%d:%15s", &lo->kill_stage, tail) == 2 && !strcmp(tail, "random")) {
            lo->kill_stage_step = -1; /* drawn from --fault-seed once the run is known */
            return lo->kill_stage < 0 ? -1 : 0;
        }
        if (sscanf(arg, "%d:%d", &lo->kill_stage, &lo->kill_stage_step) != 2 ||
            lo->kill_stage < 0 || lo->kill_stage_step < 1) {
            fprintf(stderr, "swarmtrain local: --kill-stage STAGE:STEP|random, e.g. --kill-stage 1:40\n");
            return -1;
        }
        return 0;
    }
    case O_RESUME:
        lo->resume = 1;
        lo->dir = arg;
        return 0;
    case O_CHURN_KILLS:
        return run_opts_int("--churn-kills", arg, 1, &lo->churn_kills);
    case O_FAULT_SEED: {
        char *end;
        lo->fault_seed = strtoull(arg, &end, 0);
        if (*end || !*arg) {
            fprintf(stderr, "swarmtrain local: --fault-seed N\n");
            return -1;
        }
        return 0;
    }
    case O_SECURE:
        lo->secure = 1;
        return 0;
    case O_COPY_BUDGET: { /* the peers' option: checked here, passed on as it is */
        float f;
        if (run_opts_float("--copy-budget", arg, &f) || !(f >= 0) || f > 100) {
            fprintf(stderr, "swarmtrain local: --copy-budget P wants 0 <= P <= 100 (percent)\n");
            return -1;
        }
        return 0;
    }
    case O_RECOVERY: /* the peers' option: checked here, passed on as it is */
        if (strcmp(arg, "auto") && strcmp(arg, "checkfree") && strcmp(arg, "checkpoint")) {
            fprintf(stderr, "swarmtrain local: --stage-recovery auto|checkfree|checkpoint\n");
            return -1;
        }
        return 0;
    case O_STAGE_FAILURES: {
        char *end;
        lo->stage_failures = (int)strtol(arg, &end, 10);
        lo->stage_restart_s = -1;
        if (*end == ':') lo->stage_restart_s = strtod(end + 1, &end);
        if (*end || lo->stage_failures < 0 || lo->stage_failures > 64) {
            fprintf(stderr, "swarmtrain local: --stage-failures K[:RESTART_S], e.g. 3:5\n");
            return -1;
        }
        return 0;
    }
    case O_POISON:
        if (sscanf(arg, "%d:%15s", &lo->poison_peer, lo->poison_kind) != 2 || lo->poison_peer < 0) {
            fprintf(stderr, "swarmtrain local: --poison PEER:nan|huge|index|mix\n");
            return -1;
        }
        return 0;
    case O_JOIN:
        return run_opts_int("--join-at", arg, 0, &lo->join_step);
    case O_JOINSTAGE:
        return run_opts_int("--join-stage", arg, 0, &lo->join_stage);
    case O_QUIET:
        lo->quiet = 1;
        return 0;
    case O_PLACEMENT: { /* N0,N1,...: peers on each stage */
        lo->nplacement = 0;
        for (const char *a = arg; *a;) {
            char *end;
            long v = strtol(a, &end, 10);
            if (end == a || v < 1 || v > MAX_PEERS / 2 || lo->nplacement == 64 ||
                (*end && *end != ',')) {
                fprintf(stderr, "swarmtrain local: --placement N0,N1,... (one count >= 1 per "
                                "stage), e.g. --placement 4,1\n");
                return -1;
            }
            lo->placement[lo->nplacement++] = (int)v;
            a = *end ? end + 1 : end;
        }
        return 0;
    }
    case O_SLOWDOWN: /* PEER:X,...; "*:X" for every peer */
        /* the peers not named become emulated devices of this CPU's speed (--slowdown 1):
         * every peer's compute is then timed on the same clock, its CPU seconds */
        for (int i = 0; i < MAX_PEERS; i++)
            if (!lo->slowdown[i][0]) snprintf(lo->slowdown[i], sizeof lo->slowdown[i], "1");
        for (const char *a = arg; *a;) {
            int peer = -1, k = 0;
            double x;
            if (!strncmp(a, "*:", 2)) {
                if (sscanf(a + 2, "%lf%n", &x, &k) != 1) goto bad_slowdown;
                k += 2;
            } else if (sscanf(a, "%d:%lf%n", &peer, &x, &k) != 2 || peer < 0 || peer >= MAX_PEERS) {
                goto bad_slowdown;
            }
            if (!(x >= 1 && x <= 1000) || (a[k] && a[k] != ',')) goto bad_slowdown;
            for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? MAX_PEERS : peer + 1); i++)
                snprintf(lo->slowdown[i], sizeof lo->slowdown[i], "%g", x);
            a += k + (a[k] == ',');
        }
        return 0;
    bad_slowdown:
        fprintf(stderr, "swarmtrain local: --slowdown PEER:X,... (1 <= X <= 1000; *:X for every "
                        "peer), e.g. --slowdown 3:4\n");
        return -1;
    case O_NOREBAL: /* --no-rebalance, --no-early-exchange: given to every peer */
        return 0;
    case O_REBAL_MARGIN:
    case O_REBAL_COOL: {
        float f;
        return run_opts_float(c == O_REBAL_MARGIN ? "--rebalance-margin" : "--rebalance-cooldown",
                              arg, &f);
    }
    case O_PTIMEOUT:
        lo->peer_timeout = arg;
        return 0;
    case O_REVIVE:
        lo->revive = 1;
        return 0;
    case O_CKEVERY: { /* checked here, given to every peer */
        int n;
        return run_opts_int("--checkpoint-every", arg, 0, &n);
    }
    case O_CKBUDGET: { /* checked here, given to every peer */
        double share;
        return run_opts_budget(arg, &share);
    }
    default:
        return -1;
    }
}

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
static int free_port(const child_t *ch, int n)
{
    for (int tries = 0; tries < 100; tries++) {
        int port = free_port1(), taken = 0;
        for (int i = 0; i < n && !taken; i++) taken = ch[i].port == port;
        if (!taken) return port;
    }
    return -1;
}

/* Whether argv[i] is one of local's own options; *takes_arg says if the next word goes
 * with it. */
static int local_only(const char *a, int *takes_arg)
{
    static const char *with_arg[] = {"--peers",       "--dir",        "--in-flight",    "--kill",
                                     "--join-at",     "--join-stage", "--peer-timeout", "--churn",
                                     "--churn-kills", "--fault-seed", "--poison",       "--kill-stage",
                                     "--resume",      "--stage-failures", "--placement", "--slowdown",
                                     "--pause"};
    *takes_arg = 0;
    if (!strcmp(a, "--quiet") || !strcmp(a, "--revive") || !strcmp(a, "--secure")) return 1;
    for (size_t i = 0; i < sizeof with_arg / sizeof *with_arg; i++) {
        size_t n = strlen(with_arg[i]);
        if (!strncmp(a, with_arg[i], n) && (a[n] == 0 || a[n] == '=')) {
            *takes_arg = a[n] == 0;
            return 1;
        }
    }
    return 0;
}

/* Starts peer idx (its log peer<idx>.log) with the store peer<db_idx>.db. */
static int spawn(child_t *ch, int idx, int db_idx, int argc, char **argv, const local_opts_t *lo,
                 int threads, int join_port)
{
    char *args[256];
    int n = 0;
    char listen[64], join[64], stage[16], thr[16], inf[16], db[600];
    char slow[16];
    args[n++] = "swarmtrain";
    args[n++] = "peer";
    snprintf(listen, sizeof listen, "tcp://127.0.0.1:%d", ch->port);
    args[n++] = "--listen", args[n++] = listen;
    char wait[16];
    if (lo->resume) args[n++] = "--resume";
    if (join_port < 0) {
        args[n++] = "--new";
        snprintf(wait, sizeof wait, "%d", lo->peers);
        args[n++] = "--wait-peers", args[n++] = wait;
    } else {
        snprintf(join, sizeof join, "tcp://127.0.0.1:%d", join_port);
        args[n++] = "--join", args[n++] = join;
    }
    snprintf(stage, sizeof stage, "%d", ch->stage);
    args[n++] = "--stage", args[n++] = stage;
    snprintf(thr, sizeof thr, "%d", threads);
    args[n++] = "--threads", args[n++] = thr;
    snprintf(inf, sizeof inf, "%d", lo->in_flight);
    args[n++] = "--in-flight", args[n++] = inf;
    snprintf(db, sizeof db, "%s/peer%d.db", lo->dir, db_idx);
    args[n++] = "--db", args[n++] = db;
    if (lo->peer_timeout) args[n++] = "--peer-timeout", args[n++] = (char *)lo->peer_timeout;
    if (lo->secure) args[n++] = "--swarm-key", args[n++] = (char *)lo->swarm_key;
    if (lo->poison_kind[0] && idx == lo->poison_peer)
        args[n++] = "--poison", args[n++] = (char *)lo->poison_kind;
    if (idx < MAX_PEERS && lo->slowdown[idx][0]) {
        snprintf(slow, sizeof slow, "%s", lo->slowdown[idx]);
        args[n++] = "--slowdown", args[n++] = slow;
    }
    for (int i = 1; i < argc && n < 250; i++) {
        int takes;
        if (local_only(argv[i], &takes)) {
            i += takes;
            continue;
        }
        if (!strcmp(argv[i], "--threads")) { /* local divides the cores itself */
            i++;
            continue;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    snprintf(ch->log, sizeof ch->log, "%s/peer%d.log", lo->dir, idx);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* local killed outright (SIGKILL: no chance to stop its peers) takes them along:
         * they leave as on Ctrl-C rather than train on as orphans */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(0);
        int fd = open(ch->log, O_WRONLY | O_CREAT | (lo->resume ? O_APPEND : O_TRUNC), 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setpgid(0, 0); /* Ctrl-C goes to local, which stops the peers in order */
        if (idx == lo->kill_peer && db_idx == idx) { /* it dies holding a microbatch */
            char at[32];
            snprintf(at, sizeof at, "%d", lo->kill_step);
            setenv("SWARMTRAIN_FAULT_DIE_AT_STEP", at, 1);
        }
        execv("/proc/self/exe", args);
        _exit(127);
    }
    ch->pid = pid;
    return 0;
}

typedef struct {
    int pools, peers_per[MAX_STAGES], live, serving;
    long long step_per[MAX_STAGES];
    long long step0;
    double loss;
    double bytes_out;
    long long retries;
    int nports, port[MAX_PEERS], port_stage[MAX_PEERS]; /* where each peer is now (moves) */
} view_t;

static void on_pool(void *ctx, const json_obj_t *o)
{
    view_t *v = ctx;
    int s = atoi(json_get(o, "stage"));
    if (s >= 0 && s < MAX_STAGES) {
        v->peers_per[s] = atoi(json_get(o, "peers"));
        v->step_per[s] = atoll(json_get(o, "step"));
    }
    if (s == 0) {
        v->step0 = atoll(json_get(o, "step"));
        const char *l = json_get(o, "loss");
        v->loss = strcmp(l, "null") && *l ? atof(l) : NAN;
    }
    v->pools = s + 1 > v->pools ? s + 1 : v->pools;
}

static void on_peer(void *ctx, const json_obj_t *o)
{
    view_t *v = ctx;
    v->live++;
    v->serving += !strcmp(json_get(o, "state"), "serving");
    v->bytes_out += atof(json_get(o, "bytes_out"));
    v->retries += atoll(json_get(o, "retries"));
    const char *colon = strrchr(json_get(o, "addr"), ':');
    if (colon && v->nports < MAX_PEERS) {
        v->port[v->nports] = atoi(colon + 1);
        v->port_stage[v->nports++] = atoi(json_get(o, "stage"));
    }
}

static int fetch_view(child_t *ch, int n, view_t *v)
{
    for (int i = 0; i < n; i++) {
        if (ch[i].exited || ch[i].killed) continue;
        char ep[64], err[STATUS_ERR_LEN], *json = NULL;
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ch[i].port);
        if (status_client_fetch_auth(ep, local_auth, 1000, &json, err)) continue;
        memset(v, 0, sizeof *v);
        v->loss = NAN;
        int ok =
            json_each(json, "pools", on_pool, v) >= 0 && json_each(json, "peers", on_peer, v) >= 0;
        free(json);
        if (ok) return 0;
    }
    return -1;
}

static double wall(void);

/* The moment a peer's "fault: t=T" line gives; the current time when there is none. */
static double fault_time(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    double t = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "fault: t=%lf", &t) == 1) break;
    if (f) fclose(f);
    return t > 0 ? t : wall();
}

/* Scans a peer log for the summary numbers. */
/* A peer's "wire: sent activations A gradients G ... total T; received ..." line (run.c):
 * adds what it sent, by kind, to sent[]. */
static void scan_wire(const char *line, unsigned long long sent[WIRE_KINDS])
{
    if (strncmp(line, "wire: sent ", 11)) return;
    const char *end = strstr(line, "; received");
    for (int k = 0; k < WIRE_KINDS; k++) {
        char key[32];
        snprintf(key, sizeof key, " %s ", transport_wire_name(k));
        const char *p = strstr(line, key);
        unsigned long long v;
        if (p && (!end || p < end) && sscanf(p + strlen(key), "%llu", &v) == 1) sent[k] += v;
    }
}

static void scan_log(const char *path, double *val, double *tps, unsigned long long *act_bytes,
                     unsigned long long *lost, double *first_reroute_after, double kill_t,
                     unsigned long long sent[WIRE_KINDS], unsigned long long *copy_bytes)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    unsigned long long copies = 0; /* the last "copy:" line's running total of this peer */
    while (fgets(line, sizeof line, f)) {
        char *cb = strstr(line, "copies-bytes ");
        unsigned long long cv;
        if (!strncmp(line, "copy: ", 6) && cb && sscanf(cb, "copies-bytes %llu", &cv) == 1)
            copies = cv;
        double x, t;
        unsigned long long a, l;
        if (sscanf(line, "val_loss %lf", &x) == 1) *val = x;
        scan_wire(line, sent);
        if (sscanf(line, "tokens/s %lf", &x) == 1) *tps = x;
        char *p = strstr(line, "activation-bytes ");
        if (p && sscanf(p, "activation-bytes %llu", &a) == 1) *act_bytes += a;
        p = strstr(line, " lost ");
        if (!strncmp(line, "peer: done:", 11) && p && sscanf(p, " lost %llu", &l) == 1) *lost += l;
        if (kill_t > 0 && sscanf(line, "reroute: t=%lf", &t) == 1 && t >= kill_t &&
            (*first_reroute_after < 0 || t - kill_t < *first_reroute_after))
            *first_reroute_after = t - kill_t;
    }
    *copy_bytes += copies;
    fclose(f);
}

/* The peers' log lines give times on the machine's monotonic clock (the one they are
 * driven by), which every process here shares. */
static double wall(void)
{
    return clock_now();
}

/* The port of a live peer to join through (0: none). */
static int live_port(const child_t *ch, int n)
{
    for (int i = 0; i < n; i++)
        if (!ch[i].exited && !ch[i].killed && ch[i].pid > 0) return ch[i].port;
    return 0;
}

static unsigned long long count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    unsigned long long n = 0;
    size_t k = strlen(prefix);
    while (f && fgets(line, sizeof line, f)) n += !strncmp(line, prefix, k);
    if (f) fclose(f);
    return n;
}

/* Whether an exited peer died otherwise than planned: not killed from here (or by its own
 * --kill drill), and not a clean exit. */
static int died_unplanned(const child_t *c)
{
    return c->exited && !c->killed && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0);
}

/* Whether one of ch[0, n) has exited, without reaping it (the watch loop does that, and
 * says why): a peer that dies while the others start leaves no reason to wait for it. */
/* How many of the first n peers have exited (their status is left for waitpid). */
static int exited_count(const child_t *ch, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (ch[i].pid > 0 && !waitid(P_PID, (id_t)ch[i].pid, &si, WEXITED | WNOHANG | WNOWAIT) &&
            si.si_pid == ch[i].pid)
            k++;
    }
    return k;
}

/* --kill start: the victim, its delay after it was started, and when it dies (-1: not
 * started yet). */
typedef struct {
    int peer;
    double delay, at;
    int done, killed, counted; /* its moment passed; it was killed then; in the summary */
} start_kill_t;

/* SIGKILLs --kill start's victim once its moment has come; 1 when it did now. */
static int start_kill_tick(child_t *ch, start_kill_t *sk)
{
    if (sk->peer < 0 || sk->done || ch[sk->peer].pid <= 0) return 0;
    double now = clock_now();
    if (sk->at < 0) sk->at = now + sk->delay;
    if (now < sk->at) return 0;
    sk->done = 1;
    if (ch[sk->peer].exited || ch[sk->peer].killed) return 0;
    kill(ch[sk->peer].pid, SIGKILL);
    sk->killed = 1;
    ch[sk->peer].killed = 1;
    ch[sk->peer].killed_at = now;
    printf("local: fault: SIGKILL peer %d (stage %d) from outside %.2f s after it started, "
           "while the swarm starts\n",
           sk->peer, ch[sk->peer].stage, sk->delay);
    fflush(stdout);
    return 1;
}

/* SIGTERM to every running peer (they leave cleanly); SIGKILL to any still running 10 s on. */
static void stop_all(child_t *ch, int n)
{
    for (int i = 0; i < n; i++)
        if (!ch[i].exited && ch[i].pid > 0) kill(ch[i].pid, SIGTERM);
    double end = clock_now() + 10;
    for (int i = 0; i < n; i++)
        while (!ch[i].exited && ch[i].pid > 0) {
            int st;
            if (waitpid(ch[i].pid, &st, WNOHANG) == ch[i].pid)
                ch[i].exited = 1;
            else if (clock_now() > end)
                kill(ch[i].pid, SIGKILL);
            else
                clock_sleep(0.02);
        }
}

/* The last n lines of a peer's log, each indented, on stdout. */
static void print_log_tail(const char *path, int n)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char ring[8][256], line[256];
    int k = 0;
    if (n > 8) n = 8;
    while (fgets(line, sizeof line, f)) snprintf(ring[k++ % n], sizeof ring[0], "%s", line);
    fclose(f);
    for (int i = k > n ? k - n : 0; i < k; i++) {
        const char *l = ring[i % n];
        printf("    %s%s", l, l[strlen(l) - 1] == '\n' ? "" : "\n");
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int local_main(int argc, char **argv, int user0);

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
        if (!strcmp(argv[i], "--resume") && i + 1 < argc) rdir = argv[i + 1];
        else if (!strncmp(argv[i], "--resume=", 9)) rdir = argv[i] + 9;
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

/* user0: where the user's own words begin in argv (after the defaults) */
static int local_main(int argc, char **argv, int user0)
{
    static const struct option extra[] = {{"peers", required_argument, 0, O_PEERS},
                                          {"dir", required_argument, 0, O_DIR},
                                          {"in-flight", required_argument, 0, O_INFLIGHT},
                                          {"kill", required_argument, 0, O_KILL},
                                          {"pause", required_argument, 0, O_PAUSE},
                                          {"join-at", required_argument, 0, O_JOIN},
                                          {"join-stage", required_argument, 0, O_JOINSTAGE},
                                          {"quiet", no_argument, 0, O_QUIET},
                                          {"peer-timeout", required_argument, 0, O_PTIMEOUT},
                                          {"revive", no_argument, 0, O_REVIVE},
                                          {"checkpoint-every", required_argument, 0, O_CKEVERY},
                                          {"checkpoint-budget", required_argument, 0, O_CKBUDGET},
                                          {"churn", required_argument, 0, O_CHURN},
                                          {"churn-kills", required_argument, 0, O_CHURN_KILLS},
                                          {"fault-seed", required_argument, 0, O_FAULT_SEED},
                                          {"kill-stage", required_argument, 0, O_KILL_STAGE},
                                          {"resume", required_argument, 0, O_RESUME},
                                          {"secure", no_argument, 0, O_SECURE},
                                          {"poison", required_argument, 0, O_POISON},
                                          {"stage-recovery", required_argument, 0, O_RECOVERY},
                                          {"copy-budget", required_argument, 0, O_COPY_BUDGET},
                                          {"stage-failures", required_argument, 0, O_STAGE_FAILURES},
                                          {"placement", required_argument, 0, O_PLACEMENT},
                                          {"slowdown", required_argument, 0, O_SLOWDOWN},
                                          {"no-rebalance", no_argument, 0, O_NOREBAL},
                                          {"no-early-exchange", no_argument, 0, O_NOREBAL},
                                          {"rebalance-margin", required_argument, 0, O_REBAL_MARGIN},
                                          {"rebalance-cooldown", required_argument, 0, O_REBAL_COOL}};
    static local_opts_t lo;
    memset(&lo, 0, sizeof lo);
    lo.peers = 4, lo.in_flight = 2, lo.kill_peer = -1, lo.join_step = -1, lo.poison_peer = -1;
    lo.pause_peer = -1;
    lo.kill_stage = -1;
    train_options_t run = train_defaults();
    run_opts_extra_t x = {
        .opts = extra,
        .n = sizeof extra / sizeof extra[0],
        .handle = local_option,
        .ctx = &lo,
        .intro =
            "Starts a whole swarm of peer processes on this machine (loopback), one stage\n"
            "each in turn, and watches it: step and loss, peers per pool, tokens/s, bytes/s\n"
            "on the wire, microbatches re-sent. Ctrl-C stops every peer cleanly. The exit\n"
            "status is 0 only if the run finished with a held-out loss and no microbatch was\n"
            "lost; the summary lists every peer that died unplanned.\n"
            "Defaults here: --stages 2 --replicas 2 --optimizer demo --codec int8 --steps 1000\n"
            "--checkpoint-every 50 (each peer into its store in --dir).",
        .usage =
            "swarm:\n"
            "  --peers N            peer processes (default 4); peer i takes stage i mod S\n"
            "  --dir DIR            logs and stores of the peers (default: a new /tmp dir)\n"
            "  --in-flight N        microbatches each stage-0 peer keeps in flight (default 2)\n"
            "  --peer-timeout S     silence after which a peer is dead (default 3)\n"
            "  --kill random        one peer, any (the founding one too), SIGKILLed from outside\n"
            "                       at a random moment between 10% and 70% of the steps\n"
            "  --pause PEER:S       freeze peer PEER (SIGSTOP) for S seconds at a moment drawn\n"
            "                       from --fault-seed (between 10%% and 70%% of the steps),\n"
            "                       then SIGCONT: it must come back (--pause random[:S]: any\n"
            "                       peer, the founding one too; S 20 by default)\n"
            "  --kill start         one peer but the founding one, drawn from --fault-seed,\n"
            "                       SIGKILLed from outside 0-3 s (drawn) after it was started,\n"
            "                       while the swarm starts: the others start without it\n"
            "  --churn RATE[:S]     SIGKILL random peers from outside, RATE per peer per minute\n"
            "                       (never the last of a stage), each replaced by a new peer\n"
            "                       of its stage S seconds later; the summary gives kills,\n"
            "                       restarts, re-routed and lost microbatches, and MTTR\n"
            "  --churn-kills N      at most N kills\n"
            "  --kill-stage S:STEP  every peer of stage S SIGKILLed from outside, at a random\n"
            "                       moment (--fault-seed) within a second of step STEP (STEP\n"
            "                       random: a step between 10% and 70% of the run); the\n"
            "                       swarm rebuilds the stage (CheckFree, or CheckFree+ for the\n"
            "                       first and last stage) and the summary names how\n"
            "  --stage-failures K[:S] K whole stages lost (every peer SIGKILLed from outside) at\n"
            "                       steps drawn from --fault-seed between 10% and 80% of the\n"
            "                       run, each a drawn stage; its peers start again with their\n"
            "                       stores S seconds later (default: never)\n"
            "  --stage-recovery M   the peers' --stage-recovery (auto, checkfree, checkpoint)\n"
            "  --copy-budget P      the peers' --copy-budget: CheckFree+ copies within P%\n"
            "                       of each keeper's activation/gradient bytes (default 5)\n"
            "  --fault-seed N       the seed of --kill random, --kill-stage and --churn (default:\n"
            "                       the clock)\n"
            "  --kill PEER:STEP     peer PEER is SIGKILLed (it kills itself) when a microbatch of\n"
            "                       step >= STEP reaches it, so it dies holding work (fault "
            "drill)\n"
            "  --join-at STEP       start one more peer at STEP, stage --join-stage (default 0)\n"
            "  --revive             the --join-at peer is the --kill peer again, with its store\n"
            "  --checkpoint-every N every peer checkpoints its stage into its store every N\n"
            "                       steps (see swarmtrain peer --help)\n"
            "  --resume DIR         restart the swarm of an earlier `local --dir DIR` (stopped,\n"
            "                       say, with Ctrl-C) from its peers' stores, with the words\n"
            "                       it was started with (DIR/local.args; words given here win):\n"
            "                       the peers agree on the newest step every stage has a\n"
            "                       checkpoint of (see peer --resume)\n"
            "  --secure             CURVE on every connection with a swarm key made in the run\n"
            "                       directory (DIR/swarm.key; peer --swarm-key): nobody without\n"
            "                       it can connect (docs/protocol.md section 15)\n"

            "  --quiet              no progress lines, only the summary\n"
            "rebalancing:\n"
            "  --placement N0,N1,.. start N0 peers on stage 0, N1 on stage 1, ... (instead of\n"
            "                       --peers; one count per stage)\n"
            "  --slowdown PEER:X,.. peer PEER is an emulated device X times slower than this\n"
            "                       CPU (*:X: every peer; the others: X = 1); see peer --help\n"
            "  --no-rebalance       peers never move to another stage\n"
            "  --no-early-exchange  stage 0 sends its exchange message after the PROGRESS round\n"
            "                       (peer --no-early-exchange)\n"
            "  --rebalance-margin F a move must raise the slowest stage by F (default 0.2)\n"
            "  --rebalance-cooldown S  the placement must have held S seconds (default 10)\n"};
    int rc = run_opts_parse("local", argc, argv, &run, &x);
    if (rc) return rc == 1 ? 0 : 2;
    if (lo.peers > MAX_PEERS / 2) {
        fprintf(stderr, "swarmtrain local: at most %d peers\n", MAX_PEERS / 2);
        return 2;
    }
    int S = run.cfg.stages;
    if (lo.nplacement) {
        if (lo.nplacement != S) {
            fprintf(stderr, "swarmtrain local: --placement gives %d counts for %d stages\n",
                    lo.nplacement, S);
            return 2;
        }
        lo.peers = 0;
        for (int s = 0; s < S; s++) lo.peers += lo.placement[s];
        if (lo.peers > MAX_PEERS / 2) {
            fprintf(stderr, "swarmtrain local: at most %d peers\n", MAX_PEERS / 2);
            return 2;
        }
    }
    if (lo.peers < S) {
        fprintf(stderr, "swarmtrain local: %d peers cannot hold %d stages\n", lo.peers, S);
        return 2;
    }
    if (lo.kill_stage >= S) {
        fprintf(stderr, "swarmtrain local: --kill-stage %d: the run has %d stages\n", lo.kill_stage, S);
        return 2;
    }
    if (S > MAX_STAGES) {
        fprintf(stderr, "swarmtrain local: at most %d stages\n", MAX_STAGES);
        return 2;
    }
    char dirbuf[] = "/tmp/swarmtrain-local-XXXXXX";
    if (!lo.dir) {
        if (!mkdtemp(dirbuf)) {
            fprintf(stderr, "swarmtrain local: cannot make a run directory: %s\n", strerror(errno));
            return 1;
        }
        lo.dir = dirbuf;
    } else if (mkdir(lo.dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "swarmtrain local: cannot make %s: %s\n", lo.dir, strerror(errno));
        return 1;
    }
    if (lo.resume) {
        /* the logs of the run before go on in the same files */
        printf("local: resuming the swarm in %s from its peers' stores\n", lo.dir);
    } else {
        /* the run's own words, for --resume: the user's, without --dir */
        char path[4096];
        snprintf(path, sizeof path, "%s/local.args", lo.dir);
        FILE *f = fopen(path, "w");
        for (int i = user0; f && i < argc; i++) {
            if (!strcmp(argv[i], "--dir")) {
                i++;
                continue;
            }
            if (!strncmp(argv[i], "--dir=", 6)) continue;
            fprintf(f, "%s\n", argv[i]);
        }
        if (f) fclose(f);
    }
    if (lo.secure) {
        snprintf(lo.swarm_key, sizeof lo.swarm_key, "%s/swarm.key", lo.dir);
        char kerr[STATUS_ERR_LEN];
        /* a resumed swarm keeps its key */
        if (((!lo.resume || access(lo.swarm_key, R_OK)) && auth_swarm_keygen(lo.swarm_key, kerr)) ||
            !(local_auth = auth_new(lo.swarm_key, NULL, kerr))) {
            fprintf(stderr, "swarmtrain local: %s\n", kerr);
            return 1;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads =
        run.threads > 0 ? run.threads : (int)(cores / lo.peers > 1 ? cores / lo.peers : 1);
    int M = run.replicas * run.accum;
    double tokens_per_step = (double)M * run.cfg.batch * run.cfg.seq;
    if (!lo.fault_seed) lo.fault_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_t frng;
    rng_seed(&frng, lo.fault_seed);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    child_t *ch = calloc(MAX_PEERS, sizeof *ch);
    if (!ch) return 1;
    int n = lo.peers;
    for (int i = 0; i < n; i++) {
        ch[i].port = free_port(ch, i);
        ch[i].stage = i % S;
    }
    for (int s = 0, i = 0; s < lo.nplacement; s++) /* --placement: stage by stage */
        for (int k = 0; k < lo.placement[s]; k++) ch[i++].stage = s;
    printf("local: %d peers, %d stages, %d thread(s) each, logs in %s\n", n, S, threads, lo.dir);
    if (lo.secure) printf("local: CURVE on every connection, swarm key %s\n", lo.swarm_key);
    if (lo.kill_random || lo.kill_start || lo.churn_rate > 0 || lo.kill_stage >= 0 ||
        lo.stage_failures || lo.pause_peer != -1)
        printf("local: faults from seed %llu (--fault-seed)\n", (unsigned long long)lo.fault_seed);
    fflush(stdout);
    double t0 = clock_now(), kill_wall = -1;
    if (spawn(&ch[0], 0, 0, argc, argv, &lo, threads, -1)) goto fail;
    /* the others join once the first answers */
    char ep0[64], err[STATUS_ERR_LEN], *json = NULL;
    snprintf(ep0, sizeof ep0, "tcp://127.0.0.1:%d", ch[0].port);
    for (int tries = 0; tries < 50 && !interrupted; tries++) {
        if (!status_client_fetch_auth(ep0, local_auth, 200, &json, err)) break;
        clock_sleep(0.1);
    }
    free(json);
    /* --kill start: a peer (not the founding one: the others join through it) SIGKILLed
     * from outside a drawn moment after it was started */
    start_kill_t sk = {.peer = lo.kill_start && n > 1 ? 1 + (int)rng_below(&frng, (uint64_t)(n - 1)) : -1,
                       .delay = lo.kill_start ? 3.0 * rng_uniform(&frng) : 0,
                       .at = -1};
    /* one at a time, each once the swarm counts the live ones started so far as serving,
     * so that peers of the same stage find each other. A peer that dies meanwhile is
     * reported by the loop below; the others start without it (join.h). */
    int started = 1;
    for (int i = 1; i < n && !interrupted; i++) {
        if (spawn(&ch[i], i, i, argc, argv, &lo, threads, ch[0].port)) goto fail;
        started++;
        for (int tries = 0; tries < 100 && !interrupted; tries++) {
            view_t v;
            if (lo.resume) { /* nobody serves before they all agree on a step */
                clock_sleep(0.2);
                break;
            }
            start_kill_tick(ch, &sk);
            int live = i + 1 - exited_count(ch, i + 1);
            if (live <= 0 || (fetch_view(ch, i + 1, &v) == 0 && v.serving >= live)) break;
            clock_sleep(0.1);
        }
    }
    n = started; /* fewer on Ctrl-C while they started */

    /* --kill random: one peer, any, at a random moment of the middle of the run */
    int rk_peer = lo.kill_random ? (int)rng_below(&frng, (uint64_t)n) : -1;
    long long rk_step = lo.kill_random ? run.steps / 10 + (long long)rng_below(&frng, (uint64_t)(run.steps * 6 / 10 + 1)) : -1;
    double rk_delay = rng_uniform(&frng), rk_at = -1;
    /* --pause: who, at which step (then a second drawn), frozen until when */
    int pz_peer = lo.pause_peer == -2 ? (int)rng_below(&frng, (uint64_t)n) : lo.pause_peer;
    if (pz_peer >= n) pz_peer = -1;
    long long pz_step = pz_peer >= 0 ? run.steps / 10 + (long long)rng_below(&frng, (uint64_t)(run.steps * 6 / 10 + 1)) : -1;
    double pz_delay = pz_peer >= 0 ? rng_uniform(&frng) : 0, pz_at = -1, pz_until = -1;
    int pz_state = 0; /* 0 not yet, 1 frozen, 2 woken */
    double done_seen = -1; /* when a peer first exited 0 on its own: the run is over */
    double ks_delay = rng_uniform(&frng), ks_at = -1; /* --kill-stage */
    if (lo.kill_stage >= 0 && lo.kill_stage_step < 0) /* random: between 10% and 70% */
        lo.kill_stage_step = run.steps / 10 + 1 + (int)rng_below(&frng, (uint64_t)(run.steps * 6 / 10 + 1));
    int ks_done = 0;
    /* --stage-failures: the steps and stages, drawn now; restarts due */
    int sf_step[64], sf_stage[64], sf_next = 0;
    for (int k = 0; k < lo.stage_failures; k++) {
        sf_step[k] = run.steps / 10 + 1 + (int)rng_below(&frng, (uint64_t)(run.steps * 7 / 10 + 1));
        sf_stage[k] = (int)rng_below(&frng, (uint64_t)S);
    }
    for (int a = 1; a < lo.stage_failures; a++) /* in step order */
        for (int b = a; b > 0 && sf_step[b] < sf_step[b - 1]; b--) {
            int t = sf_step[b];
            sf_step[b] = sf_step[b - 1], sf_step[b - 1] = t;
            t = sf_stage[b];
            sf_stage[b] = sf_stage[b - 1], sf_stage[b - 1] = t;
        }
    double back_at[MAX_PEERS];
    int back_idx[MAX_PEERS], nback = 0;
    /* churn bookkeeping: restarts due, and recovery times (MTTR) */
    int kills = 0, restarts = 0;
    double restart_due[MAX_PEERS];
    int restart_stage[MAX_PEERS], nrestart = 0;
    double mttr[MAX_PEERS];
    int nmttr = 0;
    struct {
        int stage;
        long long step;
        double at;
    } pending_mttr[MAX_PEERS];
    int npm = 0;

    int joined = 0, start_failed = 0;
    double orphan_since = -1; /* a stage nobody can rebuild, since */
    static view_t last_view;
    int have_last_view = 0;
    long long last_step = -1;
    double last_t = clock_now(), last_bytes = 0, tps = 0, last_churn = clock_now();
    for (;;) {
        int running = 0;
        start_kill_tick(ch, &sk);
        if (sk.killed && !sk.counted) kills++, sk.counted = 1;
        for (int i = 0; i < n; i++) {
            if (ch[i].exited) continue;
            int st;
            pid_t r = waitpid(ch[i].pid, &st, WNOHANG);
            if (r == ch[i].pid) {
                ch[i].exited = 1;
                ch[i].status = st;
                if (i == lo.kill_peer && !ch[i].killed && WIFSIGNALED(st) &&
                    WTERMSIG(st) == SIGKILL) { /* the planned fault */
                    ch[i].killed = 1;
                    kill_wall = fault_time(ch[i].log);
                    printf("local: fault: SIGKILL peer %d (stage %d) on receiving a microbatch of "
                           "step %d, t=%.3f\n",
                           i, ch[i].stage, lo.kill_step, kill_wall);
                    fflush(stdout);
                }
                if (died_unplanned(&ch[i])) {
                    printf("local: peer %d (stage %d) died unplanned (%s %d); the end of %s:\n", i,
                           ch[i].stage, WIFEXITED(st) ? "exit status" : "signal",
                           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), ch[i].log);
                    print_log_tail(ch[i].log, 4);
                    fflush(stdout);
                }
                /* before step 0 the others wait for the run's peers, but only as long as
                 * the table changes (join.h): they start without one that died (planned or
                 * not) once every stage serves. A stage left with no peer cannot start. */
                if (last_step < 1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                    int mates = 0;
                    for (int k = 0; k < n; k++)
                        mates += k != i && ch[k].pid > 0 && !ch[k].exited &&
                                 ch[k].stage == ch[i].stage;
                    if (!mates && ch[i].stage >= 0) start_failed = 1;
                }
            } else {
                running++;
            }
        }
        if (!running) break;
        if (start_failed) {
            printf("local: the swarm cannot start: a stage has no peer left; stopping the other "
                   "peers\n");
            stop_all(ch, n);
            free(ch);
            return 1;
        }
        /* --pause: SIGCONT once its time is up */
        if (pz_state == 1 && clock_now() >= pz_until) {
            pz_state = 2;
            if (!ch[pz_peer].exited) kill(ch[pz_peer].pid, SIGCONT);
            printf("local: fault: SIGCONT peer %d after %.1f s frozen\n", pz_peer, lo.pause_s);
            fflush(stdout);
        }
        /* A peer exits 0 on its own when the run is over for it. One still running 10 s
         * after that, and not frozen, missed the run's end (asleep, cut off; the others
         * had declared it dead and said their LEAVE to the live ones only): it is told to
         * stop (a clean leave). */
        if (done_seen < 0)
            for (int i = 0; i < n; i++)
                if (ch[i].exited && !ch[i].killed && WIFEXITED(ch[i].status) &&
                    WEXITSTATUS(ch[i].status) == 0)
                    done_seen = clock_now();
        if (done_seen > 0 && clock_now() - done_seen > 10.0 && pz_state != 1) {
            for (int i = 0; i < n; i++) {
                if (ch[i].exited || ch[i].stopped_late) continue;
                printf("local: the run is over; stopping peer %d, which missed its end\n", i);
                kill(ch[i].pid, SIGTERM);
                ch[i].stopped_late = 1;
            }
            fflush(stdout);
        }
        /* the poisoned peer (tests): expelled, it may wait for its pool forever; once every
         * honest peer is done, it is told to stop */
        static int poison_stopped;
        if (lo.poison_kind[0] && lo.poison_peer < n && running == 1 && !ch[lo.poison_peer].exited &&
            !poison_stopped) {
            printf("local: the honest peers are done; stopping the poisoned peer %d\n",
                   lo.poison_peer);
            kill(ch[lo.poison_peer].pid, SIGTERM);
            poison_stopped = 1;
        }
        if (interrupted) {
            fprintf(stderr, "local: stopping %d peers\n", running);
            stop_all(ch, n);
            printf("local: interrupted; logs in %s; go on with: swarmtrain local --resume %s\n",
                   lo.dir, lo.dir);
            free(ch);
            return 130;
        }
        view_t v;
        int have_view = fetch_view(ch, n, &v) == 0;
        double now = clock_now();
        if (have_view) {
            /* peers move between stages (rebalancing): churn and restarts go by where
             * they are now */
            for (int k = 0; k < v.nports; k++)
                for (int i = 0; i < n; i++)
                    if (ch[i].port == v.port[k] && !ch[i].exited && !ch[i].killed)
                        ch[i].stage = v.port_stage[k];
            int all_held = v.pools >= S;
            for (int s = 0; s < S && all_held; s++) all_held = v.peers_per[s] > 0;
            /* A stage with no peer whose neighbouring pools have one member each: no member
             * may move to rebuild it (recover.c), and no joiner comes unless local starts
             * one (a churn restart due, --join-at). After 30 s of that the run cannot end:
             * say which stage and how to go on, and stop. */
            int orphan = -1;
            for (int s = 0; s < S && s < v.pools; s++) {
                int spare = (s > 0 && v.peers_per[s - 1] >= 2) ||
                            (s + 1 < S && v.peers_per[s + 1] >= 2);
                if (v.peers_per[s] == 0 && !spare) orphan = s;
            }
            int joiner_due = nrestart > 0 || (lo.join_step >= 0 && !joined);
            if (orphan < 0 || joiner_due || v.step0 >= run.steps) {
                orphan_since = -1;
            } else if (orphan_since < 0) {
                orphan_since = now;
            } else if (now - orphan_since > 30.0) {
                printf("local: stage %d has no peer, and no neighbouring pool can spare one to "
                       "rebuild it: it waits for a joiner, which local does not start; "
                       "stopping the peers\n",
                       orphan);
                stop_all(ch, n);
                printf("local: go on with: swarmtrain local --resume %s (or join a peer to stage "
                       "%d)\n",
                       lo.dir, orphan);
                fflush(stdout);
                char op[1200];
                snprintf(op, sizeof op, "%s/summary.json", lo.dir);
                FILE *of = fopen(op, "w");
                if (of) {
                    fprintf(of, "{\"val_loss\":null,\"orphan_stage\":%d,\"step\":%lld}\n",
                            orphan, v.step0);
                    fclose(of);
                }
                free(ch);
                return 3;
            }
            if (all_held && v.step0 < run.steps - 1) { /* while it trains, not as it leaves */
                last_view = v;
                have_last_view = 1;
            }
            if (last_step >= 0 && v.step0 > last_step)
                tps = (double)(v.step0 - last_step) * tokens_per_step / (now - last_t);
            double bps = last_step >= 0 ? (v.bytes_out - last_bytes) / (now - last_t) : 0;
            int progress_line = v.step0 != last_step || now - last_t > 1.0;
            if (v.step0 != last_step) last_step = v.step0, last_t = now;
            last_bytes = v.bytes_out;
            if (!lo.quiet && progress_line) {
                printf("[%5.0fs] step %lld/%d", now - t0, v.step0, run.steps);
                if (!isnan(v.loss)) printf("  loss %.4f", v.loss);
                printf("  peers/pool");
                for (int s = 0; s < v.pools; s++) printf(" %d", v.peers_per[s]);
                printf("  %.0f tok/s  wire %.2f MB/s  re-sent %lld\n", tps, bps / 1e6, v.retries);
                fflush(stdout);
            }
            /* recovery: the victim's pool steps again */
            for (int k = 0; k < npm; k++)
                if (v.step_per[pending_mttr[k].stage] > pending_mttr[k].step) {
                    mttr[nmttr++] = now - pending_mttr[k].at;
                    pending_mttr[k--] = pending_mttr[--npm];
                }
            /* the victim kills itself (spawn); should no microbatch of its step reach it,
             * it is killed from here 20 steps later */
            if (lo.kill_peer >= 0 && lo.kill_peer < n && !ch[lo.kill_peer].killed &&
                v.step0 >= lo.kill_step + 20 && !ch[lo.kill_peer].exited) {
                kill(ch[lo.kill_peer].pid, SIGKILL);
                ch[lo.kill_peer].killed = 1;
                kill_wall = wall();
                printf("local: fault: SIGKILL peer %d (stage %d) at step %lld, t=%.3f\n",
                       lo.kill_peer, ch[lo.kill_peer].stage, v.step0, kill_wall);
                fflush(stdout);
            }
            if (pz_peer >= 0 && pz_state == 0 && pz_at < 0 && v.step0 >= pz_step)
                pz_at = now + pz_delay;
            if (pz_peer >= 0 && pz_state == 0 && pz_at > 0 && now >= pz_at &&
                !ch[pz_peer].exited && !ch[pz_peer].killed) {
                kill(ch[pz_peer].pid, SIGSTOP);
                pz_state = 1;
                pz_until = now + lo.pause_s;
                printf("local: fault: SIGSTOP peer %d (stage %d%s) from outside at step %lld for "
                       "%.1f s\n",
                       pz_peer, ch[pz_peer].stage, pz_peer == 0 ? ", the founding peer" : "",
                       v.step0, lo.pause_s);
                fflush(stdout);
            }
            if (rk_peer >= 0 && rk_at < 0 && v.step0 >= rk_step) rk_at = now + rk_delay;
            if (rk_peer >= 0 && rk_at > 0 && now >= rk_at && !ch[rk_peer].killed &&
                !ch[rk_peer].exited) {
                kill(ch[rk_peer].pid, SIGKILL);
                ch[rk_peer].killed = 1;
                ch[rk_peer].killed_at = now;
                kill_wall = wall();
                kills++;
                pending_mttr[npm].stage = ch[rk_peer].stage;
                pending_mttr[npm].step = v.step_per[ch[rk_peer].stage];
                pending_mttr[npm++].at = now;
                printf("local: fault: SIGKILL peer %d (stage %d%s) from outside at step %lld, "
                       "t=%.3f\n",
                       rk_peer, ch[rk_peer].stage, rk_peer == 0 ? ", the founding peer" : "",
                       v.step0, kill_wall);
                fflush(stdout);
            }
            /* --kill-stage: every peer of the stage, at a random moment after STEP */
            if (lo.kill_stage >= 0 && !ks_done && ks_at < 0 && v.step0 >= lo.kill_stage_step)
                ks_at = now + ks_delay;
            if (lo.kill_stage >= 0 && !ks_done && ks_at > 0 && now >= ks_at) {
                printf("local: fault: SIGKILL every peer of stage %d from outside at step %lld:",
                       lo.kill_stage, v.step0);
                for (int i = 0; i < n; i++) {
                    if (ch[i].exited || ch[i].killed) continue;
                    ch[i].stage = log_stage(ch[i].log, ch[i].stage);
                    if (ch[i].stage != lo.kill_stage) continue;
                    kill(ch[i].pid, SIGKILL);
                    ch[i].killed = 1;
                    ch[i].killed_at = now;
                    kills++;
                    printf(" peer %d", i);
                }
                kill_wall = wall();
                pending_mttr[npm].stage = lo.kill_stage;
                pending_mttr[npm].step = v.step_per[lo.kill_stage];
                pending_mttr[npm++].at = now;
                printf(", t=%.3f\n", kill_wall);
                fflush(stdout);
                ks_done = 1;
            }
            /* --stage-failures: every peer now serving the drawn stage (its stage as its log
             * says: peers move), then back with its store after the restart time */
            while (sf_next < lo.stage_failures && v.step0 >= sf_step[sf_next] && v.step0 < run.steps) {
                int s = sf_stage[sf_next++];
                printf("local: fault: stage %d lost at step %lld: SIGKILL", s, v.step0);
                for (int i = 0; i < n; i++) {
                    if (ch[i].exited || ch[i].killed) continue;
                    ch[i].stage = log_stage(ch[i].log, ch[i].stage);
                    if (ch[i].stage != s) continue;
                    kill(ch[i].pid, SIGKILL);
                    ch[i].killed = 1;
                    ch[i].killed_at = now;
                    kills++;
                    printf(" peer %d", i);
                    if (lo.stage_restart_s >= 0 && nback < MAX_PEERS)
                        back_at[nback] = now + lo.stage_restart_s, back_idx[nback++] = i;
                }
                kill_wall = wall();
                if (npm < MAX_PEERS) {
                    pending_mttr[npm].stage = s;
                    pending_mttr[npm].step = v.step_per[s];
                    pending_mttr[npm++].at = now;
                }
                printf("\n");
                fflush(stdout);
            }
            /* churn: each live peer dies at RATE per minute, never the last of its stage */
            if (lo.churn_rate > 0 && v.step0 >= 1 && v.step0 < run.steps &&
                (!lo.churn_kills || kills < lo.churn_kills) && npm < MAX_PEERS) {
                double dt = now - last_churn;
                for (int i = 0; i < n && (!lo.churn_kills || kills < lo.churn_kills); i++) {
                    if (ch[i].exited || ch[i].killed) continue;
                    if (rng_uniform(&frng) >= lo.churn_rate / 60.0 * dt) continue;
                    int alive = 0;
                    for (int j = 0; j < n; j++)
                        alive += !ch[j].exited && !ch[j].killed && ch[j].stage == ch[i].stage;
                    if (alive < 2) continue;
                    kill(ch[i].pid, SIGKILL);
                    ch[i].killed = 1;
                    ch[i].killed_at = now;
                    kills++;
                    pending_mttr[npm].stage = ch[i].stage;
                    pending_mttr[npm].step = v.step_per[ch[i].stage];
                    pending_mttr[npm++].at = now;
                    printf("local: churn: SIGKILL peer %d (stage %d) at step %lld\n", i,
                           ch[i].stage, v.step0);
                    if (lo.churn_restart_s >= 0 && nrestart < MAX_PEERS) {
                        restart_due[nrestart] = now + lo.churn_restart_s;
                        restart_stage[nrestart++] = ch[i].stage;
                    }
                    fflush(stdout);
                }
            }
            last_churn = now;
            /* a revived peer comes back once the swarm has noticed it was gone */
            int wait_gone =
                lo.revive && lo.kill_peer >= 0 && lo.kill_peer < n &&
                (!ch[lo.kill_peer].killed || v.peers_per[ch[lo.kill_peer].stage] >= lo.peers / S);
            if (lo.join_step >= 0 && !joined && !wait_gone && v.step0 >= lo.join_step &&
                n < MAX_PEERS) {
                ch[n].port = free_port(ch, n);
                ch[n].stage = lo.join_stage < S ? lo.join_stage : 0;
                int db_idx = n;
                if (lo.revive && lo.kill_peer >= 0 && ch[lo.kill_peer].killed) {
                    db_idx = lo.kill_peer; /* the preempted instance is back, disk and all */
                    ch[n].stage = ch[lo.kill_peer].stage;
                }
                if (spawn(&ch[n], n, db_idx, argc, argv, &lo, threads, live_port(ch, n)))
                    goto fail;
                printf("local: peer %d joins stage %d at step %lld%s\n", n, ch[n].stage, v.step0,
                       db_idx != n ? " (the killed peer again, with its store)" : "");
                n++;
                joined = 1;
            }
        }
        /* --stage-failures: the killed peers again, each with its store */
        for (int k = 0; k < nback; k++) {
            if (now < back_at[k] || n >= MAX_PEERS) continue;
            int via = live_port(ch, n), i = back_idx[k];
            if (!via) continue;
            ch[n].port = free_port(ch, n);
            ch[n].stage = ch[i].stage;
            if (spawn(&ch[n], n, i, argc, argv, &lo, threads, via)) goto fail;
            printf("local: peer %d (peer %d again, with its store) joins stage %d\n", n, i,
                   ch[n].stage);
            fflush(stdout);
            n++;
            restarts++;
            back_at[k] = back_at[--nback];
            back_idx[k--] = back_idx[nback];
        }
        /* restarts: a new process (new identity, new store) for the same stage */
        for (int k = 0; k < nrestart; k++) {
            if (now < restart_due[k] || n >= MAX_PEERS) continue;
            int via = live_port(ch, n);
            if (!via) continue;
            ch[n].port = free_port(ch, n);
            ch[n].stage = restart_stage[k];
            if (spawn(&ch[n], n, n, argc, argv, &lo, threads, via)) goto fail;
            printf("local: churn: peer %d starts for stage %d\n", n, ch[n].stage);
            fflush(stdout);
            n++;
            restarts++;
            restart_due[k] = restart_due[--nrestart];
            restart_stage[k--] = restart_stage[nrestart];
        }
        clock_sleep(lo.quiet || lo.churn_rate > 0 || lo.kill_random ? 0.2 : 1.0);
    }

    double val = NAN, ltps = 0, reroute_after = -1;
    unsigned long long act = 0, lost = 0;
    unsigned long long sent[WIRE_KINDS] = {0}, sent_all = 0, copy_bytes = 0;
    for (int i = 0; i < n; i++)
        scan_log(ch[i].log, &val, &ltps, &act, &lost, &reroute_after, kill_wall, sent,
                 &copy_bytes);
    for (int k = 0; k < WIRE_KINDS; k++) sent_all += sent[k];
    double tokens = (double)run.steps * tokens_per_step;
    /* every byte is sent by one peer and received by another: the peers' sent bytes (their
     * "wire:" lines; a peer killed with SIGKILL has none) are the swarm's traffic */
    printf("local: done in %.1f s: val_loss %.4f, tokens/s %.0f, wire %.1f bytes per token, lost "
           "microbatches %llu\n",
           clock_now() - t0, val, ltps, tokens > 0 ? (double)sent_all / tokens : 0, lost);
    printf("local: wire bytes per token (sent, all peers, headers included):");
    for (int k = 0; k < WIRE_KINDS; k++)
        printf(" %s %.1f,", transport_wire_name(k), tokens > 0 ? (double)sent[k] / tokens : 0);
    printf(" total %.1f; codec payloads (activations and gradients) %.1f\n", tokens > 0 ? (double)sent_all / tokens : 0,
           tokens > 0 ? (double)act / tokens : 0);
    /* CheckFree+'s copies ride the state kind: their keepers count what they fetched */
    printf("local: CheckFree+ copies (the end stages' embedding / final norm and head kept by "
           "their neighbours): %llu bytes, %.1f per token, %.2f%% of the wire\n",
           copy_bytes, tokens > 0 ? (double)copy_bytes / tokens : 0,
           sent_all ? 100.0 * (double)copy_bytes / (double)sent_all : 0);
    if (lo.kill_stage >= 0 && !ks_done)
        printf("local: fault: the run ended before the drawn kill of stage %d (after step %d, "
               "%.2f s on)\n",
               lo.kill_stage, lo.kill_stage_step, ks_delay);
    if (kill_wall > 0) {
        if (reroute_after >= 0)
            printf("local: fault: first microbatch re-routed %.3f s after the kill\n",
                   reroute_after);
        else
            printf("local: fault: no microbatch needed re-routing after the kill\n");
    }
    if (kills || lo.churn_rate > 0) {
        unsigned long long rerouted = 0;
        for (int i = 0; i < n; i++) rerouted += count_lines(ch[i].log, "reroute: ");
        printf("local: faults: %d kills, %d restarts, %llu microbatches re-routed, %llu lost", kills,
               restarts, rerouted, lost);
        if (nmttr) {
            qsort(mttr, (size_t)nmttr, sizeof *mttr, cmp_double);
            printf(", MTTR (kill to the pool's next step) min %.2f s median %.2f s max %.2f s over "
                   "%d",
                   mttr[0], mttr[nmttr / 2], mttr[nmttr - 1], nmttr);
        }
        if (npm) printf(", %d kill(s) the pool never stepped after", npm);
        printf("\n");
    }
    /* rebalancing: every move, and where the peers ended; validation during the run
     * (--val-every), in time order: the peers' clock is the one local runs on */
    unsigned long long moves = 0;
    struct valpt { double t, loss; long long step; } vals[512];
    int nvals = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(ch[i].log, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            long long vstep;
            double vloss, vt;
            if (sscanf(line, "val: step %lld val_loss %lf at %lf", &vstep, &vloss, &vt) == 3 &&
                nvals < (int)(sizeof vals / sizeof vals[0])) {
                vals[nvals].t = vt - t0, vals[nvals].loss = vloss, vals[nvals].step = vstep;
                nvals++;
            }
            if (!strncmp(line, "recovered: stage", 16)) printf("local: peer %d %s", i, line);
            if (!strncmp(line, "moved: ", 7)) {
                printf("local: peer %d %s", i, line);
                moves++;
            }
        }
        if (f) fclose(f);
    }
    for (int i = 1; i < nvals; i++) /* insertion sort by time */
        for (int j = i; j > 0 && vals[j].t < vals[j - 1].t; j--) {
            struct valpt tmp = vals[j];
            vals[j] = vals[j - 1], vals[j - 1] = tmp;
        }
    for (int i = 0; i < nvals; i++)
        printf("local: val step %lld val_loss %.4f at %.1f s\n", vals[i].step, vals[i].loss,
               vals[i].t);
    if (have_last_view) {
        printf("local: %llu move(s); placement at the end (peers per stage):", moves);
        for (int s = 0; s < S; s++) printf("%s%d", s ? "," : " ", last_view.peers_per[s]);
        printf("\n");
    }
    int unplanned = 0;
    for (int i = 0; i < n; i++) {
        int st = ch[i].status;
        if (!died_unplanned(&ch[i])) continue;
        unplanned++;
        printf("local: peer %d (stage %d) died unplanned: %s %d; see %s\n", i, ch[i].stage,
               WIFEXITED(st) ? "exit status" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), ch[i].log);
    }
    if (!unplanned) printf("local: no peer died unplanned\n");
    fflush(stdout);
    /* the same, for programs: DIR/summary.json (tests and benchmarks read it, not the
     * wording above) */
    char sp[1200];
    snprintf(sp, sizeof sp, "%s/summary.json", lo.dir);
    FILE *sf = fopen(sp, "w");
    if (sf) {
        fprintf(sf, "{\"val_loss\":");
        if (isfinite(val))
            fprintf(sf, "%.6f", val);
        else
            fprintf(sf, "null");
        fprintf(sf, ",\"seconds\":%.3f,\"tokens_per_s\":%.1f,\"lost\":%llu,\"kills\":%d,"
                    "\"restarts\":%d,\"peers\":%d,\"unplanned\":[",
                clock_now() - t0, ltps, lost, kills, restarts, n);
        for (int i = 0, first = 1; i < n; i++) {
            if (!died_unplanned(&ch[i])) continue;
            fprintf(sf, "%s{\"peer\":%d,\"stage\":%d,\"%s\":%d}", first ? "" : ",", i,
                    ch[i].stage, WIFEXITED(ch[i].status) ? "exit" : "signal",
                    WIFEXITED(ch[i].status) ? WEXITSTATUS(ch[i].status) : WTERMSIG(ch[i].status));
            first = 0;
        }
        fprintf(sf, "],\"killed\":[");
        for (int i = 0, first = 1; i < n; i++) {
            if (!ch[i].killed) continue;
            fprintf(sf, "%s%d", first ? "" : ",", i);
            first = 0;
        }
        fprintf(sf, "],\"stopped_late\":[");
        for (int i = 0, first = 1; i < n; i++) {
            if (!ch[i].stopped_late) continue;
            fprintf(sf, "%s%d", first ? "" : ",", i);
            first = 0;
        }
        fprintf(sf, "],\"paused\":%d,\"pause_s\":%.1f,\"woken\":%d", pz_state ? pz_peer : -1,
                pz_state ? lo.pause_s : 0.0, pz_state == 2);
        fprintf(sf, ",\"wire_sent\":{");
        for (int k = 0; k < WIRE_KINDS; k++)
            fprintf(sf, "%s\"%s\":%llu", k ? "," : "", transport_wire_name(k), sent[k]);
        fprintf(sf, "}}\n");
        fclose(sf);
    }
    free(ch);
    /* a poisoned member's refused messages lose its microbatches by design */
    return isnan(val) || (lost && !lo.poison_kind[0]) ? 1 : 0;
fail:
    fprintf(stderr, "swarmtrain local: cannot start peers: %s\n", strerror(errno));
    for (int i = 0; i < n; i++)
        if (ch[i].pid > 0 && !ch[i].exited) kill(ch[i].pid, SIGKILL);
    free(ch);
    return 1;
}
