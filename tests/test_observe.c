/* test_observe.c — the swarm in view: `status --metrics-file` checked line by line
 * against the Prometheus text exposition rules (and by promtool when installed), its
 * values against the training log, written atomically; `status --prometheus` serving the
 * same over HTTP; `status --plot` an SVG document whose elements balance, with a line per
 * quantity and the stores in the legend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tools/json.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_observe_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(dir);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    return p;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "%s ", testutil_bin());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* ---- the exposition format, checked independently of tools/prom.c ---------------- */

static int name_ok(const char *s, size_t n, int label)
{
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (i > 0 && c >= '0' && c <= '9') || (!label && c == ':');
        if (!ok) return 0;
    }
    return 1;
}

/* Go's ParseFloat as the format allows it: a C float, or NaN, +Inf, -Inf. */
static int value_ok(const char *s, size_t n)
{
    char buf[64];
    if (!n || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (!strcmp(buf, "NaN") || !strcmp(buf, "+Inf") || !strcmp(buf, "-Inf")) return 1;
    char *end;
    strtod(buf, &end);
    return *end == 0 && strspn(buf, "0123456789+-.eE") == n;
}

typedef struct {
    char name[128];
    char type[16];
    int help, typed, samples, closed;
} family_t;

/* Returns NULL when the text keeps every rule, else what broke (static text). */
static const char *check_exposition(const char *text, int *nsamples)
{
    static family_t fam[64];
    int nf = 0, cur = -1;
    *nsamples = 0;
    if (!*text || text[strlen(text) - 1] != '\n') return "does not end with a newline";
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        size_t len = strcspn(line, "\n");
        if (!len) continue;
        if (line[0] == '#') {
            int help = !strncmp(line, "# HELP ", 7), type = !strncmp(line, "# TYPE ", 7);
            if (!help && !type) continue; /* a comment */
            const char *nm = line + 7;
            size_t nl = strcspn(nm, " \n");
            if (!name_ok(nm, nl, 0)) return "bad metric name in HELP/TYPE";
            int f = -1;
            for (int i = 0; i < nf; i++)
                if (strlen(fam[i].name) == nl && !strncmp(fam[i].name, nm, nl)) f = i;
            if (f < 0) {
                if (nf == 64) return "too many families";
                f = nf++;
                memset(&fam[f], 0, sizeof fam[f]);
                memcpy(fam[f].name, nm, nl < 127 ? nl : 127);
            }
            if (cur >= 0 && cur != f) fam[cur].closed = 1;
            if (fam[f].closed) return "family continued after another began";
            if (fam[f].samples) return "HELP/TYPE after the family's samples";
            cur = f;
            if (type) {
                if (fam[f].typed++) return "two TYPE lines for one family";
                const char *t = nm + nl + 1;
                size_t tl = strcspn(t, "\n");
                static const char *types[] = {"counter", "gauge", "histogram", "summary",
                                              "untyped"};
                int ok = 0;
                for (int i = 0; i < 5; i++)
                    ok |= tl == strlen(types[i]) && !strncmp(t, types[i], tl);
                if (!ok) return "unknown TYPE";
                memcpy(fam[f].type, t, tl < 15 ? tl : 15);
            } else {
                if (fam[f].help++) return "two HELP lines for one family";
                /* HELP escapes only \\ and \n */
                for (const char *c = nm + nl + 1; c < line + len; c++)
                    if (*c == '\\' && c[1] != '\\' && c[1] != 'n')
                        return "bad escape in HELP";
                    else if (*c == '\\')
                        c++;
            }
            continue;
        }
        /* a sample: name [{labels}] value [timestamp] */
        size_t nl = strcspn(line, "{ \n");
        if (!name_ok(line, nl, 0)) return "bad metric name in a sample";
        int f = -1;
        for (int i = 0; i < nf; i++)
            if (strlen(fam[i].name) == nl && !strncmp(fam[i].name, line, nl)) f = i;
        if (f < 0) return "a sample before its family's TYPE";
        if (f != cur) {
            if (cur >= 0) fam[cur].closed = 1;
            if (fam[f].closed) return "a family's samples are not together";
            cur = f;
        }
        const char *p = line + nl;
        if (*p == '{') {
            p++;
            char seen[8][64];
            int ns = 0;
            while (*p != '}') {
                size_t ln = strcspn(p, "=");
                if (!name_ok(p, ln, 1) || (ln >= 2 && p[0] == '_' && p[1] == '_'))
                    return "bad label name";
                for (int i = 0; i < ns; i++)
                    if (strlen(seen[i]) == ln && !strncmp(seen[i], p, ln)) return "repeated label";
                if (ns < 8) {
                    memcpy(seen[ns], p, ln < 63 ? ln : 63);
                    seen[ns++][ln < 63 ? ln : 63] = 0;
                }
                p += ln;
                if (p[0] != '=' || p[1] != '"') return "label without a quoted value";
                p += 2;
                for (; *p != '"'; p++) {
                    if (*p == '\n' || !*p) return "unterminated label value";
                    if (*p == '\\') {
                        if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                            return "bad escape in a label value";
                        p++;
                    }
                }
                p++;
                if (*p == ',')
                    p++;
                else if (*p != '}')
                    return "labels not separated by ','";
            }
            p++;
        }
        if (*p != ' ') return "no space before the value";
        p++;
        size_t vl = strcspn(p, " \n");
        if (!value_ok(p, vl)) return "bad value";
        double value = strtod(p, NULL);
        p += vl;
        if (*p == ' ') { /* timestamp: an integer */
            p++;
            size_t tl = strcspn(p, "\n");
            if (!tl || strspn(p, "-0123456789") != tl) return "bad timestamp";
            p += tl;
        }
        if (*p != '\n') return "text after the value";
        if (!strcmp(fam[f].type, "counter") && value < 0) return "a negative counter";
        fam[f].samples++;
        (*nsamples)++;
    }
    for (int i = 0; i < nf; i++)
        if (!fam[i].typed) return "a family without TYPE";
    return NULL;
}

static void test_validator_catches(void **state)
{
    (void)state;
    int n;
    static const char *bad[] = {
        "# TYPE a gauge\na 1",                             /* no final newline */
        "a 1\n",                                           /* no TYPE */
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",           /* two TYPEs */
        "# TYPE 1a gauge\n1a 1\n",                         /* name */
        "# TYPE a gauge\na{b=\"x\\q\"} 1\n",               /* escape */
        "# TYPE a gauge\na{b=\"x\"\"} 1\n",                /* quote */
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na 2\n", /* split family */
        "# TYPE a gauge\na one\n",                         /* value */
        "# TYPE a counter\na -1\n",                        /* negative counter */
        "# TYPE a gauge\na{__x=\"1\"} 1\n",                /* reserved label */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!check_exposition(bad[i], &n)) fail_msg("validator accepted bad case %zu", i);
    assert_null(check_exposition("# HELP a x \\\\ y\n# TYPE a gauge\na{b=\"q\\\"\\n\\\\\"} NaN\n"
                                 "a{b=\"2\"} 1e-05 1700000000\n",
                                 &n));
    assert_int_equal(n, 2);
}

static void test_metrics_file(void **state)
{
    (void)state;
    char db1[512], db2[512], out[600], log[600];
    /* a store name with a quote and a backslash: label values must escape them */
    snprintf(db1, sizeof db1, "%s/we\"ird\\name.db", dir);
    snprintf(db2, sizeof db2, "%s/plain.db", dir);
    snprintf(log, sizeof log, "%s/train.log", dir);
    assert_int_equal(run("train --data %s --steps 8 --stages 2 --codec int8 --threads 1 "
                         "--val-batches 2 --val-every 4 --db '%s' --checkpoint-every 4 > %s 2>&1",
                         testutil_corpus(), db1, log),
                     0);
    assert_int_equal(run("train --data %s --steps 3 --threads 1 --val-batches 2 --db %s "
                         ">/dev/null 2>&1",
                         testutil_corpus(), db2),
                     0);
    snprintf(out, sizeof out, "%s/swarm.prom", dir);
    assert_int_equal(run("status --db '%s' --db %s --metrics-file %s", db1, db2, out), 0);
    char *text = read_text(out);
    assert_non_null(text);
    int n;
    const char *why = check_exposition(text, &n);
    if (why) fail_msg("exposition rule broken: %s\n%s", why, text);
    assert_true(n >= 10);

    /* the values are the store's: last step 7, the run's final val_loss */
    char want[1200];
    snprintf(want, sizeof want,
             "swarmtrain_step{store=\"%s/we\\\"ird\\\\name.db\",stage=\"0\"} 7\n", dir);
    if (!strstr(text, want)) fail_msg("no line %s in\n%s", want, text);
    char *lt = read_text(log);
    assert_non_null(lt);
    const char *v = strstr(lt, "\nval_loss ");
    assert_non_null(v);
    snprintf(want, sizeof want, "swarmtrain_val_loss{store=\"%s/we\\\"ird\\\\name.db\"} ", dir);
    const char *got = strstr(text, want);
    assert_non_null(got);
    assert_float_equal(atof(got + strlen(want)), atof(v + 10), 1e-4);
    free(lt);
    snprintf(want, sizeof want,
             "swarmtrain_checkpoint_step{store=\"%s/we\\\"ird\\\\name.db\","
             "stage=\"0\"} 8\n",
             dir);
    if (!strstr(text, want)) fail_msg("no line %s", want);
    /* int8 boundary bytes were counted */
    assert_non_null(strstr(text, "# TYPE swarmtrain_bytes_sent_total counter\n"));
    free(text);

    /* written through a temporary file that is gone afterwards */
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    struct dirent *e;
    while ((e = readdir(dh)))
        if (strstr(e->d_name, ".tmp")) fail_msg("left behind: %s", e->d_name);
    closedir(dh);

    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s/promtool.txt 2>&1", out, dir);
        int rc = system(cmd);
        if (rc) {
            snprintf(cmd, sizeof cmd, "%s/promtool.txt", dir);
            char *pt = read_text(cmd);
            fail_msg("promtool check metrics failed:\n%s", pt ? pt : "");
        }
        print_message("promtool check metrics: ok\n");
    } else {
        print_message("promtool not installed: checked against the format rules only\n");
    }

    /* --metrics-file - prints the same families */
    snprintf(out, sizeof out, "%s/stdout.prom", dir);
    assert_int_equal(run("status --db %s --metrics-file - > %s", db2, out), 0);
    text = read_text(out);
    assert_non_null(text);
    assert_null(check_exposition(text, &n));
    free(text);
    /* a store that does not exist is an error, and is not created */
    assert_int_not_equal(
        run("status --db %s/none.db --metrics-file %s/x.prom 2>/dev/null", dir, dir), 0);
    snprintf(out, sizeof out, "%s/none.db", dir);
    assert_int_not_equal(access(out, F_OK), 0);
}

/* Counts "<tag" openings (not self-closed) and "</tag>" closings of one tag name. */
static void balanced(const char *svg, const char *tag)
{
    char open[32], close[32];
    snprintf(open, sizeof open, "<%s", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    int o = 0, c = 0;
    for (const char *p = svg; (p = strstr(p, open)); p++) {
        char nx = p[strlen(open)];
        if (nx != ' ' && nx != '>') continue;
        const char *gt = strchr(p, '>');
        assert_non_null(gt);
        if (gt[-1] != '/') o++;
    }
    for (const char *p = svg; (p = strstr(p, close)); p++) c++;
    if (o != c) fail_msg("<%s>: %d opened, %d closed", tag, o, c);
}

static void test_plot(void **state)
{
    (void)state;
    char db[512], svg[600];
    snprintf(db, sizeof db, "%s/plot.db", dir);
    assert_int_equal(run("train --data %s --steps 10 --stages 2 --codec int8 --threads 1 "
                         "--val-batches 2 --val-every 5 --db %s >/dev/null 2>&1",
                         testutil_corpus(), db),
                     0);
    snprintf(svg, sizeof svg, "%s/out.svg", dir);
    assert_int_equal(run("status --db %s --plot %s", db, svg), 0);
    char *t = read_text(svg);
    assert_non_null(t);
    assert_true(!strncmp(t, "<?xml", 5));
    assert_non_null(strstr(t, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_true(strlen(t) > 7 && !strcmp(t + strlen(t) - 7, "</svg>\n"));
    static const char *tags[] = {"svg", "text", "g", "clipPath", "style"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) balanced(t, tags[i]);
    /* a line each for loss, validation loss, tokens/s and wire MB/s; every panel drawn */
    int lines = 0;
    for (const char *p = t; (p = strstr(p, "<polyline")); p++) lines++;
    assert_true(lines >= 4);
    assert_null(strstr(t, "no data"));
    assert_non_null(strstr(t, "stage 0, plot.db"));
    assert_non_null(strstr(t, "tokens/s"));
    assert_non_null(strstr(t, "MB/s"));
    assert_non_null(strstr(t, "validation loss"));
    free(t);
    if (system("command -v rsvg-convert >/dev/null 2>&1") == 0) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "rsvg-convert -o %s/out.png %s", dir, svg);
        assert_int_equal(system(cmd), 0);
    }
}

/* One HTTP/1.0 request to 127.0.0.1:port; the whole response into a new string. */
static char *http_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    assert_int_equal(send(fd, req, (size_t)n, 0), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = recv(fd, buf + len, cap - 1 - len, 0)) > 0) len += (size_t)r;
    buf[len] = 0;
    close(fd);
    return buf;
}

/* A swarm's validation losses (--val-every rounds and the run's end) are events in the
 * store of the stage-0 peer that computed them, and status --plot draws them. */
typedef struct {
    int n;
    long long last_step;
} val_seen_t;

/* A store's event (status --db --json): its val_loss ones, counted, the last one's step. */
static void on_val_event(void *ctx, const json_obj_t *o)
{
    val_seen_t *s = ctx;
    long long step;
    double v;
    if (strcmp(json_get(o, "kind"), "val_loss") ||
        !json_val_loss_detail(json_get(o, "detail"), &step, &v))
        return;
    s->n++;
    s->last_step = step;
}

static void test_plot_swarm(void **state)
{
    (void)state;
    char cmd[2048], svg[600], log[600];
    snprintf(log, sizeof log, "%s/local.log", dir);
    int rc = run("local --peers 2 --stages 2 --steps 20 --log-every 10 --val-every 10 "
                 "--val-batches 2 --threads 1 --quiet --dir %s/swarm --data %s >%s 2>&1",
                 dir, testutil_corpus(), log);
    if (rc != 0) {
        char *o = read_text(log);
        printf("%s", o ? o : "");
        free(o);
        fail_msg("local failed (%d)", rc);
    }
    /* the rounds and the end, as events in the stage-0 peer's store */
    snprintf(cmd, sizeof cmd, "%s/events.json", dir);
    assert_int_equal(run("status --db %s/swarm/peer0.db --json >%s", dir, cmd), 0);
    char *j = read_text(cmd);
    assert_non_null(j);
    val_seen_t seen = {0};
    assert_true(json_each(j, "events", on_val_event, &seen) > 0);
    int nval = seen.n;
    if (nval < 2) fail_msg("%d val_loss events in peer0.db:\n%s", nval, j);
    assert_true(seen.last_step == 20); /* the run's end */
    free(j);
    snprintf(svg, sizeof svg, "%s/swarm.svg", dir);
    assert_int_equal(
        run("status --db %s/swarm/peer0.db --db %s/swarm/peer1.db --plot %s", dir, dir, svg), 0);
    char *t = read_text(svg);
    assert_non_null(t);
    const char *v = strstr(t, "validation loss (held-out data)");
    assert_non_null(v);
    assert_null(strstr(t, "no data: no val_loss events"));
    printf("swarm plot: %d val_loss events in peer0.db, validation panel drawn\n", nval);
    free(t);
}

/* status --prometheus serves the same document over HTTP, read afresh at each scrape. */
static void test_prometheus_http(void **state)
{
    (void)state;
    char db[512];
    snprintf(db, sizeof db, "%s/http.db", dir);
    assert_int_equal(run("train --data %s --steps 3 --threads 1 --val-batches 2 --db %s "
                         ">/dev/null 2>&1",
                         testutil_corpus(), db),
                     0);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        execl(testutil_bin(), "swarmtrain", "status", "--db", db, "--prometheus", "127.0.0.1:0",
              (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    char line[256] = "";
    assert_non_null(fgets(line, sizeof line, out));
    const char *colon = strrchr(line, ':');
    assert_non_null(colon);
    int port = atoi(colon + 1);
    assert_true(port > 0);

    char *resp = http_get(port, "/metrics");
    assert_true(!strncmp(resp, "HTTP/1.0 200 OK\r\n", 17));
    assert_non_null(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
    const char *body = strstr(resp, "\r\n\r\n");
    assert_non_null(body);
    body += 4;
    const char *cl = strstr(resp, "Content-Length: ");
    assert_non_null(cl);
    assert_int_equal(atol(cl + 16), strlen(body));
    int n;
    const char *why = check_exposition(body, &n);
    if (why) fail_msg("exposition rule broken: %s", why);
    assert_non_null(strstr(body, "swarmtrain_step{store=\""));
    assert_non_null(strstr(body, "\",stage=\"0\"} 2\n"));
    free(resp);
    /* a second scrape after more training sees the new rows */
    assert_int_equal(run("train --data %s --steps 5 --threads 1 --val-batches 2 --db %s "
                         ">/dev/null 2>&1",
                         testutil_corpus(), db),
                     0);
    resp = http_get(port, "/metrics?x=1");
    assert_non_null(strstr(resp, "HTTP/1.0 200 OK"));
    assert_non_null(strstr(resp, "\",stage=\"0\"} 4\n"));
    free(resp);
    resp = http_get(port, "/other");
    assert_true(!strncmp(resp, "HTTP/1.0 404", 12));
    free(resp);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    fclose(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validator_catches),
        cmocka_unit_test(test_metrics_file),
        cmocka_unit_test(test_plot),
        cmocka_unit_test(test_plot_swarm),
        cmocka_unit_test(test_prometheus_http),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
