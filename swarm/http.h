/* http.h — what swarmtrain fetches over HTTP(S) with libcurl: a training corpus into the
 * cache (resumed with Range requests after an interruption, checked against a SHA-256,
 * renamed into place only once verified), a manifest of shards assembled into one corpus,
 * and a bootstrap list of peer endpoints. Formats: docs/http-data.md.
 * Not for: the peer-to-peer wire (ZeroMQ, swarm/net.h) or reading the corpus (model/data.h).
 *
 * Checksums are SHA-256 (libsodium's crypto_hash_sha256), written as 64 lowercase hex
 * digits, so that `sha256sum FILE` on any machine gives the value a manifest or a
 * `URL#sha256=HEX` needs. Every call is blocking and may take as long as the transfer. */
#ifndef SWARMTRAIN_HTTP_H
#define SWARMTRAIN_HTTP_H

#include <stddef.h>
#include <stdio.h>

/* 64 hex digits and the NUL. */
#define HTTP_SHA256_HEX 65

typedef struct {
    const char *cache_dir;      /* NULL: $XDG_CACHE_HOME/swarmtrain, else ~/.cache/swarmtrain */
    const char *sha256;         /* expected SHA-256 (hex) of the corpus; NULL or "": none known,
                                 * the bytes fetched are taken and their checksum reported */
    int retries;                /* resumed attempts after a transfer broke off (default 0 = 3;
                                 * < 0: none, the .part file stays for the next call) */
    long connect_timeout_s;     /* 0: 10 s */
    long stall_timeout_s;       /* abort a transfer that moved no byte for this long; 0: 30 s */
    FILE *log;                  /* one line per download, resume and cache hit; NULL: silent */
    long long fail_write_after; /* tests only: body writes past this many bytes of one
                                 * transfer fail as if the disk were full (ENOSPC); 0: off */
} http_opts_t;

/* Whether s starts with http:// or https:// (case-insensitive). */
int http_is_url(const char *s);

/* The cache directory for o (see http_opts_t.cache_dir) into buf; 0, or STATUS_EINVAL
 * when it does not fit. The directory is not created. */
int http_cache_dir(const http_opts_t *o, char *buf, size_t n);

/* SHA-256 of a file's bytes as hex into hex[HTTP_SHA256_HEX]. 0, or a status (EIO)
 * with the reason in err. */
int http_sha256_file(const char *path, char *hex, char *err);

/* Makes the corpus that `--data URL` names available as one local file, and says where
 * it is (path, n bytes) and its SHA-256 (sha_out, may be NULL).
 * - URL may end in "#sha256=HEX": the corpus must have that checksum (as o->sha256; if
 *   both are given they must agree).
 * - What URL serves is either the corpus itself or a manifest (first line
 *   "swarmtrain-manifest 1"), whose shards are fetched, each checked against its size and
 *   SHA-256, and concatenated in order into one corpus file.
 * - Files land in <cache>/http/ under a name made from the URL; a download in progress is
 *   <name>.part and resumes with a Range request (If-Range: its ETag) on the next
 *   attempt; a finished download is renamed to <name> only after it verified. A cached
 *   file whose checksum matches is used without touching the network. Concurrent callers
 *   (peers sharing a machine) take turns through a lock file.
 * Returns 0, or: STATUS_ENET (host unreachable, transfer broke off and retries ran out:
 * the .part stays), STATUS_ENOTFOUND (HTTP 404), STATUS_ECORRUPT (checksum or size
 * mismatch; the bad file is deleted), STATUS_EFULL (disk full), STATUS_EMALFORMED (bad
 * manifest), STATUS_EIO, STATUS_EINVAL; err says which file, which host and what to do. */
int http_data_fetch(const char *url, const http_opts_t *o, char *path, size_t n, char *sha_out,
                    char *err);

/* The corpus a peer that has been told the run must read, before data_open: the run's
 * data_url and data_sha256 (train_options_t; either may be "" or NULL) against the peer's
 * own --data (local: a file, already fetched if it was a URL; NULL: none given).
 * - no checksum in the run: local as it is ("" into path when local is NULL: the default
 *   corpus);
 * - a checksum and local: local must hash to it (STATUS_ECORRUPT otherwise, err says
 *   both checksums);
 * - a checksum and no local: the run's URL is fetched into the default cache and verified
 *   (http_data_fetch; log gets its progress lines).
 * 0 with the file to open in path, or a status with the reason in err. */
int http_data_for_run(const char *local, const char *url, const char *sha256, FILE *log, char *path,
                      size_t n, char *err);

/* Reads the bootstrap list at url (HTTP or HTTPS; at most 1 MiB): one endpoint a line,
 * `tcp://HOST:PORT`, '#' starts a comment, blank lines are skipped. On success
 * *endpoints is a new array of *n new strings (caller frees with http_bootstrap_free) and
 * 0 is returned; a line that is not an endpoint fails the whole list (STATUS_EMALFORMED,
 * err names the line), as does a list with none (STATUS_ENOTFOUND); fetch errors as for
 * http_data_fetch. */
int http_bootstrap_list(const char *url, char ***endpoints, int *n, char *err);
void http_bootstrap_free(char ***endpoints, int n);

/* Whether something accepts TCP connections at endpoint (tcp://HOST:PORT) within
 * timeout_ms: 0, or STATUS_ENET / STATUS_ETIMEOUT / STATUS_EMALFORMED with the reason
 * ("connection refused", "no answer within 2000 ms", "cannot resolve host") in err. A
 * quick first filter before a peer's HELLO, which remains the real test of a swarm. */
int http_bootstrap_probe(const char *endpoint, int timeout_ms, char *err);

/* The whole of `--join URL` short of the swarm handshake: reads the list at url, probes
 * its endpoints in order (timeout_ms each) and copies the first that accepts a TCP
 * connection into endpoint (n bytes). Each endpoint that fails gets a line on log
 * ("join: tried tcp://...: Connection refused"). When none answers, or the list's server
 * cannot be reached, it tries again once a second (reading the list again) until wait_ms
 * has passed (the peers named may still be starting, or the list may be updated), then
 * err says the last round's reasons (STATUS_ENET). A list that is missing (HTTP 404) or
 * malformed fails at once. A caller that wants
 * the HELLO/WELCOME itself to choose should loop over http_bootstrap_list with
 * http_bootstrap_probe instead. */
struct events;
/* ev (may be NULL): the same as events for programs (docs/events.md: join_tried,
 * join_wait, join_answers). */
int http_bootstrap_pick(const char *url, int timeout_ms, int wait_ms, FILE *log,
                        struct events *ev, char *endpoint, size_t n, char *err);

#endif
