#include "executor/launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "executor/comm/communicator.h"

extern char** environ;

namespace llmplan::exec {

namespace {

std::string ranks_text(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

std::string devices_text(int n) { return std::to_string(n) + (n == 1 ? " CUDA device" : " CUDA devices"); }

}  // namespace

LaunchDecision decide_launch(const LaunchInputs& in) {
  LaunchDecision d;
  const int n = in.ranks;
  if (n <= 1) {
    d.reason = "the plan has one rank";
    return d;
  }
  // A launcher started this process: it is one of the ranks. PMIX_RANK too: PMIx sets it
  // without a world size.
  if (const int world = launcher_world_size(in.env); world > 0 || in.env.count("PMIX_RANK")) {
    d.reason = "a launcher started this process (" + (world > 0 ? "world size " + std::to_string(world) : std::string("PMIX_RANK")) +
               "): it runs as one of the ranks";
    return d;
  }
  if (in.backend != "cuda") {
    d.reason = "the " + in.backend + " backend runs one rank's share here (this machine cannot hold the plan's " + ranks_text(n) +
               "); ranks are started only on GPUs (--backend cuda)";
    return d;
  }
  const std::string ranks = std::to_string(n);
  if (auto job = in.env.find("SLURM_JOB_ID"); job != in.env.end()) {
    const auto tasks_it = in.env.find("SLURM_NTASKS");
    const int tasks = tasks_it != in.env.end() ? std::atoi(tasks_it->second.c_str()) : 0;
    if (tasks >= n) {
      d.launcher = {"srun", "--ntasks", ranks};
      d.reason = "Slurm job " + job->second + " has " + std::to_string(tasks) + " tasks for the plan's " + ranks_text(n);
    } else {
      d.reason = "Slurm job " + job->second + " has " + std::to_string(tasks) + " tasks (SLURM_NTASKS) for the plan's " + ranks_text(n) +
                 ": allocate " + ranks + " (sbatch or salloc --ntasks " + ranks + ") to run it whole";
    }
    return d;
  }
  if (in.cuda_devices >= n) {
    d.launcher = mpirun_arguments(n, in.root, in.cores);
    d.reason = "this machine has " + devices_text(in.cuda_devices) + " for the plan's " + ranks_text(n) + ", one per rank";
    return d;
  }
  d.reason = "this machine has " + devices_text(in.cuda_devices) + " for the plan's " + ranks_text(n) + " (one device per rank)";
  return d;
}

Environment process_environment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  return args;
}

std::string own_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string find_on_path(const std::string& name, const std::string& path) {
  if (path.empty()) return "";  // no PATH: nothing to search
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    // An empty entry is the current directory, as the shell reads PATH.
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string file = dir + "/" + name;
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0) return file;
    start = end + 1;
  }
  return "";
}

std::string shell_line(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& a : args) {
    if (!line.empty()) line += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,@%+-") == std::string::npos;
    if (plain) {
      line += a;
      continue;
    }
    line += '\'';
    for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace llmplan::exec
