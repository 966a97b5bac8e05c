#include "gui/memory_chart.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHorizontalStackedBarSeries>
#include <QLineSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>

#include "gui/chart_util.h"

namespace llmplan::gui {

MemoryChart::MemoryChart(QWidget* parent) : QWidget(parent) {
  chart_ = make_chart(tr("Memory per GPU"), Qt::AlignRight);
  view_ = make_chart_view(chart_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view_);
  clear();
}

void MemoryChart::clear() {
  reset_chart(chart_);
  categories_.clear();
  set_title(chart_, tr("Memory per GPU: select a plan"));
}

QBarSet* MemoryChart::bar_set(const QString& label) const {
  return find_bar_set(chart_, label);
}

void MemoryChart::show_plan(const PlanDetails& d, double headroom_bytes) {
  clear();
  const MemoryReport& r = d.memory;
  // The stages worth a bar: first, worst (the peak), last; each once, in stage order.
  std::vector<const StageMemory*> stages = {&r.first, &r.worst, &r.last};
  std::sort(stages.begin(), stages.end(), [](const StageMemory* a, const StageMemory* b) { return a->stage < b->stage; });
  stages.erase(std::unique(stages.begin(), stages.end(), [](const StageMemory* a, const StageMemory* b) { return a->stage == b->stage; }),
               stages.end());
  const int last_stage = d.file.plan.pp - 1;
  for (const StageMemory* s : stages) {
    QStringList tags;
    if (s->stage == 0) tags << tr("first");
    if (s->stage == last_stage && last_stage > 0) tags << tr("last");
    if (s->stage == r.worst.stage) tags << tr("peak");
    categories_ << tr("stage %1 (%2)").arg(s->stage).arg(tags.join(", "));
  }

  auto* series = new QHorizontalStackedBarSeries;
  for (int i = 0; i < kMemoryItems; ++i) {
    bool any = false;
    for (const StageMemory* s : stages) any = any || s->bytes[static_cast<size_t>(i)] > 0;
    if (!any) continue;
    auto* set = new QBarSet(label(static_cast<MemoryItem>(i)));
    set->setColor(palette_color(i));
    set->setBorderColor(palette_color(i));
    for (const StageMemory* s : stages) set->append(s->bytes[static_cast<size_t>(i)]);
    series->append(set);
  }
  series->setBarWidth(0.6);
  chart_->addSeries(series);

  // The axis spans the bars, and the card when it is within 4x the peak: a 300 MiB plan on
  // an 80 GiB card would be a sliver at the left of it (the legend and title still give the
  // card). Its unit is the one that span reads best in (memory_unit_for).
  const double budget_bytes = r.capacity - headroom_bytes;
  double hi = 0;
  for (const StageMemory* s : stages) hi = std::max(hi, s->total);
  if (r.capacity <= 4 * hi) hi = std::max(hi, r.capacity);
  unit_ = memory_unit_for(hi);
  for (QBarSet* set : series->barSets())
    for (int k = 0; k < set->count(); ++k) set->replace(k, set->at(k) / unit_.size);
  auto* ax = make_value_axis(tr("Memory per GPU (%1)").arg(QLatin1String(unit_.name)), 0, hi / unit_.size * 1.05, QStringLiteral("%.0f"));
  auto* ay = new QBarCategoryAxis;
  ay->append(categories_);
  chart_->addAxis(ax, Qt::AlignBottom);
  chart_->addAxis(ay, Qt::AlignLeft);
  series->attachAxis(ax);
  series->attachAxis(ay);

  // Capacity (and budget) lines over the bars; the category axis spans -0.5..n-0.5.
  auto add_line = [&](double x, const QString& name, Qt::PenStyle style) {
    auto* line = new QLineSeries;
    line->setName(name);
    line->setPen(QPen(QColor(40, 40, 40), 2, style));
    line->append(x / unit_.size, -0.5);
    line->append(x / unit_.size, categories_.size() - 0.5);
    chart_->addSeries(line);
    line->attachAxis(ax);
    line->attachAxis(ay);
  };
  const QString beyond = r.capacity > ax->max() * unit_.size ? tr(", beyond the axis") : QString();
  add_line(r.capacity, tr("GPU memory %1%2").arg(memory_text(r.capacity), beyond), Qt::SolidLine);
  if (headroom_bytes > 0) add_line(budget_bytes, tr("budget %1 (after headroom)").arg(memory_text(budget_bytes)), Qt::DashLine);

  const StageMemory& w = r.worst;
  set_title(chart_, w.total <= budget_bytes
                        ? tr("Memory per GPU: peak %1 on stage %2 (%3), fits with %4 to spare")
                              .arg(memory_text(w.total)).arg(w.stage).arg(to_string(w.peak_phase)).arg(memory_text(budget_bytes - w.total))
                        : tr("Memory per GPU: peak %1 on stage %2 (%3), does NOT fit: %4 over the budget")
                              .arg(memory_text(w.total)).arg(w.stage).arg(to_string(w.peak_phase)).arg(memory_text(w.total - budget_bytes)));
}

}  // namespace llmplan::gui
