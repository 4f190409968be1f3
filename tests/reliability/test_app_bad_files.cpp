// The GUI over the bad-input corpus (tests/data/bad/manifest.json): with stories260K open, every
// bad file is opened in MainWindow (offscreen). Each must give the non-blocking error dialog
// naming the file, the app keeps running, and stories260K stays loaded and usable (its tree and
// a layer analysis work afterwards). A model with a NaN weight opens (it is a valid file), and
// analysing that layer reports the NaN in the layer view instead of crashing.
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QTreeView>
#include <QtTest>
#include <memory>

#include "app/gui/gui_main.h"
#include "app/gui/main_window.h"
#include "app/gui/job_runner.h"
#include "core/model/model_file.h"
#include "kernels/backend/backend.h"
#include "kernels/common/device_error.h"
#include "tests/test_util.h"
#include "widgets/layer_view.h"

using qs::app::MainWindow;

namespace {
QString corpusDir() { return QStringLiteral(QS_SOURCE_DIR "/tests/data/bad"); }
}  // namespace

class TestAppBadFiles : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_;
  std::unique_ptr<MainWindow> w_;

  void openGood(const QString& path) {
    QSignalSpy loaded(w_.get(), &MainWindow::modelLoaded);
    w_->openModel(path);
    QVERIFY(loaded.wait(20'000));
  }

 private slots:
  void initTestCase() {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
    w_ = std::make_unique<MainWindow>();
    w_->layerView()->setFormatText("int4-g32-sym");  // what the layer analyses quantize to
    w_->show();
    openGood(qs::test::stories260K());
  }

  void badFileGivesDialogAndKeepsModel_data() {
    QTest::addColumn<QString>("file");
    QFile f(corpusDir() + "/manifest.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonArray cases = QJsonDocument::fromJson(f.readAll()).object().value("cases").toArray();
    QVERIFY(cases.size() > 50);
    QSet<QString> seen;
    for (const QJsonValue& v : cases) {
      const QJsonObject c = v.toObject();
      const QString file = c.value("file").toString();
      // Every file a case refuses, once (several cases may share one file). Plans and sessions
      // are opened too: the GUI must refuse them as models just as calmly.
      if (c.value("exit").toInt() != 2 || seen.contains(file)) continue;
      // Model files are taken from the `inspect` cases; files that are valid models refused
      // only when their data is decoded or run (an unsupported dtype, NaN weights) open fine
      // and are covered below and by the CLI. Plans and sessions are taken as they are.
      const QStringList args = c.value("args").toVariant().toStringList();
      const bool modelCase = args.value(0) == "inspect" && !args.contains("--tensor");
      if (!modelCase && !file.endsWith(".json") && !file.endsWith(".qsession")) continue;
      seen.insert(file);
      QTest::newRow(qPrintable(c.value("case").toString())) << file;
    }
  }
  void badFileGivesDialogAndKeepsModel() {
    QFETCH(QString, file);
    const QString path = corpusDir() + "/" + file;
    QSignalSpy failed(w_.get(), &MainWindow::modelLoadFailed);
    QSignalSpy loaded(w_.get(), &MainWindow::modelLoaded);
    w_->openModel(path);
    QVERIFY2(failed.wait(20'000), qPrintable("no failure reported for " + path));
    QCOMPARE(loaded.size(), 0);
    const QString message = failed.first().at(1).toString();
    QVERIFY2(message.contains(QFileInfo(path).fileName()), qPrintable(message));
    QVERIFY(!message.contains('\n'));  // one line, like the CLI's
    QVERIFY(w_->errorDialog() && w_->errorDialog()->isVisible());
    QVERIFY(w_->errorDialog()->informativeText().contains(QFileInfo(path).fileName()));
    // Nothing the user had is lost: stories260K is still the open model.
    QVERIFY(w_->model());
    QCOMPARE(w_->modelPath(), qs::test::stories260K());
    QCOMPARE(w_->model()->parameterCount(), uint64_t(260'032));
    w_->errorDialog()->accept();
  }

  // After every bad file: the model tree and a layer analysis of stories260K still work.
  void previousModelStaysUsable() {
    QCOMPARE(w_->modelPath(), qs::test::stories260K());
    QCOMPARE(w_->modelTree()->model()->rowCount(), 8);
    QSignalSpy analysed(w_.get(), &MainWindow::layerAnalysed);
    w_->selectTensor(QStringLiteral("layers.0.attention.wq.weight"));
    QVERIFY(analysed.wait(30'000));
    QCOMPARE(analysed.first().at(0).toString(), QStringLiteral("layers.0.attention.wq.weight"));
  }

  // NaN weights: the file opens; analysing the poisoned layer fails that job only, with the
  // reason in the layer view, and the app goes on.
  void nanWeightsReportedByLayerAnalysis() {
    openGood(corpusDir() + "/l2c_nan_weights.bin");
    QSignalSpy failed(w_->jobs(), &qs::app::JobRunner::jobFailed);
    w_->selectTensor(QStringLiteral("layers.0.attention.wq.weight"));
    QVERIFY(failed.wait(30'000));
    const QString message = failed.first().at(2).toString();
    QVERIFY2(message.contains("non-finite") || message.contains("NaN"), qPrintable(message));
    openGood(qs::test::stories260K());
    QVERIFY(w_->model());
  }

  // A job that runs out of device memory (the CUDA op-sets' error, raised here by the job
  // itself since CI has no GPU) fails alone; the window offers the CPU backend, and taking it
  // switches the backend and redoes the analysis there.
  void outOfDeviceMemoryOffersCpuBackend() {
    {
      QSignalSpy analysed(w_.get(), &MainWindow::layerAnalysed);
      w_->selectTensor(QStringLiteral("layers.1.attention.wk.weight"));
      QVERIFY(analysed.wait(30'000));
    }
    QSignalSpy failed(w_->jobs(), &qs::app::JobRunner::jobFailed);
    w_->jobs()->submit(QStringLiteral("test"), QStringLiteral("Analysing a huge layer"),
                       [](const qs::JobContext&) -> std::function<void()> {
                         throw qs::outOfDeviceMemory("cudaMalloc of 85899345920 bytes for the weights");
                       });
    QVERIFY(failed.wait(10'000));
    QTRY_VERIFY_WITH_TIMEOUT(w_->deviceMemoryDialog() && w_->deviceMemoryDialog()->isVisible(), 5'000);
    QVERIFY(w_->deviceMemoryDialog()->informativeText().contains("--backend cpu"));
    auto* useCpu = w_->deviceMemoryDialog()->findChild<QPushButton*>("useCpuButton");
    QVERIFY(useCpu);
    QSignalSpy analysed(w_.get(), &MainWindow::layerAnalysed);
    useCpu->click();
    QCOMPARE(w_->backend()->kind(), qs::BackendKind::Cpu);
    QVERIFY(w_->findChild<QLabel*>("backendLabel")->text().contains("CPU"));
    QVERIFY(analysed.wait(30'000));  // the open layer, analysed again on the CPU
    QVERIFY(w_->model());
  }

  void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(TestAppBadFiles)
#include "test_app_bad_files.moc"
