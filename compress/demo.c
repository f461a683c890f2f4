/* demo.c — the DeMo transform: momentum accumulation, DCT + per-tile top-k extraction,
 * the message format (docs/codec-format.md) with its never-trust parser, and the
 * deterministic aggregation. See demo.h for the contract and the choices made.
 * Not for: networking, the model, the optimizer (weight decay, schedules, clipping). */
/* These loops must vectorize even in -O2 builds (GCC's -O2 cost model skips loops
 * with unknown trip counts; -O3 is 4-5x faster here). Vectorizing them changes no
 * result: no reductions are reordered and no float contraction is enabled. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif
#include "compress/demo.h"
#include "compress/codec.h"
#include "common/le.h"
#include "common/rng.h"
#include "common/status.h"
#include "kernels/dct.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char demo_magic[4] = {'S', 'T', 'D', 'M'};

/* Geometry of one tensor's messages, derived from (rows, cols, chunk, k, vfmt). */
typedef struct {
    int64_t rows, cols, tiles;
    int chunk, cr, cc, tn; /* tn = cr * cc coefficients per tile */
    int kt;                /* entries per tile */
    int dense, idxw;
    int ib; /* version-2 bodies: bits per index, ceil(log2(tn)); 0 when dense or shared */
    int sb; /* version-2 bodies: sign-scale bits, 16 (sign, top-k) or 0 */
    demo_vfmt_t vfmt;
    demo_imode_t imode;
    demo_xform_t xform; /* the tensor's transform; a v1 message's octet 22 */
    uint64_t entries;   /* tiles * kt */
    uint64_t payload;   /* v1: bytes after the header */
    uint64_t bits;      /* v2: bits of the body (scale, indices, values) */
} geom_t;

static int vbits(demo_vfmt_t f)
{
    return f == DEMO_VAL_F32 ? 32 : f == DEMO_VAL_BF16 ? 16 : 1;
}

/* 0 and *g filled, or -1 when the arguments are not a valid configuration. Shared
 * indices: kt = min(k, tn), dense only when that is every coefficient, no index bits and
 * no sign scale. */
static int geom_make_ex(geom_t *g, int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                        demo_imode_t imode)
{
    if (chunk == 0) chunk = DEMO_DEFAULT_CHUNK;
    if (k == 0) k = DEMO_DEFAULT_K;
    if (rows < 1 || cols < 1 || rows > UINT32_MAX || cols > UINT32_MAX) return -1;
    if ((uint64_t)rows * (uint64_t)cols > DEMO_MAX_ELEMS) return -1;
    if (chunk < 1 || chunk > DCT_MAX_CHUNK || k < 1) return -1;
    if ((int)vfmt < DEMO_VAL_F32 || (int)vfmt > DEMO_VAL_SIGN) return -1;
    if ((int)imode < DEMO_IDX_TOPK || (int)imode > DEMO_IDX_SHARED) return -1;
    g->rows = rows;
    g->cols = cols;
    g->chunk = chunk;
    g->cr = (int)dct_chunk_size(rows, chunk);
    g->cc = (int)dct_chunk_size(cols, chunk);
    g->tn = g->cr * g->cc;
    g->tiles = (rows / g->cr) * (cols / g->cc);
    g->vfmt = vfmt;
    g->imode = imode;
    g->xform = DEMO_XFORM_DCT; /* the sizes do not depend on it; demo_new and parse set it */
    int kk = k < g->tn ? k : g->tn;
    int iw = g->tn <= 256 ? 1 : 2, vb = vbits(vfmt);
    /* dense when indices would make sparse no cheaper than all coefficients */
    g->dense = kk == g->tn || (imode == DEMO_IDX_TOPK &&
                               (uint64_t)kk * (uint64_t)(8 * iw + vb) >= (uint64_t)g->tn * vb);
    g->kt = g->dense ? g->tn : kk;
    g->idxw = g->dense || imode != DEMO_IDX_TOPK ? 0 : iw;
    g->entries = (uint64_t)g->tiles * (uint64_t)g->kt;
    uint64_t vbytes = vfmt == DEMO_VAL_SIGN ? (g->entries + 7) / 8 : g->entries * (vb / 8);
    g->payload = g->entries * (uint64_t)g->idxw + vbytes;
    /* shared indices: every replica sends the same coefficients and the update is
     * normalized, so a scale would only weight replicas against each other: none */
    g->sb = vfmt == DEMO_VAL_SIGN && imode == DEMO_IDX_TOPK ? DEMO_BODY_SCALE_BITS : 0;
    g->ib = 0;
    if (!g->dense && imode == DEMO_IDX_TOPK)
        while ((1 << g->ib) < g->tn) g->ib++;
    g->bits = (uint64_t)g->sb + g->entries * (uint64_t)(g->ib + vb);
    return 0;
}

/* The version-1 message layer and the top-k bodies: indices on the wire. */
static int geom_make(geom_t *g, int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt)
{
    return geom_make_ex(g, rows, cols, chunk, k, vfmt, DEMO_IDX_TOPK);
}

int demo_entries_per_tile(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt)
{
    geom_t g;
    return geom_make(&g, rows, cols, chunk, k, vfmt) ? 0 : g.kt;
}

size_t demo_message_bytes(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt)
{
    geom_t g;
    if (geom_make(&g, rows, cols, chunk, k, vfmt)) return 0;
    return (size_t)(DEMO_HEADER_LEN + g.payload);
}

/* --- top-k ------------------------------------------------------------------------ */

/* Key order = (|x| descending, index ascending): |x| bits above, inverted index below.
 * The keys of one tile are distinct, so the selection is a total order. */
static inline uint64_t topk_key(float x, int i)
{
    return ((uint64_t)(le_f32_bits(x) & 0x7fffffffu) << 32) |
           (uint32_t)(0xffffffffu - (uint32_t)i);
}

static int key_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Rearranges a so that a[k-1] is the k-th largest and a[0, k-1) are larger. */
static void select_top(uint64_t *a, int n, int k)
{
    int lo = 0, hi = n - 1, target = k - 1;
    for (int round = 0; lo < hi; round++) {
        if (round == 64) { /* pathological input: finish by sorting what is left */
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof *a, key_desc);
            return;
        }
        uint64_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
        uint64_t p = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > p) i++;
            while (a[j] < p) j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            return;
    }
}

void demo_topk(uint16_t *idx, const float *x, int n, int k, uint64_t *keys)
{
    for (int i = 0; i < n; i++) keys[i] = topk_key(x[i], i);
    uint64_t thr = 0;
    if (k < n) {
        select_top(keys, n, k);
        thr = keys[k - 1];
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (topk_key(x[i], i) >= thr) idx[m++] = (uint16_t)i;
}

void demo_shared_indices(uint16_t *idx, int64_t tiles, int tn, int kt, uint64_t seed, uint8_t *mark)
{
    for (int64_t t = 0; t < tiles; t++) {
        uint16_t *it = idx + (uint64_t)t * (uint64_t)kt;
        if (kt >= tn) {
            for (int j = 0; j < tn; j++) it[j] = (uint16_t)j;
            continue;
        }
        /* Floyd's sampling: kt distinct draws, each j in [tn-kt, tn) adds one index */
        rng_t r;
        rng_seed(&r, rng_mix(seed, (uint64_t)t));
        memset(mark, 0, (size_t)tn);
        for (int j = tn - kt; j < tn; j++) {
            int x = (int)(((rng_next(&r) >> 32) * (uint64_t)(j + 1)) >> 32);
            mark[mark[x] ? j : x] = 1;
        }
        int m = 0;
        for (int j = 0; j < tn; j++)
            if (mark[j]) it[m++] = (uint16_t)j;
    }
}

/* --- message pack / parse --------------------------------------------------------- */

static void put_header(uint8_t *h, const geom_t *g, float scale)
{
    memcpy(h, demo_magic, 4);
    h[4] = DEMO_VERSION;
    h[5] = (uint8_t)g->vfmt;
    h[6] = (uint8_t)g->dense;
    h[7] = (uint8_t)g->idxw;
    le_put_u32(h + 8, (uint32_t)g->rows);
    le_put_u32(h + 12, (uint32_t)g->cols);
    le_put_u32(h + 16, (uint32_t)g->kt);
    le_put_u16(h + 20, (uint16_t)g->chunk);
    h[22] = (uint8_t)g->xform;
    h[23] = 0;
    le_put_f32(h + 24, scale);
}

/* demo_msg_pack for a geometry (its transform included). */
static int msg_pack(uint8_t *out, size_t cap, size_t *written, const geom_t *gp,
                    const uint16_t *idx, const float *val, char *err)
{
    const geom_t g = *gp;
    const demo_vfmt_t vfmt = g.vfmt;
    size_t total = (size_t)(DEMO_HEADER_LEN + g.payload);
    if (!out || !val || cap < total || (!idx && !g.dense))
        return status_set(err, STATUS_EINVAL, "demo: message needs %zu bytes, has %zu", total,
                          out ? cap : 0);
    uint64_t ne = g.entries;
    double asum = 0.0;
    for (uint64_t e = 0; e < ne; e++) {
        if (!(fabsf(val[e]) <= DEMO_MAX_ABS))
            return status_set(err, STATUS_EINVAL, "demo: value %llu non-finite or above 1e30",
                              (unsigned long long)e);
        asum += fabsf(val[e]);
    }
    if (idx) {
        for (int64_t t = 0; t < g.tiles; t++) {
            const uint16_t *it = idx + (uint64_t)t * g.kt;
            for (int j = 0; j < g.kt; j++)
                if (it[j] >= g.tn || (j > 0 && it[j] <= it[j - 1]))
                    return status_set(err, STATUS_EINVAL,
                                      "demo: tile %lld: indices not "
                                      "ascending below %d",
                                      (long long)t, g.tn);
        }
    }

    uint8_t *p = out + DEMO_HEADER_LEN;
    if (g.idxw == 1) {
        for (uint64_t e = 0; e < ne; e++) p[e] = (uint8_t)idx[e];
    } else if (g.idxw == 2) {
        for (uint64_t e = 0; e < ne; e++) le_put_u16(p + 2 * e, idx[e]);
    }
    p += ne * (uint64_t)g.idxw;
    float scale = 0.0f;
    switch (vfmt) {
    case DEMO_VAL_F32:
        for (uint64_t e = 0; e < ne; e++) le_put_f32(p + 4 * e, val[e] + 0.0f); /* no -0 */
        break;
    case DEMO_VAL_BF16:
        for (uint64_t e = 0; e < ne; e++) {
            uint16_t h = codec_f32_to_bf16(val[e]);
            if (!(fabsf(codec_bf16_to_f32(h)) <= DEMO_MAX_ABS))
                return status_set(err, STATUS_EINVAL, "demo: value %llu rounds above 1e30",
                                  (unsigned long long)e);
            le_put_u16(p + 2 * e, h);
        }
        break;
    case DEMO_VAL_SIGN:
        scale = ne ? (float)(asum / (double)ne) : 0.0f;
        memset(p, 0, (ne + 7) / 8);
        for (uint64_t e = 0; e < ne; e++) p[e >> 3] |= (uint8_t)((val[e] < 0.0f) << (e & 7));
        break;
    }
    put_header(out, &g, scale);
    uint32_t crc = codec_crc32c(0, out, 28);
    crc = codec_crc32c(crc, out + DEMO_HEADER_LEN, g.payload);
    le_put_u32(out + 28, crc);
    if (written) *written = total;
    return 0;
}

int demo_msg_pack(uint8_t *out, size_t cap, size_t *written, int64_t rows, int64_t cols, int chunk,
                  int k, demo_vfmt_t vfmt, demo_xform_t xform, const uint16_t *idx,
                  const float *val, char *err)
{
    geom_t g;
    if (geom_make(&g, rows, cols, chunk, k, vfmt) ||
        (xform != DEMO_XFORM_DCT && xform != DEMO_XFORM_NONE))
        return status_set(err, STATUS_EINVAL,
                          "demo: bad configuration (%lld x %lld, chunk %d, "
                          "k %d, format %d, transform %d)",
                          (long long)rows, (long long)cols, chunk, k, (int)vfmt, (int)xform);
    g.xform = xform;
    return msg_pack(out, cap, written, &g, idx, val, err);
}

/* Header, lengths and checksum; fills g and *scale. */
static int parse_header(const uint8_t *buf, size_t len, geom_t *g, float *scale, char *err)
{
    if (!buf || len < DEMO_HEADER_LEN)
        return status_set(err, STATUS_EMALFORMED, "demo: truncated header (%zu of %d bytes)",
                          buf ? len : 0, DEMO_HEADER_LEN);
    if (memcmp(buf, demo_magic, 4) != 0)
        return status_set(err, STATUS_EMALFORMED, "demo: bad magic");
    if (buf[4] != DEMO_VERSION)
        return status_set(err, STATUS_EVERSION, "demo: message version %u, this build speaks %d",
                          buf[4], DEMO_VERSION);
    if (buf[5] > DEMO_VAL_SIGN)
        return status_set(err, STATUS_EMALFORMED, "demo: unknown value format %u", buf[5]);
    if (buf[6] > 1) return status_set(err, STATUS_EMALFORMED, "demo: unknown layout %u", buf[6]);
    if (buf[22] > DEMO_XFORM_NONE)
        return status_set(err, STATUS_EMALFORMED, "demo: unknown transform %u", buf[22]);
    if (buf[23] != 0) return status_set(err, STATUS_EMALFORMED, "demo: reserved field not zero");
    uint32_t rows = le_get_u32(buf + 8), cols = le_get_u32(buf + 12);
    uint32_t k = le_get_u32(buf + 16);
    uint16_t chunk = le_get_u16(buf + 20);
    if (rows == 0 || cols == 0 || chunk == 0 || k == 0 || k > 65536 ||
        geom_make(g, rows, cols, chunk, (int)k, (demo_vfmt_t)buf[5]))
        return status_set(err, STATUS_EMALFORMED, "demo: bad geometry (%u x %u, chunk %u, k %u)",
                          rows, cols, chunk, k);
    g->xform = (demo_xform_t)buf[22];
    if (g->kt != (int)k || g->dense != buf[6] || g->idxw != buf[7])
        return status_set(err, STATUS_EMALFORMED,
                          "demo: k %u, layout %u, index width %u are not "
                          "the canonical layout for %u x %u chunk %u",
                          k, buf[6], buf[7], rows, cols, chunk);
    if ((uint64_t)(len - DEMO_HEADER_LEN) != g->payload)
        return status_set(
            err, STATUS_EMALFORMED, "demo: %s: %zu payload bytes, geometry needs %llu",
            (uint64_t)(len - DEMO_HEADER_LEN) < g->payload ? "truncated" : "oversized",
            len - DEMO_HEADER_LEN, (unsigned long long)g->payload);
    uint32_t crc = codec_crc32c(0, buf, 28);
    crc = codec_crc32c(crc, buf + DEMO_HEADER_LEN, g->payload);
    if (crc != le_get_u32(buf + 28))
        return status_set(err, STATUS_ECORRUPT, "demo: checksum mismatch");
    uint32_t sbits = le_get_u32(buf + 24);
    *scale = le_bits_f32(sbits);
    if (g->vfmt == DEMO_VAL_SIGN ? ((sbits >> 31) || !(*scale <= DEMO_MAX_ABS)) : sbits != 0)
        return status_set(err, STATUS_EMALFORMED, "demo: bad scale");
    return 0;
}

/* Checks indices and values of a message whose header parsed. */
static int check_body(const uint8_t *buf, const geom_t *g, char *err)
{
    const uint8_t *p = buf + DEMO_HEADER_LEN;
    uint64_t ne = g->entries;
    if (g->idxw) {
        for (int64_t t = 0; t < g->tiles; t++) {
            int prev = -1;
            for (int j = 0; j < g->kt; j++) {
                uint64_t e = (uint64_t)t * g->kt + j;
                int ix = g->idxw == 1 ? p[e] : le_get_u16(p + 2 * e);
                if (ix <= prev || ix >= g->tn)
                    return status_set(err, STATUS_EMALFORMED,
                                      "demo: tile %lld: index %d after "
                                      "%d (tile has %d)",
                                      (long long)t, ix, prev, g->tn);
                prev = ix;
            }
        }
        p += ne * (uint64_t)g->idxw;
    }
    uint32_t bad = 0;
    switch (g->vfmt) {
    case DEMO_VAL_F32:
        for (uint64_t e = 0; e < ne; e++) bad |= !(fabsf(le_get_f32(p + 4 * e)) <= DEMO_MAX_ABS);
        break;
    case DEMO_VAL_BF16:
        for (uint64_t e = 0; e < ne; e++)
            bad |= !(fabsf(codec_bf16_to_f32(le_get_u16(p + 2 * e))) <= DEMO_MAX_ABS);
        break;
    case DEMO_VAL_SIGN:
        if (ne & 7) bad = p[ne >> 3] >> (ne & 7);
        break;
    }
    if (bad)
        return status_set(err, STATUS_EMALFORMED, "demo: %s",
                          g->vfmt == DEMO_VAL_SIGN ? "nonzero padding bits"
                                                   : "value non-finite or above 1e30");
    return 0;
}

static void info_fill(demo_msg_info_t *info, const geom_t *g, float scale)
{
    if (!info) return;
    info->rows = g->rows;
    info->cols = g->cols;
    info->chunk = g->chunk;
    info->tile_rows = g->cr;
    info->tile_cols = g->cc;
    info->tiles = g->tiles;
    info->k = g->kt;
    info->dense = g->dense;
    info->idx_width = g->idxw;
    info->vfmt = g->vfmt;
    info->scale = scale;
    info->xform = g->xform;
    info->payload_len = g->payload;
}

int demo_msg_parse(const uint8_t *buf, size_t len, demo_msg_info_t *info, char *err)
{
    geom_t g;
    float scale;
    int rc = parse_header(buf, len, &g, &scale, err);
    if (rc) return rc;
    if ((rc = check_body(buf, &g, err))) return rc;
    info_fill(info, &g, scale);
    return 0;
}

/* Decodes a parsed and checked message's entries. */
static void decode_entries(const uint8_t *buf, const geom_t *g, float scale, uint16_t *idx,
                           float *val)
{
    const uint8_t *p = buf + DEMO_HEADER_LEN;
    uint64_t ne = g->entries;
    if (g->idxw == 1) {
        for (uint64_t e = 0; e < ne; e++) idx[e] = p[e];
    } else if (g->idxw == 2) {
        for (uint64_t e = 0; e < ne; e++) idx[e] = le_get_u16(p + 2 * e);
    } else {
        for (uint64_t e = 0; e < ne; e++) idx[e] = (uint16_t)(e % (uint64_t)g->tn);
    }
    p += ne * (uint64_t)g->idxw;
    switch (g->vfmt) {
    case DEMO_VAL_F32:
        for (uint64_t e = 0; e < ne; e++) val[e] = le_get_f32(p + 4 * e);
        break;
    case DEMO_VAL_BF16:
        for (uint64_t e = 0; e < ne; e++) val[e] = codec_bf16_to_f32(le_get_u16(p + 2 * e));
        break;
    case DEMO_VAL_SIGN:
        for (uint64_t e = 0; e < ne; e++) val[e] = (p[e >> 3] >> (e & 7)) & 1 ? -scale : scale;
        break;
    }
}

int demo_msg_unpack(const uint8_t *buf, size_t len, demo_msg_info_t *info, uint16_t *idx,
                    float *val, size_t cap, char *err)
{
    geom_t g;
    float scale;
    int rc = parse_header(buf, len, &g, &scale, err);
    if (rc) return rc;
    if ((rc = check_body(buf, &g, err))) return rc;
    if (!idx || !val || g.entries > (uint64_t)cap)
        return status_set(err, STATUS_EINVAL, "demo: %llu entries, room for %zu",
                          (unsigned long long)g.entries, idx && val ? cap : 0);
    decode_entries(buf, &g, scale, idx, val);
    info_fill(info, &g, scale);
    return 0;
}

const char *demo_xform_name(demo_xform_t x)
{
    return x == DEMO_XFORM_DCT ? "dct" : x == DEMO_XFORM_NONE ? "none" : "?";
}

dct_kind_t demo_dct_kind(demo_xform_t x)
{
    return x == DEMO_XFORM_NONE ? DCT_IDENTITY : DCT_II;
}

/* --- the per-tensor state ---------------------------------------------------------- */

struct demo {
    geom_t g;
    int64_t n;
    float beta;
    dct_plan_t *plan;
    float *D;       /* (rows, cols) residual momentum */
    float *coef;    /* (n) tile-major coefficients */
    float *work;    /* (n) row-major scratch */
    uint64_t *keys; /* (tn) */
    uint16_t *idx;  /* (entries) */
    float *val;     /* (entries) */
    uint8_t *mark;  /* (tn) shared-index draws */
    uint64_t seed;  /* shared indices: this step's draw */
};

demo_t *demo_new(int64_t rows, int64_t cols, const demo_cfg_t *cfg, char *err)
{
    demo_cfg_t c = cfg ? *cfg
                       : (demo_cfg_t){.vfmt = DEMO_VAL_F32, .beta = DEMO_DEFAULT_BETA,
                                      .imode = DEMO_IDX_TOPK, .update = DEMO_UPDATE_SIGN,
                                      .xform = DEMO_XFORM_DCT};
    geom_t g;
    if (geom_make_ex(&g, rows, cols, c.chunk, c.k, c.vfmt, c.imode)) {
        status_set(err, STATUS_EINVAL,
                   "demo: bad configuration (%lld x %lld, chunk %d, k %d, "
                   "format %d)",
                   (long long)rows, (long long)cols, c.chunk, c.k, (int)c.vfmt);
        return NULL;
    }
    if (!(c.beta >= 0.0f && c.beta <= 1.0f)) {
        status_set(err, STATUS_EINVAL, "demo: beta %g outside [0, 1]", (double)c.beta);
        return NULL;
    }
    if (c.xform != DEMO_XFORM_DCT && c.xform != DEMO_XFORM_NONE) {
        status_set(err, STATUS_EINVAL, "demo: unknown transform %d", (int)c.xform);
        return NULL;
    }
    g.xform = c.xform;
    demo_t *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    d->g = g;
    d->n = rows * cols;
    d->beta = c.beta;
    d->plan = dct_plan_new(rows, cols, g.chunk, demo_dct_kind(c.xform), err);
    if (!d->plan) {
        demo_destroy(&d);
        return NULL;
    }
    d->D = calloc((size_t)d->n, sizeof(float));
    d->coef = malloc((size_t)d->n * sizeof(float));
    d->work = malloc((size_t)d->n * sizeof(float));
    d->keys = malloc((size_t)g.tn * sizeof(uint64_t));
    d->idx = malloc((size_t)g.entries * sizeof(uint16_t));
    d->val = malloc((size_t)g.entries * sizeof(float));
    d->mark = malloc((size_t)g.tn);
    if (!d->D || !d->coef || !d->work || !d->keys || !d->idx || !d->val || !d->mark) goto nomem;
    return d;

nomem:
    demo_destroy(&d);
    status_set(err, STATUS_ENOMEM, "demo: out of memory for a %lld x %lld tensor", (long long)rows,
               (long long)cols);
    return NULL;
}

void demo_destroy(demo_t **dp)
{
    if (!dp || !*dp) return;
    demo_t *d = *dp;
    dct_plan_destroy(&d->plan);
    free(d->D);
    free(d->coef);
    free(d->work);
    free(d->keys);
    free(d->idx);
    free(d->val);
    free(d->mark);
    free(d);
    *dp = NULL;
}

float *demo_momentum(demo_t *d)
{
    return d->D;
}
int64_t demo_elems(const demo_t *d)
{
    return d->n;
}
size_t demo_msg_size(const demo_t *d)
{
    return (size_t)(DEMO_HEADER_LEN + d->g.payload);
}

int demo_accumulate(demo_t *d, const float *g, float lr, char *err)
{
    if (!g || !isfinite(lr)) return status_set(err, STATUS_EINVAL, "demo: bad gradient or lr");
    uint32_t bad = 0;
    for (int64_t i = 0; i < d->n; i++) bad |= (le_f32_bits(g[i]) & 0x7f800000u) == 0x7f800000u;
    if (bad) return status_set(err, STATUS_EINVAL, "demo: refusing a non-finite gradient");
    float *restrict D = d->D;
    const float beta = d->beta;
    for (int64_t i = 0; i < d->n; i++) D[i] = beta * D[i] + lr * g[i];
    return 0;
}

/* This step's selection: DCT of D, the top-k (or all) coefficients of every tile into
 * d->idx / d->val. D is not changed. */
static void select_entries(demo_t *d)
{
    const geom_t *g = &d->g;
    dct_forward(d->plan, d->coef, d->D);
    if (!g->dense && g->imode == DEMO_IDX_SHARED)
        demo_shared_indices(d->idx, g->tiles, g->tn, g->kt, d->seed, d->mark);
    for (int64_t t = 0; t < g->tiles; t++) {
        const float *c = d->coef + (uint64_t)t * g->tn;
        uint16_t *it = d->idx + (uint64_t)t * g->kt;
        float *vt = d->val + (uint64_t)t * g->kt;
        if (g->dense) {
            for (int j = 0; j < g->tn; j++) it[j] = (uint16_t)j;
        } else if (g->imode == DEMO_IDX_SHARED) {
            /* drawn before the loop */
        } else {
            demo_topk(it, c, g->tn, g->kt, d->keys);
        }
        for (int j = 0; j < g->kt; j++) vt[j] = c[it[j]];
    }
}

/* The transmitted part of the selection, as a sparse coefficient tensor: D -= IDCT(it). */
static void remove_sent(demo_t *d)
{
    const geom_t *g = &d->g;
    memset(d->coef, 0, (size_t)d->n * sizeof(float));
    for (int64_t t = 0; t < g->tiles; t++) {
        float *c = d->coef + (uint64_t)t * g->tn;
        const uint16_t *it = d->idx + (uint64_t)t * g->kt;
        const float *vt = d->val + (uint64_t)t * g->kt;
        if (g->vfmt == DEMO_VAL_BF16)
            for (int j = 0; j < g->kt; j++) c[it[j]] = codec_bf16_to_f32(codec_f32_to_bf16(vt[j]));
        else
            for (int j = 0; j < g->kt; j++) c[it[j]] = vt[j];
    }
    dct_inverse(d->plan, d->work, d->coef);
    float *restrict D = d->D;
    const float *restrict w = d->work;
    for (int64_t i = 0; i < d->n; i++) D[i] -= w[i];
}

int demo_extract(demo_t *d, uint8_t *out, size_t cap, size_t *written, char *err)
{
    const geom_t *g = &d->g;
    size_t total = demo_msg_size(d);
    if (g->imode != DEMO_IDX_TOPK)
        return status_set(err, STATUS_EINVAL, "demo: version-1 messages carry top-k indices only");
    if (!out || cap < total)
        return status_set(err, STATUS_EINVAL, "demo: message needs %zu bytes, has %zu", total,
                          out ? cap : 0);
    select_entries(d);
    /* pack checks every value (finite, <= DEMO_MAX_ABS) before D changes */
    int rc = msg_pack(out, cap, written, g, d->idx, d->val, err);
    if (rc) return rc;
    remove_sent(d);
    return 0;
}

void demo_canonical_order(int *ord, const uint8_t *const *msgs, const size_t *lens, int m)
{
    demo_canonical_order_w(ord, msgs, lens, NULL, m);
}

void demo_canonical_order_w(int *ord, const uint8_t *const *msgs, const size_t *lens,
                            const uint32_t *w, int m)
{
    for (int i = 0; i < m; i++) ord[i] = i;
    for (int i = 1; i < m; i++) {
        int v = ord[i], j = i - 1;
        while (j >= 0) {
            int u = ord[j];
            int c = lens[u] != lens[v] ? (lens[u] > lens[v] ? 1 : -1)
                                       : memcmp(msgs[u], msgs[v], lens[v]);
            if (!c && w) c = w[u] != w[v] ? (w[u] > w[v] ? 1 : -1) : 0;
            if (c <= 0) break;
            ord[j + 1] = u;
            j--;
        }
        ord[j + 1] = v;
    }
}

int demo_aggregate(demo_t *d, const uint8_t *const *msgs, const size_t *lens, int m, float *q,
                   char *err)
{
    if (!msgs || !lens || !q || m < 1)
        return status_set(err, STATUS_EINVAL, "demo: aggregate needs at least one message");
    const geom_t *dg = &d->g;
    uint64_t maxe = 0;
    for (int i = 0; i < m; i++) {
        geom_t g;
        float scale;
        char e2[STATUS_ERR_LEN];
        int rc = parse_header(msgs[i], lens[i], &g, &scale, e2);
        if (!rc) rc = check_body(msgs[i], &g, e2);
        if (rc) return status_set(err, rc, "demo: message %d: %s", i, e2);
        if (g.rows != dg->rows || g.cols != dg->cols || g.chunk != dg->chunk)
            return status_set(err, STATUS_EMALFORMED,
                              "demo: message %d is for %lld x %lld chunk "
                              "%d, this tensor is %lld x %lld chunk %d",
                              i, (long long)g.rows, (long long)g.cols, g.chunk, (long long)dg->rows,
                              (long long)dg->cols, dg->chunk);
        if (g.xform != dg->xform)
            return status_set(err, STATUS_EMALFORMED,
                              "demo: message %d is in transform %s, this tensor uses %s", i,
                              demo_xform_name(g.xform), demo_xform_name(dg->xform));
        if (g.entries > maxe) maxe = g.entries;
    }
    int *ord = malloc((size_t)m * sizeof *ord);
    double *sum = calloc((size_t)d->n, sizeof *sum);
    uint32_t *cnt = calloc((size_t)d->n, sizeof *cnt);
    uint16_t *idx = malloc((size_t)maxe * sizeof *idx);
    float *val = malloc((size_t)maxe * sizeof *val);
    int rc = 0;
    if (!ord || !sum || !cnt || !idx || !val) {
        rc = status_set(err, STATUS_ENOMEM, "demo: out of memory aggregating %d messages", m);
        goto done;
    }
    demo_canonical_order(ord, msgs, lens, m);
    for (int o = 0; o < m; o++) {
        const uint8_t *buf = msgs[ord[o]];
        geom_t g;
        float scale;
        parse_header(buf, lens[ord[o]], &g, &scale, NULL); /* checked above */
        decode_entries(buf, &g, scale, idx, val);
        for (int64_t t = 0; t < g.tiles; t++) {
            uint64_t base = (uint64_t)t * g.tn, e0 = (uint64_t)t * g.kt;
            for (int j = 0; j < g.kt; j++) {
                uint64_t pos = base + idx[e0 + j];
                sum[pos] += val[e0 + j];
                cnt[pos]++;
            }
        }
    }
    for (int64_t i = 0; i < d->n; i++) d->coef[i] = cnt[i] ? (float)(sum[i] / cnt[i]) : 0.0f;
    dct_inverse(d->plan, q, d->coef);
done:
    free(ord);
    free(sum);
    free(cnt);
    free(idx);
    free(val);
    return rc;
}

void demo_apply_sign(float *p, const float *q, float lr, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = (float)(q[i] > 0.0f) - (float)(q[i] < 0.0f);
        p[i] -= lr * s;
    }
}

/* --- version-2 bodies ---------------------------------------------------------------- */

/* Bit b of a body stream is bit b%8 (LSB first) of octet b/8; a w-bit field holds its
 * value's bits from least significant up. put_bits overwrites exactly [pos, pos+w). */
static void put_bits(uint8_t *p, uint64_t pos, uint32_t v, int w)
{
    while (w > 0) {
        int off = (int)(pos & 7), n = 8 - off < w ? 8 - off : w;
        uint8_t mask = (uint8_t)(((1u << n) - 1u) << off);
        uint8_t *b = p + (pos >> 3);
        *b = (uint8_t)((*b & ~mask) | ((v << off) & mask));
        v = n < 32 ? v >> n : 0;
        pos += (uint64_t)n;
        w -= n;
    }
}

static uint32_t get_bits(const uint8_t *p, uint64_t pos, int w)
{
    uint32_t v = 0;
    int got = 0;
    while (got < w) {
        int off = (int)(pos & 7), n = 8 - off < w - got ? 8 - off : w - got;
        uint32_t part = ((uint32_t)p[pos >> 3] >> off) & ((1u << n) - 1u);
        v |= part << got;
        pos += (uint64_t)n;
        got += n;
    }
    return v;
}

uint64_t demo_body_bits_ex(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                           demo_imode_t imode)
{
    geom_t g;
    return geom_make_ex(&g, rows, cols, chunk, k, vfmt, imode) ? 0 : g.bits;
}

uint64_t demo_body_bits(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt)
{
    return demo_body_bits_ex(rows, cols, chunk, k, vfmt, DEMO_IDX_TOPK);
}

int demo_entries_per_tile_ex(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                             demo_imode_t imode)
{
    geom_t g;
    return geom_make_ex(&g, rows, cols, chunk, k, vfmt, imode) ? 0 : g.kt;
}

/* The sign scale as bf16: mean |value|, rounded to nearest even, never above DEMO_MAX_ABS. */
static uint16_t sign_scale_bf16(const float *val, uint64_t ne)
{
    double asum = 0.0;
    for (uint64_t e = 0; e < ne; e++) asum += fabsf(val[e]);
    uint16_t h = codec_f32_to_bf16(ne ? (float)(asum / (double)ne) : 0.0f);
    if (!(codec_bf16_to_f32(h) <= DEMO_MAX_ABS)) h--; /* 1e30 rounded up: the next below */
    return h;
}

/* Writes a body whose entries are valid (indices ascending below tn, |values| finite and
 * rounding to <= DEMO_MAX_ABS). */
static void body_write(uint8_t *out, uint64_t pos, const geom_t *g, const uint16_t *idx,
                       const float *val, uint64_t seed)
{
    uint64_t ne = g->entries;
    if (g->sb) {
        put_bits(out, pos, sign_scale_bf16(val, ne), DEMO_BODY_SCALE_BITS);
        pos += DEMO_BODY_SCALE_BITS;
    }
    if (g->ib) {
        for (uint64_t e = 0; e < ne; e++) put_bits(out, pos + e * (uint64_t)g->ib, idx[e], g->ib);
        pos += ne * (uint64_t)g->ib;
    }
    switch (g->vfmt) {
    case DEMO_VAL_F32:
        for (uint64_t e = 0; e < ne; e++)
            put_bits(out, pos + 32 * e, le_f32_bits(val[e] + 0.0f), 32); /* no -0 */
        break;
    case DEMO_VAL_BF16:
        for (uint64_t e = 0; e < ne; e++)
            put_bits(out, pos + 16 * e, codec_f32_to_bf16(val[e]), 16);
        break;
    case DEMO_VAL_SIGN:
        /* one bit cannot say zero: an exactly-zero value (a tile with no momentum, such as
         * embedding rows of bytes that never occur) gets a sign drawn from the seed, so
         * such parameters take an unbiased walk held in by weight decay instead of a
         * drift of -lr per step (+scale every step, as version 2 sent) */
        for (uint64_t e = 0; e < ne; e++) {
            uint32_t neg = val[e] < 0.0f;
            if (val[e] == 0.0f) neg = (uint32_t)(rng_mix(seed, e) >> 63);
            put_bits(out, pos + e, neg, 1);
        }
        break;
    }
}

/* Checks entries before anything is written: values finite and in range (bf16: after
 * rounding), indices (when given) strictly ascending below tn within each tile. */
static int entries_check(const geom_t *g, const uint16_t *idx, const float *val, char *err)
{
    for (uint64_t e = 0; e < g->entries; e++) {
        int bad = !(fabsf(val[e]) <= DEMO_MAX_ABS);
        if (!bad && g->vfmt == DEMO_VAL_BF16)
            bad = !(fabsf(codec_bf16_to_f32(codec_f32_to_bf16(val[e]))) <= DEMO_MAX_ABS);
        if (bad)
            return status_set(err, STATUS_EINVAL, "demo: value %llu non-finite or above 1e30",
                              (unsigned long long)e);
    }
    if (idx)
        for (int64_t t = 0; t < g->tiles; t++) {
            const uint16_t *it = idx + (uint64_t)t * g->kt;
            for (int j = 0; j < g->kt; j++)
                if (it[j] >= g->tn || (j > 0 && it[j] <= it[j - 1]))
                    return status_set(err, STATUS_EINVAL,
                                      "demo: tile %lld: indices not ascending below %d",
                                      (long long)t, g->tn);
        }
    return 0;
}

/* bitpos + bits must fit in len octets. */
static int body_fits(size_t len, uint64_t bitpos, uint64_t bits)
{
    return bitpos <= (uint64_t)len * 8 && bits <= (uint64_t)len * 8 - bitpos;
}

int demo_body_pack_ex(uint8_t *out, size_t cap, uint64_t bitpos, int64_t rows, int64_t cols,
                      int chunk, int k, demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed,
                      const uint16_t *idx, const float *val, char *err)
{
    geom_t g;
    if (geom_make_ex(&g, rows, cols, chunk, k, vfmt, imode))
        return status_set(err, STATUS_EINVAL,
                          "demo: bad configuration (%lld x %lld, chunk %d, k %d, format %d)",
                          (long long)rows, (long long)cols, chunk, k, (int)vfmt);
    if (!out || !val || (!idx && !g.dense && imode == DEMO_IDX_TOPK) ||
        !body_fits(cap, bitpos, g.bits))
        return status_set(err, STATUS_EINVAL,
                          "demo: body of %llu bits at bit %llu, room %zu octets",
                          (unsigned long long)g.bits, (unsigned long long)bitpos, out ? cap : 0);
    int rc = entries_check(&g, g.dense || imode != DEMO_IDX_TOPK ? NULL : idx, val, err);
    if (rc) return rc;
    body_write(out, bitpos, &g, idx, val, seed);
    return 0;
}

int demo_body_pack(uint8_t *out, size_t cap, uint64_t bitpos, int64_t rows, int64_t cols, int chunk,
                   int k, demo_vfmt_t vfmt, const uint16_t *idx, const float *val, char *err)
{
    return demo_body_pack_ex(out, cap, bitpos, rows, cols, chunk, k, vfmt, DEMO_IDX_TOPK, 0, idx,
                             val, err);
}

/* Validates a body that fits its buffer: the sign scale, index order, values. *scale is
 * the decoded sign scale (0 otherwise). */
static int body_check(const uint8_t *b, uint64_t pos, const geom_t *g, float *scale, char *err)
{
    uint64_t ne = g->entries;
    *scale = 0.0f;
    if (g->vfmt == DEMO_VAL_SIGN && !g->sb) *scale = 1.0f; /* shared: votes of +-1 */
    if (g->sb) {
        uint32_t h = get_bits(b, pos, DEMO_BODY_SCALE_BITS);
        *scale = codec_bf16_to_f32((uint16_t)h);
        if ((h >> 15) || !(*scale <= DEMO_MAX_ABS))
            return status_set(err, STATUS_EMALFORMED, "demo: bad sign scale 0x%04x", h);
        pos += DEMO_BODY_SCALE_BITS;
    }
    if (g->ib) {
        for (int64_t t = 0; t < g->tiles; t++) {
            int prev = -1;
            for (int j = 0; j < g->kt; j++) {
                uint64_t e = (uint64_t)t * (uint64_t)g->kt + (uint64_t)j;
                int ix = (int)get_bits(b, pos + e * (uint64_t)g->ib, g->ib);
                if (ix <= prev || ix >= g->tn)
                    return status_set(err, STATUS_EMALFORMED,
                                      "demo: tile %lld: index %d after %d (tile has %d)",
                                      (long long)t, ix, prev, g->tn);
                prev = ix;
            }
        }
        pos += ne * (uint64_t)g->ib;
    }
    uint32_t bad = 0;
    if (g->vfmt == DEMO_VAL_F32)
        for (uint64_t e = 0; e < ne; e++)
            bad |= !(fabsf(le_bits_f32(get_bits(b, pos + 32 * e, 32))) <= DEMO_MAX_ABS);
    else if (g->vfmt == DEMO_VAL_BF16)
        for (uint64_t e = 0; e < ne; e++)
            bad |= !(fabsf(codec_bf16_to_f32((uint16_t)get_bits(b, pos + 16 * e, 16))) <=
                     DEMO_MAX_ABS);
    if (bad) return status_set(err, STATUS_EMALFORMED, "demo: value non-finite or above 1e30");
    return 0;
}

/* Decodes a checked body: entries to idx/val when given, or into sum/cnt (tile-major),
 * each value w times (sum += w * value, cnt += w).
 * sidx: the drawn indices of a sparse shared-index body (NULL otherwise). */
static void body_decode(const uint8_t *b, uint64_t pos, const geom_t *g, float scale,
                        const uint16_t *sidx, uint16_t *idx, float *val, double *sum, uint32_t *cnt,
                        uint32_t w)
{
    uint64_t ne = g->entries;
    pos += (uint64_t)g->sb;
    uint64_t vpos = pos + ne * (uint64_t)g->ib;
    int vb = vbits(g->vfmt);
    for (int64_t t = 0; t < g->tiles; t++) {
        uint64_t base = (uint64_t)t * (uint64_t)g->tn;
        for (int j = 0; j < g->kt; j++) {
            uint64_t e = (uint64_t)t * (uint64_t)g->kt + (uint64_t)j;
            int ix = g->ib  ? (int)get_bits(b, pos + e * (uint64_t)g->ib, g->ib)
                     : sidx ? sidx[e]
                            : j;
            uint32_t raw = get_bits(b, vpos + e * (uint64_t)vb, vb);
            float v = g->vfmt == DEMO_VAL_F32    ? le_bits_f32(raw)
                      : g->vfmt == DEMO_VAL_BF16 ? codec_bf16_to_f32((uint16_t)raw)
                      : raw                      ? -scale
                                                 : scale;
            if (idx) {
                idx[e] = (uint16_t)ix;
                val[e] = v;
            } else {
                sum[base + (uint64_t)ix] += (double)w * v;
                cnt[base + (uint64_t)ix] += w;
            }
        }
    }
}

/* The drawn indices of a sparse shared-index body (g->entries of them), or NULL with
 * *need 0 when the body carries or implies its own. -1 when memory runs out. */
static int shared_draw(const geom_t *g, uint64_t seed, uint16_t **sidx)
{
    *sidx = NULL;
    if (g->dense || g->imode != DEMO_IDX_SHARED) return 0;
    uint16_t *ix = malloc((size_t)g->entries * sizeof *ix);
    uint8_t *mark = malloc((size_t)g->tn);
    if (!ix || !mark) {
        free(ix);
        free(mark);
        return -1;
    }
    demo_shared_indices(ix, g->tiles, g->tn, g->kt, seed, mark);
    free(mark);
    *sidx = ix;
    return 0;
}

int demo_body_unpack_ex(const uint8_t *buf, size_t len, uint64_t bitpos, int64_t rows, int64_t cols,
                        int chunk, int k, demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed,
                        uint16_t *idx, float *val, size_t cap, float *scale, char *err)
{
    geom_t g;
    if (geom_make_ex(&g, rows, cols, chunk, k, vfmt, imode))
        return status_set(err, STATUS_EINVAL, "demo: bad configuration");
    if (!buf || !body_fits(len, bitpos, g.bits))
        return status_set(err, STATUS_EMALFORMED,
                          "demo: truncated body (%llu bits at bit %llu, "
                          "buffer %zu octets)",
                          (unsigned long long)g.bits, (unsigned long long)bitpos, buf ? len : 0);
    float s;
    int rc = body_check(buf, bitpos, &g, &s, err);
    if (rc) return rc;
    if (!idx || !val || g.entries > (uint64_t)cap)
        return status_set(err, STATUS_EINVAL, "demo: %llu entries, room for %zu",
                          (unsigned long long)g.entries, idx && val ? cap : 0);
    uint16_t *sidx;
    if (shared_draw(&g, seed, &sidx))
        return status_set(err, STATUS_ENOMEM, "demo: out of memory drawing indices");
    body_decode(buf, bitpos, &g, s, sidx, idx, val, NULL, NULL, 0);
    free(sidx);
    if (scale) *scale = s;
    return 0;
}

int demo_body_unpack(const uint8_t *buf, size_t len, uint64_t bitpos, int64_t rows, int64_t cols,
                     int chunk, int k, demo_vfmt_t vfmt, uint16_t *idx, float *val, size_t cap,
                     float *scale, char *err)
{
    return demo_body_unpack_ex(buf, len, bitpos, rows, cols, chunk, k, vfmt, DEMO_IDX_TOPK, 0, idx,
                               val, cap, scale, err);
}

int demo_extract_body_ex(demo_t *d, uint8_t *out, size_t cap, uint64_t bitpos, uint64_t seed,
                         char *err)
{
    const geom_t *g = &d->g;
    if (!out || !body_fits(cap, bitpos, g->bits))
        return status_set(err, STATUS_EINVAL,
                          "demo: body of %llu bits at bit %llu, room %zu octets",
                          (unsigned long long)g->bits, (unsigned long long)bitpos, out ? cap : 0);
    d->seed = seed;
    select_entries(d);
    int rc = entries_check(g, NULL, d->val, err); /* before D changes */
    if (rc) return rc;
    body_write(out, bitpos, g, d->idx, d->val, seed);
    remove_sent(d);
    return 0;
}

int demo_extract_body(demo_t *d, uint8_t *out, size_t cap, uint64_t bitpos, char *err)
{
    return demo_extract_body_ex(d, out, cap, bitpos, 0, err);
}

uint64_t demo_body_size(const demo_t *d)
{
    return d->g.bits;
}

int demo_body_add_ex(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                     demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed, double *sum,
                     uint32_t *cnt, char *err)
{
    return demo_body_add_w(d, buf, len, bitpos, k, vfmt, imode, seed, 1, sum, cnt, err);
}

int demo_body_add_w(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                    demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed, uint32_t w, double *sum,
                    uint32_t *cnt, char *err)
{
    geom_t g;
    if (geom_make_ex(&g, d->g.rows, d->g.cols, d->g.chunk, k, vfmt, imode))
        return status_set(err, STATUS_EMALFORMED,
                          "demo: bad k %d, value format %d or index mode %d", k, (int)vfmt,
                          (int)imode);
    if (!buf || !sum || !cnt || !body_fits(len, bitpos, g.bits))
        return status_set(err, STATUS_EMALFORMED,
                          "demo: truncated body (%llu bits at bit %llu, "
                          "buffer %zu octets)",
                          (unsigned long long)g.bits, (unsigned long long)bitpos, buf ? len : 0);
    float s;
    int rc = body_check(buf, bitpos, &g, &s, err);
    if (rc) return rc;
    uint16_t *sidx;
    if (shared_draw(&g, seed, &sidx))
        return status_set(err, STATUS_ENOMEM, "demo: out of memory drawing indices");
    body_decode(buf, bitpos, &g, s, sidx, NULL, NULL, sum, cnt, w);
    free(sidx);
    return 0;
}

int demo_body_add(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                  demo_vfmt_t vfmt, double *sum, uint32_t *cnt, char *err)
{
    return demo_body_add_ex(d, buf, len, bitpos, k, vfmt, DEMO_IDX_TOPK, 0, sum, cnt, err);
}

void demo_body_finish(demo_t *d, const double *sum, const uint32_t *cnt, float *q)
{
    for (int64_t i = 0; i < d->n; i++) d->coef[i] = cnt[i] ? (float)(sum[i] / cnt[i]) : 0.0f;
    dct_inverse(d->plan, q, d->coef);
}
