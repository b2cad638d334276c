# The layer check accepts includes that go down only (and a module's own header from its
# other files), so the refusal above is about direction, not about any include at all.
set(dir ${CMAKE_CURRENT_BINARY_DIR}/layers-scratch-ok)
file(REMOVE_RECURSE ${dir})
file(WRITE ${dir}/low.h "#include <stdio.h>\n")
file(WRITE ${dir}/high.h "#include \"low.h\"\n")
file(WRITE ${dir}/high_part.c "#include \"high.h\"\n#include \"low.h\"\n")
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/layers.cmake)
botgate_check_layers(${dir} "low|high")
