/* cmd_train.c — `swarmtrain train`: single-process training, the baseline.
 * Not for: the loop itself (model/train.c). */
#include "common/events.h"
#include "common/status.h"
#include "tools/cmd.h"
#include "tools/run_opts.h"

#include <stdio.h>

enum { O_DB = RUN_OPTS_EXTRA, O_CKEVERY, O_KEEP, O_RESUME, O_STOP, O_CKBUDGET, O_INIT, O_EVENTS };

static const char *events_path; /* --events FILE */

static int train_option(void *ctx, int c, const char *arg)
{
    train_options_t *o = ctx;
    switch (c) {
    case O_DB:
        o->db = arg;
        return 0;
    case O_CKEVERY:
        return run_opts_int("--checkpoint-every", arg, 0, &o->checkpoint_every);
    case O_KEEP:
        return run_opts_int("--keep", arg, 1, &o->keep);
    case O_RESUME:
        o->resume = 1;
        return 0;
    case O_STOP:
        return run_opts_int("--stop-after", arg, 1, &o->stop_after);
    case O_CKBUDGET:
        return run_opts_budget(arg, &o->checkpoint_budget);
    case O_INIT:
        o->init = arg;
        return 0;
    case O_EVENTS:
        events_path = arg;
        return 0;
    default:
        return -1;
    }
}

int cmd_train(int argc, char **argv)
{
    static const struct option extra[] = {{"db", required_argument, 0, O_DB},
                                          {"checkpoint-every", required_argument, 0, O_CKEVERY},
                                          {"keep", required_argument, 0, O_KEEP},
                                          {"checkpoint-budget", required_argument, 0, O_CKBUDGET},
                                          {"resume", no_argument, 0, O_RESUME},
                                          {"stop-after", required_argument, 0, O_STOP},
                                          {"init", required_argument, 0, O_INIT},
                                          {"events", required_argument, 0, O_EVENTS}};
    train_options_t o = train_defaults();
    /* the handler writes into the options being parsed, which start as a copy of o */
    run_opts_extra_t x = {
        .opts = extra,
        .n = sizeof extra / sizeof extra[0],
        .handle = train_option,
        .ctx = &o,
        .intro = "Trains the model in one process, the stages chained in memory.",
        .usage = "durability:\n"
                 "  --db PATH            SQLite store for checkpoints and metrics\n"
                 "  --checkpoint-every N background checkpoint every N steps (skipped while the\n"
                 "                       writer is busy or resting; the last step's always)\n"
                 "  --checkpoint-budget P percent of one CPU the checkpoint writer may use on\n"
                 "                       average (default 3; 100: no limit)\n"
                 "  --keep K             checkpoints kept (default 3)\n"
                 "  --resume             continue from the newest good checkpoint in --db\n"
                 "  --stop-after N       stop after N steps of this process (tests resume)\n"
                 "  --init FILE          start from this model.safetensors (an export, or any\n"
                 "                       file in its layout and of this model's shape)\n"
                 "record:\n"
                 "  --events FILE        append the run's steps, settings and validation losses\n"
                 "                       to FILE as JSON lines (docs/events.md)\n"};
    int rc = run_opts_parse("train", argc, argv, &o, &x);
    if (rc) return rc == 1 ? 0 : 2;
    char err[STATUS_ERR_LEN];
    if (events_path && !(o.events = events_open(events_path, err))) {
        fprintf(stderr, "swarmtrain train: --events: %s\n", err);
        return 1;
    }
    train_result_t r;
    rc = train_run(&o, &r, err);
    if (rc) fprintf(stderr, "swarmtrain train: %s\n", err);
    events_add(o.events, "exit", -1, -1, "code=%d status=%d error=%s", rc ? 1 : 0, rc,
               rc ? err : NULL);
    events_close(&o.events);
    return rc ? 1 : 0;
}
