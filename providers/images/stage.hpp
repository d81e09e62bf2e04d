#pragma once
// The node's own verified copy of each image (engine.stage-dir): fetched
// from the mirror and verified once per engine, then uploaded from there to
// every host that needs it. Without it each host's fill downloads and
// hashes the image itself: a rollout to N hosts reads the mirror N times.
//
// Blocking, shared by the fills of every host (each runs in its own
// detached call): the first fill that needs an image the stage does not
// hold fetches it into `<stem>.partial` under the stage directory, on its
// own thread, while the other fills of that image wait; once length and
// sha256 are verified the file is renamed to `<stem>` (the image's data
// volume name, volume_names.hpp: dot-free names, so two entries or two
// images never meet) and every waiter uploads from it as a file:// source.
// A fill given up while it fetches leaves the partial file, and the next
// fill that needs the image resumes it (its prefix hashed again, the rest
// asked for with a range). A fill is asked for the copy only once it knows
// the host lacks the image: a warm restart fetches nothing.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "providers/images/fill.hpp"

namespace egress::images {

class image_stage {
public:
  /// Makes `dir` if it is missing and checks that a file can be made in it;
  /// files of `entry` left there (verified copies, partial ones) are kept
  /// for the fills to use or resume.
  static caf::expected<std::shared_ptr<image_stage>> open(const std::string& dir,
                                                          const std::string& entry);

  /// The path of the verified copy of `req.image`, fetched now if the stage
  /// does not hold it (by this thread, or by another fill while this one
  /// waits). Meanwhile `progress` shows the copy's bytes and total, so a
  /// host waiting for it shows how far it is. Gives up within about 100 ms
  /// of `progress.cancel` (transient shutting_down). The errors are the
  /// download's (a digest or length mismatch deletes the partial file),
  /// storage_full when the stage's disk is full, access_denied when the
  /// directory cannot be written.
  caf::expected<std::string> copy_of(const fill_request& req, fill_progress& progress);

  /// Deletes the copy of `img` if its bytes no longer match its digest
  /// (changed on the node's disk since it was verified): a fill that failed
  /// a digest or length check asks, since the fault may also be its own
  /// host's resumed prefix. True if it was deleted.
  bool discard_if_bad(const image_source& img);

  /// Deletes this entry's files whose stem (stem_of) is not in
  /// `kept_stems`: after a reload removed an image or changed its digest.
  /// A copy being fetched right now is left alone.
  void keep_only(const std::set<std::string>& kept_stems);

  /// The stem of an image's files, as copy_of names them.
  std::string stem_of(const image_source& img) const;

  /// Mirror reads so far (fetches started, resumed ones included): what a
  /// test counts against the hosts served.
  uint64_t fetches() const { return fetches_.load(); }

  const std::string& dir() const { return dir_; }

private:
  image_stage(std::string dir, std::string entry) : dir_(std::move(dir)), entry_(std::move(entry)) {}

  struct slot {
    bool fetching = false;
    uint64_t attempts = 0; // fetches ended, so a waiter knows when its fetch ended
    caf::error last;       // the error of the last fetch that ended, if any
    // The fetch's progress, written by the fetching thread, read by waiters.
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> total{0};
  };

  caf::expected<std::string> fetch(const fill_request& req, const std::string& stem, slot& s,
                                   fill_progress& progress);

  std::string dir_;
  std::string entry_;
  std::mutex mtx_;
  std::condition_variable changed_;
  std::map<std::string, slot> slots_; // by stem
  std::atomic<uint64_t> fetches_{0};
};

using image_stage_ptr = std::shared_ptr<image_stage>;

} // namespace egress::images
