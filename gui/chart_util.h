// Small helpers shared by the charts: titled value axes with explicit ranges (axes added
// by hand take their range from the first attached series only, so every chart sets its
// ranges), titles that never clip, a chart view with antialiasing, the units that times and
// sizes read best in, and the colours of memory items and slices.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QColor>
#include <QString>
#include <initializer_list>

class QAbstractAxis;
class QAbstractSeries;
class QBarSet;
class QChart;
class QChartView;
class QFont;
class QValueAxis;

namespace llmplan::gui {

// A value axis titled `title` over [lo, hi] (widened to nice numbers when `nice`), its
// labels as `label_format` or finer where ticks would repeat a label; on a make_chart
// chart its title is broken into lines to the plot area rather than clipped.
QValueAxis* make_value_axis(const QString& title, double lo, double hi, const QString& label_format, bool nice = true);
// `format` ("%.2f", "%.3g") widened so that `ticks` evenly spaced labels over [lo, hi] all
// differ (a loss axis of 11.00 .. 11.05 reads 11.00, 11.01, ..., not 11.00 five times).
QString distinct_label_format(const QString& format, double lo, double hi, int ticks);
// A chart with the house look: legend at the bottom, no animation, small margins, and
// titles that never clip (set_title; make_value_axis's axis titles alike).
QChart* make_chart(const QString& title, Qt::Alignment legend = Qt::AlignBottom);
// Sets the chart's title. Qt Charts cuts a title wider than the chart mid-word ("Memory
// per GPU: peak 53.12 GiB on sta..."); this one is broken into lines at spaces to the
// chart's width, and broken again whenever the chart is resized. Axis titles of
// make_value_axis axes are broken likewise to the plot area's width (horizontal axes) or
// height (vertical ones). title_text() gives the title back as set, in one line.
void set_title(QChart* chart, const QString& title);
QString title_text(const QChart* chart);
QString title_text(const QAbstractAxis* axis);  // a make_value_axis axis's, as made
// `text` broken at spaces into lines no wider than `width` in `font`, as the HTML that Qt
// Charts draws titles from (escaped, lines joined by <br>). A word wider than `width`
// stays whole on a line of its own.
QString wrap_words(const QString& text, const QFont& font, double width);
QChartView* make_chart_view(QChart* chart);
// Attaches `series` to the chart and to its first horizontal and vertical axes.
void attach(QChart* chart, QAbstractSeries* series);
// Removes (and deletes) every series and axis of the chart.
void reset_chart(QChart* chart);
// The bar set labelled `label` in the chart's horizontal stacked bar series, or nullptr.
QBarSet* find_bar_set(const QChart* chart, const QString& label);

// A unit a quantity reads in: its name and its size in the base unit (seconds, bytes).
struct Unit {
  const char* name;  // "ms", "s", "min", "h"; "MiB", "GiB"
  double size;       // one unit in the base unit
};
// The one rule every scaled axis and number follows: the largest unit of `ladder`
// (smallest first) of which `span` holds at least two; the smallest when none does.
Unit unit_for(double span, std::initializer_list<Unit> ladder);
// Time: ms below 2 s, s below 2 min, min below 2 h, else h.
Unit time_unit_for(double span_s);
// Memory: MiB below 2 GiB, else GiB (a 300 MiB plan reads 0 .. 300 MiB, not 0 GiB ticks).
Unit memory_unit_for(double span_bytes);
// "16.224 s", "4.51 h (16,224 s)": a duration in its unit, with the seconds beside when
// the unit is not seconds.
QString duration_text(double seconds);
// "312.5 MiB", "53.12 GiB": a size in its unit.
QString memory_text(double bytes);

// Stable colours by index (a 12-colour qualitative palette).
QColor palette_color(int i);

}  // namespace llmplan::gui
