#pragma once
// Plain-text tables for CLI output: columns sized to their widest cell, numbers right-aligned.
#include <ostream>
#include <string>
#include <vector>

namespace qs::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, std::vector<bool> rightAlign = {});
  void addRow(std::vector<std::string> row);
  void print(std::ostream& os, const std::string& indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// 3.14159, 2 → "3.14"
std::string fixedPoint(double v, int digits);
// 260032 → "260,032"
std::string withThousands(unsigned long long v);
// 1056540 → "1.01 MiB"
std::string humanBytes(unsigned long long bytes);

}  // namespace qs::cli
