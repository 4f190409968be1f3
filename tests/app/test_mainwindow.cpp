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

#include "app/gui/gui_main.h"
#include "app/gui/main_window.h"
#include "core/model/model_file.h"
#include "core/util/datasets.h"
#include "tests/test_util.h"

using qs::app::MainWindow;

class TestMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir settingsDir_;

 private slots:
  void initTestCase() {
    // Tests never touch the user's settings.
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir_.path());
    qs::app::setApplicationIdentity();
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
