// The wds-shard subcommands. Each takes the arguments after its name and
// returns the process exit status.
#pragma once

namespace wds::tools {

int RunLs(int argc, char** argv);
int RunCreate(int argc, char** argv);
int RunCat(int argc, char** argv);
int RunExtract(int argc, char** argv);
int RunStats(int argc, char** argv);
int RunVerify(int argc, char** argv);
int RunIndex(int argc, char** argv);

}  // namespace wds::tools
