/* plot.h — line charts as a hand-written SVG file: panels stacked one above the other,
 * sharing one x axis quantity, each with a frame, ticks at round numbers, grid lines, a
 * y label with its unit and a legend. No library; any browser or rsvg-convert shows it.
 * Not for: reading the data (tools/cmd_status.c). */
#ifndef SWARMTRAIN_PLOT_H
#define SWARMTRAIN_PLOT_H

/* One line. Points with a non-finite x or y break the line there. */
typedef struct {
    const char *label;
    const double *x, *y;
    int n;
    int color; /* index into the palette: the same series keeps its color in every panel */
} plot_series_t;

typedef struct {
    const char *title;  /* "training loss" */
    const char *ylabel; /* with the unit: "nats/token" */
    const plot_series_t *s;
    int ns;
    const char *empty; /* what the frame says when there is no point; NULL: "no data" */
} plot_panel_t;

/* Writes the chart to path (path.tmp, then renamed). 0, or STATUS_EIO / STATUS_EINVAL
 * with err. A panel with no finite point says so (plot_panel_t.empty) in its frame. */
int plot_svg_write(const char *path, const char *title, const char *xlabel,
                   const plot_panel_t *panels, int np, char *err);

/* Round tick values covering [lo, hi]: about `want` of them, spaced 1, 2 or 5 x 10^k.
 * Writes up to max into ticks and returns how many; *step gets the spacing. */
int plot_ticks(double lo, double hi, int want, double *ticks, int max, double *step);

#endif
