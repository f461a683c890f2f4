/* peer_event.c — a peer's events, into its events file and its store (peer_event.h). */
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <stdarg.h>

static void put(events_t *ev, peer_store_t *ps, const char *kind, int stage, int64_t step,
                const char *fmt, va_list ap)
{
    char fields[3072], detail[3200];
    events_fields(fields, sizeof fields, fmt, ap);
    events_put(ev, kind, stage, step, fields);
    if (!ps) return;
    events_object(detail, sizeof detail, stage, step, fields);
    peer_store_event(ps, kind, "%s", detail);
}

void peer_event(peer_t *p, const char *kind, const char *fields, ...)
{
    if (!p->po.events && !p->ps) return;
    va_list ap;
    va_start(ap, fields);
    put(p->po.events, p->ps, kind, p->stage, p->step, fields, ap);
    va_end(ap);
}

void peer_event_to(events_t *ev, peer_store_t *ps, const char *kind, int stage, int64_t step,
                   const char *fields, ...)
{
    if (!ev && !ps) return;
    va_list ap;
    va_start(ap, fields);
    put(ev, ps, kind, stage, step, fields, ap);
    va_end(ap);
}
