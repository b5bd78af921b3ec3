#include "data/jsonl_reader.h"

#include <lzma.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace trident {
namespace {
constexpr size_t kChunk = 1 << 20;
constexpr unsigned char kXzMagic[6] = {0xFD, '7', 'z', 'X', 'Z', 0x00};

const char* lzma_text(lzma_ret r) {
  switch (r) {
    case LZMA_MEM_ERROR: return "out of memory";
    case LZMA_FORMAT_ERROR: return "not in xz format";
    case LZMA_OPTIONS_ERROR: return "unsupported xz options";
    case LZMA_DATA_ERROR: return "corrupt xz data";
    case LZMA_BUF_ERROR: return "truncated xz data";
    default: return "xz decoder error";
  }
}
}  // namespace

struct JsonlReader::XzState {
  lzma_stream s = LZMA_STREAM_INIT;
};

JsonlReader::JsonlReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  if (!f_) throw IoError(detail::concat(path_, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) file_size_ = static_cast<uint64_t>(st.st_size);
  // The first bytes tell xz from text. They are kept, not re-read: a pipe (--input <(...),
  // /dev/stdin) cannot be rewound.
  char head[6] = {};
  size_t got = 0;
  try {
    got = read_raw(head, sizeof head);
  } catch (...) {
    std::fclose(f_);
    throw;
  }
  if (got == sizeof head && std::memcmp(head, kXzMagic, sizeof head) == 0) {
    xz_ = new XzState;
    lzma_ret r = lzma_stream_decoder(&xz_->s, UINT64_MAX, LZMA_CONCATENATED);
    if (r != LZMA_OK) {
      delete xz_;
      xz_ = nullptr;
      std::fclose(f_);
      throw IoError(detail::concat(path_, ": ", lzma_text(r)));
    }
    raw_.resize(kChunk);
    std::memcpy(raw_.data(), head, got);  // the decoder's first input
    xz_->s.next_in = reinterpret_cast<const uint8_t*>(raw_.data());
    xz_->s.avail_in = got;
  } else {
    // Other compressions would read as garbage text and fail as invalid JSON at line 1.
    const auto starts = [&](std::string_view magic) { return std::string_view(head, got).starts_with(magic); };
    const char* other = starts("\x1f\x8b") ? "gzip" : starts("BZh") ? "bzip2" : starts("\x28\xb5\x2f\xfd") ? "zstd" : nullptr;
    if (other) {
      std::fclose(f_);
      throw IoError(detail::concat(path_, ": ", other, "-compressed input is not supported: decompress it, or use xz"));
    }
    buf_.assign(head, head + got);  // the first text
  }
}

JsonlReader::~JsonlReader() {
  if (xz_) {
    lzma_end(&xz_->s);
    delete xz_;
  }
  if (f_) std::fclose(f_);
}

size_t JsonlReader::read_raw(char* dst, size_t n) {
  const size_t got = std::fread(dst, 1, n, f_);
  if (got < n) {
    if (std::ferror(f_)) throw IoError(detail::concat(path_, ": read failed: ", std::strerror(errno)));
    raw_eof_ = true;
  }
  raw_read_ += got;
  return got;
}

size_t JsonlReader::fill() {
  const size_t old = buf_.size();
  if (!xz_) {
    if (raw_eof_) return 0;
    buf_.resize(old + kChunk);
    const size_t got = read_raw(buf_.data() + old, kChunk);
    buf_.resize(old + got);
    return got;
  }
  if (xz_done_) return 0;
  lzma_stream* xz = &xz_->s;
  buf_.resize(old + kChunk);
  xz->next_out = reinterpret_cast<uint8_t*>(buf_.data() + old);
  xz->avail_out = kChunk;
  while (xz->avail_out > 0) {
    if (xz->avail_in == 0 && !raw_eof_) {
      xz->avail_in = read_raw(raw_.data(), raw_.size());
      xz->next_in = reinterpret_cast<const uint8_t*>(raw_.data());
    }
    const lzma_ret r = lzma_code(xz, raw_eof_ && xz->avail_in == 0 ? LZMA_FINISH : LZMA_RUN);
    if (r == LZMA_STREAM_END) {
      xz_done_ = true;
      break;
    }
    if (r != LZMA_OK) throw IoError(detail::concat(path_, ": ", lzma_text(r)));
  }
  const size_t got = kChunk - xz->avail_out;
  buf_.resize(old + got);
  return got;
}

// Line ends as Python's universal newlines (Megatron reads its input in text mode): "\n",
// "\r\n", or a lone "\r". One pass finds the first of either, so each byte is scanned once
// whichever ends the lines; a "\r" that ends the decoded text so far waits for the next byte.
bool JsonlReader::next(std::string_view& line) {
  size_t scan = pos_;
  for (;;) {
    const char* base = buf_.data();
    const size_t size = buf_.size();
    const char* stop = std::find_if(base + scan, base + size, [](char c) { return c == '\n' || c == '\r'; });
    const size_t end = static_cast<size_t>(stop - base);  // the line is [pos_, end)
    size_t next = 0;                                      // where the next line starts
    if (end < size && *stop == '\n') {
      next = end + 1;
    } else if (end + 1 < size) {  // "\r" with the byte after it in the buffer
      next = end + (base[end + 1] == '\n' ? 2 : 1);
    } else if (end + 1 == size && input_done_) {  // "\r" ending the input
      next = size;
    } else if (end == size && input_done_) {
      if (pos_ == size) return false;
      next = size;  // the last line, without a line end
    }
    if (next > 0) {
      line = std::string_view(base + pos_, end - pos_);
      if (line_no_ == 0 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // a UTF-8 byte-order mark
      text_bytes_ += next - pos_;
      pos_ = next;
      ++line_no_;
      return true;
    }
    // Keep the unread tail (from the "\r" at its end, or all of it scanned), drop what was
    // returned, then read more.
    scan = end - pos_;
    if (pos_ > 0) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
      pos_ = 0;
    }
    if (fill() == 0) input_done_ = true;
  }
}

}  // namespace trident
