/* events.c — the record of what happened as JSON lines (events.h). */
#include "common/events.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct events {
    int fd;
    int warned; /* a failed write was said */
};

events_t *events_open(const char *path, char *err)
{
    events_t *ev = calloc(1, sizeof *ev);
    if (!ev) {
        status_set(err, STATUS_ENOMEM, "events: out of memory");
        return NULL;
    }
    ev->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ev->fd < 0) {
        status_set(err, STATUS_EIO, "%s: %s", path, strerror(errno));
        free(ev);
        return NULL;
    }
    return ev;
}

void events_close(events_t **ev)
{
    if (!ev || !*ev) return;
    close((*ev)->fd);
    free(*ev);
    *ev = NULL;
}

/* Appends the JSON string of s (escaped) to out at *len; 0, or -1 when it does not fit. */
static int put_string(char *out, size_t n, size_t *len, const char *s)
{
    size_t k = *len;
    if (k + 1 >= n) return -1;
    out[k++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        size_t e = 0;
        if (c == '"' || c == '\\')
            esc[e++] = '\\', esc[e++] = (char)c;
        else if (c < 0x20)
            e = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
        else
            esc[e++] = (char)c;
        if (k + e + 2 > n) return -1;
        memcpy(out + k, esc, e);
        k += e;
    }
    out[k++] = '"';
    out[k] = 0;
    *len = k;
    return 0;
}

/* Appends raw text; 0, or -1 when it does not fit. */
static int put_raw(char *out, size_t n, size_t *len, const char *s)
{
    size_t m = strlen(s);
    if (*len + m + 1 > n) return -1;
    memcpy(out + *len, s, m + 1);
    *len += m;
    return 0;
}

/* One conversion spec at f ('%' ... conversion) into spec[]: flags and width only for the
 * conversions that become strings (a padded number is not JSON), then precision, length
 * modifier (also into mod[]) and conversion (*conv). Returns past it, or NULL when it is
 * not one we take. */
static const char *read_spec(const char *f, char spec[32], char mod[3], char *conv)
{
    char pad[16];
    size_t np = 0, k = 0, m = 0;
    f++; /* '%' */
    while (*f && strchr("-+ #0", *f) && np < 6) pad[np++] = *f++;
    while (*f >= '0' && *f <= '9' && np < 12) pad[np++] = *f++;
    char prec[8];
    size_t nr = 0;
    if (*f == '.') {
        prec[nr++] = *f++;
        while (*f >= '0' && *f <= '9' && nr < 6) prec[nr++] = *f++;
    }
    while (*f && strchr("hljztL", *f) && m < 2) mod[m++] = *f++;
    mod[m] = 0;
    if (!*f || !strchr("diuxXofeEgGs", *f)) return NULL;
    *conv = *f++;
    spec[k++] = '%';
    if (strchr("xXos", *conv)) {
        memcpy(spec + k, pad, np);
        k += np;
    }
    memcpy(spec + k, prec, nr);
    k += nr;
    memcpy(spec + k, mod, m);
    k += m;
    spec[k++] = *conv;
    spec[k] = 0;
    return f;
}

/* The value of one spec, taken from ap, rendered as JSON into val (strings quoted later:
 * *is_str says so). 0, or -1 for a modifier that does not fit the conversion. */
static int render(const char *spec, const char *mod, char conv, va_list *ap, char *val, size_t n,
                  int *is_str)
{
    *is_str = conv == 'x' || conv == 'X' || conv == 'o';
    if (conv == 's') {
        const char *s = va_arg(*ap, const char *);
        if (!s) {
            snprintf(val, n, "null");
            return 0;
        }
        *is_str = 1;
        snprintf(val, n, spec, s);
        return 0;
    }
    if (strchr("feEgG", conv)) {
        double x = !strcmp(mod, "L") ? (double)va_arg(*ap, long double) : va_arg(*ap, double);
        if (!isfinite(x))
            snprintf(val, n, "null");
        else if (!strcmp(mod, "L"))
            snprintf(val, n, spec, (long double)x);
        else
            snprintf(val, n, spec, x);
        return 0;
    }
    int is_signed = conv == 'd' || conv == 'i';
    if (!*mod || !strcmp(mod, "h") || !strcmp(mod, "hh")) {
        if (is_signed)
            snprintf(val, n, spec, va_arg(*ap, int));
        else
            snprintf(val, n, spec, va_arg(*ap, unsigned));
    } else if (!strcmp(mod, "l")) {
        if (is_signed)
            snprintf(val, n, spec, va_arg(*ap, long));
        else
            snprintf(val, n, spec, va_arg(*ap, unsigned long));
    } else if (!strcmp(mod, "ll")) {
        if (is_signed)
            snprintf(val, n, spec, va_arg(*ap, long long));
        else
            snprintf(val, n, spec, va_arg(*ap, unsigned long long));
    } else if (!strcmp(mod, "j")) {
        if (is_signed)
            snprintf(val, n, spec, va_arg(*ap, intmax_t));
        else
            snprintf(val, n, spec, va_arg(*ap, uintmax_t));
    } else if (!strcmp(mod, "z")) {
        snprintf(val, n, spec, va_arg(*ap, size_t));
    } else if (!strcmp(mod, "t")) {
        snprintf(val, n, spec, va_arg(*ap, ptrdiff_t));
    } else {
        return -1;
    }
    return 0;
}

int events_fields(char *out, size_t n, const char *fmt, va_list ap)
{
    size_t len = 0;
    if (!n) return -1;
    out[0] = 0;
    va_list cp;
    va_copy(cp, ap);
    int rc = 0;
    for (const char *f = fmt; *f;) {
        if (*f == ' ') {
            f++;
            continue;
        }
        const char *eq = strchr(f, '=');
        size_t klen = eq ? (size_t)(eq - f) : 0;
        int key_ok = klen > 0 && klen < 64 && eq[1] == '%';
        for (size_t i = 0; key_ok && i < klen; i++)
            key_ok = (f[i] >= 'a' && f[i] <= 'z') || (f[i] >= '0' && f[i] <= '9') || f[i] == '_';
        char spec[32], mod[3], conv, key[64], val[1024];
        const char *next = key_ok ? read_spec(eq + 1, spec, mod, &conv) : NULL;
        int is_str = 0;
        if (!next || (*next && *next != ' ') ||
            render(spec, mod, conv, &cp, val, sizeof val, &is_str)) {
            rc = -1;
            break;
        }
        memcpy(key, f, klen);
        key[klen] = 0;
        size_t mark = len;
        if ((len && put_raw(out, n, &len, ",")) || put_string(out, n, &len, key) ||
            put_raw(out, n, &len, ":") ||
            (is_str ? put_string(out, n, &len, val) : put_raw(out, n, &len, val))) {
            len = mark; /* the member that did not fit goes */
            out[len] = 0;
            rc = -1;
            break;
        }
        f = next;
    }
    va_end(cp);
    return rc ? -1 : (int)len;
}

int events_object(char *out, size_t n, int stage, int64_t step, const char *fields)
{
    char st[16] = "null", sp[32] = "null";
    if (stage >= 0) snprintf(st, sizeof st, "%d", stage);
    if (step >= 0) snprintf(sp, sizeof sp, "%" PRId64, step);
    int k = snprintf(out, n, "{\"stage\":%s,\"step\":%s%s%s}", st, sp, fields && *fields ? "," : "",
                     fields ? fields : "");
    return k < 0 ? 0 : (size_t)k >= n ? (int)n - 1 : k;
}

void events_put(events_t *ev, const char *kind, int stage, int64_t step, const char *fields)
{
    if (!ev) return;
    char obj[4096], line[4400];
    int olen = events_object(obj, sizeof obj, stage, step, fields);
    if (olen < 2 || obj[olen - 1] != '}') return; /* cut short: not written half */
    int k = snprintf(line, sizeof line, "{\"t\":%.3f,\"kind\":", clock_wall());
    size_t len = (size_t)k;
    if (put_string(line, sizeof line, &len, kind) || put_raw(line, sizeof line, &len, ",") ||
        put_raw(line, sizeof line, &len, obj + 1) || put_raw(line, sizeof line, &len, "\n"))
        return;
    ssize_t w = write(ev->fd, line, len);
    if (w != (ssize_t)len && !ev->warned) {
        ev->warned = 1;
        log_warn("events: a write failed (%s); later failures are not said",
                 w < 0 ? strerror(errno) : "short write");
    }
}

void events_add(events_t *ev, const char *kind, int stage, int64_t step, const char *fmt, ...)
{
    if (!ev) return;
    char fields[3072];
    va_list ap;
    va_start(ap, fmt);
    events_fields(fields, sizeof fields, fmt, ap);
    va_end(ap);
    events_put(ev, kind, stage, step, fields);
}
