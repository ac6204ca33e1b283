// Aligned plain-text tables: a header row, then one row per record, columns
// padded to their widest cell and separated by two spaces.
#ifndef GPUSTREAM_TOOLS_GPUSTREAMCTL_TABLE_H_
#define GPUSTREAM_TOOLS_GPUSTREAMCTL_TABLE_H_

#include <string>
#include <vector>

namespace gpustream::ctl {

class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };

  explicit Table(std::vector<Column> columns);

  // One record. Contract: exactly one cell per column (a mismatch is a
  // programming error and aborts); cells are printed as given, so callers
  // pass them through Cell() when they come from the daemon.
  void AddRow(std::vector<std::string> cells);

  // The header and the rows, each line ending in '\n'. Right-aligned
  // columns (numbers) are padded on the left; the last column, when
  // left-aligned, is not padded, so no line ends in spaces.
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace gpustream::ctl

#endif  // GPUSTREAM_TOOLS_GPUSTREAMCTL_TABLE_H_
