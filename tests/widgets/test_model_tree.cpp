// widgets/ModelTreeModel: structure on stories260K, checked by QAbstractItemModelTester.
#include <QAbstractItemModelTester>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "core/model/model_file.h"
#include "core/model/synth_model.h"
#include "tests/test_util.h"
#include "widgets/model_tree_model.h"

using qs::widgets::ModelTreeModel;

class TestModelTree : public QObject {
  Q_OBJECT
 private slots:
  void groupsBlocksAndPassesTheTester() {
    ModelTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    std::shared_ptr<const qs::ModelFile> m = qs::openModel(qs::test::stories260K().toStdString());
    model.setModel(m);
    // Embeddings, Block 0..4, Head, Other (RoPE tables)
    QCOMPARE(model.rowCount(), 8);
    QCOMPARE(model.index(0, 0).data().toString(), QString("Embeddings"));
    QCOMPARE(model.index(1, 0).data().toString(), QString("Block 0"));
    QCOMPARE(model.index(5, 0).data().toString(), QString("Block 4"));
    QCOMPARE(model.index(6, 0).data().toString(), QString("Head"));
    const QModelIndex block2 = model.index(3, 0);
    QCOMPARE(model.rowCount(block2), 9);
    const QModelIndex wq = model.index(1, ModelTreeModel::NameCol, block2);
    // Linear weights show their layer name (the Plan tab's); the file's name is the tensor role.
    QCOMPARE(wq.data().toString(), QString("blocks.2.attn.q"));
    QCOMPARE(wq.data(ModelTreeModel::TensorNameRole).toString(), QString("layers.2.attention.wq.weight"));
    QVERIFY(wq.data(Qt::ToolTipRole).toString().contains("layers.2.attention.wq.weight"));
    QCOMPARE(model.index(1, ModelTreeModel::ShapeCol, block2).data().toString(), QString("[64, 64]"));
    QCOMPARE(model.parent(wq), block2.siblingAtColumn(0));
    // Block parameter count: 2 norms + wq + wk + wv + wo + w1 + w2 + w3
    const qulonglong perBlock = 64 + 64 + 64 * 64 * 2 + 32 * 64 * 2 + 172 * 64 * 3;
    QCOMPARE(QLocale().toULongLong(model.index(3, ModelTreeModel::ParamsCol).data().toString()),
             perBlock);
    model.setModel(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void groupsFollowTheModelGraph() {
    // A GPT-2-shaped model: two embeddings, LayerNorms with biases, biases after their weights,
    // a tied head (the Head group holds only the final norm).
    QTemporaryDir tmp;
    qs::SynthOptions o;
    o.arch = "gpt2";
    o.preset = "tiny";
    const std::string path = tmp.filePath("m.safetensors").toStdString();
    qs::writeSynthModel(o, path);
    ModelTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setModel(qs::openModel(path));
    QCOMPARE(model.rowCount(), 1 + 3 + 1);  // Embeddings, Block 0..2, Head
    QCOMPARE(model.rowCount(model.index(0, 0)), 2);
    const QModelIndex b1 = model.index(2, 0);
    QCOMPARE(model.rowCount(b1), 12);
    QStringList names;
    for (int r = 0; r < 4; ++r) names << model.index(r, 0, b1).data().toString();
    QCOMPARE(names, (QStringList{"h.1.ln_1.weight", "h.1.ln_1.bias", "blocks.1.attn.qkv",
                                 "h.1.attn.c_attn.bias"}));
    // GPT-2's two c_proj layers: one name each, unique in the model (issue 27 item 5).
    QStringList layers;
    for (int g = 0; g < model.rowCount(); ++g)
      for (int r = 0; r < model.rowCount(model.index(g, 0)); ++r) {
        const QModelIndex i = model.index(r, 0, model.index(g, 0));
        if (i.data().toString().startsWith("blocks.")) layers << i.data().toString();
      }
    QCOMPARE(layers.size(), 3 * 4);
    QCOMPARE(QSet<QString>(layers.begin(), layers.end()).size(), layers.size());
    QVERIFY(layers.contains("blocks.1.attn.o"));
    QVERIFY(layers.contains("blocks.1.mlp.down"));
    QCOMPARE(model.index(6, 0, b1).data().toString(), QString("h.1.ln_2.weight"));
    const QModelIndex head = model.index(4, 0);
    QCOMPARE(head.data().toString(), QString("Head"));
    QCOMPARE(model.rowCount(head), 2);
  }

  void filterKeepsMatchingLayersAndTheirBlocks() {
    ModelTreeModel model;
    model.setModel(qs::openModel(qs::test::stories260K().toStdString()));
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&model);
    proxy.setRecursiveFilteringEnabled(true);
    proxy.setFilterRole(ModelTreeModel::FilterRole);  // the layer name and the file's name
    proxy.setFilterFixedString("w2");
    QCOMPARE(proxy.rowCount(), 5);  // one w2 per block, blocks kept as parents
    QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 1);
    proxy.setFilterFixedString("mlp.down");  // w2 by its layer name
    QCOMPARE(proxy.rowCount(), 5);
    QCOMPARE(proxy.index(0, 0, proxy.index(0, 0)).data().toString(), QString("blocks.0.mlp.down"));
  }
};

QTEST_MAIN(TestModelTree)
#include "test_model_tree.moc"
