/* safetensors.c — the safetensors format: a writer of float32/bfloat16 tensors and a
 * strict reader (its own small JSON parser for the header; nothing from the file is
 * trusted before it is checked against the file's size). */
#include "model/safetensors.h"
#include "common/le.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies float32 as is: the file format is little-endian"
#endif

static const struct {
    const char *name;
    size_t size;
} dtypes[SAFETENSORS_NDTYPES] = {
    [SAFETENSORS_F32] = {"F32", 4}, [SAFETENSORS_BF16] = {"BF16", 2},
    [SAFETENSORS_F16] = {"F16", 2}, [SAFETENSORS_F64] = {"F64", 8},
    [SAFETENSORS_I64] = {"I64", 8}, [SAFETENSORS_I32] = {"I32", 4},
    [SAFETENSORS_I16] = {"I16", 2}, [SAFETENSORS_I8] = {"I8", 1},
    [SAFETENSORS_U8] = {"U8", 1},   [SAFETENSORS_BOOL] = {"BOOL", 1},
};

const char *safetensors_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < SAFETENSORS_NDTYPES ? dtypes[dtype].name : NULL;
}

size_t safetensors_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < SAFETENSORS_NDTYPES ? dtypes[dtype].size : 0;
}

int safetensors_dtype_by_name(const char *name)
{
    for (int i = 0; i < SAFETENSORS_NDTYPES; i++)
        if (!strcmp(name, dtypes[i].name)) return i;
    return -1;
}

uint16_t safetensors_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float safetensors_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (!man) {
            u = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) man <<= 1, exp--;
            u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- writer ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} buf_t;

static void buf_add(buf_t *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_str(buf_t *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_fmt(buf_t *b, const char *fmt, unsigned long long v)
{
    char t[32];
    int n = snprintf(t, sizeof t, fmt, v);
    buf_add(b, t, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void buf_json_str(buf_t *b, const char *s)
{
    buf_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            buf_add(b, e, 2);
        } else if (c == '\n') {
            buf_add(b, "\\n", 2);
        } else if (c < 0x20) {
            buf_fmt(b, "\\u%04llx", c);
        } else {
            buf_add(b, (const char *)&c, 1);
        }
    }
    buf_add(b, "\"", 1);
}

static size_t numel_of(const safetensors_tensor_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

int safetensors_write(const char *path, const safetensors_tensor_t *t, int n, int dtype,
                      const char *const *meta, int nmeta, char *err)
{
    if (dtype != SAFETENSORS_F32 && dtype != SAFETENSORS_BF16)
        return status_set(err, STATUS_EINVAL, "safetensors: can write F32 or BF16, not dtype %d",
                          dtype);
    if (n < 0 || nmeta < 0) return status_set(err, STATUS_EINVAL, "safetensors: bad counts");
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !*t[i].name || !strcmp(t[i].name, "__metadata__"))
            return status_set(err, STATUS_EINVAL, "safetensors: tensor %d has a bad name", i);
        if (t[i].ndim < 0 || t[i].ndim > SAFETENSORS_MAX_DIMS)
            return status_set(err, STATUS_EINVAL, "safetensors: %s: bad rank %d", t[i].name,
                              t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0)
                return status_set(err, STATUS_EINVAL, "safetensors: %s: negative dimension",
                                  t[i].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name))
                return status_set(err, STATUS_EINVAL, "safetensors: duplicate tensor %s",
                                  t[i].name);
    }

    buf_t h = {0};
    size_t esize = safetensors_dtype_size(dtype), off = 0;
    buf_str(&h, "{");
    if (nmeta > 0) {
        buf_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) buf_str(&h, ",");
            buf_json_str(&h, meta[2 * i]);
            buf_str(&h, ":");
            buf_json_str(&h, meta[2 * i + 1]);
        }
        buf_str(&h, "}");
    }
    for (int i = 0; i < n; i++) {
        size_t bytes = numel_of(&t[i]) * esize;
        if (i || nmeta > 0) buf_str(&h, ",");
        buf_json_str(&h, t[i].name);
        buf_str(&h, ":{\"dtype\":\"");
        buf_str(&h, dtypes[dtype].name);
        buf_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++)
            buf_fmt(&h, d ? ",%llu" : "%llu", (unsigned long long)t[i].shape[d]);
        buf_fmt(&h, "],\"data_offsets\":[%llu,", (unsigned long long)off);
        buf_fmt(&h, "%llu]}", (unsigned long long)(off + bytes));
        off += bytes;
    }
    buf_str(&h, "}");
    while (!h.oom && h.len % 8) buf_str(&h, " "); /* the data starts 8-byte aligned */
    if (h.oom) {
        free(h.p);
        return status_set(err, STATUS_ENOMEM, "safetensors: out of memory");
    }

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        free(h.p);
        return status_set(err, STATUS_EINVAL, "safetensors: path too long");
    }
    int rc = 0;
    uint16_t *conv = NULL;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = status_set(err, STATUS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    le_put_u64(len8, h.len);
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.p, 1, h.len, f) == h.len;
    enum { CHUNK = 1 << 16 };
    if (ok && dtype == SAFETENSORS_BF16 && !(conv = malloc(CHUNK * sizeof *conv))) {
        rc = status_set(err, STATUS_ENOMEM, "safetensors: out of memory");
        goto done;
    }
    for (int i = 0; ok && i < n; i++) {
        size_t m = numel_of(&t[i]);
        const float *x = t[i].data;
        if (m && !x) {
            rc = status_set(err, STATUS_EINVAL, "safetensors: %s has no data", t[i].name);
            goto done;
        }
        if (dtype ==
            SAFETENSORS_F32) { /* the file is little-endian, like every host we build for */
            ok = fwrite(x, sizeof(float), m, f) == m;
            continue;
        }
        for (size_t j = 0; ok && j < m; j += CHUNK) {
            size_t k = m - j < CHUNK ? m - j : CHUNK;
            for (size_t q = 0; q < k; q++) conv[q] = safetensors_f32_to_bf16(x[j + q]);
            ok = fwrite(conv, sizeof *conv, k, f) == k;
        }
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f)) ok = 0;
    f = NULL;
    if (!ok) {
        rc = status_set(err, STATUS_EIO, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path))
        rc = status_set(err, STATUS_EIO, "%s: rename: %s", path, strerror(errno));
done:
    if (f) fclose(f);
    if (rc) unlink(tmp);
    free(conv);
    free(h.p);
    return rc;
}

/* ---- reader ------------------------------------------------------------------------ */

struct safetensors {
    uint8_t *file; /* the whole file */
    size_t size;
    uint64_t hlen;
    safetensors_tensor_t *t;
    int n, cap;
    char **meta; /* key, value, key, value ... */
    int nmeta, meta_cap;
};

typedef struct {
    const char *p, *end;
    char *err;
} parser_t;

static int malformed(parser_t *ps, const char *what)
{
    return status_set(ps->err, STATUS_EMALFORMED, "safetensors header: %s", what);
}

static void skip_ws(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int expect(parser_t *ps, char c)
{
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != c) {
        char what[48];
        snprintf(what, sizeof what, "expected '%c'", c);
        return malformed(ps, what);
    }
    ps->p++;
    return 0;
}

/* 1 when the next non-space character is c (consumed). */
static int accept(parser_t *ps, char c)
{
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return 1;
    }
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static int read_hex4(parser_t *ps, unsigned *out)
{
    if (ps->end - ps->p < 4) return malformed(ps, "short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0) return malformed(ps, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

/* A JSON string into a new allocation (UTF-8; escapes decoded, NULs refused). */
static int parse_string(parser_t *ps, char **out)
{
    *out = NULL;
    if (expect(ps, '"')) return STATUS_EMALFORMED;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    if (!s) return status_set(ps->err, STATUS_ENOMEM, "safetensors: out of memory");
    for (;;) {
        if (ps->p >= ps->end) goto bad;
        unsigned char c = (unsigned char)*ps->p++;
        char enc[4];
        size_t k = 1;
        if (c == '"') break;
        if (c < 0x20) goto bad;
        enc[0] = (char)c;
        if (c == '\\') {
            if (ps->p >= ps->end) goto bad;
            char e = *ps->p++;
            unsigned cp;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                enc[0] = e;
                break;
            case 'b':
                enc[0] = '\b';
                break;
            case 'f':
                enc[0] = '\f';
                break;
            case 'n':
                enc[0] = '\n';
                break;
            case 'r':
                enc[0] = '\r';
                break;
            case 't':
                enc[0] = '\t';
                break;
            case 'u':
                if (read_hex4(ps, &cp)) goto bad;
                if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
                    unsigned lo;
                    if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') goto bad;
                    ps->p += 2;
                    if (read_hex4(ps, &lo) || lo < 0xdc00 || lo >= 0xe000) goto bad;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp < 0xe000) {
                    goto bad;
                }
                if (cp == 0) goto bad;
                if (cp < 0x80) {
                    enc[0] = (char)cp;
                } else if (cp < 0x800) {
                    enc[0] = (char)(0xc0 | cp >> 6), enc[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
                } else if (cp < 0x10000) {
                    enc[0] = (char)(0xe0 | cp >> 12), enc[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
                    enc[2] = (char)(0x80 | (cp & 0x3f)), k = 3;
                } else {
                    enc[0] = (char)(0xf0 | cp >> 18), enc[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
                    enc[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), enc[3] = (char)(0x80 | (cp & 0x3f));
                    k = 4;
                }
                break;
            default:
                goto bad;
            }
        }
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *q = realloc(s, cap);
            if (!q) {
                free(s);
                return status_set(ps->err, STATUS_ENOMEM, "safetensors: out of memory");
            }
            s = q;
        }
        memcpy(s + len, enc, k);
        len += k;
    }
    s[len] = 0;
    *out = s;
    return 0;
bad:
    free(s);
    return malformed(ps, "bad string");
}

/* A non-negative JSON integer below 2^53. */
static int parse_uint(parser_t *ps, uint64_t *out)
{
    skip_ws(ps);
    const char *p = ps->p;
    if (p >= ps->end || *p < '0' || *p > '9') return malformed(ps, "expected an integer");
    uint64_t v = 0;
    if (*p == '0' && p + 1 < ps->end && p[1] >= '0' && p[1] <= '9')
        return malformed(ps, "integer with a leading zero");
    while (p < ps->end && *p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p++ - '0');
        if (v >= (1ull << 53)) return malformed(ps, "integer too large");
    }
    if (p < ps->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return malformed(ps, "not an integer");
    ps->p = p;
    *out = v;
    return 0;
}

static int add_meta(safetensors_t *st, char *k, char *v, parser_t *ps)
{
    for (int i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], k)) {
            free(k), free(v);
            return malformed(ps, "duplicate metadata key");
        }
    if (st->nmeta == st->meta_cap) {
        int cap = st->meta_cap ? 2 * st->meta_cap : 8;
        char **q = realloc(st->meta, (size_t)cap * 2 * sizeof *q);
        if (!q) {
            free(k), free(v);
            return status_set(ps->err, STATUS_ENOMEM, "safetensors: out of memory");
        }
        st->meta = q;
        st->meta_cap = cap;
    }
    st->meta[2 * st->nmeta] = k;
    st->meta[2 * st->nmeta + 1] = v;
    st->nmeta++;
    return 0;
}

static int parse_metadata(safetensors_t *st, parser_t *ps)
{
    if (expect(ps, '{')) return STATUS_EMALFORMED;
    if (accept(ps, '}')) return 0;
    do {
        char *k, *v;
        int rc = parse_string(ps, &k);
        if (rc) return rc;
        if (expect(ps, ':') || (rc = parse_string(ps, &v))) {
            free(k);
            return rc ? rc : STATUS_EMALFORMED;
        }
        if ((rc = add_meta(st, k, v, ps))) return rc;
    } while (accept(ps, ','));
    return expect(ps, '}');
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} in any order, each once. */
static int parse_tensor(safetensors_tensor_t *t, uint64_t off[2], parser_t *ps)
{
    int have_dtype = 0, have_shape = 0, have_off = 0, rc;
    if (expect(ps, '{')) return STATUS_EMALFORMED;
    do {
        char *k;
        if ((rc = parse_string(ps, &k))) return rc;
        if (expect(ps, ':')) {
            free(k);
            return STATUS_EMALFORMED;
        }
        if (!strcmp(k, "dtype") && !have_dtype) {
            char *v;
            free(k);
            if ((rc = parse_string(ps, &v))) return rc;
            t->dtype = safetensors_dtype_by_name(v);
            free(v);
            if (t->dtype < 0) return malformed(ps, "unknown dtype");
            have_dtype = 1;
        } else if (!strcmp(k, "shape") && !have_shape) {
            free(k);
            if (expect(ps, '[')) return STATUS_EMALFORMED;
            t->ndim = 0;
            if (!accept(ps, ']')) {
                do {
                    uint64_t d;
                    if (t->ndim == SAFETENSORS_MAX_DIMS)
                        return malformed(ps, "too many dimensions");
                    if ((rc = parse_uint(ps, &d))) return rc;
                    t->shape[t->ndim++] = (int64_t)d;
                } while (accept(ps, ','));
                if (expect(ps, ']')) return STATUS_EMALFORMED;
            }
            have_shape = 1;
        } else if (!strcmp(k, "data_offsets") && !have_off) {
            free(k);
            if (expect(ps, '[') || parse_uint(ps, &off[0]) || expect(ps, ',') ||
                parse_uint(ps, &off[1]) || expect(ps, ']'))
                return STATUS_EMALFORMED;
            have_off = 1;
        } else {
            free(k);
            return malformed(ps, "unknown or repeated field in a tensor entry");
        }
    } while (accept(ps, ','));
    if (expect(ps, '}')) return STATUS_EMALFORMED;
    if (!have_dtype || !have_shape || !have_off)
        return malformed(ps, "a tensor entry lacks dtype, shape or data_offsets");
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const safetensors_tensor_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int parse_header(safetensors_t *st, parser_t *ps)
{
    int rc;
    size_t data_size = st->size - 8 - st->hlen;
    const uint8_t *data = st->file + 8 + st->hlen;
    if (expect(ps, '{')) return STATUS_EMALFORMED;
    int have_meta = 0;
    if (!accept(ps, '}')) {
        do {
            char *name;
            if ((rc = parse_string(ps, &name))) return rc;
            if (expect(ps, ':')) {
                free(name);
                return STATUS_EMALFORMED;
            }
            if (!strcmp(name, "__metadata__")) {
                free(name);
                if (have_meta) return malformed(ps, "two __metadata__ entries");
                have_meta = 1;
                if ((rc = parse_metadata(st, ps))) return rc;
                continue;
            }
            if (st->n == st->cap) {
                int cap = st->cap ? 2 * st->cap : 64;
                safetensors_tensor_t *q = realloc(st->t, (size_t)cap * sizeof *q);
                if (!q) {
                    free(name);
                    return status_set(ps->err, STATUS_ENOMEM, "safetensors: out of memory");
                }
                st->t = q;
                st->cap = cap;
            }
            safetensors_tensor_t *t = &st->t[st->n];
            memset(t, 0, sizeof *t);
            t->name = name;
            st->n++;
            uint64_t off[2];
            if ((rc = parse_tensor(t, off, ps))) return rc;
            if (off[0] > off[1] || off[1] > data_size)
                return status_set(ps->err, STATUS_EMALFORMED,
                                  "safetensors: %s: data_offsets [%llu, %llu] outside the %zu-byte "
                                  "buffer",
                                  name, (unsigned long long)off[0], (unsigned long long)off[1],
                                  data_size);
            /* element count times element size must be the span, without overflow */
            uint64_t n = 1;
            for (int d = 0; d < t->ndim; d++) {
                if (t->shape[d] && n > data_size / (uint64_t)t->shape[d]) {
                    n = UINT64_MAX;
                    break;
                }
                n *= (uint64_t)t->shape[d];
            }
            if (n == UINT64_MAX || n * safetensors_dtype_size(t->dtype) != off[1] - off[0])
                return status_set(ps->err, STATUS_EMALFORMED,
                                  "safetensors: %s: shape and dtype do not match its %llu bytes",
                                  name, (unsigned long long)(off[1] - off[0]));
            t->offset = (size_t)off[0];
            t->bytes = (size_t)(off[1] - off[0]);
            t->data = data + t->offset;
        } while (accept(ps, ','));
        if (expect(ps, '}')) return STATUS_EMALFORMED;
    }
    skip_ws(ps);
    if (ps->p != ps->end) return malformed(ps, "text after the header object");
    for (int i = 0; i < st->n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(st->t[i].name, st->t[j].name))
                return malformed(ps, "duplicate tensor name");
    /* the buffer is covered exactly: sorted by offset, each begins where the last ended */
    if (st->n > 1) qsort(st->t, (size_t)st->n, sizeof *st->t, cmp_offset); /* t is NULL at 0 */
    size_t at = 0;
    for (int i = 0; i < st->n; i++) {
        if (st->t[i].offset != at)
            return status_set(ps->err, STATUS_EMALFORMED,
                              "safetensors: the byte buffer has a hole or an overlap at byte %zu "
                              "(tensor %s)",
                              at, st->t[i].name);
        at += st->t[i].bytes;
    }
    if (at != data_size)
        return status_set(ps->err, STATUS_EMALFORMED,
                          "safetensors: %zu bytes after the last tensor are not indexed",
                          data_size - at);
    return 0;
}

safetensors_t *safetensors_open(const char *path, char *err)
{
    safetensors_t *st = calloc(1, sizeof *st);
    FILE *f = NULL;
    if (!st) {
        status_set(err, STATUS_ENOMEM, "safetensors: out of memory");
        return NULL;
    }
    if (!(f = fopen(path, "rb"))) {
        status_set(err, STATUS_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET)) {
        status_set(err, STATUS_EIO, "%s: cannot read", path);
        goto fail;
    }
    if (size < 8) {
        status_set(err, STATUS_EMALFORMED, "%s: %ld bytes is too short for a safetensors file",
                   path, size);
        goto fail;
    }
    st->size = (size_t)size;
    if (!(st->file = malloc(st->size))) {
        status_set(err, STATUS_ENOMEM, "%s: out of memory for %zu bytes", path, st->size);
        goto fail;
    }
    if (fread(st->file, 1, st->size, f) != st->size) {
        status_set(err, STATUS_EIO, "%s: short read", path);
        goto fail;
    }
    fclose(f);
    f = NULL;
    uint64_t hlen = le_get_u64(st->file);
    if (hlen > SAFETENSORS_MAX_HEADER || hlen > st->size - 8 || hlen < 2) {
        status_set(err, STATUS_EMALFORMED,
                   "%s: header length %llu does not fit the file (%zu bytes) or the %u-byte limit",
                   path, (unsigned long long)hlen, st->size, SAFETENSORS_MAX_HEADER);
        goto fail;
    }
    st->hlen = hlen;
    if (st->file[8] != '{') {
        status_set(err, STATUS_EMALFORMED, "%s: the header does not start with '{'", path);
        goto fail;
    }
    parser_t ps = {(const char *)st->file + 8, (const char *)st->file + 8 + hlen, err};
    if (parse_header(st, &ps)) {
        char why[STATUS_ERR_LEN];
        snprintf(why, sizeof why, "%s", err ? err : "");
        status_set(err, STATUS_EMALFORMED, "%s: %s", path, why);
        goto fail;
    }
    return st;
fail:
    if (f) fclose(f);
    safetensors_close(&st);
    return NULL;
}

void safetensors_close(safetensors_t **stp)
{
    if (!stp || !*stp) return;
    safetensors_t *st = *stp;
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (int i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->t);
    free(st->file);
    free(st);
    *stp = NULL;
}

uint64_t safetensors_header_len(const safetensors_t *st)
{
    return st->hlen;
}

int safetensors_count(const safetensors_t *st)
{
    return st->n;
}

const safetensors_tensor_t *safetensors_at(const safetensors_t *st, int i)
{
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const safetensors_tensor_t *safetensors_find(const safetensors_t *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

const char *safetensors_metadata(const safetensors_t *st, const char *key)
{
    for (int i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], key)) return st->meta[2 * i + 1];
    return NULL;
}

int safetensors_read_f32(const safetensors_t *st, const char *name, float *out, size_t numel,
                         char *err)
{
    const safetensors_tensor_t *t = safetensors_find(st, name);
    if (!t) return status_set(err, STATUS_ENOTFOUND, "safetensors: no tensor %s", name);
    size_t es = safetensors_dtype_size(t->dtype);
    if (t->bytes / es != numel)
        return status_set(err, STATUS_EINVAL, "safetensors: %s has %zu elements, expected %zu",
                          name, t->bytes / es, numel);
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case SAFETENSORS_F32:
        memcpy(out, p, numel * sizeof(float));
        return 0;
    case SAFETENSORS_BF16:
    case SAFETENSORS_F16:
        for (size_t i = 0; i < numel; i++) {
            uint16_t h = le_get_u16(p + 2 * i);
            out[i] = t->dtype == SAFETENSORS_BF16 ? safetensors_bf16_to_f32(h) : f16_to_f32(h);
        }
        return 0;
    default:
        return status_set(err, STATUS_EINVAL, "safetensors: %s is %s, not a float type", name,
                          safetensors_dtype_name(t->dtype));
    }
}
