// gzip.cpp — gzipped traces (gzip.hpp).
#include "viewer/model/gzip.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "core/base/check.hpp"

namespace distlab::viewer {

namespace {

// windowBits 15 + 16: a gzip stream (not zlib's own header); + 32 would also take zlib's.
constexpr int kGzipWindow = 15 + 16;

// Inflates `in` (one or more gzip members, one after another) and hands each piece of output to
// `sink(data, size)`; returns the bytes that came out. Throws on a broken or cut stream.
template <class Sink>
std::size_t inflate_all(std::string_view in, std::size_t limit, const std::string& what,
                        Sink&& sink) {
  std::size_t total = 0;
  std::vector<unsigned char> buf(1 << 18);
  std::size_t pos = 0;
  while (pos < in.size()) {
    z_stream z{};
    if (inflateInit2(&z, kGzipWindow) != Z_OK) throw Error("zlib could not start inflating");
    std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
    z.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size() - pos, 1u << 30));
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_BUF_ERROR && z.avail_in == 0 && pos + z.total_in < in.size()) {
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos + z.total_in));
        z.avail_in =
            static_cast<uInt>(std::min<std::size_t>(in.size() - pos - z.total_in, 1u << 30));
        continue;
      }
      if (rc != Z_OK && rc != Z_STREAM_END)
        throw Error(
            fmt::format("{} is not a whole gzip stream ({}); it may be cut short", what,
                        z.msg ? z.msg : (rc == Z_BUF_ERROR ? "it ends early" : "zlib error")));
      const std::size_t out = buf.size() - z.avail_out;
      total += out;
      if (total > limit)
        throw Error(fmt::format("{} inflates to more than {} bytes; not read", what, limit));
      sink(buf.data(), out);
    }
    pos += z.total_in;
    // Padding zeros after the last member (some writers add them) end the stream.
    while (pos < in.size() && in[pos] == '\0') ++pos;
  }
  return total;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open trace {}: no such file, or not readable", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes;
}

}  // namespace

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

bool is_gzip_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[2] = {};
  in.read(magic, 2);
  return in.gcount() == 2 && is_gzip({magic, 2});
}

std::string gunzip(std::string_view bytes, std::size_t limit) {
  std::string out;
  inflate_all(bytes, limit, "the trace", [&](const unsigned char* d, std::size_t n) {
    out.append(reinterpret_cast<const char*>(d), n);
  });
  return out;
}

std::size_t gunzip_file(const std::string& path, const std::function<void(std::size_t)>& expect,
                        const std::function<void(const char*, std::size_t)>& sink) {
  const std::string bytes = read_all(path);
  std::uint32_t isize = 0;
  if (bytes.size() >= 18) std::memcpy(&isize, bytes.data() + bytes.size() - 4, 4);  // little-endian
  expect(isize);
  return inflate_all(bytes, std::size_t{1} << 40, path, [&](const unsigned char* d, std::size_t n) {
    sink(reinterpret_cast<const char*>(d), n);
  });
}

std::string gzip_file_head(const std::string& path, std::size_t bytes) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  std::string head(bytes, '\0');
  const int n = gzread(f, head.data(), static_cast<unsigned>(bytes));
  gzclose(f);
  head.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return head;
}

std::string gzip(std::string_view text) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK)
    throw Error("zlib could not start deflating");
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw Error("zlib could not deflate the text");
  return out;
}

}  // namespace distlab::viewer
