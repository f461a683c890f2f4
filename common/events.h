/* events.h — the record of what happened, for programs: JSON lines, one object per event,
 * each with the fixed keys "t" (wall-clock seconds since the Unix epoch), "kind", "stage"
 * and "step" (null when there is none), then the event's own fields, numbers as numbers.
 * The swarm peer writes one (peer/peer_event.c, which puts the same fields into its
 * store's event table) and so does `train --events`; `local`'s summary and the tests read
 * them. docs/events.md lists the kinds and their fields.
 *
 * Fields are given as a printf format of space-separated key=%conversion items, so that
 * the compiler checks the arguments: "from=%d to=%d why=%s". Integer conversions (d i u)
 * become JSON numbers; f e g numbers, null when not finite; x X o strings of their digits
 * (hashes, ids); s strings, escaped (null for NULL). Precision and length modifiers apply
 * as in printf, flags and width to the strings only (a padded number is not JSON); no '*'.
 * A key is [a-z0-9_]+.
 * Not for: messages to people (common/log.h). */
#ifndef SWARMTRAIN_EVENTS_H
#define SWARMTRAIN_EVENTS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct events events_t;

/* Opens (creating it) the events file at path for appending: a record grows, as a store
 * does; whoever starts a fresh run empties the file first. NULL with the reason in err. */
events_t *events_open(const char *path, char *err);

/* Closes; NULL-safe, sets *ev to NULL. */
void events_close(events_t **ev);

/* Renders fmt's key=%conversion items with ap as JSON members ("key":value, comma
 * separated, no braces) into out[0, n). Returns the length; -1 when fmt is not such items
 * or out is too small: out then holds the members rendered before (still valid JSON). */
int events_fields(char *out, size_t n, const char *fmt, va_list ap);

/* The object {"stage":..,"step":..[,fields]} into out[0, n) (stage or step < 0: null);
 * fields from events_fields, NULL or "" for none. Returns the length (truncated to n-1). */
int events_object(char *out, size_t n, int stage, int64_t step, const char *fields);

/* Appends one event line: "t" now, kind, stage, step and the rendered fields. One write(2)
 * a line, so a process SIGKILLed right after has lost none of it. A failed write is said
 * once on stderr (common/log.h) and never stops the caller. NULL ev: nothing. */
void events_put(events_t *ev, const char *kind, int stage, int64_t step, const char *fields);

/* events_fields, then events_put. */
void events_add(events_t *ev, const char *kind, int stage, int64_t step, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
