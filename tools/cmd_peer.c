/* cmd_peer.c — `swarmtrain peer`: run one peer and join (or start) a swarm.
 * Not for: the peer itself (peer/peer.c). */
#include "common/events.h"
#include "common/status.h"
#include "peer/peer.h"
#include "swarm/handshake.h"
#include "swarm/http.h"
#include "tools/cmd.h"
#include "tools/peer_faults.h"
#include "tools/run_opts.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    O_NEW = RUN_OPTS_EXTRA,
    O_JOIN,
    O_LISTEN,
    O_NO_LISTEN,
    O_ADV,
    O_STAGE,
    O_INFLIGHT,
    O_SLOTS,
    O_PTIMEOUT,
    O_CUSTODY,
    O_DB,
    O_STAY,
    O_WAIT,
    O_CKEVERY,
    O_CKBUDGET,
    O_RESUME,
    O_RECOVERY,
    O_KEY,
    O_SWARMKEY,
    O_ALLOW,
    O_POISON,
    O_NOREBAL,
    O_REBAL_MARGIN,
    O_REBAL_COOL,
    O_SLOWDOWN,
    O_EARLY,
    O_COPY_BUDGET,
    O_EVENTS
};

/* This process's fault drills (--poison, SWARMTRAIN_FAULT_DIE_AT_STEP): tests only. */
static peer_drills_t drills = {.die_at_step = -1};
static const char *events_path; /* --events FILE */
static int listen_set, no_listen;  /* --listen given; --no-listen */

static int peer_option(void *ctx, int c, const char *arg)
{
    peer_options_t *po = ctx;
    float f;
    switch (c) {
    case O_NEW:
        po->is_new = 1;
        return 0;
    case O_RESUME:
        po->resume = 1;
        return 0;
    case O_RECOVERY:
        if (!strcmp(arg, "auto")) po->stage_recovery = PEER_RECOVER_AUTO;
        else if (!strcmp(arg, "checkfree")) po->stage_recovery = PEER_RECOVER_CHECKFREE;
        else if (!strcmp(arg, "checkpoint")) po->stage_recovery = PEER_RECOVER_CHECKPOINT;
        else {
            fprintf(stderr, "swarmtrain peer: --stage-recovery auto|checkfree|checkpoint\n");
            return -1;
        }
        return 0;
    case O_JOIN:
        po->join = arg;
        return 0;
    case O_LISTEN:
        po->listen = arg;
        listen_set = 1;
        return 0;
    case O_NO_LISTEN:
        no_listen = 1;
        return 0;
    case O_ADV:
        po->advertise = arg;
        return 0;
    case O_STAGE:
        return run_opts_int("--stage", arg, 0, &po->stage);
    case O_INFLIGHT:
        return run_opts_int("--in-flight", arg, 1, &po->in_flight);
    case O_SLOTS:
        return run_opts_int("--slots", arg, 1, &po->slots);
    case O_PTIMEOUT:
        if (run_opts_float("--peer-timeout", arg, &f) || f <= 0) return -1;
        po->peer_timeout_s = f;
        return 0;
    case O_CUSTODY:
        if (run_opts_float("--custody-timeout", arg, &f) || f <= 0) return -1;
        po->custody_s = f;
        return 0;
    case O_DB:
        po->db = arg;
        return 0;
    case O_STAY:
        po->exit_when_done = 0;
        return 0;
    case O_WAIT:
        return run_opts_int("--wait-peers", arg, 0, &po->wait_peers);
    case O_CKEVERY:
        return run_opts_int("--checkpoint-every", arg, 0, &po->checkpoint_every);
    case O_CKBUDGET:
        return run_opts_budget(arg, &po->checkpoint_budget);
    case O_KEY:
        po->key_file = arg;
        return 0;
    case O_SWARMKEY:
        po->swarm_key = arg;
        return 0;
    case O_ALLOW:
        po->allow = arg;
        return 0;
    case O_POISON: /* tests only: a drill (tools/peer_faults.h) */
        if ((drills.poison = peer_poison_kind(arg)) < 0) {
            fprintf(stderr, "swarmtrain peer: --poison: nan, huge, index or mix\n");
            return 2;
        }
        return 0;
    case O_NOREBAL:
        po->no_rebalance = 1;
        return 0;
    case O_REBAL_MARGIN:
        if (run_opts_float("--rebalance-margin", arg, &f) || !(f > 0)) return -1;
        po->rebalance_margin = f;
        return 0;
    case O_REBAL_COOL:
        if (run_opts_float("--rebalance-cooldown", arg, &f) || !(f >= 0)) return -1;
        po->rebalance_cooldown_s = f;
        return 0;
    case O_COPY_BUDGET:
        return run_opts_copy_budget(arg, &po->copy_budget);
    case O_SLOWDOWN:
        if (run_opts_float("--slowdown", arg, &f) || !(f >= 1) || f > 1000) {
            fprintf(stderr, "swarmtrain peer: --slowdown X wants 1 <= X <= 1000\n");
            return -1;
        }
        po->slowdown = f;
        return 0;
    case O_EARLY:
        po->early_exchange = 0;
        return 0;
    case O_EVENTS:
        events_path = arg;
        return 0;
    default:
        return -1;
    }
}

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

int cmd_peer(int argc, char **argv)
{
    static const struct option extra[] = {{"new", no_argument, 0, O_NEW},
                                          {"join", required_argument, 0, O_JOIN},
                                          {"listen", required_argument, 0, O_LISTEN},
                                          {"no-listen", no_argument, 0, O_NO_LISTEN},
                                          {"advertise", required_argument, 0, O_ADV},
                                          {"stage", required_argument, 0, O_STAGE},
                                          {"in-flight", required_argument, 0, O_INFLIGHT},
                                          {"slots", required_argument, 0, O_SLOTS},
                                          {"peer-timeout", required_argument, 0, O_PTIMEOUT},
                                          {"custody-timeout", required_argument, 0, O_CUSTODY},
                                          {"db", required_argument, 0, O_DB},
                                          {"stay", no_argument, 0, O_STAY},
                                          {"wait-peers", required_argument, 0, O_WAIT},
                                          {"checkpoint-every", required_argument, 0, O_CKEVERY},
                                          {"checkpoint-budget", required_argument, 0, O_CKBUDGET},
                                          {"resume", no_argument, 0, O_RESUME},
                                          {"stage-recovery", required_argument, 0, O_RECOVERY},
                                          {"key", required_argument, 0, O_KEY},
                                          {"swarm-key", required_argument, 0, O_SWARMKEY},
                                          {"allow", required_argument, 0, O_ALLOW},
                                          {"poison", required_argument, 0, O_POISON},
                                          {"no-rebalance", no_argument, 0, O_NOREBAL},
                                          {"rebalance-margin", required_argument, 0, O_REBAL_MARGIN},
                                          {"rebalance-cooldown", required_argument, 0, O_REBAL_COOL},
                                          {"slowdown", required_argument, 0, O_SLOWDOWN},
                                          {"copy-budget", required_argument, 0, O_COPY_BUDGET},
                                          {"no-early-exchange", no_argument, 0, O_EARLY},
                                          {"events", required_argument, 0, O_EVENTS}};
    peer_options_t po = peer_defaults();
    run_opts_extra_t x = {
        .opts = extra,
        .n = sizeof extra / sizeof extra[0],
        .handle = peer_option,
        .ctx = &po,
        .intro = "Runs one peer. The first peer of a swarm starts it with --new and the run's\n"
                 "settings (the options below); every other peer joins through any live peer with\n"
                 "--join and is told the settings. SIGINT or SIGTERM: leave cleanly, exit 0.\n"
                 "Exit 3: the swarm refused this peer at the handshake (the message starts\n"
                 "with \"" HANDSHAKE_TOKEN "\" and says why), within 5 s of the start.",
        .usage =
            "swarm:\n"
            "  --new                start a new swarm with the run settings given here\n"
            "  --join ENDPOINT      join through a live peer, e.g. tcp://10.0.0.5:7000\n"
            "  --listen ENDPOINT    where to listen (default tcp://127.0.0.1:0, a free port)\n"
            "  --advertise ENDPOINT where others reach this peer (NAT, several interfaces)\n"
            "  --no-listen          accept no connections (behind NAT or a firewall that lets\n"
            "                       nothing in): serve over the connections this peer opens,\n"
            "                       and reach other such peers through a relay member\n"
            "                       (docs/protocol.md 3.4); not with --new, --listen, --advertise\n"
            "  --stage N            take stage N (default: the pool with least throughput)\n"
            "  --in-flight N        microbatches a stage-0 peer keeps in flight (default 2)\n"
            "  --slots N            activation slots (default 2 x in-flight + 2)\n"
            "  --peer-timeout S     silence after which a peer is dead (default 3)\n"
            "  --custody-timeout S  re-send a microbatch with no gradient back (default 60)\n"
            "  --db PATH            this peer's store: identity, metrics, events, checkpoints\n"
            "  --events FILE        append what happens (joined, moved, recovered, re-routes,\n"
            "                       each step, the end) to FILE as JSON lines (docs/events.md)\n"
            "  --checkpoint-every N checkpoint the stage into --db every N steps; a stage\n"
            "                       nobody else holds is restored from it (default 0: no)\n"
            "  --checkpoint-budget P percent of one CPU the checkpoint writer may use\n"
            "                       (default 3)\n"
            "  --resume             a whole swarm restarts from its peers' stores: this peer\n"
            "                       takes the stage of its newest checkpoint, and every\n"
            "                       resuming peer waits (up to 30 s, or for --wait-peers\n"
            "                       peers) until they agree on the newest step every stage\n"
            "                       has a checkpoint of; a stage with none is rebuilt from its\n"
            "                       neighbours (needs --db)\n"
            "  --stage-recovery M   a stage with no live peer: auto (default: a peer of a\n"
            "                       neighbouring pool moves there and rebuilds it by CheckFree,\n"
            "                       or CheckFree+ at the ends, and judges that against the copy\n"
            "                       of a middle stage's blocks the stage before it keeps, on\n"
            "                       held-out batches; a joiner with its own checkpoint of the\n"
            "                       stage restores that), checkfree (never checkpoints nor\n"
            "                       copies of middle stages),\n"
            "                       checkpoint (nobody moves; whoever comes back restores its\n"
            "                       checkpoint, else initial parameters)\n"
            "  --copy-budget P      the copies of the first or last stage's embedding or\n"
            "                       head that their neighbours keep (CheckFree+), and of a\n"
            "                       middle stage's blocks that the stage before it keeps, are\n"
            "                       fetched only while all stay within P percent of the\n"
            "                       activation/gradient bytes the keeper sent (default 5;\n"
            "                       0: the first copy of an end stage's part only)\n"
            "  --stay               keep serving after the run's last step\n"
            "  --wait-peers N       (--new) start training once N peers serve (default 0)\n"
            "security (docs/protocol.md section 15):\n"
            "  --key FILE           identity from `swarmtrain keygen` (default: the --db store's,\n"
            "                       else a fresh one)\n"
            "  --swarm-key FILE     CURVE on every connection; only holders of FILE may connect\n"
            "  --allow FILE         CURVE on every connection; only the public keys listed in\n"
            "                       FILE (one a line, hex) may connect\n"

            "  --no-rebalance       never move to another stage (default: move when that\n"
            "                       raises the slowest stage's throughput by the margin)\n"
            "  --rebalance-margin F the gain a move must bring (default 0.2: 20%)\n"
            "  --rebalance-cooldown S the placement must have held S seconds (default 10)\n"
            "  --slowdown X         an emulated device X times slower than this CPU (tests,\n"
            "                       demos): a unit of work keeps the peer busy X times the\n"
            "                       CPU seconds it took, asleep, and compute is timed in CPU\n"
            "                       seconds times X (without it: wall time)\n"
            "  --no-early-exchange  stage 0: send the exchange message only once the pool has\n"
            "                       counted the whole step (default: as soon as this peer's own\n"
            "                       share is counted, one delay less per step on slow links;\n"
            "                       docs/protocol.md 12.4)\n"};
    po.run.swim_every = TRAIN_SWIM_EVERY; /* a new swarm runs SWIM unless --membership gossip */
    int rc = run_opts_parse("peer", argc, argv, &po.run, &x);
    if (rc) return rc == 1 ? 0 : 2;
    if (!po.is_new == !po.join) {
        fprintf(stderr, "swarmtrain peer: give exactly one of --new and --join ENDPOINT\n");
        return 2;
    }
    if (no_listen && (po.is_new || listen_set || po.advertise)) {
        fprintf(stderr, "swarmtrain peer: --no-listen joins a swarm (--join) and takes neither "
                        "--listen nor --advertise: joiners reach the founder, and nobody reaches "
                        "this peer\n");
        return 2;
    }
    if (no_listen) po.listen = NULL; /* the network thread binds nothing (swarm/net.h) */
    if (po.resume && !po.db) {
        fprintf(stderr, "swarmtrain peer: --resume needs --db PATH (the store to resume from)\n");
        return 2;
    }
    po.data_path = po.run.data_path;
    po.device = po.run.device;
    po.threads = po.run.threads;
    po.log_every = po.run.log_every;
    if (!po.slots) po.slots = 2 * po.in_flight + 2;
    po.stop = &stop_requested;
    /* fault drills (local --kill): die on purpose when a microbatch of this step arrives */
    const char *die = getenv("SWARMTRAIN_FAULT_DIE_AT_STEP");
    if (die && *die) drills.die_at_step = atoll(die);
    signal(SIGPIPE, SIG_IGN);
    char err[STATUS_ERR_LEN];
    /* the record first: joining through a bootstrap list is recorded too */
    if (events_path && !(po.events = events_open(events_path, err))) {
        fprintf(stderr, "swarmtrain peer: --events: %s\n", err);
        return 1;
    }
    /* --join URL: a bootstrap list; the first endpoint that answers is joined through. As
     * with --join tcp://, whose HELLO is tried for 30 s, the peers named get 30 s to come up
     * (before the handlers below: Ctrl-C meanwhile ends the process at once) */
    char picked[256];
    if (po.join && http_is_url(po.join)) {
        if (http_bootstrap_pick(po.join, 2000, 30000, stderr, po.events, picked, sizeof picked, err)) {
            fprintf(stderr, "swarmtrain peer: --join %s: %s\n", po.join, err);
            events_close(&po.events);
            return 1;
        }
        po.join = picked;
    }
    drills.log = po.log;
    drills.events = po.events;
    po.faults = peer_drills_hooks(&drills);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int code = 0;
    if ((rc = peer_run(&po, err))) {
        fprintf(stderr, "swarmtrain peer: %s\n", err);
        code = rc == STATUS_EDENIED ? HANDSHAKE_EXIT_REFUSED : 1;
    }
    /* how it ended, and why when it failed (after the store has closed) */
    events_add(po.events, "exit", -1, -1, "code=%d status=%d error=%s", code, rc, rc ? err : NULL);
    events_close(&po.events);
    return code;
}
