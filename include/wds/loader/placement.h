// Placement: where this process sits in a distributed job.
//
// Launchers describe a job through environment variables; ResolvePlacement
// reads them once, strictly, for the Loader and the Python bindings (rank and
// world size); the LibTorch layer (wds/torch/distributed.h) reads the local
// rank and the rendezvous address of rank 0 by the same rules:
//
//   wds::PlacementOptions options;                 // explicit values win
//   absl::StatusOr<wds::Placement> p = wds::ResolvePlacement(options);
//   // torchrun --nproc_per_node 4: p->rank in [0, 4), p->world_size == 4
//
// Precedence, each field separately: an explicit option, else torchrun's
// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), else
// SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST,
// SLURM_JOB_ID), else a single process (rank 0 of 1, local rank 0). Under
// SLURM, rank 0's address is the first host of SLURM_JOB_NODELIST and its
// port 20000 + SLURM_JOB_ID % 10000 (below the Linux ephemeral range, so an
// outgoing connection never holds it); a job that names no port at all gets
// torchrun's default, 29500.
//
// Rank and world size are read as a pair from one launcher (RANK/WORLD_SIZE if
// either is set, else SLURM_PROCID/SLURM_NTASKS), so that the rank of one
// launcher is never combined with the world size of another; one of a pair set
// without the other is an error.
//
// Errors are InvalidArgument and name the variable or option and its text:
// `environment variable WORLD_SIZE="4x" is not an integer`.
//
// Thread safety: ResolvePlacement reads the environment and holds no state; do
// not call it while another thread runs setenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace wds {

// Launcher names whose variables gave the rank and world size.
enum class Launcher : uint8_t {
  kNone,      // explicit options or the single-process default
  kTorchrun,  // RANK / WORLD_SIZE
  kSlurm,     // SLURM_PROCID / SLURM_NTASKS
};

struct PlacementOptions {
  std::optional<int> rank;        // in [0, world_size)
  std::optional<int> world_size;  // >= 1
  std::optional<int> local_rank;  // >= 0; the GPU index on this node
  std::optional<std::string> master_addr;
  std::optional<int> master_port;  // in [1, 65535]
};

struct Placement {
  int rank = 0;
  int world_size = 1;
  Launcher launcher = Launcher::kNone;
};

// ResolvePlacement returns rank and world size as described above.
// `options_name` names the caller's options struct in error messages, so that
// "LoaderOptions" gives "world size 0 from LoaderOptions.world_size must be >= 1".
[[nodiscard]] absl::StatusOr<Placement> ResolvePlacement(
    const PlacementOptions& options, std::string_view options_name = "PlacementOptions");

// ResolveLocalRank returns `local_rank` if set, else LOCAL_RANK, else
// SLURM_LOCALID, else 0: the GPU index of this process on its node (the
// Loader's pinned memory, the LibTorch layer's device). A negative value is
// an error. In messages, `option_name`
// names the option and `what` the value ("device -1 from SLURM_LOCALID must
// be >= 0" for the Loader's device).
[[nodiscard]] absl::StatusOr<int> ResolveLocalRank(
    std::optional<int> local_rank, std::string_view option_name = "PlacementOptions.local_rank",
    std::string_view what = "local rank");

// LauncherLocalRank is the local rank the launcher's environment gives
// (LOCAL_RANK, else SLURM_LOCALID), or nullopt when it gives none. Errors as
// ResolveLocalRank's.
[[nodiscard]] absl::StatusOr<std::optional<int>> LauncherLocalRank(
    std::string_view what = "local rank");

}  // namespace wds
