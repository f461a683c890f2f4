/* main.c — the swarmtrain binary: dispatches to a subcommand. */
#include "common/log.h"
#include "kernels/kernels.h"
#include "tools/cmd.h"
#include "st_version.h" /* written at build time (tools/version.cmake) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} subcommand_t;

static const subcommand_t subcommands[] = {
    {"local", cmd_local, "launch and watch a whole swarm on this machine"},
    {"peer", cmd_peer, "run one peer: start a swarm (--new) or join one (--join)"},
    {"status", cmd_status, "watch a live swarm: pools, peers, throughput, loss"},
    {"keygen", cmd_keygen, "write a key pair (identity, allowlists) or a swarm key"},
    {"train", cmd_train, "train the model in one process (the baseline)"},
    {"export", cmd_export, "write a model as model.safetensors + config.json (HF LLaMA)"},
    {"sample", cmd_sample, "generate text from an exported model or from stores"},
    {"bench", cmd_bench, "benchmarks: model, codecs, store, swarm"},
    {"sim", cmd_sim, "fault schedules of peers on a simulated network, replayable by seed"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: swarmtrain <command> [options]   (swarmtrain <command> --help)\n"
               "       swarmtrain --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
}

/* Thread pools and BLAS kernels are chosen when their libraries load, from the
 * environment, so the right settings need a fresh start of this process:
 * - OPENBLAS_CORETYPE when OpenBLAS would run generic kernels on a CPU it does not know
 *   (2-3x slower matrix products; kernels/kern_cpu.c);
 * - OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning, so peers
 *   sharing a machine's cores do not starve each other.
 * Either is left alone when the user set it. One re-exec at most (SWARMTRAIN_REEXEC). */
static void tune_environment(char **argv)
{
    if (getenv("SWARMTRAIN_REEXEC")) return;
    int again = 0;
    const char *core = kern_cpu_blas_better_core();
    if (core) again = !setenv("OPENBLAS_CORETYPE", core, 0);
    if (!getenv("OMP_WAIT_POLICY")) again |= !setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    if (!again) return;
    setenv("SWARMTRAIN_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* on failure: go on with the libraries as loaded */
}

int main(int argc, char **argv)
{
    tune_environment(argv);
    const char *lvl = getenv("SWARMTRAIN_LOG");
    if (lvl)
        log_level = !strcmp(lvl, "debug")   ? LOG_DEBUG
                    : !strcmp(lvl, "warn")  ? LOG_WARN
                    : !strcmp(lvl, "error") ? LOG_ERROR
                                            : LOG_INFO;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        printf("swarmtrain %s (git %s)\n", ST_VERSION, ST_GIT_COMMIT);
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "swarmtrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
