// The Labs panel (issue 13): every lab opens with its text, runs its experiment on stories260K,
// accepts a correct answer and rejects a wrong one, and is photographed
// (build/screenshots/labs/labNN.png). Where the answer can be read off the numbers the lab shows
// (tables), the test reads it the way a student would and checks that the checker agrees.
// Progress survives a new panel (QSettings); a running experiment can be cancelled.
#include <QDir>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QTableWidget>
#include <QTabWidget>
#include <QTextBrowser>
#include <QtTest>
#include <cmath>

#include "app/gui/gui_main.h"
#include "app/gui/main_window.h"
#include "app/labs/lab_types.h"
#include "app/labs/labs_panel.h"
#include "core/engine/engine.h"
#include "core/model/model_file.h"
#include "kernels/backend/backend.h"
#include "tests/test_util.h"

using qs::labs::LabsPanel;

namespace {

std::string cell(const QTableWidget* t, int row, int col) {
  const QTableWidgetItem* i = t->item(row, col);
  return i ? i->text().toStdString() : std::string();
}

}  // namespace

class TestLabs : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_;
  std::shared_ptr<const qs::ModelFile> model_;

  // An engine of the model on the CPU backend, as the workspace gives the panel in the app (one
  // per panel: each panel here runs its jobs on a worker of its own).
  std::shared_ptr<qs::Engine> engine() const { return std::make_shared<qs::Engine>(model_, qs::createCpuBackend()); }

  // Opens lab `n` in a fresh panel, waits for its experiment, checks the text and the checker,
  // and saves a screenshot. Returns the panel for further checks.
  std::unique_ptr<LabsPanel> openAndCheck(int n) {
    auto panel = std::make_unique<LabsPanel>(nullptr);
    panel->resize(1600, 1000);
    panel->show();
    panel->setEngine(engine());
    QSignalSpy done(panel.get(), &LabsPanel::experimentFinished);
    QSignalSpy failed(panel.get(), &LabsPanel::experimentFailed);
    panel->openLab(n);
    [&] { QTRY_VERIFY_WITH_TIMEOUT(done.count() + failed.count() > 0, 60'000); }();
    if (!failed.isEmpty()) qWarning() << "lab" << n << "failed:" << failed.first().at(1).toString();
    [&] {
      QCOMPARE(failed.count(), 0);
      QCOMPARE(panel->currentLab(), n);
      const QString text = panel->textView()->toPlainText();
      QVERIFY2(text.contains(QStringLiteral("Key idea")), qPrintable(text.left(200)));
      QVERIFY(text.size() > 400);
      const auto* r = panel->result();
      QVERIFY(r);
      QVERIFY(!r->summary.empty());
      QVERIFY(!r->exercisePrompt.empty());
      QVERIFY(r->check);
      QVERIFY(panel->table()->rowCount() > 0);
    }();
    return panel;
  }

  void expectChecker(LabsPanel* panel, int n) {
    const auto* r = panel->result();
    QVERIFY(r);
    if (r->settingsExercise) {
      // The settings that fail, then the settings that pass: each needs its own run.
      for (bool good : {false, true}) {
        const qs::labs::LabParams ps = good ? r->answerParams : r->wrongParams;
        for (const auto& [k, v] : ps) QVERIFY2(panel->setParam(k, v) || true, k.c_str());
        QSignalSpy done(panel, &LabsPanel::experimentFinished);
        panel->runExperiment();
        QTRY_VERIFY_WITH_TIMEOUT(done.count() > 0, 60'000);
        r = panel->result();
        const auto c = panel->check("");
        QVERIFY2(c.correct == good, c.message.c_str());
      }
    } else {
      QVERIFY(!r->answerKey.empty());
      QVERIFY(r->answerKey != r->wrongAnswer);
      const auto wrong = panel->check(r->wrongAnswer);
      QVERIFY2(!wrong.correct, (r->wrongAnswer + ": " + wrong.message).c_str());
      QVERIFY(!LabsPanel::isDone(n));
      const auto right = panel->check(r->answerKey);
      QVERIFY2(right.correct, (r->answerKey + ": " + right.message).c_str());
    }
    QVERIFY(LabsPanel::isDone(n));
    QVERIFY(panel->list()->currentItem()->text().startsWith(QStringLiteral("✓")));
  }

  void screenshot(LabsPanel* panel, int n) {
    QVERIFY(QTest::qWaitForWindowExposed(panel));
    QTest::qWait(50);
    const QString dir = QStringLiteral(QS_BINARY_DIR) + QStringLiteral("/screenshots/labs");
    QDir().mkpath(dir);
    const QImage img = panel->grab().toImage();
    QVERIFY(!img.isNull());
    QSet<QRgb> colours;
    for (int y = 0; y < img.height(); y += 9)
      for (int x = 0; x < img.width(); x += 9) colours.insert(img.pixel(x, y));
    QVERIFY(colours.size() > 20);
    QVERIFY(img.save(dir + QStringLiteral("/lab%1.png").arg(n, 2, 10, QLatin1Char('0'))));
  }

  void runLab(int n) {
    auto panel = openAndCheck(n);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), n);
    expectChecker(panel.get(), n);
  }

 private slots:
  void initTestCase() {
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
    QSettings().clear();
    model_ = qs::openModel(qs::test::stories260K().toStdString());
    // Smaller timing shapes keep the suite fast on 2 cores (the controls offer them).
    QSettings s;
    s.setValue("labs/params/8/size", "1024");
    s.setValue("labs/params/10/size", "256");
    s.setValue("labs/params/12/size", "256");
    s.setValue("labs/params/15/tokens", "128");
    s.setValue("labs/params/17/steps", "32");
  }
  void init() { LabsPanel::resetProgress(); }

  void listsAllChapters() {
    LabsPanel panel(nullptr);
    QCOMPARE(panel.list()->count(), 18);
    QCOMPARE(int(qs::labs::labCatalog().size()), 18);
    int interactive = 0;
    for (int i = 0; i < 18; ++i) {
      QCOMPARE(qs::labs::labCatalog()[size_t(i)].number, i + 1);
      interactive += qs::labs::labCatalog()[size_t(i)].fullyInteractive;
      QFile f(QString::fromStdString(qs::labs::labTextResource(i + 1)));
      QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(f.fileName()));
    }
    QCOMPARE(interactive, 12);
    for (int n : {1, 2, 3, 4, 5, 7, 10, 12, 13, 14, 15, 18})
      QVERIFY(qs::labs::labCatalog()[size_t(n - 1)].fullyInteractive);
  }

  void lab01() { runLab(1); }
  void lab02() {
    auto panel = openAndCheck(2);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), 2);
    // Read the answer off the table: the fewest bits per weight with SQNR ≥ target.
    const double target = std::stod(panel->params().at("target"));
    std::string best;
    double bestBits = INFINITY;
    for (int r = 0; r < panel->table()->rowCount(); ++r) {
      const std::string sq = cell(panel->table(), r, 2);
      if (sq.rfind("n/a", 0) == 0) continue;
      const double bits = std::stod(cell(panel->table(), r, 4));
      if (std::stod(sq) >= target && bits < bestBits) bestBits = bits, best = cell(panel->table(), r, 0);
    }
    if (best.empty()) best = "none reaches it";
    QCOMPARE(panel->result()->answerKey, best);
    expectChecker(panel.get(), 2);
  }
  void lab03() { runLab(3); }
  void lab04() { runLab(4); }
  void lab05() { runLab(5); }
  void lab06() { runLab(6); }
  void lab07() { runLab(7); }
  void lab08() { runLab(8); }
  void lab09() {
    auto panel = openAndCheck(9);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), 9);
    // GB/s = bytes / time, from the tiled row of the table.
    const double bytes = std::stod(cell(panel->table(), 1, 2)), micros = std::stod(cell(panel->table(), 1, 1));
    QVERIFY(panel->check(std::to_string(bytes / micros / 1e3)).correct);
    QVERIFY(!panel->check(std::to_string(bytes / micros)).correct);  // forgot the units
    LabsPanel::resetProgress();
    expectChecker(panel.get(), 9);
  }
  void lab10() { runLab(10); }
  void lab11() { runLab(11); }
  void lab12() {
    auto panel = openAndCheck(12);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), 12);
    // The first M from which the W8A8/FP16 ratio column stays below 1.
    std::string first = "never in this range";
    for (int r = panel->table()->rowCount(); r-- > 0;) {
      if (std::stod(cell(panel->table(), r, 5)) < 1.0)
        first = cell(panel->table(), r, 0);
      else
        break;
    }
    QCOMPARE(panel->result()->answerKey, first);
    expectChecker(panel.get(), 12);
  }
  void lab13() {
    auto panel = openAndCheck(13);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), 13);
    std::string best;
    double bestSqnr = -INFINITY;
    for (int r = 0; r < panel->table()->rowCount(); ++r)
      if (const double s = std::stod(cell(panel->table(), r, 1)); s > bestSqnr) bestSqnr = s, best = cell(panel->table(), r, 0);
    QCOMPARE(panel->result()->answerKey, best);
    expectChecker(panel.get(), 13);
  }
  void lab14() { runLab(14); }
  void lab15() {
    auto panel = openAndCheck(15);
    if (QTest::currentTestFailed()) return;
    screenshot(panel.get(), 15);
    // Every plan the table shows within 1% of float is accepted; the others are not.
    const double base = std::stod(cell(panel->table(), 0, 3));
    for (int r = 1; r < panel->table()->rowCount(); ++r) {
      const double ppl = std::stod(cell(panel->table(), r, 3));
      const bool within = std::fabs(ppl / base - 1) <= 0.0099;
      const bool clearlyOut = std::fabs(ppl / base - 1) >= 0.0101;
      const auto c = panel->result()->check(cell(panel->table(), r, 0));
      if (within) QVERIFY2(c.correct, cell(panel->table(), r, 0).c_str());
      if (clearlyOut) QVERIFY2(!c.correct, cell(panel->table(), r, 0).c_str());
    }
    expectChecker(panel.get(), 15);
  }
  void lab16() { runLab(16); }
  void lab17() { runLab(17); }
  void lab18() { runLab(18); }

  void progressSurvivesRestart() {
    {
      auto panel = openAndCheck(11);
      if (QTest::currentTestFailed()) return;
      QVERIFY(panel->check(panel->result()->answerKey).correct);
    }
    LabsPanel again(nullptr);
    QVERIFY(LabsPanel::isDone(11));
    QVERIFY(again.list()->item(10)->text().startsWith(QStringLiteral("✓")));
    QVERIFY(!again.list()->item(0)->text().startsWith(QStringLiteral("✓")));
  }

  void cancelStopsTheExperiment() {
    LabsPanel panel(nullptr);
    panel.show();
    panel.setEngine(engine());
    QSignalSpy done(&panel, &LabsPanel::experimentFinished);
    panel.openLab(7);  // the planner runs for a while
    auto* cancel = panel.findChild<QPushButton*>(QStringLiteral("labCancel"));
    QVERIFY(cancel && cancel->isEnabled());
    cancel->click();
    QTRY_VERIFY_WITH_TIMEOUT(panel.findChild<QPushButton*>(QStringLiteral("labRun"))->isEnabled(), 20'000);
    QTest::qWait(100);
    QCOMPARE(done.count(), 0);
    QVERIFY(!panel.result());
  }

  void mainWindowHasLabsTab() {
    qs::app::MainWindow w;
    QSignalSpy loaded(&w, &qs::app::MainWindow::modelLoaded);
    w.show();
    w.openModel(qs::test::stories260K());
    QVERIFY(loaded.wait(10'000));
    auto* labs = w.findChild<LabsPanel*>();
    QVERIFY(labs);
    auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("centralTabs"));
    QVERIFY(tabs->indexOf(labs) >= 0);
    QSignalSpy done(labs, &LabsPanel::experimentFinished);
    labs->openLab(13);
    QTRY_VERIFY_WITH_TIMEOUT(done.count() > 0, 30'000);
    QVERIFY(labs->result());
  }
};

QTEST_MAIN(TestLabs)
#include "test_labs.moc"
