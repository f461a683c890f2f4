/* numbers.c — see numbers.h. */
#include "tools/numbers.h"

#include <math.h>
#include <stdlib.h>

int numbers_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void numbers_sort(double *x, int n)
{
    if (n > 1) qsort(x, (size_t)n, sizeof *x, numbers_cmp);
}

double numbers_median_sorted(const double *x, int n)
{
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int numbers_stats(const double *x, int n, double *mean, double *lo, double *hi)
{
    int k = 0;
    double s = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) continue;
        s += x[i], k++;
        if (x[i] < *lo) *lo = x[i];
        if (x[i] > *hi) *hi = x[i];
    }
    *mean = k ? s / k : NAN;
    if (!k) *lo = *hi = NAN;
    return k;
}
