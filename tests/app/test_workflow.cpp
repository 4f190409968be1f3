// The whole workflow in the GUI on stories260K, driven as a user would: open the model, choose a
// short evaluation text, calibrate (activation histograms join the layer view), run the
// sensitivity sweep (the heatmap fills), auto-plan with a budget, edit a layer by hand, undo,
// run the plan (error accumulation per block), measure its speed, and find everything again in
// the autosaved session after reopening. Screenshots of every tab land in screenshots/.
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSlider>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QUndoStack>
#include <QtTest>
#include <numeric>

#include "app/gui/gui_main.h"
#include "app/gui/export_dialog.h"
#include "app/gui/job_runner.h"
#include "app/gui/main_window.h"
#include "app/gui/workspace.h"
#include "app/labs/labs_panel.h"
#include "core/plan/plan_editor.h"
#include "tests/test_util.h"
#include "widgets/layer_view.h"
#include "widgets/histogram_plot.h"
#include "widgets/plan_compare_view.h"
#include "widgets/plan_editor_view.h"
#include "widgets/run_view.h"
#include "widgets/sensitivity_view.h"

using qs::app::MainWindow;
using qs::app::Workspace;

namespace {
void shot(QWidget* w, const char* name) {
  QTest::qWait(150);
  QDir().mkpath(QS_BINARY_DIR "/screenshots");
  QVERIFY(w->grab().save(QString(QS_BINARY_DIR "/screenshots/") + name));
}
// Waits until the job runner has delivered everything queued so far.
bool waitJobs(MainWindow& w, int ms) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < ms) {
    QTest::qWait(50);
    if (!w.jobs()->busy()) {
      QTest::qWait(50);  // the result callables run as queued calls
      if (!w.jobs()->busy()) return true;
    }
  }
  return false;
}
}  // namespace

class TestWorkflow : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_;

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);  // sessions go to the test data folder
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
    // A clean start: no session from an earlier run of this test.
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/sessions").removeRecursively();
  }

  void wholeFlow() {
    QString sessionPath;
    double measuredKl = 0;
    {
      MainWindow w;
      w.resize(1400, 900);
      w.show();
      QSignalSpy loaded(&w, &MainWindow::modelLoaded);
      w.openModel(qs::test::stories260K());
      QVERIFY(loaded.wait(10'000));
      Workspace* ws = w.workspace();
      QTRY_VERIFY_WITH_TIMEOUT(w.backend(), 10'000);
      ws->setEvalText(qs::test::datasetPath("text/tinystories_validation_head.txt"), 1500);

      // Calibrate; the layer view shows the layer's input activations.
      ws->calibrate();
      QVERIFY(waitJobs(w, 60'000));
      QVERIFY(ws->session().calibration.has_value());
      QVERIFY(ws->session().calibration->tokens >= 1000);
      w.selectTensor(QStringLiteral("layers.2.feed_forward.w2.weight"));
      QCOMPARE(w.layerView()->activationPlot()->seriesCount(), 1);
      QVERIFY(waitJobs(w, 20'000));
      shot(&w, "workflow_layer_activations.png");

      // Sensitivity: the heatmap fills (35 linears x 7 formats less the shapes that cannot).
      w.tabs()->setCurrentWidget(ws->sensitivityPage());
      ws->runSensitivity();
      QVERIFY(waitJobs(w, 300'000));
      QVERIFY(ws->session().sensitivity.has_value());
      QVERIFY(ws->sensitivityView()->measuredCells() > 100);
      QVERIFY(std::isfinite(ws->sensitivityView()->spearman()));
      shot(&w, "workflow_sensitivity.png");

      // Plan: budget of 6 bits per weight through the planner; a hand edit; undo.
      w.tabs()->setCurrentWidget(ws->planPage());
      qs::widgets::PlanEditorView* pe = ws->planEditor();
      QVERIFY(pe->budgetSlider()->isEnabled());
      QVERIFY(pe->paretoPoints() > 2);
      QString err;
      QVERIFY2(pe->autoPlanBudgetBits(6.0, &err), qPrintable(err));
      const double bits = pe->document()->figures().bitsPerWeight;
      QVERIFY2(bits <= 6.0 + 1e-9 && bits > 3.0, qPrintable(QString::number(bits)));
      QVERIFY(pe->totalsText().contains("predicted KL"));
      const int before = pe->undoStack()->count();
      QVERIFY(pe->setField({0}, qs::PlanField::Weight, QStringLiteral("int8-sym"), &err));
      QCOMPARE(pe->table()->model()->index(0, 2).data().toString(), QStringLiteral("int8-sym"));
      pe->undoStack()->undo();
      QCOMPARE(pe->undoStack()->index(), before);
      // Compare with a saved variant: the hand edit is the one difference.
      QTemporaryDir plans;
      const QString variant = plans.filePath(QStringLiteral("variant.json"));
      QVERIFY(pe->setField({0}, qs::PlanField::Weight, QStringLiteral("int8-sym"), &err));
      QVERIFY(pe->savePlanFile(variant, &err));
      pe->undoStack()->undo();
      auto* cmp = qobject_cast<qs::widgets::PlanCompareView*>(ws->comparePlanWith(variant));
      QVERIFY(cmp);
      QCOMPARE(cmp->differingLayers(), 1);
      shot(cmp, "workflow_plan_compare.png");
      cmp->close();
      shot(&w, "workflow_plan.png");

      // Run the plan: error per block, KL, perplexity, top-1; then its speed.
      w.tabs()->setCurrentWidget(ws->runPage());
      ws->runPlan(QStringLiteral("budget6"));
      QVERIFY(waitJobs(w, 300'000));
      const qs::widgets::RunCurve* run = ws->runView()->run(QStringLiteral("budget6"));
      QVERIFY(run);
      QCOMPARE(int(run->relL2.size()), 5);  // stories260K has 5 blocks
      for (double e : run->relL2) QVERIFY(std::isfinite(e) && e > 0 && e < 1);
      QVERIFY(run->kl > 0 && run->kl < 1);
      QVERIFY(run->top1 > 0.5 && run->top1 <= 1);
      QVERIFY(run->perplexity > run->basePerplexity * 0.9);
      measuredKl = run->kl;
      ws->measureSpeed(1);
      QVERIFY(waitJobs(w, 300'000));
      QVERIFY(ws->session().speed.has_value());
      QVERIFY(ws->runView()->metricsTable()->item(0, 7)->text().endsWith(QStringLiteral("×")));
      // The whole model's tokens/s with the plan against all-FP16, beside the speed chart.
      QLabel* tps = w.findChild<QLabel*>(QStringLiteral("throughputLabel"));
      QVERIFY(tps);
      w.findChild<QPushButton*>(QStringLiteral("throughputButton"))->click();
      QVERIFY(waitJobs(w, 300'000));
      QVERIFY2(tps->text().contains(QStringLiteral("decode")) && tps->text().contains(QStringLiteral("× FP16")),
               qPrintable(tps->text()));
      QVERIFY2(tps->toolTip().contains(QStringLiteral("kernels, plan")), qPrintable(tps->toolTip()));
      // The same plan with GPTQ on every layer (the plan's method field): the run calibrates on
      // the text after the evaluated tokens, rounds, and lands beside the first run.
      std::vector<int> allRows(pe->document()->resolved().layers.size());
      std::iota(allRows.begin(), allRows.end(), 0);
      QVERIFY2(pe->setField(allRows, qs::PlanField::Method, QStringLiteral("gptq"), &err), qPrintable(err));
      ws->runPlan(QStringLiteral("budget6-gptq"));
      QVERIFY(waitJobs(w, 300'000));
      const qs::widgets::RunCurve* gptqRun = ws->runView()->run(QStringLiteral("budget6-gptq"));
      QVERIFY(gptqRun);
      QVERIFY(gptqRun->kl > 0 && gptqRun->kl < 1.5 * measuredKl);
      QCOMPARE(gptqRun->basePerplexity, ws->runView()->run(QStringLiteral("budget6"))->basePerplexity);
      qInfo("budget6: KL %.5f rtn, %.5f gptq", measuredKl, gptqRun->kl);
      // Calibration, sweep, two runs and tokens/s ran on the engine's one runtime, re-planned.
      QCOMPARE(ws->runtimeBuilds(), 1);
      shot(&w, "workflow_run.png");
      // A lab that runs the model with plans (15: mixed precision) runs on the same engine: no
      // runtime of its own.
      auto* labs = w.findChild<qs::labs::LabsPanel*>();
      QVERIFY(labs);
      QSignalSpy labDone(labs, &qs::labs::LabsPanel::experimentFinished);
      labs->openLab(15);
      QTRY_VERIFY_WITH_TIMEOUT(labDone.count() > 0, 120'000);
      QVERIFY(labs->result());
      QCOMPARE(ws->runtimeBuilds(), 1);

      // Export: the plan for llama-quantize and the weights as GGUF. stories260K's mlp.down
      // (K = 172) cannot be Q4_0/Q8_0: refused until "nearest" is ticked, then F16 with a warning.
      QTemporaryDir out;
      qs::app::ExportDialog* d = w.openExportDialog();
      QVERIFY(d);
      d->setTarget(QStringLiteral("llama-quantize"));
      d->setOutput(out.filePath(QStringLiteral("args.txt")));
      // The budget plan has layers GGUF has no type for (K = 172 groups): refused, listed first.
      QVERIFY(!d->canWrite());
      QVERIFY2(d->previewText().contains(QStringLiteral("Refus")), qPrintable(d->previewText()));
      d->setNearest(true);
      QVERIFY2(d->canWrite(), qPrintable(d->previewText()));
      QVERIFY(d->exportNow());
      QVERIFY(QFileInfo(out.filePath(QStringLiteral("args.txt"))).size() > 0);
      d->setTarget(QStringLiteral("gguf"));
      d->setOutput(out.filePath(QStringLiteral("m.gguf")));
      QVERIFY2(d->canWrite(), qPrintable(d->previewText()));
      QVERIFY(d->previewText().contains(QStringLiteral("Warnings")));
      shot(d, "workflow_export_dialog.png");
      QVERIFY(d->previewText().contains(QStringLiteral("rounded on the calibration text")));  // GPTQ
      QVERIFY(d->exportNow());
      QVERIFY(waitJobs(w, 300'000));
      QVERIFY(QFileInfo(out.filePath(QStringLiteral("m.gguf"))).size() > 100'000);
      d->close();

      // Cancel leaves things as they were: a sweep cancelled at once changes nothing.
      const auto sens = ws->session().sensitivity->entries.size();
      ws->runSensitivity();
      w.jobs()->cancelAll();
      QVERIFY(waitJobs(w, 60'000));
      QCOMPARE(ws->session().sensitivity->entries.size(), sens);

      sessionPath = ws->sessionPath();
      QVERIFY2(ws->saveSessionNow(&err), qPrintable(err));
    }
    // Reopen: the session brings everything back without recomputing.
    MainWindow w2;
    w2.show();
    QSignalSpy loaded(&w2, &MainWindow::modelLoaded);
    w2.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    Workspace* ws = w2.workspace();
    QCOMPARE(ws->sessionPath(), sessionPath);
    QVERIFY(ws->session().calibration.has_value());
    QVERIFY(ws->session().sensitivity.has_value());
    QVERIFY(ws->session().runs.count("budget6"));
    const qs::widgets::RunCurve* run = ws->runView()->run(QStringLiteral("budget6"));
    QVERIFY(run);
    QCOMPARE(run->kl, measuredKl);
    QVERIFY(ws->planEditor()->document()->figures().bitsPerWeight <= 6.0 + 1e-9);  // the plan came back
  }
};

QTEST_MAIN(TestWorkflow)
#include "test_workflow.moc"
