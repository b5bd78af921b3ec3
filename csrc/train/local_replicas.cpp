#include "train/local_replicas.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "ckpt/metadata.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parallel/comm_strings.h"
#include "train/local_checkpoint.h"

namespace trident {
namespace fs = std::filesystem;

std::vector<int> replication_clique(int rank, int world, int jump, int factor) {
  if (jump < 1 || factor < 1 || world % (jump * factor) != 0)
    throw ConfigError("--replication-jump " + std::to_string(jump) + " x --replication-factor " +
                      std::to_string(factor) + " must divide the world size " + std::to_string(world));
  // Rank b + k J is the k-th of sequence b; its clique the F consecutive ones around it.
  const int b = rank % jump, first = rank / jump / factor * factor;
  std::vector<int> clique;
  for (int k = first; k < first + factor; ++k) clique.push_back(b + k * jump);
  return clique;
}

fs::path replica_root(const TrainOptions& o, int holder, int owner) {
  return fs::path(o.non_persistent_local_ckpt_dir) / std::to_string(holder) / (kReplicaPrefix + std::to_string(owner));
}

void remove_stale_copies(const TrainOptions& o, int rank, const std::vector<int>& clique) {
  const fs::path root = local_checkpoint_root(o, rank);
  std::vector<fs::path> stale;
  std::error_code ec;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kReplicaPrefix, 0) != 0) continue;
    const std::string owner = name.substr(std::strlen(kReplicaPrefix));
    if (all_digits(owner) && std::find(clique.begin(), clique.end(), std::stoi(owner)) == clique.end())
      stale.push_back(it->path());
  }
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) throw IoError(p.string() + ": cannot delete: " + ec.message());
  }
}

namespace {

constexpr uint64_t kPieceBytes = uint64_t{64} << 20;

struct FileEntry {
  std::string path;  // relative
  uint64_t size = 0;
};

// A path a copy's file may have: relative, inside its folder.
bool safe_relative(const std::string& path) {
  const fs::path p(path);
  if (path.empty() || p.is_absolute() || path.find('\n') != std::string::npos) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".." || part == "."; });
}

// The files of the checkpoint folder `dir`: its metadata.json and the files it lists.
std::vector<FileEntry> checkpoint_files(const fs::path& dir) {
  const fs::path meta = dir / kMetadataFileName;
  std::vector<FileEntry> out{{kMetadataFileName, static_cast<uint64_t>(fs::file_size(meta))}};
  for (const FileRecord& f : read_metadata(meta.string()).files) {
    if (!safe_relative(f.path)) throw IoError(meta.string() + ": lists the file '" + f.path + "', outside its folder");
    out.push_back({f.path, f.size});
  }
  return out;
}

std::string manifest_text(const std::vector<FileEntry>& files) {
  std::ostringstream s;
  for (const FileEntry& f : files) s << f.size << ' ' << f.path << '\n';
  return s.str();
}

// The files a manifest lists; `error` names one whose path leads outside the folder.
std::vector<FileEntry> parse_manifest(const std::string& text, std::string* error) {
  std::vector<FileEntry> out;
  std::istringstream in(text);
  FileEntry f;
  while (in >> f.size && std::getline(in >> std::ws, f.path)) {
    if (!safe_relative(f.path) && error->empty())
      *error = "the copy lists the file '" + f.path + "', outside its folder";
    out.push_back(f);
  }
  return out;
}

uint64_t total_bytes(const std::vector<FileEntry>& files) {
  uint64_t n = 0;
  for (const FileEntry& f : files) n += f.size;
  return n;
}

// The files as one stream of bytes, read (or written) a piece at a time, in order. Written
// files are hashed as they are written (written_checksums()).
class FileStream {
 public:
  FileStream(fs::path dir, std::vector<FileEntry> files, bool writing)
      : dir_(std::move(dir)), files_(std::move(files)), writing_(writing) {}
  // Reads (writes) the next `n` bytes of the stream.
  void transfer(char* data, uint64_t n) {
    while (n > 0) {
      open_current();
      const uint64_t part = std::min(n, files_[at_].size - done_);
      if (writing_) {
        errno = 0;
        out_.write(data, static_cast<std::streamsize>(part));
        if (!out_) write_failed(": cannot write");
        hasher_->update(data, part);
      } else {
        in_.read(data, static_cast<std::streamsize>(part));
        if (!in_) throw IoError(current().string() + ": cannot read");
      }
      data += part;
      n -= part;
      done_ += part;
      if (done_ == files_[at_].size) close_current();
    }
  }
  // Creates the empty files that no byte reached.
  void finish() {
    while (writing_ && at_ < files_.size()) {
      open_current();
      close_current();
    }
  }
  // Each written file's checksum (checksum.h), by its relative path.
  const std::map<std::string, std::string>& written_checksums() const { return checksums_; }

 private:
  fs::path current() const { return dir_ / files_[at_].path; }
  // The current file's write (`what`: ": cannot write") failed: errno, where the stream's call
  // set it, says whether the disk is full (StorageError).
  [[noreturn]] void write_failed(const char* what) const {
    const int err = errno;
    throw_write_failure(current().string() + what + (err != 0 ? std::string(": ") + std::strerror(err) : ""), err);
  }
  void open_current() {
    if (in_.is_open() || out_.is_open()) return;
    if (!writing_) {
      in_.open(current(), std::ios::binary);
      if (!in_) throw IoError(current().string() + ": cannot open");
      return;
    }
    std::error_code ec;
    fs::create_directories(current().parent_path(), ec);
    errno = 0;
    out_.open(current(), std::ios::binary | std::ios::trunc);
    if (!out_) write_failed(": cannot create");
    hasher_.emplace();
  }
  void close_current() {
    if (writing_) {
      errno = 0;
      out_.close();
      if (!out_) write_failed(": cannot write");
      checksums_[files_[at_].path] = hasher_->hex();
    } else {
      in_.close();
    }
    ++at_;
    done_ = 0;
  }

  fs::path dir_;
  std::vector<FileEntry> files_;
  bool writing_;
  size_t at_ = 0;
  uint64_t done_ = 0;
  std::ifstream in_;
  std::ofstream out_;
  std::optional<Xxh3Hasher> hasher_;
  std::map<std::string, std::string> checksums_;
};

// A received copy is whole only when every file its metadata.json lists arrived with the size
// and checksum recorded there: a holder's copy damaged on its disk is refused (and another
// holder's taken), not committed for the load to find.
void check_received(const fs::path& dir, const std::map<std::string, std::string>& checksums) {
  for (const FileRecord& f : read_metadata((dir / kMetadataFileName).string()).files) {
    const auto got = checksums.find(f.path);
    if (got == checksums.end()) throw IoError((dir / f.path).string() + ": not in the copy sent");
    check_file_checksum((dir / f.path).string(), got->second, f.xxh3);
  }
}

}  // namespace

std::string exchange_checkpoint_folders(Comm& c, const fs::path& dir, int send_to, const fs::path& into_root,
                                        int64_t iteration, int receive_from, const std::string& token,
                                        bool* storage_failed) {
  const bool sending = !dir.empty(), receiving = !into_root.empty();
  const int to = sending ? send_to : -1, from = receiving ? receive_from : -1;
  // Errors are kept, not thrown, until both sides are through: a side that stopped halfway
  // would leave its peer waiting.
  struct Kept {
    std::string error;
    bool storage = false;  // the error was a StorageError (a full disk)
  } send, receive;
  const auto kept = [](Kept& k, const std::function<void()>& step) {
    if (!k.error.empty()) return;
    try {
      step();
    } catch (const StorageError& e) {
      k.error = e.what();
      k.storage = true;
    } catch (const std::exception& e) {
      k.error = e.what();
    }
  };
  std::string &send_error = send.error, &receive_error = receive.error;
  std::vector<FileEntry> mine;
  if (sending) kept(send, [&] { mine = checkpoint_files(dir); });
  const std::vector<FileEntry> theirs =
      parse_manifest(exchange_string(c, manifest_text(mine), to, from), &receive_error);
  std::optional<TempIterationDir> temp;
  if (receiving) kept(receive, [&] { temp.emplace(into_root, iteration, token); });
  FileStream reader(dir, mine, false), writer(temp ? temp->path() : fs::path(), theirs, true);
  uint64_t left_out = total_bytes(mine), left_in = total_bytes(theirs);
  std::vector<int32_t> piece_out, piece_in;
  while (left_out > 0 || left_in > 0) {
    const uint64_t n_out = std::min(left_out, kPieceBytes), n_in = std::min(left_in, kPieceBytes);
    piece_out.assign((n_out + 3) / 4, 0);
    piece_in.assign((n_in + 3) / 4, 0);
    if (n_out > 0) kept(send, [&] { reader.transfer(reinterpret_cast<char*>(piece_out.data()), n_out); });
    c.exchange(optional_sendrecv(host_i32(piece_out.data(), static_cast<int64_t>(piece_out.size())), to,
                                 host_i32(piece_in.data(), static_cast<int64_t>(piece_in.size())), from));
    if (n_in > 0) kept(receive, [&] { writer.transfer(reinterpret_cast<char*>(piece_in.data()), n_in); });
    left_out -= n_out;
    left_in -= n_in;
  }
  // Each side tells the other whether what it sent is whole.
  const std::string their_error = exchange_string(c, send_error, to, from);
  if (!send_error.empty())
    send_error = "sending " + dir.string() + " to rank " + std::to_string(send_to) + ": " + send_error;
  if (!receiving) return send_error;
  if (receive_error.empty() && !their_error.empty())
    receive_error = "rank " + std::to_string(receive_from) + ": " + their_error;
  kept(receive, [&] {
    writer.finish();
    check_received(temp->path(), writer.written_checksums());
    temp->commit();
  });
  if (!receive_error.empty() && temp) temp->discard();
  if (!receive_error.empty())
    receive_error = "receiving rank " + std::to_string(receive_from) + "'s copy into " + into_root.string() + ": " +
                    receive_error;
  if (storage_failed != nullptr) *storage_failed = !send_error.empty() ? send.storage : receive.storage;
  return !send_error.empty() ? send_error : receive_error;
}

}  // namespace trident
