// crc32c.h: CRC-32C, now in the torch-free core (runtime/core/crc32c.h) so gtrain prepare's shard
// checksums need no LibTorch; this header keeps the runtime's includes as they were.
#pragma once

#include "runtime/core/crc32c.h"
