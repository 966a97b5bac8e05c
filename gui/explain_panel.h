// Why the selected plan does (not) fit, by how much, where (stage, phase, component),
// and the cheapest single changes that make it fit, each with its memory and throughput
// from the planner's explain_plan (never hard-coded advice).
//
// Thread-safety: GUI thread only.
#pragma once

#include <QTextBrowser>

#include "gui/plan_details.h"

namespace llmplan::gui {

class ExplainPanel : public QTextBrowser {
  Q_OBJECT

 public:
  explicit ExplainPanel(QWidget* parent = nullptr);
  void show_plan(const PlanDetails& d);
  void clear_plan();
};

// The panel's HTML for `d` (exposed for tests).
QString explanation_html(const PlanDetails& d);

}  // namespace llmplan::gui
