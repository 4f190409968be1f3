#include "app/cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <ostream>

#include "app/cli/commands.h"
#include "kernels/common/error.h"

namespace qs::cli {

BackendChoice CliContext::backendChoice() const {
  if (backendName == "cpu") return BackendChoice::Cpu;
  if (backendName == "cuda") return BackendChoice::Cuda;
  return BackendChoice::Auto;
}

Backend& CliContext::backend() {
  if (!backendPtr) {
    backendPtr = createBackend(backendChoice());
    err << "backend: " << backendPtr->name();
    const DeviceInfo& dev = backendPtr->device();
    if (backendPtr->kind() == BackendKind::Cpu)
      err << (dev.cudaAvailable ? " (chosen; GPU " + dev.name + " unused)" : "; " + dev.summary());
    err << '\n';
  }
  return *backendPtr;
}

int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"Quantscope: mixed-precision quantization lab (command line)", "quantscope-cli"};
  app.set_version_flag("--version", std::string("quantscope-cli ") + QS_VERSION);
  app.require_subcommand(0, 1);
  CliContext ctx{out, err, kExitOk, "auto", nullptr, {}};
  app.add_option("--backend", ctx.backendName,
                 "Compute backend: auto (CUDA when a device works, else CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  // The CUDA op-set reads its kernel choices from the environment once, when it is created
  // (after parsing): this flag is QS_GEMM_FP8_ACCUM.
  app.add_option_function<std::string>(
         "--fp8-accum", [](const std::string& mode) { setenv("QS_GEMM_FP8_ACCUM", mode.c_str(), 1); },
         "FP8 W8A8 / W4A8 at more than 16 tokens on sm_90: promoted (FP32 promotion of the tensor cores' "
         "sums, the default) or fast (also time CUTLASS's fast-accumulation kernels, vLLM's FP8 arithmetic)")
      ->check(CLI::IsMember({"promoted", "fast"}));
  app.fallthrough();  // --backend also after the subcommand: `bench calib --backend cpu`
  registerInspect(app, ctx);
  registerPlan(app, ctx);
  registerGenerate(app, ctx);
  registerPerplexity(app, ctx);
  registerBench(app, ctx);
  registerSynth(app, ctx);
  registerCalibrate(app, ctx);
  registerSensitivity(app, ctx);
  registerAccumulate(app, ctx);
  registerModelExport(app, ctx);
  registerSpeed(app, ctx);
  registerQuantize(app, ctx);
  registerAutoquant(app, ctx);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      out << app.help();
      return kExitOk;
    }
    return ctx.exitCode;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    app.exit(e, out, err);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err << "quantscope-cli: " << e.what() << " (see --help)\n";
    return kExitBadInput;
  } catch (const qs::Error& e) {
    err << "quantscope-cli: ";
    if (auto it = ctx.fieldFiles.find(e.field()); e.file().empty() && it != ctx.fieldFiles.end())
      err << it->second << ": ";
    err << e.what() << '\n';
    return e.isUserError() ? kExitBadInput : kExitFailure;
  } catch (const std::bad_alloc&) {
    err << "quantscope-cli: out of memory\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    err << "quantscope-cli: internal error: " << e.what() << '\n';
    return kExitFailure;
  }
}

}  // namespace qs::cli
