// elf_needed.cpp: DT_NEEDED from an ELF file's dynamic section, and this process's loaded objects.
#include "runtime/common/elf_needed.h"

#include <elf.h>
#include <link.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace gtrain {
namespace {

template <typename T>
T read_at(const std::string& bytes, uint64_t offset, const std::string& path) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) {
    throw std::runtime_error(path + ": truncated ELF file");
  }
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// The file offset of a virtual address, through the PT_LOAD segment that maps it.
uint64_t file_offset(const std::vector<Elf64_Phdr>& loads, uint64_t vaddr, const std::string& path) {
  for (const auto& p : loads) {
    if (vaddr >= p.p_vaddr && vaddr < p.p_vaddr + p.p_filesz) return vaddr - p.p_vaddr + p.p_offset;
  }
  throw std::runtime_error(path + ": ELF address outside every loaded segment");
}

}  // namespace

std::vector<std::string> elf_needed_libraries(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot be read");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto eh = read_at<Elf64_Ehdr>(bytes, 0, path);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    throw std::runtime_error(path + ": not a 64-bit little-endian ELF file");
  }
  std::vector<Elf64_Phdr> loads;
  Elf64_Phdr dynamic{};
  bool has_dynamic = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    const auto ph = read_at<Elf64_Phdr>(bytes, eh.e_phoff + uint64_t{i} * eh.e_phentsize, path);
    if (ph.p_type == PT_LOAD) loads.push_back(ph);
    if (ph.p_type == PT_DYNAMIC) dynamic = ph, has_dynamic = true;
  }
  if (!has_dynamic) return {};  // statically linked
  std::vector<uint64_t> needed;
  uint64_t strtab = 0;
  for (uint64_t off = dynamic.p_offset; off + sizeof(Elf64_Dyn) <= dynamic.p_offset + dynamic.p_filesz;
       off += sizeof(Elf64_Dyn)) {
    const auto d = read_at<Elf64_Dyn>(bytes, off, path);
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_NEEDED) needed.push_back(d.d_un.d_val);
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
  }
  std::vector<std::string> out;
  if (needed.empty()) return out;
  const uint64_t base = file_offset(loads, strtab, path);
  for (uint64_t n : needed) {
    const uint64_t at = base + n;
    const auto end = at < bytes.size() ? bytes.find('\0', at) : std::string::npos;
    if (end == std::string::npos) throw std::runtime_error(path + ": ELF string table runs past the file");
    out.push_back(bytes.substr(at, end - at));
  }
  return out;
}

std::vector<std::string> loaded_library_names() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (!name.empty()) {
          static_cast<std::vector<std::string>*>(data)->push_back(name.substr(name.find_last_of('/') + 1));
        }
        return 0;
      },
      &names);
  return names;
}

}  // namespace gtrain
