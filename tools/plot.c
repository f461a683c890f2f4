/* plot.c — stacked line-chart panels written as SVG text. */
#include "tools/plot.h"
#include "common/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Tableau 10: distinguishable, and readable on white. */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NCOLORS ((int)(sizeof palette / sizeof palette[0]))

enum {
    WIDTH = 980,
    LEFT = 84,    /* room for tick labels and the y label */
    LEGEND = 230, /* right of the plot area */
    TOP = 46,     /* the chart's title */
    PANEL_H = 190,
    GAP = 74, /* below each panel: tick labels, x label, next panel's title */
    MAX_TICKS = 32,
    MAX_POINTS = 1500, /* per line; longer series are thinned evenly */
    MAX_LEGEND = 9
};

int plot_ticks(double lo, double hi, int want, double *ticks, int max, double *step)
{
    if (!(hi > lo) || want < 1) {
        if (max > 0) ticks[0] = lo;
        *step = 1;
        return max > 0;
    }
    double raw = (hi - lo) / want, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double s = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
    int n = 0;
    for (double t = ceil(lo / s - 1e-9) * s; t <= hi + s * 1e-9 && n < max; t += s)
        ticks[n++] = fabs(t) < s * 1e-9 ? 0 : t;
    *step = s;
    return n;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20) fputc(*s, f);
        }
}

/* A tick label: decimals enough for the spacing; k and M for big numbers. */
static void tick_label(char *buf, size_t n, double v, double step)
{
    const char *suffix = "";
    if (fabs(step) >= 1e5)
        v /= 1e6, step /= 1e6, suffix = "M";
    else if (fabs(step) >= 100 && (fabs(v) >= 1e4))
        v /= 1e3, step /= 1e3, suffix = "k";
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    snprintf(buf, n, "%.*f%s", dec, v, suffix);
}

/* Range of the finite points of every series in a panel; 0 when there are none. */
static int panel_range(const plot_panel_t *p, double *x0, double *x1, double *y0, double *y1)
{
    int any = 0;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++) {
            double x = p->s[i].x[j], y = p->s[i].y[j];
            if (!isfinite(x) || !isfinite(y)) continue;
            if (!any || x < *x0) *x0 = x;
            if (!any || x > *x1) *x1 = x;
            if (!any || y < *y0) *y0 = y;
            if (!any || y > *y1) *y1 = y;
            any = 1;
        }
    return any;
}

/* Widens [lo, hi] to round tick bounds; a point range gets some room. */
static void nice_range(double *lo, double *hi, double *ticks, int *nt, double *step)
{
    if (!(*hi > *lo)) {
        double pad = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= pad, *hi += pad;
    }
    plot_ticks(*lo, *hi, 5, ticks, MAX_TICKS, step);
    *lo = floor(*lo / *step + 1e-9) * *step;
    *hi = ceil(*hi / *step - 1e-9) * *step;
    *nt = plot_ticks(*lo, *hi, 5, ticks, MAX_TICKS, step);
}

/* [gx0, gx1]: the x range every panel shares, so that a step lines up across panels. */
static void draw_panel(FILE *f, const plot_panel_t *p, const char *xlabel, int top, double gx0,
                       double gx1)
{
    int pw = WIDTH - LEFT - LEGEND, ph = PANEL_H;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"pt\">", LEFT, top - 10);
    xml_text(f, p->title);
    fprintf(f, "</text>\n");
    fprintf(f,
            "<text transform=\"translate(%d,%d) rotate(-90)\" class=\"al\" "
            "text-anchor=\"middle\">",
            18, top + ph / 2);
    xml_text(f, p->ylabel);
    fprintf(f, "</text>\n");
    double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
    if (!panel_range(p, &x0, &x1, &y0, &y1)) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"fr\"/>\n", LEFT, top,
                pw, ph);
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"nd\" text-anchor=\"middle\">", LEFT + pw / 2,
                top + ph / 2);
        xml_text(f, p->empty ? p->empty : "no data");
        fprintf(f, "</text>\n");
        return;
    }
    x0 = gx0, x1 = gx1;
    double xt[MAX_TICKS], yt[MAX_TICKS], xs, ys;
    int nx, ny;
    nice_range(&x0, &x1, xt, &nx, &xs);
    nice_range(&y0, &y1, yt, &ny, &ys);
#define PX(x) (LEFT + ((x)-x0) / (x1 - x0) * pw)
#define PY(y) (top + ph - ((y)-y0) / (y1 - y0) * ph)
    char lab[48];
    for (int i = 0; i < nx; i++) {
        double X = PX(xt[i]);
        tick_label(lab, sizeof lab, xt[i], xs);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"gr\"/>\n", X, top, X,
                top + ph);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"tk\"/>\n", X,
                top + ph, X, top + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tl\" text-anchor=\"middle\">%s</text>\n", X,
                top + ph + 18, lab);
    }
    for (int i = 0; i < ny; i++) {
        double Y = PY(yt[i]);
        tick_label(lab, sizeof lab, yt[i], ys);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"gr\"/>\n", LEFT, Y,
                LEFT + pw, Y);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"tk\"/>\n", LEFT - 5,
                Y, LEFT, Y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tl\" text-anchor=\"end\">%s</text>\n",
                LEFT - 8, Y + 4, lab);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"al\" text-anchor=\"middle\">", LEFT + pw / 2,
            top + ph + 36);
    xml_text(f, xlabel);
    fprintf(f, "</text>\n");
    fprintf(
        f, "<clipPath id=\"c%d\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/></clipPath>\n",
        top, LEFT, top - 3, pw, ph + 6);
    for (int i = 0; i < p->ns; i++) {
        const plot_series_t *s = &p->s[i];
        const char *col = palette[((s->color % NCOLORS) + NCOLORS) % NCOLORS];
        int stride = s->n > MAX_POINTS ? (s->n + MAX_POINTS - 1) / MAX_POINTS : 1, open = 0;
        fprintf(f, "<g clip-path=\"url(#c%d)\">\n", top);
        for (int j = 0; j < s->n; j += stride) {
            double x = s->x[j], y = s->y[j];
            if (!isfinite(x) || !isfinite(y)) {
                if (open) fprintf(f, "\"/>\n");
                open = 0;
                continue;
            }
            if (!open)
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"",
                        col);
            fprintf(f, "%.1f,%.1f ", PX(x), PY(y));
            open = 1;
        }
        if (open) fprintf(f, "\"/>\n");
        if (s->n <= 60) /* few points: show each */
            for (int j = 0; j < s->n; j++)
                if (isfinite(s->x[j]) && isfinite(s->y[j]))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.8\" fill=\"%s\"/>\n",
                            PX(s->x[j]), PY(s->y[j]), col);
        fprintf(f, "</g>\n");
    }
#undef PX
#undef PY
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"fr\"/>\n", LEFT, top, pw,
            ph);
    int lx = LEFT + pw + 16;
    for (int i = 0; i < p->ns && i <= MAX_LEGEND; i++) {
        int ly = top + 12 + 18 * i;
        if (i == MAX_LEGEND) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lg\">+ %d more</text>\n", lx, ly + 4,
                    p->ns - MAX_LEGEND);
            break;
        }
        const char *col = palette[((p->s[i].color % NCOLORS) + NCOLORS) % NCOLORS];
        fprintf(
            f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>\n",
            lx, ly, lx + 22, ly, col);
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lg\">", lx + 28, ly + 4);
        xml_text(f, p->s[i].label);
        fprintf(f, "</text>\n");
    }
}

int plot_svg_write(const char *path, const char *title, const char *xlabel,
                   const plot_panel_t *panels, int np, char *err)
{
    if (np < 1) return status_set(err, STATUS_EINVAL, "plot: no panel");
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return status_set(err, STATUS_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return status_set(err, STATUS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    int height = TOP + np * (PANEL_H + GAP);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
            "<style>\n"
            ".tt{font-size:17px;font-weight:bold}.pt{font-size:14px;font-weight:bold}\n"
            ".al{font-size:12px;fill:#333}.tl{font-size:11px;fill:#444}.lg{font-size:12px}\n"
            ".nd{font-size:14px;fill:#999}.gr{stroke:#e4e4e4;stroke-width:1}\n"
            ".tk{stroke:#444;stroke-width:1}.fr{fill:none;stroke:#444;stroke-width:1}\n"
            "</style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            WIDTH, height, WIDTH, height);
    fprintf(f, "<text x=\"%d\" y=\"26\" class=\"tt\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    double gx0 = 0, gx1 = 0;
    int any = 0;
    for (int i = 0; i < np; i++) {
        double a, b, c, d;
        if (!panel_range(&panels[i], &a, &b, &c, &d)) continue;
        if (!any || a < gx0) gx0 = a;
        if (!any || b > gx1) gx1 = b;
        any = 1;
    }
    for (int i = 0; i < np; i++)
        draw_panel(f, &panels[i], xlabel, TOP + 22 + i * (PANEL_H + GAP), gx0, gx1);
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        remove(tmp);
        return status_set(err, STATUS_EIO, "%s: cannot write", path);
    }
    return 0;
}
