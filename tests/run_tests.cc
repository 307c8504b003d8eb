// The run of a library call (src/run/run.h): undo order, stopping, the point of no return,
// the test hook, and the run carried to the threads the library starts.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/parallel.h"
#include "run/run.h"
#include "tfckpt/region.h"

namespace {

using tfckpt::Run;
using tfckpt::RunOptions;
using tfckpt::RunScope;
using tfckpt::UndoOrder;

TEST_CASE("undo: newest first in order, independent work side by side, nothing after Keep, once") {
  std::mutex mu;
  std::vector<std::string> ran;
  auto note = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    ran.push_back(std::move(what));
  };
  // Two independent items that each wait for the other: run one after the other they would
  // give up waiting (and say so); side by side both see the other start.
  std::atomic<int> started{0};
  auto meet = [&](std::string name) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    note(name + (started.load() >= 2 ? " met" : " alone"));
  };
  {
    Run run;
    RunScope scope(&run);
    tfckpt::AtUndo([&] { note("data"); });
    tfckpt::AtUndo([&] { meet("upload 1"); }, UndoOrder::kIndependent);
    const uint64_t forgotten = tfckpt::AtUndo([&] { note("forgotten"); });
    tfckpt::AtUndo([&] { note("index"); });
    tfckpt::AtUndo([&] { meet("upload 2"); }, UndoOrder::kIndependent);
    tfckpt::ForgetAtUndo(forgotten);
    CHECK_FALSE(run.Undoing());
    run.Undo();
    CHECK_FALSE(run.Undoing());
    run.Undo();  // (taken once: nothing left to do)
  }
  std::vector<std::string> in_order;
  for (const auto& r : ran) {
    if (r == "data" || r == "index") in_order.push_back(r);
  }
  CHECK(in_order == std::vector<std::string>{"index", "data"});
  CHECK(std::count(ran.begin(), ran.end(), "upload 1 met") == 1);
  CHECK(std::count(ran.begin(), ran.end(), "upload 2 met") == 1);
  CHECK(ran.size() == 4);
  {
    Run run;
    RunScope scope(&run);
    tfckpt::AtUndo([&] { note("kept"); });
    run.Keep();
  }
  CHECK(ran.size() == 4);
  // Outside a run nothing is recorded (and nothing runs later).
  CHECK(tfckpt::AtUndo([&] { note("no run"); }) == 0);
  CHECK(ran.size() == 4);
}

TEST_CASE("undo work runs for the run it undoes, with its requests not cancellable") {
  std::stop_source stop;
  RunOptions o;
  o.stop = stop.get_token();
  Run run(o);
  std::atomic<int> seen{0};
  {
    RunScope scope(&run);
    for (UndoOrder order : {UndoOrder::kNewestFirst, UndoOrder::kIndependent}) {
      tfckpt::AtUndo(
          [&] {
            if (tfckpt::CurrentRun() == &run && run.Undoing() && !tfckpt::Stopping() && tfckpt::CleaningUpAfterStop()) {
              ++seen;
            }
          },
          order);
    }
  }
  stop.request_stop();
  run.Undo();
  CHECK(seen == 2);
}

TEST_CASE("a stop is an error at the run's points until its point of no return, then only reported") {
  std::stop_source stop;
  RunOptions o;
  o.stop = stop.get_token();
  std::vector<std::string> points;
  o.at_point = [&](std::string_view p) { points.emplace_back(p); };
  Run run(o);
  RunScope scope(&run);
  CHECK(tfckpt::CheckStop().ok());
  CHECK(tfckpt::Reached("first").ok());
  stop.request_stop();
  CHECK(run.StopRequested());
  CHECK(run.Stopping());
  CHECK(tfckpt::Stopping());
  CHECK(absl::IsCancelled(tfckpt::CheckStop()));
  CHECK(absl::IsCancelled(tfckpt::Reached("second")));
  {
    tfckpt::NotCancellable clean_up;
    CHECK_FALSE(tfckpt::Stopping());  // (its requests go out)
    CHECK(tfckpt::CleaningUpAfterStop());
  }
  run.PassPointOfNoReturn();
  CHECK(run.StopRequested());
  CHECK_FALSE(run.Stopping());
  CHECK(tfckpt::CheckStop().ok());
  CHECK(tfckpt::Reached("third").ok());
  CHECK(points == std::vector<std::string>{"first", "second", "third"});
  run.Keep();
}

TEST_CASE("progress: each phase's counter until the next call; the run ends its last phase before it goes") {
  struct Call {
    std::string phase;
    uint64_t total;
    const std::atomic<uint64_t>* done;
    uint64_t before;  // the previous phase's counter, read when this call came (it must still be valid)
  };
  std::vector<Call> calls;
  RunOptions o;
  o.progress = [&](std::string_view phase, uint64_t total, const std::atomic<uint64_t>* done) {
    const uint64_t before = calls.empty() || calls.back().done == nullptr ? 0 : calls.back().done->load();
    calls.push_back({std::string(phase), total, done, before});
  };
  {
    Run run(o);
    RunScope scope(&run);
    std::atomic<uint64_t>* copying = tfckpt::StartPhase("copying", 10);
    REQUIRE(copying != nullptr);
    *copying += 10;
    std::atomic<uint64_t>* verifying = tfckpt::StartPhase("verifying", 4);
    REQUIRE(verifying != nullptr);
    *verifying += 3;
    run.Keep();
  }
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].phase == "copying");
  CHECK(calls[0].total == 10);
  CHECK(calls[1].phase == "verifying");
  CHECK(calls[1].before == 10);
  CHECK(calls[2].phase.empty());
  CHECK(calls[2].done == nullptr);
  CHECK(calls[2].before == 3);
  // A run without a phase makes no call.
  calls.clear();
  {
    Run run(o);
    run.Keep();
  }
  CHECK(calls.empty());
}

TEST_CASE("a backoff's wait ends at a stop, but not past the point of no return") {
  std::stop_source stop;
  RunOptions o;
  o.stop = stop.get_token();
  Run run(o);
  RunScope scope(&run);
  CHECK(tfckpt::SleepUnlessStopped(std::chrono::milliseconds(1)));
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop.request_stop();
  });
  // An hour's wait, cut short by the stop (a generous bound on a hang is the test's own
  // timeout, not a measurement here).
  CHECK_FALSE(tfckpt::SleepUnlessStopped(std::chrono::hours(1)));
  stopper.join();
  run.PassPointOfNoReturn();
  CHECK(tfckpt::SleepUnlessStopped(std::chrono::milliseconds(1)));
  run.Keep();
}

TEST_CASE("the threads the library starts work for the caller's run; ParallelFor and ForEachChunk stop with it") {
  std::stop_source stop;
  RunOptions o;
  o.stop = stop.get_token();
  auto run = std::make_shared<Run>(o);
  RunScope scope(run.get());
  std::atomic<int> same{0};
  tfckpt::ParallelFor(16, 4, [&](size_t) { same += tfckpt::CurrentRun() == run.get(); });
  CHECK(same == 16);
  std::thread t = tfckpt::StartThread([&] { same += tfckpt::CurrentRun() == run.get(); });
  t.join();
  CHECK(same == 17);
  // Items after the stop do not start; the loop returns the stopped error.
  std::atomic<int> done{0};
  absl::Status s = tfckpt::ParallelForStatus(1000, 2, [&](size_t i, const std::atomic<bool>&) {
    if (i == 10) stop.request_stop();
    ++done;
    return absl::OkStatus();
  });
  CHECK(absl::IsCancelled(s));
  CHECK(done < 1000);
  int chunks = 0;
  s = tfckpt::ForEachChunk(tfckpt::Region::Full({1000, 10}), 4, 40, [&](const tfckpt::Region&) {
    ++chunks;
    return absl::OkStatus();
  });
  CHECK(absl::IsCancelled(s));
  CHECK(chunks == 0);
  run->Keep();
}

}  // namespace

#include "tfckpt/open.h"
#include "tfckpt/run.h"

TEST_CASE("RunContext: the calls of a thread in its scope run with its options, and nothing is undone at its end") {
  std::stop_source stop;
  std::vector<std::string> points;
  bool undone = false;
  {
    RunOptions o;
    o.stop = stop.get_token();
    o.connections = 3;
    o.object_store.endpoint_url = "http://127.0.0.1:1";
    o.object_store.no_sign_request = true;
    o.at_point = [&](std::string_view point) { points.emplace_back(point); };
    tfckpt::RunContext context(std::move(o));
    CHECK(tfckpt::CurrentRun() == nullptr);
    {
      tfckpt::RunContext::Scope scope(context);
      REQUIRE(tfckpt::CurrentRun() != nullptr);
      Run* run = tfckpt::CurrentRun();
      CHECK(run->connections() == 3);
      CHECK(run->object_store().endpoint_url == "http://127.0.0.1:1");
      CHECK(tfckpt::Reached("here").ok());
      tfckpt::AtUndo([&] { undone = true; });
      // The threads the library starts work for it too.
      Run* seen = nullptr;
      std::thread t = tfckpt::StartThread([&] { seen = tfckpt::CurrentRun(); });
      t.join();
      CHECK(seen == run);
      // A nested scope of another context, then this one again.
      tfckpt::RunContext other;
      {
        tfckpt::RunContext::Scope inner(other);
        CHECK(tfckpt::CurrentRun() != run);
      }
      CHECK(tfckpt::CurrentRun() == run);
      // An object store read goes to the context's endpoint (nothing listens there): the
      // error names it.
      auto opened = tfckpt::OpenCheckpoint("s3://bucket/model.ckpt");
      REQUIRE_FALSE(opened.ok());
      CAPTURE(opened.status().ToString());
      CHECK(opened.status().message().find("127.0.0.1:1") != std::string_view::npos);
      // Its stop stops the calls.
      stop.request_stop();
      CHECK(absl::IsCancelled(tfckpt::CheckStop()));
    }
    CHECK(tfckpt::CurrentRun() == nullptr);
  }
  CHECK(points == std::vector<std::string>{"here"});
  CHECK_FALSE(undone);
}

#include "format/bundle/bundle_writer.h"
#include "test_util.h"
#include "tfckpt/commands.h"
#include "tfckpt/storage.h"

TEST_CASE("a run's stores are the caller's: a command writes s3:// into a memory store, with no network") {
  tfckpt::testing::TempDir dir;
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "src"));
    REQUIRE(w.ok());
    const std::string bytes(12, '\x01');
    REQUIRE((*w)->Add("w", 1, {3}, bytes).ok());
    REQUIRE((*w)->Finish().ok());
  }
  const std::shared_ptr<tfckpt::Storage> memory = tfckpt::NewMemoryStorage();
  RunOptions o;
  o.stores = {{"s3", memory}};
  // No endpoint and no credentials: the library's own s3:// store could not write this.
  o.object_store.endpoint_url = "http://127.0.0.1:1";
  tfckpt::ConvertRequest request;
  request.src = dir / "src";
  request.out = "s3://bucket/run/copy";
  auto converted = tfckpt::Convert(request, o);
  REQUIRE_MESSAGE(converted.ok(), converted.status().ToString());
  CHECK(memory->Exists("s3://bucket/run/copy.index"));
  CHECK(memory->Exists("s3://bucket/run/copy.data-00000-of-00001"));
  // Read back in a context with the same store, and only there.
  {
    tfckpt::RunContext context({.stores = {{"s3", memory}}});
    tfckpt::RunContext::Scope scope(context);
    auto c = tfckpt::OpenCheckpoint("s3://bucket/run/copy");
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    CHECK((*c)->Find("w") != nullptr);
  }
  tfckpt::RunContext elsewhere({.stores = {{"s3", tfckpt::NewMemoryStorage()}}});
  tfckpt::RunContext::Scope scope(elsewhere);
  CHECK_FALSE(tfckpt::OpenCheckpoint("s3://bucket/run/copy").ok());
}
