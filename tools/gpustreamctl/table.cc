// Aligned text tables.
#include "tools/gpustreamctl/table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "tools/gpustreamctl/format.h"

namespace gpustream::ctl {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) {
    std::fprintf(stderr,
                 "gpustreamctl: internal error: row of %zu cells in a "
                 "table of %zu columns\n",
                 cells.size(), columns_.size());
    std::abort();
  }
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<std::string> header;
  for (const Column& column : columns_) header.push_back(column.header);
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = DisplayWidth(header[c]);
    for (const auto& row : rows_) {
      widths[c] = std::max(widths[c], DisplayWidth(row[c]));
    }
  }
  std::string out;
  auto append_line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = widths[c] - DisplayWidth(cells[c]);
      if (c > 0) out += "  ";
      if (columns_[c].align == Align::kRight) {
        out.append(pad, ' ');
        out += cells[c];
      } else {
        out += cells[c];
        if (c + 1 < cells.size()) out.append(pad, ' ');
      }
    }
    out += '\n';
  };
  append_line(header);
  for (const auto& row : rows_) append_line(row);
  return out;
}

}  // namespace gpustream::ctl
