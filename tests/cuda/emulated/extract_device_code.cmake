# cmake -DSRC=kernels/cuda/cuda_<name>.cu -DDST=<out.inc> -DNAME=<name> -P extract_device_code.cmake
#
# Copies the device code of one kernel file for the CPU emulator (emu_runtime.h): every
# anonymous-namespace block `namespace {` ... `}  // namespace` inside
# `namespace trident::cuda {` (the kernels and their device helpers; the host launchers
# come after it and are not copied). The blocks land in namespace trident::cuda::emu_<NAME>
# so several kernel files can share one test file, with #line directives so compiler
# errors point at the .cu. Shared-memory declarations are rewritten into per-block,
# poisoned storage:
#   __shared__ [__align__(n)] T name[..]..;  ->  static char key; auto& name = emu::shared_var<T[..]..>(&key);
#   extern __shared__ [__align__(n)] T name[];  ->  T* name = emu::dynamic_smem<T>();
# (other __shared__ forms fall back to `static`, see emu_runtime.h). Launches in host
# helpers inside the block become emulated launches:
#   kernel<T><<<grid, block, smem, stream>>>(args)  ->  ::emu::LaunchConfig(grid, block, smem, stream)(kernel<T>, args)
# The .inc starts with #include "emu_cuda_common.h" (the emulator and cuda_common.cuh as
# host code), then the file's own #include lines except CUB/Thrust/libcu++/cooperative
# groups. Fails loudly when the markers are missing, when the block holds inline PTX, no
# kernel, or a launch / `extern __shared__` form it cannot rewrite.
cmake_minimum_required(VERSION 3.24)
foreach(var SRC DST NAME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "extract_device_code.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${SRC}" text)
set(fix_hint "kernel files must keep their kernels in `namespace trident::cuda {` + `namespace {` ... "
             "`}  // namespace` before the host launchers (or update tests/cuda/emulated/extract_device_code.cmake)")
string(JOIN "" fix_hint ${fix_hint})

string(FIND "${text}" "namespace trident::cuda {" ns)
if(ns LESS 0)
  message(FATAL_ERROR "extract_device_code.cmake: no `namespace trident::cuda {` in ${SRC}; ${fix_hint}")
endif()
# One marker per anonymous-namespace end, whatever the spacing of `}  // namespace`.
string(REGEX REPLACE "\n}[ \t]*//[ \t]*(anonymous[ \t]+)?namespace[ \t]*\n" "\n@EMU_ANON_END@\n" text "${text}")

set(out "// Generated from ${SRC} by extract_device_code.cmake: do not edit.\n#pragma once\n")
# The emulator first (it must see cuda_common.cuh before the kernel file's includes do),
# then the file's own includes (its helper headers), except device libraries that cannot
# compile as host code.
string(APPEND out "#include \"emu_cuda_common.h\"\n")
string(SUBSTRING "${text}" 0 ${ns} preamble)
string(REGEX MATCHALL "#include[ \t]*[<\"][^>\"\n]+[>\"]" includes "${preamble}")
foreach(inc IN LISTS includes)
  if(NOT inc MATCHES "[<\"](cub|thrust|cuda/|cooperative_groups)")
    string(APPEND out "${inc}\n")
  endif()
endforeach()
string(APPEND out "namespace trident::cuda::emu_${NAME} {\nnamespace {\n")
set(pos ${ns})
set(blocks 0)
while(TRUE)
  string(SUBSTRING "${text}" ${pos} -1 rest)
  string(FIND "${rest}" "\nnamespace {\n" open)
  if(open LESS 0)
    break()
  endif()
  math(EXPR begin "${pos} + ${open} + 13")  # just after "\nnamespace {\n"
  string(SUBSTRING "${text}" ${begin} -1 rest)
  string(FIND "${rest}" "\n@EMU_ANON_END@\n" close)
  if(close LESS 0)
    message(FATAL_ERROR "extract_device_code.cmake: `namespace {` in ${SRC} is not closed by a "
                        "`}  // namespace` line; ${fix_hint}")
  endif()
  string(SUBSTRING "${text}" ${begin} ${close} body)
  # Line of `begin` in the original file (the marker replacement kept every newline).
  string(SUBSTRING "${text}" 0 ${begin} before)
  string(REGEX REPLACE "[^\n]" "" newlines "${before}")
  string(LENGTH "${newlines}" line)
  math(EXPR line "${line} + 1")
  string(APPEND out "#line ${line} \"${SRC}\"\n${body}\n")
  math(EXPR blocks "${blocks} + 1")
  math(EXPR pos "${begin} + ${close} + 1")
endwhile()
if(blocks EQUAL 0)
  message(FATAL_ERROR "extract_device_code.cmake: no `namespace {` block after `namespace trident::cuda {` "
                      "in ${SRC}; ${fix_hint}")
endif()
string(APPEND out "}  // namespace\n}  // namespace trident::cuda::emu_${NAME}\n")

if(NOT out MATCHES "__global__")
  message(FATAL_ERROR "extract_device_code.cmake: no __global__ kernel in the anonymous namespace of ${SRC}; "
                      "${fix_hint}")
endif()
if(out MATCHES "(^|[^A-Za-z_0-9])(asm|__asm__)[ \t]*(volatile[ \t]*|__volatile__[ \t]*)?\\(")
  message(FATAL_ERROR "extract_device_code.cmake: inline asm in the device code of ${SRC}; the CPU emulator "
                      "cannot run PTX: move it into a helper with an emulated twin (as kernels/cuda/attention/attn_ptx.cuh has)")
endif()

# Dynamic shared memory.
set(ident "[A-Za-z_][A-Za-z_0-9]*")
set(align "(__align__[ \t]*\\([ \t]*[0-9]+[ \t]*\\)[ \t]+)?")
# A type: words (unsigned int), an optional scope (a::b) and template arguments (Vec<T, 4>).
set(type "((${ident}[ \t]+)*${ident}(::${ident})*(<[^;<>]*>)?)")
string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+${align}${type}[ \t]+(${ident})[ \t]*\\[[ \t]*\\][ \t]*;"
       "\\2* \\6 = ::emu::dynamic_smem<\\2>();" out "${out}")
if(out MATCHES "extern[ \t]+__shared__")
  message(FATAL_ERROR "extract_device_code.cmake: an `extern __shared__` declaration in ${SRC} has a form this "
                      "script does not rewrite (expected `extern __shared__ [__align__(n)] T name[];`)")
endif()
# Static shared memory: one declarator, any dims.
string(REGEX REPLACE
       "__shared__[ \t]+${align}${type}[ \t]+(${ident})((\\[[^];]*\\])*)[ \t]*;"
       "static char emu_shared_key_\\6; auto& \\6 = ::emu::shared_var<\\2\\7>(&emu_shared_key_\\6);"
       out "${out}")

# Kernel launches in host helpers of the block (kernel<<<grid, block[, smem[, stream]]>>>(args)):
# run on the emulator. Template arguments may nest one level (f<T, kVec16<T>>).
set(targs "(<([^;<>()]|<[^;<>()]*>)*>)?")
string(REGEX REPLACE "(${ident}${targs})[ \t]*<<<([^;]*)>>>[ \t]*\\([ \t]*\\)"
       "::emu::LaunchConfig(\\4)(\\1)" out "${out}")
string(REGEX REPLACE "(${ident}${targs})[ \t]*<<<([^;]*)>>>[ \t]*\\("
       "::emu::LaunchConfig(\\4)(\\1, " out "${out}")
if(out MATCHES "<<<")
  message(FATAL_ERROR "extract_device_code.cmake: a kernel launch in the anonymous namespace of ${SRC} has a form "
                      "this script does not rewrite (expected `kernel[<targs>]<<<config>>>(args)`)")
endif()

file(WRITE "${DST}.tmp" "${out}")
file(COPY_FILE "${DST}.tmp" "${DST}" ONLY_IF_DIFFERENT)
file(REMOVE "${DST}.tmp")
