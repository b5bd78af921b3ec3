// SIGTERM and SIGINT (and one more signal, if asked) as a request to stop, taken while a
// StopSignals lives: trident-train finishes its iteration and saves a checkpoint,
// trident-text-generation-server finishes its request and closes. The handlers it replaced come back when it goes. One made while
// another lives does nothing (it neither clears a request nor reinstalls): trident-train's
// main holds one from its start, so that a signal during the start-up (a checkpoint that
// takes minutes to load) is a request too, and Trainer::train's is then the inner one.
#pragma once

#include <memory>
#include <string>

namespace trident {

class StopSignals {
 public:
  // `also`: one more signal that asks to stop (Megatron's --exit-signal, such as SIGUSR1 that a
  // scheduler sends minutes before the time limit), 0 for none. Clears an earlier request first.
  explicit StopSignals(int also = 0);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct Replaced;                     // the outermost one's: the handlers it replaced, whole
  std::unique_ptr<Replaced> replaced_;  // (sigaction's, flags and all)
};

// Whether SIGTERM, SIGINT (or the outermost's `also` signal) came since the outermost living
// StopSignals was made (by any thread: the signal may be taken by another one, such as Open
// MPI's progress thread).
bool stop_signal_received();

// The number of the signal that Megatron's --exit-signal names ("SIGUSR1"; Python's
// signal.Signals names), one of catchable_signal_names(); 0 for another name.
int catchable_signal_named(const std::string& name);
// "SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGXCPU, SIGPWR".
std::string catchable_signal_names();

}  // namespace trident
