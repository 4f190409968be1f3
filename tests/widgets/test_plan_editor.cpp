// widgets/PlanEditorView on stories260K: table edits through the delegate path (bulk over the
// selection), pattern edits, undo/redo, a budget-slider drag as one undo step, the Pareto front
// and loading a point, plan files in and out, live totals. A synthetic sensitivity table stands
// in for the job's (the full flow with the real jobs is tests/app/test_workflow.cpp).
#include <QLabel>
#include <QSlider>
#include <QTableView>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>
#include <cmath>

#include "core/model/model_graph.h"
#include "core/model/model_file.h"
#include "core/plan/layer_names.h"
#include "core/plan/plan_editor.h"
#include "tests/test_util.h"
#include "widgets/pareto_plot.h"
#include "widgets/plan_compare_view.h"
#include "widgets/plan_editor_view.h"
#include "core/plan/planner.h"
#include <QTableWidget>

using namespace qs;
using qs::widgets::PlanEditorView;

namespace {
// Error falls with bits; "down" layers ten times as sensitive; per-layer variety.
std::shared_ptr<SensitivityTable> syntheticSensitivity(const ModelGraph& g) {
  auto t = std::make_shared<SensitivityTable>();
  // int4-ch-sym: the INT4 tier for the mlp.down layers, whose K = 172 takes no group size.
  for (const char* f : {"int4-g32-sym", "int4-g64-sym", "int4-ch-sym", "int8-ch-sym", "fp8e4m3-ch", "fp16"})
    t->formats.push_back(parseQuantFormat(f));
  const double base[] = {0.02, 0.03, 0.04, 1e-3, 3e-3, 1e-7};
  for (const PlanLayer& l : planLayers(g)) t->layers.push_back(l);  // the layer table's rows
  t->entries.resize(t->layers.size() * t->formats.size());
  for (size_t l = 0; l < t->layers.size(); ++l)
    for (size_t f = 0; f < t->formats.size(); ++f) {
      const double s = (t->layers[l].role == "down" ? 10.0 : 1.0) * (1.0 + 0.1 * double(l % 5));
      t->at(l, f).kl = base[f] * s;
      t->at(l, f).weightedError = base[f] * s * 2;
    }
  return t;
}
// What the workspace gives the Plan tab: the document of a new plan for the model and its undo
// stack, neither owned by the view.
struct Editor {
  QUndoStack undo;
  PlanDocument doc;
  PlanEditorView view{&undo};
  explicit Editor(const ModelGraph& graph) : doc(graph, newPlanFor("stories260K", "", 128), options()) {
    view.setDocument(&doc);
  }
  ~Editor() {
    view.setDocument(nullptr);
    undo.clear();  // the commands refer to the document
  }
  static ResolveOptions options() {
    ResolveOptions ro;
    ro.modelName = "stories260K";
    return ro;
  }
};

}  // namespace

class TestPlanEditor : public QObject {
  Q_OBJECT
  std::unique_ptr<ModelFile> model_;
  ModelGraph graph_;

 private slots:
  void initTestCase() {
    model_ = openModel(test::stories260K().toStdString());
    graph_ = buildModelGraph(*model_);
  }

  void editsUndoAndBulk() {
    Editor e(graph_);
    PlanEditorView& v = e.view;
    v.resize(1300, 800);
    v.show();
    QAbstractItemModel* m = v.table()->model();
    const int rows = m->rowCount();
    QCOMPARE(rows, int(planLayers(graph_).size()));
    const auto weightOf = [&](int r) { return m->index(r, 2).data().toString(); };
    const QString initial = weightOf(0);

    // Delegate path on a row outside the selection: that row alone.
    QVERIFY(m->setData(m->index(0, 2), QStringLiteral("int8-sym"), Qt::EditRole));
    QCOMPARE(weightOf(0), QStringLiteral("int8-sym"));
    QCOMPARE(weightOf(1), initial);
    // Select rows 2..4 and edit row 3: all three change in one undo step.
    v.table()->selectionModel()->select(QItemSelection(m->index(2, 0), m->index(4, 0)),
                                        QItemSelectionModel::Select | QItemSelectionModel::Rows);
    const int before = v.undoStack()->count();
    QVERIFY(m->setData(m->index(3, 2), QStringLiteral("fp8e4m3"), Qt::EditRole));
    QCOMPARE(v.undoStack()->count(), before + 1);
    for (int r = 2; r <= 4; ++r) QCOMPARE(weightOf(r), QStringLiteral("fp8e4m3"));
    QCOMPARE(weightOf(5), initial);
    v.undoStack()->undo();
    for (int r = 2; r <= 4; ++r) QCOMPARE(weightOf(r), initial);
    v.undoStack()->redo();
    QCOMPARE(weightOf(3), QStringLiteral("fp8e4m3"));

    // A bad value: refused, nothing changes.
    QString err;
    QVERIFY(!v.setField({0}, PlanField::Weight, QStringLiteral("int5"), &err));
    QVERIFY2(err.contains(QStringLiteral("int5")), qPrintable(err));
    QCOMPARE(weightOf(0), QStringLiteral("int8-sym"));

    // Pattern: every mlp.down layer to int4 g32.
    QVERIFY2(v.applyPattern(QStringLiteral("blocks.*.mlp.down"), PlanField::Weight, QStringLiteral("int4-sym"), &err),
             qPrintable(err));
    QVERIFY(v.applyPattern(QStringLiteral("blocks.*.mlp.down"), PlanField::Group, QStringLiteral("32"), &err));
    int downs = 0;
    for (int r = 0; r < rows; ++r)
      if (m->index(r, 0).data().toString().endsWith(QStringLiteral("mlp.down"))) {
        ++downs;
        QCOMPARE(weightOf(r), QStringLiteral("int4-sym"));
        QCOMPARE(m->index(r, 3).data().toString(), QStringLiteral("32"));
      }
    QCOMPARE(downs, int(graph_.blocks.size()));
    QVERIFY(!v.applyPattern(QStringLiteral("blocks.*.nothing"), PlanField::Weight, QStringLiteral("int8-sym"), &err));
    // Totals show size and bits per weight.
    QVERIFY2(v.totalsText().contains(QStringLiteral("bits/weight")), qPrintable(v.totalsText()));

    // Save and open again: the same plan.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("p.json"));
    QVERIFY2(v.savePlanFile(path, &err), qPrintable(err));
    QVERIFY(v.undoStack()->isClean());
    const Plan saved = *v.plan();
    v.undoStack()->undo();  // change something, then open the file
    QVERIFY(!(*v.plan() == saved));
    QVERIFY2(v.openPlanFile(path, &err), qPrintable(err));
    QCOMPARE(planToJson(*v.plan()), planToJson(saved));
    QVERIFY(!v.openPlanFile(dir.filePath(QStringLiteral("missing.json")), &err));
    QVERIFY(err.contains(QStringLiteral("missing.json")));
  }

  // The ggml block types are choices of the weight column (imatrix of the scale column); a row
  // whose K is not a whole number of the type's blocks shows its problem, as any misfit does.
  void ggmlTypesInTheEditor() {
    const QStringList weights = widgets::planFieldChoices(PlanField::Weight);
    for (const char* t : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"})
      QVERIFY2(weights.contains(QString::fromLatin1(t)), t);
    for (const QString& w : weights) (void)parseWeightChoice(w.toStdString(), "weight");  // every choice is valid
    QVERIFY(widgets::planFieldChoices(PlanField::Scale).contains(QStringLiteral("imatrix")));
    for (const QString& sc : widgets::planFieldChoices(PlanField::Scale)) (void)parseScaleChoice(sc.toStdString(), "scale");
    Editor e(graph_);
    PlanEditorView& v = e.view;
    QAbstractItemModel* m = v.table()->model();
    QString err;
    QVERIFY2(v.applyPattern(QStringLiteral("blocks.*"), PlanField::Weight, QStringLiteral("q4_0"), &err), qPrintable(err));
    int bad = 0, good = 0;
    for (int r = 0; r < m->rowCount(); ++r) {
      const QString layer = m->index(r, 0).data().toString();
      if (!layer.startsWith(QStringLiteral("blocks."))) continue;
      QCOMPARE(m->index(r, 2).data().toString(), QStringLiteral("q4_0"));
      const QString tip = m->index(r, 2).data(Qt::ToolTipRole).toString();
      if (layer.endsWith(QStringLiteral("mlp.down"))) {  // K = 172
        ++bad;
        QVERIFY2(tip.contains(QStringLiteral("32-value block of q4_0")), qPrintable(tip));
      } else {
        ++good;
        QVERIFY2(tip.isEmpty() || !tip.contains(QStringLiteral("block of")), qPrintable(tip));
      }
    }
    QCOMPARE(bad, int(graph_.blocks.size()));
    QVERIFY(good > bad);
  }
  void compareTwoPlans();
  void budgetSliderAndPareto() {
    Editor e(graph_);
    PlanEditorView& v = e.view;
    v.resize(1300, 800);
    v.show();
    QVERIFY(!v.budgetSlider()->isEnabled());
    QString err;
    QVERIFY(!v.autoPlanThresholds(&err));  // no sensitivity yet
    v.setSensitivity(syntheticSensitivity(graph_));
    QVERIFY(v.budgetSlider()->isEnabled());
    QVERIFY(v.paretoPoints() > 3);

    // Thresholds: the down layers (10x) stay above INT4.
    QVERIFY2(v.autoPlanThresholds(&err), qPrintable(err));
    QAbstractItemModel* m = v.table()->model();
    for (int r = 0; r < m->rowCount(); ++r) {
      const QString name = m->index(r, 0).data().toString();
      if (name.endsWith(QStringLiteral("attn.q"))) QCOMPARE(m->index(r, 2).data().toString(), QStringLiteral("int4-sym"));
    }

    // A drag: many values, one undo step; the plan respects the budget each time.
    QSlider* s = v.budgetSlider();
    const int before = v.undoStack()->count();
    s->setSliderDown(true);
    for (int val : {s->maximum() / 2, s->maximum() / 3, s->maximum() / 4}) {
      s->setValue(val);
      QVERIFY(v.document()->figures().bitsPerWeight <= v.sliderBits(val) + 1e-9);
    }
    s->setSliderDown(false);
    QCOMPARE(v.undoStack()->count(), before + 1);
    const double dragged = v.document()->figures().bitsPerWeight;
    v.undoStack()->undo();
    QVERIFY(v.document()->figures().bitsPerWeight != dragged);

    // Pareto point: clicking loads that plan.
    QVERIFY(v.loadParetoPoint(1, &err));
    const double bits1 = v.document()->figures().bitsPerWeight;
    QVERIFY(v.loadParetoPoint(v.paretoPoints() - 1, &err));
    QVERIFY(v.document()->figures().bitsPerWeight > bits1);
    QVERIFY(v.totalsText().contains(QStringLiteral("predicted KL")));
    // The slider follows a loaded Pareto point (issue 27 item 6).
    QVERIFY(std::abs(v.sliderBits(v.budgetSlider()->value()) - v.document()->figures().bitsPerWeight) < 0.05 + 1e-9);
    // A pattern that names no layer is refused, not applied silently (item 7).
    QVERIFY(!v.applyPattern(QStringLiteral("blocks.*.nothing"), qs::PlanField::Weight, QStringLiteral("int8-sym"), &err));
    QVERIFY2(err.contains(QStringLiteral("no layer matches")), qPrintable(err));
    QTest::qWait(100);
    QDir().mkpath(QS_BINARY_DIR "/screenshots");
    QVERIFY(v.grab().save(QS_BINARY_DIR "/screenshots/plan_editor.png"));
  }
};

void TestPlanEditor::compareTwoPlans() {
  // Two plans differing in the mlp.down layers and one attention layer.
  Plan a = planFromFormats(graph_, std::vector<QuantFormat>(planLayers(graph_).size(), parseQuantFormat("int8-ch-sym")));
  a.name = "int8";
  Plan b = a;
  b.name = "mixed";
  b.entries.push_back({{"blocks.*.mlp.down"}, splitFormat(parseQuantFormat("int4-ch-sym"))});
  b.entries.push_back({{"blocks.0.attn.q"}, splitFormat(parseQuantFormat("int4-g32-sym"))});
  qs::widgets::PlanCompareView v;
  v.resize(1000, 600);
  v.show();
  qs::widgets::PlanRunFigures run{0.01, 4.8, 0.97};
  v.setPlans(graph_, a, b, syntheticSensitivity(graph_), run, std::nullopt);
  QCOMPARE(v.layerCount(), int(planLayers(graph_).size()));
  QCOMPARE(v.differingLayers(), int(graph_.blocks.size()) + 1);
  QVERIFY2(v.totalsText().contains(QStringLiteral("measured KL 0.01")), qPrintable(v.totalsText()));
  v.setOnlyDifferences(true);
  int shown = 0;
  for (int r = 0; r < v.table()->rowCount(); ++r) shown += !v.table()->isRowHidden(r);
  QCOMPARE(shown, v.differingLayers());
  QTest::qWait(100);
  // ctest runs each test function as its own process, in any order: this one may come first.
  QDir().mkpath(QS_BINARY_DIR "/screenshots");
  QVERIFY(v.grab().save(QS_BINARY_DIR "/screenshots/plan_compare.png"));
}

QTEST_MAIN(TestPlanEditor)
#include "test_plan_editor.moc"
