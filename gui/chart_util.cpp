#include "gui/chart_util.h"

#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QFontMetricsF>
#include <QHorizontalStackedBarSeries>
#include <QLegend>
#include <QLocale>
#include <QValueAxis>
#include <cmath>
#include <algorithm>
#include <QRegularExpression>

#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

// The title as set, kept on the chart (and on each make_value_axis axis) so that it can be
// broken into lines again for a new size.
const char* const kTitleProperty = "llmplan_title";

// What Qt Charts' text items take beyond the text's advance (their document margins),
// and some to spare for the difference between QFontMetricsF and their layout.
constexpr double kTextSlack = 12;

// Breaks the chart's title to its width and each titled axis's title to the plot area's
// length along it. Only texts that change are set again: setting one lays the chart out
// anew, and an unchanged text must not start another round.
void fit_titles(QChart* chart) {
  const QVariant title = chart->property(kTitleProperty);
  if (title.isValid() && chart->size().width() > 0) {
    const QMarginsF m = chart->margins();
    const QString wrapped = wrap_words(title.toString(), chart->titleFont(), chart->size().width() - m.left() - m.right() - kTextSlack);
    if (chart->title() != wrapped) chart->setTitle(wrapped);
  }
  const QRectF plot = chart->plotArea();
  if (plot.isEmpty()) return;
  for (QAbstractAxis* axis : chart->axes()) {
    const QVariant text = axis->property(kTitleProperty);
    if (!text.isValid()) continue;
    const double length = axis->orientation() == Qt::Horizontal ? plot.width() : plot.height();
    const QString wrapped = wrap_words(text.toString(), axis->titleFont(), length - kTextSlack);
    if (axis->titleText() != wrapped) axis->setTitleText(wrapped);
  }
}

// A layout request (a series or an axis added or removed, a title set): the titles are
// fitted again once that layout has run, to the plot area it made.
class TitleFitter : public QObject {
 public:
  explicit TitleFitter(QChart* chart) : QObject(chart), chart_(chart) { chart->installEventFilter(this); }
  bool eventFilter(QObject*, QEvent* e) override {
    if (e->type() == QEvent::LayoutRequest) QMetaObject::invokeMethod(this, [c = chart_] { fit_titles(c); }, Qt::QueuedConnection);
    return false;
  }

 private:
  QChart* chart_;
};

}  // namespace

QString wrap_words(const QString& text, const QFont& font, double width) {
  const QFontMetricsF fm(font);
  QStringList lines;
  QString line;
  for (const QString& word : text.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    const QString longer = line.isEmpty() ? word : line + QLatin1Char(' ') + word;
    if (!line.isEmpty() && fm.horizontalAdvance(longer) > width) {
      lines << line;
      line = word;
    } else {
      line = longer;
    }
  }
  if (!line.isEmpty()) lines << line;
  for (QString& l : lines) l = l.toHtmlEscaped();
  return lines.join(QStringLiteral("<br>"));
}

void set_title(QChart* chart, const QString& title) {
  chart->setProperty(kTitleProperty, title);
  chart->setTitle(title.toHtmlEscaped());
  fit_titles(chart);
}

QString title_text(const QChart* chart) { return chart->property(kTitleProperty).toString(); }

QString title_text(const QAbstractAxis* axis) { return axis->property(kTitleProperty).toString(); }

QValueAxis* make_value_axis(const QString& title, double lo, double hi, const QString& label_format, bool nice) {
  auto* axis = new QValueAxis;
  axis->setTitleText(title.toHtmlEscaped());
  axis->setProperty(kTitleProperty, title);
  if (!(hi > lo)) hi = lo + 1;
  axis->setRange(lo, hi);
  axis->setLabelFormat(label_format);
  if (nice) axis->applyNiceNumbers();
  axis->setLabelFormat(distinct_label_format(label_format, axis->min(), axis->max(), axis->tickCount()));
  return axis;
}

QString distinct_label_format(const QString& format, double lo, double hi, int ticks) {
  const double step = (hi - lo) / std::max(1, ticks - 1);
  if (!(step > 0)) return format;
  static const QRegularExpression kFormat(QStringLiteral("^%\\.(\\d+)([fg])$"));
  const QRegularExpressionMatch m = kFormat.match(format);
  if (!m.hasMatch()) return format;
  const int given = m.captured(1).toInt();
  if (m.captured(2) == QLatin1String("f")) {
    // Enough decimals that one step shows: a 0.01 step needs 2.
    const int need = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 9);
    return need > given ? QStringLiteral("%.%1f").arg(need) : format;
  }
  // %g: enough significant digits for the largest label to differ from its neighbour.
  const double top = std::max(std::fabs(lo), std::fabs(hi));
  const int need = std::clamp(static_cast<int>(std::ceil(std::log10(top / step) - 1e-9)) + 1, 1, 12);
  return need > given ? QStringLiteral("%.%1g").arg(need) : format;
}

QChart* make_chart(const QString& title, Qt::Alignment legend) {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(legend);
  chart->setMargins(QMargins(4, 4, 4, 4));
  QFont f = chart->titleFont();
  f.setBold(true);
  chart->setTitleFont(f);
  set_title(chart, title);
  // A new size or plot area: the titles broken again to fit it.
  QObject::connect(chart, &QChart::geometryChanged, chart, [chart] { fit_titles(chart); });
  QObject::connect(chart, &QChart::plotAreaChanged, chart, [chart] { fit_titles(chart); });
  new TitleFitter(chart);
  return chart;
}

QChartView* make_chart_view(QChart* chart) {
  auto* view = new QChartView(chart);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumSize(320, 220);
  return view;
}

void attach(QChart* chart, QAbstractSeries* series) {
  chart->addSeries(series);
  const auto h = chart->axes(Qt::Horizontal), v = chart->axes(Qt::Vertical);
  if (!h.isEmpty()) series->attachAxis(h.first());
  if (!v.isEmpty()) series->attachAxis(v.first());
}

void reset_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

QBarSet* find_bar_set(const QChart* chart, const QString& label) {
  for (QAbstractSeries* s : chart->series())
    if (auto* bars = qobject_cast<QHorizontalStackedBarSeries*>(s))
      for (QBarSet* set : bars->barSets())
        if (set->label() == label) return set;
  return nullptr;
}

QColor palette_color(int i) {
  static const QColor kColors[] = {QColor(0x4c, 0x72, 0xb0), QColor(0xdd, 0x84, 0x52), QColor(0x55, 0xa8, 0x68), QColor(0xc4, 0x4e, 0x52),
                                   QColor(0x81, 0x72, 0xb3), QColor(0x93, 0x78, 0x60), QColor(0xda, 0x8b, 0xc3), QColor(0x8c, 0x8c, 0x8c),
                                   QColor(0xcc, 0xb9, 0x74), QColor(0x64, 0xb5, 0xcd), QColor(0x2f, 0x4b, 0x7c), QColor(0xa0, 0xcb, 0xe8)};
  return kColors[((i % 12) + 12) % 12];
}

Unit unit_for(double span, std::initializer_list<Unit> ladder) {
  Unit best = *ladder.begin();
  for (const Unit& u : ladder)
    if (span >= 2 * u.size) best = u;
  return best;
}

Unit time_unit_for(double span_s) { return unit_for(span_s, {{"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}}); }

Unit memory_unit_for(double span_bytes) { return unit_for(span_bytes, {{"MiB", kMiB}, {"GiB", kGiB}}); }

QString duration_text(double seconds) {
  const Unit u = time_unit_for(seconds);
  const QString in_unit = QStringLiteral("%1 %2").arg(seconds / u.size, 0, 'f', u.size == 1 || u.size == 1e-3 ? 3 : 2).arg(QLatin1String(u.name));
  if (u.size <= 1) return in_unit;
  return QStringLiteral("%1 (%2 s)").arg(in_unit, QLocale().toString(seconds, 'f', 0));
}

QString memory_text(double bytes) {
  const Unit u = memory_unit_for(bytes);
  return QStringLiteral("%1 %2").arg(bytes / u.size, 0, 'f', u.size == kGiB ? 2 : 1).arg(QLatin1String(u.name));
}

}  // namespace llmplan::gui
