#pragma once
#include <QApplication>

namespace qs::app {
// Parses the command line (an optional model path, --screenshot FILE for checks), creates the
// main window, opens the model (the bundled default when none is given) and runs the event loop.
int runGui(QApplication& app);
void setApplicationIdentity();  // organisation and application names, before any QSettings
}  // namespace qs::app
