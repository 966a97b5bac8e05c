#include "gui/execute_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcessEnvironment>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>
#include <csignal>
#include <sys/types.h>

#include "planner/io/plan_file.h"

namespace llmplan::gui {

ExecutePanel::ExecutePanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  layout->addWidget(summary_);
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel(tr("Extra arguments:")));
  extra_ = new QLineEdit;
  extra_->setPlaceholderText(tr("e.g. --steps 20 (passed to llmplan execute after the plan file)"));
  row->addWidget(extra_, 1);
  run_ = new QPushButton(tr("Execute"));
  stop_ = new QPushButton(tr("Stop"));
  row->addWidget(run_);
  row->addWidget(stop_);
  layout->addLayout(row);
  auto* choices = new QHBoxLayout;
  choices->addWidget(new QLabel(tr("Backend:")));
  backend_ = new QComboBox;
  backend_->addItem(QStringLiteral("cpu"));
#if LLMPLAN_GUI_CUDA
  backend_->addItem(QStringLiteral("cuda"));
#endif
  backend_->setToolTip(tr("cpu: this machine's cores (BLAS); cuda: one GPU (a CUDA build)"));
  choices->addWidget(backend_);
  scaled_ = new QCheckBox(tr("scaled down:"));
  scaled_->setChecked(true);
  scaled_->setToolTip(tr("run a small model of the plan's shape so that it finishes in seconds; unchecked: the plan's full size"));
  choices->addWidget(scaled_);
  auto spin = [&](const QString& label, int lo, int hi, int value) {
    choices->addWidget(new QLabel(label));
    auto* sb = new QSpinBox;
    sb->setRange(lo, hi);
    sb->setValue(value);
    choices->addWidget(sb);
    return sb;
  };
  layers_ = spin(tr("layers"), 1, 1024, 2);
  seq_ = spin(tr("seq"), 16, 1 << 20, 128);
  steps_ = spin(tr("steps"), 1, 100000, 3);
  choices->addStretch(1);
  layout->addLayout(choices);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat(tr("step %v of %m"));
  layout->addWidget(progress_);
  command_ = new QLabel;
  command_->setWordWrap(true);
  command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  command_->setStyleSheet(QStringLiteral("color: #555"));
  layout->addWidget(command_);
  status_ = new QLabel;
  layout->addWidget(status_);
  const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  preview_ = new QPlainTextEdit;
  preview_->setReadOnly(true);
  preview_->setFont(mono);
  preview_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  log_ = new QPlainTextEdit;
  log_->setReadOnly(true);
  log_->setFont(mono);
  log_->setPlaceholderText(tr("The output of llmplan execute appears here while it runs; the new run then appears in the Profiles tab."));
  log_->setMaximumBlockCount(20000);
  log_->setLineWrapMode(QPlainTextEdit::NoWrap);  // tables stay tables
  auto boxed = [](const QString& title, QWidget* w) {
    auto* box = new QWidget;
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(0, 0, 0, 0);
    v->addWidget(new QLabel(title));
    v->addWidget(w, 1);
    return box;
  };
  auto* split = new QSplitter;
  split->addWidget(boxed(tr("Plan file passed to llmplan execute:"), preview_));
  split->addWidget(boxed(tr("Live log:"), log_));
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  layout->addWidget(split, 1);

  process_.setProcessChannelMode(QProcess::MergedChannels);
  connect(&process_, &QProcess::readyReadStandardOutput, this, [this] {
    const QString text = QString::fromLocal8Bit(process_.readAllStandardOutput());
    append(text);
    // "step   3/4 ..." lines (cli/cmd_execute.cpp) move the bar.
    static const QRegularExpression kStep(QStringLiteral("step\\s+(\\d+)/(\\d+)"));
    for (auto it = kStep.globalMatch(text); it.hasNext();) {
      const QRegularExpressionMatch m = it.next();
      progress_->setRange(0, m.captured(2).toInt());
      progress_->setValue(m.captured(1).toInt());
    }
  });
  connect(&process_, &QProcess::finished, this, &ExecutePanel::on_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) {
      append(tr("\n[could not start %1: %2]\n").arg(program_, process_.errorString()));
      update_state();
    }
  });
  connect(run_, &QPushButton::clicked, this, &ExecutePanel::start);
  connect(stop_, &QPushButton::clicked, this, &ExecutePanel::stop);
  connect(extra_, &QLineEdit::textChanged, this, &ExecutePanel::update_state);
  update_state();
}

ExecutePanel::~ExecutePanel() {
  if (running()) {
    process_.kill();
    process_.waitForFinished(2000);
  }
}

void ExecutePanel::set_plan(const PlanDetails* d) {
  plan_ = d ? std::make_unique<PlanDetails>(*d) : nullptr;
  preview_->setPlainText(plan_ ? QString::fromStdString(plan_file_to_json(plan_->file, plan_->memory, plan_->time).dump(2)) : QString());
  update_state();
}

QString ExecutePanel::log_text() const { return log_->toPlainText(); }

void ExecutePanel::append(const QString& text) {
  log_->moveCursor(QTextCursor::End);
  log_->insertPlainText(text);
  log_->moveCursor(QTextCursor::End);
}

void ExecutePanel::update_state() {
  const bool busy = running();
  if (plan_) {
    summary_->setText(tr("<b>Plan:</b> %1 — %2 on %3 × %4")
                          .arg(QString::fromStdString(plan_summary(plan_->file.plan)).toHtmlEscaped(),
                               QString::fromStdString(plan_->file.model.name).toHtmlEscaped())
                          .arg(plan_->file.gpus)
                          .arg(QString::fromStdString(plan_->file.cluster.gpu.name).toHtmlEscaped()));
  } else {
    summary_->setText(tr("<i>Select a plan in the Plans tab to execute it.</i>"));
  }
  command_->setText(tr("Runs: %1 execute <plan.json> %2   (LLMPLAN_DB=%3)").arg(program_, run_arguments().join(' '), database_));
  run_->setEnabled(plan_ != nullptr && !busy);
  stop_->setEnabled(busy);
}

bool ExecutePanel::start() {
  if (running() || !plan_) return false;
  if (program_.isEmpty() || !QFileInfo(program_).isExecutable()) {
    append(tr("[llmplan not found at '%1': build the CLI (build/cli/llmplan) or set its path in File > Settings]\n").arg(program_));
    return false;
  }
  if (!tmp_) tmp_ = std::make_unique<QTemporaryDir>();
  const QString plan_path = tmp_->filePath(QStringLiteral("plan-%1.json").arg(++runs_));
  const PlanFile& f = plan_->file;
  if (Status st = write_json_file(plan_path.toStdString(), plan_file_to_json(f, plan_->memory, plan_->time)); !st) {
    append(tr("[cannot write the plan file: %1]\n").arg(QString::fromStdString(st.message())));
    return false;
  }
  QStringList args = {QStringLiteral("execute"), plan_path};
  args += run_arguments();
  progress_->setRange(0, 1);
  progress_->setValue(0);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  if (!database_.isEmpty()) env.insert(QStringLiteral("LLMPLAN_DB"), database_);
  process_.setProcessEnvironment(env);
  log_->clear();
  append(QStringLiteral("$ %1 %2\n").arg(program_, args.join(' ')));
  status_->setText(tr("running…"));
  process_.start(program_, args);
  update_state();
  return true;
}

QStringList ExecutePanel::run_arguments() const {
  QStringList args = QProcess::splitCommand(extra_->text());
  auto add = [&](const QString& flag, const QString& value) {
    if (!args.contains(flag)) args << flag << value;
  };
  add(QStringLiteral("--backend"), backend_->currentText());
  // On GPUs one process, this one: `llmplan execute` would otherwise start a multi-rank
  // plan's ranks with mpirun where the GPUs are, and Stop's SIGINT would reach mpirun, not
  // the run that records itself as stopped.
  if (backend_->currentText() == QLatin1String("cuda") && !args.contains(QStringLiteral("--no-launch"))) args << QStringLiteral("--no-launch");
  if (scaled_->isChecked()) {
    add(QStringLiteral("--layers"), QString::number(layers_->value()));
    add(QStringLiteral("--seq"), QString::number(seq_->value()));
    add(QStringLiteral("--micro-batch"), QStringLiteral("1"));
    add(QStringLiteral("--grad-accum"), QStringLiteral("1"));
    add(QStringLiteral("--steps"), QString::number(steps_->value()));
    add(QStringLiteral("--warmup"), QStringLiteral("1"));
  }
  return args;
}

void ExecutePanel::stop() {
  if (!running()) return;
  // SIGINT, as Ctrl-C: `llmplan execute` then finishes its own record as "stopped"
  // (executor/execute_job.cpp); SIGTERM would record it as failed, and a kill leave it
  // "running". A child that does not stop gets SIGTERM after 5 s and a kill after 10 s.
  append(tr("\n[stopping: SIGINT]\n"));
  const qint64 pid = process_.processId();
  if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGINT);
  const int run = runs_;
  QTimer::singleShot(5000, this, [this, run] {
    if (running() && runs_ == run) process_.terminate();
  });
  QTimer::singleShot(10000, this, [this, run] {
    if (running() && runs_ == run) process_.kill();
  });
}

void ExecutePanel::on_finished(int code, QProcess::ExitStatus status) {
  append(QString::fromLocal8Bit(process_.readAllStandardOutput()));
  const bool crashed = status == QProcess::CrashExit;
  // 130: llmplan execute stopped by SIGINT, its run recorded as stopped.
  status_->setText(crashed ? tr("stopped (killed or crashed)") : code == 130 ? tr("stopped (recorded as stopped)") : tr("finished with exit code %1").arg(code));
  append(crashed ? tr("\n[stopped]\n") : tr("\n[exit code %1]\n").arg(code));
  update_state();
  emit finished(code, crashed);
}

}  // namespace llmplan::gui
