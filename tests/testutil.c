/* testutil.c — small helpers shared by the cmocka suites. */
#include "testutil.h"
#include "common/rng.h"
#include "model/data.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

const char *testutil_corpus(void)
{
    const char *env = getenv("SWARMTRAIN_CORPUS");
    return env && *env ? env : data_default_path();
}

const char *testutil_bin(void)
{
    const char *b = getenv("SWARMTRAIN_BIN");
    return b && *b ? b : "swarmtrain";
}

unsigned testutil_seed(void)
{
    const char *s = getenv("ST_TEST_SEED");
    return s && *s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
}

void testutil_fill_normal(float *x, size_t n, uint64_t seed, float std)
{
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * rng_normal(&r));
}

double testutil_norm_err(const float *a, const float *b, size_t n)
{
    double maxb = 0, maxd = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > maxb) maxb = fabs((double)b[i]);
    }
    return maxd / (maxb > 1e-30 ? maxb : 1e-30);
}

double testutil_max_rel(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double s = fmax(fmax(fabs((double)a[i]), fabs((double)b[i])), floor);
        double r = isnan(d) ? INFINITY : d / s;
        if (r > worst) worst = r;
    }
    return worst;
}

pid_t testutil_start(const char *log, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s %s", testutil_bin(), args);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

void *testutil_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (n >= 0 && !fseek(f, 0, SEEK_SET) && (s = malloc((size_t)n + 1))) {
        if (fread(s, 1, (size_t)n, f) == (size_t)n) {
            s[n] = 0;
            if (len) *len = (size_t)n;
        } else {
            free(s);
            s = NULL;
        }
    }
    fclose(f);
    return s;
}

int testutil_rmtree(const char *dir)
{
    char cmd[4200];
    if (strchr(dir, '\'')) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}
