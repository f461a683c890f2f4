/* msg.h — swarmtrain wire messages (docs/protocol.md): one header frame, encoded and
 * decoded here octet by octet, followed by zero or more opaque payload frames whose
 * count the message type fixes.
 *
 * Every header starts with the same 56 octets: magic "SWT", version, type, flags, a
 * reserved u16, the swarm id (u64), the sender's peer id (32 octets: its Ed25519 public
 * key) and a per-sender sequence number (u64). Type-specific fields follow. All
 * integers are little-endian. A decoder never trusts a length and never asserts on
 * input: anything malformed returns STATUS_EMALFORMED (STATUS_EVERSION for another
 * version) with one line in err.
 *
 * Not for: sockets (net.c) or what peers do with messages (peer/).
 */
#ifndef SWARMTRAIN_MSG_H
#define SWARMTRAIN_MSG_H

#include <stddef.h>
#include <stdint.h>

#define MSG_VERSION     8
#define MSG_ID_LEN      32   /* peer id: an Ed25519 public key */
#define MSG_SIDE_TAG    0x01 /* after the peer id: a side connection's routing id (one
                              * message: a probe, a HELLO), never the member connection's */
#define MSG_ADDR_MAX    255  /* longest endpoint string */
#define MSG_TEXT_MAX    1024 /* longest error / reason text */
#define MSG_ROUTE_MAX   64   /* most stages a route may name */
#define MSG_HEADER_MAX  4096 /* no header is longer */
#define MSG_MEMBERS_MAX 1024 /* most member entries in one table */
#define MSG_SIG_LEN     64   /* an Ed25519 signature */

typedef enum {
    MSG_HELLO = 1,       /* joiner -> any peer: here I am, tell me the swarm */
    MSG_WELCOME = 2,     /* -> joiner: payloads: run text, member table */
    MSG_GOSSIP = 3,      /* periodic: payload: the sender's member table */
    MSG_LEAVE = 4,       /* a peer leaves on purpose */
    MSG_FWD = 5,         /* activations forward; payloads: activation (codec), targets */
    MSG_BWD = 6,         /* gradient back (payload: codec) or, for validation, a loss */
    MSG_NACK = 7,        /* a FWD/BWD could not be taken; the custody holder reroutes */
    MSG_PROGRESS = 8,    /* pool member's completed microbatches of a step; payload: bitmap */
    MSG_STEP_DONE = 9,   /* stage 0's pool finished a step; every pool may step */
    MSG_EXCH = 10,       /* pool exchange: payloads: stage message, counted bitmap, the
                          * sender's exchange members of the step (ids) */
    MSG_STATE_REQ = 11,  /* ask a pool member for a chunk of its stage state */
    MSG_STATE_REP = 12,  /* a chunk of stage state; payload: the bytes */
    MSG_STATUS_REQ = 13, /* status tool -> peer */
    MSG_STATUS_REP = 14, /* peer -> status tool; payload: JSON */
    MSG_ERROR = 15,      /* a request failed; text says why */
    MSG_EXCH_REQ = 16,   /* ask a pool member for the EXCH of `origin` at a step (relay) */
    MSG_REDO = 17,       /* a pool -> stage 0: these microbatches of a step were lost here */
    MSG_RELAY = 18,      /* a message for an unreachable member, through a relay; payloads:
                          * the message's own frames, header first (1 to MSG_RELAY_FRAMES) */
    MSG_PROBE = 19,      /* SWIM membership (run key membership=swim): a ping, its ack, a
                          * request to ping another, or news; payload: a member table, the
                          * sender's own entry first, then news (docs/protocol.md 10.4) */
    MSG_TYPE_MAX = 19
} msg_type_t;

/* Member states as gossiped. */
typedef enum {
    MEMBER_JOINING = 0, /* downloading its stage's state */
    MEMBER_SERVING = 1,
    MEMBER_LEAVING = 2,
    MEMBER_DEAD = 3, /* never sent by its owner; in GOSSIP: a probe candidate (members.h);
                      * in a PROBE's news: the sender declared it dead */
    MEMBER_SUSPECT = 4 /* never sent by its owner; only in a PROBE's news: the sender
                        * suspects it (it failed a ping and the pings asked of others) */
} member_state_t;

/* PROBE kinds (msg_t.probe_kind). */
enum {
    PROBE_PING = 0, /* answer with an ACK of the same probe number */
    PROBE_ACK = 1,  /* target answered probe number `probe` (directly, or through the sender) */
    PROBE_REQ = 2,  /* ping target for me; send me its ACK with my probe number */
    PROBE_NEWS = 3, /* nothing to answer: the table's news */
    PROBE_SYNC = 4, /* send me your whole table (a TABLE) */
    PROBE_TABLE = 5, /* the sender's whole live table, an answer to SYNC: merged, no news */
    PROBE_MISS = 6,  /* asked by a REQ of probe number `probe`: target did not answer me */
    PROBE_ASK = 7,   /* woken from a pause (pause number `probe`): am I still in the run? */
    PROBE_ANSWER = 8, /* to an ASK of number `probe`: I am alive (flags: in doubt myself) */
    PROBE_MEND = 9,   /* what you send me goes missing: open your connection to me anew */
    PROBE_KINDS
};

/* The most frames a RELAY carries: a whole message, its header and at most 4 payloads. */
#define MSG_RELAY_FRAMES 5

/* An unreachable member (docs/protocol.md 3.4) accepts no connections: its endpoint (HELLO
 * addr, member entry addr) is MSG_RELAY_SCHEME followed by the 64 lowercase hex digits of
 * the member it names as its relay, or by nothing while it names none. */
#define MSG_RELAY_SCHEME "relay:"

/* One member as a table entry (GOSSIP, WELCOME). */
#define MSG_CKPT_MAX 3 /* checkpoint steps a member table entry carries */

typedef struct {
    uint8_t id[MSG_ID_LEN];
    char addr[MSG_ADDR_MAX + 1];
    int16_t stage;
    uint8_t state;        /* member_state_t */
    uint64_t heartbeat;   /* incremented by the owner; higher wins */
    int64_t step;         /* the owner's pool step */
    int64_t serving_from; /* first step whose exchange it joins */
    float throughput;     /* samples per second, EMA */
    float loss;           /* last training loss it saw (last stage) or NaN */
    uint64_t served;      /* microbatches it processed */
    uint64_t bytes_in, bytes_out;
    uint64_t retries;  /* microbatches it re-sent to another peer */
    uint64_t rejected; /* malformed messages it refused */
    uint32_t uptime_s;
    /* a peer resuming from its store (peer --resume): the steps of its stage's newest
     * checkpoints, newest first, 0 for none (a step-0 checkpoint holds nothing learned);
     * all 0 otherwise */
    int64_t ckpt[MSG_CKPT_MAX];
    uint8_t sig[MSG_SIG_LEN]; /* the owner's Ed25519 signature of the entry (msg_member_sign) */
} msg_member_t;

/* LEAVE codes: 0, the sender stops (asked to, or a fault); MSG_LEAVE_RUN_OVER, the run is
 * over (the sender finished it): a member that missed the run's end (asleep, cut off)
 * learns it from this. */
#define MSG_LEAVE_RUN_OVER 1

/* FWD flags: a re-run of a microbatch some pool lost; only pools that miss it count it. */
#define MSG_FLAG_REDO 0x02

/* Microbatch identity: (step, index) within the swarm, plus the attempt. */
typedef struct {
    int64_t step;
    uint32_t index;
    uint16_t attempt;
    uint8_t kind; /* 0 train, 1 validation */
} msg_mb_t;

typedef struct {
    /* common header */
    uint8_t type, flags;
    uint64_t swarm;
    uint8_t sender[MSG_ID_LEN];
    uint64_t seq;
    /* HELLO, WELCOME: the sender's endpoint; HELLO: wanted stage (-1 any) */
    char addr[MSG_ADDR_MAX + 1];
    int16_t stage; /* HELLO, PROGRESS, EXCH, STATE_*, FWD/BWD (receiving stage) */
    /* FWD, BWD, NACK */
    msg_mb_t mb;
    uint8_t nroute; /* FWD, BWD: peers on the path so far */
    uint8_t route[MSG_ROUTE_MAX][MSG_ID_LEN];
    float loss; /* BWD: the microbatch's loss */
    uint64_t skip; /* FWD, BWD, NACK: the stages the microbatch's path leaves out (bit s:
                    * stage s, swarm/path.h); bit 0 set is malformed */
    /* PROGRESS, STEP_DONE, EXCH, STATE_* */
    int64_t step;
    uint32_t count; /* PROGRESS: microbatches per step (bitmap bits); EXCH: microbatches;
                     * PROBE: the sender's live members, itself included */
    uint64_t hash;  /* EXCH: sender's parameter hash at the start of the step */
    int64_t since;  /* EXCH: the first step the sender contributed to (seniority) */
    uint8_t origin[MSG_ID_LEN]; /* EXCH, EXCH_REQ: whose exchange message (a relay) */
    uint8_t dest[MSG_ID_LEN];   /* RELAY: the member the relayed message is for; PROBE: the
                                 * member probed (PING, ACK, REQ) */
    uint8_t probe_kind;         /* PROBE: PROBE_PING ... */
    uint64_t probe;             /* PROBE: the prober's probe number */
    /* STATE_REQ / STATE_REP */
    uint64_t offset, total;
    uint32_t length;
    uint8_t state_hash[32];
    /* ERROR, LEAVE, NACK */
    int16_t code;
    char text[MSG_TEXT_MAX + 1];
    /* HELLO, LEAVE: the sender's signature of the header's other octets (msg_sign) */
    uint8_t sig[MSG_SIG_LEN];
} msg_t;

/* Number of payload frames a type carries; -1 for RELAY, whose payloads are a whole
 * message (1 to MSG_RELAY_FRAMES frames). */
int msg_payloads(int type);

/* Encodes m's header into buf (cap bytes); the length in *len. STATUS_EINVAL if a field
 * is out of range (text too long, nroute > MSG_ROUTE_MAX, unknown type) or cap too small. */
int msg_encode(const msg_t *m, uint8_t *buf, size_t cap, size_t *len, char *err);

/* Decodes a header frame into *m. Never reads outside buf[0, len). */
int msg_decode(const uint8_t *buf, size_t len, msg_t *m, char *err);

/* Member tables (GOSSIP and WELCOME payloads): count u32, then entries. */
size_t msg_members_size(const msg_member_t *v, int n);
int msg_members_encode(const msg_member_t *v, int n, uint8_t *buf, size_t cap, size_t *len,
                       char *err);
/* Decodes at most max entries into v; *n receives the count. */
int msg_members_decode(const uint8_t *buf, size_t len, msg_member_t *v, int max, int *n, char *err);

/* Signed control messages (HELLO, LEAVE): their header ends with a 64-octet Ed25519
 * signature, by the sender's key, of every octet before it; `seq` is the sender's control
 * counter, which a receiver accepts only when greater than the last it accepted from that
 * sender (members.h). msg_signed says whether a type is one. msg_sign fills the last 64
 * octets of an encoded header; msg_verify checks them against the header's sender. A new
 * control type (a rebalancing or recovery decision) joins by being added to msg_signed and
 * given a `sig` field at the end of its header: net.c signs it whichever thread sends it,
 * and checks signature and counter on receipt. */
int msg_signed(int type);
void msg_sign(uint8_t *hdr, size_t len, const uint8_t sk[64]);
int msg_verify(const uint8_t *hdr, size_t len);

/* A member entry's signature covers "SWTM", the version octet and the entry encoded as
 * in a table without its signature. msg_member_sign fills e->sig with the owner's key;
 * msg_member_verify checks e->sig against e->id, reading e->state as `state` (a relayed
 * probe candidate says DEAD where its owner signed another state). 1 valid, 0 not. */
void msg_member_sign(msg_member_t *e, const uint8_t sk[64]);
int msg_member_verify(const msg_member_t *e, int state);

/* Whether addr is an unreachable member's endpoint (MSG_RELAY_SCHEME): 1, with the relay
 * it names in relay (when not NULL; 32 zero octets when it names none); 0 for any other
 * endpoint, or a relay endpoint whose id is not 64 lowercase hex digits (the decoders
 * refuse those). */
int msg_addr_relay(const char *addr, uint8_t relay[MSG_ID_LEN]);
/* Writes an unreachable member's endpoint naming relay (NULL: none yet) into addr. */
void msg_addr_set_relay(char addr[MSG_ADDR_MAX + 1], const uint8_t relay[MSG_ID_LEN]);

/* Name of a type for logs ("FWD"), "?" if unknown. */
const char *msg_type_name(int type);

/* Hex of the first 4 octets of an id, for logs and tables: buf holds 9 chars. */
const char *msg_id_short(const uint8_t id[MSG_ID_LEN], char buf[9]);

#endif
