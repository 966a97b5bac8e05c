// The inputs of a sweep: model (preset list with search, or a model JSON / HF
// config.json), GPU and node presets, GPUs, sequence length, global batch, mode (with
// LoRA rank and targets), precision and AMP level, constraints (max TP, memory headroom,
// the training framework),
// objective and how many plans to rank; the Run / Cancel buttons, the progress bar, an
// error line, and the equivalent `llmplan sweep` command.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QWidget>

#include "gui/sweep_request.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace llmplan::gui {

class SweepForm : public QWidget {
  Q_OBJECT

 public:
  SweepForm(const PresetRegistry& presets, QWidget* parent = nullptr);

  SweepInputs inputs() const;
  void set_inputs(const SweepInputs& in);

  void set_running(bool running);
  void set_progress(qint64 done, qint64 total);
  void finish_progress();
  // Shows `message` in the form's error line (empty hides it).
  void show_error(const QString& message);
  QString error_text() const;

  // For tests and the main window.
  QComboBox* model_combo() const { return model_; }
  QComboBox* framework_combo() const { return framework_; }
  QSpinBox* gpus_spin() const { return gpus_; }
  QPushButton* run_button() const { return run_; }
  QPushButton* cancel_button() const { return cancel_; }
  QProgressBar* progress_bar() const { return progress_; }
  QLabel* error_label() const { return error_; }
  QString cli_line() const;

 signals:
  void run_requested();
  void cancel_requested();
  // Any input changed (the command line it stands for is `cli_line()`).
  void inputs_changed();

 private:
  void browse_model();
  void update_enabled();
  void update_cli_line();

  const PresetRegistry& presets_;
  QComboBox* model_;
  QComboBox* gpu_;
  QComboBox* cluster_;
  QSpinBox* gpus_;
  QSpinBox* seq_;
  QSpinBox* batch_;
  QComboBox* mode_;
  QSpinBox* lora_rank_;
  std::vector<QCheckBox*> lora_targets_;
  QComboBox* precision_;
  QComboBox* amp_;
  QSpinBox* max_tp_;
  QComboBox* schedules_;
  QDoubleSpinBox* headroom_;
  QComboBox* framework_;
  QComboBox* objective_;
  QSpinBox* top_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* error_;
  QLabel* cli_line_;
};

}  // namespace llmplan::gui
