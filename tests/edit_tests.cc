// Unit tests of the editing primitives: float conversions (bit for bit), name rules and
// the optimizer-state rule.
#include <doctest/doctest.h>

#include <cstring>

#include "base/float_convert.h"
#include "model/name_rules.h"

namespace {

float F(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t B(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

using tfckpt::FloatToBFloat16;
using tfckpt::FloatToHalf;

TEST_CASE("float32 -> bfloat16: ties to even, NaN, Inf, zero, overflow") {
  CHECK(FloatToBFloat16(F(0x3F800000)) == 0x3F80);  // 1.0
  CHECK(FloatToBFloat16(F(0x3F808000)) == 0x3F80);  // tie, even below
  CHECK(FloatToBFloat16(F(0x3F818000)) == 0x3F82);  // tie, even above
  CHECK(FloatToBFloat16(F(0x3F808001)) == 0x3F81);  // just above a tie
  CHECK(FloatToBFloat16(F(0x3F807FFF)) == 0x3F80);  // just below
  CHECK(FloatToBFloat16(F(0x7FC00001)) == 0x7FC0);  // quiet NaN
  CHECK(FloatToBFloat16(F(0x7F800001)) == 0x7FC0);  // signalling NaN whose payload is all low bits: still NaN
  CHECK(FloatToBFloat16(F(0xFFA12345)) == 0xFFE1);  // sign and leading payload kept
  CHECK(FloatToBFloat16(F(0x7F800000)) == 0x7F80);  // +Inf
  CHECK(FloatToBFloat16(F(0xFF800000)) == 0xFF80);  // -Inf
  CHECK(FloatToBFloat16(F(0x7F7FFFFF)) == 0x7F80);  // largest float rounds to Inf
  CHECK(FloatToBFloat16(F(0x7F7F0000)) == 0x7F7F);  // largest bfloat16 stays
  CHECK(FloatToBFloat16(F(0x80000000)) == 0x8000);  // -0
  CHECK(FloatToBFloat16(F(0x00018000)) == 0x0002);  // subnormal tie to even
  CHECK(FloatToBFloat16(F(0x00000001)) == 0x0000);
}

TEST_CASE("float32 -> float16: ties to even, overflow to Inf, subnormals, NaN") {
  CHECK(FloatToHalf(F(0x3F800000)) == 0x3C00);  // 1.0
  CHECK(FloatToHalf(F(0x3EAAAAAB)) == 0x3555);  // 1/3
  CHECK(FloatToHalf(F(0x3F801000)) == 0x3C00);  // 1 + 2^-11: tie, even below
  CHECK(FloatToHalf(F(0x3F803000)) == 0x3C02);  // 1 + 3 * 2^-11: tie, even above
  CHECK(FloatToHalf(F(0x477FE000)) == 0x7BFF);  // 65504, the largest finite
  CHECK(FloatToHalf(F(0x477FEFFF)) == 0x7BFF);  // just below the rounding point
  CHECK(FloatToHalf(F(0x477FF000)) == 0x7C00);  // 65520: ties to even = Inf
  CHECK(FloatToHalf(F(0x501502F9)) == 0x7C00);  // 1e10
  CHECK(FloatToHalf(F(0xFF800000)) == 0xFC00);  // -Inf
  CHECK(FloatToHalf(F(0x7FC00000)) == 0x7E00);  // NaN
  CHECK(FloatToHalf(F(0x7F812345)) == 0x7E09);  // NaN keeps the leading payload bits
  CHECK(FloatToHalf(F(0xFFC00000)) == 0xFE00);  // -NaN
  CHECK(FloatToHalf(F(0x80000000)) == 0x8000);  // -0
  CHECK(FloatToHalf(F(0x38800000)) == 0x0400);  // smallest normal 2^-14
  CHECK(FloatToHalf(F(0x387FC000)) == 0x03FF);  // largest subnormal
  CHECK(FloatToHalf(F(0x387FF000)) == 0x0400);  // tie between them: even = normal
  CHECK(FloatToHalf(F(0x33800000)) == 0x0001);  // smallest subnormal 2^-24
  CHECK(FloatToHalf(F(0x33000000)) == 0x0000);  // 2^-25: tie, even = 0
  CHECK(FloatToHalf(F(0x33000001)) == 0x0001);  // just above
  CHECK(FloatToHalf(F(0x33C00000)) == 0x0002);  // 1.5 units: tie, even = 2
  CHECK(FloatToHalf(F(0xB3800000)) == 0x8001);  // negative subnormal
}

TEST_CASE("bfloat16 / float16 -> float32 are exact") {
  CHECK(B(tfckpt::BFloat16ToFloat(0x3F80)) == 0x3F800000u);
  CHECK(B(tfckpt::BFloat16ToFloat(0xFF80)) == 0xFF800000u);
  CHECK(B(tfckpt::HalfToFloat(0x3C00)) == 0x3F800000u);
  CHECK(B(tfckpt::HalfToFloat(0x0001)) == 0x33800000u);
  CHECK(B(tfckpt::HalfToFloat(0x03FF)) == 0x387FC000u);
  CHECK(B(tfckpt::HalfToFloat(0x8001)) == 0xB3800000u);
  CHECK(B(tfckpt::HalfToFloat(0x7BFF)) == 0x477FE000u);
  CHECK(B(tfckpt::HalfToFloat(0x7C00)) == 0x7F800000u);
  CHECK(B(tfckpt::HalfToFloat(0x7E01)) == 0x7FC02000u);
  CHECK(B(tfckpt::HalfToFloat(0x8000)) == 0x80000000u);
  // Every float16 survives the round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = tfckpt::HalfToFloat(static_cast<uint16_t>(h));
    const uint16_t back = FloatToHalf(f);
    if (f != f) {
      CHECK((back & 0x7C00) == 0x7C00);
      CHECK((back & 0x03FF) != 0);
    } else if (back != h) {
      FAIL("float16 ", h, " came back as ", back);
    }
  }
}

TEST_CASE("array conversions match the scalar ones at unaligned addresses") {
  const float in[] = {1.0f, -2.5f, 65520.0f, 1e-8f};
  char src[1 + sizeof in], out[1 + 8], back[1 + sizeof in];
  std::memcpy(src + 1, in, sizeof in);
  tfckpt::FloatsToHalf(src + 1, 4, out + 1);
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, out + 1 + 2 * i, 2);
    CHECK(h == FloatToHalf(in[i]));
  }
  tfckpt::FloatsToBFloat16(src + 1, 4, out + 1);
  tfckpt::BFloat16sToFloat(out + 1, 4, back + 1);
  float f;
  std::memcpy(&f, back + 1 + 4, 4);
  CHECK(f == -2.5f);
  const double d[] = {0.1, 1e300};
  char dd[1 + sizeof d], ff[1 + 8];
  std::memcpy(dd + 1, d, sizeof d);
  tfckpt::DoublesToFloat(dd + 1, 2, ff + 1);
  std::memcpy(&f, ff + 1, 4);
  CHECK(f == 0.1f);
  std::memcpy(&f, ff + 5, 4);
  CHECK(B(f) == 0x7F800000u);  // overflow to Inf
}

TEST_CASE("name rules: include, exclude, renames in order, bad regex") {
  auto r = tfckpt::NameRules::Create({"^enc", "dec"}, {"/Adam$"}, {{"^enc/", "encoder/"}, {"(\\d+)$", "_$1"}});
  REQUIRE(r.ok());
  CHECK(r->Selected("enc/w"));
  CHECK(r->Selected("x/dec"));
  CHECK_FALSE(r->Selected("other"));
  CHECK_FALSE(r->Selected("enc/w/Adam"));
  CHECK(r->Rename("enc/w7") == "encoder/w_7");
  CHECK(r->Rename("x") == "x");
  CHECK_FALSE(tfckpt::NameRules::Create({"("}, {}, {}).ok());
  auto rule = tfckpt::ParseRenameRule("a\\=b=c=d");
  REQUIRE(rule.ok());
  CHECK(rule->pattern == "a\\=b");
  CHECK(rule->replacement == "c=d");
  CHECK_FALSE(tfckpt::ParseRenameRule("=x").ok());
  CHECK_FALSE(tfckpt::ParseRenameRule("abc").ok());
}

TEST_CASE("optimizer state: TF2 and TF1 names") {
  using tfckpt::IsOptimizerState;
  for (const char* n : {"layer-1/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE", "dense/kernel/Adam", "dense/kernel/Adam_1",
                        "Variable_1/Adam_3", "w/part_0/Ftrl_1", "w/Momentum", "w/RMSProp_1", "beta1_power",
                        "beta2_power_1", "training/beta1_power", "bert/encoder/kernel/adam_m",
                        "training/Adagrad/dnn/bias/accumulator", "training/Ftrl/iter"}) {
    CHECK_MESSAGE(IsOptimizerState(n), n);
  }
  for (const char* n : {"dense/kernel", "global_step", "layer-1/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                        "dnn/hiddenlayer_0/batchnorm_0/moving_mean", "Adamant/w", "training/transformer/w",
                        "my_optimizer_config"}) {
    CHECK_MESSAGE(!IsOptimizerState(n), n);
  }
  CHECK(IsOptimizerState("model/opt/lr/.ATTRIBUTES/VARIABLE_VALUE", {"model/opt"}));
  CHECK_FALSE(IsOptimizerState("model/optx/.ATTRIBUTES/VARIABLE_VALUE", {"model/opt"}));
  // The newer Keras optimizers (tf-keras 2.11+, Keras 3), under the model too; Keras 3's
  // `_trainable_variables/N` are the model's weights (tests/data/keras_optimizers).
  for (const char* n : {"model/optimizer/_variables/3/.ATTRIBUTES/VARIABLE_VALUE",
                        "model/optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
                        "model/optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
                        "optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE"}) {
    CHECK_MESSAGE(IsOptimizerState(n), n);
  }
  CHECK(IsOptimizerState("model/optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE", {"model/optimizer"}));
  for (const char* n : {"optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE",
                        "model/optimizer/_trainable_variables/2/.ATTRIBUTES/VARIABLE_VALUE"}) {
    CHECK_MESSAGE(!IsOptimizerState(n, {"model/optimizer"}), n);
  }
}
