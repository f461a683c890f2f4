/* peer_event.h — what a peer records of what happened: one call writes an event to the
 * peer's events file (peer --events: JSON lines, common/events.h) and to its store's
 * event table (--db; the detail is the same fields as a JSON object), so that there is
 * one record. docs/events.md lists the kinds and their fields. The peer's log says the
 * same for people; programs (local's summary, the tests) read this.
 * Not for: messages to people (the peer's log), metrics rows (peer_store_metric). */
#ifndef SWARMTRAIN_PEER_EVENT_H
#define SWARMTRAIN_PEER_EVENT_H

#include "common/events.h"
#include "peer/peer.h"
#include "peer/peer_store.h"

#include <stdint.h>

/* An event of kind `kind` (1..31 bytes of [a-z0-9_]) at the peer's stage and step, with
 * the fields of `fields`: space-separated key=%conversion items (common/events.h).
 * Nothing when the peer has neither an events file nor a store. */
void peer_event(peer_t *p, const char *kind, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

/* The same where there is no peer (before it exists, after it is gone) or only one of
 * the two records is meant (ps NULL: the events file only); ev and ps may be NULL;
 * stage, step < 0: none. */
void peer_event_to(events_t *ev, peer_store_t *ps, const char *kind, int stage, int64_t step,
                   const char *fields, ...) __attribute__((format(printf, 6, 7)));

#endif
