// File → Autoquant to GGUF… driven as a user drives it, on the tiny Llama GGUF the CLI's autoquant
// test uses (gguf-py fixture) opened in the main window (its workspace's engine; CPU or CUDA):
// measure, move the slider (the choice line, the type counts and the bytes follow the target),
// export (the file holds exactly the exported plan's bytes and types, within the target), and
// Cancel during the measure and the export (no file, the dialog usable after). A model that is
// not a GGUF gets the dialog with the reason and nothing to start.
#include <QAction>
#include <QCheckBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSlider>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/gui/autoquant_dialog.h"
#include "app/gui/gui_main.h"
#include "app/gui/job_runner.h"
#include "app/gui/main_window.h"
#include "app/gui/workspace.h"
#include "core/autoquant/autoquant_steps.h"
#include "core/model/model_file.h"
#include "tests/core/python_fixture.h"
#include "tests/test_util.h"

using qs::app::AutoquantDialog;
using qs::app::JobRunner;
using qs::app::MainWindow;

namespace {
constexpr int kJobMs = 180'000;  // a measure of the tiny model takes well under a second; CI is slow

// The files in `dir` (to see that nothing, not even a temporary, was left behind).
QStringList filesIn(const QString& dir) { return QDir(dir).entryList(QDir::Files | QDir::Hidden, QDir::Name); }
}  // namespace

class TestAutoquantDialog : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_, homeDir_, tmp_;
  QString model_, calib_, outDir_;

  // The main window with `path` open and its engine ready, and the dialog from the File menu.
  AutoquantDialog* openDialog(MainWindow& w, const QString& path) {
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    w.openModel(path);
    if (!loaded.wait(20'000)) return nullptr;
    if (!QTest::qWaitFor([&w] { return w.workspace()->engine() != nullptr; }, 20'000)) return nullptr;
    auto* action = w.findChild<QAction*>(QStringLiteral("autoquantAction"));
    if (!action) return nullptr;
    action->trigger();
    return w.findChild<AutoquantDialog*>();
  }

  // Measure with the fixture's settings (windows of 64 tokens: the model's context is 128).
  bool measure(AutoquantDialog* d) {
    d->setCalibrationText(calib_);
    d->setContext(64);
    QSignalSpy measured(d, &AutoquantDialog::measured);
    d->findChild<QPushButton*>(QStringLiteral("aqMeasure"))->click();
    return measured.wait(kJobMs);
  }

 private slots:
  void initTestCase() {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
    qputenv("HOME", homeDir_.path().toLocal8Bit());
    QStandardPaths::setTestModeEnabled(true);
    QS_REQUIRE_PYTHON();
    QVERIFY(qs::test::runFixtureScript("make_gguf_fixture.py", {"llama", tmp_.path()}));
    model_ = tmp_.filePath("tiny-llama.gguf");
    calib_ = tmp_.filePath("calib.txt");
    std::ofstream c(calib_.toStdString());
    for (int i = 0; i < 300; ++i) c << (i % 3 ? "a ab b " : "ba aab ");  // words of the fixture's vocabulary
    c.close();
    outDir_ = tmp_.filePath("out");
    QVERIFY(QDir().mkpath(outDir_));
  }

  void measureSlideExport() {
    MainWindow w;
    AutoquantDialog* d = openDialog(w, model_);
    QVERIFY(d);
    QVERIFY2(d->unavailableReason().isEmpty(), qPrintable(d->unavailableReason()));
    auto* slider = d->findChild<QSlider*>(QStringLiteral("aqSlider"));
    auto* exportButton = d->findChild<QPushButton*>(QStringLiteral("aqExport"));
    QVERIFY(!slider->isEnabled() && !exportButton->isEnabled());  // nothing to choose before a measure
    QVERIFY(measure(d));
    QVERIFY(d->plan());
    QVERIFY(slider->isEnabled() && exportButton->isEnabled());

    // The slider spans what the candidates reach, smallest to largest file.
    const qs::AutoquantSizeRange range = d->range();
    QVERIFY(range.minBytes < range.maxBytes);
    slider->setValue(slider->minimum());
    QCOMPARE(d->targetBytes(), range.minBytes);
    QCOMPARE(d->plan()->totalBytes, range.minBytes);  // every tensor at its smallest type
    // Sliding up: the target and the file grow, the predicted KL falls, never over the target;
    // the lines shown follow every move.
    uint64_t lastBytes = 0;
    double lastKl = INFINITY;
    QString lastChoice;
    for (int v = slider->minimum(); v <= slider->maximum(); v += slider->maximum() / 8) {
      slider->setValue(v);
      const qs::AutoquantPlan& p = *d->plan();
      QVERIFY(p.totalBytes <= d->targetBytes());
      QCOMPARE(p.targetBytes, d->targetBytes());
      QVERIFY(p.totalBytes >= lastBytes);
      QVERIFY(p.predictedKl <= lastKl + 1e-12);
      QVERIFY2(d->choiceText().contains(QString::number(p.bpw(), 'f', 4)), qPrintable(d->choiceText()));
      for (const auto& [name, count] : qs::autoquantTypeCounts(p))
        QVERIFY2(d->typesText().contains(QStringLiteral("%1 ×%2").arg(QString::fromStdString(name)).arg(count)),
                 qPrintable(d->typesText()));
      auto* bpw = d->findChild<QDoubleSpinBox*>(QStringLiteral("aqBpw"));
      QVERIFY(std::abs(bpw->value() - 8.0 * double(d->targetBytes()) / double(p.parameters)) <= 0.0005 + 1e-9);
      if (v > slider->minimum()) QVERIFY(d->choiceText() != lastChoice || p.totalBytes == lastBytes);
      lastBytes = p.totalBytes;
      lastKl = p.predictedKl;
      lastChoice = d->choiceText();
    }
    slider->setValue(slider->maximum());
    QCOMPARE(d->targetBytes(), range.maxBytes);
    QVERIFY(d->plan()->totalBytes > range.minBytes);
    // The table lists every tensor with its chosen type.
    auto* table = d->findChild<QTableWidget*>(QStringLiteral("aqTable"));
    QCOMPARE(size_t(table->rowCount()), d->plan()->tensors.size());

    // The BPW box sets the target as --target-bpw does.
    auto* bpwBox = d->findChild<QDoubleSpinBox*>(QStringLiteral("aqBpw"));
    QSignalSpy typed(bpwBox, &QDoubleSpinBox::valueChanged);
    bpwBox->setValue((range.minBpw + range.maxBpw) / 2);
    QCOMPARE(typed.count(), 1);
    const uint64_t midBytes = qs::autoquantBytesForBpw(*d->plan(), typed.first().first().toDouble());
    QCOMPARE(d->targetBytes(), midBytes);
    QVERIFY(d->plan()->totalBytes <= midBytes && d->plan()->totalBytes > range.minBytes);

    // "Match a GGUF…": the source's own tensor bytes, when the candidates reach them.
    {
      QSignalSpy chosen(d, &AutoquantDialog::choiceChanged);
      const uint64_t source = qs::openModel(model_.toStdString())->tensorDataBytes();
      d->matchFile(model_);
      if (source >= range.minBytes && source <= range.maxBytes) {
        QVERIFY(chosen.wait(10'000));
        QCOMPARE(d->targetBytes(), source);
      } else {
        QTRY_VERIFY_WITH_TIMEOUT(d->statusText().contains("outside what the candidates reach"), 10'000);
      }
      d->setTargetBytes(midBytes);
    }

    // Changing what the measure rests on blocks the export until measured again (or set back).
    auto* q8 = d->findChild<QCheckBox*>(QStringLiteral("aqType_Q8_0"));
    q8->setChecked(!q8->isChecked());
    QVERIFY(!exportButton->isEnabled());
    QVERIFY(!d->exportNow());
    QVERIFY2(d->statusText().contains("Measure Again"), qPrintable(d->statusText()));
    q8->setChecked(!q8->isChecked());
    QVERIFY(exportButton->isEnabled());

    // Export: refine, check and write as one job; the file holds the exported plan's bytes.
    const QString out = outDir_ + "/measure-slide.gguf";
    d->setOutput(out);
    d->findChild<QCheckBox*>(QStringLiteral("aqPlanJson"))->setChecked(true);
    const uint64_t measuredOptions = d->plan()->refinedOptions;
    QSignalSpy exported(d, &AutoquantDialog::exported);
    exportButton->click();
    QVERIFY(d->busy());
    QVERIFY(!exportButton->isEnabled() && !slider->isEnabled());
    QVERIFY(exported.wait(kJobMs));
    QVERIFY(!d->busy());
    const qs::AutoquantPlan* plan = d->exportedPlan();
    QVERIFY(plan);
    QCOMPARE(d->exportedPath(), out);
    const auto file = qs::openModel(out.toStdString());
    QCOMPARE(file->tensorDataBytes(), plan->totalBytes);
    QVERIFY(plan->totalBytes <= midBytes);
    QCOMPARE(plan->targetBytes, midBytes);
    QCOMPARE(file->tensors().size(), plan->tensors.size());
    for (size_t i = 0; i < plan->tensors.size(); ++i) {
      const qs::AutoquantTensor& t = plan->tensors[i];
      if (t.chosen >= 0) QCOMPARE(file->tensors()[i].dtype, t.options[size_t(t.chosen)].type);
    }
    QVERIFY(plan->checkedKl >= 0);  // the check ran (held-out tokens or the calibration's)
    QVERIFY2(d->statusText().startsWith("Wrote " + out), qPrintable(d->statusText()));
    QVERIFY(d->statusText().contains(QString::number(plan->bpw(), 'f', 4)));
    QVERIFY(d->findChild<QPushButton*>(QStringLiteral("aqOpen"))->isVisible());
    // The plan JSON beside it says the same bytes; the dialog's measured plan was not refined.
    std::ifstream js((outDir_ + "/measure-slide.plan.json").toStdString());
    QVERIFY(js.good());
    QCOMPARE(nlohmann::json::parse(js)["tensor_bytes"].get<uint64_t>(), plan->totalBytes);
    QCOMPARE(uint64_t(d->plan()->refinedOptions), measuredOptions);

    // The file exists now: a second export needs Overwrite.
    QVERIFY(!d->exportNow());
    QVERIFY2(d->statusText().contains("tick Overwrite"), qPrintable(d->statusText()));
    // …and the model being read is never the output.
    d->setOverwrite(true);
    d->setOutput(model_);
    QVERIFY(!d->exportNow());
    QVERIFY2(d->statusText().contains("model being read"), qPrintable(d->statusText()));
    d->close();
  }

  // Cancel during the measure: no plan, no file, no job left; the dialog measures again.
  void cancelDuringMeasure() {
    MainWindow w;
    AutoquantDialog* d = openDialog(w, model_);
    QVERIFY(d);
    const QString out = outDir_ + "/cancelled-measure.gguf";
    d->setOutput(out);
    const QStringList before = filesIn(outDir_);
    auto* cancelButton = d->findChild<QPushButton*>(QStringLiteral("aqCancel"));
    QVERIFY(!cancelButton->isEnabled());
    // Cancel as soon as the job runs (a job cancelled after it finished delivers nothing either).
    connect(w.jobs(), &JobRunner::jobStarted, cancelButton, [cancelButton] { cancelButton->click(); });
    QSignalSpy cancelled(d, &AutoquantDialog::cancelled);
    d->setCalibrationText(calib_);
    d->setContext(64);
    QVERIFY(d->measure());
    QVERIFY(cancelButton->isEnabled());
    QSignalSpy progress(w.jobs(), &JobRunner::jobProgress);
    QVERIFY(cancelled.wait(kJobMs));
    disconnect(w.jobs(), &JobRunner::jobStarted, cancelButton, nullptr);
    qInfo("the measure reported %lld progress steps before the cancel ended it", qlonglong(progress.count()));
    QVERIFY(!d->busy());
    QVERIFY(!d->plan());
    QVERIFY2(d->statusText().contains("cancelled"), qPrintable(d->statusText()));
    QVERIFY(!cancelButton->isEnabled());
    QVERIFY(d->findChild<QPushButton*>(QStringLiteral("aqMeasure"))->isEnabled());
    QVERIFY(!d->findChild<QSlider*>(QStringLiteral("aqSlider"))->isEnabled());
    QCOMPARE(filesIn(outDir_), before);
    QVERIFY(w.jobs()->waitIdle(kJobMs));
    // Usable after: the same dialog measures and exports.
    QVERIFY(measure(d));
    QVERIFY(d->plan());
    QSignalSpy exported(d, &AutoquantDialog::exported);
    QVERIFY(d->exportNow());
    QVERIFY(exported.wait(kJobMs));
    QCOMPARE(qs::openModel(out.toStdString())->tensorDataBytes(), d->exportedPlan()->totalBytes);
    d->close();
  }

  // Cancel during the export. Queued behind another job, the export is cancelled before it
  // starts: nothing written, the measured plan and the dialog as they were. Then a cancel as soon
  // as the export runs: the status says what is on disk, and it is so.
  void cancelDuringExport() {
    MainWindow w;
    AutoquantDialog* d = openDialog(w, model_);
    QVERIFY(d);
    QVERIFY(measure(d));
    const uint64_t target = d->targetBytes();
    const QString out = outDir_ + "/cancelled-export.gguf";
    d->setOutput(out);
    const QStringList before = filesIn(outDir_);
    std::atomic<bool> release{false};
    w.jobs()->submit(QStringLiteral("test-blocker"), QStringLiteral("blocker"), [&release](const qs::JobContext&) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return std::function<void()>();
    });
    QSignalSpy cancelled(d, &AutoquantDialog::cancelled);
    QVERIFY(d->exportNow());
    QVERIFY(d->busy());
    d->findChild<QPushButton*>(QStringLiteral("aqCancel"))->click();
    QVERIFY(cancelled.count() == 1 || cancelled.wait(kJobMs));
    release = true;
    QVERIFY(w.jobs()->waitIdle(kJobMs));
    QVERIFY(!d->busy());
    QVERIFY2(d->statusText().contains("nothing written"), qPrintable(d->statusText()));
    QCOMPARE(filesIn(outDir_), before);
    QVERIFY(d->plan());
    QCOMPARE(d->targetBytes(), target);
    QVERIFY(d->findChild<QPushButton*>(QStringLiteral("aqExport"))->isEnabled());

    auto* cancelButton = d->findChild<QPushButton*>(QStringLiteral("aqCancel"));
    connect(w.jobs(), &JobRunner::jobStarted, cancelButton, [cancelButton] { cancelButton->click(); });
    QVERIFY(d->exportNow());
    QVERIFY(cancelled.wait(kJobMs));
    disconnect(w.jobs(), &JobRunner::jobStarted, cancelButton, nullptr);
    QVERIFY(w.jobs()->waitIdle(kJobMs));
    qInfo("after a cancel as the export started: %s", qPrintable(d->statusText()));
    if (d->statusText().contains("nothing written")) {
      QCOMPARE(filesIn(outDir_), before);  // no file, no temporary
    } else {
      // The job had written the file before the cancel reached it: complete, and said so.
      QVERIFY2(d->statusText().contains("was written"), qPrintable(d->statusText()));
      QVERIFY(qs::openModel(out.toStdString())->tensorDataBytes() <= target);
    }
    // Usable after: the export runs to the end.
    d->setOverwrite(true);
    QSignalSpy exported(d, &AutoquantDialog::exported);
    QVERIFY(d->exportNow());
    QVERIFY(exported.wait(kJobMs));
    QCOMPARE(qs::openModel(out.toStdString())->tensorDataBytes(), d->exportedPlan()->totalBytes);
    d->close();
  }

  // A model that is not a GGUF (stories260K, a llama2.c checkpoint): the dialog says why and
  // nothing starts.
  void notAGgufSaysWhy() {
    MainWindow w;
    AutoquantDialog* d = openDialog(w, qs::test::stories260K());
    QVERIFY(d);
    QVERIFY2(d->unavailableReason().contains("GGUF"), qPrintable(d->unavailableReason()));
    auto* reason = d->findChild<QLabel*>(QStringLiteral("aqReason"));
    QTRY_VERIFY(reason->isVisible());
    QCOMPARE(reason->text(), d->unavailableReason());
    QVERIFY(!d->findChild<QPushButton*>(QStringLiteral("aqMeasure"))->isEnabled());
    QVERIFY(!d->measure());
    QVERIFY(!d->busy());
    QVERIFY(!w.jobs()->busy());
    d->close();
  }
};

QTEST_MAIN(TestAutoquantDialog)
#include "test_autoquant_dialog.moc"
