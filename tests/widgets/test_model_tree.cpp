// widgets/ModelTreeModel: structure on stories260K, checked by QAbstractItemModelTester.
#include <QAbstractItemModelTester>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "core/model/model_file.h"
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
    QCOMPARE(wq.data().toString(), QString("layers.2.attention.wq.weight"));
    QCOMPARE(model.index(1, ModelTreeModel::ShapeCol, block2).data().toString(), QString("[64, 64]"));
    QCOMPARE(model.parent(wq), block2.siblingAtColumn(0));
    // Block parameter count: 2 norms + wq + wk + wv + wo + w1 + w2 + w3
    const qulonglong perBlock = 64 + 64 + 64 * 64 * 2 + 32 * 64 * 2 + 172 * 64 * 3;
    QCOMPARE(QLocale().toULongLong(model.index(3, ModelTreeModel::ParamsCol).data().toString()),
             perBlock);
    model.setModel(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void filterKeepsMatchingLayersAndTheirBlocks() {
    ModelTreeModel model;
    model.setModel(qs::openModel(qs::test::stories260K().toStdString()));
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&model);
    proxy.setRecursiveFilteringEnabled(true);
    proxy.setFilterFixedString("w2");
    QCOMPARE(proxy.rowCount(), 5);  // one w2 per block, blocks kept as parents
    QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 1);
  }
};

QTEST_MAIN(TestModelTree)
#include "test_model_tree.moc"
