# cmake -DSRCS="<dir>/attn_params.cuh;..." -DDST=<out.inc> -P emulate_attention.cmake
#
# Copies the device code of the attention kernels and their launch plans (the headers of
# kernels/cuda/attention/, in include order) for test_cuda_attention_emulated.cpp, which
# compiles it as host C++ and runs it on emulated warps. From each header it takes what lies
# inside `namespace trident::cuda {` + `namespace {` ... `}  // namespace`. attn_ptx.cuh, the
# inline-PTX primitives (cp.async, ldmatrix, mma.sync, wgmma), is left out: the test defines
# emulated versions with the same signatures. Fails loudly when a marker is missing or inline
# asm turns up elsewhere.
foreach(var SRCS DST)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "emulate_attention.cmake: -D${var}=... is required")
  endif()
endforeach()
set(open_marker "namespace trident::cuda {\nnamespace {\n")
set(close_marker "}  // namespace\n}  // namespace trident::cuda")
set(body "")
foreach(src IN LISTS SRCS)
  get_filename_component(name "${src}" NAME)
  if(name STREQUAL "attn_ptx.cuh")
    continue()
  endif()
  file(READ "${src}" text)
  string(FIND "${text}" "${open_marker}" begin)
  string(FIND "${text}" "${close_marker}" end REVERSE)
  if(begin LESS 0 OR end LESS begin)
    message(FATAL_ERROR "emulate_attention.cmake: ${src} must keep its code in `namespace trident::cuda {` + "
                        "`namespace {` ... `}  // namespace` + `}  // namespace trident::cuda`")
  endif()
  string(LENGTH "${open_marker}" open_len)
  math(EXPR begin "${begin} + ${open_len}")
  math(EXPR len "${end} - ${begin}")
  string(SUBSTRING "${text}" ${begin} ${len} part)
  if(part MATCHES "(^|[^A-Za-z_0-9])(asm|__asm__)[ \t]*(volatile[ \t]*|__volatile__[ \t]*)?\\(")
    message(FATAL_ERROR "emulate_attention.cmake: inline asm in ${src}: the CPU emulator cannot run it; "
                        "put PTX primitives in attn_ptx.cuh and give them emulated twins in the test")
  endif()
  string(APPEND body "// ---- ${name}\n${part}")
endforeach()
string(REPLACE "extern __shared__ __align__(16) unsigned char smem_raw[];" "unsigned char* smem_raw = emu_smem;"
       body "${body}")
file(WRITE "${DST}" "// Generated from kernels/cuda/attention/*.cuh by emulate_attention.cmake: do not edit.\n"
                    "namespace trident::cuda {\nnamespace {\n${body}}  // namespace\n}  // namespace trident::cuda\n")
