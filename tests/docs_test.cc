// Every primitive is documented in docs/ops.md.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "src/ir/primitive.h"

TEST(Docs, EveryPrimitiveIsInTheOpTable) {
  std::ifstream f(std::string(PALLAS_SOURCE_DIR) + "/docs/ops.md");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  for (const auto* p : pallas::ir::all_primitives()) {
    bool found = text.find("| " + p->name + " ") != std::string::npos || text.find(" " + p->name + ",") != std::string::npos ||
                 text.find(", " + p->name + " |") != std::string::npos || text.find(", " + p->name + ",") != std::string::npos;
    EXPECT_TRUE(found) << p->name << " is missing from docs/ops.md";
  }
}
