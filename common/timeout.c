/* timeout.c — timeouts as objects (timeout.h). */
#include "common/timeout.h"

#include <math.h>

timeout_t timeout_make(const char *name, double after_s)
{
    timeout_t t = {.name = name, .after_s = after_s, .backoff = 1.0, .wait_s = after_s,
                   .deadline = INFINITY};
    return t;
}

void timeout_start(timeout_t *t, double now)
{
    t->attempts = 0;
    t->wait_s = t->after_s;
    t->started_at = now;
    t->deadline = now + t->wait_s;
}

void timeout_start_for(timeout_t *t, double now, double wait_s)
{
    timeout_start(t, now);
    t->deadline = now + wait_s;
}

void timeout_ensure(timeout_t *t, double now)
{
    if (!timeout_running(t)) timeout_start(t, now);
}

void timeout_stop(timeout_t *t)
{
    t->deadline = INFINITY;
}

int timeout_running(const timeout_t *t)
{
    return t->deadline < INFINITY;
}

int timeout_fired(const timeout_t *t, double now)
{
    return timeout_running(t) && now >= t->deadline;
}

int timeout_due(const timeout_t *t, double now)
{
    return !timeout_running(t) || now >= t->deadline;
}

void timeout_retry(timeout_t *t, double now)
{
    t->attempts++;
    t->wait_s *= t->backoff > 0 ? t->backoff : 1.0;
    if (t->max_s > 0 && t->wait_s > t->max_s) t->wait_s = t->max_s;
    t->started_at = now;
    t->deadline = now + t->wait_s;
}

double timeout_earliest(double at, const timeout_t *t)
{
    return t->deadline < at ? t->deadline : at;
}
