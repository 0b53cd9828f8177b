// crc32c.h: CRC-32C (Castagnoli) of a buffer: SSE4.2 instructions when the CPU has them (about
// 10x zlib's crc32, so checksums do not slow a save down), a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gtrain {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace gtrain
