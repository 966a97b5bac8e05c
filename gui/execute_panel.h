// Runs `llmplan execute <plan.json>` on the selected plan as a child process (QProcess):
// the plan file is written to a temporary folder, the profile database is passed as
// $LLMPLAN_DB, stdout and stderr stream into the log (unwrapped, so tables stay tables),
// the steps fill a progress bar, Stop sends SIGINT (the run is recorded as stopped), and
// finished() tells the main window to reload the Profiles tab. By default the run is
// scaled down to finish in seconds (2 layers, 128 tokens, one micro-batch, 1 + 3 steps),
// as the panel states; the backend is CPU, or CUDA in a CUDA build (one process:
// --no-launch, never the plan's ranks under mpirun).
//
// Thread-safety: GUI thread only.
#pragma once

#include <QProcess>
#include <QTemporaryDir>
#include <QWidget>
#include <memory>

#include "gui/plan_details.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QSpinBox;
class QPlainTextEdit;
class QPushButton;

namespace llmplan::gui {

class ExecutePanel : public QWidget {
  Q_OBJECT

 public:
  explicit ExecutePanel(QWidget* parent = nullptr);
  ~ExecutePanel() override;  // stops a running child

  // The plan to run (nullptr: none selected).
  void set_plan(const PlanDetails* d);
  void set_program(const QString& llmplan_path) { program_ = llmplan_path; update_state(); }
  void set_database(const QString& db_path) { database_ = db_path; }
  QString program() const { return program_; }

  // Starts the child; false (with the reason in the log) when it cannot.
  bool start();
  void stop();
  bool running() const { return process_.state() != QProcess::NotRunning; }
  QString log_text() const;
  QLineEdit* extra_args() const { return extra_; }
  QComboBox* backend_combo() const { return backend_; }
  QCheckBox* scaled_down() const { return scaled_; }
  QProgressBar* progress_bar() const { return progress_; }
  // The arguments after the plan file: the extra ones, then the panel's choices for every
  // flag they do not give.
  QStringList run_arguments() const;
  QPushButton* run_button() const { return run_; }
  QPushButton* stop_button() const { return stop_; }

 signals:
  void finished(int exit_code, bool crashed);

 private:
  void append(const QString& text);
  void update_state();
  void on_finished(int code, QProcess::ExitStatus status);

  QProcess process_;
  std::unique_ptr<QTemporaryDir> tmp_;
  std::unique_ptr<PlanDetails> plan_;
  QString program_, database_;
  int runs_ = 0;
  QLabel* summary_;
  QLineEdit* extra_;
  QComboBox* backend_;
  QCheckBox* scaled_;
  QSpinBox *layers_, *seq_, *steps_;
  QProgressBar* progress_;
  QLabel* command_;
  QPushButton* run_;
  QPushButton* stop_;
  QLabel* status_;
  QPlainTextEdit* preview_;
  QPlainTextEdit* log_;
};

}  // namespace llmplan::gui
