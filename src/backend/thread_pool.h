#pragma once
#include <pthreadpool.h>

#include <memory>

namespace tensorgrad {

/// The process-wide compute pool, sized by set_num_threads (rebuilt on the
/// first use after a change). Holding the returned pointer keeps that pool
/// alive even if another thread rebuilds it. Null when one thread is set.
std::shared_ptr<pthreadpool> compute_pool();

}  // namespace tensorgrad
