#include "train/same_data_check.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "core/error.h"
#include "parallel/comm_strings.h"

namespace trident {
namespace {

// The label and path as shown in one line (the error's, and as_lines' fields): a newline
// shows as '?', a tab in the label as a space (a tab in the path stays: it comes last).
DatasetIdentity one_line(DatasetIdentity id) {
  std::replace(id.label.begin(), id.label.end(), '\n', '?');
  std::replace(id.label.begin(), id.label.end(), '\t', ' ');
  std::replace(id.path.begin(), id.path.end(), '\n', '?');
  return id;
}

// One line a prefix (one_line's): role, content, label and path, tab-separated. The role and
// content are made without tabs or newlines.
std::string as_lines(const std::vector<DatasetIdentity>& ids) {
  std::string s;
  for (const DatasetIdentity& id : ids) s += id.role + '\t' + id.content + '\t' + id.label + '\t' + id.path + '\n';
  return s;
}

std::vector<DatasetIdentity> from_lines(const std::string& s) {
  std::vector<DatasetIdentity> ids;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1), c = line.find('\t', b + 1);
    ids.push_back({.label = line.substr(b + 1, c - b - 1),
                   .role = line.substr(0, a),
                   .content = line.substr(a + 1, b - a - 1),
                   .path = line.substr(c + 1)});
  }
  return ids;
}

}  // namespace

void check_every_rank_reads_the_same_data(Comm& world, const std::function<std::vector<DatasetIdentity>()>& identify) {
  // A prefix that does not open on some rank ends every rank (none waits for it below): the
  // failing rank keeps its error's kind, the others report the lowest such rank's.
  std::vector<DatasetIdentity> given;
  run_sharing_first_failure(world, [&] { given = identify(); });
  std::vector<DatasetIdentity> mine;
  for (const DatasetIdentity& id : given) mine.push_back(one_line(id));
  std::string rank0 = as_lines(mine);
  broadcast_string(world, rank0, 0);
  const std::vector<DatasetIdentity> theirs = from_lines(rank0);
  std::string diff;
  const std::string who = "rank " + std::to_string(world.rank());
  if (mine.size() != theirs.size())
    diff = who + "'s data flags name " + std::to_string(mine.size()) + " dataset prefixes, rank 0's " +
           std::to_string(theirs.size());
  for (size_t i = 0; i < mine.size() && diff.empty(); ++i) {
    const DatasetIdentity &a = mine[i], &b = theirs[i];
    if (a.role != b.role)
      diff = who + " reads " + a.label + " (" + a.path + ") where rank 0 reads " + b.label + " (" + b.path + ")";
    else if (a.content != b.content)
      diff = who + " reads other data than rank 0 in " + a.label + ": " + a.path + " holds " + a.content +
             "; rank 0's " + b.path + " holds " + b.content;
  }
  if (const std::string failure = first_failure(world, diff); !failure.empty()) throw ConfigError(failure);
}

}  // namespace trident
