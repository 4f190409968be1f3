#include <iostream>

#include "app/cli/cli.h"

int main(int argc, char** argv) { return qs::cli::runCli(argc, argv, std::cout, std::cerr); }
