#include "train/resume.hpp"

#include "checkpoint/commit.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/agree.hpp"


namespace trident {


std::string choose_resume_checkpoint(Communicator& world, const CheckpointDir& ckdir, bool resume,
                                     const std::string& resume_path, bool verify, const ModelSchema& schema) {
  std::string chosen;
  Timer timer;
  if (!resume) return chosen;
  if (!resume_path.empty()) {
    // A run or checkpoint directory, or its `latest` pointer, means its newest checkpoint.
    run_agreed(world, "", [&] {
      chosen = resolve_checkpoint_path(resume_path);
    });
    if (verify)
      run_agreed(world, "", [&] {
        CheckpointReader rd(chosen, world);
        require_intact(rd, world, "resume from another one, or set [checkpoint] verify_on_resume = false", schema);
      });
  } else {
    // The newest committed checkpoint that is complete (checksums verified; a damaged or
    // half-written one is reported and skipped).
    std::size_t tried = 0;
    auto newest = ckdir.newest_complete(world, verify, schema, &tried);
    if (newest) chosen = *newest;
    else if (tried > 0)
      // Checkpoints exist but none is usable: starting again from step 0 would supersede them
      // and the metrics of their steps, so stop and let the user decide (nothing was changed).
      throw CheckpointError("resume: all " + std::to_string(tried) + " checkpoint(s) in " + ckdir.dir() +
                                " are incomplete or damaged (reasons above); nothing was changed. Resume from a "
                                "good copy with --resume PATH, or move the damaged files away (or use "
                                "another out_dir) to start from step 0",
                            true);
    else log::info("resume: no checkpoint in %s yet, starting from step 0", ckdir.dir().c_str());
  }
  if (!chosen.empty() && verify)
    log::info("resume: %s verified (XXH64 checksum of every shard dataset) in %.2f s", chosen.c_str(),
              timer.seconds());
  return chosen;
}

}  // namespace trident
