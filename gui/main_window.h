// The main window: the sweep form on the left; tabs for the plans (table + scatter), the
// selected plan (memory and time breakdowns, explanation), its timeline, the profiles and
// Execute. It owns the one PlanTableModel, its filter proxy and the shared selection,
// and wires them; the work is in the widgets and the planner.
//
// Thread-safety: GUI thread only. The sweep runs on SweepRunner's thread.
#pragma once

#include <optional>

#include <QMainWindow>
#include <memory>

#include "gui/app_settings.h"
#include "gui/plan_details.h"
#include "planner/search/fit_advice.h"
#include "planner/io/presets.h"

class QLabel;
class QSettings;
class QTabWidget;
class QTableView;
class QLineEdit;
class QCheckBox;

namespace llmplan::gui {

class ExecutePanel;
class BudgetPanel;
class ExplainPanel;
class MemoryChart;
class PlanFilterProxy;
class PlanTableModel;
class ProfilesTab;
class ScatterChart;
class SweepForm;
class SweepRunner;
class TimeChart;
class TimelinePanel;

// "llmplan 0.1.0, built with <compiler> (<build type>), Qt <built> (running <run>)":
// About and llmplan-gui --version.
QString build_description();

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  enum Tab { kPlansTab, kSelectedTab, kTimelineTab, kProfilesTab, kExecuteTab };

  // `presets` and `settings` must outlive the window.
  MainWindow(const PresetRegistry& presets, QSettings* settings, QWidget* parent = nullptr);
  ~MainWindow() override;

  // Validates the form and starts the sweep; false (message shown) on bad input or while
  // a sweep runs.
  bool start_sweep();
  // File menu actions; false with the message in the status bar on error.
  // A plan JSON or a framework's launch configuration (llmplan import's formats).
  bool open_plan(const QString& path);
  bool save_plan(const QString& path);
  // The selected plan as `format`'s launch files (llmplan export --to format) in `dir`.
  bool export_launch(const QString& format, const QString& dir);
  bool export_csv(const QString& path);
  QStringList export_charts(const QString& dir);
  // PNGs of the whole window on each tab, for the README ("gui-plans.png", ...).
  QStringList save_screenshots(const QString& dir);
  void set_database(const QString& path);  // also stored in the settings
  void set_llmplan_path(const QString& path);

  // Selects model row `source_row` in the table (and so in the charts); false when the
  // filter hides it.
  bool select_source_row(int source_row);
  int selected_source_row() const { return selected_; }
  const PlanDetails* selected_details() const { return details_.get(); }

  SweepForm* form() const { return form_; }
  PlanTableModel* plan_model() const { return model_; }
  PlanFilterProxy* proxy() const { return proxy_; }
  QTableView* table() const { return table_; }
  QLineEdit* filter_edit() const { return filter_; }
  ScatterChart* scatter() const { return scatter_; }
  MemoryChart* memory_chart() const { return memory_; }
  TimeChart* time_chart() const { return time_; }
  ExplainPanel* explain() const { return explain_; }
  BudgetPanel* budget() const { return budget_; }
  QLabel* stale_banner() const { return stale_banner_; }
  bool results_greyed() const;
  const FitAdvice* fit_advice() const { return fit_advice_ ? &*fit_advice_ : nullptr; }
  TimelinePanel* timeline() const { return timeline_; }
  ProfilesTab* profiles() const { return profiles_; }
  ExecutePanel* execute() const { return execute_; }
  SweepRunner* runner() const { return runner_; }
  QTabWidget* tabs() const { return tabs_; }
  QString summary_text() const;

 signals:
  // After every sweep: ok = false when cancelled.
  void sweep_done(bool ok);

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  QWidget* build_plans_tab();
  QWidget* build_selected_tab();
  void build_menus();
  void on_sweep_finished(bool cancelled);
  void on_current_changed(const QModelIndex& current);
  void show_details(int source_row);
  void schedule_scatter_rebuild();
  void update_stale_banner();
  void message(const QString& text);

  const PresetRegistry& presets_;
  QSettings* settings_;
  AppSettings app_settings_;
  SweepForm* form_;
  PlanTableModel* model_;
  PlanFilterProxy* proxy_;
  SweepRunner* runner_;
  QTableView* table_ = nullptr;
  QLineEdit* filter_ = nullptr;
  QCheckBox* fits_only_ = nullptr;
  QLabel* filter_status_ = nullptr;
  ScatterChart* scatter_ = nullptr;
  MemoryChart* memory_ = nullptr;
  TimeChart* time_ = nullptr;
  ExplainPanel* explain_ = nullptr;
  BudgetPanel* budget_ = nullptr;
  std::optional<FitAdvice> fit_advice_;  // when the last sweep found no plan
  TimelinePanel* timeline_ = nullptr;
  ProfilesTab* profiles_ = nullptr;
  ExecutePanel* execute_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QLabel* selected_label_ = nullptr;
  // Shown when the form's inputs differ from those of the results on screen.
  QLabel* stale_banner_ = nullptr;
  QString shown_inputs_;           // the command line of the results on screen ("" = none)
  QString running_inputs_;         // the command line of the sweep running or last run
  QLabel* summary_ = nullptr;
  std::unique_ptr<PlanDetails> details_;
  int selected_ = -1;
  bool scatter_pending_ = false;
};

}  // namespace llmplan::gui
