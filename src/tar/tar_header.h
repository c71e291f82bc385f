// ValidTarHeader: whether 512 bytes are a tar header, by its checksum, for
// the tar layer's readers that look at headers before or beside libarchive.
// A plain tar's first bytes are its first member's name, which may begin like
// a compressor's magic number: a valid first header says tar before any
// sniffing (TarReader, IndexedShard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace wds {

// TarHeaderNumber parses a tar header's numeric field of `width` bytes: octal
// digits (spaces and NULs around them), or base-256 when its first byte has
// the high bit set (GNU); nullopt for anything else or what overflows.
std::optional<int64_t> TarHeaderNumber(const unsigned char* field, size_t width);

// ValidTarHeader says whether `header`'s checksum is right (the sum of its
// bytes as unsigned or, as some old writers made it, signed chars).
// REQUIRES: `header` points to 512 readable bytes.
bool ValidTarHeader(const unsigned char* header);

}  // namespace wds
