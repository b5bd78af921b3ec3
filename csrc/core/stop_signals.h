// SIGTERM and SIGINT as a request to stop, taken while a StopSignals lives: trident-train
// finishes its iteration and saves a checkpoint, trident-text-generation-server finishes its
// request and closes. The handlers it replaced come back when it goes. One made while
// another lives does nothing (it neither clears a request nor reinstalls): trident-train's
// main holds one from its start, so that a signal during the start-up (a checkpoint that
// takes minutes to load) is a request too, and Trainer::train's is then the inner one.
#pragma once

namespace trident {

class StopSignals {
 public:
  StopSignals();  // clears an earlier request first
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*term_)(int) = nullptr;  // the outermost one's: the handlers it replaced
  void (*int_)(int) = nullptr;
};

// Whether SIGTERM or SIGINT came since the outermost living StopSignals was made (by any
// thread: the signal may be taken by another one, such as Open MPI's progress thread).
bool stop_signal_received();

}  // namespace trident
