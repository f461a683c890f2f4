/* json.c — a small reader for the flat JSON swarmtrain writes (json.h). */
#include "tools/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    return p;
}

/* Reads a string at p (which points at '"') into out; returns past the closing quote. */
static const char *read_str(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    if (*p != '"') return NULL;
    for (p++; *p && *p != '"'; p++) {
        char c = *p;
        if (c == '\\') {
            p++;
            if (!*p) return NULL;
            c = *p == 'u' ? '?' : *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
            if (*p == 'u') {
                for (int i = 0; i < 4 && p[1]; i++) p++;
            }
        }
        if (n + 1 < cap) out[n++] = c;
    }
    if (*p != '"') return NULL;
    out[n] = 0;
    return p + 1;
}

/* A scalar value (string, number, true/false/null) into out. */
static const char *read_scalar(const char *p, char *out, size_t cap)
{
    if (*p == '"') return read_str(p, out, cap);
    size_t n = 0;
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\r' &&
           *p != '\t') {
        if (n + 1 < cap) out[n++] = *p;
        p++;
    }
    out[n] = 0;
    return n ? p : NULL;
}

/* Past a nested array or object at p (strings in it may hold brackets); NULL if it does
 * not end. */
static const char *skip_nested(const char *p)
{
    int depth = 0;
    char tmp[2];
    while (*p) {
        if (*p == '"') {
            if (!(p = read_str(p, tmp, sizeof tmp))) return NULL;
            continue;
        }
        if (*p == '[' || *p == '{') depth++;
        if (*p == ']' || *p == '}') depth--;
        p++;
        if (!depth) return p;
    }
    return NULL;
}

/* The object at p ('{') into o: its scalar fields, nested values skipped when `nested`,
 * else refused. Returns past its '}', or NULL. */
static const char *read_object(const char *p, json_obj_t *o, int nested)
{
    o->n = 0;
    if (*p != '{') return NULL;
    p = skip_ws(p + 1);
    while (*p == '"') {
        char key[32], val[256];
        p = read_str(p, key, sizeof key);
        if (!p) return NULL;
        p = skip_ws(p);
        if (*p != ':') return NULL;
        p = skip_ws(p + 1);
        if (*p == '[' || *p == '{') {
            if (!nested || !(p = skip_nested(p))) return NULL;
        } else {
            p = read_scalar(p, val, sizeof val);
            if (!p) return NULL;
            if (o->n < JSON_MAX_FIELDS) {
                strcpy(o->key[o->n], key);
                strcpy(o->val[o->n], val);
                o->n++;
            }
        }
        p = skip_ws(p);
        if (*p == ',') p = skip_ws(p + 1);
    }
    return *p == '}' ? p + 1 : NULL;
}

/* Where the value of top-level-or-not key `key` begins ("key": found as text), or NULL. */
static const char *value_of(const char *json, const char *key)
{
    char pat[64];
    size_t plen = strlen(key);
    if (plen + 4 > sizeof pat) return NULL;
    pat[0] = '"';
    memcpy(pat + 1, key, plen);
    memcpy(pat + 1 + plen, "\":", 3);
    const char *p = strstr(json, pat);
    return p ? skip_ws(p + strlen(pat)) : NULL;
}

int json_each(const char *json, const char *array, void (*fn)(void *ctx, const json_obj_t *o),
              void *ctx)
{
    const char *p = value_of(json, array);
    if (!p || *p != '[') return -1;
    p = skip_ws(p + 1);
    int count = 0;
    while (*p == '{') {
        json_obj_t o;
        p = read_object(p, &o, 0);
        if (!p) return -1;
        fn(ctx, &o);
        count++;
        p = skip_ws(p);
        if (*p == ',') p = skip_ws(p + 1);
    }
    return *p == ']' ? count : -1;
}

int json_object(const char *json, const char *key, json_obj_t *o)
{
    const char *p = key ? value_of(json, key) : skip_ws(json);
    o->n = 0;
    return p && read_object(p, o, 1) ? 0 : -1;
}

int json_lines(const char *text, void (*fn)(void *ctx, const json_obj_t *o), void *ctx)
{
    int bad = 0;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
        if (p < end) { /* not a blank line */
            json_obj_t o;
            const char *past = read_object(p, &o, 0);
            while (past && past < end && (*past == ' ' || *past == '\t' || *past == '\r')) past++;
            if (past == end)
                fn(ctx, &o);
            else
                bad++;
        }
        p = *end ? end + 1 : NULL;
    }
    return bad;
}

const char *json_get(const json_obj_t *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], key)) return o->val[i];
    return "";
}

double json_num(const json_obj_t *o, const char *key)
{
    const char *v = json_get(o, key);
    char *end;
    double x = strtod(v, &end);
    return *v && !*end ? x : NAN;
}

int json_has(const json_obj_t *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], key)) return 1;
    return 0;
}

int json_val_loss_detail(const char *detail, long long *step, double *loss)
{
    json_obj_t o;
    double st = NAN, v = NAN;
    if (json_object(detail, NULL, &o) == 0) {
        st = json_num(&o, "val_step"), v = json_num(&o, "val_loss");
    } else {
        long long s;
        if (sscanf(detail, "step %lld val_loss %lf", &s, &v) == 2) st = (double)s;
    }
    if (!isfinite(st) || !isfinite(v)) return 0;
    *step = (long long)st;
    *loss = v;
    return 1;
}

void json_put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    fputc('"', f);
}
