/* cmd_sim.c — `swarmtrain sim`: runs N fault schedules of real peers on the simulated
 * network (sim/simrun.h), seeds X, X+1, ...; prints a line per failed schedule (and its
 * last events on stderr) and ends with exactly one line `sim: N schedules, F failed`.
 * `--seed X` replays one schedule exactly; with --trace it prints every event.
 * Not for: the simulator (swarm/sim.c) or the invariants (sim/simrun.c). */
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "sim/memsim.h"
#include "sim/simrun.h"
#include "model/train.h"
#include "tools/cmd.h"
#include "tools/run_opts.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: swarmtrain sim [options]\n"
            "Runs fault schedules of real peers (a tiny model) on a simulated network with a\n"
            "virtual clock, every choice drawn from the schedule's seed, and checks the\n"
            "swarm's promises after every event (DESIGN.md section 7).\n\n"
            "  --seeds N            schedules to run (default 100)\n"
            "  --first-seed X       the first schedule's seed (default 1); then X+1, ...\n"
            "  --seed X             replay one schedule (the same as --first-seed X --seeds 1)\n"
            "  --peers P            peers at the start (default 4)\n"
            "  --stages S           pipeline stages (default 2)\n"
            "  --pool N             members per pool: peers = N x stages (--members-per-pool)\n"
            "  --steps K            optimizer steps of the run (default 6)\n"
            "  --microbatches M     microbatches per step (default 4)\n"
            "  --faults LEVEL       none | mild | heavy | stage | restart | corrupt | pause |\n"
            "                       deadlink (mild, and a connection from one peer to another\n"
            "                       dying silently at 0.05 per virtual second: the peers must\n"
            "                       open it anew)\n"
            "                       (default mild; corrupt: mild, and 1%% of messages arrive\n"
            "                       with a frame cut short or a header bit flipped: each must\n"
            "                       be refused; pause: mild, and peers frozen for 1-20 s, as\n"
            "                       by SIGSTOP, then woken; stage: mild, and\n"
            "                       every peer of one stage crashes at once at a drawn step\n"
            "                       and moment: the swarm must rebuild it and finish;\n"
            "                       restart: mild, the peers keep stores (a checkpoint every\n"
            "                       1-3 steps), and at a drawn step every peer crashes, then\n"
            "                       all come back with --resume, some stores torn or lost:\n"
            "                       they must agree on the step the stores say and finish)\n"
            "  --plant-resume-bug   with --faults restart: a stage's newest checkpoint is torn\n"
            "                       off its disks after the checker read them: it must catch\n"
            "                       the peers agreeing on an older step\n"
            "  --restart-faults     with --faults restart: faults go on while the swarm\n"
            "                       restarts (default: none from the first crash until every\n"
            "                       stage serves again)\n"
            "  --set K=V,...        then set fault knobs (swarm/sim.h), e.g. dup_p=0,reset_p=0.01\n"
            "                       (repeated: each list in turn)\n"
            "  --optimizer NAME     adamw | demo (default: drawn from each seed)\n"
            "  --skip RATIO         SkipPipe: microbatches skip this share of middle-stage\n"
            "                       visits (default 0)\n"
            "  --skip-until F       skipping only in the first F of the steps (default: all)\n"
            "  --swap SHARE         CheckFree+: this share of microbatches swap the end\n"
            "                       stages' blocks, visiting stage 0 or S-1 twice (default 0)\n"
            "  --copy-budget P      the peers' --copy-budget: their copies of the end stages'\n"
            "                       parts and of middle stages' blocks within P percent of the\n"
            "                       activation and gradient bytes each sent (default 5; 0:\n"
            "                       the first copy of an end stage's part only)\n"
            "  --budget S           virtual seconds a run may take (default 600)\n"
            "  --plant-bug          a pool steps one microbatch short (at step 1): the checker\n"
            "                       must catch it\n"
            "  --placement N0,N1,.. the first peers stage by stage (default: in turn)\n"
            "  --moves RATE         ask random serving peers to move to another stage, RATE per\n"
            "                       virtual second (peers also rebalance on their own)\n"
            "  --rebalance-cooldown S  the peers' rebalancing cooldown (default 10)\n"
            "  --no-early-exchange  stage 0 sends its exchange messages only once the step is\n"
            "                       complete (the peers' --no-early-exchange)\n"
            "  --overlap            the run overlaps each step's exchange with the next step\n"
            "                       (overlap=1 in the run text: stage 0 sources ahead)\n"
            "  --outer H            local steps: the pools exchange once every H steps (DeMo,\n"
            "                       demo_local=H in the run text; docs/protocol.md 12.14)\n"
            "  --trace              print every event (with --seed)\n"
            "  --members-only       membership alone (sim/memsim.h): --peers nodes (up to\n"
            "                       4000) that only join and serve, --crashes K of them\n"
            "                       SIGKILLed after the swarm formed, for --seconds S (40);\n"
            "                       prints bytes per node by kind, detection times, false\n"
            "                       deaths; --set swim_every=4 for SWIM (dispatch.h). A\n"
            "                       schedule fails on a crash not detected by every node,\n"
            "                       one detected later than --detect-within S (the time\n"
            "                       the swarm was cut in two left out), a mean of\n"
            "                       membership+control above --sent-within B/s per node, or\n"
            "                       (faults none, mild) any live node declared dead (within\n"
            "                       10 s of a partition: not counted), or a swarm not formed\n"
            "                       (every live node holding every other) within\n"
            "                       --form-within S virtual s (default: the joins' span +\n"
            "                       120)\n"
            "  --quiet              no failure reports on stderr, only the result lines\n");
}

static int num(const char *opt, const char *v, long long min, long long max, long long *out)
{
    char *end;
    long long x = strtoll(v, &end, 0);
    if (!*v || *end || x < min || x > max) {
        fprintf(stderr, "swarmtrain sim: %s: '%s' is not a number in [%lld, %lld]\n", opt, v, min,
                max);
        return -1;
    }
    *out = x;
    return 0;
}

/* --members-only: schedules of membership alone (sim/memsim.h). */
static int members_run(memsim_options_t *mo, long long first, long long seeds,
                       double detect_within, double sent_within, int quiet)
{
    char err[STATUS_ERR_LEN];
    long long run = 0, failed = 0, crashes = 0, detected = 0, false_deaths = 0, measured = 0;
    double t0 = clock_now(), vsec = 0, dsum = 0, dmax = 0, sum[WIRE_KINDS] = {0},
           max[WIRE_KINDS] = {0}, form_max = 0;
    uint64_t events = 0;
    int strict = !strcmp(mo->faults, "none") || !strcmp(mo->faults, "mild");
    for (long long i = 0; i < seeds; i++) {
        memsim_result_t r;
        mo->seed = (uint64_t)(first + i);
        run++;
        if (memsim_one(mo, &r, err)) {
            fprintf(stderr, "swarmtrain sim: %s\n", err);
            failed++;
            break;
        }
        vsec += r.virtual_s;
        events += r.events;
        crashes += r.crashes;
        detected += r.detected;
        false_deaths += r.false_deaths;
        measured += r.measured;
        if (r.formed_at > form_max) form_max = r.formed_at;
        /* the bound reads detection net of partitions: across a cut nobody can hear of a
         * crash before the heal (the time printed is whole) */
        double sched_max = 0, whole_max = 0;
        for (int v = 0; v < MEMSIM_CRASH_MAX; v++)
            if (r.detect_s[v] > 0) {
                dsum += r.detect_s[v];
                if (r.detect_s[v] > dmax) dmax = r.detect_s[v];
                if (r.detect_s[v] > whole_max) whole_max = r.detect_s[v];
                if (r.detect_s[v] - r.cut_s[v] > sched_max) sched_max = r.detect_s[v] - r.cut_s[v];
            }
        for (int k = 0; k < WIRE_KINDS; k++) {
            sum[k] += r.sent_mean[k] * r.measured;
            if (r.sent_max[k] > max[k]) max[k] = r.sent_max[k];
        }
        double mc = r.sent_mean[WIRE_MEMB] + r.sent_mean[WIRE_CTL];
        if (!r.failed && detect_within > 0 && sched_max > detect_within) {
            r.failed = 1;
            snprintf(r.why, sizeof r.why, "a crash detected by every node after %.2f s, partitions "
                     "left out (bound %g)", sched_max, detect_within);
        }
        if (!r.failed && sent_within > 0 && mc > sent_within) {
            r.failed = 1;
            snprintf(r.why, sizeof r.why, "membership and control %.0f B/s per node (bound %g)",
                     mc, sent_within);
        }
        if (!r.failed && strict && r.false_deaths) {
            r.failed = 1;
            snprintf(r.why, sizeof r.why, "%d false deaths under faults %s: %s", r.false_deaths,
                     mo->faults, r.false_why);
        }
        if (r.failed) {
            failed++;
            char form[32] = "";
            if (mo->form_s > 0) snprintf(form, sizeof form, " --form-within %g", mo->form_s);
            printf("sim: seed %" PRIu64 " failed: %s (replay: swarmtrain sim --members-only --seed "
                   "%" PRIu64 " --peers %d --stages %d --crashes %d --seconds %g --faults %s%s%s%s)\n",
                   mo->seed, r.why, mo->seed, mo->nodes, mo->stages, mo->crashes,
                   mo->run_s > 0 ? mo->run_s : 40.0, mo->faults, form, mo->knobs ? " --set " : "",
                   mo->knobs ? mo->knobs : "");
        }
        if (seeds == 1 || !quiet)
            printf("sim: seed %" PRIu64 ": formed at %.1f s, %d nodes, %d killed, detected by every "
                   "node after %.2f s at most (%.2f s partitions left out), %d false deaths of %d "
                   "verdicts, membership+control %.0f B/s per node\n",
                   mo->seed, r.formed_at, r.nodes, r.crashes, whole_max, sched_max,
                   r.false_deaths, r.deaths_seen, mc);
        fflush(stdout);
    }
    printf("sim: members-only, %s membership: %.1f s, %.0f virtual s, %" PRIu64 " events, "
           "formed within %.1f virtual s\n",
           mo->knobs && strstr(mo->knobs, "swim_every") ? "SWIM" : "whole-table gossip",
           clock_now() - t0, vsec, events, form_max);
    printf("sim: bytes sent per node per virtual second after formation, mean (max):");
    for (int k = 0; k < WIRE_KINDS; k++)
        printf("%s %s %.0f (%.0f)", k ? "," : "", transport_wire_name(k),
               measured ? sum[k] / (double)measured : 0.0, max[k]);
    printf("\n");
    printf("sim: %lld crashes, %lld detected by every live node: mean %.2f s, max %.2f s; %lld "
           "false deaths\n",
           crashes, detected, detected ? dsum / (double)detected : 0.0, dmax, false_deaths);
    printf("sim: %lld schedules, %lld failed\n", run, failed);
    return failed ? 1 : 0;
}

int cmd_sim(int argc, char **argv)
{
    enum { O_SEEDS = 1000, O_FIRST, O_SEED, O_PEERS, O_STAGES, O_POOL, O_STEPS, O_MB, O_FAULTS,
           O_OPT, O_BUDGET, O_BUG, O_TRACE, O_QUIET, O_SET, O_HELP, O_SKIP, O_SWAP, O_PLACE, O_MOVES,
           O_COOL, O_EARLY, O_OVERLAP, O_RWILD, O_RBUG, O_MEMB, O_CRASHES, O_SECONDS, O_DETECT, O_SENT,
           O_FORM, O_OUTER, O_SKIPUNTIL, O_COPYBUDGET };
    static const struct option opts[] = {{"seeds", required_argument, 0, O_SEEDS},
                                         {"first-seed", required_argument, 0, O_FIRST},
                                         {"seed", required_argument, 0, O_SEED},
                                         {"peers", required_argument, 0, O_PEERS},
                                         {"stages", required_argument, 0, O_STAGES},
                                         {"pool", required_argument, 0, O_POOL},
                                         {"members-per-pool", required_argument, 0, O_POOL},
                                         {"steps", required_argument, 0, O_STEPS},
                                         {"microbatches", required_argument, 0, O_MB},
                                         {"faults", required_argument, 0, O_FAULTS},
                                         {"optimizer", required_argument, 0, O_OPT},
                                         {"budget", required_argument, 0, O_BUDGET},
                                         {"plant-bug", no_argument, 0, O_BUG},
                                         {"trace", no_argument, 0, O_TRACE},
                                         {"quiet", no_argument, 0, O_QUIET},
                                         {"set", required_argument, 0, O_SET},
                                         {"help", no_argument, 0, O_HELP},
                                         {"skip", required_argument, 0, O_SKIP},
                                         {"skip-until", required_argument, 0, O_SKIPUNTIL},
                                         {"swap", required_argument, 0, O_SWAP},
                                         {"copy-budget", required_argument, 0, O_COPYBUDGET},
                                         {"placement", required_argument, 0, O_PLACE},
                                         {"moves", required_argument, 0, O_MOVES},
                                         {"rebalance-cooldown", required_argument, 0, O_COOL},
                                         {"no-early-exchange", no_argument, 0, O_EARLY},
                                         {"overlap", no_argument, 0, O_OVERLAP},
                                         {"outer", required_argument, 0, O_OUTER},
                                         {"restart-faults", no_argument, 0, O_RWILD},
                                         {"plant-resume-bug", no_argument, 0, O_RBUG},
                                         {"members-only", no_argument, 0, O_MEMB},
                                         {"crashes", required_argument, 0, O_CRASHES},
                                         {"seconds", required_argument, 0, O_SECONDS},
                                         {"detect-within", required_argument, 0, O_DETECT},
                                         {"sent-within", required_argument, 0, O_SENT},
                                         {"form-within", required_argument, 0, O_FORM},
                                         {0, 0, 0, 0}};
    simrun_options_t o = simrun_defaults();
    o.faults = "mild";
    long long seeds = 100, first = 1, x, pool = 0;
    int trace = 0, quiet = 0, c, members_only = 0;
    memsim_options_t mo = memsim_defaults();
    double detect_within = 0, sent_within = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_SEEDS:
            if (num("--seeds", optarg, 1, 1LL << 40, &seeds)) return 2;
            break;
        case O_FIRST:
            if (num("--first-seed", optarg, 0, INT64_MAX, &first)) return 2;
            break;
        case O_SEED:
            if (num("--seed", optarg, 0, INT64_MAX, &first)) return 2;
            seeds = 1;
            break;
        case O_PEERS:
            if (num("--peers", optarg, 1, 4000, &x)) return 2;
            o.peers = (int)x;
            break;
        case O_MEMB:
            members_only = 1;
            break;
        case O_CRASHES:
            if (num("--crashes", optarg, 0, MEMSIM_CRASH_MAX, &x)) return 2;
            mo.crashes = (int)x;
            break;
        case O_SECONDS:
            if (num("--seconds", optarg, 1, 100000, &x)) return 2;
            mo.run_s = (double)x;
            break;
        case O_FORM:
            if (num("--form-within", optarg, 1, 100000, &x)) return 2;
            mo.form_s = (double)x;
            break;
        case O_DETECT:
        case O_SENT: {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v > 0)) {
                fprintf(stderr, "swarmtrain sim: %s: a number > 0\n",
                        c == O_DETECT ? "--detect-within" : "--sent-within");
                return 2;
            }
            *(c == O_DETECT ? &detect_within : &sent_within) = v;
            break;
        }
        case O_STAGES:
            if (num("--stages", optarg, 1, 64, &x)) return 2;
            o.stages = (int)x;
            break;
        case O_POOL:
            if (num("--pool", optarg, 1, 500, &pool)) return 2;
            break;
        case O_STEPS:
            if (num("--steps", optarg, 1, 1000, &x)) return 2;
            o.steps = (int)x;
            break;
        case O_MB:
            if (num("--microbatches", optarg, 2, 64, &x)) return 2;
            if (x & 1) {
                fprintf(stderr, "swarmtrain sim: --microbatches must be even (2 replicas)\n");
                return 2;
            }
            o.microbatches = (int)x;
            break;
        case O_PLACE:
            o.placement = optarg;
            break;
        case O_EARLY:
            o.early_exchange = 0;
            break;
        case O_OVERLAP:
            o.overlap = 1;
            break;
        case O_OUTER: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 1 || v > 1000) {
                fprintf(stderr, "swarmtrain sim: --outer: steps per round, 1 to 1000\n");
                return 2;
            }
            o.outer = (int)v;
            break;
        }
        case O_MOVES:
        case O_COOL: {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v >= 0) || v > 1000) {
                fprintf(stderr, "swarmtrain sim: %s: a number in [0, 1000]\n",
                        c == O_MOVES ? "--moves" : "--rebalance-cooldown");
                return 2;
            }
            if (c == O_MOVES)
                o.moves_rate = v;
            else
                o.rebalance_cooldown_s = v;
            break;
        }
        case O_FAULTS:
            if (strcmp(optarg, "none") && strcmp(optarg, "mild") && strcmp(optarg, "heavy") &&
                strcmp(optarg, "stage") && strcmp(optarg, "restart") &&
                strcmp(optarg, "corrupt") && strcmp(optarg, "pause") &&
                strcmp(optarg, "deadlink")) {
                fprintf(stderr, "swarmtrain sim: --faults: none, mild, heavy, stage, restart, "
                                "corrupt, pause or deadlink\n");
                return 2;
            }
            o.faults = optarg;
            break;
        case O_OPT:
            if (!strcmp(optarg, "adamw"))
                o.optimizer = TRAIN_ADAMW;
            else if (!strcmp(optarg, "demo"))
                o.optimizer = TRAIN_DEMO;
            else {
                fprintf(stderr, "swarmtrain sim: --optimizer: adamw or demo\n");
                return 2;
            }
            break;
        case O_BUDGET:
            if (num("--budget", optarg, 10, 1000000, &x)) return 2;
            o.budget_s = (double)x;
            break;
        case O_RWILD:
            o.restart_wild = 1;
            break;
        case O_RBUG:
            o.plant_tear = 1;
            break;
        case O_BUG:
            o.plant_bug = 1;
            break;
        case O_TRACE:
            trace = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_SET: { /* repeated: the lists join, in order (a later key wins) */
            static char knobs[1024];
            size_t n = strlen(knobs);
            if (snprintf(knobs + n, sizeof knobs - n, "%s%s", n ? "," : "", optarg) >=
                (int)(sizeof knobs - n)) {
                fprintf(stderr, "sim: --set: the knobs are longer than %zu characters\n",
                        sizeof knobs - 1);
                return 2;
            }
            o.knobs = knobs;
            break;
        }
        case O_SKIP:
        case O_SKIPUNTIL:
        case O_SWAP: {
            char *end;
            double *share = c == O_SKIP ? &o.skip : c == O_SKIPUNTIL ? &o.skip_until : &o.swap;
            *share = strtod(optarg, &end);
            if (end == optarg || *end || !(*share >= 0 && *share <= 1)) {
                fprintf(stderr, "swarmtrain sim: --%s: a share in [0, 1]\n",
                        c == O_SKIP ? "skip" : c == O_SKIPUNTIL ? "skip-until" : "swap");
                return 2;
            }
            break;
        }
        case O_COPYBUDGET:
            if (run_opts_copy_budget(optarg, &o.copy_budget)) return 2;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "swarmtrain sim: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (pool) o.peers = (int)pool * o.stages;
    if (o.outer > 0 && (o.optimizer == TRAIN_ADAMW || o.overlap)) {
        fprintf(stderr, "swarmtrain sim: --outer: DeMo's rounds, not with --optimizer adamw or "
                        "--overlap\n");
        return 2;
    }
    if (members_only) {
        mo.nodes = o.peers;
        mo.stages = o.stages;
        mo.faults = o.faults;
        mo.knobs = o.knobs;
        mo.trace = trace ? stdout : NULL;
        return members_run(&mo, first, seeds, detect_within, sent_within, quiet);
    }
    if (o.peers > 1000 || o.stages > 16) {
        fprintf(stderr, "swarmtrain sim: at most 1000 peers and 16 stages with a model (more "
                        "with --members-only)\n");
        return 2;
    }
    char dir[512], corpus[600], err[STATUS_ERR_LEN];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/swarmtrain-sim-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    if (simrun_corpus(dir, corpus, sizeof corpus, err)) {
        fprintf(stderr, "swarmtrain sim: %s\n", err);
        return 1;
    }
    o.data_path = corpus;
    /* faults restart: the peers' stores, removed after each schedule; in memory where
     * there is a tmpfs (a checkpoint commit syncs the file: on a disk that is most of a
     * schedule's time, and durability is not what the simulator tests) */
    char sdir[512];
    snprintf(sdir, sizeof sdir, "/dev/shm/swarmtrain-sim-%d", (int)getpid());
    int shm = !strcmp(o.faults, "restart") && !access("/dev/shm", W_OK) && !mkdir(sdir, 0700);
    o.store_dir = shm ? sdir : dir;
    o.trace = trace ? stdout : NULL;
    /* Peers' log lines (stderr) only when tracing: thousands of schedules would drown
     * the result lines; the trace and the failure report hold what matters. */
    if (!trace && !getenv("SWARMTRAIN_LOG")) log_level = LOG_ERROR;
    FILE *devnull = quiet ? fopen("/dev/null", "w") : NULL;
    o.report = devnull ? devnull : stderr;
    long long failed = 0, run = 0, crashes = 0, lost_stage = 0, stranded = 0;
    long long restarted = 0, kinds[5] = {0}, afresh = 0, same = 0, diff = 0;
    double t0 = clock_now(), vsec = 0;
    uint64_t events = 0, corrupted = 0, corrupt_refused = 0;
    double sent_sum[WIRE_KINDS] = {0}, sent_max[WIRE_KINDS] = {0};
    long long sent_peers = 0;
    for (long long i = 0; i < seeds; i++) {
        simrun_result_t r;
        o.seed = (uint64_t)(first + i);
        if (simrun_one(&o, &r, err)) {
            fprintf(stderr, "swarmtrain sim: %s\n", err);
            failed++;
            run++;
            break;
        }
        run++;
        crashes += r.crashes;
        lost_stage += r.stage_lost;
        stranded += r.stranded;
        vsec += r.virtual_s;
        corrupted += r.corrupted;
        corrupt_refused += r.corrupt_refused;
        sent_peers += r.sent_peers;
        for (int k = 0; k < WIRE_KINDS; k++) {
            sent_sum[k] += r.sent_mean[k] * r.sent_peers;
            if (r.sent_max[k] > sent_max[k]) sent_max[k] = r.sent_max[k];
        }
        if (r.restarted) {
            restarted++;
            if (r.resume_kind >= 0 && r.resume_kind < 5) kinds[r.resume_kind]++;
            afresh += r.resume_step == 0;
            same += r.replay_same;
            diff += r.replay_diff;
        }
        events += r.events;
        if (r.failed) {
            failed++;
            char moves[96] = "", outer[32] = "", until[40] = "", copies[40] = "";
            if (o.outer > 0) snprintf(outer, sizeof outer, " --outer %d", o.outer);
            if (o.skip_until > 0) snprintf(until, sizeof until, " --skip-until %g", o.skip_until);
            if (o.copy_budget != 0) /* -1: 0 percent (run_opts_copy_budget) */
                snprintf(copies, sizeof copies, " --copy-budget %g",
                         o.copy_budget < 0 ? 0.0 : 100.0 * o.copy_budget);
            if (o.moves_rate > 0 || o.rebalance_cooldown_s > 0)
                snprintf(moves, sizeof moves, " --moves %g --rebalance-cooldown %g", o.moves_rate,
                         o.rebalance_cooldown_s);
            printf("sim: seed %" PRIu64 " failed: %s (replay: swarmtrain sim --seed %" PRIu64
                   " --peers %d --stages %d --steps %d --microbatches %d --skip %g%s --swap %g "
                   "--faults %s%s%s%s%s%s%s%s%s%s%s%s%s%s)\n",
                   o.seed, r.why, o.seed, o.peers, o.stages, o.steps, o.microbatches, o.skip,
                   until, o.swap, o.faults,
                   o.knobs ? " --set " : "", o.knobs ? o.knobs : "",
                   o.optimizer < 0 ? "" : o.optimizer == TRAIN_DEMO ? " --optimizer demo"
                                                                    : " --optimizer adamw",
                   o.plant_bug ? " --plant-bug" : "", o.placement ? " --placement " : "",
                   o.placement ? o.placement : "", moves,
                   o.early_exchange ? "" : " --no-early-exchange", o.overlap ? " --overlap" : "",
                   o.restart_wild ? " --restart-faults" : "",
                   o.plant_tear ? " --plant-resume-bug" : "", outer, copies);
            fflush(stdout);
        }
        if (seeds == 1 && r.restarted)
            printf("sim: seed %" PRIu64 ": restarted (store fault %d), resumed from step %" PRId64
                   ", %d steps applied again with the same hash, %d with another\n",
                   o.seed, r.resume_kind, r.resume_step, r.replay_same, r.replay_diff);
        if (seeds == 1) /* what a replay compares */
            printf("sim: seed %" PRIu64 ": step %" PRId64 " applied, val_loss %.4f, %.1f virtual "
                   "s, %" PRIu64 " events, %d nodes, %d crashes, trace %016" PRIx64 "\n",
                   o.seed, r.steps_applied, r.val_loss, r.virtual_s, r.events, r.nodes, r.crashes,
                   r.trace_hash);
    }
    double wall = clock_now() - t0;
    printf("sim: %.1f s, %.1f schedules/s, %.0f virtual s, %" PRIu64 " events, %lld crashes, "
           "%lld schedules lost a whole stage, %lld peers stranded after the run (late "
           "joiners, cut off near its end)\n",
           wall, wall > 0 ? (double)run / wall : 0.0, vsec, events, crashes, lost_stage, stranded);
    /* what each peer sent per virtual second of its life, by kind: the mean over every
     * peer of every schedule, and the largest any peer sent */
    printf("sim: bytes sent per peer per virtual second, mean (max):");
    for (int k = 0; k < WIRE_KINDS; k++)
        printf("%s %s %.0f (%.0f)", k ? "," : "", transport_wire_name(k),
               sent_peers ? sent_sum[k] / (double)sent_peers : 0.0, sent_max[k]);
    printf("\n");
    if (corrupted)
        printf("sim: %" PRIu64 " messages corrupted, %" PRIu64 " refused\n", corrupted,
               corrupt_refused);
    if (restarted)
        printf("sim: %lld whole-swarm restarts (stores kept %lld, one lost %lld, a stage's newest "
               "checkpoint torn %lld, a stage's stores lost %lld, all lost %lld), %lld resumed "
               "afresh; steps applied again: %lld with the same hash as before the crash, %lld "
               "with another\n",
               restarted, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], afresh, same, diff);
    printf("sim: %lld schedules, %lld failed\n", run, failed);
    if (devnull) fclose(devnull);
    remove(corpus);
    rmdir(dir);
    if (shm) rmdir(sdir);
    return failed ? 1 : 0;
}
