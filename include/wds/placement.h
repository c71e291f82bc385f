// Placement: where this process sits in a distributed job.
//
// Launchers describe a job through environment variables; these functions read
// them once, strictly, for the Loader (rank and world size) and for the LibTorch
// layer (local rank and the rendezvous address of rank 0):
//
//   wds::PlacementOptions options;                 // explicit values win
//   absl::StatusOr<wds::Placement> p = wds::ResolvePlacement(options);
//   // torchrun --nproc_per_node 4: p->rank in [0, 4), p->world_size == 4
//
// Precedence, each field separately: an explicit option, else torchrun's
// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), else
// SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST,
// SLURM_JOB_ID), else a single process (rank 0 of 1, local rank 0).
//
// Rank and world size are read as a pair from one launcher (RANK/WORLD_SIZE if
// either is set, else SLURM_PROCID/SLURM_NTASKS), so that the rank of one
// launcher is never combined with the world size of another; one of a pair set
// without the other is an error.
//
// Errors are InvalidArgument and name the variable or option and its text:
// `environment variable WORLD_SIZE="4x" is not an integer`.
//
// Thread safety: the functions read the environment and hold no state; do not
// call them while another thread runs setenv.
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
// SLURM_LOCALID, else 0. A negative value is an error. In messages,
// `option_name` names the option and `what` the value ("device -1 from
// SLURM_LOCALID must be >= 0" for the Loader's device).
[[nodiscard]] absl::StatusOr<int> ResolveLocalRank(
    std::optional<int> local_rank, std::string_view option_name = "PlacementOptions.local_rank",
    std::string_view what = "local rank");

// Rendezvous is where rank 0 listens for the others.
struct Rendezvous {
  std::string addr;
  int port = 0;
};

// kDefaultSlurmPortBase is the first port derived from SLURM_JOB_ID: jobs get
// kDefaultSlurmPortBase + SLURM_JOB_ID % 10000, below the Linux ephemeral range
// (32768 and up) so that an outgoing connection never holds it.
inline constexpr int kDefaultSlurmPortBase = 20000;

// kDefaultMasterPort is torchrun's default port, for a job that names none.
inline constexpr int kDefaultMasterPort = 29500;

// ResolveRendezvous returns rank 0's address and port. The address is
// options.master_addr, else MASTER_ADDR, else the first host of
// SLURM_JOB_NODELIST (else SLURM_NODELIST); finding none is an InvalidArgument
// error naming MASTER_ADDR. The port is options.master_port, else MASTER_PORT,
// else one derived from SLURM_JOB_ID (see above), else kDefaultMasterPort.
[[nodiscard]] absl::StatusOr<Rendezvous> ResolveRendezvous(const PlacementOptions& options);

}  // namespace wds
