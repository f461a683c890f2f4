/* fuzz_http.c — fuzz target: the text formats swarm/http.c reads from a server: bootstrap
 * lists (bootstrap_parse, parse_endpoint), data manifests (manifest_parse) and the
 * relative URLs in them (resolve_url). These are static in http.c, so this file includes
 * it (and links no other copy).
 *
 * Input: a mode octet, then: 0 a bootstrap list; 1 a manifest (a memory file; the base
 * URL is fixed); 2 a base URL, a NUL, a reference; 3 one endpoint.
 * Invariants: every endpoint a list yields is tcp://HOST:PORT by parse_endpoint, trimmed,
 * without a comment; every shard has 64 hex digits, a size in [0, 2^50] and an http(s)
 * URL; an absolute reference resolves to itself, a relative one keeps the base's origin.
 *
 * Not for: transfers (tests/test_http.c runs a real server). */
#define _GNU_SOURCE
#include "swarm/http.c"

#include "fuzz.h"

#include <sys/mman.h>

static int mfd = -1;
static char mpath[64];

static void check_list(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[STATUS_ERR_LEN];
    if (!text) return;
    memcpy(text, data, size);
    text[size] = 0;
    char **eps = NULL;
    int n = 0;
    if (bootstrap_parse(text, "http://fuzz/list", &eps, &n, err) == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(n >= 1 && eps);
        for (int i = 0; i < n; i++) {
            char host[256], port[8];
            FUZZ_CHECK(parse_endpoint(eps[i], host, sizeof host, port, sizeof port));
            FUZZ_CHECK(!strchr(eps[i], '#') && !strchr(eps[i], '\n'));
            size_t len = strlen(eps[i]);
            FUZZ_CHECK(len && !isspace((unsigned char)eps[i][0]) &&
                       !isspace((unsigned char)eps[i][len - 1]));
            long p = strtol(port, NULL, 10);
            FUZZ_CHECK(p >= 1 && p <= 65535 && host[0]);
        }
        http_bootstrap_free(&eps, n);
        FUZZ_CHECK(!eps);
    } else {
        FUZZ_CHECK(!eps && n == 0);
    }
    free(text);
}

static void check_manifest(const uint8_t *data, size_t size)
{
    if (mfd < 0) {
        mfd = memfd_create("fuzz_http", 0);
        FUZZ_CHECK(mfd >= 0);
        snprintf(mpath, sizeof mpath, "/proc/self/fd/%d", mfd);
    }
    FUZZ_CHECK(ftruncate(mfd, 0) == 0);
    FUZZ_CHECK(pwrite(mfd, data, size, 0) == (ssize_t)size);
    shard_t *s = NULL;
    int n = 0;
    char err[STATUS_ERR_LEN];
    if (manifest_parse(mpath, "https://example.org/data/manifest.txt?v=1", &s, &n, err)) return;
    fuzz_accepted++;
    FUZZ_CHECK(n >= 1 && n <= MANIFEST_MAX_SHARDS && s);
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(strlen(s[i].sha) == 64 && strspn(s[i].sha, "0123456789abcdef") == 64);
        FUZZ_CHECK(s[i].size >= 0 && s[i].size <= (1LL << 50));
        FUZZ_CHECK(s[i].url && http_is_url(s[i].url));
    }
    shards_free(s, n);
}

static void check_resolve(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 2);
    if (!text) return;
    memcpy(text, data, size);
    text[size] = text[size + 1] = 0;
    const char *base = text, *ref = text + strlen(text) + 1;
    if (ref > text + size) ref = "";
    char *u = resolve_url(base, ref);
    FUZZ_CHECK(u);
    fuzz_accepted++;
    if (strstr(ref, "://")) {
        FUZZ_CHECK(!strcmp(u, ref));
    } else {
        const char *sep = strstr(base, "://");
        const char *path = sep ? strchr(sep + 3, '/') : NULL;
        size_t origin = path ? (size_t)(path - base) : strcspn(base, "?#");
        FUZZ_CHECK(!strncmp(u, base, origin));
        FUZZ_CHECK(strlen(u) >= strlen(ref) && !strcmp(u + strlen(u) - strlen(ref), ref));
    }
    free(u);
    free(text);
}

static void check_endpoint(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return;
    memcpy(text, data, size);
    text[size] = 0;
    char host[256], port[8];
    if (parse_endpoint(text, host, sizeof host, port, sizeof port)) {
        fuzz_accepted++;
        FUZZ_CHECK(!strncmp(text, "tcp://", 6) && strlen(host) >= 1 && strlen(host) < sizeof host);
        FUZZ_CHECK(strstr(text, host) != NULL);
        long p = strtol(port, NULL, 10);
        FUZZ_CHECK(p >= 1 && p <= 65535);
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] & 3) {
    case 0:
        check_list(data + 1, size - 1);
        break;
    case 1:
        check_manifest(data + 1, size - 1);
        break;
    case 2:
        check_resolve(data + 1, size - 1);
        break;
    default:
        check_endpoint(data + 1, size - 1);
        break;
    }
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

static void emit_text(fuzz_emit_fn emit, void *ctx, const char *name, int mode, const char *t,
                      size_t len)
{
    uint8_t buf[1024];
    buf[0] = (uint8_t)mode;
    memcpy(buf + 1, t, len);
    emit(ctx, name, buf, len + 1);
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const char list[] = "# swarm peers\n"
                               "tcp://10.0.0.1:5555\n"
                               "  tcp://[::1]:6000   # v6\r\n"
                               "\n"
                               "tcp://peer.example.org:7000";
    emit_text(emit, ctx, "list", 0, list, sizeof list - 1);
    static const char manifest[] =
        "swarmtrain-manifest 1\n"
        "# shards\n"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 1000 part-0.txt\n"
        "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789 0\t/abs/part-1.txt\n"
        "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210 77 "
        "https://other.example.org/p2 # a comment\r\n";
    emit_text(emit, ctx, "manifest", 1, manifest, sizeof manifest - 1);
    static const char resolve[] = "https://example.org:8443/a/b/list.txt?x=1\0../c/d.txt";
    emit_text(emit, ctx, "resolve-relative", 2, resolve, sizeof resolve - 1);
    static const char resolve2[] = "http://h\0/root.txt";
    emit_text(emit, ctx, "resolve-absolute-path", 2, resolve2, sizeof resolve2 - 1);
    static const char ep[] = "tcp://[fe80::1]:65535";
    emit_text(emit, ctx, "endpoint-v6", 3, ep, sizeof ep - 1);
}
