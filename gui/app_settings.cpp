#include "gui/app_settings.h"

#include <QCoreApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>

#include "profiles/profile_store.h"

namespace llmplan::gui {

namespace {
constexpr const char* kDatabaseKey = "profiles/database";
constexpr const char* kLlmplanKey = "execute/llmplan";
}  // namespace

QString default_llmplan_path() {
  // Installed, both live in P/bin; in the build tree llmplan-gui is in ${build}/gui, the
  // CLI in ${build}/cli.
  const QDir here(QCoreApplication::applicationDirPath());
  const QString installed = here.absoluteFilePath(QStringLiteral("llmplan"));
  if (QFileInfo(installed).isExecutable()) return QDir::cleanPath(installed);
  const QString sibling = here.absoluteFilePath(QStringLiteral("../cli/llmplan"));
  if (QFileInfo(sibling).isExecutable()) return QDir::cleanPath(sibling);
  const QString on_path = QStandardPaths::findExecutable(QStringLiteral("llmplan"));
  return on_path.isEmpty() ? QDir::cleanPath(sibling) : on_path;
}

AppSettings load_settings(QSettings& s) {
  AppSettings a;
  a.database = s.value(kDatabaseKey).toString();
  if (a.database.isEmpty()) {
    if (Result<std::string> p = default_db_path(); p) a.database = QString::fromStdString(*p);
  }
  a.llmplan = s.value(kLlmplanKey).toString();
  if (a.llmplan.isEmpty()) a.llmplan = default_llmplan_path();
  return a;
}

void save_settings(QSettings& s, const AppSettings& a) {
  s.setValue(kDatabaseKey, a.database);
  s.setValue(kLlmplanKey, a.llmplan);
  s.sync();
}

bool edit_settings(QWidget* parent, AppSettings* a) {
  QDialog dlg(parent);
  dlg.setWindowTitle(QObject::tr("Settings"));
  auto* form = new QFormLayout(&dlg);
  auto row = [&](const QString& label, const QString& value, bool save_dialog) {
    auto* edit = new QLineEdit(value);
    edit->setMinimumWidth(420);
    auto* browse = new QPushButton(QObject::tr("Browse…"));
    auto* h = new QHBoxLayout;
    h->addWidget(edit, 1);
    h->addWidget(browse);
    form->addRow(label, h);
    QObject::connect(browse, &QPushButton::clicked, &dlg, [&dlg, edit, save_dialog] {
      const QString p = save_dialog ? QFileDialog::getSaveFileName(&dlg, QObject::tr("Profile database"), edit->text(), QString(), nullptr,
                                                                   QFileDialog::DontConfirmOverwrite)
                                    : QFileDialog::getOpenFileName(&dlg, QObject::tr("llmplan binary"), edit->text());
      if (!p.isEmpty()) edit->setText(p);
    });
    return edit;
  };
  QLineEdit* db = row(QObject::tr("Profile database"), a->database, true);
  QLineEdit* bin = row(QObject::tr("llmplan binary"), a->llmplan, false);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  form->addRow(buttons);
  QObject::connect(buttons, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
  QObject::connect(buttons, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
  if (dlg.exec() != QDialog::Accepted) return false;
  a->database = db->text().trimmed();
  a->llmplan = bin->text().trimmed();
  return true;
}

}  // namespace llmplan::gui
