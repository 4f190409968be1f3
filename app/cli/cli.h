#pragma once
// quantscope-cli as a library: main() is one line, tests call runCli() in-process.
// Exit codes, for every command: 0 success, 2 bad input or usage (one line on stderr naming the
// file and the problem), 1 any other failure.
#include <iosfwd>

namespace qs::cli {

// 130 (128 + SIGINT): a job stopped by Ctrl-C that kept what it had finished (sensitivity).
enum ExitCode { kExitOk = 0, kExitFailure = 1, kExitBadInput = 2, kExitInterrupted = 130 };

int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace qs::cli
