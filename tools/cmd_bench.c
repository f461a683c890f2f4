/* cmd_bench.c — `swarmtrain bench TOPIC`: benchmarks that print ratios against a
 * baseline measured in the same run. Not for: tests (they assert; these measure). */
#include "tools/cmd.h"

#include <stdio.h>
#include <string.h>

int cmd_bench(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int, char **);
        const char *help;
    } topics[] = {
        {"model", bench_model, "training step of a config vs cblas_sgemm in the same run"},
        {"codecs", bench_codecs, "activation codecs and DeMo bytes vs memcpy / all-reduce"},
        {"store", bench_store, "checkpoint writes vs a plain SQLite write; step overhead"},
        {"swarm", bench_swarm, "local swarm tokens/s vs single-process train; wire bytes"},
        {"demo", bench_demo, "DeMo settings: bytes/param/step and val_loss vs AdamW"},
        {"swap", bench_swap, "CheckFree+ swaps: a rebuilt stage's held-out loss vs none"},
        {"learn", bench_learn, "the swarm with every mechanism vs AdamW: val_loss, ratio"},
    };
    int n = (int)(sizeof topics / sizeof topics[0]);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: swarmtrain bench <topic> [options]\n\ntopics:\n");
        for (int i = 0; i < n; i++) fprintf(f, "  %-8s %s\n", topics[i].name, topics[i].help);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(argv[1], topics[i].name)) return topics[i].run(argc - 1, argv + 1);
    fprintf(stderr, "swarmtrain bench: unknown topic '%s'\n", argv[1]);
    return 2;
}
