// elf_needed.h: the shared libraries an ELF file names as NEEDED, read from the file (not loaded).
#pragma once

#include <string>
#include <vector>

namespace gtrain {

// DT_NEEDED entries of a 64-bit little-endian ELF shared object or executable, in order. Throws
// std::runtime_error naming the file when it cannot be read or is not such an ELF file.
std::vector<std::string> elf_needed_libraries(const std::string& path);

// Basenames of the shared objects loaded in this process now (dl_iterate_phdr).
std::vector<std::string> loaded_library_names();

}  // namespace gtrain
