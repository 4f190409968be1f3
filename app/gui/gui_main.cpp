#include "app/gui/gui_main.h"

#include <QBuffer>
#include <QCommandLineParser>
#include <QTimer>

#include "app/gui/job_runner.h"
#include "app/gui/main_window.h"
#include "core/io/atomic_file.h"
#include "core/util/datasets.h"
#include "kernels/common/error.h"
#include "widgets/layer_view.h"

namespace qs::app {

void setApplicationIdentity() {
  QCoreApplication::setOrganizationName(QStringLiteral("Quantscope"));
  QCoreApplication::setApplicationName(QStringLiteral("Quantscope"));
  QCoreApplication::setApplicationVersion(QStringLiteral(QS_VERSION));
}

int runGui(QApplication& app) {
  setApplicationIdentity();
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Quantscope: mixed-precision quantization lab"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("model"),
                               QStringLiteral("Model file to open (default: the bundled stories260K)"));
  QCommandLineOption screenshot(
      QStringLiteral("screenshot"),
      QStringLiteral("Save a PNG of the window once the model is loaded, then quit"),
      QStringLiteral("file"));
  parser.addOption(screenshot);
  QCommandLineOption select(QStringLiteral("select"),
                            QStringLiteral("Show this tensor in the layer view once the model is loaded"),
                            QStringLiteral("tensor"));
  QCommandLineOption format(QStringLiteral("format"),
                            QStringLiteral("Format for the layer view, e.g. int4-g128-sym"),
                            QStringLiteral("format"));
  parser.addOption(select);
  parser.addOption(format);
  parser.process(app);

  auto* window = new MainWindow;
  window->setAttribute(Qt::WA_DeleteOnClose);
  const QStringList args = parser.positionalArguments();
  const QString model =
      args.isEmpty() ? QString::fromStdString(defaultModelPath()) : args.first();

  if (parser.isSet(format)) window->layerView()->setFormatText(parser.value(format));
  const QString selectTensor = parser.value(select);
  if (!selectTensor.isEmpty())
    QObject::connect(window, &MainWindow::modelLoaded, window,
                     [window, selectTensor] { window->selectTensor(selectTensor); });
  if (parser.isSet(screenshot)) {
    const QString out = parser.value(screenshot);
    auto grab = [window, out](int code) {
      // Give the layout a moment to settle before grabbing.
      QTimer::singleShot(300, window, [window, out, code] {
        // Encoded in memory, written through the app's one atomic writer (docs/reliability.md).
        QBuffer png;
        png.open(QIODevice::WriteOnly);
        bool ok = window->grab().save(&png, "PNG");
        try {
          if (ok) writeFileAtomically(out.toStdString(), std::as_bytes(std::span(png.data().constData(),
                                                                                size_t(png.data().size()))));
        } catch (const Error&) {
          ok = false;
        }
        QCoreApplication::exit(ok ? code : 1);
      });
    };
    // With --select the picture waits for the layer's analysis, else for the model.
    if (selectTensor.isEmpty())
      QObject::connect(window, &MainWindow::modelLoaded, window, [grab] { grab(0); });
    else
    {
      QObject::connect(window, &MainWindow::layerAnalysed, window, [grab] { grab(0); });
      QObject::connect(window->jobs(), &JobRunner::jobFailed, window, [grab] { grab(2); });
    }
    QObject::connect(window, &MainWindow::modelLoadFailed, window, [grab] { grab(2); });
  }
  window->show();
  window->openModel(model);
  return app.exec();
}

}  // namespace qs::app
