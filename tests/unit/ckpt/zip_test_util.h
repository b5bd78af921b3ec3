// Zip archives for the torch.save tests, written with libzip (link PkgConfig::LIBZIP).
#pragma once

#include <gtest/gtest.h>
#include <zip.h>

#include <map>
#include <string>

namespace trident::testing {

// Writes a zip archive with the given entries, stored uncompressed (as torch.save does).
inline void write_zip(const std::string& path, const std::map<std::string, std::string>& entries) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  for (const auto& [name, data] : entries) {
    zip_source_t* s = zip_source_buffer(z, data.data(), data.size(), 0);
    const zip_int64_t idx = zip_file_add(z, name.c_str(), s, ZIP_FL_OVERWRITE);
    ASSERT_GE(idx, 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
  }
  ASSERT_EQ(zip_close(z), 0);
}

}  // namespace trident::testing
