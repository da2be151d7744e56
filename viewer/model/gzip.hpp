// gzip.hpp — gzipped traces: what tensorboard_trace_handler(..., use_gzip=True) writes
// (*.pt.trace.json.gz), read with zlib.
//
//   is_gzip / is_gzip_file   the two magic bytes 1f 8b (of a text, of a file's start)
//   gunzip                   a whole gzipped text inflated (every member, as gzip -d does);
//                            throws distlab::Error with a sentence on a broken or cut stream
//   gunzip_file              a file inflated piece by piece, after the length its gzip trailer
//                            gives (the loader inflates straight into simdjson's padded buffer)
//   gzip_file_head           its first `bytes` inflated, for looks_like_pytorch
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace distlab::viewer {

bool is_gzip(std::string_view bytes);
bool is_gzip_file(const std::string& path);
// At most `limit` bytes come out; more is an Error (a trace is not a zip bomb).
std::string gunzip(std::string_view bytes, std::size_t limit = std::size_t{1} << 32);
// Hands `expect` the trailer's length (the inflated size mod 2^32, of the last member), then
// `sink` every piece; returns the bytes inflated. Throws naming the file.
std::size_t gunzip_file(const std::string& path, const std::function<void(std::size_t)>& expect,
                        const std::function<void(const char*, std::size_t)>& sink);
std::string gzip_file_head(const std::string& path, std::size_t bytes);
// The text gzipped (tests and the benchmark's generator write .json.gz with it).
std::string gzip(std::string_view text);

}  // namespace distlab::viewer
