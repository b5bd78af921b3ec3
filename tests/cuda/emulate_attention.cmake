# cmake -DSRC=kernels/cuda/cuda_attention.cu -DDST=<out.inc> -P emulate_attention.cmake
#
# Extracts the device code of the attention kernels (everything from the namespace up to
# the host launchers) for test_cuda_attention_emulated.cpp, which compiles it as host C++
# and runs it on emulated warps. The inline-PTX primitives (cp.async, ldmatrix, mma.sync)
# are cut out here; the test defines emulated versions with the same signatures.
# Fails loudly when the markers it relies on move.
file(READ "${SRC}" text)
string(FIND "${text}" "namespace trident::cuda {" begin)
string(FIND "${text}" "// Host launchers" end)
string(FIND "${text}" "__device__ __forceinline__ uint32_t smem_addr" prim_begin)
string(FIND "${text}" "// Two floats -> one register" prim_end)
foreach(pos begin end prim_begin prim_end)
  if(${pos} LESS 0)
    message(FATAL_ERROR "emulate_attention.cmake: marker for '${pos}' not found in ${SRC}; "
                        "update the markers here when restructuring cuda_attention.cu")
  endif()
endforeach()
if(NOT (begin LESS prim_begin AND prim_begin LESS prim_end AND prim_end LESS end))
  message(FATAL_ERROR "emulate_attention.cmake: markers out of order in ${SRC}")
endif()
math(EXPR head_len "${prim_begin} - ${begin}")
math(EXPR tail_len "${end} - ${prim_end}")
string(SUBSTRING "${text}" ${begin} ${head_len} head)
string(SUBSTRING "${text}" ${prim_end} ${tail_len} tail)
set(body "${head}${tail}")
string(REPLACE "extern __shared__ __align__(16) unsigned char smem_raw[];" "unsigned char* smem_raw = emu_smem;"
       body "${body}")
string(FIND "${body}" "asm" asm_pos)
if(asm_pos GREATER -1)
  message(FATAL_ERROR "emulate_attention.cmake: inline asm left outside the primitive block of ${SRC}")
endif()
file(WRITE "${DST}" "// Generated from ${SRC} by emulate_attention.cmake: do not edit.\n${body}\n}  // namespace\n}  // namespace trident::cuda\n")
