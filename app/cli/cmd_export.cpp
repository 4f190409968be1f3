// quantscope-cli export MODEL [--plan PLAN] --to gguf|safetensors|hdf5 -o OUT [--force] [--nearest]
//                         [--dry-run] [--calib-text FILE [--calib-tokens N]] [--tokenizer T] [--json]
#include <nlohmann/json.hpp>
#include <optional>

#include "app/cli/commands.h"
#include "app/cli/run_support.h"
#include "core/export/model_export.h"
#include "core/model/compressed_tensors_file.h"
#include "core/runtime/loaded_model.h"
#include "core/rounding/quantize_model.h"
#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {

void registerModelExport(CLI::App& app, CliContext& ctx) {
  struct Args {
    std::string model, plan, to, out, tokenizer, calibText;
    int64_t calibTokens = 512;
    bool force = false, nearest = false, dryRun = false, json = false, allowOtherModel = false, quantizeHead = false,
         noVllmRules = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("export", "Write the model with a plan applied: GGUF, safetensors (compressed-tensors) or an HDF5 archive");
  cmd->add_option("MODEL", a->model, "Model file")->required();
  cmd->add_option("--plan", a->plan,
                  "Plan JSON (quantscope-cli plan …); default for a compressed-tensors checkpoint: the plan it was "
                  "quantised with (its stored codes are written again, not re-rounded)");
  cmd->add_option("--to", a->to, "gguf | safetensors | hdf5")->required()->check(CLI::IsMember({"gguf", "safetensors", "hdf5"}));
  cmd->add_option("-o,--out", a->out, "Output file (gguf, hdf5) or folder (safetensors)")->required();
  cmd->add_flag("--force", a->force, "Replace existing output files");
  cmd->add_flag("--nearest", a->nearest,
                "Map plan layers the target cannot express to the nearest type it has (a warning each) instead of refusing");
  cmd->add_flag("--quantize-head", a->quantizeHead,
                "safetensors: quantise lm_head / embeddings as the plan says (default: kept unquantised, as vLLM needs)");
  cmd->add_flag("--no-vllm-rules", a->noVllmRules,
                "safetensors: write the plan as it is for transformers (no fused-group check, head as planned); vLLM "
                "may then refuse the folder");
  cmd->add_flag("--dry-run", a->dryRun, "Print what would be written and the warnings; write nothing");
  cmd->add_option("--calib-text", a->calibText,
                  "Text to calibrate on: GPTQ / AWQ / SmoothQuant layers of the plan (needed then), statistics in the "
                  "HDF5 archive, static scales in safetensors");
  cmd->add_option("--calib-tokens", a->calibTokens, "Calibration tokens at most (default 512)")->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the model's own, or one next to it)");
  cmd->add_flag("--allow-other-model", a->allowOtherModel, "Accept a plan made for a model with another hash");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->callback([&ctx, a] {
    TerminalProgress progress;
    // The tokenizer is read only when the export needs it (calibration, a GGUF vocabulary): a
    // weights-only model whose tokenizer.json we cannot parse (WordPiece) still exports.
    const bool needsTokenizer = !a->calibText.empty() || a->to == "gguf";
    LoadedModel m;
    m.file = openModel(a->model);
    m.graph = buildModelGraph(*m.file);
    try {
      m.tokenizer = findTokenizer(*m.file, a->tokenizer, &m.tokenizerPath);
    } catch (const Error& e) {
      if (needsTokenizer || !a->tokenizer.empty()) throw;
      ctx.err << "note: tokenizer not read (" << e.what() << "); this export does not need it\n";
    }
    PlanReadInfo info;
    const bool checkpoint = compressedCheckpointOf(*m.file) != nullptr;
    if (a->plan.empty() && !checkpoint)
      throwBadInput(a->model, "--plan", "a plan is needed (only a compressed-tensors checkpoint brings its own)");
    const Plan plan = a->plan.empty() ? checkpointPlan(*m.file, m.graph) : loadPlan(a->plan, &info);
    for (const auto& n : info.notes) ctx.err << a->plan << ": " << n << '\n';
    const ResolvedPlan resolved = resolveForModel(plan, m, a->plan, a->allowOtherModel);
    // A compressed-tensors source: layers the plan keeps in their stored format are written with
    // the stored codes (its scales fixed), never rounded a second time.
    const RoundedTensors storedCodes = checkpoint ? checkpointRounded(*m.file, resolved) : RoundedTensors{};

    ModelExportOptions o;
    o.format = *modelExportFormatFromName(a->to);
    o.force = a->force;
    o.quantizeHead = a->quantizeHead;
    o.vllmRules = !a->noVllmRules;
    o.inexpressible = a->nearest ? Inexpressible::Nearest : Inexpressible::Refuse;
    o.planSource = a->plan;
    JobContext job;
    job.onProgress = [&progress](double f, std::string_view s) { progress.update(f, s); };

    // The calibration text, tokenized once: activation statistics and GPTQ / AWQ / SmoothQuant.
    std::vector<int32_t> calibIds;
    int32_t bos = -1;
    if (!a->calibText.empty()) {
      if (!m.tokenizer) throwBadInput(a->model, "tokenizer", "calibration needs a tokenizer (--tokenizer)");
      calibIds = m.tokenizer->encode(readTextFile(a->calibText, textBytesForTokens(*m.tokenizer, a->calibTokens)), {});
      if (int64_t(calibIds.size()) > a->calibTokens) calibIds.resize(size_t(a->calibTokens));
      bos = m.tokenizer->sequenceStart();
    }
    CalibrationStats calib;
    if (!a->calibText.empty()) {
      Runtime rt(*m.file, m.graph, ctx.backend(), {}, &job);
      calib = calibrateForExport(rt, ctx.backend().stats(), calibIds, bos, a->calibText, &job);
      o.calibration = &calib;
    }

    // GPTQ / AWQ / SmoothQuant layers: calibrate and round on the calibration text first; the
    // export writes what that produced (core/rounding/rounded_tensors.h).
    std::optional<QuantizeReport> rounding;
    if (needsRounding(resolved) && !a->dryRun) {
      if (a->calibText.empty())
        throwBadInput(a->plan, "method",
                      "the plan rounds layers with GPTQ, AWQ or SmoothQuant: give the text to calibrate them on "
                      "(--calib-text FILE)");
      Runtime rt(*m.file, m.graph, ctx.backend(), {}, &job);
      rounding = quantizeResolvedPlan(rt, ctx.backend(), resolved, calibIds, bos, &job);
      for (const auto& l : rounding->layers)
        if (!l.note.empty()) ctx.err << "note: " << l.name << ": " << l.note << '\n';
    }
    if (rounding && !storedCodes.empty())
      throwBadInput(a->plan, "method", "GPTQ / AWQ / SmoothQuant on a compressed-tensors checkpoint: its layers are "
                                       "already rounded (export it with its own plan, or one that re-quantises with RTN)");
    const ExportSource src{*m.file, m.graph, m.tokenizer.get(), plan, resolved,
                           rounding ? &rounding->rounded : storedCodes.empty() ? nullptr : &storedCodes, a->tokenizer};
    ModelExportResult r;
    if (a->dryRun) r.preview = previewModelExport(src, a->out, o);
    else r = exportModel(src, a->out, o, &job);
    const ExportPreview& p = r.preview;
    for (const auto& n : p.notes) ctx.err << "note: " << n << '\n';
    for (const auto& w : p.warnings) ctx.err << "warning: " << w << '\n';
    if (a->dryRun)
      for (const auto& x : p.refusals) ctx.err << "refused: " << x << '\n';
    if (a->json) {
      nlohmann::ordered_json j;
      j["model"] = a->model;
      j["plan"] = a->plan;
      j["format"] = a->to;
      j["dry_run"] = a->dryRun;
      j["files"] = p.files;
      j["written"] = !a->dryRun;
      j["bytes"] = r.bytes;
      j["estimated_tensor_bytes"] = p.estimatedBytes;
      j["notes"] = p.notes;
      j["warnings"] = p.warnings;
      j["refusals"] = p.refusals;
      nlohmann::ordered_json ts = nlohmann::ordered_json::array();
      for (const auto& t : p.tensors) {
        nlohmann::ordered_json e;
        e["source"] = t.sourceName;
        e["output"] = t.outputName;
        e["layer"] = t.layer;
        e["storage"] = t.storage;
        e["exact"] = t.exact;
        if (!t.note.empty()) e["note"] = t.note;
        ts.push_back(e);
      }
      j["tensors"] = ts;
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      for (const auto& t : p.tensors)
        ctx.out << t.outputName << "  " << t.storage << (t.layer.empty() ? "" : "  (" + t.layer + ")")
                << (t.exact ? "" : "  [nearest]") << (t.note.empty() ? "" : "  " + t.note) << '\n';
      if (a->dryRun)
        ctx.out << (p.canWrite() ? "would write " : "cannot write ") << p.files.size() << " file(s), about "
                << p.estimatedBytes << " bytes of tensor data; " << p.warnings.size() << " warning(s), "
                << p.refusals.size() << " refusal(s)\n";
      else
        ctx.out << "wrote " << r.files.size() << " file(s), " << r.bytes << " bytes: " << r.files.front() << '\n';
    }
    if (a->dryRun && !p.canWrite()) ctx.exitCode = 2;
  });
}

}  // namespace qs::cli
