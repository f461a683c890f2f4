/* bench_codecs.c — placeholder until the codecs benchmark lands; says so and fails. */
#include "tools/cmd.h"

#include <stdio.h>

int bench_codecs(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "swarmtrain bench codecs: not built yet\n");
    return 2;
}
