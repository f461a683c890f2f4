/* json.c — a small reader for the flat status document. */
#include "tools/json.h"

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
            c = *p == 'u' ? '?' : *p;
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
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n') {
        if (n + 1 < cap) out[n++] = *p;
        p++;
    }
    out[n] = 0;
    return n ? p : NULL;
}

int json_each(const char *json, const char *array, void (*fn)(void *ctx, const json_obj_t *o),
              void *ctx)
{
    char pat[64];
    size_t plen = strlen(array);
    if (plen + 4 > sizeof pat) return -1;
    pat[0] = '"';
    memcpy(pat + 1, array, plen);
    memcpy(pat + 1 + plen, "\":", 3);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p = skip_ws(p + strlen(pat));
    if (*p != '[') return -1;
    p = skip_ws(p + 1);
    int count = 0;
    while (*p == '{') {
        json_obj_t o;
        o.n = 0;
        p = skip_ws(p + 1);
        while (*p == '"') {
            char key[32], val[160];
            p = read_str(p, key, sizeof key);
            if (!p) return -1;
            p = skip_ws(p);
            if (*p != ':') return -1;
            p = read_scalar(skip_ws(p + 1), val, sizeof val);
            if (!p) return -1;
            if (o.n < JSON_MAX_FIELDS) {
                strcpy(o.key[o.n], key);
                strcpy(o.val[o.n], val);
                o.n++;
            }
            p = skip_ws(p);
            if (*p == ',') p = skip_ws(p + 1);
        }
        if (*p != '}') return -1;
        fn(ctx, &o);
        count++;
        p = skip_ws(p + 1);
        if (*p == ',') p = skip_ws(p + 1);
    }
    return *p == ']' ? count : -1;
}

const char *json_get(const json_obj_t *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], key)) return o->val[i];
    return "";
}
