// The selected plan's step time as one stacked bar: compute, recompute, exposed TP / PP /
// DP / CP / EP communication, offload, pipeline bubble and optimizer step, in seconds
// (the time model's StepTime breakdown of the critical pipeline stage).
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>

#include "gui/plan_details.h"

class QBarSet;
class QChart;
class QChartView;

namespace llmplan::gui {

class TimeChart : public QWidget {
  Q_OBJECT

 public:
  explicit TimeChart(QWidget* parent = nullptr);
  void show_plan(const PlanDetails& d);
  void clear();

  QChart* chart() const { return chart_; }
  QChartView* view() const { return view_; }
  QBarSet* bar_set(const QString& label) const;

 private:
  QChart* chart_;
  QChartView* view_;
};

}  // namespace llmplan::gui
