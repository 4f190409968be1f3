// GUI smoke test: the main window opens the bundled default model, shows its tree and summary,
// survives a bad file with a dialog, and grabs to a non-blank PNG.
#include <QDir>
#include <QDialog>
#include <QComboBox>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QSettings>
#include <QTextBrowser>
#include <QTreeView>
#include <QtTest>
#include <QSortFilterProxyModel>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QMenuBar>
#include <numeric>
#include <thread>
#include <qcustomplot.h>

#include <QAbstractItemModelTester>
#include <QDockWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSlider>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QUndoStack>
#include <sys/stat.h>

#include "core/analysis/sensitivity.h"
#include "app/gui/gui_main.h"
#include "app/gui/job_runner.h"
#include "app/gui/workspace.h"
#include "core/plan/plan_editor.h"
#include "core/plan/plan_figures.h"
#include "widgets/histogram_plot.h"
#include "widgets/layer_view.h"
#include "widgets/model_tree_model.h"
#include "widgets/plan_editor_view.h"
#include "widgets/run_view.h"
#include "widgets/sensitivity_view.h"
#include "app/gui/main_window.h"
#include "core/model/model_file.h"
#include "core/util/datasets.h"
#include "tests/test_util.h"

using qs::app::MainWindow;

namespace {
// Shows the window, opens stories260K and waits for the model and the compute backend (jobs need
// both).
bool openStoriesReady(MainWindow& w, QSignalSpy& loaded) {
  w.show();
  w.openModel(qs::test::stories260K());
  if (!loaded.wait(10'000)) return false;
  return QTest::qWaitFor([&w] { return bool(w.backend()); }, 10'000);
}
}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_;
  QTemporaryDir homeDir_;

 private slots:
  void initTestCase() {
    // Tests never touch the user's settings.
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
    // ctest runs each test function as a process of its own, in parallel: each gets its own
    // home, so one process's clean start never deletes the sessions another is writing.
    qputenv("HOME", homeDir_.path().toLocal8Bit());
    QStandardPaths::setTestModeEnabled(true);  // sessions in the test data folder, started clean
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/sessions").removeRecursively();
  }

  void opensDefaultModel() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    w.openModel(QString::fromStdString(qs::defaultModelPath()));
    QVERIFY(loaded.wait(10'000));
    QVERIFY(w.model());
    QCOMPARE(w.model()->parameterCount(), uint64_t(260'032));
    QCOMPARE(w.modelTree()->model()->rowCount(), 8);
    auto* summary = w.findChild<QTextBrowser*>("modelSummary");
    QVERIFY(summary->toPlainText().contains("260,032"));
    QVERIFY(summary->toPlainText().contains("hidden_dim"));
    // The backend label resolves off the GUI thread.
    auto* backend = w.findChild<QLabel*>("backendLabel");
    QTRY_VERIFY_WITH_TIMEOUT(!backend->text().startsWith("Detecting"), 10'000);
    QVERIFY(backend->text().contains("CPU") || backend->text().contains("CUDA"));
    QVERIFY(QSettings().value("recentModels").toStringList().size() == 1);
  }

  // File → Open Bundled Model lists the manifest's models; the GPT-2 one opens from it.
  void opensABundledModelFromTheMenu() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    auto* menu = w.findChild<QMenu*>("bundledModelsMenu");
    QVERIFY(menu);
    QStringList titles;
    QAction* gpt2 = nullptr;
    for (QAction* a : menu->actions()) {
      titles << a->text();
      QVERIFY2(a->isEnabled(), qPrintable(a->text()));
      if (a->text().contains("shakespeare-gpt2")) gpt2 = a;
    }
    QVERIFY2(titles.size() >= 2 && titles.first().contains("stories260K"), qPrintable(titles.join(", ")));
    QVERIFY(gpt2);
    menu->popup(w.mapToGlobal(QPoint(40, 40)));
    QTest::qWait(50);
    QDir().mkpath(QStringLiteral(QS_BINARY_DIR) + "/screenshots");
    QVERIFY(menu->grab().save(QStringLiteral(QS_BINARY_DIR) + "/screenshots/bundled_models_menu.png"));
    menu->hide();
    gpt2->trigger();
    QVERIFY(loaded.wait(10'000));
    QVERIFY(w.modelPath().endsWith("shakespeare-gpt2/model.safetensors"));
    QVERIFY(w.model());
  }

  // Analysis → Evaluation Text… offers the manifest's texts, titled, but not a model's own
  // calibration slice (cut from its training text).
  void evaluationTextDialogListsBundledTexts() {
    MainWindow w;
    w.show();
    w.chooseEvalText();
    auto* d = w.findChild<QDialog*>("evalTextDialog");
    QVERIFY(d);
    auto* box = d->findChild<QComboBox*>();
    QVERIFY(box);
    QStringList items;
    for (int i = 0; i < box->count(); ++i) {
      items << box->itemText(i);
      QVERIFY2(!box->itemData(i, Qt::ToolTipRole).toString().isEmpty(), qPrintable(box->itemText(i)));
    }
    QVERIFY2(items.filter("tinystories_validation_head.txt").size() == 1, qPrintable(items.join("\n")));
    QVERIFY(items.filter("shakespeare-gpt2/heldout.txt").size() == 1);
    QVERIFY(items.filter("calib.txt").isEmpty());
    QDir().mkpath(QStringLiteral(QS_BINARY_DIR) + "/screenshots");
    QVERIFY(d->grab().save(QStringLiteral(QS_BINARY_DIR) + "/screenshots/eval_text_dialog.png"));
    d->reject();
  }

  void badFileShowsDialogAndKeepsModel() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QSignalSpy failed(&w, &MainWindow::modelLoadFailed);
    w.show();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    QTemporaryDir dir;
    const QString bad = qs::test::writeFile(dir, "broken.gguf", QByteArray("GGUF\x03\x00", 6));
    w.openModel(bad);
    QVERIFY(failed.wait(10'000));
    QVERIFY(failed.first().at(1).toString().contains(bad));
    QVERIFY(w.errorDialog() && w.errorDialog()->isVisible());
    QVERIFY(w.errorDialog()->informativeText().contains(bad));
    QVERIFY(w.model());  // the previous model is still loaded
    QCOMPARE(w.modelPath(), qs::test::stories260K());
    w.errorDialog()->accept();
  }


  // Issue 28: a FIFO as model never blocks the GUI thread — the load is refused (naming the
  // FIFO) while the event loop keeps running, and the next open works.
  void fifoModelNeverBlocksTheWindow() {
    QTemporaryDir dir;
    const QString fifo = dir.filePath("model.gguf");
    QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QSignalSpy failed(&w, &MainWindow::modelLoadFailed);
    w.show();
    QElapsedTimer t;
    t.start();
    w.openModel(fifo);
    QVERIFY(t.elapsed() < 500);  // openModel returns at once…
    QCOMPARE(failed.size(), 0);  // …before the answer, which comes through the event loop
    QVERIFY(failed.wait(10'000));
    QVERIFY2(failed.first().at(1).toString().contains("FIFO"), qPrintable(failed.first().at(1).toString()));
    w.errorDialog()->accept();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
  }

  // A newer open never waits for an older one, and the older result is dropped.
  void aNewerOpenSupersedesTheOlder() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    const QString gpt2 = qs::test::datasetPath("models/shakespeare-gpt2");
    w.openModel(gpt2);
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    QTest::qWait(1000);  // time for the first load to finish and be dropped
    QCOMPARE(loaded.size(), 1);
    QCOMPARE(loaded.first().at(0).toString(), qs::test::stories260K());
    QCOMPARE(w.modelPath(), qs::test::stories260K());
  }

  // "Stop waiting" leaves a load behind: the previous model stays, the late result is dropped.
  void stopWaitingAbandonsTheLoad() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QSignalSpy failed(&w, &MainWindow::modelLoadFailed);
    w.show();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    w.openModel(qs::test::datasetPath("models/shakespeare-gpt2"));
    QVERIFY(w.loading());
    w.stopWaitingForLoad();
    QVERIFY(!w.loading());
    QCOMPARE(failed.size(), 1);
    QTest::qWait(1500);
    QCOMPARE(loaded.size(), 1);
    QCOMPARE(w.modelPath(), qs::test::stories260K());
    QVERIFY(!w.openingLabel()->isVisible());
  }

  // Closing the window while a job runs ends it promptly (the job sees Cancel).
  void closeWhileAJobRunsIsPrompt() {
    auto* w = new MainWindow;
    QSignalSpy loaded(w, &MainWindow::modelLoaded);
    w->show();
    w->openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    QTRY_VERIFY_WITH_TIMEOUT(w->backend(), 10'000);
    w->workspace()->setEvalText(qs::test::datasetPath("text/tinystories_validation_head.txt"), 0);
    w->workspace()->runSensitivity();
    QTRY_VERIFY_WITH_TIMEOUT(w->jobs()->busy(), 5'000);
    QTest::qWait(300);
    QElapsedTimer t;
    t.start();
    w->close();
    delete w;  // joins the job thread
    QVERIFY2(t.elapsed() < 5'000, qPrintable(QString::number(t.elapsed())));
  }

  // Issue 27 item 1: the layer view's format always fits the layer (largest group dividing K).
  void layerViewDefaultFitsTheLayer() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QSignalSpy analysed(&w, &MainWindow::layerAnalysed);
    w.show();
    w.layerView()->setFormatText("int4-g128-sym");
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    w.selectTensor("layers.0.attention.wq.weight");  // K = 64
    QVERIFY(analysed.wait(10'000));
    QVERIFY(!w.findChild<QLabel*>("layerError")->isVisible());
    QCOMPARE(QString::fromStdString(qs::formatToString(w.layerView()->analysis()->format)), QString("int4-g64-sym"));
    QVERIFY(w.layerView()->formatNote().contains("K = 64"));
    w.selectTensor("layers.0.feed_forward.w2.weight");  // K = 172: no group divides it
    QVERIFY(analysed.wait(10'000));
    QCOMPARE(QString::fromStdString(qs::formatToString(w.layerView()->analysis()->format)), QString("int4-ch-sym"));
    QVERIFY(!w.findChild<QLabel*>("layerError")->isVisible());
    // The plots show the data: tensor histogram with both series, cell plot, channel bars.
    QCOMPARE(w.layerView()->tensorPlot()->seriesCount(), 2);
    // The plan's defaults fit every layer too: every row set to INT4 is valid.
    auto* pe = w.workspace()->planEditor();
    std::vector<int> all(size_t(pe->table()->model()->rowCount()));
    std::iota(all.begin(), all.end(), 0);
    QVERIFY(pe->setField(all, qs::PlanField::Weight, "int4-sym"));
    QVERIFY2(pe->document()->figures().invalidLayers == 0,
             qPrintable(QString::fromStdString(pe->document()->resolved().layers[0].problemField + ": " +
                                               pe->document()->resolved().layers[0].problem)));
  }

  // Issue 27 item 5: one name per layer in the tree, the Plan tab and the heatmap, unique for GPT-2.
  void oneLayerNameEverywhere() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    w.openModel(qs::test::datasetPath("models/shakespeare-gpt2"));
    QVERIFY(loaded.wait(10'000));
    QAbstractItemModelTester tester(w.modelTree()->model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSet<QString> treeLayers;
    QAbstractItemModel* tm = w.modelTree()->model();
    for (int g = 0; g < tm->rowCount(); ++g)
      for (int r = 0; r < tm->rowCount(tm->index(g, 0)); ++r) {
        const QString n = tm->index(r, 0, tm->index(g, 0)).data().toString();
        if (n.startsWith("blocks.") || n == "head") {
          QVERIFY2(!treeLayers.contains(n), qPrintable(n));
          treeLayers.insert(n);
        }
      }
    QAbstractItemModel* pm = w.workspace()->planEditor()->table()->model();
    QSet<QString> planLayers;
    for (int r = 0; r < pm->rowCount(); ++r) planLayers.insert(pm->index(r, 0).data().toString());
    QCOMPARE(planLayers.size(), pm->rowCount());
    QCOMPARE(treeLayers, planLayers);
  }

  // Issue 27 item 6: nothing of the previous model stays: tree filter, runs, speed, tables.
  void nothingStaleAfterAnotherModel() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.show();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    auto* filter = w.findChild<QLineEdit*>("modelFilter");
    filter->setText("w2");
    QCOMPARE(w.modelTree()->model()->rowCount(), 5);
    qs::widgets::RunSpeed sp;
    sp.layers << "blocks.0.attn.q";
    sp.speedup = {2.0};
    w.workspace()->runView()->setSpeed("plan", sp);
    w.openModel(qs::test::datasetPath("models/shakespeare-gpt2"));
    QVERIFY(loaded.wait(10'000));
    QVERIFY(filter->text().isEmpty());
    auto* proxy = qobject_cast<QSortFilterProxyModel*>(w.modelTree()->model());
    QCOMPARE(proxy->rowCount(), proxy->sourceModel()->rowCount());  // nothing filtered out
    QCOMPARE(w.workspace()->runView()->runCount(), 0);
    auto ticks = w.workspace()->runView()->speedPlot()->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
    QVERIFY(!ticks || ticks->ticks().isEmpty());
    QCOMPARE(w.workspace()->sensitivityView()->table().layers.size(), size_t(0));
    QVERIFY(!w.workspace()->planEditor()->budgetSlider()->isEnabled());
  }

  // Issue 27 items 2, 7, 10: the panel keeps its width, job progress survives status messages,
  // menus and shortcuts, F1 help, the metadata table, the report.
  void panelMenusHelpAndReport() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.openModel(qs::test::datasetPath("models/shakespeare-gpt2"));
    QVERIFY(loaded.wait(10'000));
    auto* dock = w.findChild<QDockWidget*>("modelDock");
    QVERIFY(dock->width() >= 320);
    // A long totals line (or Undo label) never squeezes the panel.
    w.tabs()->setCurrentWidget(w.workspace()->planPage());
    w.workspace()->planEditor()->totalsLabel()->setText(QString(400, QChar('x')));
    QTest::qWait(100);
    QVERIFY(dock->width() >= 320);
    QVERIFY(w.width() <= 1280);
    // The job's progress and Cancel stay visible while the status bar shows a message.
    std::atomic<bool> release{false};
    w.jobs()->submit("test", "Waiting", [&release](const qs::JobContext& ctx) -> std::function<void()> {
      while (!release && !ctx.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return {};
    });
    QTRY_VERIFY(w.findChild<QProgressBar*>("jobProgress")->isVisible());
    w.statusBar()->showMessage("a long message from a tab", 10000);
    QVERIFY(w.findChild<QProgressBar*>("jobProgress")->isVisible());
    QVERIFY(w.findChild<QPushButton*>("jobCancel")->isVisible());
    release = true;
    QTRY_VERIFY(!w.jobs()->busy());
    // Menus: Edit and View exist, views switch tabs by Ctrl+N, F1 shows help for the tab.
    QStringList menus;
    for (QAction* a : w.menuBar()->actions()) menus << a->text().remove('&');
    for (const char* m : {"File", "Edit", "View", "Analysis", "Labs", "Help"}) QVERIFY2(menus.contains(m), m);
    QTest::keyClick(&w, Qt::Key_3, Qt::ControlModifier);
    QCOMPARE(w.tabs()->currentWidget(), w.workspace()->sensitivityPage());
    QTest::keyClick(&w, Qt::Key_F1);
    auto* help = w.findChild<QDialog*>("helpDialog");
    QVERIFY(help && help->isVisible());
    QVERIFY(help->findChild<QTextBrowser*>()->toPlainText().contains("Run sensitivity"));
    help->close();
    // The Model tab lists the file's metadata.
    QVERIFY(w.findChild<QTextBrowser*>("modelSummary")->toPlainText().contains("Metadata ("));
    // File → Export Report: one HTML file with the model and the plan.
    QTemporaryDir dir;
    QString err;
    QVERIFY2(w.exportReport(dir.filePath("r.html"), &err), qPrintable(err));
    QFile f(dir.filePath("r.html"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString html = QString::fromUtf8(f.readAll());
    QVERIFY(html.contains("<h2>Model</h2>"));
    QVERIFY(html.contains("<h2>Plan</h2>"));
    QVERIFY(html.contains("blocks.2.mlp.down"));
  }


  // Issue 27 item 9: a cancelled sweep keeps the rows it finished (view and session), and the
  // evaluation text chosen for a model comes back when the model is opened again.
  void cancelledSweepKeepsItsRowsAndTextComesBack() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QVERIFY(openStoriesReady(w, loaded));
    qs::app::Workspace* ws = w.workspace();
    const QString text = qs::test::datasetPath("text/tinyshakespeare.txt");
    ws->setEvalText(text, 3000);
    ws->runSensitivity();
    QTRY_VERIFY_WITH_TIMEOUT(ws->sensitivityView()->measuredCells() >= 7, 300'000);  // a row or more
    w.jobs()->cancelAll();
    QTRY_VERIFY_WITH_TIMEOUT(!w.jobs()->busy(), 30'000);
    QTRY_VERIFY_WITH_TIMEOUT(ws->session().sensitivity.has_value(), 5'000);
    int kl = 0;
    for (const auto& e : ws->session().sensitivity->entries) kl += std::isfinite(e.kl);
    QVERIFY(kl >= 7);
    QVERIFY(kl < int(ws->session().sensitivity->entries.size()));  // partial, as measured
    // Another model, then this one: its text is the one chosen for it.
    w.openModel(qs::test::datasetPath("models/shakespeare-gpt2"));
    QVERIFY(loaded.wait(10'000));
    QVERIFY(ws->evalTextPath() != text || ws->evalTokens() != 3000);
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    QCOMPARE(ws->evalTextPath(), text);
    QCOMPARE(ws->evalTokens(), qint64(3000));
    QVERIFY(ws->session().sensitivity.has_value());  // the partial sweep, restored
    QCOMPARE(ws->sensitivityView()->measuredCells(), kl);
  }

  // Issue 24: the sweep after a cancelled one resumes — it measures only the cells left, says
  // so, and ends with every cell measured. (One format, so that resuming stays cheap.)
  void sweepAfterACancelledOneResumes() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QVERIFY(openStoriesReady(w, loaded));
    qs::app::Workspace* ws = w.workspace();
    ws->setEvalText(qs::test::datasetPath("text/tinyshakespeare.txt"), 3000);
    ws->setSweepFormats({qs::parseQuantFormat("int8-ch-sym")});
    ws->runSensitivity();
    QTRY_VERIFY_WITH_TIMEOUT(ws->sensitivityView()->measuredCells() >= 2, 300'000);
    w.jobs()->cancelAll();
    QTRY_VERIFY_WITH_TIMEOUT(!w.jobs()->busy(), 30'000);
    QTRY_VERIFY_WITH_TIMEOUT(ws->session().sensitivity.has_value(), 5'000);
    int kept = 0;
    for (const auto& e : ws->session().sensitivity->entries) kept += e.klSource == qs::KlSource::Measured;
    QVERIFY(kept >= 2);
    QVERIFY2(qs::cellsWithoutKl(*ws->session().sensitivity) > 0, "the sweep ended before Cancel");
    QSignalSpy said(ws, &qs::app::Workspace::message);
    ws->runSensitivity();
    QTRY_VERIFY_WITH_TIMEOUT(qs::cellsWithoutKl(*ws->session().sensitivity) == 0, 300'000);
    QTRY_VERIFY_WITH_TIMEOUT(!w.jobs()->busy(), 30'000);
    bool resumed = false;
    for (const auto& args : said) resumed |= args.at(0).toString().startsWith(QString("Sweep resumed: %1 cells kept").arg(kept));
    QVERIFY(resumed);
  }

  // Issue 24 in the GUI: once calibrated, the automatic KL mode estimates on the CPU backend (one
  // probe per layer); the summary says what is estimated, and the text line says where the probes
  // ran instead of calling the table stale.
  void automaticSweepEstimatesOnceCalibrated() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QVERIFY(openStoriesReady(w, loaded));
    qs::app::Workspace* ws = w.workspace();
    QCOMPARE(w.findChild<QComboBox*>("sensitivityMode")->currentIndex(), 0);  // automatic
    ws->setEvalText(qs::test::datasetPath("text/tinyshakespeare.txt"), 3000);
    // Wait on the results, not on the runner (a job may not have started yet when it is asked).
    ws->calibrate();
    QTRY_VERIFY_WITH_TIMEOUT(ws->session().calibration.has_value(), 120'000);
    ws->runSensitivity();
    QTRY_VERIFY_WITH_TIMEOUT(ws->session().sensitivity.has_value(), 300'000);
    QTRY_VERIFY_WITH_TIMEOUT(!w.jobs()->busy(), 30'000);
    int measured = 0, estimated = 0;
    for (const auto& e : ws->session().sensitivity->entries) {
      measured += e.klSource == qs::KlSource::Measured;
      estimated += e.klSource == qs::KlSource::Estimated;
    }
    QVERIFY(measured > 0);
    QVERIFY(estimated > measured);  // several formats per layer, one probe
    QVERIFY(w.findChild<QLabel*>("sensitivitySummary")->text().contains(QString("%1 estimated").arg(estimated)));
    const QString label = w.findChild<QLabel*>("evalTextLabel")->text();
    QVERIFY2(!label.contains("run the sweep again"), qPrintable(label));
    if (ws->session().sensitivity->tokens < 3000)
      QVERIFY2(label.contains(QString("probes ran on the first %1").arg(ws->session().sensitivity->tokens)), qPrintable(label));

    // Refine at a budget: the estimated cells that decide the plan there are measured, every
    // cell measured before is kept as it was, and the plan is made again at that budget.
    const qs::SensitivityTable before = *ws->session().sensitivity;
    auto* slider = w.findChild<QSlider*>("planBudget");
    auto* refine = w.findChild<QPushButton*>("planRefine");
    QVERIFY(slider && slider->isEnabled() && refine && refine->isEnabled());
    slider->setValue(slider->maximum() / 2);
    QSignalSpy said(ws, &qs::app::Workspace::message);
    refine->click();
    auto refined = [&] {
      for (const auto& args : said)
        if (args.at(0).toString().startsWith("Refined at")) return true;
      return false;
    };
    QTRY_VERIFY_WITH_TIMEOUT(refined(), 300'000);
    QTRY_VERIFY_WITH_TIMEOUT(!w.jobs()->busy(), 30'000);
    const qs::SensitivityTable& after = *ws->session().sensitivity;
    QCOMPARE(after.entries.size(), before.entries.size());
    int measuredAfter = 0;
    for (size_t k = 0; k < after.entries.size(); ++k) {
      measuredAfter += after.entries[k].klSource == qs::KlSource::Measured;
      if (before.entries[k].klSource == qs::KlSource::Measured) {
        QCOMPARE(after.entries[k].klSource, qs::KlSource::Measured);
        QCOMPARE(after.entries[k].kl, before.entries[k].kl);
      }
    }
    QVERIFY2(measuredAfter > measured, qPrintable(QString("%1 -> %2").arg(measured).arg(measuredAfter)));
    QVERIFY(ws->planEditor()->plan() != nullptr);
  }

  void grabsNonBlankScreenshot() {
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.resize(1200, 760);
    w.show();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QImage img = w.grab().toImage();
    QVERIFY(!img.isNull());
    // Non-blank: many distinct colours (text, tree, headers), not a flat fill.
    QSet<QRgb> colours;
    for (int y = 0; y < img.height(); y += 7)
      for (int x = 0; x < img.width(); x += 7) colours.insert(img.pixel(x, y));
    QVERIFY2(colours.size() > 20, qPrintable(QString::number(colours.size())));
    const QString out = QStringLiteral(QS_BINARY_DIR) + "/screenshots/mainwindow.png";
    QDir().mkpath(QFileInfo(out).path());
    QVERIFY(img.save(out));
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_mainwindow.moc"
