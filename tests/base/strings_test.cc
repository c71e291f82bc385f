// Cat: every piece in the text it stands for, integers by their own
// signedness.
#include "wds/internal/base/strings.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace wds {
namespace {

enum class Small : uint8_t { kBig = 200 };
enum class Negative : int { kMinusOne = -1 };
enum Plain { kSeven = 7 };

TEST(CatTest, UnsignedIntegersPrintAsUnsigned) {
  EXPECT_EQ(Cat(std::numeric_limits<uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(Cat(uint64_t{1} << 63), "9223372036854775808");
  EXPECT_EQ(Cat(std::numeric_limits<uint32_t>::max()), "4294967295");
  EXPECT_EQ(Cat(static_cast<unsigned char>(255)), "255");
}

TEST(CatTest, SignedIntegersKeepTheirSign) {
  EXPECT_EQ(Cat(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(Cat(std::numeric_limits<int64_t>::max()), "9223372036854775807");
  EXPECT_EQ(Cat(-1), "-1");
  EXPECT_EQ(Cat(static_cast<signed char>(-5)), "-5");
}

TEST(CatTest, EnumsPrintTheirValueBySignednessOfTheUnderlyingType) {
  EXPECT_EQ(Cat(Small::kBig), "200");
  EXPECT_EQ(Cat(Negative::kMinusOne), "-1");
  EXPECT_EQ(Cat(kSeven), "7");
}

TEST(CatTest, CharBoolStringsAndFloatsMix) {
  EXPECT_EQ(Cat('x', true, false, std::string("s"), std::string_view("v"), "c",
                absl::string_view("a"), 0.5),
            "xtruefalsesvca0.500000");
  EXPECT_EQ(Cat(), "");
}

}  // namespace
}  // namespace wds
