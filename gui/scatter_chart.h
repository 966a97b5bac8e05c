// Peak memory per GPU (x, in the unit the axis reads best in: chart_util.h
// memory_unit_for) against throughput (y, tokens/s) of every plan the table
// shows (the filter proxy's rows): fitting plans in colour, plans that do not fit in grey
// beyond the memory-budget line, the Pareto front as a line, and the selected plan
// ringed. Clicking a point emits plan_clicked() with the nearest plan's model row.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QPointF>
#include <QWidget>
#include <vector>

#include "gui/chart_util.h"

class QChart;
class QChartView;
class QLineSeries;
class QScatterSeries;

namespace llmplan::gui {

class PlanTableModel;
class PlanFilterProxy;

class ScatterChart : public QWidget {
  Q_OBJECT

 public:
  ScatterChart(const PlanTableModel* model, const PlanFilterProxy* proxy, QWidget* parent = nullptr);

  // Redraws from the proxy's rows (call after the model or the filter changed).
  void rebuild();
  // Rings the plan at model row `source_row` (-1: none).
  void set_selected(int source_row);
  int selected() const { return selected_; }
  // The unit of the memory axis, in which the points' x values are.
  Unit memory_unit() const { return unit_; }
  // The model row of the shown plan nearest to `value` (chart coordinates, distances
  // scaled by the axis ranges); -1 when none is shown.
  int nearest_row(QPointF value) const;

  QChart* chart() const { return chart_; }
  QChartView* view() const { return view_; }
  // Points drawn per series (after thinning points that share a pixel); for tests.
  QScatterSeries* fitting_series() const { return fits_; }
  QScatterSeries* nonfitting_series() const { return nofit_; }
  QScatterSeries* selected_series() const { return selected_series_; }
  QLineSeries* pareto_series() const { return pareto_; }

 signals:
  void plan_clicked(int source_row);

 private:
  void on_clicked(const QPointF& point);

  const PlanTableModel* model_;
  const PlanFilterProxy* proxy_;
  QChart* chart_;
  QChartView* view_;
  QScatterSeries* fits_ = nullptr;
  QScatterSeries* nofit_ = nullptr;
  QScatterSeries* selected_series_ = nullptr;
  QLineSeries* pareto_ = nullptr;
  std::vector<int> shown_;  // model rows accepted by the filter
  Unit unit_ = memory_unit_for(0);
  double x_span_ = 1, y_span_ = 1;
  int selected_ = -1;
};

}  // namespace llmplan::gui
