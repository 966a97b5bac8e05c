#include "gui/budget_panel.h"

#include <cmath>

#include <QFormLayout>
#include <QLineEdit>
#include <QLocale>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "planner/cost/goodput.h"
#include "planner/cost/train_budget.h"
#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

QString duration(double s) {
  if (s >= 2 * 86400) return QStringLiteral("%1 days").arg(s / 86400, 0, 'f', 1);
  if (s >= 2 * 3600) return QStringLiteral("%1 h").arg(s / 3600, 0, 'f', 1);
  if (s >= 120) return QStringLiteral("%1 min").arg(s / 60, 0, 'f', 1);
  return QStringLiteral("%1 s").arg(s, 0, 'f', 1);
}

QString row(const QString& name, const QString& value) {
  return QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(name, value);
}

}  // namespace

QString budget_html(const PlanDetails& d, const BudgetInputs& in, const EconomicsData* data, const QString& data_error) {
  if (!data) return QStringLiteral("<p style='color:#b00020'>No budget: %1</p>").arg(data_error.toHtmlEscaped());
  const QLocale loc;
  const GoodputOptions opt = data->default_goodput_options();
  const Goodput g = estimate_goodput(d.file.model, d.file.cluster, d.file.job, d.file.plan, d.file.gpus, d.time.total, opt);
  const PriceOffer* offer = data->default_offer(d.file.cluster.gpu.name);
  const double price = in.price_per_gpu_hour > 0 ? in.price_per_gpu_hour : offer ? offer->per_gpu_hour : 0;
  const EnergySpec e = data->energy_for(d.file.cluster);
  const TrainingBudget b = training_budget(in.tokens, d.file.gpus, d.file.cluster.gpus_per_node, d.time, g.fraction, price, e);
  QString h = QStringLiteral("<h3>Training %1 tokens</h3><table cellspacing='4'>").arg(QString::fromStdString(format_count(in.tokens)));
  h += row(QStringLiteral("checkpoint"), QStringLiteral("%1 GiB, %2 to write, %3 to read back")
                                             .arg(g.size.total_bytes / kGiB, 0, 'f', 1)
                                             .arg(duration(g.times.persist_s), duration(g.times.load_s)));
  if (std::isfinite(g.mtbf_s)) {
    h += row(QStringLiteral("failures"), QStringLiteral("job MTBF %1 (%2)").arg(duration(g.mtbf_s), QString::fromStdString(data->default_failure_source)));
    h += row(QStringLiteral("checkpoint every"), QStringLiteral("%1 steps (%2, Daly's optimum); restart %3")
                                                     .arg(g.interval_steps)
                                                     .arg(duration(g.interval_s), duration(g.restart_s)));
  }
  h += row(QStringLiteral("goodput"), QStringLiteral("%1%").arg(100 * g.fraction, 0, 'f', 1));
  h += row(QStringLiteral("wall-clock"), QStringLiteral("%1 (%2 uninterrupted)").arg(duration(b.wall_s), duration(b.productive_s)));
  h += row(QStringLiteral("GPU-hours"), loc.toString(b.gpu_hours, 'f', 0));
  if (price > 0) {
    const QString from = in.price_per_gpu_hour > 0 ? QStringLiteral("typed")
                                                   : QString::fromStdString(offer->provider + ", " + offer->offer + ", " + offer->date).toHtmlEscaped();
    h += row(QStringLiteral("cost"), QStringLiteral("$%1 at $%2/GPU-hour (%3)").arg(loc.toString(b.cost, 'f', 0)).arg(price).arg(from));
  } else {
    h += row(QStringLiteral("cost"), QStringLiteral("no price listed for %1: type one").arg(QString::fromStdString(d.file.cluster.gpu.name).toHtmlEscaped()));
  }
  if (b.energy_kwh > 0)
    h += row(QStringLiteral("energy"), QStringLiteral("%1 MWh (%2 W per GPU, PUE %3)").arg(b.energy_kwh / 1000, 0, 'f', 1).arg(b.gpu_power_w, 0, 'f', 0).arg(e.pue));
  else
    h += row(QStringLiteral("energy"), QStringLiteral("no board power known for this GPU"));
  h += QStringLiteral("</table><p><small>Sources and assumptions: data/reliability/failures.json, data/economics/. The CLI: "
                      "<code>llmplan sweep --tokens</code> with the same plan.</small></p>");
  return h;
}

BudgetPanel::BudgetPanel(const PresetRegistry& presets, QWidget* parent) : QWidget(parent) {
  Result<EconomicsData> d = load_economics(default_data_root(), presets);
  if (d) data_ = std::move(*d);
  else data_error_ = QString::fromStdString(d.status().message());
  auto* form = new QFormLayout;
  tokens_ = new QLineEdit(QStringLiteral("1T"));
  tokens_->setToolTip(tr("Tokens to train: 15T, 2.5e12, 300B"));
  price_ = new QLineEdit;
  price_->setPlaceholderText(tr("listed offer"));
  price_->setToolTip(tr("USD per GPU-hour; empty: the GPU's first offer in data/economics/prices.json"));
  form->addRow(tr("Tokens"), tokens_);
  form->addRow(tr("$ / GPU-hour"), price_);
  text_ = new QTextBrowser;
  text_->setOpenLinks(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(form);
  layout->addWidget(text_, 1);
  connect(tokens_, &QLineEdit::editingFinished, this, &BudgetPanel::refresh);
  connect(price_, &QLineEdit::editingFinished, this, &BudgetPanel::refresh);
  clear_plan();
}

void BudgetPanel::show_plan(const PlanDetails& d) {
  plan_ = d;
  refresh();
}

void BudgetPanel::clear_plan() {
  plan_.reset();
  text_->setHtml(tr("<p><i>Select a plan to see the days, goodput, cost and energy of a token budget.</i></p>"));
}

QString BudgetPanel::html() const { return text_->toHtml(); }

void BudgetPanel::refresh() {
  if (!plan_) return;
  BudgetInputs in;
  Result<double> t = parse_count(tokens_->text().trimmed().toStdString(), "Tokens");
  if (!t || *t < 1) {
    text_->setHtml(QStringLiteral("<p style='color:#b00020'>%1</p>")
                       .arg(t ? tr("Tokens: expected a positive count") : QString::fromStdString(t.status().message()).toHtmlEscaped()));
    return;
  }
  in.tokens = *t;
  if (!price_->text().trimmed().isEmpty()) {
    bool ok = false;
    const double p = price_->text().trimmed().toDouble(&ok);
    if (!ok || !(p > 0 && p < 1e6)) {
      text_->setHtml(tr("<p style='color:#b00020'>$ / GPU-hour: expected a positive price, got '%1'</p>").arg(price_->text().toHtmlEscaped()));
      return;
    }
    in.price_per_gpu_hour = p;
  }
  text_->setHtml(budget_html(*plan_, in, data_ ? &*data_ : nullptr, data_error_));
}

}  // namespace llmplan::gui
