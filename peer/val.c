/* val.c — the validation part's bookkeeping (val.h). */
#include "peer/val.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void round_clear(val_round_t *r)
{
    free(r->got);
    memset(r, 0, sizeof *r);
    r->step = -1;
}

void val_init(val_t *v)
{
    memset(v, 0, sizeof *v);
    v->end.step = v->during.step = -1;
    v->loss = NAN;
}

void val_reset(val_t *v)
{
    round_clear(&v->end);
    round_clear(&v->during);
}

void val_free(val_t *v)
{
    val_reset(v);
}

int val_round_begin(val_round_t *r, int64_t step, int total, int whole)
{
    uint8_t *got = calloc(((size_t)(total > 0 ? total : 1) + 7) / 8, 1);
    if (!got) return STATUS_ENOMEM;
    round_clear(r);
    r->got = got;
    r->step = step;
    r->total = total;
    r->whole = whole;
    return 0;
}

int val_round_running(const val_round_t *r)
{
    return r->step >= 0;
}

int val_round_next(const val_round_t *r)
{
    return r->step >= 0 && r->next < r->total ? r->next : -1;
}

void val_round_sent(val_round_t *r)
{
    r->next++;
}

int val_round_add(val_round_t *r, int64_t step, uint32_t index, float loss)
{
    if (r->step < 0 || step != r->step || index >= (uint32_t)r->total || !isfinite(loss))
        return 0;
    uint8_t bit = (uint8_t)(1u << (index % 8));
    if (r->got[index / 8] & bit) return 0;
    r->got[index / 8] |= bit;
    if ((int)index >= r->whole)
        r->sum_skip += loss;
    else
        r->sum += loss;
    r->done++;
    return 1;
}

int val_round_complete(const val_round_t *r)
{
    return r->step >= 0 && r->done == r->total;
}

double val_round_mean(const val_round_t *r)
{
    return r->whole > 0 ? r->sum / r->whole : NAN;
}

double val_round_mean_skip(const val_round_t *r)
{
    return r->total > r->whole ? r->sum_skip / (r->total - r->whole) : NAN;
}

void val_round_end(val_round_t *r)
{
    r->step = -1;
}

int val_round_due(val_t *v, int64_t step, int every, int leading)
{
    if (every <= 0) return 0;
    if (!leading || step - v->seen > every) v->last = step;
    v->seen = step;
    return leading && step / every > v->last / every;
}
