// checkpoint_config.h: the [checkpoint] section: where and how often to save.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/schema.h"

namespace gtrain {

struct CheckpointConfig {
  std::string dir;        // "" = <run dir>/checkpoints
  int64_t interval = 0;   // steps between saves (0 = only at the end)
  int64_t keep = 2;       // newest checkpoints kept on disk
  bool at_end = true;     // save when training finishes

  template <class V>
  void visit(V& v) {
    v("dir", dir, "Checkpoint directory (\"\" = <run dir>/checkpoints).");
    v("interval", interval, "Steps between checkpoints (0 = only at the end).", cfg::at_least(0));
    v("keep", keep, "Newest checkpoints kept; older ones are deleted after a newer one is complete.", cfg::at_least(1));
    v("at_end", at_end, "Save a checkpoint when training finishes.");
  }
};

}  // namespace gtrain
