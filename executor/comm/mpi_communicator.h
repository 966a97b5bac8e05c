// MpiCommunicator: Communicator over MPI (OpenMPI here; MPICH and srun work through MPI's
// own launch support). Built only when CMake finds MPI (LLMPLAN_HAVE_MPI); otherwise
// create_mpi_communicator returns a bad_input Status saying so.
//
// Groups come from MPI_Comm_split of MPI_COMM_WORLD by the layout of communicator.h
// (colour = the other coordinates, key = this coordinate), so group rank = coordinate.
// Errors: MPI_ERRORS_RETURN is set on every communicator, so a failed call (a peer that
// died, a broken link) is a runtime Status with MPI's message, never a silent hang on our
// side. Watchdog: a thread that, when progress() has not been called for
// `watchdog_seconds`, prints "rank R: no progress for N s ..." on stderr and aborts the
// job (MPI_Abort), so the other ranks exit too within a bounded time.
// Lifetime: MPI_Init on create, MPI_Finalize when the last communicator is destroyed.
#pragma once

#include <memory>

#include "executor/comm/communicator.h"

namespace llmplan::exec {

bool mpi_built();  // this build has MPI

// REQUIRES: started by an MPI launcher with plan.world_size() processes.
// Errors: bad_input (no MPI in the build, world size != plan's), runtime (MPI failure).
Result<std::unique_ptr<Communicator>> create_mpi_communicator(const ParallelPlan& plan, double watchdog_seconds = 300);

// This process's rank among the MPI processes on its node (MPI_Comm_split_type,
// MPI_COMM_TYPE_SHARED): the launcher-independent way to pick one GPU per rank. Collective
// over MPI_COMM_WORLD (every rank calls it). -1 without MPI in the build, or when MPI is not
// initialised (before create_mpi_communicator, after its destruction).
int mpi_node_local_rank();

}  // namespace llmplan::exec
