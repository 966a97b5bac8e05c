#include "gui/main_window.h"

#include <QAction>
#include <QInputDialog>
#include <QApplication>
#include <QChartView>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QGraphicsOpacityEffect>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include "gui/execute_panel.h"
#include "launch/launch.h"
#include "gui/budget_panel.h"
#include "gui/explain_panel.h"
#include "gui/memory_chart.h"
#include "gui/plan_table_model.h"
#include "gui/profiles_tab.h"
#include "gui/scatter_chart.h"
#include "gui/sweep_form.h"
#include "gui/sweep_runner.h"
#include "gui/time_chart.h"
#include "gui/timeline_view.h"
#include "planner/spec/units.h"

namespace llmplan::gui {

MainWindow::MainWindow(const PresetRegistry& presets, QSettings* settings, QWidget* parent)
    : QMainWindow(parent), presets_(presets), settings_(settings) {
  setWindowTitle(tr("llmplan — plan LLM training"));
  app_settings_ = load_settings(*settings_);
  model_ = new PlanTableModel(this);
  proxy_ = new PlanFilterProxy(this);
  proxy_->setSourceModel(model_);
  runner_ = new SweepRunner(this);

  form_ = new SweepForm(presets_);
  auto* form_scroll = new QScrollArea;
  form_scroll->setWidget(form_);
  form_scroll->setWidgetResizable(true);
  form_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  form_scroll->setMinimumWidth(form_->sizeHint().width() + 24);

  tabs_ = new QTabWidget;
  tabs_->addTab(build_plans_tab(), tr("Plans"));
  tabs_->addTab(build_selected_tab(), tr("Selected plan"));
  timeline_ = new TimelinePanel;
  tabs_->addTab(timeline_, tr("Timeline"));
  profiles_ = new ProfilesTab;
  tabs_->addTab(profiles_, tr("Profiles"));
  execute_ = new ExecutePanel;
  tabs_->addTab(execute_, tr("Execute"));

  auto* right = new QWidget;
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  selected_label_ = new QLabel(tr("No plan selected: run a sweep or open a plan file."));
  selected_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  stale_banner_ = new QLabel;
  stale_banner_->setWordWrap(true);
  stale_banner_->setStyleSheet(QStringLiteral("background:#fff3cd; color:#664d03; border:1px solid #ffda6a; padding:4px;"));
  stale_banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  stale_banner_->hide();
  rl->addWidget(stale_banner_);
  rl->addWidget(selected_label_);
  rl->addWidget(tabs_, 1);

  auto* split = new QSplitter;
  split->addWidget(form_scroll);
  split->addWidget(right);
  split->setStretchFactor(1, 1);
  split->setCollapsible(1, false);
  setCentralWidget(split);

  summary_ = new QLabel;
  statusBar()->addWidget(summary_, 1);
  build_menus();

  connect(form_, &SweepForm::run_requested, this, &MainWindow::start_sweep);
  connect(form_, &SweepForm::inputs_changed, this, &MainWindow::update_stale_banner);
  connect(form_, &SweepForm::cancel_requested, runner_, &SweepRunner::cancel);
  connect(runner_, &SweepRunner::progress, form_, &SweepForm::set_progress);
  connect(runner_, &SweepRunner::finished, this, &MainWindow::on_sweep_finished);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& cur) { on_current_changed(cur); });
  connect(scatter_, &ScatterChart::plan_clicked, this, [this](int row) { select_source_row(row); });
  connect(proxy_, &QAbstractItemModel::modelReset, this, &MainWindow::schedule_scatter_rebuild);
  connect(proxy_, &QAbstractItemModel::layoutChanged, this, &MainWindow::schedule_scatter_rebuild);
  connect(proxy_, &QAbstractItemModel::rowsInserted, this, &MainWindow::schedule_scatter_rebuild);
  connect(proxy_, &QAbstractItemModel::rowsRemoved, this, &MainWindow::schedule_scatter_rebuild);
  connect(profiles_, &ProfilesTab::database_chosen, this, &MainWindow::set_database);
  connect(execute_, &ExecutePanel::finished, this, [this](int, bool) { profiles_->reload(); });

  execute_->set_program(app_settings_.llmplan);
  execute_->set_database(app_settings_.database);
  profiles_->set_database(app_settings_.database);
  resize(1440, 900);
  if (settings_->contains("window/geometry")) restoreGeometry(settings_->value("window/geometry").toByteArray());
}

MainWindow::~MainWindow() = default;

QWidget* MainWindow::build_plans_tab() {
  auto* page = new QWidget;
  auto* layout = new QVBoxLayout(page);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Filter:")));
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("words and comparisons, e.g.  tp2 zero1 selective peak<60 tps>40000 pareto"));
  filter_->setClearButtonEnabled(true);
  bar->addWidget(filter_, 1);
  fits_only_ = new QCheckBox(tr("fitting only"));
  bar->addWidget(fits_only_);
  filter_status_ = new QLabel;
  bar->addWidget(filter_status_);
  layout->addLayout(bar);

  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(PlanTableModel::kRank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(22);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setAlternatingRowColors(true);
  scatter_ = new ScatterChart(model_, proxy_);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(scatter_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  layout->addWidget(split, 1);

  auto update_filter_status = [this] {
    filter_status_->setText(tr("%1 of %2 plans").arg(proxy_->rowCount()).arg(model_->plan_count()));
  };
  connect(filter_, &QLineEdit::textChanged, this, [this, update_filter_status](const QString& q) {
    const QString err = proxy_->set_query(q);
    filter_->setStyleSheet(err.isEmpty() ? QString() : QStringLiteral("QLineEdit { background: #fdecea; }"));
    filter_->setToolTip(err);
    update_filter_status();
  });
  connect(fits_only_, &QCheckBox::toggled, this, [this, update_filter_status](bool on) {
    proxy_->set_fits_only(on);
    update_filter_status();
  });
  connect(model_, &QAbstractItemModel::modelReset, this, update_filter_status);
  update_filter_status();
  return page;
}

QWidget* MainWindow::build_selected_tab() {
  memory_ = new MemoryChart;
  time_ = new TimeChart;
  explain_ = new ExplainPanel;
  auto* charts = new QSplitter(Qt::Vertical);
  charts->addWidget(memory_);
  charts->addWidget(time_);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);
  budget_ = new BudgetPanel(presets_);
  auto* side = new QSplitter(Qt::Vertical);
  side->addWidget(explain_);
  side->addWidget(budget_);
  side->setStretchFactor(0, 3);
  side->setStretchFactor(1, 2);
  auto* split = new QSplitter;
  split->addWidget(charts);
  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  return split;
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open plan or launch configuration…"), this, [this] {
    const QString p = QFileDialog::getOpenFileName(
        this, tr("Open a plan JSON or a framework's launch configuration"), QString(),
        tr("Plans and configurations (*.json *.sh *.txt *.toml *.yaml *.yml);;Plan JSON (*.json);;Megatron / NeMo / DeepSpeed scripts (*.sh *.txt);;"
           "torchtitan TOML (*.toml);;MindFormers YAML (*.yaml *.yml);;All files (*)"));
    if (!p.isEmpty()) open_plan(p);
  });
  open->setShortcut(QKeySequence::Open);
  QAction* save = file->addAction(tr("&Save selected plan as JSON…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("best.json"), tr("Plan JSON (*.json)"));
    if (!p.isEmpty()) save_plan(p);
  });
  save->setShortcut(QKeySequence::Save);
  file->addAction(tr("E&xport selected plan for a framework…"), this, [this] {
    bool ok = false;
    QStringList formats;
    for (const char* n : {"megatron", "nemo", "deepspeed", "torchtitan", "mindformers"}) formats << QString::fromLatin1(n);
    const QString format = QInputDialog::getItem(this, tr("Export plan"), tr("Framework format:"), formats, 0, false, &ok);
    if (!ok) return;
    const QString d = QFileDialog::getExistingDirectory(this, tr("Folder for the %1 launch files").arg(format));
    if (!d.isEmpty() && !export_launch(format, d)) QMessageBox::warning(this, tr("Cannot export"), form_->error_text());
  });
  file->addAction(tr("Export table as &CSV…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export table"), QStringLiteral("plans.csv"), tr("CSV (*.csv)"));
    if (!p.isEmpty()) export_csv(p);
  });
  file->addAction(tr("Export charts as &PNG…"), this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Folder for the chart PNGs"));
    if (!d.isEmpty()) export_charts(d);
  });
  file->addSeparator();
  file->addAction(tr("Se&ttings…"), this, [this] {
    AppSettings a = app_settings_;
    if (!edit_settings(this, &a)) return;
    set_llmplan_path(a.llmplan);
    set_database(a.database);
  });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About llmplan"), this, [this] {
    QMessageBox::about(this, tr("About llmplan"),
                       tr("<p><b>llmplan-gui %1</b>: plan the training and fine-tuning of large language models on limited hardware.</p>"
                          "<p>Same planner library as the <code>llmplan</code> command line; the form's equivalent command is shown "
                          "under the Run button.</p><p><small>%2</small></p>")
                           .arg(QStringLiteral(LLMPLAN_VERSION), build_description().toHtmlEscaped()));
  });
}

QString build_description() {
  return QStringLiteral("llmplan %1, built with %2 (%3), Qt %4 (running %5)")
      .arg(QStringLiteral(LLMPLAN_VERSION), QStringLiteral(LLMPLAN_COMPILER), QStringLiteral(LLMPLAN_BUILD_TYPE), QStringLiteral(QT_VERSION_STR),
           QString::fromLatin1(qVersion()));
}

void MainWindow::message(const QString& text) { statusBar()->showMessage(text, 15000); }

QString MainWindow::summary_text() const { return summary_->text(); }

bool MainWindow::start_sweep() {
  if (runner_->running()) return false;
  const SweepInputs in = form_->inputs();
  Result<SweepRequest> req = make_sweep_request(in, presets_);
  if (!req) {
    const QString msg = QString::fromStdString(req.status().message());
    form_->show_error(msg);
    message(tr("Sweep not started: %1").arg(msg));
    return false;
  }
  form_->show_error(QString());
  form_->set_running(true);
  running_inputs_ = form_->cli_line();
  // The previous results go at once: nothing on screen belongs to other inputs.
  selected_ = -1;
  details_.reset();
  fit_advice_.reset();
  model_->clear();
  memory_->clear();
  time_->clear();
  timeline_->clear();
  explain_->clear_plan();
  budget_->clear_plan();
  execute_->set_plan(nullptr);
  scatter_->rebuild();
  shown_inputs_.clear();
  update_stale_banner();
  selected_label_->setText(tr("Sweeping: %1").arg(form_->cli_line()));
  summary_->setText(tr("Sweeping %1 on %2 × %3…").arg(QString::fromStdString(req->base.model.name)).arg(req->base.gpus).arg(
      QString::fromStdString(req->base.cluster.gpu.name)));
  runner_->start(*req);
  return true;
}

void MainWindow::on_sweep_finished(bool cancelled) {
  form_->set_running(false);
  if (cancelled) {
    form_->set_progress(0, 1);
    summary_->setText(tr("Sweep cancelled: no results shown (Run starts it again)."));
    emit sweep_done(false);
    return;
  }
  form_->finish_progress();
  const SweepRequest& req = runner_->request();
  const SweepResult& r = *runner_->result();
  SweepContext ctx{req.base,           req.headroom_bytes, req.options.objective, req.options.also_fit, req.options.memory,
                   req.options.efficiency, req.framework,    req.options.mark_frameworks};
  selected_ = -1;
  details_.reset();
  fit_advice_.reset();
  model_->set_sweep(ctx, r);
  shown_inputs_ = running_inputs_;
  update_stale_banner();
  table_->sortByColumn(PlanTableModel::kRank, Qt::AscendingOrder);
  scatter_->rebuild();  // now, not on the next event-loop turn: the selection below uses it

  QString text = tr("%1 on %2 × %3: %4 plans enumerated, %5 costed, %6 fit (%7 s); ranked by %8")
                     .arg(QString::fromStdString(req.base.model.name))
                     .arg(req.base.gpus)
                     .arg(QString::fromStdString(req.base.cluster.gpu.name))
                     .arg(r.enumerated)
                     .arg(r.evaluated)
                     .arg(r.fitting)
                     .arg(r.seconds, 0, 'f', 2)
                     .arg(to_string(req.options.objective));
  QString rejected = tr("Rejected:");
  for (int i = 1; i < static_cast<int>(RejectReason::kCount); ++i)
    if (r.rejected[static_cast<size_t>(i)] > 0) rejected += QStringLiteral("\n%1  %2").arg(r.rejected[static_cast<size_t>(i)], 8).arg(describe(static_cast<RejectReason>(i)));
  text += tr("; for: %1").arg(shown_inputs_);
  summary_->setText(text);
  summary_->setToolTip(rejected);
  if (r.top.empty()) {
    const double budget = model_->budget_bytes();
    QString msg = tr("No plan fits in %1 GiB per GPU").arg(budget / kGiB, 0, 'f', 2);
    if (r.has_closest && r.closest.reason == RejectReason::host_does_not_fit)
      msg += tr(" with what it offloads in host memory; the closest, %1, fits the GPU (%2 GiB) but needs %3 GiB of host memory per node. "
                "See its explanation for the cheapest fixes.")
                 .arg(QString::fromStdString(plan_summary(r.closest.plan)))
                 .arg(r.closest.peak_bytes / kGiB, 0, 'f', 2)
                 .arg(r.closest.host_bytes_per_node / kGiB, 0, 'f', 2);
    else if (r.has_closest)
      msg += tr("; the closest, %1, needs %2 GiB (short by %3 GiB). See its explanation for the cheapest fixes.")
                 .arg(QString::fromStdString(plan_summary(r.closest.plan)))
                 .arg(r.closest.peak_bytes / kGiB, 0, 'f', 2)
                 .arg((r.closest.peak_bytes - budget) / kGiB, 0, 'f', 2);
    else
      msg += tr("; no plan passed the structural checks (see the status bar's tooltip).");
    // What would make a plan fit, each change found by a sweep (a few seconds at most).
    FitAdviceOptions fo;
    fo.node_gpus = presets_.node_gpus(req.base.cluster);
    fit_advice_ = advise_fit(req.base.model, req.base.cluster, req.base.job, req.base.gpus, req.space, req.options, fo);
    if (!fit_advice_->changes.empty()) {
      msg += tr(" What would make one fit:");
      for (const JobChange& c : fit_advice_->changes)
        msg += tr(" %1 (peak %2 GiB);").arg(QString::fromStdString(c.description)).arg(c.peak_bytes / kGiB, 0, 'f', 1);
    }
    form_->show_error(msg);
  }
  // Select the best plan (or, when none fits, the closest one: rows are by tokens/s).
  int pick = -1;
  for (int i = 0; i < model_->plan_count() && pick < 0; ++i)
    if (model_->plan_row(i).rank == 1) pick = i;
  if (pick < 0 && r.has_closest) {
    double best = 1e300;
    for (int i = 0; i < model_->plan_count(); ++i)
      if (model_->plan_row(i).result.peak_bytes < best) best = model_->plan_row(i).result.peak_bytes, pick = i;
  }
  if (pick >= 0) select_source_row(pick);
  emit sweep_done(true);
}

bool MainWindow::select_source_row(int source_row) {
  if (source_row < 0 || source_row >= model_->plan_count()) return false;
  const QModelIndex idx = proxy_->mapFromSource(model_->index(source_row, 0));
  if (!idx.isValid()) {
    message(tr("That plan is hidden by the filter."));
    return false;
  }
  table_->selectionModel()->setCurrentIndex(idx, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  table_->scrollTo(idx);
  return true;
}

void MainWindow::on_current_changed(const QModelIndex& current) {
  if (!current.isValid()) return;
  show_details(proxy_->mapToSource(current).row());
}

void MainWindow::show_details(int source_row) {
  if (source_row < 0 || source_row >= model_->plan_count()) return;
  selected_ = source_row;
  const PlanTableModel::Row& row = model_->plan_row(source_row);
  const SweepContext& ctx = model_->context();
  details_ = std::make_unique<PlanDetails>(compute_plan_details(ctx, row.result));
  memory_->show_plan(*details_, ctx.headroom_bytes);
  time_->show_plan(*details_);
  explain_->show_plan(*details_, fit_advice());
  budget_->show_plan(*details_);
  const QString summary = QString::fromStdString(plan_summary(row.result.plan));
  timeline_->set_timeline(details_->timeline, QString::fromStdString(timeline_title(summary.toStdString(), details_->timeline, details_->time.total)));
  execute_->set_plan(details_.get());
  scatter_->set_selected(source_row);
  const QLocale loc;
  selected_label_->setText(tr("<b>Selected:</b> %1%2 — %3 %4 — peak %5 GiB, %6 tokens/s, MFU %7% — %8")
                               .arg(row.rank > 0 ? tr("rank %1, ").arg(row.rank) : QString(), summary)
                               .arg(to_string(row.result.precision), to_string(row.result.amp))
                               .arg(row.result.peak_bytes / kGiB, 0, 'f', 2)
                               .arg(loc.toString(row.result.tokens_per_s, 'f', 0))
                               .arg(100 * row.result.mfu, 0, 'f', 1)
                               .arg(row.fits() ? tr("fits") : tr("<span style='color:#b00020'>does not fit</span>")));
}

bool MainWindow::results_greyed() const { return tabs_->graphicsEffect() != nullptr; }

void MainWindow::update_stale_banner() {
  const bool stale = !shown_inputs_.isEmpty() && form_->cli_line() != shown_inputs_;
  if (stale) {
    stale_banner_->setText(tr("<b>Inputs changed: run the sweep.</b> The results shown are for <code>%1</code>").arg(shown_inputs_.toHtmlEscaped()));
    stale_banner_->show();
    if (!tabs_->graphicsEffect()) {
      auto* grey = new QGraphicsOpacityEffect(tabs_);
      grey->setOpacity(0.35);
      tabs_->setGraphicsEffect(grey);  // the widget owns it
    }
  } else {
    stale_banner_->hide();
    tabs_->setGraphicsEffect(nullptr);
  }
}

void MainWindow::schedule_scatter_rebuild() {
  if (scatter_pending_) return;
  scatter_pending_ = true;
  QTimer::singleShot(0, this, [this] {
    scatter_pending_ = false;
    scatter_->rebuild();
  });
}

bool MainWindow::open_plan(const QString& path) {
  // A plan JSON, or a framework's launch configuration read as `llmplan import` reads it
  // (its GPU is the format's usual one; its framework's rules and stack apply).
  std::shared_ptr<const FrameworkSpec> framework;
  QString imported_note;
  Result<PlanFile> f = [&]() -> Result<PlanFile> {
    if (!is_launch_config_path(path.toStdString())) return read_plan_file(path.toStdString());
    Result<std::vector<LaunchFile>> files = read_launch_files(path.toStdString());
    if (!files) return files.status();
    Result<LaunchFormat> format = detect_format(*files, path.toStdString());
    if (!format) return format.status();
    ImportOptions opt;
    opt.presets = &presets_;
    Result<ImportedConfig> imp = import_files(*files, *format, opt, path.toStdString());
    if (!imp) return imp.status();
    const std::vector<FrameworkSpec> all = presets_.frameworks();
    if (const FrameworkSpec* fw = framework_for_format(all, *format)) framework = std::make_shared<const FrameworkSpec>(*fw);
    imported_note = tr(" (a %1 configuration; %2 keys not used by llmplan)").arg(to_string(*format)).arg(imp->unknown_keys.size());
    return imp->file;
  }();
  if (!f) {
    const QString msg = QString::fromStdString(f.status().message());
    form_->show_error(msg);
    message(tr("Cannot open the plan: %1").arg(msg));
    return false;
  }
  const double headroom = form_->inputs().headroom_gib * kGiB;
  SweepContext ctx{*f, headroom, Objective::tokens_per_s, {}, {}, {}, framework, presets_.frameworks()};
  if (framework && !framework->stack.empty())
    if (Result<StackProfile> st = presets_.stack(framework->stack)) ctx.memory = stack_memory_options(*st, ctx.memory), ctx.efficiency = st->efficiency;
  shown_inputs_.clear();  // a plan file's, not the form's
  update_stale_banner();
  selected_ = -1;
  details_.reset();
  PlanResult single = evaluate_plan(*f, headroom, ctx.memory, ctx.efficiency);
  single.frameworks = frameworks_running(ctx.frameworks, f->model, f->job, f->plan);
  model_->set_single(ctx, single);
  scatter_->rebuild();
  form_->show_error(QString());
  summary_->setText(tr("Opened %1%5: %2 on %3 × %4").arg(QDir::toNativeSeparators(path), QString::fromStdString(f->model.name)).arg(f->gpus).arg(
      QString::fromStdString(f->cluster.gpu.name), imported_note));
  select_source_row(0);
  tabs_->setCurrentIndex(kSelectedTab);
  return true;
}

bool MainWindow::save_plan(const QString& path) {
  if (!details_) {
    message(tr("Select a plan first."));
    return false;
  }
  if (Status st = write_json_file(path.toStdString(), plan_file_to_json(details_->file, details_->memory, details_->time)); !st) {
    message(tr("Cannot save: %1").arg(QString::fromStdString(st.message())));
    return false;
  }
  message(tr("Saved %1 (run it with: llmplan execute %1)").arg(path));
  return true;
}

bool MainWindow::export_launch(const QString& format, const QString& dir) {
  if (!details_) {
    message(tr("Select a plan first."));
    return false;
  }
  LaunchFormat to{};
  if (!parse_enum(format.toStdString(), &to)) {
    message(tr("Unknown format %1 (expected one of %2)").arg(format, QString::fromLatin1(kLaunchFormatNames)));
    return false;
  }
  const std::vector<FrameworkSpec> frameworks = presets_.frameworks();
  ExportOptions opt;
  opt.framework = framework_for_format(frameworks, to);
  Result<ExportResult> r = export_plan(details_->file, to, opt);
  if (!r) {
    const QString msg = QString::fromStdString(r.status().message());
    message(tr("Cannot export: %1").arg(msg));
    form_->show_error(msg);
    return false;
  }
  if (Status st = write_launch_files(dir.toStdString(), r->files); !st) {
    message(tr("Cannot export: %1").arg(QString::fromStdString(st.message())));
    return false;
  }
  QStringList names;
  for (const LaunchFile& f : r->files) names << QString::fromStdString(f.name);
  message(tr("Wrote %1 in %2 (%3 notes)").arg(names.join(QStringLiteral(", ")), QDir::toNativeSeparators(dir)).arg(r->notes.size()));
  return true;
}

bool MainWindow::export_csv(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    message(tr("Cannot write %1: %2").arg(path, f.errorString()));
    return false;
  }
  f.write(table_to_csv(*proxy_).toUtf8());
  message(tr("Wrote %1 plans to %2").arg(proxy_->rowCount()).arg(path));
  return true;
}

QStringList MainWindow::export_charts(const QString& dir) {
  QStringList written;
  const std::pair<QWidget*, const char*> views[] = {{scatter_->view(), "memory-vs-throughput.png"},
                                                    {memory_->view(), "memory-breakdown.png"},
                                                    {time_->view(), "step-time.png"},
                                                    {timeline_->view(), "timeline.png"},
                                                    {profiles_, "profiles.png"}};
  for (const auto& [w, name] : views) {
    const QString path = QDir(dir).filePath(name);
    if (w->grab().save(path)) written << path;
  }
  message(written.isEmpty() ? tr("Could not write PNGs to %1").arg(dir) : tr("Wrote %1 PNGs to %2").arg(written.size()).arg(dir));
  return written;
}

QStringList MainWindow::save_screenshots(const QString& dir) {
  static const char* kNames[] = {"gui-plans.png", "gui-selected-plan.png", "gui-timeline.png", "gui-profiles.png", "gui-execute.png"};
  QStringList written;
  const int keep = tabs_->currentIndex();
  for (int i = 0; i < tabs_->count() && i < 5; ++i) {
    tabs_->setCurrentIndex(i);
    QApplication::processEvents();
    const QString path = QDir(dir).filePath(kNames[i]);
    if (grab().save(path)) written << path;
  }
  tabs_->setCurrentIndex(keep);
  return written;
}

void MainWindow::set_database(const QString& path) {
  app_settings_.database = path;
  save_settings(*settings_, app_settings_);
  execute_->set_database(path);
  if (profiles_->database() != path) profiles_->set_database(path);
}

void MainWindow::set_llmplan_path(const QString& path) {
  app_settings_.llmplan = path;
  save_settings(*settings_, app_settings_);
  execute_->set_program(path);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  runner_->cancel();
  settings_->setValue("window/geometry", saveGeometry());
  e->accept();
}

}  // namespace llmplan::gui
