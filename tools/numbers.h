/* numbers.h — small numeric helpers the commands share (a sorted sample's median, a
 * sample's mean and range).
 * Not for: anything on a peer's path (peer/follow.c keeps its own pace median). */
#ifndef SWARMTRAIN_TOOLS_NUMBERS_H
#define SWARMTRAIN_TOOLS_NUMBERS_H

/* qsort's comparison of two doubles, ascending. */
int numbers_cmp(const void *a, const void *b);

/* Sorts x[0, n) ascending. */
void numbers_sort(double *x, int n);

/* The median of a sorted x[0, n), n >= 1: the mean of the middle two for even n. */
double numbers_median_sorted(const double *x, int n);

/* Mean, min and max of the finite x[0, n) (NAN each where none is). Returns how many were
 * finite. */
int numbers_stats(const double *x, int n, double *mean, double *lo, double *hi);

#endif
