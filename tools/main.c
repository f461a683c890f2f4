/* main.c — the swarmtrain binary: dispatches to a subcommand. */
#include "tools/cmd.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} subcommand_t;

static const subcommand_t subcommands[] = {
    {"train", cmd_train, "train the model in one process (the baseline)"},
    {"bench", cmd_bench, "benchmarks: model, codecs, store"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: swarmtrain <command> [options]   (swarmtrain <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "swarmtrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
