// The selected plan's memory per GPU as stacked bars, one bar per pipeline stage worth
// showing (the first, the most loaded and the last), one segment per component of the
// memory model (weights, gradients, optimizer states, ..., fragmentation), in GiB, with
// the card's capacity (and the budget after headroom) as vertical lines.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>

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

 private:
  QChart* chart_;
  QChartView* view_;
  QStringList categories_;
};

}  // namespace llmplan::gui
