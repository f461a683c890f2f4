/* test_events.c — the events record (common/events.h) and its reader (tools/json.h):
 * - fields from a printf format: numbers as numbers, strings escaped, hex as strings,
 *   non-finite numbers null, padding only where it stays JSON;
 * - a format that is not key=%conversion items is refused, keeping what came before;
 * - lines appended to a file read back by json_lines with the fixed keys;
 * - json_object reads a document's scalars and skips nested values;
 * - a store's val_loss detail, new (JSON) and old ("step N val_loss X"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/events.h"
#include "testutil.h"
#include "tools/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fields(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fields(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = events_fields(out, n, fmt, ap);
    va_end(ap);
    return k;
}

static void test_fields(void **state)
{
    (void)state;
    char out[512];
    int64_t big = INT64_C(1) << 40;
    uint64_t h = 0xabcdefULL;
    const char *none = getenv("ST_TEST_EVENTS_UNSET_VARIABLE"); /* NULL, unknown to gcc */
    int k = fields(out, sizeof out,
                   "a=%d b=%" PRId64 " c=%.4f d=%s e=%016" PRIx64 " f=%zu g=%.2f h=%s i=%5d u=%u",
                   -3, big, 0.5, "say \"hi\"\n", h, (size_t)7, NAN, none, 42, 9u);
    assert_true(k > 0);
    assert_string_equal(out,
                        "\"a\":-3,\"b\":1099511627776,\"c\":0.5000,\"d\":\"say \\\"hi\\\"\\u000a\","
                        "\"e\":\"0000000000abcdef\",\"f\":7,\"g\":null,\"h\":null,\"i\":42,"
                        "\"u\":9");
    /* not key=%conversion items: refused, what came before kept */
    assert_int_equal(fields(out, sizeof out, "a=%d b %d", 1, 2), -1);
    assert_string_equal(out, "\"a\":1");
    assert_int_equal(fields(out, sizeof out, "Bad=%d", 1), -1);
    assert_string_equal(out, "");
    assert_int_equal(fields(out, sizeof out, "a=%p", (void *)out), -1);
    /* too small: the member that does not fit goes */
    assert_int_equal(fields(out, 10, "a=%d b=%d", 1, 2), -1);
    assert_string_equal(out, "\"a\":1");
}

typedef struct {
    int n;
    json_obj_t last;
} seen_t;

static void on_line(void *ctx, const json_obj_t *o)
{
    seen_t *s = ctx;
    s->n++;
    s->last = *o;
}

static void test_lines(void **state)
{
    (void)state;
    char path[] = "/tmp/st_eventsXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    events_t *ev = events_open(path, err);
    assert_non_null(ev);
    double t0 = clock_wall();
    events_add(ev, "moved", 1, 40, "from=%d to=%d why=%s", 0, 1, "slow, \"stage\" 1");
    events_add(ev, "exit", -1, -1, "code=%d", 0);
    events_add(NULL, "nothing", 0, 0, "x=%d", 1); /* NULL-safe */
    events_close(&ev);
    events_close(&ev);
    assert_null(ev);
    FILE *f = fopen(path, "r");
    char text[4096];
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    unlink(path);
    printf("%s", text);
    seen_t s = {0};
    assert_int_equal(json_lines(text, on_line, &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(json_get(&s.last, "kind"), "exit");
    assert_string_equal(json_get(&s.last, "stage"), "null");
    assert_true(isnan(json_num(&s.last, "step")));
    assert_true(json_has(&s.last, "step"));
    assert_true(json_num(&s.last, "t") >= t0 - 1 && json_num(&s.last, "t") <= clock_wall() + 1);
    memset(&s, 0, sizeof s);
    char *nl = strchr(text, '\n');
    *nl = 0; /* the first line alone */
    assert_int_equal(json_lines(text, on_line, &s), 0);
    assert_string_equal(json_get(&s.last, "kind"), "moved");
    assert_int_equal((int)json_num(&s.last, "stage"), 1);
    assert_int_equal((int)json_num(&s.last, "step"), 40);
    assert_int_equal((int)json_num(&s.last, "to"), 1);
    assert_string_equal(json_get(&s.last, "why"), "slow, \"stage\" 1");
    /* a line that is not one object is counted, the others read */
    memset(&s, 0, sizeof s);
    assert_int_equal(json_lines("{\"a\":1}\n\n  \n{\"a\":[1]}\nnot json\n{\"b\":2}", on_line, &s),
                     2);
    assert_int_equal(s.n, 2);
    assert_int_equal((int)json_num(&s.last, "b"), 2);
}

static void test_object(void **state)
{
    (void)state;
    const char *doc = "{\"val_loss\":3.5,\"unplanned\":[{\"peer\":1}],\"killed\":[1,2],"
                      "\"wire_sent\":{\"activations\":10,\"total\":12},\"note\":\"a [b] {c}\","
                      "\"lost\":0}";
    json_obj_t o;
    assert_int_equal(json_object(doc, NULL, &o), 0);
    assert_int_equal(o.n, 3);
    assert_true(json_num(&o, "val_loss") == 3.5);
    assert_int_equal((int)json_num(&o, "lost"), 0);
    assert_string_equal(json_get(&o, "note"), "a [b] {c}");
    assert_false(json_has(&o, "killed"));
    assert_int_equal(json_object(doc, "wire_sent", &o), 0);
    assert_int_equal((int)json_num(&o, "total"), 12);
    assert_int_equal(json_object(doc, "missing", &o), -1);
    assert_int_equal(json_object("{\"a\":", NULL, &o), -1);
}

static void test_val_loss_detail(void **state)
{
    (void)state;
    long long step = -1;
    double v = NAN;
    assert_int_equal(
        json_val_loss_detail("{\"stage\":0,\"step\":16,\"val_step\":15,\"val_loss\":3.25,"
                             "\"final\":0}",
                             &step, &v),
        1);
    assert_int_equal(step, 15);
    assert_true(v == 3.25);
    assert_int_equal(json_val_loss_detail("step 7 val_loss 4.5", &step, &v), 1);
    assert_int_equal(step, 7);
    assert_true(v == 4.5);
    assert_int_equal(json_val_loss_detail("{\"val_step\":1,\"val_loss\":null}", &step, &v), 0);
    assert_int_equal(json_val_loss_detail("stage 1 pool", &step, &v), 0);
}

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_object),
        cmocka_unit_test(test_val_loss_detail),
    };
    return cmocka_run_group_tests(all, NULL, NULL);
}
