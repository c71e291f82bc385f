// JPEGs encoded with libjpeg for the GPU decode tests: the variants nvJPEG
// takes or refuses (subsamplings, progressive, arithmetic, CMYK, restart
// markers), from one picture.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

namespace wds::gpu_testing {

struct JpegRecipe {
  int width = 64;
  int height = 48;
  int components = 3;  // 1 (gray), 3 (RGB) or 4 (CMYK)
  bool progressive = false;
  bool arithmetic = false;
  int luma_h = 2;  // sampling factors of the first component
  int luma_v = 2;
  int chroma_h = 1;      // of the second
  int restart_rows = 0;  // a restart marker every this many MCU rows (0: none)
  bool scan_per_component = false;  // baseline, one (non-interleaved) scan per component
};

// Pattern is a smooth picture with some detail, `channels` samples a pixel.
inline std::vector<uint8_t> Pattern(int width, int height, int channels) {
  std::vector<uint8_t> p(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        p[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>((x * 7 + y * 3 + c * 50 + ((x ^ y) & 15)) & 255);
      }
    }
  }
  return p;
}

inline std::string EncodeJpeg(const JpegRecipe& r) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(r.width);
  cinfo.image_height = static_cast<JDIMENSION>(r.height);
  cinfo.input_components = r.components;
  cinfo.in_color_space = r.components == 1 ? JCS_GRAYSCALE : r.components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  if (r.components == 3) {
    cinfo.comp_info[0].h_samp_factor = r.luma_h;
    cinfo.comp_info[0].v_samp_factor = r.luma_v;
    cinfo.comp_info[1].h_samp_factor = r.chroma_h;
  }
  if (r.progressive) jpeg_simple_progression(&cinfo);
  static const jpeg_scan_info kScanPerComponent[3] = {
      {1, {0}, 0, 63, 0, 0}, {1, {1}, 0, 63, 0, 0}, {1, {2}, 0, 63, 0, 0}};
  if (r.scan_per_component) {
    cinfo.scan_info = kScanPerComponent;
    cinfo.num_scans = r.components;
  }
  cinfo.arith_code = r.arithmetic ? TRUE : FALSE;
  cinfo.restart_in_rows = r.restart_rows;
  jpeg_start_compress(&cinfo, TRUE);
  const std::vector<uint8_t> pixels = Pattern(r.width, r.height, r.components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) +
                   static_cast<size_t>(cinfo.next_scanline) * r.width * r.components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  std::free(out);
  return jpeg;
}

}  // namespace wds::gpu_testing
