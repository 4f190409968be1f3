#pragma once
// The model panel's item model: a thin adapter over a ModelFile's tensor table, grouped by the
// model's ModelGraph into "Embeddings", one node per block, "Head" and "Other". Columns: name,
// shape, parameters, dtype. Linear weights show their layer name (widgets/layer_labels.h), the
// same as the Plan and Sensitivity tabs; the file's tensor name is in the tooltip and the filter.
#include <QAbstractItemModel>
#include <memory>
#include <vector>

#include "widgets/layer_labels.h"

namespace qs {
class ModelFile;
struct TensorInfo;
}

namespace qs::widgets {

class ModelTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  enum Column { NameCol, ShapeCol, ParamsCol, DTypeCol, ColumnCount };
  // TensorNameRole: the file's tensor name; FilterRole: layer name and tensor name (what the
  // panel's filter box matches).
  enum Roles { TensorNameRole = Qt::UserRole + 1, FilterRole };

  explicit ModelTreeModel(QObject* parent = nullptr);
  ~ModelTreeModel() override;

  // The model keeps a shared reference; nullptr clears the tree.
  void setModel(std::shared_ptr<const ModelFile> model);
  const ModelFile* model() const { return model_.get(); }

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  struct Group {
    QString title;
    std::vector<int> tensors;  // indices into model_->tensors()
    quint64 params = 0;
  };
  std::shared_ptr<const ModelFile> model_;
  std::vector<Group> groups_;
  LayerLabels labels_;
};

}  // namespace qs::widgets
