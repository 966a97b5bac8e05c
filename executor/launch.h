// Whether `llmplan execute PLAN`, typed with nothing else, starts the plan's ranks itself,
// as torchrun does for PyTorch users: with `mpirun -np N` where this machine has a CUDA
// device per rank, or `srun --ntasks N` inside a Slurm job that has the tasks. Otherwise
// the run stays in this process (on the CPU the heaviest rank's proxy, scaled down; on a
// GPU the plan's single-rank equivalent), and the decision says why.
//
// decide_launch is pure: every case is testable without GPUs, MPI or Slurm.
// Thread-safety: decide_launch and shell_line are pure; the others read the process
// (environ, /proc/self) or the file system, and process_environment must not race a setenv.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace llmplan::exec {

using Environment = std::map<std::string, std::string>;

struct LaunchInputs {
  int ranks = 1;           // the plan's world size
  std::string backend;     // "cpu" or "cuda"
  int cuda_devices = 0;    // CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied)
  Environment env;         // the process's environment; only the launchers' variables are read
  bool root = false;       // OpenMPI's mpirun needs --allow-run-as-root
  unsigned cores = 0;      // mpirun --oversubscribe when the ranks exceed them (0: unknown)
};

struct LaunchDecision {
  // The launcher's command line before the program, e.g. {"mpirun", "-np", "8"} or
  // {"srun", "--ntasks", "8"}; empty: run in this process.
  std::vector<std::string> launcher;
  std::string reason;  // why this launcher, or why none ("this machine has 1 CUDA device; ...")
};

// Launches when the plan has N > 1 ranks, no launcher started this process (no
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, PMIX_RANK, nor an srun step's SLURM_NTASKS),
// the backend is cuda, and either a Slurm job (SLURM_JOB_ID) has SLURM_NTASKS >= N (srun)
// or, outside Slurm, this machine has N CUDA devices (mpirun). The CPU backend never
// launches: one machine's memory cannot hold N ranks' shares, and the proxy is the run.
LaunchDecision decide_launch(const LaunchInputs& in);

// This process's environment.
Environment process_environment();
// This process's command line as it was started (argv, from /proc/self/cmdline) and its
// executable (/proc/self/exe); empty when unreadable.
std::vector<std::string> own_command_line();
std::string own_executable();
// The first regular executable file named `name` in the directories of `path` (PATH's
// form, ':'-separated; an empty entry is the current directory); "" when there is none.
std::string find_on_path(const std::string& name, const std::string& path);
// `args` as one shell command line, each quoted where the shell would split or expand it.
std::string shell_line(const std::vector<std::string>& args);

}  // namespace llmplan::exec
