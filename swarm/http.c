/* http.c — libcurl downloads into the cache (Range resume, SHA-256 check, atomic rename),
 * shard manifests and bootstrap lists (http.h, docs/http-data.md).
 * Not for: the peer-to-peer wire or reading the corpus. */
#include "swarm/http.h"

#include "common/events.h"
#include "common/clock.h"
#include "common/status.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_MAGIC      "swarmtrain-manifest 1"
#define LIST_MAX            (1 << 20) /* bootstrap lists and manifests are small */
#define MANIFEST_MAX_SHARDS 65536     /* more than any corpus needs, few enough to hold */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_init(void)
{
    curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK && sodium_init() >= 0;
}

int http_is_url(const char *s)
{
    return s && (!strncasecmp(s, "http://", 7) || !strncasecmp(s, "https://", 8));
}

int http_cache_dir(const http_opts_t *o, char *buf, size_t n)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int w;
    if (o && o->cache_dir && *o->cache_dir)
        w = snprintf(buf, n, "%s", o->cache_dir);
    else if (xdg && *xdg)
        w = snprintf(buf, n, "%s/swarmtrain", xdg);
    else
        w = snprintf(buf, n, "%s/.cache/swarmtrain", home && *home ? home : ".");
    return w < 0 || (size_t)w >= n ? STATUS_EINVAL : 0;
}

static void to_hex(const unsigned char *d, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = 0;
}

int http_sha256_file(const char *path, char *hex, char *err)
{
    pthread_once(&curl_once, curl_init);
    FILE *f = fopen(path, "rb");
    if (!f) return status_set(err, STATUS_EIO, "cannot read %s: %s", path, strerror(errno));
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    unsigned char buf[1 << 16], d[crypto_hash_sha256_BYTES];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) crypto_hash_sha256_update(&st, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) return status_set(err, STATUS_EIO, "error reading %s", path);
    crypto_hash_sha256_final(&st, d);
    to_hex(d, sizeof d, hex);
    return 0;
}

/* Whether s is 64 hex digits; copies it lowercased into out. */
static int parse_sha(const char *s, size_t len, char *out)
{
    if (len != 64) return 0;
    for (size_t i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)s[i])) return 0;
        out[i] = (char)tolower((unsigned char)s[i]);
    }
    out[64] = 0;
    return 1;
}

static int mkdirs(const char *dir, char *err)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return status_set(err, STATUS_EINVAL, "cache path too long: %s", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST)
                return status_set(err, errno == ENOSPC ? STATUS_EFULL : STATUS_EIO,
                                  "cannot make the cache directory %s: %s", p, strerror(errno));
            if (!(*s = c)) break;
        }
    }
    return 0;
}

/* <cache>/http/<16 hex of SHA-256(url)>-<the URL's last path segment, made safe>. */
static int cache_path(const char *url, const http_opts_t *o, char *path, size_t n, char *err)
{
    char dir[4096];
    if (http_cache_dir(o, dir, sizeof dir))
        return status_set(err, STATUS_EINVAL, "cache directory path too long");
    size_t len = strlen(dir);
    if (len + 5 >= sizeof dir) return status_set(err, STATUS_EINVAL, "cache directory too long");
    memcpy(dir + len, "/http", 6);
    int rc = mkdirs(dir, err);
    if (rc) return rc;
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, (const unsigned char *)url, strlen(url));
    char hex[65];
    to_hex(d, 8, hex);
    const char *end = url + strcspn(url, "?#"), *b = end;
    while (b > url && b[-1] != '/') b--;
    char base[65];
    size_t k = 0;
    for (; b < end && k < sizeof base - 1; b++)
        base[k++] = isalnum((unsigned char)*b) || *b == '.' || *b == '-' || *b == '_' ? *b : '_';
    base[k] = 0;
    if (!k || !strcmp(base, ".") || !strcmp(base, "..")) snprintf(base, sizeof base, "data");
    int w = snprintf(path, n, "%s/%s-%s", dir, hex, base);
    if (w < 0 || (size_t)w + 16 >= n) return status_set(err, STATUS_EINVAL, "cache path too long");
    return 0;
}

/* An exclusive lock on path.lock, held until the returned descriptor is closed; peers on
 * one machine fetching the same URL take turns. -1 on failure (err set). */
static int lock_path(const char *path, FILE *log, char *err)
{
    char lp[4200];
    snprintf(lp, sizeof lp, "%s.lock", path);
    int fd = open(lp, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        status_set(err, STATUS_EIO, "cannot open the lock file %s: %s", lp, strerror(errno));
        return -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) == 0) return fd;
    if (log) fprintf(log, "http: waiting for another process fetching %s\n", path);
    while (fcntl(fd, F_SETLKW, &fl) != 0) {
        if (errno == EINTR) continue;
        status_set(err, STATUS_EIO, "cannot lock %s: %s", lp, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Renames tmp to final and makes the rename durable. */
static int commit(const char *tmp, const char *final, char *err)
{
    if (fsync_path(tmp) || rename(tmp, final))
        return status_set(err, STATUS_EIO, "cannot move %s into place: %s", final, strerror(errno));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", final);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        fsync_path(dir);
    }
    return 0;
}

/* ---- one transfer --------------------------------------------------------------- */

typedef struct {
    int fd;
    const char *part;
    long long offset;   /* bytes already in the .part file when the transfer started */
    long long written;  /* body bytes written by this transfer */
    long long total;    /* whole file size if the server said (Content-Length/Range) */
    long long range_at; /* start of the Content-Range of a 206; -1: none */
    long code;          /* status of the last response header block */
    int started;        /* the first body byte arrived and the file was positioned */
    int werrno;         /* errno of a failed write */
    int bad_range;      /* a 206 that does not start where we asked */
    char etag[256];
    long long fail_after; /* tests: ENOSPC after this many bytes; 0: off */
    /* in memory instead of a file (bootstrap lists, fd < 0) */
    char *mem;
    size_t mem_len, mem_cap, mem_max;
} xfer_t;

static size_t on_header(char *buf, size_t size, size_t nitems, void *ctx)
{
    xfer_t *x = ctx;
    size_t n = size * nitems;
    char line[512];
    size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, buf, k);
    line[k] = 0;
    line[strcspn(line, "\r\n")] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect or a 100) */
        const char *sp = strchr(line, ' ');
        x->code = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->etag[0] = 0;
        x->range_at = -1;
        x->total = -1;
    } else if (!strncasecmp(line, "ETag:", 5)) {
        const char *v = line + 5;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(x->etag, sizeof x->etag, "%.255s", v);
    } else if (!strncasecmp(line, "Content-Range:", 14)) {
        long long a, b, t;
        if (sscanf(line + 14, " bytes %lld-%lld/%lld", &a, &b, &t) == 3) {
            x->range_at = a;
            x->total = t;
        } else if (sscanf(line + 14, " bytes */%lld", &t) == 1) { /* with a 416 */
            x->total = t;
        }
    } else if (!strncasecmp(line, "Content-Length:", 15) && x->range_at < 0) {
        x->total = strtoll(line + 15, NULL, 10);
    }
    return n;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ctx)
{
    xfer_t *x = ctx;
    size_t n = size * nmemb;
    if (x->fd < 0) { /* into memory */
        if (x->mem_len + n > x->mem_max) return 0;
        if (x->mem_len + n + 1 > x->mem_cap) {
            size_t cap = (x->mem_len + n + 1) * 2;
            char *m = realloc(x->mem, cap);
            if (!m) return 0;
            x->mem = m, x->mem_cap = cap;
        }
        memcpy(x->mem + x->mem_len, buf, n);
        x->mem_len += n;
        x->mem[x->mem_len] = 0;
        return n;
    }
    if (!x->started) {
        x->started = 1;
        if (x->code == 206) {
            if (x->range_at != x->offset) {
                x->bad_range = 1;
                return 0;
            }
        } else if (x->offset > 0) { /* the server sent the whole file: start over */
            x->offset = 0;
            if (ftruncate(x->fd, 0)) {
                x->werrno = errno;
                return 0;
            }
        }
        if (lseek(x->fd, (off_t)x->offset, SEEK_SET) < 0) {
            x->werrno = errno;
            return 0;
        }
        if (x->code != 206) { /* remember the validator for a later If-Range */
            char ep[4300];
            snprintf(ep, sizeof ep, "%s.etag", x->part);
            FILE *f = fopen(ep, "w");
            if (f) {
                fputs(x->etag, f);
                fclose(f);
            }
        }
    }
    if (x->fail_after > 0 && x->written + (long long)n > x->fail_after) {
        x->werrno = ENOSPC;
        return 0;
    }
    if (write_all(x->fd, buf, n)) {
        x->werrno = errno;
        return 0;
    }
    x->written += (long long)n;
    return n;
}

static CURL *easy_new(const char *url, const http_opts_t *o, xfer_t *x, char *cerr)
{
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "swarmtrain");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT,
                     o && o->connect_timeout_s > 0 ? o->connect_timeout_s : 10L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     o && o->stall_timeout_s > 0 ? o->stall_timeout_s : 30L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    return c;
}

static int transient(CURLcode cc)
{
    return cc == CURLE_PARTIAL_FILE || cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING ||
           cc == CURLE_SEND_ERROR || cc == CURLE_OPERATION_TIMEDOUT;
}

/* A user's sentence for a failed transfer of url; returns the status. */
static int explain(CURLcode cc, long code, const xfer_t *x, const char *url, const char *cerr,
                   const http_opts_t *o, char *err)
{
    long long have = x->offset + x->written;
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
        return status_set(err, STATUS_ENET, "cannot resolve the host of %s (%s)", url, cerr);
    case CURLE_COULDNT_CONNECT:
        return status_set(
            err, STATUS_ENET,
            "cannot reach the server of %s: %s (is the server up, the host and port right?)", url,
            cerr);
    case CURLE_HTTP_RETURNED_ERROR:
        if (code == 404)
            return status_set(err, STATUS_ENOTFOUND,
                              "HTTP 404 Not Found: %s does not exist on the server (check the URL)",
                              url);
        if (code == 401 || code == 403)
            return status_set(err, STATUS_EDENIED, "HTTP %ld: the server refuses %s", code, url);
        return status_set(err, STATUS_ENET, "HTTP %ld from the server for %s%s", code, url,
                          code >= 500 ? " (a server error: try again later)" : "");
    case CURLE_WRITE_ERROR:
        if (x->bad_range)
            return status_set(err, STATUS_EMALFORMED,
                              "%s: asked for bytes from %lld, the server sent from %lld", url,
                              x->offset, x->range_at);
        if (x->werrno == ENOSPC || x->werrno == EDQUOT)
            return status_set(err, STATUS_EFULL,
                              "disk full writing %s after %lld bytes: free space (or set "
                              "XDG_CACHE_HOME to a bigger disk) and run again; it resumes",
                              x->part, have);
        if (x->fd < 0)
            return status_set(err, STATUS_EMALFORMED, "%s is larger than %zu bytes", url,
                              x->mem_max);
        return status_set(err, STATUS_EIO, "cannot write %s: %s", x->part, strerror(x->werrno));
    case CURLE_OPERATION_TIMEDOUT:
        return status_set(err, STATUS_ETIMEOUT, "%s: no data for %ld s after %lld bytes%s", url,
                          o && o->stall_timeout_s > 0 ? o->stall_timeout_s : 30L, have,
                          x->fd >= 0 ? "; the partial file is kept and resumes next time" : "");
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
        if (x->total > 0)
            return status_set(err, STATUS_ENET,
                              "transfer of %s broke off after %lld of %lld bytes (truncated "
                              "body)%s",
                              url, have, x->total,
                              x->fd >= 0 ? "; the partial file is kept and resumes next time" : "");
        return status_set(err, STATUS_ENET, "transfer of %s broke off after %lld bytes: %s", url,
                          have, cerr);
    default:
        return status_set(err, STATUS_ENET, "fetching %s: %s", url,
                          *cerr ? cerr : curl_easy_strerror(cc));
    }
}

/* Downloads url into part (resuming what is there), retrying broken transfers. */
static int download(const char *url, const char *part, const http_opts_t *o, char *err)
{
    int retries = o && o->retries ? (o->retries < 0 ? 0 : o->retries) : 3;
    FILE *log = o ? o->log : NULL;
    char ep[4300];
    snprintf(ep, sizeof ep, "%s.etag", part);
    for (int attempt = 0;; attempt++) {
        struct stat sb;
        long long have = stat(part, &sb) == 0 ? (long long)sb.st_size : 0;
        char etag[256] = "", range[32], ifr[300], cerr[CURL_ERROR_SIZE] = "";
        if (have > 0) {
            FILE *f = fopen(ep, "r");
            if (f) {
                if (!fgets(etag, sizeof etag, f)) etag[0] = 0;
                fclose(f);
            }
        }
        int fd = open(part, O_WRONLY | O_CREAT, 0644);
        if (fd < 0)
            return status_set(err, errno == ENOSPC ? STATUS_EFULL : STATUS_EIO,
                              "cannot write %s: %s", part, strerror(errno));
        xfer_t x = {.fd = fd,
                    .part = part,
                    .offset = have,
                    .total = -1,
                    .range_at = -1,
                    .fail_after = o ? o->fail_write_after : 0};
        CURL *c = easy_new(url, o, &x, cerr);
        struct curl_slist *hdr = NULL;
        if (!c) {
            close(fd);
            return status_set(err, STATUS_ENOMEM, "curl: cannot make a handle");
        }
        if (have > 0) {
            snprintf(range, sizeof range, "%lld-", have);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
            if (etag[0]) {
                snprintf(ifr, sizeof ifr, "If-Range: %s", etag);
                hdr = curl_slist_append(hdr, ifr);
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
            }
            if (log) fprintf(log, "http: resuming %s at byte %lld (Range request)\n", url, have);
        } else if (log) {
            fprintf(log, "http: fetching %s\n", url);
        }
        double t0 = clock_now();
        CURLcode cc = curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdr);
        int bad = close(fd);
        if (cc == CURLE_OK && bad)
            return status_set(err, errno == ENOSPC ? STATUS_EFULL : STATUS_EIO,
                              "cannot write %s: %s", part, strerror(errno));
        if (cc == CURLE_OK) {
            if (!x.started && have > 0 && code == 200) { /* an empty file replaced ours */
                if (truncate(part, 0))
                    return status_set(err, STATUS_EIO, "cannot truncate %s", part);
            }
            double dt = clock_now() - t0;
            if (log)
                fprintf(log, "http: %s: %lld bytes in %.2f s (%.2f MB/s)\n", url, x.written, dt,
                        dt > 0 ? (double)x.written / dt / 1e6 : 0.0);
            return 0;
        }
        if (cc == CURLE_HTTP_RETURNED_ERROR && code == 416 && have > 0 && x.total == have) {
            /* the .part already holds the whole file (a run died before the rename): the
             * checksum decides */
            if (log) fprintf(log, "http: %s: the partial file is complete\n", url);
            return 0;
        }
        if (cc == CURLE_HTTP_RETURNED_ERROR && code == 416 && have > 0 && attempt <= retries) {
            /* what we hold is not a prefix of the file any more: start over */
            if (log) fprintf(log, "http: %s: range not satisfiable; starting over\n", url);
            unlink(part);
            unlink(ep);
            continue;
        }
        int rc = explain(cc, code, &x, url, cerr, o, err);
        if (!transient(cc) || attempt >= retries) return rc;
        if (log) fprintf(log, "http: %s; retrying (%d of %d)\n", err, attempt + 1, retries);
        clock_sleep(0.2 * (attempt + 1));
    }
}

static int is_manifest_file(const char *path)
{
    char head[sizeof MANIFEST_MAGIC + 1] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[got] = 0;
    size_t m = strlen(MANIFEST_MAGIC);
    return got >= m && !memcmp(head, MANIFEST_MAGIC, m) &&
           (got == m || head[m] == '\n' || head[m] == '\r');
}

/* Fetches url to final, verified against want (if any). With allow_manifest a manifest is
 * accepted whatever want says (*is_manifest = 1; its shards carry the checks). */
static int fetch_one(const char *url, const char *want, int allow_manifest, const char *final,
                     int *is_manifest, char *sha_out, const http_opts_t *o, char *err)
{
    FILE *log = o ? o->log : NULL;
    char part[4200], ep[4220], got[HTTP_SHA256_HEX];
    snprintf(part, sizeof part, "%s.part", final);
    snprintf(ep, sizeof ep, "%s.etag", part);
    if (is_manifest) *is_manifest = 0;
    struct stat sb;
    int resumed = stat(part, &sb) == 0 && sb.st_size > 0;
again:;
    int rc = download(url, part, o, err);
    if (rc) return rc;
    if (allow_manifest && is_manifest_file(part)) {
        if (is_manifest) *is_manifest = 1;
        unlink(ep);
        return commit(part, final, err);
    }
    if ((rc = http_sha256_file(part, got, err))) return rc;
    if (want && *want && strcmp(got, want)) {
        unlink(part);
        unlink(ep);
        if (resumed) { /* the old part may be of another version of the file: once afresh */
            if (log)
                fprintf(log, "http: %s: resumed download did not verify; fetching afresh\n", url);
            resumed = 0;
            goto again;
        }
        return status_set(err, STATUS_ECORRUPT,
                          "checksum mismatch for %s: SHA-256 %.16s..., expected %.16s... "
                          "(the download was deleted)",
                          url, got, want);
    }
    if ((rc = commit(part, final, err))) return rc;
    unlink(ep);
    if (sha_out) memcpy(sha_out, got, HTTP_SHA256_HEX);
    if (log) fprintf(log, "http: %s verified, sha256 %s\n", final, got);
    return 0;
}

/* ---- manifests ------------------------------------------------------------------ */

typedef struct {
    char sha[HTTP_SHA256_HEX];
    long long size;
    char *url;
} shard_t;

/* base's scheme://host[:port] (origin) or directory, joined with a relative reference. */
static char *resolve_url(const char *base, const char *ref)
{
    if (strstr(ref, "://")) return strdup(ref);
    const char *path = strstr(base, "://");
    path = path ? strchr(path + 3, '/') : NULL;
    size_t keep;
    if (!path) {
        keep = strcspn(base, "?#");
    } else if (ref[0] == '/') {
        keep = (size_t)(path - base);
    } else {
        size_t q = strcspn(path, "?#");
        const char *slash = path;
        for (const char *s = path; s < path + q; s++)
            if (*s == '/') slash = s;
        keep = (size_t)(slash - base) + 1;
    }
    int sep = !path && ref[0] != '/';
    size_t n = keep + (size_t)sep + strlen(ref) + 1;
    char *u = malloc(n);
    if (u) snprintf(u, n, "%.*s%s%s", (int)keep, base, sep ? "/" : "", ref);
    return u;
}

static void shards_free(shard_t *s, int n)
{
    for (int i = 0; s && i < n; i++) free(s[i].url);
    free(s);
}

/* Parses a manifest file (docs/http-data.md) into shards with absolute URLs. */
static int manifest_parse(const char *path, const char *base, shard_t **out, int *nout, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return status_set(err, STATUS_EIO, "cannot read %s: %s", path, strerror(errno));
    shard_t *s = NULL;
    int n = 0, cap = 0, lineno = 0, rc = 0;
    char line[4200];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc =
                status_set(err, STATUS_EMALFORMED, "manifest %s line %d is too long", base, lineno);
            goto done;
        }
        char *hash = strchr(line, '#');
        if (hash && lineno > 1) *hash = 0;
        line[strcspn(line, "\r\n")] = 0;
        if (lineno == 1) continue; /* the magic line, checked by the caller */
        char *tok[4], *save = NULL;
        int nt = 0;
        for (char *t = strtok_r(line, " \t", &save); t && nt < 4; t = strtok_r(NULL, " \t", &save))
            tok[nt++] = t;
        if (!nt) continue;
        char *end;
        long long size = nt == 3 ? strtoll(tok[1], &end, 10) : -1;
        shard_t sh = {.size = size};
        if (nt != 3 || !parse_sha(tok[0], strlen(tok[0]), sh.sha) || *end || size < 0 ||
            size > (1LL << 50)) {
            rc = status_set(err, STATUS_EMALFORMED,
                            "manifest %s line %d: expected 'SHA256 SIZE URL' (64 hex digits, "
                            "a byte count, a URL)",
                            base, lineno);
            goto done;
        }
        if (n == MANIFEST_MAX_SHARDS) {
            rc = status_set(err, STATUS_EMALFORMED, "manifest %s: more than %d shards", base,
                            MANIFEST_MAX_SHARDS);
            goto done;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            shard_t *ns = realloc(s, (size_t)cap * sizeof *s);
            if (!ns) {
                rc = status_set(err, STATUS_ENOMEM, "manifest: out of memory");
                goto done;
            }
            s = ns;
        }
        if (!(sh.url = resolve_url(base, tok[2]))) {
            rc = status_set(err, STATUS_ENOMEM, "manifest: out of memory");
            goto done;
        }
        if (!http_is_url(sh.url)) {
            rc = status_set(err, STATUS_EMALFORMED, "manifest %s line %d: '%s' is not http(s)",
                            base, lineno, sh.url);
            free(sh.url);
            goto done;
        }
        s[n++] = sh;
    }
    if (!n) rc = status_set(err, STATUS_EMALFORMED, "manifest %s lists no shards", base);
done:
    fclose(f);
    if (rc) {
        shards_free(s, n);
        return rc;
    }
    *out = s;
    *nout = n;
    return 0;
}

/* Concatenates the shard files into corpus (atomically), its SHA-256 into got. */
static int assemble(char **files, int n, const char *corpus, char *got, char *err)
{
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", corpus);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) return status_set(err, STATUS_EIO, "cannot write %s: %s", tmp, strerror(errno));
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    enum { BUF = 1 << 16 };
    char *buf = malloc(BUF);
    int rc = buf ? 0 : status_set(err, STATUS_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            rc = status_set(err, STATUS_EIO, "cannot read %s: %s", files[i], strerror(errno));
            break;
        }
        size_t k;
        while (!rc && (k = fread(buf, 1, BUF, f)) > 0) {
            crypto_hash_sha256_update(&st, (unsigned char *)buf, k);
            if (write_all(out, buf, k))
                rc = status_set(err, errno == ENOSPC ? STATUS_EFULL : STATUS_EIO, "%s writing %s%s",
                                strerror(errno), tmp,
                                errno == ENOSPC ? ": free space or set XDG_CACHE_HOME" : "");
        }
        fclose(f);
    }
    free(buf);
    if (close(out) && !rc) rc = status_set(err, STATUS_EIO, "cannot write %s", tmp);
    if (!rc) {
        unsigned char d[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(&st, d);
        to_hex(d, sizeof d, got);
        rc = commit(tmp, corpus, err);
    }
    if (rc) unlink(tmp);
    return rc;
}

static int fetch_manifest(const char *url, const char *mpath, const char *want, const char *corpus,
                          char *got, const http_opts_t *o, char *err)
{
    shard_t *s = NULL;
    int n = 0, rc = manifest_parse(mpath, url, &s, &n, err);
    if (rc) return rc;
    char **files = calloc((size_t)n, sizeof *files);
    if (!files) {
        shards_free(s, n);
        return status_set(err, STATUS_ENOMEM, "manifest: out of memory");
    }
    FILE *log = o ? o->log : NULL;
    if (log) fprintf(log, "http: manifest %s: %d shard(s)\n", url, n);
    for (int i = 0; i < n && !rc; i++) {
        char path[4096], sha[HTTP_SHA256_HEX];
        if ((rc = cache_path(s[i].url, o, path, sizeof path, err))) break;
        int lk = lock_path(path, log, err);
        if (lk < 0) {
            rc = STATUS_EIO;
            break;
        }
        struct stat sb = {0};
        int cached = stat(path, &sb) == 0 && (long long)sb.st_size == s[i].size &&
                     !http_sha256_file(path, sha, NULL) && !strcmp(sha, s[i].sha);
        if (!cached) {
            unlink(path);
            rc = fetch_one(s[i].url, s[i].sha, 0, path, NULL, NULL, o, err);
            if (!rc && (stat(path, &sb) || (long long)sb.st_size != s[i].size)) {
                unlink(path);
                rc = status_set(err, STATUS_ECORRUPT,
                                "shard %d (%s) has %lld bytes, the manifest says %lld", i + 1,
                                s[i].url, (long long)sb.st_size, s[i].size);
            }
        } else if (log) {
            fprintf(log, "http: shard %d cached in %s\n", i + 1, path);
        }
        close(lk);
        if (!rc && !(files[i] = strdup(path))) rc = status_set(err, STATUS_ENOMEM, "out of memory");
    }
    if (!rc) rc = assemble(files, n, corpus, got, err);
    if (!rc && want && *want && strcmp(got, want)) {
        unlink(corpus);
        rc = status_set(err, STATUS_ECORRUPT,
                        "checksum mismatch: the shards of %s make a corpus with SHA-256 "
                        "%.16s..., expected %.16s...",
                        url, got, want);
    }
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    shards_free(s, n);
    return rc;
}

/* ---- the corpus ----------------------------------------------------------------- */

int http_data_fetch(const char *url_in, const http_opts_t *o, char *path, size_t n, char *sha_out,
                    char *err)
{
    pthread_once(&curl_once, curl_init);
    if (!curl_ok) return status_set(err, STATUS_EIO, "cannot initialize libcurl or libsodium");
    if (!http_is_url(url_in))
        return status_set(err, STATUS_EINVAL, "'%s' is not an http:// or https:// URL", url_in);
    char url[4096], want[HTTP_SHA256_HEX] = "", got[HTTP_SHA256_HEX] = "";
    if (snprintf(url, sizeof url, "%s", url_in) >= (int)sizeof url)
        return status_set(err, STATUS_EINVAL, "URL too long");
    char *frag = strchr(url, '#');
    if (frag) {
        *frag++ = 0;
        if (strncmp(frag, "sha256=", 7) || !parse_sha(frag + 7, strlen(frag + 7), want))
            return status_set(err, STATUS_EINVAL,
                              "%s: the only fragment understood is #sha256=<64 hex digits>",
                              url_in);
    }
    if (o && o->sha256 && *o->sha256) {
        char w2[HTTP_SHA256_HEX];
        if (!parse_sha(o->sha256, strlen(o->sha256), w2))
            return status_set(err, STATUS_EINVAL, "expected checksum '%s' is not 64 hex digits",
                              o->sha256);
        if (*want && strcmp(want, w2))
            return status_set(err, STATUS_EINVAL, "%s: the URL's #sha256 and the run's differ",
                              url);
        memcpy(want, w2, sizeof want);
    }
    FILE *log = o ? o->log : NULL;
    char file[4096], corpus[4200], sha[HTTP_SHA256_HEX];
    int rc = cache_path(url, o, file, sizeof file, err);
    if (rc) return rc;
    snprintf(corpus, sizeof corpus, "%s.corpus", file);
    int lk = lock_path(file, log, err);
    if (lk < 0) return STATUS_EIO;
    const char *result = NULL;
    struct stat sb;
    /* a cached, verified corpus needs no network */
    if (stat(corpus, &sb) == 0 && !http_sha256_file(corpus, sha, NULL) &&
        (!*want || !strcmp(sha, want)))
        result = corpus;
    else if (stat(file, &sb) == 0 && !is_manifest_file(file) &&
             !http_sha256_file(file, sha, NULL) && (!*want || !strcmp(sha, want)))
        result = file;
    if (result) {
        memcpy(got, sha, sizeof got);
        if (log) fprintf(log, "http: %s cached in %s, sha256 %s\n", url, result, got);
    } else {
        unlink(file);
        int manifest = 0;
        rc = fetch_one(url, want, 1, file, &manifest, got, o, err);
        if (!rc && manifest) {
            rc = fetch_manifest(url, file, want, corpus, got, o, err);
            result = corpus;
        } else {
            result = file;
        }
    }
    close(lk);
    if (rc) return rc;
    if (snprintf(path, n, "%s", result) >= (int)n)
        return status_set(err, STATUS_EINVAL, "cache path too long for the caller's buffer");
    if (sha_out) memcpy(sha_out, got, HTTP_SHA256_HEX);
    return 0;
}

int http_data_for_run(const char *local, const char *url, const char *sha256, FILE *log, char *path,
                      size_t n, char *err)
{
    if (!path || !n) return status_set(err, STATUS_EINVAL, "http_data_for_run: no output");
    path[0] = 0;
    if (!sha256 || !*sha256) {
        if (local && snprintf(path, n, "%s", local) >= (int)n)
            return status_set(err, STATUS_EINVAL, "data path too long");
        return 0;
    }
    if (local) {
        char got[HTTP_SHA256_HEX];
        int rc = http_sha256_file(local, got, err);
        if (rc) return rc;
        if (strcmp(got, sha256))
            return status_set(err, STATUS_ECORRUPT,
                              "--data %s is not the swarm's corpus: SHA-256 %.16s..., the run "
                              "says %.16s... (from %s)",
                              local, got, sha256, url && *url ? url : "the first peer");
        if (snprintf(path, n, "%s", local) >= (int)n)
            return status_set(err, STATUS_EINVAL, "data path too long");
        return 0;
    }
    if (!url || !*url)
        return status_set(err, STATUS_EINVAL,
                          "the run names a corpus checksum but no URL: give --data FILE");
    http_opts_t o = {.sha256 = sha256, .log = log};
    return http_data_fetch(url, &o, path, n, NULL, err);
}

/* ---- bootstrap lists ------------------------------------------------------------ */

/* Whether s is tcp://HOST:PORT with a port in 1..65535 (HOST may be [v6]). */
static int parse_endpoint(const char *s, char *host, size_t hn, char *port, size_t pn)
{
    if (strncmp(s, "tcp://", 6)) return 0;
    const char *h = s + 6, *colon;
    size_t hl;
    if (*h == '[') {
        const char *rb = strchr(h, ']');
        if (!rb || rb[1] != ':') return 0;
        hl = (size_t)(rb - h - 1);
        h++;
        colon = rb + 1;
    } else {
        colon = strrchr(h, ':');
        if (!colon) return 0;
        hl = (size_t)(colon - h);
    }
    if (!hl || hl >= hn) return 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || p < 1 || p > 65535 || strlen(colon + 1) >= pn) return 0;
    for (size_t i = 0; i < hl; i++)
        if (isspace((unsigned char)h[i]) || h[i] == '/') return 0;
    memcpy(host, h, hl);
    host[hl] = 0;
    snprintf(port, pn, "%ld", p);
    return 1;
}

void http_bootstrap_free(char ***endpoints, int n)
{
    if (!endpoints || !*endpoints) return;
    for (int i = 0; i < n; i++) free((*endpoints)[i]);
    free(*endpoints);
    *endpoints = NULL;
}

/* Parses a bootstrap list (text, NUL-terminated, changed in place) fetched from url into
 * a new array of new endpoint strings; the rules of http_bootstrap_list. */
static int bootstrap_parse(char *text, const char *url, char ***endpoints, int *n, char *err)
{
    int rc = 0;
    char **eps = NULL;
    int k = 0, cap = 0, lineno = 0;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        lineno++;
        char *hash = strchr(p, '#');
        if (hash) *hash = 0;
        char *s = p;
        while (isspace((unsigned char)*s)) s++;
        char *e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
        if (*s) {
            char host[256], port[8];
            if (!parse_endpoint(s, host, sizeof host, port, sizeof port)) {
                rc = status_set(err, STATUS_EMALFORMED,
                                "bootstrap list %s line %d: '%.80s' is not tcp://HOST:PORT", url,
                                lineno, s);
                goto done;
            }
            if (k == cap) {
                cap = cap ? 2 * cap : 8;
                char **ne = realloc(eps, (size_t)cap * sizeof *eps);
                if (!ne) {
                    rc = status_set(err, STATUS_ENOMEM, "out of memory");
                    goto done;
                }
                eps = ne;
            }
            if (!(eps[k] = strdup(s))) {
                rc = status_set(err, STATUS_ENOMEM, "out of memory");
                goto done;
            }
            k++;
        }
        p = nl ? nl + 1 : NULL;
    }
    if (!k) rc = status_set(err, STATUS_ENOTFOUND, "bootstrap list %s names no endpoint", url);
done:
    if (rc) {
        http_bootstrap_free(&eps, k);
        return rc;
    }
    *endpoints = eps;
    *n = k;
    return 0;
}

int http_bootstrap_list(const char *url, char ***endpoints, int *n, char *err)
{
    pthread_once(&curl_once, curl_init);
    if (!endpoints || !n) return status_set(err, STATUS_EINVAL, "http_bootstrap_list: no output");
    *endpoints = NULL;
    *n = 0;
    if (!curl_ok) return status_set(err, STATUS_EIO, "cannot initialize libcurl");
    if (!http_is_url(url))
        return status_set(err, STATUS_EINVAL, "'%s' is not an http:// or https:// URL", url);
    char cerr[CURL_ERROR_SIZE] = "";
    xfer_t x = {.fd = -1, .part = url, .total = -1, .range_at = -1, .mem_max = LIST_MAX};
    http_opts_t o = {.connect_timeout_s = 10, .stall_timeout_s = 10};
    CURL *c = easy_new(url, &o, &x, cerr);
    if (!c) return status_set(err, STATUS_ENOMEM, "curl: cannot make a handle");
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    int rc;
    if (cc != CURLE_OK)
        rc = explain(cc, code, &x, url, cerr, &o, err);
    else if (x.mem)
        rc = bootstrap_parse(x.mem, url, endpoints, n, err);
    else
        rc = status_set(err, STATUS_ENOTFOUND, "bootstrap list %s names no endpoint", url);
    free(x.mem);
    return rc;
}

int http_bootstrap_probe(const char *endpoint, int timeout_ms, char *err)
{
    char host[256], port[8];
    if (!endpoint || !parse_endpoint(endpoint, host, sizeof host, port, sizeof port))
        return status_set(err, STATUS_EMALFORMED, "'%s' is not tcp://HOST:PORT",
                          endpoint ? endpoint : "(null)");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g)
        return status_set(err, STATUS_ENET, "cannot resolve host '%s': %s", host, gai_strerror(g));
    int rc = STATUS_ENET;
    status_set(err, STATUS_ENET, "no address for %s", host);
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (s < 0) continue;
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
        int r = connect(s, a->ai_addr, a->ai_addrlen), e = r ? errno : 0;
        if (r && e == EINPROGRESS) {
            struct pollfd pf = {.fd = s, .events = POLLOUT};
            int pr;
            while ((pr = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR) {
            }
            if (pr == 0) {
                e = ETIMEDOUT;
                rc = status_set(err, STATUS_ETIMEOUT, "no answer within %d ms", timeout_ms);
                close(s);
                continue;
            }
            socklen_t el = sizeof e;
            if (pr < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el)) e = errno;
        }
        close(s);
        if (!e) {
            rc = 0;
            break;
        }
        rc = status_set(err, STATUS_ENET, "%s", strerror(e));
    }
    freeaddrinfo(ai);
    return rc;
}

/* One pass over the list at url: the first endpoint that answers, or STATUS_ENET with
 * every endpoint and its reason in err. */
static int bootstrap_pick_once(const char *url, int timeout_ms, FILE *log, events_t *ev,
                               char *endpoint,
                               size_t n, char *err)
{
    char **eps = NULL;
    int k = 0, rc = http_bootstrap_list(url, &eps, &k, err);
    if (rc) return rc;
    char why[STATUS_ERR_LEN], tried[STATUS_ERR_LEN] = "";
    size_t used = 0;
    rc = STATUS_ENET;
    for (int i = 0; i < k; i++) {
        if (!http_bootstrap_probe(eps[i], timeout_ms, why)) {
            if (log)
                fprintf(log, "join: %s answers (entry %d of %d in %s)\n", eps[i], i + 1, k, url);
            events_add(ev, "join_answers", -1, -1, "endpoint=%s entry=%d of=%d url=%s", eps[i],
                       i + 1, k, url);
            rc = snprintf(endpoint, n, "%s", eps[i]) < (int)n
                     ? 0
                     : status_set(err, STATUS_EINVAL, "endpoint longer than the buffer");
            break;
        }
        if (log) fprintf(log, "join: tried %s: %s\n", eps[i], why);
        events_add(ev, "join_tried", -1, -1, "endpoint=%s error=%s", eps[i], why);
        int w =
            snprintf(tried + used, sizeof tried - used, "%s%s: %s", used ? "; " : "", eps[i], why);
        if (w > 0) used = used + (size_t)w < sizeof tried ? used + (size_t)w : sizeof tried - 1;
    }
    if (rc == STATUS_ENET)
        status_set(err, STATUS_ENET, "no endpoint of %s answers (%s)", url, tried);
    http_bootstrap_free(&eps, k);
    return rc;
}

int http_bootstrap_pick(const char *url, int timeout_ms, int wait_ms, FILE *log,
                        events_t *ev, char *endpoint, size_t n, char *err)
{
    double until = clock_now() + wait_ms / 1000.0;
    for (int round = 1;; round++) {
        int rc = bootstrap_pick_once(url, timeout_ms, log, ev, endpoint, n, err);
        /* only "nobody answers" is worth waiting out: a peer still starting, a list not yet
         * updated; a missing or malformed list is not */
        if (rc != STATUS_ENET || clock_now() + 1.0 > until) return rc;
        if (log)
            fprintf(log, "join: nothing to join through yet (round %d: %s); again in 1 s\n",
                    round, err);
        events_add(ev, "join_wait", -1, -1, "round=%d error=%s", round, err);
        clock_sleep(1.0);
    }
}
