#pragma once
// The umbrella header: everything a training program uses.
#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/dtype.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/tensor.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/autograd/function.hpp"
