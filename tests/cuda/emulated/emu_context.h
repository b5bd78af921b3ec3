// Fibers' execution contexts for the CPU emulators of CUDA kernels (emu_runtime.h and
// test_cuda_attention_emulated.cpp): make_context starts a function on its own stack,
// switch_context saves one context and continues another.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <cstdint>

namespace emu {

// ---- fibers' execution contexts ---------------------------------------------------------
// x86-64: a minimal switch of the callee-saved registers, the stack pointer and the FP
// control words (no system call, unlike swapcontext, which saves the signal mask: ~40x
// faster, which is what lets 1024-thread blocks and 1000-block grids run in seconds).
// Elsewhere, and under AddressSanitizer (which follows swapcontext's stack changes, not
// this switch's): ucontext.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define EMU_REGISTER_SWITCH 1
#endif
struct Context {
#if defined(EMU_REGISTER_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
};

#if defined(EMU_REGISTER_SWITCH)
// GCC must treat a call as a full call: with its body visible, -fipa-ra could keep values
// in caller-saved registers across it (the other fibers run in between and clobber them).
#if defined(__clang__)
#define EMU_OPAQUE_CALL __attribute__((naked, noinline))
#else
#define EMU_OPAQUE_CALL __attribute__((naked, noinline, noipa))
#endif
// Saves the current context's registers on its stack and its stack pointer in *save,
// then continues the context whose stack pointer is `load`.
extern "C" EMU_OPAQUE_CALL inline void emu_switch_x86_64(void** /*save*/, void* /*load*/) {
  __asm__ volatile(
      "pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "subq $8, %rsp\n\t"
      "stmxcsr (%rsp)\n\t"
      "fnstcw 4(%rsp)\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "ldmxcsr (%rsp)\n\t"
      "fldcw 4(%rsp)\n\t"
      "addq $8, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}
#endif

inline void switch_context(Context& from, Context& to) {
#if defined(EMU_REGISTER_SWITCH)
  emu_switch_x86_64(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// A context that starts entry() (which must never return) on the given stack.
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
#if defined(EMU_REGISTER_SWITCH)
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* w = reinterpret_cast<uint64_t*>(top);
  *--w = 0;                                    // entry's own "return address" slot (rsp % 16 == 8)
  *--w = reinterpret_cast<uint64_t>(entry);    // popped by `ret`
  for (int r = 0; r < 6; ++r) *--w = 0;        // rbp rbx r12 r13 r14 r15
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
  *--w = static_cast<uint64_t>(mxcsr) | static_cast<uint64_t>(fpucw) << 32;
  c.sp = w;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
#endif
}

}  // namespace emu
