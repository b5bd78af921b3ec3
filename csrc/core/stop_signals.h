// SIGTERM and SIGINT as a request to stop, taken while a StopSignals lives: trident-train
// finishes its iteration and saves a checkpoint, trident-text-generation-server finishes its
// request and closes. The handlers it replaced come back when it goes.
#pragma once

namespace trident {

class StopSignals {
 public:
  StopSignals();  // clears an earlier request first
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*term_)(int);
  void (*int_)(int);
};

// Whether SIGTERM or SIGINT came since the last StopSignals was made (by any thread: the
// signal may be taken by another one, such as Open MPI's progress thread).
bool stop_signal_received();

}  // namespace trident
