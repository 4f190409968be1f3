#include "app/cli/cli.h"

#include <CLI/CLI.hpp>
#include <ostream>

#include "app/cli/commands.h"
#include "kernels/common/error.h"

namespace qs::cli {

int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"Quantscope: mixed-precision quantization lab (command line)", "quantscope-cli"};
  app.set_version_flag("--version", std::string("quantscope-cli ") + QS_VERSION);
  app.require_subcommand(0, 1);
  CliContext ctx{out, err};
  registerInspect(app, ctx);
  registerPlan(app, ctx);
  registerGenerate(app, ctx);
  registerPerplexity(app, ctx);
  registerBench(app, ctx);
  registerSynth(app, ctx);

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
    err << "quantscope-cli: " << e.what() << '\n';
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
