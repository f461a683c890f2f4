/* test_protocol_doc.c — docs/protocol.md against the code, so that the two cannot drift:
 * the version octet wherever the text states it (title, section 4, the ABNF of section 8,
 * section 16), the length of every header of section 5 (encoded with msg_encode), the
 * member entry size (sections 6 and 16.3, msg_members_encode), the DeMo stage message
 * version (7.4), the stage state size and every row of its example table (7.5, computed
 * by the stage's real parameter count and recover_state_bytes), and the run-text keys of
 * 7.6: the same keys in the same order as train_options_to_text writes them, each one
 * accepted by train_options_from_text, and each stated range or word list accepted at
 * its ends and refused beyond them.
 * The document's path comes from CMake (PROTOCOL_MD).
 * Not for: the protocol's behaviour (test_msg.c, test_members.c, the simulator). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/status.h"
#include "compress/demo_wire.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "peer/peer_impl.h"
#include "model/stage.h"
#include "model/train.h"
#include "swarm/msg.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PROTOCOL_MD
#error "PROTOCOL_MD must name docs/protocol.md"
#endif

static char *doc;

static int setup(void **state)
{
    (void)state;
    FILE *f = fopen(PROTOCOL_MD, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", PROTOCOL_MD);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    doc = malloc((size_t)n + 1);
    if (!doc || fread(doc, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return -1;
    }
    doc[n] = 0;
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(doc);
    return 0;
}

/* The text of the section whose heading line starts with `head` ("### 5.1 "), up to the
 * next heading of the same or a higher level; a copy the caller frees. Fails the test
 * when there is no such heading. */
static char *section(const char *head)
{
    const char *a = strstr(doc, head);
    if (!a) fail_msg("docs/protocol.md has no heading '%s'", head);
    int level = (int)strspn(a, "#");
    const char *b = a + strlen(head);
    for (;;) {
        b = strstr(b, "\n#");
        if (!b) {
            b = a + strlen(a);
            break;
        }
        if ((int)strspn(b + 1, "#") <= level) break;
        b++;
    }
    size_t n = (size_t)(b - a);
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, a, n);
    s[n] = 0;
    return s;
}

/* Every match of an extended regex in text: calls fn with the capture groups. Returns
 * how many matched. */
typedef void (*match_fn)(const char *const *groups, int ngroups, void *ctx);

static int each_match(const char *text, const char *re, match_fn fn, void *ctx)
{
    regex_t r;
    assert_int_equal(regcomp(&r, re, REG_EXTENDED | REG_NEWLINE), 0);
    regmatch_t m[8];
    int count = 0;
    const char *p = text;
    while (!regexec(&r, p, 8, m, p == text ? 0 : REG_NOTBOL)) {
        char *g[8] = {0};
        int ng = 0;
        for (int i = 1; i < 8 && m[i].rm_so >= 0; i++, ng++) {
            size_t n = (size_t)(m[i].rm_eo - m[i].rm_so);
            g[ng] = malloc(n + 1);
            memcpy(g[ng], p + m[i].rm_so, n);
            g[ng][n] = 0;
        }
        if (fn) fn((const char *const *)g, ng, ctx);
        for (int i = 0; i < ng; i++) free(g[i]);
        count++;
        p += m[0].rm_eo > 0 ? m[0].rm_eo : 1;
    }
    regfree(&r);
    return count;
}

/* ---- the version octet ------------------------------------------------------------- */

static void check_version_hex(const char *const *g, int ng, void *ctx)
{
    (void)ctx;
    assert_int_equal(ng, 1);
    long v = strtol(g[0], NULL, 16);
    if (v != MSG_VERSION) fail_msg("docs state version octet %s; msg.h says %d", g[0], MSG_VERSION);
}

static void check_version_dec(const char *const *g, int ng, void *ctx)
{
    (void)ctx;
    assert_int_equal(ng, 1);
    if (atoi(g[0]) != MSG_VERSION)
        fail_msg("docs state version %s; msg.h says %d", g[0], MSG_VERSION);
}

static void test_version_octet(void **state)
{
    (void)state;
    /* the title, section 4's table, section 8's ABNF, section 16, section 6's signature */
    assert_int_equal(
        each_match(doc, "^# swarmtrain wire protocol \\(SWT/([0-9]+)\\)", check_version_dec, NULL),
        1);
    assert_int_equal(each_match(doc, "^\\| 3 \\| 1 \\| version \\| `([0-9a-f]{2})` \\|",
                                check_version_hex, NULL),
                     1);
    assert_int_equal(each_match(doc, "^common\\(t\\) += %x53\\.57\\.54 %x([0-9A-Fa-f]{2}) ",
                                check_version_hex, NULL),
                     1);
    assert_int_equal(each_match(doc, "The version octet is ([0-9]+)\\.", check_version_dec, NULL),
                     1);
    assert_int_equal(
        each_match(doc, "the version octet \\(`([0-9a-f]{2})`\\)", check_version_hex, NULL), 1);
    assert_int_equal(each_match(doc, "\\| version not ([0-9]+) \\|", check_version_dec, NULL), 1);
    /* and what the encoder writes */
    msg_t m = {.type = MSG_GOSSIP};
    uint8_t buf[MSG_HEADER_MAX];
    size_t len;
    char err[STATUS_ERR_LEN];
    assert_int_equal(msg_encode(&m, buf, sizeof buf, &len, err), 0);
    assert_int_equal(buf[3], MSG_VERSION);
}

/* ---- header lengths (section 5) ----------------------------------------------------- */

/* "124+n", "86+32r", "88+32r+n", "118" with the string length n and the route length r */
static long eval_len(const char *e, int n, int r)
{
    char *end;
    long v = strtol(e, &end, 10);
    while (*end == '+') {
        long c = strtol(end + 1, &end, 10);
        if (*end == 'n')
            v += (c ? c : 1) * n;
        else if (*end == 'r')
            v += (c ? c : 1) * r;
        else
            fail_msg("cannot read the length '%s'", e);
        end++;
    }
    return v;
}

static void test_header_lengths(void **state)
{
    (void)state;
    regex_t r;
    assert_int_equal(
        regcomp(&r, "([Ll]ength ([0-9]+(\\+[0-9]*[nr])*)[.)]|Header only \\(([0-9]+) octets\\))",
                REG_EXTENDED),
        0);
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        char head[32];
        snprintf(head, sizeof head, "### 5.%d %s (%d)", t, msg_type_name(t), t);
        char *s = section(head);
        regmatch_t m[5];
        if (regexec(&r, s, 5, m, 0)) fail_msg("section '%s' states no header length", head);
        char expr[64] = "";
        int g = m[2].rm_so >= 0 ? 2 : 4;
        snprintf(expr, sizeof expr, "%.*s", (int)(m[g].rm_eo - m[g].rm_so), s + m[g].rm_so);
        free(s);
        for (int n = 0; n <= 7; n += 7)
            for (int rr = 0; rr <= 3; rr += 3) {
                msg_t msg = {.type = (uint8_t)t, .nroute = (uint8_t)rr};
                memset(msg.addr, 'a', (size_t)n);
                memset(msg.text, 't', (size_t)n);
                uint8_t buf[MSG_HEADER_MAX];
                size_t len = 0;
                char err[STATUS_ERR_LEN];
                assert_int_equal(msg_encode(&msg, buf, sizeof buf, &len, err), 0);
                int has_n = t == MSG_HELLO || t == MSG_WELCOME || t == MSG_LEAVE ||
                            t == MSG_ERROR || t == MSG_NACK;
                int has_r = t == MSG_FWD || t == MSG_BWD || t == MSG_NACK;
                long want = eval_len(expr, has_n ? n : 0, has_r ? rr : 0);
                if ((long)len != want)
                    fail_msg("%s: the docs say length %s = %ld (n %d, r %d); msg_encode wrote %zu",
                             msg_type_name(t), expr, want, n, rr, len);
                msg_t back;
                assert_int_equal(msg_decode(buf, len, &back, err), 0);
            }
    }
    regfree(&r);
}

/* ---- member entries (sections 6, 16.3) ------------------------------------------------ */

static void check_entry_size(const char *const *g, int ng, void *ctx)
{
    (void)ctx;
    assert_int_equal(ng, 1);
    int fixed = atoi(g[0]);
    for (int n = 0; n <= MSG_ADDR_MAX; n += 85) {
        msg_member_t e;
        memset(&e, 0, sizeof e);
        memset(e.addr, 'x', (size_t)n);
        e.state = MEMBER_SERVING;
        uint8_t buf[4 + 512];
        size_t len = 0;
        char err[STATUS_ERR_LEN];
        assert_int_equal(msg_members_encode(&e, 1, buf, sizeof buf, &len, err), 0);
        if (len != (size_t)(4 + fixed + n))
            fail_msg("docs say a member entry is %d+n octets; with n = %d the table of one is %zu",
                     fixed, n, len);
        assert_int_equal(msg_members_size(&e, 1), len);
    }
}

static void test_member_entry_size(void **state)
{
    (void)state;
    char *s6 = section("## 6. Member table");
    assert_int_equal(each_match(s6, "^Entry \\(([0-9]+) \\+ n octets\\)", check_entry_size, NULL),
                     1);
    /* the decoder's up-front check names the same size */
    assert_int_equal(each_match(s6, "`count \\* ([0-9]+)` greater than", check_entry_size, NULL),
                     1);
    free(s6);
    char *s16 = section("### 16.3 ");
    assert_int_equal(
        each_match(s16, "a member entry is ([0-9]+)\\+n octets", check_entry_size, NULL), 1);
    free(s16);
}

/* ---- the DeMo stage message (7.4) ----------------------------------------------------- */

static void check_stdx(const char *const *g, int ng, void *ctx)
{
    (void)ctx;
    assert_int_equal(ng, 1);
    if (atoi(g[0]) != DEMO_STAGE_VERSION)
        fail_msg("docs say STDX version %s; compress/demo_wire.h says %d", g[0],
                 DEMO_STAGE_VERSION);
}

static void test_stage_message_version(void **state)
{
    (void)state;
    char *s = section("### 7.4 ");
    assert_true(each_match(s, "\"STDX\"` version ([0-9]+)", check_stdx, NULL) >= 1);
    free(s);
}

/* ---- the stage state (7.5) ------------------------------------------------------------ */

static long num(const char *s) /* "1,403,920" */
{
    long v = 0;
    for (; *s; s++)
        if (*s >= '0' && *s <= '9') v = v * 10 + (*s - '0');
    return v;
}

typedef struct {
    long tail; /* the 16 of 12P + 16 */
    int rows;
} state_ctx_t;

static void check_state_row(const char *const *g, int ng, void *ctx)
{
    state_ctx_t *c = ctx;
    assert_int_equal(ng, 6);
    model_config_t cfg;
    char err[STATUS_ERR_LEN];
    assert_int_equal(config_preset(&cfg, g[0], err), 0);
    cfg.stages = atoi(g[1]);
    int s = atoi(g[2]);
    kern_t *k = kern_new("ref", 1, err);
    assert_non_null(k);
    stage_t *st = stage_new(&cfg, s, k, 1, 1, err);
    if (!st) fail_msg("stage %d of %s with %d stages: %s", s, g[0], cfg.stages, err);
    long P = (long)stage_num_params(st);
    if (P != num(g[3]))
        fail_msg("docs say %s S=%d stage %d has P = %s; the stage has %ld", g[0], cfg.stages, s,
                 g[3], P);
    /* with m (AdamW), without (sign DeMo's rmsprop update) */
    train_options_t t = train_defaults();
    t.cfg = cfg;
    for (int without = 0; without < 2; without++) {
        t.optimizer = without ? TRAIN_DEMO : TRAIN_ADAMW;
        t.demo.update = DEMO_UPDATE_RMSPROP;
        long bytes = (long)recover_state_bytes(&t, s), want = (without ? 8 : 12) * P + c->tail;
        if (bytes != num(g[4 + without]) || bytes != want)
            fail_msg("docs say %s S=%d stage %d's state is %s octets (%dP + %ld)%s; the code "
                     "serves %ld",
                     g[0], cfg.stages, s, g[4 + without], without ? 8 : 12, c->tail,
                     without ? " without m" : "", bytes);
    }
    stage_destroy(&st);
    kern_destroy(&k);
    c->rows++;
}

static void read_tail(const char *const *g, int ng, void *ctx)
{
    assert_int_equal(ng, 1);
    ((state_ctx_t *)ctx)->tail = atol(g[0]);
}

static void test_state_size(void **state)
{
    (void)state;
    char *s = section("### 7.5 ");
    state_ctx_t c = {.tail = -1};
    assert_int_equal(
        each_match(s, "snapshot a donor serves \\(STATE_REP\\), `12P \\+ ([0-9]+)` octets",
                   read_tail, &c),
        1);
    /* the fields' offsets add up to the same size */
    assert_int_equal(each_match(s, "^\\| 12P\\+12 \\| 4 \\| `lr_scale`", NULL, NULL), 1);
    assert_int_equal(c.tail, 8 + 4 + 4);
    each_match(s,
               "^\\| ([a-z]+) \\| ([0-9]+) \\| ([0-9]+) \\| ([0-9,]+) \\| ([0-9,]+) \\| ([0-9,]+) \\|$",
               check_state_row, &c);
    assert_true(c.rows >= 3);
    free(s);
    /* 9.4's downloader expects the same */
    char *s94 = section("### 9.4 ");
    assert_int_equal(each_match(s94, "`total` = 12P \\+ ([0-9]+)", read_tail, &c), 1);
    assert_int_equal(each_match(s94, "\\(or 8P \\+$", NULL, NULL), 1);
    assert_int_equal(c.tail, 16);
    free(s94);
}

/* ---- the run text (7.6) --------------------------------------------------------------- */

#define KEYS_MAX 64

typedef struct {
    char key[KEYS_MAX][32];
    char value[KEYS_MAX][256];
    int n;
} keys_t;

static void add_key(const char *const *g, int ng, void *ctx)
{
    keys_t *k = ctx;
    assert_int_equal(ng, 2);
    assert_true(k->n < KEYS_MAX);
    snprintf(k->key[k->n], sizeof k->key[0], "%s", g[0]);
    snprintf(k->value[k->n], sizeof k->value[0], "%s", g[1]);
    k->n++;
}

/* Every optional key set, so that every key is written. */
static train_options_t everything(void)
{
    train_options_t o = train_defaults();
    o.cfg.stages = 4; /* tiny has 4 layers; a middle stage for val_skip_mask */
    memset(o.data_sha256, 'a', 64);
    o.data_sha256[64] = 0;
    snprintf(o.data_url, sizeof o.data_url, "https://example.org/corpus.txt");
    o.skip = 0.5;
    o.skip_until = 0.5;
    o.swap = 0.25;
    o.val_every = 10;
    o.val_skip = 2; /* stage 1 */
    o.demo_local = 4;
    o.outer_lr = 0.7f;
    o.outer_mom = 0.9f;
    o.demo.xform = DEMO_XFORM_NONE;
    o.overlap = 1;
    o.grad_delay = 1;
    return o;
}

static int accepts(const char *key, const char *value)
{
    char text[512], err[STATUS_ERR_LEN];
    snprintf(text, sizeof text, "%s=%s\n", key, value);
    train_options_t o = train_defaults();
    return train_options_from_text(&o, text, err) == 0;
}

static void test_run_text_keys(void **state)
{
    (void)state;
    char *s = section("### 7.6 ");
    keys_t doc_keys = {0};
    each_match(s, "^\\| `([a-z0-9_.]+)` \\| [^|]+ \\| ([^\n]*) \\|$", add_key, &doc_keys);
    free(s);
    assert_true(doc_keys.n >= 30);

    /* the keys written, in order */
    train_options_t o = everything();
    char text[4096], err[STATUS_ERR_LEN];
    size_t len = train_options_to_text(&o, text, sizeof text);
    assert_true(len > 0 && len < sizeof text - 1);
    int i = 0;
    for (char *line = text; *line; i++) {
        char *eq = strchr(line, '='), *nl = strchr(line, '\n');
        assert_non_null(eq);
        assert_non_null(nl);
        *eq = 0;
        if (i >= doc_keys.n) fail_msg("the code writes '%s', which 7.6 does not list", line);
        if (strcmp(line, doc_keys.key[i]))
            fail_msg("key %d: the code writes '%s', 7.6 lists '%s' there", i, line,
                     doc_keys.key[i]);
        line = nl + 1;
    }
    if (i != doc_keys.n) fail_msg("7.6 lists '%s', which the code does not write", doc_keys.key[i]);

    /* the whole text reads back; an unknown key is refused */
    train_options_to_text(&o, text, sizeof text);
    train_options_t back = train_defaults();
    if (train_options_from_text(&back, text, err)) fail_msg("run text refused: %s", err);
    assert_false(accepts("no_such_key", "1"));

    /* each stated range and word list, at its ends and beyond */
    int ranges = 0, words = 0;
    for (int j = 0; j < doc_keys.n; j++) {
        const char *k = doc_keys.key[j], *v = doc_keys.value[j];
        const char *in = strstr(v, "number in [");
        const char *of = strstr(v, "one of ");
        if (in) {
            char lo[32], hi[32];
            if (sscanf(in, "number in [%31[^,], %31[^]]]", lo, hi) != 2)
                fail_msg("%s: cannot read the range in '%s'", k, v);
            if (!accepts(k, lo) || !accepts(k, hi))
                fail_msg("%s: the docs' range [%s, %s] is not accepted at its ends", k, lo, hi);
            char below[40], above[40];
            double l = strtod(lo, NULL), h = strtod(hi, NULL);
            snprintf(below, sizeof below, "%.17g", l >= 1 ? l - 1 : l - 0.5);
            snprintf(above, sizeof above, "%.17g", h * 2 + 1);
            if (accepts(k, below) || accepts(k, above))
                fail_msg("%s: a value outside the docs' range [%s, %s] is accepted", k, lo, hi);
            ranges++;
        } else if (of) {
            const char *p = of + strlen("one of ");
            int nw = 0;
            while (*p == '`') {
                char w[32];
                const char *e = strchr(p + 1, '`');
                assert_non_null(e);
                snprintf(w, sizeof w, "%.*s", (int)(e - p - 1), p + 1);
                if (!accepts(k, w)) fail_msg("%s: the docs' word '%s' is refused", k, w);
                nw++;
                p = e + 1;
                while (*p == ' ') p++;
            }
            assert_true(nw >= 2);
            assert_false(accepts(k, "no-such-word"));
            words++;
        }
    }
    assert_true(ranges >= 20);
    assert_true(words >= 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_octet),     cmocka_unit_test(test_header_lengths),
        cmocka_unit_test(test_member_entry_size), cmocka_unit_test(test_stage_message_version),
        cmocka_unit_test(test_state_size),        cmocka_unit_test(test_run_text_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
