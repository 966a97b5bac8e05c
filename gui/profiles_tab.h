// The runs of the profile database (SQLite, profiles/profile_store.h): a table of runs,
// predicted against measured peak memory and step time with the y = x line, and the
// per-step loss curve of the selected run. The database is opened for each reload and
// closed again, so `llmplan execute` can write to it meanwhile.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>
#include <vector>

#include "profiles/profile_store.h"

class QChart;
class QChartView;
class QLabel;
class QLineEdit;
class QScatterSeries;
class QLineSeries;
class QTableWidget;

namespace llmplan::gui {

class ProfilesTab : public QWidget {
  Q_OBJECT

 public:
  explicit ProfilesTab(QWidget* parent = nullptr);

  // Opens `path` (created when missing) and lists its runs; false with a message shown
  // in the tab when it cannot be read.
  bool set_database(const QString& path);
  QString database() const { return path_; }
  bool reload();

  int run_count() const { return static_cast<int>(runs_.size()); }
  const std::vector<RunSummary>& runs() const { return runs_; }
  void select_run(int row);
  QTableWidget* table() const { return table_; }
  QChart* memory_chart() const { return memory_chart_; }
  QChart* time_chart() const { return time_chart_; }
  QChart* loss_chart() const { return loss_chart_; }
  QString message() const;
  // Points in the predicted-vs-measured charts and in the loss curve (for tests).
  int memory_points() const;
  int time_points() const;
  int loss_points() const;

 signals:
  // The user picked another database file in the tab.
  void database_chosen(const QString& path);

 private:
  void browse();
  void rebuild_comparisons();
  void show_loss(int row);

  QString path_;
  std::vector<RunSummary> runs_;
  QLineEdit* path_edit_;
  QLabel* message_;
  QTableWidget* table_;
  QChart* memory_chart_;
  QChart* time_chart_;
  QChart* loss_chart_;
  QChartView* memory_view_;
  QChartView* time_view_;
  QChartView* loss_view_;
};

}  // namespace llmplan::gui
