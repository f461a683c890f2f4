/* record.c — the tests' readers of what a run recorded (record.h). */
#include "record.h"
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

char *record_text(const char *path)
{
    char *s = testutil_slurp(path, NULL);
    if (!s) fail_msg("cannot read %s", path);
    return s;
}

typedef struct {
    const char *kind; /* events only: the kind kept (NULL: every object) */
    json_obj_t *o;    /* the objects kept (realloc'd) */
    int n;
} rows_t;

static void add_row(void *ctx, const json_obj_t *o)
{
    rows_t *r = ctx;
    if (r->kind && strcmp(json_get(o, "kind"), r->kind)) return;
    json_obj_t *g = realloc(r->o, (size_t)(r->n + 1) * sizeof *g);
    assert_non_null(g);
    r->o = g;
    r->o[r->n++] = *o;
}

json_obj_t *record_rows(const char *json, const char *array, int *n)
{
    rows_t r = {NULL, NULL, 0};
    if (json_each(json, array, add_row, &r) < 0) fail_msg("no array \"%s\" in:\n%s", array, json);
    *n = r.n;
    return r.o;
}

json_obj_t *record_events(const char *path, const char *kind, int *n)
{
    char *text = testutil_slurp(path, NULL);
    rows_t r = {kind, NULL, 0};
    if (text) assert_int_equal(json_lines(text, add_row, &r), 0);
    free(text);
    *n = r.n;
    return r.o;
}

int record_last_event(const char *path, const char *kind, json_obj_t *o)
{
    int n;
    json_obj_t *ev = record_events(path, kind, &n);
    if (n) *o = ev[n - 1];
    free(ev);
    return n > 0;
}

char *record_summary(const char *run_dir, json_obj_t *top)
{
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    char *s = record_text(path);
    assert_int_equal(json_object(s, NULL, top), 0);
    return s;
}
