/* timeout.h — a timeout as an object (TigerBeetle's Timeout, ae.c's time events): a name,
 * a wait, a deadline, attempts and backoff; started, restarted and stopped by name, and
 * asked whether it fired. A part of the peer keeps its timers as named fields of this
 * type, so that which timers run in which state is read off the part's struct, and the
 * loop can wake at the earliest deadline. Every name appears in docs/protocol.md's timer
 * table (tests/test_protocol_doc.c checks it).
 *
 * No clock: every call takes `now` (seconds, any origin). Not for: periodic work that
 * runs at every tick (that is a tick, not a timeout). */
#ifndef SWARMTRAIN_TIMEOUT_H
#define SWARMTRAIN_TIMEOUT_H

typedef struct {
    const char *name; /* "part.what", as in docs/protocol.md's timer table */
    double after_s;   /* the first wait */
    double backoff;   /* each attempt multiplies the wait by this (1: none) */
    double max_s;     /* the wait's ceiling (0: none) */
    double wait_s;    /* the current wait */
    double deadline;  /* when it fires; INFINITY while stopped */
    double started_at; /* when it was last started or retried */
    int attempts;     /* times it fired and was retried since started */
} timeout_t;

/* A stopped timeout named name whose wait is after_s (no backoff). */
timeout_t timeout_make(const char *name, double after_s);
/* Starts it afresh: attempts 0, the first wait, due at now + after_s. */
void timeout_start(timeout_t *t, double now);
/* Starts it afresh with a first wait of wait_s instead of after_s (its later waits are
 * after_s's, with the backoff). */
void timeout_start_for(timeout_t *t, double now, double wait_s);
/* Starts it unless it runs (a wait that began earlier keeps its deadline). */
void timeout_ensure(timeout_t *t, double now);
void timeout_stop(timeout_t *t);
int timeout_running(const timeout_t *t);
/* Whether it runs and its deadline has come. */
int timeout_fired(const timeout_t *t, double now);
/* Whether it is stopped or fired: a periodic action that is due at once the first time. */
int timeout_due(const timeout_t *t, double now);
/* After it fired: another attempt, the wait multiplied by the backoff (up to max_s), due
 * at now + that wait. */
void timeout_retry(timeout_t *t, double now);
/* The earlier of `at` and t's deadline (INFINITY for a stopped one): the loop's wake. */
double timeout_earliest(double at, const timeout_t *t);

#endif
