// The selected plan's training budget, beside its explanation: the tokens to train (and a
// price, else the GPU's listed offer) typed in; the checkpoint, failures, goodput, days,
// GPU-hours, cost and energy computed by the planner (estimate_goodput, training_budget)
// with the data folder's defaults, the numbers `llmplan sweep --tokens T` prints for it.
//
// Thread-safety: GUI thread only.
#pragma once

#include <optional>

#include <QWidget>

#include "gui/plan_details.h"
#include "planner/io/economics.h"

class QLineEdit;
class QTextBrowser;

namespace llmplan::gui {

struct BudgetInputs {
  double tokens = 1e12;
  double price_per_gpu_hour = 0;  // 0: the GPU's first offer in data/economics/prices.json
};

// The panel's HTML for plan `d` (exposed for tests). `data` null: the data folder's error.
QString budget_html(const PlanDetails& d, const BudgetInputs& in, const EconomicsData* data, const QString& data_error = {});

class BudgetPanel : public QWidget {
  Q_OBJECT

 public:
  // Reads the reliability, price and power data under the presets' data folder once.
  explicit BudgetPanel(const PresetRegistry& presets, QWidget* parent = nullptr);
  void show_plan(const PlanDetails& d);
  void clear_plan();
  QLineEdit* tokens_edit() const { return tokens_; }
  QLineEdit* price_edit() const { return price_; }
  QString html() const;

 private:
  void refresh();
  QLineEdit* tokens_ = nullptr;
  QLineEdit* price_ = nullptr;
  QTextBrowser* text_ = nullptr;
  std::optional<EconomicsData> data_;
  QString data_error_;
  std::optional<PlanDetails> plan_;
};

}  // namespace llmplan::gui
