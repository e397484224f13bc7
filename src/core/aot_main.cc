// aot::generator_main (include/pallas/aot.h): the command line of generator programs.
#include <cstdio>
#include <sstream>

#include "pallas/aot.h"

namespace pallas::aot {

int generator_main(int argc, char** argv, const std::vector<Entry>& entries) {
  std::string out, ns = "kernels";
  std::vector<std::string> archs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("aot generator: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--out") out = value();
    else if (a == "--namespace") ns = value();
    else if (a == "--arch") {
      std::stringstream ss(value());
      for (std::string x; std::getline(ss, x, ',');)
        if (!x.empty()) archs.push_back(x);
    } else {
      std::fprintf(stderr, "usage: %s --out HEADER --arch sm_90a[,sm_80...] [--namespace NS]\n", argv[0]);
      return 2;
    }
  }
  if (out.empty() || archs.empty()) {
    std::fprintf(stderr, "usage: %s --out HEADER --arch sm_90a[,sm_80...] [--namespace NS]\n", argv[0]);
    return 2;
  }
  try {
    generate(entries, archs, out, ns);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace pallas::aot
