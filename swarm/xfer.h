/* xfer.h — chunked, hashed transfer of a stage's state between peers, both sides.
 *
 * The serving side keeps a snapshot: the state's bytes as of one step, sealed with its
 * BLAKE2b-256 hash. A joiner asks for chunks (STATE_REQ: stage, step, offset, length)
 * and every answer (STATE_REP) carries the snapshot's step, total size and hash, so the
 * joiner can fetch different chunks from different members at once and check that they
 * all sent the same snapshot. A snapshot is taken between two steps, never inside one:
 * its step is the step the pool is about to work on, and its parameters are the ones
 * every member held after applying step-1 (docs/protocol.md, "State transfer").
 *
 * The downloading side is a state machine: xfer_on_reply takes an answer,
 * xfer_next_requests says which chunk requests to send now, xfer_done says when the
 * bytes are whole and verified. It never waits, sleeps or reads a clock.
 *
 * Not for: what the bytes mean (peer/), taking them from a device (peer/).
 */
#ifndef SWARMTRAIN_XFER_H
#define SWARMTRAIN_XFER_H

#include "swarm/msg.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define XFER_CHUNK (1u << 20)

/* ---- serving ---- */

typedef struct {
    uint8_t *buf;
    size_t total, cap;
    int64_t step; /* -1: none */
    uint8_t hash[32];
} xfer_snap_t;

/* Makes room for `total` bytes (the caller fills the buffer, then seals). 0 or ENOMEM. */
int xfer_snap_reserve(xfer_snap_t *s, size_t total);
/* Marks the filled snapshot as the state of `step` and hashes it. */
void xfer_snap_seal(xfer_snap_t *s, int64_t step);
void xfer_snap_free(xfer_snap_t *s);

/* The answer to a chunk request: the reply header into *rep, its payload into
 * data and len. STATUS_ENOTFOUND (with the reason in err) if the snapshot is not the one
 * asked for or the range is outside it. */
int xfer_serve(const xfer_snap_t *s, const msg_t *req, msg_t *rep, const uint8_t **data,
               size_t *len, char *err);

/* A sealed snapshot shared by the compute thread, which takes it between two steps, and
 * the thread that owns the sockets, which answers chunk requests for its step from it
 * while the compute thread runs a pass (transport.h, serve_state). Nobody writes it once
 * sealed; the last holder's unref frees it. */
typedef struct {
    xfer_snap_t snap;
    int stage;
    uint8_t flags;    /* STATE_REP flags as of sealing (bit 0: training had begun) */
    /* fresh requests (step -1) it may answer too: while the member is at most fresh_steps
     * past its step and for fresh_s after it was handed over; 0: only its own step's */
    int fresh_steps;
    double fresh_s;
    _Atomic int refs;
    /* when a chunk of it was last served, in microseconds of the server's clock (either
     * side serves: xfer_shared_served), so that a download in progress keeps it */
    _Atomic int64_t served_us;
} xfer_shared_t;

/* A snapshot of `stage`'s state of `total` bytes to fill (snap.buf), then seal with
 * xfer_snap_seal; one reference. NULL on ENOMEM. */
xfer_shared_t *xfer_shared_new(int stage, size_t total);
/* One more holder; returns s. */
xfer_shared_t *xfer_shared_ref(xfer_shared_t *s);
/* A holder lets go (*s set to NULL); the last frees it. NULL-safe. */
void xfer_shared_unref(xfer_shared_t **s);
/* Whether s answers a fresh request (step -1) of a member now at step `at`, age_s after it
 * was taken: it is of that step, or at most fresh_steps older and at most fresh_s old. The
 * one rule of both answering sides (state.c between passes, net.c's socket thread). */
int xfer_shared_fresh(const xfer_shared_t *s, int64_t at, double age_s);
/* A chunk of s was served at `now` (seconds of the clock both serving sides share). */
void xfer_shared_served(xfer_shared_t *s, double now);
/* Whether a download of s is in progress at `now`: a chunk of it was served within the
 * last XFER_IN_USE_S. Its member keeps it rather than taking a newer one, which would
 * refuse the download's next chunks: on a thin link a state takes longer to download
 * than a snapshot stays fresh (`small`'s 77.5 MB at 100 Mbit/s: 6.2 s; fresh for 5 s),
 * and every download started over, for good. */
int xfer_shared_in_use(const xfer_shared_t *s, double now);
#define XFER_IN_USE_S 3.0

/* ---- downloading ---- */

typedef struct xfer xfer_t;

typedef struct {
    uint8_t to[MSG_ID_LEN];
    msg_t req; /* a STATE_REQ header to send to `to` */
} xfer_req_t;

/* A download of `stage`'s state of `total` bytes (the size both sides derive from the
 * run), at any step the donors offer. NULL on ENOMEM. */
xfer_t *xfer_new(int stage, size_t total);
/* A download of bytes [off, off + len) of such a state only (CheckFree+'s copies keep
 * the embedding, or the final norm and head, of a neighbour's state): the chunks start at
 * off, every answer must come from one snapshot (its step and hash), and the part is done
 * when every chunk is in; the snapshot's hash covers the whole state, so a part is not
 * checked against it. NULL on ENOMEM or a range outside [0, total) or empty. */
xfer_t *xfer_new_range(int stage, size_t total, size_t off, size_t len);
void xfer_destroy(xfer_t **x);

/* Takes a STATE_REP (header m, payload data/len). Returns 0 if it was used or ignored,
 * 1 if the donors disagree or moved on and the download starts over. */
int xfer_on_reply(xfer_t *x, const msg_t *m, const uint8_t *data, size_t len, double now);

/* A donor refused (ERROR: its snapshot is gone, or it does not serve the stage). The
 * download starts over from the snapshot the donors offer now. */
void xfer_on_refusal(xfer_t *x, const uint8_t from[MSG_ID_LEN]);

/* The requests to send now, to donors[0, n) (never self): up to 2 chunks in flight per
 * donor, a chunk asked again after `retry_s` unanswered, a fresh start when the first
 * answer does not come within retry_s. At most cap requests into out; returns the count. */
int xfer_next_requests(xfer_t *x, double now, const msg_member_t *donors, int n, double retry_s,
                       xfer_req_t *out, int cap);

/* 1 when every chunk is in and the bytes match the snapshot's hash, 0 while not yet,
 * -1 when they are whole but do not match (the download has started over). */
int xfer_done(xfer_t *x);

/* The snapshot's step (-1 before the first answer), its bytes (whole once done; a range
 * download: the range's len bytes). */
int64_t xfer_step(const xfer_t *x);
const uint8_t *xfer_data(const xfer_t *x);
/* When the answer that fixed the snapshot downloaded came (xfer_on_reply's now): what
 * went before was the wait for a donor's first answer. */
double xfer_fixed_at(const xfer_t *x);
/* When its first request went out (xfer_next_requests' now; 0: none yet): the download's
 * own time runs from here, a start over included. */
double xfer_first_asked_at(const xfer_t *x);
/* How many times the download started over. */
int xfer_restarts(const xfer_t *x);
/* Distinct donors that answered. */
int xfer_donors(const xfer_t *x);
/* The range fetched: its offset in the state and its length (a whole download: 0, total). */
size_t xfer_offset(const xfer_t *x);
size_t xfer_length(const xfer_t *x);

#endif
