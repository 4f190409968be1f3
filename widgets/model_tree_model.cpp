#include "widgets/model_tree_model.h"

#include <QLocale>

#include "core/model/model_file.h"

namespace qs::widgets {

// Internal ids: groups use id 0 (their own index has no parent); a tensor row stores its
// group number + 1 so parent() can find it.
ModelTreeModel::ModelTreeModel(QObject* parent) : QAbstractItemModel(parent) {}
ModelTreeModel::~ModelTreeModel() = default;

void ModelTreeModel::setModel(std::shared_ptr<const ModelFile> model) {
  beginResetModel();
  model_ = std::move(model);
  groups_.clear();
  labels_ = model_ ? LayerLabels(model_->graph()) : LayerLabels();
  if (model_) {
    // Groups come from the model's ModelGraph: embeddings, one node per block (its tensors in
    // execution order: norm, q, k, v, o, norm, gate, up, down — biases after their weights),
    // the head (final norm, output projection unless tied) and whatever the graph leaves over.
    const ModelGraph& g = model_->graph();
    const auto& ts = model_->tensors();
    std::vector<bool> placed(ts.size(), false);
    auto take = [&](Group& grp, int i) {
      if (i < 0 || i >= int(ts.size()) || placed[size_t(i)]) return;
      placed[size_t(i)] = true;
      grp.tensors.push_back(i);
      if (ts[size_t(i)].isParameter) grp.params += ts[size_t(i)].elements();
    };
    Group embeddings{tr("Embeddings"), {}, 0}, head{tr("Head"), {}, 0}, other{tr("Other"), {}, 0};
    take(embeddings, g.tokenEmbedding.weight);
    take(embeddings, g.positionEmbedding.weight);
    std::vector<Group> blocks;
    for (const GraphBlock& b : g.blocks) {
      Group grp{tr("Block %1").arg(b.index), {}, 0};
      auto norm = [&](const NormLayer& n) {
        take(grp, n.weight);
        take(grp, n.bias);
      };
      // The attention norm, the attention projections, the MLP norm, the MLP projections.
      norm(b.attnNorm);
      bool mlpNormDone = false;
      for (const LinearLayer& l : b.linears) {
        const bool mlp = l.role == LinearRole::Gate || l.role == LinearRole::Up ||
                         l.role == LinearRole::Down || l.role == LinearRole::MlpIn ||
                         l.role == LinearRole::MlpOut || l.role == LinearRole::GateUpFused;
        if (mlp && !mlpNormDone) {
          norm(b.ffnNorm);
          mlpNormDone = true;
        }
        take(grp, l.weight);
        take(grp, l.bias);
      }
      norm(b.ffnNorm);
      for (int o : b.otherTensors) take(grp, o);
      blocks.push_back(std::move(grp));
    }
    take(head, g.finalNorm.weight);
    take(head, g.finalNorm.bias);
    if (!g.tiedHead) take(head, g.head.weight);
    for (int i = 0; i < int(ts.size()); ++i) take(other, i);  // loose linears, buffers, extras
    auto push = [&](Group& grp) {
      if (!grp.tensors.empty()) groups_.push_back(std::move(grp));
    };
    push(embeddings);
    for (auto& b : blocks) push(b);
    push(head);
    push(other);
  }
  endResetModel();
}

QModelIndex ModelTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  if (!parent.isValid()) {
    if (row >= int(groups_.size())) return {};
    return createIndex(row, column, quintptr(0));
  }
  if (parent.internalId() != 0 || parent.row() >= int(groups_.size())) return {};
  if (row >= int(groups_[size_t(parent.row())].tensors.size())) return {};
  return createIndex(row, column, quintptr(parent.row() + 1));
}

QModelIndex ModelTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid() || child.internalId() == 0) return {};
  return createIndex(int(child.internalId() - 1), 0, quintptr(0));
}

int ModelTreeModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return int(groups_.size());
  if (parent.column() != 0 || parent.internalId() != 0) return 0;
  return int(groups_[size_t(parent.row())].tensors.size());
}

int ModelTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant ModelTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !model_) return {};
  const QLocale locale;
  if (index.internalId() == 0) {
    const Group& g = groups_[size_t(index.row())];
    if (role == Qt::DisplayRole) {
      if (index.column() == NameCol) return g.title;
      if (index.column() == ParamsCol) return locale.toString(g.params);
    }
    if (role == Qt::TextAlignmentRole && index.column() == ParamsCol)
      return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  const Group& g = groups_[size_t(index.internalId() - 1)];
  const TensorInfo& t = model_->tensors()[size_t(g.tensors[size_t(index.row())])];
  if (role == TensorNameRole) return QString::fromStdString(t.name);
  if (role == FilterRole) return labels_.of(t.name) + QLatin1Char(' ') + QString::fromStdString(t.name);
  if (role == Qt::TextAlignmentRole && index.column() == ParamsCol)
    return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole)
    return tr("%1\n%2 %3, %4 bytes at offset %5")
        .arg(labels_.isLayer(t.name) ? tr("%1 (layer %2)").arg(QString::fromStdString(t.name), labels_.of(t.name))
                                     : QString::fromStdString(t.name), QString::fromStdString(t.dtypeLabel),
             QString::fromStdString(t.shapeString()), locale.toString(t.nbytes),
             locale.toString(t.offset));
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case NameCol: return labels_.of(t.name);
    case ShapeCol: return QString::fromStdString(t.shapeString());
    case ParamsCol:
      return t.isParameter ? locale.toString(t.elements()) : tr("buffer");
    case DTypeCol: return QString::fromStdString(t.dtypeLabel);
  }
  return {};
}

QVariant ModelTreeModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case NameCol: return tr("Name");
    case ShapeCol: return tr("Shape");
    case ParamsCol: return tr("Parameters");
    case DTypeCol: return tr("Type");
  }
  return {};
}

}  // namespace qs::widgets
