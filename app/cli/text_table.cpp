#include "app/cli/text_table.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace qs::cli {

std::string fixedPoint(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> rightAlign)
    : header_(std::move(header)), right_(std::move(rightAlign)) {
  right_.resize(header_.size(), false);
}

void TextTable::addRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void TextTable::print(std::ostream& os, const std::string& indent) const {
  std::vector<size_t> w(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) w[c] = header_[c].size();
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    os << indent;
    for (size_t c = 0; c < r.size(); ++c) {
      if (c) os << "  ";
      const bool last = c + 1 == r.size();
      if (right_[c])
        os << std::setw(int(w[c])) << std::right << r[c];
      else if (last)
        os << r[c];
      else
        os << std::setw(int(w[c])) << std::left << r[c];
    }
    os << std::right << '\n';
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

std::string withThousands(unsigned long long v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

std::string humanBytes(unsigned long long bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace qs::cli
