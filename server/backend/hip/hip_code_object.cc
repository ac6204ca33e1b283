// Offload bundles, ELF notes and the AMDGPU metadata map.
#include "server/backend/hip/hip_code_object.h"

#define MSGPACK_NO_BOOST
#include <algorithm>
#include <cstring>
#include <msgpack.hpp>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpustream::backend {
namespace {

constexpr absl::string_view kBundleMagic = "__CLANG_OFFLOAD_BUNDLE__";
constexpr uint16_t kElfMachineAmdgpu = 224;   // EM_AMDGPU
constexpr uint32_t kNoteAmdgpuMetadata = 32;  // NT_AMDGPU_METADATA
constexpr uint32_t kSectionNote = 7;          // SHT_NOTE
// The most bytes of explicit arguments a kernel may take.
constexpr uint64_t kMaxKernargBytes = uint64_t{1} << 16;

// Reads a little-endian T at `offset`, if `data` holds it.
template <typename T>
bool ReadAt(absl::string_view data, uint64_t offset, T* out) {
  if (offset > data.size() || data.size() - offset < sizeof(T)) return false;
  std::memcpy(out, data.data() + offset, sizeof(T));
  return true;
}

bool IsAmdgpuElf(absl::string_view data) {
  uint16_t machine = 0;
  return data.size() >= 64 &&
         data.substr(0, 4) ==
             "\x7f"
             "ELF" &&
         data[4] == 2 /* ELFCLASS64 */ && data[5] == 1 /* little-endian */ &&
         ReadAt(data, 18, &machine) && machine == kElfMachineAmdgpu;
}

// "hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" → its target ID
// "gfx90a:sramecc+:xnack-"; empty for an entry that is not AMD device code
// (the host's).
absl::string_view TargetId(absl::string_view triple) {
  const size_t dashes = triple.find("--");
  if (dashes == absl::string_view::npos ||
      !absl::StrContains(triple.substr(0, dashes), "amdgcn-amd-amdhsa")) {
    return {};
  }
  return triple.substr(dashes + 2);
}

// A target ID's processor ("gfx90a") and stated features ("xnack-").
absl::string_view ProcessorOf(absl::string_view target) {
  return target.substr(0, target.find(':'));
}
std::vector<absl::string_view> FeaturesOf(absl::string_view target) {
  std::vector<absl::string_view> features = absl::StrSplit(target, ':');
  features.erase(features.begin());
  return features;
}

// Whether code built for `entry` runs on a device of target ID `device`,
// as ROCm decides: the same processor, and every feature the entry states
// ("xnack+") stated alike by the device; a feature the entry leaves out
// runs either way. -1 when not, else how many features it states (the most
// specific entry wins).
int Compatibility(absl::string_view entry, absl::string_view device) {
  if (ProcessorOf(entry) != ProcessorOf(device)) return -1;
  const std::vector<absl::string_view> stated = FeaturesOf(entry);
  const std::vector<absl::string_view> has = FeaturesOf(device);
  for (absl::string_view feature : stated) {
    if (!absl::c_linear_search(has, feature)) return -1;
  }
  return static_cast<int>(stated.size());
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed AMD code object: ", what));
}

// msgpack map lookups: nullptr when absent or not of the type.
const msgpack::object* Find(const msgpack::object& map, absl::string_view key) {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR &&
        absl::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
      return &kv.val;
    }
  }
  return nullptr;
}

bool AsString(const msgpack::object* o, std::string* out) {
  if (o == nullptr || o->type != msgpack::type::STR) return false;
  out->assign(o->via.str.ptr, o->via.str.size);
  return true;
}

bool AsUint(const msgpack::object* o, uint64_t* out) {
  if (o == nullptr || o->type != msgpack::type::POSITIVE_INTEGER) return false;
  *out = o->via.u64;
  return true;
}

absl::StatusOr<std::vector<AmdKernel>> ParseMetadata(absl::string_view blob) {
  // Bounded: the note is the compiler's, but a module file is the user's.
  const msgpack::unpack_limit limit(/*array=*/1 << 16, /*map=*/1 << 16,
                                    /*str=*/1 << 20, /*bin=*/1 << 20,
                                    /*ext=*/1 << 20, /*depth=*/32);
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(blob.data(), blob.size(), nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    return Malformed(absl::StrCat("metadata is not msgpack: ", e.what()));
  }
  const msgpack::object* kernels = Find(handle.get(), "amdhsa.kernels");
  if (kernels == nullptr || kernels->type != msgpack::type::ARRAY) {
    return Malformed("metadata has no amdhsa.kernels");
  }
  std::vector<AmdKernel> out;
  for (uint32_t k = 0; k < kernels->via.array.size; ++k) {
    const msgpack::object& entry = kernels->via.array.ptr[k];
    AmdKernel kernel;
    if (!AsString(Find(entry, ".name"), &kernel.name)) {
      return Malformed(absl::StrCat("kernel ", k, " has no .name"));
    }
    uint64_t value = 0;
    if (AsUint(Find(entry, ".max_flat_workgroup_size"), &value)) {
      kernel.max_flat_workgroup_size = static_cast<uint32_t>(value);
    }
    if (AsUint(Find(entry, ".group_segment_fixed_size"), &value)) {
      kernel.group_segment_fixed_size = static_cast<uint32_t>(value);
    }
    // Explicit arguments come in order, apart, and end within the kernel's
    // argument segment, which is bounded: a launch packs them there.
    uint64_t segment = kMaxKernargBytes;
    if (AsUint(Find(entry, ".kernarg_segment_size"), &value)) {
      segment = std::min(value, kMaxKernargBytes);
    }
    uint64_t next_free = 0;
    const msgpack::object* args = Find(entry, ".args");
    if (args != nullptr && args->type != msgpack::type::ARRAY) {
      return Malformed(absl::StrCat("kernel ", kernel.name, ": .args"));
    }
    for (uint32_t a = 0; args != nullptr && a < args->via.array.size; ++a) {
      const msgpack::object& arg = args->via.array.ptr[a];
      AmdKernelArg parsed;
      if (!AsUint(Find(arg, ".offset"), &parsed.offset) ||
          !AsUint(Find(arg, ".size"), &parsed.size) ||
          !AsString(Find(arg, ".value_kind"), &parsed.value_kind)) {
        return Malformed(absl::StrCat("kernel ", kernel.name, ": argument ", a,
                                      " lacks .offset, .size or .value_kind"));
      }
      if (absl::StartsWith(parsed.value_kind, "hidden_")) continue;
      if (parsed.offset < next_free || parsed.size > segment ||
          parsed.offset > segment - parsed.size) {
        return Malformed(absl::StrCat("kernel ", kernel.name, ": argument ", a,
                                      " (offset ", parsed.offset, ", ",
                                      parsed.size,
                                      " bytes) overlaps another or leaves its ",
                                      segment, "-byte argument segment"));
      }
      next_free = parsed.offset + parsed.size;
      kernel.args.push_back(std::move(parsed));
    }
    out.push_back(std::move(kernel));
  }
  return out;
}

// Whether [offset, offset + size) lies within `data`, overflow-safe.
bool Within(absl::string_view data, uint64_t offset, uint64_t size) {
  return offset <= data.size() && size <= data.size() - offset;
}

// Every table, section and segment the ELF's headers describe lies within
// it: the runtime, given no size, trusts them. ROCm sizes an image as the
// end of its section table or of its furthest section (sh_offset, plus
// sh_size unless SHT_NOBITS), stepping through sections 64 bytes at a
// time: so the entry sizes must be the ELF64 ones exactly, and a code
// object without sections (v3 and later always have them) is refused.
bool ExtentsValid(absl::string_view elf) {
  struct Table {
    uint64_t offset_at, entry_size_at, count_at;  // In the ELF header.
    uint16_t entry_bytes;                         // Elf64_Shdr, Elf64_Phdr.
    uint64_t item_offset_at, item_size_at;        // Within an entry.
    bool sections;
  };
  // Sections (e_shoff, e_shentsize, e_shnum: sh_offset, sh_size) and
  // segments (e_phoff, e_phentsize, e_phnum: p_offset, p_filesz).
  for (const Table& t : {Table{40, 58, 60, 64, 24, 32, true},
                         Table{32, 54, 56, 56, 8, 32, false}}) {
    uint64_t offset = 0;
    uint16_t entry_size = 0, count = 0;
    if (!ReadAt(elf, t.offset_at, &offset) ||
        !ReadAt(elf, t.entry_size_at, &entry_size) ||
        !ReadAt(elf, t.count_at, &count) || offset > elf.size()) {
      return false;
    }
    if (count == 0) {
      if (t.sections) return false;
      continue;
    }
    if (entry_size != t.entry_bytes ||
        !Within(elf, offset, uint64_t{count} * entry_size)) {
      return false;
    }
    for (uint16_t i = 0; i < count; ++i) {
      const uint64_t entry = offset + uint64_t{i} * entry_size;
      uint32_t type = 0;
      uint64_t item_offset = 0, item_size = 0;
      ReadAt(elf, entry + 4, &type);
      ReadAt(elf, entry + t.item_offset_at, &item_offset);
      ReadAt(elf, entry + t.item_size_at, &item_size);
      const bool no_bits = t.sections && type == 8;  // SHT_NOBITS
      if (!Within(elf, item_offset, no_bits ? 0 : item_size)) return false;
    }
  }
  return true;
}

// The processor an AMDGPU ELF's e_flags name (EF_AMDGPU_MACH_*), or empty
// for one this table does not know.
absl::string_view MachName(uint32_t flags) {
  struct Mach {
    uint32_t mach;
    absl::string_view name;
  };
  static constexpr Mach kMachs[] = {
      {0x02c, "gfx900"},  {0x02f, "gfx906"},  {0x030, "gfx908"},
      {0x03f, "gfx90a"},  {0x040, "gfx940"},  {0x04b, "gfx941"},
      {0x04c, "gfx942"},  {0x036, "gfx1030"}, {0x037, "gfx1031"},
      {0x041, "gfx1100"}, {0x046, "gfx1101"}, {0x047, "gfx1102"}};
  for (const Mach& m : kMachs) {
    if ((flags & 0xff) == m.mach) return m.name;
  }
  return {};
}

// `code` is a whole, consistent AMDGPU ELF for the processor of `target`
// (as far as its e_flags say).
absl::Status CheckCodeObject(absl::string_view code, absl::string_view target) {
  if (!IsAmdgpuElf(code)) return Malformed("not an AMDGPU ELF64 code object");
  if (!ExtentsValid(code)) {
    return Malformed("its ELF headers describe data outside it");
  }
  uint32_t flags = 0;
  ReadAt(code, 48, &flags);
  const absl::string_view built_for = MachName(flags);
  if (!built_for.empty() && built_for != ProcessorOf(target)) {
    return absl::NotFoundError(absl::StrCat(
        "the code object is for ", built_for, ", not ", ProcessorOf(target)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<absl::string_view> AmdCodeObjectFor(absl::string_view image,
                                                   absl::string_view target) {
  if (IsAmdgpuElf(image)) {
    if (absl::Status s = CheckCodeObject(image, target); !s.ok()) return s;
    return image;
  }
  if (!absl::StartsWith(image, kBundleMagic)) {
    return absl::InvalidArgumentError(
        "not an AMD code object or clang offload bundle");
  }
  uint64_t count = 0;
  uint64_t at = kBundleMagic.size();
  if (!ReadAt(image, at, &count) || count > 4096) {
    return Malformed("offload bundle header");
  }
  at += 8;
  // Every entry is checked before one is chosen: the runtime reads them all.
  std::vector<std::string> targets;
  std::optional<absl::string_view> chosen;
  int chosen_fit = -1;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t offset = 0, size = 0, triple_size = 0;
    if (!ReadAt(image, at, &offset) || !ReadAt(image, at + 8, &size) ||
        !ReadAt(image, at + 16, &triple_size) ||
        !Within(image, at + 24, triple_size)) {
      return Malformed(absl::StrCat("offload bundle entry ", i));
    }
    const absl::string_view triple = image.substr(at + 24, triple_size);
    at += 24 + triple_size;
    if (!Within(image, offset, size)) {
      return Malformed(absl::StrCat("offload bundle entry ", triple));
    }
    const absl::string_view entry = TargetId(triple);
    if (entry.empty()) continue;
    targets.emplace_back(entry);
    if (const int fit = Compatibility(entry, target); fit > chosen_fit) {
      chosen = image.substr(offset, size);
      chosen_fit = fit;
    }
  }
  if (chosen.has_value()) {
    if (absl::Status s = CheckCodeObject(*chosen, target); !s.ok()) return s;
    return *chosen;
  }
  absl::c_sort(targets);
  return absl::NotFoundError(absl::StrCat(
      "the offload bundle has no code object for ", target, " (it has ",
      targets.empty() ? "none" : absl::StrJoin(targets, ", "), ")"));
}

absl::StatusOr<std::vector<AmdKernel>> ReadAmdKernels(
    absl::string_view code_object) {
  if (!IsAmdgpuElf(code_object)) return Malformed("not an AMDGPU ELF");
  uint64_t section_table = 0;
  uint16_t entry_size = 0, sections = 0;
  if (!ReadAt(code_object, 40, &section_table) ||
      !ReadAt(code_object, 58, &entry_size) ||
      !ReadAt(code_object, 60, &sections) || entry_size < 64) {
    return Malformed("ELF header");
  }
  for (uint16_t s = 0; s < sections; ++s) {
    const uint64_t header = section_table + uint64_t{s} * entry_size;
    uint32_t type = 0;
    uint64_t offset = 0, size = 0;
    if (!ReadAt(code_object, header + 4, &type) ||
        !ReadAt(code_object, header + 24, &offset) ||
        !ReadAt(code_object, header + 32, &size)) {
      return Malformed("ELF section header");
    }
    if (type != kSectionNote) continue;
    if (offset > code_object.size() || size > code_object.size() - offset) {
      return Malformed("ELF note section");
    }
    const absl::string_view notes = code_object.substr(offset, size);
    // Each note: namesz, descsz, type, then the name and the description,
    // each padded to 4 bytes.
    for (uint64_t at = 0; at + 12 <= notes.size();) {
      uint32_t name_size = 0, desc_size = 0, note_type = 0;
      ReadAt(notes, at, &name_size);
      ReadAt(notes, at + 4, &desc_size);
      ReadAt(notes, at + 8, &note_type);
      const uint64_t name_at = at + 12;
      const uint64_t desc_at = name_at + (uint64_t{name_size} + 3) / 4 * 4;
      const uint64_t next = desc_at + (uint64_t{desc_size} + 3) / 4 * 4;
      if (desc_at > notes.size() || desc_size > notes.size() - desc_at) {
        return Malformed("ELF note");
      }
      const absl::string_view name = notes.substr(name_at, name_size);
      if (note_type == kNoteAmdgpuMetadata &&
          (name == absl::string_view("AMDGPU\0", 7) || name == "AMDGPU")) {
        return ParseMetadata(notes.substr(desc_at, desc_size));
      }
      at = next;
    }
  }
  return Malformed("no AMDGPU metadata note (a code object v3 or newer)");
}

}  // namespace gpustream::backend
