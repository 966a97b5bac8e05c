// llmplan-gui: the desktop front end. Options preset the form (the CLI's flag names), so
// that scripts/screenshot.sh can start it on an example:
//   llmplan-gui --model llama2-70b --gpus 64 --run --screenshots docs/
#include <QApplication>
#include <QCoreApplication>
#include <QCommandLineParser>
#include <QMessageBox>
#include <QSettings>
#include <QTimer>
#include <cstdio>
#include <memory>
#include <string>

#include "gui/main_window.h"
#include "gui/plan_table_model.h"
#include "gui/sweep_form.h"

using llmplan::gui::MainWindow;

namespace {

void add_options(QCommandLineParser& cli) {
  cli.setApplicationDescription(QStringLiteral("llmplan-gui: plan LLM training on limited hardware"));
  cli.addHelpOption();
  cli.addVersionOption();
  const char* kValueOptions[][2] = {
      {"model", "model preset id or a path to a model JSON / HF config.json"},
      {"gpu", "GPU preset id"},
      {"cluster", "node preset id"},
      {"gpus", "number of GPUs"},
      {"seq", "sequence length, tokens"},
      {"global-batch", "sequences per optimizer step"},
      {"mode", "pretrain, finetune, lora or qlora"},
      {"objective", "tokens-per-s, memory or cost"},
      {"max-tp", "upper bound on tp"},
      {"schedules", "pipeline schedules: all (with ZB-H1, ZB-V, DualPipeV, DualPipe); default 1F1B and interleaved"},
      {"headroom", "GiB to keep free per GPU"},
      {"db", "profile database (stored in the settings)"},
      {"llmplan", "the llmplan binary Execute runs"},
      {"settings", "settings file (INI) instead of the user's settings"},
      {"select-rank", "after the sweep, select the plan of this rank"},
      {"screenshots", "after the sweep, save a PNG of each tab in this folder and quit"},
      {"size", "window size WxH, e.g. 1440x900"},
  };
  for (const auto& o : kValueOptions) cli.addOption(QCommandLineOption(QString(o[0]), QString(o[1]), QStringLiteral("value")));
  cli.addOption(QCommandLineOption(QStringLiteral("run"), QStringLiteral("start the sweep at once")));
}

}  // namespace

int main(int argc, char** argv) {
  // --help and --version answer without a display: a QCoreApplication parses them before
  // the QApplication (which needs a platform plugin) exists.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "-?" || a == "--help-all" || a == "--version" || a == "-v") {
      QCoreApplication core(argc, argv);
      QCoreApplication::setApplicationName(QStringLiteral("llmplan-gui"));
      QCoreApplication::setApplicationVersion(llmplan::gui::build_description());
      QCommandLineParser cli;
      add_options(cli);
      cli.process(core);  // prints and exits
      return 0;
    }
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("llmplan"));
  QApplication::setApplicationName(QStringLiteral("llmplan-gui"));
  QApplication::setApplicationVersion(llmplan::gui::build_description());

  QCommandLineParser cli;
  add_options(cli);
  cli.process(app);

  llmplan::Result<llmplan::PresetRegistry> presets = llmplan::PresetRegistry::load(llmplan::default_data_root());
  if (!presets) {
    const QString msg = QString::fromStdString(presets.status().message());
    std::fprintf(stderr, "llmplan-gui: %s\n", msg.toLocal8Bit().constData());
    QMessageBox::critical(nullptr, QStringLiteral("llmplan-gui"), QStringLiteral("Cannot load the presets: %1").arg(msg));
    return 2;
  }
  std::unique_ptr<QSettings> settings = cli.isSet("settings") ? std::make_unique<QSettings>(cli.value("settings"), QSettings::IniFormat)
                                                              : std::make_unique<QSettings>();
  MainWindow w(*presets, settings.get());

  llmplan::gui::SweepInputs in = w.form()->inputs();
  if (cli.isSet("model")) in.model = cli.value("model").toStdString();
  if (cli.isSet("gpu")) in.gpu = cli.value("gpu").toStdString();
  if (cli.isSet("cluster")) in.cluster = cli.value("cluster").toStdString();
  if (cli.isSet("gpus")) in.gpus = cli.value("gpus").toInt();
  if (cli.isSet("seq")) in.seq = cli.value("seq").toLongLong();
  if (cli.isSet("global-batch")) in.global_batch = cli.value("global-batch").toLongLong();
  if (cli.isSet("mode")) in.mode = cli.value("mode").toStdString();
  if (cli.isSet("objective")) in.objective = cli.value("objective").toStdString();
  if (cli.isSet("max-tp")) in.max_tp = cli.value("max-tp").toInt();
  if (cli.isSet("schedules")) in.schedules = cli.value("schedules").toStdString();
  if (cli.isSet("headroom")) in.headroom_gib = cli.value("headroom").toDouble();
  w.form()->set_inputs(in);
  if (cli.isSet("llmplan")) w.set_llmplan_path(cli.value("llmplan"));
  if (cli.isSet("db")) w.set_database(cli.value("db"));
  if (cli.isSet("size")) {
    const QStringList wh = cli.value("size").split('x');
    if (wh.size() == 2) w.resize(wh[0].toInt(), wh[1].toInt());
  }
  w.show();

  const QString shots = cli.value("screenshots");
  const int rank = cli.isSet("select-rank") ? cli.value("select-rank").toInt() : 0;
  if (!shots.isEmpty()) {
    QObject::connect(&w, &MainWindow::sweep_done, &w, [&w, shots, rank](bool) {
      if (rank > 0)
        for (int i = 0; i < w.plan_model()->plan_count(); ++i)
          if (w.plan_model()->plan_row(i).rank == rank) w.select_source_row(i);
      // Let the charts lay out and paint before grabbing.
      QTimer::singleShot(800, &w, [&w, shots] {
        const QStringList files = w.save_screenshots(shots);
        for (const QString& f : files) std::printf("wrote %s\n", f.toLocal8Bit().constData());
        QApplication::exit(files.size() == 5 ? 0 : 1);
      });
    });
  }
  if (cli.isSet("run") || !shots.isEmpty()) {
    QTimer::singleShot(0, &w, [&w, shots] {
      if (!w.start_sweep() && !shots.isEmpty()) {
        std::fprintf(stderr, "llmplan-gui: %s\n", w.form()->error_text().toLocal8Bit().constData());
        QApplication::exit(2);
      }
    });
  }
  return app.exec();
}
