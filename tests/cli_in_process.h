#pragma once
// Runs quantscope-cli in this process (qs::cli::runCli) and captures its exit code, stdout and
// stderr — for the tests that link qs_cli.
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/cli.h"

namespace qs::test {

struct CliRun {
  int code;
  std::string out, err;
};

// args without the program name: {"inspect", "model.bin", "--json"}.
inline CliRun runCliInProcess(std::vector<std::string> args) {
  args.insert(args.begin(), "quantscope-cli");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = qs::cli::runCli(int(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace qs::test
