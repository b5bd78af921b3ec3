// A test aid that makes a missed CommWork::wait() visible. On a GPU, work that touches an
// asynchronous op's buffers before waiting races with the communication stream and is
// wrong only now and then; under this wrapper it fails every time:
// - allreduce_async, reduce_scatter_async and allgather_async on host buffers keep a copy
//   of their input and fill every buffer of the op with NaN bits (all bytes 0xFF), so a
//   read before the wait sees NaN;
// - queuing an op whose buffer overlaps one of an op not yet waited for, and a wait()
//   that finds a buffer's bytes changed since the op was queued, throw InternalError;
// - wait() puts the input back and runs the wrapped communicator's synchronous op, so the
//   op works on what its buffers held when it was queued, as the communication stream does.
//   An accumulation into a buffer before the wait (x += y keeps the NaN's bytes) is
//   therefore lost without an error: it shows as results that differ from a run without
//   this wrapper (the parity tests' serial run).
// Synchronous ops, and asynchronous ones on device buffers, go to the wrapped communicator
// unchanged. trident-train wraps its data-parallel communicator in it when
// TRIDENT_CHECK_ASYNC_COMM=1 (tests/mpi/CMakeLists.txt sets it for every MPI test).
#pragma once

#include <memory>

#include "parallel/comm.h"

namespace trident {

std::unique_ptr<Comm> make_deferred_async_comm(std::unique_ptr<Comm> inner);

// True when TRIDENT_CHECK_ASYNC_COMM is set to 1.
bool check_async_comm_requested();

}  // namespace trident
