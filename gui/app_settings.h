// What the app remembers between sessions (QSettings): the profile database and the
// llmplan binary that Execute runs. The QSettings object is injected, so tests use a
// temporary file and never touch the user's settings.
//
// Thread-safety: GUI thread only.
#pragma once

#include <QString>

class QSettings;
class QWidget;

namespace llmplan::gui {

struct AppSettings {
  QString database;  // profile database path
  QString llmplan;   // the llmplan CLI binary
};

// Stored values, or the defaults: $LLMPLAN_DB / ~/.local/share/llmplan/profiles.db
// (profiles/default_db_path) and ${build}/cli/llmplan next to this binary's folder
// (falling back to `llmplan` on PATH).
AppSettings load_settings(QSettings& s);
void save_settings(QSettings& s, const AppSettings& a);
QString default_llmplan_path();

// A modal dialog editing `a`; true when the user pressed OK.
bool edit_settings(QWidget* parent, AppSettings* a);

}  // namespace llmplan::gui
