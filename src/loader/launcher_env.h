// What the launcher's environment says besides rank, world size and local
// rank (those are ResolvePlacement's and ResolveLocalRank's,
// wds/loader/placement.h): the address where rank 0 listens (for the LibTorch
// layer's rendezvous). Same precedence and errors as ResolvePlacement.
//
// Thread safety: the functions read the environment and hold no state; do not
// call them while another thread runs setenv.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/loader/placement.h"

namespace wds {

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
