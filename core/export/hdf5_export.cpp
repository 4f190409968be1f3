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
#include "core/io/hdf5_writer.h"
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
      p.estimatedBytes += quantStorage(a.quant.format.weight, a.outFeatures, a.inFeatures).totalBytes();
    } else if (isIntegerTensor(ti)) {
      t.storage = "bytes " + ti.dtypeLabel;
      t.note = "integer tensor copied byte for byte";
      p.estimatedBytes += ti.nbytes;
    } else {
      t.storage = "F32";
      p.estimatedBytes += ti.elements() * 4;
    }
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
  h5w::Hdf5Writer h(p.files.front());
  h.attr("/", "format", std::string("quantscope-export"));
  h.attr("/", "format_version", int64_t(1));
  h.attr("/", "generator", o.generator);
  h.attr("/", "source", src.file.path());
  h.attr("/", "source_format", std::string(modelFormatName(src.file.format())));
  h.attr("/", "architecture", src.graph.architecture);
  h.attr("/", "plan_source", o.planSource);
  h.writeString("/plan", planToJson(src.plan));
  h.writeString("/config", src.file.config().toJson().dump(2));
  h.group("/tensors");
  for (const auto& t : p.tensors) {
    progress.check();
    const std::string g = t.outputName;
    uint64_t n = 0;
    if (t.planLayer >= 0) {
      const LayerAssignment& a = src.resolved.layers[size_t(t.planLayer)];
      const QuantizedTensor q = quantizeForExport(src, t);
      const uint64_t rowBytes = payloadRowBytes(q.spec.kind, q.cols);
      h.write(g + "/payload", {uint64_t(q.rows), rowBytes}, std::span<const uint8_t>(q.payload));
      if (!q.scales.empty())
        h.writeHalf(g + "/scales", {uint64_t(q.grid.gridRows), uint64_t(q.grid.gridCols)}, q.scales);
      if (!q.zeros.empty()) h.write(g + "/zero_points", {q.zeros.size()}, std::span<const uint8_t>(q.zeros));
      h.attr(g, "layer", a.name);
      h.attr(g, "format", formatToString(a.quant.format));
      h.attr(g, "kind", std::string(quantKindTraits(q.spec.kind).name));
      h.attr(g, "granularity", granularityName(q.spec.granularity));
      h.attr(g, "group_size", int64_t(q.spec.groupSize));
      h.attr(g, "symmetric", int64_t(q.spec.symmetric ? 1 : 0));
      h.attr(g, "rows", int64_t(q.rows));
      h.attr(g, "cols", int64_t(q.cols));
      h.attr(g, "grid_rows", int64_t(q.grid.gridRows));
      h.attr(g, "grid_cols", int64_t(q.grid.gridCols));
      h.attr(g, "cell_rows", int64_t(q.grid.cellRows));
      h.attr(g, "cell_cols", int64_t(q.grid.cellCols));
      n = q.payload.size() + q.scales.size() * 2 + q.zeros.size();
    } else if (isIntegerTensor(src.file.tensors()[size_t(t.sourceTensor)])) {
      // Integer buffers as they are: I64 as an int64 dataset, other widths as their bytes.
      const TensorInfo& ti = src.file.tensors()[size_t(t.sourceTensor)];
      const auto b = src.file.tensorBytes(ti);
      std::vector<uint64_t> dims;
      for (auto d : ti.shape) dims.push_back(uint64_t(d));
      if (ti.dtype == DType::I64) {
        std::vector<int64_t> v(b.size() / 8);
        std::memcpy(v.data(), b.data(), v.size() * 8);
        h.write(g + "/values", dims, std::span<const int64_t>(v));
      } else {
        h.write(g + "/bytes", {uint64_t(b.size())}, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
      }
      h.attr(g, "dtype", ti.dtypeLabel);
      h.attr(g, "layer", std::string());
      n = b.size();
    } else {
      const std::vector<float> v = loadForExport(src, t);
      std::vector<uint64_t> dims;
      for (auto d : exportShape(src, t)) dims.push_back(uint64_t(d));
      h.write(g + "/values", dims, std::span<const float>(v));
      h.attr(g, "layer", std::string());
      n = v.size() * 4;
    }
    h.attr(g, "source_name", t.sourceName);
    progress.add(n, "writing " + t.sourceName);
  }
  if (o.calibration) {
    h.group("/calibration");
    h.attr("/calibration", "source", o.calibration->source);
    for (const auto& l : o.calibration->layers) {
      progress.check();
      const std::string g = "/calibration/" + linkName(l.weightName);
      h.write(g + "/channel_absmax", {l.channelAbsMax.size()}, std::span<const float>(l.channelAbsMax));
      h.write(g + "/channel_mean_square", {l.channelMeanSquare.size()}, std::span<const float>(l.channelMeanSquare));
      h.write(g + "/histogram", {l.histogram.size()}, std::span<const uint64_t>(l.histogram));
      h.attr(g, "absmax", double(l.absMax));
      h.attr(g, "histogram_max", double(l.histogramMax));
      h.attr(g, "tokens", l.tokens);
    }
  }
  const std::vector<std::byte> image = h.finish();
  f.writeAt(0, image);
}

}  // namespace qs::exportdetail
