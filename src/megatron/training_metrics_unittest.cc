// The GPU peaks MFU is computed against (lens::megatron::peak_tflops, docs/GPU.md): NVML's names of current
// data-centre GPUs, the more specific name first, and nothing where the table has no answer.
#include <gtest/gtest.h>

#include <optional>

#include "lens/megatron.h"

namespace lens::megatron {
namespace {

TEST(PeakTflops, NvmlNamesOfDataCentreGpusGiveTheirDenseHalfPrecisionPeak) {
  EXPECT_EQ(peak_tflops("NVIDIA H100 80GB HBM3", true), 989.5);
  EXPECT_EQ(peak_tflops("NVIDIA H100 PCIe", true), 756);
  EXPECT_EQ(peak_tflops("NVIDIA H100 NVL", true), 835.5);
  EXPECT_EQ(peak_tflops("NVIDIA H200", true), 989.5);
  EXPECT_EQ(peak_tflops("NVIDIA A100-SXM4-80GB", true), 312);
  EXPECT_EQ(peak_tflops("NVIDIA B200", true), 2250);
  EXPECT_EQ(peak_tflops("NVIDIA GB200", true), 2500);
  EXPECT_EQ(peak_tflops("NVIDIA L40S", true), 362);
  EXPECT_EQ(peak_tflops("Tesla V100-SXM2-32GB", true), 125);
  EXPECT_EQ(peak_tflops("Tesla V100-PCIE-32GB", true), 112);
}

TEST(PeakTflops, AnUnknownGpuOrFp32TrainingHasNone) {
  EXPECT_EQ(peak_tflops("NVIDIA GeForce RTX 4090", true), std::nullopt);
  EXPECT_EQ(peak_tflops("", true), std::nullopt);
  EXPECT_EQ(peak_tflops("NVIDIA H100 80GB HBM3", false), std::nullopt) << "fp32: TF32 or not, give --peak-tflops";
}

}  // namespace
}  // namespace lens::megatron
