/* path.c — SkipPipe paths (path.h). */
#include "swarm/path.h"
#include "common/rng.h"
#include "common/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_SALT 0x736b697070697065ull /* "skippipe": paths draw from their own stream */

uint64_t path_skip(uint64_t seed, int64_t step, uint32_t index, int M, int S, double ratio)
{
    if (!(ratio > 0) || S <= 2 || S > PATH_STAGES_MAX || M <= 0 || index >= (uint32_t)M) return 0;
    if (ratio > 1) ratio = 1;
    int m = S - 2;
    /* T skips over the step's M x m (microbatch, middle stage) grid. Cell c of the
     * sequence 0..T-1 is a skip of middle-stage position c mod m by microbatch slot j,
     * the cells of j being [j*T/M, (j+1)*T/M): every position gets floor or ceil of T/m
     * (a contiguous run mod m), every slot floor or ceil of T/M distinct positions, and
     * slots next to each other skip positions next to each other in the cycle. */
    uint64_t T = (uint64_t)llround(ratio * (double)m * (double)M);
    rng_t r;
    rng_seed(&r, rng_mix(rng_mix(seed, PATH_SALT), (uint64_t)step));
    uint64_t rot = rng_below(&r, (uint64_t)M); /* which slot index 0 takes */
    int perm[PATH_STAGES_MAX];                 /* position -> middle stage */
    for (int i = 0; i < m; i++) perm[i] = i;
    for (int i = m - 1; i > 0; i--) {
        int k = (int)rng_below(&r, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    uint64_t j = (index + rot) % (uint64_t)M;
    uint64_t lo = j * T / (uint64_t)M, hi = (j + 1) * T / (uint64_t)M, skip = 0;
    for (uint64_t c = lo; c < hi; c++) skip |= 1ull << (1 + perm[c % (uint64_t)m]);
    return skip;
}

#define SWAP_SALT 0x73776170636b6670ull /* "swapckfp" */

int path_swap(uint64_t seed, int64_t step, uint32_t index, int M, int S, double share,
              uint64_t skip)
{
    if (!(share > 0) || S < 2 || S > PATH_STAGES_MAX - 2 || M <= 0 || index >= (uint32_t)M)
        return PATH_SWAP_NONE;
    if (share > 1) share = 1;
    /* Microbatch g = step M + index swaps when g share + u passes an integer (u drawn once
     * per run): the share holds over any run of microbatches, within one, also when a step
     * has few of them; the swaps take FRONT and END in turn. */
    if (step < 0) return PATH_SWAP_NONE;
    rng_t r;
    rng_seed(&r, rng_mix(seed, SWAP_SALT));
    double u = rng_uniform(&r), g = (double)step * M + index;
    double a = floor(g * share + u), b = floor((g + 1) * share + u);
    if (b <= a) return PATH_SWAP_NONE;
    int kind = S == 2 || fmod(a, 2) == 0 ? PATH_SWAP_FRONT : PATH_SWAP_END;
    int neighbour = kind == PATH_SWAP_FRONT ? 1 : S - 2;
    return path_on(skip, neighbour) ? kind : PATH_SWAP_NONE;
}

int path_hops(uint64_t skip, int swap, int S, path_hop_t *hops)
{
    int on[PATH_STAGES_MAX], n = 0, h = 0;
    for (int s = 0; s < S && s < PATH_STAGES_MAX; s = path_next(skip, s, S)) on[n++] = s;
#define HOP(st, pt) (hops[h++] = (path_hop_t){.stage = (st), .part = (pt)})
    if (swap == PATH_SWAP_FRONT && n >= 2 && on[1] == 1) {
        HOP(0, PATH_PART_EMBED);
        HOP(1, S == 2 ? PATH_PART_BLOCKS : PATH_PART_ALL);
        HOP(0, PATH_PART_BLOCKS);
        for (int i = 2; i < n; i++) HOP(on[i], PATH_PART_ALL);
        if (S == 2) HOP(1, PATH_PART_HEAD);
    } else if (swap == PATH_SWAP_END && S >= 3 && n >= 3 && on[n - 2] == S - 2) {
        for (int i = 0; i < n - 2; i++) HOP(on[i], PATH_PART_ALL);
        HOP(S - 1, PATH_PART_BLOCKS);
        HOP(S - 2, PATH_PART_ALL);
        HOP(S - 1, PATH_PART_HEAD);
    } else {
        for (int i = 0; i < n; i++) HOP(on[i], PATH_PART_ALL);
    }
#undef HOP
    return h;
}

int path_first_visit(const path_hop_t *hops, int h)
{
    for (int i = 0; i < h; i++)
        if (hops[i].stage == hops[h].stage) return i;
    return h;
}

int path_next(uint64_t skip, int s, int S)
{
    for (int t = s + 1; t < S; t++)
        if (path_on(skip, t)) return t;
    return S;
}

int path_valid(uint64_t skip, int S)
{
    if (S < 1 || S > PATH_STAGES_MAX) return 0;
    if (skip & 1) return 0;
    if ((skip >> (S - 1)) != 0) return 0; /* the last stage and anything past it */
    return 1;
}

uint32_t path_expected(uint64_t seed, int64_t step, int M, int S, double ratio, int stage,
                       uint8_t *bits)
{
    uint32_t n = 0;
    memset(bits, 0, ((size_t)M + 7) / 8);
    for (int i = 0; i < M; i++)
        if (path_on(path_skip(seed, step, (uint32_t)i, M, S, ratio), stage)) {
            bits[i >> 3] |= (uint8_t)(1u << (i & 7));
            n++;
        }
    return n;
}

int path_parse_stages(const char *list, int S, uint64_t *mask, char *err)
{
    uint64_t m = 0;
    const char *p = list ? list : "";
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) goto bad;
        p = end;
        if (*p == '-') {
            b = strtol(++p, &end, 10);
            if (end == p || b < a) goto bad;
            p = end;
        }
        for (long s = a; s <= b; s++) {
            if (S <= 2) {
                status_set(err, STATUS_EINVAL,
                           "skip stages '%s': %d stage(s) have no middle stage to leave out", list,
                           S);
                return -1;
            }
            if (s <= 0 || s >= S - 1 || s >= PATH_STAGES_MAX) {
                status_set(err, STATUS_EINVAL,
                           "skip stages '%s': stage %ld cannot be skipped (only 1..%d of %d "
                           "stages; the first and last always run)",
                           list, s, S - 2, S);
                return -1;
            }
            m |= 1ull << s;
        }
        if (*p == ',') {
            p++;
            if (!*p) goto bad;
        } else if (*p) {
            goto bad;
        }
    }
    *mask = m;
    return 0;
bad:
    status_set(err, STATUS_EINVAL, "skip stages '%s': expected a list like 1,2 or 1-2", list);
    return -1;
}

const char *path_format(uint64_t mask, char *buf, size_t n)
{
    size_t w = 0;
    if (!n) return buf;
    buf[0] = 0;
    if (!mask) {
        snprintf(buf, n, "none");
        return buf;
    }
    for (int s = 0; s < PATH_STAGES_MAX && w < n; s++)
        if ((mask >> s) & 1) {
            int k = snprintf(buf + w, n - w, "%s%d", w ? "," : "", s);
            if (k < 0) break;
            w += (size_t)k;
        }
    return buf;
}
