/* test_timers_doc.c — docs/protocol.md 12.11 and the code name the same timers: every
 * timeout_make("NAME", ...) in the sources has a row `NAME` in the table, and every row
 * names a timer the code makes. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#define NAMES_MAX 256

typedef struct {
    char name[NAMES_MAX][64];
    int n;
} names_t;

static void add(names_t *s, const char *name, size_t len)
{
    if (len == 0 || len >= sizeof s->name[0] || s->n == NAMES_MAX) return;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && !memcmp(s->name[i], name, len)) return;
    memcpy(s->name[s->n], name, len);
    s->name[s->n++][len] = 0;
}

static int has(const names_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) return 1;
    return 0;
}

/* timeout_make("NAME" in every .c of dir */
static void scan_code(names_t *s, const char *root, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 3 || strcmp(e->d_name + l - 2, ".c")) continue;
        snprintf(path, sizeof path, "%s/%s/%s", root, dir, e->d_name);
        char *text = testutil_slurp(path, NULL);
        assert_non_null(text);
        for (char *p = text; (p = strstr(p, "timeout_make(\"")); p++) {
            const char *q = p + strlen("timeout_make(\"");
            const char *end = strchr(q, '"');
            if (end) add(s, q, (size_t)(end - q));
        }
        free(text);
    }
    closedir(d);
}

static void test_timer_table(void **state)
{
    (void)state;
    const char *root = getenv("SWARMTRAIN_SOURCE");
    if (!root) skip();
    names_t code = {.n = 0}, doc = {.n = 0};
    const char *dirs[] = {"peer", "swarm", "common", "tools"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) scan_code(&code, root, dirs[i]);
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/protocol.md", root);
    char *md = testutil_slurp(path, NULL);
    assert_non_null(md);
    char *sec = strstr(md, "### 12.11 Timers as objects");
    assert_non_null(sec);
    char *next = strstr(sec + 4, "\n## ");
    if (next) *next = 0;
    for (char *p = sec; (p = strstr(p, "\n| `")); p++) {
        const char *q = p + 4, *end = strchr(q, '`');
        if (end) add(&doc, q, (size_t)(end - q));
    }
    free(md);
    assert_true(code.n > 0);
    for (int i = 0; i < code.n; i++)
        if (!has(&doc, code.name[i]))
            fail_msg("timer %s is not in protocol.md 12.11", code.name[i]);
    for (int i = 0; i < doc.n; i++)
        if (!has(&code, doc.name[i]))
            fail_msg("protocol.md 12.11 names %s, which the code does not make", doc.name[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_timer_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
