#include "gui/sweep_form.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCompleter>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace llmplan::gui {

namespace {

const char* kTargets[] = {"q", "k", "v", "o", "gate", "up", "down"};

void select_data(QComboBox* box, const QString& value) {
  const int i = box->findData(value);
  box->setCurrentIndex(i >= 0 ? i : 0);
}

}  // namespace

SweepForm::SweepForm(const PresetRegistry& presets, QWidget* parent) : QWidget(parent), presets_(presets) {
  auto* outer = new QVBoxLayout(this);

  // ---- what to train
  auto* model_box = new QGroupBox(tr("Model and hardware"));
  auto* mf = new QFormLayout(model_box);
  model_ = new QComboBox;
  model_->setEditable(true);
  model_->setInsertPolicy(QComboBox::NoInsert);
  for (const std::string& id : presets.model_ids()) model_->addItem(QString::fromStdString(id));
  auto* completer = new QCompleter(model_->model(), model_);
  completer->setFilterMode(Qt::MatchContains);
  completer->setCaseSensitivity(Qt::CaseInsensitive);
  completer->setCompletionMode(QCompleter::PopupCompletion);
  model_->setCompleter(completer);
  model_->setToolTip(tr("A model preset (type to search), or a path to a model JSON or a Hugging Face config.json"));
  auto* browse = new QPushButton(tr("Open…"));
  browse->setToolTip(tr("Open a model JSON or a Hugging Face config.json"));
  auto* model_row = new QHBoxLayout;
  model_row->addWidget(model_, 1);
  model_row->addWidget(browse);
  mf->addRow(tr("Model"), model_row);
  gpu_ = new QComboBox;
  for (const std::string& id : presets.gpu_ids()) gpu_->addItem(QString::fromStdString(id), QString::fromStdString(id));
  mf->addRow(tr("GPU"), gpu_);
  cluster_ = new QComboBox;
  cluster_->addItem(tr("the GPU's usual node"), QString());
  for (const std::string& id : presets.cluster_ids()) cluster_->addItem(QString::fromStdString(id), QString::fromStdString(id));
  cluster_->setToolTip(tr("Node and interconnect preset; it sets the GPU too"));
  mf->addRow(tr("Node"), cluster_);
  gpus_ = new QSpinBox;
  gpus_->setRange(0, 1 << 20);
  gpus_->setToolTip(tr("Number of GPUs the plan uses"));
  mf->addRow(tr("GPUs"), gpus_);
  outer->addWidget(model_box);

  // ---- the job
  auto* job_box = new QGroupBox(tr("Training job"));
  auto* jf = new QFormLayout(job_box);
  seq_ = new QSpinBox;
  seq_->setRange(1, 1 << 24);
  seq_->setSuffix(tr(" tokens"));
  jf->addRow(tr("Sequence length"), seq_);
  batch_ = new QSpinBox;
  batch_->setRange(1, 100000000);
  batch_->setSuffix(tr(" seqs"));
  batch_->setToolTip(tr("Sequences per optimizer step, all data-parallel replicas together"));
  jf->addRow(tr("Global batch"), batch_);
  mode_ = new QComboBox;
  mode_->addItem(tr("pretrain"), "pretrain");
  mode_->addItem(tr("full fine-tune"), "finetune");
  mode_->addItem(tr("LoRA"), "lora");
  mode_->addItem(tr("QLoRA (4-bit base)"), "qlora");
  jf->addRow(tr("Mode"), mode_);
  lora_rank_ = new QSpinBox;
  lora_rank_->setRange(1, 4096);
  jf->addRow(tr("LoRA rank"), lora_rank_);
  auto* targets = new QGridLayout;
  targets->setSpacing(2);
  int ti = 0;
  for (const char* t : kTargets) {
    auto* box = new QCheckBox(t);
    lora_targets_.push_back(box);
    targets->addWidget(box, ti / 4, ti % 4);
    ++ti;
  }
  jf->addRow(tr("LoRA targets"), targets);
  precision_ = new QComboBox;
  precision_->addItem(tr("auto (bf16, else fp16)"), QString());
  precision_->setToolTip(tr("auto: the GPU's 16-bit format, bf16 where it has one (as llmplan sweep)"));
  for (const char* p : {"bf16", "fp16", "fp32"}) precision_->addItem(p, p);
  jf->addRow(tr("Precision"), precision_);
  amp_ = new QComboBox;
  amp_->addItem(tr("default (O2)"), QString());
  for (const char* a : {"O1", "O2", "O3"}) amp_->addItem(a, a);
  amp_->setToolTip(tr("MindSpore AMP levels: O1 casts ops, O2 keeps fp32 master weights, O3 is pure half precision"));
  jf->addRow(tr("AMP level"), amp_);
  outer->addWidget(job_box);

  // ---- constraints and objective
  auto* search_box = new QGroupBox(tr("Constraints and objective"));
  auto* sf = new QFormLayout(search_box);
  max_tp_ = new QSpinBox;
  max_tp_->setRange(0, 1024);
  max_tp_->setSpecialValueText(tr("no bound"));
  sf->addRow(tr("Max TP"), max_tp_);
  schedules_ = new QComboBox;
  schedules_->addItem(tr("1F1B and interleaved"), QString());
  schedules_->addItem(tr("all, with zero-bubble (ZB-H1, ZB-V, DualPipeV, DualPipe)"), QStringLiteral("all"));
  schedules_->setToolTip(tr("Pipeline schedules the sweep tries where pp > 1. The zero-bubble ones split each backward "
                            "into input and weight gradients; they are simulated, not executed"));
  sf->addRow(tr("Pipeline schedules"), schedules_);
  headroom_ = new QDoubleSpinBox;
  headroom_->setRange(0, 1024);
  headroom_->setDecimals(1);
  headroom_->setSingleStep(1);
  headroom_->setSuffix(tr(" GiB"));
  headroom_->setToolTip(tr("Memory to keep free on every GPU"));
  sf->addRow(tr("Memory headroom"), headroom_);
  framework_ = new QComboBox;
  framework_->addItem(tr("any"), QString());
  for (const FrameworkSpec& fw : presets_.frameworks())
    framework_->addItem(QStringLiteral("%1 (%2)").arg(QString::fromStdString(fw.name), QString::fromStdString(fw.version)),
                        QString::fromStdString(fw.name));
  framework_->setToolTip(tr("Only the plans this training framework can run (data/frameworks), costed with its stack profile "
                            "(llmplan sweep --framework)"));
  sf->addRow(tr("Framework"), framework_);
  objective_ = new QComboBox;
  objective_->addItem(tr("throughput"), "tokens-per-s");
  objective_->addItem(tr("least memory"), "memory");
  objective_->addItem(tr("cost (GPU-hours)"), "cost");
  sf->addRow(tr("Objective"), objective_);
  top_ = new QSpinBox;
  top_->setRange(1, 100000);
  top_->setToolTip(tr("How many fitting plans to rank (llmplan sweep --top)"));
  sf->addRow(tr("Ranked plans"), top_);
  outer->addWidget(search_box);

  // ---- run
  auto* buttons = new QHBoxLayout;
  run_ = new QPushButton(tr("Run sweep"));
  run_->setDefault(true);
  cancel_ = new QPushButton(tr("Cancel"));
  buttons->addWidget(run_, 1);
  buttons->addWidget(cancel_);
  outer->addLayout(buttons);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  progress_->setFormat(tr("%p%"));
  outer->addWidget(progress_);
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; background: #fdecea; border: 1px solid #f5c2c0; padding: 4px; }"));
  error_->hide();
  outer->addWidget(error_);
  auto* cli_caption = new QLabel(tr("Same as:"));
  outer->addWidget(cli_caption);
  cli_line_ = new QLabel;
  cli_line_->setWordWrap(true);
  cli_line_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  cli_line_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  cli_line_->setToolTip(tr("The llmplan command that ranks the same plans in the same order"));
  outer->addWidget(cli_line_);
  outer->addStretch(1);
  setMaximumWidth(360);

  set_inputs(SweepInputs{});
  set_running(false);

  connect(browse, &QPushButton::clicked, this, &SweepForm::browse_model);
  connect(run_, &QPushButton::clicked, this, &SweepForm::run_requested);
  connect(cancel_, &QPushButton::clicked, this, &SweepForm::cancel_requested);
  connect(mode_, &QComboBox::currentIndexChanged, this, &SweepForm::update_enabled);
  connect(cluster_, &QComboBox::currentIndexChanged, this, &SweepForm::update_enabled);
  // Any change refreshes the equivalent command line.
  for (QComboBox* box : {model_, gpu_, cluster_, mode_, precision_, amp_, schedules_, framework_, objective_})
    connect(box, &QComboBox::currentTextChanged, this, &SweepForm::update_cli_line);
  for (QSpinBox* spin : {gpus_, seq_, batch_, lora_rank_, max_tp_, top_}) connect(spin, &QSpinBox::valueChanged, this, &SweepForm::update_cli_line);
  connect(headroom_, &QDoubleSpinBox::valueChanged, this, &SweepForm::update_cli_line);
  for (QCheckBox* box : lora_targets_) connect(box, &QCheckBox::toggled, this, &SweepForm::update_cli_line);
  update_cli_line();
}

SweepInputs SweepForm::inputs() const {
  SweepInputs in;
  in.model = model_->currentText().trimmed().toStdString();
  in.gpu = gpu_->currentData().toString().toStdString();
  in.cluster = cluster_->currentData().toString().toStdString();
  in.gpus = gpus_->value();
  in.seq = seq_->value();
  in.global_batch = batch_->value();
  in.mode = mode_->currentData().toString().toStdString();
  in.lora_rank = lora_rank_->value();
  in.lora_targets.clear();
  for (QCheckBox* box : lora_targets_)
    if (box->isChecked()) in.lora_targets.push_back(box->text().toStdString());
  in.precision = precision_->currentData().toString().toStdString();
  in.amp = amp_->currentData().toString().toStdString();
  in.max_tp = max_tp_->value();
  in.schedules = schedules_->currentData().toString().toStdString();
  in.headroom_gib = headroom_->value();
  in.framework = framework_->currentData().toString().toStdString();
  in.objective = objective_->currentData().toString().toStdString();
  in.top = top_->value();
  return in;
}

void SweepForm::set_inputs(const SweepInputs& in) {
  model_->setCurrentText(QString::fromStdString(in.model));
  const int mi = model_->findText(QString::fromStdString(in.model));
  if (mi >= 0) model_->setCurrentIndex(mi);
  select_data(gpu_, QString::fromStdString(in.gpu));
  select_data(cluster_, QString::fromStdString(in.cluster));
  gpus_->setValue(in.gpus);
  seq_->setValue(static_cast<int>(in.seq));
  batch_->setValue(static_cast<int>(in.global_batch));
  select_data(mode_, QString::fromStdString(in.mode));
  lora_rank_->setValue(in.lora_rank);
  for (QCheckBox* box : lora_targets_) {
    bool on = false;
    for (const auto& t : in.lora_targets) on = on || box->text().toStdString() == t;
    box->setChecked(on);
  }
  select_data(precision_, QString::fromStdString(in.precision));
  select_data(amp_, QString::fromStdString(in.amp));
  max_tp_->setValue(in.max_tp);
  select_data(schedules_, QString::fromStdString(in.schedules));
  headroom_->setValue(in.headroom_gib);
  select_data(framework_, QString::fromStdString(in.framework));
  select_data(objective_, QString::fromStdString(in.objective));
  top_->setValue(in.top);
  update_enabled();
  update_cli_line();
}

void SweepForm::set_running(bool running) {
  run_->setEnabled(!running);
  cancel_->setEnabled(running);
  if (running) progress_->setValue(0);
}

void SweepForm::set_progress(qint64 done, qint64 total) {
  if (total <= 0) return;
  progress_->setValue(static_cast<int>(std::min<qint64>(1000, done * 1000 / total)));
}

void SweepForm::finish_progress() { progress_->setValue(progress_->maximum()); }

void SweepForm::show_error(const QString& message) {
  error_->setText(message);
  error_->setVisible(!message.isEmpty());
}

QString SweepForm::cli_line() const { return cli_line_->text(); }

QString SweepForm::error_text() const { return error_->isHidden() ? QString() : error_->text(); }

void SweepForm::browse_model() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a model JSON or HF config.json"), QString(), tr("JSON files (*.json);;All files (*)"));
  if (path.isEmpty()) return;
  model_->setCurrentText(path);
}

void SweepForm::update_enabled() {
  const QString mode = mode_->currentData().toString();
  const bool lora = mode == "lora" || mode == "qlora";
  lora_rank_->setEnabled(lora);
  for (QCheckBox* box : lora_targets_) box->setEnabled(lora);
  const QString cluster = cluster_->currentData().toString();
  gpu_->setEnabled(cluster.isEmpty());
  if (!cluster.isEmpty()) {
    // A node preset names its GPU: show it.
    if (Result<ClusterPreset> cp = presets_.cluster(cluster.toStdString()); cp) select_data(gpu_, QString::fromStdString(cp->gpu_id));
  }
}

void SweepForm::update_cli_line() {
  cli_line_->setText(QString::fromStdString(cli_command_line(inputs())));
  emit inputs_changed();
}

}  // namespace llmplan::gui
