/* path.h — SkipPipe paths: which stages a microbatch visits (docs/design-notes.md,
 * "Stage skipping"). A path is stage 0, the last stage, and the middle stages its skip
 * mask leaves in, in increasing order; bit s of the mask set means stage s is skipped.
 *
 * The training schedule is a pure function of (run seed, step, microbatch index, M, S,
 * skip ratio), so that the single-process baseline (model/train.c), the source of a
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

/* Whether skip is a valid mask for S stages: stage 0 and S-1 on the path, no bit >= S. */
int path_valid(uint64_t skip, int S);

/* Into bits (ceil(M/8) octets, bit i = microbatch i): the microbatches of `step` whose
 * path visits `stage`. Returns how many. */
uint32_t path_expected(uint64_t seed, int64_t step, int M, int S, double ratio, int stage,
                       uint8_t *bits);

/* ---- CheckFree+ swaps: a path's hops ---------------------------------------------------
 * A share of the training microbatches swap the order of neighbouring blocks at the ends
 * of the model, so that stage 1 learns to stand in for stage 0's blocks and stage S-2 for
 * stage S-1's (CheckFree+, docs/design-notes.md "Stage loss"). The embedding and the head
 * stay where they are, so a swapped microbatch visits stage 0 or S-1 twice:
 *   FRONT: 0 (embedding only), 1, 0 (blocks only), then the rest of its path;
 *   END:   its path up to before S-1, then S-1 (blocks only), S-2, S-1 (head only);
 * with S = 2 both are 0 (embedding), 1 (blocks), 0 (blocks), 1 (head): FRONT. A path's
 * hops are what the microbatch visits, in order; hop h's FWD carries nroute = h. */
#define PATH_SWAP_NONE 0
#define PATH_SWAP_FRONT 1
#define PATH_SWAP_END 2
#define PATH_HOPS_MAX (PATH_STAGES_MAX + 2)

/* What a hop runs of its stage (the values of model/stage.h's STAGE_PART_*). */
enum { PATH_PART_ALL, PATH_PART_EMBED, PATH_PART_BLOCKS, PATH_PART_HEAD };

typedef struct {
    int stage;
    int part;
} path_hop_t;

/* The swap of microbatch `index` of `step` (PATH_SWAP_*), a pure function like
 * path_skip: of any n consecutive microbatches (index by index, step by step) floor or
 * ceil of share * n swap, evenly spread, FRONT and END in turn (S >= 3). NONE when share <= 0, S < 2, S >
 * PATH_STAGES_MAX - 2 (the route would not fit), or the neighbour that would swap (stage
 * 1 or S-2) is not on the path of `skip`. */
int path_swap(uint64_t seed, int64_t step, uint32_t index, int M, int S, double share,
              uint64_t skip);

/* The hops of a path (skip mask, swap) into hops[PATH_HOPS_MAX]; returns how many. */
int path_hops(uint64_t skip, int swap, int S, path_hop_t *hops);

/* The first hop of hops[0..h] on hops[h]'s stage: h itself, or the earlier visit whose
 * peer (route[first]) must serve hop h too. */
int path_first_visit(const path_hop_t *hops, int h);

/* Parses a stage list ("1,2", "1-2", "" for none) into a skip mask valid for S stages.
 * 0, or -1 with a message in err (STATUS_ERR_LEN) for a bad list, stage 0, the last
 * stage, or a stage >= S. */
int path_parse_stages(const char *list, int S, uint64_t *mask, char *err);

/* "1,2" for a mask (buf of n octets); "none" for 0. */
const char *path_format(uint64_t mask, char *buf, size_t n);

#endif
