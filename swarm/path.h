/* path.h — SkipPipe paths: which stages a microbatch visits (docs/design-notes.md,
 * "Stage skipping"). A path is stage 0, the last stage, and the middle stages its skip
 * mask leaves in, in increasing order; bit s of the mask set means stage s is skipped.
 *
 * The training schedule is a pure function of (run seed, step, microbatch index, M, S,
 * skip ratio), so that the single-process baseline (peer/train.c), the source of a
 * microbatch (stage 0) and every pool that must know which microbatches of a step it
 * will see compute the same paths without a word on the wire. It is balanced: over the
 * M microbatches of a step every middle stage is skipped round(ratio * (S-2) * M) / (S-2)
 * times (floor or ceil), every microbatch skips floor or ceil of that total / M stages,
 * and consecutive microbatch indices (those in flight together) take their skips from
 * consecutive stages of a shuffled cycle, so no stage gets a burst (collision-aware).
 *
 * Not for: sending anything (peer/custody.c), or choosing peers within a stage (wiring.h).
 */
#ifndef SWARMTRAIN_PATH_H
#define SWARMTRAIN_PATH_H

#include <stddef.h>
#include <stdint.h>

#define PATH_STAGES_MAX 64 /* a mask has one bit per stage */

/* The skip mask of microbatch `index` (0..M-1) of `step` in a run of S stages that skips
 * a share `ratio` (0..1) of the middle stages. 0 (no skip) when ratio <= 0 or S <= 2. */
uint64_t path_skip(uint64_t seed, int64_t step, uint32_t index, int M, int S, double ratio);

/* Whether stage s is on the path of mask skip. */
static inline int path_on(uint64_t skip, int s)
{
    return s >= 0 && s < PATH_STAGES_MAX && !((skip >> s) & 1);
}

/* The next stage on the path after stage s (S when s is the last). */
int path_next(uint64_t skip, int s, int S);

/* The stage before s on the path (-1 when s is stage 0). */
int path_prev(uint64_t skip, int s);

/* How many stages of the path come before stage s (its hop number: the route length a
 * FWD to s carries). */
int path_hops_before(uint64_t skip, int s);

/* Whether skip is a valid mask for S stages: stage 0 and S-1 on the path, no bit >= S. */
int path_valid(uint64_t skip, int S);

/* Into bits (ceil(M/8) octets, bit i = microbatch i): the microbatches of `step` whose
 * path visits `stage`. Returns how many. */
uint32_t path_expected(uint64_t seed, int64_t step, int M, int S, double ratio, int stage,
                       uint8_t *bits);

/* Parses a stage list ("1,2", "1-2", "" for none) into a skip mask valid for S stages.
 * 0, or -1 with a message in err (STATUS_ERR_LEN) for a bad list, stage 0, the last
 * stage, or a stage >= S. */
int path_parse_stages(const char *list, int S, uint64_t *mask, char *err);

/* "1,2" for a mask (buf of n octets); "none" for 0. */
const char *path_format(uint64_t mask, char *buf, size_t n);

#endif
