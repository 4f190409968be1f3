#pragma once
// What the layer view shows for one weight tensor and one candidate format: the weight
// histogram and that of its fake-quantised values, the per-output-channel absmax, the quantization
// grid and clipping thresholds of one selected scale cell (group / channel / block / tensor) with
// that cell's own values, and the error figures (MSE, SQNR, max error, cosine) and storage bytes.
// Pure computation on the CPU reference codecs; runs off the GUI thread as a job.
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_file.h"
#include "core/util/progress.h"
#include "kernels/quant/error_metrics.h"
#include "kernels/quant/quant_format.h"
#include "kernels/stats/histogram.h"

namespace qs {
class StatsOps;
}

namespace qs {

struct LayerAnalysisRequest {
  std::string tensorName;
  QuantFormat format;
  int bins = 256;          // histogram bins (whole tensor)
  int64_t cellIndex = 0;   // which scale cell the detail view shows (clamped to the grid)
};

struct LayerAnalysis {
  std::string tensorName;
  std::vector<int64_t> shape;
  int64_t rows = 0, cols = 0;  // as quantised: [N out, K in] (1-D tensors are one row)
  QuantFormat format;
  bool quantized = false;      // false for F32 (nothing to show but the distribution)

  Histogram weights;           // over [min, max] of the tensor
  Histogram fakeQuant;         // the fake-quantised values, same bins
  std::vector<float> channelAbsmax;  // one per output row

  // Grid of the whole tensor when the format has one scale (per-tensor); else empty.
  std::vector<double> tensorLevels;
  // The clip range across all cells: [min over cells of the low clip, max of the high clip].
  double clipLo = 0, clipHi = 0;

  // The selected cell.
  int64_t cellCount = 0, cellIndex = 0;
  int64_t cellRow0 = 0, cellRows = 0, cellCol0 = 0, cellCols = 0;
  float cellScale = 0;
  int cellZero = 0;
  std::vector<float> cellValues;   // the weights of that cell
  std::vector<double> cellLevels;  // every representable value of the cell
  double cellClipLo = 0, cellClipHi = 0;

  ErrorMetrics metrics;            // fake-quant vs original over the whole tensor
  uint64_t originalBytes = 0;      // as stored in the file
  QuantStorage storage;            // after quantisation
  double bitsPerWeight = 0;
};

// Throws BadInput for a tensor that is not found, not 1-D/2-D, not readable, or whose shape the
// format cannot take (K not a multiple of the group size), Cancelled when ctx says so.
// Statistics (histograms, channel absmax, the MSE clip search) run on `stats` — the CUDA
// calibration kernels when the backend has a GPU — or on the CPU reference when it is null.
// A linear layer stored transposed (GPT-2's Conv1D, [in, out]) is analysed as [out, in].
LayerAnalysis analyzeLayer(const ModelFile& model, const LayerAnalysisRequest& request,
                           const JobContext& ctx = {}, StatsOps* stats = nullptr);

// Every representable value of one scale cell (scale s, zero z), ascending: INT s·(q − z),
// FP8 s·v for each finite code v. Empty for plain float kinds.
std::vector<double> cellGridLevels(const WeightSpec& spec, float scale, int zero);
// The clip range of one cell: the values the extreme codes map to.
std::pair<double, double> cellClipRange(const WeightSpec& spec, float scale, int zero);

}  // namespace qs
