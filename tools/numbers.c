/* numbers.c — see numbers.h. */
#include "tools/numbers.h"

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
