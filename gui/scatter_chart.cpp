#include "gui/scatter_chart.h"

#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QLegend>
#include <QLegendMarker>
#include <QScatterSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <set>

#include "gui/chart_util.h"
#include "gui/plan_table_model.h"

namespace llmplan::gui {

ScatterChart::ScatterChart(const PlanTableModel* model, const PlanFilterProxy* proxy, QWidget* parent)
    : QWidget(parent), model_(model), proxy_(proxy) {
  chart_ = make_chart(tr("Peak memory vs throughput"));
  view_ = make_chart_view(chart_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view_);
  rebuild();
}

void ScatterChart::rebuild() {
  reset_chart(chart_);
  fits_ = nofit_ = selected_series_ = nullptr;
  pareto_ = nullptr;
  shown_.clear();
  for (int r = 0; r < proxy_->rowCount(); ++r) shown_.push_back(proxy_->source_row(r));

  const double budget_bytes = model_->budget_bytes();
  double max_x = budget_bytes, max_y = 0;
  for (int row : shown_) {
    const PlanResult& p = model_->plan_row(row).result;
    max_x = std::max(max_x, p.peak_bytes);
    max_y = std::max(max_y, p.tokens_per_s);
  }
  // Plans far beyond the card would squash the interesting part: cap the axis at 3x the
  // budget and say how many are beyond it. Memory in the unit that span reads best in.
  const double x_hi_bytes = std::min(max_x * 1.05, budget_bytes > 0 ? 3 * budget_bytes : max_x * 1.05);
  unit_ = memory_unit_for(x_hi_bytes);
  const double budget = budget_bytes / unit_.size;
  auto* ax = make_value_axis(tr("Peak memory per GPU (%1)").arg(QLatin1String(unit_.name)), 0, std::max(1.0, x_hi_bytes / unit_.size),
                             QStringLiteral("%.0f"));
  auto* ay = make_value_axis(tr("Throughput (tokens/s)"), 0, std::max(1.0, max_y * 1.08), QStringLiteral("%.0f"));
  chart_->addAxis(ax, Qt::AlignBottom);
  chart_->addAxis(ay, Qt::AlignLeft);
  x_span_ = ax->max() - ax->min();
  y_span_ = ay->max() - ay->min();

  fits_ = new QScatterSeries;
  fits_->setName(tr("fits"));
  fits_->setMarkerSize(6);
  fits_->setColor(palette_color(0));
  fits_->setBorderColor(palette_color(0).darker(130));
  nofit_ = new QScatterSeries;
  nofit_->setName(tr("does not fit"));
  nofit_->setMarkerSize(6);
  nofit_->setColor(QColor(190, 190, 190));
  nofit_->setBorderColor(QColor(160, 160, 160));
  pareto_ = new QLineSeries;
  pareto_->setName(tr("Pareto front"));
  pareto_->setPen(QPen(palette_color(1), 2));
  pareto_->setPointsVisible(true);

  // Thin points that land on the same pixel-sized cell: the chart stays fast with tens of
  // thousands of plans, and clicks still find the exact nearest plan (nearest_row).
  std::set<std::pair<int, int>> cells_fit, cells_nofit;
  int beyond = 0, n_fit = 0, n_nofit = 0;
  std::vector<QPointF> front;
  for (int row : shown_) {
    const PlanTableModel::Row& pr = model_->plan_row(row);
    const QPointF pt(pr.result.peak_bytes / unit_.size, pr.result.tokens_per_s);
    (pr.fits() ? n_fit : n_nofit)++;
    if (pt.x() > ax->max()) {
      ++beyond;
      continue;
    }
    const std::pair<int, int> cell{static_cast<int>(pt.x() / x_span_ * 600), static_cast<int>(pt.y() / y_span_ * 400)};
    if (pr.fits()) {
      if (cells_fit.insert(cell).second) fits_->append(pt);
    } else if (cells_nofit.insert(cell).second) {
      nofit_->append(pt);
    }
    if (pr.pareto && pr.fits()) front.push_back(pt);
  }
  std::sort(front.begin(), front.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
  for (const QPointF& p : front) pareto_->append(p);

  attach(chart_, nofit_);
  attach(chart_, fits_);
  attach(chart_, pareto_);
  if (budget_bytes > 0) {
    auto* line = new QLineSeries;
    const double cap = model_->context().base.cluster.gpu.memory_bytes;
    line->setName(model_->context().headroom_bytes > 0 ? tr("memory budget %1 (%2 card − headroom)").arg(memory_text(budget_bytes), memory_text(cap))
                                                       : tr("GPU memory %1").arg(memory_text(budget_bytes)));
    line->setPen(QPen(QColor(0xc4, 0x4e, 0x52), 2, Qt::DashLine));
    line->append(budget, ay->min());
    line->append(budget, ay->max());
    attach(chart_, line);
  }
  selected_series_ = new QScatterSeries;
  selected_series_->setName(tr("selected plan"));
  selected_series_->setMarkerSize(16);
  selected_series_->setColor(QColor(0, 0, 0, 0));
  selected_series_->setBorderColor(QColor(0xd6, 0x27, 0x28));
  QPen ring(QColor(0xd6, 0x27, 0x28), 3);
  selected_series_->setPen(ring);
  attach(chart_, selected_series_);
  // The legend shows the red ring the chart draws, not a blank square.
  for (QLegendMarker* m : chart_->legend()->markers(selected_series_)) {
    m->setShape(QLegend::MarkerShapeCircle);
    m->setPen(ring);
    m->setBrush(Qt::NoBrush);  // (the series' updates reset it to the series' transparent fill)
  }

  QString title = tr("Peak memory vs throughput: %1 fitting, %2 not fitting").arg(n_fit).arg(n_nofit);
  if (beyond > 0) title += tr(" (%1 beyond %2 %3 not drawn)").arg(beyond).arg(ax->max(), 0, 'f', 0).arg(QLatin1String(unit_.name));
  set_title(chart_, title);

  for (QScatterSeries* s : {fits_, nofit_}) connect(s, &QScatterSeries::clicked, this, &ScatterChart::on_clicked);
  connect(pareto_, &QLineSeries::clicked, this, &ScatterChart::on_clicked);
  const int keep = selected_;
  selected_ = -2;
  set_selected(keep);
}

void ScatterChart::set_selected(int source_row) {
  if (source_row == selected_) return;
  selected_ = source_row;
  if (!selected_series_) return;
  selected_series_->clear();
  if (source_row >= 0 && source_row < model_->plan_count()) {
    const PlanResult& p = model_->plan_row(source_row).result;
    selected_series_->append(p.peak_bytes / unit_.size, p.tokens_per_s);
  }
}

int ScatterChart::nearest_row(QPointF value) const {
  int best = -1;
  double best_d = 1e300;
  for (int row : shown_) {
    const PlanResult& p = model_->plan_row(row).result;
    const double dx = (p.peak_bytes / unit_.size - value.x()) / x_span_, dy = (p.tokens_per_s - value.y()) / y_span_;
    const double d = dx * dx + dy * dy;
    if (d < best_d) {
      best_d = d;
      best = row;
    }
  }
  return best;
}

void ScatterChart::on_clicked(const QPointF& point) {
  const int row = nearest_row(point);
  if (row >= 0) emit plan_clicked(row);
}

}  // namespace llmplan::gui
