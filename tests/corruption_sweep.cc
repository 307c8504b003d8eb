// Corruption sweep over the real checkpoints (docs/RELIABILITY.md).
//
// For every case in ../shared/testdata/tf, on a private copy: truncate the index (or V1
// file) at every byte offset and flip a bit in every byte of it (a dense sample for
// files of 16 KiB and more); truncate each data file at a sample of offsets and flip
// bits inside it. After each change, `inspect --json`, `validate --json` and a
// `reshard` run in a forked child (the whole command line, in-process: RunTfckpt), with
// an alarm as the hang guard. Every run must end with an exit code from 0..3 (never a
// signal, never a sanitizer report), errors must be one stderr line, a failed reshard
// must leave nothing at its output, and:
//   index changes:  inspect 3, validate 1 or 3, reshard non-zero;
//   data truncated: inspect 3, validate 1 or 3, reshard non-zero;
//   data bit flips: validate 1 naming the tensor whose bytes were flipped, reshard
//                   non-zero (100% of flips must be caught).
//
// Usage: corruption_sweep TESTDATA_DIR [--stride N] [--phase K] [--case NAME] [--jobs N]
//   --stride N   test every Nth offset of the index sweeps (default 1: all of them)
//   --phase K    which of the N: offsets K, K+N, K+2N, ... (default 0; K < N). The
//                sanitizer build samples with a stride, and scripts/check.sh sets the
//                phase from the commit, so successive commits cover different offsets.
// TFCKPT_SWEEP_STRIDE and TFCKPT_SWEEP_PHASE, when set, replace --stride and --phase.
// Exit: 0 all held, 1 a failure (each printed), 77 no test data (skip; CI=true: 1).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"

// Sanitizer reports must not look like exit code 1 ("a check failed").
extern "C" const char* __asan_default_options() { return "exitcode=86"; }
extern "C" const char* __ubsan_default_options() { return "exitcode=86:print_stacktrace=1"; }

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Case {
  const char* dir;
  const char* arg;  // what to pass as CKPT, relative to the case copy
};

// Every case of testdata/tf/MANIFEST.md, with the argument the CLI tests use, the most work
// first (runs of a full sweep: from 66,894 for t2t_transformer_2shards down to 1,014): the
// workers take the next case as they finish one, so they end close together.
const Case kCases[] = {
    {"t2t_transformer_2shards", ""},
    {"truncated_data_resnet_savedmodel", "variables"},
    {"index_only_minigo_snappy", ""},
    {"v1_traffic_signs_3mb", ""},
    {"v1_vocal_autoencoder_multiblock", ""},
    {"tf2_float64_variant_pinn", ""},
    {"estimator_tfx_adagrad_ftrl", ""},
    {"estimator_dnn_adam_2shards", ""},
    {"savedmodel_keras_tfx_slots", ""},
    {"estimator_linear_ftrl_2shards", ""},
    {"t5x_mtf_bfloat16_missing_shard", ""},
    {"keras_tf2_adam_2shards", ""},
    {"keras_tuner_prefix_named_checkpoint", ""},
    {"tf2_iterator_variant_int32", ""},
    {"empty_prefix_keras", ""},
    {"index_only_lingvo_snappy", ""},
    {"savedmodel_tfdf_bool_snappy", ""},
    {"savedmodel_tf2_snappy_index", ""},
    {"savedmodel_tfjs_int64", ""},
    {"v1_abs_path_state", ""},
    {"savedmodel_tf1_snappy_index", ""},
    {"v1_session_bundle_sharded_name", "export-00000-of-00001"},
};

struct RunResult {
  bool signaled = false;
  int code = -1;
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, std::string_view bytes) {
  // Rewritten in place (same inode), as damage on disk would be.
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
  if (fd < 0) {
    perror(path.c_str());
    std::exit(1);
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      perror(path.c_str());
      std::exit(1);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// Runs `tfckpt ARGS...` in a forked child; stdout and stderr go to files in `scratch`.
RunResult RunCli(const std::vector<std::string>& args, const std::string& scratch) {
  const std::string out_path = scratch + "/stdout", err_path = scratch + "/stderr";
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
    if (out < 0 || err < 0) ::_exit(90);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::alarm(60);  // a hang ends as SIGALRM, which the parent reports
    std::vector<std::string> storage = {"tfckpt"};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    int code = tfckpt::cli::RunTfckpt(static_cast<int>(storage.size()), argv.data());
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    ::_exit(code);
  }
  RunResult r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    r.signaled = true;
    r.code = WTERMSIG(status);
  } else {
    r.code = WEXITSTATUS(status);
  }
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

struct Sweep {
  std::string name;  // case
  int runs = 0, failures = 0;
  std::map<std::string, int> outcomes;  // "inspect:3" -> count
};

std::string OneLine(const std::string& s) {
  std::string t = s.substr(0, 300);
  std::replace(t.begin(), t.end(), '\n', '|');
  return t;
}

class Sweeper {
 public:
  Sweeper(std::string work, Sweep* sweep) : work_(std::move(work)), sweep_(sweep) {
    fs::create_directories(work_ + "/scratch");
  }

  // Runs the three commands on the damaged copy and checks the rules; `what` names the
  // damage in failure messages; `flipped_tensor` (data flips) is who validate must name.
  void Check(const std::string& ckpt, const std::string& what, bool data_flip, const std::string& flipped_tensor) {
    const std::string scratch = work_ + "/scratch", out_dir = work_ + "/out";
    Expect(what, "inspect", RunCli({"inspect", ckpt, "--json"}, scratch), data_flip ? -1 : 3, data_flip ? -1 : 3);
    RunResult v = RunCli({"validate", ckpt, "--json"}, scratch);
    if (data_flip) {
      Expect(what, "validate", v, 1, 1);
      if (!v.signaled && v.code == 1 && !flipped_tensor.empty()) {
        bool named = false;
        try {
          const json doc = json::parse(v.out);
          for (const auto& e : doc.at("errors")) {
            if (e.at("key").is_string() && e.at("key").get<std::string>() == flipped_tensor) named = true;
          }
        } catch (const std::exception& e) {
          Fail(what, StrCat("validate --json output does not parse: ", e.what()));
        }
        if (!named) Fail(what, "validate did not name " + flipped_tensor + ": " + OneLine(v.out.substr(v.out.find("\"errors\""))));
      }
    } else {
      Expect(what, "validate", v, 1, 3);
    }
    fs::remove_all(out_dir);
    fs::create_directories(out_dir);
    RunResult r = RunCli({"reshard", ckpt, "-o", out_dir + "/x", "--partition", "none", "--policy", "single", "--quiet"},
                         scratch);
    Expect(what, "reshard", r, 1, 3);
    if (!r.signaled && r.code != 0 && !fs::is_empty(out_dir)) {
      Fail(what, "failed reshard left files in its output directory: " + fs::begin(fs::directory_iterator(out_dir))->path().string());
    }
  }

 private:
  static std::string StrCat(const std::string& a, const std::string& b) { return a + b; }

  // Exit code in [lo, hi] (lo == -1: any of 0..3); errors are one line on stderr.
  void Expect(const std::string& what, const char* cmd, const RunResult& r, int lo, int hi) {
    ++sweep_->runs;
    sweep_->outcomes[std::string(cmd) + ":" + (r.signaled ? "signal" : std::to_string(r.code))]++;
    if (r.signaled) {
      Fail(what, std::string(cmd) + " died of signal " + std::to_string(r.code) +
                     (r.code == SIGALRM ? " (hang: no answer in 60 s)" : "") + ": " + OneLine(r.err));
      return;
    }
    const bool in_range = lo < 0 ? r.code <= 3 : (r.code >= lo && r.code <= hi);
    if (!in_range) {
      Fail(what, std::string(cmd) + " exited " + std::to_string(r.code) + ": " + OneLine(r.err));
      return;
    }
    if (r.code == 3 || (r.code != 0 && std::string(cmd) != "validate")) {
      const size_t lines = std::count(r.err.begin(), r.err.end(), '\n');
      if (lines != 1 || r.err.rfind("tfckpt ", 0) != 0) {
        Fail(what, std::string(cmd) + " error is not one line: " + OneLine(r.err));
      }
    }
  }

  void Fail(const std::string& what, const std::string& msg) {
    if (++sweep_->failures <= 20) std::cout << "FAIL " << sweep_->name << ": " << what << ": " << msg << "\n";
  }

  std::string work_;
  Sweep* sweep_;
};

// Offsets to damage in a file of `size` bytes: all of them (by `stride`) below 16 KiB,
// otherwise 4096 spread evenly plus the first and last 256.
std::vector<uint64_t> IndexOffsets(uint64_t size, uint64_t stride, uint64_t phase) {
  std::vector<uint64_t> v;
  if (size < 16 * 1024) {
    for (uint64_t o = phase; o < size; o += stride) v.push_back(o);
    return v;
  }
  const uint64_t n = 4096 / stride;
  for (uint64_t i = 0; i < n; ++i) v.push_back((size * i / n + phase) % size);
  for (uint64_t o = phase; o < 256; o += stride) {
    v.push_back(o);
    v.push_back(size - 1 - o);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// A sample of offsets inside a data file: both ends, evenly spread, and random ones.
std::vector<uint64_t> DataOffsets(uint64_t size, int n, std::mt19937_64& rng) {
  std::vector<uint64_t> v;
  if (size == 0) return v;
  v.push_back(0);
  v.push_back(size - 1);
  for (int i = 1; i < n / 2; ++i) v.push_back(size * i / (n / 2));
  for (int i = 0; i < n / 2; ++i) v.push_back(rng() % size);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

int SweepCase(const fs::path& testdata, const Case& c, uint64_t stride, uint64_t phase, const fs::path& work,
              Sweep* sweep) {
  const fs::path copy = work / c.dir;
  fs::remove_all(copy);
  fs::copy(testdata / c.dir, copy, fs::copy_options::recursive);
  const std::string ckpt = (copy / c.arg).string();
  Sweeper sweeper(work.string(), sweep);

  // Which files hold the index (V2 .index, or the V1 table files) and the data.
  auto resolved = tfckpt::ResolveCheckpoint(ckpt);
  if (!resolved.ok()) {
    std::cout << "FAIL " << c.dir << ": cannot resolve the pristine copy: " << resolved.status() << "\n";
    return 1;
  }
  std::vector<std::string> index_files = resolved->v1_files;
  if (resolved->format == tfckpt::Format::kV2) index_files = {resolved->prefix + ".index"};

  // Data pieces of the pristine copy: file -> [(offset, end, tensor)].
  std::map<std::string, std::vector<std::tuple<uint64_t, uint64_t, std::string>>> pieces;
  {
    auto opened = tfckpt::OpenCheckpoint(ckpt);
    if (opened.ok() && (*opened)->info().format == tfckpt::Format::kV2) {
      const auto& info = (*opened)->info();
      for (const auto& t : (*opened)->tensors()) {
        for (const auto& s : t.slices) {
          if (s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(info.data_files.size())) {
            pieces[info.data_files[s.data.shard]].emplace_back(s.data.offset, s.data.offset + s.data.size, t.name);
          }
        }
      }
      for (const auto& f : info.data_files) {
        if (!fs::exists(f)) pieces.erase(f);
        else pieces[f];  // data files with no entries are swept too
      }
    }
  }

  for (const std::string& file : index_files) {
    const std::string original = ReadAll(file);
    const std::string rel = fs::relative(file, copy).string();
    for (uint64_t off : IndexOffsets(original.size(), stride, phase)) {
      WriteAll(file, std::string_view(original).substr(0, off));
      sweeper.Check(ckpt, rel + " truncated to " + std::to_string(off) + " bytes", false, "");
      std::string flipped = original;
      flipped[off] = static_cast<char>(flipped[off] ^ (1 << (off % 8)));
      WriteAll(file, flipped);
      sweeper.Check(ckpt, rel + " bit " + std::to_string(off % 8) + " of byte " + std::to_string(off) + " flipped",
                    false, "");
    }
    WriteAll(file, original);
  }

  std::mt19937_64 rng(0x5eed);
  for (const auto& [file, ranges] : pieces) {
    const std::string original = ReadAll(file);
    const std::string rel = fs::relative(file, copy).string();
    for (uint64_t off : DataOffsets(original.size(), 16, rng)) {
      WriteAll(file, std::string_view(original).substr(0, off));
      sweeper.Check(ckpt, rel + " truncated to " + std::to_string(off) + " bytes", false, "");
    }
    for (uint64_t off : DataOffsets(original.size(), 64, rng)) {
      std::string who;
      for (const auto& [b, e, name] : ranges) {
        if (off >= b && off < e) who = name;
      }
      std::string flipped = original;
      flipped[off] = static_cast<char>(flipped[off] ^ (1 << (off % 8)));
      WriteAll(file, flipped);
      if (who.empty()) {
        // Bytes no entry covers cannot be checked by a CRC; real TF data files have none.
        std::cout << "FAIL " << c.dir << ": " << rel << " byte " << off << " belongs to no tensor\n";
        ++sweep->failures;
        continue;
      }
      sweeper.Check(ckpt, rel + " bit " + std::to_string(off % 8) + " of byte " + std::to_string(off) + " flipped",
                    true, who);
    }
    WriteAll(file, original);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: corruption_sweep TESTDATA_DIR [--stride N] [--phase K] [--case NAME] [--jobs N]\n";
    return 2;
  }
  const fs::path testdata = argv[1];
  uint64_t stride = 1, phase = 0;
  int jobs = 2;
  std::string only;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--stride") stride = std::max<uint64_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
    else if (flag == "--phase") phase = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--case") only = argv[i + 1];
    else if (flag == "--jobs") jobs = std::max(1, std::atoi(argv[i + 1]));
  }
  // The environment's sampling wins over the build's (scripts/check.sh samples the release
  // build's sweep without changing how that build is configured).
  if (const char* v = std::getenv("TFCKPT_SWEEP_STRIDE"); v != nullptr && *v != '\0') {
    stride = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
  }
  if (const char* v = std::getenv("TFCKPT_SWEEP_PHASE"); v != nullptr && *v != '\0') phase = std::strtoull(v, nullptr, 10);
  phase %= stride;
  if (stride > 1) std::cout << "index offsets: every " << stride << "th from " << phase << " (--stride " << stride << " --phase " << phase << ")\n";
  if (!fs::exists(testdata / "MANIFEST.md")) {
    const char* ci = std::getenv("CI");
    std::cout << testdata.string() << ": no test data" << (ci && std::string(ci) == "true" ? " (CI=true: failure)" : "")
              << "\n";
    return ci && std::string(ci) == "true" ? 1 : 77;
  }
  // The copies live in memory where the machine has /dev/shm: every run writes (and the
  // reshard runs fsync) small outputs, tens of thousands of times, and on a disk the syncs
  // were a good part of the sweep's wall time.
  std::string tmpl = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/tfckpt-sweep-XXXXXX");
  // (The workers' shared case counter first: a failure then leaves no directory behind.)
  void* shared = ::mmap(nullptr, sizeof(std::atomic<size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  if (::mkdtemp(tmpl.data()) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  const fs::path work = tmpl;

  // Cases are shared out over `jobs` worker processes, each with its own copies: each
  // takes the next case not yet taken (a counter in memory the workers share), in the
  // order of kCases. (A fixed share, every jobs-th case, once gave one worker 74 % of the
  // runs.)
  std::vector<const Case*> cases;
  for (const Case& c : kCases) {
    if (only.empty() || only == c.dir) cases.push_back(&c);
  }
  static_assert(std::atomic<size_t>::is_always_lock_free, "shared between processes");
  auto* next_case = new (shared) std::atomic<size_t>(0);
  std::vector<pid_t> workers;
  for (int w = 0; w < jobs; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int failures = 0;
      for (size_t i; (i = next_case->fetch_add(1)) < cases.size();) {
        Sweep sweep;
        sweep.name = cases[i]->dir;
        const fs::path mine = work / ("w" + std::to_string(w));
        fs::create_directories(mine);
        failures += SweepCase(testdata, *cases[i], stride, phase, mine, &sweep);
        failures += sweep.failures;
        std::ostringstream line;
        line << (sweep.failures ? "FAILED " : "ok     ") << sweep.name << ": " << sweep.runs << " runs, "
             << sweep.failures << " failures;";
        for (const auto& [k, n] : sweep.outcomes) line << " " << k << "=" << n;
        std::cout << line.str() << std::endl;
      }
      std::cout.flush();
      ::_exit(failures ? 1 : 0);
    }
    workers.push_back(pid);
  }
  int status_all = 0;
  for (pid_t pid : workers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) status_all = 1;
  }
  fs::remove_all(work);
  std::cout << (status_all ? "corruption sweep: FAILED" : "corruption sweep: all held") << "\n";
  return status_all;
}
