// Pallas C++: the umbrella header.
#pragma once
#include "pallas/array.h"
#include "pallas/bench.h"
#include "pallas/autotune.h"
#include "pallas/block_spec.h"
#include "pallas/dlpack.h"
#include "pallas/dtype.h"
#include "pallas/error.h"
#include "pallas/kernel.h"
#include "pallas/pallas_call.h"
#include "pallas/stream.h"
#include "pallas/transforms.h"
