// The selected plan's memory per GPU as stacked bars, one bar per pipeline stage worth
// showing (the first, the most loaded and the last), one segment per component of the
// memory model (weights, gradients, optimizer states, ..., fragmentation), with the card's
// capacity (and the budget after headroom) as vertical lines. The axis spans the bars, and
// the card when it is within 4x the peak; its unit (MiB or GiB) is the one that span reads
// best in (chart_util.h memory_unit_for), and the bars' values are in it.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>

#include "gui/chart_util.h"
#include "gui/plan_details.h"

class QBarSet;
class QChart;
class QChartView;

namespace llmplan::gui {

class MemoryChart : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  void show_plan(const PlanDetails& d, double headroom_bytes);
  void clear();

  QChart* chart() const { return chart_; }
  QChartView* view() const { return view_; }
  // The bar set of a component (its label, e.g. "optimizer states"); null when absent.
  QBarSet* bar_set(const QString& label) const;
  // The bar categories, top to bottom as stored ("stage 0 (first, peak)", ...).
  QStringList categories() const { return categories_; }
  // The unit of the axis and of the bars' values.
  Unit unit() const { return unit_; }

 private:
  QChart* chart_;
  QChartView* view_;
  QStringList categories_;
  Unit unit_ = memory_unit_for(0);
};

}  // namespace llmplan::gui
