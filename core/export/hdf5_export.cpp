// HDF5 archive export (docs/export.md, "HDF5 archive").
//
//   /                 attrs: format "quantscope-export", format_version 1, generator, source,
//                     source_format, architecture, plan_source
//   /plan             string: the plan, canonical JSON
//   /config           string: the model configuration (ModelConfig JSON)
//   /tensors/<source tensor name>
//     plan layers:    attrs layer, format (canonical string), kind, granularity, group_size,
//                     symmetric, rows, cols, grid_rows, grid_cols, cell_rows, cell_cols;
//                     datasets payload u8 [rows, row bytes] (the codec's packing),
//                     scales f16 [grid_rows, grid_cols], zero_points u8 [n] (asymmetric INT,
//                     packed as the codec packs them: INT4 two per byte, low nibble first)
//                     FP16/BF16/F32 layers: payload holds the little-endian values
//     other tensors:  dataset values f32 (shape as in the source), attr layer ""; integer
//                     tensors untouched: values i64 (I64) or bytes u8 (other widths), attr dtype
//   /calibration      (when given) attrs source; /calibration/<weight name>: channel_absmax f32,
//                     channel_mean_square f32, histogram u64, attrs absmax, histogram_max, tokens
#include <cstring>
#include <filesystem>

#include "core/export/export_internal.h"
#include "core/io/hdf5_file.h"
#include "kernels/common/error.h"

namespace qs::exportdetail {
namespace {

std::string granularityName(Granularity g) {
  switch (g) {
    case Granularity::None: return "none";
    case Granularity::Tensor: return "tensor";
    case Granularity::Channel: return "channel";
    case Granularity::Group: return "group";
    case Granularity::Block: return "block";
  }
  return "?";
}

// HDF5 link names may hold anything but '/' (and "." alone).
std::string linkName(std::string s) {
  for (char& c : s)
    if (c == '/') c = '|';
  return s == "." ? "_." : s;
}

}  // namespace

void planHdf5(const ExportSource& src, const std::string& out, const ModelExportOptions& o, ExportPreview& p) {
  p.files = {out};
  for (const SourceTensor& s : walkGraph(src)) {
    const TensorInfo& ti = src.file.tensors()[size_t(s.index)];
    ExportTensorPlan t;
    t.sourceTensor = s.index;
    t.sourceName = ti.name;
    t.outputName = "/tensors/" + linkName(ti.name);
    t.transpose = s.linear && !s.bias && s.linear->transposed;
    if (t.transpose) t.note = "stored [out, in] (the source keeps it [in, out])";
    if (s.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(s.planLayer)];
      t.layer = a.name;
      t.planLayer = s.planLayer;
      t.storage = "payload+scales " + weightSpecToString(a.quant.format.weight);
      t.bytes = quantStorage(a.quant.format.weight, a.outFeatures, a.inFeatures).totalBytes();
    } else if (isIntegerTensor(ti)) {
      t.storage = "bytes " + ti.dtypeLabel;
      t.note = "integer tensor copied byte for byte";
      t.bytes = ti.nbytes;
    } else {
      t.storage = "F32";
      t.bytes = ti.elements() * 4;
    }
    p.estimatedBytes += t.bytes;
    p.tensors.push_back(std::move(t));
  }
  if (o.calibration)
    for (const auto& a : src.resolved.layers)
      if (!o.calibration->find(a.weightName))
        p.warnings.push_back(a.name + ": no calibration statistics for this layer");
}

void writeHdf5(const ExportSource& src, const ExportPreview& p, const ModelExportOptions& o, OutputFiles& files,
               Progress& progress) {
  AtomicFile& f = files.open(p.files.front());
  // HDF5 builds the file in memory; its bytes go through AtomicFile like every other export.
  h5::File h = h5::File::createInMemory(p.files.front());
  h.setAttrUtf8("/", "format", std::string("quantscope-export"));
  h.setAttr("/", "format_version", int64_t(1));
  h.setAttrUtf8("/", "generator", o.generator);
  h.setAttrUtf8("/", "source", src.file.path());
  h.setAttrUtf8("/", "source_format", std::string(modelFormatName(src.file.format())));
  h.setAttrUtf8("/", "architecture", src.graph.architecture);
  h.setAttrUtf8("/", "plan_source", o.planSource);
  h.writeUtf8("/plan", planToJson(src.plan));
  h.writeUtf8("/config", src.file.config().toJson().dump(2));
  h.createGroup("/tensors");
  for (const auto& t : p.tensors) {
    progress.check();
    const std::string g = t.outputName;
    uint64_t n = 0;
    if (t.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
      const QuantizedTensor q = quantizeForExport(src, t);
      const uint64_t rowBytes = payloadRowBytes(q.spec.kind, q.cols);
      h.write(g + "/payload", {hsize_t(q.rows), hsize_t(rowBytes)}, q.payload.data());
      if (!q.scales.empty())
        h.writeHalf(g + "/scales", {hsize_t(q.grid.gridRows), hsize_t(q.grid.gridCols)}, q.scales.data());
      if (!q.zeros.empty()) h.write(g + "/zero_points", {hsize_t(q.zeros.size())}, q.zeros.data());
      h.setAttrUtf8(g, "layer", a.name);
      h.setAttrUtf8(g, "format", formatToString(a.quant.format));
      h.setAttrUtf8(g, "kind", std::string(quantKindTraits(q.spec.kind).name));
      h.setAttrUtf8(g, "granularity", granularityName(q.spec.granularity));
      h.setAttr(g, "group_size", int64_t(q.spec.groupSize));
      h.setAttr(g, "symmetric", int64_t(q.spec.symmetric ? 1 : 0));
      h.setAttr(g, "rows", int64_t(q.rows));
      h.setAttr(g, "cols", int64_t(q.cols));
      h.setAttr(g, "grid_rows", int64_t(q.grid.gridRows));
      h.setAttr(g, "grid_cols", int64_t(q.grid.gridCols));
      h.setAttr(g, "cell_rows", int64_t(q.grid.cellRows));
      h.setAttr(g, "cell_cols", int64_t(q.grid.cellCols));
      n = q.payload.size() + q.scales.size() * 2 + q.zeros.size();
    } else if (isIntegerTensor(src.file.tensors()[size_t(t.sourceTensor)])) {
      // Integer buffers as they are: I64 as an int64 dataset, other widths as their bytes.
      const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
      const auto b = src.file.tensorBytes(ti);
      std::vector<hsize_t> dims;
      for (auto d : ti.shape) dims.push_back(hsize_t(d));
      if (ti.dtype == DType::I64) {
        std::vector<int64_t> v(b.size() / 8);
        std::memcpy(v.data(), b.data(), v.size() * 8);
        h.write(g + "/values", dims, v.data());
      } else {
        h.write(g + "/bytes", {hsize_t(b.size())}, reinterpret_cast<const uint8_t*>(b.data()));
      }
      h.setAttrUtf8(g, "dtype", ti.dtypeLabel);
      h.setAttrUtf8(g, "layer", std::string());
      n = b.size();
    } else {
      const std::vector<float> v = loadForExport(src, t);
      std::vector<hsize_t> dims;
      for (auto d : exportShape(src, t)) dims.push_back(hsize_t(d));
      h.write(g + "/values", dims, v.data());
      h.setAttrUtf8(g, "layer", std::string());
      n = v.size() * 4;
    }
    h.setAttrUtf8(g, "source_name", t.sourceName);
    progress.add(n, "writing " + t.sourceName);
  }
  if (o.calibration) {
    h.createGroup("/calibration");
    h.setAttrUtf8("/calibration", "source", o.calibration->source);
    for (const auto& l : o.calibration->layers) {
      progress.check();
      const std::string g = "/calibration/" + linkName(l.weightName);
      h.write(g + "/channel_absmax", {hsize_t(l.channelAbsMax.size())}, l.channelAbsMax.data());
      h.write(g + "/channel_mean_square", {hsize_t(l.channelMeanSquare.size())}, l.channelMeanSquare.data());
      h.write(g + "/histogram", {hsize_t(l.histogram.size())}, l.histogram.data());
      h.setAttr(g, "absmax", double(l.absMax));
      h.setAttr(g, "histogram_max", double(l.histogramMax));
      h.setAttr(g, "tokens", int64_t(l.tokens));
    }
  }
  const std::vector<std::byte> image = h.image();
  f.writeAt(0, image);
}

}  // namespace qs::exportdetail
