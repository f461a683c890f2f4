/* prom.c — Prometheus text exposition, built in memory and written atomically. */
#include "tools/prom.h"
#include "common/status.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_FAMILIES = 64 };

struct prom {
    char *text;
    size_t len, cap;
    int oom;
    char families[MAX_FAMILIES][96];
    int nfam;
};

prom_t *prom_new(void)
{
    return calloc(1, sizeof(prom_t));
}

void prom_destroy(prom_t **pp)
{
    if (!pp || !*pp) return;
    free((*pp)->text);
    free(*pp);
    *pp = NULL;
}

static void add(prom_t *p, const char *s, size_t n)
{
    if (p->oom) return;
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 4096;
        while (cap < p->len + n + 1) cap *= 2;
        char *q = realloc(p->text, cap);
        if (!q) {
            p->oom = 1;
            return;
        }
        p->text = q;
        p->cap = cap;
    }
    memcpy(p->text + p->len, s, n);
    p->len += n;
    p->text[p->len] = 0;
}

static void adds(prom_t *p, const char *s)
{
    add(p, s, strlen(s));
}

int prom_valid_name(const char *s, int label)
{
    if (!s || !*s) return 0;
    if (label && s[0] == '_' && s[1] == '_') return 0; /* reserved */
    for (const char *c = s; *c; c++) {
        int alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
        int ok = alpha || (c > s && *c >= '0' && *c <= '9') || (!label && *c == ':');
        if (!ok) return 0;
    }
    return 1;
}

/* Escapes \ and newline (HELP), and " as well (label values). */
static void add_escaped(prom_t *p, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            adds(p, "\\\\");
        else if (*s == '\n')
            adds(p, "\\n");
        else if (quote && *s == '"')
            adds(p, "\\\"");
        else
            add(p, s, 1);
    }
}

int prom_family(prom_t *p, const char *name, const char *type, const char *help)
{
    if (!prom_valid_name(name, 0) || strlen(name) >= sizeof p->families[0] ||
        p->nfam == MAX_FAMILIES)
        return -1;
    if (strcmp(type, "gauge") && strcmp(type, "counter") && strcmp(type, "untyped")) return -1;
    for (int i = 0; i < p->nfam; i++)
        if (!strcmp(p->families[i], name)) return -1;
    snprintf(p->families[p->nfam++], sizeof p->families[0], "%s", name);
    adds(p, "# HELP ");
    adds(p, name);
    adds(p, " ");
    add_escaped(p, help, 0);
    adds(p, "\n# TYPE ");
    adds(p, name);
    adds(p, " ");
    adds(p, type);
    adds(p, "\n");
    return 0;
}

int prom_sample(prom_t *p, const char *const *kv, int n, double value)
{
    if (!p->nfam) return -1;
    for (int i = 0; i < n; i++)
        if (!prom_valid_name(kv[2 * i], 1)) return -1;
    adds(p, p->families[p->nfam - 1]);
    if (n > 0) {
        adds(p, "{");
        for (int i = 0; i < n; i++) {
            if (i) adds(p, ",");
            adds(p, kv[2 * i]);
            adds(p, "=\"");
            add_escaped(p, kv[2 * i + 1], 1);
            adds(p, "\"");
        }
        adds(p, "}");
    }
    char v[40];
    if (isnan(value))
        snprintf(v, sizeof v, " NaN\n");
    else if (isinf(value))
        snprintf(v, sizeof v, " %sInf\n", value > 0 ? "+" : "-");
    else
        snprintf(v, sizeof v, " %.17g\n", value);
    adds(p, v);
    return 0;
}

const char *prom_text(const prom_t *p)
{
    return p->oom || !p->text ? "" : p->text;
}

int prom_write(const prom_t *p, const char *path, char *err)
{
    if (p->oom) return status_set(err, STATUS_ENOMEM, "metrics: out of memory");
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        return status_set(err, STATUS_EIO, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return status_set(err, STATUS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const char *t = prom_text(p);
    size_t n = strlen(t);
    int ok = fwrite(t, 1, n, f) == n;
    if (fclose(f)) ok = 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return status_set(err, STATUS_EIO, "%s: cannot write", path);
    }
    return 0;
}
