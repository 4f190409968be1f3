#pragma once
// The `.qsession` file: everything the analysis produced for one model, so that reopening shows
// it without recomputing. HDF5 (readable with h5py or h5dump), keyed by the model's hash
// (sampledModelHash, core/plan/model_hash.h): opening a session for a different model is BadInput naming both hashes.
//
// Layout (schema version 1; docs/analysis.md has the full list with types):
//   /                          @format "quantscope-session", @schema_version, @model_path,
//                              @model_hash, @written_by
//   /calibration               @tokens @windows @context @text_source @protocol @layer_count
//   /calibration/layers/NNNN   one group per linear layer (Runtime::linears() order):
//                              @weight_name @role @block @out_features @in_features @parameters
//       activations/           channel statistics of the input: min max (f32[K]), sum sum_sq
//                              (f64[K]), nan (u64[K]), @values
//       activation_hist/       counts (u64[bins]), @lo @hi @underflow @overflow @nan
//       activation_abs_hist/   the same for |x|
//       weight_rows/           channel statistics of W's output rows ([N])
//       weight_hist/
//   /sensitivity               @model_hash @tokens @context @base_perplexity @text_source
//       layers/                weight_name role (str[L]) block (i64[L]) out_features
//                              in_features (i64[L]) parameters (u64[L])
//       formats                str[F], canonical format strings
//       weight_sqnr_db weighted_error output_error kl perplexity top1_agreement
//                              f64[L, F] (NaN: not measured)
//       applicable             u8[L, F]
//       kl_source              u8[L, F]: KlSource (0 none, 1 measured, 2 estimated); optional
//                              (files before it: every finite KL measured)
//   /speed                     @device; layers/ and formats as in /sensitivity; token_counts
//                              (i64[M]); kernel_us baseline_us f64[L·F, M] (row layer·F + format;
//                              NaN: not measured)
//   /plans/NAME                a string dataset: the plan's JSON text
//   /runs/NAME                 an error-accumulation run: @tokens @windows @context
//                              @scored_positions @batches @kl @perplexity @base_perplexity
//                              @top1_agreement @protocol; plan (string, JSON), layer_formats
//                              (str[L]), block_rel_l2 block_cosine (f64[B]), batch_rel_l2
//                              batch_cosine (f64[batches, B])
//
// Saving is atomic: a temporary file beside the target, fsync, rename. Reading checks every
// dataset's type and extent and turns any HDF5 failure into BadInput naming the file and the
// dataset; it never crashes on a corrupt file.
#include <map>
#include <optional>
#include <string>

#include "core/analysis/accumulate.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/tables.h"
#include "core/model/model_graph.h"

namespace qs {

inline constexpr int64_t kSessionSchemaVersion = 1;

struct RunTrace {
  std::string planJson;  // the per-layer assignment that ran (assignmentToJson), as text
  AccumulationResult result;
};

struct Session {
  std::string modelPath, modelHash;
  std::optional<CalibrationResult> calibration;
  std::optional<SensitivityTable> sensitivity;
  std::optional<SpeedTable> speed;
  std::map<std::string, std::string> plans;  // name → plan JSON text
  std::map<std::string, RunTrace> runs;      // name → run trace
};

// Throws BadInput for a name that cannot key a plan or run (empty, longer than 200 bytes,
// containing '/' or a control character, "." or "..").
void checkSessionName(const std::string& name, const std::string& what);

// Reads a whole session file. libhdf5 parses it in a forked child process (it is not memory-safe
// on corrupt files): a crash or hang there is BadInput naming the file (session.cpp says more).
// Its tables' rows carry no canonical names (LayerRef::name) until opened against the model
// (openSessionFor).
Session loadSession(const std::string& path);
// The same parse in this process, without the child: for the fuzzer (tests/fuzz/fuzz_session),
// which must see the reader's coverage and whatever goes wrong in it.
Session loadSessionInProcess(const std::string& path);

// Writes the session to `path` atomically.
void saveSession(const Session& session, const std::string& path);

// The session of `path` when the file exists (BadInput naming both hashes when it was made for
// another model; the model path is updated when the model moved), else an empty one for it.
// The file keys its layers by weight name: the rows of its tables (calibration, sensitivity,
// speed) get their canonical names from `graph`, the model's (nameLayerRows: BadInput naming
// the file and the dataset for a row that is no layer of it), so sessions written before
// canonical names existed open the same way.
Session openSessionFor(const std::string& path, const std::string& modelPath,
                       const std::string& modelHash, const ModelGraph& graph);

}  // namespace qs
