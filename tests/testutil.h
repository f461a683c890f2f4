/* testutil.h — small helpers shared by the cmocka suites. */
#ifndef SWARMTRAIN_TESTUTIL_H
#define SWARMTRAIN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The default corpus (SWARMTRAIN_CORPUS, else the cache path tools/setup.sh writes). */
const char *testutil_corpus(void);
/* Path of the built swarmtrain binary (SWARMTRAIN_BIN, set by ctest). */
const char *testutil_bin(void);
/* A test's random seed: ST_TEST_SEED when set (to replay a failure), else the clock's. */
unsigned testutil_seed(void);
/* Fills x with N(0, std) numbers drawn from seed. */
void testutil_fill_normal(float *x, size_t n, uint64_t seed, float std);
/* max_i |a_i - b_i| / max(max_i |b_i|, tiny): error normalized by the reference's scale. */
double testutil_norm_err(const float *a, const float *b, size_t n);
/* max_i |a_i - b_i| / max(|a_i|, |b_i|, floor) */
double testutil_max_rel(const float *a, const float *b, size_t n, double floor);

/* Starts `swarmtrain ARGS` (the built binary, through sh: ARGS may quote) with its stdout
 * and stderr into the file at log; its pid, or -1 when it could not fork. */
pid_t testutil_start(const char *log, const char *args);
/* The whole file at path (caller frees), with a 0 byte after its last; *len (when len is
 * not NULL) its size. NULL when it cannot be opened or read. */
void *testutil_slurp(const char *path, size_t *len);

/* Removes a test's temporary directory and everything in it; 0 on success. */
int testutil_rmtree(const char *dir);

#endif
