// Why the selected plan does (not) fit, by how much, where (stage, phase, component),
// and the cheapest single changes that make it fit, each with its memory and throughput
// from the planner's explain_plan (never hard-coded advice).
//
// Thread-safety: GUI thread only.
#pragma once

#include <QTextBrowser>

#include "gui/plan_details.h"
#include "planner/search/fit_advice.h"

namespace llmplan::gui {

class ExplainPanel : public QTextBrowser {
  Q_OBJECT

 public:
  explicit ExplainPanel(QWidget* parent = nullptr);
  // `advice`: when no plan of the sweep fits, the job changes that make one fit (appended).
  void show_plan(const PlanDetails& d, const FitAdvice* advice = nullptr);
  void clear_plan();
};

// "What would make a plan fit": each job change, its best plan, peak and throughput.
QString fit_advice_html(const FitAdvice& a);

// The panel's HTML for `d` (exposed for tests).
QString explanation_html(const PlanDetails& d);

}  // namespace llmplan::gui
