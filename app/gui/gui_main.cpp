#include "app/gui/gui_main.h"

#include <QBuffer>
#include <QCommandLineParser>
#include <QTabWidget>
#include <QTimer>

#include "app/gui/job_runner.h"
#include "app/gui/main_window.h"
#include "app/gui/walkthrough.h"
#include "core/io/atomic_file.h"
#include "app/labs/labs_panel.h"
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
  QCommandLineOption lab(QStringLiteral("lab"),
                         QStringLiteral("Open lab N (1-18) once the model is loaded; with --screenshot the "
                                        "picture waits for its experiment"),
                         QStringLiteral("N"));
  parser.addOption(lab);
  QCommandLineOption walkthrough(QStringLiteral("walkthrough"),
                                 QStringLiteral("Drive the app through open, layer, calibrate, sensitivity, auto plan, run, "
                                                "speed, export, autoquant and reopen, saving a screenshot per step into DIR, then quit"),
                                 QStringLiteral("DIR"));
  QCommandLineOption wtFormats(QStringLiteral("walkthrough-formats"),
                               QStringLiteral("Comma-separated formats for the walkthrough's sensitivity sweep"),
                               QStringLiteral("list"));
  QCommandLineOption wtTokens(QStringLiteral("walkthrough-tokens"),
                              QStringLiteral("Evaluation tokens for the walkthrough's jobs (default 256)"), QStringLiteral("N"));
  QCommandLineOption wtOther(QStringLiteral("walkthrough-other"),
                             QStringLiteral("The model opened between the two visits (default: the bundled one)"),
                             QStringLiteral("model"));
  QCommandLineOption wtSteps(QStringLiteral("walkthrough-steps"),
                             QStringLiteral("Only the walkthrough steps whose names start with one of these "
                                            "(comma-separated, e.g. 01,08b,08c,08d)"),
                             QStringLiteral("list"));
  parser.addOption(walkthrough);
  parser.addOption(wtSteps);
  parser.addOption(wtFormats);
  parser.addOption(wtTokens);
  parser.addOption(wtOther);
  parser.process(app);

  auto* window = new MainWindow;
  window->setAttribute(Qt::WA_DeleteOnClose);
  window->setExitWhenStuck(true);  // Quit always ends the process (main_window.h)
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
    // With --lab it waits for the lab's experiment, with --select for the layer's analysis,
    // else for the model.
    if (auto* labs = window->findChild<labs::LabsPanel*>(); labs && parser.isSet(lab)) {
      QObject::connect(labs, &labs::LabsPanel::experimentFinished, window, [grab] { grab(0); });
      QObject::connect(labs, &labs::LabsPanel::experimentFailed, window, [grab] { grab(2); });
    } else if (selectTensor.isEmpty())
      QObject::connect(window, &MainWindow::modelLoaded, window, [grab] { grab(0); });
    else
    {
      QObject::connect(window, &MainWindow::layerAnalysed, window, [grab] { grab(0); });
      QObject::connect(window->jobs(), &JobRunner::jobFailed, window, [grab] { grab(2); });
    }
    QObject::connect(window, &MainWindow::modelLoadFailed, window, [grab] { grab(2); });
  }
  if (parser.isSet(lab))
    QObject::connect(window, &MainWindow::modelLoaded, window, [window, n = parser.value(lab).toInt()] {
      auto* labs = window->findChild<labs::LabsPanel*>();
      if (auto* tabs = window->findChild<QTabWidget*>(QStringLiteral("centralTabs"))) tabs->setCurrentWidget(labs);
      labs->openLab(n);
    });
  window->show();
  window->openModel(model);
  if (parser.isSet(walkthrough)) {
    WalkthroughOptions o;
    o.outDir = parser.value(walkthrough);
    if (parser.isSet(wtFormats)) o.sweepFormats = parser.value(wtFormats).split(QLatin1Char(','), Qt::SkipEmptyParts);
    if (parser.isSet(wtTokens)) o.tokens = parser.value(wtTokens).toLongLong();
    o.otherModel = parser.value(wtOther);
    if (parser.isSet(wtSteps)) o.onlySteps = parser.value(wtSteps).split(QLatin1Char(','), Qt::SkipEmptyParts);
    auto* wt = new Walkthrough(window, o);
    QObject::connect(wt, &Walkthrough::finished, window, [](int code) { QCoreApplication::exit(code); });
    wt->start();
  }
  return app.exec();
}

}  // namespace qs::app
