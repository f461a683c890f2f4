/* test_http.c — swarm/http.h against a real HTTP server on loopback (tests/http_server.py,
 * which speaks Range and breaks on request):
 * - a download cut midway is kept as .part and resumes with a Range request (the server's
 *   log shows it), in the same call (retries) and in a later call, and verifies;
 * - HTTP 404, an unreachable port, a full disk and corrupted bytes are clear errors, and
 *   nothing unverified lands in the cache;
 * - a verified cached file is used without asking the server;
 * - a manifest of 2 shards assembles into one corpus; a wrong size is refused;
 * - a bootstrap list parses (comments, blanks), a bad line is named, probes tell a
 *   listening port from a closed one;
 * - the run text carries data_url and data_sha256;
 * - end to end: `swarmtrain train --data http://127.0.0.1:PORT/...` trains from a
 *   download that was cut midway.
 * Only 127.0.0.1 is ever contacted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "model/train.h"
#include "swarm/http.h"
#include "common/events.h"
#include "record.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64], srv[128], cache[128], logpath[128];
static int port;
static pid_t server = -1;
static char corpus_sha[HTTP_SHA256_HEX];

/* Deterministic text-like bytes: words of a-z, spaces and newlines. */
static void write_text(const char *path, size_t n, uint64_t seed)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)rng_below(&r, 40);
        fputc(x < 26 ? 'a' + (int)x : x < 38 ? ' ' : '\n', f);
    }
    fclose(f);
}

static void srv_file(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", srv, name);
}

static void url_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "http://127.0.0.1:%d/%s", port, name);
}

static int same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Replaces the file at path with text after delay seconds (on a thread; written aside and
 * renamed, so the server never serves half of it). */
typedef struct {
    char path[256], text[256];
    double delay;
} rewrite_t;

static void *rewrite_later(void *arg)
{
    rewrite_t *rw = arg;
    clock_sleep(rw->delay);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", rw->path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fputs(rw->text, f);
        fclose(f);
        rename(tmp, rw->path);
    }
    return NULL;
}

static int count_lines(const char *path)
{
    char *s = record_text(path);
    int n = 0;
    for (char *p = s; *p; p++) n += *p == '\n';
    free(s);
    return n;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_httpXXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(srv, sizeof srv, "%s/srv", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(logpath, sizeof logpath, "%s/requests.log", dir);
    mkdir(srv, 0755);
    char p[256];
    const char *same[] = {"corpus.txt", "cut.txt",  "cut2.txt", "bad.txt",
                          "e2e.txt",    "full.txt", "done.txt"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        srv_file(p, sizeof p, same[i]);
        write_text(p, 200000, 7);
    }
    srv_file(p, sizeof p, "corpus.txt");
    if (http_sha256_file(p, corpus_sha, NULL)) return -1;
    srv_file(p, sizeof p, "shard1.txt");
    write_text(p, 30000, 11);
    srv_file(p, sizeof p, "shard2.txt");
    write_text(p, 20000, 12);

    /* the manifests: shard sizes and checksums, URLs relative and absolute */
    char s1[256], s2[256], h1[HTTP_SHA256_HEX], h2[HTTP_SHA256_HEX];
    srv_file(s1, sizeof s1, "shard1.txt");
    srv_file(s2, sizeof s2, "shard2.txt");
    if (http_sha256_file(s1, h1, NULL) || http_sha256_file(s2, h2, NULL)) return -1;
    srv_file(p, sizeof p, "set.manifest");
    FILE *f = fopen(p, "w");
    fprintf(f,
            "swarmtrain-manifest 1\n# two shards\n\n%s 30000 shard1.txt\n"
            "%s 20000 /shard2.txt   # absolute path\n",
            h1, h2);
    fclose(f);
    srv_file(p, sizeof p, "badsize.manifest");
    f = fopen(p, "w");
    fprintf(f, "swarmtrain-manifest 1\n%s 30001 shard1.txt\n", h1);
    fclose(f);

    srv_file(p, sizeof p, "peers.txt");
    f = fopen(p, "w");
    fprintf(f, "# swarm bootstrap\n\ntcp://127.0.0.1:7001\n  tcp://10.0.0.2:7000  # stage 1\n"
               "tcp://[::1]:7002\n");
    fclose(f);
    srv_file(p, sizeof p, "badpeers.txt");
    f = fopen(p, "w");
    fprintf(f, "tcp://127.0.0.1:7001\nudp://127.0.0.1:7000\n");
    fclose(f);

    const char *src = getenv("SWARMTRAIN_SOURCE");
    char script[512], portfile[256];
    snprintf(script, sizeof script, "%s/tests/http_server.py", src ? src : ".");
    snprintf(portfile, sizeof portfile, "%s/port", dir);
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    server = fork();
    if (server < 0) return -1;
    if (server == 0) {
        execlp(py, py, script, "--root", srv, "--port-file", portfile, "--log", logpath, "--cut",
               "cut.txt=50000", "--cut", "cut2.txt=70000", "--cut", "e2e.txt=60000", "--corrupt",
               "bad.txt", "--missing", "gone.txt", "--status", "broken.txt=503", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        FILE *pf = fopen(portfile, "r");
        if (pf) {
            int ok = fscanf(pf, "%d", &port) == 1;
            fclose(pf);
            if (ok) return 0;
        }
        clock_sleep(0.05);
    }
    fprintf(stderr, "test_http: the server did not start (%s %s)\n", py, script);
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (server > 0) {
        kill(server, SIGTERM);
        waitpid(server, NULL, 0);
    }
    return testutil_rmtree(dir);
}

static http_opts_t opts(void)
{
    http_opts_t o = {.cache_dir = cache, .connect_timeout_s = 5, .stall_timeout_s = 10};
    return o;
}

static void test_resume_in_a_later_call(void **state)
{
    (void)state;
    char url[256], path[4096], sha[HTTP_SHA256_HEX], err[STATUS_ERR_LEN];
    url_of(url, sizeof url, "cut.txt");
    http_opts_t o = opts();
    o.retries = -1; /* like a process killed midway: the partial file stays */
    int rc = http_data_fetch(url, &o, path, sizeof path, sha, err);
    assert_int_equal(rc, STATUS_ENET);
    assert_non_null(strstr(err, "broke off after 50000 of 200000 bytes"));
    /* the .part holds what came */
    char *log = record_text(logpath);
    assert_null(strstr(log, "GET /cut.txt range=bytes="));
    free(log);
    o.retries = 0;
    rc = http_data_fetch(url, &o, path, sizeof path, sha, err);
    assert_int_equal(rc, 0);
    assert_string_equal(sha, corpus_sha);
    char src[256];
    srv_file(src, sizeof src, "cut.txt");
    assert_true(same_bytes(path, src));
    log = record_text(logpath);
    assert_non_null(strstr(log, "GET /cut.txt range=bytes=50000- status=206"));
    free(log);
    char part[4200];
    snprintf(part, sizeof part, "%s.part", path);
    assert_int_not_equal(access(part, F_OK), 0);
}

static void test_resume_in_the_same_call(void **state)
{
    (void)state;
    char url[256], path[4096], sha[HTTP_SHA256_HEX], err[STATUS_ERR_LEN];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/cut2.txt#sha256=%s", port, corpus_sha);
    http_opts_t o = opts();
    int rc = http_data_fetch(url, &o, path, sizeof path, sha, err);
    assert_int_equal(rc, 0);
    assert_string_equal(sha, corpus_sha);
    char *log = record_text(logpath);
    assert_non_null(strstr(log, "GET /cut2.txt range=bytes=70000- status=206"));
    free(log);
}

/* A run that died after the last byte but before the rename left a complete .part: the
 * server answers the Range request with 416, and the .part is verified, not fetched again. */
static void test_complete_part_is_kept(void **state)
{
    (void)state;
    char url[256], path[4096], sha[HTTP_SHA256_HEX], err[STATUS_ERR_LEN], cmd[8400];
    url_of(url, sizeof url, "done.txt");
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), 0);
    snprintf(cmd, sizeof cmd, "mv '%s' '%s.part'", path, path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), 0);
    assert_string_equal(sha, corpus_sha);
    char *log = record_text(logpath);
    assert_non_null(strstr(log, "GET /done.txt range=bytes=200000- status=416"));
    free(log);
}

static void test_cached_needs_no_server(void **state)
{
    (void)state;
    char url[256], path[4096], sha[HTTP_SHA256_HEX], err[STATUS_ERR_LEN];
    url_of(url, sizeof url, "corpus.txt");
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), 0);
    int before = count_lines(logpath);
    o.sha256 = corpus_sha;
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), 0);
    assert_int_equal(count_lines(logpath), before);
    /* a cached file that does not match the expected checksum is fetched again and refused */
    o.sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), STATUS_ECORRUPT);
    assert_int_equal(count_lines(logpath), before + 1);
}

static void test_404_is_clear(void **state)
{
    (void)state;
    char url[256], path[4096], err[STATUS_ERR_LEN];
    url_of(url, sizeof url, "gone.txt");
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), STATUS_ENOTFOUND);
    assert_non_null(strstr(err, "HTTP 404 Not Found"));
    assert_non_null(strstr(err, "gone.txt"));
    url_of(url, sizeof url, "broken.txt");
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), STATUS_ENET);
    assert_non_null(strstr(err, "HTTP 503"));
}

static void test_unreachable_is_clear(void **state)
{
    (void)state;
    /* a port nobody listens on: bind one, note it, close it */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(s, (struct sockaddr *)&a, &len);
    close(s);
    char url[256], path[4096], err[STATUS_ERR_LEN];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/corpus.txt", ntohs(a.sin_port));
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), STATUS_ENET);
    assert_non_null(strstr(err, "cannot reach"));
    assert_int_equal(http_data_fetch("ftp://127.0.0.1/x", &o, path, sizeof path, NULL, err),
                     STATUS_EINVAL);
}

static void test_corrupt_is_refused(void **state)
{
    (void)state;
    char url[256], path[4096], err[STATUS_ERR_LEN];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/bad.txt#sha256=%s", port, corpus_sha);
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), STATUS_ECORRUPT);
    assert_non_null(strstr(err, "checksum mismatch"));
    /* nothing unverified stays: neither the file nor its .part */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/http | grep -q 'bad.txt$\\|bad.txt.part$'", cache);
    assert_int_not_equal(system(cmd), 0);
}

static void test_disk_full_is_clear(void **state)
{
    (void)state;
    char url[256], path[4096], err[STATUS_ERR_LEN];
    url_of(url, sizeof url, "full.txt");
    http_opts_t o = opts();
    o.fail_write_after = 100000;
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), STATUS_EFULL);
    assert_non_null(strstr(err, "disk full"));
    /* once there is room, it resumes from what was written */
    o.fail_write_after = 0;
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, NULL, err), 0);
    char *log = record_text(logpath);
    assert_non_null(strstr(log, "GET /full.txt range=bytes="));
    free(log);
}

static void test_manifest_assembles(void **state)
{
    (void)state;
    char url[256], path[4096], sha[HTTP_SHA256_HEX], err[STATUS_ERR_LEN];
    url_of(url, sizeof url, "set.manifest");
    http_opts_t o = opts();
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), 0);
    char cat[256], cmd[1024];
    snprintf(cat, sizeof cat, "%s/both.txt", dir);
    snprintf(cmd, sizeof cmd, "cat %s/shard1.txt %s/shard2.txt > %s", srv, srv, cat);
    assert_int_equal(system(cmd), 0);
    assert_true(same_bytes(path, cat));
    char want[HTTP_SHA256_HEX];
    assert_int_equal(http_sha256_file(cat, want, NULL), 0);
    assert_string_equal(sha, want);
    /* a joiner that is told the corpus checksum gets the same bytes from its cache */
    o.sha256 = want;
    char path2[4096];
    assert_int_equal(http_data_fetch(url, &o, path2, sizeof path2, sha, err), 0);
    assert_string_equal(path2, path);
    /* a shard whose size is not the manifest's is refused */
    url_of(url, sizeof url, "badsize.manifest");
    o.sha256 = NULL;
    assert_int_equal(http_data_fetch(url, &o, path, sizeof path, sha, err), STATUS_ECORRUPT);
    assert_non_null(strstr(err, "30001"));
}

static void test_bootstrap_list(void **state)
{
    (void)state;
    char url[256], err[STATUS_ERR_LEN];
    char **eps = NULL;
    int n = 0;
    url_of(url, sizeof url, "peers.txt");
    assert_int_equal(http_bootstrap_list(url, &eps, &n, err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(eps[0], "tcp://127.0.0.1:7001");
    assert_string_equal(eps[1], "tcp://10.0.0.2:7000");
    assert_string_equal(eps[2], "tcp://[::1]:7002");
    http_bootstrap_free(&eps, n);
    assert_null(eps);
    url_of(url, sizeof url, "badpeers.txt");
    assert_int_equal(http_bootstrap_list(url, &eps, &n, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "line 2"));
    assert_null(eps);
    url_of(url, sizeof url, "nolist.txt");
    assert_int_equal(http_bootstrap_list(url, &eps, &n, err), STATUS_ENOTFOUND);
    /* probes: the HTTP server's port answers, a closed one is refused */
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    assert_int_equal(http_bootstrap_probe(ep, 2000, err), 0);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &len);
    close(s);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(http_bootstrap_probe(ep, 2000, err), STATUS_ENET);
    assert_non_null(strstr(err, "refused"));
    assert_int_equal(http_bootstrap_probe("tcp://127.0.0.1", 100, err), STATUS_EMALFORMED);

    /* pick: a dead endpoint first, then a live one (the HTTP server's port); the dead one is
     * named with its reason */
    char p[256], pick[128], tried[256];
    srv_file(p, sizeof p, "pick.txt");
    FILE *f = fopen(p, "w");
    fprintf(f, "%s  # gone\ntcp://127.0.0.1:%d\n", ep, port);
    fclose(f);
    snprintf(tried, sizeof tried, "%s/tried.jsonl", dir);
    FILE *lg = fopen("/dev/null", "w");
    events_t *ev = events_open(tried, err);
    assert_non_null(ev);
    url_of(url, sizeof url, "pick.txt");
    assert_int_equal(http_bootstrap_pick(url, 2000, 0, lg, ev, pick, sizeof pick, err), 0);
    fclose(lg);
    events_close(&ev);
    snprintf(p, sizeof p, "tcp://127.0.0.1:%d", port);
    assert_string_equal(pick, p);
    /* the record: the dead endpoint tried, with its reason; the live one answers */
    json_obj_t o;
    assert_true(record_last_event(tried, "join_tried", &o));
    assert_string_equal(json_get(&o, "endpoint"), ep);
    assert_non_null(strstr(json_get(&o, "error"), "refused"));
    assert_true(record_last_event(tried, "join_answers", &o));
    assert_string_equal(json_get(&o, "endpoint"), p);
    srv_file(p, sizeof p, "dead.txt");
    f = fopen(p, "w");
    fprintf(f, "%s\n", ep);
    fclose(f);
    url_of(url, sizeof url, "dead.txt");
    double t0 = clock_now();
    assert_int_equal(http_bootstrap_pick(url, 2000, 0, NULL, NULL, pick, sizeof pick, err), STATUS_ENET);
    assert_non_null(strstr(err, ep));
    assert_true(clock_now() - t0 < 1.0); /* no wait asked for, none taken */
    /* a wait: nobody answers for 1.5 s, then the list is rewritten to name a live peer; the
     * pick reads the list again each round and finds it */
    rewrite_t rw = {.delay = 0.7};
    snprintf(rw.path, sizeof rw.path, "%s", p);
    snprintf(rw.text, sizeof rw.text, "%s\ntcp://127.0.0.1:%d\n", ep, port);
    pthread_t th;
    pthread_create(&th, NULL, rewrite_later, &rw);
    t0 = clock_now();
    assert_int_equal(http_bootstrap_pick(url, 2000, 10000, NULL, NULL, pick, sizeof pick, err), 0);
    pthread_join(th, NULL);
    assert_true(clock_now() - t0 >= 0.7);
    snprintf(p, sizeof p, "tcp://127.0.0.1:%d", port);
    assert_string_equal(pick, p);
    /* and one that stays dead gives up after about its wait */
    srv_file(p, sizeof p, "dead.txt");
    f = fopen(p, "w");
    fprintf(f, "%s\n", ep);
    fclose(f);
    t0 = clock_now();
    assert_int_equal(http_bootstrap_pick(url, 2000, 1500, NULL, NULL, pick, sizeof pick, err),
                     STATUS_ENET);
    double took = clock_now() - t0;
    assert_true(took >= 0.9 && took < 5.0);
}

static void test_run_text_carries_checksum(void **state)
{
    (void)state;
    train_options_t o = train_defaults(), back = train_defaults();
    char text[4096], err[STATUS_ERR_LEN];
    train_options_to_text(&o, text, sizeof text);
    assert_null(strstr(text, "data_"));
    snprintf(o.data_url, sizeof o.data_url, "http://127.0.0.1:8000/corpus.txt");
    memcpy(o.data_sha256, corpus_sha, sizeof o.data_sha256);
    train_options_to_text(&o, text, sizeof text);
    assert_int_equal(train_options_from_text(&back, text, err), 0);
    assert_string_equal(back.data_url, o.data_url);
    assert_string_equal(back.data_sha256, corpus_sha);
    assert_int_equal(train_options_from_text(&back, "data_sha256=xyz\n", err), STATUS_EMALFORMED);
    assert_int_equal(train_options_from_text(&back, "data_url=ftp://x\n", err), STATUS_EMALFORMED);
    /* a checksum without a URL is written as "data_url=" and must read back (fuzz_text) */
    train_options_t nourl = train_defaults(), back2 = train_defaults();
    memcpy(nourl.data_sha256, corpus_sha, sizeof nourl.data_sha256);
    train_options_to_text(&nourl, text, sizeof text);
    assert_int_equal(train_options_from_text(&back2, text, err), 0);
    assert_string_equal(back2.data_url, "");
    assert_string_equal(back2.data_sha256, corpus_sha);
    /* a codec block the codec cannot use is refused here, not at every microbatch later */
    assert_int_equal(train_options_from_text(&back2, "codec=int4\ncodec_block=3\n", err),
                     STATUS_EMALFORMED);
    assert_non_null(strstr(err, "block 3"));
    assert_int_equal(train_options_from_text(&back2, "codec=int4\ncodec_block=4\n", err), 0);
    /* subspace's block is a budget per element: any up to 32000 (0: the default) */
    assert_int_equal(train_options_from_text(&back2, "codec=subspace\ncodec_block=0\n", err), 0);
    assert_int_equal(back2.codec, CODEC_SUBSPACE);
    assert_int_equal(train_options_from_text(&back2, "codec=subspace\ncodec_block=100\n", err), 0);
    assert_int_equal(train_options_from_text(&back2, "codec=subspace\ncodec_block=32001\n", err),
                     STATUS_EMALFORMED);
    /* and one that leaves no room for a component in one of the run's sequences */
    assert_int_equal(train_options_from_text(&back2, "codec=subspace\ncodec_block=1\n", err),
                     STATUS_EMALFORMED);
    assert_non_null(strstr(err, "block 1"));
}

/* What a peer calls once it knows the run: its own file must match, else the URL is
 * fetched (into the default cache, here under dir through XDG_CACHE_HOME). */
static void test_data_for_run(void **state)
{
    (void)state;
    char url[256], path[4096], err[STATUS_ERR_LEN], src[256], other[256];
    url_of(url, sizeof url, "corpus.txt");
    srv_file(src, sizeof src, "corpus.txt");
    srv_file(other, sizeof other, "shard1.txt");
    assert_int_equal(http_data_for_run(NULL, "", "", NULL, path, sizeof path, err), 0);
    assert_string_equal(path, "");
    assert_int_equal(http_data_for_run(other, NULL, NULL, NULL, path, sizeof path, err), 0);
    assert_string_equal(path, other);
    assert_int_equal(http_data_for_run(src, url, corpus_sha, NULL, path, sizeof path, err), 0);
    assert_string_equal(path, src);
    assert_int_equal(http_data_for_run(other, url, corpus_sha, NULL, path, sizeof path, err),
                     STATUS_ECORRUPT);
    assert_non_null(strstr(err, "not the swarm's corpus"));
    char xdg[256];
    snprintf(xdg, sizeof xdg, "%s/xdg", dir);
    setenv("XDG_CACHE_HOME", xdg, 1);
    assert_int_equal(http_data_for_run(NULL, url, corpus_sha, NULL, path, sizeof path, err), 0);
    unsetenv("XDG_CACHE_HOME");
    assert_non_null(strstr(path, "/xdg/swarmtrain/http/"));
    assert_true(same_bytes(path, src));
}

static void test_train_from_url(void **state)
{
    (void)state;
    char cmd[2048], out[256], events[256];
    snprintf(out, sizeof out, "%s/train.log", dir);
    snprintf(events, sizeof events, "%s/train.events.jsonl", dir);
    snprintf(cmd, sizeof cmd,
             "%s train --data http://127.0.0.1:%d/e2e.txt --data-cache %s/e2e-cache --steps 5 "
             "--threads 1 --val-batches 2 --events %s > %s 2>&1",
             testutil_bin(), port, dir, events, out);
    int rc = system(cmd);
    char *log = record_text(out);
    if (rc) fprintf(stderr, "%s\n", log);
    assert_int_equal(rc, 0);
    free(log);
    /* the run trained to its end on the corpus fetched over HTTP: its final validation is
     * recorded (its events, not its log's wording) */
    json_obj_t o;
    assert_true(record_last_event(events, "val_loss", &o));
    assert_true(json_num(&o, "final") == 1);
    assert_true(json_num(&o, "val_loss") > 0);
    /* and the download resumed where the cut left it (the test server's own record) */
    log = record_text(logpath);
    assert_non_null(strstr(log, "GET /e2e.txt range=bytes=60000- status=206"));
    free(log);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_in_a_later_call),
        cmocka_unit_test(test_resume_in_the_same_call),
        cmocka_unit_test(test_complete_part_is_kept),
        cmocka_unit_test(test_cached_needs_no_server),
        cmocka_unit_test(test_404_is_clear),
        cmocka_unit_test(test_unreachable_is_clear),
        cmocka_unit_test(test_corrupt_is_refused),
        cmocka_unit_test(test_disk_full_is_clear),
        cmocka_unit_test(test_manifest_assembles),
        cmocka_unit_test(test_bootstrap_list),
        cmocka_unit_test(test_run_text_carries_checksum),
        cmocka_unit_test(test_data_for_run),
        cmocka_unit_test(test_train_from_url),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
