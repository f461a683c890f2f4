/* bench_store.c — placeholder until the store benchmark lands; says so and fails. */
#include "tools/cmd.h"

#include <stdio.h>

int bench_store(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "swarmtrain bench store: not built yet\n");
    return 2;
}
