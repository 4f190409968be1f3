#pragma once
// The F1 help: a page for the tab in front (by its title) and the keyboard shortcuts.
#include <QString>

namespace qs::app {
QString helpHtml(const QString& tabTitle);
}
