#pragma once
// QuantFormat: what one linear layer is quantised to — the weight's kind, granularity, symmetry
// and scale method, and what happens to the activations that feed it. Formats have a canonical
// short string form used by plans (JSON) and the CLI; parse and print round-trip:
//
//   format  := weight [":" act]
//   weight  := kind ["-" gran] ["-" ("sym" | "asym")] ["-" method]
//   kind    := "int4" | "int8" | "fp8e4m3" | "fp8e5m2" | "fp16" | "bf16" | "f32"
//              | ggml   (a GGUF block type: no granularity or symmetry, the block is the type's)
//   ggml    := "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q8_0" | "q2_k" | "q3_k" | "q4_k" | "q5_k" | "q6_k"
//              (any case on input; printed in lower case)
//   gran    := "t" (per tensor) | "ch" (per output channel) | "g32" | "g64" | "g128" | "g256"
//              (groups along K) | "b128" (128×128 blocks, FP8 only)
//   method  := "mse" (clip search) | "p" NUMBER (percentile of |x|, 50..100) | "kl" (entropy,
//              per-tensor only) | "imatrix" (ggml kinds only: llama-quantize's importance-
//              weighted search with the calibration's E[x_c²] per input column); no method =
//              absmax (ggml kinds: llama-quantize's search without an importance matrix)
//   act     := "fp16" | "bf16" | akind "-tok" (dynamic, per token) | akind "-t" ["-" method]
//              (static per tensor; the method says how calibration picks the scale)
//   akind   := "int8" | "fp8e4m3" | "fp8e5m2"
//
// Examples: "int4-g128-sym", "int4-g128-asym-mse:fp16" (W4A16), "int8-ch-sym:int8-tok" (W8A8),
// "fp8e4m3-ch:fp8e4m3-tok", "fp8e4m3-b128", "int8-ch-sym:int8-t-kl", "fp16", "bf16", "q4_k",
// "q6_k-imatrix", "q4_0".
// Canonical output always names the symmetry of INT weights and never names "absmax"; the
// parser also accepts "absmax", a missing symmetry (= sym), and the optional tokens in any order.
//
// Layout conventions (docs/formats.md): a linear weight W is [N out, K in] row-major; groups run
// along K within each output row (as GPTQ, AWQ, Marlin and compressed-tensors do).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/common/dtype.h"

namespace qs {

// Stable numeric values (written to sessions): never renumber, never reuse.
enum class QuantKind : uint8_t {
  F32 = 0,  // unquantised
  FP16 = 1,
  BF16 = 2,
  FP8_E4M3 = 3,
  FP8_E5M2 = 4,
  INT8 = 5,
  INT4 = 6,
  // ggml block types (kernels/ggml: ggml-exact quantizers, byte-identical to llama-quantize).
  // A weight in one of these is stored as the type's blocks along K; K must be a multiple of
  // the block (32, or 256 for the K-quants).
  Q4_0 = 7,
  Q4_1 = 8,
  Q5_0 = 9,
  Q5_1 = 10,
  Q8_0 = 11,
  Q2_K = 12,
  Q3_K = 13,
  Q4_K = 14,
  Q5_K = 15,
  Q6_K = 16,
};

enum class QuantClass : uint8_t {
  Float,  // a plain cast (F32, FP16, BF16): no scale
  Fp8,    // scaled FP8
  Int,    // scaled integer
  Ggml,   // a ggml block type: scales (and minimums) live inside its blocks
};

struct QuantKindTraits {
  QuantKind kind;
  std::string_view name;  // the token in format strings: "int4", "fp8e4m3", …
  QuantClass cls;
  uint32_t bits;        // payload bits per value (ggml: the nominal bits of the codes, Q4_K 4)
  uint32_t blockElems;  // payload packing unit: blockElems values in blockBytes bytes
  uint32_t blockBytes;  //   (INT4: 2 values per byte; ggml: one block with its scales, e.g.
                        //   Q4_0 32 values in 18 bytes, Q4_K 256 in 144; everything else 1 value)
  int32_t symMin, symMax;  // INT symmetric codes (INT4: -8..7, INT8: -128..127); 0 otherwise
  int32_t asymMax;         // INT asymmetric codes are 0..asymMax (15, 255); 0 otherwise
  float maxValue;  // what the clip value maps to: INT sym 2^(b-1)-1 (7, 127), FP8 its largest
                   // finite value (448, 57344), Float 0
  DType dtype;     // storage dtype of one unpacked value (INT4 → I8, its codes as int8);
                   // ggml kinds: the block DType (DType::Q4_K …)
};

const QuantKindTraits& quantKindTraits(QuantKind kind);
// Exact token; ggml kinds also in any case ("Q4_K" reads as q4_k).
std::optional<QuantKind> quantKindFromName(std::string_view name);
// The ggml kind of a block DType (DType::Q4_K → QuantKind::Q4_K), nullopt for other dtypes.
std::optional<QuantKind> quantKindOfGgmlType(DType type);
inline bool isGgmlKind(QuantKind k) { return uint8_t(k) >= uint8_t(QuantKind::Q4_0) && uint8_t(k) <= uint8_t(QuantKind::Q6_K); }

// Stable numeric values, as above.
enum class Granularity : uint8_t {
  None = 0,     // Float kinds: no scale
  Tensor = 1,   // one scale for the whole tensor
  Channel = 2,  // one scale per output row n
  Group = 3,    // one scale per groupSize consecutive values along K in each row
  Block = 4,    // FP8: one scale per 128×128 tile (partial tiles at the edges)
};
// ggml kinds have Granularity::None in their spec: the block is the type's own.

enum class ScaleMethod : uint8_t {
  AbsMax = 0,      // clip at max |x| of the group
  Percentile = 1,  // clip at the p-th percentile of |x| of the group (nearest rank)
  MseClip = 2,     // clip at r·max|x|, r searched over kMseClipCandidates ratios in
                   // [kMseClipMinRatio, 1], minimising the group's squared error
  KlEntropy = 3,   // TensorRT-style entropy calibration on a 2048-bin |x| histogram
  Importance = 4,  // ggml kinds: the importance-weighted search of llama-quantize with an
                   // imatrix (weights E[x_c²] per input column, from calibration)
};

enum class ActScaling : uint8_t {
  None = 0,             // activations left as they are, or cast (FP16/BF16)
  PerTokenDynamic = 1,  // one FP32 scale per row (token), computed at run time from its max |x|
  PerTensorStatic = 2,  // one FP32 scale for the tensor, fixed by calibration
};

inline constexpr uint32_t kFp8BlockEdge = 128;
inline constexpr int kMseClipCandidates = 100;
inline constexpr float kMseClipMinRatio = 0.3f;
inline constexpr int kKlHistogramBins = 2048;
inline constexpr int kKlMinBins = 128;

struct WeightSpec {
  QuantKind kind = QuantKind::F32;
  Granularity granularity = Granularity::None;
  uint32_t groupSize = 0;  // Group: 32/64/128/256; Block: 128; otherwise 0
  bool symmetric = true;   // INT only (FP8 and Float are always symmetric)
  ScaleMethod method = ScaleMethod::AbsMax;
  float percentile = 0;  // Percentile only: p in [50, 100]; otherwise 0
  bool operator==(const WeightSpec&) const = default;
};

struct ActSpec {
  QuantKind kind = QuantKind::F32;  // F32: activations untouched
  ActScaling scaling = ActScaling::None;
  ScaleMethod method = ScaleMethod::AbsMax;  // PerTensorStatic: how calibration picks the scale
  float percentile = 0;
  bool operator==(const ActSpec&) const = default;
};

struct QuantFormat {
  WeightSpec weight;
  ActSpec act;
  // A friend, not a member: a CheckedFormat (below) compares with a QuantFormat either way round.
  friend bool operator==(const QuantFormat&, const QuantFormat&) = default;
};
// FP32 weights and activations: the format changes nothing (a plan's "leave it as it is").
inline bool isUnquantized(const QuantFormat& f) { return f.weight.kind == QuantKind::F32 && f.act.kind == QuantKind::F32; }

// Canonical string; the format must be valid (validateQuantFormat).
std::string formatToString(const QuantFormat& format);
std::string weightSpecToString(const WeightSpec& spec);
// Parses and validates. Bad text → ErrorKind::BadInput naming the text and the bad token.
QuantFormat parseQuantFormat(std::string_view text);
// Throws BadInput for combinations that make no sense (asymmetric FP8, blocks for INT, a group
// size other than 32/64/128/256, KL on a grouped weight, a percentile outside [50, 100], …).
void validateQuantFormat(const QuantFormat& format);
void validateWeightSpec(const WeightSpec& spec);
// One line for people: "INT4, groups of 128 along K, symmetric, absmax; activations FP16".
std::string describeFormat(const QuantFormat& format);

// The one validation of a format on its way to a kernel: validateQuantFormat, and that a
// [rows, cols] weight can take it (positive shape; K = cols a multiple of the group size or of
// the ggml block). BadInput naming `field` (the plan field or the option: "--format",
// "entries[2].weight"); the message is validateQuantFormat's or scaleGrid's, with `tensorName`
// (when given) in front of a shape problem.
class CheckedFormat;
CheckedFormat checkFormat(const QuantFormat& format, int64_t rows, int64_t cols, std::string_view field,
                          std::string_view tensorName = {});

// A format checked for one weight shape: what the runtime runs (core/runtime/runtime.h takes
// nothing else). Only checkFormat makes one, so a format is validated once on its way to a
// kernel: a plan's layers when the plan resolves (core/plan/plan.h, LayerQuant::format), the
// callers without a plan (--format, the labs, the sweeps' candidates, the baselines) when they
// call checkFormat with their own field name. Its fields read as a QuantFormat's (never write
// them: check the changed QuantFormat again), and it converts to one (a copy made that way is
// unchecked again). Comparing two compares formats only. The default is FP32 weights and activations, "leave the layer as loaded", which fits any
// shape.
class CheckedFormat : public QuantFormat {
 public:
  CheckedFormat() = default;
  // The [rows, cols] weight it was checked for; 0 × 0 for the default.
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Whether it may run on a [rows, cols] weight: checked for that shape, or the default.
  bool fits(int64_t rows, int64_t cols) const {
    return (rows_ == rows && cols_ == cols) || (rows_ == 0 && cols_ == 0);
  }
  // The same weight format with the activations untouched: still valid for the same shape
  // (a format's activation part never constrains its weight part or the shape).
  CheckedFormat weightOnly() const;

 private:
  friend CheckedFormat checkFormat(const QuantFormat&, int64_t, int64_t, std::string_view, std::string_view);
  CheckedFormat(const QuantFormat& f, int64_t rows, int64_t cols) : QuantFormat(f), rows_(rows), cols_(cols) {}
  int64_t rows_ = 0, cols_ = 0;
};

// The scale grid of a [rows, cols] weight: gridRows × gridCols scales, scale (i, j) covering
// rows [i·cellRows, …) and columns [j·cellCols, …) (cells at the bottom/right edge of a Block
// grid may be partial). Scales and zero points are stored row-major over this grid.
// Throws BadInput (naming `tensorName` when given, the shape and the group) when cols is not a
// multiple of the group size, or a dimension is not positive. ggml kinds: one cell per block
// (32 or 256 values along K), BadInput when cols is not a multiple of the block.
struct ScaleGrid {
  int64_t gridRows = 0, gridCols = 0;
  int64_t cellRows = 0, cellCols = 0;
  int64_t count() const { return gridRows * gridCols; }
  int64_t indexOf(int64_t row, int64_t col) const {
    return (row / cellRows) * gridCols + col / cellCols;
  }
};
ScaleGrid scaleGrid(const WeightSpec& spec, int64_t rows, int64_t cols,
                    std::string_view tensorName = {});
// Whether a [rows, cols] weight can take the grid of `spec` (scaleGrid would not throw): a
// positive shape and K a multiple of the group or of the ggml block. Arithmetic only: says
// nothing of whether `spec` itself is valid (that is checkFormat's).
bool weightFitsShape(const WeightSpec& spec, int64_t rows, int64_t cols);

// Bytes of payload per row: INT4 packs two values per byte (ceil(cols/2)).
uint64_t payloadRowBytes(QuantKind kind, int64_t cols);

struct QuantStorage {
  uint64_t payloadBytes = 0;  // the codes (ggml kinds: the whole blocks, scales included, exactly
                              // the GGUF tensor's bytes)
  uint64_t scaleBytes = 0;    // FP16 scales: 2 bytes each
  uint64_t zeroBytes = 0;     // asymmetric INT: zero points, INT4 packed two per byte, INT8 one
  uint64_t totalBytes() const { return payloadBytes + scaleBytes + zeroBytes; }
};
QuantStorage quantStorage(const WeightSpec& spec, int64_t rows, int64_t cols);
// Bits per weight including scales and zero points: int4-g128-sym 4.125, -asym 4.15625,
// q4_0 4.5, q4_k 4.5, q6_k 6.5625.
double effectiveBitsPerWeight(const WeightSpec& spec, int64_t rows, int64_t cols);

}  // namespace qs
