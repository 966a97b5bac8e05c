#include "gui/profiles_tab.h"

#include <QChart>
#include <QChartView>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QPushButton>
#include <QScatterSeries>
#include <QSplitter>
#include <QTableWidget>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "gui/chart_util.h"
#include "planner/spec/units.h"

namespace llmplan::gui {

namespace {

// Predicted (x) against measured (y) with the y = x line: the pairs in their base unit
// (bytes, seconds), drawn in the unit `unit_for_span` picks for the largest of them; points
// of runs that measured nothing (still running, failed before the first step) are left out.
void fill_comparison(QChart* chart, std::vector<std::pair<double, double>> pts, Unit (*unit_for_span)(double), const QString& what) {
  reset_chart(chart);
  double hi = 0;
  for (const auto& [x, y] : pts) hi = std::max({hi, x, y});
  const Unit unit = unit_for_span(hi);
  for (auto& [x, y] : pts) x /= unit.size, y /= unit.size;
  hi = hi > 0 ? hi / unit.size * 1.1 : 1;
  const QString name = QLatin1String(unit.name);
  chart->addAxis(make_value_axis(QObject::tr("predicted %1 (%2)").arg(what, name), 0, hi, QStringLiteral("%.3g")), Qt::AlignBottom);
  chart->addAxis(make_value_axis(QObject::tr("measured %1 (%2)").arg(what, name), 0, hi, QStringLiteral("%.3g")), Qt::AlignLeft);
  auto* diag = new QLineSeries;
  diag->setName(QObject::tr("y = x (perfect prediction)"));
  diag->setPen(QPen(QColor(120, 120, 120), 1.5, Qt::DashLine));
  diag->append(0, 0);
  diag->append(hi * 2, hi * 2);
  attach(chart, diag);
  auto* s = new QScatterSeries;
  s->setName(QObject::tr("runs (%1)").arg(pts.size()));
  s->setMarkerSize(10);
  s->setColor(palette_color(0));
  for (const auto& [x, y] : pts) s->append(x, y);
  attach(chart, s);
}

}  // namespace

ProfilesTab::ProfilesTab(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Profile database:")));
  path_edit_ = new QLineEdit;
  path_edit_->setReadOnly(true);
  bar->addWidget(path_edit_, 1);
  auto* open = new QPushButton(tr("Open…"));
  auto* reload_button = new QPushButton(tr("Reload"));
  bar->addWidget(open);
  bar->addWidget(reload_button);
  layout->addLayout(bar);
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->hide();
  layout->addWidget(message_);

  auto* split = new QSplitter(Qt::Vertical);
  table_ = new QTableWidget(0, 12);
  table_->setHorizontalHeaderLabels({tr("id"), tr("created (UTC)"), tr("model"), tr("hardware"), tr("backend"), tr("status"), tr("steps"),
                                     tr("tokens/s"), tr("peak GiB\npredicted"), tr("peak GiB\nmeasured"), tr("step s\npredicted"),
                                     tr("step s\nmeasured")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  split->addWidget(table_);

  auto* charts = new QWidget;
  auto* ch = new QHBoxLayout(charts);
  ch->setContentsMargins(0, 0, 0, 0);
  memory_chart_ = make_chart(tr("Peak memory per GPU"));
  time_chart_ = make_chart(tr("Step time"));
  loss_chart_ = make_chart(tr("Loss per step"));
  memory_view_ = make_chart_view(memory_chart_);
  time_view_ = make_chart_view(time_chart_);
  loss_view_ = make_chart_view(loss_chart_);
  ch->addWidget(memory_view_);
  ch->addWidget(time_view_);
  ch->addWidget(loss_view_);
  split->addWidget(charts);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 2);
  layout->addWidget(split, 1);

  connect(open, &QPushButton::clicked, this, &ProfilesTab::browse);
  connect(reload_button, &QPushButton::clicked, this, &ProfilesTab::reload);
  connect(table_, &QTableWidget::currentCellChanged, this, [this](int row, int, int, int) { show_loss(row); });
  rebuild_comparisons();
  show_loss(-1);
}

QString ProfilesTab::message() const { return message_->isHidden() ? QString() : message_->text(); }

bool ProfilesTab::set_database(const QString& path) {
  path_ = path;
  path_edit_->setText(path);
  return reload();
}

bool ProfilesTab::reload() {
  runs_.clear();
  table_->setRowCount(0);
  QString msg;
  bool ok = false;
  if (path_.isEmpty()) {
    msg = tr("No profile database: choose one with Open… or in File > Settings.");
  } else if (Result<ProfileStore> store = ProfileStore::open(path_.toStdString()); !store) {
    msg = tr("Cannot read the profile database: %1").arg(QString::fromStdString(store.status().message()));
  } else if (Result<std::vector<RunSummary>> runs = store->list_runs(); !runs) {
    msg = tr("Cannot list runs: %1").arg(QString::fromStdString(runs.status().message()));
  } else {
    runs_ = std::move(*runs);
    ok = true;
    if (runs_.empty()) msg = tr("No runs yet: execute a plan (Execute tab, or `llmplan execute plan.json`) to add one.");
  }
  message_->setText(msg);
  message_->setVisible(!msg.isEmpty());

  table_->setRowCount(static_cast<int>(runs_.size()));
  for (int i = 0; i < static_cast<int>(runs_.size()); ++i) {
    const RunSummary& r = runs_[static_cast<size_t>(i)];
    auto num = [](double v, int decimals) { return v > 0 ? QString::number(v, 'f', decimals) : QStringLiteral("-"); };
    QString created = QString::fromStdString(r.created_at);
    created.replace('T', ' ').remove('Z');
    const QStringList cells = {QString::number(r.id), created, QString::fromStdString(r.model),
                               QString::fromStdString(r.hardware), QString::fromStdString(r.backend), to_string(r.status),
                               QStringLiteral("%1 / %2").arg(r.steps_recorded).arg(r.steps_planned), num(r.tokens_per_s, 0),
                               num(r.predicted_peak_bytes / kGiB, 2), num(r.peak_bytes / kGiB, 2), num(r.predicted_step_time_s, 3),
                               num(r.step_time_s, 3)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c == 0 || c >= 6) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table_->setItem(i, c, item);
    }
  }
  rebuild_comparisons();
  if (!runs_.empty()) select_run(static_cast<int>(runs_.size()) - 1);  // the newest
  else show_loss(-1);
  return ok;
}

void ProfilesTab::select_run(int row) {
  if (row < 0 || row >= run_count()) return;
  table_->setCurrentCell(row, 0);
  show_loss(row);
}

void ProfilesTab::browse() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a profile database"), path_, tr("SQLite databases (*.db *.sqlite);;All files (*)"));
  if (path.isEmpty()) return;
  set_database(path);
  emit database_chosen(path);
}

void ProfilesTab::rebuild_comparisons() {
  std::vector<std::pair<double, double>> mem, time;
  for (const RunSummary& r : runs_) {
    if (r.predicted_peak_bytes > 0 && r.peak_bytes > 0) mem.emplace_back(r.predicted_peak_bytes, r.peak_bytes);
    if (r.predicted_step_time_s > 0 && r.step_time_s > 0) time.emplace_back(r.predicted_step_time_s, r.step_time_s);
  }
  fill_comparison(memory_chart_, std::move(mem), memory_unit_for, tr("peak memory"));
  // Step times stay in seconds, as the table beside gives them.
  fill_comparison(time_chart_, std::move(time), [](double) { return Unit{"s", 1}; }, tr("step time"));
}

void ProfilesTab::show_loss(int row) {
  reset_chart(loss_chart_);
  std::vector<StepRecord> steps;
  QString title = tr("Loss per step: select a run");
  if (row >= 0 && row < run_count()) {
    const RunSummary& r = runs_[static_cast<size_t>(row)];
    if (Result<ProfileStore> store = ProfileStore::open(path_.toStdString()); store) {
      if (Result<std::vector<StepRecord>> s = store->get_steps(r.id); s) steps = std::move(*s);
    }
    title = steps.empty() ? tr("Run %1 (%2): no steps recorded").arg(r.id).arg(QString::fromStdString(r.model))
                          : tr("Loss per step of run %1 (%2)").arg(r.id).arg(QString::fromStdString(r.model));
  }
  set_title(loss_chart_, title);
  double lo = 1e300, hi = -1e300, last = 1;
  for (const StepRecord& s : steps) {
    if (!std::isfinite(s.loss)) continue;
    lo = std::min(lo, s.loss);
    hi = std::max(hi, s.loss);
    last = std::max(last, static_cast<double>(s.step));
  }
  if (lo > hi) lo = 0, hi = 1;
  const double pad = std::max(1e-3, (hi - lo) * 0.08);
  loss_chart_->addAxis(make_value_axis(tr("step"), 0, last, QStringLiteral("%.0f")), Qt::AlignBottom);
  loss_chart_->addAxis(make_value_axis(tr("loss (nats/token)"), std::max(0.0, lo - pad), hi + pad, QStringLiteral("%.2f")), Qt::AlignLeft);
  auto* line = new QLineSeries;
  line->setName(tr("training loss"));
  line->setPen(QPen(palette_color(0), 2));
  for (const StepRecord& s : steps)
    if (std::isfinite(s.loss)) line->append(static_cast<double>(s.step), s.loss);
  attach(loss_chart_, line);
}

int ProfilesTab::memory_points() const {
  int n = 0;
  for (QAbstractSeries* s : memory_chart_->series())
    if (auto* sc = qobject_cast<QScatterSeries*>(s)) n += sc->count();
  return n;
}

int ProfilesTab::time_points() const {
  int n = 0;
  for (QAbstractSeries* s : time_chart_->series())
    if (auto* sc = qobject_cast<QScatterSeries*>(s)) n += sc->count();
  return n;
}

int ProfilesTab::loss_points() const {
  int n = 0;
  for (QAbstractSeries* s : loss_chart_->series())
    if (auto* l = qobject_cast<QLineSeries*>(s)) n += l->count();
  return n;
}

}  // namespace llmplan::gui
