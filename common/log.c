/* log.c — leveled logging to stderr, one line per call. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>

int log_level = LOG_INFO;

void log_write(int level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "swarmtrain: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], line);
}
