# Writes OUT: a header defining GNNRT_COMPILER_ID, a hash of the compiler's
# sources (SOURCES, separated by |). It is part of every program-cache key,
# so editing a pass, an op or the executor invalidates cached programs.
string(REPLACE "|" ";" files "${SOURCES}")
set(all "")
foreach(f IN LISTS files)
  file(SHA256 "${f}" h)
  string(APPEND all "${h}")
endforeach()
string(SHA256 id "${all}")
string(SUBSTRING "${id}" 0 16 id)
file(WRITE "${OUT}.tmp" "#define GNNRT_COMPILER_ID \"${id}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
