#include "widgets/model_tree_model.h"

#include <QLocale>
#include <QRegularExpression>
#include <map>

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
  if (model_) {
    // Block index from the common naming schemes: llama2.c/Meta "layers.N.", HF
    // "model.layers.N.", GGUF "blk.N.", GPT-2 "h.N." / "transformer.h.N.".
    static const QRegularExpression blockRe(
        QStringLiteral(R"(^(?:model\.|transformer\.)?(?:layers|blk|h|blocks)\.(\d+)\.)"));
    Group embeddings{tr("Embeddings"), {}, 0}, head{tr("Head"), {}, 0}, other{tr("Other"), {}, 0};
    std::map<int, Group> blocks;
    const auto& ts = model_->tensors();
    for (int i = 0; i < int(ts.size()); ++i) {
      const QString name = QString::fromStdString(ts[size_t(i)].name);
      Group* g = &other;
      if (auto m = blockRe.match(name); m.hasMatch()) {
        const int b = m.captured(1).toInt();
        auto [it, inserted] = blocks.try_emplace(b);
        if (inserted) it->second.title = tr("Block %1").arg(b);
        g = &it->second;
      } else if (name.contains(QLatin1String("embed")) || name.startsWith(QLatin1String("wte")) ||
                 name.startsWith(QLatin1String("wpe")) || name.startsWith(QLatin1String("token_embd"))) {
        g = &embeddings;
      } else if (name.contains(QLatin1String("norm")) || name.startsWith(QLatin1String("output")) ||
                 name.startsWith(QLatin1String("lm_head")) || name.startsWith(QLatin1String("ln_f"))) {
        g = &head;
      }
      g->tensors.push_back(i);
      if (ts[size_t(i)].isParameter) g->params += ts[size_t(i)].elements();
    }
    auto push = [&](Group& g) {
      if (!g.tensors.empty()) groups_.push_back(std::move(g));
    };
    push(embeddings);
    for (auto& [b, g] : blocks) push(g);
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
  if (role == Qt::TextAlignmentRole && index.column() == ParamsCol)
    return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole)
    return tr("%1\n%2 %3, %4 bytes at offset %5")
        .arg(QString::fromStdString(t.name), QString::fromStdString(t.dtypeLabel),
             QString::fromStdString(t.shapeString()), locale.toString(t.nbytes),
             locale.toString(t.offset));
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case NameCol: return QString::fromStdString(t.name);
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
