/* local_opts.c — `swarmtrain local`'s own options (local.h): the swarm, its faults,
 * rebalancing; parsed with the run options every computing subcommand shares
 * (run_opts.h), then checked together. Which words are local's own matters twice: here,
 * and when the other words go on to every peer (local_launch.c).
 * Not for: what local does with them. */
#include "tools/local.h"
#include "tools/run_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    O_PEERS = RUN_OPTS_EXTRA,
    O_DIR,
    O_INFLIGHT,
    O_KILL,
    O_PAUSE,
    O_DEAD_LINK,
    O_CUSTODY,
    O_JOIN,
    O_JOINSTAGE,
    O_JOINERS,
    O_QUIET,
    O_PTIMEOUT,
    O_REVIVE,
    O_CKEVERY,
    O_CKBUDGET,
    O_CHURN,
    O_CHURN_KILLS,
    O_CHURN_AT,
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

/* --pause PEER:SECONDS | random[:SECONDS] */
static int parse_pause(local_opts_t *lo, const char *arg)
{
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

/* --kill PEER:STEP | random | start */
static int parse_kill(local_opts_t *lo, const char *arg)
{
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
}

/* --churn RATE[:RESTART_S] */
static int parse_churn(local_opts_t *lo, const char *arg)
{
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

/* --kill-stage STAGE:STEP | STAGE:random */
static int parse_kill_stage(local_opts_t *lo, const char *arg)
{
    char tail[16] = "";
    if (sscanf(arg, "%d:%15s", &lo->kill_stage, tail) == 2 && !strcmp(tail, "random")) {
        lo->kill_stage_step = -1; /* drawn from --fault-seed once the run is known */
        return lo->kill_stage < 0 ? -1 : 0;
    }
    if (sscanf(arg, "%d:%d", &lo->kill_stage, &lo->kill_stage_step) != 2 || lo->kill_stage < 0 ||
        lo->kill_stage_step < 1) {
        fprintf(stderr,
                "swarmtrain local: --kill-stage STAGE:STEP|random, e.g. --kill-stage 1:40\n");
        return -1;
    }
    return 0;
}

/* --stage-failures K[:RESTART_S] */
static int parse_stage_failures(local_opts_t *lo, const char *arg)
{
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

/* --fault-seed N */
static int parse_seed(local_opts_t *lo, const char *arg)
{
    char *end;
    lo->fault_seed = strtoull(arg, &end, 0);
    if (*end || !*arg) {
        fprintf(stderr, "swarmtrain local: --fault-seed N\n");
        return -1;
    }
    return 0;
}

/* --poison PEER:KIND (tests only) */
static int parse_poison(local_opts_t *lo, const char *arg)
{
    if (sscanf(arg, "%d:%15s", &lo->poison_peer, lo->poison_kind) != 2 || lo->poison_peer < 0) {
        fprintf(stderr, "swarmtrain local: --poison PEER:nan|huge|index|mix\n");
        return -1;
    }
    return 0;
}

/* --placement N0,N1,...: peers on each stage */
static int parse_placement(local_opts_t *lo, const char *arg)
{
    lo->nplacement = 0;
    for (const char *a = arg; *a;) {
        char *end;
        long v = strtol(a, &end, 10);
        if (end == a || v < 1 || v > LOCAL_MAX_PEERS / 2 || lo->nplacement == 64 ||
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

/* --slowdown PEER:X,...; "*:X" for every peer. The peers not named become emulated
 * devices of this CPU's speed (--slowdown 1): every peer's compute is then timed on the
 * same clock, its CPU seconds. */
static int parse_slowdown(local_opts_t *lo, const char *arg)
{
    for (int i = 0; i < LOCAL_MAX_PEERS; i++)
        if (!lo->slowdown[i][0]) snprintf(lo->slowdown[i], sizeof lo->slowdown[i], "1");
    for (const char *a = arg; *a;) {
        int peer = -1, k = 0, ok;
        double x = 0;
        if (!strncmp(a, "*:", 2)) {
            ok = sscanf(a + 2, "%lf%n", &x, &k) == 1;
            k += 2;
        } else {
            ok = sscanf(a, "%d:%lf%n", &peer, &x, &k) == 2 && peer >= 0 && peer < LOCAL_MAX_PEERS;
        }
        if (!ok || !(x >= 1 && x <= 1000) || (a[k] && a[k] != ',')) {
            fprintf(stderr, "swarmtrain local: --slowdown PEER:X,... (1 <= X <= 1000; *:X for "
                            "every peer), e.g. --slowdown 3:4\n");
            return -1;
        }
        for (int i = peer < 0 ? 0 : peer; i < (peer < 0 ? LOCAL_MAX_PEERS : peer + 1); i++)
            snprintf(lo->slowdown[i], sizeof lo->slowdown[i], "%g", x);
        a += k + (a[k] == ',');
    }
    return 0;
}

/* The peers' own options that local checks before passing them on as they are. */
static int check_peer_option(int c, const char *arg)
{
    float f;
    int n;
    double share;
    switch (c) {
    case O_COPY_BUDGET:
        return run_opts_copy_budget(arg, &share);
    case O_RECOVERY:
        if (strcmp(arg, "auto") && strcmp(arg, "checkfree") && strcmp(arg, "checkpoint")) {
            fprintf(stderr, "swarmtrain local: --stage-recovery auto|checkfree|checkpoint\n");
            return -1;
        }
        return 0;
    case O_NOREBAL: /* --no-rebalance, --no-early-exchange */
        return 0;
    case O_REBAL_MARGIN:
        return run_opts_float("--rebalance-margin", arg, &f);
    case O_REBAL_COOL:
        return run_opts_float("--rebalance-cooldown", arg, &f);
    case O_CKEVERY:
        return run_opts_int("--checkpoint-every", arg, 0, &n);
    case O_CKBUDGET:
        return run_opts_budget(arg, &share);
    default:
        return -1;
    }
}

/* run_opts_extra_t.handle: one of local's own options. */
static int local_option(void *ctx, int c, const char *arg)
{
    local_opts_t *lo = ctx;
    switch (c) {
    case O_PEERS:
        return run_opts_int("--peers", arg, 1, &lo->peers);
    case O_DIR:
        lo->dir = arg;
        return 0;
    case O_RESUME:
        lo->resume = 1;
        lo->dir = arg;
        return 0;
    case O_INFLIGHT:
        return run_opts_int("--in-flight", arg, 1, &lo->in_flight);
    case O_PTIMEOUT:
        lo->peer_timeout = arg;
        return 0;
    case O_QUIET:
        lo->quiet = 1;
        return 0;
    case O_SECURE:
        lo->secure = 1;
        return 0;
    case O_PLACEMENT:
        return parse_placement(lo, arg);
    case O_SLOWDOWN:
        return parse_slowdown(lo, arg);
    /* faults */
    case O_KILL:
        return parse_kill(lo, arg);
    case O_PAUSE:
        return parse_pause(lo, arg);
    case O_DEAD_LINK:
        if (!strcmp(arg, "random")) lo->dead_link = 1;
        else if (!strcmp(arg, "forward")) lo->dead_link = 2;
        else if (!strcmp(arg, "back")) lo->dead_link = 3;
        else if (!strcmp(arg, "pool")) lo->dead_link = 4;
        else {
            fprintf(stderr, "swarmtrain local: --dead-link random, forward, back or pool\n");
            return -1;
        }
        return 0;
    case O_CUSTODY: {
        float f;
        if (run_opts_float("--custody-timeout", arg, &f) || !(f > 0)) return -1;
        lo->custody_timeout = arg;
        return 0;
    }
    case O_CHURN:
        return parse_churn(lo, arg);
    case O_CHURN_KILLS:
        return run_opts_int("--churn-kills", arg, 1, &lo->churn_kills);
    case O_CHURN_AT:
        return run_opts_churn_at(arg, &lo->churn_at, &lo->churn_restart_s);
    case O_KILL_STAGE:
        return parse_kill_stage(lo, arg);
    case O_STAGE_FAILURES:
        return parse_stage_failures(lo, arg);
    case O_FAULT_SEED:
        return parse_seed(lo, arg);
    case O_POISON:
        return parse_poison(lo, arg);
    case O_JOIN:
        return run_opts_int("--join-at", arg, 0, &lo->join_step);
    case O_JOINSTAGE:
        return run_opts_int("--join-stage", arg, 0, &lo->join_stage);
    case O_JOINERS:
        return run_opts_int("--joiners", arg, 1, &lo->joiners);
    case O_REVIVE:
        lo->revive = 1;
        return 0;
    default:
        return check_peer_option(c, arg);
    }
}

int local_opts_own(const char *a, int *takes_arg)
{
    static const char *with_arg[] = {
        "--peers",          "--dir",          "--in-flight",  "--kill",        "--join-at",
        "--join-stage",     "--peer-timeout", "--churn",      "--churn-kills", "--fault-seed",
        "--churn-at",       "--poison",       "--kill-stage", "--resume",      "--stage-failures",
        "--placement",      "--slowdown",     "--pause",      "--joiners",     "--dead-link",
        "--custody-timeout"};
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

/* The options taken together: peers for the stages, placement, limits. 0, or 2 after
 * printing why. */
static int check(local_t *L)
{
    local_opts_t *lo = &L->lo;
    if (lo->peers > LOCAL_MAX_PEERS / 2) {
        fprintf(stderr, "swarmtrain local: at most %d peers\n", LOCAL_MAX_PEERS / 2);
        return 2;
    }
    int S = L->run.cfg.stages;
    if (lo->nplacement) {
        if (lo->nplacement != S) {
            fprintf(stderr, "swarmtrain local: --placement gives %d counts for %d stages\n",
                    lo->nplacement, S);
            return 2;
        }
        lo->peers = 0;
        for (int s = 0; s < S; s++) lo->peers += lo->placement[s];
        if (lo->peers > LOCAL_MAX_PEERS / 2) {
            fprintf(stderr, "swarmtrain local: at most %d peers\n", LOCAL_MAX_PEERS / 2);
            return 2;
        }
    }
    if (lo->peers < S) {
        fprintf(stderr, "swarmtrain local: %d peers cannot hold %d stages\n", lo->peers, S);
        return 2;
    }
    if (lo->kill_stage >= S) {
        fprintf(stderr, "swarmtrain local: --kill-stage %d: the run has %d stages\n",
                lo->kill_stage, S);
        return 2;
    }
    if (S > LOCAL_MAX_STAGES) {
        fprintf(stderr, "swarmtrain local: at most %d stages\n", LOCAL_MAX_STAGES);
        return 2;
    }
    if (lo->churn_at && (lo->churn_rate > 0 || lo->churn_kills)) {
        fprintf(stderr, "swarmtrain local: --churn-at draws its kills' steps; --churn and "
                        "--churn-kills draw them at a rate: one or the other\n");
        return 2;
    }
    return 0;
}

static const char intro[] =
    "Starts a whole swarm of peer processes on this machine (loopback), one stage\n"
    "each in turn, and watches it: step and loss, peers per pool, tokens/s, bytes/s\n"
    "on the wire, microbatches re-sent. Ctrl-C stops every peer cleanly. The exit\n"
    "status is 0 only if the run finished with a held-out loss and no microbatch was\n"
    "lost; the summary lists every peer that died unplanned. In the run directory:\n"
    "each peer's log (peerN.log, for people), its events (peerN.events.jsonl) and the\n"
    "summary built from them (summary.json), for programs (docs/events.md).\n"
    "Defaults here: --stages 2 --replicas 2 --optimizer demo --codec int8 --steps 1000\n"
    "--checkpoint-every 50 (each peer into its store in --dir).";

static const char usage[] =
    "swarm:\n"
    "  --peers N            peer processes (default 4); peer i takes stage i mod S\n"
    "  --dir DIR            logs and stores of the peers (default: a new /tmp dir)\n"
    "  --in-flight N        microbatches each stage-0 peer keeps in flight (default 2)\n"
    "  --peer-timeout S     silence after which a peer is dead (default 3)\n"
    "  --custody-timeout S  the peers' wait for a forward's gradient (default 60)\n"
    "  --kill random        one peer, any (the founding one too), SIGKILLed from outside\n"
    "                       at a random moment between 10% and 70% of the steps\n"
    "  --pause PEER:S       freeze peer PEER (SIGSTOP) for S seconds at a moment drawn\n"
    "                       from --fault-seed (between 10% and 70% of the steps),\n"
    "                       then SIGCONT: it must come back (--pause random[:S]: any\n"
    "                       peer, the founding one too; S 20 by default)\n"
    "  --dead-link W        the connection from one peer to a peer of the next stage\n"
    "                       (W forward: it carries activations; back: the other way,\n"
    "                       gradients; pool: to a peer of its own stage, the exchange;\n"
    "                       random: any of the three) dies with nothing to say so, at a\n"
    "                       moment drawn from --fault-seed between 10% and 40% of the\n"
    "                       steps: local takes the sender's identity over at the\n"
    "                       receiver's socket. The peers must notice and reconnect\n"
    "  --kill start         one peer but the founding one, drawn from --fault-seed,\n"
    "                       SIGKILLed from outside 0-3 s (drawn) after it was started,\n"
    "                       while the swarm starts: the others start without it\n"
    "  --churn RATE[:S]     SIGKILL random peers from outside, RATE per peer per minute\n"
    "                       (never the last of a stage), each replaced by a new peer\n"
    "                       of its stage S seconds later; the summary gives kills,\n"
    "                       restarts, re-routed and lost microbatches, and MTTR\n"
    "  --churn-kills N      at most N kills\n"
    "  --churn-at N[:S]     N SIGKILLs from outside at steps drawn from --fault-seed over\n"
    "                       the whole run (a random peer each, never the last of its\n"
    "                       stage), each replaced by a new peer of its stage S seconds\n"
    "                       later (default 3): churn spread over a long run, where\n"
    "                       --churn's capped kills all land in its first minute\n"
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
    "  --copy-budget P      the peers' --copy-budget: copies for recovery within P%\n"
    "                       of each keeper's activation/gradient bytes (default 5)\n"
    "  --fault-seed N       the seed of --kill random, --kill-stage, --churn and\n"
    "                       --churn-at (default: the clock)\n"
    "  --kill PEER:STEP     peer PEER is SIGKILLed (it kills itself) when a microbatch of\n"
    "                       step >= STEP reaches it, so it dies holding work (fault "
    "drill)\n"
    "  --join-at STEP       start one more peer at STEP, stage --join-stage (default 0)\n"
    "  --joiners N          start N peers at once at --join-at's step, all into that\n"
    "                       stage (a join burst; default 1)\n"
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
    "  --rebalance-cooldown S  the placement must have held S seconds (default 10)\n";

static const struct option extra[] = {{"peers", required_argument, 0, O_PEERS},
                                      {"dir", required_argument, 0, O_DIR},
                                      {"in-flight", required_argument, 0, O_INFLIGHT},
                                      {"kill", required_argument, 0, O_KILL},
                                      {"pause", required_argument, 0, O_PAUSE},
                                      {"dead-link", required_argument, 0, O_DEAD_LINK},
                                      {"custody-timeout", required_argument, 0, O_CUSTODY},
                                      {"join-at", required_argument, 0, O_JOIN},
                                      {"join-stage", required_argument, 0, O_JOINSTAGE},
                                      {"joiners", required_argument, 0, O_JOINERS},
                                      {"quiet", no_argument, 0, O_QUIET},
                                      {"peer-timeout", required_argument, 0, O_PTIMEOUT},
                                      {"revive", no_argument, 0, O_REVIVE},
                                      {"checkpoint-every", required_argument, 0, O_CKEVERY},
                                      {"checkpoint-budget", required_argument, 0, O_CKBUDGET},
                                      {"churn", required_argument, 0, O_CHURN},
                                      {"churn-kills", required_argument, 0, O_CHURN_KILLS},
                                      {"churn-at", required_argument, 0, O_CHURN_AT},
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

int local_opts_parse(local_t *L)
{
    local_opts_t *lo = &L->lo;
    memset(lo, 0, sizeof *lo);
    lo->peers = 4, lo->in_flight = 2, lo->kill_peer = -1, lo->join_step = -1, lo->joiners = 1,
    lo->poison_peer = -1;
    lo->pause_peer = -1;
    lo->kill_stage = -1;
    L->run = train_defaults();
    L->run.swim_every = TRAIN_SWIM_EVERY; /* SWIM unless --membership gossip */
    run_opts_extra_t x = {.opts = extra,
                          .n = sizeof extra / sizeof extra[0],
                          .handle = local_option,
                          .ctx = &L->lo,
                          .intro = intro,
                          .usage = usage};
    int rc = run_opts_parse("local", L->argc, L->argv, &L->run, &x);
    return rc ? (rc == 1 ? 1 : 2) : check(L);
}
