#include <QApplication>

#include "app/gui/gui_main.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  return qs::app::runGui(app);
}
