#include "gui/time_chart.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHorizontalStackedBarSeries>
#include <QLocale>
#include <QValueAxis>
#include <QVBoxLayout>

#include "gui/chart_util.h"

namespace llmplan::gui {

TimeChart::TimeChart(QWidget* parent) : QWidget(parent) {
  chart_ = make_chart(tr("Step time"), Qt::AlignRight);
  view_ = make_chart_view(chart_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view_);
  clear();
}

void TimeChart::clear() {
  reset_chart(chart_);
  set_title(chart_, tr("Step time: select a plan"));
}

QBarSet* TimeChart::bar_set(const QString& label) const {
  return find_bar_set(chart_, label);
}

void TimeChart::show_plan(const PlanDetails& d) {
  clear();
  const StepTime& t = d.time;
  const std::pair<QString, double> parts[] = {
      {tr("compute (fwd + bwd)"), t.compute}, {tr("recompute"), t.recompute}, {tr("TP comm"), t.tp_comm},  {tr("PP comm"), t.pp_comm},
      {tr("DP / ZeRO comm"), t.dp_comm},      {tr("CP comm"), t.cp_comm},     {tr("EP comm"), t.ep_comm},  {tr("offload"), t.offload},
      {tr("pipeline bubble"), t.bubble},      {tr("optimizer step"), t.optimizer}};
  auto* series = new QHorizontalStackedBarSeries;
  int i = 0;
  for (const auto& [name, seconds] : parts) {
    const int color = i++;
    if (seconds <= 0) continue;
    auto* set = new QBarSet(name);
    set->setColor(palette_color(color + 2));
    set->setBorderColor(palette_color(color + 2));
    set->append(seconds);
    series->append(set);
  }
  series->setBarWidth(0.5);
  chart_->addSeries(series);
  // The step in the unit it reads best in (a 16,224 s step on an axis of hours).
  Unit unit = time_unit_for(t.total);
  if (unit.size < 1) unit = {"s", 1};  // bars of a short step still read in seconds
  for (QBarSet* set : series->barSets()) set->replace(0, set->at(0) / unit.size);
  auto* ax = make_value_axis(tr("Time per optimizer step (%1)").arg(QLatin1String(unit.name)), 0, t.total / unit.size * 1.02,
                             QStringLiteral("%.3g"));
  auto* ay = new QBarCategoryAxis;
  ay->append(tr("slowest\nstage"));
  chart_->addAxis(ax, Qt::AlignBottom);
  chart_->addAxis(ay, Qt::AlignLeft);
  series->attachAxis(ax);
  series->attachAxis(ay);
  const QLocale loc;
  set_title(chart_, tr("Step time %1: %2 tokens/s, MFU %3%, bubble %4%")
                       .arg(duration_text(t.total))
                       .arg(loc.toString(t.tokens_per_s, 'f', 0))
                       .arg(100 * t.mfu, 0, 'f', 1)
                       .arg(100 * t.bubble_fraction(), 0, 'f', 1));
}

}  // namespace llmplan::gui
