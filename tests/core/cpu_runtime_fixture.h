#pragma once
// A model file opened on the CPU op-set with its graph and runtime: the setup the CPU runtime
// tests share.
#include <QString>
#include <memory>

#include "core/model/model_file.h"
#include "core/model/model_graph.h"
#include "core/runtime/runtime.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::test {

struct CpuRuntime {
  std::unique_ptr<ModelFile> file;
  ModelGraph graph;
  std::unique_ptr<TransformerOps> ops = createCpuTransformerOps();
  std::unique_ptr<Runtime> rt;
  explicit CpuRuntime(const QString& path) {
    file = openModel(path.toStdString());
    graph = buildModelGraph(*file);
    rt = std::make_unique<Runtime>(*file, graph, *ops);
  }
};

}  // namespace qs::test
